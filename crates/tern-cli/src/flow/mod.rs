//! `tern flow serve | check | dump-flows | trace` and `tern hw report` for a flow config.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use clap::Args;
use prometheus_client::registry::Registry;
use tern_flow::config::{self, Config};
use tern_flow::runtime::{Control, Runtime, Snapshot};
use tern_flow::slowpath::SlowPath;
use tern_flow::switch::{FlowRow, Trace};
use tern_hw::Profile;
use tern_hw::flow::FlowModel;
use tern_io::Pool;
use tern_wire::frame::{FrameInfo, L3};

pub mod bench;
pub mod metrics;
mod plot;

use crate::CmdResult;
use crate::frames::{hexdump, parse_packet, summary};
use metrics::FlowCollector;

/// Default address of the metrics / control endpoint.
pub const DEFAULT_ENDPOINT: &str = "127.0.0.1:9108";

/// `tern flow serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The switch configuration (TOML; see examples/flow/).
    pub config: PathBuf,
    /// Serve Prometheus metrics, /flows (JSON, for dump-flows), /ready and /config here.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Stop after this many seconds (more than 0, at most a year) [default: run until SIGINT or
    /// SIGTERM, which stop it cleanly with its summary].
    #[arg(long, value_parser = crate::signals::duration_secs)]
    pub duration: Option<f64>,
    /// Stop once every pcap input has been replayed (and its frames sent).
    #[arg(long)]
    pub until_done: bool,
    /// Print a one-line progress report to stderr every this many seconds (0: none).
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval: f64,
    /// Print the stop summary as JSON on stdout (the other messages go to stderr).
    #[arg(long)]
    pub json: bool,
}

/// `tern flow check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The switch configuration.
    pub config: PathBuf,
    /// Check against this profile instead of the config's own.
    #[arg(long)]
    pub profile: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tern flow dump-flows`.
#[derive(Debug, Args)]
pub struct DumpFlowsArgs {
    /// The endpoint of a running `tern flow serve --metrics ADDR`.
    #[arg(long, default_value = DEFAULT_ENDPOINT)]
    pub server: SocketAddr,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tern flow trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The switch configuration (its tables; no port is opened).
    pub config: PathBuf,
    /// The frame: hex bytes (spaces and colons allowed), or a field list such as
    /// `udp,nw_src=10.1.0.1,nw_dst=10.2.0.7,tp_src=4000,tp_dst=53,ttl=64` (also: tcp, icmp,
    /// ipv6 with ipv6_src/ipv6_dst, eth_src, eth_dst, len = payload bytes).
    pub packet: String,
    /// The port it arrives on (name or number; default the first).
    #[arg(long)]
    pub in_port: Option<String>,
    /// Send it this many times (the second shows the cached rule at work).
    #[arg(long, default_value_t = 2)]
    pub repeat: u32,
}

/// Whether a parsed file is a flow configuration (it declares ports or OFUs) rather than a
/// dispatch rule file.
pub fn is_flow_config(v: &toml::Table) -> bool {
    v.contains_key("port") || v.contains_key("ofu") || v.contains_key("next_hop")
}

fn load(path: &Path) -> Result<Config, Box<dyn std::error::Error>> {
    Ok(config::load(path)?)
}

fn mtime(p: &Path) -> Option<std::time::SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn ask<T>(control: &mpsc::Sender<Control>, make: impl FnOnce(mpsc::Sender<T>) -> Control) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    control.send(make(tx)).ok()?;
    rx.recv_timeout(Duration::from_secs(2)).ok()
}

fn describe(c: &Config) -> String {
    format!(
        "{}: profile {}, {} port(s) [{}], OFUs [{}], cache {:?} (flow limit {}, idle {:?}, {} upcalls/s), {} ACL rules, {} IPv4 + {} IPv6 routes, {} next hops",
        c.path,
        c.profile.name,
        c.ports.len(),
        c.ports.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", "),
        c.ofus.iter().map(|o| format!("{} {} x{}", o.id, o.kind.as_str(), o.v4_entries)).collect::<Vec<_>>().join(", "),
        c.policy.mode,
        c.policy.flow_limit,
        c.policy.idle_timeout,
        c.policy.upcall_rate,
        c.tables.acl.len(),
        c.tables.routes4.len(),
        c.tables.routes6.len(),
        c.tables.next_hops.len()
    )
}

/// `tern flow serve`.
pub fn serve(a: &ServeArgs) -> CmdResult {
    // Checked before anything starts; the schedule starts at the serving loop's first look.
    let mut ticker = crate::progress::Ticker::new(a.stats_interval)?;
    let cfg = load(&a.config)?;
    for w in &cfg.warnings {
        eprintln!("warning: {w}");
    }
    if a.until_done {
        let live: Vec<&str> = cfg
            .ports
            .iter()
            .filter(|p| matches!(p.kind, config::PortKind::AfPacket { .. }))
            .map(|p| p.name.as_str())
            .collect();
        if !live.is_empty() {
            return Err(
                format!("--until-done: port(s) {} are interfaces, whose input never ends", live.join(", ")).into()
            );
        }
    }
    let signals = crate::signals::stop_flag()?;
    let pool = Pool::new(8192, tern_io::DEFAULT_BUF_SIZE);
    let mut rt = Runtime::open(&cfg, &pool)?;
    let say = |m: String| if a.json { eprintln!("{m}") } else { println!("{m}") };
    say(describe(&cfg));
    let stop = Arc::new(AtomicBool::new(false));
    let (control, rx) = mpsc::channel();
    let config_text = Arc::new(Mutex::new(describe(&cfg) + "\n"));
    if let Some(addr) = a.metrics {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(FlowCollector { control: Mutex::new(control.clone()) }));
        let flows = Mutex::new(control.clone());
        let extra: crate::metrics::Extra = Box::new(move |path| {
            if path != "/flows" {
                return None;
            }
            let c = flows.lock().ok()?.clone();
            let rows = ask(&c, Control::Flows)?;
            serde_json::to_string(&rows).ok()
        });
        let bound = crate::metrics::serve(addr, registry, config_text.clone(), stop.clone(), Some(extra))?;
        say(format!("metrics on http://{bound}/metrics, cached rules on http://{bound}/flows"));
    }
    let until_done = a.until_done;
    let dp_stop = stop.clone();
    let data_path = std::thread::Builder::new().name("tern-flow".into()).spawn(move || {
        tern_io::failpoint("flow-data-path");
        rt.run(&dp_stop, &rx, until_done);
        rt
    })?;
    let deadline = crate::signals::deadline(Instant::now(), a.duration);
    let mut seen = mtime(&a.config);
    while deadline.is_none_or(|d| Instant::now() < d) && !data_path.is_finished() && !crate::signals::stopping(&signals)
    {
        std::thread::sleep(Duration::from_millis(100));
        if ticker.due(Instant::now())
            && let Some(s) = ask(&control, Control::Snapshot)
        {
            eprintln!("{}", progress_line(&s, &mut ticker));
        }
        let now = mtime(&a.config);
        if now == seen {
            continue;
        }
        seen = now;
        match config::load(&a.config) {
            Err(e) => eprintln!("reload rejected, keeping the tables in force:\n{e}"),
            Ok(new) if new.ports != cfg.ports || new.ofus != cfg.ofus || new.policy != cfg.policy => {
                eprintln!("reload rejected: ports, OFUs and the cache policy change only on restart")
            }
            Ok(new) => match SlowPath::new(&new.tables) {
                Err(e) => eprintln!("reload rejected: {e}"),
                Ok(slow) => match ask(&control, |tx| Control::Reload(Box::new(slow), tx)) {
                    Some(g) => {
                        say(format!("new tables in force (generation {g}); cached rules flushed"));
                        *config_text.lock().expect("config lock") = describe(&new) + "\n";
                    }
                    None => eprintln!("reload: the data path did not answer"),
                },
            },
        }
    }
    // Its input's end (--until-done) stopped the data path on its own.
    let otherwise = if data_path.is_finished() && a.until_done { "input done" } else { "duration" };
    let why = crate::signals::why_stopped(&signals, otherwise);
    stop.store(true, Ordering::Relaxed);
    let rt = data_path.join().map_err(|p| {
        format!("the data-path thread panicked ({}); the server stopped", tern_io::panic_message(p.as_ref()))
    })?;
    if a.json {
        let mut v = summary_json(&rt.snapshot());
        v["stopped_by"] = why.into();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print_summary(&rt.snapshot(), why);
    }
    if let Some(e) = rt.last_error() {
        eprintln!("last port error: {e}");
    }
    Ok(ExitCode::SUCCESS)
}

fn summary_json(s: &Snapshot) -> serde_json::Value {
    let ports: serde_json::Map<String, serde_json::Value> = s
        .ports
        .iter()
        .map(|(n, p)| {
            let v = serde_json::json!({"rx_packets": p.rx_packets, "tx_packets": p.tx_packets, "rx_dropped": p.rx_dropped, "tx_dropped": p.tx_dropped});
            (n.clone(), v)
        })
        .collect();
    let captures: serde_json::Map<String, serde_json::Value> = s
        .captures
        .iter()
        .map(|(n, skipped, error)| (n.clone(), serde_json::json!({"skipped": skipped, "error": error})))
        .collect();
    // Every reason, zeros included, as `/metrics` has them.
    let drops: serde_json::Map<String, serde_json::Value> = tern_flow::pipeline::DropReason::all()
        .map(|r| (r.to_string(), serde_json::json!(s.pipeline.dropped(r))))
        .collect();
    let slow_drops: serde_json::Map<String, serde_json::Value> =
        s.slow_drops().into_iter().map(|(r, n)| (r.to_string(), serde_json::json!(n))).collect();
    serde_json::json!({
        "elapsed_s": s.uptime, "ports": ports, "captures": captures, "cache_hits": s.pipeline.hits, "fast_path": s.pipeline.fast_path,
        "cache_misses": s.pipeline.misses, "upcalls": s.cache.upcalls, "slow_forwarded": s.cache.slow_forwarded,
        "slow_dropped": s.cache.slow_dropped, "upcalls_rate_limited": s.cache.upcall_rate_limited,
        "installed_exact": s.cache.installed_exact, "installed_prefix": s.cache.installed_prefix,
        "cached_now": s.cached.0 + s.cached.1, "evicted_idle": s.cache.evicted_idle, "cache_full": s.cache.cache_full,
        "install_refused": s.cache.install_refused, "uncacheable": s.cache.uncacheable,
        "pipeline_drops": drops, "slow_drops": slow_drops, "generation": s.generation,
    })
}

/// The progress report (`--stats-interval`): frames received, sent and dropped so far (by the
/// ports, the pipeline, the upcall rate limit and the slow path: every frame taken in and not
/// sent), cache hits and misses, and the rate received since the last.
fn progress_line(s: &Snapshot, ticker: &mut crate::progress::Ticker) -> String {
    let rx: u64 = s.ports.iter().map(|(_, p)| p.rx_packets).sum();
    let tx: u64 = s.ports.iter().map(|(_, p)| p.tx_packets).sum();
    let dropped: u64 = s.ports.iter().map(|(_, p)| p.rx_dropped + p.tx_dropped).sum::<u64>()
        + s.pipeline.drops().map(|(_, n)| n).sum::<u64>()
        + s.cache.upcall_rate_limited
        + s.cache.slow_dropped;
    let (rate, secs) = ticker.rate(rx, Instant::now());
    format!(
        "[{:>6.0} s] {rx} frames in, {tx} out, {dropped} dropped; {} cache hits, {} misses; {rate:.0} frames/s in over the last {secs:.0} s",
        s.uptime, s.pipeline.hits, s.pipeline.misses,
    )
}

fn print_summary(s: &Snapshot, why: &str) {
    println!("stopped ({why}) after {:.1} s:", s.uptime);
    for (name, p) in &s.ports {
        println!(
            "  port {name}: rx {} frames, tx {} frames, dropped {} rx / {} tx",
            p.rx_packets, p.tx_packets, p.rx_dropped, p.tx_dropped
        );
    }
    for (name, skipped, error) in &s.captures {
        if *skipped > 0 {
            println!(
                "  port {name}: {skipped} frame(s) of the capture skipped (not Ethernet, or longer than a buffer)"
            );
        }
        if let Some(e) = error {
            println!("  port {name}: the capture ended early, at a record it could not read: {e}");
        }
    }
    println!(
        "  pipeline: {} hits ({} on the fast path), {} misses; slow path: {} upcalls, {} forwarded, {} dropped, {} rate-limited",
        s.pipeline.hits,
        s.pipeline.fast_path,
        s.pipeline.misses,
        s.cache.upcalls,
        s.cache.slow_forwarded,
        s.cache.slow_dropped,
        s.cache.upcall_rate_limited
    );
    println!(
        "  cache: {} exact + {} prefix rules installed, {} cached now ({} exact, {} prefix), {} evicted idle, {} refused (flow limit)",
        s.cache.installed_exact,
        s.cache.installed_prefix,
        s.cached.0 + s.cached.1,
        s.cached.0,
        s.cached.1,
        s.cache.evicted_idle,
        s.cache.cache_full
    );
    let pipeline: Vec<(String, u64)> = s.pipeline.drops().map(|(r, n)| (r.to_string(), n)).collect();
    let slow: Vec<(String, u64)> = s.slow_drops().into_iter().map(|(r, n)| (r.to_string(), n)).collect();
    for (what, drops) in [("pipeline", pipeline), ("slow-path", slow)] {
        let named: Vec<String> = drops.iter().filter(|(_, n)| *n > 0).map(|(r, n)| format!("{r} {n}")).collect();
        if !named.is_empty() {
            println!("  {what} drops: {}", named.join(", "));
        }
    }
}

fn fits_line(c: &Config) -> Vec<String> {
    let mut lines = Vec::new();
    for o in &c.ofus {
        lines.push(format!("ofu {} ({}): {} entries per IP version", o.id, o.kind.as_str(), o.v4_entries));
    }
    lines
}

/// `tern flow check`.
pub fn check(a: &CheckArgs) -> CmdResult {
    let result = config::load_for(&a.config, a.profile.as_deref());
    match result {
        Ok(c) => {
            if a.json {
                let v = serde_json::json!({
                    "file": c.path, "ok": true, "profile": c.profile.name, "warnings": c.warnings,
                    "ports": c.ports.iter().map(|p| &p.name).collect::<Vec<_>>(),
                    "ofus": c.ofus.iter().map(|o| serde_json::json!({"id": o.id, "kind": o.kind.as_str(), "entries": o.v4_entries})).collect::<Vec<_>>(),
                    "acl_rules": c.tables.acl.len(), "routes4": c.tables.routes4.len(), "routes6": c.tables.routes6.len(),
                    "next_hops": c.next_hop_names,
                });
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                for w in &c.warnings {
                    println!("{}: warning: {w}", c.path);
                }
                println!("{}", describe(&c));
                for l in fits_line(&c) {
                    println!("  {l}");
                }
                println!("ok");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if a.json {
                let v = serde_json::json!({"file": e.path, "ok": false, "errors": e.problems});
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                eprintln!("{e}");
                eprintln!("{}: {} error(s)", e.path, e.problems.len());
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// `GET http://addr/path` with ureq; the body of a 200 answer, or an error naming the server.
fn http_get(addr: SocketAddr, path: &str) -> Result<String, Box<dyn std::error::Error>> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(2)))
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("http://{addr}{path}");
    let mut resp = agent.get(&url).call().map_err(|e| match e {
        ureq::Error::Io(e) => format!("cannot reach {addr} ({e}); is `tern flow serve --metrics {addr}` running?"),
        e => format!("{url}: {e}"),
    })?;
    let status = resp.status();
    let body = resp.body_mut().with_config().limit(1 << 30).read_to_string().map_err(|e| format!("{url}: {e}"))?;
    if status != 200 {
        return Err(format!("{url}: HTTP {status}: {}", body.trim()).into());
    }
    Ok(body)
}

/// One `dump-flows` line, as `ovs-ofctl dump-flows` prints it.
pub fn flow_line(r: &FlowRow) -> String {
    format!(
        " table={}, ofu={}, index={}, duration={:.3}s, n_packets={}, n_bytes={}, idle_age={:.0}, priority={},{} actions={}",
        r.table, r.ofu, r.index, r.duration, r.n_packets, r.n_bytes, r.idle_age, r.priority, r.matching, r.actions
    )
}

/// `tern flow dump-flows`.
pub fn dump_flows(a: &DumpFlowsArgs) -> CmdResult {
    let body = http_get(a.server, "/flows")?;
    // Read as rows whatever is printed: an answer that is not one is named as such.
    let rows: Vec<FlowRow> = serde_json::from_str(&body).map_err(|e| {
        format!("http://{}/flows: not an answer of `tern flow serve --metrics` ({e}); is that its address?", a.server)
    })?;
    if a.json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} cached rule(s)", rows.len());
    for r in &rows {
        println!("{}", flow_line(r));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_trace(cfg: &Config, t: &Trace) {
    let port_name = |p: u16| cfg.ports.get(usize::from(p)).map_or_else(|| p.to_string(), |x| x.name.clone());
    let info = match &t.parsed {
        Ok(i) => i,
        Err(e) => {
            println!("  parser:    refused: {e} (dropped, counted as {})", e.as_str());
            return;
        }
    };
    println!("  parser:    {}", summary(info));
    println!(
        "  stage 1:   {}",
        match info.l3 {
            L3::Ipv4 => "IPv4: the OFUs' IPv4 tables",
            L3::Ipv6 => "IPv6: the OFUs' IPv6 tables",
            L3::Other => "not IP: to the host (slow path)",
        }
    );
    for (ofu, kind, key) in &t.lookups {
        let res = match &t.hit {
            Some((o, i, r)) if o == ofu => {
                format!("hit entry {i}: priority={},{} actions={}", r.priority, r.matching, r.actions)
            }
            Some(_) => "not searched further (an earlier OFU hit)".to_string(),
            None => "miss".to_string(),
        };
        println!("  stage 2:   ofu {ofu} ({kind}) key {key}: {res}");
    }
    if let Some(s) = &t.slow {
        match s.acl_rule {
            Some(r) => println!(
                "  slow path: acl rule {r} `{}` -> {} ({} subtables probed)",
                cfg.acl_lines.get(r).map_or("?", String::as_str),
                if s.denied { "deny" } else { "allow" },
                s.acl_probes
            ),
            None => println!("  slow path: acl: no rule matched; default {}", if s.denied { "deny" } else { "allow" }),
        }
        if !s.denied {
            match s.route {
                Some((net, nh)) => {
                    let name = cfg.next_hop_names.get(nh as usize).map_or("?", String::as_str);
                    let v6 = info.l3 == L3::Ipv6;
                    let set = cfg.tables.next_hops.get(nh as usize).map(|n| SlowPath::next_hop_actions(n, v6));
                    println!("             route {net} via next hop {name:?}");
                    if let Some(set) = set {
                        println!("             actions {set}");
                    }
                }
                None => println!("             no route: dropped"),
            }
        }
        match t.installed {
            (0, 0) => println!("             nothing cached"),
            (e, p) => println!("             installed {} exact and {} prefix rule(s) into the OFUs", e, p),
        }
    }
    match &t.output {
        Some((port, f)) => {
            println!("  output:    port {} ({} bytes)", port_name(*port), f.len());
            if let Ok(i) = FrameInfo::parse(f) {
                println!("             {}", summary(&i));
            }
            println!("{}", hexdump(f));
        }
        None => println!("  output:    none (dropped or sent to the host)"),
    }
}

/// `tern flow trace`.
pub fn trace(a: &TraceArgs) -> CmdResult {
    let cfg = load(&a.config)?;
    let bytes = parse_packet(&a.packet).map_err(|e| format!("packet: {e}"))?;
    let in_port = match &a.in_port {
        None => 0,
        Some(p) => cfg.port_index(p).ok_or_else(|| format!("--in-port {p}: no such port"))?,
    };
    let pool = Pool::new(64, tern_io::DEFAULT_BUF_SIZE);
    let mut sw = cfg.build(&pool)?;
    println!("frame ({} bytes) in on port {}:", bytes.len(), cfg.ports[usize::from(in_port)].name);
    println!("{}", hexdump(&bytes));
    for pass in 1..=a.repeat.max(1) {
        let now = u64::from(pass) * 1_000_000;
        sw.pipeline.configure(now);
        println!("pass {pass}:");
        let t = sw.trace(now, in_port, &bytes);
        print_trace(&cfg, &t);
    }
    Ok(ExitCode::SUCCESS)
}

/// `tern hw report` for a flow configuration.
pub fn report(a: &crate::hw::ReportArgs) -> CmdResult {
    let mut cfg = load(&a.config)?;
    let name = match &a.profile {
        Some(p) => p.clone(),
        None if cfg.profile.name == "cpu" => "accelsdp-n3000".to_string(),
        None => cfg.profile.name.clone(),
    };
    let profile = Profile::resolve(&name)?;
    if profile.name != cfg.profile.name {
        // Re-check the tables against the profile reported on.
        cfg = config::load_for(&a.config, Some(&name))?;
    }
    let model = FlowModel::from_profile(&profile)
        .ok_or_else(|| format!("profile {} has no clock or search rate to project with", profile.name))?;
    let sets: Vec<_> = cfg
        .tables
        .next_hops
        .iter()
        .flat_map(|n| [SlowPath::next_hop_actions(n, false), SlowPath::next_hop_actions(n, true)])
        .collect();
    let max_actions = sets.iter().map(|s| s.actions().len()).max().unwrap_or(1) as u32;
    let max_bits = sets.iter().map(|s| s.operand_bits()).max().unwrap_or(0);
    let sizes: Vec<u32> = match a.frame_bytes {
        Some(b) => vec![b],
        None => vec![64, 1500],
    };
    if sizes.iter().any(|&b| b < 60) {
        return Err("--frame-bytes must be at least 60".into());
    }
    let projections: Vec<_> = sizes.iter().map(|&b| (b, model.project(b, max_actions))).collect();
    let cap = |r: &str| profile.capacity(r);
    if a.json {
        let v = serde_json::json!({
            "config": cfg.path, "profile": profile.name,
            "ofus": cfg.ofus.iter().map(|o| serde_json::json!({
                "id": o.id, "kind": o.kind.as_str(), "entries_per_ip_version": o.v4_entries,
            })).collect::<Vec<_>>(),
            "action_set_bits_used": max_bits, "action_set_bits": cap(tern_hw::resource::FLOW_ACTION_SET_BITS),
            "actions_per_packet": max_actions,
            "projections": projections.iter().map(|(b, p)| serde_json::json!({"frame_bytes": b, "projection": p})).collect::<Vec<_>>(),
            "config_rates": model.config,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} on {} ({}):", cfg.path, profile.name, profile.description);
    println!("  use:");
    for o in &cfg.ofus {
        let (res, v6res) = match o.kind {
            tern_flow::ofu::OfuKind::Lpm => {
                (tern_hw::resource::FLOW_LPM4_ENTRIES, tern_hw::resource::FLOW_LPM6_ENTRIES)
            }
            tern_flow::ofu::OfuKind::Em => (tern_hw::resource::FLOW_EM_ENTRIES, tern_hw::resource::FLOW_EM_ENTRIES),
        };
        let of = |r: &str| cap(r).map_or("unbounded".to_string(), |c| c.to_string());
        println!(
            "    ofu {} ({}): {} IPv4 + {} IPv6 entries of {} / {} ({res}, {v6res})",
            o.id,
            o.kind.as_str(),
            o.v4_entries,
            o.v6_entries,
            of(res),
            of(v6res)
        );
    }
    println!(
        "    OFUs: {} of {}",
        cfg.ofus.len(),
        cap(tern_hw::resource::FLOW_OFUS).map_or("unbounded".into(), |c| c.to_string())
    );
    println!(
        "    action sets: up to {max_actions} actions, {max_bits} operand bits of {} (the slow path's widest next hop)",
        cap(tern_hw::resource::FLOW_ACTION_SET_BITS).map_or("unbounded".into(), |c| c.to_string())
    );
    println!(
        "    ACL ({} rules) and routes ({} + {}) stay in the slow path: only their cached decisions use the OFUs",
        cfg.tables.acl.len(),
        cfg.tables.routes4.len(),
        cfg.tables.routes6.len()
    );
    println!("  projected fast path (a cached rule hit, {max_actions} actions):");
    for (b, p) in &projections {
        println!(
            "    {b:>5} B frames: {:.1} Mpps ({:.1} Gb/s), {} cycles = {:.0} ns through the pipeline; bound: {} (search {:.0} M/s, line {:.1} Mpps)",
            p.packets_per_s / 1e6,
            p.gbps,
            p.cycles,
            p.latency_ns,
            p.bottleneck.as_str(),
            p.pipeline_pps / 1e6,
            p.line_pps / 1e6
        );
    }
    let c = model.config;
    println!("  configuration rate (instructions/s, Table 5):");
    println!(
        "    lpm: populate {:.2} M, delete {:.2} M, update {:.2} M; em: populate {:.2} M, delete {:.2} M, update {:.2} M",
        c.lpm_populate_per_s / 1e6,
        c.lpm_delete_per_s / 1e6,
        c.lpm_update_per_s / 1e6,
        c.em_populate_per_s / 1e6,
        c.em_delete_per_s / 1e6,
        c.em_update_per_s / 1e6
    );
    for o in &cfg.ofus {
        let rate = match o.kind {
            tern_flow::ofu::OfuKind::Lpm => c.lpm_populate_per_s,
            tern_flow::ofu::OfuKind::Em => c.em_populate_per_s,
        };
        let n = o.v4_entries.min(cfg.policy.flow_limit as u32);
        println!("    filling ofu {} ({n} rules) takes {:.2} ms", o.id, f64::from(n) / rate * 1e3);
    }
    Ok(ExitCode::SUCCESS)
}
