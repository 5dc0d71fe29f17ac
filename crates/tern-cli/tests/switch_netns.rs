//! A CLIP switch and two remote-handler servers as separate processes on veth pairs, between
//! two hosts in network namespaces (root only: `cargo test -- --ignored`). Host 1 (10.0.0.1,
//! inside) sends UDP datagrams of 40 flows through the switch (its gateway, 10.0.0.254, is the
//! switch, which answers its ARP) to host 2 (198.51.100.2, outside); the SNAT program sends each
//! new flow to a server, whose handler gives it an address and port. Host 2 sees every flow
//! come from a server's address; after `tern switch scale --add 1` the old flows keep their
//! address and port while new flows reach the new server too.

use std::process::{Command, Stdio};

mod common;
use common::{Cleanup, ip, metrics, python, run, wait_for};

/// Host 2: prints, for each datagram until none comes for 3 s, its payload and source.
const HOST2: &str = r#"
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", 7777))
print("ready", flush=True)
u.settimeout(30)
while True:
    try:
        data, peer = u.recvfrom(2048)
    except socket.timeout:
        break
    u.settimeout(3)
    print("%s from %s:%d" % (data.decode(), peer[0], peer[1]), flush=True)
"#;

/// Host 1: a datagram from each flow `lo..hi` (flow i from source port 5000 + i), twice.
const HOST1: &str = r#"
import socket, sys, time
dst, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for rep in range(2):
    for i in range(lo, hi):
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        u.bind(("0.0.0.0", 5000 + i))
        u.sendto(b"flow %d" % i, (dst, 7777))
        u.close()
        time.sleep(0.002)
print("sent", flush=True)
"#;

#[test]
#[ignore = "needs root: network namespaces and veth pairs"]
fn snat_through_a_switch_and_two_servers_between_namespaces() {
    let Some(py) = python() else {
        eprintln!("skipped: python3 is not installed");
        return;
    };
    let id = std::process::id() % 10_000;
    let (h1, h2) = (format!("tsw-h1-{id}"), format!("tsw-h2-{id}"));
    let (p1, p2, p3, p4) = (format!("tsw1-{id}"), format!("tsw2-{id}"), format!("tsw3-{id}"), format!("tsw4-{id}"));
    let (v3, v4) = (format!("tsv3-{id}"), format!("tsv4-{id}"));
    let mut guard = Cleanup {
        netns: vec![h1.clone(), h2.clone()],
        links: vec![p1.clone(), p2.clone(), p3.clone(), p4.clone()],
        child: None,
    };
    let (mac1, mac2) = ("02:00:00:00:00:01", "02:00:00:00:00:02");
    for (ns, sw, mac, addr) in [(&h1, &p1, mac1, "10.0.0.1/24"), (&h2, &p2, mac2, "198.51.100.2/24")] {
        ip(&format!("netns add {ns}"));
        run(&["ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"]);
        ip(&format!("link add {sw} type veth peer name eth0 netns {ns}"));
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{sw}/disable_ipv6"), "1");
        ip(&format!("link set {sw} up"));
        ip(&format!("-n {ns} link set eth0 address {mac} up"));
        ip(&format!("-n {ns} link set lo up"));
        ip(&format!("-n {ns} addr add {addr} dev eth0"));
    }
    // Server links: both ends here, the switch on one, a server on the other.
    for (sw, sv) in [(&p3, &v3), (&p4, &v4)] {
        ip(&format!("link add {sw} type veth peer name {sv}"));
        for l in [sw, sv] {
            let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{l}/disable_ipv6"), "1");
            ip(&format!("link set {l} up"));
        }
    }
    // Host 1's gateway is the switch (it answers ARP); host 2 reaches the servers' addresses
    // at the switch's MAC.
    ip(&format!("-n {h1} route add default via 10.0.0.254"));
    ip(&format!("-n {h2} route add 192.0.2.0/24 dev eth0"));
    for a in ["192.0.2.1", "192.0.2.2"] {
        ip(&format!("-n {h2} neigh replace {a} lladdr 02:00:00:00:00:fe dev eth0"));
    }
    let dir = std::env::temp_dir().join(format!("tern-switch-netns-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
    let base = 21_000 + id % 1000 * 4;
    let (m, c0, c1) =
        (format!("127.0.0.1:{base}"), format!("127.0.0.1:{}", base + 1), format!("127.0.0.1:{}", base + 2));
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "program = \"{snat}\"\nports = [\"afpacket:{p1}\", \"afpacket:{p2}\", \"afpacket:{p3}\", \"afpacket:{p4}\"]\nservers = [3, 4]\ncontrol = [\"{c0}\", \"{c1}\"]\nip = \"10.0.0.254\"\nmac = \"02:00:00:00:00:fe\"\n[group]\nmembers = [0]\n[[route]]\nprefix = \"198.51.100.0/24\"\nport = 2\nmac = \"{mac2}\"\n[[route]]\nprefix = \"10.0.0.0/24\"\nport = 1\nmac = \"{mac1}\"\n"
        ),
    )
    .unwrap();
    let tern =
        |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_tern")).args(args).stdout(Stdio::null()).spawn().unwrap();
    let mut servers = vec![
        tern(&[
            "switch",
            "server",
            snat,
            "--index",
            "0",
            "--port",
            &format!("afpacket:{v3}"),
            "--control",
            &c0,
            "--duration",
            "60",
        ]),
        tern(&[
            "switch",
            "server",
            snat,
            "--index",
            "1",
            "--port",
            &format!("afpacket:{v4}"),
            "--control",
            &c1,
            "--duration",
            "60",
        ]),
    ];
    guard.child = Some(tern(&["switch", "serve", config.to_str().unwrap(), "--metrics", &m, "--duration", "60"]));
    for a in [&m, &c0, &c1] {
        wait_for(a);
    }
    let mut host2 =
        Command::new("ip").args(["netns", "exec", &h2, &py, "-c", HOST2]).stdout(Stdio::piped()).spawn().unwrap();
    let mut lines = std::io::BufReader::new(host2.stdout.take().unwrap());
    {
        use std::io::BufRead;
        let mut line = String::new();
        lines.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
    }
    let send = |lo: u32, hi: u32| {
        let out = Command::new("ip")
            .args(["netns", "exec", &h1, &py, "-c", HOST1, "198.51.100.2", &lo.to_string(), &hi.to_string()])
            .output()
            .unwrap();
        assert!(out.status.success(), "host 1: {}", String::from_utf8_lossy(&out.stderr));
    };
    send(0, 20);
    let out = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["switch", "scale", "--server", &m, "--add", "1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scale: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    send(0, 40);
    let host2_out = {
        use std::io::Read;
        let mut s = String::new();
        lines.read_to_string(&mut s).unwrap();
        let _ = host2.wait();
        s
    };
    let mt = metrics(&m);
    for s in &mut servers {
        let _ = s.kill();
        let _ = s.wait();
    }
    // Every datagram arrived (20 flows twice, then 40 twice); each flow kept its source.
    let mut seen: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    let mut n = 0;
    for l in host2_out.lines() {
        let (flow, from) = l.split_once(" from ").unwrap();
        n += 1;
        let first = seen.entry(flow.to_string()).or_insert_with(|| from.to_string());
        assert_eq!(first, from, "{flow} changed its translation:\n{host2_out}");
    }
    assert_eq!(n, 120, "{host2_out}");
    for i in 0..20 {
        assert!(seen[&format!("flow {i}")].starts_with("192.0.2.1:"), "{host2_out}");
    }
    assert!((20..40).any(|i| seen[&format!("flow {i}")].starts_with("192.0.2.2:")), "{host2_out}");
    assert!(mt.contains("tern_switch_group_version 1"), "{mt}");
    let arp = mt.lines().find(|l| l.starts_with("tern_switch_packets_total{path=\"arp_reply\"}")).unwrap_or("");
    assert!(!arp.ends_with(" 0"), "host 1's ARP for its gateway answered: {mt}");
    let _ = std::fs::remove_dir_all(&dir);
    drop(guard);
}
