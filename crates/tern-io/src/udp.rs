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
    /// With [`enable_rx_timestamps`](UdpPort::enable_rx_timestamps): a control buffer per
    /// message, and the stamps of what the last `recv` delivered.
    stamps: Option<Stamps>,
}

/// Receive timestamps' buffers: room for one `SCM_TIMESTAMPNS` message per datagram.
struct Stamps {
    ctrl: Vec<[u64; CTRL_WORDS]>,
    got: Vec<u64>,
}

/// A control buffer's size in 8-byte words: a `cmsghdr` (16 bytes) and a `timespec` (16),
/// with room to spare.
const CTRL_WORDS: usize = 8;

/// The kernel's receive time in `hdr`'s control messages (`SCM_TIMESTAMPNS`), ns since the
/// Unix epoch; None if there is none.
fn rx_stamp(hdr: &libc::msghdr) -> Option<u64> {
    // SAFETY: `hdr` came back from recvmmsg: msg_control points at this message's control
    // buffer and msg_controllen is what the kernel wrote there, so CMSG_FIRSTHDR/CMSG_NXTHDR
    // walk only headers inside it; a timestamp message's data is a timespec, read unaligned.
    // Tested in `tests::receive_timestamps_come_from_the_kernel`.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET
                && (*c).cmsg_type == libc::SCM_TIMESTAMPNS
                && (*c).cmsg_len as usize >= libc::CMSG_LEN(size_of::<libc::timespec>() as u32) as usize
            {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::timespec>());
                return Some((ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64));
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    None
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
            stamps: None,
        })
    }

    /// Asks the kernel for each datagram's receive time (`SO_TIMESTAMPNS`: the time the
    /// datagram's frame entered the host's network stack, on the system's real-time clock), as
    /// `ping` does: from then on [`rx_stamps`](Self::rx_stamps) gives them.
    pub fn enable_rx_timestamps(&mut self) -> io::Result<()> {
        let one: libc::c_int = 1;
        // SAFETY: `one` is a live c_int for the duration of the call, its size given.
        let r = unsafe {
            libc::setsockopt(
                self.fd,
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPNS,
                (&one as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        self.stamps = Some(Stamps { ctrl: vec![[0; CTRL_WORDS]; MAX_BATCH], got: Vec::with_capacity(MAX_BATCH) });
        Ok(())
    }

    /// With receive timestamps on: the kernel's receive time of each datagram the last
    /// [`recv`](Port::recv) appended to its batch, in order, ns since the Unix epoch (0 where
    /// the kernel gave none). Empty otherwise.
    pub fn rx_stamps(&self) -> &[u64] {
        self.stamps.as_ref().map_or(&[], |s| &s.got)
    }

    /// The socket, for options this type does not wrap.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// Steers this socket's `SO_REUSEPORT` group by the datagram's payload: a datagram goes to
    /// the group's socket number `(big-endian u32 at payload offset `offset`) mod n`, in bind
    /// order. Sockets bound after the first `n` receive nothing but can still send from the
    /// group's address; a datagram shorter than `offset + 4` bytes goes to socket 0 (never to
    /// the kernel's flow hash, which could pick one of those). Call it once every socket of the
    /// group is bound.
    pub fn steer_reuseport_by_payload(&self, offset: u32, n: u32) -> io::Result<()> {
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "reuseport steering needs n >= 1"));
        }
        use crate::cbpf::{Insn, Program};
        let prog = Program::new(vec![
            Insn::ld_len(),
            Insn::jge(offset.saturating_add(4), 1, 0),
            Insn::ret_k(0),
            Insn::ld_w_abs(offset),
            Insn::alu_mod_k(n),
            Insn::ret_a(),
        ])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        self.attach_reuseport_cbpf(&prog)
    }

    /// Attaches `prog` as the steering program of this socket's `SO_REUSEPORT` group
    /// (`SO_ATTACH_REUSEPORT_CBPF`), replacing any before it: the kernel runs it on each
    /// datagram's UDP payload and delivers the datagram to the group's socket of the index it
    /// returns, in bind order (an index past the last socket: the kernel's flow hash). Any socket
    /// of the group may attach, at any time.
    pub fn attach_reuseport_cbpf(&self, prog: &crate::cbpf::Program) -> io::Result<()> {
        attach_reuseport_cbpf(self.fd, prog)
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
        poll_fd(self.fd, events, timeout)
    }
}

/// Waits until `fd` has one of `events` or `timeout` passes (an interrupted wait returns early).
pub(crate) fn poll_fd(fd: RawFd, events: libc::c_short, timeout: Duration) -> io::Result<()> {
    poll_fds(&mut [libc::pollfd { fd, events, revents: 0 }], timeout)
}

/// Waits until one of `fds` has one of its events or `timeout` passes (an interrupted wait
/// returns early); `revents` says which.
pub(crate) fn poll_fds(fds: &mut [libc::pollfd], timeout: Duration) -> io::Result<()> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `fds` (with its length) and `ts` are valid for the duration of the call; a null
    // sigmask keeps the current one.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &ts, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
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
            if let Some(st) = self.stamps.as_mut() {
                let h = &mut self.vecs.hdrs[i].msg_hdr;
                h.msg_control = st.ctrl[i].as_mut_ptr().cast();
                h.msg_controllen = size_of::<[u64; CTRL_WORDS]>();
            }
        }
        if let Some(st) = self.stamps.as_mut() {
            st.got.clear();
        }
        // SAFETY: hdrs[..want] point at `want` live iovecs, each at a distinct packet buffer of
        // the stated length, and at distinct sockaddr_storage slots; all outlive the call.
        let r = unsafe {
            libc::recvmmsg(self.fd, self.vecs.hdrs.as_mut_ptr(), want as u32, libc::MSG_DONTWAIT, std::ptr::null_mut())
        };
        let Some(n) = crate::mmsg_count(r)? else { return Ok(0) };
        let (hdrs, names, mut stamps) = (&self.vecs.hdrs, &self.names, self.stamps.as_mut());
        Ok(crate::deliver_received(&mut self.rx_bufs, n, batch, &mut self.stats, &self.pool, |i| {
            let h = &hdrs[i];
            let peer = sockaddr_from(&names[i])?;
            let ok = h.msg_hdr.msg_flags & libc::MSG_TRUNC == 0;
            if let (true, Some(st)) = (ok, stamps.as_deref_mut()) {
                st.got.push(rx_stamp(&h.msg_hdr).unwrap_or(0));
            }
            ok.then_some((h.msg_len as usize, peer))
        }))
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
                let name_len = sockaddr_into(&p.peer(), &mut self.names[i]);
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
        self.stats.sent(sent);
        // Errors for single destinations are counted, not fatal: the batch went out otherwise.
        let _ = result;
        Ok(sent)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.wait_for(libc::POLLIN, timeout)
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// Several UDP sockets as one port, so one endpoint's traffic spreads over several flows (and
/// so over the receiver's `SO_REUSEPORT` sockets). A packet leaves by the socket chosen by the
/// big-endian u32 at `steer_offset` of its bytes (modulo the number of sockets), so packets that
/// carry the same value there (a request id) always use the same flow; shorter packets use the
/// first socket. Receiving takes from every socket in turn.
#[derive(Debug)]
pub struct MultiUdpPort {
    ports: Vec<UdpPort>,
    steer_offset: usize,
    next_rx: usize,
    out: Vec<Batch>,
}

impl MultiUdpPort {
    /// Binds `flows` sockets (at least 1) to `ip` with kernel-chosen ports.
    pub fn bind(ip: std::net::IpAddr, flows: usize, steer_offset: usize, pool: &Pool) -> io::Result<MultiUdpPort> {
        let ports = (0..flows.max(1))
            .map(|_| UdpPort::bind(SocketAddr::new(ip, 0), pool, &UdpConfig::default()))
            .collect::<io::Result<Vec<_>>>()?;
        let out = (0..ports.len()).map(|_| Batch::new(MAX_BATCH)).collect();
        Ok(MultiUdpPort { ports, steer_offset, next_rx: 0, out })
    }

    /// The sockets' addresses.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.ports.iter().map(Port::local_addr).collect()
    }

    fn flow_of(&self, p: &Packet) -> usize {
        let o = self.steer_offset;
        p.data()
            .get(o..o + 4)
            .map_or(0, |b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize % self.ports.len())
    }
}

impl Port for MultiUdpPort {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let n = self.ports.len();
        let mut got = 0;
        for k in 0..n {
            if batch.is_full() {
                break;
            }
            let i = (self.next_rx + k) % n;
            got += self.ports[i].recv(now, batch)?;
        }
        self.next_rx = (self.next_rx + 1) % n;
        Ok(got)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut sent = 0;
        for p in batch.drain() {
            let f = self.flow_of(&p);
            if let Some(p) = self.out[f].push(p) {
                sent += self.ports[f].send(now, &mut self.out[f])?;
                let _ = self.out[f].push(p);
            }
        }
        for (port, out) in self.ports.iter_mut().zip(self.out.iter_mut()) {
            if !out.is_empty() {
                sent += port.send(now, out)?;
            }
        }
        Ok(sent)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let mut pfds: Vec<libc::pollfd> =
            self.ports.iter().map(|p| libc::pollfd { fd: p.fd, events: libc::POLLIN, revents: 0 }).collect();
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `pfds` holds `pfds.len()` initialised pollfds and `ts` is valid for the call.
        let r = unsafe { libc::ppoll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, &ts, std::ptr::null()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        Ok(())
    }

    /// The first socket's address.
    fn local_addr(&self) -> SocketAddr {
        self.ports[0].local_addr()
    }

    /// Counters summed over the sockets.
    fn stats(&self) -> PortStats {
        let mut t = PortStats::default();
        for s in self.ports.iter().map(Port::stats) {
            t += s;
        }
        t
    }
}

/// Attaches `prog` to the `SO_REUSEPORT` group of socket `fd` (see
/// [`UdpPort::attach_reuseport_cbpf`]); `fd` may be any handle of a group member.
pub fn attach_reuseport_cbpf(fd: RawFd, prog: &crate::cbpf::Program) -> io::Result<()> {
    // SO_ATTACH_REUSEPORT_CBPF from <asm-generic/socket.h>; the same on every Linux
    // architecture except mips, parisc and sparc.
    const SO_ATTACH_REUSEPORT_CBPF: libc::c_int = 51;
    let mut insns: Vec<libc::sock_filter> =
        prog.insns().iter().map(|i| libc::sock_filter { code: i.code, jt: i.jt, jf: i.jf, k: i.k }).collect();
    let fprog = libc::sock_fprog { len: insns.len() as u16, filter: insns.as_mut_ptr() };
    // SAFETY: `fprog` points at `insns` (at most 4096 of them, a checked program), which outlive
    // the call; the kernel copies the program. Tested in `tests::reuseport_steering_by_payload`
    // and `tern-dispatch`'s `kernel_steering_places_requests_by_their_rules`.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn any() -> SocketAddr {
        "127.0.0.1:0".parse().unwrap()
    }

    /// With receive timestamps on, every datagram a `recv` delivers has the kernel's receive
    /// time, between its send and its receipt on the real-time clock; off, there are none.
    #[test]
    fn receive_timestamps_come_from_the_kernel() {
        let real_ns = || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let pool = Pool::new(256, 2048);
        let mut a = UdpPort::bind(any(), &pool, &UdpConfig::default()).unwrap();
        let mut b = UdpPort::bind(any(), &pool, &UdpConfig::default()).unwrap();
        let mut c = UdpPort::bind(any(), &pool, &UdpConfig::default()).unwrap();
        b.enable_rx_timestamps().unwrap();
        let mut batch = Batch::new(32);
        let before = real_ns();
        for to in [b.local_addr(), c.local_addr()] {
            for i in 0..10u8 {
                let mut p = pool.packet();
                p.extend_from_slice(&[i; 40]).unwrap();
                p.set_peer(to);
                batch.push(p);
            }
            assert_eq!(a.send(Instant::now(), &mut batch).unwrap(), 10);
        }
        let (mut stamps, mut got) = (Vec::new(), 0);
        let deadline = Instant::now() + Duration::from_secs(5);
        while got < 10 && Instant::now() < deadline {
            b.wait(Duration::from_millis(50)).unwrap();
            let n = b.recv(Instant::now(), &mut batch).unwrap();
            assert_eq!(b.rx_stamps().len(), n, "one stamp a datagram delivered");
            stamps.extend_from_slice(b.rx_stamps());
            got += n;
        }
        let after = real_ns();
        assert_eq!(got, 10);
        assert!(stamps.iter().all(|&t| t >= before && t <= after), "{before} {stamps:?} {after}");
        assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "in order: {stamps:?}");
        batch.recycle(&pool);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = 0;
        while got < 10 && Instant::now() < deadline {
            c.wait(Duration::from_millis(50)).unwrap();
            got += c.recv(Instant::now(), &mut batch).unwrap();
            assert!(c.rx_stamps().is_empty());
        }
        assert_eq!(got, 10);
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
            p.set_peer(b.local_addr());
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
            assert_eq!(p.peer(), a.local_addr());
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

    #[test]
    fn reuseport_steering_by_payload() {
        let pool = Pool::new(256, 2048);
        let cfg = UdpConfig { reuse_port: true, ..UdpConfig::default() };
        let mut group = vec![UdpPort::bind(any(), &pool, &cfg).unwrap()];
        let addr = group[0].local_addr();
        for _ in 0..3 {
            group.push(UdpPort::bind(addr, &pool, &cfg).unwrap());
        }
        // Two steered sockets; the other two only send.
        group[0].steer_reuseport_by_payload(2, 2).unwrap();
        assert!(group[0].steer_reuseport_by_payload(2, 0).is_err());
        let s = UdpSocket::bind(any()).unwrap();
        for id in 0..40u32 {
            let mut d = vec![0xaa, 0xbb];
            d.extend_from_slice(&id.to_be_bytes());
            s.send_to(&d, addr).unwrap();
        }
        let mut batch = Batch::new(64);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = [0usize; 4];
        while got.iter().sum::<usize>() < 40 && Instant::now() < deadline {
            for (i, p) in group.iter_mut().enumerate() {
                p.wait(Duration::from_millis(5)).unwrap();
                p.recv(Instant::now(), &mut batch).unwrap();
                for pkt in batch.drain() {
                    let id = u32::from_be_bytes(pkt.data()[2..6].try_into().unwrap());
                    assert_eq!(id as usize % 2, i, "request {id} reached socket {i}");
                    got[i] += 1;
                    pool.put(pkt);
                }
            }
        }
        assert_eq!(got, [20, 20, 0, 0]);
    }

    #[test]
    fn multi_port_keeps_each_id_on_one_flow() {
        let pool = Pool::new(512, 2048);
        let mut m = MultiUdpPort::bind("127.0.0.1".parse().unwrap(), 4, 2, &pool).unwrap();
        let mut sink = UdpPort::bind(any(), &pool, &UdpConfig::default()).unwrap();
        let mut batch = Batch::new(200);
        for id in 0..100u32 {
            let mut p = pool.packet();
            p.extend_from_slice(&[0, 0]).unwrap();
            p.extend_from_slice(&id.to_be_bytes()).unwrap();
            p.set_peer(sink.local_addr());
            batch.push(p);
        }
        assert_eq!(m.send(Instant::now(), &mut batch).unwrap(), 100);
        let addrs = m.local_addrs();
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_secs(5);
        while got < 100 && Instant::now() < deadline {
            sink.wait(Duration::from_millis(10)).unwrap();
            sink.recv(Instant::now(), &mut batch).unwrap();
            for p in batch.drain() {
                let id = u32::from_be_bytes(p.data()[2..6].try_into().unwrap());
                assert_eq!(p.peer(), addrs[id as usize % 4]);
                got += 1;
                // Echo it back so the multi-port receives on that flow.
                let mut back = Batch::new(1);
                let mut q = pool.clone_packet(&p);
                q.set_peer(p.peer());
                back.push(q);
                sink.send(Instant::now(), &mut back).unwrap();
            }
        }
        assert_eq!(got, 100);
        let mut echoed = 0;
        while echoed < 100 && Instant::now() < deadline {
            m.wait(Duration::from_millis(10)).unwrap();
            echoed += m.recv(Instant::now(), &mut batch).unwrap();
            batch.recycle(&pool);
        }
        assert_eq!((echoed, m.stats().rx_packets), (100, 100));
    }
}

/// The path MTU the kernel knows towards `peer` (the outgoing interface's MTU until it learns a
/// smaller one): a UDP socket connected to `peer` asked for `IP_MTU` (`IPV6_MTU`). `None` when
/// there is no route or the kernel does not say.
pub fn path_mtu(peer: SocketAddr) -> Option<usize> {
    let local: SocketAddr =
        if peer.is_ipv4() { (Ipv4Addr::UNSPECIFIED, 0).into() } else { (Ipv6Addr::UNSPECIFIED, 0).into() };
    let sock = UdpSocket::bind(local).ok()?;
    sock.connect(peer).ok()?;
    let (level, name) =
        if peer.is_ipv4() { (libc::IPPROTO_IP, libc::IP_MTU) } else { (libc::IPPROTO_IPV6, libc::IPV6_MTU) };
    let mut mtu: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the socket is open for the call; `mtu` and `len` are valid, writable, and `len`
    // holds `mtu`'s size, which the kernel does not write past.
    let r = unsafe { libc::getsockopt(sock.as_raw_fd(), level, name, (&raw mut mtu).cast(), &mut len) };
    (r == 0 && mtu > 0).then_some(mtu as usize)
}

#[cfg(test)]
mod path_mtu_tests {
    #[test]
    fn loopback_has_the_interface_mtu() {
        // Linux's loopback MTU is 65536 by default; the path MTU is the interface's, capped at
        // the largest IPv4 packet (65535).
        let mtu = super::path_mtu("127.0.0.1:9".parse().unwrap()).expect("a route to loopback");
        assert!(mtu >= 576, "{mtu}");
        if let Ok(s) = std::fs::read_to_string("/sys/class/net/lo/mtu") {
            assert_eq!(mtu, s.trim().parse::<usize>().unwrap().min(65_535));
        }
    }
}
