//! `tern rpc serve CONFIG`: an RPC service (`examples/rpc/image.toml`) over QNP on UDP. Each of
//! the configuration's lanes is a thread with its own socket in one `SO_REUSEPORT` group (a
//! client's packets reach one lane), and all share one exactly-once memory, the live schema
//! table, the pools and the compute units. A call is checked (method, class), its body decoded
//! with the table as it is when it arrives (a body that does not decode is answered
//! `bad_request`, the error naming the field path and byte offset), served by the application,
//! and its response serialized (memory-affinity in `rpcnic` mode, the plain encoder in
//! `cpu-only`). SIGINT or SIGTERM stops it: a summary, exit 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use tern_endpoint::{Incoming, RpcServer, Status};
use tern_io::udp::{UdpConfig, UdpPort};
use tern_io::{Pool, Port};
use tern_qnp::{DropReason, QnpConfig};
use tern_rpc::cu::{ComputeUnit, UnitConfig};
use tern_rpc::image::{CallStatus, ImageService, KERNEL, Serializer};
use tern_rpc::kernel::Kernel;
use tern_rpc::placement::LiveSchema;
use tern_rpc::service::Service;

use crate::CmdResult;

/// The image app's one method.
pub const STORE: u32 = tern_rpc::image::STORE;

/// Where the work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Placement by the schema table, kernels on compute units, memory-affinity serialization.
    Rpcnic,
    /// Everything on host threads: no compute units, the plain encoder.
    CpuOnly,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The service configuration (TOML; examples/rpc/image.toml).
    pub config: PathBuf,
    /// UDP address to take calls on (port 0: any free port, printed).
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub listen: SocketAddr,
    /// Serve Prometheus metrics (`tern_rpc_*`) at http://ADDR/metrics.
    #[arg(long)]
    pub metrics: Option<SocketAddr>,
    /// Where the work runs.
    #[arg(long, value_enum, default_value_t = Mode::Rpcnic)]
    pub mode: Mode,
    /// Stop after this many seconds (0: at SIGINT or SIGTERM).
    #[arg(long, default_value_t = 0.0)]
    pub duration: f64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// What the lanes counted.
#[derive(Debug, Default)]
pub struct Counters {
    /// Calls answered, by status (in `Status::ALL`'s order).
    pub calls: [AtomicU64; 6],
    /// Values and bytes moved between host and device memory.
    pub moved_values: AtomicU64,
    pub moved_bytes: AtomicU64,
    /// Images compressed on a compute unit, and on the host.
    pub on_unit: AtomicU64,
    pub on_host: AtomicU64,
    /// QNP drops, summed over the lanes (in `DropReason::ALL`'s order), as last published.
    pub drops: Vec<Vec<AtomicU64>>,
}

fn status_index(s: Status) -> usize {
    Status::ALL.iter().position(|&x| x == s).unwrap_or(0)
}

/// `tern rpc serve`.
pub fn run(a: &ServeArgs) -> CmdResult {
    let svc = Service::load(&a.config)?;
    if !(a.duration >= 0.0 && a.duration.is_finite()) {
        return Err("--duration must be a number of seconds, 0 or more".into());
    }
    let key =
        svc.units.iter().find(|u| u.kernel == KERNEL).and_then(|u| u.key).ok_or_else(|| {
            format!("{}: the image app needs a `{KERNEL}` unit entry for its key", svc.file.display())
        })?;
    let stop = crate::signals::stop_flag()?;
    let pools = svc.pools();
    let live = LiveSchema::new(svc.table.clone(), svc.config.auto_update);
    let units: Vec<ComputeUnit> = match a.mode {
        Mode::CpuOnly => Vec::new(),
        Mode::Rpcnic => {
            let mut v = Vec::new();
            for u in &svc.units {
                for _ in 0..u.count {
                    let unit = ComputeUnit::new(UnitConfig {
                        reconfigure: Duration::from_millis(u.reconfigure_ms),
                        ..UnitConfig::default()
                    })?;
                    unit.program(Some(Kernel::new(u.kernel, u.key.as_ref())?));
                    v.push(unit);
                }
            }
            v
        }
    };
    // A plain bind first proves the address free: SO_REUSEPORT would join another server's group.
    if a.listen.port() != 0 {
        std::net::UdpSocket::bind(a.listen)
            .map_err(|e| format!("cannot listen on {}: {e} (another server holds it?)", a.listen))?;
    }
    let pool = Pool::new(16384, tern_io::DEFAULT_BUF_SIZE);
    let udp = UdpConfig { reuse_port: true, ..UdpConfig::default() };
    let first = UdpPort::bind(a.listen, &pool, &udp).map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let addr = first.local_addr();
    let mut ports = vec![first];
    for _ in 1..svc.config.lanes {
        ports.push(UdpPort::bind(addr, &pool, &udp)?);
    }
    let qnp = QnpConfig::default();
    let memory = Arc::new(tern_qnp::ExactlyOnce::new(&qnp, ports.len()));
    let counters = Arc::new(Counters {
        drops: (0..ports.len()).map(|_| DropReason::ALL.iter().map(|_| AtomicU64::new(0)).collect()).collect(),
        ..Counters::default()
    });
    if let Some(m) = a.metrics {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(super::metrics::RpcCollector { counters: counters.clone() }));
        let config = Arc::new(std::sync::Mutex::new(std::fs::read_to_string(&a.config).unwrap_or_default()));
        let bound = crate::metrics::serve(m, registry, config, stop.clone(), None)?;
        eprintln!("metrics on http://{bound}/metrics");
    }
    eprintln!(
        "serving {} ({} mode, {} lane(s), {} compute unit(s)) on udp://{addr}",
        svc.file.display(),
        if a.mode == Mode::Rpcnic { "rpcnic" } else { "cpu-only" },
        ports.len(),
        units.len()
    );
    let started = Instant::now();
    let deadline = (a.duration > 0.0).then(|| started + Duration::from_secs_f64(a.duration));
    std::thread::scope(|scope| -> Result<(), String> {
        let mut lanes = Vec::new();
        for (i, port) in ports.into_iter().enumerate() {
            let (svc, live, pools, pool, units, counters, stop, memory) =
                (&svc, &live, &pools, &pool, &units, &counters, &stop, memory.clone());
            let mode = a.mode;
            lanes.push(scope.spawn(move || -> Result<(), String> {
                let mut server = RpcServer::with_memory(port, pool, QnpConfig::default(), memory);
                let unit = (!units.is_empty()).then(|| &units[i % units.len()]);
                let mut app = ImageService::new(live, pools, unit, &key, svc.config.authorized.iter().copied());
                let mut calls: Vec<Incoming> = Vec::new();
                while !crate::signals::stopping(stop) && deadline.is_none_or(|d| Instant::now() < d) {
                    calls.clear();
                    server.recv(&mut calls, Duration::from_millis(50)).map_err(|e| e.to_string())?;
                    for c in calls.drain(..) {
                        let (status, error, body) = handle(&c, &mut app, mode, counters);
                        counters.calls[status_index(status)].fetch_add(1, Ordering::Relaxed);
                        // A reply too large for QNP is the service's failure, answered as such.
                        if server.reply(c.handle, c.header.request_id, status, &error, &body).is_err() {
                            let _ =
                                server.reply(c.handle, c.header.request_id, Status::Internal, "reply too large", &[]);
                        }
                    }
                    server.flush().map_err(|e| e.to_string())?;
                    let stats = server.qnp().core().stats();
                    for (j, r) in DropReason::ALL.iter().enumerate() {
                        counters.drops[i][j].store(stats.drops_of(*r), Ordering::Relaxed);
                    }
                }
                Ok(())
            }));
        }
        for l in lanes {
            l.join().map_err(|_| "a lane panicked".to_string())??;
        }
        Ok(())
    })?;
    let secs = started.elapsed().as_secs_f64();
    let by_status: Vec<(&str, u64)> =
        Status::ALL.iter().map(|s| (s.name(), counters.calls[status_index(*s)].load(Ordering::Relaxed))).collect();
    let drops: Vec<(&str, u64)> = DropReason::ALL
        .iter()
        .enumerate()
        .map(|(j, r)| (r.as_str(), counters.drops.iter().map(|l| l[j].load(Ordering::Relaxed)).sum()))
        .collect();
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    if a.json {
        let v = serde_json::json!({
            "listen": addr.to_string(), "seconds": secs,
            "calls": by_status.iter().map(|(n, c)| (n.to_string(), serde_json::json!(c))).collect::<serde_json::Map<_, _>>(),
            "on_unit": get(&counters.on_unit), "on_host": get(&counters.on_host),
            "moved_values": get(&counters.moved_values), "moved_bytes": get(&counters.moved_bytes),
            "schema_generation": live.generation(),
            "qnp_drops": drops.iter().map(|(n, c)| (n.to_string(), serde_json::json!(c))).collect::<serde_json::Map<_, _>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!("stopped after {secs:.1} s:");
        for (n, c) in &by_status {
            println!("  calls {n}: {c}");
        }
        println!(
            "  images on a compute unit: {}, on the host: {}; moved {} values ({} bytes); schema generation {}",
            get(&counters.on_unit),
            get(&counters.on_host),
            get(&counters.moved_values),
            get(&counters.moved_bytes),
            live.generation()
        );
        for (n, c) in drops.iter().filter(|(_, c)| *c > 0) {
            println!("  qnp dropped {n}: {c}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One call, by the service's own sans-IO handler; counted.
fn handle(c: &Incoming, app: &mut ImageService<'_>, mode: Mode, counters: &Counters) -> (Status, String, Vec<u8>) {
    let serializer = match mode {
        Mode::Rpcnic => Serializer::MemoryAffinity,
        Mode::CpuOnly => Serializer::Cpu,
    };
    let a = app.call(c.header.method, c.header.class_id, &c.body, serializer);
    if let Some(served) = a.served {
        counters.moved_values.fetch_add(served.moved.values, Ordering::Relaxed);
        counters.moved_bytes.fetch_add(served.moved.bytes, Ordering::Relaxed);
        if served.status == 0 {
            let n = if served.on_unit { &counters.on_unit } else { &counters.on_host };
            n.fetch_add(1, Ordering::Relaxed);
        }
    }
    let status = match a.status {
        CallStatus::Ok => Status::Ok,
        CallStatus::BadRequest => Status::BadRequest,
        CallStatus::UnknownMethod => Status::UnknownMethod,
        CallStatus::UnknownClass => Status::UnknownClass,
        CallStatus::Internal => Status::Internal,
    };
    (status, a.error, a.body)
}
