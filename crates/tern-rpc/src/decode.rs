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

use crate::arena::{ChunkPool, Pool, Span};
use crate::message::{Elem, Frame, Message, NONE, SLOT_BYTES, Slot};
use crate::schema::{Class, ClassId, Fast, FastOp, Kind, Label, SchemaTable, WireType};
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
    /// Most bytes of field slots (each message instance has one [`SLOT_BYTES`]-byte slot per
    /// field its class declares) per input byte, so that a few input bytes naming sub-messages
    /// of a wide class cannot claim much memory; inputs under 4 KiB may use as much as a 4 KiB
    /// input. Default 64.
    pub max_slot_bytes_per_input_byte: usize,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions {
            max_message_bytes: 64 << 20,
            max_depth: 100,
            temp_buffer_bytes: 4096,
            mode: WriteMode::OneShot,
            max_slot_bytes_per_input_byte: 64,
        }
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
    /// The message instances' field slots would exceed their bound
    /// ([`DecodeOptions::max_slot_bytes_per_input_byte`]).
    TooManySlots {
        /// The bound in bytes, for this input.
        max: usize,
    },
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
            DecodeErrorKind::TooManySlots { max } => {
                write!(f, "message instances whose field slots take more than {max} bytes")
            }
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

/// What the fast path reads next in the message (or group) it is in.
enum Next {
    /// A field whose tag it read: where the field starts, the tag, where its value starts, and
    /// the class's entry for it.
    Field(usize, u64, usize, Fast),
    /// The end of the message's bytes.
    End,
    /// A field it leaves to the general path (the position at its start).
    Slow,
}

/// A varint, its one- and two-byte forms inline (`None` for anything [`wire::read_varint`]
/// refuses).
#[inline(always)]
fn varint(buf: &[u8], pos: usize) -> Option<(u64, usize)> {
    match *buf.get(pos..).unwrap_or_default() {
        [a, ..] if a < 0x80 => Some((u64::from(a), pos + 1)),
        [a, b, ..] if b < 0x80 => Some((u64::from(a & 0x7f) | (u64::from(b) << 7), pos + 2)),
        _ => wire::read_varint(buf, pos).ok(),
    }
}

/// Whether `b` is all ASCII (and so UTF-8): its bytes OR-ed eight at a time, no branch per
/// byte (the strings checked here are mostly short).
#[inline(always)]
fn ascii(b: &[u8]) -> bool {
    let (words, rest) = b.as_chunks::<8>();
    let mut acc = 0u64;
    for w in words {
        acc |= u64::from_le_bytes(*w);
    }
    for &x in rest {
        acc |= u64::from(x);
    }
    acc & 0x8080_8080_8080_8080 == 0
}

/// Where a run of plain scalars stopped.
enum Run {
    /// At the input's end.
    Done,
    /// At something the general path reads (the position at its start).
    Slow,
    /// At a field that is not a plain scalar, its tag read: where it starts, the tag, where its
    /// value starts, and its entry.
    Field { start: usize, tag: u64, p: usize, fast: Fast },
}

/// A scalar's value at `pos` as its [`FastOp`] reads it, the bits stored and where the next
/// field starts (`None`: truncated, over-long, or a closed enum's undeclared number, all left
/// to the general path).
#[inline(always)]
fn scalar(table: &SchemaTable, fast: &Fast, buf: &[u8], pos: usize) -> Option<(u64, usize)> {
    macro_rules! fixed {
        ($n:literal, |$b:ident| $bits:expr) => {{
            let $b: [u8; $n] = *buf.get(pos..)?.first_chunk::<$n>()?;
            Some(($bits, pos + $n))
        }};
    }
    match fast.op {
        FastOp::Fixed64 => return fixed!(8, |b| u64::from_le_bytes(b)),
        FastOp::Fixed32 => return fixed!(4, |b| u64::from(u32::from_le_bytes(b))),
        FastOp::Sfixed32 => return fixed!(4, |b| i32::from_le_bytes(b) as i64 as u64),
        _ => {}
    }
    let (v, q) = varint(buf, pos)?;
    let bits = match fast.op {
        FastOp::VarInt32 => v as i32 as i64 as u64,
        FastOp::VarUint32 => u64::from(v as u32),
        FastOp::VarBool => u64::from(v != 0),
        FastOp::VarSint32 => wire::unzigzag32(v as u32) as i64 as u64,
        FastOp::VarSint64 => wire::unzigzag64(v) as u64,
        FastOp::VarClosedEnum if !table.enum_type(fast.sub).declares(v as i32) => return None,
        FastOp::VarClosedEnum => v as i32 as i64 as u64,
        _ => v,
    };
    Some((bits, q))
}

/// The decoder's innermost loop: fields that are plain scalars ([`Fast::plain`]: singular, not
/// in a oneof, host-placed), each read and stored into its slot of `slots` (the node's), marked
/// in `mask` and counted in `scalars`, until a field that is something else.
#[inline(always)]
fn plain_scalars(
    table: &SchemaTable,
    class: &Class,
    buf: &[u8],
    pos: &mut usize,
    slots: &mut [Slot],
    mask: &mut u64,
    scalars: &mut u64,
) -> Run {
    loop {
        let start = *pos;
        if start >= buf.len() {
            return Run::Done;
        }
        let Some((tag, p)) = varint(buf, start) else { return Run::Slow };
        let Some(&fast) = class.fast(tag >> 3) else { return Run::Slow };
        if !fast.plain || (tag & 7) as u8 != fast.wire {
            return Run::Field { start, tag, p, fast };
        }
        let Some((bits, q)) = scalar(table, &fast, buf, p) else { return Run::Slow };
        let fi = usize::from(fast.fi);
        // `fi` is below the class's field count, the node's width (the schema table's own
        // entry).
        slots[fi] = Slot::Scalar(bits);
        if fi < 64 {
            *mask |= 1 << fi;
        }
        *scalars += 1;
        *pos = q;
    }
}

/// A length-delimited value's length at `p`: where its bytes start and end (`None`: the length
/// is malformed or runs past `buf`).
#[inline(always)]
fn len_prefixed(buf: &[u8], p: usize) -> Option<(usize, usize)> {
    let (len, q) = varint(buf, p)?;
    let end = usize::try_from(len).ok().and_then(|l| q.checked_add(l)).filter(|&e| e <= buf.len())?;
    Some((q, end))
}

struct Dec<'t, 'i> {
    table: &'t SchemaTable,
    input: &'i [u8],
    opts: DecodeOptions,
    msg: Message<'t>,
    /// Host values borrow the input instead of being copied.
    alias: bool,
    temp_used: usize,
    /// Slots that may still be made, and the bound they come from (bytes).
    slots_left: usize,
    slot_bytes_max: usize,
    /// Whether the fast path runs (off: the general path alone, the fast path's twin).
    fast: bool,
}

/// Decodes `input` as a message of class `class`, copying every value (copy mode: the input may
/// be reused as soon as this returns).
pub fn decode<'t>(
    table: &'t SchemaTable,
    class: ClassId,
    input: &[u8],
    pools: &'t Pools,
    opts: &DecodeOptions,
) -> Result<Message<'t>, DecodeError> {
    run(table, class, input, &[], pools, opts, true)
}

/// [`decode`] by the general path alone: each field read as a wire value, then matched to its
/// declaration. The fast path's twin (it must build the same message, count the same, and fail
/// with the same error); for tests and fuzzing.
#[doc(hidden)]
pub fn decode_general<'t>(
    table: &'t SchemaTable,
    class: ClassId,
    input: &[u8],
    pools: &'t Pools,
    opts: &DecodeOptions,
) -> Result<Message<'t>, DecodeError> {
    run(table, class, input, &[], pools, opts, false)
}

/// Decodes `input` as a message of class `class` in alias mode: host-placed string and bytes
/// values (and unknown fields) borrow the input instead of being copied, so the message borrows
/// it too. Device-placed values are still copied into device memory. The same message as
/// [`decode`] builds, with the same counts.
pub fn decode_alias<'t>(
    table: &'t SchemaTable,
    class: ClassId,
    input: &'t [u8],
    pools: &'t Pools,
    opts: &DecodeOptions,
) -> Result<Message<'t>, DecodeError> {
    run(table, class, input, input, pools, opts, true)
}

/// `kept` is the input when values borrow it (alias mode), empty otherwise.
fn run<'t>(
    table: &'t SchemaTable,
    class: ClassId,
    input: &[u8],
    kept: &'t [u8],
    pools: &'t Pools,
    opts: &DecodeOptions,
    fast: bool,
) -> Result<Message<'t>, DecodeError> {
    if input.len() > opts.max_message_bytes {
        return Err(DecodeError {
            path: table.class(class).short_name().to_string(),
            offset: 0,
            kind: DecodeErrorKind::TooLarge { len: input.len(), max: opts.max_message_bytes },
        });
    }
    let msg = Message::empty(table, kept, pools);
    let alias = !kept.is_empty();
    let slot_bytes_max = opts.max_slot_bytes_per_input_byte.saturating_mul(input.len().max(4096));
    let mut d = Dec {
        table,
        input,
        opts: *opts,
        msg,
        alias,
        temp_used: 0,
        slots_left: slot_bytes_max / SLOT_BYTES,
        slot_bytes_max,
        fast,
    };
    d.new_node(class, false, 0, None)?;
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
    /// An error at `offset`, in the sub-message being decoded (and in field `leaf` of it).
    fn error(&self, kind: DecodeErrorKind, offset: usize, leaf: Option<(ClassId, usize)>) -> DecodeError {
        let root = self.msg.nodes.first().map_or(0, |n| n.class);
        let mut path = self.table.class(root).short_name().to_string();
        let leaf = leaf.map(|(c, f)| (c, f as u16));
        for &(c, f) in self.msg.path.iter().chain(leaf.iter()) {
            path.push('.');
            path.push_str(&self.table.class(c).fields[usize::from(f)].name);
        }
        DecodeError { path, offset, kind }
    }

    fn fail(&self, kind: DecodeErrorKind, offset: usize) -> DecodeError {
        self.error(kind, offset, None)
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

    /// Counts `k` host scalars (8 bytes each) as `k` calls of [`count`](Self::count) would,
    /// in one step.
    #[inline]
    fn count_scalars(&mut self, k: u64) {
        if k == 0 {
            return;
        }
        let s = &mut self.msg.stats;
        s.host_bytes += 8 * k;
        match self.opts.mode {
            WriteMode::FieldByField => s.host_writes += k,
            WriteMode::OneShot => {
                let t = self.opts.temp_buffer_bytes.max(1);
                if t <= 8 {
                    // Each is written on its own, the first after what was gathered.
                    s.host_writes += k + u64::from(self.temp_used > 0);
                    self.temp_used = 0;
                    return;
                }
                // Scalars that still fit the fill under way; the next one starts a new fill
                // (a write), and each fill holds `per` of them.
                let room = ((t - self.temp_used) / 8) as u64;
                if k <= room {
                    self.temp_used += 8 * k as usize;
                    return;
                }
                let per = (t / 8) as u64;
                let rest = k - room - 1;
                s.host_writes += 1 + rest / per;
                self.temp_used = 8 + 8 * (rest % per) as usize;
            }
        }
    }

    #[inline(always)]
    fn store(
        &mut self,
        device: bool,
        bytes: &[u8],
        at: usize,
        leaf: Option<(ClassId, usize)>,
    ) -> Result<Slot, DecodeError> {
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
        let pools = self.msg.pools;
        let (pool, from, arena) = if device {
            (Pool::Device, &pools.device, &mut self.msg.device)
        } else {
            (Pool::Host, &pools.host, &mut self.msg.host)
        };
        let span: Option<Span> = arena.push(from, bytes);
        match span {
            Some(s) => {
                self.count(device, bytes.len());
                Ok(Slot::Bytes(pool, s))
            }
            None => Err(self.error(DecodeErrorKind::PoolExhausted(pool), at, leaf)),
        }
    }

    /// Decodes fields into `node` until the reader ends (or, for a group, its end-group tag).
    fn fields(&mut self, node: u32, r: &mut Reader<'_>, depth: u32, group: Option<u32>) -> Result<(), DecodeError> {
        if self.fast {
            return self.fast_run(node, r, depth, group);
        }
        let class = self.table.class(self.msg.nodes[node as usize].class);
        while self.general(node, class, r, depth, group)? {}
        Ok(())
    }

    /// The general path: reads one field and stores it in `node` (a wire value matched to its
    /// declaration). `false` when the node's bytes ended (or its group's end-group tag was read).
    fn general(
        &mut self,
        node: u32,
        class: &Class,
        r: &mut Reader<'_>,
        depth: u32,
        group: Option<u32>,
    ) -> Result<bool, DecodeError> {
        let f = match r.next_field() {
            Ok(Some(f)) => f,
            Ok(None) => {
                if group.is_some() {
                    return Err(self.fail(DecodeErrorKind::Wire(WireErrorKind::UnclosedGroup), r.offset()));
                }
                return Ok(false);
            }
            Err(e) => return Err(self.wire_err(e)),
        };
        if f.value == Value::EndGroup {
            if group == Some(f.number) {
                return Ok(false);
            }
            return Err(self.fail(DecodeErrorKind::Wire(WireErrorKind::UnmatchedEndGroup), f.start));
        }
        let Some(fi) = class.index_of(f.number) else {
            if f.value == Value::StartGroup {
                r.skip_group(f.number, self.opts.max_depth.saturating_sub(depth)).map_err(|e| self.wire_err(e))?;
            }
            let raw = &self.input[f.start..r.offset()];
            self.unknown(node, raw, f.start)?;
            return Ok(true);
        };
        self.field(node, fi, f, r, depth)?;
        Ok(true)
    }

    /// The fast path: decodes `node` (ended by the reader's end, or by `group`'s end-group tag)
    /// and every sub-message and group in it, the nested ones on an explicit stack of
    /// [`Frame`]s rather than by recursion. A field the class declares, in the wire type its
    /// type is written in (not a packed run), is read and stored as the class's schema-table
    /// entry says, plain scalars in a run of their own ([`plain_scalars`]); the presence mask
    /// and the count of scalars of the node being read are kept in registers. Anything else,
    /// and anything wrong, is left to the general path one field at a time
    /// ([`general`](Self::general)), which names what is wrong.
    fn fast_run(&mut self, node: u32, r: &mut Reader<'_>, depth: u32, group: Option<u32>) -> Result<(), DecodeError> {
        let table = self.table;
        let (whole, mut pos, base) = r.parts();
        // Frames below this one are a caller's.
        let top = self.msg.frames.len();
        // The message (or group) being read: its node, class, presence mask, its bytes (a
        // group's are its parent's), its group number (0: a message) and its depth.
        let mut node = node;
        let mut n = self.msg.nodes[node as usize];
        let mut class = table.class(n.class);
        let mut mask = n.mask;
        let mut buf = whole;
        let mut group = group.unwrap_or(0);
        let mut depth = depth;
        // Host scalars read and not yet counted (they count 8 bytes each, in order: counted
        // before anything else is).
        let mut scalars = 0u64;
        'read: loop {
            // Leaves the message (or group) being read for the one it is in, or returns when
            // that is the one this was called for.
            macro_rules! leave {
                () => {{
                    self.count_scalars(std::mem::take(&mut scalars));
                    self.msg.nodes[node as usize].mask = mask;
                    let f = if self.msg.frames.len() > top { self.msg.frames.pop() } else { None };
                    let Some(f) = f else {
                        r.set_pos(pos);
                        return Ok(());
                    };
                    self.msg.path.pop();
                    node = f.node;
                    n = self.msg.nodes[node as usize];
                    class = table.class(n.class);
                    mask = f.mask;
                    buf = &whole[..f.limit];
                    group = f.group;
                    depth -= 1;
                    continue 'read;
                }};
            }
            let next = if n.device {
                match varint(buf, pos) {
                    _ if pos >= buf.len() => Next::End,
                    Some((tag, p)) => match class.fast(tag >> 3) {
                        Some(&fast) => Next::Field(pos, tag, p, fast),
                        None => Next::Slow,
                    },
                    None => Next::Slow,
                }
            } else {
                // The common case first: a run of plain scalars, the node's slots borrowed once
                // for all of it.
                let slots = &mut self.msg.slots[n.base as usize..(n.base + n.width) as usize];
                match plain_scalars(table, class, buf, &mut pos, slots, &mut mask, &mut scalars) {
                    Run::Done => Next::End,
                    Run::Slow => Next::Slow,
                    Run::Field { start, tag, p, fast } => Next::Field(start, tag, p, fast),
                }
            };
            // Where the field the general path is to read starts, if the fast path leaves it.
            let slow: usize = 'fast: {
                let (start, tag, p, fast) = match next {
                    Next::Field(start, tag, p, fast) => (start, tag, p, fast),
                    // A group's bytes do not end before its end-group tag (the general path
                    // says so).
                    Next::End if group == 0 => leave!(),
                    Next::End | Next::Slow => break 'fast pos,
                };
                if (tag & 7) as u8 != fast.wire || fast.op == FastOp::None {
                    if tag & 7 == WireType::EndGroup as u64 && group != 0 && tag >> 3 == u64::from(group) {
                        pos = p;
                        leave!();
                    }
                    // Unknown fields, packed runs, end-group tags that close no group and wrong
                    // wire types.
                    break 'fast start;
                }
                let fi = usize::from(fast.fi);
                let at = n.base as usize + fi;
                let device = n.device || fast.device;
                let leaf = (n.class, fi);
                let slot = match fast.op {
                    FastOp::Message | FastOp::Group => {
                        let (q, end) = match fast.op {
                            FastOp::Message => match len_prefixed(buf, p) {
                                Some(x) => x,
                                None => break 'fast start,
                            },
                            _ => (p, buf.len()),
                        };
                        self.count_scalars(std::mem::take(&mut scalars));
                        let child = self.child(fast.sub, at, base + start, depth, fast.repeated, device, leaf)?;
                        if fast.op == FastOp::Message {
                            if !device {
                                self.count(false, 8);
                            }
                            self.msg.hint_len(child, end - q);
                        }
                        // The parent's slot is set on the way in (the child's bytes touch only
                        // the child's node), then the child is read in its place.
                        self.put_fast(node, at, fi, &fast, &mut mask, Slot::Msg(child));
                        self.msg.frames.push(Frame { node, mask, limit: buf.len(), group });
                        self.msg.path.push((n.class, fi as u16));
                        node = child;
                        n = self.msg.nodes[node as usize];
                        class = table.class(n.class);
                        mask = n.mask;
                        buf = &whole[..end];
                        group = if fast.op == FastOp::Group { (tag >> 3) as u32 } else { 0 };
                        depth += 1;
                        pos = q;
                        continue 'read;
                    }
                    FastOp::Bytes | FastOp::Utf8 => {
                        let Some((q, end)) = len_prefixed(buf, p) else { break 'fast start };
                        let body = &buf[q..end];
                        if fast.op == FastOp::Utf8 && !ascii(body) && std::str::from_utf8(body).is_err() {
                            break 'fast start;
                        }
                        if !device {
                            self.count_scalars(std::mem::take(&mut scalars));
                        }
                        pos = end;
                        self.store(device, body, base + start, Some(leaf))?
                    }
                    _ => {
                        let Some((bits, q)) = scalar(table, &fast, buf, p) else { break 'fast start };
                        pos = q;
                        if device {
                            self.count(true, 8);
                        } else {
                            scalars += 1;
                        }
                        Slot::Scalar(bits)
                    }
                };
                self.put_fast(node, at, fi, &fast, &mut mask, slot);
                continue 'read;
            };
            // One field by the general path, counted in order.
            self.count_scalars(std::mem::take(&mut scalars));
            self.msg.nodes[node as usize].mask = mask;
            let mut sr = Reader::at(buf, base);
            sr.set_pos(slow);
            let more = self.general(node, class, &mut sr, depth, (group != 0).then_some(group))?;
            pos = sr.parts().1;
            mask = self.msg.nodes[node as usize].mask;
            if !more {
                leave!();
            }
        }
    }

    /// `Message::put` for the fast path (the mask in a register): `slot` appended to a repeated
    /// field, or stored in a singular one's slot (first clearing the other members of its
    /// oneof when it was absent); the field marked present.
    #[inline(always)]
    fn put_fast(&mut self, node: u32, at: usize, fi: usize, fast: &Fast, mask: &mut u64, slot: Slot) {
        if fast.repeated {
            self.msg.push_elem(at, slot);
        } else {
            if fast.oneof && self.msg.slots[at] == Slot::Absent {
                self.msg.nodes[node as usize].mask = *mask;
                self.msg.clear_oneof(node, fi);
                *mask = self.msg.nodes[node as usize].mask;
            }
            self.msg.slots[at] = slot;
        }
        if fi < 64 {
            *mask |= 1 << fi;
        }
    }

    fn unknown(&mut self, node: u32, raw: &[u8], at: usize) -> Result<(), DecodeError> {
        let slot = self.store(false, raw, at, None)?;
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

    /// Decodes the sub-message (or group, ended by `group`'s end tag) of field `leaf` into node
    /// `child`, the field on the error path meanwhile.
    #[inline(always)]
    fn descend(
        &mut self,
        leaf: (ClassId, usize),
        child: u32,
        r: &mut Reader<'_>,
        depth: u32,
        group: Option<u32>,
    ) -> Result<(), DecodeError> {
        self.msg.path.push((leaf.0, leaf.1 as u16));
        self.fields(child, r, depth + 1, group)?;
        self.msg.path.pop();
        Ok(())
    }

    /// The node a sub-message (or group) in slot `at` decodes into: the one already there for a
    /// singular field given again (they merge), else a new one; refused past the depth limit.
    #[allow(clippy::too_many_arguments)]
    fn child(
        &mut self,
        sub: ClassId,
        at: usize,
        offset: usize,
        depth: u32,
        repeated: bool,
        device: bool,
        leaf: (ClassId, usize),
    ) -> Result<u32, DecodeError> {
        if depth >= self.opts.max_depth {
            return Err(self.error(DecodeErrorKind::TooDeep { max: self.opts.max_depth }, offset, Some(leaf)));
        }
        if !repeated && let Slot::Msg(c) = self.msg.slots[at] {
            return Ok(c);
        }
        self.new_node(sub, device, offset, Some(leaf))
    }

    /// A new node of `class`, its slots empty; refused past the slot bound.
    fn new_node(
        &mut self,
        class: ClassId,
        device: bool,
        offset: usize,
        leaf: Option<(ClassId, usize)>,
    ) -> Result<u32, DecodeError> {
        let width = self.table.class(class).fields.len();
        if width > self.slots_left {
            return Err(self.error(DecodeErrorKind::TooManySlots { max: self.slot_bytes_max }, offset, leaf));
        }
        self.slots_left -= width;
        Ok(self.msg.add_node(class, device))
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
        let leaf = (n.class, fi);
        let at = n.base as usize + fi;
        let device = n.device || field.placement == crate::schema::Placement::Device;
        let repeated = field.label == Label::Repeated;
        let wire = f.value.wire_type();
        // A packed run of scalars.
        if repeated && field.kind.packable() && wire == WireType::Len {
            let Value::Len(body) = f.value else { unreachable!() };
            let body_at = r.offset() - body.len();
            return self.packed(node, fi, field.kind, body, body_at, device, f);
        }
        if wire != field.kind.wire_type() {
            return Err(self.error(
                DecodeErrorKind::WrongWireType { field_type: field.kind.name(), wire: wire as u8 },
                f.start,
                Some(leaf),
            ));
        }
        let slot = match (field.kind, f.value) {
            (Kind::Message(sub), Value::Len(body)) => {
                let child = self.child(sub, at, f.start, depth, repeated, device, leaf)?;
                if !device {
                    self.count(false, 8);
                }
                self.msg.hint_len(child, body.len());
                self.descend(leaf, child, &mut Reader::at(body, r.offset() - body.len()), depth, None)?;
                Slot::Msg(child)
            }
            (Kind::Group(sub), Value::StartGroup) => {
                let child = self.child(sub, at, f.start, depth, repeated, device, leaf)?;
                self.descend(leaf, child, r, depth, Some(f.number))?;
                Slot::Msg(child)
            }
            (Kind::String | Kind::Bytes, Value::Len(body)) => {
                if field.check_utf8 && std::str::from_utf8(body).is_err() {
                    return Err(self.error(DecodeErrorKind::InvalidUtf8, r.offset() - body.len(), Some(leaf)));
                }
                self.store(device, body, f.start, Some(leaf))?
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
        // Last one wins (a sub-message merged in place keeps its node).
        self.msg.put(node, fi, repeated, field.oneof.is_some(), slot);
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
        device: bool,
        f: FieldRef<'_>,
    ) -> Result<(), DecodeError> {
        let n = self.msg.nodes[node as usize];
        let leaf = Some((n.class, fi));
        let width = match kind.wire_type() {
            WireType::Fixed32 => 4,
            WireType::Fixed64 => 8,
            _ => 0,
        };
        if width > 0 && !body.len().is_multiple_of(width) {
            return Err(self.error(DecodeErrorKind::PackedLength, f.start, leaf));
        }
        let mut pos = 0;
        let mut rejected: Vec<u8> = Vec::new();
        while pos < body.len() {
            let v = if width == 0 {
                let (v, next) = wire::read_varint(body, pos)
                    .map_err(|e| self.error(DecodeErrorKind::Wire(e.kind), body_at + e.offset, leaf))?;
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
                    self.msg.put(node, fi, true, false, Slot::Scalar(bits));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time ASCII check agrees with the standard library's, whatever the length
    /// and wherever the one non-ASCII byte is.
    #[test]
    fn ascii_agrees_with_std() {
        for len in 0..40usize {
            let mut b: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(7) & 0x7f).collect();
            assert!(ascii(&b) && b.is_ascii());
            for at in 0..len {
                for high in [0x80u8, 0xc3, 0xff] {
                    let keep = b[at];
                    b[at] = high;
                    assert_eq!(ascii(&b), b.is_ascii(), "len {len}, byte {at} = {high:#x}");
                    assert!(!ascii(&b));
                    b[at] = keep;
                }
            }
        }
    }
}
