//! The pipeline's fast path against its twin, the staged pipeline (`Pipeline::fast_path` off):
//! on random batches mixing frames the fast path carries with every kind it must hand over (a
//! miss, a hit in the second OFU, a rule that is not compiled or does not forward, a rule to
//! another port, an expiring TTL, no headroom for the tag, a tagged or IPv6 or non-IP or broken
//! frame), both pipelines give the same bytes on the same ports in the same order, the same host
//! queue, the same counters and the same rule counters.

use proptest::prelude::*;
use tern_flow::action::ActionSet;
use tern_flow::ofu::{self, Instruction, Match, OfuDriver, OfuKind, OfuSpec, Rule};
use tern_flow::pipeline::{Outputs, Pipeline};
use tern_io::{Batch, Packet, Pool};
use tern_table::em::FiveTuple4;
use tern_wire::frame;

const PAPER: &str =
    "set_field:eth_src=02:00:00:00:00:a1,set_field:eth_dst=02:00:00:00:01:01,dec_ttl,push_vlan:100,checksum";

/// Action sets of the EM rules, by flow.
fn sets() -> Vec<String> {
    vec![
        format!("{PAPER},output:1"),
        format!("{PAPER},output:1"),
        format!("{PAPER},output:0"),
        "dec_ttl,checksum,output:1".into(),
        "set_field:eth_dst=02:00:00:00:00:09,output:1".into(),
        "drop".into(),
        "checksum,dec_ttl,output:1".into(),
        "dec_ttl,checksum".into(),
        "output:5".into(),
    ]
}

/// Flow `i`: a UDP (even) or TCP (odd) 5-tuple; flows past the rules' are misses, and those
/// towards 10.2.0.0/16 hit the LPM OFU's rule instead.
fn tuple(i: u8) -> ([u8; 4], [u8; 4], u16, u16) {
    let dst = if i >= 12 { [10, 2, 0, i] } else { [10, 1, 0, i] };
    ([10, 0, 0, i], dst, 1000 + u16::from(i), 53)
}

fn frame_for(flow: u8, kind: u8, ttl: u8) -> Vec<u8> {
    let (s, d, sp, dp) = tuple(flow);
    let (a, b) = ([2, 0, 0, 0, 9, 9], [2, 0, 0, 0, 0, 0xa0]);
    let mut f = Vec::new();
    let body = [0x42u8; 22];
    match kind {
        0 if flow.is_multiple_of(2) => frame::build_udp4(&mut f, a, b, s, d, sp, dp, ttl, &body),
        0 => frame::build_tcp4(&mut f, a, b, s, d, sp, dp, ttl, &body),
        1 => {
            // Tagged.
            frame::build_udp4(&mut f, a, b, s, d, sp, dp, ttl, &body);
            f.splice(12..12, [0x81, 0x00, 0x00, 0x07]);
        }
        2 => {
            let (mut s6, mut d6) = ([0u8; 16], [0u8; 16]);
            s6[..2].copy_from_slice(&[0x20, 0x01]);
            d6[..2].copy_from_slice(&[0x20, 0x01]);
            s6[15] = flow;
            frame::build_udp6(&mut f, a, b, s6, d6, sp, dp, ttl, &body);
        }
        3 => {
            // Truncated inside the IPv4 header.
            frame::build_udp4(&mut f, a, b, s, d, sp, dp, ttl, &body);
            f.truncate(30);
        }
        _ => {
            // Not IP.
            f.extend_from_slice(&b);
            f.extend_from_slice(&a);
            f.extend_from_slice(&[0x08, 0x06]);
            f.extend_from_slice(&[0u8; 46]);
        }
    }
    f
}

fn pipeline(pool: &Pool, with_lpm: bool) -> (OfuDriver, Pipeline) {
    let spec = |id, kind| OfuSpec {
        id,
        kind,
        v4_entries: 64,
        v6_entries: 4,
        fifo_depth: 64,
        action_set_bits: 128,
        write_cycles: 0,
    };
    let mut specs = vec![spec(1, OfuKind::Em)];
    if with_lpm {
        specs.push(spec(2, OfuKind::Lpm));
    }
    let (driver, ofus) = ofu::new(specs);
    driver.ofu_init(1).unwrap();
    for (i, set) in sets().iter().enumerate() {
        let (s, d, sp, dp) = tuple(i as u8);
        let t = FiveTuple4 {
            src: u32::from_be_bytes(s),
            dst: u32::from_be_bytes(d),
            proto: if i.is_multiple_of(2) { 17 } else { 6 },
            src_port: sp,
            dst_port: dp,
        };
        let rule = Rule::new(Match::Tuple4(t), set.parse::<ActionSet>().unwrap());
        driver.rule_table_ops(1, Instruction::Populate { index: i as u32, rule }).unwrap();
    }
    if with_lpm {
        driver.ofu_init(2).unwrap();
        let set: ActionSet = format!("{PAPER},output:0").parse().unwrap();
        let rule = Rule::new(Match::Ipv4Dst("10.2.0.0/16".parse().unwrap()), set);
        driver.rule_table_ops(2, Instruction::Populate { index: 0, rule }).unwrap();
    }
    let mut p = Pipeline::new(ofus, 2, pool.clone());
    p.configure(0);
    (driver, p)
}

/// One packet of a batch: flow, frame kind (mostly plain), TTL, headroom.
fn packet() -> impl Strategy<Value = (u8, u8, u8, usize)> {
    (
        0u8..16,
        prop_oneof![8 => Just(0u8), 1 => 1u8..5],
        prop_oneof![6 => Just(64u8), 1 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)],
        prop_oneof![8 => Just(64usize), 1 => Just(0usize)],
    )
}

fn fill(pool: &Pool, spec: &[(u8, u8, u8, usize)]) -> Batch {
    let mut b = Batch::new(64);
    for &(flow, kind, ttl, headroom) in spec {
        let mut p: Packet = pool.packet();
        p.reserve_headroom(headroom);
        p.extend_from_slice(&frame_for(flow, kind, ttl)).unwrap();
        assert!(b.push(p).is_none());
    }
    b
}

/// Everything a batch produced, as plain data.
type Seen = (Vec<Vec<Vec<u8>>>, Vec<Vec<u8>>, Vec<u16>, Vec<frame::FrameInfo>);

fn drain(out: &mut Outputs, pool: &Pool) -> Seen {
    let ports = out.ports.iter().map(|b| b.iter().map(|p| p.data().to_vec()).collect()).collect();
    let host = out.host.packets.iter().map(|p| p.data().to_vec()).collect();
    let seen = (ports, host, out.host.in_ports.clone(), out.host.infos.clone());
    for b in &mut out.ports {
        b.recycle(pool);
    }
    out.host.packets.recycle(pool);
    out.host.in_ports.clear();
    out.host.infos.clear();
    seen
}

fn rule_counters(p: &Pipeline) -> Vec<(u32, u64, u64, u64)> {
    p.ofus().iter().flat_map(|o| o.entries().map(|(i, e)| (i, e.packets, e.bytes, e.last_hit_ns))).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn fast_path_matches_the_staged_pipeline(
        batches in proptest::collection::vec(proptest::collection::vec(packet(), 0..40), 1..4),
        with_lpm in any::<bool>(),
        keep_outputs in any::<bool>(),
    ) {
        let pool = Pool::new(512, 256);
        let (_da, mut fast) = pipeline(&pool, with_lpm);
        let (_db, mut staged) = pipeline(&pool, with_lpm);
        staged.fast_path = false;
        let (mut out_a, mut out_b) = (Outputs::new(2, 256, 256), Outputs::new(2, 256, 256));
        for (t, spec) in batches.iter().enumerate() {
            let now = 10 * (t as u64 + 1);
            let (mut a, mut b) = (fill(&pool, spec), fill(&pool, spec));
            fast.process(now, 3, &mut a, &mut out_a);
            staged.process(now, 3, &mut b, &mut out_b);
            prop_assert!(a.is_empty() && b.is_empty());
            // Left in place, the next batch goes after what is queued (no whole-batch hand-over).
            if !keep_outputs || t + 1 == batches.len() {
                prop_assert_eq!(drain(&mut out_a, &pool), drain(&mut out_b, &pool));
            }
            // The same counters, but for the fast path's own count of what it carried.
            prop_assert_eq!(staged.stats().fast_path, 0);
            prop_assert!(fast.stats().fast_path <= fast.stats().hits);
            let mut fast_stats = fast.stats().clone();
            fast_stats.fast_path = 0;
            prop_assert_eq!(&fast_stats, staged.stats());
            prop_assert_eq!(rule_counters(&fast), rule_counters(&staged));
        }
    }
}

/// The fast path carries what it should: a batch of one cached flow under the paper's action
/// set changes hands whole, with every packet counted as a hit and as carried by the fast path
/// (its exact-match key packed from the frame finds the rule the slow path installed from the
/// parsed tuple), alone or with an LPM OFU beside it; and a flow only the LPM OFU matches.
#[test]
fn a_cached_batch_takes_the_fast_path() {
    for (with_lpm, flow, port) in [(false, 0u8, 1usize), (true, 0, 1), (true, 20, 0)] {
        let pool = Pool::new(256, 256);
        let (_d, mut p) = pipeline(&pool, with_lpm);
        let mut out = Outputs::new(2, 64, 64);
        let mut b = fill(&pool, &[(flow, 0, 64, 64); 32]);
        p.process(1, 0, &mut b, &mut out);
        let s = p.stats();
        assert_eq!((out.ports[port].len(), s.hits, s.fast_path, s.tx_packets[port]), (32, 32, 32, 32), "{flow}");
        let f = out.ports[port].iter().next().unwrap().data().to_vec();
        let info = frame::FrameInfo::parse(&f).unwrap();
        assert_eq!((info.vlans, info.vlan_tci, info.ttl), (1, 100, 63));
        drain(&mut out, &pool);
    }
}
