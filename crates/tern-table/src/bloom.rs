//! A Bloom filter as a switch builds one from register arrays: `ways` bit arrays of `width`
//! bits, each indexed by its own hash of the key (a partitioned Bloom filter: one hash a way),
//! tested and set in one read-check-write a way. CLIP (seed 004, §III-D, Appendix B) keeps two,
//! alternating, to tell flows that arrived before a server-group change from new ones.
//!
//! A key inserted is always found (no false negatives); a key never inserted is found with
//! probability the product of the ways' fill (the fraction of their bits set): about
//! `(1 - e^(-n/width))^ways` after `n` distinct keys.

use crate::TableError;
use crate::sketch::{RegisterCost, check_shape, way_index};

/// A partitioned Bloom filter of `ways` × `width` bits.
#[derive(Debug, Clone)]
pub struct Bloom {
    ways: usize,
    width: usize,
    seed: u64,
    /// Way `w`'s bits are bits `w * width..(w + 1) * width` of these words.
    words: Vec<u64>,
    /// Bits set, by way.
    set: Vec<u64>,
}

impl Bloom {
    /// A filter of `ways` ways (1 to [`crate::sketch::MAX_WAYS`]) of `width` bits (a power of
    /// two), empty.
    pub fn new(ways: usize, width: usize) -> Result<Bloom, TableError> {
        Bloom::with_seed(ways, width, 0)
    }

    /// As [`new`](Self::new), its hashes varied by `seed`.
    pub fn with_seed(ways: usize, width: usize, seed: u64) -> Result<Bloom, TableError> {
        check_shape("Bloom filter", ways, width)?;
        Ok(Bloom { ways, width, seed, words: vec![0; (ways * width).div_ceil(64)], set: vec![0; ways] })
    }

    #[inline]
    fn bit(&self, key: u64, w: usize) -> (usize, u64) {
        let b = w * self.width + way_index(key, w, self.width, self.seed);
        (b / 64, 1u64 << (b % 64))
    }

    /// Whether `key` may have been inserted (false: it certainly was not).
    #[inline]
    pub fn contains(&self, key: u64) -> bool {
        (0..self.ways).all(|w| {
            let (i, m) = self.bit(key, w);
            self.words[i] & m != 0
        })
    }

    /// Inserts `key` (the paper's *update*) and says whether it may have been there before
    /// (the *lookup* done in the same pass, as a switch's read-check-write does).
    #[inline]
    pub fn insert(&mut self, key: u64) -> bool {
        let mut was = true;
        for w in 0..self.ways {
            let (i, m) = self.bit(key, w);
            if self.words[i] & m == 0 {
                was = false;
                self.words[i] |= m;
                self.set[w] += 1;
            }
        }
        was
    }

    /// Empties it.
    pub fn clear(&mut self) {
        self.words.fill(0);
        self.set.fill(0);
    }

    /// The fraction of its bits set (0 to 1).
    pub fn fill(&self) -> f64 {
        self.set.iter().sum::<u64>() as f64 / (self.ways * self.width) as f64
    }

    /// The chance that a key never inserted is found now: the product of the ways' fill.
    pub fn false_positive_rate(&self) -> f64 {
        self.set.iter().map(|&s| s as f64 / self.width as f64).product()
    }

    /// Ways.
    pub fn ways(&self) -> usize {
        self.ways
    }

    /// Bits a way.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Its register arrays: a way each, `width` 1-bit entries.
    pub fn cost(&self) -> RegisterCost {
        RegisterCost {
            arrays: self.ways as u32,
            entries: self.width as u64,
            entry_bits: 1,
            hash_bits: self.ways as u32 * self.width.trailing_zeros(),
        }
    }
}
