//! The deserializer's hot path on the staged workloads (HyperProtoBench bench0, 1, 3, 4, whole
//! bench per iteration: its 10 messages; and the protobuf datasets' payloads): Tern's table-driven
//! decode (one-shot and field by field, copy mode, 4 KB chunks) against prost-reflect's
//! `DynamicMessage` (the dynamic peer: a schema loaded at run time, like Tern's), and Tern's
//! encode of what it decoded. Both decoders copy every value out of the input.
//!
//! `cargo bench -p tern-rpc --bench decode`.

use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use tern_rpc::decode::{DecodeOptions, Pools, WriteMode, decode};
use tern_rpc::schema::{ClassId, SchemaTable, compile_file};

struct Workload {
    name: String,
    table: SchemaTable,
    pool: prost_reflect::DescriptorPool,
    /// (class, message type, bytes).
    messages: Vec<(ClassId, String, Vec<u8>)>,
}

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

fn load(name: &str, proto: &Path, messages: Vec<(String, Vec<u8>)>) -> Workload {
    let dir = proto.parent().unwrap();
    let table = compile_file(proto, &[]).unwrap();
    let fds = protox::compile([proto], [dir]).unwrap();
    let pool = prost_reflect::DescriptorPool::from_file_descriptor_set(fds).unwrap();
    let messages = messages.into_iter().map(|(ty, b)| (table.class_by_name(&ty).unwrap().id, ty, b)).collect();
    Workload { name: name.to_string(), table, pool, messages }
}

fn workloads() -> Vec<Workload> {
    let mut out = Vec::new();
    for b in [0, 1, 3, 4] {
        let dir = shared().join(format!("hyperprotobench/bench{b}"));
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
        let msgs = manifest["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (m["type"].as_str().unwrap().to_string(), std::fs::read(dir.join(m["file"].as_str().unwrap())).unwrap())
            })
            .collect();
        out.push(load(&format!("bench{b}"), &dir.join("benchmark.proto"), msgs));
    }
    let ds = shared().join("protobuf-datasets");
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
        out.push(load(name, &ds.join(proto), vec![(ty.to_string(), std::fs::read(ds.join(payload)).unwrap())]));
    }
    out
}

fn bench(c: &mut Criterion) {
    let pools = Pools::default();
    let one = DecodeOptions::default();
    let fbf = DecodeOptions { mode: WriteMode::FieldByField, ..one };
    let mut g = c.benchmark_group("decode");
    for w in workloads() {
        let bytes: usize = w.messages.iter().map(|m| m.2.len()).sum();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function(BenchmarkId::new("tern_one_shot", &w.name), |b| {
            b.iter(|| {
                for (class, _, m) in &w.messages {
                    black_box(decode(&w.table, *class, black_box(m), &pools, &one).unwrap());
                }
            })
        });
        g.bench_function(BenchmarkId::new("tern_field_by_field", &w.name), |b| {
            b.iter(|| {
                for (class, _, m) in &w.messages {
                    black_box(decode(&w.table, *class, black_box(m), &pools, &fbf).unwrap());
                }
            })
        });
        let descs: Vec<_> = w.messages.iter().map(|(_, ty, _)| w.pool.get_message_by_name(ty).unwrap()).collect();
        g.bench_function(BenchmarkId::new("prost_reflect", &w.name), |b| {
            b.iter(|| {
                for ((_, _, m), d) in w.messages.iter().zip(&descs) {
                    black_box(prost_reflect::DynamicMessage::decode(d.clone(), black_box(m.as_slice())).unwrap());
                }
            })
        });
        let decoded: Vec<_> =
            w.messages.iter().map(|(class, _, m)| decode(&w.table, *class, m, &pools, &one).unwrap()).collect();
        g.bench_function(BenchmarkId::new("tern_encode", &w.name), |b| {
            let mut out = Vec::new();
            b.iter(|| {
                for m in &decoded {
                    out.clear();
                    tern_rpc::encode::encode_into(black_box(m), &mut out);
                    black_box(&out);
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
