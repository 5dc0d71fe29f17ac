//! `tern dispatch serve` (the KV GET service behind a dispatcher, from a rule file) and
//! `tern dispatch load` (the closed-loop KV load generator against any such server).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use prometheus_client::registry::Registry;
use tern_dispatch::kv::{Backend, KvLayout, KvStore};
use tern_dispatch::loadgen::{self, LoadOptions};
use tern_dispatch::rules::{self, LoadError, RuleSet};
use tern_dispatch::server::{Mode, Placement, Server, ServerOptions, total};
use tern_dispatch::synth::Spec;
use tern_hw::{Profile, resource};
use tern_io::fault::FaultConfig;
use tern_qnp::QnpConfig;

use super::metrics::DispatchCollector;
use crate::CmdResult;
use crate::metrics;

/// The shape of the KV keys (they are built to walk rules of this shape; see
/// `tern dispatch gen-rules`).
#[derive(Debug, Clone, Args)]
pub struct KeyShape {
    /// Keys in the store, 24 to 100,000,000 [default: `keys` in the rule file's `[server]`
    /// (serve), else 100000].
    #[arg(long)]
    pub keys: Option<u64>,
    /// Skip-and-checks of the rules the keys are built for.
    #[arg(long, default_value_t = 4)]
    pub key_checks: u32,
    /// Rules the keys are built for.
    #[arg(long, default_value_t = 32)]
    pub key_rules: u32,
    /// Bytes per check of the rules the keys are built for.
    #[arg(long, default_value_t = 5)]
    pub key_bytes: u32,
}

/// Keys when neither a flag nor a rule file says.
const DEFAULT_KEYS: u64 = 100_000;

impl KeyShape {
    fn keys(&self) -> u64 {
        self.keys.unwrap_or(DEFAULT_KEYS)
    }

    fn layout(&self, workers: u16) -> Result<KvLayout, String> {
        let spec = Spec { checks: self.key_checks, rules: self.key_rules, bytes: self.key_bytes, ..Spec::default() };
        let l = KvLayout { spec, workers, keys: self.keys() };
        l.validate().map_err(|e| e.to_string())?;
        Ok(l)
    }
}

/// `tern dispatch serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The rule file (TOML; see docs/rules.md). Its `[server]` table gives listen, workers,
    /// rsds, profile and keys; flags override them. The file is watched: a change is checked,
    /// compiled and swapped in per application (hitless), or rejected with its errors.
    pub config: PathBuf,
    /// Dispatch mode: rsd (Tern), rss (L3/4 only), sw-ring, sw-uds (software baselines).
    #[arg(long, default_value = "rsd")]
    pub mode: Mode,
    /// Address to serve on [default: the file's server.listen].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// Worker threads [default: the file's server.workers].
    #[arg(long)]
    pub workers: Option<u16>,
    /// Dispatcher threads: RSD threads with `--rsd-placement dedicated`, software dispatchers
    /// for sw-ring and sw-uds [default: the file's server.rsds].
    #[arg(long)]
    pub dispatchers: Option<u16>,
    /// Where Tern's RSDs run (mode rsd): in each `workers` thread (run to completion, the
    /// sockets steered as `--socket-steering` says; the default) or on `dedicated` threads
    /// between the sockets and the workers (`--dispatchers` of them).
    #[arg(long, default_value = "workers")]
    pub rsd_placement: Placement,
    /// With the RSDs in the workers, how the socket group spreads requests over them: `rules`
    /// (the rules compiled into the group's classic BPF program, so a request reaches its
    /// worker's socket and needs no hand-off; see docs/dispatch.md) or `request-id` (sharded by
    /// request id; (W-1)/W of the requests then take a ring hop to their worker).
    #[arg(long, default_value = "rules", value_parser = ["rules", "request-id"])]
    pub socket_steering: String,
    /// Hardware profile: stash size, ByteStream, QNP limits [default: the file's, else cpu].
    #[arg(long)]
    pub profile: Option<String>,
    /// Serve Prometheus metrics (and /ready, /config) on this address.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Stop after this many seconds (more than 0, at most a year) [default: run until SIGINT or
    /// SIGTERM, which stop it cleanly: requests already read are answered, the summary is
    /// printed, the store is removed].
    #[arg(long, value_parser = crate::signals::duration_secs)]
    pub duration: Option<f64>,
    /// Print a one-line progress report every this many seconds (0: none).
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval: f64,
    /// Print the stop summary as JSON on stdout (the other messages go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Where the KV store lives (a fresh directory is made and removed) [default: temp dir].
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The KV store: fjall (pure Rust, always built) or rocksdb (a build with `--features
    /// rocksdb`; see the README).
    #[arg(long, default_value = "fjall")]
    pub store: Backend,
    /// Request-table entries of each worker: requests being reassembled at once [default: the
    /// file's server.request_table_entries, else the profile's total split among the workers
    /// (1024 under qingniao-u250), else 65536 (cpu)].
    #[arg(long)]
    pub request_table_entries: Option<usize>,
    /// Most packets a request may have, 1..=255 [default: the file's
    /// server.max_pkts_per_request, else the profile's (4 under qingniao-u250), else 255].
    #[arg(long)]
    pub max_pkts_per_request: Option<u8>,
    #[command(flatten)]
    pub keys: KeyShape,
}

fn load_rules(path: &Path) -> Result<rules::Loaded, String> {
    rules::load(path).map_err(|e| match e {
        LoadError::Invalid { path, invalid } => {
            invalid.0.iter().map(|d| format!("{path}: {d}")).collect::<Vec<_>>().join("\n")
        }
        e => e.to_string(),
    })
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn describe_rules(set: &RuleSet) -> String {
    let mut s = String::new();
    for a in &set.apps {
        s.push_str(&format!("app {} (id {}), default queue {}\n", a.name, a.id, a.default_queue));
        for r in set.rules_of(a.id) {
            s.push_str(&format!("  rule {} -> queue {}\n", r.name, r.queue));
        }
    }
    s
}

fn rule_names(set: &RuleSet) -> Vec<(usize, String)> {
    set.rules.iter().map(|r| (r.index, r.name.clone())).collect()
}

/// Each worker's QNP configuration: the flags, else the file, else the profile (its total table
/// split among the workers), checked against the profile for all workers together.
fn worker_qnp(
    a: &ServeArgs,
    sc: Option<&rules::ServerConfig>,
    profile: &Profile,
    workers: u16,
) -> Result<QnpConfig, Box<dyn std::error::Error>> {
    let base = QnpConfig::for_profile(profile);
    let share = match profile.capacity(resource::QNP_REQUEST_TABLE_ENTRIES) {
        Some(total) => (total as usize / usize::from(workers.max(1))).max(1),
        None => base.request_table_entries,
    };
    let entries = a.request_table_entries.or(sc.and_then(|s| s.request_table_entries)).unwrap_or(share);
    let pkts = a.max_pkts_per_request.or(sc.and_then(|s| s.max_pkts_per_request)).unwrap_or(base.max_pkts_per_request);
    let qnp = QnpConfig { request_table_entries: entries, max_pkts_per_request: pkts, ..base };
    let mut ledger = tern_hw::Ledger::new(profile);
    for w in 0..workers {
        qnp.check(&mut ledger, &format!("worker {w}"))?;
    }
    Ok(qnp)
}

/// A human message: stdout, or stderr when stdout carries JSON.
macro_rules! say {
    ($json:expr, $($arg:tt)*) => {
        if $json { eprintln!($($arg)*) } else { println!($($arg)*) }
    };
}

/// Runs `tern dispatch serve`.
pub fn serve(a: &ServeArgs) -> CmdResult {
    let loaded = match load_rules(&a.config) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    for w in &loaded.rules.warnings {
        eprintln!("{}: {w}", a.config.display());
    }
    let sc = loaded.config.server.clone();
    if let Some(s) = sc.as_ref().and_then(|s| s.service.as_deref())
        && s != "kv"
    {
        return Err(format!("server.service = \"{s}\": `dispatch serve` runs the kv service").into());
    }
    let listen: SocketAddr = match a.listen {
        Some(l) => l,
        None => {
            let s = sc.as_ref().map_or("127.0.0.1:7000", |s| s.listen.as_str());
            s.parse().map_err(|e| format!("server.listen `{s}`: {e}"))?
        }
    };
    let workers = a.workers.or(sc.as_ref().map(|s| s.workers)).unwrap_or(4);
    let dispatchers = a.dispatchers.or(sc.as_ref().map(|s| s.rsds)).unwrap_or(1);
    let profile_name = a.profile.clone().or(sc.as_ref().and_then(|s| s.profile.clone())).unwrap_or("cpu".into());
    let profile = Profile::resolve(&profile_name)?;
    // The flag overrides the file, as every serve flag does.
    let keys = KeyShape { keys: a.keys.keys.or(sc.as_ref().and_then(|s| s.keys)), ..a.keys.clone() };
    let layout = keys.layout(workers)?;
    let opts = ServerOptions {
        mode: a.mode,
        listen,
        workers,
        dispatchers,
        placement: a.rsd_placement,
        kernel_steering: a.socket_steering == "rules",
        stash_entries: profile.capacity(resource::RSD_STASH_ENTRIES).map_or(256, |n| n as usize),
        bytestream: profile.capacity(resource::RSD_BYTESTREAM_BYTES).map(|n| n as usize),
        qnp: worker_qnp(a, sc.as_ref(), &profile, workers)?,
        ..ServerOptions::default()
    };
    // Checked before anything starts; the schedule starts at the serving loop's first look.
    let mut ticker = crate::progress::Ticker::new(a.stats_interval)?;
    let signals = crate::signals::stop_flag()?;
    let store = KvStore::temporary_with(a.store, a.data_dir.as_deref())?;
    let t = Instant::now();
    let n = store.load(&layout)?;
    say!(
        a.json,
        "loaded {n} keys into {} ({}) in {:.1} s",
        store.path().display(),
        store.backend(),
        t.elapsed().as_secs_f64()
    );
    let mut server = Server::start(&opts, loaded.rules.clone(), store)?;
    let started = Instant::now();
    let threads = match (a.mode, a.rsd_placement) {
        (Mode::Rss, _) => "no dispatcher".to_string(),
        (Mode::Rsd, Placement::Workers) => match server.steering() {
            Some(st) if st.complete() => {
                format!(
                    "an RSD in each worker, sockets steered by the rules ({}-instruction program)",
                    st.program.len()
                )
            }
            Some(st) => format!(
                "an RSD in each worker, sockets steered by {} of {} rules (the others by request id)",
                st.rules_compiled, st.rules_total
            ),
            None => "an RSD in each worker, sockets sharded by request id".to_string(),
        },
        (Mode::Rsd, Placement::Dedicated) => format!("{dispatchers} RSD thread(s)"),
        _ => format!("{dispatchers} software dispatcher(s)"),
    };
    say!(
        a.json,
        "serving kv on {} (mode {}, {} workers, {threads}, profile {}, stash {} entries; QNP: up to {} packets a request, {} request-table entries per worker)",
        server.addr(),
        a.mode,
        workers,
        profile.name,
        opts.stash_entries,
        opts.qnp.max_pkts_per_request,
        opts.qnp.request_table_entries
    );
    let names = Arc::new(Mutex::new(rule_names(&loaded.rules)));
    let config_text = Arc::new(Mutex::new(describe_rules(&loaded.rules)));
    let stop = Arc::new(AtomicBool::new(false));
    if let Some(addr) = a.metrics {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(DispatchCollector {
            shared: server.shared().clone(),
            rule_names: names.clone(),
        }));
        let bound = metrics::serve(addr, registry, config_text.clone(), stop.clone(), None)?;
        say!(a.json, "metrics on http://{bound}/metrics");
    }
    let deadline = crate::signals::deadline(Instant::now(), a.duration);
    let mut seen = mtime(&a.config);
    let mut next_reload_check = Instant::now();
    let why = loop {
        if crate::signals::stopping(&signals) {
            break "signal";
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break "duration";
        }
        std::thread::sleep(Duration::from_millis(50));
        if let Some(e) = server.ended_early() {
            // A dispatcher or worker gone (an error, a panic): the server stopped; so does the
            // metrics endpoint, and the process exits 1 naming the thread.
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            return Err(e.into());
        }
        let now = Instant::now();
        if ticker.due(now) {
            let handled: u64 = server.worker_requests().iter().sum();
            let (rate, secs) = ticker.rate(handled, now);
            let drops: u64 = server.shared().drop_counts().iter().map(|(_, v)| v).sum();
            eprintln!(
                "[{:>6.0} s] {handled} requests handled, {rate:.0} req/s over the last {secs:.0} s, {drops} datagrams dropped, generation {}",
                started.elapsed().as_secs_f64(),
                server.shared().generation.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
        if Instant::now() < next_reload_check {
            continue;
        }
        next_reload_check = Instant::now() + Duration::from_millis(250);
        let now = mtime(&a.config);
        if now == seen {
            continue;
        }
        seen = now;
        match load_rules(&a.config) {
            Err(e) => eprintln!(
                "reload rejected, keeping generation {}:\n{e}",
                server.shared().generation.load(std::sync::atomic::Ordering::Relaxed)
            ),
            Ok(new) => {
                for app in &new.rules.apps {
                    match server.reconfigure(app.id, &new.rules) {
                        Ok(g) => say!(a.json, "app {}: new rules in force, generation {g}", app.name),
                        Err(e) => eprintln!("app {}: reload rejected: {e}", app.name),
                    }
                }
                let current = server.rules();
                // Counters of replaced rules keep their names.
                let mut n = names.lock().expect("names lock");
                for (i, name) in rule_names(&current) {
                    if !n.iter().any(|(j, _)| *j == i) {
                        n.push((i, name));
                    }
                }
                drop(n);
                *config_text.lock().expect("config lock") = describe_rules(&current);
            }
        }
    };
    say!(a.json, "stopping ({why}): answering the requests already read");
    let shared = server.shared().clone();
    let generation = shared.generation.load(std::sync::atomic::Ordering::Relaxed);
    server.stop()?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let elapsed = started.elapsed().as_secs_f64();
    let d =
        total(&shared.dispatchers.iter().map(|m| m.lock().map(|s| s.clone()).unwrap_or_default()).collect::<Vec<_>>());
    let handled: u64 = shared.workers.iter().map(|w| w.requests.load(std::sync::atomic::Ordering::Relaxed)).sum();
    let partial: u64 =
        shared.workers.iter().map(|w| w.partial_at_stop.load(std::sync::atomic::Ordering::Relaxed)).sum();
    // Every reason, from 0, in the JSON; those above 0 in the line printed.
    let all_drops: Vec<(String, u64)> = shared.drop_counts();
    let drops: Vec<&(String, u64)> = all_drops.iter().filter(|(_, v)| *v > 0).collect();
    let dropped: u64 = drops.iter().map(|(_, v)| v).sum();
    if a.json {
        let v = serde_json::json!({
            "stopped_by": why, "elapsed_s": elapsed, "requests_handled": handled,
            "requests_per_s": handled as f64 / elapsed.max(1e-9), "first_packets_dispatched": d.rsd.first_packets,
            "received_packets": d.rx_packets, "datagrams_dropped": dropped,
            "drops": all_drops.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
            "partial_requests_at_stop": partial, "generation": generation,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let list: Vec<String> = drops.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "stopped ({why}) after {elapsed:.1} s: {handled} requests handled ({:.0}/s), {} first packets dispatched, {dropped} datagrams dropped{}{}, {partial} partial requests dropped at stop, generation {generation}",
            handled as f64 / elapsed.max(1e-9),
            d.rsd.first_packets,
            if list.is_empty() { "" } else { ": " },
            list.join(", ")
        );
    }
    // The store (and its temporary directory) goes with `server`, already stopped.
    Ok(ExitCode::SUCCESS)
}

/// `tern dispatch load`.
#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The server's address: HOST:PORT, with HOST a name (localhost) or an IP address.
    pub server: String,
    /// Seconds to run.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// UDP flows per thread.
    #[arg(long, default_value_t = 16)]
    pub flows: usize,
    /// GETs outstanding per thread.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// Workers the server has (to compute which keys exist per partition).
    #[arg(long, default_value_t = 4)]
    pub workers: u16,
    /// Packet loss to inject on the client's sockets (0..1).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub keys: KeyShape,
}

/// Runs `tern dispatch load`.
pub fn load(a: &LoadArgs) -> CmdResult {
    if !(a.duration > 0.0 && a.duration <= 86_400.0) {
        return Err("--duration must be in (0, 86400]".into());
    }
    crate::check_count("threads", a.threads as u64, 1024)?;
    crate::check_count("flows", a.flows as u64, 4096)?;
    crate::check_count("concurrency", a.concurrency as u64, 65_536)?;
    crate::check_count("workers", u64::from(a.workers), 1024)?;
    // A host name or an address, resolved once.
    let server = std::net::ToSocketAddrs::to_socket_addrs(&a.server)
        .map_err(|e| format!("cannot resolve {}: {e}", a.server))?
        .next()
        .ok_or_else(|| format!("{} resolves to no address", a.server))?;
    let layout = a.keys.layout(a.workers)?;
    let mut o = LoadOptions::new(server, layout);
    o.duration = Duration::from_secs_f64(a.duration);
    o.threads = a.threads;
    o.flows = a.flows;
    o.concurrency = a.concurrency;
    o.faults = FaultConfig { loss: a.loss, ..FaultConfig::default() };
    let r = crate::progress::timed("load", o.duration, a.json, || loadgen::run(&o))?;
    if a.json {
        let v = serde_json::json!({
            "completed": r.completed, "failed": r.failed, "not_found": r.not_found, "wrong_value": r.wrong_value,
            "retransmissions": r.retransmissions, "spurious_retransmissions": r.spurious_retransmissions,
            "retransmitted_fraction": r.retransmissions as f64 / r.completed.max(1) as f64, "rps": r.rps, "p50_us": r.p50_us, "p99_us": r.p99_us,
            "p999_us": r.p999_us, "elapsed_s": r.elapsed_s,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} GETs answered in {:.2} s: {:.0} req/s, p50 {:.0} µs, p99 {:.0} µs; {} failed, {} not found, {} wrong values, {} retransmissions ({:.2}% of GETs; {} spurious: the earlier copy was answered)",
            r.completed,
            r.elapsed_s,
            r.rps,
            r.p50_us,
            r.p99_us,
            r.failed,
            r.not_found,
            r.wrong_value,
            r.retransmissions,
            100.0 * r.retransmissions as f64 / r.completed.max(1) as f64,
            r.spurious_retransmissions
        );
    }
    Ok(if r.failed + r.wrong_value > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// `tern dispatch gen-rules`.
#[derive(Debug, Args)]
pub struct GenRulesArgs {
    /// Workers the rules spread the 24 key partitions over.
    #[arg(long, default_value_t = 4)]
    pub workers: u16,
    /// The IDL path written into the file (relative to where the file will live).
    #[arg(long, default_value = "kv.proto")]
    pub idl: String,
    #[command(flatten)]
    pub keys: KeyShape,
}

/// Prints the rule file matching a key shape (what `serve` and `load` agree on).
pub fn gen_rules(a: &GenRulesArgs) -> CmdResult {
    let layout = a.keys.layout(a.workers)?;
    print!("{}\n[server]\nworkers = {}\nkeys = {}\n", layout.to_toml(&a.idl).trim_end(), a.workers, a.keys.keys());
    Ok(ExitCode::SUCCESS)
}
