//! The dispatch server's metrics, read from its published counters at each scrape.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use tern_dispatch::rsd::RsdDrop;
use tern_dispatch::server::{Shared, total};
use tern_qnp::DropReason;

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
        let (mut requests, mut found, mut store_errors, mut evicted) = (0, 0, 0, 0);
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
                evicted += s.dedup_evicted;
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
