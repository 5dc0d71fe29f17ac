//! The exactly-once memory of a QNP server (docs/qnp.md §7): which requests were delivered to
//! the application, the responses sent for them, and each client's ack floor.
//!
//! It is one store per **server**, not per worker thread: every [`crate::Server`] of a
//! multi-worker service shares one [`ExactlyOnce`] (sharded by client, each shard behind its own
//! lock), so a retransmission is recognised whichever worker it reaches. That is what keeps a
//! handler from running twice when a rule reload sends a request's retransmission to another
//! worker than its original, and what makes the ack floor the same for every worker.
//!
//! Memory is bounded (`dedup_entries`, `max_cached_response_bytes`, `dedup_ttl`). An entry that
//! the bounds push out before its client's floor passes it is counted (`dedup_evicted`): a
//! retransmission of that request arriving later is taken as new, and its handler runs again.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use hashbrown::HashMap;

use crate::segment::Segmented;
use crate::{QnpConfig, id_before};

/// (client, `app_id`, `req_id`).
pub(crate) type DedupKey = (SocketAddr, u8, u32);

#[derive(Debug)]
enum DedupState {
    /// Delivered; its response has not been sent yet.
    InProgress,
    /// Answered: the response, kept to resend.
    Done(Segmented),
}

/// What the memory says of a request packet.
#[derive(Debug)]
pub(crate) enum Admit {
    /// Below its client's ack floor.
    Stale,
    /// Already delivered; for a first packet of an answered request, a copy of its response to
    /// resend.
    Duplicate(Option<Segmented>),
    /// Not delivered before.
    New,
}

#[derive(Debug, Default)]
struct Shard {
    dedup: HashMap<DedupKey, DedupState>,
    fifo: VecDeque<(DedupKey, Instant)>,
    floors: HashMap<(SocketAddr, u8), (u32, Instant)>,
    cached_bytes: usize,
}

/// What the memory says of a single-packet request ([`ExactlyOnce::admit_single`]).
#[derive(Debug)]
pub(crate) enum Single {
    /// Below its client's ack floor.
    Stale,
    /// Already delivered (with a copy of its response to resend, if answered).
    Duplicate(Option<Segmented>),
    /// New, but its own checks refused it; nothing was recorded.
    Refused(crate::DropReason),
    /// New, and now recorded as delivered; how many remembered requests the bounds pushed out
    /// before their floor (`dedup_evicted`).
    Delivered { evicted: u64 },
}

/// The exactly-once memory shared by a server's workers. See the module docs.
#[derive(Debug)]
pub struct ExactlyOnce {
    shards: Box<[Mutex<Shard>]>,
    /// Entries per shard (`dedup_entries` split evenly, at least 1).
    entries: usize,
    /// Cached response bytes per shard.
    bytes: usize,
    ttl: Duration,
    window: u32,
}

impl ExactlyOnce {
    /// A memory with `shards` locks (1 for a single-threaded server; a few per worker thread for
    /// a shared one), bounded by `cfg`'s `dedup_entries`, `max_cached_response_bytes` and
    /// `dedup_ttl` in total.
    pub fn new(cfg: &QnpConfig, shards: usize) -> ExactlyOnce {
        let n = shards.clamp(1, 1024);
        ExactlyOnce {
            shards: (0..n).map(|_| Mutex::new(Shard::default())).collect(),
            entries: (cfg.dedup_entries / n).max(1),
            bytes: cfg.max_cached_response_bytes / n,
            ttl: cfg.dedup_ttl,
            window: cfg.max_outstanding as u32,
        }
    }

    /// Requests remembered now.
    pub fn remembered(&self) -> usize {
        self.shards.iter().map(|s| lock(s).fifo.len()).sum()
    }

    fn shard(&self, peer: &SocketAddr, app: u8) -> MutexGuard<'_, Shard> {
        let h = tern_io::addr_hash(peer) ^ u64::from(app).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        lock(&self.shards[(h >> 32) as usize % self.shards.len()])
    }

    /// Takes a request packet's ids: moves its client's floor, and says whether the request is
    /// stale, a duplicate, or new. A duplicate first packet of an answered request gets a copy
    /// of the response, written into a buffer from `spare`.
    pub(crate) fn admit(
        &self,
        now: Instant,
        key: DedupKey,
        acked: u32,
        first_packet: bool,
        spare: &mut Vec<Segmented>,
    ) -> Admit {
        let mut s = self.shard(&key.0, key.1);
        self.admit_locked(&mut s, now, key, acked, first_packet, spare)
    }

    /// [`admit`](Self::admit), then, for a request this one packet completes, `check` (the
    /// packet's own checks, which drop it with a reason) and [`begin`](Self::begin), under one
    /// lock: a single-packet request takes its client's shard once on the way in, not twice (on
    /// a multi-worker server that shard's cache line moves between the workers' cores).
    pub(crate) fn admit_single(
        &self,
        now: Instant,
        key: DedupKey,
        acked: u32,
        first_packet: bool,
        spare: &mut Vec<Segmented>,
        check: impl FnOnce() -> Result<(), crate::DropReason>,
    ) -> Single {
        let mut s = self.shard(&key.0, key.1);
        match self.admit_locked(&mut s, now, key, acked, first_packet, spare) {
            Admit::Stale => Single::Stale,
            Admit::Duplicate(resend) => Single::Duplicate(resend),
            Admit::New => match check() {
                Err(reason) => Single::Refused(reason),
                // Not remembered a moment ago, under the same lock: this is its first delivery.
                Ok(()) => Single::Delivered { evicted: self.begin_locked(&mut s, now, key, spare).1 },
            },
        }
    }

    fn admit_locked(
        &self,
        s: &mut Shard,
        now: Instant,
        key: DedupKey,
        acked: u32,
        first_packet: bool,
        spare: &mut Vec<Segmented>,
    ) -> Admit {
        let (peer, app, req_id) = key;
        let floor = match s.floors.get_mut(&(peer, app)) {
            Some(f) => {
                // A floor can only move forward. One that lies more than a client's whole window
                // before the known floor is not a late packet of that client but a new client
                // on the same address (a restart, or a reused ephemeral port, with fresh random
                // ids): start over from its floor, or it would be refused forever.
                if id_before(f.0, acked) || f.0.wrapping_sub(acked) > self.window {
                    f.0 = acked;
                }
                f.1 = now;
                f.0
            }
            None => {
                s.floors.insert((peer, app), (acked, now));
                acked
            }
        };
        if id_before(req_id, floor) {
            return Admit::Stale;
        }
        match s.dedup.get(&key) {
            None => Admit::New,
            Some(DedupState::Done(seg)) if first_packet => {
                let mut copy = spare.pop().unwrap_or_default();
                copy.clone_from(seg);
                Admit::Duplicate(Some(copy))
            }
            Some(_) => Admit::Duplicate(None),
        }
    }

    /// Records that a request is being delivered. Returns `false` if another worker sharing this
    /// memory recorded it first (the caller must not deliver it), and how many remembered
    /// requests the bounds pushed out before their floor (`dedup_evicted`).
    pub(crate) fn begin(&self, now: Instant, key: DedupKey, spare: &mut Vec<Segmented>) -> (bool, u64) {
        let mut s = self.shard(&key.0, key.1);
        self.begin_locked(&mut s, now, key, spare)
    }

    fn begin_locked(&self, s: &mut Shard, now: Instant, key: DedupKey, spare: &mut Vec<Segmented>) -> (bool, u64) {
        let first = match s.dedup.entry(key) {
            hashbrown::hash_map::Entry::Occupied(_) => false,
            hashbrown::hash_map::Entry::Vacant(v) => {
                v.insert(DedupState::InProgress);
                true
            }
        };
        if first {
            s.fifo.push_back((key, now));
        }
        (first, self.evict(s, now, spare))
    }

    /// Keeps a sent response to resend for duplicates. A request forgotten meanwhile gets its
    /// buffer back into `spare`. Returns the `dedup_evicted` count, as [`begin`](Self::begin).
    pub(crate) fn complete(&self, now: Instant, key: DedupKey, seg: Segmented, spare: &mut Vec<Segmented>) -> u64 {
        let mut s = self.shard(&key.0, key.1);
        let size = seg.bytes.capacity();
        match s.dedup.get_mut(&key) {
            Some(state) => {
                let old = std::mem::replace(state, DedupState::Done(seg));
                s.cached_bytes += size;
                if let DedupState::Done(old) = old {
                    s.cached_bytes -= old.bytes.capacity();
                    recycle(spare, old);
                }
            }
            None => recycle(spare, seg),
        }
        self.evict(&mut s, now, spare)
    }

    /// Forgets floors not heard from for a TTL and requests past their floor or TTL. Returns the
    /// `dedup_evicted` count, as [`begin`](Self::begin), and whether anything (a request or a
    /// floor) is still remembered.
    ///
    /// No count of what is remembered is kept outside the shards: one shared counter, touched by
    /// every worker on every request, cost more than the rest of this memory together (its cache
    /// line moved between cores each time). A server asks here instead, once a sweep.
    pub(crate) fn sweep(&self, now: Instant, spare: &mut Vec<Segmented>) -> (u64, bool) {
        let mut evicted = 0;
        let mut remembering = false;
        for shard in self.shards.iter() {
            let mut s = lock(shard);
            let ttl = self.ttl;
            s.floors.retain(|_, (_, seen)| now < *seen + ttl);
            if s.floors.len() > self.entries {
                s.floors.clear();
            }
            evicted += self.evict(&mut s, now, spare);
            remembering |= !s.floors.is_empty() || !s.fifo.is_empty();
        }
        (evicted, remembering)
    }

    fn evict(&self, s: &mut Shard, now: Instant, spare: &mut Vec<Segmented>) -> u64 {
        let mut evicted = 0;
        while let Some(&(key, since)) = s.fifo.front() {
            let below_floor = s.floors.get(&(key.0, key.1)).is_some_and(|f| id_before(key.2, f.0));
            let old = now >= since + self.ttl;
            let over = s.fifo.len() > self.entries || s.cached_bytes > self.bytes;
            if !(below_floor || over || old) {
                break;
            }
            if !(below_floor || old) {
                evicted += 1;
            }
            s.fifo.pop_front();
            if let Some(DedupState::Done(seg)) = s.dedup.remove(&key) {
                s.cached_bytes -= seg.bytes.capacity();
                recycle(spare, seg);
            }
        }
        evicted
    }
}

fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    // A worker that panicked while holding a shard left it consistent (every update is a few
    // plain writes); keep serving.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Returns a buffer to the spare list (at most 256 kept).
pub(crate) fn recycle(spare: &mut Vec<Segmented>, mut seg: Segmented) {
    if spare.len() < 256 {
        seg.clear();
        spare.push(seg);
    }
}
