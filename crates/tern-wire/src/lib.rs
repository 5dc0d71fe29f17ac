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

/// A file that could not be read whole: `path: problem` (the problem alone for an error that
/// names the file itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileError {
    /// The file, as given.
    pub path: String,
    /// What is wrong: `not a regular file`, `N bytes, more than the MAX a file here may be`,
    /// `more than the MAX bytes a file here may be`, `not UTF-8 text (byte K)`, or `cannot
    /// read: ` and the system's error.
    pub problem: String,
}

impl core::fmt::Display for FileError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

impl std::error::Error for FileError {}

impl From<FileError> for String {
    fn from(e: FileError) -> String {
        e.to_string()
    }
}

fn file_error(path: &std::path::Path, problem: String) -> FileError {
    FileError { path: path.display().to_string(), problem }
}

/// Checks that `path`, a file a configuration names, is a regular file of at most `max` bytes
/// (not a device or a pipe, which reading would never finish); the error names it.
pub fn check_regular_file(path: &std::path::Path, max: u64) -> std::result::Result<(), FileError> {
    let m = std::fs::metadata(path).map_err(|e| file_error(path, format!("cannot read: {e}")))?;
    if !m.is_file() {
        return Err(file_error(path, "not a regular file".into()));
    }
    if m.len() > max {
        return Err(file_error(path, format!("{} bytes, more than the {max} a file here may be", m.len())));
    }
    Ok(())
}

/// Reads `path` whole: refused, unread, unless it is a regular file of at most `max` bytes
/// ([`check_regular_file`]); and the read itself stops past `max` bytes, so a file that grows
/// while it is read (or one whose size the file system does not know) is refused too rather
/// than read without end.
pub fn read_regular_file(path: &std::path::Path, max: u64) -> std::result::Result<Vec<u8>, FileError> {
    check_regular_file(path, max)?;
    let f = std::fs::File::open(path).map_err(|e| file_error(path, format!("cannot read: {e}")))?;
    read_at_most(f, max)
        .map_err(|e| file_error(path, format!("cannot read: {e}")))?
        .ok_or_else(|| file_error(path, format!("more than the {max} bytes a file here may be")))
}

/// Reads `r` to its end if it holds at most `max` bytes (None if it holds more: the read stops
/// one byte past the bound, so a source without end is never read whole).
pub fn read_at_most(r: impl std::io::Read, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    r.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// [`read_regular_file`] as UTF-8 text.
pub fn read_regular_text(path: &std::path::Path, max: u64) -> std::result::Result<String, FileError> {
    String::from_utf8(read_regular_file(path, max)?)
        .map_err(|e| file_error(path, format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to())))
}

/// The most bytes a configuration file (a rule file, a switch, tenant or service
/// configuration) may have: 16 MiB.
pub const MAX_CONFIG_BYTES: u64 = 16 << 20;

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

#[cfg(test)]
mod file_tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn devices_and_pipes_are_refused_unread() {
        let e = read_regular_file(Path::new("/dev/zero"), MAX_CONFIG_BYTES).unwrap_err();
        assert_eq!(e.to_string(), "/dev/zero: not a regular file");
        assert_eq!(e.problem, "not a regular file");
        let dir = std::env::temp_dir().join(format!("tern-wire-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("pipe");
        // No writer ever opens it: reading it would wait for ever.
        if std::process::Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
            let e = read_regular_text(&fifo, 1 << 20).unwrap_err();
            assert!(e.to_string().ends_with("pipe: not a regular file"), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let e = read_regular_text(Path::new("/nonexistent/tern.toml"), 1).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/tern.toml: cannot read: "), "{e}");
    }

    #[test]
    fn the_bound_holds_on_the_size_and_on_the_read() {
        let dir = std::env::temp_dir().join(format!("tern-wire-size-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("ten");
        std::fs::write(&f, b"0123456789").unwrap();
        assert_eq!(read_regular_text(&f, 10).unwrap(), "0123456789");
        let e = read_regular_file(&f, 9).unwrap_err();
        assert!(e.to_string().ends_with("ten: 10 bytes, more than the 9 a file here may be"), "{e}");
        std::fs::write(&f, [b'a', 0xff, b'b']).unwrap();
        let e = read_regular_text(&f, 10).unwrap_err();
        assert!(e.to_string().ends_with("ten: not UTF-8 text (byte 1)"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
        // A regular file whose size the file system gives as 0 but which holds more: the read
        // stops past the bound.
        if std::fs::metadata("/proc/self/status").is_ok_and(|m| m.is_file() && m.len() == 0) {
            let e = read_regular_file(Path::new("/proc/self/status"), 16).unwrap_err();
            assert_eq!(e.to_string(), "/proc/self/status: more than the 16 bytes a file here may be");
            assert!(read_regular_text(Path::new("/proc/self/status"), 1 << 20).unwrap().contains("Pid:"));
        }
    }
}
