//! In-process ports: two ends of a pair of bounded single-producer single-consumer rings (one
//! each way). Packets move between them without copying, a whole batch per ring operation (one
//! atomic index update per batch, as DPDK's `rte_ring` bulk calls). Each end has a made-up
//! loopback address so engines see ordinary peers.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use crate::{Batch, Packet, Pool, Port, PortStats};

static NEXT_PORT: AtomicU16 = AtomicU16::new(1);

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemPort {
    rx: rtrb::Consumer<Packet>,
    tx: rtrb::Producer<Packet>,
    pool: Pool,
    addr: SocketAddr,
    stats: PortStats,
}

fn fresh_addr() -> SocketAddr {
    let n = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
    SocketAddr::from((Ipv4Addr::new(127, 77, 0, 1), n.max(1)))
}

/// Two connected ports whose rings hold up to `ring` packets each way.
pub fn pair(pool: &Pool, ring: usize) -> (MemPort, MemPort) {
    let (a_tx, b_rx) = rtrb::RingBuffer::new(ring.max(1));
    let (b_tx, a_rx) = rtrb::RingBuffer::new(ring.max(1));
    let end = |rx, tx| MemPort { rx, tx, pool: pool.clone(), addr: fresh_addr(), stats: PortStats::default() };
    (end(a_rx, a_tx), end(b_rx, b_tx))
}

impl Port for MemPort {
    fn recv(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let n = self.rx.slots().min(batch.spare());
        let Ok(chunk) = self.rx.read_chunk(n) else { return Ok(0) };
        for p in chunk {
            self.stats.rx_bytes += p.len() as u64;
            // Cannot fail: the batch had room for `n`.
            let _ = batch.push(p);
        }
        self.stats.received(n);
        Ok(n)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let room = self.tx.slots();
        // What does not fit is dropped from the tail of the batch.
        while batch.len() > room {
            if let Some(p) = batch.pop() {
                self.stats.tx_dropped += 1;
                self.pool.put(p);
            }
        }
        let n = batch.len();
        let Ok(chunk) = self.tx.write_chunk_uninit(n) else { return Ok(0) };
        let (addr, stats) = (self.addr, &mut self.stats);
        chunk.fill_from_iter(batch.drain().map(|mut p| {
            p.peer = addr;
            stats.tx_bytes += p.len() as u64;
            p
        }));
        self.stats.sent(n);
        Ok(n)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        while self.rx.is_empty() && Instant::now() < deadline {
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
}
