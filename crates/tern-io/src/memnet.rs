//! An in-process network for request services: one server address with several receive queues,
//! and clients with one or more flows (source addresses), all in one process, with no kernel in
//! the way. What a benchmark uses to see a service's own cost where kernel UDP would dominate.
//!
//! It behaves as the kernel's `SO_REUSEPORT` group does for UDP (the server's side of
//! [`crate::udp`]): a datagram to the server lands on the queue its [`Steer`] picks, either the
//! flow's hash (the kernel's default) or a 32-bit big-endian number in the payload modulo the
//! queues (the classic BPF program of
//! [`UdpPort::steer_reuseport_by_payload`](crate::udp::UdpPort::steer_reuseport_by_payload)).
//! Responses go back to the client that owns the destination address. Packet buffers move
//! between threads through [`crate::ring`]s (no copy); each queue's doorbell is an eventfd, so a
//! consumer can sleep on a queue and another ring at once.
//!
//! ```
//! use tern_io::memnet::{MemNet, Steer};
//! use tern_io::{Batch, Pool, Port};
//! use std::time::Instant;
//!
//! let pool = Pool::new(64, 256);
//! let (net, mut queues) = MemNet::new(2, Steer::Payload { offset: 0 }, 64).unwrap();
//! let mut client = net.client(2, 0, 64);
//! let mut tx = net.server_tx();
//! let mut b = Batch::new(8);
//! let mut p = pool.packet();
//! p.extend_from_slice(&7u32.to_be_bytes()).unwrap();
//! p.set_peer(net.server_addr());
//! b.push(p);
//! client.send(Instant::now(), &mut b).unwrap();
//! // 7 mod 2 = queue 1.
//! assert_eq!(queues[1].recv(Instant::now(), &mut b).unwrap(), 1);
//! // The server answers the sender; the client receives it.
//! tx.send(Instant::now(), &mut b).unwrap();
//! assert_eq!(client.recv(Instant::now(), &mut b).unwrap(), 1);
//! assert_eq!(b.get(0).unwrap().peer(), net.server_addr());
//! ```

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::ring::{RingReceiver, RingSender, ring, ring_with_fd};
use crate::{Batch, Port, PortStats};

/// How a datagram to the server picks its receive queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Steer {
    /// A hash of the sender's address: all of a flow's datagrams meet one queue (RSS).
    FlowHash,
    /// The big-endian u32 at `offset` of the datagram, modulo the queues (shorter: queue 0).
    Payload {
        /// Byte offset in the datagram.
        offset: usize,
    },
    /// A classic BPF program, run as the kernel runs a socket group's
    /// ([`crate::udp::UdpPort::attach_reuseport_cbpf`]): the queue of the index it returns, the
    /// flow hash's for an index past the last queue.
    Program(std::sync::Arc<crate::cbpf::Program>),
}

#[derive(Debug)]
struct Net {
    server: SocketAddr,
    queues: Vec<RingSender>,
    steer: RwLock<Steer>,
    /// Each client address to its client's ring.
    clients: RwLock<HashMap<SocketAddr, RingSender>>,
    next: AtomicU32,
    program_ns: AtomicU64,
}

/// The network; cheap to clone (every clone is the same network).
#[derive(Debug, Clone)]
pub struct MemNet(Arc<Net>);

static NEXT_NET: AtomicU32 = AtomicU32::new(1);

impl MemNet {
    /// A network whose server has `queues` receive queues of `capacity` packets each, steered by
    /// `steer`. Returns the network and the queues' receiving ends, in order.
    pub fn new(queues: usize, steer: Steer, capacity: usize) -> io::Result<(MemNet, Vec<RingReceiver>)> {
        let n = NEXT_NET.fetch_add(1, Ordering::Relaxed);
        let server = SocketAddr::from((Ipv4Addr::new(127, 78, (n >> 8) as u8, n as u8), 7000));
        let mut senders = Vec::new();
        let mut receivers = Vec::new();
        for _ in 0..queues.max(1) {
            let (s, r) = ring_with_fd(capacity, server)?;
            senders.push(s);
            receivers.push(r);
        }
        let net = Net {
            server,
            queues: senders,
            steer: RwLock::new(steer),
            clients: RwLock::new(HashMap::new()),
            next: AtomicU32::new(1),
            program_ns: AtomicU64::new(0),
        };
        Ok((MemNet(Arc::new(net)), receivers))
    }

    /// The server's address (what clients send to, and what responses come from).
    pub fn server_addr(&self) -> SocketAddr {
        self.0.server
    }

    /// Receive queues.
    pub fn queues(&self) -> usize {
        self.0.queues.len()
    }

    /// A client with `flows` source addresses (at least 1). A datagram leaves from the flow its
    /// big-endian u32 at `steer_offset` picks, modulo the flows, as
    /// [`MultiUdpPort`](crate::udp::MultiUdpPort) does; responses arrive on one ring of
    /// `capacity` packets.
    pub fn client(&self, flows: usize, steer_offset: usize, capacity: usize) -> MemClient {
        let (tx, rx) = ring(capacity, self.0.server);
        let mut addrs = Vec::new();
        let mut clients = self.0.clients.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        for _ in 0..flows.max(1) {
            let k = self.0.next.fetch_add(1, Ordering::Relaxed);
            let ip = self.0.server.ip();
            let std::net::IpAddr::V4(v4) = ip else { unreachable!("the server address is IPv4") };
            let [a, b, _, _] = v4.octets();
            let addr = SocketAddr::from((
                Ipv4Addr::new(a, b.wrapping_add(1), (k >> 16) as u8, (k >> 8) as u8),
                1024 + (k as u16 & 0x7fff),
            ));
            clients.insert(addr, tx.clone());
            addrs.push(addr);
        }
        MemClient {
            net: self.clone(),
            rung: vec![false; self.0.queues.len()],
            addrs,
            rx,
            steer_offset,
            steered: Vec::with_capacity(crate::DEFAULT_BATCH),
            stats: PortStats::default(),
        }
    }

    /// A sending port for the server: each datagram goes to the client that owns its `peer`
    /// address (dropped and counted if none does) and leaves with the server's address.
    pub fn server_tx(&self) -> MemServerTx {
        MemServerTx { net: self.clone(), rung: Vec::new(), stats: PortStats::default() }
    }

    /// Replaces the steering (as attaching a new program to a socket group does).
    pub fn set_steer(&self, steer: Steer) {
        *self.0.steer.write().unwrap_or_else(std::sync::PoisonError::into_inner) = steer;
    }

    /// Nanoseconds spent running a steering [`Steer::Program`] (timed per sent batch, in the
    /// sending thread: the work a NIC or the kernel would do before any server core).
    pub fn program_ns(&self) -> u64 {
        self.0.program_ns.load(Ordering::Relaxed)
    }

    fn queue_of(&self, steer: &Steer, from: SocketAddr, data: &[u8]) -> usize {
        let n = self.0.queues.len();
        let flow = || ((crate::addr_hash(&from) >> 32) as usize) % n;
        match steer {
            Steer::FlowHash => flow(),
            Steer::Payload { offset } => be_u32(data, *offset).map_or(0, |v| v as usize % n),
            Steer::Program(p) => match p.run(data) as usize {
                q if q < n => q,
                _ => flow(),
            },
        }
    }
}

fn be_u32(data: &[u8], offset: usize) -> Option<u32> {
    let b = data.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// A client of a [`MemNet`]: sends to the server's queues, receives the server's answers.
#[derive(Debug)]
pub struct MemClient {
    net: MemNet,
    addrs: Vec<SocketAddr>,
    rx: RingReceiver,
    steer_offset: usize,
    rung: Vec<bool>,
    /// (flow, queue) of each packet of the batch being sent.
    steered: Vec<(usize, usize)>,
    stats: PortStats,
}

impl Port for MemClient {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let n = self.rx.recv(now, batch)?;
        self.stats.rx_packets += n as u64;
        Ok(n)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut sent = 0;
        // Steer the batch first (what a NIC's or the kernel's steering does, timed when it is a
        // program), then move the packets.
        let t0 = Instant::now();
        self.steered.clear();
        let program = {
            let steer = self.net.0.steer.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            for p in batch.iter() {
                let flow = be_u32(p.data(), self.steer_offset).map_or(0, |v| v as usize % self.addrs.len());
                self.steered.push((flow, self.net.queue_of(&steer, self.addrs[flow], p.data())));
            }
            matches!(*steer, Steer::Program(_))
        };
        if program && !self.steered.is_empty() {
            self.net.0.program_ns.fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        for (mut p, &(flow, q)) in batch.drain().zip(&self.steered) {
            let from = self.addrs[flow];
            let len = p.data().len() as u64;
            p.set_peer(from);
            match self.net.0.queues[q].push(p) {
                Ok(()) => {
                    self.rung[q] = true;
                    sent += 1;
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += len;
                }
                Err(_) => self.stats.tx_dropped += 1,
            }
        }
        for (q, r) in self.rung.iter_mut().enumerate() {
            if std::mem::take(r) {
                self.net.0.queues[q].ring_doorbell();
            }
        }
        Ok(sent)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.rx.wait(timeout)
    }

    fn local_addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// The server's sending side on a [`MemNet`] (see [`MemNet::server_tx`]).
#[derive(Debug)]
pub struct MemServerTx {
    net: MemNet,
    /// Client rings written in this `send`, to ring each doorbell once.
    rung: Vec<RingSender>,
    stats: PortStats,
}

impl Port for MemServerTx {
    fn recv(&mut self, _now: Instant, _batch: &mut Batch) -> io::Result<usize> {
        Ok(0)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut sent = 0;
        {
            let clients = self.net.0.clients.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            for mut p in batch.drain() {
                let Some(ring) = clients.get(&p.peer()) else {
                    self.stats.tx_dropped += 1;
                    continue;
                };
                let len = p.data().len() as u64;
                p.set_peer(self.net.0.server);
                match ring.push(p) {
                    Ok(()) => {
                        sent += 1;
                        self.stats.tx_packets += 1;
                        self.stats.tx_bytes += len;
                        if !self.rung.iter().any(|r| r.same_ring(ring)) {
                            self.rung.push(ring.clone());
                        }
                    }
                    Err(_) => self.stats.tx_dropped += 1,
                }
            }
        }
        for r in self.rung.drain(..) {
            r.ring_doorbell();
        }
        Ok(sent)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        std::thread::sleep(timeout.min(Duration::from_millis(1)));
        Ok(())
    }

    fn local_addr(&self) -> SocketAddr {
        self.net.0.server
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Pool;

    fn packet(pool: &Pool, id: u32, to: SocketAddr) -> crate::Packet {
        let mut p = pool.packet();
        p.extend_from_slice(&[0, 0]).unwrap();
        p.extend_from_slice(&id.to_be_bytes()).unwrap();
        p.set_peer(to);
        p
    }

    /// Steering by payload sends a request id to queue id mod n, every time; by flow, a flow's
    /// datagrams all meet one queue; answers reach the client that sent.
    #[test]
    fn steering_and_return_path() {
        let pool = Pool::new(256, 64);
        let (net, mut qs) = MemNet::new(3, Steer::Payload { offset: 2 }, 256).unwrap();
        let mut c = net.client(4, 2, 256);
        let mut b = Batch::new(32);
        for id in 0..30u32 {
            b.push(packet(&pool, id, net.server_addr()));
        }
        assert_eq!(c.send(Instant::now(), &mut b).unwrap(), 30);
        for (q, rx) in qs.iter_mut().enumerate() {
            let mut got = Batch::new(32);
            rx.recv(Instant::now(), &mut got).unwrap();
            assert_eq!(got.len(), 10);
            assert!(got.iter().all(|p| be_u32(p.data(), 2).unwrap() as usize % 3 == q));
            // Each id left from flow id mod 4.
            assert!(got.iter().all(|p| p.peer() == c.addrs[be_u32(p.data(), 2).unwrap() as usize % 4]));
            let mut tx = net.server_tx();
            tx.send(Instant::now(), &mut got).unwrap();
        }
        let mut back = Batch::new(64);
        assert_eq!(c.recv(Instant::now(), &mut back).unwrap(), 30);
        assert!(back.iter().all(|p| p.peer() == net.server_addr()));
        // By flow: one flow, one queue.
        let (net, mut qs) = MemNet::new(4, Steer::FlowHash, 256).unwrap();
        let mut c = net.client(1, 2, 256);
        for id in 0..20u32 {
            b.push(packet(&pool, id, net.server_addr()));
        }
        c.send(Instant::now(), &mut b).unwrap();
        let counts: Vec<usize> = qs
            .iter_mut()
            .map(|q| {
                let mut got = Batch::new(32);
                q.recv(Instant::now(), &mut got).unwrap()
            })
            .collect();
        assert_eq!(counts.iter().filter(|&&n| n > 0).count(), 1, "{counts:?}");
        // An answer to nobody is dropped and counted.
        let mut tx = net.server_tx();
        b.push(packet(&pool, 1, "10.9.9.9:1".parse().unwrap()));
        assert_eq!(tx.send(Instant::now(), &mut b).unwrap(), 0);
        assert_eq!(tx.stats().tx_dropped, 1);
    }
}
