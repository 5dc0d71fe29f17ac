//! Two hosts routed through `tern flow serve` over veth pairs (root only: `cargo test --
//! --ignored`). Host 1 (10.1.0.1, netns) pings host 2 (10.2.0.1, another netns) and sends it UDP
//! datagrams; the switch in the root namespace sits between them on AF_PACKET ports. The
//! datagrams and replies arrive with the TTL decremented and the MACs rewritten (else the
//! receiving kernel would not take them); the first packet of each flow goes to the slow path
//! and installs a rule, the rest hit the cache, as the switch's counters show.
//!
//! The hosts' traffic comes from Python 3 (raw ICMP and UDP sockets): no ping or nc needed.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Cleanup, ip, python, run};

/// Host 1's traffic: `pings` ICMP echoes and `udp` datagrams to host 2, then prints one line per
/// reply: `icmp TTL` for echo replies (raw socket: the IP header is included), `udp TTL` for
/// datagrams host 2's receiver echoed back with the TTL it saw.
const HOST1: &str = r#"
import socket, struct, sys, time
dst, pings, udp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
icmp.settimeout(2)
for seq in range(pings):
    body = struct.pack("!BBHHH", 8, 0, 0, 0x7e57, seq) + b"tern-ping" * 4 + b"!"
    body = body[:2] + struct.pack("!H", csum(body + b"\0" * (len(body) % 2))) + body[4:]
    icmp.sendto(body, (dst, 0))
    while True:
        pkt, _ = icmp.recvfrom(2048)
        if pkt[20] == 0 and struct.unpack("!H", pkt[24:26])[0] == 0x7e57:
            print("icmp", pkt[8], flush=True)
            break
    time.sleep(0.05)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
for i in range(udp):
    u.sendto(b"hello %d" % i, (dst, 7777))
    data, _ = u.recvfrom(2048)
    print("udp", data.decode().split()[-1], flush=True)
"#;

/// Host 2's UDP echo: answers each datagram with the TTL it arrived with.
const HOST2: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 12, 1)  # IP_RECVTTL (Linux)
s.bind(("0.0.0.0", 7777))
print("ready", flush=True)
for _ in range(int(sys.argv[1])):
    data, anc, _, peer = s.recvmsg(2048, 64)
    ttl = [int.from_bytes(d[:4], sys.byteorder) for (l, t, d) in anc if t == 2]  # IP_TTL
    s.sendto(data + b" ttl %d" % (ttl[0] if ttl else -1), peer)
"#;

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    let mut t = String::new();
    s.read_to_string(&mut t).unwrap();
    t.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default()
}

#[test]
#[ignore = "needs root: network namespaces and veth pairs"]
fn two_hosts_route_through_the_switch() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let id = std::process::id() % 10_000;
    let (h1, h2) = (format!("tern-h1-{id}"), format!("tern-h2-{id}"));
    let (s0, s1) = (format!("tsw0-{id}"), format!("tsw1-{id}"));
    let mut guard = Cleanup { netns: vec![h1.clone(), h2.clone()], links: vec![s0.clone(), s1.clone()], child: None };
    for (ns, sw, host_mac, gw_mac, addr, gw) in [
        (&h1, &s0, "02:00:00:00:00:01", "02:00:00:00:00:a1", "10.1.0.1/16", "10.1.0.254"),
        (&h2, &s1, "02:00:00:00:00:02", "02:00:00:00:00:a2", "10.2.0.1/16", "10.2.0.254"),
    ] {
        ip(&format!("netns add {ns}"));
        // No IPv6 autoconfiguration chatter through the switch.
        run(&["ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"]);
        ip(&format!("link add {sw} type veth peer name eth0 netns {ns}"));
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{sw}/disable_ipv6"), "1");
        ip(&format!("link set {sw} address {gw_mac} up"));
        ip(&format!("-n {ns} link set eth0 address {host_mac} up"));
        ip(&format!("-n {ns} link set lo up"));
        ip(&format!("-n {ns} addr add {addr} dev eth0"));
        ip(&format!("-n {ns} route add default via {gw}"));
        // The switch routes; it does not answer ARP.
        ip(&format!("-n {ns} neigh replace {gw} lladdr {gw_mac} dev eth0"));
    }
    let dir = std::env::temp_dir().join(format!("tern-netns-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("switch.toml");
    let metrics_addr = format!("127.0.0.1:{}", 19_000 + id % 1000);
    std::fs::write(
        &cfg,
        format!(
            r#"
[[port]]
name = "left"
afpacket = "{s0}"
[[port]]
name = "right"
afpacket = "{s1}"
[[ofu]]
id = 1
kind = "em"
[cache]
mode = "exact"
[acl]
rules = ["priority=10,tcp,tp_dst=22 actions=deny"]
[routes]
routes = ["10.1.0.0/16 h1", "10.2.0.0/16 h2"]
[[next_hop]]
name = "h1"
port = "left"
eth_src = "02:00:00:00:00:a1"
eth_dst = "02:00:00:00:00:01"
[[next_hop]]
name = "h2"
port = "right"
eth_src = "02:00:00:00:00:a2"
eth_dst = "02:00:00:00:00:02"
"#
        ),
    )
    .unwrap();
    guard.child = Some(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["flow", "serve", cfg.to_str().unwrap(), "--metrics", &metrics_addr, "--duration", "60"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&metrics_addr).is_err() {
        assert!(Instant::now() < deadline, "tern flow serve did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (pings, udp) = (5, 5);
    let mut echo = Command::new("ip")
        .args(["netns", "exec", &h2, &py, "-c", HOST2, &udp.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(echo.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
    }
    let out = Command::new("ip")
        .args(["netns", "exec", &h1, &py, "-c", HOST1, "10.2.0.1", &pings.to_string(), &udp.to_string()])
        .output()
        .unwrap();
    let _ = echo.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "host 1: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    // Echo replies: host 2 answered with TTL 64, one hop through the switch leaves 63.
    assert_eq!(lines.iter().filter(|l| **l == "icmp 63").count(), pings, "{stdout}");
    // Host 2 saw host 1's datagrams with TTL 63 (and its answers came back).
    assert_eq!(lines.iter().filter(|l| **l == "udp 63").count(), udp, "{stdout}");

    let m = http_get(&metrics_addr, "/metrics");
    let upcalls = metric(&m, "tern_flow_upcalls_total");
    let slow = metric(&m, "tern_flow_slow_forwarded_packets_total");
    let hits = metric(&m, "tern_flow_cache_hits_packets_total");
    let installed = metric(&m, "tern_flow_rules_installed_total");
    let fast = metric(&m, "tern_flow_fast_path_packets_total");
    // Four flows (echo request, echo reply, UDP there, UDP back) each take the slow path once.
    // The replies may race their flow's first install: allow a few more upcalls, never one per
    // packet.
    let total = 2 * (pings + udp) as u64;
    eprintln!(
        "{total} packets: {upcalls} upcalls ({slow} forwarded), {hits} cache hits ({fast} on the fast path), {installed} rules installed"
    );
    assert!((4..=8).contains(&slow), "slow path forwarded {slow}\n{m}");
    assert!(upcalls >= slow && installed >= 4, "upcalls {upcalls}, installed {installed}\n{m}");
    assert!(hits >= total - slow, "hits {hits} of {total}\n{m}");
    // The cached UDP datagrams (common frames) take the pipeline's fast path; pings do not.
    assert!(fast > 0 && fast <= hits, "fast path {fast} of {hits} hits\n{m}");
    // dump-flows shows the cached rules and their counters.
    let flows = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["flow", "dump-flows", "--server", &metrics_addr])
        .output()
        .unwrap();
    let flows = String::from_utf8_lossy(&flows.stdout).into_owned();
    assert!(flows.contains("nw_dst=10.2.0.1") && flows.contains("n_packets="), "{flows}");
    assert!(flows.contains("dec_ttl") && flows.contains("set_field:eth_dst=02:00:00:00:00:02"), "{flows}");
    std::fs::remove_dir_all(&dir).unwrap();
}
