//! A decoded message: a tree of nodes in a few flat vectors, its string and bytes values in
//! host and device arenas (as the schema table places them), read through typed accessors.
//!
//! A node is one message instance: a run of slots, one per field its class declares, in field
//! order (the table's layout, as upb lays out a message), so a field is found, set and merged
//! in one step by its index, and written back in number order without sorting. A repeated
//! field's slot heads a list of elements. Scalars are kept in 64 bits; strings and bytes as
//! spans of an arena. Fields the class does not declare (and a closed enum's undeclared values)
//! are kept in order as raw wire bytes, and re-emitted by the encoder. What the slots cost is
//! bounded against the input ([`crate::decode::DecodeOptions::max_slot_bytes_per_input_byte`]).

use crate::arena::{Arena, Pool, Span};
use crate::schema::{ClassId, Field, Kind, SchemaTable};

/// No node or element.
pub(crate) const NONE: u32 = u32::MAX;

/// The chunk index of a span in the input itself (alias mode), not in an arena.
pub(crate) const INPUT_CHUNK: u32 = u32::MAX;

/// One stored value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A field not present.
    Absent,
    /// A scalar's bits: integers sign- or zero-extended, floats as their IEEE bits.
    Scalar(u64),
    /// A string or bytes value.
    Bytes(Pool, Span),
    /// A sub-message.
    Msg(u32),
    /// A repeated field's elements: first and last element index, and how many.
    List { first: u32, last: u32, len: u32 },
}

/// The bytes one slot takes (what [`crate::decode::DecodeOptions::max_slot_bytes_per_input_byte`]
/// counts).
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// One element of a repeated field (or of a node's unknown fields).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Elem {
    pub slot: Slot,
    pub next: u32,
}

/// [`Node::wire_len`] of a node not decoded from a length-delimited field.
pub(crate) const NO_HINT: u32 = u32::MAX;

/// One message instance.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node {
    pub class: ClassId,
    /// Its slots: `slots[base..base + width]`, by field index.
    pub base: u32,
    pub width: u32,
    /// The length its bytes had in the decoded input (a sub-message's, or [`NO_HINT`]): a hint
    /// for the encoder of how long the length prefix it writes before them will be
    /// ([`crate::encode`]), never trusted for the length itself.
    pub wire_len: u32,
    /// Bit `i` set: field index `i` (< 64) is present; wider fields are found by their slots.
    pub mask: u64,
    /// Unknown fields: first and last element (each a host-arena span of raw wire bytes).
    pub unknown: u32,
    pub unknown_last: u32,
    /// Stored in device memory (an Acc-placed field's sub-message, or inside one).
    pub device: bool,
}

/// Counts of a decode: the modelled writes and where the bytes went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DecodeStats {
    /// Host writes: one per temp-buffer fill and one at the end (one-shot), or one per host
    /// value (field by field).
    pub host_writes: u64,
    /// Bytes of host-placed values (scalars count 8, strings and bytes their length).
    pub host_bytes: u64,
    /// Writes of device-placed values (one per value: they go straight to device memory).
    pub device_writes: u64,
    /// Bytes of device-placed values.
    pub device_bytes: u64,
    /// Host chunks taken.
    pub host_chunks: u64,
    /// Device chunks taken.
    pub device_chunks: u64,
}

impl DecodeStats {
    /// What RpcNIC's hardware model ([`tern_hw::rpc`]) projects a message's deserialization
    /// from: these one-shot counts beside `field_by_field`'s (a field-by-field decode of the same
    /// `wire_bytes` bytes), whose host writes are one per host value.
    pub fn model_counts(&self, field_by_field: &DecodeStats, wire_bytes: usize) -> tern_hw::rpc::Counts {
        tern_hw::rpc::Counts {
            bytes: wire_bytes as u64,
            fields: field_by_field.host_writes + field_by_field.device_writes,
            host_writes_one_shot: self.host_writes,
            host_writes_field_by_field: field_by_field.host_writes,
            host_bytes: self.host_bytes,
        }
    }
}

/// A decoded message. Its chunks go back to their pools when it is dropped.
#[derive(Debug)]
pub struct Message<'t> {
    pub(crate) table: &'t SchemaTable,
    /// The input, where host values borrow it (alias mode); empty otherwise.
    pub(crate) input: &'t [u8],
    pub(crate) pools: &'t crate::decode::Pools,
    /// Everything else, behind one pointer: a message is cheap to move, and its vectors (with
    /// their capacity) are kept for the thread's next message when it is dropped.
    /// (`None` only while being dropped.)
    body: Option<Box<Body>>,
}

/// A message's vectors and arenas (crate-private fields: read a message through its accessors).
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct Body {
    pub(crate) nodes: Vec<Node>,
    pub(crate) slots: Vec<Slot>,
    pub(crate) elems: Vec<Elem>,
    pub(crate) host: Arena,
    pub(crate) device: Arena,
    pub(crate) stats: DecodeStats,
    /// (class, field index) of each sub-message being decoded, for error paths.
    pub(crate) path: Vec<(ClassId, u16)>,
    /// The decoder's stack of messages it is inside (kept here for its capacity).
    pub(crate) frames: Vec<Frame>,
}

/// A message (or group) the decoder's fast path is inside while it reads one nested in it:
/// what it resumes with when that one ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Frame {
    /// Its node.
    pub node: u32,
    /// Its presence mask.
    pub mask: u64,
    /// Where its bytes end in the reader's buffer.
    pub limit: usize,
    /// Its group's field number (0: a message).
    pub group: u32,
}

impl std::ops::Deref for Message<'_> {
    type Target = Body;
    #[inline(always)]
    fn deref(&self) -> &Body {
        self.body.as_deref().expect("a message has its body until dropped")
    }
}

impl std::ops::DerefMut for Message<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut Body {
        self.body.as_deref_mut().expect("a message has its body until dropped")
    }
}

/// Bodies kept per thread, and the most entries a kept vector may hold.
const SPARES: usize = 4;
const SPARE_MAX: usize = 1 << 16;

thread_local! {
    // Boxed: a body moves in and out as one pointer.
    #[allow(clippy::vec_box)]
    static SPARE: std::cell::RefCell<Vec<Box<Body>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Body {
    /// An empty body, the thread's kept one where it has one.
    fn take() -> Box<Body> {
        SPARE.with(|s| s.borrow_mut().pop()).unwrap_or_default()
    }

    /// Keeps an emptied body (its arenas already released) for the thread's next message,
    /// unless it grew large.
    fn keep(mut self: Box<Body>) {
        if self.nodes.capacity() > SPARE_MAX || self.slots.capacity() > SPARE_MAX || self.elems.capacity() > SPARE_MAX {
            return;
        }
        self.nodes.clear();
        self.slots.clear();
        self.elems.clear();
        self.path.clear();
        self.frames.clear();
        self.stats = DecodeStats::default();
        // A thread being torn down keeps nothing.
        let _ = SPARE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARES {
                s.push(self);
            }
        });
    }
}

impl Drop for Message<'_> {
    fn drop(&mut self) {
        let Some(mut body) = self.body.take() else { return };
        body.host.release(&self.pools.host);
        body.device.release(&self.pools.device);
        body.keep();
    }
}

/// A value read from a message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldValue<'m> {
    /// `int32`, `sint32`, `sfixed32`.
    I32(i32),
    /// `int64`, `sint64`, `sfixed64`.
    I64(i64),
    /// `uint32`, `fixed32`.
    U32(u32),
    /// `uint64`, `fixed64`.
    U64(u64),
    /// `float`.
    F32(f32),
    /// `double`.
    F64(f64),
    /// `bool`.
    Bool(bool),
    /// An enum's number.
    Enum(i32),
    /// `string` (proto2 strings are not checked for UTF-8: [`FieldValue::Bytes`] if invalid).
    Str(&'m str),
    /// `bytes` (or a proto2 string that is not UTF-8).
    Bytes(&'m [u8]),
    /// A message or group.
    Message(MessageRef<'m>),
}

/// A message node of a decoded tree.
#[derive(Debug, Clone, Copy)]
pub struct MessageRef<'m> {
    msg: &'m Message<'m>,
    node: u32,
}

impl PartialEq for MessageRef<'_> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.msg, other.msg) && self.node == other.node
    }
}

impl<'t> Message<'t> {
    /// The top-level message.
    pub fn root(&self) -> MessageRef<'_> {
        MessageRef { msg: self, node: 0 }
    }

    /// The schema table it was decoded with.
    pub fn table(&self) -> &'t SchemaTable {
        self.table
    }

    /// What decoding it counted.
    pub fn stats(&self) -> DecodeStats {
        self.stats
    }

    #[inline(always)]
    pub(crate) fn bytes(&self, pool: Pool, s: Span) -> &[u8] {
        match (pool, s.chunk) {
            (Pool::Host, INPUT_CHUNK) => &self.input[s.off as usize..(s.off + s.len) as usize],
            (Pool::Host, _) => self.host.get(s),
            (Pool::Device, _) => self.device.get(s),
        }
    }

    /// The bytes of a span, if the message has them (for spans read from untrusted records).
    pub(crate) fn try_bytes(&self, pool: Pool, s: Span) -> Option<&[u8]> {
        match (pool, s.chunk) {
            (Pool::Host, INPUT_CHUNK) => self.input.get(s.off as usize..s.off.checked_add(s.len)? as usize),
            (Pool::Host, _) => self.host.try_get(s),
            (Pool::Device, _) => self.device.try_get(s),
        }
    }

    /// A message with no node yet, its vectors the thread's spare ones (`input`: what alias mode
    /// borrows, else empty).
    pub(crate) fn empty(table: &'t SchemaTable, input: &'t [u8], pools: &'t crate::decode::Pools) -> Message<'t> {
        Message { table, input, pools, body: Some(Body::take()) }
    }

    /// A new node of `class`, its slots empty.
    pub(crate) fn add_node(&mut self, class: ClassId, device: bool) -> u32 {
        let width = self.table.class(class).fields.len();
        let base = self.slots.len();
        // Copied from a run of empty slots (one memcpy) rather than written one by one.
        static ABSENT: [Slot; 64] = [Slot::Absent; 64];
        match ABSENT.get(..width) {
            Some(empty) => self.slots.extend_from_slice(empty),
            None => self.slots.resize(base + width, Slot::Absent),
        }
        self.nodes.push(Node {
            class,
            base: base as u32,
            width: width as u32,
            wire_len: NO_HINT,
            mask: 0,
            unknown: NONE,
            unknown_last: NONE,
            device,
        });
        (self.nodes.len() - 1) as u32
    }

    /// Notes that `len` more input bytes were decoded into `node` (a sub-message's body; a
    /// singular one given twice merges, so its hint is the sum).
    #[inline]
    pub(crate) fn hint_len(&mut self, node: u32, len: usize) {
        let n = &mut self.nodes[node as usize];
        let len = u32::try_from(len).unwrap_or(NO_HINT);
        n.wire_len = if n.wire_len == NO_HINT { len } else { n.wire_len.saturating_add(len) };
    }

    /// Marks field index `fi` of `node` present.
    #[inline]
    pub(crate) fn mark(&mut self, node: u32, fi: usize) {
        if fi < 64 {
            self.nodes[node as usize].mask |= 1 << fi;
        }
    }

    /// Empties field index `fi` of `node`.
    pub(crate) fn unset(&mut self, node: u32, fi: usize) {
        let body = &mut **self;
        let n = &mut body.nodes[node as usize];
        if fi < 64 {
            n.mask &= !(1 << fi);
        }
        body.slots[n.base as usize + fi] = Slot::Absent;
    }

    /// Empties the slots of the other members of field `fi`'s oneof.
    pub(crate) fn clear_oneof(&mut self, node: u32, fi: usize) {
        let class = self.table.class(self.nodes[node as usize].class);
        let Some(o) = class.fields[fi].oneof else { return };
        for (other, f) in class.fields.iter().enumerate() {
            if other != fi && f.oneof == Some(o) {
                self.unset(node, other);
            }
        }
    }

    /// Stores `slot` as field `fi` of `node`: appended to a repeated field's list, or (the last
    /// one wins) in a singular field's slot, first clearing the other members of its oneof when
    /// it was absent; the field is marked present.
    #[inline(always)]
    pub(crate) fn put(&mut self, node: u32, fi: usize, repeated: bool, oneof: bool, slot: Slot) {
        let at = self.nodes[node as usize].base as usize + fi;
        if repeated {
            self.push_elem(at, slot);
        } else {
            if oneof && self.slots[at] == Slot::Absent {
                self.clear_oneof(node, fi);
            }
            self.slots[at] = slot;
        }
        self.mark(node, fi);
    }

    /// Appends an element to the list in slot `at`.
    #[inline]
    pub(crate) fn push_elem(&mut self, at: usize, slot: Slot) {
        let i = self.elems.len() as u32;
        self.elems.push(Elem { slot, next: NONE });
        match &mut self.slots[at] {
            Slot::List { last, len, .. } => {
                let prev = *last;
                *last = i;
                *len += 1;
                self.elems[prev as usize].next = i;
            }
            s => *s = Slot::List { first: i, last: i, len: 1 },
        }
    }

    /// Node `n`'s slots, by field index (the order encoders write them in).
    #[inline]
    pub(crate) fn slots_of(&self, n: u32) -> &[Slot] {
        let node = &self.nodes[n as usize];
        &self.slots[node.base as usize..(node.base + node.width) as usize]
    }

    /// Node `n`'s present fields (`all`: every field, absent ones too), in field order, as
    /// (field index, slot).
    #[inline]
    pub(crate) fn present(&self, n: u32, all: bool) -> impl Iterator<Item = (usize, Slot)> + '_ {
        let slots = self.slots_of(n);
        let mut mask = match (all, slots.len()) {
            (false, _) => self.nodes[n as usize].mask,
            (true, w) if w >= 64 => u64::MAX,
            (true, w) => (1u64 << w) - 1,
        };
        let low = std::iter::from_fn(move || {
            if mask == 0 {
                return None;
            }
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            Some((i, slots[i]))
        });
        let high = slots.iter().copied().enumerate().skip(64).filter(move |(_, s)| all || *s != Slot::Absent);
        low.chain(high)
    }

    /// The elements of a list starting at `first`, in order.
    pub(crate) fn elems_from(&self, first: u32) -> impl Iterator<Item = Slot> + '_ {
        let mut at = first;
        std::iter::from_fn(move || {
            if at == NONE {
                return None;
            }
            let e = self.elems[at as usize];
            at = e.next;
            Some(e.slot)
        })
    }

    #[inline(always)]
    pub(crate) fn value(&self, field: &Field, slot: Slot) -> FieldValue<'_> {
        match (field.kind, slot) {
            (_, Slot::Msg(n)) => FieldValue::Message(MessageRef { msg: self, node: n }),
            (Kind::String, Slot::Bytes(p, s)) => match std::str::from_utf8(self.bytes(p, s)) {
                Ok(t) => FieldValue::Str(t),
                Err(_) => FieldValue::Bytes(self.bytes(p, s)),
            },
            (_, Slot::Bytes(p, s)) => FieldValue::Bytes(self.bytes(p, s)),
            (k, Slot::Scalar(v)) => scalar(k, v),
            (_, Slot::List { .. } | Slot::Absent) => FieldValue::U64(0),
        }
    }
}

/// The values of a message node, in field-number order ([`MessageRef::values`]).
#[derive(Debug, Clone)]
pub struct Values<'m> {
    msg: &'m Message<'m>,
    class: &'m crate::schema::Class,
    slots: &'m [Slot],
    /// Present fields below 64 not visited yet.
    mask: u64,
    /// The next field index from 64 up to look at.
    high: usize,
    /// The next element of the list being visited (`NONE`: none), and its field.
    list: u32,
    list_field: usize,
}

impl<'m> Iterator for Values<'m> {
    type Item = (&'m Field, FieldValue<'m>);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.list != NONE {
                let e = self.msg.elems[self.list as usize];
                self.list = e.next;
                let f = &self.class.fields[self.list_field];
                return Some((f, self.msg.value(f, e.slot)));
            }
            let fi = if self.mask != 0 {
                let i = self.mask.trailing_zeros() as usize;
                self.mask &= self.mask - 1;
                i
            } else {
                let i = self.high;
                if i >= self.slots.len() {
                    return None;
                }
                self.high += 1;
                i
            };
            match self.slots[fi] {
                Slot::Absent => {}
                Slot::List { first, .. } => {
                    self.list = first;
                    self.list_field = fi;
                }
                s => {
                    let f = &self.class.fields[fi];
                    return Some((f, self.msg.value(f, s)));
                }
            }
        }
    }
}

/// The typed value of a scalar's stored bits.
pub(crate) fn scalar(kind: Kind, v: u64) -> FieldValue<'static> {
    match kind {
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => FieldValue::I32(v as i32),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => FieldValue::I64(v as i64),
        Kind::Uint32 | Kind::Fixed32 => FieldValue::U32(v as u32),
        Kind::Uint64 | Kind::Fixed64 => FieldValue::U64(v),
        Kind::Float => FieldValue::F32(f32::from_bits(v as u32)),
        Kind::Double => FieldValue::F64(f64::from_bits(v)),
        Kind::Bool => FieldValue::Bool(v != 0),
        Kind::Enum(_) => FieldValue::Enum(v as i32),
        _ => FieldValue::U64(v),
    }
}

impl<'m> MessageRef<'m> {
    pub(crate) fn new(msg: &'m Message<'m>, node: u32) -> MessageRef<'m> {
        MessageRef { msg, node }
    }

    fn node(&self) -> &'m Node {
        &self.msg.nodes[self.node as usize]
    }

    /// Its class.
    pub fn class(&self) -> &'m crate::schema::Class {
        self.msg.table.class(self.node().class)
    }

    /// Stored in device memory.
    pub fn in_device(&self) -> bool {
        self.node().device
    }

    /// The field with `number` and its slot.
    #[inline]
    fn slot(&self, number: u32) -> Option<(&'m Field, Slot)> {
        let node = &self.msg.nodes[self.node as usize];
        let class = self.msg.table.class(node.class);
        let fi = class.index_of(number)?;
        Some((&class.fields[fi], *self.msg.slots.get(node.base as usize + fi)?))
    }

    /// Every value present, in field-number order, each with its field: a singular field's
    /// value, each element of a repeated field (a map's entries as messages). The way to read a
    /// whole message: only present fields are visited.
    pub fn values(&self) -> Values<'m> {
        let node = &self.msg.nodes[self.node as usize];
        Values {
            msg: self.msg,
            class: self.class(),
            slots: self.msg.slots_of(self.node),
            mask: node.mask,
            high: 64,
            list: NONE,
            list_field: 0,
        }
    }

    /// Whether a singular field is present (a repeated one: has elements).
    #[inline]
    pub fn has(&self, number: u32) -> bool {
        match self.slot(number) {
            Some((_, Slot::List { len, .. })) => len > 0,
            Some((_, Slot::Absent)) | None => false,
            Some(_) => true,
        }
    }

    /// A singular field's value, `None` if absent (see [`get_or_default`](Self::get_or_default)).
    #[inline]
    pub fn get(&self, number: u32) -> Option<FieldValue<'m>> {
        match self.slot(number)? {
            (_, Slot::List { .. } | Slot::Absent) => None,
            (f, s) => Some(self.msg.value(f, s)),
        }
    }

    /// A singular field's value, or its default (declared, or zero) if absent; `None` for a
    /// message field that is absent, or a number the class does not declare.
    pub fn get_or_default(&self, number: u32) -> Option<FieldValue<'m>> {
        if let Some(v) = self.get(number) {
            return Some(v);
        }
        let f = self.class().field(number)?;
        use crate::schema::DefaultValue as D;
        Some(match (&f.default, f.kind) {
            (_, Kind::Message(_) | Kind::Group(_)) => return None,
            (Some(D::Str(s)), _) => FieldValue::Str(s),
            (Some(D::Bytes(b)), _) => FieldValue::Bytes(b),
            (Some(D::I64(v)), k) => scalar(k, *v as u64),
            (Some(D::U64(v)), k) => scalar(k, *v),
            (Some(D::F64(v)), k) => scalar(k, v.to_bits()),
            (Some(D::F32(v)), k) => scalar(k, u64::from(v.to_bits())),
            (Some(D::Bool(v)), k) => scalar(k, u64::from(*v)),
            (None, Kind::String) => FieldValue::Str(""),
            (None, Kind::Bytes) => FieldValue::Bytes(&[]),
            (None, k) => scalar(k, 0),
        })
    }

    /// A field's value by name.
    pub fn get_by_name(&self, name: &str) -> Option<FieldValue<'m>> {
        self.get(self.class().field_by_name(name)?.number)
    }

    /// A repeated field's elements, in order (empty if absent); a map's entries as messages.
    pub fn repeated(&self, number: u32) -> impl Iterator<Item = FieldValue<'m>> + 'm {
        let (field, first) = match self.slot(number) {
            Some((f, Slot::List { first, .. })) => (Some(f), first),
            _ => (None, NONE),
        };
        let msg = self.msg;
        msg.elems_from(first).map(move |s| msg.value(field.expect("a list has its field"), s))
    }

    /// The number of elements of a repeated field.
    pub fn len_of(&self, number: u32) -> usize {
        match self.slot(number) {
            Some((_, Slot::List { len, .. })) => len as usize,
            _ => 0,
        }
    }

    /// The unknown fields, each as its raw wire bytes (tag and value), in order.
    pub fn unknown_fields(&self) -> impl Iterator<Item = &'m [u8]> + 'm {
        let msg = self.msg;
        msg.elems_from(self.node().unknown).map(move |s| match s {
            Slot::Bytes(p, s) => msg.bytes(p, s),
            _ => &[][..],
        })
    }
}
