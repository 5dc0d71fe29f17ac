//! The paper's RocksDB experiment (QingNiao §5.1) with a real embedded store: a KV GET service
//! on [`fjall`] (a pure-Rust LSM tree), its key layout and its load.
//!
//! Keys are [`KEY_LEN`] (62) bytes with [`VALUE_LEN`] (64) byte values, evenly partitioned into
//! [`PARTITIONS`] (24) ranges. A key of partition `p` starts with the route bytes of rule
//! `p · R / 24` of a synthetic rule set ([`crate::synth::Spec`], R rules of k skip-and-checks of b
//! bytes), so every GET walks all k checks of its rule; the rules send the 24 partitions to the
//! workers in equal blocks (as the paper's rules do) whenever R ≥ 24. The load generator picks a partition
//! uniformly and a key within it Zipf(0.9) ([`KeySampler`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rand::Rng;
use rand_distr::{Distribution, Zipf};

use crate::apps::kv::{Get, Value};
use crate::rules::RuleSet;
use crate::synth::Spec;

/// Key ranges (the paper's 24).
pub const PARTITIONS: u32 = 24;
/// Key bytes.
pub const KEY_LEN: usize = 62;
/// Value bytes.
pub const VALUE_LEN: usize = 64;
/// Zipf exponent within a partition.
pub const ZIPF_S: f64 = 0.9;
/// The KV application's id.
pub const APP_ID: u8 = 1;
/// The request type of a GET.
pub const GET: u8 = 1;

/// What goes wrong opening or loading the store.
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// The store reported an error.
    #[error("kv store: {0}")]
    Store(#[from] fjall::Error),
    /// The layout is unusable.
    #[error("kv layout: {0}")]
    Layout(String),
}

/// Where every key lives and which rule (and worker) it belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    /// The synthetic rule set the keys are built for.
    pub spec: Spec,
    /// Workers (queues) the rules map to.
    pub workers: u16,
    /// Keys in the store.
    pub keys: u64,
}

impl KvLayout {
    /// Checks the numbers.
    pub fn validate(&self) -> Result<(), KvError> {
        self.spec.validate().map_err(KvError::Layout)?;
        if self.workers == 0 {
            return Err(KvError::Layout("workers must be at least 1".into()));
        }
        if self.keys < u64::from(PARTITIONS) {
            return Err(KvError::Layout(format!("keys ({}) must be at least {PARTITIONS}", self.keys)));
        }
        Ok(())
    }

    /// The rule whose keys partition `p` holds.
    pub fn rule_of(&self, p: u32) -> u32 {
        (u64::from(p) * u64::from(self.spec.rules) / u64::from(PARTITIONS)) as u32
    }

    /// The worker rule `r` sends requests to: the partitions split into equal blocks, one per
    /// worker, and a rule goes with the first partition whose keys it matches.
    pub fn queue_of_rule(&self, r: u32) -> u16 {
        let (n, rules) = (u64::from(PARTITIONS), u64::from(self.spec.rules.max(1)));
        let first = (u64::from(r) * n).div_ceil(rules).min(n - 1);
        (first * u64::from(self.workers) / n) as u16
    }

    /// The worker partition `p`'s requests must reach.
    pub fn queue_of(&self, p: u32) -> u16 {
        self.queue_of_rule(self.rule_of(p))
    }

    /// Keys in partition `p`.
    pub fn keys_in(&self, p: u32) -> u64 {
        let n = u64::from(PARTITIONS);
        self.keys / n + u64::from(u64::from(p) < self.keys % n)
    }

    /// Key `i` of partition `p` (`i < keys_in(p)`).
    pub fn key(&self, p: u32, i: u64) -> Vec<u8> {
        self.spec.key(self.rule_of(p), KEY_LEN, i * u64::from(PARTITIONS) + u64::from(p))
    }

    /// The value stored under key `i` of partition `p`.
    pub fn value(&self, p: u32, i: u64) -> Vec<u8> {
        let mut v = vec![0u8; VALUE_LEN];
        let seed = (i * u64::from(PARTITIONS) + u64::from(p)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for (j, b) in v.iter_mut().enumerate() {
            *b = (seed >> ((j % 8) * 8)) as u8 ^ j as u8;
        }
        v
    }

    /// The dispatch rules: the synthetic rule set with rule `r` on worker
    /// [`queue_of_rule(r)`](Self::queue_of_rule).
    pub fn rule_set(&self) -> RuleSet {
        let mut set = self.spec.rule_set(self.workers);
        for r in &mut set.rules {
            r.queue = self.queue_of_rule(r.index as u32);
        }
        set
    }

    /// The rule file of [`rule_set`](Self::rule_set), with `idl` as its IDL path.
    pub fn to_toml(&self, idl: &str) -> String {
        self.spec.rules_toml(&self.rule_set(), idl)
    }
}

/// Draws GET keys: a partition uniformly, then a key in it Zipf([`ZIPF_S`]), the most popular
/// keys first.
#[derive(Debug, Clone)]
pub struct KeySampler {
    layout: KvLayout,
    zipf: Vec<Zipf<f64>>,
    /// Each partition's route bytes (the start of all its keys).
    routes: Vec<Vec<u8>>,
}

impl KeySampler {
    /// A sampler over `layout`'s keys.
    pub fn new(layout: &KvLayout) -> Result<KeySampler, KvError> {
        layout.validate()?;
        let zipf = (0..PARTITIONS)
            .map(|p| Zipf::new(layout.keys_in(p) as f64, ZIPF_S).map_err(|e| KvError::Layout(e.to_string())))
            .collect::<Result<_, _>>()?;
        let routes = (0..PARTITIONS)
            .map(|p| layout.spec.key(layout.rule_of(p), 0, 0)[..layout.spec.route_len()].to_vec())
            .collect();
        Ok(KeySampler { layout: *layout, zipf, routes })
    }

    /// Writes [`KvLayout::key`]`(p, i)` into `out` without allocating.
    pub fn key_into(&self, p: u32, i: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.routes[p as usize]);
        let id = i * u64::from(PARTITIONS) + u64::from(p);
        let digits = id.checked_ilog10().unwrap_or(0) as usize + 1;
        out.extend(std::iter::repeat_n(b'0', KEY_LEN.saturating_sub(out.len() + digits)));
        let start = out.len();
        out.resize(start + digits, b'0');
        let mut v = id;
        for b in out[start..].iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
    }

    /// A partition and a key index in it.
    pub fn sample<R: Rng>(&self, rng: &mut R) -> (u32, u64) {
        let p = rng.random_range(0..PARTITIONS);
        let i = self.zipf[p as usize].sample(rng) as u64;
        (p, i.saturating_sub(1).min(self.layout.keys_in(p) - 1))
    }
}

/// The store: one fjall keyspace, shared by every worker thread (fjall is thread-safe).
#[derive(Clone)]
pub struct KvStore {
    _db: fjall::Database,
    ks: fjall::Keyspace,
    path: PathBuf,
}

impl std::fmt::Debug for KvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore").field("path", &self.path).finish()
    }
}

impl KvStore {
    /// A new store in a fresh directory under `dir` (the system's temporary directory if
    /// `None`), deleted when the last handle is dropped.
    pub fn temporary(dir: Option<&Path>) -> Result<KvStore, KvError> {
        static N: AtomicU64 = AtomicU64::new(0);
        let base = dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let path = base.join(format!("tern-kv-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
        let db = fjall::Database::builder(&path).temporary(true).open()?;
        let ks = db.keyspace("kv", fjall::KeyspaceCreateOptions::default)?;
        Ok(KvStore { _db: db, ks, path })
    }

    /// Loads every key of `layout` with its value (a bulk ingestion of sorted keys); returns the
    /// number of keys.
    pub fn load(&self, layout: &KvLayout) -> Result<u64, KvError> {
        layout.validate()?;
        let mut keys: Vec<(Vec<u8>, u32, u64)> = Vec::with_capacity(layout.keys as usize);
        for p in 0..PARTITIONS {
            for i in 0..layout.keys_in(p) {
                keys.push((layout.key(p, i), p, i));
            }
        }
        keys.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut ingest = self.ks.start_ingestion()?;
        for (k, p, i) in &keys {
            ingest.write(k.as_slice(), layout.value(*p, *i))?;
        }
        ingest.finish()?;
        Ok(keys.len() as u64)
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<fjall::Slice>, KvError> {
        Ok(self.ks.get(key)?)
    }

    /// Answers a GET; a store error answers "not found" (and is counted by the caller).
    pub fn handle(&self, req: &Get) -> (Value, bool) {
        match self.ks.get(&req.key) {
            Ok(Some(v)) => (Value { found: true, value: v.to_vec() }, true),
            Ok(None) => (Value { found: false, value: Vec::new() }, true),
            Err(_) => (Value { found: false, value: Vec::new() }, false),
        }
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::Machine;
    use rand::SeedableRng;

    fn layout(rules: u32, workers: u16) -> KvLayout {
        KvLayout { spec: Spec { rules, ..Spec::default() }, workers, keys: 2400 }
    }

    #[test]
    fn keys_are_62_bytes_unique_and_hit_their_partitions_worker() {
        for (rules, workers) in [(32, 4), (4, 4), (512, 3), (1, 2), (24, 8), (7, 5)] {
            let l = layout(rules, workers);
            let set = l.rule_set();
            let m = Machine::compile(&set, APP_ID).unwrap();
            let mut seen = std::collections::HashSet::new();
            for p in 0..PARTITIONS {
                for i in [0, 1, l.keys_in(p) - 1] {
                    let k = l.key(p, i);
                    assert_eq!(k.len(), KEY_LEN);
                    assert!(seen.insert(k.clone()));
                    let mut payload = Vec::new();
                    tern_wire::tlv::Writer::new(&mut payload).put_bytes(1, &k);
                    let d = m.decide(GET, &payload);
                    assert_eq!(d.rule, Some(l.rule_of(p)), "rules {rules} p {p}");
                    assert_eq!(d.queue, l.queue_of(p));
                }
            }
        }
    }

    #[test]
    fn partitions_spread_evenly_over_workers() {
        for (rules, workers) in [(32, 1u16), (32, 2), (32, 3), (32, 4), (512, 6), (24, 8), (4, 4), (48, 5)] {
            let l = layout(rules, workers);
            let mut per = vec![0u32; usize::from(workers)];
            for p in 0..PARTITIONS {
                per[usize::from(l.queue_of(p))] += 1;
            }
            let (lo, hi) = (per.iter().min().unwrap(), per.iter().max().unwrap());
            assert!(hi - lo <= 1, "workers {workers}: {per:?}");
        }
    }

    #[test]
    fn toml_round_trips_to_the_same_rules() {
        let l = layout(32, 4);
        let text = l.to_toml("kv.proto");
        let cfg: crate::rules::DispatchConfig = toml::from_str(&text).unwrap();
        let schema = tern_idl::parse_str("kv.proto", crate::synth::IDL).unwrap();
        let set = RuleSet::from_config(&cfg, &schema).unwrap();
        let want = l.rule_set();
        assert_eq!(set.rules.len(), want.rules.len());
        for (a, b) in set.rules.iter().zip(&want.rules) {
            assert_eq!((a.queue, &a.conditions[0].kind), (b.queue, &b.conditions[0].kind));
        }
    }

    #[test]
    fn sampler_stays_in_range_and_skews_to_the_head() {
        let l = layout(32, 4);
        let s = KeySampler::new(&l).unwrap();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let (mut head, n) = (0, 20_000);
        let mut buf = Vec::new();
        for _ in 0..n {
            let (p, i) = s.sample(&mut rng);
            assert!(p < PARTITIONS && i < l.keys_in(p));
            s.key_into(p, i, &mut buf);
            assert_eq!(buf, l.key(p, i));
            head += u32::from(i < 10);
        }
        // 100 keys per partition, s = 0.9: the first 10 hold about 45% of the mass.
        assert!(head > n / 3 && head < n * 2 / 3, "{head}");
    }

    #[test]
    fn store_loads_and_answers_gets() {
        let l = layout(32, 4);
        let store = KvStore::temporary(None).unwrap();
        let path = store.path().to_path_buf();
        assert_eq!(store.load(&l).unwrap(), 2400);
        for (p, i) in [(0, 0), (23, 99), (7, 50)] {
            let (v, ok) = store.handle(&Get { key: l.key(p, i) });
            assert!(ok && v.found);
            assert_eq!(v.value, l.value(p, i));
        }
        assert!(!store.handle(&Get { key: b"missing".to_vec() }).0.found);
        drop(store);
        assert!(!path.exists(), "temporary store left {path:?}");
    }
}
