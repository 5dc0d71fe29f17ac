//! Heavy-hitter offload against exact counts (docs/clip.md, "Heavy-hitter offload"): Zipf
//! traffic over 10,000 flows, a 2,048-entry original table and CLIP's 1024 × 2 sketch.

use std::collections::HashMap;

use rand::SeedableRng;
use rand_distr::Distribution;
use tern_switch::offload::{Mode, Offload, OffloadConfig, Served};

const FLOWS: u64 = 10_000;
const TOP: usize = 2048;
const INTERVAL: usize = 200_000;

fn flow_id(rank: u64) -> u64 {
    rank.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5555
}

/// One interval's packets: flows drawn by Zipf rank (`alpha`).
fn interval(alpha: f64, rng: &mut rand::rngs::SmallRng) -> Vec<u64> {
    let z = rand_distr::Zipf::new(FLOWS as f64, alpha).unwrap();
    (0..INTERVAL).map(|_| flow_id(z.sample(rng) as u64)).collect()
}

/// What one interval shows: the share of the exact top N's packets the switch served
/// (coverage), and the precision and recall of the table's entries against the exact top N.
#[derive(Debug)]
struct Seen {
    coverage: f64,
    precision: f64,
    recall: f64,
}

fn run(alpha: f64, mode: Mode, intervals: usize) -> Vec<Seen> {
    let mut off = Offload::new(OffloadConfig { capacity: TOP, mode, ..OffloadConfig::default() }).unwrap();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    let mut out = Vec::new();
    for _ in 0..intervals {
        let pkts = interval(alpha, &mut rng);
        let mut exact: HashMap<u64, u64> = HashMap::new();
        for &f in &pkts {
            *exact.entry(f).or_default() += 1;
        }
        let mut ranked: Vec<(u64, u64)> = exact.iter().map(|(&f, &c)| (c, f)).collect();
        ranked.sort_unstable_by(|a, b| b.cmp(a));
        let top: std::collections::HashSet<u64> = ranked.iter().take(TOP).map(|r| r.1).collect();
        let top_packets: u64 = ranked.iter().take(TOP).map(|r| r.0).sum();
        let chosen: Vec<u64> = off.original_flows().collect();
        let hit = chosen.iter().filter(|f| top.contains(f)).count();
        let mut switch = 0u64;
        for &f in &pkts {
            if off.packet(f) == Served::Switch {
                switch += 1;
            }
        }
        let report = off.interval();
        assert_eq!(report.switch_packets, switch);
        assert!(off.entries() <= TOP);
        out.push(Seen {
            coverage: switch as f64 / top_packets as f64,
            precision: if chosen.is_empty() { 0.0 } else { hit as f64 / chosen.len() as f64 },
            recall: hit as f64 / TOP as f64,
        });
    }
    out
}

/// After a warm-up of four intervals (800,000 packets: the scores average over intervals, and
/// the first interval's sketch counts every packet in 1,024 counters a way), the sketch's choice
/// carries at least 90% of the packets the exact top 2,048 of each interval would, for Zipf α
/// from 0.9 to 1.2, and more than choosing at random (flows drawn by their packets) does.
#[test]
fn the_sketch_covers_the_exact_top_n() {
    for alpha in [0.9, 1.0, 1.1, 1.2] {
        let s = run(alpha, Mode::Sketch, 7);
        let r = run(alpha, Mode::Random, 7);
        assert_eq!(s[0].coverage, 0.0, "nothing is offloaded before the first interval ends");
        for (a, b) in s[4..].iter().zip(&r[4..]) {
            assert!(a.coverage >= 0.9, "α {alpha}: sketch {s:?}");
            assert!(a.coverage > b.coverage, "α {alpha}: sketch {s:?} random {r:?}");
            // The flows near the 2,048th are a coin toss in any one interval (a dozen packets
            // each); the heavy ones are all in.
            assert!(a.recall >= 0.5 && a.precision >= 0.5, "α {alpha}: sketch {s:?}");
        }
        if std::env::var_os("TERN_SHOW").is_some() {
            let last = &s[6];
            eprintln!(
                "α {alpha}: sketch coverage {:.3} precision {:.3} recall {:.3}; random coverage {:.3}",
                last.coverage, last.precision, last.recall, r[6].coverage
            );
        }
        // Coverage grows as the scores settle.
        assert!(s[6].coverage > s[1].coverage, "α {alpha}: {s:?}");
    }
}

/// Eviction by hit counters: an entry whose flow stops sending is evicted for a flow that now
/// sends more; the table never exceeds its capacity.
#[test]
fn idle_entries_make_room() {
    let mut off = Offload::new(OffloadConfig { capacity: 2, threshold: 2, ..OffloadConfig::default() }).unwrap();
    for _ in 0..10 {
        off.packet(1);
        off.packet(2);
    }
    off.packet(3);
    let r = off.interval();
    assert_eq!((r.installed, r.evicted), (2, 0));
    assert!(off.offloaded(1) && off.offloaded(2) && !off.offloaded(3));
    // Flow 2 stops; flow 3 sends more.
    for _ in 0..10 {
        assert_eq!(off.packet(1), Served::Switch);
        assert_eq!(off.packet(3), Served::Server);
    }
    let r = off.interval();
    assert_eq!((r.installed, r.evicted, r.switch_packets, r.server_packets), (1, 1, 10, 10));
    assert!(off.offloaded(1) && off.offloaded(3) && !off.offloaded(2));
    assert_eq!(off.entries(), 2);
}
