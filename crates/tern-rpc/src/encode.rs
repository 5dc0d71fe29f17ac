//! Encoding a decoded [`Message`] back to wire bytes, as C++ protobuf serializes: fields in
//! number order, repeated scalars packed or not as the schema says (whatever form came in),
//! proto3 fields without presence left out when zero or empty, map entries with both key and
//! value, negative `int32` and enum values as 10-byte varints, and the unknown fields (a closed
//! enum's undeclared values among them) last, in the order they came.
//!
//! A sub-message's length comes before it. For one decoded from under 16 KiB of input, the body
//! is written first, after room for a length as wide as its input length's varint, and the
//! length put in after it (the body moves only if the length came out another width). Any other
//! is counted the first time it is needed (a pass that writes nothing, the sizes of the
//! sub-messages inside kept as they are counted), and never again. A group needs no length and
//! the top level none either, so a message whose nesting is all groups is written in one pass.

use crate::arena::{Pool, Span};
use crate::message::{Message, NONE, Slot};
use crate::schema::{Class, EncOp, Field, Tag, WireType};
use crate::wire::{put_varint, varint_len, zigzag32, zigzag64};

/// Where encoded bytes go: counted, or written.
trait Sink {
    /// Whether this sink writes bytes (or only counts them).
    const WRITE: bool;
    /// A string's or bytes' length and bytes (counted from the span's length alone).
    fn span(&mut self, msg: &Message<'_>, pool: Pool, span: Span);
    fn tag(&mut self, t: Tag);
    fn varint(&mut self, v: u64);
    fn raw(&mut self, b: &[u8]);
    fn fixed(&mut self, v: u64, width: usize);
    /// Leaves room for a length prefix of `reserved` bytes (1 or 2) and returns where the body
    /// starts (writing sinks only).
    fn open(&mut self, reserved: usize) -> usize;
    /// Writes the length of the body written since [`open`](Self::open) into the room left,
    /// moving the body where the varint is shorter or longer than the room.
    fn close(&mut self, at: usize, reserved: usize);
}

struct Count(usize);

impl Sink for Count {
    const WRITE: bool = false;
    #[inline]
    fn span(&mut self, _: &Message<'_>, _: Pool, span: Span) {
        self.0 += varint_len(u64::from(span.len)) + span.len as usize;
    }
    #[inline]
    fn tag(&mut self, t: Tag) {
        self.0 += usize::from(t.len);
    }
    #[inline]
    fn varint(&mut self, v: u64) {
        self.0 += varint_len(v);
    }
    #[inline]
    fn raw(&mut self, b: &[u8]) {
        self.0 += b.len();
    }
    #[inline]
    fn fixed(&mut self, _: u64, width: usize) {
        self.0 += width;
    }
    fn open(&mut self, _: usize) -> usize {
        unreachable!("only writing sinks leave room for a length")
    }
    fn close(&mut self, _: usize, _: usize) {
        unreachable!("only writing sinks leave room for a length")
    }
}

impl Sink for Vec<u8> {
    const WRITE: bool = true;
    #[inline]
    fn span(&mut self, msg: &Message<'_>, pool: Pool, span: Span) {
        let b = msg.bytes(pool, span);
        put_varint(self, b.len() as u64);
        crate::wire::extend_in_pieces(self, b);
    }
    #[inline]
    fn tag(&mut self, t: Tag) {
        // Tags are mostly one or two bytes: pushed, not copied.
        let b = t.bytes.to_le_bytes();
        self.push(b[0]);
        if t.len > 1 {
            self.push(b[1]);
            if t.len > 2 {
                self.extend_from_slice(&b[2..usize::from(t.len)]);
            }
        }
    }
    #[inline]
    fn varint(&mut self, v: u64) {
        put_varint(self, v);
    }
    #[inline]
    fn raw(&mut self, b: &[u8]) {
        crate::wire::extend_in_pieces(self, b);
    }
    #[inline]
    fn fixed(&mut self, v: u64, width: usize) {
        match width {
            8 => self.extend_from_slice(&v.to_le_bytes()),
            4 => self.extend_from_slice(&(v as u32).to_le_bytes()),
            _ => self.extend_from_slice(&v.to_le_bytes()[..width]),
        }
    }
    #[inline]
    fn open(&mut self, reserved: usize) -> usize {
        self.extend_from_slice(&[0, 0][..reserved]);
        self.len()
    }
    fn close(&mut self, at: usize, reserved: usize) {
        let end = self.len();
        // Messages are at most 2 GiB (as `Enc::size` counts them).
        let len = u32::try_from(end - at).unwrap_or(u32::MAX - 1);
        let need = varint_len(u64::from(len));
        let start = at - reserved;
        if need < reserved {
            self.copy_within(at..end, start + need);
            self.truncate(end - (reserved - need));
        } else if need > reserved {
            self.resize(end + (need - reserved), 0);
            self.copy_within(at..end, start + need);
        }
        let mut v = u64::from(len);
        for b in &mut self[start..start + need] {
            *b = (v as u8 & 0x7f) | 0x80;
            v >>= 7;
        }
        self[start + need - 1] &= 0x7f;
    }
}

struct Enc<'a, 'm> {
    msg: &'a Message<'m>,
    sizes: Vec<u32>,
}

/// Not counted yet.
const UNCOUNTED: u32 = u32::MAX;

/// Encodes `msg` into `out` (appending).
pub fn encode_into(msg: &Message<'_>, out: &mut Vec<u8>) {
    encode_node_into(msg, 0, out);
}

/// Encodes the contents of node `n` of `msg` (no tag, no length) into `out` (appending): what
/// the device writes for a sub-message resident in its memory.
pub(crate) fn encode_node_into(msg: &Message<'_>, n: u32, out: &mut Vec<u8>) {
    // The sizes' vector is made when a first size is counted (none is, for a message whose
    // sub-messages were all decoded from under 16 KiB), from the thread's, reused from encode to
    // encode.
    let mut e = Enc { msg, sizes: Vec::new() };
    e.node(n, out, 0);
    if e.sizes.capacity() != 0 && e.sizes.capacity() <= 1 << 16 {
        let _ = SIZES.try_with(|s| s.set(e.sizes));
    }
}

thread_local! {
    static SIZES: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Encodes `msg`.
pub fn encode(msg: &Message<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(msg, &mut out);
    out
}

impl Enc<'_, '_> {
    /// Writes (or counts) one value of `field` without its tag.
    #[inline(always)]
    fn value<S: Sink>(&mut self, field: &Field, slot: Slot, s: &mut S, depth: usize) {
        match (field.enc, slot) {
            (op, Slot::Scalar(b)) => scalar(op, b, s),
            (_, Slot::Bytes(p, sp)) => s.span(self.msg, p, sp),
            (EncOp::Group, Slot::Msg(n)) => {
                if S::WRITE {
                    self.node(n, s, depth + 1);
                } else {
                    s.fixed(0, self.size(n, depth + 1) as usize);
                }
            }
            (_, Slot::Msg(n)) => self.length_and_body(n, s, depth),
            (_, Slot::List { .. } | Slot::Absent) => {}
        }
    }

    /// A sub-message's length, then its fields (or, counting, their size).
    ///
    /// Writing a node whose size is not known yet and whose decoded input was under 16 KiB, the
    /// body is written first, after room for a one-byte (under 128 input bytes) or two-byte
    /// length, and the length put in after it; the body moves only if its length needs another
    /// width than the input's had (fields left out, merged, or set since). Larger nodes are
    /// counted first, so their bodies never move.
    #[inline(always)]
    fn length_and_body<S: Sink>(&mut self, n: u32, s: &mut S, depth: usize) {
        if S::WRITE && self.sizes.get(n as usize).is_none_or(|&k| k == UNCOUNTED) {
            let hint = self.msg.nodes[n as usize].wire_len;
            if hint < 1 << 14 {
                let reserved = if hint < 1 << 7 { 1 } else { 2 };
                let at = s.open(reserved);
                self.node(n, s, depth + 1);
                // Each node is written once: its length is not needed again.
                s.close(at, reserved);
                return;
            }
        }
        let len = self.size(n, depth + 1);
        s.varint(u64::from(len));
        if S::WRITE {
            self.node(n, s, depth + 1);
        } else {
            s.fixed(0, len as usize);
        }
    }

    #[inline(always)]
    fn tagged<S: Sink>(&mut self, field: &Field, slot: Slot, s: &mut S, depth: usize) {
        s.tag(field.tag);
        self.value(field, slot, s, depth);
        if field.enc == EncOp::Group {
            s.varint((u64::from(field.number) << 3) | WireType::EndGroup as u64);
        }
    }

    /// The encoded length of node `n`'s fields, counted once.
    fn size(&mut self, n: u32, depth: usize) -> u32 {
        if self.sizes.is_empty() {
            self.sizes = SIZES.try_with(std::cell::Cell::take).unwrap_or_default();
            self.sizes.clear();
            self.sizes.resize(self.msg.nodes.len(), UNCOUNTED);
        }
        let known = self.sizes[n as usize];
        if known != UNCOUNTED {
            return known;
        }
        let mut c = Count(0);
        self.node(n, &mut c, depth);
        // Messages are at most 2 GiB (their lengths are 32-bit on the wire too).
        let len = u32::try_from(c.0).unwrap_or(u32::MAX - 1);
        self.sizes[n as usize] = len;
        len
    }

    /// Writes (or counts) node `n`'s fields.
    fn node<S: Sink>(&mut self, n: u32, s: &mut S, depth: usize) {
        let msg = self.msg;
        let node = msg.nodes[n as usize];
        let class = msg.table.class(node.class);
        let slots = msg.slots_of(n);
        if class.map_entry {
            for (field, &slot) in class.fields.iter().zip(slots) {
                self.field(class, field, slot, s, depth);
            }
        } else {
            // The common case written out over the class's packed encoder table: one dispatch
            // on what the slot holds, then on how the type is written.
            let mut mask = node.mask;
            while mask != 0 {
                let fi = mask.trailing_zeros() as usize;
                mask &= mask - 1;
                let (Some(e), Some(&slot)) = (class.enc.get(fi), slots.get(fi)) else { continue };
                match slot {
                    Slot::Scalar(b) => {
                        if e.skip_zero && b == 0 {
                            continue;
                        }
                        s.tag(Tag { bytes: e.tag, len: e.tag_len });
                        scalar(e.op, b, s);
                    }
                    Slot::Bytes(p, sp) => {
                        if e.skip_zero && sp.len == 0 {
                            continue;
                        }
                        s.tag(Tag { bytes: e.tag, len: e.tag_len });
                        s.span(msg, p, sp);
                    }
                    Slot::Msg(n) if e.op == EncOp::Message => {
                        s.tag(Tag { bytes: e.tag, len: e.tag_len });
                        self.length_and_body(n, s, depth);
                    }
                    _ => self.field(class, &class.fields[fi], slot, s, depth),
                }
            }
            if let (Some(fields), Some(rest)) = (class.fields.get(64..), slots.get(64..)) {
                for (field, &slot) in fields.iter().zip(rest) {
                    self.field(class, field, slot, s, depth);
                }
            }
        }
        let mut u = node.unknown;
        while u != NONE {
            let el = msg.elems[u as usize];
            if let Slot::Bytes(p, sp) = el.slot {
                s.raw(msg.bytes(p, sp));
            }
            u = el.next;
        }
    }

    /// Writes (or counts) one field of a node of `class`.
    #[inline(always)]
    fn field<S: Sink>(&mut self, class: &Class, field: &Field, slot: Slot, s: &mut S, depth: usize) {
        let msg = self.msg;
        match slot {
            // A map entry writes key and value even when absent.
            Slot::Absent if class.map_entry => self.map_default(field, s),
            Slot::Absent => {}
            Slot::List { first, len, .. } => {
                if len == 0 {
                    return;
                }
                if field.packed {
                    let mut c = Count(0);
                    for el in msg.elems_from(first) {
                        self.value(field, el, &mut c, depth);
                    }
                    s.varint((u64::from(field.number) << 3) | WireType::Len as u64);
                    s.varint(c.0 as u64);
                    for el in msg.elems_from(first) {
                        self.value(field, el, s, depth);
                    }
                } else {
                    for el in msg.elems_from(first) {
                        self.tagged(field, el, s, depth);
                    }
                }
            }
            slot => {
                if !field.presence && !class.map_entry && is_zero(slot) {
                    return;
                }
                self.tagged(field, slot, s, depth);
            }
        }
    }

    /// A map entry's absent key or value: its tag and zero value (an empty message).
    fn map_default<S: Sink>(&mut self, field: &Field, s: &mut S) {
        s.varint((u64::from(field.number) << 3) | field.kind.wire_type() as u64);
        match field.kind.wire_type() {
            WireType::Fixed64 => s.fixed(0, 8),
            WireType::Fixed32 => s.fixed(0, 4),
            WireType::Len => s.varint(0),
            _ => s.varint(0),
        }
    }
}

/// Writes (or counts) a scalar's stored bits as its type is written.
#[inline(always)]
fn scalar<S: Sink>(op: EncOp, b: u64, s: &mut S) {
    match op {
        EncOp::Fixed64 => s.fixed(b, 8),
        EncOp::Fixed32 => s.fixed(b, 4),
        EncOp::Sint32 => s.varint(u64::from(zigzag32(b as i32))),
        EncOp::Sint64 => s.varint(zigzag64(b as i64)),
        _ => s.varint(b),
    }
}

/// Whether a stored value is its type's zero (left out for proto3 fields without presence).
pub(crate) fn is_zero(slot: Slot) -> bool {
    match slot {
        Slot::Scalar(b) => b == 0,
        Slot::Bytes(_, s) => s.len == 0,
        Slot::Absent => true,
        Slot::Msg(_) | Slot::List { .. } => false,
    }
}
