//! `tern switch server`: one remote-handler server of a CLIP switch (docs/clip.md, "Running a
//! switch and its servers"): it answers the requests that reach its port in place and sends
//! them back; its control endpoint gives the switch's controller its live flows (before a
//! group change) and answers heartbeats.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use clap::Args;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use serde_json::json;
use tern_io::{Batch, Pool};
use tern_switch::program::Program;
use tern_switch::server::{self, Server, ServerDrop, ServerStats};

use crate::CmdResult;
use crate::metrics::{counter, counter_family, gauge, label};
use crate::ports::FramePort;

/// Options of `tern switch server`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The switch program whose remote handler this server runs (TOML).
    pub program: PathBuf,
    /// Its port to the switch: `afpacket:IFNAME` or `afxdp:IFNAME` (whole frames on an
    /// interface; root; docs/clip.md says which) or `udp:BIND=PEER` (each datagram's payload one Ethernet frame, taken from PEER alone); either may go on with
    /// injected faults, `,loss=P[,duplicate=P][,reorder=P][,seed=N][,dir=tx|rx|both]`.
    #[arg(long)]
    pub port: String,
    /// This server's index in the switch's group (its handler's own share: SNAT hands out
    /// 192.0.2.INDEX+1; TCP retransmission detection the register indices INDEX, INDEX+16, ...).
    #[arg(long, default_value_t = 0)]
    pub index: u16,
    /// Serve the control endpoint here: Prometheus `/metrics` (tern_switch_server_*), `/ready`
    /// (the switch's heartbeat), `/flows` (its live flows, JSON), `/entries` (its handler's
    /// table, JSON), `/handback` (the entries it adopted from other servers, as records,
    /// JSON), `POST /replicas` (another server's entries) and `POST /takeover` (the switch
    /// failed another server over to this one).
    #[arg(long)]
    pub control: Option<SocketAddr>,
    /// Its buddy's control endpoint: the entries its handler makes are sent there (`POST
    /// /replicas`) before the responses that tell of them leave, so that the switch can fail
    /// this server over to the buddy with its state (the switch's `buddies` must agree). What
    /// the buddy does not take waits and is sent again every 100 ms; a buddy found restarted
    /// is sent every entry of this server's own again. On start (a server that comes back
    /// after a failover) it first takes back from the buddy (`GET /handback`) the entries
    /// holding its public pairs or registers, waiting up to a second for the answer, and asks
    /// again every second while it holds any.
    #[arg(long)]
    pub buddy: Option<SocketAddr>,
    /// A flow is live until this many ms pass without its packets, or longer while the
    /// handler's state for it lives (SNAT: the connection, until its timeout).
    #[arg(long, default_value_t = 10_000)]
    pub idle_ms: u64,
    /// Answer with BUSY set after this many full receive batches in a row (its queue is
    /// backing up), until a batch comes back short.
    #[arg(long, default_value_t = 4)]
    pub busy_batches: u32,
    /// CLIP's EtherType (hex or decimal).
    #[arg(long, default_value = "0x88B5", value_parser = tern_switch::config::parse_ethertype)]
    pub ethertype: u16,
    /// Stop after this many seconds (more than 0, at most a year) [default: run until SIGINT or
    /// SIGTERM, which stop it cleanly with its summary].
    #[arg(long, value_parser = crate::signals::duration_secs)]
    pub duration: Option<f64>,
    /// Print a one-line progress report to stderr every this many seconds (0: none): requests,
    /// responses, drops, entries, and the rate of requests.
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval: f64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What the control endpoint asks the data loop.
enum Ask {
    Flows(mpsc::Sender<Vec<u64>>),
    Entries(mpsc::Sender<(usize, Vec<(String, String)>)>),
    HandBack(mpsc::Sender<Vec<Vec<u8>>>),
}

/// What asking the buddy for its hand-back gave: the records, or why none came.
type HandBackAnswer = Result<Vec<Vec<u8>>, String>;

/// How often a server that holds entries its buddy handed back asks again.
const HANDBACK_EVERY: Duration = Duration::from_secs(1);

/// What the buddy's hand-backs came to: answers taken, their records refused, asks with no
/// answer.
#[derive(Debug, Default, Clone, Copy)]
struct HandBacks {
    taken: u64,
    refused: u64,
    failed: u64,
}

impl HandBacks {
    /// Takes one ask's outcome into `srv` at `now_ns`.
    fn take(&mut self, srv: &mut Server, now_ns: u64, answer: HandBackAnswer) {
        match answer {
            Ok(records) => {
                self.refused += srv.take_back(now_ns, &records) as u64;
                self.taken += 1;
            }
            Err(_) => self.failed += 1,
        }
    }
}

/// The records of a `/handback` answer.
fn decode_handback(body: &str) -> Result<Vec<Vec<u8>>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    let rows = v["records"].as_array().ok_or("no `records` list")?;
    rows.iter()
        .map(|r| r.as_str().and_then(crate::frames::unhex).ok_or_else(|| format!("record {r}: not a hex string")))
        .collect()
}

/// The server's counters, published by the data loop.
#[derive(Debug, Default, Clone)]
struct Snap {
    stats: ServerStats,
    live: usize,
    entries: usize,
    /// The handler's own counters (SNAT's translations and drops, TCP retransmission
    /// detection's directions and retransmissions).
    handler: Vec<(&'static str, u64)>,
    busy: bool,
    /// Replicas sent to the buddy, refused there or failed to send; taken from another server.
    replicas_sent: u64,
    replicas_failed: u64,
    replicas_pending: usize,
    resyncs: u64,
    takeovers: u64,
    replicas_adopted: u64,
    /// The buddy's hand-backs, and the entries held because of them.
    handbacks: HandBacks,
    held_back: usize,
}

/// The most records one `POST /replicas` carries; and a post's body stays within the 1 MiB a
/// request may carry (`tern_io::http::MAX_BODY_BYTES`: the buddy refuses more, 413).
const RECORDS_A_POST: usize = 40_000;

/// Where the post of `records` from `at` ends: at most [`RECORDS_A_POST`] records and
/// `MAX_BODY_BYTES` encoded (each record 2 bytes of length and its bytes), and at least one.
fn post_end(records: &[Vec<u8>], at: usize) -> usize {
    let mut bytes = 0;
    let mut end = at;
    for r in records.iter().skip(at).take(RECORDS_A_POST) {
        bytes += 2 + r.len();
        if bytes > tern_io::http::MAX_BODY_BYTES && end > at {
            break;
        }
        end += 1;
    }
    end
}

/// A server's side of replication: what it sent its buddy, and who the buddy is.
#[derive(Debug, Default)]
struct Replicator {
    /// Records the buddy took; records dropped unsent (more waiting than a server keeps).
    sent: u64,
    dropped: u64,
    /// Times the buddy was found restarted (and sent this server's own entries again), and
    /// takeovers (the switch failed another server over to this one).
    resyncs: u64,
    takeovers: u64,
    /// The buddy's run id, from its last answer.
    boot: Option<u64>,
    /// The last try, and when the last that failed was (the batches' own sends wait 100 ms
    /// after one: a buddy that is down costs each batch no time).
    last: Option<Instant>,
    failed_at: Option<Instant>,
}

impl Replicator {
    /// Whether a send is due outside a batch: records waiting, 100 ms after the last try (a
    /// buddy that did not answer is tried again every 100 ms), or a second without any (its
    /// run id checked).
    fn due(&self, now: Instant, pending: usize) -> bool {
        let since = self.last.map_or(Duration::MAX, |t| now.duration_since(t));
        (pending > 0 && since >= Duration::from_millis(100)) || since >= Duration::from_secs(1)
    }

    /// Sends the server's waiting records to `buddy` (in posts of at most [`RECORDS_A_POST`]),
    /// an empty post if there are none; what the buddy does not take is put back. A buddy
    /// whose run id changed restarted: the server's own entries go to it again.
    fn send(&mut self, agent: &ureq::Agent, buddy: SocketAddr, srv: &mut Server, now: Instant, now_ns: u64) {
        self.last = Some(now);
        let mut records = srv.take_replicas();
        let url = format!("http://{buddy}/replicas");
        let mut at = 0;
        loop {
            let end = post_end(&records, at);
            let answer = agent
                .post(&url)
                .send(&encode_records(&records[at..end])[..])
                .ok()
                .filter(|r| r.status().as_u16() == 200)
                .and_then(|r| r.into_body().read_to_string().ok())
                .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok());
            let Some(v) = answer else {
                self.failed_at = Some(now);
                self.dropped += srv.put_back_replicas(records.split_off(at)) as u64;
                return;
            };
            self.failed_at = None;
            self.sent += (end - at) as u64;
            let boot = v["boot"].as_u64();
            if boot.is_some() && self.boot.is_some() && boot != self.boot {
                self.resyncs += 1;
                srv.resync(now_ns);
            }
            if boot.is_some() {
                self.boot = boot;
            }
            at = end;
            if at >= records.len() {
                return;
            }
        }
    }
}

/// Records in a body: each a 2-byte length (big-endian) and the record.
fn encode_records(records: &[Vec<u8>]) -> Vec<u8> {
    let mut b = Vec::new();
    for r in records {
        b.extend_from_slice(&(r.len() as u16).to_be_bytes());
        b.extend_from_slice(r);
    }
    b
}

fn decode_records(mut b: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    while !b.is_empty() {
        if b.len() < 2 {
            return Err("a record's length is cut short".into());
        }
        let n = usize::from(u16::from_be_bytes([b[0], b[1]]));
        let r = b.get(2..2 + n).ok_or("a record is cut short")?;
        out.push(r.to_vec());
        b = &b[2 + n..];
    }
    Ok(out)
}

#[derive(Debug)]
struct ServerCollector(Arc<Mutex<Snap>>);

impl Collector for ServerCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.0.lock().map(|s| s.clone()).unwrap_or_default();
        counter(&mut enc, "tern_switch_server_requests", "Requests taken from the switch.", s.stats.requests)?;
        counter(&mut enc, "tern_switch_server_responses", "Responses sent back.", s.stats.responses)?;
        counter(
            &mut enc,
            "tern_switch_server_busy_responses",
            "Responses sent with BUSY set.",
            s.stats.busy_responses,
        )?;
        let drops: Vec<_> =
            ServerDrop::ALL.iter().zip(s.stats.drops).map(|(d, v)| (label("reason", d.name()), v)).collect();
        counter_family(&mut enc, "tern_switch_server_drops", "Frames dropped, by reason.", &drops)?;
        gauge(&mut enc, "tern_switch_server_live_flows", "Flows live now.", s.live as i64)?;
        gauge(
            &mut enc,
            "tern_switch_server_entries",
            "Entries the handler holds (its mirrored table).",
            s.entries as i64,
        )?;
        gauge(&mut enc, "tern_switch_server_busy", "1 while answering with BUSY.", i64::from(s.busy))?;
        let handler: Vec<_> = s.handler.iter().map(|&(n, v)| (label("counter", n), v)).collect();
        counter_family(
            &mut enc,
            "tern_switch_server_handler",
            "The remote handler's own counters, by name (docs/clip.md: SNAT, TCP retransmission detection).",
            &handler,
        )?;
        counter(
            &mut enc,
            "tern_switch_server_replicas_sent",
            "Entries sent to the buddy before their responses left.",
            s.replicas_sent,
        )?;
        counter(
            &mut enc,
            "tern_switch_server_replicas_failed",
            "Entries dropped unsent: more waiting for the buddy than a server keeps (1,048,576).",
            s.replicas_failed,
        )?;
        gauge(
            &mut enc,
            "tern_switch_server_replicas_pending",
            "Entries waiting for the buddy (it did not answer, or not in time: tried again every 100 ms).",
            i64::try_from(s.replicas_pending).unwrap_or(i64::MAX),
        )?;
        counter(
            &mut enc,
            "tern_switch_server_resyncs",
            "Times the buddy was found restarted (its run id changed) and sent this server's own entries again.",
            s.resyncs,
        )?;
        counter(
            &mut enc,
            "tern_switch_server_takeovers",
            "Times the switch failed another server over to this one (POST /takeover).",
            s.takeovers,
        )?;
        counter(
            &mut enc,
            "tern_switch_server_replicas_adopted",
            "Another server's entries taken as its buddy.",
            s.replicas_adopted,
        )?;
        counter(
            &mut enc,
            "tern_switch_server_handbacks",
            "Answers of the buddy's GET /handback taken (its own entries the buddy holds, adopted back).",
            s.handbacks.taken,
        )?;
        counter(
            &mut enc,
            "tern_switch_server_handback_refused",
            "Records of its own in the buddy's hand-backs it could not take (one holding a pair or register it gave out since, or unreadable).",
            s.handbacks.refused,
        )?;
        counter(
            &mut enc,
            "tern_switch_server_handback_failed",
            "Asks for the buddy's hand-back that got no answer.",
            s.handbacks.failed,
        )?;
        gauge(
            &mut enc,
            "tern_switch_server_held_back",
            "Entries held now because the buddy handed them back (asked again every second while any).",
            s.held_back as i64,
        )
    }
}

/// `tern switch server`.
pub fn run(a: &ServerArgs) -> CmdResult {
    // Checked before anything starts; the schedule starts at the serving loop's first look.
    let mut ticker = crate::progress::Ticker::new(a.stats_interval)?;
    let program = Program::load(&a.program)?;
    let name =
        program.handler.clone().ok_or_else(|| format!("{}: the program names no handler", a.program.display()))?;
    let handler = server::handler(&name, a.index)?;
    let idle_ns = a.idle_ms.saturating_mul(1_000_000);
    let mut srv = Server::new(a.ethertype, program.id, handler, idle_ns);
    srv.replicate = a.buddy.is_some();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_millis(200)))
        .http_status_as_error(false)
        .build()
        .into();
    let mut replicator = Replicator::default();
    let mut replicas_adopted = 0u64;
    let pool = Pool::new(4096, tern_io::DEFAULT_BUF_SIZE);
    let mut port = FramePort::open(&a.port, &pool)?;
    let stop = crate::signals::stop_flag()?;
    let snap = Arc::new(Mutex::new(Snap::default()));
    let (ask_tx, ask_rx) = mpsc::channel::<Ask>();
    // Replicas from the server this one is buddy to: queued by the endpoint, taken by the loop.
    let inbox: Arc<Mutex<Vec<Vec<u8>>>> = Arc::new(Mutex::new(Vec::new()));
    // The switch failed another server over to this one (`POST /takeover`).
    let takeover = Arc::new(AtomicBool::new(false));
    // This run's id, in every answer to `POST /replicas`: a server whose buddy's id changes
    // knows it restarted (its replicas gone) and sends it its own entries again.
    let boot: u64 =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ (u64::from(std::process::id()) << 40);
    let http_stop = Arc::new(AtomicBool::new(false));
    let control = match a.control {
        Some(addr) => {
            let mut registry = Registry::default();
            registry.register_collector(Box::new(ServerCollector(snap.clone())));
            let ask = Mutex::new(ask_tx);
            let index = a.index;
            let extra: crate::metrics::Extra = Box::new(move |path| {
                let ask = ask.lock().ok()?;
                match path {
                    "/flows" => {
                        let (tx, rx) = mpsc::channel();
                        ask.send(Ask::Flows(tx)).ok()?;
                        let flows = rx.recv_timeout(Duration::from_secs(1)).ok()?;
                        Some(json!({"server": index, "flows": flows}).to_string())
                    }
                    "/entries" => {
                        let (tx, rx) = mpsc::channel();
                        ask.send(Ask::Entries(tx)).ok()?;
                        let (n, e) = rx.recv_timeout(Duration::from_secs(1)).ok()?;
                        let rows: Vec<_> = e.iter().map(|(k, v)| json!({"key": k, "value": v})).collect();
                        Some(json!({"server": index, "entries": n, "shown": rows}).to_string())
                    }
                    "/handback" => {
                        let (tx, rx) = mpsc::channel();
                        ask.send(Ask::HandBack(tx)).ok()?;
                        let records = rx.recv_timeout(Duration::from_secs(1)).ok()?;
                        let rows: Vec<String> = records.iter().map(|r| crate::frames::hex(r)).collect();
                        Some(json!({"server": index, "records": rows}).to_string())
                    }
                    _ => None,
                }
            });
            let config = Arc::new(Mutex::new(format!("switch server {} of {}\n", a.index, a.program.display())));
            let inbox_p = inbox.clone();
            let takeover_p = takeover.clone();
            let post: crate::metrics::Post = Box::new(move |url, body| {
                if url == "/takeover" {
                    takeover_p.store(true, Ordering::Relaxed);
                    return Some(Ok(json!({"server": index, "takeover": true}).to_string()));
                }
                if url != "/replicas" {
                    return None;
                }
                let records = match decode_records(body) {
                    Ok(r) => r,
                    Err(e) => return Some(Err((400, e))),
                };
                let n = records.len();
                match inbox_p.lock() {
                    Ok(mut q) if q.len() < 1 << 20 => {
                        q.extend(records);
                        Some(Ok(json!({"queued": n, "boot": boot}).to_string()))
                    }
                    _ => Some(Err((503, "replica queue full".into()))),
                }
            });
            Some(crate::metrics::serve_with_post(addr, registry, config, http_stop.clone(), Some(extra), Some(post))?)
        }
        None => None,
    };
    if !a.json {
        eprintln!(
            "switch server {}: handler `{name}` of program `{}` (id {}) on {}{}; Ctrl-C stops",
            a.index,
            program.name,
            program.id,
            a.port,
            control.map(|c| format!(", control on http://{c}")).unwrap_or_default()
        );
    }
    let start = Instant::now();
    let deadline = crate::signals::deadline(start, a.duration);
    let mut batch = Batch::new(tern_io::DEFAULT_BATCH);
    let peer = port.peer();
    // Taking back from the buddy: a thread asks (the loop never waits on the buddy), the loop
    // takes the answer; the first before any traffic.
    let mut handbacks = HandBacks::default();
    // The thread is watched as the loop publishes: one that ends (a bug's panic) stops the
    // server, rather than leave it holding what it took over without ever handing it back.
    let mut side = Vec::new();
    let handback: Option<(mpsc::Sender<()>, mpsc::Receiver<HandBackAnswer>)> = match a.buddy {
        None => None,
        Some(buddy) => {
            let (ask_tx, ask_rx) = mpsc::channel::<()>();
            let (ans_tx, ans_rx) = mpsc::channel();
            let agent = agent.clone();
            side.push(std::thread::Builder::new().name("tern-switch-handback".into()).spawn(move || {
                while ask_rx.recv().is_ok() {
                    tern_io::failpoint("switch-handback");
                    let url = format!("http://{buddy}/handback");
                    let answer = agent
                        .get(&url)
                        .call()
                        .map_err(|e| e.to_string())
                        .and_then(|r| {
                            if r.status().as_u16() != 200 {
                                return Err(format!("status {}", r.status()));
                            }
                            r.into_body().read_to_string().map_err(|e| e.to_string())
                        })
                        .and_then(|b| decode_handback(&b));
                    if ans_tx.send(answer).is_err() {
                        break;
                    }
                }
            })?);
            Some((ask_tx, ans_rx))
        }
    };
    let mut next_handback = None;
    if let Some((ask, answers)) = &handback {
        let _ = ask.send(());
        let answer = answers.recv_timeout(Duration::from_secs(1)).map_err(|e| e.to_string()).and_then(|a| a);
        handbacks.take(&mut srv, 0, answer);
        next_handback = Some(Instant::now() + HANDBACK_EVERY);
    }
    let mut full_streak = 0u32;
    let mut last_publish = start;
    let mut ended_early = None;
    loop {
        let now = Instant::now();
        if crate::signals::stopping(&stop) || deadline.is_some_and(|d| now >= d) {
            break;
        }
        if ticker.due(now) {
            let st = srv.stats();
            let (rate, secs) = ticker.rate(st.requests, now);
            eprintln!(
                "[{:>6.0} s] {} requests, {} responses ({} with BUSY), {} dropped, {} entries; {rate:.0} requests/s over the last {secs:.0} s",
                start.elapsed().as_secs_f64(),
                st.requests,
                st.responses,
                st.busy_responses,
                st.drops.iter().sum::<u64>(),
                srv.handler().entries(),
            );
        }
        let now_ns = now.duration_since(start).as_nanos() as u64;
        let n = tern_io::Port::recv(&mut port, now, &mut batch).unwrap_or(0);
        let busy = n > 0 && batch.is_full() && full_streak + 1 >= a.busy_batches;
        if n == 0 {
            full_streak = 0;
            let _ = port.port().wait(Duration::from_millis(2));
        } else {
            full_streak = if batch.is_full() { full_streak + 1 } else { 0 };
            srv.process(now_ns, &mut batch, busy, &pool);
            // The buddy takes the batch's new entries before its responses leave.
            if let Some(buddy) = a.buddy
                && srv.pending_replicas() > 0
                && replicator.failed_at.is_none_or(|t| now.duration_since(t) >= Duration::from_millis(100))
            {
                replicator.send(&agent, buddy, &mut srv, now, now_ns);
            }
            if let Some(peer) = peer {
                for p in batch.iter_mut() {
                    p.set_peer(peer);
                }
            }
            let _ = port.port().send(now, &mut batch);
            batch.recycle(&pool);
        }
        if let (Some((ask, answers)), Some(at)) = (&handback, next_handback) {
            if let Ok(answer) = answers.try_recv() {
                handbacks.take(&mut srv, now_ns, answer);
            }
            // Asked again while it holds what was handed back, or until an answer comes.
            if now >= at && (srv.taken_back() > 0 || handbacks.taken == 0) {
                let _ = ask.send(());
                next_handback = Some(now + HANDBACK_EVERY);
            }
        }
        if takeover.swap(false, Ordering::Relaxed) {
            let n = srv.take_over(now_ns);
            replicator.takeovers += 1;
            eprintln!("switch server {}: took over another server's flows ({n} entries to its buddy)", a.index);
        }
        // Waiting replicas (put back, taken over, or for a buddy that restarted) go when due,
        // and at least every second a buddy is asked who it is.
        if let Some(buddy) = a.buddy
            && replicator.due(now, srv.pending_replicas())
        {
            replicator.send(&agent, buddy, &mut srv, now, now_ns);
        }
        let adopted = inbox.try_lock().map(|mut q| std::mem::take(&mut *q)).unwrap_or_default();
        if !adopted.is_empty() {
            let refused = srv.adopt_replicas(now_ns, &adopted);
            replicas_adopted += (adopted.len() - refused) as u64;
        }
        while let Ok(ask) = ask_rx.try_recv() {
            match ask {
                Ask::Flows(reply) => {
                    srv.expire(now_ns);
                    let _ = reply.send(srv.live_flows().collect());
                }
                Ask::Entries(reply) => {
                    let _ = reply.send((srv.handler().entries(), srv.handler().dump(1000)));
                }
                Ask::HandBack(reply) => {
                    let _ = reply.send(srv.hand_back());
                }
            }
        }
        if now.duration_since(last_publish) >= Duration::from_millis(100) {
            last_publish = now;
            if let Some(e) = tern_io::take_ended(&mut side, |()| "it returned".into()) {
                ended_early = Some(e);
                break;
            }
            srv.expire(now_ns);
            if let Ok(mut s) = snap.try_lock() {
                *s = Snap {
                    stats: srv.stats(),
                    live: srv.live_flows().count(),
                    entries: srv.handler().entries(),
                    handler: srv.handler().counters(),
                    busy,
                    replicas_sent: replicator.sent,
                    replicas_failed: replicator.dropped,
                    replicas_pending: srv.pending_replicas(),
                    resyncs: replicator.resyncs,
                    takeovers: replicator.takeovers,
                    replicas_adopted,
                    handbacks,
                    held_back: srv.taken_back(),
                };
            }
        }
    }
    http_stop.store(true, Ordering::Relaxed);
    if let Some(e) = ended_early {
        return Err(format!("{e}; the server stopped").into());
    }
    let st = srv.stats();
    let drops: u64 = st.drops.iter().sum();
    let why = crate::signals::why_stopped(&stop, "duration");
    let summary = json!({
        "stopped_by": why,
        "server": a.index, "requests": st.requests, "responses": st.responses, "busy_responses": st.busy_responses,
        "drops": ServerDrop::ALL.iter().zip(st.drops).map(|(d, v)| (d.name().to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "entries": srv.handler().entries(), "seconds": start.elapsed().as_secs_f64(),
        "replicas_sent": replicator.sent, "replicas_failed": replicator.dropped, "replicas_pending": srv.pending_replicas(),
        "resyncs": replicator.resyncs, "takeovers": replicator.takeovers, "replicas_adopted": replicas_adopted,
        "handbacks": handbacks.taken, "handback_refused": handbacks.refused, "handback_failed": handbacks.failed, "held_back": srv.taken_back(),
        "handler": srv.handler().counters().into_iter().map(|(n, v)| (n.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "switch server {} stopped ({why}) after {:.1} s: {} requests, {} responses ({} with BUSY), {drops} dropped, {} entries",
            a.index,
            start.elapsed().as_secs_f64(),
            st.requests,
            st.responses,
            st.busy_responses,
            srv.handler().entries(),
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Posts of replicas stay within what the buddy's endpoint takes: a count, and 1 MiB.
    #[test]
    fn posts_fit_the_body_a_request_may_carry() {
        let small = vec![vec![0u8; 21]; 100_000];
        assert_eq!(post_end(&small, 0), RECORDS_A_POST);
        assert_eq!(post_end(&small, 90_000), 100_000);
        let large = vec![vec![0u8; 1000]; 5000];
        let end = post_end(&large, 0);
        assert_eq!(end, tern_io::http::MAX_BODY_BYTES / 1002);
        assert!(encode_records(&large[..end]).len() <= tern_io::http::MAX_BODY_BYTES);
        assert!(encode_records(&large[..end + 1]).len() > tern_io::http::MAX_BODY_BYTES);
        // Every post takes at least one record, and the records round-trip.
        assert_eq!(post_end(&large, 4999), 5000);
        assert_eq!(decode_records(&encode_records(&large[..3])).unwrap(), large[..3].to_vec());
    }
}
