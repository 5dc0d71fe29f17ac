//! Criterion benches of the masked-key table (a switch pipeline's ternary and LPM tables) against
//! its naive twin: 1,000 routes of 8 prefix lengths over a 32-bit destination, and 256 ACL
//! entries of 4 masks over two words; lookups of 32 keys.

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use rand::{Rng, SeedableRng};
use tern_table::masked::MaskedTable;
use tern_table::naive::NaiveMasked;

const BATCH: usize = 32;

/// (key, mask, rank) entries: `n` of `masks` distinct masks.
fn entries(n: usize, masks: &[[u64; 2]], seed: u64) -> Vec<([u64; 2], [u64; 2], u128)> {
    let mut r = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let m = masks[i % masks.len()];
            let k = [r.random::<u32>() as u64 & m[0], r.random::<u16>() as u64 & m[1]];
            (k, m, ((m[0].count_ones() as u128) << 64) | (n - i) as u128)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let prefixes: Vec<[u64; 2]> =
        [8u32, 12, 16, 20, 22, 24, 28, 32].iter().map(|&l| [(0xffff_ffffu64 << (32 - l)) & 0xffff_ffff, 0]).collect();
    let acl: Vec<[u64; 2]> = vec![[0xffff_ff00, 0xffff], [0xffff_0000, 0], [0, 0xffff], [0xff00_0000, 0xff00]];
    let mut g = c.benchmark_group("masked_lookup");
    g.throughput(Throughput::Elements(BATCH as u64));
    for (name, es) in [("routes_1000x8masks", entries(1000, &prefixes, 3)), ("acl_256x4masks", entries(256, &acl, 5))] {
        let mut fast = MaskedTable::new(2);
        let mut slow = NaiveMasked::new();
        for (i, (k, m, r)) in es.iter().enumerate() {
            fast.insert(k, m, *r, i);
            slow.insert(k, m, *r, i);
        }
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        // Half the keys an entry's own (hits), half random.
        let keys: Vec<[u64; 2]> = (0..BATCH)
            .map(|i| {
                if i % 2 == 0 {
                    es[rng.random_range(0..es.len())].0
                } else {
                    [rng.random::<u32>() as u64, rng.random::<u16>() as u64]
                }
            })
            .collect();
        let mut scratch = Vec::new();
        g.bench_function(BenchmarkId::new("tuple_space", name), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for k in black_box(&keys) {
                    n += fast.lookup(k, &mut scratch).copied().unwrap_or(0);
                }
                black_box(n)
            })
        });
        g.bench_function(BenchmarkId::new("naive", name), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for k in black_box(&keys) {
                    n += slow.lookup(k).copied().unwrap_or(0);
                }
                black_box(n)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
