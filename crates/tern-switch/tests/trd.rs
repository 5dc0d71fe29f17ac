//! CLIP's TCP retransmission detection (docs/clip.md, "TCP retransmission detection"): serial
//! arithmetic, the servers' register indices (unique, sliced, released and reused), the
//! stateful ALU's `reg_advance`, and whole connections through the switch and two servers
//! under loss, the switch's and servers' counts against the senders' own.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tern_switch::program::Program;
use tern_switch::server::{Cluster, Server, TrdHandler};
use tern_switch::switch::{Route, Switch, SwitchConfig};
use tern_switch::trd::{Answer, Trd, TrdConfig, after};
use tern_wire::clip;
use tern_wire::frame::{build_tcp4, fill_l4_checksum};

const INSIDE: u16 = 1;
const OUTSIDE: u16 = 2;

fn tcp(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    build_tcp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, payload);
    f[38..42].copy_from_slice(&seq.to_be_bytes());
    f[47] = flags;
    let end = f.len();
    fill_l4_checksum(&mut f, (26, 30), (30, 34), 6, 34, end, 50);
    f
}

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

/// Two servers (server s owns indices s, s+16, ... below `registers`), both in the group.
fn cluster(registers: u32) -> Cluster {
    let program =
        Program::load(std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/trd.toml")))
            .unwrap();
    let cfg = SwitchConfig {
        ports: 4,
        servers: vec![3, 4],
        members: vec![0, 1],
        routes: vec![
            Route { prefix: "0.0.0.0/0".parse().unwrap(), port: OUTSIDE, mac: [2, 0, 0, 0, 0, 0x99] },
            Route { prefix: "10.0.0.0/8".parse().unwrap(), port: INSIDE, mac: [2, 0, 0, 0, 0, 0x11] },
        ],
        offload_enabled: false,
        ..SwitchConfig::default()
    };
    let switch = Switch::new(program, cfg).unwrap();
    let servers = (0..2)
        .map(|s| {
            let cfg = TrdConfig { registers, ..TrdConfig::for_server(s).unwrap() };
            Server::new(clip::DEFAULT_ETHERTYPE, 2, Box::new(TrdHandler::new(cfg).unwrap()), u64::MAX)
        })
        .collect();
    Cluster::new(switch, servers)
}

/// Detected so far: live directions' registers, released directions' sum, and the servers'
/// own checks.
fn detected(c: &Cluster, servers: &[u64]) -> u64 {
    let live: u64 = c.switch.pipeline().register("retransmissions").unwrap().iter().sum();
    let released = c.switch.pipeline().register("released").unwrap()[0];
    live + released + servers.iter().sum::<u64>()
}

/// Connections send data through the switch; the wire after it loses segments at random
/// (seeded); a sender retransmits each lost segment a few segments later (go-back to the lost
/// one only). Every retransmission the senders make is counted by the switch or a server;
/// nothing else is.
#[test]
fn retransmissions_under_loss_match_the_senders_counts() {
    let (c, sent_retx) = run_connections(4096);
    assert_eq!(server_count(&c, "no_index"), 0);
    assert_eq!(server_count(&c, "retransmissions"), 0, "every direction had an index: the switch checked all data");
    assert_eq!(c.switch.pipeline().register("released").unwrap()[0], sent_retx);
}

/// With registers for 4 directions in all (2 a server), the rest stay on the server path: the
/// servers check their segments and count what the switch cannot, and the sum still matches.
#[test]
fn directions_beyond_the_registers_stay_on_the_server_path() {
    let (c, sent_retx) = run_connections(32);
    assert_eq!(server_count(&c, "indexed"), 4);
    assert_eq!(server_count(&c, "no_index"), 24 * 2 - 4);
    let in_switch = c.switch.pipeline().register("released").unwrap()[0];
    let at_servers = server_count(&c, "retransmissions");
    assert!(in_switch > 0 && at_servers > in_switch, "{in_switch} {at_servers}");
    assert_eq!(in_switch + at_servers, sent_retx);
}

/// 24 connections open, send 60 segments each with 5% lost after the switch (each resent 3
/// segments later), and close; returns the cluster and the retransmissions the senders made,
/// having checked the count mid-way and that every entry and register was released.
fn run_connections(registers: u32) -> (Cluster, u64) {
    let mut c = cluster(registers);
    let mut rng = SmallRng::seed_from_u64(7);
    let conns = 24u16;
    let server = [198, 51, 100, 7];
    let mut sent_retx = 0u64;
    let mut seqs: Vec<u32> = (0..conns).map(|i| (u32::MAX - 3000).wrapping_add(u32::from(i) * 997)).collect();
    // Open: SYN out, SYN-ACK back (the reverse direction), ACK out.
    for i in 0..conns {
        let cl = [10, 0, (i >> 8) as u8, i as u8 + 1];
        let out = c.send(INSIDE, &[&tcp(cl, server, 40000 + i, 80, seqs[usize::from(i)], SYN, b"")]);
        assert_eq!(out.len(), 1);
        seqs[usize::from(i)] = seqs[usize::from(i)].wrapping_add(1);
        c.send(OUTSIDE, &[&tcp(server, cl, 80, 40000 + i, 5000, SYN | ACK, b"")]);
        c.send(INSIDE, &[&tcp(cl, server, 40000 + i, 80, seqs[usize::from(i)], ACK, b"")]);
    }
    let indexed = server_count(&c, "indexed");
    let st = c.switch.stats();
    assert_eq!(st.installed_by_response, indexed, "each indexed direction's entry");
    // Data: 60 segments of 100 bytes a connection, sequence numbers wrapping past 2^32 for
    // some; 5% lost on the wire after the switch, each resent 3 segments later.
    let mut pending: Vec<Vec<(u32, usize)>> = vec![Vec::new(); usize::from(conns)];
    for round in 0..60 {
        for i in 0..conns {
            let k = usize::from(i);
            let cl = [10, 0, (i >> 8) as u8, i as u8 + 1];
            let seq = seqs[k];
            seqs[k] = seq.wrapping_add(100);
            let out = c.send(INSIDE, &[&tcp(cl, server, 40000 + i, 80, seq, ACK, &[round as u8; 100])]);
            assert_eq!(out.len(), 1);
            if rng.random_bool(0.05) {
                pending[k].push((seq, round + 3));
            }
            // Resend what is due (the receiver's ACKs told the sender it was lost).
            let due: Vec<(u32, usize)> = pending[k].iter().copied().filter(|&(_, at)| at == round).collect();
            pending[k].retain(|&(_, at)| at != round);
            for (s, _) in due {
                c.send(INSIDE, &[&tcp(cl, server, 40000 + i, 80, s, ACK, &[round as u8; 100])]);
                sent_retx += 1;
            }
            // A bare ACK back now and then: never counted.
            if round % 10 == 0 {
                c.send(OUTSIDE, &[&tcp(server, cl, 80, 40000 + i, 5001, ACK, b"")]);
            }
        }
    }
    assert!(sent_retx > 30, "{sent_retx}");
    assert_eq!(detected(&c, &[server_count(&c, "retransmissions")]), sent_retx);
    // Close: FIN each way releases every index; the counts move to `released`.
    for i in 0..conns {
        let k = usize::from(i);
        let cl = [10, 0, (i >> 8) as u8, i as u8 + 1];
        c.send(INSIDE, &[&tcp(cl, server, 40000 + i, 80, seqs[k], FIN | ACK, b"")]);
        c.send(OUTSIDE, &[&tcp(server, cl, 80, 40000 + i, 5001, FIN | ACK, b"")]);
    }
    let st = c.switch.stats();
    assert_eq!(st.removed_by_response, indexed);
    assert_eq!(c.switch.pipeline().len("conn"), 0);
    assert_eq!(c.switch.pipeline().register("retransmissions").unwrap().iter().sum::<u64>(), 0);
    assert_eq!(detected(&c, &[server_count(&c, "retransmissions")]), sent_retx);
    assert_eq!(st.dropped(), 0);
    (c, sent_retx)
}

/// A counter of the servers' handlers, summed.
fn server_count(c: &Cluster, name: &str) -> u64 {
    c.servers.iter().flat_map(|s| s.handler().counters()).filter(|(n, _)| *n == name).map(|(_, v)| v).sum()
}
