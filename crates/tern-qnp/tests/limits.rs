//! Limits come from the profile: under `cpu` a request may have 255 packets; under
//! `qingniao-u250`, 4, and more is refused at both ends.

use std::net::SocketAddr;
use std::time::Instant;

use tern_hw::Profile;
use tern_io::{Batch, Pool};
use tern_qnp::apps::pingpong::Ping;
use tern_qnp::{Client, DropReason, QnpConfig, ReqError, SegmentError, Server};
use tern_wire::tlv::Message;

/// Sends one Ping of `bytes` from a client configured by `client_cfg` to a server configured by
/// `server_cfg`; returns whether the server delivered it, and the server.
fn one_request(client_cfg: QnpConfig, server_cfg: QnpConfig, bytes: usize) -> (bool, Server) {
    let pool = Pool::new(1024, 2048);
    let now = Instant::now();
    let addr: SocketAddr = "10.0.0.1:7000".parse().unwrap();
    let peer: SocketAddr = "10.0.0.2:5000".parse().unwrap();
    let mut client = Client::new(client_cfg, 1, addr, 1);
    let mut server = Server::new(server_cfg, &[1], now);
    client.send_req(now, 0, &Ping { seq: 1, payload: vec![0xab; bytes] }).unwrap();
    let mut delivered = None;
    loop {
        let mut batch = Batch::new(32);
        if client.poll_transmit(&pool, &mut batch) == 0 {
            break;
        }
        for p in batch.drain() {
            if let Some(inc) = server.handle_packet(now, peer, p.data()) {
                delivered = Some(Ping::decode_parts(inc.parts.iter()).unwrap().payload.len());
            }
        }
    }
    (delivered == Some(bytes), server)
}

#[test]
fn cpu_takes_requests_of_255_packets() {
    let cfg = QnpConfig::for_profile(&Profile::builtin("cpu").unwrap());
    assert_eq!(cfg.max_pkts_per_request, 255);
    // Packet 0 holds the seq record (11 bytes) and a 3-byte record header, the others a 3-byte
    // header each: this payload fills exactly 255 packets.
    let c = cfg.payload_capacity();
    // (less a margin for the record headers every 65535 bytes of a long value adds).
    let bytes = (c - 14) + 254 * (c - 3) - 64;
    let mut seg = tern_qnp::Segmented::default();
    let msg = Ping { seq: 1, payload: vec![0; bytes] };
    tern_qnp::segment_message(&msg, c, 255, &mut Vec::new(), &mut seg).unwrap();
    assert_eq!(seg.packets(), 255);
    let (ok, server) = one_request(cfg.clone(), cfg.clone(), bytes);
    assert!(ok, "a 255-packet request is delivered whole: {:?}", server.stats().drop_counts());
    // One more packet's worth is refused by the sender.
    let mut c = Client::new(cfg.clone(), 1, "10.0.0.1:7000".parse().unwrap(), 1);
    let err = c.send_req(Instant::now(), 0, &Ping { seq: 1, payload: vec![0; 256 * 1450] }).unwrap_err();
    assert!(matches!(err, ReqError::Segment(SegmentError::TooManyPackets { .. })), "{err}");
}

#[test]
fn qingniao_u250_takes_four() {
    let u250 = QnpConfig::for_profile(&Profile::builtin("qingniao-u250").unwrap());
    assert_eq!((u250.max_pkts_per_request, u250.request_table_entries), (4, 1024));
    let (ok, _) = one_request(u250.clone(), u250.clone(), 4 * 1400);
    assert!(ok);
    // A client allowed more sends 5 packets; the u250 server refuses them by name.
    let cpu = QnpConfig::default();
    let (ok, server) = one_request(cpu, u250, 5 * 1400);
    assert!(!ok);
    assert_eq!(server.stats().drops_of(DropReason::TooManyPackets), 5);
}
