//! Mirrored tables against a naive twin (docs/clip.md, "Mirrored tables").

use std::collections::BTreeMap;

use proptest::prelude::*;
use tern_switch::mirror::{Location, MirrorError, Mirrored};

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, u32),
    Remove(u8),
    Promote(u8),
    Demote(u8),
    BeginPromote(u8),
    BeginDemote(u8),
    Finish(u8, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..24;
    prop_oneof![
        (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        k.clone().prop_map(Op::Remove),
        k.clone().prop_map(Op::Promote),
        k.clone().prop_map(Op::Demote),
        k.clone().prop_map(Op::BeginPromote),
        k.clone().prop_map(Op::BeginDemote),
        (k, any::<bool>()).prop_map(|(k, o)| Op::Finish(k, o)),
    ]
}

/// The twin: each key's value and whether it is in the original and in the mirror.
type Twin = BTreeMap<u8, (u32, bool, bool)>;

proptest! {
    /// Random inserts, removals and moves (whole, and in their two steps): the table and its
    /// twin agree on every key's value and place; the original never exceeds its capacity; an
    /// entry is never lost by a move (always in one of the two).
    #[test]
    fn mirrored_matches_its_twin(cap in 0usize..6, ops in proptest::collection::vec(op(), 0..200)) {
        let mut t: Mirrored<u8, u32> = Mirrored::new(cap);
        let mut twin: Twin = BTreeMap::new();
        for op in ops {
            let orig_len = twin.values().filter(|e| e.1).count();
            match op {
                Op::Insert(k, v) => {
                    t.insert(k, v);
                    let e = twin.entry(k).or_insert((v, false, true));
                    e.0 = v;
                }
                Op::Remove(k) => {
                    prop_assert_eq!(t.remove(&k), twin.remove(&k).map(|e| e.0));
                }
                Op::Promote(k) | Op::BeginPromote(k) => {
                    let whole = matches!(op, Op::Promote(_));
                    let r = if whole { t.promote(&k) } else { t.begin_promote(&k) };
                    match twin.get_mut(&k) {
                        None => prop_assert_eq!(r, Err(MirrorError::Missing)),
                        Some(e) if !e.1 && orig_len >= cap => prop_assert_eq!(r, Err(MirrorError::Full(cap))),
                        Some(e) => {
                            prop_assert_eq!(r, Ok(()));
                            e.1 = true;
                            if whole { e.2 = false; }
                        }
                    }
                }
                Op::Demote(k) | Op::BeginDemote(k) => {
                    let whole = matches!(op, Op::Demote(_));
                    let r = if whole { t.demote(&k) } else { t.begin_demote(&k) };
                    match twin.get_mut(&k) {
                        None => prop_assert_eq!(r, Err(MirrorError::Missing)),
                        Some(e) => {
                            prop_assert_eq!(r, Ok(()));
                            e.2 = true;
                            if whole { e.1 = false; }
                        }
                    }
                }
                Op::Finish(k, to_original) => {
                    let to = if to_original { Location::Original } else { Location::Mirror };
                    let r = t.finish(&k, to);
                    match twin.get_mut(&k) {
                        Some(e) if e.1 && e.2 => {
                            prop_assert_eq!(r, Ok(()));
                            if to_original { e.2 = false } else { e.1 = false }
                        }
                        _ => prop_assert_eq!(r, Err(MirrorError::Missing)),
                    }
                }
            }
            prop_assert!(t.original_len() <= cap);
            prop_assert_eq!(t.len(), twin.len());
            for k in 0u8..24 {
                let want = twin.get(&k).map(|e| match (e.1, e.2) {
                    (true, true) => Location::Both,
                    (true, false) => Location::Original,
                    _ => Location::Mirror,
                });
                prop_assert_eq!(t.location(&k), want);
                let got = t.lookup(&k).map(|(v, _)| *v);
                prop_assert_eq!(got, twin.get(&k).map(|e| e.0));
                prop_assert_eq!(t.lookup_original(&k).is_some(), twin.get(&k).is_some_and(|e| e.1));
            }
        }
    }
}

/// A promotion's two steps: between them the entry is in both, and the switch finds it in its
/// own table; after the second only there. A full original refuses, naming its size.
#[test]
fn make_before_break() {
    let mut t: Mirrored<&str, u32> = Mirrored::new(1);
    t.insert("a", 1);
    t.insert("b", 2);
    assert_eq!(t.location(&"a"), Some(Location::Mirror));
    t.begin_promote(&"a").unwrap();
    assert_eq!(t.location(&"a"), Some(Location::Both));
    assert_eq!(t.lookup(&"a"), Some((&1, Location::Original)));
    t.finish(&"a", Location::Original).unwrap();
    assert_eq!(t.location(&"a"), Some(Location::Original));
    let e = t.promote(&"b").unwrap_err();
    assert_eq!(e, MirrorError::Full(1));
    assert!(e.to_string().contains("full (1 entries)"));
    t.demote(&"a").unwrap();
    t.promote(&"b").unwrap();
    assert_eq!((t.location(&"a"), t.location(&"b")), (Some(Location::Mirror), Some(Location::Original)));
    // An update while it moves reaches both copies.
    t.begin_demote(&"b").unwrap();
    t.insert("b", 7);
    t.finish(&"b", Location::Mirror).unwrap();
    assert_eq!(t.lookup(&"b"), Some((&7, Location::Mirror)));
}
