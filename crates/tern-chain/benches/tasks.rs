//! Each network task's per-packet work, as a chain would run it (docs/chain.md): the NAT's
//! outbound translation of an established flow, the firewall's check (a rule miss taken by the
//! classifier, and a reply taken by the flow state), AES-GCM sealing 64- and 1458-byte UDP
//! payloads, Maglev's lookup, a go-back-N data packet taken by the receiver and its ack by the
//! sender, a KV GET answered from the cache, parsing Figure 4's DAG, the dummy task at 0 ns (the
//! trait call alone) and the splitter's copy of a 1500-byte packet.
//!
//! `cargo bench -p tern-chain --bench tasks`.

use std::time::Instant;

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use tern_chain::aes::{AesTask, KeySpace};
use tern_chain::fw::{Action, Firewall, FwConfig, Rule};
use tern_chain::gbn::{self, Receiver, Sender};
use tern_chain::lb::Maglev;
use tern_chain::nat::{Dir, Nat, NatConfig};
use tern_table::classifier::{Pattern, PortRange};
use tern_wire::frame::{build_tcp4, build_udp4};

fn udp(len: usize) -> Vec<u8> {
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 7], [198, 51, 100, 9], 5353, 53, 64, &vec![7u8; len]);
    f
}

fn bench(c: &mut Criterion) {
    let now = Instant::now();
    let mut g = c.benchmark_group("task");
    g.throughput(Throughput::Elements(1));

    let mut nat = Nat::new(NatConfig { ports: (20000, 29999), ..NatConfig::new([192, 0, 2, 1]) });
    let frame = udp(64);
    nat.translate(&mut frame.clone(), Dir::Outbound, now).unwrap();
    let mut f = frame.clone();
    g.bench_function("nat_outbound", |b| {
        b.iter(|| {
            f.copy_from_slice(&frame);
            black_box(nat.translate(black_box(&mut f), Dir::Outbound, now)).unwrap();
        })
    });

    let rules: Vec<Rule> = (0..32u16)
        .map(|i| Rule {
            pattern: Pattern {
                priority: u32::from(i),
                src: Some(format!("10.{i}.0.0/16").parse().unwrap()),
                proto: Some(6),
                dst_port: Some(PortRange(80 + i, 80 + i)),
                ..Pattern::default()
            },
            action: Action::Allow,
        })
        .collect();
    let mut fw = Firewall::new(&rules, FwConfig::default()).unwrap();
    let (mut out, mut back) = (Vec::new(), Vec::new());
    build_tcp4(&mut out, [2; 6], [4; 6], [10, 3, 0, 7], [198, 51, 100, 9], 40000, 83, 64, b"x");
    build_tcp4(&mut back, [4; 6], [2; 6], [198, 51, 100, 9], [10, 3, 0, 7], 83, 40000, 64, b"x");
    let miss = udp(64);
    fw.check(&out, now).unwrap();
    g.bench_function("fw_rules_miss", |b| b.iter(|| black_box(fw.check(black_box(&miss), now)).unwrap_err()));
    g.bench_function("fw_established", |b| b.iter(|| black_box(fw.check(black_box(&back), now)).unwrap()));

    let space = KeySpace::new([9; 32]);
    let mut aes = AesTask::new(&space).unwrap();
    for len in [64usize, 1458] {
        let plain = udp(len);
        let mut f = plain.clone();
        g.bench_function(BenchmarkId::new("aes_seal", len), |b| {
            b.iter(|| {
                f.clear();
                f.extend_from_slice(&plain);
                aes.seal(black_box(&mut f)).unwrap();
            })
        });
    }

    let names: Vec<String> = (0..16).map(|i| format!("10.2.0.{i}:80")).collect();
    let backends: Vec<(&str, u32)> = names.iter().map(|n| (n.as_str(), 1)).collect();
    let lb = Maglev::new(&backends, 65_537).unwrap();
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    g.bench_function("lb_lookup", |b| {
        b.iter(|| {
            h = h.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            black_box(lb.lookup(h))
        })
    });

    let cfg = gbn::Config { window: 1 << 15, queue: 1 << 20, ..gbn::Config::default() };
    let (mut tx, mut rx) = (Sender::new(1, cfg), Receiver::new(1));
    let mut wire = Vec::new();
    // Opened first (the open, its acknowledgement): the bench is data and acknowledgements.
    tx.push(vec![1; 64]).unwrap();
    tx.poll(now, &mut wire);
    tx.on_packet(&rx.on_packet(&wire[0]).1.unwrap(), now);
    assert!(tx.is_open());
    g.bench_function("gbn_data_and_ack", |b| {
        b.iter(|| {
            tx.push(vec![1; 64]).unwrap();
            wire.clear();
            tx.poll(now, &mut wire);
            for p in &wire {
                let (d, ack) = rx.on_packet(p);
                black_box(d);
                if let Some(a) = ack {
                    tx.on_packet(&a, now);
                }
            }
        })
    });

    // The receiving end's table: a data packet of one of 4096 connections (64 peers of 64
    // each, opened first: cookies off, so that each open makes its connection), in turn, each
    // the next of its connection.
    let mut conns = gbn::Connections::new(gbn::ReceiveConfig { cookies_from: Some(4096), ..Default::default() });
    let mut next = vec![0u32; 4096];
    let mut k = 0usize;
    let t0 = std::time::Instant::now();
    let from_of = |k: usize| ([10, 0, 0, (k / 64) as u8], 7000 + (k % 64) as u16);
    for k in 0..4096 {
        let open = gbn::Header { kind: gbn::OPEN, len: 0, conn: k as u32, seq: 0 };
        let answer = conns.on_header(from_of(k), open, t0);
        assert!(matches!(answer, Ok(Some((_, h))) if h.kind == gbn::ACK), "{answer:?}");
    }
    g.bench_function("gbn_connections", |b| {
        b.iter(|| {
            k = (k + 1) % 4096;
            let from = from_of(k);
            let h = gbn::Header { kind: gbn::DATA, len: 0, conn: k as u32, seq: next[k] };
            next[k] += 1;
            black_box(conns.on_header(from, h, t0).ok())
        })
    });

    // A flood of opens from spoofed addresses while every open must bring a cookie: each is
    // answered with one (a keyed hash) and makes nothing.
    let mut conns = gbn::Connections::new(gbn::ReceiveConfig { cookies_from: Some(0), ..Default::default() });
    let mut a = 0u32;
    g.bench_function("gbn_open_cookie", |b| {
        b.iter(|| {
            a = a.wrapping_add(1);
            let open = gbn::Header { kind: gbn::OPEN, len: 0, conn: 1, seq: a };
            black_box(conns.on_header((a.to_be_bytes(), 9), open, t0).ok())
        })
    });
    assert_eq!(conns.len(), 0);

    let mut kv = tern_chain::kv::Cache::new(tern_chain::kv::KvConfig::default());
    let get = tern_chain::kv::Msg { op: tern_chain::kv::Op::Get, id: 1, key: b"user:1001", value: b"" }.to_vec();
    let value =
        tern_chain::kv::Msg { op: tern_chain::kv::Op::Value, id: 1, key: b"user:1001", value: &[7; 64] }.to_vec();
    kv.on_request(&get);
    kv.on_response(&value);
    let mut answer = Vec::new();
    g.bench_function("kv_get_hit", |b| b.iter(|| black_box(kv.on_request_answer(black_box(&get), &mut answer))));
    // GETs that miss from one client, each a new request id, none answered (lost on the way):
    // once the client holds its share (1024), each forgets its own oldest to be remembered.
    let mut kv = tern_chain::kv::Cache::new(tern_chain::kv::KvConfig::default());
    let mut id = 0u32;
    let mut miss = get.clone();
    g.bench_function("kv_get_miss_lost", |b| {
        b.iter(|| {
            id = id.wrapping_add(1);
            miss[4..8].copy_from_slice(&id.to_be_bytes());
            black_box(kv.on_request_answer(black_box(&miss), &mut answer))
        })
    });

    g.bench_function("dag_parse_figure_4a", |b| {
        b.iter(|| black_box(tern_chain::dag::parse(black_box("nt1 -> nt2 -> nt4; nt3 -> nt4")).unwrap()))
    });
    // The dummy task at 0 ns: what running a task through the trait costs by itself.
    let t =
        tern_chain::tenant::Tenant::parse("tenant = \"b\"\ndag = \"d\"\n[nt.d]\nkind = \"dummy\"\nns_per_packet = 0\n")
            .unwrap();
    let mut dummy = tern_chain::task::build(&t.tasks[0], &mut tern_chain::task::Keys::default()).unwrap();
    let pool = tern_io::Pool::new(64, tern_io::DEFAULT_BUF_SIZE);
    let mut p = pool.packet();
    p.extend_from_slice(&udp(64)).unwrap();
    let mut emitted = Vec::new();
    g.bench_function("dummy_0ns", |b| {
        b.iter(|| {
            let mut cx = tern_chain::task::Cx { now, pool: &pool, emitted: &mut emitted, paced: false, port: 0 };
            black_box(dummy.process(black_box(&mut p), &mut cx))
        })
    });
    // The splitter's work at a fork: a copy of a 1500-byte packet into a buffer of the pool
    // (one a branch but the last, which takes the original).
    let mut big = pool.packet();
    big.extend_from_slice(&udp(1458)).unwrap();
    g.bench_function("splitter_copy_1500", |b| b.iter(|| pool.put(pool.clone_packet(black_box(&big)))));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
