//! `tern switch check` and `tern switch trace` (docs/clip.md, "Commands").

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use tern_io::{Batch, Pool};
use tern_switch::program::Program;
use tern_switch::server::{self, Server};
use tern_switch::switch::{DropReason, Route, Switch, SwitchConfig};
use tern_wire::clip;

use crate::CmdResult;

/// Options of `tern switch check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// Switch programs (TOML; examples/switch/snat.toml).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The switch's hardware profile (built-in name or TOML file).
    #[arg(long, default_value = "clip-tofino")]
    pub profile: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tern switch check`: each program's tables, actions and registers, and where its placement
/// puts them in the pipe's stages. Exit 0 when every program loads and fits, 1 otherwise.
pub fn check(a: &CheckArgs) -> CmdResult {
    let profile = tern_hw::Profile::resolve(&a.profile)?;
    let model = tern_hw::switch::SwitchModel::from_profile(&profile)?;
    let mut all_ok = true;
    let mut out = Vec::new();
    for f in &a.files {
        let file = f.display().to_string();
        let p = match Program::load(f) {
            Ok(p) => p,
            Err(e) => {
                all_ok = false;
                if !a.json {
                    println!("{e}");
                }
                out.push(json!({"file": file, "ok": false, "error": e}));
                continue;
            }
        };
        let placement = p.placement(&model);
        if !a.json {
            println!(
                "{file}: program `{}` (id {}), handler {}, {} request and {} response bytes",
                p.name,
                p.id,
                p.handler.as_deref().unwrap_or("none"),
                p.request.iter().map(|r| r.1.div_ceil(8)).sum::<u32>(),
                p.response.iter().map(|r| r.1.div_ceil(8)).sum::<u32>()
            );
            for t in &p.tables {
                let key: Vec<String> = t.key.iter().map(|(f, k)| format!("{f} {k:?}").to_lowercase()).collect();
                println!(
                    "  table {:<16} {} entries, key [{}], actions {:?}, default {}{}",
                    t.name,
                    t.size,
                    key.join(", "),
                    t.actions,
                    t.default,
                    if t.mirrored {
                        format!(", mirrored (learn {})", t.learn.as_deref().unwrap_or("none"))
                    } else {
                        String::new()
                    }
                );
            }
            for h in &p.headers {
                let fields: Vec<String> = h.fields.iter().map(|(f, b)| format!("{f} {b}")).collect();
                let how: Vec<String> = p
                    .parser
                    .iter()
                    .filter(|st| st.extract == h.name)
                    .map(|st| format!("after {} when {} == {}", st.after, st.select, st.value))
                    .collect();
                println!("  header {:<14} {} bytes [{}], {}", h.name, h.bytes(), fields.join(", "), how.join("; "));
            }
            for r in &p.registers {
                println!("  register {:<13} {} × {} bits", r.name, r.entries, r.bits);
            }
            let steps = |names: &[String], guards: &[Option<tern_switch::program::Guard>]| -> Vec<String> {
                names
                    .iter()
                    .zip(guards)
                    .map(|(n, g)| match g {
                        Some(g) => format!("{n} if {} {} {}", g.field, if g.equal { "==" } else { "!=" }, g.value),
                        None => n.clone(),
                    })
                    .collect()
            };
            println!(
                "  pre_processing {:?}, post_processing {:?}",
                steps(&p.pre_processing, &p.pre_guards),
                steps(&p.post_processing, &p.post_guards)
            );
        }
        match placement {
            Ok(pl) => {
                let pct = model.percent(&pl.total());
                if !a.json {
                    println!("  placed on {} ({} of {} stages):", profile.name, pl.depth(), model.stages);
                    for l in &pl.items {
                        println!(
                            "    {:<24} stage {:>2}{} SRAM {} TCAM {} crossbar {} B hash {} bits VLIW {}",
                            l.name,
                            l.first,
                            if l.last != l.first { format!("-{:<2}", l.last) } else { "   ".into() },
                            l.uses.sram_blocks,
                            l.uses.tcam_blocks,
                            l.uses.crossbar_bytes,
                            l.uses.hash_bits,
                            l.uses.vliw_slots
                        );
                    }
                    println!(
                        "  of the pipe: SRAM {:.2}%, TCAM {:.2}%, crossbar {:.2}%, hash bits {:.2}%, VLIW {:.2}%",
                        pct[0], pct[1], pct[2], pct[3], pct[4]
                    );
                }
                out.push(json!({"file": file, "ok": true, "program": p.name, "id": p.id, "placement": pl, "percent": {
                    "sram": pct[0], "tcam": pct[1], "crossbar": pct[2], "hash_bits": pct[3], "vliw": pct[4]}}));
            }
            Err(e) => {
                all_ok = false;
                if !a.json {
                    println!("  does not fit {}: {e}", profile.name);
                }
                out.push(json!({"file": file, "ok": false, "program": p.name, "error": e.to_string()}));
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json!({"profile": profile.name, "programs": out, "ok": all_ok}))?);
    }
    Ok(if all_ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Options of `tern switch trace`.
#[derive(Debug, Clone, Args)]
pub struct TraceArgs {
    /// The switch program (TOML).
    pub program: PathBuf,
    /// The packet: a field list (`udp,nw_src=10.0.0.5,nw_dst=198.51.100.1,tp_src=4000,tp_dst=53`;
    /// fields as `tern flow trace`'s) or hex bytes of a whole frame.
    #[arg(long)]
    pub packet: String,
    /// The host port it arrives on (port 1 is the inside of examples/switch/snat.toml; port 2
    /// routes everything out).
    #[arg(long, default_value_t = 1)]
    pub port: u16,
    /// Servers of the group, on ports 3 and up, running the program's handler.
    #[arg(long, default_value_t = 2)]
    pub servers: u16,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tern switch trace`: one frame through a switch running the program (tables empty) and its
/// servers, in this process: what pre-processing decided, the request header and the server it
/// went to, the server's response, post-processing, and the frame that left (or the drop).
pub fn trace(a: &TraceArgs) -> CmdResult {
    crate::check_count("servers", a.servers, 250)?;
    let program = Program::load(&a.program)?;
    let frame = crate::frames::parse_packet(&a.packet)?;
    let ports = 2 + a.servers;
    if a.port == 0 || a.port > 2 {
        return Err(format!("--port {}: the host ports are 1 and 2 (servers are on 3..={ports})", a.port).into());
    }
    let cfg = SwitchConfig {
        ports,
        servers: (0..a.servers).map(|s| 3 + s).collect(),
        members: (0..a.servers).collect(),
        routes: vec![Route { prefix: "0.0.0.0/0".parse()?, port: 2, mac: [2, 0, 0, 0, 0, 0xa2] }],
        ..SwitchConfig::default()
    };
    let mut switch = Switch::new(program.clone(), cfg)?;
    let mut servers = Vec::new();
    if let Some(h) = &program.handler {
        for s in 0..a.servers {
            servers.push(Server::new(clip::DEFAULT_ETHERTYPE, program.id, server::handler(h, s)?, u64::MAX));
        }
    }
    let pool = Pool::new(64, 2048);
    let mut outs: Vec<Batch> = (0..=ports).map(|_| Batch::new(4)).collect();
    let mut b = Batch::new(1);
    let mut p = pool.packet();
    p.reserve_headroom(tern_io::DEFAULT_HEADROOM);
    p.extend_from_slice(&frame).map_err(|_| "the frame is longer than a buffer (2048 bytes)")?;
    let _ = b.push(p);
    let mut steps: Vec<String> = Vec::new();
    let step = |s: String, steps: &mut Vec<String>| steps.push(s);
    step(format!("in on port {}: {} bytes", a.port, frame.len()), &mut steps);
    let before = switch.stats().clone();
    let counts = |sw: &Switch| -> Vec<(String, (u64, u64))> {
        sw.pipeline()
            .program()
            .tables
            .iter()
            .map(|t| (t.name.clone(), sw.pipeline().table_counts(&t.name).unwrap_or((0, 0))))
            .collect()
    };
    let c0 = counts(&switch);
    switch.process(a.port, &mut b, &mut outs, &pool);
    for ((name, (h0, m0)), (_, (h1, m1))) in c0.iter().zip(counts(&switch)) {
        if h1 > *h0 {
            step(format!("pre_processing: table {name} hit"), &mut steps);
        } else if m1 > *m0 {
            step(format!("pre_processing: table {name} missed (default action)"), &mut steps);
        }
    }
    let mut left: Option<(u16, Vec<u8>)> = None;
    for s in 0..usize::from(a.servers) {
        let sp = 3 + s as u16;
        let mut req = std::mem::replace(&mut outs[usize::from(sp)], Batch::new(4));
        if req.is_empty() {
            continue;
        }
        for p in req.iter() {
            if let Ok((r, params)) = clip::peek(p.data(), clip::DEFAULT_ETHERTYPE) {
                step(
                    format!(
                        "flight: to server {s} (port {sp}) with a request header: program {}, group version {}, request id {}, parsed_len {}, load_type 0x{:04x}, params {}",
                        r.program,
                        r.group_version,
                        r.request_id,
                        r.parsed_len,
                        r.load_type,
                        crate::frames::hex(params)
                    ),
                    &mut steps,
                );
            }
        }
        let Some(srv) = servers.get_mut(s) else { continue };
        srv.process(0, &mut req, false, &pool);
        for p in req.iter() {
            if let Ok((_, params)) = clip::peek(p.data(), clip::DEFAULT_ETHERTYPE) {
                step(
                    format!(
                        "server {s}: handler `{}` answered, params {}",
                        srv.handler().name(),
                        crate::frames::hex(params)
                    ),
                    &mut steps,
                );
            }
        }
        if req.is_empty() {
            step(format!("server {s}: dropped the request ({:?})", srv.stats().drops), &mut steps);
        }
        switch.process(sp, &mut req, &mut outs, &pool);
        step("post_processing ran on the response, its header taken out".into(), &mut steps);
    }
    for (port, o) in outs.iter_mut().enumerate() {
        for p in o.drain() {
            left = Some((port as u16, p.data().to_vec()));
            pool.put(p);
        }
    }
    let st = switch.stats();
    let drops: Vec<&str> =
        DropReason::ALL.iter().filter(|&&r| st.drop_count(r) > before.drop_count(r)).map(|r| r.name()).collect();
    match &left {
        Some((port, f)) => {
            let info = tern_wire::frame::FrameInfo::parse(f)
                .map(|i| crate::frames::summary(&i))
                .unwrap_or_else(|e| format!("{e:?}"));
            step(format!("out on port {port}: {info}"), &mut steps);
        }
        None => step(format!("dropped: {}", drops.join(", ")), &mut steps),
    }
    if a.json {
        let out = json!({
            "steps": steps,
            "out_port": left.as_ref().map(|l| l.0),
            "out_frame": left.as_ref().map(|l| crate::frames::hex(&l.1)),
            "drops": drops,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for s in &steps {
            println!("{s}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
