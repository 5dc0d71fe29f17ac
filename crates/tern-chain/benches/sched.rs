//! The credit scheduler's decision (docs/chain.md, "Benchmark"): a batch of 32 arrivals from
//! four tenants sharing one chain with two instances, each classified into its tenant's queue,
//! then 32 decisions in virtual-time order, each taking a credit, and the credits back — per
//! packet ([`tern_chain::bench::SchedRig`], which `tern bench chain` runs too). The FPGA's
//! decision is 16 cycles at 250 MHz: 64 ns.
//!
//! `cargo bench -p tern-chain --bench sched`.

use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tern_chain::bench::{SCHED_BATCH, SchedRig};

fn bench(c: &mut Criterion) {
    let mut rig = SchedRig::new();
    let mut g = c.benchmark_group("scheduler");
    g.throughput(Throughput::Elements(SCHED_BATCH as u64));
    g.bench_function("decision_batch32", |b| {
        let now = Instant::now();
        b.iter(|| assert_eq!(rig.round(now), SCHED_BATCH))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
