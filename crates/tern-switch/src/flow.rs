//! A flow's id, as the switch's hash unit computes it for ECMP and a server computes it for its
//! list of live flows (docs/clip.md, "The switch"): the IPv4 5-tuple (source, destination,
//! protocol, and the TCP or UDP ports; 0 for other protocols) folded by
//! [`hash_values`]. Both sides read it from the frame's bytes,
//! so they agree on every flow.

use crate::group::FlowId;
use crate::pipeline::hash_values;

/// The 5-tuple of an Ethernet frame carrying IPv4 (its EtherType at bytes 12–13), or None.
pub fn five_tuple(frame: &[u8]) -> Option<[u64; 5]> {
    if frame.len() < 14 || frame[12..14] != [0x08, 0x00] {
        return None;
    }
    five_tuple_l3(&frame[14..])
}

/// The 5-tuple of an IPv4 packet (from its first byte), or None.
pub fn five_tuple_l3(ip: &[u8]) -> Option<[u64; 5]> {
    if ip.len() < 20 || ip[0] >> 4 != 4 || ip[0] & 0xf < 5 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0xf) * 4;
    let proto = ip[9];
    let addr = |at: usize| u64::from(u32::from_be_bytes([ip[at], ip[at + 1], ip[at + 2], ip[at + 3]]));
    // A fragment after the first carries no ports.
    let first_fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff == 0;
    let (sp, dp) = match proto {
        6 | 17 if first_fragment && ip.len() >= ihl + 4 => (
            u64::from(u16::from_be_bytes([ip[ihl], ip[ihl + 1]])),
            u64::from(u16::from_be_bytes([ip[ihl + 2], ip[ihl + 3]])),
        ),
        _ => (0, 0),
    };
    Some([addr(12), addr(16), u64::from(proto), sp, dp])
}

/// A frame's flow id (None: not IPv4).
pub fn flow_id(frame: &[u8]) -> Option<FlowId> {
    five_tuple(frame).map(|t| hash_values(&t))
}

/// The flow id of packets with these addresses, protocol and ports (as their bytes give it:
/// the ports count for TCP and UDP only), for state kept by tuple rather than by frame.
pub fn flow_id_of(src: u32, dst: u32, proto: u8, sport: u16, dport: u16) -> FlowId {
    let (sp, dp) = if matches!(proto, 6 | 17) { (sport, dport) } else { (0, 0) };
    hash_values(&[u64::from(src), u64::from(dst), u64::from(proto), u64::from(sp), u64::from(dp)])
}

/// An IPv4 packet's flow id (None: not IPv4).
pub fn flow_id_l3(ip: &[u8]) -> Option<FlowId> {
    five_tuple_l3(ip).map(|t| hash_values(&t))
}
