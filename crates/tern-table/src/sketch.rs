//! A count-min sketch (Cormode and Muthukrishnan) as a switch builds one from register arrays:
//! `ways` arrays of `width` 32-bit counters, each indexed by its own hash of the key; a packet
//! adds to its counter in every way (a register read-modify-write a way, one stage each) and
//! the estimate is the least of them. CLIP (seed 004, §III-D) counts the packets its switch
//! table did not serve this way (1024 × 2 in `clip-tofino`) to find heavy flows.
//!
//! The estimate never falls below the true count; it exceeds it by at most `2N / width` with
//! probability at least `1 - 2^-ways` over the hashes, for `N` packets counted since the last
//! [`CountMin::clear`]. Counters saturate at `u32::MAX` instead of wrapping, as a saturating
//! register ALU does.

use crate::TableError;

/// Fixed seeds of the ways' hashes (a switch's hash units take different polynomials; here a
/// 64-bit finalizer of the key xor a seed a way).
const SEEDS: [u64; 8] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0x85eb_ca77_c2b2_ae63,
    0x27d4_eb2f_1656_67c5,
    0xd6e8_feb8_6659_fd93,
    0xa076_1d64_78bd_642f,
    0xe703_7ed1_a0b4_28db,
];

/// The most ways a sketch or Bloom filter has (a switch spends a stage on each).
pub const MAX_WAYS: usize = SEEDS.len();

/// MurmurHash3's 64-bit finalizer: every input bit moves every output bit (the hash the
/// sketches, filters and CLIP's pipeline use).
#[inline]
pub fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}

/// The slot of `key` in way `way` of an array of `width` slots (a power of two), under `seed`:
/// the index a sketch or Bloom filter and its naive twin both use.
#[inline]
pub fn way_index(key: u64, way: usize, width: usize, seed: u64) -> usize {
    (fmix64(key ^ SEEDS[way % MAX_WAYS] ^ seed) as usize) & (width - 1)
}

/// What a structure of register arrays takes in hardware: `arrays` arrays (one a way, each in
/// a stage of its own) of `entries` entries of `entry_bits` bits, and the hash bits that index
/// them (`log2(entries)` a way). A profile's model turns these into its memory blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterCost {
    pub arrays: u32,
    pub entries: u64,
    pub entry_bits: u32,
    pub hash_bits: u32,
}

impl RegisterCost {
    /// Bits of state in all.
    pub fn bits(&self) -> u64 {
        u64::from(self.arrays) * self.entries * u64::from(self.entry_bits)
    }
}

/// Checks a ways × width shape: 1 to [`MAX_WAYS`] ways of a power-of-two width of at least 1.
pub(crate) fn check_shape(what: &'static str, ways: usize, width: usize) -> Result<(), TableError> {
    if !(1..=MAX_WAYS).contains(&ways) {
        return Err(TableError::Shape { what, detail: format!("{ways} ways: 1 to {MAX_WAYS}") });
    }
    if width == 0 || !width.is_power_of_two() || width > 1 << 30 {
        return Err(TableError::Shape { what, detail: format!("width {width}: a power of two up to 2^30") });
    }
    Ok(())
}

/// A count-min sketch of `ways` × `width` 32-bit counters.
#[derive(Debug, Clone)]
pub struct CountMin {
    ways: usize,
    width: usize,
    seed: u64,
    /// Way `w`'s counters are `counters[w * width..(w + 1) * width]`.
    counters: Vec<u32>,
    /// Packets added since the last clear (saturating).
    total: u64,
}

impl CountMin {
    /// A sketch of `ways` ways (1 to [`MAX_WAYS`]) of `width` counters (a power of two), all 0.
    pub fn new(ways: usize, width: usize) -> Result<CountMin, TableError> {
        CountMin::with_seed(ways, width, 0)
    }

    /// As [`new`](Self::new), its hashes varied by `seed`.
    pub fn with_seed(ways: usize, width: usize, seed: u64) -> Result<CountMin, TableError> {
        check_shape("count-min sketch", ways, width)?;
        Ok(CountMin { ways, width, seed, counters: vec![0; ways * width], total: 0 })
    }

    /// Adds `n` to `key`'s counter in every way (saturating) and returns its new estimate.
    #[inline]
    pub fn add(&mut self, key: u64, n: u32) -> u32 {
        let mut est = u32::MAX;
        for w in 0..self.ways {
            let i = w * self.width + way_index(key, w, self.width, self.seed);
            let c = self.counters[i].saturating_add(n);
            self.counters[i] = c;
            est = est.min(c);
        }
        self.total = self.total.saturating_add(u64::from(n));
        est
    }

    /// Adds one to each key of `keys` in turn, appending each one's new estimate to `out`.
    pub fn add_batch(&mut self, keys: &[u64], out: &mut Vec<u32>) {
        out.reserve(keys.len());
        for &k in keys {
            out.push(self.add(k, 1));
        }
    }

    /// `key`'s estimate: the least of its counters.
    #[inline]
    pub fn estimate(&self, key: u64) -> u32 {
        (0..self.ways)
            .map(|w| self.counters[w * self.width + way_index(key, w, self.width, self.seed)])
            .min()
            .unwrap_or(0)
    }

    /// `key`'s count-mean-min estimate (Deng and Rafiei): each way's counter less the noise the
    /// other keys put in it — the rest of the way's total spread over its other counters — the
    /// median over the ways (the mean of the middle two for an even number), at most the
    /// count-min estimate and at least 0. Nearly unbiased where the plain estimate always
    /// overcounts; a controller reading the counters computes it, the data plane need not.
    pub fn estimate_debiased(&self, key: u64) -> f64 {
        let min = f64::from(self.estimate(key));
        if self.width < 2 {
            return min;
        }
        let total = self.total as f64;
        let mut v: Vec<f64> = (0..self.ways)
            .map(|w| {
                let c = f64::from(self.counters[w * self.width + way_index(key, w, self.width, self.seed)]);
                c - (total - c) / (self.width - 1) as f64
            })
            .collect();
        v.sort_unstable_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        median.clamp(0.0, min)
    }

    /// Sets every counter to 0 (a new interval).
    pub fn clear(&mut self) {
        self.counters.fill(0);
        self.total = 0;
    }

    /// Ways.
    pub fn ways(&self) -> usize {
        self.ways
    }

    /// Counters a way.
    pub fn width(&self) -> usize {
        self.width
    }

    /// What was added since the last clear.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Its register arrays: a way each, `width` 32-bit counters.
    pub fn cost(&self) -> RegisterCost {
        RegisterCost {
            arrays: self.ways as u32,
            entries: self.width as u64,
            entry_bits: 32,
            hash_bits: self.ways as u32 * self.width.trailing_zeros(),
        }
    }
}
