//! The deserializer: errors name the field path and byte offset and give every chunk back; the
//! accessors read what was decoded; Acc-placed fields land in device memory.

use std::path::Path;

use tern_rpc::arena::Pool;
use tern_rpc::decode::{DecodeError, DecodeErrorKind, DecodeOptions, Pools, decode};
use tern_rpc::message::FieldValue;
use tern_rpc::schema::{SchemaTable, compile_file};
use tern_rpc::wire::WireErrorKind;

fn all3() -> SchemaTable {
    compile_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/all3.proto"), &[]).unwrap()
}

fn all2() -> SchemaTable {
    compile_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/all2.proto"), &[]).unwrap()
}

fn err(t: &SchemaTable, ty: &str, input: &[u8], opts: &DecodeOptions, pools: &Pools) -> DecodeError {
    let class = t.class_by_name(ty).unwrap().id;
    let e = decode(t, class, input, pools, opts).unwrap_err();
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0), "chunks back after {e}");
    e
}

#[test]
fn errors_name_the_path_and_offset() {
    let t = all3();
    let p = Pools::default();
    let d = DecodeOptions::default();
    let e = |b: &[u8]| err(&t, "All3", b, &d, &p);
    // A varint over 10 bytes in field 5 (i32).
    let mut b = vec![0x28];
    b.extend([0xff; 11]);
    assert_eq!(e(&b).to_string(), "All3: a varint longer than 10 bytes at byte 1");
    // A length past the end; field number 0; a wrong wire type; an unmatched end-group.
    assert_eq!(e(&[0x4a, 0x05, b'a']).kind, DecodeErrorKind::Wire(WireErrorKind::LengthPastEnd));
    assert_eq!(e(&[0x00]).kind, DecodeErrorKind::Wire(WireErrorKind::FieldNumberZero));
    assert_eq!(e(&[0x2a, 0x00]).to_string(), "All3.i32: wire type 2 for a int32 field at byte 0");
    assert_eq!(e(&[0x28, 0x01, 0x0c]).kind, DecodeErrorKind::Wire(WireErrorKind::UnmatchedEndGroup));
    // Invalid UTF-8 in a proto3 string, two messages down: child (30) -> leaf (25) -> name (1).
    let leaf = [0x0a, 0x02, 0xc3, 0x28];
    let mut child = vec![0xca, 0x01, leaf.len() as u8];
    child.extend(leaf);
    let mut top = vec![0xf2, 0x01, child.len() as u8];
    top.extend(&child);
    let x = e(&top);
    assert_eq!((x.path.as_str(), x.kind, x.offset), ("All3.child.leaf.name", DecodeErrorKind::InvalidUtf8, 8));
    // A packed fixed-width field whose length is not a whole number of values (fs = 34, float).
    assert_eq!(e(&[0x92, 0x02, 0x03, 0, 0, 0]).kind, DecodeErrorKind::PackedLength);
    // Too large, checked first; too deep.
    let small = DecodeOptions { max_message_bytes: 2, ..d };
    assert_eq!(err(&t, "All3", &[0x08, 0x01, 0x08], &small, &p).kind, DecodeErrorKind::TooLarge { len: 3, max: 2 });
    let shallow = DecodeOptions { max_depth: 2, ..d };
    let two_deep = [0xf2, 0x01, 0x03, 0xf2, 0x01, 0x00];
    assert_eq!(err(&t, "All3", &two_deep, &shallow, &p).kind, DecodeErrorKind::TooDeep { max: 2 });
    assert!(
        decode(&t, t.class_by_name("All3").unwrap().id, &two_deep, &p, &DecodeOptions { max_depth: 3, ..d }).is_ok()
    );
    // Pool exhaustion: one 64-byte chunk, a 100-byte string.
    let tiny = Pools::new(64, 1);
    let mut big = vec![0x4a, 100];
    big.extend([b'a'; 100]);
    assert_eq!(err(&t, "All3", &big, &d, &tiny).kind, DecodeErrorKind::PoolExhausted(Pool::Host));
}

#[test]
fn accessors_read_the_decoded_tree_and_acc_fields_are_in_device_memory() {
    let t = all2();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let input = std::fs::read(dir.join("all2_full.input.bin")).unwrap();
    let class = t.class_by_name("All2").unwrap().id;
    let pools = Pools::default();
    let m = decode(&t, class, &input, &pools, &DecodeOptions::default()).unwrap();
    let r = m.root();
    assert_eq!(r.get(1), Some(FieldValue::F64(-1.5)));
    assert_eq!(r.get(3), Some(FieldValue::I64(i64::MIN)));
    assert_eq!(r.get(5), Some(FieldValue::I32(-1)));
    assert_eq!(r.get(17), Some(FieldValue::I32(i32::MIN)));
    assert_eq!(r.get_by_name("s"), Some(FieldValue::Str("héllo ✓")));
    assert_eq!(r.get(20), Some(FieldValue::Enum(1)));
    assert_eq!(r.repeated(22).collect::<Vec<_>>(), vec![FieldValue::I32(1), FieldValue::I32(-1), FieldValue::I32(300)]);
    assert_eq!(r.len_of(24), 3);
    // The oneof holds its last member; a group and a map are messages.
    assert_eq!((r.get(29), r.has(28)), (Some(FieldValue::Str("oneof string")), false));
    let Some(FieldValue::Message(g)) = r.get(26) else { panic!("group") };
    assert_eq!(g.get(1), Some(FieldValue::I32(9)));
    assert_eq!(r.len_of(27), 2);
    // Placement: `by` (10), `names` (24) and `inner` (25) carry (tern.acc).
    let Some(FieldValue::Message(inner)) = r.get(25) else { panic!("inner") };
    assert!(inner.in_device());
    assert_eq!(inner.get(1).map(|v| matches!(v, FieldValue::Bytes(b) if b.len() == 5000)), Some(true));
    let s = m.stats();
    assert_eq!((s.device_writes, s.device_bytes), (6, 256 + 3 + 5000 + 8), "by, 3 names, inner's blob and n: {s:?}");
    assert!(s.device_chunks >= 2 && s.host_chunks >= 1, "{s:?}");
    // Defaults of absent fields.
    let empty = decode(&t, class, &[0xa8, 0x01, 0x00], &pools, &DecodeOptions::default()).unwrap();
    let e = empty.root();
    assert_eq!((e.get(9), e.get_or_default(9)), (None, Some(FieldValue::Str("hi"))));
    assert_eq!(e.get_or_default(18), Some(FieldValue::I64(-7)));
    assert_eq!(e.get_or_default(20), Some(FieldValue::Enum(5)));
    assert_eq!(e.get_or_default(2), Some(FieldValue::F32(0.0)));
    assert_eq!(e.get_or_default(25), None);
    drop((m, empty));
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0));
}

/// Every interop fixture, as given and with random bytes changed: the decoder's fast path and
/// its twin, the general path alone, build the same message with the same counts, or fail with
/// the same error (groups, oneofs, maps, closed enums and unknown fields among them).
mod fast_path_twin {
    use super::*;
    use proptest::prelude::*;
    use tern_rpc::decode::decode_general;

    fn cases() -> &'static [(SchemaTable, String, Vec<u8>)] {
        static CASES: std::sync::OnceLock<Vec<(SchemaTable, String, Vec<u8>)>> = std::sync::OnceLock::new();
        CASES.get_or_init(load)
    }

    fn load() -> Vec<(SchemaTable, String, Vec<u8>)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
        let mut out = Vec::new();
        for case in manifest["cases"].as_array().unwrap() {
            let bytes = std::fs::read(dir.join(case["files"]["input"].as_str().unwrap())).unwrap();
            let t = compile_file(&dir.join(case["proto"].as_str().unwrap()), &[]).unwrap();
            out.push((t, case["type"].as_str().unwrap().to_string(), bytes));
        }
        out
    }

    fn agree(t: &SchemaTable, ty: &str, bytes: &[u8], o: DecodeOptions) -> Result<(), TestCaseError> {
        let class = t.class_by_name(ty).unwrap().id;
        let p = Pools::default();
        match (decode(t, class, bytes, &p, &o), decode_general(t, class, bytes, &p, &o)) {
            (Ok(a), Ok(b)) => {
                prop_assert_eq!(tern_rpc::encode::encode(&a), tern_rpc::encode::encode(&b));
                prop_assert_eq!(a.stats(), b.stats());
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "fast {:?} / general {:?}", a.map(|_| ()), b.map(|_| ())),
        }
        Ok(())
    }

    /// A oneof holds the member given last, whichever path read it.
    #[test]
    fn a_oneof_keeps_the_last_member() {
        let t = all3();
        let class = t.class_by_name("All3").unwrap().id;
        let (p, o) = (Pools::default(), DecodeOptions::default());
        // one = 7, then other = "x", then one = 9; and other = "x", then one = 7.
        for (input, one, other) in [
            (&[0xe0, 0x01, 0x07, 0xea, 0x01, 0x01, b'x', 0xe0, 0x01, 0x09][..], Some(FieldValue::U32(9)), None),
            (&[0xe0, 0x01, 0x07, 0xea, 0x01, 0x01, b'x'][..], None, Some(FieldValue::Str("x"))),
            (&[0xea, 0x01, 0x01, b'x', 0xe0, 0x01, 0x07][..], Some(FieldValue::U32(7)), None),
        ] {
            for m in [decode(&t, class, input, &p, &o).unwrap(), decode_general(&t, class, input, &p, &o).unwrap()] {
                assert_eq!((m.root().get(28), m.root().get(29)), (one, other), "{input:02x?}");
            }
        }
    }

    #[test]
    fn on_the_fixtures() {
        for (t, ty, bytes) in cases() {
            agree(t, ty, bytes, DecodeOptions::default()).unwrap();
        }
    }

    /// Groups and messages nested in each other, several deep: the fast path reads them on a
    /// stack of its own, and must come back to each enclosing group or message as it was.
    const NESTED: &str = include_str!("nested.proto");

    /// `G { Outer { a: 1, m { x: 2, m { x: 3 }, H { y: 4, m { H { y: 5 } } } }, Inner { m { x: 6 }, s: "q" },
    /// Inner { s: "r" }, b: 7 }, after { x: 8 }, z: 9 }`, fields in number order.
    fn nested_input() -> Vec<u8> {
        use tern_rpc::schema::WireType;
        use tern_rpc::wire::{put_tag, put_varint};
        fn int(out: &mut Vec<u8>, n: u32, v: u64) {
            put_tag(out, n, WireType::Varint);
            put_varint(out, v);
        }
        fn len(out: &mut Vec<u8>, n: u32, body: &[u8]) {
            put_tag(out, n, WireType::Len);
            put_varint(out, body.len() as u64);
            out.extend_from_slice(body);
        }
        fn group(out: &mut Vec<u8>, n: u32, body: &[u8]) {
            put_tag(out, n, WireType::StartGroup);
            out.extend_from_slice(body);
            put_tag(out, n, WireType::EndGroup);
        }
        let m = |x: u64| {
            let mut b = Vec::new();
            int(&mut b, 1, x);
            b
        };
        let mut h_inner = Vec::new();
        group(&mut h_inner, 3, &{
            let mut b = Vec::new();
            int(&mut b, 1, 5);
            b
        });
        let mut h = Vec::new();
        int(&mut h, 1, 4);
        len(&mut h, 2, &h_inner);
        let mut outer_m = m(2);
        len(&mut outer_m, 2, &m(3));
        group(&mut outer_m, 3, &h);
        let mut outer = Vec::new();
        int(&mut outer, 1, 1);
        len(&mut outer, 2, &outer_m);
        let mut inner1 = Vec::new();
        len(&mut inner1, 1, &m(6));
        len(&mut inner1, 2, b"q");
        group(&mut outer, 3, &inner1);
        let mut inner2 = Vec::new();
        len(&mut inner2, 2, b"r");
        group(&mut outer, 3, &inner2);
        int(&mut outer, 4, 7);
        let mut g = Vec::new();
        group(&mut g, 1, &outer);
        len(&mut g, 2, &m(8));
        int(&mut g, 3, 9);
        g
    }

    #[test]
    fn nested_groups_and_messages_come_back_to_their_parents() {
        let t = tern_rpc::schema::compile_str("nested.proto", NESTED).unwrap();
        let input = nested_input();
        let class = t.class_by_name("G").unwrap().id;
        let (p, o) = (Pools::default(), DecodeOptions::default());
        for m in [decode(&t, class, &input, &p, &o).unwrap(), decode_general(&t, class, &input, &p, &o).unwrap()] {
            assert_eq!(tern_rpc::encode::encode(&m), input);
            let Some(FieldValue::Message(outer)) = m.root().get(1) else { panic!("no Outer") };
            // Read after the nested message and groups it holds.
            assert_eq!((outer.get(1), outer.get(4)), (Some(FieldValue::I32(1)), Some(FieldValue::I32(7))));
            assert_eq!(m.root().get(3), Some(FieldValue::I32(9)));
        }
        agree(&t, "G", &input, o).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// The nested groups and messages with bytes changed, cut short, or a part repeated.
        #[test]
        fn on_changed_nesting(
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
            cut in prop::option::of(any::<prop::sample::Index>()),
            repeat in prop::option::of((any::<prop::sample::Index>(), any::<prop::sample::Index>())),
            temp in 1usize..64,
        ) {
            static T: std::sync::OnceLock<SchemaTable> = std::sync::OnceLock::new();
            let t = T.get_or_init(|| tern_rpc::schema::compile_str("nested.proto", NESTED).unwrap());
            let mut b = nested_input();
            if let Some((from, len)) = repeat {
                let from = from.index(b.len());
                let part = b[from..from + len.index(b.len() - from + 1)].to_vec();
                b.splice(from..from, part);
            }
            for (at, v) in edits {
                let i = at.index(b.len());
                b[i] = v;
            }
            if let Some(cut) = cut {
                b.truncate(cut.index(b.len() + 1));
            }
            agree(t, "G", &b, DecodeOptions { temp_buffer_bytes: temp, ..DecodeOptions::default() })?;
        }

        #[test]
        fn on_changed_fixtures(
            case in 0usize..9,
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
            before in prop::collection::vec(0usize..3, 0..3),
            after in prop::collection::vec(0usize..3, 0..3),
            temp in 1usize..64,
            field_by_field in any::<bool>(),
        ) {
            // Members of All2's and All3's oneof (28 one, 29 other, 31 third), given before and
            // after the fixture's own fields: each replaces the one set before it.
            const MEMBERS: [&[u8]; 3] = [&[0xe0, 0x01, 0x07], &[0xea, 0x01, 0x01, b'x'], &[0xfa, 0x01, 0x02, 0x08, 0x01]];
            let all = cases();
            let (t, ty, bytes) = &all[case % all.len()];
            let mut b = bytes.clone();
            if b.is_empty() {
                b.push(0);
            }
            for (at, v) in edits {
                let i = at.index(b.len());
                b[i] = v;
            }
            if truncate {
                b.truncate(cut.index(b.len() + 1));
            }
            let mut input: Vec<u8> = before.iter().flat_map(|&m| MEMBERS[m].iter().copied()).collect();
            input.extend_from_slice(&b);
            input.extend(after.iter().flat_map(|&m| MEMBERS[m].iter().copied()));
            // A small temp buffer, so that fills (counted in one step for a run of scalars by
            // the fast path, one by one by the general path) happen often.
            let mode = if field_by_field { tern_rpc::decode::WriteMode::FieldByField } else { Default::default() };
            agree(t, ty, &input, DecodeOptions { temp_buffer_bytes: temp, mode, ..DecodeOptions::default() })?;
        }
    }
}

/// Field slots are bounded against the input: empty elements of a wide class (2 input bytes,
/// 40 slots each) are refused past the bound, with chunks back; a wider bound takes them.
#[test]
fn slots_are_bounded_by_the_input() {
    let fields: String = (2..=40).map(|n| format!("int32 f{n} = {n}; ")).collect();
    let t = tern_rpc::schema::compile_str(
        "w.proto",
        &format!("syntax = \"proto3\"; message W {{ repeated W w = 1; {fields}}}"),
    )
    .unwrap();
    let p = Pools::default();
    let class = t.class_by_name("W").unwrap().id;
    let input: Vec<u8> = std::iter::repeat_n([0x0a, 0x00], 10_000).flatten().collect();
    let d = DecodeOptions::default();
    let e = err(&t, "W", &input, &d, &p);
    let max = 64 * input.len();
    assert_eq!(e.kind, DecodeErrorKind::TooManySlots { max });
    // Each element takes 40 slots: the bound stops the one that would pass it.
    let slot = tern_rpc::message::SLOT_BYTES;
    let fit = (max / slot - 40) / 40;
    assert_eq!((e.path.as_str(), e.offset), ("W.w", 2 * fit));
    let wide = DecodeOptions { max_slot_bytes_per_input_byte: 400, ..d };
    let m = decode(&t, class, &input, &p, &wide).unwrap();
    assert_eq!(m.root().len_of(1), 10_000);
}

/// `values()` visits every present value in field order: the same values, in the same order, as
/// reading each declared field with `get` and `repeated`, on every interop fixture.
#[test]
fn values_visits_what_get_and_repeated_read() {
    use tern_rpc::message::MessageRef;
    fn by_fields(m: MessageRef<'_>, out: &mut Vec<String>) {
        for f in &m.class().fields {
            let vals: Vec<FieldValue<'_>> = if f.label == tern_rpc::schema::Label::Repeated {
                m.repeated(f.number).collect()
            } else {
                m.get(f.number).into_iter().collect()
            };
            for v in vals {
                push(f.number, v, out, by_fields);
            }
        }
    }
    fn by_values(m: MessageRef<'_>, out: &mut Vec<String>) {
        for (f, v) in m.values() {
            push(f.number, v, out, by_values);
        }
    }
    fn push(n: u32, v: FieldValue<'_>, out: &mut Vec<String>, walk: fn(MessageRef<'_>, &mut Vec<String>)) {
        match v {
            FieldValue::Message(r) => {
                out.push(format!("{n}: {{"));
                walk(r, out);
                out.push("}".into());
            }
            v => out.push(format!("{n}: {v:?}")),
        }
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let p = Pools::default();
    for case in manifest["cases"].as_array().unwrap() {
        let t = compile_file(&dir.join(case["proto"].as_str().unwrap()), &[]).unwrap();
        let class = t.class_by_name(case["type"].as_str().unwrap()).unwrap().id;
        let bytes = std::fs::read(dir.join(case["files"]["input"].as_str().unwrap())).unwrap();
        let m = decode(&t, class, &bytes, &p, &DecodeOptions::default()).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        by_fields(m.root(), &mut a);
        by_values(m.root(), &mut b);
        assert_eq!(a, b, "{}", case["name"]);
        assert!(!a.is_empty() || case["name"] == "all3_empty", "{}", case["name"]);
    }
}

/// A class wider than the presence mask (64 fields): values past it are found by their slots,
/// in order, and encoded back.
#[test]
fn fields_past_the_presence_mask() {
    let fields: String = (1..=100).map(|n| format!("optional int32 f{n} = {n}; ")).collect();
    let t = tern_rpc::schema::compile_str("w.proto", &format!("syntax = \"proto2\"; message W {{ {fields}}}")).unwrap();
    let class = t.class_by_name("W").unwrap().id;
    // f65 = 3, f1 = 1, f100 = 4, f64 = 2 (out of order on the wire).
    let input = [0x88, 0x04, 0x03, 0x08, 0x01, 0xa0, 0x06, 0x04, 0x80, 0x04, 0x02];
    let pools = Pools::default();
    let m = decode(&t, class, &input, &pools, &DecodeOptions::default()).unwrap();
    let got: Vec<(u32, FieldValue<'_>)> = m.root().values().map(|(f, v)| (f.number, v)).collect();
    let want = [(1, FieldValue::I32(1)), (64, FieldValue::I32(2)), (65, FieldValue::I32(3)), (100, FieldValue::I32(4))];
    assert_eq!(got, want);
    assert_eq!(tern_rpc::encode::encode(&m), [0x08, 0x01, 0x80, 0x04, 0x02, 0x88, 0x04, 0x03, 0xa0, 0x06, 0x04]);
}
