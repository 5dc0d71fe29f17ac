//! A packet's way through the plan, step by step (docs/chain.md, "Tracing"): its tenant, its
//! chain, and at each position whether it skipped the task or ran it and what became of it.
//! Sans I/O; the tasks are fresh instances, so a trace shows what a first packet meets.

use std::time::Instant;

use serde::Serialize;
use tern_io::Pool;

use crate::plan::Plan;
use crate::runtime::{Classify, Factory, build_chain};
use crate::task::{Cx, Verdict};
use crate::tenant::Tenant;

/// One position of the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The position, and its task's name and kind.
    pub position: usize,
    pub name: String,
    pub kind: &'static str,
    /// `skip` (not the tenant's task), `pass`, `reply` or `drop: REASON`.
    pub outcome: String,
}

/// A traced packet.
#[derive(Debug, Clone, Serialize)]
pub struct Trace {
    /// Its tenant (None: dropped before any chain, `drop` says why).
    pub tenant: Option<String>,
    /// Its chain and skip mask.
    pub chain: Option<usize>,
    pub skip: u64,
    /// The positions it met, in order (it stops at a drop or reply).
    pub steps: Vec<Step>,
    /// What became of it: `out` (sent on), `reply` (answered back), `drop: REASON`.
    pub fate: String,
    /// Its bytes at the end, and packets the tasks sent of their own (in JSON as hex strings,
    /// which `tern chain trace --packet` takes back).
    #[serde(serialize_with = "hex")]
    pub output: Vec<u8>,
    #[serde(serialize_with = "hex_each")]
    pub emitted: Vec<Vec<u8>>,
}

/// Bytes as lower-case hex, two digits a byte.
fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn hex<S: serde::Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex_of(b))
}

fn hex_each<S: serde::Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|b| hex_of(b)))
}

/// Traces `frame` through `plan` for `tenants`, with tasks from `factory`.
pub fn trace(plan: &Plan, tenants: &[Tenant], frame: &[u8], factory: &mut Factory<'_>) -> Result<Trace, String> {
    let pool = Pool::new(8, tern_io::DEFAULT_BUF_SIZE);
    let mut p = pool.packet();
    p.reserve_headroom(tern_io::DEFAULT_HEADROOM);
    p.extend_from_slice(frame).map_err(|n| format!("a frame of {n} bytes does not fit a buffer"))?;
    let mut t = Trace {
        tenant: None,
        chain: None,
        skip: 0,
        steps: Vec::new(),
        fate: String::new(),
        output: frame.to_vec(),
        emitted: Vec::new(),
    };
    let ti = match Classify::new(tenants).tenant(frame) {
        Ok((ti, _)) => ti,
        Err(r) => {
            t.fate = format!("drop: {r}");
            return Ok(t);
        }
    };
    let pl = plan.tenants.get(ti).ok_or("the plan does not hold every tenant")?;
    t.tenant = Some(tenants[ti].name.clone());
    t.chain = Some(pl.chain);
    t.skip = pl.skip;
    let mut wrappers = build_chain(plan, pl.chain, tenants.len(), factory, (0, 1))?;
    let mut emitted = Vec::new();
    let mut cx = Cx { now: Instant::now(), pool: &pool, emitted: &mut emitted, paced: false, port: 0 };
    t.fate = "out".into();
    for w in &mut wrappers {
        let mut step =
            Step { position: w.position, name: w.slot.name.clone(), kind: w.slot.kind, outcome: "skip".into() };
        if pl.skip >> (w.position & 63) & 1 == 0 {
            let verdict = w.run_one(ti, &mut p, &mut cx);
            step.outcome = match verdict {
                Verdict::Pass => "pass".into(),
                Verdict::Reply => "reply".into(),
                Verdict::Drop(r) => format!("drop: {r}"),
            };
        }
        let stop = step.outcome != "pass" && step.outcome != "skip";
        if stop {
            t.fate = step.outcome.clone();
        }
        t.steps.push(step);
        if stop {
            break;
        }
    }
    t.output = p.data().to_vec();
    t.emitted = emitted.iter().map(|e| e.data().to_vec()).collect();
    Ok(t)
}
