//! The data path (docs/chain.md, "The data path"): regions on worker cores, the credit
//! scheduler on the ingress core, and the three modes that run the same tasks.
//!
//! - `snic` (SuperNIC, §4.3–4.4): each region runs its physical chain's segment as one
//!   run-to-completion loop over a batch, each task in a [`Wrapper`] that runs or skips it by
//!   the packet's [`Desc`]. The scheduler classifies packets to tenants, keeps them in
//!   per-tenant queues served in virtual-time order, and moves a packet into its chain's first
//!   region only when it holds one of the chain instance's credits (8 by default); the credit
//!   comes back when the packet leaves the chain (sent, answered or dropped). A chain cut into
//!   segments passes packets from region to region without the scheduler.
//! - `panic` (PANIC, OSDI'20, as SuperNIC compares against it): one task a region, and after
//!   every task the packet goes back to the scheduler, which needs a credit of the next task's
//!   region to send it on (8 a region).
//! - `rtc`: no scheduler; every core runs every tenant's whole chain to completion on the
//!   packets of its own flows (the ingress shards flows over cores).
//!
//! A chain has `instances` copies (instance parallelism), their regions spread over the cores;
//! the scheduler sends a stateless chain's packets round robin over them, a stateful chain's by
//! flow (its tenants' queues a lane an instance, so a packet waiting for a busy instance holds
//! back no other's). Nothing here allocates per packet once the rings and queues have warmed up.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tern_io::{Packet, Pool};
use tern_table::classifier::FlowKey;
use tern_wire::frame::{FrameInfo, L3};

use crate::clock;
use crate::fair::TokenBucket;
use crate::plan::{Plan, Slot};
use crate::task::{Cx, NetworkTask, Steer, Verdict};
use crate::tenant::Tenant;

/// A packet's descriptor, kept beside its bytes: 32 bytes, so that an [`Item`] (the packet,
/// 32, and this) is one cache line — what a ring moves between cores for each packet.
#[derive(Clone, Copy)]
pub struct Desc {
    /// Its tenant (index).
    pub tenant: u16,
    /// Its chain and the chain's instance.
    pub chain: u16,
    pub instance: u16,
    /// `snic`: the segment it is in. `panic`: the position it runs next.
    pub segment: u16,
    /// Bit `p` set: it skips the chain's position `p`.
    pub skip: u64,
    /// When it arrived at the ingress ([`arrived`](Desc::arrived)): ns from the process's
    /// [`epoch`], negative before it.
    arrived: i64,
    /// The port it came in on.
    pub port: u8,
    /// A copy made at a fork: its branch ([`NO_BRANCH`] otherwise) and the fork's token.
    pub branch: u8,
    pub token: u32,
    /// Its tenant's generation when it entered its chain (stamped by the scheduler; the
    /// tasks of that generation run it to the end, an update notwithstanding).
    pub generation: u8,
    /// Bit 7: it is an answer (or a task's own packet) going back to where its packet came
    /// from ([`reply`](Desc::reply)). Bits 0–6: back at a join, why its branch dropped it
    /// ([`dropped`](Desc::dropped): a code of [`reason_code`]; 0 none).
    flags: u8,
}

// What a ring moves for each packet: one cache line.
const _: () = assert!(std::mem::size_of::<Desc>() == 32);
const _: () = assert!(std::mem::size_of::<Item>() == 64);

impl std::fmt::Debug for Desc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desc")
            .field("tenant", &self.tenant)
            .field("chain", &self.chain)
            .field("instance", &self.instance)
            .field("segment", &self.segment)
            .field("skip", &self.skip)
            .field("arrived", &self.arrived())
            .field("reply", &self.reply())
            .field("port", &self.port)
            .field("branch", &self.branch)
            .field("token", &self.token)
            .field("dropped", &self.dropped())
            .field("generation", &self.generation)
            .finish()
    }
}

/// The instant descriptors count their arrival times from (the first time one is asked for).
pub fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// The data path's own drop reasons (the tasks' are [`crate::task::drop_reasons`]), as a
/// tenant's drop counters name them; docs/chain.md ("Serving") lists the same, and a test
/// compares them.
pub mod reason {
    /// Over the tenant's ingress limit (its fair share).
    pub const RATE_LIMITED: &str = "rate_limited";
    /// The tenant's queue (its lane's) is full.
    pub const QUEUE_FULL: &str = "queue_full";
    /// A region's input ring had no room for a packet that had to move on.
    pub const RING_FULL: &str = "ring_full";
    /// No task instance for the tenant at a position it does not skip.
    pub const NO_TASK: &str = "no_task";
    /// A packet in a region that does not run its chain's segment (a routing fault; never
    /// expected).
    pub const NO_REGION: &str = "no_region";
    /// A parallel DAG's join gave up waiting for a fork's copies.
    pub const SYNC_TIMEOUT: &str = "sync_timeout";
    /// A fork's copy arriving after its join gave up on it (a copy, not a packet).
    pub const SYNC_LATE: &str = "sync_late";
    /// A join whose copies all arrived, none dropped, without the one it keeps.
    pub const SYNC_LOST: &str = "sync_lost";
    /// Every one, in this order.
    pub const ALL: [&str; 8] =
        [RATE_LIMITED, QUEUE_FULL, RING_FULL, NO_TASK, NO_REGION, SYNC_TIMEOUT, SYNC_LATE, SYNC_LOST];
    /// Those only a parallel DAG's join counts.
    pub const SYNC: [&str; 3] = [SYNC_TIMEOUT, SYNC_LATE, SYNC_LOST];
}

/// Drop reasons as descriptors carry them: each task's `&'static str` gets a code the first
/// time a branch drops for it (1 to 126, in that order; 127 for any beyond: `dropped`).
static REASONS: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
const REASON_OTHER: u8 = 127;

/// The code of drop reason `r` (see [`REASONS`]).
fn reason_code(r: &'static str) -> u8 {
    let mut t = REASONS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(i) = t.iter().position(|x| *x == r) {
        return i as u8 + 1;
    }
    if t.len() + 1 < usize::from(REASON_OTHER) {
        t.push(r);
        return t.len() as u8;
    }
    REASON_OTHER
}

/// The reason of drop code `c` (None: 0).
fn reason_of(c: u8) -> Option<&'static str> {
    match c {
        0 => None,
        REASON_OTHER => Some("dropped"),
        c => REASONS.lock().unwrap_or_else(|e| e.into_inner()).get(usize::from(c) - 1).copied().or(Some("dropped")),
    }
}

impl Desc {
    /// A new arrival's descriptor: tenant `t` on `chain` with `skip`, arrived at `at` on `port`.
    pub fn new(t: usize, chain: usize, skip: u64, at: Instant, port: u8) -> Desc {
        Desc::arrived_ns(t, chain, skip, Desc::ns_of(at), port)
    }

    /// As [`Desc::new`], with the arrival time as [`Desc::ns_of`] gives it.
    fn arrived_ns(t: usize, chain: usize, skip: u64, arrived: i64, port: u8) -> Desc {
        Desc {
            tenant: t as u16,
            chain: chain as u16,
            instance: 0,
            segment: 0,
            skip,
            arrived,
            port,
            branch: NO_BRANCH,
            token: 0,
            generation: 0,
            flags: 0,
        }
    }

    #[inline]
    fn ns_of(at: Instant) -> i64 {
        // In u64 arithmetic (a u128's product costs more than the rest of a decision's moves):
        // 2^63 ns is 292 years.
        let ns = |d: Duration| {
            (d.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(d.subsec_nanos()))).min(i64::MAX as u64)
                as i64
        };
        let e = epoch();
        match at.checked_duration_since(e) {
            Some(d) => ns(d),
            None => -ns(e.duration_since(at)),
        }
    }

    /// When it arrived at the ingress.
    pub fn arrived(&self) -> Instant {
        let e = epoch();
        if self.arrived >= 0 {
            e + Duration::from_nanos(self.arrived as u64)
        } else {
            e.checked_sub(Duration::from_nanos(self.arrived.unsigned_abs())).unwrap_or(e)
        }
    }

    /// Whether it is an answer (or a task's own packet) going back to where its packet came
    /// from.
    pub fn reply(&self) -> bool {
        self.flags & 0x80 != 0
    }

    /// Marks it an answer going back (or not).
    pub fn set_reply(&mut self, reply: bool) {
        self.flags = (self.flags & 0x7f) | if reply { 0x80 } else { 0 };
    }

    /// Back at a join: why its branch dropped it.
    pub fn dropped(&self) -> Option<&'static str> {
        reason_of(self.flags & 0x7f)
    }

    /// Records why its branch dropped it (None: it was not).
    pub fn set_dropped(&mut self, why: Option<&'static str>) {
        self.flags = (self.flags & 0x80) | why.map_or(0, reason_code);
    }
}

/// [`Desc::branch`] of a packet that is not a fork's copy.
pub const NO_BRANCH: u8 = u8::MAX;

/// The burst a tenant's ingress limiter allows: this long at its rate.
pub const LIMIT_BURST: Duration = Duration::from_millis(1);

/// How long the join waits for a fork's copies before it drops the packet (`sync_timeout`).
pub const SYNC_TIMEOUT: Duration = Duration::from_millis(10);

/// A packet with its descriptor: what rings carry between the scheduler and regions (moved,
/// never copied); one cache line, aligned to one.
#[derive(Debug)]
#[repr(align(64))]
pub struct Item {
    /// The bytes.
    pub packet: Packet,
    /// The descriptor.
    pub desc: Desc,
}

/// A packet arriving, when, and on which port.
#[derive(Debug)]
pub struct Arrival {
    /// The bytes.
    pub packet: Packet,
    /// When it arrived.
    pub at: Instant,
    /// The port it came in on (0 unless the ingress has several).
    pub port: u8,
}

/// Where packets come from (one per ingress core).
pub trait Ingress: Send {
    /// Appends up to `max` packets that have arrived by `now`.
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>);
}

/// Where packets leave (one per core): it takes the items out of `items` and returns their
/// buffers to the pool.
pub trait Egress: Send {
    /// Sends (or consumes) every item of `items`, emptying it.
    fn send(&mut self, now: Instant, items: &mut Vec<Item>);
}

/// How the tasks are run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// SuperNIC: fused chains in regions, credits per chain.
    Snic,
    /// PANIC: a task a region, back to the scheduler after each, credits per task.
    Panic,
    /// Run to completion: the whole chain on each core, no scheduler, flows sharded.
    Rtc,
}

impl Mode {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Snic => "snic",
            Mode::Panic => "panic",
            Mode::Rtc => "rtc",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "snic" => Ok(Mode::Snic),
            "panic" => Ok(Mode::Panic),
            "rtc" => Ok(Mode::Rtc),
            o => Err(format!("`{o}` is not a mode (snic, panic, rtc)")),
        }
    }
}

/// The runtime's settings.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// The mode.
    pub mode: Mode,
    /// Worker cores (threads); core 0 is also the ingress core and runs the scheduler.
    pub cores: usize,
    /// Instances of each chain (`snic`, `panic`); 0: one a core.
    pub instances: usize,
    /// Credits of a chain instance (`snic`) or a region (`panic`).
    pub credits: u32,
    /// Packets a region takes at once.
    pub batch: usize,
    /// Packets a tenant's queue holds waiting for credits; more are dropped (`queue_full`).
    pub queue: usize,
    /// Pin core `k`'s thread to CPU `k`.
    pub pin: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config { mode: Mode::Snic, cores: 2, instances: 0, credits: 8, batch: 32, queue: 4096, pin: false }
    }
}

/// A task instance at a chain position, with each tenant's task (the tenants that skip it
/// have none).
#[derive(Debug)]
pub struct Wrapper {
    /// The position's task.
    pub slot: Slot,
    /// The position in the chain.
    pub position: usize,
    tasks: Vec<Option<Box<dyn NetworkTask>>>,
    /// By tenant: the generation `tasks` are, and the generation before's tasks while its
    /// packets may still be in flight (a hitless update, [`crate::update`]).
    generation: Vec<u8>,
    previous: Vec<Option<Box<dyn NetworkTask>>>,
    /// Packets it ran, packets that skipped it, batches it saw, and the time it spent (ns) on
    /// the packets of its timed batches (`timed_packets`).
    pub packets: u64,
    pub skipped: u64,
    pub batches: u64,
    pub ns: u64,
    pub timed_packets: u64,
    /// Batches of its segment it was first in (for the timing's one in [`TIME_ONE_IN`]).
    visits: u64,
    /// Whether a task of either generation reads packets' bytes past their headers
    /// ([`NetworkTask::reads_payload`]), kept as its tasks change.
    payload: bool,
}

/// `v`, `task`'s verdict (evaluated first: the task is borrowed again after); debug builds check that a drop's reason is one its kind lists
/// ([`crate::task::drop_reasons`], what docs/chain.md gives).
fn checked(v: Verdict, task: &dyn NetworkTask) -> Verdict {
    debug_assert!(
        !matches!(v, Verdict::Drop(r) if !crate::task::drop_reasons(task.kind()).contains(&r)),
        "{}: {v:?} is not among task::drop_reasons",
        task.kind()
    );
    v
}

impl Wrapper {
    /// Runs tenant `t`'s task on one packet (a trace; the data path runs batches).
    pub fn run_one(&mut self, t: usize, p: &mut Packet, cx: &mut Cx<'_>) -> Verdict {
        match self.tasks.get_mut(t).and_then(Option::as_mut) {
            Some(task) => {
                self.packets += 1;
                checked(task.process(p, cx), task.as_ref())
            }
            None => Verdict::Drop(reason::NO_TASK),
        }
    }

    /// Makes `task` tenant `t`'s task of generation `g`, keeping the one it replaces as the
    /// previous generation's (for that generation's packets still in flight). The new task takes
    /// the state of the one it replaces ([`NetworkTask::swap_state`]: a firewall's established
    /// flows, a NAT's mappings, ...), which the previous generation's packets then share.
    fn install(&mut self, t: usize, g: u8, mut task: Option<Box<dyn NetworkTask>>) {
        if let (Some(cur), Some(prev), Some(generation)) =
            (self.tasks.get_mut(t), self.previous.get_mut(t), self.generation.get_mut(t))
        {
            if let (Some(new), Some(old)) = (task.as_mut(), cur.as_mut()) {
                new.swap_state(old.as_mut());
            }
            *prev = std::mem::replace(cur, task);
            *generation = g;
        }
        self.look_at_payload();
    }

    /// Finds again whether a task of either generation reads packets' payload.
    fn look_at_payload(&mut self) {
        self.payload = self.tasks.iter().chain(&self.previous).flatten().any(|t| t.reads_payload());
    }

    /// Drops tenant `t`'s previous generation's task (none of its packets is left).
    fn retire(&mut self, t: usize) {
        if let Some(p) = self.previous.get_mut(t) {
            *p = None;
        }
        self.look_at_payload();
    }

    /// Each task's counters, by tenant.
    pub fn counters(&self) -> Vec<(usize, Vec<(&'static str, u64)>)> {
        self.tasks.iter().enumerate().filter_map(|(t, k)| k.as_ref().map(|k| (t, k.counters()))).collect()
    }
}

/// Makes tenant `t`'s task for its DAG node `n`.
pub type Factory<'a> = dyn FnMut(usize, usize) -> Result<Box<dyn NetworkTask>, String> + 'a;

/// One instance of chain `ci`: a wrapper a position; instance `k` of `n` (tasks that share
/// out what they hand out take their share: [`NetworkTask::partition`]).
pub fn build_chain(
    plan: &Plan,
    ci: usize,
    ntenants: usize,
    factory: &mut Factory<'_>,
    (k, n): (usize, usize),
) -> Result<Vec<Wrapper>, String> {
    let c = &plan.chains[ci];
    let mut ws: Vec<Wrapper> = c
        .slots
        .iter()
        .enumerate()
        .map(|(p, s)| Wrapper {
            slot: s.clone(),
            position: p,
            tasks: (0..ntenants).map(|_| None).collect(),
            generation: vec![0; ntenants],
            previous: (0..ntenants).map(|_| None).collect(),
            packets: 0,
            skipped: 0,
            batches: 0,
            ns: 0,
            timed_packets: 0,
            visits: 0,
            payload: false,
        })
        .collect();
    for &t in &c.tenants {
        for (node, &p) in plan.tenants[t].positions.iter().enumerate() {
            let mut task = factory(t, node)?;
            task.partition(k, n)?;
            ws[p].tasks[t] = Some(task);
        }
    }
    for w in &mut ws {
        w.look_at_payload();
    }
    Ok(ws)
}

/// What became of a packet in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Alive,
    Dropped(&'static str),
    Replied,
}

/// How often a region or core times a batch task by task: one batch in this many (the rest
/// run without reading the clock; a wrapper's time is scaled from its timed packets).
pub const TIME_ONE_IN: u64 = 8;

/// What the scheduler's core does between two task runs of a batch there (`between` of
/// [`run_batch`]).
#[derive(Debug, Clone, Copy)]
enum Beside {
    /// Between two packets: a refill, if credits have come back; `timed`: the batch is timed,
    /// and the refill's time (returned) is no task's.
    Refill { timed: bool },
    /// Between two tasks of a packet: the lines the next refill looks at are asked for, so
    /// that one the other core has written since is here when it looks.
    Ask,
}

/// Runs `wrappers` over a batch, task by task; `fates` says what became of each item. When
/// `timed`, the clock is read as the first task starts and once after each task that ran, so a
/// task's time is the time from the one before it (what the region did before the batch, as
/// sorting it, is no task's). `between` (the scheduler's core) runs after every task run: a
/// refill once in as many runs as the chain has tasks (about a packet's worth of the chain),
/// an ask for lines at the others. `ahead` runs once, three quarters into the batch's task
/// runs: what the region reads next is asked for while a quarter of the batch is left.
fn run_batch(
    wrappers: &mut [Wrapper],
    items: &mut [Item],
    fates: &mut Vec<Fate>,
    cx: &mut Cx<'_>,
    emitted_desc: &mut Vec<Desc>,
    mut between: Option<&mut dyn FnMut(Beside) -> Duration>,
    ahead: Option<&dyn Fn()>,
) {
    // One batch of the chain in TIME_ONE_IN is timed, the first included, counted by the
    // chain's own batches (a count shared by the core's chains would, with chains taking turns,
    // never time some of them).
    let timed = wrappers.first_mut().is_some_and(|w| {
        w.visits += 1;
        w.visits % TIME_ONE_IN == 1
    });
    fates.clear();
    fates.resize(items.len(), Fate::Alive);
    let mut t0 = if timed { clock::now() } else { cx.now };
    let every = wrappers.len().max(1);
    let mut runs = 0usize;
    // The (wrapper, item) pair at which `ahead` runs, counted skips and all.
    let ahead_at = (items.len() * wrappers.len() * 3 / 4).max(1);
    let mut pairs = 0usize;
    for w in wrappers.iter_mut() {
        let bit = 1u64 << (w.position & 63);
        let mut ran = 0;
        // A task that reads the packets' bytes past their headers: each packet's lines are
        // asked for while the one before runs (the first's as the task starts).
        let payload = w.payload;
        if payload && let Some(first) = items.first() {
            ask_bytes(first.packet.data());
        }
        for j in 0..items.len() {
            let Some(((item, rest), fate)) = items[j..].split_first_mut().zip(fates.get_mut(j)) else { break };
            pairs += 1;
            if pairs == ahead_at
                && let Some(f) = ahead
            {
                f();
            }
            if *fate != Fate::Alive {
                continue;
            }
            if item.desc.skip & bit != 0 {
                w.skipped += 1;
                continue;
            }
            let t = usize::from(item.desc.tenant);
            let current = w.generation.get(t) == Some(&item.desc.generation);
            let (tasks, previous) = (&mut w.tasks, &mut w.previous);
            // A previous generation's packet (an update draining) runs its own generation's
            // task on the state the two share, lent to it by the current task for the packet.
            let (task, mut lender) = if current {
                (tasks.get_mut(t).and_then(Option::as_mut), None)
            } else {
                (previous.get_mut(t).and_then(Option::as_mut), tasks.get_mut(t).and_then(Option::as_mut))
            };
            let Some(task) = task else {
                // The plan gives every position a tenant does not skip a task of its own.
                *fate = Fate::Dropped(reason::NO_TASK);
                continue;
            };
            ran += 1;
            if payload && let Some(next) = rest.first() {
                ask_bytes(next.packet.data());
            }
            let before = cx.emitted.len();
            let lent = lender.as_mut().is_some_and(|cur| task.swap_state(cur.as_mut()));
            cx.port = item.desc.port;
            let verdict = checked(task.process(&mut item.packet, cx), task.as_ref());
            if lent && let Some(cur) = lender {
                cur.swap_state(task.as_mut());
            }
            match verdict {
                Verdict::Pass => {}
                Verdict::Drop(r) => *fate = Fate::Dropped(r),
                Verdict::Reply => *fate = Fate::Replied,
            }
            // A task's own packets go back the way this one came.
            for _ in before..cx.emitted.len() {
                emitted_desc.push({
                    let mut d = item.desc;
                    d.set_reply(true);
                    d
                });
            }
            // Between two packets, the core's other duty (the scheduler's refill); its time is
            // not the task's (timed only in a timed batch). Between two tasks, its lines asked
            // for.
            if let Some(f) = between.as_deref_mut() {
                runs += 1;
                if runs.is_multiple_of(every) {
                    let d = f(Beside::Refill { timed });
                    if timed {
                        t0 += d;
                    }
                } else {
                    f(Beside::Ask);
                }
            }
        }
        if ran > 0 {
            w.packets += ran;
            w.batches += 1;
            if timed {
                let t1 = clock::now();
                w.ns += (t1 - t0).as_nanos() as u64;
                w.timed_packets += ran;
                t0 = t1;
            }
        }
    }
}

/// The tenant a frame is, by the tenants' ingress patterns (the first that matches).
#[derive(Debug, Clone)]
pub struct Classify {
    patterns: Vec<tern_table::classifier::Matcher>,
    info: FrameInfo,
    /// By tenant: packets its chain's tasks need steered (a NAT's replies), over `n` instances.
    steer: Vec<Option<Steer>>,
    one: Vec<bool>,
    n: usize,
}

impl Classify {
    /// For `tenants`, in their order.
    pub fn new(tenants: &[Tenant]) -> Classify {
        Classify {
            patterns: tenants.iter().map(|t| tern_table::classifier::Matcher::new(&t.ingress.pattern)).collect(),
            info: FrameInfo::default(),
            steer: Vec::new(),
            one: Vec::new(),
            n: 1,
        }
    }

    /// With tenant `t`'s packets to `steer[t]`'s address and ports given, as their "hash", the
    /// instance of `n` that owns the port; and every packet of a tenant with `one[t]` the hash 0
    /// (instance 0).
    pub fn with_steering(mut self, steer: Vec<Option<Steer>>, one: Vec<bool>, n: usize) -> Classify {
        self.steer = steer;
        self.one = one;
        self.n = n.max(1);
        self
    }

    /// The frame's tenant and its flow's hash, or the drop reason (`malformed`: not an
    /// Ethernet frame carrying IP; `unknown_tenant`: no tenant's pattern matches).
    pub fn tenant(&mut self, frame: &[u8]) -> Result<(usize, u64), &'static str> {
        let t = self.tenant_only(frame)?;
        Ok((t, self.flow_hash(t)))
    }

    /// The frame's tenant, or the drop reason, as [`tenant`](Self::tenant) gives them; its
    /// flow's hash, if wanted, is [`flow_hash`](Self::flow_hash) right after.
    pub fn tenant_only(&mut self, frame: &[u8]) -> Result<usize, &'static str> {
        if self.info.parse_into(frame).is_err() || !matches!(self.info.l3, L3::Ipv4 | L3::Ipv6) {
            return Err("malformed");
        }
        let i = &self.info;
        let key = FlowKey {
            in_port: 0,
            v6: i.l3 == L3::Ipv6,
            src: i.src,
            dst: i.dst,
            proto: i.proto,
            src_port: i.src_port,
            dst_port: i.dst_port,
        };
        self.patterns.iter().position(|p| p.matches(&key)).ok_or("unknown_tenant")
    }

    /// The flow hash of the frame [`tenant_only`](Self::tenant_only) last found to be tenant
    /// `t`'s (as [`tenant`](Self::tenant) gives it).
    pub fn flow_hash(&self, t: usize) -> u64 {
        let i = &self.info;
        if self.one.get(t).copied().unwrap_or(false) {
            return 0;
        }
        if let Some(Some(st)) = self.steer.get(t)
            && i.l3 == L3::Ipv4
            && i.has_l4
            && i.dst_v4() == st.addr
            && let Some(k) = st.owner(i.dst_port, self.n)
        {
            return k as u64;
        }
        // Both directions of a flow hash alike (a stateful chain's instance sees both).
        let (a, b) = if (i.src, i.src_port) <= (i.dst, i.dst_port) { (i.src, i.src_port) } else { (i.dst, i.dst_port) };
        let (c, d) = if (a, b) == (i.src, i.src_port) { (i.dst, i.dst_port) } else { (i.src, i.src_port) };
        let mut h = (a as u64) ^ (a >> 64) as u64 ^ (c as u64).rotate_left(17) ^ ((c >> 64) as u64).rotate_left(29);
        h ^= (u64::from(b) << 16 | u64::from(d)) << 32 | u64::from(i.proto);
        // MurmurHash3's 64-bit finalizer, whole: with one multiply of its two, the low bits
        // (which pick the instance) hardly moved with the ports (one host's 100 flows fell
        // 62/38 and 32/68 over two instances, its first 10 all on one).
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^= h >> 33;
        h
    }
}

/// Counters of one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TenantStats {
    /// Packets taken in, sent on after its chain, and answered by a task.
    pub packets_in: u64,
    pub packets_out: u64,
    pub replies: u64,
    /// Drops by reason (the tasks' reasons, and `rate_limited`, `queue_full`, `ring_full`).
    pub drops: BTreeMap<&'static str, u64>,
}

/// Counters of a run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct RunStats {
    /// By tenant (the planned order).
    pub tenants: Vec<TenantStats>,
    /// Packets no tenant's pattern matched, and that were not IP frames.
    pub unknown_tenant: u64,
    pub malformed: u64,
    /// Scheduling decisions (a packet moved into a region) and the scheduler's time, ns.
    pub decisions: u64,
    pub scheduler_ns: u64,
    /// Times a packet waited for a credit (at the head of its queue).
    pub credit_waits: u64,
    /// `snic`: scheduler rounds run between two packets of a batch of a region on the
    /// scheduler's core, credits having come back from a region elsewhere.
    pub refills: u64,
    /// `panic`: the most packets waiting between tasks at once in the scheduler's buffer.
    pub buffer_peak: u64,
    /// Each wrapper: (chain, instance, position, slot, packets, skipped, batches, ns).
    pub wrappers: Vec<WrapperStats>,
}

/// A wrapper's counters.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WrapperStats {
    /// The region it runs in (`rtc`: none, the whole chain runs on core `instance`).
    pub region: Option<usize>,
    /// Chain, instance, position.
    pub chain: usize,
    pub instance: usize,
    pub position: usize,
    /// The task's name and kind.
    pub name: String,
    pub kind: &'static str,
    /// Packets it ran and that skipped it; batches; time, ns (estimated: its timed batches'
    /// time scaled to all its packets, one batch in [`TIME_ONE_IN`] being timed).
    pub packets: u64,
    pub skipped: u64,
    pub batches: u64,
    pub ns: u64,
    /// Each tenant's task instance here: its own counters (its kind's, docs/chain.md: a
    /// firewall's flows remembered and `source_full`, a NAT's mappings, a cache's hits, ...,
    /// and its drops by reason), as it last published them.
    pub tasks: Vec<TaskCounters>,
}

/// A tenant's task instance's own counters ([`crate::task::NetworkTask::counters`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TaskCounters {
    /// The tenant, by its place in the tenants' list.
    pub tenant: usize,
    /// Its counters, by name, in the task's order.
    #[serde(serialize_with = "as_map")]
    pub counters: Vec<(&'static str, u64)>,
}

/// Pairs as a JSON object (the names are a task's own, each once).
fn as_map<S: serde::Serializer>(pairs: &[(&'static str, u64)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(pairs.iter().map(|(k, v)| (k, v)))
}

impl RunStats {
    fn add_tenants(&mut self, other: &[TenantStats]) {
        if self.tenants.len() < other.len() {
            self.tenants.resize(other.len(), TenantStats::default());
        }
        for (a, b) in self.tenants.iter_mut().zip(other) {
            a.packets_in += b.packets_in;
            a.packets_out += b.packets_out;
            a.replies += b.replies;
            for (k, v) in &b.drops {
                *a.drops.entry(k).or_default() += v;
            }
        }
    }

    fn add_wrappers(&mut self, region: Option<usize>, chain: usize, instance: usize, ws: &[Wrapper]) {
        push_wrapper_stats(&mut self.wrappers, region, chain, instance, ws);
    }
}

fn push_wrapper_stats(
    out: &mut Vec<WrapperStats>,
    region: Option<usize>,
    chain: usize,
    instance: usize,
    ws: &[Wrapper],
) {
    for w in ws {
        out.push(WrapperStats {
            region,
            chain,
            instance,
            position: w.position,
            name: w.slot.name.clone(),
            kind: w.slot.kind,
            packets: w.packets,
            skipped: w.skipped,
            batches: w.batches,
            // Scaled from the timed batches to all its packets.
            ns: if w.timed_packets > 0 {
                (w.ns as u128 * u128::from(w.packets) / u128::from(w.timed_packets)) as u64
            } else {
                0
            },
            tasks: w.counters().into_iter().map(|(tenant, counters)| TaskCounters { tenant, counters }).collect(),
        });
    }
}

/// Publishes a core's counters for [`Monitor`].
/// A lock the data path takes without waiting: `None` while another thread (the control
/// plane: a reader of the counters, an update) holds it; the data path tries again later
/// rather than stall its packets behind a thread that may be descheduled.
pub(crate) fn try_lock<T>(m: &std::sync::Mutex<T>) -> Option<std::sync::MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Publishes a core's counters for the [`Monitor`]: at once if no reader holds its slot
/// (else skipped: the next one comes a `PUBLISH` later), or with `last` waiting for it.
fn publish(
    shared: &Shared,
    core: usize,
    st: &CoreState,
    sched: Option<&Scheduler>,
    wrappers: Vec<WrapperStats>,
    last: bool,
) {
    let snap = CoreSnap {
        tenants: st.tenants.clone(),
        wrappers,
        unknown_tenant: st.unknown_tenant,
        malformed: st.malformed,
        sched: sched.map(|s| {
            (s.decisions, s.ns_estimate(), s.credit_waits, s.buffer_peak, s.unknown_tenant, s.malformed, s.refills)
        }),
        queued: sched.map(|s| s.lanes.iter().map(|l| l.queued as u64).collect()).unwrap_or_default(),
        credits: sched.map(|s| s.credits.clone()).unwrap_or_default(),
        load: st.load(),
    };
    if let Some(m) = shared.snaps.get(core) {
        let slot = if last { Some(m.lock().unwrap_or_else(|e| e.into_inner())) } else { try_lock(m) };
        if let Some(mut slot) = slot {
            *slot = snap;
        }
    }
}

fn region_wrappers(regions: &[Region]) -> Vec<WrapperStats> {
    let mut out = Vec::new();
    for r in regions {
        for (ci, k, _, ws) in &r.segments {
            push_wrapper_stats(&mut out, Some(r.id), *ci, *k, ws);
        }
    }
    out
}

/// A region at run time: the segments placed in it (each a chain instance's positions), and
/// its input rings, one from each core (single producer, single consumer: a core writes only
/// its own ring's tail, so moving a packet costs no contended atomic).
struct Region {
    /// Its id.
    id: usize,
    /// (chain, instance, segment, wrappers).
    segments: Vec<(usize, usize, usize, Vec<Wrapper>)>,
    inputs: Vec<rtrb::Consumer<Item>>,
    /// Which input to take from first (turns, so no core's packets wait behind another's).
    turn: usize,
    /// Out of service until then (a launch's partial reconfiguration).
    dark_until: Option<Instant>,
    /// Its pace: the least cap (`Cost::gbps`) of its tasks, bytes a ns (None: no task capped:
    /// as fast as its core runs it); the bytes it may take now (below 0: a batch taken on
    /// credit, paid for before the next), and when they were counted.
    pace: Option<f64>,
    tokens: f64,
    refilled: Option<Instant>,
    /// By input: the address of the slot after the last one read (0: its last batch took
    /// nothing from it), for [`ask_ahead`].
    next_slot: Vec<usize>,
}

/// The most bytes a paced region saves up while idle: one full-size frame.
const PACE_BURST_BYTES: f64 = 1518.0;

/// The least cap (`Cost::gbps`) of any tenant's task in `wrappers`, Gbit/s (None: none capped).
fn least_cap<'a>(wrappers: impl IntoIterator<Item = &'a Wrapper>) -> Option<f64> {
    wrappers
        .into_iter()
        .flat_map(|w| w.tasks.iter().flatten())
        .filter_map(|t| t.cost().gbps)
        .filter(|g| g.is_finite() && *g > 0.0)
        .reduce(f64::min)
}

/// A region's pace: the least cap of any task in its segments, bytes a ns.
fn region_pace(segments: &Segments) -> Option<f64> {
    least_cap(segments.iter().flat_map(|s| s.3.iter())).map(|g| g / 8.0)
}

impl Region {
    /// Region `id` running `segments`, in service, paced to its tasks' caps.
    fn new(id: usize, segments: Segments) -> Region {
        Region {
            id,
            pace: region_pace(&segments),
            segments,
            inputs: Vec::new(),
            turn: 0,
            dark_until: None,
            tokens: 0.0,
            refilled: None,
            next_slot: Vec::new(),
        }
    }

    /// Attaches an input ring (one from each core), with its entry for [`ask_ahead`].
    fn attach(&mut self, input: rtrb::Consumer<Item>) {
        self.inputs.push(input);
        self.next_slot.push(0);
    }
}

/// A region's segments: (chain, instance, segment, the segment's wrappers).
pub type Segments = Vec<(usize, usize, usize, Vec<Wrapper>)>;

/// New task instances for a region's segments, and how long the region stays out of service
/// when they go in (the profile's partial-reconfiguration time; zero: at once).
pub struct Launch {
    /// (chain, instance, segment, wrappers), as the region holds them.
    pub segments: Segments,
    /// Out of service this long from the swap.
    pub pr: Duration,
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch").field("segments", &self.segments.len()).field("pr", &self.pr).finish()
    }
}

/// A core's ends of the rings it writes: into each region (by id), and (`panic`, forks) back
/// to the scheduler.
struct Links {
    to: Vec<Outbox>,
    back: Option<Outbox>,
}

impl Links {
    /// Moves `item` towards region `r`'s ring from this core (it is there after the next
    /// [`flush`](Self::flush)); the item back if the ring has no room.
    // The item comes back by value on a full ring (boxing it would allocate per packet).
    #[allow(clippy::result_large_err)]
    fn push(&mut self, r: usize, item: Item) -> Result<(), Item> {
        match self.to.get_mut(r) {
            Some(o) => o.push(item),
            None => Err(item),
        }
    }

    /// Moves what [`push`](Self::push) staged into the rings.
    fn flush(&mut self) {
        for o in &mut self.to {
            o.flush();
        }
        if let Some(b) = self.back.as_mut() {
            b.flush();
        }
    }
}

/// One ring's producer end, with the items staged for it: they go in together at
/// [`flush`](Self::flush), so the ring's write index — a cache line the consuming core reads —
/// moves once a batch, not once a packet (as DPDK's enqueue burst). Staged items always fit:
/// a push is refused when the ring, as last seen, has no room for it.
struct Outbox {
    ring: rtrb::Producer<Item>,
    staged: Vec<Item>,
    /// Free slots in the ring when last looked, less what was written since.
    room: usize,
    /// Staged items that go in at once without waiting for the flush: what the consuming
    /// region takes in one batch, so it can start on them while this core goes on.
    burst: usize,
}

impl Outbox {
    fn new(ring: rtrb::Producer<Item>, burst: usize) -> Outbox {
        let cap = ring.buffer().capacity();
        Outbox { ring, staged: Vec::with_capacity(cap), room: 0, burst: burst.max(1) }
    }

    #[allow(clippy::result_large_err)]
    fn push(&mut self, item: Item) -> Result<(), Item> {
        if self.staged.len() >= self.room {
            // Look again: the consumer may have freed slots.
            self.room = self.ring.slots();
            if self.staged.len() >= self.room {
                return Err(item);
            }
        }
        self.staged.push(item);
        if self.staged.len() >= self.burst {
            self.flush();
        }
        Ok(())
    }

    fn flush(&mut self) {
        let n = self.staged.len();
        if n == 0 {
            return;
        }
        // `n` ≤ the free slots seen, and slots only grow until this producer writes; were it
        // otherwise, what does not fit would stay staged for the next flush.
        let n = match self.ring.write_chunk_uninit(n) {
            Ok(chunk) => chunk.fill_from_iter(self.staged.drain(..)),
            Err(rtrb::chunks::ChunkError::TooFewSlots(k)) => match self.ring.write_chunk_uninit(k) {
                Ok(chunk) => chunk.fill_from_iter(self.staged.drain(..k)),
                Err(_) => 0,
            },
        };
        self.room = self.room.saturating_sub(n);
        // The next burst's slots, asked for now (the chunk is dropped unwritten): the consuming
        // core read them last, and a store into a line another core holds waits for it, where
        // asked for a burst ahead it is here by then (docs/chain.md, "The data path").
        let ahead = self.burst.min(self.room);
        if let Ok(mut next) = self.ring.write_chunk_uninit(ahead) {
            let (a, b) = next.as_mut_slices();
            for slot in a.iter().chain(b.iter()) {
                tern_io::prefetch_write(slot);
            }
        }
    }
}

/// What every core shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Regions there are.
    pub(crate) regions: usize,
    /// `snic`: the region of (chain, instance, segment); `panic`: of (chain, instance, position).
    pub(crate) route: Vec<Vec<Vec<usize>>>,
    /// Credits coming back: `snic` by chain instance (chain × instances + instance); `panic`
    /// by region; each pool one counter a core (at `pool × cores + core`), the credits that
    /// core has given back so far. Each has one writer (its core, storing, never a
    /// read-modify-write that waits for the line) and a cache line of its own.
    returned: Vec<Line>,
    /// Cores running.
    pub(crate) cores: usize,
    pub(crate) stop: AtomicBool,
    /// Each core's counters as last published (every [`PUBLISH`] while it runs).
    snaps: Vec<std::sync::Mutex<CoreSnap>>,
    /// By credit pool: the region its credits admit into (for the credits gauge).
    pool_region: Vec<usize>,
    /// By region: a launch waiting for the region's next batch boundary, and whether there is
    /// one (checked without the lock); launches done.
    launch: Vec<std::sync::Mutex<Option<Launch>>>,
    pub(crate) launch_waiting: Vec<AtomicBool>,
    launches: Vec<AtomicU64>,
    /// `snic`: by region, its plan region and instance.
    pub(crate) region_of: Vec<(usize, usize)>,
    /// By tenant: its fork (`parallel = true`), run in `snic`.
    pub(crate) forks: Vec<Option<crate::plan::Fork>>,
    /// By tenant: its ingress limit as set through a [`Limiter`] (an `f64`'s bits, Gbit/s;
    /// [`NO_LIMIT`]: none), and a count of the changes, which the scheduler checks each round.
    limits: Vec<AtomicU64>,
    limits_changed: AtomicU64,
    /// By tenant: what it has offered (packets, bytes), stored by the scheduler.
    offered: Vec<[Line; 2]>,
    /// By chain: the instances in service as set through a [`Launcher`], and a count of the
    /// changes, which the scheduler checks each round.
    active: Vec<std::sync::atomic::AtomicUsize>,
    active_changed: AtomicU64,
    /// Each region's core, each tenant's chain and skip mask, the instances of each chain, and
    /// the mode.
    region_core: Vec<usize>,
    pub(crate) placements: Vec<(usize, AtomicU64)>,
    pub(crate) instances: usize,
    pub(crate) mode: Mode,
    /// Hitless updates ([`crate::update`]): by region, tenants' new tasks (and retirements)
    /// waiting for its next batch boundary (flagged in `launch_waiting`).
    pub(crate) swaps: Vec<std::sync::Mutex<Vec<Swap>>>,
    /// By tenant: the regions' installs of its generations taken so far.
    pub(crate) installed: Vec<AtomicU64>,
    /// By tenant: the next generation, its skip mask, and the installs that must be taken
    /// before the scheduler stamps it (set with a count of the changes); and the last
    /// generation whose update is complete (stamped, the one before retired), stored by the
    /// scheduler.
    pub(crate) next_generation: Vec<std::sync::Mutex<(u8, u64, u64)>>,
    pub(crate) generation_changed: AtomicU64,
    pub(crate) settled: Vec<AtomicU64>,
    /// By tenant and generation parity (`t × 2 + g mod 2`): packets the scheduler moved into
    /// their chain (stored by core 0), and (at `(t × 2 + p) × cores + core`) packets that core
    /// saw leave their chain (each giving its credit back). Their difference is what is in
    /// flight.
    pub(crate) started: Vec<Line>,
    pub(crate) done: Vec<Line>,
    /// What an update is checked against and keeps (the plan as updated so far), by tenant
    /// its generation (updates applied), and whether the cores are running.
    pub(crate) update: std::sync::Mutex<crate::update::UpdateState>,
    pub(crate) generations: Vec<AtomicU64>,
    pub(crate) running: AtomicBool,
    /// By tenant whether its packets are steered or kept to one instance; by chain whether it
    /// keeps state (what an update may not change).
    pub(crate) steer: Vec<Option<Steer>>,
    pub(crate) one: Vec<bool>,
    pub(crate) stateful: Vec<bool>,
    /// By chain: what an instance carries at most, Gbit/s, its tasks' least cap (None: none
    /// capped).
    pub(crate) chain_gbps: Vec<Option<f64>>,
}

/// A tenant's new tasks for a region, or the end of its previous generation there.
#[derive(Debug)]
pub(crate) enum Swap {
    /// (chain, instance, segment, a task for each of the segment's wrappers).
    Install {
        tenant: usize,
        generation: u8,
        segments: crate::update::RegionTasks,
    },
    Retire {
        tenant: usize,
    },
}

/// [`Shared::limits`] of a tenant with no limit.
const NO_LIMIT: u64 = u64::MAX;

/// A counter on a cache line of its own (128 bytes: the line and its prefetched neighbour).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Line(pub(crate) AtomicU64);

/// How often a core publishes its counters for [`Monitor`].
pub const PUBLISH: Duration = Duration::from_millis(10);

/// A core's counters, published for [`Monitor`].
#[derive(Debug, Clone, Default)]
struct CoreSnap {
    tenants: Vec<TenantStats>,
    wrappers: Vec<WrapperStats>,
    unknown_tenant: u64,
    malformed: u64,
    /// Core 0's scheduler: decisions, ns, credit waits, buffer peak, unknown, malformed, refills;
    /// queue depth by tenant; credits on hand by pool.
    sched: Option<(u64, u64, u64, u64, u64, u64, u64)>,
    queued: Vec<u64>,
    credits: Vec<u64>,
    /// The core's busy time (running, less its idle spells) and its region visits.
    load: CoreLoad,
}

/// A core's time and work, as it last published them.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct CoreLoad {
    /// Time it was not idle since it started, ns.
    pub busy_ns: u64,
    /// Packets its regions took (a packet through two of its regions counts twice).
    pub visits: u64,
}

/// Reads a running [`Runtime`]'s counters (as each core last published them).
#[derive(Debug, Clone)]
pub struct Monitor(Arc<Shared>);

/// A running runtime's counters.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Live {
    /// As [`Runtime::run`] returns them at the end.
    pub stats: RunStats,
    /// Packets waiting in each tenant's queue.
    pub queue_depth: Vec<u64>,
    /// Credits on hand, by region (`snic`: the chain instance's, under its first region).
    pub credits: Vec<(usize, u64)>,
    /// Launches taken, by region.
    pub launches: Vec<u64>,
    /// By core: its busy time and region visits.
    pub cores: Vec<CoreLoad>,
}

impl Monitor {
    /// The counters now.
    pub fn live(&self) -> Live {
        let mut live = Live::default();
        for m in &self.0.snaps {
            let snap = m.lock().unwrap_or_else(|e| e.into_inner()).clone();
            live.cores.push(snap.load);
            live.stats.add_tenants(&snap.tenants);
            live.stats.wrappers.extend(snap.wrappers);
            live.stats.unknown_tenant += snap.unknown_tenant;
            live.stats.malformed += snap.malformed;
            if let Some((d, ns, w, peak, u, mal, refills)) = snap.sched {
                live.stats.decisions += d;
                live.stats.refills += refills;
                live.stats.scheduler_ns += ns;
                live.stats.credit_waits += w;
                live.stats.buffer_peak = live.stats.buffer_peak.max(peak);
                live.stats.unknown_tenant += u;
                live.stats.malformed += mal;
                live.queue_depth = snap.queued;
                live.credits = snap
                    .credits
                    .iter()
                    .enumerate()
                    .map(|(p, c)| (self.0.pool_region.get(p).copied().unwrap_or(p), *c))
                    .collect();
            }
        }
        live.stats.wrappers.sort_by_key(|w| (w.chain, w.instance, w.position));
        live.launches = self.0.launches.iter().map(|l| l.load(Ordering::Relaxed)).collect();
        live
    }

    /// By tenant, the time one of its packets takes of each core, ns, from what `live`'s
    /// wrappers and cores measured (`snic`, `panic`): each task it does not skip, at its
    /// wrapper's ns a packet, on its region's core, weighted by the share of the chain's
    /// packets its instance took (each wrapper counts every packet through it, run or
    /// skipped); core 0's scheduler, at its ns a packet taken in; and each core's
    /// time outside the tasks and the scheduler (taking packets from rings, moving them on,
    /// giving credits back, sending them out, receiving on core 0), at its busy time not
    /// otherwise counted over its visits — one a packet a region takes, and on core 0 one a
    /// decision — for each visit the tenant's packet makes there. A task that has run no
    /// packet yet counts nothing. Empty in `rtc` (no scheduler to limit at).
    pub fn ns_per_packet(&self, live: &Live) -> Vec<Vec<f64>> {
        let sh = &self.0;
        if sh.mode == Mode::Rtc {
            return Vec::new();
        }
        let taken: u64 = live.stats.tenants.iter().map(|t| t.packets_in).sum();
        let sched = if taken > 0 { live.stats.scheduler_ns as f64 / taken as f64 } else { 0.0 };
        let even = 1.0 / sh.instances.max(1) as f64;
        // By chain and instance: the share of the chain's packets that instance took.
        let mut through: Vec<Vec<u64>> = vec![vec![0; sh.instances.max(1)]; sh.route.len()];
        for w in &live.stats.wrappers {
            if let Some(m) = through.get_mut(w.chain).and_then(|c| c.get_mut(w.instance)) {
                *m = (*m).max(w.packets + w.skipped);
            }
        }
        let share = |chain: usize, k: usize| -> f64 {
            let Some(c) = through.get(chain) else { return even };
            let all: u64 = c.iter().sum();
            if all == 0 { even } else { c.get(k).copied().unwrap_or(0) as f64 / all as f64 }
        };
        let core_of = |w: &WrapperStats| w.region.and_then(|r| sh.region_core.get(r)).copied().unwrap_or(0);
        // Each core's time a visit outside the tasks and the scheduler.
        let mut tasks_ns = vec![0u64; sh.cores];
        for w in &live.stats.wrappers {
            if let Some(t) = tasks_ns.get_mut(core_of(w)) {
                *t += w.ns;
            }
        }
        let overhead: Vec<f64> = (0..sh.cores)
            .map(|c| {
                let Some(load) = live.cores.get(c) else { return 0.0 };
                let (sched_ns, decisions) =
                    if c == 0 { (live.stats.scheduler_ns, live.stats.decisions) } else { (0, 0) };
                let rest = load.busy_ns.saturating_sub(tasks_ns[c]).saturating_sub(sched_ns);
                let visits = load.visits + decisions;
                if visits > 0 { rest as f64 / visits as f64 } else { 0.0 }
            })
            .collect();
        sh.placements
            .iter()
            .map(|(chain, skip)| {
                let (chain, skip) = (*chain, skip.load(Ordering::Relaxed));
                let mut ns = vec![0.0; sh.cores];
                if let Some(c0) = ns.first_mut() {
                    *c0 = sched + overhead[0];
                }
                for w in live.stats.wrappers.iter().filter(|w| w.chain == chain && w.packets > 0) {
                    if skip >> (w.position & 63) & 1 == 1 {
                        continue;
                    }
                    if let Some(c) = ns.get_mut(core_of(w)) {
                        *c += w.ns as f64 / w.packets as f64 * share(chain, w.instance);
                    }
                }
                // Its visits to each core's regions: each segment (snic) or each position it
                // does not skip (panic), by instance.
                for (k, stops) in sh.route.get(chain).into_iter().flatten().enumerate() {
                    for (i, &region) in stops.iter().enumerate() {
                        if sh.mode == Mode::Panic && skip >> (i & 63) & 1 == 1 {
                            continue;
                        }
                        let c = sh.region_core.get(region).copied().unwrap_or(0);
                        if let (Some(n), Some(o)) = (ns.get_mut(c), overhead.get(c)) {
                            *n += o * share(chain, k);
                        }
                    }
                }
                ns
            })
            .collect()
    }
}

/// Per-core counters and scratch space.
struct CoreState {
    tenants: Vec<TenantStats>,
    batch: Vec<Item>,
    fates: Vec<Fate>,
    out: Vec<Item>,
    /// `out` of the scheduler's refill while a region's batch runs (see [`run_region`]).
    out_between: Vec<Item>,
    emitted: Vec<Packet>,
    emitted_desc: Vec<Desc>,
    /// Credits to give back, by pool; and those given back so far.
    give: Vec<u64>,
    given: Vec<u64>,
    /// Frames no tenant's pattern matched, and that were not IP (`rtc`: each core its own).
    unknown_tenant: u64,
    malformed: u64,
    /// Its ends of the rings, and (core 0, `panic`) the rings back from every core.
    links: Links,
    /// The next fork token (the core's number in the top bits).
    token: u32,
    back_in: Vec<rtrb::Consumer<Item>>,
    /// By tenant and generation parity: packets that left their chain here (see
    /// `Shared::done`), and the counts as last stored there.
    done: Vec<u64>,
    done_stored: Vec<u64>,
    /// When it started, the time of its idle spells so far (ns) and when the current one
    /// began; packets its regions took.
    started: Instant,
    idle_ns: u64,
    idle_since: Option<Instant>,
    visits: u64,
}

impl CoreState {
    fn new(ntenants: usize, pools: usize, links: Links, back_in: Vec<rtrb::Consumer<Item>>) -> CoreState {
        CoreState {
            links,
            back_in,
            token: 0,
            tenants: vec![TenantStats::default(); ntenants],
            batch: Vec::new(),
            fates: Vec::new(),
            out: Vec::new(),
            out_between: Vec::new(),
            emitted: Vec::new(),
            emitted_desc: Vec::new(),
            give: vec![0; pools],
            given: vec![0; pools],
            unknown_tenant: 0,
            malformed: 0,
            done: vec![0; ntenants * 2],
            done_stored: vec![0; ntenants * 2],
            started: Instant::now(),
            idle_ns: 0,
            idle_since: None,
            visits: 0,
        }
    }

    /// Its busy time and visits so far (an idle spell under way not counted as busy).
    fn load(&self) -> CoreLoad {
        let now = Instant::now();
        let idle = self.idle_ns + self.idle_since.map_or(0, |t| now.saturating_duration_since(t).as_nanos() as u64);
        let ran = now.saturating_duration_since(self.started).as_nanos() as u64;
        CoreLoad { busy_ns: ran.saturating_sub(idle), visits: self.visits }
    }

    /// A packet (of `d`) left its chain: its credit goes back to `pool`.
    fn credit_back(&mut self, pool: usize, d: &Desc) {
        self.give[pool] += 1;
        self.count_done(d);
    }

    /// A packet (of `d`) left its chain, counted by its tenant's generation.
    fn count_done(&mut self, d: &Desc) {
        if let Some(n) = self.done.get_mut(usize::from(d.tenant) * 2 + usize::from(d.generation & 1)) {
            *n += 1;
        }
    }

    /// Stores the counts of packets that left their chains for the updater to read (after the
    /// packets are out of every task).
    fn store_done(&mut self, shared: &Shared, core: usize) {
        for (i, (n, stored)) in self.done.iter().zip(self.done_stored.iter_mut()).enumerate() {
            if n != stored {
                *stored = *n;
                if let Some(l) = shared.done.get(i * shared.cores + core) {
                    l.0.store(*n, Ordering::Release);
                }
            }
        }
    }

    fn drop_item(&mut self, pool: &Pool, item: Item, reason: &'static str) {
        if let Some(t) = self.tenants.get_mut(usize::from(item.desc.tenant)) {
            *t.drops.entry(reason).or_default() += 1;
        }
        pool.put(item.packet);
    }
}

/// A running set of tenants' chains. Build with [`Runtime::new`], then [`Runtime::run`].
pub struct Runtime {
    cfg: Config,
    plan: Plan,
    tenants: Vec<Tenant>,
    /// By core: the regions it runs (`snic`, `panic`), or every chain's wrappers (`rtc`).
    cores: Vec<Vec<Region>>,
    rtc: Vec<Vec<Vec<Wrapper>>>,
    /// What every core shares (with the instances of each chain, whether each chain keeps
    /// state, and by tenant its packets' steering to an instance or to one).
    shared: Arc<Shared>,
    /// By core: its ends of the rings; core 0's ends of the rings back (`panic`).
    links: Vec<Links>,
    back_in: Vec<rtrb::Consumer<Item>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("cfg", &self.cfg).field("plan", &self.plan).finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds every task instance of `plan` for `tenants` (the planned order) in `cfg`'s mode.
    pub fn new(plan: Plan, tenants: Vec<Tenant>, cfg: Config, factory: &mut Factory<'_>) -> Result<Runtime, String> {
        let cores = cfg.cores.max(1);
        if tenants.len() > usize::from(u16::MAX) || plan.chains.len() > usize::from(u16::MAX) {
            return Err("too many tenants or chains (at most 65535)".into());
        }
        let instances = if cfg.instances == 0 { cores } else { cfg.instances }.min(usize::from(u16::MAX));
        let nt = tenants.len();
        let mut stateful = Vec::new();
        let mut core_regions: Vec<Vec<Region>> = (0..cores).map(|_| Vec::new()).collect();
        let mut rtc = Vec::new();
        let mut by_id: Vec<Region> = Vec::new();
        let mut region_core = Vec::new();
        let mut region_of = Vec::new();
        let mut route: Vec<Vec<Vec<usize>>> = Vec::new();
        let credits = cfg.credits.max(1) as usize;
        // Every chain's copies (instances; in rtc, one a core), built first: copy k of `copies`.
        let copies = if cfg.mode == Mode::Rtc { cores } else { instances };
        let mut built: Vec<Vec<Vec<Wrapper>>> = (0..copies)
            .map(|k| (0..plan.chains.len()).map(|ci| build_chain(&plan, ci, nt, factory, (k, copies))).collect())
            .collect::<Result<_, _>>()?;
        // What the tasks say of their state (read from the first copy): chains whose instances
        // must see whole flows, and tenants whose packets must be steered (a NAT's replies) or
        // kept to one instance.
        let mut steer: Vec<Option<Steer>> = vec![None; nt];
        let mut one: Vec<bool> = vec![false; nt];
        let mut chain_gbps = Vec::new();
        for first in built.first().into_iter().flatten() {
            stateful.push(first.iter().any(|w| w.tasks.iter().flatten().any(|t| t.cost().stateful)));
            chain_gbps.push(least_cap(first));
            for w in first {
                for (t, task) in w.tasks.iter().enumerate() {
                    if let Some(task) = task {
                        steer[t] = steer[t].or(task.steer());
                        one[t] |= task.one_instance();
                    }
                }
            }
        }
        match cfg.mode {
            Mode::Rtc => rtc = built,
            Mode::Snic => {
                // Region r of instance k goes to core (r + k × regions) mod cores.
                route = vec![vec![Vec::new(); instances]; plan.chains.len()];
                let nreg = plan.regions.len();
                for k in 0..instances {
                    let mut chains: Vec<Vec<Option<Vec<Wrapper>>>> = Vec::new();
                    for (ci, r) in route.iter_mut().enumerate() {
                        let mut ws = std::mem::take(&mut built[k][ci]);
                        let mut segs = Vec::new();
                        for seg in plan.chains[ci].segments.iter().rev() {
                            segs.push(Some(ws.split_off(seg.start)));
                        }
                        segs.reverse();
                        chains.push(segs);
                        r[k] = vec![usize::MAX; plan.chains[ci].segments.len()];
                    }
                    for (ri, r) in plan.regions.iter().enumerate() {
                        let id = by_id.len();
                        let mut segments = Vec::new();
                        for &(ci, si) in &r.segments {
                            route[ci][k][si] = id;
                            segments.push((ci, k, si, chains[ci][si].take().unwrap_or_default()));
                        }
                        region_core.push((ri + k * nreg) % cores);
                        region_of.push((ri, k));
                        by_id.push(Region::new(id, segments));
                    }
                }
            }
            Mode::Panic => {
                let mut next_core = 0;
                for ci in 0..plan.chains.len() {
                    route.push(Vec::new());
                    for (k, copy) in built.iter_mut().enumerate() {
                        let ws = std::mem::take(&mut copy[ci]);
                        let mut ids = Vec::new();
                        for w in ws {
                            let id = by_id.len();
                            ids.push(id);
                            region_core.push(next_core % cores);
                            by_id.push(Region::new(id, vec![(ci, k, w.position, vec![w])]));
                            next_core += 1;
                        }
                        route[ci].push(ids);
                    }
                }
            }
        }
        let nregions = by_id.len();
        let pools = match cfg.mode {
            Mode::Snic => plan.chains.len() * instances,
            Mode::Panic => nregions,
            Mode::Rtc => 0,
        };
        // A ring from every core into every region, each holding what the region's credits
        // allow in flight, twice over.
        let mut links: Vec<Links> = (0..cores).map(|_| Links { to: Vec::new(), back: None }).collect();
        for r in &mut by_id {
            // A fork's copies ride their original's credit: room for a few of them each.
            let cap = (credits * r.segments.len() * 4).max(cfg.batch) + cfg.batch;
            for l in &mut links {
                let (p, c) = rtrb::RingBuffer::new(cap);
                l.to.push(Outbox::new(p, region_take(&cfg)));
                r.attach(c);
            }
        }
        let mut back_in = Vec::new();
        if cfg.mode == Mode::Panic || (cfg.mode == Mode::Snic && plan.tenants.iter().any(|p| p.fork.is_some())) {
            for l in &mut links {
                let (p, c) = rtrb::RingBuffer::new((nregions * credits + cfg.batch).max(1));
                l.back = Some(Outbox::new(p, cfg.batch));
                back_in.push(c);
            }
        }
        for (r, &c) in by_id.into_iter().zip(&region_core) {
            core_regions[c].push(r);
        }
        let pool_region: Vec<usize> = match cfg.mode {
            Mode::Snic => {
                (0..pools).map(|p| route[p / instances][p % instances].first().copied().unwrap_or(0)).collect()
            }
            _ => (0..pools).collect(),
        };
        let shared = Arc::new(Shared {
            regions: nregions,
            route,
            returned: (0..pools * cores).map(|_| Line::default()).collect(),
            cores,
            stop: AtomicBool::new(false),
            snaps: (0..cores).map(|_| std::sync::Mutex::new(CoreSnap::default())).collect(),
            pool_region,
            launch: (0..nregions).map(|_| std::sync::Mutex::new(None)).collect(),
            launch_waiting: (0..nregions).map(|_| AtomicBool::new(false)).collect(),
            launches: (0..nregions).map(|_| AtomicU64::new(0)).collect(),
            region_of,
            forks: if cfg.mode == Mode::Snic {
                plan.tenants.iter().map(|p| p.fork.clone()).collect()
            } else {
                Vec::new()
            },
            limits: tenants.iter().map(|_| AtomicU64::new(NO_LIMIT)).collect(),
            limits_changed: AtomicU64::new(0),
            offered: tenants.iter().map(|_| [Line::default(), Line::default()]).collect(),
            active: plan.chains.iter().map(|_| std::sync::atomic::AtomicUsize::new(instances)).collect(),
            active_changed: AtomicU64::new(0),
            region_core,
            placements: plan.tenants.iter().map(|p| (p.chain, AtomicU64::new(p.skip))).collect(),
            instances,
            mode: cfg.mode,
            swaps: (0..nregions).map(|_| std::sync::Mutex::new(Vec::new())).collect(),
            installed: (0..nt).map(|_| AtomicU64::new(0)).collect(),
            next_generation: plan.tenants.iter().map(|p| std::sync::Mutex::new((0, p.skip, 0))).collect(),
            generation_changed: AtomicU64::new(0),
            settled: (0..nt).map(|_| AtomicU64::new(0)).collect(),
            started: (0..nt * 2).map(|_| Line::default()).collect(),
            done: (0..nt * 2 * cores).map(|_| Line::default()).collect(),
            update: std::sync::Mutex::new(crate::update::UpdateState::new(plan.clone())),
            generations: (0..nt).map(|_| AtomicU64::new(0)).collect(),
            running: AtomicBool::new(false),
            steer,
            one,
            stateful,
            chain_gbps,
        });
        Ok(Runtime { cfg, plan, tenants, cores: core_regions, rtc, shared, links, back_in })
    }

    /// The plan it runs.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The classifier its scheduler uses (and an `rtc` ingress should shard flows by: a
    /// packet's core is its hash modulo the cores), with the tasks' steering.
    pub fn classify(&self) -> Classify {
        let n = if self.cfg.mode == Mode::Rtc { self.cfg.cores.max(1) } else { self.shared.instances };
        Classify::new(&self.tenants).with_steering(self.shared.steer.clone(), self.shared.one.clone(), n)
    }

    /// A handle that sets tenants' ingress limits and reads what they offer, while it runs.
    pub fn limiter(&self) -> Limiter {
        Limiter(self.shared.clone())
    }

    /// A handle that updates one tenant at a time while it runs, hitless (`snic`; see
    /// [`crate::update`]).
    pub fn updater(&self) -> crate::update::Updater {
        crate::update::Updater(self.shared.clone())
    }

    /// A handle that launches new instances into its regions while it runs (`snic`).
    pub fn launcher(&self) -> Launcher {
        Launcher(self.shared.clone())
    }

    /// Chain instances (of each chain).
    pub fn instances(&self) -> usize {
        self.shared.instances
    }

    /// By chain: whether it keeps per-flow state (its flows spread over all its instances,
    /// which all stay in service).
    pub fn stateful(&self) -> &[bool] {
        &self.shared.stateful
    }

    /// A handle that reads the counters while it runs.
    pub fn monitor(&self) -> Monitor {
        Monitor(self.shared.clone())
    }

    /// A handle that stops [`run`](Self::run) when set.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.shared.clone())
    }

    /// Runs until stopped: core 0 on this thread with `ingress[0]` (every core its own
    /// ingress in `rtc`), each core sending through its own egress. Returns the counters; or,
    /// if a core panicked (a task's bug, say: it stops every core), an error naming the core
    /// and the panic's message.
    pub fn run(
        mut self,
        pool: &Pool,
        ingress: Vec<Box<dyn Ingress>>,
        egress: Vec<Box<dyn Egress>>,
    ) -> Result<RunStats, String> {
        let cores = self.cfg.cores.max(1);
        if egress.len() < cores {
            return Err(format!("egress: {} given, one a core ({cores}) needed", egress.len()));
        }
        let need_in = if self.cfg.mode == Mode::Rtc { cores } else { 1 };
        if ingress.len() < need_in {
            return Err(format!("ingress: {} given, {need_in} needed in mode {}", ingress.len(), self.cfg.mode.name()));
        }
        let nt = self.tenants.len();
        let pools = self.shared.returned.len() / self.shared.cores.max(1);
        let mut stats = RunStats::default();
        let cfg = self.cfg;
        let mut ingress: Vec<Option<Box<dyn Ingress>>> = ingress.into_iter().map(Some).collect();
        let mut egress: Vec<Option<Box<dyn Egress>>> = egress.into_iter().map(Some).collect();
        let classify = self.classify();
        let mut sched = Scheduler::new(
            &self.plan,
            &self.tenants,
            &cfg,
            self.shared.instances,
            self.shared.stateful.clone(),
            &self.shared.route,
            pools,
        );
        if cfg.mode == Mode::Snic {
            // A snic region runs its whole segment on its core: the scheduler's own core has
            // less room for it. (A panic region runs one task; where the first is says little.)
            sched.set_local_regions(&self.shared.region_core.iter().map(|&c| c == 0).collect::<Vec<_>>());
        }
        let mut sched = Some(sched);
        let core_regions = std::mem::take(&mut self.cores);
        let rtc = std::mem::take(&mut self.rtc);
        self.shared.running.store(true, Ordering::Release);
        let (results, panics): (Vec<Joined>, Vec<_>) = std::thread::scope(|s| {
            let mut handles = Vec::new();
            let mut rtc_iter = rtc.into_iter();
            let mut regions_iter = core_regions.into_iter();
            let mut first: Option<Box<dyn FnOnce() -> Joined + Send + '_>> = None;
            let mut links_iter = std::mem::take(&mut self.links).into_iter();
            let mut back_in = Some(std::mem::take(&mut self.back_in));
            for core in 0..cores {
                let links = links_iter.next().unwrap_or(Links { to: Vec::new(), back: None });
                let back = if core == 0 { back_in.take().unwrap_or_default() } else { Vec::new() };
                let shared = self.shared.clone();
                let eg = egress[core].take();
                let regions = regions_iter.next().unwrap_or_default();
                let chains = rtc_iter.next().unwrap_or_default();
                let ing = if cfg.mode == Mode::Rtc || core == 0 { ingress[core].take() } else { None };
                let mut cl = classify.clone();
                let sched_here = if core == 0 && cfg.mode != Mode::Rtc { sched.take() } else { None };
                let body = move || -> Joined {
                    // A panic on any core (a task's bug) stops them all: the data path is not
                    // left running short of a core.
                    let _stop_all = tern_io::OnPanic(|| shared.stop.store(true, Ordering::Release));
                    if cfg.pin {
                        tern_io::pin_to_core(core);
                    }
                    let mut st = CoreState::new(nt, pools, links, back);
                    st.token = (core as u32) << 24;
                    let mut ing = ing;
                    let Some(mut eg) = eg else { return Joined { st, wrappers: Vec::new(), sched: None } };
                    if cfg.mode == Mode::Rtc {
                        let mut chains = chains;
                        rtc_loop(
                            core,
                            &shared,
                            pool,
                            &cfg,
                            &mut cl,
                            ing.as_deref_mut(),
                            &mut chains,
                            eg.as_mut(),
                            &mut st,
                        );
                        let wrappers = chains.into_iter().enumerate().map(|(ci, ws)| (None, ci, core, ws)).collect();
                        return Joined { st, wrappers, sched: None };
                    }
                    let mut regions = regions;
                    let mut sched = sched_here;
                    worker_loop(
                        core,
                        &shared,
                        pool,
                        &cfg,
                        sched.as_mut(),
                        &mut cl,
                        ing.as_deref_mut(),
                        &mut regions,
                        eg.as_mut(),
                        &mut st,
                    );
                    let mut wrappers = Vec::new();
                    for r in regions {
                        for (ci, k, _, w) in r.segments {
                            wrappers.push((Some(r.id), ci, k, w));
                        }
                    }
                    Joined { st, wrappers, sched }
                };
                if core == 0 {
                    first = Some(Box::new(body));
                } else {
                    handles.push((core, s.spawn(body)));
                }
            }
            let mut out = Vec::new();
            let mut panics = Vec::new();
            if let Some(f) = first {
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                    Ok(r) => out.push(r),
                    Err(p) => panics.push((0, p)),
                }
            }
            for (core, h) in handles {
                match h.join() {
                    Ok(r) => out.push(r),
                    Err(p) => panics.push((core, p)),
                }
            }
            (out, panics)
        });
        self.shared.running.store(false, Ordering::Release);
        if let Some((core, p)) = panics.first() {
            let why = tern_io::panic_message(p.as_ref());
            return Err(format!(
                "the data path stopped: core {core} panicked ({why}){}",
                if panics.len() > 1 { format!(", and {} more core(s)", panics.len() - 1) } else { String::new() }
            ));
        }
        for j in results {
            if let Some(sc) = j.sched {
                stats.unknown_tenant += sc.unknown_tenant;
                stats.malformed += sc.malformed;
                stats.credit_waits += sc.credit_waits;
                stats.refills += sc.refills;
                stats.decisions += sc.decisions;
                stats.scheduler_ns += sc.ns_estimate();
                stats.buffer_peak = stats.buffer_peak.max(sc.buffer_peak);
            }
            stats.unknown_tenant += j.st.unknown_tenant;
            stats.malformed += j.st.malformed;
            stats.add_tenants(&j.st.tenants);
            for (region, ci, k, w) in j.wrappers {
                stats.add_wrappers(region, ci, k, &w);
            }
        }
        stats.tenants.resize(nt, TenantStats::default());
        stats.wrappers.sort_by_key(|w| (w.chain, w.instance, w.position));
        Ok(stats)
    }
}

/// What a core hands back when it stops.
struct Joined {
    st: CoreState,
    wrappers: Vec<(Option<usize>, usize, usize, Vec<Wrapper>)>,
    sched: Option<Scheduler>,
}

/// Launches new task instances into a running [`Runtime`]'s regions (`snic`).
#[derive(Debug, Clone)]
pub struct Launcher(Arc<Shared>);

impl Launcher {
    /// The data-path region of plan region `ri`'s instance `k`.
    pub fn region(&self, ri: usize, k: usize) -> Option<usize> {
        self.0.region_of.iter().position(|&x| x == (ri, k))
    }

    /// Hands `launch` to region `id`, which swaps it in at its next batch boundary (replacing a
    /// launch not yet taken). An error if there is no such region.
    pub fn launch(&self, id: usize, launch: Launch) -> Result<(), String> {
        let slot = self.0.launch.get(id).ok_or_else(|| format!("no region {id}"))?;
        *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(launch);
        self.0.launch_waiting[id].store(true, Ordering::Release);
        Ok(())
    }

    /// Puts the first `n` instances of `chain` in service, from the scheduler's next round (a
    /// stateless chain's packets go to those only; see [`Scheduler::set_active`]); an error
    /// names a chain it does not have or an `n` outside 1 to the instances built.
    pub fn set_active(&self, chain: usize, n: usize) -> Result<(), String> {
        let slot = self.0.active.get(chain).ok_or_else(|| format!("no chain {chain}"))?;
        if !(1..=self.0.instances).contains(&n) {
            return Err(format!("{n} instances in service: 1 to {} (those built)", self.0.instances));
        }
        slot.store(n, Ordering::Relaxed);
        self.0.active_changed.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Each chain's instances in service, as last set.
    pub fn active(&self) -> Vec<usize> {
        self.0.active.iter().map(|a| a.load(Ordering::Relaxed)).collect()
    }

    /// Launches taken, by region.
    pub fn launches(&self) -> Vec<u64> {
        self.0.launches.iter().map(|l| l.load(Ordering::Relaxed)).collect()
    }
}

/// Sets tenants' ingress limits in a running [`Runtime`] and reads what they offer (`snic`,
/// `panic`: where the scheduler admits packets; `rtc` has no limiter).
#[derive(Debug, Clone)]
pub struct Limiter(Arc<Shared>);

impl Limiter {
    /// Limits tenant `t`'s ingress to `gbps` (None: no limit; negative or NaN: an error), from
    /// the scheduler's next round.
    pub fn set(&self, t: usize, gbps: Option<f64>) -> Result<(), String> {
        let slot = self.0.limits.get(t).ok_or_else(|| format!("no tenant {t}"))?;
        let bits = match gbps {
            None => NO_LIMIT,
            Some(g) if g.is_finite() && g >= 0.0 => g.to_bits(),
            Some(g) => return Err(format!("limit {g} Gbit/s: not a rate")),
        };
        slot.store(bits, Ordering::Relaxed);
        self.0.limits_changed.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// Each tenant's limit as last set (None: none).
    pub fn limits(&self) -> Vec<Option<f64>> {
        self.0.limits.iter().map(|l| decode_limit(l.load(Ordering::Relaxed))).collect()
    }

    /// What each tenant has offered so far (packets, bytes), limited or not.
    pub fn offered(&self) -> Vec<(u64, u64)> {
        self.0.offered.iter().map(|[p, b]| (p.0.load(Ordering::Relaxed), b.0.load(Ordering::Relaxed))).collect()
    }
}

/// Fair shares on a running [`Runtime`] (docs/chain.md, "Fairness"): at each [`tick`]
/// (every epoch), what each tenant offered since the last tick and its tasks' measured time on
/// each core give its share ([`crate::fair::time_share`] over the cores' time, weighted by its
/// bandwidth), set as its ingress limit. The caller keeps the time: `tern chain serve` and the
/// benchmark tick it every epoch from a thread of their own.
///
/// [`tick`]: FairShares::tick
#[derive(Debug)]
pub struct FairShares {
    monitor: Monitor,
    limiter: Limiter,
    weights: Vec<f64>,
    capacity: Vec<f64>,
    epoch: crate::fair::Epoch,
    /// Packets waiting in a tenant's queue that make it backlogged: a batch.
    backlog: usize,
}

impl FairShares {
    /// For `rt`'s tenants, weighted by their `bandwidth_gbps` (1 if none), over its cores.
    pub fn new(rt: &Runtime) -> FairShares {
        FairShares {
            monitor: rt.monitor(),
            limiter: rt.limiter(),
            weights: rt.tenants.iter().map(|t| if t.bandwidth_gbps > 0.0 { t.bandwidth_gbps } else { 1.0 }).collect(),
            capacity: vec![1.0; rt.cfg.cores.max(1)],
            epoch: crate::fair::Epoch::default(),
            backlog: rt.cfg.batch.max(1),
        }
    }

    /// One epoch at `now`: the shares, each tenant's limit set (None at the first tick).
    pub fn tick(&mut self, now: Instant) -> Option<Vec<crate::fair::Share>> {
        let live = self.monitor.live();
        let ns = self.monitor.ns_per_packet(&live);
        // A tenant with a batch or more waiting in its queue is served less than it offers.
        let backlogged: Vec<bool> = (0..self.weights.len())
            .map(|t| live.queue_depth.get(t).is_some_and(|&d| d >= self.backlog as u64))
            .collect();
        let got = self.epoch.step(now, &self.limiter.offered(), &backlogged, &self.weights, &ns, &self.capacity)?;
        for (t, s) in got.iter().enumerate() {
            let _ = self.limiter.set(t, s.limit_gbps);
        }
        Some(got)
    }
}

/// Autoscaling on a running [`Runtime`] (docs/chain.md, "Autoscaling"): each stateless
/// chain's [`crate::scale::Autoscaler`] (the policy `tern chain sim` simulates), counting load
/// in instances. At each epoch a chain's load is the most of: its tasks' measured time over
/// the epoch, in cores, over the share of a core an instance is counted full at (`target`);
/// for a chain with a capped task (`Cost::gbps`: its regions are paced to it), what its tenants
/// offered (bytes) over what an instance carries; and,
/// while a tenant of the chain has its queue half full or more (offering so much more than is
/// carried that what it offers will soon not be seen), one instance more than serve. Instances launched serve after
/// the PR time, from the first [`tick`] after it ([`Launcher::set_active`]); an instance is
/// one of those the runtime built. Stateful chains keep all their instances (moving flows
/// would lose their state). The caller keeps the time: call [`tick`] at [`next_due`] (or more
/// often).
///
/// [`tick`]: Scaling::tick
/// [`next_due`]: Scaling::next_due
#[derive(Debug)]
pub struct Scaling {
    monitor: Monitor,
    launcher: Launcher,
    limiter: Limiter,
    scalers: Vec<Option<crate::scale::Autoscaler>>,
    /// By chain: its tenants.
    tenants: Vec<Vec<usize>>,
    target: f64,
    /// By chain: what an instance carries, Gbit/s (None: no task capped).
    chain_gbps: Vec<Option<f64>>,
    backlog: u64,
    epoch: Duration,
    start: Instant,
    next_epoch: Instant,
    /// At the last epoch: when, each chain's tasks' time (ns) and bytes offered.
    last: Option<(Instant, Vec<u64>, Vec<u64>)>,
    /// The board's regions and the tenants' space shares ([`Scaling::with_space`]), and each
    /// chain's share at the last epoch.
    space: Option<crate::scale::Space>,
    shares: Vec<usize>,
    /// Instances each chain may have at most (those built).
    built: usize,
}

impl Scaling {
    /// For `rt`'s chains: `prelaunched` instances of each in service from the start, a launch
    /// serving after `pr`, an instance counted full at `target` of a core (0.8: a chain busy
    /// 1.2 cores needs 2) or at its tasks' least cap, an epoch every `epoch` (the first now).
    pub fn new(rt: &Runtime, prelaunched: usize, pr: Duration, target: f64, epoch: Duration) -> Scaling {
        let launcher = rt.launcher();
        let n = rt.shared.instances.max(1);
        let scalers = (0..rt.plan.chains.len())
            .map(|ci| {
                if rt.shared.stateful.get(ci).copied().unwrap_or(true) {
                    return None;
                }
                let a = crate::scale::Autoscaler::new(1.0, n, pr.as_nanos() as u64, prelaunched);
                let _ = launcher.set_active(ci, a.ready());
                Some(a)
            })
            .collect();
        let now = Instant::now();
        Scaling {
            monitor: rt.monitor(),
            launcher,
            limiter: rt.limiter(),
            scalers,
            tenants: rt.plan.chains.iter().map(|c| c.tenants.clone()).collect(),
            target: if target.is_finite() && target > 0.0 { target } else { 1.0 },
            chain_gbps: rt.shared.chain_gbps.clone(),
            backlog: (rt.cfg.queue as u64 / 2).max(1),
            epoch: epoch.max(Duration::from_micros(100)),
            start: now,
            next_epoch: now,
            last: None,
            space: None,
            shares: Vec::new(),
            built: n,
        }
    }

    /// Instances launched only into the board's regions `space` describes, every epoch each
    /// chain's space share recomputed (the tenants' DRF shares: [`crate::scale::Space`]): a
    /// launch takes a free region, or one of a chain holding more than its share while the
    /// launching chain is below its own (that chain gives an instance up); a launched
    /// instance otherwise stays. The pre-launched instances are cut to what fits.
    pub fn with_space(mut self, space: crate::scale::Space) -> Scaling {
        let shares = space.shares();
        let held = self.held();
        let ones: Vec<usize> = held.iter().enumerate().map(|(c, &h)| if space.fixed[c] { h } else { 1 }).collect();
        let fit = space.arbitrate(&ones, &held, &shares);
        for (ci, sc) in self.scalers.iter_mut().enumerate() {
            if let Some(sc) = sc
                && fit[ci] < sc.held()
            {
                sc.shrink_to(fit[ci]);
                let _ = self.launcher.set_active(ci, sc.ready());
            }
        }
        self.shares = shares;
        self.space = Some(space);
        self
    }

    /// By chain: instances serving and in PR (a stateful chain: all it was built with).
    fn held(&self) -> Vec<usize> {
        self.scalers.iter().map(|s| s.as_ref().map_or(self.built, |a| a.held())).collect()
    }

    /// Each chain's space share at the last epoch (empty without [`with_space`](Self::with_space)).
    pub fn shares(&self) -> &[usize] {
        &self.shares
    }

    /// When it started (its first epoch, and time 0 of the autoscaler's clock).
    pub fn start(&self) -> Instant {
        self.start
    }

    /// When the next tick has something to do: an epoch, or a launched instance's PR ending.
    pub fn next_due(&self) -> Instant {
        let pr_end = self
            .scalers
            .iter()
            .flatten()
            .filter_map(|a| a.next_ready())
            .min()
            .map(|ns| self.start + Duration::from_nanos(ns));
        pr_end.map_or(self.next_epoch, |t| t.min(self.next_epoch))
    }

    /// At `now`: instances whose PR has ended go into service; and if an epoch is due, by
    /// chain its load (instances) and the autoscaler's decision (None: a stateful chain, no
    /// epoch due, or the first epoch, which only notes the totals).
    pub fn tick(&mut self, now: Instant) -> Vec<Option<(f64, crate::scale::Decision)>> {
        let at = now.saturating_duration_since(self.start).as_nanos() as u64;
        for (ci, sc) in self.scalers.iter_mut().enumerate() {
            if let Some(sc) = sc {
                let before = sc.ready();
                sc.advance(at);
                if sc.ready() != before {
                    let _ = self.launcher.set_active(ci, sc.ready());
                }
            }
        }
        if now < self.next_epoch {
            return vec![None; self.scalers.len()];
        }
        while self.next_epoch <= now {
            self.next_epoch += self.epoch;
        }
        let live = self.monitor.live();
        let offered_t = self.limiter.offered();
        let mut busy = vec![0u64; self.scalers.len()];
        for w in &live.stats.wrappers {
            if let Some(b) = busy.get_mut(w.chain) {
                *b += w.ns;
            }
        }
        let offered: Vec<u64> =
            self.tenants.iter().map(|ts| ts.iter().filter_map(|&t| offered_t.get(t)).map(|o| o.1).sum()).collect();
        let prev = self.last.replace((now, busy.clone(), offered.clone()));
        let Some((then, busy0, offered0)) = prev else { return vec![None; self.scalers.len()] };
        let dt = now.saturating_duration_since(then).as_nanos() as f64;
        let mut loads = vec![0.0; self.scalers.len()];
        for (ci, sc) in self.scalers.iter().enumerate() {
            let Some(sc) = sc else { continue };
            let mut load = 0.0;
            if dt > 0.0 {
                load = busy[ci].saturating_sub(busy0[ci]) as f64 / dt / self.target;
                if let Some(gbps) = self.chain_gbps.get(ci).copied().flatten() {
                    // Bytes a ns times 8 is Gbit/s.
                    load = load.max(offered[ci].saturating_sub(offered0[ci]) as f64 * 8.0 / dt / gbps);
                }
            }
            let backlogged =
                self.tenants[ci].iter().any(|&t| live.queue_depth.get(t).is_some_and(|&q| q >= self.backlog));
            if backlogged {
                load = load.max(sc.ready() as f64 + 0.5);
            }
            loads[ci] = load;
        }
        // The regions each chain may hold this epoch (without a board: what it was built with).
        let most = match &self.space {
            Some(space) => {
                self.shares = space.shares();
                let want: Vec<usize> = self
                    .scalers
                    .iter()
                    .zip(&loads)
                    .map(|(s, &l)| s.as_ref().map_or(self.built, |a| a.recommend(l)))
                    .collect();
                space.arbitrate(&self.held(), &want, &self.shares)
            }
            None => vec![self.built; self.scalers.len()],
        };
        let mut out = Vec::with_capacity(self.scalers.len());
        for (ci, sc) in self.scalers.iter_mut().enumerate() {
            let Some(sc) = sc else {
                out.push(None);
                continue;
            };
            let d = if most[ci] < sc.held() {
                let evicted = sc.shrink_to(most[ci]);
                crate::scale::Decision { recommended: sc.recommend(loads[ci]), launched: 0, evicted }
            } else {
                sc.epoch_within(at, loads[ci], most[ci])
            };
            let _ = self.launcher.set_active(ci, sc.ready());
            out.push(Some((loads[ci], d)));
        }
        out
    }

    /// Each chain's autoscaler (None: stateful).
    pub fn scalers(&self) -> &[Option<crate::scale::Autoscaler>] {
        &self.scalers
    }
}

fn decode_limit(bits: u64) -> Option<f64> {
    (bits != NO_LIMIT).then(|| f64::from_bits(bits))
}

/// New instances of plan region `ri`'s segments for chain instance `k` of `n` (what a
/// [`Launch`] carries), built with `factory` off the data path.
pub fn build_region(
    plan: &Plan,
    ri: usize,
    (k, n): (usize, usize),
    ntenants: usize,
    factory: &mut Factory<'_>,
) -> Result<Segments, String> {
    let r = plan.regions.get(ri).ok_or_else(|| format!("no region {ri} in the plan"))?;
    let mut out = Vec::new();
    for &(ci, si) in &r.segments {
        let mut ws = build_chain(plan, ci, ntenants, factory, (k, n))?;
        let seg = plan.chains[ci].segments[si].clone();
        ws.truncate(seg.end);
        let ws = ws.split_off(seg.start);
        out.push((ci, k, si, ws));
    }
    Ok(out)
}

/// Stops a running [`Runtime`].
#[derive(Debug, Clone)]
pub struct Stopper(Arc<Shared>);

impl Stopper {
    /// Asks every core to stop (after the batch in hand).
    pub fn stop(&self) {
        self.0.stop.store(true, Ordering::Release);
    }
}

/// Where a decision sends a packet.
#[derive(Debug)]
pub struct Decision {
    /// The region whose ring it goes into, and the credit pool it took a credit of; `None`:
    /// its chain has nothing for it to run, it leaves now.
    pub to: Option<(usize, usize)>,
    /// The packet.
    pub item: Item,
}

/// Where a tenant's lanes are among the scheduler's queues (`first..first + n`), the packets
/// each may hold, and the packets in them all.
#[derive(Debug, Clone, Copy)]
struct Lanes {
    first: usize,
    n: usize,
    cap: usize,
    queued: usize,
}

/// Where a tenant's packets for one chain instance go first: the region and the credit pool
/// (`None`: its chain has nothing for it to run), and whether the region runs on the
/// scheduler's own core.
#[derive(Debug, Clone, Copy)]
struct Stop {
    to: Option<(usize, usize)>,
    local: bool,
}

/// The scheduler, sans I/O (the data path runs it on core 0): packets admitted into their
/// tenants' queues, served in virtual-time order, each taking a credit of its chain instance
/// (`snic`) or its first task's region (`panic`) — round robin over a stateless chain's
/// instances that have a credit, by flow for a stateful chain (whose tenants' queues have a
/// lane an instance, so a packet waiting for a busy instance holds back no other's).
#[derive(Debug)]
pub struct Scheduler {
    /// The queues' lanes, tenant by tenant (one, or one an instance of a stateful chain), and
    /// by tenant where its lanes are, their bound and the packets in them; its chain, skip
    /// mask, weight, virtual time.
    queues: Vec<VecDeque<Item>>,
    lanes: Vec<Lanes>,
    chain: Vec<usize>,
    skip: Vec<u64>,
    inv_weight: Vec<f64>,
    vt: Vec<f64>,
    global_vt: f64,
    /// By tenant and instance (at `t × instances + k`): its first stop.
    first: Vec<Stop>,
    /// Credits on hand, by pool.
    credits: Vec<u64>,
    /// Round-robin cursors, by chain; whether each chain is stateful.
    rr: Vec<usize>,
    stateful: Vec<bool>,
    instances: usize,
    queue_cap: usize,
    queued: usize,
    /// `panic` (a packet's first stop is a position, not a segment).
    panic: bool,
    /// By tenant: its ingress limiter (unlimited unless set), and what it offered (packets,
    /// bytes: its intended load, counted before the limiter).
    limit: Vec<TokenBucket>,
    offered: Vec<(u64, u64)>,
    /// [`Shared::limits_changed`] as last seen.
    limits_seen: u64,
    /// By chain: the instances in service (the first ones; a stateless chain's packets go to
    /// these only), and [`Shared::active_changed`] as last seen.
    active: Vec<usize>,
    active_seen: u64,
    /// Counters.
    pub unknown_tenant: u64,
    pub malformed: u64,
    pub credit_waits: u64,
    pub decisions: u64,
    pub ns: u64,
    /// Rounds run between two packets of a region's batch on its own core (credits had come
    /// back).
    pub refills: u64,
    /// `panic`: the most packets waiting between tasks at once.
    pub buffer_peak: u64,
    /// Rounds run, and the decisions of the timed ones (one in [`TIME_ONE_IN`]; `ns` is theirs).
    rounds: u64,
    timed_decisions: u64,
    /// By pool and core: the credits seen given back so far (see `Shared::returned`).
    returned_seen: Vec<u64>,
    /// By tenant: the generation it stamps on packets entering their chain, and the previous
    /// generation's skip mask (for its packets still in flight).
    generation: Vec<u8>,
    skip_previous: Vec<u64>,
    /// By tenant and generation parity (`t × 2 + g mod 2`): packets moved into their chain.
    pub started: Vec<u64>,
    /// The last arrival time admitted and its descriptor form (a batch's arrivals share one).
    last_at: Option<(Instant, i64)>,
}

impl Scheduler {
    /// Whether credits have come back on any of `lines` (indices of `Shared::returned`) since
    /// the scheduler last took them in (one load a line; a line another core wrote is read
    /// only when it changed).
    fn credits_back(&self, shared: &Shared, lines: &[usize]) -> bool {
        lines.iter().any(|&i| {
            let (Some(r), Some(&seen)) = (shared.returned.get(i), self.returned_seen.get(i)) else { return false };
            r.0.load(Ordering::Relaxed) > seen
        })
    }

    /// For `plan`'s tenants with `instances` of each chain; `route[chain][instance][stop]` is
    /// the region of each segment (`snic`) or position (`panic`); `pools` credit pools.
    pub fn new(
        plan: &Plan,
        tenants: &[Tenant],
        cfg: &Config,
        instances: usize,
        stateful: Vec<bool>,
        route: &[Vec<Vec<usize>>],
        pools: usize,
    ) -> Scheduler {
        let instances = instances.max(1);
        let first = plan
            .tenants
            .iter()
            .flat_map(|pl| {
                (0..instances).map(move |k| {
                    let stops = route.get(pl.chain).and_then(|c| c.get(k));
                    let to = stops.and_then(|stops| match cfg.mode {
                        Mode::Snic => stops.first().map(|&r| (r, pl.chain * instances + k)),
                        _ => next_position(pl.skip, 0, stops.len()).map(|p| (stops[p], stops[p])),
                    });
                    Stop { to, local: false }
                })
            })
            .collect();
        // A lane an instance for a stateful chain's tenant, one for the rest.
        let lanes: Vec<usize> = plan
            .tenants
            .iter()
            .map(|pl| if stateful.get(pl.chain).copied().unwrap_or(true) { instances } else { 1 })
            .collect();
        Scheduler {
            queues: (0..lanes.iter().sum()).map(|_| VecDeque::new()).collect(),
            lanes: lanes
                .iter()
                .scan(0, |at, &n| {
                    let first = *at;
                    *at += n;
                    Some(Lanes { first, n, cap: (cfg.queue.max(1) / n).max(1), queued: 0 })
                })
                .collect(),
            chain: plan.tenants.iter().map(|p| p.chain).collect(),
            skip: plan.tenants.iter().map(|p| p.skip).collect(),
            inv_weight: tenants
                .iter()
                .map(|t| if t.bandwidth_gbps > 0.0 { 1.0 / t.bandwidth_gbps } else { 1.0 })
                .collect(),
            vt: vec![0.0; tenants.len()],
            global_vt: 0.0,
            first,
            credits: vec![u64::from(cfg.credits.max(1)); pools],
            rr: vec![0; plan.chains.len()],
            stateful,
            instances,
            queue_cap: cfg.queue.max(1),
            queued: 0,
            panic: cfg.mode == Mode::Panic,
            limit: tenants.iter().map(|_| TokenBucket::unlimited()).collect(),
            offered: vec![(0, 0); tenants.len()],
            limits_seen: 0,
            active: vec![instances; plan.chains.len()],
            active_seen: 0,
            unknown_tenant: 0,
            malformed: 0,
            credit_waits: 0,
            decisions: 0,
            ns: 0,
            refills: 0,
            buffer_peak: 0,
            rounds: 0,
            timed_decisions: 0,
            returned_seen: vec![0; pools * cfg.cores.max(1)],
            generation: vec![0; tenants.len()],
            skip_previous: plan.tenants.iter().map(|p| p.skip).collect(),
            started: vec![0; tenants.len() * 2],
            last_at: None,
        }
    }

    /// From now on tenant `t`'s packets enter their chain as generation `g`, skipping `skip`
    /// (the generation before keeps its mask for its packets in flight).
    pub fn set_generation(&mut self, t: usize, g: u8, skip: u64) {
        if let (Some(generation), Some(cur), Some(prev)) =
            (self.generation.get_mut(t), self.skip.get_mut(t), self.skip_previous.get_mut(t))
        {
            *prev = *cur;
            *cur = skip;
            *generation = g;
        }
    }

    /// The generation tenant `t`'s packets enter their chain on.
    pub fn generation(&self, t: usize) -> u8 {
        self.generation.get(t).copied().unwrap_or(0)
    }

    /// Tenant `t`'s skip mask for its packets of generation `g` (this one or the one before).
    pub fn skip_of(&self, t: usize, g: u8) -> u64 {
        if self.generation.get(t) == Some(&g) { self.skip[t] } else { self.skip_previous[t] }
    }

    /// Marks the regions (by id) that run on the scheduler's own core: instances elsewhere are
    /// chosen first.
    pub fn set_local_regions(&mut self, local: &[bool]) {
        for s in &mut self.first {
            s.local = s.to.is_some_and(|(r, _)| local.get(r).copied().unwrap_or(false));
        }
    }

    /// Its time, ns: the timed rounds' time scaled to all its decisions.
    pub fn ns_estimate(&self) -> u64 {
        if self.timed_decisions == 0 {
            return 0;
        }
        (u128::from(self.ns) * u128::from(self.decisions) / u128::from(self.timed_decisions)) as u64
    }

    /// Packets queued (all tenants).
    pub fn queued(&self) -> usize {
        self.queued
    }

    /// Room for more arrivals (the queues' bound, all tenants together).
    pub fn room(&self) -> usize {
        self.queue_cap.saturating_sub(self.queued)
    }

    /// `n` credits of `pool` come back.
    pub fn credit(&mut self, pool: usize, n: u64) {
        if let Some(c) = self.credits.get_mut(pool) {
            *c += n;
        }
    }

    /// Limits tenant `t`'s ingress to `gbps` (None: no limit), with a burst of
    /// [`LIMIT_BURST`] at that rate.
    pub fn set_limit(&mut self, t: usize, gbps: Option<f64>) {
        if let Some(l) = self.limit.get_mut(t) {
            l.set_rate(gbps, LIMIT_BURST);
        }
    }

    /// Puts the first `n` instances of `chain` in service (at least 1, at most those built): a
    /// stateless chain's packets go to those only. A stateful chain's go by flow to all its
    /// instances whatever this says (moving flows would lose their state).
    pub fn set_active(&mut self, chain: usize, n: usize) {
        if let Some(a) = self.active.get_mut(chain) {
            *a = n.clamp(1, self.instances);
        }
    }

    /// Tenant `t`'s ingress limit, Gbit/s (None: none).
    pub fn limit(&self, t: usize) -> Option<f64> {
        self.limit.get(t).and_then(TokenBucket::gbps)
    }

    /// What tenant `t` has offered so far (packets, bytes), limited or not: its intended load.
    pub fn offered(&self, t: usize) -> (u64, u64) {
        self.offered.get(t).copied().unwrap_or_default()
    }

    /// Classifies an arrival into its tenant's queue: its tenant, or the packet back with the
    /// drop reason (`malformed`, `unknown_tenant`, `rate_limited`, `queue_full`; the first two
    /// counted here). What a tenant offers is counted before its limiter.
    pub fn admit(&mut self, a: Arrival, classify: &mut Classify) -> Result<usize, (usize, Packet, &'static str)> {
        let t = match classify.tenant_only(a.packet.data()) {
            Ok(x) => x,
            Err(r) => {
                if r == "malformed" {
                    self.malformed += 1;
                } else {
                    self.unknown_tenant += 1;
                }
                return Err((usize::MAX, a.packet, r));
            }
        };
        let o = &mut self.offered[t];
        o.0 += 1;
        o.1 += a.packet.len() as u64;
        if !self.limit[t].admit(a.at, a.packet.len()) {
            return Err((t, a.packet, reason::RATE_LIMITED));
        }
        // A stateful chain's lane is its flow's instance: its hash modulo the instances (a hash
        // below them is an instance's number: a packet steered to its owner, or kept to 0).
        let l = self.lanes[t];
        // The hash only where there is a lane to choose.
        let lane = if l.n > 1 { l.first + (classify.flow_hash(t) % l.n as u64) as usize } else { l.first };
        if self.queues[lane].len() >= l.cap {
            return Err((t, a.packet, reason::QUEUE_FULL));
        }
        if l.queued == 0 {
            self.vt[t] = self.vt[t].max(self.global_vt);
        }
        let arrived = match self.last_at {
            Some((at, ns)) if at == a.at => ns,
            _ => {
                let ns = Desc::ns_of(a.at);
                self.last_at = Some((a.at, ns));
                ns
            }
        };
        let desc = Desc::arrived_ns(t, self.chain[t], self.skip[t], arrived, a.port);
        self.queues[lane].push_back(Item { packet: a.packet, desc });
        self.queued += 1;
        self.lanes[t].queued += 1;
        Ok(t)
    }

    /// The lane (of all) of tenant `t` whose head packet goes next and the instance it goes to,
    /// if one has a credit (or its chain has nothing to run): a stateful chain's lane with the
    /// oldest head among those whose instance has a credit (its `k`th lane is instance `k`'s;
    /// its only lane with one instance), a stateless chain's one lane to the next instance
    /// round robin.
    fn lane_for(&self, t: usize) -> Option<(usize, usize)> {
        let ci = self.chain[t];
        let stops = &self.first[t * self.instances..(t + 1) * self.instances];
        let has = |s: &Stop| match s.to {
            None => true,
            Some((_, pool)) => self.credits[pool] > 0,
        };
        let Lanes { first, n, .. } = self.lanes[t];
        if self.stateful.get(ci).copied().unwrap_or(true) {
            let mut best: Option<(usize, i64)> = None;
            for (k, (lane, stop)) in self.queues[first..first + n].iter().zip(stops).enumerate() {
                if let Some(head) = lane.front()
                    && best.is_none_or(|(_, at)| head.desc.arrived < at)
                    && has(stop)
                {
                    best = Some((k, head.desc.arrived));
                }
            }
            return best.map(|(k, _)| (first + k, k));
        }
        // Round robin over the instances in service that have a credit, those on other cores
        // than the scheduler's first (its own core has the scheduler's work besides): the first
        // such in turn, else the first on its own core.
        let n = self.active.get(ci).copied().unwrap_or(self.instances).clamp(1, self.instances);
        // The cursor is the instance after the last chosen: at most n unless the chain's
        // instances in service shrank since, and only then a division.
        let rr = self.rr[ci];
        let start = if rr < n {
            rr
        } else if rr == n {
            0
        } else {
            rr % n
        };
        let mut local = None;
        for j in 0..n {
            let k = if start + j >= n { start + j - n } else { start + j };
            let stop = &stops[k];
            if has(stop) {
                if !stop.local {
                    return Some((first, k));
                }
                local = local.or(Some(k));
            }
        }
        local.map(|k| (first, k))
    }

    /// The next decision: the head packet of the tenant with the least virtual time among those
    /// whose packet has a credit to take (of equal times, the first tenant).
    pub fn decide(&mut self) -> Option<Decision> {
        // Most often the tenant with the least virtual time of all that have packets has a
        // credit: it is the decision. If it has none, the others are looked at in turn.
        let mut least: Option<(usize, f64)> = None;
        for (t, (l, &vt)) in self.lanes.iter().zip(&self.vt).enumerate() {
            if l.queued > 0 && least.is_none_or(|(_, v)| vt < v) {
                least = Some((t, vt));
            }
        }
        let (m, _) = least?;
        let (t, lane, k) = match self.lane_for(m) {
            Some((lane, k)) => (m, lane, k),
            None => {
                self.credit_waits += 1;
                let mut best: Option<(usize, usize, usize)> = None;
                for t in 0..self.lanes.len() {
                    if t == m || self.lanes[t].queued == 0 || best.is_some_and(|(b, _, _)| self.vt[t] >= self.vt[b]) {
                        continue;
                    }
                    match self.lane_for(t) {
                        Some((lane, k)) => best = Some((t, lane, k)),
                        None => self.credit_waits += 1,
                    }
                }
                best?
            }
        };
        let mut item = self.queues[lane].pop_front()?;
        self.queued -= 1;
        self.lanes[t].queued -= 1;
        let ci = self.chain[t];
        self.rr[ci] = k + 1;
        self.global_vt = self.vt[t];
        self.vt[t] += item.packet.len() as f64 * self.inv_weight[t];
        item.desc.instance = k as u16;
        item.desc.generation = self.generation[t];
        item.desc.skip = self.skip[t];
        let to = self.first[t * self.instances + k].to;
        if let Some((_, pool)) = to {
            self.credits[pool] -= 1;
            self.decisions += 1;
            self.started[t * 2 + usize::from(self.generation[t] & 1)] += 1;
            if self.panic {
                // The position it runs first.
                item.desc.segment = next_position(item.desc.skip, 0, 64).unwrap_or(0) as u16;
            }
        }
        Some(Decision { to, item })
    }
}

/// The next position at or after `from` that a packet with `skip` does not skip.
fn next_position(skip: u64, from: usize, len: usize) -> Option<usize> {
    (from..len).find(|&p| skip >> (p & 63) & 1 == 0)
}

#[allow(clippy::too_many_arguments)]
fn worker_loop(
    core: usize,
    shared: &Shared,
    pool: &Pool,
    cfg: &Config,
    mut sched: Option<&mut Scheduler>,
    classify: &mut Classify,
    mut ingress: Option<&mut (dyn Ingress + '_)>,
    regions: &mut [Region],
    egress: &mut dyn Egress,
    st: &mut CoreState,
) {
    let chain_lens: Vec<usize> = shared.route.iter().map(|r| r.first().map_or(0, Vec::len)).collect();
    let mut idle = 0u32;
    let mut waiting: Vec<VecDeque<Item>> =
        if cfg.mode == Mode::Panic { (0..shared.regions).map(|_| VecDeque::new()).collect() } else { Vec::new() };
    let mut arrivals = Vec::with_capacity(cfg.batch);
    let mut join = Join::default();
    let mut updates = crate::update::Progress::new(shared.installed.len());
    let mut rounds = 0u32;
    let mut published = Instant::now();
    // The credit lines a refill watches: those other cores give credits back on
    // (`Shared::returned`: by pool and core; this core stores its own after its batches, never
    // during one). None but in `snic` (its pools are chain instances) on the scheduler's core.
    let refill_lines: Vec<usize> = if cfg.mode == Mode::Snic && sched.is_some() && ingress.is_some() {
        (0..shared.returned.len()).filter(|&i| i % shared.cores.max(1) != core).collect()
    } else {
        Vec::new()
    };
    let refills = !refill_lines.is_empty();
    while !shared.stop.load(Ordering::Relaxed) {
        rounds = rounds.wrapping_add(1);
        // In an idle spell, when this round starts (it ends the spell if it finds work).
        let round_start = st.idle_since.map(|_| clock::now());
        if rounds.is_multiple_of(64) {
            let now = clock::now();
            if now.saturating_duration_since(published) >= PUBLISH {
                publish(shared, core, st, sched.as_deref(), region_wrappers(regions), false);
                published = now;
            }
        }
        // A round of the scheduler (core 0): the packets it moved or sent, None on another core.
        // As a refill (`snic`, between two packets of a region's batch here: regions on the
        // other core, their credits back, would otherwise wait a batch of a few µs for more), it
        // runs only when credits have come back on `refill_lines`, and leaves what the batch has
        // finished so far for the batch's own flush (counted once): it sends only what it makes.
        let mut round = |st: &mut CoreState, eg: &mut dyn Egress, refill: bool| -> Option<usize> {
            let (Some(s), Some(ing)) = (sched.as_deref_mut(), ingress.as_deref_mut()) else { return None };
            if refill {
                if !s.credits_back(shared, &refill_lines) {
                    return None;
                }
                s.refills += 1;
                std::mem::swap(&mut st.out, &mut st.out_between);
            }
            let n = schedule(
                s,
                shared,
                pool,
                cfg,
                classify,
                ing,
                &chain_lens,
                &mut waiting,
                &mut arrivals,
                &mut join,
                &mut updates,
                eg,
                st,
            );
            if refill {
                std::mem::swap(&mut st.out, &mut st.out_between);
            }
            Some(n)
        };
        let mut work = round(st, egress, false).unwrap_or(0);
        // In a timed batch, the look at the credit lines is timed too, refill or not: a line
        // the other core wrote makes it wait, and that wait is not the task's.
        let mut refill = |st: &mut CoreState, eg: &mut dyn Egress, step: Beside| -> Duration {
            let timed = match step {
                Beside::Refill { timed } => timed,
                Beside::Ask => {
                    for &i in &refill_lines {
                        if let Some(line) = shared.returned.get(i) {
                            tern_io::prefetch_read(&line.0);
                        }
                    }
                    return Duration::ZERO;
                }
            };
            let t = timed.then(clock::now);
            round(st, eg, true);
            t.map_or(Duration::ZERO, clock::since)
        };
        for r in regions.iter_mut() {
            if shared.launch_waiting[r.id].load(Ordering::Acquire) {
                take_launch(r, shared);
            }
            let between: Option<&mut Between<'_>> = if refills { Some(&mut refill) } else { None };
            work += run_region(r, shared, pool, cfg, egress, st, between);
            // Credits go back as soon as a batch is done, so the scheduler can refill the
            // region while it runs the next.
            for (i, g) in st.give.iter_mut().enumerate() {
                if *g > 0 {
                    st.given[i] += *g;
                    shared.returned[i * shared.cores + core].0.store(st.given[i], Ordering::Release);
                    *g = 0;
                }
            }
        }
        st.store_done(shared, core);
        if work == 0 {
            if idle == 0 {
                // An idle spell begins (its time is not the core's busy time).
                st.idle_since = Some(clock::now());
            }
            idle = idle.saturating_add(1);
            rest(idle);
        } else {
            idle = 0;
            if let (Some(t), Some(end)) = (st.idle_since.take(), round_start) {
                st.idle_ns += end.saturating_duration_since(t).as_nanos() as u64;
            }
        }
    }
    publish(shared, core, st, sched.as_deref(), region_wrappers(regions), true);
}

/// What an idle core does after `idle` empty rounds: spin, then yield, and after a long idle
/// sleep 50 µs at a time (a first packet after a quiet spell waits that long at most).
fn rest(idle: u32) {
    if idle > 1 << 16 {
        std::thread::sleep(Duration::from_micros(50));
    } else if idle > 1024 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// One round of the scheduler on core 0; returns the packets it moved or sent.
#[allow(clippy::too_many_arguments)]
fn schedule(
    s: &mut Scheduler,
    shared: &Shared,
    pool: &Pool,
    cfg: &Config,
    classify: &mut Classify,
    ingress: &mut dyn Ingress,
    chain_lens: &[usize],
    waiting: &mut [VecDeque<Item>],
    arrivals: &mut Vec<Arrival>,
    join: &mut Join,
    updates: &mut crate::update::Progress,
    egress: &mut dyn Egress,
    st: &mut CoreState,
) -> usize {
    let t0 = clock::now();
    // One round in TIME_ONE_IN is timed (two more clock readings); the rest are not.
    let timed = s.rounds.is_multiple_of(TIME_ONE_IN);
    s.rounds += 1;
    let decisions_before = s.decisions;
    let changed = shared.active_changed.load(Ordering::Acquire);
    if changed != s.active_seen {
        s.active_seen = changed;
        for (ci, a) in shared.active.iter().enumerate() {
            s.set_active(ci, a.load(Ordering::Relaxed));
        }
    }
    updates.step(s, shared);
    let changed = shared.limits_changed.load(Ordering::Acquire);
    if changed != s.limits_seen {
        s.limits_seen = changed;
        for (t, l) in shared.limits.iter().enumerate() {
            let want = decode_limit(l.load(Ordering::Relaxed));
            if want != s.limit(t) {
                s.set_limit(t, want);
            }
        }
    }
    for (i, r) in shared.returned.iter().enumerate() {
        let given = r.0.load(Ordering::Acquire);
        let seen = s.returned_seen.get(i).copied().unwrap_or(given);
        if given > seen {
            s.returned_seen[i] = given;
            s.credit(i / shared.cores, given - seen);
        }
    }
    let mut moved = 0;
    // Snic: forks' copies back from their branches, joined.
    if cfg.mode == Mode::Snic && !st.back_in.is_empty() {
        let now = t0;
        for c in 0..st.back_in.len() {
            while let Ok(item) = st.back_in[c].pop() {
                let t = usize::from(item.desc.tenant);
                let Some(f) = shared.forks.get(t).and_then(Option::as_ref) else {
                    st.drop_item(pool, item, reason::NO_TASK);
                    continue;
                };
                let (ci, k) = (usize::from(item.desc.chain), usize::from(item.desc.instance));
                let credit_pool = ci * shared.route[ci].len() + k;
                match join.arrive(item, f.branches.len(), pool, now) {
                    None => {}
                    Some(JoinOutcome::On(mut item)) => {
                        item.desc.branch = NO_BRANCH;
                        item.desc.skip = s.skip_of(t, item.desc.generation);
                        let seg = f.branches.last().map_or(0, |b| b.end);
                        item.desc.segment = seg as u16;
                        if seg < shared.route[ci][k].len() {
                            if let Err(item) = st.links.push(shared.route[ci][k][seg], item) {
                                s.credit(credit_pool, 1);
                                st.count_done(&item.desc);
                                st.drop_item(pool, item, reason::RING_FULL);
                            }
                        } else {
                            s.credit(credit_pool, 1);
                            st.count_done(&item.desc);
                            st.out.push(item);
                        }
                    }
                    Some(JoinOutcome::Dropped(d, reason)) => {
                        s.credit(credit_pool, 1);
                        st.count_done(&d);
                        *st.tenants[usize::from(d.tenant)].drops.entry(reason).or_default() += 1;
                    }
                    Some(JoinOutcome::Late(d)) => {
                        *st.tenants[usize::from(d.tenant)].drops.entry(reason::SYNC_LATE).or_default() += 1;
                    }
                }
            }
        }
        for d in join.sweep(now, pool) {
            let (ci, k) = (usize::from(d.chain), usize::from(d.instance));
            s.credit(ci * shared.route[ci].len() + k, 1);
            st.count_done(&d);
            *st.tenants[usize::from(d.tenant)].drops.entry(reason::SYNC_TIMEOUT).or_default() += 1;
        }
    }
    // Panic: packets back from a task go on to the next, or leave.
    if cfg.mode == Mode::Panic {
        for c in 0..st.back_in.len() {
            while let Ok(mut item) = st.back_in[c].pop() {
                let (ci, k) = (usize::from(item.desc.chain), usize::from(item.desc.instance));
                match next_position(item.desc.skip, usize::from(item.desc.segment), chain_lens[ci]) {
                    None => st.out.push(item),
                    Some(p) => {
                        item.desc.segment = p as u16;
                        waiting[shared.route[ci][k][p]].push_back(item);
                    }
                }
            }
        }
        for (region, w) in waiting.iter_mut().enumerate() {
            while s.credits[region] > 0 {
                let Some(item) = w.pop_front() else { break };
                match st.links.push(region, item) {
                    Ok(()) => {
                        s.credits[region] -= 1;
                        s.decisions += 1;
                        moved += 1;
                    }
                    Err(item) => {
                        w.push_front(item);
                        break;
                    }
                }
            }
        }
    }
    // The port's time (receiving) is not the scheduler's.
    let mut t1 = t0;
    if timed {
        t1 = clock::now();
        s.ns += (t1 - t0).as_nanos() as u64;
    }
    let room = s.room().min(cfg.batch);
    if room > 0 {
        ingress.recv(t0, room, arrivals);
        if timed {
            t1 = clock::now();
        }
        let took = !arrivals.is_empty();
        for a in arrivals.drain(..) {
            match s.admit(a, classify) {
                Ok(t) => st.tenants[t].packets_in += 1,
                Err((t, packet, reason)) => {
                    if let Some(ts) = st.tenants.get_mut(t) {
                        ts.packets_in += 1;
                        *ts.drops.entry(reason).or_default() += 1;
                    }
                    pool.put(packet);
                }
            }
        }
        if took {
            // One writer: stores of the running totals.
            for (t, [p, b]) in shared.offered.iter().enumerate() {
                let (np, nb) = s.offered(t);
                if p.0.load(Ordering::Relaxed) != np {
                    p.0.store(np, Ordering::Relaxed);
                    b.0.store(nb, Ordering::Relaxed);
                }
            }
        }
    }
    // Panic: packets between tasks wait in the scheduler's buffer for the next task's credit;
    // it holds as many as the regions' credits, and while it is full no new packet enters a
    // chain (they wait in their tenants' queues) — else a fast first task would fill it without
    // bound.
    let buffered = waiting.iter().map(VecDeque::len).sum::<usize>() as u64;
    s.buffer_peak = s.buffer_peak.max(buffered);
    let admit = cfg.mode != Mode::Panic || buffered < (waiting.len() * cfg.credits.max(1) as usize) as u64;
    for _ in 0..if admit { cfg.batch } else { 0 } {
        let Some(d) = s.decide() else { break };
        if d.to.is_some() {
            // Before the packet can reach a region: a count of those that left never runs
            // ahead of this one (the ring's release orders the store).
            let i = usize::from(d.item.desc.tenant) * 2 + usize::from(d.item.desc.generation & 1);
            if let (Some(l), Some(&n)) = (shared.started.get(i), s.started.get(i)) {
                l.0.store(n, Ordering::Relaxed);
            }
        }
        // A parallel tenant whose fork comes first: copied here, into its branches.
        if let (Some(_), Some(f)) = (d.to, shared.forks.get(usize::from(d.item.desc.tenant)).and_then(Option::as_ref))
            && f.branches.first().is_some_and(|b| b.start == 0)
        {
            fork_copies(st, shared, pool, d.item, f);
            moved += 1;
            continue;
        }
        match d.to {
            None => st.out.push(d.item),
            Some((region, credit_pool)) => match st.links.push(region, d.item) {
                Ok(()) => moved += 1,
                Err(item) => {
                    s.credit(credit_pool, 1);
                    st.count_done(&item.desc);
                    st.drop_item(pool, item, reason::RING_FULL);
                }
            },
        }
    }
    st.links.flush();
    if timed {
        s.ns += clock::since(t1).as_nanos() as u64;
        s.timed_decisions += s.decisions - decisions_before;
    }
    let n = st.out.len();
    if n > 0 {
        for item in &st.out {
            st.tenants[usize::from(item.desc.tenant)].packets_out += 1;
        }
        egress.send(t0, &mut st.out);
    }
    moved + n
}

/// Swaps a waiting launch's instances into `r` (between its batches) and takes it out of
/// service for the launch's PR time. While the control plane holds the launch's or the swaps'
/// lock, it leaves them for a later batch.
fn take_launch(r: &mut Region, shared: &Shared) {
    let (Some(mut launch), Some(mut swaps)) = (try_lock(&shared.launch[r.id]), try_lock(&shared.swaps[r.id])) else {
        return;
    };
    // Cleared under the locks: a launch or swap sent after this sets it again.
    shared.launch_waiting[r.id].store(false, Ordering::Release);
    let launch = launch.take();
    // Drained into a vector of this core's (the control plane's keeps its buffer).
    let swaps: Vec<Swap> = swaps.drain(..).collect();
    if let Some(l) = launch {
        for (ci, k, si, mut ws) in l.segments {
            if let Some(seg) = r.segments.iter_mut().find(|s| (s.0, s.1, s.2) == (ci, k, si)) {
                // The tenants' generations go on (and a previous generation's tasks, for its
                // packets still in flight).
                for (new, old) in ws.iter_mut().zip(seg.3.iter_mut()) {
                    new.generation.clone_from(&old.generation);
                    new.previous = std::mem::take(&mut old.previous);
                    new.look_at_payload();
                }
                seg.3 = ws;
            }
        }
        r.dark_until = (!l.pr.is_zero()).then(|| Instant::now() + l.pr);
        shared.launches[r.id].fetch_add(1, Ordering::Relaxed);
    }
    for swap in swaps {
        match swap {
            Swap::Install { tenant, generation, segments } => {
                for (ci, k, si, tasks) in segments {
                    if let Some(seg) = r.segments.iter_mut().find(|s| (s.0, s.1, s.2) == (ci, k, si)) {
                        for (w, task) in seg.3.iter_mut().zip(tasks) {
                            w.install(tenant, generation, task);
                        }
                    }
                }
                shared.launches[r.id].fetch_add(1, Ordering::Relaxed);
                if let Some(n) = shared.installed.get(tenant) {
                    n.fetch_add(1, Ordering::Release);
                }
            }
            Swap::Retire { tenant } => {
                for seg in &mut r.segments {
                    for w in &mut seg.3 {
                        w.retire(tenant);
                    }
                }
            }
        }
    }
    r.pace = region_pace(&r.segments);
}

/// The most packets a region takes at once: half its chain's credits (the other half is being
/// refilled meanwhile; with all of them in one batch, the region would wait for the scheduler
/// every batch), at most a batch.
fn region_take(cfg: &Config) -> usize {
    cfg.batch.min((cfg.credits as usize / 2).max(1))
}

/// The scheduler's refill, run on its core between two packets of a region's batch there: given
/// whether the batch is timed, the time it took, the look at the credits included (zero if the
/// batch is not timed).
type Between<'a> = dyn FnMut(&mut CoreState, &mut dyn Egress, Beside) -> Duration + 'a;

/// Asks for the lines of `bytes`, up to [`ASK_BYTES`] of them (a full-size frame's).
fn ask_bytes(bytes: &[u8]) {
    tern_io::prefetch_read_lines(bytes.as_ptr(), bytes.len().min(ASK_BYTES));
}

/// The most bytes of a packet [`run_batch`] asks for ahead of a task that reads its payload.
const ASK_BYTES: usize = 2048;

/// Asks for the lines a region reads as its next batch starts, from each of its `inputs` this
/// batch took packets from (`next_slot` not 0): the ring's indices (the whole
/// `rtrb::RingBuffer`, which holds them inline; the producer's was written by another core) and
/// the `take` slots after the last read (past the buffer's end when the ring wraps, a wasted
/// ask). Asked a quarter of a batch early, a line another core wrote comes while the tasks run
/// rather than when the next batch waits for it (docs/chain.md, "The data path").
fn ask_ahead(inputs: &[rtrb::Consumer<Item>], next_slot: &[usize], take: usize) {
    for (input, &next) in inputs.iter().zip(next_slot) {
        if next == 0 {
            continue;
        }
        let ring = input.buffer();
        tern_io::prefetch_read_lines(std::ptr::from_ref(ring).cast(), std::mem::size_of_val(ring));
        // An item is one line.
        tern_io::prefetch_read_lines(next as *const u8, take * std::mem::size_of::<Item>());
    }
}

/// One batch of a region; returns the packets it took. `between`, on the scheduler's core, runs
/// between the batch's packets.
fn run_region(
    r: &mut Region,
    shared: &Shared,
    pool: &Pool,
    cfg: &Config,
    egress: &mut dyn Egress,
    st: &mut CoreState,
    mut between: Option<&mut Between<'_>>,
) -> usize {
    st.batch.clear();
    // Out of service (being reconfigured): its packets wait in its rings, within its chains'
    // credits; the core's other regions go on.
    if let Some(t) = r.dark_until {
        if clock::now() < t {
            return 0;
        }
        r.dark_until = None;
    }
    let take = region_take(cfg);
    if let Some(rate) = r.pace {
        // Its tasks' caps: bytes go through at the slowest one's rate, as a board's region
        // carries at most its task's bandwidth; the core is free meanwhile.
        let now = clock::now();
        let dt = r.refilled.map_or(0.0, |t| now.saturating_duration_since(t).as_nanos() as f64);
        r.refilled = Some(now);
        r.tokens = (r.tokens + dt * rate).min(PACE_BURST_BYTES);
        if r.tokens <= 0.0 {
            return 0;
        }
    }
    let n_in = r.inputs.len();
    for j in 0..n_in {
        let at = (r.turn + j) % n_in;
        let input = &mut r.inputs[at];
        // What is there, up to the batch, in one go: the ring's head moves once.
        let n = input.slots().min(take - st.batch.len());
        // Asked ahead for only if this batch took from it (a ring idle now likely stays so).
        r.next_slot[at] = 0;
        if n > 0
            && let Ok(chunk) = input.read_chunk(n)
        {
            let (a, b) = chunk.as_slices();
            if let Some(last) = b.last().or(a.last()) {
                r.next_slot[at] = std::ptr::from_ref(last).wrapping_add(1) as usize;
            }
            st.batch.extend(chunk);
        }
    }
    r.turn = r.turn.wrapping_add(1);
    let n = st.batch.len();
    if n == 0 {
        return 0;
    }
    if r.pace.is_some() {
        r.tokens -= st.batch.iter().map(|i| i.packet.len() as f64).sum::<f64>();
    }
    st.visits += n as u64;
    let now = clock::now();
    // Items of one segment are run together; a region holding several segments sorts them.
    if r.segments.len() > 1 {
        st.batch.sort_by_key(|i| (i.desc.chain, i.desc.instance, i.desc.segment));
    }
    let mut items = std::mem::take(&mut st.batch);
    let mut first_group = true;
    let (inputs, next_slot) = (&r.inputs, &r.next_slot);
    let ahead = || ask_ahead(inputs, next_slot, take);
    while !items.is_empty() {
        let d = items[0].desc;
        let end = items
            .iter()
            .take_while(|i| (i.desc.chain, i.desc.instance, i.desc.segment) == (d.chain, d.instance, d.segment))
            .count();
        let key = (usize::from(d.chain), usize::from(d.instance), usize::from(d.segment));
        let seg = r.segments.iter_mut().find(|s| (s.0, s.1, s.2) == key);
        match seg {
            Some(seg) => {
                // The batch's first group starts at `now`; a later one at its own reading.
                let start = if first_group { now } else { clock::now() };
                match between.as_deref_mut() {
                    Some(b) => {
                        // Held apart while the batch runs, so that `between` can have the
                        // core's state.
                        let mut emitted = std::mem::take(&mut st.emitted);
                        let mut emitted_desc = std::mem::take(&mut st.emitted_desc);
                        let mut fates = std::mem::take(&mut st.fates);
                        let mut cx = Cx { now: start, pool, emitted: &mut emitted, paced: true, port: 0 };
                        let mut hook = |step| b(st, &mut *egress, step);
                        run_batch(
                            &mut seg.3,
                            &mut items[..end],
                            &mut fates,
                            &mut cx,
                            &mut emitted_desc,
                            Some(&mut hook),
                            Some(&ahead),
                        );
                        st.emitted = emitted;
                        st.emitted_desc = emitted_desc;
                        st.fates = fates;
                    }
                    None => {
                        let mut cx = Cx { now: start, pool, emitted: &mut st.emitted, paced: true, port: 0 };
                        run_batch(
                            &mut seg.3,
                            &mut items[..end],
                            &mut st.fates,
                            &mut cx,
                            &mut st.emitted_desc,
                            None,
                            Some(&ahead),
                        );
                    }
                }
            }
            None => {
                st.fates.clear();
                st.fates.resize(end, Fate::Dropped(reason::NO_REGION));
            }
        }
        let fates = std::mem::take(&mut st.fates);
        for (item, fate) in items.drain(..end).zip(fates.iter()) {
            let (ci, k) = (usize::from(item.desc.chain), usize::from(item.desc.instance));
            let credit_pool = match cfg.mode {
                Mode::Snic => ci * shared.route[ci].len() + k,
                _ => shared.route[ci][k][usize::from(item.desc.segment)],
            };
            let fork = shared.forks.get(usize::from(item.desc.tenant)).and_then(Option::as_ref);
            if let Some(f) = fork {
                let seg = usize::from(item.desc.segment);
                if item.desc.branch != NO_BRANCH {
                    // A copy: on through its branch, then (or if dropped) back to the join. It
                    // holds no credit.
                    let b = usize::from(item.desc.branch);
                    let mut item = item;
                    match fate {
                        Fate::Alive if seg + 1 < f.branches[b].end => {
                            item.desc.segment += 1;
                            let next = shared.route[ci][k][usize::from(item.desc.segment)];
                            if let Err(item) = st.links.push(next, item) {
                                st.drop_item(pool, item, reason::RING_FULL);
                            }
                            continue;
                        }
                        Fate::Alive => {}
                        Fate::Dropped(r) => item.desc.set_dropped(Some(r)),
                        Fate::Replied => {
                            // Its answer leaves; the join hears the branch went no further.
                            let mut mark = Item { packet: pool.packet(), desc: item.desc };
                            mark.desc.set_dropped(Some("answered_in_branch"));
                            finish(st, pool, item, Fate::Replied);
                            item = mark;
                        }
                    }
                    to_join(st, pool, item);
                    continue;
                }
                if *fate == Fate::Alive && seg + 1 == f.branches[0].start {
                    fork_copies(st, shared, pool, item, f);
                    continue;
                }
            }
            match fate {
                Fate::Alive if cfg.mode == Mode::Panic => {
                    let mut item = item;
                    item.desc.segment += 1;
                    st.give[credit_pool] += 1;
                    let full = match st.links.back.as_mut() {
                        Some(b) => b.push(item).err(),
                        None => Some(item),
                    };
                    if let Some(item) = full {
                        st.drop_item(pool, item, reason::RING_FULL);
                    }
                    continue;
                }
                Fate::Alive if usize::from(item.desc.segment) + 1 < shared.route[ci][k].len() => {
                    let mut item = item;
                    item.desc.segment += 1;
                    let next = shared.route[ci][k][usize::from(item.desc.segment)];
                    if let Err(item) = st.links.push(next, item) {
                        st.credit_back(credit_pool, &item.desc);
                        st.drop_item(pool, item, reason::RING_FULL);
                    }
                    continue;
                }
                _ => {
                    let d = item.desc;
                    finish(st, pool, item, *fate);
                    st.credit_back(credit_pool, &d);
                }
            }
        }
        st.fates = fates;
        first_group = false;
    }
    st.batch = items;
    st.links.flush();
    flush(st, egress, now);
    n
}

/// Copies a packet at its tenant's fork, one copy a branch (the original the last), each into
/// its branch's first region; the copies share a new token for the join.
fn fork_copies(st: &mut CoreState, shared: &Shared, pool: &Pool, item: Item, f: &crate::plan::Fork) {
    let (ci, k) = (usize::from(item.desc.chain), usize::from(item.desc.instance));
    st.token = (st.token & 0xff00_0000) | (st.token.wrapping_add(1) & 0x00ff_ffff);
    let token = st.token;
    let n = f.branches.len();
    let mut original = Some(item);
    for b in 0..n {
        let Some(orig) = original.as_ref() else { return };
        let mut copy = if b + 1 == n {
            match original.take() {
                Some(i) => i,
                None => return,
            }
        } else {
            Item { packet: pool.clone_packet(&orig.packet), desc: orig.desc }
        };
        copy.desc.branch = b as u8;
        copy.desc.token = token;
        copy.desc.skip = f.skips[b];
        copy.desc.segment = f.branches[b].start as u16;
        let region = shared.route[ci][k][f.branches[b].start];
        if let Err(copy) = st.links.push(region, copy) {
            // The join will not see this copy: the packet times out there.
            st.drop_item(pool, copy, reason::RING_FULL);
        }
    }
}

/// Sends a fork's copy back to the join (core 0).
fn to_join(st: &mut CoreState, pool: &Pool, item: Item) {
    let full = match st.links.back.as_mut() {
        Some(b) => b.push(item).err(),
        None => Some(item),
    };
    if let Some(item) = full {
        st.drop_item(pool, item, reason::RING_FULL);
    }
}

/// The join (core 0): a fork's copies, gathered by token.
#[derive(Default)]
struct Join {
    waiting: HashMap<u32, Joining>,
    /// Tokens given up on (timed out), so late copies are not taken for new forks.
    expired: VecDeque<u32>,
    last_sweep: Option<Instant>,
}

struct Joining {
    arrived: usize,
    /// The first copy's descriptor (its tenant, chain and instance).
    desc: Desc,
    /// The first branch's copy, whose bytes go on.
    keep: Option<Item>,
    dropped: Option<&'static str>,
    born: Instant,
}

/// What the join made of a copy.
enum JoinOutcome {
    /// Every copy is in: the packet goes on (the first branch's bytes).
    On(Item),
    /// Every copy is in and a branch dropped it (this reason): the packet is dropped.
    Dropped(Desc, &'static str),
    /// A copy of a fork given up on (timed out): dropped.
    Late(Desc),
}

impl Join {
    /// Takes a copy back; `None` while the fork's other copies are out.
    fn arrive(&mut self, item: Item, branches: usize, pool: &Pool, now: Instant) -> Option<JoinOutcome> {
        let token = item.desc.token;
        if self.expired.contains(&token) {
            let d = item.desc;
            pool.put(item.packet);
            return Some(JoinOutcome::Late(d));
        }
        let e = self.waiting.entry(token).or_insert(Joining {
            arrived: 0,
            desc: item.desc,
            keep: None,
            dropped: None,
            born: now,
        });
        e.arrived += 1;
        if let Some(r) = item.desc.dropped() {
            e.dropped.get_or_insert(r);
            pool.put(item.packet);
        } else if item.desc.branch == 0 {
            e.keep = Some(item);
        } else {
            pool.put(item.packet);
        }
        if e.arrived < branches {
            return None;
        }
        let e = self.waiting.remove(&token)?;
        match (e.dropped, e.keep) {
            (None, Some(i)) => Some(JoinOutcome::On(i)),
            (r, keep) => {
                if let Some(i) = keep {
                    pool.put(i.packet);
                }
                Some(JoinOutcome::Dropped(e.desc, r.unwrap_or(reason::SYNC_LOST)))
            }
        }
    }

    /// The forks whose copies have waited past [`SYNC_TIMEOUT`], given up on (their first
    /// copy's descriptors).
    fn sweep(&mut self, now: Instant, pool: &Pool) -> Vec<Desc> {
        if self.waiting.is_empty() || self.last_sweep.is_some_and(|t| now.duration_since(t) < Duration::from_millis(1))
        {
            return Vec::new();
        }
        self.last_sweep = Some(now);
        let old: Vec<u32> =
            self.waiting.iter().filter(|(_, e)| now.duration_since(e.born) >= SYNC_TIMEOUT).map(|(t, _)| *t).collect();
        let mut out = Vec::new();
        for t in old {
            if let Some(e) = self.waiting.remove(&t) {
                if let Some(i) = e.keep {
                    pool.put(i.packet);
                }
                out.push(e.desc);
                self.expired.push_back(t);
                if self.expired.len() > 4096 {
                    self.expired.pop_front();
                }
            }
        }
        out
    }
}

/// Sends what a core has to send: finished packets, answers, and tasks' own packets.
fn flush(st: &mut CoreState, egress: &mut dyn Egress, now: Instant) {
    for (p, desc) in st.emitted.drain(..).zip(st.emitted_desc.drain(..)) {
        if let Some(t) = st.tenants.get_mut(usize::from(desc.tenant)) {
            t.replies += 1;
        }
        st.out.push(Item { packet: p, desc });
    }
    if !st.out.is_empty() {
        egress.send(now, &mut st.out);
    }
}

#[allow(clippy::too_many_arguments)]
fn rtc_loop(
    core: usize,
    shared: &Shared,
    pool: &Pool,
    cfg: &Config,
    classify: &mut Classify,
    ingress: Option<&mut (dyn Ingress + '_)>,
    chains: &mut [Vec<Wrapper>],
    egress: &mut dyn Egress,
    st: &mut CoreState,
) {
    let Some(ing) = ingress else { return };
    let mut arrivals = Vec::with_capacity(cfg.batch);
    let mut idle = 0u32;
    let mut published = Instant::now();
    let chain_wrappers = |chains: &[Vec<Wrapper>]| {
        let mut out = Vec::new();
        for (ci, ws) in chains.iter().enumerate() {
            push_wrapper_stats(&mut out, None, ci, core, ws);
        }
        out
    };
    while !shared.stop.load(Ordering::Relaxed) {
        let now = clock::now();
        if now.duration_since(published) >= PUBLISH {
            publish(shared, core, st, None, chain_wrappers(chains), false);
            published = now;
        }
        ing.recv(now, cfg.batch, &mut arrivals);
        if arrivals.is_empty() {
            idle = idle.saturating_add(1);
            rest(idle);
            continue;
        }
        idle = 0;
        st.batch.clear();
        for a in arrivals.drain(..) {
            match classify.tenant(a.packet.data()) {
                Ok((t, _)) => {
                    st.tenants[t].packets_in += 1;
                    let (chain, skip) = (shared.placements[t].0, shared.placements[t].1.load(Ordering::Relaxed));
                    let desc = Desc::new(t, chain, skip, a.at, a.port);
                    st.batch.push(Item { packet: a.packet, desc });
                }
                Err(r) => {
                    if r == "malformed" {
                        st.malformed += 1;
                    } else {
                        st.unknown_tenant += 1;
                    }
                    pool.put(a.packet);
                }
            }
        }
        run_rtc_batch(chains, pool, st, clock::now());
        flush(st, egress, now);
    }
    publish(shared, core, st, None, chain_wrappers(chains), true);
}

/// Runs a batch through whole chains, packets of one chain together.
fn run_rtc_batch(chains: &mut [Vec<Wrapper>], pool: &Pool, st: &mut CoreState, now: Instant) {
    let mut items = std::mem::take(&mut st.batch);
    items.sort_by_key(|i| i.desc.chain);
    while !items.is_empty() {
        let ci = items[0].desc.chain;
        let end = items.iter().take_while(|i| i.desc.chain == ci).count();
        if let Some(ws) = chains.get_mut(usize::from(ci)) {
            let mut cx = Cx { now, pool, emitted: &mut st.emitted, paced: false, port: 0 };
            run_batch(ws, &mut items[..end], &mut st.fates, &mut cx, &mut st.emitted_desc, None, None);
        } else {
            st.fates.clear();
            st.fates.resize(end, Fate::Dropped(reason::NO_TASK));
        }
        let fates = std::mem::take(&mut st.fates);
        for (item, fate) in items.drain(..end).zip(fates.iter()) {
            finish(st, pool, item, *fate);
        }
        st.fates = fates;
    }
    st.batch = items;
}

/// A packet done with its chain: out, answered, or dropped.
fn finish(st: &mut CoreState, pool: &Pool, mut item: Item, fate: Fate) {
    match fate {
        Fate::Alive => {
            st.tenants[usize::from(item.desc.tenant)].packets_out += 1;
            st.out.push(item);
        }
        Fate::Replied => {
            st.tenants[usize::from(item.desc.tenant)].replies += 1;
            item.desc.set_reply(true);
            st.out.push(item);
        }
        Fate::Dropped(reason) => st.drop_item(pool, item, reason),
    }
}

pub use tern_io::spin_for;

/// An ingress of packets given in advance, every one arrived when first asked for (tests,
/// `tern chain trace`).
#[derive(Debug, Default)]
pub struct VecIngress {
    packets: VecDeque<(Packet, u8)>,
}

impl VecIngress {
    /// Of `packets`, in order, all on port 0.
    pub fn new(packets: impl IntoIterator<Item = Packet>) -> VecIngress {
        VecIngress::on_ports(packets.into_iter().map(|p| (p, 0)))
    }

    /// Of `packets`, in order, each on its port.
    pub fn on_ports(packets: impl IntoIterator<Item = (Packet, u8)>) -> VecIngress {
        VecIngress { packets: packets.into_iter().collect() }
    }
}

impl Ingress for VecIngress {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        for _ in 0..max {
            let Some((packet, port)) = self.packets.pop_front() else { break };
            out.push(Arrival { packet, at: now, port });
        }
    }
}

/// What left a runtime through a [`Collect`]: each packet's descriptor and bytes.
pub type Collected = Arc<std::sync::Mutex<Vec<(Desc, Vec<u8>)>>>;

/// An egress that keeps a copy of what leaves and stops the runtime once `expect` packets have
/// (tests, `tern chain trace`).
#[derive(Debug)]
pub struct Collect {
    pool: Pool,
    got: Collected,
    expect: usize,
    stopper: Stopper,
}

impl Collect {
    /// Keeps into `got`; stops `stopper` at `expect` packets kept (all cores together).
    pub fn new(pool: &Pool, got: &Collected, expect: usize, stopper: &Stopper) -> Collect {
        Collect { pool: pool.clone(), got: got.clone(), expect, stopper: stopper.clone() }
    }
}

impl Egress for Collect {
    fn send(&mut self, _: Instant, items: &mut Vec<Item>) {
        let mut got = self.got.lock().unwrap_or_else(|e| e.into_inner());
        for item in items.drain(..) {
            got.push((item.desc, item.packet.data().to_vec()));
            self.pool.put(item.packet);
        }
        if got.len() >= self.expect {
            self.stopper.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On the scheduler's core a batch looks at the credits once a packet's worth of the chain
    /// (as many runs of a task as it has tasks): 4 tasks × 4 packets look 4 times in 16 runs;
    /// 3 tasks × 2 packets twice; one task × 4 packets after each run. After every other run it
    /// asks for the lines; and once a batch, on any core, the ring's next lines are asked for.
    /// Every packet runs every task either way.
    #[test]
    fn a_batch_looks_at_the_credits_once_a_packet() {
        for (len, want, asks) in [(4, 4, 12), (1, 4, 0), (3, 2, 4)] {
            let tenants = vec![crate::bench::dummy_chain(len, 0)];
            let area = |_: &crate::tenant::TaskSpec| Ok(1);
            let plan = crate::plan::plan(&tenants, &area, 8, 1_000_000).unwrap();
            let mut keys = crate::task::Keys::default();
            let mut factory = |t: usize, n: usize| crate::task::build(&tenants[t].tasks[n], &mut keys);
            let mut ws = build_chain(&plan, 0, 1, &mut factory, (0, 1)).unwrap();
            let pool = Pool::new(8, 256);
            let packets = if len == 3 { 2 } else { 4 };
            let mut items: Vec<Item> = (0..packets)
                .map(|_| Item { packet: pool.packet(), desc: Desc::new(0, 0, 0, Instant::now(), 0) })
                .collect();
            let (mut fates, mut emitted, mut emitted_desc) = (Vec::new(), Vec::new(), Vec::new());
            let mut cx = Cx { now: Instant::now(), pool: &pool, emitted: &mut emitted, paced: true, port: 0 };
            let (mut calls, mut asked) = (0, 0);
            let mut hook = |step| {
                match step {
                    Beside::Refill { .. } => calls += 1,
                    Beside::Ask => asked += 1,
                }
                Duration::ZERO
            };
            let ahead = std::cell::Cell::new(0);
            let count = || ahead.set(ahead.get() + 1);
            run_batch(&mut ws, &mut items, &mut fates, &mut cx, &mut emitted_desc, Some(&mut hook), Some(&count));
            assert_eq!(calls, want, "{len} tasks");
            assert_eq!(asked, asks, "{len} tasks");
            assert_eq!(ahead.get(), 1, "{len} tasks");
            assert!(ws.iter().all(|w| w.packets == packets as u64), "{len} tasks");
            assert!(fates.iter().all(|f| *f == Fate::Alive));
        }
    }

    /// A wrapper knows whether a task of either generation reads packets' payload, as a
    /// hitless update installs and retires them: a dummy's does not, an AES task's does, and
    /// it still does while the AES task is the previous generation's.
    #[test]
    fn a_wrapper_keeps_track_of_a_payload_reading_task_across_updates() {
        let tenants = vec![crate::bench::dummy_chain(1, 0)];
        let area = |_: &crate::tenant::TaskSpec| Ok(1);
        let plan = crate::plan::plan(&tenants, &area, 8, 1_000_000).unwrap();
        let mut keys = crate::task::Keys::default();
        let mut factory = |t: usize, n: usize| crate::task::build(&tenants[t].tasks[n], &mut keys);
        let mut ws = build_chain(&plan, 0, 1, &mut factory, (0, 1)).unwrap();
        let w = &mut ws[0];
        assert!(!w.payload);
        let key = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
        let aes = crate::tenant::Tenant::parse(&format!(
            "tenant = \"t\"\ndag = \"x\"\n[nt.x]\nkind = \"aes\"\nkey = \"{key}\""
        ))
        .unwrap();
        let cipher = crate::task::build(&aes.tasks[0], &mut keys).unwrap();
        w.install(0, 1, Some(cipher));
        assert!(w.payload);
        let dummy = crate::task::build(&tenants[0].tasks[0], &mut keys).unwrap();
        w.install(0, 2, Some(dummy));
        assert!(w.payload, "the cipher is the previous generation's");
        w.retire(0);
        assert!(!w.payload);
    }

    /// A descriptor's packed fields: the reply mark and the drop reason change apart; a
    /// reason comes back as given (the same code each time); an arrival before the epoch or
    /// long after it comes back to the nanosecond.
    #[test]
    fn descriptor_flags_reasons_and_arrival_round_trip() {
        let now = Instant::now();
        let mut d = Desc::new(3, 1, 0b101, now, 2);
        assert_eq!((d.reply(), d.dropped(), d.arrived()), (false, None, now));
        d.set_reply(true);
        d.set_dropped(Some("fw_denied"));
        assert_eq!((d.reply(), d.dropped()), (true, Some("fw_denied")));
        d.set_reply(false);
        assert_eq!((d.reply(), d.dropped()), (false, Some("fw_denied")));
        let code = d.flags;
        d.set_dropped(Some(reason::SYNC_LATE));
        d.set_dropped(Some("fw_denied"));
        assert_eq!(d.flags, code, "one code a reason");
        d.set_dropped(None);
        assert_eq!((d.reply(), d.dropped()), (false, None));
        assert_eq!((d.tenant, d.chain, d.skip, d.port, d.branch), (3, 1, 0b101, 2, NO_BRANCH));
        let e = epoch();
        for at in [e.checked_sub(Duration::from_millis(5)).unwrap_or(e), e + Duration::from_secs(86_400 * 365)] {
            assert_eq!(Desc::new(0, 0, 0, at, 0).arrived(), at);
        }
    }

    /// The data path's lock never waits: held elsewhere, none; poisoned, the value anyway.
    #[test]
    fn try_lock_never_waits() {
        let m = std::sync::Arc::new(std::sync::Mutex::new(5));
        {
            let _held = m.lock().unwrap();
            assert!(try_lock(&m).is_none());
        }
        assert_eq!(try_lock(&m).map(|g| *g), Some(5));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poisons the lock");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(try_lock(&m).map(|g| *g), Some(5));
    }

    fn item(pool: &Pool, n: u8) -> Item {
        let mut p = pool.packet();
        p.extend_from_slice(&[n]).unwrap();
        Item { packet: p, desc: Desc::new(0, 0, 0, Instant::now(), 0) }
    }

    /// Staged packets reach the ring in order, a burst at once without a flush, the rest at
    /// the flush; a push the ring has no room for is refused and handed back, and none is lost.
    #[test]
    fn outbox_bursts_in_order_and_refuses_beyond_the_ring() {
        let pool = Pool::new(64, 64);
        let (p, mut c) = rtrb::RingBuffer::new(6);
        let mut o = Outbox::new(p, 4);
        for n in 0..3 {
            assert!(o.push(item(&pool, n)).is_ok());
        }
        assert_eq!(c.slots(), 0, "below a burst: staged");
        assert!(o.push(item(&pool, 3)).is_ok());
        assert_eq!(c.slots(), 4, "a burst goes in at once");
        assert!(o.push(item(&pool, 4)).is_ok());
        assert!(o.push(item(&pool, 5)).is_ok());
        let refused = o.push(item(&pool, 6)).expect_err("the ring holds 6");
        assert_eq!(refused.packet.data(), [6]);
        o.flush();
        let got: Vec<u8> = std::iter::from_fn(|| c.pop().ok()).map(|i| i.packet.data()[0]).collect();
        assert_eq!(got, [0, 1, 2, 3, 4, 5]);
        // Room again once the consumer took them.
        assert!(o.push(item(&pool, 7)).is_ok());
        o.flush();
        assert_eq!(c.pop().map(|i| i.packet.data()[0]).ok(), Some(7));
    }
}
