//! The memory-affinity serializer (RpcNIC §III-C): stage 1 on the host pre-serializes the
//! host-resident fields into fixed-width records, without varint encoding, copying small values
//! and referencing large ones and everything in device memory; stage 2 on the device encodes the
//! records, reads what they reference, serializes device-resident sub-messages itself, and writes
//! the message into a TX arena. Beside it, the paper's two other options: `cpu-only` (the host
//! encodes everything: [`crate::encode`]) and `nic-only` ([`nic_only`]: the device walks the
//! object graph, each read of host memory a PCIe round trip, as the ProtoACC-PCIe baseline). All
//! three write the same bytes.
//!
//! # Records (little-endian, fixed width)
//!
//! | op | after the op byte | stage 2 writes |
//! |---|---|---|
//! | `0x01` varint | tag `u32`, value `u64` | the tag's varint, the value's varint |
//! | `0x02` fixed64 | tag `u32`, value `u64` | the tag's varint, 8 bytes |
//! | `0x03` fixed32 | tag `u32`, value `u32` | the tag's varint, 4 bytes |
//! | `0x04` copy | tag `u32`, length `u16`, the bytes | tag, length varint, the bytes |
//! | `0x05` ref | tag `u32`, pool `u8` (0 host, 1 device), chunk `u32`, offset `u32`, length `u32` | tag, length varint, the referenced bytes |
//! | `0x06` begin | tag `u32` | a length-delimited value follows: tag, then the length of everything up to its `end` |
//! | `0x07` end | — | closes the innermost `begin` |
//! | `0x08` packed varint | value `u64` | the value's varint (inside a `begin`) |
//! | `0x09` packed fixed64 | value `u64` | 8 bytes |
//! | `0x0a` packed fixed32 | value `u32` | 4 bytes |
//! | `0x0b` tag | tag `u32` | the tag's varint (a group's start or end) |
//! | `0x0c` raw copy | length `u16`, the bytes | the bytes as they are (unknown fields) |
//! | `0x0d` raw ref | pool `u8`, chunk `u32`, offset `u32`, length `u32` | the referenced bytes as they are |
//! | `0x0e` device message | tag `u32`, node `u32` | tag, length, and the sub-message, serialized by the device from its memory |
//!
//! A tag is the field's key, `(number << 3) | wire type`. Values longer than the reference
//! threshold (1 KB by default, the authors' artifact) are referenced, not copied; so are all
//! device-resident values. Stage 2 refuses malformed records with a [`RecordError`], never a
//! panic.

use crate::arena::{Pool, Span};
use crate::encode::{encode_node_into, is_zero};
use crate::message::{Message, NONE, Slot};
use crate::schema::{Class, EncOp, Field, WireType};
use crate::wire::{put_varint, varint_len, zigzag32, zigzag64};

const OP_VARINT: u8 = 0x01;
const OP_FIXED64: u8 = 0x02;
const OP_FIXED32: u8 = 0x03;
const OP_COPY: u8 = 0x04;
const OP_REF: u8 = 0x05;
const OP_BEGIN: u8 = 0x06;
const OP_END: u8 = 0x07;
const OP_PVARINT: u8 = 0x08;
const OP_PFIXED64: u8 = 0x09;
const OP_PFIXED32: u8 = 0x0a;
const OP_TAG: u8 = 0x0b;
const OP_RAW_COPY: u8 = 0x0c;
const OP_RAW_REF: u8 = 0x0d;
const OP_DEVICE_MSG: u8 = 0x0e;

/// Options of stage 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreserOptions {
    /// Values longer than this are referenced, not copied (at most 65535). Default 1024.
    pub ref_threshold: usize,
}

impl Default for PreserOptions {
    fn default() -> Self {
        PreserOptions { ref_threshold: 1024 }
    }
}

/// What stage 1 did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PreserStats {
    /// Records written.
    pub records: u64,
    /// Value bytes copied into records.
    pub copied_bytes: u64,
    /// Host value bytes referenced (left for the device to read by DMA).
    pub host_ref_bytes: u64,
    /// Device-resident values and sub-messages referenced.
    pub device_refs: u64,
}

/// What stage 2 (or the NIC-only serializer) read and wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Bytes read from host memory over PCIe (the records, and what they reference).
    pub host_read_bytes: u64,
    /// Reads of host memory (PCIe round trips): one for the record buffer and one per
    /// referenced host value; NIC-only: one per host-resident value or node it visits.
    pub host_reads: u64,
    /// Bytes read from device memory.
    pub device_read_bytes: u64,
    /// Bytes written to the TX arena.
    pub tx_bytes: u64,
}

/// A record stage 2 cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The records end inside one.
    #[error("record at byte {0}: cut short")]
    Truncated(usize),
    /// An op this format does not have.
    #[error("record at byte {0}: unknown op {1:#04x}")]
    UnknownOp(usize, u8),
    /// An `end` without its `begin`, or records ending inside a `begin`.
    #[error("record at byte {0}: begin and end do not pair up")]
    Unbalanced(usize),
    /// A reference outside the message's memory, or a node it does not have.
    #[error("record at byte {0}: a reference to memory the message does not have")]
    BadRef(usize),
}

fn tag(number: u32, wire: WireType) -> u32 {
    (number << 3) | wire as u32
}

struct Stage1<'a, 'm> {
    msg: &'a Message<'m>,
    out: &'a mut Vec<u8>,
    opts: PreserOptions,
    stats: PreserStats,
}

/// Stage 1, on the host: the records of `msg`'s host-resident fields, appended to `out`.
pub fn preserialize(msg: &Message<'_>, opts: PreserOptions, out: &mut Vec<u8>) -> PreserStats {
    let mut s = Stage1 {
        msg,
        out,
        opts: PreserOptions { ref_threshold: opts.ref_threshold.min(u16::MAX as usize) },
        stats: PreserStats::default(),
    };
    s.node(0, 0);
    s.stats
}

impl Stage1<'_, '_> {
    fn op(&mut self, op: u8) {
        self.out.push(op);
        self.stats.records += 1;
    }

    fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    fn reference(&mut self, pool: Pool, s: Span) {
        self.out.push(pool as u8);
        self.u32(s.chunk);
        self.u32(s.off);
        self.u32(s.len);
        match pool {
            Pool::Host => self.stats.host_ref_bytes += u64::from(s.len),
            Pool::Device => self.stats.device_refs += 1,
        }
    }

    /// A record of an op, a tag and a value of `N` bytes, in one write.
    #[inline(always)]
    fn record<const N: usize>(&mut self, op: u8, tag: u32, value: [u8; N]) {
        let mut r = [0u8; 13];
        r[0] = op;
        r[1..5].copy_from_slice(&tag.to_le_bytes());
        r[5..5 + N].copy_from_slice(&value);
        self.out.extend_from_slice(&r[..5 + N]);
        self.stats.records += 1;
    }

    /// A record of an op and a value of `N` bytes (inside a packed run: no tag), in one write.
    #[inline(always)]
    fn packed<const N: usize>(&mut self, op: u8, value: [u8; N]) {
        let mut r = [0u8; 9];
        r[0] = op;
        r[1..1 + N].copy_from_slice(&value);
        self.out.extend_from_slice(&r[..1 + N]);
        self.stats.records += 1;
    }

    /// One value of `field` with its tag (`packed`: inside a packed run, no tag).
    #[inline(always)]
    fn value(&mut self, field: &Field, slot: Slot, depth: usize, packed: bool) {
        let number = field.number;
        match (field.enc, slot) {
            (EncOp::Fixed64, Slot::Scalar(b)) => match packed {
                true => self.packed(OP_PFIXED64, b.to_le_bytes()),
                false => self.record(OP_FIXED64, tag(number, WireType::Fixed64), b.to_le_bytes()),
            },
            (EncOp::Fixed32, Slot::Scalar(b)) => match packed {
                true => self.packed(OP_PFIXED32, (b as u32).to_le_bytes()),
                false => self.record(OP_FIXED32, tag(number, WireType::Fixed32), (b as u32).to_le_bytes()),
            },
            (op, Slot::Scalar(b)) => {
                let v = match op {
                    EncOp::Sint32 => u64::from(zigzag32(b as i32)),
                    EncOp::Sint64 => zigzag64(b as i64),
                    _ => b,
                };
                match packed {
                    true => self.packed(OP_PVARINT, v.to_le_bytes()),
                    false => self.record(OP_VARINT, tag(number, WireType::Varint), v.to_le_bytes()),
                }
            }
            (_, Slot::Bytes(pool, s)) => {
                let t = tag(number, WireType::Len);
                if pool == Pool::Device || s.len as usize > self.opts.ref_threshold {
                    self.op(OP_REF);
                    self.u32(t);
                    self.reference(pool, s);
                } else {
                    self.record(OP_COPY, t, (s.len as u16).to_le_bytes());
                    self.out.extend_from_slice(self.msg.bytes(pool, s));
                    self.stats.copied_bytes += u64::from(s.len);
                }
            }
            (EncOp::Group, Slot::Msg(n)) => {
                self.record(OP_TAG, tag(number, WireType::StartGroup), []);
                self.node(n, depth + 1);
                self.record(OP_TAG, tag(number, WireType::EndGroup), []);
            }
            (_, Slot::Msg(n)) => {
                if self.msg.nodes[n as usize].device {
                    // In device memory: the device serializes it.
                    self.record(OP_DEVICE_MSG, tag(number, WireType::Len), n.to_le_bytes());
                    self.stats.device_refs += 1;
                } else {
                    self.record(OP_BEGIN, tag(number, WireType::Len), []);
                    self.node(n, depth + 1);
                    self.op(OP_END);
                }
            }
            (_, Slot::List { .. } | Slot::Absent) => {}
        }
    }

    /// One field of a node of `class`.
    #[inline(always)]
    fn field(&mut self, class: &Class, field: &Field, slot: Slot, depth: usize) {
        let msg = self.msg;
        match slot {
            // A map entry writes key and value even when absent.
            Slot::Absent if class.map_entry => self.map_default(field),
            Slot::Absent => {}
            Slot::List { first, len, .. } => {
                if len == 0 {
                    return;
                }
                if field.packed {
                    self.record(OP_BEGIN, tag(field.number, WireType::Len), []);
                }
                for el in msg.elems_from(first) {
                    self.value(field, el, depth, field.packed);
                }
                if field.packed {
                    self.op(OP_END);
                }
            }
            slot => {
                if !field.presence && !class.map_entry && is_zero(slot) {
                    return;
                }
                self.value(field, slot, depth, false);
            }
        }
    }

    fn map_default(&mut self, field: &Field) {
        let number = field.number;
        match field.kind.wire_type() {
            WireType::Fixed64 => {
                self.op(OP_FIXED64);
                self.u32(tag(number, WireType::Fixed64));
                self.u64(0);
            }
            WireType::Fixed32 => {
                self.op(OP_FIXED32);
                self.u32(tag(number, WireType::Fixed32));
                self.u32(0);
            }
            WireType::Len => {
                self.op(OP_COPY);
                self.u32(tag(number, WireType::Len));
                self.out.extend_from_slice(&0u16.to_le_bytes());
            }
            _ => {
                self.op(OP_VARINT);
                self.u32(tag(number, WireType::Varint));
                self.u64(0);
            }
        }
    }

    /// A node's fields, in the encoder's order and by its rules (see [`crate::encode`]).
    fn node(&mut self, n: u32, depth: usize) {
        let msg = self.msg;
        let node = msg.nodes[n as usize];
        let class = msg.table.class(node.class);
        let slots = msg.slots_of(n);
        if class.map_entry {
            for (field, &slot) in class.fields.iter().zip(slots) {
                self.field(class, field, slot, depth);
            }
        } else {
            let mut mask = node.mask;
            while mask != 0 {
                let fi = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                self.field(class, &class.fields[fi], slots[fi], depth);
            }
            if let (Some(fields), Some(rest)) = (class.fields.get(64..), slots.get(64..)) {
                for (field, &slot) in fields.iter().zip(rest) {
                    self.field(class, field, slot, depth);
                }
            }
        }
        let mut u = node.unknown;
        while u != NONE {
            let el = msg.elems[u as usize];
            if let Slot::Bytes(pool, s) = el.slot {
                if s.len as usize > self.opts.ref_threshold {
                    self.op(OP_RAW_REF);
                    self.reference(pool, s);
                } else {
                    self.op(OP_RAW_COPY);
                    self.out.extend_from_slice(&(s.len as u16).to_le_bytes());
                    self.out.extend_from_slice(msg.bytes(pool, s));
                    self.stats.copied_bytes += u64::from(s.len);
                }
            }
            u = el.next;
        }
    }
}

/// Reads records: fixed-width fields, bounds checked.
struct Rd<'a> {
    b: &'a [u8],
    pos: usize,
    start: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let s = self.b.get(self.pos..self.pos + n).ok_or(RecordError::Truncated(self.start))?;
        self.pos += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

/// One parsed record.
enum Rec<'a> {
    Varint(u32, u64),
    Fixed64(u32, u64),
    Fixed32(u32, u32),
    Copy(u32, &'a [u8]),
    Ref(u32, Pool, Span),
    Begin(u32),
    End,
    PVarint(u64),
    PFixed64(u64),
    PFixed32(u32),
    Tag(u32),
    RawCopy(&'a [u8]),
    RawRef(Pool, Span),
    DeviceMsg(u32, u32),
}

fn parse<'a>(rd: &mut Rd<'a>) -> Result<Option<Rec<'a>>, RecordError> {
    if rd.pos >= rd.b.len() {
        return Ok(None);
    }
    rd.start = rd.pos;
    let op = rd.u8()?;
    let span = |rd: &mut Rd<'_>| -> Result<(Pool, Span), RecordError> {
        let pool = match rd.u8()? {
            0 => Pool::Host,
            1 => Pool::Device,
            _ => return Err(RecordError::BadRef(rd.start)),
        };
        Ok((pool, Span { chunk: rd.u32()?, off: rd.u32()?, len: rd.u32()? }))
    };
    Ok(Some(match op {
        OP_VARINT => Rec::Varint(rd.u32()?, rd.u64()?),
        OP_FIXED64 => Rec::Fixed64(rd.u32()?, rd.u64()?),
        OP_FIXED32 => Rec::Fixed32(rd.u32()?, rd.u32()?),
        OP_COPY => {
            let t = rd.u32()?;
            let n = usize::from(rd.u16()?);
            Rec::Copy(t, rd.take(n)?)
        }
        OP_REF => {
            let t = rd.u32()?;
            let (p, s) = span(rd)?;
            Rec::Ref(t, p, s)
        }
        OP_BEGIN => Rec::Begin(rd.u32()?),
        OP_END => Rec::End,
        OP_PVARINT => Rec::PVarint(rd.u64()?),
        OP_PFIXED64 => Rec::PFixed64(rd.u64()?),
        OP_PFIXED32 => Rec::PFixed32(rd.u32()?),
        OP_TAG => Rec::Tag(rd.u32()?),
        OP_RAW_COPY => {
            let n = usize::from(rd.u16()?);
            Rec::RawCopy(rd.take(n)?)
        }
        OP_RAW_REF => {
            let (p, s) = span(rd)?;
            Rec::RawRef(p, s)
        }
        OP_DEVICE_MSG => Rec::DeviceMsg(rd.u32()?, rd.u32()?),
        other => return Err(RecordError::UnknownOp(rd.start, other)),
    }))
}

/// The bytes a reference names, if the message has them.
fn deref<'m>(msg: &'m Message<'_>, pool: Pool, s: Span, at: usize) -> Result<&'m [u8], RecordError> {
    msg.try_bytes(pool, s).ok_or(RecordError::BadRef(at))
}

/// Stage 2, on the device: encodes `records` (stage 1's, for `msg`) into `tx` (appending).
pub fn serialize_records(msg: &Message<'_>, records: &[u8], tx: &mut Vec<u8>) -> Result<DeviceStats, RecordError> {
    let mut stats = DeviceStats { host_read_bytes: records.len() as u64, host_reads: 1, ..DeviceStats::default() };
    // Pass 1: the length of every begin..end, in the order the begins come; device messages
    // encoded once and kept.
    let mut lens: Vec<u64> = Vec::new();
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut device_msgs: Vec<Vec<u8>> = Vec::new();
    let mut rd = Rd { b: records, pos: 0, start: 0 };
    let mut size = 0u64;
    while let Some(r) = parse(&mut rd)? {
        let at = rd.start;
        let n = match r {
            Rec::Varint(t, v) => (varint_len(u64::from(t)) + varint_len(v)) as u64,
            Rec::Fixed64(t, _) => varint_len(u64::from(t)) as u64 + 8,
            Rec::Fixed32(t, _) => varint_len(u64::from(t)) as u64 + 4,
            Rec::Copy(t, b) => (varint_len(u64::from(t)) + varint_len(b.len() as u64) + b.len()) as u64,
            Rec::Ref(t, p, s) => {
                let b = deref(msg, p, s, at)?;
                (varint_len(u64::from(t)) + varint_len(b.len() as u64) + b.len()) as u64
            }
            Rec::Begin(t) => {
                lens.push(0);
                open.push((lens.len() - 1, size + varint_len(u64::from(t)) as u64));
                size = 0;
                continue;
            }
            Rec::End => {
                let (i, before) = open.pop().ok_or(RecordError::Unbalanced(at))?;
                lens[i] = size;
                size = before + varint_len(size) as u64 + size;
                continue;
            }
            Rec::PVarint(v) => varint_len(v) as u64,
            Rec::PFixed64(_) => 8,
            Rec::PFixed32(_) => 4,
            Rec::Tag(t) => varint_len(u64::from(t)) as u64,
            Rec::RawCopy(b) => b.len() as u64,
            Rec::RawRef(p, s) => deref(msg, p, s, at)?.len() as u64,
            Rec::DeviceMsg(t, node) => {
                if node as usize >= msg.nodes.len() || !msg.nodes[node as usize].device {
                    return Err(RecordError::BadRef(at));
                }
                let mut body = Vec::new();
                encode_node_into(msg, node, &mut body);
                let n = (varint_len(u64::from(t)) + varint_len(body.len() as u64) + body.len()) as u64;
                device_msgs.push(body);
                n
            }
        };
        size += n;
    }
    if !open.is_empty() {
        return Err(RecordError::Unbalanced(records.len()));
    }
    // Pass 2: the bytes.
    tx.reserve(size as usize);
    let start = tx.len();
    let mut rd = Rd { b: records, pos: 0, start: 0 };
    let (mut next_len, mut next_dev) = (0usize, 0usize);
    while let Some(r) = parse(&mut rd)? {
        let at = rd.start;
        match r {
            Rec::Varint(t, v) => {
                put_varint(tx, u64::from(t));
                put_varint(tx, v);
            }
            Rec::Fixed64(t, v) => {
                put_varint(tx, u64::from(t));
                tx.extend_from_slice(&v.to_le_bytes());
            }
            Rec::Fixed32(t, v) => {
                put_varint(tx, u64::from(t));
                tx.extend_from_slice(&v.to_le_bytes());
            }
            Rec::Copy(t, b) => {
                put_varint(tx, u64::from(t));
                put_varint(tx, b.len() as u64);
                tx.extend_from_slice(b);
            }
            Rec::Ref(t, p, s) => {
                let b = deref(msg, p, s, at)?;
                put_varint(tx, u64::from(t));
                put_varint(tx, b.len() as u64);
                crate::wire::extend_in_pieces(tx, b);
                count_ref(&mut stats, p, b.len());
            }
            Rec::Begin(t) => {
                put_varint(tx, u64::from(t));
                put_varint(tx, lens[next_len]);
                next_len += 1;
            }
            Rec::End => {}
            Rec::PVarint(v) => put_varint(tx, v),
            Rec::PFixed64(v) => tx.extend_from_slice(&v.to_le_bytes()),
            Rec::PFixed32(v) => tx.extend_from_slice(&v.to_le_bytes()),
            Rec::Tag(t) => put_varint(tx, u64::from(t)),
            Rec::RawCopy(b) => tx.extend_from_slice(b),
            Rec::RawRef(p, s) => {
                let b = deref(msg, p, s, at)?;
                crate::wire::extend_in_pieces(tx, b);
                count_ref(&mut stats, p, b.len());
            }
            Rec::DeviceMsg(t, _) => {
                let body = &device_msgs[next_dev];
                next_dev += 1;
                put_varint(tx, u64::from(t));
                put_varint(tx, body.len() as u64);
                tx.extend_from_slice(body);
                stats.device_read_bytes += body.len() as u64;
            }
        }
    }
    stats.tx_bytes = (tx.len() - start) as u64;
    Ok(stats)
}

fn count_ref(stats: &mut DeviceStats, pool: Pool, len: usize) {
    match pool {
        Pool::Host => {
            stats.host_reads += 1;
            stats.host_read_bytes += len as u64;
        }
        Pool::Device => stats.device_read_bytes += len as u64,
    }
}

/// NIC-only serialization (the paper's option 2, ProtoACC-PCIe): the device walks the whole
/// message and encodes it into `tx`; every host-resident node and value it reads is one PCIe
/// round trip.
pub fn nic_only(msg: &Message<'_>, tx: &mut Vec<u8>) -> DeviceStats {
    let start = tx.len();
    crate::encode::encode_into(msg, tx);
    let mut stats = DeviceStats { tx_bytes: (tx.len() - start) as u64, ..DeviceStats::default() };
    // What the walk reads: each node's field list, then each value, from the memory it is in.
    let mut count = |device: bool, bytes: usize| {
        if device {
            stats.device_read_bytes += bytes as u64;
        } else {
            stats.host_reads += 1;
            stats.host_read_bytes += bytes as u64;
        }
    };
    // The nodes the message reaches from its root (a sub-message replaced by a later one, or a
    // oneof member by another, is not read).
    let mut todo = vec![0u32];
    while let Some(n) = todo.pop() {
        let node = msg.nodes[n as usize];
        count(node.device, 16);
        for (_, slot) in msg.present(n, false) {
            let mut visit = |slot: Slot| match slot {
                Slot::Scalar(_) => count(node.device, 8),
                Slot::Bytes(p, s) => count(p == Pool::Device, s.len as usize),
                Slot::Msg(c) => todo.push(c),
                Slot::List { .. } | Slot::Absent => {}
            };
            match slot {
                Slot::List { first, .. } => msg.elems_from(first).for_each(visit),
                s => visit(s),
            }
        }
        let mut u = node.unknown;
        while u != NONE {
            let el = msg.elems[u as usize];
            if let Slot::Bytes(p, s) = el.slot {
                count(p == Pool::Device, s.len as usize);
            }
            u = el.next;
        }
    }
    stats
}
