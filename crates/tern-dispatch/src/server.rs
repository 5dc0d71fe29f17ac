//! The dispatch server: the RSD runtime around [`crate::rsd`], the paper's baselines in the same
//! binary, and the KV service as the application (QingNiao §3.3, §4.2, §5.1).
//!
//! Every mode binds its sockets to one address with `SO_REUSEPORT`; they differ in who receives
//! and who decides:
//!
//! - [`Mode::Rsd`] (Tern): a classic BPF program on the socket group shards requests among the
//!   RSDs by request id (QNP header bytes 2..6), so all the packets of a request meet the same
//!   RSD and its stash. An RSD runs the compiled matcher on a first packet's dispatch bytes in
//!   place, keeps the decision in its stash for later packets, and moves the packet buffer (no
//!   copy) into the chosen worker's ring, ringing the worker's doorbell once per batch. Workers
//!   reassemble, run the handler and reply on their own sockets, shared-nothing. Where the RSDs
//!   run is the [`Placement`]: in each worker (the default; a worker keeps its own requests and
//!   hands off the rest, `RsdPort`) or on `dispatchers` threads of their own (the workers'
//!   sockets are then bound to the same address but never chosen for receiving).
//! - [`Mode::Rss`]: one socket per worker and no dispatcher; the kernel's flow hash picks the
//!   worker (L3/4 dispatch, the upper bound; the rules are ignored).
//! - [`Mode::SwRing`]: the software straw-man: dispatcher threads decode every record of the
//!   first packet and loop over the rules one by one ([`NaiveApp`]), then hand off over the same
//!   rings as Tern.
//! - [`Mode::SwUds`]: the same dispatcher handing off over Unix domain datagram sockets (one
//!   `sendmmsg` per worker per batch; the worker receives with `recvmmsg`).
//!
//! All server threads run on the same cores (`cores`), whatever the mode.

use std::io;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tern_io::memnet::{MemNet, MemServerTx, Steer};
use tern_io::ring::RingReceiver;
use tern_io::ring::{RingSender, Split, ring};
use tern_io::udp::{UdpConfig, UdpPort};
use tern_io::uds::UdsPort;
use tern_io::{Batch, DEFAULT_BATCH, Packet, Pool, Port, PortStats};

use crate::apps::kv::Get;
use crate::kv::KvStore;
use crate::matcher::Machine;
use crate::matcher::reference::{NaiveApp, NaiveMatcher};
use crate::rsd::{Decide, Rsd, RsdDrop, RsdStats, Verdict, sender_hash};
use crate::rules::RuleSet;
use tern_qnp::runtime::{QnpServer, Request};
use tern_qnp::{self as qnp, ExactlyOnce, QnpConfig};

/// How requests reach workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Tern's receive-side dispatcher.
    Rsd,
    /// Kernel `SO_REUSEPORT` flow hashing only (L3/4, no L7 decision).
    Rss,
    /// Software dispatcher (decode + rule loop), ring hand-off.
    SwRing,
    /// Software dispatcher (decode + rule loop), Unix domain socket hand-off.
    SwUds,
}

impl Mode {
    /// Every mode, Tern first.
    pub const ALL: [Mode; 4] = [Mode::Rsd, Mode::Rss, Mode::SwRing, Mode::SwUds];

    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Rsd => "rsd",
            Mode::Rss => "rss",
            Mode::SwRing => "sw-ring",
            Mode::SwUds => "sw-uds",
        }
    }

    /// Whether this mode applies the L7 rules.
    pub fn uses_rules(self) -> bool {
        self != Mode::Rss
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("unknown mode `{s}` (expected rsd, rss, sw-ring or sw-uds)"))
    }
}

/// Where Tern's RSDs run (mode `rsd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Placement {
    /// `dispatchers` RSD threads of their own between the sockets and the workers (the paper's
    /// layout, with the NIC's RSDs as threads).
    Dedicated,
    /// One RSD in each worker thread, run to completion: each worker receives on its own
    /// socket (requests sharded by request id), decides each first packet, keeps what is its
    /// own and moves the rest into the chosen worker's ring. No thread hop for a worker's own
    /// requests and no threads beyond the workers, as with `rss`. The default: the fastest on
    /// CPU cores (`tern bench dispatch`, docs/dispatch.md).
    #[default]
    Workers,
}

impl Placement {
    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Dedicated => "dedicated",
            Placement::Workers => "workers",
        }
    }
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Placement, String> {
        match s {
            "dedicated" => Ok(Placement::Dedicated),
            "workers" => Ok(Placement::Workers),
            other => Err(format!("unknown RSD placement `{other}` (expected dedicated or workers)")),
        }
    }
}

impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What carries datagrams between clients and the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// Kernel UDP sockets on `listen` (an `SO_REUSEPORT` group).
    #[default]
    Udp,
    /// An in-process [`MemNet`] (no kernel): clients must be in this process and come from
    /// [`Server::mem_net`]. For benchmarks that show the dispatch step's own cost.
    Mem,
}

impl Transport {
    /// The name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Udp => "udp",
            Transport::Mem => "mem",
        }
    }
}

impl FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Transport, String> {
        match s {
            "udp" => Ok(Transport::Udp),
            "mem" => Ok(Transport::Mem),
            other => Err(format!("unknown transport `{other}` (expected udp or mem)")),
        }
    }
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A server's port to the network: a UDP socket, or a [`MemNet`] receive queue (with the
/// network's sending side), or the sending side alone.
#[derive(Debug)]
enum NetPort {
    Udp(UdpPort),
    MemRx(RingReceiver, MemServerTx),
    MemTx(MemServerTx),
}

impl Port for NetPort {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        match self {
            NetPort::Udp(p) => p.recv(now, batch),
            NetPort::MemRx(q, _) => q.recv(now, batch),
            NetPort::MemTx(_) => Ok(0),
        }
    }
    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        match self {
            NetPort::Udp(p) => p.send(now, batch),
            NetPort::MemRx(_, t) | NetPort::MemTx(t) => t.send(now, batch),
        }
    }
    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        match self {
            NetPort::Udp(p) => p.wait(timeout),
            NetPort::MemRx(q, _) => q.wait(timeout),
            NetPort::MemTx(t) => t.wait(timeout),
        }
    }
    fn local_addr(&self) -> SocketAddr {
        match self {
            NetPort::Udp(p) => p.local_addr(),
            NetPort::MemRx(_, t) | NetPort::MemTx(t) => t.local_addr(),
        }
    }
    fn poll_at(&self) -> Option<Instant> {
        match self {
            NetPort::Udp(p) => p.poll_at(),
            _ => None,
        }
    }
    fn stats(&self) -> PortStats {
        match self {
            NetPort::Udp(p) => p.stats(),
            NetPort::MemRx(q, t) => {
                let mut s = q.stats();
                let t = t.stats();
                (s.tx_packets, s.tx_bytes, s.tx_dropped, s.tx_batches) =
                    (t.tx_packets, t.tx_bytes, t.tx_dropped, t.tx_batches);
                s
            }
            NetPort::MemTx(t) => t.stats(),
        }
    }
}

/// How to run a server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Dispatch mode.
    pub mode: Mode,
    /// Address to serve on (port 0 picks one).
    pub listen: SocketAddr,
    /// Worker threads (queues).
    pub workers: u16,
    /// RSD threads (`rsd`, dedicated placement) or software dispatcher threads (`sw-*`); unused
    /// by `rss` and by RSDs placed on the workers.
    pub dispatchers: u16,
    /// Where the RSDs run (mode `rsd`).
    pub placement: Placement,
    /// Stash entries per RSD (the profile's `rsd.stash_entries`).
    pub stash_entries: usize,
    /// Bytes of a first packet the matcher may read (the profile's ByteStream), if bounded.
    pub bytestream: Option<usize>,
    /// Packets each worker's ring holds.
    pub ring_entries: usize,
    /// QNP configuration of the workers.
    pub qnp: QnpConfig,
    /// Cores every server thread may run on (empty: no restriction).
    pub cores: Vec<usize>,
    /// Kernel UDP (the default) or an in-process network.
    pub transport: Transport,
    /// With the RSDs in the workers: compile the rules into the socket group's steering
    /// program ([`crate::steer`]), so that requests reach their worker's socket and need no
    /// hand-off. Off: the group shards by request id.
    pub kernel_steering: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            mode: Mode::Rsd,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            workers: 4,
            dispatchers: 1,
            placement: Placement::Workers,
            stash_entries: 256,
            bytestream: None,
            ring_entries: 4096,
            qnp: QnpConfig::default(),
            cores: Vec::new(),
            transport: Transport::Udp,
            kernel_steering: true,
        }
    }
}

/// Counters of one dispatcher thread (a snapshot, published every few milliseconds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DispatcherStats {
    /// The RSD core's counters.
    pub rsd: RsdStats,
    /// Packets dropped because the chosen worker's ring (or socket) was full.
    pub handoff_full: u64,
    /// Packets decided for another worker than the one whose socket received them, and moved
    /// into its ring (RSDs in the workers; with kernel steering, what the program placed
    /// elsewhere than the RSD decides).
    pub handed_off: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Datagrams the receiving socket dropped: longer than a receive buffer (the kernel cut them,
    /// `MSG_TRUNC`), or from an address family the port cannot name.
    pub oversize: u64,
    /// Time spent deciding received packets and handing them off (the RSD or the software
    /// dispatcher, ring or socket pushes included; receiving excluded), in ns.
    pub dispatch_ns: u64,
}

/// Counters of one worker thread.
#[derive(Debug, Default)]
pub struct WorkerCounters {
    /// Requests handled (each once: duplicates are suppressed by QNP).
    pub requests: AtomicU64,
    /// GETs whose key was found.
    pub found: AtomicU64,
    /// Store errors (answered as not found).
    pub store_errors: AtomicU64,
    /// The QNP server's counters (snapshot).
    pub qnp: Mutex<qnp::Stats>,
    /// Datagrams the worker's own receiving port dropped (see [`DispatcherStats::oversize`]).
    pub oversize: AtomicU64,
    /// Requests partly received when the server stopped (their other packets never came).
    pub partial_at_stop: AtomicU64,
    /// Time spent answering requests (the handler, encoding and sending responses), in ns.
    pub serve_ns: AtomicU64,
}

/// One reason the dispatch server drops a datagram, as `tern_dispatch_drops_total{reason}` labels
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropName {
    /// The `/metrics` label.
    pub name: String,
    /// Who counts it: `dispatcher` (the RSD or software dispatcher, before a worker), `socket`
    /// (the receiving port), or `worker` (the worker's QNP server).
    pub stage: &'static str,
    /// What it means.
    pub meaning: &'static str,
}

const HANDOFF_FULL: &str = "The chosen worker's ring (or Unix socket) was full.";
const OVERSIZE: &str = "A datagram longer than a receive buffer (the kernel cut it, `MSG_TRUNC`), or from an address the port cannot name.";

/// Every reason the dispatch server drops a datagram it read, in the order `/metrics` lists them:
/// the dispatcher's reasons, the receiving socket's, then the workers' QNP reasons prefixed
/// `qnp_`. `docs/qnp.md` §8 is generated from this list (a test compares them).
pub fn drop_reasons() -> Vec<DropName> {
    let mut out: Vec<DropName> = RsdDrop::ALL
        .iter()
        .map(|r| DropName { name: r.as_str().into(), stage: "dispatcher", meaning: r.meaning() })
        .collect();
    out.push(DropName { name: "handoff_full".into(), stage: "dispatcher", meaning: HANDOFF_FULL });
    out.push(DropName { name: "oversize".into(), stage: "socket", meaning: OVERSIZE });
    out.extend(qnp::DropReason::ALL.iter().map(|r| DropName {
        name: format!("qnp_{}", r.as_str()),
        stage: "worker",
        meaning: r.meaning(),
    }));
    out
}

impl Shared {
    /// Drops by reason, every reason of [`drop_reasons`] in its order, zeros included.
    pub fn drop_counts(&self) -> Vec<(String, u64)> {
        let snaps: Vec<DispatcherStats> =
            self.dispatchers.iter().map(|m| m.lock().map(|s| s.clone()).unwrap_or_default()).collect();
        let t = total(&snaps);
        let mut qnp = [0u64; qnp::DropReason::ALL.len()];
        let mut oversize = t.oversize;
        for w in &self.workers {
            oversize += w.oversize.load(Ordering::Relaxed);
            if let Ok(s) = w.qnp.lock() {
                for (a, b) in qnp.iter_mut().zip(s.drops.iter()) {
                    *a += b;
                }
            }
        }
        let mut counts: Vec<u64> = RsdDrop::ALL.iter().map(|r| t.rsd.drops_of(*r)).collect();
        counts.push(t.handoff_full);
        counts.push(oversize);
        counts.extend(qnp);
        drop_reasons().into_iter().map(|d| d.name).zip(counts).collect()
    }
}

/// Everything the server's threads publish.
#[derive(Debug)]
pub struct Shared {
    /// Per dispatcher thread.
    pub dispatchers: Vec<Mutex<DispatcherStats>>,
    /// Per worker.
    pub workers: Vec<WorkerCounters>,
    /// The rule generation each dispatcher has applied.
    pub applied: Vec<AtomicU64>,
    /// The current rule generation (1 at start).
    pub generation: AtomicU64,
    /// Threads still reading sockets while the server stops (workers finish what was read
    /// once this is 0).
    pub receiving: std::sync::atomic::AtomicUsize,
}

/// One application's matcher, compiled off the fast path for the mode's dispatchers.
#[derive(Clone)]
enum AppMatcher {
    /// Tern's compiled machine (`rsd`).
    Compiled(Arc<Machine>),
    /// The baselines' decode-and-loop matcher (`sw-ring`, `sw-uds`).
    Naive(Arc<NaiveApp>),
}

impl AppMatcher {
    fn compiled(self) -> Option<Arc<Machine>> {
        match self {
            AppMatcher::Compiled(m) => Some(m),
            AppMatcher::Naive(_) => None,
        }
    }
    fn naive(self) -> Option<Arc<NaiveApp>> {
        match self {
            AppMatcher::Naive(n) => Some(n),
            AppMatcher::Compiled(_) => None,
        }
    }
}

/// Compiles application `app_id` of `set` into the matcher `mode` runs.
fn compile_app(mode: Mode, set: &RuleSet, app_id: u8) -> Result<AppMatcher, String> {
    let name = set.apps.iter().find(|a| a.id == app_id).map_or("?", |a| a.name.as_str());
    if mode == Mode::Rsd {
        let m = Machine::compile(set, app_id).map_err(|e| format!("app `{name}`: {e}"))?;
        Ok(AppMatcher::Compiled(Arc::new(m)))
    } else {
        let n = NaiveMatcher::new(set).app(app_id).ok_or_else(|| format!("app `{name}` has no rules table"))?;
        Ok(AppMatcher::Naive(Arc::new(n)))
    }
}

enum Command {
    Install { app_id: u8, matcher: AppMatcher, generation: u64 },
}

/// A running server. Dropping it stops it.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    mode: Mode,
    /// Set to stop: receivers stop reading sockets, then workers finish what was read.
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<io::Result<()>>>,
    shared: Arc<Shared>,
    controls: Vec<mpsc::Sender<Command>>,
    rules: Mutex<RuleSet>,
    net: Option<MemNet>,
    /// The socket group's steering, when the rules are compiled into it.
    steering: Option<KernelSteering>,
}

/// Rules compiled into the socket group's steering program, and a handle to re-attach it.
#[derive(Debug)]
struct KernelSteering {
    /// A handle of one socket of the group (UDP), or none (the mem transport's network).
    socket: Option<std::net::UdpSocket>,
    sockets: u16,
    now: Mutex<crate::steer::Steering>,
}

impl KernelSteering {
    fn attach(&self, steering: crate::steer::Steering, net: Option<&MemNet>) -> io::Result<()> {
        if let Some(s) = &self.socket {
            use std::os::fd::AsRawFd;
            tern_io::udp::attach_reuseport_cbpf(s.as_raw_fd(), &steering.program)?;
        }
        if let Some(n) = net {
            n.set_steer(Steer::Program(Arc::new(steering.program.clone())));
        }
        *self.now.lock().expect("steering lock") = steering;
        Ok(())
    }
}

impl std::fmt::Debug for Command {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Command::Install { app_id, generation, .. } = self;
        write!(f, "Install {{ app_id: {app_id}, generation: {generation} }}")
    }
}

/// What the KV workers serve: each application's request types whose message is `Get` (the one
/// message the KV handler answers), with their dispatch fields. Other types, declared or not,
/// are dropped by the workers' QNP servers as `unknown_req_type`, never decoded as a `Get`.
#[derive(Debug, Clone, Default)]
struct Served {
    apps: Vec<u8>,
    types: Vec<(u8, u8, Vec<u8>)>,
}

fn apps_of(set: &RuleSet) -> Served {
    let mut served = Served::default();
    for a in &set.apps {
        served.apps.push(a.id);
        for (m, t) in &a.requests {
            if m.name == <Get as tern_wire::tlv::Message>::NAME {
                served.types.push((a.id, *t, m.dispatch_fields()));
            }
        }
    }
    served
}

/// An RSD (or software dispatcher) with every application's matcher installed.
fn new_rsd<D: Decide>(
    opts: &ServerOptions,
    apps: &[(u8, AppMatcher)],
    pick: fn(AppMatcher) -> Option<Arc<D>>,
) -> Rsd<D> {
    let mut rsd = Rsd::<D>::new(opts.stash_entries, opts.workers);
    for (app, m) in apps {
        rsd.install(*app, pick(m.clone()));
    }
    if let Some(b) = opts.bytestream {
        rsd.set_bytestream(b);
    }
    rsd
}

impl Server {
    /// Starts a server of the KV `store` with the dispatch `rules`.
    pub fn start(opts: &ServerOptions, rules: RuleSet, store: KvStore) -> io::Result<Server> {
        if opts.workers == 0 {
            return Err(io::Error::other("workers must be at least 1"));
        }
        let on_workers = opts.mode == Mode::Rsd && opts.placement == Placement::Workers;
        if opts.mode.uses_rules() && !on_workers && opts.dispatchers == 0 {
            return Err(io::Error::other("dispatchers must be at least 1"));
        }
        if let Some(q) = rules.max_queue()
            && q >= opts.workers
        {
            return Err(io::Error::other(format!(
                "the rules send requests to queue {q} but there are only {} workers (queues 0..{})",
                opts.workers,
                opts.workers - 1
            )));
        }
        // Each application's matcher, for the modes that apply rules.
        let compiled: Vec<(u8, AppMatcher)> = if opts.mode.uses_rules() {
            rules
                .apps
                .iter()
                .map(|a| compile_app(opts.mode, &rules, a.id).map(|m| (a.id, m)))
                .collect::<Result<_, _>>()
                .map_err(io::Error::other)?
        } else {
            Vec::new()
        };
        let apps = apps_of(&rules);
        // Dispatcher slots (stats, acks): one per RSD thread, or per worker when they run there.
        let n_disp = match (opts.mode.uses_rules(), on_workers) {
            (false, _) => 0,
            (true, true) => usize::from(opts.workers),
            (true, false) => usize::from(opts.dispatchers),
        };
        let shared = Arc::new(Shared {
            dispatchers: (0..n_disp).map(|_| Mutex::new(DispatcherStats::default())).collect(),
            workers: (0..opts.workers).map(|_| WorkerCounters::default()).collect(),
            applied: (0..n_disp).map(|_| AtomicU64::new(1)).collect(),
            generation: AtomicU64::new(1),
            receiving: std::sync::atomic::AtomicUsize::new(0),
        });
        let pool = Pool::new(16384, tern_io::DEFAULT_BUF_SIZE);
        let udp_cfg = UdpConfig { reuse_port: true, ..UdpConfig::default() };
        let receivers = if opts.mode.uses_rules() && !on_workers { n_disp } else { usize::from(opts.workers) };
        // Threads that read sockets and hand packets to other threads: they must all have
        // stopped before a worker may take an empty queue for the end.
        let handing_off = if opts.mode.uses_rules() { receivers } else { 0 };
        shared.receiving.store(handing_off, Ordering::Relaxed);
        let mut steer_handle = None;
        let (rx_ports, addr, net) = match opts.transport {
            Transport::Udp => {
                // SO_REUSEPORT would let this server join another process's group on the same
                // address and silently share its traffic: a plain bind first proves it is free.
                if opts.listen.port() != 0 {
                    std::net::UdpSocket::bind(opts.listen).map_err(|e| {
                        io::Error::new(
                            e.kind(),
                            format!("cannot listen on {}: {e} (another server holds it?)", opts.listen),
                        )
                    })?;
                }
                // Receiving sockets first (the steering program indexes the group in bind order).
                let first = UdpPort::bind(opts.listen, &pool, &udp_cfg)
                    .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {}: {e}", opts.listen)))?;
                let addr = first.local_addr();
                let mut ports = vec![first];
                for _ in 1..receivers {
                    ports.push(UdpPort::bind(addr, &pool, &udp_cfg)?);
                }
                if opts.mode.uses_rules() {
                    ports[0]
                        .steer_reuseport_by_payload(tern_wire::qnp::field::REQ_ID.start as u32, receivers as u32)?;
                }
                steer_handle = Some(ports[0].socket().try_clone()?);
                (ports.into_iter().map(NetPort::Udp).collect::<Vec<_>>(), addr, None)
            }
            Transport::Mem => {
                // The same steering as the socket group: by request id, or by flow for `rss`.
                let steer = if opts.mode.uses_rules() {
                    Steer::Payload { offset: tern_wire::qnp::field::REQ_ID.start }
                } else {
                    Steer::FlowHash
                };
                let (net, queues) = MemNet::new(receivers, steer, opts.ring_entries)?;
                let ports = queues.into_iter().map(|q| NetPort::MemRx(q, net.server_tx())).collect();
                (ports, net.server_addr(), Some(net))
            }
        };
        // With the RSDs in the workers, the kernel (or the mem network) places each request on
        // its worker's socket by the rules, and the RSD there keeps it (crate::steer).
        let steering = if on_workers && opts.kernel_steering {
            let first = crate::steer::Steering::compile(&rules, opts.workers);
            let k = KernelSteering { socket: steer_handle, sockets: opts.workers, now: Mutex::new(first.clone()) };
            k.attach(first, net.as_ref())?;
            Some(k)
        } else {
            None
        };
        let tx_port = |net: &Option<MemNet>| -> io::Result<NetPort> {
            match net {
                None => Ok(NetPort::Udp(UdpPort::bind(addr, &pool, &udp_cfg)?)),
                Some(n) => Ok(NetPort::MemTx(n.server_tx())),
            }
        };
        let stop = Arc::new(AtomicBool::new(false));
        // One exactly-once memory for all workers: a retransmission that a rule reload sends to
        // another worker than its original still finds the request remembered (docs/qnp.md §7).
        let memory = Arc::new(ExactlyOnce::new(&opts.qnp, usize::from(opts.workers) * 4));
        let workers = WorkerCtx {
            index: 0,
            shared: shared.clone(),
            stop: stop.clone(),
            store: store.clone(),
            pool: pool.clone(),
            qnp: opts.qnp.clone(),
            served: apps.clone(),
            memory,
            socket_only: !opts.mode.uses_rules(),
        };
        let mut threads = Vec::new();
        let mut controls = Vec::new();
        let spawn = |name: String, cores: Vec<usize>, f: Box<dyn FnOnce() -> io::Result<()> + Send>| {
            thread::Builder::new().name(name).spawn(move || {
                if !cores.is_empty() {
                    tern_io::pin_to_cores(&cores);
                }
                f()
            })
        };
        if on_workers {
            // Each worker's socket gets the requests whose id maps to it; the RSD in the worker
            // keeps its own and rings the others' doorbells (eventfds: a worker sleeps on its
            // socket and its ring at once).
            let mut senders = Vec::new();
            let mut own = Vec::new();
            for _ in 0..opts.workers {
                let (tx, rx) = tern_io::ring::ring_with_fd(opts.ring_entries, addr)?;
                senders.push(tx);
                own.push(rx);
            }
            for (w, (udp, own)) in rx_ports.into_iter().zip(own).enumerate() {
                let (ctl_tx, ctl_rx) = mpsc::channel();
                controls.push(ctl_tx);
                let port = RsdPort {
                    index: w,
                    udp,
                    own,
                    rings: senders.clone(),
                    rung: vec![false; senders.len()],
                    rsd: new_rsd(opts, &compiled, AppMatcher::compiled),
                    scratch: Batch::new(DEFAULT_BATCH),
                    ctl: ctl_rx,
                    shared: shared.clone(),
                    pool: pool.clone(),
                    stats: DispatcherStats::default(),
                    last_publish: Instant::now(),
                    stop: stop.clone(),
                    closed: false,
                };
                let ctx = workers.for_worker(w);
                threads.push(spawn(format!("tern-worker-{w}"), opts.cores.clone(), Box::new(move || ctx.run(port)))?);
            }
        } else if !opts.mode.uses_rules() {
            for (w, port) in rx_ports.into_iter().enumerate() {
                let ctx = workers.for_worker(w);
                threads.push(spawn(format!("tern-worker-{w}"), opts.cores.clone(), Box::new(move || ctx.run(port)))?);
            }
        } else {
            let mut tx_ports = Vec::new();
            for _ in 0..opts.workers {
                tx_ports.push(tx_port(&net)?);
            }
            let mut senders: Vec<RingSender> = Vec::new();
            let mut uds_disp: Vec<Vec<UdsPort>> = (0..n_disp).map(|_| Vec::new()).collect();
            for (w, tx) in tx_ports.into_iter().enumerate() {
                let ctx = workers.for_worker(w);
                let name = format!("tern-worker-{w}");
                if opts.mode == Mode::SwUds {
                    // One link per worker; every dispatcher sends on its own handle of it.
                    let (a, rx) = tern_io::uds::pair(&pool, addr, 4 << 20)?;
                    for d in uds_disp.iter_mut() {
                        d.push(a.try_clone()?);
                    }
                    threads.push(spawn(name, opts.cores.clone(), Box::new(move || ctx.run(Split { rx, tx })))?);
                } else {
                    let (s, rx) = ring(opts.ring_entries, addr);
                    senders.push(s);
                    threads.push(spawn(name, opts.cores.clone(), Box::new(move || ctx.run(Split { rx, tx })))?);
                }
            }
            for (d, (port, uds)) in rx_ports.into_iter().zip(uds_disp).enumerate() {
                let (ctl_tx, ctl_rx) = mpsc::channel();
                controls.push(ctl_tx);
                let handoff = if opts.mode == Mode::SwUds {
                    Handoff::Uds(uds.into_iter().map(|p| (p, Batch::new(DEFAULT_BATCH))).collect())
                } else {
                    Handoff::Ring(senders.clone())
                };
                let (stop, shared, pool) = (stop.clone(), shared.clone(), pool.clone());
                let name = format!("tern-dispatch-{d}");
                let common = DispatcherCtx { index: d, port, handoff, ctl: ctl_rx, stop, shared, pool };
                let f: Box<dyn FnOnce() -> io::Result<()> + Send> = if opts.mode == Mode::Rsd {
                    let rsd = new_rsd(opts, &compiled, AppMatcher::compiled);
                    Box::new(move || common.run(rsd, AppMatcher::compiled))
                } else {
                    let rsd = new_rsd(opts, &compiled, AppMatcher::naive);
                    Box::new(move || common.run(rsd, AppMatcher::naive))
                };
                threads.push(spawn(name, opts.cores.clone(), f)?);
            }
        }
        Ok(Server { addr, mode: opts.mode, stop, threads, shared, controls, rules: Mutex::new(rules), net, steering })
    }

    /// The address clients send to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How the socket group places requests: `Some` with the compiled rules when kernel steering
    /// is on (RSDs in the workers), `None` when it shards by request id (or flow, for `rss`).
    pub fn steering(&self) -> Option<crate::steer::Steering> {
        self.steering.as_ref().map(|k| k.now.lock().expect("steering lock").clone())
    }

    /// The in-process network clients must use (transport `mem`), if it is one.
    pub fn mem_net(&self) -> Option<&MemNet> {
        self.net.as_ref()
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// What the threads publish.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The rules in force.
    pub fn rules(&self) -> RuleSet {
        self.rules.lock().expect("rules lock").clone()
    }

    /// Replaces one application's rules (hitless): `new` is checked and compiled here, off the
    /// fast path, then every dispatcher swaps that application's matcher between two batches.
    /// Other applications are untouched. Returns the new generation once every dispatcher has
    /// applied it.
    pub fn reconfigure(&self, app_id: u8, new: &RuleSet) -> Result<u64, String> {
        if !self.mode.uses_rules() {
            return Err(format!("mode {} applies no L7 rules", self.mode));
        }
        if !new.apps.iter().any(|a| a.id == app_id) {
            return Err(format!("the new rules do not define application {app_id}"));
        }
        let workers = self.shared.workers.len() as u16;
        if let Some(q) = new.rules.iter().filter(|r| r.app_id == app_id).map(|r| r.queue).max()
            && q >= workers
        {
            return Err(format!("a rule sends requests to queue {q} but there are only {workers} workers"));
        }
        let mut merged = self.rules();
        if !merged.apps.iter().any(|a| a.id == app_id) {
            return Err(format!("application {app_id} is not served (the server started without it)"));
        }
        merged.replace_app(app_id, new);
        let matcher = compile_app(self.mode, &merged, app_id)?;
        let generation = self.shared.generation.fetch_add(1, Ordering::SeqCst) + 1;
        for c in &self.controls {
            let cmd = Command::Install { app_id, matcher: matcher.clone(), generation };
            c.send(cmd).map_err(|_| "a dispatcher thread has stopped".to_string())?;
        }
        // The socket group's program follows the new rules; until it does, the RSDs hand off
        // what it places elsewhere.
        if let Some(k) = &self.steering {
            let steering = crate::steer::Steering::compile(&merged, k.sockets);
            k.attach(steering, self.net.as_ref()).map_err(|e| format!("cannot attach the steering program: {e}"))?;
        }
        *self.rules.lock().expect("rules lock") = merged;
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.shared.applied.iter().any(|a| a.load(Ordering::Acquire) < generation) {
            if Instant::now() > deadline {
                return Err("dispatchers did not apply the new rules within 5 s".into());
            }
            thread::sleep(Duration::from_micros(200));
        }
        Ok(generation)
    }

    /// A snapshot of every dispatcher's counters.
    pub fn dispatcher_stats(&self) -> Vec<DispatcherStats> {
        self.shared.dispatchers.iter().map(|m| m.lock().expect("stats lock").clone()).collect()
    }

    /// Requests each worker handled.
    pub fn worker_requests(&self) -> Vec<u64> {
        self.shared.workers.iter().map(|w| w.requests.load(Ordering::Relaxed)).collect()
    }

    /// Stops the server: the threads that read sockets stop reading, the workers answer every
    /// request already read (in their queues or completed by what was queued), then every thread
    /// ends. Requests only partly received by then are counted (`partial_at_stop`). Reports the
    /// first error any thread hit.
    pub fn stop(mut self) -> io::Result<()> {
        self.shutdown()
    }

    /// Whether one of its threads (a dispatcher, a worker) ended while the server runs — an
    /// I/O error it returned, or a panic — leaving the server without it: then the server stops
    /// (every other thread asked to and joined) and this names the thread and why. A serving
    /// process checks it as it waits, and exits with the error rather than go on half served.
    pub fn ended_early(&mut self) -> Option<io::Error> {
        if self.stop.load(Ordering::Acquire) {
            return None;
        }
        let ended = tern_io::take_ended(&mut self.threads, |r| match r {
            Ok(()) => "it returned".to_string(),
            Err(e) => format!("error: {e}"),
        })?;
        let _ = self.shutdown();
        Some(io::Error::other(format!("{ended}; the server stopped")))
    }

    fn shutdown(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Release);
        let mut first = Ok(());
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let r = t.join().map_err(|_| io::Error::other("server thread panicked")).and_then(|r| r);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

enum Handoff {
    Ring(Vec<RingSender>),
    Uds(Vec<(UdsPort, Batch)>),
}

struct DispatcherCtx {
    index: usize,
    port: NetPort,
    handoff: Handoff,
    ctl: mpsc::Receiver<Command>,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    pool: Pool,
}

const PUBLISH_EVERY: Duration = Duration::from_millis(20);

impl DispatcherCtx {
    fn run<D: Decide>(mut self, mut rsd: Rsd<D>, pick: fn(AppMatcher) -> Option<Arc<D>>) -> io::Result<()> {
        // However this thread ends, it reads and hands off nothing more after.
        let _receiving = Receiving(self.shared.clone());
        let mut batch = Batch::new(DEFAULT_BATCH);
        let mut stats = DispatcherStats::default();
        let mut rung = vec![false; self.shared.workers.len()];
        let mut last_publish = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            apply_installs(&self.ctl, &mut rsd, pick, &self.shared.applied[self.index]);
            let now = Instant::now();
            let n = self.port.recv(now, &mut batch)?;
            if n == 0 {
                self.port.wait(Duration::from_millis(2))?;
            } else {
                stats.rx_packets += n as u64;
                let t0 = Instant::now();
                for p in batch.drain() {
                    match rsd.dispatch(sender_hash(&p.peer()), p.data()) {
                        Verdict::Queue(q) => {
                            let q = usize::from(q);
                            match &mut self.handoff {
                                Handoff::Ring(rings) => push_ring(rings, &mut rung, q, p, &mut stats, &self.pool),
                                Handoff::Uds(links) => match links.get_mut(q) {
                                    Some((_, b)) => {
                                        if let Some(p) = b.push(p) {
                                            stats.handoff_full += 1;
                                            self.pool.put(p);
                                        }
                                    }
                                    None => stats.handoff_full += 1,
                                },
                            }
                        }
                        Verdict::Drop(_) => self.pool.put(p),
                    }
                }
                match &mut self.handoff {
                    Handoff::Ring(rings) => ring_marked(rings, &mut rung),
                    Handoff::Uds(links) => {
                        for (port, b) in links.iter_mut() {
                            if !b.is_empty() {
                                let want = b.len();
                                let sent = port.send(now, b)?;
                                stats.handoff_full += (want - sent) as u64;
                            }
                        }
                    }
                }
                stats.dispatch_ns += t0.elapsed().as_nanos() as u64;
            }
            if last_publish.elapsed() >= PUBLISH_EVERY {
                last_publish = Instant::now();
                stats.rsd.clone_from(rsd.stats());
                stats.oversize = self.port.stats().rx_dropped;
                self.shared.dispatchers[self.index].lock().expect("stats lock").clone_from(&stats);
            }
        }
        stats.rsd.clone_from(rsd.stats());
        stats.oversize = self.port.stats().rx_dropped;
        *self.shared.dispatchers[self.index].lock().expect("stats lock") = stats;
        Ok(())
    }
}

/// Applies the rule installs waiting on `ctl` (between two batches), acknowledging each
/// generation in `applied`.
fn apply_installs<D: Decide>(
    ctl: &mpsc::Receiver<Command>,
    rsd: &mut Rsd<D>,
    pick: fn(AppMatcher) -> Option<Arc<D>>,
    applied: &AtomicU64,
) {
    while let Ok(Command::Install { app_id, matcher, generation }) = ctl.try_recv() {
        rsd.install(app_id, pick(matcher));
        applied.store(generation, Ordering::Release);
    }
}

/// Moves `p` into ring `q` and marks its doorbell; a full (or missing) ring drops it, counted.
#[inline]
fn push_ring(rings: &[RingSender], rung: &mut [bool], q: usize, p: Packet, stats: &mut DispatcherStats, pool: &Pool) {
    match rings.get(q).map(|r| r.push(p)) {
        Some(Ok(())) => rung[q] = true,
        Some(Err(p)) => {
            stats.handoff_full += 1;
            pool.put(p);
        }
        None => stats.handoff_full += 1,
    }
}

/// Rings each marked doorbell once and clears the marks.
fn ring_marked(rings: &[RingSender], rung: &mut [bool]) {
    for (r, flag) in rings.iter().zip(rung.iter_mut()) {
        if std::mem::take(flag) {
            r.ring_doorbell();
        }
    }
}

/// A worker's port when its RSD runs in the worker ([`Placement::Workers`]): receiving runs the
/// RSD over what the worker's socket got, keeps the requests decided for this worker, moves the
/// others into their worker's ring, and adds what other workers moved into this one's ring.
struct RsdPort {
    index: usize,
    udp: NetPort,
    own: tern_io::ring::RingReceiver,
    rings: Vec<RingSender>,
    rung: Vec<bool>,
    rsd: Rsd<Machine>,
    scratch: Batch,
    ctl: mpsc::Receiver<Command>,
    shared: Arc<Shared>,
    pool: Pool,
    stats: DispatcherStats,
    last_publish: Instant,
    /// The server is stopping: read no more from the socket.
    stop: Arc<AtomicBool>,
    /// This port has stopped reading its socket (and said so in `Shared::receiving`).
    closed: bool,
}

impl RsdPort {
    fn publish(&mut self) {
        self.stats.rsd.clone_from(self.rsd.stats());
        self.shared.dispatchers[self.index].lock().expect("stats lock").clone_from(&self.stats);
    }
}

impl Port for RsdPort {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        apply_installs(&self.ctl, &mut self.rsd, AppMatcher::compiled, &self.shared.applied[self.index]);
        let before = batch.len();
        // What other workers' RSDs decided for this one: already dispatched.
        self.own.recv(now, batch)?;
        if self.stop.load(Ordering::Acquire) {
            if !self.closed {
                self.closed = true;
                self.shared.receiving.fetch_sub(1, Ordering::AcqRel);
            }
            return Ok(batch.len() - before);
        }
        let n = self.udp.recv(now, &mut self.scratch)?;
        if n > 0 {
            self.stats.rx_packets += n as u64;
            // Timed only when packets came (a clock read per call would cost idle polls too).
            let t0 = Instant::now();
            for p in self.scratch.drain() {
                let Verdict::Queue(q) = self.rsd.dispatch(sender_hash(&p.peer()), p.data()) else {
                    self.pool.put(p);
                    continue;
                };
                let q = usize::from(q);
                // A packet of this worker's that no longer fits the batch waits in its own ring.
                let p = if q == self.index {
                    match batch.push(p) {
                        None => continue,
                        Some(p) => p,
                    }
                } else {
                    self.stats.handed_off += 1;
                    p
                };
                push_ring(&self.rings, &mut self.rung, q, p, &mut self.stats, &self.pool);
            }
            ring_marked(&self.rings, &mut self.rung);
            self.stats.dispatch_ns += t0.elapsed().as_nanos() as u64;
        }
        if now.duration_since(self.last_publish) >= PUBLISH_EVERY {
            self.last_publish = now;
            self.publish();
        }
        Ok(batch.len() - before)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.udp.send(now, batch)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        match &self.udp {
            NetPort::Udp(u) => self.own.wait_with_fd(u.socket().as_raw_fd(), timeout),
            NetPort::MemRx(q, _) => self.own.wait_with_ring(q, timeout),
            NetPort::MemTx(_) => self.own.wait(timeout),
        }
    }

    fn local_addr(&self) -> SocketAddr {
        self.udp.local_addr()
    }

    fn poll_at(&self) -> Option<Instant> {
        self.udp.poll_at()
    }

    fn stats(&self) -> PortStats {
        let mut s = self.udp.stats();
        s += self.own.stats();
        s
    }
}

impl Drop for RsdPort {
    fn drop(&mut self) {
        self.publish();
        if !self.closed {
            self.shared.receiving.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Counts a thread that reads sockets and hands packets off, until it is dropped.
struct Receiving(Arc<Shared>);

impl Drop for Receiving {
    fn drop(&mut self) {
        self.0.receiving.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Clone)]
struct WorkerCtx {
    index: usize,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    store: KvStore,
    pool: Pool,
    qnp: QnpConfig,
    served: Served,
    memory: Arc<ExactlyOnce>,
    /// The worker's port is its own socket (mode `rss`): nothing to finish after a stop.
    socket_only: bool,
}

impl WorkerCtx {
    /// This context for worker `index`.
    fn for_worker(&self, index: usize) -> WorkerCtx {
        WorkerCtx { index, ..self.clone() }
    }

    fn run<P: Port>(self, port: P) -> io::Result<()> {
        let mut server =
            QnpServer::with_memory(port, &self.pool, self.qnp.clone(), &self.served.apps, self.memory.clone());
        for (app, ty, fields) in &self.served.types {
            server.declare_request_type(*app, *ty, fields);
        }
        let mut reqs: Vec<Request<Get>> = Vec::with_capacity(DEFAULT_BATCH);
        let mut answers = Vec::with_capacity(DEFAULT_BATCH);
        let me = &self.shared.workers[self.index];
        let mut last_publish = Instant::now();
        loop {
            // Stopping: receivers stop reading sockets; the worker finishes every request
            // already read (its queue and reassembly) and leaves when nothing more can come.
            let stopping = self.stop.load(Ordering::Acquire);
            if stopping && self.socket_only {
                break;
            }
            let quiet = stopping && self.shared.receiving.load(Ordering::Acquire) == 0;
            let got = server.recv_req(&mut reqs, Duration::from_millis(2))?;
            let t0 = Instant::now();
            let (mut found, mut errors) = (0, 0);
            for r in reqs.drain(..) {
                tern_io::failpoint("dispatch-worker");
                let (v, ok) = self.store.handle(&r.req);
                found += u64::from(v.found);
                errors += u64::from(!ok);
                answers.push((r.handle, v));
            }
            if !answers.is_empty() {
                // Counted before any answer leaves (a full batch of packets is sent at once):
                // whoever holds a response finds its request counted.
                me.requests.fetch_add(answers.len() as u64, Ordering::Relaxed);
                me.found.fetch_add(found, Ordering::Relaxed);
                me.store_errors.fetch_add(errors, Ordering::Relaxed);
                for (handle, v) in answers.drain(..) {
                    // A response always fits: a 64-byte value.
                    let _ = server.send_resp(handle, &v);
                }
                server.flush()?;
                me.serve_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
            if last_publish.elapsed() >= PUBLISH_EVERY {
                last_publish = Instant::now();
                *me.qnp.lock().expect("stats lock") = *server.core().stats();
                me.oversize.store(server.port().stats().rx_dropped, Ordering::Relaxed);
            }
            if quiet && got == 0 {
                break;
            }
        }
        server.flush()?;
        me.partial_at_stop.store(server.core().table().len() as u64, Ordering::Relaxed);
        *me.qnp.lock().expect("stats lock") = *server.core().stats();
        me.oversize.store(server.port().stats().rx_dropped, Ordering::Relaxed);
        Ok(())
    }
}

/// Sums dispatcher counters.
pub fn total(stats: &[DispatcherStats]) -> DispatcherStats {
    let mut t = DispatcherStats::default();
    for s in stats {
        t.handoff_full += s.handoff_full;
        t.handed_off += s.handed_off;
        t.rx_packets += s.rx_packets;
        t.oversize += s.oversize;
        t.dispatch_ns += s.dispatch_ns;
        t.rsd.first_packets += s.rsd.first_packets;
        t.rsd.stash_hits += s.rsd.stash_hits;
        t.rsd.default_queue += s.rsd.default_queue;
        add_into(&mut t.rsd.per_queue, &s.rsd.per_queue);
        add_into(&mut t.rsd.rule_hits, &s.rsd.rule_hits);
        for r in RsdDrop::ALL {
            t.rsd.drops[r as usize] += s.rsd.drops_of(r);
        }
    }
    t
}

fn add_into(into: &mut Vec<u64>, from: &[u64]) {
    if into.len() < from.len() {
        into.resize(from.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(from) {
        *a += b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvLayout, KvStore};
    use crate::synth::Spec;

    /// A thread that ends while the server runs stops the server, named with its panic's
    /// message or its error; the other threads are joined (none left); nothing is reported
    /// while every thread runs, nor once the server stops of its own.
    #[test]
    fn a_thread_that_ends_early_stops_the_server_and_is_named() {
        let l = KvLayout { spec: Spec::default(), workers: 2, keys: 100 };
        let store = KvStore::temporary(None).unwrap();
        store.load(&l).unwrap();
        let opts = ServerOptions { workers: 2, dispatchers: 1, ..ServerOptions::default() };
        for (name, ends) in [
            (
                "tern-worker-9",
                Box::new(|| -> io::Result<()> { panic!("a bug") }) as Box<dyn FnOnce() -> io::Result<()> + Send>,
            ),
            ("tern-dispatch-9", Box::new(|| Err(io::Error::other("socket gone")))),
        ] {
            let mut server = Server::start(&opts, l.rule_set(), store.clone()).unwrap();
            let running = server.threads.len();
            std::thread::sleep(Duration::from_millis(50));
            assert!(server.ended_early().is_none(), "every thread runs");
            let (go, wait) = mpsc::channel::<()>();
            let t = thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    let _ = wait.recv();
                    ends()
                })
                .unwrap();
            server.threads.push(t);
            assert!(server.ended_early().is_none(), "not ended yet");
            go.send(()).unwrap();
            let deadline = Instant::now() + Duration::from_secs(5);
            let e = loop {
                if let Some(e) = server.ended_early() {
                    break e;
                }
                assert!(Instant::now() < deadline, "{name}: not noticed");
                std::thread::sleep(Duration::from_millis(5));
            };
            let why = if name.starts_with("tern-worker") { "it panicked: a bug" } else { "error: socket gone" };
            assert_eq!(e.to_string(), format!("{name} ended early ({why}); the server stopped"));
            assert!(server.threads.is_empty(), "{running} threads joined");
            assert!(server.ended_early().is_none(), "stopped: nothing more to report");
        }
    }
}
