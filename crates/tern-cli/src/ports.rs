//! Ports of the frame servers.

use std::net::SocketAddr;

use tern_io::afpacket::AfPacketPort;
use tern_io::afxdp::{AfXdpConfig, AfXdpPort};
use tern_io::udp::{UdpConfig, UdpPort};
use tern_io::{Pool, Port};

/// A port of a frame server (`chain serve`, `switch serve`, `switch server`): an interface
/// (`afpacket:IFNAME` or `afxdp:IFNAME`, whole frames, root) or frames carried in UDP datagrams
/// (`udp:BIND=PEER`: only datagrams from PEER are taken, others dropped and counted with the
/// port's `rx_dropped`); any with faults injected by `tern_io::fault::FaultInjector` when the
/// spec goes on with `,loss=P` (and `,duplicate=P`, `,reorder=P`, `,seed=N`,
/// `,dir=tx|rx|both`; this kernel has no netem).
pub(crate) enum FramePort {
    AfPacket(AfPacketPort),
    AfXdp(Box<AfXdpPort>),
    Udp(UdpTunnel),
    Faulty(Box<tern_io::fault::FaultInjector<FramePort>>, Option<SocketAddr>),
}

/// A `udp:BIND=PEER` port: the socket, its peer, the pool its buffers go back to, and the
/// datagrams dropped for coming from elsewhere.
pub(crate) struct UdpTunnel {
    port: UdpPort,
    peer: SocketAddr,
    pool: Pool,
    foreign: u64,
}

impl Port for FramePort {
    /// Receives as the port does; a `udp:` port keeps only the datagrams from its peer (the
    /// frames of anyone else who reaches BIND are dropped, not taken into the chain).
    fn recv(&mut self, now: std::time::Instant, batch: &mut tern_io::Batch) -> std::io::Result<usize> {
        let FramePort::Udp(t) = self else { return self.port().recv(now, batch) };
        let before = batch.len();
        let n = t.port.recv(now, batch)?;
        let (peer, pool) = (canonical(t.peer), &t.pool);
        let foreign = batch.remove_from(before, |p| canonical(p.peer()) != peer, |p| pool.put(p));
        t.foreign += foreign as u64;
        Ok(n - foreign)
    }
    fn send(&mut self, now: std::time::Instant, batch: &mut tern_io::Batch) -> std::io::Result<usize> {
        self.port().send(now, batch)
    }
    fn wait(&mut self, timeout: std::time::Duration) -> std::io::Result<()> {
        self.port().wait(timeout)
    }
    fn local_addr(&self) -> SocketAddr {
        self.port_ref().local_addr()
    }
    fn poll_at(&self) -> Option<std::time::Instant> {
        self.port_ref().poll_at()
    }
    /// A faulty port holds delayed packets no descriptor tells of: it has none.
    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.port_ref().wait_fd()
    }
    fn stats(&self) -> tern_io::PortStats {
        let mut s = self.port_ref().stats();
        if let FramePort::Udp(t) = self {
            s.rx_dropped += t.foreign;
        }
        s
    }
}

/// `a` with an IPv4-mapped IPv6 address as the IPv4 one (`tern_io::unmapped`).
fn canonical(a: SocketAddr) -> SocketAddr {
    SocketAddr::new(tern_io::unmapped(a.ip()), a.port())
}

/// The faults a port spec's options ask for (None: no options).
fn faults(spec: &str, opts: &str) -> Result<Option<tern_io::fault::FaultConfig>, String> {
    use tern_io::fault::{Direction, FaultConfig};
    if opts.is_empty() {
        return Ok(None);
    }
    let mut cfg = FaultConfig::default();
    for kv in opts.split(',') {
        let (k, v) = kv.split_once('=').ok_or_else(|| format!("port {spec}: option `{kv}` is not KEY=VALUE"))?;
        let p = || v.parse::<f64>().map_err(|_| format!("port {spec}: `{k}` = `{v}` is not a number"));
        match k {
            "loss" => cfg.loss = p()?,
            "duplicate" => cfg.duplicate = p()?,
            "reorder" => cfg.reorder = p()?,
            "seed" => cfg.seed = v.parse().map_err(|_| format!("port {spec}: `seed` = `{v}` is not a whole number"))?,
            "dir" => {
                cfg.direction = match v {
                    "tx" => Direction::Tx,
                    "rx" => Direction::Rx,
                    "both" => Direction::Both,
                    _ => return Err(format!("port {spec}: `dir` = `{v}`: tx, rx or both")),
                }
            }
            _ => return Err(format!("port {spec}: no option `{k}` (loss, duplicate, reorder, seed, dir)")),
        }
    }
    cfg.validate().map_err(|e| format!("port {spec}: {e}"))?;
    Ok(Some(cfg))
}

impl FramePort {
    pub(crate) fn open(spec: &str, pool: &Pool) -> Result<FramePort, String> {
        FramePort::open_polled(spec, pool, false)
    }

    /// As [`FramePort::open`]; with `busy_poll`, an `afxdp:` port prefers busy polling and
    /// moderates its interface by load, under load running the interface's receive work on
    /// threads on the caller's cores (`tern_io::afxdp`): for a caller that polls without
    /// sleeping.
    pub(crate) fn open_polled(spec: &str, pool: &Pool, busy_poll: bool) -> Result<FramePort, String> {
        let (base, opts) = spec.split_once(',').unwrap_or((spec, ""));
        let port = FramePort::open_plain(base, pool, busy_poll)?;
        match faults(spec, opts)? {
            None => Ok(port),
            Some(cfg) => {
                let peer = port.peer();
                Ok(FramePort::Faulty(Box::new(tern_io::fault::FaultInjector::new(port, pool, cfg)), peer))
            }
        }
    }

    fn open_plain(spec: &str, pool: &Pool, busy_poll: bool) -> Result<FramePort, String> {
        if let Some(ifname) = spec.strip_prefix("afpacket:") {
            return AfPacketPort::open(ifname, pool).map(FramePort::AfPacket).map_err(|e| format!("port {spec}: {e}"));
        }
        if let Some(ifname) = spec.strip_prefix("afxdp:") {
            return AfXdpPort::open(ifname, pool, AfXdpConfig { busy_poll })
                .map(|p| FramePort::AfXdp(Box::new(p)))
                .map_err(|e| format!("port {spec}: {e}"));
        }
        if let Some(rest) = spec.strip_prefix("udp:") {
            let (bind, peer) =
                rest.split_once('=').ok_or_else(|| format!("port {spec}: give udp:BIND=PEER (two addresses)"))?;
            let bind: SocketAddr = bind.parse().map_err(|_| format!("port {spec}: `{bind}` is not an address:port"))?;
            let peer: SocketAddr = peer.parse().map_err(|_| format!("port {spec}: `{peer}` is not an address:port"))?;
            let p = UdpPort::bind(bind, pool, &UdpConfig::default())
                .map_err(|e| format!("port {spec}: cannot bind {bind}: {e}"))?;
            return Ok(FramePort::Udp(UdpTunnel { port: p, peer, pool: pool.clone(), foreign: 0 }));
        }
        Err(format!("port {spec}: not afpacket:IFNAME, afxdp:IFNAME or udp:BIND=PEER"))
    }

    pub(crate) fn port(&mut self) -> &mut dyn Port {
        match self {
            FramePort::AfPacket(p) => p,
            FramePort::AfXdp(p) => p.as_mut(),
            FramePort::Udp(t) => &mut t.port,
            FramePort::Faulty(p, _) => p.as_mut(),
        }
    }

    fn port_ref(&self) -> &dyn Port {
        match self {
            FramePort::AfPacket(p) => p,
            FramePort::AfXdp(p) => p.as_ref(),
            FramePort::Udp(t) => &t.port,
            FramePort::Faulty(p, _) => p.as_ref(),
        }
    }

    pub(crate) fn peer(&self) -> Option<SocketAddr> {
        match self {
            FramePort::AfPacket(_) | FramePort::AfXdp(_) => None,
            FramePort::Udp(t) => Some(t.peer),
            FramePort::Faulty(_, peer) => *peer,
        }
    }

    /// Faults injected so far (sent, received), if it injects any.
    pub(crate) fn fault_stats(&self) -> Option<(tern_io::fault::FaultStats, tern_io::fault::FaultStats)> {
        match self {
            FramePort::Faulty(p, _) => Some((p.tx_stats(), p.rx_stats())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `udp:[::]:P=127.0.0.1:Q` port takes its peer's datagrams, which the dual-stack socket
    /// reports from `[::ffff:127.0.0.1]:Q`, and drops a stranger's.
    #[test]
    fn a_dual_stack_udp_port_knows_its_ipv4_peer() {
        let pool = Pool::new(64, tern_io::DEFAULT_BUF_SIZE);
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let stranger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let Ok(mut port) = FramePort::open(&format!("udp:[::]:0={}", peer.local_addr().unwrap()), &pool) else {
            return; // no IPv6 here
        };
        let to = SocketAddr::new([127, 0, 0, 1].into(), port.local_addr().port());
        stranger.send_to(b"not from the peer", to).unwrap();
        peer.send_to(b"from the peer", to).unwrap();
        let mut batch = tern_io::Batch::new(8);
        let t0 = std::time::Instant::now();
        while batch.is_empty() && t0.elapsed() < std::time::Duration::from_secs(5) {
            let _ = port.recv(std::time::Instant::now(), &mut batch);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let _ = port.recv(std::time::Instant::now(), &mut batch);
        assert_eq!(batch.iter().map(|p| p.data().to_vec()).collect::<Vec<_>>(), [b"from the peer".to_vec()]);
        assert_eq!(port.stats().rx_dropped, 1);
    }
}
