//! SuperNIC's tenant files (`tern_chain::tenant::Tenant::parse`) on arbitrary text: nothing may
//! panic; a tenant that loads has one task per DAG node and an order over all of them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_chain::tenant::Tenant;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(t) = Tenant::parse(text) {
        assert_eq!(t.tasks.len(), t.dag.nodes().len());
        assert_eq!(t.order.len(), t.dag.nodes().len());
    }
});
