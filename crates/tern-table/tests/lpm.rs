//! Property tests: the LPM tables agree with the naive reference twin after any sequence of
//! inserts, updates and removes, on single and batch lookups, and give all memory back.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};
use proptest::prelude::*;
use tern_table::lpm::{Lpm4, Lpm6, LpmKey};
use tern_table::naive::NaiveLpm;

#[derive(Debug, Clone)]
enum Op<K> {
    Insert(K, u32, u32),
    /// Remove the i-th prefix ever inserted (modulo), or a random one that may be absent.
    Remove(usize),
    RemoveAbsent(K, u32),
}

/// Lengths mostly in the interesting range (around the /24 boundary and the 8-bit levels),
/// sometimes short ones that cover the whole test universe.
fn len4() -> impl Strategy<Value = u32> {
    prop_oneof![1 => 0u32..8, 6 => 8u32..=24, 6 => 25u32..=32]
}

/// Addresses from a small universe (10.0.0.0/14 plus a little outside), so prefixes overlap.
fn addr4() -> impl Strategy<Value = u32> {
    prop_oneof![8 => (0u32..(1 << 18)).prop_map(|x| 0x0a00_0000 | (x << 4) | (x & 0xf)), 1 => any::<u32>()]
}

fn op4() -> impl Strategy<Value = Op<u32>> {
    prop_oneof![
        5 => (addr4(), len4(), 0u32..1000).prop_map(|(a, l, v)| Op::Insert(a, l, v)),
        3 => any::<usize>().prop_map(Op::Remove),
        1 => (addr4(), len4()).prop_map(|(a, l)| Op::RemoveAbsent(a, l)),
    ]
}

fn run<K: LpmKey>(
    ops: &[Op<K>],
    probes: &[K],
    net: impl Fn(K, u32) -> K::Net,
    fast: &mut tern_table::lpm::Lpm<K>,
) -> Result<(), TestCaseError> {
    let mut naive = NaiveLpm::<K>::new();
    let mut inserted: Vec<(K, u32)> = Vec::new();
    let mut out = vec![None; probes.len()];
    for op in ops {
        match *op {
            Op::Insert(a, l, v) => {
                let n = net(a, l);
                prop_assert_eq!(fast.insert(n, v).unwrap(), naive.insert(n, v));
                inserted.push((a, l));
            }
            Op::Remove(i) if !inserted.is_empty() => {
                let (a, l) = inserted[i % inserted.len()];
                let n = net(a, l);
                prop_assert_eq!(fast.remove(n).unwrap(), naive.remove(n));
            }
            Op::Remove(_) => {}
            Op::RemoveAbsent(a, l) => {
                let n = net(a, l);
                prop_assert_eq!(fast.remove(n).unwrap(), naive.remove(n));
            }
        }
        prop_assert_eq!(fast.len(), naive.len());
        // Probes: the given ones and the first address of every prefix inserted so far.
        for &k in probes.iter().chain(inserted.iter().map(|(a, _)| a)) {
            prop_assert_eq!(fast.lookup_key(k), naive.lookup_key(k), "key {:?} after {:?}", k, op);
        }
        fast.lookup_batch(probes, &mut out);
        for (k, o) in probes.iter().zip(&out) {
            prop_assert_eq!(*o, naive.lookup_key(*k), "batch key {:?}", k);
        }
    }
    // Every rule listed once, with its value.
    let mut listed: Vec<_> = fast.iter().map(|(n, v)| (K::from_net(n), v)).collect();
    listed.sort_by_key(|((k, l), _)| (*l, format!("{k:?}")));
    prop_assert_eq!(listed.len(), naive.len());
    for ((k, l), v) in &listed {
        prop_assert_eq!(fast.get(net(*k, *l)), Some(*v));
    }
    // Removing everything returns every group.
    for ((k, l), _) in listed {
        fast.remove(net(k, l)).unwrap();
    }
    prop_assert_eq!(fast.groups_in_use(), 0);
    prop_assert!(fast.is_empty());
    for &k in probes {
        prop_assert_eq!(fast.lookup_key(k), None);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn lpm4_agrees_with_naive(ops in prop::collection::vec(op4(), 1..48), probes in prop::collection::vec(addr4(), 1..48)) {
        let mut t = Lpm4::new();
        run(&ops, &probes, |a, l| Ipv4Net::new_assert(Ipv4Addr::from(a), l as u8), &mut t)?;
    }

    #[test]
    fn lpm6_agrees_with_naive(ops in prop::collection::vec(op6(), 1..48), probes in prop::collection::vec(addr6(), 1..48)) {
        let mut t = Lpm6::new();
        run(&ops, &probes, |a, l| Ipv6Net::new_assert(Ipv6Addr::from(a), l as u8), &mut t)?;
    }
}

fn len6() -> impl Strategy<Value = u32> {
    prop_oneof![1 => 0u32..16, 4 => 16u32..=48, 4 => 49u32..=128]
}

/// 2001:db8::/32 with few distinct bits at several depths, plus random addresses.
fn addr6() -> impl Strategy<Value = u128> {
    prop_oneof![
        8 => (0u8..4, 0u8..4, 0u8..4, 0u8..4).prop_map(|(a, b, c, d)| {
            (0x2001_0db8u128 << 96) | (u128::from(a) << 88) | (u128::from(b) << 70) | (u128::from(c) << 40) | u128::from(d)
        }),
        1 => any::<u128>(),
    ]
}

fn op6() -> impl Strategy<Value = Op<u128>> {
    prop_oneof![
        5 => (addr6(), len6(), 0u32..1000).prop_map(|(a, l, v)| Op::Insert(a, l, v)),
        3 => any::<usize>().prop_map(Op::Remove),
        1 => (addr6(), len6()).prop_map(|(a, l)| Op::RemoveAbsent(a, l)),
    ]
}

#[test]
fn raw_batch_answers_as_the_decoded_one() {
    let prefixes = tern_table::workload::ipv4_prefixes(5000, tern_table::workload::IPV4_LENGTH_MIX, 7);
    let mut t = Lpm4::new();
    for (i, &(a, len)) in prefixes.iter().enumerate() {
        t.insert(ipnet::Ipv4Net::new_assert(a.into(), len as u8), i as u32).unwrap();
    }
    let keys = tern_table::workload::ipv4_lookups(&prefixes, 2000, 700, 8);
    let mut raw = vec![0; keys.len()];
    let mut out = vec![None; keys.len()];
    t.lookup_batch_raw(&keys, &mut raw);
    t.lookup_batch(&keys, &mut out);
    assert!(out.iter().any(Option::is_none) && out.iter().any(Option::is_some));
    for (r, o) in raw.iter().zip(&out) {
        assert_eq!(Lpm4::decode(*r), *o);
    }
}
