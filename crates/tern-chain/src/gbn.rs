//! The go-back-N transport network task's protocol (docs/chain.md, "Go-back-N transport"),
//! sans-IO: a [`Sender`] and a [`Receiver`] that take and make packets and never touch a
//! socket or a clock of their own (the caller passes `now`).
//!
//! A sender opens its connection first (an [`OPEN`] packet carrying the connection's initial
//! sequence number, sent until acknowledged) and sends data only once the receiving end has
//! it. It numbers each payload, keeps at most `window` unacknowledged, and when the oldest has
//! gone unacknowledged for the retransmission timeout sends every unacknowledged packet again,
//! from the oldest (go back N). The receiver delivers only the next payload in order, drops
//! everything else, and answers every data packet with a cumulative acknowledgement: the next
//! sequence number it expects. So each payload is delivered exactly once and in order whatever
//! the network loses, duplicates or reorders. The receiving end keeps its connections in
//! [`Connections`]: made only by an open, bounded, and each forgotten after a time without
//! data; a data packet of a connection it does not have is answered with a [`RESET`], so a
//! sender whose connection was forgotten (or whose receiving end restarted) finds out at its
//! next packet ([`Sender::ended`]) rather than having its payloads taken for a new connection's,
//! and gives them back for a new one. While it keeps many connections, the receiving end makes
//! a new one only at an open that brings a [`COOKIE`] it gave (as TCP's SYN cookies), so
//! spoofed opens cannot fill its table; so it does too in its quiet time (as TCP's after a
//! restart), so that an open delayed from before a restart cannot make a connection again.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tern_chain::gbn::{Config, Receiver, Sender};
//! let now = Instant::now();
//! let (mut tx, mut rx) = (Sender::new(7, Config::default()), Receiver::new(7));
//! tx.push(b"hello".to_vec()).unwrap();
//! let mut wire = Vec::new();
//! tx.poll(now, &mut wire); // the open
//! let (delivered, ack) = rx.on_packet(&wire.remove(0));
//! assert_eq!(delivered, None);
//! tx.on_packet(&ack.unwrap(), now);
//! tx.poll(now, &mut wire); // the data, now that the receiving end has the connection
//! let (delivered, ack) = rx.on_packet(&wire.remove(0));
//! assert_eq!(delivered.as_deref(), Some(&b"hello"[..]));
//! tx.on_packet(&ack.unwrap(), now);
//! assert!(tx.is_idle());
//! ```

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

use crate::swept::Shared;

/// The header's length.
pub const HEADER_LEN: usize = 12;
/// The version this implements (2: the open and the reset; version 1 had neither).
pub const VERSION: u8 = 2;
/// A data packet.
pub const DATA: u8 = 1;
/// An acknowledgement.
pub const ACK: u8 = 2;
/// An open: a sender's first packet of a connection, carrying its initial sequence number; the
/// receiving end makes the connection and acknowledges it.
pub const OPEN: u8 = 3;
/// A reset: the receiving end's answer to a data packet of a connection it does not have
/// (never opened, or forgotten), carrying the data packet's sequence number.
pub const RESET: u8 = 4;
/// A cookie: the receiving end's answer, while it keeps many connections
/// ([`ReceiveConfig::cookies_from`]), to an open of a new connection that does not bring one
/// (and to an open that would begin a kept connection again): the initial sequence number the
/// sender must open with, a keyed hash of its address, port and connection id and the time
/// (and of a kept connection's initial number, for an open that would begin it again), so that
/// the connection is made only once the sender has shown that it gets packets at its address —
/// none for a spoofed one.
pub const COOKIE: u8 = 5;
/// How long a cookie is good for: it is made for the current period of this length and
/// taken for that one and the one before (so for 10 to 20 s).
pub const COOKIE_PERIOD: Duration = Duration::from_secs(10);
/// The largest payload one packet carries.
pub const MAX_PAYLOAD: usize = 9000;

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// [`DATA`], [`ACK`], [`OPEN`], [`RESET`] or [`COOKIE`].
    pub kind: u8,
    /// The payload's length (0 for all but data).
    pub len: u16,
    /// The connection.
    pub conn: u32,
    /// Data: this payload's sequence number; acknowledgement: the next one expected; open: the
    /// connection's initial sequence number; reset: the number of the data packet answered;
    /// cookie: the initial sequence number to open with.
    pub seq: u32,
}

/// Bytes that are not a go-back-N packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Shorter than the header.
    #[error("{0} bytes, shorter than the 12-byte header")]
    Short(usize),
    /// Another version.
    #[error("version {0}, not 2")]
    Version(u8),
    /// None of data, acknowledgement, open, reset or cookie.
    #[error("kind {0}, none of data (1), acknowledgement (2), open (3), reset (4) or cookie (5)")]
    Kind(u8),
    /// The length field disagrees with the bytes, or a packet other than data carries a
    /// payload, or a payload is over [`MAX_PAYLOAD`].
    #[error("length {len} with {have} bytes after the header")]
    Length {
        /// The header's length field.
        len: u16,
        /// Bytes after the header.
        have: usize,
    },
}

impl Header {
    /// The header and payload of `b`. Never panics.
    pub fn parse(b: &[u8]) -> Result<(Header, &[u8]), PacketError> {
        let Some((h, payload)) = b.split_first_chunk::<HEADER_LEN>() else { return Err(PacketError::Short(b.len())) };
        if h[0] != VERSION {
            return Err(PacketError::Version(h[0]));
        }
        let kind = h[1];
        if !(DATA..=COOKIE).contains(&kind) {
            return Err(PacketError::Kind(kind));
        }
        let len = u16::from_be_bytes([h[2], h[3]]);
        let bad_len = usize::from(len) != payload.len() || (kind != DATA && len != 0) || usize::from(len) > MAX_PAYLOAD;
        if bad_len {
            return Err(PacketError::Length { len, have: payload.len() });
        }
        let conn = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let seq = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        Ok((Header { kind, len, conn, seq }, payload))
    }

    /// Appends the header and `payload` to `out`.
    pub fn write(&self, payload: &[u8], out: &mut Vec<u8>) {
        out.push(VERSION);
        out.push(self.kind);
        out.extend_from_slice(&self.len.to_be_bytes());
        out.extend_from_slice(&self.conn.to_be_bytes());
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(payload);
    }
}

/// A sender's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// Unacknowledged packets at most (1 to 32768). Default 64.
    pub window: u32,
    /// How long the oldest unacknowledged packet waits before everything from it is sent
    /// again. Default 1 ms.
    pub rto: Duration,
    /// Payloads queued and not yet sent, at most. Default 4096.
    pub queue: usize,
    /// How long the sender goes on without hearing an acknowledgement that moves its window
    /// (with packets or its open in flight), or without sending or hearing anything (with
    /// none), before it ends the connection ([`Ended::Unanswered`], [`Ended::Idle`]). Keep it
    /// below the receiving end's idle time ([`ReceiveConfig::idle`], 60 s by default), so that
    /// a quiet connection ends here, its payloads all unsent, before it can be forgotten there.
    /// Default 30 s.
    pub give_up: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config { window: 64, rto: Duration::from_millis(1), queue: 4096, give_up: Duration::from_secs(30) }
    }
}

/// Why a sender ended its connection ([`Sender::ended`]). It then sends and queues nothing,
/// and gives back what was not acknowledged ([`Sender::take_unacknowledged`]) for a new
/// connection to carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The receiving end does not have it (a restart, or an idle time the sender outlasted):
    /// a [`RESET`] came for a data packet in flight, every one of which was sent after the
    /// open was acknowledged.
    Forgotten,
    /// Packets (or the open) in flight and no acknowledgement moving the window for
    /// [`Config::give_up`]: a partition, or a receiving end gone.
    Unanswered,
    /// Nothing sent or heard for [`Config::give_up`], and a payload to send: a connection that
    /// quiet may be forgotten by the time it arrives, so it goes on a new connection.
    Idle,
}

/// What a sender counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderStats {
    /// Data packets sent for the first time, and again.
    pub sent: u64,
    pub retransmitted: u64,
    /// Opens sent (the first, and again after each timeout or cookie until acknowledged).
    pub opens: u64,
    /// Cookies taken: the receiving end, keeping many connections, asked for the open again
    /// with the initial number it gave.
    pub cookies: u64,
    /// Timeouts that sent the window (or the open) again.
    pub timeouts: u64,
    /// Packets acknowledged.
    pub acked: u64,
    /// Packets dropped: not a packet, another connection, or none of an acknowledgement, a
    /// reset and a cookie.
    pub bad_acks: u64,
    /// Acknowledgements, resets and cookies that answer nothing in flight: stale (overtaken
    /// by a later one, from before the open, or a cookie once open) or for packets never sent;
    /// ignored.
    pub stale_acks: u64,
}

/// How many times an open sent again and not acknowledged doubles the wait before the next
/// ([`Config::rto`] at first; at most 1024 times it, 1.024 s at the default 1 ms), so that
/// a sender whose opens are refused or lost does not send one every `rto` until it gives up.
pub const OPEN_BACKOFF: u32 = 10;

/// A payload [`Sender::push`] did not queue, given back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The queue is full, or the payload is over [`MAX_PAYLOAD`] bytes.
    #[error("the sender's queue is full, or the payload is over 9000 bytes")]
    Full(Vec<u8>),
    /// The connection ended ([`Sender::ended`]): nothing more is sent on it.
    #[error("the connection ended")]
    Ended(Vec<u8>),
}

/// The payloads an ended connection's sender had not had acknowledged, oldest first
/// ([`Sender::take_unacknowledged`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unacknowledged {
    /// Sent and not acknowledged: the receiving end may have delivered the first of them (a
    /// prefix, in order), their acknowledgements lost.
    pub sent: Vec<Vec<u8>>,
    /// Queued and never sent: none delivered.
    pub unsent: Vec<Vec<u8>>,
}

/// The sending side of one connection.
#[derive(Debug)]
pub struct Sender {
    conn: u32,
    cfg: Config,
    /// The oldest unacknowledged sequence number, and the next to assign.
    base: u32,
    next: u32,
    /// Payloads from `base` on: the first `next - base` sent and unacknowledged.
    pending: VecDeque<Vec<u8>>,
    /// When the oldest unacknowledged packet (or, before the connection is open, the open)
    /// was (last) sent.
    timer: Option<Instant>,
    /// The receiving end acknowledged the open: data may go.
    opened: bool,
    /// A cookie came: the open goes again at the next poll, with its number.
    open_now: bool,
    /// When an acknowledgement last moved the window, or a packet (or the first open) went
    /// into an empty window.
    /// With the window empty, the last of these was the acknowledgement that emptied it: the
    /// time since anything was sent or heard.
    heard: Option<Instant>,
    /// The connection ended, and why: nothing more is sent.
    ended: Option<Ended>,
    stats: SenderStats,
}

impl Sender {
    /// A sender for connection `conn` (its window clamped to 1..=32768, its queue to at least
    /// one), numbering from 0.
    pub fn new(conn: u32, cfg: Config) -> Sender {
        Sender::starting_at(conn, cfg, 0)
    }

    /// The same, numbering from `start` (the connection's initial sequence number, which its
    /// open carries). A sender that may reuse a connection id (a process started again) should
    /// pick it at random ([`Sender::random_start`]), so that no late packet of the id's earlier
    /// connection is taken for this one's. (A receiving end still keeping the earlier connection
    /// begins it again at this one's open, whatever its number, once it brings its cookie.)
    pub fn starting_at(conn: u32, cfg: Config, start: u32) -> Sender {
        let cfg = Config { window: cfg.window.clamp(1, 1 << 15), queue: cfg.queue.max(1), ..cfg };
        let (pending, stats) = (VecDeque::new(), SenderStats::default());
        Sender {
            conn,
            cfg,
            base: start,
            next: start,
            pending,
            timer: None,
            opened: false,
            open_now: false,
            heard: None,
            ended: None,
            stats,
        }
    }

    /// The same, numbering from a random initial sequence number (the operating system's
    /// random bytes): what a sender that may reuse its connection id wants. An error only if
    /// the system has no random bytes to give.
    pub fn random_start(conn: u32, cfg: Config) -> Result<Sender, getrandom::Error> {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b)?;
        Ok(Sender::starting_at(conn, cfg, u32::from_be_bytes(b)))
    }

    /// Queues a payload (at most [`MAX_PAYLOAD`] bytes: a longer one is refused too), unless
    /// the connection ended.
    pub fn push(&mut self, payload: Vec<u8>) -> Result<(), PushError> {
        if self.ended.is_some() {
            return Err(PushError::Ended(payload));
        }
        if payload.len() > MAX_PAYLOAD || self.pending.len() >= self.cfg.queue + self.in_flight() as usize {
            return Err(PushError::Full(payload));
        }
        self.pending.push_back(payload);
        Ok(())
    }

    /// Data packets sent and not yet acknowledged.
    pub fn in_flight(&self) -> u32 {
        self.next.wrapping_sub(self.base)
    }

    /// Nothing queued or in flight.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether the receiving end acknowledged the open (data goes only then).
    pub fn is_open(&self) -> bool {
        self.opened
    }

    /// Whether the connection ended, and why (docs/chain.md, "Go-back-N transport"): the
    /// receiving end forgot it, or it went unanswered or idle for [`Config::give_up`]. From
    /// then on nothing is sent or queued: the payloads not acknowledged are
    /// [`Sender::take_unacknowledged`]'s, for a new connection to carry.
    pub fn ended(&self) -> Option<Ended> {
        self.ended
    }

    /// An ended connection's payloads not acknowledged (`None` if it has not ended: taking
    /// them from a live connection would leave its receiver waiting for them); the sender is
    /// left with none.
    pub fn take_unacknowledged(&mut self) -> Option<Unacknowledged> {
        self.ended?;
        let mut sent: Vec<Vec<u8>> = self.pending.drain(..).collect();
        let unsent = sent.split_off((self.in_flight() as usize).min(sent.len()));
        self.base = self.next;
        Some(Unacknowledged { sent, unsent })
    }

    fn end(&mut self, why: Ended) {
        self.ended = Some(why);
        self.timer = None;
    }

    /// Whether the open is sent and not yet acknowledged.
    fn opening(&self) -> bool {
        !self.opened && self.timer.is_some()
    }

    /// Appends the packets to send now. Before the connection is open: its open, once there is
    /// a payload to send, and again until acknowledged, `rto` after the first and twice as
    /// long after each next (up to 2^[`OPEN_BACKOFF`] times `rto`). Then, on a timeout, every
    /// unacknowledged packet again from the oldest, and new ones while the window has room.
    /// Nothing once the connection has ended, or if it ends now, having gone unanswered or
    /// idle for [`Config::give_up`].
    pub fn poll(&mut self, now: Instant, out: &mut Vec<Vec<u8>>) {
        if self.ended.is_some() {
            return;
        }
        if self.heard.is_some_and(|t| now.saturating_duration_since(t) >= self.cfg.give_up) {
            if self.in_flight() > 0 || self.opening() {
                return self.end(Ended::Unanswered);
            }
            if !self.pending.is_empty() {
                return self.end(Ended::Idle);
            }
        }
        if !self.opened {
            if self.pending.is_empty() {
                return;
            }
            match self.timer {
                None => self.heard = Some(now),
                Some(_) if self.open_now => self.open_now = false,
                Some(t) if now.saturating_duration_since(t) >= self.wait() => self.stats.timeouts += 1,
                Some(_) => return,
            }
            self.stats.opens += 1;
            self.timer = Some(now);
            let mut p = Vec::with_capacity(HEADER_LEN);
            Header { kind: OPEN, len: 0, conn: self.conn, seq: self.base }.write(&[], &mut p);
            out.push(p);
            return;
        }
        if let Some(t) = self.timer
            && now.saturating_duration_since(t) >= self.cfg.rto
            && self.in_flight() > 0
        {
            self.stats.timeouts += 1;
            for k in 0..self.in_flight() {
                let seq = self.base.wrapping_add(k);
                out.push(self.packet(seq, &self.pending[k as usize]));
                self.stats.retransmitted += 1;
            }
            self.timer = Some(now);
        }
        while self.in_flight() < self.cfg.window && (self.in_flight() as usize) < self.pending.len() {
            if self.in_flight() == 0 {
                // The clock for hearing back starts with the first packet in an empty window.
                self.heard = Some(now);
            }
            let seq = self.next;
            out.push(self.packet(seq, &self.pending[self.in_flight() as usize]));
            self.next = self.next.wrapping_add(1);
            self.stats.sent += 1;
            if self.timer.is_none() {
                self.timer = Some(now);
            }
        }
    }

    /// When [`Sender::poll`] next has a retransmission to make, if anything (data, or the
    /// open) is in flight (at once, after a cookie).
    pub fn deadline(&self) -> Option<Instant> {
        let t = self.timer.filter(|_| self.in_flight() > 0 || self.opening())?;
        Some(if self.open_now { t } else { t + self.wait() })
    }

    /// How long what is in flight waits before it is sent again: `rto` for data; for the
    /// open, `rto` doubled at each open sent again, up to 2^[`OPEN_BACKOFF`] times.
    fn wait(&self) -> Duration {
        if self.opened {
            return self.cfg.rto;
        }
        let doublings = self.stats.opens.saturating_sub(1).min(u64::from(OPEN_BACKOFF)) as u32;
        self.cfg.rto.saturating_mul(1 << doublings)
    }

    fn packet(&self, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut p = Vec::with_capacity(HEADER_LEN + payload.len());
        // `push` refused payloads over MAX_PAYLOAD (9000), so the length fits.
        Header { kind: DATA, len: payload.len() as u16, conn: self.conn, seq }.write(payload, &mut p);
        p
    }

    /// Takes an acknowledgement, a reset or a cookie. Before the connection is open, an
    /// acknowledgement of its initial sequence number opens it, and a cookie makes the cookie's
    /// number the initial one (no data has gone) and sends the open again with it at the next
    /// poll; after, an acknowledgement completes everything before its sequence number, and a
    /// reset of a data packet in flight ends the connection ([`Ended::Forgotten`]): every data
    /// packet went after the receiving end had acknowledged the open, so it has forgotten the
    /// connection since.
    pub fn on_packet(&mut self, b: &[u8], now: Instant) {
        let Ok((h, _)) = Header::parse(b) else {
            self.stats.bad_acks += 1;
            return;
        };
        if !matches!(h.kind, ACK | RESET | COOKIE) || h.conn != self.conn {
            self.stats.bad_acks += 1;
            return;
        }
        let ahead = h.seq.wrapping_sub(self.base);
        if self.ended.is_some() || !self.opened {
            let opening = self.ended.is_none() && self.opening();
            if opening && h.kind == ACK && ahead == 0 {
                self.opened = true;
                self.timer = None;
                self.heard = Some(now);
            } else if opening && h.kind == COOKIE {
                (self.base, self.next) = (h.seq, h.seq);
                self.open_now = true;
                self.heard = Some(now);
                self.stats.cookies += 1;
            } else {
                // A reset before the open is acknowledged answers nothing of this connection
                // (data goes only after).
                self.stats.stale_acks += 1;
            }
            return;
        }
        if h.kind != ACK {
            if h.kind == RESET && ahead < self.in_flight() {
                self.end(Ended::Forgotten);
            } else {
                self.stats.stale_acks += 1;
            }
            return;
        }
        let acked = ahead;
        if acked > self.in_flight() {
            self.stats.stale_acks += 1;
            return;
        }
        for _ in 0..acked {
            self.pending.pop_front();
        }
        self.base = h.seq;
        self.stats.acked += u64::from(acked);
        if acked > 0 {
            // The timer restarts for the new oldest packet.
            self.timer = (self.in_flight() > 0).then_some(now);
            self.heard = Some(now);
        }
    }

    /// Its counters.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }
}

/// What a receiver counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Payloads delivered.
    pub delivered: u64,
    /// Data packets dropped for being out of order (ahead, or a copy of one delivered).
    pub out_of_order: u64,
    /// Packets dropped: not a packet, another connection, or neither data nor an open.
    pub malformed: u64,
    /// Opens with another initial sequence number: the connection begun again.
    pub reopened: u64,
}

/// What the receiving end keeps of an opened connection: its initial sequence number and the
/// next expected (8 bytes, so that [`Connections`] keeps a connection in 40).
#[derive(Debug, Clone, Copy)]
struct Expect {
    start: u32,
    expected: u32,
}

// A connection's entry in [`Connections`]' maps: 40 bytes, as its doc says.
const _: () = assert!(std::mem::size_of::<(ConnKey, (Expect, Instant))>() == 40);

/// What [`Expect::take`] made of a packet.
enum Took {
    /// A data packet: whether it was the next (delivered).
    Data(bool),
    /// An open: whether it began the connection again (another initial number).
    Open(bool),
}

impl Expect {
    fn at(start: u32) -> Expect {
        Expect { start, expected: start }
    }

    /// A data packet or an open (`h.kind` is one of them) of the connection: a data packet
    /// of the next number is delivered; an open of another initial number begins the
    /// connection again from it. The acknowledgement to send asks for `self.expected` after.
    fn take(&mut self, h: &Header) -> Took {
        if h.kind == OPEN {
            let again = h.seq != self.start;
            if again {
                *self = Expect::at(h.seq);
            }
            return Took::Open(again);
        }
        let deliver = h.seq == self.expected;
        if deliver {
            self.expected = self.expected.wrapping_add(1);
        }
        Took::Data(deliver)
    }

    fn ack(&self, conn: u32) -> Header {
        Header { kind: ACK, len: 0, conn, seq: self.expected }
    }
}

/// The receiving side of one connection, opened.
#[derive(Debug)]
pub struct Receiver {
    conn: u32,
    expect: Expect,
    stats: ReceiverStats,
}

impl Receiver {
    /// A receiver for connection `conn`, opened with initial sequence number 0.
    pub fn new(conn: u32) -> Receiver {
        Receiver::starting_at(conn, 0)
    }

    /// The same, opened with initial sequence number `start`, expected first.
    pub fn starting_at(conn: u32, start: u32) -> Receiver {
        Receiver { conn, expect: Expect::at(start), stats: ReceiverStats::default() }
    }

    /// Takes a data packet or an open: the payload if it is the next data in order, and the
    /// acknowledgement to send (the next sequence number expected) for any data packet or open
    /// of this connection. Never panics.
    pub fn on_packet(&mut self, b: &[u8]) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
        let Ok((h, payload)) = Header::parse(b) else {
            self.stats.malformed += 1;
            return (None, None);
        };
        let Some((deliver, ack)) = self.on_header(h) else { return (None, None) };
        let mut out = Vec::with_capacity(HEADER_LEN);
        ack.write(&[], &mut out);
        (deliver.then(|| payload.to_vec()), Some(out))
    }

    /// [`on_packet`](Self::on_packet) for a parsed header, without copying anything: whether
    /// its payload is delivered, and the acknowledgement to send; `None` (counted `malformed`)
    /// if it is neither a data packet nor an open of this connection. An open of its initial
    /// sequence number (sent again, its acknowledgement lost) is acknowledged with the next
    /// number expected; an open of another begins the connection again from that number (the
    /// sender started over with the same id: counted `reopened`; [`Connections`] asks such an
    /// open for a cookie first, this single receiver does not).
    pub fn on_header(&mut self, h: Header) -> Option<(bool, Header)> {
        if (h.kind != DATA && h.kind != OPEN) || h.conn != self.conn {
            self.stats.malformed += 1;
            return None;
        }
        let deliver = match self.expect.take(&h) {
            Took::Data(true) => {
                self.stats.delivered += 1;
                true
            }
            Took::Data(false) => {
                self.stats.out_of_order += 1;
                false
            }
            Took::Open(again) => {
                self.stats.reopened += u64::from(again);
                false
            }
        };
        Some((deliver, self.expect.ack(self.conn)))
    }

    /// Its counters.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }
}

/// The receiving end's bounds on its connections (the `gbn` task's `max_connections`,
/// `max_connections_per_peer` and `idle_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveConfig {
    /// Connections kept at once, at most (1 to 2^20). Default 4096.
    pub max_connections: usize,
    /// Connections kept at once for one peer address (its ports together), at most, so that
    /// no one client takes them all (1 to 2^20). Default 1024.
    pub max_connections_per_peer: usize,
    /// A connection without a data packet or open for this long is forgotten. Default 60 s.
    pub idle: Duration,
    /// Connections kept from which an open of a new connection must bring a cookie (its
    /// initial number the one a [`COOKIE`] gave): `None`, half of `max_connections`; 0, every
    /// open; `max_connections` or more, none — not even in the quiet time ([`Connections`]).
    pub cookies_from: Option<usize>,
    /// The quiet time ([`Connections`]): for this long from the first open of a new
    /// connection, every such open must bring a cookie. `None`, the idle time (packets are
    /// taken to live less than that in the network); zero, none.
    pub quiet: Option<Duration>,
}

impl Default for ReceiveConfig {
    fn default() -> Self {
        ReceiveConfig {
            max_connections: 4096,
            max_connections_per_peer: 1024,
            idle: Duration::from_secs(60),
            cookies_from: None,
            quiet: None,
        }
    }
}

impl ReceiveConfig {
    /// Connections kept from which opens must bring a cookie ([`ReceiveConfig::cookies_from`]).
    pub fn cookies_from(&self) -> usize {
        self.cookies_from.unwrap_or(self.max_connections / 2)
    }

    /// Whether opens are ever asked for cookies: [`ReceiveConfig::cookies_from`] below
    /// `max_connections`.
    pub fn cookies(&self) -> bool {
        self.cookies_from() < self.max_connections
    }

    /// The quiet time ([`ReceiveConfig::quiet`]): none if cookies are off.
    pub fn quiet(&self) -> Duration {
        if self.cookies() { self.quiet.unwrap_or(self.idle) } else { Duration::ZERO }
    }
}

/// Why a new connection's open was refused, none of the connections in the way idle past
/// [`ReceiveConfig::idle`] at the last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// [`ReceiveConfig::max_connections`] kept.
    #[error("every connection is taken (at most {0})")]
    ConnectionsFull(usize),
    /// [`ReceiveConfig::max_connections_per_peer`] kept for the packet's source address.
    #[error("the peer's address holds its share of the connections (at most {0})")]
    PeerFull(usize),
}

/// Where a connection's packets come from: the peer's IPv4 address and UDP port. A connection
/// is a peer's connection id: two peers using one id have a connection each, and no packet
/// from one reaches the other's.
pub type Peer = ([u8; 4], u16);

/// A connection: its peer and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ConnKey(Peer, u32);

impl std::hash::Hash for ConnKey {
    /// Its 10 bytes as one number: the keyed hash takes one call rather than one a field.
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let ((a, port), id) = (self.0, self.1);
        h.write_u128((u128::from(u32::from_be_bytes(a)) << 48) | (u128::from(port) << 32) | u128::from(id));
    }
}

/// The receiving end's connections, each its initial and next sequence numbers (as a [`Receiver`]
/// keeps them), made at its open and forgotten once it has been idle for [`ReceiveConfig::idle`]: a
/// data packet of a connection it does not have is answered with a [`RESET`], never delivered. For
/// its *quiet time* ([`ReceiveConfig::quiet`], the idle time by default) from the first open of a
/// new connection it is sent, every such open must bring a cookie, as in TCP's quiet time after a
/// restart: an open sent to an earlier instance and delayed past its end cannot make a connection
/// here (its number is not this instance's cookie), so neither can that connection's data be
/// delivered again. Sans-IO: the caller passes the time. (`Default`: [`ReceiveConfig`]'s defaults.)
#[derive(Debug)]
pub struct Connections {
    cfg: ReceiveConfig,
    /// By (peer, connection id), with its last data packet's (or open's) time; forgotten a
    /// part a packet once idle, each counted for its peer's address ([`Shared`]).
    map: Shared<ConnKey, (Expect, Instant), [u8; 4]>,
    expired: u64,
    opened: u64,
    reopened: u64,
    unknown: u64,
    /// The cookies' key (a keyed hash of this instance's own) and the time their periods count
    /// from (the first cookie's asked for or checked); cookies sent.
    secret: std::hash::RandomState,
    since: Option<Instant>,
    cookies: u64,
    /// The quiet time's start: the first open of a new connection's time.
    quiet_from: Option<Instant>,
}

impl Default for Connections {
    fn default() -> Self {
        Connections::new(ReceiveConfig::default())
    }
}

impl Connections {
    /// No connection yet.
    pub fn new(cfg: ReceiveConfig) -> Connections {
        let map = Shared::new(cfg.max_connections, |&ConnKey((addr, _), _), _| addr);
        let secret = std::hash::RandomState::new();
        Connections {
            cfg,
            map,
            expired: 0,
            opened: 0,
            reopened: 0,
            unknown: 0,
            secret,
            since: None,
            cookies: 0,
            quiet_from: None,
        }
    }

    /// [`Receiver::on_header`] on the connection of `h` from `from` at `now`: whether a data
    /// packet's payload is delivered, and the answer to send. An open makes the connection — with
    /// [`ReceiveConfig::cookies_from`] kept, or in the quiet time ([`ReceiveConfig::quiet`] from
    /// the first such open), only if it brings its cookie, else it is answered with one
    /// ([`COOKIE`]); for a connection kept, an open of its initial number before any data is
    /// acknowledged, and any other begins it again only with its cookie, never with the number
    /// it has (else it is answered with a cookie other than that number, and renews nothing).
    /// A data packet of a connection not kept
    /// (never opened, or idle for [`ReceiveConfig::idle`]) is answered with a [`RESET`] of its
    /// sequence number, and delivers nothing; an acknowledgement or a reset gets `None` and makes
    /// or refreshes nothing. A new connection's open with [`ReceiveConfig::max_connections`] kept
    /// is refused ([`Refused::ConnectionsFull`]), and so is one from an address with
    /// [`ReceiveConfig::max_connections_per_peer`] kept ([`Refused::PeerFull`]). Idle ones are
    /// forgotten by a pass begun no more often than ten times an idle period, paced over a
    /// twentieth of it, whose step looks at 64 buckets of the maps a packet (64 maps, or one a
    /// 2048 connections the bound allows), or at the rest of an overdue map; so one idle past its
    /// time may hold its place for up to three twentieths of that longer and twice the maps'
    /// packets after (128 with 64 maps; its own packet finds it idle at once).
    pub fn on_header(&mut self, from: Peer, h: Header, now: Instant) -> Result<Option<(bool, Header)>, Refused> {
        if h.kind != DATA && h.kind != OPEN {
            // An acknowledgement or a reset: no connection is made or kept alive for it.
            return Ok(None);
        }
        self.sweep(now);
        let key = ConnKey(from, h.conn);
        let idle = self.cfg.idle;
        match self.map.get_mut(&key) {
            Some((e, last)) if now.saturating_duration_since(*last) < idle => {
                if h.kind == OPEN && (h.seq != e.start || e.expected != e.start) {
                    // Another initial number (a sender begun again with its id), or its own
                    // after data (a late copy of its first open, or a sender begun again with its
                    // id and number): the connection begins again only at an open bringing its
                    // cookie (below), so that no one but the peer at its address can end it so,
                    // and never at one of the number it has, which a late copy of its first open
                    // brings. The connection goes on meanwhile, not kept alive by such opens.
                    let taken = e.start;
                    return Ok(Some(match self.cookie_check(from, &h, now, Some(taken)) {
                        Err(cookie) => (false, Header { kind: COOKIE, len: 0, conn: h.conn, seq: cookie }),
                        Ok(()) => {
                            self.reopened += 1;
                            self.begin(key, &h, now)
                        }
                    }));
                }
                *last = now;
                let deliver = matches!(e.take(&h), Took::Data(true));
                return Ok(Some((deliver, e.ack(h.conn))));
            }
            Some(_) => {
                // Idle past its time (the pass has not come round yet): forgotten.
                self.map.remove(&key);
                self.expired += 1;
            }
            None => {}
        }
        if h.kind == DATA {
            self.unknown += 1;
            return Ok(Some((false, Header { kind: RESET, len: 0, conn: h.conn, seq: h.seq })));
        }
        if self.map.len() >= self.cfg.max_connections {
            // Full: room is made by taking out, of the connections looked at first from the new
            // one's map on, the one idle longest past its time (forgotten already; the pass had
            // not come round), if any (each counted as replied to: no live one is taken).
            if self.map.make_room(&key, now, idle, |_, &(_, last)| Some((last, true))).is_none() {
                return Err(Refused::ConnectionsFull(self.cfg.max_connections));
            }
            self.expired += 1;
        }
        if self.map.at_limit(from.0, self.cfg.max_connections_per_peer) {
            return Err(Refused::PeerFull(self.cfg.max_connections_per_peer));
        }
        if (self.quiet(now) || self.map.len() >= self.cfg.cookies_from())
            && let Err(cookie) = self.cookie_check(from, &h, now, None)
        {
            // Many kept, or the quiet time: the open must bring its cookie; else it gets one
            // and makes nothing.
            return Ok(Some((false, Header { kind: COOKIE, len: 0, conn: h.conn, seq: cookie })));
        }
        self.opened += 1;
        Ok(Some(self.begin(key, &h, now)))
    }

    /// Whether `now` is in the quiet time ([`ReceiveConfig::quiet`] from the first open of a
    /// new connection, this one if none came before).
    /// (Out of line: inlined, it cost a data packet through 4096 connections some 0.7 ns, in
    /// `gbn_connections`, by the code's layout alone.)
    #[inline(never)]
    fn quiet(&mut self, now: Instant) -> bool {
        now.saturating_duration_since(*self.quiet_from.get_or_insert(now)) < self.cfg.quiet()
    }

    /// Whether the open `h` from `from` brings its cookie — as initial number, the cookie of
    /// this period or the last — or else the cookie to answer with (counted): this period's. A
    /// cookie is the top half of a keyed hash of the peer, the connection id and the period,
    /// and, for an open that would begin a kept connection again, of the initial number that
    /// connection has (`taken`), with its lowest bit flipped should it be that number: so it is
    /// good for that connection as it is now alone, and a late copy of an open that began it
    /// (or of one that made it, in the quiet time) begins nothing. (The cookie is returned as a
    /// bare number: returned as a [`Header`] it went through the stack in pieces read back
    /// whole, a stall that cost a refused open 13 ns.)
    #[inline]
    fn cookie_check(&mut self, from: Peer, h: &Header, now: Instant, taken: Option<u32>) -> Result<(), u32> {
        let since = *self.since.get_or_insert(now);
        let period = (now.saturating_duration_since(since).as_nanos() / COOKIE_PERIOD.as_nanos()) as u64;
        let cookie = |p: u64| {
            let hash = match taken {
                None => self.secret.hash_one((from, h.conn, p)),
                Some(t) => self.secret.hash_one((from, h.conn, p, t)),
            };
            let c = (hash >> 32) as u32;
            if Some(c) == taken { c ^ 1 } else { c }
        };
        let current = cookie(period);
        if h.seq == current || (period > 0 && h.seq == cookie(period - 1)) {
            return Ok(());
        }
        self.cookies += 1;
        Err(current)
    }

    /// The connection `key` begun (new, or again) at the open `h`, expecting its initial
    /// number: the acknowledgement of that number, nothing delivered.
    fn begin(&mut self, key: ConnKey, h: &Header, now: Instant) -> (bool, Header) {
        let e = Expect::at(h.seq);
        self.map.insert(key, (e, now));
        (false, e.ack(h.conn))
    }

    /// A data packet's part of the pass that forgets the connections idle for
    /// [`ReceiveConfig::idle`] ([`Shared::step`]).
    fn sweep(&mut self, now: Instant) {
        let idle = self.cfg.idle;
        self.expired += self.map.step(now, idle, |_, (_, last)| now.saturating_duration_since(*last) < idle) as u64;
    }

    /// Exchanges its connections with `other`'s (another generation of it: the bounds may
    /// differ; the connections are the peers'), the cookies' key and periods, so that a
    /// cookie one gave is good at the other, and the quiet time's start.
    pub fn swap_connections(&mut self, other: &mut Connections) {
        std::mem::swap(&mut self.map, &mut other.map);
        std::mem::swap(&mut self.secret, &mut other.secret);
        std::mem::swap(&mut self.since, &mut other.since);
        std::mem::swap(&mut self.quiet_from, &mut other.quiet_from);
    }

    /// Connections kept now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.map.len() == 0
    }

    /// Connections forgotten for being idle, so far.
    pub fn expired(&self) -> u64 {
        self.expired
    }

    /// Connections made by an open, so far.
    pub fn opened(&self) -> u64 {
        self.opened
    }

    /// Kept connections begun again by an open bringing its cookie (a sender started again
    /// with its id), so far.
    pub fn reopened(&self) -> u64 {
        self.reopened
    }

    /// Data packets of a connection not kept (answered with a reset), so far.
    pub fn unknown(&self) -> u64 {
        self.unknown
    }

    /// Cookies sent (opens of new connections that brought none, while many are kept), so far.
    pub fn cookies(&self) -> u64 {
        self.cookies
    }
}
