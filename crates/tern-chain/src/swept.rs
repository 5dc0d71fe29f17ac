//! A table whose idle entries are forgotten a part at a time (a firewall's flows, a transport's
//! connections): its entries are kept in [`SHARDS`] maps by a hash of the key, and a pass that
//! looks for idle ones — begun no more often than ten times an idle period ([`SweepClock`]) —
//! looks at one map a packet. So no packet waits for a look at every entry: a pass over 65,536
//! firewall flows in one map kept a packet 0.58–0.78 ms, and one over a million go-back-N
//! connections 30–34 ms (docs/chain.md). An entry idle past its time is found within a tenth
//! of the idle time and the 128 steps after: at most 64 to end the pass under way (which may
//! have looked at its map before it idled) and 64 for the next.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use crate::clock::SweepClock;

/// The maps a table is kept in.
pub(crate) const SHARDS: usize = 64;

/// A key's map: a hash of what tells keys apart most, cheap to compute (the maps only need to
/// be of about one size; their own hasher still guards each against collisions).
pub(crate) trait Shard {
    /// A number, taken modulo [`SHARDS`].
    fn shard(&self) -> usize;
}

/// Folds `x`'s bits down, so that any of them moves the map.
pub(crate) fn fold(x: u32) -> usize {
    (x ^ (x >> 6) ^ (x >> 12) ^ (x >> 18) ^ (x >> 24)) as usize
}

/// The table.
#[derive(Debug)]
pub(crate) struct SweptMap<K, V> {
    maps: Vec<HashMap<K, V>>,
    len: usize,
    /// When the last pass began, and the map it looks at next ([`SHARDS`]: none under way).
    clock: SweepClock,
    next: usize,
}

impl<K, V> Default for SweptMap<K, V> {
    fn default() -> Self {
        SweptMap {
            maps: (0..SHARDS).map(|_| HashMap::new()).collect(),
            len: 0,
            clock: SweepClock::default(),
            next: SHARDS,
        }
    }
}

impl<K: Shard + Hash + Eq, V> SweptMap<K, V> {
    fn map(&self, k: &K) -> &HashMap<K, V> {
        &self.maps[k.shard() % SHARDS]
    }

    fn map_mut(&mut self, k: &K) -> &mut HashMap<K, V> {
        &mut self.maps[k.shard() % SHARDS]
    }

    pub(crate) fn get(&self, k: &K) -> Option<&V> {
        self.map(k).get(k)
    }

    pub(crate) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map_mut(k).get_mut(k)
    }

    /// Whether `k` was new.
    pub(crate) fn insert(&mut self, k: K, v: V) -> bool {
        let new = self.map_mut(&k).insert(k, v).is_none();
        self.len += usize::from(new);
        new
    }

    /// Puts `v` in as `k`'s value (a new key or not), and gives it back to change.
    pub(crate) fn insert_mut(&mut self, k: K, v: V) -> &mut V {
        let map = &mut self.maps[k.shard() % SHARDS];
        match map.entry(k) {
            std::collections::hash_map::Entry::Occupied(e) => {
                let slot = e.into_mut();
                *slot = v;
                slot
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                self.len += 1;
                e.insert(v)
            }
        }
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        let v = self.map_mut(k).remove(k);
        self.len -= usize::from(v.is_some());
        v
    }

    /// Entries kept.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A packet's part of the pass at `now` for entries idle for `idle`: if one is under way or
    /// due, looks at its next map and keeps only the entries `keep` is true of (it sees each
    /// key and value, and does what forgetting one means beside the table); how many it forgot.
    pub(crate) fn step(&mut self, now: Instant, idle: Duration, mut keep: impl FnMut(&K, &mut V) -> bool) -> usize {
        if self.next >= SHARDS {
            if !self.clock.due(now, idle) {
                return 0;
            }
            self.next = 0;
        }
        let m = &mut self.maps[self.next];
        let before = m.len();
        m.retain(|k, v| keep(k, v));
        let gone = before - m.len();
        self.len -= gone;
        self.next += 1;
        gone
    }

    /// Passes begun so far.
    #[cfg(test)]
    pub(crate) fn passes(&self) -> u64 {
        self.clock.begun
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Shard for u32 {
        fn shard(&self) -> usize {
            fold(*self)
        }
    }

    /// Past the idle time a packet's step forgets a part of the idle entries, 64 steps all of
    /// them, and the next pass begins only a tenth of the idle time after the last began.
    #[test]
    fn a_pass_forgets_a_map_a_step() {
        let idle = Duration::from_secs(10);
        let mut m: SweptMap<u32, Instant> = SweptMap::default();
        let t0 = Instant::now();
        // The first step begins a pass at once (nothing idle yet); it runs its course.
        for k in 0..6400 {
            assert!(m.insert(k, t0));
        }
        assert!(!m.insert(7, t0));
        assert_eq!(*m.insert_mut(7, t0), t0);
        *m.insert_mut(6400, t0) = t0;
        assert_eq!(m.remove(&6400), Some(t0));
        assert_eq!(m.len(), 6400);
        for _ in 0..SHARDS {
            assert_eq!(m.step(t0, idle, |_, t| t0.duration_since(*t) < idle), 0);
        }
        let t11 = t0 + Duration::from_secs(11);
        *m.get_mut(&5).unwrap() = t11;
        let forget = |_: &u32, t: &mut Instant| t11.duration_since(*t) < idle;
        let first = m.step(t11, idle, forget);
        assert!((1..400).contains(&first), "one step forgot {first} of 6400");
        for _ in 1..SHARDS {
            m.step(t11, idle, forget);
        }
        assert_eq!((m.len(), m.get(&5).is_some(), m.passes()), (1, true, 2));
        // No new pass until a tenth of the idle time after the last began.
        m.insert(9, t0);
        assert_eq!(m.step(t11 + Duration::from_millis(999), idle, forget), 0);
        assert_eq!(m.passes(), 2);
        assert_eq!(m.remove(&9), Some(t0));
        assert_eq!((m.remove(&9), m.len()), (None, 1));
    }
}
