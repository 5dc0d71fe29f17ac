//! The paper's RocksDB experiment (QingNiao §5.1) with a real embedded store: a KV GET service
//! on [`fjall`] (a pure-Rust LSM tree) or, built with the `rocksdb` feature, on RocksDB itself
//! ([`Backend`]); its key layout and its load.
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
/// The most keys a store may hold: [`KvStore::load`] sorts them all in memory first, about 100
/// bytes a key.
pub const MAX_KEYS: u64 = 100_000_000;
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
    /// RocksDB reported an error.
    #[cfg(feature = "rocksdb")]
    #[error("kv store (rocksdb): {0}")]
    Rocks(#[from] rocksdb::Error),
    /// The backend is not in this build.
    #[error("kv store: {0}")]
    Unavailable(String),
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
        if !(u64::from(PARTITIONS)..=MAX_KEYS).contains(&self.keys) {
            return Err(KvError::Layout(format!(
                "keys ({}) must be at least {PARTITIONS} and at most {MAX_KEYS} (the loader sorts every key in memory)",
                self.keys
            )));
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

/// The embedded store behind the KV service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// fjall, a pure-Rust LSM tree (always built).
    #[default]
    Fjall,
    /// RocksDB through the `rocksdb` crate, linked against the system's librocksdb (the
    /// `rocksdb` cargo feature; see the README).
    RocksDb,
}

impl Backend {
    /// Whether this build has the backend.
    pub fn available(self) -> bool {
        match self {
            Backend::Fjall => true,
            Backend::RocksDb => cfg!(feature = "rocksdb"),
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Fjall => "fjall",
            Backend::RocksDb => "rocksdb",
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Backend, String> {
        match s {
            "fjall" => Ok(Backend::Fjall),
            "rocksdb" => Ok(Backend::RocksDb),
            other => Err(format!("unknown store `{other}` (expected fjall or rocksdb)")),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The store, shared by every worker thread (both backends are thread-safe).
#[derive(Clone)]
pub struct KvStore {
    inner: Inner,
    path: PathBuf,
}

#[derive(Clone)]
enum Inner {
    Fjall {
        _db: fjall::Database,
        ks: fjall::Keyspace,
    },
    #[cfg(feature = "rocksdb")]
    Rocks(std::sync::Arc<rocks::Temporary>),
}

impl std::fmt::Debug for KvStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore").field("backend", &self.backend()).field("path", &self.path).finish()
    }
}

impl KvStore {
    /// A new fjall store in a fresh directory under `dir` (the system's temporary directory if
    /// `None`), deleted when the last handle is dropped.
    pub fn temporary(dir: Option<&Path>) -> Result<KvStore, KvError> {
        KvStore::temporary_with(Backend::Fjall, dir)
    }

    /// A new store of `backend` in a fresh directory under `dir`, deleted when the last handle
    /// is dropped. Fails with [`KvError::Unavailable`] where the build lacks the backend.
    pub fn temporary_with(backend: Backend, dir: Option<&Path>) -> Result<KvStore, KvError> {
        static N: AtomicU64 = AtomicU64::new(0);
        let base = dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
        let path = base.join(format!(
            "tern-kv-{}-{}-{}",
            backend.name(),
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        match backend {
            Backend::Fjall => {
                let db = fjall::Database::builder(&path).temporary(true).open()?;
                let ks = db.keyspace("kv", fjall::KeyspaceCreateOptions::default)?;
                Ok(KvStore { inner: Inner::Fjall { _db: db, ks }, path })
            }
            #[cfg(feature = "rocksdb")]
            Backend::RocksDb => {
                let db = rocks::Temporary::open(&path)?;
                Ok(KvStore { inner: Inner::Rocks(std::sync::Arc::new(db)), path })
            }
            #[cfg(not(feature = "rocksdb"))]
            Backend::RocksDb => Err(KvError::Unavailable(
                "this build has no RocksDB: rebuild with `--features rocksdb` (needs librocksdb-dev and \
                 libclang-dev, and ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu; see the README)"
                    .into(),
            )),
        }
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        match self.inner {
            Inner::Fjall { .. } => Backend::Fjall,
            #[cfg(feature = "rocksdb")]
            Inner::Rocks(_) => Backend::RocksDb,
        }
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
        match &self.inner {
            Inner::Fjall { ks, .. } => {
                let mut ingest = ks.start_ingestion()?;
                for (k, p, i) in &keys {
                    ingest.write(k.as_slice(), layout.value(*p, *i))?;
                }
                ingest.finish()?;
            }
            #[cfg(feature = "rocksdb")]
            Inner::Rocks(db) => db.load(keys.iter().map(|(k, p, i)| (k.as_slice(), layout.value(*p, *i))))?,
        }
        Ok(keys.len() as u64)
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, KvError> {
        match &self.inner {
            Inner::Fjall { ks, .. } => Ok(ks.get(key)?.map(|v| v.to_vec())),
            #[cfg(feature = "rocksdb")]
            Inner::Rocks(db) => Ok(db.get(key)?),
        }
    }

    /// Answers a GET; a store error answers "not found" (and is counted by the caller).
    pub fn handle(&self, req: &Get) -> (Value, bool) {
        match self.get(&req.key) {
            Ok(Some(value)) => (Value { found: true, value }, true),
            Ok(None) => (Value { found: false, value: Vec::new() }, true),
            Err(_) => (Value { found: false, value: Vec::new() }, false),
        }
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// RocksDB in a directory of its own, removed when dropped.
#[cfg(feature = "rocksdb")]
mod rocks {
    use std::path::{Path, PathBuf};

    pub(super) struct Temporary {
        // Fields drop in order: the database closes before its directory goes.
        db: rocksdb::DB,
        _dir: RemoveOnDrop,
    }

    struct RemoveOnDrop(PathBuf);

    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    impl Temporary {
        pub(super) fn open(path: &Path) -> Result<Temporary, rocksdb::Error> {
            let mut opts = rocksdb::Options::default();
            opts.create_if_missing(true);
            // The paper's point lookups: a bloom filter per block and a block cache.
            let mut table = rocksdb::BlockBasedOptions::default();
            table.set_bloom_filter(10.0, false);
            table.set_block_cache(&rocksdb::Cache::new_lru_cache(256 << 20)?);
            opts.set_block_based_table_factory(&table);
            Ok(Temporary { db: rocksdb::DB::open(&opts, path)?, _dir: RemoveOnDrop(path.to_path_buf()) })
        }

        /// Writes sorted pairs in batches without the write-ahead log, then flushes and compacts
        /// them into sorted tables.
        pub(super) fn load<'a>(&self, pairs: impl Iterator<Item = (&'a [u8], Vec<u8>)>) -> Result<(), rocksdb::Error> {
            let mut wo = rocksdb::WriteOptions::default();
            wo.disable_wal(true);
            let mut batch = rocksdb::WriteBatch::default();
            for (k, v) in pairs {
                batch.put(k, v);
                if batch.len() >= 10_000 {
                    self.db.write_opt(std::mem::take(&mut batch), &wo)?;
                }
            }
            self.db.write_opt(batch, &wo)?;
            self.db.flush()?;
            self.db.compact_range::<&[u8], &[u8]>(None, None);
            Ok(())
        }

        pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, rocksdb::Error> {
            Ok(self.db.get_pinned(key)?.map(|v| v.to_vec()))
        }
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

    /// A store holds from one key a partition to [`MAX_KEYS`]; outside that the layout is
    /// refused before anything is allocated.
    #[test]
    fn a_layout_holds_a_key_a_partition_to_max_keys() {
        let with = |keys| KvLayout { keys, ..layout(32, 4) };
        assert!(with(u64::from(PARTITIONS)).validate().is_ok() && with(MAX_KEYS).validate().is_ok());
        for bad in [u64::from(PARTITIONS) - 1, MAX_KEYS + 1, u64::MAX] {
            let e = with(bad).validate().unwrap_err().to_string();
            assert!(e.contains(&bad.to_string()) && e.contains("at most 100000000"), "{e}");
        }
        assert!(KeySampler::new(&with(u64::MAX)).is_err());
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
        store_answers(Backend::Fjall);
    }

    /// The RocksDB backend answers as fjall does (only in a build with the feature).
    #[cfg(feature = "rocksdb")]
    #[test]
    fn rocksdb_store_loads_and_answers_gets() {
        store_answers(Backend::RocksDb);
    }

    #[cfg(not(feature = "rocksdb"))]
    #[test]
    fn rocksdb_without_the_feature_says_how_to_get_it() {
        let e = KvStore::temporary_with(Backend::RocksDb, None).unwrap_err().to_string();
        assert!(e.contains("--features rocksdb") && e.contains("librocksdb-dev"), "{e}");
        assert!(!Backend::RocksDb.available() && Backend::Fjall.available());
        assert_eq!("rocksdb".parse::<Backend>(), Ok(Backend::RocksDb));
        assert!("leveldb".parse::<Backend>().unwrap_err().contains("leveldb"));
    }

    fn store_answers(backend: Backend) {
        let l = layout(32, 4);
        let store = KvStore::temporary_with(backend, None).unwrap();
        assert_eq!(store.backend(), backend);
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
