//! `tern demo`: a short guided tour of what Tern does so far.

use std::process::ExitCode;

use clap::Args;
use tern_dispatch::pingpong::PingPongReport;

use crate::CmdResult;
use crate::pingpong::{PingpongArgs, print_report};

/// Options of `tern demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Requests per PingPong run.
    #[arg(long, default_value_t = 100_000)]
    pub requests: u64,
}

fn pingpong(requests: u64, loss: f64) -> Result<PingPongReport, Box<dyn std::error::Error>> {
    let args = PingpongArgs {
        requests,
        concurrency: 32,
        loss,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_window: 4,
        seed: 2026,
        server_threads: 1,
        client_threads: 1,
        payload: tern_dispatch::pingpong::PAYLOAD_FOR_128B,
        profile: "qingniao-u250".into(),
        max_retries: 20,
        request_table_entries: None,
        json: false,
    };
    Ok(tern_dispatch::pingpong::run(&args.config()?)?)
}

/// Runs the tour.
pub fn run(a: &DemoArgs) -> CmdResult {
    if a.requests == 0 {
        return Err("--requests must be at least 1".into());
    }
    println!("Tern runs SmartNIC offloads from five papers in software, and checks each configuration");
    println!("against the paper's hardware. This tour shows the first: QingNiao's request protocol, QNP.\n");

    let profile = tern_hw::Profile::builtin("qingniao-u250")?;
    println!("1. The hardware profile `{}`: {}", profile.name, profile.description);
    for r in [tern_hw::resource::QNP_REQUEST_TABLE_ENTRIES, tern_hw::resource::QNP_PKTS_PER_REQUEST] {
        println!("   {r:<28} {}", profile.capacity(r).map_or("unbounded".into(), |c| c.to_string()));
    }
    println!(
        "   request expiry {} ms; Eth+IPv4+UDP+QNP headers = {} bytes, so payloads start 64-byte aligned",
        profile.qnp.request_timeout_ms,
        tern_wire::ETH_IPV4_UDP_LEN + tern_wire::qnp::HEADER_LEN
    );
    println!("   The PingPong server below claims its request table from this profile: it fits.\n");

    println!("2. PingPong (QingNiao §5.2) over QNP on UDP loopback: 128-byte requests and responses,");
    println!("   {} requests, 32 outstanding, on a clean link.", a.requests);
    let clean = pingpong(a.requests, 0.0)?;
    print_report(&clean);

    println!("\n3. The same with 10% of the client's packets lost in each direction (Tern's fault");
    println!("   injector; this kernel has no netem). QNP retransmits unacknowledged requests; the server");
    println!("   suppresses duplicates, so each handler runs once and each response arrives once.");
    let lossy = pingpong(a.requests, 0.10)?;
    print_report(&lossy);

    let ok = |r: &PingPongReport| {
        r.completed == r.requests && r.failed == 0 && r.duplicates_delivered == 0 && r.duplicate_handler_runs == 0
    };
    println!();
    if ok(&clean) && ok(&lossy) {
        println!("Every request completed exactly once, with and without loss.");
        println!("Next: `tern dispatch pingpong --help`, `tern bench qnp`, `tern idl check <file.proto>`.");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("Some requests did not complete exactly once: see the counters above.");
        Ok(ExitCode::FAILURE)
    }
}
