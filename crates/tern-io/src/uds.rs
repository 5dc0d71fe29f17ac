//! Unix domain datagram links between threads of one process: the IPC of the paper's UDS
//! software-dispatcher baseline (QingNiao §5.1). Each datagram carries the packet's peer address
//! in a 20-byte prefix, so a packet keeps its UDP source across the hop. Batches move with one
//! `sendmmsg`/`recvmmsg` per batch, as the UDP port does; the packet bytes are copied through
//! the kernel (that copy is what this IPC costs).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::mmsg::PrefixedVecs;
use crate::{Batch, Packet, Pool, Port, PortStats};

/// Bytes of the peer-address prefix: family (4 or 6), zero, port (big-endian), 16 address bytes.
pub const PEER_PREFIX: usize = 20;
const MAX_BATCH: usize = crate::udp::MAX_BATCH;

/// One end of a Unix datagram link.
pub struct UdsPort {
    sock: UnixDatagram,
    pool: Pool,
    addr: SocketAddr,
    rx_bufs: Vec<Packet>,
    vecs: PrefixedVecs<PEER_PREFIX>,
    stats: PortStats,
}

impl std::fmt::Debug for UdsPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdsPort").field("addr", &self.addr).field("stats", &self.stats).finish()
    }
}

/// Two connected, non-blocking ends. `addr` is what both report as their address (a link has
/// none of its own). The kernel buffers are enlarged to `buffer` bytes where allowed.
pub fn pair(pool: &Pool, addr: SocketAddr, buffer: usize) -> io::Result<(UdsPort, UdsPort)> {
    let (a, b) = UnixDatagram::pair()?;
    for s in [&a, &b] {
        s.set_nonblocking(true)?;
        let s = socket2::SockRef::from(s);
        let _ = s.set_send_buffer_size(buffer);
        let _ = s.set_recv_buffer_size(buffer);
    }
    Ok((UdsPort::new(a, pool, addr), UdsPort::new(b, pool, addr)))
}

impl UdsPort {
    fn new(sock: UnixDatagram, pool: &Pool, addr: SocketAddr) -> UdsPort {
        UdsPort {
            sock,
            pool: pool.clone(),
            addr,
            rx_bufs: Vec::with_capacity(MAX_BATCH),
            vecs: PrefixedVecs::new(MAX_BATCH),
            stats: PortStats::default(),
        }
    }

    /// Another handle on the same socket (several senders may feed one receiver), with its own
    /// counters.
    pub fn try_clone(&self) -> io::Result<UdsPort> {
        Ok(UdsPort::new(self.sock.try_clone()?, &self.pool, self.addr))
    }
}

fn encode_peer(a: &SocketAddr, out: &mut [u8; PEER_PREFIX]) {
    out[1] = 0;
    out[2..4].copy_from_slice(&a.port().to_be_bytes());
    match a.ip() {
        IpAddr::V4(ip) => {
            out[0] = 4;
            out[4..8].copy_from_slice(&ip.octets());
            out[8..].fill(0);
        }
        IpAddr::V6(ip) => {
            out[0] = 6;
            out[4..].copy_from_slice(&ip.octets());
        }
    }
}

fn decode_peer(b: &[u8; PEER_PREFIX]) -> Option<SocketAddr> {
    let port = u16::from_be_bytes([b[2], b[3]]);
    match b[0] {
        4 => Some(SocketAddr::new(Ipv4Addr::new(b[4], b[5], b[6], b[7]).into(), port)),
        6 => {
            let o: [u8; 16] = b[4..].try_into().ok()?;
            Some(SocketAddr::new(Ipv6Addr::from(o).into(), port))
        }
        _ => None,
    }
}

impl Port for UdsPort {
    fn recv(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let want = batch.spare().min(MAX_BATCH);
        if want == 0 {
            return Ok(0);
        }
        let fd = self.sock.as_raw_fd();
        let r = crate::mmsg::recv_prefixed(fd, &mut self.vecs, &mut self.rx_bufs, &self.pool, want, 0)?;
        let Some(n) = r else { return Ok(0) };
        let vecs = &self.vecs;
        Ok(crate::deliver_received(&mut self.rx_bufs, n, batch, &mut self.stats, &self.pool, |i| {
            let h = &vecs.hdrs[i];
            let len = (h.msg_len as usize).checked_sub(PEER_PREFIX)?;
            let peer = decode_peer(&vecs.prefixes[i])?;
            (h.msg_hdr.msg_flags & libc::MSG_TRUNC == 0).then_some((len, peer))
        }))
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let fd = self.sock.as_raw_fd();
        Ok(crate::mmsg::send_prefixed(fd, &mut self.vecs, batch, &mut self.stats, &self.pool, |p, prefix| {
            encode_peer(&p.peer(), prefix)
        }))
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        crate::udp::poll_fd(self.sock.as_raw_fd(), libc::POLLIN, timeout)
    }

    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cross_with_their_peers() {
        let pool = Pool::new(256, 2048);
        let here: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let (mut a, mut b) = pair(&pool, here, 1 << 20).unwrap();
        let peers: [SocketAddr; 3] =
            ["10.0.0.1:5".parse().unwrap(), "[2001:db8::7]:65535".parse().unwrap(), "127.0.0.1:1".parse().unwrap()];
        let mut batch = Batch::new(100);
        for i in 0..90usize {
            let mut p = pool.packet();
            p.extend_from_slice(&vec![i as u8; i + 1]).unwrap();
            p.set_peer(peers[i % 3]);
            batch.push(p);
        }
        assert_eq!(a.send(Instant::now(), &mut batch).unwrap(), 90);
        let mut got = Vec::new();
        while got.len() < 90 {
            b.wait(Duration::from_secs(1)).unwrap();
            b.recv(Instant::now(), &mut batch).unwrap();
            got.extend(batch.drain());
        }
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p.data(), &vec![i as u8; i + 1][..]);
            assert_eq!(p.peer(), peers[i % 3]);
        }
        assert_eq!((b.stats().rx_packets, a.local_addr()), (90, here));
    }
}
