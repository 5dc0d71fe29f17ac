//! Seeded fault injection around any port: loss, duplication, reordering within a bounded
//! window, fixed delay and corruption, independently per direction. The same seed and inputs
//! give the same faults. (This kernel has no netem; every loss test goes through here.)

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::{Batch, Packet, Pool, Port, PortStats};

/// Which traffic a fault configuration applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Packets the wrapped port sends.
    Tx,
    /// Packets the wrapped port receives.
    Rx,
    /// Both.
    Both,
}

/// What to do to packets. Probabilities are per packet, in 0..=1.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Probability a packet is dropped.
    pub loss: f64,
    /// Probability a packet is delivered twice.
    pub duplicate: f64,
    /// Probability a packet is held back and delivered after 1..=`reorder_window` later packets.
    pub reorder: f64,
    /// Most packets a reordered packet is overtaken by.
    pub reorder_window: usize,
    /// A held-back packet is released after this long even if no later packet comes.
    pub reorder_max_hold: Duration,
    /// Fixed delay added to every delivered packet.
    pub delay: Duration,
    /// Probability one byte of a packet is flipped.
    pub corrupt: f64,
    /// Seed of the random choices.
    pub seed: u64,
    /// Directions affected.
    pub direction: Direction,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_window: 4,
            reorder_max_hold: Duration::from_millis(1),
            delay: Duration::ZERO,
            corrupt: 0.0,
            seed: 1,
            direction: Direction::Both,
        }
    }
}

impl FaultConfig {
    /// Checks the probabilities; the error names the bad one.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in
            [("loss", self.loss), ("duplicate", self.duplicate), ("reorder", self.reorder), ("corrupt", self.corrupt)]
        {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} probability {p} is outside 0..=1"));
            }
        }
        if self.reorder > 0.0 && self.reorder_window == 0 {
            return Err("reorder_window must be at least 1 when reorder > 0".into());
        }
        Ok(())
    }

    /// Whether it does anything.
    pub fn is_noop(&self) -> bool {
        self.loss == 0.0 && self.duplicate == 0.0 && self.reorder == 0.0 && self.corrupt == 0.0 && self.delay.is_zero()
    }
}

/// What the injector did, per direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Packets offered.
    pub offered: u64,
    /// Dropped.
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Held back to be overtaken.
    pub reordered: u64,
    /// Corrupted.
    pub corrupted: u64,
    /// Delivered to the other side of the injector.
    pub delivered: u64,
}

#[derive(Debug)]
struct Impairment {
    active: bool,
    rng: SmallRng,
    held: Vec<(Packet, usize, Instant)>,
    delayed: VecDeque<(Instant, Packet)>,
    stats: FaultStats,
}

impl Impairment {
    fn new(active: bool, seed: u64) -> Self {
        Impairment {
            active,
            rng: SmallRng::seed_from_u64(seed),
            held: Vec::new(),
            delayed: VecDeque::new(),
            stats: FaultStats::default(),
        }
    }

    /// Counts `n` packets that a no-op configuration passed straight through, as
    /// [`apply`](Self::apply) would have.
    fn pass(&mut self, n: usize) {
        if self.active {
            self.stats.offered += n as u64;
        }
        self.stats.delivered += n as u64;
    }

    fn deliver(&mut self, cfg: &FaultConfig, now: Instant, p: Packet, out: &mut VecDeque<Packet>) {
        if cfg.delay.is_zero() {
            self.stats.delivered += 1;
            out.push_back(p);
        } else {
            self.delayed.push_back((now + cfg.delay, p));
        }
    }

    fn apply(&mut self, cfg: &FaultConfig, pool: &Pool, now: Instant, mut p: Packet, out: &mut VecDeque<Packet>) {
        if !self.active {
            self.deliver(cfg, now, p, out);
            return;
        }
        self.stats.offered += 1;
        if self.rng.random_bool(cfg.loss) {
            self.stats.dropped += 1;
            pool.put(p);
            return;
        }
        if !p.is_empty() && self.rng.random_bool(cfg.corrupt) {
            let i = self.rng.random_range(0..p.len());
            let bit = 1u8 << self.rng.random_range(0..8);
            p.data_mut()[i] ^= bit;
            self.stats.corrupted += 1;
        }
        let copy = if self.rng.random_bool(cfg.duplicate) {
            self.stats.duplicated += 1;
            Some(pool.clone_packet(&p))
        } else {
            None
        };
        let mut passed = 0;
        for p in std::iter::once(p).chain(copy) {
            if self.rng.random_bool(cfg.reorder) {
                self.stats.reordered += 1;
                let overtakers = self.rng.random_range(1..=cfg.reorder_window.max(1));
                self.held.push((p, overtakers, now));
            } else {
                self.deliver(cfg, now, p, out);
                passed += 1;
            }
        }
        if passed > 0 {
            let mut i = 0;
            while i < self.held.len() {
                let h = &mut self.held[i];
                h.1 = h.1.saturating_sub(passed);
                if h.1 == 0 {
                    let (p, _, _) = self.held.swap_remove(i);
                    self.deliver(cfg, now, p, out);
                } else {
                    i += 1;
                }
            }
        }
    }

    fn poll(&mut self, cfg: &FaultConfig, now: Instant, out: &mut VecDeque<Packet>) {
        let mut i = 0;
        while i < self.held.len() {
            if now >= self.held[i].2 + cfg.reorder_max_hold {
                let (p, _, _) = self.held.swap_remove(i);
                self.deliver(cfg, now, p, out);
            } else {
                i += 1;
            }
        }
        while self.delayed.front().is_some_and(|(t, _)| *t <= now) {
            let (_, p) = self.delayed.pop_front().expect("front exists");
            self.stats.delivered += 1;
            out.push_back(p);
        }
    }

    fn poll_at(&self, cfg: &FaultConfig) -> Option<Instant> {
        let held = self.held.iter().map(|h| h.2 + cfg.reorder_max_hold).min();
        let delayed = self.delayed.front().map(|(t, _)| *t);
        held.into_iter().chain(delayed).min()
    }
}

/// A port wrapper that injects faults. Call `send` (with an empty batch if need be) and `recv`
/// at [`Port::poll_at`] so held and delayed packets move on.
#[derive(Debug)]
pub struct FaultInjector<P> {
    inner: P,
    cfg: FaultConfig,
    pool: Pool,
    tx: Impairment,
    rx: Impairment,
    tx_ready: VecDeque<Packet>,
    rx_ready: VecDeque<Packet>,
    scratch: Batch,
}

impl<P: Port> FaultInjector<P> {
    /// Wraps `inner`. Panics if `cfg` does not [`validate`](FaultConfig::validate).
    pub fn new(inner: P, pool: &Pool, cfg: FaultConfig) -> Self {
        if let Err(e) = cfg.validate() {
            panic!("invalid fault configuration: {e}");
        }
        let tx_on = matches!(cfg.direction, Direction::Tx | Direction::Both);
        let rx_on = matches!(cfg.direction, Direction::Rx | Direction::Both);
        FaultInjector {
            tx: Impairment::new(tx_on, cfg.seed),
            rx: Impairment::new(rx_on, cfg.seed ^ 0x9e37_79b9_7f4a_7c15),
            inner,
            cfg,
            pool: pool.clone(),
            tx_ready: VecDeque::new(),
            rx_ready: VecDeque::new(),
            scratch: Batch::new(crate::DEFAULT_BATCH),
        }
    }

    /// Faults applied to sent packets.
    pub fn tx_stats(&self) -> FaultStats {
        self.tx.stats
    }
    /// Faults applied to received packets.
    pub fn rx_stats(&self) -> FaultStats {
        self.rx.stats
    }
    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

impl<P: Port> Port for FaultInjector<P> {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        // A configuration that does nothing: packets go straight through, counted, with no
        // random draws and no queue between.
        if self.cfg.is_noop() {
            let n = self.inner.recv(now, batch)?;
            self.rx.pass(n);
            return Ok(n);
        }
        self.inner.recv(now, &mut self.scratch)?;
        for p in self.scratch.drain() {
            self.rx.apply(&self.cfg, &self.pool, now, p, &mut self.rx_ready);
        }
        self.rx.poll(&self.cfg, now, &mut self.rx_ready);
        let mut n = 0;
        while !batch.is_full() {
            let Some(p) = self.rx_ready.pop_front() else { break };
            batch.push(p);
            n += 1;
        }
        Ok(n)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        if self.cfg.is_noop() {
            self.tx.pass(batch.len());
            return self.inner.send(now, batch);
        }
        for p in batch.drain() {
            self.tx.apply(&self.cfg, &self.pool, now, p, &mut self.tx_ready);
        }
        self.tx.poll(&self.cfg, now, &mut self.tx_ready);
        let mut sent = 0;
        while !self.tx_ready.is_empty() {
            while !self.scratch.is_full() {
                let Some(p) = self.tx_ready.pop_front() else { break };
                self.scratch.push(p);
            }
            if let Err(e) = self.inner.send(now, &mut self.scratch).map(|n| sent += n) {
                self.scratch.recycle(&self.pool);
                return Err(e);
            }
        }
        Ok(sent)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        if !self.rx_ready.is_empty() {
            return Ok(());
        }
        let timeout = match self.poll_at() {
            Some(t) => timeout.min(t.saturating_duration_since(Instant::now())),
            None => timeout,
        };
        self.inner.wait(timeout)
    }

    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn poll_at(&self) -> Option<Instant> {
        let ready = (!self.rx_ready.is_empty()).then(Instant::now);
        [self.tx.poll_at(&self.cfg), self.rx.poll_at(&self.cfg), self.inner.poll_at(), ready]
            .into_iter()
            .flatten()
            .min()
    }

    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem;

    fn run(cfg: FaultConfig, n: u32) -> (Vec<u32>, FaultStats) {
        let pool = Pool::new(1024, 64);
        let (a, mut b) = mem::pair(&pool, 1 << 16);
        let mut a = FaultInjector::new(a, &pool, cfg);
        let start = Instant::now();
        let mut batch = Batch::new(32);
        for i in 0..n {
            let mut p = pool.packet();
            p.extend_from_slice(&i.to_be_bytes()).unwrap();
            p.set_peer(b.local_addr());
            batch.push(p);
            if batch.is_full() {
                a.send(start, &mut batch).unwrap();
            }
        }
        a.send(start, &mut batch).unwrap();
        // Release whatever is still held or delayed.
        a.send(start + Duration::from_secs(10), &mut batch).unwrap();
        let mut seen = Vec::new();
        while b.recv(start, &mut batch).unwrap() > 0 {
            for p in batch.drain() {
                seen.push(u32::from_be_bytes(p.data().try_into().unwrap()));
                pool.put(p);
            }
        }
        (seen, a.tx_stats())
    }

    #[test]
    fn loss_and_duplication_rates_are_close_to_configured() {
        let cfg = FaultConfig { loss: 0.1, duplicate: 0.05, ..Default::default() };
        let (seen, st) = run(cfg, 20_000);
        assert!((1_700..2_300).contains(&st.dropped), "{st:?}");
        assert!((700..1_200).contains(&st.duplicated), "{st:?}");
        assert_eq!(seen.len() as u64, 20_000 - st.dropped + st.duplicated);
    }

    #[test]
    fn reordering_is_bounded_by_the_window() {
        let cfg = FaultConfig { reorder: 0.2, reorder_window: 3, ..Default::default() };
        let (seen, st) = run(cfg, 5_000);
        assert_eq!(seen.len(), 5_000);
        assert!(st.reordered > 500);
        let mut out_of_order = 0;
        for (pos, v) in seen.iter().enumerate() {
            // A packet is overtaken by at most 3 others, and each of them may itself be late.
            assert!((*v as i64 - pos as i64).abs() <= 6, "packet {v} at {pos}");
            out_of_order += usize::from(pos > 0 && seen[pos - 1] > *v);
        }
        assert!(out_of_order > 0);
    }

    #[test]
    fn same_seed_same_faults() {
        let cfg = FaultConfig { loss: 0.2, reorder: 0.2, duplicate: 0.1, seed: 42, ..Default::default() };
        assert_eq!(run(cfg.clone(), 2000).0, run(cfg, 2000).0);
    }

    #[test]
    fn delay_holds_packets_until_due() {
        let pool = Pool::new(16, 64);
        let (a, mut b) = mem::pair(&pool, 16);
        let cfg = FaultConfig { delay: Duration::from_millis(5), ..Default::default() };
        let mut a = FaultInjector::new(a, &pool, cfg);
        let t0 = Instant::now();
        let mut batch = Batch::new(4);
        let mut p = pool.packet();
        p.set_peer(b.local_addr());
        batch.push(p);
        a.send(t0, &mut batch).unwrap();
        assert_eq!(b.recv(t0, &mut batch).unwrap(), 0);
        assert_eq!(a.poll_at(), Some(t0 + Duration::from_millis(5)));
        a.send(t0 + Duration::from_millis(5), &mut batch).unwrap();
        assert_eq!(b.recv(t0, &mut batch).unwrap(), 1);
    }

    /// A configuration that does nothing passes every packet through in order, counted as the
    /// faulty path counts them.
    #[test]
    fn a_noop_injector_passes_packets_through_and_counts_them() {
        let (seen, st) = run(FaultConfig::default(), 1000);
        assert_eq!(seen, (0..1000).collect::<Vec<u32>>());
        assert_eq!(st, FaultStats { offered: 1000, delivered: 1000, ..FaultStats::default() });
        // The faulty path, with faults that never fire, counts the same.
        let never = FaultConfig { reorder: 1e-300, reorder_window: 1, ..FaultConfig::default() };
        assert!(!never.is_noop());
        let (seen2, st2) = run(never, 1000);
        assert_eq!((seen2, st2), (seen, st));
    }

    #[test]
    fn bad_probabilities_are_named() {
        let cfg = FaultConfig { duplicate: 1.5, ..Default::default() };
        assert!(cfg.validate().unwrap_err().contains("duplicate"));
    }
}
