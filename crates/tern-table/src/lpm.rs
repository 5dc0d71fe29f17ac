//! Longest-prefix match for IPv4 and IPv6: a multibit trie with controlled prefix expansion.
//!
//! The layout is DIR-24-8 for IPv4 (as DPDK's `rte_lpm`): a root array indexed by the first 24
//! bits of the address and 256-entry groups for the last 8; and a 16-bit root followed by up to
//! fourteen 8-bit levels for IPv6. Every entry is a `u32` holding the prefix length that wrote it
//! (the *priority*, as in AccelSDP's priority RAM: priority = prefix length), a valid bit, an
//! extension bit (the entry points to a group of the next level) and a 22-bit value — the index
//! of the rule's action set. An IPv4 lookup reads one entry, or two for prefixes longer than /24.
//!
//! Writes keep the arrays equal to "the longest matching rule wins" after every call: a rule of
//! length `L` overwrites the entries its range covers whose length is `<= L`; a removed rule's
//! entries fall back to the longest rule that covers it. A group whose 256 entries became equal
//! folds back into its parent entry and returns to the free list, so memory follows the rules.
//! The rules themselves are kept per length (hash maps), which is what a remove needs to find
//! the covering rule and what `iter` lists.
//!
//! [`crate::naive::NaiveLpm`] is the reference twin: a list of rules scanned for the longest
//! match. Property tests (`tests/lpm.rs`) compare the two after random sequences of inserts,
//! updates and removes.
//!
//! ```
//! use tern_table::lpm::Lpm4;
//! let mut t = Lpm4::new();
//! t.insert("10.0.0.0/8".parse().unwrap(), 1).unwrap();
//! t.insert("10.1.2.0/24".parse().unwrap(), 2).unwrap();
//! t.insert("10.1.2.128/25".parse().unwrap(), 3).unwrap();
//! assert_eq!(t.lookup("10.1.2.200".parse().unwrap()), Some(3));
//! assert_eq!(t.lookup("10.1.2.1".parse().unwrap()), Some(2));
//! assert_eq!(t.lookup("10.9.9.9".parse().unwrap()), Some(1));
//! assert_eq!(t.lookup("11.0.0.1".parse().unwrap()), None);
//! t.remove("10.1.2.0/24".parse().unwrap()).unwrap();
//! assert_eq!(t.lookup("10.1.2.1".parse().unwrap()), Some(1));
//! ```

use std::fmt::Debug;
use std::hash::Hash;
use std::net::{Ipv4Addr, Ipv6Addr};

use hashbrown::HashMap;
use ipnet::{Ipv4Net, Ipv6Net};

use crate::TableError;

/// Largest value (action-set index) an entry holds: 22 bits.
pub const MAX_VALUE: u32 = VALUE_MASK;

const DEPTH_SHIFT: u32 = 24;
const VALID: u32 = 1 << 23;
const EXT: u32 = 1 << 22;
const VALUE_MASK: u32 = (1 << 22) - 1;
/// Bits each level below the root consumes.
const STRIDE: u32 = 8;
const GROUP: usize = 1 << STRIDE;
/// Groups the 22-bit pointer can name.
const MAX_GROUPS: usize = VALUE_MASK as usize + 1;

/// An address family the trie works over: the key as an unsigned integer, most significant bit
/// first.
pub trait LpmKey: Copy + Eq + Hash + Debug + Send + Sync + 'static {
    /// Address width in bits.
    const BITS: u32;
    /// Bits the root array is indexed by; `BITS - ROOT_BITS` is a multiple of 8.
    const ROOT_BITS: u32;
    /// Address type.
    type Addr: Copy + Debug;
    /// Prefix type.
    type Net: Copy + Debug;
    /// The key of an address.
    fn from_addr(addr: Self::Addr) -> Self;
    /// The key and length of a prefix, host bits cleared.
    fn from_net(net: Self::Net) -> (Self, u32);
    /// The prefix of a key and length.
    fn to_net(self, len: u32) -> Self::Net;
    /// Bits `[start, start + len)` as an index; `1 <= len <= 24`, `start + len <= BITS`.
    fn chunk(self, start: u32, len: u32) -> usize;
    /// The key with only its first `len` bits kept.
    fn masked(self, len: u32) -> Self;
}

impl LpmKey for u32 {
    const BITS: u32 = 32;
    const ROOT_BITS: u32 = 24;
    type Addr = Ipv4Addr;
    type Net = Ipv4Net;
    #[inline]
    fn from_addr(addr: Ipv4Addr) -> u32 {
        u32::from(addr)
    }
    fn from_net(net: Ipv4Net) -> (u32, u32) {
        let len = u32::from(net.prefix_len());
        (u32::from(net.addr()).masked(len), len)
    }
    fn to_net(self, len: u32) -> Ipv4Net {
        Ipv4Net::new_assert(Ipv4Addr::from(self), len as u8)
    }
    #[inline(always)]
    fn chunk(self, start: u32, len: u32) -> usize {
        ((self << start) >> (32 - len)) as usize
    }
    #[inline]
    fn masked(self, len: u32) -> u32 {
        if len == 0 { 0 } else { self & (u32::MAX << (32 - len)) }
    }
}

impl LpmKey for u128 {
    const BITS: u32 = 128;
    const ROOT_BITS: u32 = 16;
    type Addr = Ipv6Addr;
    type Net = Ipv6Net;
    #[inline]
    fn from_addr(addr: Ipv6Addr) -> u128 {
        u128::from(addr)
    }
    fn from_net(net: Ipv6Net) -> (u128, u32) {
        let len = u32::from(net.prefix_len());
        (u128::from(net.addr()).masked(len), len)
    }
    fn to_net(self, len: u32) -> Ipv6Net {
        Ipv6Net::new_assert(Ipv6Addr::from(self), len as u8)
    }
    #[inline(always)]
    fn chunk(self, start: u32, len: u32) -> usize {
        ((self << start) >> (128 - len)) as usize
    }
    #[inline]
    fn masked(self, len: u32) -> u128 {
        if len == 0 { 0 } else { self & (u128::MAX << (128 - len)) }
    }
}

#[inline]
fn rule_entry(len: u32, value: u32) -> u32 {
    (len << DEPTH_SHIFT) | VALID | value
}

#[inline]
fn entry_len(e: u32) -> u32 {
    e >> DEPTH_SHIFT
}

/// Which entries a write replaces.
#[derive(Clone, Copy)]
enum Write {
    /// Insert or update a rule of this length: entries no longer than it, and empty ones.
    Set(u32),
    /// Remove a rule of this length: its own entries.
    Clear(u32),
}

impl Write {
    #[inline]
    fn replaces(self, e: u32) -> bool {
        match self {
            Write::Set(len) => e & VALID == 0 || entry_len(e) <= len,
            Write::Clear(len) => e & VALID != 0 && entry_len(e) == len,
        }
    }
}

/// Where an entry lives: the root array or a group.
#[derive(Clone, Copy)]
enum Level {
    Root,
    Group(usize),
}

/// A longest-prefix-match table mapping prefixes to 22-bit values.
#[derive(Clone)]
pub struct Lpm<K: LpmKey> {
    root: Vec<u32>,
    groups: Vec<u32>,
    free_groups: Vec<u32>,
    rules: Vec<HashMap<K, u32>>,
    len: usize,
}

/// IPv4 longest-prefix match (DIR-24-8).
pub type Lpm4 = Lpm<u32>;
/// IPv6 longest-prefix match (16-bit root, 8-bit levels).
pub type Lpm6 = Lpm<u128>;

impl<K: LpmKey> Debug for Lpm<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lpm")
            .field("bits", &K::BITS)
            .field("rules", &self.len)
            .field("groups_in_use", &self.groups_in_use())
            .finish()
    }
}

impl<K: LpmKey> Default for Lpm<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: LpmKey> Lpm<K> {
    /// An empty table. The IPv4 root array is 64 MiB of address space, mapped lazily by the
    /// kernel: only the pages rules write are touched. It asks for transparent huge pages, which
    /// cut the TLB misses of lookups spread over the address space (at 100K prefixes, bulk
    /// lookups ran 1.7–1.8 times as fast here); the cost is that a page rules write is 2 MiB,
    /// so a table whose rules cover the address space holds the whole 64 MiB.
    pub fn new() -> Self {
        Lpm {
            root: crate::huge::zeroed_u32s(1 << K::ROOT_BITS),
            groups: Vec::new(),
            free_groups: Vec::new(),
            rules: (0..=K::BITS).map(|_| HashMap::new()).collect(),
            len: 0,
        }
    }

    /// Rules in the table.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table has no rules.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Groups (256-entry blocks below the root) in use.
    pub fn groups_in_use(&self) -> usize {
        self.groups.len() / GROUP - self.free_groups.len()
    }

    /// Bytes the lookup arrays occupy (the root's virtual size, all groups ever allocated).
    pub fn memory_bytes(&self) -> usize {
        (self.root.len() + self.groups.capacity()) * 4
    }

    /// The value of exactly this prefix, if it is a rule.
    pub fn get(&self, net: K::Net) -> Option<u32> {
        let (key, len) = K::from_net(net);
        self.rules[len as usize].get(&key).copied()
    }

    /// Every rule, by increasing prefix length.
    pub fn iter(&self) -> impl Iterator<Item = (K::Net, u32)> + '_ {
        self.rules.iter().enumerate().flat_map(|(len, m)| m.iter().map(move |(k, v)| (k.to_net(len as u32), *v)))
    }

    /// Adds a rule or changes its value; returns the previous value. Fails, changing nothing,
    /// if `value` exceeds [`MAX_VALUE`] or the groups are exhausted.
    pub fn insert(&mut self, net: K::Net, value: u32) -> Result<Option<u32>, TableError> {
        if value > MAX_VALUE {
            return Err(TableError::ValueTooLarge { value, max: MAX_VALUE });
        }
        let (key, len) = K::from_net(net);
        self.write(key, len, rule_entry(len, value), Write::Set(len))?;
        let old = self.rules[len as usize].insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        Ok(old)
    }

    /// Removes a rule; returns its value, or `None` if there was none. Fails, changing nothing,
    /// only if splitting a folded group needs a group and none is left.
    pub fn remove(&mut self, net: K::Net) -> Result<Option<u32>, TableError> {
        let (key, len) = K::from_net(net);
        let Some(&old) = self.rules[len as usize].get(&key) else { return Ok(None) };
        let parent = (0..len)
            .rev()
            .find_map(|l| self.rules[l as usize].get(&key.masked(l)).map(|&v| rule_entry(l, v)))
            .unwrap_or(0);
        self.write(key, len, parent, Write::Clear(len))?;
        self.rules[len as usize].remove(&key);
        self.len -= 1;
        Ok(Some(old))
    }

    /// Removes every rule.
    pub fn clear(&mut self) {
        // A fresh zeroed array is mapped lazily; filling the old one would touch every page.
        self.root = crate::huge::zeroed_u32s(1 << K::ROOT_BITS);
        self.groups = Vec::new();
        self.free_groups.clear();
        self.rules.iter_mut().for_each(HashMap::clear);
        self.len = 0;
    }

    /// The value of the longest prefix matching an address.
    #[inline]
    pub fn lookup(&self, addr: K::Addr) -> Option<u32> {
        self.lookup_key(K::from_addr(addr))
    }

    /// The value of the longest prefix matching a key (the address as an integer).
    #[inline]
    pub fn lookup_key(&self, key: K) -> Option<u32> {
        self.lookup_in(&self.root[..1 << K::ROOT_BITS], key)
    }

    /// `lookup_key` with the root passed as a slice of its exact length, so the compiler sees
    /// that a root index (`ROOT_BITS` bits of the key) is always in bounds.
    #[inline(always)]
    fn lookup_in(&self, root: &[u32], key: K) -> Option<u32> {
        let e = self.entry_in(root, key);
        if e & VALID != 0 { Some(e & VALUE_MASK) } else { None }
    }

    /// The entry that decides `key`: VALID and its value, or not VALID.
    #[inline(always)]
    fn entry_in(&self, root: &[u32], key: K) -> u32 {
        let mut e = root[key.chunk(0, K::ROOT_BITS)];
        if K::BITS - K::ROOT_BITS == STRIDE {
            // One level below the root (IPv4, DIR-24-8): a branch, not a loop.
            if e & EXT != 0 {
                e = self.groups[(((e & VALUE_MASK) as usize) << STRIDE) | key.chunk(K::ROOT_BITS, STRIDE)];
            }
        } else {
            let mut start = K::ROOT_BITS;
            while e & EXT != 0 {
                e = self.groups[(((e & VALUE_MASK) as usize) << STRIDE) | key.chunk(start, STRIDE)];
                start += STRIDE;
            }
        }
        e
    }

    /// Looks up a batch of keys; `out[i]` gets the result for `keys[i]` (the shorter of the two
    /// slices bounds the batch). The lookups are independent, so the CPU overlaps their loads
    /// (a two-pass version that loaded every root entry first measured slower).
    #[inline]
    pub fn lookup_batch(&self, keys: &[K], out: &mut [Option<u32>]) {
        let root = &self.root[..1 << K::ROOT_BITS];
        for (o, k) in out.iter_mut().zip(keys) {
            *o = self.lookup_in(root, *k);
        }
    }

    /// Looks up a batch of keys as DPDK's `rte_lpm_lookup_bulk` does: `out[i]` gets the raw
    /// entry that decides `keys[i]`, for the caller to [`decode`](Self::decode) when it uses
    /// it. One load (two past a /24) and one store per key.
    #[inline]
    pub fn lookup_batch_raw(&self, keys: &[K], out: &mut [u32]) {
        let root = &self.root[..1 << K::ROOT_BITS];
        for (o, k) in out.iter_mut().zip(keys) {
            *o = self.entry_in(root, *k);
        }
    }

    /// The value in a raw entry from [`lookup_batch_raw`](Self::lookup_batch_raw), if it is a
    /// match.
    #[inline]
    pub fn decode(raw: u32) -> Option<u32> {
        if raw & VALID != 0 { Some(raw & VALUE_MASK) } else { None }
    }

    fn slot(&mut self, level: Level, i: usize) -> &mut u32 {
        match level {
            Level::Root => &mut self.root[i],
            Level::Group(g) => &mut self.groups[g * GROUP + i],
        }
    }

    fn write(&mut self, key: K, len: u32, new: u32, how: Write) -> Result<(), TableError> {
        self.write_level(Level::Root, 0, K::ROOT_BITS, key, len, new, how)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_level(
        &mut self,
        level: Level,
        start: u32,
        width: u32,
        key: K,
        len: u32,
        new: u32,
        how: Write,
    ) -> Result<(), TableError> {
        if len <= start + width {
            // The prefix ends at this level: it covers 2^(start + width - len) entries.
            let base = key.chunk(start, width);
            let count = 1usize << (start + width - len);
            // One pass the compiler vectorizes over the plain entries (a short prefix covers up
            // to 2^16 root entries), then the rare entries that point into a group.
            let entries = match level {
                Level::Root => &mut self.root[base..base + count],
                Level::Group(g) => &mut self.groups[g * GROUP + base..g * GROUP + base + count],
            };
            let mut groups = false;
            for e in entries.iter_mut() {
                let x = *e;
                groups |= x & EXT != 0;
                *e = if x & EXT == 0 && how.replaces(x) { new } else { x };
            }
            if groups {
                for i in base..base + count {
                    let e = *self.slot(level, i);
                    if e & EXT != 0 {
                        self.write_group(e & VALUE_MASK, new, how);
                        self.try_fold(level, i);
                    }
                }
            }
            return Ok(());
        }
        let i = key.chunk(start, width);
        let e = *self.slot(level, i);
        let g = if e & EXT != 0 {
            e & VALUE_MASK
        } else {
            let g = self.alloc_group(e)?;
            *self.slot(level, i) = EXT | g;
            g
        };
        let result = self.write_level(Level::Group(g as usize), start + width, STRIDE, key, len, new, how);
        self.try_fold(level, i);
        result
    }

    /// Applies a write to every entry of group `g` and the groups below it.
    fn write_group(&mut self, g: u32, new: u32, how: Write) {
        let level = Level::Group(g as usize);
        for i in 0..GROUP {
            let e = *self.slot(level, i);
            if e & EXT != 0 {
                self.write_group(e & VALUE_MASK, new, how);
                self.try_fold(level, i);
            } else if how.replaces(e) {
                *self.slot(level, i) = new;
            }
        }
    }

    /// A group whose entries are all the same plain entry is replaced by that entry.
    fn try_fold(&mut self, level: Level, i: usize) {
        let e = *self.slot(level, i);
        if e & EXT == 0 {
            return;
        }
        let g = (e & VALUE_MASK) as usize;
        let entries = &self.groups[g * GROUP..(g + 1) * GROUP];
        let first = entries[0];
        if first & EXT == 0 && entries.iter().all(|&x| x == first) {
            *self.slot(level, i) = first;
            self.free_groups.push(g as u32);
        }
    }

    /// A group whose every entry is `fill` (what the parent entry held).
    fn alloc_group(&mut self, fill: u32) -> Result<u32, TableError> {
        let g = match self.free_groups.pop() {
            Some(g) => g as usize,
            None => {
                let g = self.groups.len() / GROUP;
                if g >= MAX_GROUPS {
                    return Err(TableError::Full { what: "LPM groups", capacity: MAX_GROUPS });
                }
                self.groups.resize(self.groups.len() + GROUP, 0);
                g
            }
        };
        self.groups[g * GROUP..(g + 1) * GROUP].fill(fill);
        Ok(g as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net4(s: &str) -> Ipv4Net {
        s.parse().unwrap()
    }

    #[test]
    fn paper_table_4() {
        // AccelSDP Table 4 and Figure 20: 17.17.17.17 matches entries 1 and 2; the longer wins.
        let mut t = Lpm4::new();
        t.insert(net4("34.34.0.0/16"), 0).unwrap();
        t.insert(net4("17.17.17.17/32"), 1).unwrap();
        t.insert(net4("17.17.17.0/28"), 2).unwrap();
        t.insert(net4("34.34.34.34/32"), 3).unwrap();
        assert_eq!(t.lookup("17.17.17.17".parse().unwrap()), Some(1));
        assert_eq!(t.lookup("34.34.34.34".parse().unwrap()), Some(3));
        assert_eq!(t.lookup("34.34.1.1".parse().unwrap()), Some(0));
        assert_eq!(t.lookup("17.17.17.3".parse().unwrap()), Some(2));
        assert_eq!(t.lookup("17.17.17.16".parse().unwrap()), None);
    }

    #[test]
    fn groups_fold_back_when_rules_go() {
        let mut t = Lpm4::new();
        t.insert(net4("10.0.0.0/8"), 7).unwrap();
        t.insert(net4("10.1.1.1/32"), 8).unwrap();
        t.insert(net4("10.1.1.0/25"), 9).unwrap();
        assert_eq!(t.groups_in_use(), 1);
        assert_eq!(t.remove(net4("10.1.1.1/32")).unwrap(), Some(8));
        assert_eq!(t.lookup("10.1.1.1".parse().unwrap()), Some(9));
        assert_eq!(t.remove(net4("10.1.1.0/25")).unwrap(), Some(9));
        assert_eq!(t.groups_in_use(), 0);
        assert_eq!(t.lookup("10.1.1.1".parse().unwrap()), Some(7));
        assert_eq!(t.remove(net4("10.1.1.0/25")).unwrap(), None);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn halves_with_one_value_fold_and_split_again() {
        // Two /25s with the same value fold into the root entry; removing one must split it.
        let mut t = Lpm4::new();
        t.insert(net4("10.0.0.0/25"), 5).unwrap();
        t.insert(net4("10.0.0.128/25"), 5).unwrap();
        assert_eq!(t.groups_in_use(), 0);
        t.insert(net4("10.0.0.0/20"), 6).unwrap();
        assert_eq!(t.lookup("10.0.0.7".parse().unwrap()), Some(5));
        t.remove(net4("10.0.0.0/25")).unwrap();
        assert_eq!(t.lookup("10.0.0.7".parse().unwrap()), Some(6));
        assert_eq!(t.lookup("10.0.0.200".parse().unwrap()), Some(5));
        assert_eq!(t.lookup("10.0.1.1".parse().unwrap()), Some(6));
    }

    #[test]
    fn default_route_and_update() {
        let mut t = Lpm4::new();
        t.insert(net4("0.0.0.0/0"), 1).unwrap();
        assert_eq!(t.lookup("200.1.2.3".parse().unwrap()), Some(1));
        assert_eq!(t.insert(net4("0.0.0.0/0"), 2).unwrap(), Some(1));
        assert_eq!(t.lookup("1.2.3.4".parse().unwrap()), Some(2));
        t.remove(net4("0.0.0.0/0")).unwrap();
        assert_eq!(t.lookup("1.2.3.4".parse().unwrap()), None);
        assert!(t.is_empty());
    }

    #[test]
    fn value_too_large_changes_nothing() {
        let mut t = Lpm4::new();
        let err = t.insert(net4("1.0.0.0/8"), MAX_VALUE + 1).unwrap_err();
        assert!(err.to_string().contains("22-bit"), "{err}");
        assert!(t.is_empty());
        assert_eq!(t.lookup("1.1.1.1".parse().unwrap()), None);
    }

    #[test]
    fn ipv6_deep_prefixes() {
        let mut t = Lpm6::new();
        t.insert("2001:db8::/32".parse().unwrap(), 1).unwrap();
        t.insert("2001:db8:1::/48".parse().unwrap(), 2).unwrap();
        t.insert("2001:db8:1::1/128".parse().unwrap(), 3).unwrap();
        assert_eq!(t.lookup("2001:db8:1::1".parse().unwrap()), Some(3));
        assert_eq!(t.lookup("2001:db8:1::2".parse().unwrap()), Some(2));
        assert_eq!(t.lookup("2001:db8:2::2".parse().unwrap()), Some(1));
        assert_eq!(t.lookup("2001:db9::".parse().unwrap()), None);
        t.remove("2001:db8:1::1/128".parse().unwrap()).unwrap();
        t.remove("2001:db8:1::/48".parse().unwrap()).unwrap();
        // The /32 itself spans two 8-bit levels below the 16-bit root.
        assert_eq!(t.groups_in_use(), 2);
        let mut out = [None; 2];
        t.lookup_batch(&[u128::from_addr("2001:db8:1::1".parse().unwrap()), 0], &mut out);
        assert_eq!(out, [Some(1), None]);
    }
}
