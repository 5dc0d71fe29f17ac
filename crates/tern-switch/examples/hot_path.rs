//! Runs the switch's offloaded hit path in a loop (for a profiler: `valgrind --tool=callgrind
//! target/release/examples/hot_path`).
use tern_io::{Batch, Pool};
use tern_switch::bench::{INSIDE, Scheme, flow_frame, snat_cluster};

fn main() {
    let frames: Vec<Vec<u8>> = (0..32u32).map(|f| flow_frame(f, 64)).collect();
    let pool = Pool::new(1024, 2048);
    let mut cl = snat_cluster(Scheme::Ideal, 2048, 0, 1).unwrap();
    for f in &frames {
        tern_switch::bench::install_answered(&mut cl, f).unwrap();
    }
    let mut sw = cl.switch;
    let mut outs: Vec<Batch> = (0..4).map(|_| Batch::new(64)).collect();
    let mut input = Batch::new(32);
    for _ in 0..20_000 {
        for f in &frames {
            let mut p = pool.packet();
            p.reserve_headroom(64);
            let _ = p.extend_from_slice(f);
            let _ = input.push(p);
        }
        sw.process(INSIDE, &mut input, &mut outs, &pool);
        for o in &mut outs {
            o.recycle(&pool);
        }
    }
    println!("{}", sw.stats().offloaded);
}
