//! Skip-and-check patterns and byte literals as written in rule files (`docs/rules.md`).
//!
//! A pattern alternates bytes to skip and bytes to check (QingNiao §3.3):
//!
//! | syntax   | meaning                                                        |
//! |----------|----------------------------------------------------------------|
//! | `.`      | skip one byte                                                  |
//! | `.{N}`   | skip N bytes                                                   |
//! | `*`      | skip to just after the next delimiter byte (`$` by default)    |
//! | `\xNN`   | check the byte 0xNN                                            |
//! | `\.` `\*` `\\` | check a literal `.`, `*`, `\`                            |
//! | anything else | check its UTF-8 bytes                                     |
//!
//! ```
//! use tern_dispatch::rules::pattern::{PatOp, parse_pattern};
//! let ops = parse_pattern("...AAA.BB").unwrap();
//! assert_eq!(ops, vec![PatOp::Skip(3), PatOp::Check(b"AAA".to_vec()), PatOp::Skip(1), PatOp::Check(b"BB".to_vec())]);
//! ```

use std::fmt;

/// Longest run of skipped bytes one pattern may ask for (a field is at most 65535 bytes).
pub const MAX_SKIP: u32 = u16::MAX as u32;

/// One operation of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PatOp {
    /// Skip this many bytes.
    Skip(u32),
    /// Skip to just after the next delimiter byte.
    ToDelim,
    /// These bytes must come next.
    Check(Vec<u8>),
}

/// A pattern or literal that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Nothing to check.
    #[error("the pattern checks no bytes (it would match any value; leave the field out instead)")]
    NoCheck,
    /// The pattern ends with a skip.
    #[error("the pattern ends with a skip; every skip must be followed by bytes to check")]
    TrailingSkip,
    /// A backslash escape is not `\xNN`, `\.`, `\*` or `\\`.
    #[error("bad escape at byte {at}: use \\xNN, \\., \\* or \\\\")]
    BadEscape {
        /// Byte offset in the pattern text.
        at: usize,
    },
    /// `.{N}` is malformed or N is out of range.
    #[error("bad repeat at byte {at}: write .{{N}} with 1 <= N <= {MAX_SKIP}")]
    BadRepeat {
        /// Byte offset in the pattern text.
        at: usize,
    },
}

/// Parses a skip-and-check pattern. Adjacent skips merge; adjacent checks merge.
pub fn parse_pattern(text: &str) -> Result<Vec<PatOp>, PatternError> {
    let b = text.as_bytes();
    let mut ops: Vec<PatOp> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'.' => {
                let (n, next) = if b.get(i + 1) == Some(&b'{') { parse_repeat(text, i)? } else { (1, i + 1) };
                push_skip(&mut ops, n).ok_or(PatternError::BadRepeat { at: i })?;
                i = next;
            }
            b'*' => {
                ops.push(PatOp::ToDelim);
                i += 1;
            }
            b'\\' => {
                let (byte, next) = parse_escape(b, i)?;
                push_check(&mut ops, &[byte]);
                i = next;
            }
            _ => {
                // Copy a run of plain bytes (whole UTF-8 sequences: none of the specials is >= 0x80).
                let start = i;
                while i < b.len() && !matches!(b[i], b'.' | b'*' | b'\\') {
                    i += 1;
                }
                push_check(&mut ops, &b[start..i]);
            }
        }
    }
    if !ops.iter().any(|op| matches!(op, PatOp::Check(_))) {
        return Err(PatternError::NoCheck);
    }
    if !matches!(ops.last(), Some(PatOp::Check(_))) {
        return Err(PatternError::TrailingSkip);
    }
    Ok(ops)
}

/// Parses a literal (for exact, prefix, suffix, contains): text with `\xNN` and `\\` escapes
/// (`\.` and `\*` are accepted too, so a pattern's literal part can be pasted as is).
pub fn parse_literal(text: &str) -> Result<Vec<u8>, PatternError> {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            let (byte, next) = parse_escape(b, i)?;
            out.push(byte);
            i = next;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

fn parse_escape(b: &[u8], i: usize) -> Result<(u8, usize), PatternError> {
    match b.get(i + 1) {
        Some(c @ (b'.' | b'*' | b'\\')) => Ok((*c, i + 2)),
        Some(b'x') => {
            let hex = b.get(i + 2..i + 4).ok_or(PatternError::BadEscape { at: i })?;
            let s = std::str::from_utf8(hex).map_err(|_| PatternError::BadEscape { at: i })?;
            let v = u8::from_str_radix(s, 16).map_err(|_| PatternError::BadEscape { at: i })?;
            Ok((v, i + 4))
        }
        _ => Err(PatternError::BadEscape { at: i }),
    }
}

fn parse_repeat(text: &str, i: usize) -> Result<(u32, usize), PatternError> {
    let rest = &text[i + 2..];
    let close = rest.find('}').ok_or(PatternError::BadRepeat { at: i })?;
    let digits = &rest[..close];
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(PatternError::BadRepeat { at: i });
    }
    let n: u32 = digits.parse().map_err(|_| PatternError::BadRepeat { at: i })?;
    if n == 0 || n > MAX_SKIP {
        return Err(PatternError::BadRepeat { at: i });
    }
    Ok((n, i + 2 + close + 1))
}

fn push_skip(ops: &mut Vec<PatOp>, n: u32) -> Option<()> {
    if let Some(PatOp::Skip(m)) = ops.last_mut() {
        *m = m.checked_add(n).filter(|&t| t <= MAX_SKIP)?;
    } else {
        ops.push(PatOp::Skip(n));
    }
    Some(())
}

fn push_check(ops: &mut Vec<PatOp>, bytes: &[u8]) {
    if let Some(PatOp::Check(v)) = ops.last_mut() {
        v.extend_from_slice(bytes);
    } else {
        ops.push(PatOp::Check(bytes.to_vec()));
    }
}

/// Writes bytes as a literal: printable ASCII as is, the rest as `\xNN`, specials escaped.
pub fn escape(bytes: &[u8], escape_specials: bool) -> String {
    let mut s = String::with_capacity(bytes.len());
    for &c in bytes {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'.' | b'*' if escape_specials => {
                s.push('\\');
                s.push(c as char);
            }
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

/// Displays a pattern in the syntax [`parse_pattern`] reads.
#[derive(Debug, Clone, Copy)]
pub struct DisplayPattern<'a>(pub &'a [PatOp]);

impl fmt::Display for DisplayPattern<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for op in self.0 {
            match op {
                PatOp::Skip(n) if *n <= 4 => f.write_str(&".".repeat(*n as usize))?,
                PatOp::Skip(n) => write!(f, ".{{{n}}}")?,
                PatOp::ToDelim => f.write_str("*")?,
                PatOp::Check(b) => f.write_str(&escape(b, true))?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_papers_example() {
        let ops = parse_pattern("...AAA.BB").unwrap();
        assert_eq!(DisplayPattern(&ops).to_string(), "...AAA.BB");
    }

    #[test]
    fn repeats_delimiters_and_escapes() {
        let ops = parse_pattern(".{10}ab*\\x00\\.c..{3}d").unwrap();
        assert_eq!(
            ops,
            vec![
                PatOp::Skip(10),
                PatOp::Check(b"ab".to_vec()),
                PatOp::ToDelim,
                PatOp::Check(b"\0.c".to_vec()),
                PatOp::Skip(4),
                PatOp::Check(b"d".to_vec()),
            ]
        );
        let text = DisplayPattern(&ops).to_string();
        assert_eq!(parse_pattern(&text).unwrap(), ops);
    }

    #[test]
    fn rejects_bad_patterns() {
        assert_eq!(parse_pattern(""), Err(PatternError::NoCheck));
        assert_eq!(parse_pattern("..."), Err(PatternError::NoCheck));
        assert_eq!(parse_pattern("ab.."), Err(PatternError::TrailingSkip));
        assert_eq!(parse_pattern("ab*"), Err(PatternError::TrailingSkip));
        assert_eq!(parse_pattern("a\\q"), Err(PatternError::BadEscape { at: 1 }));
        assert_eq!(parse_pattern("a\\x4"), Err(PatternError::BadEscape { at: 1 }));
        assert_eq!(parse_pattern("a.{0}b"), Err(PatternError::BadRepeat { at: 1 }));
        assert_eq!(parse_pattern("a.{x}b"), Err(PatternError::BadRepeat { at: 1 }));
        assert_eq!(parse_pattern("a.{99999}b"), Err(PatternError::BadRepeat { at: 1 }));
        assert_eq!(parse_pattern("a.{40000}.{40000}b"), Err(PatternError::BadRepeat { at: 9 }));
        assert_eq!(parse_pattern("a.{3"), Err(PatternError::BadRepeat { at: 1 }));
    }

    #[test]
    fn literals() {
        assert_eq!(parse_literal("a\\x7fb\\\\").unwrap(), b"a\x7fb\\");
        assert_eq!(parse_literal("é").unwrap(), "é".as_bytes());
        assert!(parse_literal("\\").is_err());
        assert_eq!(escape(b"a.\x01", true), "a\\.\\x01");
    }
}
