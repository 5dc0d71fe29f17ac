//! The NAT task's translation (docs/chain.md, "NAT"), on Ethernet frames in place: outbound
//! TCP and UDP flows get the external address and a port of their own from a range; replies to
//! that address and port are translated back. Checksums are updated incrementally (RFC 1624),
//! never recomputed over the payload.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tern_chain::nat::{Dir, Nat, NatConfig};
//! let cfg = NatConfig { ports: (20000, 20099), ..NatConfig::new([192, 0, 2, 1]) };
//! let mut nat = Nat::new(cfg);
//! let mut f = Vec::new();
//! tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 7], [198, 51, 100, 9], 5353, 53, 64, b"q");
//! nat.translate(&mut f, Dir::Outbound, Instant::now()).unwrap();
//! assert_eq!(&f[26..30], &[192, 0, 2, 1]); // the source address
//! assert_eq!(&f[34..36], &20000u16.to_be_bytes()); // the source port
//! ```

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use tern_wire::frame::{FrameInfo, L3, proto, rewrite_field};

use crate::swept::{Shared, Taken};

/// Which way a frame crosses the NAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the inside: the source is translated.
    Outbound,
    /// From the outside: the destination is translated back.
    Inbound,
}

/// Why a frame is dropped. Each is a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum NatDrop {
    /// Not a frame the parser takes.
    #[error("malformed")]
    Malformed,
    /// Not IPv4.
    #[error("not_ipv4")]
    NotIpv4,
    /// A later fragment (no ports to translate).
    #[error("fragment")]
    Fragment,
    /// Neither TCP nor UDP.
    #[error("not_tcp_udp")]
    NotTcpUdp,
    /// Inbound, to another address or a port no flow holds.
    #[error("no_mapping")]
    NoMapping,
    /// Outbound, a new flow and no port free.
    #[error("ports_exhausted")]
    PortsExhausted,
    /// Outbound, a new flow of an inside address that holds its [`NatConfig::ports_per_host`]
    /// of the protocol's ports already, none of its flows idle.
    #[error("port_limit")]
    PortLimit,
}

impl NatDrop {
    /// Its counter's name.
    pub fn name(self) -> &'static str {
        match self {
            NatDrop::Malformed => "malformed",
            NatDrop::NotIpv4 => "not_ipv4",
            NatDrop::Fragment => "fragment",
            NatDrop::NotTcpUdp => "not_tcp_udp",
            NatDrop::NoMapping => "no_mapping",
            NatDrop::PortsExhausted => "ports_exhausted",
            NatDrop::PortLimit => "port_limit",
        }
    }

    /// Every reason, in counter order.
    pub const ALL: [NatDrop; 7] = [
        NatDrop::Malformed,
        NatDrop::NotIpv4,
        NatDrop::Fragment,
        NatDrop::NotTcpUdp,
        NatDrop::NoMapping,
        NatDrop::PortsExhausted,
        NatDrop::PortLimit,
    ];
}

/// The NAT's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NatConfig {
    /// The external address.
    pub external: [u8; 4],
    /// External ports handed out, inclusive.
    pub ports: (u16, u16),
    /// A mapping unused this long may be taken for a new flow.
    pub idle: Duration,
    /// Ports of a protocol one inside address may hold at once (RFC 6888's per-subscriber
    /// "port limit"), so that no one host takes the range. Default [`PORTS_PER_HOST`].
    pub ports_per_host: u32,
}

/// The default [`NatConfig::ports_per_host`].
pub const PORTS_PER_HOST: u32 = 4096;

impl NatConfig {
    /// A NAT to `external` with the tenant file's defaults: ports 1024–65535, idle 60 s,
    /// [`PORTS_PER_HOST`] ports a host.
    pub fn new(external: [u8; 4]) -> NatConfig {
        NatConfig { external, ports: (1024, 65535), idle: Duration::from_secs(60), ports_per_host: PORTS_PER_HOST }
    }
}

/// What the NAT counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NatStats {
    /// Frames translated each way.
    pub outbound: u64,
    pub inbound: u64,
    /// Mappings made, taken back after being idle, and taken for a new flow having never had an
    /// inbound frame (no port free nor idle).
    pub mappings: u64,
    pub expired: u64,
    pub unreplied_evicted: u64,
    /// Drops, by [`NatDrop::ALL`]'s order.
    pub drops: [u64; 7],
}

/// A flow's external port, when its last frame passed (either way), and whether an inbound
/// frame has come to it (a reply: a mapping that never had one may be taken for a new flow).
#[derive(Debug, Clone, Copy)]
struct Mapping {
    port: u16,
    last: Instant,
    replied: bool,
}

/// The external ports of one protocol not held by a flow: those never handed out (the range's
/// offsets from `fresh` up) and those taken back from idle flows, oldest first.
#[derive(Debug, Clone, Default)]
struct Free {
    fresh: u32,
    freed: VecDeque<u16>,
}

/// A NAT: the external address and ports, and the flows holding them.
#[derive(Debug)]
pub struct Nat {
    cfg: NatConfig,
    /// (protocol, inside address, inside port) → external port; idle ones looked for a part at
    /// a time, each counted for its (protocol, inside address) ([`Shared`]).
    out: Shared<(u8, u32, u16), Mapping, (u8, u32)>,
    /// (protocol, external port) → (inside address, inside port).
    back: HashMap<(u8, u16), (u32, u16)>,
    /// Ports free, TCP's and UDP's.
    free: [Free; 2],
    info: FrameInfo,
    stats: NatStats,
}

impl Nat {
    /// Exchanges its mappings with `other`'s (another generation of it) if both hand out the
    /// same external address and ports (else a mapping would name a port the other does not
    /// own); whether they did.
    pub fn swap_mappings(&mut self, other: &mut Nat) -> bool {
        if (self.cfg.external, self.cfg.ports) != (other.cfg.external, other.cfg.ports) {
            return false;
        }
        std::mem::swap(&mut self.out, &mut other.out);
        std::mem::swap(&mut self.back, &mut other.back);
        std::mem::swap(&mut self.free, &mut other.free);
        true
    }

    /// A NAT with `cfg` (a reversed port range is taken in order).
    pub fn new(cfg: NatConfig) -> Nat {
        let (lo, hi) = (cfg.ports.0.min(cfg.ports.1), cfg.ports.0.max(cfg.ports.1));
        let cfg = NatConfig { ports: (lo, hi), ..cfg };
        Nat {
            cfg,
            out: Shared::new(2 * (usize::from(hi - lo) + 1), |&(proto, addr, _), _| (proto, addr)),
            back: HashMap::new(),
            free: Default::default(),
            info: FrameInfo::default(),
            stats: NatStats::default(),
        }
    }

    /// Translates `frame` in place, or says why it is dropped (and counts it). Never panics.
    pub fn translate(&mut self, frame: &mut [u8], dir: Dir, now: Instant) -> Result<(), NatDrop> {
        let r = self.translate_inner(frame, dir, now);
        match r {
            Ok(()) if dir == Dir::Outbound => self.stats.outbound += 1,
            Ok(()) => self.stats.inbound += 1,
            Err(d) => self.stats.drops[NatDrop::ALL.iter().position(|x| *x == d).unwrap_or(0)] += 1,
        }
        r
    }

    fn translate_inner(&mut self, frame: &mut [u8], dir: Dir, now: Instant) -> Result<(), NatDrop> {
        if self.info.parse_general_into(frame).is_err() {
            return Err(NatDrop::Malformed);
        }
        let i = self.info;
        if i.l3 != L3::Ipv4 {
            return Err(NatDrop::NotIpv4);
        }
        if i.fragment {
            return Err(NatDrop::Fragment);
        }
        if !i.has_l4 || (i.proto != proto::TCP && i.proto != proto::UDP) {
            return Err(NatDrop::NotTcpUdp);
        }
        let (l3, l4) = (usize::from(i.l3_off), usize::from(i.l4_off));
        let (addr_at, port_at, new_addr, new_port) = match dir {
            Dir::Outbound => {
                let port = self.port_for((i.proto, i.src_v4(), i.src_port), now)?;
                (l3 + 12, l4, self.cfg.external, port)
            }
            Dir::Inbound => {
                if i.dst_v4() != u32::from_be_bytes(self.cfg.external) {
                    return Err(NatDrop::NoMapping);
                }
                let Some(&(addr, port)) = self.back.get(&(i.proto, i.dst_port)) else { return Err(NatDrop::NoMapping) };
                if let Some(m) = self.out.get_mut(&(i.proto, addr, port)) {
                    m.last = now;
                    m.replied = true;
                }
                (l3 + 16, l4 + 2, addr.to_be_bytes(), port)
            }
        };
        rewrite_addr_port(frame, &i, (addr_at, new_addr), (port_at, new_port));
        Ok(())
    }

    /// The external port of an outbound flow: its mapping, or a new one: a port never handed
    /// out, else the one taken back longest ago, else (no port free) one taken back now from a
    /// flow idle for `idle` ([`Nat::sweep`]: a part of the flows looked at), else the port of
    /// the flow of its protocol idle past its time or that never had an inbound frame whose
    /// last frame is oldest, of the first 32 looked at ([`Nat::take_unreplied`]). A new flow with no port free costs
    /// at most a look at a 64th of the flows and at 32 more, however many hold ports. A host
    /// holding its `ports_per_host` gets a port only once a sweep has taken one of its own back.
    fn port_for(&mut self, key: (u8, u32, u16), now: Instant) -> Result<u16, NatDrop> {
        if let Some(m) = self.out.get_mut(&key) {
            m.last = now;
            return Ok(m.port);
        }
        let host = (key.0, key.1);
        if self.out.at_limit(host, self.cfg.ports_per_host as usize) {
            self.sweep(now);
            if self.out.at_limit(host, self.cfg.ports_per_host as usize) {
                return Err(NatDrop::PortLimit);
            }
        }
        let port = match self.take(key.0) {
            Some(p) => p,
            None => {
                self.sweep(now);
                match self.take(key.0) {
                    Some(p) => p,
                    None => self.take_unreplied(&key, now).ok_or(NatDrop::PortsExhausted)?,
                }
            }
        };
        self.back.insert((key.0, port), (key.1, key.2));
        self.out.insert(key, Mapping { port, last: now, replied: false });
        self.stats.mappings += 1;
        Ok(port)
    }

    /// The port of a flow of `key`'s protocol idle past its time (forgotten already: no sweep
    /// had come round to it; counted `expired`) or that never had an inbound frame (as
    /// conntrack's early drop; `unreplied_evicted`), taken for `key`'s new flow: of the first 32
    /// flows looked at from `key`'s map on, the one whose last frame is oldest. Its replies
    /// then meet the new flow's mapping or none, and its next outbound frame is a new flow.
    fn take_unreplied(&mut self, key: &(u8, u32, u16), now: Instant) -> Option<u16> {
        let proto = key.0;
        let seen = |&(p, _, _): &(u8, u32, u16), m: &Mapping| (p == proto).then_some((m.last, m.replied));
        let (m, taken) = self.out.make_room(key, now, self.cfg.idle, seen)?;
        self.back.remove(&(proto, m.port));
        match taken {
            Taken::Expired => self.stats.expired += 1,
            Taken::Unreplied => self.stats.unreplied_evicted += 1,
        }
        Some(m.port)
    }

    /// A free port of protocol `proto`, taken.
    fn take(&mut self, proto: u8) -> Option<u16> {
        let (lo, hi) = self.cfg.ports;
        let free = &mut self.free[usize::from(proto == proto::UDP)];
        if free.fresh <= u32::from(hi - lo) {
            let p = lo + free.fresh as u16;
            free.fresh += 1;
            return Some(p);
        }
        free.freed.pop_front()
    }

    /// Takes back the ports of flows idle for `idle` in a part of the flows, when a new flow
    /// finds no port free or its host at its limit: a step of a pass ([`Shared::step_map`]:
    /// begun no more often than ten times an idle period, one of 64 maps a step, since each
    /// step is for a flow that needs a port now: a NAT's mappings, at most both protocols'
    /// ranges, are too few for more maps).
    fn sweep(&mut self, now: Instant) {
        let idle = self.cfg.idle;
        let Nat { out, back, free, stats, .. } = self;
        out.step_map(now, idle, |&(proto, _, _), m| {
            let keep = now.saturating_duration_since(m.last) < idle;
            if !keep {
                back.remove(&(proto, m.port));
                free[usize::from(proto == proto::UDP)].freed.push_back(m.port);
                stats.expired += 1;
            }
            keep
        });
    }

    /// Flows holding a port.
    pub fn mappings(&self) -> usize {
        self.out.len()
    }

    /// Its counters.
    pub fn stats(&self) -> NatStats {
        self.stats
    }
}

/// Rewrites an IPv4 TCP or UDP frame's address at `addr.0` to `addr.1` and port at `port.0`
/// to `port.1` (`info` describes the frame), updating the IPv4 header checksum and the
/// transport checksum incrementally (RFC 1624): the NAT's and the load balancer's rewrite. A
/// UDP checksum of 0 (none) stays 0; one that comes out 0 is sent as 0xffff.
pub fn rewrite_addr_port(frame: &mut [u8], info: &FrameInfo, addr: (usize, [u8; 4]), port: (usize, u16)) {
    let l3 = usize::from(info.l3_off);
    if frame.len() < (addr.0 + 4).max(port.0 + 2).max(l3 + 12) {
        return;
    }
    // The IPv4 header checksum covers the address; the transport checksum covers it (the
    // pseudo-header) and the port. UDP sends a computed 0 as 0xffff (0 means "no checksum",
    // RFC 768).
    let l4 = info.l4_checksum_off(frame).map(|at| (at, info.proto == proto::UDP));
    let ip = (l3 + 10, false);
    let (sums, n) = match l4 {
        Some(s) => ([ip, s], 2),
        None => ([ip, ip], 1),
    };
    rewrite_field(frame, addr.0, &addr.1, &sums[..n]);
    rewrite_field(frame, port.0, &port.1.to_be_bytes(), l4.as_slice());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With every port held, a new flow takes the port of a flow idle past its time that no
    /// sweep has come round to yet (forgotten already, counted `expired`) before an unreplied
    /// live flow's, and is refused while every live flow had a reply.
    #[test]
    fn a_new_flow_takes_an_idle_flows_port_first() {
        let idle = Duration::from_secs(100);
        let mut n = Nat::new(NatConfig { ports: (2000, 2003), idle, ..NatConfig::new([192, 0, 2, 1]) });
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let send = |n: &mut Nat, sport: u16, at: Instant| {
            let mut f = Vec::new();
            tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], [10, 9, 9, 9], sport, 53, 64, b"");
            n.translate(&mut f, Dir::Outbound, at)
        };
        let reply = |n: &mut Nat, port: u16, at: Instant| {
            let mut r = Vec::new();
            tern_wire::frame::build_udp4(&mut r, [4; 6], [2; 6], [10, 9, 9, 9], [192, 0, 2, 1], 53, port, 64, b"");
            n.translate(&mut r, Dir::Inbound, at)
        };
        // Ports 2000-2002 to flows with replies at 0 s; 2003 to one with a reply at 90 s.
        for p in 0..3 {
            send(&mut n, 10_000 + p, at(0)).unwrap();
            reply(&mut n, 2000 + p, at(0)).unwrap();
        }
        send(&mut n, 10_003, at(90)).unwrap();
        reply(&mut n, 2003, at(90)).unwrap();
        // Refused new flows at 95 s: a pass (a map each) that finds nothing idle; the next may
        // begin 10 s on.
        for p in 0..70 {
            assert_eq!(send(&mut n, 20_000 + p, at(95)), Err(NatDrop::PortsExhausted));
        }
        assert_eq!(n.stats().expired, 0);
        // At 101 s the first three are idle: new flows get their ports, the second and third
        // an idle flow's rather than the unreplied live first new one's.
        for p in 0..3 {
            send(&mut n, 30_000 + p, at(101)).unwrap();
        }
        let st = n.stats();
        assert_eq!((st.expired, st.unreplied_evicted, n.mappings()), (3, 0, 4));
        assert_eq!(reply(&mut n, 2003, at(101)), Ok(()), "the live flow keeps its port");
        // None idle now: the port of the unreplied flow whose last frame is oldest.
        send(&mut n, 30_003, at(102)).unwrap();
        assert_eq!((n.stats().expired, n.stats().unreplied_evicted), (3, 1));
    }

    /// With every port held by a live flow that had a reply, a refused new flow looks at a 64th of
    /// the flows at most (a step of a pass), and passes begin at most once a tenth of an idle
    /// period (before a pass over the range a frame: 4.2 ms a refused frame with 64,512 ports held;
    /// then a pass over every flow once a tenth of an idle period, 1.25–1.35 ms with 129,024 live
    /// flows and 13.3–13.8 ms with as many idle). Past the idle time each step takes back the idle
    /// ports of a map, which new flows get, oldest first.
    #[test]
    fn refusing_new_flows_looks_at_a_part_of_the_flows() {
        let idle = Duration::from_secs(10);
        let mut n = Nat::new(NatConfig { ports: (2000, 2999), idle, ..NatConfig::new([192, 0, 2, 1]) });
        let t0 = Instant::now();
        let send = |n: &mut Nat, sport: u16, at: Instant| {
            let mut f = Vec::new();
            tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], [10, 9, 9, 9], sport, 53, 64, b"");
            n.translate(&mut f, Dir::Outbound, at)
        };
        for p in 0..1000 {
            send(&mut n, 10_000 + p, t0).unwrap();
            // A reply, so that no new flow takes the port while it is live.
            let mut r = Vec::new();
            tern_wire::frame::build_udp4(&mut r, [4; 6], [2; 6], [10, 9, 9, 9], [192, 0, 2, 1], 53, 2000 + p, 64, b"");
            n.translate(&mut r, Dir::Inbound, t0).unwrap();
        }
        for p in 0..5000 {
            let at = t0 + Duration::from_millis(u64::from(p) / 10);
            assert_eq!(send(&mut n, 20_000 + p, at), Err(NatDrop::PortsExhausted));
        }
        // 500 ms of refusals: one pass (a tenth of 10 s is a second), which found nothing idle.
        assert_eq!((n.out.passes(), n.stats().expired), (1, 0));
        // Past the idle time the first new flow's step takes back a map's ports (the first map's,
        // a whole one, whatever the pass's pace), and it gets one.
        let later = t0 + idle;
        let first_map = n.out.sizes()[0];
        assert_eq!(send(&mut n, 30_000, later), Ok(()));
        let first = n.stats().expired;
        assert!((1..200).contains(&first), "one step took back {first} of 1000");
        assert_eq!(first as usize, first_map);
        // The steps of that pass take back the rest: every new flow gets a port, a few after a
        // refusal (a step that found an empty map).
        let mut refused = 0;
        for p in 1..1000 {
            while send(&mut n, 30_000 + p, later).is_err() {
                refused += 1;
                assert!(refused <= 64, "more refusals than a pass has steps");
            }
        }
        assert_eq!((n.out.passes(), n.stats().expired, n.mappings()), (2, 1000, 1000));
    }
}
