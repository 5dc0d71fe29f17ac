//! Rigs for `tern bench chain` (docs/chain.md, "Benchmark"): tenants made of dummy chains, the
//! Figure 10 examples, a paced or saturating traffic generator as the ingress, and a sink that
//! times each packet from its arrival to its leaving.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_io::Pool;

use crate::plan::Plan;
use crate::runtime::{Arrival, Config, Egress, Ingress, Item, Mode, RunStats, Runtime};
use crate::task::{self, Keys};
use crate::tenant::Tenant;

/// A tenant whose DAG is a chain of `len` dummy tasks of `ns` each (`d1 -> d2 -> ...`), taking
/// every packet.
pub fn dummy_chain(len: usize, ns: u64) -> Tenant {
    let names: Vec<String> = (1..=len).map(|i| format!("d{i}")).collect();
    let mut s = format!("tenant = \"chain{len}\"\ndag = \"{}\"\n", names.join(" -> "));
    for n in &names {
        s += &format!("[nt.{n}]\nkind = \"dummy\"\nns_per_packet = {ns}\n");
    }
    // Built from a fixed text: it parses.
    Tenant::parse(&s).unwrap_or_else(|e| unreachable!("{e}"))
}

/// Figure 10's DAG `which` (`a` to `d`), from `examples/chain/figure10-*.toml`.
pub fn figure10(which: char) -> Result<Tenant, String> {
    let text = match which {
        'a' => include_str!("../../../examples/chain/figure10-a.toml"),
        'b' => include_str!("../../../examples/chain/figure10-b.toml"),
        'c' => include_str!("../../../examples/chain/figure10-c.toml"),
        'd' => include_str!("../../../examples/chain/figure10-d.toml"),
        o => return Err(format!("no DAG-{o} in Figure 10 (a to d)")),
    };
    Tenant::parse(text).map_err(|e| format!("figure10-{which}.toml: {e}"))
}

/// `flows` UDP/IPv4 frames of `size` bytes (Ethernet header included) to addresses under
/// `dst` (its last two bytes varied by flow), each flow its own source address and port.
pub fn frames(dst: [u8; 4], flows: usize, size: usize) -> Vec<Vec<u8>> {
    let payload = vec![0x42u8; size.saturating_sub(42)];
    (0..flows)
        .map(|i| {
            let mut f = Vec::with_capacity(size);
            let src = [10, 9, (i >> 8) as u8, i as u8];
            let d = [dst[0], dst[1], dst[2].wrapping_add((i >> 8) as u8), dst[3].wrapping_add(i as u8)];
            tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src, d, 1024 + (i % 60_000) as u16, 80, 64, &payload);
            f
        })
        .collect()
}

/// Frames of several tenants taken in turn: `mix[k]` of tenant `k`'s frames a round.
pub fn interleave(sets: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    let longest = sets.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest).flat_map(|i| sets.iter().filter_map(move |s| s.get(i).cloned())).collect()
}

/// The generator: hands out copies of its frames in turn, either as fast as they are taken or
/// at a fixed rate (each packet's arrival time the time it was due, so a late generator's
/// delay counts as latency). Its buffers come through a [`Stash`].
#[derive(Debug)]
pub struct Gen {
    pool: Stash,
    frames: Vec<Vec<u8>>,
    next: usize,
    interval: Option<Duration>,
    due: Option<Instant>,
}

impl Gen {
    /// Of `frames`, at `rate_pps` (None: as fast as taken).
    pub fn new(pool: &Pool, frames: Vec<Vec<u8>>, rate_pps: Option<f64>) -> Gen {
        let interval = rate_pps.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(1.0 / r));
        Gen { pool: Stash::new(pool, &frames), frames, next: 0, interval, due: None }
    }
}

impl Ingress for Gen {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        if self.frames.is_empty() {
            return;
        }
        self.pool.fill(max);
        for _ in 0..max {
            let at = match self.interval {
                None => now,
                Some(iv) => {
                    let due = *self.due.get_or_insert(now);
                    if due > now {
                        break;
                    }
                    self.due = Some(due + iv);
                    due
                }
            };
            let Some(p) = self.pool.copy_in(&self.frames[self.next]) else { return };
            self.next = next_frame(self.next, self.frames.len());
            out.push(Arrival { packet: p, at, port: 0 });
        }
    }
}

/// A sink's count of packets out, on a cache line of its own: the sinks of two cores never
/// write the same line (the harness must not be the bottleneck of what it measures).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Count {
    /// By tenant (the last slot takes tenants beyond it); the total is their sum.
    by_tenant: [AtomicU64; TENANT_SLOTS],
}

/// Tenants a sink counts apart.
pub const TENANT_SLOTS: usize = 16;

/// The frame after `i` of `len`, in turn (no division a packet: a generator runs on the core it
/// feeds).
fn next_frame(i: usize, len: usize) -> usize {
    if i + 1 >= len { 0 } else { i + 1 }
}

/// Buffers for a generator, taken from the pool a batch at a time, the line where each one's
/// frame goes asked for ([`tern_io::prefetch_write`]) before any is written. A generator
/// stands for a NIC writing packets into memory, so its own cost should be small; but a buffer
/// back from a deep queue (4096 packets at saturation) has been out of the cache for a while,
/// and a copy's stores into a line not in the cache held the next packet back until the line
/// came: one wait a packet, where asked for together a batch's lines arrive together, and
/// asked for a call ahead they are there. In `snic` with one core, 4 tasks (`chain_len`), 1.02
/// Mpps [0.95–1.04] copying straight in and 1.07 [1.02–1.14] asking just before; in a later
/// series 1.265 [1.13–1.37] asking just before and 1.315 [1.08–1.40] a call ahead. A frame
/// longer than a line has all its lines asked for: at 1500 B a buffer whose packet last ran on
/// the other core has its lines in that core's cache, and DAG-D's two instances on far cores
/// carried 709 kpps with every line asked for against 693 with the first only (docs/chain.md).
#[derive(Debug)]
pub struct Stash {
    pool: Pool,
    /// Taken, their lines asked for, not yet written: oldest first.
    ready: std::collections::VecDeque<tern_io::Packet>,
    /// Bytes of each buffer's lines asked for, from the frame's start: the longest frame it
    /// copies (at least one byte: the first line).
    bytes: usize,
}

impl Stash {
    /// Of `pool`'s buffers, for copies of `frames`: each buffer's lines asked for as far as the
    /// longest of them reaches.
    pub fn new<'a>(pool: &Pool, frames: impl IntoIterator<Item = &'a Vec<u8>>) -> Stash {
        let bytes = frames.into_iter().map(Vec::len).max().unwrap_or(0).max(1);
        Stash { pool: pool.clone(), ready: std::collections::VecDeque::new(), bytes }
    }

    /// An empty buffer of the pool, behind the ports' headroom.
    fn take(&self) -> tern_io::Packet {
        let mut p = self.pool.packet();
        p.reserve_headroom(tern_io::DEFAULT_HEADROOM);
        p
    }

    /// Tops the ready buffers up to `n` and as many more, the new ones' lines asked for: the
    /// next `n` copies go into buffers asked for a call or more ago.
    pub fn fill(&mut self, n: usize) {
        while self.ready.len() < 2 * n {
            let mut p = self.take();
            let buf = p.buffer_mut();
            // A line a step, and the last byte's (a frame need not start on a line).
            let end = self.bytes.min(buf.len());
            for at in (0..end).step_by(64).chain(end.checked_sub(1)) {
                tern_io::prefetch_write(&buf[at..]);
            }
            self.ready.push_back(p);
        }
    }

    /// A copy of `frame` behind the ports' headroom, in a ready buffer if there is one (None: it
    /// does not fit a buffer).
    pub fn copy_in(&mut self, frame: &[u8]) -> Option<tern_io::Packet> {
        let mut p = self.ready.pop_front().unwrap_or_else(|| self.take());
        if p.extend_from_slice(frame).is_err() {
            self.ready.push_front(p);
            return None;
        }
        Some(p)
    }
}

impl Drop for Stash {
    fn drop(&mut self) {
        for p in self.ready.drain(..) {
            self.pool.put(p);
        }
    }
}

/// What the sinks share: packets out, and latencies while measuring.
#[derive(Debug, Default)]
pub struct Tally {
    /// Packets out (answers included), a counter a sink.
    counts: Mutex<Vec<Arc<Count>>>,
    /// Whether latencies are being kept, and of which tenant (its index + 1; 0: all).
    pub measuring: AtomicBool,
    pub latency_of: std::sync::atomic::AtomicUsize,
    /// Latencies kept, ns.
    pub latencies: Mutex<Vec<u64>>,
}

impl Tally {
    /// Packets out so far, all sinks.
    pub fn delivered(&self) -> u64 {
        self.delivered_by_tenant().iter().sum()
    }

    /// Packets out so far by tenant (the first [`TENANT_SLOTS`]), all sinks.
    pub fn delivered_by_tenant(&self) -> [u64; TENANT_SLOTS] {
        let mut out = [0; TENANT_SLOTS];
        for c in self.counts.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            for (o, b) in out.iter_mut().zip(&c.by_tenant) {
                *o += b.load(Ordering::Relaxed);
            }
        }
        out
    }
}

/// Latencies a sink keeps at most.
const MAX_SAMPLES: usize = 2_000_000;

/// The sink: counts what leaves, keeps its latency (arrival to leaving) while measuring, and
/// gives the buffers back.
#[derive(Debug)]
pub struct Sink {
    pool: Pool,
    tally: Arc<Tally>,
    count: Arc<Count>,
    by_tenant: [u64; TENANT_SLOTS],
    local: Vec<u64>,
}

impl Sink {
    /// Into `tally`.
    pub fn new(pool: &Pool, tally: &Arc<Tally>) -> Sink {
        let count = Arc::new(Count::default());
        tally.counts.lock().unwrap_or_else(|e| e.into_inner()).push(count.clone());
        // Room for a phase's latencies up front: growing the vector (a copy of all kept so far)
        // would stall the core it runs on mid-measurement.
        let local = Vec::with_capacity(1 << 18);
        Sink { pool: pool.clone(), tally: tally.clone(), count, by_tenant: [0; TENANT_SLOTS], local }
    }
}

impl Egress for Sink {
    fn send(&mut self, _: Instant, items: &mut Vec<Item>) {
        let keep = self.tally.measuring.load(Ordering::Relaxed);
        // The clock only while latencies are kept (a reading costs as much as a small task's
        // share of a packet, and a core sending batches of 4 would read it once every 4).
        let now = if keep { Some(Instant::now()) } else { None };
        let only = self.tally.latency_of.load(Ordering::Relaxed);
        let mut seen = 0u32;
        for item in items.drain(..) {
            let t = usize::from(item.desc.tenant).min(TENANT_SLOTS - 1);
            self.by_tenant[t] += 1;
            seen |= 1 << t;
            if let Some(now) = now
                && (only == 0 || only == usize::from(item.desc.tenant) + 1)
                && self.local.len() < MAX_SAMPLES
            {
                self.local.push(now.saturating_duration_since(item.desc.arrived()).as_nanos() as u64);
            }
            self.pool.put(item.packet);
        }
        // One writer: stores of the running counts, not read-modify-writes.
        while seen != 0 {
            let t = seen.trailing_zeros() as usize;
            seen &= seen - 1;
            self.count.by_tenant[t].store(self.by_tenant[t], Ordering::Relaxed);
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let mut l = self.tally.latencies.lock().unwrap_or_else(|e| e.into_inner());
        l.append(&mut self.local);
    }
}

/// One measured phase.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Phase {
    /// Packets out a second over the measured time.
    pub pps: f64,
    /// Median and 99th percentile latency, ns (0 if none kept).
    pub p50_ns: f64,
    pub p99_ns: f64,
    /// Latencies kept.
    pub samples: usize,
    /// The scheduler's ns a decision (`snic`, `panic`; 0 in `rtc`).
    pub scheduler_ns_per_decision: f64,
    /// Packets dropped (by the tasks, full queues or rings).
    pub drops: u64,
    /// Regions the plan used.
    pub regions: usize,
}

/// The `q` quantile of sorted `v`.
pub fn quantile(v: &[u64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * q).round() as usize] as f64
}

/// The median of `v` (0 if empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

/// How a phase offers its traffic and how long it runs.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Packets a second offered (None: as fast as they are taken).
    pub rate_pps: Option<f64>,
    /// Keep latencies.
    pub latency: bool,
    /// Run before measuring, and measured.
    pub warmup: Duration,
    pub secs: Duration,
}

/// A pool for a run's packets and `tenants`' runtime on `plan` in `cfg`'s mode, their tasks
/// built from their files (one AES key space for the run).
pub fn runtime(tenants: &[Tenant], plan: &Plan, cfg: Config) -> Result<(Pool, Runtime), String> {
    let pool = Pool::new(1 << 15, tern_io::DEFAULT_BUF_SIZE);
    let mut keys = Keys::default();
    let mut factory = |t: usize, n: usize| task::build(&tenants[t].tasks[n], &mut keys);
    let rt = Runtime::new(plan.clone(), tenants.to_vec(), cfg, &mut factory)?;
    Ok((pool, rt))
}

/// Runs `tenants` on `plan` in `cfg`'s mode with `frames` (interleaved tenants' traffic) as
/// `load` says.
pub fn measure(
    tenants: &[Tenant],
    plan: &Plan,
    cfg: Config,
    frames: &[Vec<u8>],
    load: Load,
) -> Result<(Phase, RunStats), String> {
    let Load { rate_pps, latency, warmup, secs } = load;
    let (pool, rt) = runtime(tenants, plan, cfg)?;
    let stopper = rt.stopper();
    let tally = Arc::new(Tally::default());
    let cores = cfg.cores.max(1);
    let ingress: Vec<Box<dyn Ingress>> = if cfg.mode == Mode::Rtc {
        (0..cores)
            .map(|c| {
                let shard: Vec<Vec<u8>> = frames.iter().skip(c).step_by(cores).cloned().collect();
                Box::new(Gen::new(&pool, shard, rate_pps.map(|r| r / cores as f64))) as Box<dyn Ingress>
            })
            .collect()
    } else {
        vec![Box::new(Gen::new(&pool, frames.to_vec(), rate_pps))]
    };
    let egress: Vec<Box<dyn Egress>> =
        (0..cores).map(|_| Box::new(Sink::new(&pool, &tally)) as Box<dyn Egress>).collect();
    let (count, elapsed, stats) = std::thread::scope(|s| {
        let t2 = tally.clone();
        let timer = s.spawn(move || {
            std::thread::sleep(warmup);
            let (c0, t0) = (t2.delivered(), Instant::now());
            t2.measuring.store(latency, Ordering::Relaxed);
            std::thread::sleep(secs);
            let (c1, t1) = (t2.delivered(), Instant::now());
            t2.measuring.store(false, Ordering::Relaxed);
            stopper.stop();
            (c1 - c0, t1 - t0)
        });
        let stats = rt.run(&pool, ingress, egress);
        let (c, e) = timer.join().unwrap_or((0, secs));
        (c, e, stats)
    });
    let stats = stats?;
    let mut lat = std::mem::take(&mut *tally.latencies.lock().unwrap_or_else(|e| e.into_inner()));
    lat.sort_unstable();
    let drops = stats.tenants.iter().flat_map(|t| t.drops.values()).sum();
    let phase = Phase {
        pps: count as f64 / elapsed.as_secs_f64().max(1e-9),
        p50_ns: quantile(&lat, 0.5),
        p99_ns: quantile(&lat, 0.99),
        samples: lat.len(),
        scheduler_ns_per_decision: if stats.decisions > 0 {
            stats.scheduler_ns as f64 / stats.decisions as f64
        } else {
            0.0
        },
        drops,
        regions: plan.regions.len(),
    };
    Ok((phase, stats))
}

/// How fast `cores` pinned threads run a fixed arithmetic loop side by side, against one thread
/// alone (1.0: each core as fast as alone; about 0.5: two threads sharing one core). The
/// machine's cores are lent by a host: this says which kind of pair a run got.
pub fn side_by_side(cores: usize, each: Duration) -> f64 {
    fn spin(d: Duration) -> u64 {
        let start = Instant::now();
        let (mut x, mut n) = (0x9e37_79b9_7f4a_7c15u64, 0u64);
        while start.elapsed() < d {
            for _ in 0..1024 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            }
            n += 1;
        }
        std::hint::black_box(x);
        n
    }
    let alone = std::thread::scope(|s| {
        s.spawn(|| {
            tern_io::pin_to_core(0);
            spin(each)
        })
        .join()
        .unwrap_or(1)
    });
    let together: Vec<u64> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..cores.max(1))
            .map(|c| {
                s.spawn(move || {
                    tern_io::pin_to_core(c);
                    spin(each)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or(0)).collect()
    });
    let mean = together.iter().sum::<u64>() as f64 / together.len().max(1) as f64;
    mean / alone.max(1) as f64
}

/// What a dummy task of `ns` spends a packet, measured: the mean over `n` spends in a row,
/// timed with [`Instant`] around them all. The benches print it beside the configured time.
pub fn dummy_spends_ns(ns: u64, n: u32) -> f64 {
    let busy = crate::task::Busy::new();
    let start = Instant::now();
    for _ in 0..n {
        busy.spend(std::hint::black_box(ns));
    }
    start.elapsed().as_nanos() as f64 / f64::from(n.max(1))
}

/// The round trip of a cache line between cores 0 and 1, ns (a counter bounced `n` times
/// between two pinned threads, the first tenth not timed): what every move between cores costs at least. The host lends
/// the cores: this differs from run to run (core pairs near or far apart).
pub fn core_round_trip_ns(n: u64) -> f64 {
    let line = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        let l = &line;
        let echo = s.spawn(move || {
            tern_io::pin_to_core(1);
            let start = Instant::now();
            for i in 0..n {
                while l.load(Ordering::Acquire) != 2 * i + 1 {
                    if start.elapsed() > Duration::from_secs(2) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                l.store(2 * i + 2, Ordering::Release);
            }
        });
        tern_io::pin_to_core(0);
        let start = Instant::now();
        // The first bounces wait for the other thread to start and settle on its core: not
        // timed.
        let warm = (n / 10).max(1);
        let mut timed_from = start;
        for i in 0..n {
            if i == warm {
                timed_from = Instant::now();
            }
            l.store(2 * i + 1, Ordering::Release);
            while l.load(Ordering::Acquire) != 2 * i + 2 {
                if start.elapsed() > Duration::from_secs(2) {
                    let _ = echo.join();
                    return f64::NAN;
                }
                std::hint::spin_loop();
            }
        }
        let ns = timed_from.elapsed().as_nanos() as f64 / n.saturating_sub(warm).max(1) as f64;
        let _ = echo.join();
        ns
    })
}

/// One paced (or unpaced) stream of a [`MixGen`].
#[derive(Debug)]
struct Stream {
    frames: Vec<Vec<u8>>,
    next: usize,
    interval: Option<Duration>,
    due: Option<Instant>,
}

/// A generator of several streams, each its frames at its own rate (None: as fast as taken),
/// taken in turns: tenants offering different loads through one ingress.
#[derive(Debug)]
pub struct MixGen {
    pool: Stash,
    streams: Vec<Stream>,
    turn: usize,
}

impl MixGen {
    /// Of `streams` (frames, packets a second).
    pub fn new(pool: &Pool, streams: Vec<(Vec<Vec<u8>>, Option<f64>)>) -> MixGen {
        let streams: Vec<Stream> = streams
            .into_iter()
            .filter(|(f, _)| !f.is_empty())
            .map(|(frames, rate)| Stream {
                frames,
                next: 0,
                interval: rate.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(1.0 / r)),
                due: None,
            })
            .collect();
        MixGen { pool: Stash::new(pool, streams.iter().flat_map(|s| &s.frames)), streams, turn: 0 }
    }
}

impl Ingress for MixGen {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        let n = self.streams.len();
        let mut idle = 0;
        self.pool.fill(max);
        while out.len() < max && idle < n {
            let s = &mut self.streams[self.turn % n];
            self.turn = self.turn.wrapping_add(1);
            let at = match s.interval {
                None => now,
                Some(iv) => {
                    let due = *s.due.get_or_insert(now);
                    if due > now {
                        idle += 1;
                        continue;
                    }
                    s.due = Some(due + iv);
                    due
                }
            };
            idle = 0;
            let Some(p) = self.pool.copy_in(&s.frames[s.next]) else { return };
            s.next = next_frame(s.next, s.frames.len());
            out.push(Arrival { packet: p, at, port: 0 });
        }
    }
}

/// One measured phase of the fairness benchmark.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FairPhase {
    /// By tenant: packets a second offered and delivered over the measured time.
    pub offered_pps: Vec<f64>,
    pub delivered_pps: Vec<f64>,
    /// By tenant: its time a packet on each core, ns, as measured at the end.
    pub ns_per_packet: Vec<Vec<f64>>,
    /// By tenant: its dominant share delivered (its rate times its time a packet on its
    /// busiest core, a fraction of that core).
    pub dominant: Vec<f64>,
    /// By tenant: its last limit, Gbit/s (None: none; fairness off).
    pub limit_gbps: Vec<Option<f64>>,
    /// Packets dropped by the limiters.
    pub rate_limited: u64,
}

/// When the measured time began: the delivered and offered counts then.
type Mark = (Instant, [u64; TENANT_SLOTS], Vec<(u64, u64)>);

/// How tenants' ingress limits are set in a fairness phase.
#[derive(Debug, Clone, PartialEq)]
pub enum Allocation {
    /// No limits (the scheduler's virtual-time order alone).
    None,
    /// Fair shares every epoch on what each offered ([`crate::runtime::FairShares`]).
    Epoch,
    /// Limits set once at the start (Gbit/s a tenant; None: none) and never changed: a static
    /// allocation.
    Fixed(Vec<Option<f64>>),
}

/// Runs `tenants` on `plan` with a stream a tenant (its frames and packets a second; None: as
/// fast as taken) and limits set as `allocation` says (fair shares ticked every `epoch`);
/// measures each tenant's offered and delivered rate over `secs` after `warmup`.
#[allow(clippy::too_many_arguments)]
pub fn measure_fair(
    tenants: &[Tenant],
    plan: &Plan,
    cfg: Config,
    streams: Vec<(Vec<Vec<u8>>, Option<f64>)>,
    allocation: &Allocation,
    epoch: Duration,
    warmup: Duration,
    secs: Duration,
) -> Result<FairPhase, String> {
    let (pool, rt) = runtime(tenants, plan, cfg)?;
    let stopper = rt.stopper();
    let limiter = rt.limiter();
    let monitor = rt.monitor();
    let mut shares = (*allocation == Allocation::Epoch).then(|| crate::runtime::FairShares::new(&rt));
    if let Allocation::Fixed(limits) = allocation {
        for (t, l) in limits.iter().enumerate() {
            limiter.set(t, *l)?;
        }
    }
    let tally = Arc::new(Tally::default());
    let cores = cfg.cores.max(1);
    let ingress: Vec<Box<dyn Ingress>> = vec![Box::new(MixGen::new(&pool, streams))];
    let egress: Vec<Box<dyn Egress>> =
        (0..cores).map(|_| Box::new(Sink::new(&pool, &tally)) as Box<dyn Egress>).collect();
    let nt = tenants.len().min(TENANT_SLOTS);
    let (window, stats) = std::thread::scope(|s| {
        let t2 = tally.clone();
        let lim = limiter.clone();
        let timer = s.spawn(move || {
            let start = Instant::now();
            let mut next = start;
            let mut mark: Option<Mark> = None;
            loop {
                next += epoch;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
                let now = Instant::now();
                if let Some(f) = shares.as_mut() {
                    f.tick(now);
                }
                if mark.is_none() && now >= start + warmup {
                    mark = Some((now, t2.delivered_by_tenant(), lim.offered()));
                }
                if now >= start + warmup + secs {
                    let (t0, d0, o0) = mark.unwrap_or((start, [0; TENANT_SLOTS], vec![(0, 0); nt]));
                    let (d1, o1) = (t2.delivered_by_tenant(), lim.offered());
                    stopper.stop();
                    let dt = (now - t0).as_secs_f64().max(1e-9);
                    let delivered: Vec<f64> = (0..nt).map(|t| (d1[t] - d0[t]) as f64 / dt).collect();
                    let offered: Vec<f64> = (0..nt)
                        .map(|t| {
                            let a = o0.get(t).map_or(0, |x| x.0);
                            let b = o1.get(t).map_or(0, |x| x.0);
                            b.saturating_sub(a) as f64 / dt
                        })
                        .collect();
                    return (offered, delivered);
                }
            }
        });
        let stats = rt.run(&pool, ingress, egress);
        let window = timer.join().unwrap_or_default();
        (window, stats)
    });
    let stats = stats?;
    let (offered_pps, delivered_pps) = window;
    let ns_per_packet = monitor.ns_per_packet(&monitor.live());
    let dominant = delivered_pps
        .iter()
        .zip(&ns_per_packet)
        .map(|(pps, ns)| ns.iter().map(|n| pps * n / 1e9).fold(0.0, f64::max))
        .collect();
    let rate_limited = stats.tenants.iter().map(|t| t.drops.get("rate_limited").copied().unwrap_or(0)).sum();
    Ok(FairPhase { offered_pps, delivered_pps, ns_per_packet, dominant, limit_gbps: limiter.limits(), rate_limited })
}

/// An ingress that stops offering once `closed` is set (what was offered can then drain).
struct Gated<I> {
    inner: I,
    closed: Arc<AtomicBool>,
}

impl<I: Ingress> Ingress for Gated<I> {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        if !self.closed.load(Ordering::Relaxed) {
            self.inner.recv(now, max, out);
        }
    }
}

/// One measured phase of the update benchmark, for the tenant that is not updated (the
/// victim).
#[derive(Debug, Clone, serde::Serialize)]
pub struct UpdatePhase {
    /// Updates applied to the other tenant during the measured time (0 in a baseline).
    pub updates: usize,
    /// The victim's packets offered (classified) and delivered over the whole run (the
    /// ingress closes at the end and the chains drain), and the difference.
    pub victim_offered: u64,
    pub victim_delivered: u64,
    pub victim_lost: u64,
    /// The victim's latency over the measured time, ns.
    pub victim_p50_ns: f64,
    pub victim_p99_ns: f64,
    pub victim_samples: usize,
    /// Each update's time (`Updater::apply`), ms.
    pub apply_ms: Vec<f64>,
}

/// Runs the tenants of `variants[0]` (tenants and their plan) with a stream a tenant (as
/// [`measure_fair`]) and, over the measured `secs` after `warmup`, builds `builds` live
/// updates of tenant `updated`, evenly spaced, and with `apply` applies them: generation `g` is
/// `variants[g mod len]` (planned before the run, as a file is checked before it is applied;
/// each update builds its new task instances, off the data path, and applies them). Without
/// `apply` the same control thread builds the same instances at the same times and drops
/// them: a baseline with the same work beside the data path, differing only in the swaps.
/// Then it closes the ingress, lets the chains drain, and reports what tenant `victim` offered, got and lost, and its latency.
#[allow(clippy::too_many_arguments)]
pub fn measure_updates(
    variants: &[(Vec<Tenant>, Plan)],
    cfg: Config,
    streams: Vec<(Vec<Vec<u8>>, Option<f64>)>,
    victim: usize,
    updated: usize,
    builds: usize,
    apply: bool,
    warmup: Duration,
    secs: Duration,
) -> Result<UpdatePhase, String> {
    let Some((tenants, plan)) = variants.first() else { return Err("no tenants to run".into()) };
    let (tenants, plan) = (tenants.clone(), plan.clone());
    if victim >= tenants.len().min(TENANT_SLOTS) || updated >= tenants.len() {
        return Err(format!("tenants {victim} and {updated}: the run has {}", tenants.len()));
    }
    let pool = Pool::new(1 << 15, tern_io::DEFAULT_BUF_SIZE);
    let keys = Mutex::new(Keys::default());
    let rt = {
        let mut k = keys.lock().unwrap_or_else(|e| e.into_inner());
        let mut factory = |t: usize, n: usize| task::build(&tenants[t].tasks[n], &mut k);
        Runtime::new(plan, tenants.clone(), cfg, &mut factory)?
    };
    let stopper = rt.stopper();
    let limiter = rt.limiter();
    let updater = rt.updater();
    let tally = Arc::new(Tally::default());
    tally.latency_of.store(victim + 1, Ordering::Relaxed);
    let closed = Arc::new(AtomicBool::new(false));
    let cores = cfg.cores.max(1);
    let ingress: Vec<Box<dyn Ingress>> =
        vec![Box::new(Gated { inner: MixGen::new(&pool, streams), closed: closed.clone() })];
    let egress: Vec<Box<dyn Egress>> =
        (0..cores).map(|_| Box::new(Sink::new(&pool, &tally)) as Box<dyn Egress>).collect();
    let (control, stats) = std::thread::scope(|s| {
        let t2 = tally.clone();
        let timer = s.spawn(move || -> Result<(Vec<f64>, u64, u64), String> {
            let run = || -> Result<Vec<f64>, String> {
                std::thread::sleep(warmup);
                t2.measuring.store(true, Ordering::Relaxed);
                let start = Instant::now();
                let mut apply_ms = Vec::new();
                for g in 1..=builds as u64 {
                    let due = start + secs.mul_f64(g as f64 / (builds as f64 + 1.0));
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    let (ts, p) = &variants[g as usize % variants.len()];
                    let mut k = keys.lock().unwrap_or_else(|e| e.into_inner());
                    let mut factory = |t: usize, n: usize| task::build(&ts[t].tasks[n], &mut k);
                    let u = updater.build(p, updated, &mut factory)?;
                    if !apply {
                        continue;
                    }
                    let t0 = Instant::now();
                    updater.apply(u, Duration::from_secs(1))?;
                    apply_ms.push(t0.elapsed().as_secs_f64() * 1e3);
                }
                std::thread::sleep((start + secs).saturating_duration_since(Instant::now()));
                Ok(apply_ms)
            };
            let r = run();
            t2.measuring.store(false, Ordering::Relaxed);
            // Close the ingress and let what was offered drain (at most a second).
            closed.store(true, Ordering::Relaxed);
            let until = Instant::now() + Duration::from_secs(1);
            let last = loop {
                std::thread::sleep(Duration::from_millis(20));
                let now = (limiter.offered()[victim].0, t2.delivered_by_tenant()[victim]);
                if now.1 >= now.0 || Instant::now() > until {
                    break now;
                }
            };
            stopper.stop();
            r.map(|a| (a, last.0, last.1))
        });
        let stats = rt.run(&pool, ingress, egress);
        let control = timer.join().unwrap_or_else(|_| Err("the control thread panicked".into()));
        (control, stats)
    });
    stats?;
    let (apply_ms, offered, delivered) = control?;
    let mut lat = std::mem::take(&mut *tally.latencies.lock().unwrap_or_else(|e| e.into_inner()));
    lat.sort_unstable();
    Ok(UpdatePhase {
        updates: apply_ms.len(),
        victim_offered: offered,
        victim_delivered: delivered,
        victim_lost: offered.saturating_sub(delivered),
        victim_p50_ns: quantile(&lat, 0.5),
        victim_p99_ns: quantile(&lat, 0.99),
        victim_samples: lat.len(),
        apply_ms,
    })
}

/// A generator whose rate follows a `(from_ms, packets a second)` step trace from its start
/// (its first call, or [`starting`](TraceGen::starting)), each packet's arrival time the time
/// it was due.
#[derive(Debug)]
pub struct TraceGen {
    pool: Stash,
    frames: Vec<Vec<u8>>,
    next: usize,
    trace: Vec<(f64, f64)>,
    start: Option<Instant>,
    due: Option<Instant>,
}

impl TraceGen {
    /// Of `frames`, at the rates of `trace`.
    pub fn new(pool: &Pool, frames: Vec<Vec<u8>>, trace: &[(f64, f64)]) -> TraceGen {
        TraceGen { pool: Stash::new(pool, &frames), frames, next: 0, trace: trace.to_vec(), start: None, due: None }
    }

    /// With its trace's time 0 at `start`.
    pub fn starting(mut self, start: Instant) -> TraceGen {
        self.start = Some(start);
        self.due = Some(start);
        self
    }

    fn rate_at(&self, ms: f64) -> f64 {
        self.trace.iter().take_while(|(from, _)| *from <= ms).last().map_or(0.0, |(_, r)| *r)
    }
}

impl Ingress for TraceGen {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        if self.frames.is_empty() {
            return;
        }
        let start = *self.start.get_or_insert(now);
        self.pool.fill(max);
        for _ in 0..max {
            let due = *self.due.get_or_insert(now);
            if due > now {
                break;
            }
            let ms = due.saturating_duration_since(start).as_secs_f64() * 1e3;
            let rate = self.rate_at(ms);
            if rate.is_nan() || rate <= 0.0 {
                // Nothing offered until the next step.
                let next = self.trace.iter().map(|(f, _)| *f).find(|&f| f > ms);
                self.due = next.map(|f| start + Duration::from_secs_f64(f / 1e3));
                if self.due.is_none() {
                    self.frames.clear();
                }
                break;
            }
            self.due = Some(due + Duration::from_secs_f64(1.0 / rate));
            let Some(p) = self.pool.copy_in(&self.frames[self.next]) else { return };
            self.next = next_frame(self.next, self.frames.len());
            out.push(Arrival { packet: p, at: due, port: 0 });
        }
    }
}

/// A run of the autoscaler on the running data path.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScaleRun {
    /// Every `bin_ms`: (end of the bin, ms; packets a second offered by the trace and
    /// delivered at the sinks over the bin; instances in service at its end).
    pub bins: Vec<(f64, f64, f64, usize)>,
    /// Each epoch's decision: (ms, load in instances, instances recommended, launched).
    pub epochs: Vec<(f64, f64, usize, usize)>,
    /// Launches in all.
    pub launches: u64,
}

/// Runs one stateless tenant on `plan` in `cfg` (its `instances` built; a capped task paces
/// its regions) with its `frames` offered at the rates of `trace` (`(from_ms, packets a
/// second)`) from the start, [`Scaling`](crate::runtime::Scaling) ticking (`prelaunched`
/// instances in service at the start, a launch serving after `pr`, epochs of `epoch`); samples
/// the delivered rate and the instances in service every `bin_ms` until `end_ms`.
#[allow(clippy::too_many_arguments)]
pub fn measure_scaling(
    tenants: &[Tenant],
    plan: &Plan,
    cfg: Config,
    frames: Vec<Vec<u8>>,
    trace: &[(f64, f64)],
    prelaunched: usize,
    pr: Duration,
    epoch: Duration,
    bin_ms: f64,
    end_ms: f64,
) -> Result<ScaleRun, String> {
    let (pool, rt) = runtime(tenants, plan, cfg)?;
    let stopper = rt.stopper();
    let launcher = rt.launcher();
    let tally = Arc::new(Tally::default());
    let cores = cfg.cores.max(1);
    let egress: Vec<Box<dyn Egress>> =
        (0..cores).map(|_| Box::new(Sink::new(&pool, &tally)) as Box<dyn Egress>).collect();
    let mut scaling = crate::runtime::Scaling::new(&rt, prelaunched, pr, 1.0, epoch);
    // The trace's time and the autoscaler's from the same instant.
    let start = scaling.start();
    let ingress: Vec<Box<dyn Ingress>> = vec![Box::new(TraceGen::new(&pool, frames, trace).starting(start))];
    let rate_at = |ms: f64| trace.iter().take_while(|(f, _)| *f <= ms).last().map_or(0.0, |(_, r)| *r);
    let bin = Duration::from_secs_f64(bin_ms.max(0.1) / 1e3);
    let (run, stats) = std::thread::scope(|s| {
        let t2 = tally.clone();
        let control = s.spawn(move || {
            let mut bins = Vec::new();
            let mut epochs = Vec::new();
            let mut next_bin = start + bin;
            let mut last = (start, 0u64);
            loop {
                let wake = next_bin.min(scaling.next_due());
                std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                let now = Instant::now();
                let ms = now.saturating_duration_since(start).as_secs_f64() * 1e3;
                for d in scaling.tick(now).into_iter().flatten() {
                    epochs.push((ms, d.0, d.1.recommended, d.1.launched));
                }
                if now >= next_bin {
                    let got = t2.delivered();
                    let dt = now.saturating_duration_since(last.0).as_secs_f64().max(1e-9);
                    let active = launcher.active().first().copied().unwrap_or(0);
                    bins.push((ms, rate_at(ms - bin_ms / 2.0), (got - last.1) as f64 / dt, active));
                    last = (now, got);
                    next_bin += bin;
                }
                if ms >= end_ms {
                    break;
                }
            }
            stopper.stop();
            let launches = scaling.scalers().iter().flatten().map(|a| a.launches()).sum();
            ScaleRun { bins, epochs, launches }
        });
        let stats = rt.run(&pool, ingress, egress);
        (control.join(), stats)
    });
    stats?;
    run.map_err(|_| "the control thread panicked".to_string())
}

/// The scheduler's decision alone (the criterion bench `sched` and `tern bench chain`'s
/// `scheduler_ns_per_packet`): four tenants of one four-task chain with two instances, one
/// region each; a round is a batch of 32 arrivals (eight a tenant), each classified into its
/// tenant's queue, then 32 decisions in virtual-time order, each taking a credit, the credits
/// given back as the regions would (eight at a time). No packet moves between cores: what a
/// decision costs on the data path besides (the rings, the lines the cores share) is in each
/// saturated phase's `scheduler_ns_per_decision`.
#[derive(Debug)]
pub struct SchedRig {
    scheduler: crate::runtime::Scheduler,
    classify: crate::runtime::Classify,
    packets: Vec<tern_io::Packet>,
    _pool: Pool,
}

/// Packets in a [`SchedRig`] round.
pub const SCHED_BATCH: usize = 32;

impl SchedRig {
    /// The rig, its 32 packets built (UDP, 64 bytes, the four tenants in turn).
    pub fn new() -> SchedRig {
        let tenants: Vec<Tenant> = (0..4)
            .map(|k| {
                let mut s =
                    format!("tenant = \"t{k}\"\ndag = \"d1 -> d2 -> d3 -> d4\"\n[ingress]\ndst = \"10.0.{k}.0/24\"\n");
                for n in 1..=4 {
                    s += &format!("[nt.d{n}]\nkind = \"dummy\"\n");
                }
                // Built from a fixed text: it parses.
                Tenant::parse(&s).unwrap_or_else(|e| unreachable!("{e}"))
            })
            .collect();
        let area = |t: &crate::tenant::TaskSpec| match t {
            crate::tenant::TaskSpec::Dummy { luts, .. } => Ok(*luts),
            _ => Ok(1000),
        };
        // Four dummy tasks fit a region of 100,000 LUTs: the plan is one chain.
        let p = crate::plan::plan(&tenants, &area, 8, 100_000).unwrap_or_else(|e| unreachable!("{e}"));
        let cfg = Config::default();
        // Two instances of the one chain, one region each; a credit pool each.
        let route = vec![vec![vec![0], vec![1]]];
        let scheduler = crate::runtime::Scheduler::new(&p, &tenants, &cfg, 2, vec![false], &route, 2);
        let classify = crate::runtime::Classify::new(&tenants);
        let pool = Pool::new(2 * SCHED_BATCH, tern_io::DEFAULT_BUF_SIZE);
        let packets = (0..SCHED_BATCH as u32)
            .map(|i| {
                let mut f = Vec::new();
                let k = (i % 4) as u8;
                tern_wire::frame::build_udp4(
                    &mut f,
                    [2; 6],
                    [4; 6],
                    [10, 9, 0, i as u8],
                    [10, 0, k, 7],
                    1000 + i as u16,
                    80,
                    64,
                    &[0; 22],
                );
                let mut pk = pool.packet();
                // 64 bytes fit a pool buffer.
                let _ = pk.extend_from_slice(&f);
                pk
            })
            .collect();
        SchedRig { scheduler, classify, packets, _pool: pool }
    }

    /// One round: the 32 packets admitted and decided, the credits back. Returns the
    /// decisions taken (32 unless a packet was refused).
    pub fn round(&mut self, now: Instant) -> usize {
        let s = &mut self.scheduler;
        for p in self.packets.drain(..) {
            // None is refused (the queues hold 4096); one that were would be missing from the
            // next rounds' decisions.
            let _ = s.admit(Arrival { packet: p, at: now, port: 0 }, &mut self.classify);
        }
        let mut back = [0u64; 2];
        let mut decided = 0;
        while let Some(d) = s.decide() {
            if let Some((_, pool)) = d.to {
                back[pool] += 1;
                decided += 1;
            }
            self.packets.push(d.item.packet);
            // Credits come back as the regions finish (8 a chain instance).
            if back.iter().sum::<u64>() == 8 {
                s.credit(0, back[0]);
                s.credit(1, back[1]);
                back = [0; 2];
            }
        }
        s.credit(0, back[0]);
        s.credit(1, back[1]);
        decided
    }

    /// Runs `rounds` rounds; ns a decision.
    pub fn ns_per_decision(&mut self, rounds: usize) -> f64 {
        let start = Instant::now();
        let mut decided = 0;
        for _ in 0..rounds {
            decided += self.round(start);
        }
        start.elapsed().as_nanos() as f64 / decided.max(1) as f64
    }
}

impl Default for SchedRig {
    fn default() -> SchedRig {
        SchedRig::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheduler rig decides all 32 of its packets every round (none refused, none lost:
    /// its packets come back for the next round), four tenants in turn.
    #[test]
    fn sched_rig_decides_its_batch_every_round() {
        let mut rig = SchedRig::new();
        let now = Instant::now();
        for _ in 0..100 {
            assert_eq!(rig.round(now), SCHED_BATCH);
            assert_eq!(rig.packets.len(), SCHED_BATCH);
        }
        let per = rig.scheduler.started.chunks(2).map(|g| g.iter().sum::<u64>()).collect::<Vec<_>>();
        assert_eq!(per, vec![800; 4], "eight a tenant a round");
        assert!(rig.ns_per_decision(10) > 0.0);
    }

    /// A stash keeps twice a call's buffers ready and copies into the oldest first: the frames
    /// come out whole, behind the ports' headroom; a frame too large for a buffer is refused
    /// and its buffer kept; what is ready goes back to the pool when the stash goes.
    #[test]
    fn stash_copies_into_the_buffers_asked_for_first() {
        let pool = Pool::new(64, 256);
        let mut stash = Stash::new(&pool, &[vec![0; 200]]);
        stash.fill(3);
        assert_eq!(stash.ready.len(), 6);
        let first: Vec<*const u8> = stash.ready.iter().take(3).map(|p| p.data().as_ptr()).collect();
        let got: Vec<tern_io::Packet> = (0..3u8).map(|i| stash.copy_in(&[i; 60]).unwrap()).collect();
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p.data(), &[i as u8; 60][..]);
            assert_eq!(p.headroom(), tern_io::DEFAULT_HEADROOM);
            assert_eq!(p.data().as_ptr(), first[i], "the oldest ready buffer first");
        }
        assert_eq!(stash.ready.len(), 3);
        assert!(stash.copy_in(&[0; 4096]).is_none());
        assert_eq!(stash.ready.len(), 3, "the refused frame's buffer is kept");
        stash.fill(3);
        assert_eq!(stash.ready.len(), 6);
        for p in got {
            pool.put(p);
        }
        assert_eq!(pool.free(), 3);
        drop(stash);
        assert_eq!(pool.free(), 9, "the ready buffers went back");
        assert_eq!(pool.allocated(), 9);
    }
}
