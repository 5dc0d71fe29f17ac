//! The KV cache task (docs/chain.md, "KV cache"): it sits between clients and a key-value
//! server, answers GETs it holds the value of in the NIC, and passes everything else on.
//!
//! Messages are UDP payloads (the header below, then the key, then the value). A GET that
//! misses goes on to the server; the server's VALUE answer, on its way back, is kept — unless a
//! SET of that key has passed since the GET did, so a value the SET replaced is never kept. A
//! SET removes the key before it goes on: after a SET has passed, no GET is answered with what
//! it replaced. What is kept is bounded per tenant (bytes and entries), the least recently used
//! going first.
//!
//! Every message goes some [`Way`]: the side it came in on and its UDP source and destination.
//! Values are kept by server (the GET's destination) and key, and an answer is kept only if it
//! came back the way its GET went — from the other side, from the server the GET went to, to
//! the client that sent it — so a client cannot put a value of its own in the cache.
//!
//! ```
//! use tern_chain::kv::{Cache, KvConfig, Msg, Op, Verdict, Way};
//! let mut kv = Cache::new(KvConfig::default());
//! let get = Msg { op: Op::Get, id: 1, key: b"k", value: b"" }.to_vec();
//! let value = Msg { op: Op::Value, id: 1, key: b"k", value: b"v" }.to_vec();
//! let mut answer = Vec::new();
//! let to_server = Way { side: 0, src: ([10, 0, 0, 5], 4000), dst: ([10, 0, 0, 9], 11211) };
//! assert_eq!(kv.request(&get, to_server, &mut answer), Verdict::Forward); // a miss: on to the server
//! kv.response(&value, to_server.back());                              // its answer is kept
//! assert_eq!(kv.request(&get, to_server, &mut answer), Verdict::Answer);  // a hit
//! assert_eq!(Msg::parse(&answer).unwrap().value, b"v");
//! // A VALUE a client sends, from its own side, is not kept.
//! let forged = Msg { op: Op::Value, id: 2, key: b"x", value: b"mine" }.to_vec();
//! kv.request(&Msg { op: Op::Get, id: 2, key: b"x", value: b"" }.to_vec(), to_server, &mut answer);
//! kv.response(&forged, Way { side: 0, ..to_server.back() });
//! assert_eq!(kv.get_at(to_server.dst, b"x"), None);
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};

/// The header's length.
pub const HEADER_LEN: usize = 8;
/// The longest key.
pub const MAX_KEY: usize = 250;
/// The longest value.
pub const MAX_VALUE: usize = 8192;

/// A message's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Client → server: the key's value, please.
    Get = 1,
    /// Client → server: store this value under the key.
    Set = 2,
    /// Server → client: the key's value.
    Value = 3,
    /// Server → client: no such key.
    NotFound = 4,
    /// Server → client: stored.
    Stored = 5,
}

/// A message: the operation, the request id (echoed in the answer), the key and the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg<'a> {
    /// What it is.
    pub op: Op,
    /// The client's id for the request.
    pub id: u32,
    /// The key (1 to [`MAX_KEY`] bytes).
    pub key: &'a [u8],
    /// The value (SET and VALUE; empty otherwise; at most [`MAX_VALUE`] bytes).
    pub value: &'a [u8],
}

/// Bytes that are not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MsgError {
    /// Shorter than the header, or than the lengths it gives.
    #[error("{0} bytes: shorter than the header and the lengths it gives")]
    Short(usize),
    /// An operation not listed.
    #[error("operation {0}: not one of 1 to 5")]
    Op(u8),
    /// A key of 0 or more than [`MAX_KEY`] bytes, a value over [`MAX_VALUE`], a value on a
    /// message that has none, or bytes after the value.
    #[error("key of {key} bytes, value of {value}, {total} in all: not a message's lengths")]
    Lengths {
        /// The key's length field.
        key: usize,
        /// The value's length field.
        value: usize,
        /// The message's bytes.
        total: usize,
    },
}

impl<'a> Msg<'a> {
    /// The message in `b`. Never panics.
    pub fn parse(b: &'a [u8]) -> Result<Msg<'a>, MsgError> {
        let Some((h, rest)) = b.split_first_chunk::<HEADER_LEN>() else { return Err(MsgError::Short(b.len())) };
        let op = match h[0] {
            1 => Op::Get,
            2 => Op::Set,
            3 => Op::Value,
            4 => Op::NotFound,
            5 => Op::Stored,
            o => return Err(MsgError::Op(o)),
        };
        let (klen, vlen) = (usize::from(h[1]), usize::from(u16::from_be_bytes([h[2], h[3]])));
        let id = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        let lengths = MsgError::Lengths { key: klen, value: vlen, total: b.len() };
        if rest.len() < klen + vlen {
            return Err(MsgError::Short(b.len()));
        }
        let carries_value = matches!(op, Op::Set | Op::Value);
        if klen == 0 || klen > MAX_KEY || vlen > MAX_VALUE || (!carries_value && vlen > 0) || rest.len() != klen + vlen
        {
            return Err(lengths);
        }
        Ok(Msg { op, id, key: &rest[..klen], value: &rest[klen..] })
    }

    /// Appends the message's bytes to `out`. A key or value over the limits is cut to them.
    pub fn write(&self, out: &mut Vec<u8>) {
        let (key, value) = (&self.key[..self.key.len().min(MAX_KEY)], &self.value[..self.value.len().min(MAX_VALUE)]);
        out.push(self.op as u8);
        out.push(key.len() as u8);
        out.extend_from_slice(&(value.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(key);
        out.extend_from_slice(value);
    }

    /// The message's bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER_LEN + self.key.len() + self.value.len());
        self.write(&mut v);
        v
    }
}

/// A UDP endpoint: IPv4 address and port.
pub type Endpoint = ([u8; 4], u16);

/// Which way a message went: the side (port) it came in on, its UDP source and destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Way {
    pub side: u8,
    pub src: Endpoint,
    pub dst: Endpoint,
}

impl Way {
    /// The way [`Cache::on_request`] takes a message: side 0, 10.0.0.1:1 to 10.0.0.2:2 (one
    /// client and one server, for tests).
    pub const CLIENT: Way = Way { side: 0, src: ([10, 0, 0, 1], 1), dst: ([10, 0, 0, 2], 2) };

    /// The way back: from the other side (1 from 0, else 0), source and destination swapped.
    pub fn back(self) -> Way {
        Way { side: u8::from(self.side == 0), src: self.dst, dst: self.src }
    }
}

/// A key as the cache keeps it: its server's address and port (6 bytes), then the key.
fn slot(server: Endpoint, key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&server.0);
    out.extend_from_slice(&server.1.to_be_bytes());
    out.extend_from_slice(key);
}

/// What to do with a client's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// On to the server.
    Forward,
    /// Answered here (a GET that hit): the answer goes back to the client.
    Answer,
    /// Dropped: not a message (counted `malformed`).
    Drop,
}

/// Settings: what one tenant's cache holds at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvConfig {
    /// Bytes of keys and values. Default 1 MiB.
    pub max_bytes: usize,
    /// Entries. Default 16384.
    pub max_entries: usize,
    /// GETs forwarded and not yet answered that are remembered (so their answers may be kept);
    /// the oldest is forgotten beyond. Default 4096.
    pub max_pending: usize,
    /// Of those, the most one client address may have remembered (its ports together), so that
    /// one client's misses cannot push every other client's out: a GET beyond makes the
    /// client's own oldest forgotten (its answer then not kept), so a client whose GETs are lost
    /// on the way still has its newest remembered. Default 1024.
    pub max_pending_per_client: usize,
}

impl Default for KvConfig {
    fn default() -> Self {
        KvConfig { max_bytes: 1 << 20, max_entries: 16_384, max_pending: 4096, max_pending_per_client: 1024 }
    }
}

/// What the cache counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvStats {
    /// GETs answered here, and forwarded.
    pub hits: u64,
    pub misses: u64,
    /// SETs that passed (each removing its key).
    pub sets: u64,
    /// Values kept, and VALUE answers not kept because a SET of the key passed after their GET.
    pub kept: u64,
    pub not_kept_after_set: u64,
    /// Entries pushed out to stay within the bounds.
    pub evicted: u64,
    /// Answers to a GET remembered that did not come back the way it went (from its side, from
    /// another address, to another client): not kept, the GET still waiting for its answer.
    pub not_kept_wrong_way: u64,
    /// Remembered GETs forgotten, their answers then not kept, to make room for a newer GET of
    /// the same client address, which held its share ([`KvConfig::max_pending_per_client`]).
    pub client_share_full: u64,
    /// Messages that did not parse.
    pub malformed: u64,
}

#[derive(Debug)]
struct Entry {
    value: Vec<u8>,
    /// Its place in the recency order.
    tick: u64,
}

/// A GET forwarded: its key (server and key), the sequence number when it passed, the side it
/// came in on.
#[derive(Debug)]
struct Pending {
    key: Vec<u8>,
    at: u64,
    side: u8,
}

/// The GETs one client address has remembered: how many, and in the order they came (with
/// entries no longer remembered skipped, and swept out when they outnumber the live ones), so
/// that a client at its share forgets its own oldest.
#[derive(Debug, Default)]
struct Held {
    live: usize,
    order: VecDeque<Forwarded>,
}

/// A GET forwarded: its (client, request id) and the sequence number when it passed.
type Forwarded = ((Endpoint, u32), u64);

/// Whether the GET `id` forwarded at `at` is still remembered (not answered, forgotten or
/// replaced by a later GET of the same client and id).
fn remembered(pending: &HashMap<(Endpoint, u32), Pending>, id: &(Endpoint, u32), at: u64) -> bool {
    pending.get(id).is_some_and(|p| p.at == at)
}

/// Drops an order's entries no longer remembered once they outnumber the `live` ones (so an
/// order stays within twice its GETs remembered, each entry swept once).
fn sweep(order: &mut VecDeque<Forwarded>, live: usize, pending: &HashMap<(Endpoint, u32), Pending>) {
    if order.len() > 2 * live + 16 {
        order.retain(|(id, at)| remembered(pending, id, *at));
    }
}

/// One tenant's cache.
#[derive(Debug)]
pub struct Cache {
    cfg: KvConfig,
    entries: HashMap<Vec<u8>, Entry>,
    /// Recency: tick → key (the smallest tick is the least recently used).
    lru: BTreeMap<u64, Vec<u8>>,
    bytes: usize,
    tick: u64,
    /// The sequence number of the last SET of each key (server and key) that passed (while it
    /// may matter).
    last_set: HashMap<Vec<u8>, u64>,
    /// GETs forwarded: (client, request id) → what it asked.
    pending: HashMap<(Endpoint, u32), Pending>,
    /// The same, oldest first, as ((client, request id), sequence number); entries no longer in
    /// `pending` (answered, or replaced by a later GET of the same client and id) are skipped,
    /// and swept out when they outnumber the live ones.
    pending_order: VecDeque<Forwarded>,
    /// GETs remembered by each client address (a client remembering none takes no room).
    clients: HashMap<[u8; 4], Held>,
    /// A key being looked up (server and key), reused.
    scratch: Vec<u8>,
    seq: u64,
    /// GETs forwarded before this sequence number are not kept (set when `last_set` had to be
    /// forgotten to stay bounded: as if every key had been SET then).
    floor: u64,
    /// Times the SETs remembered were swept (each a pass over them and the pending GETs).
    sweeps: u64,
    stats: KvStats,
}

impl Cache {
    /// Exchanges everything it holds (entries, forwarded GETs, SETs remembered; bounds and
    /// counters aside) with `other`'s (another generation of it); then each side keeps within
    /// its own bounds, its least recently used entries and oldest forwarded GETs going first
    /// (counted `evicted`; a GET forgotten has its answer not kept). A cache's entries are
    /// what the server held, so any subset of them is still never stale.
    pub fn swap_entries(&mut self, other: &mut Cache) -> bool {
        let kept = ((self.cfg, self.stats), (other.cfg, other.stats));
        std::mem::swap(self, other);
        ((self.cfg, self.stats), (other.cfg, other.stats)) = kept;
        self.trim();
        other.trim();
        true
    }

    /// Evicts down to the bounds: entries least recently used first, forwarded GETs oldest first.
    fn trim(&mut self) {
        while self.bytes > self.cfg.max_bytes || self.entries.len() > self.cfg.max_entries {
            let Some((_, oldest)) = self.lru.pop_first() else { break };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= oldest.len() + e.value.len();
                self.stats.evicted += 1;
            }
        }
        self.forget_past_pending_bound();
    }

    /// Forgets the oldest forwarded GETs past `max_pending`.
    fn forget_past_pending_bound(&mut self) {
        while self.pending.len() > self.cfg.max_pending {
            let Some((id, at)) = self.pending_order.pop_front() else { break };
            if remembered(&self.pending, &id, at) {
                self.pending.remove(&id);
                self.give_back(id.0.0);
            }
        }
        self.sweep_order();
    }

    /// An empty cache bounded by `cfg`.
    pub fn new(cfg: KvConfig) -> Cache {
        Cache {
            cfg,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            bytes: 0,
            tick: 0,
            last_set: HashMap::new(),
            pending: HashMap::new(),
            pending_order: VecDeque::new(),
            clients: HashMap::new(),
            scratch: Vec::new(),
            seq: 0,
            floor: 0,
            sweeps: 0,
            stats: KvStats::default(),
        }
    }

    /// [`Cache::request`] by [`Way::CLIENT`], when the caller needs no answer bytes (a hit is
    /// still counted and reported).
    pub fn on_request(&mut self, payload: &[u8]) -> Verdict {
        let mut sink = Vec::new();
        self.request(payload, Way::CLIENT, &mut sink)
    }

    /// [`Cache::request`] by [`Way::CLIENT`].
    pub fn on_request_answer(&mut self, payload: &[u8], answer: &mut Vec<u8>) -> Verdict {
        self.request(payload, Way::CLIENT, answer)
    }

    /// [`Cache::response`] by [`Way::CLIENT`]'s way back.
    pub fn on_response(&mut self, payload: &[u8]) {
        self.response(payload, Way::CLIENT.back());
    }

    /// A client's message, going `way`: a GET whose key its destination (the server) gave a
    /// value for that is kept is answered into `answer` (a VALUE message with the GET's id); a
    /// GET that misses is forwarded and remembered; a SET removes its key (at that server) and
    /// is forwarded; anything else is forwarded as it is, or dropped if it does not parse.
    pub fn request(&mut self, payload: &[u8], way: Way, answer: &mut Vec<u8>) -> Verdict {
        let Ok(m) = Msg::parse(payload) else {
            self.stats.malformed += 1;
            return Verdict::Drop;
        };
        slot(way.dst, m.key, &mut self.scratch);
        match m.op {
            Op::Get => {
                self.tick += 1;
                if let Some(e) = self.entries.get_mut(self.scratch.as_slice()) {
                    self.lru.remove(&e.tick);
                    e.tick = self.tick;
                    self.lru.insert(self.tick, self.scratch.clone());
                    answer.clear();
                    Msg { op: Op::Value, id: m.id, key: m.key, value: &e.value }.write(answer);
                    self.stats.hits += 1;
                    return Verdict::Answer;
                }
                self.stats.misses += 1;
                self.seq += 1;
                let id = (way.src, m.id);
                let pending = Pending { key: self.scratch.clone(), at: self.seq, side: way.side };
                let held = self.clients.entry(way.src.0).or_default();
                if let Some(p) = self.pending.get_mut(&id) {
                    // The client's id again: this GET replaces the one it named before.
                    *p = pending;
                } else {
                    // At its share (or past it, with a generation's smaller share): the
                    // client's own oldest remembered GETs are forgotten (their answers then not
                    // kept), no other client's.
                    while held.live >= self.cfg.max_pending_per_client {
                        let Some((old, at)) = held.order.pop_front() else { break };
                        if remembered(&self.pending, &old, at) {
                            self.pending.remove(&old);
                            held.live -= 1;
                            self.stats.client_share_full += 1;
                        }
                    }
                    self.pending.insert(id, pending);
                    held.live += 1;
                }
                held.order.push_back((id, self.seq));
                sweep(&mut held.order, held.live, &self.pending);
                self.pending_order.push_back((id, self.seq));
                self.forget_past_pending_bound();
                Verdict::Forward
            }
            Op::Set => {
                self.seq += 1;
                let key = std::mem::take(&mut self.scratch);
                self.remove(&key);
                // Remembered while a GET forwarded before it may still be answered; bounded: past
                // twice the pending GETs, what no pending GET predates is forgotten, and if more
                // than half the bound is left, all of it, with every pending GET's answer then
                // left unkept. So a sweep (a pass over these and the pending GETs) comes at most
                // once in half the bound's SETs, whatever order a client sends GETs and SETs in.
                if !self.pending.is_empty() {
                    self.last_set.insert(key.clone(), self.seq);
                    let bound = 2 * self.cfg.max_pending.max(1);
                    if self.last_set.len() > bound {
                        let oldest = self.pending.values().map(|p| p.at).min().unwrap_or(self.seq);
                        self.last_set.retain(|_, s| *s > oldest);
                        self.sweeps += 1;
                        if self.last_set.len() > bound / 2 {
                            self.last_set.clear();
                            self.floor = self.seq;
                        }
                    }
                }
                self.scratch = key;
                self.stats.sets += 1;
                Verdict::Forward
            }
            _ => Verdict::Forward,
        }
    }

    /// A server's answer on its way back to the client, going `way`: a VALUE for a GET this
    /// cache forwarded is kept if it came back the way the GET went (from the other side, from
    /// the GET's destination, to its source: else counted `not_kept_wrong_way`, the GET still
    /// remembered), unless a SET of the key passed after the GET did.
    pub fn response(&mut self, payload: &[u8], way: Way) {
        let Ok(m) = Msg::parse(payload) else {
            self.stats.malformed += 1;
            return;
        };
        if m.op != Op::Value {
            return;
        }
        let id = (way.dst, m.id);
        let Some(p) = self.pending.get(&id) else { return };
        slot(way.src, m.key, &mut self.scratch);
        // The GET's key starts with its server: an answer from elsewhere, or about another
        // key, does not match; nor one from the GET's own side.
        if way.side == p.side || p.key.get(..6) != self.scratch.get(..6) {
            self.stats.not_kept_wrong_way += 1;
            return;
        }
        let Some(Pending { key, at, .. }) = self.pending.remove(&id) else { return };
        self.give_back(id.0.0);
        self.sweep_order();
        let replaced = at < self.floor || self.last_set.get(&key).is_some_and(|&s| s > at);
        // With no GET left to answer, no SET can matter any more.
        if self.pending.is_empty() {
            self.last_set.clear();
        }
        if key != self.scratch {
            return;
        }
        if replaced {
            self.stats.not_kept_after_set += 1;
            return;
        }
        let size = key.len() + m.value.len();
        if size > self.cfg.max_bytes || self.cfg.max_entries == 0 {
            return;
        }
        self.remove(&key);
        while self.bytes + size > self.cfg.max_bytes || self.entries.len() >= self.cfg.max_entries {
            let Some((_, oldest)) = self.lru.pop_first() else { break };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= oldest.len() + e.value.len();
                self.stats.evicted += 1;
            }
        }
        self.tick += 1;
        self.lru.insert(self.tick, key.clone());
        self.entries.insert(key, Entry { value: m.value.to_vec(), tick: self.tick });
        self.bytes += size;
        self.stats.kept += 1;
    }

    /// One of `client`'s remembered GETs is no longer remembered (a client down to none is
    /// forgotten, its order with it).
    fn give_back(&mut self, client: [u8; 4]) {
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.clients.entry(client) {
            e.get_mut().live = e.get().live.saturating_sub(1);
            if e.get().live == 0 {
                e.remove();
            }
        }
    }

    fn sweep_order(&mut self) {
        sweep(&mut self.pending_order, self.pending.len(), &self.pending);
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(e) = self.entries.remove(key) {
            self.lru.remove(&e.tick);
            self.bytes -= key.len() + e.value.len();
        }
    }

    /// The value kept for `key` at [`Way::CLIENT`]'s server.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.get_at(Way::CLIENT.dst, key)
    }

    /// The value kept for `key` at `server`.
    pub fn get_at(&self, server: Endpoint, key: &[u8]) -> Option<&[u8]> {
        let mut k = Vec::with_capacity(6 + key.len());
        slot(server, key, &mut k);
        self.entries.get(&k).map(|e| e.value.as_slice())
    }

    /// Entries and bytes kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Nothing kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of keys (each with its server's 6 bytes) and values kept.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Its counters.
    pub fn stats(&self) -> KvStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(op: Op, id: u32, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        Msg { op, id, key, value: b"" }.write(&mut out);
        out
    }

    /// A client sending SETs and GETs in any proportion (answers never coming back) makes the
    /// remembered SETs be swept at most once in half their bound's SETs: a sweep costs a pass
    /// over up to three times `max_pending` entries, so a SET costs O(1) amortized. (Before the
    /// half-bound rule, a SET-to-GET ratio just under 2 swept every second SET.)
    #[test]
    fn sweeps_of_the_sets_remembered_are_amortized() {
        for sets_per_get in [1.0, 1.5, 1.9, 1.97, 2.0, 3.0, 10.0] {
            let cfg = KvConfig { max_pending: 64, ..KvConfig::default() };
            let mut c = Cache::new(cfg);
            let (mut sets, mut owed) = (0u64, 0.0);
            for i in 0..20_000u32 {
                assert_eq!(c.on_request(&msg(Op::Get, i, format!("g{i}").as_bytes())), Verdict::Forward);
                owed += sets_per_get;
                while owed >= 1.0 {
                    owed -= 1.0;
                    sets += 1;
                    c.on_request(&msg(Op::Set, 0, format!("s{sets}").as_bytes()));
                }
                assert!(c.last_set.len() <= 2 * cfg.max_pending, "the bound");
            }
            let half = cfg.max_pending as u64;
            assert!(c.sweeps <= sets / half + 1, "{sets_per_get} SETs a GET: {} sweeps in {sets} SETs", c.sweeps);
        }
    }
}
