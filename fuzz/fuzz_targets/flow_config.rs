//! Any text as a flow switch configuration (TOML, with ACL rules and routes given inline; the
//! files it may name do not exist): checking it never panics, names a problem for what it
//! refuses, and a configuration it accepts builds its switch (OFUs, pipeline, slow path, cache)
//! without panicking or allocating past its bounds, and forwards a frame through it.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tern_flow::config;
use tern_flow::pipeline::Outputs;
use tern_io::{Batch, Pool};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match config::parse(text, Path::new("/nonexistent/fuzz.toml")) {
        Err(e) => assert!(!e.problems.is_empty(), "a refusal names a problem"),
        Ok(cfg) => {
            let pool = Pool::new(64, 2048);
            let Ok(mut sw) = cfg.build(&pool) else { return };
            if cfg.ports.is_empty() {
                return;
            }
            // One UDP frame in on port 0: whatever the tables say, no panic.
            let mut frame = Vec::new();
            tern_wire::frame::build_udp4(&mut frame, [2; 6], [4; 6], [10, 1, 0, 1], [10, 2, 0, 7], 4000, 53, 64, b"q");
            let mut batch = Batch::new(4);
            let mut p = pool.packet();
            p.buffer_mut()[..frame.len()].copy_from_slice(&frame);
            p.set_len(frame.len());
            batch.push(p);
            let mut outs = Outputs::new(cfg.ports.len(), 8, 8);
            sw.process(0, 0, &mut batch, &mut outs);
        }
    }
});
