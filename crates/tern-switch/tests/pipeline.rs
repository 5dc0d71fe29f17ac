//! The pipeline on Appendix A's SNAT (docs/clip.md, "The pipeline"): a miss goes to a server
//! with the flow's hash; an entry translates in the switch; a server's response is written by
//! post-processing; checksums stay valid (re-parsed with etherparse).

use tern_switch::pipeline::{KeyMatch, Outcome, Pipeline};
use tern_switch::program::Program;

fn snat() -> Pipeline {
    let text =
        std::fs::read_to_string(format!("{}/../../examples/switch/snat.toml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    Pipeline::new(Program::parse(&text).unwrap())
}

fn udp(src: [u8; 4], sport: u16) -> Vec<u8> {
    let mut f = Vec::new();
    tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src, [8, 8, 8, 8], sport, 53, 64, b"query");
    f
}

/// The frame's IPv4 source, UDP source port, and whether both checksums are right.
fn seen(f: &[u8]) -> ([u8; 4], u16, bool) {
    let h = etherparse::PacketHeaders::from_ethernet_slice(f).unwrap();
    let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    let Some(etherparse::TransportHeader::Udp(u)) = &h.transport else { panic!("not UDP") };
    let ok = ip.header_checksum == ip.calc_header_checksum()
        && u.checksum == u.calc_checksum_ipv4(ip, h.payload.slice()).unwrap();
    (ip.source, u.source_port, ok)
}

fn key(src: [u8; 4], sport: u16) -> Vec<KeyMatch> {
    vec![
        KeyMatch::Exact(u64::from(u32::from_be_bytes(src))),
        KeyMatch::Exact(u64::from(u32::from_be_bytes([8, 8, 8, 8]))),
        KeyMatch::Exact(17),
        // TCP's ports (none in a UDP packet), then UDP's.
        KeyMatch::Exact(0),
        KeyMatch::Exact(0),
        KeyMatch::Exact(u64::from(sport)),
        KeyMatch::Exact(53),
    ]
}

#[test]
fn a_miss_goes_to_a_server_and_its_answer_is_written_back() {
    let mut p = snat();
    let mut f = udp([10, 0, 0, 5], 4000);
    let original = f.clone();
    assert_eq!(p.pre(&mut f, 1), Outcome::ToServer, "a miss goes to a server");
    // The request: the flow's 64-bit hash and the way it goes (0: out); the same flow, the
    // same hash; another, another.
    let request = p.request().to_vec();
    assert_eq!(request.len(), 9);
    assert_eq!(request[8], 0);
    assert_eq!(p.param_len(), 9);
    // parsed_len: the IPv4 and UDP headers.
    assert_eq!(p.parsed_len(), 28);
    assert_eq!(p.mirrored_hit(), Some(false));
    let mut g = udp([10, 0, 0, 5], 4000);
    assert_eq!(p.pre(&mut g, 1), Outcome::ToServer);
    assert_eq!(p.request(), &request[..]);
    let mut h = udp([10, 0, 0, 6], 4000);
    assert_eq!(p.pre(&mut h, 1), Outcome::ToServer);
    assert_ne!(p.request(), &request[..]);
    // The frame is unchanged on its way to the server; the register counted the three.
    assert_eq!(f, original);
    assert_eq!(p.register("to_server").unwrap()[4000 % 1024], 3);
    assert_eq!(p.table_counts("nat"), Some((0, 3)));
    // The server answers 192.0.2.9:30000 for the source (dir 0); post-processing writes it,
    // checksums fixed.
    let mut response = vec![192, 0, 2, 9];
    response.extend_from_slice(&30000u16.to_be_bytes());
    response.push(0);
    assert_eq!(p.post(&mut f, &response), Outcome::Forward { port: None });
    assert_eq!(seen(&f), ([192, 0, 2, 9], 30000, true));
    // The response is the flow's entry: translate(addr, port) keyed by the frame's 5-tuple as
    // it came in (post-processing has rewritten the PHV's source since).
    let (mut k, mut params) = (Vec::new(), Vec::new());
    assert!(p.learned(&mut k, &mut params));
    let want: Vec<u64> =
        key([10, 0, 0, 5], 4000).iter().map(|m| if let KeyMatch::Exact(v) = m { *v } else { 0 }).collect();
    assert_eq!(k, want);
    assert_eq!(params, [u64::from(u32::from_be_bytes([192, 0, 2, 9])), 30000]);
    assert_eq!(p.learn_action(), Some("translate"));
    // A response of the wrong length is dropped by name.
    assert_eq!(p.post(&mut f, &response[..5]), Outcome::Drop("response_length"));
}

#[test]
fn an_entry_translates_in_the_switch() {
    let mut p = snat();
    p.insert("nat", &key([10, 0, 0, 5], 4000), 0, "translate", &[u64::from(u32::from_be_bytes([192, 0, 2, 1])), 20000])
        .unwrap();
    let mut f = udp([10, 0, 0, 5], 4000);
    assert_eq!(p.pre(&mut f, 1), Outcome::Forward { port: None });
    assert_eq!(seen(&f), ([192, 0, 2, 1], 20000, true));
    assert_eq!(p.table_counts("nat"), Some((1, 0)));
    assert_eq!(p.mirrored_hit(), Some(true));
    assert_eq!(p.len("nat"), 1);
    // Another flow misses; removing the entry makes the first miss again.
    let mut g = udp([10, 0, 0, 5], 4001);
    assert!(matches!(p.pre(&mut g, 1), Outcome::ToServer));
    assert!(p.remove("nat", &key([10, 0, 0, 5], 4000)));
    let mut f = udp([10, 0, 0, 5], 4000);
    assert!(matches!(p.pre(&mut f, 1), Outcome::ToServer));
}

#[test]
fn bad_entries_and_frames_are_refused() {
    let mut p = snat();
    let k = key([10, 0, 0, 5], 4000);
    assert!(p.insert("nat", &k[..4], 0, "translate", &[1, 2]).unwrap_err().contains("7 key fields"));
    assert!(p.insert("nat", &k, 0, "ask_server", &[]).unwrap_err().contains("not one of its actions"));
    assert!(p.insert("nat", &k, 0, "translate", &[1]).unwrap_err().contains("2 parameters"));
    assert!(
        p.insert("nat", &k, 0, "translate", &[1, 70000]).unwrap_err().contains("`port` = 70000 is wider than 16 bits")
    );
    assert!(p.insert("nats", &k, 0, "translate", &[1, 2]).unwrap_err().contains("no table `nats`"));
    let mut lpm = k.clone();
    lpm[0] = KeyMatch::Lpm(0, 8);
    assert!(p.insert("nat", &lpm, 0, "translate", &[1, 2]).unwrap_err().contains("matched Exact"));
    // Shorter than Ethernet: dropped by name; an ARP frame runs with no IPv4 fields and the
    // program sends it to no server (not IPv4: routed as it is).
    assert_eq!(p.pre(&mut [0u8; 10], 1), Outcome::Drop("malformed"));
    let mut arp = vec![0xffu8; 12];
    arp.extend_from_slice(&[0x08, 0x06]);
    arp.extend_from_slice(&[0; 28]);
    assert!(matches!(p.pre(&mut arp, 1), Outcome::Forward { port: None }));
}

/// A forwarding program: an LPM route table sets the egress port (the longest prefix wins), a
/// ternary ACL after it drops by priority, and TTL is decremented with a checksum fix.
#[test]
fn lpm_routes_and_a_ternary_acl() {
    let prog = Program::parse(
        r#"
name = "router"
program = 2
pre_processing = ["route", "acl"]

[[table]]
name = "route"
key = [{ field = "ipv4.dst", match = "lpm" }]
size = 16
actions = ["out"]
default = "nowhere"

[[table]]
name = "acl"
key = [{ field = "udp.dst_port", match = "ternary" }]
size = 16
actions = ["deny", "allow"]
default = "allow"

[[action]]
name = "out"
params = [{ name = "port", bits = 9 }]
ops = [
  { op = "egress", port = "param.port" },
  { op = "sub", dst = "ipv4.ttl", a = "ipv4.ttl", b = 1 },
]

[[action]]
name = "nowhere"
ops = [{ op = "drop" }]

[[action]]
name = "deny"
ops = [{ op = "drop" }]

[[action]]
name = "allow"
ops = []
"#,
    )
    .unwrap();
    let mut p = Pipeline::new(prog);
    let net = |a: [u8; 4]| u64::from(u32::from_be_bytes(a));
    p.insert("route", &[KeyMatch::Lpm(net([8, 0, 0, 0]), 8)], 0, "out", &[1]).unwrap();
    p.insert("route", &[KeyMatch::Lpm(net([8, 8, 0, 0]), 16)], 0, "out", &[2]).unwrap();
    p.insert("route", &[KeyMatch::Lpm(net([8, 8, 8, 0]), 24)], 0, "out", &[3]).unwrap();
    // Ports 5000-5001 (mask 0xfffe) denied at priority 2; everything else allowed at 1.
    p.insert("acl", &[KeyMatch::Ternary(5000, 0xfffe)], 2, "deny", &[]).unwrap();
    p.insert("acl", &[KeyMatch::Ternary(0, 0)], 1, "allow", &[]).unwrap();
    let frame = |dst: [u8; 4], dport: u16| {
        let mut f = Vec::new();
        tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 5], dst, 4000, dport, 64, b"x");
        f
    };
    for (dst, port) in [([8, 8, 8, 8], 3), ([8, 8, 9, 9], 2), ([8, 1, 1, 1], 1)] {
        let mut f = frame(dst, 53);
        assert_eq!(p.pre(&mut f, 7), Outcome::Forward { port: Some(port) }, "{dst:?}");
        let h = etherparse::PacketHeaders::from_ethernet_slice(&f).unwrap();
        let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!() };
        assert_eq!(ip.time_to_live, 63);
        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    }
    let mut f = frame([9, 9, 9, 9], 53);
    assert_eq!(p.pre(&mut f, 7), Outcome::Drop("dropped_by_program"), "no route");
    for dport in [5000, 5001] {
        let mut f = frame([8, 8, 8, 8], dport);
        assert_eq!(p.pre(&mut f, 7), Outcome::Drop("dropped_by_program"), "{dport}");
    }
    let mut f = frame([8, 8, 8, 8], 5002);
    assert_eq!(p.pre(&mut f, 7), Outcome::Forward { port: Some(3) });
}

/// A program with its own header and parser state: VXLAN after UDP port 4789. Its `vni` is a
/// key and is rewritten; the UDP checksum follows; `parsed_len` counts the header; a frame to
/// another port has no VXLAN (its fields read 0). A header with fields off byte boundaries is
/// read and written bit by bit.
#[test]
fn declared_headers_are_parsed_matched_and_written_back() {
    let text = r#"
name = "vni"
program = 2
pre_processing = ["remap", "tag_id"]
[[header]]
name = "vxlan"
fields = [{ name = "flags", bits = 8 }, { name = "reserved", bits = 24 }, { name = "vni", bits = 24 }, { name = "reserved2", bits = 8 }]
[[header]]
name = "tag"
fields = [{ name = "ver", bits = 4 }, { name = "id", bits = 12 }, { name = "rest", bits = 16 }]
[[parser]]
after = "udp"
select = "udp.dst_port"
value = 4789
extract = "vxlan"
[[parser]]
after = "vxlan"
select = "vxlan.flags"
value = 8
extract = "tag"
[[table]]
name = "remap"
key = [{ field = "vxlan.vni", match = "exact" }]
size = 16
actions = ["set_vni"]
default = "pass"
[[action]]
name = "set_vni"
params = [{ name = "vni", bits = 24 }]
ops = [{ op = "set", dst = "vxlan.vni", src = "param.vni" }, { op = "egress", port = 3 }]
[[action]]
name = "pass"
ops = []
[[action]]
name = "tag_id"
ops = [{ op = "add", dst = "tag.id", a = "tag.id", b = 1 }]
"#;
    let prog = Program::parse(text).unwrap();
    let mut p = Pipeline::new(prog);
    p.insert("remap", &[KeyMatch::Exact(100)], 0, "set_vni", &[200]).unwrap();
    let mut payload = vec![0x08, 0, 0, 0, 0, 0, 100, 0];
    payload.extend_from_slice(&[0x1a, 0xbc, 0xde, 0xf0]);
    payload.extend_from_slice(b"inner");
    let mut f = Vec::new();
    tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], [10, 0, 0, 2], 5000, 4789, 64, &payload);
    assert_eq!(p.pre(&mut f, 1), Outcome::Forward { port: Some(3) });
    assert_eq!(p.parsed_len(), 20 + 8 + 8 + 4);
    // The VNI is 200 now; the tag's 12-bit id (0xabc) went up by one; the rest is unchanged.
    assert_eq!(&f[42..50], &[0x08, 0, 0, 0, 0, 0, 200, 0]);
    assert_eq!(&f[50..54], &[0x1a, 0xbd, 0xde, 0xf0]);
    let h = etherparse::PacketHeaders::from_ethernet_slice(&f).unwrap();
    let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    let Some(etherparse::TransportHeader::Udp(u)) = &h.transport else { panic!("not UDP") };
    assert_eq!(u.checksum, u.calc_checksum_ipv4(ip, h.payload.slice()).unwrap(), "UDP checksum follows");
    // Another port: no VXLAN, no tag; the table misses on vni 0 and the frame is unchanged.
    let mut g = Vec::new();
    tern_wire::frame::build_udp4(&mut g, [2; 6], [4; 6], [10, 0, 0, 1], [10, 0, 0, 2], 5000, 53, 64, &payload);
    let before = g.clone();
    assert_eq!(p.pre(&mut g, 1), Outcome::Forward { port: None });
    assert_eq!(g, before);
    assert_eq!(p.parsed_len(), 28);
    assert_eq!(p.table_counts("remap"), Some((1, 1)));
}

/// The deparser writes only the fields that changed and updates the checksums incrementally:
/// any mix of rewritten addresses, TTL, TOS, ports, TCP sequence and flags, on TCP and UDP
/// frames of any payload, leaves both checksums right (re-parsed with etherparse) and the
/// fields as written; the same values written back change no byte.
mod incremental {
    use super::*;
    use proptest::prelude::*;

    const REWRITE: &str = r#"
name = "rewrite"
program = 9
pre_processing = ["rw"]
[[table]]
name = "rw"
key = [{ field = "meta.ingress_port", match = "exact" }]
size = 4
actions = ["set"]
default = "none"
[[action]]
name = "set"
params = [{ name = "src", bits = 32 }, { name = "dst", bits = 32 }, { name = "ttl", bits = 8 }, { name = "tos", bits = 8 }, { name = "sp", bits = 16 }, { name = "dp", bits = 16 }, { name = "seq", bits = 32 }, { name = "flags", bits = 8 }]
ops = [
  { op = "set", dst = "ipv4.src", src = "param.src" },
  { op = "set", dst = "ipv4.dst", src = "param.dst" },
  { op = "set", dst = "ipv4.ttl", src = "param.ttl" },
  { op = "set", dst = "ipv4.tos", src = "param.tos" },
  { op = "set", dst = "udp.src_port", src = "param.sp" },
  { op = "set", dst = "udp.dst_port", src = "param.dp" },
  { op = "set", dst = "tcp.src_port", src = "param.sp" },
  { op = "set", dst = "tcp.dst_port", src = "param.dp" },
  { op = "set", dst = "tcp.seq", src = "param.seq" },
  { op = "set", dst = "tcp.flags", src = "param.flags" },
]
[[action]]
name = "none"
ops = []
"#;

    proptest! {
        #[test]
        fn checksums_stay_right(
            tcp in any::<bool>(),
            src in any::<[u8; 4]>(), dst in any::<[u8; 4]>(), sp in any::<u16>(), dp in any::<u16>(),
            payload in prop::collection::vec(any::<u8>(), 0..40),
            new in (any::<u32>(), any::<u32>(), any::<u8>(), any::<u8>(), any::<u16>(), any::<u16>(), any::<u32>(), any::<u8>()),
            keep in prop::collection::vec(any::<bool>(), 8),
        ) {
            let mut f = Vec::new();
            if tcp {
                tern_wire::frame::build_tcp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, &payload);
            } else {
                tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, &payload);
            }
            let original = f.clone();
            // Each value either new or the frame's own (unchanged).
            let l4 = 34;
            let own = [
                u64::from(u32::from_be_bytes(src)), u64::from(u32::from_be_bytes(dst)), 64, 0,
                u64::from(sp), u64::from(dp),
                if tcp { u64::from(u32::from_be_bytes([f[l4 + 4], f[l4 + 5], f[l4 + 6], f[l4 + 7]])) } else { 0 },
                if tcp { u64::from(f[l4 + 13]) } else { 0 },
            ];
            let fresh = [u64::from(new.0), u64::from(new.1), u64::from(new.2), u64::from(new.3), u64::from(new.4), u64::from(new.5), u64::from(new.6), u64::from(new.7)];
            let vals: Vec<u64> = (0..8).map(|i| if keep[i] { own[i] } else { fresh[i] }).collect();
            let mut p = Pipeline::new(Program::parse(REWRITE).unwrap());
            p.insert("rw", &[KeyMatch::Exact(1)], 0, "set", &vals).unwrap();
            prop_assert_eq!(p.pre(&mut f, 1), Outcome::Forward { port: None });
            let h = etherparse::PacketHeaders::from_ethernet_slice(&f).unwrap();
            let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
            prop_assert_eq!(ip.header_checksum, ip.calc_header_checksum());
            prop_assert_eq!(u64::from(u32::from_be_bytes(ip.source)), vals[0]);
            prop_assert_eq!(u64::from(u32::from_be_bytes(ip.destination)), vals[1]);
            prop_assert_eq!(u64::from(ip.time_to_live), vals[2]);
            match &h.transport {
                Some(etherparse::TransportHeader::Tcp(t)) => {
                    prop_assert_eq!(t.checksum, t.calc_checksum_ipv4(ip, h.payload.slice()).unwrap());
                    prop_assert_eq!((u64::from(t.source_port), u64::from(t.sequence_number)), (vals[4], vals[6]));
                }
                Some(etherparse::TransportHeader::Udp(u)) => {
                    prop_assert_eq!(u.checksum, u.calc_checksum_ipv4(ip, h.payload.slice()).unwrap());
                    prop_assert_eq!(u64::from(u.destination_port), vals[5]);
                }
                other => panic!("{other:?}"),
            }
            if keep.iter().all(|&k| k) {
                prop_assert_eq!(f, original, "nothing changed, no byte written");
            }
        }
    }
}

/// A UDP checksum of 0 (none computed) stays 0 when the ports or addresses are rewritten; a
/// fragment after the first has no ports: its payload is not read as UDP and not rewritten.
#[test]
fn no_udp_checksum_stays_none_and_later_fragments_have_no_ports() {
    let mut p = snat();
    p.insert("nat", &key([10, 0, 0, 5], 4000), 0, "translate", &[u64::from(u32::from_be_bytes([192, 0, 2, 1])), 20000])
        .unwrap();
    let mut f = udp([10, 0, 0, 5], 4000);
    f[40..42].copy_from_slice(&[0, 0]);
    assert_eq!(p.pre(&mut f, 1), Outcome::Forward { port: None });
    assert_eq!(&f[26..30], &[192, 0, 2, 1]);
    assert_eq!(&f[34..36], &20000u16.to_be_bytes());
    assert_eq!(&f[40..42], &[0, 0], "no checksum stays none");
    // The same frame as a later fragment (offset 8 × 8 bytes): no ports, so the exact key
    // (with ports 4000 and 53) misses and the bytes after the IPv4 header stay as they were.
    let mut g = udp([10, 0, 0, 5], 4000);
    g[20..22].copy_from_slice(&8u16.to_be_bytes());
    tern_wire::frame::ipv4_fill_checksum(&mut g, 14);
    let payload = g[34..].to_vec();
    assert_eq!(p.pre(&mut g, 1), Outcome::ToServer);
    assert_eq!(p.parsed_len(), 20);
    assert_eq!(&g[34..], &payload[..]);
    assert_eq!(tern_switch::flow::five_tuple(&g).unwrap()[3..], [0, 0]);
}
