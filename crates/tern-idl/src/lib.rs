//! The QingNiao IDL (QingNiao §3.1, §4.1): requests defined in protobuf syntax, compiled to
//! TLV codecs.
//!
//! The front end is `protox` (a protobuf compiler in Rust; no `protoc`), as the paper's compiler
//! was built on a protobuf front end. A request is a flat message of scalar, string and bytes
//! fields; the fields dispatch rules may read are marked with the `(tern.dispatch)` option from
//! the built-in import `tern/qingniao.proto`:
//!
//! ```proto
//! syntax = "proto3";
//! import "tern/qingniao.proto";
//! message Get {
//!   string key = 1 [(tern.dispatch) = true];
//!   uint64 version = 2;
//! }
//! ```
//!
//! Nested messages, enums, repeated and map fields, oneofs and field numbers above 255 are
//! rejected with an error naming the message and field (QingNiao's IDL has no nested
//! structures; a TLV type is one byte).
//!
//! Two back ends share one [`Schema`]:
//! - [`codegen`] emits Rust types implementing [`tern_wire::tlv::Message`], from `build.rs`
//!   ([`compile_protos`]) or `tern idl compile`;
//! - [`dynamic`] encodes and decodes messages from the schema at run time, for tools and tests.
//!
//! ```
//! let schema = tern_idl::parse_str("get.proto", r#"
//!     syntax = "proto3";
//!     import "tern/qingniao.proto";
//!     message Get { string key = 1 [(tern.dispatch) = true]; uint64 version = 2; }
//! "#).unwrap();
//! let get = schema.message("Get").unwrap();
//! assert_eq!(get.dispatch_fields(), vec![1]);
//! ```
#![forbid(unsafe_code)]

pub mod codegen;
pub mod dynamic;
pub mod frontend;
mod schema;

pub use schema::{FieldSchema, FieldType, IdlError, MessageSchema, Schema, parse_file, parse_str};

use std::path::Path;

/// The built-in import that declares the IDL's options.
pub const TERN_PROTO_NAME: &str = "tern/qingniao.proto";
/// Its source.
pub const TERN_PROTO: &str = r#"syntax = "proto3";
package tern;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FieldOptions {
  // Dispatch rules may read this field; it is encoded in the request's first packet.
  bool dispatch = 50700;
}
"#;

/// Compiles `.proto` files to Rust, one `<file stem>.rs` per input in `out_dir`; for `build.rs`.
///
/// ```no_run
/// // build.rs
/// let out = std::env::var("OUT_DIR").unwrap();
/// tern_idl::compile_protos(&["proto/kv.proto"], &out).unwrap();
/// // lib.rs: include!(concat!(env!("OUT_DIR"), "/kv.rs"));
/// ```
pub fn compile_protos<P: AsRef<Path>>(protos: &[P], out_dir: impl AsRef<Path>) -> Result<(), IdlError> {
    for proto in protos {
        let proto = proto.as_ref();
        // Only a build script talks to cargo (cargo sets OUT_DIR for build scripts alone); from
        // `tern idl compile` this line would be noise on a terminal.
        if std::env::var_os("OUT_DIR").is_some() && std::env::var_os("CARGO_MANIFEST_DIR").is_some() {
            println!("cargo:rerun-if-changed={}", proto.display());
        }
        let schema = parse_file(proto)?;
        let code = codegen::generate(&schema);
        let stem = proto.file_stem().and_then(|s| s.to_str()).unwrap_or("idl");
        let out = out_dir.as_ref().join(format!("{stem}.rs"));
        std::fs::write(&out, code)
            .map_err(|e| IdlError::Io { path: out.display().to_string(), message: e.to_string() })?;
    }
    Ok(())
}
