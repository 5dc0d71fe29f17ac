//! AccelSDP (seed 001) in software: a software SDN data plane whose cached rules run in
//! offloaded function units.
//!
//! - [`action`]: the action units (SUB, DROP, SFD, CAL, INSERT, DEL, OUTP) and action sets.
//! - [`ofu`]: offloaded function units — the paper's API (`ofu_init`, `rule_table_ops`,
//!   `ofu_uninit`), the instruction FIFO with back-pressure, the configuration FSM, and the rule
//!   tables (IPv4 / IPv6 LPM, 5-tuple exact match from `tern-table`) with the action RAM.
//! - [`pipeline`]: the ingress pipeline over L2 frames — parser, stage 1 (IP version), stage 2
//!   (the OFUs' tables), action units, deparser — as a sans-IO core.
//! - [`classifier`]: tuple-space search for the slow path's ACL, reporting the bits it read.
//! - [`slowpath`]: the software switch behind the cache: ACL, LPM routes, next-hop rewrite.
//! - [`switch`]: pipeline + slow path + caching policy (exact / prefix, flow limit, idle
//!   eviction, rate-limited upcalls), and `dump-flows` rows.
//! - [`config`]: the TOML configuration, checked item by item.
//! - [`runtime`]: the switch between real ports (AF_PACKET, pcap) with a control channel.
#![forbid(unsafe_code)]

pub mod action;
pub mod bench;
/// The classifier lives in `tern-table` (the firewall of `tern-chain` uses it too).
pub use tern_table::classifier;
pub mod config;
pub mod ofu;
pub mod pipeline;
pub mod runtime;
pub mod slowpath;
pub mod switch;
