//! CLIP's TCP retransmission detection (docs/clip.md, "TCP retransmission detection"): serial
//! arithmetic, the servers' register indices (unique, sliced, released and reused), the
//! stateful ALU's `reg_advance`, and whole connections through the switch and two servers
//! under loss, the switch's and servers' counts against the senders' own.

use tern_switch::bench::{handler_count, lossy_connections, tcp_segment as tcp, trd_cluster};
use tern_switch::program::Program;
use tern_switch::trd::{Answer, Trd, TrdConfig, after};

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const FIN: u8 = 0x01;
const RST: u8 = 0x04;

#[test]
fn serial_arithmetic_wraps() {
    assert!(after(2, 1));
    assert!(!after(1, 1));
    assert!(!after(1, 2));
    assert!(after(5, u32::MAX - 5), "across the wrap");
    assert!(!after(u32::MAX - 5, 5));
    assert!(!(after(1 << 31, 1) && after(1, 1 << 31)), "half the space apart: not both");
}

fn ip(f: &[u8]) -> &[u8] {
    &f[14..]
}

#[test]
fn indices_are_unique_sliced_released_and_reused() {
    let cfg = TrdConfig { registers: 8, slice: 1, slices: 2, capacity: 100 };
    let mut t = Trd::new(cfg).unwrap();
    // Server 1 of 2 over 8 registers: indices 1, 3, 5, 7, lowest first.
    let mut got = Vec::new();
    for p in 0..5u16 {
        match t.handle(ip(&tcp([10, 0, 0, 1], [9, 9, 9, 9], 1000 + p, 80, 100, SYN, b""))).unwrap() {
            Answer::Allocated { index, init } => {
                assert_eq!(init, 101, "a SYN takes one sequence number");
                got.push(index);
            }
            Answer::Checked { retransmission } => {
                assert!(!retransmission);
                got.push(u32::MAX);
            }
            a => panic!("{a:?}"),
        }
    }
    assert_eq!(got, [1, 3, 5, 7, u32::MAX], "the fifth has none: the server path");
    assert_eq!((t.counters.indexed, t.counters.no_index), (4, 1));
    // The same SYN again: a retransmission, checked here.
    let again = t.handle(ip(&tcp([10, 0, 0, 1], [9, 9, 9, 9], 1000, 80, 100, SYN, b""))).unwrap();
    assert_eq!(again, Answer::Checked { retransmission: true });
    // The server path checks data the same way; a bare ACK is not checked.
    let d = |seq: u32, n: usize| tcp([10, 0, 0, 1], [9, 9, 9, 9], 1004, 80, seq, ACK, &vec![0u8; n]);
    assert_eq!(t.handle(ip(&d(101, 50))).unwrap(), Answer::Checked { retransmission: false });
    assert_eq!(t.handle(ip(&d(101, 50))).unwrap(), Answer::Checked { retransmission: true });
    assert_eq!(t.handle(ip(&d(151, 0))).unwrap(), Answer::Checked { retransmission: false });
    assert_eq!(t.counters.retransmissions, 2);
    // FIN releases index 3; the next direction gets it.
    assert_eq!(
        t.handle(ip(&tcp([10, 0, 0, 1], [9, 9, 9, 9], 1001, 80, 101, FIN | ACK, b""))).unwrap(),
        Answer::Released { index: 3 }
    );
    assert_eq!(
        t.handle(ip(&tcp([10, 0, 0, 2], [9, 9, 9, 9], 1, 80, 7, SYN, b""))).unwrap(),
        Answer::Allocated { index: 3, init: 8 }
    );
    // RST releases too; a FIN of a direction never seen holds nothing.
    assert_eq!(
        t.handle(ip(&tcp([10, 0, 0, 1], [9, 9, 9, 9], 1002, 80, 101, RST, b""))).unwrap(),
        Answer::Released { index: 5 }
    );
    assert_eq!(
        t.handle(ip(&tcp([10, 0, 0, 3], [9, 9, 9, 9], 5, 80, 1, FIN, b""))).unwrap(),
        Answer::Checked { retransmission: false }
    );
    // Not TCP: refused by name.
    let mut udp = Vec::new();
    tern_wire::frame::build_udp4(&mut udp, [2; 6], [4; 6], [1, 1, 1, 1], [2, 2, 2, 2], 1, 2, 64, b"x");
    assert_eq!(t.handle(ip(&udp)).unwrap_err().name(), "not_tcp");
    assert!(Trd::new(TrdConfig { slice: 2, slices: 2, ..cfg }).unwrap_err().contains("slice 2 of 2"));
}

#[test]
fn reg_advance_keeps_the_highest_in_serial_order() {
    let prog = Program::parse(
        r#"
name = "adv"
program = 5
metadata = [{ name = "retx", bits = 8 }]
pre_processing = ["check"]
[[register]]
name = "highest"
entries = 4
bits = 32
[[action]]
name = "check"
ops = [{ op = "reg_advance", register = "highest", index = 1, value = "tcp.seq", dst = "meta.retx" }, { op = "set", dst = "ipv4.ttl", src = "meta.retx" }]
"#,
    )
    .unwrap();
    let mut p = tern_switch::pipeline::Pipeline::new(prog);
    let mut run = |seq: u32| {
        let mut f = tcp([1, 1, 1, 1], [2, 2, 2, 2], 1, 2, seq, ACK, b"x");
        p.pre(&mut f, 1);
        f[22] // the TTL: 1 if not after the highest
    };
    assert_eq!(run(5), 0, "after 0");
    assert_eq!(run(5), 1, "equal: not after");
    assert_eq!(run(4), 1, "behind");
    // Up in quarter steps to just below the wrap, then across it.
    for q in [0x4000_0000, 0x8000_0000, 0xc000_0000, 0xffff_fffe] {
        assert_eq!(run(q), 0, "{q:#x}");
    }
    assert_eq!(run(0x8000_0000), 1, "half the space behind");
    assert_eq!(run(3), 0, "across the wrap");
    assert_eq!(run(u32::MAX), 1, "behind, across the wrap");
    assert_eq!(p.register("highest").unwrap()[1], 3);
}

/// Connections send data through the switch and two servers; the wire after it loses 5% of
/// segments (seeded); a sender resends each lost segment 3 segments later. Every
/// retransmission the senders make is counted by the switch or a server; nothing else is
/// (bare ACKs, first transmissions).
#[test]
fn retransmissions_under_loss_match_the_senders_counts() {
    let mut c = trd_cluster(2, 4096).unwrap();
    let r = lossy_connections(&mut c, 24, 60, 0.05, 7).unwrap();
    assert!(r.resent > 30, "{r:?}");
    assert_eq!((r.indexed, r.installed, r.removed), (48, 48, 48), "each direction's entry in and out");
    assert_eq!(r.at_servers, 0, "every direction had an index: the switch checked all data");
    assert_eq!(r.in_switch, r.resent);
    assert_eq!(r.released, r.resent, "every index's count moved to `released` at close");
    assert_eq!(r.dropped, 0);
    assert_eq!(c.switch.pipeline().len("conn"), 0);
    assert_eq!(handler_count(&c, "no_index"), 0);
}

/// A direction that ended here (its FIN released its register) and whose FIN or data comes
/// again — the other end's acknowledgement was lost — is a retransmission, counted, not a new
/// direction holding a register; a SYN on the same addresses and ports is a new connection.
/// The ended directions remembered are bounded by the capacity, the oldest forgotten first.
#[test]
fn a_fin_or_data_sent_again_after_the_close_is_a_retransmission() {
    let cfg = TrdConfig { registers: 8, slice: 0, slices: 1, capacity: 2 };
    let mut t = Trd::new(cfg).unwrap();
    let seg = |port: u16, seq: u32, flags: u8, n: usize| {
        tcp([10, 0, 0, 1], [9, 9, 9, 9], port, 80, seq, flags, &vec![0u8; n])
    };
    assert!(matches!(t.handle(ip(&seg(1000, 100, SYN, 0))).unwrap(), Answer::Allocated { index: 0, .. }));
    assert_eq!(t.handle(ip(&seg(1000, 101, ACK, 50))).unwrap(), Answer::Checked { retransmission: false });
    assert_eq!(t.handle(ip(&seg(1000, 151, FIN | ACK, 0))).unwrap(), Answer::Released { index: 0 });
    assert_eq!((t.len(), t.closed()), (0, 1));
    // The FIN again, then the data before it again: both retransmissions, nothing opened.
    assert_eq!(t.handle(ip(&seg(1000, 151, FIN | ACK, 0))).unwrap(), Answer::Checked { retransmission: true });
    assert_eq!(t.handle(ip(&seg(1000, 101, ACK, 50))).unwrap(), Answer::Checked { retransmission: true });
    assert_eq!((t.len(), t.counters.retransmissions, t.counters.opened), (0, 2, 1));
    // A new connection on the same ports (its SYN): opened, the old end forgotten.
    assert!(matches!(t.handle(ip(&seg(1000, 9000, SYN, 0))).unwrap(), Answer::Allocated { index: 0, .. }));
    assert_eq!((t.len(), t.closed()), (1, 0));
    assert_eq!(t.handle(ip(&seg(1000, 9001, RST, 0))).unwrap(), Answer::Released { index: 0 });
    // Three more close: two remembered at most, the oldest (port 1000) forgotten first.
    for p in 1001..1003u16 {
        t.handle(ip(&seg(p, 100, SYN, 0))).unwrap();
        t.handle(ip(&seg(p, 101, FIN | ACK, 0))).unwrap();
    }
    assert_eq!(t.closed(), 2);
    assert_eq!(t.handle(ip(&seg(1000, 9001, RST, 0))).unwrap(), Answer::Checked { retransmission: false });
    assert_eq!(t.handle(ip(&seg(1002, 101, FIN | ACK, 0))).unwrap(), Answer::Checked { retransmission: true });
    // One direction opened and closed over and over stays one remembered end.
    for k in 0..50u32 {
        t.handle(ip(&seg(2000, 1000 * k, SYN, 0))).unwrap();
        t.handle(ip(&seg(2000, 1000 * k + 1, FIN | ACK, 0))).unwrap();
    }
    assert!(t.closed() <= 2);
}

/// With registers for 4 directions in all (2 a server), the rest stay on the server path: the
/// servers check their segments and count what the switch cannot, and the sum still matches.
#[test]
fn directions_beyond_the_registers_stay_on_the_server_path() {
    let mut c = trd_cluster(2, 32).unwrap();
    let r = lossy_connections(&mut c, 24, 60, 0.05, 7).unwrap();
    assert_eq!(handler_count(&c, "indexed"), 4);
    assert_eq!(handler_count(&c, "no_index"), 24 * 2 - 4);
    assert!(r.in_switch > 0 && r.at_servers > r.in_switch, "{r:?}");
    assert_eq!(r.in_switch + r.at_servers, r.resent);
    assert_eq!(r.released + r.at_servers_closed, r.resent);
    assert_eq!(r.dropped, 0);
}

/// Server 0 dies halfway through the data: its buddy, holding its directions from the
/// replicas, releases their indices at FIN as server 0 would have, so every direction's entry
/// leaves the switch and every retransmission is still counted once. Without replicas the
/// buddy would not know the failed server's directions and their entries would stay.
#[test]
fn a_failed_servers_directions_close_at_its_buddy() {
    use tern_switch::bench::lossy_connections_failing;
    for replicas in [true, false] {
        let mut c = trd_cluster(2, 4096).unwrap();
        c.buddy = vec![Some(1), Some(0)];
        c.replicate = replicas;
        let r = lossy_connections_failing(&mut c, 24, 60, 0.05, 7, Some((30, 0))).unwrap();
        assert!(r.resent > 30, "{r:?}");
        assert_eq!(r.indexed, 48);
        assert_eq!(r.dropped, 0, "{r:?}");
        if replicas {
            assert_eq!((r.installed, r.removed), (48, 48), "every entry out at close: {r:?}");
            assert_eq!(c.switch.pipeline().len("conn"), 0);
            assert_eq!(r.released, r.resent, "every retransmission counted once: {r:?}");
            assert_eq!(handler_count(&c, "released"), 48);
        } else {
            // Server 0's directions end at a buddy that never heard of them: their entries stay.
            assert!(r.removed < 48 && c.switch.pipeline().len("conn") > 0, "{r:?}");
        }
    }
}

/// A replica's records: an opened direction is adopted with its index, which the buddy never
/// hands out itself and releases at the direction's FIN without taking it into its own slice;
/// a closed one is forgotten; records that do not read are refused by name.
#[test]
fn replica_records_are_adopted_released_and_checked() {
    use tern_switch::server::{RemoteHandler, TrdHandler};
    let cfg = |slice| TrdConfig { registers: 8, slice, slices: 2, capacity: 100 };
    let (mut a, mut b) = (TrdHandler::new(cfg(0)).unwrap(), TrdHandler::new(cfg(1)).unwrap());
    let mut resp = [0u8; 9];
    let syn = tcp([10, 0, 0, 1], [9, 9, 9, 9], 1000, 80, 100, SYN, b"");
    a.handle(0, 0, &mut syn[14..].to_vec(), &[], &mut resp).unwrap();
    assert_eq!((u32::from_be_bytes(resp[..4].try_into().unwrap()), resp[8]), (0, 1), "index 0 allocated");
    let mut records = Vec::new();
    a.take_new(&mut records);
    assert_eq!(records.len(), 1);
    let free_before = b.trd().free();
    b.adopt_replica(0, &records[0]).unwrap();
    assert_eq!(b.trd().index_of(&(0x0a00_0001, 0x0909_0909, 1000, 80)), Some(0));
    // Another direction claiming the same register is refused: a register never serves two.
    let mut twin = records[0].clone();
    twin[9..11].copy_from_slice(&1001u16.to_be_bytes());
    assert_eq!(b.adopt_replica(0, &twin), Err("record_index_held"));
    // B's own directions get B's indices only.
    for p in 0..4u16 {
        let s = tcp([10, 0, 0, 2], [9, 9, 9, 9], 2000 + p, 80, 5, SYN, b"");
        b.handle(0, 0, &mut s[14..].to_vec(), &[], &mut resp).unwrap();
        assert_eq!(u32::from_be_bytes(resp[..4].try_into().unwrap()) % 2, 1);
    }
    // The adopted direction's FIN at B: index 0 released to the switch, not to B's free list.
    let fin = tcp([10, 0, 0, 1], [9, 9, 9, 9], 1000, 80, 101, FIN | ACK, b"");
    b.handle(0, 0, &mut fin[14..].to_vec(), &[], &mut resp).unwrap();
    assert_eq!((u32::from_be_bytes(resp[..4].try_into().unwrap()), resp[8]), (0, 2), "released");
    assert_eq!(b.trd().free(), free_before - 4);
    let mut out = Vec::new();
    b.take_new(&mut out);
    assert_eq!(out.iter().filter(|r| r[0] == 2).count(), 1, "B's close is a record for its own buddy");
    // A close record makes A forget (and free) its direction.
    let mut a_close = out.iter().find(|r| r[0] == 2).unwrap().clone();
    let before = a.trd().free();
    a.adopt_replica(0, &a_close).unwrap();
    assert_eq!((a.trd().len(), a.trd().free()), (0, before + 1));
    // Refused by name.
    a_close[0] = 9;
    assert_eq!(a.adopt_replica(0, &a_close), Err("record_kind"));
    assert_eq!(a.adopt_replica(0, &records[0][..20]), Err("record_length"));
    assert_eq!(a.adopt_replica(0, &[]), Err("record_kind"));
    let mut bad = records[0].clone();
    bad[13..17].copy_from_slice(&100u32.to_be_bytes());
    assert_eq!(a.adopt_replica(0, &bad), Err("record_index"));
}

/// A server that comes back takes back from its buddy the directions holding its registers:
/// without that, its first new direction gets a register the buddy's adopted direction still
/// counts in; with it, none of them, until the buddy closes them and hands them back no more
/// — then they are free again. The buddy hands back only others' registers, and the returning
/// server takes only its own.
#[test]
fn a_server_that_comes_back_takes_its_registers_back() {
    use tern_switch::server::{RemoteHandler, TrdHandler};
    let cfg = |slice| TrdConfig { registers: 8, slice, slices: 2, capacity: 100 };
    let (mut a, mut b) = (TrdHandler::new(cfg(0)).unwrap(), TrdHandler::new(cfg(1)).unwrap());
    let mut resp = [0u8; 9];
    let index = |resp: &[u8; 9]| u32::from_be_bytes(resp[..4].try_into().unwrap());
    // A opens three directions (registers 0, 2, 4); B adopts them; B has one of its own.
    let mut records = Vec::new();
    for p in 0..3u16 {
        let s = tcp([10, 0, 0, 1], [9, 9, 9, 9], 1000 + p, 80, 100, SYN, b"");
        a.handle(0, 0, &mut s[14..].to_vec(), &[], &mut resp).unwrap();
        assert_eq!(index(&resp), u32::from(p) * 2);
    }
    a.take_new(&mut records);
    assert_eq!(b.take_back(0, &records), 0, "B takes back nothing of A's");
    assert_eq!(b.trd().len(), 0);
    for r in &records {
        b.adopt_replica(0, r).unwrap();
    }
    let own = tcp([10, 0, 0, 3], [9, 9, 9, 9], 3000, 80, 7, SYN, b"");
    b.handle(0, 0, &mut own[14..].to_vec(), &[], &mut resp).unwrap();
    assert_eq!(index(&resp) % 2, 1);
    let mut handed = Vec::new();
    b.hand_back(&mut handed);
    assert_eq!(handed.len(), 3, "A's three, not B's own");
    // A fails and comes back empty. Without taking back, its first direction reuses register 0.
    let mut fresh = TrdHandler::new(cfg(0)).unwrap();
    let s = tcp([10, 0, 0, 2], [9, 9, 9, 9], 2000, 80, 5, SYN, b"");
    fresh.handle(0, 0, &mut s[14..].to_vec(), &[], &mut resp).unwrap();
    assert_eq!(index(&resp), 0, "shared with B's adopted direction");
    // Taking back first: its new directions get 6 only, then none.
    let mut back = TrdHandler::new(cfg(0)).unwrap();
    assert_eq!(back.take_back(0, &handed), 0);
    assert_eq!((back.trd().len(), back.trd().free(), back.taken_back()), (3, 1, 3));
    for p in 0..2u16 {
        let s = tcp([10, 0, 0, 2], [9, 9, 9, 9], 2000 + p, 80, 5, SYN, b"");
        back.handle(0, 0, &mut s[14..].to_vec(), &[], &mut resp).unwrap();
        if p == 0 {
            assert_eq!((index(&resp), resp[8]), (6, 1));
        } else {
            assert_eq!(resp[8], 0, "no register left: the server path");
        }
    }
    // Taken back again: nothing changes. B closes one of them: handed back no more, its
    // register (2) is A's again.
    assert_eq!(back.take_back(0, &handed), 0);
    let fin = tcp([10, 0, 0, 1], [9, 9, 9, 9], 1001, 80, 101, FIN | ACK, b"");
    b.handle(0, 0, &mut fin[14..].to_vec(), &[], &mut resp).unwrap();
    assert_eq!((index(&resp), resp[8]), (2, 2), "released at B");
    let mut handed = Vec::new();
    b.hand_back(&mut handed);
    assert_eq!(handed.len(), 2);
    // Among what B hands back now: a direction of A's own since it came back (B holds its
    // replica): not counted as taken back.
    let mut mine = Vec::new();
    back.take_new(&mut mine);
    handed.extend(mine.into_iter().filter(|r| r[0] == 1));
    assert_eq!(back.take_back(0, &handed), 0);
    assert_eq!((back.trd().free(), back.taken_back()), (1, 2));
    let s = tcp([10, 0, 0, 2], [9, 9, 9, 9], 2100, 80, 5, SYN, b"");
    back.handle(0, 0, &mut s[14..].to_vec(), &[], &mut resp).unwrap();
    assert_eq!((index(&resp), resp[8]), (2, 1), "register 2 free again");
    // A direction taken back that ends here (its FIN reached this server after all) and is
    // handed back again is adopted again, its register out of the free ones once more.
    let fin = tcp([10, 0, 0, 1], [9, 9, 9, 9], 1000, 80, 101, FIN | ACK, b"");
    back.handle(0, 0, &mut fin[14..].to_vec(), &[], &mut resp).unwrap();
    assert_eq!((index(&resp), resp[8]), (0, 2));
    assert_eq!(back.taken_back(), 1);
    let free = back.trd().free();
    assert_eq!(back.take_back(0, &handed), 0);
    assert_eq!((back.trd().free(), back.taken_back()), (free - 1, 2));
    // A record that does not read is refused, and such an answer lets nothing go.
    let held = back.trd().len();
    assert_eq!(back.take_back(0, &[vec![1, 2, 3]]), 1);
    assert_eq!(back.trd().len(), held);
}

/// What a server hands back is read from its directions with another server's register alone
/// (not its whole table): the same directions, registers and highest ends as a walk of the
/// table, as directions open and close here and at two other servers whose replicas (opens
/// and closes) this one adopts.
mod hand_back_twin {
    use super::*;
    use proptest::prelude::*;
    use tern_switch::server::{RemoteHandler, TrdHandler};

    #[derive(Debug, Clone)]
    enum Op {
        /// A segment at B (its own direction, or one it adopted): SYN, or FIN.
        AtB(u8, bool),
        /// A segment at server A or C (which replicate to B): SYN, or FIN.
        Elsewhere(bool, u8, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12, any::<bool>()).prop_map(|(f, fin)| Op::AtB(f, fin)),
            (any::<bool>(), 0u8..12, any::<bool>()).prop_map(|(c, f, fin)| Op::Elsewhere(c, f, fin)),
        ]
    }

    fn segment(h: &mut TrdHandler, f: u8, fin: bool) {
        let flags = if fin { FIN | ACK } else { SYN };
        let s = tcp([10, 0, 0, 1], [9, 9, 9, 9], 1000 + u16::from(f), 80, 100, flags, b"");
        let _ = h.handle(0, 0, &mut s[14..].to_vec(), &[], &mut [0u8; 9]);
    }

    /// An opened record's direction, register and highest end (docs/clip.md's layout).
    fn read(r: &[u8]) -> ((u32, u32, u16, u16), u32, u32) {
        let u32_at = |i: usize| u32::from_be_bytes(r[i..i + 4].try_into().unwrap());
        let u16_at = |i: usize| u16::from_be_bytes(r[i..i + 2].try_into().unwrap());
        ((u32_at(1), u32_at(5), u16_at(9), u16_at(11)), u32_at(13), u32_at(17))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn hand_back_reads_what_a_table_walk_finds(ops in prop::collection::vec(op(), 1..150)) {
            let cfg = |slice| TrdConfig { registers: 12, slice, slices: 3, capacity: 10 };
            let (mut a, mut b, mut c) =
                (TrdHandler::new(cfg(0)).unwrap(), TrdHandler::new(cfg(1)).unwrap(), TrdHandler::new(cfg(2)).unwrap());
            for o in ops {
                match o {
                    Op::AtB(f, fin) => segment(&mut b, f, fin),
                    Op::Elsewhere(at_c, f, fin) => {
                        let other = if at_c { &mut c } else { &mut a };
                        segment(other, f, fin);
                        let mut records = Vec::new();
                        other.take_new(&mut records);
                        for r in &records {
                            let _ = b.adopt_replica(0, r);
                        }
                    }
                }
                let mut handed = Vec::new();
                b.hand_back(&mut handed);
                prop_assert!(handed.iter().all(|r| r[0] == 1 && r.len() == 21), "opened records only");
                let mut got: Vec<_> = handed.iter().map(|r| read(r)).collect();
                got.sort();
                let mut walk: Vec<_> = b
                    .trd()
                    .directions()
                    .filter_map(|(d, index, highest)| index.filter(|&i| !b.trd().owns(i)).map(|i| (d, i, highest)))
                    .collect();
                walk.sort();
                prop_assert_eq!(got, walk);
            }
        }
    }
}
