//! The builder: a message built field by field through the schema table, by number and by name,
//! encodes to the bytes Python protobuf (upb) wrote for the same values; values land in the
//! memory the schema places them in; oneofs, maps and wrong types behave as documented.

use std::path::Path;

use tern_rpc::arena::Pool;
use tern_rpc::build::{BuildError, BuildErrorKind};
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::encode::encode;
use tern_rpc::message::{FieldValue as V, Message};
use tern_rpc::schema::{SchemaTable, compile_file};

fn dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

fn all3() -> SchemaTable {
    compile_file(&dir().join("all3.proto"), &[]).unwrap()
}

/// `all3_full.json`'s values, set one by one.
fn build_all3_full<'t>(t: &'t SchemaTable, pools: &'t Pools) -> Result<Message<'t>, BuildError> {
    let mut m = Message::new(t, t.class_by_name("interop.All3").unwrap().id, pools);
    let mut r = m.root_mut();
    r.set("d", V::F64(2.5))?;
    r.set("f", V::F32(-0.5))?;
    r.set(3u32, V::I64(-5))?;
    r.set(4u32, V::U64(5))?;
    r.set("i32", V::I32(i32::MIN))?;
    r.set("fx64", V::U64(1))?;
    r.set("fx32", V::U32(2))?;
    r.set("b", V::Bool(true))?;
    r.set("s", V::Str("日本語"))?;
    r.set("by", V::Bytes(&[0xff, 0x00]))?;
    r.set("u32", V::U32(1))?;
    r.set("sf32", V::I32(-3))?;
    r.set("sf64", V::I64(-4))?;
    r.set("si32", V::I32(-5))?;
    r.set("si64", V::I64(-6))?;
    r.set("mood", V::Enum(2))?;
    r.set("maybe", V::I32(0))?;
    for x in [1, 2, 3, -7] {
        r.push("packed", V::I32(x))?;
    }
    for x in [4, -5] {
        r.push("unpacked", V::I32(x))?;
    }
    for n in ["n1", "n2"] {
        r.push("names", V::Str(n))?;
    }
    {
        let mut leaf = r.message("leaf")?;
        leaf.set("name", V::Str("leaf"))?;
        leaf.push("ns", V::U64(1))?;
        leaf.push("ns", V::U64(u64::MAX))?;
    }
    r.insert("counts", V::Str("a"), V::I32(1))?;
    r.insert("counts", V::Str("b"), V::I32(-2))?;
    r.insert_message("leaves", V::I32(-1))?.push("ns", V::U64(3))?;
    r.insert_message("leaves", V::I32(7))?.set("name", V::Str("seven"))?;
    // The oneof: `one` first, then `third` replaces it.
    r.set("one", V::U32(9))?;
    r.message("third")?.set("name", V::Str("third"))?;
    r.message("child")?.set("s", V::Str("child"))?;
    for x in [1, 2] {
        r.push("moods", V::Enum(x))?;
    }
    r.push("blobs", V::Bytes(b""))?;
    r.push("blobs", V::Bytes(&[1]))?;
    for x in [1.5, -2.0] {
        r.push("fs", V::F32(x))?;
    }
    Ok(m)
}

#[test]
fn a_built_message_encodes_as_python_protobuf_does() {
    let t = all3();
    let pools = Pools::default();
    let m = build_all3_full(&t, &pools).unwrap();
    let want = std::fs::read(dir().join("all3_full.bin")).unwrap();
    assert_eq!(encode(&m), want);
    // And reads as the decoded fixture does.
    let class = t.class_by_name("interop.All3").unwrap().id;
    let d = decode(&t, class, &want, &pools, &DecodeOptions::default()).unwrap();
    assert_eq!(tern_rpc::json::to_json(&m, false), tern_rpc::json::to_json(&d, false));
    assert_eq!(m.root().get(28), None, "the oneof holds `third`");
    assert_eq!(m.stats(), Default::default(), "building counts no decode writes");
}

#[test]
fn values_go_where_the_schema_places_them() {
    let t = all3();
    let pools = Pools::new(4096, 16);
    {
        let m = build_all3_full(&t, &pools).unwrap();
        // `by`, `names` and everything in `leaf` are Acc-placed: device memory.
        assert!(m.root().get_by_name("leaf").is_some_and(|v| matches!(v, V::Message(l) if l.in_device())));
        assert!(!matches!(m.root().get_by_name("child"), Some(V::Message(c)) if c.in_device()));
        assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (1, 1));
    }
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0), "chunks back on drop");
    // An exhausted pool is an error naming the field.
    let tiny = Pools::new(64, 1);
    let mut m = Message::new(&t, t.class_by_name("interop.All3").unwrap().id, &tiny);
    let mut r = m.root_mut();
    r.set("s", V::Str("x")).unwrap();
    let e = r.set("s", V::Str(&"y".repeat(64))).unwrap_err();
    assert_eq!(e, BuildError { field: "All3.s".into(), kind: BuildErrorKind::PoolExhausted(Pool::Host) });
}

#[test]
fn wrong_changes_are_errors_naming_the_field() {
    let t = all3();
    let pools = Pools::default();
    let mut m = Message::new(&t, t.class_by_name("interop.All3").unwrap().id, &pools);
    let mut r = m.root_mut();
    let kind = |e: BuildError| (e.field, e.kind);
    assert_eq!(
        kind(r.set("i32", V::I64(1)).unwrap_err()),
        ("All3.i32".into(), BuildErrorKind::WrongType { expected: "int32", given: "I64" })
    );
    assert_eq!(kind(r.set("nope", V::I32(1)).unwrap_err()), ("All3.nope".into(), BuildErrorKind::NoField));
    assert_eq!(kind(r.set(99u32, V::I32(1)).unwrap_err()), ("All3.99".into(), BuildErrorKind::NoField));
    assert_eq!(kind(r.set("packed", V::I32(1)).unwrap_err()), ("All3.packed".into(), BuildErrorKind::Repeated));
    assert_eq!(kind(r.push("i32", V::I32(1)).unwrap_err()), ("All3.i32".into(), BuildErrorKind::NotRepeated));
    assert_eq!(kind(r.message("s").unwrap_err()), ("All3.s".into(), BuildErrorKind::NotMessage));
    assert_eq!(
        kind(r.insert("names", V::Str("k"), V::Str("v")).unwrap_err()),
        ("All3.names".into(), BuildErrorKind::NotMap)
    );
    assert_eq!(
        kind(r.set("s", V::Bytes(&[0xff])).unwrap_err()),
        ("All3.s".into(), BuildErrorKind::WrongType { expected: "string", given: "Bytes" }),
        "a proto3 string takes text only"
    );
    // Nothing was set by the refused changes.
    assert_eq!(encode(&m), b"");
}

#[test]
fn maps_replace_a_key_and_closed_enums_refuse_undeclared_values() {
    let t = all3();
    let pools = Pools::default();
    let mut m = Message::new(&t, t.class_by_name("interop.All3").unwrap().id, &pools);
    let mut r = m.root_mut();
    r.insert("counts", V::Str("a"), V::I32(1)).unwrap();
    r.insert("counts", V::Str("a"), V::I32(5)).unwrap();
    assert_eq!(r.as_ref().len_of(26), 1);
    r.clear("counts").unwrap();
    assert_eq!(r.as_ref().len_of(26), 0);
    // A proto3 (open) enum takes any number.
    r.set("mood", V::Enum(77)).unwrap();
    let t2 = compile_file(&dir().join("all2.proto"), &[]).unwrap();
    let class = t2.classes.iter().find(|c| c.short_name() == "All2").unwrap().id;
    let mut m2 = Message::new(&t2, class, &pools);
    let field = t2.class(class).fields.iter().find(|f| matches!(f.kind, tern_rpc::schema::Kind::Enum(_))).unwrap();
    let e = m2.root_mut().set(field.number, V::Enum(77)).unwrap_err();
    assert_eq!(e.kind, BuildErrorKind::UndeclaredEnumValue(77));
}

/// A decoded sub-message's length is written after its body, in room as wide as its length in
/// the input was (`tern_rpc::encode`): changed so that its length needs a narrower or a wider
/// varint (1, 2 or 3 bytes, at two levels of nesting), it encodes as the same message built
/// anew, whose lengths are all counted before they are written.
#[test]
fn a_changed_decoded_message_encodes_as_the_same_message_built_anew() {
    let t = all3();
    let pools = Pools::default();
    let class = t.class_by_name("interop.All3").unwrap().id;
    let build = |outer: usize, inner: usize| {
        let mut m = Message::new(&t, class, &pools);
        let mut r = m.root_mut();
        let mut c = r.message("child").unwrap();
        c.set("s", V::Str(&"o".repeat(outer))).unwrap();
        c.message("child").unwrap().set("s", V::Str(&"i".repeat(inner))).unwrap();
        r.set("i32", V::I32(7)).unwrap();
        m
    };
    let sizes = [0, 3, 120, 124, 128, 200, 16_000, 16_376, 16_384, 20_000];
    for (i, &from) in sizes.iter().enumerate() {
        for (j, &to) in sizes.iter().enumerate() {
            // The outer length moves one way, the inner another.
            let (from_in, to_in) = (sizes[(i + 3) % sizes.len()], sizes[(j + 7) % sizes.len()]);
            let wire = encode(&build(from, from_in));
            let mut d = decode(&t, class, &wire, &pools, &DecodeOptions::default()).unwrap();
            {
                let mut r = d.root_mut();
                let mut c = r.message("child").unwrap();
                c.set("s", V::Str(&"o".repeat(to))).unwrap();
                c.message("child").unwrap().set("s", V::Str(&"i".repeat(to_in))).unwrap();
            }
            let want = encode(&build(to, to_in));
            assert_eq!(encode(&d), want, "outer {from} -> {to} bytes, inner {from_in} -> {to_in}");
            let again = decode(&t, class, &want, &pools, &DecodeOptions::default()).unwrap();
            assert_eq!(tern_rpc::json::to_json(&again, false), tern_rpc::json::to_json(&d, false));
        }
    }
}
