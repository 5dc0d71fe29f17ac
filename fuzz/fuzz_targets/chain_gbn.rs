//! The go-back-N transport (`tern_chain::gbn`) fed arbitrary packets: the input is cut into packets
//! (a 1-byte length, then that many bytes), each given to a receiver and to a sender with payloads
//! in flight. Nothing may panic; the receiver counts each payload it hands out once; the sender
//! never has more in flight than its window, nor acknowledged more than it sent, nor sends data
//! before its open is acknowledged, nor anything once its connection has ended; the receiving end's
//! table of connections (each packet that parses, to the connection its header names, each packet's
//! length byte moving the clock by 10 ms a unit, against an idle time of 1 s, from one of four
//! addresses and a port the length picks) never holds more than its bound (past one connection
//! kept, or in its first 0.5 s, opens must bring a cookie), and delivers data only on a connection
//! it acknowledged an open of.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tern_chain::gbn::{ACK, Config, Connections, DATA, Header, OPEN, ReceiveConfig, Receiver, Sender};

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let cfg = Config { window: 4, rto: Duration::from_millis(1), queue: 8, ..Config::default() };
    let mut tx = Sender::new(5, cfg);
    let mut rx = Receiver::new(5);
    for i in 0..6u8 {
        let _ = tx.push(vec![i; usize::from(i)]);
    }
    let mut out = Vec::new();
    tx.poll(t0, &mut out);
    let mut rest = data;
    let mut delivered = 0u8;
    let mut k = 0u32;
    let mut table =
        Connections::new(ReceiveConfig {
            max_connections: 3,
            max_connections_per_peer: 2,
            idle: Duration::from_secs(1),
            cookies_from: Some(1),
            quiet: Some(Duration::from_millis(500)),
        });
    let mut now = t0;
    let mut opened = std::collections::HashSet::new();
    while let [n, tail @ ..] = rest {
        let n = usize::from(*n).min(tail.len());
        let packet = &tail[..n];
        rest = &tail[n..];
        k += 1;
        if let Ok((h, _)) = Header::parse(packet) {
            now += Duration::from_millis(10 * n as u64);
            let from = ([10, 0, 0, (n & 3) as u8], 4000 + (n >> 2) as u16);
            match table.on_header(from, h, now) {
                Ok(Some((_, ack))) if h.kind == OPEN && ack.kind == ACK => {
                    opened.insert((from, h.conn));
                }
                Ok(Some((true, _))) => assert!(opened.contains(&(from, h.conn)), "data delivered without an open"),
                _ => {}
            }
            assert!(table.len() <= 3);
        }
        let (d, _ack) = rx.on_packet(packet);
        if let Some(d) = d {
            assert!(rx.stats().delivered == u64::from(delivered) + 1);
            let _ = d;
            delivered = delivered.wrapping_add(1);
        }
        tx.on_packet(packet, t0 + Duration::from_micros(u64::from(k)));
        out.clear();
        tx.poll(t0 + Duration::from_millis(u64::from(k)), &mut out);
        assert!(tx.in_flight() <= 4);
        assert!(tx.ended().is_none() || out.is_empty(), "an ended sender sent");
        assert!(tx.is_open() || out.iter().all(|p| p[1] != DATA), "data before the open was acknowledged");
        assert!(tx.stats().acked <= tx.stats().sent);
    }
});
