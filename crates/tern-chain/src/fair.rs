//! Fair sharing (SuperNIC §4.5), sans I/O: the policy code both the data path and the
//! simulation run (docs/chain.md, "Fairness").
//!
//! SuperNIC shares the NIC in two steps. *Space*: how much FPGA area (regions) and on-board
//! memory each tenant gets, by Dominant Resource Fairness (DRF, Ghodsi et al., NSDI'11) over
//! the tenants' demands — a tenant's area demand is its DAG's area scaled by the bandwidth it
//! asked for over the most the DAG can carry ([`space_demand`]). *Time*: every epoch, on each
//! tenant's measured *intended* load (offered, before any limiter), the time of each region,
//! the ingress and egress links and the packet buffer are shared out; the result is enforced as
//! one rate a tenant at the ingress ([`TokenBucket`]), since everything a tenant uses downstream
//! grows with what it sends in.
//!
//! Both steps are one computation, [`drf`]: progressive filling over resources with
//! capacities, each claimant using a fixed amount of each per unit it is given, up to a cap
//! (what it asked for, or what it offers). Every claimant not yet stopped has its (weighted)
//! dominant share — the largest fraction of any resource it holds — raised at the same pace;
//! a claimant stops when it reaches its cap or when a resource it uses is full. The per-packet
//! virtual start and finish times of the paper are the scheduler's virtual-time order
//! (`runtime::Scheduler`); over an epoch they serve each tenant in proportion to its weight,
//! which is what this fluid computation gives in one step.

use std::time::{Duration, Instant};

pub mod sim;

/// One claimant: what one unit of its allocation uses of each resource, the most units it wants
/// (`f64::INFINITY`: no bound), and its weight (its dominant share rises at `weight` times the
/// common pace; 1 for plain DRF).
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub per_unit: Vec<f64>,
    pub cap: f64,
    pub weight: f64,
}

impl Claim {
    /// An unweighted claim.
    pub fn new(per_unit: Vec<f64>, cap: f64) -> Claim {
        Claim { per_unit, cap, weight: 1.0 }
    }
}

/// Why a claimant stopped growing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// It has all it asked for (its cap).
    Cap,
    /// A resource it uses is full (the resource's index).
    Full(usize),
    /// It uses nothing, or asks for nothing.
    Nothing,
}

/// What [`drf`] gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// Units given to each claimant.
    pub units: Vec<f64>,
    /// Each claimant's dominant share: the largest fraction of any one resource it holds.
    pub dominant: Vec<f64>,
    /// Each resource's amount given out.
    pub used: Vec<f64>,
    /// Why each claimant stopped.
    pub stop: Vec<Stop>,
}

/// Progressive filling: raises every claimant's dominant share over its weight at one pace
/// until it reaches its cap or a resource it uses is full. `capacity[r]` is resource `r`'s
/// amount; a claim's `per_unit` has one entry a resource (missing entries use none; a
/// resource of capacity 0 cannot be used: a claim using it gets nothing). Negative or NaN
/// amounts count as 0.
pub fn drf(capacity: &[f64], claims: &[Claim]) -> Allocation {
    let clean = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let nr = capacity.len();
    let cap: Vec<f64> = capacity.iter().map(|&c| if c.is_nan() { 0.0 } else { c.max(0.0) }).collect();
    let use_of = |c: &Claim, r: usize| c.per_unit.get(r).copied().map_or(0.0, clean);
    let n = claims.len();
    let mut units = vec![0.0; n];
    let mut stop: Vec<Option<Stop>> = vec![None; n];
    // Units a claimant gains per unit rise of the common level (its weight over its dominant
    // fraction per unit).
    let mut pace = vec![0.0; n];
    for (i, c) in claims.iter().enumerate() {
        let dom_per_unit = (0..nr)
            .map(|r| {
                let u = use_of(c, r);
                if u == 0.0 {
                    0.0
                } else if cap[r] == 0.0 {
                    f64::INFINITY
                } else {
                    u / cap[r]
                }
            })
            .fold(0.0, f64::max);
        let w = clean(c.weight);
        let want = if c.cap.is_nan() { 0.0 } else { c.cap.max(0.0) };
        if dom_per_unit == f64::INFINITY || want == 0.0 || w == 0.0 {
            stop[i] = Some(Stop::Nothing);
        } else if dom_per_unit == 0.0 {
            // Uses nothing: it can have all it asks for.
            units[i] = want;
            stop[i] = Some(Stop::Nothing);
        } else {
            pace[i] = w / dom_per_unit;
        }
    }
    let mut used = vec![0.0; nr];
    // At most one event a claimant and one a resource.
    for _ in 0..=n + nr {
        let active: Vec<usize> = (0..n).filter(|&i| stop[i].is_none()).collect();
        if active.is_empty() {
            break;
        }
        // How far the level can rise before a claimant's cap or a resource's capacity.
        let mut step = f64::INFINITY;
        for &i in &active {
            let want = claims[i].cap.max(0.0);
            step = step.min((want - units[i]).max(0.0) / pace[i]);
        }
        for r in 0..nr {
            let growth: f64 = active.iter().map(|&i| pace[i] * use_of(&claims[i], r)).sum();
            if growth > 0.0 {
                step = step.min((cap[r] - used[r]).max(0.0) / growth);
            }
        }
        if !step.is_finite() {
            // Nothing bounds them (no cap, using only resources of infinite capacity).
            for &i in &active {
                units[i] = f64::INFINITY;
                stop[i] = Some(Stop::Cap);
            }
            break;
        }
        for &i in &active {
            let add = pace[i] * step;
            units[i] += add;
            for (r, u) in used.iter_mut().enumerate() {
                *u += add * use_of(&claims[i], r);
            }
        }
        // Who stops: those at their cap, then those using a full resource.
        const EPS: f64 = 1e-9;
        for &i in &active {
            if units[i] >= claims[i].cap.max(0.0) * (1.0 - EPS) {
                units[i] = claims[i].cap.max(0.0);
                stop[i] = Some(Stop::Cap);
            }
        }
        for r in 0..nr {
            if used[r] >= cap[r] * (1.0 - EPS) {
                for &i in &active {
                    if stop[i].is_none() && use_of(&claims[i], r) > 0.0 {
                        stop[i] = Some(Stop::Full(r));
                    }
                }
            }
        }
    }
    let dominant = claims
        .iter()
        .zip(&units)
        .map(|(c, &x)| (0..nr).map(|r| if cap[r] > 0.0 { x * use_of(c, r) / cap[r] } else { 0.0 }).fold(0.0, f64::max))
        .collect();
    Allocation { units, dominant, used, stop: stop.into_iter().map(|s| s.unwrap_or(Stop::Nothing)).collect() }
}

/// A tenant's demand for FPGA area (§4.5): its DAG's `area` scaled by the bandwidth it asked
/// for over the most the DAG carries (4 units at 10 Gbit/s of a DAG that carries 40: 1 unit;
/// at 80, 8 units: two instances). A DAG with no bound (`max_gbps` 0 or not finite) needs its
/// area once.
pub fn space_demand(area: f64, requested_gbps: f64, max_gbps: f64) -> f64 {
    if !(max_gbps.is_finite() && max_gbps > 0.0) {
        return area.max(0.0);
    }
    let r = if requested_gbps.is_finite() { requested_gbps.max(0.0) } else { 0.0 };
    area.max(0.0) * r / max_gbps
}

/// Jain's fairness index of `x` (1: all equal; 1/n: one has everything).
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || q == 0.0 { 1.0 } else { s * s / (x.len() as f64 * q) }
}

/// A token bucket: the ingress limiter that enforces a tenant's share. Bytes are admitted while
/// there are tokens for them; tokens accrue at the rate up to the burst. Sans I/O: the caller
/// gives the time.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Bytes a nanosecond; `None`: no limit.
    rate: Option<f64>,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// Unlimited until [`set_rate`](Self::set_rate).
    pub fn unlimited() -> TokenBucket {
        TokenBucket { rate: None, burst: 0.0, tokens: 0.0, last: None }
    }

    /// Limits to `gbps` (None: no limit) with room for `burst` of traffic at that rate (at least
    /// one 9000-byte frame). A first limit starts with a full bucket; a changed one keeps the
    /// tokens on hand (up to the new burst).
    pub fn set_rate(&mut self, gbps: Option<f64>, burst: Duration) {
        match gbps.filter(|g| g.is_finite() && *g >= 0.0) {
            None => self.rate = None,
            Some(g) => {
                let per_ns = g / 8.0;
                let was_limited = self.rate.is_some();
                self.rate = Some(per_ns);
                self.burst = (per_ns * burst.as_nanos() as f64).max(9000.0);
                // A new limit starts with a full bucket; a changed one keeps what it had.
                self.tokens = if was_limited { self.tokens.min(self.burst) } else { self.burst };
            }
        }
    }

    /// The limit, Gbit/s (None: none).
    pub fn gbps(&self) -> Option<f64> {
        self.rate.map(|r| r * 8.0)
    }

    /// Whether `bytes` may pass at `now` (taking their tokens if so).
    pub fn admit(&mut self, now: Instant, bytes: usize) -> bool {
        let Some(rate) = self.rate else { return true };
        let last = *self.last.get_or_insert(now);
        if now > last {
            self.tokens = (self.tokens + rate * (now - last).as_nanos() as f64).min(self.burst);
            self.last = Some(now);
        }
        let need = bytes as f64;
        if self.tokens >= need {
            self.tokens -= need;
            true
        } else {
            false
        }
    }
}

/// A tenant's load over an epoch, as [`time_share`] takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantLoad {
    /// What it offered (its intended load), Gbit/s.
    pub offered_gbps: f64,
    /// Its packets' mean size, bytes.
    pub mean_bytes: f64,
    /// Its weight (its requested bandwidth; 1 if none).
    pub weight: f64,
    /// Time one of its packets takes of each resource (a core, a region), ns.
    pub ns_per_packet: Vec<f64>,
}

/// A tenant's share of an epoch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Share {
    /// What it gets of what it offered, Gbit/s.
    pub allowed_gbps: f64,
    /// The limit to set at its ingress while a resource is contended: what it gets if it is
    /// held back, else what it could get if it offered more (so a light tenant can grow to its
    /// share). `None` when no resource is full (nothing to enforce: a limit from a cost measured
    /// high, on a cold start, would only drop packets) or nothing bounds it.
    pub limit_gbps: Option<f64>,
    /// Its dominant share: the largest fraction of any one resource it takes.
    pub dominant: f64,
    /// Why it stopped growing.
    pub stop: Stop,
}

/// Time sharing (§4.5's second step) over resources of `capacity` seconds a second each (a
/// core: 1): each tenant's claim is 1 Gbit/s of its ingress, which takes
/// `ns_per_packet[r] / (8 × mean_bytes)` seconds a second of resource `r`, up to what it
/// offered, weighted by its weight. Limits are set only while some resource is full.
pub fn time_share(capacity: &[f64], loads: &[TenantLoad]) -> Vec<Share> {
    let claims: Vec<Claim> = loads
        .iter()
        .map(|l| Claim {
            per_unit: l
                .ns_per_packet
                .iter()
                .map(
                    |&ns| {
                        if l.mean_bytes > 0.0 && ns.is_finite() && ns > 0.0 { ns / (8.0 * l.mean_bytes) } else { 0.0 }
                    },
                )
                .collect(),
            cap: l.offered_gbps.max(0.0),
            weight: l.weight,
        })
        .collect();
    shares(capacity, &claims)
}

/// The shares of claims capped at what each tenant offers (units of its ingress rate): [`drf`]
/// over them and, for each, the limit to set at its ingress as [`Share::limit_gbps`] says
/// (what it is allowed if a full resource holds it back; else, while some resource is full,
/// what it would get offering without bound, the others as they are; else none).
pub fn shares(capacity: &[f64], claims: &[Claim]) -> Vec<Share> {
    let a = drf(capacity, claims);
    let contended = a.stop.iter().any(|s| matches!(s, Stop::Full(_)));
    (0..claims.len())
        .map(|i| {
            let limit = match a.stop[i] {
                _ if !contended => None,
                Stop::Full(_) => Some(a.units[i]),
                // Held back by nothing it offered: its limit is what it would get offering
                // without bound, the others as they are.
                Stop::Cap | Stop::Nothing => {
                    let mut c = claims.to_vec();
                    c[i].cap = f64::INFINITY;
                    let x = drf(capacity, &c).units[i];
                    x.is_finite().then_some(x)
                }
            };
            Share { allowed_gbps: a.units[i], limit_gbps: limit, dominant: a.dominant[i], stop: a.stop[i] }
        })
        .collect()
}

/// Every epoch, the running totals of what tenants offered (packets, bytes) become rates over
/// the epoch, and [`time_share`] their shares.
#[derive(Debug, Clone, Default)]
pub struct Epoch {
    last: Option<(Instant, Vec<(u64, u64)>)>,
    mean: Vec<f64>,
}

impl Epoch {
    /// The shares at `now` from the totals `offered` (by tenant: packets, bytes, as
    /// `runtime::Limiter::offered` gives them), each tenant's `weight`, its packets' time on
    /// each resource, and whether it is `backlogged` (packets waiting beyond what it is served:
    /// what it intends is more than it could offer, so its demand has no bound). The first call
    /// only notes the totals (no rates yet): `None`; so does a call at the same instant.
    pub fn step(
        &mut self,
        now: Instant,
        offered: &[(u64, u64)],
        backlogged: &[bool],
        weights: &[f64],
        ns_per_packet: &[Vec<f64>],
        capacity: &[f64],
    ) -> Option<Vec<Share>> {
        let prev = self.last.replace((now, offered.to_vec()));
        let (then, before) = prev?;
        let secs = now.checked_duration_since(then)?.as_secs_f64();
        if secs <= 0.0 {
            return None;
        }
        self.mean.resize(offered.len(), 1500.0);
        let loads: Vec<TenantLoad> = offered
            .iter()
            .enumerate()
            .map(|(t, &(p, b))| {
                let (p0, b0) = before.get(t).copied().unwrap_or((0, 0));
                let (dp, db) = (p.saturating_sub(p0), b.saturating_sub(b0));
                if dp > 0 {
                    // A tenant that sent nothing this epoch keeps its last mean size.
                    self.mean[t] = db as f64 / dp as f64;
                }
                let rate = db as f64 * 8.0 / secs / 1e9;
                TenantLoad {
                    offered_gbps: if backlogged.get(t).copied().unwrap_or(false) { f64::INFINITY } else { rate },
                    mean_bytes: self.mean[t],
                    weight: weights.get(t).copied().unwrap_or(1.0),
                    ns_per_packet: ns_per_packet.get(t).cloned().unwrap_or_default(),
                }
            })
            .collect();
        Some(time_share(capacity, &loads))
    }
}
