//! Source NAT as Linux netfilter does it, for a server of the group (docs/clip.md, "SNAT"):
//! the translation state of CLIP's SNAT application (§IV, Appendix A), sans I/O.
//!
//! A connection is its original tuple (protocol, inside source address and port, destination
//! address and port; an ICMP echo's id stands for both ports' place as netfilter's does). Its
//! first packet out gets a public address and port:
//!
//! - the address: one of the server's public addresses, picked by a hash of the inside and
//!   destination addresses (netfilter's rule for an address range: one host to one
//!   destination always gets the same address);
//! - the port: the source port itself when its reply tuple (protocol, destination, its port,
//!   public address, port) is unused and the port lies in the server's slice; otherwise a port
//!   of the source port's class — 1–511 below 512, 600–1023 below 1024, 1024–65535 above (ICMP
//!   ids: 0–65535) — searched as netfilter's `nf_nat_l4proto_unique_tuple` does: from a random
//!   offset, up to 128 tries, then again from another offset with half as many while that is at
//!   least 16; none free: `exhausted`.
//!
//! A server's *slice* keeps servers apart: ports `p` with `p mod slices == slice` (one slice,
//! the default, is every port; servers of a group with their own addresses need no more), so
//! no two servers ever hand out one public tuple.
//!
//! Each connection has a timeout by protocol and (TCP) state, netfilter's defaults
//! ([`Timeouts::default`]); a packet of it starts the timeout again. Expired connections are
//! swept a few at a time by every call (and by [`Nat::expire`]); an expired one is never
//! matched. The table is bounded ([`NatConfig::capacity`]: `table_full`).

use std::collections::HashMap;

/// IP protocol numbers the NAT translates.
pub const ICMP: u8 = 1;
pub const TCP: u8 = 6;
pub const UDP: u8 = 17;

/// Tries from one offset at most (netfilter's `NF_NAT_MAX_ATTEMPTS`).
pub const MAX_ATTEMPTS: u32 = 128;

/// A connection's tuple in one direction (host byte order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple {
    pub proto: u8,
    pub src: u32,
    pub sport: u16,
    pub dst: u32,
    pub dport: u16,
}

impl Tuple {
    /// The tuple a reply to this one carries.
    pub fn reversed(self) -> Tuple {
        Tuple { proto: self.proto, src: self.dst, sport: self.dport, dst: self.src, dport: self.sport }
    }
}

/// TCP connection states (netfilter's, in its order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpState {
    SynSent,
    SynRecv,
    Established,
    FinWait,
    CloseWait,
    LastAck,
    TimeWait,
    Close,
}

impl TcpState {
    pub const ALL: [TcpState; 8] = [
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::Established,
        TcpState::FinWait,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::TimeWait,
        TcpState::Close,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TcpState::SynSent => "syn_sent",
            TcpState::SynRecv => "syn_recv",
            TcpState::Established => "established",
            TcpState::FinWait => "fin_wait",
            TcpState::CloseWait => "close_wait",
            TcpState::LastAck => "last_ack",
            TcpState::TimeWait => "time_wait",
            TcpState::Close => "close",
        }
    }
}

/// TCP flag bits.
pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

/// Which way a packet goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Inside to outside (the original direction).
    Out,
    /// Outside to inside (a reply).
    In,
}

/// The next TCP state after a packet with `flags` going `dir`; `fin_out`: the first FIN went
/// out (kept beside the state). A simplification of netfilter's `tcp_conntracks` table that
/// keeps its states and the moves a well-behaved connection makes.
pub fn tcp_next(state: TcpState, dir: Dir, flags: u8, fin_out: &mut Option<Dir>) -> TcpState {
    use TcpState::*;
    let (syn, ack, fin, rst) = (flags & SYN != 0, flags & ACK != 0, flags & FIN != 0, flags & RST != 0);
    if rst {
        return Close;
    }
    match state {
        SynSent if dir == Dir::In && syn && ack => SynRecv,
        SynRecv if dir == Dir::Out && ack && !syn => Established,
        Established if fin => {
            *fin_out = Some(dir);
            FinWait
        }
        FinWait if fin && Some(dir) != *fin_out => LastAck,
        FinWait if ack && Some(dir) != *fin_out => CloseWait,
        CloseWait if fin && Some(dir) != *fin_out => LastAck,
        LastAck if ack && Some(dir) == *fin_out => TimeWait,
        TimeWait | Close if dir == Dir::Out && syn && !ack => {
            *fin_out = None;
            SynSent
        }
        s => s,
    }
}

/// Timeouts, ns. The defaults are netfilter's (`nf_conntrack_*_timeout*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// UDP before a reply, and once replied (`udp_timeout_stream`).
    pub udp: u64,
    pub udp_stream: u64,
    /// ICMP echo.
    pub icmp: u64,
    /// TCP, by [`TcpState`] in its order.
    pub tcp: [u64; 8],
    /// Any other protocol (GRE, ESP, ...: the address translated, no ports).
    pub generic: u64,
}

const S: u64 = 1_000_000_000;

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            udp: 30 * S,
            udp_stream: 120 * S,
            icmp: 30 * S,
            // syn_sent, syn_recv, established, fin_wait, close_wait, last_ack, time_wait, close
            tcp: [120 * S, 60 * S, 432_000 * S, 120 * S, 60 * S, 30 * S, 120 * S, 10 * S],
            generic: 600 * S,
        }
    }
}

/// The NAT's configuration.
#[derive(Debug, Clone)]
pub struct NatConfig {
    /// Public addresses (host order), at least one.
    pub addrs: Vec<u32>,
    /// This server's slice of the ports, of `slices`.
    pub slice: u16,
    pub slices: u16,
    /// Connections at most.
    pub capacity: usize,
    pub timeouts: Timeouts,
    /// Seed of the port search's offsets.
    pub seed: u64,
}

impl NatConfig {
    /// One address, every port, a million connections, netfilter's timeouts.
    pub fn new(addr: u32) -> NatConfig {
        NatConfig { addrs: vec![addr], slice: 0, slices: 1, capacity: 1 << 20, timeouts: Timeouts::default(), seed: 1 }
    }

    fn check(&self) -> Result<(), String> {
        if self.addrs.is_empty() {
            return Err("nat: at least one public address".into());
        }
        if self.slices == 0 || self.slice >= self.slices {
            return Err(format!("nat: slice {} of {}: the slice must be below the slices", self.slice, self.slices));
        }
        if self.capacity == 0 {
            return Err("nat: capacity must be at least 1".into());
        }
        Ok(())
    }
}

/// Why a packet was not translated. Each is a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum NatDrop {
    /// No free public port for a new connection.
    #[error("exhausted")]
    Exhausted,
    /// The table is full.
    #[error("table_full")]
    TableFull,
    /// From outside, and no connection it replies to.
    #[error("unsolicited")]
    Unsolicited,
    /// A TCP RST (or a SYN-ACK) that opens nothing: netfilter makes no connection of it.
    #[error("tcp_invalid")]
    TcpInvalid,
    /// Not TCP, UDP or an ICMP echo or error.
    #[error("protocol")]
    Protocol,
    /// Not an IPv4 packet it can read (short, a bad header length or total length).
    #[error("malformed")]
    Malformed,
    /// A fragment after the first (its ports are not there to translate).
    #[error("fragment")]
    Fragment,
}

impl NatDrop {
    pub const ALL: [NatDrop; 7] = [
        NatDrop::Exhausted,
        NatDrop::TableFull,
        NatDrop::Unsolicited,
        NatDrop::TcpInvalid,
        NatDrop::Protocol,
        NatDrop::Malformed,
        NatDrop::Fragment,
    ];

    pub fn name(self) -> &'static str {
        match self {
            NatDrop::Exhausted => "exhausted",
            NatDrop::TableFull => "table_full",
            NatDrop::Unsolicited => "unsolicited",
            NatDrop::TcpInvalid => "tcp_invalid",
            NatDrop::Protocol => "protocol",
            NatDrop::Malformed => "malformed",
            NatDrop::Fragment => "fragment",
        }
    }
}

/// The NAT's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatCounters {
    /// Connections made and expired.
    pub created: u64,
    pub expired: u64,
    /// New connections that kept their source port.
    pub kept_port: u64,
    /// Packets translated each way; ICMP errors translated.
    pub out: u64,
    pub in_: u64,
    pub icmp_errors: u64,
    /// Drops, in [`NatDrop::ALL`]'s order.
    pub drops: [u64; 7],
}

impl NatCounters {
    pub fn drop_count(&self, d: NatDrop) -> u64 {
        self.drops[d as usize]
    }
}

/// What a connection is, in [`Nat::connections`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connection {
    pub orig: Tuple,
    /// Its public address and port.
    pub public: (u32, u16),
    /// TCP: its state; UDP: whether a reply came.
    pub tcp: Option<TcpState>,
    pub replied: bool,
    /// When it expires, ns.
    pub deadline: u64,
}

impl Connection {
    /// The tuple its replies carry.
    pub fn reply(&self) -> Tuple {
        Tuple {
            proto: self.orig.proto,
            src: self.orig.dst,
            sport: reply_sport(&self.orig),
            dst: self.public.0,
            dport: self.public.1,
        }
    }
}

/// A reply's source port: the destination port (an ICMP echo reply's is 0: its id is the
/// public one, in `dport`).
fn reply_sport(orig: &Tuple) -> u16 {
    if orig.proto == ICMP { 0 } else { orig.dport }
}

#[derive(Debug, Clone)]
struct Entry {
    c: Connection,
    fin_out: Option<Dir>,
    live: bool,
}

/// The state: connections in a slab, found by their original tuple and by their reply tuple.
#[derive(Debug)]
pub struct Nat {
    cfg: NatConfig,
    entries: Vec<Entry>,
    free: Vec<u32>,
    by_orig: HashMap<Tuple, u32>,
    by_reply: HashMap<Tuple, u32>,
    rng: u64,
    sweep: usize,
    pub counters: NatCounters,
}

/// Entries a call sweeps for expiry (amortized: the table never holds many expired ones
/// longer than it takes as many calls).
const SWEEP_A_CALL: usize = 4;

/// The port class of `port` for `proto` (netfilter's): (low, high).
pub fn port_class(proto: u8, port: u16) -> (u16, u16) {
    if proto == ICMP {
        return (0, 65535);
    }
    match port {
        0..=511 => (1, 511),
        512..=1023 => (600, 1023),
        _ => (1024, 65535),
    }
}

/// The address netfilter's rule picks from `n` for `src` talking to `dst`.
pub fn pick_addr(addrs: &[u32], src: u32, dst: u32) -> u32 {
    let h = crate::pipeline::hash_values(&[u64::from(src), u64::from(dst)]);
    addrs[(h % addrs.len() as u64) as usize]
}

/// splitmix64: the port search's offsets (netfilter draws them at random; seeded here, so a
/// run can be repeated and checked against [`naive::NaiveNat`]).
fn next_rand(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The ports of class `(lo, hi)` in slice `slice` of `slices`: (first, count); the `k`-th is
/// `first + k × slices`.
fn slice_ports(lo: u16, hi: u16, slice: u16, slices: u16) -> (u32, u32) {
    let (lo, hi, s, n) = (u32::from(lo), u32::from(hi), u32::from(slice), u32::from(slices));
    let first = lo + (s + n - lo % n) % n;
    if first > hi { (first, 0) } else { (first, (hi - first) / n + 1) }
}

/// netfilter's search for a free port: `used(port)` says whether a port's reply tuple is taken.
/// Returns the port, or None (exhausted).
pub fn choose_port(
    proto: u8,
    sport: u16,
    (slice, slices): (u16, u16),
    rng: &mut u64,
    used: &dyn Fn(u16) -> bool,
) -> Option<u16> {
    if !matches!(proto, TCP | UDP | ICMP) {
        // No ports: the address alone, if its reply tuple is free (port 0 is slice 0's).
        return (slice == 0 && !used(0)).then_some(0);
    }
    if sport % slices == slice && !used(sport) {
        return Some(sport);
    }
    let (lo, hi) = port_class(proto, sport);
    let (first, count) = slice_ports(lo, hi, slice, slices);
    if count == 0 {
        return None;
    }
    let mut attempts = count.min(MAX_ATTEMPTS);
    let mut off = next_rand(rng) as u16 as u32;
    loop {
        for _ in 0..attempts {
            let p = (first + (off % count) * u32::from(slices)) as u16;
            if !used(p) {
                return Some(p);
            }
            off = off.wrapping_add(1);
        }
        if attempts >= count || attempts < 16 {
            return None;
        }
        attempts /= 2;
        off = next_rand(rng) as u16 as u32;
    }
}

/// A connection's timeout after a packet.
pub fn timeout(t: &Timeouts, c: &Connection) -> u64 {
    match (c.orig.proto, c.tcp) {
        (_, Some(s)) => t.tcp[s as usize],
        (UDP, _) if c.replied => t.udp_stream,
        (UDP, _) => t.udp,
        (ICMP, _) => t.icmp,
        _ => t.generic,
    }
}

impl Nat {
    /// A NAT with `cfg` (refused, naming the item, if it is not sound).
    pub fn new(cfg: NatConfig) -> Result<Nat, String> {
        cfg.check()?;
        let rng = cfg.seed;
        Ok(Nat {
            cfg,
            entries: Vec::new(),
            free: Vec::new(),
            by_orig: HashMap::new(),
            by_reply: HashMap::new(),
            rng,
            sweep: 0,
            counters: NatCounters::default(),
        })
    }

    pub fn config(&self) -> &NatConfig {
        &self.cfg
    }

    /// Connections held (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.by_orig.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_orig.is_empty()
    }

    fn count(&mut self, d: NatDrop) -> NatDrop {
        self.counters.drops[d as usize] += 1;
        d
    }

    /// Frees connections expired at `now`, looking at up to `budget` slots; returns how many
    /// it freed.
    pub fn expire(&mut self, now: u64, budget: usize) -> usize {
        let n = self.entries.len();
        if n == 0 {
            return 0;
        }
        let mut freed = 0;
        for _ in 0..budget.min(n) {
            self.sweep = (self.sweep + 1) % n;
            let i = self.sweep;
            if self.entries[i].live && self.entries[i].c.deadline <= now {
                self.remove(i);
                freed += 1;
            }
        }
        freed
    }

    fn remove(&mut self, i: usize) {
        let c = self.entries[i].c;
        self.entries[i].live = false;
        self.by_orig.remove(&c.orig);
        self.by_reply.remove(&c.reply());
        self.free.push(i as u32);
        self.counters.expired += 1;
    }

    /// A live connection by original tuple at `now` (an expired one is removed).
    fn live_by(&mut self, orig: bool, t: &Tuple, now: u64) -> Option<usize> {
        let map = if orig { &self.by_orig } else { &self.by_reply };
        let i = *map.get(t)? as usize;
        if self.entries[i].c.deadline <= now {
            self.remove(i);
            return None;
        }
        Some(i)
    }

    /// The connection whose original tuple is `t`, if live at `now`.
    pub fn get(&self, t: &Tuple, now: u64) -> Option<Connection> {
        let i = *self.by_orig.get(t)? as usize;
        let c = self.entries[i].c;
        (c.deadline > now).then_some(c)
    }

    /// The connection a reply with tuple `t` belongs to, if live at `now`.
    pub fn get_reply(&self, t: &Tuple, now: u64) -> Option<Connection> {
        let i = *self.by_reply.get(t)? as usize;
        let c = self.entries[i].c;
        (c.deadline > now).then_some(c)
    }

    /// Connections held, live at `now`.
    pub fn connections(&self, now: u64) -> impl Iterator<Item = Connection> + '_ {
        self.entries.iter().filter(move |e| e.live && e.c.deadline > now).map(|e| e.c)
    }

    /// A packet going out with original tuple `t` (`flags`: TCP's) at `now`: its connection's
    /// public address and port, made if new.
    pub fn outbound(&mut self, t: Tuple, flags: u8, now: u64) -> Result<(u32, u16), NatDrop> {
        self.expire(now, SWEEP_A_CALL);
        if let Some(i) = self.live_by(true, &t, now) {
            self.touch(i, Dir::Out, flags, now);
            self.counters.out += 1;
            return Ok(self.entries[i].c.public);
        }
        if t.proto == TCP && (flags & RST != 0 || (flags & SYN != 0 && flags & ACK != 0)) {
            return Err(self.count(NatDrop::TcpInvalid));
        }
        if self.by_orig.len() >= self.cfg.capacity {
            // Expired connections not swept yet make room first.
            let all = self.entries.len();
            self.expire(now, all);
            if self.by_orig.len() >= self.cfg.capacity {
                return Err(self.count(NatDrop::TableFull));
            }
        }
        let addr = pick_addr(&self.cfg.addrs, t.src, t.dst);
        let sport = reply_sport(&t);
        let by_reply = &self.by_reply;
        let entries = &self.entries;
        let used = |p: u16| {
            let r = Tuple { proto: t.proto, src: t.dst, sport, dst: addr, dport: p };
            by_reply.get(&r).is_some_and(|&i| entries[i as usize].c.deadline > now)
        };
        let Some(port) = choose_port(t.proto, t.sport, (self.cfg.slice, self.cfg.slices), &mut self.rng, &used) else {
            return Err(self.count(NatDrop::Exhausted));
        };
        // An expired connection holding the reply tuple gives it up.
        let reply = Tuple { proto: t.proto, src: t.dst, sport, dst: addr, dport: port };
        if let Some(&old) = self.by_reply.get(&reply) {
            self.remove(old as usize);
        }
        let tcp = (t.proto == TCP).then_some(if flags & SYN != 0 { TcpState::SynSent } else { TcpState::Established });
        let mut c = Connection { orig: t, public: (addr, port), tcp, replied: false, deadline: 0 };
        c.deadline = now.saturating_add(timeout(&self.cfg.timeouts, &c));
        self.hold(c);
        self.counters.created += 1;
        self.counters.kept_port += u64::from(port == t.sport);
        self.counters.out += 1;
        Ok((addr, port))
    }

    /// A packet coming in with tuple `t` (as it arrives: from outside to a public address) at
    /// `now`: the inside address and port it goes to.
    pub fn inbound(&mut self, t: Tuple, flags: u8, now: u64) -> Result<(u32, u16), NatDrop> {
        self.expire(now, SWEEP_A_CALL);
        let Some(i) = self.live_by(false, &t, now) else {
            return Err(self.count(NatDrop::Unsolicited));
        };
        self.touch(i, Dir::In, flags, now);
        self.counters.in_ += 1;
        let o = self.entries[i].c.orig;
        Ok((o.src, o.sport))
    }

    /// A packet of connection `i` went `dir` with `flags` at `now`: its state and timeout.
    fn touch(&mut self, i: usize, dir: Dir, flags: u8, now: u64) {
        let e = &mut self.entries[i];
        if dir == Dir::In {
            e.c.replied = true;
        }
        if let Some(s) = e.c.tcp {
            e.c.tcp = Some(tcp_next(s, dir, flags, &mut e.fin_out));
        }
        e.c.deadline = now.saturating_add(timeout(&self.cfg.timeouts, &e.c));
    }

    /// Takes over a connection (a replica from a failed server: its public address and port
    /// kept); refused if its tuples are taken here.
    pub fn adopt(&mut self, c: Connection) -> Result<(), &'static str> {
        if self.by_orig.contains_key(&c.orig) || self.by_reply.contains_key(&c.reply()) {
            return Err("taken");
        }
        if self.by_orig.len() >= self.cfg.capacity {
            return Err("table_full");
        }
        self.hold(c);
        Ok(())
    }

    /// As [`adopt`](Self::adopt), but a connection held already with the same public address
    /// and port is kept, its timeout the later of the two (a replica handed back again).
    pub fn readopt(&mut self, c: Connection) -> Result<(), &'static str> {
        if let Some(&i) = self.by_orig.get(&c.orig)
            && self.entries[i as usize].c.public == c.public
        {
            let e = &mut self.entries[i as usize];
            e.c.deadline = e.c.deadline.max(c.deadline);
            return Ok(());
        }
        self.adopt(c)
    }

    /// Puts a connection in a free slot (or a new one), found by both its tuples.
    fn hold(&mut self, c: Connection) {
        let e = Entry { c, fin_out: None, live: true };
        let i = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = e;
                i
            }
            None => {
                self.entries.push(e);
                (self.entries.len() - 1) as u32
            }
        };
        self.by_orig.insert(c.orig, i);
        self.by_reply.insert(c.reply(), i);
    }
}

/// What translating a packet did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translated {
    /// The connection's original tuple and public address and port.
    pub orig: Tuple,
    pub public: (u32, u16),
    /// It was an ICMP error about the connection (its quoted packet translated too).
    pub icmp_error: bool,
}

/// ICMP types: echo reply and request, and the errors that quote a packet.
const ECHO_REPLY: u8 = 0;
const ECHO_REQUEST: u8 = 8;
const ICMP_ERRORS: [u8; 5] = [3, 4, 5, 11, 12];

/// An IPv4 header's fields the NAT reads: (header length, end of the packet, protocol), or
/// why not.
fn ipv4_bounds(ip: &[u8]) -> Result<(usize, usize, u8), NatDrop> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[0] & 0xf < 5 {
        return Err(NatDrop::Malformed);
    }
    let ihl = usize::from(ip[0] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ihl > ip.len() || total < ihl || total > ip.len() {
        return Err(NatDrop::Malformed);
    }
    Ok((ihl, total, ip[9]))
}

fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

use tern_wire::frame::rewrite_field as put;

/// Where a transport header at `l4` (ending at `end`) keeps its checksum, if the packet holds
/// it: (offset, is UDP).
fn l4_sum(proto: u8, l4: usize, end: usize) -> Option<(usize, bool)> {
    let at = match proto {
        TCP => l4 + 16,
        UDP => l4 + 6,
        ICMP => l4 + 2,
        _ => return None,
    };
    (at + 2 <= end).then_some((at, proto == UDP))
}

/// A packet as the NAT reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A TCP or UDP segment or an ICMP echo (a request going out, a reply coming in): its
    /// tuple as it travels, its TCP flags, where its transport header starts and the packet
    /// ends.
    Conn { t: Tuple, flags: u8, l4: usize, end: usize },
    /// An ICMP error: its header at `ihl`, the packet ending at `end`.
    IcmpError { ihl: usize, end: usize },
}

/// Reads an IPv4 packet (`ip` from its first byte) going `dir`, or says why it cannot be
/// translated.
pub fn parse(ip: &[u8], dir: Dir) -> Result<Parsed, NatDrop> {
    let (ihl, end, proto) = ipv4_bounds(ip)?;
    if rd16(ip, 6) & 0x1fff != 0 {
        return Err(NatDrop::Fragment);
    }
    let l4 = ihl;
    let need = match proto {
        TCP => 20,
        UDP | ICMP => 8,
        // Another protocol: no ports to read (its address alone is translated).
        _ => 0,
    };
    if l4 + need > end {
        return Err(NatDrop::Malformed);
    }
    if proto == ICMP && ICMP_ERRORS.contains(&ip[l4]) {
        return Ok(Parsed::IcmpError { ihl, end });
    }
    let (sport, dport, flags) = match proto {
        ICMP => {
            let want = if dir == Dir::Out { ECHO_REQUEST } else { ECHO_REPLY };
            if ip[l4] != want || ip[l4 + 1] != 0 {
                return Err(NatDrop::Protocol);
            }
            let id = rd16(ip, l4 + 4);
            if dir == Dir::Out { (id, 0, 0) } else { (0, id, 0) }
        }
        TCP | UDP => (rd16(ip, l4), rd16(ip, l4 + 2), if proto == TCP { ip[l4 + 13] } else { 0 }),
        _ => (0, 0, 0),
    };
    Ok(Parsed::Conn { t: Tuple { proto, src: rd32(ip, 12), sport, dst: rd32(ip, 16), dport }, flags, l4, end })
}

impl Nat {
    /// Translates an IPv4 packet (`ip` from its first byte) going `dir` at `now`, in place:
    /// out, its source address and port (an echo request's id) become the connection's public
    /// ones; in, a reply's destination becomes the inside host's; an ICMP error about a
    /// connection has the packet it quotes translated as well (and its checksums). Checksums
    /// are updated incrementally; an ICMP error's own checksum is computed afresh.
    pub fn translate(&mut self, ip: &mut [u8], dir: Dir, now: u64) -> Result<Translated, NatDrop> {
        let (t, flags, l4, end) = match parse(ip, dir) {
            Ok(Parsed::Conn { t, flags, l4, end }) => (t, flags, l4, end),
            Ok(Parsed::IcmpError { ihl, end }) => return self.translate_icmp_error(ip, dir, (ihl, end), now),
            Err(d) => return Err(self.count(d)),
        };
        let proto = t.proto;
        let l4s = l4_sum(proto, l4, end);
        // The pseudo-header covers the addresses for TCP and UDP, not for ICMP.
        let addr_sums: &[(usize, bool)] = match (proto, l4s) {
            (TCP | UDP, Some(s)) => &[(10, false), s],
            _ => &[(10, false)],
        };
        let port_at = match (proto, dir) {
            (ICMP, _) => l4 + 4,
            (_, Dir::Out) => l4,
            (_, Dir::In) => l4 + 2,
        };
        let tr = self.track_conn(t, flags, dir, now)?;
        // Another protocol has no ports (and no checksum of ours to keep): its address alone.
        let ports = matches!(proto, TCP | UDP | ICMP);
        match dir {
            Dir::Out => {
                put(ip, 12, &tr.public.0.to_be_bytes(), addr_sums);
                if ports {
                    put(ip, port_at, &tr.public.1.to_be_bytes(), l4s.as_slice());
                }
            }
            Dir::In => {
                put(ip, 16, &tr.orig.src.to_be_bytes(), addr_sums);
                if ports {
                    put(ip, port_at, &tr.orig.sport.to_be_bytes(), l4s.as_slice());
                }
            }
        }
        Ok(tr)
    }

    /// The connection of a packet [`parse`] read (`t`, with its TCP `flags`) going `dir` at
    /// `now`: made if new and going out, its state and timeout moved on, the packet left as it
    /// is — what the switch's post-processing needs to rewrite it.
    pub fn track_conn(&mut self, t: Tuple, flags: u8, dir: Dir, now: u64) -> Result<Translated, NatDrop> {
        match dir {
            Dir::Out => {
                let public = self.outbound(t, flags, now)?;
                Ok(Translated { orig: t, public, icmp_error: false })
            }
            Dir::In => {
                self.inbound(t, flags, now)?;
                Ok(Translated { orig: self.get_reply_orig(&t), public: (t.dst, t.dport), icmp_error: false })
            }
        }
    }

    fn get_reply_orig(&self, reply: &Tuple) -> Tuple {
        self.by_reply.get(reply).map_or(*reply, |&i| self.entries[i as usize].c.orig)
    }

    /// An ICMP error (at `ihl`, the packet ending at `end`) about a connection: the packet it
    /// quotes is one of the connection's (a reply going out; one that went out, coming in),
    /// translated back the same way as the error's own address.
    fn translate_icmp_error(
        &mut self,
        ip: &mut [u8],
        dir: Dir,
        (ihl, end): (usize, usize),
        now: u64,
    ) -> Result<Translated, NatDrop> {
        let q = ihl + 8;
        // The quoted header and at least the first 8 bytes after it (RFC 792).
        if q + 20 > end || ip[q] >> 4 != 4 || ip[q] & 0xf < 5 {
            return Err(self.count(NatDrop::Malformed));
        }
        let qihl = usize::from(ip[q] & 0xf) * 4;
        let ql4 = q + qihl;
        if ql4 + 8 > end {
            return Err(self.count(NatDrop::Malformed));
        }
        let qproto = ip[q + 9];
        let (qs, qd) = match qproto {
            TCP | UDP => (rd16(ip, ql4), rd16(ip, ql4 + 2)),
            // A quoted echo request (going out, the error coming in) or reply.
            ICMP if ip[ql4] == ECHO_REQUEST && dir == Dir::In => (rd16(ip, ql4 + 4), 0),
            ICMP if ip[ql4] == ECHO_REPLY && dir == Dir::Out => (0, rd16(ip, ql4 + 4)),
            _ => return Err(self.count(NatDrop::Protocol)),
        };
        let quoted = Tuple { proto: qproto, src: rd32(ip, q + 12), sport: qs, dst: rd32(ip, q + 16), dport: qd };
        let ql4s = l4_sum(qproto, ql4, end);
        let qaddr_sums: Vec<(usize, bool)> =
            std::iter::once((q + 10, false)).chain(ql4s.filter(|_| qproto != ICMP)).collect();
        let qport_sums: Vec<(usize, bool)> = ql4s.into_iter().collect();
        let c = match dir {
            // The quoted packet went out translated: its reply tuple finds the connection.
            Dir::In => self.get_reply(&quoted.reversed(), now),
            // The quoted packet is a reply the inside host got: its original tuple, reversed.
            Dir::Out => self.get(&quoted.reversed(), now),
        };
        let Some(c) = c else {
            return Err(self.count(NatDrop::Unsolicited));
        };
        let port_in_quote = |src: bool| match qproto {
            ICMP => ql4 + 4,
            _ if src => ql4,
            _ => ql4 + 2,
        };
        match dir {
            Dir::In => {
                // Quoted: public → remote; it becomes inside → remote, and the error goes to
                // the inside host.
                put(ip, q + 12, &c.orig.src.to_be_bytes(), &qaddr_sums);
                put(ip, port_in_quote(true), &c.orig.sport.to_be_bytes(), &qport_sums);
                put(ip, 16, &c.orig.src.to_be_bytes(), &[(10, false)]);
            }
            Dir::Out => {
                // Quoted: remote → inside; it becomes remote → public, and the error comes
                // from the public address.
                put(ip, q + 16, &c.public.0.to_be_bytes(), &qaddr_sums);
                put(ip, port_in_quote(false), &c.public.1.to_be_bytes(), &qport_sums);
                put(ip, 12, &c.public.0.to_be_bytes(), &[(10, false)]);
            }
        }
        ip[ihl + 2..ihl + 4].fill(0);
        let sum = tern_wire::frame::checksum(&ip[ihl..end]);
        ip[ihl + 2..ihl + 4].copy_from_slice(&sum.to_be_bytes());
        self.counters.icmp_errors += 1;
        Ok(Translated { orig: c.orig, public: c.public, icmp_error: true })
    }
}

/// The reference twin: connections in a list, scanned; the same rules and the same offsets,
/// none of the indexes (a property test runs both on the same packets).
pub mod naive {
    use super::*;

    #[derive(Debug)]
    pub struct NaiveNat {
        cfg: NatConfig,
        conns: Vec<(Connection, Option<Dir>)>,
        rng: u64,
    }

    impl NaiveNat {
        pub fn new(cfg: NatConfig) -> NaiveNat {
            let rng = cfg.seed;
            NaiveNat { cfg, conns: Vec::new(), rng }
        }

        pub fn outbound(&mut self, t: Tuple, flags: u8, now: u64) -> Result<(u32, u16), NatDrop> {
            self.conns.retain(|c| c.0.deadline > now);
            if let Some(i) = self.conns.iter().position(|c| c.0.orig == t) {
                let (c, fin) = &mut self.conns[i];
                if let Some(s) = c.tcp {
                    c.tcp = Some(tcp_next(s, Dir::Out, flags, fin));
                }
                c.deadline = now + timeout(&self.cfg.timeouts, c);
                return Ok(c.public);
            }
            if t.proto == TCP && (flags & RST != 0 || (flags & SYN != 0 && flags & ACK != 0)) {
                return Err(NatDrop::TcpInvalid);
            }
            if self.conns.len() >= self.cfg.capacity {
                return Err(NatDrop::TableFull);
            }
            let addr = pick_addr(&self.cfg.addrs, t.src, t.dst);
            let conns = &self.conns;
            let used = |p: u16| {
                let r = Tuple { proto: t.proto, src: t.dst, sport: reply_sport(&t), dst: addr, dport: p };
                conns.iter().any(|c| c.0.reply() == r)
            };
            let port = choose_port(t.proto, t.sport, (self.cfg.slice, self.cfg.slices), &mut self.rng, &used)
                .ok_or(NatDrop::Exhausted)?;
            let tcp =
                (t.proto == TCP).then_some(if flags & SYN != 0 { TcpState::SynSent } else { TcpState::Established });
            let mut c = Connection { orig: t, public: (addr, port), tcp, replied: false, deadline: 0 };
            c.deadline = now + timeout(&self.cfg.timeouts, &c);
            self.conns.push((c, None));
            Ok((addr, port))
        }

        pub fn inbound(&mut self, t: Tuple, flags: u8, now: u64) -> Result<(u32, u16), NatDrop> {
            self.conns.retain(|c| c.0.deadline > now);
            let (c, fin) = self.conns.iter_mut().find(|c| c.0.reply() == t).ok_or(NatDrop::Unsolicited)?;
            c.replied = true;
            if let Some(s) = c.tcp {
                c.tcp = Some(tcp_next(s, Dir::In, flags, fin));
            }
            c.deadline = now + timeout(&self.cfg.timeouts, c);
            Ok((c.orig.src, c.orig.sport))
        }

        pub fn connections(&self, now: u64) -> Vec<Connection> {
            self.conns.iter().filter(|c| c.0.deadline > now).map(|c| c.0).collect()
        }
    }
}
