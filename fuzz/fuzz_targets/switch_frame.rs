//! Any frame through a switch program (`tern_switch::pipeline`): Appendix A's SNAT with an
//! entry, run on arbitrary bytes as a frame on any port, and on arbitrary bytes as a response:
//! nothing may panic; a frame the program forwards keeps its length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_switch::pipeline::{KeyMatch, Outcome, Pipeline};
use tern_switch::program::Program;

const SNAT: &str = include_str!("../../examples/switch/snat.toml");

/// The program with its entry (10.0.0.5:4000 → 8.8.8.8:53 over UDP, translated to
/// 192.0.2.1:20000), loaded once; each input runs on a copy.
fn loaded() -> &'static Pipeline {
    static P: std::sync::OnceLock<Pipeline> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let mut p = Pipeline::new(Program::parse(SNAT).expect("the example parses"));
        let key = [167772165u64, 134744072, 17, 4000, 53].map(KeyMatch::Exact);
        p.insert("nat", &key, 0, "translate", &[3221225985, 20000]).expect("an entry of the right shape");
        p
    })
}

fuzz_target!(|data: &[u8]| {
    let mut p = loaded().clone();
    let (port, rest) = data.split_first().map_or((0, data), |(p, r)| (*p, r));
    let (resp, frame) = rest.split_at(rest.len().min(6));
    let mut f = frame.to_vec();
    let len = f.len();
    if let Outcome::Forward { .. } = p.pre(&mut f, u16::from(port)) {
        assert_eq!(f.len(), len);
    }
    let _ = p.post(&mut f, resp);
});
