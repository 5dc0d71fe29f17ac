//! Autoscaling (docs/chain.md, "Autoscaling"): the policy on Figure 15's load, simulated at the
//! paper's scale (10 Gbit/s a region, 10 ms of PR, 20 ms epochs).

mod common;

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

/// Under `cpu` there is no PR: the launch serves at once.
#[test]
fn without_pr_a_launch_serves_at_once() {
    let mut a = Autoscaler::new(10.0, 2, 0, 1);
    let t = simulate(&mut a, &FIGURE15_TRACE, 20.0, 1.0, 60.0);
    // Bounded by 2 (cores): 3x is never carried in full.
    assert!(t.iter().all(|s| s.serving <= 2));
    assert_eq!(t.iter().find(|s| s.ms == 20.0).unwrap().serving, 2);
    assert_eq!(t.iter().find(|s| s.ms == 40.0).unwrap().carried, 20.0);
    assert_eq!(a.launches(), 1);
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

/// Autoscaling on the running data path: a stateless chain of two 5 µs tasks, one instance of
/// two in service, offered far more than one core carries. Its measured load (about a core
/// busy) is more than one instance's 0.8, so the autoscaler launches the second (no PR here)
/// and packets reach it.
#[test]
fn a_saturated_chain_scales_up_on_the_running_data_path() {
    let t = Tenant::parse(
        "tenant = \"t\"\ndag = \"a -> b\"\n[ingress]\ndst = \"10.0.1.0/24\"\n[nt.a]\nkind = \"dummy\"\nns_per_packet = 5000\n[nt.b]\nkind = \"dummy\"\nns_per_packet = 5000\n",
    )
    .unwrap();
    let ts = vec![t];
    let pool = Pool::new(1 << 14, 2048);
    // 20,000 packets of 10 µs: 200 ms on one core.
    let n = 20_000u32;
    let packets = (0..n)
        .map(|i| common::udp(&pool, [10, 9, 0, 1], [10, 0, 1, 7], 1000 + (i % 50_000) as u16, 80, b"x"))
        .collect();
    let cfg = Config { mode: Mode::Snic, cores: 2, instances: 2, queue: 1 << 15, ..Config::default() };
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticking = done.clone();
    let (out, _, ticker) = common::run_with(&ts, cfg, &pool, packets, n as usize, |rt| {
        let mut s = tern_chain::runtime::Scaling::new(rt, 1, std::time::Duration::ZERO, 0.8);
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
