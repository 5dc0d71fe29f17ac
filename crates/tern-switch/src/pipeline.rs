//! The switch pipeline (CLIP §III-C; docs/clip.md, "The pipeline"), sans I/O: a checked
//! [`Program`] run on frames. The parser extracts Ethernet, IPv4 and TCP or UDP fields into the
//! packet header vector (PHV); `pre_processing` applies its tables and actions; a packet whose
//! actions set `flight` goes to a server with the request's parameters ([`Outcome::ToServer`]);
//! otherwise the deparser writes the changed fields back (IPv4 header and TCP/UDP checksums
//! recomputed) and the packet leaves. A server's response comes back through
//! [`Pipeline::post`]: its parameters become `res.*` and `post_processing` runs.
//!
//! Tables: an all-exact key is a hash lookup; a key with an `lpm` or `ternary` field is matched
//! entry by entry (the longest prefix, then the highest priority, then the earliest entry).
//! A field of a header the packet lacks reads as 0 and writes to it are dropped. A register
//! index is taken modulo the array's size (indexes are often hashes).

use hashbrown::HashMap;
use tern_table::sketch::fmix64;

use crate::place::MatchKind;
use crate::program::{Action, AluKind, HEADER_FIELDS, Op, Operand, Program};

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

/// What happens to a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It leaves, out of `meta.egress_port` if an action set it (None: by regular forwarding;
    /// port 0 reads as unset).
    Forward { port: Option<u16> },
    /// It goes to a server with these request parameters (each `req.*` field in declaration
    /// order, big-endian, `ceil(bits / 8)` bytes).
    ToServer { request: Vec<u8> },
    /// It is dropped, and why.
    Drop(&'static str),
}

#[derive(Debug, Clone)]
struct Entry {
    key: Vec<KeyMatch>,
    priority: u32,
    action: usize,
    params: Vec<u64>,
}

#[derive(Debug, Clone, Default)]
struct TableState {
    /// All-exact keys: key values → entry.
    exact: HashMap<Vec<u64>, Entry>,
    /// Otherwise, entries in insertion order.
    list: Vec<Entry>,
    hits: u64,
    misses: u64,
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
enum Step {
    Table(usize),
    Action(usize),
}

/// A loaded program: its tables' entries and its registers.
#[derive(Debug, Clone)]
pub struct Pipeline {
    prog: Program,
    /// The program's actions, shared so that running one borrows nothing of the pipeline.
    actions: std::sync::Arc<[Action]>,
    /// `pre_processing` and `post_processing`, resolved.
    pre: Vec<Step>,
    post: Vec<Step>,
    /// Field name → PHV slot; slot widths.
    slots: HashMap<String, usize>,
    widths: Vec<u32>,
    tables: Vec<TableState>,
    registers: Vec<Vec<u64>>,
    phv: Vec<u64>,
}

fn mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1u64 << bits) - 1 }
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x))
}

fn put_be(b: &mut [u8], v: u64) {
    let n = b.len();
    for (i, x) in b.iter_mut().enumerate() {
        *x = (v >> (8 * (n - 1 - i))) as u8;
    }
}

impl Pipeline {
    /// `prog` with empty tables and zeroed registers.
    pub fn new(prog: Program) -> Pipeline {
        let mut slots = HashMap::new();
        let mut widths = Vec::new();
        for (n, b) in HEADER_FIELDS
            .iter()
            .map(|&(n, b)| (n.to_string(), b))
            .chain(prog.request.iter().chain(&prog.response).chain(&prog.metadata).cloned())
        {
            slots.insert(n, widths.len());
            widths.push(b);
        }
        let tables = vec![TableState::default(); prog.tables.len()];
        let registers = prog.registers.iter().map(|r| vec![0; r.entries as usize]).collect();
        let phv = vec![0; widths.len()];
        let resolve = |steps: &[String]| -> Vec<Step> {
            steps
                .iter()
                .filter_map(|s| match prog.tables.iter().position(|t| t.name == *s) {
                    Some(t) => Some(Step::Table(t)),
                    None => prog.actions.iter().position(|a| a.name == *s).map(Step::Action),
                })
                .collect()
        };
        let (pre, post) = (resolve(&prog.pre_processing), resolve(&prog.post_processing));
        let actions = prog.actions.clone().into();
        Pipeline { prog, actions, pre, post, slots, widths, tables, registers, phv }
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.prog
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
        let ti = self.prog.tables.iter().position(|t| t.name == table).ok_or_else(|| format!("no table `{table}`"))?;
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
        let e = Entry { key: key.to_vec(), priority, action: ai, params: params.to_vec() };
        let st = &mut self.tables[ti];
        if t.key.iter().all(|k| k.1 == MatchKind::Exact) {
            let vals = key.iter().map(|k| if let KeyMatch::Exact(v) = k { *v } else { 0 }).collect();
            if !st.exact.contains_key(&vals) && st.exact.len() as u64 >= t.size {
                return Err(format!("table `{table}` is full ({} entries)", t.size));
            }
            st.exact.insert(vals, e);
        } else {
            if st.list.len() as u64 >= t.size {
                return Err(format!("table `{table}` is full ({} entries)", t.size));
            }
            st.list.push(e);
        }
        Ok(())
    }

    /// Removes `table`'s entry with exactly this key; whether there was one.
    pub fn remove(&mut self, table: &str, key: &[KeyMatch]) -> bool {
        let Some(ti) = self.prog.tables.iter().position(|t| t.name == table) else { return false };
        let st = &mut self.tables[ti];
        let vals: Option<Vec<u64>> =
            key.iter().map(|k| if let KeyMatch::Exact(v) = k { Some(*v) } else { None }).collect();
        if let Some(v) = vals
            && st.exact.remove(&v).is_some()
        {
            return true;
        }
        let before = st.list.len();
        st.list.retain(|e| e.key != key);
        st.list.len() != before
    }

    /// A register array's cells.
    pub fn register(&self, name: &str) -> Option<&[u64]> {
        self.prog.registers.iter().position(|r| r.name == name).map(|i| self.registers[i].as_slice())
    }

    /// A table's hits and misses so far.
    pub fn table_counts(&self, name: &str) -> Option<(u64, u64)> {
        self.prog.tables.iter().position(|t| t.name == name).map(|i| (self.tables[i].hits, self.tables[i].misses))
    }

    /// Runs `pre_processing` on `frame` (received on `ingress_port`), changing it in place.
    pub fn pre(&mut self, frame: &mut [u8], ingress_port: u16) -> Outcome {
        let Some(off) = self.parse(frame) else { return Outcome::Drop("malformed") };
        self.set("meta.ingress_port", u64::from(ingress_port));
        if let Some(d) = self.run(false) {
            return d;
        }
        if self.get("meta.flight") == 1 {
            let mut request = Vec::new();
            for (n, b) in &self.prog.request {
                let mut bytes = vec![0u8; b.div_ceil(8) as usize];
                put_be(&mut bytes, self.get(n));
                request.extend_from_slice(&bytes);
            }
            return Outcome::ToServer { request };
        }
        self.deparse(frame, off);
        self.forward()
    }

    /// Runs `post_processing` on a server's response: `frame` is the original frame (its CLIP
    /// header taken out), `response` the response's parameters (as [`Outcome::ToServer`] lays
    /// out a request's). A response of the wrong length is dropped.
    pub fn post(&mut self, frame: &mut [u8], response: &[u8]) -> Outcome {
        let want: usize = self.prog.response.iter().map(|(_, b)| b.div_ceil(8) as usize).sum();
        if response.len() != want {
            return Outcome::Drop("response_length");
        }
        let Some(off) = self.parse(frame) else { return Outcome::Drop("malformed") };
        let mut at = 0;
        for (n, b) in self.prog.response.clone() {
            let k = b.div_ceil(8) as usize;
            self.set(&n, be(&response[at..at + k]) & mask(b));
            at += k;
        }
        if let Some(d) = self.run(true) {
            return d;
        }
        self.deparse(frame, off);
        self.forward()
    }

    fn forward(&self) -> Outcome {
        let port = self.get("meta.egress_port");
        Outcome::Forward { port: (port != 0).then_some(port as u16) }
    }

    fn get(&self, field: &str) -> u64 {
        self.slots.get(field).map_or(0, |&i| self.phv[i])
    }

    fn set(&mut self, field: &str, v: u64) {
        if let Some(&i) = self.slots.get(field) {
            self.phv[i] = v & mask(self.widths[i]);
        }
    }

    /// Extracts the headers into a cleared PHV; None for a frame shorter than Ethernet.
    fn parse(&mut self, f: &[u8]) -> Option<Offsets> {
        if f.len() < 14 {
            return None;
        }
        self.phv.fill(0);
        let mut off = Offsets::default();
        self.set("ethernet.dst", be(&f[0..6]));
        self.set("ethernet.src", be(&f[6..12]));
        let ty = be(&f[12..14]);
        self.set("ethernet.type", ty);
        if ty == 0x0800 && f.len() >= 34 && f[14] >> 4 == 4 && (f[14] & 0xf) >= 5 {
            let l3 = 14;
            let ihl = usize::from(f[l3] & 0xf) * 4;
            if f.len() >= l3 + ihl {
                off.ipv4 = Some(l3);
                self.set("ipv4.tos", u64::from(f[l3 + 1]));
                self.set("ipv4.ttl", u64::from(f[l3 + 8]));
                self.set("ipv4.proto", u64::from(f[l3 + 9]));
                self.set("ipv4.src", be(&f[l3 + 12..l3 + 16]));
                self.set("ipv4.dst", be(&f[l3 + 16..l3 + 20]));
                let l4 = l3 + ihl;
                match f[l3 + 9] {
                    6 if f.len() >= l4 + 20 => {
                        off.tcp = Some(l4);
                        self.set("tcp.src_port", be(&f[l4..l4 + 2]));
                        self.set("tcp.dst_port", be(&f[l4 + 2..l4 + 4]));
                        self.set("tcp.seq", be(&f[l4 + 4..l4 + 8]));
                        self.set("tcp.flags", u64::from(f[l4 + 13]));
                    }
                    17 if f.len() >= l4 + 8 => {
                        off.udp = Some(l4);
                        self.set("udp.src_port", be(&f[l4..l4 + 2]));
                        self.set("udp.dst_port", be(&f[l4 + 2..l4 + 4]));
                    }
                    _ => {}
                }
            }
        }
        Some(off)
    }

    /// Writes the header fields back into `f` and recomputes the checksums they cover.
    fn deparse(&self, f: &mut [u8], off: Offsets) {
        let put = |f: &mut [u8], at: std::ops::Range<usize>, v: u64| put_be(&mut f[at], v);
        put(f, 0..6, self.get("ethernet.dst"));
        put(f, 6..12, self.get("ethernet.src"));
        put(f, 12..14, self.get("ethernet.type"));
        let Some(l3) = off.ipv4 else { return };
        let before: Vec<u8> = f[l3..l3 + 20].to_vec();
        f[l3 + 1] = self.get("ipv4.tos") as u8;
        f[l3 + 8] = self.get("ipv4.ttl") as u8;
        f[l3 + 9] = self.get("ipv4.proto") as u8;
        put(f, l3 + 12..l3 + 16, self.get("ipv4.src"));
        put(f, l3 + 16..l3 + 20, self.get("ipv4.dst"));
        let ip_changed = f[l3..l3 + 20] != before[..];
        if ip_changed {
            tern_wire::frame::ipv4_fill_checksum(f, l3);
        }
        let total = (be(&f[l3 + 2..l3 + 4]) as usize + l3).min(f.len());
        let (l4, csum_at, proto, ports) = if let Some(l4) = off.tcp {
            (l4, l4 + 16, 6u8, ("tcp.src_port", "tcp.dst_port"))
        } else if let Some(l4) = off.udp {
            (l4, l4 + 6, 17u8, ("udp.src_port", "udp.dst_port"))
        } else {
            return;
        };
        let before4: Vec<u8> = f[l4..l4 + 4].to_vec();
        put(f, l4..l4 + 2, self.get(ports.0));
        put(f, l4 + 2..l4 + 4, self.get(ports.1));
        if proto == 6 {
            put(f, l4 + 4..l4 + 8, self.get("tcp.seq"));
            f[l4 + 13] = self.get("tcp.flags") as u8;
        }
        let l4_changed = f[l4..l4 + 4] != before4[..];
        // A UDP checksum of 0 means none was computed: left so.
        let udp_none = proto == 17 && f[csum_at..csum_at + 2] == [0, 0];
        if (ip_changed || l4_changed || proto == 6) && !udp_none && total > csum_at + 1 && total <= f.len() {
            tern_wire::frame::fill_l4_checksum(f, (l3 + 12, l3 + 16), (l3 + 16, l3 + 20), proto, l4, total, csum_at);
        }
    }

    /// Runs `pre_processing` (or, `post`, `post_processing`); Some if an action dropped the
    /// packet.
    fn run(&mut self, post: bool) -> Option<Outcome> {
        let actions = self.actions.clone();
        let n = if post { self.post.len() } else { self.pre.len() };
        for i in 0..n {
            let step = if post { self.post[i] } else { self.pre[i] };
            let (ai, params) = match step {
                Step::Table(ti) => self.lookup(ti),
                Step::Action(ai) => (ai, Vec::new()),
            };
            if let Some(d) = self.exec(&actions[ai], &params) {
                return Some(d);
            }
        }
        None
    }

    /// The action and parameters table `ti` gives the PHV's key (its default on a miss).
    fn lookup(&mut self, ti: usize) -> (usize, Vec<u64>) {
        let t = &self.prog.tables[ti];
        let vals: Vec<u64> = t.key.iter().map(|(f, _)| self.get(f)).collect();
        let widths: Vec<u32> = t.key.iter().map(|(f, _)| self.prog.width(f).unwrap_or(64)).collect();
        let st = &self.tables[ti];
        let hit = if t.key.iter().all(|k| k.1 == MatchKind::Exact) {
            st.exact.get(&vals).cloned()
        } else {
            let matches = |e: &Entry| {
                e.key.iter().zip(&vals).zip(&widths).all(|((k, &v), &w)| match *k {
                    KeyMatch::Exact(x) => x == v,
                    KeyMatch::Lpm(x, len) => {
                        let len = u32::from(len).min(w);
                        let m = if len == 0 { 0 } else { mask(len) << (w - len) };
                        x & m == v & m
                    }
                    KeyMatch::Ternary(x, m) => x & m == v & m,
                })
            };
            let lpm_len = |e: &Entry| {
                e.key.iter().map(|k| if let KeyMatch::Lpm(_, l) = k { u32::from(*l) } else { 0 }).sum::<u32>()
            };
            let mut best: Option<&Entry> = None;
            for e in st.list.iter().filter(|e| matches(e)) {
                let better = match best {
                    None => true,
                    Some(b) => (lpm_len(e), e.priority) > (lpm_len(b), b.priority),
                };
                if better {
                    best = Some(e);
                }
            }
            best.cloned()
        };
        match hit {
            Some(e) => {
                self.tables[ti].hits += 1;
                (e.action, e.params)
            }
            None => {
                self.tables[ti].misses += 1;
                let d = self.prog.actions.iter().position(|a| a.name == t.default).unwrap_or(0);
                (d, Vec::new())
            }
        }
    }

    fn value(&self, o: &Operand, action: &Action, params: &[u64]) -> u64 {
        match o {
            Operand::Const(v) => *v,
            Operand::Field(f) => match f.strip_prefix("param.") {
                Some(p) => {
                    action.params.iter().position(|(n, _)| n == p).and_then(|i| params.get(i)).copied().unwrap_or(0)
                }
                None => self.get(f),
            },
        }
    }

    fn reg_index(&self, name: &str) -> Option<usize> {
        self.prog.registers.iter().position(|r| r.name == name)
    }

    /// Runs an action's operations; Some if it dropped the packet.
    fn exec(&mut self, a: &Action, params: &[u64]) -> Option<Outcome> {
        for op in &a.ops {
            match op {
                Op::Set { dst, src } => {
                    let v = self.value(src, a, params);
                    self.set(dst, v);
                }
                Op::Alu { kind, dst, a: x, b: y } => {
                    let (x, y) = (self.value(x, a, params), self.value(y, a, params));
                    let v = match kind {
                        AluKind::Add => x.wrapping_add(y),
                        AluKind::Sub => x.wrapping_sub(y),
                        AluKind::And => x & y,
                        AluKind::Or => x | y,
                        AluKind::Xor => x ^ y,
                    };
                    self.set(dst, v);
                }
                Op::Hash { dst, fields } => {
                    let h = fields.iter().fold(0x9e37_79b9_7f4a_7c15u64, |acc, f| fmix64(acc ^ self.get(f)));
                    self.set(dst, h);
                }
                Op::RegRead { register, index, dst } => {
                    if let Some(r) = self.reg_index(register) {
                        let n = self.registers[r].len() as u64;
                        let i = (self.value(index, a, params) % n) as usize;
                        let v = self.registers[r][i];
                        self.set(dst, v);
                    }
                }
                Op::RegWrite { register, index, src } => {
                    if let Some(r) = self.reg_index(register) {
                        let n = self.registers[r].len() as u64;
                        let i = (self.value(index, a, params) % n) as usize;
                        let bits = self.prog.registers[r].bits;
                        self.registers[r][i] = self.value(src, a, params) & mask(bits);
                    }
                }
                Op::RegAdd { register, index, value, dst } => {
                    if let Some(r) = self.reg_index(register) {
                        let n = self.registers[r].len() as u64;
                        let i = (self.value(index, a, params) % n) as usize;
                        let bits = self.prog.registers[r].bits;
                        let v = self.registers[r][i].wrapping_add(self.value(value, a, params)) & mask(bits);
                        self.registers[r][i] = v;
                        if let Some(d) = dst {
                            self.set(d, v);
                        }
                    }
                }
                Op::Egress { port } => {
                    let p = self.value(port, a, params);
                    self.set("meta.egress_port", p);
                }
                Op::Ecmp | Op::Flight => self.set("meta.flight", 1),
                Op::Drop => return Some(Outcome::Drop("dropped_by_program")),
            }
        }
        None
    }
}
