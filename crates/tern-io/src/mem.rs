//! In-process ports: two ends of a pair of bounded single-producer single-consumer links (one
//! each way). A link carries whole batches: `send` hands its batch's packet vector to the ring
//! and takes an empty one back, and `recv` into an empty batch takes the vector whole, so packets
//! move between the ends without being copied or even moved one by one (as VPP passes frames of
//! buffer indices between nodes). Emptied vectors travel back to the sender on a second ring, so
//! a running link allocates nothing. Each end has a made-up loopback address so engines see
//! ordinary peers.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::{Batch, Packet, Pool, Port, PortStats};

static NEXT_PORT: AtomicU16 = AtomicU16::new(1);

/// One direction of a link: batches on their way, and emptied vectors on their way back.
#[derive(Debug)]
struct Link {
    /// Packets queued on the link now (the ring's bound is in packets, as the old one's).
    queued: Arc<AtomicUsize>,
    capacity: usize,
}

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemPort {
    /// Batches from the peer.
    rx: rtrb::Consumer<Vec<Packet>>,
    /// Emptied vectors back to the peer.
    rx_back: rtrb::Producer<Vec<Packet>>,
    rx_link: Link,
    /// Part of a received batch that did not fit the caller's batch.
    pending: Vec<Packet>,
    /// Batches to the peer.
    tx: rtrb::Producer<Vec<Packet>>,
    /// Emptied vectors the peer sent back.
    tx_spare: rtrb::Consumer<Vec<Packet>>,
    tx_link: Link,
    pool: Pool,
    addr: SocketAddr,
    /// Whether sent packets get this end's address as their peer (not on an L2 wire).
    stamp: bool,
    stats: PortStats,
}

fn fresh_addr() -> SocketAddr {
    let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
    SocketAddr::from((Ipv4Addr::new(127, 77, 0, 1), n.max(1)))
}

/// Two connected ports whose links hold up to `ring` packets each way. Each end writes its
/// address into the packets it sends, so the other end sees them come from a peer (as from a
/// datagram socket).
pub fn pair(pool: &Pool, ring: usize) -> (MemPort, MemPort) {
    connect(pool, ring, true)
}

/// The two ends of an L2 wire: as [`pair`], but the frames carry no sender address (as on
/// AF_PACKET ports, which have none to give), so sending does not write one into every packet;
/// a packet's `peer` passes through unchanged. For engines that switch frames, not datagrams.
pub fn wire(pool: &Pool, ring: usize) -> (MemPort, MemPort) {
    connect(pool, ring, false)
}

fn connect(pool: &Pool, ring: usize, stamp: bool) -> (MemPort, MemPort) {
    let ring = ring.max(1);
    // A batch holds at least one packet, so `ring` vectors are never short.
    let (a_tx, b_rx) = rtrb::RingBuffer::new(ring);
    let (b_back, a_spare) = rtrb::RingBuffer::new(ring);
    let (b_tx, a_rx) = rtrb::RingBuffer::new(ring);
    let (a_back, b_spare) = rtrb::RingBuffer::new(ring);
    let (ab, ba) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let link = |q: &Arc<AtomicUsize>| Link { queued: q.clone(), capacity: ring };
    let end = |rx, rx_back, rx_link, tx, tx_spare, tx_link| MemPort {
        rx,
        rx_back,
        rx_link,
        pending: Vec::new(),
        tx,
        tx_spare,
        tx_link,
        pool: pool.clone(),
        addr: fresh_addr(),
        stamp,
        stats: PortStats::default(),
    };
    (end(a_rx, a_back, link(&ba), a_tx, a_spare, link(&ab)), end(b_rx, b_back, link(&ab), b_tx, b_spare, link(&ba)))
}

impl MemPort {
    /// Returns an emptied vector to the peer (freed if its ring is full, which it never is
    /// while the peer keeps to one vector per batch sent).
    fn give_back(&mut self, v: Vec<Packet>) {
        debug_assert!(v.is_empty());
        let _ = self.rx_back.push(v);
    }
}

impl Port for MemPort {
    fn recv(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut n = 0;
        loop {
            if self.pending.is_empty() {
                if batch.spare() == 0 {
                    break;
                }
                let Ok(mut v) = self.rx.pop() else { break };
                self.rx_link.queued.fetch_sub(v.len(), Ordering::AcqRel);
                if batch.is_empty() && v.len() <= batch.capacity() {
                    // The whole batch at once: the caller's (empty) vector goes back.
                    n += v.len();
                    self.stats.rx_bytes += v.iter().map(|p| p.len() as u64).sum::<u64>();
                    batch.exchange(&mut v);
                    self.give_back(v);
                    continue;
                }
                let old = std::mem::replace(&mut self.pending, v);
                self.give_back(old);
            }
            let take = self.pending.len().min(batch.spare());
            if take == 0 {
                break;
            }
            for p in self.pending.drain(..take) {
                self.stats.rx_bytes += p.len() as u64;
                // Cannot fail: the batch had room for `take`.
                let _ = batch.push(p);
            }
            n += take;
        }
        self.stats.received(n);
        Ok(n)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let room = self.tx_link.capacity.saturating_sub(self.tx_link.queued.load(Ordering::Acquire));
        // What does not fit is dropped from the tail of the batch.
        while batch.len() > room {
            if let Some(p) = batch.pop() {
                self.stats.tx_dropped += 1;
                self.pool.put(p);
            }
        }
        let n = batch.len();
        if n == 0 {
            return Ok(0);
        }
        let mut bytes = 0;
        if self.stamp {
            let addr = self.addr;
            for p in batch.iter_mut() {
                p.set_peer(addr);
                bytes += p.len() as u64;
            }
        } else {
            bytes = batch.iter().map(|p| p.len() as u64).sum();
        }
        let mut v = self.tx_spare.pop().unwrap_or_default();
        v.reserve(batch.capacity());
        batch.exchange(&mut v);
        // The link counts packets before the peer can see them (and subtract them).
        self.tx_link.queued.fetch_add(n, Ordering::AcqRel);
        if let Err(rtrb::PushError::Full(v)) = self.tx.push(v) {
            // Unreachable while every batch holds a packet (the ring has a slot per packet).
            self.tx_link.queued.fetch_sub(n, Ordering::AcqRel);
            self.stats.tx_dropped += n as u64;
            for p in v {
                self.pool.put(p);
            }
            return Ok(0);
        }
        self.stats.tx_bytes += bytes;
        self.stats.sent(n);
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        while self.pending.is_empty() && self.rx.is_empty() && Instant::now() < deadline {
            std::thread::yield_now();
        }
        Ok(())
    }

    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

impl Drop for MemPort {
    fn drop(&mut self) {
        // Packets still on their way to this end go back to the pool.
        for p in self.pending.drain(..) {
            self.pool.put(p);
        }
        while let Ok(v) = self.rx.pop() {
            for p in v {
                self.pool.put(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_ring_drops_and_counts() {
        let pool = Pool::new(16, 64);
        let (mut a, mut b) = pair(&pool, 2);
        let mut batch = Batch::new(4);
        for _ in 0..4 {
            batch.push(pool.packet());
        }
        assert_eq!(a.send(Instant::now(), &mut batch).unwrap(), 2);
        assert_eq!(a.stats().tx_dropped, 2);
        assert_eq!(b.recv(Instant::now(), &mut batch).unwrap(), 2);
        batch.recycle(&pool);
        assert_eq!(pool.free(), 4);
    }

    fn numbered(pool: &Pool, batch: &mut Batch, from: u8, n: u8) {
        for i in from..from + n {
            let mut p = pool.packet();
            p.extend_from_slice(&[i]).unwrap();
            assert!(batch.push(p).is_none());
        }
    }

    /// Fills `batch` with packets numbered `from..from + n` and sends it on `port`.
    fn send_numbered(port: &mut MemPort, pool: &Pool, batch: &mut Batch, from: u8, n: u8) -> usize {
        numbered(pool, batch, from, n);
        port.send(Instant::now(), batch).unwrap()
    }

    fn numbers(batch: &mut Batch, pool: &Pool) -> Vec<u8> {
        let v = batch.iter().map(|p| p.data()[0]).collect();
        batch.recycle(pool);
        v
    }

    #[test]
    fn a_wire_carries_frames_without_stamping_a_peer() {
        let pool = Pool::new(16, 64);
        let (mut a, mut b) = wire(&pool, 8);
        let (mut c, mut d) = pair(&pool, 8);
        let mut batch = Batch::new(4);
        let marked = SocketAddr::from((Ipv4Addr::new(192, 0, 2, 1), 7));
        numbered(&pool, &mut batch, 0, 2);
        batch.iter_mut().for_each(|p| p.set_peer(marked));
        assert_eq!(a.send(Instant::now(), &mut batch).unwrap(), 2);
        assert_eq!(b.recv(Instant::now(), &mut batch).unwrap(), 2);
        assert!(batch.iter().all(|p| p.peer() == marked), "a wire leaves the peer as it was");
        assert_eq!((a.stats().tx_bytes, b.stats().rx_bytes), (2, 2));
        // The same packets over a datagram pair come from the sending end.
        assert_eq!(c.send(Instant::now(), &mut batch).unwrap(), 2);
        assert_eq!(d.recv(Instant::now(), &mut batch).unwrap(), 2);
        assert!(batch.iter().all(|p| p.peer() == c.local_addr()));
        batch.recycle(&pool);
    }

    #[test]
    fn batches_split_and_merge_in_order() {
        let pool = Pool::new(64, 64);
        let (mut a, mut b) = pair(&pool, 64);
        let now = Instant::now();
        let mut big = Batch::new(8);
        assert_eq!(send_numbered(&mut a, &pool, &mut big, 0, 8), 8);
        assert_eq!(send_numbered(&mut a, &pool, &mut big, 8, 3), 3);
        // A smaller batch takes part of the first; the rest waits for the next call.
        let mut small = Batch::new(5);
        assert_eq!(b.recv(now, &mut small).unwrap(), 5);
        assert_eq!(numbers(&mut small, &pool), [0, 1, 2, 3, 4]);
        assert_eq!(b.recv(now, &mut small).unwrap(), 5);
        assert_eq!(numbers(&mut small, &pool), [5, 6, 7, 8, 9]);
        // A bigger, part-filled batch gathers from several sends.
        send_numbered(&mut a, &pool, &mut big, 11, 2);
        let mut large = Batch::new(16);
        numbered(&pool, &mut large, 100, 1);
        assert_eq!(b.recv(now, &mut large).unwrap(), 3);
        assert_eq!(numbers(&mut large, &pool), [100, 10, 11, 12]);
        assert_eq!(b.recv(now, &mut large).unwrap(), 0);
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!((sa.tx_packets, sa.tx_batches, sa.tx_bytes), (13, 3, 13));
        assert_eq!((sb.rx_packets, sb.rx_batches, sb.rx_bytes), (13, 3, 13));
    }

    #[test]
    fn bound_in_packets_order_kept_and_buffers_reused() {
        let pool = Pool::new(64, 64);
        let (mut a, mut b) = pair(&pool, 6);
        let now = Instant::now();
        let mut batch = Batch::new(4);
        // Bound in packets: 4 fit, then 2 more of the next 4.
        assert_eq!(send_numbered(&mut a, &pool, &mut batch, 0, 4), 4);
        assert_eq!(send_numbered(&mut a, &pool, &mut batch, 4, 4), 2);
        assert_eq!(a.stats().tx_dropped, 2);
        assert_eq!(b.recv(now, &mut batch).unwrap(), 4);
        assert_eq!(numbers(&mut batch, &pool), [0, 1, 2, 3]);
        assert_eq!(b.recv(now, &mut batch).unwrap(), 2);
        assert_eq!(numbers(&mut batch, &pool), [4, 5]);
        let allocated = pool.allocated();
        for round in 0..100u8 {
            assert_eq!(send_numbered(&mut a, &pool, &mut batch, round, 4), 4);
            assert!(batch.is_empty());
            assert_eq!(b.recv(now, &mut batch).unwrap(), 4);
            assert_eq!(batch.iter().next().map(|p| p.peer()), Some(a.local_addr()));
            assert_eq!(numbers(&mut batch, &pool), [round, round + 1, round + 2, round + 3]);
        }
        assert_eq!(pool.allocated(), allocated);
        // Packets still on the link go back to the pool with the receiving end.
        send_numbered(&mut a, &pool, &mut batch, 0, 3);
        let free = pool.free();
        drop(b);
        assert_eq!(pool.free(), free + 3);
    }
}
