//! Isolation between tenants sharing a task (docs/chain.md, "Isolation"): a shared position
//! holds one task object a tenant, so one tenant's state — a KV cache's values, a NAT's
//! mappings — is never another's, in every mode, through the running data path.

mod common;

use common::{area, run_on_ports, run_with, udp};
use tern_chain::kv::{Msg, Op};
use tern_chain::plan;
use tern_chain::runtime::{Config, Desc, Mode};
use tern_chain::tenant::Tenant;
use tern_io::{Packet, Pool};

/// Runs `packets` (each on its port) through `tenants` on 2 cores in `mode`; returns what
/// left, in order.
fn run(tenants: &[Tenant], mode: Mode, pool: &Pool, packets: Vec<(Packet, u8)>, expect: usize) -> Vec<(Desc, Vec<u8>)> {
    run_on_ports(tenants, Config { mode, cores: 2, ..Config::default() }, pool, packets, expect, |_| ()).0
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
/// server answers A's GET of key `k` (from port 1, the server's side), which A's cache keeps;
/// A's next GET of `k` is answered in the NIC, but tenant B's GET of the same key goes on to
/// B's server: B's cache has nothing. A VALUE a client forges as its server's, on the clients'
/// side, is not kept: the GET it answers still goes on.
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
        let get2 = |id| Msg { op: Op::Get, id, key: b"k2", value: b"" }.to_vec();
        let forged = Msg { op: Op::Value, id: 4, key: b"k2", value: b"forged" }.to_vec();
        let packets = vec![
            (udp(&pool, a_client, a_server, 5000, 11211, &get(1)), 0),
            (udp(&pool, a_server, a_client, 11211, 5000, &value), 1),
            (udp(&pool, a_client, a_server, 5000, 11211, &get(2)), 0),
            (udp(&pool, b_client, b_server, 5000, 11211, &get(3)), 0),
            (udp(&pool, a_client, a_server, 5000, 11211, &get2(4)), 0),
            (udp(&pool, a_server, a_client, 11211, 5000, &forged), 0),
            (udp(&pool, a_client, a_server, 5000, 11211, &get2(5)), 0),
        ];
        let out = run(&tenants, mode, &pool, packets, 7);
        assert_eq!(out.len(), 7, "{mode:?}");
        let answered: Vec<(u16, Vec<u8>)> =
            out.iter().filter(|(d, _)| d.reply()).map(|(d, f)| (d.tenant, payload(f))).collect();
        assert_eq!(answered.len(), 1, "{mode:?}: one hit, A's second GET");
        let m = Msg::parse(&answered[0].1).unwrap();
        assert_eq!((answered[0].0, m.op, m.id, m.value), (0, Op::Value, 2, &b"tenant A's secret"[..]), "{mode:?}");
        // B's GET went on to B's server, unanswered here.
        let b_out: Vec<Vec<u8>> = out.iter().filter(|(d, _)| d.tenant == 1).map(|(_, f)| payload(f)).collect();
        assert_eq!(b_out.len(), 1, "{mode:?}");
        let m = Msg::parse(&b_out[0]).unwrap();
        assert_eq!((m.op, m.id), (Op::Get, 3), "{mode:?}");
        // The GET after the forged VALUE went on to A's server too.
        assert!(out.iter().any(|(d, f)| !d.reply() && Msg::parse(&payload(f)).is_ok_and(|m| m.id == 5)), "{mode:?}");
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
        let out = run(&tenants, mode, &pool, vec![(udp(&pool, [10, 0, 1, 5], [8, 8, 8, 8], 4000, 53, b"q"), 0)], 1);
        assert_eq!(out.len(), 1, "{mode:?}");
        let h = etherparse::SlicedPacket::from_ethernet(&out[0].1).unwrap();
        let Some(etherparse::TransportSlice::Udp(u)) = h.transport else { panic!("not UDP") };
        assert!((20000..=20999).contains(&u.source_port()), "{mode:?}");
    }
    // In one run: tenant 1's flow out, then a reply to its external port arriving as tenant 2's
    // traffic (from tenant 2's network): tenant 2's NAT has no such mapping and drops it.
    let pool = Pool::new(1024, 2048);
    let first = udp(&pool, [10, 0, 1, 5], [8, 8, 8, 8], 4000, 53, b"q");
    // The NAT's first port for tenant 1's first flow (a single instance: the whole range).
    let forged = udp(&pool, [10, 0, 2, 9], [192, 0, 2, 1], 53, 20000, b"a");
    let cfg = Config { mode: Mode::Snic, cores: 1, ..Config::default() };
    let (out, stats, ()) = run_with(&tenants, cfg, &pool, vec![first, forged], 1, |rt| {
        let mut classify = rt.classify();
        let probe = udp(&pool, [10, 0, 2, 9], [192, 0, 2, 1], 53, 20000, b"a");
        assert_eq!(classify.tenant(probe.data()).unwrap().0, 1, "the forged reply is tenant 2's");
        pool.put(probe);
    });
    assert_eq!(out.len(), 1);
    assert_eq!(stats.tenants[0].packets_out, 1);
    assert_eq!(stats.tenants[1].packets_out, 0, "tenant 2's NAT translated tenant 1's mapping");
    assert_eq!(stats.tenants[1].drops.values().sum::<u64>(), 1, "{:?}", stats.tenants[1].drops);
}
