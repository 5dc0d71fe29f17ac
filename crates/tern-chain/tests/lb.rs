//! Maglev consistent hashing: shares follow weights, few entries move when a backend comes or
//! goes, the table is the paper's algorithm's (a reference twin, for equal weights), and bad
//! configurations are refused by name.

use proptest::prelude::*;
use tern_chain::lb::{LbError, Maglev};

const M: usize = 65_537;

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
}

fn share(m: &Maglev, i: usize) -> f64 {
    m.table().iter().filter(|&&b| usize::from(b) == i).count() as f64 / m.table().len() as f64
}

/// Entries whose backend (by name) differs between two tables, among those `a` gives to a
/// backend `b` still has.
fn moved(a: &Maglev, b: &Maglev) -> f64 {
    let (mut kept, mut changed) = (0, 0);
    for (x, y) in a.table().iter().zip(b.table()) {
        let name = &a.names()[usize::from(*x)];
        if b.names().contains(name) {
            kept += 1;
            if &b.names()[usize::from(*y)] != name {
                changed += 1;
            }
        }
    }
    changed as f64 / kept as f64
}

#[test]
fn shares_follow_the_weights() {
    let n = names(5);
    let weights = [1, 2, 3, 4, 10];
    let backends: Vec<(&str, u32)> = n.iter().map(String::as_str).zip(weights).collect();
    let m = Maglev::new(&backends, M).unwrap();
    let total: u32 = weights.iter().sum();
    for (i, w) in weights.iter().enumerate() {
        let want = f64::from(*w) / f64::from(total);
        assert!((share(&m, i) - want).abs() < 0.005, "backend {i}: {} against {want}", share(&m, i));
    }
    // A weight of 0: no entry.
    let m = Maglev::new(&[("a", 1), ("b", 0)], 101).unwrap();
    assert!(m.table().iter().all(|&b| b == 0));
}

#[test]
fn a_backend_leaving_or_joining_moves_few_other_entries() {
    let n = names(11);
    let all: Vec<(&str, u32)> = n.iter().map(|s| (s.as_str(), 1)).collect();
    let m10 = Maglev::new(&all[..10], M).unwrap();
    let without = Maglev::new(&[&all[..3], &all[4..10]].concat(), M).unwrap();
    let with = Maglev::new(&all, M).unwrap();
    // The paper (§5.3) sees a few per cent of the others' entries move; equal shares would
    // move none, a new random table about 90%.
    let (left, joined) = (moved(&m10, &without), moved(&m10, &with));
    eprintln!("moved: {left:.4} when one of 10 leaves, {joined:.4} when an 11th joins");
    assert!(left < 0.05, "{left}");
    // A joining backend takes about 1/11 of the table from the others, plus a little churn.
    assert!(joined > 1.0 / 11.0 - 0.01 && joined < 1.0 / 11.0 + 0.05, "{joined}");
    // Lookups are by table entry: the same hash, the same backend, while the table stands.
    assert_eq!(m10.lookup(123_456_789), m10.lookup(123_456_789 + M as u64));
}

#[test]
fn bad_configurations_are_refused_by_name() {
    assert_eq!(Maglev::new(&[], 101), Err(LbError::NoBackends));
    assert_eq!(Maglev::new(&[("a", 0)], 101), Err(LbError::NoBackends));
    assert_eq!(Maglev::new(&[("a", 1), ("a", 2)], 101), Err(LbError::Duplicate("a".into())));
    assert_eq!(Maglev::new(&[("a", 1)], 100), Err(LbError::TableSize { size: 100, weights: 1 }));
    assert_eq!(Maglev::new(&[("a", 100), ("b", 1)], 101), Err(LbError::TableSize { size: 101, weights: 101 }));
    assert_eq!(
        LbError::TableSize { size: 100, weights: 1 }.to_string(),
        "table size 100: must be a prime above the weights' sum (1) and at most 4194304"
    );
}

/// The paper's Pseudocode 1 (unweighted), written plainly from the permutations.
fn reference(perm: &[(u64, u64)], m: usize) -> Vec<u16> {
    let mut next = vec![0u64; perm.len()];
    let mut entry = vec![u16::MAX; m];
    let mut n = 0;
    loop {
        for (i, &(offset, skip)) in perm.iter().enumerate() {
            let mut c = ((offset + next[i] * skip) % m as u64) as usize;
            while entry[c] != u16::MAX {
                next[i] += 1;
                c = ((offset + next[i] * skip) % m as u64) as usize;
            }
            entry[c] = i as u16;
            next[i] += 1;
            n += 1;
            if n == m {
                return entry;
            }
        }
    }
}

proptest! {
    /// For equal weights, the table is the paper's algorithm's for the same permutations.
    #[test]
    fn equal_weights_give_the_papers_table(n in 1usize..12, size in prop::sample::select(vec![13usize, 101, 251, 1009])) {
        prop_assume!(n < size);
        let ns = names(n);
        let backends: Vec<(&str, u32)> = ns.iter().map(|s| (s.as_str(), 1)).collect();
        let m = Maglev::new(&backends, size).unwrap();
        let perm: Vec<(u64, u64)> = ns.iter().map(|s| tern_chain::lb::permutation(s, size)).collect();
        prop_assert_eq!(m.table(), &reference(&perm, size)[..]);
    }
}
