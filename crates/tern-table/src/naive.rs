//! Reference twins: the simplest correct tables, scanned entry by entry the way a CAM compares
//! every entry at once. Property tests compare the optimized tables with these.

use crate::em::EmKey;
use crate::lpm::LpmKey;

/// Longest-prefix match as a list of (prefix, length, value).
#[derive(Debug, Clone)]
pub struct NaiveLpm<K: LpmKey> {
    rules: Vec<(K, u32, u32)>,
}

impl<K: LpmKey> Default for NaiveLpm<K> {
    fn default() -> Self {
        NaiveLpm { rules: Vec::new() }
    }
}

impl<K: LpmKey> NaiveLpm<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds or updates a rule; returns the previous value.
    pub fn insert(&mut self, net: K::Net, value: u32) -> Option<u32> {
        let (key, len) = K::from_net(net);
        match self.rules.iter_mut().find(|(k, l, _)| *k == key && *l == len) {
            Some(r) => Some(std::mem::replace(&mut r.2, value)),
            None => {
                self.rules.push((key, len, value));
                None
            }
        }
    }
    /// Removes a rule; returns its value.
    pub fn remove(&mut self, net: K::Net) -> Option<u32> {
        let (key, len) = K::from_net(net);
        let i = self.rules.iter().position(|(k, l, _)| *k == key && *l == len)?;
        Some(self.rules.swap_remove(i).2)
    }
    /// The value of the longest matching prefix.
    pub fn lookup_key(&self, key: K) -> Option<u32> {
        self.rules.iter().filter(|(k, l, _)| key.masked(*l) == *k).max_by_key(|(_, l, _)| *l).map(|r| r.2)
    }
    /// Rules in the table.
    pub fn len(&self) -> usize {
        self.rules.len()
    }
    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// Exact match as a list of (key, value).
#[derive(Debug, Clone)]
pub struct NaiveExact<K: EmKey> {
    entries: Vec<(K, u32)>,
}

impl<K: EmKey> Default for NaiveExact<K> {
    fn default() -> Self {
        NaiveExact { entries: Vec::new() }
    }
}

impl<K: EmKey> NaiveExact<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds or updates a key; returns the previous value.
    pub fn insert(&mut self, key: K, value: u32) -> Option<u32> {
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => Some(std::mem::replace(&mut e.1, value)),
            None => {
                self.entries.push((key, value));
                None
            }
        }
    }
    /// Removes a key; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<u32> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.swap_remove(i).1)
    }
    /// The value of a key.
    pub fn lookup(&self, key: &K) -> Option<u32> {
        self.entries.iter().find(|(k, _)| k == key).map(|e| e.1)
    }
    /// Keys in the table.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A count-min sketch as nested vectors of 64-bit counters (one vector a way), indexed as
/// [`crate::sketch::CountMin`] is.
#[derive(Debug, Clone)]
pub struct NaiveCountMin {
    seed: u64,
    rows: Vec<Vec<u64>>,
}

impl NaiveCountMin {
    /// `ways` rows of `width` counters (the shape checked by the fast sketch, not here).
    pub fn new(ways: usize, width: usize, seed: u64) -> NaiveCountMin {
        NaiveCountMin { seed, rows: vec![vec![0; width]; ways] }
    }

    /// Adds `n` to `key` in every row; its new estimate (at most `u32::MAX`, as a register).
    pub fn add(&mut self, key: u64, n: u32) -> u32 {
        let seed = self.seed;
        for (w, row) in self.rows.iter_mut().enumerate() {
            let i = crate::sketch::way_index(key, w, row.len(), seed);
            row[i] = (row[i] + u64::from(n)).min(u64::from(u32::MAX));
        }
        self.estimate(key)
    }

    /// The least of `key`'s counters.
    pub fn estimate(&self, key: u64) -> u32 {
        self.rows
            .iter()
            .enumerate()
            .map(|(w, row)| row[crate::sketch::way_index(key, w, row.len(), self.seed)])
            .min()
            .unwrap_or(0) as u32
    }
}

/// A Bloom filter as nested vectors of booleans (one vector a way), indexed as
/// [`crate::bloom::Bloom`] is.
#[derive(Debug, Clone)]
pub struct NaiveBloom {
    seed: u64,
    rows: Vec<Vec<bool>>,
}

impl NaiveBloom {
    /// `ways` rows of `width` bits.
    pub fn new(ways: usize, width: usize, seed: u64) -> NaiveBloom {
        NaiveBloom { seed, rows: vec![vec![false; width]; ways] }
    }

    /// Whether every row has `key`'s bit.
    pub fn contains(&self, key: u64) -> bool {
        self.rows.iter().enumerate().all(|(w, row)| row[crate::sketch::way_index(key, w, row.len(), self.seed)])
    }

    /// Sets `key`'s bits; whether they all were set before.
    pub fn insert(&mut self, key: u64) -> bool {
        let was = self.contains(key);
        let seed = self.seed;
        for (w, row) in self.rows.iter_mut().enumerate() {
            let i = crate::sketch::way_index(key, w, row.len(), seed);
            row[i] = true;
        }
        was
    }

    /// Empties it.
    pub fn clear(&mut self) {
        for row in &mut self.rows {
            row.fill(false);
        }
    }
}

/// Masked keys as a list of (key, mask, rank, value), scanned entry by entry: the twin of
/// [`crate::masked::MaskedTable`].
#[derive(Debug, Clone, Default)]
pub struct NaiveMasked<V> {
    entries: Vec<(Vec<u64>, Vec<u64>, u128, V)>,
}

impl<V: Clone> NaiveMasked<V> {
    /// An empty table.
    pub fn new() -> Self {
        NaiveMasked { entries: Vec::new() }
    }
    /// Adds an entry.
    pub fn insert(&mut self, key: &[u64], mask: &[u64], rank: u128, value: V) {
        self.entries.push((key.to_vec(), mask.to_vec(), rank, value));
    }
    /// Removes the first entry of this key (under its mask), mask and rank for which `is` holds.
    pub fn remove(&mut self, key: &[u64], mask: &[u64], rank: u128, is: impl Fn(&V) -> bool) -> Option<V> {
        let same = |a: &[u64], b: &[u64]| a.iter().zip(b).zip(mask).all(|((x, y), m)| x & m == y & m);
        let i = self.entries.iter().position(|(k, m, r, v)| *m == mask && same(k, key) && *r == rank && is(v))?;
        Some(self.entries.remove(i).3)
    }
    /// The best-ranked match (the earliest of equal ranks).
    pub fn lookup(&self, key: &[u64]) -> Option<&V> {
        let mut best: Option<(u128, &V)> = None;
        for (k, m, r, v) in &self.entries {
            let hit = k.len() == key.len() && k.iter().zip(m).zip(key).all(|((k, m), x)| k & m == x & m);
            if hit && best.is_none_or(|(b, _)| *r > b) {
                best = Some((*r, v));
            }
        }
        best.map(|(_, v)| v)
    }
    /// Entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
