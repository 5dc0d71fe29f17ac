//! The QingNiao on-wire payload: type-length-value records (QingNiao §3.1, Figure 6).
//!
//! A record is `type` (1 byte: the field number, 1..=255), `length` (2 bytes, big-endian) and
//! `length` value bytes. Integers are fixed-width big-endian (int32/uint32/float: 4 bytes,
//! int64/uint64/double: 8, bool: 1), strings and bytes are raw. A string or bytes field may be
//! carried in several records (when a request is segmented across packets); their values
//! concatenate in order. Every field of a message is always encoded (defaults included), with
//! the dispatch fields first. `docs/qnp.md` is the normative description.
//!
//! ```
//! use tern_wire::tlv::{Reader, Writer};
//! let mut buf = Vec::new();
//! let mut w = Writer::new(&mut buf);
//! w.put_u32(1, 42);
//! w.put_bytes(2, b"key");
//! let records: Vec<_> = Reader::new(&buf).map(|r| r.unwrap()).collect();
//! assert_eq!(records[0].field, 1);
//! assert_eq!(records[0].value, &42u32.to_be_bytes());
//! assert_eq!(records[1].value, b"key");
//! ```

/// Bytes of a record's type and length.
pub const RECORD_HEADER_LEN: usize = 3;
/// Largest value one record can carry.
pub const MAX_RECORD_VALUE: usize = u16::MAX as usize;

/// Why TLV bytes could not be decoded into a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// A record header or value runs past the end of the bytes.
    Truncated {
        /// Offset of the record in its packet payload.
        offset: usize,
    },
    /// A record has type 0, which is reserved.
    ZeroFieldNumber {
        /// Offset of the record in its packet payload.
        offset: usize,
    },
    /// A fixed-width field has a value of the wrong length.
    BadLength {
        /// Field number.
        field: u8,
        /// Bytes the field's type needs.
        expected: usize,
        /// Bytes the record carries.
        got: usize,
    },
    /// A scalar field appears twice.
    DuplicateField {
        /// Field number.
        field: u8,
    },
    /// A string field is not UTF-8.
    InvalidUtf8 {
        /// Field number.
        field: u8,
    },
    /// A boolean is neither 0 nor 1.
    InvalidBool {
        /// Field number.
        field: u8,
    },
}

impl core::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DecodeError::Truncated { offset } => write!(f, "TLV record at byte {offset} is truncated"),
            DecodeError::ZeroFieldNumber { offset } => {
                write!(f, "TLV record at byte {offset} has reserved type 0")
            }
            DecodeError::BadLength { field, expected, got } => {
                write!(f, "field {field}: expected {expected} value bytes, got {got}")
            }
            DecodeError::DuplicateField { field } => write!(f, "field {field} appears twice"),
            DecodeError::InvalidUtf8 { field } => write!(f, "field {field}: string is not UTF-8"),
            DecodeError::InvalidBool { field } => write!(f, "field {field}: bool is not 0 or 1"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// One record: a field number and a borrowed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Field number (1..=255).
    pub field: u8,
    /// Value bytes.
    pub value: &'a [u8],
    /// Offset of the record header in the input.
    pub offset: usize,
}

/// Iterates the records of one packet payload. Stops after the first error.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Reader<'a> {
    /// Reads records from `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0, failed: false }
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Record<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.bytes.len() {
            return None;
        }
        let offset = self.pos;
        let rest = &self.bytes[offset..];
        if rest.len() < RECORD_HEADER_LEN {
            self.failed = true;
            return Some(Err(DecodeError::Truncated { offset }));
        }
        let field = rest[0];
        if field == 0 {
            self.failed = true;
            return Some(Err(DecodeError::ZeroFieldNumber { offset }));
        }
        let len = u16::from_be_bytes([rest[1], rest[2]]) as usize;
        let Some(value) = rest.get(RECORD_HEADER_LEN..RECORD_HEADER_LEN + len) else {
            self.failed = true;
            return Some(Err(DecodeError::Truncated { offset }));
        };
        self.pos = offset + RECORD_HEADER_LEN + len;
        Some(Ok(Record { field, value, offset }))
    }
}

/// Appends records to a byte vector.
#[derive(Debug)]
pub struct Writer<'a> {
    buf: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// Appends to `buf`.
    pub fn new(buf: &'a mut Vec<u8>) -> Self {
        Writer { buf }
    }

    /// Appends one record. Panics if `value` exceeds [`MAX_RECORD_VALUE`]; use
    /// [`put_bytes`](Self::put_bytes) for values that may be longer.
    #[inline]
    pub fn put_record(&mut self, field: u8, value: &[u8]) {
        debug_assert!(field != 0);
        let len = u16::try_from(value.len()).expect("TLV record value over 65535 bytes");
        let [l0, l1] = len.to_be_bytes();
        self.buf.extend_from_slice(&[field, l0, l1]);
        self.buf.extend_from_slice(value);
    }

    /// Appends a string or bytes field, as several records if longer than one record holds.
    #[inline]
    pub fn put_bytes(&mut self, field: u8, value: &[u8]) {
        if value.len() <= MAX_RECORD_VALUE {
            self.put_record(field, value);
        } else {
            for chunk in value.chunks(MAX_RECORD_VALUE) {
                self.put_record(field, chunk);
            }
        }
    }
    /// Appends a u32 (also int32 as two's complement, float as IEEE bits).
    #[inline]
    pub fn put_u32(&mut self, field: u8, v: u32) {
        self.put_record(field, &v.to_be_bytes());
    }
    /// Appends a u64 (also int64, double).
    #[inline]
    pub fn put_u64(&mut self, field: u8, v: u64) {
        self.put_record(field, &v.to_be_bytes());
    }
    /// Appends a bool.
    #[inline]
    pub fn put_bool(&mut self, field: u8, v: bool) {
        self.put_record(field, &[v as u8]);
    }
}

/// Encoded length of a string or bytes field of `len` bytes.
#[inline]
pub const fn bytes_field_len(len: usize) -> usize {
    let records = if len == 0 { 1 } else { len.div_ceil(MAX_RECORD_VALUE) };
    records * RECORD_HEADER_LEN + len
}

/// Decodes a fixed-width u32 value.
#[inline]
pub fn get_u32(field: u8, value: &[u8]) -> Result<u32, DecodeError> {
    <[u8; 4]>::try_from(value).map(u32::from_be_bytes).map_err(|_| DecodeError::BadLength {
        field,
        expected: 4,
        got: value.len(),
    })
}
/// Decodes a fixed-width u64 value.
#[inline]
pub fn get_u64(field: u8, value: &[u8]) -> Result<u64, DecodeError> {
    <[u8; 8]>::try_from(value).map(u64::from_be_bytes).map_err(|_| DecodeError::BadLength {
        field,
        expected: 8,
        got: value.len(),
    })
}
/// Decodes a bool value.
#[inline]
pub fn get_bool(field: u8, value: &[u8]) -> Result<bool, DecodeError> {
    match value {
        [0] => Ok(false),
        [1] => Ok(true),
        [_] => Err(DecodeError::InvalidBool { field }),
        _ => Err(DecodeError::BadLength { field, expected: 1, got: value.len() }),
    }
}

/// A request or response type with a TLV encoding; implemented by code that `tern-idl`
/// generates (and by hand where needed).
pub trait Message: Sized {
    /// The message's name in the IDL.
    const NAME: &'static str;
    /// Field numbers that dispatch rules may read; they are encoded first.
    const DISPATCH_FIELDS: &'static [u8];

    /// Total encoded bytes.
    fn encoded_len(&self) -> usize;
    /// Encoded bytes of the dispatch fields, which [`encode`](Self::encode) writes first.
    fn dispatch_len(&self) -> usize;
    /// Appends every field, dispatch fields first.
    fn encode(&self, buf: &mut Vec<u8>);
    /// Decodes a message from the payloads of its packets, in order.
    fn decode_parts<'a, I>(parts: I) -> Result<Self, DecodeError>
    where
        I: IntoIterator<Item = &'a [u8]>;
    /// Decodes a message carried in one payload.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::decode_parts([bytes])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_fixture() {
        let mut buf = Vec::new();
        let mut w = Writer::new(&mut buf);
        w.put_u32(1, 0xdead_beef);
        w.put_bytes(3, b"ab");
        w.put_bool(4, true);
        w.put_bytes(5, b"");
        assert_eq!(buf, [1, 0, 4, 0xde, 0xad, 0xbe, 0xef, 3, 0, 2, b'a', b'b', 4, 0, 1, 1, 5, 0, 0]);
        let r: Vec<_> = Reader::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(r.len(), 4);
        assert_eq!((r[1].field, r[1].value, r[1].offset), (3, &b"ab"[..], 7));
        assert_eq!(r[3].value, b"");
    }

    #[test]
    fn reader_errors() {
        assert_eq!(Reader::new(&[1, 0]).next(), Some(Err(DecodeError::Truncated { offset: 0 })));
        assert_eq!(Reader::new(&[1, 0, 5, 1]).next(), Some(Err(DecodeError::Truncated { offset: 0 })));
        let mut r = Reader::new(&[2, 0, 0, 0, 0, 1]);
        assert!(r.next().unwrap().is_ok());
        assert_eq!(r.next(), Some(Err(DecodeError::ZeroFieldNumber { offset: 3 })));
        assert_eq!(r.next(), None);
    }

    #[test]
    fn scalar_getters_check_length() {
        assert_eq!(get_u32(1, &[0, 0, 0, 9]), Ok(9));
        assert!(get_u32(1, &[0, 0, 9]).is_err());
        assert_eq!(get_u64(2, &7u64.to_be_bytes()), Ok(7));
        assert!(get_bool(3, &[2]).is_err());
    }

    #[test]
    fn long_values_split_into_records() {
        let v = vec![7u8; MAX_RECORD_VALUE + 10];
        let mut buf = Vec::new();
        Writer::new(&mut buf).put_bytes(9, &v);
        assert_eq!(buf.len(), bytes_field_len(v.len()));
        let total: usize = Reader::new(&buf).map(|r| r.unwrap().value.len()).sum();
        assert_eq!(total, v.len());
    }

    proptest::proptest! {
        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            for r in Reader::new(&bytes) { let _ = r; }
        }
    }
}
