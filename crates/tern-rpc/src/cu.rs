//! Compute units (RpcNIC §III-D, Table II): partially reconfigurable blocks on the NIC that run
//! RPC kernels ([`crate::kernel`]) on device-resident bytes, each here a thread of its own.
//!
//! A unit has a **descriptor ring** (each entry: input buffer, input length, output buffer and
//! its capacity) that the host fills with [`ComputeUnit::submit_task`], and a **notification
//! ring** (each entry: result length and status) that the unit fills when a task is done and the
//! host reads with [`ComputeUnit::poll`]. Both rings have [`UnitConfig::ring_entries`] entries: a
//! task holds its notification entry from submission until it is polled, so at most that many
//! are in flight. [`ComputeUnit::program`] reconfigures the unit with another kernel (or none:
//! the unit is then unavailable, as when another application has taken its region); tasks
//! already in the ring finish on the old kernel, and for [`UnitConfig::reconfigure`] (the partial
//! reconfiguration time) every submission is refused and counted. [`ComputeUnit::kind`] says
//! what the unit computes now (the paper's `getType()`).
//!
//! Units touch only device memory: their buffers are [`DeviceBuf`]s, taken from the device
//! chunk pool (and counted against its limit), moved into the ring on submission and handed back
//! by `poll`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::arena::ChunkPool;
use crate::decode::Pools;
use crate::kernel::{Kernel, KernelKind, Status};

/// Bytes in device memory, taken from a device chunk pool: a whole number of its chunks (a run
/// for more than one), given back when dropped. What compute units read and write.
#[derive(Debug)]
pub struct DeviceBuf {
    pool: ChunkPool,
    bytes: Vec<u8>,
    /// Chunks counted out for it.
    chunks: usize,
    /// Bytes it may hold.
    capacity: usize,
}

impl DeviceBuf {
    /// An empty buffer for at least `capacity` bytes from `pools`' device pool (`None`: the
    /// pool has not that many chunks left).
    pub fn alloc(pools: &Pools, capacity: usize) -> Option<DeviceBuf> {
        let pool = &pools.device;
        let chunks = capacity.div_ceil(pool.chunk_size()).max(1);
        let bytes = pool.take_run(chunks)?;
        Some(DeviceBuf { pool: pool.clone(), bytes, chunks, capacity: chunks * pool.chunk_size() })
    }

    /// A buffer holding a copy of `b` (`None`: the device pool is exhausted).
    pub fn from_slice(pools: &Pools, b: &[u8]) -> Option<DeviceBuf> {
        let mut d = DeviceBuf::alloc(pools, b.len())?;
        crate::wire::extend_in_pieces(&mut d.bytes, b);
        Some(d)
    }

    /// A buffer over memory already counted out of `pool` (`chunks` of its chunks).
    pub(crate) fn from_parts(pool: &ChunkPool, bytes: Vec<u8>, chunks: usize) -> DeviceBuf {
        DeviceBuf { pool: pool.clone(), capacity: bytes.capacity(), bytes, chunks }
    }

    /// The bytes it holds.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Bytes it may hold (its chunks').
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Device chunks it takes.
    pub fn chunks(&self) -> usize {
        self.chunks
    }

    /// Its memory and the chunks counted for it, no longer given back when dropped (a message's
    /// device arena takes it over).
    pub(crate) fn into_parts(mut self) -> (ChunkPool, Vec<u8>, usize) {
        let bytes = std::mem::take(&mut self.bytes);
        let chunks = std::mem::replace(&mut self.chunks, 0);
        (self.pool.clone(), bytes, chunks)
    }

    /// Empties it and runs `kernel` into it, writing at most its capacity.
    fn run(&mut self, kernel: &mut Kernel, input: &[u8]) -> Status {
        kernel.run(input, &mut self.bytes, self.capacity)
    }
}

impl Drop for DeviceBuf {
    fn drop(&mut self) {
        if self.chunks > 0 {
            self.pool.give_run(std::mem::take(&mut self.bytes), self.chunks);
        }
    }
}

/// A compute unit's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnitConfig {
    /// Entries of its descriptor and notification rings (tasks in flight at most). Default 64.
    pub ring_entries: usize,
    /// How long a reconfiguration keeps it out of service. Default 0 (the `rpcnic-u280`
    /// profile's partial-reconfiguration time where a profile is given).
    pub reconfigure: Duration,
}

impl Default for UnitConfig {
    fn default() -> Self {
        UnitConfig { ring_entries: 64, reconfigure: Duration::ZERO }
    }
}

/// Why a submission was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Refused {
    /// Every notification entry is held by a task not yet polled.
    #[error("the unit's rings are full")]
    RingFull,
    /// The unit is being reconfigured.
    #[error("the unit is being reconfigured")]
    Reconfiguring,
    /// The unit has no kernel (never programmed, or programmed with none).
    #[error("the unit has no kernel")]
    Unavailable,
    /// The input length is past the input buffer's bytes.
    #[error("an input length past the input buffer")]
    BadLength,
}

impl Refused {
    /// Every reason, for metrics.
    pub const ALL: [Refused; 4] = [Refused::RingFull, Refused::Reconfiguring, Refused::Unavailable, Refused::BadLength];

    /// Its name in metrics and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Refused::RingFull => "ring_full",
            Refused::Reconfiguring => "reconfiguring",
            Refused::Unavailable => "unavailable",
            Refused::BadLength => "bad_length",
        }
    }
}

/// A refused submission: why, and the buffers back.
#[derive(Debug)]
pub struct Rejected {
    /// Why.
    pub reason: Refused,
    /// The input buffer.
    pub input: DeviceBuf,
    /// The output buffer.
    pub output: DeviceBuf,
}

/// A submitted task: its notification entry, polled with [`ComputeUnit::poll`] on the unit
/// that took it. The entry stays taken until it is polled.
#[derive(Debug)]
#[must_use = "a task's notification entry stays taken until it is polled"]
pub struct TaskHandle {
    unit: u64,
    entry: usize,
}

/// A finished task: its notification entry's status and length, and the buffers back (the
/// output holding `length` bytes of result).
#[derive(Debug)]
pub struct Completion {
    /// How it ended.
    pub status: Status,
    /// Bytes of result in `output`.
    pub length: usize,
    /// The input buffer.
    pub input: DeviceBuf,
    /// The output buffer.
    pub output: DeviceBuf,
}

/// What a unit counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnitStats {
    /// Tasks taken into the ring.
    pub submitted: u64,
    /// Tasks done, by [`Status`] (in [`Status::ALL`]'s order).
    pub done: [u64; 4],
    /// Submissions refused, by [`Refused`] (in [`Refused::ALL`]'s order).
    pub refused: [u64; 4],
    /// Input bytes read and output bytes written by finished tasks.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Time spent running kernels (nanoseconds).
    pub busy_ns: u64,
    /// Reconfigurations.
    pub programs: u64,
}

struct Descriptor {
    entry: usize,
    /// The programming it was submitted under.
    generation: u64,
    input: DeviceBuf,
    len: usize,
    output: DeviceBuf,
}

#[derive(Default)]
struct Entry {
    done: AtomicBool,
    /// The completion, and a poller waiting for it.
    slot: Mutex<(Option<Completion>, Option<Thread>)>,
}

/// What submissions see: the kernel's kind and until when the unit is out of service.
struct Phase {
    kind: Option<KernelKind>,
    until: Instant,
    generation: u64,
}

struct Shared {
    id: u64,
    config: UnitConfig,
    ring: ArrayQueue<Descriptor>,
    entries: Box<[Entry]>,
    free: ArrayQueue<usize>,
    phase: Mutex<Phase>,
    /// Kernels programmed and not yet installed by the worker, with their generations.
    pending: Mutex<VecDeque<(u64, Option<Kernel>)>>,
    stop: AtomicBool,
    counters: Counters,
}

#[derive(Default)]
struct Counters {
    submitted: AtomicU64,
    done: [AtomicU64; 4],
    refused: [AtomicU64; 4],
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    busy_ns: AtomicU64,
    programs: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

static NEXT_UNIT: AtomicU64 = AtomicU64::new(1);

/// One compute unit and its thread.
pub struct ComputeUnit {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ComputeUnit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComputeUnit").field("id", &self.shared.id).field("kind", &self.kind()).finish()
    }
}

impl ComputeUnit {
    /// A unit with no kernel yet (its thread started, named `tern-cu-N`).
    pub fn new(config: UnitConfig) -> std::io::Result<ComputeUnit> {
        let n = config.ring_entries.max(1);
        let free = ArrayQueue::new(n);
        for i in 0..n {
            let _ = free.push(i);
        }
        let shared = Arc::new(Shared {
            id: NEXT_UNIT.fetch_add(1, Ordering::Relaxed),
            config: UnitConfig { ring_entries: n, ..config },
            ring: ArrayQueue::new(n),
            entries: (0..n).map(|_| Entry::default()).collect(),
            free,
            phase: Mutex::new(Phase { kind: None, until: Instant::now(), generation: 0 }),
            pending: Mutex::new(VecDeque::new()),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let s = shared.clone();
        let worker = std::thread::Builder::new().name(format!("tern-cu-{}", shared.id)).spawn(move || work(&s))?;
        Ok(ComputeUnit { shared, worker: Some(worker) })
    }

    /// Reconfigures the unit with `kernel` (`None`: no kernel, the unit unavailable). Tasks
    /// already submitted finish on the kernel they were submitted to; submissions are refused
    /// for the configured reconfiguration time.
    pub fn program(&self, kernel: Option<Kernel>) {
        let mut phase = lock(&self.shared.phase);
        phase.generation += 1;
        phase.kind = kernel.as_ref().map(Kernel::kind);
        phase.until = Instant::now() + self.shared.config.reconfigure;
        lock(&self.shared.pending).push_back((phase.generation, kernel));
        self.shared.counters.programs.fetch_add(1, Ordering::Relaxed);
    }

    /// What the unit computes now (`None`: no kernel, or being reconfigured).
    pub fn kind(&self) -> Option<KernelKind> {
        let phase = lock(&self.shared.phase);
        if Instant::now() < phase.until { None } else { phase.kind }
    }

    /// Submits a task: the kernel reads `len` bytes of `input` and writes its result into
    /// `output` (at most its capacity). Refused (the buffers handed back) when the rings are
    /// full, the unit is being reconfigured or has no kernel, or `len` is past `input`.
    // The refusal hands both buffers back by value (no allocation on the refusal path).
    #[allow(clippy::result_large_err)]
    pub fn submit_task(&self, input: DeviceBuf, len: usize, output: DeviceBuf) -> Result<TaskHandle, Rejected> {
        let c = &self.shared.counters;
        let refuse = |reason: Refused, input, output| {
            c.refused[reason as usize].fetch_add(1, Ordering::Relaxed);
            Rejected { reason, input, output }
        };
        if len > input.len() {
            return Err(refuse(Refused::BadLength, input, output));
        }
        // The generation is read and the task queued under one lock, the one `program` takes:
        // the ring then holds tasks in the order of their generations, as the worker, which
        // drops the kernels it has moved past, needs (read and queued apart, a task of an older
        // generation could land behind one of a newer and find its kernel gone: `BadInput`).
        let entry = {
            let phase = lock(&self.shared.phase);
            if Instant::now() < phase.until {
                return Err(refuse(Refused::Reconfiguring, input, output));
            }
            if phase.kind.is_none() {
                return Err(refuse(Refused::Unavailable, input, output));
            }
            let Some(entry) = self.shared.free.pop() else {
                return Err(refuse(Refused::RingFull, input, output));
            };
            let d = Descriptor { entry, generation: phase.generation, input, len, output };
            // The ring has as many places as there are entries, and each task holds one.
            if let Err(d) = self.shared.ring.push(d) {
                let _ = self.shared.free.push(d.entry);
                return Err(refuse(Refused::RingFull, d.input, d.output));
            }
            entry
        };
        c.submitted.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = &self.worker {
            w.thread().unpark();
        }
        Ok(TaskHandle { unit: self.shared.id, entry })
    }

    /// Waits for a task to finish (spinning a few times, then parked until the unit wakes it) and
    /// frees its notification entry. Panics if the handle is another unit's.
    pub fn poll(&self, task: TaskHandle) -> Completion {
        assert_eq!(task.unit, self.shared.id, "a task polled on another unit than the one that took it");
        let e = &self.shared.entries[task.entry];
        // A short spin for a task that is nearly done; a kernel's work takes microseconds, and
        // spinning through it would be host CPU spent waiting.
        let mut spins = 0;
        while !e.done.load(Ordering::Acquire) && spins < 32 {
            std::hint::spin_loop();
            spins += 1;
        }
        let completion = loop {
            let mut slot = lock(&e.slot);
            if e.done.load(Ordering::Acquire)
                && let Some(c) = slot.0.take()
            {
                break c;
            }
            slot.1 = Some(std::thread::current());
            drop(slot);
            std::thread::park();
        };
        e.done.store(false, Ordering::Relaxed);
        lock(&e.slot).1 = None;
        let _ = self.shared.free.push(task.entry);
        completion
    }

    /// What it counted.
    pub fn stats(&self) -> UnitStats {
        let c = &self.shared.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        UnitStats {
            submitted: get(&c.submitted),
            done: std::array::from_fn(|i| get(&c.done[i])),
            refused: std::array::from_fn(|i| get(&c.refused[i])),
            bytes_in: get(&c.bytes_in),
            bytes_out: get(&c.bytes_out),
            busy_ns: get(&c.busy_ns),
            programs: get(&c.programs),
        }
    }

    /// Its settings.
    pub fn config(&self) -> UnitConfig {
        self.shared.config
    }
}

impl Drop for ComputeUnit {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(w) = self.worker.take() {
            w.thread().unpark();
            let _ = w.join();
        }
    }
}

/// The compute units a hardware profile has (`rpc.compute_units`; 4 in `rpcnic-u280`), each
/// unprogrammed with `config`; one where the profile does not bound them (`cpu`).
pub fn units_for(profile: &tern_hw::Profile, config: UnitConfig) -> std::io::Result<Vec<ComputeUnit>> {
    let n = profile.capacity(tern_hw::resource::RPC_COMPUTE_UNITS).unwrap_or(1).max(1);
    (0..n).map(|_| ComputeUnit::new(config)).collect()
}

/// The unit's thread: takes descriptors in order, runs each on the kernel it was submitted to,
/// and fills its notification entry.
fn work(s: &Shared) {
    let mut kernel: Option<Kernel> = None;
    let mut generation = 0;
    loop {
        let Some(mut d) = s.ring.pop() else {
            if s.stop.load(Ordering::Acquire) {
                return;
            }
            std::thread::park();
            continue;
        };
        if d.generation != generation {
            let mut pending = lock(&s.pending);
            while let Some((g, k)) = pending.pop_front() {
                if g == d.generation {
                    kernel = k;
                    generation = g;
                    break;
                }
            }
        }
        let started = Instant::now();
        let (status, length) = match kernel.as_mut() {
            Some(k) if generation == d.generation => {
                let input = &d.input.as_slice()[..d.len];
                let status = d.output.run(k, input);
                (status, d.output.len())
            }
            // Submissions are refused without a kernel; a generation not found cannot happen
            // (each is queued before any task of it is submitted).
            _ => (Status::BadInput, 0),
        };
        let c = &s.counters;
        c.busy_ns.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        c.done[status as usize].fetch_add(1, Ordering::Relaxed);
        c.bytes_in.fetch_add(d.len as u64, Ordering::Relaxed);
        c.bytes_out.fetch_add(length as u64, Ordering::Relaxed);
        let e = &s.entries[d.entry];
        let waiter = {
            let mut slot = lock(&e.slot);
            slot.0 = Some(Completion { status, length, input: d.input, output: d.output });
            e.done.store(true, Ordering::Release);
            slot.1.take()
        };
        // Woken after the lock is let go, so the poller does not wake into a held lock.
        if let Some(t) = waiter {
            t.unpark();
        }
    }
}
