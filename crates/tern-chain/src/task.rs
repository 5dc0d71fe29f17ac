//! Network tasks as the data path runs them (docs/chain.md, "Network tasks"): the
//! [`NetworkTask`] trait every kind implements, its [`Cost`] descriptor, and [`build`], which
//! makes a task instance from a tenant file's [`TaskSpec`].
//!
//! A task takes one packet at a time, in place, and says what becomes of it ([`Verdict`]): on to
//! the next task, dropped (a named reason, counted), or answered — the packet rewritten as the
//! answer and sent back where it came from, taking no further task. A task may also send packets
//! of its own back towards a packet's source ([`Cx::emitted`]: the transport's
//! acknowledgements), drawn from the runtime's pool.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tern_io::{Packet, Pool};
use tern_wire::frame::{FrameInfo, L3, proto, refit_udp4};

use crate::aes::{AesTask, KeySpace};
use crate::fw::Firewall;
use crate::gbn;
use crate::kv::{self, Cache};
use crate::lb::Maglev;
use crate::nat::{Dir, Nat};
use crate::tenant::TaskSpec;

/// What becomes of a packet after a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On to the next task.
    Pass,
    /// Dropped, for this reason (a counter's name).
    Drop(&'static str),
    /// Rewritten as an answer to its source: it leaves now, taking no further task.
    Reply,
}

/// Every reason a task of `kind` (one of [`crate::tenant::KINDS`]) drops a packet for: the
/// names its [`Verdict::Drop`]s carry, which count under them (docs/chain.md's table of kinds
/// lists the same; a test compares them, and debug builds check each drop against it). None for
/// a kind that never drops (`dummy`) or is not a kind.
pub fn drop_reasons(kind: &str) -> &'static [&'static str] {
    match kind {
        // As `FwDrop::ALL`, `NatDrop::ALL` and `AesDrop::ALL` name them (a test compares).
        "firewall" => &["malformed", "not_ip", "denied"],
        "nat" => &["malformed", "not_ipv4", "fragment", "not_tcp_udp", "no_mapping", "ports_exhausted", "port_limit"],
        "aes" => &["malformed", "not_udp4", "too_large", "bad_tag", "nonces_exhausted"],
        "lb" => &["malformed", "not_tcp_udp4"],
        "gbn" => &["malformed", "connections_full", "peer_full"],
        "kv" => &["not_udp4", "malformed"],
        "stage" => &["stage_dropped"],
        _ => &[],
    }
}

/// What a task costs and what it is: the cost descriptor the planner and the hardware model
/// read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Software time a packet, ns, on this project's 2-core EPYC machine (the task benchmark's
    /// figure; a dummy's is what it is configured to).
    pub ns_per_packet: f64,
    /// Its area, LUTs, where the task says (a dummy's); else the profile's `nt.NAME.luts`.
    pub luts: Option<u64>,
    /// The most it carries, Gbit/s, where the task says (a dummy's cap); else the profile's
    /// `nt.NAME.gbps` or the line.
    pub gbps: Option<f64>,
    /// Whether it keeps state across packets (flow tables, caches, counters of nonces): a
    /// chain with such a task runs its instances flow-affine.
    pub stateful: bool,
    /// Whether it may change a packet's bytes.
    pub modifies: bool,
}

/// What a task is given with each packet.
#[derive(Debug)]
pub struct Cx<'a> {
    /// The time (one reading per batch).
    pub now: Instant,
    /// Buffers for packets a task sends of its own.
    pub pool: &'a Pool,
    /// Packets a task sends of its own, back towards the packet's source.
    pub emitted: &'a mut Vec<Packet>,
    /// Whether what runs the task paces its packets to the tasks' caps (`Cost::gbps`), as a
    /// region does, holding its next packets back for the time a capped task takes: such a
    /// task then spends only its own time. Otherwise (a whole chain on a core, `rtc`; a trace)
    /// a capped task spends the time its cap says itself.
    pub paced: bool,
    /// The port the packet in hand came in on (set before each packet; 0 where there is one,
    /// as in a trace).
    pub port: u8,
}

/// A network task: one instance, holding one tenant's state.
pub trait NetworkTask: Send + std::fmt::Debug {
    /// Its kind (one of [`crate::tenant::KINDS`]).
    fn kind(&self) -> &'static str;
    /// Its cost descriptor.
    fn cost(&self) -> Cost;
    /// Processes one packet in place.
    fn process(&mut self, packet: &mut Packet, cx: &mut Cx<'_>) -> Verdict;
    /// Its counters, by name (drops among them under their reasons).
    fn counters(&self) -> Vec<(&'static str, u64)>;
    /// Makes this instance number `k` of `n` (before it sees a packet): a task whose replies
    /// are not its flows' (the NAT's come to its external ports) takes a share of what it
    /// hands out, so [`steer`](Self::steer) can find it. An error if it cannot be shared so.
    fn partition(&mut self, _k: usize, _n: usize) -> Result<(), String> {
        Ok(())
    }
    /// Which packets must go to the instance that owns them, whatever their flow: the NAT's
    /// replies, by the external port (`(address, first port, last port)`).
    fn steer(&self) -> Option<Steer> {
        None
    }
    /// Whether its state is the tenant's rather than a flow's, so every packet of the tenant
    /// must reach one instance (the KV cache: a SET through one instance must reach the cache a
    /// GET may hit in). Such a tenant's packets all go to instance 0.
    fn one_instance(&self) -> bool {
        false
    }
    /// Whether it reads a packet's bytes past its headers (a cipher): a region running it asks
    /// for the next packet's lines while it runs one (docs/chain.md, "The data path").
    fn reads_payload(&self) -> bool {
        false
    }
    /// The state it keeps from packet to packet apart from its parameters (a firewall's
    /// established flows, a NAT's mappings, a transport's connections, a cache's entries), for
    /// [`swap_state`](Self::swap_state) to find in another task; `None` (the default) for a task
    /// without such state.
    fn state(&mut self) -> Option<&mut dyn std::any::Any> {
        None
    }
    /// Exchanges that state with `other`'s where both are of one kind and it may pass between
    /// them (a NAT's only with the same external address and ports; a cache's within each side's
    /// own bounds); whether it did. An update's new task takes its predecessor's state so, and the
    /// two generations share it while the previous one's packets drain (docs/chain.md,
    /// "Updates").
    fn swap_state(&mut self, other: &mut dyn NetworkTask) -> bool {
        let _ = other;
        false
    }
}

/// `other`'s state if it is a `T`.
fn state_of<T: 'static>(other: &mut dyn NetworkTask) -> Option<&mut T> {
    other.state().and_then(|s| s.downcast_mut::<T>())
}

/// Packets to an address whose destination port lies in a range are steered to the instance
/// that owns the port: of `n` instances, port `p` is owned by instance
/// `(p − first) × n / (last − first + 1)` (and [`slice`](fn@slice) gives each instance's ports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Steer {
    /// The IPv4 address.
    pub addr: u32,
    /// The ports, inclusive.
    pub first: u16,
    pub last: u16,
}

impl Steer {
    /// The instance of `n` that owns `port` (None: not in the range).
    pub fn owner(&self, port: u16, n: usize) -> Option<usize> {
        if port < self.first || port > self.last || n == 0 {
            return None;
        }
        let span = u64::from(self.last - self.first) + 1;
        Some(((u64::from(port - self.first) * n as u64) / span) as usize)
    }
}

/// The ports of `(first, last)` instance `k` of `n` owns under [`Steer::owner`] (None if it
/// owns none: more instances than ports).
pub fn slice(first: u16, last: u16, k: usize, n: usize) -> Option<(u16, u16)> {
    let span = u64::from(last - first) + 1;
    let (n, k) = (n.max(1) as u64, k as u64);
    // The least p with floor(p × n / span) ≥ k is ceil(k × span / n).
    let start = (k * span).div_ceil(n);
    let end = ((k + 1) * span).div_ceil(n);
    (end > start).then(|| (first + start as u16, first + (end - 1) as u16))
}

/// Every tenant's AES key space, kept across launches so that relaunched instances never reuse
/// a nonce (docs/chain.md, "AES-GCM"), and where their instance numbers come from.
#[derive(Debug, Default)]
pub struct Keys {
    spaces: HashMap<[u8; 32], Arc<KeySpace>>,
    numbering: Numbering,
}

/// Where the key spaces of a [`Keys`] take their instance numbers.
#[derive(Debug, Clone, Default)]
pub enum Numbering {
    /// 0, 1, 2, … in this process ([`KeySpace::new`]): tests and benchmarks.
    #[default]
    Process,
    /// Reserved in a nonce ledger ([`KeySpace::with_ledger`]): what seals real traffic.
    Ledger(Arc<crate::aes::ledger::Ledger>),
    /// Random ([`KeySpace::random`]): one-off instances.
    Random,
    /// None: every instance is refused with this reason.
    Refused(String),
}

impl Keys {
    /// Key spaces numbered as `numbering` says.
    pub fn new(numbering: Numbering) -> Keys {
        Keys { spaces: HashMap::new(), numbering }
    }

    /// The key space of `key`, made the first time it is asked for.
    pub fn space(&mut self, key: [u8; 32]) -> Arc<KeySpace> {
        let numbering = &self.numbering;
        self.spaces
            .entry(key)
            .or_insert_with(|| match numbering {
                Numbering::Process => KeySpace::new(key),
                Numbering::Ledger(l) => KeySpace::with_ledger(key, l.clone()),
                Numbering::Random => KeySpace::random(key),
                Numbering::Refused(why) => KeySpace::refused(key, why.clone()),
            })
            .clone()
    }
}

/// A task instance of `spec`, or why it cannot run (naming the item).
pub fn build(spec: &TaskSpec, keys: &mut Keys) -> Result<Box<dyn NetworkTask>, String> {
    Ok(match spec {
        TaskSpec::Firewall { rules, config } => {
            Box::new(FwTask(Firewall::new(rules, *config).map_err(|e| format!("firewall: {e}"))?))
        }
        TaskSpec::Nat(cfg) => {
            Box::new(NatTask { nat: Nat::new(*cfg), cfg: *cfg, external: u32::from_be_bytes(cfg.external) })
        }
        TaskSpec::Aes { key, seal } => {
            Box::new(AesNt { task: AesTask::new(&keys.space(*key)).map_err(|e| format!("aes: {e}"))?, seal: *seal })
        }
        TaskSpec::Lb { backends, table_size } => Box::new(LbTask::new(backends, *table_size)?),
        TaskSpec::Gbn(cfg) => Box::new(GbnTask { connections: gbn::Connections::new(*cfg), ..GbnTask::default() }),
        TaskSpec::Kv(cfg) => {
            Box::new(KvTask { cache: Cache::new(*cfg), info: FrameInfo::default(), answer: Vec::new(), too_large: 0 })
        }
        TaskSpec::Dummy { ns_per_packet, gbps, luts } => {
            Box::new(Dummy { ns: *ns_per_packet, gbps: *gbps, luts: *luts, passed: 0, busy: Busy::new() })
        }
        TaskSpec::Stage { engine, .. } => {
            return Err(format!(
                "stage engine `{engine}`: not built in here (tern's command line runs `flow`, a tern flow switch)"
            ));
        }
    })
}

/// The firewall.
#[derive(Debug)]
struct FwTask(Firewall);

impl NetworkTask for FwTask {
    fn kind(&self) -> &'static str {
        "firewall"
    }
    fn state(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(&mut self.0)
    }
    fn swap_state(&mut self, other: &mut dyn NetworkTask) -> bool {
        state_of::<Firewall>(other).map(|o| self.0.swap_flows(o)).is_some()
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 114.0, luts: None, gbps: None, stateful: true, modifies: false }
    }
    fn process(&mut self, p: &mut Packet, cx: &mut Cx<'_>) -> Verdict {
        match self.0.check(p.data(), cx.now) {
            Ok(()) => Verdict::Pass,
            Err(d) => Verdict::Drop(d.name()),
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.0.stats();
        let mut v = vec![("allowed", s.allowed), ("established", s.established), ("flows", s.flows)];
        v.extend([
            ("expired", s.expired),
            ("state_full", s.state_full),
            ("unreplied_evicted", s.unreplied_evicted),
            ("source_full", s.source_full),
            ("revoked", s.revoked),
        ]);
        v.extend(crate::fw::FwDrop::ALL.iter().zip(s.drops).map(|(d, n)| (d.name(), n)));
        v
    }
}

/// The NAT: a frame to the external address comes in (its destination translated back), any
/// other goes out (its source translated).
#[derive(Debug)]
struct NatTask {
    nat: Nat,
    cfg: crate::nat::NatConfig,
    external: u32,
}

impl NetworkTask for NatTask {
    fn kind(&self) -> &'static str {
        "nat"
    }
    fn state(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(&mut self.nat)
    }
    fn swap_state(&mut self, other: &mut dyn NetworkTask) -> bool {
        state_of::<Nat>(other).is_some_and(|o| self.nat.swap_mappings(o))
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 51.0, luts: None, gbps: None, stateful: true, modifies: true }
    }
    fn process(&mut self, p: &mut Packet, cx: &mut Cx<'_>) -> Verdict {
        let f = p.data();
        let inbound =
            f.len() >= 34 && f[12..14] == [8, 0] && u32::from_be_bytes([f[30], f[31], f[32], f[33]]) == self.external;
        let dir = if inbound { Dir::Inbound } else { Dir::Outbound };
        match self.nat.translate(p.data_mut(), dir, cx.now) {
            Ok(()) => Verdict::Pass,
            Err(d) => Verdict::Drop(d.name()),
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.nat.stats();
        let mut v = vec![
            ("outbound", s.outbound),
            ("inbound", s.inbound),
            ("mappings", s.mappings),
            ("expired", s.expired),
            ("unreplied_evicted", s.unreplied_evicted),
        ];
        v.extend(crate::nat::NatDrop::ALL.iter().zip(s.drops).map(|(d, n)| (d.name(), n)));
        v
    }
    fn partition(&mut self, k: usize, n: usize) -> Result<(), String> {
        let (first, last) = self.cfg.ports;
        let ports = slice(first, last, k, n)
            .ok_or_else(|| format!("nat: {} external ports cannot be shared by {n} instances", last - first + 1))?;
        // A host's limit is shared out too (its flows are spread over the instances by hash), so
        // that it holds no more than its limit over them all: ⌊limit / n⌋ each, the first
        // `limit mod n` instances one more (at least 1 each).
        let (limit, n32, k32) = (self.cfg.ports_per_host, n as u32, k as u32);
        let ports_per_host = (limit / n32 + u32::from(k32 < limit % n32)).max(1);
        self.nat = Nat::new(crate::nat::NatConfig { ports, ports_per_host, ..self.cfg });
        Ok(())
    }
    fn steer(&self) -> Option<Steer> {
        Some(Steer { addr: self.external, first: self.cfg.ports.0, last: self.cfg.ports.1 })
    }
}

/// AES-GCM, sealing or opening.
#[derive(Debug)]
struct AesNt {
    task: AesTask,
    seal: bool,
}

impl NetworkTask for AesNt {
    fn kind(&self) -> &'static str {
        "aes"
    }
    fn cost(&self) -> Cost {
        // Its only state, the count of nonces, is the instance's own: any packet may go to any
        // instance.
        Cost { ns_per_packet: 191.0, luts: None, gbps: None, stateful: false, modifies: true }
    }
    fn reads_payload(&self) -> bool {
        true
    }
    fn process(&mut self, p: &mut Packet, _: &mut Cx<'_>) -> Verdict {
        let r = if self.seal { self.task.seal_packet(p) } else { self.task.open_packet(p) };
        match r {
            Ok(()) => Verdict::Pass,
            Err(d) => Verdict::Drop(d.name()),
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.task.stats();
        let mut v = vec![("sealed", s.sealed), ("opened", s.opened)];
        v.extend(crate::aes::AesDrop::ALL.iter().zip(s.drops).map(|(d, n)| (d.name(), n)));
        v
    }
}

/// The load balancer: a TCP or UDP frame over IPv4 goes to the backend Maglev picks for its
/// flow, its destination address and port rewritten (checksums updated incrementally).
#[derive(Debug)]
struct LbTask {
    maglev: Maglev,
    backends: Vec<([u8; 4], u16)>,
    info: FrameInfo,
    sent: Vec<u64>,
    malformed: u64,
    not_tcp_udp4: u64,
}

impl LbTask {
    fn new(backends: &[(String, u32)], size: usize) -> Result<LbTask, String> {
        let refs: Vec<(&str, u32)> = backends.iter().map(|(n, w)| (n.as_str(), *w)).collect();
        let maglev = Maglev::new(&refs, size).map_err(|e| format!("lb: {e}"))?;
        let mut addrs = Vec::with_capacity(backends.len());
        for (name, _) in backends {
            let a: std::net::SocketAddrV4 = name.parse().map_err(|_| {
                format!(
                    "lb: backend `{name}` is not an IPv4 address and port (ADDR:PORT), which the data path rewrites to"
                )
            })?;
            addrs.push((a.ip().octets(), a.port()));
        }
        Ok(LbTask {
            maglev,
            sent: vec![0; addrs.len()],
            backends: addrs,
            info: FrameInfo::default(),
            malformed: 0,
            not_tcp_udp4: 0,
        })
    }
}

/// A flow's hash: its addresses, protocol and ports, mixed (splitmix64's finalizer).
fn flow_hash(i: &FrameInfo) -> u64 {
    let mut x = (i.src as u64) ^ ((i.dst as u64) << 32) ^ (u64::from(i.proto) << 24);
    x ^= (u64::from(i.src_port) << 16 | u64::from(i.dst_port)).rotate_left(40);
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl NetworkTask for LbTask {
    fn kind(&self) -> &'static str {
        "lb"
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 40.0, luts: None, gbps: None, stateful: false, modifies: true }
    }
    fn process(&mut self, p: &mut Packet, _: &mut Cx<'_>) -> Verdict {
        if self.info.parse_general_into(p.data()).is_err() {
            self.malformed += 1;
            return Verdict::Drop("malformed");
        }
        let i = self.info;
        if i.l3 != L3::Ipv4 || i.fragment || !i.has_l4 || (i.proto != proto::TCP && i.proto != proto::UDP) {
            self.not_tcp_udp4 += 1;
            return Verdict::Drop("not_tcp_udp4");
        }
        let b = self.maglev.lookup(flow_hash(&i));
        let (addr, port) = self.backends[b];
        let (l3, l4) = (usize::from(i.l3_off), usize::from(i.l4_off));
        crate::nat::rewrite_addr_port(p.data_mut(), &i, (l3 + 16, addr), (l4 + 2, port));
        self.sent[b] += 1;
        Verdict::Pass
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("balanced", self.sent.iter().sum()), ("malformed", self.malformed), ("not_tcp_udp4", self.not_tcp_udp4)]
    }
}

/// The UDP-over-IPv4-without-options frame's (l3, l4, end), or `None`.
fn udp4(info: &mut FrameInfo, frame: &[u8]) -> Option<(usize, usize, usize)> {
    info.parse_general_into(frame).ok()?;
    let i = *info;
    let (l3, l4) = (usize::from(i.l3_off), usize::from(i.l4_off));
    (i.l3 == L3::Ipv4 && !i.fragment && i.has_l4 && i.proto == proto::UDP && l4 == l3 + 20).then_some((
        l3,
        l4,
        usize::from(i.ip_end),
    ))
}

/// Rewrites a UDP-over-IPv4 frame (its headers at `l3`, `l4`) as one back to its source
/// carrying `payload`: MAC addresses, IP addresses and ports swapped, lengths and checksums
/// made anew. False, changing nothing, if the buffer cannot hold it.
fn turn_around(p: &mut Packet, l3: usize, l4: usize, payload: &[u8]) -> bool {
    let end = l4 + 8 + payload.len();
    if end > p.capacity() || end - l3 > 9000 {
        return false;
    }
    p.set_len(end);
    let f = p.data_mut();
    for k in 0..6 {
        f.swap(k, 6 + k);
    }
    for k in 0..4 {
        f.swap(l3 + 12 + k, l3 + 16 + k);
    }
    f.swap(l4, l4 + 2);
    f.swap(l4 + 1, l4 + 3);
    f[l4 + 8..end].copy_from_slice(payload);
    refit_udp4(f, l3, l4, end);
    true
}

/// The KV cache: clients' GETs and SETs and the server's answers are UDP payloads over IPv4
/// (docs/chain.md, "KV cache"); a hit is answered here.
#[derive(Debug)]
struct KvTask {
    cache: Cache,
    info: FrameInfo,
    answer: Vec<u8>,
    too_large: u64,
}

impl NetworkTask for KvTask {
    fn kind(&self) -> &'static str {
        "kv"
    }
    fn state(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(&mut self.cache)
    }
    fn swap_state(&mut self, other: &mut dyn NetworkTask) -> bool {
        state_of::<Cache>(other).is_some_and(|o| self.cache.swap_entries(o))
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 82.0, luts: None, gbps: None, stateful: true, modifies: true }
    }
    fn process(&mut self, p: &mut Packet, cx: &mut Cx<'_>) -> Verdict {
        let Some((l3, l4, end)) = udp4(&mut self.info, p.data()) else { return Verdict::Drop("not_udp4") };
        let i = self.info;
        let way = kv::Way {
            side: cx.port,
            src: (i.src_v4().to_be_bytes(), i.src_port),
            dst: (i.dst_v4().to_be_bytes(), i.dst_port),
        };
        let payload = &p.data()[l4 + 8..end];
        match payload.first().copied() {
            Some(op) if op == kv::Op::Value as u8 || op == kv::Op::NotFound as u8 || op == kv::Op::Stored as u8 => {
                self.cache.response(payload, way);
                Verdict::Pass
            }
            _ => {
                self.answer.clear();
                match self.cache.request(payload, way, &mut self.answer) {
                    kv::Verdict::Forward => Verdict::Pass,
                    kv::Verdict::Drop => Verdict::Drop("malformed"),
                    kv::Verdict::Answer => {
                        if turn_around(p, l3, l4, &self.answer) {
                            Verdict::Reply
                        } else {
                            // The answer does not fit this buffer: the server answers instead.
                            self.too_large += 1;
                            Verdict::Pass
                        }
                    }
                }
            }
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.cache.stats();
        vec![
            ("hits", s.hits),
            ("misses", s.misses),
            ("sets", s.sets),
            ("kept", s.kept),
            ("not_kept_after_set", s.not_kept_after_set),
            ("not_kept_wrong_way", s.not_kept_wrong_way),
            ("client_share_full", s.client_share_full),
            ("evicted", s.evicted),
            ("malformed", s.malformed),
            ("answer_too_large", self.too_large),
        ]
    }
    fn one_instance(&self) -> bool {
        true
    }
}

/// The go-back-N transport's receiving end: a UDP payload that is a data packet of the next
/// number in order is delivered (the header taken off, the frame going on) and acknowledged
/// with a packet of its own; an open, and any other data packet, is turned into its answer
/// (an acknowledgement, or a reset for a connection not kept). Its connections are made by
/// opens, bounded, and forgotten when idle ([`gbn::Connections`]).
#[derive(Debug, Default)]
struct GbnTask {
    connections: gbn::Connections,
    info: FrameInfo,
    delivered: u64,
    acks: u64,
    resets: u64,
    malformed: u64,
    connections_full: u64,
    peer_full: u64,
    no_buffer: u64,
}

impl NetworkTask for GbnTask {
    fn kind(&self) -> &'static str {
        "gbn"
    }
    fn state(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(&mut self.connections)
    }
    fn swap_state(&mut self, other: &mut dyn NetworkTask) -> bool {
        state_of::<gbn::Connections>(other).map(|o| self.connections.swap_connections(o)).is_some()
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 85.0, luts: None, gbps: None, stateful: true, modifies: true }
    }
    fn process(&mut self, p: &mut Packet, cx: &mut Cx<'_>) -> Verdict {
        let Some((l3, l4, end)) = udp4(&mut self.info, p.data()) else {
            self.malformed += 1;
            return Verdict::Drop("malformed");
        };
        let Ok((h, _)) = gbn::Header::parse(&p.data()[l4 + 8..end]) else {
            self.malformed += 1;
            return Verdict::Drop("malformed");
        };
        let from = (self.info.src_v4().to_be_bytes(), self.info.src_port);
        let (deliver, ack) = match self.connections.on_header(from, h, cx.now) {
            Ok(Some(answer)) => answer,
            Ok(None) => {
                self.malformed += 1;
                return Verdict::Drop("malformed");
            }
            Err(gbn::Refused::ConnectionsFull(_)) => {
                self.connections_full += 1;
                return Verdict::Drop("connections_full");
            }
            Err(gbn::Refused::PeerFull(_)) => {
                self.peer_full += 1;
                return Verdict::Drop("peer_full");
            }
        };
        let mut ack_bytes = [0u8; gbn::HEADER_LEN];
        ack_bytes[0] = gbn::VERSION;
        ack_bytes[1] = ack.kind;
        ack_bytes[4..8].copy_from_slice(&ack.conn.to_be_bytes());
        ack_bytes[8..12].copy_from_slice(&ack.seq.to_be_bytes());
        match ack.kind {
            gbn::ACK => self.acks += 1,
            gbn::RESET => self.resets += 1,
            // Cookies are the connections' own count.
            _ => {}
        }
        if !deliver {
            turn_around(p, l3, l4, &ack_bytes);
            return Verdict::Reply;
        }
        let mut a = cx.pool.packet();
        if a.extend_from_slice(&p.data()[..l4 + 8]).is_ok() && turn_around(&mut a, l3, l4, &ack_bytes) {
            cx.emitted.push(a);
        } else {
            self.no_buffer += 1;
            cx.pool.put(a);
        }
        // The payload goes on without the header: the headers move forward over it.
        let body = l4 + 8;
        p.set_len(end);
        p.data_mut().copy_within(0..body, gbn::HEADER_LEN);
        p.pull_front(gbn::HEADER_LEN);
        refit_udp4(p.data_mut(), l3, l4, end - gbn::HEADER_LEN);
        self.delivered += 1;
        Verdict::Pass
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("delivered", self.delivered),
            ("acks", self.acks),
            ("resets", self.resets),
            ("opened", self.connections.opened()),
            ("reopened", self.connections.reopened()),
            ("cookies", self.connections.cookies()),
            ("connections", self.connections.len() as u64),
            ("expired", self.connections.expired()),
            ("malformed", self.malformed),
            ("connections_full", self.connections_full),
            ("peer_full", self.peer_full),
            ("no_buffer", self.no_buffer),
        ]
    }
}

/// Time spent busy, read on the CPU's time-stamp counter through `quanta` (about 10 ns a reading
/// on this project's hosts, against about 27 for [`Instant`], whose readings made a "100 ns"
/// dummy spend 140). A spin stops at the first reading past its time, so it runs over by its
/// readings' cost and part of a loop; that overrun, measured once a process, is taken off each
/// spend (`over_ns`), so a dummy of `ns` spends `ns` (`tern bench chain` prints what it spends).
#[derive(Debug, Clone)]
pub struct Busy {
    clock: quanta::Clock,
    over_ns: u64,
}

impl Default for Busy {
    fn default() -> Self {
        Self::new()
    }
}

impl Busy {
    /// A copy of the process's clock and overrun, made on first use (a clock's calibration
    /// takes under a millisecond). The overrun is measured on that clock: 51 groups of 20
    /// spends of 200 ns in a row, each group timed, and the least group's time a spend less
    /// 200 ns. An interrupt, the host's preemption or a slow spell only lengthens a group, so
    /// the least is the truest (with a median of the groups, tried first, one run's dummies
    /// spent 93 ns for 100).
    pub fn new() -> Self {
        // One clock and one measurement a process; each dummy task gets a copy.
        static BUSY: std::sync::OnceLock<Busy> = std::sync::OnceLock::new();
        BUSY.get_or_init(|| {
            const GROUPS: usize = 51;
            const N: u64 = 20;
            const NS: u64 = 200;
            let raw = Self { clock: crate::clock::counter().clone(), over_ns: 0 };
            let clock = &raw.clock;
            let least = (0..GROUPS)
                .map(|_| {
                    let first = clock.raw();
                    for _ in 0..N {
                        raw.spend(std::hint::black_box(NS));
                    }
                    clock.delta_as_nanos(first, clock.raw()) / N
                })
                .min()
                .unwrap_or(NS);
            Self { over_ns: least.saturating_sub(NS), clock: raw.clock }
        })
        .clone()
    }

    /// The overrun taken off each spend, ns (the same for every `Busy` of a process).
    pub fn over_ns(&self) -> u64 {
        self.over_ns
    }

    /// Spends `ns` busy (none for 0): at least `ns` less [`Busy::over_ns`], and `ns` on average.
    pub fn spend(&self, ns: u64) {
        if ns == 0 {
            return;
        }
        let target = ns.saturating_sub(self.over_ns);
        let start = self.clock.raw();
        while self.clock.delta_as_nanos(start, self.clock.raw()) < target {}
    }
}

/// The paper's dummy task: passes every packet on after its configured time, and no faster
/// than its configured rate (the time a packet's bits take at that rate), both spent busy
/// ([`Busy`]).
#[derive(Debug)]
struct Dummy {
    ns: u64,
    gbps: f64,
    luts: u64,
    passed: u64,
    busy: Busy,
}

impl Dummy {
    fn spend(&self, len: usize, paced: bool) {
        let mut ns = self.ns as f64;
        if self.gbps > 0.0 && !paced {
            ns = ns.max(len as f64 * 8.0 / self.gbps);
        }
        if ns > 0.0 {
            self.busy.spend(ns as u64);
        }
    }
}

impl NetworkTask for Dummy {
    fn kind(&self) -> &'static str {
        "dummy"
    }
    fn cost(&self) -> Cost {
        let gbps = (self.gbps > 0.0).then_some(self.gbps);
        Cost { ns_per_packet: self.ns as f64, luts: Some(self.luts), gbps, stateful: false, modifies: false }
    }
    fn process(&mut self, p: &mut Packet, cx: &mut Cx<'_>) -> Verdict {
        self.spend(p.len(), cx.paced);
        self.passed += 1;
        Verdict::Pass
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("passed", self.passed)]
    }
}

/// Another engine as a network task ([`TaskSpec::Stage`]): each packet goes into the engine's
/// batch alone; what comes out of any of its outputs goes on (the first; more are dropped and
/// counted `extra`), and a packet it kept or dropped is dropped here (`stage_dropped`).
pub struct StageTask {
    stage: Box<dyn tern_io::BatchStage>,
    in_port: u16,
    luts: u64,
    input: tern_io::Batch,
    outputs: Vec<tern_io::Batch>,
    passed: u64,
    dropped: u64,
    extra: u64,
}

impl std::fmt::Debug for StageTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageTask").field("in_port", &self.in_port).field("passed", &self.passed).finish()
    }
}

impl StageTask {
    /// `stage`, fed on `in_port`, with an area of `luts`.
    pub fn new(stage: Box<dyn tern_io::BatchStage>, in_port: u16, luts: u64) -> StageTask {
        let outputs = (0..stage.outputs()).map(|_| tern_io::Batch::new(tern_io::DEFAULT_BATCH)).collect();
        StageTask { stage, in_port, luts, input: tern_io::Batch::new(1), outputs, passed: 0, dropped: 0, extra: 0 }
    }
}

impl NetworkTask for StageTask {
    fn kind(&self) -> &'static str {
        "stage"
    }
    fn cost(&self) -> Cost {
        // What the engine keeps is its own affair: its chain's instances see whole flows.
        Cost { ns_per_packet: 0.0, luts: Some(self.luts), gbps: None, stateful: true, modifies: true }
    }
    fn process(&mut self, p: &mut Packet, cx: &mut Cx<'_>) -> Verdict {
        let packet = std::mem::replace(p, cx.pool.packet());
        if let Some(back) = self.input.push(packet) {
            cx.pool.put(back);
        }
        self.stage.process(cx.now, self.in_port, &mut self.input, &mut self.outputs);
        for q in self.input.drain() {
            cx.pool.put(q);
        }
        let mut got = None;
        for o in &mut self.outputs {
            while let Some(q) = o.pop() {
                if got.is_none() {
                    got = Some(q);
                } else {
                    self.extra += 1;
                    cx.pool.put(q);
                }
            }
        }
        match got {
            Some(q) => {
                let empty = std::mem::replace(p, q);
                cx.pool.put(empty);
                self.passed += 1;
                Verdict::Pass
            }
            None => {
                self.dropped += 1;
                Verdict::Drop("stage_dropped")
            }
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("passed", self.passed), ("stage_dropped", self.dropped), ("extra", self.extra)]
    }
}
