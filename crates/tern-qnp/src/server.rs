//! The receiving end of requests: reassembly, duplicate suppression, responses with the ACK
//! piggybacked (QingNiao §4.1).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use tern_io::{Batch, Pool};
use tern_wire::qnp::{Flags, Packet, Repr};
use tern_wire::tlv::Message;

use crate::memory::{Admit, ExactlyOnce, Single, recycle};
use crate::segment::{SegmentError, Segmented, segment_into};
use crate::table::{Accept, Parts, RequestTable};
use crate::{DropReason, QnpConfig, Stats, check_first_packet, dispatch_field_repeated, parse_header};

/// Names a request the application must answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqHandle {
    /// The client.
    pub peer: SocketAddr,
    /// Application id.
    pub app_id: u8,
    /// Request type.
    pub req_type: u8,
    /// Request id (unique per client).
    pub req_id: u32,
    /// The copy of the request this answers (the `attempt` byte of the packet that completed it,
    /// or of the retransmission a cached response is resent for), echoed in the response.
    pub attempt: u8,
}

impl ReqHandle {
    /// The handle of the request whose packet `data` (header `repr`) came from `peer`.
    fn answering(peer: SocketAddr, repr: &Repr, data: &[u8]) -> ReqHandle {
        ReqHandle {
            peer,
            app_id: repr.app_id,
            req_type: repr.req_type,
            req_id: repr.req_id,
            attempt: data[tern_wire::qnp::field::ATTEMPT],
        }
    }
}

/// A complete request, delivered once.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// Who to answer.
    pub handle: ReqHandle,
    /// Its payloads, for `Message::decode_parts`.
    pub parts: Parts<'a>,
}

#[derive(Debug)]
struct TxItem {
    handle: ReqHandle,
    seg: Segmented,
    next: usize,
    /// A new response, to be remembered once sent; `false` for a resend of a remembered one.
    new: bool,
}

/// A QNP server endpoint (sans-IO).
#[derive(Debug)]
pub struct Server {
    cfg: QnpConfig,
    apps: [bool; 256],
    /// Applications that declared their request types: other types are dropped.
    typed: [bool; 256],
    /// (app, req_type) → the type's dispatch fields, for declared types.
    types: HashMap<(u8, u8), Box<[u8]>>,
    table: RequestTable,
    memory: Arc<ExactlyOnce>,
    tx: VecDeque<TxItem>,
    stats: Stats,
    scratch: Vec<u8>,
    spare: Vec<Segmented>,
    next_sweep: Instant,
    /// Whether the memory may hold something to sweep: set when this server hands it a request
    /// packet, cleared when a sweep finds it empty (whichever server put it there, one that
    /// did keeps sweeping while anything is left).
    remembering: bool,
    /// The latest `now` passed in, for eviction by age.
    now: Instant,
}

impl Server {
    /// A server answering the given application ids, with an exactly-once memory of its own.
    pub fn new(cfg: QnpConfig, apps: &[u8], now: Instant) -> Server {
        let memory = Arc::new(ExactlyOnce::new(&cfg, 1));
        Server::with_memory(cfg, apps, now, memory)
    }

    /// A server answering the given application ids that shares its exactly-once memory (which
    /// requests were delivered, their responses, the clients' ack floors) with the other
    /// servers given the same `memory`: the workers of one service, so that a retransmission is
    /// recognised whichever worker it reaches (docs/qnp.md §7).
    pub fn with_memory(cfg: QnpConfig, apps: &[u8], now: Instant, memory: Arc<ExactlyOnce>) -> Server {
        let mut served = [false; 256];
        for &a in apps {
            served[usize::from(a)] = true;
        }
        Server {
            table: RequestTable::new(cfg.request_table_entries, cfg.request_timeout, cfg.max_buffered_bytes),
            cfg,
            apps: served,
            typed: [false; 256],
            types: HashMap::new(),
            memory,
            tx: VecDeque::new(),
            stats: Stats::default(),
            scratch: Vec::new(),
            spare: Vec::new(),
            next_sweep: now,
            remembering: false,
            now,
        }
    }

    /// Declares a request type of an application (served with [`Server::new`]) and the dispatch
    /// fields its message declares, ascending. Once an application declares one type, requests
    /// of undeclared types are dropped (`unknown_req_type`), and requests of declared types must
    /// keep QNP's first-packet rule: every dispatch field whole, leading the first packet, covered
    /// by `seg_cnt` (`missing_dispatch_field`, `seg_cnt_short`), and nowhere else in the request
    /// (`split_dispatch_field`). An application that declares nothing takes every type.
    pub fn declare_request_type(&mut self, app_id: u8, req_type: u8, dispatch_fields: &[u8]) {
        self.typed[usize::from(app_id)] = true;
        self.types.insert((app_id, req_type), dispatch_fields.into());
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// Counts a drop decided outside the core (a request that did not decode).
    pub fn count_drop(&mut self, reason: DropReason) {
        self.stats.drop(reason);
    }
    /// The request table.
    pub fn table(&self) -> &RequestTable {
        &self.table
    }
    /// Completed requests remembered for duplicate suppression (by every server sharing this
    /// one's memory).
    pub fn dedup_len(&self) -> usize {
        self.memory.remembered()
    }

    /// Takes one received packet. Returns a request when this packet completes one that has not
    /// been delivered before.
    pub fn handle_packet<'a>(&'a mut self, now: Instant, peer: SocketAddr, data: &'a [u8]) -> Option<Incoming<'a>> {
        self.now = self.now.max(now);
        let repr = parse_header(&mut self.stats, data)?;
        if repr.flags != Flags::DATA {
            self.stats.drop(DropReason::UnexpectedPacket);
            return None;
        }
        if !self.apps[usize::from(repr.app_id)] {
            self.stats.drop(DropReason::UnknownApp);
            return None;
        }
        let fields = if self.typed[usize::from(repr.app_id)] {
            match self.types.get(&(repr.app_id, repr.req_type)) {
                Some(f) => Some(&**f),
                None => {
                    self.stats.drop(DropReason::UnknownReqType);
                    return None;
                }
            }
        } else {
            None
        };
        if repr.req_len_in_pkts > self.cfg.max_pkts_per_request {
            self.stats.drop(DropReason::TooManyPackets);
            return None;
        }
        let most = usize::from(repr.req_len_in_pkts) * self.cfg.payload_capacity();
        if repr.req_len_in_bytes as usize > most {
            self.stats.drop(DropReason::BadLength);
            return None;
        }
        // The client says every request before `req_acked_id` is finished with.
        let key = (peer, repr.app_id, repr.req_id);
        let first = repr.pkt_seq_num_in_req == 0;
        self.remembering = true;
        let payload = &data[tern_wire::qnp::HEADER_LEN..];
        if repr.req_len_in_pkts == 1 {
            // A request of one packet: the same checks, in the same order, as a longer one
            // takes below, with the memory's admission and its record of the delivery under
            // one lock (the request table keeps nothing of it).
            let check = || match fields {
                Some(f) => {
                    if first {
                        check_first_packet(payload, repr.seg_cnt, f)?;
                    }
                    if dispatch_field_repeated(std::iter::once(payload), f) {
                        return Err(DropReason::SplitDispatchField);
                    }
                    Ok(())
                }
                None => Ok(()),
            };
            match self.memory.admit_single(now, key, repr.req_acked_id, first, &mut self.spare, check) {
                Single::Stale => self.stats.drop(DropReason::StaleRequest),
                Single::Duplicate(resend) => duplicate(&mut self.tx, &mut self.stats, peer, &repr, data, resend),
                Single::Refused(reason) => {
                    // As below: a repeated dispatch field is found once the request is whole,
                    // after its packet was counted received.
                    if reason == DropReason::SplitDispatchField {
                        self.stats.rx_packets += 1;
                    }
                    self.stats.drop(reason);
                }
                Single::Delivered { evicted } => {
                    self.stats.rx_packets += 1;
                    self.stats.dedup_evicted += evicted;
                    self.stats.requests += 1;
                    let handle = ReqHandle::answering(peer, &repr, data);
                    return Some(Incoming { handle, parts: Parts::Single(payload) });
                }
            }
            return None;
        }
        match self.memory.admit(now, key, repr.req_acked_id, first, &mut self.spare) {
            Admit::New => {}
            Admit::Stale => {
                self.stats.drop(DropReason::StaleRequest);
                return None;
            }
            Admit::Duplicate(resend) => {
                duplicate(&mut self.tx, &mut self.stats, peer, &repr, data, resend);
                return None;
            }
        }
        if let Some(f) = fields
            && repr.pkt_seq_num_in_req == 0
            && let Err(reason) = check_first_packet(payload, repr.seg_cnt, f)
        {
            self.stats.drop(reason);
            return None;
        }
        match self.table.accept(now, peer, &repr, payload) {
            Accept::Pending => {
                self.stats.rx_packets += 1;
                None
            }
            Accept::Dropped(reason) => {
                self.stats.drop(reason);
                None
            }
            Accept::Complete(parts) => {
                self.stats.rx_packets += 1;
                if let Some(f) = fields
                    && dispatch_field_repeated(parts.iter(), f)
                {
                    self.stats.drop(DropReason::SplitDispatchField);
                    return None;
                }
                // Another worker sharing the memory may have taken the same request meanwhile.
                let (new, evicted) = self.memory.begin(now, key, &mut self.spare);
                self.stats.dedup_evicted += evicted;
                if !new {
                    self.stats.drop(DropReason::DuplicateRequest);
                    return None;
                }
                self.stats.requests += 1;
                let handle = ReqHandle::answering(peer, &repr, data);
                Some(Incoming { handle, parts })
            }
        }
    }

    /// Answers a request: the response is segmented now and sent by
    /// [`poll_transmit`](Self::poll_transmit); it carries the request's ACK.
    pub fn respond<M: Message>(&mut self, handle: ReqHandle, resp: &M) -> Result<(), SegmentError> {
        let seg = segment_into(&self.cfg, resp, &mut self.spare, &mut self.scratch)?;
        self.stats.responses += 1;
        self.tx.push_back(TxItem { handle, seg, next: 0, new: true });
        Ok(())
    }

    /// Whether responses wait to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    /// Fills `batch` with response packets; returns how many were added.
    pub fn poll_transmit(&mut self, pool: &Pool, batch: &mut Batch) -> usize {
        let mut added = 0;
        while !batch.is_full() {
            let Some(item) = self.tx.front_mut() else { break };
            while item.next < item.seg.packets() && !batch.is_full() {
                batch.push(emit(pool, &item.handle, &item.seg, item.next));
                item.next += 1;
                added += 1;
            }
            if item.next < item.seg.packets() {
                break;
            }
            if let Some(item) = self.tx.pop_front() {
                if item.new {
                    let key = (item.handle.peer, item.handle.app_id, item.handle.req_id);
                    self.stats.dedup_evicted += self.memory.complete(self.now, key, item.seg, &mut self.spare);
                } else {
                    recycle(&mut self.spare, item.seg);
                }
            }
        }
        self.stats.tx_packets += added as u64;
        added
    }

    /// Expires partial requests and forgets old completed ones.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        let expired = self.table.handle_timeout(now);
        self.stats.drops[DropReason::RequestExpired as usize] += expired as u64;
        if now >= self.next_sweep {
            self.next_sweep = now + Duration::from_millis(100);
            let (evicted, remembering) = self.memory.sweep(now, &mut self.spare);
            self.stats.dedup_evicted += evicted;
            self.remembering = remembering;
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let housekeeping = self.remembering.then_some(self.next_sweep);
        [self.table.poll_timeout(), housekeeping].into_iter().flatten().min()
    }
}

/// A request already delivered: queues its response again (if `resend` has it) and counts the
/// drop.
fn duplicate(
    tx: &mut VecDeque<TxItem>,
    stats: &mut Stats,
    peer: SocketAddr,
    repr: &Repr,
    data: &[u8],
    resend: Option<Segmented>,
) {
    if let Some(seg) = resend {
        let handle = ReqHandle::answering(peer, repr, data);
        tx.push_back(TxItem { handle, seg, next: 0, new: false });
        stats.retransmissions += 1;
    }
    stats.drop(DropReason::DuplicateRequest);
}

/// Builds packet `i` of a segmented response.
pub(crate) fn emit(pool: &Pool, handle: &ReqHandle, seg: &Segmented, i: usize) -> tern_io::Packet {
    let ids = Ids { app_id: handle.app_id, req_type: handle.req_type, req_id: handle.req_id, acked: handle.req_id };
    emit_packet(pool, handle.peer, ids, Flags::RESPONSE, handle.attempt, seg, i)
}

/// The ids a packet carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ids {
    pub app_id: u8,
    pub req_type: u8,
    pub req_id: u32,
    pub acked: u32,
}

/// Builds packet `i` of a segmented message with its `attempt` byte.
pub(crate) fn emit_packet(
    pool: &Pool,
    peer: SocketAddr,
    ids: Ids,
    flags: Flags,
    attempt: u8,
    seg: &Segmented,
    i: usize,
) -> tern_io::Packet {
    let payload = seg.payload(i);
    let mut p = pool.packet();
    let len = tern_wire::qnp::HEADER_LEN + payload.len();
    let repr = Repr {
        app_id: ids.app_id,
        req_type: ids.req_type,
        req_id: ids.req_id,
        req_acked_id: ids.acked,
        req_len_in_bytes: seg.bytes.len() as u32,
        req_len_in_pkts: seg.packets() as u8,
        pkt_seq_num_in_req: i as u8,
        flags,
        seg_cnt: if i == 0 { seg.seg_cnt } else { 0 },
    };
    let buf = &mut p.buffer_mut()[..len];
    let mut view = Packet::new_unchecked(&mut *buf);
    repr.emit(&mut view);
    view.set_attempt(attempt);
    view.payload_mut().copy_from_slice(payload);
    p.set_len(len);
    p.set_peer(peer);
    p
}
