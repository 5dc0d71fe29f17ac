//! `mmsghdr`s whose messages are a fixed-size prefix followed by a packet's bytes (two iovecs):
//! the Unix-socket port's peer address and the AF_PACKET port's virtio-net header.

/// Headers, iovec pairs and prefix slots for up to `MAX_BATCH` messages.
pub(crate) struct PrefixedVecs<const P: usize> {
    pub(crate) hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<[libc::iovec; 2]>,
    pub(crate) prefixes: Vec<[u8; P]>,
}

// SAFETY: the raw pointers are rewritten before every system call by the thread that owns the
// port and only dereferenced by the kernel during that call.
unsafe impl<const P: usize> Send for PrefixedVecs<P> {}

impl<const P: usize> PrefixedVecs<P> {
    pub(crate) fn new(n: usize) -> Self {
        // SAFETY: all-zero bytes are a valid mmsghdr.
        let hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
        let iov = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
        PrefixedVecs { hdrs: vec![hdr; n], iovs: vec![[iov, iov]; n], prefixes: vec![[0; P]; n] }
    }

    /// Points message `i` at its prefix slot and `len` bytes at `data`.
    pub(crate) fn prepare(&mut self, i: usize, data: *mut u8, len: usize) {
        let prefix: *mut [u8; P] = &mut self.prefixes[i];
        self.iovs[i] =
            [libc::iovec { iov_base: prefix.cast(), iov_len: P }, libc::iovec { iov_base: data.cast(), iov_len: len }];
        let iov: *mut libc::iovec = self.iovs[i].as_mut_ptr();
        let h = &mut self.hdrs[i];
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

/// Sends every packet of `batch` on `fd`, `vecs.hdrs.len()` messages per `sendmmsg`, each as the
/// prefix `fill` writes followed by the packet's bytes; then empties the batch into `pool`.
/// A full socket queue is retried (yielding) up to 100 times a batch, then the rest is dropped;
/// a message the kernel refuses (too long, link down) is dropped alone. Returns how many went.
pub(crate) fn send_prefixed<const P: usize>(
    fd: std::os::fd::RawFd,
    vecs: &mut PrefixedVecs<P>,
    batch: &mut crate::Batch,
    stats: &mut crate::PortStats,
    pool: &crate::Pool,
    mut fill: impl FnMut(&crate::Packet, &mut [u8; P]),
) -> usize {
    let total = batch.len();
    let (mut start, mut sent, mut stalls) = (0, 0, 0);
    while start < total {
        let chunk = (total - start).min(vecs.hdrs.len());
        for i in 0..chunk {
            let p = batch.get(start + i).expect("index below batch length");
            fill(p, &mut vecs.prefixes[i]);
            let data = p.data();
            vecs.prepare(i, data.as_ptr().cast_mut(), data.len());
        }
        // SAFETY: hdrs[..chunk] point at live iovec pairs over the prefixes and packet bytes
        // owned by `batch`, which sendmmsg only reads.
        let r = unsafe { libc::sendmmsg(fd, vecs.hdrs.as_mut_ptr(), chunk as u32, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => continue,
                // The queue is full: give it a moment to drain, then drop.
                std::io::ErrorKind::WouldBlock if stalls < 100 => {
                    stalls += 1;
                    std::thread::yield_now();
                    continue;
                }
                std::io::ErrorKind::WouldBlock => {
                    stats.tx_dropped += (total - start) as u64;
                    break;
                }
                _ => {
                    stats.tx_dropped += 1;
                    start += 1;
                    continue;
                }
            }
        }
        for i in 0..r as usize {
            stats.tx_bytes += batch.get(start + i).map_or(0, |p| p.len() as u64);
        }
        sent += r as usize;
        start += r as usize;
    }
    batch.recycle(pool);
    stats.sent(sent);
    sent
}

/// Receives up to `want` messages on `fd` into `bufs` (grown from `pool` as needed), each as
/// the prefix slot then the packet buffer after `headroom` bytes. Returns how many arrived
/// (`None`: nothing now); lengths are in `vecs.hdrs[i].msg_len`, prefix included.
pub(crate) fn recv_prefixed<const P: usize>(
    fd: std::os::fd::RawFd,
    vecs: &mut PrefixedVecs<P>,
    bufs: &mut Vec<crate::Packet>,
    pool: &crate::Pool,
    want: usize,
    headroom: usize,
) -> std::io::Result<Option<usize>> {
    let want = want.min(vecs.hdrs.len());
    while bufs.len() < want {
        bufs.push(pool.packet());
    }
    for (i, p) in bufs.iter_mut().enumerate().take(want) {
        p.reserve_headroom(headroom);
        let buf = p.buffer_mut();
        let (ptr, len) = (buf.as_mut_ptr(), buf.len());
        vecs.prepare(i, ptr, len);
    }
    // SAFETY: hdrs[..want] point at live iovec pairs over distinct prefix slots and packet
    // buffers of the stated lengths, all outliving the call.
    let r =
        unsafe { libc::recvmmsg(fd, vecs.hdrs.as_mut_ptr(), want as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
    crate::mmsg_count(r)
}
