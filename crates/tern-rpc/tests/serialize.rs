//! The memory-affinity serializer (stage 1 records on the host, stage 2 encoding on the device),
//! the CPU-only encoder and the NIC-only serializer write the same bytes, on every interop
//! fixture (where `(tern.acc)` puts values and a sub-message in device memory) and every staged
//! workload message; stage 1 copies small host values, references large and device ones; stage 2
//! refuses malformed records.

use std::path::{Path, PathBuf};

use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::encode::encode;
use tern_rpc::schema::compile_file;
use tern_rpc::serialize::{PreserOptions, RecordError, nic_only, preserialize, serialize_records};

fn check(
    t: &tern_rpc::schema::SchemaTable,
    class: u32,
    input: &[u8],
    what: &str,
) -> (tern_rpc::serialize::PreserStats, tern_rpc::serialize::DeviceStats) {
    let pools = Pools::default();
    let m = decode(t, class, input, &pools, &DecodeOptions::default()).unwrap();
    let cpu = encode(&m);
    let mut records = Vec::new();
    let pre = preserialize(&m, PreserOptions::default(), &mut records);
    let mut tx = Vec::new();
    let dev = serialize_records(&m, &records, &mut tx).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(tx == cpu, "{what}: memory-affinity differs from cpu-only ({} vs {} bytes)", tx.len(), cpu.len());
    let mut nic = Vec::new();
    let n = nic_only(&m, &mut nic);
    assert!(nic == cpu, "{what}: nic-only differs");
    assert_eq!((dev.tx_bytes, n.tx_bytes), (cpu.len() as u64, cpu.len() as u64));
    // NIC-only reads host memory at least once per host node: never fewer trips than stage 2's.
    assert!(n.host_reads >= dev.host_reads || cpu.is_empty(), "{what}: {n:?} vs {dev:?}");
    (pre, dev)
}

fn interop() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop")
}

#[test]
fn three_serializers_one_output_on_the_fixtures() {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(interop().join("manifest.json")).unwrap()).unwrap();
    for case in manifest["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let t = compile_file(&interop().join(case["proto"].as_str().unwrap()), &[]).unwrap();
        let class = t.class_by_name(case["type"].as_str().unwrap()).unwrap().id;
        let input = std::fs::read(interop().join(case["files"]["input"].as_str().unwrap())).unwrap();
        let (pre, dev) = check(&t, class, &input, name);
        if name == "all2_full" {
            // Device-resident: `by` (256 B), the 3 `names` and the `inner` sub-message (its 5000 B
            // blob and n), each referenced, never copied; host values are copied.
            assert!(pre.device_refs >= 5, "{pre:?}");
            assert!(dev.device_read_bytes >= 256 + 3 + 5000, "{dev:?}");
            assert!(pre.copied_bytes > 0);
        }
    }
}

#[test]
fn three_serializers_one_output_on_the_workloads() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    let mut refs = 0;
    for b in [0, 1, 3, 4] {
        let dir = shared.join(format!("hyperprotobench/bench{b}"));
        let t = compile_file(&dir.join("benchmark.proto"), &[]).unwrap();
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
        for m in manifest["messages"].as_array().unwrap() {
            let ty = m["type"].as_str().unwrap();
            let bytes = std::fs::read(dir.join(m["file"].as_str().unwrap())).unwrap();
            let (pre, _) = check(&t, t.class_by_name(ty).unwrap().id, &bytes, ty);
            refs += pre.host_ref_bytes;
        }
    }
    // HyperProtoBench's large strings are left for the device to read.
    assert!(refs > 1_000_000, "{refs}");
}

#[test]
fn stage_two_refuses_malformed_records() {
    let t = compile_file(&interop().join("all3.proto"), &[]).unwrap();
    let class = t.class_by_name("All3").unwrap().id;
    let pools = Pools::default();
    let m = decode(
        &t,
        class,
        &std::fs::read(interop().join("all3_full.input.bin")).unwrap(),
        &pools,
        &DecodeOptions::default(),
    )
    .unwrap();
    let mut records = Vec::new();
    preserialize(&m, PreserOptions::default(), &mut records);
    let mut tx = Vec::new();
    // Cut anywhere inside the last record: cut short (or, inside a begin, unbalanced).
    for cut in 1..8 {
        let e = serialize_records(&m, &records[..records.len() - cut], &mut tx).unwrap_err();
        assert!(matches!(e, RecordError::Truncated(_) | RecordError::Unbalanced(_)), "{e}");
    }
    assert_eq!(serialize_records(&m, &[0x77], &mut tx).unwrap_err(), RecordError::UnknownOp(0, 0x77));
    assert_eq!(serialize_records(&m, &[0x07], &mut tx).unwrap_err(), RecordError::Unbalanced(0));
    assert_eq!(serialize_records(&m, &[0x06, 0x0a, 0, 0, 0], &mut tx).unwrap_err(), RecordError::Unbalanced(5));
    // A reference past the message's memory; a device message that is not one.
    let mut bad = vec![0x05, 0x0a, 0, 0, 0, 0];
    bad.extend(99u32.to_le_bytes());
    bad.extend(0u32.to_le_bytes());
    bad.extend(4u32.to_le_bytes());
    assert_eq!(serialize_records(&m, &bad, &mut tx).unwrap_err(), RecordError::BadRef(0));
    let mut dm = vec![0x0e, 0x0a, 0, 0, 0];
    dm.extend(0u32.to_le_bytes());
    assert_eq!(serialize_records(&m, &dm, &mut tx).unwrap_err(), RecordError::BadRef(0));
}

/// The NIC-only walk reads what the message holds: a oneof member replaced by another (its
/// sub-message dropped from the message) is not read.
#[test]
fn nic_only_reads_only_what_the_message_reaches() {
    let t = compile_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/all3.proto"), &[]).unwrap();
    let class = t.class_by_name("All3").unwrap().id;
    let pools = Pools::default();
    let stats = |input: &[u8]| {
        let m = decode(&t, class, input, &pools, &DecodeOptions::default()).unwrap();
        nic_only(&m, &mut Vec::new())
    };
    // third = Leaf { name: "abcdef" }, then one = 7; and one = 7 alone.
    let replaced = stats(&[0xfa, 0x01, 0x08, 0x0a, 0x06, b'a', b'b', b'c', b'd', b'e', b'f', 0xe0, 0x01, 0x07]);
    assert_eq!(replaced, stats(&[0xe0, 0x01, 0x07]));
}
