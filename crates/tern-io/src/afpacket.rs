//! Whole L2 frames on a network interface (a veth or a NIC) through an `AF_PACKET` raw socket:
//! what the flow cache sees and forwards. Needs root (`CAP_NET_RAW`).
//!
//! The socket is bound to one interface, put in promiscuous mode, and ignores the frames it
//! sends itself. Each frame travels behind a virtio-net header (`PACKET_VNET_HDR`), so frames
//! whose checksum the sender left to offload (veth and most NICs do so for local TCP/UDP) are
//! completed here and leave correct; frames the kernel left as one large segment (GSO) are
//! dropped and counted: disable GSO/TSO on the sending side for TCP across the switch
//! (`ip link set DEV gso_max_size 1500` on the hosts' interfaces where the kernel allows).
//! Received frames start after [`DEFAULT_HEADROOM`] bytes, so a VLAN
//! tag can be pushed without moving the frame.
//!
//! Frames arrive through a receive ring shared with the kernel (`PACKET_RX_RING`, TPACKET_V2:
//! about 4,096 frame slots, each as large as the pool's buffers plus the kernel's header), so
//! receiving costs no system call while frames are waiting: the kernel writes each frame into
//! the next free slot as it arrives, and the port copies it into a pool buffer and hands the
//! slot back. Where the kernel refuses a ring, the port receives with `recvmmsg` instead.

use std::ffi::CString;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::mmsg::PrefixedVecs;
use crate::{Batch, DEFAULT_HEADROOM, Packet, Pool, Port, PortStats};

/// Bytes of the virtio-net header in front of every frame.
const VNET_HDR: usize = 10;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const MAX_BATCH: usize = crate::udp::MAX_BATCH;

/// Counters of an AF_PACKET port beyond [`PortStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfPacketStats {
    /// Received frames whose L4 checksum was completed here (checksum offload on the sender).
    pub csum_completed: u64,
    /// Received frames dropped as unsegmented GSO super-frames (also in `rx_dropped`).
    pub gso_dropped: u64,
    /// Received frames dropped as truncated: longer than the buffer (also in `rx_dropped`).
    pub truncated: u64,
    /// Frames the kernel dropped before the port could take them: its receive ring (or socket
    /// buffer) was full (`PACKET_STATISTICS`; also in `rx_dropped`).
    pub kernel_dropped: u64,
}

/// A received slot: its virtio-net header, the frame, and the frame's length on the wire.
type Slot<'a> = ([u8; VNET_HDR], &'a [u8], usize);

/// A TPACKET_V2 receive ring mapped from the kernel: `frame_nr` slots of `frame_size` bytes,
/// `per_block` to a block of `block_size` bytes. A slot whose status has `TP_STATUS_USER` holds
/// a frame for us until we write `TP_STATUS_KERNEL` back; the kernel fills slots in order.
struct RxRing {
    map: *mut u8,
    map_len: usize,
    block_size: usize,
    per_block: usize,
    frame_size: usize,
    frame_nr: usize,
    next: usize,
}

// SAFETY: the mapping belongs to the port (one owner, moved with it); the kernel is the only
// other party and synchronises through each slot's status word.
unsafe impl Send for RxRing {}

impl RxRing {
    /// Frame slots in the ring.
    const SLOTS: usize = 4096;

    /// Asks the kernel for a ring on `fd` whose slots hold frames of up to `buf_size` bytes.
    fn new(fd: &OwnedFd, buf_size: usize) -> io::Result<RxRing> {
        let version = libc::tpacket_versions::TPACKET_V2 as libc::c_int;
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version, "PACKET_VERSION")?;
        // The kernel puts the frame at TPACKET_ALIGN(header + 16) + the virtio-net header
        // less the MAC header, about 80 bytes into the slot.
        let frame_size = (buf_size + 128).next_multiple_of(libc::TPACKET_ALIGNMENT);
        let block_size = (frame_size * 16).next_multiple_of(4096);
        let per_block = block_size / frame_size;
        let block_nr = Self::SLOTS.div_ceil(per_block);
        let req = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: block_nr as u32,
            tp_frame_size: frame_size as u32,
            tp_frame_nr: (per_block * block_nr) as u32,
        };
        setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &req, "PACKET_RX_RING")?;
        let map_len = block_size * block_nr;
        // SAFETY: a fresh shared mapping of the ring the kernel just made for `fd`, of the
        // size it was asked for; the result is checked before use.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // Take the ring down again: while it exists the kernel puts frames there, not in
            // the queue `recvmmsg` reads.
            let none = libc::tpacket_req { tp_block_size: 0, tp_block_nr: 0, tp_frame_size: 0, tp_frame_nr: 0 };
            let _ = setsockopt(fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &none, "PACKET_RX_RING");
            return Err(with_context(e, "mapping the receive ring"));
        }
        Ok(RxRing {
            map: map.cast(),
            map_len,
            block_size,
            per_block,
            frame_size,
            frame_nr: per_block * block_nr,
            next: 0,
        })
    }

    /// The next slot's frame, if the kernel has handed it to us: (virtio-net header, frame,
    /// the frame's length on the wire). `None` for the data when the slot's offsets do not fit
    /// it (never from a correct kernel).
    fn peek(&self) -> Option<Option<Slot<'_>>> {
        let slot = self.slot(self.next);
        // SAFETY: `slot` is the start of a slot inside the mapping, aligned to 16 bytes (the
        // mapping is page-aligned and slots are multiples of TPACKET_ALIGNMENT); its first
        // word is the status the kernel writes, read atomically.
        let status = unsafe { &*slot.cast::<AtomicU32>() }.load(Ordering::Acquire);
        if status & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the slot is ours while its status says so (acquired above): the kernel does
        // not write it until we hand it back, and the header lies within the slot.
        let h = unsafe { std::ptr::read(slot.cast::<libc::tpacket2_hdr>()) };
        let (mac, snap) = (usize::from(h.tp_mac), h.tp_snaplen as usize);
        if mac < VNET_HDR || mac + snap > self.frame_size {
            return Some(None);
        }
        // SAFETY: as above; `mac - VNET_HDR .. mac + snap` lies within the slot (checked).
        let (vnet, frame) = unsafe {
            let v = std::slice::from_raw_parts(slot.add(mac - VNET_HDR), VNET_HDR);
            (v.try_into().expect("10 bytes"), std::slice::from_raw_parts(slot.add(mac), snap))
        };
        Some(Some((vnet, frame, h.tp_len as usize)))
    }

    /// Hands the current slot back to the kernel and moves on.
    fn release(&mut self) {
        let slot = self.slot(self.next);
        // SAFETY: as in `peek`: the slot's aligned status word, written atomically.
        unsafe { &*slot.cast::<AtomicU32>() }.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.next = (self.next + 1) % self.frame_nr;
    }

    fn slot(&self, i: usize) -> *mut u8 {
        let off = (i / self.per_block) * self.block_size + (i % self.per_block) * self.frame_size;
        debug_assert!(off + self.frame_size <= self.map_len);
        // SAFETY: `off` is within the mapping: i < frame_nr = per_block * block_nr.
        unsafe { self.map.add(off) }
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// A raw L2 port on one interface.
pub struct AfPacketPort {
    rx_ring: Option<RxRing>,
    fd: OwnedFd,
    ifname: String,
    ifindex: u32,
    pool: Pool,
    rx_bufs: Vec<Packet>,
    vecs: PrefixedVecs<VNET_HDR>,
    stats: PortStats,
    extra: AfPacketStats,
    /// The kernel's drops read so far (reading them resets the kernel's count).
    kernel_dropped: std::cell::Cell<u64>,
}

impl std::fmt::Debug for AfPacketPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketPort")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("stats", &self.stats)
            .finish()
    }
}

pub(crate) fn setsockopt<T>(
    fd: &OwnedFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
    what: &str,
) -> io::Result<()> {
    // SAFETY: `value` is a live, initialized T and the kernel reads size_of::<T>() bytes of it.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r == 0 { Ok(()) } else { Err(with_context(io::Error::last_os_error(), what)) }
}

pub(crate) fn with_context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// The interface index of `ifname`.
pub fn ifindex(ifname: &str) -> io::Result<u32> {
    let name = CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("interface name {ifname:?} holds a NUL")))?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface named {ifname:?}")));
    }
    Ok(i)
}

impl AfPacketPort {
    /// Opens a raw socket on `ifname`. Fails with the kernel's reason (no such interface;
    /// permission denied without root).
    pub fn open(ifname: &str, pool: &Pool) -> io::Result<AfPacketPort> {
        let index = ifindex(ifname)?;
        let all = (libc::ETH_P_ALL as u16).to_be();
        // Protocol 0 until bound: the socket sees no frames of other interfaces meanwhile.
        // SAFETY: plain socket(2); the result is checked before use.
        let raw =
            unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(with_context(io::Error::last_os_error(), &format!("AF_PACKET socket for {ifname}")));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let one: libc::c_int = 1;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one, "PACKET_VNET_HDR")?;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one, "PACKET_IGNORE_OUTGOING")?;
        let buf: libc::c_int = 4 << 20;
        let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, &buf, "SO_RCVBUF");
        let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &buf, "SO_SNDBUF");
        // SAFETY: all-zero bytes are a valid sockaddr_ll; the fields are then set.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = all;
        sll.sll_ifindex = index as i32;
        // SAFETY: `sll` is a live sockaddr_ll of the stated size.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(with_context(io::Error::last_os_error(), &format!("bind to {ifname}")));
        }
        // SAFETY: all-zero bytes are a valid packet_mreq.
        let mut mreq: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mreq.mr_ifindex = index as i32;
        mreq.mr_type = libc::PACKET_MR_PROMISC as u16;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_ADD_MEMBERSHIP, &mreq, "promiscuous mode")?;
        let rx_ring = RxRing::new(&fd, pool.buf_size()).ok();
        Ok(AfPacketPort {
            rx_ring,
            fd,
            ifname: ifname.to_string(),
            ifindex: index,
            pool: pool.clone(),
            rx_bufs: Vec::with_capacity(MAX_BATCH),
            vecs: PrefixedVecs::new(MAX_BATCH),
            stats: PortStats::default(),
            extra: AfPacketStats::default(),
            kernel_dropped: std::cell::Cell::new(0),
        })
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Counters beyond [`PortStats`].
    pub fn extra_stats(&self) -> AfPacketStats {
        AfPacketStats { kernel_dropped: self.kernel_drops(), ..self.extra }
    }

    /// The frames the kernel dropped for this socket so far: its count since the last read,
    /// added to what earlier reads gave.
    fn kernel_drops(&self) -> u64 {
        let mut st = libc::tpacket_stats { tp_packets: 0, tp_drops: 0 };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `st` and `len` are live and sized for the option; the kernel writes at most
        // `len` bytes.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if r == 0 {
            self.kernel_dropped.set(self.kernel_dropped.get() + u64::from(st.tp_drops));
        }
        self.kernel_dropped.get()
    }
}

/// Completes a checksum the sender left to offload: the field at `start + offset` holds the
/// pseudo-header sum; the checksum covers `frame[start..]`. Returns false if out of bounds.
pub fn complete_checksum(frame: &mut [u8], start: usize, offset: usize) -> bool {
    let at = start + offset;
    if start >= frame.len() || at + 2 > frame.len() {
        return false;
    }
    let mut c = tern_wire::frame::checksum(&frame[start..]);
    if c == 0 {
        // UDP sends a computed zero as all ones; for TCP the two are the same number.
        c = 0xffff;
    }
    frame[at..at + 2].copy_from_slice(&c.to_be_bytes());
    true
}

/// Whether a received frame goes on, whichever way it came (ring or `recvmmsg`): one cut short
/// (`cut`) or left unsegmented (GSO) is counted and dropped; a checksum the sender left to
/// offload is completed in `frame` (one whose offsets do not fit the frame is dropped).
fn admit(extra: &mut AfPacketStats, vnet: &[u8; VNET_HDR], frame: &mut [u8], cut: bool) -> bool {
    if cut {
        extra.truncated += 1;
        return false;
    }
    if vnet[1] != VIRTIO_NET_HDR_GSO_NONE {
        extra.gso_dropped += 1;
        return false;
    }
    if vnet[0] & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
        let start = usize::from(u16::from_ne_bytes([vnet[6], vnet[7]]));
        let offset = usize::from(u16::from_ne_bytes([vnet[8], vnet[9]]));
        if !complete_checksum(frame, start, offset) {
            return false;
        }
        extra.csum_completed += 1;
    }
    true
}

impl AfPacketPort {
    /// Whether frames arrive through the kernel's receive ring (else `recvmmsg`).
    pub fn has_rx_ring(&self) -> bool {
        self.rx_ring.is_some()
    }

    /// Up to `want` frames from the receive ring into `batch`.
    fn recv_ring(&mut self, want: usize, batch: &mut Batch) -> usize {
        let Some(ring) = self.rx_ring.as_mut() else { return 0 };
        let mut delivered = 0;
        for _ in 0..want {
            let Some(slot) = ring.peek() else { break };
            let mut p = None;
            if let Some((vnet, frame, wire)) = slot {
                let mut pkt = self.pool.packet();
                pkt.reserve_headroom(DEFAULT_HEADROOM);
                let cut = frame.len() < wire || pkt.extend_from_slice(frame).is_err();
                if admit(&mut self.extra, &vnet, pkt.data_mut(), cut) {
                    p = Some(pkt);
                } else {
                    self.pool.put(pkt);
                }
            }
            if p.is_none() {
                self.stats.rx_dropped += 1;
            }
            ring.release();
            if let Some(mut pkt) = p {
                pkt.set_peer(crate::UNSPECIFIED);
                self.stats.rx_bytes += pkt.len() as u64;
                batch.push(pkt);
                delivered += 1;
            }
        }
        self.stats.received(delivered);
        delivered
    }
}

impl Port for AfPacketPort {
    fn recv(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let want = batch.spare().min(MAX_BATCH);
        if want == 0 {
            return Ok(0);
        }
        if self.rx_ring.is_some() {
            return Ok(self.recv_ring(want, batch));
        }
        let fd = self.fd.as_raw_fd();
        let r = crate::mmsg::recv_prefixed(fd, &mut self.vecs, &mut self.rx_bufs, &self.pool, want, DEFAULT_HEADROOM)?;
        let Some(n) = r else { return Ok(0) };
        // Complete offloaded checksums while the buffers are still ours to write.
        let mut ok = [false; MAX_BATCH];
        for (i, ok) in ok.iter_mut().enumerate().take(n) {
            let h = &self.vecs.hdrs[i];
            let Some(len) = (h.msg_len as usize).checked_sub(VNET_HDR) else { continue };
            let p = &mut self.rx_bufs[i];
            p.set_len(len);
            let cut = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            *ok = admit(&mut self.extra, &self.vecs.prefixes[i], p.data_mut(), cut);
        }
        let hdrs = &self.vecs.hdrs;
        Ok(crate::deliver_received(&mut self.rx_bufs, n, batch, &mut self.stats, &self.pool, |i| {
            ok[i].then(|| (hdrs[i].msg_len as usize - VNET_HDR, crate::UNSPECIFIED))
        }))
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let fd = self.fd.as_raw_fd();
        // An all-zero header: no checksum to complete, no segmentation.
        Ok(crate::mmsg::send_prefixed(fd, &mut self.vecs, batch, &mut self.stats, &self.pool, |_, h| h.fill(0)))
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        crate::udp::poll_fd(self.fd.as_raw_fd(), libc::POLLIN, timeout)
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.fd.as_raw_fd())
    }

    /// L2 ports have no socket address; this is `0.0.0.0:0`.
    fn local_addr(&self) -> SocketAddr {
        crate::UNSPECIFIED
    }

    /// Counters; `rx_dropped` includes the frames the kernel dropped for a full ring.
    fn stats(&self) -> PortStats {
        let mut st = self.stats;
        st.rx_dropped += self.kernel_drops();
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completes_an_offloaded_udp_checksum() {
        let mut f = Vec::new();
        tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], [10, 0, 0, 2], 1000, 53, 64, b"hello!!");
        let good = f.clone();
        // What a sender with checksum offload hands over: the pseudo-header sum, not inverted.
        let l4 = 14 + 20;
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&f[26..34]);
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&f[l4 + 4..l4 + 6]);
        let partial = tern_wire::frame::ones_sum(&pseudo, 0) as u16;
        f[l4 + 6..l4 + 8].copy_from_slice(&partial.to_be_bytes());
        assert_ne!(f, good);
        assert!(complete_checksum(&mut f, l4, 6));
        assert_eq!(f, good);
        assert!(!complete_checksum(&mut f, l4, 100));
        assert!(!complete_checksum(&mut f, 1000, 0));
    }

    #[test]
    fn missing_interface_is_named() {
        let pool = Pool::new(4, 2048);
        let e = AfPacketPort::open("tern-no-such0", &pool).unwrap_err();
        assert!(e.to_string().contains("tern-no-such0"), "{e}");
    }
}
