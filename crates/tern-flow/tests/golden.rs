//! Golden tests per action: an input frame goes through the pipeline with one rule installed
//! through the OFU API; the output frame is re-parsed with `etherparse` (an independent parser)
//! and every checksum is verified against etherparse's own computation.

use std::net::IpAddr;

use etherparse::{LinkHeader, NetHeaders, PacketHeaders, TransportHeader, VlanHeader};
use tern_flow::action::ActionSet;
use tern_flow::ofu::{self, Instruction, Match, OfuKind, OfuSpec, Rule};
use tern_flow::pipeline::{DropReason, Outputs, Pipeline};
use tern_io::{Batch, DEFAULT_HEADROOM, Pool};
use tern_table::em::FiveTuple4;
use tern_wire::frame::{self, FrameError};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0xa];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0xb];

/// What etherparse saw in a frame, after checking every checksum in it.
#[derive(Debug, PartialEq)]
struct Seen {
    dst_mac: [u8; 6],
    src_mac: [u8; 6],
    vlans: Vec<(u16, u8)>,
    ttl: u8,
    dscp: u8,
    src: IpAddr,
    dst: IpAddr,
    ports: Option<(u16, u16)>,
    payload: Vec<u8>,
}

fn verify(frame: &[u8]) -> Seen {
    let h = PacketHeaders::from_ethernet_slice(frame).expect("etherparse parses the output");
    let Some(LinkHeader::Ethernet2(eth)) = h.link else { panic!("no Ethernet header") };
    let vlans = match h.vlan {
        None => vec![],
        Some(VlanHeader::Single(v)) => vec![(v.vlan_id.value(), v.pcp.value())],
        Some(VlanHeader::Double(d)) => {
            vec![(d.outer.vlan_id.value(), d.outer.pcp.value()), (d.inner.vlan_id.value(), d.inner.pcp.value())]
        }
    };
    let payload = h.payload.slice().to_vec();
    let (ttl, dscp, src, dst) = match &h.net {
        Some(NetHeaders::Ipv4(ip, _)) => {
            assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "IPv4 header checksum");
            (ip.time_to_live, ip.dscp.value(), IpAddr::from(ip.source), IpAddr::from(ip.destination))
        }
        Some(NetHeaders::Ipv6(ip, _)) => {
            (ip.hop_limit, ip.traffic_class >> 2, IpAddr::from(ip.source), IpAddr::from(ip.destination))
        }
        None => panic!("no IP header"),
    };
    let ports = match (&h.transport, &h.net) {
        (Some(TransportHeader::Udp(u)), Some(NetHeaders::Ipv4(ip, _))) => {
            if u.checksum != 0 {
                assert_eq!(u.checksum, u.calc_checksum_ipv4(ip, &payload).unwrap(), "UDP checksum");
            }
            Some((u.source_port, u.destination_port))
        }
        (Some(TransportHeader::Udp(u)), Some(NetHeaders::Ipv6(ip, _))) => {
            assert_eq!(u.checksum, u.calc_checksum_ipv6(ip, &payload).unwrap(), "UDP/IPv6 checksum");
            Some((u.source_port, u.destination_port))
        }
        (Some(TransportHeader::Tcp(t)), Some(NetHeaders::Ipv4(ip, _))) => {
            assert_eq!(t.checksum, t.calc_checksum_ipv4(ip, &payload).unwrap(), "TCP checksum");
            Some((t.source_port, t.destination_port))
        }
        (Some(TransportHeader::Icmpv4(i)), _) => {
            assert_eq!(i.checksum, i.icmp_type.calc_checksum(&payload), "ICMP checksum");
            None
        }
        (None, _) => None,
        (t, _) => panic!("unexpected transport {t:?}"),
    };
    Seen { dst_mac: eth.destination, src_mac: eth.source, vlans, ttl, dscp, src, dst, ports, payload }
}

fn udp4(ttl: u8) -> Vec<u8> {
    let mut f = Vec::new();
    frame::build_udp4(&mut f, MAC_A, MAC_B, [10, 0, 0, 1], [10, 1, 2, 3], 4000, 53, ttl, b"golden payload");
    f
}

fn tcp4() -> Vec<u8> {
    let mut f = Vec::new();
    frame::build_tcp4(&mut f, MAC_A, MAC_B, [192, 168, 0, 9], [10, 1, 2, 3], 33000, 80, 64, b"GET / HTTP/1.1\r\n\r\n");
    f
}

fn udp6() -> Vec<u8> {
    let mut f = Vec::new();
    let src = "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().octets();
    let dst = "2001:db8:1::2".parse::<std::net::Ipv6Addr>().unwrap().octets();
    frame::build_udp6(&mut f, MAC_A, MAC_B, src, dst, 5000, 443, 33, b"six");
    f
}

fn icmp4() -> Vec<u8> {
    let mut f = Vec::new();
    frame::build_icmp4_echo(&mut f, MAC_A, MAC_B, [10, 0, 0, 1], [10, 1, 2, 3], 77, 1, 64, b"ping!");
    f
}

/// Tagged copy of a frame.
fn tagged(f: &[u8], vid: u16) -> Vec<u8> {
    let mut t = f[..12].to_vec();
    t.extend_from_slice(&[0x81, 0x00]);
    t.extend_from_slice(&vid.to_be_bytes());
    t.extend_from_slice(&f[12..]);
    t
}

/// A pipeline with an LPM OFU (id 1) and an EM OFU (id 2), both enabled, 4 ports.
fn pipeline() -> (ofu::OfuDriver, Pipeline, Pool) {
    let spec = |id, kind| OfuSpec {
        id,
        kind,
        v4_entries: 1024,
        v6_entries: 1024,
        fifo_depth: 64,
        // The `cpu` profile: action sets of any width (the N3000's 128 bits are tested in ofu).
        action_set_bits: u32::MAX,
        write_cycles: 0,
    };
    let (driver, tables) = ofu::new(vec![spec(1, OfuKind::Lpm), spec(2, OfuKind::Em)]);
    driver.ofu_init(1).unwrap();
    driver.ofu_init(2).unwrap();
    let pool = Pool::new(256, 2048);
    (driver, Pipeline::new(tables, 4, pool.clone()), pool)
}

/// Runs one frame through a pipeline holding one rule; returns (output port, frame) or None.
fn run(matching: Match, actions: &str, input: &[u8]) -> (Option<(u16, Vec<u8>)>, Pipeline) {
    let (driver, mut p, pool) = pipeline();
    let ofu_id = if matching.kind() == OfuKind::Lpm { 1 } else { 2 };
    let actions: ActionSet = actions.parse().unwrap();
    driver.rule_table_ops(ofu_id, Instruction::Populate { index: 3, rule: Rule::new(matching, actions) }).unwrap();
    let mut batch = Batch::new(32);
    let mut pkt = pool.packet();
    pkt.reserve_headroom(DEFAULT_HEADROOM);
    pkt.extend_from_slice(input).unwrap();
    batch.push(pkt);
    let mut out = Outputs::new(4, 32, 32);
    p.process(1, 0, &mut batch, &mut out);
    for (port, b) in out.ports.iter_mut().enumerate() {
        if let Some(pkt) = b.drain().next() {
            return (Some((port as u16, pkt.data().to_vec())), p);
        }
    }
    (None, p)
}

fn lpm(net: &str) -> Match {
    Match::Ipv4Dst(net.parse().unwrap())
}

#[test]
fn set_macs_output() {
    let input = udp4(64);
    let (out, _) = run(
        lpm("10.1.0.0/16"),
        "set_field:eth_src=02:00:00:00:00:01,set_field:eth_dst=02:00:00:00:00:02,output:2",
        &input,
    );
    let (port, f) = out.unwrap();
    assert_eq!(port, 2);
    let (a, b) = (verify(&input), verify(&f));
    assert_eq!(b.src_mac, [2, 0, 0, 0, 0, 1]);
    assert_eq!(b.dst_mac, [2, 0, 0, 0, 0, 2]);
    assert_eq!(Seen { src_mac: a.src_mac, dst_mac: a.dst_mac, ..b }, a, "nothing else changed");
}

#[test]
fn dec_ttl_and_checksum() {
    let input = udp4(64);
    let (out, _) = run(lpm("10.1.2.0/24"), "dec_ttl,checksum,output:1", &input);
    let (_, f) = out.unwrap();
    let s = verify(&f);
    assert_eq!(s.ttl, 63);
    assert_eq!(s.payload, b"golden payload");
    // Without `checksum` the IPv4 header checksum is stale, as the paper's SUB without CAL.
    let (out, _) = run(lpm("10.1.2.0/24"), "dec_ttl,output:1", &input);
    let f = out.unwrap().1;
    assert_eq!(frame::FrameInfo::parse(&f), Err(FrameError::BadIpv4Checksum));
}

#[test]
fn dec_ttl_on_ipv6_hop_limit() {
    let input = udp6();
    let (out, _) = run(Match::Ipv6Dst("2001:db8:1::/48".parse().unwrap()), "dec_ttl,output:0", &input);
    let s = verify(&out.unwrap().1);
    assert_eq!(s.ttl, 32);
}

#[test]
fn expiring_ttl_goes_to_the_host() {
    let (out, p) = run(lpm("10.1.2.0/24"), "dec_ttl,checksum,output:1", &udp4(1));
    assert!(out.is_none());
    assert_eq!(p.stats().rule_to_host, 1);
}

#[test]
fn drop_is_counted() {
    let (out, p) = run(lpm("10.0.0.0/8"), "drop", &udp4(64));
    assert!(out.is_none());
    assert_eq!(p.stats().dropped(DropReason::Action), 1);
}

#[test]
fn set_ipv4_addresses_keeps_udp_and_tcp_checksums() {
    for input in [udp4(64), tcp4()] {
        let (out, _) = run(
            lpm("10.1.2.3/32"),
            "set_field:ipv4_src=172.16.0.1,set_field:ipv4_dst=172.16.9.9,checksum,output:1",
            &input,
        );
        let s = verify(&out.unwrap().1);
        assert_eq!(s.src, "172.16.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(s.dst, "172.16.9.9".parse::<IpAddr>().unwrap());
    }
}

#[test]
fn set_ports_keeps_checksums() {
    for input in [udp4(64), tcp4()] {
        let (out, _) = run(lpm("10.1.2.3/32"), "set_field:tp_src=1111,set_field:tp_dst=2222,output:1", &input);
        let s = verify(&out.unwrap().1);
        assert_eq!(s.ports, Some((1111, 2222)));
    }
}

#[test]
fn set_ipv6_address_keeps_udp_checksum() {
    let input = udp6();
    let (out, _) = run(
        Match::Ipv6Dst("2001:db8:1::/48".parse().unwrap()),
        "set_field:ipv6_src=fd00::77,set_field:tp_dst=8443,output:1",
        &input,
    );
    let s = verify(&out.unwrap().1);
    assert_eq!(s.src, "fd00::77".parse::<IpAddr>().unwrap());
    assert_eq!(s.ports, Some((5000, 8443)));
}

#[test]
fn set_dscp_v4_and_v6() {
    let (out, _) = run(lpm("10.1.2.3/32"), "set_field:dscp=46,checksum,output:1", &udp4(64));
    assert_eq!(verify(&out.unwrap().1).dscp, 46);
    let (out, _) = run(Match::Ipv6Dst("2001:db8:1::/48".parse().unwrap()), "set_field:dscp=10,output:1", &udp6());
    assert_eq!(verify(&out.unwrap().1).dscp, 10);
}

#[test]
fn icmp_survives_address_rewrite() {
    // ICMPv4's checksum has no pseudo-header: an address rewrite must leave it alone.
    let (out, _) = run(lpm("10.1.2.3/32"), "set_field:ipv4_dst=10.9.9.9,checksum,output:1", &icmp4());
    let s = verify(&out.unwrap().1);
    assert_eq!(s.dst, "10.9.9.9".parse::<IpAddr>().unwrap());
    assert_eq!(s.payload, b"ping!");
}

#[test]
fn push_and_pop_vlan() {
    let input = udp4(64);
    let (out, _) = run(lpm("10.1.2.3/32"), "push_vlan:100:5,output:1", &input);
    let f = out.unwrap().1;
    assert_eq!(f.len(), input.len() + 4);
    let s = verify(&f);
    assert_eq!(s.vlans, vec![(100, 5)]);
    assert_eq!(s.payload, b"golden payload");
    // Pop it again (and a second push makes a double tag).
    let (out, _) = run(lpm("10.1.2.3/32"), "pop_vlan,output:1", &f);
    assert_eq!(out.unwrap().1, input);
    let (out, _) = run(lpm("10.1.2.3/32"), "push_vlan:7,output:1", &f);
    assert_eq!(verify(&out.unwrap().1).vlans, vec![(7, 0), (100, 5)]);
    let (out, _) = run(lpm("10.1.2.3/32"), "set_field:vlan_vid=200,output:1", &tagged(&input, 100));
    assert_eq!(verify(&out.unwrap().1).vlans, vec![(200, 0)]);
}

/// A third tag would make a frame the parser refuses (here and at the next switch): the push
/// is dropped and counted, whether the set is compiled or interpreted.
#[test]
fn push_vlan_past_the_tag_limit_drops() {
    let double = tagged(&tagged(&udp4(64), 100), 7);
    assert_eq!(frame::FrameInfo::parse(&double).unwrap().vlans, 2);
    for set in [
        "push_vlan:9,output:1",
        "set_field:eth_src=02:00:00:00:00:01,set_field:eth_dst=02:00:00:00:00:02,dec_ttl,push_vlan:9,checksum,output:1",
    ] {
        let (out, p) = run(lpm("10.1.2.3/32"), set, &double);
        assert!(out.is_none(), "{set}");
        assert_eq!(p.stats().dropped(DropReason::TooManyVlansPushed), 1, "{set}");
    }
}

#[test]
fn the_papers_action_set() {
    // §6.4: set MACs, TTL decrement, VLAN insert, IPv4 checksum, output — over an EM rule.
    let input = tcp4();
    let t = FiveTuple4 { src: 0xc0a8_0009, dst: 0x0a01_0203, proto: 6, src_port: 33000, dst_port: 80 };
    let (out, p) = run(
        Match::Tuple4(t),
        "set_field:eth_src=02:00:00:00:00:01,set_field:eth_dst=02:00:00:00:00:02,dec_ttl,push_vlan:42,checksum,output:3",
        &input,
    );
    let (port, f) = out.unwrap();
    assert_eq!(port, 3);
    let s = verify(&f);
    assert_eq!((s.ttl, s.vlans.clone(), s.dst_mac), (63, vec![(42, 0)], [2, 0, 0, 0, 0, 2]));
    assert_eq!(s.ports, Some((33000, 80)));
    let ofu = &p.ofus()[1];
    let e = ofu.entry(3).unwrap();
    assert_eq!((e.packets, e.bytes), (1, input.len() as u64));
    // A different port misses the EM table and goes to the host.
    let mut other = Vec::new();
    frame::build_tcp4(&mut other, MAC_A, MAC_B, [192, 168, 0, 9], [10, 1, 2, 3], 33001, 80, 64, b"x");
    let (out, p) = run(Match::Tuple4(t), "output:3", &other);
    assert!(out.is_none());
    assert_eq!(p.stats().misses, 1);
}

#[test]
fn bad_frames_are_dropped_by_reason() {
    let (driver, mut p, pool) = pipeline();
    driver
        .rule_table_ops(
            1,
            Instruction::Populate { index: 0, rule: Rule::new(lpm("0.0.0.0/0"), "output:1".parse().unwrap()) },
        )
        .unwrap();
    let good = udp4(64);
    let mut bad_ihl = good.clone();
    bad_ihl[14] = 0x43;
    let mut bad_len = good.clone();
    bad_len[16..18].copy_from_slice(&9000u16.to_be_bytes());
    let cases: Vec<(Vec<u8>, FrameError)> = vec![
        (good[..9].to_vec(), FrameError::TruncatedEthernet),
        (good[..20].to_vec(), FrameError::TruncatedIpv4),
        (bad_ihl, FrameError::BadIhl),
        (bad_len, FrameError::TruncatedIpv4),
        (tagged(&good, 5)[..15].to_vec(), FrameError::TruncatedVlan),
    ];
    let mut batch = Batch::new(32);
    for (f, _) in &cases {
        let mut pkt = pool.packet();
        pkt.extend_from_slice(f).unwrap();
        batch.push(pkt);
    }
    let mut out = Outputs::new(4, 32, 32);
    p.process(0, 0, &mut batch, &mut out);
    for (_, reason) in &cases {
        assert!(p.stats().dropped(DropReason::Frame(*reason)) >= 1, "{reason}");
    }
    assert_eq!(p.stats().dropped_total(), cases.len() as u64);
    assert!(out.ports.iter().all(|b| b.is_empty()));
}

#[test]
fn no_packet_sees_half_a_rule() {
    // Rules are rewritten between every batch while packets flow; every packet leaves exactly as
    // one of the two action sets says, never a mix (the populate writes the action RAM first,
    // the delete clears the match entry first, all between two batches).
    let (driver, mut p, pool) = pipeline();
    let sets = [
        "set_field:eth_dst=02:00:00:00:00:01,output:1",
        "set_field:eth_dst=02:00:00:00:00:02,dec_ttl,checksum,output:2",
    ];
    let input = udp4(64);
    let mut out = Outputs::new(4, 64, 64);
    for round in 0..200u32 {
        let which = (round % 2) as usize;
        let rule = Rule::new(lpm("10.1.0.0/16"), sets[which].parse().unwrap());
        if round > 0 {
            driver.rule_table_ops(1, Instruction::Delete { index: 0 }).unwrap();
        }
        driver.rule_table_ops(1, Instruction::Populate { index: 0, rule }).unwrap();
        let mut batch = Batch::new(64);
        for _ in 0..8 {
            let mut pkt = pool.packet();
            pkt.reserve_headroom(DEFAULT_HEADROOM);
            pkt.extend_from_slice(&input).unwrap();
            batch.push(pkt);
        }
        p.process(u64::from(round), 0, &mut batch, &mut out);
        let b = &mut out.ports[1 + which];
        assert_eq!(b.len(), 8, "round {round}");
        for pkt in b.drain() {
            let s = verify(pkt.data());
            assert_eq!(s.dst_mac[5], 1 + which as u8);
            assert_eq!(s.ttl, if which == 0 { 64 } else { 63 });
        }
        assert!(out.host.packets.is_empty());
    }
}
