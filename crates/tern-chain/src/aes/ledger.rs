//! The nonce ledger (docs/chain.md, "AES-GCM"): a file that reserves AES-GCM instance numbers,
//! key by key, for every process that uses it, so that a key's nonces never repeat across
//! restarts of a server, nor between two servers given the same key and the same ledger.
//!
//! The file is text: the line [`HEADER`], then a line a key, `KEY-ID NEXT`: the key's
//! [`KeyId`] (32 hex digits) and the first instance number not yet reserved (decimal, at most
//! 2^32). A reservation takes an exclusive lock on `PATH.lock`, reads the file, writes the new
//! one to `PATH.tmp`, flushes it to the disk and renames it over `PATH`, then flushes the
//! directory: a crash at any point leaves the old file or the new one, and the numbers a
//! reservation returns are on the disk before any nonce is made from them. A crash loses at
//! most the numbers it had reserved and not used.
//!
//! ```
//! use tern_chain::aes::ledger::{KeyId, Ledger};
//! let dir = std::env::temp_dir().join(format!("ledger-doc-{}", std::process::id()));
//! let ledger = Ledger::new(dir.join("aes-nonces"));
//! let id = KeyId::of(&[7; 32]);
//! assert_eq!(ledger.reserve(id, 64).unwrap(), 0..64);
//! // Another process, or this one after a restart, gets the numbers after them.
//! assert_eq!(Ledger::new(dir.join("aes-nonces")).reserve(id, 64).unwrap(), 64..128);
//! std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};

use sha2::Digest;

/// The ledger's first line.
pub const HEADER: &str = "# tern aes-gcm nonce ledger v1";
/// The largest ledger read, bytes (some 350,000 keys).
pub const MAX_BYTES: u64 = 16 << 20;
/// The instance numbers a key has: 2^32 (a nonce's first 4 bytes).
pub const NUMBERS: u64 = 1 << 32;
/// Instance numbers a key space reserves at a time.
pub const BLOCK: u32 = 64;

/// A key's name in the ledger: the first 16 bytes of SHA-256 over `tern aes-gcm nonce ledger`,
/// a zero byte and the key. It tells keys apart without giving the key away.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId(pub [u8; 16]);

impl KeyId {
    /// The id of `key`.
    pub fn of(key: &[u8; 32]) -> KeyId {
        let mut h = sha2::Sha256::new();
        h.update(b"tern aes-gcm nonce ledger\0");
        h.update(key);
        let d = h.finalize();
        let mut id = [0; 16];
        id.copy_from_slice(&d[..16]);
        KeyId(id)
    }
}

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// Why the ledger could not reserve; the message names the file (and the line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// The file, its lock or its directory could not be read or written.
    #[error("nonce ledger {path}: {why}")]
    Io { path: String, why: String },
    /// The file is not one this module wrote: left as it is.
    #[error(
        "nonce ledger {path}: not a nonce ledger (its first line is not `{HEADER}`); left as it is: give another file"
    )]
    NotLedger { path: String },
    /// A line that is not `KEY-ID NEXT`, or a key twice.
    #[error("nonce ledger {path}: line {line}: {why}")]
    Bad { path: String, line: usize, why: String },
}

/// A nonce ledger at a path (nothing is read or made until the first reservation).
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
}

impl Ledger {
    /// The ledger kept in the file `path` (made, with its directory, at the first reservation).
    pub fn new(path: impl Into<PathBuf>) -> Ledger {
        Ledger { path: path.into() }
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, what: &str, e: impl std::fmt::Display) -> LedgerError {
        LedgerError::Io { path: self.path.display().to_string(), why: format!("{what}: {e}") }
    }

    fn sibling(&self, suffix: &str) -> PathBuf {
        let mut s = self.path.clone().into_os_string();
        s.push(suffix);
        PathBuf::from(s)
    }

    /// Reserves up to `n` more instance numbers of key `id`: the numbers, on the disk before
    /// this returns, and never returned again by any ledger on this file. Fewer than `n` (none
    /// at all) once the key's [`NUMBERS`] run out.
    pub fn reserve(&self, id: KeyId, n: u32) -> Result<Range<u64>, LedgerError> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(|e| self.io(&format!("cannot make directory {}", dir.display()), e))?;
        let lock_path = self.sibling(".lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| self.io(&format!("cannot open its lock {}", lock_path.display()), e))?;
        // Held until `lock` drops: one reservation at a time, across processes.
        lock.lock().map_err(|e| self.io(&format!("cannot lock {}", lock_path.display()), e))?;
        let mut entries = self.read()?;
        let at = match entries.iter().position(|(k, _)| *k == id) {
            Some(i) => i,
            None => {
                entries.push((id, 0));
                entries.len() - 1
            }
        };
        let first = entries[at].1;
        let end = (first + u64::from(n)).min(NUMBERS);
        if end == first {
            return Ok(first..end);
        }
        entries[at].1 = end;
        let text = render(&entries);
        let tmp = self.sibling(".tmp");
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()
        };
        write().map_err(|e| self.io(&format!("cannot write {}", tmp.display()), e))?;
        std::fs::rename(&tmp, &self.path)
            .map_err(|e| self.io(&format!("cannot rename {} over it", tmp.display()), e))?;
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io(&format!("cannot flush directory {}", dir.display()), e))?;
        Ok(first..end)
    }

    /// What the file holds: each key's first number not yet reserved, in the file's order
    /// (none if there is no file yet).
    pub fn read(&self) -> Result<Vec<(KeyId, u64)>, LedgerError> {
        let path = self.path.display().to_string();
        match std::fs::symlink_metadata(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io("cannot read", e)),
            Ok(m) if m.file_type().is_symlink() => {
                return Err(self.io("a symbolic link", "give the file it points to (a reservation replaces the file)"));
            }
            Ok(_) => {}
        }
        let text = tern_wire::read_regular_text(&self.path, MAX_BYTES)
            .map_err(|e| LedgerError::Io { path: path.clone(), why: e.problem })?;
        parse(&text).map_err(|e| match e {
            ParseError::NotLedger => LedgerError::NotLedger { path },
            ParseError::Line(line, why) => LedgerError::Bad { path, line, why },
        })
    }
}

/// Why a ledger's text does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Its first line is not [`HEADER`].
    NotLedger,
    /// This line (from 1) is not `KEY-ID NEXT`, or names a key a second time: why.
    Line(usize, String),
}

/// A ledger's text: each key's first number not yet reserved, in the text's order.
pub fn parse(text: &str) -> Result<Vec<(KeyId, u64)>, ParseError> {
    let mut lines = text.lines();
    if lines.next() != Some(HEADER) {
        return Err(ParseError::NotLedger);
    }
    let mut entries: Vec<(KeyId, u64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, l) in lines.enumerate() {
        let bad = |why: String| ParseError::Line(i + 2, why);
        if l.trim().is_empty() {
            continue;
        }
        let mut f = l.split_ascii_whitespace();
        let (Some(k), Some(v), None) = (f.next(), f.next(), f.next()) else {
            return Err(bad("not `KEY-ID NEXT` (32 hex digits, a number)".into()));
        };
        let id = tern_wire::hex_bytes::<16>(k).ok_or_else(|| bad(format!("`{k}`: not a key id of 32 hex digits")))?;
        let next = v
            .parse::<u64>()
            .ok()
            .filter(|&n| n <= NUMBERS)
            .ok_or_else(|| bad(format!("`{v}`: not a number from 0 to {NUMBERS}")))?;
        if !seen.insert(id) {
            return Err(bad(format!("key id {k} a second time")));
        }
        entries.push((KeyId(id), next));
    }
    Ok(entries)
}

/// The text of a ledger holding `entries` (which [`parse`] gives back).
pub fn render(entries: &[(KeyId, u64)]) -> String {
    let mut text = String::with_capacity(HEADER.len() + 1 + entries.len() * 45);
    text.push_str(HEADER);
    text.push('\n');
    for (k, next) in entries {
        text.push_str(&format!("{k} {next}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tern-ledger-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn reservations_follow_one_another_across_ledgers_and_keys() {
        let d = dir("follow");
        let path = d.join("sub/aes-nonces");
        let (a, b) = (KeyId::of(&[1; 32]), KeyId::of(&[2; 32]));
        assert_ne!(a, b);
        assert_eq!(Ledger::new(&path).reserve(a, 64).unwrap(), 0..64);
        assert_eq!(Ledger::new(&path).reserve(b, 3).unwrap(), 0..3);
        assert_eq!(Ledger::new(&path).reserve(a, 1).unwrap(), 64..65);
        assert_eq!(Ledger::new(&path).read().unwrap(), vec![(a, 65), (b, 3)]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{HEADER}\n{a} 65\n{b} 3\n"));
        assert!(!d.join("sub/aes-nonces.tmp").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_last_numbers_and_then_none() {
        let d = dir("last");
        let path = d.join("aes-nonces");
        let id = KeyId::of(&[3; 32]);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(&path, format!("{HEADER}\n{id} {}\n", NUMBERS - 10)).unwrap();
        let l = Ledger::new(&path);
        assert_eq!(l.reserve(id, 64).unwrap(), NUMBERS - 10..NUMBERS);
        assert_eq!(l.reserve(id, 64).unwrap(), NUMBERS..NUMBERS);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn concurrent_reservations_never_overlap() {
        let d = dir("concurrent");
        let path = d.join("aes-nonces");
        let id = KeyId::of(&[4; 32]);
        let got: Vec<Range<u64>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    let path = path.clone();
                    s.spawn(move || (0..10).map(|_| Ledger::new(&path).reserve(id, 5).unwrap()).collect::<Vec<_>>())
                })
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let mut starts: Vec<u64> = got.iter().map(|r| r.start).collect();
        starts.sort_unstable();
        assert_eq!(starts, (0..40).map(|i| i * 5).collect::<Vec<_>>());
        assert!(got.iter().all(|r| r.end - r.start == 5));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_file_not_a_ledger_is_refused_and_left_alone() {
        let d = dir("foreign");
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("tenant.toml");
        std::fs::write(&path, "name = \"a\"\n").unwrap();
        let e = Ledger::new(&path).reserve(KeyId::of(&[5; 32]), 1).unwrap_err();
        assert!(matches!(e, LedgerError::NotLedger { .. }), "{e}");
        assert!(e.to_string().contains("tenant.toml"), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "name = \"a\"\n");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn bad_lines_are_named() {
        let d = dir("bad");
        std::fs::create_dir_all(&d).unwrap();
        let path = d.join("aes-nonces");
        let id = KeyId::of(&[6; 32]);
        for (body, line, says) in [
            (format!("{id} 5\nzz 1\n"), 3, "not a key id"),
            (format!("{id} 4294967297\n"), 2, "not a number"),
            (format!("{id} 5\n{id} 6\n"), 3, "a second time"),
            (format!("{id}\n"), 2, "not `KEY-ID NEXT`"),
        ] {
            std::fs::write(&path, format!("{HEADER}\n{body}")).unwrap();
            let e = Ledger::new(&path).reserve(id, 1).unwrap_err();
            assert!(matches!(&e, LedgerError::Bad { line: l, .. } if *l == line), "{e}");
            assert!(e.to_string().contains(says), "{e}");
        }
        // Not a regular file, a link: refused too.
        let e = Ledger::new(&d).reserve(id, 1).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::os::unix::fs::symlink(&path, d.join("link")).unwrap();
        let e = Ledger::new(d.join("link")).reserve(id, 1).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
