//! The RPC endpoint: every call answered once and every handler run once under loss,
//! duplication and reordering; a 2 MB message across; what a server refuses, counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tern_endpoint::{Answer, Header, Incoming, RpcClient, RpcServer, Status, max_body};
use tern_io::fault::{FaultConfig, FaultInjector};
use tern_io::{Pool, Port, mem};
use tern_qnp::{DropReason, QnpConfig};

/// A server thread answering each call with its body reversed, until `stop`; the handler runs
/// of each request id.
fn serve<P: Port>(mut server: RpcServer<P>, stop: &AtomicBool) -> HashMap<u64, u32> {
    let mut runs = HashMap::new();
    let mut calls: Vec<Incoming> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        calls.clear();
        server.recv(&mut calls, Duration::from_millis(5)).unwrap();
        for c in calls.drain(..) {
            *runs.entry(c.header.request_id).or_insert(0) += 1;
            let body: Vec<u8> = c.body.iter().rev().copied().collect();
            let status = if c.header.method == 1 { Status::Ok } else { Status::UnknownMethod };
            let error = if status == Status::Ok { String::new() } else { format!("no method {}", c.header.method) };
            server.reply(c.handle, c.header.request_id, status, &error, &body).unwrap();
        }
        server.flush().unwrap();
    }
    runs
}

/// Calls 1..=n (method 1; every tenth method 9, which does not exist), `window` outstanding,
/// until all are answered or failed; the answers by request id.
fn call_all<P: Port>(
    client: &mut RpcClient<P>,
    n: u64,
    window: usize,
    body: impl Fn(u64) -> Vec<u8>,
) -> HashMap<u64, Vec<Answer>> {
    let mut answers: HashMap<u64, Vec<Answer>> = HashMap::new();
    let (mut next, mut got) = (1u64, Vec::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while (answers.values().map(Vec::len).sum::<usize>() as u64) < n {
        assert!(Instant::now() < deadline, "calls still unanswered after 60 s");
        while next <= n && client.outstanding() < window {
            let method = if next % 10 == 0 { 9 } else { 1 };
            client.call(Header { method, class_id: 3, request_id: next, flags: 0 }, &body(next)).unwrap();
            next += 1;
        }
        client.flush().unwrap();
        got.clear();
        client.recv(&mut got, Duration::from_millis(5)).unwrap();
        for r in got.drain(..) {
            let a = r.unwrap_or_else(|f| panic!("a call failed: {f}"));
            answers.entry(a.request_id).or_default().push(a);
        }
    }
    answers
}

#[test]
fn every_call_is_answered_once_and_handled_once_under_loss_duplication_and_reordering() {
    let pool = Pool::new(8192, 2048);
    let (c, s) = mem::pair(&pool, 4096);
    let addr = s.local_addr();
    // Both directions of the client's port: 10% lost, 5% duplicated, 10% reordered.
    let faults = FaultConfig { loss: 0.10, duplicate: 0.05, reorder: 0.10, seed: 7, ..FaultConfig::default() };
    let c = FaultInjector::new(c, &pool, faults);
    let cfg =
        QnpConfig { initial_rto: Duration::from_millis(5), min_rto: Duration::from_millis(2), ..QnpConfig::default() };
    let server = RpcServer::new(s, &pool, cfg.clone());
    let mut client = RpcClient::new(c, &pool, cfg, addr);
    let stop = AtomicBool::new(false);
    let n = 400u64;
    // Bodies of 1 to 3 packets.
    let body = |i: u64| (0..(i * 37) % 4000).map(|k| (k ^ i) as u8).collect::<Vec<u8>>();
    let (answers, runs) = std::thread::scope(|scope| {
        let h = scope.spawn(|| serve(server, &stop));
        let answers = call_all(&mut client, n, 16, body);
        stop.store(true, Ordering::Relaxed);
        (answers, h.join().unwrap())
    });
    for i in 1..=n {
        let a = &answers[&i];
        assert_eq!(a.len(), 1, "call {i} answered {} times", a.len());
        assert_eq!(runs.get(&i), Some(&1), "call {i}'s handler ran {:?} times", runs.get(&i));
        if i % 10 == 0 {
            assert_eq!((a[0].status, a[0].error.as_str()), (Status::UnknownMethod, "no method 9"));
        } else {
            assert_eq!(a[0].status, Status::Ok);
            assert_eq!(a[0].body, body(i).into_iter().rev().collect::<Vec<u8>>());
        }
    }
    let faults = client.qnp().port().tx_stats();
    assert!(faults.dropped > 0 && faults.duplicated > 0 && faults.reordered > 0, "faults were injected: {faults:?}");
}

#[test]
fn a_2_mb_message_crosses_and_the_limit_is_stated() {
    // Loopback-sized packets (64 KiB buffers, a 65535-byte MTU).
    let pool = Pool::new(512, 65_600);
    let (c, s) = mem::pair(&pool, 512);
    let addr = s.local_addr();
    let cfg = QnpConfig { mtu: 65_535, ..QnpConfig::default() };
    let max = max_body(&cfg);
    assert!(max > 15 << 20 && max < 16 << 20, "255 packets of 65 KB: {max}");
    let server = RpcServer::new(s, &pool, cfg.clone());
    let mut client = RpcClient::new(c, &pool, cfg.clone(), addr);
    let stop = AtomicBool::new(false);
    let big = |_| (0..2_000_000u32).map(|k| (k * 7) as u8).collect::<Vec<u8>>();
    let answers = std::thread::scope(|scope| {
        let h = scope.spawn(|| serve(server, &stop));
        let a = call_all(&mut client, 1, 1, big);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        a
    });
    assert_eq!(answers[&1][0].body, big(1).into_iter().rev().collect::<Vec<u8>>());
    // Past the limit: refused at the sender, nothing sent.
    let too_big = vec![0u8; max + 1];
    let e = client.call(Header { method: 1, class_id: 1, request_id: 2, flags: 0 }, &too_big).unwrap_err();
    assert!(
        matches!(e, tern_qnp::ReqError::Segment(tern_qnp::SegmentError::TooManyPackets { packets: 256, .. })),
        "{e}"
    );
    assert_eq!(client.outstanding(), 0);
}

#[test]
fn a_server_drops_what_is_not_a_call_and_counts_it() {
    let pool = Pool::new(256, 2048);
    let (c, s) = mem::pair(&pool, 256);
    let addr = s.local_addr();
    let mut server = RpcServer::new(s, &pool, QnpConfig::default());
    // A QNP client of the same application sending another request type.
    let mut other = tern_qnp::runtime::QnpClient::new(c, &pool, QnpConfig::default(), tern_endpoint::APP_ID, addr);
    let ping = tern_qnp::apps::pingpong::Ping { seq: 1, payload: vec![1, 2, 3] };
    other.send_req(2, &ping).unwrap();
    other.flush().unwrap();
    let mut calls = Vec::new();
    assert_eq!(server.recv(&mut calls, Duration::from_millis(50)).unwrap(), 0);
    assert_eq!(server.qnp().core().stats().drops_of(DropReason::UnknownReqType), 1);
}

#[test]
fn statuses_keep_their_codes() {
    for s in Status::ALL {
        assert_eq!(Status::from_code(s.code()), s);
    }
    assert_eq!(Status::from_code(42), Status::Other(42));
    assert_eq!(Status::Other(42).code(), 42);
}

/// docs/rpc.md's status table is the code's: every status's name and code, in order.
#[test]
fn the_documented_statuses_are_the_codes() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rpc.md")).unwrap();
    let table: Vec<(String, u32)> = doc
        .split("| status | code | meaning |")
        .nth(1)
        .expect("the status table")
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].parse().unwrap())
        })
        .collect();
    let code: Vec<(String, u32)> = Status::ALL.iter().map(|s| (s.name().to_string(), s.code())).collect();
    assert_eq!(table, code);
}
