//! The flow switch's metrics, asked of its data-path thread at each scrape.

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::metrics::{Labels, counter, counter_family, label};

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
        rows.extend(s.slow_drops().into_iter().map(|(r, n)| (label("reason", format!("slow_{r}")), n)));
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
