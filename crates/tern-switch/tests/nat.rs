//! The SNAT state (docs/clip.md, "SNAT"): netfilter's port choice, timeouts and TCP states,
//! replies and ICMP translated back, slices kept apart, bounded; frames re-parsed by
//! etherparse; the table against its naive twin.

use std::net::Ipv4Addr;

use proptest::prelude::*;
use tern_switch::nat::naive::NaiveNat;
use tern_switch::nat::*;
use tern_wire::frame::{
    FrameInfo, build_icmp4_echo, build_tcp4, build_udp4, fill_l4_checksum, header_sum_ok, l4_checksum_ok,
};

const S: u64 = 1_000_000_000;
const PUB: [u8; 4] = [192, 0, 2, 1];
const REMOTE: [u8; 4] = [198, 51, 100, 7];

fn ip(a: [u8; 4]) -> u32 {
    u32::from(Ipv4Addr::from(a))
}

fn nat() -> Nat {
    Nat::new(NatConfig::new(ip(PUB))).unwrap()
}

fn udp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Tuple {
    Tuple { proto: UDP, src: ip(src), sport: sp, dst: ip(dst), dport: dp }
}

fn tcp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Tuple {
    Tuple { proto: TCP, ..udp(src, dst, sp, dp) }
}

/// The reply a connection's peer sends to its public address and port.
fn reply_to(t: Tuple, public: (u32, u16)) -> Tuple {
    Tuple { proto: t.proto, src: t.dst, sport: t.dport, dst: public.0, dport: public.1 }
}

#[test]
fn the_source_port_is_kept_when_its_reply_tuple_is_free() {
    let mut n = nat();
    let a = udp([10, 0, 0, 1], REMOTE, 40000, 53);
    assert_eq!(n.outbound(a, 0, 0), Ok((ip(PUB), 40000)));
    // Another host, the same port, another destination: the reply tuples differ, kept again.
    let b = udp([10, 0, 0, 2], [198, 51, 100, 8], 40000, 53);
    assert_eq!(n.outbound(b, 0, 0), Ok((ip(PUB), 40000)));
    // The same destination: taken, so another port of the class.
    let c = udp([10, 0, 0, 3], REMOTE, 40000, 53);
    let (_, p) = n.outbound(c, 0, 0).unwrap();
    assert!(p >= 1024 && p != 40000, "{p}");
    // The same connection again: the same pair.
    assert_eq!(n.outbound(c, 0, 1), Ok((ip(PUB), p)));
    assert_eq!(n.counters.created, 3);
    assert_eq!(n.counters.kept_port, 2);
}

#[test]
fn ports_stay_in_their_class() {
    for (sport, lo, hi) in [(80u16, 1u16, 511u16), (0, 1, 511), (550, 600, 1023), (700, 600, 1023), (5000, 1024, 65535)]
    {
        let mut n = nat();
        let first = udp([10, 0, 0, 1], REMOTE, sport, 9);
        assert_eq!(n.outbound(first, 0, 0).unwrap().1, sport);
        for h in 2..40u8 {
            let (_, p) = n.outbound(udp([10, 0, 0, h], REMOTE, sport, 9), 0, 0).unwrap();
            assert!((lo..=hi).contains(&p), "source port {sport} got {p}, not in {lo}-{hi}");
            assert_ne!(p, sport);
        }
    }
}

#[test]
fn a_class_runs_out_and_says_so() {
    let mut n = nat();
    let mut given = std::collections::HashSet::new();
    let mut exhausted = 0;
    for h in 0..600u32 {
        let t = Tuple { proto: UDP, src: 0x0a00_0000 + h, sport: 100, dst: ip(REMOTE), dport: 9 };
        match n.outbound(t, 0, 0) {
            Ok((_, p)) => {
                assert!((1..=511).contains(&p));
                assert!(given.insert(p), "port {p} handed out twice");
            }
            Err(NatDrop::Exhausted) => exhausted += 1,
            Err(e) => panic!("{e}"),
        }
    }
    // 511 ports in the class: at most 511 connections; netfilter's bounded search may miss the
    // last free ones, as it does.
    assert!(given.len() <= 511 && given.len() > 400, "{}", given.len());
    assert_eq!(exhausted, 600 - given.len() as u64);
    assert_eq!(n.counters.drop_count(NatDrop::Exhausted), exhausted);
}

#[test]
fn servers_slices_never_share_a_tuple() {
    let mut a = Nat::new(NatConfig { slice: 0, slices: 2, ..NatConfig::new(ip(PUB)) }).unwrap();
    let mut b = Nat::new(NatConfig { slice: 1, slices: 2, seed: 7, ..NatConfig::new(ip(PUB)) }).unwrap();
    let mut seen = std::collections::HashSet::new();
    for h in 0..300u32 {
        for (n, slice) in [(&mut a, 0u16), (&mut b, 1u16)] {
            let t =
                Tuple { proto: TCP, src: 0x0a00_0000 + h, sport: 40000 + (h % 3) as u16, dst: ip(REMOTE), dport: 80 };
            let (_, p) = n.outbound(t, SYN, 0).unwrap();
            assert_eq!(p % 2, slice);
            assert!(seen.insert(p), "port {p} from both servers");
        }
    }
}

#[test]
fn replies_come_back_and_unsolicited_ones_are_counted() {
    let mut n = nat();
    let t = udp([10, 0, 0, 1], REMOTE, 5353, 53);
    let public = n.outbound(t, 0, 0).unwrap();
    assert_eq!(n.inbound(reply_to(t, public), 0, 1), Ok((ip([10, 0, 0, 1]), 5353)));
    // From another remote port: no connection.
    let stray = Tuple { sport: 54, ..reply_to(t, public) };
    assert_eq!(n.inbound(stray, 0, 1), Err(NatDrop::Unsolicited));
    assert_eq!(n.counters.drop_count(NatDrop::Unsolicited), 1);
    assert_eq!((n.counters.out, n.counters.in_), (1, 1));
}

#[test]
fn udp_times_out_at_30_s_and_at_120_s_once_replied() {
    let mut n = nat();
    let t = udp([10, 0, 0, 1], REMOTE, 5000, 53);
    let p = n.outbound(t, 0, 0).unwrap();
    assert!(n.get(&t, 30 * S - 1).is_some());
    assert!(n.get(&t, 30 * S).is_none());
    assert_eq!(n.inbound(reply_to(t, p), 0, 30 * S), Err(NatDrop::Unsolicited));
    // Again, replied this time.
    let p = n.outbound(t, 0, 40 * S).unwrap();
    n.inbound(reply_to(t, p), 0, 41 * S).unwrap();
    assert!(n.get(&t, 41 * S + 120 * S - 1).is_some());
    assert!(n.get(&t, 41 * S + 120 * S).is_none());
}

#[test]
fn tcp_states_set_the_timeouts() {
    let mut n = nat();
    let t = tcp([10, 0, 0, 1], REMOTE, 40001, 443);
    let p = n.outbound(t, SYN, 0).unwrap();
    let r = reply_to(t, p);
    let state = |n: &Nat, now: u64| n.get(&t, now).map(|c| (c.tcp.unwrap(), c.deadline - now));
    assert_eq!(state(&n, 0), Some((TcpState::SynSent, 120 * S)));
    n.inbound(r, SYN | ACK, 1).unwrap();
    assert_eq!(state(&n, 1), Some((TcpState::SynRecv, 60 * S)));
    n.outbound(t, ACK, 2).unwrap();
    assert_eq!(state(&n, 2), Some((TcpState::Established, 432_000 * S)));
    n.outbound(t, FIN | ACK, 3).unwrap();
    assert_eq!(state(&n, 3), Some((TcpState::FinWait, 120 * S)));
    n.inbound(r, ACK, 4).unwrap();
    assert_eq!(state(&n, 4), Some((TcpState::CloseWait, 60 * S)));
    n.inbound(r, FIN | ACK, 5).unwrap();
    assert_eq!(state(&n, 5), Some((TcpState::LastAck, 30 * S)));
    n.outbound(t, ACK, 6).unwrap();
    assert_eq!(state(&n, 6), Some((TcpState::TimeWait, 120 * S)));
    // A RST closes another connection: 10 s.
    let u = tcp([10, 0, 0, 1], REMOTE, 40002, 443);
    n.outbound(u, SYN, 0).unwrap();
    n.outbound(u, RST, 1).unwrap();
    assert_eq!(n.get(&u, 1).unwrap().tcp, Some(TcpState::Close));
    assert!(n.get(&u, 1 + 10 * S).is_none());
    // A RST or a SYN-ACK opens nothing.
    assert_eq!(n.outbound(tcp([10, 0, 0, 9], REMOTE, 1, 2), RST, 0), Err(NatDrop::TcpInvalid));
    assert_eq!(n.outbound(tcp([10, 0, 0, 9], REMOTE, 1, 2), SYN | ACK, 0), Err(NatDrop::TcpInvalid));
    // Picked up mid-stream (no SYN seen): established, as netfilter's loose tracking does.
    let m = tcp([10, 0, 0, 9], REMOTE, 3, 4);
    n.outbound(m, ACK, 0).unwrap();
    assert_eq!(n.get(&m, 0).unwrap().tcp, Some(TcpState::Established));
}

#[test]
fn the_table_is_bounded_and_expired_connections_make_room() {
    let mut n = Nat::new(NatConfig { capacity: 3, ..NatConfig::new(ip(PUB)) }).unwrap();
    for h in 1..=3 {
        n.outbound(udp([10, 0, 0, h], REMOTE, 1000, 9), 0, 0).unwrap();
    }
    assert_eq!(n.outbound(udp([10, 0, 0, 4], REMOTE, 1000, 9), 0, 1), Err(NatDrop::TableFull));
    assert_eq!(n.counters.drop_count(NatDrop::TableFull), 1);
    // After their 30 s, room again.
    assert!(n.outbound(udp([10, 0, 0, 4], REMOTE, 1000, 9), 0, 31 * S).is_ok());
    assert_eq!(n.connections(31 * S).count(), 1);
}

#[test]
fn bad_configurations_are_refused_by_name() {
    let e = Nat::new(NatConfig { addrs: vec![], ..NatConfig::new(1) }).unwrap_err();
    assert!(e.contains("public address"), "{e}");
    let e = Nat::new(NatConfig { slice: 2, slices: 2, ..NatConfig::new(1) }).unwrap_err();
    assert!(e.contains("slice 2 of 2"), "{e}");
}

// Frames.

fn l3(f: &mut [u8]) -> &mut [u8] {
    &mut f[14..]
}

fn sums_ok(f: &[u8]) -> bool {
    let info = FrameInfo::parse(f).unwrap();
    let hdr: [u8; 20] = f[14..34].try_into().unwrap();
    header_sum_ok(&hdr) && l4_checksum_ok(f, &info)
}

fn tcp_frame(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, flags: u8) -> Vec<u8> {
    let mut f = Vec::new();
    build_tcp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, b"hello");
    f[14 + 20 + 13] = flags;
    let end = f.len();
    fill_l4_checksum(&mut f, (26, 30), (30, 34), TCP, 34, end, 50);
    f
}

#[test]
fn a_udp_frame_is_translated_out_and_its_reply_back() {
    let mut n = nat();
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], REMOTE, 5353, 53, 64, b"query");
    let orig = f.clone();
    let tr = n.translate(l3(&mut f), Dir::Out, 0).unwrap();
    assert_eq!(tr.public, (ip(PUB), 5353));
    let p = etherparse::SlicedPacket::from_ethernet(&f).unwrap();
    let Some(etherparse::NetSlice::Ipv4(v4)) = &p.net else { panic!() };
    assert_eq!(v4.header().source(), PUB);
    assert_eq!(v4.header().destination(), REMOTE);
    assert!(sums_ok(&f));
    // The reply, and back: the original's addresses and ports.
    let mut r = Vec::new();
    build_udp4(&mut r, [4; 6], [2; 6], REMOTE, PUB, 53, 5353, 64, b"answer");
    n.translate(l3(&mut r), Dir::In, 1).unwrap();
    let p = etherparse::SlicedPacket::from_ethernet(&r).unwrap();
    let Some(etherparse::NetSlice::Ipv4(v4)) = &p.net else { panic!() };
    assert_eq!(v4.header().destination(), [10, 0, 0, 1]);
    let Some(etherparse::TransportSlice::Udp(u)) = &p.transport else { panic!() };
    assert_eq!(u.destination_port(), 5353);
    assert!(sums_ok(&r));
    // A second host with the same port to the same destination: another port, checksums right.
    let mut g = orig.clone();
    g[29] = 2;
    tern_wire::frame::ipv4_fill_checksum(&mut g, 14);
    let end = g.len();
    fill_l4_checksum(&mut g, (26, 30), (30, 34), UDP, 34, end, 40);
    let tr = n.translate(l3(&mut g), Dir::Out, 2).unwrap();
    assert_ne!(tr.public.1, 5353);
    assert_eq!(u16::from_be_bytes([g[34], g[35]]), tr.public.1);
    assert!(sums_ok(&g));
}

#[test]
fn a_udp_checksum_of_zero_stays_zero() {
    let mut n = nat();
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], REMOTE, 5353, 53, 64, b"q");
    f[40..42].fill(0);
    n.translate(l3(&mut f), Dir::Out, 0).unwrap();
    assert_eq!(&f[40..42], &[0, 0]);
}

#[test]
fn a_tcp_frame_is_translated_with_its_checksums() {
    let mut n = nat();
    let mut f = tcp_frame([10, 0, 0, 1], REMOTE, 40000, 443, SYN);
    n.translate(l3(&mut f), Dir::Out, 0).unwrap();
    let p = etherparse::SlicedPacket::from_ethernet(&f).unwrap();
    let Some(etherparse::TransportSlice::Tcp(t)) = &p.transport else { panic!() };
    assert!(t.syn());
    assert_eq!(t.source_port(), 40000);
    assert!(sums_ok(&f));
    let mut r = tcp_frame(REMOTE, PUB, 443, 40000, SYN | ACK);
    n.translate(l3(&mut r), Dir::In, 1).unwrap();
    assert_eq!(&r[30..34], &[10, 0, 0, 1]);
    assert!(sums_ok(&r));
    assert_eq!(n.get(&tcp([10, 0, 0, 1], REMOTE, 40000, 443), 1).unwrap().tcp, Some(TcpState::SynRecv));
}

#[test]
fn icmp_echo_ids_are_translated_both_ways() {
    let mut n = nat();
    let mut a = Vec::new();
    build_icmp4_echo(&mut a, [2; 6], [4; 6], [10, 0, 0, 1], REMOTE, 77, 1, 64, b"ping");
    assert_eq!(n.translate(l3(&mut a), Dir::Out, 0).unwrap().public, (ip(PUB), 77));
    // Another host pinging the same remote with the same id: another id.
    let mut b = Vec::new();
    build_icmp4_echo(&mut b, [2; 6], [4; 6], [10, 0, 0, 2], REMOTE, 77, 1, 64, b"ping");
    let id = n.translate(l3(&mut b), Dir::Out, 0).unwrap().public.1;
    assert_ne!(id, 77);
    let p = etherparse::SlicedPacket::from_ethernet(&b).unwrap();
    let Some(etherparse::TransportSlice::Icmpv4(i)) = &p.transport else { panic!() };
    assert_eq!(i.icmp_type(), etherparse::Icmpv4Type::EchoRequest(etherparse::IcmpEchoHeader { id, seq: 1 }));
    assert!(sums_ok(&b));
    // The remote's echo reply to that id goes to the second host with its own id.
    let mut r = Vec::new();
    build_icmp4_echo(&mut r, [4; 6], [2; 6], REMOTE, PUB, id, 1, 64, b"ping");
    r[34] = 0; // echo reply
    r[36..38].fill(0);
    let end = r.len();
    let c = tern_wire::frame::checksum(&r[34..end]);
    r[36..38].copy_from_slice(&c.to_be_bytes());
    n.translate(l3(&mut r), Dir::In, 1).unwrap();
    assert_eq!(&r[30..34], &[10, 0, 0, 2]);
    assert_eq!(u16::from_be_bytes([r[38], r[39]]), 77);
    assert!(sums_ok(&r));
    // 30 s without a packet: gone.
    assert!(
        n.get(&Tuple { proto: ICMP, src: ip([10, 0, 0, 1]), sport: 77, dst: ip(REMOTE), dport: 0 }, 30 * S).is_none()
    );
}

/// An ICMP error from `from` to `to` of `ty`/`code` quoting `quoted` (an IPv4 packet).
fn icmp_error(from: [u8; 4], to: [u8; 4], ty: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    build_icmp4_echo(&mut f, [4; 6], [2; 6], from, to, 0, 0, 64, quoted);
    f[34] = ty;
    f[35] = code;
    f[38..42].fill(0);
    f[36..38].fill(0);
    let end = f.len();
    let c = tern_wire::frame::checksum(&f[34..end]);
    f[36..38].copy_from_slice(&c.to_be_bytes());
    f
}

#[test]
fn an_icmp_error_about_a_connection_is_translated_back_with_its_quote() {
    let mut n = nat();
    // Two hosts, the same port, the same destination: the second gets another public port.
    let mut first = Vec::new();
    build_udp4(&mut first, [2; 6], [4; 6], [10, 0, 0, 1], REMOTE, 6000, 53, 64, b"a");
    n.translate(l3(&mut first), Dir::Out, 0).unwrap();
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 2], REMOTE, 6000, 53, 64, b"query!");
    let public = n.translate(l3(&mut f), Dir::Out, 0).unwrap().public;
    assert_ne!(public.1, 6000);
    // The remote says port unreachable, quoting the packet as it went (public source).
    let quote = f[14..14 + 28].to_vec();
    let mut e = icmp_error(REMOTE, PUB, 3, 3, &quote);
    let tr = n.translate(l3(&mut e), Dir::In, 1).unwrap();
    assert!(tr.icmp_error);
    assert_eq!(&e[30..34], &[10, 0, 0, 2], "the error goes to the inside host");
    let q = 42;
    assert_eq!(&e[q + 12..q + 16], &[10, 0, 0, 2], "the quoted source is the inside host");
    assert_eq!(u16::from_be_bytes([e[q + 20], e[q + 21]]), 6000);
    let qhdr: [u8; 20] = e[q..q + 20].try_into().unwrap();
    assert!(header_sum_ok(&qhdr));
    assert!(sums_ok(&e));
    let p = etherparse::SlicedPacket::from_ethernet(&e).unwrap();
    let Some(etherparse::TransportSlice::Icmpv4(i)) = &p.transport else { panic!() };
    assert!(matches!(i.icmp_type(), etherparse::Icmpv4Type::DestinationUnreachable(_)));
    assert_eq!(n.counters.icmp_errors, 1);
    // An error about no connection: unsolicited.
    let mut stray = f[14..14 + 28].to_vec();
    stray[20] = 0x99;
    let mut e = icmp_error(REMOTE, PUB, 3, 3, &stray);
    assert_eq!(n.translate(l3(&mut e), Dir::In, 1), Err(NatDrop::Unsolicited));
}

#[test]
fn an_icmp_error_going_out_about_a_reply_is_translated() {
    let mut n = nat();
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], REMOTE, 7000, 53, 64, b"q");
    n.translate(l3(&mut f), Dir::Out, 0).unwrap();
    let mut r = Vec::new();
    build_udp4(&mut r, [4; 6], [2; 6], REMOTE, PUB, 53, 7000, 64, b"answer");
    n.translate(l3(&mut r), Dir::In, 1).unwrap();
    // The inside host refuses the reply (port unreachable), quoting it as it got it.
    let quote = r[14..14 + 28].to_vec();
    let mut e = icmp_error([10, 0, 0, 1], REMOTE, 3, 3, &quote);
    n.translate(l3(&mut e), Dir::Out, 2).unwrap();
    assert_eq!(&e[26..30], &PUB, "the error comes from the public address");
    assert_eq!(&e[42 + 16..42 + 20], &PUB, "the quote's destination is the public address");
    assert!(sums_ok(&e));
}

#[test]
fn malformed_packets_fragments_and_other_icmp_are_counted() {
    let mut n = nat();
    assert_eq!(n.translate(&mut [0x45, 0, 0], Dir::Out, 0), Err(NatDrop::Malformed));
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], REMOTE, 1, 2, 64, b"x");
    let mut frag = f.clone();
    frag[14 + 7] = 1; // offset 8 bytes
    assert_eq!(n.translate(l3(&mut frag), Dir::Out, 0), Err(NatDrop::Fragment));
    // An ICMP message that is neither an echo nor an error: refused by name.
    let mut info = Vec::new();
    build_icmp4_echo(&mut info, [2; 6], [4; 6], [10, 0, 0, 1], REMOTE, 1, 1, 64, b"x");
    info[34] = 13; // timestamp request
    assert_eq!(n.translate(l3(&mut info), Dir::Out, 0), Err(NatDrop::Protocol));
    let mut long = f.clone();
    long[16..18].copy_from_slice(&9000u16.to_be_bytes());
    assert_eq!(n.translate(l3(&mut long), Dir::Out, 0), Err(NatDrop::Malformed));
    assert_eq!(n.counters.drop_count(NatDrop::Malformed), 2);
    assert_eq!(n.counters.drop_count(NatDrop::Fragment), 1);
    assert_eq!(n.counters.drop_count(NatDrop::Protocol), 1);
    assert!(n.is_empty());
}

// The twin.

#[derive(Debug, Clone)]
enum Op {
    Out { host: u8, sport: u16, dst: u8, dport: u16, proto: u8, flags: u8 },
    In { pick: usize, flags: u8, stray: bool },
    Wait(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let flags = prop::sample::select(vec![0u8, SYN, SYN | ACK, ACK, FIN | ACK, RST]);
    prop_oneof![
        4 => (0u8..6, prop::sample::select(vec![80u16, 300, 600, 1000, 5000, 5001]), 0u8..3, prop::sample::select(vec![53u16, 80]), prop::sample::select(vec![UDP, TCP, ICMP, 47]), flags.clone())
            .prop_map(|(host, sport, dst, dport, proto, flags)| Op::Out { host, sport, dst, dport, proto, flags }),
        3 => (any::<usize>(), flags, any::<bool>()).prop_map(|(pick, flags, stray)| Op::In { pick, flags, stray }),
        1 => prop::sample::select(vec![S, 10 * S, 31 * S, 100 * S]).prop_map(Op::Wait),
    ]
}

proptest! {
    #[test]
    fn the_table_agrees_with_its_naive_twin(ops in prop::collection::vec(op(), 1..200), two in any::<bool>(), cap in 4usize..40) {
        let mut cfg = NatConfig::new(ip(PUB));
        if two {
            cfg.addrs.push(ip([192, 0, 2, 2]));
        }
        cfg.capacity = cap;
        let mut fast = Nat::new(cfg.clone()).unwrap();
        let mut slow = NaiveNat::new(cfg);
        let mut now = 0;
        let mut made: Vec<(Tuple, (u32, u16))> = Vec::new();
        for op in ops {
            match op {
                Op::Out { host, sport, dst, dport, proto, flags } => {
                    let (sport, dport, flags) = match proto {
                        ICMP => (sport, 0, 0),
                        47 => (0, 0, 0),
                        _ => (sport, dport, flags),
                    };
                    let t = Tuple { proto, src: 0x0a00_0000 + u32::from(host), sport, dst: 0xc633_6400 + u32::from(dst), dport };
                    let a = fast.outbound(t, flags, now);
                    prop_assert_eq!(a, slow.outbound(t, flags, now));
                    if let Ok(p) = a {
                        made.push((t, p));
                    }
                }
                Op::In { pick, flags, stray } => {
                    if made.is_empty() {
                        continue;
                    }
                    let (t, p) = made[pick % made.len()];
                    let mut r = Tuple { proto: t.proto, src: t.dst, sport: if t.proto == ICMP { 0 } else { t.dport }, dst: p.0, dport: p.1 };
                    if stray {
                        r.sport = r.sport.wrapping_add(1);
                    }
                    prop_assert_eq!(fast.inbound(r, flags, now), slow.inbound(r, flags, now));
                }
                Op::Wait(d) => now += d,
            }
            let mut a: Vec<Connection> = fast.connections(now).collect();
            let mut b = slow.connections(now);
            a.sort_by_key(|c| c.orig);
            b.sort_by_key(|c| c.orig);
            prop_assert_eq!(a, b);
        }
    }

    /// Any bytes as a packet either way: no panic, and a packet translated out keeps valid
    /// checksums.
    #[test]
    fn any_bytes_are_safe(bytes in prop::collection::vec(any::<u8>(), 0..120), out in any::<bool>()) {
        let mut n = nat();
        let mut b = bytes;
        let _ = n.translate(&mut b, if out { Dir::Out } else { Dir::In }, 0);
    }
}

/// Another protocol (GRE here) is translated by its address alone, as netfilter's generic
/// tracking does: no ports, so a second inside host to the same remote finds the public
/// address's reply tuple taken (`exhausted`); its timeout is the generic 600 s.
#[test]
fn other_protocols_are_translated_by_address_alone() {
    let mut n = nat();
    let gre = |src: [u8; 4], dst: [u8; 4]| {
        let mut f = Vec::new();
        build_udp4(&mut f, [2; 6], [4; 6], src, dst, 0x0000, 0x6558, 64, b"tunnelled");
        f[14 + 9] = 47;
        f[24..26].fill(0);
        tern_wire::frame::ipv4_fill_checksum(&mut f, 14);
        f
    };
    let mut a = gre([10, 0, 0, 1], REMOTE);
    let payload = a[34..].to_vec();
    let tr = n.translate(l3(&mut a), Dir::Out, 0).unwrap();
    assert_eq!(tr.public, (ip(PUB), 0));
    assert_eq!(&a[26..30], &PUB);
    assert_eq!(&a[34..], &payload[..], "the payload untouched");
    let hdr: [u8; 20] = a[14..34].try_into().unwrap();
    assert!(header_sum_ok(&hdr));
    let mut back = gre(REMOTE, PUB);
    n.translate(l3(&mut back), Dir::In, 1).unwrap();
    assert_eq!(&back[30..34], &[10, 0, 0, 1]);
    let mut b = gre([10, 0, 0, 2], REMOTE);
    assert_eq!(n.translate(l3(&mut b), Dir::Out, 2), Err(NatDrop::Exhausted));
    let t = Tuple { proto: 47, src: ip([10, 0, 0, 1]), sport: 0, dst: ip(REMOTE), dport: 0 };
    assert!(n.get(&t, 1 + 600 * S - 1).is_some());
    assert!(n.get(&t, 1 + 600 * S).is_none());
}
