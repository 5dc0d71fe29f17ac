//! Autoscaling (docs/chain.md, "Autoscaling"): the policy on Figure 15's load, simulated at the
//! paper's scale (10 Gbit/s a region, 10 ms of PR, 20 ms epochs).

use tern_chain::scale::{Autoscaler, FIGURE15_TRACE, simulate};

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
