//! The dispatch server's metrics, read from its published counters at each scrape.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use tern_dispatch::rsd::RsdDrop;
use tern_dispatch::server::{Shared, total};

use crate::metrics::{counter, counter_family, label};

/// Metrics of a dispatch server, read from its published counters at each scrape.
#[derive(Debug)]
pub struct DispatchCollector {
    /// The server's counters.
    pub shared: Arc<Shared>,
    /// Rule names by rule index (replaced on reload).
    pub rule_names: Arc<Mutex<Vec<(usize, String)>>>,
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
        // Every rule in force, hits or not (a rule that never matched shows 0).
        let names = self.rule_names.lock().map(|n| n.clone()).unwrap_or_default();
        let rows: Vec<_> = names
            .iter()
            .map(|(i, name)| (label("rule", name), t.rsd.rule_hits.get(*i).copied().unwrap_or(0)))
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
        counter(
            &mut enc,
            "tern_dispatch_handed_off_packets",
            "Packets an RSD in a worker decided for another worker and moved into its ring.",
            t.handed_off,
        )?;
        let rows: Vec<_> = self.shared.drop_counts().into_iter().map(|(name, v)| (label("reason", name), v)).collect();
        let (mut requests, mut found, mut store_errors, mut evicted) = (0, 0, 0, 0);
        let mut per_worker = Vec::new();
        for (w, c) in self.shared.workers.iter().enumerate() {
            let n = c.requests.load(Ordering::Relaxed);
            per_worker.push((label("worker", w), n));
            requests += n;
            found += c.found.load(Ordering::Relaxed);
            store_errors += c.store_errors.load(Ordering::Relaxed);
            if let Ok(s) = c.qnp.lock() {
                evicted += s.dedup_evicted;
            }
        }
        counter_family(
            &mut enc,
            "tern_dispatch_drops",
            "Datagrams dropped, by reason (dispatcher reasons, full hand-off, oversize datagrams, and the workers' QNP reasons prefixed qnp_; docs/qnp.md §8).",
            &rows,
        )?;
        counter_family(
            &mut enc,
            "tern_dispatch_worker_requests",
            "Requests each worker handled (once each).",
            &per_worker,
        )?;
        counter(
            &mut enc,
            "tern_dispatch_dedup_evicted",
            "Remembered requests the exactly-once memory's bounds forgot before the client's ack floor passed them (a retransmission after that would run the handler again).",
            evicted,
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use tern_dispatch::server::{DispatcherStats, WorkerCounters, drop_reasons};

    use super::*;

    /// `/metrics` labels drops with exactly the names of `drop_reasons()` (the list the docs'
    /// table is generated from), zeros included, and lists every rule, hits or not.
    #[test]
    fn metrics_use_the_documented_reasons_and_export_zeros() {
        let shared = Arc::new(Shared {
            dispatchers: vec![Mutex::new(DispatcherStats::default())],
            workers: vec![WorkerCounters::default(), WorkerCounters::default()],
            applied: vec![AtomicU64::new(1)],
            generation: AtomicU64::new(1),
            receiving: std::sync::atomic::AtomicUsize::new(0),
        });
        let rule_names = Arc::new(Mutex::new(vec![(0, "never-hit".to_string()), (1, "other".to_string())]));
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(DispatchCollector { shared, rule_names }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let labels: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("tern_dispatch_drops_total{reason=\""))
            .filter_map(|l| l.split('"').next())
            .collect();
        let want: Vec<String> = drop_reasons().into_iter().map(|d| d.name).collect();
        assert_eq!(labels, want);
        assert!(text.contains("tern_dispatch_rule_hits_total{rule=\"never-hit\"} 0"), "{text}");
    }
}
