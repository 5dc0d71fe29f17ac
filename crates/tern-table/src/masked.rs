//! A masked-key table over keys of several 64-bit words (a switch pipeline's ternary and LPM
//! tables, CLIP's `tern_switch::pipeline`), by tuple space search: entries are grouped by their
//! mask, each group a hash map of masked keys, so a lookup is one hash probe a mask instead of a
//! comparison an entry. Among the entries that match, the highest rank wins (the pipeline's
//! rank: prefix length, then priority, then the earliest entry); groups are probed in order of
//! the best rank they hold, and probing stops once no group left can beat the match found.
//!
//! Its reference twin is [`crate::naive::NaiveMasked`]: a list scanned entry by entry.

use hashbrown::HashMap;

/// One mask's entries: masked key → the entries under it, best rank first.
#[derive(Debug, Clone)]
struct Group<V> {
    mask: Box<[u64]>,
    map: HashMap<Box<[u64]>, Vec<(u128, V)>>,
    /// The best rank of its entries.
    best: u128,
    len: usize,
}

/// A masked-key table: each entry a key, a mask (1 bits compared), a rank and a value.
#[derive(Debug, Clone)]
pub struct MaskedTable<V> {
    words: usize,
    groups: Vec<Group<V>>,
    len: usize,
}

impl<V: Clone> MaskedTable<V> {
    /// An empty table of keys of `words` words.
    pub fn new(words: usize) -> MaskedTable<V> {
        MaskedTable { words, groups: Vec::new(), len: 0 }
    }

    /// Entries in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Distinct masks (hash probes a lookup makes at most).
    pub fn masks(&self) -> usize {
        self.groups.len()
    }

    fn masked(key: &[u64], mask: &[u64]) -> Box<[u64]> {
        key.iter().zip(mask).map(|(k, m)| k & m).collect()
    }

    /// Adds an entry: `key` under `mask` (its bits outside the mask are ignored), with `rank`
    /// (higher wins). Ranks should be distinct (the pipeline folds the entry's order into its
    /// rank); of equal ranks under one masked key the earlier wins, across masks either may.
    /// Keys and masks of another length than the table's are refused (false).
    pub fn insert(&mut self, key: &[u64], mask: &[u64], rank: u128, value: V) -> bool {
        if key.len() != self.words || mask.len() != self.words {
            return false;
        }
        let k = Self::masked(key, mask);
        let gi = match self.groups.iter().position(|g| *g.mask == *mask) {
            Some(i) => i,
            None => {
                self.groups.push(Group { mask: mask.into(), map: HashMap::new(), best: 0, len: 0 });
                self.groups.len() - 1
            }
        };
        let g = &mut self.groups[gi];
        let bucket = g.map.entry(k).or_default();
        // After every entry of a rank at least as high: equal ranks keep insertion order.
        let at = bucket.iter().position(|(r, _)| *r < rank).unwrap_or(bucket.len());
        bucket.insert(at, (rank, value));
        g.best = if g.len == 0 { rank } else { g.best.max(rank) };
        g.len += 1;
        self.len += 1;
        self.sort_groups();
        true
    }

    /// Removes the first entry with exactly this key, mask and rank for which `is` holds;
    /// returns its value.
    pub fn remove(&mut self, key: &[u64], mask: &[u64], rank: u128, is: impl Fn(&V) -> bool) -> Option<V> {
        if key.len() != self.words || mask.len() != self.words {
            return None;
        }
        let gi = self.groups.iter().position(|g| *g.mask == *mask)?;
        let k = Self::masked(key, mask);
        let g = &mut self.groups[gi];
        let bucket = g.map.get_mut(&k)?;
        let i = bucket.iter().position(|(r, v)| *r == rank && is(v))?;
        let (_, v) = bucket.remove(i);
        if bucket.is_empty() {
            g.map.remove(&k);
        }
        g.len -= 1;
        self.len -= 1;
        if g.len == 0 {
            self.groups.remove(gi);
        } else {
            g.best = g.map.values().filter_map(|b| b.first().map(|e| e.0)).max().unwrap_or(0);
            self.sort_groups();
        }
        Some(v)
    }

    fn sort_groups(&mut self) {
        self.groups.sort_by_key(|g| std::cmp::Reverse(g.best));
    }

    /// The value of the best-ranked entry matching `key` (None: none matches, or a key of
    /// another length). `scratch` holds the masked key (no allocation once it has grown).
    pub fn lookup(&self, key: &[u64], scratch: &mut Vec<u64>) -> Option<&V> {
        if key.len() != self.words {
            return None;
        }
        let mut best: Option<(u128, &V)> = None;
        for g in &self.groups {
            if best.is_some_and(|(r, _)| r >= g.best) {
                break;
            }
            scratch.clear();
            scratch.extend(key.iter().zip(g.mask.iter()).map(|(k, m)| k & m));
            if let Some((r, v)) = g.map.get(&scratch[..]).and_then(|b| b.first())
                && best.is_none_or(|(br, _)| *r > br)
            {
                best = Some((*r, v));
            }
        }
        best.map(|(_, v)| v)
    }
}
