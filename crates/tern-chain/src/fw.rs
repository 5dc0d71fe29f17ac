//! The firewall task (docs/chain.md, "Firewall"): a prioritized 5-tuple ACL — `tern-table`'s
//! tuple-space-search classifier — plus established-flow state, so replies to a flow the ACL
//! let out come back in without a rule of their own.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tern_chain::fw::{Action, Firewall, FwConfig, FwDrop, Rule};
//! use tern_table::classifier::{Pattern, PortRange};
//! let out80 = Pattern { priority: 10, src: Some("10.0.0.0/8".parse().unwrap()), proto: Some(6), dst_port: Some(PortRange(80, 80)), ..Pattern::default() };
//! let mut fw = Firewall::new(&[Rule { pattern: out80, action: Action::Allow }], FwConfig::default()).unwrap();
//! let (mut req, mut reply) = (Vec::new(), Vec::new());
//! tern_wire::frame::build_tcp4(&mut req, [2; 6], [4; 6], [10, 0, 0, 7], [198, 51, 100, 9], 40000, 80, 64, b"GET");
//! tern_wire::frame::build_tcp4(&mut reply, [4; 6], [2; 6], [198, 51, 100, 9], [10, 0, 0, 7], 80, 40000, 64, b"200");
//! let now = Instant::now();
//! assert_eq!(fw.check(&reply, now), Err(FwDrop::Denied)); // no flow yet
//! assert_eq!(fw.check(&req, now), Ok(()));
//! assert_eq!(fw.check(&reply, now), Ok(())); // a reply of an allowed flow
//! ```

use std::time::{Duration, Instant};

use tern_table::classifier::{Classifier, FlowKey, Pattern};

use crate::swept::{Shared, Taken};
use tern_wire::frame::{FrameInfo, L3};

/// What a rule does with the frames it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Let through (and, with state on, remember the flow).
    Allow,
    /// Drop.
    Deny,
}

/// A rule: a pattern (its priority, higher first; among equals the rule given first) and an
/// action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// What it matches.
    pub pattern: Pattern,
    /// What it does.
    pub action: Action,
}

/// Settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FwConfig {
    /// What a frame no rule matches gets. Default `Deny`.
    pub default: Action,
    /// Remember flows an `Allow` rule let through and let their replies in. Default on.
    pub established: bool,
    /// Flows remembered at most (a new one beyond is let through by its rule, not
    /// remembered, and counted). Default 65536.
    pub max_flows: usize,
    /// Flows remembered at most for one source address (the address that began them), so
    /// that no one client fills the table; a new one beyond is let through by its rule, not
    /// remembered, and counted. Default 4096.
    pub max_flows_per_source: usize,
    /// A flow not seen this long is forgotten. Default 60 s.
    pub idle: Duration,
}

impl Default for FwConfig {
    fn default() -> Self {
        FwConfig {
            default: Action::Deny,
            established: true,
            max_flows: 65_536,
            max_flows_per_source: 4096,
            idle: Duration::from_secs(60),
        }
    }
}

/// Why a frame is dropped. Each is a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FwDrop {
    /// Not a frame the parser takes.
    #[error("malformed")]
    Malformed,
    /// Not IP.
    #[error("not_ip")]
    NotIp,
    /// A `Deny` rule, or no rule and a `Deny` default.
    #[error("denied")]
    Denied,
}

impl FwDrop {
    /// Its counter's name.
    pub fn name(self) -> &'static str {
        match self {
            FwDrop::Malformed => "malformed",
            FwDrop::NotIp => "not_ip",
            FwDrop::Denied => "denied",
        }
    }

    /// Every reason, in counter order.
    pub const ALL: [FwDrop; 3] = [FwDrop::Malformed, FwDrop::NotIp, FwDrop::Denied];
}

/// What the firewall counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FwStats {
    /// Frames let through by a rule (or the default), and as replies of a remembered flow.
    pub allowed: u64,
    pub established: u64,
    /// Flows remembered, forgotten for idling, and not remembered for lack of room: in the
    /// table, and in their source's share of it.
    pub flows: u64,
    pub expired: u64,
    pub state_full: u64,
    pub source_full: u64,
    /// Flows that never had a reply, taken out to make room for a new flow in a full table.
    pub unreplied_evicted: u64,
    /// Flows remembered under another generation's rules that these rules deny, forgotten.
    pub revoked: u64,
    /// Drops, by [`FwDrop::ALL`]'s order.
    pub drops: [u64; 3],
}

/// A flow, as a frame carries it (source first).
type Flow = (bool, u128, u128, u8, u16, u16);

/// Each firewall's rules are told apart by a number of their own (see [`Firewall::swap_flows`]).
static RULES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A flow's key whichever way its frames go: its ends (address and port) in order, the lesser
/// first, then the protocol — so a frame and its reply find one entry with one lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ends(bool, u128, u16, u128, u16, u8);

impl std::hash::Hash for Ends {
    /// Its fields' 38 bytes, in order, in one write: the keyed hash (SipHash) takes one call
    /// rather than one a field (a frame's lookup 8–10% faster in the task benchmark).
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let mut b = [0u8; 38];
        b[0] = u8::from(self.0);
        b[1..17].copy_from_slice(&self.1.to_ne_bytes());
        b[17..19].copy_from_slice(&self.2.to_ne_bytes());
        b[19..35].copy_from_slice(&self.3.to_ne_bytes());
        b[35..37].copy_from_slice(&self.4.to_ne_bytes());
        b[37] = self.5;
        h.write(&b);
    }
}

/// `f`'s ends, and whether `f` goes from the lesser end to the greater.
fn ends(f: &Flow) -> (Ends, bool) {
    let (v6, src, dst, proto, sp, dp) = *f;
    if (src, sp) <= (dst, dp) {
        (Ends(v6, src, sp, dst, dp, proto), true)
    } else {
        (Ends(v6, dst, dp, src, sp, proto), false)
    }
}

/// The flow of `e` as it began: from the lesser end if `from_lesser`.
fn began(e: &Ends, from_lesser: bool) -> Flow {
    let Ends(v6, a, ap, b, bp, proto) = *e;
    if from_lesser { (v6, a, b, proto, ap, bp) } else { (v6, b, a, proto, bp, ap) }
}

/// What is remembered of a flow: when its last frame passed, the number of the rules it was
/// last allowed under, whether it began from its lesser end, and whether a frame of it has
/// come the other way (a reply: a flow that never had one may be taken out to make room).
#[derive(Debug, Clone, Copy)]
struct Remembered {
    last: Instant,
    rules: u32,
    from_lesser: bool,
    replied: bool,
}

/// The address that began a flow (its family too): what its share is counted by.
fn source(e: &Ends, r: &Remembered) -> (bool, u128) {
    (e.0, if r.from_lesser { e.1 } else { e.3 })
}

/// The flows remembered, forgotten a part a packet once idle, each counted for its source
/// ([`Shared`]).
type FlowTable = Shared<Ends, Remembered, (bool, u128)>;

/// A packet's part of the pass for flows idle for `idle` ([`Shared::step`]); how many it
/// forgot. A flow idle past its time may hold its place up to three twentieths of that longer
/// and twice the maps' packets after (128 with the 64 maps of up to 131,072 flows; at its own
/// packet's lookup it is forgotten at once).
fn sweep(flows: &mut FlowTable, now: Instant, idle: Duration) -> usize {
    flows.step(now, idle, |_, r| now.saturating_duration_since(r.last) < idle)
}

/// The firewall.
#[derive(Debug)]
pub struct Firewall {
    cfg: FwConfig,
    actions: Vec<Action>,
    classifier: Classifier,
    /// This firewall's rules' number.
    rules: u32,
    /// Each flow: when its last packet passed, and the number of the rules it was last allowed
    /// under.
    flows: FlowTable,
    info: FrameInfo,
    stats: FwStats,
}

impl Firewall {
    /// A firewall of `rules`, or the classifier's error naming the rule it cannot take.
    pub fn new(rules: &[Rule], cfg: FwConfig) -> Result<Firewall, String> {
        let patterns: Vec<Pattern> = rules.iter().map(|r| r.pattern.clone()).collect();
        Ok(Firewall {
            cfg,
            actions: rules.iter().map(|r| r.action).collect(),
            classifier: Classifier::new(&patterns)?,
            rules: RULES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            flows: FlowTable::new(cfg.max_flows, source),
            info: FrameInfo::default(),
            stats: FwStats::default(),
        })
    }

    /// Lets `frame` through, or says why not (and counts it). Never panics.
    pub fn check(&mut self, frame: &[u8], now: Instant) -> Result<(), FwDrop> {
        let r = self.check_inner(frame, now);
        if let Err(d) = r {
            self.stats.drops[FwDrop::ALL.iter().position(|x| *x == d).unwrap_or(0)] += 1;
        }
        r
    }

    fn check_inner(&mut self, frame: &[u8], now: Instant) -> Result<(), FwDrop> {
        if self.info.parse_general_into(frame).is_err() {
            return Err(FwDrop::Malformed);
        }
        let i = self.info;
        if i.l3 == L3::Other {
            return Err(FwDrop::NotIp);
        }
        let v6 = i.l3 == L3::Ipv6;
        let flow: Flow = (v6, i.src, i.dst, i.proto, i.src_port, i.dst_port);
        let (e, from_lesser) = ends(&flow);
        if self.cfg.established {
            self.stats.expired += sweep(&mut self.flows, now, self.cfg.idle) as u64;
            let (rules, idle) = (self.rules, self.cfg.idle);
            if let Some(r) = self.flows.get_mut(&e) {
                // Most often: remembered under these rules, and live.
                if r.rules == rules && now.saturating_duration_since(r.last) < idle {
                    r.last = now;
                    r.replied |= r.from_lesser != from_lesser;
                    self.stats.established += 1;
                    return Ok(());
                }
                let r = *r;
                if now.saturating_duration_since(r.last) >= idle {
                    // Idle past its time (the sweep has not come round yet): forgotten.
                    self.flows.remove(&e);
                    self.stats.expired += 1;
                } else if self.action(began(&e, r.from_lesser)) == Action::Deny {
                    // Remembered under other rules (a generation before, handed over by an
                    // update), which these deny as it began: forgotten.
                    self.flows.remove(&e);
                    self.stats.revoked += 1;
                } else {
                    let replied = r.replied || r.from_lesser != from_lesser;
                    self.flows.insert(e, Remembered { last: now, rules, replied, ..r });
                    self.stats.established += 1;
                    return Ok(());
                }
            }
        }
        if self.action(flow) == Action::Deny {
            return Err(FwDrop::Denied);
        }
        self.stats.allowed += 1;
        if self.cfg.established {
            self.remember(e, Remembered { last: now, rules: self.rules, from_lesser, replied: false });
        }
        Ok(())
    }

    /// Remembers a new flow the rules let through, within its source's share and the bound.
    /// (Out of line: a new flow is rarer than a frame of a remembered one.)
    #[inline(never)]
    fn remember(&mut self, e: Ends, r: Remembered) {
        if self.flows.at_limit(source(&e, &r), self.cfg.max_flows_per_source) {
            self.stats.source_full += 1;
            return;
        }
        if self.flows.len() >= self.cfg.max_flows {
            // Full: room is made by taking out an idle flow or one that never had a reply, of
            // those looked at first from the new flow's map on ([`Shared::make_room`]).
            match self.flows.make_room(&e, r.last, self.cfg.idle, |_, o| Some((o.last, o.replied))) {
                None => {
                    self.stats.state_full += 1;
                    return;
                }
                Some((_, Taken::Expired)) => self.stats.expired += 1,
                Some((_, Taken::Unreplied)) => self.stats.unreplied_evicted += 1,
            }
        }
        self.flows.insert(e, r);
        self.stats.flows += 1;
    }

    /// What the rules (or the default) do with a packet of `flow`.
    fn action(&self, (v6, src, dst, proto, src_port, dst_port): Flow) -> Action {
        let key = FlowKey { in_port: 0, v6, src, dst, proto, src_port, dst_port };
        self.classifier.lookup(&key).rule.map_or(self.cfg.default, |r| self.actions[r])
    }

    /// Exchanges its established flows with `other`'s (another generation of it). The rules may
    /// differ: a flow remembered under the other's rules is let through by its state only once
    /// these rules are found, at its next packet, to let the flow through as it began (else it is
    /// forgotten, counted `revoked`, and the packet meets the rules).
    pub fn swap_flows(&mut self, other: &mut Firewall) {
        std::mem::swap(&mut self.flows, &mut other.flows);
    }

    /// Flows remembered now.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// Its counters.
    pub fn stats(&self) -> FwStats {
        self.stats
    }
}
