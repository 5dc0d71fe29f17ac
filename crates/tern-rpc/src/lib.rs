//! RpcNIC (seed 002) in software: the RPC layer of a PCIe SmartNIC, run on the CPU.
//!
//! This crate starts where RpcNIC's compiler starts (§III-E): `.proto` files, proto2 or proto3,
//! compiled by `protox` (no `protoc`) into the **schema table** the NIC's deserializers and
//! serializer read (§III-B) — one entry per message class, its fields by number with type,
//! label, sub-class and **placement**: host memory, or the NIC's device memory for a field marked
//! with the paper's "Acc" label, written here as the field option `[(tern.acc) = true]` from the
//! built-in import `tern/rpcnic.proto`:
//!
//! ```proto
//! syntax = "proto3";
//! import "tern/rpcnic.proto";
//! message User {
//!   string name = 1;
//!   bytes avatar = 2 [(tern.acc) = true];   // read by a compute unit: placed in device memory
//! }
//! ```
//!
//! ```
//! let table = tern_rpc::schema::compile_str("user.proto", r#"
//!     syntax = "proto3";
//!     import "tern/rpcnic.proto";
//!     message User { string name = 1; bytes avatar = 2 [(tern.acc) = true]; }
//! "#).unwrap();
//! let user = table.class_by_name("User").unwrap();
//! assert_eq!(user.field(2).unwrap().placement, tern_rpc::schema::Placement::Device);
//! ```
//!
//! [`decode`] reads wire bytes into a [`message::Message`] placed by the table, [`build`] makes
//! and changes messages, [`encode`] and [`serialize`] write them back.
//!
//! [`cu`] runs RPC kernels ([`kernel`]: LZ4 and zstd compression, AES-256-GCM) on compute units
//! that read and write device memory only.
//!
//! [`check`] says what of a schema table exceeds a hardware profile's table (classes, field
//! slots, nesting depth).
#![forbid(unsafe_code)]

pub mod app;
pub mod arena;
pub mod build;
pub mod check;
pub mod cu;
pub mod decode;
pub mod encode;
pub mod image;
pub mod json;
pub mod kernel;
pub mod message;
pub mod placement;
pub mod schema;
pub mod serialize;
pub mod service;
pub mod social;
pub mod wire;
pub mod workloads;
