//! Exact match on the 5-tuple (source and destination address, protocol, source and destination
//! port): the software side of AccelSDP's BCAM flow table (§4.3.2, Figure 16).
//!
//! A swiss table ([`hashbrown::HashTable`]) keyed by the tuple, with a hash written for it: the
//! IPv4 tuple packs into two 64-bit words mixed by one folded multiply, the IPv6 tuple into five
//! words mixed by three. The fast path's table keeps IPv4 keys packed ([`PackedTuple4`]), in
//! the words a frame's header gives without byte swaps, so a lookup compares two words. Seeds are random per table (set them with [`ExactMatch::with_seed`] for
//! reproducible runs), so an attacker who picks 5-tuples cannot aim collisions at a table.
//! Batch lookups hash the whole batch before probing.
//!
//! [`crate::naive::NaiveExact`] is the reference twin (a list scanned like a CAM).
//!
//! ```
//! use tern_table::em::{ExactMatch, FiveTuple4};
//! let mut t = ExactMatch::new();
//! let k = FiveTuple4 { src: 0x0a000001, dst: 0x0a000002, proto: 17, src_port: 1234, dst_port: 53 };
//! t.insert(k, 9);
//! assert_eq!(t.lookup(&k), Some(9));
//! assert_eq!(t.lookup(&FiveTuple4 { dst_port: 54, ..k }), None);
//! ```

use std::fmt::Debug;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hashbrown::HashTable;

/// A key the exact-match table hashes.
pub trait EmKey: Copy + Eq + Debug + Send + Sync + 'static {
    /// Key width in bits, as a CAM holding it is wide.
    const BITS: u32;
    /// The key's hash under `seed`.
    fn hash(&self, seed: &Seed) -> u64;
}

/// Per-table hash seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seed(pub [u64; 6]);

impl Seed {
    /// Seeds from the process's random hash keys (the standard library draws them from the
    /// operating system).
    pub fn random() -> Seed {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::hash::RandomState::new().build_hasher();
        h.write_u64(0x7465_726e);
        Seed::from_u64(h.finish())
    }

    /// Seeds derived from one number (reproducible tables).
    pub fn from_u64(seed: u64) -> Seed {
        let mut s = seed;
        Seed(std::array::from_fn(|_| {
            // splitmix64
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }))
    }
}

#[inline(always)]
fn folded_multiply(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

/// An IPv4 5-tuple (addresses as integers, host order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct FiveTuple4 {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// IP protocol number.
    pub proto: u8,
    /// Source port (0 for protocols without ports).
    pub src_port: u16,
    /// Destination port (0 for protocols without ports).
    pub dst_port: u16,
}

impl EmKey for FiveTuple4 {
    // src 32 + dst 32 + proto 8 + ports 2 × 16.
    const BITS: u32 = 104;
    /// The hash of its [`PackedTuple4`] (so tables keyed either way agree).
    #[inline(always)]
    fn hash(&self, seed: &Seed) -> u64 {
        PackedTuple4::from(*self).hash(seed)
    }
}

/// An IPv4 5-tuple packed into the two words the exact-match table of the fast path stores and
/// compares (the 104 bits of AccelSDP's BCAM key, Figure 16), in the form a frame gives them
/// cheapest: the addresses are the eight bytes of the IPv4 header that hold them (source, then
/// destination) as one little-endian load reads them, so a frame's key needs no byte swaps;
/// the ports and protocol are numbers. [`FiveTuple4`] converts both ways.
///
/// ```
/// use tern_table::em::{FiveTuple4, PackedTuple4};
/// let t = FiveTuple4 { src: 0x0a000001, dst: 0x0a000002, proto: 17, src_port: 1234, dst_port: 53 };
/// let k = PackedTuple4::from_wire([10, 0, 0, 1, 10, 0, 0, 2], 17, 1234, 53);
/// assert_eq!(PackedTuple4::from(t), k);
/// assert_eq!(k.tuple(), t);
/// ```
#[derive(Debug, Clone, Copy, Eq, Default)]
pub struct PackedTuple4 {
    addrs: u64,
    l4: u64,
}

impl PartialEq for PackedTuple4 {
    /// Word by word, folded into one test (a derived `==` compiles to a vector compare that
    /// stalls on the key's fresh stores).
    #[inline(always)]
    fn eq(&self, other: &PackedTuple4) -> bool {
        ((self.addrs ^ other.addrs) | (self.l4 ^ other.l4)) == 0
    }
}

impl PackedTuple4 {
    /// The key of a frame: `addrs` the eight bytes of its IPv4 header's addresses (header
    /// bytes 12..20), then its protocol and ports.
    #[inline(always)]
    pub fn from_wire(addrs: [u8; 8], proto: u8, src_port: u16, dst_port: u16) -> PackedTuple4 {
        PackedTuple4 {
            addrs: u64::from_le_bytes(addrs),
            l4: (u64::from(proto) << 32) | (u64::from(src_port) << 16) | u64::from(dst_port),
        }
    }

    /// The destination address (host order).
    #[inline(always)]
    pub fn dst(&self) -> u32 {
        ((self.addrs >> 32) as u32).swap_bytes()
    }

    /// The tuple's fields.
    pub fn tuple(&self) -> FiveTuple4 {
        let a = self.addrs.to_le_bytes();
        FiveTuple4 {
            src: u32::from_be_bytes([a[0], a[1], a[2], a[3]]),
            dst: u32::from_be_bytes([a[4], a[5], a[6], a[7]]),
            proto: (self.l4 >> 32) as u8,
            src_port: (self.l4 >> 16) as u16,
            dst_port: self.l4 as u16,
        }
    }
}

impl From<FiveTuple4> for PackedTuple4 {
    #[inline(always)]
    fn from(t: FiveTuple4) -> PackedTuple4 {
        let (s, d) = (t.src.to_be_bytes(), t.dst.to_be_bytes());
        PackedTuple4::from_wire([s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3]], t.proto, t.src_port, t.dst_port)
    }
}

impl EmKey for PackedTuple4 {
    const BITS: u32 = FiveTuple4::BITS;
    #[inline(always)]
    fn hash(&self, seed: &Seed) -> u64 {
        folded_multiply(self.addrs ^ seed.0[0], self.l4 ^ seed.0[1]).rotate_left(23)
    }
}

/// An IPv6 5-tuple (addresses as integers, host order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct FiveTuple6 {
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// IP protocol number (the upper-layer header).
    pub proto: u8,
    /// Source port (0 for protocols without ports).
    pub src_port: u16,
    /// Destination port (0 for protocols without ports).
    pub dst_port: u16,
}

impl EmKey for FiveTuple6 {
    // src 128 + dst 128 + proto 8 + ports 2 × 16.
    const BITS: u32 = 296;
    #[inline(always)]
    fn hash(&self, seed: &Seed) -> u64 {
        let s = seed.0;
        let b = (u64::from(self.src_port) << 32) | (u64::from(self.dst_port) << 16) | u64::from(self.proto);
        let h1 = folded_multiply((self.src >> 64) as u64 ^ s[0], self.src as u64 ^ s[1]);
        let h2 = folded_multiply((self.dst >> 64) as u64 ^ s[2], self.dst as u64 ^ s[3]);
        folded_multiply(h1 ^ b ^ s[4], h2 ^ s[5]).rotate_left(23)
    }
}

/// Either tuple, for display and configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FiveTuple {
    /// IPv4.
    V4(FiveTuple4),
    /// IPv6.
    V6(FiveTuple6),
}

impl FiveTuple {
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            FiveTuple::V4(t) => IpAddr::V4(Ipv4Addr::from(t.src)),
            FiveTuple::V6(t) => IpAddr::V6(Ipv6Addr::from(t.src)),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            FiveTuple::V4(t) => IpAddr::V4(Ipv4Addr::from(t.dst)),
            FiveTuple::V6(t) => IpAddr::V6(Ipv6Addr::from(t.dst)),
        }
    }
    /// (protocol, source port, destination port).
    pub fn l4(&self) -> (u8, u16, u16) {
        match self {
            FiveTuple::V4(t) => (t.proto, t.src_port, t.dst_port),
            FiveTuple::V6(t) => (t.proto, t.src_port, t.dst_port),
        }
    }
}

impl std::fmt::Display for FiveTuple {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (proto, sp, dp) = self.l4();
        write!(f, "nw_proto={proto},nw_src={},nw_dst={},tp_src={sp},tp_dst={dp}", self.src(), self.dst())
    }
}

/// An exact-match table from keys to 32-bit values (action-set indexes).
#[derive(Clone)]
pub struct ExactMatch<K: EmKey> {
    table: HashTable<(K, u32)>,
    seed: Seed,
}

impl<K: EmKey> Debug for ExactMatch<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExactMatch").field("len", &self.table.len()).finish()
    }
}

impl<K: EmKey> Default for ExactMatch<K> {
    fn default() -> Self {
        Self::new()
    }
}

/// Keys hashed per pass of a batch lookup.
const BATCH_CHUNK: usize = 32;

impl<K: EmKey> ExactMatch<K> {
    /// An empty table with random seeds.
    pub fn new() -> Self {
        Self::with_seed(Seed::random())
    }

    /// An empty table with the given seeds.
    pub fn with_seed(seed: Seed) -> Self {
        ExactMatch { table: HashTable::new(), seed }
    }

    /// An empty table with room for `n` keys before it grows.
    pub fn with_capacity(n: usize) -> Self {
        ExactMatch { table: HashTable::with_capacity(n), seed: Seed::random() }
    }

    /// Keys in the table.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Adds a key or changes its value; returns the previous value.
    pub fn insert(&mut self, key: K, value: u32) -> Option<u32> {
        let seed = self.seed;
        let h = key.hash(&seed);
        match self.table.entry(h, |(k, _)| *k == key, |(k, _)| k.hash(&seed)) {
            hashbrown::hash_table::Entry::Occupied(mut o) => Some(std::mem::replace(&mut o.get_mut().1, value)),
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert((key, value));
                None
            }
        }
    }

    /// Removes a key; returns its value.
    pub fn remove(&mut self, key: &K) -> Option<u32> {
        let h = key.hash(&self.seed);
        self.table.find_entry(h, |(k, _)| k == key).ok().map(|o| o.remove().0.1)
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.table.clear();
    }

    /// The value of a key.
    #[inline]
    pub fn lookup(&self, key: &K) -> Option<u32> {
        let h = key.hash(&self.seed);
        self.table.find(h, |(k, _)| k == key).map(|e| e.1)
    }

    /// Looks up a batch: `out[i]` gets the value of `keys[i]` (the shorter slice bounds it).
    #[inline]
    pub fn lookup_batch(&self, keys: &[K], out: &mut [Option<u32>]) {
        let n = keys.len().min(out.len());
        for (keys, out) in keys[..n].chunks(BATCH_CHUNK).zip(out[..n].chunks_mut(BATCH_CHUNK)) {
            let mut hashes = [0u64; BATCH_CHUNK];
            for (h, k) in hashes.iter_mut().zip(keys) {
                *h = k.hash(&self.seed);
            }
            for ((o, k), &h) in out.iter_mut().zip(keys).zip(&hashes) {
                *o = self.table.find(h, |(x, _)| x == k).map(|e| e.1);
            }
        }
    }

    /// Every key and value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (K, u32)> + '_ {
        self.table.iter().copied()
    }

    /// Bytes the table occupies (buckets and control bytes).
    pub fn memory_bytes(&self) -> usize {
        self.table.capacity() * (std::mem::size_of::<(K, u32)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_update_remove() {
        let mut t = ExactMatch::with_seed(Seed::from_u64(1));
        let k = FiveTuple6 { src: 1, dst: 2, proto: 6, src_port: 3, dst_port: 4 };
        assert_eq!(t.insert(k, 1), None);
        assert_eq!(t.insert(k, 2), Some(1));
        assert_eq!(t.lookup(&k), Some(2));
        assert_eq!(t.len(), 1);
        assert_eq!(t.remove(&k), Some(2));
        assert_eq!(t.remove(&k), None);
        assert!(t.is_empty());
    }

    #[test]
    fn every_field_is_part_of_the_key() {
        let seed = Seed::from_u64(7);
        let k = FiveTuple4 { src: 1, dst: 2, proto: 17, src_port: 3, dst_port: 4 };
        let variants = [
            FiveTuple4 { src: 9, ..k },
            FiveTuple4 { dst: 9, ..k },
            FiveTuple4 { proto: 6, ..k },
            FiveTuple4 { src_port: 9, ..k },
            FiveTuple4 { dst_port: 9, ..k },
        ];
        let mut t = ExactMatch::with_seed(seed);
        t.insert(k, 1);
        for v in variants {
            assert_ne!(v.hash(&seed), k.hash(&seed), "{v:?}");
            assert_eq!(t.lookup(&v), None, "{v:?}");
        }
    }

    #[test]
    fn display_names_fields_as_openflow_does() {
        let t = FiveTuple::V4(FiveTuple4 { src: 0x0a000001, dst: 0x0a000002, proto: 6, src_port: 1, dst_port: 80 });
        assert_eq!(t.to_string(), "nw_proto=6,nw_src=10.0.0.1,nw_dst=10.0.0.2,tp_src=1,tp_dst=80");
    }
}
