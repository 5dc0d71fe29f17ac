//! Frames for `trace` commands: built from a field list (`udp,nw_src=10.1.0.1,nw_dst=10.2.0.7,
//! tp_dst=53`) or given as hex bytes, and described in one line.

use tern_wire::frame::{self, FrameInfo, L3};

/// Bytes as hex, one run.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of hex `s`, two digits a byte (None: not that).
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Parses a trace packet: hex bytes, or a field list.
pub fn parse_packet(s: &str) -> Result<Vec<u8>, String> {
    let compact: String = s.chars().filter(|c| !c.is_whitespace() && *c != ':').collect();
    if !compact.is_empty()
        && compact.len().is_multiple_of(2)
        && compact.chars().all(|c| c.is_ascii_hexdigit())
        && !s.contains('=')
    {
        return unhex(&compact).ok_or_else(|| format!("`{s}`: not hex"));
    }
    let (mut eth_src, mut eth_dst) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 0xa1]);
    let (mut src, mut dst): (Option<std::net::IpAddr>, Option<std::net::IpAddr>) = (None, None);
    let (mut proto, mut sport, mut dport, mut ttl, mut len) = ("udp", 1024u16, 80u16, 64u8, 18usize);
    for field in s.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let (k, v) = field.split_once('=').map_or((field, ""), |(k, v)| (k.trim(), v.trim()));
        let num = |what: &str| format!("{k}: `{v}` is not {what}");
        match k {
            "udp" | "tcp" | "icmp" => {
                proto = if k == "udp" {
                    "udp"
                } else if k == "tcp" {
                    "tcp"
                } else {
                    "icmp"
                }
            }
            "ip" | "ipv6" => {}
            "eth_src" => eth_src = frame::parse_mac(v)?,
            "eth_dst" => eth_dst = frame::parse_mac(v)?,
            "nw_src" | "ipv6_src" => src = Some(v.parse().map_err(|_| num("an address"))?),
            "nw_dst" | "ipv6_dst" => dst = Some(v.parse().map_err(|_| num("an address"))?),
            "tp_src" => sport = v.parse().map_err(|_| num("a port"))?,
            "tp_dst" => dport = v.parse().map_err(|_| num("a port"))?,
            "ttl" | "hop_limit" => ttl = v.parse().map_err(|_| num("0-255"))?,
            "len" => len = v.parse::<usize>().ok().filter(|&l| l <= 1400).ok_or_else(|| num("0-1400"))?,
            _ => return Err(format!("unknown field `{k}` (hex bytes, or fields such as udp,nw_dst=10.2.0.7)")),
        }
    }
    let dst = dst.ok_or("give a destination: nw_dst=ADDR (or ipv6_dst=ADDR)")?;
    let payload = vec![0x5a; len];
    let mut out = Vec::new();
    match (src, dst) {
        (None | Some(std::net::IpAddr::V4(_)), std::net::IpAddr::V4(d)) => {
            let s = match src {
                Some(std::net::IpAddr::V4(s)) => s.octets(),
                _ => [10, 1, 0, 1],
            };
            match proto {
                "tcp" => frame::build_tcp4(&mut out, eth_src, eth_dst, s, d.octets(), sport, dport, ttl, &payload),
                "icmp" => {
                    frame::build_icmp4_echo(&mut out, eth_src, eth_dst, s, d.octets(), sport, dport, ttl, &payload)
                }
                _ => frame::build_udp4(&mut out, eth_src, eth_dst, s, d.octets(), sport, dport, ttl, &payload),
            }
        }
        (None | Some(std::net::IpAddr::V6(_)), std::net::IpAddr::V6(d)) => {
            if proto != "udp" {
                return Err("IPv6 trace packets are UDP (give hex bytes for others)".into());
            }
            let s = match src {
                Some(std::net::IpAddr::V6(s)) => s.octets(),
                _ => "2001:db8:1::1".parse::<std::net::Ipv6Addr>().map(|a| a.octets()).unwrap_or_default(),
            };
            frame::build_udp6(&mut out, eth_src, eth_dst, s, d.octets(), sport, dport, ttl, &payload)
        }
        _ => return Err("source and destination are of different IP versions".into()),
    }
    Ok(out)
}

/// One line describing a parsed frame.
pub fn summary(info: &FrameInfo) -> String {
    let addr = |a: u128| match info.l3 {
        L3::Ipv4 => std::net::Ipv4Addr::from(a as u32).to_string(),
        _ => std::net::Ipv6Addr::from(a).to_string(),
    };
    let proto = match info.proto {
        6 => "tcp".to_string(),
        17 => "udp".to_string(),
        1 | 58 => "icmp".to_string(),
        p => format!("proto {p}"),
    };
    match info.l3 {
        L3::Other => format!("not IP (ethertype {:#06x})", info.ethertype),
        L3::Ipv4 | L3::Ipv6 => format!(
            "{} {} -> {}, {proto} {} -> {}, ttl {}{}",
            if info.l3 == L3::Ipv4 { "ipv4" } else { "ipv6" },
            addr(info.src),
            addr(info.dst),
            info.src_port,
            info.dst_port,
            info.ttl,
            if info.vlans > 0 { format!(", vlan {}", info.vlan_tci & 0x0fff) } else { String::new() }
        ),
    }
}

pub fn hexdump(b: &[u8]) -> String {
    b.chunks(16)
        .enumerate()
        .map(|(i, c)| {
            format!("    {:04x}  {}", i * 16, c.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}
