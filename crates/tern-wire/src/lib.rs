//! Tern packet formats.
//!
//! Every header is a pair, as in smoltcp: a zero-copy view over bytes (`Packet<T: AsRef<[u8]>>`)
//! with a private `field` module of byte ranges, and a parsed, checked value (`Repr`) with
//! `parse` / `emit` / `buffer_len`. Views built with `new_checked` have passed a length check;
//! after it, no accessor panics. Parsers of untrusted bytes return [`Error`], never panic.
//!
//! - [`frame`]: Ethernet / VLAN / IPv4 / IPv6 / TCP / UDP / ICMP headers as a flow pipeline sees
//!   them, Internet checksums and their incremental update.
//! - [`qnp`]: the QingNiao request protocol header (QingNiao Figure 11), see `docs/qnp.md`.
//! - [`clip`]: CLIP's request/response header between a switch and its servers, see
//!   `docs/clip.md`.
//! - [`tlv`]: the QingNiao on-wire payload format: type-length-value records.
#![forbid(unsafe_code)]

pub mod clip;
pub mod frame;
pub mod qnp;
pub mod tlv;

/// The `N` bytes written as `2N` hex digits in `s` (an optional `0x` before them), as keys are
/// written in configuration files; `None` for any other text.
///
/// ```
/// assert_eq!(tern_wire::hex_bytes::<2>("0x0aff"), Some([0x0a, 0xff]));
/// assert_eq!(tern_wire::hex_bytes::<2>("0aff00"), None);
/// ```
pub fn hex_bytes<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.len() != 2 * N || !s.is_ascii() {
        return None;
    }
    let mut k = [0u8; N];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(k)
}

/// Checks that `path`, a file a configuration names, is a regular file of at most `max` bytes
/// (not a device or a pipe, which reading would never finish); the error names it.
pub fn check_regular_file(path: &std::path::Path, max: u64) -> std::result::Result<(), String> {
    let m = std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if !m.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if m.len() > max {
        return Err(format!("{} is {} bytes, more than the {max} a file here may be", path.display(), m.len()));
    }
    Ok(())
}

/// Bytes of Ethernet (14) + IPv4 without options (20) + UDP (8) in front of a QNP header.
pub const ETH_IPV4_UDP_LEN: usize = 42;

/// The error type of header parsers: what was wrong with the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header or than a length field says.
    Truncated,
    /// A field holds a value the format does not allow; the string names it.
    Malformed(&'static str),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Truncated => write!(f, "truncated packet"),
            Error::Malformed(what) => write!(f, "malformed packet: {what}"),
        }
    }
}

impl std::error::Error for Error {}

/// Result of header parsing.
pub type Result<T> = core::result::Result<T, Error>;
