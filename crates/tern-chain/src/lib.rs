//! SuperNIC (seed 003) in software: tenants offload DAGs of network tasks (NTs) to one NIC,
//! which cuts them into chains placed in reconfigurable regions (docs/chain.md).
//!
//! So far this crate has the language tenants write their DAGs in ([`dag`]): Click-like arrow
//! statements such as `nat -> fw -> {aes, lb} -> kv`, parsed and checked with errors that name
//! the item (a cycle is printed as one); the go-back-N transport's protocol ([`gbn`]),
//! sans-IO; the load balancer's backend choice, Maglev consistent hashing ([`lb`]); the NAT's
//! translation of frames in place, with incremental checksum updates ([`nat`]); the firewall, a
//! prioritized ACL with established-flow state ([`fw`]); AES-GCM sealing of UDP payloads with
//! nonces that never repeat under a tenant's key ([`aes`]); and the KV cache, answering GETs in
//! the NIC and never with a value a SET replaced ([`kv`]).
#![forbid(unsafe_code)]

pub mod aes;
pub mod bench;
pub mod dag;
pub mod fw;
pub mod gbn;
pub mod kv;
pub mod lb;
pub mod nat;
pub mod plan;
pub mod runtime;
pub mod task;
pub mod tenant;
pub mod trace;
