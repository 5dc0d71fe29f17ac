//! A hardware profile file (`--profile FILE`): arbitrary text parsed and validated never panics;
//! a profile that loads prints back (`tern hw show`) to text that loads as the same profile, and
//! every key of its tables is one `tern_hw::keys` knows. Each model built from it (the RSD's,
//! the flow switch's, RpcNIC's, SuperNIC's, the switch's) is built or refused, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_hw::{Profile, keys};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(p) = Profile::from_toml(text, "fuzz.toml") else { return };
    let again = Profile::from_toml(&p.to_toml(), "again").expect("a profile's own TOML loads");
    assert_eq!(again, p, "a profile's TOML reads back to it");
    for (t, ks) in p.table_keys() {
        for k in ks {
            assert!(keys::known(t, k), "[{t}] {k} loaded");
        }
    }
    let _ = tern_hw::rsd::RsdModel::from_profile(&p);
    let _ = tern_hw::flow::FlowModel::from_profile(&p);
    let _ = tern_hw::rpc::RpcModel::from_profile(&p);
    let _ = tern_hw::chain::ChainModel::from_profile(&p);
    let _ = tern_hw::switch::SwitchModel::from_profile(&p);
});
