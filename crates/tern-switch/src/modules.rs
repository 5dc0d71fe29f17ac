//! CLIP's own modules as placement items (§III-C/D, Table II; docs/clip.md, "Projection"):
//! what a switch built as [`SwitchConfig`] says takes of a pipe besides its program's tables.
//!
//! - **Selecting** (heavy hitters): the count-min sketch — one register array a way of 32-bit
//!   counters, each driven by one stateful add — and the step that takes their minimum and
//!   compares it with the digest threshold.
//! - **Scalability** (flow-consistent group changes): the `cur` register, the two Bloom
//!   filters — each `filter_ways` register arrays of 1-bit cells, inserted into and looked up in
//!   by one stateful operation a way — and the table that maps `cur` and the lookup's answer to
//!   a group slot.
//! - **Forwarding**: the pinned-flow table (flow id → server), the ECMP buckets of both group
//!   slots (slot and bucket → server port), regular forwarding (an LPM route table in TCAM, a
//!   next-hop table of MAC and port), and the request/response header's push and pop.
//!
//! Each module is placed on its own (as if alone in the pipe), as Table II reports each module's
//! share on its own.

use tern_hw::switch::{SwitchModel, Use};

use crate::place::{self, Item, MatchKind, Placement, RegisterSpec, TableSpec};
use crate::switch::SwitchConfig;

/// The flow key the hash units read (the 5-tuple).
const FLOW_KEY: [&str; 5] = ["ipv4.src", "ipv4.dst", "ipv4.proto", "l4.src_port", "l4.dst_port"];

fn table(
    name: &str,
    keys: &[(&str, u64, MatchKind)],
    entries: u64,
    action_bits: u64,
    reads: &[&str],
    writes: &[&str],
    primitives: u64,
) -> Item {
    Item::Table(TableSpec {
        name: name.into(),
        keys: keys.iter().map(|&(f, b, k)| (f.to_string(), b, k)).collect(),
        entries,
        action_bits,
        reads: reads.iter().map(|s| s.to_string()).collect(),
        writes: writes.iter().map(|s| s.to_string()).collect(),
        primitives,
        registers: Vec::new(),
    })
}

fn register(name: String, entries: u64, bits: u64, reads: &[&str], writes: &[&str], owner: &str) -> Item {
    Item::Register(RegisterSpec {
        name,
        entries,
        bits,
        reads: reads.iter().map(|s| s.to_string()).collect(),
        writes: writes.iter().map(|s| s.to_string()).collect(),
        owner: Some(owner.into()),
    })
}

fn log2_ceil(n: u64) -> u64 {
    if n <= 1 { 0 } else { 64 - u64::from((n - 1).leading_zeros()) }
}

/// The selecting module's items.
pub fn selecting(cfg: &SwitchConfig) -> Vec<Item> {
    let ways = cfg.offload.sketch_ways as u64;
    let mut items = vec![table("cms_update", &[], 0, 0, &FLOW_KEY, &["meta.cms"], ways)];
    for w in 0..ways {
        items.push(register(
            format!("cms_{w}"),
            cfg.offload.sketch_width as u64,
            32,
            &FLOW_KEY,
            &["meta.cms"],
            "cms_update",
        ));
    }
    items.push(table("cms_digest", &[], 0, 0, &["meta.cms"], &["meta.digest"], 2));
    items
}

/// The scalability module's items.
pub fn scalability(cfg: &SwitchConfig) -> Vec<Item> {
    let ways = cfg.selector.filter_ways as u64;
    let mut items = vec![
        table("cur_read", &[], 0, 0, &[], &["meta.cur"], 1),
        register("cur".into(), 1, 8, &[], &["meta.cur"], "cur_read"),
        table(
            "bloom_update",
            &[],
            0,
            0,
            &["meta.cur", "ipv4.src", "ipv4.dst", "ipv4.proto", "l4.src_port", "l4.dst_port"],
            &["meta.seen"],
            2 * ways,
        ),
    ];
    for f in 0..2 {
        for w in 0..ways {
            items.push(register(
                format!("bloom{f}_{w}"),
                cfg.selector.filter_width as u64,
                1,
                &["meta.cur"],
                &["meta.seen"],
                "bloom_update",
            ));
        }
    }
    items.push(table(
        "group_slot",
        &[("meta.cur", 1, MatchKind::Exact), ("meta.seen", 1, MatchKind::Exact)],
        4,
        16,
        &[],
        &["meta.group"],
        1,
    ));
    items
}

/// The forwarding module's items.
pub fn forwarding(cfg: &SwitchConfig) -> Vec<Item> {
    let buckets = cfg.selector.buckets.max(1) as u64;
    let routes = cfg.routes.len().max(1) as u64;
    vec![
        table("pinned", &[("meta.flow", 64, MatchKind::Exact)], cfg.selector.pins as u64, 16, &[], &["meta.server"], 1),
        table(
            "ecmp",
            &[("meta.group", 16, MatchKind::Exact), ("meta.bucket", log2_ceil(buckets), MatchKind::Exact)],
            2 * buckets,
            16,
            &["meta.server"],
            &["meta.egress_port", "meta.flight"],
            2,
        ),
        table("routes", &[("ipv4.dst", 32, MatchKind::Lpm)], routes, 16, &[], &["meta.next_hop"], 1),
        table(
            "next_hop",
            &[("meta.next_hop", 16, MatchKind::Exact)],
            routes,
            57,
            &[],
            &["ethernet.dst", "ethernet.src", "meta.egress_port"],
            3,
        ),
        table("clip_header", &[], 0, 0, &["meta.flight"], &["clip.header"], 2),
    ]
}

/// A module's items placed alone in a pipe, and its total.
#[derive(Debug, Clone)]
pub struct ModuleUse {
    pub name: &'static str,
    pub placement: Placement,
    pub total: Use,
}

/// CLIP's three modules for `cfg`, each placed alone on `model`.
pub fn project(model: &SwitchModel, cfg: &SwitchConfig) -> Result<Vec<ModuleUse>, place::PlaceError> {
    [("selecting", selecting(cfg)), ("scalability", scalability(cfg)), ("forwarding", forwarding(cfg))]
        .into_iter()
        .map(|(name, items)| {
            let placement = place::place(model, &items)?;
            let total = placement.total();
            Ok(ModuleUse { name, placement, total })
        })
        .collect()
}

/// The paper's Table II, percent of a pipe (crossbar, SRAM, TCAM, VLIW, hash bits), by module.
pub const TABLE_II: [(&str, [f64; 5]); 3] = [
    ("selecting", [0.33, 3.75, 0.0, 0.52, 0.68]),
    ("scalability", [0.59, 0.83, 0.0, 2.08, 1.37]),
    ("forwarding", [1.88, 2.08, 0.35, 1.82, 4.06]),
];
