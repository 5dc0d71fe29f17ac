//! Resource model of a Tofino-like switch pipe (CLIP, seed 004; profile `clip-tofino`), from a
//! profile's numbers: stages, and per stage SRAM blocks (rows × bits), TCAM blocks (rows ×
//! bits), exact-match crossbar bytes, hash bits and VLIW slots (docs/clip.md, "The switch's
//! resources").
//!
//! What a structure takes, as the open P4 compiler's memory model counts it:
//!
//! - a register array of `entries` cells of `bits` (1, 8, 16, 32 or 64): cells packed into
//!   SRAM rows (`row bits / cell bits` a row), rows into blocks; indexed by `log2(entries)` hash
//!   bits;
//! - an exact-match table of `entries` of `key + action` bits (plus 4 bits of entry overhead):
//!   entries packed into rows (a wide entry spans rows), rows into blocks; its key through the
//!   crossbar; indexed by `log2(rows)` hash bits a way (one way here);
//! - a ternary or LPM table of `entries` keys of `key` bits: `ceil(key / tcam bits)` blocks
//!   side by side, `ceil(entries / tcam rows)` deep; its action data in SRAM (as an exact table
//!   of no key);
//! - an action: a VLIW slot per primitive.
//!
//! ```
//! use tern_hw::{Profile, switch::{SwitchModel, Use}};
//! let m = SwitchModel::from_profile(&Profile::builtin("clip-tofino").unwrap()).unwrap();
//! // CLIP's count-min sketch: two ways of 1024 32-bit counters.
//! let u = m.registers(2, 1024, 32);
//! assert_eq!((u.sram_blocks, u.hash_bits), (2, 20));
//! assert_eq!(m.totals().sram_blocks, 960);
//! ```

use serde::Serialize;

use crate::Profile;

/// The pipe's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SwitchModel {
    pub stages: u64,
    pub sram_blocks: u64,
    pub sram_rows: u64,
    pub sram_bits: u64,
    pub tcam_blocks: u64,
    pub tcam_rows: u64,
    pub tcam_bits: u64,
    pub crossbar_bytes: u64,
    pub hash_bits: u64,
    pub vliw_slots: u64,
}

/// What something uses of a pipe (or, from [`SwitchModel::totals`], what a pipe has).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Use {
    pub sram_blocks: u64,
    pub tcam_blocks: u64,
    pub crossbar_bytes: u64,
    pub hash_bits: u64,
    pub vliw_slots: u64,
}

impl std::ops::Add for Use {
    type Output = Use;
    fn add(self, o: Use) -> Use {
        Use {
            sram_blocks: self.sram_blocks.saturating_add(o.sram_blocks),
            tcam_blocks: self.tcam_blocks.saturating_add(o.tcam_blocks),
            crossbar_bytes: self.crossbar_bytes.saturating_add(o.crossbar_bytes),
            hash_bits: self.hash_bits.saturating_add(o.hash_bits),
            vliw_slots: self.vliw_slots.saturating_add(o.vliw_slots),
        }
    }
}

/// Bits of overhead an exact-match entry carries (valid and version bits).
pub const ENTRY_OVERHEAD_BITS: u64 = 4;

fn log2_ceil(n: u64) -> u64 {
    if n <= 1 { 0 } else { u64::from(64 - (n - 1).leading_zeros()) }
}

/// The most stages a profile may give a pipe (Tofino has 12, Tofino 2 has 20).
pub const MAX_STAGES: u64 = 64;
/// The most of any other per-stage resource a profile may give (blocks, rows, bits, bytes,
/// slots).
pub const MAX_SHAPE: u64 = 1 << 20;

impl SwitchModel {
    /// The model of `p`, or an error naming what the profile lacks.
    pub fn from_profile(p: &Profile) -> Result<SwitchModel, String> {
        // Each value bounded: the placement makes a stage's worth of state for each stage, and
        // a pipe's totals multiply them.
        let within = |k: &str, most: u64| {
            let v = p
                .capacity(k)
                .filter(|&v| v > 0)
                .ok_or_else(|| format!("profile {} has no {k} (or it is 0)", p.name))?;
            if v > most {
                return Err(format!("profile {}: {k} = {v} is more than {most}", p.name));
            }
            Ok(v)
        };
        let cap = |k: &str| within(k, MAX_SHAPE);
        Ok(SwitchModel {
            stages: within("switch.stages", MAX_STAGES)?,
            sram_blocks: cap("switch.sram_blocks")?,
            sram_rows: cap("switch.sram_rows")?,
            sram_bits: cap("switch.sram_bits")?,
            tcam_blocks: cap("switch.tcam_blocks")?,
            tcam_rows: cap("switch.tcam_rows")?,
            tcam_bits: cap("switch.tcam_bits")?,
            crossbar_bytes: cap("switch.crossbar_bytes")?,
            hash_bits: cap("switch.hash_bits")?,
            vliw_slots: cap("switch.vliw_slots")?,
        })
    }

    /// What a pipe has: each stage's resources times the stages (each at most [`MAX_STAGES`]
    /// and [`MAX_SHAPE`]: no product overflows).
    pub fn totals(&self) -> Use {
        Use {
            sram_blocks: self.sram_blocks * self.stages,
            tcam_blocks: self.tcam_blocks * self.stages,
            crossbar_bytes: self.crossbar_bytes * self.stages,
            hash_bits: self.hash_bits * self.stages,
            vliw_slots: self.vliw_slots * self.stages,
        }
    }

    /// SRAM blocks for `entries` items of `bits` each, packed into rows (a wide item spans
    /// rows).
    /// A program's sizes are its author's: the arithmetic saturates rather than wrap, so that
    /// no size can come out small enough to fit.
    fn sram_for(&self, entries: u64, bits: u64) -> (u64, u64) {
        let bits = bits.max(1);
        let rows = if bits <= self.sram_bits {
            entries.div_ceil(self.sram_bits / bits)
        } else {
            entries.saturating_mul(bits.div_ceil(self.sram_bits))
        };
        (rows.div_ceil(self.sram_rows), rows)
    }

    /// `arrays` register arrays of `entries` cells of `bits`, each indexed by a hash.
    pub fn registers(&self, arrays: u64, entries: u64, bits: u64) -> Use {
        let (blocks, _) = self.sram_for(entries, bits);
        Use {
            sram_blocks: arrays.saturating_mul(blocks),
            hash_bits: arrays.saturating_mul(log2_ceil(entries)),
            ..Use::default()
        }
    }

    /// An exact-match table of `entries` with a `key_bits` key and `action_bits` of action data.
    pub fn exact(&self, entries: u64, key_bits: u64, action_bits: u64) -> Use {
        let (blocks, rows) =
            self.sram_for(entries, key_bits.saturating_add(action_bits).saturating_add(ENTRY_OVERHEAD_BITS));
        Use {
            sram_blocks: blocks,
            crossbar_bytes: key_bits.div_ceil(8),
            hash_bits: log2_ceil(rows.min(self.sram_rows).max(1)) + log2_ceil(blocks.max(1)),
            ..Use::default()
        }
    }

    /// A ternary or LPM table of `entries` with a `key_bits` key and `action_bits` of action
    /// data (in SRAM).
    pub fn ternary(&self, entries: u64, key_bits: u64, action_bits: u64) -> Use {
        let wide = key_bits.div_ceil(self.tcam_bits).max(1);
        let deep = entries.div_ceil(self.tcam_rows).max(1);
        let (data, _) = if action_bits > 0 { self.sram_for(entries, action_bits) } else { (0, 0) };
        Use { tcam_blocks: wide.saturating_mul(deep), sram_blocks: data, ..Use::default() }
    }

    /// An action of `primitives` operations.
    pub fn action(&self, primitives: u64) -> Use {
        Use { vliw_slots: primitives, ..Use::default() }
    }

    /// `u` as percentages of a pipe's totals, in `Use`'s field order.
    pub fn percent(&self, u: &Use) -> [f64; 5] {
        let t = self.totals();
        let p = |a: u64, b: u64| if b == 0 { 0.0 } else { 100.0 * a as f64 / b as f64 };
        [
            p(u.sram_blocks, t.sram_blocks),
            p(u.tcam_blocks, t.tcam_blocks),
            p(u.crossbar_bytes, t.crossbar_bytes),
            p(u.hash_bits, t.hash_bits),
            p(u.vliw_slots, t.vliw_slots),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> SwitchModel {
        SwitchModel::from_profile(&Profile::builtin("clip-tofino").unwrap()).unwrap()
    }

    /// A profile's shape is bounded (the placement makes state for each stage) and named when
    /// not; a program's sizes saturate rather than wrap (a table of 2^64 − 1 entries once came
    /// out as a few blocks).
    #[test]
    fn shapes_are_bounded_and_sizes_saturate() {
        let mut p = Profile::builtin("clip-tofino").unwrap();
        p.capacity.insert("switch.stages".into(), MAX_STAGES + 1);
        let e = SwitchModel::from_profile(&p).unwrap_err();
        assert!(e.contains("switch.stages = 65 is more than 64"), "{e}");
        let mut p = Profile::builtin("clip-tofino").unwrap();
        p.capacity.insert("switch.sram_rows".into(), MAX_SHAPE + 1);
        assert!(SwitchModel::from_profile(&p).unwrap_err().contains("switch.sram_rows"));
        let m = model();
        let t = m.totals();
        assert!(m.exact(u64::MAX, 104, 32).sram_blocks > t.sram_blocks);
        assert!(m.exact(u64::MAX, u64::MAX, u64::MAX).sram_blocks > t.sram_blocks);
        assert!(m.ternary(u64::MAX, 4096, 32).tcam_blocks > t.tcam_blocks);
        assert!(m.registers(u64::MAX, u64::MAX, 64).sram_blocks > t.sram_blocks);
        let full = Use { sram_blocks: u64::MAX, ..Use::default() };
        assert_eq!((full + m.exact(1, 104, 32)).sram_blocks, u64::MAX);
    }

    /// The pipe's totals: 12 stages of 80 SRAM and 24 TCAM blocks, 128 crossbar bytes, 416 hash
    /// bits and 32 VLIW slots.
    #[test]
    fn totals_of_a_pipe() {
        let t = model().totals();
        assert_eq!(
            (t.sram_blocks, t.tcam_blocks, t.crossbar_bytes, t.hash_bits, t.vliw_slots),
            (960, 288, 1536, 4992, 384)
        );
    }

    /// Registers: CLIP's sketch (2 × 1024 × 32 bits: four cells a row, 256 rows, a block a way,
    /// 10 hash bits a way); doubled in width, a hash bit more a way and still a block a way (512
    /// rows); doubled in ways, twice everything; a Bloom filter of 2 × 65,536 bits packs 128
    /// cells a row (512 rows: a block a way, 16 hash bits a way).
    #[test]
    fn registers_pack_into_rows() {
        let m = model();
        assert_eq!(m.registers(2, 1024, 32), Use { sram_blocks: 2, hash_bits: 20, ..Use::default() });
        assert_eq!(m.registers(2, 2048, 32), Use { sram_blocks: 2, hash_bits: 22, ..Use::default() });
        assert_eq!(m.registers(4, 1024, 32), Use { sram_blocks: 4, hash_bits: 40, ..Use::default() });
        assert_eq!(m.registers(2, 65_536, 1), Use { sram_blocks: 2, hash_bits: 32, ..Use::default() });
        assert_eq!(m.registers(1, 8192, 32).sram_blocks, 2);
    }

    /// Tables: 2,048 entries of a 104-bit 5-tuple key and 32 bits of action data (140 bits with
    /// the overhead: two rows an entry, 4,096 rows, 4 blocks; 13 crossbar bytes; 10 hash bits for
    /// the row and 2 for the block); 512 IPv4 routes fill one TCAM block and 513 two; a 64-bit
    /// key takes two blocks side by side.
    #[test]
    fn tables_take_blocks() {
        let m = model();
        let e = m.exact(2048, 104, 32);
        assert_eq!((e.sram_blocks, e.crossbar_bytes, e.hash_bits), (4, 13, 12));
        assert_eq!(m.ternary(512, 32, 0).tcam_blocks, 1);
        assert_eq!(m.ternary(513, 32, 0).tcam_blocks, 2);
        assert_eq!(m.ternary(512, 64, 16).tcam_blocks, 2);
        assert_eq!(m.ternary(512, 32, 16).sram_blocks, 1);
        assert_eq!(m.action(3).vliw_slots, 3);
        let pct = m.percent(&(m.registers(2, 1024, 32) + m.ternary(512, 32, 0)));
        assert!((pct[0] - 100.0 * 2.0 / 960.0).abs() < 1e-9 && (pct[1] - 100.0 / 288.0).abs() < 1e-9);
    }

    /// A profile missing a value is refused by name.
    #[test]
    fn missing_values_are_named() {
        let e = SwitchModel::from_profile(&Profile::builtin("cpu").unwrap()).unwrap_err();
        assert!(e.contains("switch.stages"), "{e}");
    }
}
