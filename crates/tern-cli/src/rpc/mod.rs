//! `tern rpc`: RpcNIC's schema table (the `.proto` compiler of §III-E), JSON conversion, the
//! conformance testee, and `tern bench rpc`.

pub mod apps;
pub mod bench;
pub mod conformance;
pub mod load;
mod metrics;
mod plot;
pub mod report;
pub mod serve;

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

#[derive(Debug, Args)]
pub struct CodecArgs {
    /// The .proto file that declares the message.
    #[arg(long)]
    pub proto: PathBuf,
    /// The message type: its full name, or a name unique without its package.
    #[arg(long)]
    pub message: String,
    /// More directories to resolve imports in.
    #[arg(long = "include", short = 'I')]
    pub include: Vec<PathBuf>,
    /// Input file [default: stdin].
    pub file: Option<PathBuf>,
    /// `decode`: name fields as in the .proto file instead of protobuf's lowerCamelCase JSON names.
    #[arg(long)]
    pub proto_names: bool,
}

/// The most JSON `rpc encode` reads (256 MiB: four times the largest message `rpc decode`
/// reads, room for base64 and field names).
const MAX_JSON_INPUT_BYTES: u64 = 256 << 20;

/// The input, FILE (a regular file) or stdin, of at most `max` bytes: more is refused, naming
/// the bound, rather than read without end (`/dev/zero`, or stdin from `yes`).
fn read_input(file: &Option<PathBuf>, max: u64) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    match file {
        Some(p) => Ok(tern_wire::read_regular_file(p, max)?),
        None => Ok(tern_wire::read_at_most(std::io::stdin().lock(), max)?
            .ok_or_else(|| format!("stdin holds more than the {max} bytes this input may be"))?),
    }
}

fn table_and_class(a: &CodecArgs) -> Result<(tern_rpc::schema::SchemaTable, u32), Box<dyn std::error::Error>> {
    let includes: Vec<&std::path::Path> = a.include.iter().map(PathBuf::as_path).collect();
    let table = compile_file(&a.proto, &includes)?;
    let class = table
        .class_by_name(&a.message)
        .ok_or_else(|| {
            format!("{}: no message `{}` (or the name is not unique without its package)", a.proto.display(), a.message)
        })?
        .id;
    Ok((table, class))
}

/// `tern rpc decode`: wire bytes to JSON on stdout.
pub fn decode(a: &CodecArgs) -> CmdResult {
    let (table, class) = table_and_class(a)?;
    let opts = tern_rpc::decode::DecodeOptions::default();
    let input = read_input(&a.file, opts.max_message_bytes as u64)?;
    let pools = tern_rpc::decode::Pools::default();
    let msg = tern_rpc::decode::decode(&table, class, &input, &pools, &opts)?;
    println!("{}", serde_json::to_string_pretty(&tern_rpc::json::to_json(&msg, a.proto_names))?);
    Ok(ExitCode::SUCCESS)
}

/// `tern rpc encode`: JSON to wire bytes on stdout (refused to a terminal).
pub fn encode(a: &CodecArgs) -> CmdResult {
    use std::io::{IsTerminal as _, Write as _};
    let (table, class) = table_and_class(a)?;
    let input = read_input(&a.file, MAX_JSON_INPUT_BYTES)?;
    let json: serde_json::Value = serde_json::from_slice(&input).map_err(|e| format!("the input is not JSON: {e}"))?;
    let bytes = tern_rpc::json::from_json(&table, class, &json)?;
    let mut out = std::io::stdout().lock();
    if out.is_terminal() {
        return Err("stdout is a terminal: redirect the wire bytes to a file or a pipe".into());
    }
    out.write_all(&bytes)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
