//! The AES-GCM nonce ledger's text (`tern_chain::aes::ledger::parse`, docs/chain.md, "AES-GCM")
//! from arbitrary bytes: nothing may panic; a text that parses holds each key once, each number
//! at most 2^32, and renders back to a text that parses to the same entries.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_chain::aes::ledger::{NUMBERS, parse, render};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(entries) = parse(text) {
        let ids: std::collections::HashSet<_> = entries.iter().map(|(k, _)| *k).collect();
        assert_eq!(ids.len(), entries.len(), "a key twice");
        assert!(entries.iter().all(|&(_, n)| n <= NUMBERS));
        assert_eq!(parse(&render(&entries)), Ok(entries));
    }
});
