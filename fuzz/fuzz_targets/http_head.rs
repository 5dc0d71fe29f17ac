//! The HTTP endpoint's request heads (`tern_io::http::parse_head`), as a connection meets them:
//! heads and bodies one after another in one buffer (pipelined). Nothing may panic; a head that
//! parses lies within the buffer and the bounds (its bytes at most `MAX_HEAD_BYTES`, its body at
//! most `MAX_BODY_BYTES`) and parses the same from its own bytes; a refusal is one of the
//! documented statuses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_io::http::{MAX_BODY_BYTES, MAX_HEAD_BYTES, parse_head};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    for _ in 0..16 {
        match parse_head(rest) {
            Ok(Some(h)) => {
                assert!(h.len <= rest.len() && h.len <= MAX_HEAD_BYTES, "{h:?}");
                assert!(h.body <= MAX_BODY_BYTES, "{h:?}");
                assert_eq!(parse_head(&rest[..h.len]).ok().flatten().as_ref(), Some(&h));
                let end = h.len.saturating_add(h.body);
                if end > rest.len() {
                    return;
                }
                rest = &rest[end..];
            }
            Ok(None) => return,
            Err(r) => {
                assert!(matches!(r.status, 400 | 413 | 417 | 431 | 501), "{r:?}");
                return;
            }
        }
    }
});
