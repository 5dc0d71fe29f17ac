//! Any frame on any port of a CLIP switch (`tern_switch::pipeline`, `tern_switch::switch`,
//! `tern_switch::server`): Appendix A's SNAT with an entry, run on arbitrary bytes as a frame on
//! any port and as a response; and two switches — SNAT's and TCP retransmission detection's —
//! each with two servers taking the bytes on any of its ports (host or server), a server
//! answering whatever reaches it, and the switch taking the answers back. Nothing may panic; a
//! frame the program forwards keeps its length; every frame in is out or counted as a drop
//! (none lost, none made twice).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_io::{Batch, Pool};
use tern_switch::pipeline::{KeyMatch, Outcome, Pipeline};
use tern_switch::program::Program;
use tern_switch::server::{self, Server};
use tern_switch::switch::{Route, Switch, SwitchConfig};

const SNAT: &str = include_str!("../../examples/switch/snat.toml");
const TRD: &str = include_str!("../../examples/switch/trd.toml");
/// A program with its own headers and parser states (VXLAN after UDP 4789, a tag after it).
const VXLAN: &str = include_str!("../../examples/switch/vxlan.toml");

fn vxlan() -> &'static Pipeline {
    static P: std::sync::OnceLock<Pipeline> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let mut p = Pipeline::new(Program::parse(VXLAN).expect("the example parses"));
        p.insert("remap", &[KeyMatch::Exact(100)], 0, "set_vni", &[200]).expect("an entry");
        p
    })
}

/// The program with its entry (10.0.0.5:4000 → 8.8.8.8:53 over UDP, translated to
/// 192.0.2.1:20000), loaded once; each input runs on a copy.
fn loaded() -> &'static Pipeline {
    static P: std::sync::OnceLock<Pipeline> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let mut p = Pipeline::new(Program::parse(SNAT).expect("the example parses"));
        let key = [167772165u64, 134744072, 17, 0, 0, 4000, 53].map(KeyMatch::Exact);
        p.insert("nat", &key, 0, "translate", &[3221225985, 20000]).expect("an entry of the right shape");
        p
    })
}

fuzz_target!(|data: &[u8]| {
    let mut p = loaded().clone();
    let (port, rest) = data.split_first().map_or((0, data), |(p, r)| (*p, r));
    let (resp, frame) = rest.split_at(rest.len().min(7));
    let mut f = frame.to_vec();
    let len = f.len();
    if let Outcome::Forward { .. } = p.pre(&mut f, u16::from(port)) {
        assert_eq!(f.len(), len);
    }
    let _ = p.post(&mut f, resp);
    // Declared headers at any offset the bytes give.
    let mut v = vxlan().clone();
    let mut g = frame.to_vec();
    let glen = g.len();
    if let Outcome::Forward { .. } = v.pre(&mut g, u16::from(port)) {
        assert_eq!(g.len(), glen);
    }

    // The whole switch (built once: its state carries over between inputs, as a running
    // switch's would), taking the bytes on any port.
    RIGS.with(|rigs| {
        for rig in rigs {
            one_switch(&mut rig.borrow_mut(), port, rest);
        }
    });
});

fn one_switch(rig: &mut Rig, port: u8, rest: &[u8]) {
    {
        let Rig { sw, servers, pool, clock } = rig;
        *clock += 1_000_000;
        let mut outs: Vec<Batch> = (0..5).map(|_| Batch::new(8)).collect();
        let mut input = Batch::new(8);
        let mut pk = pool.packet();
        pk.reserve_headroom(64);
        if pk.extend_from_slice(rest).is_err() {
            pool.put(pk);
            return;
        }
        let _ = input.push(pk);
        let before = sw.stats().dropped();
        let held_before = sw.held();
        // The clock moves a millisecond an input: busy marks lapse, held requests go out.
        sw.tick(*clock, &mut outs);
        let server_drops = |v: &[Server]| -> u64 { v.iter().map(|s| s.stats().drops.iter().sum::<u64>()).sum() };
        let sd_before = server_drops(servers);
        let in_port = 1 + u16::from(port % 4);
        sw.process(in_port, &mut input, &mut outs, pool);
        for s in 0..2usize {
            // A second of the clock without packets ends a flow (bounded, as a running server).
            servers[s].expire(*clock);
            let sp = 3 + s;
            let mut b = std::mem::replace(&mut outs[sp], Batch::new(8));
            servers[s].process(*clock, &mut b, port & 0x80 != 0, pool);
            sw.process(sp as u16, &mut b, &mut outs, pool);
        }
        let out: usize = outs.iter().map(|b| b.len()).sum();
        for b in &mut outs {
            b.recycle(pool);
        }
        let dropped = sw.stats().dropped() - before + server_drops(servers) - sd_before;
        // One frame in: one out, dropped or held (and what the tick released went out too).
        let in_total = 1 + held_before as u64;
        assert_eq!(out as u64 + dropped + sw.held() as u64, in_total, "no frame lost or made twice");
        assert_eq!(sw.stats().offload_mismatch, 0);
    }
}

/// A switch with ports 1–2 for hosts and 3–4 for two servers (both in the group), and the
/// servers.
struct Rig {
    sw: Switch,
    servers: Vec<Server>,
    pool: Pool,
    /// The switch's clock, ns.
    clock: u64,
}

fn rig(text: &str) -> Rig {
    let cfg = SwitchConfig {
        ports: 4,
        servers: vec![3, 4],
        members: vec![0, 1],
        routes: vec![Route { prefix: "0.0.0.0/0".parse().unwrap(), port: 2, mac: [2, 0, 0, 0, 0, 9] }],
        ..SwitchConfig::default()
    };
    let program = Program::parse(text).expect("the example parses");
    let (id, handler) = (program.id, program.handler.clone().expect("a handler"));
    let sw = Switch::new(program, cfg).expect("a valid switch");
    let servers =
        (0..2).map(|s| Server::new(0x88B5, id, server::handler(&handler, s).expect("a handler"), 1_000_000_000)).collect();
    Rig { sw, servers, pool: Pool::new(64, 2048), clock: 0 }
}

thread_local! {
    static RIGS: [std::cell::RefCell<Rig>; 2] = [std::cell::RefCell::new(rig(SNAT)), std::cell::RefCell::new(rig(TRD))];
}
