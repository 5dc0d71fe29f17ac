//! The HTTP endpoint's requests (`tern_io::http::parse_head`, and `Chunked` for a chunked
//! body), as a connection meets them: heads and bodies one after another in one buffer
//! (pipelined). Nothing may panic; a head that parses lies within the buffer and the bounds (its
//! bytes at most `MAX_HEAD_BYTES`, its body at most `MAX_BODY_BYTES`) and parses the same from
//! its own bytes; a chunked body decodes to at most `MAX_BODY_BYTES` and takes no more than its
//! bytes; a refusal is one of the documented statuses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_io::http::{Chunked, MAX_BODY_BYTES, MAX_HEAD_BYTES, parse_head};

fuzz_target!(|data: &[u8]| {
    let mut rest = data.to_vec();
    for _ in 0..16 {
        match parse_head(&rest) {
            Ok(Some(h)) => {
                assert!(h.len <= rest.len() && h.len <= MAX_HEAD_BYTES, "{h:?}");
                assert!(h.body <= MAX_BODY_BYTES, "{h:?}");
                assert!(!h.chunked || h.body == 0, "{h:?}");
                assert_eq!(parse_head(&rest[..h.len]).ok().flatten().as_ref(), Some(&h));
                rest.drain(..h.len);
                if h.chunked {
                    let (mut body, before) = (Chunked::default(), rest.len());
                    match body.take(&mut rest) {
                        Ok(true) => {
                            assert!(body.body().len() <= MAX_BODY_BYTES);
                            assert!(before - rest.len() >= body.body().len());
                        }
                        Ok(false) => return,
                        Err(r) => {
                            assert!(matches!(r.status, 400 | 413 | 431), "{r:?}");
                            return;
                        }
                    }
                } else {
                    if h.body > rest.len() {
                        return;
                    }
                    rest.drain(..h.body);
                }
            }
            Ok(None) => return,
            Err(r) => {
                assert!(matches!(r.status, 400 | 413 | 417 | 431 | 501), "{r:?}");
                return;
            }
        }
    }
});
