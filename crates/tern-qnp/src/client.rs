//! The sending end of requests: ids, segmentation, retransmission with backoff and an
//! adaptive timeout (RFC 6298 style), response reassembly, exactly-once completion.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tern_io::{Batch, Pool};
use tern_wire::qnp::Flags;
use tern_wire::tlv::Message;

use crate::segment::{SegmentError, Segmented, segment_into};
use crate::server::{Ids, emit_packet};
use crate::table::{Accept, Parts, RequestTable};
use crate::timers::Timers;
use crate::{DropReason, QnpConfig, Stats, parse_header};

/// Why a request could not be sent or completed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReqError {
    /// The request cannot be segmented.
    #[error(transparent)]
    Segment(#[from] SegmentError),
    /// Too many requests are outstanding; poll for responses first.
    #[error("{outstanding} requests outstanding, the window allows {window}")]
    WindowFull {
        /// Outstanding now.
        outstanding: usize,
        /// Configured window.
        window: usize,
    },
    /// No response after the retry limit.
    #[error("request {req_id} got no response after {retries} retransmissions")]
    RetriesExhausted {
        /// Request id.
        req_id: u32,
        /// Retransmissions made.
        retries: u32,
    },
}

/// A response, delivered once.
#[derive(Debug, Clone, Copy)]
pub struct Response<'a> {
    /// The request it answers.
    pub req_id: u32,
    /// The request's type.
    pub req_type: u8,
    /// When the request was first sent.
    pub sent_at: Instant,
    /// Its payloads.
    pub parts: Parts<'a>,
}

/// Something the application must hear about besides responses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientEvent {
    /// A request failed for good.
    Failed {
        /// Request id.
        req_id: u32,
        /// Why.
        error: ReqError,
    },
}

#[derive(Debug)]
struct Outstanding {
    req_type: u8,
    seg: Segmented,
    /// When the original was queued.
    sent_at: Instant,
    /// When the latest copy was queued.
    last_sent: Instant,
    attempt: u32,
    queued: bool,
}

/// A QNP client endpoint (sans-IO) talking to one server address.
#[derive(Debug)]
pub struct Client {
    cfg: QnpConfig,
    app_id: u8,
    server: SocketAddr,
    next_id: u32,
    floor: u32,
    window: VecDeque<Option<Outstanding>>,
    timers: Timers,
    tx: VecDeque<(u32, usize)>,
    table: RequestTable,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    events: VecDeque<ClientEvent>,
    stats: Stats,
    scratch: Vec<u8>,
    spare: Vec<Segmented>,
}

impl Client {
    /// A client of `app_id` at `server`; request ids start at `first_id` (pick it at random so a
    /// restarted client does not collide with its old ids).
    pub fn new(cfg: QnpConfig, app_id: u8, server: SocketAddr, first_id: u32) -> Client {
        Client {
            table: RequestTable::new(cfg.request_table_entries, cfg.request_timeout, cfg.max_buffered_bytes),
            rto: cfg.initial_rto,
            cfg,
            app_id,
            server,
            next_id: first_id,
            floor: first_id,
            window: VecDeque::new(),
            timers: Timers::default(),
            tx: VecDeque::new(),
            srtt: None,
            rttvar: Duration::ZERO,
            events: VecDeque::new(),
            stats: Stats::default(),
            scratch: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// Counts a drop decided outside the core (a response that did not decode).
    pub fn count_drop(&mut self, reason: DropReason) {
        self.stats.drop(reason);
    }
    /// Requests sent and not yet completed or failed.
    pub fn outstanding(&self) -> usize {
        self.window.iter().filter(|o| o.is_some()).count()
    }
    /// The current retransmission timeout (before backoff).
    pub fn rto(&self) -> Duration {
        self.rto
    }
    /// The server.
    pub fn server(&self) -> SocketAddr {
        self.server
    }

    fn slot(&mut self, req_id: u32) -> Option<&mut Option<Outstanding>> {
        let i = req_id.wrapping_sub(self.floor) as usize;
        self.window.get_mut(i)
    }

    /// Queues a request; returns its id. Packets go out with [`poll_transmit`](Self::poll_transmit).
    pub fn send_req<M: Message>(&mut self, now: Instant, req_type: u8, msg: &M) -> Result<u32, ReqError> {
        if self.window.len() >= self.cfg.max_outstanding {
            return Err(ReqError::WindowFull { outstanding: self.outstanding(), window: self.cfg.max_outstanding });
        }
        let seg = segment_into(&self.cfg, msg, &mut self.spare, &mut self.scratch)?;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.window.push_back(Some(Outstanding {
            req_type,
            seg,
            sent_at: now,
            last_sent: now,
            attempt: 0,
            queued: true,
        }));
        self.tx.push_back((id, 0));
        self.timers.push((now + self.rto, id, 0));
        self.stats.requests += 1;
        Ok(id)
    }

    /// Whether packets wait to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    /// Fills `batch` with request packets; returns how many were added.
    pub fn poll_transmit(&mut self, pool: &Pool, batch: &mut Batch) -> usize {
        let mut added = 0;
        let (server, app_id) = (self.server, self.app_id);
        while !batch.is_full() {
            let Some(&(id, next)) = self.tx.front() else { break };
            let floor = self.floor;
            let Some(Some(o)) = self.slot(id) else {
                self.tx.pop_front();
                continue;
            };
            let mut i = next;
            while i < o.seg.packets() && !batch.is_full() {
                let ids = Ids { app_id, req_type: o.req_type, req_id: id, acked: floor };
                let attempt = o.attempt.min(u32::from(u8::MAX)) as u8;
                batch.push(emit_packet(pool, server, ids, Flags::DATA, attempt, &o.seg, i));
                i += 1;
                added += 1;
            }
            if i < o.seg.packets() {
                self.tx.front_mut().expect("front exists").1 = i;
                break;
            }
            o.queued = false;
            self.tx.pop_front();
        }
        self.stats.tx_packets += added as u64;
        added
    }

    /// Takes one received packet; returns a response when this packet completes one for an
    /// outstanding request.
    pub fn handle_packet<'a>(&'a mut self, now: Instant, peer: SocketAddr, data: &'a [u8]) -> Option<Response<'a>> {
        let repr = parse_header(&mut self.stats, data)?;
        if repr.flags != Flags::RESPONSE || peer != self.server {
            self.stats.drop(DropReason::UnexpectedPacket);
            return None;
        }
        if repr.app_id != self.app_id {
            self.stats.drop(DropReason::UnknownApp);
            return None;
        }
        if repr.req_acked_id != repr.req_id {
            self.stats.drop(DropReason::BadHeader);
            return None;
        }
        if repr.req_len_in_pkts > self.cfg.max_pkts_per_request {
            self.stats.drop(DropReason::TooManyPackets);
            return None;
        }
        if repr.req_len_in_bytes as usize > usize::from(repr.req_len_in_pkts) * self.cfg.payload_capacity() {
            self.stats.drop(DropReason::BadLength);
            return None;
        }
        let req_id = repr.req_id;
        let (req_type, sent_at, last_sent, attempt) = match self.slot(req_id) {
            Some(Some(o)) => (o.req_type, o.sent_at, o.last_sent, o.attempt),
            _ => {
                self.stats.drop(DropReason::UnexpectedResponse);
                return None;
            }
        };
        if repr.req_type != req_type {
            self.stats.drop(DropReason::BadHeader);
            return None;
        }
        // Decide before borrowing the table for the result.
        match self.table.accept(now, peer, &repr, &data[tern_wire::qnp::HEADER_LEN..]) {
            Accept::Pending => {
                self.stats.rx_packets += 1;
                return None;
            }
            Accept::Dropped(reason) => {
                self.stats.drop(reason);
                return None;
            }
            Accept::Complete(_) => {}
        };
        self.stats.rx_packets += 1;
        self.stats.responses += 1;
        // The response echoes which copy of the request it answers (the `attempt` byte), so
        // its RTT is known even for a retransmitted request (as TCP timestamps make it, where
        // Karn's rule alone would discard the very samples that show the delay has grown), and
        // the copies sent after the answered one were spurious: it was not lost, only late.
        let echo = u32::from(data[tern_wire::qnp::field::ATTEMPT]);
        let attempt = attempt.min(u32::from(u8::MAX));
        if echo <= attempt {
            self.stats.spurious_retransmissions += u64::from(attempt - echo);
            if echo == 0 {
                self.sample_rtt(now.saturating_duration_since(sent_at));
            } else if echo == attempt {
                self.sample_rtt(now.saturating_duration_since(last_sent));
            }
        }
        self.finish(req_id);
        let parts = match repr.req_len_in_pkts {
            1 => Parts::Single(&data[tern_wire::qnp::HEADER_LEN..]),
            _ => self.table.last_delivered(),
        };
        Some(Response { req_id, req_type, sent_at, parts })
    }

    fn finish(&mut self, req_id: u32) {
        if let Some(slot) = self.slot(req_id)
            && let Some(mut o) = slot.take()
        {
            o.seg.clear();
            if self.spare.len() < 256 {
                self.spare.push(o.seg);
            }
        }
        while matches!(self.window.front(), Some(None)) {
            self.window.pop_front();
            self.floor = self.floor.wrapping_add(1);
        }
    }

    fn sample_rtt(&mut self, rtt: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + rtt) / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(rtt);
        self.rto = (srtt + self.rttvar * 4).clamp(self.cfg.min_rto, self.cfg.max_rto);
    }

    /// Retransmits requests whose timer expired and fails those past the retry limit.
    pub fn handle_timeout(&mut self, now: Instant) {
        let expired = self.table.handle_timeout(now);
        self.stats.drops[DropReason::RequestExpired as usize] += expired as u64;
        while let Some((deadline, id, attempt)) = self.timers.peek() {
            if deadline > now {
                break;
            }
            self.timers.pop();
            let (max_retries, rto, max_rto) = (self.cfg.max_retries, self.rto, self.cfg.max_rto);
            let Some(Some(o)) = self.slot(id) else { continue };
            if o.attempt != attempt {
                continue;
            }
            if attempt >= max_retries {
                self.stats.failed += 1;
                self.events.push_back(ClientEvent::Failed {
                    req_id: id,
                    error: ReqError::RetriesExhausted { req_id: id, retries: attempt },
                });
                self.finish(id);
                continue;
            }
            o.attempt += 1;
            o.last_sent = now;
            let backoff = rto.saturating_mul(1u32 << o.attempt.min(16)).min(max_rto);
            let queue = !o.queued;
            o.queued = true;
            let next_attempt = o.attempt;
            if queue {
                self.tx.push_back((id, 0));
            }
            self.timers.push_anywhere((now + backoff, id, next_attempt));
            self.stats.retransmissions += 1;
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let timer = self.timers.peek().map(|(t, _, _)| t);
        [timer, self.table.poll_timeout()].into_iter().flatten().min()
    }

    /// The next failure to report.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }
}
