//! YCSB through the data path (docs/chain.md, "Benchmark: fairness", case 5; the paper's
//! §5.4 KV cache): clients send YCSB's GETs and SETs over go-back-N to a key-value server
//! behind a link a tenth as fast; one tenant's chain is `gbn -> kv` (the transport ends in the
//! NIC and a KV cache answers GETs it holds) or `gbn` alone (every request crosses the slow
//! link). The harness plays the clients and the server around the running [`Runtime`](crate::runtime::Runtime): port 0
//! faces the clients, port 1 the server.
//!
//! - Clients: `clients` go-back-N connections, each with `window` requests outstanding (a
//!   closed loop), keys drawn from a Zipf distribution (θ 0.99) over `keys` keys, 1 KB values;
//!   workload A is 50% reads, B 95%, C 100%, the rest SETs. A request completes when its answer
//!   (VALUE, NOT_FOUND or STORED, from the cache or the server) reaches its client.
//! - The server holds every key; it answers in arrival order, its answers (over go-back-N
//!   connections of its own, one a client, so they cross the chain's transport too) limited by
//!   a token bucket to the slow link's bytes a second.
//!
//! Nothing here is timed but the measured window; the rates come from the completions counted.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tern_io::Pool;

use crate::gbn;
use crate::kv::{Msg, Op};
use crate::plan::Plan;
use crate::runtime::{Arrival, Config, Egress, Ingress, Item};
use crate::tenant::Tenant;

/// A YCSB workload: the share of requests that are reads (the rest are SETs).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Workload {
    /// `A`, `B` or `C`.
    pub name: char,
    /// Reads in every request.
    pub reads: f64,
}

/// YCSB's core workloads A (update heavy), B (read mostly) and C (read only).
pub const WORKLOADS: [Workload; 3] =
    [Workload { name: 'A', reads: 0.5 }, Workload { name: 'B', reads: 0.95 }, Workload { name: 'C', reads: 1.0 }];

/// The run's shape.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Setup {
    /// Keys, and the bytes of each value.
    pub keys: usize,
    pub value_bytes: usize,
    /// Zipf's θ.
    pub theta: f64,
    /// Client connections, and requests each keeps outstanding.
    pub clients: usize,
    pub window: usize,
    /// The slow link's bytes a second (the server's answers).
    pub server_link_bytes: f64,
}

/// What one run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct YcsbPhase {
    /// Requests completed a second over the measured time.
    pub ops_per_s: f64,
    /// Requests the server answered a second (the rest were answered in the NIC).
    pub server_ops_per_s: f64,
    /// Bytes a second over the slow link.
    pub server_link_bytes_per_s: f64,
    /// Requests completed over the whole run, and answers that were wrong (a VALUE not the
    /// server's, a NOT_FOUND of a key it holds).
    pub completed: u64,
    pub wrong_answers: u64,
}

/// A tenant for the runs: `gbn -> kv` with a cache of `cache_keys` entries, or `gbn` alone.
pub fn tenant(cache_keys: Option<usize>, value_bytes: usize) -> Result<Tenant, String> {
    let text = match cache_keys {
        Some(n) => format!(
            "tenant = \"ycsb\"\ndag = \"gbn -> kv\"\n[ingress]\nproto = \"udp\"\n[nt.gbn]\nkind = \"gbn\"\n[nt.kv]\nkind = \"kv\"\nmax_entries = {n}\nmax_bytes = {}\nmax_pending = 65536\n",
            n * (value_bytes + 64)
        ),
        None => "tenant = \"ycsb\"\ndag = \"gbn\"\n[ingress]\nproto = \"udp\"\n[nt.gbn]\nkind = \"gbn\"\n".to_string(),
    };
    Tenant::parse(&text).map_err(|e| e.to_string())
}

/// Zipf-distributed ranks over `n` items (θ `theta`), drawn by a binary search of the
/// cumulative distribution.
#[derive(Debug, Clone)]
pub struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    /// Over `n` items (at least 1).
    pub fn new(n: usize, theta: f64) -> Zipf {
        let n = n.max(1);
        let mut cdf = Vec::with_capacity(n);
        let mut sum = 0.0;
        for i in 1..=n {
            sum += 1.0 / (i as f64).powf(theta);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        Zipf { cdf }
    }

    /// The rank (0: the most popular) for a uniform `u` in [0, 1).
    pub fn rank(&self, u: f64) -> usize {
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }

    /// The share of draws that fall on the `k` most popular items.
    pub fn head(&self, k: usize) -> f64 {
        if k == 0 { 0.0 } else { self.cdf[(k - 1).min(self.cdf.len() - 1)] }
    }
}

/// xorshift64*: a small seeded generator (the runs are reproducible).
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const SERVER: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 1);
const SERVER_PORT: u16 = 11211;
/// The server's go-back-N connections: this plus the client's number.
const SERVER_CONN: u32 = 1 << 20;

fn key_of(rank: usize) -> Vec<u8> {
    format!("user{rank:08}").into_bytes()
}

fn client_addr(c: usize) -> (Ipv4Addr, u16) {
    (Ipv4Addr::new(10, 1, (c >> 8) as u8, c as u8), 20_000 + c as u16)
}

fn frame(src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16), payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload.len());
    tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src.0.octets(), dst.0.octets(), src.1, dst.1, 64, payload);
    f
}

/// The UDP payload and source of an Ethernet/IPv4/UDP frame.
fn udp_of(f: &[u8]) -> Option<(&[u8], (Ipv4Addr, u16))> {
    let ihl = usize::from(*f.get(14)? & 0x0f) * 4;
    let l4 = 14 + ihl;
    let src = Ipv4Addr::new(*f.get(26)?, *f.get(27)?, *f.get(28)?, *f.get(29)?);
    let sport = u16::from_be_bytes([*f.get(l4)?, *f.get(l4 + 1)?]);
    let len = usize::from(u16::from_be_bytes([*f.get(l4 + 4)?, *f.get(l4 + 5)?]));
    let end = (l4 + len).min(f.len());
    Some((f.get(l4 + 8..end)?, (src, sport)))
}

struct Client {
    sender: gbn::Sender,
    outstanding: usize,
}

/// The clients and the server, between the ports.
struct World {
    setup: Setup,
    workload: Workload,
    zipf: Zipf,
    rng: Rng,
    clients: Vec<Client>,
    next_id: u32,
    /// The server: its values, requests waiting (client, request), its connections to the
    /// clients, and its link's tokens (bytes).
    values: Vec<u8>,
    waiting: VecDeque<(usize, Vec<u8>)>,
    server: Vec<gbn::Sender>,
    tokens: f64,
    refilled: Option<Instant>,
    /// Frames to go in: (port, bytes).
    out: VecDeque<(u8, Vec<u8>)>,
    scratch: Vec<Vec<u8>>,
}

/// Counters the measuring thread reads.
#[derive(Default)]
struct Counts {
    completed: AtomicU64,
    wrong: AtomicU64,
    served: AtomicU64,
    server_bytes: AtomicU64,
}

impl World {
    fn new(setup: Setup, workload: Workload, seed: u64) -> World {
        let cfg = gbn::Config { window: 256, rto: Duration::from_millis(5), queue: 4096, ..gbn::Config::default() };
        World {
            setup,
            workload,
            zipf: Zipf::new(setup.keys, setup.theta),
            rng: Rng(seed | 1),
            clients: (0..setup.clients)
                .map(|c| Client { sender: gbn::Sender::new(c as u32 + 1, cfg), outstanding: 0 })
                .collect(),
            next_id: 1,
            values: (0..setup.value_bytes).map(|i| (i * 7) as u8).collect(),
            waiting: VecDeque::new(),
            server: (0..setup.clients).map(|c| gbn::Sender::new(SERVER_CONN + c as u32, cfg)).collect(),
            tokens: 0.0,
            refilled: None,
            out: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    /// A frame that left the chain on `port`.
    fn arrive(&mut self, port: u8, f: &[u8], now: Instant, counts: &Counts) {
        let Some((payload, _)) = udp_of(f) else { return };
        // Acknowledgements (and resets, cookies) are exactly a header (a KV message is longer:
        // 8 bytes and a key).
        let ack = payload.len() == gbn::HEADER_LEN
            && gbn::Header::parse(payload).is_ok_and(|(h, _)| matches!(h.kind, gbn::ACK | gbn::RESET | gbn::COOKIE));
        if port == 0 {
            // To a client: its acknowledgement, or an answer.
            let dst = u16::from_be_bytes([f[36], f[37]]);
            let c = usize::from(dst.wrapping_sub(20_000));
            let Some(cl) = self.clients.get_mut(c) else { return };
            if ack {
                cl.sender.on_packet(payload, now);
            } else if let Ok(m) = Msg::parse(payload)
                && matches!(m.op, Op::Value | Op::NotFound | Op::Stored)
            {
                cl.outstanding = cl.outstanding.saturating_sub(1);
                counts.completed.fetch_add(1, Ordering::Relaxed);
                // Every key holds the same value at the server: a VALUE with other bytes (or a
                // key never SET missing) is a wrong answer.
                if (m.op == Op::Value && m.value != self.values.as_slice()) || m.op == Op::NotFound {
                    counts.wrong.fetch_add(1, Ordering::Relaxed);
                }
            }
        } else if ack {
            // To the server: an acknowledgement of one of its connections.
            if let Ok((h, _)) = gbn::Header::parse(payload)
                && let Some(s) = self.server.get_mut(h.conn.wrapping_sub(SERVER_CONN) as usize)
            {
                s.on_packet(payload, now);
            }
        } else {
            // A request the cache did not answer.
            let src_port = udp_of(f).map_or(0, |(_, s)| s.1);
            self.waiting.push_back((usize::from(src_port.wrapping_sub(20_000)), payload.to_vec()));
        }
    }

    /// New requests, the server's answers within its link's bytes, and what the senders have.
    fn step(&mut self, now: Instant, counts: &Counts) {
        let window = self.setup.window;
        for c in 0..self.clients.len() {
            while self.clients[c].outstanding < window {
                let key = key_of(self.zipf.rank(self.rng.unit()));
                let read = self.rng.unit() < self.workload.reads;
                let id = self.next_id;
                self.next_id = self.next_id.wrapping_add(1);
                let msg = if read {
                    Msg { op: Op::Get, id, key: &key, value: b"" }.to_vec()
                } else {
                    Msg { op: Op::Set, id, key: &key, value: &self.values }.to_vec()
                };
                if self.clients[c].sender.push(msg).is_err() {
                    break;
                }
                self.clients[c].outstanding += 1;
            }
        }
        // The server: its link's tokens, a request answered for each answer's bytes.
        let dt = self.refilled.map_or(0.0, |t| now.saturating_duration_since(t).as_secs_f64());
        self.refilled = Some(now);
        let rate = self.setup.server_link_bytes;
        self.tokens = (self.tokens + dt * rate).min(rate * 0.001 + 2.0 * self.setup.value_bytes as f64);
        while let Some((c, req)) = self.waiting.front() {
            let Ok(m) = Msg::parse(req) else {
                self.waiting.pop_front();
                continue;
            };
            let answer = match m.op {
                Op::Get => Msg { op: Op::Value, id: m.id, key: m.key, value: &self.values }.to_vec(),
                _ => Msg { op: Op::Stored, id: m.id, key: m.key, value: b"" }.to_vec(),
            };
            let bytes = (answer.len() + 42 + gbn::HEADER_LEN) as f64;
            if self.tokens < bytes {
                break;
            }
            let c = *c;
            let Some(s) = self.server.get_mut(c) else {
                self.waiting.pop_front();
                continue;
            };
            if s.push(answer).is_err() {
                break;
            }
            self.tokens -= bytes;
            counts.served.fetch_add(1, Ordering::Relaxed);
            counts.server_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            self.waiting.pop_front();
        }
        for (c, cl) in self.clients.iter_mut().enumerate() {
            self.scratch.clear();
            cl.sender.poll(now, &mut self.scratch);
            for p in self.scratch.drain(..) {
                self.out.push_back((0, frame(client_addr(c), (SERVER, SERVER_PORT), &p)));
            }
        }
        for (c, s) in self.server.iter_mut().enumerate() {
            self.scratch.clear();
            s.poll(now, &mut self.scratch);
            for p in self.scratch.drain(..) {
                self.out.push_back((1, frame((SERVER, SERVER_PORT), client_addr(c), &p)));
            }
        }
    }
}

/// Frames that left the chain, by port, for the clients and the server to take.
type Inbox = Arc<Mutex<Vec<(u8, Vec<u8>)>>>;

/// The clients' and server's frames into the chain (core 0).
struct WorldIngress {
    world: Arc<Mutex<World>>,
    inbox: Inbox,
    counts: Arc<Counts>,
    pool: Pool,
    taken: Vec<(u8, Vec<u8>)>,
}

impl Ingress for WorldIngress {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        std::mem::swap(&mut self.taken, &mut *self.inbox.lock().unwrap_or_else(|e| e.into_inner()));
        let mut w = self.world.lock().unwrap_or_else(|e| e.into_inner());
        for (port, f) in self.taken.drain(..) {
            w.arrive(port, &f, now, &self.counts);
        }
        w.step(now, &self.counts);
        while out.len() < max {
            let Some((port, f)) = w.out.pop_front() else { break };
            let mut p = self.pool.packet();
            p.reserve_headroom(tern_io::DEFAULT_HEADROOM);
            if p.extend_from_slice(&f).is_err() {
                self.pool.put(p);
                continue;
            }
            out.push(Arrival { packet: p, at: now, port });
        }
    }
}

/// What leaves the chain, to the clients (port 0) or the server (port 1).
struct WorldEgress {
    inbox: Inbox,
    pool: Pool,
}

impl Egress for WorldEgress {
    fn send(&mut self, _: Instant, items: &mut Vec<Item>) {
        let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        for item in items.drain(..) {
            let port = if item.desc.reply() { item.desc.port } else { 1 - item.desc.port.min(1) };
            inbox.push((port, item.packet.data().to_vec()));
            self.pool.put(item.packet);
        }
    }
}

/// Runs `workload` through `tenants` (one tenant, [`tenant`]) on `plan` in `cfg`'s mode for
/// `secs` after `warmup`.
pub fn run(
    tenants: &[Tenant],
    plan: &Plan,
    cfg: Config,
    setup: Setup,
    workload: Workload,
    warmup: Duration,
    secs: Duration,
) -> Result<YcsbPhase, String> {
    let (pool, rt) = crate::bench::runtime(tenants, plan, cfg)?;
    let stopper = rt.stopper();
    let world = Arc::new(Mutex::new(World::new(setup, workload, 2026)));
    let inbox = Arc::new(Mutex::new(Vec::new()));
    let counts = Arc::new(Counts::default());
    let ingress: Vec<Box<dyn Ingress>> = vec![Box::new(WorldIngress {
        world,
        inbox: inbox.clone(),
        counts: counts.clone(),
        pool: pool.clone(),
        taken: Vec::new(),
    })];
    let egress: Vec<Box<dyn Egress>> = (0..cfg.cores.max(1))
        .map(|_| Box::new(WorldEgress { inbox: inbox.clone(), pool: pool.clone() }) as Box<dyn Egress>)
        .collect();
    let (window, stats) = std::thread::scope(|s| {
        let c2 = counts.clone();
        let timer = s.spawn(move || {
            std::thread::sleep(warmup);
            let at = |c: &Counts| {
                (
                    Instant::now(),
                    c.completed.load(Ordering::Relaxed),
                    c.served.load(Ordering::Relaxed),
                    c.server_bytes.load(Ordering::Relaxed),
                )
            };
            let a = at(&c2);
            std::thread::sleep(secs);
            let b = at(&c2);
            stopper.stop();
            let dt = (b.0 - a.0).as_secs_f64().max(1e-9);
            YcsbPhase {
                ops_per_s: (b.1 - a.1) as f64 / dt,
                server_ops_per_s: (b.2 - a.2) as f64 / dt,
                server_link_bytes_per_s: (b.3 - a.3) as f64 / dt,
                completed: c2.completed.load(Ordering::Relaxed),
                wrong_answers: c2.wrong.load(Ordering::Relaxed),
            }
        });
        let stats = rt.run(&pool, ingress, egress);
        (timer.join(), stats)
    });
    stats?;
    window.map_err(|_| "the timer panicked".to_string())
}
