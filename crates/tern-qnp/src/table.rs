//! The receive-side request table (QingNiao §3.2.2, §4.2.2): per-request state for requests
//! being reassembled, bounded in entries (1024 in the paper's NIC) and bytes, each entry expiring
//! a fixed time after its last packet. Only a request's first packet creates an entry; later
//! packets of a request never seen are dropped. Single-packet requests never enter the table.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use tern_wire::qnp::Repr;

use crate::DropReason;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    peer: SocketAddr,
    app_id: u8,
    req_id: u32,
}

#[derive(Debug, Default)]
struct Entry {
    req_type: u8,
    pkts: u8,
    declared_len: u32,
    received: [u64; 4],
    count: u8,
    bytes: Vec<u8>,
    ranges: Vec<(u32, u32)>,
    last_seen: Option<Instant>,
}

impl Entry {
    fn has(&self, seq: u8) -> bool {
        self.received[usize::from(seq / 64)] & (1u64 << (seq % 64)) != 0
    }
    fn mark(&mut self, seq: u8) {
        self.received[usize::from(seq / 64)] |= 1u64 << (seq % 64);
    }
}

/// The payloads of a complete request, in packet order.
#[derive(Debug, Clone, Copy)]
pub enum Parts<'a> {
    /// A single-packet request: its payload, straight from the packet buffer.
    Single(&'a [u8]),
    /// A reassembled request: buffered payloads and their (start, end) per sequence number.
    Table {
        /// Buffered bytes.
        bytes: &'a [u8],
        /// Range of each packet's payload, by sequence number.
        ranges: &'a [(u32, u32)],
    },
}

impl<'a> Parts<'a> {
    /// The payloads in order, for `Message::decode_parts`.
    pub fn iter(self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let (single, table) = match self {
            Parts::Single(s) => (Some(s), None),
            Parts::Table { bytes, ranges } => (None, Some((bytes, ranges))),
        };
        single.into_iter().chain(
            table
                .into_iter()
                .flat_map(|(bytes, ranges)| ranges.iter().map(move |&(s, e)| &bytes[s as usize..e as usize])),
        )
    }
    /// Total payload bytes.
    pub fn len(self) -> usize {
        self.iter().map(<[u8]>::len).sum()
    }
    /// Whether there are no payload bytes.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// Outcome of offering a packet to the table.
#[derive(Debug)]
pub enum Accept<'a> {
    /// Stored; the request is not complete yet.
    Pending,
    /// The request is complete.
    Complete(Parts<'a>),
    /// Dropped for this reason.
    Dropped(DropReason),
}

/// Bounded reassembly state.
#[derive(Debug)]
pub struct RequestTable {
    map: HashMap<Key, u32>,
    slots: Vec<Entry>,
    free: Vec<u32>,
    capacity: usize,
    timeout: Duration,
    max_bytes: usize,
    buffered: usize,
    delivered: Entry,
    next_sweep: Option<Instant>,
    expired: u64,
}

impl RequestTable {
    /// A table of `capacity` entries, buffering at most `max_bytes`, expiring entries `timeout`
    /// after their last packet.
    pub fn new(capacity: usize, timeout: Duration, max_bytes: usize) -> Self {
        RequestTable {
            map: HashMap::with_capacity(capacity.min(1 << 16)),
            slots: Vec::new(),
            free: Vec::new(),
            capacity,
            timeout,
            max_bytes,
            buffered: 0,
            delivered: Entry::default(),
            next_sweep: None,
            expired: 0,
        }
    }

    /// Requests being reassembled.
    pub fn len(&self) -> usize {
        self.map.len()
    }
    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    /// Most requests it holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Bytes buffered now.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered
    }
    /// Requests expired so far.
    pub fn expired(&self) -> u64 {
        self.expired
    }

    /// Offers a data packet whose header has been parsed and checked by the caller.
    pub fn accept<'a>(&'a mut self, now: Instant, peer: SocketAddr, repr: &Repr, payload: &'a [u8]) -> Accept<'a> {
        if repr.req_len_in_pkts == 1 {
            return Accept::Complete(Parts::Single(payload));
        }
        let key = Key { peer, app_id: repr.app_id, req_id: repr.req_id };
        let slot = match self.map.get(&key) {
            Some(&slot) => slot,
            None => {
                if repr.pkt_seq_num_in_req != 0 {
                    return Accept::Dropped(DropReason::NoFirstPacket);
                }
                if self.map.len() >= self.capacity {
                    self.expire(now);
                    if self.map.len() >= self.capacity {
                        return Accept::Dropped(DropReason::RequestTableFull);
                    }
                }
                let slot = match self.free.pop() {
                    Some(s) => s,
                    None => {
                        self.slots.push(Entry::default());
                        (self.slots.len() - 1) as u32
                    }
                };
                let e = &mut self.slots[slot as usize];
                e.req_type = repr.req_type;
                e.pkts = repr.req_len_in_pkts;
                e.declared_len = repr.req_len_in_bytes;
                e.received = [0; 4];
                e.count = 0;
                e.bytes.clear();
                e.ranges.clear();
                e.ranges.resize(usize::from(repr.req_len_in_pkts), (0, 0));
                self.map.insert(key, slot);
                if self.next_sweep.is_none() {
                    self.next_sweep = Some(now + self.sweep_interval());
                }
                slot
            }
        };
        let e = &mut self.slots[slot as usize];
        if e.pkts != repr.req_len_in_pkts || e.declared_len != repr.req_len_in_bytes || e.req_type != repr.req_type {
            return Accept::Dropped(DropReason::BadHeader);
        }
        let seq = repr.pkt_seq_num_in_req;
        if e.has(seq) {
            return Accept::Dropped(DropReason::DuplicatePacket);
        }
        let received_len = e.bytes.len() + payload.len();
        if received_len > e.declared_len as usize {
            self.remove(key);
            return Accept::Dropped(DropReason::BadLength);
        }
        if self.buffered + payload.len() > self.max_bytes {
            return Accept::Dropped(DropReason::BufferBudget);
        }
        let start = e.bytes.len() as u32;
        e.bytes.extend_from_slice(payload);
        e.ranges[usize::from(seq)] = (start, e.bytes.len() as u32);
        e.mark(seq);
        e.count += 1;
        e.last_seen = Some(now);
        self.buffered += payload.len();
        if e.count < e.pkts {
            return Accept::Pending;
        }
        let complete_len = e.bytes.len();
        let declared = e.declared_len as usize;
        self.map.remove(&key);
        self.free.push(slot);
        self.buffered -= complete_len;
        std::mem::swap(&mut self.delivered, &mut self.slots[slot as usize]);
        if complete_len != declared {
            return Accept::Dropped(DropReason::BadLength);
        }
        Accept::Complete(Parts::Table { bytes: &self.delivered.bytes, ranges: &self.delivered.ranges })
    }

    fn remove(&mut self, key: Key) {
        if let Some(slot) = self.map.remove(&key) {
            self.buffered -= self.slots[slot as usize].bytes.len();
            self.free.push(slot);
        }
    }

    fn sweep_interval(&self) -> Duration {
        (self.timeout / 16).max(Duration::from_micros(100))
    }

    /// Drops requests whose last packet is `timeout` old; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let timeout = self.timeout;
        let (slots, free) = (&self.slots, &mut self.free);
        let mut freed_bytes = 0;
        let before = self.map.len();
        self.map.retain(|_, slot| {
            let e = &slots[*slot as usize];
            let live = e.last_seen.is_some_and(|t| now < t + timeout);
            if !live {
                freed_bytes += e.bytes.len();
                free.push(*slot);
            }
            live
        });
        let n = before - self.map.len();
        self.buffered -= freed_bytes;
        self.expired += n as u64;
        n
    }

    /// Expires old entries when a sweep is due; returns how many expired.
    pub fn handle_timeout(&mut self, now: Instant) -> usize {
        match self.next_sweep {
            Some(t) if now >= t => {
                let n = self.expire(now);
                self.next_sweep = (!self.map.is_empty()).then(|| now + self.sweep_interval());
                n
            }
            _ => 0,
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_sweep
    }
}

impl RequestTable {
    /// The payloads of the request most recently completed by [`accept`](Self::accept).
    pub fn last_delivered(&self) -> Parts<'_> {
        Parts::Table { bytes: &self.delivered.bytes, ranges: &self.delivered.ranges }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_wire::qnp::Flags;

    fn repr(req_id: u32, pkts: u8, seq: u8, len: u32) -> Repr {
        Repr {
            app_id: 1,
            req_type: 0,
            req_id,
            req_acked_id: 0,
            req_len_in_bytes: len,
            req_len_in_pkts: pkts,
            pkt_seq_num_in_req: seq,
            flags: Flags::DATA,
            seg_cnt: 1,
        }
    }

    fn peer() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn reassembles_out_of_order_after_first() {
        let mut t = RequestTable::new(4, Duration::from_secs(1), 1 << 20);
        let now = Instant::now();
        assert!(matches!(t.accept(now, peer(), &repr(5, 3, 0, 6), b"ab"), Accept::Pending));
        assert!(matches!(t.accept(now, peer(), &repr(5, 3, 2, 6), b"ef"), Accept::Pending));
        assert!(matches!(
            t.accept(now, peer(), &repr(5, 3, 2, 6), b"ef"),
            Accept::Dropped(DropReason::DuplicatePacket)
        ));
        match t.accept(now, peer(), &repr(5, 3, 1, 6), b"cd") {
            Accept::Complete(parts) => assert_eq!(parts.iter().collect::<Vec<_>>().concat(), b"abcdef"),
            other => panic!("{other:?}"),
        }
        assert!(t.is_empty());
        assert_eq!(t.buffered_bytes(), 0);
    }

    #[test]
    fn drops_without_first_packet_and_when_full() {
        let mut t = RequestTable::new(2, Duration::from_secs(1), 1 << 20);
        let now = Instant::now();
        assert!(matches!(t.accept(now, peer(), &repr(1, 2, 1, 4), b"cd"), Accept::Dropped(DropReason::NoFirstPacket)));
        assert!(matches!(t.accept(now, peer(), &repr(1, 2, 0, 4), b"ab"), Accept::Pending));
        assert!(matches!(t.accept(now, peer(), &repr(2, 2, 0, 4), b"ab"), Accept::Pending));
        assert!(matches!(
            t.accept(now, peer(), &repr(3, 2, 0, 4), b"ab"),
            Accept::Dropped(DropReason::RequestTableFull)
        ));
        // After the timeout, a full table makes room by expiring.
        let later = now + Duration::from_secs(2);
        assert!(matches!(t.accept(later, peer(), &repr(3, 2, 0, 4), b"ab"), Accept::Pending));
        assert_eq!(t.len(), 1);
        assert_eq!(t.expired(), 2);
    }

    #[test]
    fn length_mismatch_and_header_changes_are_rejected() {
        let mut t = RequestTable::new(4, Duration::from_secs(1), 1 << 20);
        let now = Instant::now();
        assert!(matches!(t.accept(now, peer(), &repr(1, 2, 0, 3), b"ab"), Accept::Pending));
        assert!(matches!(t.accept(now, peer(), &repr(1, 3, 1, 3), b"c"), Accept::Dropped(DropReason::BadHeader)));
        assert!(matches!(t.accept(now, peer(), &repr(1, 2, 1, 3), b"cd"), Accept::Dropped(DropReason::BadLength)));
        assert!(t.is_empty());
        assert!(matches!(t.accept(now, peer(), &repr(2, 2, 0, 9), b"ab"), Accept::Pending));
        assert!(matches!(t.accept(now, peer(), &repr(2, 2, 1, 9), b"cd"), Accept::Dropped(DropReason::BadLength)));
    }

    #[test]
    fn byte_budget_bounds_buffering() {
        let mut t = RequestTable::new(100, Duration::from_secs(1), 10);
        let now = Instant::now();
        assert!(matches!(t.accept(now, peer(), &repr(1, 2, 0, 20), &[0; 8]), Accept::Pending));
        assert!(matches!(
            t.accept(now, peer(), &repr(2, 2, 0, 20), &[0; 8]),
            Accept::Dropped(DropReason::BufferBudget)
        ));
        assert_eq!(t.buffered_bytes(), 8);
    }
}
