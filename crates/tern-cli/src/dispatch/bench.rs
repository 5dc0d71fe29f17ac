//! `tern bench dispatch`: the paper's sweeps for every dispatch mode, JSON and plots under
//! `reports/`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{Value, json};
use tern_dispatch::bench::{self, BenchOptions, Dimension, PointResult, Spread};
use tern_dispatch::kv::Backend;
use tern_dispatch::server::{Mode, Placement, ServerOptions, Transport};

use super::plot;
use crate::CmdResult;
use crate::env::Environment;

/// Options of `tern bench dispatch`.
#[derive(Debug, Clone, Args)]
pub struct DispatchBenchArgs {
    /// Reduced sweep (3 values per dimension, 1 round, shorter phases): under two minutes.
    #[arg(long)]
    pub quick: bool,
    /// Measure only the default point (4 checks, 32 rules, 5 bytes).
    #[arg(long, conflicts_with = "quick")]
    pub default_only: bool,
    /// Modes to run, comma-separated (rsd, rss, sw-ring, sw-uds).
    #[arg(long, value_delimiter = ',', default_value = "rsd,rss,sw-ring,sw-uds")]
    pub modes: Vec<Mode>,
    /// Rounds per point (each runs every mode once, in rotating order) [default: 3, quick 1].
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Rounds at the default point [default: 5, quick 3].
    #[arg(long)]
    pub default_rounds: Option<usize>,
    /// Measured seconds per mode per round [default: 1.0, quick 0.5].
    #[arg(long)]
    pub phase_secs: Option<f64>,
    /// Keys in the KV store (the paper loads 3 140 000).
    #[arg(long, default_value_t = 120_000)]
    pub keys: u64,
    /// The KV store: fjall (pure Rust, always built) or rocksdb (a build with `--features
    /// rocksdb`; see the README).
    #[arg(long, default_value = "fjall")]
    pub store: Backend,
    /// Server worker threads.
    #[arg(long, default_value_t = 2)]
    pub workers: u16,
    /// RSD threads (rsd with --rsd-placement dedicated) and software dispatcher threads
    /// (sw-ring, sw-uds).
    #[arg(long, default_value_t = 1)]
    pub dispatchers: u16,
    /// Where Tern's RSDs run: `dedicated` threads between the sockets and the workers, or in
    /// each `workers` thread (run to completion, no extra threads, as rss).
    #[arg(long, default_value = "workers")]
    pub rsd_placement: Placement,
    /// With the RSDs in the workers, how the socket group spreads requests over them: `rules`
    /// (the rules compiled into the group's classic BPF program, so a request reaches its
    /// worker's socket and needs no hand-off; see docs/dispatch.md) or `request-id` (sharded by
    /// request id; (W-1)/W of the requests then take a ring hop to their worker).
    #[arg(long, default_value = "rules", value_parser = ["rules", "request-id"])]
    pub socket_steering: String,
    /// What carries the requests: `udp` (kernel UDP on loopback) or `mem` (client and server in
    /// this process over tern-io rings, no kernel, so the dispatch step's own cost shows).
    #[arg(long, default_value = "udp")]
    pub transport: Transport,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    pub client_threads: usize,
    /// UDP flows per client thread.
    #[arg(long, default_value_t = 16)]
    pub flows: usize,
    /// GETs outstanding per client thread.
    #[arg(long, default_value_t = 128)]
    pub concurrency: usize,
    /// Cores of the server threads, comma-separated (all modes use the same) [default: any].
    #[arg(long, value_delimiter = ',')]
    pub server_cores: Vec<usize>,
    /// Cores of the client threads [default: any].
    #[arg(long, value_delimiter = ',')]
    pub client_cores: Vec<usize>,
    /// Where JSON and plots go.
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Print the JSON summary instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// The paper's 12 server cores (8 workers and 4 dispatchers, or 12 workers where there is no
/// dispatch stage) from the measured per-request costs.
fn projection_json(p: &PointResult, placement: Placement) -> Value {
    let mut o = serde_json::Map::new();
    o.insert("note".into(), json!("a projection from measured CPU time per request, not a measurement"));
    for (m, r) in &p.modes {
        o.insert(m.as_str().into(), json!(bench::project(*m, placement, r.median_costs(), 8, 4)));
    }
    Value::Object(o)
}

fn spread_json(s: Option<Spread>) -> Value {
    s.map_or(Value::Null, |s| json!({"min": s.min, "median": s.median, "max": s.max}))
}

fn ratios(p: &PointResult) -> Value {
    json!({
        "rsd_over_rss": p.ratio(Mode::Rss),
        "rsd_over_sw_ring": p.ratio(Mode::SwRing),
        "rsd_over_sw_uds": p.ratio(Mode::SwUds),
        "spread": {
            "rsd_over_rss": spread_json(p.ratio_spread(Mode::Rss)),
            "rsd_over_sw_ring": spread_json(p.ratio_spread(Mode::SwRing)),
            "rsd_over_sw_uds": spread_json(p.ratio_spread(Mode::SwUds)),
        },
    })
}

fn point_json(p: &PointResult) -> Value {
    let mut modes = serde_json::Map::new();
    for (m, r) in &p.modes {
        modes.insert(
            m.as_str().to_string(),
            json!({
                "rps": r.median_rps(),
                "rps_spread": spread_json(r.rps_spread()),
                "dispatch_ns_per_request": r.median_costs().dispatch_ns,
                "serve_ns_per_request": r.median_costs().serve_ns,
                "p50_us": r.median_p50_us(),
                "p99_us": r.median_p99_us(),
                "rps_per_round": r.rps,
                "p99_us_per_round": r.p99_us,
                "errors": r.errors,
                "failed": r.failed,
                "not_found": r.not_found,
                "wrong_value": r.wrong_value,
                "dispatcher_drops": r.dispatcher_drops,
                "diagnostics": r.diagnostics,
            }),
        );
    }
    let mut v = json!({
        "dimension": p.dimension.as_str(),
        "checks": p.spec.checks,
        "rules": p.spec.rules,
        "bytes": p.spec.bytes,
        "modes": modes,
    });
    if let (Value::Object(o), Value::Object(r)) = (&mut v, ratios(p)) {
        o.extend(r);
    }
    v
}

/// Runs the benchmark.
pub fn run(a: &DispatchBenchArgs) -> CmdResult {
    let phase = a.phase_secs.unwrap_or(if a.quick { 0.5 } else { 1.0 });
    if !(phase > 0.0 && phase <= 600.0) {
        return Err("--phase-secs must be in (0, 600]".into());
    }
    if a.modes.is_empty() {
        return Err("--modes names no mode".into());
    }
    for (flag, v, max) in [
        ("workers", u64::from(a.workers), 1024),
        ("dispatchers", u64::from(a.dispatchers), 1024),
        ("client-threads", a.client_threads as u64, 1024),
        ("flows", a.flows as u64, 4096),
        ("concurrency", a.concurrency as u64, 65_536),
        ("rounds", a.rounds.unwrap_or(1) as u64, 1000),
        ("default-rounds", a.default_rounds.unwrap_or(1) as u64, 1000),
        ("keys", a.keys, 1_000_000_000),
    ] {
        crate::check_count(flag, v, max)?;
    }
    let points = if a.default_only {
        vec![(Dimension::Default, tern_dispatch::synth::Spec::default())]
    } else {
        bench::points(a.quick)
    };
    let opts = BenchOptions {
        points,
        modes: a.modes.clone(),
        rounds: a.rounds.unwrap_or(if a.quick { 1 } else { 3 }),
        default_rounds: a.default_rounds.unwrap_or(if a.quick { 3 } else { 5 }),
        phase: Duration::from_secs_f64(phase),
        warmup: Duration::from_secs_f64((phase / 5.0).min(0.2)),
        keys: a.keys,
        store: a.store,
        server: ServerOptions {
            workers: a.workers,
            dispatchers: a.dispatchers,
            placement: a.rsd_placement,
            kernel_steering: a.socket_steering == "rules",
            cores: a.server_cores.clone(),
            transport: a.transport,
            ..ServerOptions::default()
        },
        client_threads: a.client_threads,
        flows: a.flows,
        concurrency: a.concurrency,
        client_cores: a.client_cores.clone(),
    };
    let env = Environment::current();
    if !a.json {
        println!(
            "tern bench dispatch: KV GET on {} ({} keys, 62 B keys, 64 B values, Zipf 0.9 in 24 partitions) over {}",
            a.store,
            a.keys,
            match a.transport {
                Transport::Udp => "UDP on loopback",
                Transport::Mem => "the mem transport (tern-io rings in this process, no kernel)",
            }
        );
        println!(
            "server: {} workers + {} dispatcher(s) (rss: workers only; rsd: RSDs {}), cores {}; client: {} thread(s) × {} flows × {} outstanding, cores {}",
            a.workers,
            a.dispatchers,
            match (a.rsd_placement, a.socket_steering.as_str()) {
                (Placement::Dedicated, _) => "on the dispatcher threads",
                (Placement::Workers, "rules") => "in the workers, sockets steered by the rules",
                (Placement::Workers, _) => "in the workers, sockets sharded by request id",
            },
            cores(&a.server_cores),
            a.client_threads,
            a.flows,
            a.concurrency,
            cores(&a.client_cores)
        );
        println!("{}", env.describe());
    }
    let started = Instant::now();
    // One step per mode phase: every point's rounds times the modes.
    let steps: usize = opts
        .points
        .iter()
        .map(|(d, _)| if *d == Dimension::Default { opts.default_rounds } else { opts.rounds }.max(1))
        .sum::<usize>()
        * opts.modes.len();
    let bar = crate::progress::bar(steps as u64, "bench dispatch", a.json);
    let results = bench::run(&opts, |line| {
        if line.contains("req/s") {
            bar.inc(1);
            bar.set_message(line.to_string());
        } else {
            bar.println(line);
        }
    })?;
    bar.finish_and_clear();
    let points: Vec<Value> = results.iter().map(point_json).collect();
    let default_point = results.iter().find(|p| p.dimension == Dimension::Default).map(|p| {
        let mut v = ratios(p);
        if let (Value::Object(o), Value::Object(m)) = (&mut v, point_json(p)) {
            o.insert("transport".into(), json!(a.transport.as_str()));
            o.insert("projection_paper_12_cores".into(), projection_json(p, a.rsd_placement));
            o.insert("modes".into(), m["modes"].clone());
            o.insert("checks".into(), json!(p.spec.checks));
            o.insert("rules".into(), json!(p.spec.rules));
            o.insert("bytes".into(), json!(p.spec.bytes));
        }
        v
    });
    let summary = json!({
        "benchmark": "dispatch",
        "app": "kv-get",
        "default_point": default_point,
        "points": points,
        "config": {
            "quick": a.quick, "transport": a.transport.as_str(), "keys": a.keys, "store": a.store.name(), "workers": a.workers, "dispatchers": a.dispatchers, "rsd_placement": a.rsd_placement.as_str(), "socket_steering": a.socket_steering,
            "client_threads": a.client_threads, "flows": a.flows, "concurrency": a.concurrency,
            "phase_secs": phase, "rounds": opts.rounds, "default_rounds": opts.default_rounds,
            "server_cores": a.server_cores, "client_cores": a.client_cores,
            "modes": a.modes.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
        },
        "elapsed_s": started.elapsed().as_secs_f64(),
        "environment": env,
    });
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let json_path = a.out.join("dispatch.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&summary)?)
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    let plots = plot::dispatch(&results, &a.out)?;
    let errors: u64 = results.iter().flat_map(|p| p.modes.iter()).map(|(_, r)| r.errors).sum();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_tables(&results);
        print_costs(&results, a.rsd_placement, a.transport);
        println!("wrote {}", json_path.display());
        for p in plots {
            println!("wrote {}", p.display());
        }
    }
    if errors > 0 {
        eprintln!("error: {errors} GETs failed or were answered wrongly");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn cores(c: &[usize]) -> String {
    if c.is_empty() { "any".into() } else { c.iter().map(usize::to_string).collect::<Vec<_>>().join(",") }
}

fn print_tables(results: &[PointResult]) {
    let modes: Vec<Mode> = results.first().map(|p| p.modes.iter().map(|(m, _)| *m).collect()).unwrap_or_default();
    let rounds = |p: &PointResult| p.modes.first().map_or(0, |(_, r)| r.rps.len());
    println!();
    println!("requests/s per mode: median [min-max] over the rounds, p99 latency median");
    print!("{:<8} {:>3} {:>4} {:>3} {:>6}", "vary", "k", "R", "b", "rounds");
    for m in &modes {
        print!("  {:>26}", format!("{m} rps [min-max], p99 µs"));
    }
    println!();
    let k = |x: f64| format!("{:.0}k", x / 1e3);
    for p in results {
        print!(
            "{:<8} {:>3} {:>4} {:>3} {:>6}",
            p.dimension.as_str(),
            p.spec.checks,
            p.spec.rules,
            p.spec.bytes,
            rounds(p)
        );
        for (_, r) in &p.modes {
            let cell = r.rps_spread().map_or("-".into(), |s| {
                format!("{} [{}-{}], {:.0}", k(s.median), k(s.min), k(s.max), r.median_p99_us())
            });
            print!("  {cell:>26}");
        }
        println!();
    }
    println!();
    println!("Tern's RSD over each baseline: median [min-max] of the per-round ratios of requests/s");
    println!(
        "{:<8} {:>3} {:>4} {:>3} {:>20} {:>20} {:>20}",
        "vary", "k", "R", "b", "rsd/rss", "rsd/sw-ring", "rsd/sw-uds"
    );
    for p in results {
        let f = |o: Mode| {
            p.ratio_spread(o).map_or("-".to_string(), |s| format!("{:.2} [{:.2}-{:.2}]", s.median, s.min, s.max))
        };
        println!(
            "{:<8} {:>3} {:>4} {:>3} {:>20} {:>20} {:>20}",
            p.dimension.as_str(),
            p.spec.checks,
            p.spec.rules,
            p.spec.bytes,
            f(Mode::Rss),
            f(Mode::SwRing),
            f(Mode::SwUds)
        );
    }
    println!("(each round runs every mode once, in an order that rotates from round to round)");
}

/// Server CPU time per request at the default point, and what it gives for the paper's server.
fn print_costs(results: &[PointResult], placement: Placement, transport: Transport) {
    let Some(p) = results.iter().find(|p| p.dimension == Dimension::Default) else { return };
    println!();
    println!(
        "server CPU time per request at the default point ({transport} transport; medians over the rounds, measured by the server's threads):"
    );
    println!("{:<8} {:>14} {:>14} {:>28}", "mode", "dispatch ns", "serve ns", "12 cores as the paper's");
    let mut rsd = None;
    for (m, r) in &p.modes {
        let c = r.median_costs();
        let proj = bench::project(*m, placement, c, 8, 4);
        if *m == Mode::Rsd {
            rsd = Some(proj);
        }
        println!("{:<8} {:>14.0} {:>14.0} {:>22.2} M/s", m.as_str(), c.dispatch_ns, c.serve_ns, proj / 1e6);
    }
    if let Some(rsd) = rsd {
        let ratios: Vec<String> = p
            .modes
            .iter()
            .filter(|(m, _)| *m != Mode::Rsd)
            .map(|(m, r)| {
                format!("rsd/{} {:.2}", m.as_str(), rsd / bench::project(*m, placement, r.median_costs(), 8, 4))
            })
            .collect();
        if !ratios.is_empty() {
            println!("projected: {}", ratios.join(", "));
        }
    }
    println!(
        "(the last column and the projected ratios come from these costs, not from a measurement: the baselines' 8 workers + 4 \
         dispatchers and rss's or Tern's 12 workers (RSDs in the workers; dedicated RSDs: 8 + 4), each thread on a core of its \
         own; dispatch includes the hand-off{})",
        if transport == Transport::Udp { " but not the kernel's steering program" } else { "" }
    );
}
