//! The compiled header rewrite (`action::execute` on a set of the paper's shape) against its
//! reference twin, the action-by-action interpreter (`action::interpret`): same verdict, same
//! bytes, same header description, on random frames and random action sets.

use proptest::prelude::*;
use tern_flow::action::{self, Action, ActionSet, SetField};
use tern_io::{Packet, Pool};
use tern_wire::frame::{self, FrameInfo};

fn frame_for(kind: u8, ttl: u8, tagged: bool, payload: usize) -> Vec<u8> {
    let mut f = Vec::new();
    let body = vec![0x5au8; payload];
    let (a, b) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    match kind % 4 {
        0 => frame::build_udp4(&mut f, a, b, [10, 0, 0, 1], [10, 9, 8, 7], 1234, 53, ttl, &body),
        1 => frame::build_tcp4(&mut f, a, b, [10, 0, 0, 1], [10, 9, 8, 7], 1234, 80, ttl, &body),
        2 => {
            let (s, d) = (
                [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
            );
            frame::build_udp6(&mut f, a, b, s, d, 1234, 443, ttl, &body)
        }
        _ => {
            // Not IP: an ARP-typed frame.
            f.extend_from_slice(&b);
            f.extend_from_slice(&a);
            f.extend_from_slice(&[0x08, 0x06]);
            f.extend_from_slice(&[0u8; 46]);
        }
    }
    if tagged {
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        t.extend_from_slice(&f[12..]);
        f = t;
    }
    f
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        4 => any::<[u8; 6]>().prop_map(|m| Action::SetField(SetField::EthDst(m))),
        4 => any::<[u8; 6]>().prop_map(|m| Action::SetField(SetField::EthSrc(m))),
        4 => (0u16..=0xffff).prop_map(|tci| Action::PushVlan { tci }),
        4 => Just(Action::DecTtl),
        4 => Just(Action::Checksum),
        4 => (0u16..4).prop_map(Action::Output),
        1 => Just(Action::PopVlan),
        1 => Just(Action::Drop),
        1 => (0u8..64).prop_map(|d| Action::SetField(SetField::Dscp(d))),
    ]
}

/// The paper's action set (both MACs, a tag, `dec_ttl`, `checksum`, `output`), now and then
/// with one of its actions left out or one more added: the fast path's own case and its edges.
fn paper_set() -> impl Strategy<Value = Vec<Action>> {
    (any::<[u8; 6]>(), any::<[u8; 6]>(), any::<u16>(), 0u16..4, 0usize..12, action()).prop_map(
        |(dst, src, tci, port, edit, extra)| {
            let mut v = vec![
                Action::SetField(SetField::EthDst(dst)),
                Action::SetField(SetField::EthSrc(src)),
                Action::PushVlan { tci },
                Action::DecTtl,
                Action::Checksum,
                Action::Output(port),
            ];
            match edit {
                0..6 => drop(v.remove(edit)),
                6..9 => v.insert(edit - 4, extra),
                _ => {}
            }
            v
        },
    )
}

fn packet(pool: &Pool, bytes: &[u8], headroom: usize) -> Packet {
    let mut p = pool.packet();
    p.reserve_headroom(headroom);
    p.extend_from_slice(bytes).unwrap();
    p
}

fn both(set: &ActionSet, bytes: &[u8], headroom: usize, buf: usize) {
    let pool = Pool::new(4, buf);
    let Ok(info) = FrameInfo::parse(bytes) else { return };
    let (mut a, mut b) = (packet(&pool, bytes, headroom), packet(&pool, bytes, headroom));
    let (mut ia, mut ib) = (info, info);
    let va = action::execute(set, &mut a, &mut ia);
    let vb = action::interpret(set, &mut b, &mut ib);
    assert_eq!(va, vb, "verdict for {set}");
    assert_eq!(ia, ib, "header description for {set}");
    if !matches!(va, action::Verdict::Drop(_)) {
        assert_eq!(a.data(), b.data(), "bytes for {set}");
    }
}

/// The fast path's action units (`rewrite_common4`) on a frame the fast path takes: where they
/// run, the port and bytes `execute` gives; where they decline, the packet untouched.
fn common(set: &ActionSet, bytes: &[u8], headroom: usize, buf: usize, want: Option<u16>) {
    let pool = Pool::new(4, buf);
    let Some(c) = frame::Common4::parse(bytes) else { return };
    let (mut a, mut b) = (packet(&pool, bytes, headroom), packet(&pool, bytes, headroom));
    let mut info = c.info();
    let vb = action::execute(set, &mut b, &mut info);
    // The port the fast path asks for: the set's own, or another.
    let want = want.or(set.compiled_output()).unwrap_or(0);
    if action::rewrite_common4(set, &mut a, c.ttl, want) {
        assert_eq!(vb, action::Verdict::Output(want), "verdict for {set}");
        assert_eq!(set.output(), Some(want), "{set} to {want}");
        assert_eq!(a.data(), b.data(), "bytes for {set}");
    } else {
        assert_eq!((a.headroom(), a.data()), (headroom, bytes), "untouched by {set}");
        let declined = !set.is_compiled()
            || set.output() != Some(want)
            || !matches!(vb, action::Verdict::Output(_))
            || headroom < 4;
        assert!(declined, "{set} declined {vb:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn fast_path_rewrite_matches_execute(
        kind in 0u8..2,
        ttl in prop_oneof![Just(0u8), Just(1), Just(2), any::<u8>()],
        payload in 0usize..64,
        actions in prop_oneof![proptest::collection::vec(action(), 0..8), paper_set()],
        headroom in prop_oneof![Just(0usize), Just(2), Just(4), Just(64)],
        want in proptest::option::of(0u16..4),
    ) {
        let set = ActionSet::new(actions).unwrap();
        let f = frame_for(kind, ttl, false, payload);
        common(&set, &f, headroom, 2048, want);
    }

    #[test]
    fn compiled_rewrite_matches_the_interpreter(
        kind in 0u8..4,
        ttl in prop_oneof![Just(0u8), Just(1), Just(2), any::<u8>()],
        tagged in any::<bool>(),
        payload in 0usize..64,
        actions in proptest::collection::vec(action(), 0..8),
        headroom in prop_oneof![Just(0usize), Just(2), Just(64)],
    ) {
        let set = ActionSet::new(actions).unwrap();
        let f = frame_for(kind, ttl, tagged, payload);
        both(&set, &f, headroom, 2048);
        // A buffer with no room to grow: the tag push fails on both.
        both(&set, &f, 0, f.len());
    }
}

/// A header whose other words sum to ones'-complement zero carries a checksum of 0; 0xffff is
/// just as valid to a receiver. Recomputing (`checksum`) writes 0; the compiled rewrite must too,
/// with and without a TTL change.
#[test]
fn both_representations_of_a_zero_sum_checksum() {
    let mut f = frame_for(0, 64, false, 0);
    // Choose the identification field so the header's words, checksum excluded, sum to 0xffff.
    let l3 = 14;
    f[l3 + 4..l3 + 6].fill(0);
    f[l3 + 10..l3 + 12].fill(0);
    let s = frame::ones_sum(&f[l3..l3 + 20], 0) as u16;
    let id = 0xffff - s;
    f[l3 + 4..l3 + 6].copy_from_slice(&id.to_be_bytes());
    assert_eq!(frame::ones_sum(&f[l3..l3 + 20], 0), 0xffff);
    for field in [0x0000u16, 0xffff] {
        f[l3 + 10..l3 + 12].copy_from_slice(&field.to_be_bytes());
        assert!(FrameInfo::parse(&f).is_ok(), "{field:#x} verifies");
        for set in [
            "checksum,output:1",
            "dec_ttl,checksum,output:1",
            "set_field:eth_dst=02:00:00:00:00:09,push_vlan:5,checksum",
        ] {
            let set: ActionSet = set.parse().unwrap();
            assert!(set.is_compiled(), "{set}");
            both(&set, &f, 64, 2048);
        }
    }
}

#[test]
fn the_paper_set_is_compiled_and_others_are_not() {
    let compiled = "set_field:eth_src=02:00:00:00:00:01,set_field:eth_dst=02:00:00:00:00:02,dec_ttl,push_vlan:100,checksum,output:1";
    assert!(compiled.parse::<ActionSet>().unwrap().is_compiled());
    for other in ["drop", "pop_vlan,output:1", "set_field:dscp=4,checksum,output:1", "checksum,dec_ttl,output:1"] {
        assert!(!other.parse::<ActionSet>().unwrap().is_compiled(), "{other}");
    }
}
