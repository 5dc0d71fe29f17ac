//! `tern switch scale` and `tern switch dump-tables`: a running `tern switch serve`'s control
//! endpoint asked to change its server group, and to show its tables.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::CmdResult;

/// Options of `tern switch scale`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("change").required(true).args(["add", "remove", "members"])))]
pub struct ScaleArgs {
    /// A running `tern switch serve --metrics ADDR`.
    #[arg(long)]
    pub server: SocketAddr,
    /// Add this server (its index in the configuration's `servers`) to the group.
    #[arg(long)]
    pub add: Option<u16>,
    /// Take this server out of the group: it gets no new flows and drains.
    #[arg(long)]
    pub remove: Option<u16>,
    /// The new group's members, e.g. `0,2`.
    #[arg(long)]
    pub members: Option<String>,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(10)))
        .http_status_as_error(false)
        .build()
        .into()
}

/// `tern switch scale`: exit 0 with the new group's version, 1 if the switch refused (the
/// pinned-flow table too small, a server unreachable, a bad index).
pub fn scale(a: &ScaleArgs) -> CmdResult {
    let query = match (&a.add, &a.remove, &a.members) {
        (Some(s), _, _) => format!("add={s}"),
        (_, Some(s), _) => format!("remove={s}"),
        (_, _, Some(m)) => format!("members={m}"),
        _ => return Err("give --add, --remove or --members".into()),
    };
    let url = format!("http://{}/scale?{query}", a.server);
    let mut resp = agent().post(&url).send_empty().map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().map_err(|e| format!("{url}: {e}"))?;
    if status != 200 {
        eprintln!("the switch refused ({status}): {}", body.trim());
        return Ok(ExitCode::FAILURE);
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{url}: not JSON: {e}"))?;
    crate::metrics::answered_by(&url, &v, "tern switch serve --metrics", &["version", "members", "live_flows"])?;
    println!(
        "group version {}: members {}, {} live flows taken from the servers",
        v["version"], v["members"], v["live_flows"]
    );
    Ok(ExitCode::SUCCESS)
}

/// Options of `tern switch dump-tables`.
#[derive(Debug, Args)]
pub struct DumpArgs {
    /// A running `tern switch serve --metrics ADDR`.
    #[arg(long)]
    pub server: SocketAddr,
    /// Entries shown a table at most.
    #[arg(long, default_value_t = 50)]
    pub max: usize,
    /// Print JSON (the switch's, with each server's mirror).
    #[arg(long)]
    pub json: bool,
}

fn get_json(url: &str) -> Result<serde_json::Value, String> {
    let mut resp = agent().get(url).call().map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().map_err(|e| format!("{url}: {e}"))?;
    if status != 200 {
        return Err(format!("{url}: {status} {}", body.trim()));
    }
    serde_json::from_str(&body).map_err(|e| format!("{url}: not JSON: {e}"))
}

/// `tern switch dump-tables`: the mirrored table's entries in the switch (the original, with
/// each entry's hits this interval) and on each server (the mirror).
pub fn dump(a: &DumpArgs) -> CmdResult {
    let url = format!("http://{}/tables", a.server);
    let mut v = get_json(&url)?;
    crate::metrics::answered_by(&url, &v, "tern switch serve --metrics", &["table", "original", "servers"])?;
    let servers: Vec<String> =
        v["servers"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)).collect();
    let mut mirrors = Vec::new();
    for (i, s) in servers.iter().enumerate() {
        mirrors.push(
            get_json(&format!("http://{s}/entries")).unwrap_or_else(|e| serde_json::json!({"server": i, "error": e})),
        );
    }
    v["mirrors"] = serde_json::Value::Array(mirrors);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let original = v["original"].as_array().cloned().unwrap_or_default();
    println!(
        "table {} (action {}), in the switch: {} of {} entries (generation {})",
        v["table"].as_str().unwrap_or("?"),
        v["action"].as_str().unwrap_or("?"),
        original.len(),
        v["capacity"],
        v["generation"]
    );
    for e in original.iter().take(a.max) {
        println!("  key {} -> params {}   hits {}", e["key"], e["params"], e["hits"]);
    }
    for t in v["more"].as_array().into_iter().flatten() {
        let rows = t["original"].as_array().cloned().unwrap_or_default();
        println!(
            "table {} (action {}), in the switch: {} entries",
            t["table"].as_str().unwrap_or("?"),
            t["action"].as_str().unwrap_or("?"),
            rows.len()
        );
        for e in rows.iter().take(a.max) {
            println!("  key {} -> params {}   hits {}", e["key"], e["params"], e["hits"]);
        }
    }
    for m in v["mirrors"].as_array().into_iter().flatten() {
        if let Some(err) = m["error"].as_str() {
            println!("server {}: {err}", m["server"]);
            continue;
        }
        println!("server {} (mirror): {} entries", m["server"], m["entries"]);
        for e in m["shown"].as_array().into_iter().flatten().take(a.max) {
            println!("  {} -> {}", e["key"].as_str().unwrap_or("?"), e["value"].as_str().unwrap_or("?"));
        }
    }
    Ok(ExitCode::SUCCESS)
}
