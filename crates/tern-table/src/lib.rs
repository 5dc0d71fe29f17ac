//! Lookup tables shared by Tern's engines.
//!
//! - [`lpm`]: longest-prefix match for IPv4 ([`lpm::Lpm4`], DIR-24-8) and IPv6 ([`lpm::Lpm6`]),
//!   priority = prefix length, as AccelSDP's TCAM with its priority encoder (§4.3.1).
//! - [`em`]: exact match on the 5-tuple ([`em::ExactMatch`]), as AccelSDP's BCAM flow table
//!   (§4.3.2).
//! - `huge`: the LPM root on transparent huge pages (the crate's one `unsafe` call, `madvise`).
//! - [`classifier`]: a tuple-space-search classifier of prioritized masked rules over addresses,
//!   protocol and port ranges (Open vSwitch's), with its naive twin; AccelSDP's slow path
//!   (`tern-flow`) and SuperNIC's firewall (`tern-chain`) use it.
//! - [`sketch`]: a count-min sketch of register arrays ([`sketch::CountMin`]), and [`bloom`]: a
//!   partitioned Bloom filter ([`bloom::Bloom`]) — CLIP's heavy-hitter counter and new-flow
//!   filters (seed 004, §III-D), each with its register cost ([`sketch::RegisterCost`]).
//! - [`masked`]: a masked-key table over keys of several 64-bit words by tuple space search
//!   (a switch pipeline's ternary and LPM tables: CLIP's), highest rank winning;
//! - [`naive`]: the reference twins — plain lists scanned the way a CAM searches, and sketches
//!   and filters of plain nested vectors — that property tests compare the fast tables with.
//!
//! Every table has batch lookup, insert / update / remove, and says what it costs in hardware
//! ([`HwTable`]): which profile resource its entries occupy, so an engine can claim them from a
//! [`tern_hw::Ledger`].
#![deny(unsafe_code)]

pub mod bloom;
pub mod classifier;
pub mod em;
mod huge;
pub mod lpm;
pub mod masked;
pub mod naive;
pub mod sketch;
pub mod workload;

/// Errors changing a table. A failed change leaves the table as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The value does not fit an entry's value field.
    #[error("value {value} does not fit the 22-bit value field of an LPM entry (max {max})")]
    ValueTooLarge {
        /// The value given.
        value: u32,
        /// The largest value an entry holds.
        max: u32,
    },
    /// A shape a structure cannot take (ways, width).
    #[error("{what}: {detail}")]
    Shape {
        /// The structure.
        what: &'static str,
        /// What is wrong, with the value given.
        detail: String,
    },
    /// A structure inside the table is exhausted.
    #[error("{what} exhausted ({capacity})")]
    Full {
        /// What ran out.
        what: &'static str,
        /// How many there are.
        capacity: usize,
    },
}

/// A table's hardware counterpart.
pub trait HwTable {
    /// The profile resource one entry occupies (`tern_hw::resource::FLOW_*`).
    const RESOURCE: &'static str;
    /// Key width in bits, as the CAM is wide.
    const KEY_BITS: u32;
    /// Entries in use.
    fn entries(&self) -> u64;
}

impl HwTable for lpm::Lpm4 {
    const RESOURCE: &'static str = tern_hw::resource::FLOW_LPM4_ENTRIES;
    const KEY_BITS: u32 = 32;
    fn entries(&self) -> u64 {
        self.len() as u64
    }
}

impl HwTable for lpm::Lpm6 {
    const RESOURCE: &'static str = tern_hw::resource::FLOW_LPM6_ENTRIES;
    const KEY_BITS: u32 = 128;
    fn entries(&self) -> u64 {
        self.len() as u64
    }
}

impl<K: em::EmKey> HwTable for em::ExactMatch<K> {
    const RESOURCE: &'static str = tern_hw::resource::FLOW_EM_ENTRIES;
    const KEY_BITS: u32 = K::BITS;
    fn entries(&self) -> u64 {
        self.len() as u64
    }
}
