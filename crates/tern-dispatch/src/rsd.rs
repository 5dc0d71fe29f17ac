//! The receive-side dispatcher (RSD) core, sans-IO (QingNiao §3.3, §4.2).
//!
//! [`Rsd::dispatch`] takes one received QNP packet and says which queue (worker) gets it. For a
//! request's first packet it runs the application's compiled [`Machine`] over the dispatch bytes
//! in place — at most `seg_cnt` segments' worth, the paper's ByteStream bound — and, if the
//! request has more packets, keeps the decision in the [`Stash`]. A later packet takes its
//! request's decision from the stash; if it is not there (its first packet was never seen here,
//! or a newer request took the slot) the packet is dropped and counted, and the sender's
//! retransmission of the whole request repairs it. Nothing here allocates per packet.
//!
//! Applications are looked up per packet in a table of `Arc<Machine>` slots that a control plane
//! replaces whole (see [`Rsd::install`]); an application marked as being reconfigured has its
//! packets dropped and counted, others are untouched.
//!
//! ```
//! use std::sync::Arc;
//! use tern_dispatch::matcher::Machine;
//! use tern_dispatch::rsd::{Rsd, Verdict};
//! let spec = tern_dispatch::synth::Spec::default();
//! let set = spec.rule_set(4);
//! let mut rsd = Rsd::new(256, 4);
//! rsd.install(1, Some(Arc::new(Machine::compile(&set, 1).unwrap())));
//! // A one-packet request whose key rule 6 matches: queue 6 % 4 = 2.
//! let mut pkt = vec![0u8; tern_wire::qnp::HEADER_LEN];
//! let mut payload = Vec::new();
//! tern_wire::tlv::Writer::new(&mut payload).put_bytes(1, &spec.key(6, 62, 1));
//! let repr = tern_wire::qnp::Repr {
//!     app_id: 1, req_type: 1, req_id: 9, req_acked_id: 0, req_len_in_bytes: payload.len() as u32,
//!     req_len_in_pkts: 1, pkt_seq_num_in_req: 0, flags: tern_wire::qnp::Flags::DATA,
//!     seg_cnt: tern_wire::qnp::seg_cnt_for(payload.len()),
//! };
//! repr.emit(&mut tern_wire::qnp::Packet::new_unchecked(&mut pkt[..]));
//! pkt.extend_from_slice(&payload);
//! assert_eq!(rsd.dispatch(0, &pkt), Verdict::Queue(2));
//! ```

use std::sync::Arc;

use tern_wire::qnp::{self, Flags, Packet, SEGMENT_LEN};

use crate::matcher::reference::NaiveApp;
use crate::matcher::{Decision, Machine};
use crate::rules::RequestTypes;

/// What an RSD runs per application to decide a request's first packet: Tern's compiled
/// [`Machine`], or the software baseline's [`NaiveApp`] (decode every record, loop over the
/// rules).
pub trait Decide {
    /// Decides a first packet's payload; `scratch` is the caller's reusable space.
    fn decide_first(&self, req_type: u8, payload: &[u8], scratch: &mut Vec<(u8, usize, usize)>) -> Decision;
    /// The application's request types and their dispatch fields.
    fn request_types(&self) -> &RequestTypes;
}

impl Decide for Machine {
    #[inline]
    fn request_types(&self) -> &RequestTypes {
        Machine::request_types(self)
    }
    #[inline]
    fn decide_first(&self, req_type: u8, payload: &[u8], _: &mut Vec<(u8, usize, usize)>) -> Decision {
        self.decide(req_type, payload)
    }
}

impl Decide for NaiveApp {
    #[inline]
    fn request_types(&self) -> &RequestTypes {
        NaiveApp::request_types(self)
    }
    #[inline]
    fn decide_first(&self, req_type: u8, payload: &[u8], scratch: &mut Vec<(u8, usize, usize)>) -> Decision {
        self.decide(req_type, payload, scratch)
    }
}

/// Why the RSD dropped a packet. Each is a counter in [`RsdStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RsdDrop {
    /// Shorter than a QNP header, or header fields inconsistent.
    BadHeader,
    /// Not a request packet (responses and pure ACKs do not come this way).
    NotRequest,
    /// `app_id` has no rules installed.
    UnknownApp,
    /// The application is being reconfigured (QingNiao §3.3: its packets are discarded).
    Reconfiguring,
    /// A later packet whose request's decision is not in the stash.
    StashMiss,
    /// A `req_type` the application does not declare (never decided as another type).
    UnknownReqType,
    /// A first packet that does not lead with every dispatch field its type declares, in order,
    /// each a whole record.
    MissingDispatchField,
    /// A first packet whose `seg_cnt` does not cover its dispatch records.
    SegCntShort,
    /// A first packet whose dispatch records run past the ByteStream the profile gives the
    /// matcher.
    BeyondBytestream,
}

impl RsdDrop {
    /// Every reason, in counter order.
    pub const ALL: [RsdDrop; 9] = [
        RsdDrop::BadHeader,
        RsdDrop::NotRequest,
        RsdDrop::UnknownApp,
        RsdDrop::Reconfiguring,
        RsdDrop::StashMiss,
        RsdDrop::UnknownReqType,
        RsdDrop::MissingDispatchField,
        RsdDrop::SegCntShort,
        RsdDrop::BeyondBytestream,
    ];

    /// What the reason means, one line (the docs' drop-reason table is generated from it).
    pub fn meaning(self) -> &'static str {
        match self {
            RsdDrop::BadHeader => "Shorter than a QNP header, or header fields inconsistent.",
            RsdDrop::NotRequest => "Not a request packet (responses and pure ACKs do not come this way).",
            RsdDrop::UnknownApp => "`app_id` has no rules installed.",
            RsdDrop::Reconfiguring => {
                "The application is being reconfigured (QingNiao §3.3: its packets are discarded)."
            }
            RsdDrop::StashMiss => "A later packet whose request's decision is not in the stash.",
            RsdDrop::UnknownReqType => "A `req_type` the application does not declare (never decided as another type).",
            RsdDrop::MissingDispatchField => {
                "A first packet that does not lead with every dispatch field its type declares, in order, each a whole record."
            }
            RsdDrop::SegCntShort => "A first packet whose `seg_cnt` does not cover its dispatch records.",
            RsdDrop::BeyondBytestream => {
                "A first packet whose dispatch records run past the ByteStream the profile gives the matcher."
            }
        }
    }

    /// Name for metrics and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            RsdDrop::BadHeader => "bad_header",
            RsdDrop::NotRequest => "not_request",
            RsdDrop::UnknownApp => "unknown_app",
            RsdDrop::Reconfiguring => "reconfiguring",
            RsdDrop::StashMiss => "stash_miss",
            RsdDrop::UnknownReqType => "unknown_req_type",
            RsdDrop::MissingDispatchField => "missing_dispatch_field",
            RsdDrop::SegCntShort => "seg_cnt_short",
            RsdDrop::BeyondBytestream => "beyond_bytestream",
        }
    }
}

/// What to do with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to this queue's worker.
    Queue(u16),
    /// Drop it (counted).
    Drop(RsdDrop),
}

/// Counters of one RSD.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RsdStats {
    /// First packets decided.
    pub first_packets: u64,
    /// Later packets that found their decision in the stash.
    pub stash_hits: u64,
    /// Requests (first packets) per queue.
    pub per_queue: Vec<u64>,
    /// First packets that went to the default queue (no rule matched).
    pub default_queue: u64,
    /// Matches per rule index (file order).
    pub rule_hits: Vec<u64>,
    /// Drops by reason, indexed as [`RsdDrop::ALL`].
    pub drops: [u64; RsdDrop::ALL.len()],
}

impl RsdStats {
    /// Drops of one reason.
    pub fn drops_of(&self, r: RsdDrop) -> u64 {
        self.drops[r as usize]
    }
}

/// The stash of dispatch decisions (QingNiao §4.2.2: 256 entries of {result, request id,
/// valid}): direct-mapped by request id, a newer request evicting an older one in its slot.
/// The tag also holds the sender (a hash of its address) and the app, since request ids are
/// per sender.
#[derive(Debug, Clone)]
pub struct Stash {
    apps: Box<[u8]>,
    tags: Box<[u64]>,
    queues: Box<[u16]>,
    valid: Box<[bool]>,
}

impl Stash {
    /// A stash of `entries` slots (at least 1).
    pub fn new(entries: usize) -> Stash {
        let n = entries.max(1);
        Stash {
            apps: vec![0; n].into(),
            tags: vec![0; n].into(),
            queues: vec![0; n].into(),
            valid: vec![false; n].into(),
        }
    }

    /// Slots.
    pub fn entries(&self) -> usize {
        self.tags.len()
    }

    fn tag(sender: u32, app_id: u8, req_id: u32) -> u64 {
        (u64::from(sender ^ (u32::from(app_id) << 24)) << 32) | u64::from(req_id)
    }

    fn slot(&self, req_id: u32) -> usize {
        req_id as usize % self.tags.len()
    }

    /// Records a decision.
    pub fn insert(&mut self, sender: u32, app_id: u8, req_id: u32, queue: u16) {
        let i = self.slot(req_id);
        self.tags[i] = Stash::tag(sender, app_id, req_id);
        self.apps[i] = app_id;
        self.queues[i] = queue;
        self.valid[i] = true;
    }

    /// The decision for a request, if its slot still holds it.
    pub fn get(&self, sender: u32, app_id: u8, req_id: u32) -> Option<u16> {
        let i = self.slot(req_id);
        (self.valid[i] && self.tags[i] == Stash::tag(sender, app_id, req_id)).then_some(self.queues[i])
    }

    /// Forgets every decision of an application (after its rules change).
    pub fn clear_app(&mut self, app_id: u8) {
        for (valid, app) in self.valid.iter_mut().zip(self.apps.iter()) {
            if *app == app_id {
                *valid = false;
            }
        }
    }
}

/// One receive-side dispatcher, running `D` per application (Tern's compiled [`Machine`] by
/// default).
#[derive(Debug)]
pub struct Rsd<D = Machine> {
    apps: Vec<Option<Arc<D>>>,
    scratch: Vec<(u8, usize, usize)>,
    reconfiguring: Vec<bool>,
    stash: Stash,
    /// Bytes of a first packet's payload the matcher may read besides `seg_cnt` (the
    /// ByteStream's size); `usize::MAX` if unbounded.
    window: usize,
    stats: RsdStats,
}

impl<D: Decide> Rsd<D> {
    /// An RSD with a stash of `stash_entries` and `queues` queues, no applications installed.
    pub fn new(stash_entries: usize, queues: u16) -> Rsd<D> {
        Rsd {
            apps: vec![None; 256],
            reconfiguring: vec![false; 256],
            stash: Stash::new(stash_entries),
            scratch: Vec::with_capacity(8),
            window: usize::MAX,
            stats: RsdStats { per_queue: vec![0; usize::from(queues)], ..RsdStats::default() },
        }
    }

    /// Bounds what the matcher reads of a first packet to `bytes` of the frame (the ByteStream's
    /// size), besides `seg_cnt`.
    pub fn set_bytestream(&mut self, bytes: usize) {
        self.window = bytes;
    }

    /// Installs (or with `None` removes) an application's machine and ends its reconfiguration.
    pub fn install(&mut self, app_id: u8, machine: Option<Arc<D>>) {
        self.apps[usize::from(app_id)] = machine;
        self.reconfiguring[usize::from(app_id)] = false;
        self.stash.clear_app(app_id);
    }

    /// Marks an application as being reconfigured: its packets are dropped until
    /// [`Rsd::install`].
    pub fn begin_reconfigure(&mut self, app_id: u8) {
        self.reconfiguring[usize::from(app_id)] = true;
    }

    /// Counters.
    pub fn stats(&self) -> &RsdStats {
        &self.stats
    }

    /// The stash.
    pub fn stash(&self) -> &Stash {
        &self.stash
    }

    fn drop(&mut self, r: RsdDrop) -> Verdict {
        self.stats.drops[r as usize] += 1;
        Verdict::Drop(r)
    }

    /// Decides one packet from `sender` (a hash of its address; request ids are per sender).
    pub fn dispatch(&mut self, sender: u32, data: &[u8]) -> Verdict {
        let Ok(pkt) = Packet::new_checked(data) else { return self.drop(RsdDrop::BadHeader) };
        match Flags::from_bits(pkt.pkt_flag()) {
            Ok(f) if f == Flags::DATA => {}
            Ok(_) => return self.drop(RsdDrop::NotRequest),
            Err(_) => return self.drop(RsdDrop::BadHeader),
        }
        let (app_id, req_id) = (pkt.app_id(), pkt.req_id());
        if self.reconfiguring[usize::from(app_id)] {
            return self.drop(RsdDrop::Reconfiguring);
        }
        let Some(machine) = self.apps[usize::from(app_id)].as_ref() else { return self.drop(RsdDrop::UnknownApp) };
        if pkt.pkt_seq_num_in_req() != 0 {
            return match self.stash.get(sender, app_id, req_id) {
                Some(q) => {
                    self.stats.stash_hits += 1;
                    Verdict::Queue(q)
                }
                None => self.drop(RsdDrop::StashMiss),
            };
        }
        // QNP's first-packet rule: the request's type is declared, and its dispatch records lead
        // the payload, whole and in order, within the `seg_cnt` segments (the first being the
        // headers). Anything else would let a header field or a split record steer the decision.
        let Some(fields) = machine.request_types().dispatch_fields(pkt.req_type()) else {
            return self.drop(RsdDrop::UnknownReqType);
        };
        let payload = pkt.payload();
        let end = match tern_qnp::check_first_packet(payload, pkt.seg_cnt(), fields) {
            Ok(end) => end,
            Err(tern_qnp::DropReason::SegCntShort) => return self.drop(RsdDrop::SegCntShort),
            Err(_) => return self.drop(RsdDrop::MissingDispatchField),
        };
        // The matcher reads the dispatch records and nothing else, within the ByteStream.
        if end > self.window.saturating_sub(SEGMENT_LEN) {
            return self.drop(RsdDrop::BeyondBytestream);
        }
        let window = &payload[..end];
        let d = machine.decide_first(pkt.req_type(), window, &mut self.scratch);
        self.stats.first_packets += 1;
        match d.rule {
            Some(r) => {
                let r = r as usize;
                if self.stats.rule_hits.len() <= r {
                    self.stats.rule_hits.resize(r + 1, 0);
                }
                self.stats.rule_hits[r] += 1;
            }
            None => self.stats.default_queue += 1,
        }
        if let Some(c) = self.stats.per_queue.get_mut(usize::from(d.queue)) {
            *c += 1;
        }
        if pkt.req_len_in_pkts() > 1 {
            self.stash.insert(sender, app_id, req_id, d.queue);
        }
        Verdict::Queue(d.queue)
    }
}

/// A cheap hash of a sender's address for the stash tag.
pub fn sender_hash(addr: &std::net::SocketAddr) -> u32 {
    (tern_io::addr_hash(addr) >> 32) as u32
}

// The headers fill exactly one 64-byte segment, as `seg_cnt` counts them.
const _: () = assert!(qnp::HEADER_LEN + tern_wire::ETH_IPV4_UDP_LEN == SEGMENT_LEN);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::Spec;
    use proptest::prelude::*;
    use tern_wire::qnp::Repr;

    fn packet(app: u8, req_id: u32, seq: u8, pkts: u8, seg_cnt: u8, payload: &[u8]) -> Vec<u8> {
        let mut pkt = vec![0u8; qnp::HEADER_LEN];
        let repr = Repr {
            app_id: app,
            req_type: 1,
            req_id,
            req_acked_id: 0,
            req_len_in_bytes: 4000,
            req_len_in_pkts: pkts,
            pkt_seq_num_in_req: seq,
            flags: Flags::DATA,
            seg_cnt,
        };
        repr.emit(&mut Packet::new_unchecked(&mut pkt[..]));
        pkt.extend_from_slice(payload);
        pkt
    }

    fn rsd(spec: &Spec) -> Rsd {
        let mut r = Rsd::new(4, 8);
        r.install(1, Some(Arc::new(Machine::compile(&spec.rule_set(8), 1).unwrap())));
        r
    }

    fn key_payload(spec: &Spec, rule: u32) -> Vec<u8> {
        let mut p = Vec::new();
        tern_wire::tlv::Writer::new(&mut p).put_bytes(1, &spec.key(rule, 62, 5));
        p
    }

    #[test]
    fn first_packet_decides_later_packets_hit_the_stash() {
        let spec = Spec::default();
        let mut r = rsd(&spec);
        let p = key_payload(&spec, 13);
        let seg = qnp::seg_cnt_for(p.len());
        assert_eq!(r.dispatch(7, &packet(1, 100, 0, 3, seg, &p)), Verdict::Queue(5));
        assert_eq!(r.dispatch(7, &packet(1, 100, 2, 3, seg, b"xx")), Verdict::Queue(5));
        assert_eq!(r.dispatch(7, &packet(1, 100, 1, 3, seg, b"xx")), Verdict::Queue(5));
        // Another sender's request 100 is not this one.
        assert_eq!(r.dispatch(8, &packet(1, 100, 1, 3, seg, b"xx")), Verdict::Drop(RsdDrop::StashMiss));
        // Request 104 takes slot 0 (4 entries): request 100's later packets now miss.
        assert_eq!(r.dispatch(7, &packet(1, 104, 0, 2, seg, &p)), Verdict::Queue(5));
        assert_eq!(r.dispatch(7, &packet(1, 100, 2, 3, seg, b"xx")), Verdict::Drop(RsdDrop::StashMiss));
        let s = r.stats();
        assert_eq!((s.first_packets, s.stash_hits, s.drops_of(RsdDrop::StashMiss)), (2, 2, 2));
        assert_eq!(s.rule_hits[13], 2);
        assert_eq!(s.per_queue[5], 2);
    }

    #[test]
    fn drops_are_named() {
        let spec = Spec::default();
        let mut r = rsd(&spec);
        let p = key_payload(&spec, 1);
        let seg = qnp::seg_cnt_for(p.len());
        assert_eq!(r.dispatch(0, b"short"), Verdict::Drop(RsdDrop::BadHeader));
        assert_eq!(r.dispatch(0, &packet(2, 1, 0, 1, seg, &p)), Verdict::Drop(RsdDrop::UnknownApp));
        let mut resp = packet(1, 1, 0, 1, seg, &p);
        resp[16] = Flags::RESPONSE.bits();
        assert_eq!(r.dispatch(0, &resp), Verdict::Drop(RsdDrop::NotRequest));
        r.begin_reconfigure(1);
        assert_eq!(r.dispatch(0, &packet(1, 1, 0, 1, seg, &p)), Verdict::Drop(RsdDrop::Reconfiguring));
        r.install(1, Some(Arc::new(Machine::compile(&spec.rule_set(8), 1).unwrap())));
        assert_eq!(r.dispatch(0, &packet(1, 1, 0, 1, seg, &p)), Verdict::Queue(1));
        assert_eq!(r.dispatch(0, &packet(1, 9, 1, 2, seg, b"later")), Verdict::Drop(RsdDrop::StashMiss));
        // Type 2 is not declared (the app has only Get = 1): dropped, not decided as a Get.
        let mut other = packet(1, 2, 0, 1, seg, &p);
        other[1] = 2;
        assert_eq!(r.dispatch(0, &other), Verdict::Drop(RsdDrop::UnknownReqType));
        // No key record (another field first): not the default queue, a drop.
        let mut nokey = Vec::new();
        tern_wire::tlv::Writer::new(&mut nokey).put_u32(2, 7);
        assert_eq!(r.dispatch(0, &packet(1, 3, 0, 1, 2, &nokey)), Verdict::Drop(RsdDrop::MissingDispatchField));
        // seg_cnt 1 claims no dispatch bytes although the key is there.
        assert_eq!(r.dispatch(0, &packet(1, 4, 0, 1, 1, &p)), Verdict::Drop(RsdDrop::SegCntShort));
        r.set_bytestream(64 + 32);
        assert_eq!(r.dispatch(0, &packet(1, 5, 0, 1, seg, &p)), Verdict::Drop(RsdDrop::BeyondBytestream));
        for d in RsdDrop::ALL {
            assert_eq!(r.stats().drops_of(d), 1, "{}", d.as_str());
        }
    }

    #[test]
    fn seg_cnt_cannot_steer_a_request() {
        // A key of 62 bytes sits in payload bytes 3..65, so it needs seg_cnt 3. With seg_cnt 2
        // the matcher would not see the key's end and the request would fall to the default
        // queue: that is refused, not decided.
        let spec = Spec { checks: 12, ..Spec::default() }; // route = 72 bytes
        let mut r = rsd(&spec);
        let p = key_payload(&spec, 3);
        assert_eq!(qnp::seg_cnt_for(p.len()), 3);
        assert_eq!(r.dispatch(0, &packet(1, 1, 0, 1, 3, &p)), Verdict::Queue(3));
        assert_eq!(r.dispatch(0, &packet(1, 2, 0, 1, 2, &p)), Verdict::Drop(RsdDrop::SegCntShort));
        // A larger seg_cnt than needed changes nothing.
        assert_eq!(r.dispatch(0, &packet(1, 3, 0, 1, 255, &p)), Verdict::Queue(3));
        assert_eq!(r.stats().default_queue, 0);
        // The ByteStream bound refuses dispatch records it cannot hold.
        r.set_bytestream(64 + 64);
        assert_eq!(r.dispatch(0, &packet(1, 4, 0, 1, 3, &p)), Verdict::Drop(RsdDrop::BeyondBytestream));
    }

    proptest! {
        /// The direct-mapped stash against a plain model: a slot per `req_id % entries`
        /// holding the last insert.
        #[test]
        fn stash_agrees_with_model(
            entries in 1usize..8,
            ops in prop::collection::vec((any::<bool>(), 0u32..3, 0u8..2, 0u32..20, 0u16..9), 0..100),
        ) {
            let mut stash = Stash::new(entries);
            let mut model: Vec<Option<(u32, u8, u32, u16)>> = vec![None; entries];
            for (insert, sender, app, req, q) in ops {
                let slot = req as usize % entries;
                if insert {
                    stash.insert(sender, app, req, q);
                    model[slot] = Some((sender, app, req, q));
                } else {
                    let want = model[slot].filter(|m| (m.0, m.1, m.2) == (sender, app, req)).map(|m| m.3);
                    prop_assert_eq!(stash.get(sender, app, req), want);
                }
            }
        }
    }
}
