//! The YCSB rig (docs/chain.md, "Benchmark: fairness", case 5): Zipf draws, and YCSB through
//! go-back-N and the KV cache on the running data path — every answer right, and reads of a
//! popular key answered in the NIC.

mod common;

use std::time::Duration;

use tern_chain::runtime::{Config, Mode};
use tern_chain::ycsb::{self, Setup, WORKLOADS, Zipf};

#[test]
fn zipf_ranks_and_head_shares() {
    let z = Zipf::new(10_000, 0.99);
    assert_eq!(z.rank(0.0), 0);
    assert_eq!(z.rank(0.999_999_999), 9_999);
    // The most popular 10% take about three quarters of the draws at θ 0.99 (H(1000) / H(10000)).
    let head = z.head(1000);
    assert!((0.74..0.78).contains(&head), "{head}");
    assert_eq!(z.head(0), 0.0);
    assert!((z.head(10_000) - 1.0).abs() < 1e-12);
    // Uniform draws land on the head as often as its share says.
    let n = 100_000;
    let hits = (0..n).filter(|i| z.rank((*i as f64 + 0.5) / n as f64) < 1000).count();
    assert!(((hits as f64 / n as f64) - head).abs() < 0.01);
    assert_eq!(Zipf::new(0, 0.99).rank(0.5), 0, "one item at least");
}

/// YCSB C and A for 0.2 s each through `gbn -> kv` and `gbn` alone: every answer is the
/// server's value; with the cache, fewer requests reach the server than complete; without it,
/// every one does.
#[test]
fn ycsb_through_the_cache_answers_right() {
    let setup = Setup { keys: 1000, value_bytes: 256, theta: 0.99, clients: 8, window: 1, server_link_bytes: 5e6 };
    for cache in [Some(100), None] {
        let t = ycsb::tenant(cache, setup.value_bytes).unwrap();
        let ts = vec![t];
        let p = tern_chain::plan::plan(&ts, &common::area, 8, 100_000).unwrap();
        let cfg = Config { mode: Mode::Snic, cores: 2, ..Config::default() };
        for w in [WORKLOADS[2], WORKLOADS[0]] {
            let ph = ycsb::run(&ts, &p, cfg, setup, w, Duration::from_millis(50), Duration::from_millis(200)).unwrap();
            assert!(ph.completed > 0, "{cache:?} {w:?}: nothing completed");
            assert_eq!(ph.wrong_answers, 0, "{cache:?} {w:?}");
            if cache.is_some() && w.reads == 1.0 {
                assert!(ph.server_ops_per_s < 0.8 * ph.ops_per_s, "{ph:?}");
            }
            if cache.is_none() {
                assert!(ph.server_ops_per_s <= ph.ops_per_s * 1.05 + 50.0, "{ph:?}");
            }
        }
    }
}
