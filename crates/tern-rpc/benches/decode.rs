//! The deserializer's hot path on the staged workloads (HyperProtoBench bench0, 1, 3, 4, whole
//! bench per iteration: its 10 messages; and the protobuf datasets' payloads): Tern's table-driven
//! decode (one-shot and field by field, copy mode, 4 KB chunks) against prost-reflect's
//! `DynamicMessage` (the dynamic peer: a schema loaded at run time, like Tern's), and Tern's
//! encode of what it decoded. Both decoders copy every value out of the input.
//!
//! `cargo bench -p tern-rpc --bench decode`.

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use tern_rpc::decode::{DecodeOptions, Pools, WriteMode, decode};

/// A staged workload and prost-reflect's view of its schema.
fn workloads() -> Vec<(tern_rpc::workloads::Workload, prost_reflect::DescriptorPool)> {
    tern_rpc::workloads::load_all(&tern_rpc::workloads::shared_dir())
        .unwrap()
        .into_iter()
        .map(|w| {
            let fds = protox::compile([&w.proto], [w.proto.parent().unwrap()]).unwrap();
            let pool = prost_reflect::DescriptorPool::from_file_descriptor_set(fds).unwrap();
            (w, pool)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let pools = Pools::default();
    let one = DecodeOptions::default();
    let fbf = DecodeOptions { mode: WriteMode::FieldByField, ..one };
    let mut g = c.benchmark_group("decode");
    for (w, pool) in workloads() {
        let bytes = w.bytes();
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
        let descs: Vec<_> = w.messages.iter().map(|(_, ty, _)| pool.get_message_by_name(ty).unwrap()).collect();
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
