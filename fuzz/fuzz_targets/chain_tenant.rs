//! SuperNIC's tenant files (`tern_chain::tenant::Tenant::parse`) on arbitrary text: nothing may
//! panic; a tenant that loads has one task per DAG node and an order over all of them; a
//! parallel one's fork shape holds every task once; planning it (alone, and twice beside
//! itself) never panics, and a plan places every task once, in an order its edges allow.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_chain::tenant::{TaskSpec, Tenant};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(t) = Tenant::parse(text) else { return };
    assert_eq!(t.tasks.len(), t.dag.nodes().len());
    assert_eq!(t.order.len(), t.dag.nodes().len());
    if t.parallel {
        let s = t.fork_shape().expect("a parallel tenant that loads has a fork shape");
        let mut all: Vec<usize> = s.prefix.iter().chain(s.branches.iter().flatten()).chain(&s.suffix).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..t.tasks.len()).collect::<Vec<_>>());
    }
    let area = |s: &TaskSpec| Ok(match s {
        TaskSpec::Dummy { luts, .. } | TaskSpec::Stage { luts, .. } => *luts,
        _ => 1000,
    });
    let tenants = vec![t.clone(), t.clone()];
    if let Ok(p) = tern_chain::plan::plan(&tenants, &area, 64, 1 << 30) {
        for (ti, pl) in p.tenants.iter().enumerate() {
            let len = p.chains[pl.chain].slots.len();
            assert_eq!(pl.positions.len(), tenants[ti].tasks.len());
            assert!(pl.positions.iter().all(|&q| q < len && pl.skip >> q & 1 == 0));
            for (a, b) in tenants[ti].dag.edges() {
                assert!(pl.positions[a] < pl.positions[b] || tenants[ti].parallel);
            }
        }
    }
});
