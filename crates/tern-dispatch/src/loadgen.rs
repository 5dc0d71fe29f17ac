//! The closed-loop KV load generator (QingNiao §5.1): client threads, each one QNP endpoint
//! spread over several UDP flows (so kernel flow hashing has something to spread), keep
//! `concurrency` GETs outstanding; keys are drawn by [`KeySampler`] (a partition uniformly,
//! Zipf(0.9) within it). Every response's value is checked against the key's.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hashbrown::HashMap;
use hdrhistogram::Histogram;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tern_io::fault::{FaultConfig, FaultInjector};
use tern_io::udp::MultiUdpPort;
use tern_io::{DEFAULT_BATCH, Pool, Port};

use crate::apps::kv::{Get, Value};
use crate::kv::{GET, KeySampler, KvLayout, PARTITIONS};
use tern_qnp::QnpConfig;
use tern_qnp::runtime::{Completion, QnpClient};

/// A load run.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// The server.
    pub server: SocketAddr,
    /// Application id the GETs carry.
    pub app_id: u8,
    /// The keys the server holds.
    pub layout: KvLayout,
    /// Client threads.
    pub threads: usize,
    /// UDP flows (sockets) per client thread.
    pub flows: usize,
    /// GETs outstanding per client thread.
    pub concurrency: usize,
    /// How long to run.
    pub duration: Duration,
    /// Stop after this many completed requests (all threads together), if set.
    pub requests: Option<u64>,
    /// Faults on every client socket (both directions).
    pub faults: FaultConfig,
    /// Protocol configuration.
    pub qnp: QnpConfig,
    /// Seed of the key draws.
    pub seed: u64,
    /// Cores the client threads may run on (empty: no restriction).
    pub cores: Vec<usize>,
    /// Only draw keys of these partitions (empty: all).
    pub partitions: Vec<u32>,
    /// The in-process network of a server on the `mem` transport (`server` is then its
    /// address); `None`: kernel UDP.
    pub net: Option<tern_io::memnet::MemNet>,
}

impl LoadOptions {
    /// Defaults against `server` for `layout`.
    pub fn new(server: SocketAddr, layout: KvLayout) -> LoadOptions {
        LoadOptions {
            server,
            app_id: crate::kv::APP_ID,
            layout,
            threads: 1,
            flows: 16,
            concurrency: 64,
            duration: Duration::from_secs(1),
            requests: None,
            faults: FaultConfig::default(),
            qnp: QnpConfig::default(),
            seed: 1,
            cores: Vec::new(),
            partitions: Vec::new(),
            net: None,
        }
    }
}

/// What a load run measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadReport {
    /// GETs answered.
    pub completed: u64,
    /// GETs that failed (transport gave up, or undecodable response).
    pub failed: u64,
    /// Answers saying the key was not found.
    pub not_found: u64,
    /// Answers with a value other than the key's.
    pub wrong_value: u64,
    /// Requests retransmitted.
    pub retransmissions: u64,
    /// Of those, the ones the response showed were not needed (the earlier copy was answered).
    pub spurious_retransmissions: u64,
    /// GETs sent per partition.
    pub per_partition: Vec<u64>,
    /// Answered GETs per second.
    pub rps: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// 99.9th percentile latency, µs.
    pub p999_us: f64,
    /// Largest latency, µs.
    pub max_us: f64,
    /// Wall time, s.
    pub elapsed_s: f64,
    /// The clients' QNP counters, summed over threads (for diagnosing failures).
    pub client_qnp: tern_qnp::Stats,
    /// The clients' socket counters, summed over threads.
    pub client_port: tern_io::PortStats,
    /// Threads that gave up waiting at the end (nothing came back for the retry window).
    pub gave_up: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1000.0 }
}

struct ThreadResult {
    report: LoadReport,
    hist: Histogram<u64>,
}

/// Runs the load and reports.
pub fn run(opts: &LoadOptions) -> io::Result<LoadReport> {
    opts.faults.validate().map_err(io::Error::other)?;
    if opts.threads == 0 || opts.flows == 0 || opts.concurrency == 0 {
        return Err(io::Error::other("threads, flows and concurrency must be at least 1"));
    }
    if let Some(p) = opts.partitions.iter().find(|&&p| p >= PARTITIONS) {
        return Err(io::Error::other(format!("partition {p} out of range 0..{PARTITIONS}")));
    }
    let sampler = Arc::new(KeySampler::new(&opts.layout).map_err(io::Error::other)?);
    let start = Instant::now();
    let mut handles = Vec::new();
    for t in 0..opts.threads {
        let (o, sampler) = (opts.clone(), sampler.clone());
        let share = opts.requests.map(|n| n / opts.threads as u64 + u64::from((t as u64) < n % opts.threads as u64));
        handles.push(thread::Builder::new().name(format!("tern-load-{t}")).spawn(move || {
            if !o.cores.is_empty() {
                tern_io::pin_to_cores(&o.cores);
            }
            client_thread(&o, &sampler, t, share)
        })?);
    }
    let mut total = LoadReport { per_partition: vec![0; PARTITIONS as usize], ..LoadReport::default() };
    let mut hist = histogram();
    let mut first_err = None;
    for h in handles {
        match h.join().map_err(|_| io::Error::other("load thread panicked"))? {
            Ok(r) => {
                let x = r.report;
                total.completed += x.completed;
                total.failed += x.failed;
                total.not_found += x.not_found;
                total.wrong_value += x.wrong_value;
                total.retransmissions += x.retransmissions;
                total.spurious_retransmissions += x.spurious_retransmissions;
                total.gave_up += x.gave_up;
                total.client_port += x.client_port;
                total.client_qnp += x.client_qnp;
                for (a, b) in total.per_partition.iter_mut().zip(&x.per_partition) {
                    *a += b;
                }
                let _ = hist.add(&r.hist);
            }
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let elapsed = start.elapsed().as_secs_f64();
    total.elapsed_s = elapsed;
    total.rps = total.completed as f64 / elapsed.max(1e-9);
    total.p50_us = us(&hist, 0.5);
    total.p99_us = us(&hist, 0.99);
    total.p999_us = us(&hist, 0.999);
    total.max_us = if hist.is_empty() { 0.0 } else { hist.max() as f64 / 1000.0 };
    Ok(total)
}

fn client_thread(o: &LoadOptions, sampler: &KeySampler, t: usize, share: Option<u64>) -> io::Result<ThreadResult> {
    let pool = Pool::new(8192, tern_io::DEFAULT_BUF_SIZE);
    let faults = FaultConfig { seed: o.faults.seed.wrapping_add(t as u64), ..o.faults.clone() };
    let steer = tern_wire::qnp::field::REQ_ID.start;
    match &o.net {
        None => {
            let port = MultiUdpPort::bind(o.server.ip(), o.flows, steer, &pool)?;
            client_loop(o, sampler, t, share, FaultInjector::new(port, &pool, faults), &pool)
        }
        Some(net) => {
            let port = net.client(o.flows, steer, 8192);
            client_loop(o, sampler, t, share, FaultInjector::new(port, &pool, faults), &pool)
        }
    }
}

fn client_loop<P: Port>(
    o: &LoadOptions,
    sampler: &KeySampler,
    t: usize,
    share: Option<u64>,
    port: P,
    pool: &Pool,
) -> io::Result<ThreadResult> {
    let pool = pool.clone();
    let mut client = QnpClient::new(port, &pool, o.qnp.clone(), o.app_id, o.server);
    let mut rng = SmallRng::seed_from_u64(o.seed ^ ((t as u64 + 1) << 32));
    let mut report = LoadReport { per_partition: vec![0; PARTITIONS as usize], ..LoadReport::default() };
    let mut hist = histogram();
    let mut outstanding: HashMap<u32, (u32, u64)> = HashMap::with_capacity(o.concurrency * 2);
    let mut out: Vec<Completion<Value>> = Vec::with_capacity(DEFAULT_BATCH * 2);
    let mut get = Get { key: Vec::with_capacity(crate::kv::KEY_LEN) };
    let deadline = Instant::now() + o.duration;
    let mut sending = true;
    loop {
        let done = report.completed + report.failed;
        if sending && (Instant::now() >= deadline || share.is_some_and(|s| done + outstanding.len() as u64 >= s)) {
            sending = false;
        }
        while sending
            && outstanding.len() < o.concurrency
            && share.is_none_or(|s| done + (outstanding.len() as u64) < s)
        {
            let (mut p, mut i) = sampler.sample(&mut rng);
            if !o.partitions.is_empty() {
                p = o.partitions[(i as usize + p as usize) % o.partitions.len()];
                i = i.min(o.layout.keys_in(p) - 1);
            }
            sampler.key_into(p, i, &mut get.key);
            let id = client.send_req(GET, &get).map_err(io::Error::other)?;
            outstanding.insert(id, (p, i));
            report.per_partition[p as usize] += 1;
        }
        if outstanding.is_empty() {
            break;
        }
        let wait = if sending { Duration::from_millis(5) } else { Duration::from_millis(50) };
        let got = client.recv_resp(&mut out, wait)?;
        if got == 0 && !sending && Instant::now() > deadline + o.qnp.max_rto * (o.qnp.max_retries + 2) {
            // Nothing more will come back.
            report.failed += outstanding.len() as u64;
            report.gave_up += 1;
            break;
        }
        for c in out.drain(..) {
            match c {
                Completion::Response { req_id, resp, latency } => {
                    let Some((p, i)) = outstanding.remove(&req_id) else { continue };
                    report.completed += 1;
                    let _ = hist.record((latency.as_nanos() as u64).max(1));
                    if !resp.found {
                        report.not_found += 1;
                    } else if resp.value != o.layout.value(p, i) {
                        report.wrong_value += 1;
                    }
                }
                Completion::Failed { req_id, .. } => {
                    outstanding.remove(&req_id);
                    report.failed += 1;
                }
            }
        }
    }
    client.flush()?;
    report.retransmissions = client.core().stats().retransmissions;
    report.spurious_retransmissions = client.core().stats().spurious_retransmissions;
    report.client_qnp = *client.core().stats();
    report.client_port = client.port().stats();
    Ok(ThreadResult { report, hist })
}
