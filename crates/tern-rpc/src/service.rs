//! An RPC service's configuration (TOML; `examples/rpc/image.toml`, `social.toml`): the application, its
//! `.proto`, the hardware profile it is checked against, deserializer lanes, handler threads,
//! chunk pools, compute units and their kernels, and sample messages to project. `tern hw
//! report` reads it; every error names the item (and the file).
//!
//! ```toml
//! app = "image"                 # a built-in application: "image" (Algorithm 1) or "social"
//! proto = "image.proto"         # relative to this file
//! profile = "rpcnic-u280"
//! lanes = 4
//! handlers = 2
//! auto_update = true
//! [pools]
//! chunk_bytes = 4096
//! host_chunks = 16384
//! device_chunks = 65536
//! [[units]]
//! kernel = "lz4+aes-gcm"
//! count = 4
//! key = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
//! [[messages]]
//! type = "image.User"
//! avatar = [128, 128]           # the image app's own sample: a user with a 128 x 128 avatar
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::kernel::KernelKind;
use crate::schema::{SchemaTable, compile_file};

/// The applications a service may run: Algorithm 1's image service, and the five
/// DeathStarBench-like social network services.
pub const APPS: [&str; 2] = ["image", "social"];

/// An application's methods: number, name and request message (full name).
pub fn app_methods(app: &str) -> Vec<(u32, &'static str, String)> {
    match app {
        "image" => vec![(crate::image::STORE, "store", "image.User".to_string())],
        "social" => crate::social::METHODS.iter().map(|m| (m.0, m.1, format!("social.{}", m.2))).collect(),
        _ => Vec::new(),
    }
}

/// Chunk pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolsConfig {
    /// Bytes of a chunk (host and device). Default 4096.
    #[serde(default = "chunk")]
    pub chunk_bytes: u64,
    /// Host chunks. Default 16384 (64 MiB of 4 KB chunks: the U280 TLB's host region).
    #[serde(default = "host_chunks")]
    pub host_chunks: u64,
    /// Device chunks. Default 65536 (256 MiB).
    #[serde(default = "device_chunks")]
    pub device_chunks: u64,
}

fn chunk() -> u64 {
    4096
}
fn host_chunks() -> u64 {
    16384
}
fn device_chunks() -> u64 {
    65536
}
fn one() -> u64 {
    1
}
fn yes() -> bool {
    true
}
fn cpu() -> String {
    "cpu".into()
}

impl Default for PoolsConfig {
    fn default() -> Self {
        PoolsConfig { chunk_bytes: chunk(), host_chunks: host_chunks(), device_chunks: device_chunks() }
    }
}

/// Compute units programmed alike.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitsConfig {
    /// The kernel's name (`lz4`, `zstd`, `aes-gcm-seal`, `aes-gcm-open`, `lz4+aes-gcm`,
    /// `zstd+aes-gcm`).
    pub kernel: String,
    /// How many. Default 1.
    #[serde(default = "one")]
    pub count: u64,
    /// The 32-byte key of a keyed kernel, in hex (64 digits).
    #[serde(default)]
    pub key: Option<String>,
    /// Milliseconds a reconfiguration keeps a unit out of service. Default 0.
    #[serde(default)]
    pub reconfigure_ms: u64,
}

/// A sample message to project.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleConfig {
    /// Its message type (full name, or unique without its package).
    #[serde(rename = "type")]
    pub ty: String,
    /// A file of its wire bytes (relative to the configuration).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// The image app's own sample: a request with an avatar this wide and high.
    #[serde(default)]
    pub avatar: Option<[u32; 2]>,
    /// The social app's own sample request of this type (`generate = true`).
    #[serde(default)]
    pub generate: bool,
    /// The method it is a request of (its name). Default: the app's method taking `type`.
    #[serde(default)]
    pub method: Option<String>,
}

/// A service's configuration as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// The application ([`APPS`]).
    pub app: String,
    /// Its `.proto` (relative to the configuration).
    pub proto: PathBuf,
    /// The hardware profile (built-in name or TOML file). Default `cpu`.
    #[serde(default = "cpu")]
    pub profile: String,
    /// Deserializer lanes. Default 1.
    #[serde(default = "one")]
    pub lanes: u64,
    /// Host handler threads. Default 1.
    #[serde(default = "one")]
    pub handlers: u64,
    /// Automatic field updating. Default on.
    #[serde(default = "yes")]
    pub auto_update: bool,
    /// Chunk pools.
    #[serde(default)]
    pub pools: PoolsConfig,
    /// Compute units.
    #[serde(default)]
    pub units: Vec<UnitsConfig>,
    /// Sample messages.
    #[serde(default)]
    pub messages: Vec<SampleConfig>,
    /// The users the image app authorizes. Default `[1]` (the generated samples' user).
    #[serde(default = "users")]
    pub authorized: Vec<u64>,
}

fn users() -> Vec<u64> {
    vec![1]
}

/// A configuration that cannot be used: the file and what is wrong, naming the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct ConfigError {
    /// The configuration file.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

/// A kernel programmed on units: its kind, key and how many units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Units {
    /// The kernel.
    pub kernel: KernelKind,
    /// Its key (keyed kernels).
    pub key: Option<[u8; 32]>,
    /// Units programmed with it.
    pub count: u64,
    /// Reconfiguration time, ms.
    pub reconfigure_ms: u64,
}

/// A sample message: its type, method and wire bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// Full type name.
    pub ty: String,
    /// The method it is a request of (its number; 0 when it is no method's request: projected
    /// by `tern hw report`, not called by `tern rpc load`).
    pub method: u32,
    /// What it is (a file's path, or the generated sample's description).
    pub source: String,
    /// Wire bytes.
    pub bytes: Vec<u8>,
}

/// A checked configuration: the schema table compiled, kernels parsed, samples read.
#[derive(Debug)]
pub struct Service {
    /// As written.
    pub config: ServiceConfig,
    /// The file it came from.
    pub file: PathBuf,
    /// The `.proto`'s schema table.
    pub table: SchemaTable,
    /// Compute units by kernel.
    pub units: Vec<Units>,
    /// Sample messages.
    pub samples: Vec<Sample>,
}

/// The longest `.proto` a configuration may name (the front end's bound on every `.proto`).
pub const MAX_PROTO_BYTES: u64 = tern_idl::frontend::MAX_PROTO_FILE_BYTES;

/// Whether a parsed TOML table looks like a service configuration (it has `app` and `proto`).
pub fn is_service_table(t: &toml::Table) -> bool {
    t.contains_key("app") && t.contains_key("proto")
}

impl Service {
    /// Reads and checks the configuration at `path` (a regular file of at most 16 MiB,
    /// `tern_wire::MAX_CONFIG_BYTES`).
    pub fn load(path: &Path) -> Result<Service, ConfigError> {
        let text = tern_wire::read_regular_text(path, tern_wire::MAX_CONFIG_BYTES)
            .map_err(|e| ConfigError { file: path.display().to_string(), message: e.problem })?;
        Service::parse(&text, path)
    }

    /// Checks configuration `text`, read from `path` (the files it names are found beside it).
    pub fn parse(text: &str, path: &Path) -> Result<Service, ConfigError> {
        let file = path.display().to_string();
        let err = |message: String| ConfigError { file: file.clone(), message };
        let config: ServiceConfig = toml::from_str(text).map_err(|e| err(e.to_string().trim_end().to_string()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        if !APPS.contains(&config.app.as_str()) {
            return Err(err(format!("app `{}` is not one Tern runs (apps: {})", config.app, APPS.join(", "))));
        }
        for (what, v) in [("lanes", config.lanes), ("handlers", config.handlers)] {
            if !(1..=1024).contains(&v) {
                return Err(err(format!("{what} = {v}: must be 1 to 1024")));
            }
        }
        let p = config.pools;
        if !(64..=1 << 30).contains(&p.chunk_bytes) {
            return Err(err(format!("pools.chunk_bytes = {}: must be 64 to 2^30", p.chunk_bytes)));
        }
        for (what, v) in [("pools.host_chunks", p.host_chunks), ("pools.device_chunks", p.device_chunks)] {
            if v == 0 || v > 1 << 32 {
                return Err(err(format!("{what} = {v}: must be 1 to 2^32")));
            }
        }
        let proto = dir.join(&config.proto);
        tern_wire::check_regular_file(&proto, MAX_PROTO_BYTES).map_err(|e| err(format!("proto: {e}")))?;
        let table = compile_file(&proto, &[]).map_err(|e| err(format!("proto: {e}")))?;
        let mut units = Vec::new();
        for (i, u) in config.units.iter().enumerate() {
            let at = format!("units[{i}]");
            let kernel: KernelKind = u.kernel.parse().map_err(|e| err(format!("{at}.kernel: {e}")))?;
            let key = match (&u.key, kernel.keyed()) {
                (Some(k), true) => Some(
                    tern_wire::hex_bytes::<32>(k)
                        .ok_or_else(|| err(format!("{at}.key: not 64 hex digits (a 32-byte key)")))?,
                ),
                (None, true) => return Err(err(format!("{at}: kernel `{kernel}` needs a key (64 hex digits)"))),
                (Some(_), false) => return Err(err(format!("{at}.key: kernel `{kernel}` takes no key"))),
                (None, false) => None,
            };
            if !(1..=1024).contains(&u.count) {
                return Err(err(format!("{at}.count = {}: must be 1 to 1024", u.count)));
            }
            units.push(Units { kernel, key, count: u.count, reconfigure_ms: u.reconfigure_ms });
        }
        let mut samples = Vec::new();
        for (i, m) in config.messages.iter().enumerate() {
            let at = format!("messages[{i}]");
            let class = table
                .class_by_name(&m.ty)
                .ok_or_else(|| err(format!("{at}.type: `{}` is not a message of {}", m.ty, proto.display())))?;
            let methods = app_methods(&config.app);
            let method = match &m.method {
                Some(name) => {
                    let Some(&(n, _, ref req)) = methods.iter().find(|x| x.1 == name) else {
                        let names: Vec<&str> = methods.iter().map(|x| x.1).collect();
                        return Err(err(format!(
                            "{at}.method: `{name}` is not a method of the {} app ({})",
                            config.app,
                            names.join(", ")
                        )));
                    };
                    if *req != class.name {
                        return Err(err(format!("{at}.method: {name} takes {req}, not {}", class.name)));
                    }
                    n
                }
                None => methods.iter().find(|x| x.2 == class.name).map_or(0, |x| x.0),
            };
            let (source, bytes) = match (&m.file, m.avatar, m.generate) {
                (Some(f), None, false) => {
                    let f = dir.join(f);
                    let b = tern_wire::read_regular_file(
                        &f,
                        crate::decode::DecodeOptions::default().max_message_bytes as u64,
                    )
                    .map_err(|e| err(format!("{at}.file: {e}")))?;
                    (f.display().to_string(), b)
                }
                (None, Some([w, h]), false) if config.app == "image" && class.name == "image.User" => {
                    if !(1..=4096).contains(&w) || !(1..=4096).contains(&h) {
                        return Err(err(format!("{at}.avatar: {w} x {h}: each side must be 1 to 4096")));
                    }
                    (format!("a user with a {w} x {h} avatar"), crate::image::request(&table, 1, w, h))
                }
                (None, Some(_), false) => {
                    return Err(err(format!("{at}.avatar: only the image app's image.User has a generated sample")));
                }
                (None, None, true) if config.app == "social" && method != 0 => {
                    let bytes = crate::social::request(&table, method, i as u64 + 1).ok_or_else(|| {
                        err(format!("{at}: {} does not have social.proto's {}", proto.display(), class.name))
                    })?;
                    (format!("the social app's own {} request", crate::social::service_of(method)), bytes)
                }
                (None, None, true) => {
                    return Err(err(format!(
                        "{at}.generate: only the social app's method requests have generated samples"
                    )));
                }
                _ => return Err(err(format!("{at}: give `file`, `avatar` or `generate = true`, one of them"))),
            };
            samples.push(Sample { ty: class.name.clone(), method, source, bytes });
        }
        Ok(Service { config, file: path.to_path_buf(), table, units, samples })
    }

    /// The configured chunk pools: host and device, each bounded by its own count.
    pub fn pools(&self) -> crate::decode::Pools {
        let p = self.config.pools;
        let pool =
            |n: u64| crate::arena::ChunkPool::new(p.chunk_bytes as usize, usize::try_from(n).unwrap_or(usize::MAX));
        crate::decode::Pools { host: pool(p.host_chunks), device: pool(p.device_chunks) }
    }

    /// Compute units configured.
    pub fn unit_count(&self) -> u64 {
        self.units.iter().map(|u| u.count).sum()
    }
}
