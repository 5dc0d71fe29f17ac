//! The switch pipeline (CLIP §III-C; docs/clip.md, "The pipeline"), sans I/O: a checked
//! [`Program`] run on frames. The parser extracts Ethernet, IPv4 and TCP or UDP fields into the
//! packet header vector (PHV); `pre_processing` applies its tables and actions; a packet whose
//! actions set `flight` goes to a server with the request's parameters ([`Outcome::ToServer`]);
//! otherwise the deparser writes the changed fields back (IPv4 header and TCP/UDP checksums
//! recomputed) and the packet leaves. A server's response comes back through
//! [`Pipeline::post`]: its parameters become `res.*` and `post_processing` runs.
//!
//! Tables: an all-exact key is a hash lookup; a key with an `lpm` or `ternary` field is looked
//! up in tern-table's masked table (tuple space search: one probe a distinct mask; the longest
//! prefix, then the highest priority, then the earliest entry).
//! A field of a header the packet lacks reads as 0 and writes to it are dropped. A register
//! index is taken modulo the array's size (indexes are often hashes).
//!
//! Loading compiles the program: every field an operation or key names becomes a slot of the
//! PHV, every action and table an index, so a packet runs without looking a name up or
//! allocating (the key, the matched entry's parameters and the request are built in buffers
//! the pipeline keeps).

use hashbrown::HashMap;
use tern_table::sketch::fmix64;

use crate::place::MatchKind;
use crate::program::{AluKind, HEADER_FIELDS, Op, Operand, Program};

/// One key field of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyMatch {
    /// Equal to the value.
    Exact(u64),
    /// The top `len` bits (of the field's width) equal the value's.
    Lpm(u64, u8),
    /// Equal under the mask.
    Ternary(u64, u64),
}

/// A table entry as read back: key, priority, action name, parameters.
pub type EntryView<'a> = (Vec<KeyMatch>, u32, &'a str, Vec<u64>);

/// A response's word on its learned entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LearnDecision {
    /// Put it in the switch's table now.
    Install,
    /// Take it out.
    Remove,
}

/// What happens to a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It leaves, out of `meta.egress_port` if an action set it (None: by regular forwarding;
    /// port 0 reads as unset).
    Forward { port: Option<u16> },
    /// It goes to a server with the request parameters [`Pipeline::request`] holds (each
    /// `req.*` field in declaration order, big-endian, `ceil(bits / 8)` bytes).
    ToServer,
    /// It is dropped, and why.
    Drop(&'static str),
}

// The PHV slots of the header fields and standard metadata: their places in `HEADER_FIELDS`.
const ETH_DST: usize = 0;
const ETH_SRC: usize = 1;
const ETH_TYPE: usize = 2;
const IP_TOS: usize = 3;
const IP_TTL: usize = 4;
const IP_PROTO: usize = 5;
const IP_SRC: usize = 6;
const IP_DST: usize = 7;
const TCP_SRC: usize = 8;
const TCP_DST: usize = 9;
const TCP_SEQ: usize = 10;
const TCP_FLAGS: usize = 11;
const UDP_SRC: usize = 12;
const UDP_DST: usize = 13;
const INGRESS: usize = 14;
const EGRESS: usize = 15;
const FLIGHT: usize = 16;
const SERVER: usize = 17;
const PAYLOAD_LEN: usize = 18;

#[derive(Debug, Clone)]
struct Entry {
    key: Vec<KeyMatch>,
    priority: u32,
    action: usize,
    params: Box<[u64]>,
    /// Its order among the table's entries, and its rank in the masked table.
    id: u64,
    rank: u128,
}

/// What a matched entry gives: its action, its parameters, and its id.
type Hit = (usize, Box<[u64]>, u64);

#[derive(Debug, Clone)]
struct TableState {
    /// All-exact keys: key values → entry.
    exact: HashMap<Box<[u64]>, Entry>,
    /// Otherwise: entries in insertion order (to list and remove them), and the masked-key
    /// table lookups use (tern-table's tuple space search).
    list: Vec<Entry>,
    masked: tern_table::masked::MaskedTable<Hit>,
    next_id: u64,
    hits: u64,
    misses: u64,
}

impl TableState {
    fn new(words: usize) -> TableState {
        TableState {
            exact: HashMap::new(),
            list: Vec::new(),
            masked: tern_table::masked::MaskedTable::new(words),
            next_id: 0,
            hits: 0,
            misses: 0,
        }
    }
}

/// Where the parser found each header (None: the packet has none).
#[derive(Debug, Clone, Copy, Default)]
struct Offsets {
    ipv4: Option<usize>,
    tcp: Option<usize>,
    udp: Option<usize>,
}

/// A control's step, resolved when the program loads.
#[derive(Debug, Clone, Copy)]
enum StepKind {
    Table(usize),
    Action(usize),
}

/// A step and its guard: (slot, equal, value).
#[derive(Debug, Clone, Copy)]
struct Step {
    kind: StepKind,
    guard: Option<(usize, bool, u64)>,
}

/// An operand compiled: a PHV slot, the matched entry's parameter, or a constant.
#[derive(Debug, Clone, Copy)]
enum Src {
    Slot(usize),
    Param(usize),
    Const(u64),
}

/// An operation compiled to slots and register indexes.
#[derive(Debug, Clone)]
enum COp {
    Set { dst: usize, src: Src },
    Alu { kind: AluKind, dst: usize, a: Src, b: Src },
    Hash { dst: usize, fields: Box<[usize]> },
    RegRead { reg: usize, index: Src, dst: usize },
    RegWrite { reg: usize, index: Src, src: Src },
    RegAdd { reg: usize, index: Src, value: Src, dst: Option<usize> },
    RegAdvance { reg: usize, index: Src, value: Src, dst: usize },
    Egress { port: Src },
    Flight,
    Drop,
}

/// A table compiled: its key's slots, widths and kinds.
#[derive(Debug, Clone)]
struct CTable {
    key: Vec<(usize, u32, MatchKind)>,
    all_exact: bool,
    default: usize,
}

/// A declared header compiled: its bytes, and each field's slot, bit offset and width.
type HeaderLayout = (usize, Vec<(usize, usize, u32)>);

/// The compiled program: what a packet reads and never changes.
#[derive(Debug, Clone)]
struct Code {
    actions: Vec<Vec<COp>>,
    tables: Vec<CTable>,
    pre: Vec<Step>,
    post: Vec<Step>,
    widths: Vec<u32>,
    /// `req.*` and `res.*` slots with their bytes on the wire.
    request: Vec<(usize, usize)>,
    response: Vec<(usize, usize)>,
    register_bits: Vec<u32>,
    /// The mirrored tables, in declaration order (a mirrored table's *rank* is its place here).
    mirrored: Vec<MirroredCode>,
    /// Declared headers: bytes, and each field's slot, bit offset and width.
    headers: Vec<HeaderLayout>,
    /// Parser states: the header they follow (built-in 0–3: ethernet, ipv4, tcp, udp; then
    /// declared ones from 4), the select slot and value, the header extracted.
    states: Vec<(usize, usize, u64, usize)>,
}

/// A mirrored table: its index, its learn action with the response slots of its parameters,
/// and its `install` and `remove` conditions (slot, equal, value).
#[derive(Debug, Clone)]
struct MirroredCode {
    table: usize,
    learn: Option<(usize, Vec<usize>)>,
    install: Option<(usize, bool, u64)>,
    remove: Option<(usize, bool, u64)>,
}

/// What a packet changes: the PHV, registers, tables' counters, and the buffers it is built in.
#[derive(Debug, Clone)]
struct State {
    tables: Vec<TableState>,
    registers: Vec<Vec<u64>>,
    phv: Vec<u64>,
    key: Vec<u64>,
    /// The masked table's probe.
    probe: Vec<u64>,
    params: Vec<u64>,
    request: Vec<u8>,
    parsed_len: u16,
    /// The built-in header fields as parsed (the deparser writes only what changed).
    orig: [u64; 14],
    /// Where each declared header was found in the frame (None: the packet has none).
    custom: Vec<Option<usize>>,
    /// Whether the first mirrored table this packet reached hit (None: it reached none), and
    /// that table's rank.
    mirrored_hit: Option<bool>,
    mirrored_rank: usize,
    /// Its key, as looked up (actions after may change the fields).
    mirrored_key: Vec<u64>,
    /// The last response's entry of each mirrored table that learns (by rank): its key and the
    /// learn action's parameters, taken before `post_processing` changes the PHV.
    learned: Vec<(Vec<u64>, Vec<u64>)>,
}

/// A loaded program: its tables' entries and its registers.
#[derive(Debug, Clone)]
pub struct Pipeline {
    prog: Program,
    code: Code,
    st: State,
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x))
}

/// `width` bits of `b` from bit `bit` (most significant first), as a number.
fn get_bits(b: &[u8], bit: usize, width: u32) -> u64 {
    if bit.is_multiple_of(8) && width.is_multiple_of(8) {
        return be(&b[bit / 8..bit / 8 + width as usize / 8]);
    }
    (0..width as usize).fold(0u64, |v, i| (v << 1) | u64::from((b[(bit + i) / 8] >> (7 - (bit + i) % 8)) & 1))
}

/// Writes the low `width` bits of `v` at bit `bit` of `b` (most significant first).
fn set_bits(b: &mut [u8], bit: usize, width: u32, v: u64) {
    if bit.is_multiple_of(8) && width.is_multiple_of(8) {
        return put_be(&mut b[bit / 8..bit / 8 + width as usize / 8], v);
    }
    for i in 0..width as usize {
        let on = (v >> (width as usize - 1 - i)) & 1 == 1;
        let (byte, m) = ((bit + i) / 8, 0x80u8 >> ((bit + i) % 8));
        if on {
            b[byte] |= m;
        } else {
            b[byte] &= !m;
        }
    }
}

fn put_be(b: &mut [u8], v: u64) {
    let n = b.len();
    for (i, x) in b.iter_mut().enumerate() {
        *x = (v >> (8 * (n - 1 - i))) as u8;
    }
}

/// An entry's key as words and masks for the masked table: an exact field all its width, a
/// prefix its top bits, a ternary field its mask (within the width).
fn masked_key(key: &[KeyMatch], fields: &[(usize, u32, MatchKind)]) -> (Vec<u64>, Vec<u64>) {
    key.iter()
        .zip(fields)
        .map(|(k, &(_, w, _))| {
            let all = mask(w);
            match *k {
                KeyMatch::Exact(v) => (v & all, all),
                KeyMatch::Lpm(v, len) => {
                    let len = u32::from(len).min(w);
                    let m = if len == 0 { 0 } else { mask(len) << (w - len) };
                    (v & m, m)
                }
                KeyMatch::Ternary(v, m) => (v & m & all, m & all),
            }
        })
        .unzip()
}

/// The hash unit: the values folded through a 64-bit finalizer (the `hash` operation, and a
/// flow's id from its mirrored table's key).
#[inline]
pub fn hash_values(values: &[u64]) -> u64 {
    hash_iter(values.iter().copied())
}

/// [`hash_values`] over values as they come.
#[inline]
pub(crate) fn hash_iter(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0x9e37_79b9_7f4a_7c15u64, |acc, v| fmix64(acc ^ v))
}

impl Code {
    fn compile(prog: &Program) -> Code {
        let header_fields = prog.header_fields();
        let mut slots: HashMap<&str, usize> = HashMap::new();
        let mut widths = Vec::new();
        for (n, b) in HEADER_FIELDS.iter().map(|&(n, b)| (n, b)).chain(
            prog.request
                .iter()
                .chain(&prog.response)
                .chain(&prog.metadata)
                .chain(&header_fields)
                .map(|(n, b)| (n.as_str(), *b)),
        ) {
            slots.insert(n, widths.len());
            widths.push(b);
        }
        // A checked program names only fields it declares; slot 0 stands in otherwise.
        let slot = |f: &str| slots.get(f).copied().unwrap_or(0);
        let reg = |r: &str| prog.registers.iter().position(|x| x.name == r).unwrap_or(0);
        let actions = prog
            .actions
            .iter()
            .map(|a| {
                let src = |o: &Operand| match o {
                    Operand::Const(v) => Src::Const(*v),
                    Operand::Field(f) => match f.strip_prefix("param.") {
                        Some(p) => Src::Param(a.params.iter().position(|(n, _)| n == p).unwrap_or(usize::MAX)),
                        None => Src::Slot(slot(f)),
                    },
                };
                a.ops
                    .iter()
                    .map(|op| match op {
                        Op::Set { dst, src: s } => COp::Set { dst: slot(dst), src: src(s) },
                        Op::Alu { kind, dst, a: x, b: y } => {
                            COp::Alu { kind: *kind, dst: slot(dst), a: src(x), b: src(y) }
                        }
                        Op::Hash { dst, fields } => {
                            COp::Hash { dst: slot(dst), fields: fields.iter().map(|f| slot(f)).collect() }
                        }
                        Op::RegRead { register, index, dst } => {
                            COp::RegRead { reg: reg(register), index: src(index), dst: slot(dst) }
                        }
                        Op::RegWrite { register, index, src: s } => {
                            COp::RegWrite { reg: reg(register), index: src(index), src: src(s) }
                        }
                        Op::RegAdd { register, index, value, dst } => COp::RegAdd {
                            reg: reg(register),
                            index: src(index),
                            value: src(value),
                            dst: dst.as_deref().map(slot),
                        },
                        Op::RegAdvance { register, index, value, dst } => {
                            COp::RegAdvance { reg: reg(register), index: src(index), value: src(value), dst: slot(dst) }
                        }
                        Op::Egress { port } => COp::Egress { port: src(port) },
                        Op::Ecmp | Op::Flight => COp::Flight,
                        Op::Drop => COp::Drop,
                    })
                    .collect()
            })
            .collect();
        let action = |n: &str| prog.actions.iter().position(|a| a.name == n).unwrap_or(0);
        let tables = prog
            .tables
            .iter()
            .map(|t| CTable {
                key: t.key.iter().map(|(f, k)| (slot(f), widths[slot(f)], *k)).collect(),
                all_exact: t.key.iter().all(|k| k.1 == MatchKind::Exact),
                default: action(&t.default),
            })
            .collect();
        let resolve = |steps: &[String], guards: &[Option<crate::program::Guard>]| -> Vec<Step> {
            steps
                .iter()
                .enumerate()
                .filter_map(|(i, s)| {
                    let kind = match prog.tables.iter().position(|t| t.name == *s) {
                        Some(t) => Some(StepKind::Table(t)),
                        None => prog.actions.iter().position(|a| a.name == *s).map(StepKind::Action),
                    }?;
                    let guard = guards.get(i).and_then(|g| g.as_ref()).map(|g| (slot(&g.field), g.equal, g.value));
                    Some(Step { kind, guard })
                })
                .collect()
        };
        let wire = |fields: &[(String, u32)]| -> Vec<(usize, usize)> {
            fields.iter().map(|(n, b)| (slot(n), b.div_ceil(8) as usize)).collect()
        };
        let cond = |g: &Option<crate::program::Guard>| g.as_ref().map(|g| (slot(&g.field), g.equal, g.value));
        let mirrored: Vec<MirroredCode> = prog
            .tables
            .iter()
            .enumerate()
            .filter(|(_, t)| t.mirrored)
            .map(|(m, t)| MirroredCode {
                table: m,
                learn: t.learn.as_deref().map(|l| {
                    let a = &prog.actions[action(l)];
                    (action(l), a.params.iter().map(|(p, _)| slot(&format!("res.{p}"))).collect())
                }),
                install: cond(&t.install),
                remove: cond(&t.remove),
            })
            .collect();
        let headers: Vec<HeaderLayout> = prog
            .headers
            .iter()
            .map(|h| {
                let mut at = 0usize;
                let fields = h
                    .fields
                    .iter()
                    .map(|(f, b)| {
                        let x = (slot(&format!("{}.{f}", h.name)), at, *b);
                        at += *b as usize;
                        x
                    })
                    .collect();
                (h.bytes(), fields)
            })
            .collect();
        let header_id = |n: &str| -> usize {
            crate::program::BUILTIN_HEADERS
                .iter()
                .position(|b| *b == n)
                .or_else(|| prog.headers.iter().position(|h| h.name == n).map(|i| i + 4))
                .unwrap_or(0)
        };
        let states = prog
            .parser
            .iter()
            .map(|st| (header_id(&st.after), slot(&st.select), st.value, header_id(&st.extract) - 4))
            .collect();
        Code {
            headers,
            states,
            actions,
            tables,
            pre: resolve(&prog.pre_processing, &prog.pre_guards),
            post: resolve(&prog.post_processing, &prog.post_guards),
            request: wire(&prog.request),
            response: wire(&prog.response),
            register_bits: prog.registers.iter().map(|r| r.bits).collect(),
            widths,
            mirrored,
        }
    }
}

impl State {
    #[inline]
    fn set(&mut self, widths: &[u32], slot: usize, v: u64) {
        self.phv[slot] = v & mask(widths[slot]);
    }

    #[inline]
    fn value(&self, s: Src) -> u64 {
        match s {
            Src::Slot(i) => self.phv[i],
            Src::Param(i) => self.params.get(i).copied().unwrap_or(0),
            Src::Const(v) => v,
        }
    }

    #[inline]
    fn cell(&self, reg: usize, index: Src) -> usize {
        let n = self.registers[reg].len() as u64;
        (self.value(index) % n) as usize
    }

    /// Runs a control's steps; Some if an action dropped the packet.
    fn run(&mut self, code: &Code, post: bool) -> Option<Outcome> {
        let steps = if post { &code.post } else { &code.pre };
        for &step in steps {
            if let Some((slot, equal, value)) = step.guard
                && (self.phv[slot] == value) != equal
            {
                continue;
            }
            let ai = match step.kind {
                StepKind::Table(ti) => self.lookup(code, ti),
                StepKind::Action(ai) => {
                    self.params.clear();
                    ai
                }
            };
            if let Some(d) = self.exec(code, ai) {
                return Some(d);
            }
        }
        None
    }

    /// The action table `ti` gives the PHV's key (its default on a miss), its parameters put
    /// in `params`.
    fn lookup(&mut self, code: &Code, ti: usize) -> usize {
        let t = &code.tables[ti];
        self.key.clear();
        for &(slot, _, _) in &t.key {
            self.key.push(self.phv[slot]);
        }
        let st = &self.tables[ti];
        let hit: Option<(usize, &[u64])> = if t.all_exact {
            st.exact.get(&self.key[..]).map(|e| (e.action, &e.params[..]))
        } else {
            st.masked.lookup(&self.key, &mut self.probe).map(|h| (h.0, &h.1[..]))
        };
        self.params.clear();
        let (ai, hit) = match hit {
            Some((action, params)) => {
                self.params.extend_from_slice(params);
                (action, true)
            }
            None => (t.default, false),
        };
        if hit {
            self.tables[ti].hits += 1;
        } else {
            self.tables[ti].misses += 1;
        }
        if self.mirrored_hit.is_none()
            && let Some(rank) = code.mirrored.iter().position(|m| m.table == ti)
        {
            self.mirrored_hit = Some(hit);
            self.mirrored_rank = rank;
            self.mirrored_key.clone_from(&self.key);
        }
        ai
    }

    /// Runs an action's operations; Some if it dropped the packet.
    fn exec(&mut self, code: &Code, ai: usize) -> Option<Outcome> {
        let w = &code.widths;
        for op in &code.actions[ai] {
            match *op {
                COp::Set { dst, src } => {
                    let v = self.value(src);
                    self.set(w, dst, v);
                }
                COp::Alu { kind, dst, a, b } => {
                    let (x, y) = (self.value(a), self.value(b));
                    let v = match kind {
                        AluKind::Add => x.wrapping_add(y),
                        AluKind::Sub => x.wrapping_sub(y),
                        AluKind::And => x & y,
                        AluKind::Or => x | y,
                        AluKind::Xor => x ^ y,
                    };
                    self.set(w, dst, v);
                }
                COp::Hash { dst, ref fields } => {
                    let h = hash_iter(fields.iter().map(|&f| self.phv[f]));
                    self.set(w, dst, h);
                }
                COp::RegRead { reg, index, dst } => {
                    let i = self.cell(reg, index);
                    let v = self.registers[reg][i];
                    self.set(w, dst, v);
                }
                COp::RegWrite { reg, index, src } => {
                    let i = self.cell(reg, index);
                    self.registers[reg][i] = self.value(src) & mask(code.register_bits[reg]);
                }
                COp::RegAdd { reg, index, value, dst } => {
                    let i = self.cell(reg, index);
                    let v = self.registers[reg][i].wrapping_add(self.value(value)) & mask(code.register_bits[reg]);
                    self.registers[reg][i] = v;
                    if let Some(d) = dst {
                        self.set(w, d, v);
                    }
                }
                COp::RegAdvance { reg, index, value, dst } => {
                    let i = self.cell(reg, index);
                    let bits = code.register_bits[reg];
                    let (old, new) = (self.registers[reg][i], self.value(value) & mask(bits));
                    // Serial arithmetic (RFC 1982) at the register's width: `new` is after
                    // `old` when their difference, read as a signed number, is positive.
                    let diff = new.wrapping_sub(old) & mask(bits);
                    let after = diff != 0 && diff >> (bits.max(1) - 1) & 1 == 0;
                    if after {
                        self.registers[reg][i] = new;
                    }
                    self.set(w, dst, u64::from(!after));
                }
                COp::Egress { port } => {
                    let p = self.value(port);
                    self.set(w, EGRESS, p);
                }
                COp::Flight => self.phv[FLIGHT] = 1,
                COp::Drop => return Some(Outcome::Drop("dropped_by_program")),
            }
        }
        None
    }

    /// Extracts the headers into a cleared PHV — the built-in states, then the program's —
    /// None for a frame shorter than Ethernet.
    fn parse(&mut self, code: &Code, f: &[u8]) -> Option<Offsets> {
        if f.len() < 14 {
            return None;
        }
        self.phv.fill(0);
        self.mirrored_hit = None;
        self.parsed_len = 0;
        let mut off = Offsets::default();
        self.phv[ETH_DST] = be(&f[0..6]);
        self.phv[ETH_SRC] = be(&f[6..12]);
        let ty = be(&f[12..14]);
        self.phv[ETH_TYPE] = ty;
        if ty == 0x0800 && f.len() >= 34 && f[14] >> 4 == 4 && (f[14] & 0xf) >= 5 {
            let l3 = 14;
            let ihl = usize::from(f[l3] & 0xf) * 4;
            if f.len() >= l3 + ihl {
                off.ipv4 = Some(l3);
                self.parsed_len = ihl as u16;
                self.phv[IP_TOS] = u64::from(f[l3 + 1]);
                self.phv[IP_TTL] = u64::from(f[l3 + 8]);
                self.phv[IP_PROTO] = u64::from(f[l3 + 9]);
                self.phv[IP_SRC] = be(&f[l3 + 12..l3 + 16]);
                self.phv[IP_DST] = be(&f[l3 + 16..l3 + 20]);
                let l4 = l3 + ihl;
                // The IPv4 total length, within the frame (a padded frame's padding is not payload).
                let total = usize::from(u16::from_be_bytes([f[l3 + 2], f[l3 + 3]])).min(f.len() - l3);
                // A fragment after the first carries no TCP or UDP header: its L4 is not read.
                let first_fragment = u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x1fff == 0;
                match if first_fragment { f[l3 + 9] } else { 0 } {
                    6 if f.len() >= l4 + 20 => {
                        off.tcp = Some(l4);
                        self.parsed_len += 20;
                        let doff = usize::from(f[l4 + 12] >> 4) * 4;
                        self.phv[PAYLOAD_LEN] = total.saturating_sub(ihl + doff.max(20)) as u64;
                        self.phv[TCP_SRC] = be(&f[l4..l4 + 2]);
                        self.phv[TCP_DST] = be(&f[l4 + 2..l4 + 4]);
                        self.phv[TCP_SEQ] = be(&f[l4 + 4..l4 + 8]);
                        self.phv[TCP_FLAGS] = u64::from(f[l4 + 13]);
                    }
                    17 if f.len() >= l4 + 8 => {
                        off.udp = Some(l4);
                        self.parsed_len += 8;
                        self.phv[PAYLOAD_LEN] = total.saturating_sub(ihl + 8) as u64;
                        self.phv[UDP_SRC] = be(&f[l4..l4 + 2]);
                        self.phv[UDP_DST] = be(&f[l4 + 2..l4 + 4]);
                    }
                    _ => {}
                }
            }
        }
        self.orig.copy_from_slice(&self.phv[..14]);
        self.parse_declared(code, f, off);
        Some(off)
    }

    /// The program's parser states: each extracts its header right after the header it
    /// follows when its select field holds its value (a header followed once, by the first
    /// state that matches), until no state applies.
    fn parse_declared(&mut self, code: &Code, f: &[u8], off: Offsets) {
        if code.states.is_empty() {
            return;
        }
        self.custom.fill(None);
        // Where each header ends (built-in: ethernet, ipv4, tcp, udp; then declared).
        let mut end: Vec<Option<usize>> = vec![None; 4 + code.headers.len()];
        end[0] = Some(14);
        if let Some(l3) = off.ipv4 {
            end[1] = Some(l3 + usize::from(f[l3] & 0xf) * 4);
        }
        end[2] = off.tcp.map(|l4| l4 + 20);
        end[3] = off.udp.map(|l4| l4 + 8);
        let mut followed = vec![false; end.len()];
        loop {
            let mut progress = false;
            for &(after, select, value, h) in &code.states {
                let (Some(at), false) = (end[after], followed[after]) else { continue };
                if self.custom[h].is_some() || self.phv[select] != value {
                    continue;
                }
                let (bytes, fields) = &code.headers[h];
                if f.len() < at + bytes {
                    continue;
                }
                for &(slot, bit, width) in fields {
                    self.phv[slot] = get_bits(&f[at..at + bytes], bit, width);
                }
                self.custom[h] = Some(at);
                end[4 + h] = Some(at + bytes);
                followed[after] = true;
                self.parsed_len = self.parsed_len.max((at + bytes - 14) as u16);
                progress = true;
            }
            if !progress {
                break;
            }
        }
    }

    /// Writes the header fields back into `f` and recomputes the checksums they cover.
    fn deparse(&self, code: &Code, f: &mut [u8], off: Offsets) {
        // Declared headers first; one that changed inside a TCP or UDP payload makes its
        // checksum recomputed below.
        let mut custom_changed = false;
        for (h, at) in self.custom.iter().enumerate() {
            let Some(at) = *at else { continue };
            let (bytes, fields) = &code.headers[h];
            let mut before = [0u8; 64];
            before[..*bytes].copy_from_slice(&f[at..at + bytes]);
            for &(slot, bit, width) in fields {
                set_bits(&mut f[at..at + bytes], bit, width, self.phv[slot]);
            }
            custom_changed |= f[at..at + bytes] != before[..*bytes];
        }
        let (p, o) = (&self.phv, &self.orig);
        for (slot, r) in [(ETH_DST, 0..6), (ETH_SRC, 6..12), (ETH_TYPE, 12..14)] {
            if p[slot] != o[slot] {
                put_be(&mut f[r], p[slot]);
            }
        }
        let Some(l3) = off.ipv4 else { return };
        let total = (be(&f[l3 + 2..l3 + 4]) as usize + l3).min(f.len());
        let l4 = match (off.tcp, off.udp) {
            (Some(l4), _) => Some((l4, l4 + 16, 6u8)),
            (None, Some(l4)) => Some((l4, l4 + 6, 17u8)),
            _ => None,
        };
        // The L4 checksum is kept up to date if the packet holds it and (UDP) one was computed
        // (a UDP checksum of 0 means none: it stays 0).
        let l4_csum =
            l4.filter(|&(_, c, proto)| total > c + 1 && total <= f.len() && !(proto == 17 && f[c..c + 2] == [0, 0]));
        if p[IP_PROTO] != o[IP_PROTO] || custom_changed {
            // A new protocol, or a declared header changed in the payload: every field written
            // and both checksums computed afresh.
            f[l3 + 1] = p[IP_TOS] as u8;
            f[l3 + 8] = p[IP_TTL] as u8;
            f[l3 + 9] = p[IP_PROTO] as u8;
            put_be(&mut f[l3 + 12..l3 + 16], p[IP_SRC]);
            put_be(&mut f[l3 + 16..l3 + 20], p[IP_DST]);
            tern_wire::frame::ipv4_fill_checksum(f, l3);
            if let Some((l4, c, proto)) = l4 {
                let ports = if proto == 6 { (TCP_SRC, TCP_DST) } else { (UDP_SRC, UDP_DST) };
                put_be(&mut f[l4..l4 + 2], p[ports.0]);
                put_be(&mut f[l4 + 2..l4 + 4], p[ports.1]);
                if proto == 6 {
                    put_be(&mut f[l4 + 4..l4 + 8], p[TCP_SEQ]);
                    f[l4 + 13] = p[TCP_FLAGS] as u8;
                }
                if l4_csum.is_some() {
                    tern_wire::frame::fill_l4_checksum(f, (l3 + 12, l3 + 16), (l3 + 16, l3 + 20), proto, l4, total, c);
                }
            }
            return;
        }
        // Otherwise only the fields that changed are written, and the checksums that cover
        // them are updated incrementally (RFC 1624), a 16-bit word at a time, from the fields'
        // old and new values.
        use tern_wire::frame::checksum_adjust as adj;
        /// `sum` adjusted for a field of `bytes` changing from `old` to `new`; `odd`: a
        /// one-byte field in the low byte of its word.
        fn fold(sum: u16, old: u64, new: u64, bytes: usize, odd: bool) -> u16 {
            match bytes {
                1 if odd => adj(sum, old as u16, new as u16),
                1 => adj(sum, (old as u16) << 8, (new as u16) << 8),
                2 => adj(sum, old as u16, new as u16),
                _ => adj(adj(sum, (old >> 16) as u16, (new >> 16) as u16), old as u16, new as u16),
            }
        }
        let mut ip_sum = u16::from_be_bytes([f[l3 + 10], f[l3 + 11]]);
        let mut l4_sum = l4_csum.map(|(_, c, _)| u16::from_be_bytes([f[c], f[c + 1]]));
        let (mut ip_dirty, mut l4_dirty) = (false, false);
        // (slot, offset, bytes, in the IPv4 header's checksum, in the L4 checksum)
        let ip_fields = [
            (IP_TOS, l3 + 1, 1, true, false),
            (IP_TTL, l3 + 8, 1, true, false),
            (IP_SRC, l3 + 12, 4, true, true),
            (IP_DST, l3 + 16, 4, true, true),
        ];
        let l4_fields: &[(usize, usize, usize, bool, bool)] = match l4 {
            Some((l4, _, 6)) => &[
                (TCP_SRC, l4, 2, false, true),
                (TCP_DST, l4 + 2, 2, false, true),
                (TCP_SEQ, l4 + 4, 4, false, true),
                (TCP_FLAGS, l4 + 13, 1, false, true),
            ],
            Some((l4, _, _)) => &[(UDP_SRC, l4, 2, false, true), (UDP_DST, l4 + 2, 2, false, true)],
            None => &[],
        };
        for &(slot, at, len, ip, l4c) in ip_fields.iter().chain(l4_fields) {
            let (old, new) = (o[slot], p[slot]);
            if old == new {
                continue;
            }
            put_be(&mut f[at..at + len], new);
            let odd = at % 2 == 1;
            if ip {
                ip_sum = fold(ip_sum, old, new, len, odd);
                ip_dirty = true;
            }
            if l4c && let Some(s) = l4_sum.as_mut() {
                *s = fold(*s, old, new, len, odd);
                l4_dirty = true;
            }
        }
        if ip_dirty {
            f[l3 + 10..l3 + 12].copy_from_slice(&ip_sum.to_be_bytes());
        }
        if let (true, Some(s), Some((_, c, proto))) = (l4_dirty, l4_sum, l4_csum) {
            // A UDP checksum that comes out 0 is sent as 0xffff (0 means none).
            let s = if s == 0 && proto == 17 { 0xffff } else { s };
            f[c..c + 2].copy_from_slice(&s.to_be_bytes());
        }
    }

    fn forward(&self) -> Outcome {
        let port = self.phv[EGRESS];
        Outcome::Forward { port: (port != 0).then_some(port as u16) }
    }
}

impl Pipeline {
    /// `prog` with empty tables and zeroed registers.
    pub fn new(prog: Program) -> Pipeline {
        let code = Code::compile(&prog);
        let st = State {
            tables: prog.tables.iter().map(|t| TableState::new(t.key.len())).collect(),
            registers: prog.registers.iter().map(|r| vec![0; r.entries as usize]).collect(),
            phv: vec![0; code.widths.len()],
            key: Vec::with_capacity(8),
            probe: Vec::with_capacity(8),
            params: Vec::with_capacity(8),
            request: Vec::with_capacity(prog.request.iter().map(|(_, b)| b.div_ceil(8) as usize).sum()),
            parsed_len: 0,
            orig: [0; 14],
            custom: vec![None; code.headers.len()],
            mirrored_hit: None,
            mirrored_rank: 0,
            mirrored_key: Vec::with_capacity(8),
            learned: code.mirrored.iter().map(|_| (Vec::with_capacity(8), Vec::with_capacity(4))).collect(),
        };
        Pipeline { prog, code, st }
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.prog
    }

    fn table_index(&self, table: &str) -> Result<usize, String> {
        self.prog.tables.iter().position(|t| t.name == table).ok_or_else(|| format!("no table `{table}`"))
    }

    /// Adds an entry to `table`: its key (one match a key field, of the field's kind), a
    /// priority (ternary keys: higher wins), and an action of the table's with its parameters.
    /// An exact key already present is replaced.
    pub fn insert(
        &mut self,
        table: &str,
        key: &[KeyMatch],
        priority: u32,
        action: &str,
        params: &[u64],
    ) -> Result<(), String> {
        let ti = self.table_index(table)?;
        let t = &self.prog.tables[ti];
        if key.len() != t.key.len() {
            return Err(format!("table `{table}`: {} key fields, not {}", t.key.len(), key.len()));
        }
        for (k, (field, kind)) in key.iter().zip(&t.key) {
            let ok = matches!(
                (k, kind),
                (KeyMatch::Exact(_), MatchKind::Exact)
                    | (KeyMatch::Lpm(..), MatchKind::Lpm)
                    | (KeyMatch::Ternary(..), MatchKind::Ternary)
            );
            if !ok {
                return Err(format!("table `{table}`: `{field}` is matched {kind:?}, not {k:?}"));
            }
        }
        if !t.actions.iter().any(|a| a == action) {
            return Err(format!("table `{table}`: `{action}` is not one of its actions"));
        }
        let ai =
            self.prog.actions.iter().position(|a| a.name == action).ok_or_else(|| format!("no action `{action}`"))?;
        let a = &self.prog.actions[ai];
        if params.len() != a.params.len() {
            return Err(format!("action `{action}`: {} parameters, not {}", a.params.len(), params.len()));
        }
        if let Some(((n, b), v)) = a.params.iter().zip(params).find(|((_, b), v)| **v & !mask(*b) != 0) {
            return Err(format!("action `{action}`: parameter `{n}` = {v} is wider than {b} bits"));
        }
        let st = &mut self.st.tables[ti];
        let id = st.next_id;
        let ct = &self.code.tables[ti];
        let (words, masks) = masked_key(key, &ct.key);
        let lpm: u32 = key.iter().map(|k| if let KeyMatch::Lpm(_, l) = k { u32::from(*l) } else { 0 }).sum();
        // The longest prefix, then the highest priority, then the earliest entry.
        let rank = (u128::from(lpm) << 96) | (u128::from(priority) << 64) | u128::from(u64::MAX - id);
        let e = Entry { key: key.to_vec(), priority, action: ai, params: params.into(), id, rank };
        if ct.all_exact {
            let vals: Box<[u64]> = key.iter().map(|k| if let KeyMatch::Exact(v) = k { *v } else { 0 }).collect();
            if !st.exact.contains_key(&vals) && st.exact.len() as u64 >= t.size {
                return Err(format!("table `{table}` is full ({} entries)", t.size));
            }
            st.exact.insert(vals, e);
        } else {
            if st.list.len() as u64 >= t.size {
                return Err(format!("table `{table}` is full ({} entries)", t.size));
            }
            st.masked.insert(&words, &masks, rank, (ai, e.params.clone(), id));
            st.list.push(e);
        }
        st.next_id += 1;
        Ok(())
    }

    /// Removes `table`'s entry with exactly this key; whether there was one.
    pub fn remove(&mut self, table: &str, key: &[KeyMatch]) -> bool {
        let Ok(ti) = self.table_index(table) else { return false };
        let st = &mut self.st.tables[ti];
        let vals: Option<Vec<u64>> =
            key.iter().map(|k| if let KeyMatch::Exact(v) = k { Some(*v) } else { None }).collect();
        if let Some(v) = vals
            && st.exact.remove(&v[..]).is_some()
        {
            return true;
        }
        let Some(i) = st.list.iter().position(|e| e.key == key) else { return false };
        let e = st.list.remove(i);
        let (words, masks) = masked_key(&e.key, &self.code.tables[ti].key);
        st.masked.remove(&words, &masks, e.rank, |h| h.2 == e.id);
        true
    }

    /// A table's entries: key, priority, action name, parameters (exact tables in no order).
    pub fn entries(&self, table: &str) -> Option<Vec<EntryView<'_>>> {
        let ti = self.table_index(table).ok()?;
        let st = &self.st.tables[ti];
        Some(
            st.exact
                .values()
                .chain(&st.list)
                .map(|e| (e.key.clone(), e.priority, self.prog.actions[e.action].name.as_str(), e.params.to_vec()))
                .collect(),
        )
    }

    /// Entries in a table.
    pub fn len(&self, table: &str) -> usize {
        self.table_index(table).map_or(0, |ti| self.st.tables[ti].exact.len() + self.st.tables[ti].list.len())
    }

    /// A register array's cells.
    pub fn register(&self, name: &str) -> Option<&[u64]> {
        self.prog.registers.iter().position(|r| r.name == name).map(|i| self.st.registers[i].as_slice())
    }

    /// A table's hits and misses so far.
    pub fn table_counts(&self, name: &str) -> Option<(u64, u64)> {
        self.table_index(name).ok().map(|i| (self.st.tables[i].hits, self.st.tables[i].misses))
    }

    /// Runs `pre_processing` on `frame` (received on `ingress_port`), changing it in place.
    pub fn pre(&mut self, frame: &mut [u8], ingress_port: u16) -> Outcome {
        let Some(off) = self.st.parse(&self.code, frame) else { return Outcome::Drop("malformed") };
        self.st.set(&self.code.widths, INGRESS, u64::from(ingress_port));
        if let Some(d) = self.st.run(&self.code, false) {
            return d;
        }
        if self.st.phv[FLIGHT] == 1 {
            self.st.request.clear();
            for &(slot, bytes) in &self.code.request {
                let mut b = [0u8; 8];
                put_be(&mut b[8 - bytes..], self.st.phv[slot]);
                self.st.request.extend_from_slice(&b[8 - bytes..]);
            }
            return Outcome::ToServer;
        }
        self.st.deparse(&self.code, frame, off);
        self.st.forward()
    }

    /// The server the last packet [`pre`](Self::pre) sent to a server must go to, if its
    /// program set `meta.server` (server `s` is `s + 1`; 0, the default, lets the group's
    /// selection pick one by the flow).
    pub fn server(&self) -> Option<u16> {
        (self.st.phv[SERVER] != 0).then(|| (self.st.phv[SERVER] - 1) as u16)
    }

    /// The request parameters of the last packet [`pre`](Self::pre) sent to a server.
    pub fn request(&self) -> &[u8] {
        &self.st.request
    }

    /// Bytes of the last frame parsed after its EtherType (its IPv4 header and TCP or UDP
    /// header): a CLIP header's `parsed_len`.
    pub fn parsed_len(&self) -> u16 {
        self.st.parsed_len
    }

    /// Bytes of request (and of response) parameters the program's packets carry.
    pub fn param_len(&self) -> usize {
        self.code.request.iter().map(|r| r.1).sum()
    }

    /// Whether the first mirrored table the last packet reached matched it (None: it reached
    /// none).
    pub fn mirrored_hit(&self) -> Option<bool> {
        self.st.mirrored_hit
    }

    /// That table's rank among the mirrored tables (valid while
    /// [`mirrored_hit`](Self::mirrored_hit) is Some).
    pub fn mirrored_rank(&self) -> usize {
        self.st.mirrored_rank
    }

    /// The mirrored tables (a mirrored table's rank is its place in this count).
    pub fn mirrored_count(&self) -> usize {
        self.code.mirrored.len()
    }

    /// The program's first mirrored table's name.
    pub fn mirrored_table(&self) -> Option<&str> {
        self.mirrored_table_at(0)
    }

    /// The name of the mirrored table of `rank`.
    pub fn mirrored_table_at(&self, rank: usize) -> Option<&str> {
        self.code.mirrored.get(rank).map(|m| self.prog.tables[m.table].name.as_str())
    }

    /// The key the last packet looked its mirrored table up with (valid while
    /// [`mirrored_hit`](Self::mirrored_hit) is Some).
    pub fn mirrored_key(&self) -> &[u64] {
        &self.st.mirrored_key
    }

    /// After [`post`](Self::post): the first mirrored table's entry the response answers — its
    /// key (in `key`) and its learn action's parameters (in `params`, from the response's
    /// fields). False (nothing written) when that table has no learn action.
    pub fn learned(&self, key: &mut Vec<u64>, params: &mut Vec<u64>) -> bool {
        self.learned_at(0, key, params)
    }

    /// As [`learned`](Self::learned), for the mirrored table of `rank` (each learning table's
    /// entry is read from the response's frame and fields; the switch keeps the one its
    /// controller waits for).
    pub fn learned_at(&self, rank: usize, key: &mut Vec<u64>, params: &mut Vec<u64>) -> bool {
        if self.code.mirrored.get(rank).is_none_or(|m| m.learn.is_none()) {
            return false;
        }
        let (k, p) = &self.st.learned[rank];
        key.clone_from(k);
        params.clone_from(p);
        true
    }

    /// What the last response [`post`](Self::post) ran says of the first mirrored table's
    /// learned entry, by that table's `install` and `remove` conditions (None: neither holds,
    /// or the table has none: the heavy-hitter offload decides).
    pub fn learn_decision(&self) -> Option<LearnDecision> {
        let m = self.code.mirrored.first()?;
        let holds = |c: Option<(usize, bool, u64)>| c.is_some_and(|(slot, eq, v)| (self.st.phv[slot] == v) == eq);
        if holds(m.remove) {
            Some(LearnDecision::Remove)
        } else if holds(m.install) {
            Some(LearnDecision::Install)
        } else {
            None
        }
    }

    /// Whether the first mirrored table's entries are installed and removed by responses
    /// (`install`/`remove`) rather than chosen by the heavy-hitter offload.
    pub fn installs_by_response(&self) -> bool {
        self.code.mirrored.first().is_some_and(|m| m.install.is_some())
    }

    /// The first mirrored table's learn action's name.
    pub fn learn_action(&self) -> Option<&str> {
        self.learn_action_at(0)
    }

    /// The learn action's name of the mirrored table of `rank`.
    pub fn learn_action_at(&self, rank: usize) -> Option<&str> {
        let m = self.code.mirrored.get(rank)?;
        m.learn.as_ref().map(|(a, _)| self.prog.actions[*a].name.as_str())
    }

    /// Runs `post_processing` on a server's response: `frame` is the original frame (its CLIP
    /// header taken out), `response` the response's parameters (as [`Outcome::ToServer`] lays
    /// out a request's). A response of the wrong length is dropped.
    pub fn post(&mut self, frame: &mut [u8], response: &[u8]) -> Outcome {
        let want: usize = self.code.response.iter().map(|r| r.1).sum();
        if response.len() != want {
            return Outcome::Drop("response_length");
        }
        let Some(off) = self.st.parse(&self.code, frame) else { return Outcome::Drop("malformed") };
        let mut at = 0;
        for &(slot, k) in &self.code.response {
            self.st.set(&self.code.widths, slot, be(&response[at..at + k]));
            at += k;
        }
        for (rank, m) in self.code.mirrored.iter().enumerate() {
            let Some((_, slots)) = &m.learn else { continue };
            let st = &mut self.st;
            let phv = &st.phv;
            let (key, params) = &mut st.learned[rank];
            key.clear();
            key.extend(self.code.tables[m.table].key.iter().map(|&(slot, _, _)| phv[slot]));
            params.clear();
            params.extend(slots.iter().map(|&s| phv[s]));
        }
        if let Some(d) = self.st.run(&self.code, true) {
            return d;
        }
        self.st.deparse(&self.code, frame, off);
        self.st.forward()
    }
}
