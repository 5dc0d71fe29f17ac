//! Stage 2 of RpcNIC's memory-affinity serializer on arbitrary records, against a decoded
//! message with host and device memory (the interop fixture `all2_full`): an error or bytes,
//! never a panic. Records that stage 1 made, with bytes flipped, the same.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::schema::{SchemaTable, compile_str};
use tern_rpc::serialize::{PreserOptions, preserialize, serialize_records};

static TABLE: OnceLock<(SchemaTable, u32)> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let (t, class) = TABLE.get_or_init(|| {
        let t = compile_str("all2.proto", include_str!("../../crates/tern-rpc/tests/interop/all2.proto")).unwrap();
        let c = t.class_by_name("All2").unwrap().id;
        (t, c)
    });
    let input = include_bytes!("../../crates/tern-rpc/tests/interop/all2_full.input.bin");
    let pools = Pools::default();
    let m = decode(t, *class, input, &pools, &DecodeOptions::default()).unwrap();
    let mut tx = Vec::new();
    let _ = serialize_records(&m, data, &mut tx);
    // Stage 1's records with the fuzzer's bytes written over some of them.
    let mut records = Vec::new();
    preserialize(&m, PreserOptions::default(), &mut records);
    for (i, b) in data.iter().enumerate().take(64) {
        let at = (usize::from(*b) * 131 + i * 7919) % records.len();
        records[at] ^= b.rotate_left(i as u32);
    }
    let _ = serialize_records(&m, &records, &mut tx);
});
