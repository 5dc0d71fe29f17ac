//! Packet buffers, the pool they come from, and batches.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::{Mutex, MutexGuard};

/// Packets per batch unless configured otherwise (as in BESS and the paper's driver).
pub const DEFAULT_BATCH: usize = 32;
/// Bytes per buffer: a 1500-byte MTU packet with room to spare.
pub const DEFAULT_BUF_SIZE: usize = 2048;

/// Bytes an L2 port leaves in front of a received frame, so headers can be pushed (a VLAN tag)
/// by moving a few bytes instead of the whole frame, as DPDK's mbuf headroom.
pub const DEFAULT_HEADROOM: usize = 64;

/// One packet: a fixed-size buffer, the bytes in use (after an optional headroom), and the
/// peer address (source on receive, destination on transmit).
///
/// 32 bytes, so that a packet and a 32-byte descriptor fill one cache line (what `tern-chain`
/// moves between cores for each packet): the buffer as a boxed slice, the headroom and length as
/// `u32`, and the peer in 8 bytes — an IPv4 address and port inline, an IPv6 one in the last
/// [`PEER_TAIL`] bytes of the buffer, past the bytes the packet may use.
pub struct Packet {
    buf: Box<[u8]>,
    head: u32,
    len: u32,
    peer: u64,
}

/// Bytes at the end of every pool buffer that hold an IPv6 peer (address, port, flow info,
/// scope id); never part of a packet's data.
pub const PEER_TAIL: usize = 32;

/// [`Packet`]'s peer word: its kind in bits 48–55; an IPv4 peer's address in bits 16–47 and
/// port in bits 0–15.
const PEER_UNSPECIFIED: u64 = 0;
const PEER_V4: u64 = 1 << 48;
const PEER_V6: u64 = 2 << 48;
const PEER_KIND: u64 = 0xff << 48;

pub(crate) const UNSPECIFIED: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("head", &self.head)
            .field("len", &self.len)
            .field("peer", &self.peer())
            .field("data", &self.data())
            .finish()
    }
}

impl Packet {
    fn from_buf(buf: Box<[u8]>) -> Packet {
        Packet { buf, head: 0, len: 0, peer: PEER_UNSPECIFIED }
    }

    /// Where the bytes a packet may use end: before the peer's tail.
    #[inline]
    fn end(&self) -> usize {
        self.buf.len().saturating_sub(PEER_TAIL)
    }

    /// The bytes in use.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // Two bounds checks (no overflow check of `head + len`).
        &self.buf[self.head as usize..][..self.len as usize]
    }
    /// The bytes in use, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.head as usize..][..self.len as usize]
    }
    /// Bytes in use.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether no bytes are in use.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes the data may grow to: the buffer after the headroom.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.end() - self.head as usize
    }
    /// Bytes free in front of the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.head as usize
    }
    /// Empties the packet and leaves `n` bytes (at most the buffer) free in front of the data.
    #[inline]
    pub fn reserve_headroom(&mut self, n: usize) {
        self.head = n.min(self.end()) as u32;
        self.len = 0;
    }
    /// Sets the bytes in use to the first `len` after the headroom; clamped to the capacity.
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity()) as u32;
    }
    /// The buffer after the headroom, for writing before [`set_len`](Self::set_len).
    #[inline]
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        let end = self.end();
        &mut self.buf[self.head as usize..end]
    }
    /// Appends bytes; fails (changing nothing) if they do not fit.
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), usize> {
        let end = self.len() + bytes.len();
        if end > self.capacity() {
            return Err(end);
        }
        let at = self.head as usize + self.len();
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.len = end as u32;
        Ok(())
    }
    /// Grows the data by `n` bytes at the front (their contents are unspecified): from the
    /// headroom if it is large enough, else by moving the data towards the end. Returns false,
    /// changing nothing, if the buffer has no room.
    #[inline]
    pub fn push_front(&mut self, n: usize) -> bool {
        let (head, len) = (self.head as usize, self.len());
        if head >= n {
            self.head = (head - n) as u32;
        } else if head + len + n <= self.end() {
            let shift = n - head;
            self.buf.copy_within(head..head + len, head + shift);
            self.head = 0;
        } else {
            return false;
        }
        self.len = (len + n) as u32;
        true
    }
    /// Grows the data by `n` bytes at the front from the headroom and returns the first `N`
    /// bytes of the grown data, when the headroom has `n` bytes and the grown data has `N`;
    /// else returns `None`, changing nothing. (A fast path's [`push_front`](Self::push_front)
    /// that checks its bounds once for every header write after it.)
    #[inline]
    pub fn push_front_chunk<const N: usize>(&mut self, n: usize) -> Option<&mut [u8; N]> {
        let head = (self.head as usize).checked_sub(n)?;
        if self.len() + n < N {
            return None;
        }
        let end = self.end();
        let chunk = self.buf.get_mut(head..end)?.first_chunk_mut::<N>()?;
        self.head = head as u32;
        self.len += n as u32;
        Some(chunk)
    }
    /// Drops `n` bytes (at most the data) from the front; they become headroom.
    #[inline]
    pub fn pull_front(&mut self, n: usize) {
        let n = n.min(self.len()) as u32;
        self.head += n;
        self.len -= n;
    }

    /// The peer: the source of a received packet, the destination of one to send
    /// (`0.0.0.0:0` until set).
    #[inline]
    pub fn peer(&self) -> SocketAddr {
        match self.peer & PEER_KIND {
            PEER_V4 => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from((self.peer >> 16) as u32), self.peer as u16)),
            PEER_V6 => {
                let t = &self.buf[self.end()..];
                match t.first_chunk::<26>() {
                    Some(t) => {
                        let ip: [u8; 16] = t[..16].try_into().unwrap_or([0; 16]);
                        let port = u16::from_be_bytes([t[16], t[17]]);
                        let flow = u32::from_be_bytes([t[18], t[19], t[20], t[21]]);
                        let scope = u32::from_be_bytes([t[22], t[23], t[24], t[25]]);
                        SocketAddr::V6(std::net::SocketAddrV6::new(ip.into(), port, flow, scope))
                    }
                    None => UNSPECIFIED,
                }
            }
            _ => UNSPECIFIED,
        }
    }

    /// Sets the peer. An IPv6 peer is kept in the buffer's tail; a buffer too small for one
    /// (not from a [`Pool`]) keeps `0.0.0.0:0`.
    #[inline]
    pub fn set_peer(&mut self, peer: SocketAddr) {
        self.peer = match peer {
            SocketAddr::V4(a) => PEER_V4 | u64::from(a.ip().to_bits()) << 16 | u64::from(a.port()),
            SocketAddr::V6(a) => {
                let end = self.end();
                match self.buf.get_mut(end..).and_then(|t| t.first_chunk_mut::<26>()) {
                    Some(t) => {
                        t[..16].copy_from_slice(&a.ip().octets());
                        t[16..18].copy_from_slice(&a.port().to_be_bytes());
                        t[18..22].copy_from_slice(&a.flowinfo().to_be_bytes());
                        t[22..26].copy_from_slice(&a.scope_id().to_be_bytes());
                        PEER_V6
                    }
                    None => PEER_UNSPECIFIED,
                }
            }
        };
    }
}

#[derive(Debug)]
struct PoolInner {
    /// The shared free buffers: a stack (the last returned are the warmest) that threads'
    /// caches fill and drain [`CACHE_BULK`] at a time, under a lock taken once a bulk.
    free: Mutex<Vec<Box<[u8]>>>,
    capacity: usize,
    buf_size: usize,
    allocated: AtomicU64,
}

impl PoolInner {
    fn shared(&self) -> MutexGuard<'_, Vec<Box<[u8]>>> {
        // A panic elsewhere while holding it leaves a valid stack.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `bufs` back into the shared stack, as many as it has room for (the rest are
    /// freed).
    fn give_back(&self, bufs: impl Iterator<Item = Box<[u8]>>) {
        let mut free = self.shared();
        let room = self.capacity.saturating_sub(free.len());
        free.extend(bufs.take(room));
    }
}

/// Buffers a thread keeps for itself, by pool, as DPDK's per-core mempool cache: a thread takes
/// from and gives back to its own cache (last in, first out: the buffer it freed last is the one
/// warm in its cache), and moves [`CACHE_BULK`] at a time to or from the shared stack, under
/// one lock for the bulk: buffers change cores in bulks, the shared lines once a bulk rather
/// than once a packet. (A lock-free queue of single buffers, tried first, costs an atomic
/// read-modify-write a buffer on lines the other core wrote: with two cores far apart,
/// `tern bench chain`'s second core spent about 105 ns a packet sending packets out and
/// returning their buffers with it, 35 ns with this.)
struct LocalCache {
    pool: std::sync::Weak<PoolInner>,
    bufs: Vec<Box<[u8]>>,
}

/// Buffers moved between a thread's cache and the shared stack at once.
pub const CACHE_BULK: usize = 32;
/// Most buffers a thread keeps, per pool; past this it gives [`CACHE_BULK`] back.
pub const CACHE_MAX: usize = 2 * CACHE_BULK;

impl Drop for LocalCache {
    fn drop(&mut self) {
        // The thread ends: its buffers go back to the shared stack (freed if it is full).
        if let Some(inner) = self.pool.upgrade() {
            inner.give_back(self.bufs.drain(..));
        }
    }
}

thread_local! {
    static CACHES: std::cell::RefCell<Vec<LocalCache>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A pool of fixed-size buffers shared by ports and engines (and threads), allocation-free once
/// it has grown to the working set. Each thread keeps up to [`CACHE_MAX`] of a pool's free
/// buffers for itself (handed back when the thread ends) and takes the pool's lock only to
/// move a bulk of them.
#[derive(Debug, Clone)]
pub struct Pool(Arc<PoolInner>);

impl Pool {
    /// A pool that keeps up to `capacity` free buffers of `buf_size` bytes (at most 4 GiB less
    /// [`PEER_TAIL`]; each has [`PEER_TAIL`] bytes more for an IPv6 peer) in its shared stack
    /// (and each thread up to [`CACHE_MAX`] more). It starts empty and allocates on demand;
    /// buffers returned to a full pool are freed.
    pub fn new(capacity: usize, buf_size: usize) -> Pool {
        let capacity = capacity.max(1);
        // A packet counts its bytes in `u32`s.
        let buf_size = buf_size.min(u32::MAX as usize - PEER_TAIL);
        Pool(Arc::new(PoolInner {
            free: Mutex::new(Vec::with_capacity(capacity)),
            capacity,
            buf_size,
            allocated: AtomicU64::new(0),
        }))
    }

    /// Runs `f` on this thread's cache of the pool (made on first use; caches of pools gone
    /// are dropped then). `None` while the thread is ending (its caches are gone).
    #[inline]
    fn with_cache<R>(&self, f: impl FnOnce(&mut Vec<Box<[u8]>>) -> R) -> Option<R> {
        CACHES
            .try_with(|c| {
                let mut c = c.try_borrow_mut().ok()?;
                let me = Arc::as_ptr(&self.0);
                let i = match c.iter().position(|l| std::ptr::eq(l.pool.as_ptr(), me)) {
                    Some(i) => i,
                    None => {
                        c.retain(|l| l.pool.strong_count() > 0);
                        c.push(LocalCache { pool: Arc::downgrade(&self.0), bufs: Vec::with_capacity(CACHE_MAX + 1) });
                        c.len() - 1
                    }
                };
                Some(f(&mut c[i].bufs))
            })
            .ok()
            .flatten()
    }

    /// An empty packet.
    #[inline]
    pub fn packet(&self) -> Packet {
        let inner = &self.0;
        let buf = self
            .with_cache(|bufs| {
                if bufs.is_empty() {
                    // Refill a bulk from the shared stack (fewer if it has fewer).
                    let mut free = inner.shared();
                    let n = free.len().min(CACHE_BULK);
                    let at = free.len() - n;
                    bufs.extend(free.drain(at..));
                }
                bufs.pop()
            })
            .flatten()
            .or_else(|| inner.shared().pop())
            .unwrap_or_else(|| {
                inner.allocated.fetch_add(1, Ordering::Relaxed);
                vec![0u8; inner.buf_size + PEER_TAIL].into_boxed_slice()
            });
        Packet::from_buf(buf)
    }

    /// Returns a packet's buffer.
    #[inline]
    pub fn put(&self, packet: Packet) {
        let inner = &self.0;
        let mut buf = Some(packet.buf);
        self.with_cache(|bufs| {
            if let Some(b) = buf.take() {
                bufs.push(b);
            }
            if bufs.len() > CACHE_MAX {
                // The oldest (coldest) go back to the shared stack.
                inner.give_back(bufs.drain(..CACHE_BULK));
            }
        });
        if let Some(b) = buf {
            inner.give_back(std::iter::once(b));
        }
    }

    /// A copy of `packet` in a new buffer.
    pub fn clone_packet(&self, packet: &Packet) -> Packet {
        let mut copy = self.packet();
        let n = packet.len().min(copy.capacity());
        copy.buffer_mut()[..n].copy_from_slice(&packet.data()[..n]);
        copy.set_len(n);
        copy.set_peer(packet.peer());
        copy
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.0.buf_size
    }

    /// Buffers allocated so far (a pool that keeps growing has a leak).
    pub fn allocated(&self) -> u64 {
        self.0.allocated.load(Ordering::Relaxed)
    }

    /// Buffers free now: in the shared stack and in the calling thread's cache (other threads'
    /// caches are theirs; they come back when those threads end).
    pub fn free(&self) -> usize {
        self.0.shared().len() + self.with_cache(|b| b.len()).unwrap_or(0)
    }
}

/// Up to `capacity` packets processed together.
#[derive(Debug)]
pub struct Batch {
    packets: Vec<Packet>,
    capacity: usize,
}

impl Batch {
    /// An empty batch of at most `capacity` packets.
    pub fn new(capacity: usize) -> Batch {
        let capacity = capacity.max(1);
        Batch { packets: Vec::with_capacity(capacity), capacity }
    }
    /// Packets in the batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.packets.len()
    }
    /// Whether the batch is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.packets.is_empty()
    }
    /// Whether the batch is full.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.packets.len() >= self.capacity
    }
    /// Room left.
    #[inline]
    pub fn spare(&self) -> usize {
        self.capacity - self.packets.len()
    }
    /// Most packets it holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }
    /// Adds a packet; a full batch hands it back.
    #[inline]
    pub fn push(&mut self, packet: Packet) -> Option<Packet> {
        if self.is_full() {
            return Some(packet);
        }
        self.packets.push(packet);
        None
    }
    /// A packet by index.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&Packet> {
        self.packets.get(i)
    }
    /// The packets.
    #[inline]
    pub fn iter(&self) -> std::slice::Iter<'_, Packet> {
        self.packets.iter()
    }
    /// The packets, writable.
    #[inline]
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Packet> {
        self.packets.iter_mut()
    }
    /// The packets, as a writable slice (to split into chunks).
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [Packet] {
        &mut self.packets
    }
    /// Removes the last packet.
    #[inline]
    pub fn pop(&mut self) -> Option<Packet> {
        self.packets.pop()
    }
    /// Removes and yields every packet.
    #[inline]
    pub fn drain(&mut self) -> std::vec::Drain<'_, Packet> {
        self.packets.drain(..)
    }
    /// Removes the packets from index `from` on for which `out` is true, keeping the others in
    /// order, and gives each removed one to `removed`; returns how many it removed.
    pub fn remove_from(
        &mut self,
        from: usize,
        mut out: impl FnMut(&Packet) -> bool,
        mut removed: impl FnMut(Packet),
    ) -> usize {
        let from = from.min(self.packets.len());
        let mut n = 0;
        for p in self.packets.extract_if(from.., |p| out(p)) {
            removed(p);
            n += 1;
        }
        n
    }
    /// Exchanges the batch's packets with those in `packets` (a vector of at most
    /// [`capacity`](Self::capacity) packets): whole batches change hands without moving a packet.
    /// Returns false, changing nothing, if `packets` holds too many.
    #[inline]
    pub fn exchange(&mut self, packets: &mut Vec<Packet>) -> bool {
        if packets.len() > self.capacity {
            return false;
        }
        std::mem::swap(&mut self.packets, packets);
        true
    }
    /// Exchanges the packets of two batches, if each fits the other's capacity; returns false,
    /// changing nothing, otherwise.
    #[inline]
    pub fn swap(&mut self, other: &mut Batch) -> bool {
        other.len() <= self.capacity && other.exchange(&mut self.packets)
    }
    /// Returns every packet's buffer to `pool`.
    #[inline]
    pub fn recycle(&mut self, pool: &Pool) {
        for p in self.packets.drain(..) {
            pool.put(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet of `pool` holding `data` behind `headroom` bytes of headroom.
    fn packet_with(pool: &Pool, headroom: usize, data: &[u8]) -> Packet {
        let mut p = pool.packet();
        p.reserve_headroom(headroom);
        p.extend_from_slice(data).unwrap();
        p
    }

    #[test]
    fn remove_from_keeps_the_rest_in_order() {
        let pool = Pool::new(8, 32);
        let mut b = Batch::new(8);
        for d in [b"a", b"b", b"c", b"d", b"e"] {
            assert!(b.push(packet_with(&pool, 0, d)).is_none());
        }
        let mut gone = Vec::new();
        // From index 1: "b" and "d" go, "a" (before it) stays though it would match.
        let n = b.remove_from(1, |p| matches!(p.data(), b"a" | b"b" | b"d"), |p| gone.push(p.data().to_vec()));
        assert_eq!(n, 2);
        assert_eq!(gone, [b"b".to_vec(), b"d".to_vec()]);
        assert_eq!(
            b.iter().map(|p| p.data().to_vec()).collect::<Vec<_>>(),
            [b"a".to_vec(), b"c".to_vec(), b"e".to_vec()]
        );
        assert_eq!(b.remove_from(9, |_| true, |_| ()), 0, "past the end: nothing");
    }

    #[test]
    fn headroom_push_and_pull() {
        let pool = Pool::new(4, 32);
        let mut p = packet_with(&pool, 4, b"abcdef");
        assert_eq!((p.headroom(), p.capacity()), (4, 28));
        assert!(p.push_front(4));
        p.data_mut()[..4].copy_from_slice(b"1234");
        assert_eq!(p.data(), b"1234abcdef");
        // No headroom left: the data moves back.
        assert!(p.push_front(2));
        p.data_mut()[..2].copy_from_slice(b"xy");
        assert_eq!(p.data(), b"xy1234abcdef");
        p.pull_front(6);
        assert_eq!(p.data(), b"abcdef");
        assert!(!p.push_front(100));
        assert_eq!(p.data(), b"abcdef");
        p.extend_from_slice(&[0; 20]).unwrap();
        assert!(p.extend_from_slice(&[0; 1]).is_err());
        pool.put(p);
        assert_eq!(pool.packet().headroom(), 0);
    }

    #[test]
    fn push_front_chunk_grows_from_the_headroom_or_changes_nothing() {
        let pool = Pool::new(4, 32);
        let mut p = packet_with(&pool, 4, b"abcdef");
        // Not enough data for the chunk, or not enough headroom: unchanged.
        assert!(p.push_front_chunk::<11>(4).is_none());
        assert!(p.push_front_chunk::<6>(5).is_none());
        assert_eq!((p.headroom(), p.data()), (4, &b"abcdef"[..]));
        let c = p.push_front_chunk::<8>(2).unwrap();
        assert_eq!(&c[2..], b"abcdef");
        c[..2].copy_from_slice(b"xy");
        assert_eq!((p.headroom(), p.data()), (2, &b"xyabcdef"[..]));
        assert!(p.push_front_chunk::<10>(2).is_some());
        assert_eq!((p.headroom(), p.len()), (0, 10));
        assert!(p.push_front_chunk::<1>(1).is_none());
    }

    #[test]
    fn pool_reuses_buffers() {
        let pool = Pool::new(4, 128);
        let mut b = Batch::new(2);
        for _ in 0..3 {
            let p = pool.packet();
            if let Some(p) = b.push(p) {
                pool.put(p);
            }
        }
        assert!(b.is_full());
        b.recycle(&pool);
        assert_eq!(pool.allocated(), 3);
        for _ in 0..100 {
            let p = pool.packet();
            pool.put(p);
        }
        assert_eq!(pool.allocated(), 3);
    }

    /// A buffer freed on one thread reaches another through the shared stack (the consumer's
    /// cache gives a bulk back when it holds more than [`CACHE_MAX`]), so a producer and a
    /// consumer on two threads allocate only what is in flight and in the two caches; when
    /// the threads end, their caches come back to the shared stack.
    #[test]
    fn thread_caches_spill_and_come_back() {
        const IN_FLIGHT: usize = 16;
        let pool = Pool::new(1 << 12, 64);
        let (tx, rx) = std::sync::mpsc::sync_channel::<Packet>(IN_FLIGHT);
        let producer = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    let mut p = pool.packet();
                    p.extend_from_slice(&i.to_le_bytes()).unwrap();
                    if tx.send(p).is_err() {
                        return;
                    }
                }
            })
        };
        let consumer = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                let mut n = 0u32;
                for p in rx {
                    assert_eq!(p.data(), n.to_le_bytes());
                    n += 1;
                    pool.put(p);
                }
                n
            })
        };
        producer.join().unwrap();
        assert_eq!(consumer.join().unwrap(), 20_000);
        // In flight (the channel, one in each thread's hands), the consumer's cache before it
        // spills, and the producer's cache refilled in bulks: without the spill every packet
        // would be a new buffer.
        let bound = (IN_FLIGHT + 2 + CACHE_MAX + 1 + CACHE_BULK) as u64;
        assert!(pool.allocated() <= bound, "{} buffers for a working set of at most {bound}", pool.allocated());
        // Both threads ended: every buffer is back in the shared stack (this thread has none).
        assert_eq!(pool.free() as u64, pool.allocated());
    }

    /// A thread's cache is per pool: two pools' buffers never mix, and a buffer of a pool that
    /// is gone is not handed out by a new one.
    #[test]
    fn caches_are_per_pool() {
        let (a, b) = (Pool::new(8, 16), Pool::new(8, 32));
        let pa = a.packet();
        a.put(pa);
        assert_eq!(b.packet().capacity(), 32);
        assert_eq!(a.packet().capacity(), 16);
        drop(a);
        let c = Pool::new(8, 48);
        assert_eq!(c.packet().capacity(), 48);
        assert_eq!(c.allocated(), 1);
    }

    proptest::proptest! {
        /// Whatever peer a packet is given, and whatever it holds, it gives the peer back.
        #[test]
        fn any_peer_comes_back(
            v6 in proptest::prelude::any::<bool>(),
            ip in proptest::prelude::any::<[u8; 16]>(),
            port in proptest::prelude::any::<u16>(),
            flow in proptest::prelude::any::<u32>(),
            scope in proptest::prelude::any::<u32>(),
            fill in proptest::prelude::any::<u8>(),
            headroom in 0usize..80,
        ) {
            let pool = Pool::new(2, 64);
            let mut p = pool.packet();
            let peer = if v6 {
                SocketAddr::V6(std::net::SocketAddrV6::new(ip.into(), port, flow, scope))
            } else {
                SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]), port))
            };
            p.set_peer(peer);
            p.reserve_headroom(headroom);
            let room = p.capacity();
            proptest::prop_assert!(p.extend_from_slice(&vec![fill; room]).is_ok());
            proptest::prop_assert_eq!(p.peer(), peer);
            p.pull_front(3);
            let all = p.headroom();
            proptest::prop_assert!(p.push_front(all));
            proptest::prop_assert_eq!(p.len(), p.capacity());
            proptest::prop_assert_eq!(p.peer(), peer);
            pool.put(p);
        }

        /// Against the simplest pool (a count of buffers out): on one thread, whatever the order
        /// of takes and returns, the pool allocates exactly the most buffers ever out at once,
        /// and the free ones (shared stack and this thread's cache) are the rest.
        #[test]
        fn one_thread_allocates_the_peak(ops in proptest::collection::vec(proptest::prelude::any::<bool>(), 0..600)) {
            let pool = Pool::new(1 << 10, 8);
            let mut out = Vec::new();
            let mut peak = 0usize;
            for take in ops {
                if take || out.is_empty() {
                    out.push(pool.packet());
                    peak = peak.max(out.len());
                } else {
                    let p = out.pop().unwrap();
                    pool.put(p);
                }
                proptest::prop_assert_eq!(pool.allocated(), peak as u64);
                proptest::prop_assert_eq!(pool.free() + out.len(), peak);
            }
        }
    }

    #[test]
    fn a_packet_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Packet>(), 32);
    }

    /// Peers of both families come back as set, through a clone too; an IPv6 peer lives past
    /// the data, which however full never reaches it; a buffer too small for one keeps none.
    #[test]
    fn peers_round_trip_and_the_data_never_reaches_them() {
        let pool = Pool::new(4, 64);
        let mut p = pool.packet();
        assert_eq!(p.peer(), UNSPECIFIED);
        let v4: SocketAddr = "192.0.2.7:65535".parse().unwrap();
        p.set_peer(v4);
        assert_eq!(p.peer(), v4);
        let v6 = SocketAddr::V6(std::net::SocketAddrV6::new("fe80::1:2:3".parse().unwrap(), 443, 0xabcde, 7));
        p.set_peer(v6);
        assert_eq!(p.peer(), v6);
        assert_eq!(p.buffer_mut().len(), 64);
        assert_eq!(p.capacity(), 64);
        assert!(p.extend_from_slice(&[0xff; 64]).is_ok());
        assert!(p.extend_from_slice(&[0xff]).is_err());
        assert!(!p.push_front(1), "no room: the tail is not the data's");
        p.data_mut().fill(0xee);
        assert_eq!(p.peer(), v6);
        let c = pool.clone_packet(&p);
        assert_eq!((c.peer(), c.data()), (v6, p.data()));
        p.set_peer(v4);
        assert_eq!(p.peer(), v4);
        // Not from a pool: no tail.
        let mut bare = Packet::from_buf(vec![0; 8].into_boxed_slice());
        assert_eq!(bare.capacity(), 0);
        bare.set_peer(v6);
        assert_eq!(bare.peer(), UNSPECIFIED);
        bare.set_peer(v4);
        assert_eq!(bare.peer(), v4);
    }

    #[test]
    fn packet_bounds() {
        let pool = Pool::new(1, 8);
        let mut p = pool.packet();
        assert!(p.extend_from_slice(b"12345").is_ok());
        assert_eq!(p.extend_from_slice(b"6789"), Err(9));
        assert_eq!(p.data(), b"12345");
        p.set_len(100);
        assert_eq!(p.len(), 8);
        let c = pool.clone_packet(&p);
        assert_eq!(c.data(), p.data());
    }
}
