//! `tern rpc serve`'s metrics (`tern_rpc_*`), read from its lanes' counters at each scrape.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use tern_endpoint::Status;
use tern_qnp::DropReason;

use super::serve::Counters;
use crate::metrics::{counter, counter_family, label};

/// Metrics of an RPC server.
#[derive(Debug)]
pub struct RpcCollector {
    /// The lanes' counters.
    pub counters: Arc<Counters>,
}

impl Collector for RpcCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let c = &self.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let rows: Vec<_> =
            Status::ALL.iter().enumerate().map(|(i, s)| (label("status", s.name()), get(&c.calls[i]))).collect();
        counter_family(&mut enc, "tern_rpc_calls", "Calls answered, by status (bad requests by reason).", &rows)?;
        counter(
            &mut enc,
            "tern_rpc_images_on_unit",
            "Images compressed and sealed on a compute unit.",
            get(&c.on_unit),
        )?;
        counter(&mut enc, "tern_rpc_images_on_host", "Images compressed and sealed on the host.", get(&c.on_host))?;
        counter(
            &mut enc,
            "tern_rpc_moved_values",
            "Values moved between host and device memory.",
            get(&c.moved_values),
        )?;
        counter(&mut enc, "tern_rpc_moved_bytes", "Bytes moved between host and device memory.", get(&c.moved_bytes))?;
        let rows: Vec<_> = DropReason::ALL
            .iter()
            .enumerate()
            .map(|(j, r)| (label("reason", r.as_str()), c.drops.iter().map(|l| get(&l[j])).sum()))
            .collect();
        counter_family(&mut enc, "tern_rpc_qnp_drops", "Packets (or requests) QNP dropped, by reason.", &rows)?;
        let rows: Vec<_> = c.parts().into_iter().map(|(n, v)| (label("what", n), v)).collect();
        counter_family(
            &mut enc,
            "tern_rpc_parts",
            "Calls and replies in parts: parts taken and sent, calls put together, and those refused or expired, by what.",
            &rows,
        )
    }
}
