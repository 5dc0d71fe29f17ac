//! Building and changing messages through the schema table: the write side of the accessor API.
//!
//! [`Message::new`] makes an empty message of a class; [`Message::root_mut`] gives its top level
//! as a [`MessageMut`], which sets, appends, clears and descends into fields by number or by name
//! ([`FieldId`]). Values are type-checked against the field's declaration (an `int32` takes
//! [`FieldValue::I32`], a `string` [`FieldValue::Str`], and so on) and stored where the schema
//! places them: a `(tern.acc)` field's value, and everything inside an Acc-placed sub-message,
//! in device memory; the rest in host memory. Setting a oneof member clears the others; setting
//! a map key that is there replaces its value. A built message encodes, pre-serializes and reads
//! like a decoded one; its decode counts ([`Message::stats`]) stay zero.
//!
//! ```
//! use tern_rpc::decode::Pools;
//! use tern_rpc::message::{FieldValue, Message};
//!
//! let t = tern_rpc::schema::compile_str(
//!     "p.proto",
//!     "syntax = \"proto3\"; message P { string name = 1; repeated int32 ids = 2; Q q = 3; }
//!      message Q { bool ok = 1; }",
//! )
//! .unwrap();
//! let pools = Pools::default();
//! let mut m = Message::new(&t, t.class_by_name("P").unwrap().id, &pools);
//! let mut p = m.root_mut();
//! p.set("name", FieldValue::Str("tern")).unwrap();
//! p.push(2, FieldValue::I32(7)).unwrap();
//! p.message("q").unwrap().set("ok", FieldValue::Bool(true)).unwrap();
//! assert_eq!(tern_rpc::encode::encode(&m), b"\x0a\x04tern\x12\x01\x07\x1a\x02\x08\x01");
//! ```

use std::fmt;

use crate::arena::Pool;
use crate::decode::Pools;
use crate::message::{FieldValue, Message, MessageRef, NONE, Slot};
use crate::placement::LiveSchema;
use crate::schema::{Class, ClassId, Field, Kind, Label, Placement, SchemaTable};

/// A field named by its number or its name.
pub trait FieldId: Copy {
    /// Its index in `class`'s fields.
    fn index_in(self, class: &Class) -> Option<usize>;
    /// How an error names it.
    fn describe(self) -> String;
}

impl FieldId for u32 {
    fn index_in(self, class: &Class) -> Option<usize> {
        class.index_of(self)
    }
    fn describe(self) -> String {
        self.to_string()
    }
}

impl FieldId for &str {
    fn index_in(self, class: &Class) -> Option<usize> {
        class.fields.iter().position(|f| f.name == self)
    }
    fn describe(self) -> String {
        self.to_string()
    }
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildErrorKind {
    /// The class declares no such field.
    NoField,
    /// Not a reference field (a string, bytes or message field, singular or repeated): it has
    /// no data of its own in a pool to move.
    NotReference,
    /// A value of another type than the field's.
    WrongType {
        /// The field's type.
        expected: &'static str,
        /// The value's.
        given: &'static str,
    },
    /// A singular-field operation on a repeated field (`set` for `push`, `message` for
    /// `push_message`).
    Repeated,
    /// A repeated-field operation on a singular field.
    NotRepeated,
    /// A sub-message operation on a field that is not a message or group.
    NotMessage,
    /// A map operation on a field that is not a map.
    NotMap,
    /// A number a closed (proto2) enum does not declare.
    UndeclaredEnumValue(i32),
    /// The pool the value goes to has no chunk left.
    PoolExhausted(Pool),
    /// A device buffer taken from another pool than the message's device pool.
    ForeignBuffer,
    /// A value not in device memory (move it there first).
    NotInDevice,
}

/// A refused change: which field (`Class.field`, the field as given when the class has none by
/// that name or number) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {kind}")]
pub struct BuildError {
    /// The field.
    pub field: String,
    /// Why.
    pub kind: BuildErrorKind,
}

impl fmt::Display for BuildErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildErrorKind::NoField => f.write_str("no such field"),
            BuildErrorKind::NotReference => {
                f.write_str("not a string, bytes or message field (the only fields whose data can move)")
            }
            BuildErrorKind::WrongType { expected, given } => write!(f, "a {expected} field given a {given} value"),
            BuildErrorKind::Repeated => f.write_str("a repeated field (push, push_message or insert)"),
            BuildErrorKind::NotRepeated => f.write_str("not a repeated field (set or message)"),
            BuildErrorKind::NotMessage => f.write_str("not a message or group field"),
            BuildErrorKind::NotMap => f.write_str("not a map field"),
            BuildErrorKind::UndeclaredEnumValue(n) => write!(f, "the closed enum declares no value {n}"),
            BuildErrorKind::ForeignBuffer => f.write_str("a device buffer from another pool than the message's"),
            BuildErrorKind::NotInDevice => f.write_str("a value not in device memory"),
            BuildErrorKind::PoolExhausted(p) => {
                write!(f, "the {} chunk pool is exhausted", if *p == Pool::Host { "host" } else { "device" })
            }
        }
    }
}

impl<'t> Message<'t> {
    /// An empty message of class `class`, its values to be placed in `pools`.
    pub fn new(table: &'t SchemaTable, class: ClassId, pools: &'t Pools) -> Message<'t> {
        let mut m = Message::empty(table, &[], pools);
        m.add_node(class, false);
        m
    }

    /// The top level, to change.
    pub fn root_mut(&mut self) -> MessageMut<'_, 't> {
        MessageMut { msg: self, node: 0 }
    }
}

/// What a move of a field copied between host and device memory (the modelled PCIe transfer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Moved {
    /// String and bytes values copied.
    pub values: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Whether the schema table's placement of the field changed with it (automatic field
    /// updating).
    pub schema_updated: bool,
}

/// A message node being changed (the top level, or a sub-message reached from it).
#[derive(Debug)]
pub struct MessageMut<'a, 't> {
    msg: &'a mut Message<'t>,
    node: u32,
}

/// The name of a value's variant, for errors.
fn given(v: &FieldValue<'_>) -> &'static str {
    match v {
        FieldValue::I32(_) => "I32",
        FieldValue::I64(_) => "I64",
        FieldValue::U32(_) => "U32",
        FieldValue::U64(_) => "U64",
        FieldValue::F32(_) => "F32",
        FieldValue::F64(_) => "F64",
        FieldValue::Bool(_) => "Bool",
        FieldValue::Enum(_) => "Enum",
        FieldValue::Str(_) => "Str",
        FieldValue::Bytes(_) => "Bytes",
        FieldValue::Message(_) => "Message",
    }
}

impl<'t> MessageMut<'_, 't> {
    /// The node as it reads now.
    pub fn as_ref(&self) -> MessageRef<'_> {
        MessageRef::new(self.msg, self.node)
    }

    fn class(&self) -> &'t Class {
        self.msg.table.class(self.msg.nodes[self.node as usize].class)
    }

    fn error(&self, fi: Option<usize>, id: impl FieldId, kind: BuildErrorKind) -> BuildError {
        let class = self.class();
        let field = match fi {
            Some(i) => format!("{}.{}", class.short_name(), class.fields[i].name),
            None => format!("{}.{}", class.short_name(), id.describe()),
        };
        BuildError { field, kind }
    }

    /// The field's index and declaration; `repeated`: whether the operation is for repeated
    /// fields.
    fn field(&self, id: impl FieldId, repeated: bool) -> Result<(usize, &'t Field), BuildError> {
        let class = self.class();
        let fi = id.index_in(class).ok_or_else(|| self.error(None, id, BuildErrorKind::NoField))?;
        let f = &class.fields[fi];
        match (f.label == Label::Repeated, repeated) {
            (true, false) => Err(self.error(Some(fi), id, BuildErrorKind::Repeated)),
            (false, true) => Err(self.error(Some(fi), id, BuildErrorKind::NotRepeated)),
            _ => Ok((fi, f)),
        }
    }

    fn device(&self, f: &Field) -> bool {
        self.msg.nodes[self.node as usize].device || f.placement == Placement::Device
    }

    /// The slot for `v` as field `f` stores it, type-checked.
    fn slot(&mut self, fi: usize, f: &Field, id: impl FieldId, v: FieldValue<'_>) -> Result<Slot, BuildError> {
        let wrong =
            |s: &Self| s.error(Some(fi), id, BuildErrorKind::WrongType { expected: f.kind.name(), given: given(&v) });
        let bits = match (f.kind, v) {
            (Kind::Int32 | Kind::Sint32 | Kind::Sfixed32, FieldValue::I32(x)) => i64::from(x) as u64,
            (Kind::Int64 | Kind::Sint64 | Kind::Sfixed64, FieldValue::I64(x)) => x as u64,
            (Kind::Uint32 | Kind::Fixed32, FieldValue::U32(x)) => u64::from(x),
            (Kind::Uint64 | Kind::Fixed64, FieldValue::U64(x)) => x,
            (Kind::Float, FieldValue::F32(x)) => u64::from(x.to_bits()),
            (Kind::Double, FieldValue::F64(x)) => x.to_bits(),
            (Kind::Bool, FieldValue::Bool(x)) => u64::from(x),
            (Kind::Enum(e), FieldValue::Enum(x) | FieldValue::I32(x)) => {
                let t = self.msg.table.enum_type(e);
                if t.closed && !t.declares(x) {
                    return Err(self.error(Some(fi), id, BuildErrorKind::UndeclaredEnumValue(x)));
                }
                i64::from(x) as u64
            }
            (Kind::String, FieldValue::Str(s)) => return self.store(fi, f, id, s.as_bytes()),
            // A proto2 string may hold bytes that are not UTF-8 (as decoding keeps them).
            (Kind::String, FieldValue::Bytes(b)) if !f.check_utf8 => return self.store(fi, f, id, b),
            (Kind::Bytes, FieldValue::Bytes(b)) => return self.store(fi, f, id, b),
            _ => return Err(wrong(self)),
        };
        Ok(Slot::Scalar(bits))
    }

    fn store(&mut self, fi: usize, f: &Field, id: impl FieldId, bytes: &[u8]) -> Result<Slot, BuildError> {
        let pools = self.msg.pools;
        let (pool, from, arena) = if self.device(f) {
            (Pool::Device, &pools.device, &mut self.msg.device)
        } else {
            (Pool::Host, &pools.host, &mut self.msg.host)
        };
        match arena.push(from, bytes) {
            Some(span) => Ok(Slot::Bytes(pool, span)),
            None => Err(self.error(Some(fi), id, BuildErrorKind::PoolExhausted(pool))),
        }
    }

    fn at(&self, fi: usize) -> usize {
        self.msg.nodes[self.node as usize].base as usize + fi
    }

    /// Puts `slot` in singular field `fi` (clearing the other members of its oneof).
    fn put(&mut self, fi: usize, slot: Slot) {
        let oneof = self.class().fields[fi].oneof.is_some();
        self.msg.put(self.node, fi, false, oneof, slot);
    }

    /// Sets a singular scalar, string or bytes field.
    pub fn set(&mut self, id: impl FieldId, v: FieldValue<'_>) -> Result<(), BuildError> {
        let (fi, f) = self.field(id, false)?;
        let slot = self.slot(fi, f, id, v)?;
        self.put(fi, slot);
        Ok(())
    }

    /// Sets a singular bytes (or proto2 string) field to the bytes of `buf`, which stays in
    /// device memory: the message's device arena takes the buffer over, nothing is copied (a
    /// compute unit's output becomes a response field as the NIC would leave it). The buffer must
    /// come from the message's device pool.
    pub fn set_device(&mut self, id: impl FieldId, buf: crate::cu::DeviceBuf) -> Result<(), BuildError> {
        let (fi, f) = self.field(id, false)?;
        if !(f.kind == Kind::Bytes || (f.kind == Kind::String && !f.check_utf8)) {
            return Err(self.error(
                Some(fi),
                id,
                BuildErrorKind::WrongType { expected: f.kind.name(), given: "device buffer" },
            ));
        }
        let (pool, bytes, chunks) = buf.into_parts();
        if !pool.same_as(&self.msg.pools.device) {
            // Given back to the pool it came from.
            pool.give_run(bytes, chunks);
            return Err(self.error(Some(fi), id, BuildErrorKind::ForeignBuffer));
        }
        let span = self.msg.device.adopt(bytes, chunks);
        self.put(fi, Slot::Bytes(Pool::Device, span));
        Ok(())
    }

    /// Takes a singular bytes (or string) field's value out of the message, in device memory, as
    /// a buffer for a compute unit (the field is then absent). A value with device chunks to
    /// itself (one longer than a chunk has a run of its own) is handed over as it is, nothing
    /// copied; a smaller one is copied into a new buffer (device memory to device memory).
    pub fn take_device(&mut self, id: impl FieldId) -> Result<crate::cu::DeviceBuf, BuildError> {
        let (fi, _) = self.field(id, false)?;
        let Slot::Bytes(Pool::Device, span) = self.msg.slots[self.at(fi)] else {
            return Err(self.error(Some(fi), id, BuildErrorKind::NotInDevice));
        };
        let pools = self.msg.pools;
        let buf = match self.msg.device.take_whole(span, &pools.device) {
            Some((bytes, chunks)) => crate::cu::DeviceBuf::from_parts(&pools.device, bytes, chunks),
            None => crate::cu::DeviceBuf::from_slice(pools, self.msg.device.get(span))
                .ok_or_else(|| self.error(Some(fi), id, BuildErrorKind::PoolExhausted(Pool::Device)))?,
        };
        self.msg.unset(self.node, fi);
        Ok(buf)
    }

    /// Appends a value to a repeated scalar, string or bytes field.
    pub fn push(&mut self, id: impl FieldId, v: FieldValue<'_>) -> Result<(), BuildError> {
        let (fi, f) = self.field(id, true)?;
        if matches!(f.kind, Kind::Message(_) | Kind::Group(_)) {
            return Err(self.error(
                Some(fi),
                id,
                BuildErrorKind::WrongType { expected: f.kind.name(), given: given(&v) },
            ));
        }
        let slot = self.slot(fi, f, id, v)?;
        self.msg.put(self.node, fi, true, false, slot);
        Ok(())
    }

    /// A new node for message field `f`.
    fn new_child(&mut self, fi: usize, f: &Field, id: impl FieldId) -> Result<u32, BuildError> {
        match f.kind {
            Kind::Message(c) | Kind::Group(c) => {
                let device = self.device(f);
                Ok(self.msg.add_node(c, device))
            }
            _ => Err(self.error(Some(fi), id, BuildErrorKind::NotMessage)),
        }
    }

    /// A singular message (or group) field, to change: the sub-message there, or a new empty
    /// one (which makes the field present).
    pub fn message(&mut self, id: impl FieldId) -> Result<MessageMut<'_, 't>, BuildError> {
        let (fi, f) = self.field(id, false)?;
        let child = match self.msg.slots[self.at(fi)] {
            Slot::Msg(c) => c,
            _ => {
                let c = self.new_child(fi, f, id)?;
                self.put(fi, Slot::Msg(c));
                c
            }
        };
        Ok(MessageMut { msg: self.msg, node: child })
    }

    /// Appends a new empty sub-message to a repeated message (or group) field, to change.
    pub fn push_message(&mut self, id: impl FieldId) -> Result<MessageMut<'_, 't>, BuildError> {
        let (fi, f) = self.field(id, true)?;
        let child = self.new_child(fi, f, id)?;
        self.msg.put(self.node, fi, true, false, Slot::Msg(child));
        Ok(MessageMut { msg: self.msg, node: child })
    }

    /// The entry of map field `fi` with `key` (`key_bits`: the key's stored form), if any.
    fn map_entry(&self, fi: usize, key: Slot) -> Option<u32> {
        let Slot::List { first, .. } = self.msg.slots[self.at(fi)] else { return None };
        let same = |a: Slot, b: Slot| match (a, b) {
            (Slot::Bytes(p, x), Slot::Bytes(q, y)) => self.msg.bytes(p, x) == self.msg.bytes(q, y),
            (a, b) => a == b,
        };
        self.msg.elems_from(first).find_map(|e| match e {
            Slot::Msg(n) if self.msg.slots_of(n).first().is_some_and(|&k| same(k, key)) => Some(n),
            _ => None,
        })
    }

    /// The entry of map field `id` for `key`: the one there, or a new one (key set, value
    /// absent).
    fn entry(&mut self, id: impl FieldId, key: FieldValue<'_>) -> Result<MessageMut<'_, 't>, BuildError> {
        let (fi, f) = self.field(id, true)?;
        let entry_class = match f.kind {
            Kind::Message(c) if self.msg.table.class(c).map_entry => c,
            _ => return Err(self.error(Some(fi), id, BuildErrorKind::NotMap)),
        };
        let device = self.device(f);
        // The key, stored first (as a new entry would hold it) to compare with the entries.
        let mut probe = MessageMut { msg: &mut *self.msg, node: 0 };
        let node = probe.msg.add_node(entry_class, device);
        probe.node = node;
        probe.set(1u32, key)?;
        let key_slot = probe.msg.slots_of(node)[0];
        match self.map_entry(fi, key_slot) {
            Some(existing) => {
                // The probe node stays unreferenced, as a replaced sub-message does.
                Ok(MessageMut { msg: self.msg, node: existing })
            }
            None => {
                self.msg.put(self.node, fi, true, false, Slot::Msg(node));
                Ok(MessageMut { msg: self.msg, node })
            }
        }
    }

    /// Sets `key` to `value` in a map field whose values are scalars, strings or bytes
    /// (replacing the value of a key that is there).
    pub fn insert(&mut self, id: impl FieldId, key: FieldValue<'_>, value: FieldValue<'_>) -> Result<(), BuildError> {
        self.entry(id, key)?.set(2u32, value)
    }

    /// The value of `key` in a map field whose values are messages, to change (an empty one
    /// for a key not there).
    pub fn insert_message(&mut self, id: impl FieldId, key: FieldValue<'_>) -> Result<MessageMut<'_, 't>, BuildError> {
        let mut e = self.entry(id, key)?;
        let node = e.message(2u32)?.node;
        Ok(MessageMut { msg: e.msg, node })
    }

    /// The field's index, declaration and stored slot, for a reference field.
    fn reference(&self, id: impl FieldId) -> Result<(usize, &'t Field, Slot), BuildError> {
        let class = self.class();
        let fi = id.index_in(class).ok_or_else(|| self.error(None, id, BuildErrorKind::NoField))?;
        let f = &class.fields[fi];
        if !matches!(f.kind, Kind::String | Kind::Bytes | Kind::Message(_) | Kind::Group(_)) {
            return Err(self.error(Some(fi), id, BuildErrorKind::NotReference));
        }
        Ok((fi, f, self.msg.slots[self.at(fi)]))
    }

    /// Whether field `id`'s data is in device memory (Table III's `isInNIC`): a string's or
    /// bytes' value, a sub-message (its node), a repeated field's elements (all of them). A
    /// field without data reads as where the schema table placed it.
    pub fn is_in_nic(&self, id: impl FieldId) -> Result<bool, BuildError> {
        let (_, f, slot) = self.reference(id)?;
        let placed = self.device(f);
        let in_nic = |s: Slot| match s {
            Slot::Bytes(p, _) => p == Pool::Device,
            Slot::Msg(n) => self.msg.nodes[n as usize].device,
            _ => placed,
        };
        Ok(match slot {
            Slot::List { first, .. } => self.msg.elems_from(first).all(in_nic),
            s => in_nic(s),
        })
    }

    /// Moves field `id`'s data to device memory (Table III's `moveToNIC`): each string and bytes
    /// value copied into the device arena and its reference updated; a sub-message with
    /// everything in it. With `schema` updating, the field's placement in the schema table
    /// follows (the next message is deserialized there).
    pub fn move_to_nic(&mut self, id: impl FieldId, schema: Option<&LiveSchema>) -> Result<Moved, BuildError> {
        self.move_field(id, Placement::Device, schema)
    }

    /// Moves field `id`'s data to host memory (Table III's `moveToCPU`); see
    /// [`move_to_nic`](Self::move_to_nic).
    pub fn move_to_cpu(&mut self, id: impl FieldId, schema: Option<&LiveSchema>) -> Result<Moved, BuildError> {
        self.move_field(id, Placement::Host, schema)
    }

    fn move_field(
        &mut self,
        id: impl FieldId,
        to: Placement,
        schema: Option<&LiveSchema>,
    ) -> Result<Moved, BuildError> {
        let (fi, _, slot) = self.reference(id)?;
        let device = to == Placement::Device;
        let mut moved = Moved::default();
        // Slots to move (and where each is stored: a node's slot or a list element), then
        // sub-messages' contents, without recursion.
        let mut todo: Vec<Slot> = match slot {
            Slot::List { first, .. } => self.msg.elems_from(first).collect(),
            s => vec![s],
        };
        let at = self.at(fi);
        let mut list = match slot {
            Slot::List { first, .. } => first,
            _ => NONE,
        };
        // The field's own values first, in place.
        for (k, s) in todo.clone().into_iter().enumerate() {
            let new = self
                .move_slot(s, device, &mut moved)
                .map_err(|p| self.error(Some(fi), id, BuildErrorKind::PoolExhausted(p)))?;
            if list == NONE {
                self.msg.slots[at] = new;
            } else {
                let e = &mut self.msg.elems[list as usize];
                e.slot = new;
                list = e.next;
            }
            todo[k] = new;
        }
        // Then everything inside the sub-messages moved.
        let mut nodes: Vec<u32> =
            todo.iter().filter_map(|s| if let Slot::Msg(n) = s { Some(*n) } else { None }).collect();
        while let Some(n) = nodes.pop() {
            self.msg.nodes[n as usize].device = device;
            let node = self.msg.nodes[n as usize];
            for i in node.base..node.base + node.width {
                let s = self.msg.slots[i as usize];
                if let Slot::List { first, .. } = s {
                    let mut e = first;
                    while e != NONE {
                        let el = self.msg.elems[e as usize];
                        let new = self
                            .move_slot(el.slot, device, &mut moved)
                            .map_err(|p| self.error(Some(fi), id, BuildErrorKind::PoolExhausted(p)))?;
                        self.msg.elems[e as usize].slot = new;
                        if let Slot::Msg(c) = new {
                            nodes.push(c);
                        }
                        e = el.next;
                    }
                } else {
                    let new = self
                        .move_slot(s, device, &mut moved)
                        .map_err(|p| self.error(Some(fi), id, BuildErrorKind::PoolExhausted(p)))?;
                    self.msg.slots[i as usize] = new;
                    if let Slot::Msg(c) = new {
                        nodes.push(c);
                    }
                }
            }
        }
        if let Some(live) = schema {
            let class = self.msg.nodes[self.node as usize].class;
            moved.schema_updated = live.moved(class, fi, to);
        }
        Ok(moved)
    }

    /// One stored value moved to device (or host) memory: a string's or bytes' value copied
    /// into the other arena (unless it is there already), its new reference returned; anything
    /// else as it is.
    fn move_slot(&mut self, s: Slot, device: bool, moved: &mut Moved) -> Result<Slot, Pool> {
        let Slot::Bytes(pool, span) = s else { return Ok(s) };
        let to = if device { Pool::Device } else { Pool::Host };
        if pool == to {
            return Ok(s);
        }
        let pools = self.msg.pools;
        // The bytes are read from one arena (or the input, in alias mode) and pushed into the
        // other: disjoint parts of the message.
        let msg = &mut *self.msg;
        let input = msg.input;
        let body = &mut **msg;
        let (from, into, into_pool) = match to {
            Pool::Device => (&body.host, &mut body.device, &pools.device),
            Pool::Host => (&body.device, &mut body.host, &pools.host),
        };
        let bytes = match (pool, span.chunk) {
            (Pool::Host, crate::message::INPUT_CHUNK) => &input[span.off as usize..(span.off + span.len) as usize],
            _ => from.get(span),
        };
        let new = into.push(into_pool, bytes).ok_or(to)?;
        moved.values += 1;
        moved.bytes += u64::from(span.len);
        Ok(Slot::Bytes(to, new))
    }

    /// Clears a field (a repeated one: all its elements).
    pub fn clear(&mut self, id: impl FieldId) -> Result<(), BuildError> {
        let class = self.class();
        let fi = id.index_in(class).ok_or_else(|| self.error(None, id, BuildErrorKind::NoField))?;
        self.msg.unset(self.node, fi);
        Ok(())
    }
}
