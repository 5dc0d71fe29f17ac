//! A codec driven by the schema at run time: no generated code. It is the reference twin of the
//! generated codecs (property tests compare the two byte for byte) and what tools use.

use tern_wire::tlv::{self, DecodeError, Reader, Writer};

use crate::{FieldType, MessageSchema};

/// A field value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// int32.
    Int32(i32),
    /// int64.
    Int64(i64),
    /// uint32.
    Uint32(u32),
    /// uint64.
    Uint64(u64),
    /// bool.
    Bool(bool),
    /// float.
    Float(f32),
    /// double.
    Double(f64),
    /// string.
    String(String),
    /// bytes.
    Bytes(Vec<u8>),
}

impl Value {
    /// The default value of a type.
    pub fn default_for(ty: FieldType) -> Value {
        match ty {
            FieldType::Int32 => Value::Int32(0),
            FieldType::Int64 => Value::Int64(0),
            FieldType::Uint32 => Value::Uint32(0),
            FieldType::Uint64 => Value::Uint64(0),
            FieldType::Bool => Value::Bool(false),
            FieldType::Float => Value::Float(0.0),
            FieldType::Double => Value::Double(0.0),
            FieldType::String => Value::String(String::new()),
            FieldType::Bytes => Value::Bytes(Vec::new()),
        }
    }

    /// Parses a value of type `ty` from text (bytes as UTF-8 text).
    pub fn parse(ty: FieldType, text: &str) -> Result<Value, String> {
        let bad = |e: &dyn std::fmt::Display| format!("`{text}` is not a valid {}: {e}", ty.proto_name());
        Ok(match ty {
            FieldType::Int32 => Value::Int32(text.parse().map_err(|e| bad(&e))?),
            FieldType::Int64 => Value::Int64(text.parse().map_err(|e| bad(&e))?),
            FieldType::Uint32 => Value::Uint32(text.parse().map_err(|e| bad(&e))?),
            FieldType::Uint64 => Value::Uint64(text.parse().map_err(|e| bad(&e))?),
            FieldType::Bool => Value::Bool(text.parse().map_err(|e| bad(&e))?),
            FieldType::Float => Value::Float(text.parse().map_err(|e| bad(&e))?),
            FieldType::Double => Value::Double(text.parse().map_err(|e| bad(&e))?),
            FieldType::String => Value::String(text.to_string()),
            FieldType::Bytes => Value::Bytes(text.as_bytes().to_vec()),
        })
    }

    fn encoded_len(&self) -> usize {
        match self {
            Value::String(s) => tlv::bytes_field_len(s.len()),
            Value::Bytes(b) => tlv::bytes_field_len(b.len()),
            Value::Bool(_) => tlv::RECORD_HEADER_LEN + 1,
            Value::Int32(_) | Value::Uint32(_) | Value::Float(_) => tlv::RECORD_HEADER_LEN + 4,
            Value::Int64(_) | Value::Uint64(_) | Value::Double(_) => tlv::RECORD_HEADER_LEN + 8,
        }
    }

    fn encode(&self, number: u8, w: &mut Writer<'_>) {
        match self {
            Value::Int32(v) => w.put_u32(number, *v as u32),
            Value::Int64(v) => w.put_u64(number, *v as u64),
            Value::Uint32(v) => w.put_u32(number, *v),
            Value::Uint64(v) => w.put_u64(number, *v),
            Value::Bool(v) => w.put_bool(number, *v),
            Value::Float(v) => w.put_u32(number, v.to_bits()),
            Value::Double(v) => w.put_u64(number, v.to_bits()),
            Value::String(v) => w.put_bytes(number, v.as_bytes()),
            Value::Bytes(v) => w.put_bytes(number, v),
        }
    }
}

/// A message whose layout comes from a [`MessageSchema`].
#[derive(Debug, Clone, PartialEq)]
pub struct DynamicMessage<'s> {
    schema: &'s MessageSchema,
    /// Values in the schema's field order.
    pub values: Vec<Value>,
}

impl<'s> DynamicMessage<'s> {
    /// A message with every field at its default.
    pub fn new(schema: &'s MessageSchema) -> Self {
        let values = schema.fields.iter().map(|f| Value::default_for(f.ty)).collect();
        DynamicMessage { schema, values }
    }

    /// The schema.
    pub fn schema(&self) -> &'s MessageSchema {
        self.schema
    }

    /// Sets a field by name from text (`key=value` tools).
    pub fn set_from_str(&mut self, field: &str, text: &str) -> Result<(), String> {
        let index = self
            .schema
            .fields
            .iter()
            .position(|f| f.name == field)
            .ok_or_else(|| format!("message {} has no field `{field}`", self.schema.name))?;
        self.values[index] =
            Value::parse(self.schema.fields[index].ty, text).map_err(|e| format!("field `{field}`: {e}"))?;
        Ok(())
    }

    fn ordered(&self) -> impl Iterator<Item = (u8, bool, &Value)> {
        let fields = &self.schema.fields;
        let pick = move |dispatch: bool| {
            fields
                .iter()
                .zip(&self.values)
                .filter(move |(f, _)| f.dispatch == dispatch)
                .map(|(f, v)| (f.number, f.dispatch, v))
        };
        pick(true).chain(pick(false))
    }

    /// Encoded bytes.
    pub fn encoded_len(&self) -> usize {
        self.values.iter().map(Value::encoded_len).sum()
    }

    /// Encoded bytes of the dispatch fields.
    pub fn dispatch_len(&self) -> usize {
        self.ordered().filter(|(_, d, _)| *d).map(|(_, _, v)| v.encoded_len()).sum()
    }

    /// Appends the encoding: dispatch fields first.
    pub fn encode(&self, buf: &mut Vec<u8>) {
        let mut w = Writer::new(buf);
        for (number, _, value) in self.ordered() {
            value.encode(number, &mut w);
        }
    }

    /// Decodes from the payloads of a request's packets, in order.
    pub fn decode_parts<'a, I>(schema: &'s MessageSchema, parts: I) -> Result<Self, DecodeError>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let mut msg = DynamicMessage::new(schema);
        let mut seen = vec![false; schema.fields.len()];
        let mut raw: Vec<Vec<u8>> = vec![Vec::new(); schema.fields.len()];
        for part in parts {
            for record in Reader::new(part) {
                let record = record?;
                let Some(index) = schema.fields.iter().position(|f| f.number == record.field) else {
                    continue; // unknown fields are skipped
                };
                let field = &schema.fields[index];
                let v = record.value;
                let n = field.number;
                match field.ty {
                    FieldType::String | FieldType::Bytes => {
                        raw[index].extend_from_slice(v);
                        seen[index] = true;
                        continue;
                    }
                    _ if seen[index] => return Err(DecodeError::DuplicateField { field: n }),
                    FieldType::Int32 => msg.values[index] = Value::Int32(tlv::get_u32(n, v)? as i32),
                    FieldType::Int64 => msg.values[index] = Value::Int64(tlv::get_u64(n, v)? as i64),
                    FieldType::Uint32 => msg.values[index] = Value::Uint32(tlv::get_u32(n, v)?),
                    FieldType::Uint64 => msg.values[index] = Value::Uint64(tlv::get_u64(n, v)?),
                    FieldType::Bool => msg.values[index] = Value::Bool(tlv::get_bool(n, v)?),
                    FieldType::Float => msg.values[index] = Value::Float(f32::from_bits(tlv::get_u32(n, v)?)),
                    FieldType::Double => msg.values[index] = Value::Double(f64::from_bits(tlv::get_u64(n, v)?)),
                }
                seen[index] = true;
            }
        }
        for (index, bytes) in raw.into_iter().enumerate() {
            let field = &schema.fields[index];
            match field.ty {
                FieldType::String => {
                    msg.values[index] = Value::String(
                        String::from_utf8(bytes).map_err(|_| DecodeError::InvalidUtf8 { field: field.number })?,
                    )
                }
                FieldType::Bytes => msg.values[index] = Value::Bytes(bytes),
                _ => {}
            }
        }
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> crate::Schema {
        crate::parse_str(
            "d.proto",
            "syntax = \"proto3\"; import \"tern/qingniao.proto\";\n\
             message M { int32 a = 1; string s = 2 [(tern.dispatch) = true]; bytes b = 3; bool t = 4; double d = 5; }",
        )
        .unwrap()
    }

    #[test]
    fn encode_fixture_dispatch_first() {
        let s = schema();
        let m = s.message("M").unwrap();
        let mut msg = DynamicMessage::new(m);
        msg.set_from_str("a", "-2").unwrap();
        msg.set_from_str("s", "hi").unwrap();
        msg.set_from_str("t", "true").unwrap();
        let mut buf = Vec::new();
        msg.encode(&mut buf);
        assert_eq!(&buf[..5], &[2, 0, 2, b'h', b'i']);
        assert_eq!(&buf[5..12], &[1, 0, 4, 0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(buf.len(), msg.encoded_len());
        assert_eq!(msg.dispatch_len(), 5);
        assert_eq!(DynamicMessage::decode_parts(m, [&buf[..]]).unwrap(), msg);
    }

    #[test]
    fn parts_concatenate_and_errors_name_fields() {
        let s = schema();
        let m = s.message("M").unwrap();
        let p1 = [2, 0, 2, b'h', b'e'];
        let p2 = [2, 0, 3, b'l', b'l', b'o', 99, 0, 1, 0];
        let msg = DynamicMessage::decode_parts(m, [&p1[..], &p2[..]]).unwrap();
        assert_eq!(msg.values[1], Value::String("hello".into()));
        let dup = [1, 0, 4, 0, 0, 0, 1, 1, 0, 4, 0, 0, 0, 2];
        assert_eq!(DynamicMessage::decode_parts(m, [&dup[..]]), Err(DecodeError::DuplicateField { field: 1 }));
        let bad_utf8 = [2, 0, 1, 0xff];
        assert_eq!(DynamicMessage::decode_parts(m, [&bad_utf8[..]]), Err(DecodeError::InvalidUtf8 { field: 2 }));
        assert!(DynamicMessage::new(m).set_from_str("nope", "1").unwrap_err().contains("`nope`"));
        assert!(DynamicMessage::new(m).set_from_str("a", "x").unwrap_err().contains("int32"));
    }
}
