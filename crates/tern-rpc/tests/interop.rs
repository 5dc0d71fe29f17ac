//! The interop fixtures (made by Python protobuf, `tests/interop/make_fixtures.py`): their
//! schemas compile to the schema table, and every fixture's bytes read with `tern_rpc::wire`
//! field by field to the end, each field either declared by its class (with the wire type the
//! table gives, or length-delimited for a packed repeated scalar) or one of the cases' unknown
//! fields.

use std::path::{Path, PathBuf};

use tern_rpc::schema::{Kind, Label, SchemaTable, WireType, compile_file};
use tern_rpc::wire::{Reader, Value};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

/// Reads a message of class `class`, recursing into sub-messages; returns the unknown field
/// numbers met.
fn walk(t: &SchemaTable, class: u32, bytes: &[u8], base: usize, unknown: &mut Vec<u32>) {
    let c = t.class(class);
    let mut r = Reader::at(bytes, base);
    while let Some(f) = r.next_field().unwrap_or_else(|e| panic!("{}: {e}", c.name)) {
        let Some(field) = c.field(f.number) else {
            unknown.push(f.number);
            if f.value == Value::StartGroup {
                r.skip_group(f.number, 100).unwrap();
            }
            continue;
        };
        let wire = f.value.wire_type();
        let packed_form = field.label == Label::Repeated && field.kind.packable() && wire == WireType::Len;
        assert!(wire == field.kind.wire_type() || packed_form, "{}.{}: wire type {wire:?}", c.name, field.name);
        match (field.kind, f.value) {
            (Kind::Message(sub), Value::Len(b)) => {
                let at = r.offset() - b.len();
                walk(t, sub, b, at, unknown)
            }
            (Kind::Group(_), Value::StartGroup) => {
                r.skip_group(f.number, 100).unwrap();
            }
            _ => {}
        }
    }
}

#[test]
fn every_fixture_reads_against_its_schema() {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap();
    assert!(manifest["made_by"].as_str().unwrap().starts_with("Python protobuf"));
    let cases = manifest["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 9);
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let t = compile_file(&dir().join(case["proto"].as_str().unwrap()), &[]).unwrap();
        let class = t.class_by_name(case["type"].as_str().unwrap()).unwrap().id;
        for key in ["input", "canonical"] {
            let bytes = std::fs::read(dir().join(case["files"][key].as_str().unwrap())).unwrap();
            let mut unknown = Vec::new();
            walk(&t, class, &bytes, 0, &mut unknown);
            let want: &[u32] = if name == "all2_unknown" { &[1000, 1001, 1002, 1003, 1004] } else { &[] };
            // The closed enum's undeclared value is a known field on the wire (a decoder moves it
            // to the unknown fields); the others are unknown numbers.
            assert_eq!(unknown, want, "{name} {key}");
        }
    }
}

/// One fixture case: its name, schema table, class, input bytes, Python's bytes, and the case's
/// manifest entry.
struct Case {
    name: String,
    table: tern_rpc::schema::SchemaTable,
    class: u32,
    input: Vec<u8>,
    canonical: Vec<u8>,
    entry: serde_json::Value,
}

fn cases() -> Vec<Case> {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap();
    let read =
        |case: &serde_json::Value, key: &str| std::fs::read(dir().join(case["files"][key].as_str().unwrap())).unwrap();
    manifest["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| {
            let table = compile_file(&dir().join(case["proto"].as_str().unwrap()), &[]).unwrap();
            let class = table.class_by_name(case["type"].as_str().unwrap()).unwrap().id;
            Case {
                name: case["name"].as_str().unwrap().to_string(),
                table,
                class,
                input: read(case, "input"),
                canonical: read(case, "canonical"),
                entry: case.clone(),
            }
        })
        .collect()
}

/// Every fixture's input decodes, and encodes back to exactly what Python protobuf re-serialized
/// (deterministic), in both write modes, which build the same message.
#[test]
fn every_fixture_round_trips_to_pythons_bytes() {
    use tern_rpc::decode::{DecodeOptions, Pools, WriteMode, decode};
    let pools = Pools::default();
    for Case { name, table: t, class, input, canonical, .. } in cases() {
        let mut encoded = Vec::new();
        for mode in [WriteMode::OneShot, WriteMode::FieldByField] {
            let opts = DecodeOptions { mode, ..DecodeOptions::default() };
            let m = decode(&t, class, &input, &pools, &opts).unwrap_or_else(|e| panic!("{name}: {e}"));
            encoded.push(tern_rpc::encode::encode(&m));
        }
        assert_eq!(encoded[0], canonical, "{name}: encoded\n{:02x?}\nwant\n{:02x?}", encoded[0], canonical);
        assert_eq!(encoded[0], encoded[1], "{name}: the write modes differ");
    }
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0), "every chunk went back");
}

/// Tern's JSON of each fixture equals Python protobuf's (protobuf's JSON mapping, proto field
/// names), and Python's JSON encodes to Python's bytes (unknown fields, which JSON leaves out,
/// aside).
#[test]
fn json_agrees_with_python_both_ways() {
    use tern_rpc::decode::{DecodeOptions, Pools, decode};
    use tern_rpc::json::{from_json, to_json};
    let pools = Pools::default();
    for Case { name, table: t, class, input, canonical, entry } in cases() {
        let python: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir().join(entry["files"]["json"].as_str().unwrap())).unwrap(),
        )
        .unwrap();
        let m = decode(&t, class, &input, &pools, &DecodeOptions::default()).unwrap();
        assert_eq!(to_json(&m, true), python, "{name}");
        let bytes = from_json(&t, class, &python).unwrap_or_else(|e| panic!("{name}: {e}"));
        if name != "all2_unknown" {
            assert_eq!(bytes, canonical, "{name}");
        }
        // The JSON names read back too.
        assert_eq!(from_json(&t, class, &to_json(&m, false)).unwrap(), bytes, "{name}");
    }
}
