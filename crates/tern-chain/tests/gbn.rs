//! The go-back-N transport: its header byte for byte, a parser that refuses what is not a
//! packet, and sender/receiver pairs over the `FaultInjector` (seeded loss, duplication and
//! reordering) delivering every payload once and in order, across the sequence numbers' wrap;
//! the receiving end's connections bounded and forgotten when idle.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use tern_chain::gbn::{
    ACK, Config, Connections, DATA, Ended, HEADER_LEN, Header, MAX_PAYLOAD, PacketError, Peer, PushError,
    ReceiveConfig, Receiver, Refused, Sender, Unacknowledged,
};
use tern_io::fault::{FaultConfig, FaultInjector};
use tern_io::{Batch, Pool, Port, mem};

#[test]
fn the_header_is_the_documented_bytes() {
    let mut b = Vec::new();
    Header { kind: DATA, len: 2, conn: 0x0102_0304, seq: 5 }.write(b"ab", &mut b);
    assert_eq!(b, [1, 1, 0, 2, 1, 2, 3, 4, 0, 0, 0, 5, b'a', b'b']);
    let mut a = Vec::new();
    Header { kind: ACK, len: 0, conn: 9, seq: 0xdead_beef }.write(&[], &mut a);
    assert_eq!(a, [1, 2, 0, 0, 0, 0, 0, 9, 0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(HEADER_LEN, 12);
    let (h, p) = Header::parse(&b).unwrap();
    assert_eq!((h, p), (Header { kind: DATA, len: 2, conn: 0x0102_0304, seq: 5 }, &b"ab"[..]));
}

fn data(conn: u32, seq: u32) -> Header {
    Header { kind: DATA, len: 0, conn, seq }
}

/// The peer the tests' packets come from.
const PEER: Peer = ([10, 0, 0, 1], 7000);

/// Whether the packet (from [`PEER`]) is delivered, and the sequence number its acknowledgement
/// asks for next.
fn took(c: &mut Connections, h: Header, now: Instant) -> Result<(bool, u32), Refused> {
    took_from(c, PEER, h, now)
}

/// [`took`], the packet from `from`.
fn took_from(c: &mut Connections, from: Peer, h: Header, now: Instant) -> Result<(bool, u32), Refused> {
    c.on_header(from, h, now).map(|a| a.map(|(d, ack)| (d, ack.seq)).expect("a data packet is answered"))
}

/// A connection is its peer's (address and port) connection id: another peer sending data with
/// the same id — a client guessing another's — has a connection of its own, delivers nothing
/// into the first's stream and takes none of its sequence numbers.
#[test]
fn a_connection_is_its_peers_alone() {
    let mut c = Connections::new(ReceiveConfig::default());
    let t0 = Instant::now();
    let intruder: Peer = ([10, 0, 0, 66], 7000);
    assert_eq!(took(&mut c, data(5, 0), t0), Ok((true, 1)));
    // The intruder sends the victim's next number on the victim's id: a new connection of its
    // own, which expects 0, so nothing is delivered.
    assert_eq!(took_from(&mut c, intruder, data(5, 1), t0), Ok((false, 0)));
    // The victim's own packet 1 is still the next expected and delivered once.
    assert_eq!(took(&mut c, data(5, 1), t0), Ok((true, 2)));
    assert_eq!(took(&mut c, data(5, 1), t0), Ok((false, 2)));
    // Another port of the same address is another peer too.
    assert_eq!(took_from(&mut c, (PEER.0, 7001), data(5, 0), t0), Ok((true, 1)));
    assert_eq!(c.len(), 3);
}

#[test]
fn a_connection_idle_for_its_time_is_forgotten_and_starts_again_at_zero() {
    let idle = Duration::from_secs(60);
    let mut c = Connections::new(ReceiveConfig { max_connections: 8, idle, ..ReceiveConfig::default() });
    let t0 = Instant::now();
    assert_eq!(took(&mut c, data(1, 0), t0), Ok((true, 1)));
    assert_eq!(took(&mut c, data(1, 1), t0 + Duration::from_secs(30)), Ok((true, 2)));
    // Just short of idle since its last data packet: still known.
    assert_eq!(took(&mut c, data(1, 2), t0 + Duration::from_secs(89)), Ok((true, 3)));
    assert_eq!(c.expired(), 0);
    // A whole idle period since: forgotten, so its next number is not delivered and the
    // acknowledgement asks for 0, as for a new connection.
    assert_eq!(took(&mut c, data(1, 3), t0 + Duration::from_secs(149)), Ok((false, 0)));
    assert_eq!(c.expired(), 1);
    assert_eq!(took(&mut c, data(1, 0), t0 + Duration::from_secs(150)), Ok((true, 1)));
    // What is not data makes and refreshes no connection.
    assert_eq!(c.on_header(PEER, Header { kind: ACK, len: 0, conn: 2, seq: 0 }, t0), Ok(None));
    assert_eq!(c.len(), 1);
}

#[test]
fn connections_are_bounded_and_an_idle_one_gives_its_place_up() {
    let idle = Duration::from_secs(10);
    let mut c = Connections::new(ReceiveConfig { max_connections: 2, idle, ..ReceiveConfig::default() });
    let t0 = Instant::now();
    assert!(took(&mut c, data(1, 0), t0).is_ok() && took(&mut c, data(2, 0), t0).is_ok());
    // A third is refused; the two kept go on.
    assert_eq!(took(&mut c, data(3, 0), t0), Err(Refused::ConnectionsFull(2)));
    assert_eq!(took(&mut c, data(1, 1), t0 + Duration::from_secs(5)), Ok((true, 2)));
    // Connection 2 idle for its time: within a tenth of it more and the 128 data packets after
    // (here connection 1's, sent again), its place is free.
    let later = t0 + idle + idle / 10;
    assert_eq!(took(&mut c, data(3, 0), later), Err(Refused::ConnectionsFull(2)), "not yet looked at");
    for _ in 0..127 {
        took(&mut c, data(1, 1), later).unwrap();
    }
    assert_eq!(took(&mut c, data(3, 0), later), Ok((true, 1)));
    assert_eq!((c.len(), c.expired()), (2, 1));
    assert_eq!(took(&mut c, data(1, 2), later), Ok((true, 3)), "connection 1 was not idle");
}

/// One address cannot take every connection: past its share (its ports together) its new
/// connections are refused (`PeerFull`), its kept ones go on, another address still gets one,
/// and once its own idle it gets new ones again.
#[test]
fn one_address_keeps_to_its_share_of_connections() {
    let idle = Duration::from_secs(10);
    let cfg = ReceiveConfig { max_connections: 8, max_connections_per_peer: 3, idle };
    let mut c = Connections::new(cfg);
    let t0 = Instant::now();
    for (port, conn) in [(7000, 1), (7000, 2), (7001, 1)] {
        assert_eq!(took_from(&mut c, (PEER.0, port), data(conn, 0), t0), Ok((true, 1)));
    }
    assert_eq!(took_from(&mut c, (PEER.0, 7002), data(1, 0), t0), Err(Refused::PeerFull(3)));
    assert_eq!(took(&mut c, data(3, 0), t0), Err(Refused::PeerFull(3)));
    assert_eq!(took(&mut c, data(2, 1), t0 + Duration::from_secs(5)), Ok((true, 2)), "a kept one goes on");
    assert_eq!(took_from(&mut c, ([10, 0, 0, 2], 7000), data(1, 0), t0), Ok((true, 1)));
    // Two of its three idle for their time (connection 2 had data at 5 s): once looked at (128
    // data packets), two new ones.
    let later = t0 + idle + idle / 10;
    for _ in 0..128 {
        took(&mut c, data(2, 1), later).unwrap();
    }
    assert_eq!(took(&mut c, data(3, 0), later), Ok((true, 1)));
    assert_eq!(took_from(&mut c, (PEER.0, 7002), data(1, 0), later), Ok((true, 1)));
    assert_eq!(took(&mut c, data(4, 0), later), Err(Refused::PeerFull(3)));
    assert_eq!(Refused::PeerFull(3).to_string(), "the peer's address holds its share of the connections (at most 3)");
}

proptest! {
    /// Any data packets from three addresses (two ports each) at any times, a share of 2
    /// connections an address, and between them any number of data packets of a fourth
    /// address's one connection: an address never keeps more than its share of live
    /// connections, and is refused `PeerFull` only while it keeps its share of connections
    /// whose data came within the idle time and a tenth or fewer than 128 data packets ago
    /// (docs/chain.md: how long an idle connection may hold its place).
    #[test]
    fn each_address_keeps_to_its_share(
        steps in proptest::collection::vec((0u8..3, 0u16..2, 0u32..4, 0u64..400, 0usize..24), 1..300),
    ) {
        const SHARE: usize = 2;
        let idle = Duration::from_secs(1);
        let mut c = Connections::new(ReceiveConfig { max_connections: 64, max_connections_per_peer: SHARE, idle });
        let mut now = Instant::now();
        // The model: each (peer, connection) answered, and its last data packet's time; the
        // times of every data packet so far.
        let mut last: std::collections::HashMap<(Peer, u32), Instant> = std::collections::HashMap::new();
        let mut packets: Vec<Instant> = Vec::new();
        let live = |last: &std::collections::HashMap<(Peer, u32), Instant>, addr: u8, now: Instant| {
            last.iter().filter(|&(&((a, _), _), &t)| a[3] == addr && now.duration_since(t) < idle).count()
        };
        for (addr, port, conn, ms, others) in steps {
            now += Duration::from_millis(ms);
            for _ in 0..others {
                packets.push(now);
                prop_assert!(matches!(c.on_header(([10, 0, 0, 9], 9), data(1, 0), now), Ok(Some(_))));
            }
            let from: Peer = ([10, 0, 0, addr], 7000 + port);
            // A data packet whose number the model does not follow: only the connection counts.
            packets.push(now);
            match c.on_header(from, data(conn, 0), now) {
                Ok(Some(_)) => {
                    last.insert((from, conn), now);
                    let live = live(&last, addr, now);
                    prop_assert!(live <= SHARE, "address {addr} keeps {live} live connections");
                }
                Ok(None) => prop_assert!(false, "a data packet unanswered"),
                Err(e) => {
                    prop_assert_eq!(e, Refused::PeerFull(SHARE), "64 connections cannot run out");
                    // Those that may still hold their place: data within 1.1 idle times, or
                    // fewer than 128 data packets since then.
                    let may_hold = last
                        .iter()
                        .filter(|&(&((a, _), _), &t)| {
                            let due = t + idle + idle / 10;
                            a[3] == addr && (now < due || packets.iter().filter(|&&p| p >= due).count() < 128)
                        })
                        .count();
                    prop_assert!(may_hold >= SHARE, "address {addr} refused with {may_hold} connections in the way");
                }
            }
        }
    }

    /// Any data packets of any connections at any times: never more connections than the
    /// bound, and a connection's delivered numbers run 0, 1, 2, ... from each time it was
    /// (re)made.
    #[test]
    fn connections_never_pass_their_bound(
        steps in proptest::collection::vec((0u32..40, 0u32..4, 0u64..3000), 1..400),
    ) {
        let idle = Duration::from_secs(1);
        let mut c = Connections::new(ReceiveConfig { max_connections: 16, idle, ..ReceiveConfig::default() });
        let mut now = Instant::now();
        // The model: each connection's next number and its last data packet's time; one idle
        // for `idle` since is new again.
        let mut known: std::collections::HashMap<u32, (u32, Instant)> = std::collections::HashMap::new();
        for (conn, seq, ms) in steps {
            now += Duration::from_millis(ms / 10);
            match c.on_header(PEER, data(conn, seq), now) {
                Ok(Some((delivered, ack))) => {
                    let want = match known.get(&conn) {
                        Some(&(next, last)) if now.duration_since(last) < idle => next,
                        _ => 0,
                    };
                    prop_assert_eq!(delivered, seq == want);
                    prop_assert_eq!(ack.seq, if delivered { want + 1 } else { want });
                    known.insert(conn, (ack.seq, now));
                }
                Ok(None) => prop_assert!(false, "a data packet unanswered"),
                Err(e) => prop_assert_eq!(e, Refused::ConnectionsFull(16)),
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
    assert_eq!(Header::parse(&with(0, 2)), Err(PacketError::Version(2)));
    assert_eq!(Header::parse(&with(1, 3)), Err(PacketError::Kind(3)));
    assert_eq!(Header::parse(&with(3, 2)), Err(PacketError::Length { len: 2, have: 1 }));
    // An acknowledgement with a payload; a payload over the limit.
    assert_eq!(Header::parse(&with(1, ACK)), Err(PacketError::Length { len: 1, have: 1 }));
    let mut big = Vec::new();
    Header { kind: DATA, len: (MAX_PAYLOAD + 1) as u16, conn: 1, seq: 1 }.write(&vec![0; MAX_PAYLOAD + 1], &mut big);
    assert!(matches!(Header::parse(&big), Err(PacketError::Length { .. })));
    assert_eq!(PacketError::Length { len: 2, have: 1 }.to_string(), "length 2 with 1 bytes after the header");
}

#[test]
fn a_receiver_delivers_only_the_next_in_order_and_acks_what_it_expects() {
    let mut tx = Sender::new(3, Config { window: 4, ..Config::default() });
    let mut rx = Receiver::new(3);
    for i in 0..3u8 {
        tx.push(vec![i]).unwrap();
    }
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
    let mut other = Vec::new();
    Header { kind: DATA, len: 0, conn: 4, seq: 2 }.write(&[], &mut other);
    assert_eq!(rx.on_packet(&other), (None, None));
    assert_eq!(rx.stats().malformed, 1);
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

/// The receiving end restarts (its connections forgotten); the sender, going on, hears
/// acknowledgements of 0 behind its window. After two timeouts in a row without progress it
/// ends the connection as forgotten, sends and queues nothing more, and gives its payloads
/// back: those sent (perhaps delivered in part, had acknowledgements been lost) and those not.
/// A sender whose packets or acknowledgements are only lost never ends so.
#[test]
fn a_sender_finds_out_that_the_receiving_end_forgot_its_connection() {
    let mut c = Connections::new(ReceiveConfig::default());
    let rto = Duration::from_millis(1);
    let cfg = |window| Config { window, rto, queue: 16, ..Config::default() };
    let mut tx = Sender::new(7, cfg(2));
    let t0 = Instant::now();
    for i in 0..3 {
        tx.push(vec![i]).unwrap();
    }
    assert_eq!(round(&mut tx, &mut c, t0) + round(&mut tx, &mut c, t0), 3);
    assert!(tx.is_idle());

    // The receiving end restarts, and meets 3 and 4 with acknowledgements of 0.
    let mut c = Connections::new(ReceiveConfig::default());
    let t1 = t0 + Duration::from_secs(1);
    for i in 3..6 {
        tx.push(vec![i]).unwrap();
    }
    assert_eq!(round(&mut tx, &mut c, t1), 0);
    assert_eq!(tx.ended(), None, "a stale acknowledgement alone proves nothing");
    assert_eq!(round(&mut tx, &mut c, t1 + rto), 0);
    assert_eq!(tx.ended(), None, "nor after one timeout");
    assert_eq!(round(&mut tx, &mut c, t1 + 2 * rto), 0);
    assert_eq!(tx.ended(), Some(Ended::Forgotten), "{:?}", tx.stats());
    let mut out = Vec::new();
    tx.poll(t1 + 10 * rto, &mut out);
    assert!(out.is_empty() && tx.deadline().is_none(), "nothing more is sent");
    assert_eq!(tx.push(vec![6]), Err(PushError::Ended(vec![6])));
    let u = tx.take_unacknowledged().unwrap();
    assert_eq!(u, Unacknowledged { sent: vec![vec![3], vec![4]], unsent: vec![vec![5]] });
    assert!(tx.is_idle() && tx.take_unacknowledged() == Some(Unacknowledged::default()));

    // A new connection carries them, from 0.
    let mut again = Sender::new(8, cfg(4));
    for p in u.sent.into_iter().chain(u.unsent) {
        again.push(p).unwrap();
    }
    assert_eq!(round(&mut again, &mut c, t1), 3);

    // A sender hearing nothing, or acknowledgements that do not move its window, does not
    // take its connection for forgotten: the receiver may be slow, or its acknowledgements lost.
    let mut lonely = Sender::new(9, cfg(2));
    lonely.push(vec![0]).unwrap();
    assert_eq!(round(&mut lonely, &mut c, t1), 1);
    lonely.push(vec![1]).unwrap();
    for k in 0..10 {
        lonely.poll(t1 + k * rto, &mut out);
        let mut a = Vec::new();
        Header { kind: ACK, len: 0, conn: 9, seq: 1 }.write(&[], &mut a);
        lonely.on_packet(&a, t1 + k * rto);
    }
    assert!(lonely.ended().is_none() && lonely.stats().timeouts >= 9);
    assert_eq!(lonely.take_unacknowledged(), None, "a live connection keeps its payloads");
}

/// A sender ends its connection itself before the receiving end's idle time can pass (its
/// `give_up`, 30 s, against the receiving end's 60): with packets in flight and nothing
/// heard for that long (a partition), and so never sends a packet after the receiving end has
/// forgotten the connection — where a first packet delivered, its acknowledgement lost, sent
/// again to a receiver made anew would be delivered twice; and with nothing sent or heard for
/// that long, its next payload goes on a new connection rather than meet a forgotten one.
#[test]
fn a_sender_ends_a_connection_unanswered_or_idle_before_it_can_be_forgotten() {
    let mut c = Connections::new(ReceiveConfig::default());
    let mut tx = Sender::new(3, Config::default());
    let t0 = Instant::now();
    tx.push(vec![0]).unwrap();
    tx.push(vec![1]).unwrap();
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
    assert!(out.is_empty(), "nothing is sent once it ended: payload 0 never meets a new receiver");
    let u = tx.take_unacknowledged().unwrap();
    assert_eq!((u.sent, u.unsent), (vec![vec![0], vec![1]], vec![]), "0 was delivered; 1 may have been");

    // Idle: everything acknowledged, then 30 s of nothing, then a payload.
    let mut tx = Sender::new(4, Config::default());
    tx.push(vec![7]).unwrap();
    assert_eq!(round(&mut tx, &mut c, t0), 1);
    tx.push(vec![8]).unwrap();
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

proptest! {
    /// Exactly once across change: a stream of payloads over a network that loses,
    /// duplicates and reorders, through a receiving end that is restarted or cut off for longer
    /// than its idle time (its connections forgotten) at a random moment. Whenever the sender
    /// ends a connection, the application carries what it gives back on a new one. Every
    /// payload is delivered; in order, each once — but for those the sender gave back as sent
    /// and not acknowledged, which may be delivered twice (once before the end, once after),
    /// and those of a connection none of whose packets was acknowledged when the receiving end
    /// restarted (the header cannot tell its first packets sent again from a new connection's:
    /// docs/chain.md), and only then. It fails with the sender's `give_up` out of reach (a
    /// payload delivered before the cut delivered again after it) or without the stale
    /// acknowledgements ending a connection (a sender stuck after a restart).
    #[test]
    fn exactly_once_but_for_what_an_ended_connection_gives_back(
        seed in any::<u64>(),
        cut_at in prop_oneof![0usize..6, 0usize..400],
        restart in any::<bool>(),
        loss in 0u32..30,
    ) {
        let mut rng = seed | 1;
        let mut rand = move |n: u32| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            (rng % u64::from(n)) as u32
        };
        let idle = Duration::from_secs(60);
        let mut c = Connections::new(ReceiveConfig { idle, ..ReceiveConfig::default() });
        let cfg = Config { window: 8, rto: Duration::from_millis(1), queue: 1024, ..Config::default() };
        let (mut conn, mut tx) = (1u32, Sender::new(1, cfg));
        let n = 120u32;
        let mut pushed = 0u32;
        let mut delivered: Vec<u32> = Vec::new();
        let mut given_back: Vec<u32> = Vec::new();
        let mut on_conn: Vec<u32> = Vec::new();
        let mut now = Instant::now();
        let (mut to_rx, mut to_tx): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
        let id = |p: &[u8]| u32::from_be_bytes(p[..4].try_into().unwrap());
        for step in 0..20_000usize {
            if step == cut_at {
                if restart {
                    if tx.stats().acked == 0 {
                        given_back.extend(&on_conn);
                    }
                    c = Connections::new(ReceiveConfig { idle, ..ReceiveConfig::default() });
                } else {
                    // Cut off for longer than the idle time: everything in the network lost,
                    // the sender polled now and then meanwhile, its packets lost too.
                    for _ in 0..70 {
                        now += Duration::from_secs(1);
                        let mut lost = Vec::new();
                        tx.poll(now, &mut lost);
                    }
                }
                to_rx.clear();
                to_tx.clear();
            }
            now += Duration::from_micros(200);
            // Payloads come in a few at a time.
            while pushed < n && pushed < (step as u32 / 2) + 1 && tx.ended().is_none() {
                if tx.push(pushed.to_be_bytes().to_vec()).is_err() {
                    break;
                }
                on_conn.push(pushed);
                pushed += 1;
            }
            if tx.ended().is_some() {
                let u = tx.take_unacknowledged().unwrap();
                given_back.extend(u.sent.iter().map(|p| id(p)));
                conn += 1;
                tx = Sender::new(conn, cfg);
                on_conn.clear();
                for p in u.sent.into_iter().chain(u.unsent) {
                    on_conn.push(id(&p));
                    tx.push(p).unwrap();
                }
            }
            let mut out = Vec::new();
            tx.poll(now, &mut out);
            for p in out {
                if rand(100) >= loss {
                    to_rx.push(p.clone());
                }
                if rand(100) < 5 {
                    to_rx.push(p);
                }
            }
            // Reordered: delivered from a random point of the queue round.
            if !to_rx.is_empty() {
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
