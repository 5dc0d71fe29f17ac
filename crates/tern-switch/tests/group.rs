//! Flow-consistent scaling of the server group (docs/clip.md, "The server group"): Appendix B's
//! sequence, a property test against a reference that remembers each flow's first server, and
//! the controller's refusals.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use tern_switch::group::{FlowId, GroupError, Path, Selector, SelectorConfig, ServerId};

fn cfg(width: usize, pins: usize) -> SelectorConfig {
    SelectorConfig { buckets: 64, filter_ways: 2, filter_width: width, pins }
}

/// A flow id that picks server `want` in a group (found by trying ids in turn).
fn flow_to(sel: &Selector, want: ServerId, from: u64) -> FlowId {
    (from..).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).find(|&f| sel.current().pick(f) == want).unwrap()
}

/// Appendix B: packets p1 of flow a, p2 of b, p3 of a, p4 of b, p5 of c, the group changing
/// between p1 and p2. Flow a arrived before the change and keeps its server (the previous
/// group: found in the previous filter); b and c are new (the new group), and b's second packet
/// (p4) is still new — the filter it was written into at p2 is not the one looked up, which is
/// the mistake a single filter updated after the change would make.
#[test]
fn appendix_b_sequence() {
    let mut sel = Selector::new(cfg(1 << 12, 16), &[1]).unwrap();
    let a = 0xa_u64.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let (s1, p1) = sel.select(a);
    assert_eq!((s1, p1), (1, Path::Current));
    // t': server 2 joins and server 1 leaves the newest group (all new flows to 2). Server 1's
    // list has flow a.
    assert_eq!(sel.change(&[2], &[(a, 1)]).unwrap(), 1);
    let b = 0xb_u64.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let c = 0xc_u64.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    assert_eq!(sel.select(b), (2, Path::Current), "p2: b is new");
    assert_eq!(sel.select(a), (1, Path::Previous), "p3: a arrived before the change");
    assert_eq!(sel.select(b), (2, Path::Current), "p4: b is still new");
    assert_eq!(sel.select(c), (2, Path::Current), "p5: c is new");
    // No pin was needed: a is in the previous filter.
    assert_eq!(sel.pins(), 0);
}

/// Without the second filter's discipline, b's second packet would be taken for an old flow:
/// shown with a flow whose previous-group server differs from its current one.
#[test]
fn the_second_packet_of_a_new_flow_stays_in_the_new_group() {
    let mut sel = Selector::new(cfg(1 << 12, 16), &[1, 2]).unwrap();
    sel.change(&[3, 4], &[]).unwrap();
    for i in 0..200u64 {
        let f = i.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
        let (s, _) = sel.select(f);
        assert!(s == 3 || s == 4, "a new flow went to {s}");
        assert_eq!(sel.select(f).0, s, "its second packet moved");
    }
}

/// A change whose pins do not fit is refused and nothing changes; so are empty groups and
/// servers named twice.
#[test]
fn refused_changes_change_nothing() {
    let mut sel = Selector::new(cfg(1 << 10, 2), &[1, 2]).unwrap();
    let live: Vec<(FlowId, ServerId)> = (0..50u64)
        .map(|i| {
            let f = flow_to(&sel, 1, i * 1000);
            sel.select(f);
            (f, 1)
        })
        .collect();
    // Flows of server 1 that arrived in the first interval (filter 0). The first change moves
    // nothing (they are in the filter that becomes the previous one).
    sel.change(&[1, 2, 3], &live).unwrap();
    // The second clears their filter: those whose new-group server is not 1 need pins; more
    // than 2 do.
    let before = (sel.current().clone(), sel.cur(), sel.pins());
    let e = sel.change(&[2, 3], &live).unwrap_err();
    assert!(matches!(e, GroupError::PinsFull { capacity: 2, .. }), "{e}");
    assert!(e.to_string().contains("pinned-flow table holds 2"), "{e}");
    assert_eq!((sel.current().clone(), sel.cur(), sel.pins()), before);
    assert_eq!(sel.change(&[], &[]).unwrap_err(), GroupError::Empty);
    assert_eq!(sel.change(&[2, 5, 2], &[]).unwrap_err(), GroupError::Duplicate(2));
    assert!(Selector::new(SelectorConfig { filter_width: 1000, ..cfg(1, 1) }, &[1]).is_err());
}

/// A server left out drains and then nothing sends to it: after a change without it, its
/// flows still reach it; once they end (unpinned, gone from the lists) and the group changes
/// again, no slot or pin names it.
#[test]
fn a_removed_server_drains_then_retires() {
    let mut sel = Selector::new(cfg(1 << 12, 64), &[1, 2]).unwrap();
    let mine: Vec<FlowId> = (0..10u64).map(|i| flow_to(&sel, 2, i * 777)).collect();
    for &f in &mine {
        sel.select(f);
    }
    let live: Vec<(FlowId, ServerId)> = mine.iter().map(|&f| (f, 2)).collect();
    sel.change(&[1], &live).unwrap();
    for &f in &mine {
        assert_eq!(sel.select(f).0, 2, "a flow of the removed server left it");
    }
    sel.change(&[1, 3], &live).unwrap();
    assert!(sel.pins() > 0 && sel.serves(2));
    for &f in &mine {
        assert_eq!(sel.select(f).0, 2);
    }
    // Its flows end.
    sel.unpin(&mine);
    sel.change(&[1, 3], &[]).unwrap();
    assert!(!sel.serves(2), "server 2 still served: {:?} {:?}", sel.current(), sel.previous());
}

#[derive(Debug, Clone)]
enum Ev {
    /// A packet of flow `n` (a new flow if `n` is past the flows so far).
    Packet(usize),
    /// Flow `n` ends.
    End(usize),
    /// The group becomes these servers (1..=6).
    Change(Vec<ServerId>),
}

fn events() -> impl Strategy<Value = Vec<Ev>> {
    let ev = prop_oneof![
        30 => (0usize..400).prop_map(Ev::Packet),
        6 => (0usize..400).prop_map(Ev::End),
        2 => proptest::sample::subsequence(vec![1u16, 2, 3, 4, 5, 6], 1..=4).prop_map(Ev::Change),
    ];
    proptest::collection::vec(ev, 200..700)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Against a reference that remembers each flow's first server: random arrivals, ends and
    /// at least three changes (servers out and in), with filters small enough for false
    /// positives. No flow ever changes server; a new flow goes to the newest group unless the
    /// previous filter takes it for an old one (a false positive; it still keeps its server).
    #[test]
    fn no_flow_ever_changes_server(evs in events(), width_log in 5u32..9, seed in any::<u64>()) {
        let changes = evs.iter().filter(|e| matches!(e, Ev::Change(_))).count();
        prop_assume!(changes >= 3);
        let mut sel = Selector::new(cfg(1 << width_log, 100_000), &[1, 2]).unwrap();
        let id = |n: usize| (n as u64 ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        // The reference: each live flow's server, and flows that ended (ids are not reused).
        let mut first: BTreeMap<usize, ServerId> = BTreeMap::new();
        let mut ended: BTreeSet<usize> = BTreeSet::new();
        for ev in evs {
            match ev {
                Ev::Packet(n) if !ended.contains(&n) => {
                    let (s, path) = sel.select(id(n));
                    match first.get(&n) {
                        Some(&was) => prop_assert_eq!(s, was, "flow {} moved", n),
                        None => {
                            // A new flow: the newest group, or the previous one on a false
                            // positive of its filter.
                            if path != Path::Previous {
                                prop_assert_eq!(path, Path::Current);
                                prop_assert!(sel.current().members.contains(&s));
                            }
                            first.insert(n, s);
                        }
                    }
                }
                Ev::Packet(_) => {}
                Ev::End(n) => {
                    if first.remove(&n).is_some() {
                        ended.insert(n);
                        sel.unpin(&[id(n)]);
                    }
                }
                Ev::Change(members) => {
                    let live: Vec<(FlowId, ServerId)> = first.iter().map(|(&n, &s)| (id(n), s)).collect();
                    sel.change(&members, &live).unwrap();
                    // Every live flow's next packet goes to its server.
                    for (&n, &s) in &first {
                        prop_assert_eq!(sel.predict(id(n)), s, "flow {} would move", n);
                    }
                }
            }
        }
    }
}

/// Small filters take new flows for old ones (a false positive sends them to the previous
/// group), as the property test's do now and then; such flows keep their server all the same.
#[test]
fn small_filters_make_false_positives_that_do_no_harm() {
    let mut sel = Selector::new(cfg(1 << 5, 100_000), &[1, 2]).unwrap();
    let flows: Vec<FlowId> = (0..200u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).collect();
    for &f in &flows[..100] {
        sel.select(f);
    }
    let live: Vec<(FlowId, ServerId)> = flows[..100].iter().map(|&f| (f, sel.predict(f))).collect();
    sel.change(&[3, 4], &live).unwrap();
    // 100 flows in 2 × 32 bits: the previous filter is nearly full, so most new flows look old.
    let mut taken = Vec::new();
    for &f in &flows[100..] {
        let (s, path) = sel.select(f);
        if path == Path::Previous {
            taken.push((f, s));
        }
    }
    assert!(taken.len() > 50, "{} false positives", taken.len());
    // They keep their server over the next change (pinned, from the servers' lists).
    let mut live2 = live.clone();
    live2.extend(flows[100..].iter().map(|&f| (f, sel.predict(f))));
    sel.change(&[5], &live2).unwrap();
    for &(f, s) in &live2 {
        assert_eq!(sel.select(f).0, s);
    }
}

/// Failover: every way a flow reaches a dead server — its bucket in the current group, in the
/// previous group, a pin — leads to its buddy after `fail_over`; no other flow moves.
#[test]
fn a_dead_servers_flows_go_on_at_its_buddy() {
    let mut sel = Selector::new(cfg(1 << 12, 64), &[1, 2]).unwrap();
    let before: Vec<FlowId> = (0..40u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).collect();
    let mut owner: Vec<(FlowId, ServerId)> = before.iter().map(|&f| (f, sel.select(f).0)).collect();
    sel.change(&[2, 3], &owner).unwrap();
    let after: Vec<FlowId> = (100..140u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).collect();
    owner.extend(after.iter().map(|&f| (f, sel.select(f).0)));
    sel.change(&[2, 3, 4], &owner).unwrap();
    assert!(owner.iter().any(|&(_, s)| s == 2) && sel.pins() > 0);
    sel.fail_over(2, 3).unwrap();
    for &(f, s) in &owner {
        let want = if s == 2 { 3 } else { s };
        assert_eq!(sel.select(f).0, want, "flow of server {s}");
    }
    assert!(!sel.serves(2));
    assert_eq!(sel.stats().failovers, 1);
    // Refusals change nothing.
    assert!(matches!(sel.fail_over(2, 3), Err(GroupError::Failover { server: 2, .. })));
    assert!(matches!(sel.fail_over(3, 9), Err(GroupError::Failover { server: 9, .. })));
    assert!(matches!(sel.fail_over(3, 3), Err(GroupError::Failover { .. })));
}

/// Back-pressure: while a server is busy no new flow goes to it (diverted to another server of
/// the current group, and pinned so its later packets follow, busy or not); its own flows still
/// reach it. With every server busy, or no room to pin, a new flow goes where it would have
/// (counted).
#[test]
fn a_busy_server_gets_no_new_flows() {
    let mut sel = Selector::new(cfg(1 << 14, 1000), &[1, 2, 3]).unwrap();
    let old = flow_to(&sel, 2, 1);
    assert_eq!(sel.select(old).0, 2);
    sel.set_busy(2, true);
    assert!(sel.is_busy(2));
    assert_eq!(sel.select(old), (2, Path::Current), "an existing flow stays");
    let mut went = Vec::new();
    for i in 0..300u64 {
        let f = (i + 1000).wrapping_mul(0x2545_f491_4f6c_dd1d) | 1;
        let (s, path) = sel.select(f);
        assert_ne!(s, 2, "a new flow went to the busy server");
        if sel.current().pick(f) == 2 {
            assert_eq!(path, Path::Diverted);
        }
        went.push((f, s));
    }
    assert!(sel.stats().diverted > 50);
    sel.set_busy(2, false);
    for &(f, s) in &went {
        assert_eq!(sel.select(f).0, s, "a diverted flow moved");
    }
    // Everyone busy: nowhere to divert.
    for s in [1, 2, 3] {
        sel.set_busy(s, true);
    }
    let f = flow_to(&sel, 1, 5000);
    assert_eq!(sel.select(f), (1, Path::Current));
    assert_eq!(sel.stats().not_diverted, 1);
}

/// Heartbeats: a server silent for more than the bound (300 ms by default) is dead; checked
/// every 50 ms, it is found within 350 ms of its last beat; a beat keeps it alive.
#[test]
fn heartbeats_find_a_dead_server_within_the_bound() {
    use tern_switch::group::{DEFAULT_HEARTBEAT_BOUND_NS, Heartbeats};
    let ms = 1_000_000u64;
    let mut h = Heartbeats::new(DEFAULT_HEARTBEAT_BOUND_NS);
    for s in [1, 2, 3] {
        h.beat(s, 0);
    }
    // Servers 1 and 3 beat every 100 ms; server 2 stops after 120 ms.
    h.beat(2, 120 * ms);
    let mut found = None;
    for t in (0..=1000).step_by(50) {
        if t % 100 == 0 {
            h.beat(1, t * ms);
            h.beat(3, t * ms);
        }
        let d = h.dead(t * ms);
        if !d.is_empty() && found.is_none() {
            assert_eq!(d, [2]);
            found = Some(t);
        }
    }
    let t = found.expect("server 2 was never found dead");
    assert!(t > 120 + 300 && t <= 120 + 350, "found at {t} ms");
    h.forget(2);
    assert!(h.dead(2000 * ms).iter().all(|&s| s != 2));
}

/// Figure 7's run: a selector and the hash-mod baseline fed the same packets, each flow's first
/// server remembered for each, the packets that went elsewhere counted.
struct Fig7 {
    sel: Selector,
    hm: tern_switch::group::HashMod,
    first: BTreeMap<FlowId, ServerId>,
    hm_first: BTreeMap<FlowId, ServerId>,
    /// Flows that had a packet go elsewhere than their first server.
    moved: BTreeSet<FlowId>,
    hm_moved: BTreeSet<FlowId>,
    live: Vec<FlowId>,
}

impl Fig7 {
    /// Packets of every live flow, `rounds` times.
    fn traffic(&mut self, rounds: usize) {
        for _ in 0..rounds {
            for &f in &self.live {
                let s = self.sel.select(f).0;
                if *self.first.entry(f).or_insert(s) != s {
                    self.moved.insert(f);
                }
                let h = self.hm.pick(f).unwrap();
                if *self.hm_first.entry(f).or_insert(h) != h {
                    self.hm_moved.insert(f);
                }
            }
        }
    }

    /// Both change their membership to `members` (the controller given the servers' lists).
    fn change(&mut self, members: &[ServerId]) {
        let owners: Vec<(FlowId, ServerId)> = self.live.iter().map(|f| (*f, self.first[f])).collect();
        self.sel.change(members, &owners).unwrap();
        self.hm.members = members.to_vec();
    }

    /// `flows` end.
    fn end(&mut self, flows: &[FlowId]) {
        self.live.retain(|f| !flows.contains(f));
        self.sel.unpin(flows);
    }
}

/// Figure 7's scenario, and the baseline beside it: flow sets 1 and 2 start on server 1; the
/// group becomes {2} (sets 3 and 4 start), then {2, 3}, then {2} again after set 1 stops.
/// Every packet of every flow goes to the server its flow started on; no flow that started
/// after server 1 left goes to it; server 1 drains (its flows keep reaching it) and, once set 2
/// has ended too and the group changed once more, nothing sends to it. BMv2-style hash-mod ECMP
/// on the same events moves most flows (counted).
#[test]
fn figure_7_no_flow_moves_where_hash_mod_moves_most() {
    use tern_switch::group::HashMod;
    let set = |k: u64| -> Vec<FlowId> {
        (0..250u64).map(|i| (k * 1000 + i).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1).collect()
    };
    let mut r = Fig7 {
        // The default filters (2 × 65,536 bits): with 500 flows in one, a new flow is taken for
        // an old one about once in 17,000 (smaller filters make that common: see the tests above).
        sel: Selector::new(SelectorConfig { buckets: 64, ..SelectorConfig::default() }, &[1]).unwrap(),
        hm: HashMod { members: vec![1] },
        first: BTreeMap::new(),
        hm_first: BTreeMap::new(),
        moved: BTreeSet::new(),
        hm_moved: BTreeSet::new(),
        live: [set(1), set(2)].concat(),
    };
    r.traffic(3);
    r.change(&[2]);
    r.live.extend(set(3).into_iter().chain(set(4)));
    r.traffic(3);
    r.change(&[2, 3]);
    r.traffic(3);
    assert!(r.sel.serves(1), "server 1 still has sets 1 and 2");
    r.end(&set(1));
    r.change(&[2]);
    r.traffic(3);
    let late_on_1 = set(3).iter().chain(&set(4)).filter(|f| r.first[f] == 1).count();
    assert_eq!(late_on_1, 0, "a flow that started after server 1 left went to it");
    r.end(&set(2));
    r.change(&[2]);
    assert!(!r.sel.serves(1), "server 1 did not retire");
    r.traffic(1);
    assert!(r.moved.is_empty(), "the selector moved {} flows", r.moved.len());
    // Of the 1,000 flows: sets 1 and 2 (500) all move at the first change, and about half of
    // sets 3 and 4 at the second (and back at the third): 750 in one run.
    assert!(r.hm_moved.len() > 600, "hash-mod moved only {}", r.hm_moved.len());
    if std::env::var_os("TERN_SHOW").is_some() {
        eprintln!("hash-mod moved {} of {} flows", r.hm_moved.len(), r.first.len());
    }
}

/// A group's buckets are made at once: 1 to 2^16 (more once ended the process on allocation);
/// the error names the key.
#[test]
fn buckets_are_bounded() {
    let with = |buckets| SelectorConfig { buckets, ..cfg(1 << 10, 16) };
    assert!(Selector::new(with(1 << 16), &[1]).is_ok());
    for bad in [0, (1 << 16) + 1, usize::MAX] {
        let e = Selector::new(with(bad), &[1]).expect_err("refused").to_string();
        assert!(e.contains(&format!("buckets = {bad}")) && e.contains("1 to 65536"), "{e}");
    }
}
