//! Property tests: encode → segment → shuffle → reassemble → decode is the identity; the
//! generated codec matches the dynamic (reference) codec byte for byte; random bytes from the
//! network never panic an endpoint; a flood of first packets keeps the request table bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tern_idl::dynamic::{DynamicMessage, Value};
use tern_io::{Batch, Pool};
use tern_qnp::apps::probe::Probe;
use tern_qnp::{Client, DropReason, QnpConfig, Server};
use tern_wire::qnp::{Flags, HEADER_LEN, Packet, Repr};
use tern_wire::tlv::Message;

fn probe_strategy() -> impl Strategy<Value = Probe> {
    (
        "[a-z/]{0,40}",
        any::<u32>(),
        (any::<i32>(), any::<i64>(), any::<u64>(), any::<bool>()),
        (-1e6f32..1e6, -1e9f64..1e9),
        prop::collection::vec(any::<u8>(), 0..4000),
        "\\PC{0,300}",
    )
        .prop_map(|(path, tenant, (a, b, c, flag), (f, d), body, note)| Probe {
            path,
            tenant,
            a,
            b,
            c,
            flag,
            f,
            d,
            body,
            note,
        })
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn schema() -> tern_idl::Schema {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("proto/probe.proto");
    tern_idl::parse_file(&path).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn segment_shuffle_reassemble_is_identity(msg in probe_strategy(), order in any::<u64>()) {
        let pool = Pool::new(64, 2048);
        let server_addr = addr("127.0.0.1:2");
        let client_addr = addr("127.0.0.1:1");
        let cfg = QnpConfig::default();
        let mut client = Client::new(cfg.clone(), 1, server_addr, 100);
        let mut server = Server::new(cfg.clone(), &[1], Instant::now());
        let now = Instant::now();
        client.send_req(now, 5, &msg).unwrap();
        let mut batch = Batch::new(32);
        client.poll_transmit(&pool, &mut batch);
        let mut packets: Vec<Vec<u8>> = batch.iter().map(|p| p.data().to_vec()).collect();
        batch.recycle(&pool);
        prop_assert!(packets.len() <= 4);
        // Every packet fits the MTU, and the dispatch fields lie wholly in the first.
        let first = Repr::parse(&Packet::new_checked(&packets[0][..]).unwrap()).unwrap();
        prop_assert_eq!(first.pkt_seq_num_in_req, 0);
        prop_assert_eq!(usize::from(first.seg_cnt), 1 + msg.dispatch_len().div_ceil(64));
        let mut seen_dispatch = Vec::new();
        for r in tern_wire::tlv::Reader::new(&packets[0][HEADER_LEN..]) {
            seen_dispatch.push(r.unwrap().field);
        }
        prop_assert!(seen_dispatch.starts_with(Probe::DISPATCH_FIELDS));
        for p in &packets {
            prop_assert!(p.len() + 28 <= cfg.mtu);
        }
        // Shuffle deterministically from `order`.
        let mut state = order | 1;
        for i in (1..packets.len()).rev() {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17;
            packets.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let mut delivered = None;
        let mut retry = Vec::new();
        for round in 0..2 {
            let input = if round == 0 { std::mem::take(&mut packets) } else { std::mem::take(&mut retry) };
            for p in input {
                let before = server.stats().drops_of(DropReason::NoFirstPacket);
                if let Some(inc) = server.handle_packet(now, client_addr, &p) {
                    delivered = Some(Probe::decode_parts(inc.parts.iter()).unwrap());
                } else if server.stats().drops_of(DropReason::NoFirstPacket) > before {
                    retry.push(p); // the sender would retransmit it
                }
            }
        }
        prop_assert_eq!(delivered.as_ref(), Some(&msg));
    }

    #[test]
    fn generated_codec_matches_dynamic_reference(msg in probe_strategy()) {
        let schema = schema();
        let m = schema.message("Probe").unwrap();
        let mut generated = Vec::new();
        msg.encode(&mut generated);
        prop_assert_eq!(generated.len(), msg.encoded_len());
        let mut dynamic = DynamicMessage::new(m);
        dynamic.values = vec![
            Value::String(msg.path.clone()), Value::Uint32(msg.tenant), Value::Int32(msg.a),
            Value::Int64(msg.b), Value::Uint64(msg.c), Value::Bool(msg.flag), Value::Float(msg.f),
            Value::Double(msg.d), Value::Bytes(msg.body.clone()), Value::String(msg.note.clone()),
        ];
        let mut reference = Vec::new();
        dynamic.encode(&mut reference);
        prop_assert_eq!(&generated, &reference);
        prop_assert_eq!(dynamic.dispatch_len(), msg.dispatch_len());
        prop_assert_eq!(DynamicMessage::decode_parts(m, [&generated[..]]).unwrap(), dynamic);
        prop_assert_eq!(Probe::decode(&reference).unwrap(), msg);
    }

    #[test]
    fn random_bytes_never_panic_an_endpoint(data in prop::collection::vec(any::<u8>(), 0..200), flags in 0u8..4) {
        let peer = addr("127.0.0.1:1");
        let mut server = Server::new(QnpConfig::default(), &[0, 1], Instant::now());
        let mut client = Client::new(QnpConfig::default(), 1, peer, 0);
        client.send_req(Instant::now(), 0, &Probe::default()).unwrap();
        let mut bytes = data.clone();
        if bytes.len() > 16 {
            bytes[16] = flags; // make valid flag bytes common
        }
        if let Some(inc) = server.handle_packet(Instant::now(), peer, &bytes) {
            let _ = Probe::decode_parts(inc.parts.iter());
        }
        if let Some(r) = client.handle_packet(Instant::now(), peer, &bytes) {
            let _ = Probe::decode_parts(r.parts.iter());
        }
    }
}

fn first_packet(req_id: u32, app_id: u8) -> Vec<u8> {
    let mut bytes = vec![0u8; HEADER_LEN + 100];
    Repr {
        app_id,
        req_type: 0,
        req_id,
        req_acked_id: 0,
        req_len_in_bytes: 400,
        req_len_in_pkts: 4,
        pkt_seq_num_in_req: 0,
        flags: Flags::DATA,
        seg_cnt: 1,
    }
    .emit(&mut Packet::new_unchecked(&mut bytes[..]));
    bytes
}

#[test]
fn request_table_stays_bounded_under_a_flood_of_first_packets() {
    let profile = tern_hw::Profile::builtin("qingniao-u250").unwrap();
    let cfg = QnpConfig::for_profile(&profile);
    assert_eq!(cfg.request_table_entries, 1024);
    let t0 = Instant::now();
    let mut server = Server::new(cfg, &[1], t0);
    let flood = 200_000u32;
    for i in 0..flood {
        // Many senders, many ids, never a second packet.
        let peer = SocketAddr::from(([127, 0, (i % 200) as u8, 1], 1000 + (i % 1000) as u16));
        let now = t0 + Duration::from_micros(u64::from(i)); // 200k packets in 0.2 s
        assert!(server.handle_packet(now, peer, &first_packet(i, 1)).is_none());
        server.handle_timeout(now);
        assert!(server.table().len() <= 1024);
        assert!(server.table().buffered_bytes() <= 1024 * 100);
    }
    let s = server.stats();
    assert_eq!(s.drops_of(DropReason::RequestTableFull), u64::from(flood) - 1024);
    // One second after their last packet, every entry has expired.
    let later = t0 + Duration::from_millis(200) + Duration::from_millis(1100);
    server.handle_timeout(later);
    assert_eq!(server.table().len(), 0);
    assert_eq!(server.table().buffered_bytes(), 0);
    assert_eq!(server.stats().drops_of(DropReason::RequestExpired), 1024);
    // And new requests get in again.
    let peer = addr("127.0.0.9:9");
    assert!(server.handle_packet(later, peer, &first_packet(1, 1)).is_none());
    assert_eq!(server.table().len(), 1);
}

#[test]
fn bad_input_is_dropped_by_reason() {
    let peer = addr("127.0.0.1:1");
    let now = Instant::now();
    let four = QnpConfig { max_pkts_per_request: 4, ..QnpConfig::default() };
    let mut server = Server::new(four, &[1], now);
    assert!(server.handle_packet(now, peer, &[0u8; 10]).is_none());
    let mut unknown_app = first_packet(1, 9);
    unknown_app.truncate(HEADER_LEN + 100);
    assert!(server.handle_packet(now, peer, &unknown_app).is_none());
    let mut absurd = first_packet(2, 1);
    absurd[14] = 200; // 200 packets
    assert!(server.handle_packet(now, peer, &absurd).is_none());
    let mut too_long = first_packet(3, 1);
    too_long[10..14].copy_from_slice(&1_000_000u32.to_be_bytes());
    assert!(server.handle_packet(now, peer, &too_long).is_none());
    let mut later = first_packet(4, 1);
    later[15] = 2;
    assert!(server.handle_packet(now, peer, &later).is_none());
    // A single-packet request whose TLV overruns: the core delivers, decoding fails.
    let mut overrun = first_packet(5, 1);
    overrun[14] = 1;
    overrun[10..14].copy_from_slice(&100u32.to_be_bytes());
    overrun[HEADER_LEN..HEADER_LEN + 3].copy_from_slice(&[1, 0xff, 0xff]);
    let inc = server.handle_packet(now, peer, &overrun).expect("delivered to decoding");
    assert!(Probe::decode_parts(inc.parts.iter()).is_err());
    let s = server.stats();
    for (reason, n) in [
        (DropReason::Truncated, 1),
        (DropReason::UnknownApp, 1),
        (DropReason::TooManyPackets, 1),
        (DropReason::BadLength, 1),
        (DropReason::NoFirstPacket, 1),
    ] {
        assert_eq!(s.drops_of(reason), n, "{}", reason.as_str());
    }
}

#[test]
fn dispatch_fields_that_cannot_fit_are_refused() {
    let four = QnpConfig { max_pkts_per_request: 4, ..QnpConfig::default() };
    let mut client = Client::new(four, 1, addr("127.0.0.1:2"), 0);
    let big = Probe { path: "x".repeat(2000), ..Default::default() };
    let err = client.send_req(Instant::now(), 0, &big).unwrap_err().to_string();
    assert!(err.contains("dispatch fields take") && err.contains("Probe"), "{err}");
    let huge = Probe { body: vec![0; 10_000], ..Default::default() };
    let err = client.send_req(Instant::now(), 0, &huge).unwrap_err().to_string();
    assert!(err.contains("at most 4 allowed"), "{err}");
}
