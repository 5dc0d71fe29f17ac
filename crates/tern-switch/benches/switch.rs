//! Criterion benches of the switch's data path (`Switch::process`), batches of 32 64-byte UDP
//! frames of the SNAT program: every flow's entry in the switch (the offloaded path: parse,
//! the `nat` hit, the rewrite with checksums, the offload's count, the route); every flow a miss
//! (the flight: the request header put in place, the selector's filters); and the responses
//! coming back (the header checked and stripped, post-processing, the route).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tern_io::{Batch, Pool};
use tern_switch::bench::Scheme;
use tern_switch::bench::{INSIDE, flow_frame, snat_cluster};

const BATCH: usize = 32;

fn fill(pool: &Pool, b: &mut Batch, frames: &[Vec<u8>]) {
    for f in frames {
        let mut p = pool.packet();
        p.reserve_headroom(tern_io::DEFAULT_HEADROOM);
        let _ = p.extend_from_slice(f);
        let _ = b.push(p);
    }
}

fn bench(c: &mut Criterion) {
    let frames: Vec<Vec<u8>> = (0..BATCH as u32).map(|f| flow_frame(f, 64)).collect();
    let pool = Pool::new(1024, 2048);
    let mut g = c.benchmark_group("switch_process");
    g.throughput(Throughput::Elements(BATCH as u64));

    // Offloaded: the 32 flows' entries installed (what their server answered).
    let mut cl = snat_cluster(Scheme::Ideal, 2048, 0, 1).unwrap();
    for f in &frames {
        tern_switch::bench::install_answered(&mut cl, f).unwrap();
    }
    let mut sw = cl.switch;
    let mut outs: Vec<Batch> = (0..4).map(|_| Batch::new(64)).collect();
    let mut input = Batch::new(BATCH);
    g.bench_function("offloaded_hit", |b| {
        b.iter(|| {
            fill(&pool, &mut input, &frames);
            sw.process(INSIDE, &mut input, &mut outs, &pool);
            for o in &mut outs {
                o.recycle(&pool);
            }
        })
    });

    // Misses: every frame flies to the server with a request header.
    let cl = snat_cluster(Scheme::AllServer, 2048, 0, 1).unwrap();
    let mut sw = cl.switch;
    g.bench_function("miss_to_server", |b| {
        b.iter(|| {
            fill(&pool, &mut input, &frames);
            sw.process(INSIDE, &mut input, &mut outs, &pool);
            for o in &mut outs {
                o.recycle(&pool);
            }
        })
    });

    // Responses: the server's answers to those requests, taken back by the switch.
    let mut cl = snat_cluster(Scheme::AllServer, 2048, 0, 1).unwrap();
    fill(&pool, &mut input, &frames);
    cl.switch.process(INSIDE, &mut input, &mut outs, &pool);
    let mut req = std::mem::replace(&mut outs[3], Batch::new(64));
    cl.servers[0].process(0, &mut req, false, &pool);
    let responses: Vec<Vec<u8>> = req.iter().map(|p| p.data().to_vec()).collect();
    req.recycle(&pool);
    for o in &mut outs {
        o.recycle(&pool);
    }
    let mut sw = cl.switch;
    g.bench_function("response_back", |b| {
        b.iter(|| {
            fill(&pool, &mut input, &responses);
            sw.process(3, &mut input, &mut outs, &pool);
            for o in &mut outs {
                o.recycle(&pool);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
