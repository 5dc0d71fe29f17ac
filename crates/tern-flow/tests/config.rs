//! The configuration file: the shipped examples load; mistakes are refused naming the item; a
//! capture replayed through the runtime comes out routed, with the cache at work.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use tern_flow::config::{self, parse_acl_rule};
use tern_flow::runtime::Runtime;
use tern_io::Pool;

fn example(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/flow").join(name)
}

#[test]
fn shipped_examples_load_with_realistic_tables() {
    for f in ["replay.toml", "router.toml"] {
        let c = config::load(&example(f)).unwrap_or_else(|e| panic!("{e}"));
        assert!(c.tables.acl.len() >= 100, "{f}: {} ACL rules", c.tables.acl.len());
        assert!(c.tables.routes4.len() >= 10_000, "{f}: {} routes", c.tables.routes4.len());
        assert_eq!(c.ports.len(), 2);
    }
}

fn refused(text: &str) -> String {
    let e = config::parse(text, &example("inline.toml")).unwrap_err();
    e.to_string()
}

const PORTS: &str = "[[port]]\nname = \"a\"\npcap_out = \"/dev/null\"\n";

#[test]
fn mistakes_name_the_item() {
    assert!(refused("").contains("no [[port]]"));
    assert!(refused("bogus = 1").contains("bogus"));
    let e = refused(&format!("{PORTS}[[ofu]]\nid = 1\nkind = \"tcam\"\n"));
    assert!(e.contains("ofu 1") && e.contains("tcam"), "{e}");
    let e = refused(&format!("profile = \"accelsdp-n3000\"\n{PORTS}[[ofu]]\nid = 1\nkind = \"em\"\nentries = 5000\n"));
    assert!(e.contains("5000 entries do not fit accelsdp-n3000"), "{e}");
    let nh =
        "[[next_hop]]\nname = \"x\"\nport = \"a\"\neth_src = \"02:00:00:00:00:01\"\neth_dst = \"02:00:00:00:00:02\"\n";
    let e = refused(&format!("{PORTS}{nh}[routes]\nroutes = [\"10.0.0.0/8 y\"]\n"));
    assert!(e.contains("routes.routes[0]") && e.contains("\"y\""), "{e}");
    let e = refused(&format!("{PORTS}{nh}[routes]\nroutes = [\"10.0.0.0/8 x\", \"10.0.0.0/8 x\"]\n"));
    assert!(e.contains("routed twice"), "{e}");
    let e = refused(&format!("{PORTS}[acl]\nrules = [\"priority=5,tp_dst=80 actions=deny\"]\n"));
    assert!(e.contains("acl.rules[0]") && e.contains("tcp or udp"), "{e}");
    let e = refused(&format!(
        "{PORTS}[[next_hop]]\nname = \"x\"\nport = \"b\"\neth_src = \"02:00:00:00:00:01\"\neth_dst = \"zz\"\n"
    ));
    assert!(e.contains("next_hop \"x\"") && e.contains("\"b\""), "{e}");
    let e = refused(&format!("{PORTS}[cache]\nmode = \"exact\"\n"));
    assert!(e.contains("needs an em OFU"), "{e}");
}

#[test]
fn acl_rules_read_like_ovs_flows() {
    let ports = vec!["left".to_string(), "right".to_string()];
    let r = parse_acl_rule("priority=7,in_port=right,tcp,nw_src=10.0.0.0/8,tp_dst=20-23 actions=deny", &ports).unwrap();
    assert_eq!(r.pattern.priority, 7);
    assert_eq!(r.pattern.in_port, Some(1));
    assert_eq!(r.pattern.proto, Some(6));
    assert_eq!(r.pattern.src, Some("10.0.0.0/8".parse().unwrap()));
    assert_eq!(r.pattern.dst_port, Some(tern_flow::classifier::PortRange(20, 23)));
    for bad in [
        "priority=7",
        "tcp,udp actions=deny",
        "in_port=nowhere actions=deny",
        "nw_src=10.0.0.0/8,ipv6_dst=::1 actions=deny",
        "tcp,tp_dst=9-1 actions=deny",
        "frobnicate actions=allow",
        "tcp actions=maybe",
    ] {
        assert!(parse_acl_rule(bad, &ports).is_err(), "{bad}");
    }
}

#[test]
fn a_capture_replays_through_the_switch() {
    let dir = std::env::temp_dir().join(format!("tern-flow-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(example("replay.toml"))
        .unwrap()
        .replace("/tmp/tern-flow-left.pcap", &dir.join("left.pcap").display().to_string())
        .replace("/tmp/tern-flow-right.pcap", &dir.join("right.pcap").display().to_string());
    let cfg = config::parse(&text, &example("replay.toml")).unwrap();
    let pool = Pool::new(2048, 2048);
    let mut rt = Runtime::open(&cfg, &pool).unwrap();
    let (_tx, rx) = std::sync::mpsc::channel();
    rt.run(&AtomicBool::new(false), &rx, true);
    let s = rt.snapshot();
    assert_eq!(s.ports[0].1.rx_packets, 600);
    let sent = s.ports[0].1.tx_packets + s.ports[1].1.tx_packets;
    // 600 in: 100 with TTL 1 and 100 to a denied ssh port are dropped.
    assert_eq!(sent, 400, "{s:?}");
    assert!(s.pipeline.hits > s.pipeline.misses, "{s:?}");
    assert_eq!(s.cache.upcalls, s.pipeline.misses);
    drop(rt);
    // What went out parses, with the TTL decremented.
    let mut r = pcap_file::pcap::PcapReader::new(std::fs::File::open(dir.join("right.pcap")).unwrap()).unwrap();
    let mut n = 0;
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let info = tern_wire::frame::FrameInfo::parse(&p.data).unwrap();
        assert_eq!(info.ttl, 63);
        assert!(tern_wire::frame::l4_checksum_ok(&p.data, &info));
        n += 1;
    }
    assert!(n > 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn reload_swaps_the_tables_and_flushes_the_cache() {
    use std::time::Instant;
    use tern_flow::runtime::{Control, FlowPort};
    use tern_flow::slowpath::SlowPath;
    use tern_io::{Batch, Port, mem};

    let text = |to: &str| {
        format!(
            "[[port]]\nname = \"a\"\npcap_out = \"/dev/null\"\n[[port]]\nname = \"b\"\npcap_out = \"/dev/null\"\n\
             [[ofu]]\nid = 1\nkind = \"em\"\n[routes]\nroutes = [\"10.2.0.0/16 {to}\"]\n\
             [[next_hop]]\nname = \"a\"\nport = \"a\"\neth_src = \"02:00:00:00:00:0a\"\neth_dst = \"02:00:00:00:00:01\"\n\
             [[next_hop]]\nname = \"b\"\nport = \"b\"\neth_src = \"02:00:00:00:00:0b\"\neth_dst = \"02:00:00:00:00:02\"\n"
        )
    };
    let cfg = config::parse(&text("b"), Path::new("inline.toml")).unwrap();
    let pool = Pool::new(256, 2048);
    let (mut host_a, port_a) = mem::pair(&pool, 64);
    let (mut host_b, port_b) = mem::pair(&pool, 64);
    let ports = vec![FlowPort::Other(Box::new(port_a)), FlowPort::Other(Box::new(port_b))];
    let mut rt = Runtime::with_ports(cfg.build(&pool).unwrap(), ports, vec!["a".into(), "b".into()], &pool);
    let mut send = |rt: &mut Runtime| {
        let mut f = Vec::new();
        tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 1, 0, 1], [10, 2, 0, 7], 1000, 53, 64, b"x");
        let mut b = Batch::new(4);
        let mut p = pool.packet();
        p.extend_from_slice(&f).unwrap();
        b.push(p);
        host_a.send(Instant::now(), &mut b).unwrap();
        rt.poll(Instant::now());
        rt.poll(Instant::now());
        let (mut got_a, mut got_b) = (Batch::new(8), Batch::new(8));
        host_a.recv(Instant::now(), &mut got_a).unwrap();
        host_b.recv(Instant::now(), &mut got_b).unwrap();
        let r = (got_a.len(), got_b.len());
        got_a.recycle(&pool);
        got_b.recycle(&pool);
        r
    };
    assert_eq!(send(&mut rt), (0, 1));
    assert_eq!(send(&mut rt), (0, 1));
    assert_eq!(rt.snapshot().cached.0, 1);
    assert!(rt.snapshot().pipeline.hits >= 1);
    // The route now points back out of `a`: the cached rule must not outlive it.
    let new = config::parse(&text("a"), Path::new("inline.toml")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (gtx, grx) = std::sync::mpsc::channel();
    tx.send(Control::Reload(Box::new(SlowPath::new(&new.tables).unwrap()), gtx)).unwrap();
    rt.answer(&rx);
    assert_eq!(grx.recv().unwrap(), 2);
    assert_eq!(rt.snapshot().generation, 2);
    assert_eq!(send(&mut rt), (1, 0));
}

/// A rule or route file that is a device (read without end) is refused by name, unread.
#[test]
fn a_device_named_as_a_rule_or_route_file_is_refused() {
    for section in ["[acl]\ndefault = \"allow\"\nfile = \"/dev/zero\"\n", "[routes]\nfile = \"/dev/zero\"\n"] {
        let e = refused(&format!("{PORTS}{section}"));
        assert!(e.contains("/dev/zero: not a regular file"), "{section}: {e}");
    }
}
