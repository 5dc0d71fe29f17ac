//! The front end: protobuf source → checked [`Schema`].

use std::path::Path;

use prost_reflect::{DescriptorPool, Kind, MessageDescriptor, Value};

/// Errors of the IDL front end and compiler; each names the file, message or field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdlError {
    /// The protobuf front end rejected the source.
    #[error("{file}: {message}")]
    Syntax {
        /// File name.
        file: String,
        /// The front end's message, with its location.
        message: String,
    },
    /// A field uses a type the IDL does not allow.
    #[error("{file}: message {message}, field `{field}`: {reason}")]
    Unsupported {
        /// File name.
        file: String,
        /// Message name.
        message: String,
        /// Field name.
        field: String,
        /// Why.
        reason: String,
    },
    /// A message-level construct the IDL does not allow.
    #[error("{file}: message {message}: {reason}")]
    UnsupportedMessage {
        /// File name.
        file: String,
        /// Message name.
        message: String,
        /// Why.
        reason: String,
    },
    /// The file defines no message.
    #[error("{file}: defines no message")]
    Empty {
        /// File name.
        file: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {message}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        message: String,
    },
}

/// The type of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldType {
    /// int32, sint32, sfixed32: 4 bytes, two's complement.
    Int32,
    /// int64, sint64, sfixed64: 8 bytes.
    Int64,
    /// uint32, fixed32: 4 bytes.
    Uint32,
    /// uint64, fixed64: 8 bytes.
    Uint64,
    /// bool: 1 byte, 0 or 1.
    Bool,
    /// float: 4 bytes, IEEE 754.
    Float,
    /// double: 8 bytes.
    Double,
    /// string: UTF-8 bytes.
    String,
    /// bytes.
    Bytes,
}

impl FieldType {
    /// Value bytes of a fixed-width type; `None` for string and bytes.
    pub fn fixed_len(self) -> Option<usize> {
        match self {
            FieldType::Int32 | FieldType::Uint32 | FieldType::Float => Some(4),
            FieldType::Int64 | FieldType::Uint64 | FieldType::Double => Some(8),
            FieldType::Bool => Some(1),
            FieldType::String | FieldType::Bytes => None,
        }
    }
    /// The protobuf name.
    pub fn proto_name(self) -> &'static str {
        match self {
            FieldType::Int32 => "int32",
            FieldType::Int64 => "int64",
            FieldType::Uint32 => "uint32",
            FieldType::Uint64 => "uint64",
            FieldType::Bool => "bool",
            FieldType::Float => "float",
            FieldType::Double => "double",
            FieldType::String => "string",
            FieldType::Bytes => "bytes",
        }
    }
}

/// One field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSchema {
    /// Name as written.
    pub name: String,
    /// Field number, the TLV type (1..=255).
    pub number: u8,
    /// Type.
    pub ty: FieldType,
    /// Marked `(tern.dispatch) = true`.
    pub dispatch: bool,
}

/// One request or response message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSchema {
    /// Name as written.
    pub name: String,
    /// Fields in field-number order.
    pub fields: Vec<FieldSchema>,
}

impl MessageSchema {
    /// Field numbers dispatch rules may read, ascending.
    pub fn dispatch_fields(&self) -> Vec<u8> {
        self.fields.iter().filter(|f| f.dispatch).map(|f| f.number).collect()
    }
    /// Fields in encoding order: dispatch fields first, then the rest, each by field number.
    pub fn encoding_order(&self) -> impl Iterator<Item = &FieldSchema> {
        self.fields.iter().filter(|f| f.dispatch).chain(self.fields.iter().filter(|f| !f.dispatch))
    }
    /// A field by number.
    pub fn field(&self, number: u8) -> Option<&FieldSchema> {
        self.fields.iter().find(|f| f.number == number)
    }
    /// A field by name.
    pub fn field_by_name(&self, name: &str) -> Option<&FieldSchema> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// A checked IDL file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema {
    /// File name.
    pub file: String,
    /// Protobuf package, possibly empty.
    pub package: String,
    /// Messages in declaration order.
    pub messages: Vec<MessageSchema>,
}

impl Schema {
    /// A message by name.
    pub fn message(&self, name: &str) -> Option<&MessageSchema> {
        self.messages.iter().find(|m| m.name == name)
    }
}

const BUILTINS: crate::frontend::Builtins = &[(crate::TERN_PROTO_NAME, crate::TERN_PROTO)];

fn idl_error(e: crate::frontend::FrontendError) -> IdlError {
    match e {
        crate::frontend::FrontendError::Io { path, message } => IdlError::Io { path, message },
        crate::frontend::FrontendError::Syntax { file, message } => IdlError::Syntax { file, message },
    }
}

/// Parses IDL source held in memory; `name` is the file name used in errors.
pub fn parse_str(name: &str, source: &str) -> Result<Schema, IdlError> {
    let pool = crate::frontend::compile_str(name, source, BUILTINS).map_err(idl_error)?;
    build_schema(&pool, name)
}

/// Parses an IDL file; imports resolve relative to its directory.
pub fn parse_file(path: &Path) -> Result<Schema, IdlError> {
    let (pool, name) = crate::frontend::compile_file(path, &[], BUILTINS).map_err(idl_error)?;
    build_schema(&pool, &name)
}

fn build_schema(pool: &DescriptorPool, name: &str) -> Result<Schema, IdlError> {
    let file = pool
        .get_file_by_name(name)
        .ok_or_else(|| IdlError::Syntax { file: name.into(), message: "file not compiled".into() })?;
    let dispatch_ext = pool.get_extension_by_name("tern.dispatch");
    if let Some(e) = file.enums().next() {
        return Err(IdlError::UnsupportedMessage {
            file: name.into(),
            message: e.name().into(),
            reason: "enums are not supported; use an integer field".into(),
        });
    }
    let mut messages = Vec::new();
    for m in file.messages() {
        messages.push(build_message(name, &m, dispatch_ext.as_ref())?);
    }
    if messages.is_empty() {
        return Err(IdlError::Empty { file: name.into() });
    }
    Ok(Schema { file: name.into(), package: file.package_name().to_string(), messages })
}

fn build_message(
    file: &str,
    m: &MessageDescriptor,
    dispatch_ext: Option<&prost_reflect::ExtensionDescriptor>,
) -> Result<MessageSchema, IdlError> {
    let msg_err = |reason: &str| IdlError::UnsupportedMessage {
        file: file.into(),
        message: m.name().into(),
        reason: reason.into(),
    };
    if m.child_messages().any(|c| !c.is_map_entry()) {
        return Err(msg_err("nested message declarations are not supported (the IDL has no nested structures)"));
    }
    if m.child_enums().next().is_some() {
        return Err(msg_err("enums are not supported; use an integer field"));
    }
    let mut fields = Vec::new();
    for f in m.fields() {
        let unsupported = |reason: String| IdlError::Unsupported {
            file: file.into(),
            message: m.name().into(),
            field: f.name().into(),
            reason,
        };
        if f.is_map() {
            return Err(unsupported("map fields are not supported".into()));
        }
        if f.is_list() {
            return Err(unsupported("repeated fields are not supported".into()));
        }
        if f.containing_oneof().is_some() {
            return Err(unsupported("oneof and `optional` are not supported (every field is always encoded)".into()));
        }
        let ty = match f.kind() {
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => FieldType::Int32,
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => FieldType::Int64,
            Kind::Uint32 | Kind::Fixed32 => FieldType::Uint32,
            Kind::Uint64 | Kind::Fixed64 => FieldType::Uint64,
            Kind::Bool => FieldType::Bool,
            Kind::Float => FieldType::Float,
            Kind::Double => FieldType::Double,
            Kind::String => FieldType::String,
            Kind::Bytes => FieldType::Bytes,
            Kind::Message(inner) => {
                return Err(unsupported(format!(
                    "nested message type {} is not supported (the IDL has no nested structures)",
                    inner.name()
                )));
            }
            Kind::Enum(e) => {
                return Err(unsupported(format!("enum type {} is not supported", e.name())));
            }
        };
        let number = u8::try_from(f.number())
            .map_err(|_| unsupported(format!("field number {} exceeds 255 (a TLV type is one byte)", f.number())))?;
        let dispatch = dispatch_ext.is_some_and(|ext| {
            let opts = f.options();
            opts.has_extension(ext) && matches!(*opts.get_extension(ext), Value::Bool(true))
        });
        fields.push(FieldSchema { name: f.name().into(), number, ty, dispatch });
    }
    Ok(MessageSchema { name: m.name().into(), fields })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "syntax = \"proto3\";\nimport \"tern/qingniao.proto\";\n";

    fn parse(body: &str) -> Result<Schema, IdlError> {
        parse_str("t.proto", &format!("{HEADER}{body}"))
    }

    #[test]
    fn parses_types_and_dispatch_marks() {
        let s = parse(
            "package kv; message Get { uint64 version = 3; string key = 1 [(tern.dispatch) = true]; \
             int32 a = 2; int64 b = 4; uint32 c = 5; bytes d = 6; bool e = 7; float f = 8; \
             double g = 9; sint32 h = 10; fixed64 i = 255; }",
        )
        .unwrap();
        assert_eq!(s.package, "kv");
        let m = s.message("Get").unwrap();
        assert_eq!(m.fields.len(), 11);
        assert_eq!(m.fields[0].ty, FieldType::String);
        assert_eq!(m.fields[2].ty, FieldType::Uint64);
        assert_eq!(m.dispatch_fields(), vec![1]);
        assert_eq!(m.encoding_order().next().unwrap().name, "key");
        assert_eq!(m.field(10).unwrap().ty, FieldType::Int32);
        assert_eq!(m.field(255).unwrap().ty, FieldType::Uint64);
    }

    #[test]
    fn rejects_nested_and_names_the_field() {
        let e = parse("message A { int32 x = 1; } message B { A inner = 1; }").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("message B") && msg.contains("`inner`") && msg.contains("nested"), "{msg}");
        let e = parse("message B { message C { int32 x = 1; } int32 y = 1; }").unwrap_err();
        assert!(e.to_string().contains("nested"), "{e}");
    }

    #[test]
    fn rejects_other_unsupported_constructs() {
        for (body, needle) in [
            ("message A { repeated int32 x = 1; }", "repeated"),
            ("message A { map<string, int32> x = 1; }", "map"),
            ("message A { oneof o { int32 x = 1; } }", "oneof"),
            ("message A { optional int32 x = 1; }", "optional"),
            ("message A { int32 x = 256; }", "exceeds 255"),
            ("enum E { Z = 0; } message A { E x = 1; }", "enum"),
            ("", "defines no message"),
            ("message A { int32 x = 1 }", "t.proto"),
        ] {
            let e = parse(body).unwrap_err().to_string();
            assert!(e.contains(needle), "{body}: {e}");
        }
    }

    #[test]
    fn without_import_no_field_is_dispatch() {
        let s = parse_str("p.proto", "syntax = \"proto3\"; message P { bytes x = 1; }").unwrap();
        assert!(s.messages[0].dispatch_fields().is_empty());
    }
}

#[cfg(test)]
mod lexer_quirks {
    // protox-parse 0.9 hits a debug assertion on an octal literal with a non-octal digit
    // ("028"); the front end must turn that into an error, never a panic.
    #[test]
    fn bad_octal_literal_is_an_error() {
        let e = super::parse_str("q.proto", "syntax = \"proto3\"; message A { int32 x = 028; }").unwrap_err();
        assert!(e.to_string().contains("q.proto"), "{e}");
    }
}
