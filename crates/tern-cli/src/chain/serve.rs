//! `tern chain serve`: tenants' chains between two ports (docs/chain.md, "Serving"): a frame
//! from one port goes through its tenant's chain and leaves on the other; an answer (a KV hit,
//! a transport acknowledgement) leaves where its packet came in. Ports are interfaces
//! (`afpacket:IFNAME` or `afxdp:IFNAME`, whole frames, root) or frames carried in UDP datagrams
//! (`udp:BIND=PEER`). Prometheus `tern_chain_*` on `--metrics`, with `/runtime` (what `tern
//! chain dump` reads); SIGINT/SIGTERM stop it with a summary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use serde_json::json;
use tern_chain::aes::ledger::Ledger;
use tern_chain::fair::Share;
use tern_chain::plan::{self, Plan};
use tern_chain::runtime::{
    Arrival, Classify, Config, Egress, FairShares, Ingress, Item, Launcher, Limiter, Live, Mode, Monitor, RunStats,
    Runtime, Scaling, reason,
};
use tern_chain::task::{Keys, Numbering};
use tern_chain::tenant::{self, Tenant};
use tern_chain::update::Updater;
use tern_io::{Batch, Pool, Port, PortStats};

use crate::CmdResult;
use crate::metrics::{Labels, counter, counter_family, gauge_family, label};
use crate::ports::FramePort;

/// Options of `tern chain serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Tenant files (TOML; examples/chain/).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// A port, given twice: `afpacket:IFNAME` or `afxdp:IFNAME` (whole Ethernet frames on an
    /// interface; needs root; AF_XDP takes frames as the sender left them, so turn off its
    /// transmit checksum offload) or `udp:BIND=PEER` (each UDP datagram's payload is one Ethernet frame: received on
    /// BIND from PEER alone, others dropped, sent to PEER); either may go on with injected faults,
    /// `,loss=P[,duplicate=P][,reorder=P][,seed=N][,dir=tx|rx|both]`. A frame from the first
    /// port leaves on the second and back.
    #[arg(long = "port", required = true)]
    pub ports: Vec<String>,
    /// How the tasks run: snic (chains fused in regions, the credit scheduler), panic (a task
    /// a region, back to the scheduler after each), rtc (every chain on every core, flows
    /// sharded).
    #[arg(long, default_value = "snic")]
    pub mode: Mode,
    /// Worker cores (core 0 also receives and schedules).
    #[arg(long, default_value_t = 2)]
    pub cores: usize,
    /// Instances of each chain (snic, panic) [default: one a core].
    #[arg(long)]
    pub instances: Option<usize>,
    /// Credits of a chain instance (snic) or a region (panic).
    #[arg(long, default_value_t = 8)]
    pub credits: u32,
    /// Packets the scheduler's queues hold waiting for credits, all tenants together (snic,
    /// panic; a stateful chain's tenant has a lane an instance, each holding its share); more
    /// wait at the port. A deeper queue takes a longer burst, and at saturation,
    /// full, it is the working set the scheduler's core goes through (docs/chain.md).
    #[arg(long, default_value_t = Config::default().queue)]
    pub queue: usize,
    /// Pin core k to CPU k.
    #[arg(long)]
    pub pin: bool,
    /// The hardware profile the plan must fit (built-in name or TOML file): its regions, PR
    /// time and epoch. `cpu` has no SuperNIC board: regions unbounded, no PR, a 20 ms epoch,
    /// instances bounded by cores alone.
    #[arg(long, default_value = "supernic-htg9200")]
    pub profile: String,
    /// Serve Prometheus metrics (`/metrics`), `/runtime` (JSON: the plan and each task's
    /// packets and time) and `/config` on this address.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Recompute fair shares this often, ms: each tenant's offered load and its tasks'
    /// measured time on each core give its share (DRF over the cores' time, weighted by its
    /// bandwidth), set as its ingress limit (snic, panic); more than 0, at most 3,600,000 (an
    /// hour) [default: the profile's epoch].
    #[arg(long, value_parser = epoch_ms)]
    pub epoch_ms: Option<f64>,
    /// No fair shares: no ingress limits (the scheduler's virtual-time order alone).
    #[arg(long)]
    pub no_fair: bool,
    /// Scale stateless chains with their load (snic, panic): one instance of each in service at
    /// the start, more put in service (after the profile's PR time) while the chain's tasks
    /// keep more than 0.8 of a core busy per instance, up to --instances and into the
    /// profile's regions: a launch takes a free region, or, for a chain below its space share
    /// (DRF of the board's regions and on-chip memory over the tenants' bandwidth_gbps), one of
    /// a chain above its own.
    #[arg(long)]
    pub autoscale: bool,
    /// Stop after this many seconds (more than 0, at most a year) [default: run until SIGINT or
    /// SIGTERM, which stop it cleanly with its summary].
    #[arg(long, value_parser = crate::signals::duration_secs)]
    pub duration: Option<f64>,
    /// Print a one-line progress report to stderr every this many seconds (0: none): packets
    /// in, out, back and dropped so far, and the rate in over the last interval.
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval: f64,
    /// Print the summary as JSON on stdout (docs/chain.md, "Serving", lists its keys).
    #[arg(long)]
    pub json: bool,
    /// The nonce ledger: the file where AES-GCM tasks reserve their instance numbers, key by
    /// key, so that a key never seals two payloads under one nonce across restarts, nor in two
    /// servers sharing the file (docs/chain.md, "AES-GCM"). Made at the first AES task; keep
    /// it: a server given the same key without it takes the same numbers again, and its nonces
    /// then differ only by chance (each instance's count starts at random below 2^63)
    /// [default: $XDG_STATE_HOME/tern/aes-nonces, else $HOME/.local/state/tern/aes-nonces].
    #[arg(long, value_name = "FILE")]
    pub nonce_ledger: Option<PathBuf>,
}

/// Where `serve` keeps its nonce ledger: `--nonce-ledger`, else under `$XDG_STATE_HOME`, else
/// under `$HOME/.local/state` (each only if set to an absolute path); else AES tasks are refused.
pub fn nonce_numbering(given: Option<&std::path::Path>) -> Numbering {
    let from_env = |var: &str, under: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|p| p.join(under).join("tern/aes-nonces"))
    };
    match given
        .map(PathBuf::from)
        .or_else(|| from_env("XDG_STATE_HOME", ""))
        .or_else(|| from_env("HOME", ".local/state"))
    {
        Some(path) => Numbering::Ledger(Arc::new(Ledger::new(path))),
        None => Numbering::Refused(
            "no nonce ledger: neither XDG_STATE_HOME nor HOME is set to an absolute path; give --nonce-ledger FILE"
                .into(),
        ),
    }
}

type Ports = Arc<Vec<Mutex<FramePort>>>;

/// Receives from both ports in turn (a batch from each, the first port taking turns).
struct PortIngress {
    ports: Ports,
    batch: Batch,
    next: usize,
}

impl Ingress for PortIngress {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        let n = self.ports.len();
        for j in 0..n {
            let i = (self.next + j) % n;
            if max == 0 {
                break;
            }
            let Ok(mut p) = self.ports[i].lock() else { continue };
            // A receive error (an interface gone down) is the port's to count; the loop goes on.
            let _ = p.recv(now, &mut self.batch);
            drop(p);
            for packet in self.batch.drain() {
                out.push(Arrival { packet, at: now, port: i as u8 });
            }
        }
        self.next = (self.next + 1) % n.max(1);
    }
}

/// `rtc`: core 0 receives and deals each frame to the core its flow hashes to (software RSS);
/// the other cores take what was dealt them.
enum RssIngress {
    Reader {
        inner: PortIngress,
        classify: Box<Classify>,
        to: Vec<rtrb::Producer<Arrival>>,
        buf: Vec<Arrival>,
        /// Frames dealt to a core whose queue was full, dropped.
        dropped: Arc<AtomicU64>,
    },
    Taker(rtrb::Consumer<Arrival>),
}

impl Ingress for RssIngress {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        match self {
            RssIngress::Taker(c) => {
                while out.len() < max {
                    match c.pop() {
                        Ok(a) => out.push(a),
                        Err(_) => break,
                    }
                }
            }
            RssIngress::Reader { inner, classify, to, buf, dropped } => {
                inner.recv(now, max, buf);
                let cores = to.len() + 1;
                for a in buf.drain(..) {
                    // Unclassifiable frames stay here, to be counted by this core.
                    let core = classify.tenant(a.packet.data()).map_or(0, |(_, h)| (h % cores as u64) as usize);
                    if core == 0 {
                        out.push(a);
                    } else if let Err(rtrb::PushError::Full(a)) = to[core - 1].push(a) {
                        // That core is behind: the frame is dropped as a full NIC queue drops it.
                        drop(a);
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// Sends what leaves: a frame to the other port, an answer back to its own.
struct PortEgress {
    ports: Ports,
    peers: Vec<Option<SocketAddr>>,
    pool: Pool,
    out: Vec<Batch>,
}

impl Egress for PortEgress {
    fn send(&mut self, now: Instant, items: &mut Vec<Item>) {
        let n = self.ports.len();
        for item in items.drain(..) {
            let port = usize::from(item.desc.port).min(n - 1);
            let to = if item.desc.reply() { port } else { (port + 1) % n };
            let mut packet = item.packet;
            if let Some(peer) = self.peers[to] {
                packet.set_peer(peer);
            }
            // A full batch goes out before the next frame joins it: what a core has to send
            // (its regions' batches and the tasks' own packets) may pass one batch.
            if let Some(packet) = self.out[to].push(packet) {
                self.send_out(to, now);
                if let Some(p) = self.out[to].push(packet) {
                    self.pool.put(p);
                }
            }
        }
        for i in 0..self.out.len() {
            self.send_out(i, now);
        }
    }
}

impl PortEgress {
    /// Sends port `i`'s batch; what the port could not send it counts as `tx_dropped`.
    fn send_out(&mut self, i: usize, now: Instant) {
        let b = &mut self.out[i];
        if b.is_empty() {
            return;
        }
        if let Ok(mut p) = self.ports[i].lock() {
            let _ = p.port().send(now, b);
        }
        b.recycle(&self.pool);
    }
}

/// The chain server's metrics, read from the runtime's published counters at each scrape.
struct ChainCollector {
    monitor: Monitor,
    limiter: Limiter,
    launcher: Launcher,
    updater: Updater,
    rejected: Arc<std::sync::atomic::AtomicU64>,
    fair: Shares,
    tenants: Vec<String>,
    /// By tenant: every reason its packets can be dropped for ([`drop_reasons_of`]).
    drop_reasons: Vec<Vec<&'static str>>,
    /// By tenant: its chain.
    chain_of: Vec<usize>,
    /// By chain: its space share, instances (with --autoscale).
    space_shares: Option<Vec<usize>>,
    /// The two ports, for their drops.
    ports: Ports,
    /// `rtc`: frames dealt to a core whose queue was full.
    rss_dropped: Arc<AtomicU64>,
}

/// Every reason tenant `t`'s packets can be dropped for (docs/chain.md, "Serving"): its tasks'
/// (by kind), the data path's, and the join's if its DAG is parallel; each once, in that order.
fn drop_reasons_of(t: &Tenant) -> Vec<&'static str> {
    let tasks = t.tasks.iter().flat_map(|s| tern_chain::task::drop_reasons(s.kind()).iter().copied());
    let own = reason::ALL.into_iter().filter(|r| t.parallel || !reason::SYNC.contains(r));
    let mut v: Vec<&'static str> = Vec::new();
    for r in tasks.chain(own) {
        if !v.contains(&r) {
            v.push(r);
        }
    }
    v
}

/// Each tenant's share at the last epoch (None before the first, or without fairness).
type Shares = Arc<Mutex<Vec<Option<Share>>>>;

impl std::fmt::Debug for ChainCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainCollector").field("tenants", &self.tenants).finish()
    }
}

impl Collector for ChainCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let live = self.monitor.live();
        let s = &live.stats;
        let by_tenant = |f: fn(&tern_chain::runtime::TenantStats) -> u64| -> Vec<(Labels, u64)> {
            s.tenants.iter().zip(&self.tenants).map(|(t, n)| (label("tenant", n), f(t))).collect()
        };
        counter_family(
            &mut enc,
            "tern_chain_rx_packets",
            "Packets classified to each tenant.",
            &by_tenant(|t| t.packets_in),
        )?;
        counter_family(
            &mut enc,
            "tern_chain_tx_packets",
            "Packets sent on after each tenant's chain.",
            &by_tenant(|t| t.packets_out),
        )?;
        counter_family(
            &mut enc,
            "tern_chain_replies_packets",
            "Packets sent back towards their source (answers, and tasks' own packets such as acknowledgements).",
            &by_tenant(|t| t.replies),
        )?;
        // Every reason a tenant's packets can be dropped for, 0 until one is; then any other
        // its counters hold (a kind a live update brought in).
        let mut drops: Vec<(Labels, u64)> = Vec::new();
        for ((t, n), reasons) in s.tenants.iter().zip(&self.tenants).zip(&self.drop_reasons) {
            let others = t.drops.keys().filter(|r| !reasons.contains(r));
            for reason in reasons.iter().chain(others) {
                let mut l = label("tenant", n);
                l.extend(label("reason", reason));
                drops.push((l, t.drops.get(reason).copied().unwrap_or(0)));
            }
        }
        counter_family(
            &mut enc,
            "tern_chain_drops_packets",
            "Packets dropped, by tenant and reason: its tasks' reasons, and the data path's (rate_limited, queue_full, ring_full, no_task, no_region; sync_timeout, sync_late, sync_lost for a parallel DAG).",
            &drops,
        )?;
        // The ports' own drops come before any tenant is known (a full receive ring) or after
        // the chain (the kernel refusing a frame): totals over both ports, no label.
        let (mut rx_dropped, mut tx_dropped) = (0, 0);
        for p in self.ports.iter() {
            if let Ok(p) = p.lock() {
                let st = p.stats();
                rx_dropped += st.rx_dropped;
                tx_dropped += st.tx_dropped;
            }
        }
        counter(
            &mut enc,
            "tern_chain_port_rx_dropped_packets",
            "Frames the ports dropped on receipt, both ports: the kernel's receive ring was full, or a frame was too long or an unsegmented GSO frame.",
            rx_dropped,
        )?;
        counter(
            &mut enc,
            "tern_chain_port_tx_dropped_packets",
            "Frames the ports could not send, both ports: the kernel refused them (a full queue, longer than the link's MTU).",
            tx_dropped,
        )?;
        counter(
            &mut enc,
            "tern_chain_rss_dropped_packets",
            "rtc: frames core 0 dealt to a core whose queue (4096 frames) was full, dropped before any task.",
            self.rss_dropped.load(Ordering::Relaxed),
        )?;
        let offered = self.limiter.offered();
        let rows: Vec<(Labels, u64)> =
            offered.iter().zip(&self.tenants).map(|(o, n)| (label("tenant", n), o.1)).collect();
        counter_family(
            &mut enc,
            "tern_chain_offered_bytes",
            "Bytes each tenant offered (classified, before its ingress limit): its intended load.",
            &rows,
        )?;
        let shares = self.fair.lock().map(|f| f.clone()).unwrap_or_default();
        let per = |f: fn(&Share) -> Option<f64>| -> Vec<(Labels, f64)> {
            shares
                .iter()
                .zip(&self.tenants)
                .filter_map(|(s, n)| s.as_ref().and_then(f).map(|v| (label("tenant", n), v)))
                .collect()
        };
        gauge_family(
            &mut enc,
            "tern_chain_allowed_gbps",
            "Each tenant's fair share of what it offered at the last epoch, Gbit/s.",
            &per(|s| Some(s.allowed_gbps)),
        )?;
        gauge_family(
            &mut enc,
            "tern_chain_limit_gbps",
            "Each tenant's ingress limit set at the last epoch, Gbit/s (absent: none).",
            &per(|s| s.limit_gbps),
        )?;
        let active = self.launcher.active();
        let rows: Vec<(Labels, i64)> = self
            .chain_of
            .iter()
            .zip(&self.tenants)
            .map(|(&c, n)| (label("tenant", n), active.get(c).copied().unwrap_or(0) as i64))
            .collect();
        gauge_family(
            &mut enc,
            "tern_chain_instances_in_service",
            "Instances of each tenant's chain in service (the autoscaler's; all built without it).",
            &rows,
        )?;
        if let Some(shares) = &self.space_shares {
            let rows: Vec<_> = self
                .chain_of
                .iter()
                .zip(&self.tenants)
                .map(|(&c, n)| (label("tenant", n), shares.get(c).copied().unwrap_or(0) as i64))
                .collect();
            gauge_family(
                &mut enc,
                "tern_chain_space_share_instances",
                "Instances of each tenant's chain its space share gives (DRF over the board's regions and on-chip memory; --autoscale).",
                &rows,
            )?;
        }
        gauge_family(
            &mut enc,
            "tern_chain_dominant_share",
            "Each tenant's dominant share at the last epoch: the largest fraction of any core's time it takes.",
            &per(|s| Some(s.dominant)),
        )?;
        counter(
            &mut enc,
            "tern_chain_unknown_tenant_packets",
            "Frames no tenant's ingress pattern matched.",
            s.unknown_tenant,
        )?;
        counter(&mut enc, "tern_chain_malformed_packets", "Frames that are not Ethernet carrying IP.", s.malformed)?;
        counter(&mut enc, "tern_chain_scheduler_decisions", "Packets the scheduler moved into a region.", s.decisions)?;
        counter(
            &mut enc,
            "tern_chain_scheduler_nanoseconds",
            "The scheduler's time (receiving not counted).",
            s.scheduler_ns,
        )?;
        counter(
            &mut enc,
            "tern_chain_credit_waits",
            "Times a tenant's head packet waited for a credit.",
            s.credit_waits,
        )?;
        counter(
            &mut enc,
            "tern_chain_scheduler_refills",
            "Scheduler rounds run between two packets of a batch on its own core, credits having come back from another core.",
            s.refills,
        )?;
        let depth: Vec<(Labels, i64)> =
            live.queue_depth.iter().zip(&self.tenants).map(|(d, n)| (label("tenant", n), *d as i64)).collect();
        gauge_family(&mut enc, "tern_chain_queue_depth", "Packets waiting in each tenant's queue.", &depth)?;
        let credits: Vec<(Labels, i64)> = live.credits.iter().map(|(r, c)| (label("region", r), *c as i64)).collect();
        gauge_family(&mut enc, "tern_chain_credits", "Credits on hand, by the region they admit into.", &credits)?;
        let mut region_packets: std::collections::BTreeMap<usize, (u64, u64)> = Default::default();
        for w in &s.wrappers {
            if let Some(r) = w.region {
                let e = region_packets.entry(r).or_default();
                e.0 += w.packets;
                e.1 += w.ns;
            }
        }
        let rows: Vec<(Labels, u64)> = region_packets.iter().map(|(r, v)| (label("region", r), v.0)).collect();
        counter_family(
            &mut enc,
            "tern_chain_region_task_runs",
            "Task runs in each region (a packet through k tasks counts k).",
            &rows,
        )?;
        let rows: Vec<(Labels, u64)> = region_packets.iter().map(|(r, v)| (label("region", r), v.1)).collect();
        counter_family(&mut enc, "tern_chain_region_busy_nanoseconds", "Time each region's tasks ran.", &rows)?;
        let rows: Vec<(Labels, u64)> =
            live.launches.iter().enumerate().map(|(r, n)| (label("region", r), *n)).collect();
        counter_family(
            &mut enc,
            "tern_chain_launches",
            "New task instances launched into each region (a tenant's update swapped in, a relaunch).",
            &rows,
        )?;
        let rows: Vec<(Labels, i64)> = self
            .updater
            .generations()
            .iter()
            .zip(&self.tenants)
            .map(|(g, n)| (label("tenant", n), *g as i64))
            .collect();
        gauge_family(
            &mut enc,
            "tern_chain_generation",
            "Each tenant's generation: its live updates so far (0: as started).",
            &rows,
        )?;
        let rows: Vec<(Labels, u64)> =
            self.updater.launches().iter().zip(&self.tenants).map(|(l, n)| (label("tenant", n), *l)).collect();
        counter_family(
            &mut enc,
            "tern_chain_tenant_launches",
            "Regions that swapped in each tenant's new task instances (its updates).",
            &rows,
        )?;
        counter(
            &mut enc,
            "tern_chain_updates_rejected",
            "Tenant file changes not applied (the line printed says why; the running tenant stays).",
            self.rejected.load(std::sync::atomic::Ordering::Relaxed),
        )?;
        Ok(())
    }
}

/// A thread that runs `f` every `epoch` (on a fixed schedule; an overrun one goes on at once)
/// until `done`. It looks at `done` at least every 100 ms while it waits, so that a long epoch
/// does not hold a stopping server back. Should `f` panic, `on_panic` runs (it stops the
/// server).
fn every(
    epoch: Duration,
    done: Arc<std::sync::atomic::AtomicBool>,
    on_panic: impl FnMut() + Send + 'static,
    mut f: impl FnMut() + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let _stop = tern_io::OnPanic(on_panic);
        let mut next = Instant::now();
        while !crate::signals::stopping(&done) {
            // An overrun epoch goes on at once, its schedule from now.
            next = (next + epoch).max(Instant::now());
            if !crate::signals::sleep_unless(&done, next) {
                return;
            }
            f();
        }
    })
}

/// Loads every tenant file; the first error names its file and item.
pub fn load_tenants(files: &[PathBuf]) -> Result<Vec<Tenant>, String> {
    files.iter().map(|f| Tenant::load(f).map_err(|e| e.to_string())).collect()
}

/// The plan of `tenants` on `profile`'s regions.
pub fn plan_on(tenants: &[Tenant], profile: &str) -> Result<(Plan, tern_hw::Profile), String> {
    let profile = tern_hw::Profile::resolve(profile).map_err(|e| e.to_string())?;
    let p = plan_on_board(tenants, &profile, &Board::of(&profile)?)?;
    Ok((p, profile))
}

/// What serving takes from a profile: the regions to plan on, the partial-reconfiguration time
/// and the fairness epoch. A profile with a SuperNIC board (`chain.*` values) gives its own; one
/// without any (`cpu`: Tern on a CPU) has no board: regions bounded only by what a plan can
/// hold, no PR, the 20 ms epoch, and instances bounded by cores alone (no space step).
#[derive(Debug, Clone)]
pub struct Board {
    pub model: Option<tern_hw::chain::ChainModel>,
    pub regions: u64,
    pub region_luts: u64,
    pub pr: Duration,
    pub epoch: Duration,
}

/// The epoch on a profile without a board (SuperNIC's, §4.5).
const CPU_EPOCH: Duration = Duration::from_millis(20);

impl Board {
    /// `profile`'s board; an error names what a profile with some `chain.*` values lacks.
    pub fn of(profile: &tern_hw::Profile) -> Result<Board, String> {
        use tern_hw::{cost, latency, resource};
        let any_chain = [resource::CHAIN_REGIONS, resource::CHAIN_REGION_LUTS, resource::CHAIN_CREDITS]
            .iter()
            .any(|k| profile.capacity(k).is_some())
            || [latency::CHAIN_PR, latency::CHAIN_EPOCH, latency::CHAIN_CORE]
                .iter()
                .any(|k| profile.latency_ns.contains_key(*k))
            || profile.cycles(cost::CHAIN_SCHEDULE).is_some();
        if !any_chain {
            return Ok(Board {
                model: None,
                regions: tern_chain::plan::MAX_CHAIN as u64,
                region_luts: u64::MAX / 2,
                pr: Duration::ZERO,
                epoch: CPU_EPOCH,
            });
        }
        let m = tern_hw::chain::ChainModel::from_profile(profile)?;
        Ok(Board {
            regions: m.regions,
            region_luts: m.region_luts,
            pr: Duration::from_nanos(m.pr_ns as u64),
            epoch: Duration::from_secs_f64(m.epoch_ns / 1e9),
            model: Some(m),
        })
    }
}

/// The plan of `tenants` on `board` (a task's area from `profile`; on a board-less profile a
/// task the profile gives no area counts as none).
pub(crate) fn plan_on_board(tenants: &[Tenant], profile: &tern_hw::Profile, board: &Board) -> Result<Plan, String> {
    let area = |t: &tern_chain::tenant::TaskSpec| match tenant::area(t, profile) {
        Err(_) if board.model.is_none() => Ok(0),
        r => r,
    };
    plan::plan(tenants, &area, board.regions, board.region_luts)
}

fn mtimes(files: &[PathBuf]) -> Vec<Option<std::time::SystemTime>> {
    files.iter().map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok()).collect()
}

/// Reads the tenant files again and updates each tenant in `changed` (file indices) hitless:
/// the files are planned again, and each changed tenant's new tasks are built and swapped in
/// (see `tern_chain::update`) while every other tenant runs on untouched. Each tenant that
/// updated takes its new file's place in `running`; a line a tenant says what happened (an
/// error names what a live update may not change: a restart applies it). An error before any
/// tenant (a file that does not load or plan) changes nothing.
fn reload(
    files: &[PathBuf],
    changed: &[usize],
    running: &mut [Tenant],
    profile: &tern_hw::Profile,
    updater: &Updater,
    keys: &Mutex<Keys>,
    pool: &Pool,
) -> Result<Vec<Result<String, String>>, String> {
    let tenants = load_tenants(files)?;
    let plan = plan_on_board(&tenants, profile, &Board::of(profile)?)?;
    let mut k = keys.lock().map_err(|_| "keys lock")?;
    let mut out = Vec::new();
    for &t in changed {
        let (old, new) = (&running[t], &tenants[t]);
        let name = &old.name;
        let r = if new.name != old.name {
            Err(format!("tenant {name}: renamed to `{}` in {}: a restart renames", new.name, files[t].display()))
        } else if new.ingress != old.ingress || new.bandwidth_gbps != old.bandwidth_gbps {
            Err(format!(
                "tenant {name}: ingress or bandwidth_gbps changed in {}: a restart applies them (a live update replaces the DAG and its tasks' parameters)",
                files[t].display()
            ))
        } else {
            let mut factory = |t: usize, n: usize| super::stage::build(&tenants, t, n, &mut k, pool);
            updater
                .build(&plan, t, &mut factory)
                .and_then(|u| updater.apply(u, UPDATE_WAIT))
                .map(|a| {
                    let done = updater.settle(t, UPDATE_WAIT);
                    format!(
                        "tenant {name}: generation {} in service ({} region(s) swapped; {})",
                        a.generation,
                        a.regions,
                        if done {
                            "the previous generation drained and retired"
                        } else {
                            "the previous generation still draining"
                        }
                    )
                })
                .map_err(|e| format!("tenant {name}: {e}"))
        };
        if r.is_ok() {
            running[t] = tenants[t].clone();
        }
        out.push(r);
    }
    Ok(out)
}

/// How long an update waits for each step the data path takes.
const UPDATE_WAIT: Duration = Duration::from_secs(2);

/// The progress report (`--stats-interval`): packets in, out, back and dropped since `started`,
/// and the rate in since the last report.
fn progress_line(s: &RunStats, started: Instant, ticker: &mut crate::progress::Ticker) -> String {
    let sum = |f: fn(&tern_chain::runtime::TenantStats) -> u64| s.tenants.iter().map(f).sum::<u64>();
    let packets_in = sum(|t| t.packets_in);
    let dropped = sum(|t| t.drops.values().sum()) + s.unknown_tenant + s.malformed;
    let (rate, secs) = ticker.rate(packets_in, Instant::now());
    format!(
        "[{:>6.0} s] {packets_in} packets in, {} out, {} back, {dropped} dropped; {rate:.0} packets/s in over the last {secs:.0} s",
        started.elapsed().as_secs_f64(),
        sum(|t| t.packets_out),
        sum(|t| t.replies),
    )
}

/// `/runtime`'s JSON: the plan and each task's counters, as `tern chain dump` prints them.
pub fn runtime_json(mode: Mode, tenants: &[String], plan_text: &[String], live: &Live) -> serde_json::Value {
    json!({
        "mode": mode.name(),
        "tenants": tenants,
        "plan": plan_text,
        "stats": live.stats,
        "queue_depth": live.queue_depth,
        "credits": live.credits,
        "launches": live.launches,
    })
}

/// The scheduler's decisions and its time a decision, as the summary and `chain dump` print
/// them. Its time comes from the rounds it timed (one in `TIME_ONE_IN`) scaled to all its
/// decisions; until a timed round has taken a decision there is none to print, not zero.
pub(crate) fn scheduler_line(decisions: u64, ns: u64) -> String {
    let what = if decisions == 1 { "decision" } else { "decisions" };
    if ns == 0 {
        format!("{decisions} {what} (not timed yet: it times one round in {})", tern_chain::runtime::TIME_ONE_IN)
    } else {
        format!("{decisions} {what}, {:.1} ns each", ns as f64 / decisions.max(1) as f64)
    }
}

/// The longest fairness epoch `--epoch-ms` may ask, ms: an hour.
const MAX_EPOCH_MS: f64 = 3_600_000.0;

/// Parses `--epoch-ms`: more than 0 and at most [`MAX_EPOCH_MS`].
fn epoch_ms(s: &str) -> Result<f64, String> {
    crate::signals::positive_at_most(s, MAX_EPOCH_MS, "milliseconds", "an hour")
}

fn print_summary(names: &[String], s: &RunStats, ports: &[(String, PortStats)], elapsed: Duration, why: &str) {
    println!("stopped ({why}) after {:.1} s", elapsed.as_secs_f64());
    for (n, t) in names.iter().zip(&s.tenants) {
        let drops: Vec<String> = t.drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "tenant {n}: {} in, {} out, {} back; drops: {}",
            t.packets_in,
            t.packets_out,
            t.replies,
            if drops.is_empty() { "none".into() } else { drops.join(", ") }
        );
    }
    println!("unknown tenant {}, malformed {}", s.unknown_tenant, s.malformed);
    if s.decisions > 0 {
        println!("scheduler: {}", scheduler_line(s.decisions, s.scheduler_ns));
    }
    for (n, p) in ports {
        println!("port {n}: {} received, {} sent, {} dropped", p.rx_packets, p.tx_packets, p.rx_dropped + p.tx_dropped);
    }
}

/// `tern chain serve`.
pub fn serve(a: &ServeArgs) -> CmdResult {
    if a.ports.len() != 2 {
        return Err(
            format!("--port: give exactly two (a frame from one leaves on the other); got {}", a.ports.len()).into()
        );
    }
    crate::check_count("cores", a.cores as u64, 256)?;
    crate::check_count("credits", u64::from(a.credits), 1 << 16)?;
    crate::check_count("queue", a.queue as u64, 1 << 20)?;
    if let Some(n) = a.instances {
        crate::check_count("instances", n as u64, 1024)?;
    }
    // Checked before anything starts; the schedule starts at the serving loop's first look.
    let mut ticker = crate::progress::Ticker::new(a.stats_interval)?;
    let tenants = load_tenants(&a.files)?;
    let (plan, profile) = plan_on(&tenants, &a.profile)?;
    let names: Vec<String> = tenants.iter().map(|t| t.name.clone()).collect();
    let plan_text = plan.describe(&tenants);
    let say = |m: String| if a.json { eprintln!("{m}") } else { println!("{m}") };
    let signals = crate::signals::stop_flag()?;
    let signals_at_end = signals.clone();
    let pool = Pool::new(16_384, tern_io::DEFAULT_BUF_SIZE);
    let ports: Vec<Mutex<FramePort>> =
        a.ports.iter().map(|s| FramePort::open(s, &pool).map(Mutex::new)).collect::<Result<_, _>>()?;
    let ports: Ports = Arc::new(ports);
    let cfg = Config {
        mode: a.mode,
        cores: a.cores,
        instances: a.instances.unwrap_or(0),
        credits: a.credits,
        queue: a.queue,
        pin: a.pin,
        ..Config::default()
    };
    // AES key spaces live as long as the server, their numbers reserved in the nonce ledger:
    // relaunched instances, and the next server given the same key, never reuse a nonce.
    let numbering = nonce_numbering(a.nonce_ledger.as_deref());
    let keys = Arc::new(Mutex::new(Keys::new(numbering.clone())));
    let rt = {
        let mut k = keys.lock().map_err(|_| "keys lock")?;
        let mut factory = |t: usize, n: usize| super::stage::build(&tenants, t, n, &mut k, &pool);
        Runtime::new(plan.clone(), tenants.clone(), cfg, &mut factory)?
    };
    let launcher = rt.launcher();
    let instances = rt.instances();
    let board = Board::of(&profile)?;
    let pr = board.pr;
    let monitor = rt.monitor();
    let limiter = rt.limiter();
    let stopper = rt.stopper();
    let epoch = a.epoch_ms.map_or(board.epoch, |ms| Duration::from_secs_f64(ms.clamp(0.0, MAX_EPOCH_MS) / 1e3));
    if epoch.is_zero() {
        return Err("--epoch-ms: give a positive number of milliseconds".into());
    }
    let fair_on = !a.no_fair && a.mode != Mode::Rtc;
    if a.autoscale && a.mode == Mode::Rtc {
        return Err("--autoscale: rtc runs every chain on every core; use snic or panic".into());
    }
    let shares: Shares = Arc::new(Mutex::new(vec![None; tenants.len()]));
    say(format!(
        "tern chain serve: {} tenant(s) on {} in mode {}, {} core(s); ports {}",
        tenants.len(),
        profile.name,
        a.mode.name(),
        a.cores,
        a.ports.join(" <-> ")
    ));
    for l in &plan_text {
        say(format!("  {l}"));
    }
    if let Numbering::Ledger(l) = &numbering
        && tenants.iter().any(|t| t.tasks.iter().any(|s| matches!(s, tern_chain::tenant::TaskSpec::Aes { .. })))
    {
        say(format!("AES-GCM instance numbers reserved in the nonce ledger {}", l.path().display()));
    }
    // The space step: the tenants' DRF shares of the board's regions and on-chip memory, which
    // bound the autoscaler's launches.
    let space = if a.autoscale {
        match board.model {
            Some(_) => Some(tern_chain::scale::Space::from_plan(&plan, &tenants, &profile, rt.stateful())?),
            None => None,
        }
    } else {
        None
    };
    if let Some(space) = &space {
        say(format!(
            "autoscaling every {} ms: one instance of each stateless chain in service, up to {instances}, each new one after {} ms of PR, into the board's {} regions ({:.0} KB of on-chip memory); space shares by chain (instances): {:?}",
            epoch.as_secs_f64() * 1e3,
            pr.as_millis(),
            space.regions(),
            space.capacity.get(1).copied().unwrap_or(0.0),
            space.shares()
        ));
    } else if a.autoscale {
        say(format!(
            "autoscaling every {} ms: one instance of each stateless chain in service, up to {instances} (no board on {}: instances are bounded by cores, and a launch serves after {} ms of PR)",
            epoch.as_secs_f64() * 1e3,
            profile.name,
            pr.as_millis()
        ));
    }
    if fair_on {
        say(format!(
            "fair shares every {} ms: DRF over the cores' time on each tenant's offered load, weighted by its bandwidth, set as ingress limits",
            epoch.as_secs_f64() * 1e3
        ));
    }
    let stop_http = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rejected = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let rss_dropped = Arc::new(AtomicU64::new(0));
    if let Some(addr) = a.metrics {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ChainCollector {
            monitor: monitor.clone(),
            limiter: limiter.clone(),
            launcher: launcher.clone(),
            updater: rt.updater(),
            rejected: rejected.clone(),
            fair: shares.clone(),
            tenants: names.clone(),
            drop_reasons: tenants.iter().map(drop_reasons_of).collect(),
            chain_of: plan.tenants.iter().map(|p| p.chain).collect(),
            space_shares: space.as_ref().map(|s| s.shares()),
            ports: ports.clone(),
            rss_dropped: rss_dropped.clone(),
        }));
        let (m2, n2, p2, mode) = (monitor.clone(), names.clone(), plan_text.clone(), a.mode);
        let extra: crate::metrics::Extra =
            Box::new(move |path| (path == "/runtime").then(|| runtime_json(mode, &n2, &p2, &m2.live()).to_string()));
        let config = Arc::new(Mutex::new(plan_text.join("\n") + "\n"));
        let bound = crate::metrics::serve(addr, registry, config, stop_http.clone(), Some(extra))?;
        say(format!("metrics on http://{bound}/metrics, the runtime on http://{bound}/runtime"));
    }
    let mk_in = || PortIngress { ports: ports.clone(), batch: Batch::new(cfg.batch), next: 0 };
    let peers: Vec<Option<SocketAddr>> = ports.iter().map(|p| p.lock().ok().and_then(|p| p.peer())).collect();
    let ingress: Vec<Box<dyn Ingress>> = if a.mode == Mode::Rtc {
        let mut to = Vec::new();
        let mut takers: Vec<Box<dyn Ingress>> = Vec::new();
        for _ in 1..a.cores {
            let (p, c) = rtrb::RingBuffer::new(4096);
            to.push(p);
            takers.push(Box::new(RssIngress::Taker(c)));
        }
        let reader = RssIngress::Reader {
            inner: mk_in(),
            classify: Box::new(rt.classify()),
            to,
            buf: Vec::new(),
            dropped: rss_dropped.clone(),
        };
        std::iter::once(Box::new(reader) as Box<dyn Ingress>).chain(takers).collect()
    } else {
        vec![Box::new(mk_in())]
    };
    let egress: Vec<Box<dyn Egress>> = (0..a.cores)
        .map(|_| {
            Box::new(PortEgress {
                ports: ports.clone(),
                peers: peers.clone(),
                pool: pool.clone(),
                out: (0..2).map(|_| Batch::new(64)).collect(),
            }) as Box<dyn Egress>
        })
        .collect();
    // The data path runs on this thread; a watcher stops it on a signal or at the deadline.
    let deadline = crate::signals::deadline(Instant::now(), a.duration);
    let started = Instant::now();
    let watcher_stop = stopper.clone();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done2 = done.clone();
    let files = a.files.clone();
    let (mode, json_out) = (a.mode, a.json);
    let pool2 = pool.clone();
    let tenants_w = tenants.clone();
    let updater = rt.updater();
    let rejected2 = rejected.clone();
    let progress = monitor.clone();
    let watcher = std::thread::spawn(move || {
        let stop_on_panic = watcher_stop.clone();
        let _stop = tern_io::OnPanic(move || stop_on_panic.stop());
        let mut seen = mtimes(&files);
        let mut running = tenants_w;
        while !done2.load(std::sync::atomic::Ordering::Relaxed) {
            if crate::signals::stopping(&signals) || deadline.is_some_and(|d| Instant::now() >= d) {
                watcher_stop.stop();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
            tern_io::failpoint("chain-watch");
            if ticker.due(Instant::now()) {
                eprintln!("{}", progress_line(&progress.live().stats, started, &mut ticker));
            }
            let now = mtimes(&files);
            if now == seen {
                continue;
            }
            let changed: Vec<usize> = (0..files.len()).filter(|&i| now[i] != seen[i]).collect();
            seen = now;
            let msgs = if mode != Mode::Snic {
                vec![format!(
                    "tenant files changed; live updates run in mode snic (this server runs {}): restart to apply",
                    mode.name()
                )]
            } else {
                let results = reload(&files, &changed, &mut running, &profile, &updater, &keys, &pool2)
                    .unwrap_or_else(|e| vec![Err(format!("the files: {e}"))]);
                results
                    .into_iter()
                    .map(|r| {
                        r.unwrap_or_else(|e| {
                            rejected2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            format!("update rejected, the running tenant stays: {e}")
                        })
                    })
                    .collect()
            };
            for msg in msgs {
                if json_out { eprintln!("{msg}") } else { println!("{msg}") }
            }
        }
    });
    // Autoscaling: every epoch, each stateless chain's measured load drives its autoscaler.
    let scaling = a.autoscale.then(|| {
        let mut sc = Scaling::new(&rt, 1, pr, 0.8, epoch);
        if let Some(space) = space {
            sc = sc.with_space(space);
        }
        let json_out = a.json;
        let done = done.clone();
        let stop = stopper.clone();
        // Wakes at each epoch and when a launched instance's PR ends (it serves from then).
        std::thread::spawn(move || {
            let _stop = tern_io::OnPanic(move || stop.stop());
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let wait = sc.next_due().saturating_duration_since(Instant::now());
                std::thread::sleep(wait.min(Duration::from_millis(100)));
                for (ci, d) in sc.tick(Instant::now()).iter().enumerate() {
                    if let Some((load, d)) = d
                        && d.launched + d.evicted > 0
                    {
                        let msg = format!(
                            "chain {ci}: load {load:.2} instance(s), {} needed: {} launched, {} given up to another chain",
                            d.recommended, d.launched, d.evicted
                        );
                        if json_out { eprintln!("{msg}") } else { println!("{msg}") }
                    }
                }
            }
        })
    });
    // Fair shares: every epoch, what each tenant offered and its tasks' measured time give its
    // share, set as its ingress limit.
    let fairness = fair_on.then(|| {
        let shares = shares.clone();
        let mut fair = FairShares::new(&rt);
        let stop = stopper.clone();
        every(
            epoch,
            done.clone(),
            move || stop.stop(),
            move || {
                if let Some(got) = fair.tick(Instant::now())
                    && let Ok(mut sh) = shares.lock()
                {
                    *sh = got.into_iter().map(Some).collect();
                }
            },
        )
    });
    let stats = rt.run(&pool, ingress, egress);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    // A side thread that panicked stopped the data path (its message printed where it
    // happened): the server stops with an error naming it.
    let mut panicked = Vec::new();
    if watcher.join().is_err() {
        panicked.push("the watcher of signals and tenant files");
    }
    if fairness.is_some_and(|f| f.join().is_err()) {
        panicked.push("the fair-share thread");
    }
    if scaling.is_some_and(|s| s.join().is_err()) {
        panicked.push("the autoscaler's thread");
    }
    stop_http.store(true, std::sync::atomic::Ordering::Relaxed);
    let stats = stats?;
    if !panicked.is_empty() {
        return Err(format!("{} panicked; the server stopped", panicked.join(" and ")).into());
    }
    let port_stats: Vec<(String, PortStats)> = a
        .ports
        .iter()
        .zip(ports.iter())
        .map(|(n, p)| (n.clone(), p.lock().map(|p| p.stats()).unwrap_or_default()))
        .collect();
    let offered = limiter.offered();
    let last = shares.lock().map(|s| s.clone()).unwrap_or_default();
    let why = crate::signals::why_stopped(&signals_at_end, "duration");
    if a.json {
        let j = json!({
            "stopped_by": why,
            "seconds": started.elapsed().as_secs_f64(),
            "tenants": names.iter().zip(&stats.tenants).zip(&offered).zip(&last).map(|(((n, t), o), s)| json!({
                "tenant": n, "packets_in": t.packets_in, "packets_out": t.packets_out, "replies": t.replies, "drops": t.drops,
                "offered_bytes": o.1,
                "fair": s.map(|s| json!({"allowed_gbps": s.allowed_gbps, "limit_gbps": s.limit_gbps, "dominant_share": s.dominant})),
            })).collect::<Vec<_>>(),
            "unknown_tenant": stats.unknown_tenant,
            "malformed": stats.malformed,
            "rss_dropped": rss_dropped.load(Ordering::Relaxed),
            "scheduler": {"decisions": stats.decisions, "ns": stats.scheduler_ns},
            "ports": port_stats.iter().map(|(n, p)| json!({"port": n, "rx_packets": p.rx_packets, "tx_packets": p.tx_packets, "dropped": p.rx_dropped + p.tx_dropped})).collect::<Vec<_>>(),
            "wrappers": stats.wrappers,
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        print_summary(&names, &stats, &port_stats, started.elapsed(), why);
        if a.mode == Mode::Rtc {
            println!("dealt to a full core, dropped: {}", rss_dropped.load(Ordering::Relaxed));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_chain::runtime::{Desc, Item};

    #[test]
    fn the_scheduler_line_says_when_nothing_was_timed() {
        assert_eq!(scheduler_line(2, 0), "2 decisions (not timed yet: it times one round in 8)");
        assert_eq!(scheduler_line(4, 200), "4 decisions, 50.0 ns each");
        assert_eq!(scheduler_line(1, 0), "1 decision (not timed yet: it times one round in 8)");
    }

    /// The progress report sums the tenants' counters (drops of every reason, and the frames
    /// no tenant took) and gives the rate in since the last report.
    #[test]
    fn the_progress_line_sums_the_tenants() {
        let mut s = RunStats::default();
        for (i, o, b) in [(10, 7, 1), (5, 5, 0)] {
            let mut t =
                tern_chain::runtime::TenantStats { packets_in: i, packets_out: o, replies: b, ..Default::default() };
            t.drops.insert("denied", 2);
            s.tenants.push(t);
        }
        s.unknown_tenant = 3;
        s.malformed = 1;
        let started = Instant::now() - Duration::from_secs(20);
        let mut ticker = crate::progress::Ticker::new(10.0).unwrap();
        ticker.last = (Instant::now() - Duration::from_secs(10), 5);
        let line = progress_line(&s, started, &mut ticker);
        assert_eq!(ticker.last.1, 15, "the next rate from 15 packets in");
        assert!(
            line.starts_with("[    20 s] 15 packets in, 12 out, 1 back, 8 dropped; 1 packets/s in over the last 10 s"),
            "{line}"
        );
    }

    /// The drop reasons exported from the start: the tasks' (each once, though the firewall
    /// and the NAT both count `malformed`), the data path's, and the join's only for a
    /// parallel DAG.
    #[test]
    fn a_tenants_drop_reasons_are_its_tasks_and_the_data_paths() {
        let ex = |f: &str| PathBuf::from(format!("{}/../../examples/chain/{f}", env!("CARGO_MANIFEST_DIR")));
        let web = Tenant::load(&ex("web.toml")).unwrap();
        let r = drop_reasons_of(&web);
        assert_eq!(r.iter().filter(|x| **x == "malformed").count(), 1, "{r:?}");
        assert!(r.contains(&"denied") && r.contains(&"rate_limited") && r.contains(&"no_region"), "{r:?}");
        assert!(!r.contains(&"sync_timeout"), "{r:?}");
        let par = Tenant::load(&ex("figure4-a-parallel.toml")).unwrap();
        assert!(par.parallel);
        let r = drop_reasons_of(&par);
        assert!(reason::SYNC.iter().all(|s| r.contains(s)), "{r:?}");
    }

    /// A core may have more to send in one call than a batch holds (its regions' batches
    /// and the tasks' own packets): every frame leaves, none is dropped for a full batch.
    #[test]
    fn egress_sends_more_than_a_batch_in_one_call() {
        let pool = Pool::new(1024, 2048);
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let to = rx.local_addr().unwrap();
        let open = || Mutex::new(FramePort::open(&format!("udp:127.0.0.1:0={to}"), &pool).unwrap());
        let ports: Ports = Arc::new(vec![open(), open()]);
        let peers = ports.iter().map(|p| p.lock().unwrap().peer()).collect();
        let mut eg = PortEgress { ports, peers, pool: pool.clone(), out: (0..2).map(|_| Batch::new(64)).collect() };
        let n = 150u32;
        let mut items: Vec<Item> = (0..n)
            .map(|i| {
                let mut p = pool.packet();
                p.extend_from_slice(&i.to_be_bytes()).unwrap();
                // Arrived on port 1: leaves on port 0 (the frame's way on).
                Item { packet: p, desc: Desc::new(0, 0, 0, Instant::now(), 1) }
            })
            .collect();
        eg.send(Instant::now(), &mut items);
        assert!(items.is_empty());
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while got.len() < n as usize {
            let Ok(k) = rx.recv(&mut buf) else { break };
            got.push(u32::from_be_bytes(buf[..k].try_into().unwrap()));
        }
        assert_eq!(got, (0..n).collect::<Vec<_>>());
        let st = eg.ports[0].lock().unwrap().stats();
        assert_eq!((st.tx_packets, st.tx_dropped), (u64::from(n), 0));
    }

    /// `rtc`: core 0 deals frames to the core their flow hashes to; one for a core whose queue
    /// is full is dropped and counted, and the rest are dealt.
    #[test]
    fn rss_counts_what_a_full_core_queue_drops() {
        let pool = Pool::new(1024, 2048);
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = FramePort::open(&format!("udp:127.0.0.1:0={}", tx.local_addr().unwrap()), &pool).unwrap();
        let at = port.local_addr();
        let other = FramePort::open(&format!("udp:127.0.0.1:0={}", tx.local_addr().unwrap()), &pool).unwrap();
        let ports: Ports = Arc::new(vec![Mutex::new(port), Mutex::new(other)]);
        let tenant = tern_chain::tenant::Tenant::parse(
            "tenant = \"t\"\ndag = \"fw\"\n[ingress]\nproto = \"udp\"\n[nt.fw]\nkind = \"firewall\"\n",
        )
        .unwrap();
        let mut classify = Classify::new(std::slice::from_ref(&tenant));
        // Core 1's queue holds one frame.
        let (to, mut core1) = rtrb::RingBuffer::new(1);
        let dropped = Arc::new(AtomicU64::new(0));
        let mut reader = RssIngress::Reader {
            inner: PortIngress { ports, batch: Batch::new(32), next: 0 },
            classify: Box::new(classify.clone()),
            to: vec![to],
            buf: Vec::new(),
            dropped: dropped.clone(),
        };
        let (mut to_core1, n) = (0, 40u16);
        for flow in 0..n {
            let mut f = Vec::new();
            let (src, dst) = ([10, 0, 0, 1], [10, 0, 0, 2]);
            tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src, dst, 1000 + flow, 53, 64, b"x");
            to_core1 += usize::from(classify.tenant(&f).unwrap().1 % 2 == 1);
            tx.send_to(&f, at).unwrap();
        }
        assert!(to_core1 >= 2, "the flows hash to both cores");
        let mut out = Vec::new();
        let until = Instant::now() + Duration::from_secs(2);
        while out.len() + to_core1.min(1) + (dropped.load(Ordering::Relaxed) as usize) < usize::from(n)
            && Instant::now() < until
        {
            reader.recv(Instant::now(), 32, &mut out);
        }
        assert_eq!(out.len(), usize::from(n) - to_core1, "core 0 keeps its own");
        assert!(core1.pop().is_ok() && core1.pop().is_err(), "core 1 got one");
        assert_eq!(dropped.load(Ordering::Relaxed) as usize, to_core1 - 1);
    }

    /// A thread on an hour's epoch stops soon after it is told to (it once slept the whole
    /// epoch, and a stopping server waited for it), without running its work again.
    #[test]
    fn a_long_epoch_does_not_hold_a_stop_back() {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let runs = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let r = runs.clone();
        let t = every(
            Duration::from_secs(3600),
            done.clone(),
            || {},
            move || {
                r.fetch_add(1, Ordering::Relaxed);
            },
        );
        std::thread::sleep(Duration::from_millis(50));
        done.store(true, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(t.join().is_ok()));
        // Generous: it looks every 100 ms; without that it would wait an hour.
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(true), "the thread stopped");
        assert_eq!(runs.load(Ordering::Relaxed), 0, "no epoch passed");
    }

    /// A side thread's work that panics stops the server (its `on_panic` runs, as a watcher's
    /// or an epoch thread's stops the data path), and its join says so; one that ends without
    /// a panic stops nothing.
    #[test]
    fn a_side_thread_that_panics_stops_the_server() {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stopped.clone();
        let t = every(
            Duration::from_millis(1),
            done.clone(),
            move || s.store(true, Ordering::Relaxed),
            || panic!("a bug in an epoch's work"),
        );
        assert!(t.join().is_err());
        assert!(stopped.load(Ordering::Relaxed), "the panic stopped the server");
        let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stopped.clone();
        let t = every(Duration::from_millis(1), done.clone(), move || s.store(true, Ordering::Relaxed), || {});
        std::thread::sleep(Duration::from_millis(20));
        done.store(true, Ordering::Relaxed);
        assert!(t.join().is_ok());
        assert!(!stopped.load(Ordering::Relaxed), "no panic, no stop");
    }
}
