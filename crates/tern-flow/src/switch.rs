//! The accelerated switch: the OFU pipeline in front, the slow path behind it, and the caching
//! policy between them — the policy the paper leaves open (§4.3), made concrete:
//!
//! - **What is cached.** Each slow-path decision is installed as an exact 5-tuple rule in the
//!   EM OFU and/or as a destination-prefix rule in the LPM OFU ([`CacheMode`]), but only where the
//!   slow path says that rule decides every packet it will match the same way ([`CacheHint`]).
//!   Denials are cached too (as `drop` rules); TTL expiry and missing routes are not.
//! - **Flow limit.** At most `flow_limit` cached rules per OFU (and never more than the OFU's
//!   table holds); a decision beyond it is not cached (`cache_full`).
//! - **Idle timeout.** A cached rule not hit for `idle_timeout` is deleted (`evicted_idle`);
//!   [`Switch::expire`] scans, `process` calls it every `expire_interval`.
//! - **Upcall rate limit.** Misses reach the slow path through a token bucket (`upcall_rate`
//!   per second, `upcall_burst` deep); the rest are dropped (`upcall_rate_limited`), so a flood
//!   of new flows cannot starve the slow path.
//!
//! Packets the slow path decides are rewritten and output by it directly (the egress stream of
//! the paper's Figure 4).

use std::time::Duration;

use hashbrown::HashMap;
use ipnet::IpNet;
use tern_io::{Batch, Pool};
use tern_wire::frame::{FrameInfo, L3};

use crate::action::{self, ActionDrop, ActionSet, Verdict};
use crate::ofu::{Instruction, Match, OfuCounters, OfuDriver, OfuError, OfuId, OfuKind, OfuSpec, Rule};
use crate::pipeline::{DropReason, Outputs, Pipeline, tuple4, tuple6};
use crate::slowpath::{CacheHint, Decision, SlowDrop, SlowPath};

/// Which cached-rule tables the policy fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Exact 5-tuple rules (the EM OFU, §4.3.2).
    Exact,
    /// Destination-prefix rules (the LPM OFU, §4.3.1).
    Prefix,
    /// Prefix where the decision allows it, else exact.
    Both,
    /// Nothing: every packet takes the slow path.
    None,
}

/// The caching policy.
#[derive(Debug, Clone, PartialEq)]
pub struct CachePolicy {
    /// Tables to fill.
    pub mode: CacheMode,
    /// Cached rules per OFU.
    pub flow_limit: usize,
    /// A rule not hit for this long is deleted.
    pub idle_timeout: Duration,
    /// How often idle rules are looked for.
    pub expire_interval: Duration,
    /// Misses per second let through to the slow path.
    pub upcall_rate: f64,
    /// Misses let through at once.
    pub upcall_burst: f64,
}

impl Default for CachePolicy {
    /// Open vSwitch's defaults where it has them: 10 s idle timeout, 200 000 flows.
    fn default() -> Self {
        CachePolicy {
            mode: CacheMode::Both,
            flow_limit: 200_000,
            idle_timeout: Duration::from_secs(10),
            expire_interval: Duration::from_millis(500),
            upcall_rate: 1e6,
            upcall_burst: 10_000.0,
        }
    }
}

/// Counters of the cache and the slow-path hand-off.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Misses handed to the slow path.
    pub upcalls: u64,
    /// Misses dropped by the rate limit.
    pub upcall_rate_limited: u64,
    /// Rules installed (exact, prefix).
    pub installed_exact: u64,
    /// See `installed_exact`.
    pub installed_prefix: u64,
    /// Decisions not cacheable under the mode (the hint allowed none of its tables).
    pub uncacheable: u64,
    /// Decisions not cached because of the flow limit.
    pub cache_full: u64,
    /// Installs refused by the OFU driver (FIFO full).
    pub install_refused: u64,
    /// Rules deleted for being idle.
    pub evicted_idle: u64,
    /// Rules deleted by a flush.
    pub flushed: u64,
    /// Packets the slow path forwarded.
    pub slow_forwarded: u64,
    /// Packets the slow path dropped: those it decided to drop (by reason in
    /// [`SlowPathStats::dropped`](crate::slowpath::SlowPathStats)) and those it decided to
    /// forward that its next hop's actions or the output dropped (`slow_exec_dropped`).
    pub slow_dropped: u64,
    /// Packets the slow path decided to forward and that were dropped on their way out, by
    /// reason in [`SLOW_EXEC_DROPS`] order.
    pub slow_exec_dropped: [u64; SLOW_EXEC_DROPS.len()],
}

/// Why a packet the slow path decided to forward was dropped on its way out: its next hop's
/// actions (`push_vlan` without room, or past the tags the parser takes), an output port the
/// switch does not have (or no action set for the hop), or a full output batch. Counted as the
/// pipeline's reasons of the same name, prefixed `slow_` (`tern_flow_drops_packets{reason}`).
pub const SLOW_EXEC_DROPS: [DropReason; 5] = [
    DropReason::Action,
    DropReason::NoRoomForVlan,
    DropReason::TooManyVlansPushed,
    DropReason::NoSuchPort,
    DropReason::OutputQueueFull,
];

#[derive(Debug)]
struct CachedTable {
    ofu: OfuId,
    capacity: usize,
    free: Vec<u32>,
    next: u32,
    /// Match → entry index.
    rules: HashMap<Match, u32>,
}

impl CachedTable {
    fn alloc(&mut self) -> Option<u32> {
        self.free.pop().or_else(|| {
            ((self.next as usize) < self.capacity).then(|| {
                self.next += 1;
                self.next - 1
            })
        })
    }
}

/// The accelerated switch (sans-IO): pipeline + slow path + cache.
#[derive(Debug)]
pub struct Switch {
    /// The OFU pipeline.
    pub pipeline: Pipeline,
    /// The slow path.
    pub slow: SlowPath,
    driver: OfuDriver,
    policy: CachePolicy,
    em: Option<CachedTable>,
    lpm: Option<CachedTable>,
    tokens: f64,
    last_refill_ns: u64,
    last_expire_ns: u64,
    stats: CacheStats,
    scratch: Option<Batch>,
    pool: Pool,
}

impl Switch {
    /// Wires a pipeline (whose OFUs `driver` drives) to a slow path. The first EM and the first
    /// LPM OFU hold the cache; they are initialized here.
    pub fn new(
        pipeline: Pipeline,
        slow: SlowPath,
        driver: OfuDriver,
        policy: CachePolicy,
        pool: Pool,
    ) -> Result<Switch, OfuError> {
        let table = |kind: OfuKind| -> Result<Option<CachedTable>, OfuError> {
            let Some(spec) = driver.specs().find(|s| s.kind == kind).cloned() else { return Ok(None) };
            driver.ofu_init(spec.id)?;
            Ok(Some(CachedTable {
                ofu: spec.id,
                capacity: policy.flow_limit.min(spec.indexes() as usize),
                free: Vec::new(),
                next: 0,
                rules: HashMap::new(),
            }))
        };
        let em = table(OfuKind::Em)?;
        let lpm = table(OfuKind::Lpm)?;
        let mut sw = Switch {
            pipeline,
            slow,
            driver,
            tokens: policy.upcall_burst,
            policy,
            em,
            lpm,
            last_refill_ns: 0,
            last_expire_ns: 0,
            stats: CacheStats::default(),
            scratch: Some(Batch::new(tern_io::DEFAULT_BATCH)),
            pool,
        };
        sw.pipeline.configure(0);
        Ok(sw)
    }

    /// Cache counters.
    pub fn cache_stats(&self) -> &CacheStats {
        &self.stats
    }

    /// Cached rules (exact, prefix).
    pub fn cached(&self) -> (usize, usize) {
        (self.em.as_ref().map_or(0, |t| t.rules.len()), self.lpm.as_ref().map_or(0, |t| t.rules.len()))
    }

    /// The policy.
    pub fn policy(&self) -> &CachePolicy {
        &self.policy
    }

    fn admit_upcall(&mut self, now_ns: u64) -> bool {
        let dt = now_ns.saturating_sub(self.last_refill_ns) as f64 * 1e-9;
        self.last_refill_ns = now_ns;
        self.tokens = (self.tokens + dt * self.policy.upcall_rate).min(self.policy.upcall_burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn install(&mut self, info: &FrameInfo, hint: CacheHint, actions: &ActionSet) {
        let prefix = matches!(self.policy.mode, CacheMode::Prefix | CacheMode::Both)
            && hint.prefix.is_some()
            && self.lpm.is_some();
        let exact = !prefix
            && matches!(self.policy.mode, CacheMode::Exact | CacheMode::Both)
            && hint.exact
            && self.em.is_some();
        let (matching, table) = if prefix {
            let m = match hint.prefix {
                Some(IpNet::V4(n)) => Match::Ipv4Dst(n),
                Some(IpNet::V6(n)) => Match::Ipv6Dst(n),
                None => return,
            };
            (m, self.lpm.as_mut())
        } else if exact {
            let m = match info.l3 {
                L3::Ipv4 => Match::Tuple4(tuple4(info)),
                _ => Match::Tuple6(tuple6(info)),
            };
            (m, self.em.as_mut())
        } else {
            self.stats.uncacheable += 1;
            return;
        };
        let Some(t) = table else { return };
        if t.rules.contains_key(&matching) {
            // Installed already; the instruction is still in the FIFO.
            return;
        }
        let Some(index) = t.alloc() else {
            self.stats.cache_full += 1;
            return;
        };
        let rule = Rule::new(matching, actions.clone());
        match self.driver.rule_table_ops(t.ofu, Instruction::Populate { index, rule }) {
            Ok(()) => {
                t.rules.insert(matching, index);
                if prefix {
                    self.stats.installed_prefix += 1;
                } else {
                    self.stats.installed_exact += 1;
                }
            }
            Err(_) => {
                t.free.push(index);
                self.stats.install_refused += 1;
            }
        }
    }

    /// Processes a batch received on `in_port`: cached rules in the pipeline, misses through the
    /// slow path (which installs rules). Packets end in `out.ports`; `out.host` is left empty.
    pub fn process(&mut self, now_ns: u64, in_port: u16, batch: &mut Batch, out: &mut Outputs) {
        self.pipeline.process(now_ns, in_port, batch, out);
        self.tick(now_ns);
        if out.host.packets.is_empty() {
            return;
        }
        // Swap the misses out (the scratch batch, empty, takes their place) so the slow path can
        // write to the output ports while reading them.
        let cap = out.host.packets.capacity();
        let mut misses = match self.scratch.take() {
            Some(b) if b.capacity() == cap => b,
            _ => Batch::new(cap),
        };
        std::mem::swap(&mut misses, &mut out.host.packets);
        let ports = std::mem::take(&mut out.host.in_ports);
        let infos = std::mem::take(&mut out.host.infos);
        // The pipeline fills the three together; a packet without its port and header
        // information (pushed by someone else) goes back to the pool.
        while misses.len() > ports.len().min(infos.len()) {
            if let Some(p) = misses.pop() {
                self.pool.put(p);
            }
        }
        for ((pkt, port), info) in misses.drain().zip(ports.iter().copied()).zip(infos.iter().copied()) {
            self.upcall(now_ns, port, pkt, info, out);
        }
        out.host.in_ports = ports;
        out.host.in_ports.clear();
        out.host.infos = infos;
        out.host.infos.clear();
        self.scratch = Some(misses);
    }

    fn upcall(&mut self, now_ns: u64, port: u16, mut pkt: tern_io::Packet, mut info: FrameInfo, out: &mut Outputs) {
        if !self.admit_upcall(now_ns) {
            self.stats.upcall_rate_limited += 1;
            self.pool.put(pkt);
            return;
        }
        self.stats.upcalls += 1;
        let (decision, hint) = self.slow.decide(port, &info);
        let hop = match decision {
            Decision::Forward(hop) => hop,
            Decision::Drop(why) => {
                if why == SlowDrop::AclDeny && self.policy.mode != CacheMode::None {
                    self.install(&info, hint, &ActionSet::new(vec![action::Action::Drop]).unwrap_or_default());
                }
                self.stats.slow_dropped += 1;
                self.pool.put(pkt);
                return;
            }
        };
        if self.policy.mode != CacheMode::None
            && let Some(actions) = self.slow.actions(hop).cloned()
        {
            self.install(&info, hint, &actions);
        }
        let Some(actions) = self.slow.actions(hop) else {
            return self.slow_exec_drop(DropReason::NoSuchPort, pkt);
        };
        match action::execute(actions, &mut pkt, &mut info) {
            Verdict::Output(p) if usize::from(p) < out.ports.len() => match out.ports[usize::from(p)].push(pkt) {
                None => self.stats.slow_forwarded += 1,
                Some(pkt) => self.slow_exec_drop(DropReason::OutputQueueFull, pkt),
            },
            Verdict::Output(_) => self.slow_exec_drop(DropReason::NoSuchPort, pkt),
            // A next hop's set ends in `output`; one that sends the frame back up is one without it.
            Verdict::Host | Verdict::Drop(ActionDrop::Drop) => self.slow_exec_drop(DropReason::Action, pkt),
            Verdict::Drop(ActionDrop::NoRoomForVlan) => self.slow_exec_drop(DropReason::NoRoomForVlan, pkt),
            Verdict::Drop(ActionDrop::TooManyVlans) => self.slow_exec_drop(DropReason::TooManyVlansPushed, pkt),
        }
    }

    /// A packet the slow path decided to forward, dropped on its way out for `why` (one of
    /// [`SLOW_EXEC_DROPS`]).
    fn slow_exec_drop(&mut self, why: DropReason, pkt: tern_io::Packet) {
        self.stats.slow_dropped += 1;
        if let Some(i) = SLOW_EXEC_DROPS.iter().position(|r| *r == why) {
            self.stats.slow_exec_dropped[i] += 1;
        }
        self.pool.put(pkt);
    }

    /// Runs the idle-eviction scan if the policy's interval has passed since the last one.
    pub fn tick(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.last_expire_ns) >= self.policy.expire_interval.as_nanos() as u64 {
            self.expire(now_ns);
        }
    }

    /// Each OFU's spec and instruction counters.
    pub fn ofu_counters(&self) -> impl Iterator<Item = (&OfuSpec, &OfuCounters)> {
        self.driver.specs().filter_map(|s| Some((s, self.driver.counters(s.id)?)))
    }

    /// Deletes cached rules idle for longer than the policy's timeout.
    pub fn expire(&mut self, now_ns: u64) {
        self.last_expire_ns = now_ns;
        let timeout = self.policy.idle_timeout.as_nanos() as u64;
        for t in [self.em.as_mut(), self.lpm.as_mut()].into_iter().flatten() {
            let Some(tables) = self.pipeline.ofus().iter().find(|o| o.spec().id == t.ofu) else { continue };
            let idle: Vec<(Match, u32)> = t
                .rules
                .iter()
                .filter(|(_, i)| tables.entry(**i).is_some_and(|e| now_ns.saturating_sub(e.last_hit_ns) >= timeout))
                .map(|(m, i)| (*m, *i))
                .collect();
            for (m, i) in idle {
                if self.driver.rule_table_ops(t.ofu, Instruction::Delete { index: i }).is_ok() {
                    t.rules.remove(&m);
                    t.free.push(i);
                    self.stats.evicted_idle += 1;
                }
            }
        }
    }

    /// Deletes every cached rule (after the slow path's tables change).
    pub fn flush(&mut self) -> Result<(), OfuError> {
        for t in [self.em.as_mut(), self.lpm.as_mut()].into_iter().flatten() {
            self.driver.rule_table_ops(t.ofu, Instruction::Initialize)?;
            self.stats.flushed += t.rules.len() as u64;
            t.rules.clear();
            t.free.clear();
            t.next = 0;
        }
        Ok(())
    }
}

/// One cached rule as `dump-flows` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlowRow {
    /// The table: `em` (exact 5-tuple) or `lpm` (destination prefix).
    pub table: String,
    /// The OFU holding it.
    pub ofu: OfuId,
    /// Its entry index in the OFU.
    pub index: u32,
    /// Priority (the prefix length for LPM rules).
    pub priority: u32,
    /// The match field, ovs-ofctl style.
    #[serde(rename = "match")]
    pub matching: String,
    /// The action set.
    pub actions: String,
    /// Packets that hit it.
    pub n_packets: u64,
    /// Bytes of those packets.
    pub n_bytes: u64,
    /// Seconds since it was installed.
    pub duration: f64,
    /// Seconds since it was last hit.
    pub idle_age: f64,
}

impl Switch {
    /// The cached rules now in the OFUs' tables (in table, then priority, then index order).
    pub fn flows(&self, now_ns: u64) -> Vec<FlowRow> {
        let mut rows = Vec::new();
        for t in [self.em.as_ref(), self.lpm.as_ref()].into_iter().flatten() {
            let Some(tables) = self.pipeline.ofus().iter().find(|o| o.spec().id == t.ofu) else { continue };
            for (i, e) in tables.entries() {
                rows.push(FlowRow {
                    table: tables.spec().kind.as_str().to_string(),
                    ofu: t.ofu,
                    index: i,
                    priority: e.rule.priority,
                    matching: e.rule.matching.to_string(),
                    actions: e.rule.actions.to_string(),
                    n_packets: e.packets,
                    n_bytes: e.bytes,
                    duration: now_ns.saturating_sub(e.installed_ns) as f64 * 1e-9,
                    idle_age: now_ns.saturating_sub(e.last_hit_ns) as f64 * 1e-9,
                });
            }
        }
        rows.sort_by(|a, b| {
            (&a.table, std::cmp::Reverse(a.priority), a.index).cmp(&(&b.table, std::cmp::Reverse(b.priority), b.index))
        });
        rows
    }
}

/// What happened to one packet, stage by stage (`tern flow trace`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The parser's view, or why it refused the frame.
    pub parsed: Result<FrameInfo, tern_wire::frame::FrameError>,
    /// Stage 2: each enabled OFU searched, its kind and the key it was given.
    pub lookups: Vec<(OfuId, &'static str, String)>,
    /// The cached rule hit: OFU, entry index, the rule.
    pub hit: Option<(OfuId, u32, Rule)>,
    /// On a miss, the slow path's view.
    pub slow: Option<crate::slowpath::SlowTrace>,
    /// Rules this packet installed (exact, prefix).
    pub installed: (u64, u64),
    /// Where it left: port and the frame as sent. `None`: dropped (or rate-limited).
    pub output: Option<(u16, Vec<u8>)>,
}

impl Switch {
    /// Sends one frame through the switch, as `process` would, recording each stage. The
    /// frame really passes: counters move and a miss installs its rule.
    pub fn trace(&mut self, now_ns: u64, in_port: u16, frame: &[u8]) -> Trace {
        let parsed = FrameInfo::parse(frame);
        let mut lookups = Vec::new();
        let (mut hit, mut slow) = (None, None);
        if let Ok(info) = &parsed {
            for o in self.pipeline.ofus().iter().filter(|o| o.enabled()) {
                let key = match (o.spec().kind, info.l3) {
                    (OfuKind::Em, L3::Ipv4) => format!("{}", tern_table::em::FiveTuple::V4(tuple4(info))),
                    (OfuKind::Em, L3::Ipv6) => format!("{}", tern_table::em::FiveTuple::V6(tuple6(info))),
                    (OfuKind::Lpm, L3::Ipv4) => format!("nw_dst={}", std::net::Ipv4Addr::from(info.dst as u32)),
                    (OfuKind::Lpm, L3::Ipv6) => format!("ipv6_dst={}", std::net::Ipv6Addr::from(info.dst)),
                    (_, L3::Other) => continue,
                };
                lookups.push((o.spec().id, o.spec().kind.as_str(), key));
            }
            match self.pipeline.classify(info) {
                Some(h) => {
                    let rule = self
                        .pipeline
                        .ofus()
                        .iter()
                        .find(|o| o.spec().id == h.ofu)
                        .and_then(|o| o.entry(h.index))
                        .map(|e| e.rule.clone());
                    hit = rule.map(|r| (h.ofu, h.index, r));
                }
                None => slow = Some(self.slow.explain(in_port, info)),
            }
        }
        let before = (self.stats.installed_exact, self.stats.installed_prefix);
        let mut pkt = self.pool.packet();
        pkt.reserve_headroom(tern_io::DEFAULT_HEADROOM);
        let mut output = None;
        if pkt.extend_from_slice(frame).is_ok() {
            let mut batch = Batch::new(1);
            batch.push(pkt);
            let mut out = Outputs::new(self.pipeline.ports(), 1, 1);
            self.process(now_ns, in_port, &mut batch, &mut out);
            for (port, b) in out.ports.iter_mut().enumerate() {
                if let Some(p) = b.drain().next() {
                    output = Some((port as u16, p.data().to_vec()));
                    self.pool.put(p);
                }
            }
            out.host.packets.recycle(&self.pool);
        } else {
            self.pool.put(pkt);
        }
        let installed = (self.stats.installed_exact - before.0, self.stats.installed_prefix - before.1);
        Trace { parsed, lookups, hit, slow, installed, output }
    }
}
