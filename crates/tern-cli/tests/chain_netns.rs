//! Two hosts joined through `tern chain serve` with a firewall and a NAT, over veth pairs on
//! AF_PACKET ports (root only: `cargo test -- --ignored`). Host 1 (10.0.0.1, inside) sends UDP
//! datagrams and opens a TCP connection to host 2 (198.51.100.2, outside); host 2 sees them
//! come from the NAT's external address 198.51.100.1 and answers, and the answers come back
//! to host 1 translated. The firewall denies TCP to port 23: that connection never opens, and
//! its drops are counted by name. The chain forwards frames as they are (a bump in the wire):
//! each host has a static neighbour entry giving the other's MAC.
//!
//! The hosts' traffic comes from Python 3 (UDP and TCP sockets): no nc needed. A second test
//! updates one tenant live 50 times while another streams through the same firewall position.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{Cleanup, ip, metrics, python, run, wait_for};

/// Host 2: a UDP and a TCP echo server (and a listener on 23 the firewall keeps closed); each
/// answer carries the address the request came from.
const HOST2: &str = r#"
import socket, sys, threading
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", 7777))
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", 8080))
t.listen(4)
telnet = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
telnet.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
telnet.bind(("0.0.0.0", 23))
telnet.listen(4)
def tcp():
    c, peer = t.accept()
    data = c.recv(2048)
    c.sendall(data + (" from %s" % peer[0]).encode())
    c.close()
threading.Thread(target=tcp, daemon=True).start()
print("ready", flush=True)
for _ in range(int(sys.argv[1])):
    data, peer = u.recvfrom(2048)
    u.sendto(data + (" from %s" % peer[0]).encode(), peer)
threading.Event().wait(3)
"#;

/// Host 1: `udp` datagrams, one TCP exchange to 8080, one attempt on 23; a line per answer.
const HOST1: &str = r#"
import socket, sys
dst, n = sys.argv[1], int(sys.argv[2])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
for i in range(n):
    u.sendto(b"hello %d" % i, (dst, 7777))
    data, _ = u.recvfrom(2048)
    print("udp", data.decode(), flush=True)
c = socket.create_connection((dst, 8080), timeout=3)
c.sendall(b"over tcp")
print("tcp", c.recv(2048).decode(), flush=True)
c.close()
try:
    socket.create_connection((dst, 23), timeout=1)
    print("telnet open", flush=True)
except OSError:
    print("telnet refused or dropped", flush=True)
"#;

/// Two hosts in namespaces `TAG-h1-ID` and `TAG-h2-ID`, each behind a veth (`TAG0-ID`,
/// `TAG1-ID` on this side, `eth0` with the MAC and address given inside), IPv6 off; the guard
/// removes them.
fn two_hosts(tag: &str, id: u32, hosts: [(&str, &str); 2]) -> (String, String, String, String, Cleanup) {
    let (h1, h2) = (format!("{tag}-h1-{id}"), format!("{tag}-h2-{id}"));
    let (s0, s1) = (format!("{tag}0-{id}"), format!("{tag}1-{id}"));
    let guard = Cleanup { netns: vec![h1.clone(), h2.clone()], links: vec![s0.clone(), s1.clone()], child: None };
    for ((ns, sw), (mac, addr)) in [(&h1, &s0), (&h2, &s1)].into_iter().zip(hosts) {
        ip(&format!("netns add {ns}"));
        run(&["ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"]);
        ip(&format!("link add {sw} type veth peer name eth0 netns {ns}"));
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{sw}/disable_ipv6"), "1");
        ip(&format!("link set {sw} up"));
        ip(&format!("-n {ns} link set eth0 address {mac} up"));
        ip(&format!("-n {ns} link set lo up"));
        ip(&format!("-n {ns} addr add {addr} dev eth0"));
    }
    // Each host's flows on one core where its frames arrive (RPS over all cores, as a NIC's
    // RSS): a veth queues a frame on the core that sent it, so a sender that moves between
    // cores could reach the server's ports out of order.
    let all = format!("{:x}", (1u64 << std::thread::available_parallelism().map_or(1, |n| n.get()).min(32)) - 1);
    for sw in [&s0, &s1] {
        let _ = std::fs::write(format!("/sys/class/net/{sw}/queues/rx-0/rps_cpus"), &all);
    }
    (h1, h2, s0, s1, guard)
}

#[test]
#[ignore = "needs root: network namespaces and veth pairs"]
fn nat_and_firewall_between_two_hosts() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let id = std::process::id() % 10_000;
    let (mac1, mac2) = ("02:00:00:00:00:01", "02:00:00:00:00:02");
    let (h1, h2, s0, s1, mut guard) = two_hosts("tcn", id, [(mac1, "10.0.0.1/24"), (mac2, "198.51.100.2/24")]);
    // Host 1 reaches the outside through a gateway whose MAC is host 2's; host 2 answers the
    // NAT's address at host 1's MAC. The chain answers no ARP.
    ip(&format!("-n {h1} route add default via 10.0.0.254"));
    ip(&format!("-n {h1} neigh replace 10.0.0.254 lladdr {mac2} dev eth0"));
    ip(&format!("-n {h2} neigh replace 198.51.100.1 lladdr {mac1} dev eth0"));
    let dir = std::env::temp_dir().join(format!("tern-chain-netns-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let tenant = dir.join("lan.toml");
    std::fs::write(
        &tenant,
        r#"tenant = "lan"
dag = "fw -> nat"
[nt.fw]
kind = "firewall"
default = "allow"
rules = [{ action = "deny", proto = "tcp", dst_port = 23, priority = 10 }]
[nt.nat]
kind = "nat"
external = "198.51.100.1"
ports = "40000-40999"
"#,
    )
    .unwrap();
    let metrics_addr = format!("127.0.0.1:{}", 20_000 + id % 1000);
    guard.child = Some(
        Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["chain", "serve", tenant.to_str().unwrap()])
            .args(["--port", &format!("afpacket:{s0}"), "--port", &format!("afpacket:{s1}")])
            .args(["--metrics", &metrics_addr, "--duration", "60"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for(&metrics_addr);
    let udp = 5;
    let mut server = Command::new("ip")
        .args(["netns", "exec", &h2, &py, "-c", HOST2, &udp.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(server.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
    }
    let out = Command::new("ip")
        .args(["netns", "exec", &h1, &py, "-c", HOST1, "198.51.100.2", &udp.to_string()])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "host 1: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    // Host 2 saw every datagram and the connection come from the NAT's address.
    let udp_lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("udp ")).collect();
    assert_eq!(udp_lines.len(), udp, "{stdout}");
    assert!(udp_lines.iter().all(|l| l.ends_with("from 198.51.100.1")), "{stdout}");
    assert!(stdout.contains("tcp over tcp from 198.51.100.1"), "{stdout}");
    assert!(stdout.contains("telnet refused or dropped"), "{stdout}");
    let m = metrics(&metrics_addr);
    // The connection's SYNs to port 23, denied (the row is there from the start: not at 0).
    let denied = m
        .lines()
        .find_map(|l| l.strip_prefix("tern_chain_drops_packets_total{tenant=\"lan\",reason=\"denied\"} "))
        .and_then(|n| n.trim().parse::<u64>().ok());
    assert!(denied.is_some_and(|n| n >= 1), "{m}");
}

/// Host 2: counts sequence-numbered datagrams on a port until none comes for 3 s; prints how
/// many came, how many were not the one expected next (a gap or a reordering), and the last.
const COUNTER: &str = r#"
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
# As root, past net.core.rmem_max: a receiver the machine starves for a while (a loaded CI
# runner) must not lose datagrams in its own socket buffer.
u.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
u.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
u.settimeout(20)
got, out_of_order, nxt = 0, 0, 0
while True:
    try:
        data, _ = u.recvfrom(2048)
    except socket.timeout:
        break
    u.settimeout(3)
    seq = int.from_bytes(data[:8], "big")
    if seq != nxt:
        out_of_order += 1
    nxt = seq + 1
    got += 1
print("got %d out_of_order %d last %d" % (got, out_of_order, nxt - 1), flush=True)
"#;

/// Host 1: `n` sequence-numbered datagrams to `dst`:`port`, paced at `rate` a second.
const STREAMER: &str = r#"
import socket, sys, time
dst, port, n, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
t0 = time.time()
for i in range(n):
    u.sendto(i.to_bytes(8, "big") + b"x" * 56, (dst, port))
    d = t0 + i / rate - time.time()
    if d > 0:
        time.sleep(d)
print("sent %d" % n, flush=True)
"#;

/// Tenant `a`'s file in its generation `g`: a firewall (shared with tenant `b`) whose rule
/// changes every generation.
fn tenant_a(g: u32) -> String {
    format!(
        "tenant = \"a\"\ndag = \"fw\"\n[ingress]\nproto = \"udp\"\ndst_port = 9001\n[nt.fw]\nkind = \"firewall\"\n\
         default = \"allow\"\nrules = [{{ action = \"deny\", proto = \"udp\", dst_port = {}, priority = 10 }}]\n",
        10_000 + g
    )
}

/// Tenant `a` is updated live 50 times while tenant `b` streams 40,000 sequence-numbered UDP
/// datagrams through the firewall position the two share: `b`'s receiver sees every datagram,
/// in order (docs/chain.md, "Updates").
#[test]
#[ignore = "needs root: network namespaces and veth pairs"]
fn fifty_live_updates_of_one_tenant_leave_the_others_stream_whole() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let id = std::process::id() % 10_000;
    let (mac1, mac2) = ("02:00:00:00:01:01", "02:00:00:00:01:02");
    let (h1, h2, s0, s1, mut guard) = two_hosts("tcu", id, [(mac1, "10.9.0.1/24"), (mac2, "10.9.0.2/24")]);
    ip(&format!("-n {h1} neigh replace 10.9.0.2 lladdr {mac2} dev eth0"));
    ip(&format!("-n {h2} neigh replace 10.9.0.1 lladdr {mac1} dev eth0"));
    let dir = std::env::temp_dir().join(format!("tern-chain-update-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (fa, fb) = (dir.join("a.toml"), dir.join("b.toml"));
    std::fs::write(&fa, tenant_a(0)).unwrap();
    std::fs::write(
        &fb,
        "tenant = \"b\"\ndag = \"fw\"\n[ingress]\nproto = \"udp\"\ndst_port = 9000\n[nt.fw]\nkind = \"firewall\"\ndefault = \"allow\"\n",
    )
    .unwrap();
    let metrics_addr = format!("127.0.0.1:{}", 21_000 + id % 1000);
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["chain", "serve", fa.to_str().unwrap(), fb.to_str().unwrap()])
        .args(["--port", &format!("afpacket:{s0}"), "--port", &format!("afpacket:{s1}")])
        .args(["--metrics", &metrics_addr, "--duration", "120"])
        // What is tested is the updates: no fair-share limits. On a machine busy with other
        // tests, a task's measured time counts its thread's preemptions, the cores look full,
        // and the fair shares limited b's 4,000 datagrams a second (31 `rate_limited` in one CI
        // run).
        .arg("--no-fair")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The server's lines, as they come.
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    guard.child = Some(child);
    wait_for(&metrics_addr);
    let mut counter = Command::new("ip")
        .args(["netns", "exec", &h2, &py, "-c", COUNTER, "9000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut counter_out = std::io::BufReader::new(counter.stdout.take().unwrap());
    {
        use std::io::BufRead;
        let mut line = String::new();
        counter_out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
    }
    let n = 40_000;
    let streamer = Command::new("ip")
        .args(["netns", "exec", &h1, &py, "-c", STREAMER, "10.9.0.2", "9000", &n.to_string(), "4000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // 50 updates of tenant a while b streams (10 s at 4000 a second), each waited for.
    std::thread::sleep(Duration::from_millis(300));
    for g in 1..=50u32 {
        std::fs::write(&fa, tenant_a(g)).unwrap();
        let want = format!("tenant a: generation {g} in service");
        let until = Instant::now() + Duration::from_secs(5);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let l = lines.recv_timeout(left).unwrap_or_else(|_| panic!("no line `{want}` within 5 s"));
            assert!(!l.contains("rejected"), "{l}");
            if l.starts_with(&want) {
                break;
            }
        }
    }
    let sent = streamer.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&sent.stdout).contains(&format!("sent {n}")), "the streamer did not finish");
    let mut summary = String::new();
    {
        use std::io::BufRead;
        counter_out.read_line(&mut summary).unwrap();
    }
    let _ = counter.wait();
    let m = metrics(&metrics_addr);
    // On a miss, what the server counted says whether Tern or the kernel lost them.
    let counted: Vec<&str> = m
        .lines()
        .filter(|l| {
            ["tern_chain_drops", "tern_chain_rx_packets", "tern_chain_tx_packets", "tern_chain_port_"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .collect();
    // And what the receiving host's kernel counted (its UDP receive-buffer errors).
    let udp = Command::new("ip").args(["netns", "exec", &h2, "cat", "/proc/net/snmp"]).output().unwrap();
    let udp: Vec<String> =
        String::from_utf8_lossy(&udp.stdout).lines().filter(|l| l.starts_with("Udp:")).map(String::from).collect();
    assert_eq!(
        summary.trim(),
        format!("got {n} out_of_order 0 last {}", n - 1),
        "tenant b's receiver (out_of_order counts gaps too); the server's {counted:#?}; the receiver's kernel {udp:#?}"
    );
    assert!(m.contains("tern_chain_generation{tenant=\"a\"} 50"), "{m}");
    assert!(m.contains("tern_chain_generation{tenant=\"b\"} 0"), "{m}");
    // Tenant b's drop counters are all exported, every one at 0.
    let b_drops: Vec<&str> =
        m.lines().filter(|l| l.starts_with("tern_chain_drops_packets_total{tenant=\"b\"")).collect();
    assert!(!b_drops.is_empty() && b_drops.iter().all(|l| l.ends_with(" 0")), "{b_drops:#?}");
}
