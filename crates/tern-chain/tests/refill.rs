//! The scheduler's refill (docs/chain.md, "Modes", `snic`): while the scheduler's own core runs a
//! batch of one of its regions, credits a region on the other core gives back are taken in
//! between the batch's packets, and that region is fed again at once rather than after the
//! batch.

mod common;

use tern_chain::runtime::{Config, Mode};
use tern_chain::tenant::Tenant;
use tern_io::Pool;

/// A tenant of one dummy task of `ns` a packet to 10.0.`net`.0/24, too big to share a region
/// with another (60,000 of the plan's 100,000 LUTs a region).
fn tenant(name: &str, net: u8, ns: u64) -> Tenant {
    Tenant::parse(&format!(
        "tenant = \"{name}\"\ndag = \"{name}_nt\"\n[ingress]\ndst = \"10.0.{net}.0/24\"\n[nt.{name}_nt]\nkind = \"dummy\"\nns_per_packet = {ns}\nluts = 60000\n"
    ))
    .unwrap()
}

/// Datagram `i` to 10.0.`net`.7 (source port `net` × 1000 + `i`: a flow each).
fn to(pool: &Pool, net: u8, i: u16) -> tern_io::Packet {
    common::udp(pool, [10, 9, 0, 1], [10, 0, net, 7], u16::from(net) * 1000 + i, 80, b"x")
}

/// Runs tenants `slow` (tenant 0, 4 packets) and `fast` (tenant 1, `fast` packets), in one
/// instance a chain on 2 cores, checking the placement the tests are built on — `slow` in
/// region 0 (core 0, beside the scheduler), `fast` in region 1 (core 1) — and that every packet
/// left once, counted once. Returns how many of `fast`'s left before `slow`'s first, and the
/// refills.
fn slow_beside(ts: &[Tenant], fast: u16) -> (usize, u64) {
    let pool = Pool::new(4096, 2048);
    let mut packets: Vec<_> = (0..4).map(|i| to(&pool, 1, i)).collect();
    packets.extend((0..fast).map(|i| to(&pool, 2, i)));
    let n = 4 + usize::from(fast);
    let cfg = Config { mode: Mode::Snic, cores: 2, instances: 1, ..Config::default() };
    let (out, stats, ()) = common::run_with(ts, cfg, &pool, packets, n, |_| ());
    let region_of = |t: usize| stats.wrappers.iter().find(|w| w.chain == t).and_then(|w| w.region);
    assert_eq!((region_of(0), region_of(1)), (Some(0), Some(1)), "{:?}", stats.wrappers);
    assert_eq!(out.len(), n);
    assert_eq!(out.iter().filter(|(d, _)| d.tenant == 0).count(), 4);
    assert_eq!((stats.tenants[0].packets_out, stats.tenants[1].packets_out), (4, u64::from(fast)));
    (out.iter().position(|(d, _)| d.tenant == 0).unwrap(), stats.refills)
}

/// Tenant `slow` (20 ms a packet) has region 0, on core 0 beside the scheduler; `fast` (no
/// time) region 1, on core 1. Both hold 8 credits; `slow`'s region takes its 4 packets in one
/// batch of 80 ms. Without the refill, `fast` gets no credit back until that batch ends: at most
/// its 8 packets leave before `slow`'s first. With it, the scheduler runs after each of `slow`'s
/// packets and `fast` gets 8 more each time. Every packet still leaves once, counted once.
#[test]
fn the_other_core_is_fed_while_the_scheduler_core_runs_a_long_batch() {
    let (first_slow, refills) = slow_beside(&[tenant("slow", 1, 20_000_000), tenant("fast", 2, 0)], 400);
    assert!(first_slow > 8, "only {first_slow} of fast's packets left before slow's first");
    assert!(refills >= 1, "{refills}");
}

/// As above, with a second tenant, `quick`, whose chain shares region 0 with `slow`'s (30,000
/// LUTs each): a batch of region 0 runs `quick`'s packets, which finish, then `slow`'s, between
/// which the scheduler runs. What `quick`'s group finished is sent with the batch, counted once.
#[test]
fn what_a_batch_finished_before_a_refill_is_counted_once() {
    let small = |name: &str, net: u8, ns: u64| {
        Tenant::parse(&format!(
            "tenant = \"{name}\"\ndag = \"{name}_nt\"\n[ingress]\ndst = \"10.0.{net}.0/24\"\n[nt.{name}_nt]\nkind = \"dummy\"\nns_per_packet = {ns}\nluts = 30000\n"
        ))
        .unwrap()
    };
    let ts = vec![small("quick", 3, 0), small("slow", 1, 5_000_000), tenant("fast", 2, 0)];
    let pool = Pool::new(4096, 2048);
    let mut packets = Vec::new();
    for i in 0..8 {
        packets.push(to(&pool, 3, i));
        packets.push(to(&pool, 1, i));
    }
    packets.extend((0..400).map(|i| to(&pool, 2, i)));
    let cfg = Config { mode: Mode::Snic, cores: 2, instances: 1, ..Config::default() };
    let (out, stats, ()) = common::run_with(&ts, cfg, &pool, packets, 416, |_| ());
    let region_of = |t: usize| stats.wrappers.iter().find(|w| w.chain == t).and_then(|w| w.region);
    assert_eq!((region_of(0), region_of(1), region_of(2)), (Some(0), Some(0), Some(1)), "{:?}", stats.wrappers);
    assert_eq!(out.len(), 416);
    let by_tenant: Vec<u64> = stats.tenants.iter().map(|t| t.packets_out).collect();
    assert_eq!(by_tenant, [8, 8, 400]);
    assert!(stats.refills >= 1, "{}", stats.refills);
}

/// A stateful chain is refilled as well: its tenant's queue has a lane an instance, so a packet
/// bound to a busy instance holds back no other's (docs/chain.md). With `fast` a firewall (it
/// keeps flow state), `fast` gets its credits back while `slow`'s batch runs: more than its 8
/// packets leave before `slow`'s first.
#[test]
fn a_stateful_chain_is_fed_while_the_scheduler_core_runs_a_long_batch() {
    let fw = Tenant::parse(
        "tenant = \"fast\"\ndag = \"fw\"\n[ingress]\ndst = \"10.0.2.0/24\"\n[nt.fw]\nkind = \"firewall\"\nrules = [{ action = \"allow\", proto = \"udp\" }]\n",
    )
    .unwrap();
    // 99,500 LUTs: no room for the firewall's 1,000 beside it in a region of 100,000.
    let slow = Tenant::parse(
        "tenant = \"slow\"\ndag = \"s\"\n[ingress]\ndst = \"10.0.1.0/24\"\n[nt.s]\nkind = \"dummy\"\nns_per_packet = 20000000\nluts = 99500\n",
    )
    .unwrap();
    let (first_slow, refills) = slow_beside(&[slow, fw], 400);
    assert!(first_slow > 8, "only {first_slow} of fast's packets left before slow's first");
    assert!(refills >= 1, "{refills}");
}
