//! Criterion benches of the LPM tables: batch lookups on the AccelSDP evaluation's 1K random
//! prefixes and on a 100K-prefix table with a realistic length mix, and rule writes.

use std::net::{Ipv4Addr, Ipv6Addr};

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use ipnet::{Ipv4Net, Ipv6Net};
use tern_table::lpm::{Lpm4, Lpm6};
use tern_table::workload;

const LOOKUPS: usize = 4096;

fn lpm4(c: &mut Criterion) {
    let mut g = c.benchmark_group("lpm4_lookup");
    g.throughput(Throughput::Elements(LOOKUPS as u64));
    for (name, prefixes) in [
        ("1k_random", workload::ipv4_prefixes(1000, &[], 1)),
        ("100k_realistic", workload::ipv4_prefixes(100_000, workload::IPV4_LENGTH_MIX, 2)),
    ] {
        let mut t = Lpm4::new();
        for (i, &(a, len)) in prefixes.iter().enumerate() {
            t.insert(Ipv4Net::new_assert(Ipv4Addr::from(a), len as u8), i as u32).unwrap();
        }
        let keys = workload::ipv4_lookups(&prefixes, LOOKUPS, 900, 3);
        let mut out = vec![None; LOOKUPS];
        g.bench_function(BenchmarkId::new("batch", name), |b| {
            b.iter(|| {
                t.lookup_batch(black_box(&keys), &mut out);
                black_box(&out);
            })
        });
        let mut raw = vec![0u32; LOOKUPS];
        g.bench_function(BenchmarkId::new("batch_raw", name), |b| {
            b.iter(|| {
                t.lookup_batch_raw(black_box(&keys), &mut raw);
                black_box(&raw);
            })
        });
        g.bench_function(BenchmarkId::new("single", name), |b| {
            b.iter(|| {
                for (o, &k) in out.iter_mut().zip(black_box(&keys)) {
                    *o = t.lookup_key(k);
                }
                black_box(&out);
            })
        });
    }
    g.finish();
}

fn lpm6(c: &mut Criterion) {
    let mut g = c.benchmark_group("lpm6_lookup");
    g.throughput(Throughput::Elements(LOOKUPS as u64));
    for (name, prefixes) in [
        ("1k_random", workload::ipv6_prefixes(1000, &[], 4)),
        ("100k_realistic", workload::ipv6_prefixes(100_000, workload::IPV6_LENGTH_MIX, 5)),
    ] {
        let mut t = Lpm6::new();
        for (i, &(a, len)) in prefixes.iter().enumerate() {
            t.insert(Ipv6Net::new_assert(Ipv6Addr::from(a), len as u8), i as u32).unwrap();
        }
        let keys = workload::ipv6_lookups(&prefixes, LOOKUPS, 900, 6);
        let mut out = vec![None; LOOKUPS];
        g.bench_function(BenchmarkId::new("batch", name), |b| {
            b.iter(|| {
                t.lookup_batch(black_box(&keys), &mut out);
                black_box(&out);
            })
        });
    }
    g.finish();
}

fn writes(c: &mut Criterion) {
    // Populate then delete 1K rules: the operations of AccelSDP Table 5.
    let mut g = c.benchmark_group("lpm_write");
    let v4: Vec<Ipv4Net> = workload::ipv4_prefixes(1000, workload::IPV4_LENGTH_MIX, 7)
        .into_iter()
        .map(|(a, l)| Ipv4Net::new_assert(Ipv4Addr::from(a), l as u8))
        .collect();
    let v6: Vec<Ipv6Net> = workload::ipv6_prefixes(1000, workload::IPV6_LENGTH_MIX, 8)
        .into_iter()
        .map(|(a, l)| Ipv6Net::new_assert(Ipv6Addr::from(a), l as u8))
        .collect();
    g.throughput(Throughput::Elements(2 * v4.len() as u64));
    let mut t4 = Lpm4::new();
    g.bench_function("lpm4_populate_delete_1k", |b| {
        b.iter(|| {
            for (i, n) in v4.iter().enumerate() {
                t4.insert(*n, i as u32).unwrap();
            }
            for n in &v4 {
                t4.remove(*n).unwrap();
            }
        })
    });
    let mut t6 = Lpm6::new();
    g.bench_function("lpm6_populate_delete_1k", |b| {
        b.iter(|| {
            for (i, n) in v6.iter().enumerate() {
                t6.insert(*n, i as u32).unwrap();
            }
            for n in &v6 {
                t6.remove(*n).unwrap();
            }
        })
    });
    g.finish();
}

criterion_group!(benches, lpm4, lpm6, writes);
criterion_main!(benches);
