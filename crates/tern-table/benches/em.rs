//! Criterion benches of the 5-tuple exact-match table: batch lookups at 1K and 100K entries
//! (IPv4 and IPv6 tuples) and writes.

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use rand::Rng;
use tern_table::em::{EmKey, ExactMatch, FiveTuple4, FiveTuple6, PackedTuple4, Seed};
use tern_table::workload;

const LOOKUPS: usize = 4096;

/// Batch lookups at 1K and 100K entries of the keys `keys(n)` gives, 90% hits (misses from
/// `fresh`).
fn lookups<K: EmKey>(
    c: &mut Criterion,
    group: &str,
    keys: impl Fn(usize) -> Vec<K>,
    look_seed: u64,
    fresh: impl Fn(&mut rand::rngs::SmallRng) -> K + Copy,
) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(LOOKUPS as u64));
    for n in [1000, 100_000] {
        let keys = keys(n);
        let mut t = ExactMatch::with_seed(Seed::from_u64(9));
        for (i, k) in keys.iter().enumerate() {
            t.insert(*k, i as u32);
        }
        let look = workload::em_lookups(&keys, LOOKUPS, 900, look_seed, fresh);
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

/// IPv4 keys as the fast path's table holds them, packed ([`PackedTuple4`]).
fn em4(c: &mut Criterion) {
    let fresh = |r: &mut rand::rngs::SmallRng| {
        PackedTuple4::from(FiveTuple4 {
            src: r.random(),
            dst: r.random(),
            proto: 17,
            src_port: r.random(),
            dst_port: r.random(),
        })
    };
    let keys = |n| workload::five_tuples4(n, 1).into_iter().map(PackedTuple4::from).collect();
    lookups(c, "em4_lookup", keys, 2, fresh);
}

fn em6(c: &mut Criterion) {
    let fresh = |r: &mut rand::rngs::SmallRng| FiveTuple6 {
        src: r.random(),
        dst: r.random(),
        proto: 6,
        src_port: r.random(),
        dst_port: r.random(),
    };
    lookups(c, "em6_lookup", |n| workload::five_tuples6(n, 3), 4, fresh);
}

fn writes(c: &mut Criterion) {
    let keys: Vec<PackedTuple4> = workload::five_tuples4(1000, 5).into_iter().map(PackedTuple4::from).collect();
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
