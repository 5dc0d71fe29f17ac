//! `tern rpc`: RpcNIC's schema table (the `.proto` compiler of §III-E).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tern_rpc::check;
use tern_rpc::schema::compile_file;

use crate::CmdResult;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The .proto file (proto2 or proto3). Imports resolve relative to its directory, then to
    /// each --include directory; `tern/rpcnic.proto` (which declares `(tern.acc)`) and
    /// protobuf's well-known types are built in.
    pub file: PathBuf,
    /// More directories to resolve imports in.
    #[arg(long = "include", short = 'I')]
    pub include: Vec<PathBuf>,
    /// Hardware profile whose schema table the classes must fit (classes, field slots per
    /// class, nesting depth): built-in name or TOML file.
    #[arg(long, default_value = "rpcnic-u280")]
    pub profile: String,
    /// Print JSON (the whole table, problems and warnings).
    #[arg(long)]
    pub json: bool,
}

/// `tern rpc check`: exit 0 if the table fits the profile, 1 if something exceeds it.
pub fn check(a: &CheckArgs) -> CmdResult {
    let includes: Vec<&std::path::Path> = a.include.iter().map(PathBuf::as_path).collect();
    let table = compile_file(&a.file, &includes)?;
    let profile = tern_hw::Profile::resolve(&a.profile)?;
    let r = check::report(&table, &profile);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("{}: {} classes, {} enums; checked against {}", r.file, r.class_count, r.enum_count, r.profile);
        for c in &r.classes {
            let depth = c.depth.map_or("recursive".to_string(), |d| format!("depth {d}"));
            println!(
                "class {} {} ({}, {} fields, {} in device memory, {depth})",
                c.id,
                c.name,
                c.syntax,
                c.fields.len(),
                c.device_fields
            );
            for f in &c.fields {
                let mut extra = Vec::new();
                if f.packed {
                    extra.push("packed".to_string());
                }
                if f.map {
                    extra.push("map".to_string());
                }
                if let Some(o) = &f.oneof {
                    extra.push(format!("oneof {o}"));
                }
                if let Some(d) = &f.default {
                    extra.push(format!("default {d}"));
                }
                let extra = if extra.is_empty() { String::new() } else { format!(" [{}]", extra.join(", ")) };
                println!("  {:>5} {:<24} {:<8} {:<40} {}{extra}", f.number, f.name, f.label, f.ty, f.placement);
            }
        }
        for w in &r.warnings {
            println!("warning: {w}");
        }
        for p in &r.problems {
            println!("does not fit: {p}");
        }
        if r.fits {
            println!("fits {}'s schema table", r.profile);
        }
    }
    Ok(if r.fits { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
