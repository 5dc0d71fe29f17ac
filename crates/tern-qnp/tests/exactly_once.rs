//! Exactly-once across the things that change under a server: several workers sharing one
//! memory (a retransmission reaching another worker than its original), and memory bounds
//! forgetting requests (counted as `dedup_evicted`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_io::{Batch, Pool};
use tern_qnp::apps::pingpong::{Ping, Pong};
use tern_qnp::{DropReason, ExactlyOnce, QnpConfig, Server};
use tern_wire::qnp::{Flags, HEADER_LEN, Packet, Repr};
use tern_wire::tlv::Message;

fn request(req_id: u32, acked: u32, seq: u32) -> Vec<u8> {
    let mut payload = Vec::new();
    Ping { seq: seq.into(), payload: vec![7; 16] }.encode(&mut payload);
    single_packet(0, req_id, acked, 0, &payload)
}

/// A request of one packet of app 1 whose dispatch records end `dispatch_end` bytes into the
/// payload (what its `seg_cnt` covers).
fn single_packet(req_type: u8, req_id: u32, acked: u32, dispatch_end: usize, payload: &[u8]) -> Vec<u8> {
    let repr = Repr {
        app_id: 1,
        req_type,
        req_id,
        req_acked_id: acked,
        req_len_in_bytes: payload.len() as u32,
        req_len_in_pkts: 1,
        pkt_seq_num_in_req: 0,
        flags: Flags::DATA,
        seg_cnt: tern_wire::qnp::seg_cnt_for(dispatch_end),
    };
    let mut pkt = vec![0u8; HEADER_LEN];
    repr.emit(&mut Packet::new_unchecked(&mut pkt[..]));
    pkt.extend_from_slice(payload);
    pkt
}

/// Delivers `pkt` to `server`; if it is delivered, answers it and returns the response's
/// packets. A duplicate's resend is returned too.
fn serve(server: &mut Server, pool: &Pool, now: Instant, peer: SocketAddr, pkt: &[u8]) -> (bool, Vec<Vec<u8>>) {
    let ran = match server.handle_packet(now, peer, pkt) {
        Some(inc) => {
            let handle = inc.handle;
            let ping = Ping::decode_parts(inc.parts.iter()).unwrap();
            server.respond(handle, &Pong { seq: ping.seq, payload: ping.payload }).unwrap();
            true
        }
        None => false,
    };
    let mut batch = Batch::new(32);
    server.poll_transmit(pool, &mut batch);
    let out = batch.drain().map(|p| p.data().to_vec()).collect();
    (ran, out)
}

/// Two workers of one server, sharing one exactly-once memory.
fn two_workers() -> (Pool, Instant, Server, Server) {
    let cfg = QnpConfig::default();
    let memory = Arc::new(ExactlyOnce::new(&cfg, 8));
    let now = Instant::now();
    let w0 = Server::with_memory(cfg.clone(), &[1], now, memory.clone());
    let w1 = Server::with_memory(cfg, &[1], now, memory);
    (Pool::new(256, 2048), now, w0, w1)
}

fn peer() -> SocketAddr {
    "10.0.0.9:5000".parse().unwrap()
}

#[test]
fn a_retransmission_on_another_worker_gets_the_remembered_response() {
    let (pool, now, mut w0, mut w1) = two_workers();
    let (ran, first) = serve(&mut w0, &pool, now, peer(), &request(100, 100, 42));
    assert!(ran && first.len() == 1);
    // The same request, retransmitted, now reaches worker 1 (say, after a rule reload).
    let (ran, again) = serve(&mut w1, &pool, now, peer(), &request(100, 100, 42));
    assert!(!ran, "the handler ran twice");
    assert_eq!(again, first, "worker 1 resends worker 0's response, byte for byte");
    assert_eq!(w1.stats().drops_of(DropReason::DuplicateRequest), 1);
    assert_eq!(w1.stats().retransmissions, 1);
}

#[test]
fn the_ack_floor_is_the_same_on_every_worker() {
    let (pool, now, mut w0, mut w1) = two_workers();
    // Requests 100..110 answered on worker 0; the client's floor moves to 110.
    for id in 100..110 {
        assert!(serve(&mut w0, &pool, now, peer(), &request(id, 100, id)).0);
    }
    assert!(serve(&mut w0, &pool, now, peer(), &request(110, 110, 110)).0);
    // A late copy of request 105 carrying an old floor reaches worker 1: it is below the floor
    // worker 0 learnt, so it is stale there too, not a new request.
    let (ran, out) = serve(&mut w1, &pool, now, peer(), &request(105, 100, 105));
    assert!(!ran && out.is_empty());
    assert_eq!(w1.stats().drops_of(DropReason::StaleRequest), 1);
}

#[test]
fn evicting_a_remembered_request_is_counted_and_can_run_a_handler_twice() {
    let pool = Pool::new(256, 2048);
    // Room for 4 remembered requests; the client's floor stays at 200 (request 200 is never
    // answered), so nothing leaves by the floor.
    let cfg = QnpConfig { dedup_entries: 4, ..QnpConfig::default() };
    let now = Instant::now();
    let mut server = Server::new(cfg, &[1], now);
    for id in 201..211 {
        assert!(serve(&mut server, &pool, now, peer(), &request(id, 200, id)).0);
    }
    let evicted = server.stats().dedup_evicted;
    assert_eq!(evicted, 6, "10 remembered, room for 4");
    assert_eq!(server.dedup_len(), 4);
    // Request 209 is still remembered: its retransmission is answered from memory.
    assert!(!serve(&mut server, &pool, now, peer(), &request(209, 200, 209)).0);
    // Request 201 was forgotten: its retransmission runs the handler again. That is the window
    // the bounds leave, and why the eviction is counted.
    assert!(serve(&mut server, &pool, now, peer(), &request(201, 200, 201)).0);
    // Forgetting by the floor or by age is not counted: the client is done with those.
    let mut server = Server::new(QnpConfig { dedup_ttl: Duration::from_millis(50), ..QnpConfig::default() }, &[1], now);
    for id in 300..310 {
        assert!(serve(&mut server, &pool, now, peer(), &request(id, 300, id)).0);
    }
    assert!(serve(&mut server, &pool, now, peer(), &request(310, 305, 310)).0);
    server.handle_timeout(now + Duration::from_millis(200));
    assert_eq!(server.dedup_len(), 0);
    assert_eq!(server.stats().dedup_evicted, 0);
}

/// The `attempt` byte tells a late original from a lost one: a retransmission sent while the
/// original was only delayed is spurious; one that replaced a lost request, or made the server
/// resend a lost response, is not.
#[test]
fn spurious_retransmissions_are_told_from_real_ones() {
    use tern_qnp::Client;
    let pool = Pool::new(256, 2048);
    let cfg = QnpConfig::default();
    let t0 = Instant::now();
    let server_addr: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let mut server = Server::new(cfg.clone(), &[1], t0);
    let mut client = Client::new(cfg.clone(), 1, server_addr, 500);
    let late = cfg.initial_rto * 3 / 2;
    let send = |client: &mut Client| {
        let mut b = Batch::new(32);
        client.poll_transmit(&pool, &mut b);
        b.drain().map(|p| p.data().to_vec()).collect::<Vec<_>>()
    };
    let deliver = |client: &mut Client, t: Instant, resp: &[Vec<u8>]| {
        resp.iter().filter(|r| client.handle_packet(t, server_addr, r).is_some()).count()
    };
    // Late original: answered after the retransmission went out.
    client.send_req(t0, 0, &Ping { seq: 1, payload: vec![] }).unwrap();
    let original = send(&mut client);
    client.handle_timeout(t0 + late);
    let copy = send(&mut client);
    assert_eq!(copy.len(), 1, "retransmitted");
    let (_, resp) = serve(&mut server, &pool, t0 + late, peer(), &original[0]);
    assert_eq!(deliver(&mut client, t0 + late, &resp), 1);
    assert_eq!((client.stats().retransmissions, client.stats().spurious_retransmissions), (1, 1));
    // Lost original: the retransmission is answered.
    let t1 = t0 + late * 2;
    client.send_req(t1, 0, &Ping { seq: 2, payload: vec![] }).unwrap();
    let _lost = send(&mut client);
    client.handle_timeout(t1 + late * 4);
    let copy = send(&mut client);
    let (_, resp) = serve(&mut server, &pool, t1 + late * 4, peer(), &copy[0]);
    assert_eq!(deliver(&mut client, t1 + late * 4, &resp), 1);
    assert_eq!((client.stats().retransmissions, client.stats().spurious_retransmissions), (2, 1));
    // Lost response: the server resends its cached response for the retransmission, echoing it.
    let t2 = t1 + late * 8;
    client.send_req(t2, 0, &Ping { seq: 3, payload: vec![] }).unwrap();
    let original = send(&mut client);
    let (_, _lost_response) = serve(&mut server, &pool, t2, peer(), &original[0]);
    client.handle_timeout(t2 + late * 4);
    let copy = send(&mut client);
    let (ran, resend) = serve(&mut server, &pool, t2 + late * 4, peer(), &copy[0]);
    assert!(!ran && resend.len() == 1);
    assert_eq!(deliver(&mut client, t2 + late * 4, &resend), 1);
    assert_eq!((client.stats().retransmissions, client.stats().spurious_retransmissions), (3, 1));
}

/// A server wakes for housekeeping only while the shared memory holds something: an idle one
/// asks for no timer, one that was handed a request does until a sweep finds the memory empty,
/// and whichever worker put a request there keeps sweeping while it is remembered — even when
/// the other worker's sweep came first and found it still there.
#[test]
fn the_sweep_timer_runs_while_the_shared_memory_remembers_and_stops_after() {
    let cfg = QnpConfig { dedup_ttl: Duration::from_millis(50), ..QnpConfig::default() };
    let memory = Arc::new(ExactlyOnce::new(&cfg, 8));
    let now = Instant::now();
    let mut w0 = Server::with_memory(cfg.clone(), &[1], now, memory.clone());
    let mut w1 = Server::with_memory(cfg, &[1], now, memory.clone());
    let pool = Pool::new(64, 2048);
    let peer: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    assert_eq!(w0.poll_timeout(), None, "an idle server sets no timer");
    assert_eq!(w1.poll_timeout(), None);
    let (ran, out) = serve(&mut w0, &pool, now, peer, &request(5, 5, 1));
    assert!(ran && out.len() == 1);
    assert_eq!(memory.remembered(), 1);
    let t = w0.poll_timeout().expect("w0 remembers a request: it must sweep");
    assert!(t <= now + Duration::from_millis(100));
    assert_eq!(w1.poll_timeout(), None, "w1 was handed nothing");
    // Before the TTL: w0's sweep keeps the request and its timer.
    let soon = now + Duration::from_millis(10);
    w0.handle_timeout(soon);
    assert_eq!(memory.remembered(), 1);
    assert!(w0.poll_timeout().is_some(), "the memory still remembers: keep sweeping");
    // w1 gets a request of another client (remembered too), then both sweep after the TTL.
    let other: SocketAddr = "127.0.0.1:4001".parse().unwrap();
    let (ran, _) = serve(&mut w1, &pool, soon, other, &request(9, 9, 2));
    assert!(ran);
    assert_eq!(memory.remembered(), 2);
    let later = now + Duration::from_millis(500);
    w1.handle_timeout(later);
    assert_eq!(memory.remembered(), 0, "both requests are past the TTL");
    assert_eq!(w1.poll_timeout(), None, "w1's sweep emptied the memory");
    // w0 has not swept since: it sweeps once more, finds nothing, and stops.
    assert!(w0.poll_timeout().is_some());
    w0.handle_timeout(later + Duration::from_millis(200));
    assert_eq!(w0.poll_timeout(), None, "nothing left: no more wake-ups");
}

/// A request of one packet of a declared type is admitted, checked and recorded in one step;
/// the outcome and the counters are those of the step-by-step path: a first packet without its
/// dispatch field is dropped before it counts as received, one that repeats it is dropped after,
/// neither is remembered (so a corrected retransmission runs), and a packet both stale and
/// malformed is counted stale.
#[test]
fn a_single_packet_request_is_checked_and_remembered_as_before() {
    use tern_wire::tlv::Writer;
    let pool = Pool::new(64, 2048);
    let now = Instant::now();
    let mut server = Server::new(QnpConfig::default(), &[1], now);
    server.declare_request_type(1, 1, &[1]);
    let packet = |req_id: u32, acked: u32, records: &[(u8, &[u8])]| {
        let mut payload = Vec::new();
        let mut w = Writer::new(&mut payload);
        for (f, v) in records {
            w.put_bytes(*f, v);
        }
        single_packet(1, req_id, acked, 8, &payload)
    };
    let deliver = |server: &mut Server, pkt: &[u8]| {
        let delivered = server.handle_packet(now, peer(), pkt).map(|inc| inc.handle);
        if let Some(h) = delivered {
            server.respond(h, &Pong { seq: 0u32.into(), payload: Vec::new() }).unwrap();
            let mut batch = Batch::new(8);
            server.poll_transmit(&pool, &mut batch);
            batch.recycle(&pool);
        }
        delivered.is_some()
    };
    let drops = |s: &Server, r: DropReason| s.stats().drops[r as usize];
    // No dispatch field: dropped before it counts as received.
    assert!(!deliver(&mut server, &packet(10, 10, &[(2, b"x")])));
    assert_eq!((drops(&server, DropReason::MissingDispatchField), server.stats().rx_packets), (1, 0));
    // The dispatch field again later: dropped after it counted as received.
    assert!(!deliver(&mut server, &packet(11, 10, &[(1, b"k"), (2, b"x"), (1, b"k2")])));
    assert_eq!((drops(&server, DropReason::SplitDispatchField), server.stats().rx_packets), (1, 1));
    assert_eq!(server.dedup_len(), 0, "a refused request is not remembered");
    // Corrected retransmissions of both run, once.
    assert!(deliver(&mut server, &packet(10, 10, &[(1, b"k")])));
    assert!(deliver(&mut server, &packet(11, 10, &[(1, b"k")])));
    assert!(!deliver(&mut server, &packet(11, 10, &[(1, b"k")])));
    assert_eq!(drops(&server, DropReason::DuplicateRequest), 1);
    assert_eq!((server.stats().requests, server.stats().rx_packets, server.dedup_len()), (2, 3, 2));
    // The floor moves to 12: a malformed request 10 is stale first.
    assert!(deliver(&mut server, &packet(12, 12, &[(1, b"k")])));
    assert!(!deliver(&mut server, &packet(10, 12, &[(2, b"x")])));
    assert_eq!(drops(&server, DropReason::StaleRequest), 1);
    assert_eq!(drops(&server, DropReason::MissingDispatchField), 1);
}
