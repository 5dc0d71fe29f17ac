//! `tern bench flow`: the cached fast path against the slow path alone (64 B and 1024 B frames,
//! the paper's action set), and the OFU configuration rate. JSON and plots under `reports/`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use tern_flow::bench::{self, PathKind, Phase, Rig};

use super::plot;
use crate::CmdResult;
use crate::env::Environment;

/// Options of `tern bench flow`.
#[derive(Debug, Clone, Args)]
pub struct FlowBenchArgs {
    /// Shorter phases and fewer rounds: well under two minutes.
    #[arg(long)]
    pub quick: bool,
    /// Rounds (each runs the fast and the slow path once per frame size, alternating)
    /// [default: 5, quick 3].
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Measured seconds per path per round [default: 1.0, quick 0.3].
    #[arg(long)]
    pub phase_secs: Option<f64>,
    /// Flows (distinct 5-tuples) in the traffic.
    #[arg(long, default_value_t = 1000)]
    pub flows: usize,
    /// IPv4 routes in the slow path's table (1 to 10,000,000).
    #[arg(long, default_value_t = 10_000)]
    pub routes: usize,
    /// ACL rules in the slow path (0 to 100,000).
    #[arg(long, default_value_t = 120)]
    pub acl: usize,
    /// Frame sizes, bytes.
    #[arg(long, value_delimiter = ',', default_value = "64,1024")]
    pub sizes: Vec<usize>,
    /// Rules per configuration-rate run [default: 100000, quick 20000].
    #[arg(long)]
    pub config_rules: Option<usize>,
    /// Directory for flow.json and the plots.
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Print the JSON report on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Instead: Tern's IPv4 LPM and 5-tuple tables against DPDK's rte_lpm and rte_hash, same
    /// entries and keys, alternating (needs a build with `--features dpdk`; see the README).
    /// Writes reports/flow-dpdk.json.
    #[arg(long)]
    pub against_dpdk: bool,
}

fn against_dpdk(a: &FlowBenchArgs, rounds: usize, secs: f64) -> CmdResult {
    let env = Environment::current();
    let say = |s: String| if a.json { eprintln!("{s}") } else { println!("{s}") };
    say(format!("environment: {}", env.describe()));
    say(format!(
        "{} lookups per pass in bulks of {}, 90% hits; {rounds} alternating rounds of {secs} s",
        tern_dpdk::LOOKUPS,
        tern_dpdk::BULK
    ));
    let results = tern_dpdk::compare(rounds, secs)?;
    let mut lpm = serde_json::Map::new();
    let mut em = serde_json::Map::new();
    for c in &results {
        say(format!(
            "{:<5} {:<15} {:>7} entries: tern {:>7.1} M lookups/s, dpdk {:>7.1} M/s: tern/dpdk {:.2} ({} answers differ)",
            c.table,
            c.size,
            c.entries,
            c.tern_per_s / 1e6,
            c.dpdk_per_s / 1e6,
            c.ratio(),
            c.mismatches
        ));
        let m = if c.table == "lpm4" { &mut lpm } else { &mut em };
        m.insert(c.size.to_string(), json!(c.ratio()));
    }
    let report = json!({
        "bench": "flow-dpdk",
        "environment": env,
        "lpm4_tern_over_dpdk": lpm,
        "em_tern_over_dpdk": em,
        "results": results.iter().map(|c| json!({
            "table": c.table, "size": c.size, "entries": c.entries, "tern_lookups_per_s": c.tern_per_s,
            "dpdk_lookups_per_s": c.dpdk_per_s, "tern_over_dpdk": c.ratio(), "mismatches": c.mismatches,
        })).collect::<Vec<_>>(),
    });
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let path = a.out.join("flow-dpdk.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
    say(format!("wrote {}", path.display()));
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    if results.iter().any(|c| c.mismatches > 0) {
        return Err("Tern and DPDK answered some lookups differently".into());
    }
    Ok(ExitCode::SUCCESS)
}

fn phase_json(p: &Phase) -> serde_json::Value {
    json!({"pps": p.pps, "loop_pps": p.loop_pps, "batch_p50_ns": p.batch_p50_ns, "batch_p99_ns": p.batch_p99_ns, "hit_ratio": p.hit_ratio, "forwarded_ratio": p.forwarded_ratio, "clock_overhead_ns": p.clock_ns})
}

/// `tern bench flow`.
pub fn run(a: &FlowBenchArgs) -> CmdResult {
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 5 });
    crate::check_count("rounds", rounds as u64, 1000)?;
    crate::check_count("flows", a.flows as u64, 10_000_000)?;
    crate::check_count("routes", a.routes as u64, 10_000_000)?;
    if a.acl > 100_000 {
        return Err(format!("--acl {}: must be in 0..=100000", a.acl).into());
    }
    if let Some(n) = a.config_rules {
        crate::check_count("config-rules", n as u64, 10_000_000)?;
    }
    let secs = a.phase_secs.unwrap_or(if a.quick { 0.3 } else { 1.0 });
    if !(secs > 0.0 && secs <= 60.0) {
        return Err("--phase-secs must be in (0, 60]".into());
    }
    if a.flows == 0 || a.routes == 0 || a.sizes.iter().any(|&s| !(60..=1514).contains(&s)) {
        return Err("--flows and --routes must be at least 1; --sizes within 60..=1514".into());
    }
    if a.against_dpdk {
        return against_dpdk(a, rounds, secs);
    }
    let config_rules = a.config_rules.unwrap_or(if a.quick { 20_000 } else { 100_000 }).max(1);
    let env = Environment::current();
    let say = |s: String| if a.json { eprintln!("{s}") } else { println!("{s}") };
    say(format!("environment: {}", env.describe()));
    say(format!(
        "tables: {} routes, {} ACL rules; {} flows; action set: set eth_src, set eth_dst, dec_ttl, push_vlan, checksum, output; Mpps over the switch's own time (receive, process, transmit; the clock's own cost per batch, two readings back to back, taken off)",
        a.routes, a.acl, a.flows
    ));
    let t = bench::tables(a.routes, a.acl);
    // The paper's own comparison (§6.4, Figure 23) is its NIC against OVS-DPDK's software fast
    // path; the N3000 model projects the NIC side for the same frames and action set.
    let n3000 =
        tern_hw::Profile::builtin("accelsdp-n3000").ok().and_then(|p| tern_hw::flow::FlowModel::from_profile(&p));
    let phase = Duration::from_secs_f64(secs);
    let mut sizes = Vec::new();
    let mut ratios = Vec::new();
    let mut hw_ratios = Vec::new();
    let bar = crate::progress::bar((a.sizes.len() * rounds) as u64, "bench flow", a.json);
    for &size in &a.sizes {
        bar.set_message(format!("{size} B frames"));
        let frames = bench::frames(&t, a.flows, size);
        let mut fast = Rig::new(&t, PathKind::Fast);
        let mut slow = Rig::new(&t, PathKind::Slow);
        // Warm-up: the fast path's first pass installs a rule per flow.
        fast.phase(&frames, Duration::from_millis(100));
        slow.phase(&frames, Duration::from_millis(100));
        let (mut f, mut s) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            // Alternate which path goes first.
            if r % 2 == 0 {
                f.push(fast.phase(&frames, phase));
                s.push(slow.phase(&frames, phase));
            } else {
                s.push(slow.phase(&frames, phase));
                f.push(fast.phase(&frames, phase));
            }
            bar.inc(1);
        }
        let med = |v: &[Phase], g: fn(&Phase) -> f64| bench::median(&v.iter().map(g).collect::<Vec<_>>());
        let (fp, sp) = (med(&f, |p| p.pps), med(&s, |p| p.pps));
        let (fl, sl) = (med(&f, |p| p.loop_pps), med(&s, |p| p.loop_pps));
        let ratio = fp / sp.max(1.0);
        // The per-round ratios (the two paths ran back to back in each round).
        let per_round: Vec<f64> = f.iter().zip(&s).map(|(a, b)| a.pps / b.pps.max(1.0)).collect();
        let lo = per_round.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = per_round.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        bar.suspend(|| say(format!(
            "{size:>5} B: fast {:.2} Mpps (batch p50 {:.0} ns, p99 {:.0} ns, hits {:.1}%) | slow only {:.2} Mpps (p50 {:.0} ns, p99 {:.0} ns) | fast/slow {ratio:.2}x [{lo:.2}-{hi:.2} over {rounds} rounds]  [clock {:.0} ns per batch taken off; with generator and sink: {:.2} / {:.2} Mpps]",
            fp / 1e6,
            med(&f, |p| p.batch_p50_ns),
            med(&f, |p| p.batch_p99_ns),
            100.0 * med(&f, |p| p.hit_ratio),
            sp / 1e6,
            med(&s, |p| p.batch_p50_ns),
            med(&s, |p| p.batch_p99_ns),
            med(&f, |p| p.clock_ns),
            fl / 1e6,
            sl / 1e6,
        )));
        let projected = n3000.as_ref().map(|m| m.project(size as u32, 6).packets_per_s);
        if let Some(hw) = projected {
            hw_ratios.push((size, hw / fp.max(1.0)));
            say(format!(
                "{size:>5} B: N3000 projected {:.1} Mpps = {:.1}x this software fast path (the paper's NIC-over-software comparison; a projection, not a measurement{})",
                hw / 1e6,
                hw / fp.max(1.0),
                if hw < fp { "; the N3000 is held to its 100 Gb/s line, mem ports have none" } else { "" }
            ));
        }
        if f.iter().chain(&s).any(|p| p.forwarded_ratio < 0.999) {
            say(format!("warning: {size} B: some frames did not come out of the switch"));
        }
        ratios.push((size, ratio, fp, sp));
        sizes.push(json!({
            "frame_bytes": size,
            "fast": {"median_pps": fp, "median_loop_pps": fl, "median_batch_p50_ns": med(&f, |p| p.batch_p50_ns), "median_batch_p99_ns": med(&f, |p| p.batch_p99_ns), "phases": f.iter().map(phase_json).collect::<Vec<_>>()},
            "slow": {"median_pps": sp, "median_loop_pps": sl, "median_batch_p50_ns": med(&s, |p| p.batch_p50_ns), "median_batch_p99_ns": med(&s, |p| p.batch_p99_ns), "phases": s.iter().map(phase_json).collect::<Vec<_>>()},
            "fast_over_slow": ratio,
            "fast_over_slow_per_round": {"min": lo, "max": hi},
            "projected_n3000_pps": projected,
            "projected_n3000_over_fast": projected.map(|hw| hw / fp.max(1.0)),
        }));
    }
    bar.finish_and_clear();
    let c = bench::config_rate(config_rules, rounds);
    let populate = c.em_populate_per_s.min(c.lpm_populate_per_s);
    say(format!(
        "configuration ({config_rules} rules, median of {rounds}): em populate {:.2} M/s, delete {:.2} M/s, update {:.2} M/s; lpm populate {:.2} M/s, delete {:.2} M/s (N3000, Table 5: 0.71-0.78 M/s populate)",
        c.em_populate_per_s / 1e6,
        c.em_delete_per_s / 1e6,
        c.update_per_s / 1e6,
        c.lpm_populate_per_s / 1e6,
        c.lpm_delete_per_s / 1e6
    ));
    let ratio_at = |b: usize| ratios.iter().find(|r| r.0 == b).map(|r| r.1);
    let mut report = json!({
        "bench": "flow",
        "environment": env,
        "options": {"rounds": rounds, "phase_secs": secs, "flows": a.flows, "routes": a.routes, "acl": a.acl, "config_rules": config_rules},
        "fast_over_slow_64b": ratio_at(64),
        "fast_over_slow_1024b": ratio_at(1024),
        "projected_n3000_over_fast_64b": hw_ratios.iter().find(|r| r.0 == 64).map(|r| r.1),
        "populate_per_s": populate,
        "config_rate": {"em_populate_per_s": c.em_populate_per_s, "em_delete_per_s": c.em_delete_per_s, "em_update_per_s": c.update_per_s, "lpm_populate_per_s": c.lpm_populate_per_s, "lpm_delete_per_s": c.lpm_delete_per_s},
        "sizes": sizes,
    });
    say(crate::reports::judge(&mut report, &TARGETS, None, &[]));
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let path = a.out.join("flow.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
    let mut written = vec![path];
    written.extend(plot::flow(&ratios, populate, &a.out)?);
    for w in &written {
        say(format!("wrote {}", w.display()));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `tern bench flow` is judged by (AccelSDP's evaluation, as Tern sets its targets): each
/// figure, its bound, and whether the figure must be at least the bound.
const TARGETS: [(&str, f64, bool); 2] = [("fast_over_slow_64b", 6.0, true), ("populate_per_s", 1e6, true)];
