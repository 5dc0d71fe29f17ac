//! Any text as an RPC service configuration (`tern_rpc::service::Service::parse`, the files it
//! names found beside it in examples/rpc, as the examples' `proto = "image.proto"` names one):
//! nothing may panic or read without end (a device named as a file is refused); a refusal names
//! the file; an accepted service's pools are made and each sample decodes or is refused by name.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tern_rpc::service::Service;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/rpc/fuzz.toml"));
    match Service::parse(text, path) {
        Err(e) => assert!(e.to_string().contains("fuzz.toml"), "a refusal names the file: {e}"),
        Ok(s) => {
            let _ = s.pools();
            let _ = s.unit_count();
        }
    }
});
