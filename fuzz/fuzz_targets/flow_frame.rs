//! Arbitrary bytes as an L2 frame: the parser, the switch (pipeline, slow path, cache install,
//! then the cached rule's actions on a second pass) and every action set on the parsed frame
//! must never panic; the parser's common-case path must agree with the general parser; a frame
//! the pipeline forwards must parse again, and the pipeline's fast path must give what the
//! staged pipeline (its twin, in a second switch) gives; every drop of the slow path is counted
//! under a reason; a compiled action set must do what the action-by-action interpreter does.
#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use tern_flow::action::{self, ActionSet};
use tern_flow::bench::{PathKind, switch, tables};
use tern_flow::pipeline::Outputs;
use tern_flow::switch::Switch;
use tern_io::{Batch, DEFAULT_HEADROOM, Pool};
use tern_wire::frame::FrameInfo;

thread_local! {
    static STATE: RefCell<(Switch, Switch, Pool, Vec<ActionSet>)> = RefCell::new({
        let pool = Pool::new(256, 2048);
        let t = tables(64, 16);
        let sw = switch(&t, PathKind::Fast, &pool);
        let mut staged = switch(&t, PathKind::Fast, &pool);
        staged.pipeline.fast_path = false;
        let sets = [
            "dec_ttl,checksum,output:1",
            "push_vlan:100,set_field:eth_dst=02:00:00:00:00:01,output:0",
            "pop_vlan,set_field:ipv4_dst=10.9.9.9,set_field:tp_dst=99,checksum,output:1",
            "set_field:ipv6_src=2001:db8::9,set_field:tp_src=7,dec_ttl,output:0",
            "set_field:dscp=46,set_field:vlan_vid=7,checksum,output:1",
            "drop",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        (sw, staged, pool, sets)
    });
}

fuzz_target!(|data: &[u8]| {
    let parsed = FrameInfo::parse(data);
    // The parser's common-case path and the general parser agree on every frame.
    let mut general = FrameInfo::default();
    let g = general.parse_general_into(data);
    assert_eq!(parsed.map(|_| ()), g, "parse and parse_general_into disagree");
    if let Ok(info) = parsed {
        assert_eq!(info, general, "parse and parse_general_into disagree");
    }
    STATE.with(|s| {
        let (sw, staged, pool, sets) = &mut *s.borrow_mut();
        for pass in 0..2u64 {
            let mut seen = Vec::new();
            for sw in [&mut *sw, &mut *staged] {
                let mut p = pool.packet();
                p.reserve_headroom(DEFAULT_HEADROOM);
                if p.extend_from_slice(data).is_err() {
                    pool.put(p);
                    return;
                }
                let mut batch = Batch::new(1);
                batch.push(p);
                let mut out = Outputs::new(2, 4, 4);
                sw.process(pass * 1000, (data.len() % 2) as u16, &mut batch, &mut out);
                let mut frames = Vec::new();
                for (port, b) in out.ports.iter_mut().enumerate() {
                    for p in b.drain() {
                        assert!(FrameInfo::parse(p.data()).is_ok(), "a forwarded frame no longer parses");
                        frames.push((port, p.data().to_vec()));
                        pool.put(p);
                    }
                }
                out.host.packets.recycle(pool);
                // Every drop of the slow path has its reason: its decisions' and those on the way out.
                let c = sw.cache_stats();
                let named: u64 = sw.slow.stats().dropped.iter().sum::<u64>() + c.slow_exec_dropped.iter().sum::<u64>();
                assert_eq!(c.slow_dropped, named, "a slow-path drop without a reason");
                seen.push((frames, sw.pipeline.stats().clone()));
            }
            // The same frames and counters, but for the fast path's own count of what it carried.
            assert!(seen[0].1.fast_path <= seen[0].1.hits && seen[1].1.fast_path == 0);
            seen[0].1.fast_path = 0;
            assert_eq!(seen[0], seen[1], "the fast path and the staged pipeline disagree");
        }
        if let Ok(info) = parsed {
            for set in sets.iter() {
                let mut p = pool.packet();
                p.reserve_headroom(DEFAULT_HEADROOM);
                let mut q = pool.packet();
                q.reserve_headroom(DEFAULT_HEADROOM);
                if p.extend_from_slice(data).is_ok() && q.extend_from_slice(data).is_ok() {
                    // The compiled rewrite (where the set has its shape) against the interpreter.
                    let (mut i, mut j) = (info, info);
                    let v = action::execute(set, &mut p, &mut i);
                    let w = action::interpret(set, &mut q, &mut j);
                    assert_eq!((v, i), (w, j), "{set}");
                    if !matches!(v, action::Verdict::Drop(_)) {
                        assert_eq!(p.data(), q.data(), "{set}");
                    }
                }
                pool.put(p);
                pool.put(q);
            }
        }
    });
});
