//! Property tests: the exact-match table agrees with the naive reference twin.

use proptest::prelude::*;
use tern_table::em::{EmKey, ExactMatch, FiveTuple4, FiveTuple6, PackedTuple4, Seed};
use tern_table::naive::NaiveExact;

#[derive(Debug, Clone)]
enum Op<K> {
    Insert(K, u32),
    Remove(K),
}

fn tuple4() -> impl Strategy<Value = FiveTuple4> {
    // Few distinct values per field, so keys collide on some fields and not others.
    (0u32..4, 0u32..4, prop_oneof![Just(6u8), Just(17u8)], 0u16..3, 0u16..3)
        .prop_map(|(src, dst, proto, src_port, dst_port)| FiveTuple4 { src, dst, proto, src_port, dst_port })
}

fn tuple6() -> impl Strategy<Value = FiveTuple6> {
    (0u128..3, 0u128..3, prop_oneof![Just(6u8), Just(17u8)], 0u16..3, 0u16..3).prop_map(
        |(s, d, proto, src_port, dst_port)| FiveTuple6 {
            src: s << 100,
            dst: d | (1 << 127),
            proto,
            src_port,
            dst_port,
        },
    )
}

fn check<K: EmKey>(ops: &[Op<K>], probes: &[K], seed: u64) -> Result<(), TestCaseError> {
    let mut fast = ExactMatch::with_seed(Seed::from_u64(seed));
    let mut naive = NaiveExact::new();
    let mut out = vec![None; probes.len()];
    for op in ops {
        match op {
            Op::Insert(k, v) => prop_assert_eq!(fast.insert(*k, *v), naive.insert(*k, *v)),
            Op::Remove(k) => prop_assert_eq!(fast.remove(k), naive.remove(k)),
        }
        prop_assert_eq!(fast.len(), naive.len());
        fast.lookup_batch(probes, &mut out);
        for (k, o) in probes.iter().zip(&out) {
            prop_assert_eq!(fast.lookup(k), naive.lookup(k));
            prop_assert_eq!(*o, naive.lookup(k));
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn em4_agrees_with_naive(
        ops in prop::collection::vec(prop_oneof![
            3 => (tuple4(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => tuple4().prop_map(Op::Remove),
        ], 1..80),
        probes in prop::collection::vec(tuple4(), 1..40),
        seed in any::<u64>(),
    ) {
        check(&ops, &probes, seed)?;
    }

    /// The packed key the fast path's table holds: the naive twin keeps the plain tuples.
    #[test]
    fn packed_em4_agrees_with_naive(
        ops in prop::collection::vec(prop_oneof![
            3 => (tuple4(), any::<u32>()).prop_map(|(k, v)| Op::Insert(PackedTuple4::from(k), v)),
            2 => tuple4().prop_map(|k| Op::Remove(PackedTuple4::from(k))),
        ], 1..80),
        probes in prop::collection::vec(tuple4().prop_map(PackedTuple4::from), 1..40),
        seed in any::<u64>(),
    ) {
        check(&ops, &probes, seed)?;
    }

    /// Packing loses nothing: every field comes back, and two tuples pack alike exactly when
    /// they are equal (so the packed table matches what the tuple table matches).
    #[test]
    fn packing_is_lossless(a in any::<(u32, u32, u8, u16, u16)>(), b in tuple4()) {
        let a = FiveTuple4 { src: a.0, dst: a.1, proto: a.2, src_port: a.3, dst_port: a.4 };
        let (pa, pb) = (PackedTuple4::from(a), PackedTuple4::from(b));
        prop_assert_eq!(pa.tuple(), a);
        prop_assert_eq!(pa.dst(), a.dst);
        prop_assert_eq!(pa == pb, a == b);
        let seed = Seed::from_u64(3);
        prop_assert_eq!(a.hash(&seed), pa.hash(&seed));
    }

    #[test]
    fn em6_agrees_with_naive(
        ops in prop::collection::vec(prop_oneof![
            3 => (tuple6(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => tuple6().prop_map(Op::Remove),
        ], 1..80),
        probes in prop::collection::vec(tuple6(), 1..40),
        seed in any::<u64>(),
    ) {
        check(&ops, &probes, seed)?;
    }
}
