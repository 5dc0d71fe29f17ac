//! First-packet matching on arbitrary bytes: the compiled machine, the naive loop and (for the
//! offloadable rule sets) the hardware tables must never panic and must decide alike.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tern_dispatch::matcher::Machine;
use tern_dispatch::matcher::offload::HwTables;
use tern_dispatch::matcher::reference::NaiveMatcher;
use tern_dispatch::rules::{DispatchConfig, RuleSet};
use tern_dispatch::synth::Spec;

struct Set {
    machine: Machine,
    naive: NaiveMatcher,
    tables: Option<HwTables>,
}

static SETS: OnceLock<Vec<Set>> = OnceLock::new();

fn sets() -> Vec<RuleSet> {
    let schema = tern_idl::parse_str("kv.proto", tern_dispatch::synth::IDL).unwrap();
    let mut out = vec![
        Spec::default().rule_set(8),
        Spec { checks: 2, rules: 4, bytes: 1, seed: 5 }.rule_set(4),
    ];
    for text in [include_str!("../../examples/dispatch/kv.toml"), include_str!("../../examples/dispatch/mixed.toml")] {
        let cfg: DispatchConfig = toml::from_str(text).unwrap();
        out.push(RuleSet::from_config(&cfg, &schema).unwrap());
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let sets = SETS.get_or_init(|| {
        let cpu = tern_hw::Profile::builtin("cpu").unwrap();
        sets()
            .into_iter()
            .map(|s| Set {
                machine: Machine::compile(&s, 1).unwrap(),
                naive: NaiveMatcher::new(&s),
                tables: HwTables::build(&s, &cpu).ok(),
            })
            .collect()
    });
    let (req_type, payload) = match data.split_first() {
        Some((t, rest)) => (t % 3, rest),
        None => (1, data),
    };
    for s in sets {
        let d = s.machine.decide(req_type, payload);
        let mut scratch = Vec::new();
        assert_eq!(Some(d), s.naive.decide(1, req_type, payload, &mut scratch));
        if let Some(t) = &s.tables {
            assert_eq!(t.simulate(1, req_type, payload).map(|x| x.0), Some(d.queue));
        }
    }
});
