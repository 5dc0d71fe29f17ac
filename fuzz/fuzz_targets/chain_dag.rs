//! SuperNIC's DAG language (`tern_chain::dag::parse`) on arbitrary text: nothing may panic; a
//! DAG within the limits comes back, every edge between its nodes; its topological order (or
//! cycle) is consistent with its edges.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_chain::dag::{MAX_EDGES, MAX_NODES, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(d) = parse(text) else { return };
    let n = d.nodes().len();
    assert!(n >= 1 && n <= MAX_NODES && d.edges().len() <= MAX_EDGES);
    assert!(d.edges().iter().all(|&(a, b)| a < n && b < n));
    match d.topological() {
        Ok(order) => {
            assert_eq!(order.len(), n);
            let pos = |i: usize| order.iter().position(|&o| o == i).unwrap();
            assert!(d.edges().iter().all(|&(a, b)| pos(a) < pos(b)));
        }
        Err(c) => {
            assert!(c.0.len() >= 2 && c.0.first() == c.0.last());
            for w in c.0.windows(2) {
                let (a, b) = (d.index(&w[0]).unwrap(), d.index(&w[1]).unwrap());
                assert!(d.edges().contains(&(a, b)));
            }
        }
    }
});
