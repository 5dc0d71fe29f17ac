//! The AES-GCM task (docs/chain.md, "AES-GCM"): seals the UDP payload of IPv4 frames with a
//! tenant's AES-256 key, or opens what was sealed, checking the tag.
//!
//! A sealed payload is `nonce (12 bytes) ‖ ciphertext ‖ tag (16 bytes)`. The nonce is the task
//! instance's number (4 bytes) then its count of payloads sealed (8 bytes), both big-endian.
//! Instance numbers come from the tenant's [`KeySpace`], which hands each out once for as long as
//! it lives — across every instance of the task and every relaunch of its chain — so no two
//! payloads sealed under the key share a nonce. (A key outlives a process only if its key space
//! does: after a restart, give the tenant a new key.)
//!
//! ```
//! use tern_chain::aes::{AesTask, KeySpace};
//! let space = KeySpace::new([7; 32]);
//! let (mut a, mut b) = (AesTask::new(&space).unwrap(), AesTask::new(&space).unwrap());
//! let mut f = Vec::new();
//! tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 64, b"secret");
//! let plain = f.clone();
//! a.seal(&mut f).unwrap();
//! assert_eq!(f.len(), plain.len() + 28);
//! b.open(&mut f).unwrap(); // another instance of the same tenant opens it
//! assert_eq!(f, plain);
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce, Tag};
use tern_wire::frame::{FrameInfo, L3, fill_l4_checksum, ipv4_fill_checksum, proto};

/// Bytes a sealed payload gains: the nonce and the tag.
pub const OVERHEAD: usize = NONCE_LEN + TAG_LEN;
/// The nonce's bytes.
pub const NONCE_LEN: usize = 12;
/// The tag's bytes.
pub const TAG_LEN: usize = 16;
/// The largest IP packet a sealed frame may carry (a jumbo frame's).
pub const MAX_IP_LEN: usize = 9000;

/// A tenant's key and the instance numbers handed out under it.
pub struct KeySpace {
    cipher: Aes256Gcm,
    next: AtomicU64,
}

impl std::fmt::Debug for KeySpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySpace").field("next", &self.next).finish_non_exhaustive()
    }
}

impl KeySpace {
    /// The key space of `key`.
    pub fn new(key: [u8; 32]) -> Arc<KeySpace> {
        Arc::new(KeySpace { cipher: Aes256Gcm::new(&key.into()), next: AtomicU64::new(0) })
    }

    /// Instance numbers handed out so far.
    pub fn instances(&self) -> u64 {
        self.next.load(Ordering::Relaxed).min(1 << 32)
    }
}

/// Why a frame is dropped, or a task cannot be made. Each drop is a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum AesDrop {
    /// Not a frame the parser takes.
    #[error("malformed")]
    Malformed,
    /// Not UDP over IPv4 (or a fragment, or with IPv4 options).
    #[error("not_udp4")]
    NotUdp4,
    /// Sealed, the packet would pass [`MAX_IP_LEN`].
    #[error("too_large")]
    TooLarge,
    /// Opening: shorter than a nonce and a tag, or the tag does not match.
    #[error("bad_tag")]
    BadTag,
    /// This instance has sealed 2^64 − 1 payloads, or the key space has no instance number left.
    #[error("nonces_exhausted")]
    NoncesExhausted,
}

impl AesDrop {
    /// Every reason, in counter order.
    pub const ALL: [AesDrop; 5] =
        [AesDrop::Malformed, AesDrop::NotUdp4, AesDrop::TooLarge, AesDrop::BadTag, AesDrop::NoncesExhausted];
}

/// What a task counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AesStats {
    /// Payloads sealed and opened.
    pub sealed: u64,
    pub opened: u64,
    /// Drops, by [`AesDrop::ALL`]'s order.
    pub drops: [u64; 5],
}

/// One instance of the task.
#[derive(Debug)]
pub struct AesTask {
    space: Arc<KeySpace>,
    instance: u32,
    count: u64,
    info: FrameInfo,
    stats: AesStats,
}

impl AesTask {
    /// A new instance under `space`, with an instance number no other has had.
    pub fn new(space: &Arc<KeySpace>) -> Result<AesTask, AesDrop> {
        let n = space.next.fetch_add(1, Ordering::Relaxed);
        let instance = u32::try_from(n).map_err(|_| AesDrop::NoncesExhausted)?;
        Ok(AesTask { space: space.clone(), instance, count: 0, info: FrameInfo::default(), stats: AesStats::default() })
    }

    /// Its instance number.
    pub fn instance(&self) -> u32 {
        self.instance
    }

    /// The UDP payload's range, after checking the frame is UDP over IPv4 without options.
    fn payload(&mut self, frame: &[u8]) -> Result<(usize, usize, usize), AesDrop> {
        if self.info.parse_general_into(frame).is_err() {
            return Err(AesDrop::Malformed);
        }
        let i = self.info;
        let (l3, l4) = (usize::from(i.l3_off), usize::from(i.l4_off));
        if i.l3 != L3::Ipv4 || i.fragment || !i.has_l4 || i.proto != proto::UDP || l4 != l3 + 20 {
            return Err(AesDrop::NotUdp4);
        }
        Ok((l3, l4, usize::from(i.ip_end)))
    }

    /// Lengths and checksums after the payload changed size: IPv4 total length and header
    /// checksum, UDP length and checksum.
    fn refill(frame: &mut [u8], l3: usize, l4: usize, end: usize) {
        let ip_len = (end - l3) as u16;
        frame[l3 + 2..l3 + 4].copy_from_slice(&ip_len.to_be_bytes());
        ipv4_fill_checksum(frame, l3);
        frame[l4 + 4..l4 + 6].copy_from_slice(&((end - l4) as u16).to_be_bytes());
        fill_l4_checksum(frame, (l3 + 12, l3 + 16), (l3 + 16, l3 + 20), proto::UDP, l4, end, l4 + 6);
    }

    fn count(&mut self, r: Result<(), AesDrop>) -> Result<(), AesDrop> {
        if let Err(d) = r {
            self.stats.drops[AesDrop::ALL.iter().position(|x| *x == d).unwrap_or(0)] += 1;
        }
        r
    }

    /// Seals the frame's UDP payload in place (the frame grows by [`OVERHEAD`]; Ethernet
    /// padding after the IP packet is dropped). A dropped frame is left as it was.
    pub fn seal(&mut self, frame: &mut Vec<u8>) -> Result<(), AesDrop> {
        let r = self.seal_inner(frame);
        if r.is_ok() {
            self.stats.sealed += 1;
        }
        self.count(r)
    }

    fn seal_inner(&mut self, frame: &mut Vec<u8>) -> Result<(), AesDrop> {
        let (l3, l4, end) = self.payload(frame)?;
        if end - l3 + OVERHEAD > MAX_IP_LEN {
            return Err(AesDrop::TooLarge);
        }
        if self.count == u64::MAX {
            return Err(AesDrop::NoncesExhausted);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce[..4].copy_from_slice(&self.instance.to_be_bytes());
        nonce[4..].copy_from_slice(&self.count.to_be_bytes());
        let body = l4 + 8;
        frame.truncate(end);
        let tag = self
            .space
            .cipher
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), b"", &mut frame[body..end])
            .map_err(|_| AesDrop::TooLarge)?;
        self.count += 1;
        frame.splice(body..body, nonce);
        frame.extend_from_slice(&tag);
        let end = frame.len();
        Self::refill(frame, l3, l4, end);
        Ok(())
    }

    /// Opens a sealed UDP payload in place (the frame shrinks by [`OVERHEAD`]), checking the
    /// tag. A dropped frame is left as it was.
    pub fn open(&mut self, frame: &mut Vec<u8>) -> Result<(), AesDrop> {
        let r = self.open_inner(frame);
        if r.is_ok() {
            self.stats.opened += 1;
        }
        self.count(r)
    }

    fn open_inner(&mut self, frame: &mut Vec<u8>) -> Result<(), AesDrop> {
        let (l3, l4, end) = self.payload(frame)?;
        let body = l4 + 8;
        if end - body < OVERHEAD {
            return Err(AesDrop::BadTag);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&frame[body..body + NONCE_LEN]);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&frame[end - TAG_LEN..end]);
        // Decrypted where it lies (GCM checks the tag before it decrypts: a frame whose tag
        // does not match is left as it was), then moved over the nonce.
        self.space
            .cipher
            .decrypt_in_place_detached(
                Nonce::from_slice(&nonce),
                b"",
                &mut frame[body + NONCE_LEN..end - TAG_LEN],
                Tag::from_slice(&tag),
            )
            .map_err(|_| AesDrop::BadTag)?;
        frame.copy_within(body + NONCE_LEN..end - TAG_LEN, body);
        frame.truncate(end - OVERHEAD);
        let end = frame.len();
        Self::refill(frame, l3, l4, end);
        Ok(())
    }

    /// Its counters.
    pub fn stats(&self) -> AesStats {
        self.stats
    }
}
