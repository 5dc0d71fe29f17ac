//! `tern hw report TENANT.toml [--with MORE.toml ...]`: tenants' plan projected onto a SuperNIC
//! profile (docs/chain.md, "Hardware report"): regions and area used, and per tenant its
//! DAG's projected rate (and what bounds it: the line, the credits, or a task beside the other
//! tenants sharing it) and latency on the board, cycle by cycle where the profile gives them.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;
use tern_chain::plan::Plan;
use tern_chain::tenant::{self, TaskSpec, Tenant};
use tern_hw::chain::{Bound, ChainModel};

use super::serve::{load_tenants, plan_on};
use crate::CmdResult;
use crate::hw::ReportArgs;

/// Whether a parsed file is a tenant file (TOML with `tenant` and `dag`).
pub fn is_tenant_file(t: &toml::Table) -> bool {
    t.contains_key("tenant") && t.contains_key("dag")
}

fn bound_name(b: &Bound) -> String {
    match b {
        Bound::Line => "the line".into(),
        Bound::Credits => "the chain's credits".into(),
        Bound::Task(k) => format!("task kind {k}"),
    }
}

/// What other tenants put through the task instances tenant `t` shares with them: (kind,
/// Gbit/s) for each shared position, each other tenant's `bandwidth_gbps`.
fn others_on(plan: &Plan, tenants: &[Tenant], t: usize) -> Vec<(&'static str, f64)> {
    let pl = &plan.tenants[t];
    let chain = &plan.chains[pl.chain];
    let mut out = Vec::new();
    for &u in &chain.tenants {
        if u == t {
            continue;
        }
        for &p in &plan.tenants[u].positions {
            if pl.positions.contains(&p) {
                out.push((tenant::profile_name(chain.slots[p].kind), tenants[u].bandwidth_gbps));
            }
        }
    }
    out
}

/// `tern hw report` for tenant files.
pub fn report(a: &ReportArgs) -> CmdResult {
    let mut files: Vec<PathBuf> = vec![a.config.clone()];
    files.extend(a.with.iter().cloned());
    let tenants = load_tenants(&files)?;
    let (plan, profile) = plan_on(&tenants, a.profile.as_deref().unwrap_or("supernic-htg9200"))?;
    let m = ChainModel::from_profile(&profile)?;
    let sizes: Vec<u64> = match a.frame_bytes {
        Some(b) => vec![u64::from(b)],
        None => vec![64, 1500],
    };
    let used: u64 = plan.regions.iter().map(|r| r.luts).sum();
    // What each tenant asks of the board (`chain check`'s uses): a report of a tenant that does
    // not fit says so, and exits 1.
    let uses: Vec<Vec<tenant::Use>> = tenants.iter().map(|t| t.uses(&profile, &m)).collect::<Result<_, _>>()?;
    let fits = uses.iter().flatten().all(tenant::Use::fits);
    let mut rows = Vec::new();
    for (t, ten) in tenants.iter().enumerate() {
        let pl = &plan.tenants[t];
        let kinds: Vec<&'static str> = ten.order.iter().map(|&i| tenant::profile_name(ten.tasks[i].kind())).collect();
        let others = others_on(&plan, &tenants, t);
        let rates: Vec<(u64, f64, String)> = sizes
            .iter()
            .map(|&s| {
                let (g, b) = m.dag_gbps(&kinds, s, &others);
                (s, g, bound_name(&b))
            })
            .collect();
        // Latency on the board: its port-to-port path (which holds one scheduling decision and
        // the core's pipeline), plus each task's own time where known.
        let mut task_ns = 0.0;
        let mut unknown = Vec::new();
        for &i in &ten.order {
            match &ten.tasks[i] {
                TaskSpec::Dummy { ns_per_packet, .. } => task_ns += *ns_per_packet as f64,
                spec => {
                    let key = format!("nt.{}.cycles", tenant::profile_name(spec.kind()));
                    match profile.cycles(&key) {
                        Some(c) => task_ns += c as f64 * 1000.0 / m.clock_mhz,
                        None => unknown.push(ten.dag.nodes()[i].clone()),
                    }
                }
            }
        }
        let n = ten.tasks.len() as f64;
        let snic_ns = m.board_ns + task_ns;
        // PANIC sends the packet back to its scheduler after every task: a decision more for
        // each task after the first.
        let panic_ns = snic_ns + (n - 1.0).max(0.0) * m.decision_ns();
        rows.push((t, pl.chain, kinds, rates, snic_ns, panic_ns, unknown));
    }
    if a.json {
        let j = json!({
            "profile": profile.name,
            "fits": fits,
            "regions": {"used": plan.regions.len(), "available": m.regions, "region_luts": m.region_luts},
            "area_luts": {"used": used, "available": m.regions * m.region_luts},
            "plan": plan.describe(&tenants),
            "decision_ns": m.decision_ns(),
            "tenants": rows.iter().map(|(t, c, kinds, rates, s, p, unknown)| json!({
                "tenant": tenants[*t].name, "chain": c, "tasks": kinds,
                "rates": rates.iter().map(|(sz, g, b)| json!({"frame_bytes": sz, "gbps": g, "bound": b})).collect::<Vec<_>>(),
                "latency_ns": {"snic": s, "panic": p, "tasks_without_cycles": unknown},
                "uses": uses[*t].iter().map(|u| json!({"what": u.what, "asked": u.asked, "available": u.available, "fits": u.fits()})).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&j)?);
        return Ok(if fits { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    println!(
        "{}: {} MHz, {} regions of {} LUTs, {} credits a chain; a decision {} cycles ({:.0} ns)",
        profile.name,
        m.clock_mhz,
        m.regions,
        m.region_luts,
        m.credits,
        m.schedule_cycles,
        m.decision_ns()
    );
    for l in plan.describe(&tenants) {
        println!("  {l}");
    }
    let avail = m.regions * m.region_luts;
    println!(
        "area: {used} LUTs of the regions' {avail} ({:.1}%), {} of {} regions",
        100.0 * used as f64 / avail.max(1) as f64,
        plan.regions.len(),
        m.regions
    );
    for (t, c, kinds, rates, s, p, unknown) in &rows {
        let ten = &tenants[*t];
        println!("tenant {} (chain {c}; tasks {}):", ten.name, kinds.join(", "));
        for u in uses[*t].iter().filter(|u| !u.fits()) {
            println!("  does not fit: {} {} asked, {} available", u.what, u.asked, u.available);
        }
        for (sz, g, b) in rates {
            println!("  {sz} B frames: {g:.1} Gbit/s projected, bound by {b}");
        }
        let note = if unknown.is_empty() {
            String::new()
        } else {
            format!(" + the time of {} (the profile gives no nt.NAME.cycles for them)", unknown.join(", "))
        };
        println!(
            "  latency: {s:.0} ns port to port (the board's {:.0} ns, one decision inside{note}); PANIC's design: {p:.0} ns",
            m.board_ns
        );
    }
    Ok(if fits { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
