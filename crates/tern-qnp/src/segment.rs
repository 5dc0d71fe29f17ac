//! Segmentation of TLV bytes into packet payloads (QingNiao §3.2.1): whole records per packet;
//! values longer than 8 bytes (only strings and bytes can be) are split at packet boundaries
//! into records of the same field, which concatenate on decode; the dispatch records come
//! first and must fit wholly in the first packet.

use tern_wire::tlv::{self, Message, RECORD_HEADER_LEN};

/// Why a message cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// The dispatch fields do not fit in one packet (QingNiao §3.4 limits them to the MTU).
    #[error("message {message}: dispatch fields take {dispatch_len} bytes but one packet carries {capacity}")]
    DispatchTooLarge {
        /// Message name.
        message: &'static str,
        /// Encoded bytes of the dispatch fields.
        dispatch_len: usize,
        /// Payload bytes per packet.
        capacity: usize,
    },
    /// The message needs more packets than allowed.
    #[error("message {message}: needs {packets} packets, at most {max} allowed")]
    TooManyPackets {
        /// Message name.
        message: &'static str,
        /// Packets needed.
        packets: usize,
        /// Configured limit.
        max: usize,
    },
}

/// A message cut into packet payloads: `bytes` holds them back to back, `ends` their ends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segmented {
    /// Packet payloads, concatenated.
    pub bytes: Vec<u8>,
    /// End offset of each packet's payload in `bytes`.
    pub ends: Vec<u32>,
    /// `seg_cnt` of the first packet.
    pub seg_cnt: u8,
}

impl Segmented {
    /// Packets.
    pub fn packets(&self) -> usize {
        self.ends.len()
    }
    /// The payload of packet `i`.
    pub fn payload(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.bytes[start..self.ends[i] as usize]
    }
    /// Clears it for reuse, keeping its allocations.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.seg_cnt = 0;
    }
}

/// Encodes `msg` and segments it into `out` (cleared first), using `scratch` for multi-packet
/// messages. `capacity` is payload bytes per packet.
pub fn segment_message<M: Message>(
    msg: &M,
    capacity: usize,
    max_packets: usize,
    scratch: &mut Vec<u8>,
    out: &mut Segmented,
) -> Result<(), SegmentError> {
    out.clear();
    let dispatch_len = msg.dispatch_len();
    if dispatch_len > capacity {
        return Err(SegmentError::DispatchTooLarge { message: M::NAME, dispatch_len, capacity });
    }
    out.seg_cnt = tern_wire::qnp::seg_cnt_for(dispatch_len);
    let len = msg.encoded_len();
    if len <= capacity {
        msg.encode(&mut out.bytes);
        out.ends.push(out.bytes.len() as u32);
        return Ok(());
    }
    scratch.clear();
    msg.encode(scratch);
    segment_bytes(scratch, capacity, out);
    if out.packets() > max_packets {
        let packets = out.packets();
        out.clear();
        return Err(SegmentError::TooManyPackets { message: M::NAME, packets, max: max_packets });
    }
    Ok(())
}

/// Segments `msg` for `cfg` into a buffer taken from `spare` (or a new one); on error the buffer
/// goes back to `spare`.
pub(crate) fn segment_into<M: Message>(
    cfg: &crate::QnpConfig,
    msg: &M,
    spare: &mut Vec<Segmented>,
    scratch: &mut Vec<u8>,
) -> Result<Segmented, SegmentError> {
    let mut seg = spare.pop().unwrap_or_default();
    match segment_message(msg, cfg.payload_capacity(), usize::from(cfg.max_pkts_per_request), scratch, &mut seg) {
        Ok(()) => Ok(seg),
        Err(e) => {
            spare.push(seg);
            Err(e)
        }
    }
}

/// Cuts encoded records into payloads of at most `capacity` bytes (appending to `out`).
/// The caller has checked that the leading dispatch records fit in one packet.
pub(crate) fn segment_bytes(tlv_bytes: &[u8], capacity: usize, out: &mut Segmented) {
    let mut room = capacity;
    let mut started = false;
    for record in tlv::Reader::new(tlv_bytes) {
        let Ok(record) = record else { break };
        let mut value = record.value;
        loop {
            let need = RECORD_HEADER_LEN + value.len();
            if need <= room {
                push_record(out, record.field, value);
                room -= need;
                started = true;
                break;
            }
            // Split only values longer than any scalar, and only into non-empty pieces.
            if value.len() > 8 && room > RECORD_HEADER_LEN {
                let take = room - RECORD_HEADER_LEN;
                push_record(out, record.field, &value[..take]);
                value = &value[take..];
            } else if !started {
                // A record that cannot fit even an empty packet cannot happen (capacity > 11);
                // guard against an endless loop anyway.
                push_record(out, record.field, value);
                break;
            }
            out.ends.push(out.bytes.len() as u32);
            room = capacity;
            started = false;
        }
    }
    if started || out.ends.is_empty() {
        out.ends.push(out.bytes.len() as u32);
    }
}

fn push_record(out: &mut Segmented, field: u8, value: &[u8]) {
    let [l0, l1] = (value.len() as u16).to_be_bytes();
    out.bytes.extend_from_slice(&[field, l0, l1]);
    out.bytes.extend_from_slice(value);
}
