//! Criterion benches of the 5-tuple exact-match table: batch lookups at 1K and 100K entries
//! (IPv4 and IPv6 tuples) and writes.

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use rand::Rng;
use tern_table::em::{ExactMatch, FiveTuple4, FiveTuple6, Seed};
use tern_table::workload;

const LOOKUPS: usize = 4096;

fn em4(c: &mut Criterion) {
    let mut g = c.benchmark_group("em4_lookup");
    g.throughput(Throughput::Elements(LOOKUPS as u64));
    for n in [1000, 100_000] {
        let keys = workload::five_tuples4(n, 1);
        let mut t = ExactMatch::with_seed(Seed::from_u64(9));
        for (i, k) in keys.iter().enumerate() {
            t.insert(*k, i as u32);
        }
        let look = workload::em_lookups(&keys, LOOKUPS, 900, 2, |r| FiveTuple4 {
            src: r.random(),
            dst: r.random(),
            proto: 17,
            src_port: r.random(),
            dst_port: r.random(),
        });
        let mut out = vec![None; LOOKUPS];
        g.bench_function(BenchmarkId::new("batch", n), |b| {
            b.iter(|| {
                t.lookup_batch(black_box(&look), &mut out);
                black_box(&out);
            })
        });
    }
    g.finish();
}

fn em6(c: &mut Criterion) {
    let mut g = c.benchmark_group("em6_lookup");
    g.throughput(Throughput::Elements(LOOKUPS as u64));
    for n in [1000, 100_000] {
        let keys = workload::five_tuples6(n, 3);
        let mut t = ExactMatch::with_seed(Seed::from_u64(9));
        for (i, k) in keys.iter().enumerate() {
            t.insert(*k, i as u32);
        }
        let look = workload::em_lookups(&keys, LOOKUPS, 900, 4, |r| FiveTuple6 {
            src: r.random(),
            dst: r.random(),
            proto: 6,
            src_port: r.random(),
            dst_port: r.random(),
        });
        let mut out = vec![None; LOOKUPS];
        g.bench_function(BenchmarkId::new("batch", n), |b| {
            b.iter(|| {
                t.lookup_batch(black_box(&look), &mut out);
                black_box(&out);
            })
        });
    }
    g.finish();
}

fn writes(c: &mut Criterion) {
    let keys = workload::five_tuples4(1000, 5);
    let mut g = c.benchmark_group("em_write");
    g.throughput(Throughput::Elements(2 * keys.len() as u64));
    let mut t = ExactMatch::with_seed(Seed::from_u64(9));
    g.bench_function("em4_populate_delete_1k", |b| {
        b.iter(|| {
            for (i, k) in keys.iter().enumerate() {
                t.insert(*k, i as u32);
            }
            for k in &keys {
                t.remove(k);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, em4, em6, writes);
criterion_main!(benches);
