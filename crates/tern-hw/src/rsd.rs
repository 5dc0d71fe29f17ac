//! Timing model of QingNiao's receive-side dispatcher (RSD), from a profile's numbers.
//!
//! A request's first packet costs `rsd.first_packet + k · rsd.skip_and_check` cycles in one RSD,
//! where `k` is the number of skip-and-checks its match walks (QingNiao Table 1: 9 + 6k); each
//! later packet costs `rsd.stash_hit` cycles (the decision is cached in the stash). `rsd.parallel`
//! RSDs work side by side (requests are sharded by request id), so the RSD stage sustains
//! `parallel · clock / cycles` requests per second. The DMA path and the line rate bound the rest;
//! the projection reports whichever is lowest as the bottleneck.
//!
//! ```
//! use tern_hw::{Profile, rsd::RsdModel};
//! let m = RsdModel::from_profile(&Profile::builtin("qingniao-u250").unwrap()).unwrap();
//! assert_eq!(m.first_packet_cycles(48), 297);
//! let p = m.project(48, 1, 128);
//! assert!((p.requests_per_s / 1e6 - 3.37).abs() < 0.01);
//! assert_eq!(p.bottleneck, tern_hw::rsd::Bottleneck::Rsd);
//! ```

use serde::Serialize;

use crate::{Profile, cost, latency, rate, resource};

/// Ethernet preamble, start delimiter and inter-frame gap: bytes on the wire besides the frame.
const WIRE_OVERHEAD_BYTES: f64 = 20.0;

/// What limits projected throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// The RSDs' cycles.
    Rsd,
    /// The host DMA path.
    Dma,
    /// The Ethernet line rate.
    LineRate,
}

impl Bottleneck {
    /// Name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Bottleneck::Rsd => "rsd",
            Bottleneck::Dma => "dma",
            Bottleneck::LineRate => "line_rate",
        }
    }
}

/// A projection for one request shape.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Projection {
    /// Skip-and-checks on the request's first packet.
    pub skip_and_checks: u32,
    /// Packets per request.
    pub packets: u32,
    /// RSD cycles per request (first packet plus stash hits).
    pub cycles: u64,
    /// Ingress latency of the first packet, MAC to QNP receive, in ns.
    pub ingress_latency_ns: f64,
    /// Requests per second the RSDs alone sustain.
    pub rsd_requests_per_s: f64,
    /// Requests per second the DMA path alone sustains (infinite if not modelled).
    pub dma_requests_per_s: f64,
    /// Requests per second the line alone carries (infinite if not modelled).
    pub line_requests_per_s: f64,
    /// The lowest of the three.
    pub requests_per_s: f64,
    /// Which one it is.
    pub bottleneck: Bottleneck,
}

/// The RSD timing model of a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct RsdModel {
    /// Clock in MHz.
    pub clock_mhz: f64,
    /// Cycles before the first skip-and-check.
    pub first_packet: u64,
    /// Cycles per skip-and-check.
    pub skip_and_check: u64,
    /// Cycles per stash hit.
    pub stash_hit: u64,
    /// Parallel RSDs.
    pub parallel: u64,
    /// DMA ceiling in packets/s, if modelled.
    pub dma_packets_per_s: Option<f64>,
    /// Line rate in Gbit/s, if modelled.
    pub line_gbps: Option<f64>,
    /// Ingress latency besides the RSD, in ns.
    pub ingress_fixed_ns: f64,
    /// Cycles of an RSS dispatch, for comparison.
    pub rss_cycles: Option<u64>,
}

impl RsdModel {
    /// The model, if the profile has a clock and the RSD's cycle costs; `None` for `cpu`.
    pub fn from_profile(profile: &Profile) -> Option<RsdModel> {
        Some(RsdModel {
            clock_mhz: profile.clock_mhz?,
            first_packet: profile.cycles(cost::RSD_FIRST_PACKET)?,
            skip_and_check: profile.cycles(cost::RSD_SKIP_AND_CHECK)?,
            stash_hit: profile.cycles(cost::RSD_STASH_HIT).unwrap_or(0),
            parallel: profile.capacity(resource::RSD_PARALLEL).unwrap_or(1).max(1),
            dma_packets_per_s: profile.rate(rate::DMA_PACKETS_PER_S),
            line_gbps: profile.rate(rate::LINE_GBPS),
            ingress_fixed_ns: profile.latency_ns.get(latency::INGRESS_FIXED).copied().unwrap_or(0.0),
            rss_cycles: profile.cycles(cost::RSS_DISPATCH),
        })
    }

    /// Cycles for a first packet with `k` skip-and-checks.
    pub fn first_packet_cycles(&self, k: u32) -> u64 {
        // A profile's cycles are its author's: saturate rather than wrap.
        self.first_packet.saturating_add(self.skip_and_check.saturating_mul(u64::from(k)))
    }

    /// Cycles for a whole request: the first packet, then `packets - 1` stash hits.
    pub fn request_cycles(&self, k: u32, packets: u32) -> u64 {
        self.first_packet_cycles(k).saturating_add(self.stash_hit.saturating_mul(u64::from(packets.saturating_sub(1))))
    }

    /// Nanoseconds per cycle.
    pub fn ns_per_cycle(&self) -> f64 {
        1000.0 / self.clock_mhz
    }

    /// Ingress latency of a first packet with `k` skip-and-checks, in ns.
    pub fn ingress_latency_ns(&self, k: u32) -> f64 {
        self.ingress_fixed_ns + self.first_packet_cycles(k) as f64 * self.ns_per_cycle()
    }

    /// Projected throughput for requests of `packets` packets of `frame_bytes` each whose first
    /// packet walks `k` skip-and-checks.
    pub fn project(&self, k: u32, packets: u32, frame_bytes: u32) -> Projection {
        let packets = packets.max(1);
        let cycles = self.request_cycles(k, packets);
        let rsd = self.parallel as f64 * self.clock_mhz * 1e6 / cycles as f64;
        let dma = self.dma_packets_per_s.map_or(f64::INFINITY, |pps| pps / f64::from(packets));
        let line = self.line_gbps.map_or(f64::INFINITY, |gbps| {
            gbps * 1e9 / (8.0 * (f64::from(frame_bytes) + WIRE_OVERHEAD_BYTES) * f64::from(packets))
        });
        let (requests_per_s, bottleneck) =
            [(rsd, Bottleneck::Rsd), (dma, Bottleneck::Dma), (line, Bottleneck::LineRate)]
                .into_iter()
                .fold((f64::INFINITY, Bottleneck::Rsd), |best, cur| if cur.0 < best.0 { cur } else { best });
        Projection {
            skip_and_checks: k,
            packets,
            cycles,
            ingress_latency_ns: self.ingress_latency_ns(k),
            rsd_requests_per_s: rsd,
            dma_requests_per_s: dma,
            line_requests_per_s: line,
            requests_per_s,
            bottleneck,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u250() -> RsdModel {
        RsdModel::from_profile(&Profile::builtin("qingniao-u250").unwrap()).unwrap()
    }

    /// A profile's cycles past what u64 adds saturate: no request comes out cheaper than its
    /// first packet.
    #[test]
    fn huge_cycles_saturate() {
        let m = RsdModel { first_packet: u64::MAX - 1, skip_and_check: u64::MAX / 2, stash_hit: u64::MAX, ..u250() };
        assert_eq!(m.first_packet_cycles(3), u64::MAX);
        assert_eq!(m.request_cycles(3, 4), u64::MAX);
    }

    /// QingNiao Table 1: cycles exactly, and ingress latency measured on the testbed within 2%.
    #[test]
    fn reproduces_table_1() {
        let m = u250();
        let table = [(1, 15, 458.0), (2, 21, 479.0), (4, 33, 526.0), (8, 57, 609.0)];
        let table2 = [(16, 105, 804.0), (32, 201, 1200.0), (48, 297, 1587.0)];
        for (k, cycles, latency) in table.into_iter().chain(table2) {
            assert_eq!(m.first_packet_cycles(k), cycles, "k = {k}");
            let got = m.ingress_latency_ns(k);
            let err = (got - latency).abs() / latency;
            assert!(err < 0.02, "k = {k}: model {got:.0} ns, paper {latency} ns ({:.1}%)", err * 100.0);
        }
        assert_eq!(m.rss_cycles, Some(3));
    }

    /// §5.2.2: 3.37 Mrps at k = 48 with 4 RSDs (RSD-bound), ≈15.7 Mrps at small k (DMA-bound).
    #[test]
    fn reproduces_throughput() {
        let m = u250();
        let p = m.project(48, 1, 128);
        assert_eq!(p.bottleneck, Bottleneck::Rsd);
        assert!((p.requests_per_s - 3.367e6).abs() < 0.01e6, "{}", p.requests_per_s);
        let p = m.project(2, 1, 128);
        assert_eq!(p.bottleneck, Bottleneck::Dma);
        assert!((p.requests_per_s - 15.7e6).abs() < 1.0);
        // 4 × 1500-byte packets: three stash hits after the first packet.
        let p = m.project(1, 4, 1500);
        assert_eq!(p.cycles, 15 + 3 * 2);
        assert!(p.line_requests_per_s < p.rsd_requests_per_s);
    }

    #[test]
    fn cpu_profile_has_no_model() {
        assert!(RsdModel::from_profile(&Profile::builtin("cpu").unwrap()).is_none());
    }
}
