//! Tern I/O: packet buffers from a pool, fixed-capacity batches, and ports.
//!
//! A [`Port`] receives and transmits [`Batch`]es of [`Packet`]s. Backends:
//! - [`mem`]: in-process rings, for deterministic tests and engine benchmarks;
//! - [`udp`]: kernel UDP sockets with `recvmmsg`/`sendmmsg` batching and `SO_REUSEPORT`;
//! - [`ring`]: rings with a doorbell between cores, and [`ring::Split`] (receive here, send there);
//! - [`uds`]: Unix datagram links between threads (an IPC baseline);
//! - [`afpacket`]: whole L2 frames on a veth or NIC through a raw socket (root);
//! - [`cbpf`]: classic BPF programs that steer a socket group, and their interpreter;
//! - [`pcap`]: capture files as input ([`pcap::PcapIn`]) and output ([`pcap::PcapOut`]);
//! - [`http`]: the HTTP/1.1 server of the commands' metrics and control endpoints.
//!
//! Wrappers stack on any port (as smoltcp's devices do): [`fault::FaultInjector`] (seeded loss,
//! duplication, reordering, delay, corruption; this kernel has no netem) and
//! [`pcap::Tracer`] (records what a UDP port passes into a pcap file).
//!
//! Buffers come from a [`Pool`] shared by the ports and the engine and go back to it; after
//! warm-up nothing on the data path allocates.
//!
//! ```
//! use std::time::Instant;
//! use tern_io::{Batch, Pool, Port, mem};
//! let pool = Pool::new(64, 2048);
//! let (mut a, mut b) = mem::pair(&pool, 256);
//! let mut batch = Batch::new(32);
//! let mut pkt = pool.packet();
//! pkt.extend_from_slice(b"hello").unwrap();
//! pkt.set_peer(b.local_addr());
//! batch.push(pkt);
//! a.send(Instant::now(), &mut batch).unwrap();
//! b.recv(Instant::now(), &mut batch).unwrap();
//! assert_eq!(batch.get(0).unwrap().data(), b"hello");
//! assert_eq!(batch.get(0).unwrap().peer(), a.local_addr());
//! batch.recycle(&pool);
//! ```

pub mod afpacket;
pub mod afxdp;
pub mod cbpf;
pub mod fault;
pub mod http;
pub mod mem;
pub mod memnet;
mod mmsg;
pub mod pcap;
pub mod ring;
pub mod udp;
pub mod uds;

mod packet;
pub(crate) use packet::UNSPECIFIED;
pub use packet::{
    Batch, CACHE_BULK, CACHE_MAX, DEFAULT_BATCH, DEFAULT_BUF_SIZE, DEFAULT_HEADROOM, PEER_TAIL, Packet, Pool,
};

/// CPU time the calling thread has used (user and system; time it spent blocked or parked is
/// not counted): what "host CPU per request" is measured in.
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call to fill; CLOCK_THREAD_CPUTIME_ID
    // is supported on every Linux this crate builds for, and on failure `ts` stays zero.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// `ip`, an IPv4-mapped IPv6 address given as the IPv4 one (as a dual-stack socket bound to
/// `[::]` reports an IPv4 peer).
pub fn unmapped(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
        v4 => v4,
    }
}

/// A cheap 64-bit hash of a socket address (IP and port, multiplied by the golden ratio): what
/// shards per-sender state and steers flows. Not keyed, so not for tables an attacker fills to
/// collide.
#[inline]
pub fn addr_hash(addr: &std::net::SocketAddr) -> u64 {
    let (ip, port) = match addr {
        std::net::SocketAddr::V4(a) => (u64::from(a.ip().to_bits()), a.port()),
        std::net::SocketAddr::V6(a) => ((a.ip().to_bits() as u64) ^ ((a.ip().to_bits() >> 64) as u64), a.port()),
    };
    (ip ^ (u64::from(port) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Counters every port keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets dropped on receive (truncated datagrams).
    pub rx_dropped: u64,
    /// Packets dropped on transmit (queue or socket buffer full, send errors).
    pub tx_dropped: u64,
    /// `recv` calls that returned packets.
    pub rx_batches: u64,
    /// `send` calls that sent packets.
    pub tx_batches: u64,
}

impl PortStats {
    /// Counts a receive call that delivered `n` packets.
    #[inline]
    pub fn received(&mut self, n: usize) {
        self.rx_packets += n as u64;
        self.rx_batches += u64::from(n > 0);
    }

    /// Counts a send call that sent `n` packets.
    #[inline]
    pub fn sent(&mut self, n: usize) {
        self.tx_packets += n as u64;
        self.tx_batches += u64::from(n > 0);
    }
}

impl std::ops::AddAssign for PortStats {
    fn add_assign(&mut self, o: PortStats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.rx_dropped += o.rx_dropped;
        self.tx_dropped += o.tx_dropped;
        self.rx_batches += o.rx_batches;
        self.tx_batches += o.tx_batches;
    }
}

/// Moves packets from an in-process ring into `batch` until it is full or the ring is empty,
/// counting them as received; returns how many.
pub(crate) fn pop_into(ring: &crossbeam_queue::ArrayQueue<Packet>, batch: &mut Batch, stats: &mut PortStats) -> usize {
    let mut n = 0;
    while !batch.is_full() {
        let Some(p) = ring.pop() else { break };
        stats.rx_bytes += p.len() as u64;
        batch.push(p);
        n += 1;
    }
    stats.received(n);
    n
}

/// The count a `recvmmsg` / `sendmmsg` call returned; `Ok(None)` when the socket had nothing
/// to give or take now (would block, interrupted).
pub(crate) fn mmsg_count(r: libc::c_int) -> io::Result<Option<usize>> {
    if r >= 0 {
        return Ok(Some(r as usize));
    }
    let e = io::Error::last_os_error();
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
        _ => Err(e),
    }
}

/// Moves the first `n` of `bufs` (filled by `recvmmsg`) into `batch`: each one `accept(i)` gives
/// a length and a peer for; the others go back to `pool` as receive drops. Returns how many were
/// delivered and counts them.
pub(crate) fn deliver_received(
    bufs: &mut Vec<Packet>,
    n: usize,
    batch: &mut Batch,
    stats: &mut PortStats,
    pool: &Pool,
    mut accept: impl FnMut(usize) -> Option<(usize, SocketAddr)>,
) -> usize {
    let mut delivered = 0;
    for (i, mut p) in bufs.drain(..n).enumerate() {
        match accept(i) {
            Some((len, peer)) => {
                p.set_len(len);
                p.set_peer(peer);
                stats.rx_bytes += len as u64;
                batch.push(p);
                delivered += 1;
            }
            None => {
                stats.rx_dropped += 1;
                pool.put(p);
            }
        }
    }
    stats.received(delivered);
    delivered
}

/// A source and sink of packet batches.
pub trait Port {
    /// Appends up to `batch.spare()` received packets to `batch`; returns how many. Never blocks.
    /// Each packet's `peer` is its source.
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize>;
    /// Transmits every packet of `batch` to its `peer` and empties the batch, returning buffers
    /// to the pool. Returns how many were handed on; the rest were dropped and counted.
    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize>;
    /// Blocks until the port may have packets to receive or `timeout` has passed.
    fn wait(&mut self, timeout: Duration) -> io::Result<()>;
    /// The address peers send to.
    fn local_addr(&self) -> SocketAddr;
    /// The earliest time the port itself needs to be polled (delayed packets), if any.
    fn poll_at(&self) -> Option<Instant> {
        None
    }
    /// A descriptor that turns readable whenever the port has packets to receive, so that one
    /// thread can wait on several ports at once ([`wait_any`]); `None` where readiness is not
    /// a descriptor's alone (in-process rings, held or delayed packets).
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
    /// Counters.
    fn stats(&self) -> PortStats;
}

/// An engine that takes a batch of packets and hands back batches, one per output: how one
/// engine runs another as a stage without depending on it (`tern chain` runs `tern flow`'s
/// switch as a network task through an adapter in `tern-cli`).
pub trait BatchStage: Send {
    /// The outputs it fills (`outputs` has this many batches).
    fn outputs(&self) -> usize;
    /// Takes every packet of `input`, received on `in_port`, and appends what leaves to
    /// `outputs[k]` for output `k`; a packet it drops goes back to its pool. A full output batch
    /// drops what does not fit (back to the pool).
    fn process(&mut self, now: Instant, in_port: u16, input: &mut Batch, outputs: &mut [Batch]);
}

/// Blocks until one of `fds` is readable or `timeout` passes (a signal ends the wait early):
/// how a runtime with several ports sleeps while idle without adding a sleep's latency to the
/// next packet. The descriptors come from [`Port::wait_fd`].
pub fn wait_any(fds: &[std::os::fd::RawFd], timeout: Duration) -> io::Result<()> {
    let mut pfds: Vec<libc::pollfd> =
        fds.iter().map(|&fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    udp::poll_fds(&mut pfds, timeout)
}

/// Moves the calling thread into the network namespace `name` (as `ip netns exec` does, from
/// `/var/run/netns/NAME`): the sockets it opens from then on live there. Other threads stay
/// where they are. Root only.
pub fn enter_netns(name: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    if name.is_empty() || name.contains('/') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("network namespace `{name}`: not a name")));
    }
    let path = format!("/var/run/netns/{name}");
    let f = std::fs::File::open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace `{name}` ({path}): {e}")))?;
    // SAFETY: `f` is an open descriptor of a namespace file for the duration of the call, and
    // CLONE_NEWNET asks the kernel to check that it names a network namespace. Tested in
    // `tests::missing_netns_is_named` (and, as root, by the benches that use it).
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("entering network namespace `{name}`: {e}")));
    }
    Ok(())
}

/// Asks the CPU to bring the cache line holding the first byte of `x` close, to be written
/// (x86-64: `prefetchw` where the build enables it, else `prefetcht0`; elsewhere nothing). It
/// never waits: a batch's lines, asked for together, arrive together, where a store into a
/// line not in the cache holds later work back until that line comes.
#[inline]
pub fn prefetch_write<T: ?Sized>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    if std::mem::size_of_val(x) > 0 {
        // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults, and
        // the pointer is to a live value's first byte besides (SSE is part of x86-64).
        // Tested in `tests::prefetch_write_any_slice`.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_ET0 }>((x as *const T).cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Asks the CPU to bring the cache line holding the first byte of `x` close, to be read
/// (x86-64: `prefetcht0`; elsewhere nothing). It never waits: a line another core wrote,
/// asked for a while before it is read, is here when it is (where a load of it would hold
/// the core until it came).
#[inline]
pub fn prefetch_read<T: ?Sized>(x: &T) {
    if std::mem::size_of_val(x) > 0 {
        prefetch_read_at((x as *const T).cast());
    }
}

/// [`prefetch_read_at`] of each line of the `len` bytes from `p` (a line every 64 bytes from
/// `p`), which need not point to anything live.
#[inline]
pub fn prefetch_read_lines(p: *const u8, len: usize) {
    for at in (0..len).step_by(64) {
        prefetch_read_at(p.wrapping_add(at));
    }
}

/// [`prefetch_read`] of the line at address `p`, which need not point to anything live (a
/// slot a ring has not written yet, or past a buffer's end): a prefetch reads nothing the
/// program sees and never faults.
#[inline]
pub fn prefetch_read_at(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint: it changes no memory, reads nothing into the program's
    // view, and never faults, whatever the address (SSE is part of x86-64). Tested in
    // `tests::prefetch_read_any_address`.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Busy-waits `d` (pacing, and modelled per-packet costs in benchmarks).
pub fn spin_for(d: std::time::Duration) {
    let s = std::time::Instant::now();
    while s.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Runs its closure if dropped while its thread panics. A server's thread (a data-path core,
/// a watcher of signals and files, an epoch's work) holds one that stops the server, so that a
/// bug there stops it with an error rather than leaving it running without that thread.
pub struct OnPanic<F: FnMut()>(pub F);

impl<F: FnMut()> std::fmt::Debug for OnPanic<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnPanic")
    }
}

impl<F: FnMut()> Drop for OnPanic<F> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            (self.0)();
        }
    }
}

/// The environment variable that names a [`failpoint`] to fire.
pub const FAILPOINT_VAR: &str = "TERN_FAILPOINT";

/// A place in a server's thread where a test may make it fail: in a build with debug
/// assertions (the tests' binaries), it panics with `failpoint NAME` when the environment
/// variable [`FAILPOINT_VAR`] is `name` (read once a process). A release build compiles it to
/// nothing. The command-line tests use it to check, end to end, that a server whose thread dies
/// stops with an error naming it rather than serve on without it.
#[inline]
pub fn failpoint(name: &str) {
    #[cfg(debug_assertions)]
    {
        static NAMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        if NAMED.get_or_init(|| std::env::var(FAILPOINT_VAR).ok()).as_deref() == Some(name) {
            panic!("failpoint {name}");
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

/// A panic's message (a joined thread's `Err`, or `catch_unwind`'s): its `&str` or `String`,
/// else "no message".
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|m| m.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into())
}

/// The first of a server's `threads` to have ended, taken out and joined: its name and how it
/// ended — its panic's message, or what `ended` makes of what it returned — as
/// `NAME ended early (WHY)`. `None` while every thread runs. A server checks its threads as
/// it waits, and stops (with this as its error) rather than go on without one.
pub fn take_ended<T>(threads: &mut Vec<std::thread::JoinHandle<T>>, ended: impl FnOnce(T) -> String) -> Option<String> {
    let i = threads.iter().position(|t| t.is_finished())?;
    let t = threads.remove(i);
    let name = t.thread().name().unwrap_or("a thread").to_string();
    let why = match t.join() {
        Ok(v) => ended(v),
        Err(p) => format!("it panicked: {}", panic_message(p.as_ref())),
    };
    Some(format!("{name} ended early ({why})"))
}

/// Pins the calling thread to `core` (Linux); returns whether it worked.
pub fn pin_to_core(core: usize) -> bool {
    if core >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: `set` is a plain bitmask we own; sched_setaffinity reads `size_of::<cpu_set_t>()`
    // bytes from it and pid 0 names the calling thread. Tested in `tests::pin_current_thread`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Restricts the calling thread to the given cores (Linux); returns whether it worked. An
/// empty set or one naming no existing core leaves the thread as it is and returns false.
pub fn pin_to_cores(cores: &[usize]) -> bool {
    // SAFETY: as in `pin_to_core`: a zeroed cpu_set_t we own, read by the kernel for the call.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let mut any = false;
        for &c in cores.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
            any = true;
        }
        any && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// The cores thread (or process) `pid` may run on (0: the calling thread), or None if it does
/// not exist.
pub fn affinity_of(pid: libc::pid_t) -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t we own, written by the kernel for the call; CPU_ISSET reads it
    // within CPU_SETSIZE. Tested in `tests::affinity_is_shared`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some((0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect())
    }
}

/// Gives thread (or process) `pid` the calling thread's cores; returns whether it worked.
pub fn share_affinity(pid: libc::pid_t) -> bool {
    // SAFETY: as in `affinity_of`: a zeroed cpu_set_t we own, filled for the calling thread
    // (pid 0) and read by the kernel for `pid`. Tested in `tests::affinity_is_shared`.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        libc::sched_getaffinity(0, size, &mut set) == 0 && libc::sched_setaffinity(pid, size, &set) == 0
    }
}

/// Cores this process may run on.
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::Port;

    /// Of a server's threads, the one that ended is taken out and named with how it ended (a
    /// panic's message, or what it returned), the others left; none while all run.
    #[test]
    fn a_thread_that_ended_is_named() {
        let named = |name: &str, f: Box<dyn FnOnce(std::sync::mpsc::Receiver<()>) -> u8 + Send>| {
            let (go, wait) = std::sync::mpsc::channel::<()>();
            let h = std::thread::Builder::new().name(name.into()).spawn(move || f(wait)).unwrap();
            (go, h)
        };
        let (go_a, a) = named(
            "side-a",
            Box::new(|w| {
                let _ = w.recv();
                7
            }),
        );
        let (go_b, b) = named(
            "side-b",
            Box::new(|w| {
                let _ = w.recv();
                panic!("lost {}", 2)
            }),
        );
        let mut threads = vec![a, b];
        let ended = |v: u8| format!("returned {v}");
        assert_eq!(super::take_ended(&mut threads, ended), None, "both run");
        go_b.send(()).unwrap();
        let wait_for = |threads: &mut Vec<std::thread::JoinHandle<u8>>| loop {
            if let Some(m) = super::take_ended(threads, ended) {
                return m;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        assert_eq!(wait_for(&mut threads), "side-b ended early (it panicked: lost 2)");
        assert_eq!(threads.len(), 1);
        go_a.send(()).unwrap();
        assert_eq!(wait_for(&mut threads), "side-a ended early (returned 7)");
        assert!(threads.is_empty());
    }

    /// A panic's message, whether the panic gave a `&str` or a `String`; "no message" else.
    #[test]
    fn a_panics_message_is_read() {
        let of = |f: fn()| super::panic_message(std::panic::catch_unwind(f).unwrap_err().as_ref());
        let (plain, formatted, other) =
            (of(|| panic!("plain")), of(|| panic!("core {}", 3)), of(|| std::panic::panic_any(7u8)));
        assert_eq!((plain.as_str(), formatted.as_str(), other.as_str()), ("plain", "core 3", "no message"));
    }

    /// A thread given the caller's cores runs on those (and a missing one is refused).
    #[test]
    fn affinity_is_shared() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() }).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        let mine = super::affinity_of(0).unwrap();
        assert!(!mine.is_empty());
        let last = *mine.last().unwrap();
        // The caller on one core (its last), then the other thread given that.
        assert!(super::pin_to_core(last));
        assert!(super::share_affinity(tid));
        assert_eq!(super::affinity_of(tid), Some(vec![last]));
        drop(done_tx);
        h.join().unwrap();
        assert!(super::pin_to_cores(&mine));
        assert_eq!(super::affinity_of(0), Some(mine));
        assert_eq!(super::affinity_of(libc::pid_t::MAX), None);
        assert!(!super::share_affinity(libc::pid_t::MAX));
    }

    /// A missing namespace (or a path for a name) is refused, naming it, and the thread stays.
    #[test]
    fn missing_netns_is_named() {
        let e = super::enter_netns("tern-no-such-namespace").unwrap_err();
        assert!(e.to_string().contains("tern-no-such-namespace"), "{e}");
        let e = super::enter_netns("../x").unwrap_err();
        assert!(e.to_string().contains("not a name"), "{e}");
    }

    /// `wait_any` returns when one of several sockets has a datagram, long before its timeout,
    /// and waits the timeout out when none has.
    #[test]
    fn wait_any_wakes_on_any_port() {
        use std::time::{Duration, Instant};
        let pool = super::Pool::new(64, 2048);
        let cfg = super::udp::UdpConfig::default();
        let lo = "127.0.0.1:0".parse().unwrap();
        let a = super::udp::UdpPort::bind(lo, &pool, &cfg).unwrap();
        let b = super::udp::UdpPort::bind(lo, &pool, &cfg).unwrap();
        let fds = [a.wait_fd().unwrap(), b.wait_fd().unwrap()];
        let t = Instant::now();
        super::wait_any(&fds, Duration::from_millis(30)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(25), "woke with nothing to read: {:?}", t.elapsed());
        let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        s.send_to(b"x", b.local_addr()).unwrap();
        let t = Instant::now();
        super::wait_any(&fds, Duration::from_secs(20)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(10), "did not wake for the datagram");
    }

    /// Spinning uses CPU time; sleeping does not.
    #[test]
    fn thread_cpu_time_counts_work_not_sleep() {
        let t0 = super::thread_cpu_time();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let slept = super::thread_cpu_time() - t0;
        assert!(slept < std::time::Duration::from_millis(20), "asleep: {slept:?}");
        // Spinning: the clock advances (however the machine shares its cores meanwhile).
        let t1 = super::thread_cpu_time();
        let start = std::time::Instant::now();
        while super::thread_cpu_time() - t1 < std::time::Duration::from_millis(20) {
            assert!(start.elapsed() < std::time::Duration::from_secs(20), "the thread's CPU time does not advance");
            std::hint::black_box(0);
        }
    }

    #[test]
    fn prefetch_read_any_address() {
        let v = vec![7u8; 4096];
        for at in [0, 1, 63, 64, 4095] {
            super::prefetch_read(&v[at..]);
        }
        super::prefetch_read::<[u8]>(&[]);
        super::prefetch_read(&0u64);
        // Past the end, dangling, null and the top of the address space: hints only.
        super::prefetch_read_at(v.as_ptr().wrapping_add(1 << 20));
        super::prefetch_read_at(std::ptr::NonNull::<u64>::dangling().as_ptr().cast());
        super::prefetch_read_at(std::ptr::null());
        super::prefetch_read_at(usize::MAX as *const u8);
        super::prefetch_read_lines(v.as_ptr(), v.len());
        super::prefetch_read_lines(std::ptr::null(), 4096);
        assert!(v.iter().all(|&b| b == 7));
    }

    #[test]
    fn prefetch_write_any_slice() {
        let mut v = vec![7u8; 4096];
        for at in [0, 1, 63, 64, 4095, 4096] {
            super::prefetch_write(&v[at..]);
        }
        super::prefetch_write::<[u8]>(&[]);
        super::prefetch_write(&v);
        super::prefetch_write(&0u64);
        // A hint only: the bytes are as they were, and writable.
        assert!(v.iter().all(|&b| b == 7));
        v[64] = 1;
        assert_eq!(v[64], 1);
    }

    #[test]
    fn pin_current_thread() {
        std::thread::spawn(|| {
            assert!(super::pin_to_core(0));
            assert!(!super::pin_to_core(1 << 20));
            assert!(super::pin_to_cores(&[0, 1 << 20]));
            assert!(!super::pin_to_cores(&[]));
        })
        .join()
        .unwrap();
    }
}
