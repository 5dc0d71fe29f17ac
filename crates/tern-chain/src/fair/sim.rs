//! Fair sharing simulated at the paper's scale (SuperNIC §5.3, Figures 16–17): the policy code
//! of [`super`] ([`drf`], [`shares`]) on a discrete-event clock with the profile's epoch, for
//! the paper's three schemes (docs/chain.md, "Fairness"). Everything here is a simulation, and
//! every caller labels it so.
//!
//! The paper gives the experiment's shape, not its numbers: two users, user 1 a chain of 4
//! dummy tasks, user 2 a chain of 2 that is a subset of user 1's; the same requested
//! bandwidth; 100 seconds; user 1's load rises at 50. The model is fluid: a user carried at
//! `x` Gbit/s takes `x × per_gbps[r]` of resource `r` (regions' time, board memory, the ingress
//! and egress links), with [`figure16`] giving the amounts it assumes (stated there). The
//! schemes:
//!
//! - *Static*: each user gets an equal part of every resource, whatever it asks or offers;
//! - *DRF*: DRF over the users' requested bandwidth, decided once when they are deployed, not
//!   changed with the load (space sharing only: no user runs on what another was given);
//! - *sNIC*: every epoch, shares by DRF on the load each user offered over the epoch before,
//!   weighted by what it requested ([`shares`], as `runtime::FairShares` on the data path),
//!   set as limits at the ingress; within the epoch, contended resources serve the users'
//!   admitted load by their weights (the scheduler's virtual-time order: [`drf`] again).

use super::{Claim, drf, jain, shares};
use crate::scale::mean_load;

/// One user of the simulation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct User {
    pub name: String,
    /// What 1 Gbit/s of its traffic takes of each resource.
    pub per_gbps: Vec<f64>,
    /// The bandwidth it asked for, Gbit/s (its weight in sNIC's shares).
    pub requested_gbps: f64,
    /// Its offered load: `(from_s, gbps)` steps, in order (0 before the first).
    pub trace: Vec<(f64, f64)>,
}

/// How the NIC is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    /// An equal part of every resource to each user.
    Static,
    /// DRF on requested bandwidth, once.
    Drf,
    /// DRF on offered load every epoch, enforced at the ingress, time-shared.
    Snic,
}

impl Scheme {
    /// All three, in the paper's order.
    pub const ALL: [Scheme; 3] = [Scheme::Static, Scheme::Drf, Scheme::Snic];

    /// The paper's name.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Static => "Static",
            Scheme::Drf => "DRF",
            Scheme::Snic => "sNIC",
        }
    }
}

/// One sample of a simulated timeline.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sample {
    /// Time, s.
    pub s: f64,
    /// By user: Gbit/s offered and carried, and its dominant share (the largest fraction of any
    /// one resource its carried traffic takes).
    pub offered: Vec<f64>,
    pub carried: Vec<f64>,
    pub dominant: Vec<f64>,
}

impl Sample {
    /// What all users carry, Gbit/s.
    pub fn aggregate(&self) -> f64 {
        self.carried.iter().sum()
    }

    /// Jain's index over the users' dominant shares.
    pub fn jain(&self) -> f64 {
        jain(&self.dominant)
    }
}

/// The offered load of a `(from_s, gbps)` step trace at `s`.
pub fn load_at(trace: &[(f64, f64)], s: f64) -> f64 {
    trace.iter().take_while(|(from, _)| *from <= s).last().map_or(0.0, |(_, l)| *l)
}

fn claim(u: &User, cap: f64, weight: f64) -> Claim {
    Claim { per_unit: u.per_gbps.clone(), cap, weight }
}

fn dominant(capacity: &[f64], u: &User, x: f64) -> f64 {
    capacity
        .iter()
        .zip(&u.per_gbps)
        .map(|(&c, &p)| if c > 0.0 && p > 0.0 { x * p / c } else { 0.0 })
        .fold(0.0, f64::max)
}

/// What Static gives each user at most, Gbit/s: its equal part of each resource over what it
/// takes of it, the least over resources.
pub fn static_allocation(capacity: &[f64], users: &[User]) -> Vec<f64> {
    let n = users.len().max(1) as f64;
    users
        .iter()
        .map(|u| {
            capacity
                .iter()
                .zip(&u.per_gbps)
                .filter(|(_, p)| **p > 0.0)
                .map(|(&c, &p)| c.max(0.0) / n / p)
                .fold(f64::INFINITY, f64::min)
        })
        .map(|x| if x.is_finite() { x } else { 0.0 })
        .collect()
}

/// The timeline of `users` on resources of `capacity` under `scheme`: epochs every `epoch_s`
/// (the first at 0, seeing the load then; later ones the mean load of the epoch before, as
/// the data path measures it), a sample every `step_s` until `end_s`.
pub fn simulate(
    scheme: Scheme,
    capacity: &[f64],
    users: &[User],
    epoch_s: f64,
    step_s: f64,
    end_s: f64,
) -> Vec<Sample> {
    let (epoch_s, step_s) = (epoch_s.max(1e-6), step_s.max(1e-6));
    let n = users.len();
    // Static and DRF decide once; sNIC's limits change every epoch.
    let fixed: Option<Vec<f64>> = match scheme {
        Scheme::Static => Some(static_allocation(capacity, users)),
        Scheme::Drf => {
            let claims: Vec<Claim> = users.iter().map(|u| claim(u, u.requested_gbps.max(0.0), 1.0)).collect();
            Some(drf(capacity, &claims).units)
        }
        Scheme::Snic => None,
    };
    let weight = |u: &User| if u.requested_gbps > 0.0 { u.requested_gbps } else { 1.0 };
    let mut limits: Vec<f64> = vec![f64::INFINITY; n];
    let mut next_epoch = 0.0;
    let steps = (end_s.max(0.0) / step_s).round() as usize;
    let mut out = Vec::with_capacity(steps + 1);
    for k in 0..=steps {
        let s = k as f64 * step_s;
        if fixed.is_none() {
            while next_epoch <= s + 1e-9 {
                let measured: Vec<f64> = users
                    .iter()
                    .map(|u| {
                        if next_epoch <= 0.0 {
                            load_at(&u.trace, 0.0)
                        } else {
                            mean_load(&u.trace, next_epoch - epoch_s, next_epoch)
                        }
                    })
                    .collect();
                let claims: Vec<Claim> = users.iter().zip(&measured).map(|(u, &m)| claim(u, m, weight(u))).collect();
                limits = shares(capacity, &claims).iter().map(|sh| sh.limit_gbps.unwrap_or(f64::INFINITY)).collect();
                next_epoch += epoch_s;
            }
        }
        let offered: Vec<f64> = users.iter().map(|u| load_at(&u.trace, s).max(0.0)).collect();
        let carried: Vec<f64> = match &fixed {
            Some(alloc) => offered.iter().zip(alloc).map(|(o, a)| o.min(*a)).collect(),
            None => {
                // What the limiters admit, served by weight where a resource is contended.
                let claims: Vec<Claim> =
                    users.iter().zip(&offered).zip(&limits).map(|((u, o), l)| claim(u, o.min(*l), weight(u))).collect();
                drf(capacity, &claims).units
            }
        };
        let dominant = users.iter().zip(&carried).map(|(u, &x)| dominant(capacity, u, x)).collect();
        out.push(Sample { s, offered, carried, dominant });
    }
    out
}

/// What [`figure16`] assumes, beside the profile.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Figure16 {
    /// The resources' names and capacities: regions (each a region's time), board memory
    /// (GB), ingress and egress links (Gbit/s).
    pub resources: Vec<(&'static str, f64)>,
    pub users: Vec<User>,
    /// Gbit/s one dummy task carries in its region.
    pub task_gbps: f64,
    /// Board memory an instance of each of the four dummy tasks holds, GB.
    pub task_memory_gb: [f64; 4],
}

/// Memory (GB) an instance of each of the four dummy tasks holds. An assumption (the paper
/// gives none): the two tasks the users share are memory-heavy and the two only user 1 runs
/// are light, so user 1's dominant resource is the regions and user 2's the memory — the case
/// DRF is for.
pub const FIGURE16_TASK_MEMORY_GB: [f64; 4] = [0.25, 0.25, 1.5, 1.5];

/// §5.3's two users on a NIC of `regions` regions, `memory_gb` of board memory and
/// `line_gbps` links, each dummy task filling a region and carrying `task_gbps`: user 1 runs
/// tasks 1–4, user 2 tasks 3–4 (a subset of user 1's chain); both ask for 60 Gbit/s; user 2
/// offers 60 throughout, user 1 offers 15 until 50 s and then 60 (its load rises).
pub fn figure16(regions: f64, memory_gb: f64, line_gbps: f64, task_gbps: f64) -> Figure16 {
    let task_gbps = if task_gbps.is_finite() && task_gbps > 0.0 { task_gbps } else { 1.0 };
    let user = |name: &str, tasks: &[usize], trace: Vec<(f64, f64)>| User {
        name: name.to_string(),
        per_gbps: vec![
            tasks.len() as f64 / task_gbps,
            tasks.iter().map(|&t| FIGURE16_TASK_MEMORY_GB[t]).sum::<f64>() / task_gbps,
            1.0,
            1.0,
        ],
        requested_gbps: 60.0,
        trace,
    };
    Figure16 {
        resources: vec![
            ("regions", regions),
            ("memory_gb", memory_gb),
            ("ingress_gbps", line_gbps),
            ("egress_gbps", line_gbps),
        ],
        users: vec![
            user("user 1", &[0, 1, 2, 3], vec![(0.0, 15.0), (50.0, 60.0)]),
            user("user 2", &[2, 3], vec![(0.0, 60.0)]),
        ],
        task_gbps,
        task_memory_gb: FIGURE16_TASK_MEMORY_GB,
    }
}

impl Figure16 {
    /// The resources' capacities.
    pub fn capacity(&self) -> Vec<f64> {
        self.resources.iter().map(|(_, c)| *c).collect()
    }
}
