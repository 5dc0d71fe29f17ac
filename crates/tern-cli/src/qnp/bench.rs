//! `tern bench qnp`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tern_qnp::pingpong::{BenchConfig, PAYLOAD_FOR_128B, median};

use crate::CmdResult;
use crate::env::Environment;

/// Options of `tern bench qnp`.
#[derive(Debug, Clone, Args)]
pub struct QnpBenchArgs {
    /// Rounds; each runs both systems once, in alternating order.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 1.0)]
    pub phase_secs: f64,
    /// Requests outstanding at once.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Ping payload bytes (50 makes the paper's 128-byte frames); the raw echo's datagram, about
    /// 39 bytes more, must fit a 2048-byte buffer.
    #[arg(long, default_value_t = PAYLOAD_FOR_128B)]
    pub payload: usize,
    /// Do not pin the two threads to cores 0 and 1.
    #[arg(long)]
    pub no_pin: bool,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the benchmark.
pub fn run_qnp(a: &QnpBenchArgs) -> CmdResult {
    if !(a.phase_secs > 0.0 && a.phase_secs <= 600.0) {
        return Err("--phase-secs must be in (0, 600]".into());
    }
    crate::check_count("rounds", a.rounds as u64, 1000)?;
    crate::check_count("concurrency", a.concurrency as u64, 65_536)?;
    let cfg = BenchConfig {
        rounds: a.rounds,
        phase: Duration::from_secs_f64(a.phase_secs),
        concurrency: a.concurrency,
        payload: a.payload,
        pin: !a.no_pin,
    };
    let env = Environment::current();
    if !a.json {
        println!("tern bench qnp: QNP PingPong vs raw UDP echo, same sockets, 1 client + 1 server thread, batch 32");
        println!("{}", env.describe());
    }
    // Two systems per round, each a phase.
    let expected = cfg.phase * (2 * cfg.rounds) as u32;
    let r = crate::progress::timed("bench qnp", expected, a.json, || tern_qnp::pingpong::bench(&cfg))?;
    let qnp_rps = median(r.qnp.iter().map(|p| p.rps).collect());
    let raw_rps = median(r.raw.iter().map(|p| p.rps).collect());
    let ratio = if raw_rps > 0.0 { qnp_rps / raw_rps } else { 0.0 };
    let per_round: Vec<f64> =
        r.qnp.iter().zip(&r.raw).map(|(q, w)| if w.rps > 0.0 { q.rps / w.rps } else { 0.0 }).collect();
    let med = |f: fn(&tern_qnp::pingpong::PhaseResult) -> f64, v: &[tern_qnp::pingpong::PhaseResult]| {
        median(v.iter().map(f).collect())
    };
    if a.json {
        let v = serde_json::json!({
            "qnp_rps": qnp_rps,
            "raw_rps": raw_rps,
            "qnp_over_raw": ratio,
            "qnp_over_raw_per_round": per_round,
            "qnp_p50_us": med(|p| p.p50_us, &r.qnp),
            "qnp_p99_us": med(|p| p.p99_us, &r.qnp),
            "raw_p50_us": med(|p| p.p50_us, &r.raw),
            "raw_p99_us": med(|p| p.p99_us, &r.raw),
            "rounds": a.rounds,
            "phase_secs": a.phase_secs,
            "concurrency": a.concurrency,
            "datagram_bytes": r.datagram_bytes,
            "environment": env,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("{:<8} {:>12} {:>10} {:>10}", "system", "median rps", "p50 µs", "p99 µs");
        println!(
            "{:<8} {:>12.0} {:>10.1} {:>10.1}",
            "raw udp",
            raw_rps,
            med(|p| p.p50_us, &r.raw),
            med(|p| p.p99_us, &r.raw)
        );
        println!(
            "{:<8} {:>12.0} {:>10.1} {:>10.1}",
            "qnp",
            qnp_rps,
            med(|p| p.p50_us, &r.qnp),
            med(|p| p.p99_us, &r.qnp)
        );
        let rounds: Vec<String> = per_round.iter().map(|x| format!("{x:.3}")).collect();
        println!("qnp/raw = {ratio:.3} (median rps ratio; per round: {})", rounds.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
