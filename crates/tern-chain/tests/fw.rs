//! The firewall task: rules by priority, the default, replies of allowed flows let in, state
//! bounded and forgotten when idle, drops by name; and a reference twin (the rules scanned in
//! priority order, the flows in a list) agreeing with it on random rules and frames.

use std::time::{Duration, Instant};

use ipnet::IpNet;
use proptest::prelude::*;
use tern_chain::fw::{Action, Firewall, FwConfig, FwDrop, Rule};
use tern_table::classifier::{Pattern, PortRange};
use tern_wire::frame::{build_tcp4, build_udp4, build_udp6};

fn tcp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
    let mut f = Vec::new();
    build_tcp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, b"x");
    f
}

fn udp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, b"x");
    f
}

fn net(s: &str) -> Option<IpNet> {
    Some(s.parse().unwrap())
}

const IN: [u8; 4] = [10, 0, 0, 7];
const BAD: [u8; 4] = [10, 0, 0, 66];
const WEB: [u8; 4] = [198, 51, 100, 9];

fn rules() -> Vec<Rule> {
    vec![
        // Host .66 may not talk out at all (higher priority than the allow below).
        Rule {
            pattern: Pattern { priority: 20, src: net("10.0.0.66/32"), ..Pattern::default() },
            action: Action::Deny,
        },
        // The inside may reach web servers on TCP 80 and 443.
        Rule {
            pattern: Pattern {
                priority: 10,
                src: net("10.0.0.0/8"),
                proto: Some(6),
                dst_port: Some(PortRange(80, 443)),
                ..Pattern::default()
            },
            action: Action::Allow,
        },
        // DNS.
        Rule {
            pattern: Pattern { priority: 10, proto: Some(17), dst_port: Some(PortRange(53, 53)), ..Pattern::default() },
            action: Action::Allow,
        },
    ]
}

#[test]
fn rules_by_priority_then_replies_of_allowed_flows() {
    let mut fw = Firewall::new(&rules(), FwConfig::default()).unwrap();
    let now = Instant::now();
    assert_eq!(fw.check(&tcp(IN, WEB, 40000, 80), now), Ok(()));
    assert_eq!(fw.check(&tcp(IN, WEB, 40000, 22), now), Err(FwDrop::Denied), "no rule: the default");
    assert_eq!(fw.check(&tcp(BAD, WEB, 40000, 80), now), Err(FwDrop::Denied), "the deny outranks the allow");
    // The reply of the allowed flow comes in; the reply of the denied one does not.
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40000), now), Ok(()));
    assert_eq!(fw.check(&tcp(WEB, BAD, 80, 40000), now), Err(FwDrop::Denied));
    assert_eq!(fw.check(&udp(IN, WEB, 5353, 53), now), Ok(()));
    let s = fw.stats();
    assert_eq!((s.allowed, s.established, s.flows, s.drops), (2, 1, 2, [0, 0, 3]));
}

#[test]
fn without_state_replies_need_rules_of_their_own() {
    let mut fw = Firewall::new(&rules(), FwConfig { established: false, ..FwConfig::default() }).unwrap();
    let now = Instant::now();
    assert_eq!(fw.check(&tcp(IN, WEB, 40000, 80), now), Ok(()));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40000), now), Err(FwDrop::Denied));
    assert_eq!(fw.flows(), 0);
    // An allow-by-default firewall lets anything no rule denies through.
    let mut open = Firewall::new(&rules(), FwConfig { default: Action::Allow, ..FwConfig::default() }).unwrap();
    assert_eq!(open.check(&tcp(IN, WEB, 1, 22), now), Ok(()));
}

/// At most `max_flows` are remembered: a new flow in a full table takes the place of the flow
/// that never had a reply and whose last frame is oldest (as conntrack's early drop: state a
/// spoofed source made, which no reply ever reaches, gives way to new flows), and is let through
/// but not remembered if every flow had one. Idle flows are forgotten.
#[test]
fn state_is_bounded_and_forgotten_when_idle() {
    let cfg = FwConfig { max_flows: 2, idle: Duration::from_secs(10), ..FwConfig::default() };
    let mut fw = Firewall::new(&rules(), cfg).unwrap();
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    // Flow 40000 has a reply; 40001 has none.
    assert_eq!(fw.check(&tcp(IN, WEB, 40000, 80), at(0)), Ok(()));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40000), at(1)), Ok(()));
    assert_eq!(fw.check(&tcp(IN, WEB, 40001, 80), at(2)), Ok(()));
    // The table is full: 40002 takes the place of 40001 (no reply), not of 40000.
    assert_eq!(fw.check(&tcp(IN, WEB, 40002, 80), at(3)), Ok(()));
    assert_eq!((fw.flows(), fw.stats().unreplied_evicted, fw.stats().state_full), (2, 1, 0));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40001), at(4)), Err(FwDrop::Denied), "40001 was taken out");
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40000), at(5)), Ok(()));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40002), at(6)), Ok(()), "40002 is remembered");
    // Both remembered flows had a reply: the next new flow is let through but not remembered.
    assert_eq!(fw.check(&tcp(IN, WEB, 40003, 80), at(7)), Ok(()));
    assert_eq!((fw.flows(), fw.stats().unreplied_evicted, fw.stats().state_full), (2, 1, 1));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40003), at(8)), Err(FwDrop::Denied));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40000), at(5_000)), Ok(()));
    // Flow 40002 idles past 10 s: forgotten; flow 40000 was refreshed at 5 s and lives to 15 s.
    let t11 = at(11_000);
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40002), t11), Err(FwDrop::Denied));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40000), t11), Ok(()));
    assert!(fw.stats().expired >= 1);
}

/// A new flow in a full table takes the place of a flow idle past its time that the sweep has
/// not come round to yet (forgotten already), before any other's, counted `expired`; only with
/// none does it take an unreplied live flow's (docs/chain.md, "Firewall").
#[test]
fn a_full_table_takes_an_idle_flows_place_first() {
    let cfg = FwConfig { max_flows: 4, idle: Duration::from_secs(100), ..FwConfig::default() };
    let mut fw = Firewall::new(&rules(), cfg).unwrap();
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    // Three flows with replies at 0 s; one without at 85 s.
    for p in 40000..40003 {
        assert_eq!(fw.check(&tcp(IN, WEB, p, 80), at(0)), Ok(()));
        assert_eq!(fw.check(&tcp(WEB, IN, 80, p), at(0)), Ok(()));
    }
    assert_eq!(fw.check(&tcp(IN, WEB, 40003, 80), at(85)), Ok(()));
    // A pass at 95 s (frames the rules deny; enough to end the pass begun at 85 s, a map a
    // frame, and the next) finds nothing idle; the next begins 10 s on.
    for _ in 0..200 {
        assert_eq!(fw.check(&tcp(BAD, WEB, 1, 80), at(95)), Err(FwDrop::Denied));
    }
    assert_eq!((fw.flows(), fw.stats().expired), (4, 0));
    // At 101-103 s the three that had replies are idle, not yet forgotten: new flows take
    // their places, not the unreplied live one's; each new flow is remembered.
    for (i, p) in (40010..40013).enumerate() {
        assert_eq!(fw.check(&tcp(IN, WEB, p, 80), at(101 + i as u64)), Ok(()));
        assert_eq!(fw.check(&tcp(WEB, IN, 80, p), at(101 + i as u64)), Ok(()), "{p} is remembered");
    }
    let st = fw.stats();
    assert_eq!((fw.flows(), st.expired, st.unreplied_evicted, st.state_full), (4, 3, 0, 0));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40003), at(104)), Ok(()), "the unreplied live flow stays");
    // None idle now, and every flow had a reply: the next new flow is not remembered.
    assert_eq!(fw.check(&tcp(IN, WEB, 40020, 80), at(104)), Ok(()));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40020), at(104)), Err(FwDrop::Denied));
    assert_eq!(fw.stats().state_full, 1);
}

/// One address cannot fill the table: past its share its new flows are let through by the rules
/// but not remembered (`source_full`), another address's still are, and once its own flows are
/// forgotten for idling it is remembered again.
#[test]
fn one_source_cannot_fill_the_table() {
    let cfg = FwConfig { max_flows_per_source: 3, idle: Duration::from_secs(10), ..FwConfig::default() };
    let mut fw = Firewall::new(&rules(), cfg).unwrap();
    let t0 = Instant::now();
    for port in 40000..40005 {
        assert_eq!(fw.check(&tcp(IN, WEB, port, 80), t0), Ok(()), "the rule lets it out");
    }
    assert_eq!((fw.flows(), fw.stats().source_full), (3, 2));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40002), t0), Ok(()), "the third is remembered");
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40003), t0), Err(FwDrop::Denied), "the fourth is not");
    let other = [10, 0, 0, 8];
    assert_eq!(fw.check(&tcp(other, WEB, 40000, 80), t0), Ok(()));
    assert_eq!(fw.check(&tcp(WEB, other, 80, 40000), t0), Ok(()), "another address's flow is remembered");
    // Past the idle time the sweep forgets them (64 packets at most); the address begins flows
    // that are remembered again.
    let t11 = t0 + Duration::from_secs(11);
    for _ in 0..64 {
        let _ = fw.check(&tcp(BAD, WEB, 1, 80), t11);
    }
    assert_eq!(fw.flows(), 0);
    assert_eq!(fw.check(&tcp(IN, WEB, 40003, 80), t11), Ok(()));
    assert_eq!(fw.check(&tcp(WEB, IN, 80, 40003), t11), Ok(()));
}

/// Forgetting idle flows is spread over packets (docs/chain.md, "Firewall"): past the idle time,
/// one packet's sweep forgets a part of them (64 buckets' worth at most, on pace), not all at
/// once; once the pass's twentieth of the idle time is over, a packet's sweep ends a map of the
/// 64 they are kept in, and within 65 packets every idle one is gone.
#[test]
fn idle_flows_are_forgotten_a_part_a_packet() {
    let cfg = FwConfig { idle: Duration::from_secs(10), max_flows_per_source: 6400, ..FwConfig::default() };
    let mut fw = Firewall::new(&rules(), cfg).unwrap();
    let t0 = Instant::now();
    for port in 0..6400u16 {
        assert_eq!(fw.check(&tcp(IN, WEB, 10_000 + port, 80), t0), Ok(()));
    }
    assert_eq!(fw.flows(), 6400);
    let t11 = t0 + Duration::from_secs(11);
    let denied = tcp(BAD, WEB, 1, 80);
    assert_eq!(fw.check(&denied, t11), Err(FwDrop::Denied));
    let left = fw.flows();
    assert!((6336..6400).contains(&left), "one packet forgot {} of 6400", 6400 - left);
    let late = t11 + Duration::from_millis(500);
    for _ in 0..63 {
        let _ = fw.check(&denied, late);
    }
    assert!(fw.flows() > 0, "64 packets, the first on pace: one map left");
    let _ = fw.check(&denied, late);
    assert_eq!((fw.flows(), fw.stats().expired), (0, 6400));
}

#[test]
fn what_is_not_ip_is_dropped_by_name() {
    let mut fw = Firewall::new(&rules(), FwConfig::default()).unwrap();
    let now = Instant::now();
    let mut arp = vec![0u8; 42];
    arp[12] = 0x08;
    arp[13] = 0x06;
    assert_eq!(fw.check(&arp, now), Err(FwDrop::NotIp));
    assert_eq!(fw.check(&[0u8; 5], now), Err(FwDrop::Malformed));
    // IPv6 is classified too: no rule allows this UDP port.
    let mut v6 = Vec::new();
    build_udp6(&mut v6, [2; 6], [4; 6], [1; 16], [2; 16], 1, 9, 64, b"");
    assert_eq!(fw.check(&v6, now), Err(FwDrop::Denied));
    assert_eq!(fw.stats().drops, [1, 1, 1]);
}

/// A flow as the twin keeps it: source, destination, protocol, ports.
type Flow4 = (u32, u32, u8, u16, u16);

/// The twin: every rule tried in priority order (the first given among equals), flows in a
/// list (each as it began, its last frame's time, whether a frame came the other way), forgotten
/// when idle, at most `per_source` of them begun by one address, and at most `max` in all: a
/// new flow past them takes the place of the flow with the oldest last frame of those that had
/// no reply, if any.
struct Naive {
    rules: Vec<Rule>,
    default: Action,
    flows: Vec<(Flow4, Instant, bool)>,
    idle: Duration,
    per_source: usize,
    max: usize,
}

impl Naive {
    fn check(&mut self, (src, dst, proto, sp, dp): Flow4, now: Instant) -> bool {
        self.flows.retain(|(_, t, _)| now.duration_since(*t) < self.idle);
        for (f, reply) in [((src, dst, proto, sp, dp), false), ((dst, src, proto, dp, sp), true)] {
            if let Some(e) = self.flows.iter_mut().find(|(k, ..)| *k == f) {
                e.1 = now;
                e.2 |= reply;
                return true;
            }
        }
        let key = tern_table::classifier::FlowKey {
            in_port: 0,
            v6: false,
            src: u128::from(src),
            dst: u128::from(dst),
            proto,
            src_port: sp,
            dst_port: dp,
        };
        let mut best: Option<&Rule> = None;
        for r in &self.rules {
            if r.pattern.matches(&key) && best.is_none_or(|b| r.pattern.priority > b.pattern.priority) {
                best = Some(r);
            }
        }
        let allow = best.map_or(self.default, |r| r.action) == Action::Allow;
        if allow && self.flows.iter().filter(|((s, ..), ..)| *s == src).count() < self.per_source {
            if self.flows.len() >= self.max {
                let unreplied = self.flows.iter().enumerate().filter(|(_, e)| !e.2).min_by_key(|(_, e)| e.1);
                let Some((i, _)) = unreplied else { return allow };
                self.flows.remove(i);
            }
            self.flows.push(((src, dst, proto, sp, dp), now, false));
        }
        allow
    }
}

fn rule() -> impl Strategy<Value = Rule> {
    (
        0u32..4,
        proptest::option::of((0u32..4, 30u8..=32)),
        proptest::option::of(prop_oneof![Just(6u8), Just(17u8)]),
        proptest::option::of((1u16..6, 0u16..3)),
        any::<bool>(),
    )
        .prop_map(|(priority, src, proto, dport, allow)| Rule {
            pattern: Pattern {
                priority,
                src: src.map(|(x, l)| format!("10.0.0.{x}/{l}").parse::<ipnet::Ipv4Net>().unwrap().trunc().into()),
                proto,
                dst_port: dport.map(|(lo, w)| PortRange(lo, lo + w)),
                ..Pattern::default()
            },
            action: if allow { Action::Allow } else { Action::Deny },
        })
}

/// A frame of the property tests: source and destination (10.0.0.x), TCP or UDP, ports, and a
/// wait before it.
type TestFrame = (u32, u32, bool, u16, u16, u64);

/// Runs `frames` through the firewall and its twin (each frame `secs(wait)` seconds after the
/// last): whether they agree frame by frame.
fn agree(
    fw: &mut Firewall,
    twin: &mut Naive,
    frames: &[TestFrame],
    secs: impl Fn(u64) -> u64,
) -> Result<(), TestCaseError> {
    let mut t = Instant::now();
    for &(a, b, is_tcp, sp, dp, wait) in frames {
        t += Duration::from_secs(secs(wait));
        let (src, dst) = ([10, 0, 0, a as u8], [10, 0, 0, b as u8]);
        let f = if is_tcp { tcp(src, dst, sp, dp) } else { udp(src, dst, sp, dp) };
        let key = (u32::from_be_bytes(src), u32::from_be_bytes(dst), if is_tcp { 6 } else { 17 }, sp, dp);
        prop_assert_eq!(fw.check(&f, t).is_ok(), twin.check(key, t), "frame {:?}", key);
    }
    Ok(())
}

proptest! {
    /// On random rules and a random sequence of frames (both ways, some after a long idle),
    /// the firewall and its twin agree frame by frame.
    #[test]
    fn the_firewall_agrees_with_its_twin(
        rules in proptest::collection::vec(rule(), 0..6),
        frames in proptest::collection::vec((0u32..4, 0u32..4, any::<bool>(), 1u16..8, 1u16..8, 0u64..4), 1..40),
        default_allow in any::<bool>(),
    ) {
        let default = if default_allow { Action::Allow } else { Action::Deny };
        let idle = Duration::from_secs(10);
        let mut fw = Firewall::new(&rules, FwConfig { default, idle, ..FwConfig::default() }).unwrap();
        let mut twin = Naive { rules: rules.clone(), default, flows: Vec::new(), idle, per_source: 4096, max: 65_536 };
        // Mostly close together, sometimes past the idle time.
        agree(&mut fw, &mut twin, &frames, |wait| if wait == 3 { 11 } else { wait })?;
    }

    /// With one address allowed to begin at most 2 remembered flows (and none idling, so that
    /// when a flow is forgotten is not in question), the firewall and its twin agree frame by
    /// frame: a source's flows beyond its share are let through by the rules but their replies
    /// are not.
    #[test]
    fn each_source_keeps_to_its_share_as_the_twin_does(
        rules in proptest::collection::vec(rule(), 0..6),
        frames in proptest::collection::vec((0u32..4, 0u32..4, any::<bool>(), 1u16..8, 1u16..8, 0u64..3), 1..60),
        default_allow in any::<bool>(),
    ) {
        let default = if default_allow { Action::Allow } else { Action::Deny };
        let idle = Duration::from_secs(1000);
        let cfg = FwConfig { default, idle, max_flows_per_source: 2, ..FwConfig::default() };
        let mut fw = Firewall::new(&rules, cfg).unwrap();
        let mut twin = Naive { rules: rules.clone(), default, flows: Vec::new(), idle, per_source: 2, max: 65_536 };
        agree(&mut fw, &mut twin, &frames, |wait| wait)?;
        prop_assert_eq!(fw.flows(), twin.flows.len());
    }
}

proptest! {
    // A random sequence fills the table with flows that all had a reply too seldom for the
    // default 256 cases to find a wrong eviction every time.
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]
    /// With at most 4 flows remembered (and none idling), the firewall and its twin agree frame
    /// by frame: a new flow in a full table takes the place of the flow that had no reply and
    /// whose last frame is oldest (each frame a second after the last, so that no two are
    /// equally old), and is not remembered if every flow had one. It fails with the full table
    /// refusing every new flow, or taking out a flow that had a reply.
    #[test]
    fn a_full_table_makes_room_as_the_twin_does(
        rules in proptest::collection::vec(rule(), 0..6),
        frames in proptest::collection::vec((0u32..4, 0u32..4, any::<bool>(), 1u16..8, 1u16..8, 0u64..3), 1..60),
        default_allow in any::<bool>(),
        per_source in 1usize..6,
    ) {
        let default = if default_allow { Action::Allow } else { Action::Deny };
        let idle = Duration::from_secs(100_000);
        let cfg = FwConfig { default, idle, max_flows: 4, max_flows_per_source: per_source, ..FwConfig::default() };
        let mut fw = Firewall::new(&rules, cfg).unwrap();
        let mut twin = Naive { rules: rules.clone(), default, flows: Vec::new(), idle, per_source, max: 4 };
        agree(&mut fw, &mut twin, &frames, |wait| wait + 1)?;
        prop_assert_eq!(fw.flows(), twin.flows.len());
    }
}
