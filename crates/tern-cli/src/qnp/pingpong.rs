//! `tern dispatch pingpong`.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tern_io::fault::FaultConfig;
use tern_qnp::QnpConfig;
use tern_qnp::pingpong::{PAYLOAD_FOR_128B, PingPongConfig, PingPongReport};

use crate::CmdResult;

/// Options of `tern dispatch pingpong`.
#[derive(Debug, Clone, Args)]
pub struct PingpongArgs {
    /// Requests to complete.
    #[arg(long, default_value_t = 100_000)]
    pub requests: u64,
    /// Requests outstanding at once, per client thread.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Probability a client packet (either direction) is lost.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Probability a client packet is duplicated.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Probability a client packet is reordered (overtaken by up to --reorder-window later ones).
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Most packets a reordered packet is overtaken by.
    #[arg(long, default_value_t = 4)]
    pub reorder_window: usize,
    /// Seed of the fault injector.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Server threads (SO_REUSEPORT on one port).
    #[arg(long, default_value_t = 1)]
    pub server_threads: usize,
    /// Client threads, each with its own socket.
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// Ping payload bytes (50 makes the paper's 128-byte frames); at most what a request
    /// carries under --profile (cpu: 255 packets of 1450 bytes).
    #[arg(long, default_value_t = PAYLOAD_FOR_128B)]
    pub payload: usize,
    /// Hardware profile whose QNP limits apply (built-in name or TOML file).
    #[arg(long, default_value = "cpu")]
    pub profile: String,
    /// Retransmissions before a request fails.
    #[arg(long, default_value_t = 10)]
    pub max_retries: u32,
    /// Request-table entries per server thread [default: the profile's table shared equally
    /// among server threads; 1024 if the profile is unbounded].
    #[arg(long)]
    pub request_table_entries: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl PingpongArgs {
    /// The run configuration, checked against the profile.
    pub fn config(&self) -> Result<PingPongConfig, Box<dyn std::error::Error>> {
        let faults = FaultConfig {
            loss: self.loss,
            duplicate: self.duplicate,
            reorder: self.reorder,
            reorder_window: self.reorder_window,
            seed: self.seed,
            ..FaultConfig::default()
        };
        faults.validate().map_err(|e| format!("--{e}"))?;
        let profile = tern_hw::Profile::resolve(&self.profile)?;
        crate::check_count("requests", self.requests, 1_000_000_000)?;
        crate::check_count("concurrency", self.concurrency as u64, 65_536)?;
        crate::check_count("server-threads", self.server_threads as u64, 1024)?;
        crate::check_count("client-threads", self.client_threads as u64, 1024)?;
        let base = QnpConfig::for_profile(&profile);
        let share = match profile.capacity(tern_hw::resource::QNP_REQUEST_TABLE_ENTRIES) {
            Some(total) => (total as usize / self.server_threads).max(1),
            None => base.request_table_entries,
        };
        let entries = self.request_table_entries.unwrap_or(share);
        if entries == 0 {
            return Err("--request-table-entries must be at least 1".into());
        }
        let qnp = QnpConfig { max_retries: self.max_retries, request_table_entries: entries, ..base };
        // Checked before the ping's bytes are made: what cannot fit in a request is refused here.
        let fits = qnp.payload_capacity() * usize::from(qnp.max_pkts_per_request);
        if self.payload > fits {
            return Err(format!(
                "--payload {}: a request carries at most {fits} bytes under profile {} ({} packets of {} payload bytes)",
                self.payload,
                profile.name,
                qnp.max_pkts_per_request,
                qnp.payload_capacity()
            )
            .into());
        }
        let mut ledger = tern_hw::Ledger::new(&profile);
        for i in 0..self.server_threads {
            qnp.check(&mut ledger, &format!("pingpong server thread {i}"))?;
        }
        Ok(PingPongConfig {
            requests: self.requests,
            concurrency: self.concurrency,
            server_threads: self.server_threads,
            client_threads: self.client_threads,
            payload: self.payload,
            faults,
            qnp,
            stall_timeout: Duration::from_secs(10),
            ..PingPongConfig::default()
        })
    }
}

/// The report as JSON.
pub fn report_json(r: &PingPongReport) -> serde_json::Value {
    serde_json::json!({
        "requests": r.requests,
        "completed": r.completed,
        "failed": r.failed,
        "duplicates_delivered": r.duplicates_delivered,
        "duplicate_handler_runs": r.duplicate_handler_runs,
        "retransmissions": r.retransmissions,
        "spurious_retransmissions": r.spurious_retransmissions,
        "throughput_rps": r.throughput_rps,
        "p50_us": r.p50_us,
        "p99_us": r.p99_us,
        "p999_us": r.p999_us,
        "elapsed_s": r.elapsed_s,
        "faults_injected": {"dropped": r.faults_injected.0, "duplicated": r.faults_injected.1, "reordered": r.faults_injected.2},
        // Every QNP drop reason, from 0 (docs/qnp.md §8).
        "drops": tern_qnp::DropReason::ALL
            .iter()
            .map(|d| {
                let n = r.drops.iter().find(|(k, _)| k == d.as_str()).map_or(0, |(_, v)| *v);
                (d.as_str().to_string(), serde_json::json!(n))
            })
            .collect::<serde_json::Map<_, _>>(),
    })
}

/// Prints the report for humans.
pub fn print_report(r: &PingPongReport) {
    println!(
        "  {} of {} requests completed, {} failed, {} duplicate responses delivered, {} duplicate handler runs",
        r.completed, r.requests, r.failed, r.duplicates_delivered, r.duplicate_handler_runs
    );
    println!(
        "  {:.0} requests/s, latency p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs ({:.2} s)",
        r.throughput_rps, r.p50_us, r.p99_us, r.p999_us, r.elapsed_s
    );
    let (d, u, o) = r.faults_injected;
    if d + u + o > 0 {
        println!("  faults injected: {d} packets dropped, {u} duplicated, {o} reordered");
    }
    if r.retransmissions > 0 {
        println!(
            "  {} requests retransmitted, {} of them spurious (the earlier copy was answered: late, not lost)",
            r.retransmissions, r.spurious_retransmissions
        );
    }
    if !r.drops.is_empty() {
        let list: Vec<String> = r.drops.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("  drops by reason: {}", list.join(", "));
    }
}

/// Runs the command.
pub fn run(a: &PingpongArgs) -> CmdResult {
    let cfg = a.config()?;
    // A bar on a terminal (none with --json), timed against what this machine does: about 200k
    // requests/s on a clean link, 20k/s once packets are lost (retransmission timeouts).
    let rate = if a.loss > 0.0 { 20_000.0 } else { 200_000.0 };
    let expected = std::time::Duration::from_secs_f64(a.requests as f64 / rate);
    let r = crate::progress::timed("pingpong", expected, a.json, || tern_qnp::pingpong::run(&cfg))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report_json(&r))?);
    } else {
        println!("PingPong over QNP/UDP on loopback ({} requests, concurrency {})", a.requests, a.concurrency);
        print_report(&r);
    }
    let ok = r.completed == r.requests && r.duplicates_delivered == 0 && r.duplicate_handler_runs == 0;
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
