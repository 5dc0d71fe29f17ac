//! The QNP header (QingNiao §4.1, Figure 11), byte by byte as in `docs/qnp.md`.
//!
//! ```text
//!  0        1        2                 6                 10                14     15     16     17     18       22
//! +--------+--------+-----------------+-----------------+-----------------+------+------+------+------+--------+
//! | app_id |req_type|     req_id      |  req_acked_id   |req_len_in_bytes | pkts | seq  | flag |segcnt|att|pad|
//! +--------+--------+-----------------+-----------------+-----------------+------+------+------+------+--------+
//! ```
//! `att` (byte 18) is the `attempt` byte: which copy of a request this is (0 the original), echoed
//! in the response; the paper's padding, which peers that do not use it send as zero and ignore.
//! Bytes 19..22 are padding.
//! Multi-byte fields are big-endian (network order). With Ethernet + IPv4 + UDP in front
//! (42 bytes) the header ends at byte 64, so the payload starts on a 64-byte boundary: one
//! 512-bit AXI-Stream segment of the paper's NIC.
//!
//! ```
//! use tern_wire::qnp::{Flags, Packet, Repr, HEADER_LEN};
//! let repr = Repr { app_id: 1, req_type: 2, req_id: 7, req_acked_id: 0, req_len_in_bytes: 3,
//!                   req_len_in_pkts: 1, pkt_seq_num_in_req: 0, flags: Flags::DATA, seg_cnt: 2 };
//! let mut bytes = vec![0u8; HEADER_LEN + 3];
//! repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
//! let parsed = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
//! assert_eq!(parsed, repr);
//! ```

use crate::{Error, Result};

pub mod field {
    pub type Field = core::ops::Range<usize>;
    pub const APP_ID: usize = 0;
    pub const REQ_TYPE: usize = 1;
    pub const REQ_ID: Field = 2..6;
    pub const REQ_ACKED_ID: Field = 6..10;
    pub const REQ_LEN_IN_BYTES: Field = 10..14;
    pub const REQ_LEN_IN_PKTS: usize = 14;
    pub const PKT_SEQ_NUM_IN_REQ: usize = 15;
    pub const PKT_FLAG: usize = 16;
    pub const SEG_CNT: usize = 17;
    pub const ATTEMPT: usize = 18;
    pub const PADDING: Field = 19..22;
    pub const PAYLOAD: usize = 22;
}

/// Length of the QNP header including its 4 bytes of padding (`PAD_SIZE` = 4; the first of them
/// is the `attempt` byte).
pub const HEADER_LEN: usize = field::PAYLOAD;
/// Width of one AXI-Stream segment of the paper's NIC, the unit of `seg_cnt`.
pub const SEGMENT_LEN: usize = 64;

/// `pkt_flag`: what a packet carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(u8);

impl Flags {
    /// Carries request or response bytes.
    pub const DATA: Flags = Flags(0x01);
    /// Acknowledges the request named by `req_acked_id` (a response sets DATA and ACK).
    pub const ACK: Flags = Flags(0x02);
    /// A response: DATA with the ACK of its request piggybacked.
    pub const RESPONSE: Flags = Flags(0x03);
    const KNOWN: u8 = 0x03;

    /// Flags from their wire byte; unknown bits are an error.
    pub fn from_bits(bits: u8) -> Result<Flags> {
        if bits & !Self::KNOWN != 0 || bits == 0 {
            return Err(Error::Malformed("pkt_flag"));
        }
        Ok(Flags(bits))
    }
    /// The wire byte.
    pub fn bits(self) -> u8 {
        self.0
    }
    /// Whether every flag of `other` is set.
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

/// A zero-copy view of a QNP header and its payload.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length; accessors may panic on short buffers.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Ensures the buffer holds a whole header; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN { Err(Error::Truncated) } else { Ok(()) }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn u32_at(&self, f: field::Field) -> u32 {
        let b = &self.buffer.as_ref()[f];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Application id.
    pub fn app_id(&self) -> u8 {
        self.buffer.as_ref()[field::APP_ID]
    }
    /// Request type, chosen by the application.
    pub fn req_type(&self) -> u8 {
        self.buffer.as_ref()[field::REQ_TYPE]
    }
    /// Request id, unique per sender.
    pub fn req_id(&self) -> u32 {
        self.u32_at(field::REQ_ID)
    }
    /// Acknowledged request id (see `docs/qnp.md` for its meaning per direction).
    pub fn req_acked_id(&self) -> u32 {
        self.u32_at(field::REQ_ACKED_ID)
    }
    /// Payload bytes of the whole request (all packets).
    pub fn req_len_in_bytes(&self) -> u32 {
        self.u32_at(field::REQ_LEN_IN_BYTES)
    }
    /// Packets in the request.
    pub fn req_len_in_pkts(&self) -> u8 {
        self.buffer.as_ref()[field::REQ_LEN_IN_PKTS]
    }
    /// This packet's sequence number within the request, from 0.
    pub fn pkt_seq_num_in_req(&self) -> u8 {
        self.buffer.as_ref()[field::PKT_SEQ_NUM_IN_REQ]
    }
    /// Raw `pkt_flag` byte.
    pub fn pkt_flag(&self) -> u8 {
        self.buffer.as_ref()[field::PKT_FLAG]
    }
    /// 64-byte segments of the frame the dispatcher must read to see every dispatch field.
    pub fn seg_cnt(&self) -> u8 {
        self.buffer.as_ref()[field::SEG_CNT]
    }
    /// Which copy of its request this packet is (0: the original), or, in a response, which copy
    /// it answers.
    pub fn attempt(&self) -> u8 {
        self.buffer.as_ref()[field::ATTEMPT]
    }
    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn set_u32(&mut self, f: field::Field, v: u32) {
        self.buffer.as_mut()[f].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the application id.
    pub fn set_app_id(&mut self, v: u8) {
        self.buffer.as_mut()[field::APP_ID] = v;
    }
    /// Sets the request type.
    pub fn set_req_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::REQ_TYPE] = v;
    }
    /// Sets the request id.
    pub fn set_req_id(&mut self, v: u32) {
        self.set_u32(field::REQ_ID, v);
    }
    /// Sets the acknowledged request id.
    pub fn set_req_acked_id(&mut self, v: u32) {
        self.set_u32(field::REQ_ACKED_ID, v);
    }
    /// Sets the request length in bytes.
    pub fn set_req_len_in_bytes(&mut self, v: u32) {
        self.set_u32(field::REQ_LEN_IN_BYTES, v);
    }
    /// Sets the request length in packets.
    pub fn set_req_len_in_pkts(&mut self, v: u8) {
        self.buffer.as_mut()[field::REQ_LEN_IN_PKTS] = v;
    }
    /// Sets the packet sequence number.
    pub fn set_pkt_seq_num_in_req(&mut self, v: u8) {
        self.buffer.as_mut()[field::PKT_SEQ_NUM_IN_REQ] = v;
    }
    /// Sets the raw flag byte.
    pub fn set_pkt_flag(&mut self, v: u8) {
        self.buffer.as_mut()[field::PKT_FLAG] = v;
    }
    /// Sets `seg_cnt`.
    pub fn set_seg_cnt(&mut self, v: u8) {
        self.buffer.as_mut()[field::SEG_CNT] = v;
    }
    /// Sets the `attempt` byte (which copy of a request this is; a response echoes it).
    pub fn set_attempt(&mut self, v: u8) {
        self.buffer.as_mut()[field::ATTEMPT] = v;
    }
    /// Zeroes the padding (not the `attempt` byte).
    pub fn clear_padding(&mut self) {
        self.buffer.as_mut()[field::PADDING].fill(0);
    }
    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
}

/// A parsed and checked QNP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Application id.
    pub app_id: u8,
    /// Request type.
    pub req_type: u8,
    /// Request id.
    pub req_id: u32,
    /// Acknowledged request id.
    pub req_acked_id: u32,
    /// Payload bytes of the whole request.
    pub req_len_in_bytes: u32,
    /// Packets in the request (at least 1 when DATA is set).
    pub req_len_in_pkts: u8,
    /// This packet's sequence number (less than `req_len_in_pkts`).
    pub pkt_seq_num_in_req: u8,
    /// DATA, ACK or both.
    pub flags: Flags,
    /// 64-byte segments holding the headers and every dispatch field (first packet), else 0.
    pub seg_cnt: u8,
}

impl Repr {
    /// Parses and checks a header. The payload length is checked against the declared request
    /// length; limits that depend on configuration (packets per request) are the transport's.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        let flags = Flags::from_bits(packet.pkt_flag())?;
        let repr = Repr {
            app_id: packet.app_id(),
            req_type: packet.req_type(),
            req_id: packet.req_id(),
            req_acked_id: packet.req_acked_id(),
            req_len_in_bytes: packet.req_len_in_bytes(),
            req_len_in_pkts: packet.req_len_in_pkts(),
            pkt_seq_num_in_req: packet.pkt_seq_num_in_req(),
            flags,
            seg_cnt: packet.seg_cnt(),
        };
        let payload_len = packet.payload().len();
        if flags.contains(Flags::DATA) {
            if repr.req_len_in_pkts == 0 {
                return Err(Error::Malformed("req_len_in_pkts is 0"));
            }
            if repr.pkt_seq_num_in_req >= repr.req_len_in_pkts {
                return Err(Error::Malformed("pkt_seq_num_in_req beyond req_len_in_pkts"));
            }
            if payload_len as u64 > u64::from(repr.req_len_in_bytes) {
                return Err(Error::Malformed("payload longer than req_len_in_bytes"));
            }
            if repr.req_len_in_pkts == 1 && payload_len as u64 != u64::from(repr.req_len_in_bytes) {
                return Err(Error::Malformed("req_len_in_bytes differs from payload length"));
            }
        } else if payload_len != 0 {
            return Err(Error::Malformed("payload on a packet without DATA"));
        }
        Ok(repr)
    }

    /// Header length in bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (`attempt` and padding zeroed) into the front of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_app_id(self.app_id);
        packet.set_req_type(self.req_type);
        packet.set_req_id(self.req_id);
        packet.set_req_acked_id(self.req_acked_id);
        packet.set_req_len_in_bytes(self.req_len_in_bytes);
        packet.set_req_len_in_pkts(self.req_len_in_pkts);
        packet.set_pkt_seq_num_in_req(self.pkt_seq_num_in_req);
        packet.set_pkt_flag(self.flags.bits());
        packet.set_seg_cnt(self.seg_cnt);
        packet.set_attempt(0);
        packet.clear_padding();
    }
}

/// `seg_cnt` for a first packet whose dispatch fields end `dispatch_end` bytes into the payload:
/// the 64-byte segments from the start of the Ethernet header (whose 64 header bytes are one
/// segment) up to and including the last dispatch byte. Saturates at 255.
pub fn seg_cnt_for(dispatch_end: usize) -> u8 {
    let segments = 1 + dispatch_end.div_ceil(SEGMENT_LEN);
    segments.min(u8::MAX as usize) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    // A response to request 0x01020304 carrying 5 payload bytes, acked in the same packet.
    static FIXTURE: [u8; 27] = [
        0x07, 0x02, // app_id, req_type
        0x01, 0x02, 0x03, 0x04, // req_id
        0x01, 0x02, 0x03, 0x04, // req_acked_id
        0x00, 0x00, 0x00, 0x05, // req_len_in_bytes
        0x01, 0x00, 0x03, 0x01, // pkts, seq, flag (DATA|ACK), seg_cnt
        0x00, 0x00, 0x00, 0x00, // padding
        b'h', b'e', b'l', b'l', b'o',
    ];

    fn fixture_repr() -> Repr {
        Repr {
            app_id: 7,
            req_type: 2,
            req_id: 0x0102_0304,
            req_acked_id: 0x0102_0304,
            req_len_in_bytes: 5,
            req_len_in_pkts: 1,
            pkt_seq_num_in_req: 0,
            flags: Flags::RESPONSE,
            seg_cnt: 1,
        }
    }

    #[test]
    fn header_is_22_bytes_and_payload_is_64_aligned() {
        assert_eq!(HEADER_LEN, 22);
        assert_eq!(crate::ETH_IPV4_UDP_LEN + HEADER_LEN, 64);
    }

    #[test]
    fn parse_fixture() {
        let packet = Packet::new_checked(&FIXTURE[..]).unwrap();
        assert_eq!(Repr::parse(&packet).unwrap(), fixture_repr());
        assert_eq!(packet.payload(), b"hello");
    }

    #[test]
    fn emit_fixture() {
        let mut bytes = [0xffu8; 27];
        fixture_repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        bytes[22..].copy_from_slice(b"hello");
        assert_eq!(bytes, FIXTURE);
    }

    #[test]
    fn rejects_bad_headers() {
        assert_eq!(Packet::new_checked(&FIXTURE[..21]).unwrap_err(), Error::Truncated);
        let mut b = FIXTURE;
        b[16] = 0x80;
        assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_err());
        let mut b = FIXTURE;
        b[16] = 0;
        assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_err());
        let mut b = FIXTURE;
        b[14] = 0; // zero packets
        assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_err());
        let mut b = FIXTURE;
        b[15] = 1; // seq == pkts
        assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_err());
        let mut b = FIXTURE;
        b[13] = 4; // declared 4 bytes, carries 5
        assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_err());
        let mut b = FIXTURE;
        b[13] = 6; // single packet must carry exactly the declared bytes
        assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_err());
        let mut b = FIXTURE;
        b[16] = 0x02; // pure ACK with payload
        assert!(Repr::parse(&Packet::new_unchecked(&b[..])).is_err());
        assert!(Repr::parse(&Packet::new_unchecked(&b[..22])).is_ok());
    }

    #[test]
    fn seg_cnt_counts_frame_segments() {
        assert_eq!(seg_cnt_for(0), 1);
        assert_eq!(seg_cnt_for(1), 2);
        assert_eq!(seg_cnt_for(64), 2);
        assert_eq!(seg_cnt_for(65), 3);
        assert_eq!(seg_cnt_for(1 << 20), 255);
    }
}
