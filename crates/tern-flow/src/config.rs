//! The switch's configuration file (TOML): ports, OFUs, the cache policy, the slow path's
//! tables (ACL, routes, next hops) and the hardware profile. `load` checks everything and names
//! the bad item; `Config::build` makes the sans-IO [`Switch`].
//!
//! ```toml
//! profile = "accelsdp-n3000"        # or "cpu" (default), or a profile TOML file
//!
//! [[port]]
//! name = "left"
//! afpacket = "veth-sw0"             # or: pcap_in = "in.pcap", pcap_out = "out.pcap"
//!
//! [[ofu]]
//! id = 1
//! kind = "em"                       # exact 5-tuple cache (BCAM)
//! [[ofu]]
//! id = 2
//! kind = "lpm"                      # destination-prefix cache (TCAM)
//!
//! [cache]
//! mode = "both"                     # exact | prefix | both | none
//! flow_limit = 200000
//! idle_timeout_ms = 10000
//! upcall_rate = 100000              # misses/s admitted to the slow path
//! upcall_burst = 1000
//!
//! [acl]
//! default = "allow"                 # or "deny"
//! rules = ["priority=100,tcp,tp_dst=22 actions=deny"]
//! file = "acl.rules"                # more rules, one per line (# comments)
//!
//! [routes]
//! routes = ["10.1.0.0/16 left"]     # PREFIX NEXT-HOP
//! file = "routes.txt"
//!
//! [[next_hop]]
//! name = "left"
//! port = "left"
//! eth_src = "02:00:00:00:00:01"
//! eth_dst = "02:00:00:00:01:01"
//! vlan = 100                        # optional: push this VLAN id
//! ```
//!
//! ACL rules read like `ovs-ofctl` flows: comma-separated fields, then `actions=allow|deny`.
//! Fields: `priority=N`, `in_port=PORT`, `ip`, `ipv6`, `tcp`, `udp`, `icmp`, `icmp6`,
//! `nw_proto=N`, `nw_src=PREFIX`, `nw_dst=PREFIX` (`ipv6_src`, `ipv6_dst` alike),
//! `tp_src=PORT|LO-HI`, `tp_dst=PORT|LO-HI`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use tern_hw::{Profile, resource};
use tern_io::Pool;
use tern_io::pcap::Timing;

use crate::action::parse_mac;
use crate::classifier::{Pattern, PortRange};
use crate::ofu::{self, OfuKind, OfuSpec};
use crate::pipeline::Pipeline;
use crate::slowpath::{AclAction, AclRule, NextHop, SlowPath, SlowPathTables};
use crate::switch::{CacheMode, CachePolicy, Switch};

/// Why a configuration was refused: the file and every problem, each naming its item.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.iter().map(|p| format!("{}: {p}", .path)).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// One line per problem.
    pub problems: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    port: Vec<RawPort>,
    #[serde(default)]
    ofu: Vec<RawOfu>,
    #[serde(default)]
    cache: RawCache,
    #[serde(default)]
    acl: RawAcl,
    #[serde(default)]
    routes: RawRoutes,
    #[serde(default)]
    next_hop: Vec<RawNextHop>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    name: String,
    afpacket: Option<String>,
    pcap_in: Option<PathBuf>,
    pcap_out: Option<PathBuf>,
    timing: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOfu {
    id: u16,
    kind: String,
    /// Entries per IP version (defaults to the profile's, or 1M with `cpu`).
    entries: Option<u32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    mode: Option<String>,
    flow_limit: Option<usize>,
    idle_timeout_ms: Option<u64>,
    expire_interval_ms: Option<u64>,
    upcall_rate: Option<f64>,
    upcall_burst: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAcl {
    default: Option<String>,
    #[serde(default)]
    rules: Vec<String>,
    file: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoutes {
    #[serde(default)]
    routes: Vec<String>,
    file: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNextHop {
    name: String,
    port: String,
    eth_src: String,
    eth_dst: String,
    vlan: Option<u16>,
}

/// Where a port's frames come from and go.
#[derive(Debug, Clone, PartialEq)]
pub enum PortKind {
    /// A raw socket on an interface.
    AfPacket {
        /// The interface.
        interface: String,
    },
    /// Capture files: frames read from `input` (if any), frames sent written to `output`.
    Pcap {
        /// Frames to receive.
        input: Option<PathBuf>,
        /// Where sent frames go.
        output: Option<PathBuf>,
        /// Replay pace.
        timing: Timing,
    },
}

/// A configured port; its index in [`Config::ports`] is its number in rules (`output:N`).
#[derive(Debug, Clone, PartialEq)]
pub struct PortConfig {
    /// Name used by next hops, `in_port=` and metrics.
    pub name: String,
    /// Backend.
    pub kind: PortKind,
}

/// A checked configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub path: String,
    /// The hardware profile.
    pub profile: Profile,
    /// Ports in order.
    pub ports: Vec<PortConfig>,
    /// OFUs in order.
    pub ofus: Vec<OfuSpec>,
    /// The caching policy.
    pub policy: CachePolicy,
    /// The slow path's tables.
    pub tables: SlowPathTables,
    /// The ACL rules' source lines (by rule index).
    pub acl_lines: Vec<String>,
    /// Next-hop names (by id).
    pub next_hop_names: Vec<String>,
    /// Warnings: usable, but probably not what was meant.
    pub warnings: Vec<String>,
}

/// Entries per IP version of an OFU when the profile sets no bound.
pub const CPU_OFU_ENTRIES: u32 = 1 << 20;

/// Parses one ACL rule line. `ports` resolves `in_port=` names (numbers are taken as they are).
pub fn parse_acl_rule(line: &str, ports: &[String]) -> Result<AclRule, String> {
    let line = line.trim();
    let (fields, action) = match line.rsplit_once("actions=") {
        Some((f, a)) => (f.trim().trim_end_matches(',').trim(), a.trim()),
        None => return Err("no `actions=allow|deny`".into()),
    };
    let action = match action {
        "allow" | "normal" => AclAction::Allow,
        "deny" | "drop" => AclAction::Deny,
        a => return Err(format!("action `{a}`: expected allow or deny")),
    };
    let mut p = Pattern::default();
    let set_proto = |p: &mut Pattern, proto: u8, v6: Option<bool>| -> Result<(), String> {
        if p.proto.is_some_and(|x| x != proto) {
            return Err(format!("two protocols ({} and {proto})", p.proto.unwrap_or(0)));
        }
        p.proto = Some(proto);
        if v6.is_some() {
            p.v6 = v6;
        }
        Ok(())
    };
    for field in fields.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let (k, v) = match field.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (field, None),
        };
        fn need<'a>(k: &str, v: Option<&'a str>) -> Result<&'a str, String> {
            v.ok_or_else(|| format!("`{k}` needs a value"))
        }
        let net = |v: Option<&str>| -> Result<IpNet, String> {
            let v = need(k, v)?;
            v.parse::<IpNet>()
                .or_else(|_| v.parse::<std::net::IpAddr>().map(IpNet::from))
                .map(|n| n.trunc())
                .map_err(|_| format!("`{v}` is not an address or prefix"))
        };
        match (k, v) {
            ("priority", v) => {
                p.priority =
                    need(k, v)?.parse().map_err(|_| format!("priority `{}` is not a number", v.unwrap_or("")))?
            }
            ("in_port", v) => {
                let v = need(k, v)?;
                let i = ports.iter().position(|n| n == v).or_else(|| v.parse::<usize>().ok());
                match i {
                    Some(i) if i < ports.len() || ports.is_empty() => p.in_port = Some(i as u16),
                    _ => return Err(format!("in_port `{v}`: no such port")),
                }
            }
            ("ip", None) => p.v6 = Some(false),
            ("ipv6", None) => p.v6 = Some(true),
            ("tcp", None) => set_proto(&mut p, 6, None)?,
            ("udp", None) => set_proto(&mut p, 17, None)?,
            ("icmp", None) => set_proto(&mut p, 1, Some(false))?,
            ("icmp6", None) => set_proto(&mut p, 58, Some(true))?,
            ("nw_proto", v) => {
                let n = need(k, v)?.parse().map_err(|_| format!("nw_proto `{}` is not 0-255", v.unwrap_or("")))?;
                set_proto(&mut p, n, None)?
            }
            ("nw_src" | "ipv6_src", v) => p.src = Some(net(v)?),
            ("nw_dst" | "ipv6_dst", v) => p.dst = Some(net(v)?),
            ("tp_src", v) => p.src_port = Some(need(k, v)?.parse::<PortRange>()?),
            ("tp_dst", v) => p.dst_port = Some(need(k, v)?.parse::<PortRange>()?),
            (k, _) => return Err(format!("unknown field `{k}`")),
        }
    }
    if (p.src_port.is_some() || p.dst_port.is_some()) && !matches!(p.proto, Some(6 | 17)) {
        return Err("tp_src/tp_dst need tcp or udp".into());
    }
    p.families()?;
    Ok(AclRule { pattern: p, action })
}

/// The longest rule or route file a configuration may name (1 GiB).
pub const MAX_LIST_FILE_BYTES: u64 = 1 << 30;

/// The most bytes a configuration file may have (16 MiB; its rule and route lists are files
/// of their own).
pub const MAX_CONFIG_FILE_BYTES: u64 = tern_wire::MAX_CONFIG_BYTES;

/// Lines of a rule or route file with comments and blanks removed, with their line numbers.
fn file_lines(base: &Path, file: &Path, problems: &mut Vec<String>) -> Vec<(String, String)> {
    let path = if file.is_absolute() { file.to_path_buf() } else { base.join(file) };
    // A device or a pipe would be read without end: refused before reading.
    match tern_wire::read_regular_text(&path, MAX_LIST_FILE_BYTES) {
        Ok(text) => text
            .lines()
            .enumerate()
            .map(|(i, l)| {
                (format!("{}:{}", path.display(), i + 1), l.split('#').next().unwrap_or("").trim().to_string())
            })
            .filter(|(_, l)| !l.is_empty())
            .collect(),
        Err(e) => {
            problems.push(e.to_string());
            Vec::new()
        }
    }
}

/// Reads and checks a configuration file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    load_for(path, None)
}

/// Reads and checks a configuration file against `profile` (a built-in name or a file) in place
/// of the one it names, if given.
pub fn load_for(path: &Path, profile: Option<&str>) -> Result<Config, ConfigError> {
    let text = tern_wire::read_regular_text(path, MAX_CONFIG_FILE_BYTES)
        .map_err(|e| ConfigError { path: path.display().to_string(), problems: vec![e.problem] })?;
    parse_for(&text, path, profile)
}

/// Checks a configuration given as text; `path` names it and anchors relative file names.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    parse_for(text, path, None)
}

/// [`parse`] against `profile` in place of the one the text names, if given.
pub fn parse_for(text: &str, path: &Path, profile: Option<&str>) -> Result<Config, ConfigError> {
    let name = path.display().to_string();
    let fail = |problems: Vec<String>| ConfigError { path: name.clone(), problems };
    let raw: RawConfig = toml::from_str(text).map_err(|e| fail(vec![e.to_string().trim().replace('\n', " ")]))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let profile_name = profile.map(str::to_string).or_else(|| raw.profile.clone()).unwrap_or_else(|| "cpu".into());
    let profile = match Profile::resolve(&profile_name) {
        Ok(p) => p,
        Err(e) => return Err(fail(vec![format!("profile: {e}")])),
    };

    // Ports.
    let mut ports = Vec::new();
    for (i, p) in raw.port.iter().enumerate() {
        let item = format!("port {:?}", p.name);
        if p.name.is_empty() {
            problems.push(format!("port #{i}: empty name"));
        }
        if raw.port[..i].iter().any(|q| q.name == p.name) {
            problems.push(format!("{item}: defined twice"));
        }
        let rel = |f: &PathBuf| if f.is_absolute() { f.clone() } else { base.join(f) };
        let kind = match (&p.afpacket, &p.pcap_in, &p.pcap_out) {
            (Some(i), None, None) => {
                if p.timing.is_some() {
                    problems.push(format!("{item}: timing applies to pcap_in only"));
                }
                PortKind::AfPacket { interface: i.clone() }
            }
            (None, input, output) if input.is_some() || output.is_some() => {
                let timing = match p.timing.as_deref().unwrap_or("fast").parse::<Timing>() {
                    Ok(t) => t,
                    Err(e) => {
                        problems.push(format!("{item}: {e}"));
                        Timing::Fast
                    }
                };
                if let Some(f) = input.as_ref().map(rel)
                    && !f.is_file()
                {
                    problems.push(format!("{item}: pcap_in {}: no such file", f.display()));
                }
                PortKind::Pcap { input: input.as_ref().map(rel), output: output.as_ref().map(rel), timing }
            }
            _ => {
                problems.push(format!("{item}: give either `afpacket = IFNAME` or `pcap_in` / `pcap_out`"));
                continue;
            }
        };
        ports.push(PortConfig { name: p.name.clone(), kind });
    }
    if ports.is_empty() {
        problems.push("no [[port]]: the switch needs at least one".into());
    }
    if ports.len() > usize::from(u16::MAX) {
        problems.push(format!("{} ports; at most {}", ports.len(), u16::MAX));
    }
    let port_names: Vec<String> = ports.iter().map(|p| p.name.clone()).collect();

    // OFUs.
    let mut ofus: Vec<OfuSpec> = Vec::new();
    for o in &raw.ofu {
        let item = format!("ofu {}", o.id);
        let kind = match o.kind.as_str() {
            "em" => OfuKind::Em,
            "lpm" => OfuKind::Lpm,
            k => {
                problems.push(format!("{item}: kind `{k}`: expected em or lpm"));
                continue;
            }
        };
        if ofus.iter().any(|s| s.id == o.id) {
            problems.push(format!("{item}: defined twice"));
            continue;
        }
        let mut spec = OfuSpec::from_profile(o.id, kind, &profile);
        let bounded = spec.v4_entries < ofu::UNBOUNDED_INDEXES;
        let limit = if bounded { spec.v4_entries.min(spec.v6_entries) } else { CPU_OFU_ENTRIES };
        let want = o.entries.unwrap_or(limit);
        if want == 0 {
            problems.push(format!("{item}: entries must be at least 1"));
        } else if bounded && want > limit {
            problems.push(format!(
                "{item}: {want} entries do not fit {} ({limit} per IP version: {})",
                profile.name,
                if kind == OfuKind::Lpm { resource::FLOW_LPM4_ENTRIES } else { resource::FLOW_EM_ENTRIES }
            ));
        } else if want > CPU_OFU_ENTRIES * 4 {
            problems.push(format!("{item}: {want} entries; at most {} per IP version", CPU_OFU_ENTRIES * 4));
        }
        spec.v4_entries = want.min(ofu::UNBOUNDED_INDEXES / 2);
        spec.v6_entries = want.min(ofu::UNBOUNDED_INDEXES / 2);
        ofus.push(spec);
    }
    if let Some(max) = profile.capacity(resource::FLOW_OFUS)
        && ofus.len() as u64 > max
    {
        problems.push(format!("{} OFUs do not fit {} ({max}: {})", ofus.len(), profile.name, resource::FLOW_OFUS));
    }
    for kind in [OfuKind::Em, OfuKind::Lpm] {
        if ofus.iter().filter(|s| s.kind == kind).count() > 1 {
            warnings
                .push(format!("more than one {} OFU: the cache uses the first; the others stay empty", kind.as_str()));
        }
    }

    // Cache policy.
    let d = CachePolicy::default();
    let mode = match raw.cache.mode.as_deref() {
        None => {
            if ofus.iter().any(|s| s.kind == OfuKind::Em) && ofus.iter().any(|s| s.kind == OfuKind::Lpm) {
                CacheMode::Both
            } else if ofus.iter().any(|s| s.kind == OfuKind::Lpm) {
                CacheMode::Prefix
            } else if ofus.is_empty() {
                CacheMode::None
            } else {
                CacheMode::Exact
            }
        }
        Some("exact") => CacheMode::Exact,
        Some("prefix") => CacheMode::Prefix,
        Some("both") => CacheMode::Both,
        Some("none") => CacheMode::None,
        Some(m) => {
            problems.push(format!("cache.mode `{m}`: expected exact, prefix, both or none"));
            CacheMode::None
        }
    };
    let has = |k| ofus.iter().any(|s| s.kind == k);
    match mode {
        CacheMode::Exact if !has(OfuKind::Em) => problems.push("cache.mode exact needs an em OFU".into()),
        CacheMode::Prefix if !has(OfuKind::Lpm) => problems.push("cache.mode prefix needs an lpm OFU".into()),
        CacheMode::Both if !has(OfuKind::Em) || !has(OfuKind::Lpm) => {
            problems.push("cache.mode both needs an em and an lpm OFU".into())
        }
        _ => {}
    }
    let policy = CachePolicy {
        mode,
        flow_limit: raw.cache.flow_limit.unwrap_or(d.flow_limit),
        idle_timeout: raw.cache.idle_timeout_ms.map_or(d.idle_timeout, Duration::from_millis),
        expire_interval: raw.cache.expire_interval_ms.map_or(d.expire_interval, Duration::from_millis),
        upcall_rate: raw.cache.upcall_rate.unwrap_or(d.upcall_rate),
        upcall_burst: raw.cache.upcall_burst.unwrap_or(d.upcall_burst),
    };
    if !(policy.upcall_rate > 0.0 && policy.upcall_rate.is_finite()) {
        problems.push(format!("cache.upcall_rate {}: must be a positive number", policy.upcall_rate));
    }
    if !(policy.upcall_burst >= 1.0 && policy.upcall_burst.is_finite()) {
        problems.push(format!("cache.upcall_burst {}: must be at least 1", policy.upcall_burst));
    }
    if policy.idle_timeout.is_zero() {
        problems.push("cache.idle_timeout_ms must be at least 1".into());
    }
    let capacity: usize = ofus
        .iter()
        .filter(|s| match mode {
            CacheMode::Exact => s.kind == OfuKind::Em,
            CacheMode::Prefix => s.kind == OfuKind::Lpm,
            _ => true,
        })
        .map(|s| s.indexes() as usize)
        .max()
        .unwrap_or(0);
    if mode != CacheMode::None && policy.flow_limit > capacity {
        warnings.push(format!(
            "cache.flow_limit {} is more than a cache table holds ({capacity}); the table's size bounds it",
            policy.flow_limit
        ));
    }

    // Next hops. One that is wrong is one error: the routes that name it are counted into that
    // error, not reported one by one.
    let mut next_hops = Vec::new();
    let mut next_hop_names = Vec::new();
    // (name, index of its first error in `problems`, routes that use it)
    let mut broken: Vec<(String, usize, usize)> = Vec::new();
    for (i, n) in raw.next_hop.iter().enumerate() {
        let first_error = problems.len();
        let item = format!("next_hop {:?}", n.name);
        if raw.next_hop[..i].iter().any(|m| m.name == n.name) {
            problems.push(format!("{item}: defined twice"));
        }
        let Some(port) = port_names.iter().position(|p| *p == n.port) else {
            problems.push(format!("{item}: port {:?} is not a [[port]]", n.port));
            broken.push((n.name.clone(), first_error, 0));
            continue;
        };
        let mac = |s: &str, what: &str| parse_mac(s).map_err(|e| format!("{item}: {what}: {e}"));
        let (src, dst) = match (mac(&n.eth_src, "eth_src"), mac(&n.eth_dst, "eth_dst")) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                problems.extend(a.err().into_iter().chain(b.err()));
                broken.push((n.name.clone(), first_error, 0));
                continue;
            }
        };
        if n.vlan.is_some_and(|v| v > 4095) {
            problems.push(format!("{item}: vlan {} is not 0-4095", n.vlan.unwrap_or(0)));
        }
        next_hops.push(NextHop { port: port as u16, eth_src: src, eth_dst: dst, vlan: n.vlan });
        next_hop_names.push(n.name.clone());
    }

    // ACL.
    let acl_default_deny = match raw.acl.default.as_deref() {
        None | Some("allow") => false,
        Some("deny") => true,
        Some(d) => {
            problems.push(format!("acl.default `{d}`: expected allow or deny"));
            false
        }
    };
    let mut acl_src: Vec<(String, String)> =
        raw.acl.rules.iter().enumerate().map(|(i, l)| (format!("acl.rules[{i}]"), l.clone())).collect();
    if let Some(f) = &raw.acl.file {
        acl_src.extend(file_lines(base, f, &mut problems));
    }
    let mut acl = Vec::new();
    let mut acl_lines = Vec::new();
    for (at, line) in &acl_src {
        match parse_acl_rule(line, &port_names) {
            Ok(r) => {
                acl.push(r);
                acl_lines.push(line.clone());
            }
            Err(e) => problems.push(format!("{at}: `{line}`: {e}")),
        }
    }

    // Routes.
    let mut route_src: Vec<(String, String)> =
        raw.routes.routes.iter().enumerate().map(|(i, l)| (format!("routes.routes[{i}]"), l.clone())).collect();
    if let Some(f) = &raw.routes.file {
        route_src.extend(file_lines(base, f, &mut problems));
    }
    let (mut routes4, mut routes6) = (Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    for (at, line) in &route_src {
        let mut it = line.split_whitespace();
        let (Some(prefix), Some(nh), None) = (it.next(), it.next(), it.next()) else {
            problems.push(format!("{at}: `{line}`: expected `PREFIX NEXT-HOP`"));
            continue;
        };
        let Ok(net) = prefix.parse::<IpNet>() else {
            problems.push(format!("{at}: `{prefix}` is not a prefix"));
            continue;
        };
        let Some(id) = next_hop_names.iter().position(|n| n == nh) else {
            match broken.iter_mut().find(|b| b.0 == nh) {
                Some(b) => b.2 += 1,
                None => problems.push(format!("{at}: next hop {nh:?} is not a [[next_hop]]")),
            }
            continue;
        };
        if net != net.trunc() {
            warnings.push(format!("{at}: {net} has host bits set; routing {}", net.trunc()));
        }
        if !seen.insert(net.trunc()) {
            problems.push(format!("{at}: {} is routed twice", net.trunc()));
            continue;
        }
        match net.trunc() {
            IpNet::V4(n) => routes4.push((n, id as u32)),
            IpNet::V6(n) => routes6.push((n, id as u32)),
        }
    }
    for (_, at, uses) in &broken {
        if *uses > 0
            && let Some(p) = problems.get_mut(*at)
        {
            p.push_str(&format!(" ({uses} route{} use it)", if *uses == 1 { "" } else { "s" }));
        }
    }
    let tables = SlowPathTables { acl, acl_default_deny, routes4, routes6, next_hops };
    if let Err(e) = SlowPath::new(&tables) {
        problems.push(e);
    }

    // The action sets the slow path will install must fit the profile's action RAM.
    if let Some(bits) = profile.capacity(resource::FLOW_ACTION_SET_BITS) {
        for (name, nh) in next_hop_names.iter().zip(&tables.next_hops) {
            for v6 in [false, true] {
                let set = SlowPath::next_hop_actions(nh, v6);
                if u64::from(set.operand_bits()) > bits {
                    problems.push(format!(
                        "next_hop {name:?}: its action set `{set}` needs {} bits; {} holds {bits} ({})",
                        set.operand_bits(),
                        profile.name,
                        resource::FLOW_ACTION_SET_BITS
                    ));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(Config { path: name, profile, ports, ofus, policy, tables, acl_lines, next_hop_names, warnings })
    } else {
        Err(fail(problems))
    }
}

impl Config {
    /// The port index of `name` (or a number).
    pub fn port_index(&self, name: &str) -> Option<u16> {
        self.ports
            .iter()
            .position(|p| p.name == name)
            .map(|i| i as u16)
            .or_else(|| name.parse::<u16>().ok().filter(|&i| usize::from(i) < self.ports.len()))
    }

    /// Builds the switch: OFUs from the specs, a pipeline with one output per port, the slow
    /// path from the tables, the cache policy.
    pub fn build(&self, pool: &Pool) -> Result<Switch, String> {
        let (driver, tables) = ofu::new(self.ofus.clone());
        let pipeline = Pipeline::new(tables, self.ports.len(), pool.clone());
        let slow = SlowPath::new(&self.tables)?;
        Switch::new(pipeline, slow, driver, self.policy.clone(), pool.clone()).map_err(|e| e.to_string())
    }
}
