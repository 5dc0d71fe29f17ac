//! The software switch behind the OFUs: what decides the packets the cached rules miss.
//!
//! Three OpenFlow-like tables, looked up in turn:
//!
//! 1. **ACL** — prioritized patterns over in_port, addresses, protocol and port ranges, each
//!    allowing or denying, searched by a tuple-space-search [`Classifier`];
//! 2. **L3 routing** — longest-prefix match on the destination (IPv4 and IPv6 tables from
//!    `tern-table`), giving a next-hop id;
//! 3. **next hop / rewrite** — per next hop the output port, the MAC addresses to write and an
//!    optional VLAN to push.
//!
//! A decision comes with the action set that carries it out (set MACs, `dec_ttl`, `push_vlan`,
//! `checksum` on IPv4, `output`) and a [`CacheHint`]: whether an exact 5-tuple rule may cache it
//! (only if the ACL did not consult the input port, which the 5-tuple does not hold) and the
//! longest prefix a destination-only rule may cache it under (only if the ACL consulted nothing
//! but destination bits, and long enough that no more specific route lies inside it).

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use tern_table::lpm::{Lpm4, Lpm6, LpmKey};
use tern_wire::frame::{FrameInfo, L3};

use crate::action::{Action, ActionSet, SetField};
use crate::classifier::{Classifier, FlowKey, Pattern};

/// What an ACL rule does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclAction {
    /// Continue to routing.
    Allow,
    /// Drop.
    Deny,
}

/// An ACL rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRule {
    /// What it matches (with its priority).
    pub pattern: Pattern,
    /// What it does.
    pub action: AclAction,
}

/// A next hop: where and how routed packets leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NextHop {
    /// Output port.
    pub port: u16,
    /// Source MAC written on the way out (the port's own).
    pub eth_src: [u8; 6],
    /// Destination MAC (the neighbour's).
    pub eth_dst: [u8; 6],
    /// VLAN id to push, if any.
    pub vlan: Option<u16>,
}

/// The slow path's tables.
#[derive(Debug, Clone, Default)]
pub struct SlowPathTables {
    /// ACL rules.
    pub acl: Vec<AclRule>,
    /// What the ACL does when no rule matches.
    pub acl_default_deny: bool,
    /// IPv4 routes to next-hop ids.
    pub routes4: Vec<(Ipv4Net, u32)>,
    /// IPv6 routes to next-hop ids.
    pub routes6: Vec<(Ipv6Net, u32)>,
    /// Next hops by id.
    pub next_hops: Vec<NextHop>,
}

/// Why the slow path dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SlowDrop {
    /// Not IPv4 or IPv6.
    NotIp,
    /// An ACL rule (or the default) denied it.
    AclDeny,
    /// TTL / hop limit would expire.
    TtlExpired,
    /// No route to the destination.
    NoRoute,
}

impl SlowDrop {
    /// Every reason, in counter order.
    pub const ALL: [SlowDrop; 4] = [SlowDrop::NotIp, SlowDrop::AclDeny, SlowDrop::TtlExpired, SlowDrop::NoRoute];

    /// Counter name.
    pub fn as_str(self) -> &'static str {
        match self {
            SlowDrop::NotIp => "not_ip",
            SlowDrop::AclDeny => "acl_deny",
            SlowDrop::TtlExpired => "ttl_expired",
            SlowDrop::NoRoute => "no_route",
        }
    }
}

/// What the slow path's tables say about one packet (see [`SlowPath::explain`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowTrace {
    /// The ACL rule that matched, by index.
    pub acl_rule: Option<usize>,
    /// ACL subtables probed.
    pub acl_probes: u32,
    /// Whether the ACL (or its default) denies it.
    pub denied: bool,
    /// The longest matching route and its next hop id.
    pub route: Option<(IpNet, u32)>,
}

/// How a decision may be cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheHint {
    /// An exact 5-tuple rule gives the same decision for every packet of the flow.
    pub exact: bool,
    /// A destination-prefix rule with this prefix gives the same decision for every packet in it.
    pub prefix: Option<IpNet>,
}

/// A decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Forward with the actions of this next hop ([`SlowPath::actions`]).
    Forward(Hop),
    /// Drop.
    Drop(SlowDrop),
}

/// A next hop's action set for one IP version, as the slow path holds it: a decision names it
/// rather than copying it, so deciding a packet moves no action set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    index: u32,
    v6: bool,
}

/// Counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlowPathStats {
    /// Packets decided.
    pub decided: u64,
    /// Forwarded.
    pub forwarded: u64,
    /// Dropped, by reason (`SlowDrop` order: not_ip, acl_deny, ttl_expired, no_route).
    pub dropped: [u64; 4],
    /// Classifier subtables probed in total.
    pub acl_probes: u64,
}

/// The software switch.
#[derive(Debug)]
pub struct SlowPath {
    acl: Classifier,
    acl_actions: Vec<AclAction>,
    acl_default_deny: bool,
    fib4: Lpm4,
    fib6: Lpm6,
    routes4: BTreeSet<(u32, u8)>,
    routes6: BTreeSet<(u128, u8)>,
    /// Each next hop's action set for IPv4 and IPv6, built once (packets share them).
    hop_actions: Vec<[ActionSet; 2]>,
    stats: SlowPathStats,
}

impl SlowPath {
    /// Builds the tables; errors name the bad rule or route.
    pub fn new(t: &SlowPathTables) -> Result<SlowPath, String> {
        let patterns: Vec<Pattern> = t.acl.iter().map(|r| r.pattern.clone()).collect();
        let acl = Classifier::new(&patterns).map_err(|e| format!("acl {e}"))?;
        let mut fib4 = Lpm4::new();
        let mut fib6 = Lpm6::new();
        let check = |nh: u32, route: &dyn std::fmt::Display| {
            if (nh as usize) < t.next_hops.len() {
                Ok(())
            } else {
                Err(format!("route {route}: next hop {nh} does not exist ({} next hops)", t.next_hops.len()))
            }
        };
        for (net, nh) in &t.routes4 {
            check(*nh, net)?;
            fib4.insert(net.trunc(), *nh).map_err(|e| format!("route {net}: {e}"))?;
        }
        for (net, nh) in &t.routes6 {
            check(*nh, net)?;
            fib6.insert(net.trunc(), *nh).map_err(|e| format!("route {net}: {e}"))?;
        }
        Ok(SlowPath {
            acl,
            acl_actions: t.acl.iter().map(|r| r.action).collect(),
            acl_default_deny: t.acl_default_deny,
            routes4: t.routes4.iter().map(|(n, _)| (u32::from(n.network()), n.prefix_len())).collect(),
            routes6: t.routes6.iter().map(|(n, _)| (u128::from(n.network()), n.prefix_len())).collect(),
            fib4,
            fib6,
            hop_actions: t
                .next_hops
                .iter()
                .map(|n| [Self::next_hop_actions(n, false), Self::next_hop_actions(n, true)])
                .collect(),
            stats: SlowPathStats::default(),
        })
    }

    /// Counters.
    pub fn stats(&self) -> &SlowPathStats {
        &self.stats
    }

    /// ACL subtables (distinct masks).
    pub fn acl_subtables(&self) -> usize {
        self.acl.subtables()
    }

    fn drop(&mut self, why: SlowDrop, hint: CacheHint) -> (Decision, CacheHint) {
        self.stats.dropped[why as usize] += 1;
        (Decision::Drop(why), hint)
    }

    fn acl_key(in_port: u16, info: &FrameInfo) -> FlowKey {
        FlowKey {
            in_port,
            v6: info.l3 == L3::Ipv6,
            src: info.src,
            dst: info.dst,
            proto: info.proto,
            src_port: info.src_port,
            dst_port: info.dst_port,
        }
    }

    /// Whether the ACL rule that matched (or, with none, the default) denies.
    fn denies(&self, rule: Option<usize>) -> bool {
        match rule {
            Some(r) => self.acl_actions[r] == AclAction::Deny,
            None => self.acl_default_deny,
        }
    }

    /// Decides a packet that came in on `in_port`.
    pub fn decide(&mut self, in_port: u16, info: &FrameInfo) -> (Decision, CacheHint) {
        self.stats.decided += 1;
        if info.l3 == L3::Other {
            return self.drop(SlowDrop::NotIp, CacheHint::default());
        }
        let v6 = info.l3 == L3::Ipv6;
        let key = Self::acl_key(in_port, info);
        let acl = self.acl.lookup(&key);
        self.stats.acl_probes += u64::from(acl.probes);
        let exact = acl.consulted.in_port == 0;
        let acl_dst_bits =
            if v6 { acl.consulted.dst.leading_ones() } else { (acl.consulted.dst as u32).leading_ones() };
        let prefix_ok = !acl.consulted.beyond_dst();
        let denied = self.denies(acl.rule);
        if denied {
            let prefix = prefix_ok.then(|| self.safe_prefix(v6, info.dst, acl_dst_bits));
            return self.drop(SlowDrop::AclDeny, CacheHint { exact, prefix });
        }
        if info.ttl <= 1 {
            return self.drop(SlowDrop::TtlExpired, CacheHint::default());
        }
        let route = if v6 { self.fib6.lookup_key(info.dst) } else { self.fib4.lookup_key(info.dst as u32) };
        let Some(nh) = route else {
            return self.drop(SlowDrop::NoRoute, CacheHint::default());
        };
        self.stats.forwarded += 1;
        let prefix = prefix_ok.then(|| self.safe_prefix(v6, info.dst, acl_dst_bits));
        (Decision::Forward(Hop { index: nh, v6 }), CacheHint { exact, prefix })
    }

    /// The action set of a next hop a decision names (`None` for one of other tables).
    #[inline]
    pub fn actions(&self, hop: Hop) -> Option<&ActionSet> {
        self.hop_actions.get(hop.index as usize).map(|a| &a[usize::from(hop.v6)])
    }

    /// What the tables say about a packet, for `trace` (no counters change): the ACL rule that
    /// matched (if any), whether it is denied, and the route with its next hop.
    pub fn explain(&self, in_port: u16, info: &FrameInfo) -> SlowTrace {
        let v6 = info.l3 == L3::Ipv6;
        let key = Self::acl_key(in_port, info);
        let acl = self.acl.lookup(&key);
        let denied = self.denies(acl.rule);
        let route = if v6 {
            let len = (0..=128u32).rev().find(|&l| self.routes6.contains(&(info.dst.masked(l), l as u8)));
            len.and_then(|l| {
                let net = IpNet::V6(Ipv6Net::new_assert(Ipv6Addr::from(info.dst.masked(l)), l as u8));
                Some((net, self.fib6.lookup_key(info.dst)?))
            })
        } else {
            let d = info.dst as u32;
            let len = (0..=32u32).rev().find(|&l| self.routes4.contains(&(d.masked(l), l as u8)));
            len.and_then(|l| {
                let net = IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::from(d.masked(l)), l as u8));
                Some((net, self.fib4.lookup_key(d)?))
            })
        };
        SlowTrace { acl_rule: acl.rule, acl_probes: acl.probes, denied, route }
    }

    /// The action set of a packet routed to `nh`: the paper's set MACs, TTL decrement, VLAN
    /// insert (if the next hop has one), checksum (IPv4) and output.
    pub fn next_hop_actions(nh: &NextHop, v6: bool) -> ActionSet {
        let mut actions = vec![
            Action::SetField(SetField::EthSrc(nh.eth_src)),
            Action::SetField(SetField::EthDst(nh.eth_dst)),
            Action::DecTtl,
        ];
        if let Some(vid) = nh.vlan {
            actions.push(Action::PushVlan { tci: vid });
        }
        if !v6 {
            actions.push(Action::Checksum);
        }
        actions.push(Action::Output(nh.port));
        ActionSet::new(actions).unwrap_or_default()
    }

    /// The shortest prefix of `dst`, at least `min_len` long and at least as long as its route,
    /// that holds no more specific route: a destination-only rule for it decides like the tables.
    fn safe_prefix(&self, v6: bool, dst: u128, min_len: u32) -> IpNet {
        if v6 {
            let route_len = (0..=128u32).rev().find(|&l| self.routes6.contains(&(dst.masked(l), l as u8))).unwrap_or(0);
            let mut k = min_len.max(route_len);
            while k < 128 {
                let lo = dst.masked(k);
                let hi = lo | if k == 0 { u128::MAX } else { u128::MAX >> k };
                if !self.routes6.range((lo, 0)..=(hi, 128)).any(|&(_, l)| u32::from(l) > k) {
                    break;
                }
                k += 1;
            }
            IpNet::V6(Ipv6Net::new_assert(Ipv6Addr::from(dst.masked(k)), k as u8))
        } else {
            let d = dst as u32;
            let route_len = (0..=32u32).rev().find(|&l| self.routes4.contains(&(d.masked(l), l as u8))).unwrap_or(0);
            let mut k = min_len.max(route_len);
            while k < 32 {
                let lo = d.masked(k);
                let hi = lo | if k == 0 { u32::MAX } else { u32::MAX >> k };
                if !self.routes4.range((lo, 0)..=(hi, 32)).any(|&(_, l)| u32::from(l) > k) {
                    break;
                }
                k += 1;
            }
            IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::from(d.masked(k)), k as u8))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classifier::PortRange;

    fn info4(dst: [u8; 4], proto: u8, dport: u16, ttl: u8) -> FrameInfo {
        FrameInfo {
            l3: L3::Ipv4,
            src: u128::from(u32::from(Ipv4Addr::new(192, 168, 0, 1))),
            dst: u128::from(u32::from(Ipv4Addr::from(dst))),
            proto,
            src_port: 1000,
            dst_port: dport,
            ttl,
            has_l4: true,
            ..FrameInfo::default()
        }
    }

    fn tables() -> SlowPathTables {
        let any = Pattern::default();
        SlowPathTables {
            acl: vec![
                AclRule {
                    pattern: Pattern { priority: 10, proto: Some(6), dst_port: Some(PortRange(23, 23)), ..any.clone() },
                    action: AclAction::Deny,
                },
                AclRule { pattern: Pattern { priority: 5, in_port: Some(3), ..any.clone() }, action: AclAction::Deny },
            ],
            acl_default_deny: false,
            routes4: vec![
                ("10.0.0.0/8".parse().unwrap(), 0),
                ("10.1.0.0/16".parse().unwrap(), 1),
                ("10.1.2.0/24".parse().unwrap(), 0),
            ],
            routes6: vec![],
            next_hops: vec![
                NextHop { port: 1, eth_src: [2, 0, 0, 0, 0, 1], eth_dst: [2, 0, 0, 0, 1, 1], vlan: None },
                NextHop { port: 2, eth_src: [2, 0, 0, 0, 0, 2], eth_dst: [2, 0, 0, 0, 2, 2], vlan: Some(7) },
            ],
        }
    }

    #[test]
    fn routes_acl_and_cache_hints() {
        let mut s = SlowPath::new(&tables()).unwrap();
        let (d, h) = s.decide(0, &info4([10, 1, 9, 9], 17, 53, 64));
        let Decision::Forward(hop) = d else { panic!("{d:?}") };
        assert_eq!(
            s.actions(hop),
            Some(
                &"set_field:eth_src=02:00:00:00:00:02,set_field:eth_dst=02:00:00:00:02:02,dec_ttl,push_vlan:7,checksum,output:2"
                    .parse()
                    .unwrap()
            )
        );
        // The ACL consulted in_port (the priority-5 subtable): no exact cache, no prefix cache.
        assert!(!h.exact);
        assert_eq!(h.prefix, None);
        let (d, _) = s.decide(0, &info4([10, 1, 9, 9], 6, 23, 64));
        assert_eq!(d, Decision::Drop(SlowDrop::AclDeny));
        assert_eq!(s.decide(3, &info4([10, 9, 9, 9], 17, 53, 64)).0, Decision::Drop(SlowDrop::AclDeny));
        assert_eq!(s.decide(0, &info4([11, 0, 0, 1], 17, 53, 64)).0, Decision::Drop(SlowDrop::NoRoute));
        assert_eq!(s.decide(0, &info4([10, 0, 0, 1], 17, 53, 1)).0, Decision::Drop(SlowDrop::TtlExpired));
        assert_eq!(s.stats().dropped, [0, 2, 1, 1]);
    }

    #[test]
    fn prefix_hint_excludes_more_specific_routes() {
        let mut t = tables();
        t.acl.clear();
        let mut s = SlowPath::new(&t).unwrap();
        let (_, h) = s.decide(0, &info4([10, 1, 9, 9], 17, 53, 64));
        assert!(h.exact);
        // 10.1.0.0/16 holds 10.1.2.0/24: the cached prefix must be long enough to exclude it.
        let p = h.prefix.unwrap();
        assert!(p.contains(&"10.1.9.9".parse::<std::net::IpAddr>().unwrap()));
        assert!(!p.contains(&"10.1.2.1".parse::<std::net::IpAddr>().unwrap()), "{p}");
        assert_eq!(p.to_string(), "10.1.8.0/21");
        // Under 10.0.0.0/8, away from the /16: a short prefix.
        let (_, h) = s.decide(0, &info4([10, 200, 0, 1], 17, 53, 64));
        assert_eq!(h.prefix.unwrap().to_string(), "10.128.0.0/9");
        let (_, h) = s.decide(0, &info4([10, 1, 2, 3], 17, 53, 64));
        assert_eq!(h.prefix.unwrap().to_string(), "10.1.2.0/24");
    }
}
