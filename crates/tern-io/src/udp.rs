//! Kernel UDP ports: `recvmmsg`/`sendmmsg` move a whole batch per system call; `SO_REUSEPORT`
//! lets several threads bind one address and the kernel spread flows across them (the software
//! counterpart of RSS).

use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};

use crate::{Batch, Packet, Pool, Port, PortStats};

/// Most packets one system call moves.
pub const MAX_BATCH: usize = 64;

/// Options of a UDP port.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// Set `SO_REUSEPORT` before binding.
    pub reuse_port: bool,
    /// Kernel receive buffer, bytes.
    pub recv_buffer: Option<usize>,
    /// Kernel send buffer, bytes.
    pub send_buffer: Option<usize>,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig { reuse_port: false, recv_buffer: Some(4 << 20), send_buffer: Some(4 << 20) }
    }
}

// The raw pointers in these headers point into the port's own `iovs`, `names` and packet
// buffers and are rewritten before every system call.
struct MsgVecs {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
}

// SAFETY: the pointers are only dereferenced by the kernel during a system call made by the
// thread that owns the port; they never outlive the call's borrow of the port.
unsafe impl Send for MsgVecs {}

/// A UDP socket as a [`Port`].
pub struct UdpPort {
    socket: UdpSocket,
    fd: RawFd,
    pool: Pool,
    addr: SocketAddr,
    rx_bufs: Vec<Packet>,
    vecs: MsgVecs,
    names: Vec<libc::sockaddr_storage>,
    stats: PortStats,
}

impl std::fmt::Debug for UdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpPort").field("addr", &self.addr).field("stats", &self.stats).finish()
    }
}

impl UdpPort {
    /// Binds a non-blocking UDP socket to `addr` (port 0 picks a free port).
    pub fn bind(addr: SocketAddr, pool: &Pool, config: &UdpConfig) -> io::Result<UdpPort> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if config.reuse_port {
            socket.set_reuse_port(true)?;
        }
        // Buffer sizes are best effort: the kernel caps them at its sysctl limits.
        if let Some(n) = config.recv_buffer {
            let _ = socket.set_recv_buffer_size(n);
        }
        if let Some(n) = config.send_buffer {
            let _ = socket.set_send_buffer_size(n);
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        let socket: UdpSocket = socket.into();
        let addr = socket.local_addr()?;
        let fd = socket.as_raw_fd();
        // SAFETY: all-zero bytes are a valid value of these plain C structs.
        let (hdr, name): (libc::mmsghdr, libc::sockaddr_storage) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        let iov = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
        Ok(UdpPort {
            socket,
            fd,
            pool: pool.clone(),
            addr,
            rx_bufs: Vec::with_capacity(MAX_BATCH),
            vecs: MsgVecs { hdrs: vec![hdr; MAX_BATCH], iovs: vec![iov; MAX_BATCH] },
            names: vec![name; MAX_BATCH],
            stats: PortStats::default(),
        })
    }

    /// The socket, for options this type does not wrap.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    fn prepare(&mut self, i: usize, iov_base: *mut u8, iov_len: usize, name_len: u32) {
        self.vecs.iovs[i] = libc::iovec { iov_base: iov_base.cast(), iov_len };
        let iov_ptr: *mut libc::iovec = &mut self.vecs.iovs[i];
        let name_ptr: *mut libc::sockaddr_storage = &mut self.names[i];
        let h = &mut self.vecs.hdrs[i];
        h.msg_len = 0;
        h.msg_hdr.msg_name = name_ptr.cast();
        h.msg_hdr.msg_namelen = name_len;
        h.msg_hdr.msg_iov = iov_ptr;
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_control = std::ptr::null_mut();
        h.msg_hdr.msg_controllen = 0;
        h.msg_hdr.msg_flags = 0;
    }

    fn wait_for(&self, events: libc::c_short, timeout: Duration) -> io::Result<()> {
        let mut pfd = libc::pollfd { fd: self.fd, events, revents: 0 };
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `pfd` and `ts` are valid for the duration of the call; a null sigmask keeps
        // the current one.
        let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }
}

fn sockaddr_from(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match i32::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it is large and
            // aligned enough for.
            let sin = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn sockaddr_into(addr: &SocketAddr, s: &mut libc::sockaddr_storage) -> u32 {
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe { &mut *(s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr { s_addr: u32::from(*a.ip()).to_be() };
            size_of::<libc::sockaddr_in>() as u32
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(s as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr { s6_addr: a.ip().octets() };
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>() as u32
        }
    }
}

impl Port for UdpPort {
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
            self.prepare(i, ptr, len, size_of::<libc::sockaddr_storage>() as u32);
        }
        // SAFETY: hdrs[..want] point at `want` live iovecs, each at a distinct packet buffer of
        // the stated length, and at distinct sockaddr_storage slots; all outlive the call.
        let r = unsafe {
            libc::recvmmsg(self.fd, self.vecs.hdrs.as_mut_ptr(), want as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let n = r as usize;
        let mut delivered = 0;
        for (i, mut p) in self.rx_bufs.drain(..n).enumerate() {
            let h = &self.vecs.hdrs[i];
            let peer = sockaddr_from(&self.names[i]);
            match peer {
                Some(peer) if h.msg_hdr.msg_flags & libc::MSG_TRUNC == 0 => {
                    p.set_len(h.msg_len as usize);
                    p.peer = peer;
                    self.stats.rx_bytes += p.len() as u64;
                    batch.push(p);
                    delivered += 1;
                }
                _ => {
                    self.stats.rx_dropped += 1;
                    self.pool.put(p);
                }
            }
        }
        self.stats.rx_packets += delivered as u64;
        self.stats.rx_batches += u64::from(delivered > 0);
        Ok(delivered)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let total = batch.len();
        let mut start = 0;
        let mut sent = 0;
        let mut stalls = 0;
        let mut result = Ok(());
        while start < total {
            let chunk = (total - start).min(MAX_BATCH);
            for i in 0..chunk {
                let p = batch.get(start + i).expect("index below batch length");
                let name_len = sockaddr_into(&p.peer, &mut self.names[i]);
                let data = p.data();
                self.prepare(i, data.as_ptr().cast_mut(), data.len(), name_len);
            }
            // SAFETY: hdrs[..chunk] point at live iovecs over packet bytes owned by `batch`
            // (sendmmsg only reads them) and at initialised socket addresses.
            let r = unsafe { libc::sendmmsg(self.fd, self.vecs.hdrs.as_mut_ptr(), chunk as u32, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::Interrupted => continue,
                    io::ErrorKind::WouldBlock if stalls < 1000 => {
                        stalls += 1;
                        self.wait_for(libc::POLLOUT, Duration::from_micros(100))?;
                        continue;
                    }
                    io::ErrorKind::WouldBlock => {
                        self.stats.tx_dropped += (total - start) as u64;
                        break;
                    }
                    // A per-destination error (unreachable, refused): drop that packet only.
                    _ => {
                        self.stats.tx_dropped += 1;
                        start += 1;
                        if result.is_ok() {
                            result = Err(e);
                        }
                        continue;
                    }
                }
            }
            let r = r as usize;
            for i in 0..r {
                self.stats.tx_bytes += batch.get(start + i).map_or(0, |p| p.len() as u64);
            }
            sent += r;
            start += r;
        }
        batch.recycle(&self.pool);
        self.stats.tx_packets += sent as u64;
        self.stats.tx_batches += u64::from(sent > 0);
        // Errors for single destinations are counted, not fatal: the batch went out otherwise.
        let _ = result;
        Ok(sent)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.wait_for(libc::POLLIN, timeout)
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

    fn any() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    #[test]
    fn batch_round_trip_over_loopback() {
        let pool = Pool::new(256, 2048);
        let mut a = UdpPort::bind(any(), &pool, &UdpConfig::default()).unwrap();
        let mut b = UdpPort::bind(any(), &pool, &UdpConfig::default()).unwrap();
        let mut batch = Batch::new(32);
        for i in 0..20u8 {
            let mut p = pool.packet();
            p.extend_from_slice(&[i; 100]).unwrap();
            p.peer = b.local_addr();
            batch.push(p);
        }
        assert_eq!(a.send(Instant::now(), &mut batch).unwrap(), 20);
        assert!(batch.is_empty());
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while got < 20 && Instant::now() < deadline {
            b.wait(Duration::from_millis(50)).unwrap();
            got += b.recv(Instant::now(), &mut batch).unwrap();
        }
        assert_eq!(got, 20);
        for (i, p) in batch.iter().enumerate() {
            assert_eq!(p.data(), &[i as u8; 100][..]);
            assert_eq!(p.peer, a.local_addr());
        }
        assert_eq!(b.stats().rx_packets, 20);
        assert_eq!(a.stats().tx_bytes, 2000);
        batch.recycle(&pool);
    }

    #[test]
    fn oversized_datagrams_are_dropped_and_counted() {
        let pool = Pool::new(16, 256);
        let mut b = UdpPort::bind(any(), &pool, &UdpConfig::default()).unwrap();
        let s = UdpSocket::bind(any()).unwrap();
        s.send_to(&[1u8; 1000], b.local_addr()).unwrap();
        s.send_to(&[2u8; 10], b.local_addr()).unwrap();
        let mut batch = Batch::new(8);
        let deadline = Instant::now() + Duration::from_secs(5);
        while batch.is_empty() && Instant::now() < deadline {
            b.wait(Duration::from_millis(50)).unwrap();
            b.recv(Instant::now(), &mut batch).unwrap();
        }
        assert_eq!(batch.get(0).unwrap().data(), &[2u8; 10]);
        assert_eq!(b.stats().rx_dropped, 1);
    }

    #[test]
    fn reuse_port_binds_twice() {
        let pool = Pool::new(4, 256);
        let cfg = UdpConfig { reuse_port: true, ..UdpConfig::default() };
        let a = UdpPort::bind(any(), &pool, &cfg).unwrap();
        UdpPort::bind(a.local_addr(), &pool, &cfg).unwrap();
    }

    #[test]
    fn sockaddr_conversions_round_trip() {
        for s in ["10.1.2.3:4567", "[fe80::1]:9", "[::1]:65535"] {
            let a: SocketAddr = s.parse().unwrap();
            // SAFETY: zeroed sockaddr_storage is valid.
            let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            sockaddr_into(&a, &mut st);
            assert_eq!(sockaddr_from(&st), Some(a));
        }
    }
}
