//! Timing and rate model of SuperNIC (seed 003, §4.4, §5.1–5.2) from a profile's numbers
//! (`supernic-htg9200`).
//!
//! - A scheduling decision takes the scheduler's cycles at the clock (16 at 250 MHz: 64 ns).
//! - A packet's credit comes back when its chain is done: the credit's round trip is one
//!   decision and the core's latency (64 + 196 ns). A chain with `c` credits keeps at most `c`
//!   packets in flight, so it carries at most `c × size / round trip`, and never more than the
//!   line: `rate = min(line, credits × size / round trip)` (Figure 7: 1 credit falls short of
//!   100 Gbps at 1500 B, 8 reach it).
//! - A network task instance carries at most its own maximum (AES: 30 Gbps; the others the
//!   line, an assumption). Tenants sharing an instance share that maximum: a DAG gets, at each of
//!   its tasks, what the others leave, and its rate is the least of those, its credits' and the
//!   line's (DAG-A beside DAG-D at 15 Gbps: 15 Gbps, bound by AES, §5.2 and Figure 14).
//!
//! ```
//! use tern_hw::{Profile, chain::ChainModel};
//! let m = ChainModel::from_profile(&Profile::builtin("supernic-htg9200").unwrap()).unwrap();
//! assert_eq!(m.decision_ns(), 64.0);
//! assert!(m.credit_gbps(1, 1500) < 100.0 && m.credit_gbps(8, 1500) == 100.0);
//! ```

use serde::Serialize;

use crate::{Profile, cost, latency, rate, resource};

/// The model's parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainModel {
    /// Clock, MHz.
    pub clock_mhz: f64,
    /// Cycles of a scheduling decision.
    pub schedule_cycles: u64,
    /// The core's latency, ns.
    pub core_ns: f64,
    /// The board's port-to-port latency, ns.
    pub board_ns: f64,
    /// Line rate, Gbit/s.
    pub line_gbps: f64,
    /// Credits a chain starts with.
    pub credits: u64,
    /// Partial reconfiguration of a region, ns.
    pub pr_ns: f64,
    /// The fairness epoch (shares recomputed this often), ns.
    pub epoch_ns: f64,
    /// Regions, and LUTs in each.
    pub regions: u64,
    pub region_luts: u64,
    /// Each task kind's maximum, Gbit/s, where the profile gives one (`nt.KIND.gbps`).
    pub task_gbps: Vec<(String, f64)>,
}

/// What bounds a DAG's rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The line.
    Line,
    /// The chain's credits.
    Credits,
    /// A network task's capacity (its kind), after what other tenants use of it.
    Task(String),
}

impl ChainModel {
    /// The model of `p`, or an error naming what the profile lacks.
    pub fn from_profile(p: &Profile) -> Result<ChainModel, String> {
        let need = |what: &str, v: Option<f64>| v.ok_or_else(|| format!("profile {} has no {what}", p.name));
        let lat = |k: &str| p.latency_ns.get(k).copied();
        let cap = |k: &str| p.capacity(k).ok_or_else(|| format!("profile {} has no {k}", p.name));
        let mut task_gbps: Vec<(String, f64)> = p
            .rates
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix(rate::NT_GBPS_PREFIX)
                    .and_then(|r| r.strip_suffix(".gbps"))
                    .map(|kind| (kind.to_string(), *v))
            })
            .collect();
        task_gbps.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(ChainModel {
            clock_mhz: need("clock_mhz", p.clock_mhz)?,
            schedule_cycles: p
                .cycles(cost::CHAIN_SCHEDULE)
                .ok_or_else(|| format!("profile {} has no {}", p.name, cost::CHAIN_SCHEDULE))?,
            core_ns: need(latency::CHAIN_CORE, lat(latency::CHAIN_CORE))?,
            board_ns: need(latency::CHAIN_BOARD, lat(latency::CHAIN_BOARD))?,
            line_gbps: need(rate::LINE_GBPS, p.rate(rate::LINE_GBPS))?,
            credits: cap(resource::CHAIN_CREDITS)?,
            pr_ns: need(latency::CHAIN_PR, lat(latency::CHAIN_PR))?,
            epoch_ns: need(latency::CHAIN_EPOCH, lat(latency::CHAIN_EPOCH))?,
            regions: cap(resource::CHAIN_REGIONS)?,
            region_luts: cap(resource::CHAIN_REGION_LUTS)?,
            task_gbps,
        })
    }

    /// One scheduling decision, ns.
    pub fn decision_ns(&self) -> f64 {
        self.schedule_cycles as f64 * 1000.0 / self.clock_mhz
    }

    /// A credit's round trip: a decision, then the chain through the core, ns.
    pub fn credit_round_trip_ns(&self) -> f64 {
        self.decision_ns() + self.core_ns
    }

    /// What `credits` credits carry with `size`-byte packets, Gbit/s (at most the line).
    pub fn credit_gbps(&self, credits: u64, size: u64) -> f64 {
        let rtt = self.credit_round_trip_ns();
        let gbps = if rtt > 0.0 { credits as f64 * size as f64 * 8.0 / rtt } else { f64::INFINITY };
        gbps.min(self.line_gbps)
    }

    /// The most one instance of task `kind` carries, Gbit/s (the line where the profile gives
    /// no maximum).
    pub fn task_gbps(&self, kind: &str) -> f64 {
        self.task_gbps.iter().find(|(k, _)| k == kind).map_or(self.line_gbps, |(_, g)| *g).min(self.line_gbps)
    }

    /// The rate a DAG of task kinds `tasks` gets with `size`-byte packets and the chain's
    /// credits, when other tenants already put `others` Gbit/s through the same instances
    /// (by kind); and what bounds it.
    pub fn dag_gbps(&self, tasks: &[&str], size: u64, others: &[(&str, f64)]) -> (f64, Bound) {
        let mut best = (self.line_gbps, Bound::Line);
        let credits = self.credit_gbps(self.credits, size);
        if credits < best.0 {
            best = (credits, Bound::Credits);
        }
        for kind in tasks {
            let used: f64 = others.iter().filter(|(k, _)| k == kind).map(|(_, g)| g).sum();
            let left = (self.task_gbps(kind) - used).max(0.0);
            if left < best.0 {
                best = (left, Bound::Task((*kind).to_string()));
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ChainModel {
        ChainModel::from_profile(&Profile::builtin("supernic-htg9200").unwrap()).unwrap()
    }

    #[test]
    fn the_profile_gives_the_papers_latencies() {
        let m = model();
        // §5.1: a 16-cycle decision at 250 MHz is 64 ns; the core 196 ns; the board 1.3 us.
        assert_eq!(m.decision_ns(), 64.0);
        assert_eq!((m.core_ns, m.board_ns), (196.0, 1300.0));
        assert_eq!(m.credit_round_trip_ns(), 260.0);
        // 10 ms of partial reconfiguration.
        assert_eq!(m.pr_ns, 10e6);
        assert_eq!(m.epoch_ns, 20e6);
    }

    #[test]
    fn one_credit_falls_short_of_the_line_and_eight_reach_it() {
        let m = model();
        assert_eq!(m.credits, 8);
        // 1500-byte packets: one credit carries 12,000 bits a 260 ns round trip.
        let one = m.credit_gbps(1, 1500);
        assert!((one - 12_000.0 / 260.0).abs() < 1e-9 && one < 100.0, "{one}");
        assert_eq!(m.credit_gbps(8, 1500), 100.0);
        // More credits reach the line with smaller packets (Figure 7's trend).
        let smallest = |c: u64| (64..=1500).find(|&s| m.credit_gbps(c, s) >= 100.0);
        assert!(smallest(8).unwrap() < smallest(4).unwrap(), "{:?} {:?}", smallest(8), smallest(4));
        assert_eq!(smallest(1), None);
    }

    #[test]
    fn dag_a_beside_dag_d_is_capped_by_aes() {
        let m = model();
        assert_eq!((m.task_gbps("aes"), m.task_gbps("fw")), (30.0, 100.0));
        // DAG-D (NAT, FW, ..., AES) already puts 15 Gbps through the shared instances; DAG-A
        // (FW, then AES) gets what AES has left (§5.2, Figure 14: 15 Gbps).
        let d = [("nat", 15.0), ("fw", 15.0), ("lb", 15.0), ("aes", 15.0)];
        let (gbps, bound) = m.dag_gbps(&["fw", "aes"], 1500, &d);
        assert_eq!((gbps, bound), (15.0, Bound::Task("aes".into())));
        // DAG-C, without AES, is bound by the line less DAG-D's share of its busiest task.
        let (gbps, bound) = m.dag_gbps(&["nat", "fw", "lb"], 1500, &d);
        assert_eq!((gbps, bound), (85.0, Bound::Task("nat".into())));
        // Alone, small packets: the credits bind.
        let (gbps, bound) = m.dag_gbps(&["fw"], 64, &[]);
        assert_eq!(bound, Bound::Credits);
        assert!((gbps - 8.0 * 512.0 / 260.0).abs() < 1e-9);
    }

    #[test]
    fn the_area_is_figure_6_of_the_vu9p() {
        let p = Profile::builtin("supernic-htg9200").unwrap();
        // "The core sNIC modules consume less than 5% resources of the FPGA chip" (§5).
        let core = p.area_percent("core", "luts").unwrap();
        assert!(core < 5.0, "{core}");
        let own: f64 = ["core", "packet_store", "phy_mac", "ddr4"].iter().map(|b| p.area[&format!("{b}.luts")]).sum();
        let m = model();
        // The assumed regions fit beside sNIC's own modules.
        assert!(own + (m.regions * m.region_luts) as f64 <= p.area["device.luts"]);
        // Every task of Figure 6 fits a region.
        for nt in ["gbn", "lb", "fw", "nat", "kv_rep", "kv_cache", "dfadd", "aes"] {
            assert!(p.area[&format!("nt.{nt}.luts")] <= m.region_luts as f64, "{nt}");
        }
    }

    #[test]
    fn editing_the_profile_moves_the_model() {
        let mut p = Profile::builtin("supernic-htg9200").unwrap();
        p.cycles.insert(cost::CHAIN_SCHEDULE.into(), 32);
        p.capacity.insert(resource::CHAIN_CREDITS.into(), 2);
        p.rates.insert("nt.aes.gbps".into(), 60.0);
        let m = ChainModel::from_profile(&p).unwrap();
        assert_eq!(m.decision_ns(), 128.0);
        assert!(m.credit_gbps(2, 1500) < 100.0);
        assert_eq!(m.dag_gbps(&["aes"], 9000, &[]), (60.0, Bound::Task("aes".into())));
        p.latency_ns.remove(latency::CHAIN_CORE);
        assert!(ChainModel::from_profile(&p).unwrap_err().contains("chain.core"));
    }
}
