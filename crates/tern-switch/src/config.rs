//! The running configuration of `tern switch serve` (TOML; docs/clip.md, "Running a switch and
//! its servers"): its program, ports, servers and their control endpoints and buddies, routes,
//! the group, the offload and heartbeats. [`parse`] checks it and builds its switch; every
//! refusal names the item.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::group::SelectorConfig;
use crate::offload::{Mode, OffloadConfig};
use crate::program::Program;
use crate::switch::{Route, Switch, SwitchConfig};

/// An EtherType given as `0x88B5` or a decimal number: at least 0x0600 (below are lengths).
pub fn parse_ethertype(s: &str) -> Result<u16, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u16::from_str_radix(h, 16),
        None => s.parse::<u16>(),
    }
    .map_err(|_| format!("`{s}` is not a 16-bit number"))?;
    if v < 0x0600 {
        return Err(format!("{s}: an EtherType is at least 0x0600"));
    }
    Ok(v)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    prefix: String,
    port: u16,
    mac: String,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawOffload {
    enabled: Option<bool>,
    capacity: Option<usize>,
    threshold: Option<u32>,
    sketch_ways: Option<usize>,
    sketch_width: Option<usize>,
    mode: Option<String>,
    interval_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    members: Option<Vec<u16>>,
    buckets: Option<usize>,
    filter_ways: Option<usize>,
    filter_width: Option<usize>,
    pins: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    program: PathBuf,
    ports: Vec<String>,
    servers: Vec<u16>,
    #[serde(default)]
    control: Vec<SocketAddr>,
    #[serde(default)]
    buddies: Vec<u16>,
    ethertype: Option<String>,
    mac: Option<String>,
    ip: Option<Ipv4Addr>,
    heartbeat_ms: Option<u64>,
    #[serde(default)]
    route: Vec<RawRoute>,
    #[serde(default)]
    offload: RawOffload,
    #[serde(default)]
    group: RawGroup,
}

/// A loaded configuration.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub program: Program,
    pub program_path: PathBuf,
    pub ports: Vec<String>,
    pub switch: SwitchConfig,
    /// Each server's control endpoint (live flows, heartbeats), by server.
    pub control: Vec<SocketAddr>,
    /// Each server's buddy (it holds the server's replicas: `tern switch server --buddy`), by
    /// server; empty: the next live member.
    pub buddies: Vec<u16>,
    pub heartbeat: Duration,
    pub interval: Duration,
}

/// The most bytes a configuration file may have (16 MiB).
pub const MAX_CONFIG_FILE_BYTES: u64 = tern_wire::MAX_CONFIG_BYTES;

/// Reads and checks a configuration (a regular file of at most [`MAX_CONFIG_FILE_BYTES`]) and
/// builds its switch (every refusal comes now, naming the item); errors name the file.
pub fn load(path: &Path) -> Result<(ServeConfig, Switch), String> {
    let text = tern_wire::read_regular_text(path, MAX_CONFIG_FILE_BYTES)?;
    parse(&text, path)
}

/// Checks configuration `text`, read from `path` (its program is found beside it), and builds
/// its switch; errors name `path` and the item.
pub fn parse(text: &str, path: &Path) -> Result<(ServeConfig, Switch), String> {
    let at = |e: String| format!("{}: {e}", path.display());
    let raw: RawConfig = toml::from_str(text).map_err(|e| at(e.message().to_string()))?;
    let program_path = path.parent().unwrap_or(Path::new(".")).join(&raw.program);
    let program = Program::load(&program_path)?;
    let ports = u16::try_from(raw.ports.len()).map_err(|_| at("too many ports".into()))?;
    if ports == 0 {
        return Err(at("`ports`: at least one".into()));
    }
    if !raw.buddies.is_empty()
        && (raw.buddies.len() != raw.servers.len()
            || raw.buddies.iter().enumerate().any(|(s, &b)| usize::from(b) >= raw.servers.len() || usize::from(b) == s))
    {
        return Err(at(format!(
            "`buddies`: one a server ({} servers), each another server's index",
            raw.servers.len()
        )));
    }
    if !raw.control.is_empty() && raw.control.len() != raw.servers.len() {
        return Err(at(format!(
            "`control`: one endpoint a server ({} servers, {} endpoints)",
            raw.servers.len(),
            raw.control.len()
        )));
    }
    let mut routes = Vec::new();
    for r in &raw.route {
        routes.push(Route {
            prefix: r.prefix.parse().map_err(|_| at(format!("route `{}`: not a prefix", r.prefix)))?,
            port: r.port,
            mac: tern_wire::frame::parse_mac(&r.mac).map_err(|e| at(format!("route {}: {e}", r.prefix)))?,
        });
    }
    let d = SwitchConfig::default();
    let mut offload = OffloadConfig::default();
    let o = &raw.offload;
    offload.capacity = o.capacity.unwrap_or(offload.capacity);
    offload.threshold = o.threshold.unwrap_or(offload.threshold);
    offload.sketch_ways = o.sketch_ways.unwrap_or(offload.sketch_ways);
    offload.sketch_width = o.sketch_width.unwrap_or(offload.sketch_width);
    offload.mode = match o.mode.as_deref() {
        None | Some("sketch") => Mode::Sketch,
        Some("random") => Mode::Random,
        Some(m) => return Err(at(format!("offload mode `{m}` (sketch or random)"))),
    };
    let dg = SelectorConfig::default();
    let g = &raw.group;
    let selector = SelectorConfig {
        buckets: g.buckets.unwrap_or(dg.buckets),
        filter_ways: g.filter_ways.unwrap_or(dg.filter_ways),
        filter_width: g.filter_width.unwrap_or(dg.filter_width),
        pins: g.pins.unwrap_or(dg.pins),
    };
    let switch = SwitchConfig {
        ethertype: match &raw.ethertype {
            Some(e) => parse_ethertype(e).map_err(|e| at(format!("ethertype {e}")))?,
            None => d.ethertype,
        },
        mac: match &raw.mac {
            Some(m) => tern_wire::frame::parse_mac(m).map_err(|e| at(format!("mac: {e}")))?,
            None => d.mac,
        },
        ip: raw.ip.unwrap_or(d.ip),
        ports,
        servers: raw.servers.clone(),
        members: g.members.clone().unwrap_or_else(|| (0..raw.servers.len() as u16).collect()),
        routes,
        selector,
        offload,
        offload_enabled: o.enabled.unwrap_or(true),
        learn_capacity: d.learn_capacity,
        hold_capacity: d.hold_capacity,
        busy_timeout_ns: d.busy_timeout_ns,
    };
    let interval = Duration::from_millis(o.interval_ms.unwrap_or(100).max(1));
    let heartbeat_ms = raw.heartbeat_ms.unwrap_or(300);
    if !(10..=60_000).contains(&heartbeat_ms) {
        return Err(at(format!("heartbeat_ms = {heartbeat_ms}: give 10 to 60000")));
    }
    let heartbeat = Duration::from_millis(heartbeat_ms);
    let built = Switch::new(program.clone(), switch.clone()).map_err(|e| at(e.to_string()))?;
    let cfg = ServeConfig {
        program,
        program_path,
        ports: raw.ports,
        switch,
        control: raw.control,
        buddies: raw.buddies,
        heartbeat,
        interval,
    };
    Ok((cfg, built))
}
