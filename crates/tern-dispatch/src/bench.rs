//! `tern bench dispatch`: the paper's three sweeps (QingNiao §5.1, Figures 15–16 and the
//! appendix): the number of skip-and-checks (1…48), of rules (1…512) and of matched bytes per
//! check (1…32), one varying at a time from the default point (4 checks, 32 rules, 5 bytes), on
//! the KV GET service, for every [`Mode`]. Per point and round the modes run one after another
//! in a rotating order against the same store, the same load and the same cores.

use std::io;
use std::time::Duration;

use crate::kv::{Backend, KvLayout, KvStore};
use crate::loadgen::{self, LoadOptions};
use crate::rules::RuleSet;
use crate::server::{Mode, Server, ServerOptions, total};
use crate::synth::Spec;
use tern_io::memnet::MemNet;
use tern_qnp::pingpong::median;

/// Which dimension a point varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimension {
    /// The default point itself.
    Default,
    /// Skip-and-checks per rule.
    Checks,
    /// Rules.
    Rules,
    /// Matched bytes per check.
    Bytes,
}

impl Dimension {
    /// Name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Dimension::Default => "default",
            Dimension::Checks => "checks",
            Dimension::Rules => "rules",
            Dimension::Bytes => "bytes",
        }
    }
}

/// The full sweep's values per dimension.
pub const CHECKS: [u32; 7] = [1, 2, 4, 8, 16, 32, 48];
/// Rules swept.
pub const RULES: [u32; 10] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
/// Bytes per check swept.
pub const BYTES: [u32; 7] = [1, 2, 4, 5, 8, 16, 32];
/// The reduced sweep of `--quick`.
pub const QUICK_CHECKS: [u32; 3] = [1, 4, 48];
/// Rules in the reduced sweep.
pub const QUICK_RULES: [u32; 3] = [1, 32, 512];
/// Bytes in the reduced sweep.
pub const QUICK_BYTES: [u32; 3] = [1, 5, 32];

/// The points of a sweep: the default point first, then each dimension's other values.
pub fn points(quick: bool) -> Vec<(Dimension, Spec)> {
    let d = Spec::default();
    let (c, r, b): (&[u32], &[u32], &[u32]) =
        if quick { (&QUICK_CHECKS, &QUICK_RULES, &QUICK_BYTES) } else { (&CHECKS, &RULES, &BYTES) };
    let mut out = vec![(Dimension::Default, d)];
    out.extend(c.iter().filter(|&&v| v != d.checks).map(|&checks| (Dimension::Checks, Spec { checks, ..d })));
    out.extend(r.iter().filter(|&&v| v != d.rules).map(|&rules| (Dimension::Rules, Spec { rules, ..d })));
    out.extend(b.iter().filter(|&&v| v != d.bytes).map(|&bytes| (Dimension::Bytes, Spec { bytes, ..d })));
    out
}

/// How to run the benchmark.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Points to measure.
    pub points: Vec<(Dimension, Spec)>,
    /// Modes to compare.
    pub modes: Vec<Mode>,
    /// Rounds per point (each runs every mode once, in rotating order).
    pub rounds: usize,
    /// Rounds at the default point (it carries the targets).
    pub default_rounds: usize,
    /// Measured time per mode per round.
    pub phase: Duration,
    /// Unmeasured warm-up before each phase.
    pub warmup: Duration,
    /// Keys in the store.
    pub keys: u64,
    /// The store's backend.
    pub store: Backend,
    /// Server: workers and dispatchers, cores.
    pub server: ServerOptions,
    /// Client threads.
    pub client_threads: usize,
    /// UDP flows per client thread.
    pub flows: usize,
    /// GETs outstanding per client thread.
    pub concurrency: usize,
    /// Cores of the client threads (empty: any).
    pub client_cores: Vec<usize>,
}

/// One mode's runs at one point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModeResult {
    /// Requests/s per round.
    pub rps: Vec<f64>,
    /// p99 latency per round, µs.
    pub p99_us: Vec<f64>,
    /// p50 latency per round, µs.
    pub p50_us: Vec<f64>,
    /// GETs answered wrongly or failed (must be 0): the sum of the next three.
    pub errors: u64,
    /// GETs the transport gave up on (or left unanswered at the end of a phase).
    pub failed: u64,
    /// GETs answered "not found".
    pub not_found: u64,
    /// GETs answered with another key's value.
    pub wrong_value: u64,
    /// Packets the dispatchers dropped (all reasons, all rounds).
    pub dispatcher_drops: u64,
    /// For each round with failures: the client's and server's counters, to find out why.
    pub diagnostics: Vec<String>,
    /// Server CPU time per request, per round.
    pub costs: Vec<Costs>,
}

impl ModeResult {
    /// Median over rounds of the dispatch and serve costs per request, ns.
    pub fn median_costs(&self) -> Costs {
        Costs {
            dispatch_ns: median(self.costs.iter().map(|c| c.dispatch_ns).collect()),
            serve_ns: median(self.costs.iter().map(|c| c.serve_ns).collect()),
        }
    }

    /// Requests/s over the rounds: min, median, max.
    pub fn rps_spread(&self) -> Option<Spread> {
        Spread::of(&self.rps)
    }
    /// Median requests/s.
    pub fn median_rps(&self) -> f64 {
        median(self.rps.clone())
    }
    /// Median p99, µs.
    pub fn median_p99_us(&self) -> f64 {
        median(self.p99_us.clone())
    }
    /// Median p50, µs.
    pub fn median_p50_us(&self) -> f64 {
        median(self.p50_us.clone())
    }
}

/// One point's results.
#[derive(Debug, Clone, PartialEq)]
pub struct PointResult {
    /// Which dimension it varies.
    pub dimension: Dimension,
    /// The rule set's shape.
    pub spec: Spec,
    /// Per mode, in [`BenchOptions::modes`] order.
    pub modes: Vec<(Mode, ModeResult)>,
}

impl PointResult {
    /// A mode's result.
    pub fn mode(&self, m: Mode) -> Option<&ModeResult> {
        self.modes.iter().find(|(k, _)| *k == m).map(|(_, r)| r)
    }

    /// Median over rounds of Tern's requests/s divided by `other`'s, the two measured in the
    /// same round.
    pub fn ratio(&self, other: Mode) -> Option<f64> {
        self.ratio_spread(other).map(|s| s.median)
    }

    /// The per-round ratios of Tern's requests/s over `other`'s: min, median, max.
    pub fn ratio_spread(&self, other: Mode) -> Option<Spread> {
        let (a, b) = (self.mode(Mode::Rsd)?, self.mode(other)?);
        let per_round: Vec<f64> = a.rps.iter().zip(&b.rps).filter(|(_, y)| **y > 0.0).map(|(x, y)| x / y).collect();
        Spread::of(&per_round)
    }
}

/// What measured per-request costs give for a server of `workers` worker threads and
/// `dispatchers` dispatcher threads on cores of their own, each thread's rate the inverse of its
/// CPU time per request: a projection, not a measurement (no contention, no memory or cache
/// effects, no client). Dedicated RSDs and the software dispatchers are a stage of their own, the
/// slower stage bounding the rate. Modes without a dispatch stage (`rss`, and Tern's RSD in the
/// workers, which costs each worker both steps) run workers on all `workers + dispatchers`
/// cores: the paper gives QingNiao the same 12 cores as its baselines' 8 + 4 (§5.1).
pub fn project(mode: Mode, placement: crate::server::Placement, c: Costs, workers: u32, dispatchers: u32) -> f64 {
    let rate = |ns: f64| if ns > 0.0 { 1e9 / ns } else { f64::INFINITY };
    let (w, d) = (f64::from(workers), f64::from(dispatchers));
    match (mode, placement) {
        (Mode::Rss, _) => (w + d) * rate(c.serve_ns),
        (Mode::Rsd, crate::server::Placement::Workers) => (w + d) * rate(c.serve_ns + c.dispatch_ns),
        _ => (w * rate(c.serve_ns)).min(d * rate(c.dispatch_ns)),
    }
}

/// Minimum, median and maximum of per-round values.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Smallest.
    pub min: f64,
    /// Median.
    pub median: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `v`, or `None` if it is empty.
    pub fn of(v: &[f64]) -> Option<Spread> {
        if v.is_empty() {
            return None;
        }
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Spread { min, median: median(v.to_vec()), max })
    }
}

/// Runs one mode for one phase against `store`.
fn phase(
    opts: &BenchOptions,
    mode: Mode,
    layout: &KvLayout,
    rules: &RuleSet,
    store: &KvStore,
    seed: u64,
) -> io::Result<(loadgen::LoadReport, u64, Option<String>, Costs)> {
    let server_opts = ServerOptions { mode, ..opts.server.clone() };
    let server = Server::start(&server_opts, rules.clone(), store.clone())?;
    let mut load = LoadOptions::new(server.addr(), *layout);
    load.net = server.mem_net().cloned();
    load.threads = opts.client_threads;
    load.flows = opts.flows;
    load.concurrency = opts.concurrency;
    load.cores = opts.client_cores.clone();
    load.seed = seed;
    if !opts.warmup.is_zero() {
        load.duration = opts.warmup;
        loadgen::run(&load)?;
    }
    // Costs over the measured phase only: counters before and after it.
    // On the mem transport a steering program runs in the client's sending thread (as the
    // kernel's runs in the sender's softirq): its time counts as dispatching too.
    let program_ns = || server.mem_net().map_or(0, MemNet::program_ns);
    let before = (
        total(&server.dispatcher_stats()).dispatch_ns + program_ns(),
        serve_ns(&server),
        server.worker_requests().iter().sum::<u64>(),
    );
    load.duration = opts.phase;
    let report = loadgen::run(&load)?;
    let d = total(&server.dispatcher_stats());
    let handled = server.worker_requests().iter().sum::<u64>() - before.2;
    let per = |ns: u64| ns as f64 / handled.max(1) as f64;
    let costs = Costs {
        dispatch_ns: per(d.dispatch_ns + program_ns() - before.0),
        serve_ns: per(serve_ns(&server) - before.1),
    };
    let drops = d.rsd.drops.iter().sum::<u64>() + d.handoff_full;
    let failures = report.failed + report.not_found + report.wrong_value;
    let shared = server.shared().clone();
    server.stop()?;
    let diagnosis = (failures > 0).then(|| {
        // Read after the stop: the workers publish their final counters as they exit.
        let workers: Vec<tern_qnp::Stats> = shared.workers.iter().map(|w| *w.qnp.lock().expect("stats lock")).collect();
        format!(
            "{failures} failures in {:.1} s (gave up: {} thread(s)); client qnp {:?}; client port {:?}; \
             workers' qnp {:?}; dispatchers rx {} handoff_full {} drops {:?}",
            report.elapsed_s,
            report.gave_up,
            report.client_qnp,
            report.client_port,
            workers,
            d.rx_packets,
            d.handoff_full,
            d.rsd.drops
        )
    });
    Ok((report, drops, diagnosis, costs))
}

fn serve_ns(server: &Server) -> u64 {
    server.shared().workers.iter().map(|w| w.serve_ns.load(std::sync::atomic::Ordering::Relaxed)).sum()
}

/// Server CPU time per request in one phase, measured by the server's threads around their work.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Costs {
    /// Deciding and handing off (the RSD or the software dispatcher), ns per request; 0 for
    /// `rss`, whose dispatch is the kernel's (or, on the mem transport, the client side's) flow
    /// hash. With kernel steering on the mem transport it includes the steering program's runs;
    /// on UDP the kernel's runs of it are not in it (they are the sender's softirq time).
    pub dispatch_ns: f64,
    /// Answering (handler, encoding, sending), ns per request.
    pub serve_ns: f64,
}

/// Runs the sweep; `progress` is told about each finished phase.
pub fn run(opts: &BenchOptions, mut progress: impl FnMut(&str)) -> io::Result<Vec<PointResult>> {
    let mut results = Vec::new();
    for (pi, &(dimension, spec)) in opts.points.iter().enumerate() {
        let layout = KvLayout { spec, workers: opts.server.workers, keys: opts.keys };
        layout.validate().map_err(io::Error::other)?;
        let store = KvStore::temporary_with(opts.store, None).map_err(io::Error::other)?;
        store.load(&layout).map_err(io::Error::other)?;
        let rules = layout.rule_set();
        let mut modes: Vec<(Mode, ModeResult)> = opts.modes.iter().map(|&m| (m, ModeResult::default())).collect();
        let rounds = if dimension == Dimension::Default { opts.default_rounds } else { opts.rounds };
        for round in 0..rounds.max(1) {
            let n = modes.len();
            for k in 0..n {
                let idx = (k + round) % n;
                let mode = modes[idx].0;
                let (r, drops, diagnosis, costs) =
                    phase(opts, mode, &layout, &rules, &store, (pi * 1000 + round) as u64)?;
                let m = &mut modes[idx].1;
                m.rps.push(r.rps);
                m.costs.push(costs);
                m.p99_us.push(r.p99_us);
                m.p50_us.push(r.p50_us);
                m.errors += r.failed + r.not_found + r.wrong_value;
                m.failed += r.failed;
                m.not_found += r.not_found;
                m.wrong_value += r.wrong_value;
                m.dispatcher_drops += drops;
                if let Some(d) = diagnosis {
                    progress(&format!("{} round {} {}: {d}", dimension.as_str(), round + 1, mode.as_str()));
                    m.diagnostics.push(format!("round {}: {d}", round + 1));
                }
                progress(&format!(
                    "{} k={} R={} b={} round {}: {:<7} {:>9.0} req/s  p99 {:>7.0} µs",
                    dimension.as_str(),
                    spec.checks,
                    spec.rules,
                    spec.bytes,
                    round + 1,
                    mode.as_str(),
                    r.rps,
                    r.p99_us
                ));
            }
        }
        results.push(PointResult { dimension, spec, modes });
    }
    Ok(results)
}
