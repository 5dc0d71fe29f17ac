//! RPC kernels (RpcNIC §III-D): the computations a compute unit is programmed with, run on
//! device-resident bytes. Pure Rust: LZ4 (`lz4_flex`, block format with the input's length in
//! front), zstd (`ruzstd` at its fastest level, a standard zstd frame), AES-256-GCM seal and open
//! (`aes-gcm`), and compress-then-encrypt. The same functions run on host threads in the image
//! service's `cpu-only` mode, so host and device compute the same bytes.
//!
//! A kernel writes at most the output buffer's capacity: an output that does not fit is a
//! [`Status::OutputTooSmall`], never a panic, and a sealed message that does not open is a
//! [`Status::AuthFailed`].
//!
//! Sealed bytes are `nonce (12) || ciphertext || tag (16)`. Each seal takes a fresh nonce from
//! the [`Sealer`] it runs with: 4 bytes, then a 64-bit little-endian counter, all 96 bits drawn
//! from the operating system's random source when the sealer is made (a unit's programming) and
//! the counter going up by one a seal (wrapping). So no two seals of one sealer share a nonce
//! (not in 2^64 seals), and two sealers with the same key (units programmed alike, or one unit
//! programmed again) repeat one only if both random starts fall within one range of seals:
//! with k sealers of m seals each, a chance of about k² · m / 2^96.

use std::fmt;
use std::str::FromStr;

use aes_gcm::aead::rand_core::RngCore;
use aes_gcm::aead::{AeadInPlace, OsRng};
use aes_gcm::{Aes256Gcm, KeyInit, Nonce, Tag};

/// Bytes of an AES-GCM nonce.
pub const NONCE_BYTES: usize = 12;
/// Bytes of an AES-GCM tag.
pub const TAG_BYTES: usize = 16;
/// What sealing adds to a message: nonce and tag.
pub const SEAL_OVERHEAD: usize = NONCE_BYTES + TAG_BYTES;

/// A compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Codec {
    /// LZ4 block format, the uncompressed length (4 bytes, little-endian) in front.
    Lz4,
    /// A zstd frame (`ruzstd`'s fastest level, about zstd's level 1).
    Zstd,
}

/// What a compute unit computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// Compression.
    Compress(Codec),
    /// AES-256-GCM encryption (a key is programmed with it).
    Seal,
    /// AES-256-GCM decryption and tag check.
    Open,
    /// Compression, then AES-256-GCM encryption of the compressed bytes.
    CompressSeal(Codec),
}

impl KernelKind {
    /// Every kind, for listings and tests.
    pub const ALL: [KernelKind; 6] = [
        KernelKind::Compress(Codec::Lz4),
        KernelKind::Compress(Codec::Zstd),
        KernelKind::Seal,
        KernelKind::Open,
        KernelKind::CompressSeal(Codec::Lz4),
        KernelKind::CompressSeal(Codec::Zstd),
    ];

    /// Its name, as configuration files and `kind()` give it.
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Compress(Codec::Lz4) => "lz4",
            KernelKind::Compress(Codec::Zstd) => "zstd",
            KernelKind::Seal => "aes-gcm-seal",
            KernelKind::Open => "aes-gcm-open",
            KernelKind::CompressSeal(Codec::Lz4) => "lz4+aes-gcm",
            KernelKind::CompressSeal(Codec::Zstd) => "zstd+aes-gcm",
        }
    }

    /// Whether it needs a key.
    pub fn keyed(self) -> bool {
        !matches!(self, KernelKind::Compress(_))
    }

    /// The most output bytes it can write for `len` input bytes (what an output buffer of this
    /// capacity always suffices for).
    pub fn max_output(self, len: usize) -> usize {
        let compressed = |c: Codec| match c {
            Codec::Lz4 => 4 + lz4_flex::block::get_maximum_output_size(len),
            // A frame header (at most 18 bytes), raw blocks of at most 128 KiB with 3-byte
            // headers, and a checksum: what an incompressible input costs.
            Codec::Zstd => len + 3 * len.div_ceil(128 << 10).max(1) + 32,
        };
        match self {
            KernelKind::Compress(c) => compressed(c),
            KernelKind::Seal => len + SEAL_OVERHEAD,
            KernelKind::Open => len.saturating_sub(SEAL_OVERHEAD),
            KernelKind::CompressSeal(c) => compressed(c) + SEAL_OVERHEAD,
        }
    }
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KernelKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KernelKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| {
            let names: Vec<_> = KernelKind::ALL.iter().map(|k| k.name()).collect();
            format!("unknown kernel `{s}` (kernels: {})", names.join(", "))
        })
    }
}

/// How a task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Done: the output holds the result.
    Ok,
    /// The result does not fit the output buffer (nothing useful was written).
    OutputTooSmall,
    /// A sealed message that does not open: too short, or its tag does not match.
    AuthFailed,
    /// Input that is not what the kernel reads (a length past the buffer).
    BadInput,
}

impl Status {
    /// Every status, for metrics.
    pub const ALL: [Status; 4] = [Status::Ok, Status::OutputTooSmall, Status::AuthFailed, Status::BadInput];

    /// Its name in metrics and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::OutputTooSmall => "output_too_small",
            Status::AuthFailed => "auth_failed",
            Status::BadInput => "bad_input",
        }
    }
}

/// AES-256-GCM with a key and a nonce sequence of its own (see the module's docs).
pub struct Sealer {
    cipher: Aes256Gcm,
    prefix: [u8; 4],
    counter: u64,
}

impl fmt::Debug for Sealer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealer").field("prefix", &self.prefix).field("counter", &self.counter).finish()
    }
}

impl Sealer {
    /// A sealer for `key`, its first nonce's 96 bits (prefix and counter) drawn from the
    /// operating system.
    pub fn new(key: &[u8; 32]) -> Sealer {
        let mut prefix = [0u8; 4];
        OsRng.fill_bytes(&mut prefix);
        let mut s = Sealer::with_prefix(key, prefix);
        s.counter = OsRng.next_u64();
        s
    }

    /// A sealer whose nonces start with `prefix`, its counter at 0 (tests: the same nonces as a
    /// direct call).
    pub fn with_prefix(key: &[u8; 32], prefix: [u8; 4]) -> Sealer {
        Sealer { cipher: Aes256Gcm::new(key.into()), prefix, counter: 0 }
    }

    /// The next nonce.
    fn nonce(&mut self) -> [u8; NONCE_BYTES] {
        let mut n = [0u8; NONCE_BYTES];
        n[..4].copy_from_slice(&self.prefix);
        n[4..].copy_from_slice(&self.counter.to_le_bytes());
        self.counter = self.counter.wrapping_add(1);
        n
    }

    /// Seals `input` into `out` (cleared first) as `nonce || ciphertext || tag`, if it fits
    /// `capacity`.
    pub fn seal(&mut self, input: &[u8], out: &mut Vec<u8>, capacity: usize) -> Status {
        out.clear();
        if input.len() + SEAL_OVERHEAD > capacity {
            return Status::OutputTooSmall;
        }
        let nonce = self.nonce();
        out.extend_from_slice(&nonce);
        out.extend_from_slice(input);
        match self.cipher.encrypt_in_place_detached(Nonce::from_slice(&nonce), b"", &mut out[NONCE_BYTES..]) {
            Ok(tag) => {
                out.extend_from_slice(&tag);
                Status::Ok
            }
            // Only for inputs past GCM's limit (64 GiB): no output.
            Err(_) => {
                out.clear();
                Status::BadInput
            }
        }
    }

    /// Opens `nonce || ciphertext || tag` into `out` (cleared first), if it fits `capacity` and
    /// the tag matches.
    pub fn open(&self, input: &[u8], out: &mut Vec<u8>, capacity: usize) -> Status {
        out.clear();
        if input.len() < SEAL_OVERHEAD {
            return Status::AuthFailed;
        }
        let (nonce, rest) = input.split_at(NONCE_BYTES);
        let (ct, tag) = rest.split_at(rest.len() - TAG_BYTES);
        if ct.len() > capacity {
            return Status::OutputTooSmall;
        }
        out.extend_from_slice(ct);
        match self.cipher.decrypt_in_place_detached(Nonce::from_slice(nonce), b"", out, Tag::from_slice(tag)) {
            Ok(()) => Status::Ok,
            Err(_) => {
                out.clear();
                Status::AuthFailed
            }
        }
    }
}

/// Compresses `input` with `codec` into `out` (cleared first), if it fits `capacity`.
pub fn compress(codec: Codec, input: &[u8], out: &mut Vec<u8>, capacity: usize) -> Status {
    out.clear();
    match codec {
        Codec::Lz4 => {
            let Ok(len) = u32::try_from(input.len()) else { return Status::BadInput };
            if capacity < 4 {
                return Status::OutputTooSmall;
            }
            out.resize(capacity, 0);
            out[..4].copy_from_slice(&len.to_le_bytes());
            match lz4_flex::block::compress_into(input, &mut out[4..]) {
                Ok(n) => {
                    out.truncate(4 + n);
                    Status::Ok
                }
                Err(_) => {
                    out.clear();
                    Status::OutputTooSmall
                }
            }
        }
        Codec::Zstd => ZSTD_OUT.with_borrow_mut(|frame| {
            // `ruzstd` writes a frame into a growing vector; it is copied out only if it fits,
            // so `out` never grows past `capacity`.
            frame.clear();
            ruzstd::encoding::compress(input, &mut *frame, ruzstd::encoding::CompressionLevel::Fastest);
            if frame.len() > capacity {
                return Status::OutputTooSmall;
            }
            out.extend_from_slice(frame);
            Status::Ok
        }),
    }
}

thread_local! {
    static ZSTD_OUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A programmed kernel: its kind and, for the keyed ones, its sealer.
#[derive(Debug)]
pub struct Kernel {
    kind: KernelKind,
    sealer: Option<Sealer>,
    /// Compressed bytes before they are sealed (compress-then-encrypt), reused.
    scratch: Vec<u8>,
}

impl Kernel {
    /// `kind`, with `key` where it needs one (an error naming the kind when it is missing).
    pub fn new(kind: KernelKind, key: Option<&[u8; 32]>) -> Result<Kernel, String> {
        let sealer = match (kind.keyed(), key) {
            (true, Some(k)) => Some(Sealer::new(k)),
            (true, None) => return Err(format!("kernel `{kind}` needs a 32-byte key")),
            (false, _) => None,
        };
        Ok(Kernel { kind, sealer, scratch: Vec::new() })
    }

    /// A kernel with a given sealer (tests).
    pub fn with_sealer(kind: KernelKind, sealer: Option<Sealer>) -> Kernel {
        Kernel { kind, sealer, scratch: Vec::new() }
    }

    /// Its kind.
    pub fn kind(&self) -> KernelKind {
        self.kind
    }

    /// Runs on `input`, writing at most `capacity` bytes into `out` (cleared first).
    pub fn run(&mut self, input: &[u8], out: &mut Vec<u8>, capacity: usize) -> Status {
        match (self.kind, self.sealer.as_mut()) {
            (KernelKind::Compress(c), _) => compress(c, input, out, capacity),
            (KernelKind::Seal, Some(s)) => s.seal(input, out, capacity),
            (KernelKind::Open, Some(s)) => s.open(input, out, capacity),
            (KernelKind::CompressSeal(c), Some(s)) => {
                let mut scratch = std::mem::take(&mut self.scratch);
                let st = match compress(c, input, &mut scratch, capacity.saturating_sub(SEAL_OVERHEAD)) {
                    Status::Ok => s.seal(&scratch, out, capacity),
                    other => {
                        out.clear();
                        other
                    }
                };
                self.scratch = scratch;
                st
            }
            // A keyed kind always has its sealer (`new` refuses one without a key).
            (_, None) => {
                out.clear();
                Status::BadInput
            }
        }
    }
}
