//! The AF_PACKET port over a veth pair (root only: `cargo test -- --ignored`): frames cross
//! byte for byte, a port does not see what it sent itself, and a UDP datagram the kernel sent
//! with checksum offload arrives with its checksum completed.

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::{Veth, ip, numbered};
use tern_io::afpacket::AfPacketPort;
use tern_io::{Batch, Pool, Port};

fn recv_all(port: &mut AfPacketPort, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut batch = Batch::new(32);
    let deadline = Instant::now() + Duration::from_secs(3);
    while got.len() < want && Instant::now() < deadline {
        port.wait(Duration::from_millis(50)).unwrap();
        port.recv(Instant::now(), &mut batch).unwrap();
        got.extend(batch.drain().map(|p| p.data().to_vec()));
    }
    got
}

#[test]
#[ignore = "needs root: creates a veth pair"]
fn frames_cross_a_veth_pair() {
    let (a, b) = (format!("ternt{}a", std::process::id() % 100000), format!("ternt{}b", std::process::id() % 100000));
    ip(&format!("link add {a} type veth peer name {b}"));
    let _guard = Veth(a.clone());
    ip(&format!("link set {a} up"));
    ip(&format!("link set {b} up"));
    // IPv6 autoconfiguration would add frames of its own.
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{a}/disable_ipv6"), "1");
    let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{b}/disable_ipv6"), "1");
    let pool = Pool::new(256, 2048);
    let mut pa = AfPacketPort::open(&a, &pool).unwrap();
    let mut pb = AfPacketPort::open(&b, &pool).unwrap();

    let mut frames = Vec::new();
    for (i, len) in [60usize, 64, 100, 512, 1514].into_iter().enumerate() {
        let mut f = vec![0u8; len];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 0xbb]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0xaa]);
        f[12..14].copy_from_slice(&0x88b5u16.to_be_bytes()); // local experimental ethertype
        for (j, x) in f[14..].iter_mut().enumerate() {
            *x = (i * 31 + j) as u8;
        }
        frames.push(f);
    }
    let mut batch = Batch::new(32);
    for f in &frames {
        let mut p = pool.packet();
        p.extend_from_slice(f).unwrap();
        batch.push(p);
    }
    assert_eq!(pa.send(Instant::now(), &mut batch).unwrap(), frames.len());
    let got: Vec<_> =
        recv_all(&mut pb, frames.len()).into_iter().filter(|f| f.get(12..14) == Some(&[0x88, 0xb5])).collect();
    assert_eq!(got, frames);
    // The sender does not receive its own frames.
    std::thread::sleep(Duration::from_millis(50));
    pa.recv(Instant::now(), &mut batch).unwrap();
    assert!(batch.iter().all(|p| p.data().get(12..14) != Some(&[0x88, 0xb5])));
    batch.recycle(&pool);

    // A kernel UDP datagram out of `a` (veth offloads its checksum) arrives complete on `b`.
    ip(&format!("addr add 198.18.0.1/30 dev {a}"));
    ip(&format!("neigh replace 198.18.0.2 lladdr 02:00:00:00:00:bb dev {a}"));
    let s = UdpSocket::bind("198.18.0.1:0").unwrap();
    s.send_to(b"checksum me, please", "198.18.0.2:9").unwrap();
    let udp: Vec<_> =
        recv_all(&mut pb, 1).into_iter().filter(|f| f.get(12..14) == Some(&[8, 0]) && f.get(23) == Some(&17)).collect();
    assert_eq!(udp.len(), 1, "the datagram did not arrive");
    let parsed = etherparse::SlicedPacket::from_ethernet(&udp[0]).unwrap();
    let (Some(etherparse::NetSlice::Ipv4(ip4)), Some(etherparse::TransportSlice::Udp(u))) =
        (parsed.net, parsed.transport)
    else {
        panic!("not IPv4/UDP")
    };
    let want = u.to_header().calc_checksum_ipv4(&ip4.header().to_header(), u.payload()).unwrap();
    assert_eq!(u.checksum(), want);
    assert!(pb.extra_stats().csum_completed >= 1, "{:?}", pb.extra_stats());
}

fn send_all(port: &mut AfPacketPort, pool: &Pool, frames: impl Iterator<Item = Vec<u8>>) {
    let mut batch = Batch::new(32);
    for f in frames {
        let mut p = pool.packet();
        p.extend_from_slice(&f).unwrap();
        if let Some(p) = batch.push(p) {
            port.send(Instant::now(), &mut batch).unwrap();
            batch.push(p);
        }
    }
    port.send(Instant::now(), &mut batch).unwrap();
}

/// The receive ring: more frames than it has slots, sent while nobody reads, arrive intact and
/// in order as far as the ring held them (the kernel drops the rest, and the port counts them), and the ring goes on
/// working after it wrapped; a frame longer than a slot is counted as truncated, not delivered.
#[test]
#[ignore = "needs root: creates a veth pair"]
fn the_receive_ring_overflows_and_wraps_intact() {
    let (a, b) = (format!("ternr{}a", std::process::id() % 100000), format!("ternr{}b", std::process::id() % 100000));
    ip(&format!("link add {a} type veth peer name {b}"));
    let _guard = Veth(a.clone());
    for l in [&a, &b] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{l}/disable_ipv6"), "1");
        ip(&format!("link set {l} mtu 9000 up"));
    }
    // The sender's buffers hold a jumbo frame; the receiver's (and so its slots) do not.
    let pool = Pool::new(8192, 8192);
    let small = Pool::new(8192, 2048);
    let mut pa = AfPacketPort::open(&a, &pool).unwrap();
    let mut pb = AfPacketPort::open(&b, &small).unwrap();
    assert!(pb.has_rx_ring(), "the kernel refused the receive ring");
    let n = 6000u32;
    send_all(&mut pa, &pool, (0..n).map(|s| numbered(s, 64 + (s as usize % 700))));
    let mut got = Vec::new();
    let mut batch = Batch::new(32);
    loop {
        let k = pb.recv(Instant::now(), &mut batch).unwrap();
        got.extend(batch.drain().map(|p| p.data().to_vec()));
        if k == 0 {
            break;
        }
    }
    let ours: Vec<_> = got.iter().filter(|f| f.get(12..14) == Some(&[0x88, 0xb5])).collect();
    assert!(ours.len() >= 1000 && ours.len() < n as usize, "{} of {n} frames", ours.len());
    // What the full ring cost is counted: every frame sent arrived or was dropped by the kernel.
    let kernel = pb.extra_stats().kernel_dropped;
    assert!(kernel > 0 && ours.len() as u64 + kernel >= u64::from(n), "{} received, {kernel} dropped", ours.len());
    assert!(pb.stats().rx_dropped >= kernel);
    let mut last = None;
    for f in &ours {
        let seq = u32::from_be_bytes(f[14..18].try_into().unwrap());
        assert_eq!(**f, numbered(seq, 64 + (seq as usize % 700)), "frame {seq} altered");
        assert!(last.is_none_or(|l| seq > l), "frame {seq} after {last:?}");
        last = Some(seq);
    }
    // After the overflow, the ring still delivers everything, across its wrap.
    for round in 0..3u32 {
        let base = 10_000 + round * 3000;
        send_all(&mut pa, &pool, (base..base + 3000).map(|s| numbered(s, 64)));
        let more: Vec<_> =
            recv_all(&mut pb, 3000).into_iter().filter(|f| f.get(12..14) == Some(&[0x88, 0xb5])).collect();
        let seqs: Vec<u32> = more.iter().map(|f| u32::from_be_bytes(f[14..18].try_into().unwrap())).collect();
        assert_eq!(seqs, (base..base + 3000).collect::<Vec<_>>(), "round {round}");
    }
    // Longer than a slot (the pool's 2048-byte buffers): counted, not delivered.
    let before = pb.extra_stats().truncated;
    send_all(&mut pa, &pool, [numbered(1, 4000), numbered(2, 100)].into_iter());
    let last: Vec<_> = recv_all(&mut pb, 1).into_iter().filter(|f| f.get(12..14) == Some(&[0x88, 0xb5])).collect();
    assert_eq!(last, vec![numbered(2, 100)]);
    assert_eq!(pb.extra_stats().truncated, before + 1);
}
