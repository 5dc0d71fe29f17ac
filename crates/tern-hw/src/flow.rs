//! Timing model of AccelSDP's offloaded pipeline (seed 001), from a profile's numbers.
//!
//! A frame streams through the parser and deparser a datapath word per cycle; stage 2 issues one
//! CAM search per frame (`cam.searches_per_s`, a search answered `cam.search` cycles later), and
//! each action of the matched action set takes `flow.action` cycles in the action units. The
//! pipeline therefore sustains one frame per search slot, bounded by the Ethernet line rate. Rule
//! changes go through the instruction FIFO at the sustained rates of Table 5; a TCAM write takes
//! `tcam.write` cycles (2^8 + 2), a BCAM write `bcam.write`.
//!
//! ```
//! use tern_hw::{Profile, flow::FlowModel};
//! let m = FlowModel::from_profile(&Profile::builtin("accelsdp-n3000").unwrap()).unwrap();
//! let p = m.project(64, 5);
//! assert_eq!(p.bottleneck, tern_hw::flow::Bottleneck::LineRate); // 148.8 Mpps < 200 M searches/s
//! assert!((p.packets_per_s / 1e6 - 148.8).abs() < 0.1);
//! assert!((m.config.lpm_populate_per_s / 1e6 - 0.78).abs() < 1e-9);
//! ```

use serde::Serialize;

use crate::{Profile, cost, rate};

/// Ethernet preamble, start delimiter and inter-frame gap: bytes on the wire besides the frame.
const WIRE_OVERHEAD_BYTES: f64 = 20.0;

/// What limits projected throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// One CAM search per frame.
    Search,
    /// The Ethernet line rate.
    LineRate,
}

impl Bottleneck {
    /// Name for reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Bottleneck::Search => "search",
            Bottleneck::LineRate => "line rate",
        }
    }
}

/// Sustained configuration rates (instructions per second).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ConfigRates {
    /// LPM populate.
    pub lpm_populate_per_s: f64,
    /// LPM delete.
    pub lpm_delete_per_s: f64,
    /// LPM update (action RAM only).
    pub lpm_update_per_s: f64,
    /// EM populate.
    pub em_populate_per_s: f64,
    /// EM delete.
    pub em_delete_per_s: f64,
    /// EM update.
    pub em_update_per_s: f64,
}

/// The model's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FlowModel {
    /// Clock, MHz.
    pub clock_mhz: f64,
    /// Datapath width, bits.
    pub datapath_bits: u32,
    /// Searches per second.
    pub searches_per_s: f64,
    /// Cycles from search to match address.
    pub search_cycles: u64,
    /// Cycles per action.
    pub action_cycles: u64,
    /// TCAM / BCAM write cycles.
    pub write_cycles: (u64, u64),
    /// Line rate, Gb/s (if the profile has one).
    pub line_gbps: Option<f64>,
    /// Configuration rates: the profile's (Table 5), else bounded by the write latencies.
    pub config: ConfigRates,
}

/// A projection for one frame size and action-set length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Projection {
    /// Cycles in the pipeline for one frame: stream in, search, actions.
    pub cycles: u64,
    /// Latency through the pipeline, ns.
    pub latency_ns: f64,
    /// Frames/s the search stage sustains.
    pub pipeline_pps: f64,
    /// Frames/s the line carries (infinite without a line rate).
    pub line_pps: f64,
    /// The lower of the two.
    pub packets_per_s: f64,
    /// `packets_per_s` in Gb/s of frames.
    pub gbps: f64,
    /// Which bound holds.
    pub bottleneck: Bottleneck,
}

impl FlowModel {
    /// The model of a profile that gives a clock and a search rate (`None` for `cpu`).
    pub fn from_profile(p: &Profile) -> Option<FlowModel> {
        let clock_mhz = p.clock_mhz?;
        let searches_per_s = p.rate(rate::CAM_SEARCHES_PER_S)?;
        let tcam = p.cycles(cost::TCAM_WRITE).unwrap_or(1);
        let bcam = p.cycles(cost::BCAM_WRITE).unwrap_or(1);
        let hz = clock_mhz * 1e6;
        let or = |name: &str, write: u64| p.rate(name).unwrap_or(hz / write.max(1) as f64);
        Some(FlowModel {
            clock_mhz,
            datapath_bits: p.datapath_bits.unwrap_or(512),
            searches_per_s,
            search_cycles: p.cycles(cost::CAM_SEARCH).unwrap_or(1),
            action_cycles: p.cycles(cost::ACTION).unwrap_or(1),
            write_cycles: (tcam, bcam),
            line_gbps: p.rate(rate::LINE_GBPS),
            config: ConfigRates {
                lpm_populate_per_s: or(rate::LPM_POPULATE_PER_S, tcam),
                lpm_delete_per_s: or(rate::LPM_DELETE_PER_S, tcam),
                lpm_update_per_s: or(rate::LPM_UPDATE_PER_S, 1),
                em_populate_per_s: or(rate::EM_POPULATE_PER_S, bcam),
                em_delete_per_s: or(rate::EM_DELETE_PER_S, bcam),
                em_update_per_s: or(rate::EM_UPDATE_PER_S, 1),
            },
        })
    }

    /// Projects frames of `frame_bytes` (Ethernet header to FCS excluded) hitting a rule whose
    /// action set has `actions` actions.
    pub fn project(&self, frame_bytes: u32, actions: u32) -> Projection {
        let words = (u64::from(frame_bytes) * 8).div_ceil(u64::from(self.datapath_bits.max(1)));
        // A profile's cycles are its author's: saturate rather than wrap.
        let cycles = words
            .saturating_add(self.search_cycles)
            .saturating_add(u64::from(actions).saturating_mul(self.action_cycles));
        let latency_ns = cycles as f64 * 1e3 / self.clock_mhz;
        let line_pps =
            self.line_gbps.map_or(f64::INFINITY, |g| g * 1e9 / 8.0 / (f64::from(frame_bytes) + WIRE_OVERHEAD_BYTES));
        let (packets_per_s, bottleneck) = if line_pps < self.searches_per_s {
            (line_pps, Bottleneck::LineRate)
        } else {
            (self.searches_per_s, Bottleneck::Search)
        };
        Projection {
            cycles,
            latency_ns,
            pipeline_pps: self.searches_per_s,
            line_pps,
            packets_per_s,
            gbps: packets_per_s * f64::from(frame_bytes) * 8.0 / 1e9,
            bottleneck,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile's cycles past what u64 adds saturate rather than wrap to a fast projection.
    #[test]
    fn huge_cycles_saturate() {
        let base = FlowModel::from_profile(&Profile::builtin("accelsdp-n3000").unwrap()).unwrap();
        let m = FlowModel { search_cycles: u64::MAX - 1, action_cycles: u64::MAX / 2, ..base };
        assert!(m.project(64, 3).latency_ns >= base.project(64, 3).latency_ns * 1e6);
    }

    #[test]
    fn table5_and_section6_figures() {
        let m = FlowModel::from_profile(&Profile::builtin("accelsdp-n3000").unwrap()).unwrap();
        // Table 5 (M ops/s).
        let c = m.config;
        let got = [
            c.lpm_populate_per_s,
            c.lpm_delete_per_s,
            c.lpm_update_per_s,
            c.em_populate_per_s,
            c.em_delete_per_s,
            c.em_update_per_s,
        ];
        for (g, want) in got.iter().zip([0.78, 0.78, 1.89, 0.71, 0.78, 1.89]) {
            assert!((g / 1e6 - want).abs() < 1e-9, "{g} vs {want} M/s");
        }
        // §6.2: 200 M searches/s, match 2 cycles after the search; 258-cycle TCAM writes.
        assert_eq!((m.searches_per_s, m.search_cycles, m.write_cycles), (200e6, 2, (258, 2)));
        // The paper's action set (set 2 MACs, TTL, VLAN insert, checksum, output: 6 actions) on a
        // 64-byte frame: 1 word + 2 + 6 = 9 cycles, 45 ns; line rate (148.8 Mpps) binds.
        let p = m.project(64, 6);
        assert_eq!(p.cycles, 9);
        assert!((p.latency_ns - 45.0).abs() < 1e-9);
        assert_eq!(p.bottleneck, Bottleneck::LineRate);
        // 1500-byte frames: 100 Gb/s (§6.4, "100 Gbps with full-sized packets").
        let p = m.project(1500, 6);
        assert!((p.line_pps * 1520.0 * 8.0 / 1e9 - 100.0).abs() < 1e-6);
        assert!(p.gbps > 98.0 && p.gbps <= 100.0, "{}", p.gbps);
        // Without a profile clock there is nothing to project.
        assert!(FlowModel::from_profile(&Profile::builtin("cpu").unwrap()).is_none());
    }
}
