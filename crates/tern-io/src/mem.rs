//! In-process ports: two ends of a pair of bounded lock-free rings. Packets move between them
//! without copying. Each end has a made-up loopback address so engines see ordinary peers.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::{Batch, Pool, Port, PortStats};

static NEXT_PORT: AtomicU16 = AtomicU16::new(1);

/// One end of an in-memory link.
#[derive(Debug)]
pub struct MemPort {
    rx: Arc<ArrayQueue<crate::Packet>>,
    tx: Arc<ArrayQueue<crate::Packet>>,
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
    let a_to_b = Arc::new(ArrayQueue::new(ring.max(1)));
    let b_to_a = Arc::new(ArrayQueue::new(ring.max(1)));
    let a = MemPort {
        rx: b_to_a.clone(),
        tx: a_to_b.clone(),
        pool: pool.clone(),
        addr: fresh_addr(),
        stats: PortStats::default(),
    };
    let b = MemPort { rx: a_to_b, tx: b_to_a, pool: pool.clone(), addr: fresh_addr(), stats: PortStats::default() };
    (a, b)
}

impl Port for MemPort {
    fn recv(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        Ok(crate::pop_into(&self.rx, batch, &mut self.stats))
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut n = 0;
        for mut p in batch.drain() {
            let len = p.len() as u64;
            p.peer = self.addr;
            match self.tx.push(p) {
                Ok(()) => {
                    n += 1;
                    self.stats.tx_bytes += len;
                }
                Err(p) => {
                    self.stats.tx_dropped += 1;
                    self.pool.put(p);
                }
            }
        }
        self.stats.tx_packets += n as u64;
        self.stats.tx_batches += u64::from(n > 0);
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
