//! Mirrored tables (CLIP §III-D): a switch table marked `mirrored` has a server-side twin with
//! the same keys and actions and no capacity limit. Every entry lives in the mirror by default;
//! the controller moves entries into the switch's own table (the *original*, of bounded
//! capacity) and back, and knows where each one is.
//!
//! Moves are make-before-break: an entry is written where it goes before it is taken from where
//! it was, so a packet always finds it in one of the two (in the original first; a miss goes on
//! to a server and its mirror). [`Mirrored::promote`] and [`Mirrored::demote`] do the two steps
//! in that order; [`Mirrored::begin_promote`] and [`Mirrored::finish`] expose them apart for a
//! controller whose writes to the switch and to the servers are not one step.

use std::hash::Hash;

use hashbrown::HashMap;

/// Where an entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    /// The switch's original table.
    Original,
    /// The servers' mirrored table.
    Mirror,
    /// Both, while it moves (make-before-break).
    Both,
}

/// Errors changing a mirrored table. A refused change leaves it as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MirrorError {
    /// The original table is full.
    #[error("the switch's table is full ({0} entries): demote one first")]
    Full(usize),
    /// No such entry.
    #[error("no such entry")]
    Missing,
}

/// An original table of bounded capacity and its unbounded mirror.
#[derive(Debug, Clone)]
pub struct Mirrored<K: Hash + Eq + Clone, V: Clone> {
    capacity: usize,
    original: HashMap<K, V>,
    mirror: HashMap<K, V>,
}

impl<K: Hash + Eq + Clone, V: Clone> Mirrored<K, V> {
    /// An empty table whose original holds at most `capacity` entries.
    pub fn new(capacity: usize) -> Mirrored<K, V> {
        Mirrored { capacity, original: HashMap::new(), mirror: HashMap::new() }
    }

    /// Adds or replaces an entry: a new one goes to the mirror; one that exists is replaced
    /// where it lives (in both while it moves).
    pub fn insert(&mut self, k: K, v: V) {
        match self.location(&k) {
            Some(Location::Original) => {
                self.original.insert(k, v);
            }
            Some(Location::Both) => {
                self.original.insert(k.clone(), v.clone());
                self.mirror.insert(k, v);
            }
            _ => {
                self.mirror.insert(k, v);
            }
        }
    }

    /// Removes an entry from wherever it lives; its value.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let a = self.original.remove(k);
        let b = self.mirror.remove(k);
        a.or(b)
    }

    /// Where `k` lives (None: nowhere).
    pub fn location(&self, k: &K) -> Option<Location> {
        match (self.original.contains_key(k), self.mirror.contains_key(k)) {
            (true, true) => Some(Location::Both),
            (true, false) => Some(Location::Original),
            (false, true) => Some(Location::Mirror),
            (false, false) => None,
        }
    }

    /// The switch's lookup: the original table only.
    pub fn lookup_original(&self, k: &K) -> Option<&V> {
        self.original.get(k)
    }

    /// A packet's lookup: the original first, then (at a server) the mirror.
    pub fn lookup(&self, k: &K) -> Option<(&V, Location)> {
        if let Some(v) = self.original.get(k) {
            return Some((v, Location::Original));
        }
        self.mirror.get(k).map(|v| (v, Location::Mirror))
    }

    /// First step of a promotion: writes `k` into the original (it is then in both). Refused
    /// when the original is full or `k` is not in the mirror.
    pub fn begin_promote(&mut self, k: &K) -> Result<(), MirrorError> {
        if self.original.contains_key(k) {
            return Ok(());
        }
        let v = self.mirror.get(k).ok_or(MirrorError::Missing)?.clone();
        if self.original.len() >= self.capacity {
            return Err(MirrorError::Full(self.capacity));
        }
        self.original.insert(k.clone(), v);
        Ok(())
    }

    /// First step of a demotion: writes `k` into the mirror (it is then in both).
    pub fn begin_demote(&mut self, k: &K) -> Result<(), MirrorError> {
        if self.mirror.contains_key(k) {
            return Ok(());
        }
        let v = self.original.get(k).ok_or(MirrorError::Missing)?.clone();
        self.mirror.insert(k.clone(), v);
        Ok(())
    }

    /// Second step of a move: takes `k` from where it was, leaving it only where it went
    /// (`to`). Refused when it is not in both.
    pub fn finish(&mut self, k: &K, to: Location) -> Result<(), MirrorError> {
        if self.location(k) != Some(Location::Both) {
            return Err(MirrorError::Missing);
        }
        match to {
            Location::Original => self.mirror.remove(k),
            _ => self.original.remove(k),
        };
        Ok(())
    }

    /// Moves `k` from the mirror into the original, make-before-break.
    pub fn promote(&mut self, k: &K) -> Result<(), MirrorError> {
        self.begin_promote(k)?;
        self.finish(k, Location::Original).or(Ok(()))
    }

    /// Moves `k` from the original back to the mirror, make-before-break.
    pub fn demote(&mut self, k: &K) -> Result<(), MirrorError> {
        self.begin_demote(k)?;
        self.finish(k, Location::Mirror).or(Ok(()))
    }

    /// Entries in the original, and in all.
    pub fn original_len(&self) -> usize {
        self.original.len()
    }

    /// Entries in all (each counted once).
    pub fn len(&self) -> usize {
        self.mirror.len() + self.original.keys().filter(|k| !self.mirror.contains_key(*k)).count()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.original.is_empty() && self.mirror.is_empty()
    }

    /// The original's capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The keys in the original.
    pub fn original_keys(&self) -> impl Iterator<Item = &K> {
        self.original.keys()
    }
}
