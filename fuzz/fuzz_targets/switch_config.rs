//! Any text as `tern switch serve`'s configuration (`tern_switch::config::parse`, its program
//! found beside it in examples/switch, as the example's `program = "snat.toml"` names it):
//! nothing may panic; a refusal names the file; a configuration it accepts has built its switch,
//! which takes a frame on every port without panicking.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tern_io::{Batch, Pool};
use tern_switch::config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/switch/fuzz.toml"));
    match config::parse(text, path) {
        Err(e) => assert!(!e.is_empty(), "a refusal says why"),
        Ok((cfg, mut sw)) => {
            let pool = Pool::new(64, 2048);
            let ports = usize::from(cfg.switch.ports);
            let mut outs: Vec<Batch> = (0..=ports).map(|_| Batch::new(64)).collect();
            let mut frame = Vec::new();
            tern_wire::frame::build_udp4(&mut frame, [2; 6], [4; 6], [10, 0, 0, 1], [198, 51, 100, 7], 4000, 53, 64, b"q");
            for port in 1..=cfg.switch.ports {
                let mut batch = Batch::new(4);
                let mut p = pool.packet();
                p.buffer_mut()[..frame.len()].copy_from_slice(&frame);
                p.set_len(frame.len());
                batch.push(p);
                sw.process(port, &mut batch, &mut outs, &pool);
                for b in &mut outs {
                    b.recycle(&pool);
                }
            }
        }
    }
});
