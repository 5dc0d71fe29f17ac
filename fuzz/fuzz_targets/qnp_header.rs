//! The QNP header parser, and both endpoints fed the same bytes: nothing may panic, and a
//! header that parses must emit back to the same bytes (the `attempt` byte and padding aside).
//!
//! The input is also cut into datagrams (each a length byte, then that many bytes) fed in turn
//! to two servers that share one exactly-once memory, as a multi-worker server's workers do,
//! with request types declared (so the first-packet rule and the repeated-dispatch-field check
//! run), answering what they deliver (so responses are cached and resent for duplicates).
#![no_main]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tern_io::{Batch, Pool};
use tern_qnp::apps::probe::Probe;
use tern_qnp::{Client, ExactlyOnce, QnpConfig, Server};
use tern_wire::qnp::{HEADER_LEN, Packet, Repr};
use tern_wire::tlv::Message;

fuzz_target!(|data: &[u8]| {
    if let Ok(packet) = Packet::new_checked(data)
        && let Ok(repr) = Repr::parse(&packet)
    {
        let mut out = vec![0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..18], &data[..18]);
    }
    let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let now = Instant::now();
    let cfg = QnpConfig { dedup_entries: 8, ..QnpConfig::default() };
    let memory = Arc::new(ExactlyOnce::new(&cfg, 2));
    let mut servers = [
        Server::with_memory(cfg.clone(), &[0, 1, 2], now, memory.clone()),
        Server::with_memory(cfg.clone(), &[0, 1, 2], now, memory),
    ];
    for s in &mut servers {
        s.declare_request_type(1, 0, &[1]);
        s.declare_request_type(1, 1, &[1, 2]);
    }
    let pool = Pool::new(64, 2048);
    let mut batch = Batch::new(32);
    let mut rest = data;
    let mut i = 0u64;
    while let Some((&len, tail)) = rest.split_first() {
        let (dgram, next) = tail.split_at(usize::from(len).min(tail.len()));
        rest = next;
        let at = now + Duration::from_millis(i * 7);
        let s = &mut servers[(i % 2) as usize];
        if let Some(inc) = s.handle_packet(at, peer, dgram) {
            let handle = inc.handle;
            let _ = Probe::decode_parts(inc.parts.iter());
            let _ = s.respond(handle, &Probe::default());
        }
        s.handle_timeout(at);
        s.poll_transmit(&pool, &mut batch);
        drop(batch.drain());
        i += 1;
    }
    let mut client = Client::new(QnpConfig::default(), 1, peer, 0);
    let _ = client.send_req(now, 0, &Probe::default());
    if let Some(r) = client.handle_packet(now, peer, data) {
        let _ = Probe::decode_parts(r.parts.iter());
    }
});
