//! The NAT task: frames translated out and back, re-parsed with `etherparse` (an independent
//! parser) with every checksum checked against its own computation; ports per flow, exhaustion
//! and idle reuse; every drop named; any bytes taken without a panic.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use etherparse::{NetHeaders, PacketHeaders, TransportHeader};
use proptest::prelude::*;
use tern_chain::nat::{Dir, Nat, NatConfig, NatDrop};
use tern_wire::frame::{build_icmp4_echo, build_tcp4, build_udp4, build_udp6};

const EXT: [u8; 4] = [192, 0, 2, 1];
const INSIDE: [u8; 4] = [10, 0, 0, 7];
const SERVER: [u8; 4] = [198, 51, 100, 9];

fn nat(lo: u16, hi: u16) -> Nat {
    Nat::new(NatConfig { ports: (lo, hi), idle: Duration::from_secs(30), ..NatConfig::new(EXT) })
}

/// (source, destination, ports, payload) as etherparse reads the frame, after checking the IPv4
/// header checksum and the transport checksum against its own computation.
fn seen(frame: &[u8]) -> (Ipv4Addr, Ipv4Addr, (u16, u16), Vec<u8>) {
    let h = PacketHeaders::from_ethernet_slice(frame).expect("etherparse parses it");
    let Some(NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "IPv4 header checksum");
    let payload = h.payload.slice().to_vec();
    let ports = match &h.transport {
        Some(TransportHeader::Udp(u)) => {
            if u.checksum != 0 {
                assert_eq!(u.checksum, u.calc_checksum_ipv4(ip, &payload).unwrap(), "UDP checksum");
            }
            (u.source_port, u.destination_port)
        }
        Some(TransportHeader::Tcp(t)) => {
            assert_eq!(t.checksum, t.calc_checksum_ipv4(ip, &payload).unwrap(), "TCP checksum");
            (t.source_port, t.destination_port)
        }
        t => panic!("unexpected transport {t:?}"),
    };
    (Ipv4Addr::from(ip.source), Ipv4Addr::from(ip.destination), ports, payload)
}

fn udp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], src, dst, sport, dport, 64, payload);
    f
}

fn tcp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    build_tcp4(&mut f, [2; 6], [4; 6], src, dst, sport, dport, 64, payload);
    f
}

#[test]
fn out_and_back_with_every_checksum_right() {
    let mut n = nat(20000, 20099);
    let now = Instant::now();
    for (build, name) in [(udp as fn(_, _, _, _, &[u8]) -> Vec<u8>, "udp"), (tcp, "tcp")] {
        let mut f = build(INSIDE, SERVER, 5353, 53, b"a question of some length");
        n.translate(&mut f, Dir::Outbound, now).unwrap();
        let (src, dst, (sp, dp), payload) = seen(&f);
        assert_eq!((src, dst, dp), (Ipv4Addr::from(EXT), Ipv4Addr::from(SERVER), 53), "{name}");
        assert!((20000..=20099).contains(&sp), "{name}: port {sp}");
        assert_eq!(payload, b"a question of some length");
        // The server's answer to the external address and port comes back to the inside.
        let mut r = build(SERVER, EXT, 53, sp, b"the answer");
        n.translate(&mut r, Dir::Inbound, now).unwrap();
        let (src, dst, ports, _) = seen(&r);
        assert_eq!((src, dst, ports), (Ipv4Addr::from(SERVER), Ipv4Addr::from(INSIDE), (53, 5353)), "{name}");
    }
    // Same flow, same port; another flow, another port; TCP and UDP apart.
    let port = |n: &mut Nat, f: &mut Vec<u8>| {
        n.translate(f, Dir::Outbound, now).unwrap();
        seen(f).2.0
    };
    let a = port(&mut n, &mut udp(INSIDE, SERVER, 5353, 53, b"x"));
    assert_eq!(a, port(&mut n, &mut udp(INSIDE, SERVER, 5353, 53, b"y")));
    assert_ne!(a, port(&mut n, &mut udp(INSIDE, SERVER, 5354, 53, b"x")));
    assert_eq!(n.mappings(), 3);
    let s = n.stats();
    assert_eq!((s.outbound, s.inbound, s.mappings), (5, 2, 3));
}

#[test]
fn a_udp_frame_without_a_checksum_keeps_none() {
    let mut n = nat(1000, 1000);
    let mut f = udp(INSIDE, SERVER, 7, 7, b"no sum");
    // Zero the UDP checksum (offset 14 + 20 + 6).
    f[40] = 0;
    f[41] = 0;
    n.translate(&mut f, Dir::Outbound, Instant::now()).unwrap();
    assert_eq!(&f[40..42], &[0, 0]);
    seen(&f);
}

/// Sends `frame` outbound at `at` until it is translated; the frame and the refusals on the way
/// (each a step of the pass that takes idle ports back: docs/chain.md bounds them by 128 once
/// a tenth of the idle time has passed).
fn until_translated(n: &mut Nat, frame: &[u8], at: Instant) -> (Vec<u8>, usize) {
    for refused in 0..=128 {
        let mut f = frame.to_vec();
        if n.translate(&mut f, Dir::Outbound, at).is_ok() {
            return (f, refused);
        }
    }
    panic!("still refused after 128 steps");
}

/// Ports run out (every flow holding one had a reply), and an idle flow's port is taken back
/// for a new flow.
#[test]
fn ports_run_out_and_idle_ones_are_taken_back() {
    let mut n = nat(30000, 30001);
    let t0 = Instant::now();
    for (p, ext) in [(1, 30000), (2, 30001)] {
        n.translate(&mut udp(INSIDE, SERVER, p, 53, b""), Dir::Outbound, t0).unwrap();
        n.translate(&mut udp(SERVER, EXT, 53, ext, b""), Dir::Inbound, t0).unwrap();
    }
    assert_eq!(n.translate(&mut udp(INSIDE, SERVER, 3, 53, b""), Dir::Outbound, t0), Err(NatDrop::PortsExhausted));
    // Flow 1 keeps its port alive at t0 + 20 s; at t0 + 40 s flow 2 has idled 40 s: its port
    // goes to flow 3 once the pass's steps reach it.
    n.translate(&mut udp(INSIDE, SERVER, 1, 53, b""), Dir::Outbound, t0 + Duration::from_secs(20)).unwrap();
    let (f, refused) = until_translated(&mut n, &udp(INSIDE, SERVER, 3, 53, b""), t0 + Duration::from_secs(40));
    assert_eq!(seen(&f).2.0, 30001);
    // Flow 2's replies now have no mapping (the port is flow 3's: they reach flow 3's host
    // port, not flow 2's).
    let mut r = udp(SERVER, EXT, 53, 30001, b"");
    n.translate(&mut r, Dir::Inbound, t0 + Duration::from_secs(41)).unwrap();
    assert_eq!(seen(&r).2.1, 3);
    let s = n.stats();
    assert_eq!(
        (s.mappings, s.expired, s.drops[NatDrop::ALL.iter().position(|d| *d == NatDrop::PortsExhausted).unwrap()]),
        (3, 1, 1 + refused as u64)
    );
}

/// With no port free nor idle, a new flow takes the port of the flow that never had an inbound
/// frame and whose last frame is oldest (as conntrack's early drop: mappings that inside
/// addresses spoofed, which no reply reaches, give way), never one that had a reply; the port's
/// replies then reach the new flow.
#[test]
fn a_flow_that_never_had_a_reply_gives_its_port_to_a_new_one() {
    let mut n = nat(30000, 30001);
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    n.translate(&mut udp(INSIDE, SERVER, 1, 53, b""), Dir::Outbound, at(0)).unwrap();
    n.translate(&mut udp(SERVER, EXT, 53, 30000, b""), Dir::Inbound, at(1)).unwrap();
    n.translate(&mut udp(INSIDE, SERVER, 2, 53, b""), Dir::Outbound, at(2)).unwrap();
    // Flow 3 takes flow 2's port (no reply), not flow 1's.
    let mut f = udp(INSIDE, SERVER, 3, 53, b"");
    n.translate(&mut f, Dir::Outbound, at(3)).unwrap();
    assert_eq!(seen(&f).2.0, 30001);
    let mut r = udp(SERVER, EXT, 53, 30001, b"");
    n.translate(&mut r, Dir::Inbound, at(4)).unwrap();
    assert_eq!(seen(&r).2.1, 3, "the port's reply reaches flow 3");
    // Both flows holding ports had a reply: flow 2's next frame, a new flow, finds none.
    assert_eq!(n.translate(&mut udp(INSIDE, SERVER, 2, 53, b""), Dir::Outbound, at(5)), Err(NatDrop::PortsExhausted));
    // TCP has its own ports: a UDP flow never takes a TCP flow's.
    let s = n.stats();
    assert_eq!((s.mappings, s.unreplied_evicted, s.expired), (3, 1, 0));
    let mut t = tcp(INSIDE, SERVER, 9, 80, b"");
    n.translate(&mut t, Dir::Outbound, at(6)).unwrap();
    assert_eq!(seen(&t).2.0, 30000);
}

/// One inside address cannot take the range: past its `ports_per_host` its new flows are
/// refused (`port_limit`) while another host's still get ports, and once its own flows idle it
/// gets ports again.
#[test]
fn one_host_holds_no_more_than_its_limit() {
    let idle = Duration::from_secs(30);
    let mut n = Nat::new(NatConfig { ports: (30000, 30099), idle, ports_per_host: 3, ..NatConfig::new(EXT) });
    let t0 = Instant::now();
    let out = |n: &mut Nat, host: [u8; 4], sport: u16, at: Instant| {
        let mut f = udp(host, SERVER, sport, 53, b"");
        n.translate(&mut f, Dir::Outbound, at).map(|()| seen(&f).2.0)
    };
    for p in 1..=3 {
        out(&mut n, INSIDE, p, t0).unwrap();
    }
    let before = udp(INSIDE, SERVER, 4, 53, b"");
    let mut f = before.clone();
    assert_eq!(n.translate(&mut f, Dir::Outbound, t0), Err(NatDrop::PortLimit));
    assert_eq!(f, before, "a dropped frame is left as it was");
    // Its live flows keep their ports; TCP is counted apart; another host gets a port.
    assert_eq!(out(&mut n, INSIDE, 2, t0 + Duration::from_secs(1)), Ok(30001));
    let mut t = tcp(INSIDE, SERVER, 4, 80, b"");
    n.translate(&mut t, Dir::Outbound, t0).unwrap();
    assert_eq!(out(&mut n, [10, 0, 0, 8], 4, t0), Ok(30003));
    // Flows 1 and 3 idle past their time (flow 2 was used at 1 s): once the pass's steps reach
    // them, the host gets two new ones, and no third.
    let later = t0 + idle + Duration::from_millis(500);
    let (_, a) = until_translated(&mut n, &udp(INSIDE, SERVER, 4, 53, b""), later);
    let (_, b) = until_translated(&mut n, &udp(INSIDE, SERVER, 5, 53, b""), later);
    for _ in 0..128 {
        assert_eq!(out(&mut n, INSIDE, 6, later), Err(NatDrop::PortLimit));
    }
    // Taken back by then: flows 1 and 3, the TCP flow and the other host's.
    let s = n.stats();
    let limited = s.drops[NatDrop::ALL.iter().position(|d| *d == NatDrop::PortLimit).unwrap()];
    assert_eq!((s.expired, limited), (4, 1 + (a + b) as u64 + 128));
    assert_eq!(NatDrop::PortLimit.to_string(), "port_limit");
}

#[test]
fn what_it_does_not_translate_is_dropped_by_name() {
    let mut n = nat(40000, 40010);
    let now = Instant::now();
    let mut v6 = Vec::new();
    build_udp6(&mut v6, [2; 6], [4; 6], [1; 16], [2; 16], 1, 2, 64, b"");
    let mut icmp = Vec::new();
    build_icmp4_echo(&mut icmp, [2; 6], [4; 6], INSIDE, SERVER, 64, 1, 1, b"ping");
    let mut frag = udp(INSIDE, SERVER, 1, 2, b"abcdefgh");
    // A later fragment: offset 1 (8 bytes), IPv4 header checksum refilled.
    frag[20] = 0;
    frag[21] = 1;
    tern_wire::frame::ipv4_fill_checksum(&mut frag, 14);
    for (f, dir, why) in [
        (vec![0u8; 10], Dir::Outbound, NatDrop::Malformed),
        (v6, Dir::Outbound, NatDrop::NotIpv4),
        (icmp, Dir::Outbound, NatDrop::NotTcpUdp),
        (frag, Dir::Outbound, NatDrop::Fragment),
        (udp(SERVER, [192, 0, 2, 2], 53, 40000, b""), Dir::Inbound, NatDrop::NoMapping),
        (udp(SERVER, EXT, 53, 40005, b""), Dir::Inbound, NatDrop::NoMapping),
    ] {
        let mut f = f;
        let before = f.clone();
        assert_eq!(n.translate(&mut f, dir, now), Err(why));
        assert_eq!(f, before, "{why}: a dropped frame is left as it was");
    }
    assert_eq!(n.stats().drops, [1, 1, 1, 1, 2, 0, 0]);
    assert_eq!(NatDrop::NoMapping.to_string(), "no_mapping");
}

proptest! {
    /// Any inside address, ports and payload: out and back restores the frame exactly, and
    /// every checksum on the way is right.
    #[test]
    fn out_and_back_restores_any_flow(
        inside in any::<[u8; 4]>(), sport in any::<u16>(), dport in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64), tcp_frame in any::<bool>(),
    ) {
        let mut n = nat(1024, 65535);
        let now = Instant::now();
        let build = if tcp_frame { tcp } else { udp };
        let mut f = build(inside, SERVER, sport, dport, &payload);
        n.translate(&mut f, Dir::Outbound, now).unwrap();
        let (_, _, (ext_port, _), _) = seen(&f);
        let mut r = build(SERVER, EXT, dport, ext_port, &payload);
        n.translate(&mut r, Dir::Inbound, now).unwrap();
        prop_assert_eq!(r, build(SERVER, inside, dport, sport, &payload));
    }

    /// Any flows of either protocol, out and in, at any times, on a range of 3 ports (idle 1 s),
    /// against what docs/chain.md promises: a flow used within the idle time keeps its port
    /// unless it never had a reply and a new flow took it; a port goes to at most one flow at a
    /// time, and from one flow to another only once the first idled or if it never had a
    /// reply; a reply reaches the flow that last took its port, while that flow is not idle; a
    /// new flow is refused only while every port of its protocol is held by a flow that had a
    /// reply and was used within the idle time and a tenth (the sweep's period), or fewer than
    /// 128 refusals ago since (the steps of the passes that take ports back).
    #[test]
    fn ports_follow_the_documented_policy(
        ops in proptest::collection::vec((any::<bool>(), any::<bool>(), 1u16..5, 0u64..600), 1..120),
    ) {
        const LO: u16 = 30000;
        let idle = Duration::from_secs(1);
        let mut n = Nat::new(NatConfig { ports: (LO, LO + 2), idle, ..NatConfig::new(EXT) });
        let t0 = Instant::now();
        let mut now = t0;
        // By (tcp, inside port): the port it last got and when it was last translated.
        let mut flows: std::collections::HashMap<(bool, u16), (u16, Instant)> = Default::default();
        // By (tcp, external port): the flow that last took it.
        let mut holder: std::collections::HashMap<(bool, u16), u16> = Default::default();
        // By flow: whether a reply reached its mapping (none: not known, as when a flow idled
        // and came back, its mapping kept or made again).
        let mut replied: std::collections::HashMap<(bool, u16), bool> = Default::default();
        // A flow whose port a new flow took (it never had a reply): port 0.
        const LOST: u16 = 0;
        // When each new flow was refused.
        let mut refusals: Vec<Instant> = Vec::new();
        let since = |t: Instant, now: Instant| now.duration_since(t);
        for (inbound, is_tcp, flow, dt) in ops {
            now += Duration::from_millis(dt);
            let build = if is_tcp { tcp } else { udp };
            if inbound {
                let port = LO + flow % 3;
                let mut r = build(SERVER, EXT, 53, port, b"r");
                let got = n.translate(&mut r, Dir::Inbound, now);
                if let Some(&h) = holder.get(&(is_tcp, port)) {
                    let (hp, last) = flows[&(is_tcp, h)];
                    if hp == port && since(last, now) < idle {
                        prop_assert!(got.is_ok(), "a reply to the live flow {h}: {got:?}");
                    }
                    if got.is_ok() {
                        prop_assert_eq!(seen(&r).2.1, h, "a reply reaches the port's last flow");
                        flows.insert((is_tcp, h), (port, now));
                        replied.insert((is_tcp, h), true);
                    }
                } else {
                    prop_assert_eq!(got, Err(NatDrop::NoMapping));
                }
                continue;
            }
            let mut f = build(INSIDE, SERVER, flow, 53, b"q");
            match n.translate(&mut f, Dir::Outbound, now) {
                Ok(()) => {
                    let port = seen(&f).2.0;
                    prop_assert!((LO..=LO + 2).contains(&port));
                    if let Some(&(had, last)) = flows.get(&(is_tcp, flow))
                        && since(last, now) < idle
                        && had != LOST
                    {
                        prop_assert_eq!(port, had, "a live flow keeps its port");
                    }
                    match flows.get(&(is_tcp, flow)) {
                        // A new mapping: no reply yet.
                        Some(&(had, _)) if had != port => _ = replied.insert((is_tcp, flow), false),
                        None => _ = replied.insert((is_tcp, flow), false),
                        // Idle, and back on its port: its mapping kept, or made again.
                        Some(&(_, last)) if since(last, now) >= idle => _ = replied.remove(&(is_tcp, flow)),
                        Some(_) => {}
                    }
                    if let Some(&h) = holder.get(&(is_tcp, port))
                        && h != flow
                    {
                        let (hp, last) = flows[&(is_tcp, h)];
                        if hp == port && since(last, now) < idle {
                            let had_reply = replied.get(&(is_tcp, h)) == Some(&true);
                            prop_assert!(!had_reply, "port {port} taken from live flow {h}, which had a reply");
                            flows.insert((is_tcp, h), (LOST, last));
                        }
                    }
                    holder.insert((is_tcp, port), flow);
                    flows.insert((is_tcp, flow), (port, now));
                }
                Err(d) => {
                    prop_assert_eq!(d, NatDrop::PortsExhausted);
                    refusals.push(now);
                    for p in LO..=LO + 2 {
                        let h = holder.get(&(is_tcp, p));
                        prop_assert!(h.is_some(), "port {p} never handed out, yet none free");
                        let (hp, last) = flows[&(is_tcp, *h.unwrap())];
                        prop_assert!(hp == p, "port {p}'s flow moved on, yet none free");
                        let never = replied.get(&(is_tcp, *h.unwrap())) == Some(&false);
                        prop_assert!(!never, "port {p}'s flow never had a reply, yet none free");
                        // Idle past 1.1 idle times and 128 refusals (each a step at least): taken back.
                        let due = last + idle + idle / 10;
                        let steps = refusals.iter().filter(|&&t| t >= due).count();
                        prop_assert!(now < due || steps < 128, "port {p}'s flow idled, yet none free");
                    }
                }
            }
        }
    }

    /// Any flows of three hosts (a limit of 2 ports each, 8 ports, idle 1 s) at any times,
    /// against the port limit docs/chain.md promises: no host holds more than its limit of
    /// ports with live flows; a host's new flow is refused `port_limit` only while the host
    /// holds its limit with flows used within the idle time and a tenth, or fewer than 128
    /// refusals ago since (the steps of the passes that take ports back); a live flow keeps its
    /// port.
    #[test]
    fn hosts_keep_to_their_port_limit(
        ops in proptest::collection::vec((0u8..3, 1u16..6, 0u64..400), 1..150),
    ) {
        const LO: u16 = 30000;
        const LIMIT: usize = 2;
        let idle = Duration::from_secs(1);
        let mut n = Nat::new(NatConfig { ports: (LO, LO + 7), idle, ports_per_host: LIMIT as u32, ..NatConfig::new(EXT) });
        let t0 = Instant::now();
        let mut now = t0;
        // By (host, inside port): the port it last got and when it was last translated.
        let mut flows: std::collections::HashMap<(u8, u16), (u16, Instant)> = Default::default();
        // By external port: the flow that last took it.
        let mut holder: std::collections::HashMap<u16, (u8, u16)> = Default::default();
        // When each new flow was refused.
        let mut refusals: Vec<Instant> = Vec::new();
        // A host's flows that hold their port and that `recent` is true of (given when each
        // was last used).
        let holding = |flows: &std::collections::HashMap<(u8, u16), (u16, Instant)>,
                       holder: &std::collections::HashMap<u16, (u8, u16)>,
                       host: u8, recent: &dyn Fn(Instant) -> bool| {
            flows
                .iter()
                .filter(|&(&(h, p), &(port, last))| h == host && holder.get(&port) == Some(&(h, p)) && recent(last))
                .count()
        };
        for (host, flow, dt) in ops {
            now += Duration::from_millis(dt);
            let mut f = udp([10, 0, 0, host], SERVER, flow, 53, b"q");
            match n.translate(&mut f, Dir::Outbound, now) {
                Ok(()) => {
                    let port = seen(&f).2.0;
                    if let Some(&(had, last)) = flows.get(&(host, flow))
                        && now.duration_since(last) < idle
                    {
                        prop_assert_eq!(port, had, "a live flow keeps its port");
                    }
                    holder.insert(port, (host, flow));
                    flows.insert((host, flow), (port, now));
                    let live = holding(&flows, &holder, host, &|last| now.duration_since(last) < idle);
                    prop_assert!(live <= LIMIT, "host {host} holds {live} ports of live flows");
                }
                Err(d) => {
                    prop_assert_eq!(d, NatDrop::PortLimit, "8 ports cannot run out for 3 hosts of 2");
                    refusals.push(now);
                    let may_hold = holding(&flows, &holder, host, &|last| {
                        let due = last + idle + idle / 10;
                        now < due || refusals.iter().filter(|&&t| t >= due).count() < 128
                    });
                    prop_assert!(may_hold >= LIMIT, "host {host} refused holding {may_hold} ports of recent flows");
                }
            }
        }
    }

    /// Any bytes, either way: translated or dropped by name, never a panic.
    #[test]
    fn any_bytes_are_taken(b in proptest::collection::vec(any::<u8>(), 0..80), inbound in any::<bool>()) {
        let mut n = nat(1, 10);
        let mut b = b;
        let _ = n.translate(&mut b, if inbound { Dir::Inbound } else { Dir::Outbound }, Instant::now());
    }
}
