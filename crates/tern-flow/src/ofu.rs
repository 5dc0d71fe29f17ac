//! Offloaded function units (OFUs) and their configuration logic (AccelSDP §4.3.1 "Configuration
//! Logic", §5.1 Table 2, Figures 14–15).
//!
//! Two halves, as in the paper's driver and FPGA:
//!
//! - [`OfuDriver`] is the host side: the paper's API, [`OfuDriver::ofu_init`],
//!   [`OfuDriver::rule_table_ops`] and [`OfuDriver::ofu_uninit`]. `rule_table_ops` checks what
//!   a driver can check (the OFU exists and is enabled, the instruction fits its table, the index
//!   is in range, the action set fits the action RAM) and writes the instruction into the OFU's
//!   instruction FIFO. A full FIFO refuses the write ([`OfuError::FifoFull`]), as the hardware
//!   does; the caller retries once instructions have drained. The driver is `Clone + Send`: the
//!   slow path owns one on its own thread.
//! - [`OfuTables`] is the device side: the match tables (IPv4 / IPv6 LPM for an LPM OFU, the
//!   IPv4 / IPv6 5-tuple BCAM for an EM OFU), the action RAM, and the configuration FSM
//!   ([`FsmState`]: Reset, Idle, Write, Delete, Update). The data path calls
//!   [`OfuTables::run_fsm`] between packet batches; each instruction is applied whole before the
//!   next batch, and a populate writes the action RAM before the match entry, so no packet ever
//!   sees half a rule.
//!
//! Instructions name a rule by its *entry index* (the TCAM / BCAM address): the software decides
//! where rules go, as in the paper, and deletes and updates by index.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;
use ipnet::{Ipv4Net, Ipv6Net};
use serde::{Deserialize, Serialize};
use tern_table::em::{ExactMatch, FiveTuple, FiveTuple4, FiveTuple6, PackedTuple4};
use tern_table::lpm::{Lpm4, Lpm6};
use tern_wire::frame::L3;

use crate::action::ActionSet;

/// An OFU's id (the paper's `uint16_t ofu_id`).
pub type OfuId = u16;

/// Entry indexes an OFU addresses when the profile does not bound its tables (22 bits: the
/// LPM entry's value field).
pub const UNBOUNDED_INDEXES: u32 = tern_table::lpm::MAX_VALUE + 1;

/// Which rule table an OFU holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OfuKind {
    /// LPM on the destination address (§4.3.1): IPv4 and IPv6 TCAMs.
    Lpm,
    /// Exact match on the 5-tuple (§4.3.2): a BCAM.
    Em,
}

impl OfuKind {
    /// Name in configuration and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            OfuKind::Lpm => "lpm",
            OfuKind::Em => "em",
        }
    }
}

/// A rule's match field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Match {
    /// IPv4 destination prefix.
    Ipv4Dst(Ipv4Net),
    /// IPv6 destination prefix.
    Ipv6Dst(Ipv6Net),
    /// IPv4 5-tuple.
    Tuple4(FiveTuple4),
    /// IPv6 5-tuple.
    Tuple6(FiveTuple6),
}

impl Match {
    /// The OFU kind whose table holds it.
    pub fn kind(&self) -> OfuKind {
        match self {
            Match::Ipv4Dst(_) | Match::Ipv6Dst(_) => OfuKind::Lpm,
            Match::Tuple4(_) | Match::Tuple6(_) => OfuKind::Em,
        }
    }

    /// The IP version it matches.
    pub fn l3(&self) -> L3 {
        match self {
            Match::Ipv4Dst(_) | Match::Tuple4(_) => L3::Ipv4,
            Match::Ipv6Dst(_) | Match::Tuple6(_) => L3::Ipv6,
        }
    }

    /// The LPM priority: the prefix length (0 for exact matches).
    pub fn prefix_len(&self) -> u32 {
        match self {
            Match::Ipv4Dst(n) => u32::from(n.prefix_len()),
            Match::Ipv6Dst(n) => u32::from(n.prefix_len()),
            _ => 0,
        }
    }

    /// Bits the match field takes in an instruction: value and mask for a TCAM, the key for
    /// the BCAM (whose key is as wide as the IPv6 5-tuple, 296 bits).
    pub fn instruction_bits(&self) -> u32 {
        match self {
            Match::Ipv4Dst(_) => 2 * 32,
            Match::Ipv6Dst(_) => 2 * 128,
            Match::Tuple4(_) | Match::Tuple6(_) => 128 + 128 + 8 + 16 + 16,
        }
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Ipv4Dst(n) => write!(f, "ip,nw_dst={n}"),
            Match::Ipv6Dst(n) => write!(f, "ipv6,ipv6_dst={n}"),
            Match::Tuple4(t) => write!(f, "ip,{}", FiveTuple::V4(*t)),
            Match::Tuple6(t) => write!(f, "ipv6,{}", FiveTuple::V6(*t)),
        }
    }
}

/// A rule: priority, match field and action set (Figure 14a). The action set comes first (see
/// [`Entry`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Rule {
    /// Action set.
    pub actions: ActionSet,
    /// Priority (for LPM rules, the prefix length: the priority RAM's content).
    pub priority: u32,
    /// Match field.
    pub matching: Match,
}

impl Rule {
    /// A rule whose priority is what its table uses: the prefix length for LPM, 0 for EM.
    pub fn new(matching: Match, actions: ActionSet) -> Rule {
        Rule { priority: matching.prefix_len(), matching, actions }
    }
}

/// A configuration instruction (Figure 14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Instruction {
    /// Clear every table and the action RAM.
    Initialize,
    /// Write a rule at an entry index.
    Populate {
        /// Entry index.
        index: u32,
        /// The rule.
        rule: Rule,
    },
    /// Clear the rule at an entry index.
    Delete {
        /// Entry index.
        index: u32,
    },
    /// Replace the action set of the rule at an entry index.
    Update {
        /// Entry index.
        index: u32,
        /// The new action set.
        actions: ActionSet,
    },
}

/// Bits of an instruction's header word (type, entry index, priority).
pub const INSTRUCTION_HEADER_BITS: u32 = 32;

impl Instruction {
    /// The instruction's length in bits as the host writes it over MMIO: a 32-bit header, the
    /// match field for populate and delete, and the 128-bit action set for populate and update
    /// (`action_set_bits`). For the EM table this gives the paper's 456 / 328 / 160 bits (§6.5).
    pub fn bits(&self, matching: Option<&Match>, action_set_bits: u32) -> u32 {
        let m = matching.map_or(0, Match::instruction_bits);
        match self {
            Instruction::Initialize => INSTRUCTION_HEADER_BITS,
            Instruction::Populate { rule, .. } => {
                INSTRUCTION_HEADER_BITS + rule.matching.instruction_bits() + action_set_bits
            }
            Instruction::Delete { .. } => INSTRUCTION_HEADER_BITS + m,
            Instruction::Update { .. } => INSTRUCTION_HEADER_BITS + action_set_bits,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Instruction::Initialize => "initialize",
            Instruction::Populate { .. } => "populate",
            Instruction::Delete { .. } => "delete",
            Instruction::Update { .. } => "update",
        }
    }
}

/// Why the driver refused an instruction (nothing was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OfuError {
    /// No OFU has this id.
    #[error("no OFU with id {0}")]
    UnknownOfu(OfuId),
    /// The OFU is disabled (`ofu_init` first).
    #[error("OFU {0} is not enabled (call ofu_init first)")]
    NotEnabled(OfuId),
    /// The instruction FIFO is full; retry after it drains.
    #[error("OFU {id}: instruction FIFO full ({depth} entries)")]
    FifoFull {
        /// OFU.
        id: OfuId,
        /// FIFO depth.
        depth: usize,
    },
    /// The rule's match field belongs to the other kind of table.
    #[error("OFU {id} is an {kind} table; rule `{matching}` needs an {} table", matching.kind().as_str())]
    WrongTable {
        /// OFU.
        id: OfuId,
        /// Its kind.
        kind: &'static str,
        /// The match field.
        matching: Match,
    },
    /// The entry index is outside the table.
    #[error("OFU {id}: entry index {index} is outside 0..{capacity}")]
    IndexOutOfRange {
        /// OFU.
        id: OfuId,
        /// Index.
        index: u32,
        /// Indexes the OFU has.
        capacity: u32,
    },
    /// The action set does not fit one action-RAM word.
    #[error("OFU {id}: action set `{actions}` needs {bits} operand bits, the action RAM holds {max}")]
    ActionSetTooWide {
        /// OFU.
        id: OfuId,
        /// The set.
        actions: ActionSet,
        /// Bits it needs.
        bits: u32,
        /// Bits an action-RAM word has.
        max: u32,
    },
}

/// The configuration FSM's states (Figure 15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsmState {
    /// Zeroing the tables and action RAM.
    Reset,
    /// Waiting for an instruction.
    Idle,
    /// Adding a rule: match field into the CAM, priority and action set into their RAMs.
    Write,
    /// Clearing a rule.
    Delete,
    /// Writing a new action set (the match field stays).
    Update,
}

/// Counters of one OFU, shared between the driver and the device.
#[derive(Debug, Default)]
pub struct OfuCounters {
    /// Instructions accepted into the FIFO.
    pub written: AtomicU64,
    /// Writes refused because the FIFO was full.
    pub fifo_full: AtomicU64,
    /// Instructions the FSM applied.
    pub applied: AtomicU64,
    /// Instructions the FSM could not apply (index in use or empty, duplicate match, table full).
    pub failed: AtomicU64,
    /// Populate / delete / update / initialize instructions applied.
    pub populates: AtomicU64,
    /// See `populates`.
    pub deletes: AtomicU64,
    /// See `populates`.
    pub updates: AtomicU64,
    /// See `populates`.
    pub initializes: AtomicU64,
    /// Device cycles the FSM spent writing (from the profile's write latencies).
    pub busy_cycles: AtomicU64,
}

/// Static description of an OFU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfuSpec {
    /// Id.
    pub id: OfuId,
    /// Table kind.
    pub kind: OfuKind,
    /// IPv4 entries (LPM: IPv4 TCAM; EM: shared BCAM).
    pub v4_entries: u32,
    /// IPv6 entries (LPM: IPv6 TCAM; EM: the same BCAM as `v4_entries`).
    pub v6_entries: u32,
    /// Instruction FIFO depth.
    pub fifo_depth: usize,
    /// Operand bits of an action-RAM word (`u32::MAX`: unbounded).
    pub action_set_bits: u32,
    /// Cycles to write a match entry (TCAM 258, BCAM 2 on the N3000; 0 if not modelled).
    pub write_cycles: u64,
}

impl OfuSpec {
    /// Entry indexes: IPv4 and IPv6 TCAMs side by side for LPM, the one BCAM for EM.
    pub fn indexes(&self) -> u32 {
        match self.kind {
            OfuKind::Lpm => self.v4_entries.saturating_add(self.v6_entries).min(UNBOUNDED_INDEXES),
            OfuKind::Em => self.v4_entries.min(UNBOUNDED_INDEXES),
        }
    }

    /// An OFU sized by a profile (unbounded resources get [`UNBOUNDED_INDEXES`]).
    pub fn from_profile(id: OfuId, kind: OfuKind, profile: &tern_hw::Profile) -> OfuSpec {
        use tern_hw::{cost, resource};
        let cap =
            |r: &str| profile.capacity(r).map_or(UNBOUNDED_INDEXES, |c| c.min(u64::from(UNBOUNDED_INDEXES)) as u32);
        let (v4, v6, write) = match kind {
            OfuKind::Lpm => (cap(resource::FLOW_LPM4_ENTRIES), cap(resource::FLOW_LPM6_ENTRIES), cost::TCAM_WRITE),
            OfuKind::Em => (cap(resource::FLOW_EM_ENTRIES), cap(resource::FLOW_EM_ENTRIES), cost::BCAM_WRITE),
        };
        OfuSpec {
            id,
            kind,
            v4_entries: v4,
            v6_entries: v6,
            fifo_depth: profile.capacity(resource::FLOW_INSTRUCTION_FIFO).map_or(4096, |d| d as usize),
            action_set_bits: profile.capacity(resource::FLOW_ACTION_SET_BITS).map_or(u32::MAX, |b| b as u32),
            write_cycles: profile.cycles(write).unwrap_or(0),
        }
    }
}

#[derive(Debug)]
struct OfuShared {
    spec: OfuSpec,
    enabled: AtomicBool,
    fifo: ArrayQueue<Instruction>,
    counters: OfuCounters,
}

/// The host side of the OFUs: the paper's API. Cheap to clone; every clone drives the same
/// OFUs.
#[derive(Debug, Clone)]
pub struct OfuDriver {
    ofus: Arc<Vec<OfuShared>>,
}

impl OfuDriver {
    fn get(&self, id: OfuId) -> Result<&OfuShared, OfuError> {
        self.ofus.iter().find(|o| o.spec.id == id).ok_or(OfuError::UnknownOfu(id))
    }

    /// Enables an OFU and initializes it (an `Initialize` instruction clears its tables).
    pub fn ofu_init(&self, id: OfuId) -> Result<(), OfuError> {
        let o = self.get(id)?;
        o.enabled.store(true, Ordering::Release);
        self.rule_table_ops(id, Instruction::Initialize)
    }

    /// Disables an OFU: packets pass it by (to the next OFU, else to the host). Its FIFO keeps
    /// what was written; `ofu_init` clears the tables when it is enabled again.
    pub fn ofu_uninit(&self, id: OfuId) -> Result<(), OfuError> {
        self.get(id)?.enabled.store(false, Ordering::Release);
        Ok(())
    }

    /// Checks an instruction and writes it into the OFU's instruction FIFO.
    pub fn rule_table_ops(&self, id: OfuId, istr: Instruction) -> Result<(), OfuError> {
        let o = self.get(id)?;
        if !o.enabled.load(Ordering::Acquire) {
            return Err(OfuError::NotEnabled(id));
        }
        let spec = &o.spec;
        let index = match &istr {
            Instruction::Initialize => None,
            Instruction::Populate { index, rule } => {
                if rule.matching.kind() != spec.kind {
                    return Err(OfuError::WrongTable { id, kind: spec.kind.as_str(), matching: rule.matching });
                }
                check_width(spec, &rule.actions)?;
                Some(*index)
            }
            Instruction::Delete { index } => Some(*index),
            Instruction::Update { index, actions } => {
                check_width(spec, actions)?;
                Some(*index)
            }
        };
        if let Some(index) = index
            && index >= spec.indexes()
        {
            return Err(OfuError::IndexOutOfRange { id, index, capacity: spec.indexes() });
        }
        match o.fifo.push(istr) {
            Ok(()) => {
                o.counters.written.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(_) => {
                o.counters.fifo_full.fetch_add(1, Ordering::Relaxed);
                Err(OfuError::FifoFull { id, depth: spec.fifo_depth })
            }
        }
    }

    /// Whether an OFU is enabled.
    pub fn is_enabled(&self, id: OfuId) -> bool {
        self.get(id).is_ok_and(|o| o.enabled.load(Ordering::Acquire))
    }

    /// Instructions waiting in an OFU's FIFO.
    pub fn pending(&self, id: OfuId) -> usize {
        self.get(id).map_or(0, |o| o.fifo.len())
    }

    /// An OFU's counters.
    pub fn counters(&self, id: OfuId) -> Option<&OfuCounters> {
        self.get(id).ok().map(|o| &o.counters)
    }

    /// The OFUs' specs.
    pub fn specs(&self) -> impl Iterator<Item = &OfuSpec> {
        self.ofus.iter().map(|o| &o.spec)
    }
}

fn check_width(spec: &OfuSpec, actions: &ActionSet) -> Result<(), OfuError> {
    let bits = actions.operand_bits();
    if bits > spec.action_set_bits {
        return Err(OfuError::ActionSetTooWide {
            id: spec.id,
            actions: actions.clone(),
            bits,
            max: spec.action_set_bits,
        });
    }
    Ok(())
}

/// One written entry of the action RAM, with its counters.
///
/// Laid out in this order (and the action set and its compiled rewrite in theirs) and aligned
/// to a cache line, so everything the fast path touches for a packet, the counters it writes
/// and the rewrite it reads, lies in the entry's first line (measured: 501 against 518 ns per
/// 32-frame batch with the rewrite and the counters on two lines).
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct Entry {
    /// Packets that hit it.
    pub packets: u64,
    /// Bytes of those packets.
    pub bytes: u64,
    /// Last hit (or write), ns.
    pub last_hit_ns: u64,
    /// When it was written (data-path clock, ns).
    pub installed_ns: u64,
    /// The rule.
    pub rule: Rule,
}

impl Entry {
    /// Counts a hit of a packet of `len` bytes at `now_ns`.
    #[inline]
    pub fn hit(&mut self, len: u64, now_ns: u64) {
        self.packets += 1;
        self.bytes += len;
        self.last_hit_ns = now_ns;
    }
}

/// Why the FSM could not apply an instruction.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FsmError {
    /// Populate at an index that holds a rule.
    #[error("entry {0} is in use")]
    IndexInUse(u32),
    /// Delete or update at an empty index.
    #[error("entry {0} is empty")]
    IndexEmpty(u32),
    /// Populate of a match field another entry holds.
    #[error("`{matching}` is already at entry {index}")]
    DuplicateMatch {
        /// The match field.
        matching: Match,
        /// Where it is.
        index: u32,
    },
    /// The CAM for this IP version is full.
    #[error("{0} table full ({1} entries)")]
    TableFull(&'static str, u32),
    /// The table refused the write.
    #[error("{0}")]
    Table(#[from] tern_table::TableError),
}

/// The device side of one OFU: match tables, action RAM, configuration FSM.
#[derive(Debug)]
pub struct OfuTables {
    spec: OfuSpec,
    shared: Arc<Vec<OfuShared>>,
    slot: usize,
    lpm4: Lpm4,
    lpm6: Lpm6,
    em4: ExactMatch<PackedTuple4>,
    em6: ExactMatch<FiveTuple6>,
    entries: Vec<Option<Entry>>,
    v4_used: u32,
    v6_used: u32,
    state: FsmState,
    last_error: Option<(String, FsmError)>,
}

/// Creates the driver and the device sides of a set of OFUs. Every OFU starts disabled.
pub fn new(specs: Vec<OfuSpec>) -> (OfuDriver, Vec<OfuTables>) {
    let shared: Arc<Vec<OfuShared>> = Arc::new(
        specs
            .into_iter()
            .map(|spec| OfuShared {
                fifo: ArrayQueue::new(spec.fifo_depth.max(1)),
                spec,
                enabled: AtomicBool::new(false),
                counters: OfuCounters::default(),
            })
            .collect(),
    );
    let tables = (0..shared.len())
        .map(|slot| OfuTables {
            spec: shared[slot].spec.clone(),
            shared: shared.clone(),
            slot,
            lpm4: Lpm4::new(),
            lpm6: Lpm6::new(),
            em4: ExactMatch::new(),
            em6: ExactMatch::new(),
            entries: Vec::new(),
            v4_used: 0,
            v6_used: 0,
            state: FsmState::Idle,
            last_error: None,
        })
        .collect();
    (OfuDriver { ofus: shared }, tables)
}

impl OfuTables {
    fn shared(&self) -> &OfuShared {
        &self.shared[self.slot]
    }

    /// The OFU's description.
    pub fn spec(&self) -> &OfuSpec {
        &self.spec
    }

    /// Whether the OFU is enabled (read by the data path once per batch).
    pub fn enabled(&self) -> bool {
        self.shared().enabled.load(Ordering::Acquire)
    }

    /// The FSM's state: `Idle` between instructions.
    pub fn fsm_state(&self) -> FsmState {
        self.state
    }

    /// The last instruction the FSM could not apply, and why.
    pub fn last_error(&self) -> Option<&(String, FsmError)> {
        self.last_error.as_ref()
    }

    /// Rules installed.
    pub fn len(&self) -> usize {
        (self.v4_used + self.v6_used) as usize
    }

    /// Whether no rule is installed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Rules installed per IP version.
    pub fn used(&self) -> (u32, u32) {
        (self.v4_used, self.v6_used)
    }

    /// Applies up to `budget` instructions from the FIFO (the FSM's Idle → Write/Delete/Update/
    /// Reset → Idle loop); returns how many it took. `now_ns` stamps new entries.
    #[inline]
    pub fn run_fsm(&mut self, now_ns: u64, budget: usize) -> usize {
        // The common case between two batches: nothing written. (A pop from an empty queue
        // costs a full fence; this check, two loads, inlined into the caller.)
        if self.shared().fifo.is_empty() {
            return 0;
        }
        self.drain_fifo(now_ns, budget)
    }

    /// [`run_fsm`](Self::run_fsm) past its empty-FIFO check.
    #[inline(never)]
    fn drain_fifo(&mut self, now_ns: u64, budget: usize) -> usize {
        let mut n = 0;
        while n < budget {
            let Some(istr) = self.shared().fifo.pop() else { break };
            n += 1;
            let name = istr.name();
            let result = self.apply(istr, now_ns);
            self.state = FsmState::Idle;
            let c = &self.shared[self.slot].counters;
            match result {
                Ok(cycles) => {
                    c.applied.fetch_add(1, Ordering::Relaxed);
                    c.busy_cycles.fetch_add(cycles, Ordering::Relaxed);
                    let which = match name {
                        "populate" => &c.populates,
                        "delete" => &c.deletes,
                        "update" => &c.updates,
                        _ => &c.initializes,
                    };
                    which.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    c.failed.fetch_add(1, Ordering::Relaxed);
                    self.last_error = Some((name.to_string(), e));
                }
            }
        }
        n
    }

    /// Applies one instruction; returns the device cycles it took.
    fn apply(&mut self, istr: Instruction, now_ns: u64) -> Result<u64, FsmError> {
        match istr {
            Instruction::Initialize => {
                self.state = FsmState::Reset;
                self.lpm4.clear();
                self.lpm6.clear();
                self.em4.clear();
                self.em6.clear();
                self.entries.clear();
                self.v4_used = 0;
                self.v6_used = 0;
                // Zeroing every address of the CAM cells and the action RAM.
                Ok(u64::from(self.spec.indexes().min(1 << 16)))
            }
            Instruction::Populate { index, rule } => {
                self.state = FsmState::Write;
                self.populate(index, rule, now_ns)?;
                Ok(self.spec.write_cycles)
            }
            Instruction::Delete { index } => {
                self.state = FsmState::Delete;
                self.delete(index)?;
                Ok(self.spec.write_cycles)
            }
            Instruction::Update { index, actions } => {
                self.state = FsmState::Update;
                let e =
                    self.entries.get_mut(index as usize).and_then(Option::as_mut).ok_or(FsmError::IndexEmpty(index))?;
                e.rule.actions = actions;
                // One action-RAM write.
                Ok(1)
            }
        }
    }

    fn populate(&mut self, index: u32, rule: Rule, now_ns: u64) -> Result<(), FsmError> {
        let i = index as usize;
        if self.entries.get(i).is_some_and(Option::is_some) {
            return Err(FsmError::IndexInUse(index));
        }
        let (used, cap, name) = match rule.matching.l3() {
            L3::Ipv6 => (self.v6_used, self.spec.v6_entries, "IPv6"),
            _ => (self.v4_used, self.spec.v4_entries, "IPv4"),
        };
        let used_total = if self.spec.kind == OfuKind::Em { self.v4_used + self.v6_used } else { used };
        if used_total >= cap {
            return Err(FsmError::TableFull(name, cap));
        }
        let existing = match rule.matching {
            Match::Ipv4Dst(n) => self.lpm4.get(n),
            Match::Ipv6Dst(n) => self.lpm6.get(n),
            Match::Tuple4(t) => self.em4.lookup(&t.into()),
            Match::Tuple6(t) => self.em6.lookup(&t),
        };
        if let Some(at) = existing {
            return Err(FsmError::DuplicateMatch { matching: rule.matching, index: at });
        }
        // Action RAM first, then the match entry that makes it reachable.
        if self.entries.len() <= i {
            self.entries.resize(i + 1, None);
        }
        let matching = rule.matching;
        self.entries[i] = Some(Entry { rule, packets: 0, bytes: 0, installed_ns: now_ns, last_hit_ns: now_ns });
        let written = match matching {
            Match::Ipv4Dst(n) => self.lpm4.insert(n, index).map(|_| ()),
            Match::Ipv6Dst(n) => self.lpm6.insert(n, index).map(|_| ()),
            Match::Tuple4(t) => {
                self.em4.insert(t.into(), index);
                Ok(())
            }
            Match::Tuple6(t) => {
                self.em6.insert(t, index);
                Ok(())
            }
        };
        if let Err(e) = written {
            self.entries[i] = None;
            return Err(e.into());
        }
        match matching.l3() {
            L3::Ipv6 => self.v6_used += 1,
            _ => self.v4_used += 1,
        }
        Ok(())
    }

    fn delete(&mut self, index: u32) -> Result<(), FsmError> {
        let i = index as usize;
        let matching = match self.entries.get(i) {
            Some(Some(e)) => e.rule.matching,
            _ => return Err(FsmError::IndexEmpty(index)),
        };
        // Match entry first, so no packet reaches the cleared action RAM word.
        match matching {
            Match::Ipv4Dst(n) => {
                self.lpm4.remove(n)?;
            }
            Match::Ipv6Dst(n) => {
                self.lpm6.remove(n)?;
            }
            Match::Tuple4(t) => {
                self.em4.remove(&t.into());
            }
            Match::Tuple6(t) => {
                self.em6.remove(&t);
            }
        }
        self.entries[i] = None;
        match matching.l3() {
            L3::Ipv6 => self.v6_used -= 1,
            _ => self.v4_used -= 1,
        }
        Ok(())
    }

    /// Stage 2 for an IPv4 packet: the entry index its destination / 5-tuple hits.
    #[inline]
    pub fn lookup4(&self, dst: u32, tuple: &FiveTuple4) -> Option<u32> {
        match self.spec.kind {
            OfuKind::Lpm => self.lookup4_lpm(dst),
            OfuKind::Em => self.lookup4_em(&PackedTuple4::from(*tuple)),
        }
    }

    /// Stage 2 for an IPv4 packet in an exact-match OFU (see [`lookup4`](Self::lookup4)), for a
    /// caller that has matched the kind once for many packets.
    #[inline]
    pub fn lookup4_em(&self, key: &PackedTuple4) -> Option<u32> {
        self.em4.lookup(key)
    }

    /// Stage 2 for an IPv4 packet in an LPM OFU (see [`lookup4`](Self::lookup4)).
    #[inline]
    pub fn lookup4_lpm(&self, dst: u32) -> Option<u32> {
        self.lpm4.lookup_key(dst)
    }

    /// Stage 2 for an IPv6 packet.
    #[inline]
    pub fn lookup6(&self, dst: u128, tuple: &FiveTuple6) -> Option<u32> {
        match self.spec.kind {
            OfuKind::Lpm => self.lpm6.lookup_key(dst),
            OfuKind::Em => self.em6.lookup(tuple),
        }
    }

    /// The entry at an index.
    #[inline]
    pub fn entry(&self, index: u32) -> Option<&Entry> {
        self.entries.get(index as usize).and_then(Option::as_ref)
    }

    /// The entry at an index, for counting a hit.
    #[inline]
    pub fn entry_mut(&mut self, index: u32) -> Option<&mut Entry> {
        self.entries.get_mut(index as usize).and_then(Option::as_mut)
    }

    /// Every installed entry with its index.
    pub fn entries(&self) -> impl Iterator<Item = (u32, &Entry)> {
        self.entries.iter().enumerate().filter_map(|(i, e)| e.as_ref().map(|e| (i as u32, e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counters and the action set's first 32 bytes (the fast path's, see `action`) share
    /// an entry's first cache line.
    #[test]
    fn an_entrys_hot_fields_share_its_first_line() {
        assert_eq!(std::mem::align_of::<Entry>(), 64);
        let set = std::mem::offset_of!(Entry, rule) + std::mem::offset_of!(Rule, actions);
        assert!(set + 32 <= 64, "{set}");
        assert!(std::mem::offset_of!(Entry, last_hit_ns) + 8 <= set);
    }

    fn lpm_ofu(fifo: usize) -> (OfuDriver, OfuTables) {
        let spec = OfuSpec {
            id: 1,
            kind: OfuKind::Lpm,
            v4_entries: 4,
            v6_entries: 4,
            fifo_depth: fifo,
            action_set_bits: 128,
            write_cycles: 258,
        };
        let (d, mut t) = new(vec![spec]);
        (d, t.remove(0))
    }

    fn rule(net: &str, actions: &str) -> Rule {
        Rule::new(Match::Ipv4Dst(net.parse().unwrap()), actions.parse().unwrap())
    }

    #[test]
    fn api_fifo_and_fsm() {
        let (d, mut t) = lpm_ofu(2);
        let pop = |i, net| Instruction::Populate { index: i, rule: rule(net, "output:1") };
        assert_eq!(d.rule_table_ops(1, pop(0, "10.0.0.0/8")), Err(OfuError::NotEnabled(1)));
        assert_eq!(d.rule_table_ops(9, pop(0, "10.0.0.0/8")), Err(OfuError::UnknownOfu(9)));
        d.ofu_init(1).unwrap();
        d.rule_table_ops(1, pop(0, "10.0.0.0/8")).unwrap();
        // Initialize + populate fill the 2-deep FIFO: the next write is refused.
        assert_eq!(d.rule_table_ops(1, pop(1, "10.1.0.0/16")), Err(OfuError::FifoFull { id: 1, depth: 2 }));
        assert_eq!(t.run_fsm(0, 16), 2);
        assert_eq!(t.fsm_state(), FsmState::Idle);
        d.rule_table_ops(1, pop(1, "10.1.0.0/16")).unwrap();
        t.run_fsm(0, 16);
        assert_eq!(t.lookup4(0x0a01_0203, &FiveTuple4::default()), Some(1));
        assert_eq!(t.lookup4(0x0a02_0203, &FiveTuple4::default()), Some(0));
        let c = d.counters(1).unwrap();
        assert_eq!(c.populates.load(Ordering::Relaxed), 2);
        assert_eq!(c.fifo_full.load(Ordering::Relaxed), 1);
        assert_eq!(c.busy_cycles.load(Ordering::Relaxed), 2 * 258 + 8);
        // Update keeps the match, changes the actions.
        d.rule_table_ops(1, Instruction::Update { index: 1, actions: "drop".parse().unwrap() }).unwrap();
        d.rule_table_ops(1, Instruction::Delete { index: 0 }).unwrap();
        t.run_fsm(0, 16);
        assert_eq!(t.entry(1).unwrap().rule.actions.to_string(), "drop");
        assert_eq!(t.lookup4(0x0a02_0203, &FiveTuple4::default()), None);
        assert_eq!(t.used(), (1, 0));
        d.ofu_uninit(1).unwrap();
        assert!(!t.enabled());
    }

    #[test]
    fn driver_and_fsm_refusals() {
        let (d, mut t) = lpm_ofu(64);
        d.ofu_init(1).unwrap();
        let em = Rule::new(Match::Tuple4(FiveTuple4::default()), ActionSet::default());
        assert!(matches!(
            d.rule_table_ops(1, Instruction::Populate { index: 0, rule: em }),
            Err(OfuError::WrongTable { .. })
        ));
        let wide = rule("1.0.0.0/8", "set_field:ipv6_dst=::1,output:1");
        let e = d.rule_table_ops(1, Instruction::Populate { index: 0, rule: wide }).unwrap_err();
        assert!(e.to_string().contains("136 operand bits"), "{e}");
        let e = d.rule_table_ops(1, Instruction::Delete { index: 8 }).unwrap_err();
        assert_eq!(e, OfuError::IndexOutOfRange { id: 1, index: 8, capacity: 8 });
        // FSM-level failures are counted and remembered.
        for i in 0..5 {
            d.rule_table_ops(1, Instruction::Populate { index: i, rule: rule(&format!("10.{i}.0.0/16"), "output:1") })
                .unwrap();
        }
        d.rule_table_ops(1, Instruction::Populate { index: 5, rule: rule("10.0.0.0/16", "drop") }).unwrap();
        d.rule_table_ops(1, Instruction::Delete { index: 7 }).unwrap();
        t.run_fsm(0, 64);
        let c = d.counters(1).unwrap();
        assert_eq!(c.failed.load(Ordering::Relaxed), 3);
        assert_eq!(t.used(), (4, 0));
        assert!(matches!(t.last_error(), Some((n, FsmError::IndexEmpty(7))) if n == "delete"));
    }

    #[test]
    fn paper_instruction_lengths() {
        // §6.5: EM populate / delete / update instructions are 456 / 328 / 160 bits.
        let m = Match::Tuple6(FiveTuple6::default());
        let r = Rule::new(m, ActionSet::default());
        assert_eq!(Instruction::Populate { index: 0, rule: r }.bits(None, 128), 456);
        assert_eq!(Instruction::Delete { index: 0 }.bits(Some(&m), 128), 328);
        assert_eq!(Instruction::Update { index: 0, actions: ActionSet::default() }.bits(None, 128), 160);
        // LPM instructions stay under 448 bits (§6.5), so TCAM writes bound their rate.
        let r6 = Rule::new(Match::Ipv6Dst("2001:db8::/32".parse().unwrap()), ActionSet::default());
        assert!(Instruction::Populate { index: 0, rule: r6 }.bits(None, 128) < 448);
    }
}
