//! CLIP's request/response header (seed 004, §III-C), byte by byte as in `docs/clip.md`.
//!
//! A switch sends a packet that needs a remote handler to a server with this header put
//! between the Ethernet addresses and the rest of the frame: the frame's EtherType (bytes 12–13)
//! moves into `load_type` and is replaced by CLIP's EtherType (0x88B5 by default, IEEE's local
//! experimental one); the server answers with the same frame, the header's `kind` turned into a
//! response and its parameters rewritten in place (request and response are the same length, so
//! no copy); the switch strips the header, which restores the original frame byte for byte.
//!
//! ```text
//!  0       1       2       3       4               6               8               10              12                              16
//! +-------+-------+-------+-------+---------------+---------------+---------------+---------------+-------------------------------+----------------+
//! |version| kind  | flags |param_ | load_type     | parsed_len    | program       | group_version | request_id                    | params ...     |
//! |  (1)  |       |       |  len  |               |               |               |               |                               | (param_len B)  |
//! +-------+-------+-------+-------+---------------+---------------+---------------+---------------+-------------------------------+----------------+
//! ```
//! Multi-byte fields are big-endian. The header is [`FIXED_LEN`] bytes plus `param_len` bytes of
//! the program's parameters; after it comes the original frame from its byte 14 on (its L2
//! payload, or a VLAN tag's TCI when `load_type` is 0x8100).
//!
//! ```
//! use tern_wire::clip::{Kind, Repr, encapsulate, strip, DEFAULT_ETHERTYPE};
//! let original: Vec<u8> = [[2u8; 6], [4u8; 6]].concat().into_iter().chain([0x08, 0x00, 0x45, 0, 0, 20]).collect();
//! let mut frame = original.clone();
//! let repr = Repr { kind: Kind::Request, flags: 0, load_type: 0, parsed_len: 4, program: 1,
//!                   group_version: 3, request_id: 9, param_len: 8 };
//! encapsulate(&mut frame, &repr, DEFAULT_ETHERTYPE).unwrap();
//! assert_eq!(frame.len(), original.len() + 16 + 8);
//! let (back, _) = strip(&mut frame, DEFAULT_ETHERTYPE).unwrap();
//! assert_eq!(back.load_type, 0x0800);
//! assert_eq!(frame, original);
//! ```

use crate::{Error, Result};

pub mod field {
    pub type Field = core::ops::Range<usize>;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: usize = 2;
    pub const PARAM_LEN: usize = 3;
    pub const LOAD_TYPE: Field = 4..6;
    pub const PARSED_LEN: Field = 6..8;
    pub const PROGRAM: Field = 8..10;
    pub const GROUP_VERSION: Field = 10..12;
    pub const REQUEST_ID: Field = 12..16;
    pub const PARAMS: usize = 16;
}

/// The header's fixed part, bytes (the parameters follow).
pub const FIXED_LEN: usize = field::PARAMS;
/// The version this code speaks.
pub const VERSION: u8 = 1;
/// CLIP's EtherType unless configured otherwise: IEEE 802's local experimental EtherType 1.
pub const DEFAULT_ETHERTYPE: u16 = 0x88B5;
/// Where the EtherType sits in an Ethernet frame, and the bytes before it (the addresses).
pub const ETHERTYPE_AT: usize = 12;
/// The Ethernet header: addresses and EtherType.
pub const ETH_LEN: usize = 14;

/// Flag: the server is near its queue limit (back-pressure): give it no new flows.
pub const FLAG_BUSY: u8 = 0x01;
const KNOWN_FLAGS: u8 = FLAG_BUSY;

/// What a CLIP packet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// From the switch to a server: run the remote handler.
    Request = 1,
    /// From a server back to the switch: the handler's answer.
    Response = 2,
}

impl Kind {
    /// The kind from its wire byte.
    pub fn from_byte(b: u8) -> Result<Kind> {
        match b {
            1 => Ok(Kind::Request),
            2 => Ok(Kind::Response),
            _ => Err(Error::Malformed("kind")),
        }
    }
}

/// A zero-copy view of a CLIP header and what follows it, starting at the header's first byte
/// (the frame's byte 14).
#[derive(Debug, Clone)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking it; accessors may panic on short buffers.
    pub const fn new_unchecked(buffer: T) -> Header<T> {
        Header { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Header<T>> {
        let h = Self::new_unchecked(buffer);
        h.check_len()?;
        Ok(h)
    }

    /// Ensures the buffer holds the fixed part and the parameters `param_len` says, and that
    /// `parsed_len` stays within what follows; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_LEN || b.len() < FIXED_LEN + usize::from(b[field::PARAM_LEN]) {
            return Err(Error::Truncated);
        }
        if usize::from(self.parsed_len()) > self.payload().len() {
            return Err(Error::Malformed("parsed_len"));
        }
        Ok(())
    }

    fn u16_at(&self, f: field::Field) -> u16 {
        let b = &self.buffer.as_ref()[f];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    /// The kind's wire byte.
    pub fn kind_byte(&self) -> u8 {
        self.buffer.as_ref()[field::KIND]
    }
    /// The flags.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Bytes of parameters after the fixed part.
    pub fn param_len(&self) -> u8 {
        self.buffer.as_ref()[field::PARAM_LEN]
    }
    /// The original frame's EtherType.
    pub fn load_type(&self) -> u16 {
        self.u16_at(field::LOAD_TYPE)
    }
    /// Bytes of the original frame after its EtherType that the switch has parsed: the server
    /// parses from there.
    pub fn parsed_len(&self) -> u16 {
        self.u16_at(field::PARSED_LEN)
    }
    /// The switch program whose handler runs.
    pub fn program(&self) -> u16 {
        self.u16_at(field::PROGRAM)
    }
    /// The server group's version the switch chose the server from.
    pub fn group_version(&self) -> u16 {
        self.u16_at(field::GROUP_VERSION)
    }
    /// The request's id (echoed in its response).
    pub fn request_id(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::REQUEST_ID];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    /// The header's length: the fixed part and the parameters.
    pub fn header_len(&self) -> usize {
        FIXED_LEN + usize::from(self.param_len())
    }
    /// The program's parameters.
    pub fn params(&self) -> &[u8] {
        &self.buffer.as_ref()[FIXED_LEN..self.header_len()]
    }
    /// The original frame from its byte 14 on.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn set_u16(&mut self, f: field::Field, v: u16) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the kind.
    pub fn set_kind(&mut self, k: Kind) {
        self.buffer.as_mut()[field::KIND] = k as u8;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[field::FLAGS] = f;
    }
    /// Sets the group version.
    pub fn set_group_version(&mut self, v: u16) {
        self.set_u16(field::GROUP_VERSION, v);
    }
    /// The parameters, to rewrite in place (a server writes its response here).
    pub fn params_mut(&mut self) -> &mut [u8] {
        let end = self.header_len();
        &mut self.buffer.as_mut()[FIXED_LEN..end]
    }
}

/// A parsed, checked CLIP header (its parameters stay in the buffer: [`Header::params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub kind: Kind,
    pub flags: u8,
    pub load_type: u16,
    pub parsed_len: u16,
    pub program: u16,
    pub group_version: u16,
    pub request_id: u32,
    pub param_len: u8,
}

impl Repr {
    /// Parses and checks a header: the version this code speaks, a known kind, no unknown
    /// flags, a `load_type` that is an EtherType (0x0600 or more) and not CLIP's own (`ethertype`:
    /// no header inside a header), and lengths within the buffer. Each error names its field.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>, ethertype: u16) -> Result<Repr> {
        h.check_len()?;
        if h.version() != VERSION {
            return Err(Error::Malformed("version"));
        }
        let kind = Kind::from_byte(h.kind_byte())?;
        if h.flags() & !KNOWN_FLAGS != 0 {
            return Err(Error::Malformed("flags"));
        }
        let load_type = h.load_type();
        if load_type < 0x0600 || load_type == ethertype {
            return Err(Error::Malformed("load_type"));
        }
        Ok(Repr {
            kind,
            flags: h.flags(),
            load_type,
            parsed_len: h.parsed_len(),
            program: h.program(),
            group_version: h.group_version(),
            request_id: h.request_id(),
            param_len: h.param_len(),
        })
    }

    /// The header's length: the fixed part and the parameters.
    pub fn header_len(&self) -> usize {
        FIXED_LEN + usize::from(self.param_len)
    }

    /// Writes the fixed part into `h` (the parameters are left as they are).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, h: &mut Header<T>) {
        let b = h.buffer.as_mut();
        b[field::VERSION] = VERSION;
        b[field::KIND] = self.kind as u8;
        b[field::FLAGS] = self.flags;
        b[field::PARAM_LEN] = self.param_len;
        b[field::LOAD_TYPE].copy_from_slice(&self.load_type.to_be_bytes());
        b[field::PARSED_LEN].copy_from_slice(&self.parsed_len.to_be_bytes());
        b[field::PROGRAM].copy_from_slice(&self.program.to_be_bytes());
        b[field::GROUP_VERSION].copy_from_slice(&self.group_version.to_be_bytes());
        b[field::REQUEST_ID].copy_from_slice(&self.request_id.to_be_bytes());
    }
}

/// Puts a header into an Ethernet `frame`: its EtherType goes into `load_type` (the one in
/// `repr` is ignored), `ethertype` takes its place, and the header (parameters zeroed) goes
/// after it. Refuses a frame shorter than an Ethernet header, one that already carries
/// `ethertype`, and a `parsed_len` beyond what follows.
pub fn encapsulate(frame: &mut Vec<u8>, repr: &Repr, ethertype: u16) -> Result<()> {
    if frame.len() < ETH_LEN {
        return Err(Error::Truncated);
    }
    let load_type = u16::from_be_bytes([frame[ETHERTYPE_AT], frame[ETHERTYPE_AT + 1]]);
    if load_type == ethertype {
        return Err(Error::Malformed("load_type"));
    }
    if usize::from(repr.parsed_len) > frame.len() - ETH_LEN {
        return Err(Error::Malformed("parsed_len"));
    }
    let hl = repr.header_len();
    frame.splice(ETH_LEN..ETH_LEN, std::iter::repeat_n(0u8, hl));
    frame[ETHERTYPE_AT..ETH_LEN].copy_from_slice(&ethertype.to_be_bytes());
    let mut r = *repr;
    r.load_type = load_type;
    r.emit(&mut Header::new_unchecked(&mut frame[ETH_LEN..]));
    Ok(())
}

/// Takes the header out of a `frame` carrying `ethertype`, restoring the original frame; returns
/// the header and its parameters. Nothing changes on an error.
pub fn strip(frame: &mut Vec<u8>, ethertype: u16) -> Result<(Repr, Vec<u8>)> {
    let (repr, params) = peek(frame, ethertype)?;
    let params = params.to_vec();
    frame.drain(ETH_LEN..ETH_LEN + repr.header_len());
    frame[ETHERTYPE_AT..ETH_LEN].copy_from_slice(&repr.load_type.to_be_bytes());
    Ok((repr, params))
}

/// The header of a `frame` carrying `ethertype`, checked, and its parameters, without changing
/// the frame.
pub fn peek(frame: &[u8], ethertype: u16) -> Result<(Repr, &[u8])> {
    if frame.len() < ETH_LEN {
        return Err(Error::Truncated);
    }
    if u16::from_be_bytes([frame[ETHERTYPE_AT], frame[ETHERTYPE_AT + 1]]) != ethertype {
        return Err(Error::Malformed("ethertype"));
    }
    let h = Header::new_checked(&frame[ETH_LEN..])?;
    let repr = Repr::parse(&h, ethertype)?;
    let hl = repr.header_len();
    Ok((repr, &frame[ETH_LEN + FIXED_LEN..ETH_LEN + hl]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A golden request: the frame of a UDP/IPv4 packet (EtherType 0x0800) with an 8-byte
    /// parameter block, byte by byte as `docs/clip.md` draws it.
    #[test]
    fn golden_request() {
        let mut frame: Vec<u8> = [[0xaa; 6], [0xbb; 6]].concat();
        frame.extend_from_slice(&[0x08, 0x00]);
        let l2: Vec<u8> = (0u8..28).collect();
        frame.extend_from_slice(&l2);
        let repr = Repr {
            kind: Kind::Request,
            flags: 0,
            load_type: 0,
            parsed_len: 20,
            program: 0x0102,
            group_version: 0x0304,
            request_id: 0x0506_0708,
            param_len: 8,
        };
        encapsulate(&mut frame, &repr, DEFAULT_ETHERTYPE).unwrap();
        let want: Vec<u8> = [
            &[0xaa; 6][..],
            &[0xbb; 6],
            &[0x88, 0xb5],
            // version, kind, flags, param_len
            &[1, 1, 0, 8],
            // load_type, parsed_len, program, group_version
            &[0x08, 0x00, 0x00, 20, 0x01, 0x02, 0x03, 0x04],
            // request_id
            &[0x05, 0x06, 0x07, 0x08],
            // params, zeroed
            &[0; 8],
            &l2,
        ]
        .concat();
        assert_eq!(frame, want);
        // The server writes its answer in place and turns it into a response.
        {
            let mut h = Header::new_checked(&mut frame[ETH_LEN..]).unwrap();
            h.params_mut().copy_from_slice(b"answered");
            h.set_kind(Kind::Response);
        }
        let (r, params) = peek(&frame, DEFAULT_ETHERTYPE).unwrap();
        assert_eq!(r.kind, Kind::Response);
        assert_eq!(params, b"answered");
        let (r, params) = strip(&mut frame, DEFAULT_ETHERTYPE).unwrap();
        assert_eq!((r.load_type, r.request_id, params.as_slice()), (0x0800, 0x0506_0708, &b"answered"[..]));
        assert_eq!(&frame[12..14], &[0x08, 0x00]);
        assert_eq!(&frame[14..], &l2[..]);
    }

    /// Each malformed field is refused by name, and nothing changes on a refusal.
    #[test]
    fn malformed_headers_are_named() {
        let mut frame: Vec<u8> = [[1u8; 12].as_slice(), &[0x86, 0xdd], &[0u8; 40]].concat();
        let repr = Repr {
            kind: Kind::Request,
            flags: 0,
            load_type: 0,
            parsed_len: 40,
            program: 1,
            group_version: 0,
            request_id: 1,
            param_len: 4,
        };
        encapsulate(&mut frame, &repr, DEFAULT_ETHERTYPE).unwrap();
        let good = frame.clone();
        // The good frame with `v` written at header byte `at`.
        let bad = |at: usize, v: &[u8]| {
            let mut f = good.clone();
            f[ETH_LEN + at..ETH_LEN + at + v.len()].copy_from_slice(v);
            f
        };
        let cases: [(Vec<u8>, Error); 7] = [
            (bad(field::VERSION, &[2]), Error::Malformed("version")),
            (bad(field::KIND, &[3]), Error::Malformed("kind")),
            (bad(field::FLAGS, &[0x80]), Error::Malformed("flags")),
            // load_type 0x0005: an 802.3 length, not an EtherType; 0x88b5: CLIP inside CLIP.
            (bad(field::LOAD_TYPE.start, &[0x00, 0x05]), Error::Malformed("load_type")),
            (bad(field::LOAD_TYPE.start, &[0x88, 0xb5]), Error::Malformed("load_type")),
            // parsed_len past the frame: 41 of 40 bytes.
            (bad(field::PARSED_LEN.start, &[0, 41]), Error::Malformed("parsed_len")),
            // param_len past the frame.
            (bad(field::PARAM_LEN, &[250]), Error::Truncated),
        ];
        for (mut f, want) in cases {
            let before = f.clone();
            assert_eq!(strip(&mut f, DEFAULT_ETHERTYPE).unwrap_err(), want);
            assert_eq!(f, before);
        }
        // Not CLIP's EtherType; too short; already carrying a header.
        assert_eq!(peek(&good, 0x88b6).unwrap_err(), Error::Malformed("ethertype"));
        assert_eq!(peek(&good[..20], DEFAULT_ETHERTYPE).unwrap_err(), Error::Truncated);
        let mut twice = good.clone();
        assert_eq!(encapsulate(&mut twice, &repr, DEFAULT_ETHERTYPE).unwrap_err(), Error::Malformed("load_type"));
        assert_eq!(twice, good);
        let mut short = vec![0u8; 13];
        assert_eq!(encapsulate(&mut short, &repr, DEFAULT_ETHERTYPE).unwrap_err(), Error::Truncated);
    }

    proptest! {
        /// Any Ethernet frame (any EtherType but CLIP's, VLAN-tagged or not) comes back byte
        /// for byte after a header goes in and out, whatever the parameters say.
        #[test]
        fn strip_restores_the_frame(
            frame in proptest::collection::vec(any::<u8>(), 14..300),
            ethertype in 0x0600u16..,
            param_len in any::<u8>(),
            params_seed in any::<u8>(),
            program in any::<u16>(), version in any::<u16>(), id in any::<u32>(),
            parsed_frac in 0.0f64..=1.0,
        ) {
            let load_type = u16::from_be_bytes([frame[12], frame[13]]);
            prop_assume!(load_type != ethertype && load_type >= 0x0600);
            let parsed_len = ((frame.len() - ETH_LEN) as f64 * parsed_frac) as u16;
            let repr = Repr { kind: Kind::Request, flags: 0, load_type: 0, parsed_len, program,
                              group_version: version, request_id: id, param_len };
            let mut f = frame.clone();
            encapsulate(&mut f, &repr, ethertype).unwrap();
            prop_assert_eq!(f.len(), frame.len() + FIXED_LEN + usize::from(param_len));
            {
                let mut h = Header::new_checked(&mut f[ETH_LEN..]).unwrap();
                for (i, b) in h.params_mut().iter_mut().enumerate() {
                    *b = params_seed.wrapping_add(i as u8);
                }
                h.set_kind(Kind::Response);
            }
            let (r, params) = strip(&mut f, ethertype).unwrap();
            prop_assert_eq!(r.load_type, load_type);
            prop_assert_eq!((r.program, r.group_version, r.request_id, r.parsed_len), (program, version, id, parsed_len));
            prop_assert_eq!(params.len(), usize::from(param_len));
            prop_assert_eq!(f, frame);
        }

        /// Any bytes: parsing never panics.
        #[test]
        fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = peek(&bytes, DEFAULT_ETHERTYPE);
            let mut b = bytes.clone();
            let _ = strip(&mut b, DEFAULT_ETHERTYPE);
            if let Ok(h) = Header::new_checked(&bytes[..]) {
                let _ = (h.params(), h.payload(), Repr::parse(&h, DEFAULT_ETHERTYPE));
            }
        }
    }
}
