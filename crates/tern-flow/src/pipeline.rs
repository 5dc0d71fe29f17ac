//! The ingress pipeline of AccelSDP's rule-table OFUs (§4.3.1, Figures 9 and 11): parser →
//! stage 1 (exact match on the IP version, choosing the table) → stage 2 (LPM or 5-tuple EM,
//! per OFU) → action units → deparser → output.
//!
//! [`Pipeline`] is a sans-IO core: the runtime hands it a batch received on a port and gets the
//! packets back sorted by what happened to them ([`Outputs`]): per output port, up to the host
//! (the slow path: a miss, or a rule that sends it there), or dropped and counted by reason.
//! Between batches it runs the OFUs' configuration FSMs, so a table change lands whole between
//! two packets. Enabled OFUs are searched in id order; the first hit decides.
//!
//! Packets a cached rule forwards take a fast path (`Pipeline::fast_path`, on by default) that
//! does the same work with less per packet; the general, staged pipeline is its twin.

use std::fmt;

use tern_io::{Batch, Packet, Pool};
use tern_table::em::{FiveTuple4, FiveTuple6, PackedTuple4};
use tern_wire::frame::{Common4, FrameError, FrameInfo, L3};

use crate::action::{self, ActionDrop, Verdict};
use crate::ofu::{Entry, OfuId, OfuKind, OfuTables};

/// Why the pipeline dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The parser refused the frame.
    Frame(FrameError),
    /// A rule's action set said `drop`.
    Action,
    /// `push_vlan` found no room in the buffer.
    NoRoomForVlan,
    /// `push_vlan` on a frame that already carries the most tags the parser takes.
    TooManyVlansPushed,
    /// `output` named a port the pipeline does not have.
    NoSuchPort,
    /// The host queue was full (the slow path is behind).
    HostQueueFull,
    /// An output port's batch was full.
    OutputQueueFull,
}

/// Packets the fast path stages at a time.
pub const FAST_CHUNK: usize = 32;

const N_FRAME: usize = FrameError::ALL.len();
const N_DROPS: usize = N_FRAME + 6;

impl DropReason {
    fn index(self) -> usize {
        match self {
            DropReason::Frame(e) => FrameError::ALL.iter().position(|x| *x == e).unwrap_or(0),
            DropReason::Action => N_FRAME,
            DropReason::NoRoomForVlan => N_FRAME + 1,
            DropReason::NoSuchPort => N_FRAME + 2,
            DropReason::HostQueueFull => N_FRAME + 3,
            DropReason::OutputQueueFull => N_FRAME + 4,
            DropReason::TooManyVlansPushed => N_FRAME + 5,
        }
    }

    fn from_index(i: usize) -> DropReason {
        match i.checked_sub(N_FRAME) {
            None => DropReason::Frame(FrameError::ALL[i]),
            Some(0) => DropReason::Action,
            Some(1) => DropReason::NoRoomForVlan,
            Some(2) => DropReason::NoSuchPort,
            Some(3) => DropReason::HostQueueFull,
            Some(4) => DropReason::OutputQueueFull,
            _ => DropReason::TooManyVlansPushed,
        }
    }

    /// Every reason, in counter order.
    pub fn all() -> impl Iterator<Item = DropReason> {
        (0..N_DROPS).map(DropReason::from_index)
    }

    /// Counter name.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Frame(e) => e.as_str(),
            DropReason::Action => "action_drop",
            DropReason::NoRoomForVlan => "no_room_for_vlan",
            DropReason::NoSuchPort => "no_such_port",
            DropReason::HostQueueFull => "host_queue_full",
            DropReason::OutputQueueFull => "output_queue_full",
            DropReason::TooManyVlansPushed => "too_many_vlans_pushed",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Pipeline counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames that hit a rule.
    pub hits: u64,
    /// Of those, frames the fast path carried (see [`Pipeline::fast_path`]).
    pub fast_path: u64,
    /// IP frames no enabled OFU matched (sent to the host).
    pub misses: u64,
    /// Frames that are not IPv4 / IPv6 (sent to the host).
    pub not_ip: u64,
    /// Frames a rule sent to the host (TTL expiring under `dec_ttl`, or no output action).
    pub rule_to_host: u64,
    /// Frames forwarded per port.
    pub tx_packets: Vec<u64>,
    drops: [u64; N_DROPS],
}

impl PipelineStats {
    /// Drops by reason (only reasons that happened).
    pub fn drops(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        self.drops.iter().enumerate().filter(|(_, n)| **n > 0).map(|(i, n)| (DropReason::from_index(i), *n))
    }

    /// Drops of one reason.
    pub fn dropped(&self, reason: DropReason) -> u64 {
        self.drops[reason.index()]
    }

    /// All drops.
    pub fn dropped_total(&self) -> u64 {
        self.drops.iter().sum()
    }
}

/// Packets the host (slow path) receives, with the port each came in on and what the parser
/// found in it (the header information that travels with a packet to the host, so the slow
/// path does not parse it again).
#[derive(Debug)]
pub struct HostQueue {
    /// The packets.
    pub packets: Batch,
    /// `in_ports[i]` is the input port of `packets[i]`.
    pub in_ports: Vec<u16>,
    /// `infos[i]` describes `packets[i]` as it is now (after any actions that ran on it).
    pub infos: Vec<FrameInfo>,
}

/// Where the packets of a batch went.
#[derive(Debug)]
pub struct Outputs {
    /// One batch per output port.
    pub ports: Vec<Batch>,
    /// Up to the host.
    pub host: HostQueue,
}

impl Outputs {
    /// Outputs for `ports` ports, each batch holding `batch` packets, and a host queue of
    /// `host` packets.
    pub fn new(ports: usize, batch: usize, host: usize) -> Outputs {
        Outputs {
            ports: (0..ports).map(|_| Batch::new(batch)).collect(),
            host: HostQueue {
                packets: Batch::new(host),
                in_ports: Vec::with_capacity(host),
                infos: Vec::with_capacity(host),
            },
        }
    }
}

/// The IPv4 5-tuple of a parsed frame.
#[inline]
pub fn tuple4(info: &FrameInfo) -> FiveTuple4 {
    FiveTuple4 {
        src: info.src_v4(),
        dst: info.dst_v4(),
        proto: info.proto,
        src_port: info.src_port,
        dst_port: info.dst_port,
    }
}

/// The IPv6 5-tuple of a parsed frame.
#[inline]
pub fn tuple6(info: &FrameInfo) -> FiveTuple6 {
    FiveTuple6 { src: info.src, dst: info.dst, proto: info.proto, src_port: info.src_port, dst_port: info.dst_port }
}

/// What the fast path's stage 2 found for a frame: the OFU (position), the entry index, and
/// the frame's TTL (all its action units need of what the parser read).
#[derive(Debug, Clone, Copy, Default)]
struct FastHit {
    index: u32,
    pos: u8,
    ttl: u8,
}

/// The fast path's parser and stages 1 and 2 over a chunk: parses each frame as a [`Common4`]
/// and finds its rule with `find` into `hits`, to the first frame outside the common case or
/// the first miss. Returns how many it found.
#[inline(always)]
fn parse_and_find(chunk: &[Packet], hits: &mut [FastHit], find: impl Fn(&Common4) -> Option<(u8, u32)>) -> usize {
    for (i, (pkt, h)) in chunk.iter().zip(hits.iter_mut()).enumerate() {
        let Some(c) = Common4::parse(pkt.data()) else { return i };
        let Some((pos, index)) = find(&c) else { return i };
        *h = FastHit { index, pos, ttl: c.ttl };
    }
    chunk.len().min(hits.len())
}

/// Where the fast path's action units find the entry a [`FastHit`] names: in its OFU, or in
/// the one OFU searched.
trait FastEntries {
    fn entry(&mut self, h: FastHit) -> Option<&mut Entry>;
}

impl FastEntries for OfuTables {
    #[inline(always)]
    fn entry(&mut self, h: FastHit) -> Option<&mut Entry> {
        self.entry_mut(h.index)
    }
}

impl FastEntries for [OfuTables] {
    #[inline(always)]
    fn entry(&mut self, h: FastHit) -> Option<&mut Entry> {
        self.get_mut(usize::from(h.pos))?.entry_mut(h.index)
    }
}

/// The fast path's action units over the packets of a chunk stage 2 found (`hits`), to the
/// first one a compiled rewrite to the same port (`port`, or else the first packet's) does not
/// take; counts what they carry (entry counters, and their bytes into `bytes`). Returns how
/// many.
#[inline(always)]
fn carry(
    entries: &mut (impl FastEntries + ?Sized),
    now_ns: u64,
    chunk: &mut [Packet],
    hits: &[FastHit],
    port: &mut Option<u16>,
    bytes: &mut u64,
) -> usize {
    // The port: the first packet's (later chunks: that of the packets carried before).
    let Some(want) = port.or_else(|| entries.entry(*hits.first()?)?.rule.actions.compiled_output()) else { return 0 };
    let mut carried = 0;
    for (pkt, &h) in chunk.iter_mut().zip(hits) {
        let Some(e) = entries.entry(h) else { break };
        let len = pkt.len() as u64;
        if !action::rewrite_common4(&e.rule.actions, pkt, h.ttl, want) {
            break;
        }
        e.hit(len, now_ns);
        *bytes += len;
        carried += 1;
    }
    if carried > 0 {
        *port = Some(want);
    }
    carried
}

/// The exact-match key of a common frame (its 5-tuple, see [`tuple4`]).
#[inline(always)]
fn common_key4(c: &Common4) -> PackedTuple4 {
    PackedTuple4::from_wire(c.addrs, c.proto, c.src_port, c.dst_port)
}

/// Stage 1 and one OFU's stage 2 for a parsed frame: its entry index, if it has one.
#[inline]
fn lookup(ofu: &OfuTables, info: &FrameInfo) -> Option<u32> {
    match info.l3 {
        L3::Ipv4 => {
            let t = tuple4(info);
            ofu.lookup4(t.dst, &t)
        }
        L3::Ipv6 => {
            let t = tuple6(info);
            ofu.lookup6(t.dst, &t)
        }
        L3::Other => None,
    }
}

/// What stage 2 found for a packet: the OFU (position) and entry index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// OFU id.
    pub ofu: OfuId,
    /// Entry index.
    pub index: u32,
}

/// What the stages found for one packet of a batch.
#[derive(Debug, Clone, Copy)]
struct Slot {
    info: FrameInfo,
    state: SlotState,
    /// What the action units decided (for a `Bad` frame: unused).
    verdict: Verdict,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// The parser refused it.
    Bad(FrameError),
    /// No OFU matched (yet).
    Miss,
    /// OFU position, entry index.
    Hit(u32, u32),
    /// The fast path carried it: its actions have run, `verdict` is theirs.
    Done,
}

/// The OFU pipeline.
#[derive(Debug)]
pub struct Pipeline {
    ofus: Vec<OfuTables>,
    slots: Vec<Slot>,
    enabled: Vec<bool>,
    ports: usize,
    pool: Pool,
    stats: PipelineStats,
    /// Instructions the FSMs apply between two batches, per OFU.
    pub fsm_budget: usize,
    /// What the fast path's stage 2 found for the chunk it works on (see
    /// [`fast_prefix`](Self::fast_prefix)).
    fast_hits: [FastHit; FAST_CHUNK],
    /// Whether the fast path runs first (see [`process`](Self::process)). Off, every packet
    /// takes the staged pipeline, the fast path's twin: the same outputs, counters and bytes.
    pub fast_path: bool,
}

impl Pipeline {
    /// A pipeline over the device sides of the OFUs (searched in id order) forwarding to
    /// `ports` ports; dropped buffers go back to `pool`.
    pub fn new(mut ofus: Vec<OfuTables>, ports: usize, pool: Pool) -> Pipeline {
        ofus.sort_by_key(|o| o.spec().id);
        let stats = PipelineStats { tx_packets: vec![0; ports], ..PipelineStats::default() };
        Pipeline {
            enabled: vec![false; ofus.len()],
            ofus,
            slots: Vec::with_capacity(tern_io::DEFAULT_BATCH),
            ports,
            pool,
            stats,
            fsm_budget: 1024,
            fast_path: true,
            fast_hits: [FastHit::default(); FAST_CHUNK],
        }
    }

    /// Counters.
    pub fn stats(&self) -> &PipelineStats {
        &self.stats
    }

    /// The OFUs' device sides.
    pub fn ofus(&self) -> &[OfuTables] {
        &self.ofus
    }

    /// Ports it forwards to.
    pub fn ports(&self) -> usize {
        self.ports
    }

    /// Runs the configuration FSMs (up to `fsm_budget` instructions each) and reads which OFUs
    /// are enabled. [`process`](Self::process) calls it first; call it alone to apply
    /// configuration while no packets arrive. Returns the instructions applied.
    pub fn configure(&mut self, now_ns: u64) -> usize {
        let mut n = 0;
        for (o, en) in self.ofus.iter_mut().zip(&mut self.enabled) {
            n += o.run_fsm(now_ns, self.fsm_budget);
            *en = o.enabled();
        }
        n
    }

    fn drop(&mut self, reason: DropReason, pkt: Packet) {
        self.stats.drops[reason.index()] += 1;
        self.pool.put(pkt);
    }

    /// Stage 1 and 2: the first enabled OFU whose table matches.
    #[inline]
    pub fn classify(&self, info: &FrameInfo) -> Option<Hit> {
        self.stage2(info).map(|(pos, index)| Hit { ofu: self.ofus[pos].spec().id, index })
    }

    /// Stage 1 picks the lookup by IP version; stage 2 searches the enabled OFUs in order.
    /// Returns the OFU's position and the entry index.
    #[inline]
    fn stage2(&self, info: &FrameInfo) -> Option<(usize, u32)> {
        self.ofus
            .iter()
            .zip(&self.enabled)
            .enumerate()
            .filter(|(_, (_, e))| **e)
            .find_map(|(pos, (o, _))| lookup(o, info).map(|i| (pos, i)))
    }

    /// Processes a batch received on `in_port`: every packet ends in `out` or is dropped (its
    /// buffer back in the pool). `out`'s batches must have room for the whole batch: drain them
    /// after every call.
    ///
    /// The fast path (`fast_prefix`) first carries packets from the front
    /// of the batch while they are common frames ([`Common4`]) that hit a compiled rule
    /// forwarding to one port, keeping only what that case needs per packet. From the first
    /// packet it cannot carry, the general pipeline takes over: each stage runs over the rest
    /// of the batch before the next (as VPP's nodes do): parse every frame, then search each
    /// enabled OFU for every packet still unmatched (the lookups of different packets are
    /// independent, so the processor overlaps their memory accesses), then the action units,
    /// then the deparser. Both give the same result for every packet (a property test runs
    /// them side by side); the fast path spends less per packet on the traffic a cache serves.
    pub fn process(&mut self, now_ns: u64, in_port: u16, batch: &mut Batch, out: &mut Outputs) {
        self.configure(now_ns);
        let n = batch.len();
        let (done, port) = if self.fast_path { self.fast_prefix(now_ns, batch) } else { (0, 0) };
        if done == n && n > 0 && self.hand_over(Verdict::Output(port), in_port, batch, &[], out) {
            return;
        }
        let mut slots = std::mem::take(&mut self.slots);
        // Every slot is written below before it is read (the parser sets the state of each slot
        // the fast path left, the action units its verdict), so old contents may stay.
        slots.resize(n, Slot { info: FrameInfo::default(), state: SlotState::Miss, verdict: Verdict::Host });
        for s in &mut slots[..done] {
            s.state = SlotState::Done;
            s.verdict = Verdict::Output(port);
        }
        // Parser (into the slots in place).
        for (pkt, s) in batch.iter().zip(slots.iter_mut()).skip(done) {
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += pkt.len() as u64;
            s.state = match s.info.parse_into(pkt.data()) {
                Ok(()) => SlotState::Miss,
                Err(e) => SlotState::Bad(e),
            };
        }
        // Stage 1 and 2: OFUs in id order; the first hit decides.
        for (pos, (ofu, _)) in self.ofus.iter().zip(&self.enabled).enumerate().filter(|(_, (_, e))| **e) {
            for s in slots.iter_mut().filter(|s| s.state == SlotState::Miss) {
                if let Some(index) = lookup(ofu, &s.info) {
                    s.state = SlotState::Hit(pos as u32, index);
                }
            }
        }
        // Action units, in place.
        for (pkt, s) in batch.iter_mut().zip(slots.iter_mut()) {
            s.verdict = match s.state {
                SlotState::Done => s.verdict,
                SlotState::Bad(_) => Verdict::Drop(ActionDrop::Drop),
                SlotState::Hit(pos, index) => {
                    self.stats.hits += 1;
                    let len = pkt.len() as u64;
                    match self.ofus[pos as usize].entry_mut(index) {
                        Some(e) => {
                            e.hit(len, now_ns);
                            let v = action::execute(&e.rule.actions, pkt, &mut s.info);
                            if v == Verdict::Host {
                                self.stats.rule_to_host += 1;
                            }
                            v
                        }
                        None => Verdict::Host,
                    }
                }
                SlotState::Miss => {
                    if s.info.l3 == L3::Other {
                        self.stats.not_ip += 1;
                    } else {
                        self.stats.misses += 1;
                    }
                    Verdict::Host
                }
            };
        }
        // The deparser. When every packet of the batch goes the same way (the common case) the
        // batch changes hands whole; else packet by packet.
        let uniform = slots
            .first()
            .map(|f| f.verdict)
            .filter(|&v| slots.iter().all(|s| !matches!(s.state, SlotState::Bad(_)) && s.verdict == v));
        if !uniform.is_some_and(|v| self.hand_over(v, in_port, batch, &slots, out)) {
            for (pkt, s) in batch.drain().zip(slots.iter()) {
                match s.state {
                    SlotState::Bad(e) => self.drop(DropReason::Frame(e), pkt),
                    _ => self.deparse(s.verdict, in_port, pkt, &s.info, out),
                }
            }
        }
        self.slots = slots;
    }

    /// The fast path: carries packets from the front of `batch` while each is a [`Common4`]
    /// frame that hits (in the first enabled OFU that matches it) a rule whose compiled
    /// rewrite forwards it to the port of the first packet carried. Returns how many packets
    /// it carried and their port. A packet it cannot carry, and every packet after it, is left
    /// untouched and uncounted, for the staged pipeline (which parses it again: a packet the
    /// cache does not serve costs the slow path far more than a parse).
    ///
    /// It is staged too, in chunks of [`FAST_CHUNK`] packets, with only what this case needs
    /// kept per packet: parse each frame and search the OFUs for its key, then count and
    /// rewrite. The lookups of a chunk are independent, so the processor overlaps their memory
    /// accesses; measured, one loop for all three stages ran slower (its rewrites' stores sit
    /// between the lookups), one for the parser and one for the lookups slightly slower than
    /// the two together.
    fn fast_prefix(&mut self, now_ns: u64, batch: &mut Batch) -> (usize, u16) {
        let mut enabled = [0u8; 8];
        let mut n_enabled = 0;
        // An OFU without rules cannot match.
        for (pos, _) in self.enabled.iter().zip(&self.ofus).enumerate().filter(|(_, (e, o))| **e && !o.is_empty()) {
            // More OFUs than the fast path keeps track of (or past the positions it can name):
            // the staged pipeline.
            let Ok(pos) = u8::try_from(pos) else { return (0, 0) };
            if n_enabled == enabled.len() {
                return (0, 0);
            }
            enabled[n_enabled] = pos;
            n_enabled += 1;
        }
        if n_enabled == 0 {
            return (0, 0);
        }
        let mut port = None;
        let (mut done, mut bytes) = (0usize, 0u64);
        let hits = &mut self.fast_hits;
        for chunk in batch.as_mut_slice().chunks_mut(FAST_CHUNK) {
            // Parser and stages 1 and 2 (IPv4), to the first frame outside the common case or
            // the first miss: the enabled OFUs in id order, the first hit decides.
            let ofus = &self.ofus;
            let n = if let [pos] = enabled[..n_enabled] {
                // One OFU with rules (the common case): no search among OFUs, its kind matched
                // once.
                let ofu = &ofus[usize::from(pos)];
                match ofu.spec().kind {
                    OfuKind::Em => parse_and_find(chunk, hits, |c| Some((pos, ofu.lookup4_em(&common_key4(c))?))),
                    OfuKind::Lpm => parse_and_find(chunk, hits, |c| Some((pos, ofu.lookup4_lpm(c.dst())?))),
                }
            } else {
                parse_and_find(chunk, hits, |c| {
                    let (k, dst) = (common_key4(c), c.dst());
                    enabled[..n_enabled].iter().find_map(|&pos| {
                        let ofu = &ofus[usize::from(pos)];
                        let index = match ofu.spec().kind {
                            OfuKind::Em => ofu.lookup4_em(&k),
                            OfuKind::Lpm => ofu.lookup4_lpm(dst),
                        };
                        Some((pos, index?))
                    })
                })
            };
            // Action units, to the first packet a compiled rewrite to the same port does not
            // take.
            let hits = &hits[..n];
            let carried = if let [pos] = enabled[..n_enabled] {
                carry(&mut self.ofus[usize::from(pos)], now_ns, chunk, hits, &mut port, &mut bytes)
            } else {
                carry(self.ofus.as_mut_slice(), now_ns, chunk, hits, &mut port, &mut bytes)
            };
            done += carried;
            if carried < chunk.len() {
                break;
            }
        }
        self.stats.rx_packets += done as u64;
        self.stats.rx_bytes += bytes;
        self.stats.hits += done as u64;
        self.stats.fast_path += done as u64;
        (done, port.unwrap_or(0))
    }

    /// The deparser for a batch whose packets all go the same way (`verdict`), to an output
    /// port or the host queue (with the packets' descriptions from `slots`), when that batch
    /// is empty: the two exchange their packets. Returns false, doing nothing, otherwise.
    fn hand_over(
        &mut self,
        verdict: Verdict,
        in_port: u16,
        batch: &mut Batch,
        slots: &[Slot],
        out: &mut Outputs,
    ) -> bool {
        let n = batch.len();
        match verdict {
            Verdict::Output(p) if usize::from(p) < self.ports => {
                let Some(b) = out.ports.get_mut(usize::from(p)) else { return false };
                if !b.is_empty() || !b.swap(batch) {
                    return false;
                }
                self.stats.tx_packets[usize::from(p)] += n as u64;
            }
            Verdict::Host if slots.len() == n => {
                if !out.host.packets.is_empty() || !out.host.packets.swap(batch) {
                    return false;
                }
                out.host.in_ports.extend(std::iter::repeat_n(in_port, n));
                out.host.infos.extend(slots.iter().map(|s| s.info));
            }
            _ => return false,
        }
        true
    }

    /// The deparser: the packet's bytes are already rewritten in place; this carries out its
    /// state (forward, drop, to host).
    fn deparse(&mut self, verdict: Verdict, in_port: u16, pkt: Packet, info: &FrameInfo, out: &mut Outputs) {
        match verdict {
            Verdict::Output(p) => match out.ports.get_mut(usize::from(p)) {
                Some(b) if usize::from(p) < self.ports => match b.push(pkt) {
                    None => self.stats.tx_packets[usize::from(p)] += 1,
                    Some(pkt) => self.drop(DropReason::OutputQueueFull, pkt),
                },
                _ => self.drop(DropReason::NoSuchPort, pkt),
            },
            Verdict::Drop(ActionDrop::Drop) => self.drop(DropReason::Action, pkt),
            Verdict::Drop(ActionDrop::NoRoomForVlan) => self.drop(DropReason::NoRoomForVlan, pkt),
            Verdict::Drop(ActionDrop::TooManyVlans) => self.drop(DropReason::TooManyVlansPushed, pkt),
            Verdict::Host => match out.host.packets.push(pkt) {
                None => {
                    out.host.in_ports.push(in_port);
                    out.host.infos.push(*info);
                }
                Some(pkt) => self.drop(DropReason::HostQueueFull, pkt),
            },
        }
    }

    /// The device side of an OFU, mutably (for the slow path's own counters, tests).
    pub fn ofu_mut(&mut self, id: OfuId) -> Option<&mut OfuTables> {
        self.ofus.iter_mut().find(|o| o.spec().id == id)
    }
}
