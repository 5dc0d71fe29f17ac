//! `tern bench rpc`: Tern's RpcNIC codec (copy and alias decode, encode, stage-1
//! pre-serialization) against prost (generated code) and prost-reflect (the dynamic peer) on the staged workloads, in one process, the implementations alternating in an
//! order that turns each round; per-round ratios with their median, min and max, geometric means
//! over workloads; and the one-shot against field-by-field write counts with their projected
//! PCIe cost on the paper's link.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{Value, json};
use tern_rpc::decode::{DecodeOptions, Pools, WriteMode, decode};
use tern_rpc::encode::encode_into;
use tern_rpc::serialize::{PreserOptions, preserialize};

use crate::CmdResult;
use crate::env::Environment;

#[derive(Debug, Args)]
pub struct RpcBenchArgs {
    /// Measure the applications instead of the codec: the image service and five
    /// DeathStarBench-like services end to end over QNP on loopback, in cpu-only, protoacc-pcie
    /// and rpcnic mode (host and lane CPU per call, calls/s, p99), beside U280 projections;
    /// writes rpc-apps.json and rpc-apps.png/svg.
    #[arg(long)]
    pub apps: bool,
    /// Fewer rounds and shorter phases: under two minutes.
    #[arg(long)]
    pub quick: bool,
    /// Rounds (each measures every implementation once, in an order that turns) [default: 5,
    /// quick 3].
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Milliseconds each implementation runs per round [default: 300, quick 100; with --apps,
    /// each mode: 1500, quick 600].
    #[arg(long)]
    pub phase_ms: Option<u64>,
    /// Where the JSON report and the PNG/SVG plot go.
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Print the JSON summary instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// A staged workload and prost-reflect's view of its schema.
struct Workload {
    w: tern_rpc::workloads::Workload,
    pool: prost_reflect::DescriptorPool,
}

fn workloads() -> Result<Vec<Workload>, Box<dyn std::error::Error>> {
    let mut shared = tern_rpc::workloads::shared_dir();
    if !shared.exists() {
        shared = PathBuf::from("../shared");
    }
    let mut out = Vec::new();
    for w in tern_rpc::workloads::load_all(&shared)? {
        let dir = w.proto.parent().ok_or("a workload's .proto has a directory")?;
        let fds = protox::compile([&w.proto], [dir]).map_err(|e| format!("{}: {e}", w.proto.display()))?;
        out.push(Workload { pool: prost_reflect::DescriptorPool::from_file_descriptor_set(fds)?, w });
    }
    Ok(out)
}

/// Nanoseconds per call of `f`, run for about `phase`. Calls are timed in batches of at least
/// 20 µs (the batch found by doubling), so that reading the clock (some 20 ns) is not counted
/// as part of a call that takes a few hundred.
fn time(phase: Duration, mut f: impl FnMut()) -> f64 {
    f(); // warm
    let mut batch = 1u64;
    loop {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        if t.elapsed() >= Duration::from_micros(20) || batch >= 1 << 20 {
            break;
        }
        batch *= 2;
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < phase || n < 3 {
        for _ in 0..batch {
            f();
        }
        n += batch;
    }
    start.elapsed().as_nanos() as f64 / n as f64
}

/// The median, min and max of per-round values.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spread {
    pub(super) min: f64,
    pub(super) median: f64,
    pub(super) max: f64,
}

/// The spread of `v` (not empty).
pub(super) fn spread(v: &[f64]) -> Spread {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let median = if s.len() % 2 == 1 { s[s.len() / 2] } else { (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0 };
    Spread { min: s[0], median, max: s[s.len() - 1] }
}

pub(super) fn spread_json(s: Spread) -> Value {
    json!({ "median": s.median, "min": s.min, "max": s.max })
}

/// The implementations timed, by index (C++ protobuf's two only with `--features cpp-protobuf`).
const IMPLS: [&str; 15] = [
    "tern_decode",
    "prost_decode",
    "prost_bytes_decode",
    "prost_reflect_decode",
    "tern_encode",
    "prost_encode",
    "tern_preser",
    "tern_alias_decode",
    "tern_decode_read_all",
    "prost_decode_read_all",
    "tern_decode_field_by_field",
    "memcpy_floor",
    "encode_floor",
    "cpp_arena_decode",
    "cpp_encode",
];

/// Indices in [`IMPLS`] named where more than one place uses them.
const TERN_FIELD_BY_FIELD: usize = 10;
const MEMCPY_FLOOR: usize = 11;
const ENCODE_FLOOR: usize = 12;
const CPP_ARENA_DECODE: usize = 13;
const CPP_ENCODE: usize = 14;

/// How many of [`IMPLS`] this build has.
const IMPLS_BUILT: usize = if cfg!(feature = "cpp-protobuf") { CPP_ENCODE + 1 } else { CPP_ARENA_DECODE };

/// Reads every field of a decoded message through the accessor API ([`MessageRef::values`]:
/// the present values in field order), as `tern_rpc_peers::ReadAll` reads prost's structs:
/// scalars by value, strings and bytes by length and first byte, sub-messages and repeated
/// fields recursively. The same sum as prost's.
///
/// [`MessageRef::values`]: tern_rpc::message::MessageRef::values
fn read_all(m: tern_rpc::message::MessageRef<'_>) -> u64 {
    use tern_rpc::message::FieldValue as V;
    let bytes = |b: &[u8]| (b.len() as u64).wrapping_add(b.first().map_or(0, |&x| u64::from(x)));
    let mut s = 0u64;
    for (_, v) in m.values() {
        s = s.wrapping_add(match v {
            V::I32(x) | V::Enum(x) => x as u64,
            V::I64(x) => x as u64,
            V::U32(x) => u64::from(x),
            V::U64(x) => x,
            V::F32(x) => u64::from(x.to_bits()),
            V::F64(x) => x.to_bits(),
            V::Bool(x) => u64::from(x),
            V::Str(t) => bytes(t.as_bytes()),
            V::Bytes(b) => bytes(b),
            V::Message(r) => read_all(r),
        });
    }
    s
}

/// C++ protobuf's view of a workload: each message's type, and the message parsed (for
/// encoding); its encoding checked equal to Tern's before anything is timed.
#[cfg(feature = "cpp-protobuf")]
fn cpp_peer(
    w: &tern_rpc::workloads::Workload,
    decoded: &[tern_rpc::message::Message<'_>],
) -> Result<Vec<(tern_rpc_peers::cpp::CppType, tern_rpc_peers::cpp::CppMessage)>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for ((_, ty, b), m) in w.messages.iter().zip(decoded) {
        let t = tern_rpc_peers::cpp::CppType::new(&w.name, ty).ok_or_else(|| format!("no C++ peer for {ty}"))?;
        let parsed = t.parse(b).ok_or_else(|| format!("{}: C++ protobuf does not parse {ty}", w.name))?;
        let (mut x, mut y) = (Vec::new(), Vec::new());
        encode_into(m, &mut x);
        parsed.encode_into(&mut y);
        if x != y {
            return Err(format!("{}: Tern and C++ protobuf encode {ty} differently", w.name).into());
        }
        out.push((t, parsed));
    }
    Ok(out)
}

/// What `GLIBC_TUNABLES` the benchmark runs under: glibc's `rep movsb` threshold raised past
/// every staged message's size.
const NO_REP_MOVSB: &str = "glibc.cpu.x86_rep_movsb_threshold=0x10000000";
/// Set in the process that [`rerun_without_rep_movsb`] starts.
const RERUN_MARK: &str = "TERN_BENCH_RPC_RERUN";

/// On x86-64 glibc, runs this command again in a child process whose glibc copies with its
/// vector loop instead of `rep movsb` (from 2112 bytes here), and returns the child's exit code;
/// `None` where that is not needed or not possible (the benchmark then runs here).
///
/// On this project's AMD EPYC machine `rep movsb` took 1.2–5× as long as the vector loop for
/// some processes and not others, depending on where their pages lay: prost's encode of
/// HyperProtoBench bench3 took 16–23 µs in most runs and 39 µs in one (every round of it), which
/// made that run's `encode_over_prost` 2.26 instead of about 0.95. With the threshold raised
/// every implementation (Tern, prost, prost-reflect, C++ protobuf, the copy floors) copies the
/// same way in every run. `GLIBC_TUNABLES` is read when a process starts, hence the child.
fn rerun_without_rep_movsb() -> Option<ExitCode> {
    if !cfg!(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu")) {
        return None;
    }
    let tunables = std::env::var("GLIBC_TUNABLES").unwrap_or_default();
    if std::env::var_os(RERUN_MARK).is_some() || tunables.contains("x86_rep_movsb_threshold") {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let value = if tunables.is_empty() { NO_REP_MOVSB.to_string() } else { format!("{tunables}:{NO_REP_MOVSB}") };
    let status = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("GLIBC_TUNABLES", value)
        .env(RERUN_MARK, "1")
        .status()
        .ok()?;
    Some(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        // Ended by a signal (Ctrl-C reaches both processes).
        None => ExitCode::from(130),
    })
}

/// `tern bench rpc`.
pub fn run(a: &RpcBenchArgs) -> CmdResult {
    if a.apps {
        return super::apps::run(a.quick, a.rounds, a.phase_ms, &a.out, a.json);
    }
    if !tern_rpc_peers::AVAILABLE {
        return Err("this build has no prost peers: the workloads were missing when tern-rpc-peers was built".into());
    }
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 5 });
    crate::check_count("--rounds", rounds as u64, 1000)?;
    let phase = Duration::from_millis(a.phase_ms.unwrap_or(if a.quick { 100 } else { 300 }));
    if phase.is_zero() || phase > Duration::from_secs(60) {
        return Err("--phase-ms: must be in 1..=60000".into());
    }
    if let Some(code) = rerun_without_rep_movsb() {
        return Ok(code);
    }
    // What this process runs under (set by the rerun above, or by the user).
    let tunables = std::env::var("GLIBC_TUNABLES").ok();
    let env = Environment::current();
    let ws = workloads()?;
    if !a.json {
        println!(
            "tern bench rpc: Tern's table-driven decoder (copy mode, one-shot writes) and encoder against prost (generated code) and prost-reflect, on the staged workloads"
        );
        println!(
            "{} round(s), {} ms per implementation per round, implementations alternating",
            rounds,
            phase.as_millis()
        );
        println!("{}", env.describe());
        if let Some(t) = &tunables {
            println!("GLIBC_TUNABLES={t} (every implementation copies with glibc's vector loop, not rep movsb)");
        }
    }
    let bar = crate::progress::bar((ws.len() * rounds) as u64, "bench rpc", a.json);
    let pools = Pools::default();
    let opts = DecodeOptions::default();
    let mut rows = Vec::new();
    for Workload { w, pool } in &ws {
        let bytes = w.bytes();
        let descs: Vec<_> = w
            .messages
            .iter()
            .map(|(_, ty, _)| pool.get_message_by_name(ty).ok_or("no descriptor"))
            .collect::<Result<_, _>>()?;
        let shared_bufs: Vec<bytes::Bytes> = w.messages.iter().map(|m| bytes::Bytes::from(m.2.clone())).collect();
        let decoded: Vec<_> =
            w.messages.iter().map(|(c, _, b)| decode(&w.table, *c, b, &pools, &opts)).collect::<Result<_, _>>()?;
        let encoders: Vec<_> = w
            .messages
            .iter()
            .map(|(_, ty, b)| tern_rpc_peers::encoder(&w.name, ty, b).ok_or_else(|| format!("no prost peer for {ty}")))
            .collect::<Result<_, _>>()?;
        // Same bytes from both encoders, checked before timing anything (and kept for the
        // encode floor).
        let mut encoded = Vec::with_capacity(decoded.len());
        for (m, enc) in decoded.iter().zip(&encoders) {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            encode_into(m, &mut x);
            enc(&mut y);
            if x != y {
                return Err(format!("{}: Tern and prost encode differently", w.name).into());
            }
            encoded.push(x);
        }
        // Both sides read the same values in the read-every-field variant.
        for ((_, ty, b), m) in w.messages.iter().zip(&decoded) {
            if tern_rpc_peers::decode_read_all(&w.name, ty, b) != Some(read_all(m.root())) {
                return Err(format!("{}: Tern and prost read different values from {ty}", w.name).into());
            }
        }
        #[cfg(feature = "cpp-protobuf")]
        let cpp = cpp_peer(w, &decoded)?;
        let fbf = DecodeOptions { mode: WriteMode::FieldByField, ..opts };
        let mut floor: Vec<Vec<u8>> = w.messages.iter().map(|m| Vec::with_capacity(m.2.len())).collect();
        let mut ns: Vec<Vec<f64>> = vec![Vec::new(); IMPLS_BUILT];
        let mut out = Vec::new();
        let mut records = Vec::new();
        for r in 0..rounds {
            for k in 0..IMPLS_BUILT {
                let i = (k + r) % IMPLS_BUILT;
                let t = match i {
                    0 => time(phase, || {
                        for (c, _, b) in &w.messages {
                            std::hint::black_box(decode(&w.table, *c, b, &pools, &opts).ok());
                        }
                    }),
                    1 => time(phase, || {
                        for (_, ty, b) in &w.messages {
                            std::hint::black_box(tern_rpc_peers::decode(&w.name, ty, b));
                        }
                    }),
                    2 => time(phase, || {
                        for ((_, ty, _), buf) in w.messages.iter().zip(&shared_bufs) {
                            std::hint::black_box(tern_rpc_peers::decode_bytes(&w.name, ty, buf.clone()));
                        }
                    }),
                    3 => time(phase, || {
                        for ((_, _, b), d) in w.messages.iter().zip(&descs) {
                            std::hint::black_box(prost_reflect::DynamicMessage::decode(d.clone(), b.as_slice()).ok());
                        }
                    }),
                    4 => time(phase, || {
                        for m in &decoded {
                            out.clear();
                            encode_into(m, &mut out);
                            std::hint::black_box(&out);
                        }
                    }),
                    5 => time(phase, || {
                        for enc in &encoders {
                            out.clear();
                            enc(&mut out);
                            std::hint::black_box(&out);
                        }
                    }),
                    6 => time(phase, || {
                        for m in &decoded {
                            records.clear();
                            std::hint::black_box(preserialize(m, PreserOptions::default(), &mut records));
                        }
                    }),
                    7 => time(phase, || {
                        for ((c, _, _), buf) in w.messages.iter().zip(&shared_bufs) {
                            std::hint::black_box(tern_rpc::decode::decode_alias(&w.table, *c, buf, &pools, &opts).ok());
                        }
                    }),
                    8 => time(phase, || {
                        for (c, _, b) in &w.messages {
                            std::hint::black_box(
                                decode(&w.table, *c, b, &pools, &opts).map(|m| read_all(m.root())).ok(),
                            );
                        }
                    }),
                    9 => time(phase, || {
                        for (_, ty, b) in &w.messages {
                            std::hint::black_box(tern_rpc_peers::decode_read_all(&w.name, ty, b));
                        }
                    }),
                    TERN_FIELD_BY_FIELD => time(phase, || {
                        for (c, _, b) in &w.messages {
                            std::hint::black_box(decode(&w.table, *c, b, &pools, &fbf).ok());
                        }
                    }),
                    // The copy floor: each whole message copied, as one memcpy, into a reused buffer.
                    MEMCPY_FLOOR => time(phase, || {
                        for ((_, _, b), f) in w.messages.iter().zip(&mut floor) {
                            f.clear();
                            f.extend_from_slice(std::hint::black_box(b));
                            std::hint::black_box(&f);
                        }
                    }),
                    // The encoders' floor: the bytes both encoders write (checked equal above),
                    // copied as one memcpy per message into the one reused buffer they write into.
                    ENCODE_FLOOR => time(phase, || {
                        for b in &encoded {
                            out.clear();
                            out.extend_from_slice(std::hint::black_box(b));
                            std::hint::black_box(&out);
                        }
                    }),
                    #[cfg(feature = "cpp-protobuf")]
                    CPP_ARENA_DECODE => time(phase, || {
                        for ((_, _, b), (t, _)) in w.messages.iter().zip(&cpp) {
                            std::hint::black_box(t.decode_arena(b));
                        }
                    }),
                    #[cfg(feature = "cpp-protobuf")]
                    CPP_ENCODE => time(phase, || {
                        for (_, m) in &cpp {
                            out.clear();
                            m.encode_into(&mut out);
                            std::hint::black_box(&out);
                        }
                    }),
                    _ => unreachable!("IMPLS_BUILT bounds the index"),
                };
                ns[i].push(t);
            }
            bar.inc(1);
        }
        // Per-round ratios.
        let ratio = |num: usize, den: usize| -> Spread {
            spread(&ns[num].iter().zip(&ns[den]).map(|(n, d)| n / d).collect::<Vec<_>>())
        };
        // Writes: one-shot against field by field, with the paper's PCIe cost (1250 ns per write,
        // 12.8 GB/s).
        let (mut one_w, mut each_w, mut host_bytes) = (0u64, 0u64, 0u64);
        for (c, _, b) in &w.messages {
            let s1 = decode(&w.table, *c, b, &pools, &opts)?.stats();
            let s2 = decode(&w.table, *c, b, &pools, &fbf)?.stats();
            one_w += s1.host_writes;
            each_w += s2.host_writes;
            host_bytes += s1.host_bytes;
        }
        let pcie = |writes: u64| writes as f64 * 1250.0 + host_bytes as f64 / 12.8;
        rows.push(json!({
            "workload": w.name,
            "messages": w.messages.len(),
            "bytes": bytes,
            "ns_median": IMPLS[..IMPLS_BUILT].iter().enumerate().map(|(i, n)| (n.to_string(), json!(spread(&ns[i]).median))).collect::<serde_json::Map<_, _>>(),
            "decode_copy_over_prost": spread_json(ratio(1, 0)),
            "decode_over_prost_reflect": spread_json(ratio(3, 0)),
            "decode_copy_over_prost_bytes": spread_json(ratio(2, 0)),
            "decode_alias_over_prost_bytes": spread_json(ratio(2, 7)),
            "encode_over_prost": spread_json(ratio(5, 4)),
            "preser_host_over_cpu_encode": spread_json(ratio(6, 4)),
            "decode_read_all_over_prost": spread_json(ratio(9, 8)),
            "decode_copy_over_cpp_arena": if IMPLS_BUILT > CPP_ARENA_DECODE { spread_json(ratio(CPP_ARENA_DECODE, 0)) } else { Value::Null },
            "encode_over_cpp": if IMPLS_BUILT > CPP_ENCODE { spread_json(ratio(CPP_ENCODE, 4)) } else { Value::Null },
            "memcpy_floor_over_decode_copy": spread_json(ratio(MEMCPY_FLOOR, 0)),
            "encode_floor_over_encode": spread_json(ratio(ENCODE_FLOOR, 4)),
            "encode_over_prost_at_copy_floor": spread_json(ratio(5, ENCODE_FLOOR)),
            "decode_field_by_field_over_one_shot": spread_json(ratio(TERN_FIELD_BY_FIELD, 0)),
            "host_writes_one_shot": one_w,
            "host_writes_field_by_field": each_w,
            "host_writes_per_message_one_shot": one_w as f64 / w.messages.len().max(1) as f64,
            "host_writes_per_message_field_by_field": each_w as f64 / w.messages.len().max(1) as f64,
            "projected_pcie_ns_one_shot": pcie(one_w),
            "projected_pcie_ns_field_by_field": pcie(each_w),
        }));
    }
    bar.finish_and_clear();
    let geo = |key: &str| -> f64 {
        let logs: Vec<f64> = rows.iter().map(|r| r[key]["median"].as_f64().unwrap_or(1.0).ln()).collect();
        (logs.iter().sum::<f64>() / logs.len() as f64).exp()
    };
    let lowest =
        |key: &str| rows.iter().map(|r| r[key]["median"].as_f64().unwrap_or(0.0)).fold(f64::INFINITY, f64::min);
    let summary = json!({
        "benchmark": "rpc",
        "environment": env,
        "config": {
            "rounds": rounds,
            "phase_ms": phase.as_millis() as u64,
            "quick": a.quick,
            "glibc_tunables": tunables,
        },
        "decode_copy_over_prost": geo("decode_copy_over_prost"),
        "decode_copy_over_prost_lowest": lowest("decode_copy_over_prost"),
        "decode_alias_over_prost_bytes": geo("decode_alias_over_prost_bytes"),
        "decode_copy_over_prost_bytes": geo("decode_copy_over_prost_bytes"),
        "encode_over_prost": geo("encode_over_prost"),
        "encode_over_prost_lowest": lowest("encode_over_prost"),
        "encode_over_prost_at_copy_floor": geo("encode_over_prost_at_copy_floor"),
        "decode_over_prost_reflect": geo("decode_over_prost_reflect"),
        "preser_host_over_cpu_encode": geo("preser_host_over_cpu_encode"),
        "decode_read_all_over_prost": geo("decode_read_all_over_prost"),
        "decode_copy_over_cpp_arena": if IMPLS_BUILT > CPP_ARENA_DECODE { json!(geo("decode_copy_over_cpp_arena")) } else { Value::Null },
        "encode_over_cpp": if IMPLS_BUILT > CPP_ENCODE { json!(geo("encode_over_cpp")) } else { Value::Null },
        "workloads": rows,
    });
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let path = a.out.join("rpc.json");
    std::fs::write(&path, serde_json::to_string_pretty(&summary)?)?;
    let med = |r: &Value, k: &str| r[k]["median"].as_f64().unwrap_or(0.0);
    let plot_rows: Vec<super::plot::Row> = summary["workloads"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let name = r["workload"].as_str().unwrap_or("").to_string();
            (name, med(r, "decode_copy_over_prost"), med(r, "decode_over_prost_reflect"), med(r, "encode_over_prost"))
        })
        .collect();
    let title = format!(
        "RpcNIC codec in Tern vs prost and prost-reflect (geometric means: decode/prost {:.2}, decode/prost-reflect {:.2}, encode/prost {:.2})",
        summary["decode_copy_over_prost"].as_f64().unwrap_or(0.0),
        summary["decode_over_prost_reflect"].as_f64().unwrap_or(0.0),
        summary["encode_over_prost"].as_f64().unwrap_or(0.0)
    );
    let plots = super::plot::rpc(&plot_rows, &title, &a.out)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!();
    println!("per-round ratios (how many times Tern's time fits in the peer's), median [min-max]:");
    println!(
        "{:<16} {:>9} {:>22} {:>22} {:>22} {:>22} {:>18}",
        "workload",
        "bytes",
        "decode / prost",
        "alias / prost Bytes",
        "decode / prost-reflect",
        "encode / prost",
        "preser / encode"
    );
    let f = |s: &Value| {
        format!(
            "{:.2} [{:.2}-{:.2}]",
            s["median"].as_f64().unwrap_or(0.0),
            s["min"].as_f64().unwrap_or(0.0),
            s["max"].as_f64().unwrap_or(0.0)
        )
    };
    for r in summary["workloads"].as_array().into_iter().flatten() {
        println!(
            "{:<16} {:>9} {:>22} {:>22} {:>22} {:>22} {:>18}",
            r["workload"].as_str().unwrap_or(""),
            r["bytes"],
            f(&r["decode_copy_over_prost"]),
            f(&r["decode_alias_over_prost_bytes"]),
            f(&r["decode_over_prost_reflect"]),
            f(&r["encode_over_prost"]),
            f(&r["preser_host_over_cpu_encode"])
        );
    }
    println!(
        "geometric means: decode/prost {:.2}, alias decode/prost Bytes {:.2} (copy mode {:.2}), decode/prost-reflect {:.2}, encode/prost {:.2}, stage-1 host time / CPU encode {:.2}",
        summary["decode_copy_over_prost"].as_f64().unwrap_or(0.0),
        summary["decode_alias_over_prost_bytes"].as_f64().unwrap_or(0.0),
        summary["decode_copy_over_prost_bytes"].as_f64().unwrap_or(0.0),
        summary["decode_over_prost_reflect"].as_f64().unwrap_or(0.0),
        summary["encode_over_prost"].as_f64().unwrap_or(0.0),
        summary["preser_host_over_cpu_encode"].as_f64().unwrap_or(0.0)
    );
    // One key's per-workload spreads on one line.
    let each = |key: &str| {
        summary["workloads"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| format!("{} {}", r["workload"].as_str().unwrap_or(""), f(&r[key])))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("decode, then read every field (both sides), Tern over prost: {}", each("decode_read_all_over_prost"));
    println!("geometric mean: {:.2}", summary["decode_read_all_over_prost"].as_f64().unwrap_or(0.0));
    println!(
        "copy floor (one memcpy of each whole message into a reused buffer) over Tern's copy-mode decode time: {}",
        each("memcpy_floor_over_decode_copy")
    );
    println!(
        "encode floor (each message's bytes copied, as one memcpy, into the encoders' reused buffer) over Tern's encode time: {}",
        each("encode_floor_over_encode")
    );
    println!(
        "encode / prost that an encoder doing nothing but that copy would reach: {} (geometric mean {:.2})",
        each("encode_over_prost_at_copy_floor"),
        summary["encode_over_prost_at_copy_floor"].as_f64().unwrap_or(0.0)
    );
    if IMPLS_BUILT > CPP_ARENA_DECODE {
        println!("against C++ protobuf (generated code; decode on an arena), per-round ratios, median [min-max]:");
        for r in summary["workloads"].as_array().into_iter().flatten() {
            println!(
                "{:<16} decode / C++ arena {:>18}   encode / C++ {:>18}",
                r["workload"].as_str().unwrap_or(""),
                f(&r["decode_copy_over_cpp_arena"]),
                f(&r["encode_over_cpp"])
            );
        }
        println!(
            "geometric means: decode/C++ arena {:.2}, encode/C++ {:.2}",
            summary["decode_copy_over_cpp_arena"].as_f64().unwrap_or(0.0),
            summary["encode_over_cpp"].as_f64().unwrap_or(0.0)
        );
    }
    println!();
    println!(
        "host writes per message, one-shot vs field by field, projected on the paper's PCIe (1250 ns a write + bytes at 12.8 GB/s; a projection, not a measurement), and the two modes' decode time measured here:"
    );
    for r in summary["workloads"].as_array().into_iter().flatten() {
        let (o, e) = (
            r["projected_pcie_ns_one_shot"].as_f64().unwrap_or(0.0),
            r["projected_pcie_ns_field_by_field"].as_f64().unwrap_or(0.0),
        );
        let m = r["messages"].as_f64().unwrap_or(1.0).max(1.0);
        let t = &r["decode_field_by_field_over_one_shot"];
        println!(
            "{:<16} {:>7.1} vs {:>7.1} writes, {:>9.1} vs {:>9.1} us projected (field by field / one-shot {:.2}); measured {:.2} [{:.2}-{:.2}]",
            r["workload"].as_str().unwrap_or(""),
            r["host_writes_one_shot"].as_f64().unwrap_or(0.0) / m,
            r["host_writes_field_by_field"].as_f64().unwrap_or(0.0) / m,
            o / m / 1000.0,
            e / m / 1000.0,
            e / o.max(1.0),
            t["median"].as_f64().unwrap_or(0.0),
            t["min"].as_f64().unwrap_or(0.0),
            t["max"].as_f64().unwrap_or(0.0),
        );
    }
    println!("wrote {}", path.display());
    for p in plots {
        println!("wrote {}", p.display());
    }
    Ok(ExitCode::SUCCESS)
}
