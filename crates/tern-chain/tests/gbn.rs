//! The go-back-N transport: its header byte for byte, a parser that refuses what is not a
//! packet, and sender/receiver pairs over the `FaultInjector` (seeded loss, duplication and
//! reordering) delivering every payload once and in order, across the sequence numbers' wrap;
//! the receiving end's connections made by opens, bounded, forgotten when idle, and data of a
//! connection it does not have answered with a reset; exactly once across restarts and
//! partitions.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use tern_chain::gbn::{
    ACK, COOKIE, Config, Connections, DATA, Ended, HEADER_LEN, Header, MAX_PAYLOAD, OPEN, PacketError, Peer, PushError,
    RESET, ReceiveConfig, Receiver, Refused, Sender, Unacknowledged,
};
use tern_io::fault::{FaultConfig, FaultInjector};
use tern_io::{Batch, Pool, Port, mem};

#[test]
fn the_header_is_the_documented_bytes() {
    let mut b = Vec::new();
    Header { kind: DATA, len: 2, conn: 0x0102_0304, seq: 5 }.write(b"ab", &mut b);
    assert_eq!(b, [2, 1, 0, 2, 1, 2, 3, 4, 0, 0, 0, 5, b'a', b'b']);
    for (kind, byte) in [(ACK, 2), (OPEN, 3), (RESET, 4), (COOKIE, 5)] {
        let mut a = Vec::new();
        Header { kind, len: 0, conn: 9, seq: 0xdead_beef }.write(&[], &mut a);
        assert_eq!(a, [2, byte, 0, 0, 0, 0, 0, 9, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(Header::parse(&a).unwrap().0, Header { kind, len: 0, conn: 9, seq: 0xdead_beef });
    }
    assert_eq!(HEADER_LEN, 12);
    let (h, p) = Header::parse(&b).unwrap();
    assert_eq!((h, p), (Header { kind: DATA, len: 2, conn: 0x0102_0304, seq: 5 }, &b"ab"[..]));
}

fn data(conn: u32, seq: u32) -> Header {
    Header { kind: DATA, len: 0, conn, seq }
}

/// An open of `conn` with initial sequence number 0.
fn open(conn: u32) -> Header {
    Header { kind: OPEN, len: 0, conn, seq: 0 }
}

/// The peer the tests' packets come from.
const PEER: Peer = ([10, 0, 0, 1], 7000);

/// The receiving end's defaults but for the quiet time (none), so that an open is taken at
/// once while few connections are kept; the quiet time has tests of its own.
fn no_quiet() -> ReceiveConfig {
    ReceiveConfig { quiet: Some(Duration::ZERO), ..ReceiveConfig::default() }
}

/// The receiving end's answer to a data packet or an open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Whether the payload was delivered, and the next number the acknowledgement asks for.
    Ack(bool, u32),
    /// A reset of this sequence number: the connection is not kept.
    Reset(u32),
}
use Answer::{Ack, Reset};

/// The answer to the packet (from [`PEER`]).
fn took(c: &mut Connections, h: Header, now: Instant) -> Result<Answer, Refused> {
    took_from(c, PEER, h, now)
}

/// [`took`], the packet from `from`.
fn took_from(c: &mut Connections, from: Peer, h: Header, now: Instant) -> Result<Answer, Refused> {
    c.on_header(from, h, now).map(|a| {
        let (d, ans) = a.expect("a data packet or an open is answered");
        match ans.kind {
            ACK => Ack(d, ans.seq),
            RESET if !d => Reset(ans.seq),
            k => panic!("answered with kind {k}, delivered {d}"),
        }
    })
}

/// A connection is its peer's (address and port) connection id: another peer sending data with
/// the same id — a client guessing another's — has no such connection (a reset, nothing
/// delivered), or one of its own once it opens it, and takes none of the first's sequence
/// numbers.
#[test]
fn a_connection_is_its_peers_alone() {
    let mut c = Connections::new(no_quiet());
    let t0 = Instant::now();
    let intruder: Peer = ([10, 0, 0, 66], 7000);
    assert_eq!(took(&mut c, data(5, 0), t0), Ok(Reset(0)), "data before the open");
    assert_eq!(took(&mut c, open(5), t0), Ok(Ack(false, 0)));
    assert_eq!(took(&mut c, data(5, 0), t0), Ok(Ack(true, 1)));
    // The intruder sends the victim's next number on the victim's id: no connection of its
    // own, so nothing is delivered and none is made.
    assert_eq!(took_from(&mut c, intruder, data(5, 1), t0), Ok(Reset(1)));
    assert_eq!(c.len(), 1);
    // Opened, it is the intruder's own, expecting its own initial number.
    assert_eq!(took_from(&mut c, intruder, open(5), t0), Ok(Ack(false, 0)));
    assert_eq!(took_from(&mut c, intruder, data(5, 1), t0), Ok(Ack(false, 0)));
    // The victim's own packet 1 is still the next expected and delivered once.
    assert_eq!(took(&mut c, data(5, 1), t0), Ok(Ack(true, 2)));
    assert_eq!(took(&mut c, data(5, 1), t0), Ok(Ack(false, 2)));
    // Another port of the same address is another peer too.
    assert_eq!(took_from(&mut c, (PEER.0, 7001), data(5, 0), t0), Ok(Reset(0)));
    assert_eq!(took_from(&mut c, (PEER.0, 7001), open(5), t0), Ok(Ack(false, 0)));
    assert_eq!(took_from(&mut c, (PEER.0, 7001), data(5, 0), t0), Ok(Ack(true, 1)));
    assert_eq!((c.len(), c.opened(), c.unknown()), (3, 3, 3));
}

/// An open sent again before any data (its acknowledgement lost) is acknowledged and begins
/// nothing again; after data, the same open (a late copy, or a sender started over with its id
/// and number) is answered with a cookie other than that number, and does not keep the
/// connection alive; an open of another initial number begins the connection again (the sender
/// started over with the same id) only with its cookie: else it is answered with one and the
/// connection goes on, so that a packet spoofed from the peer's address cannot end its stream.
#[test]
fn an_open_again_is_acknowledged_and_another_initial_number_begins_again_with_a_cookie() {
    let mut c = Connections::new(no_quiet());
    let t0 = Instant::now();
    let open_at = |seq| Header { seq, ..open(2) };
    assert_eq!(took(&mut c, open_at(100), t0), Ok(Ack(false, 100)));
    assert_eq!(took(&mut c, open_at(100), t0), Ok(Ack(false, 100)), "the same open again, no data yet");
    assert_eq!(took(&mut c, data(2, 100), t0), Ok(Ack(true, 101)));
    // The same open after data (a late copy, or a sender begun again with its id and number):
    // a cookie, never the connection's own number, and the connection goes on.
    let Some((COOKIE, k0)) = answer_to(&mut c, PEER, 2, 100, t0) else { panic!("no cookie") };
    assert_ne!(k0, 100);
    assert_eq!(took(&mut c, data(2, 100), t0), Ok(Ack(false, 101)), "not delivered again");
    let Some((COOKIE, k)) = answer_to(&mut c, PEER, 2, 7, t0) else { panic!("no cookie") };
    assert_eq!(took(&mut c, data(2, 101), t0), Ok(Ack(true, 102)), "the connection goes on");
    assert_eq!(answer_to(&mut c, PEER, 2, k, t0), Some((ACK, k)), "begun again with the cookie");
    assert_eq!(took(&mut c, data(2, 102), t0), Ok(Ack(false, k)));
    assert_eq!(took(&mut c, data(2, k), t0), Ok(Ack(true, k.wrapping_add(1))));
    assert_eq!((c.len(), c.opened(), c.reopened()), (1, 1, 1));
    // Copies of its open at 30 and 59 s keep nothing alive: at 61 s from its last data (its
    // idle time 60 s) it is gone.
    let idle = no_quiet().idle;
    for s in [30, 59] {
        let at = t0 + Duration::from_secs(s);
        assert!(matches!(answer_to(&mut c, PEER, 2, k, at), Some((COOKIE, _))));
    }
    assert_eq!(
        took(&mut c, data(2, k.wrapping_add(1)), t0 + idle + Duration::from_secs(1)),
        Ok(Reset(k.wrapping_add(1)))
    );
}

#[test]
fn a_connection_idle_for_its_time_is_forgotten_and_its_data_reset() {
    let idle = Duration::from_secs(60);
    let mut c = Connections::new(ReceiveConfig { max_connections: 8, idle, ..no_quiet() });
    let t0 = Instant::now();
    assert_eq!(took(&mut c, open(1), t0), Ok(Ack(false, 0)));
    assert_eq!(took(&mut c, data(1, 0), t0), Ok(Ack(true, 1)));
    assert_eq!(took(&mut c, data(1, 1), t0 + Duration::from_secs(30)), Ok(Ack(true, 2)));
    // Just short of idle since its last data packet: still known.
    assert_eq!(took(&mut c, data(1, 2), t0 + Duration::from_secs(89)), Ok(Ack(true, 3)));
    assert_eq!(c.expired(), 0);
    // A whole idle period since: forgotten, so its next number is not delivered but reset,
    // and no connection is made for it.
    assert_eq!(took(&mut c, data(1, 3), t0 + Duration::from_secs(149)), Ok(Reset(3)));
    assert_eq!((c.expired(), c.len()), (1, 0));
    assert_eq!(took(&mut c, data(1, 0), t0 + Duration::from_secs(150)), Ok(Reset(0)), "nor from 0");
    // Opened again, it starts afresh.
    assert_eq!(took(&mut c, open(1), t0 + Duration::from_secs(150)), Ok(Ack(false, 0)));
    assert_eq!(took(&mut c, data(1, 0), t0 + Duration::from_secs(150)), Ok(Ack(true, 1)));
    // An acknowledgement or a reset makes and refreshes no connection.
    for kind in [ACK, RESET] {
        assert_eq!(c.on_header(PEER, Header { kind, len: 0, conn: 2, seq: 0 }, t0), Ok(None));
    }
    assert_eq!(c.len(), 1);
}

#[test]
fn connections_are_bounded_and_an_idle_one_gives_its_place_up() {
    let idle = Duration::from_secs(10);
    let cfg = ReceiveConfig { max_connections: 2, idle, cookies_from: Some(2), ..ReceiveConfig::default() };
    let mut c = Connections::new(cfg);
    let t0 = Instant::now();
    assert!(took(&mut c, open(1), t0).is_ok() && took(&mut c, open(2), t0).is_ok());
    assert_eq!(took(&mut c, data(1, 0), t0), Ok(Ack(true, 1)));
    // A third is refused; the two kept go on.
    assert_eq!(took(&mut c, open(3), t0), Err(Refused::ConnectionsFull(2)));
    assert_eq!(took(&mut c, data(3, 0), t0), Ok(Reset(0)), "not opened");
    assert_eq!(took(&mut c, data(1, 1), t0 + Duration::from_secs(5)), Ok(Ack(true, 2)));
    // Connection 2 idle for its time: within three twentieths of it more and the 128 packets after
    // (here connection 3's open, refused while its place is taken, and connection 1's data,
    // sent again), its place is free. (The pass may find it sooner: its map is the keyed
    // hash's.)
    let later = t0 + idle + idle * 3 / 20;
    let mut packets = 1;
    while took(&mut c, open(3), later) == Err(Refused::ConnectionsFull(2)) {
        took(&mut c, data(1, 1), later).unwrap();
        packets += 2;
        assert!(packets < 128, "connection 2 still holds its place after {packets} packets");
    }
    assert_eq!((c.len(), c.expired()), (2, 1));
    assert_eq!(took(&mut c, data(1, 2), later), Ok(Ack(true, 3)), "connection 1 was not idle");
}

/// A new connection's open with every place taken takes the place of a connection idle past
/// its time that the pass has not come round to yet (forgotten already, counted `expired`),
/// and is refused only while none of those looked at is idle (docs/chain.md, "Go-back-N").
#[test]
fn a_full_receiver_takes_an_idle_connections_place() {
    let idle = Duration::from_secs(100);
    let cfg = ReceiveConfig { max_connections: 4, idle, cookies_from: Some(4), ..ReceiveConfig::default() };
    let mut c = Connections::new(cfg);
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    for conn in 1..4 {
        assert_eq!(took(&mut c, open(conn), at(0)), Ok(Ack(false, 0)));
    }
    assert_eq!(took(&mut c, open(4), at(85)), Ok(Ack(false, 0)));
    // A pass at 95 s (data of a connection never opened; enough packets to end the pass begun
    // at 85 s, a map a packet, and the next) finds nothing idle; the next begins 10 s on.
    for _ in 0..200 {
        assert_eq!(took(&mut c, data(9, 0), at(95)), Ok(Reset(0)));
    }
    assert_eq!((c.len(), c.expired()), (4, 0));
    // At 101 s connections 1-3 are idle, not yet forgotten: new ones take their places.
    for conn in 10..13 {
        assert_eq!(took(&mut c, open(conn), at(101)), Ok(Ack(false, 0)), "connection {conn}");
    }
    assert_eq!((c.len(), c.expired(), c.opened()), (4, 3, 7));
    assert_eq!(took(&mut c, data(4, 0), at(101)), Ok(Ack(true, 1)), "connection 4 stays");
    assert_eq!(took(&mut c, data(1, 0), at(101)), Ok(Reset(0)), "connection 1 is forgotten");
    // None idle now: refused.
    assert_eq!(took(&mut c, open(13), at(101)), Err(Refused::ConnectionsFull(4)));
}

/// One address cannot take every connection: past its share (its ports together) its new
/// connections are refused (`PeerFull`), its kept ones go on, another address still gets one,
/// and once its own idle it gets new ones again.
#[test]
fn one_address_keeps_to_its_share_of_connections() {
    let idle = Duration::from_secs(10);
    // No cookies here (from 8 kept: never below the bound): the share alone.
    let cfg =
        ReceiveConfig { max_connections: 8, max_connections_per_peer: 3, idle, cookies_from: Some(8), quiet: None };
    let mut c = Connections::new(cfg);
    let t0 = Instant::now();
    for (port, conn) in [(7000, 1), (7000, 2), (7001, 1)] {
        assert_eq!(took_from(&mut c, (PEER.0, port), open(conn), t0), Ok(Ack(false, 0)));
    }
    assert_eq!(took_from(&mut c, (PEER.0, 7002), open(1), t0), Err(Refused::PeerFull(3)));
    assert_eq!(took(&mut c, open(3), t0), Err(Refused::PeerFull(3)));
    assert_eq!(took(&mut c, data(2, 0), t0 + Duration::from_secs(5)), Ok(Ack(true, 1)), "a kept one goes on");
    assert_eq!(took_from(&mut c, ([10, 0, 0, 2], 7000), open(1), t0), Ok(Ack(false, 0)));
    // Two of its three idle for their time (connection 2 had data at 5 s): once looked at (128
    // packets), two new ones.
    let later = t0 + idle + idle * 3 / 20;
    for _ in 0..128 {
        took(&mut c, data(2, 0), later).unwrap();
    }
    assert_eq!(took(&mut c, open(3), later), Ok(Ack(false, 0)));
    assert_eq!(took_from(&mut c, (PEER.0, 7002), open(1), later), Ok(Ack(false, 0)));
    assert_eq!(took(&mut c, open(4), later), Err(Refused::PeerFull(3)));
    assert_eq!(Refused::PeerFull(3).to_string(), "the peer's address holds its share of the connections (at most 3)");
}

proptest! {
    /// Any opens from three addresses (two ports each) at any times, a share of 2 connections
    /// an address, and between them any number of packets of a fourth address's one
    /// connection: an address never keeps more than its share of live connections, and is
    /// refused `PeerFull` only while it keeps its share of connections whose last open came
    /// within 1.15 idle times or fewer than 128 packets ago (docs/chain.md: how long
    /// an idle connection may hold its place).
    #[test]
    fn each_address_keeps_to_its_share(
        steps in proptest::collection::vec((0u8..3, 0u16..2, 0u32..4, 0u64..400, 0usize..24), 1..300),
    ) {
        const SHARE: usize = 2;
        let idle = Duration::from_secs(1);
        let cfg = ReceiveConfig { max_connections: 64, max_connections_per_peer: SHARE, idle, cookies_from: None, quiet: Some(Duration::ZERO) };
        let mut c = Connections::new(cfg);
        let mut now = Instant::now();
        // The model: each (peer, connection) answered, and its last open's time; the times of
        // every packet so far.
        let mut last: std::collections::HashMap<(Peer, u32), Instant> = std::collections::HashMap::new();
        let mut packets: Vec<Instant> = Vec::new();
        let live = |last: &std::collections::HashMap<(Peer, u32), Instant>, addr: u8, now: Instant| {
            last.iter().filter(|&(&((a, _), _), &t)| a[3] == addr && now.duration_since(t) < idle).count()
        };
        for (addr, port, conn, ms, others) in steps {
            now += Duration::from_millis(ms);
            for _ in 0..others {
                packets.push(now);
                prop_assert!(matches!(c.on_header(([10, 0, 0, 9], 9), open(1), now), Ok(Some(_))));
            }
            let from: Peer = ([10, 0, 0, addr], 7000 + port);
            packets.push(now);
            match c.on_header(from, open(conn), now) {
                Ok(Some(_)) => {
                    last.insert((from, conn), now);
                    let live = live(&last, addr, now);
                    prop_assert!(live <= SHARE, "address {addr} keeps {live} live connections");
                }
                Ok(None) => prop_assert!(false, "an open unanswered"),
                Err(e) => {
                    prop_assert_eq!(e, Refused::PeerFull(SHARE), "64 connections cannot run out");
                    // Those that may still hold their place: an open within 1.15 idle times, or
                    // fewer than 128 packets since then.
                    let may_hold = last
                        .iter()
                        .filter(|&(&((a, _), _), &t)| {
                            let due = t + idle + idle * 3 / 20;
                            a[3] == addr && (now < due || packets.iter().filter(|&&p| p >= due).count() < 128)
                        })
                        .count();
                    prop_assert!(may_hold >= SHARE, "address {addr} refused with {may_hold} connections in the way");
                }
            }
        }
    }

    /// Any opens and data packets of any connections at any times: never more connections
    /// than the bound; a connection live (a packet within the idle time) is never refused and
    /// delivers its numbers in order from its open's initial number; an open of it is
    /// acknowledged only while it has had no data and the open brings its number, else answered
    /// with a cookie; data of one not live delivers nothing and is reset.
    #[test]
    fn connections_never_pass_their_bound(
        steps in proptest::collection::vec((0u32..40, any::<bool>(), 0u32..4, 0u64..3000), 1..400),
    ) {
        let idle = Duration::from_secs(1);
        let cfg = ReceiveConfig { max_connections: 16, idle, cookies_from: Some(16), ..ReceiveConfig::default() };
        let mut c = Connections::new(cfg);
        let mut now = Instant::now();
        // The model: each connection's initial number, next number and last packet's time; one
        // idle for `idle` since is gone.
        let mut known: std::collections::HashMap<u32, (u32, u32, Instant)> = std::collections::HashMap::new();
        for (conn, is_open, seq, ms) in steps {
            now += Duration::from_millis(ms / 10);
            let h = Header { kind: if is_open { OPEN } else { DATA }, len: 0, conn, seq };
            let live = known.get(&conn).copied().filter(|&(_, _, last)| now.duration_since(last) < idle);
            let got = c.on_header(PEER, h, now);
            match (live, is_open) {
                (Some((start, next, _)), false) => {
                    let want = if seq == next { (true, next + 1) } else { (false, next) };
                    let got = got.map(|a| a.map(|(d, ack)| (d, ack.kind, ack.seq)));
                    prop_assert_eq!(got, Ok(Some((want.0, ACK, want.1))));
                    known.insert(conn, (start, want.1, now));
                }
                (Some((start, next, _)), true) if seq == start && next == start => {
                    // Its open again, no data yet (its acknowledgement lost): acknowledged.
                    let got = got.map(|a| a.map(|(d, ack)| (d, ack.kind, ack.seq)));
                    prop_assert_eq!(got, Ok(Some((false, ACK, next))));
                    known.insert(conn, (start, next, now));
                }
                (Some((start, ..)), true) => {
                    // Another initial number, without its cookie, or its own after data:
                    // answered with a cookie (never its own number), the connection as it was
                    // (its time not refreshed).
                    prop_assert!(matches!(got, Ok(Some((false, a))) if a.kind == COOKIE && a.seq != start), "{:?}", got);
                }
                (None, false) => {
                    let got = got.map(|a| a.map(|(d, ack)| (d, ack.kind, ack.seq)));
                    prop_assert_eq!(got, Ok(Some((false, RESET, seq))));
                    known.remove(&conn);
                }
                (None, true) => match got {
                    Ok(Some((false, ack))) if ack.kind == ACK && ack.seq == seq => {
                        known.insert(conn, (seq, seq, now));
                    }
                    Err(e) => {
                        prop_assert_eq!(e, Refused::ConnectionsFull(16));
                        known.remove(&conn);
                    }
                    other => prop_assert!(false, "an open of a new connection answered {:?}", other),
                },
            }
            prop_assert!(c.len() <= 16);
        }
    }
}

#[test]
fn what_is_not_a_packet_is_refused_by_name() {
    let mut ok = Vec::new();
    Header { kind: DATA, len: 1, conn: 1, seq: 1 }.write(b"x", &mut ok);
    let with = |i: usize, v: u8| {
        let mut b = ok.clone();
        b[i] = v;
        b
    };
    assert_eq!(Header::parse(&ok[..11]), Err(PacketError::Short(11)));
    assert_eq!(Header::parse(&with(0, 1)), Err(PacketError::Version(1)), "version 1 had no open");
    assert_eq!(Header::parse(&with(1, 0)), Err(PacketError::Kind(0)));
    assert_eq!(Header::parse(&with(1, 6)), Err(PacketError::Kind(6)));
    assert_eq!(Header::parse(&with(3, 2)), Err(PacketError::Length { len: 2, have: 1 }));
    // An acknowledgement, an open, a reset or a cookie with a payload; a payload over the limit.
    for kind in [ACK, OPEN, RESET, COOKIE] {
        assert_eq!(Header::parse(&with(1, kind)), Err(PacketError::Length { len: 1, have: 1 }));
    }
    let mut big = Vec::new();
    Header { kind: DATA, len: (MAX_PAYLOAD + 1) as u16, conn: 1, seq: 1 }.write(&vec![0; MAX_PAYLOAD + 1], &mut big);
    assert!(matches!(Header::parse(&big), Err(PacketError::Length { .. })));
    assert_eq!(PacketError::Length { len: 2, have: 1 }.to_string(), "length 2 with 1 bytes after the header");
}

/// Opens `tx`'s connection at `rx` (the open, its acknowledgement), at `now`.
fn opened(tx: &mut Sender, rx: &mut Receiver, now: Instant) {
    let mut wire = Vec::new();
    tx.poll(now, &mut wire);
    assert_eq!(wire.len(), 1, "the open alone");
    assert_eq!(Header::parse(&wire[0]).unwrap().0.kind, OPEN);
    let (d, ack) = rx.on_packet(&wire[0]);
    assert!(d.is_none());
    tx.on_packet(&ack.unwrap(), now);
    assert!(tx.is_open());
}

#[test]
fn a_receiver_delivers_only_the_next_in_order_and_acks_what_it_expects() {
    let mut tx = Sender::new(3, Config { window: 4, ..Config::default() });
    let mut rx = Receiver::new(3);
    for i in 0..3u8 {
        tx.push(vec![i]).unwrap();
    }
    opened(&mut tx, &mut rx, Instant::now());
    let mut wire = Vec::new();
    tx.poll(Instant::now(), &mut wire);
    assert_eq!(wire.len(), 3);
    // Packet 1 first: dropped, the ack still says 0.
    let (d, ack) = rx.on_packet(&wire[1]);
    assert_eq!((d, Header::parse(&ack.unwrap()).unwrap().0.seq), (None, 0));
    assert_eq!(rx.on_packet(&wire[0]).0, Some(vec![0]));
    // A copy of 0: dropped; then 1 again (go back N resends it), delivered.
    assert_eq!(rx.on_packet(&wire[0]).0, None);
    assert_eq!(rx.on_packet(&wire[1]).0, Some(vec![1]));
    let s = rx.stats();
    assert_eq!((s.delivered, s.out_of_order, s.malformed), (2, 2, 0));
    // Another connection's packet, or an ack, is not data for it.
    for (kind, conn) in [(DATA, 4), (ACK, 3), (RESET, 3)] {
        let mut other = Vec::new();
        Header { kind, len: 0, conn, seq: 2 }.write(&[], &mut other);
        assert_eq!(rx.on_packet(&other), (None, None));
    }
    assert_eq!(rx.stats().malformed, 3);
}

/// The sender sends nothing before it has a payload, then its open alone, again every `rto`
/// until acknowledged (only an acknowledgement of its initial number, of its connection, opens
/// it; a reset meanwhile changes nothing), and only then data.
#[test]
fn a_sender_opens_its_connection_before_any_data() {
    let rto = Duration::from_millis(5);
    let mut tx = Sender::starting_at(6, Config { rto, ..Config::default() }, 40);
    let t0 = Instant::now();
    let mut wire = Vec::new();
    tx.poll(t0, &mut wire);
    assert!(wire.is_empty() && tx.deadline().is_none(), "nothing to send, nothing sent");
    tx.push(vec![1]).unwrap();
    tx.push(vec![2]).unwrap();
    tx.poll(t0, &mut wire);
    let heads: Vec<Header> = wire.iter().map(|p| Header::parse(p).unwrap().0).collect();
    assert_eq!(heads, [Header { kind: OPEN, len: 0, conn: 6, seq: 40 }]);
    assert_eq!(tx.deadline(), Some(t0 + rto));
    wire.clear();
    tx.poll(t0 + rto / 2, &mut wire);
    assert!(wire.is_empty(), "before the timeout");
    let packet = |kind, conn, seq| {
        let mut a = Vec::new();
        Header { kind, len: 0, conn, seq }.write(&[], &mut a);
        a
    };
    for (kind, conn, seq) in [(ACK, 6, 41), (ACK, 7, 40), (RESET, 6, 40), (DATA, 6, 40)] {
        tx.on_packet(&packet(kind, conn, seq), t0);
        assert!(!tx.is_open() && tx.ended().is_none(), "{kind} {conn} {seq}");
    }
    tx.poll(t0 + rto, &mut wire);
    assert_eq!(wire.len(), 1);
    assert_eq!(Header::parse(&wire[0]).unwrap().0.kind, OPEN, "the open again");
    assert_eq!(tx.deadline(), Some(t0 + 3 * rto), "twice as long before the next");
    let t1 = t0 + 3 * rto;
    tx.on_packet(&packet(ACK, 6, 40), t1);
    assert!(tx.is_open());
    wire.clear();
    tx.poll(t1, &mut wire);
    let seqs: Vec<(u8, u32)> = wire.iter().map(|p| Header::parse(p).unwrap().0).map(|h| (h.kind, h.seq)).collect();
    assert_eq!(seqs, [(DATA, 40), (DATA, 41)]);
    assert_eq!(tx.deadline(), Some(t1 + rto), "data waits `rto`");
    let s = tx.stats();
    assert_eq!((s.opens, s.timeouts, s.sent, s.stale_acks, s.bad_acks), (2, 1, 2, 2, 2));
}

/// An open never answered (refused, or lost) is sent again `rto` after the first, then after
/// twice as long each time, up to 1024 times `rto`: 39 opens in the 30 s before the sender
/// gives up, not 30,000.
#[test]
fn a_sender_backs_off_its_open() {
    let rto = Duration::from_millis(1);
    let mut tx = Sender::new(2, Config { rto, ..Config::default() });
    tx.push(vec![0]).unwrap();
    let t0 = Instant::now();
    let mut sent_at = Vec::new();
    let mut out = Vec::new();
    for ms in 0..30_000 {
        out.clear();
        tx.poll(t0 + Duration::from_millis(ms), &mut out);
        if !out.is_empty() {
            sent_at.push(ms);
        }
    }
    let gaps: Vec<u64> = sent_at.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps[..12], [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1024]);
    assert!(gaps.iter().all(|&g| g <= 1024));
    assert_eq!((sent_at.len(), tx.stats().opens), (39, 39));
    out.clear();
    tx.poll(t0 + Duration::from_secs(30), &mut out);
    assert_eq!(tx.ended(), Some(Ended::Unanswered));
}

#[test]
fn a_sender_keeps_its_window_goes_back_on_timeout_and_bounds_its_queue() {
    let cfg = Config { window: 2, rto: Duration::from_millis(5), queue: 3, ..Config::default() };
    let mut tx = Sender::new(1, cfg);
    for i in 0..3u8 {
        tx.push(vec![i]).unwrap();
    }
    assert_eq!(tx.push(vec![9]), Err(tern_chain::gbn::PushError::Full(vec![9])), "three queued, none sent");
    // Two go (the window); two more fit the queue; then it is full again.
    let t0 = Instant::now();
    opened(&mut tx, &mut Receiver::new(1), t0);
    let mut wire = Vec::new();
    tx.poll(t0, &mut wire);
    assert_eq!(wire.len(), 2);
    tx.push(vec![3]).unwrap();
    tx.push(vec![4]).unwrap();
    assert_eq!(tx.push(vec![9]), Err(tern_chain::gbn::PushError::Full(vec![9])));
    // Before the timeout nothing; after it both again, from the oldest.
    wire.clear();
    tx.poll(t0 + Duration::from_millis(1), &mut wire);
    assert!(wire.is_empty());
    tx.poll(t0 + Duration::from_millis(5), &mut wire);
    let seqs: Vec<u32> = wire.iter().map(|p| Header::parse(p).unwrap().0.seq).collect();
    assert_eq!(seqs, [0, 1]);
    // An ack for 1 (packet 0 done) moves the window: packet 2 goes.
    let mut ack = Vec::new();
    Header { kind: ACK, len: 0, conn: 1, seq: 1 }.write(&[], &mut ack);
    tx.on_packet(&ack, t0 + Duration::from_millis(6));
    wire.clear();
    tx.poll(t0 + Duration::from_millis(6), &mut wire);
    assert_eq!(wire.iter().map(|p| Header::parse(p).unwrap().0.seq).collect::<Vec<_>>(), [2]);
    // A stale ack (0, behind the base) and one for packets never sent (9) are ignored.
    for seq in [0, 9] {
        let mut a = Vec::new();
        Header { kind: ACK, len: 0, conn: 1, seq }.write(&[], &mut a);
        tx.on_packet(&a, t0);
    }
    let s = tx.stats();
    assert_eq!((s.sent, s.retransmitted, s.timeouts, s.acked, s.stale_acks), (3, 2, 1, 1, 2));
    assert_eq!(tx.in_flight(), 2);
}

/// One round between a sender and the receiving end's connections at `now`: what the sender
/// sends goes to `c` (from [`PEER`]), the acknowledgements back; the payloads delivered.
fn round(tx: &mut Sender, c: &mut Connections, now: Instant) -> usize {
    let mut out = Vec::new();
    tx.poll(now, &mut out);
    let mut delivered = 0;
    for p in out {
        let (h, _) = Header::parse(&p).unwrap();
        if let Ok(Some((d, ack))) = c.on_header(PEER, h, now) {
            delivered += usize::from(d);
            let mut a = Vec::new();
            ack.write(&[], &mut a);
            tx.on_packet(&a, now);
        }
    }
    delivered
}

/// The receiving end restarts (its connections forgotten): the sender's next data packet is
/// answered with a reset, which ends the connection as forgotten at once — also when none of
/// its data had been acknowledged (the acknowledgements lost), where a receiving end that made
/// connections from data would have delivered its first payloads again. It then sends and
/// queues nothing more and gives its payloads back: those sent (perhaps delivered in part) and
/// those not. A reset of a packet not in flight, and silence, end nothing.
#[test]
fn a_sender_finds_out_that_the_receiving_end_forgot_its_connection() {
    let mut c = Connections::new(no_quiet());
    let rto = Duration::from_millis(1);
    let cfg = |window| Config { window, rto, queue: 16, ..Config::default() };
    let mut tx = Sender::new(7, cfg(2));
    let t0 = Instant::now();
    for i in 0..3 {
        tx.push(vec![i]).unwrap();
    }
    assert_eq!(round(&mut tx, &mut c, t0), 0, "the open");
    assert_eq!(round(&mut tx, &mut c, t0) + round(&mut tx, &mut c, t0), 3);
    assert!(tx.is_idle());

    // The receiving end restarts, and meets 3 and 4: resets.
    let mut c = Connections::new(no_quiet());
    let t1 = t0 + Duration::from_secs(1);
    for i in 3..6 {
        tx.push(vec![i]).unwrap();
    }
    assert_eq!(round(&mut tx, &mut c, t1), 0);
    assert_eq!(tx.ended(), Some(Ended::Forgotten), "{:?}", tx.stats());
    assert_eq!((c.len(), c.unknown()), (0, 2), "no connection made by data");
    let mut out = Vec::new();
    tx.poll(t1 + 10 * rto, &mut out);
    assert!(out.is_empty() && tx.deadline().is_none(), "nothing more is sent");
    assert_eq!(tx.push(vec![6]), Err(PushError::Ended(vec![6])));
    let u = tx.take_unacknowledged().unwrap();
    assert_eq!(u, Unacknowledged { sent: vec![vec![3], vec![4]], unsent: vec![vec![5]] });
    assert!(tx.is_idle() && tx.take_unacknowledged() == Some(Unacknowledged::default()));

    // A new connection carries them, opened first.
    let mut again = Sender::new(8, cfg(4));
    for p in u.sent.into_iter().chain(u.unsent) {
        again.push(p).unwrap();
    }
    assert_eq!(round(&mut again, &mut c, t1) + round(&mut again, &mut c, t1), 3);

    // Restarted while none of a connection's data was acknowledged: its three payloads
    // delivered, every acknowledgement lost. Sent again, they meet resets, not a new
    // receiver: the connection ends at its first timeout, nothing delivered twice.
    let mut c = Connections::new(no_quiet());
    let mut early = Sender::new(9, cfg(4));
    for i in 0..3 {
        early.push(vec![i]).unwrap();
    }
    assert_eq!(round(&mut early, &mut c, t1), 0, "the open");
    out.clear();
    early.poll(t1, &mut out);
    for p in &out {
        let (h, _) = Header::parse(p).unwrap();
        assert!(c.on_header(PEER, h, t1).unwrap().unwrap().0, "delivered, its acknowledgement lost");
    }
    let mut c = Connections::new(no_quiet());
    assert_eq!(round(&mut early, &mut c, t1 + rto), 0, "nothing delivered again");
    assert_eq!(early.ended(), Some(Ended::Forgotten));
    assert_eq!(early.take_unacknowledged().unwrap().sent, vec![vec![0], vec![1], vec![2]], "given back as sent");

    // A reset of a number behind the window or never sent is stale; a sender hearing nothing
    // does not take its connection for forgotten: the receiver may be slow, or its answers lost.
    let mut lonely = Sender::new(10, cfg(2));
    lonely.push(vec![0]).unwrap();
    assert_eq!(round(&mut lonely, &mut c, t1) + round(&mut lonely, &mut c, t1), 1);
    lonely.push(vec![1]).unwrap();
    for k in 0..10 {
        out.clear();
        lonely.poll(t1 + k * rto, &mut out);
        for seq in [0, 5] {
            let mut a = Vec::new();
            Header { kind: RESET, len: 0, conn: 10, seq }.write(&[], &mut a);
            lonely.on_packet(&a, t1 + k * rto);
        }
    }
    assert!(lonely.ended().is_none() && lonely.stats().timeouts >= 9, "{:?}", lonely.stats());
    assert_eq!(lonely.stats().stale_acks, 20);
    assert_eq!(lonely.take_unacknowledged(), None, "a live connection keeps its payloads");
}

/// Sequence numbers wrap at 2^32: a connection forgotten while its window spans the wrap is
/// found out as anywhere else (a reset, not an acknowledgement of 0 a live receiver could send
/// too).
#[test]
fn a_connection_forgotten_across_the_wrap_is_found_out() {
    let mut c = Connections::new(no_quiet());
    let t0 = Instant::now();
    let mut tx = Sender::starting_at(3, Config { window: 8, ..Config::default() }, u32::MAX - 2);
    for i in 0..6 {
        tx.push(vec![i]).unwrap();
    }
    assert_eq!(round(&mut tx, &mut c, t0), 0, "the open");
    let mut out = Vec::new();
    tx.poll(t0, &mut out);
    let seqs: Vec<u32> = out.iter().map(|p| Header::parse(p).unwrap().0.seq).collect();
    assert_eq!(seqs, [u32::MAX - 2, u32::MAX - 1, u32::MAX, 0, 1, 2]);
    for p in &out[..4] {
        let (h, _) = Header::parse(p).unwrap();
        assert!(c.on_header(PEER, h, t0).unwrap().unwrap().0, "delivered, acknowledgements lost");
    }
    let mut c = Connections::new(no_quiet());
    assert_eq!(round(&mut tx, &mut c, t0 + Duration::from_millis(1)), 0);
    assert_eq!(tx.ended(), Some(Ended::Forgotten));
    assert_eq!(tx.take_unacknowledged().unwrap().sent.len(), 6);
}

/// A sender ends its connection itself after `give_up` (30 s) without progress: with packets
/// (or its open) in flight and nothing moving its window for that long (a partition, or a
/// receiving end gone), so that it does not send again for ever; and with nothing sent or
/// heard for that long, before the receiving end's idle time (60 s) can pass, so that its next
/// payload goes on a new connection, unsent, rather than meet a reset on a forgotten one.
#[test]
fn a_sender_ends_a_connection_unanswered_or_idle() {
    let mut c = Connections::new(no_quiet());
    let mut tx = Sender::new(3, Config::default());
    let t0 = Instant::now();
    tx.push(vec![0]).unwrap();
    tx.push(vec![1]).unwrap();
    assert_eq!(round(&mut tx, &mut c, t0), 0, "the open");
    let mut out = Vec::new();
    tx.poll(t0, &mut out);
    // Payload 0 is delivered; its acknowledgement, and everything after, is lost.
    let (h, _) = Header::parse(&out[0]).unwrap();
    assert!(c.on_header(PEER, h, t0).unwrap().unwrap().0);
    for s in 1..30 {
        out.clear();
        tx.poll(t0 + Duration::from_secs(s), &mut out);
        assert!(!out.is_empty() && tx.ended().is_none(), "at {s} s it still sends again");
    }
    out.clear();
    tx.poll(t0 + Duration::from_secs(30), &mut out);
    assert_eq!(tx.ended(), Some(Ended::Unanswered));
    for s in [31, 61, 120] {
        tx.poll(t0 + Duration::from_secs(s), &mut out);
    }
    assert!(out.is_empty(), "nothing is sent once it ended");
    let u = tx.take_unacknowledged().unwrap();
    assert_eq!((u.sent, u.unsent), (vec![vec![0], vec![1]], vec![]), "0 was delivered; 1 may have been");

    // An open never answered: unanswered too, its payloads unsent.
    let mut shut = Sender::new(5, Config::default());
    shut.push(vec![5]).unwrap();
    for s in 0..=30 {
        out.clear();
        shut.poll(t0 + Duration::from_secs(s), &mut out);
    }
    assert_eq!((out.len(), shut.ended()), (0, Some(Ended::Unanswered)));
    assert_eq!(shut.take_unacknowledged().unwrap(), Unacknowledged { sent: vec![], unsent: vec![vec![5]] });

    // Idle: everything acknowledged, then 30 s of nothing, then a payload.
    let mut tx = Sender::new(4, Config::default());
    tx.push(vec![7]).unwrap();
    assert_eq!(round(&mut tx, &mut c, t0) + round(&mut tx, &mut c, t0), 1);
    tx.push(vec![8]).unwrap();
    out.clear();
    tx.poll(t0 + Duration::from_secs(29), &mut out);
    assert_eq!((out.len(), tx.ended()), (1, None), "29 s: sent");
    let (h, _) = Header::parse(&out[0]).unwrap();
    let (_, ack) = c.on_header(PEER, h, t0 + Duration::from_secs(29)).unwrap().unwrap();
    let mut a = Vec::new();
    ack.write(&[], &mut a);
    tx.on_packet(&a, t0 + Duration::from_secs(29));
    assert!(tx.is_idle());
    tx.push(vec![9]).unwrap();
    out.clear();
    tx.poll(t0 + Duration::from_secs(59), &mut out);
    assert_eq!((out.len(), tx.ended()), (0, Some(Ended::Idle)));
    assert_eq!(tx.take_unacknowledged().unwrap(), Unacknowledged { sent: vec![], unsent: vec![vec![9]] });
}

/// For its quiet time from the first open of a new connection (the idle time by default) a
/// receiving end makes a new connection only at an open that brings its cookie, however few it
/// keeps: an open sent to an instance before it (here, another with a key of its own) makes
/// nothing, nor does that connection's data. After the quiet time an open is taken as it comes;
/// with a quiet time of zero, or cookies off, at once. An update's new instance goes on with the
/// quiet time's start.
#[test]
fn in_its_quiet_time_an_open_brings_a_cookie() {
    let t0 = Instant::now();
    let idle = Duration::from_secs(60);
    let mut earlier = Connections::new(ReceiveConfig::default());
    let mut c = Connections::new(ReceiveConfig::default());
    // The earlier instance's cookie for the open, and the data after it.
    let Some((COOKIE, k)) = answer_to(&mut earlier, PEER, 1, 0, t0) else { panic!("no cookie") };
    assert_eq!(answer_to(&mut earlier, PEER, 1, k, t0), Some((ACK, k)));
    assert_eq!(took(&mut earlier, data(1, k), t0), Ok(Ack(true, k.wrapping_add(1))));
    // Both, delayed, reach this instance (its first packets): nothing made, nothing delivered.
    let Some((COOKIE, mine)) = answer_to(&mut c, PEER, 1, k, t0) else { panic!("made by a late open") };
    assert_ne!(mine, k);
    assert_eq!(took(&mut c, data(1, k), t0), Ok(Reset(k)));
    assert_eq!((c.len(), c.opened(), c.cookies()), (0, 0, 1));
    // Its own cookie opens it; its data at 30 s keeps it live past the quiet time (else the
    // pass may forget it at 60 s, idle for its whole time, or not yet, as its map falls).
    assert_eq!(answer_to(&mut c, PEER, 1, mine, t0), Some((ACK, mine)));
    let t30 = t0 + Duration::from_secs(30);
    assert_eq!(took(&mut c, data(1, mine), t30), Ok(Ack(true, mine.wrapping_add(1))));
    // Still quiet just before the idle time has passed since that open; not after.
    let late = t0 + idle - Duration::from_millis(1);
    assert!(matches!(answer_to(&mut c, PEER, 2, 0, late), Some((COOKIE, _))));
    assert_eq!(answer_to(&mut c, PEER, 2, 0, t0 + idle), Some((ACK, 0)));
    assert_eq!((c.len(), c.opened()), (2, 2));
    // A quiet time of its own length, of zero, or cookies off.
    let mut short = Connections::new(ReceiveConfig { quiet: Some(Duration::from_secs(5)), ..ReceiveConfig::default() });
    assert!(matches!(answer_to(&mut short, PEER, 1, 0, t0), Some((COOKIE, _))));
    assert_eq!(answer_to(&mut short, PEER, 1, 0, t0 + Duration::from_secs(5)), Some((ACK, 0)));
    assert_eq!(answer_to(&mut Connections::new(no_quiet()), PEER, 1, 0, t0), Some((ACK, 0)));
    let off = ReceiveConfig { cookies_from: Some(4096), ..ReceiveConfig::default() };
    assert_eq!(answer_to(&mut Connections::new(off), PEER, 1, 0, t0), Some((ACK, 0)));
    // The next generation of `c` (an update) is past its quiet time too.
    let mut next = Connections::new(ReceiveConfig::default());
    next.swap_connections(&mut c);
    assert_eq!(answer_to(&mut next, PEER, 3, 0, t0 + idle), Some((ACK, 0)));
}

proptest! {
    /// Exactly once across change: a stream of payloads over a network that loses, duplicates and
    /// reorders, through a receiving end that is restarted or cut off for longer than its idle time
    /// (its connections forgotten) at a random moment, the network's packets lost with it; with or
    /// without every open asked for a cookie (a restarted receiving end's key new) — or, at a
    /// restart, with every packet sent before it arriving after it, in the order sent (it fails
    /// without the quiet time: the first open makes the connection again, and its payloads are
    /// delivered again). Whenever the sender ends a connection, the application carries what it
    /// gives back on a new one. Every payload is delivered; in order, each once — but for those the
    /// sender gave back as sent and not acknowledged, which may be delivered twice (once before the
    /// end, once after), and only then. It fails with connections made by data rather than opens (a
    /// restart before any acknowledgement: the first payloads delivered again, none given back).
    #[test]
    fn exactly_once_but_for_what_an_ended_connection_gives_back(
        seed in any::<u64>(),
        cut_at in prop_oneof![0usize..6, 0usize..400],
        restart in any::<bool>(),
        loss in 0u32..30,
        cookies in any::<bool>(),
        late in any::<bool>(),
    ) {
        let mut rng = seed | 1;
        let mut rand = move |n: u32| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % u64::from(n)) as u32
        };
        let idle = Duration::from_secs(60);
        // With `cookies`, every open must bring one (a restarted receiving end's key is new).
        let receive = ReceiveConfig { idle, cookies_from: cookies.then_some(0), ..ReceiveConfig::default() };
        let mut c = Connections::new(receive);
        let cfg = Config { window: 8, rto: Duration::from_millis(1), queue: 1024, ..Config::default() };
        let (mut conn, mut tx) = (1u32, Sender::new(1, cfg));
        let n = 120u32;
        let mut pushed = 0u32;
        let mut delivered: Vec<u32> = Vec::new();
        let mut given_back: Vec<u32> = Vec::new();
        let mut now = Instant::now();
        let (mut to_rx, mut to_tx): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
        let id = |p: &[u8]| u32::from_be_bytes(p[..4].try_into().unwrap());
        // Every packet sent before a restart (with `late`), to arrive after it.
        let mut sent_before: Vec<Vec<u8>> = Vec::new();
        for step in 0..20_000usize {
            if step == cut_at {
                if restart {
                    c = Connections::new(receive);
                    if late {
                        to_rx.clear();
                        to_rx.append(&mut sent_before);
                        to_tx.clear();
                    }
                } else {
                    // Cut off for longer than the idle time: everything in the network lost,
                    // the sender polled now and then meanwhile, its packets lost too.
                    for _ in 0..70 {
                        now += Duration::from_secs(1);
                        let mut lost = Vec::new();
                        tx.poll(now, &mut lost);
                    }
                }
                if !(restart && late) {
                    to_rx.clear();
                    to_tx.clear();
                }
            }
            let arriving_late = !to_rx.is_empty() && step == cut_at && restart && late;
            now += Duration::from_micros(200);
            // Payloads come in a few at a time.
            while pushed < n && pushed < (step as u32 / 2) + 1 && tx.ended().is_none() {
                if tx.push(pushed.to_be_bytes().to_vec()).is_err() {
                    break;
                }
                pushed += 1;
            }
            if tx.ended().is_some() {
                let u = tx.take_unacknowledged().unwrap();
                given_back.extend(u.sent.iter().map(|p| id(p)));
                conn += 1;
                tx = Sender::new(conn, cfg);
                for p in u.sent.into_iter().chain(u.unsent) {
                    tx.push(p).unwrap();
                }
            }
            let mut out = Vec::new();
            tx.poll(now, &mut out);
            if late && restart && step < cut_at {
                sent_before.extend(out.iter().cloned());
            }
            for p in out {
                if rand(100) >= loss {
                    to_rx.push(p.clone());
                }
                if rand(100) < 5 {
                    to_rx.push(p);
                }
            }
            // Reordered: delivered from a random point of the queue round (but those sent before
            // a restart, which come first and in order).
            if !to_rx.is_empty() && !arriving_late {
                let k = rand(to_rx.len() as u32) as usize;
                to_rx.rotate_left(k);
            }
            for p in to_rx.drain(..) {
                let (h, payload) = Header::parse(&p).unwrap();
                if let Ok(Some((d, ack))) = c.on_header(PEER, h, now) {
                    if d {
                        delivered.push(id(payload));
                    }
                    let mut a = Vec::new();
                    ack.write(&[], &mut a);
                    if rand(100) >= loss {
                        to_tx.push(a);
                    }
                }
            }
            for a in to_tx.drain(..) {
                tx.on_packet(&a, now);
            }
            if pushed == n && tx.is_idle() {
                break;
            }
        }
        prop_assert!(pushed == n && tx.is_idle(), "stuck: {} of {n} pushed, {:?}", pushed, tx.stats());
        // Every payload, in order but for what was given back and sent again.
        let mut seen = std::collections::HashMap::new();
        for &d in &delivered {
            *seen.entry(d).or_insert(0u32) += 1;
        }
        for p in 0..n {
            let times = seen.get(&p).copied().unwrap_or(0);
            prop_assert!(times >= 1, "payload {} never delivered", p);
            prop_assert!(times == 1 || given_back.contains(&p), "payload {} delivered {} times", p, times);
        }
        let firsts: Vec<u32> = delivered.iter().enumerate().filter(|(i, d)| !delivered[..*i].contains(d)).map(|(_, d)| *d).collect();
        prop_assert_eq!(firsts, (0..n).collect::<Vec<_>>(), "first deliveries in order");
    }
}

/// `n` payloads from a sender on one port to a receiver on the other, both ways through
/// `faults`; the payloads delivered, in delivery order.
fn transfer(n: u32, start: u32, window: u32, faults: FaultConfig) -> (Vec<Vec<u8>>, Sender, Receiver) {
    let pool = Pool::new(4096, 2048);
    let (a, b) = mem::pair(&pool, 4096);
    let (a_addr, b_addr) = (a.local_addr(), b.local_addr());
    let mut a = FaultInjector::new(a, &pool, faults);
    let mut b = b;
    let cfg = Config { window, rto: Duration::from_millis(2), queue: 1 << 16, ..Config::default() };
    let mut tx = Sender::starting_at(11, cfg, start);
    let mut rx = Receiver::starting_at(11, start);
    let payload = |i: u32| {
        let len = (i as usize * 37) % 300;
        (0..len).map(|k| (k as u32 ^ i) as u8).collect::<Vec<u8>>()
    };
    for i in 0..n {
        tx.push(payload(i)).unwrap();
    }
    let mut delivered = Vec::new();
    let (mut out, mut batch) = (Vec::new(), Batch::new(64));
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered.len() < n as usize || !tx.is_idle() {
        assert!(Instant::now() < deadline, "{} of {n} delivered after 60 s", delivered.len());
        let now = Instant::now();
        out.clear();
        tx.poll(now, &mut out);
        for p in out.drain(..) {
            let mut pk = pool.packet();
            pk.extend_from_slice(&p).unwrap();
            pk.set_peer(b_addr);
            batch.push(pk);
        }
        a.send(now, &mut batch).unwrap();
        batch.recycle(&pool);
        // The receiver's side.
        b.recv(now, &mut batch).unwrap();
        let mut acks = Vec::new();
        for pk in batch.drain() {
            let (d, ack) = rx.on_packet(pk.data());
            delivered.extend(d);
            acks.extend(ack);
            pool.put(pk);
        }
        for ack in acks {
            let mut pk = pool.packet();
            pk.extend_from_slice(&ack).unwrap();
            pk.set_peer(a_addr);
            batch.push(pk);
        }
        b.send(now, &mut batch).unwrap();
        batch.recycle(&pool);
        a.recv(now, &mut batch).unwrap();
        for pk in batch.drain() {
            tx.on_packet(pk.data(), now);
            pool.put(pk);
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let want: Vec<Vec<u8>> = (0..n).map(payload).collect();
    assert_eq!(delivered, want, "every payload once, in order");
    (delivered, tx, rx)
}

#[test]
fn pairs_over_the_fault_injector_deliver_once_and_in_order() {
    for seed in [1, 2, 3] {
        let faults = FaultConfig { loss: 0.10, duplicate: 0.05, reorder: 0.10, seed, ..FaultConfig::default() };
        let (_, tx, rx) = transfer(500, 0, 16, faults);
        let (s, r) = (tx.stats(), rx.stats());
        assert!(s.retransmitted > 0 && s.timeouts > 0, "seed {seed}: {s:?}");
        assert_eq!(tx.ended(), None, "seed {seed}: a live connection ended");
        assert!(r.out_of_order > 0, "seed {seed}: {r:?}");
    }
}

#[test]
fn sequence_numbers_wrap() {
    let faults = FaultConfig { loss: 0.05, reorder: 0.05, seed: 9, ..FaultConfig::default() };
    transfer(300, u32::MAX - 100, 8, faults);
}

proptest! {
    /// Any bytes: a packet or a named refusal, never a panic; a packet written back is the
    /// same bytes.
    #[test]
    fn the_parser_takes_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..40)) {
        if let Ok((h, p)) = Header::parse(&b) {
            let mut again = Vec::new();
            h.write(p, &mut again);
            prop_assert_eq!(again, b);
        }
    }
}

/// A sender started again with its connection id (a process restarted) while the receiving end
/// keeps the earlier connection: with a random initial number, or the same one (0 both times),
/// its open is answered with a cookie, its open with the cookie begins the connection again
/// there, and its payloads are delivered from it, once; so too when the earlier connection was
/// itself opened with this period's cookie (in the quiet time), where the cookie given is that
/// number's other (its lowest bit flipped), not the number the connection has. (With the same
/// number the open was once taken for a copy of the earlier one's, answered with the number that
/// connection had reached, and the sender never opened; and with this period's cookie, the
/// sender's open with it was.)
#[test]
fn a_sender_started_again_with_its_id_begins_the_connection_again() {
    let t0 = Instant::now();
    let rounds = |tx: &mut Sender, c: &mut Connections| (0..3).map(|_| round(tx, c, t0)).sum::<usize>();
    let mut c = Connections::new(no_quiet());
    let mut first = Sender::random_start(4, Config::default()).unwrap();
    for i in 0..3 {
        first.push(vec![i]).unwrap();
    }
    assert_eq!(rounds(&mut first, &mut c), 3);
    let mut again = Sender::random_start(4, Config::default()).unwrap();
    again.push(vec![9]).unwrap();
    assert_eq!(rounds(&mut again, &mut c), 1, "{:?}", again.stats());
    assert!(again.is_idle() && c.reopened() == 1 && c.len() == 1);

    let mut c = Connections::new(no_quiet());
    let mut first = Sender::new(4, Config::default());
    for i in 0..3 {
        first.push(vec![i]).unwrap();
    }
    assert_eq!(rounds(&mut first, &mut c), 3);
    let mut again = Sender::new(4, Config::default());
    again.push(vec![9]).unwrap();
    assert_eq!(rounds(&mut again, &mut c), 1, "{:?}", again.stats());
    assert!(again.is_idle() && again.stats().cookies == 1 && c.reopened() == 1 && c.len() == 1);

    // In the quiet time: the earlier connection opened with this period's cookie, `k`.
    let mut c = Connections::new(ReceiveConfig::default());
    let Some((COOKIE, k)) = answer_to(&mut c, PEER, 4, 123, t0) else { panic!("no cookie") };
    assert_eq!(answer_to(&mut c, PEER, 4, k, t0), Some((ACK, k)));
    for i in 0..3 {
        assert_eq!(took(&mut c, data(4, k.wrapping_add(i)), t0), Ok(Ack(true, k.wrapping_add(i + 1))));
    }
    // A late copy of its open begins nothing: answered with another cookie, the connection
    // goes on.
    assert!(matches!(answer_to(&mut c, PEER, 4, k, t0), Some((COOKIE, x)) if x != k));
    assert_eq!(took(&mut c, data(4, k.wrapping_add(3)), t0), Ok(Ack(true, k.wrapping_add(4))));
    let mut again = Sender::random_start(4, Config::default()).unwrap();
    again.push(vec![9]).unwrap();
    assert_eq!(rounds(&mut again, &mut c), 1, "{:?}", again.stats());
    assert!(again.is_idle() && c.reopened() == 1 && c.len() == 1);
}

/// A late copy of an open that made a connection, arriving after a sender started again with
/// the id has begun it again, begins nothing, however young: not the first connection's open (it
/// brought this period's cookie for a new connection), nor the reopening one (its number is the
/// connection's now); each is answered with a cookie, and the data of the sender started again
/// goes on being delivered, once each. (With the cookie to begin a kept connection again made as
/// a new connection's is, the first open's copy began it again, and the sender started again
/// then saw its payload delivered twice.)
#[test]
fn a_late_copy_of_an_earlier_open_begins_nothing_again() {
    let t0 = Instant::now();
    let mut c = Connections::new(ReceiveConfig::default());
    // In the quiet time: the first connection opened with this period's cookie, `k`.
    let Some((COOKIE, k)) = answer_to(&mut c, PEER, 4, 123, t0) else { panic!("no cookie") };
    assert_eq!(answer_to(&mut c, PEER, 4, k, t0), Some((ACK, k)));
    assert_eq!(took(&mut c, data(4, k), t0), Ok(Ack(true, k.wrapping_add(1))));
    // A sender started again with the id: a cookie for the kept connection, `r`; it begins the
    // connection again at `r`.
    let Some((COOKIE, r)) = answer_to(&mut c, PEER, 4, 77, t0) else { panic!("no cookie") };
    assert_ne!(r, k);
    assert_eq!(answer_to(&mut c, PEER, 4, r, t0), Some((ACK, r)));
    assert_eq!(c.reopened(), 1);
    assert_eq!(took(&mut c, data(4, r), t0), Ok(Ack(true, r.wrapping_add(1))));
    // The late copies, a second on.
    let t1 = t0 + Duration::from_secs(1);
    for late in [k, r] {
        assert!(matches!(answer_to(&mut c, PEER, 4, late, t1), Some((COOKIE, x)) if x != late && x != r));
    }
    assert_eq!(c.reopened(), 1, "a late open began the connection again");
    assert_eq!(took(&mut c, data(4, r), t1), Ok(Ack(false, r.wrapping_add(1))), "delivered once");
    assert_eq!(took(&mut c, data(4, r.wrapping_add(1)), t1), Ok(Ack(true, r.wrapping_add(2))));
}

/// The answer to an open, with its kind.
fn answer_to(c: &mut Connections, from: Peer, conn: u32, seq: u32, now: Instant) -> Option<(u8, u32)> {
    let open = Header { kind: OPEN, len: 0, conn, seq };
    c.on_header(from, open, now).ok().flatten().map(|(d, a)| {
        assert!(!d);
        (a.kind, a.seq)
    })
}

/// While it keeps `cookies_from` connections or more, the receiving end makes a new connection
/// only at an open that brings its cookie — the initial number a cookie gave that peer for that
/// connection id, in this period or the last — and answers any other with a cookie, keeping
/// nothing: so opens from addresses that never get its answers (spoofed) make nothing, and a
/// peer cannot use another's cookie.
#[test]
fn while_many_are_kept_an_open_brings_a_cookie() {
    let cfg = ReceiveConfig { max_connections: 8, cookies_from: Some(2), ..no_quiet() };
    let mut c = Connections::new(cfg);
    let t0 = Instant::now();
    assert_eq!(answer_to(&mut c, PEER, 1, 0, t0), Some((ACK, 0)), "few kept: no cookie");
    assert_eq!(answer_to(&mut c, PEER, 2, 0, t0), Some((ACK, 0)));
    let Some((COOKIE, k)) = answer_to(&mut c, PEER, 3, 0, t0) else { panic!("no cookie") };
    assert_eq!((c.len(), c.cookies()), (2, 1));
    assert_eq!(answer_to(&mut c, PEER, 3, k, t0), Some((ACK, k)), "the cookie opens it");
    assert_eq!(took(&mut c, data(3, k), t0), Ok(Ack(true, k.wrapping_add(1))));
    assert_eq!(c.len(), 3);
    // Another number, or the cookie from another peer, or for another id: a cookie, nothing made.
    let intruder: Peer = ([10, 0, 0, 66], 7000);
    let Some((COOKIE, k4)) = answer_to(&mut c, PEER, 4, k.wrapping_add(1), t0) else { panic!() };
    assert!(matches!(answer_to(&mut c, intruder, 4, k4, t0), Some((COOKIE, x)) if x != k4));
    assert!(matches!(answer_to(&mut c, PEER, 5, k4, t0), Some((COOKIE, x)) if x != k4));
    assert_eq!(c.len(), 3);
    // Good for the period it was made in and the next (10 s each): not after.
    assert_eq!(answer_to(&mut c, PEER, 4, k4, t0 + Duration::from_secs(15)), Some((ACK, k4)));
    let Some((COOKIE, k6)) = answer_to(&mut c, PEER, 6, 0, t0) else { panic!() };
    assert!(matches!(answer_to(&mut c, PEER, 6, k6, t0 + Duration::from_secs(25)), Some((COOKIE, x)) if x != k6));
    // A flood of opens from addresses that never answer: cookies, and nothing kept.
    let before = (c.len(), c.cookies());
    for a in 0..1000u32 {
        let spoofed: Peer = ([172, 16, (a >> 8) as u8, a as u8], 9);
        assert!(matches!(answer_to(&mut c, spoofed, 1, a, t0), Some((COOKIE, _))));
    }
    assert_eq!((c.len(), c.cookies()), (before.0, before.1 + 1000));
}

/// A sender takes a cookie while opening: its initial number becomes the cookie's, its open
/// goes again at once with it, and the connection opens and carries its payloads from there.
#[test]
fn a_sender_opens_with_the_cookie_it_is_given() {
    let cfg = ReceiveConfig { cookies_from: Some(0), ..ReceiveConfig::default() };
    let mut c = Connections::new(cfg);
    let t0 = Instant::now();
    let mut tx = Sender::new(9, Config::default());
    tx.push(vec![1]).unwrap();
    tx.push(vec![2]).unwrap();
    assert_eq!(round(&mut tx, &mut c, t0), 0, "the open, answered with a cookie");
    assert!(!tx.is_open() && tx.stats().cookies == 1);
    assert_eq!(tx.deadline(), Some(t0), "the open goes again at once");
    assert_eq!(round(&mut tx, &mut c, t0), 0, "the open with the cookie");
    assert!(tx.is_open());
    let mut out = Vec::new();
    tx.poll(t0, &mut out);
    let k = Header::parse(&out[0]).unwrap().0.seq;
    assert_eq!(answer_to(&mut Connections::new(cfg), PEER, 9, 0, t0).map(|a| a.0), Some(COOKIE));
    for p in &out {
        let (h, _) = Header::parse(p).unwrap();
        assert!(c.on_header(PEER, h, t0).unwrap().unwrap().0, "delivered from the cookie's number {k}");
    }
    let s = tx.stats();
    assert_eq!((s.opens, s.cookies, s.timeouts, c.opened(), c.cookies()), (2, 1, 0, 1, 1));
}

/// A quiet time or idle time of any length makes no panic: the longest ask for a cookie for as
/// long as the process runs.
#[test]
fn any_quiet_time_is_taken() {
    let t0 = Instant::now();
    for quiet in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
        let cfg = ReceiveConfig { quiet: Some(quiet), idle: Duration::MAX, ..ReceiveConfig::default() };
        let mut c = Connections::new(cfg);
        assert!(matches!(answer_to(&mut c, PEER, 1, 0, t0), Some((COOKIE, _))));
        let later = t0 + Duration::from_secs(1 << 31);
        assert!(matches!(answer_to(&mut c, PEER, 2, 0, later), Some((COOKIE, _))));
        let mut next = Connections::new(ReceiveConfig::default());
        next.swap_connections(&mut c);
        c.swap_connections(&mut next);
    }
}
