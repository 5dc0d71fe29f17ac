//! The macro benchmark behind `tern bench flow`: the cached fast path against the slow path
//! alone, on the same frames through the same mem wires (L2 links between in-process ports),
//! and the rate at which the OFU API applies rule changes.
//!
//! The switch routes by a 10K-prefix table with a 120-rule ACL in front of it; every frame gets
//! the paper's action set (set both MACs, TTL decrement, VLAN insert, checksum, output). The
//! fast path caches one exact rule per flow (all flows fit); the slow path (`CacheMode::None`,
//! no upcall limit) decides every frame with its tuple-space classifier and LPM. Each
//! measured phase pushes batches of fresh frames from a generator port through the switch to a
//! sink port, in one thread; phases of the two paths alternate. As with a hardware tester, the
//! switch's rate is counted over its own time (receiving a batch from its port, processing it,
//! transmitting it); filling buffers in the generator and emptying the sink are not the switch's
//! work and are left out (`loop_pps` keeps the rate with them). The clock is read once before
//! and once after the switch's part of every batch; what a reading itself costs (measured as
//! two readings back to back, [`clock_overhead_ns`]) is not the switch's either and is taken
//! off each batch's time.

use std::time::{Duration, Instant};

use ipnet::Ipv4Net;
use tern_io::{Batch, DEFAULT_HEADROOM, Pool, Port, mem};
use tern_table::workload;
use tern_wire::frame;

use crate::action::ActionSet;
use crate::classifier::{Pattern, PortRange};
use crate::ofu::{self, Instruction, Match, OfuKind, OfuSpec, Rule};
use crate::pipeline::{Outputs, Pipeline};
use crate::slowpath::{AclAction, AclRule, NextHop, SlowPath, SlowPathTables};
use crate::switch::{CacheMode, CachePolicy, Switch};

/// Which path a phase measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// Cached exact rules in the OFU pipeline.
    Fast,
    /// Every frame decided by the slow path.
    Slow,
}

/// One measured phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// Frames per second of the switch's own time (receive, process, transmit), the figure a
    /// tester reports for a device under test.
    pub pps: f64,
    /// Frames per second of the whole loop, the generator and the sink (untimed in `pps`)
    /// included.
    pub loop_pps: f64,
    /// Median and 99th percentile switch time per 32-frame batch (receive, process, transmit), ns.
    pub batch_p50_ns: f64,
    /// See `batch_p50_ns`.
    pub batch_p99_ns: f64,
    /// Frames that hit a cached rule, of those processed.
    pub hit_ratio: f64,
    /// Frames that came out (all should).
    pub forwarded_ratio: f64,
    /// The clock's own cost taken off each batch's time, ns (see [`clock_overhead_ns`]).
    pub clock_ns: f64,
}

/// What timing an interval with [`Instant`] adds to it, ns: the median of many pairs of
/// readings back to back (the end of the first reading and the start of the second, which
/// frame every measured interval too).
pub fn clock_overhead_ns() -> u64 {
    let mut d: Vec<u64> = (0..20_001)
        .map(|_| {
            let t0 = Instant::now();
            let t1 = Instant::now();
            (t1 - t0).as_nanos() as u64
        })
        .collect();
    d.sort_unstable();
    d[d.len() / 2]
}

/// The benchmark's tables: `routes` IPv4 prefixes (realistic length mix, seeded) over two next
/// hops that push a VLAN, behind an ACL of `acl` rules (service denials, 100+ denied sources).
pub fn tables(routes: usize, acl: usize) -> SlowPathTables {
    let prefixes = workload::ipv4_prefixes(routes, workload::IPV4_LENGTH_MIX, 11);
    let routes4 = prefixes
        .iter()
        .enumerate()
        .filter_map(|(i, &(a, l))| Some((Ipv4Net::new(a.into(), l as u8).ok()?, (i % 2) as u32)))
        .collect();
    let mut rules = Vec::new();
    let deny = |p: Pattern| AclRule { pattern: p, action: AclAction::Deny };
    for (i, port) in [22u16, 23, 135, 445, 3389, 5900].iter().enumerate() {
        rules.push(deny(Pattern {
            priority: 1000 + i as u32,
            proto: Some(6),
            dst_port: Some(PortRange(*port, *port)),
            ..Pattern::default()
        }));
    }
    rules.push(deny(Pattern {
        priority: 900,
        proto: Some(17),
        dst_port: Some(PortRange(161, 162)),
        ..Pattern::default()
    }));
    let mut n = 0u32;
    while rules.len() < acl {
        // Denied sources in 192.0.2.0/24 and 198.51.100.0/24 (the generated traffic avoids them).
        let a = if n < 256 { 0xc000_0200 | n } else { 0xc633_6400 | (n & 0xff) };
        rules.push(deny(Pattern {
            priority: 500,
            src: Some(ipnet::IpNet::V4(Ipv4Net::new(a.into(), 32).unwrap_or_default())),
            ..Pattern::default()
        }));
        n += 1;
    }
    let hop = |i: u8| NextHop {
        port: 1,
        eth_src: [2, 0, 0, 0, 0, 0xa0 + i],
        eth_dst: [2, 0, 0, 0, 1, i],
        vlan: Some(100 + u16::from(i)),
    };
    SlowPathTables { acl: rules, acl_default_deny: false, routes4, routes6: vec![], next_hops: vec![hop(0), hop(1)] }
}

/// `flows` UDP frames of `frame_bytes` (60..=1514) towards routed destinations, one per flow.
pub fn frames(t: &SlowPathTables, flows: usize, frame_bytes: usize) -> Vec<Vec<u8>> {
    let prefixes: Vec<(u32, u32)> =
        t.routes4.iter().map(|(n, _)| (u32::from(n.network()), u32::from(n.prefix_len()))).collect();
    let dsts = workload::ipv4_lookups(&prefixes, flows, 1000, 12);
    let payload = vec![0x42u8; frame_bytes.clamp(60, 1514) - 42];
    dsts.iter()
        .enumerate()
        .map(|(i, &d)| {
            let mut f = Vec::with_capacity(frame_bytes);
            let src = [10, 1, (i >> 8) as u8, i as u8];
            let sport = 10_000 + (i % 50_000) as u16;
            frame::build_udp4(
                &mut f,
                [2, 0, 0, 0, 9, 9],
                [2, 0, 0, 0, 0, 0xa0],
                src,
                d.to_be_bytes(),
                sport,
                4791,
                64,
                &payload,
            );
            f
        })
        .collect()
}

/// A switch over `t` with one exact-match and one LPM OFU (unbounded: the `cpu` profile).
pub fn switch(t: &SlowPathTables, path: PathKind, pool: &Pool) -> Switch {
    let spec = |id, kind| OfuSpec {
        id,
        kind,
        v4_entries: 1 << 20,
        v6_entries: 1 << 16,
        fifo_depth: 1 << 16,
        action_set_bits: 128,
        write_cycles: 0,
    };
    let (driver, ofus) = ofu::new(vec![spec(1, OfuKind::Em), spec(2, OfuKind::Lpm)]);
    let pipeline = Pipeline::new(ofus, 2, pool.clone());
    let policy = CachePolicy {
        mode: if path == PathKind::Fast { CacheMode::Exact } else { CacheMode::None },
        flow_limit: 1 << 20,
        idle_timeout: Duration::from_secs(3600),
        upcall_rate: 1e15,
        upcall_burst: 1e15,
        ..CachePolicy::default()
    };
    let slow = SlowPath::new(t).unwrap_or_else(|e| panic!("benchmark tables: {e}"));
    Switch::new(pipeline, slow, driver, policy, pool.clone()).unwrap_or_else(|e| panic!("benchmark switch: {e}"))
}

/// A switch wired between a generator and a sink over mem wires ([`mem::wire`]).
#[derive(Debug)]
pub struct Rig {
    /// The switch.
    pub switch: Switch,
    pool: Pool,
    gen_port: mem::MemPort,
    in_port: mem::MemPort,
    out_port: mem::MemPort,
    sink: mem::MemPort,
    batch: Batch,
    out: Outputs,
    start: Instant,
    /// [`clock_overhead_ns`], measured when the rig was made.
    clock_ns: u64,
}

impl Rig {
    /// A rig for `path` over tables `t`.
    pub fn new(t: &SlowPathTables, path: PathKind) -> Rig {
        let pool = Pool::new(4096, 2048);
        let (gen_port, in_port) = mem::wire(&pool, 1024);
        let (out_port, sink) = mem::wire(&pool, 1024);
        Rig {
            switch: switch(t, path, &pool),
            pool,
            gen_port,
            in_port,
            out_port,
            sink,
            batch: Batch::new(32),
            out: Outputs::new(2, 64, 64),
            start: Instant::now(),
            clock_ns: clock_overhead_ns(),
        }
    }

    /// One batch of 32 frames from `frames`, starting at `*next`: the generator fills and sends
    /// it (untimed), the switch receives, processes and transmits it (timed), the sink takes what
    /// came out (untimed). Returns the frames out and the switch's time for the batch, ns (the
    /// clock's own cost taken off).
    pub fn step(&mut self, frames: &[Vec<u8>], next: &mut usize) -> (usize, u64) {
        let now = Instant::now();
        for _ in 0..32 {
            let mut p = self.pool.packet();
            p.reserve_headroom(DEFAULT_HEADROOM);
            let _ = p.extend_from_slice(&frames[*next]);
            *next = (*next + 1) % frames.len();
            self.batch.push(p);
        }
        let _ = self.gen_port.send(now, &mut self.batch);
        // The switch: receive, process, transmit (what a device under test does).
        let t0 = Instant::now();
        let _ = self.in_port.recv(t0, &mut self.batch);
        let now_ns = t0.saturating_duration_since(self.start).as_nanos() as u64;
        self.switch.process(now_ns, 0, &mut self.batch, &mut self.out);
        self.batch.recycle(&self.pool);
        let _ = self.out_port.send(t0, &mut self.out.ports[1]);
        self.out.ports[0].recycle(&self.pool);
        let t1 = Instant::now();
        let n = self.sink.recv(t1, &mut self.batch).unwrap_or(0);
        self.batch.recycle(&self.pool);
        (n, ((t1 - t0).as_nanos() as u64).saturating_sub(self.clock_ns))
    }

    /// Runs batches for `time`; measures.
    pub fn phase(&mut self, frames: &[Vec<u8>], time: Duration) -> Phase {
        let mut next = 0;
        let before = self.switch.pipeline.stats().clone();
        let mut times = Vec::with_capacity(1 << 16);
        let (mut sent, mut out, mut busy) = (0u64, 0u64, 0u64);
        let start = Instant::now();
        let end = start + time;
        loop {
            let (n, ns) = self.step(frames, &mut next);
            out += n as u64;
            sent += 32;
            busy += ns;
            times.push(ns);
            if Instant::now() >= end {
                break;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        times.sort_unstable();
        let q = |f: f64| times[((times.len() - 1) as f64 * f) as usize] as f64;
        let after = self.switch.pipeline.stats();
        let seen = (after.hits + after.misses).saturating_sub(before.hits + before.misses).max(1);
        Phase {
            pps: sent as f64 / (busy.max(1) as f64 * 1e-9),
            loop_pps: sent as f64 / secs,
            batch_p50_ns: q(0.5),
            batch_p99_ns: q(0.99),
            hit_ratio: (after.hits - before.hits) as f64 / seen as f64,
            forwarded_ratio: out as f64 / sent.max(1) as f64,
            clock_ns: self.clock_ns as f64,
        }
    }
}

/// Median of `v` (0 if empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() { 0.0 } else { s[s.len() / 2] }
}

/// Configuration-rate results: instructions per second through `rule_table_ops` and the FSM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigRate {
    /// EM populates/s.
    pub em_populate_per_s: f64,
    /// EM deletes/s.
    pub em_delete_per_s: f64,
    /// LPM populates/s.
    pub lpm_populate_per_s: f64,
    /// LPM deletes/s.
    pub lpm_delete_per_s: f64,
    /// Updates/s (action set rewrite, EM).
    pub update_per_s: f64,
}

/// Applies `n` populates, `n` updates and `n` deletes to each kind of OFU through the paper's
/// API (`rule_table_ops` into the FIFO, the FSM draining it), `rounds` times after a warm-up
/// round on the same OFUs; medians.
pub fn config_rate(n: usize, rounds: usize) -> ConfigRate {
    let t = tables(n.max(1000), 8);
    let set = SlowPath::next_hop_actions(&t.next_hops[0], false);
    let other: ActionSet = SlowPath::next_hop_actions(&t.next_hops[1], false);
    let em_rules: Vec<Match> = frames(&t, n, 64)
        .iter()
        .filter_map(|f| frame::FrameInfo::parse(f).ok().map(|i| Match::Tuple4(crate::pipeline::tuple4(&i))))
        .collect();
    let lpm_rules: Vec<Match> = t.routes4.iter().take(n).map(|(net, _)| Match::Ipv4Dst(*net)).collect();
    // One OFU per kind for every round: the first round (page faults as the tables first
    // touch their memory) is a warm-up; the rates are sustained ones, as Table 5's.
    let mut ofus: Vec<_> = [(OfuKind::Em, &em_rules), (OfuKind::Lpm, &lpm_rules)]
        .into_iter()
        .map(|(kind, rules)| {
            let spec = OfuSpec {
                id: 1,
                kind,
                v4_entries: (rules.len() as u32).max(1),
                v6_entries: 1,
                fifo_depth: 4096,
                action_set_bits: 128,
                write_cycles: 0,
            };
            let (driver, mut tabs) = ofu::new(vec![spec]);
            let _ = driver.ofu_init(1);
            tabs[0].run_fsm(0, usize::MAX);
            (kind, rules, driver, tabs)
        })
        .collect();
    let mut rates = Vec::new();
    for round in 0..=rounds.max(1) {
        let mut one = [0.0f64; 5];
        for (kind, rules, driver, tabs) in ofus.iter_mut() {
            let depth = driver.specs().next().map_or(1, |s| s.fifo_depth);
            let mut apply = |make: &dyn Fn(u32, &Match) -> Instruction| -> f64 {
                let start = Instant::now();
                for (i, m) in rules.iter().enumerate() {
                    // The host writes while the FIFO has room; the device drains it when full.
                    if driver.pending(1) >= depth {
                        tabs[0].run_fsm(0, usize::MAX);
                    }
                    let ok = driver.rule_table_ops(1, make(i as u32, m)).is_ok();
                    debug_assert!(ok, "the FIFO had room");
                }
                tabs[0].run_fsm(0, usize::MAX);
                rules.len() as f64 / start.elapsed().as_secs_f64()
            };
            let pop = apply(&|i, m| Instruction::Populate { index: i, rule: Rule::new(*m, set.clone()) });
            let upd = apply(&|i, _| Instruction::Update { index: i, actions: other.clone() });
            let del = apply(&|i, _| Instruction::Delete { index: i });
            assert_eq!(tabs[0].len(), 0, "every rule deleted");
            if *kind == OfuKind::Em {
                one[0] = pop;
                one[1] = del;
                one[4] = upd;
            } else {
                one[2] = pop;
                one[3] = del;
            }
        }
        if round > 0 {
            rates.push(one);
        }
    }
    let col = |k: usize| median(&rates.iter().map(|r| r[k]).collect::<Vec<_>>());
    ConfigRate {
        em_populate_per_s: col(0),
        em_delete_per_s: col(1),
        lpm_populate_per_s: col(2),
        lpm_delete_per_s: col(3),
        update_per_s: col(4),
    }
}
