//! The staged workloads (`shared/hyperprotobench`, `shared/protobuf-datasets`; read their
//! READMEs): HyperProtoBench bench0, 1, 3 and 4 (each 10 messages serialized by C++ protobuf)
//! and protobuf's GoogleMessage1 (proto2, proto3) and GoogleMessage2 payloads, each with its
//! compiled schema table. Tests and benchmarks read them from there; they are not copied into
//! the repository.

use std::path::{Path, PathBuf};

use crate::schema::{ClassId, SchemaTable, compile_file};

/// One workload: a schema and messages of it.
#[derive(Debug)]
pub struct Workload {
    /// `bench0`, ..., `message1_proto2`, `message1_proto3`, `message2`.
    pub name: String,
    /// The `.proto` file.
    pub proto: PathBuf,
    /// Its schema table.
    pub table: SchemaTable,
    /// (class, full type name, wire bytes) of each message.
    pub messages: Vec<(ClassId, String, Vec<u8>)>,
}

impl Workload {
    /// Bytes of all its messages.
    pub fn bytes(&self) -> usize {
        self.messages.iter().map(|m| m.2.len()).sum()
    }
}

/// `shared/` beside the repository, as this crate's source tree sees it.
pub fn shared_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

fn load(name: &str, proto: PathBuf, messages: Vec<(String, Vec<u8>)>) -> Result<Workload, String> {
    let table = compile_file(&proto, &[]).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (ty, b) in messages {
        let class = table.class_by_name(&ty).ok_or_else(|| format!("{}: no message {ty}", proto.display()))?.id;
        out.push((class, ty, b));
    }
    Ok(Workload { name: name.to_string(), proto, table, messages: out })
}

/// Every staged workload under `shared`, in a fixed order.
pub fn load_all(shared: &Path) -> Result<Vec<Workload>, String> {
    let hpb = shared.join("hyperprotobench");
    if !hpb.exists() {
        return Err(format!(
            "the workloads are not at {} (tern expects its shared/ directory beside it)",
            hpb.display()
        ));
    }
    let read = |p: &Path| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
    let mut out = Vec::new();
    for b in [0, 1, 3, 4] {
        let dir = hpb.join(format!("bench{b}"));
        let manifest: serde_json::Value = serde_json::from_slice(&read(&dir.join("manifest.json"))?)
            .map_err(|e| format!("{}: {e}", dir.join("manifest.json").display()))?;
        let mut msgs = Vec::new();
        for m in manifest["messages"].as_array().ok_or("a manifest without messages")? {
            let (Some(file), Some(ty)) = (m["file"].as_str(), m["type"].as_str()) else {
                return Err(format!("{}: an entry without file or type", dir.display()));
            };
            msgs.push((ty.to_string(), read(&dir.join(file))?));
        }
        out.push(load(&format!("bench{b}"), dir.join("benchmark.proto"), msgs)?);
    }
    let ds = shared.join("protobuf-datasets");
    for (name, proto, ty, payload) in [
        (
            "message1_proto2",
            "google_message1/proto2/benchmark_message1_proto2.proto",
            "benchmarks.proto2.GoogleMessage1",
            "google_message1/proto2/payload_0.bin",
        ),
        (
            "message1_proto3",
            "google_message1/proto3/benchmark_message1_proto3.proto",
            "benchmarks.proto3.GoogleMessage1",
            "google_message1/proto3/payload_0.bin",
        ),
        (
            "message2",
            "google_message2/benchmark_message2.proto",
            "benchmarks.proto2.GoogleMessage2",
            "google_message2/payload_0.bin",
        ),
    ] {
        out.push(load(name, ds.join(proto), vec![(ty.to_string(), read(&ds.join(payload))?)])?);
    }
    Ok(out)
}
