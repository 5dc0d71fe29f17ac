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
    /// Seconds each dispatch mode runs in the KV part.
    #[arg(long, default_value_t = 3.0)]
    pub dispatch_secs: f64,
}

/// Part 4: the KV GET service behind Tern's RSD and behind the software UDS dispatcher.
fn dispatch_part(secs: f64) -> Result<bool, Box<dyn std::error::Error>> {
    use std::time::Duration;
    use tern_dispatch::kv::{KvLayout, KvStore};
    use tern_dispatch::loadgen::{self, LoadOptions};
    use tern_dispatch::matcher::offload::{self, Workload};
    use tern_dispatch::server::{Mode, Server, ServerOptions, total};

    let layout = KvLayout { spec: tern_dispatch::synth::Spec::default(), workers: 2, keys: 120_000 };
    println!("\n4. L7 dispatch (QingNiao §3.3, §5.1): a KV GET service on an embedded LSM store (fjall),");
    println!(
        "   {} keys of 62 bytes in 24 partitions; {} rules of {} skip-and-checks × {} bytes send each",
        layout.keys, layout.spec.rules, layout.spec.checks, layout.spec.bytes
    );
    println!("   partition to one of {} workers. The client draws keys Zipf(0.9) within a partition.", layout.workers);
    let store = KvStore::temporary(None)?;
    store.load(&layout)?;
    let set = layout.rule_set();
    let mut results = Vec::new();
    for (mode, what) in [
        (Mode::Rsd, "Tern's RSD in each worker: compiled matcher on the first packet, ring to the rule's worker"),
        (Mode::SwUds, "software dispatcher: decode, loop over the rules, Unix socket to the worker"),
    ] {
        let opts = ServerOptions { mode, workers: layout.workers, dispatchers: 1, ..ServerOptions::default() };
        let server = Server::start(&opts, set.clone(), store.clone())?;
        let mut load = LoadOptions::new(server.addr(), layout);
        load.concurrency = 128;
        load.duration = Duration::from_secs_f64(0.2);
        loadgen::run(&load)?;
        load.duration = Duration::from_secs_f64(secs);
        let r = loadgen::run(&load)?;
        let d = total(&server.dispatcher_stats());
        server.stop()?;
        println!(
            "   {:<7} {:>8.0} GET/s  p50 {:>5.0} µs  p99 {:>5.0} µs  ({} answered, {} wrong, {} dispatcher drops) — {what}",
            mode.as_str(),
            r.rps,
            r.p50_us,
            r.p99_us,
            r.completed,
            r.failed + r.wrong_value + r.not_found,
            d.rsd.drops.iter().sum::<u64>() + d.handoff_full
        );
        results.push(r);
    }
    let ratio = if results[1].rps > 0.0 { results[0].rps / results[1].rps } else { 0.0 };
    println!("   rsd / sw-uds = {ratio:.2} in requests/s on this machine's cores (kernel UDP dominates the");
    println!("   cost per request here; `tern bench dispatch` sweeps all modes and rule shapes).");
    let profile = tern_hw::Profile::builtin("qingniao-u250")?;
    let rep = offload::report(&set, &profile, Workload { packets: 1, frame_bytes: 128 })?;
    if let Some(app) = rep.apps.first() {
        println!(
            "   On the paper's U250 these rules need {} RAM + {} CAM entries (of {} / {}): {}.",
            app.ram_entries,
            app.cam_entries,
            rep.ram_capacity.map_or("∞".into(), |c| c.to_string()),
            rep.cam_capacity.map_or("∞".into(), |c| c.to_string()),
            if rep.offloadable { "they fit" } else { "they do not fit" }
        );
        if let Some(p) = &app.projection {
            println!(
                "   Projected there: {} cycles per request, ingress latency {:.0} ns, {:.1} M requests/s ({}-bound).",
                p.cycles,
                p.ingress_latency_ns,
                p.requests_per_s / 1e6,
                p.bottleneck.as_str()
            );
        }
    }
    Ok(results.iter().all(|r| r.failed + r.wrong_value + r.not_found == 0 && r.completed > 0))
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
    if !(a.dispatch_secs > 0.0 && a.dispatch_secs <= 600.0) {
        return Err("--dispatch-secs must be in (0, 600]".into());
    }
    println!("Tern runs SmartNIC offloads from five papers in software, and checks each configuration");
    println!("against the paper's hardware. This tour shows the first, QingNiao: its request protocol (QNP) and its");
    println!("receive-side L7 dispatcher (RSD).\n");

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
    let kv_ok = dispatch_part(a.dispatch_secs)?;
    println!();
    if ok(&clean) && ok(&lossy) && kv_ok {
        println!("Every request completed exactly once, with and without loss, and every GET was answered right.");
        println!(
            "Next: `tern dispatch serve --help`, `tern bench dispatch --quick`, `tern hw report examples/dispatch/kv.toml`."
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!("Some requests did not complete exactly once: see the counters above.");
        Ok(ExitCode::FAILURE)
    }
}
