//! The AES-GCM task (docs/chain.md, "AES-GCM"): seals the UDP payload of IPv4 frames with a
//! tenant's AES-256 key, or opens what was sealed, checking the tag.
//!
//! A sealed payload is `nonce (12 bytes) ‖ ciphertext ‖ tag (16 bytes)`. The nonce is the task
//! instance's number (4 bytes) then its count (8 bytes), both big-endian: the count starts at
//! the instance's first count and goes up by one a payload sealed. Instance numbers come from
//! the tenant's [`KeySpace`], which hands each out once — across every instance of the task and
//! every relaunch of its chain — so no two payloads sealed under the key share a nonce. A key
//! space made with [`KeySpace::with_ledger`] reserves its numbers in a [`ledger::Ledger`] file,
//! so that this holds across restarts and between processes too, and starts each instance's
//! count at a random number below 2^63, so that a ledger lost (a new file, the same key) repeats
//! a nonce only by chance; [`KeySpace::new`]'s count from 0, numbers and counts, in this
//! process alone; [`KeySpace::random`]'s are random.
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

pub mod ledger;

use std::sync::{Arc, Mutex};

use aes_gcm::aead::AeadInPlace;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce, Tag};
use tern_wire::frame::{FrameInfo, L3, proto, refit_udp4};

use ledger::{KeyId, Ledger, LedgerError};

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
    id: KeyId,
    numbers: Mutex<Numbers>,
}

/// Where a key space's instance numbers come from.
#[derive(Debug)]
enum Numbers {
    /// 0, 1, 2, … in this process.
    Process { next: u64 },
    /// Blocks reserved in a ledger: `next..end` is what is left of the last one. A random
    /// start count each instance.
    Ledger { ledger: Arc<Ledger>, next: u64, end: u64, handed: u64 },
    /// A random number and a random start count, each instance.
    Random { handed: u64 },
    /// None: why.
    Refused(String),
}

impl std::fmt::Debug for KeySpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySpace").field("id", &self.id).field("numbers", &self.numbers).finish_non_exhaustive()
    }
}

/// Why a task instance could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstanceError {
    /// The key's 2^32 instance numbers are all handed out (reserved, with a ledger).
    #[error("nonces_exhausted: key {0}: all 2^32 instance numbers handed out; give the tenant a new key")]
    Exhausted(KeyId),
    /// The ledger could not reserve numbers.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The key space hands out no numbers (why), or the system gave no random bytes.
    #[error("no nonces: {0}")]
    Refused(String),
}

impl KeySpace {
    fn make(key: [u8; 32], numbers: Numbers) -> Arc<KeySpace> {
        Arc::new(KeySpace { cipher: Aes256Gcm::new(&key.into()), id: KeyId::of(&key), numbers: Mutex::new(numbers) })
    }

    /// The key space of `key`, its instance numbers 0, 1, 2, … in this process alone: two
    /// processes, or one restarted, given the same key repeat nonces. For tests and benchmarks;
    /// what seals real traffic takes [`KeySpace::with_ledger`].
    pub fn new(key: [u8; 32]) -> Arc<KeySpace> {
        KeySpace::make(key, Numbers::Process { next: 0 })
    }

    /// The key space of `key`, its instance numbers reserved [`ledger::BLOCK`] at a time in
    /// `ledger`: never handed out twice by any key space on the ledger's file, in any process.
    /// Each instance starts counting at a random number below 2^63, so that should the file be
    /// lost (a new ledger, the same key), two instances given one number share a nonce only if
    /// their counts meet: at most (n + m) / 2^63 for instances sealing n and m payloads.
    pub fn with_ledger(key: [u8; 32], ledger: Arc<Ledger>) -> Arc<KeySpace> {
        KeySpace::make(key, Numbers::Ledger { ledger, next: 0, end: 0, handed: 0 })
    }

    /// The key space of `key` whose instances each take a random instance number and start
    /// counting at a random number below 2^63: 95 random bits a nonce's first, so nonces
    /// repeat only by chance (for one-off instances, as `chain trace`'s, that no ledger should
    /// pay for; fewer than 2^32 of them under one key).
    pub fn random(key: [u8; 32]) -> Arc<KeySpace> {
        KeySpace::make(key, Numbers::Random { handed: 0 })
    }

    /// The key space of `key` that makes no instances: each try fails with `why`.
    pub fn refused(key: [u8; 32], why: String) -> Arc<KeySpace> {
        KeySpace::make(key, Numbers::Refused(why))
    }

    /// Its key's id (the ledger's name for it).
    pub fn id(&self) -> KeyId {
        self.id
    }

    /// Instance numbers handed out so far.
    pub fn instances(&self) -> u64 {
        match self.numbers.lock().as_deref() {
            Ok(Numbers::Process { next }) => (*next).min(ledger::NUMBERS),
            Ok(Numbers::Ledger { handed, .. } | Numbers::Random { handed }) => *handed,
            Ok(Numbers::Refused(_)) | Err(_) => 0,
        }
    }

    /// The next instance: its number and its first count.
    fn next_instance(&self) -> Result<(u32, u64), InstanceError> {
        let mut n = self.numbers.lock().map_err(|_| InstanceError::Refused("key space lock poisoned".into()))?;
        match &mut *n {
            Numbers::Process { next } => {
                let i = u32::try_from(*next).map_err(|_| InstanceError::Exhausted(self.id))?;
                *next += 1;
                Ok((i, 0))
            }
            Numbers::Ledger { ledger: book, next, end, handed } => {
                if *next == *end {
                    let r = book.reserve(self.id, ledger::BLOCK)?;
                    (*next, *end) = (r.start, r.end);
                }
                if *next == *end {
                    return Err(InstanceError::Exhausted(self.id));
                }
                let i = u32::try_from(*next).map_err(|_| InstanceError::Exhausted(self.id))?;
                let start = random_start()?;
                *next += 1;
                *handed += 1;
                Ok((i, start))
            }
            Numbers::Random { handed } => {
                let mut b = [0u8; 4];
                getrandom::fill(&mut b).map_err(no_random)?;
                let start = random_start()?;
                *handed += 1;
                Ok((u32::from_be_bytes(b), start))
            }
            Numbers::Refused(why) => Err(InstanceError::Refused(why.clone())),
        }
    }
}

/// A random first count below 2^63 (so an instance has at least 2^63 nonces to seal with).
fn random_start() -> Result<u64, InstanceError> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(no_random)?;
    Ok(u64::from_be_bytes(b) >> 1)
}

fn no_random(e: getrandom::Error) -> InstanceError {
    InstanceError::Refused(format!("no random bytes: {e}"))
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
    /// Its counter's name.
    pub fn name(self) -> &'static str {
        match self {
            AesDrop::Malformed => "malformed",
            AesDrop::NotUdp4 => "not_udp4",
            AesDrop::TooLarge => "too_large",
            AesDrop::BadTag => "bad_tag",
            AesDrop::NoncesExhausted => "nonces_exhausted",
        }
    }

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

/// A UDP payload's place in a frame: the IP header's offset, the UDP header's, the IP packet's end.
type Offsets = (usize, usize, usize);

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
    /// A new instance under `space`, with an instance number no other has had (by chance alone,
    /// under [`KeySpace::random`]).
    pub fn new(space: &Arc<KeySpace>) -> Result<AesTask, InstanceError> {
        let (instance, count) = space.next_instance()?;
        Ok(AesTask { space: space.clone(), instance, count, info: FrameInfo::default(), stats: AesStats::default() })
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

    /// Checks a seal of the frame may go ahead; returns (l3, l4, end) and the nonce to use.
    fn seal_check(&mut self, frame: &[u8]) -> Result<(Offsets, [u8; NONCE_LEN]), AesDrop> {
        let at = self.payload(frame)?;
        if at.2 - at.0 + OVERHEAD > MAX_IP_LEN {
            return Err(AesDrop::TooLarge);
        }
        if self.count == u64::MAX {
            return Err(AesDrop::NoncesExhausted);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce[..4].copy_from_slice(&self.instance.to_be_bytes());
        nonce[4..].copy_from_slice(&self.count.to_be_bytes());
        Ok((at, nonce))
    }

    /// Seals a frame laid out for it: the headers up to the UDP payload's start `body`, then
    /// room for the nonce, then the plaintext, then room for the tag (the frame's end).
    fn seal_laid_out(&mut self, frame: &mut [u8], (l3, l4): (usize, usize), nonce: [u8; NONCE_LEN]) {
        let body = l4 + 8;
        let end = frame.len();
        frame[body..body + NONCE_LEN].copy_from_slice(&nonce);
        // Encryption fails only past 2^36 bytes of plaintext; a frame is never near that.
        if let Ok(tag) = self.space.cipher.encrypt_in_place_detached(
            Nonce::from_slice(&nonce),
            b"",
            &mut frame[body + NONCE_LEN..end - TAG_LEN],
        ) {
            frame[end - TAG_LEN..].copy_from_slice(&tag);
        }
        self.count += 1;
        refit_udp4(frame, l3, l4, end);
    }

    fn seal_inner(&mut self, frame: &mut Vec<u8>) -> Result<(), AesDrop> {
        let ((l3, l4, end), nonce) = self.seal_check(frame)?;
        let body = l4 + 8;
        frame.truncate(end);
        frame.resize(end + OVERHEAD, 0);
        frame.copy_within(body..end, body + NONCE_LEN);
        self.seal_laid_out(frame, (l3, l4), nonce);
        Ok(())
    }

    /// [`seal`](Self::seal) for a packet buffer: the headers move into the headroom to make
    /// room for the nonce (not the payload back), when there is headroom; the tag needs room at
    /// the end (`too_large` if the buffer has none).
    pub fn seal_packet(&mut self, p: &mut tern_io::Packet) -> Result<(), AesDrop> {
        let r = self.seal_packet_inner(p);
        if r.is_ok() {
            self.stats.sealed += 1;
        }
        self.count(r)
    }

    fn seal_packet_inner(&mut self, p: &mut tern_io::Packet) -> Result<(), AesDrop> {
        let ((l3, l4, end), nonce) = self.seal_check(p.data())?;
        let body = l4 + 8;
        if p.headroom() >= NONCE_LEN && end + TAG_LEN <= p.capacity() {
            p.set_len(end);
            p.push_front(NONCE_LEN);
            p.set_len(end + OVERHEAD);
            p.data_mut().copy_within(NONCE_LEN..NONCE_LEN + body, 0);
        } else if end + OVERHEAD <= p.capacity() {
            p.set_len(end + OVERHEAD);
            p.data_mut().copy_within(body..end, body + NONCE_LEN);
        } else {
            return Err(AesDrop::TooLarge);
        }
        self.seal_laid_out(p.data_mut(), (l3, l4), nonce);
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

    /// Decrypts where it lies (GCM checks the tag before it decrypts: a frame whose tag does
    /// not match is left as it was); returns (l3, l4, end).
    fn open_where_lies(&mut self, frame: &mut [u8]) -> Result<(usize, usize, usize), AesDrop> {
        let (l3, l4, end) = self.payload(frame)?;
        let body = l4 + 8;
        if end - body < OVERHEAD {
            return Err(AesDrop::BadTag);
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&frame[body..body + NONCE_LEN]);
        let mut tag = [0u8; TAG_LEN];
        tag.copy_from_slice(&frame[end - TAG_LEN..end]);
        self.space
            .cipher
            .decrypt_in_place_detached(
                Nonce::from_slice(&nonce),
                b"",
                &mut frame[body + NONCE_LEN..end - TAG_LEN],
                Tag::from_slice(&tag),
            )
            .map_err(|_| AesDrop::BadTag)?;
        Ok((l3, l4, end))
    }

    fn open_inner(&mut self, frame: &mut Vec<u8>) -> Result<(), AesDrop> {
        let (l3, l4, end) = self.open_where_lies(frame)?;
        let body = l4 + 8;
        frame.copy_within(body + NONCE_LEN..end - TAG_LEN, body);
        frame.truncate(end - OVERHEAD);
        let end = frame.len();
        refit_udp4(frame, l3, l4, end);
        Ok(())
    }

    /// [`open`](Self::open) for a packet buffer: the headers move forward over the nonce (not
    /// the payload back), and the bytes they leave become headroom.
    pub fn open_packet(&mut self, p: &mut tern_io::Packet) -> Result<(), AesDrop> {
        let r = self.open_where_lies(p.data_mut());
        let r = r.map(|(l3, l4, end)| {
            let body = l4 + 8;
            p.set_len(end - TAG_LEN);
            p.data_mut().copy_within(0..body, NONCE_LEN);
            p.pull_front(NONCE_LEN);
            refit_udp4(p.data_mut(), l3, l4, end - OVERHEAD);
            self.stats.opened += 1;
        });
        self.count(r)
    }

    /// Its counters.
    pub fn stats(&self) -> AesStats {
        self.stats
    }
}
