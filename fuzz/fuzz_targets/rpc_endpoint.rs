//! RpcNIC's RPC endpoint (`tern-endpoint`) fed arbitrary datagrams: the input is cut into
//! datagrams (each a 2-byte big-endian length, then that many bytes) sent to an `RpcServer`,
//! which receives after each one and replies to every call it delivers (as a service would, by
//! method). Nothing may panic; every call delivered carries at most `max_body` bytes.
//!
//! (Not asserted: that a call is delivered once. Arbitrary datagrams from one address include
//! ack floors that jump back and forth, which QNP takes as a new client on that address
//! (docs/qnp.md §5, §7): a client can make its own request run again that way, as it can by
//! sending it under a new id. Exactly-once under network loss, duplication and reordering is
//! `tern-endpoint`'s test.)
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tern_endpoint::{RpcServer, Status, max_body};
use tern_io::{Batch, Pool, Port, mem};
use tern_qnp::QnpConfig;

fuzz_target!(|data: &[u8]| {
    let pool = Pool::new(256, 2048);
    let (mut raw, port) = mem::pair(&pool, 256);
    let addr = port.local_addr();
    let cfg = QnpConfig::default();
    let mut server = RpcServer::new(port, &pool, cfg.clone());
    let (mut rest, mut calls) = (data, Vec::new());
    let mut batch = Batch::new(4);
    while let [hi, lo, tail @ ..] = rest {
        let n = (usize::from(*hi) << 8 | usize::from(*lo)).min(tail.len()).min(2000);
        let mut p = pool.packet();
        let _ = p.extend_from_slice(&tail[..n]);
        p.peer = addr;
        batch.push(p);
        let _ = raw.send(Instant::now(), &mut batch);
        batch.recycle(&pool);
        rest = &tail[n..];
        calls.clear();
        server.recv(&mut calls, Duration::ZERO).unwrap();
        for c in calls.drain(..) {
            assert!(c.body.len() <= max_body(&cfg));
            let status = if c.header.method == 1 { Status::Ok } else { Status::UnknownMethod };
            let _ = server.reply(c.handle, c.header.request_id, status, "", &c.body);
        }
        let _ = server.flush();
        // What the server sent back is drained and dropped.
        let _ = raw.recv(Instant::now(), &mut batch);
        batch.recycle(&pool);
    }
});
