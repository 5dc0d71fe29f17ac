//! `tern bench rpc --apps`: RpcNIC's applications end to end (§V-D, Figures 12 and 13) in the
//! three modes, in one process: Algorithm 1's image service and the five DeathStarBench-like
//! social network services, each served by `tern rpc serve`'s own runtime
//! ([`super::serve::serve_ports`]: a NIC lane thread, a host handler thread and, for the image
//! service, a compute unit) over QNP on loopback, called by a closed-loop client; the modes
//! alternate, in an order that turns each round.
//!
//! Measured here, per service and mode: calls per second and latency (p50, p99) at the
//! client; the host's CPU time per call — the handler thread's, and in `cpu-only` and
//! `protoacc-pcie`, whose designs run the RPC stack on the host, the lane's transport work too
//! ([`Counters::host_cpu_ns`]) — and the CPU time this machine spent on the card's work
//! ([`Counters::device_cpu_ns`]: the lane's (de)serialization, or in `rpcnic` all of it). Projected for the U280 (`tern_hw::rpc`'s
//! model, from the counts of one call and the host time measured here): a call's latency and
//! the calls per second one host core sustains, with what bounds it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{Value, json};
use tern_endpoint::{Header, RpcClient, Status};
use tern_io::Port;
use tern_io::udp::{UdpConfig, UdpPort};
use tern_rpc::app::{self, App, Mode};
use tern_rpc::cu::{ComputeUnit, UnitConfig};
use tern_rpc::decode::{DecodeOptions, Pools, WriteMode, decode};
use tern_rpc::image::{self, ImageService, KERNEL};
use tern_rpc::kernel::Kernel;
use tern_rpc::message::Message;
use tern_rpc::placement::LiveSchema;
use tern_rpc::service::{Service, ServiceConfig, Units};
use tern_rpc::social::{self, SocialNetwork};

use super::bench::{spread, spread_json as sj};
use super::serve::{Counters, serve_ports, transport};
use crate::CmdResult;
use crate::env::Environment;

/// The demonstration key the image service seals with.
const KEY: [u8; 32] = [0x42; 32];
/// The image service's avatar: 128 x 128 raw RGB (48 KiB).
const AVATAR: u32 = 128;
/// Calls outstanding at once.
const CONCURRENCY: usize = 8;

/// One service to measure: its configuration and the calls made (method, class id, body).
struct Workload {
    name: String,
    svc: Service,
    calls: Vec<(u32, u32, Vec<u8>)>,
    /// The paper's figure for it, as text.
    paper: &'static str,
}

fn config(app: &str) -> Result<ServiceConfig, String> {
    // One lane and one handler thread: the measurement is of a call's work, not of scaling on
    // this machine's two cores.
    let text =
        format!("app = \"{app}\"\nproto = \"{app}.proto\"\nprofile = \"rpcnic-u280\"\nlanes = 1\nhandlers = 1\n");
    toml::from_str(&text).map_err(|e| e.to_string())
}

fn workloads() -> Result<Vec<Workload>, String> {
    let mut out = Vec::new();
    let table = image::schema();
    let user = table.class_by_name("image.User").ok_or("image.proto has image.User")?.id;
    let calls = (1..=4).map(|i| (image::STORE, user, image::request(&table, 1, AVATAR, AVATAR + i - 1))).collect();
    out.push(Workload {
        name: "image".into(),
        svc: Service {
            config: config("image")?,
            file: PathBuf::from("examples/rpc/image.toml"),
            table,
            units: vec![Units { kernel: KERNEL, key: Some(KEY), count: 1, reconfigure_ms: 0 }],
            samples: Vec::new(),
        },
        calls,
        paper: "RpcNIC 2.6x ProtoACC-PCIe's and 31.8x CPU-only's throughput (Fig. 12a)",
    });
    for (m, name, req, _) in social::METHODS {
        let table = social::schema();
        let class = table.class_by_name(&format!("social.{req}")).ok_or("social.proto")?.id;
        let calls = (1..=16).filter_map(|n| social::request(&table, m, n).map(|b| (m, class, b))).collect();
        out.push(Workload {
            name: format!("{}.{name}", social::service_of(m)),
            svc: Service {
                config: config("social")?,
                file: PathBuf::from("examples/rpc/social.toml"),
                table,
                units: Vec::new(),
                samples: Vec::new(),
            },
            calls,
            paper: "geomean over the five: RpcNIC 1.57x / 1.34x lower execution time than CPU-only / ProtoACC-PCIe (Fig. 13)",
        });
    }
    Ok(out)
}

/// One run of one service in one mode.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    calls_per_s: f64,
    p50_us: f64,
    p99_us: f64,
    host_cpu_us: f64,
    device_cpu_us: f64,
}

/// Serves `w` in `mode` on a free loopback port for `phase` (after a warm-up of a tenth of it)
/// while a closed-loop client calls it.
fn measure(w: &Workload, mode: Mode, phase: Duration) -> Result<Run, String> {
    let listen = "127.0.0.1:0".parse().map_err(|_| "address")?;
    let (qnp, pool) = transport("127.0.0.1:9".parse().map_err(|_| "address")?, None)?;
    let ports = super::serve::bind(listen, 1, &pool)?;
    let addr = ports[0].local_addr();
    let counters = Counters::new(1);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| -> Result<Run, String> {
        let server = s.spawn(|| serve_ports(&w.svc, mode, ports, &pool, &qnp, &counters, &stop, None));
        let client = (|| -> Result<(u64, f64, Histogram<u64>), String> {
            let port = UdpPort::bind("127.0.0.1:0".parse().map_err(|_| "address")?, &pool, &UdpConfig::default())
                .map_err(|e| e.to_string())?;
            let mut client = RpcClient::new(port, &pool, qnp.clone(), addr);
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| e.to_string())?;
            let (mut sent, mut answered) = (0u64, 0u64);
            let mut got = Vec::new();
            let start = Instant::now();
            let warm = start + phase / 10;
            let end = warm + phase;
            let mut measured_from = None;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                if now >= warm && measured_from.is_none() {
                    measured_from = Some((now, answered));
                }
                while client.outstanding() < CONCURRENCY {
                    let (method, class_id, body) = &w.calls[(sent % w.calls.len() as u64) as usize];
                    let h = Header { method: *method, class_id: *class_id, request_id: sent, flags: 0 };
                    client.call(h, body).map_err(|e| e.to_string())?;
                    sent += 1;
                }
                client.flush().map_err(|e| e.to_string())?;
                got.clear();
                client.recv(&mut got, Duration::from_millis(5)).map_err(|e| e.to_string())?;
                for r in got.drain(..) {
                    let a = r.map_err(|f| format!("{}: call {} failed: {:?}", w.name, f.request_id, f.error))?;
                    if a.status != Status::Ok {
                        return Err(format!("{} ({mode}): call answered {}: {}", w.name, a.status.name(), a.error));
                    }
                    answered += 1;
                    if measured_from.is_some() {
                        let _ = hist.record(a.latency.as_nanos().max(1) as u64);
                    }
                }
            }
            let (t0, a0) = measured_from.unwrap_or((start, 0));
            Ok((answered - a0, t0.elapsed().as_secs_f64(), hist))
        })();
        stop.store(true, Ordering::Relaxed);
        server.join().map_err(|_| "the server panicked".to_string())??;
        let (answered, secs, hist) = client?;
        let total = counters.answered(Status::Ok).max(1) as f64;
        Ok(Run {
            calls_per_s: answered as f64 / secs.max(1e-9),
            p50_us: hist.value_at_quantile(0.5) as f64 / 1000.0,
            p99_us: hist.value_at_quantile(0.99) as f64 / 1000.0,
            host_cpu_us: counters.host_cpu_ns(mode) as f64 / 1000.0 / total,
            device_cpu_us: counters.device_cpu_ns(mode) as f64 / 1000.0 / total,
        })
    })
}

/// What one call of `w` in `mode` counts for the U280 model (all but the host time): the first
/// call made, taken sans-IO as the runtime takes it.
fn counts(w: &Workload, mode: Mode) -> Result<tern_hw::rpc::CallCounts, String> {
    let live = LiveSchema::new(w.svc.table.clone(), true);
    let host_table = app::all_host(&w.svc.table);
    let (now, _) = live.snapshot();
    let table = if mode.placed() { &*now } else { &host_table };
    let pools = Pools::default();
    let unit = ComputeUnit::new(UnitConfig::default()).map_err(|e| e.to_string())?;
    unit.program(Some(Kernel::new(KERNEL, Some(&KEY))?));
    let mut app: Box<dyn App> = match w.svc.config.app.as_str() {
        "image" => Box::new(ImageService::new(&live, &pools, Some(&unit), &KEY, [1])),
        _ => Box::new(SocialNetwork::new(&w.svc.table).ok_or("social.proto")?),
    };
    let (method, class, body) = &w.calls[0];
    let m = app::check(app.name(), app.methods(), *method, *class).map_err(|e| e.1)?.clone();
    let os = decode(table, m.request, body, &pools, &DecodeOptions::default()).map_err(|e| e.to_string())?;
    let fbf = DecodeOptions { mode: WriteMode::FieldByField, ..DecodeOptions::default() };
    let ff = decode(table, m.request, body, &pools, &fbf).map_err(|e| e.to_string())?.stats();
    let request = os.stats().model_counts(&ff, body.len());
    let kernel_bytes = if w.svc.config.app == "image" && mode.units() { (AVATAR * AVATAR * 3) as u64 } else { 0 };
    let mut req = os;
    let mut resp = Message::new(table, m.response, &pools);
    let (mut records, mut out) = (Vec::new(), Vec::new());
    let served = app::handle(app.as_mut(), mode, &m, &mut req, &mut resp, &mut records, &mut out);
    let ser = match mode {
        Mode::Rpcnic => tern_rpc::serialize::serialize_records(&resp, &records, &mut out).map_err(|e| e.to_string())?,
        _ => tern_rpc::serialize::nic_only(&resp, &mut out),
    };
    Ok(tern_hw::rpc::CallCounts {
        request,
        write_mode: if mode == Mode::Rpcnic {
            tern_hw::rpc::WriteMode::OneShot
        } else {
            tern_hw::rpc::WriteMode::FieldByField
        },
        response: tern_hw::rpc::SerCounts {
            host_reads: ser.host_reads,
            host_read_bytes: ser.host_read_bytes,
            tx_bytes: ser.tx_bytes,
        },
        kernel_bytes,
        moves: served.moved.values,
        moved_bytes: served.moved.bytes,
        host_ns: 0.0,
        host_cores: 1,
    })
}

fn geomean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { (v.iter().map(|x| x.max(1e-12).ln()).sum::<f64>() / v.len() as f64).exp() }
}

/// `tern bench rpc --apps`.
pub fn run(
    quick: bool,
    rounds: Option<usize>,
    phase_ms: Option<u64>,
    out: &std::path::Path,
    as_json: bool,
) -> CmdResult {
    let rounds = rounds.unwrap_or(if quick { 3 } else { 5 });
    crate::check_count("--rounds", rounds as u64, 1000)?;
    let phase = Duration::from_millis(phase_ms.unwrap_or(if quick { 600 } else { 1500 }));
    if phase < Duration::from_millis(50) || phase > Duration::from_secs(60) {
        return Err("--phase-ms: must be in 50..=60000 with --apps".into());
    }
    let env = Environment::current();
    let ws = workloads()?;
    let model = tern_hw::rpc::RpcModel::from_profile(&tern_hw::Profile::builtin("rpcnic-u280")?)?;
    if !as_json {
        println!(
            "tern bench rpc --apps: the image service (Algorithm 1, {AVATAR}x{AVATAR} raw RGB avatars) and five DeathStarBench-like services, each in cpu-only, protoacc-pcie and rpcnic mode"
        );
        println!(
            "{rounds} round(s), {} ms per mode per round (after a tenth of that to warm up), modes alternating; one lane, one handler thread, one compute unit; {CONCURRENCY} calls outstanding over QNP on loopback",
            phase.as_millis()
        );
        println!("{}", env.describe());
    }
    let bar = crate::progress::bar((ws.len() * rounds * Mode::ALL.len()) as u64, "bench rpc --apps", as_json);
    // runs[w][mode] = one Run per round.
    let mut runs = vec![vec![Vec::<Run>::new(); Mode::ALL.len()]; ws.len()];
    for r in 0..rounds {
        for (wi, w) in ws.iter().enumerate() {
            for k in 0..Mode::ALL.len() {
                let mi = (k + r + wi) % Mode::ALL.len();
                runs[wi][mi].push(measure(w, Mode::ALL[mi], phase)?);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    let mut rows = Vec::new();
    let mut plot_rows = Vec::new();
    // Figure 13's comparison: a call's time, CPU-only's (ProtoACC-PCIe's) over RpcNIC's.
    let (mut lat_cpu, mut lat_pa) = (Vec::new(), Vec::new());
    let (mut proj_cpu, mut proj_pa) = (Vec::new(), Vec::new());
    let mut image_ratio = None;
    for (wi, w) in ws.iter().enumerate() {
        let mut modes = serde_json::Map::new();
        let mut host_medians = Vec::new();
        let mut projected = [0.0f64; 3];
        let mut projected_us = [0.0f64; 3];
        for (mi, mode) in Mode::ALL.iter().enumerate() {
            let rs = &runs[wi][mi];
            let pick = |f: fn(&Run) -> f64| spread(&rs.iter().map(f).collect::<Vec<_>>());
            let host = pick(|r| r.host_cpu_us);
            host_medians.push(host.median);
            let mut m = json!({
                "calls_per_s": sj(pick(|r| r.calls_per_s)),
                "p50_us": sj(pick(|r| r.p50_us)),
                "p99_us": sj(pick(|r| r.p99_us)),
                "host_cpu_us_per_call": sj(host),
                "device_cpu_us_per_call": sj(pick(|r| r.device_cpu_us)),
            });
            // The U280: the device's stages modelled, the host's time the median measured here.
            let u280 = if *mode == Mode::CpuOnly {
                // Nothing on the card: a host core's rate is the time measured here.
                projected[mi] = if host.median > 0.0 { 1e6 / host.median } else { 0.0 };
                projected_us[mi] = host.median;
                json!({ "per_host_core_calls_per_s": projected[mi], "latency_us": host.median, "bound": "host cores" })
            } else {
                let mut c = counts(w, *mode)?;
                c.host_ns = host.median * 1000.0;
                let p = model.call(&c);
                projected[mi] = p.per_s;
                projected_us[mi] = p.ns / 1000.0;
                json!({
                    "per_host_core_calls_per_s": p.per_s, "latency_us": p.ns / 1000.0, "bound": p.bound.as_str(),
                    "deserialize_us": p.deserialize_ns / 1000.0, "kernel_us": p.kernel_ns / 1000.0,
                    "moves_us": p.moves_ns / 1000.0, "serialize_us": p.serialize_ns / 1000.0, "counts": c,
                })
            };
            m["u280_projected"] = u280;
            modes.insert(mode.name().to_string(), m);
        }
        // Per-round ratios: mode a's figure over mode b's.
        let ratio = |a: usize, b: usize, f: fn(&Run) -> f64| {
            spread(&runs[wi][a].iter().zip(&runs[wi][b]).map(|(x, y)| f(x) / f(y).max(1e-9)).collect::<Vec<_>>())
        };
        let cpu_over_rpcnic = ratio(0, 2, |r| r.host_cpu_us);
        let pa_over_rpcnic = ratio(1, 2, |r| r.host_cpu_us);
        let rpcnic_over_cpu_tput = ratio(2, 0, |r| r.calls_per_s);
        let rpcnic_over_pa_tput = ratio(2, 1, |r| r.calls_per_s);
        let (cpu_over_rpcnic_p50, pa_over_rpcnic_p50) = (ratio(0, 2, |r| r.p50_us), ratio(1, 2, |r| r.p50_us));
        if w.svc.config.app == "image" {
            image_ratio = Some(cpu_over_rpcnic);
        } else {
            lat_cpu.push(cpu_over_rpcnic_p50.median);
            lat_pa.push(pa_over_rpcnic_p50.median);
            proj_cpu.push(projected_us[0] / projected_us[2].max(1e-9));
            proj_pa.push(projected_us[1] / projected_us[2].max(1e-9));
        }
        plot_rows.push((w.name.clone(), host_medians));
        rows.push(json!({
            "service": w.name, "modes": modes,
            "cpu_only_over_rpcnic_host_cpu": sj(cpu_over_rpcnic),
            "protoacc_pcie_over_rpcnic_host_cpu": sj(pa_over_rpcnic),
            "rpcnic_over_cpu_only_calls_per_s": sj(rpcnic_over_cpu_tput),
            "rpcnic_over_protoacc_pcie_calls_per_s": sj(rpcnic_over_pa_tput),
            "cpu_only_over_rpcnic_p50": sj(cpu_over_rpcnic_p50),
            "protoacc_pcie_over_rpcnic_p50": sj(pa_over_rpcnic_p50),
            "u280_projected_latency_cpu_only_over_rpcnic": projected_us[0] / projected_us[2].max(1e-9),
            "u280_projected_latency_protoacc_pcie_over_rpcnic": projected_us[1] / projected_us[2].max(1e-9),
            "u280_projected_rpcnic_over_cpu_only": projected[2] / projected[0].max(1e-9),
            "u280_projected_rpcnic_over_protoacc_pcie": projected[2] / projected[1].max(1e-9),
            "paper": w.paper,
        }));
    }
    let image_ratio = image_ratio.ok_or("the image service was measured")?;
    let summary = json!({
        "environment": env,
        "rounds": rounds, "phase_ms": phase.as_millis() as u64, "concurrency": CONCURRENCY,
        "avatar": [AVATAR, AVATAR],
        "cpu_only_over_rpcnic_host_cpu": image_ratio.median,
        "cpu_only_over_rpcnic_host_cpu_spread": sj(image_ratio),
        "social_cpu_only_over_rpcnic_p50_geomean": geomean(&lat_cpu),
        "social_protoacc_pcie_over_rpcnic_p50_geomean": geomean(&lat_pa),
        "social_u280_projected_latency_cpu_only_over_rpcnic_geomean": geomean(&proj_cpu),
        "social_u280_projected_latency_protoacc_pcie_over_rpcnic_geomean": geomean(&proj_pa),
        "services": rows,
    });
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let path = out.join("rpc-apps.json");
    std::fs::write(&path, serde_json::to_string_pretty(&summary)?)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    let names = Mode::ALL.map(Mode::name);
    let plots = super::plot::apps(&plot_rows, &names, "tern bench rpc --apps: host CPU per call by mode", out)?;
    if as_json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(ExitCode::SUCCESS);
    }
    print_tables(&summary);
    println!("wrote {}", path.display());
    for p in plots {
        println!("wrote {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_tables(summary: &Value) {
    let f = |v: &Value| {
        format!(
            "{:.1} [{:.1}-{:.1}]",
            v["median"].as_f64().unwrap_or(0.0),
            v["min"].as_f64().unwrap_or(0.0),
            v["max"].as_f64().unwrap_or(0.0)
        )
    };
    let k = |v: &Value| {
        format!(
            "{:.1}k [{:.1}-{:.1}]",
            v["median"].as_f64().unwrap_or(0.0) / 1000.0,
            v["min"].as_f64().unwrap_or(0.0) / 1000.0,
            v["max"].as_f64().unwrap_or(0.0) / 1000.0
        )
    };
    println!();
    println!(
        "MEASURED here (median [min-max] over rounds) | PROJECTED on the U280 (model; host time = this machine's)"
    );
    println!(
        "host CPU: the handler thread, plus the lane's transport where the design runs the RPC stack on the host (cpu-only, protoacc-pcie);"
    );
    println!(
        "card's CPU: the card's work as this machine ran it (protoacc-pcie: the lane's (de)serialization; rpcnic: the lane)"
    );
    for s in summary["services"].as_array().into_iter().flatten() {
        println!("{}  ({})", s["service"].as_str().unwrap_or(""), s["paper"].as_str().unwrap_or(""));
        println!(
            "  {:<14} {:>22} {:>22} {:>22} {:>22} | {:>14} {:>11} bound",
            "mode", "calls/s", "p99 us", "host CPU us/call", "card's CPU us/call", "calls/s/core", "latency us"
        );
        for mode in Mode::ALL {
            let m = &s["modes"][mode.name()];
            let u = &m["u280_projected"];
            println!(
                "  {:<14} {:>22} {:>22} {:>22} {:>22} | {:>13.1}k {:>11.1} {}",
                mode.name(),
                k(&m["calls_per_s"]),
                f(&m["p99_us"]),
                f(&m["host_cpu_us_per_call"]),
                f(&m["device_cpu_us_per_call"]),
                u["per_host_core_calls_per_s"].as_f64().unwrap_or(0.0) / 1000.0,
                u["latency_us"].as_f64().unwrap_or(0.0),
                u["bound"].as_str().unwrap_or("")
            );
        }
        println!(
            "  host CPU cpu-only/rpcnic {}, protoacc-pcie/rpcnic {}; calls/s rpcnic/cpu-only {}, rpcnic/protoacc-pcie {}; projected calls/s per core rpcnic/cpu-only {:.2}x, rpcnic/protoacc-pcie {:.2}x",
            f(&s["cpu_only_over_rpcnic_host_cpu"]),
            f(&s["protoacc_pcie_over_rpcnic_host_cpu"]),
            f(&s["rpcnic_over_cpu_only_calls_per_s"]),
            f(&s["rpcnic_over_protoacc_pcie_calls_per_s"]),
            s["u280_projected_rpcnic_over_cpu_only"].as_f64().unwrap_or(0.0),
            s["u280_projected_rpcnic_over_protoacc_pcie"].as_f64().unwrap_or(0.0),
        );
    }
    println!();
    println!(
        "image service, host CPU per call, cpu-only / rpcnic: {} (measured; target >= 5)",
        f(&summary["cpu_only_over_rpcnic_host_cpu_spread"])
    );
    println!(
        "social services, a call's time, geometric mean: cpu-only/rpcnic {:.2}x, protoacc-pcie/rpcnic {:.2}x (measured p50 at the client); projected on the U280 {:.2}x, {:.2}x (the paper, Fig. 13: 1.57x, 1.34x)",
        summary["social_cpu_only_over_rpcnic_p50_geomean"].as_f64().unwrap_or(0.0),
        summary["social_protoacc_pcie_over_rpcnic_p50_geomean"].as_f64().unwrap_or(0.0),
        summary["social_u280_projected_latency_cpu_only_over_rpcnic_geomean"].as_f64().unwrap_or(0.0),
        summary["social_u280_projected_latency_protoacc_pcie_over_rpcnic_geomean"].as_f64().unwrap_or(0.0),
    );
}
