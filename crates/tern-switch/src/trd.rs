//! TCP retransmission detection (CLIP §IV; docs/clip.md, "TCP retransmission detection"): the
//! server side, sans I/O. The switch checks a direction's data segments against a register of
//! the highest sequence number seen; a server allocates each direction of a connection its own
//! register index when its SYN (or its first packet) comes by, and releases it at its FIN or
//! RST — an index is never shared, so two connections never collide in a register, as they can
//! in hashed schemes (Blink's). A server owns the indices `i` with `i mod slices == slice`, so
//! no two servers hand out one. A direction with no free index stays on the server path: the
//! server checks its segments itself, the same way.
//!
//! Sequence numbers compare in serial arithmetic (RFC 1982, 32 bits): a segment whose end (its
//! sequence number plus its payload, plus one for a SYN or FIN) is not after the highest end
//! seen is a retransmission.

use std::collections::HashMap;

/// A direction of a TCP connection: source, destination, their ports.
pub type Direction = (u32, u32, u16, u16);

/// Whether `a` is after `b` in 32-bit serial arithmetic.
pub fn after(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b);
    d != 0 && d < 1 << 31
}

/// The server's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrdConfig {
    /// Register entries in the switch (indices 0..registers).
    pub registers: u32,
    /// This server's slice of the indices, of `slices`.
    pub slice: u16,
    pub slices: u16,
    /// Directions tracked at the server at most (with or without an index).
    pub capacity: usize,
}

impl TrdConfig {
    /// Server `index` of a group: `examples/switch/trd.toml`'s 4096 registers in 16 slices.
    pub fn for_server(index: u16) -> Result<TrdConfig, String> {
        if index >= 16 {
            return Err(format!("trd: server {index}: at most 16 servers (the registers' slices)"));
        }
        Ok(TrdConfig { registers: 4096, slice: index, slices: 16, capacity: 1 << 16 })
    }
}

/// What a segment asks of the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The direction has register `index` from now on; its highest end is `init`.
    Allocated { index: u32, init: u32 },
    /// The direction ended: register `index` is free (its count to be taken).
    Released { index: u32 },
    /// Checked here (no index, or one the switch did not apply yet): whether it was a
    /// retransmission.
    Checked { retransmission: bool },
}

/// Why a segment was not taken. Each is a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum TrdDrop {
    /// Not an IPv4 TCP segment it can read.
    #[error("not_tcp")]
    NotTcp,
    /// The server tracks as many directions as it may.
    #[error("table_full")]
    TableFull,
}

impl TrdDrop {
    pub fn name(self) -> &'static str {
        match self {
            TrdDrop::NotTcp => "not_tcp",
            TrdDrop::TableFull => "table_full",
        }
    }
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrdCounters {
    /// Directions opened, of them given an index, and those that got none (the registers of
    /// this server's slice were all taken: they stay on the server path).
    pub opened: u64,
    pub indexed: u64,
    pub no_index: u64,
    /// Indices released.
    pub released: u64,
    /// Segments checked here, and the retransmissions found among them.
    pub checked: u64,
    pub retransmissions: u64,
    pub not_tcp: u64,
    pub table_full: u64,
}

#[derive(Debug, Clone, Copy)]
struct Conn {
    index: Option<u32>,
    highest: u32,
}

/// A server's free register indices: a stack (the next handed out is the last given back,
/// lowest first at the start) from which one may also be taken by value in constant time (a
/// direction handed back with an index of this slice). Such an index stays in the stack, dead,
/// and is skipped when it comes up; given back meanwhile, it is live again where it stands.
/// So each index is in the stack at most once.
#[derive(Debug)]
struct FreeIndices {
    stack: Vec<u32>,
    live: std::collections::HashSet<u32>,
    dead: std::collections::HashSet<u32>,
}

impl FreeIndices {
    fn new(stack: Vec<u32>) -> FreeIndices {
        let live = stack.iter().copied().collect();
        FreeIndices { stack, live, dead: Default::default() }
    }

    fn len(&self) -> usize {
        self.live.len()
    }

    fn pop(&mut self) -> Option<u32> {
        while let Some(i) = self.stack.pop() {
            if self.live.remove(&i) {
                return Some(i);
            }
            self.dead.remove(&i);
        }
        None
    }

    fn push(&mut self, i: u32) {
        if self.dead.remove(&i) {
            self.live.insert(i);
        } else if self.live.insert(i) {
            self.stack.push(i);
        }
    }

    /// Takes index `i` if it is free.
    fn take(&mut self, i: u32) -> bool {
        self.live.remove(&i) && self.dead.insert(i)
    }
}

/// A server's directions and its free register indices.
#[derive(Debug)]
pub struct Trd {
    cfg: TrdConfig,
    free: FreeIndices,
    conns: HashMap<Direction, Conn>,
    /// Indices of other servers' slices held by adopted directions, and the direction each.
    foreign: std::collections::HashMap<u32, Direction>,
    /// Directions that ended here (a FIN or RST), with the end of their sequence space: a
    /// segment of one that comes again (a FIN whose acknowledgement was lost, data before it)
    /// is a retransmission, not a new direction. At most `capacity` of them, the oldest
    /// forgotten first: each with the stamp of its place in `closed_order`, the order they
    /// ended in (a direction that opens again is forgotten here; its place stays behind, stale,
    /// and is dropped in its turn).
    closed: HashMap<Direction, (u32, u64)>,
    closed_order: std::collections::VecDeque<(Direction, u64)>,
    closed_stamp: u64,
    pub counters: TrdCounters,
}

/// A TCP segment as the detector reads it: its direction, sequence number, flags and payload
/// bytes, from an IPv4 packet's first byte.
pub fn segment(ip: &[u8]) -> Option<(Direction, u32, u8, u32)> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[0] & 0xf < 5 || ip[9] != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0xf) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]])).min(ip.len());
    // A fragment after the first has no TCP header.
    if u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff != 0 || ihl + 20 > total {
        return None;
    }
    let t = &ip[ihl..total];
    let doff = (usize::from(t[12] >> 4) * 4).max(20);
    if doff > t.len() {
        return None;
    }
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let dir =
        (be32(&ip[12..16]), be32(&ip[16..20]), u16::from_be_bytes([t[0], t[1]]), u16::from_be_bytes([t[2], t[3]]));
    Some((dir, be32(&t[4..8]), t[13], (t.len() - doff) as u32))
}

const FIN: u8 = 0x01;
const SYN: u8 = 0x02;
const RST: u8 = 0x04;

impl Trd {
    pub fn new(cfg: TrdConfig) -> Result<Trd, String> {
        if cfg.slices == 0 || cfg.slice >= cfg.slices || cfg.registers == 0 {
            return Err(format!(
                "trd: slice {} of {} over {} registers: the slice must be below the slices, registers at least 1",
                cfg.slice, cfg.slices, cfg.registers
            ));
        }
        // Handed out lowest first.
        let free = FreeIndices::new(
            (0..cfg.registers).filter(|i| i % u32::from(cfg.slices) == u32::from(cfg.slice)).rev().collect(),
        );
        Ok(Trd {
            cfg,
            free,
            conns: HashMap::new(),
            foreign: Default::default(),
            closed: HashMap::new(),
            closed_order: Default::default(),
            closed_stamp: 0,
            counters: TrdCounters::default(),
        })
    }

    pub fn config(&self) -> TrdConfig {
        self.cfg
    }

    /// Directions tracked.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Free indices left.
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// A direction's register index, if it has one.
    pub fn index_of(&self, d: &Direction) -> Option<u32> {
        self.conns.get(d).and_then(|c| c.index)
    }

    /// A direction's highest end seen here, if it is tracked.
    pub fn highest_of(&self, d: &Direction) -> Option<u32> {
        self.conns.get(d).map(|c| c.highest)
    }

    /// Its directions: (direction, index, highest end).
    pub fn directions(&self) -> impl Iterator<Item = (Direction, Option<u32>, u32)> + '_ {
        self.conns.iter().map(|(d, c)| (*d, c.index, c.highest))
    }

    /// The directions adopted with another server's register: (direction, index, highest end);
    /// as many as there are, not the table.
    pub fn adopted(&self) -> impl Iterator<Item = (Direction, u32, u32)> + '_ {
        self.foreign.iter().filter_map(|(&i, d)| self.conns.get(d).map(|c| (*d, i, c.highest)))
    }

    /// Remembers that `dir` ended with `end` (the oldest forgotten beyond the capacity).
    fn remember_closed(&mut self, dir: Direction, end: u32) {
        self.closed_stamp += 1;
        self.closed.insert(dir, (end, self.closed_stamp));
        self.closed_order.push_back((dir, self.closed_stamp));
        while self.closed_order.len() > self.cfg.capacity.max(1) {
            let Some((old, stamp)) = self.closed_order.pop_front() else { break };
            if self.closed.get(&old).is_some_and(|&(_, s)| s == stamp) {
                self.closed.remove(&old);
            }
        }
    }

    /// Directions remembered as ended here (at most the capacity).
    pub fn closed(&self) -> usize {
        self.closed.len()
    }

    /// Whether `index` is of this server's slice.
    pub fn owns(&self, index: u32) -> bool {
        index < self.cfg.registers && index % u32::from(self.cfg.slices) == u32::from(self.cfg.slice)
    }

    /// A direction another server tracked (its replica): kept with its index, which stays out
    /// of this server's free indices; a direction already tracked is left as it is. Refused:
    /// beyond the capacity (`table_full`), an index outside the registers (`record_index`), or
    /// one another direction here holds (`record_index_held`: a register never serves two).
    pub fn adopt(&mut self, dir: Direction, index: Option<u32>, highest: u32) -> Result<(), &'static str> {
        if self.conns.contains_key(&dir) {
            return Ok(());
        }
        if self.conns.len() >= self.cfg.capacity {
            self.counters.table_full += 1;
            return Err(TrdDrop::TableFull.name());
        }
        if let Some(i) = index {
            if i >= self.cfg.registers {
                return Err("record_index");
            }
            if self.owns(i) {
                // Ours after all (a direction handed back while we were away): only if free.
                if !self.free.take(i) {
                    return Err("record_index_held");
                }
            } else if let std::collections::hash_map::Entry::Vacant(e) = self.foreign.entry(i) {
                e.insert(dir);
            } else {
                return Err("record_index_held");
            }
        }
        self.conns.insert(dir, Conn { index, highest });
        Ok(())
    }

    /// A direction another server stopped tracking (its replica of a close): forgotten here.
    pub fn forget(&mut self, dir: &Direction) {
        if let Some(c) = self.conns.remove(dir)
            && let Some(i) = c.index
        {
            if self.owns(i) {
                self.free.push(i);
            } else {
                self.foreign.remove(&i);
            }
        }
    }

    /// One segment the switch sent (a SYN, FIN or RST; or data of a direction the switch has
    /// no entry for): what the switch is to do.
    pub fn handle(&mut self, ip: &[u8]) -> Result<Answer, TrdDrop> {
        let Some((dir, seq, flags, payload)) = segment(ip) else {
            self.counters.not_tcp += 1;
            return Err(TrdDrop::NotTcp);
        };
        if payload == 0 && flags & (SYN | FIN | RST) == 0 {
            // A bare ACK holds no sequence space: nothing to check.
            return Ok(Answer::Checked { retransmission: false });
        }
        let end = seq.wrapping_add(payload).wrapping_add(u32::from(flags & (SYN | FIN) != 0));
        if let Some(c) = self.conns.get_mut(&dir) {
            // A SYN again for a direction that has one: a retransmitted SYN, checked like data.
            let retransmission = !after(end, c.highest);
            if !retransmission {
                c.highest = end;
            }
            self.counters.checked += 1;
            self.counters.retransmissions += u64::from(retransmission);
            if flags & (FIN | RST) != 0 {
                let c = self.conns.remove(&dir).expect("present");
                self.remember_closed(dir, c.highest);
                if let Some(index) = c.index {
                    // An index of another server's slice (a direction adopted from a failed
                    // server) goes back to no one: its slice is that server's.
                    if self.owns(index) {
                        self.free.push(index);
                    } else {
                        self.foreign.remove(&index);
                    }
                    self.counters.released += 1;
                    return Ok(Answer::Released { index });
                }
            }
            return Ok(Answer::Checked { retransmission });
        }
        if flags & SYN == 0
            && let Some(&(last, _)) = self.closed.get(&dir)
            && !after(end, last)
        {
            // A segment of a direction that ended here, within what it had sent: sent again.
            self.counters.checked += 1;
            self.counters.retransmissions += 1;
            return Ok(Answer::Checked { retransmission: true });
        }
        if flags & (FIN | RST) != 0 {
            // The end of a direction never seen: nothing to hold.
            self.counters.checked += 1;
            return Ok(Answer::Checked { retransmission: false });
        }
        // A new direction: whatever ended under its addresses and ports before is over.
        self.closed.remove(&dir);
        if self.conns.len() >= self.cfg.capacity {
            self.counters.table_full += 1;
            return Err(TrdDrop::TableFull);
        }
        // A new direction (its SYN, or a first segment seen mid-stream).
        self.counters.opened += 1;
        let index = self.free.pop();
        self.conns.insert(dir, Conn { index, highest: end });
        match index {
            Some(index) => {
                self.counters.indexed += 1;
                Ok(Answer::Allocated { index, init: end })
            }
            None => {
                self.counters.no_index += 1;
                Ok(Answer::Checked { retransmission: false })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FreeIndices;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Pop,
        Push(u32),
        Take(u32),
    }

    proptest! {
        /// The free indices against their simple twin, a vector searched for a taken index:
        /// the same indices free after any run of pops, pushes of indices not free, and takes;
        /// while nothing was taken by value, handed out in the same order.
        #[test]
        fn free_indices_agree_with_a_plain_stack(
            ops in prop::collection::vec(
                prop_oneof![Just(Op::Pop), (0u32..12).prop_map(Op::Push), (0u32..12).prop_map(Op::Take)],
                0..300,
            )
        ) {
            let start: Vec<u32> = (0..8).rev().collect();
            let (mut f, mut twin) = (FreeIndices::new(start.clone()), start);
            let mut took = false;
            for o in ops {
                match o {
                    Op::Pop => {
                        let got = f.pop();
                        if took {
                            prop_assert_eq!(got.is_some(), !twin.is_empty());
                            if let Some(i) = got {
                                let at = twin.iter().position(|&x| x == i);
                                prop_assert!(at.is_some(), "{} was not free", i);
                                twin.remove(at.unwrap_or(0));
                            }
                        } else {
                            prop_assert_eq!(got, twin.pop());
                        }
                    }
                    // Only an index not free is given back (as the detector does).
                    Op::Push(i) if !twin.contains(&i) => {
                        f.push(i);
                        twin.push(i);
                    }
                    Op::Push(_) => {}
                    Op::Take(i) => {
                        let at = twin.iter().position(|&x| x == i);
                        prop_assert_eq!(f.take(i), at.is_some());
                        if let Some(at) = at {
                            twin.remove(at);
                            took = true;
                        }
                    }
                }
                prop_assert_eq!(f.len(), twin.len());
                prop_assert!(f.stack.len() <= 2 * f.len() + 64 + 1);
            }
        }
    }
}
