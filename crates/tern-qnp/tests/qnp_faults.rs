//! Seeded client/server pairs over in-memory ports with fault injection, in virtual time (the
//! `Pair` harness of quinn-proto): every request completes, each response reaches the client
//! exactly once, each handler runs exactly once.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tern_io::fault::{Direction, FaultConfig, FaultInjector};
use tern_io::{Batch, Pool, Port, mem};
use tern_qnp::apps::probe::Probe;
use tern_qnp::{Client, ClientEvent, DropReason, QnpConfig, Server};
use tern_wire::tlv::Message;

struct Outcome {
    completed: u64,
    failed: u64,
    handler_runs: HashMap<u64, u32>,
    responses: HashMap<u64, u32>,
    client_retx: u64,
    server_drops: tern_qnp::Stats,
    client_drops: tern_qnp::Stats,
    faults: (u64, u64, u64),
}

fn run(requests: u64, concurrency: usize, faults: FaultConfig, sizes: &[usize], seed: u64) -> Outcome {
    let pool = Pool::new(8192, 2048);
    let (client_port, mut server_port) = mem::pair(&pool, 8192);
    let server_addr = server_port.local_addr();
    let mut client_port = FaultInjector::new(client_port, &pool, FaultConfig { direction: Direction::Both, ..faults });
    let cfg = QnpConfig { max_retries: 30, ..QnpConfig::default() };
    let t0 = Instant::now();
    let mut now = t0;
    let mut client = Client::new(cfg.clone(), 3, server_addr, (seed as u32).wrapping_mul(2_654_435_761));
    let mut server = Server::new(cfg, &[3], now);
    let mut batch = Batch::new(32);
    let mut sent = 0u64;
    let mut in_flight = 0usize;
    let mut out = Outcome {
        completed: 0,
        failed: 0,
        handler_runs: HashMap::new(),
        responses: HashMap::new(),
        client_retx: 0,
        server_drops: Default::default(),
        client_drops: Default::default(),
        faults: (0, 0, 0),
    };
    let mut id_to_seq = HashMap::new();
    let step = Duration::from_micros(20);
    let deadline = t0 + Duration::from_secs(3600);
    while out.completed + out.failed < requests {
        assert!(now < deadline, "virtual time ran out: {} of {requests} done", out.completed + out.failed);
        while in_flight < concurrency && sent < requests {
            let size = sizes[(sent as usize * 7 + seed as usize) % sizes.len()];
            let req = Probe {
                path: format!("/k/{sent}"),
                tenant: (sent % 24) as u32,
                c: sent,
                body: vec![(sent % 251) as u8; size],
                ..Default::default()
            };
            let id = match client.send_req(now, 1, &req) {
                Ok(id) => id,
                Err(tern_qnp::ReqError::WindowFull { .. }) => break,
                Err(e) => panic!("{e}"),
            };
            id_to_seq.insert(id, sent);
            sent += 1;
            in_flight += 1;
        }
        while client.has_transmit() {
            client.poll_transmit(&pool, &mut batch);
            client_port.send(now, &mut batch).unwrap();
        }
        client_port.send(now, &mut batch).unwrap(); // releases held/delayed packets
        while server_port.recv(now, &mut batch).unwrap() > 0 {
            for p in batch.drain() {
                if let Some(inc) = server.handle_packet(now, p.peer(), p.data()) {
                    let req = Probe::decode_parts(inc.parts.iter()).expect("request decodes");
                    *out.handler_runs.entry(req.c).or_default() += 1;
                    assert_eq!(req.body.len(), sizes.iter().copied().find(|s| *s == req.body.len()).unwrap());
                    let handle = inc.handle;
                    let resp = Probe { c: req.c, note: req.path, body: req.body, ..Default::default() };
                    server.respond(handle, &resp).unwrap();
                }
                pool.put(p);
            }
        }
        while server.has_transmit() {
            server.poll_transmit(&pool, &mut batch);
            server_port.send(now, &mut batch).unwrap();
        }
        loop {
            let n = client_port.recv(now, &mut batch).unwrap();
            if n == 0 {
                break;
            }
            for p in batch.drain() {
                if let Some(r) = client.handle_packet(now, p.peer(), p.data()) {
                    let resp = Probe::decode_parts(r.parts.iter()).expect("response decodes");
                    let seq = id_to_seq[&r.req_id];
                    assert_eq!(resp.c, seq, "response matches its request");
                    assert_eq!(resp.note, format!("/k/{seq}"));
                    *out.responses.entry(seq).or_default() += 1;
                    out.completed += 1;
                    in_flight -= 1;
                }
                pool.put(p);
            }
        }
        now += step;
        client.handle_timeout(now);
        server.handle_timeout(now);
        while let Some(ClientEvent::Failed { .. }) = client.poll_event() {
            out.failed += 1;
            in_flight -= 1;
        }
    }
    out.client_retx = client.stats().retransmissions;
    out.server_drops = *server.stats();
    out.client_drops = *client.stats();
    let (tx, rx) = (client_port.tx_stats(), client_port.rx_stats());
    out.faults = (tx.dropped + rx.dropped, tx.duplicated + rx.duplicated, tx.reordered + rx.reordered);
    out
}

#[test]
fn hundred_thousand_requests_with_loss_duplication_and_reordering() {
    let faults =
        FaultConfig { loss: 0.10, duplicate: 0.05, reorder: 0.05, reorder_window: 4, seed: 7, ..Default::default() };
    // Mostly single-packet requests, some of two and three packets.
    let sizes = [16, 64, 100, 200, 500, 1000, 1200, 1800, 3000];
    let n = 100_000;
    let out = run(n, 64, faults, &sizes, 7);
    assert_eq!(out.completed, n, "every request completed");
    assert_eq!(out.failed, 0);
    assert_eq!(out.responses.len() as u64, n);
    assert!(out.responses.values().all(|&c| c == 1), "each response delivered exactly once");
    assert_eq!(out.handler_runs.len() as u64, n);
    assert!(out.handler_runs.values().all(|&c| c == 1), "each handler ran exactly once");
    // The faults really happened and the protocol really worked around them.
    let (dropped, duplicated, reordered) = out.faults;
    assert!(dropped > 10_000 && duplicated > 5_000 && reordered > 5_000, "{:?}", out.faults);
    assert!(out.client_retx > 10_000, "retransmissions {}", out.client_retx);
    assert!(out.server_drops.drops_of(DropReason::DuplicateRequest) > 1_000);
    assert!(out.server_drops.drops_of(DropReason::NoFirstPacket) > 0);
    assert!(out.client_drops.drops_of(DropReason::UnexpectedResponse) > 1_000);
}

#[test]
fn clean_link_needs_no_retransmission() {
    let out = run(5_000, 16, FaultConfig::default(), &[10, 2500], 1);
    assert_eq!(out.completed, 5_000);
    assert_eq!(out.client_retx, 0);
    assert_eq!(out.server_drops.total_drops(), 0);
}

#[test]
fn total_loss_fails_every_request_after_the_retry_limit() {
    let pool = Pool::new(64, 2048);
    let cfg = QnpConfig { max_retries: 3, initial_rto: Duration::from_millis(1), ..QnpConfig::default() };
    let server: std::net::SocketAddr = "127.0.0.1:9".parse().unwrap();
    let mut client = Client::new(cfg, 1, server, 0);
    let mut now = Instant::now();
    let id = client.send_req(now, 0, &Probe::default()).unwrap();
    let mut batch = Batch::new(32);
    let mut transmissions = 0;
    let mut failure = None;
    for _ in 0..10_000 {
        transmissions += client.poll_transmit(&pool, &mut batch);
        batch.recycle(&pool);
        now += Duration::from_micros(100);
        client.handle_timeout(now);
        if let Some(e) = client.poll_event() {
            failure = Some(e);
            break;
        }
    }
    assert_eq!(transmissions, 4, "the first send and three retransmissions");
    match failure {
        Some(ClientEvent::Failed { req_id, error }) => {
            assert_eq!(req_id, id);
            assert!(error.to_string().contains("3 retransmissions"), "{error}");
        }
        None => panic!("request never failed"),
    }
    assert_eq!(client.outstanding(), 0);
}

/// A client that restarts on the same address (or a new client on a reused ephemeral port)
/// starts from a fresh random id, possibly "before" the old client's ack floor: it is served,
/// not refused as stale. A late packet of the old client below its floor is still refused.
#[test]
fn a_new_client_on_a_reused_address_is_served() {
    let pool = Pool::new(256, 2048);
    let cfg = QnpConfig::default();
    let server_addr: std::net::SocketAddr = "127.0.0.1:7000".parse().unwrap();
    let peer: std::net::SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let now = Instant::now();
    let mut server = Server::new(cfg.clone(), &[3], now);
    let mut batch = Batch::new(32);
    // Sends `n` requests from `client` and answers them; returns the first request packet.
    let mut exchange = |client: &mut Client, server: &mut Server, n: u64| -> (Vec<u8>, u64) {
        let mut first = None;
        let mut served = 0;
        for c in 0..n {
            client.send_req(now, 1, &Probe { c, ..Default::default() }).unwrap();
        }
        client.poll_transmit(&pool, &mut batch);
        for p in batch.drain() {
            first.get_or_insert_with(|| p.data().to_vec());
            if let Some(inc) = server.handle_packet(now, peer, p.data()) {
                let handle = inc.handle;
                server.respond(handle, &Probe::default()).unwrap();
                served += 1;
            }
            pool.put(p);
        }
        server.poll_transmit(&pool, &mut batch);
        for p in batch.drain() {
            client.handle_packet(now, server_addr, p.data());
            pool.put(p);
        }
        (first.unwrap(), served)
    };
    let base = 0x8000_0000u32;
    let mut old = Client::new(cfg.clone(), 3, server_addr, base);
    let (old_first, served) = exchange(&mut old, &mut server, 5);
    assert_eq!(served, 5);
    // The old client's next request carries its floor, past the five answered ones.
    assert_eq!(exchange(&mut old, &mut server, 1).1, 1);
    // A late copy of the old client's first request is below its floor: refused.
    assert!(server.handle_packet(now, peer, &old_first).is_none());
    assert_eq!(server.stats().drops_of(DropReason::StaleRequest), 1);
    // A new client on the same address whose random ids start far before that floor.
    let mut new = Client::new(cfg, 3, server_addr, base.wrapping_sub(1 << 24));
    assert_eq!(exchange(&mut new, &mut server, 4).1, 4, "the new client's requests were refused");
    assert_eq!(server.stats().drops_of(DropReason::StaleRequest), 1);
}
