//! Isolation between tenants sharing a task (docs/chain.md, "Isolation"): a shared position
//! holds one task object a tenant, so one tenant's state — a KV cache's values, a NAT's
//! mappings — is never another's, in every mode, through the running data path.

use std::sync::{Arc, Mutex};

use tern_chain::kv::{Msg, Op};
use tern_chain::plan;
use tern_chain::runtime::{Collect, Collected, Config, Desc, Egress, Ingress, Mode, Runtime, VecIngress};
use tern_chain::tenant::{TaskSpec, Tenant};
use tern_io::{Packet, Pool};

fn area(t: &TaskSpec) -> Result<u64, String> {
    match t {
        TaskSpec::Dummy { luts, .. } => Ok(*luts),
        _ => Ok(1000),
    }
}

fn udp(pool: &Pool, src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16, payload: &[u8]) -> Packet {
    let mut f = Vec::new();
    tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src, dst, sport, dport, 64, payload);
    let mut p = pool.packet();
    p.extend_from_slice(&f).unwrap();
    p
}

/// Runs `packets` through `tenants` in `mode`; returns what left, in order.
fn run(tenants: &[Tenant], mode: Mode, packets: Vec<Packet>, expect: usize) -> Vec<(Desc, Vec<u8>)> {
    let p = plan::plan(tenants, &area, 8, 100_000).unwrap();
    let pool = Pool::new(1024, 2048);
    let cfg = Config { mode, cores: 2, ..Config::default() };
    let mut keys = tern_chain::task::Keys::default();
    let mut factory = |t: usize, n: usize| tern_chain::task::build(&tenants[t].tasks[n], &mut keys);
    let rt = Runtime::new(p, tenants.to_vec(), cfg, &mut factory).unwrap();
    let stopper = rt.stopper();
    let got: Collected = Arc::new(Mutex::new(Vec::new()));
    let ingress: Vec<Box<dyn Ingress>> = if mode == Mode::Rtc {
        vec![Box::new(VecIngress::new(packets)), Box::new(VecIngress::new(Vec::new()))]
    } else {
        vec![Box::new(VecIngress::new(packets))]
    };
    let egress: Vec<Box<dyn Egress>> =
        (0..2).map(|_| Box::new(Collect::new(&pool, &got, expect, &stopper)) as Box<dyn Egress>).collect();
    rt.run(&pool, ingress, egress).unwrap();
    got.lock().unwrap().clone()
}

/// The UDP payload of an Ethernet/IPv4/UDP frame.
fn payload(frame: &[u8]) -> Vec<u8> {
    let h = etherparse::SlicedPacket::from_ethernet(frame).unwrap();
    h.transport
        .map(|t| match t {
            etherparse::TransportSlice::Udp(u) => u.payload().to_vec(),
            _ => Vec::new(),
        })
        .unwrap_or_default()
}

/// Two tenants share one KV cache task (the same name: one position of one chain). Tenant A's
/// server answers A's GET of key `k`, which A's cache keeps; A's next GET of `k` is answered in
/// the NIC, but tenant B's GET of the same key goes on to B's server: B's cache has nothing.
#[test]
fn a_shared_kv_cache_keeps_each_tenants_values_apart() {
    let tenants: Vec<Tenant> = (1..=2)
        .map(|k| {
            Tenant::parse(&format!(
                "tenant = \"t{k}\"\ndag = \"kv\"\n[ingress]\ndst = \"10.0.{k}.0/24\"\n[nt.kv]\nkind = \"kv\"\n"
            ))
            .unwrap()
        })
        .collect();
    let p = plan::plan(&tenants, &area, 8, 100_000).unwrap();
    assert_eq!(p.chains.len(), 1, "the KV task is shared: {}", p.describe(&tenants).join("; "));
    for mode in [Mode::Snic, Mode::Panic, Mode::Rtc] {
        let pool = Pool::new(1024, 2048);
        let get = |id| Msg { op: Op::Get, id, key: b"k", value: b"" }.to_vec();
        let value = Msg { op: Op::Value, id: 1, key: b"k", value: b"tenant A's secret" }.to_vec();
        let (a_client, a_server) = ([10, 0, 1, 5], [10, 0, 1, 200]);
        let (b_client, b_server) = ([10, 0, 2, 5], [10, 0, 2, 200]);
        let packets = vec![
            udp(&pool, a_client, a_server, 5000, 11211, &get(1)),
            udp(&pool, a_server, a_client, 11211, 5000, &value),
            udp(&pool, a_client, a_server, 5000, 11211, &get(2)),
            udp(&pool, b_client, b_server, 5000, 11211, &get(3)),
        ];
        let out = run(&tenants, mode, packets, 4);
        assert_eq!(out.len(), 4, "{mode:?}");
        let answered: Vec<(u16, Vec<u8>)> =
            out.iter().filter(|(d, _)| d.reply).map(|(d, f)| (d.tenant, payload(f))).collect();
        assert_eq!(answered.len(), 1, "{mode:?}: one hit, A's second GET");
        let m = Msg::parse(&answered[0].1).unwrap();
        assert_eq!((answered[0].0, m.op, m.id, m.value), (0, Op::Value, 2, &b"tenant A's secret"[..]), "{mode:?}");
        // B's GET went on to B's server, unanswered here.
        let b_out: Vec<Vec<u8>> = out.iter().filter(|(d, _)| d.tenant == 1).map(|(_, f)| payload(f)).collect();
        assert_eq!(b_out.len(), 1, "{mode:?}");
        let m = Msg::parse(&b_out[0]).unwrap();
        assert_eq!((m.op, m.id), (Op::Get, 3), "{mode:?}");
    }
}

/// Two tenants share one NAT task: each has its own mappings. The same inside flow from each
/// tenant gets a mapping of its own, and a reply to one tenant's external port is not
/// translated by the other's (it is dropped there as having no mapping).
#[test]
fn a_shared_nat_keeps_each_tenants_mappings_apart() {
    let tenants: Vec<Tenant> = (1..=2)
        .map(|k| {
            Tenant::parse(&format!(
                "tenant = \"t{k}\"\ndag = \"nat\"\n[ingress]\nsrc = \"10.0.{k}.0/24\"\n[nt.nat]\nkind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20999\"\n"
            ))
            .unwrap()
        })
        .collect();
    let p = plan::plan(&tenants, &area, 8, 100_000).unwrap();
    assert_eq!(p.chains.len(), 1, "the NAT is shared");
    for mode in [Mode::Snic, Mode::Panic, Mode::Rtc] {
        let pool = Pool::new(1024, 2048);
        // One flow out of tenant 1's network.
        let out = run(&tenants, mode, vec![udp(&pool, [10, 0, 1, 5], [8, 8, 8, 8], 4000, 53, b"q")], 1);
        assert_eq!(out.len(), 1, "{mode:?}");
        let h = etherparse::SlicedPacket::from_ethernet(&out[0].1).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = h.transport else { panic!("not UDP") };
        assert!((20000..=20999).contains(&u.source_port()), "{mode:?}");
    }
    // In one run: tenant 1's flow out, then a reply to its external port arriving as tenant 2's
    // traffic (from tenant 2's network): tenant 2's NAT has no such mapping and drops it.
    let pool = Pool::new(1024, 2048);
    let tenants2: Vec<Tenant> = tenants.clone();
    let p = plan::plan(&tenants2, &area, 8, 100_000).unwrap();
    let cfg = Config { mode: Mode::Snic, cores: 1, ..Config::default() };
    let mut keys = tern_chain::task::Keys::default();
    let mut factory = |t: usize, n: usize| tern_chain::task::build(&tenants2[t].tasks[n], &mut keys);
    let rt = Runtime::new(p, tenants2.clone(), cfg, &mut factory).unwrap();
    let mut classify = rt.classify();
    let first = udp(&pool, [10, 0, 1, 5], [8, 8, 8, 8], 4000, 53, b"q");
    assert_eq!(classify.tenant(first.data()).unwrap().0, 0);
    let stopper = rt.stopper();
    let got: Collected = Arc::new(Mutex::new(Vec::new()));
    // The NAT's first port for tenant 1's first flow (a single instance: the whole range).
    let forged = udp(&pool, [10, 0, 2, 9], [192, 0, 2, 1], 53, 20000, b"a");
    assert_eq!(classify.tenant(forged.data()).unwrap().0, 1);
    let ingress: Vec<Box<dyn Ingress>> = vec![Box::new(VecIngress::new(vec![first, forged]))];
    let egress: Vec<Box<dyn Egress>> = vec![Box::new(Collect::new(&pool, &got, 1, &stopper)) as Box<dyn Egress>];
    let stats = rt.run(&pool, ingress, egress).unwrap();
    assert_eq!(got.lock().unwrap().len(), 1);
    assert_eq!(stats.tenants[0].packets_out, 1);
    assert_eq!(stats.tenants[1].packets_out, 0, "tenant 2's NAT translated tenant 1's mapping");
    assert_eq!(stats.tenants[1].drops.values().sum::<u64>(), 1, "{:?}", stats.tenants[1].drops);
}
