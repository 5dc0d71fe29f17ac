//! First-packet matching on arbitrary bytes: the compiled machine, the naive loop and (for the
//! offloadable rule sets) the hardware tables must never panic and must decide alike; the
//! kernel steering program, interpreted, never panics, always names a socket, and (for rule sets
//! it compiles whole) names the RSD's queue for every single-packet request the RSD decides.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tern_dispatch::matcher::Machine;
use tern_dispatch::matcher::offload::HwTables;
use tern_dispatch::matcher::reference::NaiveMatcher;
use tern_dispatch::rules::{DispatchConfig, RuleSet};
use tern_dispatch::synth::Spec;

struct Set {
    rsd: std::sync::Mutex<tern_dispatch::rsd::Rsd>,
    machine: Machine,
    naive: NaiveMatcher,
    tables: Option<HwTables>,
    steering: tern_dispatch::steer::Steering,
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
                rsd: {
                    let mut r = tern_dispatch::rsd::Rsd::new(16, 8);
                    r.install(1, Some(std::sync::Arc::new(Machine::compile(&s, 1).unwrap())));
                    r.set_bytestream(256);
                    std::sync::Mutex::new(r)
                },
                machine: Machine::compile(&s, 1).unwrap(),
                naive: NaiveMatcher::new(&s),
                tables: HwTables::build(&s, &cpu).ok(),
                steering: tern_dispatch::steer::Steering::compile(&s, 8),
            })
            .collect()
    });
    let (req_type, payload) = match data.split_first() {
        Some((t, rest)) => (t % 3, rest),
        None => (1, data),
    };
    // The first-packet rule on arbitrary bytes, and the RSD on them as a whole datagram.
    let _ = tern_qnp::check_first_packet(payload, data.first().copied().unwrap_or(0), &[1, 2]);
    for s in sets {
        let socket = s.steering.socket_of(data);
        assert!(socket < 8);
        if let Ok(mut rsd) = s.rsd.lock()
            && let tern_dispatch::rsd::Verdict::Queue(q) = rsd.dispatch(7, data)
            && s.steering.complete()
            && data.get(14..16) == Some(&[1, 0])
        {
            assert_eq!(socket, u32::from(q));
        }
        let d = s.machine.decide(req_type, payload);
        let mut scratch = Vec::new();
        assert_eq!(Some(d), s.naive.decide(1, req_type, payload, &mut scratch));
        if let Some(t) = &s.tables {
            assert_eq!(t.simulate(1, req_type, payload).map(|x| x.0), Some(d.queue));
        }
    }
});
