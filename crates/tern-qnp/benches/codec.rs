//! Micro benchmarks of the hot structures: TLV encode/decode of generated messages and
//! segmentation of requests into packets.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tern_qnp::apps::pingpong::Ping;
use tern_qnp::apps::probe::Probe;
use tern_qnp::{QnpConfig, Segmented, segment_message};
use tern_wire::tlv::Message;

fn probe(body: usize) -> Probe {
    Probe {
        path: "/api/v1/users/12345/profile".into(),
        tenant: 7,
        a: -3,
        b: 1 << 40,
        c: 99,
        flag: true,
        f: 1.5,
        d: 2.25,
        body: vec![0xab; body],
        note: "bench".into(),
    }
}

fn tlv(c: &mut Criterion) {
    let mut g = c.benchmark_group("tlv");
    let ping = Ping { seq: 42, payload: vec![0x5a; 50] };
    let mut buf = Vec::with_capacity(4096);
    g.throughput(Throughput::Elements(1));
    g.bench_function("encode_ping_64B", |b| {
        b.iter(|| {
            buf.clear();
            black_box(&ping).encode(&mut buf);
            black_box(buf.len())
        })
    });
    buf.clear();
    ping.encode(&mut buf);
    let ping_bytes = buf.clone();
    g.bench_function("decode_ping_64B", |b| b.iter(|| Ping::decode(black_box(&ping_bytes)).unwrap()));
    let big = probe(1000);
    buf.clear();
    big.encode(&mut buf);
    let big_bytes = buf.clone();
    g.throughput(Throughput::Bytes(big_bytes.len() as u64));
    g.bench_function("encode_probe_1KB", |b| {
        b.iter(|| {
            buf.clear();
            black_box(&big).encode(&mut buf);
            black_box(buf.len())
        })
    });
    g.bench_function("decode_probe_1KB", |b| b.iter(|| Probe::decode(black_box(&big_bytes)).unwrap()));
    g.finish();
}

fn segmentation(c: &mut Criterion) {
    let mut g = c.benchmark_group("segment");
    let cfg = QnpConfig::default();
    let mut scratch = Vec::new();
    let mut out = Segmented::default();
    for (name, body) in [("1_packet", 100), ("4_packets", 5000)] {
        let msg = probe(body);
        g.throughput(Throughput::Bytes(msg.encoded_len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                segment_message(black_box(&msg), cfg.payload_capacity(), 4, &mut scratch, &mut out).unwrap();
                black_box(out.packets())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, tlv, segmentation);
criterion_main!(benches);
