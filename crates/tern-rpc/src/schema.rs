//! The schema table (RpcNIC §III-B, §III-E): `.proto` files compiled into one entry per message
//! class, each field by number with its type, label, sub-class and placement.
//!
//! The table holds the classes of the compiled file and every class their fields reach (imports
//! included), and nothing else: importing `tern/rpcnic.proto` does not add protobuf's own
//! descriptor messages. Class ids are dense, in the order the classes are met (the file's
//! messages in declaration order, nested ones after their parent, then what fields reach).
//!
//! Everything protobuf's binary format has is kept: all scalar types; enums, open (proto3) or
//! closed (proto2: a value the enum does not declare is kept as an unknown field); nested and
//! recursive messages; groups; repeated fields, packed or not (a decoder accepts both); maps
//! (a repeated field of a map-entry class); oneofs; proto2 defaults and `required`; proto3
//! `optional`. Placement comes from the paper's "Acc" label, the option `(tern.acc)`, which
//! only string, bytes, repeated and message (or group) fields may carry: they are the
//! "dereference" fields whose data lies behind a pointer (§III-E).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::path::Path;

use prost_reflect::{DescriptorPool, FieldDescriptor, MessageDescriptor, Value};
use serde::Serialize;

/// The built-in import that declares `(tern.acc)`.
pub const RPCNIC_PROTO_NAME: &str = "tern/rpcnic.proto";
/// Its source (`crates/tern-rpc/proto/tern/rpcnic.proto`, for other tools' import paths).
pub const RPCNIC_PROTO: &str = include_str!("../proto/tern/rpcnic.proto");

/// Index of a class in its [`SchemaTable`].
pub type ClassId = u32;
/// Index of an enum in its [`SchemaTable`].
pub type EnumId = u32;

/// Where a field's deserialized data is placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Host memory (the host bit set): gathered into one write per temp-buffer fill.
    Host,
    /// The NIC's device memory (`(tern.acc) = true`); the parent holds a reference.
    Device,
}

/// How often a field occurs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    /// At most once (proto2 `optional`, proto3 singular).
    Optional,
    /// Exactly once (proto2 `required`).
    Required,
    /// Any number of times.
    Repeated,
}

/// A field's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `double`.
    Double,
    /// `float`.
    Float,
    /// `int64`.
    Int64,
    /// `uint64`.
    Uint64,
    /// `int32`.
    Int32,
    /// `fixed64`.
    Fixed64,
    /// `fixed32`.
    Fixed32,
    /// `bool`.
    Bool,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// `uint32`.
    Uint32,
    /// `sfixed32`.
    Sfixed32,
    /// `sfixed64`.
    Sfixed64,
    /// `sint32`.
    Sint32,
    /// `sint64`.
    Sint64,
    /// An enum of the table.
    Enum(EnumId),
    /// A message of the table, length-delimited.
    Message(ClassId),
    /// A message of the table, delimited by start and end group tags.
    Group(ClassId),
}

/// Protobuf wire types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireType {
    /// 0.
    Varint = 0,
    /// 1.
    Fixed64 = 1,
    /// 2.
    Len = 2,
    /// 3.
    StartGroup = 3,
    /// 4.
    EndGroup = 4,
    /// 5.
    Fixed32 = 5,
}

impl Kind {
    /// The wire type of one (unpacked) value.
    pub fn wire_type(self) -> WireType {
        match self {
            Kind::Int64 | Kind::Uint64 | Kind::Int32 | Kind::Bool | Kind::Uint32 | Kind::Sint32 | Kind::Sint64 => {
                WireType::Varint
            }
            Kind::Enum(_) => WireType::Varint,
            Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => WireType::Fixed64,
            Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => WireType::Fixed32,
            Kind::String | Kind::Bytes | Kind::Message(_) => WireType::Len,
            Kind::Group(_) => WireType::StartGroup,
        }
    }

    /// Whether repeated values of this kind may be packed.
    pub fn packable(self) -> bool {
        !matches!(self, Kind::String | Kind::Bytes | Kind::Message(_) | Kind::Group(_))
    }

    /// The name `.proto` files use (`message` and `group` for the sub-class kinds).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Double => "double",
            Kind::Float => "float",
            Kind::Int64 => "int64",
            Kind::Uint64 => "uint64",
            Kind::Int32 => "int32",
            Kind::Fixed64 => "fixed64",
            Kind::Fixed32 => "fixed32",
            Kind::Bool => "bool",
            Kind::String => "string",
            Kind::Bytes => "bytes",
            Kind::Uint32 => "uint32",
            Kind::Sfixed32 => "sfixed32",
            Kind::Sfixed64 => "sfixed64",
            Kind::Sint32 => "sint32",
            Kind::Sint64 => "sint64",
            Kind::Enum(_) => "enum",
            Kind::Message(_) => "message",
            Kind::Group(_) => "group",
        }
    }
}

/// A proto2 default value (`[default = ...]`).
#[derive(Debug, Clone, PartialEq)]
pub enum DefaultValue {
    /// Signed integers (and enum numbers).
    I64(i64),
    /// Unsigned integers.
    U64(u64),
    /// `double`.
    F64(f64),
    /// `float`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// `string`.
    Str(String),
    /// `bytes`.
    Bytes(Vec<u8>),
}

/// One field of a class.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// Field number.
    pub number: u32,
    /// Name.
    pub name: String,
    /// Name in protobuf's JSON mapping.
    pub json_name: String,
    /// Type.
    pub kind: Kind,
    /// Label.
    pub label: Label,
    /// Repeated scalars written packed (a decoder accepts both forms).
    pub packed: bool,
    /// Whether presence is tracked (proto2 optional, proto3 `optional`, messages, oneof members).
    pub presence: bool,
    /// The oneof it belongs to (index into [`Class::oneofs`]).
    pub oneof: Option<u16>,
    /// Where its data is placed.
    pub placement: Placement,
    /// Its `[default = ...]`, if declared.
    pub default: Option<DefaultValue>,
    /// A proto3 string: invalid UTF-8 is a decode error.
    pub check_utf8: bool,
    /// The tag in the wire type the type is written in, as varint bytes (for encoders).
    pub(crate) tag: Tag,
    /// How an encoder writes one value.
    pub(crate) enc: EncOp,
}

/// A tag's varint bytes, little-endian in a word, and how many there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tag {
    pub bytes: u64,
    pub len: u8,
}

impl Tag {
    /// Field `number`'s tag for `wire`.
    pub(crate) fn new(number: u32, wire: WireType) -> Tag {
        let mut b = Vec::with_capacity(5);
        crate::wire::put_tag(&mut b, number, wire);
        let mut word = [0u8; 8];
        word[..b.len()].copy_from_slice(&b);
        Tag { bytes: u64::from_le_bytes(word), len: b.len() as u8 }
    }
}

/// How an encoder writes one value of a field, by its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncOp {
    /// 8 bytes, little-endian: `fixed64`, `sfixed64`, `double`.
    Fixed64,
    /// 4 bytes: `fixed32`, `sfixed32`, `float`.
    Fixed32,
    /// The stored bits as a varint: `int32`, `int64`, `uint32`, `uint64`, `bool`, enums.
    Varint,
    /// ZigZag, then a varint.
    Sint32,
    /// ZigZag, then a varint.
    Sint64,
    /// Length and bytes: `string`, `bytes`.
    Bytes,
    /// Length and a sub-message.
    Message,
    /// A sub-message between start- and end-group tags.
    Group,
}

impl EncOp {
    fn of(kind: Kind) -> EncOp {
        match kind {
            Kind::Double | Kind::Fixed64 | Kind::Sfixed64 => EncOp::Fixed64,
            Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => EncOp::Fixed32,
            Kind::Sint32 => EncOp::Sint32,
            Kind::Sint64 => EncOp::Sint64,
            Kind::String | Kind::Bytes => EncOp::Bytes,
            Kind::Message(_) => EncOp::Message,
            Kind::Group(_) => EncOp::Group,
            _ => EncOp::Varint,
        }
    }
}

/// How an encoder writes one field, packed small: its tag's varint bytes and how it writes a
/// value (what [`Field::tag`] and [`Field::enc`] hold, one cache line per four fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EncField {
    pub tag: u64,
    pub tag_len: u8,
    pub op: EncOp,
    /// A proto3 field without presence: left out when zero or empty.
    pub skip_zero: bool,
}

/// One message class.
#[derive(Debug, Clone, PartialEq)]
pub struct Class {
    /// Its id.
    pub id: ClassId,
    /// Full name (`package.Outer.Inner`).
    pub name: String,
    /// The file that declares it.
    pub file: String,
    /// Declared in a proto3 file.
    pub proto3: bool,
    /// A map's entry class (fields 1 `key` and 2 `value`).
    pub map_entry: bool,
    /// Fields, by ascending number.
    pub fields: Vec<Field>,
    /// Oneof names.
    pub oneofs: Vec<String>,
    /// By field number, for numbers below its length: the decoder's entry for the field
    /// ([`FastOp::None`] where none is declared).
    dense: Vec<Fast>,
    /// By field index: the encoder's entry for the field.
    pub(crate) enc: Vec<EncField>,
}

/// How the decoder's fast path reads and stores a field: its type and the wire type it arrives
/// in, in one code (one dispatch per field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FastOp {
    /// No field with this number.
    None,
    /// A varint as it is: `int64`, `uint64`.
    VarRaw,
    /// A varint sign-extended from 32 bits: `int32`, an open (proto3) enum.
    VarInt32,
    /// A varint's low 32 bits: `uint32`.
    VarUint32,
    /// `bool`.
    VarBool,
    /// `sint32`.
    VarSint32,
    /// `sint64`.
    VarSint64,
    /// A closed (proto2) enum: undeclared numbers take the slow path (unknown fields).
    VarClosedEnum,
    /// 8 bytes as they are: `fixed64`, `sfixed64`, `double`.
    Fixed64,
    /// 4 bytes zero-extended: `fixed32`, `float`.
    Fixed32,
    /// 4 bytes sign-extended: `sfixed32`.
    Sfixed32,
    /// `string` or `bytes` taken as they are.
    Bytes,
    /// A proto3 `string`: UTF-8 checked.
    Utf8,
    /// A message.
    Message,
    /// A group.
    Group,
}

/// One field of a class as the decoder's fast path sees it (the paper's schema-table slot:
/// type, repeated, sub-class id, host bit; with the wire type it arrives in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fast {
    pub op: FastOp,
    /// The wire type the type is written in (a packed run of a repeated scalar, `Len`, takes
    /// the slow path).
    pub wire: u8,
    pub repeated: bool,
    pub device: bool,
    pub oneof: bool,
    /// A scalar neither repeated nor in a oneof nor device-placed: its value is stored into its
    /// slot and nothing else (the decoder's run of plain scalars takes it).
    pub plain: bool,
    /// Index into [`Class::fields`].
    pub fi: u16,
    /// The sub-message class (`Message`, `Group`) or the enum (`ClosedEnum`).
    pub sub: u32,
}

impl Fast {
    const NONE: Fast =
        Fast { op: FastOp::None, wire: 0, repeated: false, device: false, oneof: false, plain: false, fi: 0, sub: 0 };

    fn of(fi: usize, f: &Field, enums: &[EnumType]) -> Fast {
        let (op, sub) = match f.kind {
            Kind::Int64 | Kind::Uint64 => (FastOp::VarRaw, 0),
            Kind::Fixed64 | Kind::Sfixed64 | Kind::Double => (FastOp::Fixed64, 0),
            Kind::Int32 => (FastOp::VarInt32, 0),
            Kind::Sfixed32 => (FastOp::Sfixed32, 0),
            Kind::Uint32 => (FastOp::VarUint32, 0),
            Kind::Fixed32 | Kind::Float => (FastOp::Fixed32, 0),
            Kind::Bool => (FastOp::VarBool, 0),
            Kind::Sint32 => (FastOp::VarSint32, 0),
            Kind::Sint64 => (FastOp::VarSint64, 0),
            Kind::Enum(e) if enums.get(e as usize).is_some_and(|t| t.closed) => (FastOp::VarClosedEnum, e),
            Kind::Enum(_) => (FastOp::VarInt32, 0),
            Kind::String if f.check_utf8 => (FastOp::Utf8, 0),
            Kind::String | Kind::Bytes => (FastOp::Bytes, 0),
            Kind::Message(c) => (FastOp::Message, c),
            Kind::Group(c) => (FastOp::Group, c),
        };
        Fast {
            op,
            wire: f.kind.wire_type() as u8,
            repeated: f.label == Label::Repeated,
            device: f.placement == Placement::Device,
            oneof: f.oneof.is_some(),
            plain: f.label != Label::Repeated
                && f.oneof.is_none()
                && f.placement != Placement::Device
                && !matches!(op, FastOp::Bytes | FastOp::Utf8 | FastOp::Message | FastOp::Group),
            fi: fi as u16,
            sub,
        }
    }
}

impl Class {
    /// The field with `number`.
    #[inline]
    pub fn field(&self, number: u32) -> Option<&Field> {
        self.index_of(number).map(|i| &self.fields[i])
    }

    /// The index in [`fields`](Self::fields) of the field with `number`.
    #[inline]
    pub fn index_of(&self, number: u32) -> Option<usize> {
        match self.dense.get(number as usize) {
            Some(f) if f.op == FastOp::None => None,
            Some(f) => Some(usize::from(f.fi)),
            None => self.fields.binary_search_by_key(&number, |f| f.number).ok(),
        }
    }

    /// The fast path's entry for field `number` (`None` past the dense table's end).
    #[inline]
    pub(crate) fn fast(&self, number: u64) -> Option<&Fast> {
        self.dense.get(usize::try_from(number).ok()?)
    }

    /// The field named `name`.
    pub fn field_by_name(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The name without its package and outer messages.
    pub fn short_name(&self) -> &str {
        self.name.rsplit('.').next().unwrap_or(&self.name)
    }
}

/// An enum.
#[derive(Debug, Clone, PartialEq)]
pub struct EnumType {
    /// Full name.
    pub name: String,
    /// Declared values (name, number).
    pub values: Vec<(String, i32)>,
    /// Closed (proto2): a number it does not declare is kept as an unknown field.
    pub closed: bool,
}

impl EnumType {
    /// Whether `n` is a declared value.
    pub fn declares(&self, n: i32) -> bool {
        self.values.iter().any(|(_, v)| *v == n)
    }
}

/// The compiled classes of one `.proto` file and what it imports.
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaTable {
    /// The file compiled.
    pub file: String,
    /// Classes by id.
    pub classes: Vec<Class>,
    /// Enums by id.
    pub enums: Vec<EnumType>,
    by_name: HashMap<String, ClassId>,
}

impl SchemaTable {
    /// The class with `id`.
    pub fn class(&self, id: ClassId) -> &Class {
        &self.classes[id as usize]
    }

    /// This table with field index `fi` of class `class` placed at `placement` (the schema
    /// table's entry updated as RpcNIC's automatic field updating does, §III-F); `None` for a
    /// class or field it does not have.
    pub fn with_placement(&self, class: ClassId, fi: usize, placement: Placement) -> Option<SchemaTable> {
        let mut t = self.clone();
        let c = t.classes.get_mut(class as usize)?;
        let f = c.fields.get_mut(fi)?;
        f.placement = placement;
        let (number, fast) = (f.number as usize, Fast::of(fi, f, &self.enums));
        if let Some(e) = c.dense.get_mut(number) {
            *e = fast;
        }
        Some(t)
    }

    /// The class named `name`: its full name, or a name unique without its package.
    pub fn class_by_name(&self, name: &str) -> Option<&Class> {
        if let Some(&id) = self.by_name.get(name) {
            return Some(self.class(id));
        }
        let mut found = self
            .classes
            .iter()
            .filter(|c| c.name.ends_with(name) && c.name[..c.name.len() - name.len()].ends_with('.'));
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// The enum with `id`.
    pub fn enum_type(&self, id: EnumId) -> &EnumType {
        &self.enums[id as usize]
    }

    /// Classes nested deepest below `id` (1: no message fields), or `None` if a class reachable
    /// from it contains itself (recursive: nesting is bounded only by the data).
    pub fn depth(&self, id: ClassId) -> Option<u32> {
        fn walk(
            t: &SchemaTable,
            id: ClassId,
            on_path: &mut Vec<bool>,
            memo: &mut Vec<Option<Option<u32>>>,
        ) -> Option<u32> {
            if let Some(d) = memo[id as usize] {
                return d;
            }
            if on_path[id as usize] {
                return None;
            }
            on_path[id as usize] = true;
            let mut deepest = 0;
            let mut bounded = true;
            for f in &t.class(id).fields {
                if let Kind::Message(c) | Kind::Group(c) = f.kind {
                    match walk(t, c, on_path, memo) {
                        Some(d) => deepest = deepest.max(d),
                        None => bounded = false,
                    }
                }
            }
            on_path[id as usize] = false;
            let d = bounded.then_some(deepest + 1);
            memo[id as usize] = Some(d);
            d
        }
        let n = self.classes.len();
        walk(self, id, &mut vec![false; n], &mut vec![None; n])
    }
}

/// Why a schema could not be compiled. Each names the file, and the message and field where
/// there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The file cannot be read.
    #[error("{path}: {message}")]
    Io {
        /// Path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The protobuf front end refused the file.
    #[error("{file}: {message}")]
    Syntax {
        /// File.
        file: String,
        /// The front end's message, with its location.
        message: String,
    },
    /// A field's declaration is refused.
    #[error("{file}: message {message}: field {field}: {reason}")]
    Field {
        /// File.
        file: String,
        /// Full message name.
        message: String,
        /// Field name.
        field: String,
        /// Why.
        reason: String,
    },
    /// The file declares no message.
    #[error("{file}: declares no message")]
    Empty {
        /// File.
        file: String,
    },
}

const BUILTINS: tern_idl::frontend::Builtins = &[(RPCNIC_PROTO_NAME, RPCNIC_PROTO)];

fn schema_error(e: tern_idl::frontend::FrontendError) -> SchemaError {
    match e {
        tern_idl::frontend::FrontendError::Io { path, message } => SchemaError::Io { path, message },
        tern_idl::frontend::FrontendError::Syntax { file, message } => SchemaError::Syntax { file, message },
    }
}

/// Compiles `.proto` source held in memory; `name` is its file name in errors. Imports resolve
/// to `tern/rpcnic.proto` and protobuf's well-known types.
pub fn compile_str(name: &str, source: &str) -> Result<SchemaTable, SchemaError> {
    let pool = tern_idl::frontend::compile_str(name, source, BUILTINS).map_err(schema_error)?;
    build(&pool, name)
}

/// Compiles a `.proto` file; imports resolve relative to its directory, then to the directories
/// of `includes`, `tern/rpcnic.proto` and protobuf's well-known types.
pub fn compile_file(path: &Path, includes: &[&Path]) -> Result<SchemaTable, SchemaError> {
    let (pool, name) = tern_idl::frontend::compile_file(path, includes, BUILTINS).map_err(schema_error)?;
    build(&pool, &name)
}

struct Builder {
    acc: Option<prost_reflect::ExtensionDescriptor>,
    classes: Vec<Option<Class>>,
    ids: HashMap<String, ClassId>,
    /// Messages met but not built yet.
    queue: VecDeque<MessageDescriptor>,
    enums: Vec<EnumType>,
    enum_ids: HashMap<String, EnumId>,
}

fn build(pool: &DescriptorPool, name: &str) -> Result<SchemaTable, SchemaError> {
    let file = pool
        .get_file_by_name(name)
        .ok_or_else(|| SchemaError::Syntax { file: name.into(), message: "file not compiled".into() })?;
    let mut b = Builder {
        acc: pool.get_extension_by_name("tern.acc"),
        classes: Vec::new(),
        ids: HashMap::new(),
        queue: VecDeque::new(),
        enums: Vec::new(),
        enum_ids: HashMap::new(),
    };
    // The file's messages in declaration order, nested ones after their parent.
    fn declared(m: MessageDescriptor, out: &mut Vec<MessageDescriptor>) {
        let children: Vec<_> = m.child_messages().collect();
        out.push(m);
        for c in children {
            declared(c, out);
        }
    }
    let mut top = Vec::new();
    for m in file.messages() {
        declared(m, &mut top);
    }
    if top.is_empty() {
        return Err(SchemaError::Empty { file: name.into() });
    }
    for m in top {
        b.id_of(&m);
    }
    while let Some(m) = b.queue.pop_front() {
        let id = b.ids[m.full_name()];
        let class = b.class(&m, id)?;
        b.classes[id as usize] = Some(class);
    }
    let classes: Vec<Class> = b.classes.into_iter().map(|c| c.expect("every class met is built")).collect();
    let by_name = classes.iter().map(|c| (c.name.clone(), c.id)).collect();
    Ok(SchemaTable { file: name.to_string(), classes, enums: b.enums, by_name })
}

impl Builder {
    fn id_of(&mut self, m: &MessageDescriptor) -> ClassId {
        if let Some(&id) = self.ids.get(m.full_name()) {
            return id;
        }
        let id = self.classes.len() as ClassId;
        self.ids.insert(m.full_name().to_string(), id);
        self.classes.push(None);
        self.queue.push_back(m.clone());
        id
    }

    fn enum_of(&mut self, e: &prost_reflect::EnumDescriptor) -> EnumId {
        if let Some(&id) = self.enum_ids.get(e.full_name()) {
            return id;
        }
        let id = self.enums.len() as EnumId;
        self.enum_ids.insert(e.full_name().to_string(), id);
        self.enums.push(EnumType {
            name: e.full_name().to_string(),
            values: e.values().map(|v| (v.name().to_string(), v.number())).collect(),
            closed: e.parent_file().syntax() == prost_reflect::Syntax::Proto2,
        });
        id
    }

    fn class(&mut self, m: &MessageDescriptor, id: ClassId) -> Result<Class, SchemaError> {
        let file = m.parent_file().name().to_string();
        let proto3 = m.parent_file().syntax() == prost_reflect::Syntax::Proto3;
        let oneofs: Vec<_> = m.oneofs().collect();
        let mut fields = Vec::new();
        for f in m.fields() {
            fields.push(self.field(m, &f, &file, proto3, &oneofs)?);
        }
        fields.sort_by_key(|f: &Field| f.number);
        let max_dense = fields.last().map_or(0, |f| f.number as usize).min(1023);
        let mut dense = vec![Fast::NONE; max_dense + 1];
        for (i, f) in fields.iter().enumerate() {
            if let Some(slot) = dense.get_mut(f.number as usize) {
                *slot = Fast::of(i, f, &self.enums);
            }
        }
        Ok(Class {
            id,
            name: m.full_name().to_string(),
            file,
            proto3,
            map_entry: m.is_map_entry(),
            oneofs: oneofs.iter().filter(|o| !o.is_synthetic()).map(|o| o.name().to_string()).collect(),
            dense,
            enc: fields
                .iter()
                .map(|f| EncField { tag: f.tag.bytes, tag_len: f.tag.len, op: f.enc, skip_zero: !f.presence })
                .collect(),
            fields,
        })
    }

    fn field(
        &mut self,
        m: &MessageDescriptor,
        f: &FieldDescriptor,
        file: &str,
        proto3: bool,
        oneofs: &[prost_reflect::OneofDescriptor],
    ) -> Result<Field, SchemaError> {
        let refuse = |reason: String| SchemaError::Field {
            file: file.to_string(),
            message: m.full_name().to_string(),
            field: f.name().to_string(),
            reason,
        };
        let kind = match f.kind() {
            prost_reflect::Kind::Double => Kind::Double,
            prost_reflect::Kind::Float => Kind::Float,
            prost_reflect::Kind::Int64 => Kind::Int64,
            prost_reflect::Kind::Uint64 => Kind::Uint64,
            prost_reflect::Kind::Int32 => Kind::Int32,
            prost_reflect::Kind::Fixed64 => Kind::Fixed64,
            prost_reflect::Kind::Fixed32 => Kind::Fixed32,
            prost_reflect::Kind::Bool => Kind::Bool,
            prost_reflect::Kind::String => Kind::String,
            prost_reflect::Kind::Bytes => Kind::Bytes,
            prost_reflect::Kind::Uint32 => Kind::Uint32,
            prost_reflect::Kind::Sfixed32 => Kind::Sfixed32,
            prost_reflect::Kind::Sfixed64 => Kind::Sfixed64,
            prost_reflect::Kind::Sint32 => Kind::Sint32,
            prost_reflect::Kind::Sint64 => Kind::Sint64,
            prost_reflect::Kind::Enum(e) => Kind::Enum(self.enum_of(&e)),
            prost_reflect::Kind::Message(sub) if f.is_group() => Kind::Group(self.id_of(&sub)),
            prost_reflect::Kind::Message(sub) => Kind::Message(self.id_of(&sub)),
        };
        let label = match f.cardinality() {
            prost_reflect::Cardinality::Optional => Label::Optional,
            prost_reflect::Cardinality::Required => Label::Required,
            prost_reflect::Cardinality::Repeated => Label::Repeated,
        };
        let acc = self.acc.as_ref().is_some_and(|ext| {
            let opts = f.options();
            opts.has_extension(ext) && matches!(*opts.get_extension(ext), Value::Bool(true))
        });
        let dereference =
            label == Label::Repeated || matches!(kind, Kind::String | Kind::Bytes | Kind::Message(_) | Kind::Group(_));
        if acc && !dereference {
            return Err(refuse(format!(
                "(tern.acc) applies to string, bytes, repeated and message fields, not to a singular {}",
                kind.name()
            )));
        }
        let default = if f.field_descriptor_proto().default_value.is_some() {
            Some(match f.default_value() {
                Value::I32(v) => DefaultValue::I64(i64::from(v)),
                Value::I64(v) => DefaultValue::I64(v),
                Value::U32(v) => DefaultValue::U64(u64::from(v)),
                Value::U64(v) => DefaultValue::U64(v),
                Value::F32(v) => DefaultValue::F32(v),
                Value::F64(v) => DefaultValue::F64(v),
                Value::Bool(v) => DefaultValue::Bool(v),
                Value::String(v) => DefaultValue::Str(v),
                Value::Bytes(v) => DefaultValue::Bytes(v.to_vec()),
                Value::EnumNumber(v) => DefaultValue::I64(i64::from(v)),
                other => return Err(refuse(format!("a default of an unexpected form: {other:?}"))),
            })
        } else {
            None
        };
        let oneof = f
            .containing_oneof()
            .filter(|o| !o.is_synthetic())
            .and_then(|o| oneofs.iter().filter(|x| !x.is_synthetic()).position(|x| x.name() == o.name()))
            .map(|i| i as u16);
        Ok(Field {
            number: f.number(),
            name: f.name().to_string(),
            json_name: f.json_name().to_string(),
            kind,
            label,
            packed: label == Label::Repeated && kind.packable() && packed_option(f).unwrap_or(proto3),
            presence: f.supports_presence(),
            oneof,
            placement: if acc { Placement::Device } else { Placement::Host },
            default,
            check_utf8: proto3 && kind == Kind::String,
            tag: Tag::new(f.number(), kind.wire_type()),
            enc: EncOp::of(kind),
        })
    }
}

/// The field's explicit `[packed = ...]`, read from its options as the file wrote them.
fn packed_option(f: &FieldDescriptor) -> Option<bool> {
    let opts = f.options();
    if !opts.has_field_by_name("packed") {
        return None;
    }
    match opts.get_field_by_name("packed").as_deref() {
        Some(Value::Bool(b)) => Some(*b),
        _ => None,
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Placement::Host => "host",
            Placement::Device => "device",
        })
    }
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Label::Optional => "optional",
            Label::Required => "required",
            Label::Repeated => "repeated",
        })
    }
}
