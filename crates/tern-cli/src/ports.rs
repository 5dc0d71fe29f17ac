//! Ports of the frame servers.

use std::net::SocketAddr;

use tern_io::afpacket::AfPacketPort;
use tern_io::udp::{UdpConfig, UdpPort};
use tern_io::{Pool, Port};

/// A port of a frame server (`chain serve`, `switch serve`, `switch server`): an interface
/// (`afpacket:IFNAME`, whole frames, root) or frames carried in UDP datagrams
/// (`udp:BIND=PEER`).
pub(crate) enum FramePort {
    AfPacket(AfPacketPort),
    Udp(UdpPort, SocketAddr),
}

impl FramePort {
    pub(crate) fn open(spec: &str, pool: &Pool) -> Result<FramePort, String> {
        if let Some(ifname) = spec.strip_prefix("afpacket:") {
            return AfPacketPort::open(ifname, pool).map(FramePort::AfPacket).map_err(|e| format!("port {spec}: {e}"));
        }
        if let Some(rest) = spec.strip_prefix("udp:") {
            let (bind, peer) =
                rest.split_once('=').ok_or_else(|| format!("port {spec}: give udp:BIND=PEER (two addresses)"))?;
            let bind: SocketAddr = bind.parse().map_err(|_| format!("port {spec}: `{bind}` is not an address:port"))?;
            let peer: SocketAddr = peer.parse().map_err(|_| format!("port {spec}: `{peer}` is not an address:port"))?;
            let p = UdpPort::bind(bind, pool, &UdpConfig::default())
                .map_err(|e| format!("port {spec}: cannot bind {bind}: {e}"))?;
            return Ok(FramePort::Udp(p, peer));
        }
        Err(format!("port {spec}: not afpacket:IFNAME or udp:BIND=PEER"))
    }

    pub(crate) fn port(&mut self) -> &mut dyn Port {
        match self {
            FramePort::AfPacket(p) => p,
            FramePort::Udp(p, _) => p,
        }
    }

    pub(crate) fn peer(&self) -> Option<SocketAddr> {
        match self {
            FramePort::AfPacket(_) => None,
            FramePort::Udp(_, peer) => Some(*peer),
        }
    }
}
