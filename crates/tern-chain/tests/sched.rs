//! The scheduler against its reference twin: a naive model of the rule docs/chain.md states
//! ("The data path": `snic`, and instance parallelism), run side by side on random admissions, decisions and credits
//! coming back. Each decision must take the same packet to the same instance.
//!
//! The rule: of the tenants with a packet whose chain instance has a credit, the one with the
//! least virtual time goes (of equal times, the first tenant); a stateless chain's packet goes
//! to the next instance round robin that has a credit, one on another core than the
//! scheduler's first; a stateful chain's tenant has a lane an instance (the flow hash modulo
//! the instances) and of its lanes whose instance has a credit the oldest head goes. A tenant
//! idle until now starts at the virtual time of the last decision; a packet adds its length
//! over the tenant's bandwidth.

mod common;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use common::area;
use proptest::prelude::*;
use tern_chain::plan;
use tern_chain::runtime::{Arrival, Classify, Config, Scheduler};
use tern_chain::tenant::Tenant;
use tern_io::Pool;

const INSTANCES: usize = 2;
const QUEUE: usize = 8;

/// Three tenants: two on dummy chains (stateless) with different bandwidths, one firewall
/// (stateful), to 10.0.{0,1,2}.0/24.
fn tenants() -> Vec<Tenant> {
    let dummy = |name: &str, net: u8, gbps: f64, len: usize| {
        let mut s = format!(
            "tenant = \"{name}\"\nbandwidth_gbps = {gbps}\ndag = \"{}\"\n[ingress]\ndst = \"10.0.{net}.0/24\"\n",
            (1..=len).map(|n| format!("d{n}")).collect::<Vec<_>>().join(" -> ")
        );
        for n in 1..=len {
            s += &format!("[nt.d{n}]\nkind = \"dummy\"\n");
        }
        Tenant::parse(&s).unwrap()
    };
    vec![
        dummy("a", 0, 10.0, 2),
        dummy("b", 1, 25.0, 3),
        Tenant::parse(
            "tenant = \"fw\"\nbandwidth_gbps = 5.0\ndag = \"fw\"\n[ingress]\ndst = \"10.0.2.0/24\"\n[nt.fw]\nkind = \"firewall\"\nrules = [{ action = \"allow\", proto = \"udp\" }]\n",
        )
        .unwrap(),
    ]
}

#[derive(Debug, Clone)]
enum Op {
    /// A packet of tenant `t`, flow `sport`, `len` payload bytes.
    Admit {
        t: u8,
        sport: u16,
        len: u16,
    },
    Decide,
    /// A credit back to one of the pools that have some out (the `pick`th of them, counted
    /// round).
    Back {
        pick: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 1000u16..1016, 1u16..200).prop_map(|(t, sport, len)| Op::Admit { t, sport, len }),
        4 => Just(Op::Decide),
        2 => any::<u8>().prop_map(|pick| Op::Back { pick }),
    ]
}

/// The twin: per tenant its lanes of (packet id, arrival ns, length), its virtual time.
struct Twin {
    lanes: Vec<Vec<VecDeque<(u32, u64, usize)>>>,
    vt: Vec<f64>,
    global_vt: f64,
    inv_weight: Vec<f64>,
    chain: Vec<usize>,
    stateful: Vec<bool>,
    rr: Vec<usize>,
    credits: Vec<u64>,
    local: Vec<bool>,
}

impl Twin {
    /// The pool (and region: one each) of tenant `t`'s chain instance `k`.
    fn pool(&self, t: usize, k: usize) -> usize {
        self.chain[t] * INSTANCES + k
    }

    /// Tenant `t`'s instance (and lane) to go to, if one has a credit.
    fn choice(&self, t: usize) -> Option<usize> {
        let has = |k: usize| self.credits[self.pool(t, k)] > 0;
        if self.stateful[self.chain[t]] {
            let mut best: Option<(usize, u64)> = None;
            for k in 0..INSTANCES {
                if let Some(&(_, at, _)) = self.lanes[t][k].front()
                    && has(k)
                    && best.is_none_or(|(_, b)| at < b)
                {
                    best = Some((k, at));
                }
            }
            return best.map(|(k, _)| k);
        }
        if self.lanes[t][0].is_empty() {
            return None;
        }
        let order: Vec<usize> = (0..INSTANCES).map(|j| (self.rr[self.chain[t]] + j) % INSTANCES).collect();
        let remote = order.iter().copied().find(|&k| has(k) && !self.local[self.pool(t, k)]);
        remote.or_else(|| order.iter().copied().find(|&k| has(k) && self.local[self.pool(t, k)]))
    }

    /// The decision: (tenant, instance, packet id).
    fn decide(&mut self) -> Option<(usize, usize, u32)> {
        let mut best: Option<(usize, usize)> = None;
        for t in 0..self.lanes.len() {
            if let Some(k) = self.choice(t)
                && best.is_none_or(|(b, _)| self.vt[t] < self.vt[b])
            {
                best = Some((t, k));
            }
        }
        let (t, k) = best?;
        let lane = if self.stateful[self.chain[t]] { k } else { 0 };
        let (id, _, len) = self.lanes[t][lane].pop_front().unwrap();
        self.rr[self.chain[t]] = k + 1;
        self.global_vt = self.vt[t];
        self.vt[t] += len as f64 * self.inv_weight[t];
        let p = self.pool(t, k);
        self.credits[p] -= 1;
        Some((t, k, id))
    }
}

fn check(ops: &[Op], local: &[bool]) -> Result<(), TestCaseError> {
    let ts = tenants();
    let p = plan::plan(&ts, &area, 16, 100_000).unwrap();
    let chains = p.chains.len();
    let cfg = Config { queue: QUEUE, ..Config::default() };
    // Instance k of chain c runs in region c × 2 + k, on its credit pool of that number.
    let route: Vec<Vec<Vec<usize>>> =
        (0..chains).map(|c| (0..INSTANCES).map(|k| vec![c * INSTANCES + k]).collect()).collect();
    let stateful: Vec<bool> =
        (0..chains).map(|c| p.tenants.iter().zip(&ts).any(|(pl, t)| pl.chain == c && t.name == "fw")).collect();
    let mut s = Scheduler::new(&p, &ts, &cfg, INSTANCES, stateful.clone(), &route, chains * INSTANCES);
    let local: Vec<bool> = (0..chains * INSTANCES).map(|r| local[r % local.len()]).collect();
    s.set_local_regions(&local);
    let mut classify = Classify::new(&ts);
    let mut hashes = Classify::new(&ts);
    let mut twin = Twin {
        lanes: p
            .tenants
            .iter()
            .map(|pl| (0..if stateful[pl.chain] { INSTANCES } else { 1 }).map(|_| VecDeque::new()).collect())
            .collect(),
        vt: vec![0.0; ts.len()],
        global_vt: 0.0,
        inv_weight: ts.iter().map(|t| 1.0 / t.bandwidth_gbps).collect(),
        chain: p.tenants.iter().map(|pl| pl.chain).collect(),
        stateful: stateful.clone(),
        rr: vec![0; chains],
        credits: vec![u64::from(cfg.credits); chains * INSTANCES],
        local,
    };
    let pool = Pool::new(256, 2048);
    let t0 = Instant::now();
    let mut ids = 0u32;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Admit { t, sport, len } => {
                let t = usize::from(t);
                ids += 1;
                let mut payload = ids.to_be_bytes().to_vec();
                payload.resize(usize::from(len).max(4), 0);
                let pk = common::udp(&pool, [10, 9, 0, 1], [10, 0, t as u8, 7], sport, 80, &payload);
                let (_, hash) = hashes.tenant(pk.data()).unwrap();
                let lane = if stateful[twin.chain[t]] { (hash % INSTANCES as u64) as usize } else { 0 };
                let at_ns = i as u64 * 10;
                let fits = twin.lanes[t][lane].len() < QUEUE / twin.lanes[t].len();
                let plen = pk.len();
                let got = s.admit(Arrival { packet: pk, at: t0 + Duration::from_nanos(at_ns), port: 0 }, &mut classify);
                match got {
                    Ok(got_t) => {
                        prop_assert!(fits, "admitted past a full lane");
                        prop_assert_eq!(got_t, t);
                        if twin.lanes[t].iter().all(VecDeque::is_empty) {
                            twin.vt[t] = twin.vt[t].max(twin.global_vt);
                        }
                        twin.lanes[t][lane].push_back((ids, at_ns, plen));
                    }
                    Err((_, pk, reason)) => {
                        prop_assert!(!fits, "refused ({}) with room", reason);
                        prop_assert_eq!(reason, "queue_full");
                        pool.put(pk);
                    }
                }
            }
            Op::Decide => {
                let want = twin.decide();
                let got = s.decide();
                match (want, got) {
                    (None, None) => {}
                    (Some((t, k, id)), Some(d)) => {
                        let got_id = u32::from_be_bytes(d.item.packet.data()[42..46].try_into().unwrap());
                        prop_assert_eq!(
                            (usize::from(d.item.desc.tenant), usize::from(d.item.desc.instance), got_id),
                            (t, k, id),
                            "decision {} of the ops",
                            i
                        );
                        prop_assert_eq!(d.to.map(|(_, pool)| pool), Some(twin.pool(t, k)));
                        pool.put(d.item.packet);
                    }
                    (w, g) => prop_assert!(false, "twin {:?}, scheduler {:?}", w, g.map(|d| d.item.desc)),
                }
            }
            Op::Back { pick } => {
                let full = u64::from(cfg.credits);
                let out: Vec<usize> = (0..twin.credits.len()).filter(|&p| twin.credits[p] < full).collect();
                if !out.is_empty() {
                    let p = out[usize::from(pick) % out.len()];
                    twin.credits[p] += 1;
                    s.credit(p, 1);
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_scheduler_decides_as_its_twin(ops in prop::collection::vec(op(), 1..400), local in prop::collection::vec(any::<bool>(), 1..4)) {
        check(&ops, &local)?;
    }
}
