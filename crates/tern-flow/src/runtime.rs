//! The switch between real ports: one thread polls every port in turn, runs each received
//! batch through the [`Switch`] and sends what it produced, batch by batch. A control channel
//! answers for counters and the cached rules between batches, so readers never stop the data
//! path for long and never see a half-updated table.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tern_io::afpacket::AfPacketPort;
use tern_io::pcap::{PcapIn, PcapOut};
use tern_io::{Batch, Pool, Port, PortStats};

use crate::config::{Config, PortKind};
use crate::pipeline::{Outputs, PipelineStats};
use crate::slowpath::{SlowDrop, SlowPath, SlowPathStats};
use crate::switch::{CacheStats, FlowRow, SLOW_EXEC_DROPS, Switch};

/// A port of the switch.
pub enum FlowPort {
    /// Raw frames on an interface.
    AfPacket(AfPacketPort),
    /// Frames from and to capture files.
    Pcap {
        /// Frames to receive.
        input: Option<Box<PcapIn>>,
        /// Where sent frames are written (dropped and counted without one).
        output: Option<PcapOut>,
        /// Frames sent with no output file.
        dropped: u64,
    },
    /// Any other port (tests and benchmarks: `mem`).
    Other(Box<dyn Port + Send>),
}

impl std::fmt::Debug for FlowPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlowPort::AfPacket(p) => p.fmt(f),
            FlowPort::Pcap { input, output, .. } => {
                f.debug_struct("Pcap").field("input", input).field("output", output).finish()
            }
            FlowPort::Other(_) => f.write_str("Other"),
        }
    }
}

impl FlowPort {
    /// Opens the port a configuration describes.
    pub fn open(kind: &PortKind, pool: &Pool) -> io::Result<FlowPort> {
        Ok(match kind {
            PortKind::AfPacket { interface } => FlowPort::AfPacket(AfPacketPort::open(interface, pool)?),
            PortKind::Pcap { input, output, timing } => FlowPort::Pcap {
                input: input.as_deref().map(|p| PcapIn::open(p, pool, *timing).map(Box::new)).transpose()?,
                output: output.as_deref().map(|p| PcapOut::create(p, pool)).transpose()?,
                dropped: 0,
            },
        })
    }

    /// A replayed capture's frames skipped (not Ethernet, or longer than a buffer) and the read
    /// error that ended it early, if one did; None for a port without a capture to replay.
    pub fn capture(&self) -> Option<(u64, Option<String>)> {
        match self {
            FlowPort::Pcap { input: Some(p), .. } => Some((p.skipped(), p.error().map(str::to_string))),
            _ => None,
        }
    }

    /// Whether the port will never receive again (a replayed capture that has ended).
    pub fn exhausted(&self) -> bool {
        match self {
            FlowPort::Pcap { input, .. } => input.as_ref().is_none_or(|p| p.finished()),
            _ => false,
        }
    }

    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        match self {
            FlowPort::AfPacket(p) => p.recv(now, batch),
            FlowPort::Pcap { input: Some(p), .. } => p.recv(now, batch),
            FlowPort::Pcap { input: None, .. } => Ok(0),
            FlowPort::Other(p) => p.recv(now, batch),
        }
    }

    fn send(&mut self, now: Instant, batch: &mut Batch, pool: &Pool) -> io::Result<usize> {
        match self {
            FlowPort::AfPacket(p) => p.send(now, batch),
            FlowPort::Pcap { output: Some(p), .. } => p.send(now, batch),
            FlowPort::Pcap { output: None, dropped, .. } => {
                *dropped += batch.len() as u64;
                batch.recycle(pool);
                Ok(0)
            }
            FlowPort::Other(p) => p.send(now, batch),
        }
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        match self {
            FlowPort::AfPacket(p) => p.wait(timeout),
            FlowPort::Pcap { input: Some(p), .. } if !p.finished() => p.wait(timeout),
            FlowPort::Pcap { .. } => {
                std::thread::sleep(timeout);
                Ok(())
            }
            FlowPort::Other(p) => p.wait(timeout),
        }
    }

    /// Counters (receive side from the input, send side from the output).
    pub fn stats(&self) -> PortStats {
        match self {
            FlowPort::AfPacket(p) => p.stats(),
            FlowPort::Pcap { input, output, dropped } => {
                let mut s = input.as_ref().map(|p| p.stats()).unwrap_or_default();
                let o = output.as_ref().map(Port::stats).unwrap_or_default();
                s.tx_packets = o.tx_packets;
                s.tx_bytes = o.tx_bytes;
                s.tx_batches = o.tx_batches;
                s.tx_dropped = o.tx_dropped + *dropped;
                s
            }
            FlowPort::Other(p) => p.stats(),
        }
    }
}

/// Every counter of a running switch, at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Seconds since the switch started.
    pub uptime: f64,
    /// Port names and counters.
    pub ports: Vec<(String, PortStats)>,
    /// Of each port replaying a capture (by name): frames skipped, and the read error that
    /// ended the capture early (a record the capture library could not read), if one did.
    pub captures: Vec<(String, u64, Option<String>)>,
    /// Pipeline counters.
    pub pipeline: PipelineStats,
    /// Cache counters.
    pub cache: CacheStats,
    /// Slow-path counters.
    pub slow: SlowPathStats,
    /// Rules cached now (exact, prefix).
    pub cached: (usize, usize),
    /// Per OFU: id, kind, instructions applied, refused because the FIFO was full, failed.
    pub ofus: Vec<(u16, &'static str, u64, u64, u64)>,
    /// Errors the ports reported (receive or send), counted.
    pub port_errors: u64,
    /// Table generation: 1 at start, +1 per reload.
    pub generation: u64,
}

impl Snapshot {
    /// The slow path's drops by reason, every reason (zeros included): its decisions' (the
    /// names of [`SlowDrop`]) and those of the packets it decided to forward
    /// ([`SLOW_EXEC_DROPS`], the pipeline's names); together they make `cache.slow_dropped`.
    pub fn slow_drops(&self) -> Vec<(&'static str, u64)> {
        let decided = SlowDrop::ALL.iter().map(|r| (r.as_str(), self.slow.dropped[*r as usize]));
        let exec = SLOW_EXEC_DROPS.iter().zip(self.cache.slow_exec_dropped).map(|(r, n)| (r.as_str(), n));
        decided.chain(exec).collect()
    }
}

/// A question for the running switch; the answer goes back on the enclosed sender.
#[derive(Debug)]
pub enum Control {
    /// All counters.
    Snapshot(mpsc::Sender<Snapshot>),
    /// The cached rules.
    Flows(mpsc::Sender<Vec<FlowRow>>),
    /// New slow-path tables (checked already): swapped in between batches, then every cached
    /// rule is flushed so none outlives the decision it cached. Answers the new generation.
    Reload(Box<SlowPath>, mpsc::Sender<u64>),
}

/// The switch with its ports.
#[derive(Debug)]
pub struct Runtime {
    /// The sans-IO switch.
    pub switch: Switch,
    ports: Vec<FlowPort>,
    names: Vec<String>,
    pool: Pool,
    batch: Batch,
    outputs: Outputs,
    start: Instant,
    port_errors: u64,
    last_error: Option<String>,
    generation: u64,
}

impl Runtime {
    /// Builds the switch of `config` and opens its ports.
    pub fn open(config: &Config, pool: &Pool) -> Result<Runtime, String> {
        let mut ports = Vec::new();
        for p in &config.ports {
            ports.push(FlowPort::open(&p.kind, pool).map_err(|e| format!("port {:?}: {e}", p.name))?);
        }
        let names = config.ports.iter().map(|p| p.name.clone()).collect();
        Ok(Runtime::with_ports(config.build(pool)?, ports, names, pool))
    }

    /// A runtime over ports given by the caller (one per pipeline output, in order).
    pub fn with_ports(switch: Switch, ports: Vec<FlowPort>, names: Vec<String>, pool: &Pool) -> Runtime {
        let n = ports.len();
        Runtime {
            switch,
            ports,
            names,
            pool: pool.clone(),
            batch: Batch::new(tern_io::DEFAULT_BATCH),
            outputs: Outputs::new(n, tern_io::DEFAULT_BATCH * 4, tern_io::DEFAULT_BATCH),
            start: Instant::now(),
            port_errors: 0,
            last_error: None,
            generation: 1,
        }
    }

    /// Nanoseconds on the switch's clock.
    pub fn now_ns(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_nanos() as u64
    }

    fn note_error(&mut self, port: usize, e: io::Error) {
        self.port_errors += 1;
        self.last_error = Some(format!("port {:?}: {e}", self.names.get(port).map_or("?", String::as_str)));
    }

    /// One round: a batch from each port through the switch, out to the ports. Returns the
    /// frames received.
    pub fn poll(&mut self, now: Instant) -> usize {
        let mut received = 0;
        let now_ns = self.now_ns(now);
        for i in 0..self.ports.len() {
            match self.ports[i].recv(now, &mut self.batch) {
                Ok(0) => continue,
                Ok(n) => received += n,
                Err(e) => {
                    self.note_error(i, e);
                    continue;
                }
            }
            self.switch.process(now_ns, i as u16, &mut self.batch, &mut self.outputs);
            self.batch.recycle(&self.pool);
            self.flush(now);
        }
        if received == 0 {
            // Idle: let the FSM drain and the cache age.
            self.switch.pipeline.configure(now_ns);
            self.switch.tick(now_ns);
        }
        received
    }

    fn flush(&mut self, now: Instant) {
        for j in 0..self.ports.len() {
            if self.outputs.ports[j].is_empty() {
                continue;
            }
            if let Err(e) = self.ports[j].send(now, &mut self.outputs.ports[j], &self.pool) {
                self.note_error(j, e);
                self.outputs.ports[j].recycle(&self.pool);
            }
        }
    }

    /// Whether every port's input has ended (only capture files end).
    pub fn inputs_exhausted(&self) -> bool {
        self.ports.iter().all(FlowPort::exhausted)
    }

    /// The last port error, if any.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    /// All counters now.
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        Snapshot {
            uptime: now.saturating_duration_since(self.start).as_secs_f64(),
            ports: self.names.iter().cloned().zip(self.ports.iter().map(FlowPort::stats)).collect(),
            captures: self
                .names
                .iter()
                .zip(&self.ports)
                .filter_map(|(n, p)| p.capture().map(|(skipped, error)| (n.clone(), skipped, error)))
                .collect(),
            pipeline: self.switch.pipeline.stats().clone(),
            cache: self.switch.cache_stats().clone(),
            slow: self.switch.slow.stats().clone(),
            cached: self.switch.cached(),
            ofus: self
                .switch
                .ofu_counters()
                .map(|(spec, c)| {
                    let ld = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
                    (spec.id, spec.kind.as_str(), ld(&c.applied), ld(&c.fifo_full), ld(&c.failed))
                })
                .collect(),
            port_errors: self.port_errors,
            generation: self.generation,
        }
    }

    /// Answers every question waiting on `control` (between batches, from `run`).
    pub fn answer(&mut self, control: &mpsc::Receiver<Control>) {
        while let Ok(c) = control.try_recv() {
            match c {
                Control::Snapshot(tx) => {
                    let _ = tx.send(self.snapshot());
                }
                Control::Flows(tx) => {
                    let now_ns = self.now_ns(Instant::now());
                    let _ = tx.send(self.switch.flows(now_ns));
                }
                Control::Reload(slow, tx) => {
                    self.switch.slow = *slow;
                    if let Err(e) = self.switch.flush() {
                        self.last_error = Some(format!("flush after reload: {e}"));
                    }
                    self.generation += 1;
                    let _ = tx.send(self.generation);
                }
            }
        }
    }

    /// Runs until `stop` is set (or, with `until_inputs_end`, until every capture has been
    /// replayed and the last frames are out), answering `control` between batches. When idle
    /// it waits on the ports in turn, a millisecond at most each.
    pub fn run(&mut self, stop: &AtomicBool, control: &mpsc::Receiver<Control>, until_inputs_end: bool) {
        let mut idle = 0u32;
        let mut turn = 0;
        while !stop.load(Ordering::Relaxed) {
            let n = self.poll(Instant::now());
            self.answer(control);
            if n > 0 {
                idle = 0;
                continue;
            }
            if until_inputs_end && self.inputs_exhausted() {
                break;
            }
            idle += 1;
            if idle > 64 && !self.ports.is_empty() {
                turn = (turn + 1) % self.ports.len();
                if let Err(e) = self.ports[turn].wait(Duration::from_millis(1)) {
                    self.note_error(turn, e);
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
}
