//! The target-aware deserializer (RpcNIC §III-B) in software: one table-driven pass over the
//! wire bytes, driven by the schema table loaded at run time (no code generated per schema).
//!
//! Each string and bytes value goes to the arena its placement names — host, or device for a
//! field with `(tern.acc)` and everything inside such a sub-message — from the two chunk pools.
//! The deserializer counts what the NIC would write: in [`WriteMode::OneShot`], host values are
//! gathered in a temp buffer (`temp_buffer_bytes`, 4 KB by default) and written once per fill and
//! once at the message's end (the paper's one-shot DMA write; here the gathering buffer is the
//! host arena chunk itself, so no value is copied twice); a value that does not fit an empty
//! buffer is written on its own after what was gathered. In [`WriteMode::FieldByField`], one
//! write per host value. Both build the same message. Device values are written where they go,
//! one write each.
//!
//! Every value is copied (no lazy parsing): the input may be overwritten once `decode` returns.
//!
//! Bad input gets a [`DecodeError`] naming the field path (`M1.f17.f2`) and byte offset, never a
//! panic: see [`DecodeErrorKind`]. On an error every chunk taken goes back to its pool.

use std::fmt;

use crate::arena::{Arena, ChunkPool, Pool, Span};
use crate::message::{DecodeStats, Elem, Entry, Message, NONE, Node, Slot};
use crate::schema::{ClassId, Kind, Label, SchemaTable, WireType};
use crate::wire::{self, FieldRef, Reader, Value, WireErrorKind};

/// How host writes are counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Gathered per temp-buffer fill and message end (RpcNIC).
    #[default]
    OneShot,
    /// One write per host value (the traditional deserializer).
    FieldByField,
}

/// Limits and modes of a decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeOptions {
    /// Largest input accepted (checked before anything is allocated). Default 64 MiB.
    pub max_message_bytes: usize,
    /// Deepest nesting of messages and groups, the top-level message counting 1. Default 100.
    pub max_depth: u32,
    /// Bytes of the temp buffer one-shot writes gather in. Default 4096.
    pub temp_buffer_bytes: usize,
    /// How host writes are counted.
    pub mode: WriteMode,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { max_message_bytes: 64 << 20, max_depth: 100, temp_buffer_bytes: 4096, mode: WriteMode::OneShot }
    }
}

/// The host and device chunk pools decodes take memory from.
#[derive(Debug, Clone)]
pub struct Pools {
    /// Host memory.
    pub host: ChunkPool,
    /// Device memory.
    pub device: ChunkPool,
}

impl Pools {
    /// Two pools of `chunk`-byte chunks, each with at most `limit` chunks out at once.
    pub fn new(chunk: usize, limit: usize) -> Pools {
        Pools { host: ChunkPool::new(chunk, limit), device: ChunkPool::new(chunk, limit) }
    }
}

impl Default for Pools {
    /// 4 KB chunks, up to 64 Ki chunks (256 MiB) out per pool.
    fn default() -> Self {
        Pools::new(4096, 1 << 16)
    }
}

/// What is wrong with the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// Malformed wire bytes.
    Wire(WireErrorKind),
    /// A known field with another wire type than its type has.
    WrongWireType {
        /// The field's type.
        field_type: &'static str,
        /// The wire type found.
        wire: u8,
    },
    /// A packed field whose length is not a whole number of its fixed-width values.
    PackedLength,
    /// A proto3 string that is not UTF-8.
    InvalidUtf8,
    /// The input is larger than the limit.
    TooLarge {
        /// Input bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Messages nested past the limit.
    TooDeep {
        /// The limit.
        max: u32,
    },
    /// A pool has no chunk left.
    PoolExhausted(Pool),
}

impl fmt::Display for DecodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeErrorKind::Wire(w) => w.fmt(f),
            DecodeErrorKind::WrongWireType { field_type, wire } => {
                write!(f, "wire type {wire} for a {field_type} field")
            }
            DecodeErrorKind::PackedLength => f.write_str("a packed length that is not a whole number of values"),
            DecodeErrorKind::InvalidUtf8 => f.write_str("a proto3 string that is not UTF-8"),
            DecodeErrorKind::TooLarge { len, max } => write!(f, "{len} bytes: messages may have at most {max}"),
            DecodeErrorKind::TooDeep { max } => write!(f, "messages nested more than {max} deep"),
            DecodeErrorKind::PoolExhausted(p) => write!(f, "the {} chunk pool is exhausted", pool_name(*p)),
        }
    }
}

fn pool_name(p: Pool) -> &'static str {
    match p {
        Pool::Host => "host",
        Pool::Device => "device",
    }
}

/// A decode error: what, where in the message (`M1.f17.f2`: the top-level class's short name,
/// then field names), and at which byte of the input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {kind} at byte {offset}")]
pub struct DecodeError {
    /// The field path.
    pub path: String,
    /// The byte offset.
    pub offset: usize,
    /// What.
    pub kind: DecodeErrorKind,
}

struct Dec<'t, 'i> {
    table: &'t SchemaTable,
    input: &'i [u8],
    opts: DecodeOptions,
    msg: Message<'t>,
    /// Host values borrow the input instead of being copied.
    alias: bool,
    /// (class, field index) of each field being decoded, for error paths.
    path: Vec<(ClassId, u16)>,
    /// Per depth: field index -> the node's entry for it (NONE), while that node decodes.
    levels: Vec<Vec<u32>>,
    temp_used: usize,
}

/// Decodes `input` as a message of class `class`, copying every value (copy mode: the input may
/// be reused as soon as this returns).
pub fn decode<'t>(
    table: &'t SchemaTable,
    class: ClassId,
    input: &[u8],
    pools: &Pools,
    opts: &DecodeOptions,
) -> Result<Message<'t>, DecodeError> {
    run(table, class, input, &[], pools, opts)
}

/// Decodes `input` as a message of class `class` in alias mode: host-placed string and bytes
/// values (and unknown fields) borrow the input instead of being copied, so the message borrows
/// it too. Device-placed values are still copied into device memory. The same message as
/// [`decode`] builds, with the same counts.
pub fn decode_alias<'t>(
    table: &'t SchemaTable,
    class: ClassId,
    input: &'t [u8],
    pools: &Pools,
    opts: &DecodeOptions,
) -> Result<Message<'t>, DecodeError> {
    run(table, class, input, input, pools, opts)
}

/// `kept` is the input when values borrow it (alias mode), empty otherwise.
fn run<'t>(
    table: &'t SchemaTable,
    class: ClassId,
    input: &[u8],
    kept: &'t [u8],
    pools: &Pools,
    opts: &DecodeOptions,
) -> Result<Message<'t>, DecodeError> {
    if input.len() > opts.max_message_bytes {
        return Err(DecodeError {
            path: table.class(class).short_name().to_string(),
            offset: 0,
            kind: DecodeErrorKind::TooLarge { len: input.len(), max: opts.max_message_bytes },
        });
    }
    let msg = Message {
        table,
        input: kept,
        nodes: Vec::with_capacity(8),
        entries: Vec::with_capacity(32),
        elems: Vec::new(),
        host: Arena::new(pools.host.clone()),
        device: Arena::new(pools.device.clone()),
        stats: DecodeStats::default(),
    };
    let alias = !kept.is_empty();
    let mut d = Dec { table, input, opts: *opts, msg, alias, path: Vec::new(), levels: Vec::new(), temp_used: 0 };
    d.msg.nodes.push(Node { class, first: NONE, last: NONE, unknown: NONE, unknown_last: NONE, device: false });
    let mut r = Reader::new(input);
    d.fields(0, &mut r, 1, None)?;
    if d.opts.mode == WriteMode::OneShot && d.temp_used > 0 {
        d.msg.stats.host_writes += 1;
    }
    d.msg.stats.host_chunks = d.msg.host.chunks_taken;
    d.msg.stats.device_chunks = d.msg.device.chunks_taken;
    Ok(d.msg)
}

impl<'t> Dec<'t, '_> {
    fn error(&self, kind: DecodeErrorKind, offset: usize, root: ClassId) -> DecodeError {
        let mut path = self.table.class(root).short_name().to_string();
        for &(c, f) in &self.path {
            path.push('.');
            path.push_str(&self.table.class(c).fields[usize::from(f)].name);
        }
        DecodeError { path, offset, kind }
    }

    fn fail(&self, kind: DecodeErrorKind, offset: usize) -> DecodeError {
        self.error(kind, offset, self.msg.nodes[0].class)
    }

    fn wire_err(&self, e: wire::WireError) -> DecodeError {
        self.fail(DecodeErrorKind::Wire(e.kind), e.offset)
    }

    /// Counts a host or device value of `bytes` bytes.
    #[inline]
    fn count(&mut self, device: bool, bytes: usize) {
        let s = &mut self.msg.stats;
        if device {
            s.device_writes += 1;
            s.device_bytes += bytes as u64;
            return;
        }
        s.host_bytes += bytes as u64;
        match self.opts.mode {
            WriteMode::FieldByField => s.host_writes += 1,
            WriteMode::OneShot => {
                let t = self.opts.temp_buffer_bytes.max(1);
                if bytes >= t {
                    // Larger than the temp buffer: what is gathered goes first, then the value
                    // in one write of its own.
                    s.host_writes += u64::from(self.temp_used > 0) + 1;
                    self.temp_used = 0;
                } else if self.temp_used + bytes > t {
                    // The buffer is full: written, and the value starts the next fill.
                    s.host_writes += 1;
                    self.temp_used = bytes;
                } else {
                    self.temp_used += bytes;
                }
            }
        }
    }

    fn store(&mut self, device: bool, bytes: &[u8], at: usize) -> Result<Slot, DecodeError> {
        if self.alias && !device {
            // A slice of the input is borrowed (its offset: the distance between the starts);
            // bytes made here (a closed enum's rejected packed values) are copied as usual.
            let (start, p) = (self.input.as_ptr() as usize, bytes.as_ptr() as usize);
            if p >= start && p + bytes.len() <= start + self.input.len() {
                self.count(false, bytes.len());
                let span =
                    Span { chunk: crate::message::INPUT_CHUNK, off: (p - start) as u32, len: bytes.len() as u32 };
                return Ok(Slot::Bytes(Pool::Host, span));
            }
        }
        let (pool, arena) =
            if device { (Pool::Device, &mut self.msg.device) } else { (Pool::Host, &mut self.msg.host) };
        let span: Option<Span> = arena.push(bytes);
        match span {
            Some(s) => {
                self.count(device, bytes.len());
                Ok(Slot::Bytes(pool, s))
            }
            None => Err(self.fail(DecodeErrorKind::PoolExhausted(pool), at)),
        }
    }

    /// Decodes fields into `node` until the reader ends (or, for a group, its end-group tag).
    fn fields(&mut self, node: u32, r: &mut Reader<'_>, depth: u32, group: Option<u32>) -> Result<(), DecodeError> {
        let class_id = self.msg.nodes[node as usize].class;
        let table = self.table;
        let class = table.class(class_id);
        let level = depth as usize;
        if self.levels.len() <= level {
            self.levels.resize_with(level + 1, Vec::new);
        }
        {
            let idx = &mut self.levels[level];
            idx.clear();
            idx.resize(class.fields.len(), NONE);
            // A node decoded again (a sub-message given twice merges): its entries so far.
            let mut e = self.msg.nodes[node as usize].first;
            while e != NONE {
                let entry = &self.msg.entries[e as usize];
                idx[usize::from(entry.field)] = e;
                e = entry.next;
            }
        }
        loop {
            let f = match r.next_field() {
                Ok(Some(f)) => f,
                Ok(None) => {
                    if group.is_some() {
                        return Err(self.fail(DecodeErrorKind::Wire(WireErrorKind::UnclosedGroup), r.offset()));
                    }
                    return Ok(());
                }
                Err(e) => return Err(self.wire_err(e)),
            };
            if f.value == Value::EndGroup {
                if group == Some(f.number) {
                    return Ok(());
                }
                return Err(self.fail(DecodeErrorKind::Wire(WireErrorKind::UnmatchedEndGroup), f.start));
            }
            let Some(fi) = class.index_of(f.number) else {
                if f.value == Value::StartGroup {
                    r.skip_group(f.number, self.opts.max_depth.saturating_sub(depth)).map_err(|e| self.wire_err(e))?;
                }
                let raw = &self.input[f.start..r.offset()];
                self.unknown(node, raw, f.start)?;
                continue;
            };
            self.path.push((class_id, fi as u16));
            self.field(node, fi, f, r, depth)?;
            self.path.pop();
        }
    }

    fn unknown(&mut self, node: u32, raw: &[u8], at: usize) -> Result<(), DecodeError> {
        let slot = self.store(false, raw, at)?;
        let i = self.msg.elems.len() as u32;
        self.msg.elems.push(Elem { slot, next: NONE });
        let n = &mut self.msg.nodes[node as usize];
        if n.unknown == NONE {
            n.unknown = i;
        } else {
            let last = n.unknown_last;
            self.msg.elems[last as usize].next = i;
        }
        self.msg.nodes[node as usize].unknown_last = i;
        Ok(())
    }

    /// The node's entry for field `fi`, made if absent (`list`: as an empty list).
    fn entry(&mut self, node: u32, fi: usize, depth: u32, slot: Slot) -> u32 {
        let e = self.msg.entries.len() as u32;
        self.msg.entries.push(Entry { field: fi as u16, slot, next: NONE, last: NONE, len: 0 });
        let n = &mut self.msg.nodes[node as usize];
        if n.first == NONE {
            n.first = e;
        } else {
            let last = n.last;
            self.msg.entries[last as usize].next = e;
        }
        self.msg.nodes[node as usize].last = e;
        self.levels[depth as usize][fi] = e;
        e
    }

    /// Removes the node's entries of the other members of field `fi`'s oneof.
    fn clear_oneof(&mut self, node: u32, fi: usize, depth: u32) {
        let class = self.table.class(self.msg.nodes[node as usize].class);
        let Some(o) = class.fields[fi].oneof else { return };
        for (other, f) in class.fields.iter().enumerate() {
            if other == fi || f.oneof != Some(o) {
                continue;
            }
            let e = self.levels[depth as usize][other];
            if e == NONE {
                continue;
            }
            self.levels[depth as usize][other] = NONE;
            // Unlink it.
            let n = self.msg.nodes[node as usize];
            let next = self.msg.entries[e as usize].next;
            if n.first == e {
                self.msg.nodes[node as usize].first = next;
            } else {
                let mut p = n.first;
                while self.msg.entries[p as usize].next != e {
                    p = self.msg.entries[p as usize].next;
                }
                self.msg.entries[p as usize].next = next;
                if n.last == e {
                    self.msg.nodes[node as usize].last = p;
                }
            }
            if self.msg.nodes[node as usize].first == NONE {
                self.msg.nodes[node as usize].last = NONE;
            }
        }
    }

    fn push_elem(&mut self, e: u32, slot: Slot) {
        let i = self.msg.elems.len() as u32;
        self.msg.elems.push(Elem { slot, next: NONE });
        let entry = &mut self.msg.entries[e as usize];
        if entry.len == 0 {
            entry.slot = Slot::List(i);
        } else {
            let last = entry.last;
            self.msg.elems[last as usize].next = i;
        }
        let entry = &mut self.msg.entries[e as usize];
        entry.last = i;
        entry.len += 1;
    }

    /// The node a sub-message (or group) of field `fi` decodes into: the one already there for a
    /// singular field given again (they merge), else a new one; refused past the depth limit.
    fn child(
        &mut self,
        sub: ClassId,
        fi: usize,
        at: usize,
        depth: u32,
        repeated: bool,
        device: bool,
    ) -> Result<u32, DecodeError> {
        if depth >= self.opts.max_depth {
            return Err(self.fail(DecodeErrorKind::TooDeep { max: self.opts.max_depth }, at));
        }
        let existing = if repeated { NONE } else { self.levels[depth as usize][fi] };
        if existing != NONE
            && let Slot::Msg(c) = self.msg.entries[existing as usize].slot
        {
            return Ok(c);
        }
        Ok(self.new_node(sub, device))
    }

    fn new_node(&mut self, class: ClassId, device: bool) -> u32 {
        self.msg.nodes.push(Node { class, first: NONE, last: NONE, unknown: NONE, unknown_last: NONE, device });
        (self.msg.nodes.len() - 1) as u32
    }

    /// A scalar's stored bits from its wire value, or `None` for a closed enum's undeclared
    /// number (which goes to the unknown fields).
    fn scalar(&self, kind: Kind, v: u64) -> Option<u64> {
        Some(match kind {
            Kind::Int32 | Kind::Sfixed32 => v as i32 as i64 as u64,
            Kind::Uint32 | Kind::Fixed32 | Kind::Float => v as u32 as u64,
            Kind::Bool => u64::from(v != 0),
            Kind::Sint32 => wire::unzigzag32(v as u32) as i64 as u64,
            Kind::Sint64 => wire::unzigzag64(v) as u64,
            Kind::Enum(e) => {
                let n = v as i32;
                let t = self.table.enum_type(e);
                if t.closed && !t.declares(n) {
                    return None;
                }
                n as i64 as u64
            }
            _ => v,
        })
    }

    fn field(
        &mut self,
        node: u32,
        fi: usize,
        f: FieldRef<'_>,
        r: &mut Reader<'_>,
        depth: u32,
    ) -> Result<(), DecodeError> {
        let table = self.table;
        let n = self.msg.nodes[node as usize];
        let field = &table.class(n.class).fields[fi];
        let device = n.device || field.placement == crate::schema::Placement::Device;
        let repeated = field.label == Label::Repeated;
        let wire = f.value.wire_type();
        // A packed run of scalars.
        if repeated && field.kind.packable() && wire == WireType::Len {
            let Value::Len(body) = f.value else { unreachable!() };
            let body_at = r.offset() - body.len();
            return self.packed(node, fi, field.kind, body, body_at, depth, device, f);
        }
        if wire != field.kind.wire_type() {
            return Err(
                self.fail(DecodeErrorKind::WrongWireType { field_type: field.kind.name(), wire: wire as u8 }, f.start)
            );
        }
        let slot = match (field.kind, f.value) {
            (Kind::Message(sub), Value::Len(body)) => {
                let child = self.child(sub, fi, f.start, depth, repeated, device)?;
                if !device {
                    self.count(false, 8);
                }
                let mut sub_r = Reader::at(body, r.offset() - body.len());
                self.fields(child, &mut sub_r, depth + 1, None)?;
                Slot::Msg(child)
            }
            (Kind::Group(sub), Value::StartGroup) => {
                let child = self.child(sub, fi, f.start, depth, repeated, device)?;
                self.fields(child, r, depth + 1, Some(f.number))?;
                Slot::Msg(child)
            }
            (Kind::String | Kind::Bytes, Value::Len(body)) => {
                if field.check_utf8 && std::str::from_utf8(body).is_err() {
                    return Err(self.fail(DecodeErrorKind::InvalidUtf8, r.offset() - body.len()));
                }
                self.store(device, body, f.start)?
            }
            (k, Value::Varint(v) | Value::Fixed64(v)) => match self.scalar(k, v) {
                Some(bits) => {
                    self.count(device, 8);
                    Slot::Scalar(bits)
                }
                None => {
                    let raw = &self.input[f.start..r.offset()];
                    return self.unknown(node, raw, f.start);
                }
            },
            (k, Value::Fixed32(v)) => {
                self.count(device, 8);
                Slot::Scalar(self.scalar(k, u64::from(v)).unwrap_or(u64::from(v)))
            }
            _ => unreachable!("wire types checked above"),
        };
        let e = self.levels[depth as usize][fi];
        if repeated {
            let e = if e == NONE { self.entry(node, fi, depth, Slot::List(NONE)) } else { e };
            self.push_elem(e, slot);
        } else if e == NONE {
            self.clear_oneof(node, fi, depth);
            self.entry(node, fi, depth, slot);
        } else {
            // Last one wins (a sub-message merged in place keeps its node).
            self.msg.entries[e as usize].slot = slot;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn packed(
        &mut self,
        node: u32,
        fi: usize,
        kind: Kind,
        body: &[u8],
        body_at: usize,
        depth: u32,
        device: bool,
        f: FieldRef<'_>,
    ) -> Result<(), DecodeError> {
        let mut e = self.levels[depth as usize][fi];
        if e == NONE && !body.is_empty() {
            e = self.entry(node, fi, depth, Slot::List(NONE));
        }
        let width = match kind.wire_type() {
            WireType::Fixed32 => 4,
            WireType::Fixed64 => 8,
            _ => 0,
        };
        if width > 0 && !body.len().is_multiple_of(width) {
            return Err(self.fail(DecodeErrorKind::PackedLength, f.start));
        }
        let mut pos = 0;
        let mut rejected: Vec<u8> = Vec::new();
        while pos < body.len() {
            let v = if width == 0 {
                let (v, next) = wire::read_varint(body, pos)
                    .map_err(|e| self.fail(DecodeErrorKind::Wire(e.kind), body_at + e.offset))?;
                pos = next;
                v
            } else {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(&body[pos..pos + width]);
                pos += width;
                u64::from_le_bytes(b)
            };
            match self.scalar(kind, v) {
                Some(bits) => {
                    self.count(device, 8);
                    self.push_elem(e, Slot::Scalar(bits));
                }
                None => {
                    // A closed enum's undeclared number: kept unknown, unpacked.
                    wire::put_tag(
                        &mut rejected,
                        self.table.class(self.msg.nodes[node as usize].class).fields[fi].number,
                        WireType::Varint,
                    );
                    wire::put_varint(&mut rejected, v);
                }
            }
        }
        if !rejected.is_empty() {
            self.unknown(node, &rejected, f.start)?;
        }
        Ok(())
    }
}
