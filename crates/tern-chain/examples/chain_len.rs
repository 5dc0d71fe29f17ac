//! A chain of dummy tasks (100 ns each) at 64 B in `snic` and `rtc` (or the modes named),
//! saturated, alternating, with the cores' round trip before each round: a probe for the
//! chain-length case of `tern bench chain` (run under `perf` or alone).
//! `cargo run --release -p tern-chain --example chain_len -- [ROUNDS] [TASKS] [MODES...]`
//! (`VERBOSE=1`: also each instance's packets, batch size and first task's ns a packet;
//! `INSTANCES=N`: N chain instances rather than one a core; `CORES=N`: N cores rather than 2;
//! `QUEUE=N`: tenant queues of N packets rather than 4096; `CREDITS=N`: N credits a chain
//! instance rather than 8).
use std::time::Duration;
use tern_chain::bench::{self, Load};
use tern_chain::plan;
use tern_chain::runtime::{Config, Mode};

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(3);
    let len: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(4);
    let modes: Vec<Mode> = args.iter().skip(2).filter_map(|s| s.parse().ok()).collect();
    let modes = if modes.is_empty() { vec![Mode::Snic, Mode::Rtc] } else { modes };
    let verbose = std::env::var_os("VERBOSE").is_some();
    let profile = tern_hw::Profile::builtin("supernic-htg9200").map_err(|e| e.to_string())?;
    let model = tern_hw::chain::ChainModel::from_profile(&profile).map_err(|e| e.to_string())?;
    let t = vec![bench::dummy_chain(len, 100)];
    let area = |x: &tern_chain::tenant::TaskSpec| tern_chain::tenant::area(x, &profile);
    // As `tern bench chain` plans its dummy chains: room for every length in one region.
    let p = plan::plan(&t, &area, model.regions.max(64), model.region_luts.max(1 << 20))?;
    let frames = bench::frames([10, 0, 0, 0], 256, 64);
    let load =
        Load { rate_pps: None, latency: false, warmup: Duration::from_millis(200), secs: Duration::from_millis(1000) };
    if verbose {
        println!("a dummy task of 100 ns spends {:.1} ns", bench::dummy_spends_ns(100, 100_000));
    }
    for _ in 0..rounds {
        let rtt = bench::core_round_trip_ns(20_000);
        let mut line = format!("rtt {rtt:.0} ns:");
        let mut pps = Vec::new();
        for &m in &modes {
            let instances = std::env::var("INSTANCES").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
            let cores = std::env::var("CORES").ok().and_then(|s| s.parse().ok()).unwrap_or(2);
            let queue = std::env::var("QUEUE").ok().and_then(|s| s.parse().ok()).unwrap_or(4096);
            let credits = std::env::var("CREDITS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
            let cfg = Config { mode: m, cores, pin: true, instances, queue, credits, ..Config::default() };
            let (ph, st) = bench::measure(&t, &p, cfg, &frames, load)?;
            line +=
                &format!(" {}: {:.2} Mpps (scheduler {:.0} ns)", m.name(), ph.pps / 1e6, ph.scheduler_ns_per_decision);
            if verbose {
                line +=
                    &format!(" credit waits {}, decisions {}, refills {}", st.credit_waits, st.decisions, st.refills);
                // Each instance's first task: its packets, batch size and ns a packet.
                for w in st.wrappers.iter().filter(|w| w.position == 0) {
                    line += &format!(
                        "\n    {} i{}: {} pkts, {:.1}/batch, {:.0} ns/pkt",
                        m.name(),
                        w.instance,
                        w.packets,
                        w.packets as f64 / w.batches.max(1) as f64,
                        w.ns as f64 / w.packets.max(1) as f64
                    );
                }
            }
            pps.push(ph.pps);
        }
        if let [a, b] = pps[..] {
            line += &format!(" | first over second {:.2}", a / b.max(1.0));
        }
        println!("{line}");
    }
    Ok(())
}
