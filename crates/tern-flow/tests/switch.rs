//! The switch end to end in memory: the first packet of a flow takes the slow path and installs
//! a cached rule, the rest hit it in the pipeline; idle rules go; the flow limit and the upcall
//! rate limit hold.

use std::time::Duration;

use tern_flow::classifier::{Pattern, PortRange};
use tern_flow::ofu::{self, OfuKind, OfuSpec};
use tern_flow::pipeline::{DropReason, Outputs, Pipeline};
use tern_flow::slowpath::{AclAction, AclRule, NextHop, SlowPath, SlowPathTables};
use tern_flow::switch::{CacheMode, CachePolicy, Switch};
use tern_io::{Batch, DEFAULT_HEADROOM, Pool};
use tern_wire::frame;

/// An ACL denying TCP to ports 22-23.
fn no_ssh() -> Vec<AclRule> {
    vec![AclRule {
        pattern: Pattern { priority: 1, proto: Some(6), dst_port: Some(PortRange(22, 23)), ..Pattern::default() },
        action: AclAction::Deny,
    }]
}

fn switch(mode: CacheMode, policy: CachePolicy) -> (Switch, Pool) {
    switch_with(mode, policy, no_ssh())
}

fn switch_with(mode: CacheMode, policy: CachePolicy, acl: Vec<AclRule>) -> (Switch, Pool) {
    let hop =
        |port: u16| NextHop { port, eth_src: [2, 0, 0, 0, 0, port as u8], eth_dst: [2, 0, 0, 0, 1, 1], vlan: None };
    switch_hops(mode, policy, acl, vec![hop(1), hop(2)])
}

/// A switch of 3 ports whose routes 10.1/16 and 10.2/16 go to `next_hops` 0 and 1.
fn switch_hops(mode: CacheMode, policy: CachePolicy, acl: Vec<AclRule>, next_hops: Vec<NextHop>) -> (Switch, Pool) {
    let spec = |id, kind| OfuSpec {
        id,
        kind,
        v4_entries: 1024,
        v6_entries: 1024,
        fifo_depth: 4096,
        action_set_bits: 128,
        write_cycles: 0,
    };
    let (driver, tables) = ofu::new(vec![spec(1, OfuKind::Em), spec(2, OfuKind::Lpm)]);
    let pool = Pool::new(1024, 2048);
    let pipeline = Pipeline::new(tables, 3, pool.clone());
    let tables = SlowPathTables {
        acl,
        acl_default_deny: false,
        routes4: vec![("10.1.0.0/16".parse().unwrap(), 0), ("10.2.0.0/16".parse().unwrap(), 1)],
        routes6: vec![],
        next_hops,
    };
    let slow = SlowPath::new(&tables).unwrap();
    let sw = Switch::new(pipeline, slow, driver, CachePolicy { mode, ..policy }, pool.clone()).unwrap();
    (sw, pool)
}

fn udp(pool: &Pool, dst: [u8; 4], sport: u16) -> tern_io::Packet {
    let mut f = Vec::new();
    frame::build_udp4(&mut f, [2, 0, 0, 0, 9, 9], [2, 0, 0, 0, 0, 9], [10, 9, 0, 1], dst, sport, 53, 64, &[0; 18]);
    let mut p = pool.packet();
    p.reserve_headroom(DEFAULT_HEADROOM);
    p.extend_from_slice(&f).unwrap();
    p
}

fn send(sw: &mut Switch, pool: &Pool, now: u64, pkts: Vec<tern_io::Packet>) -> [usize; 3] {
    let mut b = Batch::new(64);
    for p in pkts {
        b.push(p);
    }
    let mut out = Outputs::new(3, 64, 64);
    sw.process(now, 0, &mut b, &mut out);
    let n = [out.ports[0].len(), out.ports[1].len(), out.ports[2].len()];
    for b in &mut out.ports {
        b.recycle(pool);
    }
    n
}

#[test]
fn first_packet_installs_the_rest_hit() {
    let (mut sw, pool) = switch(CacheMode::Exact, CachePolicy::default());
    assert_eq!(send(&mut sw, &pool, 1, vec![udp(&pool, [10, 1, 0, 5], 1000)]), [0, 1, 0]);
    assert_eq!(sw.cache_stats().upcalls, 1);
    assert_eq!(sw.cache_stats().installed_exact, 1);
    for i in 0..10 {
        assert_eq!(send(&mut sw, &pool, 2 + i, (0..8).map(|_| udp(&pool, [10, 1, 0, 5], 1000)).collect()), [0, 8, 0]);
    }
    assert_eq!(sw.cache_stats().upcalls, 1, "no more misses");
    assert_eq!(sw.pipeline.stats().hits, 80);
    assert_eq!(sw.pipeline.stats().misses, 1);
    // A new flow misses once too.
    assert_eq!(
        send(&mut sw, &pool, 20, vec![udp(&pool, [10, 2, 0, 5], 1000), udp(&pool, [10, 2, 0, 5], 1000)]),
        [0, 0, 2]
    );
    assert_eq!(sw.cache_stats().upcalls, 3, "both packets of the batch missed before the rule landed");
    assert_eq!(sw.cache_stats().installed_exact, 2);
    assert_eq!(sw.cached(), (2, 0));
}

#[test]
fn prefix_mode_caches_the_route() {
    // An ACL on destinations only keeps decisions destination-only: they can be cached by prefix.
    let acl = vec![AclRule {
        pattern: Pattern { priority: 1, dst: Some("10.2.9.0/24".parse().unwrap()), ..Pattern::default() },
        action: AclAction::Deny,
    }];
    let (mut sw, pool) = switch_with(CacheMode::Prefix, CachePolicy::default(), acl);
    send(&mut sw, &pool, 1, vec![udp(&pool, [10, 1, 0, 5], 1000)]);
    // Other flows to the same prefix hit the prefix rule. (The ACL consulted 24 destination
    // bits, so the cached prefix is 10.1.0.0/24, not the route's /16.)
    let n = send(&mut sw, &pool, 2, (0..16).map(|i| udp(&pool, [10, 1, 0, 10 + i], 2000 + u16::from(i))).collect());
    assert_eq!(n, [0, 16, 0]);
    assert_eq!(sw.cache_stats().upcalls, 1);
    assert_eq!(sw.cached(), (0, 1));
    // With an ACL on ports, a destination prefix cannot stand for the decision: nothing cached.
    let (mut sw, pool) = switch(CacheMode::Prefix, CachePolicy::default());
    send(&mut sw, &pool, 1, vec![udp(&pool, [10, 1, 0, 5], 1000)]);
    send(&mut sw, &pool, 2, vec![udp(&pool, [10, 1, 0, 5], 1000)]);
    assert_eq!(sw.cache_stats().uncacheable, 2);
    assert_eq!(sw.cached(), (0, 0));
    // `both` falls back to the exact rule.
    let (mut sw, pool) = switch(CacheMode::Both, CachePolicy::default());
    send(&mut sw, &pool, 1, vec![udp(&pool, [10, 1, 0, 5], 1000)]);
    assert_eq!(sw.cached(), (1, 0));
}

#[test]
fn idle_rules_are_evicted() {
    let policy = CachePolicy {
        idle_timeout: Duration::from_millis(100),
        expire_interval: Duration::from_millis(10),
        ..CachePolicy::default()
    };
    let (mut sw, pool) = switch(CacheMode::Exact, policy);
    send(&mut sw, &pool, 1_000_000, vec![udp(&pool, [10, 1, 0, 5], 1)]);
    send(&mut sw, &pool, 2_000_000, vec![udp(&pool, [10, 1, 0, 5], 2)]);
    // Flow 1 keeps hitting; flow 2 goes idle.
    for t in 1..30u64 {
        send(&mut sw, &pool, 2_000_000 + t * 10_000_000, vec![udp(&pool, [10, 1, 0, 5], 1)]);
    }
    assert_eq!(sw.cache_stats().evicted_idle, 1);
    assert_eq!(sw.cached(), (1, 0));
    send(&mut sw, &pool, 400_000_000, vec![]);
    assert_eq!(sw.pipeline.ofus()[0].used(), (1, 0));
}

#[test]
fn flow_limit_and_upcall_rate_limit() {
    let policy = CachePolicy { flow_limit: 4, upcall_rate: 1000.0, upcall_burst: 10.0, ..CachePolicy::default() };
    let (mut sw, pool) = switch(CacheMode::Exact, policy);
    // 20 new flows at once: 10 pass the bucket, 4 of those are cached.
    send(&mut sw, &pool, 0, (0..20).map(|i| udp(&pool, [10, 1, 0, 5], 100 + i)).collect());
    let s = sw.cache_stats().clone();
    assert_eq!((s.upcalls, s.upcall_rate_limited), (10, 10));
    assert_eq!((s.installed_exact, s.cache_full), (4, 6));
    // 5 ms later the bucket has 5 tokens again.
    send(&mut sw, &pool, 5_000_000, (0..20).map(|i| udp(&pool, [10, 1, 0, 5], 200 + i)).collect());
    assert_eq!(sw.cache_stats().upcalls, 15);
}

#[test]
fn acl_denials_are_cached_as_drops() {
    let (mut sw, pool) = switch(CacheMode::Exact, CachePolicy::default());
    let ssh = |pool: &Pool| {
        let mut f = Vec::new();
        frame::build_tcp4(
            &mut f,
            [2, 0, 0, 0, 9, 9],
            [2, 0, 0, 0, 0, 9],
            [10, 9, 0, 1],
            [10, 1, 0, 5],
            40000,
            22,
            64,
            b"",
        );
        let mut p = pool.packet();
        p.extend_from_slice(&f).unwrap();
        p
    };
    assert_eq!(send(&mut sw, &pool, 1, vec![ssh(&pool)]), [0, 0, 0]);
    assert_eq!(send(&mut sw, &pool, 2, vec![ssh(&pool), ssh(&pool)]), [0, 0, 0]);
    assert_eq!(sw.cache_stats().upcalls, 1);
    assert_eq!(sw.pipeline.stats().dropped(tern_flow::pipeline::DropReason::Action), 2);
}

#[test]
fn deparser_sorts_mixed_batches_and_hands_over_uniform_ones() {
    let (mut sw, pool) = switch(CacheMode::Exact, CachePolicy::default());
    send(&mut sw, &pool, 1, vec![udp(&pool, [10, 1, 0, 5], 1000), udp(&pool, [10, 2, 0, 5], 1000)]);
    assert_eq!(sw.cached(), (2, 0));
    // Mixed: two ports, a bad frame, a miss (a new flow, through the slow path).
    let mut bad = udp(&pool, [10, 1, 0, 5], 1000);
    bad.set_len(30);
    let mixed = vec![
        udp(&pool, [10, 1, 0, 5], 1000),
        udp(&pool, [10, 2, 0, 5], 1000),
        bad,
        udp(&pool, [10, 1, 0, 5], 1000),
        udp(&pool, [10, 1, 0, 6], 1000),
    ];
    assert_eq!(send(&mut sw, &pool, 2, mixed), [0, 3, 1]);
    assert_eq!(sw.pipeline.stats().dropped(DropReason::Frame(frame::FrameError::TruncatedIpv4)), 1);
    // Uniform, into an output batch that already holds packets: appended, in order.
    let mut out = Outputs::new(3, 64, 64);
    let mut first = Batch::new(8);
    (0..3).for_each(|_| assert!(first.push(udp(&pool, [10, 1, 0, 5], 1000)).is_none()));
    sw.process(3, 0, &mut first, &mut out);
    assert_eq!(out.ports[1].len(), 3);
    let mut second = Batch::new(8);
    (0..5).for_each(|i| assert!(second.push(udp(&pool, [10, 1, 0, 5], 1000 + i)).is_none()));
    let before = sw.pipeline.stats().hits;
    sw.process(4, 0, &mut second, &mut out);
    // Flows 1001.. are new: up to the slow path and back out on port 1 after the three.
    assert_eq!(out.ports[1].len(), 8);
    assert!(second.is_empty());
    assert_eq!(sw.pipeline.stats().hits - before, 1);
    let ports: Vec<u16> = out.ports[1].iter().map(|p| frame::FrameInfo::parse(p.data()).unwrap().src_port).collect();
    assert_eq!(ports, [1000, 1000, 1000, 1000, 1001, 1002, 1003, 1004]);
    // Forwarded by rules (3 of the mixed batch, 3, 1) and by the slow path (2, 1, 4).
    let by_rules: u64 = sw.pipeline.stats().tx_packets.iter().sum();
    assert_eq!((by_rules, sw.cache_stats().slow_forwarded), (7, 7));
    for b in &mut out.ports {
        b.recycle(&pool);
    }
}

/// A packet the slow path decides to forward and that is dropped on its way out is counted
/// under its reason (`slow_exec_dropped`), so every drop of `slow_dropped` has a name: a full
/// output batch, a next hop on a port the switch does not have, and the slow path's own
/// decisions (`SlowPathStats::dropped`).
#[test]
fn the_slow_paths_drops_each_have_a_reason() {
    use tern_flow::switch::SLOW_EXEC_DROPS;
    let hop = |port: u16| NextHop { port, eth_src: [2, 0, 0, 0, 0, 1], eth_dst: [2, 0, 0, 0, 1, 1], vlan: None };
    let (mut sw, pool) = switch_hops(CacheMode::None, CachePolicy::default(), no_ssh(), vec![hop(1), hop(7)]);
    // Eight new flows to port 1, whose batch holds four; two to port 7, which is not there.
    let mut b = Batch::new(64);
    (0..8).for_each(|i| assert!(b.push(udp(&pool, [10, 1, 0, 5], 100 + i)).is_none()));
    (0..2).for_each(|i| assert!(b.push(udp(&pool, [10, 2, 0, 5], 200 + i)).is_none()));
    let mut out = Outputs::new(3, 4, 64);
    sw.process(0, 0, &mut b, &mut out);
    assert_eq!(out.ports[1].len(), 4);
    for b in &mut out.ports {
        b.recycle(&pool);
    }
    // One to 10.3/16, which has no route: the slow path's own drop.
    send(&mut sw, &pool, 1, vec![udp(&pool, [10, 3, 0, 5], 300)]);
    let s = sw.cache_stats().clone();
    let exec = |r: DropReason| s.slow_exec_dropped[SLOW_EXEC_DROPS.iter().position(|x| *x == r).unwrap()];
    assert_eq!((s.slow_forwarded, exec(DropReason::OutputQueueFull), exec(DropReason::NoSuchPort)), (4, 4, 2));
    let decided: u64 = sw.slow.stats().dropped.iter().sum();
    assert_eq!(decided, 1);
    assert_eq!(s.slow_dropped, decided + s.slow_exec_dropped.iter().sum::<u64>(), "every slow-path drop has a reason");
}
