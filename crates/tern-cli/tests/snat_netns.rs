//! CLIP's SNAT and TCP retransmission detection as a real network would run them (root only:
//! `cargo test -- --ignored`): two clients (10.0.0.1 and 10.0.0.2, on one bridge) and an
//! external host (198.51.100.2) in network namespaces using the kernel's own TCP and UDP, the
//! switch on veth pairs, and each server a process in a namespace of its own (its data link to
//! the switch, and a management link on a bridge for heartbeats and replicas).
//!
//! The behavioural peer is Linux netfilter: the same clients and external host through a router
//! namespace with an `nft` masquerade rule. Both see the same things: the first client keeps its
//! source port, the second (the same port, to the same destination and address) gets another of
//! its class, replies come back to both, and netfilter's timeouts are the SNAT's defaults.
//! Without `nft` (Debian's `nftables`) the peer part says so and is skipped.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;
use common::{Cleanup, ip, python, run, wait_for};

/// The external host: a UDP echo on 7777 and a TCP echo on 8080, each answer carrying the
/// address and port the request came from; every request's peer printed.
const EXT: &str = r#"
import socket, sys, threading
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", 7777))
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", 8080))
t.listen(16)
def tcp():
    while True:
        c, peer = t.accept()
        data = c.recv(2048)
        print("tcp %s from %s:%d" % (data.decode(), peer[0], peer[1]), flush=True)
        c.sendall(data + (" from %s:%d" % peer).encode())
        c.close()
threading.Thread(target=tcp, daemon=True).start()
print("ready", flush=True)
u.settimeout(float(sys.argv[1]))
while True:
    try:
        data, peer = u.recvfrom(2048)
    except socket.timeout:
        break
    print("udp %s from %s:%d" % (data.decode(), peer[0], peer[1]), flush=True)
    u.sendto(data + (" from %s:%d" % peer).encode(), peer)
"#;

/// A client: `n` datagrams from source port `sport` to the external host (each answered), then
/// one TCP exchange; a line per answer.
const CLIENT: &str = r#"
import socket, sys, time
dst, sport, n, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
u.bind(("0.0.0.0", sport))
u.settimeout(float(sys.argv[6]) if len(sys.argv) > 6 else 2)
got = 0
for i in range(n):
    u.sendto(b"%s %d" % (tag.encode(), i), (dst, 7777))
    try:
        data, _ = u.recvfrom(2048)
        got += 1
        print("udp-answer", data.decode(), flush=True)
    except socket.timeout:
        print("udp-lost", i, flush=True)
    time.sleep(float(sys.argv[5]) if len(sys.argv) > 5 else 0)
c = socket.create_connection((dst, 8080), timeout=3)
c.sendall(b"%s-tcp" % tag.encode())
print("tcp-answer", c.recv(2048).decode(), flush=True)
c.close()
print("done", got, flush=True)
"#;

/// Names of everything one topology makes (unique to this process).
struct Names {
    id: u32,
}

impl Names {
    fn n(&self, what: &str) -> String {
        format!("{what}{}", self.id)
    }
}

/// The clients' and the external host's namespaces, the clients on a bridge `br` whose other
/// port is `inside` (an interface left in this namespace), the external host on `outside`.
/// Returns (clients, external).
fn hosts(g: &mut Cleanup, nm: &Names, inside: &str, outside: &str) -> ([String; 2], String) {
    let (c1, c2, ext, br) = (nm.n("tsn-c1-"), nm.n("tsn-c2-"), nm.n("tsn-ext-"), nm.n("tsnbr"));
    g.netns.extend([c1.clone(), c2.clone(), ext.clone()]);
    g.links.push(br.clone());
    ip(&format!("link add {br} type bridge"));
    ip(&format!("link set {br} up"));
    for (k, (ns, addr)) in [(&c1, "10.0.0.1/24"), (&c2, "10.0.0.2/24")].into_iter().enumerate() {
        let v = nm.n(&format!("tsnv{k}-"));
        g.links.push(v.clone());
        ip(&format!("netns add {ns}"));
        ip(&format!("link add {v} type veth peer name eth0 netns {ns}"));
        ip(&format!("link set {v} master {br} up"));
        ip(&format!("-n {ns} link set eth0 address 02:00:00:00:01:0{} up", k + 1));
        // One wire-sized frame a segment, as on a real link (veth would otherwise hand the
        // switch's AF_PACKET socket GSO frames of many segments, longer than its buffers).
        ip(&format!("-n {ns} link set eth0 gso_max_segs 1 gso_max_size 1500"));
        ip(&format!("-n {ns} link set lo up"));
        ip(&format!("-n {ns} addr add {addr} dev eth0"));
        ip(&format!("-n {ns} route add default via 10.0.0.254"));
    }
    // The inside port: one end on the bridge, the other for the switch (or the router).
    let bside = nm.n("tsnib");
    g.links.push(inside.to_string());
    ip(&format!("link add {inside} type veth peer name {bside}"));
    ip(&format!("link set {bside} master {br} up"));
    ip(&format!("link set {inside} up"));
    ip(&format!("netns add {ext}"));
    g.links.push(outside.to_string());
    ip(&format!("link add {outside} type veth peer name eth0 netns {ext}"));
    ip(&format!("link set {outside} up"));
    ip(&format!("-n {ext} link set eth0 address 02:00:00:00:02:01 up"));
    ip(&format!("-n {ext} link set eth0 gso_max_segs 1 gso_max_size 1500"));
    ip(&format!("-n {ext} link set lo up"));
    ip(&format!("-n {ext} addr add 198.51.100.2/24 dev eth0"));
    for l in [inside, outside, &bside] {
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{l}/disable_ipv6"), "1");
    }
    // Where the hosts' frames first arrive, steer each flow to one core (RPS over all cores),
    // as a NIC's RSS keeps a flow on one queue: a veth otherwise queues each frame on the core
    // that sent it, and a connection whose segments leave from two cores (the writer's, and
    // the one taking its ACKs) can reach the switch out of order.
    let all = format!("{:x}", (1u64 << std::thread::available_parallelism().map_or(1, |n| n.get()).min(32)) - 1);
    for k in 0..2 {
        let _ = std::fs::write(format!("/sys/class/net/{}/queues/rx-0/rps_cpus", nm.n(&format!("tsnv{k}-"))), &all);
    }
    let _ = std::fs::write(format!("/sys/class/net/{outside}/queues/rx-0/rps_cpus"), &all);
    ([c1, c2], ext)
}

/// Starts the external host's echo (answers until `idle` seconds pass without a datagram).
fn start_ext(py: &str, ext: &str, idle: u32) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ext, py, "-c", EXT, &idle.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    (child, out)
}

/// Runs a client in `ns`: `n` datagrams from `sport` tagged `tag`; its output.
fn client(py: &str, ns: &str, sport: u16, n: u32, tag: &str, gap: f64) -> String {
    // A stream (a gap between datagrams) waits 0.3 s for each answer; single ones 2 s.
    let wait = if gap > 0.0 { 0.3 } else { 2.0 };
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            py,
            "-c",
            CLIENT,
            "198.51.100.2",
            &sport.to_string(),
            &n.to_string(),
            tag,
            &gap.to_string(),
            &wait.to_string(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "client {tag}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The external host's lines once it stopped.
fn ext_lines(mut child: Child, mut out: BufReader<std::process::ChildStdout>) -> Vec<String> {
    let mut s = String::new();
    out.read_to_string(&mut s).unwrap();
    let _ = child.wait();
    s.lines().map(str::to_string).collect()
}

/// Where the external host saw `tag`'s datagrams come from (address:port), in order.
fn seen_from(lines: &[String], proto: &str, tag: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.starts_with(&format!("{proto} {tag}")))
        .filter_map(|l| l.rsplit(" from ").next().map(str::to_string))
        .collect()
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// What one system (Tern's SNAT or netfilter) showed: each client's public address:port for
/// UDP from port 5000, whether every answer came back, and TCP's public address.
#[derive(Debug)]
struct Seen {
    udp: [String; 2],
    answered: [bool; 2],
    tcp: [String; 2],
}

fn exchange(py: &str, clients: &[String; 2], ext: &str) -> (Seen, Vec<String>) {
    let (child, out) = start_ext(py, ext, 3);
    let a = client(py, &clients[0], 5000, 3, "a", 0.0);
    let b = client(py, &clients[1], 5000, 3, "b", 0.0);
    let lines = ext_lines(child, out);
    let one = |tag: &str| seen_from(&lines, "udp", tag);
    let (ua, ub) = (one("a"), one("b"));
    assert!(ua.len() == 3 && ub.len() == 3, "{lines:?}");
    assert!(ua.iter().all(|x| *x == ua[0]) && ub.iter().all(|x| *x == ub[0]), "a flow kept its pair: {lines:?}");
    let tcp = |tag: &str| seen_from(&lines, "tcp", &format!("{tag}-tcp")).first().cloned().unwrap_or_default();
    let seen = Seen {
        udp: [ua[0].clone(), ub[0].clone()],
        answered: [a.contains("done 3"), b.contains("done 3")],
        tcp: [tcp("a"), tcp("b")],
    };
    assert!(a.contains("tcp-answer a-tcp from") && b.contains("tcp-answer b-tcp from"), "{a}\n{b}");
    (seen, lines)
}

/// The same port from two hosts to one destination, as netfilter handles it: the first keeps
/// it; the second, if it shares the first's public address, gets another port of its class.
fn netfilter_like(s: &Seen) {
    assert_eq!(port_of(&s.udp[0]), 5000, "the first client keeps its port: {s:?}");
    let (a0, a1) = (s.udp[0].rsplit_once(':').unwrap().0, s.udp[1].rsplit_once(':').unwrap().0);
    if a0 == a1 {
        let p = port_of(&s.udp[1]);
        assert!(p != 5000 && p >= 1024, "the second gets another port of its class: {s:?}");
    } else {
        assert_eq!(port_of(&s.udp[1]), 5000, "another public address: the port is free there: {s:?}");
    }
    assert!(s.answered[0] && s.answered[1], "every answer came back: {s:?}");
}

/// A server process in a namespace of its own: data on `eth0` (afpacket), control on its
/// management address.
fn spawn_in(ns: &str, args: &[&str]) -> Child {
    let log = std::fs::File::create(std::env::temp_dir().join(format!("{ns}.log"))).unwrap();
    Command::new("ip")
        .args(["netns", "exec", ns, env!("CARGO_BIN_EXE_tern")])
        .args(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// `tern switch server PROGRAM` number `k` in namespace `ns` on its `eth0` (AF_PACKET), its
/// control endpoint at `control`, for 120 s, with `extra` options.
fn spawn_server(ns: &str, program: &str, k: usize, control: &str, extra: &[&str]) -> Child {
    let idx = k.to_string();
    let mut args = vec![
        "switch",
        "server",
        program,
        "--index",
        &idx,
        "--port",
        "afpacket:eth0",
        "--control",
        control,
        "--duration",
        "120",
    ];
    args.extend_from_slice(extra);
    spawn_in(ns, &args)
}

#[test]
#[ignore = "needs root: network namespaces, veth pairs, bridges"]
fn snat_between_namespaces_against_netfilter() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let nm = Names { id: std::process::id() % 10_000 };
    let mut g = Cleanup { netns: vec![], links: vec![], child: None };
    let (p1, p2) = (nm.n("tsnp1-"), nm.n("tsnp2-"));
    let (clients, ext) = hosts(&mut g, &nm, &p1, &p2);
    // Servers: each its namespace, a data veth to the switch and a management veth on a bridge.
    let base = 23_000 + (nm.id % 1000) * 8;
    let (control, data_ports) = server_namespaces(&mut g, &nm, 3, base, 254);
    // The external host reaches the public addresses at the switch's MAC.
    ip(&format!("-n {ext} route add 192.0.2.0/24 dev eth0"));
    for a in ["192.0.2.1", "192.0.2.2", "192.0.2.3"] {
        ip(&format!("-n {ext} neigh replace {a} lladdr 02:00:00:00:00:fe dev eth0"));
    }
    let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
    let dir = std::env::temp_dir().join(format!("tern-snat-netns-{}", nm.id));
    std::fs::create_dir_all(&dir).unwrap();
    let m = format!("127.0.0.1:{base}");
    let ports: Vec<String> = [p1.clone(), p2.clone()]
        .into_iter()
        .chain(data_ports.iter().map(|(_, d)| d.clone()))
        .map(|p| format!("\"afpacket:{p}\""))
        .collect();
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "program = \"{snat}\"\nports = [{}]\nservers = [3, 4, 5]\ncontrol = [\"{}\", \"{}\", \"{}\"]\nbuddies = [1, 0, 0]\nip = \"10.0.0.254\"\nmac = \"02:00:00:00:00:fe\"\nheartbeat_ms = 300\n[group]\nmembers = [0, 1]\n[offload]\nenabled = true\ninterval_ms = 50\nthreshold = 4\n[[route]]\nprefix = \"198.51.100.0/24\"\nport = 2\nmac = \"02:00:00:00:02:01\"\n[[route]]\nprefix = \"10.0.0.1/32\"\nport = 1\nmac = \"02:00:00:00:01:01\"\n[[route]]\nprefix = \"10.0.0.2/32\"\nport = 1\nmac = \"02:00:00:00:01:02\"\n",
            ports.join(", "),
            control[0],
            control[1],
            control[2]
        ),
    )
    .unwrap();
    let start_server = |k: usize| -> Child {
        let buddy = &control[if k == 0 { 1 } else { 0 }];
        spawn_server(&data_ports[k].0, snat, k, &control[k], &["--buddy", buddy, "--idle-ms", "500"])
    };
    let mut servers: Vec<Child> = (0..3usize).map(start_server).collect();
    let mut sw = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["switch", "serve", config.to_str().unwrap(), "--metrics", &m, "--duration", "120", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    for a in control.iter().chain([&m]) {
        wait_for(a);
    }

    // 1. Two clients, one source port, one destination; their replies and a TCP exchange.
    let (tern, lines) = exchange(&py, &clients, &ext);
    netfilter_like(&tern);
    for t in &tern.tcp {
        assert!(t.starts_with("192.0.2."), "TCP from a server's public address: {lines:?}");
    }

    // 2. Scale 2 → 3 → 2 with a stream running; then kill -9 a server under a stream.
    let scale = |arg: &str, v: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["switch", "scale", "--server", &m, arg, v])
            .output()
            .unwrap();
        assert!(out.status.success(), "scale {arg} {v}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let (child, out) = start_ext(&py, &ext, 3);
    let stream = |tag: &str, sport: u16, n: u32| {
        let (py, ns, tag) = (py.clone(), clients[0].clone(), tag.to_string());
        std::thread::spawn(move || client(&py, &ns, sport, n, &tag, 0.02))
    };
    let s1 = stream("s", 6000, 60);
    std::thread::sleep(Duration::from_millis(300));
    scale("--add", "2");
    std::thread::sleep(Duration::from_millis(300));
    let fresh: Vec<String> = (0..8).map(|i| client(&py, &clients[1], 6100 + i, 1, &format!("n{i}"), 0.0)).collect();
    scale("--remove", "2");
    let s1_out = s1.join().unwrap();
    let lines = ext_lines(child, out);
    let s_from = seen_from(&lines, "udp", "s");
    assert_eq!(s_from.len(), 60, "every datagram of the stream arrived: {lines:?}");
    assert!(s_from.iter().all(|x| *x == s_from[0]), "the stream kept its pair through 2 → 3 → 2: {s_from:?}");
    assert!(s1_out.contains("done 60"), "{s1_out}");
    let third = (0..8)
        .filter(|i| seen_from(&lines, "udp", &format!("n{i}")).first().is_some_and(|a| a.starts_with("192.0.2.3:")))
        .count();
    assert!(third > 0, "new flows reached the third server while it was in: {fresh:?} {lines:?}");

    // kill -9 the server holding a stream's flow; heartbeats fail it over to its buddy, which
    // holds its replicas: the stream goes on with the same public pair; only the datagrams sent
    // before detection (their answers) are lost.
    let (child, out) = start_ext(&py, &ext, 4);
    let s2 = stream("k", 6200, 250);
    std::thread::sleep(Duration::from_millis(400));
    let killed = {
        // The server holding the stream: the one whose entries have its connection with the
        // server's own public address (its buddy's copy has the same; earlier flows are still
        // live, their connections not timed out).
        let mut k = None;
        for (i, c) in control.iter().enumerate() {
            let body: serde_json::Value = serde_json::from_str(&http_get(c, "/entries")).unwrap_or_default();
            let own = format!("192.0.2.{}:", i + 1);
            let holds = body["shown"].as_array().into_iter().flatten().any(|e| {
                e["key"].as_str().is_some_and(|k| k.contains(":6200 "))
                    && e["value"].as_str().is_some_and(|v| v.starts_with(&own))
            });
            if holds {
                k = Some(i);
            }
        }
        k.expect("a server holds the stream")
    };
    let _ = servers[killed].kill(); // SIGKILL
    let _ = servers[killed].wait();
    std::thread::sleep(Duration::from_millis(900));
    // A stream that starts while it is down: at the buddy, whose replicas for it wait.
    let s3 = stream("r", 6300, 200);
    std::thread::sleep(Duration::from_millis(300));
    // It comes back: restarted empty, it takes back its pairs from its buddy, which sends it what
    // it took over (kept while it was down); it rejoins the group.
    servers[killed] = start_server(killed);
    wait_for(&control[killed]);
    scale("--add", &killed.to_string());
    std::thread::sleep(Duration::from_millis(900));
    // A second failure: the buddy that took the stream over dies; its own buddy is the server
    // that came back, which holds the stream's connection again, and the later stream's, which
    // the buddy kept for it while it was down.
    let buddy = if killed == 0 { 1 } else { 0 };
    let _ = servers[buddy].kill();
    let _ = servers[buddy].wait();
    let s2_out = s2.join().unwrap();
    let s3_out = s3.join().unwrap();
    let lines = ext_lines(child, out);
    let r_from = seen_from(&lines, "udp", "r");
    assert!(
        r_from.iter().all(|x| *x == r_from[0]),
        "the stream started while a server was down kept its pair when its server failed: {r_from:?}"
    );
    assert!(r_from.len() >= 120, "{}\n{s3_out}", r_from.len());
    let k_from = seen_from(&lines, "udp", "k");
    assert!(
        k_from.iter().all(|x| *x == k_from[0]),
        "the stream kept its public pair through both failovers and the return: {k_from:?}"
    );
    let lost = s2_out.lines().filter(|l| l.starts_with("udp-lost")).count();
    // Each detection takes the heartbeat bound (300 ms) and a round: at 20 ms a datagram (plus
    // the 0.3 s each lost one waits for its answer), a few are lost each time; the rest arrive.
    assert!(lost <= 40, "only what was sent before each detection is lost: {lost}\n{s2_out}");
    assert!(k_from.len() >= 150, "the stream went on after the failovers: {}", k_from.len());

    // The switch failed the killed server over (not the stream's datagrams going elsewhere).
    let metrics = http_get(&m, "/metrics");
    let failovers = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tern_switch_failovers_total ").and_then(|v| v.trim().parse::<u64>().ok()));
    assert!(failovers.is_some_and(|n| n >= 2), "two failovers: {failovers:?}");

    // Stop the switch (SIGTERM: its summary) and the servers.
    run(&["kill", "-TERM", &sw.id().to_string()]);
    let mut summary = String::new();
    sw.stdout.take().unwrap().read_to_string(&mut summary).unwrap();
    let _ = sw.wait();
    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    let v: serde_json::Value = serde_json::from_str(&summary).unwrap_or_default();
    assert!(v["responses"].as_u64().unwrap_or(0) > 0, "{summary}");

    // 3. The peer: the same hosts through a router namespace with netfilter's masquerade.
    if Command::new("nft").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!("skipped the netfilter peer: `nft` is not installed (Debian: apt-get install nftables)");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    drop(g);
    let nm2 = Names { id: nm.id + 1 };
    let mut g2 = Cleanup { netns: vec![], links: vec![], child: None };
    let (q1, q2) = (nm2.n("tsnq1-"), nm2.n("tsnq2-"));
    let (clients, ext) = hosts(&mut g2, &nm2, &q1, &q2);
    let rt = nm2.n("tsn-rt-");
    g2.netns.push(rt.clone());
    ip(&format!("netns add {rt}"));
    ip(&format!("link set {q1} netns {rt}"));
    ip(&format!("link set {q2} netns {rt}"));
    ip(&format!("-n {rt} link set lo up"));
    ip(&format!("-n {rt} link set {q1} address 02:00:00:00:00:fe up"));
    ip(&format!("-n {rt} link set {q2} up"));
    ip(&format!("-n {rt} addr add 10.0.0.254/24 dev {q1}"));
    ip(&format!("-n {rt} addr add 192.0.2.1/24 dev {q2}"));
    ip(&format!("-n {rt} route add 198.51.100.0/24 dev {q2}"));
    ip(&format!("-n {ext} route add 192.0.2.0/24 dev eth0"));
    run(&["ip", "netns", "exec", &rt, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    let nft = |rule: &str| run(&["ip", "netns", "exec", &rt, "sh", "-c", &format!("nft '{rule}'")]);
    nft("add table ip nat");
    nft("add chain ip nat post { type nat hook postrouting priority 100 ; }");
    nft(&format!("add rule ip nat post oifname \"{q2}\" masquerade"));
    let (linux, lines) = exchange(&py, &clients, &ext);
    netfilter_like(&linux);
    assert!(linux.udp[0].starts_with("192.0.2.1:") && linux.tcp[0].starts_with("192.0.2.1:"), "{lines:?}");
    // Netfilter's timeouts are the SNAT's defaults.
    let sysctl = |k: &str| -> u64 {
        run(&["ip", "netns", "exec", &rt, "sysctl", "-n", &format!("net.netfilter.{k}")]).trim().parse().unwrap()
    };
    let t = tern_switch::nat::Timeouts::default();
    let secs = |ns: u64| ns / 1_000_000_000;
    assert_eq!(sysctl("nf_conntrack_udp_timeout"), secs(t.udp));
    assert_eq!(sysctl("nf_conntrack_udp_timeout_stream"), secs(t.udp_stream));
    assert_eq!(sysctl("nf_conntrack_icmp_timeout"), secs(t.icmp));
    assert_eq!(sysctl("nf_conntrack_tcp_timeout_established"), secs(t.tcp[2]));
    assert_eq!(sysctl("nf_conntrack_tcp_timeout_syn_sent"), secs(t.tcp[0]));
    assert_eq!(sysctl("nf_conntrack_tcp_timeout_time_wait"), secs(t.tcp[6]));
    assert_eq!(sysctl("nf_conntrack_generic_timeout"), secs(t.generic));
    eprintln!("tern: {tern:?}\nnetfilter: {linux:?}");
    let _ = std::fs::remove_dir_all(&dir);
    drop(g2);
}

/// A GET of `path` from an HTTP endpoint; the body.
fn http_get(addr: &str, path: &str) -> String {
    use std::io::Write;
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return String::new() };
    let _ = write!(s, "GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n");
    let mut t = String::new();
    let _ = s.read_to_string(&mut t);
    t.split_once("\r\n\r\n").map(|x| x.1.to_string()).unwrap_or_default()
}

/// The client's side of a TCP transfer: `n` writes of 500 bytes (TCP_NODELAY, a pause between
/// them) to the external host's port 9000, then close.
const SENDER: &str = r#"
import socket, sys, time
c = socket.create_connection((sys.argv[1], 9000), timeout=10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for i in range(int(sys.argv[2])):
    c.sendall(bytes([i % 256]) * 500)
    time.sleep(0.003)
c.shutdown(socket.SHUT_WR)
c.recv(16)
c.close()
"#;

/// The external host's side: takes one connection, reads to its end, answers "ok".
const RECEIVER: &str = r#"
import socket
t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("0.0.0.0", 9000))
t.listen(1)
print("ready", flush=True)
c, _ = t.accept()
n = 0
while True:
    d = c.recv(65536)
    if not d:
        break
    n += len(d)
c.sendall(b"ok")
c.close()
print("received", n, flush=True)
"#;

/// TCP retransmission detection on kernel TCP: a client sends 400 writes to the external host
/// through the switch running `examples/switch/trd.toml` (two servers, each in its namespace),
/// whose outside port loses 5% of the frames it sends (Tern's `FaultInjector`). The kernels
/// retransmit what was lost (the client its data and its FIN; the external host its answer
/// when the client's ACK was lost); the switch's registers and the servers count every segment
/// that does not advance its direction, a FIN sent again after its direction's release
/// included. They match the two hosts' own counts (`TcpRetransSegs`) within one: a segment
/// carrying data and FIN together is checked at the server, whose view of the direction lags
/// the switch's register. Each host's flows are steered to one core where its frames first
/// arrive (`hosts`), so that the switch sees each connection's segments in the order sent.
#[test]
#[ignore = "needs root: network namespaces, veth pairs, bridges"]
fn trd_counts_kernel_tcp_retransmissions_under_loss() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let nm = Names { id: std::process::id() % 10_000 + 5_000 };
    let mut g = Cleanup { netns: vec![], links: vec![], child: None };
    let (p1, p2) = (nm.n("tsnp1-"), nm.n("tsnp2-"));
    let (clients, ext) = hosts(&mut g, &nm, &p1, &p2);
    ip(&format!("-n {ext} route add 10.0.0.0/24 dev eth0"));
    ip(&format!("-n {ext} neigh replace 10.0.0.1 lladdr 02:00:00:00:00:fe dev eth0"));
    let base = 24_000 + (nm.id % 1000) * 4;
    let (control, data_ports) = server_namespaces(&mut g, &nm, 2, base, 253);
    let trd = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/trd.toml");
    let dir = std::env::temp_dir().join(format!("tern-trd-netns-{}", nm.id));
    std::fs::create_dir_all(&dir).unwrap();
    let m = format!("127.0.0.1:{base}");
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "program = \"{trd}\"\nports = [\"afpacket:{p1}\", \"afpacket:{p2},loss=0.05,seed=11,dir=tx\", \"afpacket:{}\", \"afpacket:{}\"]\nservers = [3, 4]\ncontrol = [\"{}\", \"{}\"]\nip = \"10.0.0.254\"\nmac = \"02:00:00:00:00:fe\"\n[group]\nmembers = [0, 1]\n[offload]\nenabled = false\n[[route]]\nprefix = \"198.51.100.0/24\"\nport = 2\nmac = \"02:00:00:00:02:01\"\n[[route]]\nprefix = \"10.0.0.1/32\"\nport = 1\nmac = \"02:00:00:00:01:01\"\n",
            data_ports[0].1, data_ports[1].1, control[0], control[1]
        ),
    )
    .unwrap();
    let mut servers: Vec<Child> =
        (0..2usize).map(|k| spawn_server(&data_ports[k].0, trd, k, &control[k], &[])).collect();
    let mut sw = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["switch", "serve", config.to_str().unwrap(), "--metrics", &m, "--duration", "120", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    for a in control.iter().chain([&m]) {
        wait_for(a);
    }
    let (sender_before, receiver_before) = (retrans_segs(&clients[0]), retrans_segs(&ext));
    let mut recv = Killed(
        Command::new("ip")
            .args(["netns", "exec", &ext, &py, "-c", RECEIVER])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let mut rout = BufReader::new(recv.0.stdout.take().unwrap());
    let mut line = String::new();
    rout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let out = Command::new("ip")
        .args(["netns", "exec", &clients[0], &py, "-c", SENDER, "198.51.100.2", "400"])
        .output()
        .unwrap();
    assert!(out.status.success(), "sender: {}", String::from_utf8_lossy(&out.stderr));
    let sent = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut got = String::new();
    rout.read_to_string(&mut got).unwrap();
    let _ = recv.0.wait();
    assert!(got.contains("received 200000"), "every byte arrived: {got}");
    // Both hosts' own counts (their answer and FIN cross the lossy port's other side: the
    // external host retransmits when the client's ACK is lost), read after the connection's
    // last retransmission could have happened, just before the switch stops counting.
    std::thread::sleep(Duration::from_secs(3));
    let (sender_after, receiver_after) = (retrans_segs(&clients[0]), retrans_segs(&ext));
    let (s_n, r_n) = (sender_after - sender_before, receiver_after - receiver_before);
    let retransmitted = s_n + r_n;
    let _ = sent;
    // The servers' own counts, then the switch's registers (its summary on SIGTERM).
    let at_servers: u64 = control
        .iter()
        .map(|c| {
            let mt = http_get(c, "/metrics");
            mt.lines()
                .find(|l| l.starts_with("tern_switch_server_handler_total{counter=\"retransmissions\"}"))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
        .sum();
    run(&["kill", "-TERM", &sw.id().to_string()]);
    let mut summary = String::new();
    sw.stdout.take().unwrap().read_to_string(&mut summary).unwrap();
    let _ = sw.wait();
    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    let v: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let in_switch = v["registers"]["retransmissions"].as_u64().unwrap() + v["registers"]["released"].as_u64().unwrap();
    let injected = v["faults"][0]["sent_dropped"].as_u64().unwrap();
    eprintln!(
        "hosts retransmitted {retransmitted} (sender {s_n}, receiver {r_n}); switch {in_switch}, servers {at_servers}; injected losses {injected}"
    );
    assert!(injected > 0 && retransmitted > 0, "{summary}");
    let detected = in_switch + at_servers;
    assert!(
        detected.abs_diff(retransmitted) <= 1,
        "detected {detected} (switch {in_switch}, servers {at_servers}) against the hosts' {retransmitted}: {summary}"
    );
    assert!(v["installed_by_response"].as_u64().unwrap() >= 2, "both directions got a register: {summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A namespace's count of TCP segments retransmitted (`TcpRetransSegs` in its /proc/net/snmp).
fn retrans_segs(ns: &str) -> u64 {
    let snmp = run(&["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"]);
    let tcp: Vec<Vec<&str>> =
        snmp.lines().filter(|l| l.starts_with("Tcp:")).map(|l| l.split_whitespace().collect()).collect();
    let at = tcp[0].iter().position(|n| *n == "RetransSegs").unwrap();
    tcp[1][at].parse().unwrap()
}

/// A child killed when dropped (a test that fails leaves no process behind).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `n` server namespaces, each with a data veth (its end here returned, `eth0` there) and a
/// management veth on a bridge (10.OCTET.X.1 here; 10.OCTET.X.10+k there: each test its own
/// OCTET, as tests run side by side); their control addresses from `base + 1`.
fn server_namespaces(
    g: &mut Cleanup,
    nm: &Names,
    n: u32,
    base: u32,
    octet: u8,
) -> (Vec<String>, Vec<(String, String)>) {
    let mgmt = nm.n("tsnmg");
    g.links.push(mgmt.clone());
    ip(&format!("link add {mgmt} type bridge"));
    let net = format!("10.{octet}.{}", nm.id % 250);
    ip(&format!("addr add {net}.1/24 dev {mgmt}"));
    ip(&format!("link set {mgmt} up"));
    let control: Vec<String> = (0..n).map(|k| format!("{net}.{}:{}", 10 + k, base + 1 + k)).collect();
    let mut data = Vec::new();
    for k in 0..n {
        let ns = nm.n(&format!("tsn-s{k}-"));
        g.netns.push(ns.clone());
        ip(&format!("netns add {ns}"));
        ip(&format!("-n {ns} link set lo up"));
        let (d, m) = (nm.n(&format!("tsnd{k}-")), nm.n(&format!("tsnm{k}-")));
        g.links.extend([d.clone(), m.clone()]);
        ip(&format!("link add {d} type veth peer name eth0 netns {ns}"));
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{d}/disable_ipv6"), "1");
        ip(&format!("link set {d} up"));
        ip(&format!("-n {ns} link set eth0 up"));
        ip(&format!("link add {m} type veth peer name mgmt netns {ns}"));
        ip(&format!("link set {m} master {mgmt} up"));
        ip(&format!("-n {ns} addr add {net}.{}/24 dev mgmt", 10 + k));
        ip(&format!("-n {ns} link set mgmt up"));
        data.push((ns, d));
    }
    (control, data)
}

/// `tern bench switch --snat` with the switch's host ports on AF_XDP, polled (the default).
#[test]
#[ignore = "needs root: network namespaces, veth pairs, bridges"]
fn bench_snat_runs_and_cleans_up() {
    bench_snat(&[]);
}

/// With them on AF_PACKET, the switch sleeping while idle.
#[test]
#[ignore = "needs root: network namespaces, veth pairs, bridges"]
fn bench_snat_runs_on_af_packet_ports() {
    bench_snat(&["--afpacket", "--sleep"]);
}

/// One bench at a time: each takes both cores, and a flood beside another's paced run would
/// measure the other.
static BENCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `tern bench switch --snat` with `extra`, as small as it goes: its topology comes up, every
/// system is measured, the offloaded flows are served by the switch alone and the server path
/// by servers alone, the paced datagrams arrive, the top-level figures are there, and it leaves
/// no namespace, link or nft table behind.
fn bench_snat(extra: &[&str]) {
    let _one = BENCH.lock().unwrap_or_else(|e| e.into_inner());
    let tag = extra.join("");
    let out_dir = std::env::temp_dir().join(format!("tern-bench-snat-test-{}{tag}", std::process::id()));
    let child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["bench", "switch", "--snat", "--sizes", "64", "--rounds", "1", "--phase-secs", "0.2"])
        .args(["--latency-packets", "300", "--servers", "1", "--json"])
        .args(extra)
        .arg("--out")
        .arg(&out_dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The bench names what it makes after its process id (mod 100,000, for short link names).
    let id = child.id() % 100_000;
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&out_dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // docs/clip.md's table of the JSON.
    // The per-busy-core ratio is null when a system's busy share over a phase this short (0.2
    // s: 20 clock ticks) rounds to nothing, as on a machine busy with other tests; every other
    // side is measured (checked below).
    common::docs::json_is_as_documented(
        &report,
        "clip",
        "| snat key | holds | what |",
        &["results.snat_over_netfilter_pps_per_busy_core_spread"],
    );
    let nft = Command::new("nft").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    let ms = report["results"]["measurements"].as_array().unwrap();
    let systems: Vec<&str> = ms.iter().map(|m| m["system"].as_str().unwrap()).collect();
    assert_eq!(systems.len(), if nft { 3 } else { 2 }, "{systems:?}");
    for m in ms {
        let sys = m["system"].as_str().unwrap();
        assert!(m["pps"].as_f64().unwrap() > 1000.0, "{sys}: {m}");
        let (sent, got) = (m["latency_sent"].as_u64().unwrap(), m["latency_received"].as_u64().unwrap());
        assert!(got * 100 >= sent * 95, "{sys}: {got} of {sent} paced datagrams arrived");
        assert!(m["latency_p50_us"].as_f64().unwrap() > 0.0);
        // Every paced datagram's arrival stamped by the kernel, before the sink had it.
        assert_eq!(m["latency_kernel_stamped"].as_u64().unwrap(), got, "{sys}: {m}");
        let (p50, at_sink) = (m["latency_p50_us"].as_f64().unwrap(), m["latency_at_sink_p50_us"].as_f64().unwrap());
        assert!(p50 <= at_sink, "{sys}: arrival p50 {p50} µs after the sink's {at_sink}");
        match sys {
            "switch_only" => {
                assert!(m["switch_share"].as_f64().unwrap() >= 0.9, "{m}");
                assert!(m["offloaded_entries"].as_u64().unwrap() >= 64, "{m}");
            }
            "servers_1" => assert_eq!(m["switch_share"].as_f64().unwrap(), 0.0, "{m}"),
            _ => assert!(m["switch_share"].is_null()),
        }
    }
    assert!(report["offload_latency_ratio"].as_f64().unwrap() > 0.0);
    if nft {
        assert!(report["snat_over_netfilter_pps"].as_f64().unwrap() > 0.0);
        let tables = run(&["nft", "list", "tables"]);
        assert!(!tables.contains(&format!("netdev tb{id}")), "nft tables left: {tables}");
    } else {
        assert!(report["snat_over_netfilter_pps"].is_null());
        assert!(stderr.contains("skipped netfilter"), "{stderr}");
    }
    // The bench names what it makes tb<id><what>: namespaces tc, tx (Tern's hosts), nc, nr, nx
    // (netfilter's), s<k> (servers); links p1, p2 (switch ports), d<k>, m<k> (servers), mg.
    // Other tests of this file run beside this one with names of their own.
    let prefix = format!("tb{id}");
    let ours = |name: &str| {
        name.strip_prefix(prefix.as_str())
            .is_some_and(|what| ["tc", "tx", "nc", "nr", "nx", "s0", "p1", "p2", "d0", "m0", "mg"].contains(&what))
    };
    let netns = run(&["ip", "netns", "list"]);
    let left: Vec<&str> = netns.lines().filter_map(|l| l.split_whitespace().next()).filter(|n| ours(n)).collect();
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
    let links = run(&["ip", "-o", "link"]);
    let left: Vec<&str> = links
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n))
        .filter(|n| ours(n))
        .collect();
    assert!(left.is_empty(), "links left behind: {left:?}");
}
