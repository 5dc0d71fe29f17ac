//! The first-packet decision from bytes in memory: the compiled skip-and-check machine against
//! the naive rule loop (decode the request, try the rules one by one), at the paper's default
//! point (32 rules × 4 skip-and-checks × 5 bytes) and at the ends of two sweep dimensions.
//!
//! Target: the machine ≥ 5× faster than the loop, and under 132 ns per decision (the FPGA's 33
//! cycles at 250 MHz for k = 4).
//!
//! `steering_program` runs the kernel steering program ([`tern_dispatch::steer`]) on whole QNP
//! datagrams in the interpreter (what the mem transport runs; the kernel JIT-compiles it).

use criterion::{BenchmarkId, Criterion, Throughput, black_box, criterion_group, criterion_main};
use tern_dispatch::matcher::Machine;
use tern_dispatch::matcher::reference::NaiveMatcher;
use tern_dispatch::synth::Spec;
use tern_wire::tlv::Writer;

fn payloads(spec: &Spec, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            // Spread requests over every rule, in a scrambled order.
            let r = ((i as u64 * 2_654_435_761) % u64::from(spec.rules)) as u32;
            let mut p = Vec::new();
            Writer::new(&mut p).put_bytes(1, &spec.key(r, 62, i as u64));
            p
        })
        .collect()
}

/// A single-packet GET of app 1 around `payload`.
fn datagram(payload: &[u8]) -> Vec<u8> {
    use tern_wire::qnp::{Flags, HEADER_LEN, Packet, Repr};
    let repr = Repr {
        app_id: 1,
        req_type: 1,
        req_id: 9,
        req_acked_id: 9,
        req_len_in_bytes: payload.len() as u32,
        req_len_in_pkts: 1,
        pkt_seq_num_in_req: 0,
        flags: Flags::DATA,
        seg_cnt: tern_wire::qnp::seg_cnt_for(payload.len()),
    };
    let mut d = vec![0u8; HEADER_LEN];
    repr.emit(&mut Packet::new_unchecked(&mut d[..]));
    d.extend_from_slice(payload);
    d
}

fn bench(c: &mut Criterion) {
    let points = [
        ("default_k4_r32_b5", Spec::default()),
        ("k48_r32_b5", Spec { checks: 48, ..Spec::default() }),
        ("k4_r512_b5", Spec { rules: 512, ..Spec::default() }),
        ("k4_r32_b32", Spec { bytes: 32, ..Spec::default() }),
    ];
    let mut g = c.benchmark_group("first_packet_decision");
    g.throughput(Throughput::Elements(1));
    for (name, spec) in points {
        let set = spec.rule_set(8);
        let machine = Machine::compile(&set, 1).unwrap();
        let naive = NaiveMatcher::new(&set);
        let reqs = payloads(&spec, 1024);
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("machine_same_req", name), |b| {
            b.iter(|| black_box(machine.decide(1, black_box(&reqs[7]))))
        });
        g.bench_function(BenchmarkId::new("machine", name), |b| {
            b.iter(|| {
                i = (i + 1) & 1023;
                black_box(machine.decide(1, black_box(&reqs[i])))
            })
        });
        let steering = tern_dispatch::steer::Steering::compile(&set, 8);
        assert!(steering.complete());
        let datagrams: Vec<Vec<u8>> = reqs.iter().map(|p| datagram(p)).collect();
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("steering_program", name), |b| {
            b.iter(|| {
                i = (i + 1) & 1023;
                black_box(steering.socket_of(black_box(&datagrams[i])))
            })
        });
        let mut i = 0usize;
        g.bench_function(BenchmarkId::new("naive_loop", name), |b| {
            let mut scratch = Vec::with_capacity(8);
            b.iter(|| {
                i = (i + 1) & 1023;
                let d = naive.decide(1, 1, black_box(&reqs[i]), &mut scratch);
                scratch.clear();
                black_box(d)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
