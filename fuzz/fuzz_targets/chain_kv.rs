//! The KV cache task (`tern_chain::kv`) fed arbitrary messages: the input is cut into messages
//! (a 1-byte length, a byte saying which way it goes, then that many bytes; of the way byte,
//! bit 0: a request (from side 0) or an answer (from side 1); bit 1: an answer from side 0, as
//! a client would forge it; bit 2: another client port; bit 3: another server; bit 4: another client address, the
//! cache remembering two GETs an address). Nothing may panic; what parses writes back to the same
//! bytes; the cache stays within its bounds; a hit answers with a VALUE message of the GET's id
//! and key; a value is kept only from an answer that came from the servers' side.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_chain::kv::{Cache, KvConfig, Msg, Op, Verdict, Way};

fuzz_target!(|data: &[u8]| {
    let cfg = KvConfig { max_bytes: 512, max_entries: 4, max_pending: 4, max_pending_per_client: 2 };
    let mut c = Cache::new(cfg);
    let mut rest = data;
    let mut answer = Vec::new();
    while let [n, w, tail @ ..] = rest {
        let len = usize::from(*n).min(tail.len());
        let (b, more) = tail.split_at(len);
        rest = more;
        if let Ok(m) = Msg::parse(b) {
            assert_eq!(m.to_vec(), b);
        }
        let mut way = Way::CLIENT;
        if w & 4 != 0 {
            way.src.1 += 1;
        }
        if w & 8 != 0 {
            way.dst.1 += 1;
        }
        if w & 16 != 0 {
            way.src.0[3] += 1;
        }
        let kept = c.stats().kept;
        if w & 1 == 0 {
            if c.request(b, way, &mut answer) == Verdict::Answer {
                let (q, a) = (Msg::parse(b).unwrap(), Msg::parse(&answer).unwrap());
                assert_eq!((a.op, a.id, a.key), (Op::Value, q.id, q.key));
            }
        } else {
            let mut back = way.back();
            back.side = 1 - ((w >> 1) & 1);
            c.response(b, back);
            assert!(c.stats().kept == kept || back.side == 1, "a value kept from the clients' side");
        }
        assert!(c.len() <= cfg.max_entries && c.bytes() <= cfg.max_bytes);
    }
});
