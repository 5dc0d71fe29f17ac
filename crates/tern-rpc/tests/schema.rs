//! The schema table: every type and label protobuf has, placement from `(tern.acc)`, the
//! staged workloads' schemas, errors that name the file, message and field, and the profile
//! check.

use std::path::{Path, PathBuf};

use tern_rpc::check;
use tern_rpc::schema::{DefaultValue, Kind, Label, Placement, SchemaError, WireType, compile_file, compile_str};

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
}

const PROTO2: &str = r#"
syntax = "proto2";
package t;
import "tern/rpcnic.proto";
enum Color { RED = 0; GREEN = 1; BLUE = 5; }
message All {
  optional double d = 1;  optional float f = 2;  optional int64 i64 = 3;  optional uint64 u64 = 4;
  optional int32 i32 = 5; optional fixed64 fx64 = 6; optional fixed32 fx32 = 7; optional bool b = 8;
  optional string s = 9 [default = "hi"]; optional bytes by = 10 [(tern.acc) = true];
  optional uint32 u32 = 13; optional sfixed32 sf32 = 15; optional sfixed64 sf64 = 16;
  optional sint32 si32 = 17; optional sint64 si64 = 18 [default = -7];
  optional Color color = 20 [default = BLUE];
  required int32 req = 21;
  repeated int32 unpacked = 22;
  repeated int32 packed = 23 [packed = true];
  repeated string names = 24 [(tern.acc) = true];
  optional Inner inner = 25 [(tern.acc) = true];
  optional group Grp = 26 { optional int32 a = 1; }
  map<string, Inner> by_name = 27;
  oneof choice { int32 one = 28; string other = 29; }
  optional All self = 30;
  message Inner { optional bytes blob = 1; }
}
"#;

#[test]
fn every_proto2_type_and_label() {
    let t = compile_str("all.proto", PROTO2).unwrap();
    let all = t.class_by_name("t.All").unwrap();
    assert_eq!(t.class_by_name("All").unwrap().id, all.id, "a name unique without its package");
    assert!(!all.proto3);
    let kinds: Vec<(u32, &str)> = all.fields.iter().map(|f| (f.number, f.kind.name())).collect();
    assert_eq!(
        &kinds[..15],
        &[
            (1, "double"),
            (2, "float"),
            (3, "int64"),
            (4, "uint64"),
            (5, "int32"),
            (6, "fixed64"),
            (7, "fixed32"),
            (8, "bool"),
            (9, "string"),
            (10, "bytes"),
            (13, "uint32"),
            (15, "sfixed32"),
            (16, "sfixed64"),
            (17, "sint32"),
            (18, "sint64"),
        ]
    );
    assert_eq!(all.field(9).unwrap().default, Some(DefaultValue::Str("hi".into())));
    assert_eq!(all.field(18).unwrap().default, Some(DefaultValue::I64(-7)));
    assert_eq!(all.field(20).unwrap().default, Some(DefaultValue::I64(5)));
    assert!(!all.field(9).unwrap().check_utf8, "proto2 strings are not checked");
    let Kind::Enum(color) = all.field(20).unwrap().kind else { panic!("enum") };
    assert!(t.enum_type(color).closed, "proto2 enums are closed");
    assert!(t.enum_type(color).declares(5) && !t.enum_type(color).declares(2));
    assert_eq!(all.field(21).unwrap().label, Label::Required);
    assert_eq!((all.field(22).unwrap().label, all.field(22).unwrap().packed), (Label::Repeated, false));
    assert!(all.field(23).unwrap().packed);
    // Placement: the Acc label on bytes, repeated string and a message; host for the rest.
    let device: Vec<u32> = all.fields.iter().filter(|f| f.placement == Placement::Device).map(|f| f.number).collect();
    assert_eq!(device, vec![10, 24, 25]);
    let Kind::Group(g) = all.field(26).unwrap().kind else { panic!("group") };
    assert_eq!(all.field(26).unwrap().kind.wire_type(), WireType::StartGroup);
    assert_eq!(t.class(g).fields[0].name, "a");
    let Kind::Message(entry) = all.field(27).unwrap().kind else { panic!("map") };
    assert!(t.class(entry).map_entry);
    assert_eq!(t.class(entry).fields.iter().map(|f| f.number).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(all.oneofs, vec!["choice"]);
    assert_eq!((all.field(28).unwrap().oneof, all.field(29).unwrap().oneof), (Some(0), Some(0)));
    assert!(all.field(28).unwrap().presence);
    // Recursive through `self`: no bounded depth. Inner alone: depth 1.
    assert_eq!(t.depth(all.id), None);
    assert_eq!(t.depth(t.class_by_name("All.Inner").unwrap().id), Some(1));
    // Numbers not declared are absent, below and above the dense range.
    assert!(all.field(11).is_none() && all.field(0).is_none() && all.field(100_000).is_none());
    // Only what the file reaches: not protobuf's descriptor messages that tern/rpcnic.proto imports.
    assert!(
        t.classes.iter().all(|c| c.name.starts_with("t.")),
        "{:?}",
        t.classes.iter().map(|c| &c.name).collect::<Vec<_>>()
    );
}

/// `tern rpc check` lists each default as the `.proto` file writes it: an enum's by its value's
/// name, strings and bytes quoted with C escapes, floats' specials by protobuf's names.
#[test]
fn the_check_writes_defaults_as_declared() {
    let text = r#"
syntax = "proto2";
enum Color { RED = 0; BLUE = 5; }
message D {
  optional string s = 1 [default = "hi \"there\"\n"]; optional bytes b = 2 [default = "\001z"];
  optional sint64 i = 3 [default = -7]; optional uint64 u = 4 [default = 18446744073709551615];
  optional double d = 5 [default = 1.5]; optional float f = 6 [default = 0.1];
  optional double n = 7 [default = nan]; optional float m = 8 [default = -inf];
  optional bool t = 9 [default = true]; optional Color c = 10 [default = BLUE];
}
"#;
    let t = compile_str("d.proto", text).unwrap();
    let r = check::report(&t, &tern_hw::Profile::builtin("cpu").unwrap());
    let defaults: Vec<&str> = r.classes[0].fields.iter().map(|f| f.default.as_deref().unwrap()).collect();
    assert_eq!(
        defaults,
        [
            "\"hi \\\"there\\\"\\n\"",
            "\"\\x01z\"",
            "-7",
            "18446744073709551615",
            "1.5",
            "0.1",
            "nan",
            "-inf",
            "true",
            "BLUE"
        ]
    );
}

#[test]
fn proto3_presence_packing_and_open_enums() {
    let t = compile_str(
        "p3.proto",
        r#"syntax = "proto3";
        enum E { ZERO = 0; ONE = 1; }
        message M { int32 a = 1; optional int32 b = 2; repeated int32 c = 3; repeated int32 d = 4 [packed = false];
                    string s = 5; E e = 6; M child = 7; }"#,
    )
    .unwrap();
    let m = t.class_by_name("M").unwrap();
    assert!(m.proto3);
    assert!(!m.field(1).unwrap().presence && m.field(2).unwrap().presence);
    assert!(m.oneofs.is_empty(), "proto3 optional's synthetic oneof is not a oneof");
    assert!(m.field(3).unwrap().packed && !m.field(4).unwrap().packed, "proto3 packs repeated scalars by default");
    assert!(m.field(5).unwrap().check_utf8);
    let Kind::Enum(e) = m.field(6).unwrap().kind else { panic!() };
    assert!(!t.enum_type(e).closed);
    assert!(m.field(7).unwrap().presence);
}

#[test]
fn acc_only_on_dereference_fields_and_errors_name_the_field() {
    let err = compile_str(
        "bad.proto",
        r#"syntax = "proto3"; import "tern/rpcnic.proto";
        message Outer { message M1 { int32 f17 = 17 [(tern.acc) = true]; } }"#,
    )
    .unwrap_err();
    assert!(
        matches!(&err, SchemaError::Field { file, message, field, .. }
        if file == "bad.proto" && message == "Outer.M1" && field == "f17"),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("bad.proto: message Outer.M1: field f17: (tern.acc) applies to"), "{err}");
    // A syntax error names the file and the place.
    let err = compile_str("syn.proto", "syntax = \"proto3\";\nmessage M { int32 = 1; }").unwrap_err();
    assert!(matches!(err, SchemaError::Syntax { ref file, .. } if file == "syn.proto"), "{err:?}");
    assert!(err.to_string().contains("syn.proto"), "{err}");
    let err = compile_file(Path::new("/nonexistent/x.proto"), &[]).unwrap_err();
    assert_eq!(err.to_string(), "/nonexistent/x.proto: no such file");
    assert!(matches!(compile_str("e.proto", "syntax = \"proto3\";"), Err(SchemaError::Empty { .. })));
}

/// Every staged schema compiles, and every staged message's type is a class of it.
#[test]
fn the_workloads_schemas_compile() {
    for b in 0..6 {
        let dir = shared().join(format!("hyperprotobench/bench{b}"));
        let t = compile_file(&dir.join("benchmark.proto"), &[]).unwrap();
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
        for m in manifest["messages"].as_array().unwrap() {
            let ty = m["type"].as_str().unwrap();
            let c = t.class_by_name(ty).unwrap_or_else(|| panic!("bench{b}: {ty}"));
            assert!(t.depth(c.id).is_some_and(|d| (1..=4).contains(&d)), "bench{b}: {ty} depth {:?}", t.depth(c.id));
        }
        eprintln!("bench{b}: {} classes, {} enums", t.classes.len(), t.enums.len());
    }
    let ds = shared().join("protobuf-datasets");
    for p in [
        "benchmarks.proto",
        "google_message1/proto2/benchmark_message1_proto2.proto",
        "google_message1/proto3/benchmark_message1_proto3.proto",
        "google_message2/benchmark_message2.proto",
    ] {
        let t = compile_file(&ds.join(p), &[]).unwrap();
        assert!(!t.classes.is_empty(), "{p}");
    }
}

#[test]
fn the_check_names_what_exceeds_the_profile() {
    let u280 = tern_hw::Profile::builtin("rpcnic-u280").unwrap();
    let cpu = tern_hw::Profile::builtin("cpu").unwrap();
    // 33 fields in one class; 9 classes nested; and a recursive one.
    let wide: String = (1..=33).map(|i| format!("int32 f{i} = {i}; ")).collect();
    let deep: String = (1..9).map(|i| format!("message D{i} {{ D{} next = 1; }}\n", i + 1)).collect();
    let src = format!(
        "syntax = \"proto3\";\nmessage Wide {{ {wide} }}\n{deep}message D9 {{ int32 x = 1; }}\nmessage Tree {{ repeated Tree kids = 1; }}"
    );
    let t = compile_str("limits.proto", &src).unwrap();
    let r = check::report(&t, &u280);
    assert!(!r.fits);
    assert_eq!(
        r.problems,
        vec![
            "class Wide: 33 fields: a class has 32 field slots".to_string(),
            "class D1: nested 9 deep: the deserializer's stack holds 8 classes".to_string(),
        ]
    );
    assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
    assert!(r.warnings[0].starts_with("class Tree is recursive"));
    let r = check::report(&t, &cpu);
    assert!(r.fits && r.problems.is_empty() && r.warnings.is_empty());
    // The paper's workload fits the U280's table.
    let t = compile_file(&shared().join("hyperprotobench/bench0/benchmark.proto"), &[]).unwrap();
    let r = check::report(&t, &u280);
    assert!(r.fits, "{:?}", r.problems);
}
