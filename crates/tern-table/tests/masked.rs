//! The tuple-space masked table against its naive twin: random keys, masks (a few distinct ones,
//! as a pipeline table has: prefixes and ternary patterns), distinct ranks, inserts and removes;
//! every lookup agrees.

use proptest::prelude::*;
use tern_table::masked::MaskedTable;
use tern_table::naive::NaiveMasked;

#[derive(Debug, Clone)]
enum Op {
    Insert { key: [u64; 2], mask: usize, rank: u16 },
    Remove(usize),
    Lookup([u64; 2]),
}

/// Masks: prefixes of the first word, and a ternary pattern on both.
const MASKS: [[u64; 2]; 5] = [[0, 0], [0xff00_0000, 0], [0xffff_0000, 0], [0xffff_ff00, 0xff], [0x0f0f_0f0f, 0xffff]];

fn op() -> impl Strategy<Value = Op> {
    let word = prop_oneof![0u64..4, 0u64..0x1_0000_0000];
    prop_oneof![
        (word.clone(), 0u64..300, 0..MASKS.len(), any::<u16>()).prop_map(|(a, b, mask, rank)| Op::Insert {
            key: [a, b],
            mask,
            rank
        }),
        any::<usize>().prop_map(Op::Remove),
        (word, 0u64..300).prop_map(|(a, b)| Op::Lookup([a, b])),
    ]
}

proptest! {
    #[test]
    fn agrees_with_the_naive_twin(ops in prop::collection::vec(op(), 1..300)) {
        let mut fast = MaskedTable::new(2);
        let mut slow = NaiveMasked::new();
        let mut live: Vec<([u64; 2], usize, u128, u32)> = Vec::new();
        let mut scratch = Vec::new();
        for (i, o) in ops.into_iter().enumerate() {
            match o {
                Op::Insert { key, mask, rank } => {
                    // Distinct ranks, as the pipeline makes them: the op's index breaks ties.
                    let r = (u128::from(rank) << 32) | (u32::MAX - i as u32) as u128;
                    prop_assert!(fast.insert(&key, &MASKS[mask], r, i as u32));
                    slow.insert(&key, &MASKS[mask], r, i as u32);
                    live.push((key, mask, r, i as u32));
                }
                Op::Remove(j) => {
                    if live.is_empty() { continue; }
                    let (key, mask, r, v) = live.remove(j % live.len());
                    prop_assert_eq!(fast.remove(&key, &MASKS[mask], r, |x| *x == v), Some(v));
                    prop_assert_eq!(slow.remove(&key, &MASKS[mask], r, |x| *x == v), Some(v));
                }
                Op::Lookup(k) => {
                    prop_assert_eq!(fast.lookup(&k, &mut scratch), slow.lookup(&k));
                }
            }
            prop_assert_eq!(fast.len(), slow.len());
        }
        // Every live entry's own key finds an entry at least as good as it.
        for (key, _, _, _) in &live {
            prop_assert_eq!(fast.lookup(key, &mut scratch), slow.lookup(key));
        }
    }
}

#[test]
fn the_best_rank_wins_and_keys_of_another_length_are_refused() {
    let mut t = MaskedTable::new(1);
    let mut s = Vec::new();
    assert!(t.insert(&[0x0a00_0000], &[0xff00_0000], 8, "10/8"));
    assert!(t.insert(&[0x0a01_0000], &[0xffff_0000], 16, "10.1/16"));
    assert!(t.insert(&[0], &[0], 0, "default"));
    assert_eq!(t.lookup(&[0x0a01_0203], &mut s), Some(&"10.1/16"));
    assert_eq!(t.lookup(&[0x0a02_0203], &mut s), Some(&"10/8"));
    assert_eq!(t.lookup(&[0x0b00_0000], &mut s), Some(&"default"));
    assert_eq!(t.masks(), 3);
    assert!(!t.insert(&[1, 2], &[0, 0], 1, "x"));
    assert_eq!(t.lookup(&[1, 2], &mut s), None);
    assert_eq!(t.remove(&[0x0a01_0000], &[0xffff_0000], 16, |_| true), Some("10.1/16"));
    assert_eq!(t.lookup(&[0x0a01_0203], &mut s), Some(&"10/8"));
    assert_eq!(t.masks(), 2);
}
