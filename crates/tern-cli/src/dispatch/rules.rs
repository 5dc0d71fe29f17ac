//! `tern dispatch check` and `tern hw report` of a rule file: checked, mapped onto a profile's
//! Matcher, and projected.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tern_dispatch::matcher::offload::{self, OffloadReport, Workload};
use tern_dispatch::rules::{self, LoadError, Severity};
use tern_hw::{Profile, resource};

use crate::CmdResult;
use crate::hw::ReportArgs;

/// `tern dispatch check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The rule file (TOML; see docs/rules.md).
    pub config: PathBuf,
    /// Hardware profile to check the rules against (built-in name or TOML file). With a profile
    /// that bounds the Matcher, rules that do not fit it are errors.
    #[arg(long, default_value = "cpu")]
    pub profile: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

fn load(config: &std::path::Path, json: bool) -> Result<Result<rules::Loaded, ExitCode>, Box<dyn std::error::Error>> {
    match rules::load(config) {
        Ok(l) => Ok(Ok(l)),
        Err(LoadError::Invalid { path, invalid }) => {
            if json {
                let diags: Vec<_> = invalid.0.iter().map(diag_json).collect();
                let v = serde_json::json!({ "file": path, "ok": false, "diagnostics": diags });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for d in &invalid.0 {
                    eprintln!("{path}: {d}");
                }
                let errors = invalid.0.iter().filter(|d| d.severity == Severity::Error).count();
                eprintln!("{path}: {errors} error(s)");
            }
            Ok(Err(ExitCode::FAILURE))
        }
        Err(e) => Err(e.into()),
    }
}

fn diag_json(d: &rules::Diagnostic) -> serde_json::Value {
    let severity = if d.severity == Severity::Error { "error" } else { "warning" };
    serde_json::json!({ "severity": severity, "item": d.item, "message": d.message })
}

/// Whether a profile bounds the Matcher (a hardware target rather than `cpu`).
fn bounds_matcher(p: &Profile) -> bool {
    p.capacity(resource::MATCHER_CAM_ENTRIES).is_some() || p.capacity(resource::MATCHER_RAM_ENTRIES).is_some()
}

/// `tern dispatch check`.
pub fn check(a: &CheckArgs) -> CmdResult {
    let profile = Profile::resolve(&a.profile)?;
    let loaded = match load(&a.config, a.json)? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let set = &loaded.rules;
    // The report compiles every application's machine, so a rule the software cannot compile
    // is an error here too.
    let report = offload::report(set, &profile, Workload::default())?;
    let hardware = bounds_matcher(&profile);
    let ok = !hardware || report.offloadable;
    let path = a.config.display().to_string();
    if a.json {
        let v = serde_json::json!({
            "file": path,
            "ok": ok,
            "rules": set.rules.len(),
            "apps": set.apps.len(),
            "diagnostics": set.warnings.iter().map(diag_json).collect::<Vec<_>>(),
            "matcher": report,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for w in &set.warnings {
            eprintln!("{path}: {w}");
        }
        println!("{path}: {} rule(s) in {} app(s) are valid", set.rules.len(), set.apps.len());
        print_use(&report);
        if !report.problems.is_empty() {
            let what = if hardware { "error" } else { "note" };
            println!("not offloadable to a Matcher (the software dispatcher runs these rules as they are):");
            for p in &report.problems {
                let rules: Vec<String> = p.rules.iter().map(|r| format!("\"{r}\"")).collect();
                let who = if rules.is_empty() { String::new() } else { format!("rule {}: ", rules.join(", ")) };
                println!("  {what}: {who}{}", p.reason);
            }
        }
    }
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn cap(c: Option<u64>) -> String {
    c.map_or("unbounded".to_string(), |c| c.to_string())
}

fn print_use(r: &OffloadReport) {
    println!(
        "Matcher use under profile {}: {} RAM entries (of {}), {} CAM entries (of {}){}",
        r.profile,
        r.ram_entries,
        cap(r.ram_capacity),
        r.cam_entries,
        cap(r.cam_capacity),
        if r.offloadable { ", offloadable" } else { ", NOT offloadable" }
    );
    for a in &r.apps {
        println!(
            "  app {:<12} id {:<3} {:>4} rules  {:>4} entries  {:>3} states  widest check {} B  up to {} skip-and-checks",
            a.app, a.id, a.rules, a.ram_entries, a.states, a.widest_check, a.max_skip_and_checks
        );
    }
}

/// `tern hw report` of a dispatch rule file.
pub fn report(a: &ReportArgs) -> CmdResult {
    let frame_bytes = a.frame_bytes.unwrap_or(128);
    if a.packets == 0 || frame_bytes < 64 {
        return Err("--packets must be at least 1 and --frame-bytes at least 64".into());
    }
    let profile = Profile::resolve(a.profile.as_deref().unwrap_or("qingniao-u250"))?;
    let loaded = match load(&a.config, a.json)? {
        Ok(l) => l,
        Err(code) => return Ok(code),
    };
    let workload = Workload { packets: a.packets, frame_bytes };
    let r = offload::report(&loaded.rules, &profile, workload)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(if r.offloadable { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    print_use(&r);
    if !r.offloadable {
        // A projection of a rule set the Matcher cannot hold would be a number for hardware
        // that does not exist: say why instead, and fail.
        for p in &r.problems {
            println!("  cannot offload: {} ({})", p.reason, p.rules.join(", "));
        }
        println!(
            "the rule set does not fit profile {}'s Matcher, so no projection; `tern dispatch check --profile {}` says more",
            profile.name, profile.name
        );
        return Ok(ExitCode::FAILURE);
    }
    let Some(model) = tern_hw::rsd::RsdModel::from_profile(&profile) else {
        println!("profile {} models no RSD timing (no clock or [cycles]); try --profile qingniao-u250", profile.name);
        return Ok(ExitCode::SUCCESS);
    };
    println!(
        "RSD model: {} RSDs at {} MHz, {} + {}·k cycles per first packet, {} per stash hit; requests of {} packet(s) × {} B",
        model.parallel,
        model.clock_mhz,
        model.first_packet,
        model.skip_and_check,
        model.stash_hit,
        a.packets,
        frame_bytes
    );
    println!("  {:<12} {:>5} {:>7} {:>12} {:>12}  bottleneck", "app", "k", "cycles", "ingress ns", "Mrequests/s");
    for app in &r.apps {
        if let Some(p) = app.projection {
            println!(
                "  {:<12} {:>5} {:>7} {:>12.0} {:>12.2}  {}",
                app.app,
                p.skip_and_checks,
                p.cycles,
                p.ingress_latency_ns,
                p.requests_per_s / 1e6,
                p.bottleneck.as_str()
            );
        }
        for rc in &app.per_rule {
            let p = model.project(rc.skip_and_checks, a.packets, frame_bytes);
            println!(
                "    rule {:<18} {:>3} {:>7} {:>12.0} {:>12.2}  {}",
                rc.rule,
                rc.skip_and_checks,
                p.cycles,
                p.ingress_latency_ns,
                p.requests_per_s / 1e6,
                p.bottleneck.as_str()
            );
        }
    }
    if let Some(rss) = model.rss_cycles {
        println!("  (for comparison: an L3/4 RSS dispatch takes {rss} cycles)");
    }
    Ok(ExitCode::SUCCESS)
}
