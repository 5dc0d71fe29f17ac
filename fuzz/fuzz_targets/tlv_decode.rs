//! The TLV decoder: generated and dynamic codecs on arbitrary bytes, split at an arbitrary
//! point into two packet payloads. Neither may panic, they must agree on success, and a
//! decoded message must re-encode and decode to itself.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tern_qnp::apps::probe::Probe;
use tern_idl::dynamic::DynamicMessage;
use tern_wire::tlv::{Message, Reader};

static SCHEMA: OnceLock<tern_idl::Schema> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let schema = SCHEMA.get_or_init(|| {
        tern_idl::parse_str("probe.proto", include_str!("../../crates/tern-qnp/proto/probe.proto")).unwrap()
    });
    let m = schema.message("Probe").unwrap();
    for r in Reader::new(data) {
        let _ = r;
    }
    let cut = data.first().map_or(0, |b| usize::from(*b)).min(data.len());
    let parts = [&data[..cut], &data[cut..]];
    let generated = Probe::decode_parts(parts);
    let dynamic = DynamicMessage::decode_parts(m, parts);
    assert_eq!(generated.is_ok(), dynamic.is_ok());
    if let Ok(msg) = generated {
        let mut buf = Vec::new();
        msg.encode(&mut buf);
        let again = Probe::decode(&buf).unwrap();
        // NaN floats are the one value that is not equal to itself.
        if msg.f == msg.f && msg.d == msg.d {
            assert_eq!(again, msg);
        }
    }
});
