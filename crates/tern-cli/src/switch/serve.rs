//! `tern switch serve`: a CLIP switch and its controller on real ports (docs/clip.md, "Running
//! a switch and its servers"). The data loop runs the switch on this thread; the controller's
//! actions (the offload's interval, group changes, failover, reload) are applied by the same
//! loop between batches, so the data path takes no lock. The control endpoint serves
//! Prometheus `tern_switch_*`, `/tables` and `/group`, and takes `POST /scale`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime};

use clap::Args;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;
use serde_json::json;
use tern_io::{Batch, Pool};
use tern_switch::config::{ServeConfig, load};
use tern_switch::group::{FlowId, ServerId};
use tern_switch::switch::{DropReason, Switch, SwitchStats};

use crate::CmdResult;
use crate::metrics::{Labels, counter, counter_family, gauge, gauge_family, label};
use crate::ports::FramePort;

/// Options of `tern switch serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The switch's configuration (TOML; examples/switch/serve.toml): its program, ports,
    /// servers, routes, group, offload and heartbeats. Watched: a change reloads it.
    pub config: PathBuf,
    /// Serve the control endpoint here: Prometheus `/metrics` (tern_switch_*), `/tables` (the
    /// mirrored table's entries in the switch, with hit counters), `/group`, and
    /// `POST /scale?add=S`, `?remove=S` or `?members=S,T` (what `tern switch scale` sends).
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Stop after this many seconds (more than 0, at most a year) [default: run until SIGINT or
    /// SIGTERM, which stop it cleanly with its summary].
    #[arg(long, value_parser = crate::signals::duration_secs)]
    pub duration: Option<f64>,
    /// Poll the ports without ever sleeping (a core of its own, as a DPDK or VPP data plane in
    /// poll mode runs): no wake-up between a frame's arrival and its processing. By default an
    /// idle switch sleeps until a frame arrives on any port (or 100 µs pass). `afxdp:` ports
    /// then prefer busy polling, and under load their interfaces defer interrupts and run
    /// their receive work on threads on the switch's cores (docs/clip.md).
    #[arg(long)]
    pub busy_poll: bool,
    /// Print a one-line progress report to stderr every this many seconds (0: none): frames in
    /// and out, what the switch kept, sent to servers and dropped, and the rate in.
    #[arg(long, default_value_t = 10.0)]
    pub stats_interval: f64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What the controller asks the data loop.
enum Ctl {
    /// A membership change (`add=S`, `remove=S` or `members=S,T`, applied to the group as the
    /// data loop has it) with the servers' live flows; the reply: the new version and members.
    Change {
        query: String,
        live: Vec<(FlowId, ServerId)>,
        reply: mpsc::Sender<Result<(u16, Vec<ServerId>), String>>,
    },
    FailOver {
        dead: ServerId,
        buddy: ServerId,
    },
    Tables(mpsc::Sender<serde_json::Value>),
    /// A configuration that loaded, with its switch built by the watcher (off the data path).
    Reload(Box<(ServeConfig, Switch)>),
}

/// The switch's state as the data loop last published it.
#[derive(Debug, Clone, Default)]
struct Snap {
    stats: SwitchStats,
    version: u16,
    members: Vec<ServerId>,
    previous: Option<Vec<ServerId>>,
    pins: usize,
    fill: [f64; 2],
    entries: usize,
    busy: Vec<bool>,
    failovers: u64,
    generation: u64,
    /// Each port's counters (port 1 first).
    ports: Vec<tern_io::PortStats>,
}

fn snapshot(sw: &Switch, failovers: u64, generation: u64, ports: &[FramePort]) -> Snap {
    let sel = sw.selector();
    Snap {
        stats: sw.stats().clone(),
        version: sel.current().version,
        members: sel.current().members.clone(),
        previous: sel.previous().map(|g| g.members.clone()),
        pins: sel.pins(),
        fill: sel.filter_fill(),
        entries: sw.offload().entries(),
        busy: (0..sw.config().servers.len() as u16).map(|s| sel.is_busy(s)).collect(),
        failovers,
        generation,
        ports: ports.iter().map(tern_io::Port::stats).collect(),
    }
}

#[derive(Debug)]
struct SwitchCollector(Arc<Mutex<Snap>>);

impl Collector for SwitchCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let s = self.0.lock().map(|s| s.clone()).unwrap_or_default();
        let st = &s.stats;
        let path = |p: &str, v: u64| (label("path", p), v);
        counter_family(
            &mut enc,
            "tern_switch_packets",
            "Frames by path: switch (left without a server; offloaded: of them, served by the mirrored table's original), to_server by how the server was found (pinned, diverted, current, previous; owner: the program named it), response (back from a server and sent on), arp_reply, held (requests held for a busy server, sent when it is no longer busy).",
            &[
                path("switch", st.switch_only),
                path("offloaded", st.offloaded),
                path("to_server_pinned", st.to_server[0]),
                path("to_server_diverted", st.to_server[1]),
                path("to_server_current", st.to_server[2]),
                path("to_server_previous", st.to_server[3]),
                path("to_server_owner", st.to_server[4]),
                path("response", st.responses),
                path("arp_reply", st.arp_replies),
                path("held", st.held),
            ],
        )?;
        let drops: Vec<(Labels, u64)> =
            DropReason::ALL.iter().zip(st.drops).map(|(r, v)| (label("reason", r.name()), v)).collect();
        counter_family(&mut enc, "tern_switch_drops", "Frames dropped, by reason (docs/clip.md).", &drops)?;
        let per_port = |get: fn(&tern_io::PortStats) -> [u64; 2]| -> Vec<(Labels, u64)> {
            s.ports
                .iter()
                .enumerate()
                .flat_map(|(i, p)| {
                    let [rx, tx] = get(p);
                    [("rx", rx), ("tx", tx)].map(|(dir, v)| {
                        let mut l = label("port", i + 1);
                        l.extend(label("dir", dir));
                        (l, v)
                    })
                })
                .collect()
        };
        counter_family(
            &mut enc,
            "tern_switch_port_packets",
            "Frames each port received (rx) and sent (tx).",
            &per_port(|p| [p.rx_packets, p.tx_packets]),
        )?;
        counter_family(
            &mut enc,
            "tern_switch_port_dropped",
            "Frames a port dropped: rx, those the kernel dropped because the port's receive ring was full, or too long, truncated or unsegmented; tx, those the kernel refused (a full queue, longer than the link's MTU).",
            &per_port(|p| [p.rx_dropped, p.tx_dropped]),
        )?;
        let by_server: Vec<(Labels, u64)> =
            st.requests_by_server.iter().enumerate().map(|(i, &v)| (label("server", i), v)).collect();
        counter_family(&mut enc, "tern_switch_server_requests", "Requests sent to each server.", &by_server)?;
        gauge(&mut enc, "tern_switch_group_version", "The current group's version.", i64::from(s.version))?;
        gauge(&mut enc, "tern_switch_group_members", "Servers in the current group.", s.members.len() as i64)?;
        gauge(&mut enc, "tern_switch_pins", "Pinned flows (before a filter was cleared, or diverted).", s.pins as i64)?;
        let fill: Vec<(Labels, f64)> = s.fill.iter().enumerate().map(|(i, &f)| (label("filter", i), f)).collect();
        gauge_family(&mut enc, "tern_switch_filter_fill", "Share of each Bloom filter's bits set.", &fill)?;
        gauge(
            &mut enc,
            "tern_switch_offloaded_entries",
            "Entries of the mirrored table in the switch's original table.",
            s.entries as i64,
        )?;
        let busy: Vec<(Labels, i64)> =
            s.busy.iter().enumerate().map(|(i, &b)| (label("server", i), i64::from(b))).collect();
        gauge_family(&mut enc, "tern_switch_server_busy", "1 while a server says it is near its queue limit.", &busy)?;
        counter(
            &mut enc,
            "tern_switch_unlearned",
            "Offload candidates not installed: no response taught their entry in time.",
            st.unlearned,
        )?;
        counter(&mut enc, "tern_switch_learn_full", "Offload candidates beyond the learning table.", st.learn_full)?;
        counter(
            &mut enc,
            "tern_switch_installed_by_response",
            "Entries a table kept by responses put in (install).",
            st.installed_by_response,
        )?;
        counter(
            &mut enc,
            "tern_switch_removed_by_response",
            "Entries a table kept by responses took out (remove).",
            st.removed_by_response,
        )?;
        counter(
            &mut enc,
            "tern_switch_install_refused",
            "Installs a table kept by responses refused, full (the flow stays on the server path).",
            st.install_refused,
        )?;
        counter(&mut enc, "tern_switch_failovers", "Servers failed over after missed heartbeats.", s.failovers)?;
        gauge(
            &mut enc,
            "tern_switch_generation",
            "Configuration generation (1 at start; each reload adds one).",
            s.generation as i64,
        )
    }
}

/// What the switch did with the frames so far, as the progress line and the summary say it:
/// `N{noun} kept by the switch (M by offloaded entries), R requests to servers, S responses, D
/// dropped`.
fn traffic(st: &tern_switch::switch::SwitchStats, noun: &str) -> String {
    format!(
        "{}{noun} kept by the switch ({} by offloaded entries), {} requests to servers, {} responses, {} dropped",
        st.switch_only,
        st.offloaded,
        st.requests(),
        st.responses,
        st.dropped()
    )
}

/// GETs `url` within `timeout`: the body, or why not.
fn get(url: &str, timeout: Duration) -> Result<String, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(timeout)).build().into();
    agent
        .get(url)
        .call()
        .map_err(|e| format!("{url}: {e}"))?
        .into_body()
        .read_to_string()
        .map_err(|e| format!("{url}: {e}"))
}

/// The live flows of every server with a control endpoint, ⟨flow, server⟩. A server the
/// heartbeats failed over (`failed`) that does not answer is left out: its flows went to its
/// buddy, which lists them.
fn live_flows(control: &[SocketAddr], failed: &[bool]) -> Result<Vec<(FlowId, ServerId)>, String> {
    let mut live = Vec::new();
    for (s, addr) in control.iter().enumerate() {
        let body = match get(&format!("http://{addr}/flows"), Duration::from_secs(2)) {
            Ok(b) => b,
            Err(_) if failed.get(s) == Some(&true) => continue,
            Err(e) => return Err(format!("server {s}'s live flows: {e}")),
        };
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("server {s}: not JSON: {e}"))?;
        for f in v["flows"].as_array().into_iter().flatten() {
            if let Some(f) = f.as_u64() {
                live.push((f, s as ServerId));
            }
        }
    }
    Ok(live)
}

/// `POST /scale?...`: the new members, from the current ones.
fn new_members(query: &str, current: &[ServerId], servers: usize) -> Result<Vec<ServerId>, String> {
    let (k, v) = query.split_once('=').ok_or("give add=S, remove=S or members=S,T")?;
    let num = |s: &str| -> Result<ServerId, String> {
        let n: ServerId = s.trim().parse().map_err(|_| format!("`{s}` is not a server index"))?;
        if usize::from(n) >= servers {
            return Err(format!("server {n}: no such server ({servers} configured)"));
        }
        Ok(n)
    };
    let mut m = current.to_vec();
    match k {
        "add" => {
            let s = num(v)?;
            if m.contains(&s) {
                return Err(format!("server {s} is in the group already"));
            }
            m.push(s);
        }
        "remove" => {
            let s = num(v)?;
            if !m.contains(&s) {
                return Err(format!("server {s} is not in the group"));
            }
            m.retain(|&x| x != s);
        }
        "members" => m = v.split(',').map(num).collect::<Result<_, _>>()?,
        other => return Err(format!("`{other}`: give add=S, remove=S or members=S,T")),
    }
    if m.is_empty() {
        return Err("a group needs at least one server".into());
    }
    Ok(m)
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// `tern switch serve`.
pub fn serve(a: &ServeArgs) -> CmdResult {
    // Checked before anything starts; the schedule starts at the serving loop's first look.
    let mut ticker = crate::progress::Ticker::new(a.stats_interval)?;
    let (cfg, mut sw) = load(&a.config)?;
    let pool = Pool::new(8192, tern_io::DEFAULT_BUF_SIZE);
    let mut ports = Vec::new();
    for spec in &cfg.ports {
        ports.push(FramePort::open_polled(spec, &pool, a.busy_poll)?);
    }
    let stop = crate::signals::stop_flag()?;
    let snap = Arc::new(Mutex::new(snapshot(&sw, 0, 1, &ports)));
    let (ctl_tx, ctl_rx) = mpsc::channel::<Ctl>();
    let http_stop = Arc::new(AtomicBool::new(false));
    let failovers = Arc::new(AtomicU64::new(0));
    let control = Arc::new(Mutex::new(cfg.control.clone()));
    // Servers the heartbeats failed over (until they answer again), by server.
    let failed: Arc<Mutex<Vec<bool>>> = Arc::new(Mutex::new(vec![false; cfg.control.len()]));
    let endpoint = match a.metrics {
        Some(addr) => {
            let mut registry = Registry::default();
            registry.register_collector(Box::new(SwitchCollector(snap.clone())));
            let ask = Mutex::new(ctl_tx.clone());
            let snap_g = snap.clone();
            let control_g = control.clone();
            let extra: crate::metrics::Extra = Box::new(move |path| match path {
                "/tables" => {
                    let (tx, rx) = mpsc::channel();
                    ask.lock().ok()?.send(Ctl::Tables(tx)).ok()?;
                    let mut v = rx.recv_timeout(Duration::from_secs(2)).ok()?;
                    v["servers"] = json!(control_g.lock().map(|c| c.clone()).unwrap_or_default());
                    Some(v.to_string())
                }
                "/group" => {
                    let s = snap_g.lock().ok()?.clone();
                    Some(json!({"version": s.version, "members": s.members, "previous": s.previous, "pins": s.pins, "filter_fill": s.fill, "busy": s.busy}).to_string())
                }
                _ => None,
            });
            let ask = Mutex::new(ctl_tx.clone());
            let snap_p = snap.clone();
            let control_p = control.clone();
            let failed_p = failed.clone();
            let servers = cfg.switch.servers.len();
            let post: crate::metrics::Post = Box::new(move |url, _body| {
                let (path, query) = url.split_once('?').unwrap_or((url, ""));
                if path != "/scale" {
                    return None;
                }
                // Checked here against the last published group (a bad query is a 400); the
                // data loop applies it to the group as it is then (a failover since included).
                let current = snap_p.lock().map(|s| s.members.clone()).unwrap_or_default();
                if let Err(e) = new_members(query, &current, servers) {
                    return Some(Err((400, e)));
                }
                let addrs = control_p.lock().map(|c| c.clone()).unwrap_or_default();
                let failed = failed_p.lock().map(|f| f.clone()).unwrap_or_default();
                let live = match live_flows(&addrs, &failed) {
                    Ok(l) => l,
                    Err(e) => return Some(Err((502, e))),
                };
                let (tx, rx) = mpsc::channel();
                let n = live.len();
                let sent = ask.lock().map(|a| a.send(Ctl::Change { query: query.to_string(), live, reply: tx }));
                if !matches!(sent, Ok(Ok(()))) {
                    return Some(Err((503, "the switch is stopping".into())));
                }
                Some(match rx.recv_timeout(Duration::from_secs(5)) {
                    Ok(Ok((version, members))) => {
                        Ok(json!({"version": version, "members": members, "live_flows": n}).to_string())
                    }
                    Ok(Err(e)) => Err((409, e)),
                    Err(_) => Err((504, "the switch did not answer".into())),
                })
            });
            let text = tern_wire::read_regular_text(&a.config, tern_wire::MAX_CONFIG_BYTES).unwrap_or_default();
            let config = Arc::new(Mutex::new(text));
            Some(crate::metrics::serve_with_post(addr, registry, config, http_stop.clone(), Some(extra), Some(post))?)
        }
        None => None,
    };
    // Heartbeats: each server's /ready polled every third of the bound; a member silent for
    // the bound is failed over to the next live member.
    let hb_stop = http_stop.clone();
    let hb_tx = ctl_tx.clone();
    let hb_snap = snap.clone();
    let hb_failed = failed.clone();
    let bound = cfg.heartbeat;
    let buddies = cfg.buddies.clone();
    let addrs = control.lock().map(|c| c.clone()).unwrap_or_default();
    // Each server polled by a thread of its own (one slow answer delays no other server's),
    // over one kept-alive connection.
    let last_ok: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(vec![Instant::now(); addrs.len()]));
    let mut pollers = Vec::new();
    for (s, addr) in addrs.iter().enumerate() {
        let (stop, last_ok, url) = (http_stop.clone(), last_ok.clone(), format!("http://{addr}/ready"));
        pollers.push(std::thread::Builder::new().name(format!("tern-switch-heartbeat-{s}")).spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(bound / 3)).build().into();
            while !stop.load(Ordering::Relaxed) {
                let round = Instant::now();
                let ok = agent
                    .get(&url)
                    .call()
                    .is_ok_and(|mut r| r.status().as_u16() == 200 && r.body_mut().read_to_string().is_ok());
                if ok && let Ok(mut l) = last_ok.lock() {
                    l[s] = Instant::now();
                }
                crate::signals::sleep_unless(&stop, round + bound / 3);
            }
        })?);
    }
    let watching_servers = !addrs.is_empty();
    let heartbeats = std::thread::Builder::new().name("tern-switch-heartbeats".into()).spawn(move || {
        let takeover: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(bound)).build().into();
        while !hb_stop.load(Ordering::Relaxed) && !addrs.is_empty() {
            let round = Instant::now();
            let last = last_ok.lock().map(|l| l.clone()).unwrap_or_default();
            let mut failed = hb_failed.lock().map(|f| f.clone()).unwrap_or_default();
            for (s, t) in last.iter().enumerate() {
                if t.elapsed() < bound {
                    failed[s] = false;
                }
            }
            let members = hb_snap.lock().map(|s| s.members.clone()).unwrap_or_default();
            for &m in &members {
                let s = usize::from(m);
                if s < addrs.len() && !failed[s] && last[s].elapsed() >= bound {
                    let live = |b: ServerId| b != m && last.get(usize::from(b)).is_some_and(|t| t.elapsed() < bound);
                    // Its configured buddy holds its replicas; without one, the next live member.
                    let buddy = match buddies.get(s) {
                        Some(&b) => Some(b).filter(|&b| live(b) && members.contains(&b)),
                        None => members.iter().copied().find(|&b| live(b)),
                    };
                    if let Some(buddy) = buddy {
                        failed[s] = true;
                        let _ = hb_tx.send(Ctl::FailOver { dead: m, buddy });
                        // The buddy takes over: what it adopted is live there and goes on to
                        // its own buddy (docs/clip.md, "Running a switch and its servers").
                        if let Some(b) = addrs.get(usize::from(buddy)) {
                            let _ = takeover.post(&format!("http://{b}/takeover")).send(&[][..]);
                        }
                    }
                }
            }
            if let Ok(mut f) = hb_failed.lock() {
                *f = failed;
            }
            crate::signals::sleep_unless(&hb_stop, round + bound / 3);
        }
    })?;
    // Reload: the configuration and its program watched; a change that loads is applied.
    let watch_stop = http_stop.clone();
    let watch_tx = ctl_tx.clone();
    let (config_path, program_path) = (a.config.clone(), cfg.program_path.clone());
    let watcher = std::thread::Builder::new().name("tern-switch-watch".into()).spawn(move || {
        let mut seen = (mtime(&config_path), mtime(&program_path));
        while !watch_stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            tern_io::failpoint("switch-watch");
            let now = (mtime(&config_path), mtime(&program_path));
            if now == seen {
                continue;
            }
            seen = now;
            match load(&config_path) {
                Ok(loaded) => {
                    let _ = watch_tx.send(Ctl::Reload(Box::new(loaded)));
                }
                Err(e) => eprintln!("reload refused (the running configuration stays): {e}"),
            }
        }
    })?;
    // The side threads — each server's poller, the heartbeats (with servers to watch), the
    // watcher — run until the switch stops: one that ends before stops it (a bug's panic, say),
    // rather than leave the switch without failover or reloads.
    let mut side = pollers;
    if watching_servers {
        side.push(heartbeats);
    } else {
        let _ = heartbeats.join();
    }
    side.push(watcher);
    let mut ended_early = None;
    drop(ctl_tx);
    if !a.json {
        eprintln!(
            "switch serve: program `{}` on {} ports ({} servers, group {:?}){}; Ctrl-C stops",
            cfg.program.name,
            cfg.ports.len(),
            cfg.switch.servers.len(),
            cfg.switch.members,
            endpoint.map(|e| format!(", control on http://{e}")).unwrap_or_default()
        );
    }
    let start = Instant::now();
    let deadline = crate::signals::deadline(start, a.duration);
    let peers: Vec<_> = ports.iter().map(|p| p.peer()).collect();
    let wait_fds: Option<Vec<_>> = ports.iter().map(tern_io::Port::wait_fd).collect();
    let mut outs: Vec<Batch> = (0..=ports.len()).map(|_| Batch::new(4 * tern_io::DEFAULT_BATCH)).collect();
    let mut input = Batch::new(tern_io::DEFAULT_BATCH);
    let mut generation = 1u64;
    let (mut last_interval, mut last_publish) = (start, start);
    let mut cfg = cfg;
    loop {
        let now = Instant::now();
        if crate::signals::stopping(&stop) || deadline.is_some_and(|d| now >= d) {
            break;
        }
        if ticker.due(now) {
            let (rx, tx) =
                ports.iter().map(tern_io::Port::stats).fold((0, 0), |(r, t), s| (r + s.rx_packets, t + s.tx_packets));
            let (rate, secs) = ticker.rate(rx, now);
            eprintln!(
                "[{:>6.0} s] {rx} frames in, {tx} out; {}; {rate:.0} frames/s in over the last {secs:.0} s",
                start.elapsed().as_secs_f64(),
                traffic(sw.stats(), ""),
            );
        }
        let mut any = false;
        for (i, p) in ports.iter_mut().enumerate() {
            if tern_io::Port::recv(p, now, &mut input).unwrap_or(0) > 0 {
                any = true;
                sw.process(i as u16 + 1, &mut input, &mut outs, &pool);
            }
        }
        // Busy marks lapse; requests held for a server no longer busy go out.
        sw.tick(now.duration_since(start).as_nanos() as u64, &mut outs);
        for (j, b) in outs.iter_mut().enumerate().skip(1) {
            if b.is_empty() {
                continue;
            }
            if let Some(peer) = peers[j - 1] {
                for p in b.iter_mut() {
                    p.set_peer(peer);
                }
            }
            let _ = ports[j - 1].port().send(now, b);
            b.recycle(&pool);
        }
        if !any && !a.busy_poll {
            // Idle: sleep until a frame arrives on any port (or 100 µs pass, for the ticks and
            // the controller), so the next frame waits for no timer.
            match &wait_fds {
                Some(fds) => {
                    let _ = tern_io::wait_any(fds, Duration::from_micros(100));
                }
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        if now.duration_since(last_interval) >= cfg.interval {
            last_interval = now;
            sw.interval();
        }
        while let Ok(c) = ctl_rx.try_recv() {
            match c {
                Ctl::Change { query, live, reply } => {
                    let current = sw.selector().current().members.clone();
                    let changed = new_members(&query, &current, cfg.switch.servers.len())
                        .and_then(|m| sw.change_group(&m, &live).map(|v| (v, m)).map_err(|e| e.to_string()));
                    let _ = reply.send(changed);
                }
                Ctl::FailOver { dead, buddy } => {
                    if sw.fail_over(dead, buddy).is_ok() {
                        failovers.fetch_add(1, Ordering::Relaxed);
                        eprintln!(
                            "server {dead} missed its heartbeats for {} ms: failed over to server {buddy}",
                            cfg.heartbeat.as_millis()
                        );
                    }
                }
                Ctl::Tables(reply) => {
                    let table = sw.pipeline().mirrored_table().unwrap_or("").to_string();
                    let rows_at = |r: usize| -> Vec<serde_json::Value> {
                        sw.original_entries_at(r)
                            .into_iter()
                            .map(|(k, p, hits)| json!({"key": k, "params": p, "hits": hits}))
                            .collect()
                    };
                    let rows = rows_at(0);
                    // The program's other mirrored tables (SNAT's `nat_in`), each the same way.
                    let more: Vec<_> = (1..sw.pipeline().mirrored_count())
                        .map(|r| json!({"table": sw.pipeline().mirrored_table_at(r), "action": sw.pipeline().learn_action_at(r), "original": rows_at(r)}))
                        .collect();
                    let _ = reply.send(json!({
                        "table": table, "action": sw.pipeline().learn_action(), "capacity": sw.config().offload.capacity,
                        "original": rows, "generation": generation, "more": more,
                    }));
                }
                Ctl::Reload(loaded) => {
                    let (new, mut fresh) = *loaded;
                    if new.ports != cfg.ports || new.switch.servers != cfg.switch.servers {
                        eprintln!(
                            "reload refused: ports and servers change only with a restart (the running configuration stays)"
                        );
                        continue;
                    }
                    let program_changed = new.program != cfg.program;
                    if program_changed {
                        // A new program: new tables, the group and its pins kept (no flow moves);
                        // the mirrored entries are learned again from the servers' answers.
                        sw.replace_with(fresh);
                    } else {
                        sw.take_routes(&mut fresh);
                    }
                    generation += 1;
                    eprintln!(
                        "reloaded {} (generation {generation}{})",
                        a.config.display(),
                        if program_changed { ", new program" } else { "" }
                    );
                    cfg = new;
                }
            }
        }
        if now.duration_since(last_publish) >= Duration::from_millis(100) {
            last_publish = now;
            if let Some(e) = tern_io::take_ended(&mut side, |()| "it returned".into()) {
                ended_early = Some(e);
                break;
            }
            if let Ok(mut s) = snap.try_lock() {
                *s = snapshot(&sw, failovers.load(Ordering::Relaxed), generation, &ports);
            }
        }
    }
    http_stop.store(true, Ordering::Relaxed);
    for t in side {
        let _ = t.join();
    }
    if let Some(e) = ended_early {
        return Err(format!("{e}; the switch stopped").into());
    }
    let st = sw.stats();
    // Every reason, from 0, in the JSON; those above 0 in the line printed.
    let drops: serde_json::Map<String, serde_json::Value> =
        DropReason::ALL.iter().map(|&r| (r.name().to_string(), json!(st.drop_count(r)))).collect();
    let dropped: serde_json::Map<String, serde_json::Value> =
        drops.iter().filter(|(_, n)| n.as_u64() > Some(0)).map(|(r, n)| (r.clone(), n.clone())).collect();
    // Each register array's sum (TCP retransmission detection's counts, for one).
    let registers: serde_json::Map<String, serde_json::Value> = sw
        .pipeline()
        .program()
        .registers
        .iter()
        .filter_map(|r| {
            sw.pipeline()
                .register(&r.name)
                .map(|v| (r.name.clone(), json!(v.iter().copied().fold(0u64, u64::wrapping_add))))
        })
        .collect();
    // Faults injected on ports that have them (`,loss=P`).
    let faults: Vec<serde_json::Value> = ports
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            p.fault_stats().map(|(tx, rx)| json!({"port": i + 1, "sent_dropped": tx.dropped, "received_dropped": rx.dropped, "sent_duplicated": tx.duplicated, "received_duplicated": rx.duplicated}))
        })
        .collect();
    let port_stats: Vec<serde_json::Value> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let st = tern_io::Port::stats(p);
            json!({"port": i + 1, "rx_packets": st.rx_packets, "tx_packets": st.tx_packets, "rx_dropped": st.rx_dropped, "tx_dropped": st.tx_dropped})
        })
        .collect();
    let why = crate::signals::why_stopped(&stop, "duration");
    let summary = json!({
        "stopped_by": why,
        "ports": port_stats,
        "switch_only": st.switch_only, "offloaded": st.offloaded, "requests": st.requests(), "responses": st.responses,
        "arp_replies": st.arp_replies, "drops": drops, "group_version": sw.selector().current().version,
        "entries": sw.offload().entries(), "generation": generation, "seconds": start.elapsed().as_secs_f64(),
        "registers": registers, "faults": faults,
        "installed_by_response": st.installed_by_response, "removed_by_response": st.removed_by_response,
        "install_refused": st.install_refused,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "switch serve stopped ({why}) after {:.1} s: {}{}, group version {}, generation {generation}{}",
            start.elapsed().as_secs_f64(),
            traffic(st, " frames"),
            if dropped.is_empty() { String::new() } else { format!(" ({})", serde_json::Value::Object(dropped)) },
            sw.selector().current().version,
            ports
                .iter()
                .enumerate()
                .map(|(i, p)| (i + 1, tern_io::Port::stats(p)))
                .filter(|(_, st)| st.rx_dropped + st.tx_dropped > 0)
                .map(|(i, st)| format!("; port {i} dropped {} received, {} sent", st.rx_dropped, st.tx_dropped))
                .collect::<String>()
        );
    }
    Ok(ExitCode::SUCCESS)
}
