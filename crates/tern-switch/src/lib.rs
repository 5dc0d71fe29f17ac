//! CLIP (seed 004) in software: a programmable switch extended by a group of commodity servers
//! (docs/clip.md).
//!
//! - [`config`]: `tern switch serve`'s configuration (TOML), checked, with its switch built;
//! - [`group`]: the server group behind the switch and how a flow finds its server while the
//!   group grows and shrinks (§III-D, Appendix B): versioned groups of ECMP buckets, the `cur`
//!   register and two alternating Bloom filters, and a bounded table of pinned flows the
//!   controller fills before a filter is cleared, so no flow ever changes server;
//! - [`mirror`]: mirrored tables: a bounded original in the switch, an unbounded twin on the
//!   servers, entries moved between them make-before-break;
//! - [`offload`]: heavy-hitter offload: a count-min sketch counts what the switch's table did
//!   not serve, and each interval the heaviest flows' entries move from the servers' mirrored
//!   table into the switch's (or flows drawn at random, the paper's "w/ R");
//! - [`program`]: switch programs as data (TOML in P4's vocabulary): request and response
//!   parameters, metadata, registers, tables, actions of primitives, `pre_processing` and
//!   `post_processing` around a named remote handler; checked, and placed by [`place`];
//! - [`pipeline`]: a program run on frames: parser, tables, primitives, registers, deparser
//!   (checksums), `flight` to a server and the response's `post_processing`;
//! - [`switch`]: the switch itself: the pipeline, the server selection and the offload joined
//!   on frames — requests out to servers with CLIP's header, responses back, regular
//!   forwarding and ARP, every drop a named counter; [`flow`]: a flow's id, as the switch and
//!   the servers compute it;
//! - [`server`]: a server of the group: requests answered in place by the program's remote
//!   handler ([`server::Snat`], Appendix A's), its live flows kept for the controller;
//! - [`modules`]: CLIP's own modules (selecting, scalability, forwarding) as placement items,
//!   for the projection beside the paper's Table II;
//! - [`place`]: the placement pass: tables and register arrays into a pipe's stages by their
//!   dependencies and the stages' resources (`tern_hw::switch`).
#![forbid(unsafe_code)]

pub mod bench;
pub mod config;
pub mod flow;
pub mod group;
pub mod mirror;
pub mod modules;
pub mod nat;
pub mod offload;
pub mod pipeline;
pub mod place;
pub mod program;
pub mod server;
pub mod switch;
pub mod trd;
