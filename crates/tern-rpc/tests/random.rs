//! Property test over random schemas and messages, against another implementation: random
//! `.proto` files (proto2 or proto3; scalars of every type, strings, bytes, enums, nested and
//! recursive messages; singular, optional and repeated), and random wire bytes for them (fields
//! in any order, repeated scalars packed or not, singular fields given twice, sub-messages split
//! in two). Tern's decode -> encode must write what prost-reflect's decode -> encode writes; with
//! unknown fields mixed in, re-decoding Tern's bytes must give them again.
//!
//! The generator leaves out what the two implementations are known to treat differently, each
//! covered by the Python-made fixtures instead (`tests/interop.rs`): explicit `[packed = ...]`
//! options (prost-reflect 0.16 reads them wrong from protox's descriptors), closed enums' undeclared
//! values (protobuf moves them to the unknown fields; prost-reflect keeps them), the order of
//! unknown fields (protobuf keeps the order they came in; prost-reflect groups them by number),
//! maps (entry order), groups and oneofs.

use proptest::prelude::*;
use prost::Message as _;
use tern_rpc::decode::{DecodeOptions, Pools, decode};
use tern_rpc::encode::encode;
use tern_rpc::wire::{put_varint, zigzag32, zigzag64};

const SCALARS: [&str; 15] = [
    "double", "float", "int64", "uint64", "int32", "fixed64", "fixed32", "bool", "string", "bytes", "uint32",
    "sfixed32", "sfixed64", "sint32", "sint64",
];

#[derive(Debug, Clone)]
struct FieldSpec {
    number: u32,
    /// Index into SCALARS, or 15 = enum E, 16.. = message M(k - 16).
    kind: usize,
    repeated: bool,
    /// proto3 `optional`.
    optional: bool,
}

#[derive(Debug, Clone)]
struct SchemaSpec {
    proto3: bool,
    messages: Vec<Vec<FieldSpec>>,
}

fn schema() -> impl Strategy<Value = SchemaSpec> {
    (any::<bool>(), 1usize..4).prop_flat_map(|(proto3, n)| {
        let field = (0usize..(16 + n), any::<bool>(), any::<bool>());
        let msg = prop::collection::vec(field, 1..8);
        prop::collection::vec(msg, n).prop_map(move |msgs| SchemaSpec {
            proto3,
            messages: msgs
                .into_iter()
                .map(|fs| {
                    fs.into_iter()
                        .enumerate()
                        .map(|(i, (kind, repeated, optional))| FieldSpec {
                            number: [1, 2, 3, 15, 16, 100, 2047, 2048][i],
                            kind,
                            repeated,
                            optional: optional && !repeated,
                        })
                        .collect()
                })
                .collect(),
        })
    })
}

fn proto_text(s: &SchemaSpec) -> String {
    let mut out = format!("syntax = \"{}\";\npackage r;\n", if s.proto3 { "proto3" } else { "proto2" });
    out.push_str("enum E { E0 = 0; E1 = 1; E7 = 7; }\n");
    for (i, fs) in s.messages.iter().enumerate() {
        out.push_str(&format!("message M{i} {{\n"));
        for f in fs {
            let ty = match f.kind {
                k if k < 15 => SCALARS[k].to_string(),
                15 => "E".to_string(),
                k => format!("M{}", k - 16),
            };
            let label = match (s.proto3, f.repeated, f.optional) {
                (_, true, _) => "repeated ",
                (true, false, true) => "optional ",
                (true, false, false) => "",
                (false, false, _) => "optional ",
            };
            out.push_str(&format!("  {label}{ty} f{} = {};\n", f.number, f.number));
        }
        out.push_str("}\n");
    }
    out
}

/// Random wire bytes for message `m` of `s` (depth-bounded), from a seed-driven stream.
struct Gen<'a> {
    s: &'a SchemaSpec,
    rnd: &'a [u8],
    at: usize,
    unknown: bool,
}

impl Gen<'_> {
    fn next(&mut self) -> u8 {
        let b = self.rnd.get(self.at % self.rnd.len().max(1)).copied().unwrap_or(0);
        self.at += 1;
        b.wrapping_add((self.at as u8).wrapping_mul(31))
    }
    fn u64(&mut self) -> u64 {
        let mut v = 0u64;
        for _ in 0..8 {
            v = (v << 8) | u64::from(self.next());
        }
        // Small values often, so that zero and one-byte varints occur.
        match self.next() % 4 {
            0 => v % 3,
            1 => v % 300,
            _ => v,
        }
    }

    fn scalar(&mut self, kind: usize, out: &mut Vec<u8>, tagged: Option<u32>) {
        // (wire type, value writer)
        let v = self.u64();
        let wire = match kind {
            0 | 5 | 12 => 1,
            1 | 6 | 11 => 5,
            8 | 9 => 2,
            _ => 0,
        };
        if let Some(n) = tagged {
            put_varint(out, u64::from(n) << 3 | wire);
        }
        match kind {
            0 | 5 | 12 => out.extend_from_slice(&v.to_le_bytes()),
            1 | 6 | 11 => out.extend_from_slice(&(v as u32).to_le_bytes()),
            7 => put_varint(out, v % 2),
            4 => put_varint(out, v as i32 as i64 as u64),
            10 => put_varint(out, u64::from(v as u32)),
            13 => put_varint(out, u64::from(zigzag32(v as i32))),
            14 => put_varint(out, zigzag64(v as i64)),
            15 => put_varint(out, [0u64, 1, 7][(v % 3) as usize]),
            8 | 9 => {
                let len = (v % 12) as usize;
                let body: Vec<u8> = (0..len).map(|i| b"aZ9 \xc3\xa9"[i % 4]).collect();
                put_varint(out, len as u64);
                out.extend_from_slice(&body);
            }
            _ => put_varint(out, v),
        }
    }

    fn message(&mut self, m: usize, depth: u32) -> Vec<u8> {
        let mut out = Vec::new();
        let fields = self.s.messages[m].clone();
        let count = usize::from(self.next() % 8);
        for _ in 0..count {
            if self.unknown && self.next().is_multiple_of(9) {
                // An unknown field (numbers the schemas never use).
                let n = 3000 + u32::from(self.next() % 5);
                let k = [2usize, 1, 8][usize::from(self.next() % 3)];
                self.scalar(k, &mut out, Some(n));
                continue;
            }
            let f = &fields[usize::from(self.next()) % fields.len()];
            if f.kind >= 16 {
                if depth >= 4 {
                    continue;
                }
                let body = self.message(f.kind - 16, depth + 1);
                put_varint(&mut out, u64::from(f.number) << 3 | 2);
                put_varint(&mut out, body.len() as u64);
                out.extend_from_slice(&body);
                continue;
            }
            let packable = !matches!(f.kind, 8 | 9);
            if f.repeated && packable && self.next().is_multiple_of(2) {
                let mut body = Vec::new();
                for _ in 0..(self.next() % 4) {
                    self.scalar(f.kind, &mut body, None);
                }
                put_varint(&mut out, u64::from(f.number) << 3 | 2);
                put_varint(&mut out, body.len() as u64);
                out.extend_from_slice(&body);
            } else {
                self.scalar(f.kind, &mut out, Some(f.number));
            }
        }
        out
    }
}

/// The descriptor set protox makes of `text` (through a file: protox's API takes paths).
fn prost_compile(text: &str) -> prost_types::FileDescriptorSet {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tern-rpc-random-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("r.proto"), text).unwrap();
    let fds = protox::compile([dir.join("r.proto")], [&dir]).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    fds
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn tern_and_prost_reflect_write_the_same_bytes(spec in schema(), rnd in prop::collection::vec(any::<u8>(), 1..64)) {
        let text = proto_text(&spec);
        let table = tern_rpc::schema::compile_str("r.proto", &text).unwrap();
        let fds = prost_compile(&text);
        let pool = prost_reflect::DescriptorPool::from_file_descriptor_set(fds).unwrap();
        let bytes = Gen { s: &spec, rnd: &rnd, at: 0, unknown: false }.message(0, 0);
        let class = table.class_by_name("r.M0").unwrap().id;
        let pools = Pools::default();
        let ours = encode(&decode(&table, class, &bytes, &pools, &DecodeOptions::default()).unwrap());
        let desc = pool.get_message_by_name("r.M0").unwrap();
        let theirs = prost_reflect::DynamicMessage::decode(desc, bytes.as_slice()).unwrap().encode_to_vec();
        prop_assert_eq!(&ours, &theirs, "schema:\n{}\ninput {:02x?}", text, bytes);
        let with_unknown = Gen { s: &spec, rnd: &rnd, at: 0, unknown: true }.message(0, 0);
        let once = encode(&decode(&table, class, &with_unknown, &pools, &DecodeOptions::default()).unwrap());
        let again = encode(&decode(&table, class, &once, &pools, &DecodeOptions::default()).unwrap());
        prop_assert_eq!(again, once);
    }
}
