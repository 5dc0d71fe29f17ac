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

pub(crate) type Labels = Vec<(Cow<'static, str>, String)>;

pub(crate) fn counter_family(
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

pub(crate) fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

pub(crate) fn label(k: &'static str, v: impl ToString) -> Labels {
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

/// More paths for the endpoint: given a path, a JSON body (or `None`: not found).
pub type ExtraFn = dyn Fn(&str) -> Option<String> + Send;
/// See [`ExtraFn`].
pub type Extra = Box<ExtraFn>;

/// Serves `/metrics`, `/ready`, `/config` (and whatever `extra` answers, as JSON) on `addr`
/// until `stop` is set; returns the bound address.
pub fn serve(
    addr: SocketAddr,
    registry: Registry,
    config: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    extra: Option<Extra>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    thread::Builder::new().name("tern-metrics".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => {
                    let _ = answer(s, &registry, &config, extra.as_deref());
                }
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    })?;
    Ok(bound)
}

fn answer(
    mut s: TcpStream,
    registry: &Registry,
    config: &Mutex<String>,
    extra: Option<&ExtraFn>,
) -> std::io::Result<()> {
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
        p => match extra.and_then(|f| f(p)) {
            Some(body) => ("200 OK", "application/json", body),
            None => ("404 Not Found", "text/plain", "try /metrics, /ready or /config\n".into()),
        },
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Metrics of a flow switch, asked of its data-path thread at each scrape.
#[derive(Debug)]
pub struct FlowCollector {
    /// The runtime's control channel.
    pub control: Mutex<std::sync::mpsc::Sender<tern_flow::runtime::Control>>,
}

impl FlowCollector {
    fn snapshot(&self) -> Option<tern_flow::runtime::Snapshot> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.control.lock().ok()?.send(tern_flow::runtime::Control::Snapshot(tx)).ok()?;
        rx.recv_timeout(Duration::from_secs(2)).ok()
    }
}

impl Collector for FlowCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        use tern_flow::pipeline::DropReason;
        use tern_flow::slowpath::SlowDrop;
        let Some(s) = self.snapshot() else { return Ok(()) };
        let per_port = |f: fn(&tern_io::PortStats) -> u64| -> Vec<(Labels, u64)> {
            s.ports.iter().map(|(n, st)| (label("port", n), f(st))).collect()
        };
        counter_family(&mut enc, "tern_flow_rx_packets", "Frames received, per port.", &per_port(|p| p.rx_packets))?;
        counter_family(&mut enc, "tern_flow_rx_bytes", "Bytes received, per port.", &per_port(|p| p.rx_bytes))?;
        counter_family(&mut enc, "tern_flow_tx_packets", "Frames sent, per port.", &per_port(|p| p.tx_packets))?;
        counter_family(&mut enc, "tern_flow_tx_bytes", "Bytes sent, per port.", &per_port(|p| p.tx_bytes))?;
        counter_family(
            &mut enc,
            "tern_flow_port_dropped_packets",
            "Frames a port dropped (receive: truncated or unsegmented; send: queue full or refused).",
            &per_port(|p| p.rx_dropped + p.tx_dropped),
        )?;
        counter(
            &mut enc,
            "tern_flow_cache_hits_packets",
            "Frames that hit a cached rule (fast path).",
            s.pipeline.hits,
        )?;
        counter(
            &mut enc,
            "tern_flow_fast_path_packets",
            "Of the cache hits, frames the pipeline's fast path carried (common IPv4 frames under a compiled rewrite).",
            s.pipeline.fast_path,
        )?;
        counter(
            &mut enc,
            "tern_flow_cache_misses_packets",
            "IP frames no cached rule matched (sent to the slow path).",
            s.pipeline.misses,
        )?;
        counter(&mut enc, "tern_flow_upcalls", "Misses the slow path decided.", s.cache.upcalls)?;
        counter(
            &mut enc,
            "tern_flow_upcalls_rate_limited",
            "Misses dropped by the upcall rate limit.",
            s.cache.upcall_rate_limited,
        )?;
        let installed =
            vec![(label("table", "em"), s.cache.installed_exact), (label("table", "lpm"), s.cache.installed_prefix)];
        counter_family(&mut enc, "tern_flow_rules_installed", "Cached rules installed, per table.", &installed)?;
        counter(
            &mut enc,
            "tern_flow_rules_evicted_idle",
            "Cached rules deleted after the idle timeout.",
            s.cache.evicted_idle,
        )?;
        counter(
            &mut enc,
            "tern_flow_cache_full",
            "Decisions not cached: the flow limit was reached.",
            s.cache.cache_full,
        )?;
        counter(
            &mut enc,
            "tern_flow_install_refused",
            "Installs the OFU's full FIFO refused.",
            s.cache.install_refused,
        )?;
        counter(&mut enc, "tern_flow_uncacheable", "Decisions no cached rule could express.", s.cache.uncacheable)?;
        counter(
            &mut enc,
            "tern_flow_slow_forwarded_packets",
            "Frames the slow path forwarded.",
            s.cache.slow_forwarded,
        )?;
        let mut rows: Vec<(Labels, u64)> =
            DropReason::all().map(|r| (label("reason", r.as_str()), s.pipeline.dropped(r))).collect();
        rows.extend(
            SlowDrop::ALL
                .iter()
                .map(|r| (label("reason", format!("slow_{}", r.as_str())), s.slow.dropped[*r as usize])),
        );
        counter_family(
            &mut enc,
            "tern_flow_drops_packets",
            "Frames dropped, by reason (pipeline reasons; slow-path reasons prefixed slow_).",
            &rows,
        )?;
        let ofu: Vec<(Labels, u64)> = s.ofus.iter().map(|o| (label("ofu", o.0), o.2)).collect();
        counter_family(&mut enc, "tern_flow_ofu_instructions_applied", "Instructions each OFU's FSM applied.", &ofu)?;
        let ofu: Vec<(Labels, u64)> = s.ofus.iter().map(|o| (label("ofu", o.0), o.3)).collect();
        counter_family(&mut enc, "tern_flow_ofu_fifo_full", "Instructions refused: the OFU's FIFO was full.", &ofu)?;
        let ofu: Vec<(Labels, u64)> = s.ofus.iter().map(|o| (label("ofu", o.0), o.4)).collect();
        counter_family(&mut enc, "tern_flow_ofu_instructions_failed", "Instructions the FSM could not apply.", &ofu)?;
        let mut g =
            enc.encode_descriptor("tern_flow_cached_rules", "Cached rules now, per table.", None, MetricType::Gauge)?;
        for (t, n) in [("em", s.cached.0), ("lpm", s.cached.1)] {
            ConstGauge::new(n as i64).encode(g.encode_family(&label("table", t))?)?;
        }
        Ok(())
    }
}
