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
    /// Instances given up now (their regions needed by another chain: [`Space::arbitrate`]).
    pub evicted: usize,
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
        self.epoch_within(now_ns, load, self.bound)
    }

    /// [`epoch`](Self::epoch), launching only while the instances serving and in PR stay
    /// within `most` (the regions the board can give it now: [`Space::arbitrate`]).
    pub fn epoch_within(&mut self, now_ns: u64, load: f64, most: usize) -> Decision {
        self.advance(now_ns);
        let recommended = self.recommend(load);
        let have = self.ready + self.pending.len();
        let launched = recommended.min(most).saturating_sub(have);
        for _ in 0..launched {
            self.pending.push(now_ns + self.pr_ns);
        }
        self.launches += launched as u64;
        self.advance(now_ns);
        Decision { recommended, launched, evicted: 0 }
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

    /// Another chain needs its regions: keeps at most `n` instances serving and in PR (at least
    /// one), cancelling launches still in PR first (the latest first), then serving ones.
    /// Returns how many went.
    pub fn shrink_to(&mut self, n: usize) -> usize {
        let n = n.max(1);
        let before = self.held();
        self.pending.sort_unstable();
        while self.held() > n && !self.pending.is_empty() {
            self.pending.pop();
        }
        if self.held() > n {
            self.ready = n.saturating_sub(self.pending.len()).max(1);
        }
        before - self.held()
    }

    /// Instances serving and in PR: the regions it holds (an instance's worth each).
    pub fn held(&self) -> usize {
        self.ready + self.pending.len()
    }

    /// The most instances it may have.
    pub fn bound(&self) -> usize {
        self.bound
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

/// A tenant in the space step: its chain, what one instance of that chain takes of each space
/// resource (regions, memory), what it asked for and the most one instance carries.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SpaceTenant {
    pub chain: usize,
    pub per_instance: Vec<f64>,
    pub requested_gbps: f64,
    pub max_gbps: f64,
}

/// The space step (§4.5's first step) over a board's regions (§4.3), sans I/O: how many
/// instances of each chain the tenants' DRF shares give it, and, as launches want regions,
/// who gets them (docs/chain.md, "Space").
///
/// Shares: every tenant claims instances of its chain — one instance takes the chain's
/// regions and memory — up to its demand, its requested bandwidth over what an instance
/// carries ([`crate::fair::space_demand`] in instances); [`crate::fair::drf`] shares them out;
/// a chain's share is the instances its tenants were given, summed and rounded down, at least
/// one (a deployed chain keeps one). Regions: a plan region hosts segments of one chain or,
/// concatenated, of several; its instance `k` is in use while any of its chains holds more
/// than `k` instances (serving or in PR).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Space {
    /// The space resources' capacities: regions, memory.
    pub capacity: Vec<f64>,
    /// By plan region: the chains with a segment in it.
    pub region_chains: Vec<Vec<usize>>,
    pub tenants: Vec<SpaceTenant>,
    /// Chains, and those whose instances all stay (stateful: flows are spread over all of
    /// them), by chain.
    pub fixed: Vec<bool>,
}

impl Space {
    /// Regions in use when chain `c` holds `held[c]` instances.
    pub fn used(&self, held: &[usize]) -> usize {
        self.region_chains
            .iter()
            .map(|cs| cs.iter().map(|&c| held.get(c).copied().unwrap_or(0)).max().unwrap_or(0))
            .sum()
    }

    /// The regions there are.
    pub fn regions(&self) -> usize {
        self.capacity.first().map_or(0, |&r| if r.is_finite() && r > 0.0 { r as usize } else { 0 })
    }

    /// Each tenant's instances (fractional) by DRF over the space resources.
    pub fn tenant_shares(&self) -> Vec<f64> {
        let claims: Vec<crate::fair::Claim> = self
            .tenants
            .iter()
            .map(|t| {
                crate::fair::Claim::new(
                    t.per_instance.clone(),
                    crate::fair::space_demand(1.0, t.requested_gbps, t.max_gbps),
                )
            })
            .collect();
        crate::fair::drf(&self.capacity, &claims).units
    }

    /// Each chain's share, instances: its tenants' summed and rounded down, at least 1.
    pub fn shares(&self) -> Vec<usize> {
        let mut sum = vec![0.0; self.fixed.len()];
        for (t, x) in self.tenants.iter().zip(self.tenant_shares()) {
            if let Some(s) = sum.get_mut(t.chain)
                && x.is_finite()
            {
                *s += x;
            }
        }
        sum.iter().map(|&x| ((x + 1e-9).floor() as usize).max(1)).collect()
    }

    /// The instances each chain may hold after this epoch, given what each holds and wants
    /// and each one's `share`: a chain wanting fewer keeps what it holds (launched instances
    /// stay); one wanting more gets free regions, one instance at a time, the chain farthest
    /// below its share first; when none are free, a chain still below its share takes the
    /// regions of one holding more than its share (one wanting fewer than it holds first), and
    /// a chain at or above its share waits for free ones. Fixed chains keep what they hold and
    /// give nothing up.
    pub fn arbitrate(&self, held: &[usize], want: &[usize], share: &[usize]) -> Vec<usize> {
        let n = held.len();
        let total = self.regions();
        let mut target = held.to_vec();
        let fixed = |c: usize| self.fixed.get(c).copied().unwrap_or(false);
        let share_of = |c: usize| share.get(c).copied().unwrap_or(1).max(1);
        // What each chain still wants; lowered to what it has when it must wait.
        let mut wanting: Vec<usize> = (0..n).map(|c| want.get(c).copied().unwrap_or(0)).collect();
        // Each step grants an instance or stops a chain; a grant that evicts moves an instance
        // from above a share to within one, so the steps are bounded.
        for _ in 0..(n + 1) * (total + n + 1) * 2 {
            // The chain that wants more, farthest below its share (then the lowest index).
            let next = (0..n).filter(|&c| !fixed(c) && wanting[c] > target[c]).min_by(|&a, &b| {
                let ra = target[a] as f64 / share_of(a) as f64;
                let rb = target[b] as f64 / share_of(b) as f64;
                ra.total_cmp(&rb).then(a.cmp(&b))
            });
            let Some(c) = next else { break };
            target[c] += 1;
            if self.used(&target) <= total {
                continue;
            }
            // No free region: below its share, it takes one from a chain above its own (one
            // wanting fewer than it holds first, then the one most above its share).
            let victim = (target[c] <= share_of(c))
                .then(|| {
                    (0..n).filter(|&v| v != c && !fixed(v) && target[v] > share_of(v)).max_by_key(|&v| {
                        let idle = wanting[v] < target[v];
                        (idle, target[v] - share_of(v), std::cmp::Reverse(v))
                    })
                })
                .flatten();
            if let Some(v) = victim {
                target[v] -= 1;
                if self.used(&target) <= total {
                    continue;
                }
                // Its region instance is not one c can use (a region both share): undo.
                target[v] += 1;
            }
            target[c] -= 1;
            wanting[c] = target[c];
        }
        target
    }
}

/// The blocks of sNIC's own that sit beside the regions and use on-chip memory (Figure 6).
const OWN_BLOCKS: [&str; 4] = ["core", "packet_store", "phy_mac", "ddr4"];

impl Space {
    /// The space step of `plan`'s chains on `profile`'s board: its regions, and its on-chip
    /// memory (`device.bram_kb` less sNIC's own blocks': the memory Figure 6 gives per task,
    /// `nt.NAME.bram_kb`, 0 where it gives none); each tenant's demand is its
    /// `bandwidth_gbps` over the least of its tasks' maxima (`nt.NAME.gbps`, a dummy's cap,
    /// else the line). `stateful` (by chain) marks chains whose instances all stay.
    pub fn from_plan(
        plan: &crate::plan::Plan,
        tenants: &[crate::tenant::Tenant],
        profile: &tern_hw::Profile,
        stateful: &[bool],
    ) -> Result<Space, String> {
        let model = tern_hw::chain::ChainModel::from_profile(profile)?;
        let kb = |block: &str| profile.area.get(&format!("{block}.bram_kb")).copied().unwrap_or(0.0);
        let memory = (kb("device") - OWN_BLOCKS.iter().map(|b| kb(b)).sum::<f64>()).max(0.0);
        let region_chains: Vec<Vec<usize>> = plan
            .regions
            .iter()
            .map(|r| {
                let mut cs: Vec<usize> = r.segments.iter().map(|&(c, _)| c).collect();
                cs.sort_unstable();
                cs.dedup();
                cs
            })
            .collect();
        let regions_of = |c: usize| region_chains.iter().filter(|cs| cs.contains(&c)).count() as f64;
        let memory_of = |c: usize| -> f64 {
            plan.chains
                .get(c)
                .map(|ch| ch.slots.iter().map(|s| kb(&format!("nt.{}", crate::tenant::profile_name(s.kind)))).sum())
                .unwrap_or(0.0)
        };
        let mut out = Vec::with_capacity(tenants.len());
        for (t, p) in tenants.iter().zip(&plan.tenants) {
            let max_gbps = t
                .tasks
                .iter()
                .map(|task| match task {
                    crate::tenant::TaskSpec::Dummy { gbps, .. } if *gbps > 0.0 => gbps.min(model.line_gbps),
                    _ => model.task_gbps(crate::tenant::profile_name(task.kind())),
                })
                .fold(model.line_gbps, f64::min);
            out.push(SpaceTenant {
                chain: p.chain,
                per_instance: vec![regions_of(p.chain), memory_of(p.chain)],
                requested_gbps: t.bandwidth_gbps,
                max_gbps,
            });
        }
        Ok(Space {
            capacity: vec![model.regions as f64, memory],
            region_chains,
            tenants: out,
            fixed: (0..plan.chains.len()).map(|c| stateful.get(c).copied().unwrap_or(true)).collect(),
        })
    }
}
