//! The switch with its servers (docs/clip.md, "The switch"): Appendix A's SNAT end to end —
//! misses through a server and back with the header restored, the heaviest flows' entries
//! learned and moved into the switch, each flow keeping its public address and port through
//! offload and group changes; regular traffic and ARP never reaching a server; every hostile
//! frame a named drop.

use std::net::Ipv4Addr;

use tern_switch::program::Program;
use tern_switch::server::{Cluster, Server, Snat};
use tern_switch::switch::{DropReason, Route, Switch, SwitchConfig};
use tern_wire::clip::{self, Kind, Repr};

const INSIDE: u16 = 1;
const OUTSIDE: u16 = 2;

fn program() -> Program {
    Program::load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml")))
        .unwrap()
}

/// A switch with host ports 1 (inside) and 2 (outside, the default route), and `n` servers on
/// ports 3.. — server `s` hands out 192.0.2.`s+1`:1024.. — of which `members` are the group.
fn cluster(n: u16, members: &[u16], offload: bool) -> Cluster {
    cluster_of(n, members, offload, 2048)
}

/// As [`cluster`], the switch's table holding `capacity` entries of the offload.
fn cluster_of(n: u16, members: &[u16], offload: bool, capacity: usize) -> Cluster {
    let mut cfg = SwitchConfig {
        ports: 2 + n,
        servers: (0..n).map(|s| 3 + s).collect(),
        members: members.to_vec(),
        routes: vec![Route { prefix: "0.0.0.0/0".parse().unwrap(), port: OUTSIDE, mac: [0x02, 0, 0, 0, 0, 0x99] }],
        offload_enabled: offload,
        ..SwitchConfig::default()
    };
    cfg.offload.capacity = capacity;
    let switch = Switch::new(program(), cfg).unwrap();
    let servers = (0..n)
        .map(|s| {
            let snat = Snat::for_server(s).unwrap();
            Server::new(clip::DEFAULT_ETHERTYPE, 1, Box::new(snat), 1_000_000_000)
        })
        .collect();
    Cluster::new(switch, servers)
}

fn udp(flow: u32) -> Vec<u8> {
    let mut f = Vec::new();
    let src = [10, (flow >> 16) as u8, (flow >> 8) as u8, flow as u8];
    tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src, [8, 8, 8, 8], 4000, 53, 64, b"query");
    f
}

/// The frame's source address and port, and whether both checksums are right.
fn translated(f: &[u8]) -> (Ipv4Addr, u16, bool) {
    let h = etherparse::PacketHeaders::from_ethernet_slice(f).unwrap();
    let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    let Some(etherparse::TransportHeader::Udp(u)) = &h.transport else { panic!("not UDP") };
    let ok = ip.header_checksum == ip.calc_header_checksum()
        && u.checksum == u.calc_checksum_ipv4(ip, h.payload.slice()).unwrap();
    (Ipv4Addr::from(ip.source), u.source_port, ok)
}

#[test]
fn misses_go_through_a_server_and_come_back_translated() {
    let mut c = cluster(2, &[0, 1], false);
    let mut seen = std::collections::HashMap::new();
    for round in 0..3 {
        for flow in 0..40u32 {
            let f = udp(flow);
            let out = c.send(INSIDE, &[&f]);
            assert_eq!(out.len(), 1, "flow {flow} round {round}: {out:?}");
            let (port, g) = &out[0];
            assert_eq!(*port, OUTSIDE);
            // Only the translated fields and checksums differ; the route set the addresses.
            assert_eq!(g.len(), f.len());
            assert_eq!(&g[0..6], &[0x02, 0, 0, 0, 0, 0x99]);
            assert_eq!(&g[42..], &f[42..], "payload unchanged");
            let (addr, sport, ok) = translated(g);
            assert!(ok, "checksums");
            // A flow keeps its pair; the pair comes from the server its flow hashes to.
            let first = *seen.entry(flow).or_insert((addr, sport));
            assert_eq!(first, (addr, sport), "flow {flow} changed its translation");
        }
    }
    let st = c.switch.stats();
    assert_eq!(st.requests(), 120);
    assert_eq!(st.responses, 120);
    assert_eq!(st.dropped(), 0);
    // Both servers served, each with its own addresses.
    assert!(st.requests_by_server.iter().all(|&r| r > 20), "{:?}", st.requests_by_server);
    let addrs: std::collections::HashSet<_> = seen.values().map(|v| v.0).collect();
    assert_eq!(addrs.len(), 2);
    assert_eq!(c.servers[0].stats().responses + c.servers[1].stats().responses, 120);
}

#[test]
fn heavy_flows_move_into_the_switch_with_the_servers_answers() {
    // Room for four entries in the switch.
    let mut c = cluster_of(1, &[0], true, 4);
    // Flow 7 is heavy: 200 packets; 100 others send 2 each.
    let mut before = None;
    for i in 0..200u32 {
        let out = c.send(INSIDE, &[&udp(7)]);
        before = Some(translated(&out[0].1));
        if i < 100 {
            c.send(INSIDE, &[&udp(1000 + i)]);
            c.send(INSIDE, &[&udp(1000 + i)]);
        }
    }
    let served_before = c.servers[0].stats().responses;
    let report = c.switch.interval();
    assert!(!report.installed_flows.is_empty(), "{report:?}");
    assert_eq!(c.switch.stats().unlearned, 0);
    assert_eq!(c.switch.pipeline().len("nat"), report.installed);
    // Flow 7 is now served by the switch, with the pair its server gave it.
    for _ in 0..50 {
        let out = c.send(INSIDE, &[&udp(7)]);
        assert_eq!(Some(translated(&out[0].1)), before);
    }
    assert_eq!(c.servers[0].stats().responses, served_before, "no request reached the server");
    assert_eq!(c.switch.stats().offloaded, 50);
    assert_eq!(c.switch.stats().offload_mismatch, 0);
    let key7 = tern_switch::bench::snat_key(&udp(7)).unwrap();
    assert_eq!(c.switch.location(&key7), tern_switch::mirror::Location::Both);
    // A light flow still goes to the server and keeps its pair.
    let out = c.send(INSIDE, &[&udp(1003)]);
    assert_eq!(out.len(), 1);
    assert_eq!(c.servers[0].stats().responses, served_before + 1);
    // Next interval, flow 7 silent while four other flows send 150 packets each: they take
    // the four entries (flow 7's score, averaged with its last, is 100), flow 7's is evicted,
    // and its packets go back to the server, which still holds its pair (make-before-break:
    // the mirror never lost it).
    for i in 0..600u32 {
        c.send(INSIDE, &[&udp(2000 + i % 4)]);
    }
    let report = c.switch.interval();
    assert!(!report.evicted_flows.is_empty(), "{report:?}");
    assert_eq!(c.switch.location(&key7), tern_switch::mirror::Location::Mirror);
    assert_eq!(c.switch.pipeline().len("nat"), 4);
    let served = c.servers[0].stats().responses;
    let out = c.send(INSIDE, &[&udp(7)]);
    assert_eq!(Some(translated(&out[0].1)), before);
    assert_eq!(c.servers[0].stats().responses, served + 1, "flow 7 is served by its server again");
    assert_eq!(c.switch.stats().dropped(), 0);
}

#[test]
fn regular_traffic_and_arp_never_reach_a_server() {
    let mut c = cluster(1, &[0], true);
    // From the outside port: not translated (the guard), routed by the switch's table.
    let f = udp(5);
    let out = c.send(OUTSIDE, &[&f]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, OUTSIDE);
    assert_eq!(&out[0].1[12..], &f[12..], "untouched but for the addresses");
    // ARP for the switch is answered out of the asking port; other ARP is dropped.
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 8, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 10, 0, 0, 1]);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&[10, 0, 0, 254]);
    let out = c.send(INSIDE, &[&arp]);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, INSIDE);
    let r = &out[0].1;
    assert_eq!(r[21], 2, "a reply");
    assert_eq!(&r[22..28], &c.switch.config().mac);
    assert_eq!(&r[28..32], &[10, 0, 0, 254]);
    assert_eq!(&r[32..38], &[2, 0, 0, 0, 0, 1]);
    assert_eq!(&r[38..42], &[10, 0, 0, 1]);
    arp[41] = 7;
    assert!(c.send(INSIDE, &[&arp]).is_empty());
    assert_eq!(c.switch.stats().drop_count(DropReason::ArpNotOurs), 1);
    assert_eq!(c.switch.stats().requests(), 0);
    assert_eq!(c.servers[0].stats().requests, 0);
}

/// A request frame for flow 3 as the switch would send it, and the same answered.
fn request_and_response() -> (Vec<u8>, Vec<u8>) {
    let mut f = udp(3);
    let repr = Repr {
        kind: Kind::Request,
        flags: 0,
        load_type: 0,
        parsed_len: 28,
        program: 1,
        group_version: 0,
        request_id: 1,
        param_len: 9,
    };
    clip::encapsulate(&mut f, &repr, clip::DEFAULT_ETHERTYPE).unwrap();
    let mut r = f.clone();
    r[15] = Kind::Response as u8;
    (f, r)
}

#[test]
fn hostile_frames_are_named_drops() {
    let mut c = cluster(2, &[0], true);
    let (req, resp) = request_and_response();
    let drops = |c: &Cluster, r| c.switch.stats().drop_count(r);
    // A CLIP header from a host port.
    assert!(c.send(INSIDE, &[&req]).is_empty());
    assert!(c.send(OUTSIDE, &[&resp]).is_empty());
    assert_eq!(drops(&c, DropReason::SpoofedHeader), 2);
    // Straight from a server port (the cluster's send is for host ports: use the switch).
    let from_server = |c: &mut Cluster, port: u16, f: &[u8]| {
        let pool = tern_io::Pool::new(64, 2048);
        let mut b = tern_io::Batch::new(8);
        let mut p = pool.packet();
        p.reserve_headroom(64);
        p.extend_from_slice(f).unwrap();
        let _ = b.push(p);
        let mut outs: Vec<tern_io::Batch> = (0..5).map(|_| tern_io::Batch::new(8)).collect();
        c.switch.process(port, &mut b, &mut outs, &pool);
        outs.iter().map(|b| b.len()).sum::<usize>()
    };
    assert_eq!(from_server(&mut c, 3, &resp), 1, "a good response goes on");
    assert_eq!(from_server(&mut c, 3, &req), 0);
    assert_eq!(drops(&c, DropReason::NotResponse), 1);
    assert_eq!(from_server(&mut c, 3, &udp(1)), 0);
    assert_eq!(drops(&c, DropReason::ServerNotClip), 1);
    // Server 1 is not in the group: its responses are spoofed.
    assert_eq!(from_server(&mut c, 4, &resp), 0);
    assert_eq!(drops(&c, DropReason::NotMember), 1);
    let mut bad = resp.clone();
    bad[14 + 8..14 + 10].copy_from_slice(&9u16.to_be_bytes());
    assert_eq!(from_server(&mut c, 3, &bad), 0);
    assert_eq!(drops(&c, DropReason::UnknownProgram), 1);
    let mut bad = resp.clone();
    bad[14] = 2;
    assert_eq!(from_server(&mut c, 3, &bad), 0);
    assert_eq!(drops(&c, DropReason::HeaderVersion), 1);
    let mut bad = resp.clone();
    bad[14 + 6..14 + 8].copy_from_slice(&60000u16.to_be_bytes());
    assert_eq!(from_server(&mut c, 3, &bad), 0);
    assert_eq!(drops(&c, DropReason::HeaderParsedLen), 1);
    let mut bad = resp.clone();
    bad[14 + 3] = 200;
    assert_eq!(from_server(&mut c, 3, &bad), 0);
    assert_eq!(drops(&c, DropReason::HeaderTruncated), 1);
    assert_eq!(from_server(&mut c, 3, &resp[..10]), 0);
    assert_eq!(drops(&c, DropReason::Malformed), 1);
    // A server told of another program's request refuses it, by name.
    let mut other = req.clone();
    other[14 + 9] = 9;
    let mut f = other.clone();
    assert!(c.servers[0].answer(0, &mut f, false).is_err());
    assert_eq!(f, other, "unanswered");
}

#[test]
fn busy_flag_diverts_new_flows_and_holds_its_own() {
    let mut c = cluster(2, &[0, 1], false);
    // Each flow's server, by the address it was given (server s: 192.0.2.s+1).
    let mut of_server0 = Vec::new();
    for flow in 0..40 {
        let out = c.send(INSIDE, &[&udp(flow)]);
        if translated(&out[0].1).0 == Ipv4Addr::new(192, 0, 2, 1) {
            of_server0.push(flow);
        }
    }
    assert!(!of_server0.is_empty());
    // Server 0 answers with BUSY set: the switch marks it.
    c.busy[0] = true;
    assert_eq!(c.send(INSIDE, &[&udp(of_server0[0])]).len(), 1);
    assert!(c.switch.selector().is_busy(0));
    let before = c.switch.stats().requests_by_server.clone();
    for flow in 100..140 {
        let out = c.send(INSIDE, &[&udp(flow)]);
        assert_eq!(translated(&out[0].1).0, Ipv4Addr::new(192, 0, 2, 2), "flow {flow} went to the busy server");
    }
    let after = c.switch.stats().requests_by_server.clone();
    assert_eq!(after[0], before[0], "new flows go elsewhere while server 0 is busy");
    assert_eq!(after[1], before[1] + 40);
    assert!(c.switch.selector().stats().diverted > 0);
    // Its own flows wait for it in the switch: held, not sent, not lost.
    for &flow in &of_server0 {
        assert!(c.send(INSIDE, &[&udp(flow)]).is_empty(), "flow {flow} held");
    }
    assert_eq!(c.switch.held(), of_server0.len());
    // No longer busy (its mark lapses a millisecond after its last BUSY answer): the held
    // requests go out, each flow with its own pair.
    c.busy[0] = false;
    c.now_ns += 2_000_000;
    let out = c.send(INSIDE, &[]);
    assert_eq!(out.len(), of_server0.len());
    assert!(out.iter().all(|(_, f)| translated(f).0 == Ipv4Addr::new(192, 0, 2, 1)));
    assert_eq!(c.switch.held(), 0);
    assert!(!c.switch.selector().is_busy(0));
    assert_eq!(c.switch.stats().dropped(), 0);
}

/// A busy server's held queue is bounded: beyond it, requests are shed and counted.
#[test]
fn a_full_hold_queue_sheds_by_name() {
    let cfg = SwitchConfig {
        ports: 3,
        servers: vec![3],
        members: vec![0],
        routes: vec![Route { prefix: "0.0.0.0/0".parse().unwrap(), port: OUTSIDE, mac: [2, 0, 0, 0, 0, 9] }],
        offload_enabled: false,
        hold_capacity: 10,
        ..SwitchConfig::default()
    };
    let snat = Snat::for_server(0).unwrap();
    let server = Server::new(clip::DEFAULT_ETHERTYPE, 1, Box::new(snat), u64::MAX);
    let mut c = Cluster::new(Switch::new(program(), cfg).unwrap(), vec![server]);
    c.busy[0] = true;
    assert_eq!(c.send(INSIDE, &[&udp(1)]).len(), 1, "the answer that says BUSY goes on");
    for _ in 0..15 {
        assert!(c.send(INSIDE, &[&udp(1)]).is_empty());
    }
    assert_eq!(c.switch.held(), 10);
    assert_eq!(c.switch.stats().drop_count(DropReason::Shed), 5);
}

/// A server fails (§VI): its heartbeats stop; within the bound (300 ms) its flows go to its
/// buddy, which holds replicas of its entries (handed over before each response left), so every
/// flow keeps its pair; only the packets sent to it before detection are lost, and counted.
#[test]
fn a_failed_server_s_flows_go_on_at_its_buddy_with_their_state() {
    let mut c = cluster(3, &[0, 1, 2], false);
    c.buddy = vec![Some(1), Some(2), Some(0)];
    let mut pair = std::collections::HashMap::new();
    let flows = 0..90u32;
    for f in flows.clone() {
        let out = c.send(INSIDE, &[&udp(f)]);
        pair.insert(f, translated(&out[0].1));
    }
    let of1: Vec<u32> = flows.clone().filter(|f| pair[f].0 == Ipv4Addr::new(192, 0, 2, 2)).collect();
    assert!(!of1.is_empty());
    // Server 1 dies at t = 1 s. Every 10 ms each flow sends a packet and heartbeats are checked.
    c.now_ns = 1_000_000_000;
    c.heartbeats();
    c.alive[1] = false;
    let died = c.now_ns;
    let (mut sent_after, mut got_after, mut detected) = (0u64, 0u64, None);
    for _ in 0..50 {
        c.now_ns += 10_000_000;
        if !c.heartbeats().is_empty() {
            detected = Some(c.now_ns);
        }
        for f in flows.clone() {
            let out = c.send(INSIDE, &[&udp(f)]);
            sent_after += 1;
            got_after += out.len() as u64;
            if let Some((_, g)) = out.first() {
                assert_eq!(translated(g), pair[&f], "flow {f} changed its pair");
            }
        }
    }
    let detected = detected.expect("the failure is detected");
    assert!(detected - died <= 300_000_000 + 10_000_000, "detected {} ms after", (detected - died) / 1_000_000);
    assert_eq!(c.failed_over, vec![(1, 2)]);
    // Lost: exactly the packets sent to server 1 before detection, and counted.
    assert_eq!(sent_after - got_after, c.lost);
    let rounds_before = (detected - died) / 10_000_000 - 1;
    assert_eq!(c.lost, rounds_before * of1.len() as u64);
    assert_eq!(c.switch.stats().dropped(), 0);
}

/// Figure 7 on frames: the group goes 1 → 2 → 3 → 2 servers under traffic; every flow keeps
/// its pair (the pair says which server holds its state: a moved flow would get another
/// server's address), no packet is lost, and the server left out drains and then retires.
#[test]
fn group_changes_move_no_flow_on_frames() {
    let mut c = cluster(3, &[0], false);
    let mut pair = std::collections::HashMap::new();
    let mut sent = 0u64;
    let mut got = 0u64;
    let mut round = |c: &mut Cluster, flows: std::ops::Range<u32>, pair: &mut std::collections::HashMap<u32, _>| {
        for flow in flows {
            let out = c.send(INSIDE, &[&udp(flow)]);
            sent += 1;
            got += out.len() as u64;
            let t = translated(&out[0].1);
            assert_eq!(*pair.entry(flow).or_insert(t), t, "flow {flow} moved");
        }
    };
    round(&mut c, 0..100, &mut pair);
    for (members, new) in [(&[0, 1][..], 100..200), (&[0, 1, 2][..], 200..300), (&[1, 2][..], 300..400)] {
        let live = c.live_flows();
        c.switch.change_group(members, &live).unwrap();
        // Old flows keep their servers; new ones go to the new group.
        round(&mut c, 0..new.start, &mut pair);
        round(&mut c, new.clone(), &mut pair);
        for flow in new {
            let a = pair[&flow].0.octets()[3] - 1;
            assert!(members.contains(&u16::from(a)), "new flow {flow} went to server {a}, not the newest group");
        }
    }
    assert_eq!(sent, got, "no packet lost");
    assert_eq!(c.switch.stats().dropped(), 0);
    // Server 0 is out of the group but still serves its flows: it drains. When they end (its
    // list is empty once their connections time out, however short the idle time: a NAT keeps
    // a connection's pair that long) and their pins go, it retires.
    assert!(c.switch.selector().serves(0));
    c.now_ns += 2_000_000_000;
    assert!(c.servers[0].expire(c.now_ns).is_empty(), "idle, but their connections live");
    c.now_ns += tern_switch::nat::Timeouts::default().udp;
    let ended = c.servers[0].expire(c.now_ns);
    assert!(!ended.is_empty());
    c.switch.unpin(&ended);
    let live: Vec<_> = c
        .servers
        .iter_mut()
        .enumerate()
        .flat_map(|(s, v)| {
            v.expire(c.now_ns);
            v.live_flows().map(move |f| (f, s as u16)).collect::<Vec<_>>()
        })
        .collect();
    assert!(live.is_empty());
    // Another change with no live flows leaves no slot naming server 0.
    c.switch.change_group(&[1, 2], &live).unwrap();
    assert!(!c.switch.selector().serves(0), "server 0 retires");
}

/// Each drop reason's counter is its place in `DropReason::ALL`, named once.
#[test]
fn drop_reasons_index_their_counters() {
    for (i, r) in DropReason::ALL.iter().enumerate() {
        assert_eq!(*r as usize, i, "{}", r.name());
    }
    let mut names: Vec<&str> = DropReason::ALL.iter().map(|r| r.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), DropReason::ALL.len());
}
