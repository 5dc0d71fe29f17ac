//! `tern rpc serve CONFIG`: an RPC service (`examples/rpc/image.toml`, `social.toml`) over QNP
//! on UDP, its work where the `--mode` puts it (`tern_rpc::app`).
//!
//! Two kinds of thread play the two sides of the PCIe link. Each of the configuration's
//! **lanes** plays a NIC lane: it has its own socket in one `SO_REUSEPORT` group (a client's
//! packets reach one lane), runs QNP, checks each call (method, class), deserializes its body
//! (except in `cpu-only`) and, when the response comes back, finishes serializing it (stage 2
//! in `rpcnic`, the NIC-only serializer in `protoacc-pcie`) and replies. Each of the
//! **handler** threads plays a host core: it runs the application's handler on a decoded
//! request and, in `rpcnic`, stage 1 of serialization; in `cpu-only` it also decodes and
//! encodes. Lanes hand calls to handlers in turn over channels. Compute units are threads of
//! their own. All lanes share one exactly-once memory, the live schema table, the pools and the
//! units.
//!
//! A message is decoded with the table as it is when its call arrives and is served and
//! serialized with that same table. When a move changes the table (automatic field updating,
//! §III-F), the lanes stop taking calls, let the calls in flight finish, and go on with the new
//! table: never a table change under a message. A lane looks at the table again between taking
//! calls and decoding them, so a call taken as the table changed waits for the new one.
//!
//! A body that does not decode is answered `bad_request`, the error naming the field path and
//! byte offset. SIGINT or SIGTERM stops it: a summary, exit 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use tern_endpoint::{Incoming, PartStats, RpcServer, Status};
use tern_io::udp::{UdpConfig, UdpPort};
use tern_io::{Pool, Port};
use tern_qnp::ReqHandle;
use tern_qnp::{DropReason, QnpConfig};
use tern_rpc::app::{self, App, CallStatus, Method, Mode, Refusal, Served};
use tern_rpc::cu::{ComputeUnit, UnitConfig};
use tern_rpc::decode::Pools;
use tern_rpc::image::{ImageService, KERNEL};
use tern_rpc::kernel::Kernel;
use tern_rpc::message::Message;
use tern_rpc::placement::LiveSchema;
use tern_rpc::schema::SchemaTable;
use tern_rpc::service::Service;
use tern_rpc::social::SocialNetwork;

use crate::CmdResult;

/// `--mode`'s values, as `tern_rpc::app::Mode` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Everything on host threads, every field in host memory, the plain encoder.
    CpuOnly,
    /// (De)serialization on the NIC's lanes with every field in host memory (the NIC-only
    /// serializer); kernels on compute units, the data moved to the card and back.
    ProtoaccPcie,
    /// Placement by the schema table, kernels on compute units, memory-affinity serialization.
    Rpcnic,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::CpuOnly => Mode::CpuOnly,
            ModeArg::ProtoaccPcie => Mode::ProtoaccPcie,
            ModeArg::Rpcnic => Mode::Rpcnic,
        }
    }
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The service configuration (TOML; examples/rpc/image.toml or social.toml).
    pub config: PathBuf,
    /// UDP address to take calls on (port 0: any free port, printed).
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// Serve Prometheus metrics (`tern_rpc_*`) at http://ADDR/metrics.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Where the work runs.
    #[arg(long, value_enum, default_value_t = ModeArg::Rpcnic)]
    pub mode: ModeArg,
    /// Stop after this many seconds (more than 0, at most a year) [default: run until SIGINT or
    /// SIGTERM, which stop it cleanly with its summary].
    #[arg(long, value_parser = crate::signals::duration_secs)]
    pub duration: Option<f64>,
    /// IP MTU that responses are segmented by (576 to 65535) [default: the path MTU to the
    /// listening address as the kernel knows it, at most 65535 (loopback's); 1500 when
    /// listening on every address].
    #[arg(long)]
    pub mtu: Option<usize>,
    /// Print a one-line progress report to stderr every this many seconds (0: none): calls
    /// answered (and of them ok), QNP datagrams dropped, and the rate over the last interval.
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval: f64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// QNP's configuration for a path to `peer` (`mtu`, or the path MTU the kernel knows, at most
/// 65535; 1500 for an unspecified address or an unknown path) and a packet pool whose buffers
/// hold a packet of that size. A bad `mtu` is an error saying so.
pub fn transport(peer: SocketAddr, mtu: Option<usize>) -> Result<(QnpConfig, Pool), String> {
    let mtu = match mtu {
        Some(m) => m,
        None if peer.ip().is_unspecified() => 1500,
        None => tern_io::udp::path_mtu(peer).unwrap_or(1500).min(65_535),
    };
    if !(576..=65_535).contains(&mtu) {
        return Err(format!("--mtu {mtu}: must be 576 to 65535"));
    }
    let cfg = QnpConfig { mtu, ..QnpConfig::default() };
    let buf = mtu.max(tern_io::DEFAULT_BUF_SIZE);
    // Some 32 MiB of free buffers kept at most.
    Ok((cfg, Pool::new(((32 << 20) / buf).max(256), buf)))
}

/// What the lanes and handlers counted.
#[derive(Debug, Default)]
pub struct Counters {
    /// Calls answered, by status (in `Status::ALL`'s order).
    pub calls: [AtomicU64; 6],
    /// Values and bytes moved between host and device memory.
    pub moved_values: AtomicU64,
    pub moved_bytes: AtomicU64,
    /// Calls whose kernel ran on a compute unit, and on the host.
    pub on_unit: AtomicU64,
    pub on_host: AtomicU64,
    /// CPU time of the handler threads, and of the lanes, ns.
    pub handler_cpu_ns: AtomicU64,
    pub lane_cpu_ns: AtomicU64,
    /// Of the lanes' time, what deserializing requests and serializing responses took (wall
    /// time around it, ns): the codec's part, the rest being the transport's.
    pub lane_codec_ns: AtomicU64,
    /// Times the lanes drained to take a new schema table.
    pub table_changes: AtomicU64,
    /// QNP drops, summed over the lanes (in `DropReason::ALL`'s order), as last published.
    pub drops: Vec<Vec<AtomicU64>>,
    /// Calls and replies in parts, per lane (in `PartStats::named`'s order), as last published.
    pub parts: Vec<Vec<AtomicU64>>,
}

impl Counters {
    /// Counters for `lanes` lanes.
    pub fn new(lanes: usize) -> Counters {
        Counters {
            drops: (0..lanes).map(|_| DropReason::ALL.iter().map(|_| AtomicU64::new(0)).collect()).collect(),
            parts: (0..lanes)
                .map(|_| PartStats::default().named().iter().map(|_| AtomicU64::new(0)).collect())
                .collect(),
            ..Counters::default()
        }
    }

    /// The lanes' part counters summed, by name.
    pub fn parts(&self) -> Vec<(&'static str, u64)> {
        PartStats::NAMES
            .iter()
            .enumerate()
            .map(|(j, n)| (*n, self.parts.iter().map(|l| l[j].load(Ordering::Relaxed)).sum()))
            .collect()
    }

    /// Calls answered with status `s`.
    pub fn answered(&self, s: Status) -> u64 {
        self.calls[status_index(s)].load(Ordering::Relaxed)
    }

    /// CPU time the host spends in `mode`, ns: the handler threads; and where the design runs
    /// the RPC stack on the host (`cpu-only`, and `protoacc-pcie`, which offloads only
    /// (de)serialization), the lanes' transport work too.
    pub fn host_cpu_ns(&self, mode: Mode) -> u64 {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let transport = get(&self.lane_cpu_ns).saturating_sub(get(&self.lane_codec_ns));
        get(&self.handler_cpu_ns) + if mode == Mode::Rpcnic { 0 } else { transport }
    }

    /// CPU time this machine spent on the card's work in `mode`, ns: nothing in `cpu-only`, the
    /// lanes' (de)serialization in `protoacc-pcie`, the lanes' everything in `rpcnic`.
    pub fn device_cpu_ns(&self, mode: Mode) -> u64 {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        match mode {
            Mode::CpuOnly => 0,
            Mode::ProtoaccPcie => get(&self.lane_codec_ns),
            Mode::Rpcnic => get(&self.lane_cpu_ns),
        }
    }
}

fn status_index(s: Status) -> usize {
    Status::ALL.iter().position(|&x| x == s).unwrap_or(0)
}

fn status_of(s: CallStatus) -> Status {
    match s {
        CallStatus::Ok => Status::Ok,
        CallStatus::BadRequest => Status::BadRequest,
        CallStatus::UnknownMethod => Status::UnknownMethod,
        CallStatus::UnknownClass => Status::UnknownClass,
        CallStatus::Internal => Status::Internal,
    }
}

/// `tern rpc serve`.
pub fn run(a: &ServeArgs) -> CmdResult {
    let svc = Service::load(&a.config)?;
    // Checked before anything starts; the schedule starts at the serving loop's first look.
    let mut ticker = crate::progress::Ticker::new(a.stats_interval)?;
    let mode = Mode::from(a.mode);
    let stop = crate::signals::stop_flag()?;
    let (qnp, pool) = transport(a.listen, a.mtu)?;
    let ports = bind(a.listen, svc.config.lanes as usize, &pool)?;
    let addr = ports[0].local_addr();
    let counters = Arc::new(Counters::new(ports.len()));
    if let Some(m) = a.metrics {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(super::metrics::RpcCollector { counters: counters.clone() }));
        let config = Arc::new(std::sync::Mutex::new(
            tern_wire::read_regular_text(&a.config, tern_wire::MAX_CONFIG_BYTES).unwrap_or_default(),
        ));
        let bound = crate::metrics::serve(m, registry, config, stop.clone(), None)?;
        eprintln!("metrics on http://{bound}/metrics");
    }
    eprintln!(
        "serving {} ({} app, {mode} mode, {} lane(s), {} handler(s), {} compute unit(s)) on udp://{addr}, MTU {}",
        svc.file.display(),
        svc.config.app,
        ports.len(),
        svc.config.handlers,
        if mode.units() { svc.unit_count() } else { 0 },
        qnp.mtu
    );
    let started = Instant::now();
    let deadline = crate::signals::deadline(started, a.duration);
    let reported = Arc::new(AtomicBool::new(false));
    let reporter = (a.stats_interval > 0.0).then(|| {
        let (counters, reported) = (counters.clone(), reported.clone());
        std::thread::spawn(move || {
            while !reported.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if ticker.due(Instant::now()) {
                    eprintln!("{}", progress_line(&counters, started, &mut ticker));
                }
            }
        })
    });
    let served = serve_ports(&svc, mode, ports, &pool, &qnp, &counters, &stop, deadline);
    reported.store(true, Ordering::Relaxed);
    if let Some(r) = reporter {
        let _ = r.join();
    }
    let generation = served?;
    let secs = started.elapsed().as_secs_f64();
    let why = crate::signals::why_stopped(&stop, "duration");
    let by_status: Vec<(&str, u64)> = Status::ALL.iter().map(|s| (s.name(), counters.answered(*s))).collect();
    let drops: Vec<(&str, u64)> = DropReason::ALL
        .iter()
        .enumerate()
        .map(|(j, r)| (r.as_str(), counters.drops.iter().map(|l| l[j].load(Ordering::Relaxed)).sum()))
        .collect();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let answered: u64 = by_status.iter().map(|(_, c)| c).sum();
    let per_call = |ns: u64| if answered > 0 { ns as f64 / 1000.0 / answered as f64 } else { 0.0 };
    if a.json {
        let v = serde_json::json!({
            "stopped_by": why, "listen": addr.to_string(), "mtu": qnp.mtu, "app": svc.config.app, "mode": mode.name(), "seconds": secs,
            "calls": by_status.iter().map(|(n, c)| (n.to_string(), serde_json::json!(c))).collect::<serde_json::Map<_, _>>(),
            "on_unit": get(&counters.on_unit), "on_host": get(&counters.on_host),
            "moved_values": get(&counters.moved_values), "moved_bytes": get(&counters.moved_bytes),
            "host_cpu_us_per_call": per_call(counters.host_cpu_ns(mode)),
            "device_cpu_us_per_call": per_call(counters.device_cpu_ns(mode)),
            "handler_cpu_us_per_call": per_call(get(&counters.handler_cpu_ns)),
            "lane_cpu_us_per_call": per_call(get(&counters.lane_cpu_ns)),
            "schema_generation": generation, "table_changes": get(&counters.table_changes),
            "qnp_drops": drops.iter().map(|(n, c)| (n.to_string(), serde_json::json!(c))).collect::<serde_json::Map<_, _>>(),
            "parts": counters.parts().iter().map(|(n, c)| (n.to_string(), serde_json::json!(c))).collect::<serde_json::Map<_, _>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("stopped ({why}) after {secs:.1} s:");
        for (n, c) in &by_status {
            println!("  calls {n}: {c}");
        }
        println!(
            "  kernels on a compute unit: {}, on the host: {}; moved {} values ({} bytes); schema generation {} (the lanes drained {} time(s) for a new table)",
            get(&counters.on_unit),
            get(&counters.on_host),
            get(&counters.moved_values),
            get(&counters.moved_bytes),
            generation,
            get(&counters.table_changes)
        );
        println!(
            "  CPU per call: {:.1} us the host's ({mode}: {}), {:.1} us the card's work run here",
            per_call(counters.host_cpu_ns(mode)),
            if mode == Mode::Rpcnic { "handler threads" } else { "handler threads and the lanes' transport" },
            per_call(counters.device_cpu_ns(mode))
        );
        for (n, c) in drops.iter().filter(|(_, c)| *c > 0) {
            println!("  qnp dropped {n}: {c}");
        }
        for (n, c) in counters.parts().iter().filter(|(_, c)| *c > 0) {
            println!("  parts {n}: {c}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `lanes` sockets on `listen`, one `SO_REUSEPORT` group; a taken address is an error naming it.
pub fn bind(listen: SocketAddr, lanes: usize, pool: &Pool) -> Result<Vec<UdpPort>, String> {
    // A plain bind first proves the address free: SO_REUSEPORT would join another server's group.
    if listen.port() != 0 {
        std::net::UdpSocket::bind(listen)
            .map_err(|e| format!("cannot listen on {listen}: {e} (another server holds it?)"))?;
    }
    let udp = UdpConfig { reuse_port: true, ..UdpConfig::default() };
    let first = UdpPort::bind(listen, pool, &udp).map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = first.local_addr();
    let mut ports = vec![first];
    for _ in 1..lanes.max(1) {
        ports.push(UdpPort::bind(addr, pool, &udp).map_err(|e| format!("cannot listen on {addr}: {e}"))?);
    }
    Ok(ports)
}

/// The compute units `mode` uses: each configured unit, programmed with its kernel.
fn units(svc: &Service, mode: Mode) -> Result<Vec<ComputeUnit>, String> {
    let mut v = Vec::new();
    if !mode.units() {
        return Ok(v);
    }
    for u in &svc.units {
        for _ in 0..u.count {
            let unit = ComputeUnit::new(UnitConfig {
                reconfigure: Duration::from_millis(u.reconfigure_ms),
                ..UnitConfig::default()
            })
            .map_err(|e| format!("cannot start a compute unit: {e}"))?;
            unit.program(Some(Kernel::new(u.kernel, u.key.as_ref())?));
            v.push(unit);
        }
    }
    Ok(v)
}

/// One application instance per handler thread.
fn apps<'a>(
    svc: &Service,
    live: &'a LiveSchema,
    pools: &'a Pools,
    units: &'a [ComputeUnit],
) -> Result<Vec<Box<dyn App + 'a>>, String> {
    let mut out: Vec<Box<dyn App + 'a>> = Vec::new();
    for i in 0..svc.config.handlers as usize {
        match svc.config.app.as_str() {
            "image" => {
                let key = svc.units.iter().find(|u| u.kernel == KERNEL).and_then(|u| u.key).ok_or_else(|| {
                    format!("{}: the image app needs a `{KERNEL}` unit entry for its key", svc.file.display())
                })?;
                let unit = (!units.is_empty()).then(|| &units[i % units.len()]);
                let authorized = svc.config.authorized.iter().copied();
                out.push(Box::new(ImageService::new(live, pools, unit, &key, authorized)));
            }
            "social" => {
                let app = SocialNetwork::new(&live.snapshot().0)
                    .ok_or_else(|| format!("{}: the proto is not social.proto's", svc.file.display()))?
                    .with_machine(i as u64);
                out.push(Box::new(app));
            }
            other => return Err(format!("{}: no app `{other}`", svc.file.display())),
        }
    }
    Ok(out)
}

/// Calls a lane has handed to handlers and not yet answered, at most; a call beyond is answered
/// `overloaded` (so that no client grows the server's queues).
pub const LANE_IN_FLIGHT: usize = 4096;

/// A call handed from a lane to a handler.
struct Job<'t> {
    handle: ReqHandle,
    request_id: u64,
    method: Method,
    /// Decoded on the lane (NIC-side modes), or the body to decode (`cpu-only`).
    req: Result<Message<'t>, Vec<u8>>,
    /// The response, empty: made (and later released) on the lane, so that a message's
    /// vectors are kept and reused by the one thread.
    resp: Message<'t>,
}

/// A handled call on its way back to its lane.
struct Done<'t> {
    handle: ReqHandle,
    request_id: u64,
    /// The response to finish serializing, with stage 1's records; or the answer as it is.
    resp: Result<(Message<'t>, Vec<u8>), Refusal>,
    /// The encoded body (`cpu-only`).
    body: Vec<u8>,
    /// The request, given back to be released on the lane that decoded it.
    _req: Option<Message<'t>>,
}

/// A lane's server, and the calls it took but had not decoded when the table changed (they are
/// decoded with the new one).
type LaneState = (RpcServer<UdpPort>, Vec<Incoming>);

/// The progress report (`--stats-interval`): calls answered since `started` (and of them ok),
/// QNP datagrams dropped, and the calls a second since the last report.
fn progress_line(counters: &Counters, started: Instant, ticker: &mut crate::progress::Ticker) -> String {
    let answered: u64 = Status::ALL.iter().map(|s| counters.answered(*s)).sum();
    let dropped: u64 = counters.drops.iter().flat_map(|l| l.iter()).map(|d| d.load(Ordering::Relaxed)).sum();
    let (rate, secs) = ticker.rate(answered, Instant::now());
    format!(
        "[{:>6.0} s] {answered} calls answered ({} ok), {dropped} datagrams dropped; {rate:.0} calls/s over the last {secs:.0} s",
        started.elapsed().as_secs_f64(),
        counters.answered(Status::Ok),
    )
}

/// Serves `svc` in `mode` on `ports` (one lane each) until `stop` is set or `deadline` passes;
/// the schema generation at the end.
#[allow(clippy::too_many_arguments)]
pub fn serve_ports(
    svc: &Service,
    mode: Mode,
    ports: Vec<UdpPort>,
    pool: &Pool,
    qnp: &QnpConfig,
    counters: &Counters,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) -> Result<u64, String> {
    let pools = svc.pools();
    let live = LiveSchema::new(svc.table.clone(), svc.config.auto_update);
    let host_table = app::all_host(&svc.table);
    let units = units(svc, mode)?;
    let mut apps = apps(svc, &live, &pools, &units)?;
    let memory = Arc::new(tern_qnp::ExactlyOnce::new(qnp, ports.len()));
    let mut servers: Vec<LaneState> =
        ports.into_iter().map(|p| (RpcServer::with_memory(p, pool, qnp.clone(), memory.clone()), Vec::new())).collect();
    let done = || crate::signals::stopping(stop) || deadline.is_some_and(|d| Instant::now() >= d);
    let (name, methods) = (apps[0].name(), apps[0].methods().to_vec());
    loop {
        // One table for everything in flight in this pass.
        let snapshot = live.snapshot();
        let (table, generation): (&SchemaTable, u64) =
            if mode.placed() { (&snapshot.0, snapshot.1) } else { (&host_table, snapshot.1) };
        let live_ref = &live;
        let changed = move || mode.placed() && live_ref.generation() != generation;
        let pools = &pools;
        // Raised by a lane or handler that fails (an error, a panic): every lane leaves at once,
        // and the server stops with the failure rather than serve on without it.
        let failed = AtomicBool::new(false);
        let failed = &failed;
        servers = std::thread::scope(|scope| -> Result<Vec<LaneState>, String> {
            let mut to_handlers = Vec::new();
            let mut handlers = Vec::new();
            for app in apps.iter_mut() {
                let (tx, rx) = mpsc::channel::<(Job<'_>, mpsc::Sender<Done<'_>>)>();
                to_handlers.push(tx);
                handlers.push(scope.spawn(move || {
                    raising(failed, || {
                        handler(app.as_mut(), mode, table, pools, rx, counters);
                        Ok(())
                    })
                }));
            }
            let mut lanes = Vec::new();
            for (i, (mut server, mut calls)) in std::mem::take(&mut servers).into_iter().enumerate() {
                let to_handlers = to_handlers.clone();
                let (changed, done, methods) = (&changed, &done, &methods);
                lanes.push(scope.spawn(move || -> Result<LaneState, String> {
                    raising(failed, || {
                        let leave = || done() || changed();
                        let app = (name, methods.as_slice());
                        let (to, ends) = (to_handlers.as_slice(), (leave, failed));
                        lane(i, &mut server, &mut calls, mode, table, pools, to, app, counters, ends)?;
                        Ok((server, calls))
                    })
                }));
            }
            drop(to_handlers);
            let panicked = |what: &str, p: Box<dyn std::any::Any + Send>| {
                format!("{what} panicked: {}", tern_io::panic_message(p.as_ref()))
            };
            let (mut back, mut errors) = (Vec::new(), Vec::new());
            for l in lanes {
                match l.join().map_err(|p| panicked("a lane", p)).and_then(|r| r) {
                    Ok(lane) => back.push(lane),
                    Err(e) => errors.push(e),
                }
            }
            for h in handlers {
                if let Err(e) = h.join().map_err(|p| panicked("a handler", p)).and_then(|r| r) {
                    errors.push(e);
                }
            }
            // The failure that raised the flag, not the lanes that left for it.
            match errors.iter().find(|e| e.as_str() != LEFT_FOR_ANOTHER).or(errors.first()) {
                Some(e) => Err(e.clone()),
                None => Ok(back),
            }
        })?;
        if done() {
            return Ok(live.generation());
        }
        counters.table_changes.fetch_add(1, Ordering::Relaxed);
    }
}

/// A lane's error when it left because another lane or a handler failed.
const LEFT_FOR_ANOTHER: &str = "another lane or a handler failed";

/// Runs `f`, raising `failed` if it returns an error or panics (so that the other lanes and
/// handlers, which look at it, leave at once).
fn raising<T>(failed: &AtomicBool, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let _raise = tern_io::OnPanic(|| failed.store(true, Ordering::Relaxed));
    let r = f();
    if r.is_err() {
        failed.store(true, Ordering::Relaxed);
    }
    r
}

/// A lane: takes calls, checks and (NIC-side modes) decodes them, hands them to the handlers in
/// turn, and finishes and sends their responses; returns when `leave` says so and nothing it
/// handed out is still in flight. Calls it took are looked at `leave` once more before they
/// are decoded: taken as the table changed, they stay in `calls` for the next table.
#[allow(clippy::too_many_arguments)]
fn lane<'t>(
    i: usize,
    server: &mut RpcServer<UdpPort>,
    calls: &mut Vec<Incoming>,
    mode: Mode,
    table: &'t SchemaTable,
    pools: &'t Pools,
    to_handlers: &[mpsc::Sender<(Job<'t>, mpsc::Sender<Done<'t>>)>],
    (name, methods): (&str, &[Method]),
    counters: &Counters,
    (leave, failed): (impl Fn() -> bool, &AtomicBool),
) -> Result<(), String> {
    let cpu0 = tern_io::thread_cpu_time();
    let (tx, rx) = mpsc::channel::<Done<'t>>();
    let mut in_flight = 0usize;
    let mut next = i;
    let mut out = Vec::new();
    let result = (|| -> Result<(), String> {
        loop {
            if failed.load(Ordering::Relaxed) {
                // Another lane or a handler failed: the calls in flight may never come back.
                return Err(LEFT_FOR_ANOTHER.into());
            }
            let leaving = leave();
            if leaving && in_flight == 0 {
                return Ok(());
            }
            // Responses back from the handlers.
            let mut finished = false;
            let wait = if in_flight > 0 && !leaving { Duration::from_micros(200) } else { Duration::ZERO };
            let mut first = if in_flight > 0 { rx.recv_timeout(wait).ok() } else { None };
            while let Some(d) = first.take().or_else(|| rx.try_recv().ok()) {
                in_flight -= 1;
                finished = true;
                reply(server, mode, d, &mut out, counters);
            }
            if finished {
                server.flush().map_err(|e| e.to_string())?;
            }
            if leaving {
                // Taking no new calls: wait for those in flight.
                if in_flight > 0
                    && let Ok(d) = rx.recv_timeout(Duration::from_millis(50))
                {
                    in_flight -= 1;
                    reply(server, mode, d, &mut out, counters);
                    server.flush().map_err(|e| e.to_string())?;
                }
                continue;
            }
            if calls.is_empty() {
                let wait = if in_flight > 0 { Duration::ZERO } else { Duration::from_millis(20) };
                server.recv(calls, wait).map_err(|e| e.to_string())?;
            }
            // The table may have changed while they came: then they wait for the new one.
            if leave() {
                continue;
            }
            for c in calls.drain(..) {
                if in_flight >= LANE_IN_FLIGHT {
                    let e = format!("the lane has {LANE_IN_FLIGHT} calls in flight");
                    answer(server, c.handle, c.header.request_id, Status::Overloaded, &e, &[], counters);
                    continue;
                }
                let method = match app::check(name, methods, c.header.method, c.header.class_id) {
                    Ok(m) => m.clone(),
                    Err((s, e)) => {
                        answer(server, c.handle, c.header.request_id, status_of(s), &e, &[], counters);
                        continue;
                    }
                };
                let t0 = Instant::now();
                let req = if mode.nic_codec() {
                    match app::decode_request(table, &method, &c.body, pools) {
                        Ok(m) => Ok(m),
                        Err((s, e)) => {
                            answer(server, c.handle, c.header.request_id, status_of(s), &e, &[], counters);
                            continue;
                        }
                    }
                } else {
                    Err(c.body)
                };
                let resp = Message::new(table, method.response, pools);
                if mode.nic_codec() {
                    counters.lane_codec_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
                let job = Job { handle: c.handle, request_id: c.header.request_id, method, req, resp };
                next = (next + 1) % to_handlers.len();
                if to_handlers[next].send((job, tx.clone())).is_err() {
                    return Err("a handler thread ended".into());
                }
                in_flight += 1;
            }
            server.flush().map_err(|e| e.to_string())?;
            let stats = server.qnp().core().stats();
            for (j, r) in DropReason::ALL.iter().enumerate() {
                counters.drops[i][j].store(stats.drops_of(*r), Ordering::Relaxed);
            }
            for (j, (_, v)) in server.part_stats().named().iter().enumerate() {
                counters.parts[i][j].store(*v, Ordering::Relaxed);
            }
        }
    })();
    counters.lane_cpu_ns.fetch_add((tern_io::thread_cpu_time() - cpu0).as_nanos() as u64, Ordering::Relaxed);
    result
}

/// Answers a call, counted by status; a reply too large for QNP is the service's failure,
/// answered as such.
fn answer(
    server: &mut RpcServer<UdpPort>,
    handle: ReqHandle,
    request_id: u64,
    status: Status,
    error: &str,
    body: &[u8],
    counters: &Counters,
) {
    let status = if server.reply(handle, request_id, status, error, body).is_ok() {
        status
    } else {
        let _ = server.reply(handle, request_id, Status::Internal, "reply too large", &[]);
        Status::Internal
    };
    counters.calls[status_index(status)].fetch_add(1, Ordering::Relaxed);
}

/// A handled call's response, finished on the lane and sent.
fn reply(server: &mut RpcServer<UdpPort>, mode: Mode, d: Done<'_>, out: &mut Vec<u8>, counters: &Counters) {
    match &d.resp {
        Ok((resp, records)) => {
            out.clear();
            let body = if mode.nic_codec() {
                let t0 = Instant::now();
                let finished = app::finish(mode, resp, records, out);
                counters.lane_codec_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                match finished {
                    Ok(()) => out.as_slice(),
                    Err((s, e)) => {
                        return answer(server, d.handle, d.request_id, status_of(s), &e, &[], counters);
                    }
                }
            } else {
                d.body.as_slice()
            };
            answer(server, d.handle, d.request_id, Status::Ok, "", body, counters);
        }
        Err((s, e)) => answer(server, d.handle, d.request_id, status_of(*s), e, &[], counters),
    }
    // The request and response are released here, on the lane whose pools' chunks they hold.
    drop(d);
}

/// A handler thread: the host's part of each call it is handed (`tern_rpc::app::handle`, and
/// in `cpu-only` the decoding too), until every lane is gone.
fn handler<'t>(
    app: &mut dyn App,
    mode: Mode,
    table: &'t SchemaTable,
    pools: &'t Pools,
    rx: mpsc::Receiver<(Job<'t>, mpsc::Sender<Done<'t>>)>,
    counters: &Counters,
) {
    let cpu0 = tern_io::thread_cpu_time();
    for (job, back) in rx {
        tern_io::failpoint("rpc-handler");
        let (mut req, decoded_here) = match job.req {
            Ok(m) => (m, false),
            Err(body) => match app::decode_request(table, &job.method, &body, pools) {
                Ok(m) => (m, true),
                Err(r) => {
                    let _ = back.send(Done {
                        handle: job.handle,
                        request_id: job.request_id,
                        resp: Err(r),
                        body: Vec::new(),
                        _req: None,
                    });
                    continue;
                }
            },
        };
        let mut resp = job.resp;
        let (mut records, mut body) = (Vec::new(), Vec::new());
        let served = app::handle(app, mode, &job.method, &mut req, &mut resp, &mut records, &mut body);
        count(&served, counters);
        let _ = back.send(Done {
            handle: job.handle,
            request_id: job.request_id,
            resp: Ok((resp, records)),
            body,
            // A request decoded here is released here.
            _req: (!decoded_here).then_some(req),
        });
    }
    counters.handler_cpu_ns.fetch_add((tern_io::thread_cpu_time() - cpu0).as_nanos() as u64, Ordering::Relaxed);
}

fn count(served: &Served, counters: &Counters) {
    counters.moved_values.fetch_add(served.moved.values, Ordering::Relaxed);
    counters.moved_bytes.fetch_add(served.moved.bytes, Ordering::Relaxed);
    if served.on_unit {
        counters.on_unit.fetch_add(1, Ordering::Relaxed);
    }
    if served.on_host {
        counters.on_host.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tern_endpoint::{Header, RpcClient};
    use tern_rpc::schema::Placement;

    /// A lane or handler that fails raises the flag the others leave by: by an error (passed
    /// on) or a panic (passed on as the panic); one that ends well leaves it down.
    #[test]
    fn a_failing_lane_or_handler_raises_the_flag() {
        let failed = AtomicBool::new(false);
        assert_eq!(raising(&failed, || Ok(3)), Ok(3));
        assert!(!failed.load(Ordering::Relaxed));
        assert_eq!(raising::<()>(&failed, || Err("socket gone".into())), Err("socket gone".to_string()));
        assert!(failed.load(Ordering::Relaxed));
        let failed = AtomicBool::new(false);
        let r = std::thread::scope(|s| s.spawn(|| raising::<()>(&failed, || panic!("a bug"))).join());
        assert!(r.is_err() && failed.load(Ordering::Relaxed));
    }

    /// Calls `n` image requests (`concurrency` at a time) at a server of `svc` in `mode`; the
    /// counters and final generation.
    fn run_calls(svc: &Service, mode: Mode, n: u64, concurrency: usize) -> (Counters, u64) {
        let (qnp, pool) = transport("127.0.0.1:9".parse().unwrap(), None).unwrap();
        let ports = bind("127.0.0.1:0".parse().unwrap(), 2, &pool).unwrap();
        let addr = ports[0].local_addr();
        let counters = Counters::new(2);
        let stop = AtomicBool::new(false);
        let user = svc.table.class_by_name("image.User").unwrap().id;
        let body = tern_rpc::image::request(&svc.table, 1, 64, 64);
        let generation = std::thread::scope(|s| {
            let server = s.spawn(|| serve_ports(svc, mode, ports, &pool, &qnp, &counters, &stop, None));
            let port = UdpPort::bind("127.0.0.1:0".parse().unwrap(), &pool, &UdpConfig::default()).unwrap();
            let mut client = RpcClient::new(port, &pool, qnp.clone(), addr);
            let (mut sent, mut ok) = (0u64, 0u64);
            let mut got = Vec::new();
            let t0 = Instant::now();
            while ok < n && t0.elapsed() < Duration::from_secs(60) {
                while sent < n && client.outstanding() < concurrency {
                    client.call(Header { method: 1, class_id: user, request_id: sent, flags: 0 }, &body).unwrap();
                    sent += 1;
                }
                client.flush().unwrap();
                got.clear();
                client.recv(&mut got, Duration::from_millis(5)).unwrap();
                for a in got.drain(..) {
                    let a = a.unwrap();
                    assert_eq!(a.status, Status::Ok, "{}", a.error);
                    ok += 1;
                }
            }
            assert_eq!(ok, n, "every call answered");
            stop.store(true, Ordering::Relaxed);
            server.join().unwrap().unwrap()
        });
        (counters, generation)
    }

    fn image_service() -> Service {
        let text = "app = \"image\"\nproto = \"image.proto\"\nlanes = 2\nhandlers = 2\n";
        Service {
            config: toml::from_str(text).unwrap(),
            file: "image.toml".into(),
            table: tern_rpc::image::schema(),
            units: vec![tern_rpc::service::Units { kernel: KERNEL, key: Some([5; 32]), count: 2, reconfigure_ms: 0 }],
            samples: Vec::new(),
        }
    }

    /// The image placed in host memory, a unit that computes it: the first calls move it to the
    /// card, the table follows (automatic field updating), the lanes drain and go on with the
    /// new table, and later calls move nothing; every call is answered once, none lost in the
    /// change.
    #[test]
    fn a_table_change_under_load_loses_nothing_and_stops_the_moves() {
        let mut svc = image_service();
        let avatar = svc.table.class_by_name("image.Avatar").unwrap().id;
        svc.table = svc.table.with_placement(avatar, 2, Placement::Host).unwrap();
        let (c, generation) = run_calls(&svc, Mode::Rpcnic, 300, 8);
        assert_eq!(generation, 1);
        assert_eq!(c.table_changes.load(Ordering::Relaxed), 1);
        assert_eq!(c.answered(Status::Ok), 300);
        // Only calls decoded before the change (at most those in flight) moved the image.
        let moved = c.moved_values.load(Ordering::Relaxed);
        assert!((1..=8).contains(&moved), "{moved} moves");
        assert_eq!(c.on_unit.load(Ordering::Relaxed), 300);
        // Updating off: every call moves it.
        svc.config.auto_update = false;
        let (c, generation) = run_calls(&svc, Mode::Rpcnic, 100, 8);
        assert_eq!((generation, c.moved_values.load(Ordering::Relaxed)), (0, 100));
    }

    /// The three modes split the work as their designs do: compute units or the host, moves
    /// to the card and back in protoacc-pcie only, and CPU charged to the host by design.
    #[test]
    fn each_mode_puts_the_work_where_its_design_does() {
        let svc = image_service();
        for (mode, on_unit, moved) in [(Mode::CpuOnly, 0, 0), (Mode::ProtoaccPcie, 100, 200), (Mode::Rpcnic, 100, 0)] {
            let (c, _) = run_calls(&svc, mode, 100, 4);
            assert_eq!(c.on_unit.load(Ordering::Relaxed), on_unit, "{mode}");
            assert_eq!(c.on_host.load(Ordering::Relaxed), 100 - on_unit, "{mode}");
            assert_eq!(c.moved_values.load(Ordering::Relaxed), moved, "{mode}");
            let codec = c.lane_codec_ns.load(Ordering::Relaxed);
            assert_eq!(codec > 0, mode != Mode::CpuOnly, "{mode}: the lanes' (de)serialization");
            assert_eq!(c.device_cpu_ns(mode) == 0, mode == Mode::CpuOnly, "{mode}");
            assert!(c.host_cpu_ns(mode) >= c.handler_cpu_ns.load(Ordering::Relaxed), "{mode}");
        }
    }
}
