//! The KV cache task (`tern_chain::kv`) fed arbitrary messages: the input is cut into messages
//! (a 1-byte length, then that many bytes; the low bit of the length says which way it goes).
//! Nothing may panic; what parses writes back to the same bytes; the cache stays within its
//! bounds; a hit answers with a VALUE message of the GET's id and key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_chain::kv::{Cache, KvConfig, Msg, Op, Verdict};

fuzz_target!(|data: &[u8]| {
    let cfg = KvConfig { max_bytes: 512, max_entries: 4, max_pending: 4 };
    let mut c = Cache::new(cfg);
    let mut rest = data;
    let mut answer = Vec::new();
    while let [n, tail @ ..] = rest {
        let len = usize::from(*n >> 1).min(tail.len());
        let (b, more) = tail.split_at(len);
        rest = more;
        if let Ok(m) = Msg::parse(b) {
            assert_eq!(m.to_vec(), b);
        }
        if n & 1 == 0 {
            if c.on_request_answer(b, &mut answer) == Verdict::Answer {
                let (q, a) = (Msg::parse(b).unwrap(), Msg::parse(&answer).unwrap());
                assert_eq!((a.op, a.id, a.key), (Op::Value, q.id, q.key));
            }
        } else {
            c.on_response(b);
        }
        assert!(c.len() <= cfg.max_entries && c.bytes() <= cfg.max_bytes);
    }
});
