//! Seeded table contents and lookup keys for benchmarks and tests, so that Tern's tables and the
//! baselines they are compared with (DPDK's `rte_lpm` / `rte_hash`) see the same entries and the
//! same keys.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::em::{FiveTuple4, FiveTuple6};
use crate::lpm::LpmKey;

/// Prefix lengths of a realistic IPv4 routing table, as (length, weight in per mille): the shape
/// of today's BGP tables, where over half of the prefixes are /24s and longer ones are rare.
pub const IPV4_LENGTH_MIX: &[(u32, u32)] = &[
    (8, 1),
    (12, 2),
    (13, 3),
    (14, 6),
    (15, 10),
    (16, 40),
    (17, 18),
    (18, 30),
    (19, 55),
    (20, 60),
    (21, 70),
    (22, 110),
    (23, 90),
    (24, 470),
    (25, 8),
    (26, 8),
    (27, 6),
    (28, 5),
    (29, 4),
    (30, 2),
    (32, 2),
];

/// Prefix lengths of a realistic IPv6 routing table (per mille): mostly /48 and /32–/44.
pub const IPV6_LENGTH_MIX: &[(u32, u32)] =
    &[(28, 10), (29, 30), (32, 180), (36, 40), (40, 60), (44, 90), (46, 20), (48, 520), (56, 30), (64, 20)];

fn pick_len(rng: &mut SmallRng, mix: &[(u32, u32)]) -> u32 {
    let total: u32 = mix.iter().map(|m| m.1).sum();
    let mut x = rng.random_range(0..total);
    for &(len, w) in mix {
        if x < w {
            return len;
        }
        x -= w;
    }
    mix[mix.len() - 1].0
}

/// `n` distinct values drawn by `draw` from one seeded generator, in draw order.
fn distinct<T: Copy + Eq + std::hash::Hash>(n: usize, seed: u64, mut draw: impl FnMut(&mut SmallRng) -> T) -> Vec<T> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut seen = hashbrown::HashSet::with_capacity(n);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let t = draw(&mut rng);
        if seen.insert(t) {
            out.push(t);
        }
    }
    out
}

/// `n` distinct IPv4 prefixes as (address, length), lengths drawn from `mix` (or uniformly from
/// /8–/32 when `mix` is empty: the "random prefixes" case).
pub fn ipv4_prefixes(n: usize, mix: &[(u32, u32)], seed: u64) -> Vec<(u32, u32)> {
    distinct(n, seed, |rng| {
        let len = if mix.is_empty() { rng.random_range(8..=32) } else { pick_len(rng, mix) };
        // Public-looking space: first octet 1..=223.
        (rng.random_range(0x0100_0000..0xe000_0000u32).masked(len), len)
    })
}

/// `n` distinct IPv6 prefixes inside 2000::/3, lengths drawn from `mix` (uniform /16–/128 when
/// empty).
pub fn ipv6_prefixes(n: usize, mix: &[(u32, u32)], seed: u64) -> Vec<(u128, u32)> {
    distinct(n, seed, |rng| {
        let len = if mix.is_empty() { rng.random_range(16..=128) } else { pick_len(rng, mix) };
        (((rng.random::<u128>() >> 3) | (1u128 << 125)).masked(len), len)
    })
}

/// `n` lookup keys: `hit_per_mille` of them inside a random prefix of `prefixes` (random host
/// bits), the rest uniformly random.
fn lookups<K>(prefixes: &[(K, u32)], n: usize, hit_per_mille: u32, seed: u64) -> Vec<K>
where
    K: LpmKey + std::ops::BitOr<Output = K> + std::ops::Shr<u32, Output = K>,
    rand::distr::StandardUniform: rand::distr::Distribution<K>,
{
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            if prefixes.is_empty() || rng.random_range(0..1000) >= hit_per_mille {
                return rng.random();
            }
            let (a, len) = prefixes[rng.random_range(0..prefixes.len())];
            let host: K = rng.random();
            if len == K::BITS { a } else { a | (host >> len) }
        })
        .collect()
}

/// `n` IPv4 lookup addresses: `hit_per_mille` of them inside a random prefix of `prefixes` (random
/// host bits), the rest uniformly random.
pub fn ipv4_lookups(prefixes: &[(u32, u32)], n: usize, hit_per_mille: u32, seed: u64) -> Vec<u32> {
    lookups(prefixes, n, hit_per_mille, seed)
}

/// `n` IPv6 lookup addresses, as [`ipv4_lookups`].
pub fn ipv6_lookups(prefixes: &[(u128, u32)], n: usize, hit_per_mille: u32, seed: u64) -> Vec<u128> {
    lookups(prefixes, n, hit_per_mille, seed)
}

/// `n` distinct random IPv4 5-tuples (TCP or UDP).
pub fn five_tuples4(n: usize, seed: u64) -> Vec<FiveTuple4> {
    distinct(n, seed, |rng| FiveTuple4 {
        src: rng.random(),
        dst: rng.random(),
        proto: if rng.random() { 6 } else { 17 },
        src_port: rng.random(),
        dst_port: rng.random(),
    })
}

/// `n` distinct random IPv6 5-tuples (TCP or UDP).
pub fn five_tuples6(n: usize, seed: u64) -> Vec<FiveTuple6> {
    distinct(n, seed, |rng| FiveTuple6 {
        src: rng.random(),
        dst: rng.random(),
        proto: if rng.random() { 6 } else { 17 },
        src_port: rng.random(),
        dst_port: rng.random(),
    })
}

/// `n` lookup keys drawn from `keys` (hits) with `hit_per_mille`, the rest fresh random tuples.
pub fn em_lookups<K: Copy>(
    keys: &[K],
    n: usize,
    hit_per_mille: u32,
    seed: u64,
    mut fresh: impl FnMut(&mut SmallRng) -> K,
) -> Vec<K> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            if !keys.is_empty() && rng.random_range(0..1000) < hit_per_mille {
                keys[rng.random_range(0..keys.len())]
            } else {
                fresh(&mut rng)
            }
        })
        .collect()
}
