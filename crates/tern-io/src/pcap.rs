//! A port wrapper that records every packet it sends and receives into a pcap file. UDP
//! payloads get synthesised Ethernet, IP and UDP headers so Wireshark and tshark decode them;
//! for QNP the payload then starts at byte 64 of each frame, as on the paper's wire.

use std::fs::File;
use std::io::{self, BufWriter};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapWriter};

use crate::{Batch, Port, PortStats};

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
            Self::record(&mut self.writer, &mut self.frame, &mut self.write_errors, p.peer, local, p.data());
        }
        Ok(n)
    }

    fn send(&mut self, now: Instant, batch: &mut Batch) -> io::Result<usize> {
        let local = self.inner.local_addr();
        for i in 0..batch.len() {
            let p = batch.get(i).expect("index below batch length");
            Self::record(&mut self.writer, &mut self.frame, &mut self.write_errors, local, p.peer, p.data());
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
            p.peer = b.local_addr();
            batch.push(p);
            t.send(Instant::now(), &mut batch).unwrap();
            b.recv(Instant::now(), &mut batch).unwrap();
            for p in batch.iter_mut() {
                p.peer = t.local_addr();
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
