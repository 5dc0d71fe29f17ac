//! CLIP's modules projected on `clip-tofino` (docs/clip.md, "Projection"): each module places
//! in a pipe; the figures follow the modules' sizes (a sketch twice as wide takes twice the
//! SRAM and hash bits; eight times as wide, two blocks a way); forwarding's LPM route table takes one TCAM block, as in
//! the paper's Table II (0.35% of a pipe).

use tern_hw::Profile;
use tern_hw::switch::SwitchModel;
use tern_switch::modules::{self, TABLE_II};
use tern_switch::switch::SwitchConfig;

fn model() -> SwitchModel {
    SwitchModel::from_profile(&Profile::builtin("clip-tofino").unwrap()).unwrap()
}

#[test]
fn the_modules_place_and_follow_their_sizes() {
    let m = model();
    let cfg = SwitchConfig::default();
    let mods = modules::project(&m, &cfg).unwrap();
    assert_eq!(mods.iter().map(|x| x.name).collect::<Vec<_>>(), ["selecting", "scalability", "forwarding"]);
    let sel = &mods[0].total;
    // The sketch: 2 ways of 1024 32-bit counters, a block and 10 hash bits a way.
    assert_eq!((sel.sram_blocks, sel.hash_bits), (2, 20));
    let fwd = &mods[2].total;
    assert_eq!(fwd.tcam_blocks, 1);
    let pct = m.percent(fwd);
    assert!((pct[1] - TABLE_II[2].1[2]).abs() < 0.02, "TCAM {:.3}%", pct[1]);
    // Double the sketch's ways: its SRAM, hash bits and stateful operations double.
    let mut ways = cfg.clone();
    ways.offload.sketch_ways *= 2;
    let w = modules::project(&m, &ways).unwrap();
    assert_eq!(w[0].total.sram_blocks, 2 * sel.sram_blocks);
    assert_eq!(w[0].total.hash_bits, 2 * sel.hash_bits);
    assert_eq!(w[0].total.vliw_slots, sel.vliw_slots + 2);
    assert!(m.percent(&w[0].total)[0] > m.percent(sel)[0]);
    // Counters eight times as many a way: 256 Kbit, two blocks a way, three hash bits more.
    let mut wide = cfg.clone();
    wide.offload.sketch_width *= 8;
    let w = modules::project(&m, &wide).unwrap();
    assert_eq!(w[0].total.sram_blocks, 2 * sel.sram_blocks);
    assert_eq!(w[0].total.hash_bits, sel.hash_bits + 6);
    // Wider filters: scalability's SRAM grows; the others stay.
    let mut big = cfg.clone();
    big.selector.filter_width *= 16;
    let b = modules::project(&m, &big).unwrap();
    assert!(b[1].total.sram_blocks > mods[1].total.sram_blocks);
    assert_eq!(b[0].total, mods[0].total);
    assert_eq!(b[2].total, mods[2].total);
    // More pins: forwarding's exact table grows.
    let mut pins = cfg.clone();
    pins.selector.pins *= 8;
    assert!(modules::project(&m, &pins).unwrap()[2].total.sram_blocks > fwd.sram_blocks);
}
