//! RpcNIC's deserializer on arbitrary bytes, against the interop schemas (every type and label of
//! proto2 and proto3) and groups and messages nested in each other (`tests/nested.proto`): a
//! `DecodeError` or a message, never a panic, and every chunk back in its pool afterwards. A message decoded in either write mode encodes to the same bytes, and those
//! bytes decode and encode to themselves (decode -> encode -> decode equal); alias mode builds
//! what copy mode builds; the fast path and the general path alone (`decode_general`) build the
//! same message with the same counts, or fail with the same error.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tern_rpc::decode::{DecodeOptions, Pools, WriteMode, decode, decode_alias, decode_general};
use tern_rpc::encode::encode;
use tern_rpc::schema::{SchemaTable, compile_str};

static TABLES: OnceLock<Vec<(SchemaTable, u32)>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let tables = TABLES.get_or_init(|| {
        [
            ("all2.proto", include_str!("../../crates/tern-rpc/tests/interop/all2.proto"), "All2"),
            ("all3.proto", include_str!("../../crates/tern-rpc/tests/interop/all3.proto"), "All3"),
            ("nested.proto", include_str!("../../crates/tern-rpc/tests/nested.proto"), "G"),
        ]
        .into_iter()
        .map(|(name, src, ty)| {
            let t = compile_str(name, src).unwrap();
            let c = t.class_by_name(ty).unwrap().id;
            (t, c)
        })
        .collect()
    });
    let Some((&pick, input)) = data.split_first() else { return };
    let (t, class) = &tables[usize::from(pick % 3)];
    // Small pools and limits, so exhaustion and depth are reached too.
    let pools = Pools::new(256, 64);
    // The first byte's high bits pick the temp buffer: the default, or a small one that fills
    // often (the fast path counts a run of scalars in one step; the general path one by one).
    let temp = if pick >= 0x80 { 4096 } else { 1 + usize::from(pick >> 1) };
    let opts = DecodeOptions { max_depth: 16, temp_buffer_bytes: temp, ..DecodeOptions::default() };
    let fbf = DecodeOptions { mode: WriteMode::FieldByField, ..opts };
    // One decode at a time: each gives its chunks back before the next takes any.
    let fast = decode(t, *class, input, &pools, &opts).map(|m| (encode(&m), m.stats()));
    let general = decode_general(t, *class, input, &pools, &opts).map(|m| (encode(&m), m.stats()));
    assert_eq!(fast, general, "the fast path and the general path disagree");
    let one = decode(t, *class, input, &pools, &opts).map(|m| encode(&m));
    let each = decode(t, *class, input, &pools, &fbf).map(|m| encode(&m));
    // Alias mode (host values borrow the input) builds the same message.
    let alias = decode_alias(t, *class, input, &pools, &opts).map(|m| encode(&m));
    // (Both succeed, or only copy mode ran out of host chunks, which alias mode does not take.)
    if let (Ok(a), Ok(c)) = (&alias, &one) {
        assert_eq!(a, c, "alias and copy modes disagree");
    }
    match (one, each) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "the write modes encode differently");
            // Pool exhaustion may differ once the canonical form is smaller or larger; skip then.
            if let Ok(again) = decode(t, *class, &a, &pools, &opts) {
                assert_eq!(encode(&again), a, "decode -> encode is not stable");
            }
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("the write modes disagree: {:?} / {:?}", a.map(|v| v.len()), b.map(|v| v.len())),
    }
    assert_eq!((pools.host.outstanding(), pools.device.outstanding()), (0, 0));
});
