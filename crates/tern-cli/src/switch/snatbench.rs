//! `tern bench switch --snat` (docs/clip.md, "SNAT against netfilter"): CLIP's SNAT on a real
//! network against Linux netfilter's, with the same hosts, links and traffic.
//!
//! Two topologies of network namespaces stand side by side. Tern's: a client (10.0.0.1) and an
//! external host (198.51.100.2) on veth pairs whose other ends are the switch's ports 1 and 2,
//! the switch a `tern switch serve` process, and three servers, each a `tern switch server`
//! process in a namespace of its own (data link: switch ports 3–5; management bridge for the
//! switch's polls and the buddies' replicas). Netfilter's: the same client and external host
//! with a router namespace between them that forwards and masquerades (`nft ... masquerade`).
//! One generator and one sink serve both: threads of this process that enter the client's and
//! the external host's namespaces and use the kernel's UDP (`sendmmsg`, `recvmmsg`).
//!
//! Each round measures, per frame size and in a rotating order: Tern with its flows offloaded
//! into the switch ("switch only", CLIP's steady state for heavy flows), Tern with the offload
//! off and every frame through 1, 2 or 3 servers (Figure 5's "via CSs"), and netfilter. A
//! measurement is a warm-up (the same paced traffic everywhere: NAT entries made, heavy flows
//! offloaded, conntrack entries made), a flood (as fast as the generator sends, for
//! `phase_secs`: packets per second delivered to the sink), and a paced run (latency, one way,
//! from the generator's send to the datagram's arrival at the external host — the kernel's
//! receive timestamp, on the real-time clock both read — with the sink's own receive time
//! beside it).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;
use tern_io::{Batch, Pool, Port};

use crate::reports::spread;

/// What `tern bench switch --snat` runs with.
#[derive(Debug, Clone)]
pub struct Options {
    pub rounds: usize,
    pub secs: f64,
    pub sizes: Vec<usize>,
    pub flows: usize,
    pub latency_rate: f64,
    pub latency_packets: u64,
    pub servers: u16,
    /// Run Tern's switch with `--busy-poll`.
    pub busy_poll: bool,
    /// RPS on the switch's inside port (steering what arrives there to the system under
    /// test's cores); off, the client's core hands each frame to the switch's ring.
    pub inside_rps: bool,
    /// The switch's host ports on AF_XDP (`afxdp:`) rather than AF_PACKET, and the hosts'
    /// transmit checksum offload off (for netfilter's hosts too).
    pub afxdp: bool,
}

/// The generated datagram's payload starts with its flow (u32), the phase (u32) and its send
/// time (u64, ns since the Unix epoch on the real-time clock, the clock of the kernel's receive
/// timestamps), all big-endian.
const HEADER: usize = 16;
/// Ethernet, IPv4 and UDP headers: a frame of `size` bytes carries `size - 42` of payload.
const FRAME_OVERHEAD: usize = 42;
const SINK_PORT: u16 = 9000;
const CLIENT: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const EXTERNAL: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
/// Paced warm-up before every measurement (the same for every system).
const WARM_RATE: f64 = 20_000.0;
pub const WARM_SECS: f64 = 0.6;
/// How often the sink reads what has arrived during a flood.
const FLOOD_DRAIN: Duration = Duration::from_micros(200);

/// Whether this process runs as root (the network part needs it).
pub fn is_root() -> Result<bool, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| format!("/proc/self/status: {e}"))?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|u| u.parse::<u32>().ok());
    Ok(euid == Some(0))
}

/// Whether `nft` (Debian's `nftables`) is installed.
pub fn have_nft() -> bool {
    Command::new("nft").arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}

/// The cores: the hosts (generator and sink) on core 0, the system under test on the others
/// (Tern's switch and servers by affinity, netfilter by RPS on the router's inside port, and
/// RPS on the switch's inside port likewise), as a load generator and a device under test
/// would be. `None` on one core (then nothing is pinned).
#[derive(Debug, Clone)]
pub struct Cores {
    /// How many (cores 1 to `count`).
    pub count: usize,
    /// For `taskset -c`.
    pub list: String,
    /// For `rps_cpus` (hex).
    pub mask: String,
}

/// The cores this process may use (at most 32), as first seen, before any thread of the bench
/// pinned itself (a pinned thread sees only its own core).
fn cpu_count() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()).min(32))
}

pub fn dut_cores() -> Option<Cores> {
    let n = cpu_count();
    (n >= 2).then(|| Cores {
        count: n - 1,
        list: if n == 2 { "1".into() } else { format!("1-{}", n - 1) },
        mask: format!("{:x}", ((1u64 << n) - 1) & !1),
    })
}

/// Pins the calling host thread (generator, sink) to core 0 where the system under test has
/// cores of its own.
fn pin_host() {
    if dut_cores().is_some() {
        tern_io::pin_to_core(0);
    }
}

/// Steers what arrives on `dev` (as seen in `ns`, or here) to the system under test's cores.
fn rps(ns: Option<&str>, dev: &str) -> Result<(), String> {
    let Some(c) = dut_cores() else { return Ok(()) };
    let cmd = format!("echo {} > /sys/class/net/{dev}/queues/rx-0/rps_cpus", c.mask);
    match ns {
        Some(ns) => run("ip", &["netns", "exec", ns, "sh", "-c", &cmd]),
        None => run("sh", &["-c", &cmd]),
    }
}

/// Turns transmit checksum offload off on the host's interface (`eth0` in namespace `ns`): its
/// frames then leave with whole checksums, as AF_XDP ports need.
fn checksums_whole(ns: &str) -> Result<(), String> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        tern_io::enter_netns(&ns)
            .and_then(|_| tern_io::afxdp::set_tx_checksum("eth0", false))
            .map_err(|e| format!("{ns}: {e}"))
    })
    .join()
    .map_err(|_| "the thread turning checksum offload off panicked".to_string())?
}

/// Runs `ip ARGS` (split on spaces); the error names the command and says what `ip` said.
fn ip(args: &str) -> Result<(), String> {
    run("ip", &args.split_whitespace().collect::<Vec<_>>())
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd).args(args).output().map_err(|e| format!("`{cmd}`: {e}"))?;
    if !out.status.success() {
        return Err(format!("`{cmd} {}`: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// Everything the bench made, removed when dropped (children killed first).
struct Topology {
    id: u32,
    netns: Vec<String>,
    links: Vec<String>,
    children: Vec<Child>,
    /// nft tables made here (the switch ports' ingress chains).
    nft_tables: Vec<String>,
    /// Whether `nft` is installed (asked once).
    nft: bool,
    dir: PathBuf,
}

impl Topology {
    fn name(&self, what: &str) -> String {
        format!("tb{}{what}", self.id)
    }

    fn add_netns(&mut self, what: &str) -> Result<String, String> {
        let ns = self.name(what);
        ip(&format!("netns add {ns}"))?;
        self.netns.push(ns.clone());
        ip(&format!("-n {ns} link set lo up"))?;
        Ok(ns)
    }

    /// A host's `eth0` in `ns`, whose peer `end` stays here (a switch port) or goes into
    /// `end_ns`; one wire-sized frame a segment, as on a real link.
    fn host_link(&mut self, ns: &str, end: &str, end_ns: Option<&str>, mac: &str, addr: &str) -> Result<(), String> {
        match end_ns {
            None => {
                ip(&format!("link add {end} type veth peer name eth0 netns {ns}"))?;
                self.links.push(end.to_string());
                ip(&format!("link set {end} up"))?;
                let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{end}/disable_ipv6"), "1");
            }
            Some(r) => {
                ip(&format!("-n {r} link add {end} type veth peer name eth0 netns {ns}"))?;
                ip(&format!("-n {r} link set {end} up"))?;
            }
        }
        ip(&format!("-n {ns} link set eth0 address {mac} up"))?;
        ip(&format!("-n {ns} link set eth0 gso_max_segs 1 gso_max_size 1500"))?;
        ip(&format!("-n {ns} addr add {addr} dev eth0"))?;
        Ok(())
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.netns {
            let _ = ip(&format!("netns del {ns}"));
        }
        for l in &self.links {
            let _ = ip(&format!("link del {l}"));
        }
        for table in &self.nft_tables {
            let _ = run("nft", &["delete", "table", "netdev", table]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A host thread's start: pinned to the hosts' core, into namespace `ns`, its port opened
/// there; `ready` hears how it went.
fn open_in<P>(
    ns: &str,
    ready: &mpsc::Sender<Result<(), String>>,
    open: impl FnOnce() -> Result<P, String>,
) -> Option<P> {
    pin_host();
    let port = tern_io::enter_netns(ns).map_err(|e| e.to_string()).and_then(|_| open());
    let _ = ready.send(port.as_ref().map(|_| ()).map_err(Clone::clone));
    port.ok()
}

/// What the generator is asked to send.
enum GenCmd {
    /// As fast as it can, for `secs`.
    Flood { phase: u32, size: usize, secs: f64 },
    /// `count` datagrams at `rate` a second (slept between, so that it leaves the cores to the
    /// systems measured).
    Paced { phase: u32, size: usize, rate: f64, count: u64 },
}

/// What it sent, over how long, ending when (ns since the bench began), and the share of the
/// time the system under test's cores were busy meanwhile (`/proc/stat`; None on one core).
struct Sent {
    sent: u64,
    secs: f64,
    end_ns: u64,
    dut_busy: Option<f64>,
}

/// (busy, total) jiffies of the system under test's cores from `/proc/stat`: busy is user,
/// nice, system, irq and softirq time (not idle, iowait or steal).
fn dut_jiffies() -> Option<(u64, u64)> {
    let n = dut_cores()?.count + 1;
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let (mut busy, mut total) = (0u64, 0u64);
    for line in stat.lines() {
        let mut f = line.split_whitespace();
        let Some(cpu) = f.next().and_then(|c| c.strip_prefix("cpu")).and_then(|c| c.parse::<usize>().ok()) else {
            continue;
        };
        if cpu == 0 || cpu >= n {
            continue;
        }
        let v: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
        if v.len() < 8 {
            return None;
        }
        busy += v[0] + v[1] + v[2] + v[5] + v[6];
        total += v[..8].iter().sum::<u64>();
    }
    Some((busy, total))
}

/// The generator: in the client's namespace, `flows` UDP sockets (one a flow), each batch of 32
/// datagrams from one socket, the sockets in turn.
fn generator(ns: String, flows: usize, epoch: Instant) -> Result<(mpsc::Sender<GenCmd>, mpsc::Receiver<Sent>), String> {
    let (cmd_tx, cmd_rx) = mpsc::channel::<GenCmd>();
    let (done_tx, done_rx) = mpsc::channel::<Sent>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    std::thread::spawn(move || {
        let pool = Pool::new(4096, tern_io::DEFAULT_BUF_SIZE);
        let Some(mut port) = open_in(&ns, &ready_tx, || {
            tern_io::udp::MultiUdpPort::bind(IpAddr::V4(CLIENT), flows, 0, &pool)
                .map_err(|e| format!("the generator's sockets in {ns}: {e}"))
        }) else {
            return;
        };
        let dst = SocketAddr::new(IpAddr::V4(EXTERNAL), SINK_PORT);
        let fill = vec![0u8; 2048];
        let mut batch = Batch::new(32);
        let push = |batch: &mut Batch, flow: u32, phase: u32, size: usize| {
            let mut p = pool.packet();
            let ts = real_ns();
            let mut head = [0u8; HEADER];
            head[..4].copy_from_slice(&flow.to_be_bytes());
            head[4..8].copy_from_slice(&phase.to_be_bytes());
            head[8..].copy_from_slice(&ts.to_be_bytes());
            let len = size.saturating_sub(FRAME_OVERHEAD).max(HEADER);
            let _ = p.extend_from_slice(&head);
            let _ = p.extend_from_slice(&fill[..len - HEADER]);
            p.set_peer(dst);
            if let Some(p) = batch.push(p) {
                pool.put(p);
            }
        };
        while let Ok(cmd) = cmd_rx.recv() {
            // The system's busy share matters for a flood only.
            let j0 = matches!(cmd, GenCmd::Flood { .. }).then(dut_jiffies).flatten();
            let t0 = Instant::now();
            let mut sent = 0u64;
            let mut flow = 0u32;
            match cmd {
                GenCmd::Flood { phase, size, secs } => {
                    let end = t0 + Duration::from_secs_f64(secs);
                    loop {
                        let now = Instant::now();
                        if now >= end {
                            break;
                        }
                        for _ in 0..32 {
                            push(&mut batch, flow, phase, size);
                        }
                        sent += port.send(now, &mut batch).unwrap_or(0) as u64;
                        batch.recycle(&pool);
                        flow = (flow + 1) % flows as u32;
                    }
                }
                GenCmd::Paced { phase, size, rate, count } => {
                    let gap = 1.0 / rate.max(1.0);
                    for i in 0..count {
                        let at = t0 + Duration::from_secs_f64(i as f64 * gap);
                        let now = Instant::now();
                        if at > now {
                            std::thread::sleep(at - now);
                        }
                        push(&mut batch, flow, phase, size);
                        sent += port.send(Instant::now(), &mut batch).unwrap_or(0) as u64;
                        batch.recycle(&pool);
                        flow = (flow + 1) % flows as u32;
                    }
                }
            }
            let end_ns = epoch.elapsed().as_nanos() as u64;
            let dut_busy = match (j0, j0.and_then(|_| dut_jiffies())) {
                (Some(a), Some(b)) if b.1 > a.1 => Some((b.0 - a.0) as f64 / (b.1 - a.1) as f64),
                _ => None,
            };
            if done_tx.send(Sent { sent, secs: t0.elapsed().as_secs_f64(), end_ns, dut_busy }).is_err() {
                break;
            }
        }
    });
    ready_rx.recv().map_err(|_| "the generator thread ended".to_string())??;
    Ok((cmd_tx, done_rx))
}

/// Now on the real-time clock, ns since the Unix epoch (0 before it).
fn real_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// What the sink counted in one phase.
struct Received {
    received: u64,
    /// One-way latency to the datagram's arrival at the external host (the kernel's receive
    /// timestamp; the sink's receive time where the kernel gave none), and to the sink's
    /// receive (its wake-up included).
    latency: Histogram<u64>,
    latency_at_sink: Histogram<u64>,
    /// Datagrams whose latency is the kernel's timestamp's.
    stamped: u64,
    /// When each reached the external host (the kernel's receive timestamp, else the sink's
    /// receive time).
    arrivals: Arrivals,
    /// When the phase began, ns since the bench began.
    begin_ns: u64,
}

impl Received {
    /// Datagrams that reached the external host by `t_ns` (ns since the bench began).
    fn by(&self, t_ns: u64) -> u64 {
        self.arrivals.by(t_ns.saturating_sub(self.begin_ns))
    }
}

/// A phase's datagrams by when they reached the external host, to the millisecond.
#[derive(Debug, Default)]
struct Arrivals {
    /// When the phase began, ns since the Unix epoch on the real-time clock.
    begin_real: u64,
    /// Arrivals by millisecond since then.
    per_ms: Vec<u64>,
}

impl Arrivals {
    /// Milliseconds kept (a phase is at most a minute): later arrivals count in the last.
    const MAX_MS: usize = 120_000;

    fn new(begin_real: u64) -> Arrivals {
        Arrivals { begin_real, per_ms: Vec::new() }
    }

    /// One arrival at `real_ns` (ns since the Unix epoch); one before the phase began counts
    /// in its first millisecond.
    fn add(&mut self, real_ns: u64) {
        let ms = ((real_ns.saturating_sub(self.begin_real) / 1_000_000) as usize).min(Self::MAX_MS);
        if self.per_ms.len() <= ms {
            self.per_ms.resize(ms + 1, 0);
        }
        self.per_ms[ms] += 1;
    }

    /// Those that arrived by `offset_ns` after the phase began (to the millisecond: the one
    /// it falls in counts whole).
    fn by(&self, offset_ns: u64) -> u64 {
        let ms = (offset_ns / 1_000_000).min(Self::MAX_MS as u64) as usize;
        self.per_ms.iter().take(ms + 1).sum()
    }
}

enum SinkCmd {
    /// Count the datagrams of `phase` from now on (and their latency); with `drain`, read
    /// what has arrived once every `drain` (a flood: the sink then costs the hosts' core little
    /// a datagram, whatever bursts the system under test sends in) rather than waking for
    /// each arrival.
    Begin { phase: u32, drain: Option<Duration> },
    /// How many so far.
    Count(mpsc::Sender<u64>),
    /// Hand over the count.
    End(mpsc::Sender<Received>),
}

/// The sink: in the external host's namespace, one UDP socket on port 9000 that counts the
/// current phase's datagrams and records each one's latency: the kernel's receive timestamp
/// (`SO_TIMESTAMPNS`: when the frame reached the external host's stack, as `ping` times a
/// reply) less the send time, and the sink's own receive time less the send time (its wake-up
/// included, which is no part of the system under test).
fn sink(ns: String, epoch: Instant) -> Result<mpsc::Sender<SinkCmd>, String> {
    let (cmd_tx, cmd_rx) = mpsc::channel::<SinkCmd>();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    std::thread::spawn(move || {
        let pool = Pool::new(4096, tern_io::DEFAULT_BUF_SIZE);
        let cfg = tern_io::udp::UdpConfig { recv_buffer: Some(16 << 20), ..Default::default() };
        let Some(mut port) = open_in(&ns, &ready_tx, || {
            let mut port = tern_io::udp::UdpPort::bind(SocketAddr::new(IpAddr::V4(EXTERNAL), SINK_PORT), &pool, &cfg)
                .map_err(|e| format!("the sink's socket in {ns}: {e}"))?;
            port.enable_rx_timestamps().map_err(|e| format!("the sink's receive timestamps (SO_TIMESTAMPNS): {e}"))?;
            Ok(port)
        }) else {
            return;
        };
        let new_hist = || Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("valid bounds");
        let mut phase = u32::MAX;
        let mut received = 0u64;
        let mut hist = new_hist();
        let mut at_sink = new_hist();
        let mut stamped = 0u64;
        let mut arrivals = Arrivals::default();
        let mut begin_ns = 0u64;
        let mut drain: Option<Duration> = None;
        let mut batch = Batch::new(tern_io::udp::MAX_BATCH);
        loop {
            loop {
                match cmd_rx.try_recv() {
                    Ok(SinkCmd::Begin { phase: p, drain: d }) => {
                        phase = p;
                        drain = d;
                        received = 0;
                        stamped = 0;
                        hist = new_hist();
                        at_sink = new_hist();
                        begin_ns = epoch.elapsed().as_nanos() as u64;
                        arrivals = Arrivals::new(real_ns());
                    }
                    Ok(SinkCmd::Count(reply)) => {
                        let _ = reply.send(received);
                    }
                    Ok(SinkCmd::End(reply)) => {
                        let _ = reply.send(Received {
                            received,
                            latency: std::mem::replace(&mut hist, new_hist()),
                            latency_at_sink: std::mem::replace(&mut at_sink, new_hist()),
                            stamped,
                            arrivals: std::mem::take(&mut arrivals),
                            begin_ns,
                        });
                        phase = u32::MAX;
                        drain = None;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => return,
                }
            }
            let n = port.recv(Instant::now(), &mut batch).unwrap_or(0);
            if n < tern_io::udp::MAX_BATCH
                && let Some(d) = drain
            {
                // Woken by a timer on its own core, not by each arrival.
                std::thread::sleep(d);
            }
            if n == 0 {
                if drain.is_none() {
                    let _ = port.wait(Duration::from_millis(1));
                }
                continue;
            }
            let real_now = real_ns();
            for (i, p) in batch.iter().enumerate() {
                let d = p.data();
                if d.len() < HEADER || u32::from_be_bytes([d[4], d[5], d[6], d[7]]) != phase {
                    continue;
                }
                received += 1;
                let ts = u64::from_be_bytes(d[8..16].try_into().expect("8 bytes"));
                let arrived = match port.rx_stamps().get(i) {
                    Some(&k) if k > 0 => {
                        stamped += 1;
                        k
                    }
                    _ => real_now,
                };
                let _ = hist.record(arrived.saturating_sub(ts).max(1));
                let _ = at_sink.record(real_now.saturating_sub(ts).max(1));
                arrivals.add(arrived);
            }
            batch.recycle(&pool);
        }
    });
    ready_rx.recv().map_err(|_| "the sink thread ended".to_string())??;
    Ok(cmd_tx)
}

/// One system's generator and sink.
struct Hosts {
    gen_tx: mpsc::Sender<GenCmd>,
    gen_rx: mpsc::Receiver<Sent>,
    sink: mpsc::Sender<SinkCmd>,
}

impl Hosts {
    /// Sends `cmd` as phase `phase` and returns (sent, seconds, received, latency).
    fn phase(&self, phase: u32, cmd: GenCmd) -> Result<(Sent, Received), String> {
        let drain = matches!(cmd, GenCmd::Flood { .. }).then_some(FLOOD_DRAIN);
        self.sink.send(SinkCmd::Begin { phase, drain }).map_err(|_| "the sink stopped")?;
        self.gen_tx.send(cmd).map_err(|_| "the generator stopped")?;
        let sent = self.gen_rx.recv().map_err(|_| "the generator stopped")?;
        // What is still queued drains before the next phase: until 50 ms pass with nothing
        // more (at most 10 s).
        let start = Instant::now();
        let mut last = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_millis(50));
            let (tx, rx) = mpsc::channel();
            self.sink.send(SinkCmd::Count(tx)).map_err(|_| "the sink stopped")?;
            let n = rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the sink did not answer")?;
            if n == last || start.elapsed() > Duration::from_secs(10) {
                break;
            }
            last = n;
        }
        let (tx, rx) = mpsc::channel();
        self.sink.send(SinkCmd::End(tx)).map_err(|_| "the sink stopped")?;
        let got = rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the sink did not answer")?;
        Ok((sent, got))
    }
}

/// The systems measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum System {
    /// Tern, the flows offloaded into the switch.
    SwitchOnly,
    /// Tern, the offload off, every frame through this many servers.
    Servers(u16),
    /// Linux netfilter (nft masquerade) in a router namespace.
    Netfilter,
}

impl System {
    fn key(self) -> String {
        match self {
            System::SwitchOnly => "switch_only".into(),
            System::Servers(k) => format!("servers_{k}"),
            System::Netfilter => "netfilter".into(),
        }
    }

    fn label(self) -> String {
        match self {
            System::SwitchOnly => "Tern switch only (offloaded)".into(),
            System::Servers(1) => "Tern via 1 server".into(),
            System::Servers(k) => format!("Tern via {k} servers"),
            System::Netfilter => "netfilter (nft masquerade)".into(),
        }
    }
}

/// One measurement.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub system: String,
    pub round: usize,
    pub frame_bytes: usize,
    /// Datagrams delivered to the sink a second during the flood.
    pub pps: f64,
    pub flood_sent: u64,
    /// The flood's datagrams the sink received (until the queues drained).
    pub flood_received: u64,
    /// Of them, received before the generator stopped (what `pps` counts).
    pub flood_received_in_window: u64,
    pub flood_secs: f64,
    /// The share of the flood's time the system under test's cores were busy (user, system,
    /// irq and softirq time in `/proc/stat`; absent on one core).
    pub dut_busy: Option<f64>,
    /// `pps` over the system under test's busy cores (`dut_busy` times its cores).
    pub pps_per_busy_core: Option<f64>,
    /// The paced run's rate as sent, a second.
    pub latency_rate: f64,
    pub latency_sent: u64,
    pub latency_received: u64,
    /// One way, to the datagram's arrival at the external host (the kernel's receive
    /// timestamp).
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub latency_mean_us: f64,
    /// The paced run's datagrams whose arrival the kernel stamped (the rest: the sink's time).
    pub latency_kernel_stamped: u64,
    /// One way, to the sink's receive (its wake-up included).
    pub latency_at_sink_p50_us: f64,
    pub latency_at_sink_p99_us: f64,
    /// Tern: of the frames the switch translated during the flood, the share it translated
    /// without a server (its offloaded entries).
    pub switch_share: Option<f64>,
    /// Tern: the switch's offloaded entries when the flood began.
    pub offloaded_entries: Option<u64>,
    /// Tern: the flood's frames the switch's inside port dropped on receive (its receive ring
    /// full: the switch was the bottleneck), as its metrics count them.
    pub switch_ring_dropped: Option<u64>,
}

/// The switch's counters this bench reads from `/metrics`: (offloaded frames, frames to a
/// server, offloaded entries, frames its inside port dropped on receive).
fn switch_counters(metrics: SocketAddr) -> Result<(u64, u64, u64, u64), String> {
    let body = ureq::get(&format!("http://{metrics}/metrics"))
        .call()
        .map_err(|e| format!("the switch's /metrics: {e}"))?
        .into_body()
        .read_to_string()
        .map_err(|e| format!("the switch's /metrics: {e}"))?;
    let (mut off, mut to_server, mut entries, mut port_drops) = (0u64, 0u64, 0u64, 0u64);
    for l in body.lines() {
        let value = || l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0) as u64;
        if let Some(rest) = l.strip_prefix("tern_switch_packets_total{path=\"") {
            if rest.starts_with("offloaded\"") {
                off = value();
            } else if rest.starts_with("to_server_") {
                to_server += value();
            }
        } else if l.starts_with("tern_switch_offloaded_entries ") {
            entries = value();
        } else if l.starts_with("tern_switch_port_dropped_total{")
            && l.contains("port=\"1\"")
            && l.contains("dir=\"rx\"")
        {
            port_drops = value();
        }
    }
    Ok((off, to_server, entries, port_drops))
}

/// `taskset -c CORES` for the system under test's processes (empty on one core).
fn taskset() -> Vec<String> {
    dut_cores().map(|c| vec!["taskset".into(), "-c".into(), c.list]).unwrap_or_default()
}

/// Waits until `url` answers (a process's control endpoint is up), or says why not.
fn wait_http(url: &str, child: &mut Child, log: &Path, what: &str) -> Result<(), String> {
    let start = Instant::now();
    loop {
        if ureq::get(url).call().is_ok() {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("{what} exited ({st}): {}", tail.trim()));
        }
        if start.elapsed() > Duration::from_secs(15) {
            return Err(format!("{what} did not answer {url} within 15 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Tern's side: the client, external host and servers' namespaces, the switch's ports here.
struct TernSide {
    ports: Vec<String>,
    controls: Vec<SocketAddr>,
    hosts: Hosts,
}

fn build_tern(t: &mut Topology, o: &Options, epoch: Instant, exe: &Path) -> Result<TernSide, String> {
    let c = t.add_netns("tc")?;
    let x = t.add_netns("tx")?;
    let (p1, p2) = (t.name("p1"), t.name("p2"));
    t.host_link(&c, &p1, None, "02:00:00:00:01:01", "10.0.0.1/24")?;
    ip(&format!("-n {c} route add default via 10.0.0.254"))?;
    t.host_link(&x, &p2, None, "02:00:00:00:02:01", "198.51.100.2/24")?;
    ip(&format!("-n {x} route add 192.0.2.0/24 dev eth0"))?;
    if o.afxdp {
        checksums_whole(&c)?;
        checksums_whole(&x)?;
    }
    if o.inside_rps {
        rps(None, &p1)?;
    }
    switch_port(t, &p1)?;
    switch_port(t, &p2)?;
    let mg = t.name("mg");
    ip(&format!("link add {mg} type bridge"))?;
    t.links.push(mg.clone());
    ip(&format!("addr add 10.254.98.1/24 dev {mg}"))?;
    ip(&format!("link set {mg} up"))?;
    let program = t.dir.join("snat.toml");
    std::fs::write(&program, tern_switch::bench::SNAT_PROGRAM).map_err(|e| format!("{}: {e}", program.display()))?;
    let kind = if o.afxdp { "afxdp" } else { "afpacket" };
    let mut ports = vec![format!("{kind}:{p1}"), format!("{kind}:{p2}")];
    let n = o.servers;
    let controls: Vec<SocketAddr> =
        (0..n).map(|s| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 254, 98, 10 + s as u8)), 9601 + s)).collect();
    for s in 0..n {
        let ns = t.add_netns(&format!("s{s}"))?;
        let d = t.name(&format!("d{s}"));
        ip(&format!("link add {d} type veth peer name eth0 netns {ns}"))?;
        t.links.push(d.clone());
        // A request is a whole frame behind CLIP's header: the server's link carries more
        // than the hosts' 1500-byte MTU.
        ip(&format!("link set {d} mtu 9000 up"))?;
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{d}/disable_ipv6"), "1");
        ip(&format!("-n {ns} link set eth0 mtu 9000 up"))?;
        let m = t.name(&format!("m{s}"));
        ip(&format!("link add {m} type veth peer name mgmt netns {ns}"))?;
        t.links.push(m.clone());
        ip(&format!("link set {m} master {mg} up"))?;
        ip(&format!("-n {ns} addr add {}/24 dev mgmt", controls[usize::from(s)].ip()))?;
        ip(&format!("-n {ns} link set mgmt up"))?;
        ports.push(format!("afpacket:{d}"));
        switch_port(t, &d)?;
        let log = t.dir.join(format!("server{s}.log"));
        let err = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let buddy = controls[usize::from((s + 1) % n)];
        let mut child = Command::new("ip")
            .args(["netns", "exec", &ns])
            .args(taskset())
            .arg(exe)
            .args(["switch", "server"])
            .arg(&program)
            .args(["--index", &s.to_string(), "--port", "afpacket:eth0"])
            .args(["--control", &controls[usize::from(s)].to_string()])
            .args(if n > 1 { vec!["--buddy".to_string(), buddy.to_string()] } else { vec![] })
            .stdout(Stdio::null())
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting server {s}: {e}"))?;
        let url = format!("http://{}/metrics", controls[usize::from(s)]);
        let r = wait_http(&url, &mut child, &log, &format!("server {s}"));
        t.children.push(child);
        r?;
    }
    let (gen_tx, gen_rx) = generator(c, o.flows, epoch)?;
    let sink = sink(x, epoch)?;
    Ok(TernSide { ports, controls, hosts: Hosts { gen_tx, gen_rx, sink } })
}

/// A switch port here: what arrives is the switch's alone (its AF_PACKET socket sees a frame
/// before the ingress hook), so an nft netdev chain drops it there, instead of this host's IP
/// stack routing it first, as a switch's port has no IP stack behind it. Without `nft` the
/// stack drops it later.
fn switch_port(t: &mut Topology, dev: &str) -> Result<(), String> {
    if !t.nft {
        return Ok(());
    }
    let table = t.name("sw");
    if !t.nft_tables.contains(&table) {
        run("nft", &["add", "table", "netdev", &table])?;
        t.nft_tables.push(table.clone());
    }
    let rule = format!(
        "add chain netdev {table} {dev} {{ type filter hook ingress device \"{dev}\" priority 0 ; policy drop ; }}"
    );
    run("nft", &[&rule])
}

/// A running switch (killed when dropped).
struct SwitchProc {
    child: Child,
    metrics: SocketAddr,
}

impl Drop for SwitchProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `tern switch serve` with `members` servers in its group and the offload on or off.
fn start_switch(
    t: &Topology,
    side: &TernSide,
    exe: &Path,
    members: u16,
    offload: bool,
    busy_poll: bool,
) -> Result<SwitchProc, String> {
    let n = side.controls.len();
    let list = |v: Vec<String>| v.join(", ");
    let cfg = format!(
        "program = \"snat.toml\"\nports = [{}]\nservers = [{}]\ncontrol = [{}]\n{}ip = \"10.0.0.254\"\nmac = \"02:00:00:00:00:fe\"\n\
         [offload]\nenabled = {offload}\n[group]\nmembers = [{}]\n\
         [[route]]\nprefix = \"198.51.100.0/24\"\nport = 2\nmac = \"02:00:00:00:02:01\"\n\
         [[route]]\nprefix = \"10.0.0.1/32\"\nport = 1\nmac = \"02:00:00:00:01:01\"\n",
        list(side.ports.iter().map(|p| format!("\"{p}\"")).collect()),
        list((0..n).map(|s| (s + 3).to_string()).collect()),
        list(side.controls.iter().map(|c| format!("\"{c}\"")).collect()),
        if n > 1 {
            format!("buddies = [{}]\n", list((0..n).map(|s| ((s + 1) % n).to_string()).collect()))
        } else {
            String::new()
        },
        list((0..members).map(|s| s.to_string()).collect()),
    );
    let path = t.dir.join("serve.toml");
    std::fs::write(&path, cfg).map_err(|e| format!("{}: {e}", path.display()))?;
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port for the switch's metrics: {e}"))?;
    let log = t.dir.join("switch.log");
    let err = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let mut cmd = match dut_cores() {
        Some(_) => {
            let mut c = Command::new("taskset");
            c.args(&taskset()[1..]).arg(exe);
            c
        }
        None => Command::new(exe),
    };
    let child = cmd
        .args(["switch", "serve"])
        .arg(&path)
        .args(["--metrics", &metrics.to_string()])
        .args(if busy_poll { &["--busy-poll"][..] } else { &[][..] })
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .map_err(|e| format!("starting the switch: {e}"))?;
    let mut sw = SwitchProc { child, metrics };
    wait_http(&format!("http://{metrics}/metrics"), &mut sw.child, &log, "the switch")?;
    Ok(sw)
}

/// Netfilter's side: the client, a router namespace that masquerades, the external host.
fn build_netfilter(t: &mut Topology, o: &Options, epoch: Instant) -> Result<Hosts, String> {
    let c = t.add_netns("nc")?;
    let r = t.add_netns("nr")?;
    let x = t.add_netns("nx")?;
    t.host_link(&c, "in0", Some(&r), "02:00:00:00:01:01", "10.0.0.1/24")?;
    ip(&format!("-n {c} route add default via 10.0.0.254"))?;
    t.host_link(&x, "out0", Some(&r), "02:00:00:00:02:01", "198.51.100.2/24")?;
    ip(&format!("-n {r} addr add 10.0.0.254/24 dev in0"))?;
    ip(&format!("-n {r} addr add 198.51.100.1/24 dev out0"))?;
    if o.afxdp {
        checksums_whole(&c)?;
        checksums_whole(&x)?;
    }
    run("ip", &["netns", "exec", &r, "sysctl", "-qw", "net.ipv4.ip_forward=1"])?;
    rps(Some(&r), "in0")?;
    for rule in [
        "add table ip nat".to_string(),
        "add chain ip nat post { type nat hook postrouting priority 100 ; }".to_string(),
        "add rule ip nat post oifname \"out0\" masquerade".to_string(),
    ] {
        run("ip", &["netns", "exec", &r, "sh", "-c", &format!("nft '{rule}'")])?;
    }
    let (gen_tx, gen_rx) = generator(c, o.flows, epoch)?;
    let sink = sink(x, epoch)?;
    Ok(Hosts { gen_tx, gen_rx, sink })
}

/// Warm-up, flood and paced run on one system; `sw` the switch when it is Tern's.
fn measure(
    hosts: &Hosts,
    sw: Option<&SwitchProc>,
    o: &Options,
    phase: &mut u32,
    system: System,
    round: usize,
    size: usize,
) -> Result<Measured, String> {
    let mut next = || {
        *phase += 1;
        *phase
    };
    let warm = (WARM_RATE * WARM_SECS) as u64;
    hosts.phase(next(), GenCmd::Paced { phase: 0, size, rate: WARM_RATE, count: warm })?;
    let mut entries = None;
    if let (Some(sw), System::SwitchOnly) = (sw, system) {
        // The heavy flows are in the switch after a few of the controller's intervals; give it
        // up to two more seconds of the same traffic if the warm-up was not enough.
        for _ in 0..3 {
            let (_, _, e, _) = switch_counters(sw.metrics)?;
            if e >= o.flows as u64 {
                break;
            }
            hosts.phase(next(), GenCmd::Paced { phase: 0, size, rate: WARM_RATE, count: warm })?;
        }
    }
    let before = sw.map(|s| switch_counters(s.metrics)).transpose()?;
    if let Some(b) = before {
        entries = Some(b.2);
    }
    let p = next();
    let (sent, got) = hosts.phase(p, GenCmd::Flood { phase: p, size, secs: o.secs })?;
    let (share, port_dropped) = match (sw, before) {
        (Some(s), Some(b)) => {
            let a = switch_counters(s.metrics)?;
            let (off, srv) = (a.0 - b.0, a.1 - b.1);
            (Some(if off + srv == 0 { 0.0 } else { off as f64 / (off + srv) as f64 }), Some(a.3.saturating_sub(b.3)))
        }
        _ => (None, None),
    };
    // Delivered while the generator sent: what buffers still held at its end does not count.
    let in_window = got.by(sent.end_ns);
    let pps = in_window as f64 / sent.secs.max(1e-9);
    // Datagrams a second per busy core of the system under test: what it forwards with what it
    // used, where the generator (not the system) set the pace.
    let n_dut = dut_cores().map_or(1, |c| c.count);
    let pps_per_core = sent.dut_busy.filter(|&b| b > 0.0).map(|b| pps / (b * n_dut as f64));
    let p = next();
    let (lsent, lgot) =
        hosts.phase(p, GenCmd::Paced { phase: p, size, rate: o.latency_rate, count: o.latency_packets })?;
    let us = |q: f64| lgot.latency.value_at_quantile(q) as f64 / 1e3;
    Ok(Measured {
        system: system.key(),
        round,
        frame_bytes: size,
        pps,
        flood_sent: sent.sent,
        flood_received: got.received,
        flood_received_in_window: in_window,
        flood_secs: sent.secs,
        dut_busy: sent.dut_busy,
        pps_per_busy_core: pps_per_core,
        latency_rate: lsent.sent as f64 / lsent.secs.max(1e-9),
        latency_sent: lsent.sent,
        latency_received: lgot.received,
        latency_p50_us: us(0.5),
        latency_p99_us: us(0.99),
        latency_mean_us: lgot.latency.mean() / 1e3,
        latency_kernel_stamped: lgot.stamped,
        latency_at_sink_p50_us: lgot.latency_at_sink.value_at_quantile(0.5) as f64 / 1e3,
        latency_at_sink_p99_us: lgot.latency_at_sink.value_at_quantile(0.99) as f64 / 1e3,
        switch_share: share,
        offloaded_entries: entries,
        switch_ring_dropped: port_dropped,
    })
}

/// What the network part measured, and what it could not.
pub struct Outcome {
    pub summary: serde_json::Map<String, serde_json::Value>,
    pub report: serde_json::Value,
    pub rows: Vec<super::plot::SnatRow>,
    pub stopped: bool,
}

/// Runs the network part (root). `say` prints a line; `tick` advances the progress bar.
pub fn run_network(
    o: &Options,
    stop: &AtomicBool,
    say: &dyn Fn(String),
    tick: &dyn Fn(String),
) -> Result<Outcome, String> {
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let id = std::process::id() % 100_000;
    let dir = std::env::temp_dir().join(format!("tern-bench-snat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let nft = have_nft();
    let mut t =
        Topology { id, netns: Vec::new(), links: Vec::new(), children: Vec::new(), nft_tables: Vec::new(), nft, dir };
    let epoch = Instant::now();
    let tern = build_tern(&mut t, o, epoch, &exe)?;
    let nf = if nft { Some(build_netfilter(&mut t, o, epoch)?) } else { None };
    if !nft {
        say("skipped netfilter: `nft` is not installed (Debian: apt-get install nftables)".into());
    }
    let mut systems = vec![System::SwitchOnly];
    systems.extend((1..=o.servers).map(System::Servers));
    if nf.is_some() {
        systems.push(System::Netfilter);
    }
    let mut all: Vec<Measured> = Vec::new();
    let mut phase = 0u32;
    let mut stopped = false;
    'rounds: for round in 0..o.rounds {
        for (si, &size) in o.sizes.iter().enumerate() {
            for k in 0..systems.len() {
                if crate::signals::stopping(stop) {
                    stopped = true;
                    break 'rounds;
                }
                let system = systems[(round + si + k) % systems.len()];
                tick(format!("round {} {size} B {}", round + 1, system.label()));
                let m = match system {
                    System::Netfilter => {
                        measure(nf.as_ref().expect("netfilter built"), None, o, &mut phase, system, round, size)?
                    }
                    System::SwitchOnly | System::Servers(_) => {
                        let (members, offload) = match system {
                            System::Servers(k) => (k, false),
                            _ => (1, true),
                        };
                        let sw = start_switch(&t, &tern, &exe, members, offload, o.busy_poll)?;
                        measure(&tern.hosts, Some(&sw), o, &mut phase, system, round, size)?
                    }
                };
                all.push(m);
            }
        }
    }
    drop(t);
    let get = |sys: &str, size: usize| -> Vec<&Measured> {
        all.iter().filter(|m| m.system == sys && m.frame_bytes == size).collect()
    };
    let mut rows = Vec::new();
    let mut by_size = Vec::new();
    for &size in &o.sizes {
        let mut row = super::plot::SnatRow { frame_bytes: size, series: Vec::new() };
        let mut entry = serde_json::Map::new();
        entry.insert("frame_bytes".into(), json!(size));
        for &s in &systems {
            let ms = get(&s.key(), size);
            if ms.is_empty() {
                continue;
            }
            let med = |f: fn(&Measured) -> f64| tern_chain::bench::median(&ms.iter().map(|m| f(m)).collect::<Vec<_>>());
            let (pps, p50, p99, mean) =
                (med(|m| m.pps), med(|m| m.latency_p50_us), med(|m| m.latency_p99_us), med(|m| m.latency_mean_us));
            row.series.push((s.label(), pps, p50, p99));
            entry.insert(
                s.key(),
                json!({"median_pps": pps, "median_gbps": pps * size as f64 * 8.0 / 1e9, "median_p50_us": p50, "median_p99_us": p99, "median_mean_us": mean, "median_dut_busy": med(|m| m.dut_busy.unwrap_or(f64::NAN)), "median_pps_per_busy_core": med(|m| m.pps_per_busy_core.unwrap_or(f64::NAN)), "median_at_sink_p50_us": med(|m| m.latency_at_sink_p50_us), "median_at_sink_p99_us": med(|m| m.latency_at_sink_p99_us)}),
            );
        }
        rows.push(row);
        by_size.push(serde_json::Value::Object(entry));
    }
    // Ratios within a round (the systems ran minutes apart at most, in a rotating order).
    let base = o.sizes[0];
    let ratio = |num: &str, den: &str, f: fn(&Measured) -> f64| -> Option<(f64, f64, f64)> {
        let r: Vec<f64> = (0..o.rounds)
            .filter_map(|round| {
                let a = all.iter().find(|m| m.system == num && m.frame_bytes == base && m.round == round)?;
                let b = all.iter().find(|m| m.system == den && m.frame_bytes == base && m.round == round)?;
                // A side not measured (NaN: a busy share below the clock's tick) is left out.
                (f(b) > 0.0 && f(a).is_finite()).then(|| f(a) / f(b))
            })
            .collect();
        (!r.is_empty()).then(|| spread(&r))
    };
    let mut summary = serde_json::Map::new();
    let pps_ratio = ratio("switch_only", "netfilter", |m| m.pps);
    // Medians, not means: one of this shared machine's occasional stalls of milliseconds in a
    // paced run would decide a mean (the paper's Table I gives means; they are reported too).
    let lat_ratio = ratio("switch_only", "servers_1", |m| m.latency_p50_us);
    summary.insert("snat_over_netfilter_pps".into(), json!(pps_ratio.map(|r| r.0)));
    summary.insert("offload_latency_ratio".into(), json!(lat_ratio.map(|r| r.0)));
    let per_core = ratio("switch_only", "netfilter", |m| m.pps_per_busy_core.unwrap_or(f64::NAN));
    summary.insert("snat_over_netfilter_pps_per_busy_core".into(), json!(per_core.map(|r| r.0)));
    let spread_json = |r: Option<(f64, f64, f64)>| r.map(|(m, lo, hi)| json!({"median": m, "min": lo, "max": hi}));
    let report = json!({
        "frame_bytes_of_ratios": base,
        "snat_over_netfilter_pps_spread": spread_json(pps_ratio),
        "snat_over_netfilter_pps_per_busy_core_spread": spread_json(per_core),
        "offload_latency_ratio_spread": spread_json(lat_ratio),
        "offload_latency_ratio_mean": spread_json(ratio("switch_only", "servers_1", |m| m.latency_mean_us)),
        "offload_latency_ratio_p99": spread_json(ratio("switch_only", "servers_1", |m| m.latency_p99_us)),
        "offload_latency_ratio_at_sink": spread_json(ratio("switch_only", "servers_1", |m| m.latency_at_sink_p50_us)),
        "netfilter_skipped": !nft,
        "by_size": by_size,
        "measurements": all,
    });
    Ok(Outcome { summary, report, rows, stopped })
}

/// One line a measurement, for the table.
pub fn describe(m: &serde_json::Value) -> Option<String> {
    let size = m.get("frame_bytes")?.as_u64()?;
    let mut s = format!("{size:>5} B:");
    for key in ["switch_only", "servers_1", "servers_2", "servers_3", "netfilter"] {
        if let Some(v) = m.get(key) {
            let f = |k: &str| v.get(k).and_then(|x| x.as_f64()).unwrap_or(f64::NAN);
            let _ = write!(
                s,
                " | {key} {:.0} kpps ({:.2} Gbps, busy {:.0}%: {:.0} kpps a busy core) p50 {:.1} µs p99 {:.1} µs (at the sink {:.1} / {:.1})",
                f("median_pps") / 1e3,
                f("median_gbps"),
                100.0 * f("median_dut_busy"),
                f("median_pps_per_busy_core") / 1e3,
                f("median_p50_us"),
                f("median_p99_us"),
                f("median_at_sink_p50_us"),
                f("median_at_sink_p99_us")
            );
        }
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::Arrivals;

    #[test]
    fn arrivals_count_by_the_millisecond_they_reached_the_host() {
        const MS: u64 = 1_000_000;
        let begin = 1_700_000_000 * 1_000 * MS;
        let mut a = Arrivals::new(begin);
        assert_eq!(a.by(10 * MS), 0);
        a.add(begin + MS / 2);
        a.add(begin - 10); // stamped just before the phase began: its first millisecond
        a.add(begin + 1_200_000);
        a.add(begin + 5 * MS);
        a.add(begin + 3_600_000 * MS); // an hour on: the last millisecond kept
        assert_eq!(a.by(0), 2);
        assert_eq!(a.by(999_999), 2);
        assert_eq!(a.by(MS), 3);
        assert_eq!(a.by(5 * MS - 1), 3);
        assert_eq!(a.by(5 * MS), 4);
        assert_eq!(a.by(60_000 * MS), 4);
        assert_eq!(a.by(u64::MAX), 5);
        assert_eq!(a.per_ms.len(), Arrivals::MAX_MS + 1);
    }
}
