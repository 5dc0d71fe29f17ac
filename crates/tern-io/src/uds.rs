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

use crate::{Batch, Packet, Pool, Port, PortStats};

/// Bytes of the peer-address prefix: family (4 or 6), zero, port (big-endian), 16 address bytes.
pub const PEER_PREFIX: usize = 20;
const MAX_BATCH: usize = crate::udp::MAX_BATCH;

struct Vecs {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<[libc::iovec; 2]>,
    prefixes: Vec<[u8; PEER_PREFIX]>,
}

// SAFETY: the raw pointers are rewritten before every system call by the thread that owns the
// port and only dereferenced by the kernel during that call.
unsafe impl Send for Vecs {}

/// One end of a Unix datagram link.
pub struct UdsPort {
    sock: UnixDatagram,
    pool: Pool,
    addr: SocketAddr,
    rx_bufs: Vec<Packet>,
    vecs: Vecs,
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
        // SAFETY: all-zero bytes are a valid mmsghdr.
        let hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let iov = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
        UdsPort {
            sock,
            pool: pool.clone(),
            addr,
            rx_bufs: Vec::with_capacity(MAX_BATCH),
            vecs: Vecs {
                hdrs: vec![hdr; MAX_BATCH],
                iovs: vec![[iov, iov]; MAX_BATCH],
                prefixes: vec![[0; PEER_PREFIX]; MAX_BATCH],
            },
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

impl UdsPort {
    fn prepare(&mut self, i: usize, data: *mut u8, len: usize) {
        let prefix: *mut [u8; PEER_PREFIX] = &mut self.vecs.prefixes[i];
        self.vecs.iovs[i] = [
            libc::iovec { iov_base: prefix.cast(), iov_len: PEER_PREFIX },
            libc::iovec { iov_base: data.cast(), iov_len: len },
        ];
        let iov: *mut libc::iovec = self.vecs.iovs[i].as_mut_ptr();
        let h = &mut self.vecs.hdrs[i];
        h.msg_len = 0;
        h.msg_hdr.msg_name = std::ptr::null_mut();
        h.msg_hdr.msg_namelen = 0;
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 2;
        h.msg_hdr.msg_control = std::ptr::null_mut();
        h.msg_hdr.msg_controllen = 0;
        h.msg_hdr.msg_flags = 0;
    }
}

impl Port for UdsPort {
    fn recv(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let want = batch.spare().min(MAX_BATCH);
        if want == 0 {
            return Ok(0);
        }
        while self.rx_bufs.len() < want {
            self.rx_bufs.push(self.pool.packet());
        }
        for i in 0..want {
            let buf = self.rx_bufs[i].buffer_mut();
            let (ptr, len) = (buf.as_mut_ptr(), buf.len());
            self.prepare(i, ptr, len);
        }
        // SAFETY: hdrs[..want] point at live iovec pairs over distinct prefix slots and packet
        // buffers of the stated lengths, all outliving the call.
        let r = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                self.vecs.hdrs.as_mut_ptr(),
                want as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        let Some(n) = crate::mmsg_count(r)? else { return Ok(0) };
        let vecs = &self.vecs;
        Ok(crate::deliver_received(&mut self.rx_bufs, n, batch, &mut self.stats, &self.pool, |i| {
            let h = &vecs.hdrs[i];
            let len = (h.msg_len as usize).checked_sub(PEER_PREFIX)?;
            let peer = decode_peer(&vecs.prefixes[i])?;
            (h.msg_hdr.msg_flags & libc::MSG_TRUNC == 0).then_some((len, peer))
        }))
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let total = batch.len();
        let (mut start, mut sent, mut stalls) = (0, 0, 0);
        while start < total {
            let chunk = (total - start).min(MAX_BATCH);
            for i in 0..chunk {
                let p = batch.get(start + i).expect("index below batch length");
                encode_peer(&p.peer, &mut self.vecs.prefixes[i]);
                let data = p.data();
                self.prepare(i, data.as_ptr().cast_mut(), data.len());
            }
            // SAFETY: hdrs[..chunk] point at live iovec pairs over the prefixes and packet bytes
            // owned by `batch`, which sendmmsg only reads.
            let r = unsafe { libc::sendmmsg(self.sock.as_raw_fd(), self.vecs.hdrs.as_mut_ptr(), chunk as u32, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    // The peer's queue is full: give it a moment to drain, then drop.
                    io::ErrorKind::WouldBlock if stalls < 100 => {
                        stalls += 1;
                        std::thread::yield_now();
                        continue;
                    }
                    _ => {
                        self.stats.tx_dropped += (total - start) as u64;
                        break;
                    }
                }
            }
            for i in 0..r as usize {
                self.stats.tx_bytes += batch.get(start + i).map_or(0, |p| p.len() as u64);
            }
            sent += r as usize;
            start += r as usize;
        }
        batch.recycle(&self.pool);
        self.stats.tx_packets += sent as u64;
        self.stats.tx_batches += u64::from(sent > 0);
        Ok(sent)
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
            p.peer = peers[i % 3];
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
            assert_eq!(p.peer, peers[i % 3]);
        }
        assert_eq!((b.stats().rx_packets, a.local_addr()), (90, here));
    }
}
