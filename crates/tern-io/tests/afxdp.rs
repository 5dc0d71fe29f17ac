//! The AF_XDP port over a veth pair (root only: `cargo test -- --ignored`): frames cross byte for
//! byte both ways, more of them than the rings hold (the chunks go round), with and without busy
//! polling; busy polling's interface settings, and where the interface's receive work runs,
//! follow the load and are put back when the port closes.

mod common;

use std::time::{Duration, Instant};

use common::{Veth, ip, numbered};
use tern_io::afpacket::AfPacketPort;
use tern_io::afxdp::{AfXdpConfig, AfXdpPort, set_tx_checksum};
use tern_io::{Batch, Pool, Port};

fn send(port: &mut dyn Port, pool: &Pool, frames: &[Vec<u8>]) -> usize {
    let mut sent = 0;
    let mut batch = Batch::new(32);
    for chunk in frames.chunks(32) {
        for f in chunk {
            let mut p = pool.packet();
            p.extend_from_slice(f).unwrap();
            batch.push(p);
        }
        sent += port.send(Instant::now(), &mut batch).unwrap();
    }
    sent
}

fn recv(port: &mut dyn Port, want: usize, busy: bool) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut batch = Batch::new(64);
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.len() < want && Instant::now() < deadline {
        if !busy {
            port.wait(Duration::from_millis(20)).unwrap();
        }
        port.recv(Instant::now(), &mut batch).unwrap();
        got.extend(batch.drain().map(|p| p.data().to_vec()));
    }
    got
}

fn veth(tag: &str) -> (String, String, Veth) {
    let id = std::process::id() % 100000;
    let (a, b) = (format!("txdp{id}{tag}a"), format!("txdp{id}{tag}b"));
    ip(&format!("link add {a} type veth peer name {b}"));
    let guard = Veth(a.clone());
    for l in [&a, &b] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{l}/disable_ipv6"), "1");
        ip(&format!("link set {l} up"));
    }
    (a, b, guard)
}

fn crosses(busy: bool) {
    let (a, b, _guard) = veth(if busy { "p" } else { "s" });
    let pool = Pool::new(8192, 2048);
    let was = std::fs::read_to_string(format!("/sys/class/net/{b}/napi_defer_hard_irqs")).unwrap();
    let mut x = AfXdpPort::open(&b, &pool, AfXdpConfig { busy_poll: busy }).unwrap();
    let deferral = || std::fs::read_to_string(format!("/sys/class/net/{b}/napi_defer_hard_irqs")).unwrap();
    if busy {
        // Moderated by load: not deferring before any traffic.
        assert_eq!(deferral().trim(), "0");
    }
    let mut p = AfPacketPort::open(&a, &pool).unwrap();
    // Into the AF_XDP port: 5,000 frames, more than its 2,048 chunks on the fill ring, in
    // rounds of 200 so that none overflows a ring on the way — the port's receive ring, or the
    // veth's own 256 frames while the port's moderation defers the veth's receive work;
    // lengths 60 to 1,514.
    let frames: Vec<Vec<u8>> = (0..5000u32).map(|i| numbered(i, 60 + (i as usize * 37) % 1455)).collect();
    let mut got = Vec::new();
    for round in frames.chunks(200) {
        assert_eq!(send(&mut p, &pool, round), round.len());
        got.extend(recv(&mut x, round.len(), busy));
    }
    assert_eq!(got.len(), frames.len(), "{:?} {:?}", x.stats(), x.extra_stats());
    assert!(got == frames, "frames arrived changed or out of order");
    // Out of it: 5,000 more, more than its 2,048 chunks for sending (they come back).
    let mut back = Vec::new();
    for round in frames.chunks(500) {
        assert_eq!(send(&mut x, &pool, round), round.len(), "{:?}", x.stats());
        back.extend(recv(&mut p, round.len(), false));
    }
    assert_eq!(back.len(), frames.len(), "{:?}", p.stats());
    assert!(back == frames, "frames sent changed or out of order");
    assert_eq!(x.stats().rx_dropped, 0);
    assert_eq!(x.stats().tx_dropped, 0);
    if busy {
        // The interface's setting is what the moderation last decided.
        assert_eq!(deferral().trim(), if x.moderation().deferring() { "2" } else { "0" });
    }
    drop(x);
    assert_eq!(std::fs::read_to_string(format!("/sys/class/net/{b}/napi_defer_hard_irqs")).unwrap(), was);
}

#[test]
#[ignore = "needs root: creates a veth pair and loads an XDP program"]
fn frames_cross_a_veth_pair_both_ways() {
    crosses(false);
}

#[test]
#[ignore = "needs root: creates a veth pair and loads an XDP program"]
fn frames_cross_with_busy_polling() {
    crosses(true);
}

/// Under load the busy-polled port defers the interface's interrupts and moves its receive work
/// to kernel threads on the port's own cores; after `OFF_AFTER` without load, back; on close,
/// the interface's settings as they were. Frames keep arriving whole and in order throughout.
#[test]
#[ignore = "needs root: creates a veth pair and loads an XDP program"]
fn receive_work_follows_the_port_under_load() {
    let (a, b, _guard) = veth("t");
    let setting = |name: &str| std::fs::read_to_string(format!("/sys/class/net/{b}/{name}")).unwrap();
    let was: Vec<String> = ["napi_defer_hard_irqs", "gro_flush_timeout", "threaded"].map(setting).to_vec();
    // The test thread (which receives) on one core, so that "the port's cores" is not every core.
    let mine = tern_io::affinity_of(0).unwrap();
    let core = *mine.last().unwrap();
    assert!(tern_io::pin_to_core(core));
    let pool = Pool::new(8192, 2048);
    let mut x = AfXdpPort::open(&b, &pool, AfXdpConfig { busy_poll: true }).unwrap();
    let mut p = AfPacketPort::open(&a, &pool).unwrap();
    assert_eq!(setting("threaded").trim(), "0");
    // Rounds of 200 frames, received as fast as they come: above 50,000 a second.
    let mut n = 0u32;
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !x.moderation().deferring() {
        assert!(Instant::now() < deadline, "the load never moved the receive work: {:?}", x.stats());
        let frames: Vec<Vec<u8>> = (n..n + 200).map(|i| numbered(i, 64)).collect();
        n += 200;
        assert_eq!(send(&mut p, &pool, &frames), 200);
        got.extend(recv(&mut x, 200, true));
    }
    assert_eq!(setting("napi_defer_hard_irqs").trim(), "2");
    assert_eq!(setting("threaded").trim(), "1");
    let threads = tern_io::afxdp::napi_threads(&b);
    assert!(!threads.is_empty(), "no receive thread for {b}");
    for t in &threads {
        assert_eq!(tern_io::affinity_of(*t), Some(vec![core]), "receive thread {t}");
    }
    // Frames still arrive, through the thread.
    let frames: Vec<Vec<u8>> = (n..n + 200).map(|i| numbered(i, 64)).collect();
    n += 200;
    send(&mut p, &pool, &frames);
    got.extend(recv(&mut x, 200, true));
    assert_eq!(got, (0..n).map(|i| numbered(i, 64)).collect::<Vec<_>>(), "frames lost or reordered");
    // Quiet: interrupts again and no thread. (When, to the millisecond, is the moderation's
    // unit test's: the quiet spell counts from the start of the first slow window, which may
    // begin before the last frames here.)
    let quiet = Instant::now();
    let mut batch = Batch::new(32);
    while x.moderation().deferring() {
        assert!(quiet.elapsed() < Duration::from_secs(2), "the port kept deferring with no load");
        x.recv(Instant::now(), &mut batch).unwrap();
    }
    assert_eq!(setting("threaded").trim(), "0");
    assert_eq!(setting("napi_defer_hard_irqs").trim(), "0");
    drop(x);
    assert_eq!(["napi_defer_hard_irqs", "gro_flush_timeout", "threaded"].map(setting).to_vec(), was);
    assert!(tern_io::pin_to_cores(&mine));
}

/// A frame on the interface while no port is open goes on to the kernel (the program is gone
/// with the port): opening, closing and opening again works.
#[test]
#[ignore = "needs root: creates a veth pair and loads an XDP program"]
fn a_port_opens_again_after_closing() {
    let (a, b, _guard) = veth("r");
    let pool = Pool::new(1024, 2048);
    for _ in 0..3 {
        let mut x = AfXdpPort::open(&b, &pool, AfXdpConfig::default()).unwrap();
        let mut p = AfPacketPort::open(&a, &pool).unwrap();
        let frames: Vec<Vec<u8>> = (0..10).map(|i| numbered(i, 100)).collect();
        send(&mut p, &pool, &frames);
        assert_eq!(recv(&mut x, 10, false), frames);
    }
    let e = AfXdpPort::open("no-such-if0", &pool, AfXdpConfig::default()).unwrap_err();
    assert!(e.to_string().contains("no-such-if0"), "{e}");
}

/// With the sender's transmit checksum offload off, a UDP datagram the kernel sends arrives
/// through an AF_XDP port with its checksum whole (AF_XDP cannot complete one left to offload).
#[test]
#[ignore = "needs root: creates a veth pair and loads an XDP program"]
fn a_kernel_datagram_arrives_whole_with_offload_off() {
    let (a, b, _guard) = veth("c");
    set_tx_checksum(&a, false).unwrap();
    ip(&format!("addr add 198.18.1.1/30 dev {a}"));
    ip(&format!("neigh replace 198.18.1.2 lladdr 02:00:00:00:00:bb dev {a}"));
    let pool = Pool::new(256, 2048);
    let mut x = AfXdpPort::open(&b, &pool, AfXdpConfig::default()).unwrap();
    let s = std::net::UdpSocket::bind("198.18.1.1:0").unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut batch = Batch::new(32);
    let frame = loop {
        assert!(Instant::now() < deadline, "no datagram arrived");
        s.send_to(b"whole checksum", "198.18.1.2:4000").unwrap();
        x.wait(Duration::from_millis(50)).unwrap();
        x.recv(Instant::now(), &mut batch).unwrap();
        if let Some(f) = batch.drain().map(|p| p.data().to_vec()).find(|f| f.len() > 34 && f[23] == 17) {
            break f;
        }
    };
    // The UDP checksum over the pseudo-header and the datagram sums to 0xffff.
    let ihl = usize::from(frame[14] & 15) * 4;
    let udp = &frame[14 + ihl..];
    let mut sum = 0u32;
    for w in frame[26..34].chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    sum += 17 + udp.len() as u32;
    for w in udp.chunks(2) {
        sum += u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    assert_ne!(u16::from_be_bytes([udp[6], udp[7]]), 0, "a checksum was sent");
    assert_eq!(sum, 0xffff, "the datagram's checksum is whole");
}
