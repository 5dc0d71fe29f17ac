//! Tenant files (docs/chain.md, "Tenant files"): one tenant's DAG of network tasks, which
//! packets are its own, the bandwidth it asks for, and each task's parameters, in TOML — checked
//! whole, every error naming the file and the item, and against a hardware profile.
//!
//! ```toml
//! tenant = "alice"
//! bandwidth_gbps = 10.0
//! dag = "fw -> nat -> {aes, lb}"
//! [ingress]
//! dst = "10.1.0.0/16"
//! [nt.fw]
//! kind = "firewall"
//! rules = [{ action = "allow", src = "10.0.0.0/8", proto = "tcp", dst_port = "80-443", priority = 10 }]
//! [nt.nat]
//! kind = "nat"
//! external = "192.0.2.1"
//! ports = "20000-29999"
//! [nt.aes]
//! kind = "aes"
//! key = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
//! [nt.lb]
//! kind = "lb"
//! backends = [{ name = "10.2.0.1:80" }, { name = "10.2.0.2:80", weight = 2 }]
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;
use tern_table::classifier::{Pattern, PortRange};

use crate::dag::{self, Dag};
use crate::fw::{Action, FwConfig, Rule};
use crate::gbn;
use crate::nat::NatConfig;

/// The task kinds a tenant file may use.
pub const KINDS: [&str; 8] = ["firewall", "nat", "aes", "lb", "gbn", "kv", "dummy", "stage"];

/// A tenant file that cannot be used: the file and what is wrong, naming the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct TenantError {
    /// The file.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    tenant: String,
    #[serde(default)]
    bandwidth_gbps: Option<f64>,
    dag: String,
    #[serde(default)]
    parallel: bool,
    #[serde(default)]
    ingress: toml::Table,
    #[serde(default)]
    nt: BTreeMap<String, toml::Table>,
}

/// Which packets are the tenant's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ingress {
    /// The pattern (its priority unused).
    pub pattern: Pattern,
}

/// A task's parameters, checked.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskSpec {
    /// The firewall's rules and settings.
    Firewall {
        /// Rules.
        rules: Vec<Rule>,
        /// Settings.
        config: FwConfig,
    },
    /// The NAT's settings.
    Nat(NatConfig),
    /// AES-GCM: the key, and whether it seals (else opens).
    Aes {
        /// The tenant's key.
        key: [u8; 32],
        /// Seal (else open).
        seal: bool,
    },
    /// The load balancer's backends and table size.
    Lb {
        /// (name, weight).
        backends: Vec<(String, u32)>,
        /// Table entries.
        table_size: usize,
    },
    /// The go-back-N transport's receiving end: its bounds on connections.
    Gbn(gbn::ReceiveConfig),
    /// The KV cache's bounds.
    Kv(crate::kv::KvConfig),
    /// Another engine run as a task through `tern_io::BatchStage` (what `tern chain` offers:
    /// `flow`, a `tern flow` switch): packets it forwards (on any port) go on, the rest are
    /// dropped.
    Stage {
        /// The engine's name.
        engine: String,
        /// Its configuration file, as the tenant file gives it (relative to the working
        /// directory).
        config: String,
        /// The port it receives on.
        in_port: u16,
        /// Its area, LUTs.
        luts: u64,
    },
    /// A dummy task (the paper's, for experiments): it passes packets on, costing what it is
    /// configured to.
    Dummy {
        /// Nanoseconds a packet.
        ns_per_packet: u64,
        /// The most it carries, Gbit/s (0: the line).
        gbps: f64,
        /// Its area, LUTs.
        luts: u64,
    },
}

impl TaskSpec {
    /// Whether the kind may change a packet's bytes (a firewall and a dummy never do).
    pub fn modifies(&self) -> bool {
        !matches!(self, TaskSpec::Firewall { .. } | TaskSpec::Dummy { .. })
    }

    /// The kind's name (one of [`KINDS`]).
    pub fn kind(&self) -> &'static str {
        match self {
            TaskSpec::Firewall { .. } => "firewall",
            TaskSpec::Nat(_) => "nat",
            TaskSpec::Aes { .. } => "aes",
            TaskSpec::Lb { .. } => "lb",
            TaskSpec::Gbn(_) => "gbn",
            TaskSpec::Kv(_) => "kv",
            TaskSpec::Dummy { .. } => "dummy",
            TaskSpec::Stage { .. } => "stage",
        }
    }

    /// The profile's name for its area (`nt.NAME.luts`).
    pub fn area_name(&self) -> &'static str {
        profile_name(self.kind())
    }
}

/// The profile's name for a task kind (`nt.NAME.luts`, `nt.NAME.gbps`, `nt.NAME.cycles`): the
/// kind, but `fw` for a firewall and `kv_cache` for the KV cache, as Figure 6 names them.
pub fn profile_name(kind: &str) -> &'static str {
    match kind {
        "firewall" => "fw",
        "nat" => "nat",
        "aes" => "aes",
        "lb" => "lb",
        "gbn" => "gbn",
        "kv" => "kv_cache",
        "stage" => "stage",
        _ => "dummy",
    }
}

/// A checked tenant file.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// The tenant's name.
    pub name: String,
    /// The bandwidth it asks for, Gbit/s (0: none asked).
    pub bandwidth_gbps: f64,
    /// Its packets.
    pub ingress: Ingress,
    /// Its DAG; node `i` is task `tasks[i]`.
    pub dag: Dag,
    /// Each node's task.
    pub tasks: Vec<TaskSpec>,
    /// The DAG's nodes in topological order.
    pub order: Vec<usize>,
    /// Run the DAG's parallel branches in parallel (`parallel = true`; docs/chain.md, "DAG
    /// parallelism").
    pub parallel: bool,
}

/// What a profile's limits say of a tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Use {
    /// What: `line rate (Gbit/s)`, `area (LUTs)`.
    pub what: &'static str,
    /// Asked.
    pub asked: f64,
    /// Available.
    pub available: f64,
}

impl Use {
    /// Whether it fits.
    pub fn fits(&self) -> bool {
        self.asked <= self.available
    }
}

fn str_of<'a>(t: &'a toml::Table, key: &str, at: &str) -> Result<Option<&'a str>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{at}.{key}: must be a string")),
    }
}

fn int_of(t: &toml::Table, key: &str, at: &str, range: std::ops::RangeInclusive<i64>) -> Result<Option<i64>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Integer(v)) if range.contains(v) => Ok(Some(*v)),
        Some(toml::Value::Integer(v)) => Err(format!("{at}.{key} = {v}: must be {} to {}", range.start(), range.end())),
        Some(_) => Err(format!("{at}.{key}: must be an integer")),
    }
}

fn bool_of(t: &toml::Table, key: &str, at: &str) -> Result<Option<bool>, String> {
    match t.get(key) {
        None => Ok(None),
        Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("{at}.{key}: must be true or false")),
    }
}

/// The keys of a tenant's `[ingress]` table (docs/chain.md lists the same; a test compares them).
pub const INGRESS_KEYS: [&str; 5] = ["src", "dst", "proto", "src_port", "dst_port"];

/// The keys of a firewall rule (an entry of `rules`; docs/chain.md lists the same).
pub const RULE_KEYS: [&str; 7] = ["action", "src", "dst", "proto", "src_port", "dst_port", "priority"];

/// The keys of a load balancer's backend (an entry of `backends`; docs/chain.md lists the same).
pub const BACKEND_KEYS: [&str; 2] = ["name", "weight"];

/// The parameters a task of `kind` takes in its `[nt.NAME]` table beside `kind` (docs/chain.md's
/// table of kinds and their parameters lists the same; a test compares them). None for a kind
/// that is not one of [`KINDS`].
pub fn parameters(kind: &str) -> &'static [&'static str] {
    match kind {
        "firewall" => &["rules", "default", "established", "max_flows", "max_flows_per_source", "idle_s"],
        "nat" => &["external", "ports", "idle_s", "ports_per_host"],
        "aes" => &["key", "direction"],
        "lb" => &["backends", "table_size"],
        "gbn" => &["max_connections", "max_connections_per_peer", "idle_s", "cookies_from", "quiet_s"],
        "kv" => &["max_bytes", "max_entries", "max_pending", "max_pending_per_client"],
        "dummy" => &["ns_per_packet", "gbps", "luts"],
        "stage" => &["engine", "config", "in_port", "luts"],
        _ => &[],
    }
}

/// `t` holds only `kind` and the parameters of `kind`; else an error naming the first other key
/// and listing what the kind takes.
fn parameters_only(t: &toml::Table, kind: &str, at: &str) -> Result<(), String> {
    let allowed: Vec<&str> = std::iter::once("kind").chain(parameters(kind).iter().copied()).collect();
    only(t, &allowed, at)
}

fn only(t: &toml::Table, allowed: &[&str], at: &str) -> Result<(), String> {
    match t.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("{at}.{k}: not a parameter of this kind ({})", allowed.join(", "))),
        None => Ok(()),
    }
}

fn prefix(s: &str, at: &str) -> Result<IpNet, String> {
    s.parse::<IpNet>()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("{at}: `{s}` is not an address or prefix"))
}

fn protocol(v: &toml::Value, at: &str) -> Result<u8, String> {
    match v {
        toml::Value::String(s) if s == "tcp" => Ok(6),
        toml::Value::String(s) if s == "udp" => Ok(17),
        toml::Value::String(s) if s == "icmp" => Ok(1),
        toml::Value::Integer(n) if (0..=255).contains(n) => Ok(*n as u8),
        _ => Err(format!("{at}: `{v}` is not a protocol (tcp, udp, icmp or a number 0 to 255)")),
    }
}

fn ports(v: &toml::Value, at: &str) -> Result<PortRange, String> {
    match v {
        toml::Value::String(s) => s.parse::<PortRange>().map_err(|e| format!("{at}: {e}")),
        toml::Value::Integer(n) if (0..=65535).contains(n) => Ok(PortRange(*n as u16, *n as u16)),
        _ => Err(format!("{at}: `{v}` is not a port or a range `LO-HI`")),
    }
}

/// A pattern from a table's `src`, `dst`, `proto`, `src_port`, `dst_port` (and `priority`).
fn pattern(t: &toml::Table, at: &str) -> Result<Pattern, String> {
    let mut p = Pattern::default();
    if let Some(s) = str_of(t, "src", at)? {
        p.src = Some(prefix(s, &format!("{at}.src"))?);
    }
    if let Some(s) = str_of(t, "dst", at)? {
        p.dst = Some(prefix(s, &format!("{at}.dst"))?);
    }
    if let Some(v) = t.get("proto") {
        p.proto = Some(protocol(v, &format!("{at}.proto"))?);
    }
    if let Some(v) = t.get("src_port") {
        p.src_port = Some(ports(v, &format!("{at}.src_port"))?);
    }
    if let Some(v) = t.get("dst_port") {
        p.dst_port = Some(ports(v, &format!("{at}.dst_port"))?);
    }
    p.priority = int_of(t, "priority", at, 0..=i64::from(u32::MAX))?.unwrap_or(0) as u32;
    if (p.src_port.is_some() || p.dst_port.is_some()) && p.proto.is_none_or(|x| x != 6 && x != 17) {
        return Err(format!("{at}: ports need proto = \"tcp\" or \"udp\""));
    }
    if let (Some(a), Some(b)) = (p.src, p.dst)
        && matches!(a, IpNet::V4(_)) != matches!(b, IpNet::V4(_))
    {
        return Err(format!("{at}: src and dst are of different families"));
    }
    Ok(p)
}

fn task(t: &toml::Table, at: &str) -> Result<TaskSpec, String> {
    let kind = str_of(t, "kind", at)?.ok_or_else(|| format!("{at}.kind: missing (one of {})", KINDS.join(", ")))?;
    match kind {
        "firewall" => {
            parameters_only(t, "firewall", at)?;
            let mut config = FwConfig::default();
            match str_of(t, "default", at)? {
                None | Some("deny") => {}
                Some("allow") => config.default = Action::Allow,
                Some(o) => return Err(format!("{at}.default: `{o}` is neither allow nor deny")),
            }
            config.established = bool_of(t, "established", at)?.unwrap_or(true);
            config.max_flows = int_of(t, "max_flows", at, 1..=1 << 24)?.unwrap_or(65_536) as usize;
            config.max_flows_per_source =
                int_of(t, "max_flows_per_source", at, 1..=1 << 24)?.map_or(config.max_flows_per_source, |v| v as usize);
            config.idle = Duration::from_secs(int_of(t, "idle_s", at, 1..=86_400)?.unwrap_or(60) as u64);
            let mut rules = Vec::new();
            let list = match t.get("rules") {
                None => Vec::new(),
                Some(toml::Value::Array(a)) => a.clone(),
                Some(_) => return Err(format!("{at}.rules: must be a list of tables")),
            };
            for (i, r) in list.iter().enumerate() {
                let rat = format!("{at}.rules[{i}]");
                let toml::Value::Table(r) = r else { return Err(format!("{rat}: must be a table")) };
                only(r, &RULE_KEYS, &rat)?;
                let action = match str_of(r, "action", &rat)? {
                    Some("allow") => Action::Allow,
                    Some("deny") => Action::Deny,
                    Some(o) => return Err(format!("{rat}.action: `{o}` is neither allow nor deny")),
                    None => return Err(format!("{rat}.action: missing (allow or deny)")),
                };
                rules.push(Rule { pattern: pattern(r, &rat)?, action });
            }
            Ok(TaskSpec::Firewall { rules, config })
        }
        "nat" => {
            parameters_only(t, "nat", at)?;
            let ext = str_of(t, "external", at)?.ok_or_else(|| format!("{at}.external: missing (an IPv4 address)"))?;
            let external: std::net::Ipv4Addr =
                ext.parse().map_err(|_| format!("{at}.external: `{ext}` is not an IPv4 address"))?;
            // The defaults are `NatConfig::new`'s.
            let d = NatConfig::new(external.octets());
            let PortRange(lo, hi) = match t.get("ports") {
                Some(v) => ports(v, &format!("{at}.ports"))?,
                None => PortRange(d.ports.0, d.ports.1),
            };
            if lo == 0 {
                return Err(format!("{at}.ports: port 0 cannot be handed out"));
            }
            let idle = int_of(t, "idle_s", at, 1..=86_400)?.map_or(d.idle, |v| Duration::from_secs(v as u64));
            let ports_per_host = int_of(t, "ports_per_host", at, 1..=65_535)?.map_or(d.ports_per_host, |v| v as u32);
            Ok(TaskSpec::Nat(NatConfig { ports: (lo, hi), idle, ports_per_host, ..d }))
        }
        "aes" => {
            parameters_only(t, "aes", at)?;
            let k = str_of(t, "key", at)?.ok_or_else(|| format!("{at}.key: missing (64 hex digits)"))?;
            let key =
                tern_wire::hex_bytes::<32>(k).ok_or_else(|| format!("{at}.key: not 64 hex digits (a 32-byte key)"))?;
            let seal = match str_of(t, "direction", at)? {
                None | Some("seal") => true,
                Some("open") => false,
                Some(o) => return Err(format!("{at}.direction: `{o}` is neither seal nor open")),
            };
            Ok(TaskSpec::Aes { key, seal })
        }
        "lb" => {
            parameters_only(t, "lb", at)?;
            let Some(toml::Value::Array(list)) = t.get("backends") else {
                return Err(format!("{at}.backends: missing (a list of {{ name, weight }})"));
            };
            let mut backends = Vec::new();
            for (i, b) in list.iter().enumerate() {
                let bat = format!("{at}.backends[{i}]");
                let toml::Value::Table(b) = b else { return Err(format!("{bat}: must be a table")) };
                only(b, &BACKEND_KEYS, &bat)?;
                let name = str_of(b, "name", &bat)?.ok_or_else(|| format!("{bat}.name: missing"))?;
                let weight = int_of(b, "weight", &bat, 0..=1000)?.unwrap_or(1) as u32;
                backends.push((name.to_string(), weight));
            }
            let table_size =
                int_of(t, "table_size", at, 2..=i64::from(crate::lb::MAX_TABLE as u32))?.unwrap_or(65_537) as usize;
            let refs: Vec<(&str, u32)> = backends.iter().map(|(n, w)| (n.as_str(), *w)).collect();
            crate::lb::Maglev::new(&refs, table_size).map_err(|e| format!("{at}: {e}"))?;
            Ok(TaskSpec::Lb { backends, table_size })
        }
        "gbn" => {
            parameters_only(t, "gbn", at)?;
            let d = gbn::ReceiveConfig::default();
            Ok(TaskSpec::Gbn(gbn::ReceiveConfig {
                max_connections: int_of(t, "max_connections", at, 1..=1 << 20)?
                    .map_or(d.max_connections, |v| v as usize),
                max_connections_per_peer: int_of(t, "max_connections_per_peer", at, 1..=1 << 20)?
                    .map_or(d.max_connections_per_peer, |v| v as usize),
                idle: int_of(t, "idle_s", at, 1..=86_400)?.map_or(d.idle, |v| Duration::from_secs(v as u64)),
                cookies_from: int_of(t, "cookies_from", at, 0..=1 << 20)?.map(|v| v as usize),
                quiet: int_of(t, "quiet_s", at, 0..=86_400)?.map(|v| Duration::from_secs(v as u64)),
            }))
        }
        "kv" => {
            parameters_only(t, "kv", at)?;
            let d = crate::kv::KvConfig::default();
            Ok(TaskSpec::Kv(crate::kv::KvConfig {
                max_bytes: int_of(t, "max_bytes", at, 1..=1 << 34)?.map_or(d.max_bytes, |v| v as usize),
                max_entries: int_of(t, "max_entries", at, 1..=1 << 24)?.map_or(d.max_entries, |v| v as usize),
                max_pending: int_of(t, "max_pending", at, 1..=1 << 20)?.map_or(d.max_pending, |v| v as usize),
                max_pending_per_client: int_of(t, "max_pending_per_client", at, 1..=1 << 20)?
                    .map_or(d.max_pending_per_client, |v| v as usize),
            }))
        }
        "dummy" => {
            parameters_only(t, "dummy", at)?;
            let gbps = match t.get("gbps") {
                None => 0.0,
                Some(toml::Value::Float(g)) if *g >= 0.0 && g.is_finite() => *g,
                Some(toml::Value::Integer(g)) if *g >= 0 => *g as f64,
                Some(v) => return Err(format!("{at}.gbps = {v}: must be a number of Gbit/s, 0 or more")),
            };
            Ok(TaskSpec::Dummy {
                ns_per_packet: int_of(t, "ns_per_packet", at, 0..=1_000_000_000)?.unwrap_or(0) as u64,
                gbps,
                luts: int_of(t, "luts", at, 0..=10_000_000)?.unwrap_or(1000) as u64,
            })
        }
        "stage" => {
            parameters_only(t, "stage", at)?;
            let engine = str_of(t, "engine", at)?.ok_or_else(|| format!("{at}.engine: missing (flow)"))?;
            let config = str_of(t, "config", at)?.ok_or_else(|| format!("{at}.config: missing (the engine's file)"))?;
            if engine.is_empty() || config.is_empty() {
                return Err(format!("{at}: engine and config must not be empty"));
            }
            Ok(TaskSpec::Stage {
                engine: engine.to_string(),
                config: config.to_string(),
                in_port: int_of(t, "in_port", at, 0..=65_535)?.unwrap_or(0) as u16,
                luts: int_of(t, "luts", at, 0..=10_000_000)?.unwrap_or(10_000) as u64,
            })
        }
        other => Err(format!("{at}.kind: `{other}` is not a task kind ({})", KINDS.join(", "))),
    }
}

/// A task's area, LUTs: a dummy's own, else the profile's `nt.NAME.luts`.
pub fn area(t: &TaskSpec, profile: &tern_hw::Profile) -> Result<u64, String> {
    if let TaskSpec::Dummy { luts, .. } | TaskSpec::Stage { luts, .. } = t {
        return Ok(*luts);
    }
    let key = format!("nt.{}.luts", t.area_name());
    profile.area.get(&key).map(|v| *v as u64).ok_or_else(|| format!("profile {} has no {key}", profile.name))
}

/// A DAG of one fork and one join: a path of tasks, then two or more paths side by side, then
/// a path (either end path may be empty). Node indices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkShape {
    /// Before the fork.
    pub prefix: Vec<usize>,
    /// The branches, in the order their first tasks were written.
    pub branches: Vec<Vec<usize>>,
    /// After the join.
    pub suffix: Vec<usize>,
}

impl Tenant {
    /// The DAG as one fork and one join (what `parallel = true` needs), or why it is not one.
    /// Only the first branch may hold tasks that change bytes: its bytes are the ones kept.
    pub fn fork_shape(&self) -> Result<ForkShape, String> {
        let n = self.dag.nodes().len();
        let edges = self.dag.edges();
        let succ = |i: usize| -> Vec<usize> { edges.iter().filter(|e| e.0 == i).map(|e| e.1).collect() };
        let indeg = |i: usize| edges.iter().filter(|e| e.1 == i).count();
        let name = |i: usize| self.dag.nodes()[i].clone();
        let no = |why: String| format!("parallel = true: {why} (the DAG must be one fork and one join of task paths)");
        // A path from `i` while it has one successor that has one predecessor.
        let path = |mut i: usize| {
            let mut p = vec![i];
            loop {
                let s = succ(i);
                if s.len() == 1 && indeg(s[0]) == 1 {
                    i = s[0];
                    p.push(i);
                } else {
                    return p;
                }
            }
        };
        let entries = self.dag.entries();
        let (prefix, heads) = if entries.len() >= 2 {
            (Vec::new(), entries)
        } else {
            let prefix = path(entries.first().copied().ok_or_else(|| no("no entry".into()))?);
            let heads = succ(*prefix.last().unwrap_or(&0));
            if heads.len() < 2 {
                return Err(no("the DAG has no fork".into()));
            }
            (prefix, heads)
        };
        let mut branches = Vec::new();
        let mut join: Option<Option<usize>> = None;
        for &h in &heads {
            if indeg(h) > 1 {
                return Err(no(format!("`{}` is joined before the fork's branches", name(h))));
            }
            let b = path(h);
            let end = succ(*b.last().unwrap_or(&h));
            let j = match end.as_slice() {
                [] => None,
                [j] if indeg(*j) == heads.len() => Some(*j),
                _ => return Err(no(format!("the branch from `{}` does not end at the join", name(h)))),
            };
            if join.is_some_and(|x| x != j) {
                return Err(no(format!("the branch from `{}` ends elsewhere than the others", name(h))));
            }
            join = Some(j);
            branches.push(b);
        }
        let suffix = match join.flatten() {
            Some(j) => {
                let s = path(j);
                if !succ(*s.last().unwrap_or(&j)).is_empty() {
                    return Err(no(format!("after `{}` the DAG forks again", name(*s.last().unwrap_or(&j)))));
                }
                s
            }
            None => Vec::new(),
        };
        let covered = prefix.len() + branches.iter().map(Vec::len).sum::<usize>() + suffix.len();
        if covered != n {
            return Err(no("some tasks are outside the fork and the join".into()));
        }
        for (bi, b) in branches.iter().enumerate().skip(1) {
            if let Some(&i) = b.iter().find(|&&i| self.tasks[i].modifies()) {
                return Err(format!(
                    "parallel = true: branch {} has `{}` ({}), which changes packets; only the first branch may (its bytes are kept)",
                    bi + 1,
                    name(i),
                    self.tasks[i].kind()
                ));
            }
        }
        Ok(ForkShape { prefix, branches, suffix })
    }

    /// Reads and checks the tenant file at `path` (a regular file of at most 16 MiB).
    pub fn load(path: &Path) -> Result<Tenant, TenantError> {
        let file = path.display().to_string();
        let text = tern_wire::read_regular_text(path, tern_wire::MAX_CONFIG_BYTES)
            .map_err(|e| TenantError { file: file.clone(), message: e.problem })?;
        Tenant::parse(&text).map_err(|message| TenantError { file, message })
    }

    /// Checks a tenant file's text; the error names the item.
    pub fn parse(text: &str) -> Result<Tenant, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        if raw.tenant.is_empty() || raw.tenant.len() > 64 {
            return Err(format!("tenant: `{}` must be 1 to 64 bytes", raw.tenant));
        }
        let bandwidth_gbps = raw.bandwidth_gbps.unwrap_or(0.0);
        if !(bandwidth_gbps >= 0.0 && bandwidth_gbps.is_finite()) {
            return Err(format!("bandwidth_gbps = {bandwidth_gbps}: must be a number of Gbit/s, 0 or more"));
        }
        only(&raw.ingress, &INGRESS_KEYS, "ingress")?;
        let pattern = pattern(&raw.ingress, "ingress")?;
        let dag = dag::parse(&raw.dag).map_err(|e| format!("dag: {e}"))?;
        let order = dag.topological().map_err(|c| format!("dag: {c}"))?;
        let mut tasks = Vec::with_capacity(dag.nodes().len());
        for (i, name) in dag.nodes().iter().enumerate() {
            let Some(t) = raw.nt.get(name) else {
                return Err(format!("dag: `{name}` ({}) is not declared: add [nt.{name}]", dag.position(i)));
            };
            tasks.push(task(t, &format!("nt.{name}"))?);
        }
        if let Some(unused) = raw.nt.keys().find(|k| dag.index(k).is_none()) {
            return Err(format!("nt.{unused}: declared but not in the DAG"));
        }
        let t = Tenant {
            name: raw.tenant,
            bandwidth_gbps,
            ingress: Ingress { pattern },
            dag,
            tasks,
            order,
            parallel: raw.parallel,
        };
        if t.parallel {
            t.fork_shape()?;
        }
        Ok(t)
    }

    /// What the tenant asks of `model`'s board against what it has: the line rate, and the
    /// area of its tasks (the profile's `nt.NAME.luts`, one instance each) against the regions'.
    pub fn uses(&self, profile: &tern_hw::Profile, model: &tern_hw::chain::ChainModel) -> Result<Vec<Use>, String> {
        let mut luts = 0.0;
        for t in &self.tasks {
            luts += area(t, profile)? as f64;
        }
        Ok(vec![
            Use { what: "line rate (Gbit/s)", asked: self.bandwidth_gbps, available: model.line_gbps },
            Use { what: "area (LUTs)", asked: luts, available: (model.regions * model.region_luts) as f64 },
        ])
    }
}
