//! The credit scheduler's decision (docs/chain.md, "Benchmark"): a batch of 32 arrivals from
//! four tenants sharing one chain with two instances, each classified into its tenant's queue,
//! then 32 decisions in virtual-time order, each taking a credit, and the credits back — per
//! packet. The FPGA's decision is 16 cycles at 250 MHz: 64 ns.
//!
//! `cargo bench -p tern-chain --bench sched`.

use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tern_chain::plan;
use tern_chain::runtime::{Arrival, Classify, Config, Scheduler};
use tern_chain::tenant::{TaskSpec, Tenant};
use tern_io::Pool;

fn bench(c: &mut Criterion) {
    let tenants: Vec<Tenant> = (0..4)
        .map(|k| {
            let mut s =
                format!("tenant = \"t{k}\"\ndag = \"d1 -> d2 -> d3 -> d4\"\n[ingress]\ndst = \"10.0.{k}.0/24\"\n");
            for n in 1..=4 {
                s += &format!("[nt.d{n}]\nkind = \"dummy\"\n");
            }
            Tenant::parse(&s).unwrap()
        })
        .collect();
    let area = |t: &TaskSpec| match t {
        TaskSpec::Dummy { luts, .. } => Ok(*luts),
        _ => Ok(1000),
    };
    let p = plan::plan(&tenants, &area, 8, 100_000).unwrap();
    let cfg = Config::default();
    // Two instances of the one chain, one region each; a credit pool each.
    let route = vec![vec![vec![0], vec![1]]];
    let mut s = Scheduler::new(&p, &tenants, &cfg, 2, vec![false], &route, 2);
    let mut classify = Classify::new(&tenants);
    let pool = Pool::new(64, 2048);
    let mut packets: Vec<_> = (0..32u32)
        .map(|i| {
            let mut f = Vec::new();
            let k = (i % 4) as u8;
            tern_wire::frame::build_udp4(
                &mut f,
                [2; 6],
                [4; 6],
                [10, 9, 0, i as u8],
                [10, 0, k, 7],
                1000 + i as u16,
                80,
                64,
                &[0; 22],
            );
            let mut pk = pool.packet();
            pk.extend_from_slice(&f).unwrap();
            pk
        })
        .collect();
    let mut g = c.benchmark_group("scheduler");
    g.throughput(Throughput::Elements(32));
    g.bench_function("decision_batch32", |b| {
        let now = Instant::now();
        b.iter(|| {
            for p in packets.drain(..) {
                let _ = s.admit(Arrival { packet: p, at: now, port: 0 }, &mut classify);
            }
            let mut back = [0u64; 2];
            while let Some(d) = s.decide() {
                if let Some((_, pool)) = d.to {
                    back[pool] += 1;
                }
                packets.push(d.item.packet);
                // Credits come back as the regions finish (8 a chain instance).
                if back.iter().sum::<u64>() == 8 {
                    s.credit(0, back[0]);
                    s.credit(1, back[1]);
                    back = [0; 2];
                }
            }
            s.credit(0, back[0]);
            s.credit(1, back[1]);
            assert_eq!(packets.len(), 32);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
