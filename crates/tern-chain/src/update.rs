//! Hitless per-tenant updates (docs/chain.md, "Updates"): one tenant's DAG or parameters
//! replaced in a running [`Runtime`](crate::runtime::Runtime) (`snic`) while the others go on
//! untouched.
//!
//! An update is validated and planned by the caller (the new tenant files, planned again),
//! then [`Updater::build`] checks that the new plan leaves every other tenant where it was and
//! builds the tenant's new task instances off the data path. [`Updater::apply`] then:
//!
//! 1. waits until no packet of the tenant's generation before the current one is in flight
//!    (so at most two generations are ever live);
//! 2. hands each region holding the tenant's chain its new tasks, which the region swaps in at
//!    its next batch boundary, keeping the current ones as the previous generation's (a
//!    wrapper runs a packet with the tasks of the generation stamped on it);
//! 3. once every region has them, tells the scheduler, which from its next round stamps the
//!    new generation (and skip mask) on the tenant's packets as they enter their chain;
//! 4. waits until the previous generation's packets have left their chain (counted per
//!    generation where their credits come back), and retires its tasks.
//!
//! Packets already in a chain finish on the generation they entered with; packets waiting
//! in the tenant's queue have run no task and enter with the new one. Other tenants' tasks,
//! state, credits and queues are not touched, so they see no loss and no reordering.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::plan::{Placement, Plan};
use crate::runtime::{Factory, Mode, Shared, Swap};
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

/// What an applied update did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The tenant's generation now (its updates so far).
    pub generation: u64,
    /// Regions that swapped in the new tasks.
    pub regions: usize,
    /// Whether the previous generation's packets had all left (and its tasks were retired)
    /// within the wait; if not, the next update waits for them first.
    pub drained: bool,
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

    /// Applies `u` (see the module's steps), waiting at most `wait` for each step the data
    /// path takes. An error if the runtime is not running, if the tenant's generation before
    /// last still has packets in flight after `wait` (nothing changed then), or if the data
    /// path did not take the update within `wait` (the regions keep both generations and run
    /// each packet with its own; the tenant stays on the current one).
    pub fn apply(&self, u: TenantUpdate, wait: Duration) -> Result<Applied, String> {
        let sh = &self.0;
        let t = u.tenant;
        let mut st = sh.update.lock().unwrap_or_else(|e| e.into_inner());
        if !sh.running.load(Ordering::Acquire) || sh.stop.load(Ordering::Acquire) {
            return Err("the runtime is not running".into());
        }
        if st.stuck[t] {
            return Err(format!("tenant {t}'s last update was not taken by the data path: a restart is needed"));
        }
        let current = sh.generations[t].load(Ordering::Acquire);
        // 1. The generation before the current one must be gone (its tasks are replaced now).
        if st.retire_pending[t] {
            let left = self.wait_drained(t, current.wrapping_sub(1), wait);
            if left > 0 {
                return Err(format!(
                    "tenant {t}'s generation {} still has {left} packet(s) in its chain after {wait:?}; nothing changed",
                    current - 1
                ));
            }
            self.retire_all(t);
            st.retire_pending[t] = false;
        }
        // 2. Every region gets the new tasks, beside the current ones.
        let next = current + 1;
        let g = (next & 0xff) as u8;
        let target = sh.installed[t].load(Ordering::Acquire) + u.regions.len() as u64;
        let regions = u.regions.len();
        for (id, tasks) in u.regions {
            self.send(id, Swap::Install { tenant: t, generation: g, segments: tasks });
        }
        let started = Instant::now();
        while sh.installed[t].load(Ordering::Acquire) < target {
            if sh.stop.load(Ordering::Acquire) || started.elapsed() > wait {
                st.stuck[t] = true;
                return Err(format!("the regions did not take tenant {t}'s new tasks within {wait:?}"));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        // 3. The scheduler stamps the new generation from its next round.
        *sh.next_generation[t].lock().unwrap_or_else(|e| e.into_inner()) = (g, u.placement.skip);
        sh.generation_changed.fetch_add(1, Ordering::Release);
        let started = Instant::now();
        while sh.stamping[t].load(Ordering::Acquire) != u64::from(g) {
            if sh.stop.load(Ordering::Acquire) || started.elapsed() > wait {
                st.stuck[t] = true;
                return Err(format!("the scheduler did not take tenant {t}'s generation {next} within {wait:?}"));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
        sh.generations[t].store(next, Ordering::Release);
        sh.placements[t].1.store(u.placement.skip, Ordering::Relaxed);
        st.plan.tenants[t] = u.placement;
        // 4. The previous generation's packets leave; then its tasks go.
        let drained = self.wait_drained(t, current, wait) == 0;
        if drained {
            self.retire_all(t);
        } else {
            st.retire_pending[t] = true;
        }
        Ok(Applied { generation: next, regions, drained })
    }

    /// Packets of tenant `t`'s generation `g` (or an earlier one of its parity) still in their
    /// chain: moved in by the scheduler and not yet seen leaving.
    pub fn in_flight(&self, t: usize, g: u64) -> u64 {
        let sh = &self.0;
        let i = t * 2 + (g & 1) as usize;
        // What left first, then what went in: every packet counted as left was counted as
        // moved in before it reached a region (the ring's release and the count's acquire
        // order the two), so the difference never goes below what is really in flight.
        let done: u64 =
            (0..sh.cores).filter_map(|c| sh.done.get(i * sh.cores + c)).map(|l| l.0.load(Ordering::Acquire)).sum();
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

    /// Waits up to `wait` for generation `g` of tenant `t` to leave; returns what is left.
    fn wait_drained(&self, t: usize, g: u64, wait: Duration) -> u64 {
        let started = Instant::now();
        loop {
            let left = self.in_flight(t, g);
            if left == 0 || started.elapsed() > wait || self.0.stop.load(Ordering::Acquire) {
                return left;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn send(&self, id: usize, swap: Swap) {
        let sh = &self.0;
        if let Some(q) = sh.swaps.get(id) {
            q.lock().unwrap_or_else(|e| e.into_inner()).push(swap);
            sh.launch_waiting[id].store(true, Ordering::Release);
        }
    }

    /// Retires tenant `t`'s previous generation in every region of its chain.
    fn retire_all(&self, t: usize) {
        let sh = &self.0;
        let ci = sh.placements[t].0;
        for ids in sh.route.get(ci).into_iter().flatten() {
            for &id in ids {
                self.send(id, Swap::Retire { tenant: t });
            }
        }
    }
}

/// What updates keep between them (under one lock: one update at a time).
#[derive(Debug)]
pub(crate) struct UpdateState {
    /// The plan as updated so far.
    pub(crate) plan: Plan,
    /// By tenant: its previous generation's tasks are still in the regions (its packets had
    /// not all left when its update returned).
    pub(crate) retire_pending: Vec<bool>,
    /// By tenant: an update the data path did not take (stopped, or past the wait).
    pub(crate) stuck: Vec<bool>,
}

impl UpdateState {
    pub(crate) fn new(plan: Plan) -> UpdateState {
        let n = plan.tenants.len();
        UpdateState { plan, retire_pending: vec![false; n], stuck: vec![false; n] }
    }
}
