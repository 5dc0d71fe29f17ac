//! Hardware profiles and the resource ledger.
//!
//! A [`Profile`] is data: a clock, a datapath width, capacities of the structures that have a
//! hardware counterpart, and protocol parameters. Built-in profiles reproduce the papers'
//! prototypes (`shared/HARDWARE.md`); others load from TOML files in the same format
//! (`examples/profiles/`). The default, `cpu`, limits nothing.
//!
//! Structures claim capacity through a [`Ledger`]; configuration that does not fit is an error
//! naming the resource, the amount asked for and the amount available.
//!
//! ```
//! use tern_hw::{Ledger, Profile, resource};
//! let profile = Profile::builtin("qingniao-u250").unwrap();
//! let mut ledger = Ledger::new(&profile);
//! ledger.claim(resource::QNP_REQUEST_TABLE_ENTRIES, 1000, "server").unwrap();
//! let err = ledger.claim(resource::QNP_REQUEST_TABLE_ENTRIES, 100, "server 2").unwrap_err();
//! assert!(err.to_string().contains("asked for 100, 24 available"));
//! ```
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Names of the resources profiles bound.
pub mod resource {
    /// Requests the receive side tracks at once (QNP request table).
    pub const QNP_REQUEST_TABLE_ENTRIES: &str = "qnp.request_table_entries";
    /// Most packets one request may span.
    pub const QNP_PKTS_PER_REQUEST: &str = "qnp.pkts_per_request";
    /// Parallel receive-side dispatchers.
    pub const RSD_PARALLEL: &str = "rsd.parallel";
    /// Entries of the dispatch-result stash.
    pub const RSD_STASH_ENTRIES: &str = "rsd.stash_entries";
    /// Bytes the ByteStream holds.
    pub const RSD_BYTESTREAM_BYTES: &str = "rsd.bytestream_bytes";
    /// Matcher RAM (skip) entries.
    pub const MATCHER_RAM_ENTRIES: &str = "matcher.ram_entries";
    /// Matcher CAM (check) entries.
    pub const MATCHER_CAM_ENTRIES: &str = "matcher.cam_entries";
    /// Bytes one check compares.
    pub const MATCHER_CHECK_BYTES: &str = "matcher.check_bytes";
    /// Matcher states per (application, request type), state 0 included (the CAM key's state).
    pub const MATCHER_STATES: &str = "matcher.states";
    /// IPv4 LPM rules (TCAM entries, 32 bits wide) of a flow-cache OFU.
    pub const FLOW_LPM4_ENTRIES: &str = "flow.tcam_ipv4_entries";
    /// IPv6 LPM rules (TCAM entries, 128 bits wide) of a flow-cache OFU.
    pub const FLOW_LPM6_ENTRIES: &str = "flow.tcam_ipv6_entries";
    /// 5-tuple exact-match rules (BCAM entries) of a flow-cache OFU.
    pub const FLOW_EM_ENTRIES: &str = "flow.bcam_entries";
    /// Bits of one action set in the action RAM.
    pub const FLOW_ACTION_SET_BITS: &str = "flow.action_set_bits";
    /// Instructions the configuration FIFO holds before writes are refused.
    pub const FLOW_INSTRUCTION_FIFO: &str = "flow.instruction_fifo_entries";
    /// Offloaded function units the device holds at once.
    pub const FLOW_OFUS: &str = "flow.ofus";
    /// Message classes the RPC schema table holds.
    pub const RPC_SCHEMA_CLASSES: &str = "rpc.schema_classes";
    /// Field slots per class in the RPC schema table.
    pub const RPC_FIELD_SLOTS: &str = "rpc.field_slots";
    /// Entries of the deserializer's nesting stack (the deepest message nesting it walks).
    pub const RPC_SCHEMA_STACK: &str = "rpc.schema_stack";
    /// Deserializer lanes.
    pub const RPC_DESERIALIZER_LANES: &str = "rpc.deserializer_lanes";
    /// Bytes of each lane's temp buffer (one one-shot DMA write when full or at message end).
    pub const RPC_TEMP_BUFFER_BYTES: &str = "rpc.temp_buffer_bytes";
    /// Bytes of a host or device memory chunk.
    pub const RPC_CHUNK_BYTES: &str = "rpc.chunk_bytes";
    /// Entries of the NIC's TLB over host memory (times the chunk size: the host region).
    pub const RPC_TLB_ENTRIES: &str = "rpc.tlb_entries";
    /// Values longer than this are referenced by pre-serialized records, not copied.
    pub const RPC_PRESER_REF_THRESHOLD_BYTES: &str = "rpc.preser_ref_threshold_bytes";
    /// Compute units.
    pub const RPC_COMPUTE_UNITS: &str = "rpc.compute_units";
    /// Bytes of the NIC's device memory.
    pub const RPC_DEVICE_MEMORY_BYTES: &str = "rpc.device_memory_bytes";
    /// Credits a physical chain starts with (SuperNIC's scheduler).
    pub const CHAIN_CREDITS: &str = "chain.credits";
    /// Network-task regions on the board.
    pub const CHAIN_REGIONS: &str = "chain.regions";
    /// LUTs of one region.
    pub const CHAIN_REGION_LUTS: &str = "chain.region_luts";
    /// On-board memory, bytes.
    pub const CHAIN_BOARD_MEMORY_BYTES: &str = "chain.board_memory_bytes";
}

/// Names of the per-operation cycle costs profiles give (`[cycles]`).
pub mod cost {
    /// Cycles of one scheduling decision (SuperNIC's central scheduler).
    pub const CHAIN_SCHEDULE: &str = "chain.schedule";
    /// Cycles the RSD spends on a request's first packet before any skip-and-check.
    pub const RSD_FIRST_PACKET: &str = "rsd.first_packet";
    /// Cycles per skip-and-check the Matcher runs (a RAM read, a ByteStream read, a CAM lookup).
    pub const RSD_SKIP_AND_CHECK: &str = "rsd.skip_and_check";
    /// Cycles for a later packet whose decision is in the stash.
    pub const RSD_STASH_HIT: &str = "rsd.stash_hit";
    /// Cycles an L3/4 RSS (Toeplitz) dispatcher needs, for comparison.
    pub const RSS_DISPATCH: &str = "rss.dispatch";
    /// Cycles from a key entering a CAM (TCAM or BCAM) to its match address.
    pub const CAM_SEARCH: &str = "cam.search";
    /// Cycles to write one TCAM entry (8-bit RAM cells: 2^8 + 2).
    pub const TCAM_WRITE: &str = "tcam.write";
    /// Cycles to write one BCAM entry.
    pub const BCAM_WRITE: &str = "bcam.write";
    /// Cycles an action unit takes per action.
    pub const ACTION: &str = "flow.action";
}

/// Names of the rates profiles give (`[rates]`).
pub mod rate {
    /// Packets per second the host DMA path moves (the paper's DMA ceiling).
    pub const DMA_PACKETS_PER_S: &str = "dma.packets_per_s";
    /// Line rate in Gbit/s.
    pub const LINE_GBPS: &str = "line.gbps";
    /// Searches per second one CAM performs (one per cycle at the OFU clock).
    pub const CAM_SEARCHES_PER_S: &str = "cam.searches_per_s";
    /// Bytes per second the host writes into MMIO registers (instructions).
    pub const MMIO_BYTES_PER_S: &str = "mmio.bytes_per_s";
    /// Sustained LPM populate instructions per second (AccelSDP Table 5).
    pub const LPM_POPULATE_PER_S: &str = "lpm.populate_per_s";
    /// Sustained LPM delete instructions per second.
    pub const LPM_DELETE_PER_S: &str = "lpm.delete_per_s";
    /// Sustained LPM update instructions per second.
    pub const LPM_UPDATE_PER_S: &str = "lpm.update_per_s";
    /// Sustained EM populate instructions per second.
    pub const EM_POPULATE_PER_S: &str = "em.populate_per_s";
    /// Sustained EM delete instructions per second.
    pub const EM_DELETE_PER_S: &str = "em.delete_per_s";
    /// Sustained EM update instructions per second.
    pub const EM_UPDATE_PER_S: &str = "em.update_per_s";
    /// PCIe bandwidth between host and NIC, bytes per second.
    pub const PCIE_BYTES_PER_S: &str = "pcie.bytes_per_s";
    /// Bytes per second the NIC's serializer encodes.
    pub const SERIALIZER_BYTES_PER_S: &str = "serializer.bytes_per_s";
    /// Bytes per second one compute unit's kernel takes in.
    pub const KERNEL_BYTES_PER_S: &str = "kernel.bytes_per_s";
    /// The most one instance of network task `KIND` carries, Gbit/s: `nt.KIND.gbps`.
    pub const NT_GBPS_PREFIX: &str = "nt.";
}

/// Names of the fixed latencies profiles give (`[latency_ns]`).
pub mod latency {
    /// Ingress latency from MAC to the QNP receive module, excluding the RSD's cycles.
    pub const INGRESS_FIXED: &str = "ingress.fixed";
    /// A PCIe round trip (a read of host memory from the NIC, or of NIC memory from the host).
    pub const PCIE_ROUND_TRIP: &str = "pcie.round_trip";
    /// A host DRAM access.
    pub const HOST_DRAM: &str = "host.dram";
    /// Link time of one DMA write across PCIe besides its bytes (descriptor and transaction
    /// overhead).
    pub const PCIE_WRITE: &str = "pcie.write";
    /// SuperNIC's core, ingress to egress without PHY and MAC.
    pub const CHAIN_CORE: &str = "chain.core";
    /// SuperNIC's whole board path, port to port.
    pub const CHAIN_BOARD: &str = "chain.board";
    /// Partial reconfiguration of a region.
    pub const CHAIN_PR: &str = "chain.pr";
    /// The fairness epoch.
    pub const CHAIN_EPOCH: &str = "chain.epoch";
}

/// Every key the tables of a profile may hold, each with what it means. `docs/profiles.md` lists
/// the same (a test compares them), and a profile naming another key is refused, the key named:
/// a misspelt capacity would otherwise leave its resource unbounded without a word.
pub mod keys {
    use super::{cost, latency, rate, resource};

    /// `[capacity]`: how much of a resource there is (absent: unbounded).
    pub const CAPACITY: &[(&str, &str)] = &[
        (resource::QNP_REQUEST_TABLE_ENTRIES, "requests the receive side tracks at once (QNP's request table)"),
        (resource::QNP_PKTS_PER_REQUEST, "the most packets one request may span"),
        (resource::RSD_PARALLEL, "receive-side dispatchers working in parallel"),
        (resource::RSD_STASH_ENTRIES, "entries of the dispatch-result stash"),
        (resource::RSD_BYTESTREAM_BYTES, "bytes of a first packet the ByteStream holds for the Matcher"),
        (resource::MATCHER_RAM_ENTRIES, "Matcher RAM (skip) entries"),
        (resource::MATCHER_CAM_ENTRIES, "Matcher CAM (check) entries"),
        (resource::MATCHER_CHECK_BYTES, "bytes one check compares"),
        (resource::MATCHER_STATES, "Matcher states per application and request type, state 0 included"),
        (resource::FLOW_LPM4_ENTRIES, "IPv4 LPM rules of a flow-cache OFU (TCAM entries, 32 bits wide)"),
        (resource::FLOW_LPM6_ENTRIES, "IPv6 LPM rules of a flow-cache OFU (TCAM entries, 128 bits wide)"),
        (resource::FLOW_EM_ENTRIES, "5-tuple exact-match rules of a flow-cache OFU (BCAM entries)"),
        (resource::FLOW_ACTION_SET_BITS, "bits of one action set in the action RAM"),
        (resource::FLOW_INSTRUCTION_FIFO, "instructions the configuration FIFO holds before writes are refused"),
        (resource::FLOW_OFUS, "offloaded function units the device holds at once"),
        (resource::RPC_SCHEMA_CLASSES, "message classes the RPC schema table holds"),
        (resource::RPC_FIELD_SLOTS, "field slots per class in the schema table"),
        (resource::RPC_SCHEMA_STACK, "entries of the deserializer's nesting stack"),
        (resource::RPC_DESERIALIZER_LANES, "deserializer lanes"),
        (resource::RPC_TEMP_BUFFER_BYTES, "bytes of a lane's temp buffer (one DMA write when full)"),
        (resource::RPC_CHUNK_BYTES, "bytes of a host or device memory chunk"),
        (resource::RPC_TLB_ENTRIES, "entries of the NIC's TLB over host memory"),
        (
            resource::RPC_PRESER_REF_THRESHOLD_BYTES,
            "values longer than this are referenced by pre-serialized records, not copied",
        ),
        (resource::RPC_COMPUTE_UNITS, "compute units"),
        (resource::RPC_DEVICE_MEMORY_BYTES, "bytes of the NIC's device memory"),
        (resource::CHAIN_CREDITS, "credits a physical chain starts with"),
        (resource::CHAIN_REGIONS, "network-task regions on the board"),
        (resource::CHAIN_REGION_LUTS, "LUTs of one region"),
        (resource::CHAIN_BOARD_MEMORY_BYTES, "on-board memory, bytes"),
        ("switch.stages", "match-action stages a pipe"),
        ("switch.pipes", "pipes of the switch (the resources below are a pipe's)"),
        ("switch.sram_blocks", "SRAM blocks a stage"),
        ("switch.sram_rows", "rows of an SRAM block"),
        ("switch.sram_bits", "bits of an SRAM row"),
        ("switch.tcam_blocks", "TCAM blocks a stage"),
        ("switch.tcam_rows", "rows of a TCAM block"),
        ("switch.tcam_bits", "bits of a TCAM row"),
        ("switch.crossbar_bytes", "bytes of match key the exact-match input crossbar takes a stage"),
        ("switch.hash_bits", "hash bits a stage"),
        ("switch.vliw_slots", "VLIW instruction slots a stage"),
        ("switch.ports", "front-panel ports"),
        ("switch.server_cores", "cores of each remote-handler server"),
    ];

    /// `[cycles]`: an operation's cost in clock cycles (absent: not modelled); also
    /// `nt.KIND.cycles`, a network task's cycles a packet.
    pub const CYCLES: &[(&str, &str)] = &[
        (cost::CHAIN_SCHEDULE, "one scheduling decision of SuperNIC's central scheduler"),
        (cost::RSD_FIRST_PACKET, "the RSD on a request's first packet before any skip-and-check"),
        (cost::RSD_SKIP_AND_CHECK, "one skip-and-check of the Matcher (a RAM read, a ByteStream read, a CAM lookup)"),
        (cost::RSD_STASH_HIT, "a later packet whose decision is in the stash"),
        (cost::RSS_DISPATCH, "an L3/4 RSS (Toeplitz) dispatch, for comparison"),
        (cost::CAM_SEARCH, "a key entering a CAM (TCAM or BCAM) to its match address"),
        (cost::TCAM_WRITE, "writing one TCAM entry"),
        (cost::BCAM_WRITE, "writing one BCAM entry"),
        (cost::ACTION, "an action unit's action"),
    ];

    /// `[rates]`: rates that bound throughput (absent: unbounded); also `nt.KIND.gbps`, the most
    /// one instance of network task KIND carries, Gbit/s.
    pub const RATES: &[(&str, &str)] = &[
        (rate::DMA_PACKETS_PER_S, "packets a second the host DMA path moves"),
        (rate::LINE_GBPS, "the line rate, Gbit/s"),
        (rate::CAM_SEARCHES_PER_S, "searches a second one CAM performs"),
        (rate::MMIO_BYTES_PER_S, "bytes a second the host writes into MMIO registers (instructions)"),
        (rate::LPM_POPULATE_PER_S, "sustained LPM populate instructions a second"),
        (rate::LPM_DELETE_PER_S, "sustained LPM delete instructions a second"),
        (rate::LPM_UPDATE_PER_S, "sustained LPM update instructions a second"),
        (rate::EM_POPULATE_PER_S, "sustained exact-match populate instructions a second"),
        (rate::EM_DELETE_PER_S, "sustained exact-match delete instructions a second"),
        (rate::EM_UPDATE_PER_S, "sustained exact-match update instructions a second"),
        (rate::PCIE_BYTES_PER_S, "PCIe bandwidth between host and NIC, bytes a second"),
        (rate::SERIALIZER_BYTES_PER_S, "bytes a second the NIC's serializer encodes"),
        (rate::KERNEL_BYTES_PER_S, "bytes a second one compute unit's kernel takes in"),
        ("switch.port.gbps", "a switch port's rate, Gbit/s"),
        ("switch.server_link.gbps", "a server's link to the switch, Gbit/s"),
        ("switch.cpu_channel.gbps", "the switch ASIC's channel to its own CPU, Gbit/s"),
    ];

    /// `[latency_ns]`: fixed latencies, ns (absent: not modelled).
    pub const LATENCY_NS: &[(&str, &str)] = &[
        (latency::INGRESS_FIXED, "MAC to the QNP receive module, the RSD's cycles not counted"),
        (latency::PCIE_ROUND_TRIP, "a PCIe round trip (a read across the link)"),
        (latency::HOST_DRAM, "a host DRAM access"),
        (latency::PCIE_WRITE, "one DMA write's link time besides its bytes"),
        (latency::CHAIN_CORE, "SuperNIC's core, ingress to egress without PHY and MAC"),
        (latency::CHAIN_BOARD, "SuperNIC's whole board path, port to port"),
        (latency::CHAIN_PR, "partial reconfiguration of a region"),
        (latency::CHAIN_EPOCH, "the fairness epoch"),
        ("switch.remote_path_p90", "90% of packets cross the switch and a server within this"),
        ("switch.remote_extra_p90", "of that, the remote processing's share"),
    ];

    /// `[area]`: `BLOCK.RESOURCE`, what a block uses (`device`: the device's totals), with
    /// RESOURCE one of these.
    pub const AREA_RESOURCES: &[&str] = &["luts", "registers", "bram36", "bram_kb"];

    /// The network tasks a profile names as `nt.KIND` (its `cycles`, `gbps` and area): SuperNIC's
    /// Figure 6 names, and Tern's own tasks. A chain's task kinds map onto these
    /// (`tern_chain::tenant::profile_name`; a test there checks each is listed).
    pub const NETWORK_TASKS: &[(&str, &str)] = &[
        ("fw", "firewall"),
        ("nat", "NAT"),
        ("aes", "AES-GCM"),
        ("lb", "L4 load balancer"),
        ("gbn", "go-back-N transport"),
        ("kv_cache", "KV cache"),
        ("kv_rep", "KV replication (Figure 6; Tern runs no such task)"),
        ("dfadd", "floating-point adder (Figure 6; Tern runs no such task)"),
        ("dummy", "a dummy task of configured cost"),
        ("stage", "another engine run as a task"),
    ];

    /// Whether `key` is `nt.KIND.LAST` with KIND one of [`NETWORK_TASKS`].
    fn nt_pattern(key: &str, last: &str) -> bool {
        key.strip_prefix("nt.")
            .and_then(|k| k.strip_suffix(last))
            .and_then(|k| k.strip_suffix('.'))
            .is_some_and(|kind| NETWORK_TASKS.iter().any(|(n, _)| *n == kind))
    }

    /// The listed keys of `table` (none for `area`, whose keys follow a pattern).
    fn listed(table: &str) -> &'static [(&'static str, &'static str)] {
        match table {
            "capacity" => CAPACITY,
            "cycles" => CYCLES,
            "rates" => RATES,
            "latency_ns" => LATENCY_NS,
            _ => &[],
        }
    }

    /// Whether `table` (`capacity`, `cycles`, `rates`, `latency_ns`, `area`) may hold `key`.
    pub fn known(table: &str, key: &str) -> bool {
        if listed(table).iter().any(|(k, _)| *k == key) {
            return true;
        }
        match table {
            "cycles" => nt_pattern(key, "cycles"),
            "rates" => nt_pattern(key, "gbps"),
            "area" => key.rsplit_once('.').is_some_and(|(block, r)| {
                let word = !block.is_empty()
                    && block.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
                // A task's block is `nt.KIND`, KIND a listed task: a misspelt one would
                // otherwise leave the task without an area.
                let task = block.strip_prefix("nt.").is_none_or(|kind| NETWORK_TASKS.iter().any(|(n, _)| *n == kind));
                word && task && AREA_RESOURCES.contains(&r)
            }),
            _ => false,
        }
    }

    /// What to suggest for `key`, which `table` does not hold: the listed key nearest it (at
    /// most three edits away), or for `nt.KIND.…` the task kinds a profile may name.
    pub fn hint(table: &str, key: &str) -> Option<String> {
        if let Some(k) = listed(table).iter().map(|(k, _)| (edits(k, key), *k)).filter(|(d, _)| *d <= 3).min() {
            return Some(format!("did you mean `{}`?", k.1));
        }
        key.starts_with("nt.").then(|| {
            let kinds: Vec<&str> = NETWORK_TASKS.iter().map(|(n, _)| *n).collect();
            format!("a task's KIND in `nt.KIND.…` is one of {}", kinds.join(", "))
        })
    }

    /// Levenshtein distance.
    fn edits(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    }
}

pub mod chain;
pub mod flow;
pub mod rpc;
pub mod rsd;
pub mod switch;

/// Names of the built-in profiles.
pub const BUILTIN: &[&str] =
    &["cpu", "qingniao-u250", "accelsdp-n3000", "rpcnic-u280", "supernic-htg9200", "clip-tofino"];

/// The longest latency a profile may give, ns: an hour.
pub const MAX_LATENCY_NS: f64 = 3.6e12;

const CPU_TOML: &str = include_str!("../../../examples/profiles/cpu.toml");
const QINGNIAO_U250_TOML: &str = include_str!("../../../examples/profiles/qingniao-u250.toml");
const ACCELSDP_N3000_TOML: &str = include_str!("../../../examples/profiles/accelsdp-n3000.toml");
const RPCNIC_U280_TOML: &str = include_str!("../../../examples/profiles/rpcnic-u280.toml");
const SUPERNIC_HTG9200_TOML: &str = include_str!("../../../examples/profiles/supernic-htg9200.toml");
const CLIP_TOFINO_TOML: &str = include_str!("../../../examples/profiles/clip-tofino.toml");

/// QNP parameters of a profile. A profile that does not model QNP gets the paper's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QnpParams {
    /// A partially received request is dropped after this long without a new packet.
    pub request_timeout_ms: u64,
    /// Width of the hardware request timer, if the profile models one.
    #[serde(default)]
    pub timer_bits: Option<u32>,
    /// Eth + IP + UDP + QNP header bytes, padded to this alignment.
    pub header_align_bytes: u32,
    /// Largest IP packet.
    pub mtu: u32,
}

impl Default for QnpParams {
    /// QingNiao's defaults: 1 s request expiry, 64-byte header alignment, 1500-byte MTU.
    fn default() -> Self {
        QnpParams { request_timeout_ms: 1000, timer_bits: None, header_align_bytes: 64, mtu: 1500 }
    }
}

/// A hardware profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Name (`cpu`, `qingniao-u250`, ...).
    pub name: String,
    /// One line saying what it models.
    pub description: String,
    /// Clock in MHz, where the profile models one.
    #[serde(default)]
    pub clock_mhz: Option<f64>,
    /// Datapath width in bits, where the profile models one.
    #[serde(default)]
    pub datapath_bits: Option<u32>,
    /// Capacity per resource; a resource not listed is unbounded.
    #[serde(default)]
    pub capacity: BTreeMap<String, u64>,
    /// Cycle cost per operation (see [`cost`]); an operation not listed is not modelled.
    #[serde(default)]
    pub cycles: BTreeMap<String, u64>,
    /// Rates that bound throughput (see [`rate`]).
    #[serde(default)]
    pub rates: BTreeMap<String, f64>,
    /// Fixed latencies in nanoseconds (see [`latency`]).
    #[serde(default)]
    pub latency_ns: BTreeMap<String, f64>,
    /// QNP parameters (the paper's defaults where the profile gives none).
    #[serde(default)]
    pub qnp: QnpParams,
    /// FPGA area, where the paper gives it: the device's totals (`device.luts`,
    /// `device.registers`, `device.bram36`) and what its blocks use (`BLOCK.luts`, ...).
    #[serde(default)]
    pub area: BTreeMap<String, f64>,
}

/// Errors loading a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// No built-in profile has this name.
    #[error("unknown profile `{name}` (built in: {})", BUILTIN.join(", "))]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The file could not be read, or is not a regular file of at most 16 MiB.
    #[error("profile {path}: {message}")]
    Io {
        /// Path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The TOML is not a valid profile.
    #[error("invalid profile {origin}: {message}")]
    Invalid {
        /// File or built-in name.
        origin: String,
        /// What is wrong, with its location.
        message: String,
    },
}

impl Profile {
    /// A built-in profile by name.
    pub fn builtin(name: &str) -> Result<Profile, ProfileError> {
        let text = match name {
            "cpu" => CPU_TOML,
            "qingniao-u250" => QINGNIAO_U250_TOML,
            "accelsdp-n3000" => ACCELSDP_N3000_TOML,
            "rpcnic-u280" => RPCNIC_U280_TOML,
            "supernic-htg9200" => SUPERNIC_HTG9200_TOML,
            "clip-tofino" => CLIP_TOFINO_TOML,
            _ => return Err(ProfileError::Unknown { name: name.to_string() }),
        };
        Profile::from_toml(text, name)
    }

    /// Parses a profile from TOML; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Profile, ProfileError> {
        let profile: Profile = toml::from_str(text)
            .map_err(|e| ProfileError::Invalid { origin: origin.to_string(), message: e.to_string() })?;
        profile.validate(origin)?;
        Ok(profile)
    }

    /// Loads a profile from a TOML file (a regular file of at most 16 MiB: a device or a pipe,
    /// which reading would never finish, is refused unread).
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let text = tern_wire::read_regular_text(path, tern_wire::MAX_CONFIG_BYTES)
            .map_err(|e| ProfileError::Io { path: path.display().to_string(), message: e.problem })?;
        Profile::from_toml(&text, &path.display().to_string())
    }

    /// A built-in name, or else a path to a TOML file.
    pub fn resolve(name_or_path: &str) -> Result<Profile, ProfileError> {
        if BUILTIN.contains(&name_or_path) {
            return Profile::builtin(name_or_path);
        }
        let path = Path::new(name_or_path);
        // Something that looks like a path is a file the user meant: say it is missing rather
        // than that no built-in profile has that name.
        let looks_like_a_path = name_or_path.contains('/') || name_or_path.ends_with(".toml");
        if path.exists() || looks_like_a_path {
            Profile::load(path)
        } else {
            Err(ProfileError::Unknown { name: name_or_path.to_string() })
        }
    }

    fn validate(&self, origin: &str) -> Result<(), ProfileError> {
        let invalid = |message: String| ProfileError::Invalid { origin: origin.to_string(), message };
        if self.qnp.header_align_bytes == 0 {
            return Err(invalid("qnp.header_align_bytes must be positive".into()));
        }
        if !(576..=65535).contains(&self.qnp.mtu) {
            return Err(invalid(format!("qnp.mtu {} is outside 576..=65535", self.qnp.mtu)));
        }
        if self.qnp.request_timeout_ms == 0 {
            return Err(invalid("qnp.request_timeout_ms must be positive".into()));
        }
        if let Some(mhz) = self.clock_mhz
            && !(mhz > 0.0 && mhz.is_finite())
        {
            return Err(invalid(format!("clock_mhz {mhz} must be a positive number")));
        }
        for (name, v) in self.rates.iter().chain(self.latency_ns.iter()).chain(self.area.iter()) {
            if !(*v >= 0.0 && v.is_finite()) {
                return Err(invalid(format!("{name} = {v} must be a non-negative number")));
            }
        }
        // A latency becomes a wait in real time (a region's PR, the fairness epoch): an hour at
        // most, where a longer one would be no wait a server could keep.
        if let Some((name, v)) = self.latency_ns.iter().find(|(_, v)| **v > MAX_LATENCY_NS) {
            return Err(invalid(format!("{name} = {v} ns is longer than an hour ({MAX_LATENCY_NS} ns)")));
        }
        if let Some(bits) = self.qnp.timer_bits
            && !(1..=64).contains(&bits)
        {
            return Err(invalid(format!("qnp.timer_bits {bits} is outside 1..=64")));
        }
        for (table, names) in self.table_keys() {
            if let Some(k) = names.into_iter().find(|k| !keys::known(table, k)) {
                let hint = keys::hint(table, k).map_or(String::new(), |h| format!(" ({h})"));
                return Err(invalid(format!(
                    "[{table}] `{k}` is not a key Tern knows{hint}; docs/profiles.md lists every key"
                )));
            }
        }
        Ok(())
    }

    /// The keys of each of its tables (`capacity`, `cycles`, `rates`, `latency_ns`, `area`),
    /// by table name, as [`keys::known`] takes them.
    pub fn table_keys(&self) -> [(&'static str, Vec<&String>); 5] {
        [
            ("capacity", self.capacity.keys().collect()),
            ("cycles", self.cycles.keys().collect()),
            ("rates", self.rates.keys().collect()),
            ("latency_ns", self.latency_ns.keys().collect()),
            ("area", self.area.keys().collect()),
        ]
    }

    /// Capacity of a resource; `None` is unbounded.
    pub fn capacity(&self, resource: &str) -> Option<u64> {
        self.capacity.get(resource).copied()
    }

    /// Nanoseconds per clock cycle, where the profile has a clock.
    pub fn ns_per_cycle(&self) -> Option<f64> {
        self.clock_mhz.map(|mhz| 1000.0 / mhz)
    }

    /// Cycle cost of an operation, where the profile models it.
    pub fn cycles(&self, op: &str) -> Option<u64> {
        self.cycles.get(op).copied()
    }

    /// A rate, where the profile models it.
    pub fn rate(&self, name: &str) -> Option<f64> {
        self.rates.get(name).copied()
    }

    /// The share of the device's `resource` (`luts`, `registers`, `bram36`) that `block` uses,
    /// in per cent, where the profile gives both.
    pub fn area_percent(&self, block: &str, resource: &str) -> Option<f64> {
        let used = self.area.get(&format!("{block}.{resource}"))?;
        let total = self.area.get(&format!("device.{resource}")).filter(|&&t| t > 0.0)?;
        Some(100.0 * used / total)
    }

    /// The profile as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}

/// A configuration asked for more of a resource than the profile has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "profile {profile} cannot fit {owner}: {resource} asked for {asked}, {available} available \
     ({capacity} in the profile, {in_use} in use)"
)]
pub struct CapacityError {
    /// Profile name.
    pub profile: String,
    /// Resource name.
    pub resource: String,
    /// What asked for it.
    pub owner: String,
    /// Amount asked for.
    pub asked: u64,
    /// Amount still free.
    pub available: u64,
    /// The profile's capacity.
    pub capacity: u64,
    /// Already claimed.
    pub in_use: u64,
}

/// One resource's use, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Resource name.
    pub resource: String,
    /// Claimed in total.
    pub used: u64,
    /// Capacity, `None` if unbounded.
    pub capacity: Option<u64>,
    /// Claims by owner.
    pub claims: Vec<(String, u64)>,
}

/// Accounts the capacity structures claim from a profile.
#[derive(Debug, Clone)]
pub struct Ledger {
    profile: String,
    capacity: BTreeMap<String, u64>,
    claims: BTreeMap<String, Vec<(String, u64)>>,
}

impl Ledger {
    /// An empty ledger over `profile`'s capacities.
    pub fn new(profile: &Profile) -> Ledger {
        Ledger { profile: profile.name.clone(), capacity: profile.capacity.clone(), claims: BTreeMap::new() }
    }

    fn in_use(&self, resource: &str) -> u64 {
        self.claims.get(resource).map_or(0, |c| c.iter().fold(0u64, |a, (_, n)| a.saturating_add(*n)))
    }

    fn error(&self, resource: &str, owner: &str, asked: u64, capacity: u64, in_use: u64) -> CapacityError {
        CapacityError {
            profile: self.profile.clone(),
            resource: resource.to_string(),
            owner: owner.to_string(),
            asked,
            available: capacity.saturating_sub(in_use),
            capacity,
            in_use,
        }
    }

    /// Claims `amount` of a shared resource (entries of a table) for `owner`.
    pub fn claim(&mut self, resource: &str, amount: u64, owner: &str) -> Result<(), CapacityError> {
        let in_use = self.in_use(resource);
        if let Some(&capacity) = self.capacity.get(resource)
            && in_use.saturating_add(amount) > capacity
        {
            return Err(self.error(resource, owner, amount, capacity, in_use));
        }
        self.claims.entry(resource.to_string()).or_default().push((owner.to_string(), amount));
        Ok(())
    }

    /// Checks a per-item limit (packets per request, bytes per check): `value` must not exceed
    /// the capacity. Nothing is claimed.
    pub fn check_limit(&self, resource: &str, value: u64, owner: &str) -> Result<(), CapacityError> {
        match self.capacity.get(resource) {
            Some(&capacity) if value > capacity => Err(self.error(resource, owner, value, capacity, 0)),
            _ => Ok(()),
        }
    }

    /// Returns every claim made by `owner`.
    pub fn release(&mut self, owner: &str) {
        for claims in self.claims.values_mut() {
            claims.retain(|(o, _)| o != owner);
        }
    }

    /// Use per resource: every resource the profile bounds or someone claimed.
    pub fn usage(&self) -> Vec<Usage> {
        let mut names: Vec<&String> = self.capacity.keys().chain(self.claims.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .map(|r| Usage {
                resource: r.clone(),
                used: self.in_use(r),
                capacity: self.capacity.get(r).copied(),
                claims: self.claims.get(r).cloned().unwrap_or_default(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for name in BUILTIN {
            let p = Profile::builtin(name).unwrap();
            assert_eq!(&p.name, name);
            // Round trip through TOML.
            assert_eq!(Profile::from_toml(&p.to_toml(), "rt").unwrap(), p);
        }
    }

    #[test]
    fn qingniao_u250_matches_the_paper() {
        // QingNiao §4.2.2 and shared/HARDWARE.md.
        let p = Profile::builtin("qingniao-u250").unwrap();
        assert_eq!(p.clock_mhz, Some(250.0));
        assert_eq!(p.ns_per_cycle(), Some(4.0));
        assert_eq!(p.datapath_bits, Some(512));
        assert_eq!(p.capacity(resource::QNP_REQUEST_TABLE_ENTRIES), Some(1024));
        assert_eq!(p.capacity(resource::QNP_PKTS_PER_REQUEST), Some(4));
        assert_eq!(p.capacity(resource::RSD_STASH_ENTRIES), Some(256));
        assert_eq!(p.capacity(resource::MATCHER_RAM_ENTRIES), Some(512));
        assert_eq!(p.capacity(resource::MATCHER_CAM_ENTRIES), Some(512));
        assert_eq!(p.qnp.request_timeout_ms, 1000);
        assert_eq!(p.qnp.timer_bits, Some(24));
        assert_eq!(p.qnp.header_align_bytes, 64);
        assert_eq!(p.qnp.header_align_bytes as usize, tern_wire_header_total());
    }

    #[test]
    fn rpcnic_u280_matches_the_paper() {
        // RpcNIC §III-B, §III-C, footnotes 1-2, and shared/HARDWARE.md.
        let p = Profile::builtin("rpcnic-u280").unwrap();
        assert_eq!(p.ns_per_cycle(), Some(4.0));
        assert_eq!(p.capacity(resource::RPC_SCHEMA_CLASSES), Some(1024));
        assert_eq!(p.capacity(resource::RPC_FIELD_SLOTS), Some(32));
        assert_eq!(p.capacity(resource::RPC_SCHEMA_STACK), Some(8));
        assert_eq!(p.capacity(resource::RPC_DESERIALIZER_LANES), Some(4));
        assert_eq!(p.capacity(resource::RPC_TEMP_BUFFER_BYTES), Some(4096));
        assert_eq!(p.capacity(resource::RPC_PRESER_REF_THRESHOLD_BYTES), Some(1024));
        // The TLB covers a 64 MiB host region.
        let region = p.capacity(resource::RPC_TLB_ENTRIES).unwrap() * p.capacity(resource::RPC_CHUNK_BYTES).unwrap();
        assert_eq!(region, 64 << 20);
        assert_eq!(p.rate(rate::PCIE_BYTES_PER_S), Some(12.8e9));
        // 512 bits a cycle at 250 MHz.
        assert_eq!(p.rate(rate::SERIALIZER_BYTES_PER_S), Some(64.0 * 250e6));
        assert_eq!(p.latency_ns.get(latency::PCIE_ROUND_TRIP), Some(&1250.0));
        assert_eq!(p.latency_ns.get(latency::HOST_DRAM), Some(&70.0));
    }

    /// Table IV's percentages follow from the U280's totals and each design's use (within the
    /// rounding of both: the paper prints thousands and a percentage rounded to its last digit;
    /// the serializer's 30 K LUTs are 2.30% of 1,304 K, printed 2.2%, the one entry 0.1 off).
    #[test]
    fn rpcnic_table_iv_percentages_follow_from_the_u280() {
        let p = Profile::builtin("rpcnic-u280").unwrap();
        // As the paper prints them.
        let paper = [
            ("protoacc_pcie", ["17", "9", "29"]),
            ("rpcnic", ["13", "8", "27"]),
            ("serializer", ["2.2", "0.41", "2.7"]),
            ("deserializer", ["1.1", "0.3", "0.3"]),
        ];
        for (block, pct) in paper {
            for (r, printed) in ["luts", "registers", "bram36"].into_iter().zip(pct) {
                let got = p.area_percent(block, r).unwrap();
                let want: f64 = printed.parse().unwrap();
                // Half a unit of the paper's last digit, and of the thousands it prints.
                let decimals = printed.split('.').nth(1).map_or(0, str::len) as i32;
                let digit = 0.5 * 10f64.powi(-decimals);
                let tol = if (block, r) == ("serializer", "luts") { 0.11 } else { digit + 0.04 };
                assert!((got - want).abs() <= tol, "{block} {r}: {got:.3}% against the paper's {want}%");
            }
        }
        assert_eq!(p.area_percent("rpcnic", "dsp"), None);
    }

    #[test]
    fn rpcnic_pcie_is_17_9_times_host_dram() {
        let m = rpc::RpcModel::from_profile(&Profile::builtin("rpcnic-u280").unwrap()).unwrap();
        assert_eq!(format!("{:.1}", m.pcie_over_dram()), "17.9");
    }

    /// The device-side serializer: a PCIe round trip a host read, overlapped with encoding at
    /// 512 bits a cycle.
    #[test]
    fn rpcnic_serialization_is_reads_or_encoding() {
        let m = rpc::RpcModel::from_profile(&Profile::builtin("rpcnic-u280").unwrap()).unwrap();
        let reads = m.serialize(&rpc::SerCounts { host_reads: 4, host_read_bytes: 1280, tx_bytes: 1600 });
        assert!((reads.reads_ns - (4.0 * 1250.0 + 100.0)).abs() < 1e-6 && (reads.encode_ns - 100.0).abs() < 1e-6);
        assert_eq!(reads.ns, reads.reads_ns);
        let big = m.serialize(&rpc::SerCounts { host_reads: 1, host_read_bytes: 0, tx_bytes: 1_600_000 });
        assert_eq!(big.ns, big.encode_ns);
        assert!((big.ns - 100_000.0).abs() < 1e-6);
    }

    /// Projections move with the profile: a faster link, fewer lanes.
    #[test]
    fn rpcnic_projections_follow_the_profile() {
        let p = Profile::builtin("rpcnic-u280").unwrap();
        let c = rpc::Counts {
            bytes: 20_000,
            fields: 200,
            host_writes_one_shot: 5,
            host_writes_field_by_field: 200,
            host_bytes: 20_000,
        };
        let before = rpc::RpcModel::from_profile(&p).unwrap();
        let mut edited = p.clone();
        edited.rates.insert(rate::PCIE_BYTES_PER_S.into(), 25.6e9);
        edited.latency_ns.insert(latency::PCIE_WRITE.into(), 10.0);
        edited.capacity.insert(resource::RPC_DESERIALIZER_LANES.into(), 1);
        let after = rpc::RpcModel::from_profile(&edited).unwrap();
        for mode in [rpc::WriteMode::OneShot, rpc::WriteMode::FieldByField] {
            let (b, a) = (before.deserialize(&c, mode), after.deserialize(&c, mode));
            assert!(a.pcie_ns < b.pcie_ns, "{mode:?}: a faster link writes sooner");
            assert_eq!(a.parse_ns, b.parse_ns);
        }
        // A message mostly in device memory is parse-bound: one lane parses a quarter as many.
        let device = rpc::Counts { host_bytes: 100, host_writes_one_shot: 1, ..c };
        let (b, a) =
            (before.deserialize(&device, rpc::WriteMode::OneShot), after.deserialize(&device, rpc::WriteMode::OneShot));
        assert_eq!((b.bottleneck, a.bottleneck), (rpc::Bottleneck::Parse, rpc::Bottleneck::Parse));
        assert!((b.aggregate_per_s / a.aggregate_per_s - 4.0).abs() < 1e-9);
        // The host-heavy message is the link's: more link, more messages.
        let (b, a) = (before.deserialize(&c, rpc::WriteMode::OneShot), after.deserialize(&c, rpc::WriteMode::OneShot));
        assert_eq!(b.bottleneck, rpc::Bottleneck::Pcie);
        assert!(a.aggregate_per_s > b.aggregate_per_s);
        // A profile without the link's numbers cannot be projected: the error names what is missing.
        let mut bare = p.clone();
        bare.latency_ns.remove(latency::PCIE_WRITE);
        assert!(rpc::RpcModel::from_profile(&bare).unwrap_err().contains("pcie.write"));
    }

    #[test]
    fn accelsdp_n3000_matches_the_paper() {
        // AccelSDP §5.2, §6.2, Table 5 and shared/HARDWARE.md.
        let p = Profile::builtin("accelsdp-n3000").unwrap();
        assert_eq!(p.clock_mhz, Some(200.0));
        assert_eq!(p.datapath_bits, Some(512));
        assert_eq!(p.capacity(resource::FLOW_LPM4_ENTRIES), Some(1024));
        assert_eq!(p.capacity(resource::FLOW_LPM6_ENTRIES), Some(1024));
        assert_eq!(p.capacity(resource::FLOW_EM_ENTRIES), Some(1024));
        assert_eq!(p.capacity(resource::FLOW_ACTION_SET_BITS), Some(128));
        assert_eq!(p.cycles(cost::CAM_SEARCH), Some(2));
        assert_eq!(p.cycles(cost::TCAM_WRITE), Some((1 << 8) + 2));
        assert_eq!(p.cycles(cost::BCAM_WRITE), Some(2));
        assert_eq!(p.rate(rate::CAM_SEARCHES_PER_S), Some(200e6));
        let table5 = [
            (rate::LPM_POPULATE_PER_S, 0.78e6),
            (rate::LPM_DELETE_PER_S, 0.78e6),
            (rate::LPM_UPDATE_PER_S, 1.89e6),
            (rate::EM_POPULATE_PER_S, 0.71e6),
            (rate::EM_DELETE_PER_S, 0.78e6),
            (rate::EM_UPDATE_PER_S, 1.89e6),
        ];
        for (name, want) in table5 {
            assert_eq!(p.rate(name), Some(want), "{name}");
        }
        // A TCAM write at 200 MHz is 1.29 µs: the 0.78 M/s LPM populate rate of Table 5.
        let tcam_writes_per_s = 200e6 / p.cycles(cost::TCAM_WRITE).unwrap() as f64;
        assert!((tcam_writes_per_s / 1e6 - 0.78).abs() < 0.01, "{tcam_writes_per_s}");
        // Profiles that do not model QNP get its defaults.
        assert_eq!(p.qnp, QnpParams::default());
    }

    // Eth(14)+IPv4(20)+UDP(8)+QNP(22); tern-hw does not depend on tern-wire, so it is spelled out.
    fn tern_wire_header_total() -> usize {
        14 + 20 + 8 + 22
    }

    #[test]
    fn cpu_is_unbounded() {
        let p = Profile::builtin("cpu").unwrap();
        let mut l = Ledger::new(&p);
        l.claim(resource::QNP_REQUEST_TABLE_ENTRIES, u64::MAX / 2, "a").unwrap();
        l.claim(resource::QNP_REQUEST_TABLE_ENTRIES, u64::MAX / 2, "b").unwrap();
        l.check_limit(resource::QNP_PKTS_PER_REQUEST, 255, "c").unwrap();
    }

    #[test]
    fn ledger_names_resource_asked_and_available() {
        let p = Profile::builtin("qingniao-u250").unwrap();
        let mut l = Ledger::new(&p);
        l.claim(resource::QNP_REQUEST_TABLE_ENTRIES, 1000, "app 1").unwrap();
        let e = l.claim(resource::QNP_REQUEST_TABLE_ENTRIES, 48, "app 2").unwrap_err();
        assert_eq!((e.asked, e.available, e.capacity, e.in_use), (48, 24, 1024, 1000));
        let msg = e.to_string();
        assert!(msg.contains("qnp.request_table_entries"), "{msg}");
        assert!(msg.contains("app 2"), "{msg}");
        l.release("app 1");
        l.claim(resource::QNP_REQUEST_TABLE_ENTRIES, 48, "app 2").unwrap();
        let e = l.check_limit(resource::QNP_PKTS_PER_REQUEST, 5, "request Big").unwrap_err();
        assert_eq!((e.asked, e.available), (5, 4));
        let usage = l.usage();
        let t = usage.iter().find(|u| u.resource == resource::QNP_REQUEST_TABLE_ENTRIES).unwrap();
        assert_eq!((t.used, t.capacity), (48, Some(1024)));
    }

    #[test]
    fn bad_profiles_are_rejected_with_location() {
        let e = Profile::from_toml("name = 1", "x.toml").unwrap_err().to_string();
        assert!(e.contains("x.toml"), "{e}");
        let text = CPU_TOML.replace("mtu = 1500", "mtu = 10");
        assert!(Profile::from_toml(&text, "y").unwrap_err().to_string().contains("mtu"));
        let text = CPU_TOML.replace("[capacity]", "[capacity]\ntypo_field = 1\n[typo]");
        assert!(Profile::from_toml(&text, "z").is_err());
        assert!(matches!(Profile::resolve("nope"), Err(ProfileError::Unknown { .. })));
    }

    /// A key no table knows is refused, named, with the nearest known key where one is close:
    /// a misspelt capacity would otherwise leave its resource unbounded.
    /// A latency longer than an hour is refused by name: it becomes a real wait (a region's PR,
    /// the fairness epoch), and 1e30 ns once ended `chain serve` with a panic.
    #[test]
    fn a_latency_is_an_hour_at_most() {
        let with = |v: &str| format!("name = \"t\"\ndescription = \"t\"\n[latency_ns]\n\"chain.epoch\" = {v}\n");
        assert!(Profile::from_toml(&with("3.6e12"), "t").is_ok());
        for bad in ["3.7e12", "1e30"] {
            let e = Profile::from_toml(&with(bad), "t").unwrap_err().to_string();
            assert!(e.contains("chain.epoch") && e.contains("longer than an hour"), "{e}");
        }
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let with = |table: &str, line: &str| format!("name = \"t\"\ndescription = \"t\"\n[{table}]\n{line}\n");
        let e = Profile::from_toml(&with("capacity", "\"chain.regoins\" = 8"), "t.toml").unwrap_err().to_string();
        assert!(e.contains("t.toml") && e.contains("[capacity] `chain.regoins`"), "{e}");
        assert!(e.contains("did you mean `chain.regions`?"), "{e}");
        let e = Profile::from_toml(&with("rates", "\"warp.speed\" = 9.0"), "t").unwrap_err().to_string();
        assert!(e.contains("[rates] `warp.speed`") && !e.contains("did you mean"), "{e}");
        let e = Profile::from_toml(&with("area", "\"core.lut\" = 9.0"), "t").unwrap_err().to_string();
        assert!(e.contains("[area] `core.lut`"), "{e}");
        // The patterns: a task kind's rate and cycles, a block's area.
        for (table, line) in [
            ("rates", "\"nt.aes.gbps\" = 30.0"),
            ("cycles", "\"nt.kv_cache.cycles\" = 12"),
            ("area", "\"nt.gbn.bram_kb\" = 1.0"),
            ("latency_ns", "\"chain.pr\" = 1.0"),
        ] {
            assert!(Profile::from_toml(&with(table, line), "t").is_ok(), "{table}: {line}");
        }
        for bad in ["nt..gbps", "nt.AES.gbps", "nt.aes.gbs", "nt.firewall.gbps"] {
            assert!(!keys::known("rates", bad), "{bad}");
        }
        // A task kind the profile names must be one it knows, in each table that takes one:
        // Tern's own kind names (`firewall`, `kv`) are not Figure 6's.
        for (table, line) in [
            ("rates", "\"nt.firewall.gbps\" = 30.0"),
            ("cycles", "\"nt.kv.cycles\" = 12"),
            ("area", "\"nt.firewall.luts\" = 468"),
        ] {
            let e = Profile::from_toml(&with(table, line), "t").unwrap_err().to_string();
            assert!(e.contains(&format!("[{table}]")) && e.contains("is one of fw, nat, aes"), "{e}");
        }
        // Blocks other than tasks keep their free names.
        assert!(keys::known("area", "packet_store.bram_kb") && keys::known("area", "phy_mac.luts"));
    }
}
