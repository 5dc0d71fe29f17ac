//! The peers `tern bench rpc` measures Tern's RpcNIC codec against: prost code generated at build
//! time (protox + prost-build, no protoc) for every staged workload's schema, from
//! `../shared/hyperprotobench` and `../shared/protobuf-datasets` — once with `Vec<u8>` bytes
//! fields, once with `bytes::Bytes` ones — and dispatch functions by workload and message type.
//! Without the workloads at build time nothing is generated and [`AVAILABLE`] is false.

include!(concat!(env!("OUT_DIR"), "/peers.rs"));

/// Reads every field of a generated message (for `tern bench rpc`'s read-every-field variant):
/// scalars by value, strings and bytes by length and first byte, sub-messages and repeated
/// fields recursively; the sum keeps the reads from being optimized away.
pub trait ReadAll {
    /// The reads, summed.
    fn read_all(&self) -> u64;
}

/// A decoded message, type-erased (`None`: no such workload or type).
pub type Decoded = Option<Result<Box<dyn std::any::Any>, prost::DecodeError>>;
/// Encodes one decoded message, appending to the buffer.
pub type Encoder = Box<dyn Fn(&mut Vec<u8>)>;

#[cfg(feature = "cpp-protobuf")]
pub mod cpp;
