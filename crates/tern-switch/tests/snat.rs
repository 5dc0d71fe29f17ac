//! CLIP's SNAT end to end through the switch and its servers (docs/clip.md, "SNAT"): TCP, UDP
//! and ICMP out and their replies back by the server owning the public address; the same
//! source port from two hosts to one destination; unsolicited packets and addresses no server
//! owns counted; a failed server's connections keeping their public address and port at its
//! buddy. Frames re-parsed by etherparse.

use std::net::Ipv4Addr;

use tern_switch::nat::{self, TcpState};
use tern_switch::program::Program;
use tern_switch::server::{Cluster, Server, ServerDrop, Snat};
use tern_switch::switch::{DropReason, Route, Switch, SwitchConfig};
use tern_wire::clip;
use tern_wire::frame::{
    FrameInfo, build_icmp4_echo, build_tcp4, build_udp4, fill_l4_checksum, header_sum_ok, l4_checksum_ok,
};

const INSIDE: u16 = 1;
const OUTSIDE: u16 = 2;
const REMOTE: [u8; 4] = [198, 51, 100, 7];
const INSIDE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x11];
const OUTSIDE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

/// Two servers (server s owns 192.0.2.(s+1)), both in the group, each the other's buddy; routes
/// to the inside (10.0.0.0/8) and the outside (the rest).
fn cluster() -> Cluster {
    cluster_offload(false)
}

fn cluster_offload(offload: bool) -> Cluster {
    let program =
        Program::load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml")))
            .unwrap();
    let cfg = SwitchConfig {
        ports: 4,
        servers: vec![3, 4],
        members: vec![0, 1],
        routes: vec![
            Route { prefix: "0.0.0.0/0".parse().unwrap(), port: OUTSIDE, mac: OUTSIDE_MAC },
            Route { prefix: "10.0.0.0/8".parse().unwrap(), port: INSIDE, mac: INSIDE_MAC },
        ],
        offload_enabled: offload,
        ..SwitchConfig::default()
    };
    let switch = Switch::new(program, cfg).unwrap();
    let servers = (0..2)
        .map(|s| Server::new(clip::DEFAULT_ETHERTYPE, 1, Box::new(Snat::for_server(s).unwrap()), 1_000_000_000))
        .collect();
    let mut c = Cluster::new(switch, servers);
    c.buddy = vec![Some(1), Some(0)];
    c
}

fn udp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16) -> Vec<u8> {
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, b"datagram");
    f
}

fn tcp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, flags: u8) -> Vec<u8> {
    let mut f = Vec::new();
    build_tcp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, b"segment");
    f[47] = flags;
    let end = f.len();
    fill_l4_checksum(&mut f, (26, 30), (30, 34), nat::TCP, 34, end, 50);
    f
}

/// The one frame that left, by which port; checksums checked.
fn one(out: Vec<(u16, Vec<u8>)>) -> (u16, Vec<u8>) {
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, f) = out.into_iter().next().unwrap();
    let info = FrameInfo::parse(&f).unwrap();
    let hdr: [u8; 20] = f[14..34].try_into().unwrap();
    assert!(header_sum_ok(&hdr) && l4_checksum_ok(&f, &info), "checksums");
    (port, f)
}

/// Source and destination (address, port) as etherparse reads them.
fn ends(f: &[u8]) -> ((Ipv4Addr, u16), (Ipv4Addr, u16)) {
    let p = etherparse::SlicedPacket::from_ethernet(f).unwrap();
    let Some(etherparse::NetSlice::Ipv4(v4)) = &p.net else { panic!("not IPv4") };
    let (s, d) = (v4.header().source_addr(), v4.header().destination_addr());
    let (sp, dp) = match &p.transport {
        Some(etherparse::TransportSlice::Udp(u)) => (u.source_port(), u.destination_port()),
        Some(etherparse::TransportSlice::Tcp(t)) => (t.source_port(), t.destination_port()),
        Some(etherparse::TransportSlice::Icmpv4(i)) => match i.icmp_type() {
            etherparse::Icmpv4Type::EchoRequest(e) | etherparse::Icmpv4Type::EchoReply(e) => (e.id, e.id),
            _ => (0, 0),
        },
        _ => (0, 0),
    };
    ((s, sp), (d, dp))
}

fn owner_of(addr: Ipv4Addr) -> usize {
    usize::from(addr.octets()[3]) - 1
}

#[test]
fn udp_goes_out_translated_and_its_reply_comes_back_through_the_owner() {
    let mut c = cluster();
    let (port, out) = one(c.send(INSIDE, &[&udp([10, 0, 0, 1], REMOTE, 5000, 53)]));
    assert_eq!(port, OUTSIDE);
    let ((pub_addr, pub_port), (dst, dport)) = ends(&out);
    assert_eq!((dst, dport), (Ipv4Addr::from(REMOTE), 53));
    assert_eq!(pub_port, 5000, "the source port is kept (its reply tuple is free)");
    let owner = owner_of(pub_addr);
    // The reply goes to the owner (whichever server the flow hashed to) and back in.
    let before = c.servers[owner].stats().requests;
    let (port, back) = one(c.send(OUTSIDE, &[&udp(REMOTE, pub_addr.octets(), 53, pub_port)]));
    assert_eq!(port, INSIDE);
    assert_eq!(&back[0..6], &INSIDE_MAC);
    assert_eq!(ends(&back), ((Ipv4Addr::from(REMOTE), 53), (Ipv4Addr::new(10, 0, 0, 1), 5000)));
    assert_eq!(c.servers[owner].stats().requests, before + 1);
    assert_eq!(c.switch.stats().to_server[4], 1, "found by the program (meta.server)");
}

#[test]
fn two_hosts_with_one_port_to_one_destination_get_two_public_pairs() {
    let mut c = cluster();
    let mut pairs = Vec::new();
    // Enough hosts that two land on one server (same public address).
    for h in 1..=6u8 {
        let (_, out) = one(c.send(INSIDE, &[&udp([10, 0, 0, h], REMOTE, 7000, 53)]));
        pairs.push((h, ends(&out).0));
    }
    let unique: std::collections::HashSet<_> = pairs.iter().map(|p| p.1).collect();
    assert_eq!(unique.len(), pairs.len(), "{pairs:?}");
    for (h, (a, p)) in &pairs {
        if *p != 7000 {
            assert!(*p >= 1024, "the class of 7000");
        }
        let (_, back) = one(c.send(OUTSIDE, &[&udp(REMOTE, a.octets(), 53, *p)]));
        assert_eq!(ends(&back).1, (Ipv4Addr::new(10, 0, 0, *h), 7000));
    }
}

#[test]
fn a_tcp_connection_opens_and_closes_with_its_states() {
    let mut c = cluster();
    let (_, syn) = one(c.send(INSIDE, &[&tcp([10, 0, 0, 1], REMOTE, 40000, 443, nat::SYN)]));
    let ((a, p), _) = ends(&syn);
    let s = owner_of(a);
    let (port, synack) = one(c.send(OUTSIDE, &[&tcp(REMOTE, a.octets(), 443, p, nat::SYN | nat::ACK)]));
    assert_eq!(port, INSIDE);
    assert_eq!(ends(&synack).1, (Ipv4Addr::new(10, 0, 0, 1), 40000));
    one(c.send(INSIDE, &[&tcp([10, 0, 0, 1], REMOTE, 40000, 443, nat::ACK)]));
    let state = |c: &Cluster| {
        let dump = c.servers[s].handler().dump(10);
        dump.iter().find(|(k, _)| k.starts_with("tcp 10.0.0.1:40000")).map(|(_, v)| v.clone())
    };
    assert!(state(&c).unwrap().ends_with(TcpState::Established.name()), "{:?}", state(&c));
    // The remote resets it: closed (10 s).
    one(c.send(OUTSIDE, &[&tcp(REMOTE, a.octets(), 443, p, nat::RST)]));
    assert!(state(&c).unwrap().ends_with(TcpState::Close.name()), "{:?}", state(&c));
}

#[test]
fn icmp_echo_and_errors_are_translated_at_the_server() {
    let mut c = cluster();
    let mut ping = Vec::new();
    build_icmp4_echo(&mut ping, [2; 6], [4; 6], [10, 0, 0, 1], REMOTE, 99, 1, 64, b"ping");
    let (port, out) = one(c.send(INSIDE, &[&ping]));
    assert_eq!(port, OUTSIDE);
    let ((a, id), _) = ends(&out);
    let mut pong = Vec::new();
    build_icmp4_echo(&mut pong, [4; 6], [2; 6], REMOTE, a.octets(), id, 1, 64, b"ping");
    pong[34] = 0;
    pong[36..38].fill(0);
    let end = pong.len();
    let sum = tern_wire::frame::checksum(&pong[34..end]);
    pong[36..38].copy_from_slice(&sum.to_be_bytes());
    let (port, back) = one(c.send(OUTSIDE, &[&pong]));
    assert_eq!(port, INSIDE);
    assert_eq!(ends(&back).1, (Ipv4Addr::new(10, 0, 0, 1), 99));
    // A UDP flow out, and the remote's port-unreachable about it, quoting it as it went.
    let (_, out) = one(c.send(INSIDE, &[&udp([10, 0, 0, 2], REMOTE, 6000, 9)]));
    let ((a, _), _) = ends(&out);
    let mut err = Vec::new();
    build_icmp4_echo(&mut err, [4; 6], [2; 6], REMOTE, a.octets(), 0, 0, 64, &out[14..14 + 28]);
    err[34] = 3;
    err[35] = 3;
    err[36..38].fill(0);
    let end = err.len();
    let sum = tern_wire::frame::checksum(&err[34..end]);
    err[36..38].copy_from_slice(&sum.to_be_bytes());
    let (port, back) = one(c.send(OUTSIDE, &[&err]));
    assert_eq!(port, INSIDE);
    assert_eq!(&back[30..34], &[10, 0, 0, 2]);
    assert_eq!(&back[42 + 12..42 + 16], &[10, 0, 0, 2], "the quote's source is the inside host");
    assert_eq!(u16::from_be_bytes([back[62], back[63]]), 6000);
}

#[test]
fn unsolicited_packets_and_unowned_addresses_are_counted() {
    let mut c = cluster();
    // To server 0's address, no connection: the server refuses it (unsolicited).
    assert!(c.send(OUTSIDE, &[&udp(REMOTE, [192, 0, 2, 1], 53, 5555)]).is_empty());
    assert_eq!(c.servers[0].stats().drops[ServerDrop::ALL.iter().position(|&d| d == ServerDrop::Handler).unwrap()], 1);
    // To an address in the public /24 no server owns: the switch drops it by name.
    assert!(c.send(OUTSIDE, &[&udp(REMOTE, [192, 0, 2, 9], 53, 5555)]).is_empty());
    assert_eq!(c.switch.stats().drop_count(DropReason::NoServer), 1);
    // To an inside address from the outside: routed as it is, never to a server.
    let (port, f) = one(c.send(OUTSIDE, &[&udp(REMOTE, [10, 0, 0, 1], 53, 5555)]));
    assert_eq!(port, INSIDE);
    assert_eq!(ends(&f).1, (Ipv4Addr::new(10, 0, 0, 1), 5555));
    assert_eq!(c.switch.stats().requests(), 1, "the unowned one never left");
}

#[test]
fn a_failed_servers_connections_keep_their_public_pair_at_its_buddy() {
    let mut c = cluster();
    // Flows out until each server holds some.
    let mut flows = Vec::new();
    for h in 1..=20u8 {
        let (_, out) = one(c.send(INSIDE, &[&udp([10, 0, 1, h], REMOTE, 8000 + u16::from(h), 53)]));
        flows.push((h, ends(&out).0));
    }
    assert!(flows.iter().any(|f| owner_of(f.1.0) == 0) && flows.iter().any(|f| owner_of(f.1.0) == 1));
    // Server 0 dies; heartbeats find it; its buddy (1) takes its buckets and its address.
    c.alive[0] = false;
    c.now_ns += 400_000_000;
    assert_eq!(c.heartbeats(), vec![0]);
    for (h, (a, p)) in &flows {
        let sport = 8000 + u16::from(*h);
        // Out: the same public pair, whichever server now answers.
        let (_, out) = one(c.send(INSIDE, &[&udp([10, 0, 1, *h], REMOTE, sport, 53)]));
        assert_eq!(ends(&out).0, (*a, *p), "flow {h} kept its pair");
        // In: to the address's owner, or its buddy.
        let (port, back) = one(c.send(OUTSIDE, &[&udp(REMOTE, a.octets(), 53, *p)]));
        assert_eq!(port, INSIDE);
        assert_eq!(ends(&back).1, (Ipv4Addr::new(10, 0, 1, *h), sport));
    }
    assert_eq!(c.lost, 0);
}

/// A buddy that was down gets what it missed: a server keeps the replicas its buddy did not
/// take, and when the buddy restarts (empty) it is sent every entry of its own again.
#[test]
fn a_buddy_that_restarts_gets_every_entry_again() {
    let mut c = cluster();
    let entries = |c: &Cluster, s: usize| c.servers[s].handler().entries();
    // Server 1 dies (not failed over: server 0 still makes connections and replicas, which wait).
    c.alive[1] = false;
    let mut pairs = Vec::new();
    for h in 1..=30u8 {
        if let [(_, f)] = &c.send(INSIDE, &[&udp([10, 0, 1, h], REMOTE, 8000, 53)])[..] {
            pairs.push((h, ends(f).0));
        }
    }
    assert!(!pairs.is_empty() && pairs.iter().all(|(_, (a, _))| owner_of(*a) == 0));
    assert_eq!(c.servers[0].pending_replicas(), pairs.len(), "what server 1 missed waits at server 0");
    // It restarts empty: server 0 sends it every connection of its own.
    let mut fresh = Server::new(clip::DEFAULT_ETHERTYPE, 1, Box::new(Snat::for_server(1).unwrap()), 1_000_000_000);
    fresh.replicate = true;
    c.servers[1] = fresh;
    c.restarted(1);
    assert_eq!(c.servers[0].pending_replicas(), 0);
    assert_eq!(entries(&c, 1), entries(&c, 0), "server 1 holds each of server 0's connections");
    // Then server 0 fails: every flow it served keeps its pair at server 1, out and in.
    c.alive[0] = false;
    c.fail_over(0, 1).unwrap();
    for (h, (a, p)) in &pairs {
        let (_, out) = one(c.send(INSIDE, &[&udp([10, 0, 1, *h], REMOTE, 8000, 53)]));
        assert_eq!(ends(&out).0, (*a, *p), "flow {h} kept its pair");
        let (_, back) = one(c.send(OUTSIDE, &[&udp(REMOTE, a.octets(), 53, *p)]));
        assert_eq!(ends(&back).1, (Ipv4Addr::new(10, 0, 1, *h), 8000));
    }
    assert_eq!(entries(&c, 1), pairs.len(), "no connection was made anew");
}

/// A server keeps at most `MAX_PENDING_REPLICAS` records for a buddy that takes none, the
/// oldest dropped first.
#[test]
fn records_kept_for_a_buddy_are_bounded() {
    let mut s = Server::new(clip::DEFAULT_ETHERTYPE, 1, Box::new(Snat::for_server(0).unwrap()), 1);
    s.replicate = true;
    let max = tern_switch::server::MAX_PENDING_REPLICAS;
    assert_eq!(s.put_back_replicas(vec![vec![1]; max - 1]), 0);
    assert_eq!(s.put_back_replicas(vec![vec![2]; 3]), 2, "two over");
    let kept = s.take_replicas();
    assert_eq!(kept.len(), max);
    assert_eq!((kept[0][0], kept[max - 1][0]), (2, 1), "the newest put back ahead; the oldest gone");
}

/// docs/clip.md is the contract: every drop the switch, the servers and the NAT count is named
/// there, and every counter of each handler (`tern_switch_server_handler_total{counter}`).
#[test]
fn the_docs_name_every_drop() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/clip.md")).unwrap();
    let handlers: Vec<&'static str> = ["snat", "trd"]
        .into_iter()
        .flat_map(|h| tern_switch::server::handler(h, 0).unwrap().counters().into_iter().map(|(n, _)| n))
        .collect();
    assert!(handlers.contains(&"kept_port") && handlers.contains(&"no_index"), "{handlers:?}");
    let names = DropReason::ALL
        .iter()
        .map(|d| d.name())
        .chain(nat::NatDrop::ALL.iter().map(|d| d.name()))
        .chain(ServerDrop::ALL.iter().map(|d| d.name()))
        .chain(handlers);
    for n in names {
        assert!(doc.contains(&format!("`{n}`")), "docs/clip.md does not name `{n}`");
    }
}

/// A heavy flow's replies move into the switch too: after an interval its `nat` entry
/// (learned from an outbound response) and its `nat_in` entry (learned from a reply's response)
/// are both in the switch, and its packets both ways leave translated with no server asked.
#[test]
fn a_heavy_flows_replies_are_offloaded_too() {
    let mut c = cluster_offload(true);
    let out = udp([10, 0, 0, 7], REMOTE, 9000, 53);
    let (_, first) = one(c.send(INSIDE, &[&out]));
    let (public, _) = ends(&first);
    let reply = udp(REMOTE, public.0.octets(), 53, public.1);
    // Heavy both ways, beside 50 light flows.
    for i in 0..200u16 {
        one(c.send(INSIDE, &[&out]));
        one(c.send(OUTSIDE, &[&reply]));
        if i < 50 {
            one(c.send(INSIDE, &[&udp([10, 0, 1, i as u8], REMOTE, 9000, 53)]));
        }
    }
    let report = c.switch.interval();
    assert!(report.installed >= 2, "{report:?}");
    assert_eq!(c.switch.pipeline().len("nat_in"), 1, "the reply's entry");
    assert!(
        c.switch.original_entries_at(1).iter().any(|(k, p, _)| k[1] == u64::from(u32::from(public.0)) && p[1] == 9000)
    );
    let asked = c.switch.stats().requests();
    for _ in 0..20 {
        let (port, f) = one(c.send(INSIDE, &[&out]));
        assert_eq!((port, ends(&f).0), (OUTSIDE, public));
        let (port, f) = one(c.send(OUTSIDE, &[&reply]));
        assert_eq!((port, ends(&f).1), (INSIDE, (Ipv4Addr::new(10, 0, 0, 7), 9000)));
    }
    assert_eq!(c.switch.stats().requests(), asked, "no server asked, either way");
    assert_eq!(c.switch.stats().offload_mismatch, 0);
}

/// Another protocol (GRE) goes through the switch and a server by its address alone, and its
/// replies come back through the owner.
#[test]
fn gre_is_translated_by_address_through_the_switch() {
    let mut c = cluster();
    let gre = |src: [u8; 4], dst: [u8; 4]| {
        let mut f = udp(src, dst, 0, 0x6558);
        f[23] = 47;
        f[24..26].fill(0);
        tern_wire::frame::ipv4_fill_checksum(&mut f, 14);
        f
    };
    let out = c.send(INSIDE, &[&gre([10, 0, 0, 1], REMOTE)]);
    assert_eq!(out.len(), 1, "{out:?}");
    let (port, f) = &out[0];
    assert_eq!(*port, OUTSIDE);
    assert_eq!(f[23], 47);
    let public = [f[26], f[27], f[28], f[29]];
    assert_eq!(&public[..3], &[192, 0, 2]);
    let hdr: [u8; 20] = f[14..34].try_into().unwrap();
    assert!(header_sum_ok(&hdr));
    let back = c.send(OUTSIDE, &[&gre(REMOTE, public)]);
    assert_eq!(back.len(), 1, "{back:?}");
    assert_eq!((back[0].0, &back[0].1[30..34]), (INSIDE, &[10u8, 0, 0, 1][..]));
}

/// A connection in use for longer than its timeout is still held by the buddy, with its pair:
/// the buddy's copy sees no packets, so its owner replicates it again once past half its
/// timeout since the last record (the buddy's copy once expired a timeout after the
/// connection was made, and a failover after that gave its flow a new pair). A connection
/// refreshed without a change of pair is taken as the same one; records are not sent for every
/// packet.
#[test]
fn the_buddy_holds_a_long_lived_connection() {
    use tern_switch::server::RemoteHandler;
    let (mut a, mut b) = (Snat::for_server(0).unwrap(), Snat::for_server(1).unwrap());
    let timeout = a.nat().config().timeouts.udp;
    let mut resp = [0u8; 7];
    let (mut records, mut sent) = (Vec::new(), 0);
    // A packet every eighth of the timeout for three timeouts; records go to the buddy after
    // each, as the runtime hands them over after each batch.
    let steps = 24;
    for i in 0..=steps {
        let now = i * timeout / 8;
        let mut l3 = udp([10, 0, 0, 1], REMOTE, 5000, 53)[14..].to_vec();
        a.handle(now, 0, &mut l3, &[0; 9], &mut resp).unwrap();
        a.take_new(&mut records);
        sent += records.len();
        for r in records.drain(..) {
            b.adopt_replica(now, &r).unwrap();
        }
        let mine = a.nat().connections(now).next().expect("A holds it");
        let copy = b.nat().get(&mine.orig, now).unwrap_or_else(|| panic!("the buddy lost it at step {i}"));
        assert_eq!(copy.public, mine.public, "its pair");
    }
    // The first, then about one each half timeout: not one a packet.
    assert!((2..=8).contains(&sent), "{sent} records");
    assert_eq!(b.nat().len(), 1);
}

/// docs/clip.md's replica record, byte for byte: what `take_new` writes for a UDP connection is
/// the layout the doc gives, and a record a peer builds from the doc alone (a TCP connection,
/// established, a reply seen) is adopted and translates that connection's replies back.
#[test]
fn replica_records_are_the_docs_layout() {
    use tern_switch::server::RemoteHandler;
    let mut a = Snat::for_server(0).unwrap();
    let mut resp = [0u8; 7];
    let mut l3 = udp([10, 0, 0, 1], REMOTE, 5000, 53)[14..].to_vec();
    a.handle(0, 0, &mut l3, &[0; 9], &mut resp).unwrap();
    let mut records = Vec::new();
    a.take_new(&mut records);
    // Protocol; source and port; destination and port; public address and port; TCP state
    // (0xff: not TCP); whether a reply came.
    let mut want = vec![17, 10, 0, 0, 1, 0x13, 0x88];
    want.extend(REMOTE);
    want.extend([0, 53, 192, 0, 2, 1, 0x13, 0x88, 0xff, 0]);
    assert_eq!(records, [want]);
    // Built from the doc: TCP 10.0.0.2:6000 -> REMOTE:80 as 192.0.2.1:6001, `established` (its
    // index, 2, in the doc's order of states), a reply seen.
    let mut rec = vec![6, 10, 0, 0, 2, 0x17, 0x70];
    rec.extend(REMOTE);
    rec.extend([0, 80, 192, 0, 2, 1, 0x17, 0x71, 2, 1]);
    assert_eq!(rec.len(), 21);
    let mut b = Snat::for_server(1).unwrap();
    b.adopt_replica(0, &rec).unwrap();
    // A reply to the public pair, coming in (the request's byte 8: 1), goes to the inside host.
    let mut l3 = tcp(REMOTE, [192, 0, 2, 1], 80, 6001, 0x10)[14..].to_vec();
    let mut params = [0u8; 9];
    params[8] = 1;
    b.handle(0, 0, &mut l3, &params, &mut resp).unwrap();
    assert_eq!(resp, [10, 0, 0, 2, 0x17, 0x70, 1], "the inside pair, to write as the destination");
}

/// A server that comes back takes back from its buddy the connections holding its public
/// pairs: without that, a new flow to the same destination gets the public pair an adopted
/// connection still uses at the buddy (replies could not tell them apart); with it, another
/// port. The buddy hands back only others' pairs; the returning server takes only its own, and
/// taking back again keeps them.
#[test]
fn a_server_that_comes_back_takes_its_public_pairs_back() {
    use tern_switch::server::RemoteHandler;
    let mut resp = [0u8; 7];
    let out = |h: &mut Snat, src: [u8; 4], sport: u16, resp: &mut [u8; 7]| {
        let mut l3 = udp(src, REMOTE, sport, 53)[14..].to_vec();
        h.handle(0, 0, &mut l3, &[0; 9], resp).unwrap();
        (Ipv4Addr::from(<[u8; 4]>::try_from(&resp[..4]).unwrap()), u16::from_be_bytes([resp[4], resp[5]]))
    };
    let (mut a, mut b) = (Snat::for_server(0).unwrap(), Snat::for_server(1).unwrap());
    let public = out(&mut a, [10, 0, 0, 1], 5000, &mut resp);
    assert_eq!(public, (Ipv4Addr::new(192, 0, 2, 1), 5000), "the source port kept");
    out(&mut b, [10, 0, 0, 3], 7000, &mut resp);
    let mut records = Vec::new();
    a.take_new(&mut records);
    for r in &records {
        b.adopt_replica(0, r).unwrap();
    }
    let mut handed = Vec::new();
    b.hand_back(&mut handed);
    assert_eq!(handed, records, "A's connection, not B's own");
    // A comes back empty: another host's flow from port 5000 to the same destination.
    let mut fresh = Snat::for_server(0).unwrap();
    assert_eq!(out(&mut fresh, [10, 0, 0, 9], 5000, &mut resp), public, "the pair B still uses");
    let mut back = Snat::for_server(0).unwrap();
    assert_eq!(back.take_back(0, &handed), 0);
    assert_eq!(back.take_back(0, &handed), 0, "taken back again: kept");
    assert_eq!(back.nat().len(), 1);
    assert_eq!(back.taken_back(), 1);
    let other = out(&mut back, [10, 0, 0, 9], 5000, &mut resp);
    assert_eq!(other.0, public.0);
    assert_ne!(other.1, public.1, "another port");
    // Its own new connection, replicated to B and handed back among the rest: not taken back.
    let mut mine = Vec::new();
    back.take_new(&mut mine);
    let all: Vec<_> = handed.iter().chain(&mine).cloned().collect();
    assert_eq!(back.take_back(0, &all), 0);
    assert_eq!((back.taken_back(), back.nat().len()), (1, 2));
    // B takes nothing back of A's; a record that does not read is refused.
    assert_eq!(b.take_back(0, &records), 0);
    assert_eq!(b.nat().len(), 2);
    assert_eq!(back.take_back(0, &[vec![0; 5]]), 1);
}

/// What a server hands back is read from its adopted connections alone (not its whole table):
/// the same connections as a walk of the table for those with another server's public pair,
/// as flows come and go, replicas arrive from two other servers and connections expire.
mod hand_back_twin {
    use super::*;
    use proptest::prelude::*;
    use tern_switch::server::RemoteHandler;

    #[derive(Debug, Clone)]
    enum Op {
        /// A flow of B's own (source host, port) at the current time.
        Local(u8, u16),
        /// A flow at server A or C, its replica adopted by B.
        Adopt(bool, u8, u16),
        /// Time passes (seconds): UDP connections time out after 30 s unreplied.
        Tick(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (1u8..20, 1000u16..1040).prop_map(|(h, p)| Op::Local(h, p)),
            (any::<bool>(), 1u8..20, 1000u16..1040).prop_map(|(c, h, p)| Op::Adopt(c, h, p)),
            (0u16..40).prop_map(Op::Tick),
        ]
    }

    fn flow(h: &mut Snat, now: u64, src: [u8; 4], sport: u16) {
        let mut l3 = udp(src, REMOTE, sport, 53)[14..].to_vec();
        let _ = h.handle(now, 0, &mut l3, &[0; 9], &mut [0u8; 7]);
    }

    /// The original tuples in records (their first 13 bytes), sorted.
    fn tuples(records: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = records.iter().map(|r| r[..13].to_vec()).collect();
        v.sort();
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn hand_back_reads_what_a_table_walk_finds(ops in prop::collection::vec(op(), 1..120)) {
            let (mut a, mut b, mut c) =
                (Snat::for_server(0).unwrap(), Snat::for_server(1).unwrap(), Snat::for_server(2).unwrap());
            let own = u32::from(Ipv4Addr::new(192, 0, 2, 2));
            let mut now = 1u64;
            for o in ops {
                match o {
                    Op::Local(h, p) => flow(&mut b, now, [10, 0, 1, h], p),
                    Op::Adopt(at_c, h, p) => {
                        let other = if at_c { &mut c } else { &mut a };
                        flow(other, now, [10, 0, 1, h], p);
                        let mut records = Vec::new();
                        other.take_new(&mut records);
                        for r in &records {
                            let _ = b.adopt_replica(now, r);
                        }
                    }
                    Op::Tick(s) => now += u64::from(s) * 1_000_000_000,
                }
                let mut handed = Vec::new();
                b.hand_back(&mut handed);
                let walk: Vec<Vec<u8>> = b
                    .nat()
                    .connections(0)
                    .filter(|c| c.public.0 != own)
                    .map(|c| {
                        let t = c.orig;
                        let mut r = vec![t.proto];
                        r.extend_from_slice(&t.src.to_be_bytes());
                        r.extend_from_slice(&t.sport.to_be_bytes());
                        r.extend_from_slice(&t.dst.to_be_bytes());
                        r.extend_from_slice(&t.dport.to_be_bytes());
                        r
                    })
                    .collect();
                prop_assert_eq!(tuples(&handed), tuples(&walk));
            }
        }
    }
}

/// Guarantees across change: six streams, four UDP and two TCP (a SYN, then ACKs; SYN-ACK
/// the first reply), one source port each, through three servers (buddies 1, 0, 0; each idle
/// after 500 ms, far below UDP's 30 s) while the group changes to any members, servers are
/// failed over while still running (a heartbeat missed under load) or killed, killed ones
/// restart (taking back what their buddy holds) and come back, the offload's interval moves
/// heavy flows' entries into the switch (two packets an interval), and time passes (never past
/// UDP's timeout in all). One failure at a time: the
/// next only once the failed server is back in the group. Every datagram of a stream leaves
/// with the public pair its first did, and a reply to that pair always comes back in.
mod pairs_across_change {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        /// A datagram of stream k out, or a reply to it in.
        Out(u8),
        Reply(u8),
        /// `scale --members`: the servers' live flows taken, then the change.
        Change(Vec<u16>),
        /// Failed over to its buddy while still running.
        FailOver(u16),
        /// Killed (its state gone), then failed over to its buddy.
        Kill(u16),
        /// The killed server starts again, empty, and takes back from its buddy.
        Restart,
        /// The controller's offload interval: heavy flows' entries move into the switch.
        Interval,
        Tick(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => Just(Op::Interval),
            4 => (0u8..6).prop_map(Op::Out),
            2 => (0u8..6).prop_map(Op::Reply),
            1 => prop::sample::subsequence(vec![0u16, 1, 2], 1..=3).prop_map(Op::Change),
            1 => (0u16..3).prop_map(Op::FailOver),
            1 => (0u16..3).prop_map(Op::Kill),
            1 => Just(Op::Restart),
            1 => (0u16..400).prop_map(Op::Tick),
        ]
    }

    const IDLE_NS: u64 = 500_000_000;
    const BUDDIES: [u16; 3] = [1, 0, 0];

    fn server(s: u16) -> Server {
        Server::new(clip::DEFAULT_ETHERTYPE, 1, Box::new(Snat::for_server(s).unwrap()), IDLE_NS)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn every_stream_keeps_its_pair(ops in prop::collection::vec(op(), 1..60)) {
            let program = Program::load(std::path::Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../examples/switch/snat.toml"
            )))
            .unwrap();
            let cfg = SwitchConfig {
                ports: 5,
                servers: vec![3, 4, 5],
                members: vec![0, 1],
                routes: vec![
                    Route { prefix: "0.0.0.0/0".parse().unwrap(), port: OUTSIDE, mac: OUTSIDE_MAC },
                    Route { prefix: "10.0.0.0/8".parse().unwrap(), port: INSIDE, mac: INSIDE_MAC },
                ],
                // A flow with two packets in an interval is heavy: its entries move into the switch.
                offload: tern_switch::offload::OffloadConfig { threshold: 2, ..Default::default() },
                ..SwitchConfig::default()
            };
            let mut c = Cluster::new(Switch::new(program, cfg).unwrap(), (0..3).map(server).collect());
            c.buddy = BUDDIES.iter().map(|&b| Some(usize::from(b))).collect();
            let mut members = vec![0u16, 1];
            let mut pairs: Vec<Option<(Ipv4Addr, u16)>> = vec![None; 6];
            let mut replied = [false; 6];
            // The server failed over and not yet back in the group; the one killed and not
            // yet restarted.
            let (mut failed, mut dead): (Option<u16>, Option<u16>) = (None, None);
            let mut done = Vec::new();
            for o in ops {
                done.push(format!("{o:?}"));
                match o {
                    Op::Out(k) => {
                        // Streams 0-3 UDP; 4-5 TCP (a SYN first, then ACKs).
                        let frame = if k < 4 {
                            udp([10, 0, 0, 1 + k], REMOTE, 6000, 53)
                        } else {
                            tcp([10, 0, 0, 1 + k], REMOTE, 6000, 80, if pairs[usize::from(k)].is_none() { 0x02 } else { 0x10 })
                        };
                        let out = c.send(INSIDE, &[&frame]);
                        prop_assert_eq!(out.len(), 1, "stream {} not out: {:?}", k, done);
                        let p = ends(&out[0].1).0;
                        if let Some(q) = pairs[usize::from(k)] {
                            prop_assert_eq!(p, q, "stream {} changed its pair: {:?}", k, done);
                        }
                        pairs[usize::from(k)] = Some(p);
                    }
                    Op::Reply(k) => {
                        if let Some((a, p)) = pairs[usize::from(k)] {
                            let frame = if k < 4 {
                                udp(REMOTE, a.octets(), 53, p)
                            } else {
                                let first = !replied[usize::from(k)];
                                replied[usize::from(k)] = true;
                                tcp(REMOTE, a.octets(), 80, p, if first { 0x12 } else { 0x10 })
                            };
                            let out = c.send(OUTSIDE, &[&frame]);
                            prop_assert_eq!(out.len(), 1, "the reply to stream {} did not come in: {:?}", k, done);
                            prop_assert_eq!(ends(&out[0].1).1, (Ipv4Addr::new(10, 0, 0, 1 + k), 6000));
                        }
                    }
                    Op::Change(m) => {
                        if dead.is_some_and(|d| m.contains(&d)) {
                            continue;
                        }
                        for s in &mut c.servers {
                            s.expire(c.now_ns);
                        }
                        let live = c.live_flows();
                        if c.switch.change_group(&m, &live).is_ok() {
                            if failed.is_some_and(|f| m.contains(&f)) {
                                failed = None;
                            }
                            members = m;
                        }
                    }
                    Op::FailOver(d) | Op::Kill(d) => {
                        let b = BUDDIES[usize::from(d)];
                        if failed.is_some() || !members.contains(&d) || !members.contains(&b) {
                            continue;
                        }
                        if matches!(o, Op::Kill(_)) {
                            c.alive[usize::from(d)] = false;
                            dead = Some(d);
                        }
                        prop_assert!(c.fail_over(d, b).is_ok());
                        members.retain(|&x| x != d);
                        failed = Some(d);
                    }
                    Op::Restart => {
                        if let Some(d) = dead.take() {
                            let d = usize::from(d);
                            let mut srv = server(d as u16);
                            srv.replicate = true;
                            srv.take_back(c.now_ns, &c.servers[usize::from(BUDDIES[d])].hand_back());
                            c.servers[d] = srv;
                            c.restarted(d);
                            // Time passes: the others' tries again reach it.
                            c.flush_replicas();
                        }
                    }
                    Op::Interval => {
                        c.switch.interval();
                    }
                    Op::Tick(ms) => c.now_ns += u64::from(ms) * 1_000_000,
                }
            }
        }
    }
}
