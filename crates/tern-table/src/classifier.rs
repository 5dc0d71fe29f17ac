//! A tuple-space-search packet classifier (as Open vSwitch's): rules with masked fields grouped
//! into subtables by mask, one hash lookup per subtable, subtables visited in order of their
//! highest priority so the search stops once no remaining subtable can beat the best match.
//! Port ranges are expanded into prefix-masked values.
//!
//! Every lookup also reports which bits it *consulted* — the union of the masks of the
//! subtables it probed — so a cache built from its decisions knows which fields the decision
//! depends on (Open vSwitch's megaflow wildcards).
//!
//! [`NaiveClassifier`] is the reference twin: every rule tested in priority order.

use hashbrown::HashMap;
use ipnet::IpNet;

/// The fields rules match on, as one key (IPv4 addresses in the low 32 bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FlowKey {
    /// Input port.
    pub in_port: u16,
    /// IPv6 (else IPv4). Always matched exactly.
    pub v6: bool,
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// IP protocol.
    pub proto: u8,
    /// Transport source port.
    pub src_port: u16,
    /// Transport destination port.
    pub dst_port: u16,
}

impl FlowKey {
    /// The key with `mask` applied (the family bit is kept).
    #[inline]
    pub fn masked(&self, m: &FlowKey) -> FlowKey {
        FlowKey {
            in_port: self.in_port & m.in_port,
            v6: self.v6,
            src: self.src & m.src,
            dst: self.dst & m.dst,
            proto: self.proto & m.proto,
            src_port: self.src_port & m.src_port,
            dst_port: self.dst_port & m.dst_port,
        }
    }

    /// Bitwise union of two masks.
    pub fn union(&self, m: &FlowKey) -> FlowKey {
        FlowKey {
            in_port: self.in_port | m.in_port,
            v6: self.v6 | m.v6,
            src: self.src | m.src,
            dst: self.dst | m.dst,
            proto: self.proto | m.proto,
            src_port: self.src_port | m.src_port,
            dst_port: self.dst_port | m.dst_port,
        }
    }

    /// Whether a mask consults any field besides the destination address.
    pub fn beyond_dst(&self) -> bool {
        self.in_port != 0 || self.src != 0 || self.proto != 0 || self.src_port != 0 || self.dst_port != 0
    }
}

/// An inclusive port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange(pub u16, pub u16);

impl PortRange {
    /// The range as (value, mask) prefix blocks.
    pub fn blocks(&self) -> Vec<(u16, u16)> {
        let (mut lo, hi) = (u32::from(self.0), u32::from(self.1));
        let mut out = Vec::new();
        while lo <= hi {
            // The largest aligned block starting at `lo` that stays within `hi`.
            let mut size = if lo == 0 { 1 << 16 } else { 1u32 << lo.trailing_zeros() };
            while lo + size - 1 > hi {
                size >>= 1;
            }
            out.push((lo as u16, !((size - 1) as u16)));
            lo += size;
        }
        out
    }

    fn contains(&self, p: u16) -> bool {
        (self.0..=self.1).contains(&p)
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;
    fn from_str(s: &str) -> Result<PortRange, String> {
        let bad = || format!("`{s}` is not a port or a range `LO-HI`");
        match s.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u16, u16) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
                if a > b {
                    return Err(format!("port range `{s}` is empty"));
                }
                Ok(PortRange(a, b))
            }
            None => {
                let p = s.trim().parse().map_err(|_| bad())?;
                Ok(PortRange(p, p))
            }
        }
    }
}

/// A classifier rule: fields left `None` match anything (the default matches everything).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pattern {
    /// Higher wins.
    pub priority: u32,
    /// Input port.
    pub in_port: Option<u16>,
    /// IPv6 only (`Some(true)`), IPv4 only (`Some(false)`), or both; implied by the prefixes.
    pub v6: Option<bool>,
    /// Source prefix.
    pub src: Option<IpNet>,
    /// Destination prefix.
    pub dst: Option<IpNet>,
    /// IP protocol.
    pub proto: Option<u8>,
    /// Source ports.
    pub src_port: Option<PortRange>,
    /// Destination ports.
    pub dst_port: Option<PortRange>,
}

fn net_bits(n: &IpNet) -> (u128, u128) {
    match n {
        IpNet::V4(n) => (u128::from(u32::from(n.network())), u128::from(u32::from(n.netmask()))),
        IpNet::V6(n) => (u128::from(n.network()), u128::from(n.netmask())),
    }
}

/// A [`Pattern`] compiled to test keys one at a time without branching on its `None`s: each
/// field a (value, mask) or a range that a missing field makes match everything, the
/// families it applies to settled once. [`Pattern::matches`] is its reference twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matcher {
    /// 0: IPv4 keys only; 1: IPv6 only; 2: both; 3: none (the pattern's families disagree).
    family: u8,
    in_port: (u16, u16),
    src: (u128, u128),
    dst: (u128, u128),
    proto: (u8, u8),
    src_port: (u16, u16),
    dst_port: (u16, u16),
}

impl Matcher {
    /// `p`, compiled.
    pub fn new(p: &Pattern) -> Matcher {
        // A prefix tests the key's family as well as its bits: the families `v6` and the
        // prefixes leave (2: any; 3: they disagree, nothing matches).
        let family = match p.families().as_deref() {
            Ok([f]) => u8::from(*f),
            Ok(_) => 2,
            Err(_) => 3,
        };
        let net = |n: &Option<IpNet>| n.as_ref().map_or((0, 0), net_bits);
        let range = |r: Option<PortRange>| r.map_or((0, u16::MAX), |r| (r.0, r.1));
        Matcher {
            family,
            in_port: p.in_port.map_or((0, 0), |v| (v, u16::MAX)),
            src: net(&p.src),
            dst: net(&p.dst),
            proto: p.proto.map_or((0, 0), |v| (v, u8::MAX)),
            src_port: range(p.src_port),
            dst_port: range(p.dst_port),
        }
    }

    /// Whether the pattern matches a key.
    #[inline]
    pub fn matches(&self, k: &FlowKey) -> bool {
        (self.family == 2 || self.family == u8::from(k.v6))
            & (k.in_port & self.in_port.1 == self.in_port.0)
            & (k.src & self.src.1 == self.src.0)
            & (k.dst & self.dst.1 == self.dst.0)
            & (k.proto & self.proto.1 == self.proto.0)
            & (self.src_port.0 <= k.src_port && k.src_port <= self.src_port.1)
            & (self.dst_port.0 <= k.dst_port && k.dst_port <= self.dst_port.1)
    }
}

impl Pattern {
    /// The families it applies to; an error if its prefixes disagree.
    pub fn families(&self) -> Result<Vec<bool>, String> {
        let mut fam = self.v6;
        for n in [self.src, self.dst].into_iter().flatten() {
            let v6 = matches!(n, IpNet::V6(_));
            if fam.is_some_and(|f| f != v6) {
                return Err(format!("prefix {n} is not of the rule's IP version"));
            }
            fam = Some(v6);
        }
        Ok(match fam {
            Some(f) => vec![f],
            None => vec![false, true],
        })
    }

    /// Whether the pattern matches a key.
    pub fn matches(&self, k: &FlowKey) -> bool {
        let net_ok = |n: &Option<IpNet>, a: u128| {
            n.as_ref().is_none_or(|n| {
                let (v, m) = net_bits(n);
                matches!(n, IpNet::V6(_)) == k.v6 && a & m == v
            })
        };
        self.v6.is_none_or(|f| f == k.v6)
            && self.in_port.is_none_or(|p| p == k.in_port)
            && net_ok(&self.src, k.src)
            && net_ok(&self.dst, k.dst)
            && self.proto.is_none_or(|p| p == k.proto)
            && self.src_port.is_none_or(|r| r.contains(k.src_port))
            && self.dst_port.is_none_or(|r| r.contains(k.dst_port))
    }

    /// The (value, mask) keys the pattern expands into.
    fn expand(&self) -> Result<Vec<(FlowKey, FlowKey)>, String> {
        let mut out = Vec::new();
        let any_port = [(0u16, 0u16)];
        let sp = self.src_port.map(|r| r.blocks());
        let dp = self.dst_port.map(|r| r.blocks());
        for v6 in self.families()? {
            let (src, src_m) = self.src.as_ref().map_or((0, 0), net_bits);
            let (dst, dst_m) = self.dst.as_ref().map_or((0, 0), net_bits);
            for &(s, sm) in sp.as_deref().unwrap_or(&any_port) {
                for &(d, dm) in dp.as_deref().unwrap_or(&any_port) {
                    let mask = FlowKey {
                        in_port: if self.in_port.is_some() { u16::MAX } else { 0 },
                        v6: true,
                        src: src_m,
                        dst: dst_m,
                        proto: if self.proto.is_some() { u8::MAX } else { 0 },
                        src_port: sm,
                        dst_port: dm,
                    };
                    let value = FlowKey {
                        in_port: self.in_port.unwrap_or(0),
                        v6,
                        src,
                        dst,
                        proto: self.proto.unwrap_or(0),
                        src_port: s,
                        dst_port: d,
                    };
                    out.push((value, mask));
                }
            }
        }
        Ok(out)
    }
}

#[derive(Debug)]
struct Subtable {
    mask: FlowKey,
    max_priority: u32,
    /// Masked key → (priority, rule id): the best rule for that key in this subtable.
    rules: HashMap<FlowKey, (u32, usize)>,
}

/// The result of a lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup {
    /// The matching rule with the highest priority (ties: the one given first).
    pub rule: Option<usize>,
    /// The bits the decision depended on.
    pub consulted: FlowKey,
    /// Subtables probed.
    pub probes: u32,
}

/// A tuple-space-search classifier over a fixed set of rules (rebuild it to change them).
#[derive(Debug)]
pub struct Classifier {
    subtables: Vec<Subtable>,
}

impl Classifier {
    /// Builds the classifier; rule ids are positions in `rules`.
    pub fn new(rules: &[Pattern]) -> Result<Classifier, String> {
        let mut by_mask: HashMap<FlowKey, Subtable> = HashMap::new();
        for (id, r) in rules.iter().enumerate() {
            for (value, mask) in r.expand().map_err(|e| format!("rule {id}: {e}"))? {
                let st =
                    by_mask.entry(mask).or_insert_with(|| Subtable { mask, max_priority: 0, rules: HashMap::new() });
                st.max_priority = st.max_priority.max(r.priority);
                let slot = st.rules.entry(value).or_insert((r.priority, id));
                // Higher priority wins; among equals, the rule given first.
                if r.priority > slot.0 {
                    *slot = (r.priority, id);
                }
            }
        }
        let mut subtables: Vec<Subtable> = by_mask.into_values().collect();
        subtables.sort_by_key(|s| std::cmp::Reverse(s.max_priority));
        Ok(Classifier { subtables })
    }

    /// Subtables (distinct masks).
    pub fn subtables(&self) -> usize {
        self.subtables.len()
    }

    /// The highest-priority rule matching `key`.
    pub fn lookup(&self, key: &FlowKey) -> Lookup {
        let mut best: Option<(u32, usize)> = None;
        let mut consulted = FlowKey { v6: true, ..FlowKey::default() };
        let mut probes = 0;
        for st in &self.subtables {
            if let Some((p, _)) = best
                && st.max_priority < p
            {
                break;
            }
            probes += 1;
            consulted = consulted.union(&st.mask);
            if let Some(&(p, id)) = st.rules.get(&key.masked(&st.mask)) {
                let better = match best {
                    None => true,
                    Some((bp, bid)) => p > bp || (p == bp && id < bid),
                };
                if better {
                    best = Some((p, id));
                }
            }
        }
        Lookup { rule: best.map(|b| b.1), consulted, probes }
    }
}

/// The reference twin: rules tested one by one.
#[derive(Debug, Clone)]
pub struct NaiveClassifier {
    rules: Vec<Pattern>,
}

impl NaiveClassifier {
    /// Over these rules.
    pub fn new(rules: &[Pattern]) -> NaiveClassifier {
        NaiveClassifier { rules: rules.to_vec() }
    }

    /// The highest-priority matching rule (ties: the one given first).
    pub fn lookup(&self, key: &FlowKey) -> Option<usize> {
        let mut best: Option<(u32, usize)> = None;
        for (id, r) in self.rules.iter().enumerate() {
            if r.matches(key) && best.is_none_or(|(p, _)| r.priority > p) {
                best = Some((r.priority, id));
            }
        }
        best.map(|b| b.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_range_blocks_cover_exactly() {
        for (lo, hi) in [(0u16, 65535u16), (1000, 1999), (80, 80), (1, 6), (65535, 65535), (0, 0), (1024, 65535)] {
            let blocks = PortRange(lo, hi).blocks();
            for p in (0..=65535u32).step_by(7).chain([u32::from(lo), u32::from(hi)]) {
                let p = p as u16;
                let inside = blocks.iter().any(|&(v, m)| p & m == v);
                assert_eq!(inside, (lo..=hi).contains(&p), "{lo}-{hi} at {p}");
            }
        }
        assert_eq!(PortRange(0, 65535).blocks(), vec![(0, 0)]);
    }

    #[test]
    fn priority_and_early_stop() {
        let rules = vec![
            Pattern { priority: 10, dst: Some("10.0.0.0/8".parse().unwrap()), ..Pattern::default() },
            Pattern { priority: 20, dst: Some("10.1.0.0/16".parse().unwrap()), proto: Some(6), ..Pattern::default() },
            Pattern { priority: 5, ..Pattern::default() },
        ];
        let c = Classifier::new(&rules).unwrap();
        let k = FlowKey { dst: 0x0a01_0101, proto: 6, ..FlowKey::default() };
        let l = c.lookup(&k);
        assert_eq!(l.rule, Some(1));
        // The /16 + proto subtable decided; lower subtables were not probed.
        assert_eq!(l.probes, 1);
        assert_eq!(l.consulted.proto, 0xff);
        let l = c.lookup(&FlowKey { dst: 0x0b00_0001, ..FlowKey::default() });
        assert_eq!(l.rule, Some(2));
        assert!(l.consulted.beyond_dst());
    }
}
