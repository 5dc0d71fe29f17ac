//! RpcNIC's schema compiler on arbitrary text (bare, and after a proto2 and a proto3 header
//! importing `tern/rpcnic.proto`): errors, never panics; a table that compiles is consistent
//! (fields by ascending number, each found by its number, sub-classes and enums in range) and
//! checks against the U280's table without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_rpc::schema::Kind;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let p2 = format!("syntax = \"proto2\";\nimport \"tern/rpcnic.proto\";\n{text}");
    let p3 = format!("syntax = \"proto3\";\nimport \"tern/rpcnic.proto\";\n{text}");
    let u280 = tern_hw::Profile::builtin("rpcnic-u280").unwrap();
    for src in [text, p2.as_str(), p3.as_str()] {
        let Ok(t) = tern_rpc::schema::compile_str("fuzz.proto", src) else { continue };
        for c in &t.classes {
            assert!(c.fields.windows(2).all(|w| w[0].number < w[1].number));
            for f in &c.fields {
                assert_eq!(c.field(f.number).map(|g| g.number), Some(f.number));
                match f.kind {
                    Kind::Message(s) | Kind::Group(s) => assert!((s as usize) < t.classes.len()),
                    Kind::Enum(e) => assert!((e as usize) < t.enums.len()),
                    _ => {}
                }
            }
            let _ = t.depth(c.id);
        }
        let _ = tern_rpc::check::report(&t, &u280);
    }
});
