//! A table whose idle entries are forgotten a part at a time (a firewall's flows, a NAT's
//! mappings, a transport's connections): its entries are kept in maps by a keyed hash of the
//! key ([`SweptMap`]) — 64, or one for each [`PER_SHARD`] entries its bound allows, up to
//! [`MAX_SHARDS`] — and a pass that looks for idle ones — begun no more often than ten times
//! an idle period ([`SweepClock`]) — looks at one map a packet. So no packet waits for a look
//! at every entry: a pass over 65,536 firewall flows in one map kept a packet 0.58–0.78 ms,
//! and one over a million go-back-N connections 30–34 ms (docs/chain.md). An entry idle past
//! its time is found within a tenth of the idle time and twice the maps' steps after (128 with
//! 64 maps): at most one pass to end the one under way (which may have looked at its map
//! before it idled) and one for the next.

use std::hash::{BuildHasher, Hash, RandomState};
use std::time::{Duration, Instant};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use crate::quota::Quota;

/// The fewest maps a table is kept in.
pub(crate) const MIN_SHARDS: usize = 64;
/// The most maps a table is kept in.
pub(crate) const MAX_SHARDS: usize = 8192;
/// Entries a map, at most, for a table whose bound is between [`MIN_SHARDS`] and
/// [`MAX_SHARDS`] maps' worth: a step looks at about this many once the table is full.
pub(crate) const PER_SHARD: usize = 2048;

/// Entries of a map looked at, at most, to find one to take out for a new key
/// ([`SweptMap::evict_near`]).
pub(crate) const EVICT_LOOK: usize = 32;

/// The maps for a table of at most `bound` entries: a power of two.
pub(crate) fn shards_for(bound: usize) -> usize {
    bound.div_ceil(PER_SHARD).next_power_of_two().clamp(MIN_SHARDS, MAX_SHARDS)
}

/// When a table (a firewall's flows, a NAT's mappings, a transport's connections) last began a
/// look for its entries idle past their time: no more often than ten times an idle period.
#[derive(Debug, Default, Clone, Copy)]
struct SweepClock {
    last: Option<Instant>,
    /// Looks begun so far.
    begun: u64,
}

impl SweepClock {
    /// Whether a look is due at `now` for entries idle for `idle` (and if so, it begins now).
    fn due(&mut self, now: Instant, idle: Duration) -> bool {
        if self.last.is_some_and(|t| now.saturating_duration_since(t) < idle / 10) {
            return false;
        }
        self.last = Some(now);
        self.begun += 1;
        true
    }
}

/// The table. Each key is hashed once, with a key of the process's own (SipHash, as a
/// `HashMap`'s), and the hash picks both its map (bits 32 and up, as many as the maps need:
/// 6 to 13, which the maps' own buckets and tags do not use below 2^32 buckets) and its place
/// there: so a client that chooses its keys (a connection id, a port) cannot pile them into one
/// map to make one step as slow as a pass.
#[derive(Debug)]
pub(crate) struct SweptMap<K, V> {
    hasher: RandomState,
    maps: Vec<HashTable<(K, V)>>,
    len: usize,
    /// When the last pass began, and the map it looks at next (the maps' number: none under
    /// way).
    clock: SweepClock,
    next: usize,
}

impl<K, V> SweptMap<K, V> {
    /// An empty table for at most `bound` entries, in [`shards_for`]`(bound)` maps.
    pub(crate) fn with_bound(bound: usize) -> Self {
        let n = shards_for(bound);
        SweptMap {
            hasher: RandomState::new(),
            maps: (0..n).map(|_| HashTable::new()).collect(),
            len: 0,
            clock: SweepClock::default(),
            next: n,
        }
    }

    /// A hash's map (the maps are a power of two).
    fn shard(&self, hash: u64) -> usize {
        (hash >> 32) as usize & (self.maps.len() - 1)
    }

    /// The maps it keeps its entries in.
    #[cfg(test)]
    pub(crate) fn shards(&self) -> usize {
        self.maps.len()
    }
}

impl<K: Hash + Eq, V> SweptMap<K, V> {
    pub(crate) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        if self.len == 0 {
            // Nothing to find: no hash to compute (a firewall flooded by frames its rules deny).
            return None;
        }
        let h = self.hasher.hash_one(k);
        let m = self.shard(h);
        self.maps[m].find_mut(h, |(x, _)| x == k).map(|(_, v)| v)
    }

    /// Puts `v` in as `k`'s value (a new key or not), and gives it back to change; whether `k`
    /// was new.
    pub(crate) fn put(&mut self, k: K, v: V) -> (&mut V, bool) {
        let h = self.hasher.hash_one(&k);
        let m = self.shard(h);
        let SweptMap { hasher, maps, len, .. } = self;
        match maps[m].entry(h, |(x, _)| *x == k, |(x, _)| hasher.hash_one(x)) {
            Entry::Occupied(e) => {
                let slot = &mut e.into_mut().1;
                *slot = v;
                (slot, false)
            }
            Entry::Vacant(e) => {
                *len += 1;
                (&mut e.insert((k, v)).into_mut().1, true)
            }
        }
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        let h = self.hasher.hash_one(k);
        let m = self.shard(h);
        let e = self.maps[m].find_entry(h, |(x, _)| x == k).ok()?;
        self.len -= 1;
        Some(e.remove().0.1)
    }

    /// Entries kept.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Takes out, of the first [`EVICT_LOOK`] entries of the maps from the one `near` falls in
    /// on (the next, and so on round, until that many are seen or every map was), the one `age`
    /// ranks oldest (given its key and value) of those it ranks at all (`None`: not to be
    /// taken), and gives it back;
    /// `None` if it ranks none. Bounded work to make room for `near` in a full table; where the
    /// look begins is `near`'s by the keyed hash, so which entries a new key may displace is not
    /// the client's to choose.
    pub(crate) fn evict_near<A: Ord>(&mut self, near: &K, age: impl Fn(&K, &V) -> Option<A>) -> Option<(K, V)>
    where
        K: Clone,
    {
        let first = self.shard(self.hasher.hash_one(near));
        let n = self.maps.len();
        let mut oldest: Option<(A, K)> = None;
        let mut seen = 0;
        for m in (0..n).map(|i| (first + i) & (n - 1)) {
            for (k, v) in self.maps[m].iter().take(EVICT_LOOK - seen) {
                seen += 1;
                if let Some(a) = age(k, v)
                    && oldest.as_ref().is_none_or(|(o, _)| a < *o)
                {
                    oldest = Some((a, k.clone()));
                }
            }
            if seen >= EVICT_LOOK {
                break;
            }
        }
        let (_, k) = oldest?;
        let h = self.hasher.hash_one(&k);
        let m = self.shard(h);
        let e = self.maps[m].find_entry(h, |(x, _)| *x == k).ok()?;
        self.len -= 1;
        Some(e.remove().0)
    }

    /// A packet's part of the pass at `now` for entries idle for `idle`: if one is under way or
    /// due, looks at its next map and keeps only the entries `keep` is true of (it sees each
    /// key and value, and does what forgetting one means beside the table); how many it forgot.
    pub(crate) fn step(&mut self, now: Instant, idle: Duration, mut keep: impl FnMut(&K, &mut V) -> bool) -> usize {
        if self.next >= self.maps.len() {
            if !self.clock.due(now, idle) {
                return 0;
            }
            self.next = 0;
        }
        let m = &mut self.maps[self.next];
        let before = m.len();
        m.retain(|(k, v)| keep(k, v));
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

    /// The entries in each map.
    #[cfg(test)]
    fn sizes(&self) -> Vec<usize> {
        self.maps.iter().map(HashTable::len).collect()
    }
}

/// A [`SweptMap`] whose entries each belong to a client (`client_of` names it: a flow's source
/// address, a connection's peer), with what each client holds counted as entries come and go
/// ([`Quota`]): the firewall's flows, go-back-N's connections and the NAT's mappings, each
/// client held to its share.
#[derive(Debug)]
pub(crate) struct Shared<K, V, C> {
    map: SweptMap<K, V>,
    clients: Quota<C>,
    client_of: fn(&K, &V) -> C,
}

impl<K: Hash + Eq, V, C: Hash + Eq + Copy> Shared<K, V, C> {
    /// An empty table for at most `bound` entries ([`SweptMap::with_bound`]) whose entries
    /// belong to `client_of` theirs.
    pub(crate) fn new(bound: usize, client_of: fn(&K, &V) -> C) -> Self {
        Shared { map: SweptMap::with_bound(bound), clients: Quota::default(), client_of }
    }

    pub(crate) fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        self.map.get_mut(k)
    }

    /// Puts `v` in as `k`'s value (a new entry counts for its client), and gives it back to
    /// change.
    pub(crate) fn insert_mut(&mut self, k: K, v: V) -> &mut V {
        let client = (self.client_of)(&k, &v);
        let (slot, new) = self.map.put(k, v);
        if new {
            self.clients.take(client);
        }
        slot
    }

    pub(crate) fn insert(&mut self, k: K, v: V) {
        self.insert_mut(k, v);
    }

    pub(crate) fn remove(&mut self, k: &K) -> Option<V> {
        let v = self.map.remove(k)?;
        self.clients.give_back((self.client_of)(k, &v));
        Some(v)
    }

    /// Entries kept.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// [`SweptMap::evict_near`], the entry taken out given back by its client.
    pub(crate) fn evict_near<A: Ord>(&mut self, near: &K, age: impl Fn(&K, &V) -> Option<A>) -> Option<(K, V)>
    where
        K: Clone,
    {
        let (k, v) = self.map.evict_near(near, age)?;
        self.clients.give_back((self.client_of)(&k, &v));
        Some((k, v))
    }

    /// Whether `client` holds `limit` entries or more.
    pub(crate) fn at_limit(&self, client: C, limit: usize) -> bool {
        self.clients.at_limit(client, limit)
    }

    /// [`SweptMap::step`], each entry forgotten given back by its client.
    pub(crate) fn step(&mut self, now: Instant, idle: Duration, mut keep: impl FnMut(&K, &mut V) -> bool) -> usize {
        let Shared { map, clients, client_of } = self;
        map.step(now, idle, |k, v| {
            let kept = keep(k, v);
            if !kept {
                clients.give_back(client_of(k, v));
            }
            kept
        })
    }

    /// Passes begun so far.
    #[cfg(test)]
    pub(crate) fn passes(&self) -> u64 {
        self.map.passes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past the idle time a packet's step forgets a part of the idle entries, 64 steps all of
    /// them, and the next pass begins only a tenth of the idle time after the last began.
    #[test]
    fn a_pass_forgets_a_map_a_step() {
        let idle = Duration::from_secs(10);
        let mut m: SweptMap<u32, Instant> = SweptMap::with_bound(6400);
        let t0 = Instant::now();
        // The first step begins a pass at once (nothing idle yet); it runs its course.
        for k in 0..6400 {
            assert!(m.put(k, t0).1);
        }
        assert!(!m.put(7, t0).1);
        assert_eq!(*m.put(7, t0).0, t0);
        *m.put(6400, t0).0 = t0;
        assert_eq!(m.remove(&6400), Some(t0));
        assert_eq!(m.len(), 6400);
        for _ in 0..MIN_SHARDS {
            assert_eq!(m.step(t0, idle, |_, t| t0.duration_since(*t) < idle), 0);
        }
        let t11 = t0 + Duration::from_secs(11);
        *m.get_mut(&5).unwrap() = t11;
        let forget = |_: &u32, t: &mut Instant| t11.duration_since(*t) < idle;
        let first = m.step(t11, idle, forget);
        assert!((1..400).contains(&first), "one step forgot {first} of 6400");
        for _ in 1..MIN_SHARDS {
            m.step(t11, idle, forget);
        }
        assert_eq!((m.len(), m.get_mut(&5).is_some(), m.passes()), (1, true, 2));
        // No new pass until a tenth of the idle time after the last began.
        m.put(9, t0);
        assert_eq!(m.step(t11 + Duration::from_millis(999), idle, forget), 0);
        assert_eq!(m.passes(), 2);
        assert_eq!(m.remove(&9), Some(t0));
        assert_eq!((m.remove(&9), m.len()), (None, 1));
    }

    /// The defaults' tables (go-back-N's 4096 connections, the firewall's 65,536 flows, a
    /// NAT's two whole port ranges) keep 64 maps; the largest bounds one a 2048 entries, so
    /// that a step over a full map looks at about as many; a pass looks at each map once.
    #[test]
    fn larger_bounds_keep_more_maps() {
        for bound in [0, 4096, 65_536, 2 * 64_512, 2 * 65_536] {
            assert_eq!(shards_for(bound), 64, "{bound}");
        }
        assert_eq!(
            (shards_for(131_073), shards_for(1 << 20), shards_for(1 << 24), shards_for(usize::MAX)),
            (128, 512, 8192, 8192)
        );
        let idle = Duration::from_secs(10);
        let mut m: SweptMap<u32, ()> = SweptMap::with_bound(1 << 20);
        assert_eq!(m.shards(), 512);
        for k in 0..(1 << 16) {
            m.put(k, ());
        }
        let t0 = Instant::now();
        let mut looked = Vec::new();
        for _ in 0..512 {
            let mut n = 0;
            m.step(t0, idle, |_, _| {
                n += 1;
                true
            });
            looked.push(n);
        }
        // 128 a map on average; a keyed hash puts well under 256 in any one.
        assert_eq!(looked.iter().sum::<usize>(), 1 << 16, "each entry once a pass");
        assert!(looked.iter().all(|&n| (40..256).contains(&n)), "{looked:?}");
        assert_eq!(m.step(t0, idle, |_, _| true), 0);
        assert_eq!(m.passes(), 1, "the next pass waits a tenth of the idle time");
    }

    /// To make room, the oldest of the entries `age` ranks is taken out, of at most
    /// [`EVICT_LOOK`] looked at, from the maps from the new key's on; none if it ranks none.
    #[test]
    fn evicting_looks_at_a_bounded_part_and_takes_the_oldest_ranked() {
        let mut m: SweptMap<u32, (u32, bool)> = SweptMap::with_bound(6400);
        for k in 0..6400 {
            m.put(k, (k, k % 2 == 0));
        }
        let looked = std::cell::Cell::new(0);
        let age = |_: &u32, &(t, ok): &(u32, bool)| {
            looked.set(looked.get() + 1);
            ok.then_some(t)
        };
        let (k, (t, ok)) = m.evict_near(&7, age).expect("an even one among 32");
        assert!(ok && k == t && looked.get() == EVICT_LOOK, "looked at {}", looked.get());
        assert_eq!((m.len(), m.get_mut(&k)), (6399, None));
        // None ranked: nothing taken.
        assert_eq!(m.evict_near(&7, |_, _| None::<u32>), None);
        assert_eq!(m.len(), 6399);
        // A small table: every entry looked at, across the maps, and the oldest ranked taken.
        let mut small: SweptMap<u32, u32> = SweptMap::with_bound(4);
        for (k, t) in [(1, 30), (2, 10), (3, 20)] {
            small.put(k, t);
        }
        assert_eq!(small.evict_near(&9, |_, &t| (t != 10).then_some(t)), Some((3, 20)));
        assert_eq!(small.evict_near(&9, |_, &t| Some(t)), Some((2, 10)));
        assert_eq!(small.len(), 1);
    }

    /// Keys a client chose to fall in one map of an unkeyed hash — connection ids all in map 0
    /// of the fold of their bits that picked go-back-N's map before — spread over the maps.
    #[test]
    fn chosen_keys_spread_over_the_maps() {
        let unkeyed = |x: u32| (x ^ (x >> 6) ^ (x >> 12) ^ (x >> 18) ^ (x >> 24)) as usize % MIN_SHARDS;
        let chosen: Vec<u32> = (0u32..).filter(|c| unkeyed(c.rotate_left(7)) == 0).take(6400).collect();
        let mut m: SweptMap<(([u8; 4], u16), u32), ()> = SweptMap::with_bound(6400);
        for &c in &chosen {
            m.put((([10, 0, 0, 1], 7000), c), ());
        }
        let sizes = m.sizes();
        assert_eq!(sizes.iter().sum::<usize>(), 6400);
        // 100 a map on average; a keyed hash puts well under 200 in any one.
        assert!(sizes.iter().all(|&n| (40..200).contains(&n)), "{sizes:?}");
    }
}
