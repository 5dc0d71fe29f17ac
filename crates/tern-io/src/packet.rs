//! Packet buffers, the pool they come from, and batches.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_queue::ArrayQueue;

/// Packets per batch unless configured otherwise (as in BESS and the paper's driver).
pub const DEFAULT_BATCH: usize = 32;
/// Bytes per buffer: a 1500-byte MTU packet with room to spare.
pub const DEFAULT_BUF_SIZE: usize = 2048;

/// Bytes an L2 port leaves in front of a received frame, so headers can be pushed (a VLAN tag)
/// by moving a few bytes instead of the whole frame, as DPDK's mbuf headroom.
pub const DEFAULT_HEADROOM: usize = 64;

/// One packet: a fixed-size buffer, the bytes in use (after an optional headroom), and the
/// peer address (source on receive, destination on transmit).
#[derive(Debug)]
pub struct Packet {
    buf: Vec<u8>,
    head: usize,
    len: usize,
    /// Source (received) or destination (to send).
    pub peer: SocketAddr,
}

const UNSPECIFIED: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

impl Packet {
    fn from_buf(buf: Vec<u8>) -> Packet {
        Packet { buf, head: 0, len: 0, peer: UNSPECIFIED }
    }

    /// The bytes in use.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // Two bounds checks (no overflow check of `head + len`).
        &self.buf[self.head..][..self.len]
    }
    /// The bytes in use, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.head..][..self.len]
    }
    /// Bytes in use.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether no bytes are in use.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes the data may grow to: the buffer after the headroom.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.len() - self.head
    }
    /// Bytes free in front of the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.head
    }
    /// Empties the packet and leaves `n` bytes (at most the buffer) free in front of the data.
    #[inline]
    pub fn reserve_headroom(&mut self, n: usize) {
        self.head = n.min(self.buf.len());
        self.len = 0;
    }
    /// Sets the bytes in use to the first `len` after the headroom; clamped to the capacity.
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity());
    }
    /// The buffer after the headroom, for writing before [`set_len`](Self::set_len).
    #[inline]
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.head..]
    }
    /// Appends bytes; fails (changing nothing) if they do not fit.
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> Result<(), usize> {
        let end = self.len + bytes.len();
        if end > self.capacity() {
            return Err(end);
        }
        let at = self.head + self.len;
        self.buf[at..at + bytes.len()].copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
    /// Grows the data by `n` bytes at the front (their contents are unspecified): from the
    /// headroom if it is large enough, else by moving the data towards the end. Returns false,
    /// changing nothing, if the buffer has no room.
    #[inline]
    pub fn push_front(&mut self, n: usize) -> bool {
        if self.head >= n {
            self.head -= n;
        } else if self.head + self.len + n <= self.buf.len() {
            let shift = n - self.head;
            self.buf.copy_within(self.head..self.head + self.len, self.head + shift);
            self.head = 0;
        } else {
            return false;
        }
        self.len += n;
        true
    }
    /// Grows the data by `n` bytes at the front from the headroom and returns the first `N`
    /// bytes of the grown data, when the headroom has `n` bytes and the grown data has `N`;
    /// else returns `None`, changing nothing. (A fast path's [`push_front`](Self::push_front)
    /// that checks its bounds once for every header write after it.)
    #[inline]
    pub fn push_front_chunk<const N: usize>(&mut self, n: usize) -> Option<&mut [u8; N]> {
        let head = self.head.checked_sub(n)?;
        if self.len + n < N {
            return None;
        }
        let chunk = self.buf.get_mut(head..)?.first_chunk_mut::<N>()?;
        self.head = head;
        self.len += n;
        Some(chunk)
    }
    /// Drops `n` bytes (at most the data) from the front; they become headroom.
    #[inline]
    pub fn pull_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head += n;
        self.len -= n;
    }
}

#[derive(Debug)]
struct PoolInner {
    free: ArrayQueue<Vec<u8>>,
    buf_size: usize,
    allocated: AtomicU64,
}

/// A pool of fixed-size buffers shared by ports and engines (and threads): lock-free, and
/// allocation-free once it has grown to the working set.
#[derive(Debug, Clone)]
pub struct Pool(Arc<PoolInner>);

impl Pool {
    /// A pool that keeps up to `capacity` free buffers of `buf_size` bytes. It starts empty and
    /// allocates on demand; buffers returned to a full pool are freed.
    pub fn new(capacity: usize, buf_size: usize) -> Pool {
        Pool(Arc::new(PoolInner { free: ArrayQueue::new(capacity.max(1)), buf_size, allocated: AtomicU64::new(0) }))
    }

    /// An empty packet.
    #[inline]
    pub fn packet(&self) -> Packet {
        let buf = self.0.free.pop().unwrap_or_else(|| {
            self.0.allocated.fetch_add(1, Ordering::Relaxed);
            vec![0u8; self.0.buf_size]
        });
        Packet::from_buf(buf)
    }

    /// Returns a packet's buffer.
    #[inline]
    pub fn put(&self, packet: Packet) {
        let _ = self.0.free.push(packet.buf);
    }

    /// A copy of `packet` in a new buffer.
    pub fn clone_packet(&self, packet: &Packet) -> Packet {
        let mut copy = self.packet();
        let n = packet.len().min(copy.capacity());
        copy.buffer_mut()[..n].copy_from_slice(&packet.data()[..n]);
        copy.set_len(n);
        copy.peer = packet.peer;
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

    /// Buffers free in the pool now.
    pub fn free(&self) -> usize {
        self.0.free.len()
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
