//! The paper's PingPong (QingNiao §5.2): a closed-loop client keeps `concurrency` requests
//! outstanding against a server that answers each Ping with a Pong of the same size. Requests
//! and responses are 128 bytes on the wire, headers included (64 bytes of Eth+IP+UDP+QNP and
//! 64 bytes of TLV payload).
//!
//! [`run`] uses the application API ([`crate::runtime`]) over kernel UDP on loopback, with
//! optional fault injection on the client side. [`bench`](fn@bench) runs QNP PingPong and a raw UDP echo
//! alternately over the same sockets, batching and threads, and reports the ratio.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tern_io::fault::{FaultConfig, FaultInjector};
use tern_io::udp::{UdpConfig, UdpPort};
use tern_io::{Batch, DEFAULT_BATCH, Pool, Port};
use tern_wire::tlv::Message;

use crate::apps::pingpong::{Ping, Pong};
use crate::runtime::{Completion, QnpClient, QnpServer, Request};
use crate::{Client, ClientEvent, DropReason, QnpConfig, Server};

/// PingPong's application id.
pub const APP_ID: u8 = 1;
/// Ping payload bytes that make a 128-byte frame: 64 header bytes + 11 (seq) + 3 + 50.
pub const PAYLOAD_FOR_128B: usize = 50;
/// Bytes on the wire of one Ping or Pong with [`PAYLOAD_FOR_128B`], headers included.
pub const FRAME_BYTES: usize = 128;

/// A PingPong run.
#[derive(Debug, Clone)]
pub struct PingPongConfig {
    /// Requests to complete.
    pub requests: u64,
    /// Requests outstanding at once (per client thread).
    pub concurrency: usize,
    /// Server threads (bound with `SO_REUSEPORT`).
    pub server_threads: usize,
    /// Client threads, each with its own socket.
    pub client_threads: usize,
    /// Ping payload bytes.
    pub payload: usize,
    /// Faults on the client's socket (both directions).
    pub faults: FaultConfig,
    /// Protocol configuration.
    pub qnp: QnpConfig,
    /// Server address (port 0 picks one).
    pub bind: SocketAddr,
    /// Give up when no request completes for this long.
    pub stall_timeout: Duration,
}

impl Default for PingPongConfig {
    fn default() -> Self {
        PingPongConfig {
            requests: 100_000,
            concurrency: 32,
            server_threads: 1,
            client_threads: 1,
            payload: PAYLOAD_FOR_128B,
            faults: FaultConfig::default(),
            qnp: QnpConfig::default(),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            stall_timeout: Duration::from_secs(10),
        }
    }
}

/// What a PingPong run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PingPongReport {
    /// Requests asked for.
    pub requests: u64,
    /// Requests whose response arrived.
    pub completed: u64,
    /// Requests that failed (retries exhausted, undecodable response, or stalled run).
    pub failed: u64,
    /// Responses delivered to the client for a request already completed (must be 0).
    pub duplicates_delivered: u64,
    /// Handler runs for a request already handled (must be 0).
    pub duplicate_handler_runs: u64,
    /// Requests the client retransmitted.
    pub retransmissions: u64,
    /// Of those, retransmissions sent after the copy the response answered (late, not lost).
    pub spurious_retransmissions: u64,
    /// Completed requests per second.
    pub throughput_rps: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// 99.9th percentile latency, µs.
    pub p999_us: f64,
    /// Wall time, s.
    pub elapsed_s: f64,
    /// Packets the fault injector dropped, duplicated and reordered.
    pub faults_injected: (u64, u64, u64),
    /// Non-zero drop counters of clients and servers, summed by reason.
    pub drops: Vec<(String, u64)>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

fn micros(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1000.0 }
}

struct Seen(Vec<AtomicU64>);

impl Seen {
    fn new(n: u64) -> Self {
        Seen((0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }
    /// Marks `i`; returns whether it was marked before. Out-of-range counts as seen.
    fn mark(&self, i: u64) -> bool {
        let Some(word) = self.0.get((i / 64) as usize) else { return true };
        let bit = 1u64 << (i % 64);
        word.fetch_or(bit, Ordering::Relaxed) & bit != 0
    }
}

fn add_drops(into: &mut Vec<(String, u64)>, stats: &crate::Stats) {
    for (name, n) in stats.drop_counts() {
        match into.iter_mut().find(|(k, _)| k == name) {
            Some((_, v)) => *v += n,
            None => into.push((name.to_string(), n)),
        }
    }
}

/// Runs PingPong over UDP on loopback: server threads and client threads in this process.
pub fn run(cfg: &PingPongConfig) -> io::Result<PingPongReport> {
    cfg.faults.validate().map_err(io::Error::other)?;
    if cfg.concurrency == 0 || cfg.server_threads == 0 || cfg.client_threads == 0 {
        return Err(io::Error::other("concurrency and thread counts must be at least 1"));
    }
    // One pool per thread, as a per-core mempool: buffers never bounce between cores.
    let new_pool = || Pool::new(8192, tern_io::DEFAULT_BUF_SIZE);
    let udp_cfg = UdpConfig { reuse_port: true, ..UdpConfig::default() };
    let first_pool = new_pool();
    let first = UdpPort::bind(cfg.bind, &first_pool, &udp_cfg)?;
    let server_addr = first.local_addr();
    let mut server_ports = vec![(first, first_pool)];
    for _ in 1..cfg.server_threads {
        let pool = new_pool();
        server_ports.push((UdpPort::bind(server_addr, &pool, &udp_cfg)?, pool));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let handled = Arc::new(Seen::new(cfg.requests));
    let dup_runs = Arc::new(AtomicU64::new(0));
    let mut servers = Vec::new();
    for (port, pool) in server_ports {
        let (stop, handled, dup_runs, qnp) = (stop.clone(), handled.clone(), dup_runs.clone(), cfg.qnp.clone());
        servers.push(thread::spawn(move || -> io::Result<crate::Stats> {
            let mut server = QnpServer::new(port, &pool, qnp, &[APP_ID]);
            let mut reqs: Vec<Request<Ping>> = Vec::with_capacity(DEFAULT_BATCH);
            while !stop.load(Ordering::Relaxed) {
                server.recv_req(&mut reqs, Duration::from_millis(5))?;
                for r in reqs.drain(..) {
                    if handled.mark(r.req.seq) {
                        dup_runs.fetch_add(1, Ordering::Relaxed);
                    }
                    let pong = Pong { seq: r.req.seq, payload: r.req.payload };
                    // A response always fits: it mirrors a request that did.
                    let _ = server.send_resp(r.handle, &pong);
                }
            }
            server.flush()?;
            Ok(*server.core().stats())
        }));
    }

    let completed_seen = Arc::new(Seen::new(cfg.requests));
    let started = Instant::now();
    let mut clients = Vec::new();
    for t in 0..cfg.client_threads {
        let share =
            cfg.requests / cfg.client_threads as u64 + u64::from((t as u64) < cfg.requests % cfg.client_threads as u64);
        let base: u64 = (0..t as u64)
            .map(|i| cfg.requests / cfg.client_threads as u64 + u64::from(i < cfg.requests % cfg.client_threads as u64))
            .sum();
        let pool = new_pool();
        let port = UdpPort::bind(SocketAddr::new(server_addr.ip(), 0), &pool, &UdpConfig::default())?;
        let faults = FaultConfig { seed: cfg.faults.seed.wrapping_add(t as u64), ..cfg.faults.clone() };
        let port = FaultInjector::new(port, &pool, faults);
        let (seen, c) = (completed_seen.clone(), cfg.clone());
        clients.push(thread::spawn(move || client_loop(port, &pool, &c, server_addr, base, share, &seen)));
    }
    let mut report = PingPongReport { requests: cfg.requests, ..Default::default() };
    let mut hist = histogram();
    let mut first_err = None;
    for c in clients {
        match c.join().map_err(|_| io::Error::other("client thread panicked"))? {
            Ok(r) => {
                report.completed += r.completed;
                report.failed += r.failed;
                report.duplicates_delivered += r.duplicates;
                report.retransmissions += r.stats.retransmissions;
                report.spurious_retransmissions += r.stats.spurious_retransmissions;
                report.faults_injected.0 += r.faults.0;
                report.faults_injected.1 += r.faults.1;
                report.faults_injected.2 += r.faults.2;
                add_drops(&mut report.drops, &r.stats);
                let _ = hist.add(&r.hist);
            }
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for s in servers {
        match s.join().map_err(|_| io::Error::other("server thread panicked"))? {
            Ok(stats) => add_drops(&mut report.drops, &stats),
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    report.duplicate_handler_runs = dup_runs.load(Ordering::Relaxed);
    report.elapsed_s = elapsed.as_secs_f64();
    report.throughput_rps = report.completed as f64 / elapsed.as_secs_f64().max(1e-9);
    report.p50_us = micros(&hist, 0.50);
    report.p99_us = micros(&hist, 0.99);
    report.p999_us = micros(&hist, 0.999);
    report.drops.sort();
    Ok(report)
}

struct ClientResult {
    completed: u64,
    failed: u64,
    duplicates: u64,
    stats: crate::Stats,
    hist: Histogram<u64>,
    faults: (u64, u64, u64),
}

fn client_loop(
    port: FaultInjector<UdpPort>,
    pool: &Pool,
    cfg: &PingPongConfig,
    server: SocketAddr,
    base: u64,
    share: u64,
    seen: &Seen,
) -> io::Result<ClientResult> {
    let mut client = QnpClient::new(port, pool, cfg.qnp.clone(), APP_ID, server);
    let mut hist = histogram();
    let payload = vec![0x5a; cfg.payload];
    let (mut sent, mut done, mut completed, mut failed, mut duplicates) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut out: Vec<Completion<Pong>> = Vec::with_capacity(DEFAULT_BATCH * 2);
    let mut last_progress = Instant::now();
    let mut ping = Ping { seq: 0, payload };
    while done < share {
        while sent - done < cfg.concurrency as u64 && sent < share {
            ping.seq = base + sent;
            client.send_req(0, &ping).map_err(io::Error::other)?;
            sent += 1;
        }
        client.recv_resp(&mut out, Duration::from_millis(10))?;
        if !out.is_empty() {
            last_progress = Instant::now();
        }
        for c in out.drain(..) {
            done += 1;
            match c {
                Completion::Response { resp, latency, .. } => {
                    if seen.mark(resp.seq) {
                        duplicates += 1;
                    } else {
                        completed += 1;
                    }
                    let _ = hist.record((latency.as_nanos() as u64).max(1));
                }
                Completion::Failed { .. } => failed += 1,
            }
        }
        if last_progress.elapsed() > cfg.stall_timeout {
            failed += share - done;
            break;
        }
    }
    let (tx, rx) = (client.port().tx_stats(), client.port().rx_stats());
    Ok(ClientResult {
        completed,
        failed,
        duplicates,
        stats: *client.core().stats(),
        hist,
        faults: (tx.dropped + rx.dropped, tx.duplicated + rx.duplicated, tx.reordered + rx.reordered),
    })
}

/// A `tern bench qnp` run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Rounds; each runs raw UDP echo then QNP PingPong (order alternates between rounds).
    pub rounds: usize,
    /// Length of each phase.
    pub phase: Duration,
    /// Requests outstanding at once.
    pub concurrency: usize,
    /// Ping payload bytes.
    pub payload: usize,
    /// Pin the server and client threads to cores 0 and 1.
    pub pin: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig { rounds: 5, phase: Duration::from_secs(1), concurrency: 32, payload: PAYLOAD_FOR_128B, pin: true }
    }
}

/// One phase's measurement.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseResult {
    /// Completed requests per second.
    pub rps: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Requests completed.
    pub completed: u64,
}

/// Both systems' phases, in run order.
#[derive(Debug, Clone, Default)]
pub struct BenchReport {
    /// QNP PingPong phases.
    pub qnp: Vec<PhaseResult>,
    /// Raw UDP echo phases.
    pub raw: Vec<PhaseResult>,
    /// Datagram bytes of a request (QNP header + payload; the raw echo sends the same size).
    pub datagram_bytes: usize,
}

const MODE_RAW: u8 = 0;
const MODE_QNP: u8 = 1;
const MODE_STOP: u8 = 2;

/// Runs QNP PingPong and a raw UDP echo alternately over the same two sockets, one client and
/// one server thread, batches of 32 both ways.
pub fn bench(cfg: &BenchConfig) -> io::Result<BenchReport> {
    // One pool per thread, as a per-core mempool: buffers never bounce between cores.
    let pool = Pool::new(8192, tern_io::DEFAULT_BUF_SIZE);
    let server_pool = Pool::new(8192, tern_io::DEFAULT_BUF_SIZE);
    let lo = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut server_port = UdpPort::bind(lo, &server_pool, &UdpConfig::default())?;
    let mut client_port = UdpPort::bind(lo, &pool, &UdpConfig::default())?;
    let server_addr = server_port.local_addr();
    let mode = Arc::new(AtomicU8::new(MODE_RAW));
    let mode_seen = Arc::new(AtomicU8::new(u8::MAX));
    let qnp_cfg = QnpConfig::default();
    // The raw echo sends the ping as one datagram from one buffer: it must fit there.
    let too_long = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "payload {} bytes: the raw echo's datagram (QNP header and ping with it) must fit a {}-byte buffer",
                cfg.payload,
                tern_io::DEFAULT_BUF_SIZE
            ),
        )
    };
    if cfg.payload > tern_io::DEFAULT_BUF_SIZE {
        return Err(too_long());
    }
    let datagram_bytes = {
        let mut buf = Vec::new();
        Ping { seq: 0, payload: vec![0; cfg.payload] }.encode(&mut buf);
        tern_wire::qnp::HEADER_LEN + buf.len()
    };
    if datagram_bytes > tern_io::DEFAULT_BUF_SIZE {
        return Err(too_long());
    }

    let server = {
        let (pool, mode, mode_seen, qnp_cfg, pin) =
            (server_pool, mode.clone(), mode_seen.clone(), qnp_cfg.clone(), cfg.pin);
        thread::spawn(move || -> io::Result<()> {
            if pin {
                tern_io::pin_to_core(0);
            }
            let mut core = Server::new(qnp_cfg, &[APP_ID], Instant::now());
            let mut rx = Batch::new(DEFAULT_BATCH);
            let mut tx = Batch::new(DEFAULT_BATCH);
            loop {
                let m = mode.load(Ordering::Acquire);
                mode_seen.store(m, Ordering::Release);
                let now = Instant::now();
                match m {
                    MODE_STOP => return Ok(()),
                    MODE_RAW => {
                        // Echo: every datagram goes back to its source as it is.
                        if server_port.recv(now, &mut rx)? > 0 {
                            server_port.send(now, &mut rx)?;
                        }
                    }
                    _ => {
                        server_port.recv(now, &mut rx)?;
                        for p in rx.drain() {
                            if let Some(inc) = core.handle_packet(now, p.peer(), p.data()) {
                                let handle = inc.handle;
                                match Ping::decode_parts(inc.parts.iter()) {
                                    Ok(ping) => {
                                        let _ = core.respond(handle, &Pong { seq: ping.seq, payload: ping.payload });
                                    }
                                    Err(_) => core.count_drop(DropReason::DecodeError),
                                }
                            }
                            pool.put(p);
                        }
                        while core.has_transmit() {
                            core.poll_transmit(&pool, &mut tx);
                            server_port.send(now, &mut tx)?;
                        }
                        core.handle_timeout(now);
                    }
                }
            }
        })
    };
    if cfg.pin {
        tern_io::pin_to_core(1);
    }
    let set_mode = |m: u8| {
        mode.store(m, Ordering::Release);
        while mode_seen.load(Ordering::Acquire) != m {
            std::hint::spin_loop();
        }
    };
    let mut report = BenchReport { datagram_bytes, ..Default::default() };
    let mut client = Client::new(qnp_cfg, APP_ID, server_addr, 1);
    let result = (|| -> io::Result<()> {
        for round in 0..cfg.rounds.max(1) {
            let order = if round % 2 == 0 { [MODE_RAW, MODE_QNP] } else { [MODE_QNP, MODE_RAW] };
            for m in order {
                set_mode(m);
                if m == MODE_RAW {
                    report.raw.push(raw_phase(&mut client_port, &pool, server_addr, cfg, datagram_bytes)?);
                } else {
                    report.qnp.push(qnp_phase(&mut client_port, &pool, &mut client, cfg)?);
                }
            }
        }
        Ok(())
    })();
    mode.store(MODE_STOP, Ordering::Release);
    server.join().map_err(|_| io::Error::other("server thread panicked"))??;
    result?;
    Ok(report)
}

fn finish_phase(completed: u64, elapsed: Duration, hist: &Histogram<u64>) -> PhaseResult {
    PhaseResult {
        rps: completed as f64 / elapsed.as_secs_f64().max(1e-9),
        p50_us: micros(hist, 0.5),
        p99_us: micros(hist, 0.99),
        completed,
    }
}

fn qnp_phase(port: &mut UdpPort, pool: &Pool, client: &mut Client, cfg: &BenchConfig) -> io::Result<PhaseResult> {
    let mut hist = histogram();
    let mut rx = Batch::new(DEFAULT_BATCH);
    let mut tx = Batch::new(DEFAULT_BATCH);
    let mut ping = Ping { seq: 0, payload: vec![0x5a; cfg.payload] };
    let (mut outstanding, mut completed) = (0usize, 0u64);
    let start = Instant::now();
    let end = start + cfg.phase;
    let mut now = start;
    // Measure until the phase ends, then drain what is in flight (not counted).
    while now < end || outstanding > 0 {
        while outstanding < cfg.concurrency && now < end {
            client.send_req(now, 0, &ping).map_err(io::Error::other)?;
            ping.seq += 1;
            outstanding += 1;
        }
        while client.has_transmit() {
            client.poll_transmit(pool, &mut tx);
            port.send(now, &mut tx)?;
        }
        port.recv(now, &mut rx)?;
        now = Instant::now();
        for p in rx.drain() {
            if let Some(r) = client.handle_packet(now, p.peer(), p.data()) {
                let latency = now.saturating_duration_since(r.sent_at);
                if Pong::decode_parts(r.parts.iter()).is_ok() && r.sent_at < end {
                    completed += 1;
                    let _ = hist.record((latency.as_nanos() as u64).max(1));
                }
                outstanding -= 1;
            }
            pool.put(p);
        }
        client.handle_timeout(now);
        while let Some(ClientEvent::Failed { .. }) = client.poll_event() {
            outstanding -= 1;
        }
        if now > end + Duration::from_secs(5) {
            return Err(io::Error::other("QNP phase did not drain within 5 s"));
        }
    }
    Ok(finish_phase(completed, cfg.phase, &hist))
}

fn raw_phase(
    port: &mut UdpPort,
    pool: &Pool,
    server: SocketAddr,
    cfg: &BenchConfig,
    size: usize,
) -> io::Result<PhaseResult> {
    let mut hist = histogram();
    let mut rx = Batch::new(DEFAULT_BATCH);
    let mut tx = Batch::new(DEFAULT_BATCH);
    // Slot i holds the send time of the datagram carrying i; lost datagrams are resent.
    let mut sent_at: Vec<Option<Instant>> = vec![None; cfg.concurrency];
    let mut seq = 0u64;
    let (mut outstanding, mut completed) = (0usize, 0u64);
    let start = Instant::now();
    let end = start + cfg.phase;
    let mut now = start;
    while now < end || outstanding > 0 {
        for (slot, t) in sent_at.iter_mut().enumerate() {
            let stale = t.is_some_and(|t| now.saturating_duration_since(t) > Duration::from_millis(200));
            if (t.is_none() && now < end) || stale {
                let mut p = pool.packet();
                let data = &mut p.buffer_mut()[..size];
                data.fill(0x5a);
                data[..8].copy_from_slice(&seq.to_be_bytes());
                data[8..16].copy_from_slice(&(slot as u64).to_be_bytes());
                p.set_len(size);
                p.set_peer(server);
                seq += 1;
                if t.is_none() {
                    outstanding += 1;
                }
                *t = Some(now);
                if let Some(p) = tx.push(p) {
                    port.send(now, &mut tx)?;
                    tx.push(p);
                }
            }
        }
        if !tx.is_empty() {
            port.send(now, &mut tx)?;
        }
        port.recv(now, &mut rx)?;
        now = Instant::now();
        for p in rx.drain() {
            let slot = p
                .data()
                .get(8..16)
                .map_or(usize::MAX, |b| u64::from_be_bytes(b.try_into().unwrap_or([0xff; 8])) as usize);
            if let Some(Some(t)) = sent_at.get(slot).copied() {
                sent_at[slot] = None;
                outstanding -= 1;
                if t < end {
                    completed += 1;
                    let _ = hist.record((now.saturating_duration_since(t).as_nanos() as u64).max(1));
                }
            }
            pool.put(p);
        }
        if now > end + Duration::from_secs(5) {
            return Err(io::Error::other("raw phase did not drain within 5 s"));
        }
    }
    Ok(finish_phase(completed, cfg.phase, &hist))
}

/// Median of a non-empty list of values (0 if empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A payload whose raw datagram would not fit a buffer is refused before any phase (it
    /// once ran past the buffer's end; the largest once ran out of memory).
    #[test]
    fn bench_refuses_a_payload_past_a_buffer() {
        for payload in [tern_io::DEFAULT_BUF_SIZE - 20, 70_000, usize::MAX] {
            let cfg = BenchConfig { payload, pin: false, ..BenchConfig::default() };
            let e = bench(&cfg).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                e.contains(&format!("payload {payload} bytes")) && e.contains("2048-byte buffer"),
                "{payload}: {e}"
            );
        }
    }

    #[test]
    fn ping_is_a_128_byte_frame() {
        let mut buf = Vec::new();
        Ping { seq: 1, payload: vec![0; PAYLOAD_FOR_128B] }.encode(&mut buf);
        assert_eq!(tern_wire::ETH_IPV4_UDP_LEN + tern_wire::qnp::HEADER_LEN + buf.len(), FRAME_BYTES);
    }

    #[test]
    fn pingpong_over_loopback_udp() {
        let cfg = PingPongConfig { requests: 2_000, concurrency: 8, ..Default::default() };
        let r = run(&cfg).unwrap();
        assert_eq!((r.completed, r.failed, r.duplicates_delivered, r.duplicate_handler_runs), (2_000, 0, 0, 0));
        assert!(r.p50_us > 0.0 && r.p99_us >= r.p50_us);
    }

    #[test]
    fn pingpong_over_loopback_udp_with_faults() {
        let faults = FaultConfig { loss: 0.1, duplicate: 0.05, reorder: 0.05, seed: 3, ..Default::default() };
        let qnp = QnpConfig { max_retries: 20, ..QnpConfig::default() };
        let cfg =
            PingPongConfig { requests: 2_000, concurrency: 16, faults, qnp, server_threads: 2, ..Default::default() };
        let r = run(&cfg).unwrap();
        assert_eq!((r.completed, r.failed, r.duplicates_delivered, r.duplicate_handler_runs), (2_000, 0, 0, 0));
        assert!(r.retransmissions > 0 && r.faults_injected.0 > 0);
    }

    #[test]
    fn bench_runs_both_systems() {
        let cfg = BenchConfig {
            rounds: 2,
            phase: Duration::from_millis(100),
            concurrency: 4,
            pin: false,
            ..Default::default()
        };
        let r = bench(&cfg).unwrap();
        assert_eq!((r.qnp.len(), r.raw.len()), (2, 2));
        assert!(r.qnp.iter().chain(&r.raw).all(|p| p.completed > 0 && p.rps > 0.0));
        assert_eq!(r.datagram_bytes, 22 + 64);
    }

    #[test]
    fn median_of_values() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }
}
