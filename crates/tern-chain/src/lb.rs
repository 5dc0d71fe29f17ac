//! The L4 load balancer task's backend choice (docs/chain.md, "Load balancer"): Maglev
//! consistent hashing (Eisenbud et al., NSDI'16, §3.4) with weights.
//!
//! A lookup table of `M` entries (`M` prime, much larger than the backends) is filled so that
//! each backend holds a share of entries proportional to its weight; a flow's hash picks an
//! entry, the entry a backend. Each backend walks its own permutation of the table (an offset
//! and a skip from two hashes of its name) and, in turns proportional to its weight, claims the
//! next entry of its permutation not yet claimed. Because a backend's permutation depends only
//! on its name, adding or removing one backend moves few entries between the others: minimal
//! disruption.
//!
//! ```
//! use tern_chain::lb::Maglev;
//! let m = Maglev::new(&[("a", 1), ("b", 1), ("c", 2)], 65_537).unwrap();
//! let share = |i| m.table().iter().filter(|&&b| b == i).count() as f64 / 65_537.0;
//! assert!((share(2) - 0.5).abs() < 0.01 && (share(0) - 0.25).abs() < 0.01);
//! ```

/// Backends at most.
pub const MAX_BACKENDS: usize = 1024;
/// The largest table.
pub const MAX_TABLE: usize = 1 << 22;

/// A configuration the table cannot be built from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LbError {
    /// No backend with a weight above zero.
    #[error("no backend with a weight above 0")]
    NoBackends,
    /// More than [`MAX_BACKENDS`].
    #[error("{0} backends, at most {MAX_BACKENDS}")]
    TooManyBackends(usize),
    /// A name given twice.
    #[error("backend `{0}` is named twice")]
    Duplicate(String),
    /// The table's size is not a prime, is over [`MAX_TABLE`], or is not larger than the sum
    /// of the weights.
    #[error("table size {size}: must be a prime above the weights' sum ({weights}) and at most {MAX_TABLE}")]
    TableSize {
        /// Asked.
        size: usize,
        /// The weights' sum.
        weights: u64,
    },
}

/// A Maglev lookup table over weighted backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Maglev {
    names: Vec<String>,
    weights: Vec<u32>,
    table: Vec<u16>,
}

/// FNV-1a with a seed: a fixed hash of a backend's name (its permutation must not change from
/// one build or instance to another).
fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Final mixing (splitmix64's), so that near names spread.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Backend `name`'s permutation of a table of `size` entries: its `j`-th choice is entry
/// `(offset + j × skip) mod size`, with `offset = h1 mod size` and `skip = h2 mod (size − 1) + 1`
/// for two fixed hashes `h1`, `h2` of the name (seeded FNV-1a, then splitmix64's mixing).
/// `size` must be above 1.
pub fn permutation(name: &str, size: usize) -> (u64, u64) {
    let m = (size as u64).max(2);
    (fnv(1, name.as_bytes()) % m, fnv(2, name.as_bytes()) % (m - 1) + 1)
}

fn is_prime(n: usize) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

impl Maglev {
    /// The table of `size` entries over `backends` (name, weight); a backend of weight 0 gets
    /// no entry.
    pub fn new(backends: &[(&str, u32)], size: usize) -> Result<Maglev, LbError> {
        if backends.len() > MAX_BACKENDS {
            return Err(LbError::TooManyBackends(backends.len()));
        }
        for (i, (n, _)) in backends.iter().enumerate() {
            if backends[..i].iter().any(|(m, _)| m == n) {
                return Err(LbError::Duplicate((*n).to_string()));
            }
        }
        let weights: u64 = backends.iter().map(|(_, w)| u64::from(*w)).sum();
        if weights == 0 {
            return Err(LbError::NoBackends);
        }
        if !is_prime(size) || size > MAX_TABLE || (size as u64) <= weights {
            return Err(LbError::TableSize { size, weights });
        }
        let m = size as u64;
        let perm: Vec<(u64, u64)> = backends.iter().map(|(n, _)| permutation(n, size)).collect();
        let max_w = backends.iter().map(|(_, w)| *w).max().unwrap_or(1).max(1);
        let mut next = vec![0u64; backends.len()];
        let mut credit = vec![0u64; backends.len()];
        let mut table = vec![u16::MAX; size];
        let mut filled = 0;
        'fill: loop {
            for (i, &(_, w)) in backends.iter().enumerate() {
                // Weighted turns: a backend claims an entry each time its credit reaches the
                // largest weight.
                credit[i] += u64::from(w);
                if credit[i] < u64::from(max_w) {
                    continue;
                }
                credit[i] -= u64::from(max_w);
                let (offset, skip) = perm[i];
                loop {
                    let c = ((offset + next[i] * skip) % m) as usize;
                    next[i] += 1;
                    if table[c] == u16::MAX {
                        table[c] = i as u16;
                        filled += 1;
                        break;
                    }
                }
                if filled == size {
                    break 'fill;
                }
            }
        }
        Ok(Maglev {
            names: backends.iter().map(|(n, _)| (*n).to_string()).collect(),
            weights: backends.iter().map(|(_, w)| *w).collect(),
            table,
        })
    }

    /// The backend (its index) for a flow whose hash is `hash`.
    #[inline]
    pub fn lookup(&self, hash: u64) -> usize {
        usize::from(self.table[(hash % self.table.len() as u64) as usize])
    }

    /// The backends' names, by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Their weights.
    pub fn weights(&self) -> &[u32] {
        &self.weights
    }

    /// The table: each entry's backend.
    pub fn table(&self) -> &[u16] {
        &self.table
    }
}
