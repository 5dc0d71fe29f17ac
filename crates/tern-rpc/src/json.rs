//! Protobuf's JSON mapping, for people debugging payloads (`tern rpc decode|encode`): a decoded
//! message to JSON, and JSON to wire bytes by the schema table.
//!
//! To JSON: field names as lowerCamelCase JSON names (or the `.proto` names); 64-bit integers as
//! strings; `float`/`double` as numbers, or `"NaN"`, `"Infinity"`, `"-Infinity"`; bytes in
//! standard base64; enums by name (a number the enum does not declare, by number); maps as
//! objects keyed by the key's text; groups as objects; unknown fields left out (as protobuf
//! does). Fields absent, and proto3 fields without presence at their zero value, are left out.
//!
//! From JSON: either name form; integers as numbers or strings; floats as numbers or the three
//! strings; bytes in standard or URL-safe base64; enums by name or number; `null` as absent.
//! Written as the encoder writes ([`crate::encode`]): fields in number order, packing by the
//! schema, proto3 zeros left out, map entries sorted by key (protobuf's deterministic order) with
//! both key and value. So the JSON of a message encodes back to its bytes when they were written
//! that way and carry no unknown fields.

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::message::{FieldValue, Message, MessageRef};
use crate::schema::{ClassId, Field, Kind, Label, SchemaTable, WireType};
use crate::wire::{put_varint, zigzag32, zigzag64};

/// JSON that does not fit the schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct JsonError {
    /// Where (`M1.f17[2].f2`).
    pub path: String,
    /// What.
    pub message: String,
}

/// The JSON of a decoded message.
pub fn to_json(msg: &Message<'_>, proto_names: bool) -> Value {
    node(msg.table(), msg.root(), proto_names)
}

fn name(f: &Field, proto_names: bool) -> String {
    if proto_names { f.name.clone() } else { f.json_name.clone() }
}

fn node(t: &SchemaTable, m: MessageRef<'_>, proto_names: bool) -> Value {
    let class = m.class();
    let mut out = Map::new();
    for f in &class.fields {
        if f.label == Label::Repeated {
            if m.len_of(f.number) == 0 {
                continue;
            }
            let map_entry = matches!(f.kind, Kind::Message(c) if t.class(c).map_entry);
            if map_entry {
                let mut obj = Map::new();
                for e in m.repeated(f.number) {
                    let FieldValue::Message(e) = e else { continue };
                    let ec = e.class();
                    let key = match e.get_or_default(ec.fields[0].number) {
                        Some(FieldValue::Str(s)) => s.to_string(),
                        Some(v) => match value(t, &ec.fields[0], v, proto_names) {
                            Value::String(s) => s,
                            other => other.to_string(),
                        },
                        None => String::new(),
                    };
                    let vf = &ec.fields[1];
                    let v = match e.get_or_default(vf.number) {
                        Some(v) => value(t, vf, v, proto_names),
                        None => Value::Object(Map::new()),
                    };
                    obj.insert(key, v);
                }
                out.insert(name(f, proto_names), Value::Object(obj));
            } else {
                let arr = m.repeated(f.number).map(|v| value(t, f, v, proto_names)).collect();
                out.insert(name(f, proto_names), Value::Array(arr));
            }
            continue;
        }
        let Some(v) = m.get(f.number) else { continue };
        if !f.presence && is_zero(&v) {
            continue;
        }
        out.insert(name(f, proto_names), value(t, f, v, proto_names));
    }
    Value::Object(out)
}

fn is_zero(v: &FieldValue<'_>) -> bool {
    match *v {
        FieldValue::I32(x) | FieldValue::Enum(x) => x == 0,
        FieldValue::I64(x) => x == 0,
        FieldValue::U32(x) => x == 0,
        FieldValue::U64(x) => x == 0,
        FieldValue::F32(x) => x.to_bits() == 0,
        FieldValue::F64(x) => x.to_bits() == 0,
        FieldValue::Bool(x) => !x,
        FieldValue::Str(s) => s.is_empty(),
        FieldValue::Bytes(b) => b.is_empty(),
        FieldValue::Message(_) => false,
    }
}

fn float(x: f64, text: String) -> Value {
    if x.is_nan() {
        Value::String("NaN".into())
    } else if x.is_infinite() {
        Value::String(if x > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        // The shortest text that reads back as the value (for float, as the f32).
        text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
    }
}

fn value(t: &SchemaTable, f: &Field, v: FieldValue<'_>, proto_names: bool) -> Value {
    match v {
        FieldValue::I32(x) => Value::from(x),
        FieldValue::U32(x) => Value::from(x),
        FieldValue::I64(x) => Value::String(x.to_string()),
        FieldValue::U64(x) => Value::String(x.to_string()),
        FieldValue::F32(x) => float(f64::from(x), x.to_string()),
        FieldValue::F64(x) => float(x, x.to_string()),
        FieldValue::Bool(x) => Value::Bool(x),
        FieldValue::Enum(n) => match f.kind {
            Kind::Enum(e) => match t.enum_type(e).values.iter().find(|(_, v)| *v == n) {
                Some((name, _)) => Value::String(name.clone()),
                None => Value::from(n),
            },
            _ => Value::from(n),
        },
        FieldValue::Str(s) => Value::String(s.to_string()),
        FieldValue::Bytes(b) if f.kind == Kind::String => Value::String(String::from_utf8_lossy(b).into_owned()),
        FieldValue::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        FieldValue::Message(m) => node(t, m, proto_names),
    }
}

/// Wire bytes of a message of class `class` from its JSON.
pub fn from_json(t: &SchemaTable, class: ClassId, json: &Value) -> Result<Vec<u8>, JsonError> {
    let mut out = Vec::new();
    let root = t.class(class).short_name().to_string();
    write_message(t, class, json, &root, &mut out, 0)?;
    Ok(out)
}

fn err(path: &str, message: impl Into<String>) -> JsonError {
    JsonError { path: path.to_string(), message: message.into() }
}

fn write_message(
    t: &SchemaTable,
    class: ClassId,
    json: &Value,
    path: &str,
    out: &mut Vec<u8>,
    depth: u32,
) -> Result<(), JsonError> {
    if depth > 100 {
        return Err(err(path, "nested more than 100 deep"));
    }
    let c = t.class(class);
    let Value::Object(obj) = json else { return Err(err(path, format!("expected an object, found {json}"))) };
    // Fields by number, whichever name form they came in.
    let mut present: Vec<(&Field, &Value)> = Vec::new();
    for (k, v) in obj {
        let Some(f) = c.fields.iter().find(|f| f.json_name == *k || f.name == *k) else {
            return Err(err(path, format!("no field `{k}` in {}", c.name)));
        };
        if present.iter().any(|(g, _)| g.number == f.number) {
            return Err(err(path, format!("field `{k}` given twice")));
        }
        if !v.is_null() {
            present.push((f, v));
        }
    }
    present.sort_by_key(|(f, _)| f.number);
    for (f, v) in present {
        let p = format!("{path}.{}", f.name);
        if f.label == Label::Repeated {
            if let Kind::Message(ec) = f.kind
                && t.class(ec).map_entry
            {
                write_map(t, f, ec, v, &p, out, depth)?;
                continue;
            }
            let Value::Array(items) = v else { return Err(err(&p, "expected an array")) };
            if f.packed && !items.is_empty() {
                let mut body = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    scalar(t, f, item, &format!("{p}[{i}]"), &mut body)?;
                }
                put_varint(out, u64::from(f.number) << 3 | WireType::Len as u64);
                put_varint(out, body.len() as u64);
                out.extend_from_slice(&body);
            } else {
                for (i, item) in items.iter().enumerate() {
                    one(t, f, item, &format!("{p}[{i}]"), out, depth, true)?;
                }
            }
        } else {
            one(t, f, v, &p, out, depth, f.presence)?;
        }
    }
    Ok(())
}

fn write_map(
    t: &SchemaTable,
    f: &Field,
    entry: ClassId,
    v: &Value,
    path: &str,
    out: &mut Vec<u8>,
    depth: u32,
) -> Result<(), JsonError> {
    let Value::Object(obj) = v else { return Err(err(path, "expected an object (a map)")) };
    let ec = t.class(entry);
    let (kf, vf) = (&ec.fields[0], &ec.fields[1]);
    // (sort key, the entry's bytes).
    let mut entries: Vec<((i128, String), Vec<u8>)> = Vec::new();
    for (k, val) in obj {
        let p = format!("{path}[{k}]");
        let key_json = match kf.kind {
            Kind::String => Value::String(k.clone()),
            Kind::Bool => Value::Bool(match k.as_str() {
                "true" => true,
                "false" => false,
                _ => return Err(err(&p, "a bool map key is `true` or `false`")),
            }),
            _ => Value::String(k.clone()),
        };
        let mut body = Vec::new();
        one(t, kf, &key_json, &p, &mut body, depth, true)?;
        let val = if val.is_null() && matches!(vf.kind, Kind::Message(_)) { &Value::Object(Map::new()) } else { val };
        one(t, vf, val, &p, &mut body, depth, true)?;
        let order = match kf.kind {
            Kind::String | Kind::Bool => (0, k.clone()),
            _ => (k.parse::<i128>().map_err(|_| err(&p, "an integer map key"))?, String::new()),
        };
        entries.push((order, body));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, body) in entries {
        put_varint(out, u64::from(f.number) << 3 | WireType::Len as u64);
        put_varint(out, body.len() as u64);
        out.extend_from_slice(&body);
    }
    Ok(())
}

/// One value with its tag; `keep_zero`: written even at its zero value.
fn one(
    t: &SchemaTable,
    f: &Field,
    v: &Value,
    path: &str,
    out: &mut Vec<u8>,
    depth: u32,
    keep_zero: bool,
) -> Result<(), JsonError> {
    match f.kind {
        Kind::Message(c) => {
            let mut body = Vec::new();
            write_message(t, c, v, path, &mut body, depth + 1)?;
            put_varint(out, u64::from(f.number) << 3 | WireType::Len as u64);
            put_varint(out, body.len() as u64);
            out.extend_from_slice(&body);
        }
        Kind::Group(c) => {
            put_varint(out, u64::from(f.number) << 3 | WireType::StartGroup as u64);
            write_message(t, c, v, path, out, depth + 1)?;
            put_varint(out, u64::from(f.number) << 3 | WireType::EndGroup as u64);
        }
        _ => {
            let mut body = Vec::new();
            scalar(t, f, v, path, &mut body)?;
            let zero = match f.kind {
                Kind::String | Kind::Bytes => body == [0],
                Kind::Double | Kind::Fixed64 | Kind::Sfixed64 | Kind::Float | Kind::Fixed32 | Kind::Sfixed32 => {
                    body.iter().all(|&b| b == 0)
                }
                _ => body == [0],
            };
            if zero && !keep_zero {
                return Ok(());
            }
            put_varint(out, u64::from(f.number) << 3 | f.kind.wire_type() as u64);
            out.extend_from_slice(&body);
        }
    }
    Ok(())
}

fn int(v: &Value, path: &str) -> Result<i128, JsonError> {
    let bad = || err(path, format!("expected an integer, found {v}"));
    match v {
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(i128::from(i))
            } else if let Some(u) = n.as_u64() {
                Ok(i128::from(u))
            } else {
                let f = n.as_f64().ok_or_else(bad)?;
                if f.fract() == 0.0 && f.abs() < 1.9e19 { Ok(f as i128) } else { Err(bad()) }
            }
        }
        Value::String(s) => s.trim().parse::<i128>().map_err(|_| bad()),
        _ => Err(bad()),
    }
}

fn ranged(v: &Value, path: &str, lo: i128, hi: i128) -> Result<i128, JsonError> {
    let x = int(v, path)?;
    if x < lo || x > hi {
        return Err(err(path, format!("{x} is out of range")));
    }
    Ok(x)
}

fn fnum(v: &Value, path: &str) -> Result<f64, JsonError> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| err(path, "not a number")),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => other.parse::<f64>().map_err(|_| err(path, format!("expected a number, found {other:?}"))),
        },
        _ => Err(err(path, format!("expected a number, found {v}"))),
    }
}

/// A scalar's value without its tag.
fn scalar(t: &SchemaTable, f: &Field, v: &Value, path: &str, out: &mut Vec<u8>) -> Result<(), JsonError> {
    const I32: (i128, i128) = (i32::MIN as i128, i32::MAX as i128);
    const U32: (i128, i128) = (0, u32::MAX as i128);
    const I64: (i128, i128) = (i64::MIN as i128, i64::MAX as i128);
    const U64: (i128, i128) = (0, u64::MAX as i128);
    match f.kind {
        Kind::Int32 => put_varint(out, ranged(v, path, I32.0, I32.1)? as i64 as u64),
        Kind::Sint32 => put_varint(out, u64::from(zigzag32(ranged(v, path, I32.0, I32.1)? as i32))),
        Kind::Uint32 => put_varint(out, ranged(v, path, U32.0, U32.1)? as u64),
        Kind::Int64 => put_varint(out, ranged(v, path, I64.0, I64.1)? as i64 as u64),
        Kind::Sint64 => put_varint(out, zigzag64(ranged(v, path, I64.0, I64.1)? as i64)),
        Kind::Uint64 => put_varint(out, ranged(v, path, U64.0, U64.1)? as u64),
        Kind::Fixed32 => out.extend_from_slice(&(ranged(v, path, U32.0, U32.1)? as u32).to_le_bytes()),
        Kind::Sfixed32 => out.extend_from_slice(&(ranged(v, path, I32.0, I32.1)? as i32).to_le_bytes()),
        Kind::Fixed64 => out.extend_from_slice(&(ranged(v, path, U64.0, U64.1)? as u64).to_le_bytes()),
        Kind::Sfixed64 => out.extend_from_slice(&(ranged(v, path, I64.0, I64.1)? as i64).to_le_bytes()),
        Kind::Double => out.extend_from_slice(&fnum(v, path)?.to_le_bytes()),
        Kind::Float => out.extend_from_slice(&(fnum(v, path)? as f32).to_le_bytes()),
        Kind::Bool => match v {
            Value::Bool(b) => put_varint(out, u64::from(*b)),
            _ => return Err(err(path, format!("expected true or false, found {v}"))),
        },
        Kind::String => {
            let Value::String(s) = v else { return Err(err(path, format!("expected a string, found {v}"))) };
            put_varint(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
        Kind::Bytes => {
            let Value::String(s) = v else { return Err(err(path, format!("expected base64, found {v}"))) };
            let b = base64::engine::general_purpose::STANDARD
                .decode(s)
                .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(s))
                .map_err(|e| err(path, format!("not base64: {e}")))?;
            put_varint(out, b.len() as u64);
            out.extend_from_slice(&b);
        }
        Kind::Enum(e) => {
            let n = match v {
                Value::String(s) => match t.enum_type(e).values.iter().find(|(name, _)| name == s) {
                    Some((_, n)) => *n,
                    None => return Err(err(path, format!("`{s}` is not a value of {}", t.enum_type(e).name))),
                },
                other => ranged(other, path, I32.0, I32.1)? as i32,
            };
            put_varint(out, n as i64 as u64);
        }
        Kind::Message(_) | Kind::Group(_) => unreachable!("messages are written by `one`"),
    }
    Ok(())
}
