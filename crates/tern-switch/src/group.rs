//! The server group and flow-consistent scaling (CLIP §III-D, Appendix B), sans I/O.
//!
//! The switch sends a flow's request packets to a server of the group by ECMP: the flow's hash
//! picks one of the group's buckets, and the bucket names a server ([`Group`]). A membership
//! change makes a new group version; flows that arrived before it must stay with the server
//! that holds their state, new flows go to the newest group. The switch's data plane keeps, as
//! the paper does ([`Selector`]):
//!
//! - two group slots and a register `cur` naming the current one (the newest group); the other
//!   slot holds the group before it;
//! - two Bloom filters: every packet that reaches the filters inserts its flow into filter
//!   `cur` (*update*) and looks it up in the other (*lookup*): found, the flow arrived before the
//!   last change and its server is in the previous group; not found, it is new and goes to the
//!   current group;
//! - a bounded table of pinned ⟨flow, server⟩ entries that packets check first.
//!
//! A change ([`Selector::change`], the controller's procedure) clears the other filter and puts
//! the new group in the other slot, then flips `cur`. Clearing the filter forgets which flows
//! arrived before the last change; so first the controller takes the servers' own lists of
//! their live flows and, for each, predicts where its next packet would go after the change; a
//! flow that would go anywhere but its server is pinned (this also catches flows a Bloom false
//! positive sent to the previous group). If the pins do not fit the table the change is refused
//! and nothing changes.
//!
//! A server left out of the new group gets no new flows (but for a false positive of the filter
//! of the group it is still in, while that group is the previous one) and drains: its flows
//! keep going to it until they end. [`Selector::serves`] says whether any slot or pin still
//! sends packets to it; once none does and its own list is empty, it can retire.

use hashbrown::HashMap;
use tern_table::bloom::Bloom;

/// A flow's id: a hash of its 5-tuple (the switch's hash unit computes it).
pub type FlowId = u64;
/// A server of the group (its index in the switch's port map).
pub type ServerId = u16;

/// Errors changing the group. A refused change leaves everything as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    /// A group needs at least one server.
    #[error("a server group needs at least one server")]
    Empty,
    /// A server named twice.
    #[error("server {0} is named twice in the group")]
    Duplicate(ServerId),
    /// The flows that would lose their server do not fit the pinned-flow table.
    #[error("{needed} flows would lose their server but the pinned-flow table holds {capacity}: wait for flows to end")]
    PinsFull { needed: usize, capacity: usize },
    /// A shape the filters or buckets cannot take.
    #[error("{0}")]
    Shape(String),
    /// A failover naming a server that is not in the group, or itself.
    #[error("server {server}: {why}")]
    Failover { server: ServerId, why: &'static str },
}

/// One version of the server group: its members and its ECMP buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Its version (a change makes the next; wraps at 16 bits, as the header's field).
    pub version: u16,
    /// Its servers, in the order their buckets were dealt.
    pub members: Vec<ServerId>,
    /// Bucket `b` names a server; a flow takes bucket `hash mod buckets`.
    buckets: Vec<ServerId>,
}

impl Group {
    /// Version `version` of `members`, their buckets dealt round robin over `buckets` buckets
    /// (at least as many buckets as members: each server gets `buckets / members` or one
    /// more).
    pub fn new(version: u16, members: &[ServerId], buckets: usize) -> Result<Group, GroupError> {
        if members.is_empty() {
            return Err(GroupError::Empty);
        }
        let mut seen = members.to_vec();
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(GroupError::Duplicate(w[0]));
        }
        let n = buckets.max(members.len());
        Ok(Group { version, members: members.to_vec(), buckets: (0..n).map(|b| members[b % members.len()]).collect() })
    }

    /// The server of `flow`'s bucket.
    #[inline]
    pub fn pick(&self, flow: FlowId) -> ServerId {
        // The bucket from the high bits (the Bloom filters and sketch take their own hashes).
        let b = ((flow >> 32) ^ (flow & 0xffff_ffff)) as usize % self.buckets.len();
        self.buckets[b]
    }

    /// Buckets.
    pub fn buckets(&self) -> &[ServerId] {
        &self.buckets
    }
}

/// How a packet found its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Its flow was pinned.
    Pinned,
    /// A new flow whose server is busy (back-pressure): pinned to another of the current group.
    Diverted,
    /// A new flow (not in the previous filter): the current group.
    Current,
    /// A flow from before the last change (or a false positive of the previous filter): the
    /// previous group.
    Previous,
}

/// The shape of a [`Selector`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectorConfig {
    /// ECMP buckets a group.
    pub buckets: usize,
    /// Each Bloom filter's ways and bits a way.
    pub filter_ways: usize,
    pub filter_width: usize,
    /// Pinned ⟨flow, server⟩ entries at most.
    pub pins: usize,
}

/// The most ECMP buckets a group may have (each group's buckets are made at once).
pub const MAX_BUCKETS: usize = 1 << 16;

impl Default for SelectorConfig {
    fn default() -> SelectorConfig {
        SelectorConfig { buckets: 256, filter_ways: 2, filter_width: 1 << 16, pins: 4096 }
    }
}

/// Counts of what the selector did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SelectorStats {
    pub pinned: u64,
    pub current: u64,
    pub previous: u64,
    /// New flows diverted from a busy server, and those that could not be (no room to pin
    /// them, or every server busy: they went to their busy server).
    pub diverted: u64,
    pub not_diverted: u64,
    pub changes: u64,
    /// Servers failed over.
    pub failovers: u64,
    /// Pins the last change put in.
    pub last_pins: usize,
}

/// The switch's server selection (§III-D): group slots, `cur`, two Bloom filters and the
/// pinned flows.
#[derive(Debug, Clone)]
pub struct Selector {
    cfg: SelectorConfig,
    cur: usize,
    groups: [Option<Group>; 2],
    filters: [Bloom; 2],
    pins: HashMap<FlowId, ServerId>,
    /// Servers that said they are near their queue limit.
    busy: Vec<ServerId>,
    /// Servers failed over, and the buddy that took their flows (a chain followed to its end).
    redirects: HashMap<ServerId, ServerId>,
    /// Servers that listed live flows at the last change (still served while in it).
    draining: Vec<ServerId>,
    stats: SelectorStats,
}

impl Selector {
    /// A selector whose first group (version 0) is `members`.
    pub fn new(cfg: SelectorConfig, members: &[ServerId]) -> Result<Selector, GroupError> {
        if !(1..=MAX_BUCKETS).contains(&cfg.buckets) {
            return Err(GroupError::Shape(format!("buckets = {}: give 1 to {MAX_BUCKETS}", cfg.buckets)));
        }
        let filter = || Bloom::new(cfg.filter_ways, cfg.filter_width).map_err(|e| GroupError::Shape(e.to_string()));
        Ok(Selector {
            cfg,
            cur: 0,
            groups: [Some(Group::new(0, members, cfg.buckets)?), None],
            filters: [filter()?, filter()?],
            pins: HashMap::new(),
            busy: Vec::new(),
            redirects: HashMap::new(),
            draining: Vec::new(),
            stats: SelectorStats::default(),
        })
    }

    /// Where a packet a program sends to server `s` itself goes (`meta.server`: SNAT's replies
    /// go to the server that owns their public address): `s`, or the buddy that took its
    /// flows if it failed; None if that server is not one the switch sends to.
    pub fn owner(&self, s: ServerId) -> Option<ServerId> {
        let t = self.redirects.get(&s).copied().unwrap_or(s);
        self.serves(t).then_some(t)
    }

    /// The server for a packet of `flow`, and how it was found (the data plane's lookup:
    /// pinned flows first; then the filters).
    pub fn select(&mut self, flow: FlowId) -> (ServerId, Path) {
        if let Some(&s) = self.pins.get(&flow) {
            self.stats.pinned += 1;
            return (s, Path::Pinned);
        }
        let (c, o) = (self.cur, 1 - self.cur);
        let seen = self.filters[c].insert(flow);
        match &self.groups[o] {
            Some(prev) if self.filters[o].contains(flow) => {
                self.stats.previous += 1;
                (prev.pick(flow), Path::Previous)
            }
            _ => {
                let s = self.current().pick(flow);
                // A flow neither filter has seen is new: it may go elsewhere than a busy
                // server, pinned there so that its later packets follow.
                if !seen && self.busy.contains(&s) {
                    match self.divert(flow, s) {
                        Some(to) => {
                            self.stats.diverted += 1;
                            return (to, Path::Diverted);
                        }
                        None => self.stats.not_diverted += 1,
                    }
                }
                self.stats.current += 1;
                (s, Path::Current)
            }
        }
    }

    /// Pins new `flow` to the first server of the current group after `busy`'s bucket that is
    /// not busy (None: every server busy, or no room to pin).
    fn divert(&mut self, flow: FlowId, busy: ServerId) -> Option<ServerId> {
        if self.pins.len() >= self.cfg.pins {
            return None;
        }
        let g = self.current();
        let n = g.buckets.len();
        let start = g.buckets.iter().position(|&s| s == busy).unwrap_or(0);
        let to = (1..n).map(|i| g.buckets[(start + i) % n]).find(|s| !self.busy.contains(s))?;
        self.pins.insert(flow, to);
        Some(to)
    }

    /// Back-pressure: `server` says it is near its queue limit (`busy`) or no longer is. While
    /// busy it gets no new flows (they are diverted and pinned); its flows keep going to it.
    pub fn set_busy(&mut self, server: ServerId, busy: bool) {
        self.busy.retain(|&s| s != server);
        if busy {
            self.busy.push(server);
        }
    }

    /// Whether `server` is marked busy.
    pub fn is_busy(&self, server: ServerId) -> bool {
        self.busy.contains(&server)
    }

    /// Fails `dead` over to `buddy` (a live server of the current group that holds replicas
    /// of `dead`'s state): every bucket of `dead` in both group slots, and every pin to it, now
    /// names `buddy`, so `dead`'s flows go on at `buddy` with the same state. The versions do
    /// not change (the groups' shapes do not). Refused, changing nothing, if `dead` is in
    /// neither slot and has no pin, if `buddy` is not in the current group, or if they are the
    /// same server.
    pub fn fail_over(&mut self, dead: ServerId, buddy: ServerId) -> Result<(), GroupError> {
        if dead == buddy {
            return Err(GroupError::Failover { server: dead, why: "cannot fail over to itself" });
        }
        if !self.serves(dead) {
            return Err(GroupError::Failover { server: dead, why: "is not a server the switch sends to" });
        }
        if !self.current().members.contains(&buddy) {
            return Err(GroupError::Failover { server: buddy, why: "is not in the current group" });
        }
        for g in self.groups.iter_mut().flatten() {
            for b in &mut g.buckets {
                if *b == dead {
                    *b = buddy;
                }
            }
            g.members.retain(|&m| m != dead);
            if !g.members.contains(&buddy) {
                g.members.push(buddy);
            }
        }
        for s in self.pins.values_mut() {
            if *s == dead {
                *s = buddy;
            }
        }
        self.busy.retain(|&s| s != dead);
        for t in self.redirects.values_mut() {
            if *t == dead {
                *t = buddy;
            }
        }
        self.redirects.insert(dead, buddy);
        self.draining.retain(|&s| s != dead);
        self.stats.failovers += 1;
        Ok(())
    }

    /// Where the next packet of `flow` would go, without changing anything (no filter
    /// update).
    pub fn predict(&self, flow: FlowId) -> ServerId {
        if let Some(&s) = self.pins.get(&flow) {
            return s;
        }
        let o = 1 - self.cur;
        match &self.groups[o] {
            Some(prev) if self.filters[o].contains(flow) => prev.pick(flow),
            _ => self.current().pick(flow),
        }
    }

    /// The controller's membership change to `members` (the next version), given the servers'
    /// lists of their live flows (`live`: each flow with the server that holds it). Pins every
    /// live flow whose next packet would otherwise go elsewhere after the change (replacing the
    /// pins of the change before: a flow pinned then and still needing it is pinned again),
    /// then clears the previous filter, puts the new group in its slot and flips `cur`. Returns
    /// the new version. Refused, with nothing changed, if the pins do not fit.
    pub fn change(&mut self, members: &[ServerId], live: &[(FlowId, ServerId)]) -> Result<u16, GroupError> {
        let version = self.current().version.wrapping_add(1);
        let group = Group::new(version, members, self.cfg.buckets)?;
        let (c, o) = (self.cur, 1 - self.cur);
        // After the change filter `o` is empty and `c` is the previous one: a flow in filter
        // `c` goes to today's current group, any other to the new one.
        let after = |f: FlowId| {
            if self.filters[c].contains(f) { self.current().pick(f) } else { group.pick(f) }
        };
        // Where each live flow is: a flow a failed-over server lists is at its buddy (which
        // gets its packets); one that two servers list (a server failed over and named again
        // lists its old flows until they idle) is at the one its packets reach now.
        let mut held: HashMap<FlowId, ServerId> = HashMap::new();
        for &(f, s) in live {
            let s = self.redirects.get(&s).copied().unwrap_or(s);
            if !held.contains_key(&f) || s == self.predict(f) {
                held.insert(f, s);
            }
        }
        let mut pins = HashMap::new();
        for (&f, &s) in &held {
            if after(f) != s {
                pins.insert(f, s);
            }
        }
        if pins.len() > self.cfg.pins {
            return Err(GroupError::PinsFull { needed: pins.len(), capacity: self.cfg.pins });
        }
        self.stats.last_pins = pins.len();
        self.pins = pins;
        // Every server that listed live flows (by the name packets reach) stays served until a
        // change finds it with none: what a program sends to it by name (SNAT's replies, to
        // the owner of their address) still reaches it.
        let mut draining: Vec<ServerId> = live.iter().map(|&(_, s)| s).collect();
        draining.sort_unstable();
        draining.dedup();
        draining.retain(|s| !self.redirects.contains_key(s));
        self.draining = draining;
        // A server failed over and named again is back: what is sent to it goes to it.
        self.redirects.retain(|dead, _| !members.contains(dead));
        self.filters[o].clear();
        self.groups[o] = Some(group);
        self.cur = o;
        self.stats.changes += 1;
        Ok(version)
    }

    /// Unpins flows that ended (a server reported them gone).
    pub fn unpin(&mut self, ended: &[FlowId]) {
        for f in ended {
            self.pins.remove(f);
        }
    }

    /// The current (newest) group.
    pub fn current(&self) -> &Group {
        self.groups[self.cur].as_ref().expect("the current slot always holds a group")
    }

    /// The previous group (None before the first change).
    pub fn previous(&self) -> Option<&Group> {
        self.groups[1 - self.cur].as_ref()
    }

    /// The `cur` register.
    pub fn cur(&self) -> usize {
        self.cur
    }

    /// Whether anything still sends packets to `server`: a group slot it is in, a pin, or the
    /// live flows it listed at the last change.
    pub fn serves(&self, server: ServerId) -> bool {
        self.groups.iter().flatten().any(|g| g.members.contains(&server))
            || self.pins.values().any(|&s| s == server)
            || self.draining.contains(&server)
    }

    /// Pinned flows.
    pub fn pins(&self) -> usize {
        self.pins.len()
    }

    /// Each filter's fill (the fraction of its bits set), by slot.
    pub fn filter_fill(&self) -> [f64; 2] {
        [self.filters[0].fill(), self.filters[1].fill()]
    }

    /// What it did so far.
    pub fn stats(&self) -> SelectorStats {
        self.stats
    }
}

/// How long a server may go unheard before it is taken for dead, by default (ns).
pub const DEFAULT_HEARTBEAT_BOUND_NS: u64 = 300_000_000;

/// The servers' heartbeats (a server failing is the paper's open point, §VI), sans I/O: each
/// server's last beat; one not heard from for longer than the bound is dead. Checked every
/// `period`, a failure is found within the bound and one period of the last beat.
#[derive(Debug, Clone)]
pub struct Heartbeats {
    bound_ns: u64,
    last: HashMap<ServerId, u64>,
}

impl Heartbeats {
    /// Heartbeats taken for dead after `bound_ns` of silence.
    pub fn new(bound_ns: u64) -> Heartbeats {
        Heartbeats { bound_ns, last: HashMap::new() }
    }

    /// `server` was heard from at `now_ns` (a heartbeat, or any response).
    pub fn beat(&mut self, server: ServerId, now_ns: u64) {
        let t = self.last.entry(server).or_insert(now_ns);
        *t = (*t).max(now_ns);
    }

    /// Stops watching `server` (it retired, or was failed over).
    pub fn forget(&mut self, server: ServerId) {
        self.last.remove(&server);
    }

    /// The servers silent for longer than the bound at `now_ns`, in order.
    pub fn dead(&self, now_ns: u64) -> Vec<ServerId> {
        let mut d: Vec<ServerId> =
            self.last.iter().filter(|&(_, &t)| now_ns.saturating_sub(t) > self.bound_ns).map(|(&s, _)| s).collect();
        d.sort_unstable();
        d
    }
}

/// The baseline the paper's design is set against: BMv2-style ECMP by `hash mod members`, with
/// no memory of where a flow went — a change of membership re-deals most flows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HashMod {
    pub members: Vec<ServerId>,
}

impl HashMod {
    /// The server of `flow`: member `hash mod n` (the same hash of the flow id as [`Group`]).
    pub fn pick(&self, flow: FlowId) -> Option<ServerId> {
        if self.members.is_empty() {
            return None;
        }
        let h = ((flow >> 32) ^ (flow & 0xffff_ffff)) as usize;
        Some(self.members[h % self.members.len()])
    }
}
