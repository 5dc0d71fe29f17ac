//! Helpers the data-path tests share.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use tern_chain::plan;
use tern_chain::runtime::{Collect, Collected, Config, Desc, Egress, Ingress, Mode, RunStats, Runtime, VecIngress};
use tern_chain::tenant::{TaskSpec, Tenant};
use tern_io::{Packet, Pool};

/// Areas for planning: a dummy task its configured LUTs, any other 1000.
pub fn area(t: &TaskSpec) -> Result<u64, String> {
    match t {
        TaskSpec::Dummy { luts, .. } => Ok(*luts),
        _ => Ok(1000),
    }
}

/// Plans `tenants`, builds their runtime with `cfg`, calls `setup` on it before it starts,
/// feeds it `packets` (all through core 0's ingress) and stops it once `expect` packets have
/// left; returns what left (in order), the run's counters and what `setup` returned.
pub fn run_with<R>(
    tenants: &[Tenant],
    cfg: Config,
    pool: &Pool,
    packets: Vec<Packet>,
    expect: usize,
    setup: impl FnOnce(&Runtime) -> R,
) -> (Vec<(Desc, Vec<u8>)>, RunStats, R) {
    run_on_ports(tenants, cfg, pool, packets.into_iter().map(|p| (p, 0)).collect(), expect, setup)
}

/// As [`run_with`], each packet coming in on its port.
pub fn run_on_ports<R>(
    tenants: &[Tenant],
    cfg: Config,
    pool: &Pool,
    packets: Vec<(Packet, u8)>,
    expect: usize,
    setup: impl FnOnce(&Runtime) -> R,
) -> (Vec<(Desc, Vec<u8>)>, RunStats, R) {
    let p = plan::plan(tenants, &area, 8, 100_000).unwrap();
    let mut keys = tern_chain::task::Keys::default();
    let mut factory = |t: usize, n: usize| tern_chain::task::build(&tenants[t].tasks[n], &mut keys);
    let rt = Runtime::new(p, tenants.to_vec(), cfg, &mut factory).unwrap();
    let r = setup(&rt);
    let stopper = rt.stopper();
    let got: Collected = Arc::new(Mutex::new(Vec::new()));
    let mut ingress: Vec<Box<dyn Ingress>> = vec![Box::new(VecIngress::on_ports(packets))];
    if cfg.mode == Mode::Rtc {
        // Every core has an ingress of its own in rtc; the others' are empty.
        ingress.extend((1..cfg.cores).map(|_| Box::new(VecIngress::new(Vec::new())) as Box<dyn Ingress>));
    }
    let egress: Vec<Box<dyn Egress>> =
        (0..cfg.cores).map(|_| Box::new(Collect::new(pool, &got, expect, &stopper)) as Box<dyn Egress>).collect();
    let stats = rt.run(pool, ingress, egress).unwrap();
    let out = got.lock().unwrap().clone();
    (out, stats, r)
}

/// A UDP/IPv4 frame in a buffer of `pool`.
pub fn udp(pool: &Pool, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Packet {
    let mut f = Vec::new();
    tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src, dst, sport, dport, 64, payload);
    let mut p = pool.packet();
    p.extend_from_slice(&f).unwrap();
    p
}
