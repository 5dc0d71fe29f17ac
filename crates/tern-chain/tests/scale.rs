//! Autoscaling (docs/chain.md, "Autoscaling"): the policy on Figure 15's load, simulated at the
//! paper's scale (10 Gbit/s a region, 10 ms of PR, 20 ms epochs).

mod common;

/// The tests that run the data path against the clock take turns (each wants both cores).
static CORES: std::sync::Mutex<()> = std::sync::Mutex::new(());

use tern_chain::runtime::{Config, Mode};
use tern_chain::scale::{Autoscaler, FIGURE15_TRACE, simulate};
use tern_chain::tenant::Tenant;
use tern_io::Pool;

/// Figure 15: two instances pre-launched carry 1× and 2×; the rise to 3× at 30 ms takes one
/// launch (seen at the 40 ms epoch, serving after 10 ms of PR: 3× carried from 50 ms, within PR
/// time plus one epoch of the rise); the launched instance stays when the load falls at 70 ms,
/// so the second peak at 90 ms needs no PR.
#[test]
fn figure_15_one_launch_none_at_the_second_peak() {
    let mut a = Autoscaler::new(10.0, 8, 10_000_000, 2);
    let t = simulate(&mut a, &FIGURE15_TRACE, 20.0, 1.0, 110.0);
    assert_eq!(a.launches(), 1);
    // Up to 30 ms: 2 regions, everything carried, no PR.
    for s in t.iter().filter(|s| s.ms < 30.0) {
        assert_eq!((s.serving, s.in_pr), (2, 0), "{s:?}");
        assert_eq!(s.carried, s.offered, "{s:?}");
    }
    // The launch: in PR from the 40 ms epoch to 50 ms.
    let first_pr = t.iter().find(|s| s.in_pr > 0).unwrap();
    assert_eq!(first_pr.ms, 40.0);
    let full = t.iter().find(|s| s.ms >= 30.0 && s.carried >= 30.0).unwrap();
    assert_eq!(full.ms, 50.0);
    assert!(full.ms - 30.0 <= 10.0 + 20.0, "3x within PR time plus one epoch");
    // The second peak: 3 regions already serving, no PR, all carried.
    for s in t.iter().filter(|s| s.ms >= 70.0) {
        assert_eq!((s.serving, s.in_pr), (3, 0), "{s:?}");
        assert_eq!(s.carried, s.offered, "{s:?}");
    }
}

/// Under `cpu` there is no PR: the launch serves at once. The 20 ms epoch sees the mean of the
/// 20 ms before (1×: one instance does); the 40 ms epoch 2.5× and launches the second.
#[test]
fn without_pr_a_launch_serves_at_once() {
    let mut a = Autoscaler::new(10.0, 2, 0, 1);
    let t = simulate(&mut a, &FIGURE15_TRACE, 20.0, 1.0, 60.0);
    // Bounded by 2 (cores): 3x is never carried in full.
    assert!(t.iter().all(|s| s.serving <= 2));
    assert_eq!(t.iter().find(|s| s.ms == 20.0).unwrap().serving, 1);
    assert_eq!(t.iter().find(|s| s.ms == 39.0).unwrap().serving, 1);
    assert_eq!(t.iter().find(|s| s.ms == 40.0).unwrap().serving, 2);
    assert_eq!(t.iter().find(|s| s.ms == 40.0).unwrap().carried, 20.0);
    assert_eq!(a.launches(), 1);
}

/// The mean of a step trace over an interval.
#[test]
fn mean_load_of_a_step_trace() {
    use tern_chain::scale::mean_load;
    assert_eq!(mean_load(&FIGURE15_TRACE, 0.0, 20.0), 10.0);
    assert_eq!(mean_load(&FIGURE15_TRACE, 20.0, 40.0), 25.0);
    assert_eq!(mean_load(&FIGURE15_TRACE, 60.0, 80.0), 22.5);
    assert_eq!(mean_load(&FIGURE15_TRACE, 100.0, 200.0), 30.0);
    assert_eq!(mean_load(&[(10.0, 4.0)], 0.0, 20.0), 2.0, "nothing before the first step");
    assert_eq!(mean_load(&FIGURE15_TRACE, 5.0, 5.0), 0.0);
}

#[test]
fn recommendations_and_evictions() {
    let mut a = Autoscaler::new(10.0, 4, 5, 1);
    assert_eq!(a.recommend(0.0), 1);
    assert_eq!(a.recommend(f64::NAN), 1);
    assert_eq!(a.recommend(10.0), 1);
    assert_eq!(a.recommend(10.5), 2);
    assert_eq!(a.recommend(1e12), 4);
    let d = a.epoch(0, 35.0);
    assert_eq!((d.recommended, d.launched), (4, 3));
    // Launched but in PR until 5 ns; a second epoch launches nothing more.
    assert_eq!((a.ready(), a.pending()), (1, 3));
    assert_eq!(a.epoch(1, 35.0).launched, 0);
    a.advance(5);
    assert_eq!((a.ready(), a.pending(), a.capacity()), (4, 0, 40.0));
    // Another chain takes two regions: the load needs them again, and they are launched again.
    a.evict(2);
    assert_eq!(a.ready(), 2);
    assert_eq!(a.epoch(10, 35.0).launched, 2);
    a.evict(100);
    assert_eq!(a.ready(), 1, "one stays");
    assert_eq!(Autoscaler::new(0.0, 0, 0, 0).recommend(5.0), 1);
}

/// The data path's side of scaling: a stateless chain's packets go to the instances in
/// service only (set through the `Launcher`), in `snic` and `panic`; bad requests are refused
/// by name.
#[test]
fn packets_go_to_the_instances_in_service() {
    let t = Tenant::parse(
        "tenant = \"t\"\ndag = \"a -> b\"\n[ingress]\ndst = \"10.0.1.0/24\"\n[nt.a]\nkind = \"dummy\"\n[nt.b]\nkind = \"dummy\"\n",
    )
    .unwrap();
    let ts = vec![t];
    for mode in [Mode::Snic, Mode::Panic] {
        for active in [1usize, 2] {
            let pool = Pool::new(1024, 2048);
            let n = 200;
            let packets =
                (0..n).map(|i| common::udp(&pool, [10, 9, 0, 1], [10, 0, 1, 7], 1000 + i, 80, b"x")).collect();
            let cfg = Config { mode, cores: 2, instances: 2, ..Config::default() };
            let (out, _, ()) = common::run_with(&ts, cfg, &pool, packets, n as usize, |rt| {
                let l = rt.launcher();
                assert!(l.set_active(5, 1).unwrap_err().contains("no chain 5"));
                assert!(l.set_active(0, 3).unwrap_err().contains("1 to 2"));
                assert!(l.set_active(0, 0).is_err());
                l.set_active(0, active).unwrap();
                assert_eq!(l.active(), [active]);
            });
            assert_eq!(out.len(), n as usize);
            let used: std::collections::BTreeSet<u16> = out.iter().map(|(d, _)| d.instance).collect();
            let want: std::collections::BTreeSet<u16> = (0..active as u16).collect();
            assert_eq!(used, want, "{mode:?}, {active} in service");
        }
    }
}

/// 20,000 packets to 10.0.1.7 (for chains of two 5 µs tasks: 200 ms on one core), their pool,
/// and a `snic` runtime of two instances on two cores with room to queue them all.
fn saturating() -> (Pool, Vec<tern_io::Packet>, u32, Config) {
    let pool = Pool::new(1 << 14, 2048);
    let n = 20_000u32;
    let packets = (0..n)
        .map(|i| common::udp(&pool, [10, 9, 0, 1], [10, 0, 1, 7], 1000 + (i % 50_000) as u16, 80, b"x"))
        .collect();
    (pool, packets, n, Config { mode: Mode::Snic, cores: 2, instances: 2, queue: 1 << 15, ..Config::default() })
}

/// Autoscaling on the running data path: a stateless chain of two 5 µs tasks, one instance of
/// two in service, offered far more than one core carries. Its measured load (about a core
/// busy) is more than one instance's 0.8, so the autoscaler launches the second (no PR here)
/// and packets reach it.
#[test]
fn a_saturated_chain_scales_up_on_the_running_data_path() {
    let _cores = CORES.lock().unwrap_or_else(|e| e.into_inner());
    let t = Tenant::parse(
        "tenant = \"t\"\ndag = \"a -> b\"\n[ingress]\ndst = \"10.0.1.0/24\"\n[nt.a]\nkind = \"dummy\"\nns_per_packet = 5000\n[nt.b]\nkind = \"dummy\"\nns_per_packet = 5000\n",
    )
    .unwrap();
    let ts = vec![t];
    let (pool, packets, n, cfg) = saturating();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticking = done.clone();
    let (out, _, ticker) = common::run_with(&ts, cfg, &pool, packets, n as usize, |rt| {
        let epoch = std::time::Duration::from_millis(20);
        let mut s = tern_chain::runtime::Scaling::new(rt, 1, std::time::Duration::ZERO, 0.8, epoch);
        assert_eq!(rt.launcher().active(), [1]);
        std::thread::spawn(move || {
            let mut decisions = Vec::new();
            while !ticking.load(std::sync::atomic::Ordering::Relaxed) && decisions.len() < 400 {
                std::thread::sleep(std::time::Duration::from_millis(20));
                decisions.push(s.tick(std::time::Instant::now()));
            }
            let launches = s.scalers()[0].as_ref().map_or(0, |a| a.launches());
            (decisions, launches)
        })
    });
    // The run's end stops the ticks.
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (decisions, launches) = ticker.join().unwrap();
    assert_eq!(out.len(), n as usize);
    assert_eq!(launches, 1, "{decisions:?}");
    assert!(out.iter().any(|(d, _)| d.instance == 1), "no packet reached the launched instance");
}

/// One load trace fed to the simulation and to the running data path (`snic`, three instances
/// built, two in service, an instance a region whose dummy task is capped at 10,000 packets a
/// second (its region paced to it), 10 ms of PR,
/// 20 ms epochs): Figure 15's shape at CPU rates — 0.9 of an instance, 1.5 from 20 ms, 2.5 from
/// 40, 1.5 from 80 and 2.5 again from 100 — its steps on epochs and each level half an instance
/// from a bound, so a measurement a few percent off (or an epoch a few ms late) decides the
/// same. Both make the same scaling decisions: one launch, at the 60 ms epoch (the first to see
/// 2.5), and none at the second peak. No time is asserted.
#[test]
fn the_simulation_and_the_running_data_path_make_the_same_decisions() {
    let _cores = CORES.lock().unwrap_or_else(|e| e.into_inner());
    use std::time::Duration;
    let per = 10_000.0;
    let trace: Vec<(f64, f64)> =
        [(0.0, 0.9), (20.0, 1.5), (40.0, 2.5), (80.0, 1.5), (100.0, 2.5)].iter().map(|&(t, l)| (t, l * per)).collect();
    let end = 130.0;
    // The simulation: the same policy code, the same trace.
    let mut a = Autoscaler::new(per, 3, 10_000_000, 2);
    let sim = simulate(&mut a, &trace, 20.0, 1.0, end);
    let sim_launches: Vec<(u64, usize)> =
        sim.iter().filter(|s| s.launched > 0).map(|s| (s.ms.round() as u64, s.launched)).collect();
    assert_eq!(sim_launches, [(60, 1)]);
    // The running data path: a dummy task capped at 10,000 of its 64-byte frames a second.
    let gbps = per * 64.0 * 8.0 / 1e9;
    let t = Tenant::parse(&format!(
        "tenant = \"t\"\ndag = \"d\"\n[ingress]\ndst = \"10.0.1.0/24\"\n[nt.d]\nkind = \"dummy\"\ngbps = {gbps}\n"
    ))
    .unwrap();
    let ts = vec![t];
    let p = tern_chain::plan::plan(&ts, &common::area, 8, 100_000).unwrap();
    let cfg = Config { mode: Mode::Snic, cores: 2, instances: 3, ..Config::default() };
    // The level the trace asks for at `ms`, in instances.
    let level = |ms: f64| trace.iter().rev().find(|s| s.0 <= ms).map_or(0.0, |s| s.1 / per);
    // Each epoch's decisions, at the epoch they belong to (its tick a little after).
    let launches = |run: &tern_chain::bench::ScaleRun| -> Vec<(u64, usize)> {
        run.epochs.iter().filter(|e| e.3 > 0).map(|e| (((e.0 / 20.0).round() * 20.0) as u64, e.3)).collect()
    };
    // A run that decided otherwise is run again (up to three in all) only if an epoch measured
    // a load 0.4 of an instance or more from the level the trace asked over it (the levels are
    // half an instance from a bound): a host busy enough to keep the generator off its core for
    // a good part of an epoch (seen with a spinning process beside the tests: 1.38 instances
    // measured of 2.5, then 3.5) ran another trace. One that measured the trace and decided
    // otherwise fails the test.
    let mut attempt = 1;
    let run = loop {
        let frames = tern_chain::bench::frames([10, 0, 1, 0], 64, 64);
        let run = tern_chain::bench::measure_scaling(
            &ts,
            &p,
            cfg,
            frames,
            &trace,
            2,
            Duration::from_millis(10),
            Duration::from_millis(20),
            5.0,
            end,
        )
        .unwrap();
        let faithful = run.epochs.iter().all(|e| (e.1 - level(e.0 - 10.0)).abs() < 0.4);
        if launches(&run) == sim_launches || faithful || attempt == 3 {
            break run;
        }
        eprintln!("run {attempt}: the load measured was not the trace's (a busy host): {:?}", run.epochs);
        attempt += 1;
    };
    assert_eq!(launches(&run), sim_launches, "epochs: {:?}", run.epochs);
    assert_eq!(run.launches, a.launches());
    // And the launched instance went into service.
    assert!(run.bins.iter().any(|b| b.3 == 3), "{:?}", run.bins);
}

/// A board of `regions` regions with one plan region a chain (chain c in region c), none
/// fixed.
fn board(regions: f64, chains: usize) -> tern_chain::scale::Space {
    tern_chain::scale::Space {
        capacity: vec![regions, 0.0],
        region_chains: (0..chains).map(|c| vec![c]).collect(),
        tenants: Vec::new(),
        fixed: vec![false; chains],
    }
}

/// The space step's arbitration (§4.3–4.5): launches take free regions; a chain below its
/// share takes the region of one above its share (an idle one first); a chain at its share
/// waits; launched instances otherwise stay; fixed chains keep theirs.
#[test]
fn regions_go_to_chains_below_their_share() {
    let b = board(4.0, 2);
    // Free regions: chain 0 takes three, beyond its share of 2 (nobody else wants them).
    assert_eq!(b.arbitrate(&[1, 1], &[4, 1], &[2, 2]), [3, 1]);
    // Chain 1 wants more: below its share, it takes one of chain 0's (idle, above its share);
    // beyond its share it waits.
    assert_eq!(b.arbitrate(&[3, 1], &[1, 3], &[2, 2]), [2, 2]);
    // Nobody needs them: launched instances stay.
    assert_eq!(b.arbitrate(&[3, 1], &[1, 1], &[2, 2]), [3, 1]);
    // Both want more than there is: each up to its share.
    assert_eq!(b.arbitrate(&[1, 1], &[4, 4], &[2, 2]), [2, 2]);
    // A chain at its share takes nothing from one within its own.
    assert_eq!(b.arbitrate(&[2, 2], &[3, 2], &[2, 2]), [2, 2]);
    // Of two chains above their shares, the idle one gives its region up.
    let b3 = board(5.0, 3);
    assert_eq!(b3.arbitrate(&[2, 2, 1], &[2, 1, 2], &[1, 1, 3]), [2, 1, 2]);
    // A fixed chain keeps its regions and is never a victim.
    let mut f = board(3.0, 2);
    f.fixed[0] = true;
    assert_eq!(f.arbitrate(&[2, 1], &[2, 3], &[1, 2]), [2, 1]);
    // Concatenated: both chains' segments in one plan region; its instance k is in use while
    // either holds more than k.
    let c = tern_chain::scale::Space { region_chains: vec![vec![0, 1]], ..board(2.0, 2) };
    assert_eq!(c.used(&[2, 1]), 2);
    assert_eq!(c.arbitrate(&[1, 1], &[2, 2], &[1, 1]), [2, 2]);
}

/// The space step's shares: DRF over regions and memory on each tenant's demand (its requested
/// bandwidth over what an instance carries). Worked by hand: 8 regions and 1000 KB; tenant 0's
/// instance takes 2 regions and 100 KB and it asks for 4 instances' worth (40 of 10 Gbit/s);
/// tenant 1's takes 1 region and 400 KB, 3 instances' worth. Dominant shares rise together
/// (0.25 and 0.4 an instance) until the memory is full at 2.86 and 1.79 instances: shares 2
/// and 1. A chain whose tenant asks for nothing keeps one.
#[test]
fn space_shares_by_drf_over_regions_and_memory() {
    use tern_chain::scale::{Space, SpaceTenant};
    let t = |chain, per: [f64; 2], req| SpaceTenant {
        chain,
        per_instance: per.to_vec(),
        requested_gbps: req,
        max_gbps: 10.0,
    };
    let s = Space {
        capacity: vec![8.0, 1000.0],
        region_chains: vec![vec![0], vec![0], vec![1], vec![2]],
        tenants: vec![t(0, [2.0, 100.0], 40.0), t(1, [1.0, 400.0], 30.0), t(2, [1.0, 0.0], 0.0)],
        fixed: vec![false; 3],
    };
    let x = s.tenant_shares();
    assert!((x[0] - 20.0 / 7.0).abs() < 1e-9 && (x[1] - 25.0 / 14.0).abs() < 1e-9, "{x:?}");
    assert_eq!(s.shares(), [2, 1, 1]);
    // Two plan regions for chain 0: an instance of it takes both.
    assert_eq!(s.used(&[2, 1, 1]), 6);
}

/// Giving regions up: launches still in PR go first, then serving instances; one always stays.
#[test]
fn shrinking_cancels_launches_first() {
    let mut a = Autoscaler::new(1.0, 8, 1_000, 2);
    assert_eq!(a.epoch(0, 5.0).launched, 3);
    assert_eq!((a.ready(), a.pending(), a.held()), (2, 3, 5));
    assert_eq!(a.shrink_to(3), 2);
    assert_eq!((a.ready(), a.pending()), (2, 1));
    assert_eq!(a.shrink_to(0), 2);
    assert_eq!((a.ready(), a.pending()), (1, 0));
    // A launch within a limit.
    assert_eq!(a.epoch_within(10, 6.0, 4).launched, 3);
    assert_eq!(a.held(), 4);
}

/// Tenant `a`'s chain saturated (as in the test above) beside tenant `b`'s idle chain, on a
/// board of `spare` regions beyond the two chains' one instance each; `a` asks for far more
/// than an instance carries, `b` for nothing. Returns `a`'s launches, the most instances its
/// load asked for, and whether a packet reached its second instance.
fn saturated_beside_idle_on_a_board(spare: usize) -> (u64, usize, bool) {
    let dummy = |name: &str, dst: &str, task: &str, bw: u32| {
        Tenant::parse(&format!(
            "tenant = \"{name}\"\ndag = \"{task}1 -> {task}2\"\nbandwidth_gbps = {bw}\n[ingress]\ndst = \"{dst}\"\n[nt.{task}1]\nkind = \"dummy\"\nns_per_packet = 5000\n[nt.{task}2]\nkind = \"dummy\"\nns_per_packet = 5000\n"
        ))
        .unwrap()
    };
    let ts = vec![dummy("a", "10.0.1.0/24", "x", 400), dummy("b", "10.0.2.0/24", "y", 0)];
    let (pool, packets, n, cfg) = saturating();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticking = done.clone();
    let (out, _, ticker) = common::run_with(&ts, cfg, &pool, packets, n as usize, |rt| {
        let plan = rt.plan();
        assert_eq!(plan.chains.len(), 2, "two chains: {plan:?}");
        let region_chains: Vec<Vec<usize>> =
            plan.regions.iter().map(|r| r.segments.iter().map(|s| s.0).collect()).collect();
        let space = tern_chain::scale::Space {
            capacity: vec![(region_chains.len() + spare) as f64, 0.0],
            region_chains,
            tenants: plan
                .tenants
                .iter()
                .zip(&ts)
                .map(|(p, t)| tern_chain::scale::SpaceTenant {
                    chain: p.chain,
                    per_instance: vec![1.0, 0.0],
                    requested_gbps: t.bandwidth_gbps,
                    max_gbps: 100.0,
                })
                .collect(),
            fixed: vec![false; 2],
        };
        let epoch = std::time::Duration::from_millis(20);
        let mut s = tern_chain::runtime::Scaling::new(rt, 1, std::time::Duration::ZERO, 0.8, epoch).with_space(space);
        let a_chain = plan.tenants[0].chain;
        std::thread::spawn(move || {
            let mut asked = 0;
            for _ in 0..400 {
                if ticking.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
                if let Some(Some((_, d))) = s.tick(std::time::Instant::now()).get(a_chain) {
                    asked = asked.max(d.recommended);
                }
            }
            (s.scalers()[a_chain].as_ref().map_or(0, |a| a.launches()), asked)
        })
    });
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (launches, asked) = ticker.join().unwrap();
    assert_eq!(out.len(), n as usize);
    (launches, asked, out.iter().any(|(d, _)| d.instance == 1))
}

/// The space step on the running data path: a saturated chain asks for a second instance; on
/// a board with no region free (the idle chain keeps its one, and is within its share) it does
/// not get it, every packet served by its first; with one region spare it launches into it.
#[test]
fn launches_on_the_data_path_take_only_regions_the_board_has() {
    let _cores = CORES.lock().unwrap_or_else(|e| e.into_inner());
    let (launches, asked, second) = saturated_beside_idle_on_a_board(0);
    assert!(asked >= 2, "the load never asked for a second instance");
    assert_eq!((launches, second), (0, false));
    let (launches, _, second) = saturated_beside_idle_on_a_board(1);
    assert_eq!((launches, second), (1, true));
}
