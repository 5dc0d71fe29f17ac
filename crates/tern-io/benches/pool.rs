//! The buffer pool (`tern_io::Pool`): a packet taken and returned on one thread (its cache),
//! and a stream of packets taken on one thread and returned on another (bulks through the
//! shared stack), per packet.
//!
//! `cargo bench -p tern-io --bench pool`.

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, black_box, criterion_group, criterion_main};
use tern_io::Pool;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pool");
    g.throughput(Throughput::Elements(1));
    let pool = Pool::new(1 << 12, 2048);
    g.bench_function("take_return_one_thread", |b| {
        b.iter(|| {
            let p = pool.packet();
            pool.put(black_box(p));
        })
    });
    // 32 at a time out, then back: the cache's refill and spill at work.
    g.throughput(Throughput::Elements(32));
    g.bench_function("take_32_return_32_one_thread", |b| {
        let mut held = Vec::with_capacity(32);
        b.iter(|| {
            held.extend((0..32).map(|_| pool.packet()));
            for p in held.drain(..) {
                pool.put(p);
            }
        })
    });
    // Taken here, handed through an SPSC ring (as the chain runtime's) and returned on another
    // thread, as a scheduler's core and a region's core.
    g.bench_function("take_here_return_there", |b| {
        b.iter_custom(|iters| {
            let (mut tx, mut rx) = rtrb::RingBuffer::<tern_io::Packet>::new(256);
            let there = pool.clone();
            std::thread::scope(|s| {
                s.spawn(move || {
                    let mut got = 0;
                    while got < iters {
                        match rx.pop() {
                            Ok(p) => {
                                there.put(p);
                                got += 1;
                            }
                            Err(_) if rx.is_abandoned() => return,
                            Err(_) => std::hint::spin_loop(),
                        }
                    }
                });
                let start = Instant::now();
                for _ in 0..iters {
                    let mut p = pool.packet();
                    while let Err(rtrb::PushError::Full(back)) = tx.push(p) {
                        p = back;
                        std::hint::spin_loop();
                    }
                }
                // The clock stops when the other thread has them all back.
                while !tx.is_abandoned() {
                    std::hint::spin_loop();
                }
                start.elapsed().max(Duration::from_nanos(1))
            })
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
