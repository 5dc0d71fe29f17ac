//! RpcNIC's RPC endpoint (`tern-endpoint`) fed arbitrary datagrams: the input is cut into
//! datagrams (each a 2-byte big-endian length, then that many bytes) sent to an `RpcServer`,
//! which receives after each one and replies to every call it delivers (as a service would, by
//! method), a call's body echoed (a long one, over the reply's capacity, is sent in parts).
//! Nothing may panic; every call delivered carries at most `MAX_MESSAGE` bytes and none of the
//! endpoint's own flags; the server never holds more than `HELD_LIMIT` bytes of parts.
//!
//! (Not asserted: that a call is delivered once. Arbitrary datagrams from one address include
//! ack floors that jump back and forth, which QNP takes as a new client on that address
//! (docs/qnp.md §5, §7): a client can make its own request run again that way, as it can by
//! sending it under a new id. Exactly-once under network loss, duplication and reordering is
//! `tern-endpoint`'s test.)
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tern_endpoint::{ENDPOINT_FLAGS, HELD_LIMIT, MAX_MESSAGE, RpcServer, Status};
use tern_io::{Batch, Pool, Port, mem};
use tern_qnp::QnpConfig;

fuzz_target!(|data: &[u8]| {
    let pool = Pool::new(256, 2048);
    let (mut raw, port) = mem::pair(&pool, 256);
    let addr = port.local_addr();
    // Two packets a request: bodies of a few KB already go in parts.
    let cfg = QnpConfig { max_pkts_per_request: 2, ..QnpConfig::default() };
    let mut server = RpcServer::new(port, &pool, cfg.clone());
    let (mut rest, mut calls) = (data, Vec::new());
    let mut batch = Batch::new(4);
    while let [hi, lo, tail @ ..] = rest {
        let n = (usize::from(*hi) << 8 | usize::from(*lo)).min(tail.len()).min(2000);
        let mut p = pool.packet();
        let _ = p.extend_from_slice(&tail[..n]);
        p.set_peer(addr);
        batch.push(p);
        let _ = raw.send(Instant::now(), &mut batch);
        batch.recycle(&pool);
        rest = &tail[n..];
        calls.clear();
        server.recv(&mut calls, Duration::ZERO).unwrap();
        for c in calls.drain(..) {
            assert!(c.body.len() <= MAX_MESSAGE);
            assert_eq!(c.header.flags & ENDPOINT_FLAGS, 0);
            let status = if c.header.method == 1 { Status::Ok } else { Status::UnknownMethod };
            // Echoed twice over: past one reply's capacity when the call was long.
            let body = [&c.body[..], &c.body[..]].concat();
            let _ = server.reply(c.handle, c.header.request_id, status, "", &body);
        }
        assert!(server.held_bytes() <= HELD_LIMIT);
        let _ = server.flush();
        // What the server sent back is drained and dropped.
        let _ = raw.recv(Instant::now(), &mut batch);
        batch.recycle(&pool);
    }
});
