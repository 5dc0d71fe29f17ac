//! The IDL front end on arbitrary text: parse errors, never panics; a schema that parses must
//! generate code and give every message a consistent dispatch set.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let source = format!("syntax = \"proto3\";\nimport \"tern/qingniao.proto\";\n{text}");
    for src in [text, source.as_str()] {
        if let Ok(schema) = tern_idl::parse_str("fuzz.proto", src) {
            let code = tern_idl::codegen::generate(&schema);
            assert!(!code.is_empty());
            for m in &schema.messages {
                assert!(m.dispatch_fields().iter().all(|n| m.field(*n).is_some_and(|f| f.dispatch)));
                let msg = tern_idl::dynamic::DynamicMessage::new(m);
                let mut buf = Vec::new();
                msg.encode(&mut buf);
                assert_eq!(buf.len(), msg.encoded_len());
            }
        }
    }
});
