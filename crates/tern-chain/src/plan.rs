//! Planning (docs/chain.md, "Plans"): tenants' DAGs → virtual chains → physical chains in
//! regions, as SuperNIC's §4.2 does it.
//!
//! - A tenant's *virtual chain* is its DAG's tasks in an order every edge goes forward in.
//! - A *physical chain* is a sequence of task instances that packets of one or more tenants
//!   run through, each tenant skipping the positions that are not its own (the packet
//!   descriptor's skip mask). A task instance is shared between tenants whose DAGs name a task
//!   alike and of the same kind (each tenant keeps its own state and parameters in it; the
//!   area is the instance's, paid once).
//! - Tenants are placed largest DAG first. A tenant whose DAG embeds in an existing chain
//!   (its tasks there, in an order its edges allow) rides it with no area of its own
//!   (*skipping*). Else, if an existing chain shares a task with it, the chain is extended
//!   with the tenant's other tasks, inserted where its edges allow (*partial sharing*). Else it
//!   gets a new chain.
//! - A chain larger than a region is cut into segments that each fit one (*splitting*); a
//!   packet goes from one segment's region to the next's without the scheduler. Segments are
//!   packed into regions first-fit, so small chains share one region (*concatenating*).
//!
//! Limits: at most [`MAX_CHAIN`] tasks a chain (the skip mask's bits), and the profile's
//! regions; a plan needing more is refused, naming what it asks and what there is.

use std::ops::Range;

use serde::Serialize;

use crate::tenant::{TaskSpec, Tenant};

/// Tasks a physical chain holds at most (the skip mask is 64 bits).
pub const MAX_CHAIN: usize = 64;

/// A task instance's place in a chain: its name and kind (what tenants share it by) and area.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Slot {
    /// The task's name in the tenants' DAGs.
    pub name: String,
    /// Its kind.
    pub kind: &'static str,
    /// Its area, LUTs (the largest any sharing tenant's parameters need).
    pub luts: u64,
}

/// A physical chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Chain {
    /// Its task instances, in the order packets take them.
    pub slots: Vec<Slot>,
    /// Its segments (ranges of positions), one region each.
    pub segments: Vec<Range<usize>>,
    /// The tenants riding it (indices into the planned tenants).
    pub tenants: Vec<usize>,
    /// A parallel tenant's own chain (no other tenant shares it): its branches start segments.
    pub exclusive: bool,
}

/// Where a tenant's packets go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Its chain.
    pub chain: usize,
    /// Bit `p` set: its packets skip position `p`.
    pub skip: u64,
    /// Each DAG node's position in the chain (by node index).
    pub positions: Vec<usize>,
    /// A parallel tenant's fork (`parallel = true`): its branches' segments, run side by side.
    pub fork: Option<Fork>,
}

/// Where a parallel tenant's branches are: the segments before `branches[0].start` run first,
/// then each branch's segments on a copy of the packet, side by side, then the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fork {
    /// Each branch's segments (indices into the chain's segments).
    pub branches: Vec<Range<usize>>,
    /// Each branch copy's skip mask: every position but the branch's.
    pub skips: Vec<u64>,
}

/// A region and the segments placed in it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegionPlan {
    /// LUTs its segments use.
    pub luts: u64,
    /// (chain, segment) pairs.
    pub segments: Vec<(usize, usize)>,
}

/// A plan.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Physical chains.
    pub chains: Vec<Chain>,
    /// Each tenant's placement (by the planned tenants' order).
    pub tenants: Vec<Placement>,
    /// Regions in use.
    pub regions: Vec<RegionPlan>,
    /// The profile's regions, and LUTs in each.
    pub regions_available: u64,
    pub region_luts: u64,
}

/// A merged chain's positions: `Ok(p)`, the old chain's position `p`; `Err(n)`, the tenant's
/// node `n`, new.
type Merged = Vec<Result<usize, usize>>;

/// Where a tenant's tasks would go in `chain`, inserting its tasks the chain lacks if
/// `insert`; `None` if its edges forbid it (or nothing is shared, when inserting). Returns the
/// merged chain's slots (as tenant node indices for new ones) and the tenant's positions.
fn merge(t: &Tenant, chain: &[Slot], insert: bool) -> Option<(Merged, Vec<usize>)> {
    let n = t.dag.nodes().len();
    let key = |i: usize| (t.dag.nodes()[i].as_str(), t.tasks[i].kind());
    let in_chain: Vec<Option<usize>> =
        (0..n).map(|i| chain.iter().position(|s| (s.name.as_str(), s.kind) == key(i))).collect();
    if insert && in_chain.iter().all(Option::is_none) {
        return None;
    }
    if !insert && in_chain.iter().any(Option::is_none) {
        return None;
    }
    let edges = t.dag.edges();
    let mut preds = vec![0usize; n];
    for &(_, b) in &edges {
        preds[b] += 1;
    }
    let mut placed = vec![false; n];
    // The merged chain: Ok(existing position) or Err(tenant node, new).
    let mut out: Vec<Result<usize, usize>> = Vec::with_capacity(chain.len() + n);
    let mut positions = vec![usize::MAX; n];
    let mut pos = 0;
    loop {
        let ready_new = (0..n).find(|&i| !placed[i] && preds[i] == 0 && in_chain[i].is_none());
        let (i, from) = if pos < chain.len() {
            match (0..n).find(|&i| in_chain[i] == Some(pos)) {
                None => {
                    out.push(Ok(pos));
                    pos += 1;
                    continue;
                }
                Some(i) if preds[i] == 0 => {
                    pos += 1;
                    (i, Ok(pos - 1))
                }
                Some(_) => match ready_new {
                    Some(j) if insert => (j, Err(j)),
                    _ => return None,
                },
            }
        } else {
            match ready_new {
                Some(j) if insert => (j, Err(j)),
                _ => break,
            }
        };
        placed[i] = true;
        positions[i] = out.len();
        out.push(from);
        for &(a, b) in &edges {
            if a == i {
                preds[b] -= 1;
            }
        }
    }
    placed.iter().all(|&p| p).then_some((out, positions))
}

/// Plans `tenants` on regions of `region_luts` LUTs, at most `regions` of them; `area` gives a
/// task's LUTs (the profile's, or a dummy's own). Errors name what does not fit.
pub fn plan(
    tenants: &[Tenant],
    area: &dyn Fn(&TaskSpec) -> Result<u64, String>,
    regions: u64,
    region_luts: u64,
) -> Result<Plan, String> {
    plan_with(tenants, area, regions, region_luts, Options::default())
}

/// What the planner may do (both on by default; off, to compare against).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Share task instances between tenants (skipping and partial sharing); off, every tenant
    /// gets a chain of its own.
    pub share: bool,
    /// Place several chains' segments in one region; off, every segment gets a region.
    pub concatenate: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options { share: true, concatenate: true }
    }
}

/// [`plan`] with `opts`.
pub fn plan_with(
    tenants: &[Tenant],
    area: &dyn Fn(&TaskSpec) -> Result<u64, String>,
    regions: u64,
    region_luts: u64,
    opts: Options,
) -> Result<Plan, String> {
    let mut by_size: Vec<usize> = (0..tenants.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(tenants[i].dag.nodes().len()));
    let mut chains: Vec<Chain> = Vec::new();
    let mut placements: Vec<Option<Placement>> = vec![None; tenants.len()];
    // Parallel tenants: (tenant, chain, each branch's positions).
    let mut forks: Vec<(usize, usize, Vec<Range<usize>>)> = Vec::new();
    for &ti in &by_size {
        let t = &tenants[ti];
        let luts: Vec<u64> =
            t.tasks.iter().map(area).collect::<Result<_, _>>().map_err(|e| format!("{}: {e}", t.name))?;
        if t.parallel {
            // Its own chain: the prefix, each branch, the suffix, in that order.
            let shape = t.fork_shape().map_err(|e| format!("{}: {e}", t.name))?;
            if t.tasks.len() > MAX_CHAIN {
                return Err(format!("{}: {} tasks in one chain (at most {MAX_CHAIN})", t.name, t.tasks.len()));
            }
            let order: Vec<usize> =
                shape.prefix.iter().chain(shape.branches.iter().flatten()).chain(&shape.suffix).copied().collect();
            let mut positions = vec![0; t.tasks.len()];
            let slots = order
                .iter()
                .enumerate()
                .map(|(p, &i)| {
                    positions[i] = p;
                    Slot { name: t.dag.nodes()[i].clone(), kind: t.tasks[i].kind(), luts: luts[i] }
                })
                .collect();
            chains.push(Chain { slots, segments: Vec::new(), tenants: vec![ti], exclusive: true });
            // Where each branch starts and ends, for the cuts and the fork below.
            let mut at = shape.prefix.len();
            let bounds: Vec<Range<usize>> = shape
                .branches
                .iter()
                .map(|b| {
                    at += b.len();
                    at - b.len()..at
                })
                .collect();
            forks.push((ti, chains.len() - 1, bounds));
            placements[ti] = Some(Placement { chain: chains.len() - 1, skip: 0, positions, fork: None });
            continue;
        }
        let embedded = if opts.share {
            chains
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.exclusive)
                .find_map(|(ci, c)| merge(t, &c.slots, false).map(|(_, p)| (ci, p)))
        } else {
            None
        };
        if let Some((ci, positions)) = embedded {
            for (i, &p) in positions.iter().enumerate() {
                chains[ci].slots[p].luts = chains[ci].slots[p].luts.max(luts[i]);
            }
            chains[ci].tenants.push(ti);
            placements[ti] = Some(Placement { chain: ci, skip: 0, positions, fork: None });
            continue;
        }
        // Extend the chain sharing the most tasks with it, if any does.
        let best = chains
            .iter()
            .enumerate()
            .filter(|(_, c)| opts.share && !c.exclusive)
            .filter_map(|(ci, c)| merge(t, &c.slots, true).map(|m| (ci, m)))
            .filter(|(ci, (out, _))| chains[*ci].slots.len() + out.iter().filter(|s| s.is_err()).count() <= MAX_CHAIN)
            .max_by_key(|(_, (out, _))| (out.iter().filter(|s| s.is_ok()).count(), std::cmp::Reverse(out.len())));
        let (ci, out, positions) = match best {
            Some((ci, (out, positions))) => (ci, out, positions),
            None => {
                if t.tasks.len() > MAX_CHAIN {
                    return Err(format!("{}: {} tasks in one chain (at most {MAX_CHAIN})", t.name, t.tasks.len()));
                }
                chains.push(Chain { slots: Vec::new(), segments: Vec::new(), tenants: Vec::new(), exclusive: false });
                let (out, positions) = merge_new(t);
                (chains.len() - 1, out, positions)
            }
        };
        // Rebuild the chain's slots and move the tenants already on it to their new positions.
        let old = std::mem::take(&mut chains[ci].slots);
        let mut remap = vec![0usize; old.len()];
        let mut slots = Vec::with_capacity(out.len());
        for (p, s) in out.iter().enumerate() {
            match *s {
                Ok(q) => {
                    remap[q] = p;
                    slots.push(old[q].clone());
                }
                Err(i) => slots.push(Slot { name: t.dag.nodes()[i].clone(), kind: t.tasks[i].kind(), luts: 0 }),
            }
        }
        for (i, &p) in positions.iter().enumerate() {
            slots[p].luts = slots[p].luts.max(luts[i]);
        }
        chains[ci].slots = slots;
        for &other in &chains[ci].tenants {
            if let Some(pl) = placements[other].as_mut() {
                for p in pl.positions.iter_mut() {
                    *p = remap[*p];
                }
            }
        }
        chains[ci].tenants.push(ti);
        placements[ti] = Some(Placement { chain: ci, skip: 0, positions, fork: None });
    }
    // Every tenant was placed above.
    let mut tenants_out: Vec<Placement> = placements.into_iter().flatten().collect();
    for pl in &mut tenants_out {
        let len = chains[pl.chain].slots.len();
        let mine: u64 = pl.positions.iter().fold(0, |m, &p| m | 1 << p);
        pl.skip = !mine & if len == 64 { u64::MAX } else { (1u64 << len) - 1 };
    }
    // Segments: cut where the next task would overflow a region, and where a parallel
    // tenant's branches start and end.
    for (ci, c) in chains.iter_mut().enumerate() {
        let cuts: Vec<usize> =
            forks.iter().filter(|f| f.1 == ci).flat_map(|f| f.2.iter().flat_map(|r| [r.start, r.end])).collect();
        let mut start = 0;
        let mut used = 0u64;
        for (p, s) in c.slots.iter().enumerate() {
            if s.luts > region_luts {
                return Err(format!(
                    "chain {ci}: task `{}` ({}) needs {} LUTs, more than a region's {region_luts}",
                    s.name, s.kind, s.luts
                ));
            }
            if p > start && cuts.contains(&p) {
                c.segments.push(start..p);
                start = p;
                used = 0;
            }
            if used + s.luts > region_luts {
                c.segments.push(start..p);
                start = p;
                used = 0;
            }
            used += s.luts;
        }
        c.segments.push(start..c.slots.len());
    }
    // Each parallel tenant's fork: its branches' segments and their copies' skip masks.
    for (ti, ci, bounds) in &forks {
        let c = &chains[*ci];
        let len = c.slots.len();
        let all = if len == 64 { u64::MAX } else { (1u64 << len) - 1 };
        let branches = bounds
            .iter()
            .map(|b| {
                let first = c.segments.iter().position(|s| s.start == b.start).unwrap_or(0);
                let last = c.segments.iter().position(|s| s.end == b.end).unwrap_or(first);
                first..last + 1
            })
            .collect();
        let skips = bounds.iter().map(|b| all & !(b.clone().fold(0u64, |m, p| m | 1 << p))).collect();
        tenants_out[*ti].fork = Some(Fork { branches, skips });
    }
    // Regions: segments first-fit.
    let mut regions_out: Vec<RegionPlan> = Vec::new();
    for (ci, c) in chains.iter().enumerate() {
        for (si, seg) in c.segments.iter().enumerate() {
            let luts: u64 = c.slots[seg.clone()].iter().map(|s| s.luts).sum();
            let fits = |r: &&mut RegionPlan| {
                opts.concatenate && r.luts + luts <= region_luts && r.segments.iter().all(|&(c2, _)| c2 != ci)
            };
            match regions_out.iter_mut().find(fits) {
                Some(r) => {
                    r.luts += luts;
                    r.segments.push((ci, si));
                }
                None => regions_out.push(RegionPlan { luts, segments: vec![(ci, si)] }),
            }
        }
    }
    if regions_out.len() as u64 > regions {
        return Err(format!("regions: asked {}, available {regions} (of {region_luts} LUTs each)", regions_out.len()));
    }
    Ok(Plan { chains, tenants: tenants_out, regions: regions_out, regions_available: regions, region_luts })
}

/// A new chain of the tenant's tasks in its topological order.
fn merge_new(t: &Tenant) -> (Merged, Vec<usize>) {
    let mut positions = vec![0; t.tasks.len()];
    for (p, &i) in t.order.iter().enumerate() {
        positions[i] = p;
    }
    (t.order.iter().map(|&i| Err(i)).collect(), positions)
}

impl Plan {
    /// The plan as text, one line a chain, tenant and region (what `tern chain check` prints).
    pub fn describe(&self, tenants: &[Tenant]) -> Vec<String> {
        let mut out = Vec::new();
        for (ci, c) in self.chains.iter().enumerate() {
            let names: Vec<&str> = c.slots.iter().map(|s| s.name.as_str()).collect();
            let segs: Vec<String> = c
                .segments
                .iter()
                .enumerate()
                .map(|(si, seg)| {
                    let r = self.region_of(ci, si).map_or("-".into(), |r| r.to_string());
                    format!("{}..{} in region {r}", seg.start, seg.end)
                })
                .collect();
            out.push(format!("chain {ci}: {} ({})", names.join(" -> "), segs.join(", ")));
            for &ti in &c.tenants {
                let (Some(t), Some(pl)) = (tenants.get(ti), self.tenants.get(ti)) else { continue };
                let skipped: Vec<&str> =
                    (0..c.slots.len()).filter(|p| pl.skip >> p & 1 == 1).map(|p| c.slots[p].name.as_str()).collect();
                let how =
                    if skipped.is_empty() { "every task".to_string() } else { format!("skips {}", skipped.join(", ")) };
                out.push(format!("  tenant {}: {how}", t.name));
                if let Some(f) = &pl.fork {
                    let b: Vec<String> = f
                        .branches
                        .iter()
                        .map(|r| {
                            let names: Vec<&str> = c.segments[r.clone()]
                                .iter()
                                .flat_map(|seg| c.slots[seg.clone()].iter().map(|s| s.name.as_str()))
                                .collect();
                            names.join(" -> ")
                        })
                        .collect();
                    out.push(format!("    side by side (a copy each, joined after): {}", b.join(" | ")));
                }
            }
        }
        for (ri, r) in self.regions.iter().enumerate() {
            let segs: Vec<String> = r.segments.iter().map(|(c, s)| format!("chain {c} segment {s}")).collect();
            // A region of more LUTs than any device has: a plan without a board (Tern on a CPU).
            let of = if self.region_luts >= 1 << 40 { "unbounded".to_string() } else { self.region_luts.to_string() };
            out.push(format!("region {ri}: {} of {of} LUTs: {}", r.luts, segs.join(", ")));
        }
        out.push(format!("regions: {} of {}", self.regions.len(), self.regions_available));
        out
    }

    /// The region segment `si` of chain `ci` is placed in.
    pub fn region_of(&self, ci: usize, si: usize) -> Option<usize> {
        self.regions.iter().position(|r| r.segments.contains(&(ci, si)))
    }
}
