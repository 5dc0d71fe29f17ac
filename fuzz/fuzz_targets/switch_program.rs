//! CLIP switch programs (`tern_switch::program::Program::parse`) on arbitrary text: nothing may
//! panic; a program that loads places on `clip-tofino` or says what does not fit, and a
//! placement puts every item at or after its first stage within the pipe.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_switch::program::Program;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(p) = Program::parse(text) else { return };
    let profile = tern_hw::Profile::builtin("clip-tofino").expect("built in");
    let model = tern_hw::switch::SwitchModel::from_profile(&profile).expect("a switch profile");
    if let Ok(pl) = p.placement(&model) {
        for l in &pl.items {
            assert!(l.first <= l.last && (l.last as u64) < model.stages, "{l:?}");
        }
    }
});
