//! pcap files as ports and as a recorder.
//!
//! - [`PcapIn`]: a port that receives the Ethernet frames of a pcap or pcapng capture, as fast as
//!   asked or at the capture's own pace ([`Timing`]); it sends nothing (what it is given is
//!   counted as dropped).
//! - [`PcapOut`]: a port that writes every frame it is given to a pcap file and receives nothing.
//! - [`Tracer`]: a wrapper that records what a UDP port sends and receives. UDP payloads get
//!   synthesised Ethernet, IP and UDP headers so Wireshark and tshark decode them; for QNP the
//!   payload then starts at byte 64 of each frame, as on the paper's wire.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};

use crate::{Batch, DEFAULT_HEADROOM, Pool, Port, PortStats};

/// When a [`PcapIn`] hands out its frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Timing {
    /// As fast as they are asked for.
    Fast,
    /// At the capture's pace divided by `speed` (1.0 = the original gaps; 2.0 = twice as fast),
    /// the first frame at the first `recv`.
    Original {
        /// Speed-up over the capture.
        speed: f64,
    },
}

impl std::str::FromStr for Timing {
    type Err = String;
    fn from_str(s: &str) -> Result<Timing, String> {
        match s {
            "fast" => Ok(Timing::Fast),
            "original" => Ok(Timing::Original { speed: 1.0 }),
            _ => match s.strip_prefix("x").and_then(|x| x.parse::<f64>().ok()) {
                Some(speed) if speed > 0.0 && speed.is_finite() => Ok(Timing::Original { speed }),
                _ => Err(format!("timing {s:?}: expected fast, original or xN (N > 0, a speed-up)")),
            },
        }
    }
}

enum Source {
    Pcap(PcapReader<BufReader<File>>),
    PcapNg(PcapNgReader<BufReader<File>>),
}

/// A port that receives the frames of a capture file.
pub struct PcapIn {
    path: String,
    source: Source,
    pool: Pool,
    timing: Timing,
    /// The next frame and its capture time.
    next: Option<(Duration, Vec<u8>)>,
    /// (wall clock, capture time) of the first frame handed out.
    origin: Option<(Instant, Duration)>,
    done: bool,
    /// Link types of the pcapng section's interfaces, by interface id.
    linktypes: Vec<DataLink>,
    /// Frames skipped: not Ethernet (pcapng interfaces of another link type), too long for a
    /// buffer, or unreadable records after which reading stops.
    skipped: u64,
    /// Packet records read so far (pcapng: packet blocks), skipped ones included.
    records: u64,
    error: Option<String>,
    stats: PortStats,
}

impl std::fmt::Debug for PcapIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapIn")
            .field("path", &self.path)
            .field("done", &self.done)
            .field("stats", &self.stats)
            .finish()
    }
}

fn bad(path: &Path, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
}

impl PcapIn {
    /// Opens a pcap or pcapng file of Ethernet frames (told apart by their magic numbers).
    pub fn open(path: &Path, pool: &Pool, timing: Timing) -> io::Result<PcapIn> {
        let mut file = File::open(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let mut magic = [0u8; 4];
        file.read_exact(&mut magic).map_err(|_| bad(path, "too short for a capture"))?;
        drop(file);
        let reader = BufReader::new(File::open(path)?);
        let source = if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
            Source::PcapNg(PcapNgReader::new(reader).map_err(|e| bad(path, e))?)
        } else {
            let r = PcapReader::new(reader).map_err(|e| bad(path, format!("neither pcap nor pcapng ({e})")))?;
            if r.header().datalink != DataLink::ETHERNET {
                return Err(bad(
                    path,
                    format!("link type {:?}; only Ethernet captures can be replayed", r.header().datalink),
                ));
            }
            Source::Pcap(r)
        };
        let mut p = PcapIn {
            path: path.display().to_string(),
            source,
            pool: pool.clone(),
            timing,
            next: None,
            origin: None,
            done: false,
            linktypes: Vec::new(),
            skipped: 0,
            records: 0,
            error: None,
            stats: PortStats::default(),
        };
        p.advance();
        Ok(p)
    }

    /// Whether every frame has been handed out.
    pub fn finished(&self) -> bool {
        self.done && self.next.is_none()
    }

    /// Frames skipped (another link type, longer than a buffer).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The read error that ended the capture early, if one did: the file, the number of the
    /// record (from 1; pcapng: of the packet blocks) it could not read, and why.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    fn advance(&mut self) {
        let room = self.pool.buf_size().saturating_sub(DEFAULT_HEADROOM);
        while self.next.is_none() && !self.done {
            let item = match &mut self.source {
                Source::Pcap(r) => match r.next_packet() {
                    None => None,
                    Some(Ok(p)) => Some(Ok(Some((p.timestamp, p.data.into_owned())))),
                    Some(Err(e)) => Some(Err(e.to_string())),
                },
                Source::PcapNg(r) => match r.next_block() {
                    None => None,
                    Some(Ok(Block::SectionHeader(_))) => {
                        self.linktypes.clear();
                        continue;
                    }
                    Some(Ok(Block::InterfaceDescription(i))) => {
                        self.linktypes.push(i.linktype);
                        continue;
                    }
                    Some(Ok(Block::EnhancedPacket(p))) => {
                        let ether = self.linktypes.get(p.interface_id as usize) == Some(&DataLink::ETHERNET);
                        Some(Ok(ether.then(|| (p.timestamp, p.data.into_owned()))))
                    }
                    Some(Ok(Block::SimplePacket(p))) => {
                        let ether = self.linktypes.first() == Some(&DataLink::ETHERNET);
                        Some(Ok(ether.then(|| (Duration::ZERO, p.data.into_owned()))))
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => Some(Err(e.to_string())),
                },
            };
            match item {
                None => self.done = true,
                Some(Err(e)) => {
                    self.error = Some(format!("{}: record {}: {e}", self.path, self.records + 1));
                    self.done = true;
                }
                Some(Ok(Some((ts, data)))) if data.len() <= room => {
                    self.records += 1;
                    self.next = Some((ts, data));
                }
                Some(Ok(_)) => {
                    self.records += 1;
                    self.skipped += 1;
                }
            }
        }
    }

    fn due(&self, ts: Duration, now: Instant) -> Option<Instant> {
        match (self.timing, self.origin) {
            (Timing::Fast, _) | (_, None) => Some(now),
            (Timing::Original { speed }, Some((wall, first))) => Some(wall + ts.saturating_sub(first).div_f64(speed)),
        }
    }
}

impl Port for PcapIn {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let mut n = 0;
        while !batch.is_full() {
            let Some((ts, _)) = &self.next else { break };
            let ts = *ts;
            if self.due(ts, now).is_some_and(|at| at > now) {
                break;
            }
            self.origin.get_or_insert((now, ts));
            let Some((_, data)) = self.next.take() else { break };
            let mut p = self.pool.packet();
            p.reserve_headroom(DEFAULT_HEADROOM);
            if p.extend_from_slice(&data).is_err() {
                self.stats.rx_dropped += 1;
                self.pool.put(p);
            } else {
                self.stats.rx_bytes += data.len() as u64;
                batch.push(p);
                n += 1;
            }
            self.advance();
        }
        self.stats.received(n);
        Ok(n)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        self.stats.tx_dropped += batch.len() as u64;
        batch.recycle(&self.pool);
        Ok(0)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        let now = Instant::now();
        let until = match &self.next {
            Some((ts, _)) => self.due(*ts, now).unwrap_or(now),
            None => now + timeout,
        };
        std::thread::sleep(until.saturating_duration_since(now).min(timeout));
        Ok(())
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::from(([0, 0, 0, 0], 0))
    }

    fn poll_at(&self) -> Option<Instant> {
        let (ts, _) = self.next.as_ref()?;
        self.due(*ts, Instant::now())
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

/// A port that writes the frames it sends to a pcap file (Ethernet, microsecond timestamps).
/// Writes are buffered; the file is complete once the port is dropped.
pub struct PcapOut {
    path: String,
    writer: PcapWriter<BufWriter<File>>,
    pool: Pool,
    write_errors: u64,
    stats: PortStats,
}

impl std::fmt::Debug for PcapOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapOut").field("path", &self.path).field("stats", &self.stats).finish()
    }
}

impl PcapOut {
    /// Creates (or truncates) the file.
    pub fn create(path: &Path, pool: &Pool) -> io::Result<PcapOut> {
        let file = File::create(path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        let header = PcapHeader { datalink: DataLink::ETHERNET, snaplen: 65535, ..PcapHeader::default() };
        let writer = PcapWriter::with_header(BufWriter::new(file), header).map_err(|e| bad(path, e))?;
        Ok(PcapOut {
            path: path.display().to_string(),
            writer,
            pool: pool.clone(),
            write_errors: 0,
            stats: PortStats::default(),
        })
    }
}

impl Port for PcapOut {
    fn recv(&mut self, _now: Instant, _batch: &mut Batch) -> io::Result<usize> {
        Ok(0)
    }

    fn send(&mut self, _now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let mut sent = 0;
        for p in batch.iter() {
            let d = p.data();
            if self.writer.write_packet(&PcapPacket::new(ts, d.len() as u32, d)).is_ok() {
                self.stats.tx_bytes += d.len() as u64;
                sent += 1;
            } else {
                self.write_errors += 1;
                self.stats.tx_dropped += 1;
            }
        }
        self.stats.sent(sent);
        batch.recycle(&self.pool);
        Ok(sent)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        std::thread::sleep(timeout);
        Ok(())
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::from(([0, 0, 0, 0], 0))
    }

    fn stats(&self) -> PortStats {
        self.stats
    }
}

const LOCAL_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];

/// Records traffic of the wrapped port.
pub struct Tracer<P> {
    inner: P,
    writer: PcapWriter<BufWriter<File>>,
    frame: Vec<u8>,
    write_errors: u64,
}

impl<P> std::fmt::Debug for Tracer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").field("write_errors", &self.write_errors).finish()
    }
}

/// Builds the Ethernet frame that would carry `payload` from `src` to `dst` over UDP.
pub fn udp_frame(src: SocketAddr, dst: SocketAddr, payload: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let eth = PacketBuilder::ethernet2(LOCAL_MAC, PEER_MAC);
    let result = match (src, dst) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => {
            eth.ipv4(s.ip().octets(), d.ip().octets(), 64).udp(s.port(), d.port()).write(out, payload)
        }
        (s, d) => {
            let v6 = |a: SocketAddr| match a {
                SocketAddr::V4(v4) => v4.ip().to_ipv6_mapped().octets(),
                SocketAddr::V6(v6) => v6.ip().octets(),
            };
            eth.ipv6(v6(s), v6(d), 64).udp(s.port(), d.port()).write(out, payload)
        }
    };
    if result.is_err() {
        out.clear();
    }
}

impl<P: Port> Tracer<P> {
    /// Wraps `inner`, writing a new pcap file at `path`.
    pub fn create(inner: P, path: &Path) -> io::Result<Self> {
        let file = BufWriter::new(File::create(path)?);
        let writer = PcapWriter::new(file).map_err(io::Error::other)?;
        Ok(Tracer { inner, writer, frame: Vec::with_capacity(2048), write_errors: 0 })
    }

    fn record(
        writer: &mut PcapWriter<BufWriter<File>>,
        frame: &mut Vec<u8>,
        errors: &mut u64,
        src: SocketAddr,
        dst: SocketAddr,
        payload: &[u8],
    ) {
        udp_frame(src, dst, payload, frame);
        if frame.is_empty() {
            *errors += 1;
            return;
        }
        let ts = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        if writer.write_packet(&PcapPacket::new(ts, frame.len() as u32, frame)).is_err() {
            *errors += 1;
        }
    }

    /// Packets that could not be recorded.
    pub fn write_errors(&self) -> u64 {
        self.write_errors
    }

    /// The wrapped port.
    pub fn inner(&self) -> &P {
        &self.inner
    }
}

impl<P: Port> Port for Tracer<P> {
    fn recv(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let before = batch.len();
        let n = self.inner.recv(now, batch)?;
        let local = self.inner.local_addr();
        for i in before..batch.len() {
            let p = batch.get(i).expect("index below batch length");
            Self::record(&mut self.writer, &mut self.frame, &mut self.write_errors, p.peer(), local, p.data());
        }
        Ok(n)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let local = self.inner.local_addr();
        for i in 0..batch.len() {
            let p = batch.get(i).expect("index below batch length");
            Self::record(&mut self.writer, &mut self.frame, &mut self.write_errors, local, p.peer(), p.data());
        }
        self.inner.send(now, batch)
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<()> {
        self.inner.wait(timeout)
    }

    fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr()
    }

    fn poll_at(&self) -> Option<Instant> {
        self.inner.poll_at()
    }

    fn stats(&self) -> PortStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Pool, mem};

    #[test]
    fn frames_go_out_and_come_back_in() {
        let dir = std::env::temp_dir().join(format!("tern-pcapio-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("frames.pcap");
        let pool = Pool::new(64, 2048);
        let frames: Vec<Vec<u8>> = (0..40u8).map(|i| vec![i; 60 + usize::from(i) * 30]).collect();
        let mut out = PcapOut::create(&path, &pool).unwrap();
        let mut batch = Batch::new(32);
        for chunk in frames.chunks(32) {
            for f in chunk {
                let mut p = pool.packet();
                p.extend_from_slice(f).unwrap();
                batch.push(p);
            }
            out.send(Instant::now(), &mut batch).unwrap();
        }
        assert_eq!(out.stats().tx_packets, 40);
        drop(out);
        let mut inp = PcapIn::open(&path, &pool, Timing::Fast).unwrap();
        let mut got = Vec::new();
        while !inp.finished() {
            inp.recv(Instant::now(), &mut batch).unwrap();
            for p in batch.drain() {
                assert_eq!(p.headroom(), DEFAULT_HEADROOM);
                got.push(p.data().to_vec());
            }
        }
        assert_eq!(got, frames);
        assert_eq!((inp.skipped(), inp.error()), (0, None));
        // Original timing: all frames were written with one timestamp, so all are due at once.
        let mut inp = PcapIn::open(&path, &pool, "x2".parse().unwrap()).unwrap();
        assert_eq!(inp.recv(Instant::now(), &mut batch).unwrap(), 32);
        batch.recycle(&pool);
        // pcapng: interfaces declared in the file; frames of a non-Ethernet interface skipped.
        {
            use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
            use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
            let mut w = pcap_file::pcapng::PcapNgWriter::new(File::create(dir.join("f.pcapng")).unwrap()).unwrap();
            for linktype in [DataLink::ETHERNET, DataLink::RAW] {
                let idb = InterfaceDescriptionBlock { linktype, snaplen: 0, options: vec![] };
                w.write_pcapng_block(idb).unwrap();
            }
            for (i, f) in frames.iter().take(3).enumerate() {
                let epb = EnhancedPacketBlock {
                    interface_id: (i % 2) as u32,
                    timestamp: Duration::from_millis(i as u64),
                    original_len: f.len() as u32,
                    data: f[..].into(),
                    options: vec![],
                };
                w.write_pcapng_block(epb).unwrap();
            }
        }
        let mut inp = PcapIn::open(&dir.join("f.pcapng"), &pool, Timing::Fast).unwrap();
        inp.recv(Instant::now(), &mut batch).unwrap();
        let got: Vec<_> = batch.drain().map(|p| p.data().to_vec()).collect();
        assert_eq!(got, [frames[0].clone(), frames[2].clone()]);
        assert_eq!(inp.skipped(), 1);
        // Not a capture: a clear error naming the file.
        std::fs::write(dir.join("junk.pcap"), b"definitely not a capture").unwrap();
        let e = PcapIn::open(&dir.join("junk.pcap"), &pool, Timing::Fast).unwrap_err();
        assert!(e.to_string().contains("junk.pcap"), "{e}");
        // A capture cut inside its 4th record (as one whose writer was killed), and one whose
        // 2nd record claims 4 GB: the frames before are replayed, then the error names the
        // file and the record, and nothing of the claimed size is allocated.
        let whole = std::fs::read(&path).unwrap();
        // Where record k starts: the file header (24 bytes), then each record's 16 and its frame.
        let at = |k: usize| 24 + frames[..k].iter().map(|f| 16 + f.len()).sum::<usize>();
        let mut huge = whole[..at(1) + 16].to_vec();
        huge[at(1) + 8..at(1) + 16].copy_from_slice(&[0xf0, 0xff, 0xff, 0xff, 0xf0, 0xff, 0xff, 0xff]);
        huge.extend_from_slice(&[0; 100]);
        for (name, bytes, good) in [("cut.pcap", whole[..at(3) + 20].to_vec(), 3), ("huge.pcap", huge, 1)] {
            std::fs::write(dir.join(name), &bytes).unwrap();
            let mut inp = PcapIn::open(&dir.join(name), &pool, Timing::Fast).unwrap();
            let mut got = 0;
            while !inp.finished() {
                got += inp.recv(Instant::now(), &mut batch).unwrap();
                batch.recycle(&pool);
            }
            assert_eq!(got, good, "{name}");
            let e = inp.error().unwrap_or_else(|| panic!("{name}: no error"));
            assert!(e.starts_with(&format!("{}: record {}: ", dir.join(name).display(), good + 1)), "{e}");
        }
        assert!("x0".parse::<Timing>().is_err() && "slow".parse::<Timing>().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn records_both_directions_as_udp_frames() {
        let dir = std::env::temp_dir().join(format!("tern-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.pcap");
        let pool = Pool::new(8, 256);
        let (a, mut b) = mem::pair(&pool, 8);
        {
            let mut t = Tracer::create(a, &path).unwrap();
            let mut batch = Batch::new(4);
            let mut p = pool.packet();
            p.extend_from_slice(b"ping").unwrap();
            p.set_peer(b.local_addr());
            batch.push(p);
            t.send(Instant::now(), &mut batch).unwrap();
            b.recv(Instant::now(), &mut batch).unwrap();
            for p in batch.iter_mut() {
                p.set_peer(t.local_addr());
            }
            b.send(Instant::now(), &mut batch).unwrap();
            t.recv(Instant::now(), &mut batch).unwrap();
            assert_eq!(t.write_errors(), 0);
        }
        let mut reader = pcap_file::pcap::PcapReader::new(File::open(&path).unwrap()).unwrap();
        let mut frames = Vec::new();
        while let Some(p) = reader.next_packet() {
            frames.push(p.unwrap().data.into_owned());
        }
        assert_eq!(frames.len(), 2);
        for f in &frames {
            assert_eq!(f.len(), 42 + 4);
            assert_eq!(&f[42..], b"ping");
            let parsed = etherparse::SlicedPacket::from_ethernet(f).unwrap();
            assert!(matches!(parsed.transport, Some(etherparse::TransportSlice::Udp(_))));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
