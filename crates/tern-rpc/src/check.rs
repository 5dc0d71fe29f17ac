//! What a schema table holds, and what of it exceeds a hardware profile's schema table
//! (`tern rpc check`): classes (the table's depth; a 10-bit class id on `rpcnic-u280`), field
//! slots per class, and message nesting against the deserializer's stack.
//!
//! Nesting depth counts classes from the top-level one (a message with no message fields has
//! depth 1). A recursive class's depth is bounded only by the data; the check says so, and a
//! message nested deeper than the stack at run time is what the decoder's depth limit refuses.

use serde::Serialize;
use tern_hw::{Profile, resource};

use crate::schema::{Class, DefaultValue, Kind, SchemaTable};

/// One field as the report lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldRow {
    /// Number.
    pub number: u32,
    /// Name.
    pub name: String,
    /// `optional`, `required` or `repeated`.
    pub label: String,
    /// The type: a scalar's name, or the full name of its message or enum.
    #[serde(rename = "type")]
    pub ty: String,
    /// `host` or `device`.
    pub placement: String,
    /// Written packed.
    pub packed: bool,
    /// A map (repeated entries).
    pub map: bool,
    /// Its oneof.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oneof: Option<String>,
    /// Its `[default = ...]`, as declared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

/// One class as the report lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClassRow {
    /// Class id.
    pub id: u32,
    /// Full name.
    pub name: String,
    /// `proto2` or `proto3`.
    pub syntax: &'static str,
    /// Nesting depth from this class; `None`: recursive.
    pub depth: Option<u32>,
    /// Fields placed in device memory.
    pub device_fields: usize,
    /// Fields.
    pub fields: Vec<FieldRow>,
}

/// The report of `tern rpc check`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The file.
    pub file: String,
    /// The profile checked against.
    pub profile: String,
    /// Classes in the table.
    pub class_count: usize,
    /// Enums in the table.
    pub enum_count: usize,
    /// Whether nothing exceeds the profile.
    pub fits: bool,
    /// What exceeds the profile, one line each.
    pub problems: Vec<String>,
    /// What the profile bounds only at run time (recursive classes), one line each.
    pub warnings: Vec<String>,
    /// The classes (map-entry classes included, marked by their fields' `map`).
    pub classes: Vec<ClassRow>,
}

fn type_name(t: &SchemaTable, k: Kind) -> String {
    match k {
        Kind::Enum(e) => t.enum_type(e).name.clone(),
        Kind::Message(c) | Kind::Group(c) => t.class(c).name.clone(),
        k => k.name().to_string(),
    }
}

/// A proto2 default as a `.proto` file writes it: a number, `true`/`false`, `inf`, `-inf` or
/// `nan`, an enum value's name, or a string or bytes quoted with C escapes.
fn default_text(t: &SchemaTable, kind: Kind, d: &DefaultValue) -> String {
    let quoted = |b: &[u8]| format!("\"{}\"", b.escape_ascii());
    // `shortest` is the value's shortest decimal that reads back to it (Rust's `{:?}`).
    let float = |x: f64, shortest: String| match x {
        x if x.is_nan() => "nan".to_string(),
        x if x.is_infinite() => if x > 0.0 { "inf" } else { "-inf" }.to_string(),
        _ => shortest,
    };
    match (kind, d) {
        (Kind::Enum(e), DefaultValue::I64(n)) => {
            let values = &t.enum_type(e).values;
            values.iter().find(|(_, v)| i64::from(*v) == *n).map_or_else(|| n.to_string(), |(name, _)| name.clone())
        }
        (_, DefaultValue::I64(n)) => n.to_string(),
        (_, DefaultValue::U64(n)) => n.to_string(),
        (_, DefaultValue::F64(x)) => float(*x, format!("{x:?}")),
        (_, DefaultValue::F32(x)) => float(f64::from(*x), format!("{x:?}")),
        (_, DefaultValue::Bool(b)) => b.to_string(),
        (_, DefaultValue::Str(s)) => quoted(s.as_bytes()),
        (_, DefaultValue::Bytes(b)) => quoted(b),
    }
}

fn row(t: &SchemaTable, c: &Class) -> ClassRow {
    let fields = c
        .fields
        .iter()
        .map(|f| FieldRow {
            number: f.number,
            name: f.name.clone(),
            label: f.label.to_string(),
            ty: match f.kind {
                Kind::Group(_) => format!("group {}", type_name(t, f.kind)),
                k => type_name(t, k),
            },
            placement: f.placement.to_string(),
            packed: f.packed,
            map: matches!(f.kind, Kind::Message(s) if t.class(s).map_entry),
            oneof: f.oneof.map(|o| c.oneofs[usize::from(o)].clone()),
            default: f.default.as_ref().map(|d| default_text(t, f.kind, d)),
        })
        .collect();
    ClassRow {
        id: c.id,
        name: c.name.clone(),
        syntax: if c.proto3 { "proto3" } else { "proto2" },
        depth: t.depth(c.id),
        device_fields: c.fields.iter().filter(|f| f.placement == crate::schema::Placement::Device).count(),
        fields,
    }
}

/// Checks `table` against `profile`.
pub fn report(table: &SchemaTable, profile: &Profile) -> Report {
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    let classes: Vec<ClassRow> = table.classes.iter().map(|c| row(table, c)).collect();
    if let Some(max) = profile.capacity(resource::RPC_SCHEMA_CLASSES)
        && classes.len() as u64 > max
    {
        problems.push(format!("{} classes: the schema table holds {max}", classes.len()));
    }
    let slots = profile.capacity(resource::RPC_FIELD_SLOTS);
    let stack = profile.capacity(resource::RPC_SCHEMA_STACK);
    for c in &classes {
        if let Some(max) = slots
            && c.fields.len() as u64 > max
        {
            problems.push(format!("class {}: {} fields: a class has {max} field slots", c.name, c.fields.len()));
        }
        match (c.depth, stack) {
            (Some(d), Some(max)) if u64::from(d) > max => problems.push(format!(
                "class {}: nested {d} deep: the deserializer's stack holds {max} classes",
                c.name
            )),
            (None, Some(max)) => warnings.push(format!(
                "class {} is recursive: a message of it nested more than {max} deep cannot be deserialized on this profile",
                c.name
            )),
            _ => {}
        }
    }
    Report {
        file: table.file.clone(),
        profile: profile.name.clone(),
        class_count: classes.len(),
        enum_count: table.enums.len(),
        fits: problems.is_empty(),
        problems,
        warnings,
        classes,
    }
}
