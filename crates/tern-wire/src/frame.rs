//! Ethernet frames as a flow pipeline sees them: one pass over the headers (Ethernet, up to two
//! VLAN tags, IPv4 or IPv6 with extension headers, TCP / UDP / ICMP) that records where each
//! header starts and the fields match tables use — AccelSDP's `Hdr_info` (§4.3.1, Figure 10) —
//! plus the Internet checksum, its incremental update (RFC 1624) and frame builders.
//!
//! [`FrameInfo::parse`] reads untrusted bytes: it returns a [`FrameError`] naming what was wrong
//! (every reason has a counter name, [`FrameError::as_str`]) and never panics.
//!
//! ```
//! use tern_wire::frame::{FrameInfo, L3, build_udp4};
//! let mut buf = Vec::new();
//! build_udp4(&mut buf, [2; 6], [4; 6], [10, 0, 0, 1], [10, 0, 0, 2], 1234, 53, 64, b"hello");
//! let f = FrameInfo::parse(&buf).unwrap();
//! assert_eq!(f.l3, L3::Ipv4);
//! assert_eq!((f.proto, f.src_port, f.dst_port, f.ttl), (17, 1234, 53, 64));
//! assert_eq!(f.src_v4(), 0x0a000001);
//! ```

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// TPID of an 802.1Q VLAN tag.
pub const TPID_8021Q: u16 = 0x8100;
/// TPID of an 802.1ad service tag.
pub const TPID_8021AD: u16 = 0x88a8;
/// Bytes of an Ethernet header without tags.
pub const ETH_LEN: usize = 14;
/// Bytes of a VLAN tag.
pub const VLAN_LEN: usize = 4;
/// VLAN tags a frame may carry.
pub const MAX_VLANS: usize = 2;
/// IPv6 extension headers followed before giving up.
const MAX_IPV6_EXT: usize = 8;

/// IP protocol numbers.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// Why a frame was refused. Each has a counter name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FrameError {
    /// Shorter than an Ethernet header.
    TruncatedEthernet,
    /// A VLAN tag runs past the end.
    TruncatedVlan,
    /// More than [`MAX_VLANS`] tags.
    TooManyVlans,
    /// Shorter than the IPv4 header or its total length.
    TruncatedIpv4,
    /// IPv4 version field is not 4.
    BadIpv4Version,
    /// IPv4 IHL below 5.
    BadIhl,
    /// IPv4 total length below the header length.
    BadIpv4Length,
    /// IPv4 header checksum wrong.
    BadIpv4Checksum,
    /// Shorter than the IPv6 header or its payload length.
    TruncatedIpv6,
    /// IPv6 version field is not 6.
    BadIpv6Version,
    /// An IPv6 extension header runs past the end, or there are too many.
    BadIpv6Extension,
    /// TCP header runs past the end, or its data offset is below 5.
    BadTcp,
    /// UDP header runs past the end, or its length field is inconsistent.
    BadUdp,
    /// ICMP header runs past the end.
    TruncatedIcmp,
}

impl FrameError {
    /// Counter name.
    pub fn as_str(self) -> &'static str {
        match self {
            FrameError::TruncatedEthernet => "truncated_ethernet",
            FrameError::TruncatedVlan => "truncated_vlan",
            FrameError::TooManyVlans => "too_many_vlans",
            FrameError::TruncatedIpv4 => "truncated_ipv4",
            FrameError::BadIpv4Version => "bad_ipv4_version",
            FrameError::BadIhl => "bad_ihl",
            FrameError::BadIpv4Length => "bad_ipv4_length",
            FrameError::BadIpv4Checksum => "bad_ipv4_checksum",
            FrameError::TruncatedIpv6 => "truncated_ipv6",
            FrameError::BadIpv6Version => "bad_ipv6_version",
            FrameError::BadIpv6Extension => "bad_ipv6_extension",
            FrameError::BadTcp => "bad_tcp",
            FrameError::BadUdp => "bad_udp",
            FrameError::TruncatedIcmp => "truncated_icmp",
        }
    }

    /// Every reason, for counter tables.
    pub const ALL: [FrameError; 14] = [
        FrameError::TruncatedEthernet,
        FrameError::TruncatedVlan,
        FrameError::TooManyVlans,
        FrameError::TruncatedIpv4,
        FrameError::BadIpv4Version,
        FrameError::BadIhl,
        FrameError::BadIpv4Length,
        FrameError::BadIpv4Checksum,
        FrameError::TruncatedIpv6,
        FrameError::BadIpv6Version,
        FrameError::BadIpv6Extension,
        FrameError::BadTcp,
        FrameError::BadUdp,
        FrameError::TruncatedIcmp,
    ];
}

impl core::fmt::Display for FrameError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for FrameError {}

/// The network layer of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum L3 {
    /// Not IP (ARP, LLDP, ...): only the Ethernet fields are set.
    #[default]
    Other,
    /// IPv4.
    Ipv4,
    /// IPv6.
    Ipv6,
}

/// What the parser extracted: header offsets and match fields (`Hdr_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameInfo {
    /// EtherType after the VLAN tags.
    pub ethertype: u16,
    /// VLAN tags present (0..=2).
    pub vlans: u8,
    /// Tag control information of the outer tag (valid when `vlans > 0`).
    pub vlan_tci: u16,
    /// Offset of the network header.
    pub l3_off: u16,
    /// Network layer.
    pub l3: L3,
    /// Offset of the transport header (valid when `has_l4`).
    pub l4_off: u16,
    /// End of the IP packet (the rest of the frame is Ethernet padding).
    pub ip_end: u16,
    /// Transport header parsed (TCP, UDP or ICMP in an unfragmented or first-fragment packet).
    pub has_l4: bool,
    /// Source address: IPv4 in the low 32 bits, or IPv6.
    pub src: u128,
    /// Destination address, as `src`.
    pub dst: u128,
    /// IP protocol / upper-layer header.
    pub proto: u8,
    /// TTL or hop limit.
    pub ttl: u8,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// Transport source port (ICMP: type), 0 when `!has_l4`.
    pub src_port: u16,
    /// Transport destination port (ICMP: code), 0 when `!has_l4`.
    pub dst_port: u16,
    /// A later fragment (no transport header).
    pub fragment: bool,
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline(always)]
fn be128(b: &[u8], at: usize) -> u128 {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    u128::from_be_bytes(a)
}

/// The common frame, read over its fixed 42-byte header: untagged Ethernet, IPv4 without
/// options and with a valid header checksum, not a later fragment, carrying TCP or UDP with
/// consistent lengths. Only the fields a fast path needs are kept; [`info`](Self::info) gives
/// the full description, the one [`FrameInfo::parse_general_into`] gives for the same frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Common4 {
    /// The source and destination addresses, as the frame holds them (IPv4 header bytes
    /// 12..20): see [`src`](Self::src) and [`dst`](Self::dst).
    pub addrs: [u8; 8],
    /// IP protocol (TCP or UDP).
    pub proto: u8,
    /// TTL.
    pub ttl: u8,
    /// DSCP (6 bits).
    pub dscp: u8,
    /// Transport source port.
    pub src_port: u16,
    /// Transport destination port.
    pub dst_port: u16,
    /// End of the IP packet in the frame.
    pub ip_end: u16,
}

impl Common4 {
    /// Source address.
    #[inline(always)]
    pub fn src(&self) -> u32 {
        let a = &self.addrs;
        u32::from_be_bytes([a[0], a[1], a[2], a[3]])
    }

    /// Destination address.
    #[inline(always)]
    pub fn dst(&self) -> u32 {
        let a = &self.addrs;
        u32::from_be_bytes([a[4], a[5], a[6], a[7]])
    }

    /// Offset of the IPv4 header.
    pub const L3_OFF: usize = ETH_LEN;
    /// Offset of the transport header.
    pub const L4_OFF: usize = ETH_LEN + 20;

    /// The common frame's fields, or `None` for a frame outside the common case (which may
    /// still be valid: see [`FrameInfo::parse`]).
    #[inline(always)]
    pub fn parse(frame: &[u8]) -> Option<Common4> {
        let h = frame.first_chunk::<42>()?;
        // The header in three big-endian words: EtherType, version and IHL, TOS; total length,
        // identification, flags and fragment offset, TTL, protocol; the ports and the next
        // four transport bytes (UDP: length, checksum).
        let w12 = u32::from_be_bytes([h[12], h[13], h[14], h[15]]);
        let w16 = u64::from_be_bytes([h[16], h[17], h[18], h[19], h[20], h[21], h[22], h[23]]);
        let w34 = u64::from_be_bytes([h[34], h[35], h[36], h[37], h[38], h[39], h[40], h[41]]);
        let total = usize::from((w16 >> 48) as u16);
        // IPv4 without options, untagged; a total length at least the header's and within the
        // frame (else the general parser's error); not a later fragment.
        if (w12 >> 8 != 0x08_00_45) | (total < 20) | (frame.len() < ETH_LEN + total) | ((w16 >> 16) & 0x1fff != 0) {
            return None;
        }
        let ip = h[14..34].first_chunk::<20>()?;
        if !header_sum_ok(ip) {
            return None;
        }
        let proto = w16 as u8;
        let l4_ok = match proto {
            proto::UDP => {
                let len = usize::from((w34 >> 16) as u16);
                (total >= 28) & (len >= 8) & (20 + len <= total)
            }
            proto::TCP => {
                total >= 40 && frame.get(46).is_some_and(|o| (o >> 4 >= 5) & (total >= 20 + usize::from(o >> 4) * 4))
            }
            _ => false,
        };
        if !l4_ok {
            return None;
        }
        Some(Common4 {
            addrs: *h[26..34].first_chunk::<8>()?,
            proto,
            ttl: (w16 >> 8) as u8,
            dscp: (w12 as u8) >> 2,
            src_port: (w34 >> 48) as u16,
            dst_port: (w34 >> 32) as u16,
            ip_end: (ETH_LEN + total) as u16,
        })
    }

    /// The frame's full description.
    #[inline]
    pub fn info(&self) -> FrameInfo {
        FrameInfo {
            ethertype: ETHERTYPE_IPV4,
            vlans: 0,
            vlan_tci: 0,
            l3_off: Self::L3_OFF as u16,
            l3: L3::Ipv4,
            l4_off: Self::L4_OFF as u16,
            ip_end: self.ip_end,
            has_l4: true,
            src: u128::from(self.src()),
            dst: u128::from(self.dst()),
            proto: self.proto,
            ttl: self.ttl,
            dscp: self.dscp,
            src_port: self.src_port,
            dst_port: self.dst_port,
            fragment: false,
        }
    }
}

impl FrameInfo {
    /// Parses a frame's headers. IPv4 header checksums are verified.
    #[inline]
    pub fn parse(frame: &[u8]) -> Result<FrameInfo, FrameError> {
        let mut info = FrameInfo::default();
        info.parse_into(frame).map(|()| info)
    }

    /// [`parse`](Self::parse) into an existing value (a batch's slot, without moving it): on
    /// success `self` describes `frame`; on error its contents are unspecified.
    ///
    /// The common case (an untagged Ethernet frame carrying IPv4 without options and a TCP or
    /// UDP segment, valid and unfragmented) takes a short path over a fixed-size header; every
    /// other frame, valid or not, goes to [`parse_general_into`](Self::parse_general_into). The
    /// two give the same result for every frame (a property test and the fuzz target check it).
    #[inline(always)]
    pub fn parse_into(&mut self, frame: &[u8]) -> Result<(), FrameError> {
        match Common4::parse(frame) {
            Some(c) => {
                *self = c.info();
                Ok(())
            }
            None => self.parse_general_into(frame),
        }
    }

    /// The general parser, every frame: the reference twin of [`parse_into`](Self::parse_into)'s
    /// common-case path. Same contract as `parse_into`.
    pub fn parse_general_into(&mut self, frame: &[u8]) -> Result<(), FrameError> {
        *self = FrameInfo::default();
        if frame.len() < ETH_LEN {
            return Err(FrameError::TruncatedEthernet);
        }
        let info = self;
        let mut off = 12;
        let mut ethertype = be16(frame, off);
        while ethertype == TPID_8021Q || ethertype == TPID_8021AD {
            if usize::from(info.vlans) == MAX_VLANS {
                return Err(FrameError::TooManyVlans);
            }
            if frame.len() < off + VLAN_LEN + 2 {
                return Err(FrameError::TruncatedVlan);
            }
            if info.vlans == 0 {
                info.vlan_tci = be16(frame, off + 2);
            }
            info.vlans += 1;
            off += VLAN_LEN;
            ethertype = be16(frame, off);
        }
        info.ethertype = ethertype;
        let l3 = off + 2;
        info.l3_off = l3 as u16;
        match ethertype {
            ETHERTYPE_IPV4 => info.parse_ipv4(frame, l3)?,
            ETHERTYPE_IPV6 => info.parse_ipv6(frame, l3)?,
            _ => info.ip_end = frame.len() as u16,
        }
        Ok(())
    }

    fn parse_ipv4(&mut self, frame: &[u8], l3: usize) -> Result<(), FrameError> {
        if frame.len() < l3 + 20 {
            return Err(FrameError::TruncatedIpv4);
        }
        let vihl = frame[l3];
        if vihl >> 4 != 4 {
            return Err(FrameError::BadIpv4Version);
        }
        let hlen = usize::from(vihl & 0xf) * 4;
        if hlen < 20 {
            return Err(FrameError::BadIhl);
        }
        let total = usize::from(be16(frame, l3 + 2));
        if total < hlen {
            return Err(FrameError::BadIpv4Length);
        }
        if frame.len() < l3 + total {
            return Err(FrameError::TruncatedIpv4);
        }
        if checksum(&frame[l3..l3 + hlen]) != 0 {
            return Err(FrameError::BadIpv4Checksum);
        }
        self.l3 = L3::Ipv4;
        self.dscp = frame[l3 + 1] >> 2;
        self.ttl = frame[l3 + 8];
        self.proto = frame[l3 + 9];
        self.src = u128::from(be32(frame, l3 + 12));
        self.dst = u128::from(be32(frame, l3 + 16));
        self.ip_end = (l3 + total) as u16;
        let frag = be16(frame, l3 + 6);
        self.fragment = frag & 0x1fff != 0;
        if !self.fragment {
            self.parse_l4(frame, l3 + hlen, l3 + total)?;
        }
        Ok(())
    }

    fn parse_ipv6(&mut self, frame: &[u8], l3: usize) -> Result<(), FrameError> {
        if frame.len() < l3 + 40 {
            return Err(FrameError::TruncatedIpv6);
        }
        if frame[l3] >> 4 != 6 {
            return Err(FrameError::BadIpv6Version);
        }
        let end = l3 + 40 + usize::from(be16(frame, l3 + 4));
        if frame.len() < end {
            return Err(FrameError::TruncatedIpv6);
        }
        self.l3 = L3::Ipv6;
        self.dscp = ((be16(frame, l3) >> 6) & 0x3f) as u8;
        self.ttl = frame[l3 + 7];
        self.src = be128(frame, l3 + 8);
        self.dst = be128(frame, l3 + 24);
        self.ip_end = end as u16;
        let mut next = frame[l3 + 6];
        let mut off = l3 + 40;
        for _ in 0..=MAX_IPV6_EXT {
            match next {
                // Hop-by-hop, routing, destination options: (next, len in 8-byte units - 1).
                0 | 43 | 60 => {
                    if end < off + 8 {
                        return Err(FrameError::BadIpv6Extension);
                    }
                    next = frame[off];
                    off += (usize::from(frame[off + 1]) + 1) * 8;
                }
                // Fragment header: 8 bytes; a later fragment has no transport header.
                44 => {
                    if end < off + 8 {
                        return Err(FrameError::BadIpv6Extension);
                    }
                    next = frame[off];
                    self.fragment = be16(frame, off + 2) & 0xfff8 != 0;
                    off += 8;
                }
                _ => {
                    if off > end {
                        return Err(FrameError::BadIpv6Extension);
                    }
                    self.proto = next;
                    if !self.fragment {
                        self.parse_l4(frame, off, end)?;
                    }
                    return Ok(());
                }
            }
        }
        Err(FrameError::BadIpv6Extension)
    }

    fn parse_l4(&mut self, frame: &[u8], l4: usize, end: usize) -> Result<(), FrameError> {
        match self.proto {
            proto::TCP => {
                if end < l4 + 20 || frame[l4 + 12] >> 4 < 5 || end < l4 + usize::from(frame[l4 + 12] >> 4) * 4 {
                    return Err(FrameError::BadTcp);
                }
            }
            proto::UDP => {
                if end < l4 + 8 {
                    return Err(FrameError::BadUdp);
                }
                let len = usize::from(be16(frame, l4 + 4));
                if len < 8 || l4 + len > end {
                    return Err(FrameError::BadUdp);
                }
            }
            proto::ICMP | proto::ICMPV6 => {
                if end < l4 + 4 {
                    return Err(FrameError::TruncatedIcmp);
                }
                self.src_port = u16::from(frame[l4]);
                self.dst_port = u16::from(frame[l4 + 1]);
                self.l4_off = l4 as u16;
                self.has_l4 = true;
                return Ok(());
            }
            _ => return Ok(()),
        }
        self.src_port = be16(frame, l4);
        self.dst_port = be16(frame, l4 + 2);
        self.l4_off = l4 as u16;
        self.has_l4 = true;
        Ok(())
    }

    /// IPv4 source address (valid for [`L3::Ipv4`]).
    #[inline]
    pub fn src_v4(&self) -> u32 {
        self.src as u32
    }

    /// IPv4 destination address (valid for [`L3::Ipv4`]).
    #[inline]
    pub fn dst_v4(&self) -> u32 {
        self.dst as u32
    }

    /// Offset of the transport checksum field, where the frame has one that must be kept
    /// correct (TCP, UDP with a non-zero checksum over IPv4, UDP over IPv6, ICMPv6).
    pub fn l4_checksum_off(&self, frame: &[u8]) -> Option<usize> {
        if !self.has_l4 {
            return None;
        }
        let l4 = usize::from(self.l4_off);
        let at = match self.proto {
            proto::TCP => l4 + 16,
            proto::UDP => l4 + 6,
            proto::ICMPV6 => l4 + 2,
            _ => return None,
        };
        if self.proto == proto::UDP && self.l3 == L3::Ipv4 && frame.get(at..at + 2) == Some(&[0, 0]) {
            return None;
        }
        (at + 2 <= frame.len()).then_some(at)
    }
}

/// Ones'-complement sum of `data` as 16-bit big-endian words (an odd last byte is padded),
/// folded to 16 bits, not complemented.
#[inline]
pub fn ones_sum(data: &[u8], acc: u32) -> u32 {
    // 32-bit words into a 64-bit sum: a word hi:lo is congruent to hi + lo modulo 0xffff, so
    // folding at the end gives the 16-bit sum (RFC 1071's wider-accumulator method).
    let mut sum = u64::from(acc);
    let mut quads = data.chunks_exact(4);
    for c in &mut quads {
        sum += u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]]));
    }
    let mut words = quads.remainder().chunks_exact(2);
    for c in &mut words {
        sum += u64::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [b] = words.remainder() {
        sum += u64::from(*b) << 8;
    }
    // Fold without a loop: 64 bits to at most 33, to 32 (with the carry), then 16-bit halves
    // three times, each step keeping the value modulo 0xffff and a positive value positive, so
    // the result is the end-around-carry sum in 0..=0xffff.
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    sum as u32
}

/// [`ones_sum`]'s reference twin: one 16-bit word at a time.
pub fn ones_sum_reference(data: &[u8], acc: u32) -> u32 {
    let fold = |mut s: u64| {
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        s
    };
    let mut sum = fold(u64::from(acc));
    for (i, b) in data.iter().enumerate() {
        sum = fold(sum + if i % 2 == 0 { u64::from(*b) << 8 } else { u64::from(*b) });
    }
    sum as u32
}

/// Whether a 20-byte IPv4 header (without options) carries a correct checksum: what
/// `checksum(ip) == 0` says, in fewer steps. The header's five 32-bit words are summed as the
/// processor loads them (the ones'-complement sum does not depend on byte order: RFC 1071,
/// 2.B), and since 2^16 is 1 modulo 0xffff, the folded 16-bit sum is 0xffff (the checksum 0)
/// exactly when that sum is a non-zero multiple of 0xffff.
#[inline(always)]
pub fn header_sum_ok(ip: &[u8; 20]) -> bool {
    let w = |at: usize| u64::from(u32::from_ne_bytes([ip[at], ip[at + 1], ip[at + 2], ip[at + 3]]));
    let sum = w(0) + w(4) + w(8) + w(12) + w(16);
    sum != 0 && sum % 0xffff == 0
}

/// The Internet checksum of `data`: 0 when `data` already holds a correct checksum field.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !(ones_sum(data, 0) as u16)
}

/// Updates checksum `sum` for a 16-bit word changing from `old` to `new` (RFC 1624, eqn. 3).
#[inline]
pub fn checksum_adjust(sum: u16, old: u16, new: u16) -> u16 {
    let mut acc = u32::from(!sum) + u32::from(!old) + u32::from(new);
    acc = (acc & 0xffff) + (acc >> 16);
    acc = (acc & 0xffff) + (acc >> 16);
    !(acc as u16)
}

/// The IPv4 header checksum field (its two bytes, as in the frame) after the TTL drops by
/// one: [`checksum_adjust`] for the word holding the TTL (TTL, protocol), which drops by 0x0100
/// whatever it was, so the adjustment needs only the field. Computed in the processor's byte
/// order (the ones'-complement sum does not depend on it: RFC 1071, 2.B), so the field is
/// neither swapped in nor out.
#[inline(always)]
pub fn checksum_field_ttl_dec(field: [u8; 2]) -> [u8; 2] {
    // ~old + new is 0xfeff for every such word; one fold suffices (at most 0xffff + 0xfeff).
    const NOT_OLD_PLUS_NEW: u32 = u16::from_ne_bytes([0xfe, 0xff]) as u32;
    let acc = u32::from(!u16::from_ne_bytes(field)) + NOT_OLD_PLUS_NEW;
    let acc = (acc & 0xffff) + (acc >> 16);
    (!(acc as u16)).to_ne_bytes()
}

/// Updates the checksum stored at `at` in `frame` for `old` bytes becoming `new` (same even
/// length, word-aligned relative to the checksummed data).
pub fn checksum_adjust_bytes(frame: &mut [u8], at: usize, old: &[u8], new: &[u8]) {
    let mut sum = be16(frame, at);
    for (o, n) in old.chunks_exact(2).zip(new.chunks_exact(2)) {
        sum = checksum_adjust(sum, u16::from_be_bytes([o[0], o[1]]), u16::from_be_bytes([n[0], n[1]]));
    }
    frame[at..at + 2].copy_from_slice(&sum.to_be_bytes());
}

/// Writes `new` (at most 4 bytes, an even number) over the bytes at `at`, adjusting each
/// checksum field in `sums` for the change (RFC 1624); `(offset, udp)`: a UDP checksum of 0
/// (none computed) stays 0 and one that comes out 0 is written 0xffff.
pub fn rewrite_field(b: &mut [u8], at: usize, new: &[u8], sums: &[(usize, bool)]) {
    let mut old = [0u8; 4];
    old[..new.len()].copy_from_slice(&b[at..at + new.len()]);
    for &(c, udp) in sums {
        if udp && b[c..c + 2] == [0, 0] {
            continue;
        }
        checksum_adjust_bytes(b, c, &old[..new.len()], new);
        if udp && b[c..c + 2] == [0, 0] {
            b[c..c + 2].copy_from_slice(&[0xff, 0xff]);
        }
    }
    b[at..at + new.len()].copy_from_slice(new);
}

/// Recomputes the IPv4 header checksum of the header at `l3`.
pub fn ipv4_fill_checksum(frame: &mut [u8], l3: usize) {
    let hlen = usize::from(frame[l3] & 0xf) * 4;
    frame[l3 + 10..l3 + 12].fill(0);
    let c = checksum(&frame[l3..l3 + hlen]);
    frame[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
}

fn pseudo_sum(src: &[u8], dst: &[u8], proto: u8, len: usize) -> u32 {
    let acc = ones_sum(src, 0);
    let acc = ones_sum(dst, acc);
    ones_sum(&[0, proto], acc) + ones_sum(&(len as u32).to_be_bytes(), 0)
}

/// Makes a UDP-over-IPv4 packet whose UDP payload changed size consistent again: the IPv4 total
/// length and header checksum, the UDP length and checksum, for an IPv4 header at `l3` (without
/// options: the UDP header at `l4`) and a packet ending at `end`.
pub fn refit_udp4(frame: &mut [u8], l3: usize, l4: usize, end: usize) {
    frame[l3 + 2..l3 + 4].copy_from_slice(&((end - l3) as u16).to_be_bytes());
    ipv4_fill_checksum(frame, l3);
    frame[l4 + 4..l4 + 6].copy_from_slice(&((end - l4) as u16).to_be_bytes());
    fill_l4_checksum(frame, (l3 + 12, l3 + 16), (l3 + 16, l3 + 20), proto::UDP, l4, end, l4 + 6);
}

/// Fills the transport checksum of an IPv4 or IPv6 packet whose transport header starts at `l4`
/// and ends at `end` (`csum_at`: offset of the field); `src` and `dst` are the byte ranges of
/// the addresses (the pseudo-header's). A UDP checksum computed as 0 is written 0xffff.
pub fn fill_l4_checksum(
    frame: &mut [u8],
    src: (usize, usize),
    dst: (usize, usize),
    proto: u8,
    l4: usize,
    end: usize,
    csum_at: usize,
) {
    frame[csum_at..csum_at + 2].fill(0);
    let acc = pseudo_sum(&frame[src.0..src.1], &frame[dst.0..dst.1], proto, end - l4);
    let mut c = !(ones_sum(&frame[l4..end], acc) as u16);
    if c == 0 && proto == proto::UDP {
        c = 0xffff;
    }
    frame[csum_at..csum_at + 2].copy_from_slice(&c.to_be_bytes());
}

fn eth_header(out: &mut Vec<u8>, dst: [u8; 6], src: [u8; 6], ethertype: u16) {
    out.extend_from_slice(&dst);
    out.extend_from_slice(&src);
    out.extend_from_slice(&ethertype.to_be_bytes());
}

fn ipv4_header(out: &mut Vec<u8>, src: [u8; 4], dst: [u8; 4], proto: u8, ttl: u8, payload: usize) {
    let l3 = out.len();
    let total = (20 + payload) as u16;
    out.extend_from_slice(&[0x45, 0, 0, 0, 0, 0, 0x40, 0, ttl, proto, 0, 0]);
    out[l3 + 2..l3 + 4].copy_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&src);
    out.extend_from_slice(&dst);
    ipv4_fill_checksum(out, l3);
}

/// Appends a UDP header (checksum zero) and the payload; returns the header's offset.
fn udp_header(out: &mut Vec<u8>, src_port: u16, dst_port: u16, payload: &[u8]) -> usize {
    let l4 = out.len();
    out.extend_from_slice(&src_port.to_be_bytes());
    out.extend_from_slice(&dst_port.to_be_bytes());
    out.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    l4
}

/// Appends an Ethernet + IPv4 + UDP frame (checksums filled) to `out`.
#[allow(clippy::too_many_arguments)]
pub fn build_udp4(
    out: &mut Vec<u8>,
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    src_port: u16,
    dst_port: u16,
    ttl: u8,
    payload: &[u8],
) {
    eth_header(out, eth_dst, eth_src, ETHERTYPE_IPV4);
    let l3 = out.len();
    ipv4_header(out, src, dst, proto::UDP, ttl, 8 + payload.len());
    let l4 = udp_header(out, src_port, dst_port, payload);
    let end = out.len();
    fill_l4_checksum(out, (l3 + 12, l3 + 16), (l3 + 16, l3 + 20), proto::UDP, l4, end, l4 + 6);
}

/// Appends an Ethernet + IPv4 + TCP frame (no options, ACK flag, checksums filled) to `out`.
#[allow(clippy::too_many_arguments)]
pub fn build_tcp4(
    out: &mut Vec<u8>,
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    src_port: u16,
    dst_port: u16,
    ttl: u8,
    payload: &[u8],
) {
    eth_header(out, eth_dst, eth_src, ETHERTYPE_IPV4);
    let l3 = out.len();
    ipv4_header(out, src, dst, proto::TCP, ttl, 20 + payload.len());
    let l4 = out.len();
    out.extend_from_slice(&src_port.to_be_bytes());
    out.extend_from_slice(&dst_port.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0xff, 0xff, 0, 0, 0, 0]);
    out.extend_from_slice(payload);
    let end = out.len();
    fill_l4_checksum(out, (l3 + 12, l3 + 16), (l3 + 16, l3 + 20), proto::TCP, l4, end, l4 + 16);
}

/// Appends an Ethernet + IPv6 + UDP frame (checksum filled) to `out`.
#[allow(clippy::too_many_arguments)]
pub fn build_udp6(
    out: &mut Vec<u8>,
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    src: [u8; 16],
    dst: [u8; 16],
    src_port: u16,
    dst_port: u16,
    hop_limit: u8,
    payload: &[u8],
) {
    eth_header(out, eth_dst, eth_src, ETHERTYPE_IPV6);
    let l3 = out.len();
    let plen = (8 + payload.len()) as u16;
    out.extend_from_slice(&[0x60, 0, 0, 0]);
    out.extend_from_slice(&plen.to_be_bytes());
    out.extend_from_slice(&[proto::UDP, hop_limit]);
    out.extend_from_slice(&src);
    out.extend_from_slice(&dst);
    let l4 = udp_header(out, src_port, dst_port, payload);
    let end = out.len();
    fill_l4_checksum(out, (l3 + 8, l3 + 24), (l3 + 24, l3 + 40), proto::UDP, l4, end, l4 + 6);
}

/// Appends an Ethernet + IPv4 + ICMP echo request frame (checksums filled) to `out`.
#[allow(clippy::too_many_arguments)]
pub fn build_icmp4_echo(
    out: &mut Vec<u8>,
    eth_src: [u8; 6],
    eth_dst: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    id: u16,
    seq: u16,
    ttl: u8,
    payload: &[u8],
) {
    eth_header(out, eth_dst, eth_src, ETHERTYPE_IPV4);
    ipv4_header(out, src, dst, proto::ICMP, ttl, 8 + payload.len());
    let l4 = out.len();
    out.extend_from_slice(&[8, 0, 0, 0]);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(payload);
    let c = checksum(&out[l4..]);
    out[l4 + 2..l4 + 4].copy_from_slice(&c.to_be_bytes());
}

/// Whether the transport checksum of a parsed IPv4/IPv6 frame is correct (tests and tracing).
pub fn l4_checksum_ok(frame: &[u8], info: &FrameInfo) -> bool {
    if !info.has_l4 {
        return true;
    }
    let l3 = usize::from(info.l3_off);
    let l4 = usize::from(info.l4_off);
    let end = usize::from(info.ip_end);
    if info.proto == proto::ICMP {
        return checksum(&frame[l4..end]) == 0;
    }
    if info.l4_checksum_off(frame).is_none() {
        return true;
    }
    let (src, dst) = match info.l3 {
        L3::Ipv4 => (&frame[l3 + 12..l3 + 16], &frame[l3 + 16..l3 + 20]),
        L3::Ipv6 => (&frame[l3 + 8..l3 + 24], &frame[l3 + 24..l3 + 40]),
        L3::Other => return true,
    };
    let acc = pseudo_sum(src, dst, info.proto, end - l4);
    ones_sum(&frame[l4..end], acc) == 0xffff
}

/// Parses a MAC address `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("`{s}` is not a MAC address (six hex bytes separated by `:`)"));
    }
    let mut m = [0u8; 6];
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("`{s}` is not a MAC address (bad byte `{p}`)"))?;
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp4_round_trip_and_checksums() {
        let mut f = Vec::new();
        build_udp4(&mut f, [1; 6], [2; 6], [10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000, 64, &[7; 18]);
        let i = FrameInfo::parse(&f).unwrap();
        assert_eq!((i.l3_off, i.l4_off, i.ip_end as usize), (14, 34, f.len()));
        assert!(l4_checksum_ok(&f, &i));
        f[40] ^= 1; // payload bit
        assert!(!l4_checksum_ok(&f, &i));
    }

    #[test]
    fn rfc1624_adjust_matches_recompute() {
        let mut f = Vec::new();
        build_tcp4(&mut f, [1; 6], [2; 6], [192, 168, 1, 1], [10, 0, 0, 2], 1000, 80, 64, b"abc");
        let i = FrameInfo::parse(&f).unwrap();
        // Rewrite the destination address and port, adjusting the TCP checksum incrementally.
        let at = i.l4_checksum_off(&f).unwrap();
        let (old, new) = ([10u8, 0, 0, 2], [172u8, 16, 5, 9]);
        f[30..34].copy_from_slice(&new);
        checksum_adjust_bytes(&mut f, at, &old, &new);
        ipv4_fill_checksum(&mut f, 14);
        let i2 = FrameInfo::parse(&f).unwrap();
        assert!(l4_checksum_ok(&f, &i2));
    }

    #[test]
    fn refusals_are_named() {
        let mut f = Vec::new();
        build_udp4(&mut f, [1; 6], [2; 6], [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 64, &[]);
        assert_eq!(FrameInfo::parse(&f[..10]), Err(FrameError::TruncatedEthernet));
        assert_eq!(FrameInfo::parse(&f[..30]), Err(FrameError::TruncatedIpv4));
        let mut g = f.clone();
        g[14] = 0x44;
        assert_eq!(FrameInfo::parse(&g), Err(FrameError::BadIhl));
        let mut g = f.clone();
        g[22] ^= 1; // TTL without fixing the checksum
        assert_eq!(FrameInfo::parse(&g), Err(FrameError::BadIpv4Checksum));
        let mut g = f.clone();
        g[38..40].copy_from_slice(&100u16.to_be_bytes()); // UDP length beyond the packet
        assert_eq!(FrameInfo::parse(&g), Err(FrameError::BadUdp));
        let mut tags = f[..12].to_vec();
        for _ in 0..3 {
            tags.extend_from_slice(&[0x81, 0, 0, 1]);
        }
        tags.extend_from_slice(&f[12..]);
        assert_eq!(FrameInfo::parse(&tags), Err(FrameError::TooManyVlans));
        let names: std::collections::HashSet<_> = FrameError::ALL.iter().map(|e| e.as_str()).collect();
        assert_eq!(names.len(), FrameError::ALL.len());
    }

    #[test]
    fn vlan_ipv6_icmp_and_non_ip() {
        let mut f = Vec::new();
        build_udp6(&mut f, [1; 6], [2; 6], [0x20; 16], [0x30; 16], 5, 6, 9, b"x");
        let mut tagged = f[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x20, 0x0a]);
        tagged.extend_from_slice(&f[12..]);
        let i = FrameInfo::parse(&tagged).unwrap();
        assert_eq!((i.vlans, i.vlan_tci, i.l3, i.l3_off, i.ttl), (1, 0x200a, L3::Ipv6, 18, 9));
        assert!(l4_checksum_ok(&tagged, &i));
        let mut p = Vec::new();
        build_icmp4_echo(&mut p, [1; 6], [2; 6], [1, 1, 1, 1], [2, 2, 2, 2], 7, 1, 64, b"ping");
        let i = FrameInfo::parse(&p).unwrap();
        assert_eq!((i.proto, i.src_port, i.dst_port), (proto::ICMP, 8, 0));
        assert!(l4_checksum_ok(&p, &i));
        let arp = [[0xffu8; 6].as_slice(), &[1; 6], &[0x08, 0x06], &[0; 28]].concat();
        let i = FrameInfo::parse(&arp).unwrap();
        assert_eq!((i.l3, i.ethertype), (L3::Other, ETHERTYPE_ARP));
    }

    /// `parse_into` (common-case path first) against the general parser alone, on frames near
    /// the common case: valid UDP and TCP over IPv4, then bytes overwritten (with the header
    /// checksum fixed or not) and the frame cut short.
    fn parse_twins_agree(tcp: bool, tos: u8, ihl_opts: bool, edits: &[(usize, u8)], fix: bool, cut: usize) {
        let mut f = Vec::new();
        let payload = [0x5a; 30];
        if tcp {
            build_tcp4(&mut f, [1; 6], [2; 6], [10, 0, 0, 1], [10, 0, 0, 2], 1000, 80, 64, &payload);
        } else {
            build_udp4(&mut f, [1; 6], [2; 6], [10, 0, 0, 1], [10, 0, 0, 2], 1000, 2000, 64, &payload);
        }
        f[15] = tos;
        ipv4_fill_checksum(&mut f, 14);
        if ihl_opts {
            // Options (a NOP word): IHL 6, total length + 4.
            f.splice(34..34, [1u8, 1, 1, 1]);
            f[14] = 0x46;
            let total = be16(&f, 16) + 4;
            f[16..18].copy_from_slice(&total.to_be_bytes());
            ipv4_fill_checksum(&mut f, 14);
        }
        for &(at, b) in edits {
            let at = at % f.len();
            f[at] = b;
        }
        if fix && f.len() >= 34 && f[14] & 0xf >= 5 && f.len() >= 14 + usize::from(f[14] & 0xf) * 4 {
            ipv4_fill_checksum(&mut f, 14);
        }
        f.truncate(f.len() - cut.min(f.len()));
        let (mut fast, mut general) = (FrameInfo::default(), FrameInfo::default());
        let a = fast.parse_into(&f);
        let b = general.parse_general_into(&f);
        assert_eq!(a, b, "{f:02x?}");
        if a.is_ok() {
            assert_eq!(fast, general, "{f:02x?}");
        }
        if let Some(c) = Common4::parse(&f) {
            assert_eq!((b, c.info()), (Ok(()), general), "{f:02x?}");
        }
    }

    #[test]
    fn parse_twins_agree_on_the_edges() {
        // Valid, options, later fragment, first fragment, short TCP offset, UDP length edges.
        for tcp in [false, true] {
            parse_twins_agree(tcp, 0xb8, false, &[], false, 0);
            parse_twins_agree(tcp, 0, true, &[], false, 0);
            parse_twins_agree(tcp, 0xb8, false, &[(20, 0x00), (21, 0x08)], true, 0);
            parse_twins_agree(tcp, 0xb8, false, &[(20, 0x20), (21, 0x00)], true, 0);
            parse_twins_agree(tcp, 0xb8, false, &[(46, 0x40)], false, 0);
            parse_twins_agree(tcp, 0xb8, false, &[(16, 0), (17, 19)], true, 0);
            for cut in 0..80 {
                parse_twins_agree(tcp, 0xb8, false, &[], false, cut);
            }
        }
        parse_twins_agree(false, 4, false, &[(38, 0), (39, 7)], false, 0);
        parse_twins_agree(false, 4, false, &[(38, 0), (39, 38)], false, 0);
        parse_twins_agree(false, 4, false, &[(38, 0), (39, 39)], false, 0);
        parse_twins_agree(false, 4, false, &[(23, 1)], true, 0);
    }

    #[test]
    fn ttl_decrement_adjustment_for_every_field() {
        for sum in 0..=u16::MAX {
            let field = checksum_field_ttl_dec(sum.to_be_bytes());
            assert_eq!(u16::from_be_bytes(field), checksum_adjust(sum, 0x4011, 0x3f11), "{sum:#06x}");
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_common_path_matches_the_general_parser(
            tcp in proptest::prelude::any::<bool>(),
            tos in proptest::prelude::any::<u8>(),
            opts in proptest::prelude::any::<bool>(),
            edits in proptest::collection::vec((0usize..64, proptest::prelude::any::<u8>()), 0..4),
            fix in proptest::prelude::any::<bool>(),
            cut in 0usize..60,
        ) {
            parse_twins_agree(tcp, tos, opts, &edits, fix, cut);
        }

        #[test]
        fn ttl_decrement_adjustment_is_the_general_one(sum in proptest::prelude::any::<u16>(), word in 0x0100u16..=0xffff) {
            let field = checksum_field_ttl_dec(sum.to_be_bytes());
            proptest::prop_assert_eq!(u16::from_be_bytes(field), checksum_adjust(sum, word, word - 0x0100));
        }

        #[test]
        fn header_sum_ok_is_a_zero_checksum(mut ip in proptest::prelude::any::<[u8; 20]>(), fix in proptest::prelude::any::<bool>(), zero in 0u8..4) {
            if fix {
                ip[10..12].fill(0);
                let c = checksum(&ip);
                ip[10..12].copy_from_slice(&c.to_be_bytes());
            }
            if zero == 0 {
                ip = [0; 20];
            } else if zero == 1 {
                // A sum of 0xffff words other than the checksum field, in either representation.
                ip = [0; 20];
                ip[0] = 0xff;
                ip[1] = 0xff;
                if fix {
                    ip[10] = 0xff;
                    ip[11] = 0xff;
                }
            }
            proptest::prop_assert_eq!(header_sum_ok(&ip), checksum(&ip) == 0, "{:02x?}", ip);
        }

        #[test]
        fn ones_sum_matches_its_reference(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), acc in proptest::prelude::any::<u32>()) {
            proptest::prop_assert_eq!(ones_sum(&data, acc), ones_sum_reference(&data, acc));
            proptest::prop_assert_eq!(ones_sum(&data, 0), ones_sum_reference(&data, 0));
        }
    }
}
