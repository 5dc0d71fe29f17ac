//! Autoscaling (SuperNIC §4.3 and §5.3, Figure 15), sans I/O: the policy that turns a chain's
//! measured load into launches of new instances, and a discrete-event simulation that drives
//! it on the profile's timings (docs/chain.md, "Autoscaling").
//!
//! Every epoch the autoscaler compares a chain's load with what its instances carry and
//! recommends the instances it needs; instances beyond those launched are launched, each
//! serving after the profile's partial-reconfiguration (PR) time. Chains are pre-launched when
//! they are deployed, and a launched instance stays (evicting it would not make a later launch
//! faster) until its region is needed by another chain — which [`Autoscaler::evict`] models.

/// What the autoscaler decided at one epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Instances the load needs (at least 1, at most the bound).
    pub recommended: usize,
    /// New instances launched now.
    pub launched: usize,
}

/// The autoscaler of one chain.
#[derive(Debug, Clone)]
pub struct Autoscaler {
    /// Load one instance carries (any unit: Gbit/s, packets a second).
    per_instance: f64,
    /// The most instances it may have (regions, or cores under `cpu`).
    bound: usize,
    /// PR time, ns (0 under `cpu`).
    pr_ns: u64,
    /// Instances serving, and those launched but still in PR (when each is ready, ns).
    ready: usize,
    pending: Vec<u64>,
    /// Launches so far.
    launches: u64,
}

impl Autoscaler {
    /// A chain whose instances carry `per_instance` each, at most `bound` of them, launched
    /// with `pr_ns` of PR, and `prelaunched` instances serving from the start (at least 1).
    pub fn new(per_instance: f64, bound: usize, pr_ns: u64, prelaunched: usize) -> Autoscaler {
        let bound = bound.max(1);
        Autoscaler {
            per_instance: if per_instance.is_finite() && per_instance > 0.0 { per_instance } else { f64::INFINITY },
            bound,
            pr_ns,
            ready: prelaunched.clamp(1, bound),
            pending: Vec::new(),
            launches: 0,
        }
    }

    /// Instances that `load` needs: its load over what one carries, rounded up, within 1 and
    /// the bound.
    pub fn recommend(&self, load: f64) -> usize {
        let need = if load.is_finite() && load > 0.0 { (load / self.per_instance).ceil() } else { 1.0 };
        (need as usize).clamp(1, self.bound)
    }

    /// The epoch at `now_ns` with the chain's measured `load`: instances whose PR has ended
    /// serve from now; if the load needs more than are serving and launching, the rest are
    /// launched (serving after the PR time).
    pub fn epoch(&mut self, now_ns: u64, load: f64) -> Decision {
        self.advance(now_ns);
        let recommended = self.recommend(load);
        let have = self.ready + self.pending.len();
        let launched = recommended.saturating_sub(have);
        for _ in 0..launched {
            self.pending.push(now_ns + self.pr_ns);
        }
        self.launches += launched as u64;
        self.advance(now_ns);
        Decision { recommended, launched }
    }

    /// Instances whose PR has ended by `now_ns` start serving.
    pub fn advance(&mut self, now_ns: u64) {
        let before = self.pending.len();
        self.pending.retain(|&t| t > now_ns);
        self.ready += before - self.pending.len();
    }

    /// Another chain needs `n` of its regions: that many serving instances go (at least one
    /// stays).
    pub fn evict(&mut self, n: usize) {
        self.ready = self.ready.saturating_sub(n).max(1);
    }

    /// Instances serving.
    pub fn ready(&self) -> usize {
        self.ready
    }

    /// Instances launched and still in PR.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// When the first instance in PR serves, ns (None: none in PR).
    pub fn next_ready(&self) -> Option<u64> {
        self.pending.iter().copied().min()
    }

    /// Launches so far.
    pub fn launches(&self) -> u64 {
        self.launches
    }

    /// What the serving instances carry.
    pub fn capacity(&self) -> f64 {
        self.ready as f64 * self.per_instance
    }
}

/// One sample of a simulated timeline.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Time, ms.
    pub ms: f64,
    /// Load offered and carried (the unit of the autoscaler's `per_instance`).
    pub offered: f64,
    pub carried: f64,
    /// Regions used: serving, and in PR.
    pub serving: usize,
    pub in_pr: usize,
    /// Instances launched at the epochs since the sample before.
    pub launched: usize,
}

/// A simulation (labelled so wherever it is shown) of one chain under a load trace: the trace
/// is `(from_ms, load)` steps, in order; the autoscaler runs every `epoch_ms` (first at 0) and
/// the timeline is sampled every `step_ms` until `end_ms`. The carried load is the offered
/// load up to the serving instances' capacity. At each epoch the autoscaler sees what the
/// running data path measures ([`crate::runtime::Scaling`]): the mean load offered over the
/// epoch before (at 0, the load then).
pub fn simulate(
    scaler: &mut Autoscaler,
    trace: &[(f64, f64)],
    epoch_ms: f64,
    step_ms: f64,
    end_ms: f64,
) -> Vec<Sample> {
    let load_at = |ms: f64| trace.iter().take_while(|(from, _)| *from <= ms).last().map_or(0.0, |(_, l)| *l);
    let ns = |ms: f64| (ms * 1e6).round().max(0.0) as u64;
    let mut out = Vec::new();
    let (epoch_ms, step_ms) = (epoch_ms.max(1e-3), step_ms.max(1e-3));
    let mut next_epoch = 0.0;
    let steps = (end_ms.max(0.0) / step_ms).floor() as usize;
    for k in 0..=steps {
        let ms = k as f64 * step_ms;
        let mut launched = 0;
        while next_epoch <= ms + 1e-9 {
            scaler.advance(ns(next_epoch));
            let load =
                if next_epoch <= 0.0 { load_at(0.0) } else { mean_load(trace, next_epoch - epoch_ms, next_epoch) };
            launched += scaler.epoch(ns(next_epoch), load).launched;
            next_epoch += epoch_ms;
        }
        scaler.advance(ns(ms));
        let offered = load_at(ms);
        out.push(Sample {
            ms,
            offered,
            carried: offered.min(scaler.capacity()),
            serving: scaler.ready(),
            in_pr: scaler.pending(),
            launched,
        });
    }
    out
}

/// The mean of a `(from_ms, load)` step trace over `(a, b]` (its load before the first step: 0).
pub fn mean_load(trace: &[(f64, f64)], a: f64, b: f64) -> f64 {
    if b <= a {
        return 0.0;
    }
    let mut sum = 0.0;
    for (i, &(from, load)) in trace.iter().enumerate() {
        let to = trace.get(i + 1).map_or(f64::INFINITY, |n| n.0);
        let (lo, hi) = (from.max(a), to.min(b));
        if hi > lo {
            sum += load * (hi - lo);
        }
    }
    sum / (b - a)
}

/// Figure 15's load (§5.3): 1× (10 Gbit/s) from 0, 2× at 20 ms, 3× at 30, 1.5× at 70 and 3×
/// again at 90, on a chain whose instance (one region) carries 10 Gbit/s.
pub const FIGURE15_TRACE: [(f64, f64); 5] = [(0.0, 10.0), (20.0, 20.0), (30.0, 30.0), (70.0, 15.0), (90.0, 30.0)];
