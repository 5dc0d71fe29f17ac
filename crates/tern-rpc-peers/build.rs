//! Generates prost code for every staged workload's schema (protox compiles the .proto files, so
//! no protoc): once with `Vec<u8>` bytes fields, once with `bytes::Bytes` ones, and a dispatch by
//! message type name. Without `../shared` (the workloads) it generates nothing and says so.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

struct Workload {
    name: &'static str,
    proto: PathBuf,
    /// Top-level message types measured.
    types: Vec<String>,
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let shared = manifest.join("../../../shared");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let mut code = String::new();
    let workloads = workloads(&shared);
    match workloads {
        Some(ws) => {
            for w in &ws {
                println!("cargo:rerun-if-changed={}", w.proto.display());
                let dir = w.proto.parent().unwrap();
                let fds = protox::compile([&w.proto], [dir]).expect("the workload's schema compiles");
                for (suffix, bytes) in [("", false), ("_bytes", true)] {
                    let target = out.join(format!("{}{suffix}", w.name));
                    std::fs::create_dir_all(&target).unwrap();
                    let mut cfg = prost_build::Config::new();
                    cfg.out_dir(&target);
                    if bytes {
                        cfg.bytes(["."]);
                    }
                    cfg.compile_fds(fds.clone()).expect("prost-build generates the workload's code");
                    let file = std::fs::read_dir(&target)
                        .unwrap()
                        .filter_map(|e| e.ok())
                        .map(|e| e.file_name().into_string().unwrap())
                        .find(|n| n.ends_with(".rs") && n != "_.rs")
                        .expect("one generated file");
                    let module = format!("{}{suffix}", w.name);
                    writeln!(code, "#[allow(clippy::all, missing_docs, dead_code)]\npub mod {module} {{ include!(concat!(env!(\"OUT_DIR\"), \"/{module}/{file}\")); }}").unwrap();
                }
                read_all::generate(w.name, &fds, &mut code);
            }
            // Dispatch by type: decode (Vec<u8> and Bytes fields), and an encoder of a decoded value.
            code.push_str("/// Decodes `bytes` as `ty` of `workload` with prost (`Vec<u8>` bytes fields); `None`: unknown type.\n");
            code.push_str(
                "pub fn decode(workload: &str, ty: &str, bytes: &[u8]) -> Decoded {\n    match (workload, ty) {\n",
            );
            for w in &ws {
                for t in &w.types {
                    let rust = rust_path(w.name, t);
                    writeln!(code, "        ({:?}, {:?}) => Some(<{rust} as prost::Message>::decode(bytes).map(|m| Box::new(m) as Box<dyn std::any::Any>)),", w.name, t).unwrap();
                }
            }
            code.push_str("        _ => None,\n    }\n}\n");
            code.push_str("/// Decodes a `bytes::Bytes` buffer as `ty` with prost configured with `Bytes` fields (values share the buffer).\n");
            code.push_str("pub fn decode_bytes(workload: &str, ty: &str, bytes: bytes::Bytes) -> Decoded {\n    match (workload, ty) {\n");
            for w in &ws {
                for t in &w.types {
                    let rust = rust_path(&format!("{}_bytes", w.name), t);
                    writeln!(code, "        ({:?}, {:?}) => Some(<{rust} as prost::Message>::decode(bytes).map(|m| Box::new(m) as Box<dyn std::any::Any>)),", w.name, t).unwrap();
                }
            }
            code.push_str("        _ => None,\n    }\n}\n");
            code.push_str("/// Decodes `bytes` as `ty` once and returns what encodes that value again (appending to the buffer).\n");
            code.push_str("pub fn encoder(workload: &str, ty: &str, bytes: &[u8]) -> Option<Encoder> {\n    match (workload, ty) {\n");
            for w in &ws {
                for t in &w.types {
                    let rust = rust_path(w.name, t);
                    writeln!(code, "        ({:?}, {:?}) => {{ let m = <{rust} as prost::Message>::decode(bytes).ok()?; Some(Box::new(move |out: &mut Vec<u8>| prost::Message::encode(&m, out).expect(\"a Vec grows\"))) }}", w.name, t).unwrap();
                }
            }
            code.push_str("        _ => None,\n    }\n}\n");
            code.push_str("/// Whether prost decodes `a` and `b` as `ty` to equal values (`None`: unknown type or a decode error).\n");
            code.push_str("pub fn equal(workload: &str, ty: &str, a: &[u8], b: &[u8]) -> Option<bool> {\n    match (workload, ty) {\n");
            for w in &ws {
                for t in &w.types {
                    let rust = rust_path(w.name, t);
                    writeln!(code, "        ({:?}, {:?}) => Some(<{rust} as prost::Message>::decode(a).ok()? == <{rust} as prost::Message>::decode(b).ok()?),", w.name, t).unwrap();
                }
            }
            code.push_str("        _ => None,\n    }\n}\n/// Whether the peers were generated (the workloads were there at build time).\npub const AVAILABLE: bool = true;\n");
            code.push_str("/// Decodes `bytes` as `ty` with prost, then reads every field of the result ([`ReadAll`]); `None`: unknown type or a decode error.\n");
            code.push_str("pub fn decode_read_all(workload: &str, ty: &str, bytes: &[u8]) -> Option<u64> {\n    match (workload, ty) {\n");
            for w in &ws {
                for t in &w.types {
                    let rust = rust_path(w.name, t);
                    writeln!(code, "        ({:?}, {:?}) => <{rust} as prost::Message>::decode(bytes).ok().map(|m| ReadAll::read_all(&m)),", w.name, t).unwrap();
                }
            }
            code.push_str("        _ => None,\n    }\n}\n");
            #[cfg(feature = "cpp-protobuf")]
            cpp::build(&ws, &out);
        }
        None => {
            println!("cargo:warning=tern-rpc-peers: ../shared/hyperprotobench not found; no prost peers generated");
            code.push_str("/// Decodes with prost: no peers were generated (the workloads were missing at build time).\npub fn decode(_: &str, _: &str, _: &[u8]) -> Decoded { None }\n");
            code.push_str(
                "/// See `decode`.\npub fn decode_bytes(_: &str, _: &str, _: bytes::Bytes) -> Decoded { None }\n",
            );
            code.push_str(
                "/// See `decode`.\npub fn decode_read_all(_: &str, _: &str, _: &[u8]) -> Option<u64> { None }\n",
            );
            code.push_str("/// See `decode`.\npub fn encoder(_: &str, _: &str, _: &[u8]) -> Option<Encoder> { None }\n/// See `decode`.\npub fn equal(_: &str, _: &str, _: &[u8], _: &[u8]) -> Option<bool> { None }\n/// Whether the peers were generated.\npub const AVAILABLE: bool = false;\n");
        }
    }
    std::fs::write(out.join("peers.rs"), code).unwrap();
}

/// [`ReadAll`] for every generated message type: a function reading each field of the struct
/// (scalars by value, strings and bytes by length and first byte, sub-messages and repeated
/// fields recursively), from the descriptors prost-build generated the structs from, named as
/// prost-build names them.
mod read_all {
    use std::fmt::Write as _;

    use heck::{ToSnakeCase, ToUpperCamelCase};
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorSet};

    pub fn generate(workload: &str, fds: &FileDescriptorSet, code: &mut String) {
        for file in &fds.file {
            let proto3 = file.syntax.as_deref() == Some("proto3");
            for m in &file.message_type {
                message(&format!("crate::{workload}"), m, proto3, code);
            }
        }
    }

    /// prost-build's identifier for a field name.
    fn field_ident(name: &str) -> String {
        let s = name.to_snake_case();
        match s.as_str() {
            "self" | "super" | "crate" => format!("{s}_"),
            "as" | "break" | "const" | "continue" | "else" | "enum" | "extern" | "false" | "fn" | "for" | "if"
            | "impl" | "in" | "let" | "loop" | "match" | "mod" | "move" | "mut" | "pub" | "ref" | "return"
            | "static" | "struct" | "trait" | "true" | "type" | "unsafe" | "use" | "where" | "while" | "async"
            | "await" | "dyn" | "abstract" | "become" | "box" | "do" | "final" | "macro" | "override" | "priv"
            | "typeof" | "unsized" | "virtual" | "yield" | "try" | "gen" => format!("r#{s}"),
            _ => s,
        }
    }

    fn message(module: &str, m: &DescriptorProto, proto3: bool, code: &mut String) {
        let name = m.name();
        if m.options.as_ref().is_some_and(|o| o.map_entry()) {
            return;
        }
        let path = format!("{module}::{}", name.to_upper_camel_case());
        let mut body = String::new();
        for f in &m.field {
            let id = field_ident(f.name());
            let one = |v: &str| value(f, v);
            let repeated = f.label() == Label::Repeated;
            let is_msg = matches!(f.r#type(), Type::Message | Type::Group);
            let optional = !repeated && (is_msg || f.proto3_optional() || (!proto3 && f.label() == Label::Optional));
            let expr = if repeated {
                format!("self.{id}.iter().fold(0u64, |s, v| s.wrapping_add({}))", one("v"))
            } else if optional {
                format!("self.{id}.as_ref().map_or(0, |v| {})", one("v"))
            } else {
                one(&format!("(&self.{id})"))
            };
            writeln!(body, "        s = s.wrapping_add({expr});").unwrap();
        }
        writeln!(
            code,
            "#[allow(clippy::all)]\nimpl ReadAll for {path} {{\n    fn read_all(&self) -> u64 {{\n        let mut s = 0u64;\n{body}        s\n    }}\n}}"
        )
        .unwrap();
        let inner = format!("{module}::{}", name.to_snake_case());
        for n in &m.nested_type {
            message(&inner, n, proto3, code);
        }
    }

    /// What reading one value (`v`, a reference) adds.
    fn value(f: &FieldDescriptorProto, v: &str) -> String {
        match f.r#type() {
            Type::Message | Type::Group => format!("ReadAll::read_all({v})"),
            Type::String => {
                format!("({v}.len() as u64).wrapping_add({v}.as_bytes().first().map_or(0, |&b| u64::from(b)))")
            }
            Type::Bytes => format!("({v}.len() as u64).wrapping_add({v}.first().map_or(0, |&b| u64::from(b)))"),
            Type::Bool => format!("u64::from(*{v})"),
            Type::Float => format!("u64::from({v}.to_bits())"),
            Type::Double => format!("{v}.to_bits()"),
            _ => format!("*{v} as u64"),
        }
    }
}

/// The `cpp-protobuf` peer: C++ protobuf's generated code for every workload (each schema's
/// package renamed `tern_cpp_<workload>`, so that the six HyperProtoBench schemas, all in package
/// `hyperprotobench`, can share one binary), and a shim with C functions (`src/cpp.rs` says
/// what each does).
#[cfg(feature = "cpp-protobuf")]
mod cpp {
    use std::fmt::Write as _;
    use std::path::Path;

    use super::Workload;

    pub fn build(ws: &[Workload], out: &Path) {
        let dir = out.join("cpp");
        std::fs::create_dir_all(&dir).unwrap();
        let protoc = std::env::var("PROTOC").unwrap_or_else(|_| "protoc".into());
        println!("cargo:rerun-if-env-changed=PROTOC");
        let mut shim = String::from(SHIM_HEAD);
        let mut link = String::new();
        let mut sources = Vec::new();
        for w in ws {
            let text = std::fs::read_to_string(&w.proto).unwrap();
            let package = format!("tern_cpp_{}", w.name);
            let renamed: String =
                text.lines()
                    .map(|l| {
                        if l.trim_start().starts_with("package ") {
                            format!("package {package};")
                        } else {
                            l.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
            let file = format!("{}.proto", w.name);
            std::fs::write(dir.join(&file), renamed).unwrap();
            let status = std::process::Command::new(&protoc)
                .arg(format!("--cpp_out={}", dir.display()))
                .arg(format!("-I{}", dir.display()))
                .arg(&file)
                .current_dir(&dir)
                .status()
                .unwrap_or_else(|e| panic!("cpp-protobuf: cannot run `{protoc}` (install protobuf-compiler): {e}"));
            assert!(status.success(), "cpp-protobuf: protoc failed on {file}");
            writeln!(shim, "#include \"{}.pb.h\"", w.name).unwrap();
            // One type of each schema referenced, so that the linker keeps its generated code
            // (and with it the registration of its types).
            let first = w.types[0].rsplit('.').next().unwrap();
            writeln!(link, "  (void){package}::{first}::descriptor();").unwrap();
            sources.push(dir.join(format!("{}.pb.cc", w.name)));
        }
        shim.push_str("extern \"C\" void tern_cpp_link() {\n");
        shim.push_str(&link);
        shim.push_str("}\n");
        shim.push_str(SHIM_BODY);
        std::fs::write(dir.join("shim.cc"), shim).unwrap();
        cc::Build::new()
            .cpp(true)
            .std("c++17")
            .include(&dir)
            .file(dir.join("shim.cc"))
            .files(&sources)
            .warnings(false)
            .compile("tern_cpp_protobuf");
        println!("cargo:rustc-link-lib=protobuf");
    }

    const SHIM_HEAD: &str = "#include <google/protobuf/arena.h>\n#include <google/protobuf/descriptor.h>\n#include <google/protobuf/message.h>\n#include <cstdint>\n#include <string>\n";

    const SHIM_BODY: &str = r#"
using google::protobuf::Message;

extern "C" const void* tern_cpp_prototype(const char* name, size_t len) {
  tern_cpp_link();
  const auto* d = google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName(std::string(name, len));
  if (d == nullptr) return nullptr;
  return google::protobuf::MessageFactory::generated_factory()->GetPrototype(d);
}

// Parses into a message on a fresh arena whose first block is a thread's reused buffer (as a
// server keeps one per thread), then frees the arena. 1 if the bytes parsed.
extern "C" int tern_cpp_decode_arena(const void* proto, const uint8_t* data, size_t len) {
  static thread_local char block[1 << 18];
  google::protobuf::ArenaOptions o;
  o.initial_block = block;
  o.initial_block_size = sizeof block;
  google::protobuf::Arena arena(o);
  Message* m = static_cast<const Message*>(proto)->New(&arena);
  return m->ParseFromArray(data, static_cast<int>(len)) ? 1 : 0;
}

// A parsed message on the heap (for encoding), or null if the bytes do not parse.
extern "C" void* tern_cpp_parse(const void* proto, const uint8_t* data, size_t len) {
  Message* m = static_cast<const Message*>(proto)->New();
  if (!m->ParseFromArray(data, static_cast<int>(len))) {
    delete m;
    return nullptr;
  }
  return m;
}

// Serializes into out (cap bytes) if it fits; returns the size either way.
extern "C" size_t tern_cpp_encode(void* m, uint8_t* out, size_t cap) {
  Message* msg = static_cast<Message*>(m);
  size_t n = msg->ByteSizeLong();
  if (n <= cap) msg->SerializeWithCachedSizesToArray(out);
  return n;
}

extern "C" void tern_cpp_free(void* m) { delete static_cast<Message*>(m); }
"#;
}

/// `hyperprotobench.M1` in module `bench0` -> `bench0::M1`; `benchmarks.proto2.GoogleMessage1` -> `m::GoogleMessage1`.
fn rust_path(module: &str, ty: &str) -> String {
    format!("crate::{module}::{}", ty.rsplit('.').next().unwrap())
}

fn workloads(shared: &Path) -> Option<Vec<Workload>> {
    let hpb = shared.join("hyperprotobench");
    if !hpb.join("bench0/benchmark.proto").exists() {
        return None;
    }
    let mut ws = Vec::new();
    for (name, b) in [("bench0", 0), ("bench1", 1), ("bench3", 3), ("bench4", 4)] {
        let dir = hpb.join(format!("bench{b}"));
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).ok()?).ok()?;
        let types =
            manifest["messages"].as_array()?.iter().filter_map(|m| m["type"].as_str().map(String::from)).collect();
        ws.push(Workload { name, proto: dir.join("benchmark.proto"), types });
    }
    let ds = shared.join("protobuf-datasets");
    for (name, proto, ty) in [
        (
            "message1_proto2",
            "google_message1/proto2/benchmark_message1_proto2.proto",
            "benchmarks.proto2.GoogleMessage1",
        ),
        (
            "message1_proto3",
            "google_message1/proto3/benchmark_message1_proto3.proto",
            "benchmarks.proto3.GoogleMessage1",
        ),
        ("message2", "google_message2/benchmark_message2.proto", "benchmarks.proto2.GoogleMessage2"),
    ] {
        ws.push(Workload { name, proto: ds.join(proto), types: vec![ty.to_string()] });
    }
    Some(ws)
}
