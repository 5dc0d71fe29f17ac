//! Property tests: the tuple-space-search classifier agrees with the naive rule loop, and its
//! decisions depend only on the bits it says it consulted (what makes caching them sound).

use ipnet::{IpNet, Ipv4Net};
use proptest::prelude::*;
use tern_table::classifier::{Classifier, FlowKey, Matcher, NaiveClassifier, Pattern, PortRange};

fn net() -> impl Strategy<Value = Option<IpNet>> {
    prop_oneof![
        2 => Just(None),
        3 => (0u32..8, 0u8..=32).prop_map(|(x, l)| Some(IpNet::V4(Ipv4Net::new_assert((0x0a00_0000 | (x << 20)).into(), l).trunc()))),
    ]
}

fn ports() -> impl Strategy<Value = Option<PortRange>> {
    prop_oneof![3 => Just(None), 1 => (0u16..20, 0u16..20).prop_map(|(a, b)| Some(PortRange(a.min(b), a.max(b))))]
}

fn pattern() -> impl Strategy<Value = Pattern> {
    (
        0u32..8,
        prop::option::of(0u16..3),
        net(),
        net(),
        prop::option::of(prop_oneof![Just(6u8), Just(17u8)]),
        ports(),
        ports(),
    )
        .prop_map(|(priority, in_port, src, dst, proto, src_port, dst_port)| Pattern {
            priority,
            in_port,
            v6: None,
            src,
            dst,
            proto,
            src_port,
            dst_port,
        })
}

fn key() -> impl Strategy<Value = FlowKey> {
    (0u16..3, 0u32..(1 << 24), 0u32..(1 << 24), prop_oneof![Just(6u8), Just(17u8), Just(1u8)], 0u16..24, 0u16..24)
        .prop_map(|(in_port, s, d, proto, sp, dp)| FlowKey {
            in_port,
            v6: false,
            src: u128::from(0x0a00_0000 | (s & 0x00ff_ffff)),
            dst: u128::from(0x0a00_0000 | (d & 0x00ff_ffff)),
            proto,
            src_port: sp,
            dst_port: dp,
        })
}

/// Any pattern, the families of its prefixes and its `v6` free to disagree.
fn any_pattern() -> impl Strategy<Value = Pattern> {
    let net6 = (0u128..4, 0u8..=128)
        .prop_map(|(x, l)| IpNet::V6(ipnet::Ipv6Net::new_assert(((0xfd00u128 << 112) | (x << 100)).into(), l).trunc()));
    let net = prop_oneof![2 => net(), 1 => net6.prop_map(Some)];
    (pattern(), prop::option::of(any::<bool>()), net.clone(), net).prop_map(|(mut p, v6, src, dst)| {
        p.v6 = v6;
        p.src = src;
        p.dst = dst;
        p
    })
}

/// Any key, of either family.
fn any_key() -> impl Strategy<Value = FlowKey> {
    (key(), any::<bool>(), 0u128..4, 0u128..4).prop_map(|(mut k, v6, s, d)| {
        if v6 {
            k.v6 = true;
            k.src = (0xfd00u128 << 112) | (s << 100) | (k.src & 0xff);
            k.dst = (0xfd00u128 << 112) | (d << 100) | (k.dst & 0xff);
        }
        k
    })
}

proptest! {
    #[test]
    fn matcher_agrees_with_its_pattern(p in any_pattern(), keys in prop::collection::vec(any_key(), 1..32)) {
        let m = Matcher::new(&p);
        for k in &keys {
            prop_assert_eq!(m.matches(k), p.matches(k), "pattern {:?} key {:?}", p, k);
        }
    }

    #[test]
    fn tss_agrees_with_naive(rules in prop::collection::vec(pattern(), 0..24), keys in prop::collection::vec(key(), 1..32)) {
        let c = Classifier::new(&rules).unwrap();
        let n = NaiveClassifier::new(&rules);
        for k in &keys {
            let l = c.lookup(k);
            prop_assert_eq!(l.rule, n.lookup(k), "key {:?}", k);
        }
    }

    #[test]
    fn decisions_depend_only_on_consulted_bits(rules in prop::collection::vec(pattern(), 0..24), k in key(), other in key()) {
        let c = Classifier::new(&rules).unwrap();
        let n = NaiveClassifier::new(&rules);
        let l = c.lookup(&k);
        // A key that agrees with `k` on every consulted bit and takes `other`'s bits elsewhere.
        let m = l.consulted;
        let mixed = FlowKey {
            in_port: (k.in_port & m.in_port) | (other.in_port & !m.in_port),
            v6: k.v6,
            src: (k.src & m.src) | (other.src & !m.src),
            dst: (k.dst & m.dst) | (other.dst & !m.dst),
            proto: (k.proto & m.proto) | (other.proto & !m.proto),
            src_port: (k.src_port & m.src_port) | (other.src_port & !m.src_port),
            dst_port: (k.dst_port & m.dst_port) | (other.dst_port & !m.dst_port),
        };
        prop_assert_eq!(n.lookup(&mixed), l.rule);
    }
}
