//! The rule parser: arbitrary text as a pattern, as a literal, and as a whole rule file checked
//! against the KV IDL, compiled, and mapped onto the U250's Matcher. Nothing may panic; a
//! pattern that parses must print back to itself.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tern_dispatch::matcher::Machine;
use tern_dispatch::matcher::offload::{self, HwTables, Workload};
use tern_dispatch::rules::pattern::{DisplayPattern, parse_literal, parse_pattern};
use tern_dispatch::rules::{DispatchConfig, RuleSet};

static SCHEMA: OnceLock<tern_idl::Schema> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(ops) = parse_pattern(text) {
        assert_eq!(parse_pattern(&DisplayPattern(&ops).to_string()).as_ref(), Ok(&ops));
    }
    let _ = parse_literal(text);
    let schema = SCHEMA.get_or_init(|| tern_idl::parse_str("kv.proto", tern_dispatch::synth::IDL).unwrap());
    let Ok(cfg) = toml::from_str::<DispatchConfig>(text) else { return };
    let Ok(set) = RuleSet::from_config(&cfg, schema) else { return };
    let profile = tern_hw::Profile::builtin("qingniao-u250").unwrap();
    for app in &set.apps {
        let _ = Machine::compile(&set, app.id);
    }
    let _ = offload::report(&set, &profile, Workload::default());
    let _ = HwTables::build(&set, &profile);
});
