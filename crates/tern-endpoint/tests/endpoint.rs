//! The RPC endpoint: every call answered once and every handler run once under loss,
//! duplication and reordering; a 2 MB message across; what a server refuses, counted; a call
//! and its reply byte for byte as docs/rpc.md lays them out.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tern_endpoint::{
    Answer, CallError, Header, Incoming, MAX_MESSAGE, PartStats, RpcClient, RpcServer, Status, max_body,
};
use tern_io::fault::{FaultConfig, FaultInjector};
use tern_io::{Pool, Port, mem};
use tern_qnp::{DropReason, QnpConfig};

/// Sets its flag when dropped: a test thread that panics stops its server thread.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

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

/// A server and a client whose port, both ways, loses 10% of packets, duplicates 5% and
/// reorders 10% (fault seed `seed`), with short retransmission timers and room for 50
/// retransmissions (a thread the host does not run for a while must not fail a call: what is
/// checked is that each is answered once).
fn lossy(pool: &Pool, seed: u64) -> (RpcServer<mem::MemPort>, RpcClient<FaultInjector<mem::MemPort>>) {
    let (c, s) = mem::pair(pool, 4096);
    let addr = s.local_addr();
    let faults = FaultConfig { loss: 0.10, duplicate: 0.05, reorder: 0.10, seed, ..FaultConfig::default() };
    let c = FaultInjector::new(c, pool, faults);
    let cfg = QnpConfig {
        initial_rto: Duration::from_millis(5),
        min_rto: Duration::from_millis(2),
        max_retries: 50,
        ..QnpConfig::default()
    };
    (RpcServer::new(s, pool, cfg.clone()), RpcClient::new(c, pool, cfg, addr))
}

#[test]
fn every_call_is_answered_once_and_handled_once_under_loss_duplication_and_reordering() {
    let pool = Pool::new(8192, 2048);
    let (server, mut client) = lossy(&pool, 7);
    let stop = AtomicBool::new(false);
    let n = 400u64;
    // Bodies of 1 to 3 packets.
    let body = |i: u64| (0..(i * 37) % 4000).map(|k| (k ^ i) as u8).collect::<Vec<u8>>();
    let (answers, runs) = std::thread::scope(|scope| {
        let h = scope.spawn(|| serve(server, &stop));
        // A panic below stops the server too, so the scope ends.
        let _stop = StopOnDrop(&stop);
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
fn a_2_mb_message_crosses_in_one_request() {
    let pool = Pool::new(1024, 65_600);
    let (server, mut client, cfg) = loopback_pair(&pool);
    let max = max_body(&cfg);
    assert!(max > 15 << 20 && max < 16 << 20, "255 packets of 65 KB: {max}");
    let big = |_| (0..2_000_000u32).map(|k| (k * 7) as u8).collect::<Vec<u8>>();
    let (answers, parts) = call_once(server, &mut client, big);
    assert_eq!(answers[&1][0].body, big(1).into_iter().rev().collect::<Vec<u8>>());
    assert_eq!(parts, PartStats::default(), "no parts");
}

/// [`serve`], returning the server's part counters.
fn serve_parts<P: Port>(server: RpcServer<P>, stop: &AtomicBool) -> PartStats {
    let mut runs = HashMap::new();
    let mut server = server;
    let mut calls: Vec<Incoming> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        calls.clear();
        server.recv(&mut calls, Duration::from_millis(5)).unwrap();
        for c in calls.drain(..) {
            *runs.entry(c.header.request_id).or_insert(0u32) += 1;
            assert_eq!(runs[&c.header.request_id], 1, "a handler ran twice");
            let body: Vec<u8> = c.body.iter().rev().copied().collect();
            server.reply(c.handle, c.header.request_id, Status::Ok, "", &body).unwrap();
        }
        server.flush().unwrap();
    }
    assert_eq!(server.held_bytes(), 0, "nothing held once every call is answered");
    server.part_stats()
}

/// One call of `body(1)` from `client` to `server` (on a thread of its own, with
/// [`serve_parts`]): its answers by request id and the server's part counters.
fn call_once<P: Port + Send, Q: Port>(
    server: RpcServer<P>,
    client: &mut RpcClient<Q>,
    body: impl Fn(u64) -> Vec<u8>,
) -> (HashMap<u64, Vec<Answer>>, PartStats) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let h = scope.spawn(|| serve_parts(server, &stop));
        // A panic below stops the server too, so the scope ends.
        let _stop = StopOnDrop(&stop);
        let a = call_all(client, 1, 1, body);
        stop.store(true, Ordering::Relaxed);
        (a, h.join().unwrap())
    })
}

/// A server and client over an in-memory pair with loopback-sized packets (64 KiB buffers, a
/// 65535-byte MTU).
fn loopback_pair(pool: &Pool) -> (RpcServer<mem::MemPort>, RpcClient<mem::MemPort>, QnpConfig) {
    let (c, s) = mem::pair(pool, 1024);
    let addr = s.local_addr();
    let cfg = QnpConfig { mtu: 65_535, ..QnpConfig::default() };
    (RpcServer::new(s, pool, cfg.clone()), RpcClient::new(c, pool, cfg.clone(), addr), cfg)
}

/// A 16 MiB call and its 16 MiB reply (more than 255 packets of 64 KiB) cross in parts; a
/// body over 16 MiB, or flags of the endpoint's own, are refused at the caller.
#[test]
fn a_16_mib_message_crosses_in_parts_and_the_limit_is_stated() {
    let pool = Pool::new(1024, 65_600);
    let (server, mut client, _) = loopback_pair(&pool);
    let big = |_| (0..MAX_MESSAGE as u32).map(|k| (k * 7 + (k >> 16)) as u8).collect::<Vec<u8>>();
    let (answers, parts) = call_once(server, &mut client, big);
    let a = &answers[&1][0];
    assert_eq!(a.status, Status::Ok);
    assert!(a.body.len() == MAX_MESSAGE && a.body.iter().rev().copied().eq(big(1)), "the reply reversed");
    assert_eq!((parts.call_parts, parts.calls_assembled), (1, 1), "{parts:?}");
    assert_eq!((parts.replies_in_parts, parts.reply_parts), (1, 1), "{parts:?}");
    let e = client.call(Header { method: 1, class_id: 1, request_id: 2, flags: 0 }, &vec![0; MAX_MESSAGE + 1]);
    assert!(matches!(e, Err(CallError::TooLarge { len }) if len == MAX_MESSAGE + 1), "{e:?}");
    let e = client.call(Header { method: 1, class_id: 1, request_id: 3, flags: tern_endpoint::NEXT }, b"x");
    assert!(matches!(e, Err(CallError::ReservedFlags(2))), "{e:?}");
    assert_eq!(client.outstanding(), 0);
}

/// Calls of 1 MB in parts of some 369 KB (1500-byte packets) and their 1 MB replies, through
/// 10% loss, 5% duplication and reordering: each answered once, each handler run once.
#[test]
fn calls_in_parts_are_answered_once_under_loss() {
    let pool = Pool::new(8192, 2048);
    let (server, mut client) = lossy(&pool, 11);
    let stop = AtomicBool::new(false);
    let n = 6u64;
    let body = |i: u64| (0..1_000_000 + i as u32).map(|k| (k ^ i as u32) as u8).collect::<Vec<u8>>();
    let (answers, parts) = std::thread::scope(|scope| {
        let h = scope.spawn(|| serve_parts(server, &stop));
        // A panic below stops the server too, so the scope ends.
        let _stop = StopOnDrop(&stop);
        let mut answers: HashMap<u64, Vec<Answer>> = HashMap::new();
        let mut got = Vec::new();
        for i in 1..=n {
            client.call(Header { method: 1, class_id: 3, request_id: i, flags: 0 }, &body(i)).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while (answers.values().map(Vec::len).sum::<usize>() as u64) < n {
            assert!(Instant::now() < deadline, "calls unanswered after 60 s");
            client.flush().unwrap();
            got.clear();
            client.recv(&mut got, Duration::from_millis(5)).unwrap();
            for r in got.drain(..) {
                let a = r.unwrap_or_else(|f| panic!("a call failed: {f}"));
                answers.entry(a.request_id).or_default().push(a);
            }
        }
        stop.store(true, Ordering::Relaxed);
        (answers, h.join().unwrap())
    });
    for i in 1..=n {
        let a = &answers[&i];
        assert_eq!(a.len(), 1, "call {i} answered {} times", a.len());
        assert_eq!(a[0].status, Status::Ok);
        assert!(a[0].body.iter().rev().copied().eq(body(i)), "call {i}'s reply");
    }
    // Three parts a call, three a reply.
    assert_eq!((parts.call_parts, parts.calls_assembled), (2 * n, n), "{parts:?}");
    assert_eq!((parts.replies_in_parts, parts.reply_parts), (n, 2 * n), "{parts:?}");
    assert!(client.qnp().port().tx_stats().dropped > 0, "faults were injected");
}

/// What a hostile client may send of parts: more than 16 MiB of them, parts that change the
/// method, a request for a reply part nobody holds, both flags at once, and more held calls
/// than the server has room for — each refused with its status and counted, none delivered.
#[test]
fn hostile_parts_are_refused_and_counted() {
    use tern_endpoint::frames::{Call, Reply};
    use tern_endpoint::{HELD_LIMIT, MORE, NEXT};
    let pool = Pool::new(2048, 65_600);
    let (c, s) = mem::pair(&pool, 2048);
    let addr = s.local_addr();
    let cfg = QnpConfig { mtu: 65_535, ..QnpConfig::default() };
    let mut server = RpcServer::new(s, &pool, cfg.clone());
    let mut raw = tern_qnp::runtime::QnpClient::new(c, &pool, cfg.clone(), tern_endpoint::APP_ID, addr);
    let part = max_body(&cfg);
    let mut send = |request_id: u64, method: u32, flags: u32, len: usize| -> Reply {
        let call = Call { method, class_id: 1, request_id, flags, body: vec![7; len] };
        raw.send_req(tern_endpoint::CALL, &call).unwrap();
        raw.flush().unwrap();
        let mut calls = Vec::new();
        let mut got = Vec::new();
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < Duration::from_secs(20), "no reply");
            server.recv(&mut calls, Duration::from_millis(1)).unwrap();
            assert!(calls.is_empty(), "nothing hostile is delivered: {:?}", calls.len());
            server.flush().unwrap();
            raw.recv_resp::<Reply>(&mut got, Duration::from_millis(1)).unwrap();
            if let Some(tern_qnp::runtime::Completion::Response { resp, .. }) = got.pop() {
                return resp;
            }
        }
    };
    // A part taken, then a second of another method.
    assert_eq!((send(1, 1, MORE, 10).status, send(1, 2, MORE, 10).status), (0, Status::BadRequest.code()));
    // Parts past 16 MiB: a full one is taken (acknowledged: send more), a second is refused.
    assert_eq!(send(2, 1, MORE, part).flags, MORE);
    let r = send(2, 1, 0, part);
    assert_eq!(r.status, Status::BadRequest.code(), "{}", r.error);
    assert!(r.error.contains("more than 16777216 bytes"), "{}", r.error);
    // A reply part nobody holds; both flags.
    assert_eq!(send(3, 1, NEXT, 0).status, Status::Internal.code());
    assert_eq!(send(4, 1, MORE | NEXT, 0).status, Status::BadRequest.code());
    // Held calls up to the limit, then overloaded.
    let fill = HELD_LIMIT / part;
    for k in 0..fill as u64 {
        assert_eq!(send(10 + k, 1, MORE, part).status, Status::Ok.code(), "held call {k}");
    }
    assert_eq!(send(99, 1, MORE, part).status, Status::Overloaded.code());
    assert!(server.held_bytes() <= HELD_LIMIT);
    let p = server.part_stats();
    assert_eq!((p.mismatched, p.too_large, p.stray_next, p.bad_flags, p.over_budget), (1, 1, 1, 1, 1), "{p:?}");
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

/// The same over real UDP on loopback (65535-byte packets, the kernel's socket buffers):
/// a 16 MiB call and reply cross.
#[test]
fn a_16_mib_message_crosses_udp_loopback() {
    use tern_io::udp::{UdpConfig, UdpPort};
    let pool = Pool::new(1024, 65_600);
    let udp = UdpConfig::default();
    let s = UdpPort::bind("127.0.0.1:0".parse().unwrap(), &pool, &udp).unwrap();
    let c = UdpPort::bind("127.0.0.1:0".parse().unwrap(), &pool, &udp).unwrap();
    let addr = s.local_addr();
    // The kernel drops what overflows a socket buffer; room for 50 retransmissions, so a busy
    // host does not fail the call.
    let cfg = QnpConfig { mtu: 65_535, max_retries: 50, ..QnpConfig::default() };
    let server = RpcServer::new(s, &pool, cfg.clone());
    let mut client = RpcClient::new(c, &pool, cfg, addr);
    let big = |_| (0..MAX_MESSAGE as u32).map(|k| (k ^ (k >> 11)) as u8).collect::<Vec<u8>>();
    let t0 = Instant::now();
    let (answers, _) = call_once(server, &mut client, big);
    let a = &answers[&1][0];
    assert_eq!(a.status, Status::Ok);
    assert!(a.body.iter().rev().copied().eq(big(1)), "the reply reversed");
    eprintln!("16 MiB each way over UDP loopback in {:?}", t0.elapsed());
}

/// A call and a reply as docs/rpc.md lays them out, built and read from the page alone: a call is
/// QNP request type 1 of application 7 whose payload is TLV records (a field number, a 2-byte
/// big-endian length, the value), `method` first; the reply is the records of the reply table.
#[test]
fn a_call_built_from_the_docs_is_served_and_its_reply_reads_as_they_say() {
    /// A payload of records written by hand.
    #[derive(Debug)]
    struct Records(Vec<u8>);
    impl tern_wire::tlv::Message for Records {
        const NAME: &'static str = "Call";
        const DISPATCH_FIELDS: &'static [u8] = &[1];
        fn encoded_len(&self) -> usize {
            self.0.len()
        }
        fn dispatch_len(&self) -> usize {
            7 // `method`: field 1, length 4, four bytes
        }
        fn encode(&self, buf: &mut Vec<u8>) {
            buf.extend_from_slice(&self.0);
        }
        fn decode_parts<'a, I: IntoIterator<Item = &'a [u8]>>(parts: I) -> Result<Self, tern_wire::tlv::DecodeError> {
            Ok(Records(parts.into_iter().flatten().copied().collect()))
        }
    }
    fn record(out: &mut Vec<u8>, field: u8, value: &[u8]) {
        out.push(field);
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
        out.extend_from_slice(value);
    }
    let pool = Pool::new(256, 2048);
    let (c, s) = mem::pair(&pool, 256);
    let addr = s.local_addr();
    let mut server = RpcServer::new(s, &pool, QnpConfig::default());
    let mut client = tern_qnp::runtime::QnpClient::new(c, &pool, QnpConfig::default(), 7, addr);
    let mut call = Vec::new();
    record(&mut call, 1, &9u32.to_be_bytes()); // method
    record(&mut call, 2, &3u32.to_be_bytes()); // class_id
    record(&mut call, 3, &0x0102_0304_0506_0708u64.to_be_bytes()); // request_id
    record(&mut call, 4, &0x100u32.to_be_bytes()); // flags: a bit of the caller's own
    record(&mut call, 5, b"hello"); // body
    client.send_req(1, &Records(call)).unwrap();
    client.flush().unwrap();
    let mut calls = Vec::new();
    let t0 = Instant::now();
    while calls.is_empty() && t0.elapsed() < Duration::from_secs(5) {
        server.recv(&mut calls, Duration::from_millis(20)).unwrap();
    }
    let Incoming { handle, header, body } = calls.pop().expect("the call arrives");
    assert_eq!(header, Header { method: 9, class_id: 3, request_id: 0x0102_0304_0506_0708, flags: 0x100 });
    assert_eq!(body, b"hello");
    server.reply(handle, header.request_id, Status::UnknownClass, "no class 3", b"").unwrap();
    server.flush().unwrap();
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.is_empty() && t0.elapsed() < Duration::from_secs(5) {
        client.recv_resp::<Records>(&mut got, Duration::from_millis(20)).unwrap();
    }
    let Some(tern_qnp::runtime::Completion::Response { resp: Records(reply), .. }) = got.pop() else {
        panic!("no reply")
    };
    // request_id (1), status (2: `unknown_class` is 3), flags (3), error (4), body (5).
    let mut want = Vec::new();
    record(&mut want, 1, &0x0102_0304_0506_0708u64.to_be_bytes());
    record(&mut want, 2, &3u32.to_be_bytes());
    record(&mut want, 3, &0u32.to_be_bytes());
    record(&mut want, 4, b"no class 3");
    record(&mut want, 5, b"");
    assert_eq!(reply, want);
}
