//! Whole L2 frames on a network interface through an `AF_XDP` socket in copy mode: frames that
//! never become socket buffers on the way in. Needs root (`CAP_NET_ADMIN`, `CAP_BPF`).
//!
//! Opening the port loads a six-instruction XDP program (built here, no compiler needed) that
//! redirects every frame of the interface's queue 0 to the port's socket through a one-entry
//! `XSKMAP` (a frame on another queue goes on to the kernel's stack), and attaches it to the
//! interface by a BPF link in driver mode, or in generic mode where the driver has no XDP.
//! Closing the port detaches it. The socket shares 16 MiB of frame memory (UMEM, 4,096 chunks of
//! 4,096 bytes) with the kernel through four rings of 2,048 entries: the kernel copies each
//! arriving frame into a chunk the port put on the *fill* ring and tells of it on the *receive*
//! ring; the port copies it into a pool buffer and puts the chunk back. Sending, the port copies
//! each frame into a free chunk, puts it on the *transmit* ring and kicks the kernel
//! (`sendto`), which sends it and hands the chunk back on the *completion* ring.
//!
//! With [`AfXdpConfig::busy_poll`] the socket prefers busy polling (`SO_PREFER_BUSY_POLL`,
//! `SO_BUSY_POLL` 20 µs, budget 64) and every `recv` makes the system call that polls, for a
//! caller that polls without sleeping (`tern switch serve --busy-poll`) — once the socket has a
//! receive context to poll (`SO_INCOMING_NAPI_ID`, read again every 4,096 `recv`s until it
//! does; until then the call would only cost the core); and the port moderates
//! the interface's interrupts by its load, as a NIC driver's adaptive coalescing does
//! ([`Moderation`]): above 50,000 frames a second (over 1 ms) it defers them
//! (`napi_defer_hard_irqs` 2, `gro_flush_timeout` 200 µs) and moves the interface's receive work
//! onto kernel threads (`threaded` 1) that it gives the polling thread's cores; once the rate
//! has stayed below 20,000 for 10 ms it stops deferring and the threads go. While deferring, a
//! `recv` that finds nothing yields the core to those threads. The interface's settings are
//! restored when the port closes. Why the threads: on a veth here (Linux 6.18) the socket never
//! got the receive context's id (`SO_INCOMING_NAPI_ID` 0), so busy polling has nothing to poll,
//! and a veth's receive work runs where it is scheduled — in the softirq of the core that sent
//! the frame, and once deferred, from a timer on that same core: the sender's core did the
//! port's receive work (on a NIC with per-queue ids busy polling would take it over instead).
//! Not deferred, a frame arriving alone is taken in the sender's softirq at once, which is what
//! low latency wants. docs/clip.md has the measurements.
//!
//! XDP sees the bytes as they are on the wire: a checksum the sender left to offload is not
//! completed (no virtio-net header as with `AF_PACKET`). Turn transmit checksum offload off on
//! the sending side of a veth (`ethtool -K DEV tx off`) so frames reach the port whole. A frame
//! longer than a chunk's room (4,096 less the kernel's 256 bytes of headroom) is dropped by the
//! kernel and counted in `rx_dropped`.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::afpacket::{ifindex, setsockopt, with_context};
use crate::{Batch, DEFAULT_HEADROOM, Pool, Port, PortStats};

/// Chunks of frame memory, and their size.
const CHUNKS: u32 = 4096;
const CHUNK_SIZE: u32 = 4096;
/// Entries of each ring (a power of two); half the chunks start on the fill ring, half are free
/// for sending.
const RING_SIZE: u32 = 2048;
/// How long opening waits for a queue, or an interface's XDP attachment, that another port has
/// just let go of.
const BIND_PATIENCE: Duration = Duration::from_secs(2);
/// Frames handled a call.
const MAX_BATCH: usize = crate::udp::MAX_BATCH;
/// Kicks of the transmit ring a `send` makes at most while the kernel leaves frames on it
/// (copy mode sends 32 a kick).
const MAX_KICKS: usize = 256;

/// How an [`AfXdpPort`] runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfXdpConfig {
    /// Prefer busy polling, and moderate the interface's interrupts and where its receive work
    /// runs by load (see the module's notes).
    pub busy_poll: bool,
}

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver (veth and most NICs).
    Driver,
    /// In the kernel's generic path, after a socket buffer is made (any interface).
    Generic,
}

/// One of the socket's four rings, mapped from the kernel: free-running producer and consumer
/// indices (u32, wrapping) and `size` entries of `entry` bytes (8: a chunk's address; 16: a
/// descriptor, address u64, length u32, options u32).
struct XskRing {
    map: *mut u8,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    entry: usize,
    size: u32,
    /// Whether dropping it unmaps `map` (a mapping of its own).
    mapped: bool,
}

// SAFETY: the ring's pointers are into a mapping it owns; it is used by one thread at a time
// (through `&mut AfXdpPort`).
unsafe impl Send for XskRing {}

impl XskRing {
    /// Maps the ring at page offset `pgoff` of socket `fd` (offsets from `XDP_MMAP_OFFSETS`).
    fn map(fd: &OwnedFd, off: &libc::xdp_ring_offset, entry: usize, pgoff: u64, what: &str) -> io::Result<XskRing> {
        let map_len = off.desc as usize + RING_SIZE as usize * entry;
        // SAFETY: a shared mapping of the socket's ring, of the size the kernel's offsets give;
        // the result is checked before use.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff as libc::off_t,
            )
        };
        if m == libc::MAP_FAILED {
            return Err(with_context(io::Error::last_os_error(), what));
        }
        // SAFETY: the offsets are within the mapping (the kernel's own layout).
        let mut ring = unsafe { XskRing::over(m.cast(), map_len, off, entry) };
        ring.mapped = true;
        Ok(ring)
    }

    /// A ring over `map` (`map_len` bytes) laid out as `off` says.
    ///
    /// # Safety
    /// `map` must be valid for `map_len` bytes, 4-aligned where the indices are, and
    /// `off.desc + RING_SIZE * entry <= map_len`.
    unsafe fn over(map: *mut u8, map_len: usize, off: &libc::xdp_ring_offset, entry: usize) -> XskRing {
        // SAFETY: the caller's promise.
        unsafe {
            XskRing {
                map,
                map_len,
                producer: map.add(off.producer as usize).cast(),
                consumer: map.add(off.consumer as usize).cast(),
                flags: map.add(off.flags as usize).cast(),
                desc: map.add(off.desc as usize),
                entry,
                size: RING_SIZE,
                mapped: false,
            }
        }
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: within the mapping, aligned (see `over`), shared with the kernel as atomics.
        unsafe { &*self.producer }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as `producer`.
        unsafe { &*self.consumer }
    }

    /// Whether the kernel asks to be woken (`XDP_RING_NEED_WAKEUP`).
    fn need_wakeup(&self) -> bool {
        // SAFETY: as `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    /// The entry at free-running index `i`.
    fn slot(&self, i: u32) -> *mut u8 {
        // SAFETY: (i & (size - 1)) < size entries within the mapping.
        unsafe { self.desc.add((i & (self.size - 1)) as usize * self.entry) }
    }

    /// The chunk address at `i` (fill and completion rings).
    fn addr(&self, i: u32) -> u64 {
        // SAFETY: an 8-byte entry within the mapping (`slot`), 8-aligned by the kernel's layout.
        unsafe { self.slot(i).cast::<u64>().read_volatile() }
    }

    fn set_addr(&self, i: u32, addr: u64) {
        // SAFETY: as `addr`; the entry is ours until the producer index passes it.
        unsafe { self.slot(i).cast::<u64>().write_volatile(addr) }
    }

    /// The descriptor at `i` (receive and transmit rings): chunk address and length.
    fn desc(&self, i: u32) -> (u64, u32) {
        let p = self.slot(i);
        // SAFETY: a 16-byte entry within the mapping, 8-aligned.
        unsafe { (p.cast::<u64>().read_volatile(), p.add(8).cast::<u32>().read_volatile()) }
    }

    fn set_desc(&self, i: u32, addr: u64, len: u32) {
        let p = self.slot(i);
        // SAFETY: as `desc`; the entry is ours until the producer index passes it.
        unsafe {
            p.cast::<u64>().write_volatile(addr);
            p.add(8).cast::<u32>().write_volatile(len);
            p.add(12).cast::<u32>().write_volatile(0);
        }
    }
}

impl Drop for XskRing {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: the mapping made in `map`, unmapped once.
            unsafe { libc::munmap(self.map.cast(), self.map_len) };
        }
    }
}

/// The socket's frame memory.
struct Umem {
    map: *mut u8,
    len: usize,
}

// SAFETY: as `XskRing`.
unsafe impl Send for Umem {}

impl Umem {
    fn new() -> io::Result<Umem> {
        let len = (CHUNKS * CHUNK_SIZE) as usize;
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let m = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if m == libc::MAP_FAILED {
            return Err(with_context(io::Error::last_os_error(), "AF_XDP frame memory"));
        }
        Ok(Umem { map: m.cast(), len })
    }

    /// `len` bytes at `addr`, if within the memory.
    fn bytes(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let a = usize::try_from(addr).ok()?;
        if a.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: within the mapping; the kernel does not write a chunk while the receive ring
        // hands it to us.
        Some(unsafe { std::slice::from_raw_parts(self.map.add(a), len) })
    }

    /// A chunk's room to write (`addr` a chunk's start).
    fn chunk_mut(&mut self, addr: u64) -> Option<&mut [u8]> {
        let a = usize::try_from(addr).ok()?;
        if a.checked_add(CHUNK_SIZE as usize)? > self.len {
            return None;
        }
        // SAFETY: within the mapping; a free chunk is ours alone until put on the transmit ring.
        Some(unsafe { std::slice::from_raw_parts_mut(self.map.add(a), CHUNK_SIZE as usize) })
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map.cast(), self.len) };
    }
}

/// The `bpf(2)` system call with a 128-byte attribute block: what it returned.
fn bpf_call(cmd: libc::c_int, attr: &mut [u8; 128]) -> io::Result<i64> {
    // SAFETY: `attr` is a live 128-byte block the kernel reads (and may write) within its size;
    // the pointers in it point at live memory of the sizes given.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as libc::c_uint) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

/// A `bpf(2)` command that makes a descriptor.
fn bpf(cmd: libc::c_int, attr: &mut [u8; 128]) -> io::Result<OwnedFd> {
    let r = bpf_call(cmd, attr)?;
    // SAFETY: a fresh descriptor from the kernel that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(r as libc::c_int) })
}

fn put32(a: &mut [u8; 128], at: usize, v: u32) {
    a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(a: &mut [u8; 128], at: usize, v: u64) {
    a[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// One BPF instruction: opcode, registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = dst | (src << 4);
    b[2..4].copy_from_slice(&off.to_ne_bytes());
    b[4..8].copy_from_slice(&imm.to_ne_bytes());
    b
}

/// The XDP program: `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)`.
pub fn redirect_program(map_fd: i32) -> Vec<u8> {
    const LDX_W: u8 = 0x61;
    const LD_IMM64: u8 = 0x18;
    const MOV64_K: u8 = 0xb7;
    const CALL: u8 = 0x85;
    const EXIT: u8 = 0x95;
    const PSEUDO_MAP_FD: u8 = 1;
    const REDIRECT_MAP: i32 = 51;
    const XDP_PASS: i32 = 2;
    let mut p = Vec::with_capacity(7 * 8);
    p.extend(insn(LDX_W, 2, 1, 16, 0)); // r2 = ctx->rx_queue_index
    p.extend(insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, map_fd)); // r1 = the map
    p.extend(insn(0, 0, 0, 0, 0));
    p.extend(insn(MOV64_K, 3, 0, 0, XDP_PASS)); // r3 = what to do where the map has no socket
    p.extend(insn(CALL, 0, 0, 0, REDIRECT_MAP));
    p.extend(insn(EXIT, 0, 0, 0, 0));
    p
}

/// The map, program and link that send `ifindex`'s frames to a socket put in the map at key 0.
struct Redirect {
    map: OwnedFd,
    _prog: OwnedFd,
    _link: OwnedFd,
    mode: XdpMode,
}

const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 2;
const XDP_FLAGS_DRV_MODE: u32 = 4;
/// Entries of the map: queues 0 to 63 (only 0 is bound).
const MAP_ENTRIES: u32 = 64;

impl Redirect {
    fn attach(ifname: &str, index: u32) -> io::Result<Redirect> {
        let mut a = [0u8; 128];
        put32(&mut a, 0, BPF_MAP_TYPE_XSKMAP);
        put32(&mut a, 4, 4);
        put32(&mut a, 8, 4);
        put32(&mut a, 12, MAP_ENTRIES);
        let map = bpf(BPF_MAP_CREATE, &mut a).map_err(|e| with_context(e, "XSKMAP (bpf map create)"))?;
        let prog = redirect_program(map.as_raw_fd());
        let license = c"GPL";
        let mut log = vec![0u8; 4096];
        let mut a = [0u8; 128];
        put32(&mut a, 0, BPF_PROG_TYPE_XDP);
        put32(&mut a, 4, (prog.len() / 8) as u32);
        put64(&mut a, 8, prog.as_ptr() as u64);
        put64(&mut a, 16, license.as_ptr() as u64);
        put32(&mut a, 24, 1);
        put32(&mut a, 28, log.len() as u32);
        put64(&mut a, 32, log.as_mut_ptr() as u64);
        put32(&mut a, 68, BPF_XDP);
        let prog = bpf(BPF_PROG_LOAD, &mut a).map_err(|e| {
            let end = log.iter().position(|&b| b == 0).unwrap_or(0);
            let said = String::from_utf8_lossy(&log[..end]);
            with_context(e, &format!("XDP program (bpf prog load; verifier: {})", said.trim()))
        })?;
        let link = |flags: u32| {
            let mut a = [0u8; 128];
            put32(&mut a, 0, prog.as_raw_fd() as u32);
            put32(&mut a, 4, index);
            put32(&mut a, 8, BPF_XDP);
            put32(&mut a, 12, flags);
            bpf(BPF_LINK_CREATE, &mut a)
        };
        // A port just closed on this interface detaches its program when the last copy of its
        // link's descriptor goes — a process forked meanwhile holds one until it execs: until
        // then the interface is taken (EBUSY: a link is attached; EEXIST: a program). Tried
        // again for up to 2 s.
        let deadline = Instant::now() + BIND_PATIENCE;
        let taken = |r: &io::Result<OwnedFd>| {
            r.as_ref().is_err_and(|e| matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EEXIST)))
        };
        let mut first = link(XDP_FLAGS_DRV_MODE);
        while taken(&first) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
            first = link(XDP_FLAGS_DRV_MODE);
        }
        let (link, mode) = match first {
            Ok(l) => (l, XdpMode::Driver),
            Err(_) => (
                link(XDP_FLAGS_SKB_MODE).map_err(|e| {
                    with_context(e, &format!("attaching the XDP program to {ifname} (bpf link create)"))
                })?,
                XdpMode::Generic,
            ),
        };
        Ok(Redirect { map, _prog: prog, _link: link, mode })
    }

    /// Sends queue `queue`'s frames to socket `fd`.
    fn insert(&self, queue: u32, fd: &OwnedFd) -> io::Result<()> {
        let value = fd.as_raw_fd() as u32;
        let mut a = [0u8; 128];
        put32(&mut a, 0, self.map.as_raw_fd() as u32);
        put64(&mut a, 8, &queue as *const u32 as u64);
        put64(&mut a, 16, &value as *const u32 as u64);
        bpf_call(BPF_MAP_UPDATE_ELEM, &mut a).map(drop).map_err(|e| with_context(e, "XSKMAP update"))
    }
}

/// Counters of an AF_XDP port beyond [`PortStats`] (the kernel's `XDP_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AfXdpStats {
    /// Frames the kernel dropped for this socket (too long for a chunk, and the rest it counts so).
    pub kernel_dropped: u64,
    /// Frames dropped as the receive ring was full.
    pub rx_ring_full: u64,
    /// Times a frame found no chunk on the fill ring.
    pub fill_ring_empty: u64,
    /// Frames dropped here as longer than a pool buffer.
    pub truncated: u64,
}

/// `recv`s between readings of a busy-polled socket's receive context id while it has none.
const NAPI_RECHECK: u32 = 4096;

/// Whether a `recv` makes the system call that lets the kernel work: when the kernel asked for
/// it (the fill ring's wakeup flag), or to busy poll — only where the socket has a receive
/// context to poll (on a veth here it never gets one, and the call would only cost the core).
fn kicks(busy_poll: bool, napi_id: u32, need_wakeup: bool) -> bool {
    need_wakeup || (busy_poll && napi_id != 0)
}

/// The kernel threads that run `ifname`'s receive contexts in threaded mode, by their names
/// (`napi/IFNAME-ID`, the context's id in digits).
pub fn napi_threads(ifname: &str) -> Vec<libc::pid_t> {
    let prefix = format!("napi/{ifname}-");
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| {
            let pid: libc::pid_t = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let id = comm.trim_end().strip_prefix(&prefix)?;
            (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())).then_some(pid)
        })
        .collect()
}

/// Adaptive interrupt moderation, sans I/O: from the frames received and the time, whether the
/// interface should defer its interrupts — on above [`Moderation::HIGH`] frames a second, off
/// below [`Moderation::LOW`] (the gap keeps a rate near one threshold from flapping), judged
/// over windows of at least [`Moderation::WINDOW`].
#[derive(Debug, Clone)]
pub struct Moderation {
    deferring: bool,
    window_start: Option<Instant>,
    frames: u64,
    /// Deferring: since when every window has been below the low rate.
    low_since: Option<Instant>,
    /// Changes made so far.
    pub changes: u64,
}

impl Moderation {
    /// Frames a second above which interrupts are deferred.
    pub const HIGH: f64 = 50_000.0;
    /// Frames a second below which they are not.
    pub const LOW: f64 = 20_000.0;
    /// The shortest window a rate is judged over.
    pub const WINDOW: Duration = Duration::from_millis(1);
    /// How long the rate must stay below [`Moderation::LOW`] before deferring stops (a window
    /// with few frames in a flood, while the receive thread waited for the core, is no end of
    /// the flood).
    pub const OFF_AFTER: Duration = Duration::from_millis(10);

    /// Starting with interrupts not deferred.
    pub fn new() -> Moderation {
        Moderation { deferring: false, window_start: None, frames: 0, low_since: None, changes: 0 }
    }

    /// Whether interrupts are deferred now.
    pub fn deferring(&self) -> bool {
        self.deferring
    }

    /// `frames` more received by `now`: `Some(defer)` when the interface's setting should
    /// change to `defer`.
    pub fn observe(&mut self, now: Instant, frames: u64) -> Option<bool> {
        self.frames += frames;
        let start = *self.window_start.get_or_insert(now);
        let span = now.saturating_duration_since(start);
        if span < Self::WINDOW {
            return None;
        }
        let rate = self.frames as f64 / span.as_secs_f64();
        self.window_start = Some(now);
        self.frames = 0;
        let want = if self.deferring {
            if rate >= Self::LOW {
                self.low_since = None;
                true
            } else {
                let low = *self.low_since.get_or_insert(start);
                now.saturating_duration_since(low) < Self::OFF_AFTER
            }
        } else {
            rate > Self::HIGH
        };
        if !want {
            self.low_since = None;
        }
        (want != self.deferring).then(|| {
            self.deferring = want;
            self.changes += 1;
            want
        })
    }
}

impl Default for Moderation {
    fn default() -> Moderation {
        Moderation::new()
    }
}

/// A raw L2 port on one interface's queue 0 through AF_XDP.
pub struct AfXdpPort {
    // Dropped in this order: the socket and its rings, then the frame memory, then the program.
    rx: XskRing,
    tx: XskRing,
    fill: XskRing,
    completion: XskRing,
    fd: OwnedFd,
    umem: Umem,
    redirect: Redirect,
    /// Local copies of the indices this side moves.
    rx_consumer: u32,
    fill_producer: u32,
    tx_producer: u32,
    completion_consumer: u32,
    /// Chunks free for sending.
    tx_free: Vec<u64>,
    ifname: String,
    busy_poll: bool,
    /// Busy polling: the socket's receive context id as last read (0: none, so a system call
    /// to poll would have nothing to poll), and `recv`s until it is read again while 0.
    napi_id: u32,
    napi_recheck: u32,
    /// With busy polling, the interface's settings (`napi_defer_hard_irqs`,
    /// `gro_flush_timeout` and, where the kernel has it, `threaded`, in that order) with what
    /// they were before: what the moderation writes, and what closing puts back (empty without
    /// busy polling).
    restore: Vec<(std::path::PathBuf, String)>,
    /// The interrupt moderation (busy polling only).
    moderation: Moderation,
    pool: Pool,
    stats: PortStats,
    truncated: u64,
}

impl std::fmt::Debug for AfXdpPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfXdpPort")
            .field("ifname", &self.ifname)
            .field("mode", &self.redirect.mode)
            .field("busy_poll", &self.busy_poll)
            .field("stats", &self.stats)
            .finish()
    }
}

impl AfXdpPort {
    /// Opens an AF_XDP socket on `ifname`'s queue 0 with the XDP program that feeds it. Fails
    /// with the kernel's reason, naming the step (no such interface; permission denied without
    /// root; no AF_XDP in the kernel).
    pub fn open(ifname: &str, pool: &Pool, cfg: AfXdpConfig) -> io::Result<AfXdpPort> {
        let index = ifindex(ifname)?;
        // SAFETY: plain socket(2); the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(with_context(io::Error::last_os_error(), &format!("AF_XDP socket for {ifname}")));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem = Umem::new()?;
        // SAFETY: all-zero bytes are a valid xdp_umem_reg; the fields are then set.
        let mut reg: libc::xdp_umem_reg = unsafe { std::mem::zeroed() };
        reg.addr = umem.map as u64;
        reg.len = umem.len as u64;
        reg.chunk_size = CHUNK_SIZE;
        setsockopt(&fd, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg, "AF_XDP frame memory (XDP_UMEM_REG)")?;
        for (opt, what) in [
            (libc::XDP_UMEM_FILL_RING, "fill ring"),
            (libc::XDP_UMEM_COMPLETION_RING, "completion ring"),
            (libc::XDP_RX_RING, "receive ring"),
            (libc::XDP_TX_RING, "transmit ring"),
        ] {
            setsockopt(&fd, libc::SOL_XDP, opt, &RING_SIZE, what)?;
        }
        // SAFETY: all-zero bytes are a valid xdp_mmap_offsets.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
        // SAFETY: `off` and `len` are live and sized for the option.
        let r = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return Err(with_context(io::Error::last_os_error(), "AF_XDP ring offsets"));
        }
        let rx = XskRing::map(&fd, &off.rx, 16, libc::XDP_PGOFF_RX_RING as u64, "receive ring")?;
        let tx = XskRing::map(&fd, &off.tx, 16, libc::XDP_PGOFF_TX_RING as u64, "transmit ring")?;
        let fill = XskRing::map(&fd, &off.fr, 8, libc::XDP_UMEM_PGOFF_FILL_RING, "fill ring")?;
        let completion = XskRing::map(&fd, &off.cr, 8, libc::XDP_UMEM_PGOFF_COMPLETION_RING, "completion ring")?;
        // The first half of the chunks wait on the fill ring; the second half are free to send.
        let half = CHUNKS / 2;
        for i in 0..half {
            fill.set_addr(i, u64::from(i * CHUNK_SIZE));
        }
        fill.producer().store(half, Ordering::Release);
        let tx_free = (half..CHUNKS).map(|i| u64::from(i * CHUNK_SIZE)).collect();
        let mut port = AfXdpPort {
            rx,
            tx,
            fill,
            completion,
            fd,
            umem,
            // Attached last but one: the socket must be bound before it goes in the map.
            redirect: Redirect::attach(ifname, index)?,
            rx_consumer: 0,
            fill_producer: half,
            tx_producer: 0,
            completion_consumer: 0,
            tx_free,
            ifname: ifname.to_string(),
            busy_poll: cfg.busy_poll,
            napi_id: 0,
            napi_recheck: 0,
            restore: Vec::new(),
            moderation: Moderation::new(),
            pool: pool.clone(),
            stats: PortStats::default(),
            truncated: 0,
        };
        // SAFETY: all-zero bytes are a valid sockaddr_xdp; the fields are then set.
        let mut sa: libc::sockaddr_xdp = unsafe { std::mem::zeroed() };
        sa.sxdp_family = libc::AF_XDP as u16;
        sa.sxdp_flags = libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP;
        sa.sxdp_ifindex = index;
        sa.sxdp_queue_id = 0;
        // A socket on the queue that was just closed (a switch restarted) lets go of it in the
        // kernel's own time, after its frame memory is released (deferred): until then the
        // queue is busy. Tried again for up to 2 s.
        let deadline = Instant::now() + BIND_PATIENCE;
        loop {
            // SAFETY: `sa` is a live sockaddr_xdp of the stated size.
            let r = unsafe {
                libc::bind(
                    port.fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_xdp).cast(),
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            };
            if r == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) || Instant::now() >= deadline {
                return Err(with_context(e, &format!("binding the AF_XDP socket to {ifname} queue 0")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        port.redirect.insert(0, &port.fd)?;
        if cfg.busy_poll {
            let one: libc::c_int = 1;
            let usecs: libc::c_int = 20;
            let budget: libc::c_int = 64;
            setsockopt(&port.fd, libc::SOL_SOCKET, libc::SO_PREFER_BUSY_POLL, &one, "SO_PREFER_BUSY_POLL")?;
            setsockopt(&port.fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL, &usecs, "SO_BUSY_POLL")?;
            setsockopt(&port.fd, libc::SOL_SOCKET, libc::SO_BUSY_POLL_BUDGET, &budget, "SO_BUSY_POLL_BUDGET")?;
            for name in ["napi_defer_hard_irqs", "gro_flush_timeout", "threaded"] {
                let path = std::path::PathBuf::from(format!("/sys/class/net/{ifname}/{name}"));
                match std::fs::read_to_string(&path) {
                    Ok(was) => port.restore.push((path, was.trim().to_string())),
                    // A kernel without threaded receive contexts: deferral alone.
                    Err(_) if name == "threaded" => {}
                    Err(e) => return Err(with_context(e, &path.display().to_string())),
                }
            }
            port.set_deferral(false)?;
        }
        Ok(port)
    }

    /// The interface name.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interrupt moderation (busy polling only): whether deferring now, and its changes.
    pub fn moderation(&self) -> &Moderation {
        &self.moderation
    }

    /// Whether the moderation moves the interface's receive work onto threads (busy polling,
    /// on a kernel with `threaded`: the third setting saved).
    fn threads_receive(&self) -> bool {
        self.restore.len() == 3
    }

    /// Writes the interface's deferral settings: on, 2 deferrals, 200 µs and its receive work
    /// on kernel threads that share the calling thread's cores; off, none of them.
    fn set_deferral(&self, on: bool) -> io::Result<()> {
        let values = if on { ["2", "200000", "1"] } else { ["0", "0", "0"] };
        for ((path, _), value) in self.restore.iter().zip(values) {
            std::fs::write(path, value).map_err(|e| with_context(e, &path.display().to_string()))?;
        }
        if on && self.threads_receive() {
            // The kernel made the threads just now, free to run on any core.
            for pid in napi_threads(&self.ifname) {
                if !crate::share_affinity(pid) {
                    return Err(with_context(
                        io::Error::last_os_error(),
                        &format!("moving {}'s receive thread {pid} to the port's cores", self.ifname),
                    ));
                }
            }
        }
        Ok(())
    }

    /// How the XDP program is attached.
    pub fn xdp_mode(&self) -> XdpMode {
        self.redirect.mode
    }

    /// Counters beyond [`PortStats`].
    pub fn extra_stats(&self) -> AfXdpStats {
        let k = self.kernel_stats();
        AfXdpStats { kernel_dropped: k[0], rx_ring_full: k[3], fill_ring_empty: k[4], truncated: self.truncated }
    }

    /// The kernel's `struct xdp_statistics` (six counters: rx_dropped, rx_invalid_descs,
    /// tx_invalid_descs, rx_ring_full, rx_fill_ring_empty_descs, tx_ring_empty_descs).
    fn kernel_stats(&self) -> [u64; 6] {
        const XDP_STATISTICS: libc::c_int = 7;
        let mut st = [0u64; 6];
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: `st` and `len` are live and sized; the kernel writes at most `len` bytes.
        let r = unsafe {
            libc::getsockopt(self.fd.as_raw_fd(), libc::SOL_XDP, XDP_STATISTICS, st.as_mut_ptr().cast(), &mut len)
        };
        if r == 0 { st } else { [0; 6] }
    }

    /// Takes back the chunks the kernel has sent.
    fn reclaim(&mut self) {
        let done = self.completion.producer().load(Ordering::Acquire);
        while self.completion_consumer != done {
            self.tx_free.push(self.completion.addr(self.completion_consumer));
            self.completion_consumer = self.completion_consumer.wrapping_add(1);
        }
        self.completion.consumer().store(self.completion_consumer, Ordering::Release);
    }

    /// The socket's receive context id (`SO_INCOMING_NAPI_ID`; 0 when none, or unreadable).
    fn incoming_napi_id(&self) -> u32 {
        let mut id: u32 = 0;
        let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
        // SAFETY: the kernel writes at most `len` (4) bytes into `id`, a u32 we own, and the
        // length into `len`.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_INCOMING_NAPI_ID,
                (&mut id as *mut u32).cast(),
                &mut len,
            )
        };
        if r == 0 { id } else { 0 }
    }

    /// A system call that lets the kernel do the socket's work (busy polling, or a wakeup it
    /// asked for).
    fn kick_rx(&self) {
        // SAFETY: a zero-length receive with no buffer or address: the kernel writes nothing.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }
}

impl Port for AfXdpPort {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let want = batch.spare().min(MAX_BATCH) as u32;
        if want == 0 {
            return Ok(0);
        }
        if self.busy_poll && self.napi_id == 0 {
            if self.napi_recheck == 0 {
                self.napi_id = self.incoming_napi_id();
                self.napi_recheck = NAPI_RECHECK;
            } else {
                self.napi_recheck -= 1;
            }
        }
        if kicks(self.busy_poll, self.napi_id, self.fill.need_wakeup()) {
            self.kick_rx();
        }
        let ready = self.rx.producer().load(Ordering::Acquire).wrapping_sub(self.rx_consumer);
        let n = ready.min(want);
        let mut delivered = 0;
        for k in 0..n {
            let i = self.rx_consumer.wrapping_add(k);
            let (addr, len) = self.rx.desc(i);
            let mut pkt = self.pool.packet();
            pkt.reserve_headroom(DEFAULT_HEADROOM);
            let ok = match self.umem.bytes(addr, len as usize) {
                Some(frame) => pkt.extend_from_slice(frame).is_ok(),
                None => false,
            };
            // The chunk goes back to the fill ring whatever became of the frame (its start:
            // the kernel put the frame after its headroom).
            self.fill.set_addr(self.fill_producer, addr - addr % u64::from(CHUNK_SIZE));
            self.fill_producer = self.fill_producer.wrapping_add(1);
            if ok {
                pkt.set_peer(crate::UNSPECIFIED);
                self.stats.rx_bytes += pkt.len() as u64;
                batch.push(pkt);
                delivered += 1;
            } else {
                self.truncated += 1;
                self.stats.rx_dropped += 1;
                self.pool.put(pkt);
            }
        }
        if n > 0 {
            self.rx_consumer = self.rx_consumer.wrapping_add(n);
            self.rx.consumer().store(self.rx_consumer, Ordering::Release);
            self.fill.producer().store(self.fill_producer, Ordering::Release);
        }
        self.stats.received(delivered);
        if !self.restore.is_empty()
            && let Some(on) = self.moderation.observe(now, u64::from(n))
        {
            self.set_deferral(on)?;
        }
        if n == 0 && self.threads_receive() && self.moderation.deferring() {
            // The receive thread shares this core: let it run rather than spin past it.
            std::thread::yield_now();
        }
        Ok(delivered)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.reclaim();
        let mut queued = 0u32;
        for p in batch.iter() {
            let data = p.data();
            let Some(addr) = self.tx_free.pop() else {
                self.stats.tx_dropped += 1;
                continue;
            };
            match self.umem.chunk_mut(addr) {
                Some(chunk) if data.len() <= chunk.len() => {
                    chunk[..data.len()].copy_from_slice(data);
                    self.tx.set_desc(self.tx_producer.wrapping_add(queued), addr, data.len() as u32);
                    queued += 1;
                    self.stats.tx_bytes += data.len() as u64;
                }
                _ => {
                    self.tx_free.push(addr);
                    self.stats.tx_dropped += 1;
                }
            }
        }
        batch.recycle(&self.pool);
        if queued > 0 {
            self.tx_producer = self.tx_producer.wrapping_add(queued);
            self.tx.producer().store(self.tx_producer, Ordering::Release);
        }
        // Copy mode sends in the kick's system call, 32 frames a call.
        for _ in 0..MAX_KICKS {
            if self.tx.consumer().load(Ordering::Acquire) == self.tx_producer {
                break;
            }
            // SAFETY: a zero-length send with no buffer or address: the kernel reads nothing.
            let r = unsafe {
                libc::sendto(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0)
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) | Some(libc::EINTR) => continue,
                    _ => return Err(with_context(e, &format!("sending on {}", self.ifname))),
                }
            }
        }
        self.stats.sent(queued as usize);
        Ok(queued as usize)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        crate::udp::poll_fd(self.fd.as_raw_fd(), libc::POLLIN, timeout)
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(self.fd.as_raw_fd())
    }

    /// L2 ports have no socket address; this is `0.0.0.0:0`.
    fn local_addr(&self) -> SocketAddr {
        crate::UNSPECIFIED
    }

    /// Counters; `rx_dropped` includes the frames the kernel dropped for this socket.
    fn stats(&self) -> PortStats {
        let mut st = self.stats;
        let k = self.kernel_stats();
        st.rx_dropped += k[0] + k[3];
        st
    }
}

impl Drop for AfXdpPort {
    fn drop(&mut self) {
        for (path, was) in &self.restore {
            let _ = std::fs::write(path, was);
        }
    }
}

/// Turns transmit checksum offload of `ifname` (in the calling thread's network namespace) on
/// or off, as `ethtool -K IFNAME tx on|off` does: off, the kernel completes the checksums of
/// what it sends there itself, so that an AF_XDP port on the other end of a veth takes frames
/// whole.
pub fn set_tx_checksum(ifname: &str, on: bool) -> io::Result<()> {
    const ETHTOOL_STXCSUM: u32 = 0x17;
    ethtool_set(ifname, ETHTOOL_STXCSUM, u32::from(on))
        .map_err(|e| with_context(e, &format!("transmit checksum offload of {ifname}")))
}

/// `SIOCETHTOOL` with a `struct ethtool_value` setting command `cmd` to `data`.
fn ethtool_set(ifname: &str, cmd: u32, data: u32) -> io::Result<()> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfreqData {
        name: [u8; libc::IFNAMSIZ],
        data: *mut EthtoolValue,
        _rest: [u8; 16],
    }
    if ifname.is_empty() || ifname.len() >= libc::IFNAMSIZ || ifname.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("interface name {ifname:?}")));
    }
    let mut value = EthtoolValue { cmd, data };
    let mut req = IfreqData { name: [0; libc::IFNAMSIZ], data: &mut value, _rest: [0; 16] };
    req.name[..ifname.len()].copy_from_slice(ifname.as_bytes());
    // SAFETY: plain socket(2); the result is checked before use.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: `req` is a live ifreq-sized block whose data pointer points at a live
    // ethtool_value; the kernel reads the name and reads and writes the value.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), SIOCETHTOOL, &mut req as *mut IfreqData) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn moderation_defers_above_the_high_rate_and_stops_below_the_low_one() {
        let t0 = Instant::now();
        let ms = |k: u64| t0 + Duration::from_millis(k);
        let mut m = Moderation::new();
        assert_eq!(m.observe(t0, 0), None);
        // 30 frames in 1 ms: 30,000 a second, between the thresholds: no change from off.
        assert_eq!(m.observe(ms(1), 30), None);
        // 60 in the next: 60,000 a second: defer.
        assert_eq!(m.observe(ms(2), 60), Some(true));
        assert!(m.deferring());
        // 30 a millisecond again: above the low threshold, it stays deferring.
        assert_eq!(m.observe(ms(3), 30), None);
        // Within a window nothing is judged, however many arrive; they count in the next
        // judgement (1,000 in a millisecond: still deferring).
        assert_eq!(m.observe(ms(3) + Duration::from_micros(500), 1000), None);
        assert_eq!(m.observe(ms(4), 0), None);
        assert!(m.deferring());
        // 10 in a millisecond: 10,000 a second, below the low threshold, but for less than
        // OFF_AFTER: it stays deferring; one busy window in between starts the count again.
        assert_eq!(m.observe(ms(5), 10), None);
        assert_eq!(m.observe(ms(10), 0), None);
        assert_eq!(m.observe(ms(11), 60), None);
        assert_eq!(m.observe(ms(20), 0), None);
        assert!(m.deferring());
        // Below it from 11 ms on: at 21 ms, OFF_AFTER, stop.
        assert_eq!(m.observe(ms(21), 10), Some(false));
        assert!(!m.deferring());
        assert_eq!(m.changes, 2);
        // Quiet for a second: off stays off.
        assert_eq!(m.observe(ms(1005), 0), None);
    }

    #[test]
    fn a_recv_polls_only_what_has_a_receive_context() {
        assert!(kicks(true, 7, false));
        assert!(!kicks(true, 0, false), "nothing to poll");
        assert!(!kicks(false, 7, false), "not busy polling");
        assert!(kicks(false, 0, true) && kicks(true, 0, true), "the kernel asked");
    }

    #[test]
    fn the_program_is_six_instructions_with_the_map_in_the_wide_load() {
        let p = redirect_program(7);
        assert_eq!(p.len(), 6 * 8);
        // The wide load: opcode 0x18, r1, source "map fd", the descriptor as immediate.
        assert_eq!(&p[8..16], &[0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(&p[40..48], &[0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    /// A ring over heap memory, as the kernel lays one out: indices, flags, then entries.
    fn heap_ring(entry: usize) -> (Vec<u64>, XskRing) {
        let off = libc::xdp_ring_offset { producer: 0, consumer: 64, flags: 128, desc: 192 };
        let bytes = 192 + RING_SIZE as usize * entry;
        let mut mem = vec![0u64; bytes / 8];
        // SAFETY: `mem` holds `bytes` bytes, 8-aligned, and outlives the ring in each test (the
        // ring does not unmap memory it was put over).
        let ring = unsafe { XskRing::over(mem.as_mut_ptr().cast(), bytes, &off, entry) };
        (mem, ring)
    }

    #[test]
    fn ring_indices_wrap_as_a_queue_does() {
        let (_mem, ring) = heap_ring(16);
        let mut model = VecDeque::new();
        // Free-running indices that pass u32::MAX.
        let start = u32::MAX - 700;
        ring.producer().store(start, Ordering::Relaxed);
        ring.consumer().store(start, Ordering::Relaxed);
        let (mut prod, mut cons) = (start, start);
        let mut next = 0u64;
        for round in 0..200u32 {
            let put = (round * 7919) % 97;
            for _ in 0..put {
                if prod.wrapping_sub(cons) == RING_SIZE {
                    break;
                }
                ring.set_desc(prod, next * 4096, (next % 1500) as u32);
                model.push_back((next * 4096, (next % 1500) as u32));
                next += 1;
                prod = prod.wrapping_add(1);
            }
            ring.producer().store(prod, Ordering::Release);
            let take = (round * 104_729) % 89;
            for _ in 0..take {
                if cons == ring.producer().load(Ordering::Acquire) {
                    break;
                }
                assert_eq!(Some(ring.desc(cons)), model.pop_front());
                cons = cons.wrapping_add(1);
            }
            ring.consumer().store(cons, Ordering::Release);
            assert_eq!(prod.wrapping_sub(cons) as usize, model.len());
        }
        assert!(prod < start, "the indices wrapped");
    }

    #[test]
    fn address_rings_keep_what_was_put() {
        let (_mem, ring) = heap_ring(8);
        for i in 0..RING_SIZE * 3 {
            ring.set_addr(i, u64::from(i) * 4096);
            assert_eq!(ring.addr(i), u64::from(i) * 4096);
        }
    }

    #[test]
    fn frame_memory_refuses_addresses_outside_it() {
        let mut u = Umem::new().unwrap();
        assert!(u.bytes(0, 64).is_some());
        assert!(u.bytes(u64::from(CHUNKS * CHUNK_SIZE) - 64, 64).is_some());
        assert!(u.bytes(u64::from(CHUNKS * CHUNK_SIZE) - 63, 64).is_none());
        assert!(u.bytes(u64::MAX, 1).is_none());
        assert!(u.chunk_mut(u64::from((CHUNKS - 1) * CHUNK_SIZE)).is_some());
        assert!(u.chunk_mut(u64::from(CHUNKS * CHUNK_SIZE)).is_none());
    }
}
