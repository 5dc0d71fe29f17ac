//! Protobuf's wire format, read and written without allocating and without panicking on any
//! input: varints, tags, the six wire types, zigzag, and skipping a field (groups included) to
//! keep it as an unknown field.
//!
//! Every error carries the byte offset where it was found. Limits follow protobuf's own: a
//! varint has at most 10 bytes (the 10th carrying only bit 63), field numbers run from 1 to
//! 2^29 - 1, wire types 6 and 7 do not exist, a length-delimited field's length must lie within
//! the input, an end-group tag must close the group that is open, and groups nest at most
//! `depth` deep.
//!
//! ```
//! use tern_rpc::wire::{Reader, Value, put_tag, put_varint};
//! use tern_rpc::schema::WireType;
//! let mut buf = Vec::new();
//! put_tag(&mut buf, 1, WireType::Varint);
//! put_varint(&mut buf, 300);
//! let mut r = Reader::new(&buf);
//! let f = r.next_field().unwrap().unwrap();
//! assert_eq!((f.number, f.value), (1, Value::Varint(300)));
//! assert!(r.next_field().unwrap().is_none());
//! ```

use std::fmt;

use crate::schema::WireType;

/// The largest field number (2^29 - 1).
pub const MAX_FIELD_NUMBER: u32 = (1 << 29) - 1;
/// The most bytes a varint may take.
pub const MAX_VARINT_LEN: usize = 10;

/// What is wrong with the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireErrorKind {
    /// The input ends inside a varint, a fixed-width value or a length-delimited value.
    Truncated,
    /// A varint longer than 10 bytes, or whose 10th byte sets more than bit 63.
    VarintTooLong,
    /// Field number 0.
    FieldNumberZero,
    /// A field number above 2^29 - 1.
    FieldNumberTooLarge,
    /// Wire type 6 or 7.
    BadWireType(u8),
    /// A length past the end of the input.
    LengthPastEnd,
    /// An end-group tag that closes no open group, or another group than the open one.
    UnmatchedEndGroup,
    /// The input ends inside a group.
    UnclosedGroup,
    /// Groups nested deeper than the limit.
    TooDeep,
}

impl fmt::Display for WireErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireErrorKind::Truncated => f.write_str("the input ends inside a value"),
            WireErrorKind::VarintTooLong => f.write_str("a varint longer than 10 bytes"),
            WireErrorKind::FieldNumberZero => f.write_str("field number 0"),
            WireErrorKind::FieldNumberTooLarge => f.write_str("a field number above 2^29 - 1"),
            WireErrorKind::BadWireType(t) => write!(f, "wire type {t} does not exist"),
            WireErrorKind::LengthPastEnd => f.write_str("a length past the end of the input"),
            WireErrorKind::UnmatchedEndGroup => f.write_str("an end-group tag that closes no open group"),
            WireErrorKind::UnclosedGroup => f.write_str("the input ends inside a group"),
            WireErrorKind::TooDeep => f.write_str("groups nested past the depth limit"),
        }
    }
}

/// A wire error and the byte offset where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{kind} at byte {offset}")]
pub struct WireError {
    /// What.
    pub kind: WireErrorKind,
    /// Where, from the start of the reader's input.
    pub offset: usize,
}

/// Reads a varint at `pos`: the value and the position after it.
#[inline]
pub fn read_varint(buf: &[u8], pos: usize) -> Result<(u64, usize), WireError> {
    // Fast path: one byte.
    match buf.get(pos) {
        Some(&b) if b < 0x80 => return Ok((u64::from(b), pos + 1)),
        Some(_) => {}
        None => return Err(WireError { kind: WireErrorKind::Truncated, offset: pos }),
    }
    let mut v = 0u64;
    for i in 0..MAX_VARINT_LEN {
        let Some(&b) = buf.get(pos + i) else {
            return Err(WireError { kind: WireErrorKind::Truncated, offset: pos });
        };
        if i == MAX_VARINT_LEN - 1 && b > 1 {
            return Err(WireError { kind: WireErrorKind::VarintTooLong, offset: pos });
        }
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((v, pos + i + 1));
        }
    }
    Err(WireError { kind: WireErrorKind::VarintTooLong, offset: pos })
}

/// Appends `v` as a varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Largest piece [`extend_in_pieces`] copies at once: under glibc's `rep movsb` threshold
/// (`glibc.cpu.x86_rep_movsb_threshold`: 2112 bytes on this project's machine, as
/// `ld.so --list-tunables` shows).
const PIECE: usize = 2048;

/// Appends `b` to `out`, a long `b` in pieces of at most 2 KiB.
///
/// glibc's `memcpy` copies 2112 bytes and more with `rep movsb`. On this project's AMD EPYC
/// machine that took 1.2 to 5 times as long as its vector loop for values copied from or into
/// the middle of an arena chunk, depending on where the process's pages happened to lie:
/// encoding HyperProtoBench bench3 took 17 µs in every one of six runs with the threshold raised
/// (`GLIBC_TUNABLES=glibc.cpu.x86_rep_movsb_threshold=0x1000000`), and 21–88 µs in six runs
/// without. Pieces under the threshold take the vector loop wherever the pages lie; where `rep
/// movsb` is fast, the vector loop copies data in cache about as fast.
#[inline]
pub fn extend_in_pieces(out: &mut Vec<u8>, b: &[u8]) {
    if b.len() <= PIECE {
        out.extend_from_slice(b);
        return;
    }
    out.reserve(b.len());
    for piece in b.chunks(PIECE) {
        out.extend_from_slice(piece);
    }
}

/// Bytes `v` takes as a varint.
#[inline]
pub fn varint_len(v: u64) -> usize {
    // 1 + floor(log2(v) / 7), with 0 taking one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends a field's tag.
#[inline]
pub fn put_tag(out: &mut Vec<u8>, number: u32, wire: WireType) {
    put_varint(out, (u64::from(number) << 3) | wire as u64);
}

/// ZigZag-encodes a signed 64-bit value (`sint64`).
#[inline]
pub fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Decodes a ZigZag-encoded 64-bit value.
#[inline]
pub fn unzigzag64(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// ZigZag-encodes a signed 32-bit value (`sint32`).
#[inline]
pub fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

/// Decodes a ZigZag-encoded 32-bit value.
#[inline]
pub fn unzigzag32(v: u32) -> i32 {
    ((v >> 1) as i32) ^ -((v & 1) as i32)
}

/// A field's value as the wire carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 2: the bytes inside.
    Len(&'a [u8]),
    /// Wire type 3: the group's contents follow; [`Reader::skip_group`] skips them.
    StartGroup,
    /// Wire type 4.
    EndGroup,
    /// Wire type 5.
    Fixed32(u32),
}

impl Value<'_> {
    /// Its wire type.
    pub fn wire_type(&self) -> WireType {
        match self {
            Value::Varint(_) => WireType::Varint,
            Value::Fixed64(_) => WireType::Fixed64,
            Value::Len(_) => WireType::Len,
            Value::StartGroup => WireType::StartGroup,
            Value::EndGroup => WireType::EndGroup,
            Value::Fixed32(_) => WireType::Fixed32,
        }
    }
}

/// One field read from the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldRef<'a> {
    /// Field number.
    pub number: u32,
    /// Value.
    pub value: Value<'a>,
    /// Offset of its tag.
    pub start: usize,
}

/// Reads fields one after another.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Added to positions in errors and [`FieldRef::start`] (a nested reader's place in the
    /// whole input).
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0, base: 0 }
    }

    /// A reader over `buf`, which starts at `base` in the whole input.
    pub fn at(buf: &'a [u8], base: usize) -> Reader<'a> {
        Reader { buf, pos: 0, base }
    }

    /// Position in the whole input.
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// The bytes from `from` (an offset in the whole input) to the reader's position.
    pub fn since(&self, from: usize) -> &'a [u8] {
        &self.buf[from.saturating_sub(self.base).min(self.pos)..self.pos]
    }

    /// The bytes read, the position in them and the base (for the decoder's fast path).
    #[inline]
    pub(crate) fn parts(&self) -> (&'a [u8], usize, usize) {
        (self.buf, self.pos, self.base)
    }

    /// Moves to `pos` (a position in [`parts`](Self::parts)' bytes that a field ends at).
    #[inline]
    pub(crate) fn set_pos(&mut self, pos: usize) {
        self.pos = pos;
    }

    fn err(&self, kind: WireErrorKind, at: usize) -> WireError {
        WireError { kind, offset: self.base + at }
    }

    /// The next field, or `None` at the end of the input.
    #[inline]
    pub fn next_field(&mut self) -> Result<Option<FieldRef<'a>>, WireError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let start = self.pos;
        let (key, p) = read_varint(self.buf, self.pos).map_err(|e| self.err(e.kind, e.offset))?;
        let wire = (key & 7) as u8;
        let number = key >> 3;
        if number == 0 {
            return Err(self.err(WireErrorKind::FieldNumberZero, start));
        }
        if number > u64::from(MAX_FIELD_NUMBER) {
            return Err(self.err(WireErrorKind::FieldNumberTooLarge, start));
        }
        let value = match wire {
            0 => {
                let (v, q) = read_varint(self.buf, p).map_err(|e| self.err(e.kind, e.offset))?;
                self.pos = q;
                Value::Varint(v)
            }
            1 => {
                let b = self.buf.get(p..p + 8).ok_or_else(|| self.err(WireErrorKind::Truncated, p))?;
                self.pos = p + 8;
                Value::Fixed64(u64::from_le_bytes(b.try_into().expect("8 bytes")))
            }
            2 => {
                let (len, q) = read_varint(self.buf, p).map_err(|e| self.err(e.kind, e.offset))?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| q.checked_add(l))
                    .filter(|&e| e <= self.buf.len())
                    .ok_or_else(|| self.err(WireErrorKind::LengthPastEnd, p))?;
                self.pos = end;
                Value::Len(&self.buf[q..end])
            }
            3 => {
                self.pos = p;
                Value::StartGroup
            }
            4 => {
                self.pos = p;
                Value::EndGroup
            }
            5 => {
                let b = self.buf.get(p..p + 4).ok_or_else(|| self.err(WireErrorKind::Truncated, p))?;
                self.pos = p + 4;
                Value::Fixed32(u32::from_le_bytes(b.try_into().expect("4 bytes")))
            }
            t => return Err(self.err(WireErrorKind::BadWireType(t), start)),
        };
        Ok(Some(FieldRef { number: number as u32, value, start: self.base + start }))
    }

    /// After a [`Value::StartGroup`] of field `number`: skips to just after its end-group tag,
    /// and returns the group's contents (nested groups must close in order, at most `depth`
    /// deep counting this one).
    pub fn skip_group(&mut self, number: u32, depth: u32) -> Result<&'a [u8], WireError> {
        let from = self.pos;
        let mut open = vec![number];
        if depth == 0 {
            return Err(self.err(WireErrorKind::TooDeep, from));
        }
        loop {
            let before = self.pos;
            let Some(f) = self.next_field()? else { return Err(self.err(WireErrorKind::UnclosedGroup, before)) };
            match f.value {
                Value::StartGroup => {
                    if open.len() as u32 >= depth {
                        return Err(self.err(WireErrorKind::TooDeep, before));
                    }
                    open.push(f.number);
                }
                Value::EndGroup => {
                    if open.pop() != Some(f.number) {
                        return Err(self.err(WireErrorKind::UnmatchedEndGroup, before));
                    }
                    if open.is_empty() {
                        return Ok(&self.buf[from..before]);
                    }
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pieces_append_what_one_copy_appends() {
        let src: Vec<u8> = (0..3 * PIECE as u32 + 5).map(|i| (i * 7 + i / 251) as u8).collect();
        for len in [0, 1, PIECE - 1, PIECE, PIECE + 1, 2 * PIECE, 2 * PIECE + 3, src.len()] {
            for start in [0, 3] {
                let b = &src[start..start + len.min(src.len() - start)];
                let mut out = vec![9u8; 5];
                extend_in_pieces(&mut out, b);
                assert_eq!(out[..5], [9u8; 5]);
                assert_eq!(&out[5..], b, "{len} bytes from {start}");
            }
        }
    }

    /// The plain twin of [`read_varint`]: bit by bit, no fast path.
    fn varint_reference(buf: &[u8]) -> Option<(u64, usize)> {
        let mut v: u128 = 0;
        for (i, &b) in buf.iter().enumerate().take(MAX_VARINT_LEN) {
            v |= u128::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return u64::try_from(v).ok().map(|v| (v, i + 1));
            }
        }
        None
    }

    proptest! {
        #[test]
        fn varints_round_trip_and_match_prost(v in any::<u64>()) {
            let mut ours = Vec::new();
            put_varint(&mut ours, v);
            let mut theirs = Vec::new();
            prost::encoding::encode_varint(v, &mut theirs);
            prop_assert_eq!(&ours, &theirs);
            prop_assert_eq!(varint_len(v), ours.len());
            prop_assert_eq!(read_varint(&ours, 0), Ok((v, ours.len())));
        }

        #[test]
        fn read_varint_agrees_with_its_twin_on_any_bytes(buf in prop::collection::vec(any::<u8>(), 0..14)) {
            match (read_varint(&buf, 0), varint_reference(&buf)) {
                (Ok(got), Some(want)) => prop_assert_eq!(got, want),
                (Err(_), None) => {}
                (got, want) => prop_assert!(false, "{:?} vs {:?} on {:?}", got, want, buf),
            }
        }

        #[test]
        fn zigzag_round_trips(a in any::<i64>(), b in any::<i32>()) {
            prop_assert_eq!(unzigzag64(zigzag64(a)), a);
            prop_assert_eq!(unzigzag32(zigzag32(b)), b);
        }

        /// Any bytes: fields or an error, never a panic, and an error's offset within the input.
        #[test]
        fn the_reader_never_panics(buf in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&buf);
            loop {
                match r.next_field() {
                    Ok(None) => break,
                    Ok(Some(f)) => {
                        if f.value == Value::StartGroup
                            && let Err(e) = r.skip_group(f.number, 8)
                        {
                            prop_assert!(e.offset <= buf.len());
                            break;
                        }
                    }
                    Err(e) => {
                        prop_assert!(e.offset <= buf.len());
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn limits_are_errors_with_offsets() {
        let kind = |b: &[u8]| Reader::new(b).next_field().unwrap_err();
        // 11-byte varint; a 10th byte above 1.
        assert_eq!(read_varint(&[0xff; 11], 0).unwrap_err().kind, WireErrorKind::VarintTooLong);
        let mut ten = vec![0xff; 9];
        ten.push(0x02);
        assert_eq!(read_varint(&ten, 0).unwrap_err().kind, WireErrorKind::VarintTooLong);
        ten[9] = 0x01;
        assert_eq!(read_varint(&ten, 0), Ok((u64::MAX, 10)));
        assert_eq!(kind(&[0x00]), WireError { kind: WireErrorKind::FieldNumberZero, offset: 0 });
        assert_eq!(kind(&[0x0e]).kind, WireErrorKind::BadWireType(6));
        // Field 2^29: too large.
        let mut b = Vec::new();
        put_varint(&mut b, u64::from(MAX_FIELD_NUMBER + 1) << 3);
        assert_eq!(kind(&b).kind, WireErrorKind::FieldNumberTooLarge);
        // A length past the end, reported at the length's offset.
        assert_eq!(kind(&[0x0a, 0x05, 1, 2]), WireError { kind: WireErrorKind::LengthPastEnd, offset: 1 });
        assert_eq!(kind(&[0x09, 1, 2, 3]).kind, WireErrorKind::Truncated);
        assert_eq!(kind(&[0x08]).kind, WireErrorKind::Truncated);
        // Groups: matched, mismatched, unclosed, too deep.
        let mut r = Reader::new(&[0x0b, 0x10, 0x01, 0x0c, 0x18, 0x02]);
        assert_eq!(r.next_field().unwrap().unwrap().value, Value::StartGroup);
        assert_eq!(r.skip_group(1, 8), Ok(&[0x10, 0x01][..]));
        assert_eq!(r.next_field().unwrap().unwrap().value, Value::Varint(2));
        let mut r = Reader::new(&[0x0b, 0x14]);
        r.next_field().unwrap();
        assert_eq!(r.skip_group(1, 8).unwrap_err(), WireError { kind: WireErrorKind::UnmatchedEndGroup, offset: 1 });
        let mut r = Reader::new(&[0x0b, 0x10, 0x01]);
        r.next_field().unwrap();
        assert_eq!(r.skip_group(1, 8).unwrap_err().kind, WireErrorKind::UnclosedGroup);
        let mut r = Reader::new(&[0x0b, 0x13, 0x1b, 0x1c, 0x14, 0x0c]);
        r.next_field().unwrap();
        assert_eq!(r.skip_group(1, 2).unwrap_err(), WireError { kind: WireErrorKind::TooDeep, offset: 2 });
        let mut r = Reader::new(&[0x0b, 0x13, 0x1b, 0x1c, 0x14, 0x0c]);
        r.next_field().unwrap();
        assert!(r.skip_group(1, 3).is_ok());
    }
}
