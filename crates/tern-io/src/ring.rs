//! Rings between cores with a doorbell: a dispatcher core pushes packets (moved, not copied)
//! into a worker's bounded ring and rings the doorbell once per batch; the worker drains the
//! ring as a [`Port`] and parks its thread when it is empty. The software analogue of a NIC's
//! per-queue DMA ring and interrupt.
//!
//! [`Split`] joins a receive side and a transmit side into one port: a worker receives from its
//! ring and sends on its own socket (QingNiao's shared-nothing workers, §4.1).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::sync::{Arc, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::{Batch, Packet, Port, PortStats};

#[derive(Debug)]
struct Shared {
    ring: ArrayQueue<Packet>,
    sleeping: AtomicBool,
    consumer: OnceLock<Thread>,
    /// An eventfd doorbell, for a consumer that also waits on a socket ([`ring_with_fd`]).
    wake: Option<OwnedFd>,
}

/// The producing end of a ring (cloneable: several dispatchers may feed one worker).
#[derive(Debug, Clone)]
pub struct RingSender(Arc<Shared>);

/// The consuming end of a ring, a receive-only [`Port`] whose `wait` parks the thread.
#[derive(Debug)]
pub struct RingReceiver {
    shared: Arc<Shared>,
    addr: SocketAddr,
    stats: PortStats,
}

/// A ring of `capacity` packets. `addr` is what the receiving port reports as its address.
pub fn ring(capacity: usize, addr: SocketAddr) -> (RingSender, RingReceiver) {
    ends(capacity, addr, None)
}

fn ends(capacity: usize, addr: SocketAddr, wake: Option<OwnedFd>) -> (RingSender, RingReceiver) {
    let shared = Arc::new(Shared {
        ring: ArrayQueue::new(capacity.max(1)),
        sleeping: AtomicBool::new(false),
        consumer: OnceLock::new(),
        wake,
    });
    (RingSender(shared.clone()), RingReceiver { shared, addr, stats: PortStats::default() })
}

/// A ring whose doorbell is an eventfd, for a consumer that sleeps in
/// [`RingReceiver::wait_with_fd`] on the ring and a socket at once (a worker that also receives
/// on its own socket).
pub fn ring_with_fd(capacity: usize, addr: SocketAddr) -> io::Result<(RingSender, RingReceiver)> {
    // SAFETY: eventfd takes no pointers; a negative return is an error, checked below.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let wake = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(ends(capacity, addr, Some(wake)))
}

impl RingSender {
    /// Enqueues a packet; a full ring hands it back.
    #[inline]
    pub fn push(&self, packet: Packet) -> Result<(), Packet> {
        self.0.ring.push(packet)
    }

    /// Wakes the consumer if it is parked. Call once after a batch of pushes.
    #[inline]
    pub fn ring_doorbell(&self) {
        // Pairs with the fence in `RingReceiver::wait`: either the consumer sees our packets
        // before parking, or we see it sleeping and unpark it (an early unpark is kept as a
        // token, so the park returns at once).
        fence(Ordering::SeqCst);
        if !self.0.sleeping.load(Ordering::Relaxed) {
            return;
        }
        if let Some(fd) = &self.0.wake {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to an eventfd this ring owns. A full
            // counter (EAGAIN) already means "wake up", so the result is not needed.
            let _ = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
        } else if let Some(t) = self.0.consumer.get() {
            t.unpark();
        }
    }

    /// Whether `other` feeds the same ring.
    pub fn same_ring(&self, other: &RingSender) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Packets waiting.
    pub fn len(&self) -> usize {
        self.0.ring.len()
    }

    /// Whether no packets are waiting.
    pub fn is_empty(&self) -> bool {
        self.0.ring.is_empty()
    }
}

impl RingReceiver {
    /// Sleeps until the ring has packets, `fd` is readable, or `timeout` passes. Needs a ring
    /// from [`ring_with_fd`]; on another ring it sleeps at most 1 ms (the producer cannot wake it).
    pub fn wait_with_fd(&mut self, fd: RawFd, timeout: Duration) -> io::Result<()> {
        let Some(wake) = &self.shared.wake else {
            return crate::udp::poll_fd(fd, libc::POLLIN, timeout.min(Duration::from_millis(1)));
        };
        self.shared.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let mut fds = [
            libc::pollfd { fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: wake.as_raw_fd(), events: libc::POLLIN, revents: 0 },
        ];
        let r = if self.shared.ring.is_empty() { crate::udp::poll_fds(&mut fds, timeout) } else { Ok(()) };
        self.shared.sleeping.store(false, Ordering::Relaxed);
        if fds[1].revents != 0 {
            let mut buf = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a live buffer from a non-blocking eventfd this
            // ring owns (resetting its counter); EAGAIN is harmless.
            let _ = unsafe { libc::read(wake.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        }
        r
    }
}

impl RingReceiver {
    /// Sleeps until this ring or `other` (both made by [`ring_with_fd`]) has packets, or
    /// `timeout`: for a consumer fed by two rings (a worker's own ring and a receive queue).
    pub fn wait_with_ring(&mut self, other: &RingReceiver, timeout: Duration) -> io::Result<()> {
        self.wait_rings(Some(other), timeout)
    }

    fn wait_rings(&self, other: Option<&RingReceiver>, timeout: Duration) -> io::Result<()> {
        // At most two rings, on the stack: this runs on every idle wait.
        let all = [Some(&*self.shared), other.map(|o| &*o.shared)];
        let rings = &all[..if other.is_some() { 2 } else { 1 }];
        let mut fds = [libc::pollfd { fd: -1, events: libc::POLLIN, revents: 0 }; 2];
        for (f, r) in fds.iter_mut().zip(rings.iter().flatten()) {
            match &r.wake {
                Some(w) => f.fd = w.as_raw_fd(),
                None => return Err(io::Error::other("wait_with_ring needs rings made by ring_with_fd")),
            }
        }
        let fds = &mut fds[..rings.len()];
        for r in rings.iter().flatten() {
            r.sleeping.store(true, Ordering::Relaxed);
        }
        // Pairs with the fence in `ring_doorbell`, as in `wait`.
        fence(Ordering::SeqCst);
        let empty = rings.iter().flatten().all(|r| r.ring.is_empty());
        let res = if empty { crate::udp::poll_fds(fds, timeout) } else { Ok(()) };
        for r in rings.iter().flatten() {
            r.sleeping.store(false, Ordering::Relaxed);
        }
        for (r, f) in rings.iter().flatten().zip(fds.iter()) {
            if f.revents != 0
                && let Some(w) = &r.wake
            {
                let mut buf = [0u8; 8];
                // SAFETY: reads at most 8 bytes into a live 8-byte buffer from an eventfd this
                // ring owns; the count read is not needed (EAGAIN: nothing to clear).
                let _ = unsafe { libc::read(w.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            }
        }
        res
    }
}

impl Port for RingReceiver {
    fn recv(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        Ok(crate::pop_into(&self.shared.ring, batch, &mut self.stats))
    }

    /// A ring only receives: everything sent is dropped and counted.
    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.stats.tx_dropped += batch.len() as u64;
        drop(batch.drain());
        Ok(0)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        // A ring with an eventfd doorbell is woken through it, not by unparking.
        if self.shared.wake.is_some() {
            return self.wait_rings(None, timeout);
        }
        let me = self.shared.consumer.get_or_init(std::thread::current);
        if me.id() != std::thread::current().id() {
            // Another thread took over the ring: sleep without a doorbell.
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return Ok(());
        }
        self.shared.sleeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.shared.ring.is_empty() {
            std::thread::park_timeout(timeout);
        }
        self.shared.sleeping.store(false, Ordering::Relaxed);
        Ok(())
    }

    fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// A port that receives from `rx` and transmits on `tx` (whose address it reports).
#[derive(Debug)]
pub struct Split<R, T> {
    /// The receive side.
    pub rx: R,
    /// The transmit side.
    pub tx: T,
}

impl<R: Port, T: Port> Port for Split<R, T> {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.rx.recv(now, batch)
    }
    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.tx.send(now, batch)
    }
    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.rx.wait(timeout)
    }
    fn local_addr(&self) -> SocketAddr {
        self.tx.local_addr()
    }
    fn poll_at(&self) -> Option<Instant> {
        match (self.rx.poll_at(), self.tx.poll_at()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    /// Receive counters from `rx`, transmit counters from `tx`.
    fn stats(&self) -> PortStats {
        let (r, t) = (self.rx.stats(), self.tx.stats());
        PortStats {
            rx_packets: r.rx_packets,
            rx_bytes: r.rx_bytes,
            rx_dropped: r.rx_dropped,
            rx_batches: r.rx_batches,
            tx_packets: t.tx_packets,
            tx_bytes: t.tx_bytes,
            tx_dropped: t.tx_dropped,
            tx_batches: t.tx_batches,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pool;

    fn addr() -> SocketAddr {
        "127.0.0.1:9".parse().unwrap()
    }

    #[test]
    fn packets_move_in_order_and_a_full_ring_refuses() {
        let pool = Pool::new(16, 64);
        let (tx, mut rx) = ring(4, addr());
        for i in 0..5u8 {
            let mut p = pool.packet();
            p.extend_from_slice(&[i]).unwrap();
            let r = tx.push(p);
            assert_eq!(r.is_err(), i == 4);
        }
        let mut b = Batch::new(8);
        assert_eq!(rx.recv(Instant::now(), &mut b).unwrap(), 4);
        let got: Vec<u8> = b.iter().map(|p| p.data()[0]).collect();
        assert_eq!(got, [0, 1, 2, 3]);
        assert_eq!(rx.local_addr(), addr());
    }

    /// Pushes `n` one-byte packets, waiting while the ring is full, ringing every 7 and at the end.
    fn produce(tx: &RingSender, pool: &Pool, n: usize) {
        for i in 0..n {
            let mut p = pool.packet();
            p.extend_from_slice(&[i as u8]).unwrap();
            while let Err(back) = tx.push(p) {
                p = back;
                std::thread::yield_now();
            }
            if i % 7 == 0 {
                tx.ring_doorbell();
            }
        }
        tx.ring_doorbell();
    }

    /// Receives until `n` packets came (or 20 s passed), sleeping with `wait` (a long timeout:
    /// only a wake-up makes this quick); returns the count and the time taken.
    fn consume(rx: &mut RingReceiver, n: usize, mut wait: impl FnMut(&mut RingReceiver)) -> (usize, Duration) {
        let mut b = Batch::new(32);
        let (mut got, start) = (0, Instant::now());
        while got < n && start.elapsed() < Duration::from_secs(20) {
            got += rx.recv(Instant::now(), &mut b).unwrap();
            drop(b.drain());
            if got < n {
                wait(rx);
            }
        }
        (got, start.elapsed())
    }

    #[test]
    fn doorbell_wakes_a_parked_consumer() {
        let pool = Pool::new(1024, 64);
        let (tx, mut rx) = ring(1024, addr());
        let n = 5000;
        let consumer = std::thread::spawn(move || consume(&mut rx, n, |rx| rx.wait(Duration::from_secs(10)).unwrap()));
        produce(&tx, &pool, n);
        let (got, took) = consumer.join().unwrap();
        assert_eq!(got, n);
        assert!(took < Duration::from_secs(10), "consumer slept through the doorbell: {took:?}");
    }

    #[test]
    fn fd_doorbell_and_the_socket_both_wake_a_consumer() {
        use std::os::fd::AsRawFd;
        let pool = Pool::new(1024, 64);
        let (tx, mut rx) = ring_with_fd(1024, addr()).unwrap();
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = sock.local_addr().unwrap();
        let n = 5000;
        let consumer = std::thread::spawn(move || {
            let (got, ring_took) =
                consume(&mut rx, n, |rx| rx.wait_with_fd(sock.as_raw_fd(), Duration::from_secs(10)).unwrap());
            // Now the ring stays empty: only the socket can end this wait early.
            let start = Instant::now();
            rx.wait_with_fd(sock.as_raw_fd(), Duration::from_secs(10)).unwrap();
            let mut buf = [0u8; 8];
            let len = sock.recv(&mut buf).unwrap();
            (got, ring_took, start.elapsed(), len)
        });
        produce(&tx, &pool, n);
        std::thread::sleep(Duration::from_millis(300));
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap().send_to(b"wake", to).unwrap();
        let (got, ring_took, sock_took, len) = consumer.join().unwrap();
        assert_eq!(got, n);
        assert!(ring_took < Duration::from_secs(10), "consumer slept through the doorbell: {ring_took:?}");
        assert!(sock_took < Duration::from_secs(5), "consumer slept through the socket: {sock_took:?}");
        assert_eq!(len, 4);
    }
}
