//! Network tasks through the `NetworkTask` trait, on `tern_io` packet buffers (docs/chain.md,
//! "Network tasks"): golden frames for each kind, re-parsed with `etherparse`, every checksum
//! checked; drops by name; AES sealing into the headroom agreeing with sealing a `Vec`.

use std::time::Instant;

use etherparse::{NetHeaders, PacketHeaders, TransportHeader};
use tern_chain::aes::{AesTask, KeySpace};
use tern_chain::gbn;
use tern_chain::kv::{Msg, Op};
use tern_chain::task::{self, Cx, Keys, NetworkTask, Verdict};
use tern_chain::tenant::Tenant;
use tern_io::{Packet, Pool};
use tern_wire::frame::{build_tcp4, build_udp4};

/// (source address, source port, destination address, destination port, UDP payload), after
/// etherparse checks the IPv4 header checksum and the transport checksum.
fn parsed(frame: &[u8]) -> ([u8; 4], u16, [u8; 4], u16, Vec<u8>) {
    let h = PacketHeaders::from_ethernet_slice(frame).expect("etherparse parses it");
    let Some(NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "IPv4 header checksum");
    let p = h.payload.slice().to_vec();
    let (sp, dp) = match &h.transport {
        Some(TransportHeader::Udp(u)) => {
            assert_eq!(u.checksum, u.calc_checksum_ipv4(ip, &p).unwrap(), "UDP checksum");
            assert_eq!(usize::from(u.length), 8 + p.len());
            (u.source_port, u.destination_port)
        }
        Some(TransportHeader::Tcp(t)) => {
            assert_eq!(t.checksum, t.calc_checksum_ipv4(ip, &p).unwrap(), "TCP checksum");
            (t.source_port, t.destination_port)
        }
        _ => panic!("not UDP or TCP"),
    };
    (ip.source, sp, ip.destination, dp, p)
}

fn udp(src: [u8; 4], sp: u16, dst: [u8; 4], dp: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, payload);
    f
}

fn packet(pool: &Pool, headroom: usize, bytes: &[u8]) -> Packet {
    let mut p = pool.packet();
    p.reserve_headroom(headroom);
    p.extend_from_slice(bytes).unwrap();
    p
}

/// The task of kind described by `nt` (a tenant file's `[nt.x]` table body).
fn task_of(nt: &str) -> Box<dyn NetworkTask> {
    let t = Tenant::parse(&format!("tenant = \"t\"\ndag = \"x\"\n[nt.x]\n{nt}")).unwrap();
    task::build(&t.tasks[0], &mut Keys::default()).unwrap()
}

/// Runs `t` on `p`; a drop's reason must be one `task::drop_reasons` lists for its kind (the
/// names docs/chain.md gives, `tests/docs.rs`).
fn run(t: &mut dyn NetworkTask, p: &mut Packet, pool: &Pool) -> (Verdict, Vec<Packet>) {
    run_on(t, p, pool, 0)
}

/// [`run`], the packet in on `port`.
fn run_on(t: &mut dyn NetworkTask, p: &mut Packet, pool: &Pool, port: u8) -> (Verdict, Vec<Packet>) {
    let mut emitted = Vec::new();
    let v = t.process(p, &mut Cx { now: Instant::now(), pool, emitted: &mut emitted, paced: false, port });
    if let Verdict::Drop(r) = v {
        assert!(task::drop_reasons(t.kind()).contains(&r), "{}: `{r}` is not among its drop reasons", t.kind());
    }
    (v, emitted)
}

/// Every kind, on frames of every odd sort (none, cut short, not IP, IPv6, TCP, a fragment,
/// UDP with garbage or a half message, runs of bytes): each drop is for a reason its kind
/// lists, and each of those reasons with a frame here that causes it is seen.
#[test]
fn every_drop_is_for_a_reason_its_kind_lists() {
    let pool = Pool::new(64, 2048);
    let specs = [
        "kind = \"firewall\"\nrules = [{ action = \"deny\", proto = \"tcp\" }]".to_string(),
        "kind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20000\"".to_string(),
        format!("kind = \"aes\"\nkey = \"{KEY}\"\ndirection = \"open\""),
        "kind = \"lb\"\nbackends = [{ name = \"10.9.0.1:80\" }]".to_string(),
        "kind = \"gbn\"".to_string(),
        "kind = \"kv\"".to_string(),
        "kind = \"dummy\"\nns_per_packet = 1".to_string(),
    ];
    let mut frames: Vec<Vec<u8>> = vec![Vec::new(), vec![0; 13], vec![0xff; 60]];
    let mut arp = udp([10, 0, 0, 1], 1, [10, 0, 0, 2], 2, b"");
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    frames.push(arp);
    let mut v6 = vec![0u8; 80];
    v6[12..14].copy_from_slice(&[0x86, 0xdd]);
    frames.push(v6);
    let mut tcp = Vec::new();
    build_tcp4(&mut tcp, [2; 6], [4; 6], [10, 0, 0, 5], [192, 0, 2, 1], 4000, 80, 64, b"");
    frames.push(tcp.clone());
    frames.push(tcp[..30].to_vec());
    // An IPv4 header changed at byte `at` of the frame to `to`, its checksum made right again.
    let changed = |at: usize, to: u8| {
        let mut f = udp([10, 0, 0, 1], 1, [10, 0, 0, 2], 2, b"abcdefgh");
        f[at] = to;
        f[24..26].copy_from_slice(&[0, 0]);
        let sum = f[14..34].chunks(2).map(|w| u32::from(u16::from_be_bytes([w[0], w[1]]))).sum::<u32>();
        let sum = (sum & 0xffff) + (sum >> 16);
        f[24..26].copy_from_slice(&(!((sum & 0xffff) + (sum >> 16)) as u16).to_be_bytes());
        f
    };
    frames.push(changed(21, 1)); // a later fragment (offset 8)
    frames.push(changed(23, 1)); // ICMP
    for payload in [&b""[..], b"\x01", b"\x01\x01\x00\x00\x00\x00\x00\x00", &[9u8; 40]] {
        frames.push(udp([10, 0, 0, 1], 1, [10, 0, 0, 2], 2, payload));
        frames.push(udp([8, 8, 8, 8], 53, [192, 0, 2, 1], 20000, payload));
    }
    let mut seen = std::collections::BTreeSet::new();
    for spec in &specs {
        let mut t = task_of(spec);
        for f in &frames {
            let mut p = packet(&pool, 16, f);
            if let (Verdict::Drop(r), _) = run(t.as_mut(), &mut p, &pool) {
                seen.insert((t.kind(), r));
            }
        }
    }
    for want in [("firewall", "malformed"), ("firewall", "not_ip"), ("firewall", "denied"), ("nat", "not_ipv4")] {
        assert!(seen.contains(&want), "{want:?} not seen: {seen:?}");
    }
    for want in [("nat", "fragment"), ("nat", "not_tcp_udp"), ("nat", "no_mapping"), ("aes", "not_udp4")] {
        assert!(seen.contains(&want), "{want:?} not seen: {seen:?}");
    }
    for want in
        [("aes", "bad_tag"), ("lb", "not_tcp_udp4"), ("gbn", "malformed"), ("kv", "not_udp4"), ("kv", "malformed")]
    {
        assert!(seen.contains(&want), "{want:?} not seen: {seen:?}");
    }
}

const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

#[test]
fn aes_seals_into_the_headroom_as_a_vec_is_sealed_and_opens_back() {
    let pool = Pool::new(8, 2048);
    for len in [0usize, 1, 100, 1400] {
        let plain = udp([10, 0, 0, 1], 1, [10, 0, 0, 2], 2, &vec![0x5a; len]);
        let key = [7u8; 32];
        let mut v = plain.clone();
        AesTask::new(&KeySpace::new(key)).unwrap().seal(&mut v).unwrap();
        for headroom in [0, 64] {
            let mut p = packet(&pool, headroom, &plain);
            let space = KeySpace::new(key);
            AesTask::new(&space).unwrap().seal_packet(&mut p).unwrap();
            assert_eq!(p.data(), &v[..], "len {len}, headroom {headroom}");
            assert_eq!(parsed(p.data()).4.len(), len + 28);
            AesTask::new(&space).unwrap().open_packet(&mut p).unwrap();
            assert_eq!(p.data(), &plain[..]);
        }
    }
    // No room for the tag at the end: refused by name, the frame unchanged.
    let small = Pool::new(2, 200);
    let plain = udp([10, 0, 0, 1], 1, [10, 0, 0, 2], 2, &[1; 150]);
    let mut p = packet(&small, 0, &plain);
    let mut t = task_of(&format!("kind = \"aes\"\nkey = \"{KEY}\""));
    assert_eq!(run(t.as_mut(), &mut p, &small).0, Verdict::Drop("too_large"));
    assert_eq!(p.data(), &plain[..]);
    let mut opener = task_of(&format!("kind = \"aes\"\nkey = \"{KEY}\"\ndirection = \"open\""));
    let mut p = packet(&pool, 64, &plain);
    assert_eq!(run(opener.as_mut(), &mut p, &pool).0, Verdict::Drop("bad_tag"));
    assert!(opener.counters().contains(&("bad_tag", 1)));
}

#[test]
fn lb_rewrites_the_destination_to_its_flows_backend() {
    let pool = Pool::new(8, 2048);
    let mut lb = task_of(
        "kind = \"lb\"\nbackends = [{ name = \"10.2.0.1:8080\" }, { name = \"10.2.0.2:8081\", weight = 3 }]\ntable_size = 101",
    );
    let mut seen = std::collections::HashMap::new();
    for sp in 0..400u16 {
        let f = udp([10, 9, 0, 1], 1000 + sp, [192, 0, 2, 10], 80, b"hi");
        let mut p = packet(&pool, 0, &f);
        assert_eq!(run(lb.as_mut(), &mut p, &pool).0, Verdict::Pass);
        let (src, sport, dst, dport, payload) = parsed(p.data());
        assert_eq!((src, sport, payload.as_slice()), ([10, 9, 0, 1], 1000 + sp, &b"hi"[..]));
        assert!(matches!((dst, dport), ([10, 2, 0, 1], 8080) | ([10, 2, 0, 2], 8081)), "{dst:?}:{dport}");
        // The same flow again: the same backend.
        let mut q = packet(&pool, 0, &f);
        run(lb.as_mut(), &mut q, &pool);
        assert_eq!(p.data(), q.data());
        *seen.entry(dport).or_insert(0) += 1;
    }
    // Weights 1 and 3: about a quarter of the flows to the first.
    assert!((60..140).contains(&seen[&8080]), "{seen:?}");
    let mut tcp = Vec::new();
    build_tcp4(&mut tcp, [2; 6], [4; 6], [10, 9, 0, 1], [192, 0, 2, 10], 5555, 80, 64, b"");
    let mut p = packet(&pool, 0, &tcp);
    assert_eq!(run(lb.as_mut(), &mut p, &pool).0, Verdict::Pass);
    parsed(p.data());
    let mut p = packet(&pool, 0, &[0u8; 20]);
    assert_eq!(run(lb.as_mut(), &mut p, &pool).0, Verdict::Drop("not_tcp_udp4"), "not IP");
    let mut p = packet(&pool, 0, &udp([10, 9, 0, 1], 1, [192, 0, 2, 10], 80, b"hi")[..30]);
    assert_eq!(run(lb.as_mut(), &mut p, &pool).0, Verdict::Drop("malformed"), "cut short");
    // Backends the data path cannot rewrite to are refused when the task is built.
    let t =
        Tenant::parse("tenant = \"t\"\ndag = \"x\"\n[nt.x]\nkind = \"lb\"\nbackends = [{ name = \"web1\" }]").unwrap();
    let e = task::build(&t.tasks[0], &mut Keys::default()).unwrap_err();
    assert!(e.contains("backend `web1` is not an IPv4 address and port"), "{e}");
}

#[test]
fn kv_answers_a_hit_back_to_the_client() {
    let pool = Pool::new(8, 2048);
    let mut kv = task_of("kind = \"kv\"");
    let (client, server) = ([10, 0, 0, 5], [10, 0, 0, 9]);
    let get = Msg { op: Op::Get, id: 7, key: b"user:1", value: b"" }.to_vec();
    let mut p = packet(&pool, 0, &udp(client, 4000, server, 11211, &get));
    assert_eq!(run(kv.as_mut(), &mut p, &pool).0, Verdict::Pass, "a miss goes on to the server");
    let value = Msg { op: Op::Value, id: 7, key: b"user:1", value: b"alice" }.to_vec();
    // On the clients' port (0), as a client would forge it: not kept.
    let mut p = packet(&pool, 0, &udp(server, 11211, client, 4000, &value));
    assert_eq!(run(kv.as_mut(), &mut p, &pool).0, Verdict::Pass);
    assert!(kv.counters().contains(&("not_kept_wrong_way", 1)));
    let mut p = packet(&pool, 0, &udp(server, 11211, client, 4000, &value));
    assert_eq!(run_on(kv.as_mut(), &mut p, &pool, 1).0, Verdict::Pass, "the answer goes on to the client, kept");
    let get2 = Msg { op: Op::Get, id: 8, key: b"user:1", value: b"" }.to_vec();
    let mut p = packet(&pool, 0, &udp(client, 4000, server, 11211, &get2));
    assert_eq!(run(kv.as_mut(), &mut p, &pool).0, Verdict::Reply);
    let (src, sp, dst, dp, payload) = parsed(p.data());
    assert_eq!((src, sp, dst, dp), (server, 11211, client, 4000));
    assert_eq!(&p.data()[..12], &[[2u8; 6], [4u8; 6]].concat()[..], "MAC addresses swapped");
    assert_eq!(payload, Msg { op: Op::Value, id: 8, key: b"user:1", value: b"alice" }.to_vec());
    let mut p = packet(&pool, 0, &udp(client, 4000, server, 11211, &[9, 9]));
    assert_eq!(run(kv.as_mut(), &mut p, &pool).0, Verdict::Drop("malformed"));
    assert!(kv.counters().contains(&("hits", 1)));
}

#[test]
fn gbn_delivers_in_order_and_acknowledges() {
    let pool = Pool::new(8, 2048);
    // No quiet time, so that the first open is taken as it comes (below, with one).
    let mut t = task_of("kind = \"gbn\"\nquiet_s = 0");
    let from = |a: u8, port: u16, kind: u8, conn: u32, seq: u32, body: &[u8]| {
        let mut b = Vec::new();
        gbn::Header { kind, len: body.len() as u16, conn, seq }.write(body, &mut b);
        udp([10, 0, 0, a], port, [10, 0, 0, 2], 7001, &b)
    };
    let data = |seq: u32, body: &[u8]| from(1, 7000, gbn::DATA, 3, seq, body);
    let open = |conn: u32| from(1, 7000, gbn::OPEN, conn, 0, b"");
    let answer = |p: &tern_io::Packet| gbn::Header::parse(&parsed(p.data()).4).unwrap().0;
    // Data before the open: no connection, so nothing delivered; the packet becomes a reset.
    let mut p = packet(&pool, 64, &data(0, b"early"));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Reply);
    assert_eq!(answer(&p), gbn::Header { kind: gbn::RESET, len: 0, conn: 3, seq: 0 });
    // The open becomes its acknowledgement.
    let mut p = packet(&pool, 64, &open(3));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Reply);
    assert_eq!(answer(&p), gbn::Header { kind: gbn::ACK, len: 0, conn: 3, seq: 0 });
    let mut p = packet(&pool, 64, &data(0, b"first"));
    let (v, emitted) = run(t.as_mut(), &mut p, &pool);
    assert_eq!(v, Verdict::Pass);
    let (_, _, _, _, payload) = parsed(p.data());
    assert_eq!(payload, b"first", "delivered without the header");
    assert_eq!(emitted.len(), 1);
    let (src, sp, dst, dp, ack) = parsed(emitted[0].data());
    assert_eq!((src, sp, dst, dp), ([10, 0, 0, 2], 7001, [10, 0, 0, 1], 7000));
    assert_eq!(gbn::Header::parse(&ack).unwrap().0, gbn::Header { kind: gbn::ACK, len: 0, conn: 3, seq: 1 });
    // Out of order: the packet itself becomes the acknowledgement of what is expected.
    let mut p = packet(&pool, 64, &data(5, b"later"));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Reply);
    let (_, sp, _, dp, ack) = parsed(p.data());
    assert_eq!((sp, dp), (7001, 7000));
    assert_eq!(gbn::Header::parse(&ack).unwrap().0.seq, 1);
    let mut p = packet(&pool, 64, &udp([10, 0, 0, 1], 7000, [10, 0, 0, 2], 7001, b"no header"));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Drop("malformed"));
    // Another client sending connection 3's next number has no connection 3 of its own: a
    // reset, nothing delivered into connection 3, whose own packet 1 is then delivered.
    let mut p = packet(&pool, 64, &from(66, 7000, gbn::DATA, 3, 1, b"forged"));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Reply);
    assert_eq!(answer(&p).kind, gbn::RESET);
    assert_eq!(run(t.as_mut(), &mut packet(&pool, 64, &data(1, b"second")), &pool).0, Verdict::Pass);
    let counters: std::collections::HashMap<_, _> = t.counters().into_iter().collect();
    assert_eq!((counters["opened"], counters["resets"], counters["delivered"], counters["acks"]), (1, 2, 2, 4));
    // At most `max_connections`: another connection's open is dropped by name, the kept one
    // goes on.
    let mut t = task_of("kind = \"gbn\"\nmax_connections = 1\nidle_s = 5\ncookies_from = 1");
    assert_eq!(run(t.as_mut(), &mut packet(&pool, 64, &open(3)), &pool).0, Verdict::Reply);
    assert_eq!(run(t.as_mut(), &mut packet(&pool, 64, &data(0, b"a")), &pool).0, Verdict::Pass);
    assert_eq!(run(t.as_mut(), &mut packet(&pool, 64, &open(4)), &pool).0, Verdict::Drop("connections_full"));
    assert_eq!(run(t.as_mut(), &mut packet(&pool, 64, &data(1, b"c")), &pool).0, Verdict::Pass);
    let counters: std::collections::HashMap<_, _> = t.counters().into_iter().collect();
    assert_eq!((counters["connections"], counters["connections_full"], counters["expired"]), (1, 1, 0));
    // The sender's settings are not the receiving end's: refused by name.
    let err = Tenant::parse("tenant = \"t\"\ndag = \"x\"\n[nt.x]\nkind = \"gbn\"\nwindow = 4\n").unwrap_err();
    assert!(err.contains("window") && err.contains("max_connections, max_connections_per_peer, idle_s"), "{err}");
    // At most `max_connections_per_peer` for one address: its next connection's open is
    // dropped by name, another address's is taken.
    let mut t = task_of("kind = \"gbn\"\nmax_connections_per_peer = 1\nquiet_s = 0");
    assert_eq!(run(t.as_mut(), &mut packet(&pool, 64, &open(3)), &pool).0, Verdict::Reply);
    let mut p = packet(&pool, 64, &from(1, 7002, gbn::OPEN, 4, 0, b""));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Drop("peer_full"));
    let mut p = packet(&pool, 64, &from(3, 7002, gbn::OPEN, 4, 0, b""));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Reply);
    assert!(t.counters().contains(&("peer_full", 1)), "{:?}", t.counters());
    // With `cookies_from = 0` every new connection's open must bring a cookie: the first is
    // turned into one, the open with its number into the acknowledgement.
    let mut t = task_of("kind = \"gbn\"\ncookies_from = 0");
    let mut p = packet(&pool, 64, &open(3));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Reply);
    let cookie = answer(&p);
    assert_eq!((cookie.kind, cookie.conn), (gbn::COOKIE, 3));
    let mut p = packet(&pool, 64, &from(1, 7000, gbn::OPEN, 3, cookie.seq, b""));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Reply);
    assert_eq!(answer(&p), gbn::Header { kind: gbn::ACK, len: 0, conn: 3, seq: cookie.seq });
    assert_eq!(run(t.as_mut(), &mut packet(&pool, 64, &data(cookie.seq, b"a")), &pool).0, Verdict::Pass);
    let counters: std::collections::HashMap<_, _> = t.counters().into_iter().collect();
    assert_eq!((counters["cookies"], counters["opened"], counters["delivered"]), (1, 1, 1));
    assert_eq!(counters["acks"], 2, "the open's and the data's; the cookie is not one");
    // In its quiet time (by default the idle time from the first new connection's open) a new
    // connection's open must bring a cookie however few are kept.
    let mut t = task_of("kind = \"gbn\"");
    let mut p = packet(&pool, 64, &open(3));
    assert_eq!(run(t.as_mut(), &mut p, &pool).0, Verdict::Reply);
    assert_eq!(answer(&p).kind, gbn::COOKIE);
}

#[test]
fn nat_firewall_and_dummy_through_the_trait() {
    let pool = Pool::new(8, 2048);
    let mut nat = task_of("kind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20010\"");
    let mut p = packet(&pool, 0, &udp([10, 0, 0, 5], 4000, [8, 8, 8, 8], 53, b"q"));
    assert_eq!(run(nat.as_mut(), &mut p, &pool).0, Verdict::Pass);
    let (src, sp, _, _, _) = parsed(p.data());
    assert_eq!((src, sp), ([192, 0, 2, 1], 20000));
    // The reply, to the external address, comes back in.
    let mut r = packet(&pool, 0, &udp([8, 8, 8, 8], 53, [192, 0, 2, 1], 20000, b"a"));
    assert_eq!(run(nat.as_mut(), &mut r, &pool).0, Verdict::Pass);
    let (_, _, dst, dp, _) = parsed(r.data());
    assert_eq!((dst, dp), ([10, 0, 0, 5], 4000));
    let mut stray = packet(&pool, 0, &udp([8, 8, 8, 8], 53, [192, 0, 2, 1], 20005, b"a"));
    assert_eq!(run(nat.as_mut(), &mut stray, &pool).0, Verdict::Drop("no_mapping"));

    let mut fw = task_of("kind = \"firewall\"\nrules = [{ action = \"allow\", proto = \"udp\", dst_port = 53 }]");
    let mut p = packet(&pool, 0, &udp([10, 0, 0, 5], 4000, [8, 8, 8, 8], 53, b"q"));
    assert_eq!(run(fw.as_mut(), &mut p, &pool).0, Verdict::Pass);
    let mut p = packet(&pool, 0, &udp([10, 0, 0, 5], 4000, [8, 8, 8, 8], 54, b"q"));
    assert_eq!(run(fw.as_mut(), &mut p, &pool).0, Verdict::Drop("denied"));
    assert!(fw.counters().contains(&("denied", 1)));

    let mut d = task_of("kind = \"dummy\"\nns_per_packet = 1000\nluts = 5");
    assert_eq!(d.cost().luts, Some(5));
    let f = udp([10, 0, 0, 5], 4000, [8, 8, 8, 8], 53, b"q");
    let mut p = packet(&pool, 0, &f);
    // The spin stops early by the overrun measured for the process, and never earlier.
    let over = task::Busy::new().over_ns();
    let t0 = Instant::now();
    assert_eq!(run(d.as_mut(), &mut p, &pool).0, Verdict::Pass);
    assert!(
        t0.elapsed().as_nanos() >= u128::from(1000u64.saturating_sub(over)),
        "a dummy spends its time, less the overrun"
    );
    let busy = task::Busy::new();
    for ns in [1u64, 50, 100, 5000] {
        let t0 = Instant::now();
        busy.spend(ns);
        assert!(t0.elapsed().as_nanos() >= u128::from(ns.saturating_sub(over)), "{ns} ns spent");
    }
    assert_eq!(p.data(), &f[..]);
}

/// An update's next generation takes a task's state (`swap_state`): a firewall's established
/// flows under new rules, a NAT's mappings, a transport's connections, a cache's entries; not
/// between tasks of other kinds, nor a NAT's with other ports.
#[test]
fn a_next_generation_takes_the_state_of_the_one_before() {
    let pool = Pool::new(8, 2048);
    let out = || udp([10, 0, 0, 5], 4000, [8, 8, 8, 8], 53, b"q");
    let back = || udp([8, 8, 8, 8], 53, [10, 0, 0, 5], 4000, b"a");
    let mut fw = task_of("kind = \"firewall\"\nrules = [{ action = \"allow\", proto = \"udp\", dst_port = 53 }]");
    assert_eq!(run(fw.as_mut(), &mut packet(&pool, 0, &out()), &pool).0, Verdict::Pass);
    // New rules that still let the flow through as it began (and its reply by no rule): the
    // reply goes on by the state handed over, where a firewall with no state denies it.
    let rules =
        "rules = [{ action = \"allow\", proto = \"udp\", dst_port = 53 }, { action = \"allow\", proto = \"tcp\" }]";
    let mut fw2 = task_of(&format!("kind = \"firewall\"\n{rules}"));
    let mut fresh = task_of(&format!("kind = \"firewall\"\n{rules}"));
    assert!(fw2.swap_state(fw.as_mut()));
    assert_eq!(run(fw2.as_mut(), &mut packet(&pool, 0, &back()), &pool).0, Verdict::Pass);
    assert_eq!(run(fresh.as_mut(), &mut packet(&pool, 0, &back()), &pool).0, Verdict::Drop("denied"));
    // Rules that now deny the flow cut it, both ways: its state is forgotten (`revoked`).
    let mut fw3 = task_of("kind = \"firewall\"\nrules = [{ action = \"allow\", proto = \"udp\", dst_port = 80 }]");
    assert!(fw3.swap_state(fw2.as_mut()));
    assert_eq!(run(fw3.as_mut(), &mut packet(&pool, 0, &back()), &pool).0, Verdict::Drop("denied"));
    assert_eq!(run(fw3.as_mut(), &mut packet(&pool, 0, &out()), &pool).0, Verdict::Drop("denied"));
    assert!(fw3.counters().contains(&("revoked", 1)), "{:?}", fw3.counters());

    let nat_of =
        |ports: &str| task_of(&format!("kind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"{ports}\"\nidle_s = 30"));
    let mut nat = nat_of("20000-20010");
    let mut p = packet(&pool, 0, &udp([10, 0, 0, 6], 4000, [8, 8, 8, 8], 53, b"q"));
    assert_eq!(run(nat.as_mut(), &mut p, &pool).0, Verdict::Pass);
    let mut nat2 = nat_of("20000-20010");
    assert!(nat2.swap_state(nat.as_mut()));
    // The reply to the mapping the first made comes in through the second.
    let mut r = packet(&pool, 0, &udp([8, 8, 8, 8], 53, [192, 0, 2, 1], 20000, b"a"));
    assert_eq!(run(nat2.as_mut(), &mut r, &pool).0, Verdict::Pass);
    assert_eq!(parsed(r.data()).2, [10, 0, 0, 6]);
    // A new flow through the second takes the next port, not the first's again.
    let mut p = packet(&pool, 0, &udp([10, 0, 0, 7], 4000, [8, 8, 8, 8], 53, b"q"));
    assert_eq!(run(nat2.as_mut(), &mut p, &pool).0, Verdict::Pass);
    assert_eq!(parsed(p.data()).1, 20001);
    assert!(!nat_of("20000-20020").swap_state(nat2.as_mut()), "other ports: not passed on");
    assert!(!nat2.swap_state(fw3.as_mut()), "another kind: not passed on");

    let mut gbn1 = task_of("kind = \"gbn\"\nquiet_s = 0");
    let gbn_packet = |kind: u8, seq: u32| {
        let mut b = Vec::new();
        let body: &[u8] = if kind == gbn::DATA { b"d" } else { b"" };
        gbn::Header { kind, len: body.len() as u16, conn: 9, seq }.write(body, &mut b);
        udp([10, 0, 0, 1], 7000, [10, 0, 0, 2], 7001, &b)
    };
    let data = |seq: u32| gbn_packet(gbn::DATA, seq);
    assert_eq!(run(gbn1.as_mut(), &mut packet(&pool, 64, &gbn_packet(gbn::OPEN, 0)), &pool).0, Verdict::Reply);
    assert_eq!(run(gbn1.as_mut(), &mut packet(&pool, 64, &data(0)), &pool).0, Verdict::Pass);
    let mut gbn2 = task_of("kind = \"gbn\"\nidle_s = 10");
    assert!(gbn2.swap_state(gbn1.as_mut()));
    assert_eq!(run(gbn2.as_mut(), &mut packet(&pool, 64, &data(1)), &pool).0, Verdict::Pass, "the next in order");

    let kv_of = |n: u32| task_of(&format!("kind = \"kv\"\nmax_entries = {n}"));
    let (mut kv1, mut kv2) = (kv_of(16), kv_of(16));
    assert!(kv2.swap_state(kv1.as_mut()));
    assert!(kv_of(32).swap_state(kv2.as_mut()), "other bounds: passed on, within them");
    let mut dummy = task_of("kind = \"dummy\"");
    assert!(!dummy.swap_state(kv2.as_mut()));
}

/// A NAT's instances share out a host's port limit as they share out the range, all of it and
/// no more: a limit of 4 over two instances lets one inside address hold 2 ports in each, and
/// a limit of 3, 2 in the first and 1 in the second; one instance alone holds the whole limit.
#[test]
fn nat_instances_share_a_hosts_port_limit() {
    let pool = Pool::new(64, 2048);
    let out = |t: &mut dyn NetworkTask, sport: u16| {
        run(t, &mut packet(&pool, 0, &udp([10, 0, 0, 6], sport, [8, 8, 8, 8], 53, b"q")), &pool).0
    };
    // How many flows of one host each instance translates before `port_limit`.
    let held = |limit: u32, n: usize| -> Vec<usize> {
        let nt = format!("kind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20099\"\nports_per_host = {limit}");
        (0..n)
            .map(|k| {
                let mut t = task_of(&nt);
                t.partition(k, n).unwrap();
                let got: Vec<Verdict> = (1..=8).map(|p| out(t.as_mut(), p)).collect();
                let passed = got.iter().take_while(|v| **v == Verdict::Pass).count();
                assert!(got[passed..].iter().all(|v| *v == Verdict::Drop("port_limit")), "{got:?}");
                passed
            })
            .collect()
    };
    assert_eq!(held(4, 2), [2, 2]);
    assert_eq!(held(3, 2), [2, 1]);
    assert_eq!(held(5, 3), [2, 2, 1]);
    assert_eq!(held(5, 1), [5]);
    // Below one a host for each instance: one each.
    assert_eq!(held(1, 2), [1, 1]);
}

proptest::proptest! {
    /// Every port of a range belongs to exactly one instance's slice, the one `owner` names.
    #[test]
    fn steer_slices_partition_the_ports(first in 1u16..60000, len in 1u16..3000, n in 1usize..9) {
        let last = first.saturating_add(len - 1);
        let st = task::Steer { addr: 0, first, last };
        let mut owned = 0u64;
        for k in 0..n {
            if let Some((a, b)) = task::slice(first, last, k, n) {
                proptest::prop_assert!(a >= first && b <= last && a <= b);
                for p in [a, b, a + (b - a) / 2] {
                    proptest::prop_assert_eq!(st.owner(p, n), Some(k));
                }
                owned += u64::from(b - a) + 1;
            }
        }
        proptest::prop_assert_eq!(owned, u64::from(last - first) + 1);
        proptest::prop_assert_eq!(st.owner(first.wrapping_sub(1), n).filter(|_| first > 0), None);
    }
}

/// A stage that sends frames of an even length to its second output, echoes odd ones to both
/// outputs (a flood), and keeps frames shorter than 20 bytes.
struct Parity(Pool);

impl tern_io::BatchStage for Parity {
    fn outputs(&self) -> usize {
        2
    }
    fn process(&mut self, _: Instant, _: u16, input: &mut tern_io::Batch, outputs: &mut [tern_io::Batch]) {
        for p in input.drain() {
            if p.len() < 20 {
                self.0.put(p);
            } else if p.len() % 2 == 0 {
                let _ = outputs[1].push(p);
            } else {
                let copy = self.0.clone_packet(&p);
                let _ = outputs[0].push(p);
                let _ = outputs[1].push(copy);
            }
        }
    }
}

#[test]
fn another_engine_runs_as_a_task_through_batch_stage() {
    let pool = Pool::new(16, 2048);
    let mut t = task::StageTask::new(Box::new(Parity(pool.clone())), 0, 7);
    assert_eq!(t.cost().luts, Some(7));
    let mut p = packet(&pool, 0, &[1u8; 30]);
    assert_eq!(run(&mut t, &mut p, &pool).0, Verdict::Pass);
    assert_eq!(p.data(), &[1u8; 30]);
    let mut p = packet(&pool, 0, &[2u8; 31]);
    assert_eq!(run(&mut t, &mut p, &pool).0, Verdict::Pass);
    assert_eq!(p.len(), 31);
    let mut p = packet(&pool, 0, &[3u8; 10]);
    assert_eq!(run(&mut t, &mut p, &pool).0, Verdict::Drop("stage_dropped"));
    assert_eq!(t.counters(), vec![("passed", 2), ("stage_dropped", 1), ("extra", 1)]);
    // Without an engine, a stage cannot be built by the crate itself.
    let spec =
        Tenant::parse("tenant = \"t\"\ndag = \"x\"\n[nt.x]\nkind = \"stage\"\nengine = \"flow\"\nconfig = \"f.toml\"")
            .unwrap();
    assert!(task::build(&spec.tasks[0], &mut Keys::default()).unwrap_err().contains("stage engine `flow`"));
}

/// Only the cipher reads a packet's bytes past its headers, so only its region asks for the
/// next packet's lines while it runs one (docs/chain.md, "The data path"); the others read the
/// headers, which the batch's first task brought in.
#[test]
fn only_the_cipher_reads_the_payload() {
    for (spec, payload) in [
        (format!("kind = \"aes\"\nkey = \"{KEY}\""), true),
        (format!("kind = \"aes\"\nkey = \"{KEY}\"\ndirection = \"open\""), true),
        ("kind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20010\"".to_string(), false),
        ("kind = \"firewall\"\nrules = [{ action = \"allow\", proto = \"udp\" }]".to_string(), false),
        ("kind = \"lb\"\nbackends = [{ name = \"10.2.0.1:8080\" }]".to_string(), false),
        ("kind = \"kv\"".to_string(), false),
        ("kind = \"gbn\"".to_string(), false),
        ("kind = \"dummy\"\nns_per_packet = 10".to_string(), false),
    ] {
        assert_eq!(task_of(&spec).reads_payload(), payload, "{spec}");
    }
}
