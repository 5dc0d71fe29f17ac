//! Hitless per-tenant updates (docs/chain.md, "Updates"): one tenant's DAG or parameters
//! replaced in a running [`Runtime`](crate::runtime::Runtime) (`snic`) while the others go on
//! untouched.
//!
//! An update is validated and planned by the caller (the new tenant files, planned again),
//! then [`Updater::build`] checks that the new plan leaves every other tenant where it was and
//! builds the tenant's new task instances off the data path. [`Updater::apply`] waits until
//! the tenant's last update is complete (so at most two generations are ever live), then hands
//! the work to the data path and returns; the data path:
//!
//! 1. swaps the new tasks into each region holding the tenant's chain at the region's next
//!    batch boundary, keeping the current ones as the previous generation's (a wrapper runs a
//!    packet with the tasks of the generation stamped on it);
//! 2. once every region has them, the scheduler (core 0) stamps the new generation (and skip
//!    mask) on the tenant's packets as they enter their chain, from that round on;
//! 3. once the previous generation's packets have all left their chain (counted per
//!    generation where their credits come back), the scheduler retires its tasks.
//!
//! Packets already in a chain finish on the generation they entered with; packets waiting
//! in the tenant's queue have run no task and enter with the new one. Other tenants' tasks,
//! state, credits and queues are not touched, so they see no loss and no reordering; and the
//! thread that updates never waits on the data path (on a machine whose cores all run the
//! data path, each of its wake-ups takes a core from it). [`Updater::settle`] waits until an
//! update is complete.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::plan::{Placement, Plan};
use crate::runtime::{Factory, Mode, Scheduler, Shared, Swap};
use crate::task::NetworkTask;

/// Updates tenants of a running runtime (from [`Runtime::updater`](crate::runtime::Runtime::updater)).
#[derive(Debug, Clone)]
pub struct Updater(pub(crate) Arc<Shared>);

/// A region's new tasks for one tenant: (chain, instance, segment, a task for each wrapper of
/// the segment, `None` where the tenant skips it).
pub(crate) type RegionTasks = Vec<(usize, usize, usize, Vec<Option<Box<dyn NetworkTask>>>)>;

/// A tenant's next generation, built and checked, ready to [`apply`](Updater::apply).
#[derive(Debug)]
pub struct TenantUpdate {
    tenant: usize,
    placement: Placement,
    /// By data-path region: its new tasks.
    regions: Vec<(usize, RegionTasks)>,
}

impl TenantUpdate {
    /// The tenant it updates.
    pub fn tenant(&self) -> usize {
        self.tenant
    }
}

/// What an applied update does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The tenant's generation it puts in service (its updates so far).
    pub generation: u64,
    /// Regions that swap in the new tasks.
    pub regions: usize,
}

/// A plan's chains as updates compare them: each position's task name and kind, the
/// segments, the tenants riding it (in any order).
type Shape<'a> = Vec<(Vec<(&'a str, &'a str)>, &'a [std::ops::Range<usize>], Vec<usize>)>;

fn shape(p: &Plan) -> Shape<'_> {
    p.chains
        .iter()
        .map(|c| {
            let mut tenants = c.tenants.clone();
            tenants.sort_unstable();
            (c.slots.iter().map(|s| (s.name.as_str(), s.kind)).collect(), c.segments.as_slice(), tenants)
        })
        .collect()
}

impl Updater {
    /// Checks that `plan` (the tenants planned again with tenant `t`'s new DAG and
    /// parameters) changes nothing but `t`'s placement on its chain, and builds `t`'s new task
    /// instances with `factory` (`factory(t, node)`, as [`Runtime::new`] calls it). An error
    /// names what the update may not change (another tenant's placement, the chains, `t`'s
    /// chain or fork, how its packets are steered): those need a restart.
    ///
    /// [`Runtime::new`]: crate::runtime::Runtime::new
    pub fn build(&self, plan: &Plan, t: usize, factory: &mut Factory<'_>) -> Result<TenantUpdate, String> {
        let sh = &self.0;
        if sh.mode != Mode::Snic {
            return Err(format!("hitless updates run in mode snic (this runtime runs {})", sh.mode.name()));
        }
        let st = sh.update.lock().unwrap_or_else(|e| e.into_inner());
        let running = &st.plan;
        if t >= running.tenants.len() {
            return Err(format!("no tenant {t} (the runtime has {})", running.tenants.len()));
        }
        if plan.tenants.len() != running.tenants.len() {
            return Err(format!(
                "the new plan has {} tenants, the running one {}: adding or removing a tenant needs a restart",
                plan.tenants.len(),
                running.tenants.len()
            ));
        }
        if shape(plan) != shape(running)
            || plan.regions.iter().map(|r| &r.segments).ne(running.regions.iter().map(|r| &r.segments))
        {
            return Err(
                "the new plan has other chains or regions (tasks added, removed or renamed): a restart re-plans".into(),
            );
        }
        for (o, (a, b)) in plan.tenants.iter().zip(&running.tenants).enumerate() {
            if o != t && a != b {
                return Err(format!("the new plan moves tenant {o}, which this update is not for"));
            }
        }
        let (new, old) = (&plan.tenants[t], &running.tenants[t]);
        if new.chain != old.chain {
            return Err(format!(
                "tenant {t} would move from chain {} to chain {}: a restart re-plans",
                old.chain, new.chain
            ));
        }
        if new.fork != old.fork {
            return Err(format!("tenant {t}'s fork (its parallel branches) would change: a restart re-plans"));
        }
        let ci = new.chain;
        let chain = &plan.chains[ci];
        let n = sh.instances;
        let mut regions = Vec::new();
        for k in 0..n {
            let mut tasks: Vec<Option<Box<dyn NetworkTask>>> = chain.slots.iter().map(|_| None).collect();
            for (node, &p) in new.positions.iter().enumerate() {
                let mut task = factory(t, node)?;
                task.partition(k, n)?;
                if let Some(slot) = tasks.get_mut(p) {
                    *slot = Some(task);
                }
            }
            if k == 0 {
                let built = tasks.iter().flatten();
                let steer = built.clone().find_map(|x| x.steer());
                let one = built.clone().any(|x| x.one_instance());
                let stateful = built.clone().any(|x| x.cost().stateful);
                if steer != sh.steer[t] || one != sh.one[t] {
                    return Err(format!(
                        "tenant {t}'s new tasks steer its packets to instances differently (a NAT's ports, a cache kept to one instance): a restart re-plans"
                    ));
                }
                if stateful && !sh.stateful.get(ci).copied().unwrap_or(true) {
                    return Err(format!(
                        "tenant {t}'s new tasks keep per-flow state on a chain that spreads flows over instances: a restart re-plans"
                    ));
                }
            }
            // Cut into the chain's segments, each to its region.
            for (si, seg) in chain.segments.iter().enumerate().rev() {
                let part = tasks.split_off(seg.start.min(tasks.len()));
                let id = sh.route[ci][k][si];
                regions.push((id, vec![(ci, k, si, part)]));
            }
        }
        Ok(TenantUpdate { tenant: t, placement: new.clone(), regions })
    }

    /// Applies `u`: waits (at most `wait`) until the tenant's last update is complete, hands
    /// each region of its chain the new tasks and tells the scheduler; the data path does the
    /// rest (the module's steps 2 to 4) without this thread. Returns at once after that; see
    /// [`settle`](Self::settle) to wait until the new generation is in service and the previous
    /// one retired. An error if the runtime is not running or the last update is not complete
    /// after `wait` (nothing changed then).
    pub fn apply(&self, u: TenantUpdate, wait: Duration) -> Result<Applied, String> {
        let sh = &self.0;
        let t = u.tenant;
        let mut st = sh.update.lock().unwrap_or_else(|e| e.into_inner());
        if !sh.running.load(Ordering::Acquire) || sh.stop.load(Ordering::Acquire) {
            return Err("the runtime is not running".into());
        }
        let current = sh.generations[t].load(Ordering::Acquire);
        // 1. The last update must be complete: its generation stamped and the one before
        //    retired (two generations live at most).
        if !self.settle(t, wait) {
            return Err(format!(
                "tenant {t}'s generation {current} is not yet in service with the one before retired after {wait:?} ({} packet(s) of it in flight); nothing changed",
                self.in_flight(t, current.wrapping_sub(1))
            ));
        }
        // 2. Every region gets the new tasks, beside the current ones; the scheduler stamps
        //    the new generation once they all have them (3), and retires the old one's tasks
        //    once its packets have left (4).
        let next = current + 1;
        let g = (next & 0xff) as u8;
        let target = sh.installed[t].load(Ordering::Acquire) + u.regions.len() as u64;
        let regions = u.regions.len();
        for (id, tasks) in u.regions {
            self.send(id, Swap::Install { tenant: t, generation: g, segments: tasks });
        }
        *sh.next_generation[t].lock().unwrap_or_else(|e| e.into_inner()) = (g, u.placement.skip, target);
        sh.generations[t].store(next, Ordering::Release);
        sh.generation_changed.fetch_add(1, Ordering::Release);
        sh.placements[t].1.store(u.placement.skip, Ordering::Relaxed);
        st.plan.tenants[t] = u.placement;
        Ok(Applied { generation: next, regions })
    }

    /// Waits at most `wait` until tenant `t`'s last update is complete: its generation in
    /// service (stamped on the packets entering its chain) and the one before retired (its
    /// packets all left). Whether it is.
    pub fn settle(&self, t: usize, wait: Duration) -> bool {
        let sh = &self.0;
        let Some(settled) = sh.settled.get(t) else { return false };
        let started = Instant::now();
        loop {
            let want = sh.generations[t].load(Ordering::Acquire);
            if settled.load(Ordering::Acquire) == want {
                return true;
            }
            if started.elapsed() > wait || sh.stop.load(Ordering::Acquire) {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Packets of tenant `t`'s generation `g` (or an earlier one of its parity) still in their
    /// chain: moved in by the scheduler and not yet seen leaving.
    pub fn in_flight(&self, t: usize, g: u64) -> u64 {
        let sh = &self.0;
        let i = t * 2 + (g & 1) as usize;
        // What left first, then what went in: every packet counted as left was counted as
        // moved in before it reached a region (the ring's release and the count's acquire
        // order the two), so the difference never goes below what is really in flight.
        let done = left_chain(sh, i);
        let started = sh.started.get(i).map_or(0, |l| l.0.load(Ordering::Acquire));
        started.saturating_sub(done)
    }

    /// Each tenant's generation (its updates applied so far).
    pub fn generations(&self) -> Vec<u64> {
        self.0.generations.iter().map(|g| g.load(Ordering::Acquire)).collect()
    }

    /// By tenant: regions that have taken its new tasks so far (a launch each).
    pub fn launches(&self) -> Vec<u64> {
        self.0.installed.iter().map(|n| n.load(Ordering::Acquire)).collect()
    }

    fn send(&self, id: usize, swap: Swap) {
        send(&self.0, id, swap);
    }
}

/// Packets of tenant and generation parity `i` (`t × 2 + g mod 2`) that every core has seen
/// leave their chain.
fn left_chain(sh: &Shared, i: usize) -> u64 {
    (0..sh.cores).filter_map(|c| sh.done.get(i * sh.cores + c)).map(|l| l.0.load(Ordering::Acquire)).sum()
}

/// Hands `swap` to region `id`, taken at its next batch boundary.
fn send(sh: &Shared, id: usize, swap: Swap) {
    if let Some(q) = sh.swaps.get(id) {
        q.lock().unwrap_or_else(|e| e.into_inner()).push(swap);
        sh.launch_waiting[id].store(true, Ordering::Release);
    }
}

/// What updates keep between them (under one lock: one update at a time).
#[derive(Debug)]
pub(crate) struct UpdateState {
    /// The plan as updated so far.
    pub(crate) plan: Plan,
}

impl UpdateState {
    pub(crate) fn new(plan: Plan) -> UpdateState {
        UpdateState { plan }
    }
}

/// The scheduler's side of updates (core 0, each round): a tenant's next generation is
/// stamped once every region has its tasks, and the generation before is retired once its
/// packets have left.
#[derive(Debug)]
pub(crate) struct Progress {
    /// [`Shared::generation_changed`] as last seen.
    seen: u64,
    /// By tenant: the next generation, its skip mask and the installs it waits for.
    pending: Vec<Option<(u8, u64, u64)>>,
    /// By tenant: the generation (its count of updates) whose predecessor is draining.
    draining: Vec<Option<u64>>,
    /// Whether any tenant is pending or draining, and rounds since the drains were checked.
    busy: bool,
    rounds: u32,
}

impl Progress {
    pub(crate) fn new(tenants: usize) -> Progress {
        Progress { seen: 0, pending: vec![None; tenants], draining: vec![None; tenants], busy: false, rounds: 0 }
    }

    /// One round's work: a few loads when no update is under way.
    pub(crate) fn step(&mut self, s: &mut Scheduler, sh: &Shared) {
        let changed = sh.generation_changed.load(Ordering::Acquire);
        if changed != self.seen {
            // Read without waiting on an update that holds a tenant's slot: all of them, or
            // again next round.
            let mut next = Vec::with_capacity(sh.next_generation.len());
            for slot in &sh.next_generation {
                match crate::runtime::try_lock(slot) {
                    Some(n) => next.push(*n),
                    None => return,
                }
            }
            self.seen = changed;
            for (t, n) in next.into_iter().enumerate() {
                if n.0 != s.generation(t) {
                    self.pending[t] = Some(n);
                    self.busy = true;
                }
            }
        }
        if !self.busy {
            return;
        }
        self.rounds = self.rounds.wrapping_add(1);
        let mut busy = false;
        for t in 0..self.pending.len() {
            if let Some((g, skip, target)) = self.pending[t] {
                if sh.installed[t].load(Ordering::Acquire) >= target {
                    // Every region has the tasks: from now on packets enter on `g`.
                    s.set_generation(t, g, skip);
                    self.pending[t] = None;
                    self.draining[t] = Some(sh.generations[t].load(Ordering::Acquire));
                } else {
                    busy = true;
                    continue;
                }
            }
            if let Some(g) = self.draining[t] {
                // The generation before `g`: what went in (this core's count) less what left
                // (each core's, read every 16 rounds: lines other cores write).
                if !self.rounds.is_multiple_of(16) {
                    busy = true;
                    continue;
                }
                let i = t * 2 + (g.wrapping_sub(1) & 1) as usize;
                if s.started.get(i).copied().unwrap_or(0) > left_chain(sh, i) {
                    busy = true;
                    continue;
                }
                let ci = sh.placements[t].0;
                for ids in sh.route.get(ci).into_iter().flatten() {
                    for &id in ids {
                        send(sh, id, Swap::Retire { tenant: t });
                    }
                }
                self.draining[t] = None;
                sh.settled[t].store(g, Ordering::Release);
            }
        }
        self.busy = busy;
    }
}
