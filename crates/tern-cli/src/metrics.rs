//! The Prometheus endpoint of `serve` commands: `/metrics` (text exposition, encoded by
//! `prometheus-client` from the engine's counters at scrape time), `/ready` and `/config`.

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tern_dispatch::qnp::DropReason;
use tern_dispatch::rsd::RsdDrop;
use tern_dispatch::server::{Shared, total};

/// Metrics of a dispatch server, read from its published counters at each scrape.
#[derive(Debug)]
pub struct DispatchCollector {
    /// The server's counters.
    pub shared: Arc<Shared>,
    /// Rule names by rule index (replaced on reload).
    pub rule_names: Arc<Mutex<Vec<(usize, String)>>>,
}

type Labels = Vec<(Cow<'static, str>, String)>;

fn counter_family(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

fn label(k: &'static str, v: impl ToString) -> Labels {
    vec![(Cow::Borrowed(k), v.to_string())]
}

impl Collector for DispatchCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let snaps: Vec<_> =
            self.shared.dispatchers.iter().map(|m| m.lock().map(|s| s.clone()).unwrap_or_default()).collect();
        let t = total(&snaps);
        let rows: Vec<_> = t.rsd.per_queue.iter().enumerate().map(|(q, v)| (label("queue", q), *v)).collect();
        counter_family(
            &mut enc,
            "tern_dispatch_queue_requests",
            "Requests (first packets) the dispatchers sent to each queue.",
            &rows,
        )?;
        let names = self.rule_names.lock().map(|n| n.clone()).unwrap_or_default();
        let rows: Vec<_> = t
            .rsd
            .rule_hits
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0)
            .map(|(i, v)| {
                let name = names.iter().find(|(j, _)| *j == i).map_or_else(|| format!("#{i}"), |(_, n)| n.clone());
                (label("rule", name), *v)
            })
            .collect();
        counter_family(&mut enc, "tern_dispatch_rule_hits", "First packets each rule matched.", &rows)?;
        counter(
            &mut enc,
            "tern_dispatch_default_queue",
            "First packets no rule matched (sent to the app's default queue).",
            t.rsd.default_queue,
        )?;
        counter(
            &mut enc,
            "tern_dispatch_stash_hits",
            "Later packets whose request's decision was in the stash.",
            t.rsd.stash_hits,
        )?;
        counter(
            &mut enc,
            "tern_dispatch_stash_misses",
            "Later packets whose decision was not in the stash (dropped).",
            t.rsd.drops_of(RsdDrop::StashMiss),
        )?;
        counter(&mut enc, "tern_dispatch_received_packets", "Packets the dispatchers received.", t.rx_packets)?;
        let mut rows: Vec<_> = RsdDrop::ALL.iter().map(|r| (label("reason", r.as_str()), t.rsd.drops_of(*r))).collect();
        rows.push((label("reason", "handoff_full"), t.handoff_full));
        let mut qnp = [0u64; DropReason::ALL.len()];
        let (mut requests, mut found, mut store_errors) = (0, 0, 0);
        let mut per_worker = Vec::new();
        for (w, c) in self.shared.workers.iter().enumerate() {
            let n = c.requests.load(Ordering::Relaxed);
            per_worker.push((label("worker", w), n));
            requests += n;
            found += c.found.load(Ordering::Relaxed);
            store_errors += c.store_errors.load(Ordering::Relaxed);
            if let Ok(s) = c.qnp.lock() {
                for (a, b) in qnp.iter_mut().zip(s.drops.iter()) {
                    *a += b;
                }
            }
        }
        for (r, v) in DropReason::ALL.iter().zip(qnp) {
            rows.push((label("reason", format!("qnp_{}", r.as_str())), v));
        }
        counter_family(
            &mut enc,
            "tern_dispatch_drops",
            "Packets dropped, by reason (dispatcher reasons, full hand-off, and the workers' QNP reasons prefixed qnp_).",
            &rows,
        )?;
        counter_family(
            &mut enc,
            "tern_dispatch_worker_requests",
            "Requests each worker handled (once each).",
            &per_worker,
        )?;
        counter(&mut enc, "tern_dispatch_kv_found", "GETs whose key was found.", found)?;
        counter(&mut enc, "tern_dispatch_kv_misses", "GETs whose key was not found.", requests - found.min(requests))?;
        counter(
            &mut enc,
            "tern_dispatch_kv_store_errors",
            "GETs the store failed (answered as not found).",
            store_errors,
        )?;
        let g = enc.encode_descriptor(
            "tern_dispatch_generation",
            "The rule generation in force (1 at start, +1 per reload).",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(self.shared.generation.load(Ordering::Relaxed) as i64).encode(g)?;
        Ok(())
    }
}

/// Serves `/metrics`, `/ready` and `/config` on `addr` until `stop` is set; returns the bound
/// address.
pub fn serve(
    addr: SocketAddr,
    registry: Registry,
    config: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    thread::Builder::new().name("tern-metrics".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => {
                    let _ = answer(s, &registry, &config);
                }
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    })?;
    Ok(bound)
}

fn answer(mut s: TcpStream, registry: &Registry, config: &Mutex<String>) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let (status, ctype, body) = match path {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", body),
                Err(_) => ("500 Internal Server Error", "text/plain", "encoding failed\n".into()),
            }
        }
        "/ready" => ("200 OK", "text/plain", "ready\n".into()),
        "/config" => ("200 OK", "text/plain", config.lock().map(|c| c.clone()).unwrap_or_default()),
        _ => ("404 Not Found", "text/plain", "try /metrics, /ready or /config\n".into()),
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
