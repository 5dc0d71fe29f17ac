//! QNP, the QingNiao request protocol (QingNiao §3.2, §4.1), as sans-IO state machines.
//!
//! - [`Client`]: assigns request ids, segments requests into packets (dispatch fields wholly in
//!   the first), retransmits unacknowledged requests with backoff, reassembles responses and
//!   delivers each once.
//! - [`Server`]: reassembles requests in a bounded [`RequestTable`] (packets of a request whose
//!   first packet was not seen are dropped), suppresses duplicates so each request reaches the
//!   application once, and sends responses that carry the request's ACK.
//!
//! Neither touches a socket, a thread or the clock: callers pass `now` and packets in, and take
//! packets out with `poll_transmit` (as `quinn-proto` does). [`crate::runtime`] drives them over
//! a [`tern_io::Port`]. The wire format is specified in `docs/qnp.md`.
//!
//! Bad input from the network never panics: it is dropped and counted by [`DropReason`].

mod client;
mod segment;
mod server;
mod table;

pub use client::{Client, ClientEvent, ReqError, Response};
pub use segment::{SegmentError, Segmented, segment_message};
pub use server::{Incoming, ReqHandle, Server};
pub use table::{Parts, RequestTable};

use std::time::Duration;

use tern_hw::{CapacityError, Ledger, Profile, resource};
use tern_wire::ETH_IPV4_UDP_LEN;

/// IPv4 + UDP header bytes inside the MTU.
const IP_UDP_LEN: usize = ETH_IPV4_UDP_LEN - 14;

/// Why a packet (or request) was dropped. Each is a counter in [`Stats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than a QNP header.
    Truncated,
    /// Header fields inconsistent (flags, sequence beyond count, lengths).
    BadHeader,
    /// `app_id` not served here.
    UnknownApp,
    /// More packets per request than configured.
    TooManyPackets,
    /// Declared request length impossible for its packet count, or reassembled bytes differ.
    BadLength,
    /// A later packet of a request whose first packet was never seen (QingNiao §3.2.2).
    NoFirstPacket,
    /// The request table is full; the first packet of a new request was dropped.
    RequestTableFull,
    /// Reassembly would exceed the table's byte budget.
    BufferBudget,
    /// A partially received request expired (counted once per request).
    RequestExpired,
    /// A packet already received for a request being reassembled.
    DuplicatePacket,
    /// A whole request that already reached the application (handler not run again).
    DuplicateRequest,
    /// A request older than the sender's acknowledged floor.
    StaleRequest,
    /// A response for a request not outstanding (already answered, failed, or never sent).
    UnexpectedResponse,
    /// A packet of a kind this endpoint does not take (a request at a client, a pure ACK).
    UnexpectedPacket,
    /// The payload did not decode as the expected message.
    DecodeError,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 15] = [
        DropReason::Truncated,
        DropReason::BadHeader,
        DropReason::UnknownApp,
        DropReason::TooManyPackets,
        DropReason::BadLength,
        DropReason::NoFirstPacket,
        DropReason::RequestTableFull,
        DropReason::BufferBudget,
        DropReason::RequestExpired,
        DropReason::DuplicatePacket,
        DropReason::DuplicateRequest,
        DropReason::StaleRequest,
        DropReason::UnexpectedResponse,
        DropReason::UnexpectedPacket,
        DropReason::DecodeError,
    ];

    /// Counter name.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::BadHeader => "bad_header",
            DropReason::UnknownApp => "unknown_app",
            DropReason::TooManyPackets => "too_many_packets",
            DropReason::BadLength => "bad_length",
            DropReason::NoFirstPacket => "no_first_packet",
            DropReason::RequestTableFull => "request_table_full",
            DropReason::BufferBudget => "buffer_budget",
            DropReason::RequestExpired => "request_expired",
            DropReason::DuplicatePacket => "duplicate_packet",
            DropReason::DuplicateRequest => "duplicate_request",
            DropReason::StaleRequest => "stale_request",
            DropReason::UnexpectedResponse => "unexpected_response",
            DropReason::UnexpectedPacket => "unexpected_packet",
            DropReason::DecodeError => "decode_error",
        }
    }
}

/// Counters of a QNP endpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Drops by reason, indexed by `DropReason as usize`.
    pub drops: [u64; DropReason::ALL.len()],
    /// Data packets accepted.
    pub rx_packets: u64,
    /// Packets emitted.
    pub tx_packets: u64,
    /// Requests sent (client) or delivered to the application (server).
    pub requests: u64,
    /// Responses delivered (client) or sent (server, first time).
    pub responses: u64,
    /// Requests retransmitted (client) or responses resent for duplicates (server).
    pub retransmissions: u64,
    /// Requests that failed after the retry limit (client).
    pub failed: u64,
}

impl std::ops::AddAssign for Stats {
    fn add_assign(&mut self, o: Stats) {
        for (a, b) in self.drops.iter_mut().zip(o.drops) {
            *a += b;
        }
        self.rx_packets += o.rx_packets;
        self.tx_packets += o.tx_packets;
        self.requests += o.requests;
        self.responses += o.responses;
        self.retransmissions += o.retransmissions;
        self.failed += o.failed;
    }
}

impl Stats {
    /// Counts a drop.
    #[inline]
    pub fn drop(&mut self, reason: DropReason) {
        self.drops[reason as usize] += 1;
    }
    /// A drop counter.
    pub fn drops_of(&self, reason: DropReason) -> u64 {
        self.drops[reason as usize]
    }
    /// All drops.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
    /// Non-zero drop counters by name.
    pub fn drop_counts(&self) -> Vec<(&'static str, u64)> {
        DropReason::ALL.iter().filter(|r| self.drops_of(**r) > 0).map(|r| (r.as_str(), self.drops_of(*r))).collect()
    }
}

/// Configuration of a QNP endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct QnpConfig {
    /// IP MTU; a packet's QNP payload holds `mtu - 28 - 22` bytes.
    pub mtu: usize,
    /// Most packets per request (and response).
    pub max_pkts_per_request: u8,
    /// Requests being reassembled at once.
    pub request_table_entries: usize,
    /// A partial request expires this long after its last packet.
    pub request_timeout: Duration,
    /// Bytes the request table may buffer in total.
    pub max_buffered_bytes: usize,
    /// Retransmission timeout before any RTT sample.
    pub initial_rto: Duration,
    /// Lower bound of the adaptive retransmission timeout.
    pub min_rto: Duration,
    /// Upper bound of the retransmission timeout (after backoff).
    pub max_rto: Duration,
    /// Retransmissions before a request fails.
    pub max_retries: u32,
    /// Requests a client may have outstanding (id window).
    pub max_outstanding: usize,
    /// Completed requests a server remembers to suppress duplicates.
    pub dedup_entries: usize,
    /// Bytes of responses a server keeps to resend for duplicates.
    pub max_cached_response_bytes: usize,
    /// How long a server remembers a completed request.
    pub dedup_ttl: Duration,
}

impl Default for QnpConfig {
    fn default() -> Self {
        QnpConfig {
            mtu: 1500,
            max_pkts_per_request: 4,
            request_table_entries: 1024,
            request_timeout: Duration::from_secs(1),
            max_buffered_bytes: 64 << 20,
            initial_rto: Duration::from_millis(20),
            min_rto: Duration::from_millis(1),
            max_rto: Duration::from_millis(500),
            max_retries: 10,
            max_outstanding: 1 << 16,
            dedup_entries: 1 << 16,
            max_cached_response_bytes: 64 << 20,
            dedup_ttl: Duration::from_secs(30),
        }
    }
}

/// Errors in a QNP configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The hardware profile cannot hold it.
    #[error(transparent)]
    Capacity(#[from] CapacityError),
    /// A value is out of range; the string names it.
    #[error("invalid QNP configuration: {0}")]
    Invalid(String),
}

impl QnpConfig {
    /// Defaults for `profile`: its MTU, request timeout, table size (1024 if unbounded) and
    /// packets per request (4 if unbounded, as the paper's library assumes).
    pub fn for_profile(profile: &Profile) -> QnpConfig {
        let pkts = profile.capacity(resource::QNP_PKTS_PER_REQUEST).unwrap_or(4).clamp(1, 255);
        QnpConfig {
            mtu: profile.qnp.mtu as usize,
            max_pkts_per_request: pkts as u8,
            request_table_entries: profile.capacity(resource::QNP_REQUEST_TABLE_ENTRIES).unwrap_or(1024).min(1 << 24)
                as usize,
            request_timeout: Duration::from_millis(profile.qnp.request_timeout_ms),
            ..QnpConfig::default()
        }
    }

    /// Checks ranges, then claims the request table and checks packets per request against the
    /// ledger's profile; `owner` names this endpoint in errors.
    pub fn check(&self, ledger: &mut Ledger, owner: &str) -> Result<(), ConfigError> {
        let invalid = |s: String| Err(ConfigError::Invalid(s));
        if self.mtu < 576 || self.mtu > 65_535 {
            return invalid(format!("mtu {} is outside 576..=65535", self.mtu));
        }
        if self.max_pkts_per_request == 0 {
            return invalid("max_pkts_per_request must be at least 1".into());
        }
        if self.request_table_entries == 0 {
            return invalid("request_table_entries must be at least 1".into());
        }
        if self.max_outstanding == 0 || self.max_outstanding > (1 << 30) {
            return invalid(format!("max_outstanding {} is outside 1..=2^30", self.max_outstanding));
        }
        if self.min_rto.is_zero() || self.min_rto > self.max_rto {
            return invalid("min_rto must be positive and at most max_rto".into());
        }
        ledger.check_limit(resource::QNP_PKTS_PER_REQUEST, u64::from(self.max_pkts_per_request), owner)?;
        ledger.claim(resource::QNP_REQUEST_TABLE_ENTRIES, self.request_table_entries as u64, owner)?;
        Ok(())
    }

    /// QNP payload bytes one packet carries.
    pub fn payload_capacity(&self) -> usize {
        self.mtu.saturating_sub(IP_UDP_LEN + tern_wire::qnp::HEADER_LEN)
    }
}

/// Parses a QNP header from untrusted bytes, counting a drop if it is short or malformed.
#[inline]
pub(crate) fn parse_header(stats: &mut Stats, data: &[u8]) -> Option<tern_wire::qnp::Repr> {
    let Ok(packet) = tern_wire::qnp::Packet::new_checked(data) else {
        stats.drop(DropReason::Truncated);
        return None;
    };
    let repr = tern_wire::qnp::Repr::parse(&packet);
    if repr.is_err() {
        stats.drop(DropReason::BadHeader);
    }
    repr.ok()
}

/// `a` comes before `b` in request-id order (serial number arithmetic, RFC 1982).
#[inline]
pub(crate) fn id_before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_defaults_and_capacity_errors() {
        let u250 = Profile::builtin("qingniao-u250").unwrap();
        let cfg = QnpConfig::for_profile(&u250);
        assert_eq!((cfg.request_table_entries, cfg.max_pkts_per_request), (1024, 4));
        assert_eq!(cfg.request_timeout, Duration::from_secs(1));
        assert_eq!(cfg.payload_capacity(), 1500 - 28 - 22);
        let mut ledger = Ledger::new(&u250);
        cfg.check(&mut ledger, "server 0").unwrap();
        let big = QnpConfig { request_table_entries: 2048, ..cfg.clone() };
        let err = big.check(&mut Ledger::new(&u250), "server 1").unwrap_err().to_string();
        assert!(err.contains("qnp.request_table_entries") && err.contains("2048") && err.contains("1024"), "{err}");
        let many = QnpConfig { max_pkts_per_request: 8, ..cfg };
        let err = many.check(&mut Ledger::new(&u250), "client").unwrap_err().to_string();
        assert!(err.contains("qnp.pkts_per_request"), "{err}");
        let cpu = Profile::builtin("cpu").unwrap();
        let big = QnpConfig { request_table_entries: 1 << 20, max_pkts_per_request: 255, ..QnpConfig::default() };
        big.check(&mut Ledger::new(&cpu), "x").unwrap();
    }

    #[test]
    fn serial_order() {
        assert!(id_before(1, 2));
        assert!(id_before(u32::MAX, 0));
        assert!(!id_before(5, 5));
        assert!(!id_before(0, u32::MAX));
    }
}
