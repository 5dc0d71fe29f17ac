//! Criterion benches of CLIP's counters: a count-min sketch's batch add (1024 × 2, as
//! `clip-tofino`, and 65,536 × 4) and a Bloom filter's insert and lookup (2 × 65,536), batches
//! of 32 flow keys.

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};
use tern_table::bloom::Bloom;
use tern_table::sketch::CountMin;

const BATCH: usize = 32;

fn keys(n: usize) -> Vec<u64> {
    let mut r = rand::rngs::SmallRng::seed_from_u64(7);
    (0..n).map(|_| r.random_range(0..10_000u64)).collect()
}

fn sketch(c: &mut Criterion) {
    let mut g = c.benchmark_group("count_min_add");
    g.throughput(Throughput::Elements(BATCH as u64));
    let ks = keys(BATCH);
    for (ways, width) in [(2, 1024), (4, 65_536)] {
        let mut s = CountMin::new(ways, width).unwrap();
        let mut out = Vec::with_capacity(BATCH);
        g.bench_function(BenchmarkId::new("batch32", format!("{ways}x{width}")), |b| {
            b.iter(|| {
                out.clear();
                s.add_batch(black_box(&ks), &mut out);
                black_box(&out);
            })
        });
    }
    g.finish();
}

fn bloom(c: &mut Criterion) {
    let mut g = c.benchmark_group("bloom");
    g.throughput(Throughput::Elements(BATCH as u64));
    let ks = keys(BATCH);
    let mut f = Bloom::new(2, 1 << 16).unwrap();
    for k in keys(5_000) {
        f.insert(k);
    }
    g.bench_function("insert_batch32", |b| {
        b.iter(|| {
            let mut n = 0;
            for &k in black_box(&ks) {
                n += usize::from(f.insert(k));
            }
            black_box(n)
        })
    });
    g.bench_function("contains_batch32", |b| b.iter(|| black_box(&ks).iter().filter(|&&k| f.contains(k)).count()));
    g.finish();
}

criterion_group!(benches, sketch, bloom);
criterion_main!(benches);
