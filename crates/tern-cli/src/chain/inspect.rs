//! `tern chain trace` (a packet's way through the plan) and `tern chain dump` (a running
//! server's plan and each task's packets and time, as VPP's `show runtime`, and its counters).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tern_chain::task::{Keys, Numbering};
use tern_wire::frame::FrameInfo;

use super::serve::{load_tenants, plan_on};
use crate::CmdResult;
use crate::frames::{hexdump, parse_packet, summary};

/// Options of `tern chain trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// Tenant files (TOML), planned together as `serve` would.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The packet: fields (`udp,nw_src=10.0.0.5,nw_dst=10.1.0.7,tp_src=4000,tp_dst=53`; also
    /// tcp, icmp, eth_src, eth_dst, ttl, len) or the frame's hex bytes.
    #[arg(long)]
    pub packet: String,
    /// The hardware profile the plan must fit.
    #[arg(long, default_value = "supernic-htg9200")]
    pub profile: String,
    /// Print JSON (docs/chain.md lists its keys): the frame's bytes as hex, which --packet
    /// takes back.
    #[arg(long)]
    pub json: bool,
}

/// `tern chain trace`.
pub fn trace(a: &TraceArgs) -> CmdResult {
    let tenants = load_tenants(&a.files)?;
    let (plan, _) = plan_on(&tenants, &a.profile)?;
    let frame = parse_packet(&a.packet).map_err(|e| format!("packet: {e}"))?;
    // Random nonces: a trace's sealed bytes never repeat a nonce a server used, and no ledger
    // pays for one-off instances.
    let mut keys = Keys::new(Numbering::Random);
    let pool = tern_io::Pool::new(64, tern_io::DEFAULT_BUF_SIZE);
    let mut factory = |t: usize, n: usize| super::stage::build(&tenants, t, n, &mut keys, &pool);
    let t = tern_chain::trace::trace(&plan, &tenants, &frame, &mut factory)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&t)?);
        return Ok(ExitCode::SUCCESS);
    }
    let describe = |b: &[u8]| FrameInfo::parse(b).map_or_else(|e| format!("not parsed: {e}"), |i| summary(&i));
    println!("packet: {}", describe(&frame));
    match (&t.tenant, t.chain) {
        (Some(name), Some(c)) => println!("tenant {name}, chain {c}"),
        _ => println!("no chain: {}", t.fate),
    }
    for s in &t.steps {
        println!("  {:>2} {:<12} {:<9} {}", s.position, s.name, s.kind, s.outcome);
    }
    println!("fate: {}", t.fate);
    if t.tenant.is_some() {
        println!("out:    {}", describe(&t.output));
        println!("{}", hexdump(&t.output));
    }
    for e in &t.emitted {
        println!("sent of its own: {}", describe(e));
    }
    Ok(ExitCode::SUCCESS)
}

/// Options of `tern chain dump`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// A running `tern chain serve --metrics ADDR`.
    #[arg(long)]
    pub server: SocketAddr,
    /// Print the server's JSON (its /runtime, whose keys docs/chain.md lists) as it is.
    #[arg(long)]
    pub json: bool,
}

/// `tern chain dump`.
pub fn dump(a: &DumpArgs) -> CmdResult {
    let url = format!("http://{}/runtime", a.server);
    // An address that takes the connection and never answers is an error, not a wait.
    let agent: ureq::Agent =
        ureq::Agent::config_builder().timeout_global(Some(std::time::Duration::from_secs(10))).build().into();
    let body = agent
        .get(&url)
        .call()
        .map_err(|e| format!("{url}: {e}"))?
        .into_body()
        .read_to_string()
        .map_err(|e| format!("{url}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{url}: not JSON: {e}"))?;
    crate::metrics::answered_by(&url, &v, "tern chain serve --metrics", &["mode", "plan", "stats", "tenants"])?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("mode {}", v["mode"].as_str().unwrap_or("?"));
    for l in v["plan"].as_array().into_iter().flatten() {
        println!("  {}", l.as_str().unwrap_or(""));
    }
    let s = &v["stats"];
    let tenants: Vec<&str> = v["tenants"].as_array().into_iter().flatten().filter_map(|t| t.as_str()).collect();
    for (i, t) in s["tenants"].as_array().into_iter().flatten().enumerate() {
        // As the server's own summary prints them.
        let drops: Vec<String> =
            t["drops"].as_object().into_iter().flatten().map(|(k, n)| format!("{k} {n}")).collect();
        // Mode rtc has no scheduler and so no queues.
        let queued = v["queue_depth"].get(i).map_or(String::new(), |q| format!("; queued {q}"));
        println!(
            "tenant {}: {} in, {} out, {} back; drops: {}{queued}",
            tenants.get(i).copied().unwrap_or("?"),
            t["packets_in"],
            t["packets_out"],
            t["replies"],
            if drops.is_empty() { "none".into() } else { drops.join(", ") },
        );
    }
    println!(
        "{:<7} {:<5} {:<4} {:<4} {:<12} {:<9} {:>11} {:>9} {:>9} {:>12} {:>10}",
        "region", "chain", "inst", "pos", "task", "kind", "packets", "skipped", "batches", "vectors/call", "ns/packet"
    );
    for w in s["wrappers"].as_array().into_iter().flatten() {
        let (p, b, ns) = (
            w["packets"].as_f64().unwrap_or(0.0),
            w["batches"].as_f64().unwrap_or(0.0),
            w["ns"].as_f64().unwrap_or(0.0),
        );
        let region = w["region"].as_u64().map_or("-".to_string(), |r| r.to_string());
        println!(
            "{:<7} {:<5} {:<4} {:<4} {:<12} {:<9} {:>11} {:>9} {:>9} {:>12.2} {:>10.1}",
            region,
            w["chain"],
            w["instance"],
            w["position"],
            w["name"].as_str().unwrap_or(""),
            w["kind"].as_str().unwrap_or(""),
            p,
            w["skipped"],
            b,
            if b > 0.0 { p / b } else { 0.0 },
            if p > 0.0 { ns / p } else { 0.0 }
        );
    }
    // Each task instance's own counters (a firewall's flows and `source_full`, a NAT's
    // mappings, a cache's hits, its drops), as VPP's `show errors` lists its nodes'.
    let mut heading = true;
    for w in s["wrappers"].as_array().into_iter().flatten() {
        for t in w["tasks"].as_array().into_iter().flatten() {
            let counters: Vec<String> =
                t["counters"].as_object().into_iter().flatten().map(|(k, n)| format!("{k} {n}")).collect();
            if counters.is_empty() {
                continue;
            }
            if heading {
                println!("task counters:");
                heading = false;
            }
            let tenant = t["tenant"].as_u64().and_then(|i| tenants.get(i as usize).copied()).unwrap_or("?");
            let region = w["region"].as_u64().map_or("-".to_string(), |r| r.to_string());
            println!(
                "  region {region} chain {} inst {} pos {} {} ({}), tenant {tenant}: {}",
                w["chain"],
                w["instance"],
                w["position"],
                w["name"].as_str().unwrap_or(""),
                w["kind"].as_str().unwrap_or(""),
                counters.join(", ")
            );
        }
    }
    let d = s["decisions"].as_u64().unwrap_or(0);
    if d > 0 {
        println!("scheduler: {}", super::serve::scheduler_line(d, s["scheduler_ns"].as_u64().unwrap_or(0)));
    }
    println!("unknown tenant {}, malformed {}", s["unknown_tenant"], s["malformed"]);
    Ok(ExitCode::SUCCESS)
}
