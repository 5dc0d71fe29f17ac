//! DAG-D at 1500 B with one and two instances, alternating, with the cores' round trip: a
//! probe for the instance-parallelism case of `tern bench chain` (run under `perf` or alone).
//! `cargo run --release -p tern-chain --example dag_d -- [ROUNDS] [INSTANCES...]`
use std::time::Duration;
use tern_chain::bench::{self, Load};
use tern_chain::plan;
use tern_chain::runtime::{Config, Mode};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(3);
    let which: Vec<usize> = args.iter().skip(1).filter_map(|s| s.parse().ok()).collect();
    let verbose = std::env::var_os("VERBOSE").is_some();
    let which = if which.is_empty() { vec![1, 2] } else { which };
    let profile = tern_hw::Profile::builtin("supernic-htg9200").map_err(|e| e.to_string())?;
    let model = tern_hw::chain::ChainModel::from_profile(&profile).map_err(|e| e.to_string())?;
    let d = vec![bench::figure10('d')?];
    let area = |t: &tern_chain::tenant::TaskSpec| tern_chain::tenant::area(t, &profile);
    let pd = plan::plan(&d, &area, model.regions, model.region_luts)?;
    let frames = bench::frames([10, 4, 0, 0], 256, 1500);
    let load =
        Load { rate_pps: None, latency: false, warmup: Duration::from_millis(200), secs: Duration::from_millis(500) };
    for _ in 0..rounds {
        let rtt = bench::core_round_trip_ns(20_000);
        let mut line = format!("rtt {rtt:.0} ns:");
        for &n in &which {
            let cfg = Config { mode: Mode::Snic, cores: 2, instances: n, pin: true, ..Config::default() };
            let (ph, st) = bench::measure(&d, &pd, cfg, &frames, load)?;
            line += &format!(
                " {n}: {:.0} kpps (sched {:.0} ns, credit waits {}, drops {})",
                ph.pps / 1e3,
                ph.scheduler_ns_per_decision,
                st.credit_waits,
                ph.drops
            );
            if verbose {
                for w in &st.wrappers {
                    line += &format!(
                        "\n    i{} {:>6}: {} pkts, {:.1}/batch, {:.0} ns/pkt",
                        w.instance,
                        w.name,
                        w.packets,
                        w.packets as f64 / w.batches.max(1) as f64,
                        w.ns as f64 / w.packets.max(1) as f64
                    );
                }
            }
        }
        println!("{line}");
    }
    Ok(())
}
