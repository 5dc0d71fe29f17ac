//! The measurements behind `tern bench switch` (docs/clip.md, "Benchmark").
//!
//! **Offload** (§V-B, Figure 6): 64-byte UDP frames of Zipf-distributed flows run through the
//! SNAT program on a switch thread, whose misses go to a server thread and back; the server's
//! handler costs what a packet's trip through a server costs (its receive and send through the
//! kernel, measured in the same run by [`server_path_ns`], unless set). Throughput is frames
//! out of the switch a second. Schemes: every miss to a server (`all_server`, no offload), the
//! paper's random selection (`random`) and count-min sketch (`sketch`), and the exact top N of
//! the trace installed up front (`ideal`). The offload's state is learned before the measured
//! phase (warm-up intervals in one thread, not timed) and goes on learning during it.
//!
//! **Scaling** (Figure 7): sets of flows start and stop while the group goes 1 → 2 → 3 → 2
//! servers; each flow's server is followed packet by packet, under CLIP's selection (through
//! the switch, on frames) and under hash-mod ECMP (BMv2's, a flow's server its hash modulo the
//! members) on the same events.

use std::time::{Duration, Instant};

use hashbrown::HashMap;
use rand::SeedableRng;
use rand_distr::Distribution;
use tern_io::{Batch, Pool};

use crate::group::{FlowId, HashMod, ServerId};
use crate::offload::Mode;
use crate::program::Program;
use crate::server::{Cluster, Server, Snat};
use crate::switch::{Route, Switch, SwitchConfig};

/// The SNAT program the benchmark runs (examples/switch/snat.toml).
pub const SNAT_PROGRAM: &str = include_str!("../../../examples/switch/snat.toml");

/// Host ports: the inside (traffic in) and the outside (out).
pub const INSIDE: u16 = 1;
pub const OUTSIDE: u16 = 2;

/// How misses are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheme {
    /// No offload: every packet goes through a server.
    AllServer,
    /// Random selection (the paper's "w/ R").
    Random,
    /// The count-min sketch's heavy hitters ("w/ S").
    Sketch,
    /// The trace's exact top N, installed before the run.
    Ideal,
}

impl Scheme {
    pub const ALL: [Scheme; 4] = [Scheme::AllServer, Scheme::Random, Scheme::Sketch, Scheme::Ideal];

    pub fn name(self) -> &'static str {
        match self {
            Scheme::AllServer => "all_server",
            Scheme::Random => "random",
            Scheme::Sketch => "sketch",
            Scheme::Ideal => "ideal",
        }
    }
}

/// One flow's frame: UDP from 10.x.y.z:4000 (the flow's index) to 198.51.100.1:53, `size`
/// bytes with the Ethernet header (at least 46); the payload starts with the flow's index
/// (4 bytes, big-endian: [`frame_flow`] reads it back after translation).
pub fn flow_frame(flow: u32, size: usize) -> Vec<u8> {
    let mut f = Vec::with_capacity(size);
    let src = [10, (flow >> 16) as u8, (flow >> 8) as u8, flow as u8];
    let mut payload = vec![0x42u8; size.saturating_sub(42).max(4)];
    payload[..4].copy_from_slice(&flow.to_be_bytes());
    tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], src, [198, 51, 100, 1], 4000, 53, 64, &payload);
    f
}

/// The flow index a [`flow_frame`] carries in its payload.
pub fn frame_flow(f: &[u8]) -> Option<u32> {
    f.get(42..46).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// `n` draws of flow indexes 0..flows by Zipf rank (`alpha`; index 0 the heaviest).
pub fn zipf_trace(flows: usize, alpha: f64, n: usize, seed: u64) -> Result<Vec<u32>, String> {
    let z = rand_distr::Zipf::new(flows as f64, alpha).map_err(|e| format!("zipf: {e}"))?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    Ok((0..n).map(|_| (z.sample(&mut rng) as u32).saturating_sub(1)).collect())
}

/// What a server's receive and send of one small frame through the kernel cost, ns: a
/// datagram bounced between two UDP sockets on loopback `n` times (the first tenth not
/// timed), half a round trip (a round trip is two receives and two sends). The median of
/// five batches.
pub fn server_path_ns(n: usize) -> std::io::Result<f64> {
    let a = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let b = std::net::UdpSocket::bind("127.0.0.1:0")?;
    a.connect(b.local_addr()?)?;
    b.connect(a.local_addr()?)?;
    a.set_read_timeout(Some(Duration::from_secs(1)))?;
    b.set_read_timeout(Some(Duration::from_secs(1)))?;
    let frame = flow_frame(0, 64 + 24);
    let mut buf = [0u8; 256];
    let mut batches = Vec::new();
    for _ in 0..5 {
        let warm = n / 10;
        let mut start = Instant::now();
        for i in 0..n + warm {
            if i == warm {
                start = Instant::now();
            }
            a.send(&frame)?;
            let k = b.recv(&mut buf)?;
            b.send(&buf[..k])?;
            a.recv(&mut buf)?;
        }
        batches.push(start.elapsed().as_nanos() as f64 / n.max(1) as f64 / 2.0);
    }
    batches.sort_by(f64::total_cmp);
    Ok(batches[2])
}

/// The shape of one offload measurement.
#[derive(Debug, Clone, Copy)]
pub struct OffloadRun {
    pub flows: usize,
    pub alpha: f64,
    /// Entries of the switch's table (the program's `nat` is 2048).
    pub capacity: usize,
    /// Packets between two of the controller's intervals.
    pub interval_packets: u64,
    /// Intervals run before the measured phase (not timed).
    pub warmup_intervals: usize,
    /// The server's cost a request, ns, beyond its handler's work.
    pub server_ns: u64,
    pub frame_bytes: usize,
    pub secs: f64,
    pub seed: u64,
}

/// One offload phase's result.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OffloadPhase {
    /// Frames out of the switch a second.
    pub pps: f64,
    /// Share of them the switch's table served.
    pub switch_share: f64,
    /// Requests the server answered a second.
    pub server_pps: f64,
    /// Entries in the switch's table at the end.
    pub entries: usize,
    /// Frames dropped anywhere (should be 0).
    pub drops: u64,
    pub secs: f64,
}

/// A switch and one server for `scheme`, the server's handler costing `server_ns`.
pub fn snat_cluster(scheme: Scheme, capacity: usize, server_ns: u64, seed: u64) -> Result<Cluster, String> {
    let program = Program::parse(SNAT_PROGRAM)?;
    let mut cfg = SwitchConfig {
        ports: 3,
        servers: vec![3],
        members: vec![0],
        routes: vec![Route {
            prefix: "0.0.0.0/0".parse().map_err(|e| format!("{e}"))?,
            port: OUTSIDE,
            mac: [2, 0, 0, 0, 0, 9],
        }],
        offload_enabled: scheme != Scheme::AllServer,
        ..SwitchConfig::default()
    };
    cfg.offload.capacity = capacity;
    cfg.offload.seed = seed;
    cfg.offload.mode = if scheme == Scheme::Random { Mode::Random } else { Mode::Sketch };
    let switch = Switch::new(program, cfg).map_err(|e| e.to_string())?;
    let snat = Snat::for_server(0)?;
    let mut server = Server::new(tern_wire::clip::DEFAULT_ETHERTYPE, 1, Box::new(snat), u64::MAX);
    server.path_ns = server_ns;
    Ok(Cluster::new(switch, vec![server]))
}

/// Sends `frame` through `c` once and installs its SNAT entry — the address and port its server
/// gave it — in the switch's table.
pub fn install_answered(c: &mut Cluster, frame: &[u8]) -> Result<(), String> {
    let out = c.send(INSIDE, &[frame]);
    let (_, g) = out.first().ok_or("no answer")?;
    let key = snat_key(frame).ok_or("not IPv4")?;
    let translated = crate::flow::five_tuple(g).ok_or("not IPv4")?;
    c.switch.install(&key, &[translated[0], translated[3]])
}

/// A frame's key in the SNAT program's `nat` table: source, destination, protocol, TCP's
/// ports, UDP's ports (a packet's other protocol's read as 0).
pub fn snat_key(frame: &[u8]) -> Option<[u64; 7]> {
    let [s, d, p, sp, dp] = crate::flow::five_tuple(frame)?;
    Some(if p == 6 { [s, d, p, sp, dp, 0, 0] } else { [s, d, p, 0, 0, sp, dp] })
}

/// Runs `scheme` on `frames` (one a flow) drawn by `trace`, measured for `run.secs` on two
/// threads (the switch with its traffic, and the server).
pub fn measure_offload(
    scheme: Scheme,
    run: &OffloadRun,
    frames: &[Vec<u8>],
    trace: &[u32],
) -> Result<OffloadPhase, String> {
    let mut c = snat_cluster(scheme, run.capacity, 0, run.seed)?;
    // Warm-up, in one thread with a free handler: the controller's intervals learn the state.
    let mut at = 0usize;
    let next = |at: &mut usize| {
        let f = trace[*at % trace.len()];
        *at += 1;
        f
    };
    match scheme {
        Scheme::AllServer => {}
        Scheme::Ideal => {
            // The trace's exact top N, each flow's entry what its server answers.
            let mut count: HashMap<u32, u64> = HashMap::new();
            for &f in trace {
                *count.entry(f).or_default() += 1;
            }
            let mut top: Vec<(u64, u32)> = count.into_iter().map(|(f, n)| (n, f)).collect();
            top.sort_unstable_by(|a, b| b.cmp(a));
            top.truncate(run.capacity);
            for (_, f) in top {
                install_answered(&mut c, &frames[f as usize])?;
            }
        }
        Scheme::Random | Scheme::Sketch => {
            let mut batch: Vec<&[u8]> = Vec::with_capacity(32);
            for _ in 0..run.warmup_intervals {
                let mut sent = 0u64;
                while sent < run.interval_packets {
                    batch.clear();
                    for _ in 0..32 {
                        batch.push(&frames[next(&mut at) as usize]);
                    }
                    sent += 32;
                    c.send(INSIDE, &batch);
                }
                c.switch.interval();
            }
        }
    }
    let Cluster { mut switch, servers, .. } = c;
    let mut server = servers.into_iter().next().ok_or("no server")?;
    // The warm-up ran with a free server path; the measured phase pays it.
    server.path_ns = run.server_ns;
    run_threads(&mut switch, server, scheme, run, frames, trace, at)
}

/// The measured phase: the switch and its traffic on this thread (core 0), the server on
/// another (core 1); request batches go to the server and come back on rings of 8 batches.
fn run_threads(
    switch: &mut Switch,
    mut server: Server,
    scheme: Scheme,
    run: &OffloadRun,
    frames: &[Vec<u8>],
    trace: &[u32],
    mut at: usize,
) -> Result<OffloadPhase, String> {
    const BATCH: usize = 32;
    const IN_FLIGHT: usize = 8;
    let pool = Pool::new(4096, 2048);
    let (mut to_server, mut server_rx) = rtrb::RingBuffer::<Batch>::new(IN_FLIGHT);
    let (mut server_tx, mut from_server) = rtrb::RingBuffer::<Batch>::new(IN_FLIGHT);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let server_port = switch.config().servers[0];
    let ports = usize::from(switch.config().ports) + 1;
    let before = switch.stats().clone();
    let offloaded_before = before.offloaded;
    std::thread::scope(|s| {
        let stop = &stop;
        let srv_pool = pool.clone();
        let server_thread = s.spawn(move || {
            tern_io::pin_to_core(1);
            let mut answered = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                match server_rx.pop() {
                    Ok(mut b) => {
                        answered += b.len() as u64;
                        server.process(0, &mut b, false, &srv_pool);
                        // The ring back holds as many batches as the one out: never full.
                        let _ = server_tx.push(b);
                    }
                    Err(_) => std::hint::spin_loop(),
                }
            }
            answered
        });
        tern_io::pin_to_core(0);
        let mut outs: Vec<Batch> = (0..ports).map(|_| Batch::new(BATCH * 2)).collect();
        let mut spares: Vec<Batch> = (0..IN_FLIGHT).map(|_| Batch::new(BATCH * 2)).collect();
        let mut input = Batch::new(BATCH);
        let mut delivered = 0u64;
        let mut generated = 0u64;
        let mut since_interval = 0u64;
        let start = Instant::now();
        let limit = Duration::from_secs_f64(run.secs);
        let mut loops = 0u32;
        loop {
            loops = loops.wrapping_add(1);
            if loops.is_multiple_of(64) && start.elapsed() >= limit {
                break;
            }
            while let Ok(mut b) = from_server.pop() {
                switch.process(server_port, &mut b, &mut outs, &pool);
                spares.push(b);
                delivered += outs[usize::from(OUTSIDE)].len() as u64;
                outs[usize::from(OUTSIDE)].recycle(&pool);
            }
            let sp = usize::from(server_port);
            if !outs[sp].is_empty() {
                if let Some(mut spare) = spares.pop() {
                    std::mem::swap(&mut outs[sp], &mut spare);
                    if let Err(rtrb::PushError::Full(b)) = to_server.push(spare) {
                        spares.push(b);
                    }
                }
                // Requests wait for the server: no new traffic until they are out.
                continue;
            }
            for _ in 0..BATCH {
                let f = &frames[trace[at % trace.len()] as usize];
                at += 1;
                let mut p = pool.packet();
                p.reserve_headroom(tern_io::DEFAULT_HEADROOM);
                if p.extend_from_slice(f).is_err() {
                    pool.put(p);
                    continue;
                }
                let _ = input.push(p);
            }
            generated += BATCH as u64;
            switch.process(INSIDE, &mut input, &mut outs, &pool);
            delivered += outs[usize::from(OUTSIDE)].len() as u64;
            outs[usize::from(OUTSIDE)].recycle(&pool);
            since_interval += BATCH as u64;
            if since_interval >= run.interval_packets && matches!(scheme, Scheme::Random | Scheme::Sketch) {
                switch.interval();
                since_interval = 0;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let answered = server_thread.join().unwrap_or(0);
        // Frames still at the server or on the rings are not counted as delivered.
        for b in outs.iter_mut().chain(spares.iter_mut()) {
            b.recycle(&pool);
        }
        let st = switch.stats();
        let offloaded = st.offloaded - offloaded_before;
        let _ = generated;
        Ok(OffloadPhase {
            pps: delivered as f64 / secs,
            switch_share: offloaded as f64 / delivered.max(1) as f64,
            server_pps: answered as f64 / secs,
            entries: switch.offload().entries(),
            drops: st.dropped() - before.dropped(),
            secs,
        })
    })
}

/// One time slot of the scaling experiment: packets each server got.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Slot {
    pub slot: usize,
    pub members: Vec<ServerId>,
    /// Packets by server under CLIP and under hash-mod.
    pub clip: Vec<u64>,
    pub hash_mod: Vec<u64>,
}

/// The scaling experiment's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Scaling {
    pub slots: Vec<Slot>,
    /// Live flows whose server changed at some point.
    pub flows_moved: u64,
    pub flows_moved_hash_mod: u64,
    /// Live flows at the membership changes (the flows either scheme could move).
    pub live_at_changes: Vec<u64>,
    pub packets: u64,
    pub delivered: u64,
}

/// Figure 7's events on frames: four sets of `per_set` flows; the group goes {0} → {0,1} →
/// {0,1,2} → {1,2} at slots 10, 20, 30 of 40; set 1 runs from slot 0 to 34, set 2 from 0 to
/// 40, set 3 from 15, set 4 from 25; each live flow sends one packet a slot.
pub fn scaling(per_set: u32) -> Result<Scaling, String> {
    let program = Program::parse(SNAT_PROGRAM)?;
    let cfg = SwitchConfig {
        ports: 5,
        servers: vec![3, 4, 5],
        members: vec![0],
        routes: vec![Route {
            prefix: "0.0.0.0/0".parse().map_err(|e| format!("{e}"))?,
            port: OUTSIDE,
            mac: [2, 0, 0, 0, 0, 9],
        }],
        offload_enabled: false,
        ..SwitchConfig::default()
    };
    let switch = Switch::new(program, cfg).map_err(|e| e.to_string())?;
    let servers = (0..3u8)
        .map(|s| {
            let snat = Snat::for_server(u16::from(s))?;
            Ok(Server::new(tern_wire::clip::DEFAULT_ETHERTYPE, 1, Box::new(snat), 3))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let mut c = Cluster::new(switch, servers);
    let sets: [(u32, usize, usize); 4] = [(0, 0, 34), (1, 0, 40), (2, 15, 40), (3, 25, 40)];
    let events: [(usize, &[ServerId]); 3] = [(10, &[0, 1]), (20, &[0, 1, 2]), (30, &[1, 2])];
    let mut members: Vec<ServerId> = vec![0];
    let mut clip_server: HashMap<u32, ServerId> = HashMap::new();
    let mut hm_server: HashMap<u32, ServerId> = HashMap::new();
    let (mut moved, mut moved_hm) = (hashbrown::HashSet::new(), hashbrown::HashSet::new());
    let mut slots = Vec::new();
    let mut live_at_changes = Vec::new();
    let (mut packets, mut delivered) = (0u64, 0u64);
    let frames: Vec<Vec<u8>> = (0..4 * per_set).map(|f| flow_frame(f, 64)).collect();
    let ids: Vec<FlowId> = frames.iter().map(|f| crate::flow::flow_id(f).unwrap_or(0)).collect();
    for slot in 0..40 {
        if let Some((_, m)) = events.iter().find(|e| e.0 == slot) {
            let live = c.live_flows();
            live_at_changes.push(live.len() as u64);
            c.switch.change_group(m, &live).map_err(|e| e.to_string())?;
            members = m.to_vec();
        }
        let hm = HashMod { members: members.clone() };
        let mut clip_count = vec![0u64; 3];
        let mut hm_count = vec![0u64; 3];
        for &(set, from, to) in &sets {
            if slot < from || slot >= to {
                continue;
            }
            for f in set * per_set..(set + 1) * per_set {
                let out = c.send(INSIDE, &[&frames[f as usize]]);
                packets += 1;
                delivered += out.len() as u64;
                let Some((_, g)) = out.first() else { continue };
                // The pair's address names the server (server s hands out 192.0.2.s+1).
                let s = ServerId::from(g[26 + 3]).saturating_sub(1);
                clip_count[usize::from(s).min(2)] += 1;
                if *clip_server.entry(f).or_insert(s) != s {
                    moved.insert(f);
                }
                let h = hm.pick(ids[f as usize]).unwrap_or(0);
                hm_count[usize::from(h).min(2)] += 1;
                if *hm_server.entry(f).or_insert(h) != h {
                    moved_hm.insert(f);
                }
            }
        }
        // Flows of a stopped set end: their servers forget them after the idle time (3 slots).
        c.now_ns += 1;
        for s in &mut c.servers {
            let ended = s.expire(c.now_ns);
            c.switch.unpin(&ended);
        }
        slots.push(Slot { slot, members: members.clone(), clip: clip_count, hash_mod: hm_count });
    }
    Ok(Scaling {
        slots,
        flows_moved: moved.len() as u64,
        flows_moved_hash_mod: moved_hm.len() as u64,
        live_at_changes,
        packets,
        delivered,
    })
}

/// The TCP retransmission detection program the demo and tests run (examples/switch/trd.toml).
pub const TRD_PROGRAM: &str = include_str!("../../../examples/switch/trd.toml");

/// A switch running [`TRD_PROGRAM`] with `servers` servers (ports 3.., all in the group), each
/// over the register indices of its slice below `registers`; routes to the inside
/// (10.0.0.0/8, port 1) and the outside (the rest, port 2).
pub fn trd_cluster(servers: u16, registers: u32) -> Result<Cluster, String> {
    let program = Program::parse(TRD_PROGRAM)?;
    let id = program.id;
    let cfg = SwitchConfig {
        ports: 2 + servers,
        servers: (0..servers).map(|s| 3 + s).collect(),
        members: (0..servers).collect(),
        routes: vec![
            Route { prefix: "0.0.0.0/0".parse().map_err(|e| format!("{e}"))?, port: OUTSIDE, mac: [2, 0, 0, 0, 0, 9] },
            Route { prefix: "10.0.0.0/8".parse().map_err(|e| format!("{e}"))?, port: INSIDE, mac: [2, 0, 0, 0, 0, 1] },
        ],
        offload_enabled: false,
        ..SwitchConfig::default()
    };
    let switch = Switch::new(program, cfg).map_err(|e| e.to_string())?;
    let servers = (0..servers)
        .map(|s| {
            let cfg = crate::trd::TrdConfig { registers, ..crate::trd::TrdConfig::for_server(s)? };
            Ok(Server::new(
                tern_wire::clip::DEFAULT_ETHERTYPE,
                id,
                Box::new(crate::server::TrdHandler::new(cfg)?),
                u64::MAX,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Cluster::new(switch, servers))
}

/// What [`lossy_connections`] saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TrdRun {
    /// Data segments the senders sent, and those they sent again.
    pub segments: u64,
    pub resent: u64,
    /// Before the connections closed: retransmissions in the switch's per-index registers and
    /// in `released`, and those the servers checked themselves.
    pub in_switch: u64,
    pub at_servers: u64,
    /// After they closed: `released` (every index's count moved there) and the servers'.
    pub released: u64,
    pub at_servers_closed: u64,
    /// Directions given an index, and entries the switch put in and took out by response.
    pub indexed: u64,
    pub installed: u64,
    pub removed: u64,
    /// Frames the switch or a server dropped.
    pub dropped: u64,
}

/// A handler counter over all of a cluster's servers.
pub fn handler_count(c: &Cluster, name: &str) -> u64 {
    c.servers.iter().flat_map(|s| s.handler().counters()).filter(|(n, _)| *n == name).map(|(_, v)| v).sum()
}

/// A TCP segment from `src`:`sp` to `dst`:`dp` with `seq`, `flags` and `payload`.
#[allow(clippy::too_many_arguments)]
pub fn tcp_segment(src: [u8; 4], dst: [u8; 4], sp: u16, dp: u16, seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(54 + payload.len());
    tern_wire::frame::build_tcp4(&mut f, [2; 6], [4; 6], src, dst, sp, dp, 64, payload);
    f[38..42].copy_from_slice(&seq.to_be_bytes());
    f[47] = flags;
    let end = f.len();
    tern_wire::frame::fill_l4_checksum(&mut f, (26, 30), (30, 34), 6, 34, end, 50);
    f
}

/// `conns` TCP connections from 10.0.x.y to 198.51.100.7:80 through `c`: each opens (SYN out,
/// SYN-ACK back, ACK out), sends `segments` data segments of 100 bytes (sequence numbers
/// starting near 2^32, so some wrap), of which a share `loss` (seeded) is lost on the wire
/// after the switch and sent again 3 segments later, with a bare ACK back every 10 rounds;
/// then both directions close with FIN.
pub fn lossy_connections(c: &mut Cluster, conns: u16, segments: usize, loss: f64, seed: u64) -> Result<TrdRun, String> {
    lossy_connections_failing(c, conns, segments, loss, seed, None)
}

/// [`lossy_connections`], and with `fail` = (round, server): before that round of data the
/// server dies and the heartbeats fail it over to its buddy (`c.buddy`), which goes on with
/// its directions from the replicas it took.
pub fn lossy_connections_failing(
    c: &mut Cluster,
    conns: u16,
    segments: usize,
    loss: f64,
    seed: u64,
    fail: Option<(usize, u16)>,
) -> Result<TrdRun, String> {
    use rand::Rng;
    const SYN: u8 = 0x02;
    const ACK: u8 = 0x10;
    const FIN: u8 = 0x01;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let server = [198, 51, 100, 7];
    let client = |i: u16| [10, 0, (i >> 8) as u8, i as u8 + 1];
    let dropped_at_start = c.switch.stats().dropped();
    let mut run = TrdRun::default();
    let mut seqs: Vec<u32> = (0..conns).map(|i| (u32::MAX - 3000).wrapping_add(u32::from(i) * 997)).collect();
    for i in 0..conns {
        let k = usize::from(i);
        c.send(INSIDE, &[&tcp_segment(client(i), server, 40000 + i, 80, seqs[k], SYN, b"")]);
        seqs[k] = seqs[k].wrapping_add(1);
        c.send(OUTSIDE, &[&tcp_segment(server, client(i), 80, 40000 + i, 5000, SYN | ACK, b"")]);
        c.send(INSIDE, &[&tcp_segment(client(i), server, 40000 + i, 80, seqs[k], ACK, b"")]);
    }
    let mut pending: Vec<Vec<(u32, usize)>> = vec![Vec::new(); usize::from(conns)];
    for round in 0..segments {
        if let Some((at, dead)) = fail
            && at == round
        {
            c.heartbeats();
            c.alive[usize::from(dead)] = false;
            c.now_ns += 400_000_000;
            if c.heartbeats() != vec![dead] {
                return Err(format!("server {dead} was not failed over"));
            }
        }
        for i in 0..conns {
            let k = usize::from(i);
            let seq = seqs[k];
            seqs[k] = seq.wrapping_add(100);
            let payload = [round as u8; 100];
            if c.send(INSIDE, &[&tcp_segment(client(i), server, 40000 + i, 80, seq, ACK, &payload)]).len() != 1 {
                return Err(format!("connection {i}: segment {round} did not come out of the switch"));
            }
            run.segments += 1;
            if rng.random_bool(loss) {
                pending[k].push((seq, round + 3));
            }
            // Resend what is due (the receiver's duplicate ACKs told the sender).
            let due: Vec<u32> = pending[k].iter().filter(|p| p.1 == round).map(|p| p.0).collect();
            pending[k].retain(|p| p.1 != round);
            for s in due {
                c.send(INSIDE, &[&tcp_segment(client(i), server, 40000 + i, 80, s, ACK, &payload)]);
                run.resent += 1;
            }
            if round % 10 == 0 {
                c.send(OUTSIDE, &[&tcp_segment(server, client(i), 80, 40000 + i, 5001, ACK, b"")]);
            }
        }
    }
    let reg = |c: &Cluster, name: &str| c.switch.pipeline().register(name).map_or(0, |r| r.iter().sum::<u64>());
    run.in_switch = reg(c, "retransmissions") + reg(c, "released");
    run.at_servers = handler_count(c, "retransmissions");
    run.indexed = handler_count(c, "indexed");
    for i in 0..conns {
        let k = usize::from(i);
        c.send(INSIDE, &[&tcp_segment(client(i), server, 40000 + i, 80, seqs[k], FIN | ACK, b"")]);
        c.send(OUTSIDE, &[&tcp_segment(server, client(i), 80, 40000 + i, 5001, FIN | ACK, b"")]);
    }
    run.released = reg(c, "released") + reg(c, "retransmissions");
    run.at_servers_closed = handler_count(c, "retransmissions");
    let st = c.switch.stats();
    run.installed = st.installed_by_response;
    run.removed = st.removed_by_response;
    run.dropped =
        st.dropped() - dropped_at_start + c.servers.iter().map(|s| s.stats().drops.iter().sum::<u64>()).sum::<u64>();
    Ok(run)
}
