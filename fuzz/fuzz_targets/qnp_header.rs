//! The QNP header parser, and both endpoints fed the same bytes: nothing may panic, and a
//! header that parses must emit back to the same bytes (padding aside).
#![no_main]

use std::net::SocketAddr;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use tern_qnp::apps::probe::Probe;
use tern_qnp::{Client, QnpConfig, Server};
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
    let mut server = Server::new(QnpConfig::default(), &[0, 1, 2], now);
    if let Some(inc) = server.handle_packet(now, peer, data) {
        let _ = Probe::decode_parts(inc.parts.iter());
    }
    let mut client = Client::new(QnpConfig::default(), 1, peer, 0);
    let _ = client.send_req(now, 0, &Probe::default());
    if let Some(r) = client.handle_packet(now, peer, data) {
        let _ = Probe::decode_parts(r.parts.iter());
    }
});
