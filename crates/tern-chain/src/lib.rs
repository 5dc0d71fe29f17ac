//! SuperNIC (seed 003) in software: tenants offload DAGs of network tasks (NTs) to one NIC,
//! which cuts them into chains placed in reconfigurable regions (docs/chain.md).
//!
//! - [`dag`]: the Click-like arrow language tenants write their DAGs in (`nat -> fw -> {aes,
//!   lb} -> kv`), checked with errors that name the item (a cycle printed as one);
//! - [`tenant`]: tenant files (TOML): the DAG, ingress, bandwidth and each task's parameters;
//! - the tasks, sans I/O: [`gbn`] (go-back-N transport), [`lb`] (Maglev), [`nat`], [`fw`]
//!   (prioritized ACL with flow state), [`aes`] (AES-GCM, nonces never repeated under a key),
//!   [`kv`] (a cache never stale after a SET); [`task`] puts each behind the `NetworkTask` trait
//!   with its cost descriptor (and other engines, through `tern_io::BatchStage`);
//! - [`plan`]: DAGs to physical chains in regions (sharing, skipping, splitting,
//!   concatenating; parallel tenants' branches in segments of their own);
//! - [`runtime`]: the data path: descriptors, wrappers, regions on worker cores, the credit
//!   scheduler, launches, fork and join, in modes `snic`, `panic` and `rtc`; [`clock`]: the
//!   time its cores read, from the CPU's time-stamp counter;
//! - [`scale`]: the autoscaler (instances a chain needs, launched after the PR time) and a
//!   discrete-event simulation of it;
//! - [`fair`]: fair sharing (§4.5): DRF by progressive filling over space and time, the
//!   ingress token bucket that enforces it;
//! - [`trace`] (a packet's way through the plan) and [`bench`](mod@bench) (the rigs of `tern bench chain`).
#![forbid(unsafe_code)]

pub mod aes;
pub mod bench;
pub mod clock;
pub mod dag;
pub mod fair;
pub mod fw;
pub mod gbn;
pub mod kv;
pub mod lb;
pub mod nat;
pub mod plan;
mod quota;
pub mod runtime;
pub mod scale;
mod swept;
pub mod task;
pub mod tenant;
pub mod trace;
pub mod update;
pub mod ycsb;
