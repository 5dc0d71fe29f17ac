//! `tern hw report` for a switch configuration (docs/clip.md, "Projection"): CLIP's modules
//! and the program on the profile's pipe, per resource and stage, beside the paper's Table II;
//! the projected rates of the switch path and the remote path; and the latencies the paper
//! measured.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;
use tern_io::{Batch, Pool};
use tern_switch::modules::{self, TABLE_II};
use tern_switch::server::{self, Server};
use tern_wire::clip::{self, Kind, Repr};

use crate::CmdResult;
use crate::hw::ReportArgs;

/// Whether a parsed file is a switch configuration (`program`, `ports` and `servers` keys).
pub fn is_switch_config(t: &toml::Table) -> bool {
    t.contains_key("program") && t.contains_key("servers") && t.contains_key("ports")
}

/// Requests a second one core of a server answers with `handler` (measured here, ~0.2 s):
/// 64-byte UDP frames of 10^4 flows with their request headers, answered in place in batches
/// of 32.
pub fn handler_rate(handler: &str, program: u16, param_len: u8) -> Result<f64, String> {
    let mut srv = Server::new(clip::DEFAULT_ETHERTYPE, program, server::handler(handler, 0)?, u64::MAX);
    let pool = Pool::new(256, 2048);
    let frames: Vec<Vec<u8>> = (0..10_000u32)
        .map(|f| {
            let mut fr = tern_switch::bench::flow_frame(f, 64);
            let repr = Repr {
                kind: Kind::Request,
                flags: 0,
                load_type: 0,
                parsed_len: 28,
                program,
                group_version: 0,
                request_id: f,
                param_len,
            };
            let _ = clip::encapsulate(&mut fr, &repr, clip::DEFAULT_ETHERTYPE);
            fr
        })
        .collect();
    let mut b = Batch::new(32);
    let (mut n, mut i) = (0u64, 0usize);
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200) {
        for _ in 0..32 {
            let mut p = pool.packet();
            let _ = p.extend_from_slice(&frames[i % frames.len()]);
            i += 1;
            let _ = b.push(p);
        }
        srv.process(i as u64, &mut b, false, &pool);
        n += b.len() as u64;
        b.recycle(&pool);
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// `tern hw report SWITCH_CONFIG`.
pub fn report(a: &ReportArgs) -> CmdResult {
    let (cfg, _) = tern_switch::config::load(&a.config)?;
    let profile = tern_hw::Profile::resolve(a.profile.as_deref().unwrap_or("clip-tofino"))?;
    let model = tern_hw::switch::SwitchModel::from_profile(&profile)?;
    let mods = modules::project(&model, &cfg.switch).map_err(|e| e.to_string())?;
    let prog = cfg.program.placement(&model).map_err(|e| format!("the program does not fit {}: {e}", profile.name))?;
    let frame = u64::from(a.frame_bytes.unwrap_or(64));
    let port_gbps = profile.rate("switch.port.gbps").unwrap_or(40.0);
    let link_gbps = profile.rate("switch.server_link.gbps").unwrap_or(40.0);
    let ports = profile.capacity("switch.ports").unwrap_or(32);
    let cores = profile.capacity("switch.server_cores").unwrap_or(8);
    // On the wire a frame also takes its preamble, delimiter and gap (20 bytes) and its FCS (4).
    let wire_bits = |bytes: u64| ((bytes.max(60) + 4 + 20) * 8) as f64;
    let line_pps = port_gbps * 1e9 / wire_bits(frame);
    let param_len = cfg.program.request.iter().chain(&cfg.program.response).map(|(_, b)| b.div_ceil(8) as u64);
    let req_bytes = frame
        + clip::FIXED_LEN as u64
        + cfg.program.request.iter().map(|(_, b)| b.div_ceil(8) as u64).sum::<u64>().max(param_len.max().unwrap_or(0));
    let servers = cfg.switch.servers.len() as u64;
    let link_pps = servers as f64 * link_gbps * 1e9 / wire_bits(req_bytes);
    let handler = cfg.program.handler.clone();
    let per_core = match &handler {
        Some(h) => Some(handler_rate(h, cfg.program.id, (req_bytes - frame - clip::FIXED_LEN as u64) as u8)?),
        None => None,
    };
    let cpu_pps = per_core.map(|r| r * (servers * cores) as f64);
    let remote_pps = cpu_pps.map_or(link_pps, |c| c.min(link_pps));
    let remote_bound = if cpu_pps.is_some_and(|c| c < link_pps) { "the servers' cores" } else { "the servers' links" };
    let p90 = profile.latency_ns.get("switch.remote_path_p90").copied();
    let extra = profile.latency_ns.get("switch.remote_extra_p90").copied();
    let pct = |u: &tern_hw::switch::Use| model.percent(u);
    if a.json {
        let m: Vec<_> = mods
            .iter()
            .map(|mu| {
                let p = pct(&mu.total);
                let paper = TABLE_II.iter().find(|t| t.0 == mu.name).map(|t| t.1);
                json!({"module": mu.name, "uses": mu.total, "percent": {"sram": p[0], "tcam": p[1], "crossbar": p[2], "hash_bits": p[3], "vliw": p[4]},
                    "table_ii_percent": paper.map(|q| json!({"crossbar": q[0], "sram": q[1], "tcam": q[2], "vliw": q[3], "hash_bits": q[4]})),
                    "placement": mu.placement})
            })
            .collect();
        let p = pct(&prog.total());
        let out = json!({
            "profile": profile.name, "modules": m,
            "program": {"name": cfg.program.name, "placement": prog, "percent": {"sram": p[0], "tcam": p[1], "crossbar": p[2], "hash_bits": p[3], "vliw": p[4]}},
            "frame_bytes": frame,
            "switch_path": {"ports": ports, "port_gbps": port_gbps, "pps_per_port": line_pps, "pps": line_pps * ports as f64},
            "remote_path": {"servers": servers, "link_gbps": link_gbps, "request_bytes": req_bytes, "links_pps": link_pps,
                "handler_pps_per_core_measured": per_core, "cores_per_server": cores, "cores_pps": cpu_pps, "pps": remote_pps, "bound": remote_bound},
            "latency_ns": {"remote_path_p90": p90, "remote_extra_p90": extra},
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}: CLIP on {} ({} stages a pipe; per stage {} SRAM, {} TCAM blocks, {} crossbar bytes, {} hash bits, {} VLIW slots)",
        a.config.display(),
        profile.name,
        model.stages,
        model.sram_blocks,
        model.tcam_blocks,
        model.crossbar_bytes,
        model.hash_bits,
        model.vliw_slots
    );
    println!("modules, each placed alone (% of a pipe; the paper's Table II in brackets):");
    println!("  {:<12} {:>15} {:>15} {:>15} {:>15} {:>15}", "", "crossbar", "SRAM", "TCAM", "VLIW", "hash bits");
    for mu in &mods {
        let p = pct(&mu.total);
        let q = TABLE_II.iter().find(|t| t.0 == mu.name).map(|t| t.1).unwrap_or_default();
        let cell = |v: f64, w: f64| format!("{v:.2} [{w:.2}]");
        println!(
            "  {:<12} {:>15} {:>15} {:>15} {:>15} {:>15}",
            mu.name,
            cell(p[2], q[0]),
            cell(p[0], q[1]),
            cell(p[1], q[2]),
            cell(p[4], q[3]),
            cell(p[3], q[4])
        );
        for l in &mu.placement.items {
            println!(
                "      {:<14} stage {:>2}: {} SRAM, {} TCAM, {} crossbar B, {} hash bits, {} VLIW",
                l.name,
                l.first,
                l.uses.sram_blocks,
                l.uses.tcam_blocks,
                l.uses.crossbar_bytes,
                l.uses.hash_bits,
                l.uses.vliw_slots
            );
        }
    }
    let p = pct(&prog.total());
    println!(
        "program `{}`: {} of {} stages; SRAM {:.2}%, TCAM {:.2}%, crossbar {:.2}%, hash bits {:.2}%, VLIW {:.2}%",
        cfg.program.name,
        prog.depth(),
        model.stages,
        p[0],
        p[1],
        p[2],
        p[3],
        p[4]
    );
    println!(
        "switch path at line rate: {ports} ports × {port_gbps} Gb/s, {:.1} Mpps a port at {frame} B ({:.0} Mpps in all)",
        line_pps / 1e6,
        line_pps * ports as f64 / 1e6
    );
    match per_core {
        Some(r) => println!(
            "remote path: {servers} servers × {link_gbps} Gb/s links carry {:.1} Mpps of {req_bytes}-byte requests; the `{}` handler answers {:.2} Mpps a core here, × {cores} cores × {servers} servers = {:.1} Mpps: bound {:.1} Mpps by {remote_bound}",
            link_pps / 1e6,
            handler.as_deref().unwrap_or("?"),
            r / 1e6,
            cpu_pps.unwrap_or(0.0) / 1e6,
            remote_pps / 1e6
        ),
        None => println!("remote path: none (the program names no handler)"),
    }
    if let (Some(p90), Some(x)) = (p90, extra) {
        println!(
            "latency (the paper's testbed, Figure 5(b)): 90% of packets with a server in the path within {:.0} µs, of which the remote processing adds {:.0} µs",
            p90 / 1e3,
            x / 1e3
        );
    }
    println!(
        "Table II is the P4 compiler's output for the paper's modules, whose sizes it does not give; the modules here are sized from this configuration (docs/clip.md, \"Projection\")."
    );
    Ok(ExitCode::SUCCESS)
}
