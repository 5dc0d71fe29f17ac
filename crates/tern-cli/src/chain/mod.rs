//! `tern chain`: SuperNIC's tenants. `chain check` reads tenant files (docs/chain.md, "Tenant
//! files"): the DAG in the order packets take it, each task's kind, what the tenant asks of the
//! profile's board against what it has, and the plan of all of them together ("Plans").

pub mod bench;
pub(crate) mod fairbench;
pub mod inspect;
mod plot;
pub mod report;
pub mod serve;
pub mod sim;
pub mod stage;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use tern_chain::tenant::Tenant;

use crate::CmdResult;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Tenant files (TOML; examples/chain/web.toml).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The hardware profile (built-in name or TOML file); `cpu` has no SuperNIC board: nothing
    /// is limited and the plan's regions are unbounded.
    #[arg(long, default_value = "supernic-htg9200")]
    pub profile: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tern chain check`: exit 0 when every file is usable and fits, 1 otherwise.
pub fn check(a: &CheckArgs) -> CmdResult {
    let profile = tern_hw::Profile::resolve(&a.profile)?;
    // On a profile without a SuperNIC board (`cpu`) nothing is limited: no uses to check.
    let board = serve::Board::of(&profile)?;
    let mut all_ok = true;
    let mut out = Vec::new();
    let mut loaded = Vec::new();
    for f in &a.files {
        let file = f.display().to_string();
        let t = match Tenant::load(f) {
            Ok(t) => t,
            Err(e) => {
                all_ok = false;
                if !a.json {
                    println!("{e}");
                }
                out.push(json!({ "file": file, "ok": false, "error": e.message }));
                continue;
            }
        };
        let uses = match &board.model {
            Some(model) => t.uses(&profile, model)?,
            None => Vec::new(),
        };
        loaded.push(t.clone());
        let fits = uses.iter().all(|u| u.fits());
        all_ok &= fits;
        let names = t.dag.nodes();
        if a.json {
            out.push(json!({
                "file": file, "ok": fits, "tenant": t.name, "bandwidth_gbps": t.bandwidth_gbps,
                "dag": {
                    "order": t.dag.names(&t.order),
                    "edges": t.dag.edges().iter().map(|&(x, y)| [names[x].as_str(), names[y].as_str()]).collect::<Vec<_>>(),
                    "entries": t.dag.names(&t.dag.entries()), "exits": t.dag.names(&t.dag.exits()),
                },
                "tasks": names.iter().zip(&t.tasks).map(|(n, k)| json!({"name": n, "kind": k.kind()})).collect::<Vec<_>>(),
                "uses": uses.iter().map(|u| json!({"what": u.what, "asked": u.asked, "available": u.available, "fits": u.fits()})).collect::<Vec<_>>(),
            }));
        } else {
            println!("{file}: tenant {} asks {} Gbit/s, on {}", t.name, t.bandwidth_gbps, profile.name);
            let order: Vec<String> = t.order.iter().map(|&i| format!("{} ({})", names[i], t.tasks[i].kind())).collect();
            println!("  tasks in order: {}", order.join(", "));
            let edges: Vec<String> =
                t.dag.edges().iter().map(|&(x, y)| format!("{} -> {}", names[x], names[y])).collect();
            println!("  edges: {}", if edges.is_empty() { "none".to_string() } else { edges.join(", ") });
            for u in &uses {
                let verdict = if u.fits() { "fits" } else { "does not fit" };
                println!("  {}: {} asked, {} available: {verdict}", u.what, u.asked, u.available);
            }
        }
    }
    // The plan of every usable tenant together, on the profile's regions.
    let mut plan_json = serde_json::Value::Null;
    if !loaded.is_empty() {
        match serve::plan_on_board(&loaded, &profile, &board) {
            Ok(p) => {
                let lines = p.describe(&loaded);
                if !a.json {
                    match &board.model {
                        Some(m) => {
                            println!("plan on {} ({} regions of {} LUTs):", profile.name, m.regions, m.region_luts)
                        }
                        None => println!("plan on {} (no board: regions unbounded):", profile.name),
                    }
                    for l in &lines {
                        println!("  {l}");
                    }
                }
                plan_json = json!({ "ok": true, "text": lines, "plan": p });
            }
            Err(e) => {
                all_ok = false;
                if !a.json {
                    println!("plan: {e}");
                }
                plan_json = json!({ "ok": false, "error": e });
            }
        }
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(
                &json!({ "profile": profile.name, "ok": all_ok, "tenants": out, "plan": plan_json })
            )?
        );
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
