//! Tenant files: the example loads into its DAG and tasks; every mistake is an error naming the
//! item (a cycle printed as one); what a tenant asks is set against the profile's board.

use std::path::{Path, PathBuf};

use tern_chain::tenant::{TaskSpec, Tenant};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/chain/web.toml")
}

#[test]
fn the_example_loads() {
    let t = Tenant::load(&example()).unwrap();
    assert_eq!((t.name.as_str(), t.bandwidth_gbps), ("web", 10.0));
    assert_eq!(t.dag.names(&t.order), ["fw", "nat", "aes", "lb"]);
    let kinds: Vec<&str> = t.tasks.iter().map(TaskSpec::kind).collect();
    assert_eq!(kinds, ["firewall", "nat", "aes", "lb"]);
    let TaskSpec::Firewall { rules, .. } = &t.tasks[0] else { panic!() };
    assert_eq!(rules.len(), 3);
    assert_eq!(t.ingress.pattern.dst, Some("10.1.0.0/16".parse().unwrap()));
    let TaskSpec::Lb { backends, table_size } = &t.tasks[3] else { panic!() };
    assert_eq!((backends[1].1, *table_size), (2, 65_537));
}

/// The example with `from` replaced by `to`: the error.
fn err(from: &str, to: &str) -> String {
    let text = std::fs::read_to_string(example()).unwrap();
    assert!(text.contains(from), "{from}");
    Tenant::parse(&text.replacen(from, to, 1)).unwrap_err()
}

#[test]
fn mistakes_name_the_item() {
    for (from, to, says) in [
        ("dag = \"fw -> nat -> {aes, lb}\"", "dag = \"fw -> nat -> fw\"", "dag: a cycle: fw -> nat -> fw"),
        ("dag = \"fw -> nat -> {aes, lb}\"", "dag = \"fw -> -> nat\"", "dag: line 1, column 7: expected a name or `{`"),
        (
            "dag = \"fw -> nat -> {aes, lb}\"",
            "dag = \"fw -> nat -> {aes, lb} -> kv\"",
            "dag: `kv` (line 1, column 27) is not declared: add [nt.kv]",
        ),
        ("dag = \"fw -> nat -> {aes, lb}\"", "dag = \"fw -> nat -> aes\"", "nt.lb: declared but not in the DAG"),
        (
            "kind = \"nat\"",
            "kind = \"napt\"",
            "nt.nat.kind: `napt` is not a task kind (firewall, nat, aes, lb, gbn, kv, dummy, stage)",
        ),
        ("external = \"192.0.2.1\"", "external = \"192.0.2\"", "nt.nat.external: `192.0.2` is not an IPv4 address"),
        ("ports = \"20000-29999\"", "ports = \"29999-20000\"", "nt.nat.ports: port range `29999-20000` is empty"),
        ("idle_s = 60", "idle_s = 0", "nt.nat.idle_s = 0: must be 1 to 86400"),
        (
            "idle_s = 60",
            "idle = 60",
            "nt.nat.idle: not a parameter of this kind (kind, external, ports, idle_s, ports_per_host)",
        ),
        ("idle_s = 60", "ports_per_host = 0", "nt.nat.ports_per_host = 0: must be 1 to 65535"),
        ("default = \"deny\"", "max_flows_per_source = 0", "nt.fw.max_flows_per_source = 0: must be 1 to 16777216"),
        ("key = \"000102", "key = \"zz0102", "nt.aes.key: not 64 hex digits"),
        ("direction = \"seal\"", "direction = \"both\"", "nt.aes.direction: `both` is neither seal nor open"),
        (
            "src = \"10.0.0.0/8\"",
            "src = \"10.0.0.0/33\"",
            "nt.fw.rules[0].src: `10.0.0.0/33` is not an address or prefix",
        ),
        (
            "proto = \"tcp\", dst_port",
            "proto = \"sctp\", dst_port",
            "nt.fw.rules[0].proto: `\"sctp\"` is not a protocol",
        ),
        (
            "{ action = \"allow\", proto = \"udp\", dst_port = 53",
            "{ action = \"allow\", dst_port = 53",
            "nt.fw.rules[1]: ports need proto = \"tcp\" or \"udp\"",
        ),
        ("{ action = \"deny\"", "{ action = \"drop\"", "nt.fw.rules[2].action: `drop` is neither allow nor deny"),
        ("{ name = \"10.2.0.1:80\" }", "{ name = \"10.2.0.2:80\" }", "nt.lb: backend `10.2.0.2:80` is named twice"),
        ("weight = 2", "weight = 2000", "nt.lb.backends[1].weight = 2000: must be 0 to 1000"),
        ("dst = \"10.1.0.0/16\"", "dest = \"10.1.0.0/16\"", "ingress.dest: not a parameter of this kind"),
        ("bandwidth_gbps = 10.0", "bandwidth_gbps = -1.0", "bandwidth_gbps = -1: must be a number of Gbit/s"),
        ("tenant = \"web\"", "tenant = \"\"", "tenant: `` must be 1 to 64 bytes"),
        ("tenant = \"web\"", "tenants = \"web\"", "unknown field `tenants`"),
    ] {
        let e = err(from, to);
        assert!(e.contains(says), "{from} -> {to}: {e}");
    }
}

#[test]
fn what_it_asks_is_set_against_the_board() {
    let p = tern_hw::Profile::builtin("supernic-htg9200").unwrap();
    let m = tern_hw::chain::ChainModel::from_profile(&p).unwrap();
    let t = Tenant::load(&example()).unwrap();
    let uses = t.uses(&p, &m).unwrap();
    // Figure 6's areas: FW 468 + NAT 864 + AES 535 + LB 4533 LUTs; 8 regions of 100 K.
    assert_eq!((uses[0].asked, uses[0].available), (10.0, 100.0));
    assert_eq!((uses[1].asked, uses[1].available), (468.0 + 864.0 + 535.0 + 4533.0, 800_000.0));
    assert!(uses.iter().all(|u| u.fits()));
    let text = std::fs::read_to_string(example()).unwrap().replace("bandwidth_gbps = 10.0", "bandwidth_gbps = 150.0");
    let greedy = Tenant::parse(&text).unwrap();
    assert!(!greedy.uses(&p, &m).unwrap()[0].fits());
    // A profile without a task's area cannot say.
    let mut bare = p.clone();
    bare.area.remove("nt.lb.luts");
    assert!(t.uses(&bare, &m).unwrap_err().contains("nt.lb.luts"));
}

#[test]
fn figure_4s_dags_load_with_dummy_tasks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/chain");
    let a = Tenant::load(&dir.join("figure4-a.toml")).unwrap();
    assert_eq!(a.dag.names(&a.dag.entries()), ["nt1", "nt3"]);
    assert_eq!(a.dag.names(&a.dag.exits()), ["nt4"]);
    let b = Tenant::load(&dir.join("figure4-b.toml")).unwrap();
    assert_eq!(b.dag.names(&b.order), ["nt2", "nt4"]);
    assert!(b.tasks.iter().all(|t| matches!(t, TaskSpec::Dummy { ns_per_packet: 100, luts: 1000, .. })));
    // Their parameters are checked like any task's.
    let text = std::fs::read_to_string(dir.join("figure4-b.toml")).unwrap();
    let e = Tenant::parse(&text.replacen("ns_per_packet = 100", "gbps = -3", 1)).unwrap_err();
    assert!(e.contains("nt.nt2.gbps = -3: must be a number of Gbit/s"), "{e}");
    let e = Tenant::parse(&text.replacen("kind = \"dummy\"", "kind = \"kv\"\nmax_entries = 0", 1)).unwrap_err();
    assert!(
        e.contains("nt.nt2.ns_per_packet: not a parameter of this kind") || e.contains("nt.nt2.max_entries = 0"),
        "{e}"
    );
}

/// Every task kind has a name a profile knows (`nt.NAME.luts` and the rest), and the built-in
/// SuperNIC profile gives an area for each that takes one from it.
#[test]
fn every_kind_has_a_name_profiles_know() {
    let p = tern_hw::Profile::builtin("supernic-htg9200").unwrap();
    for kind in tern_chain::tenant::KINDS {
        let name = tern_chain::tenant::profile_name(kind);
        assert!(tern_hw::keys::NETWORK_TASKS.iter().any(|(n, _)| *n == name), "{kind}: {name}");
        // Dummy and stage tasks carry their own area in the tenant file.
        if !matches!(kind, "dummy" | "stage") {
            assert!(p.area.contains_key(&format!("nt.{name}.luts")), "{kind}: nt.{name}.luts");
        }
    }
}

/// A tenant file that is a device (read without end) is refused by name, unread.
#[test]
fn a_device_as_a_tenant_file_is_refused() {
    let e = Tenant::load(Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(e.contains("/dev/zero: not a regular file"), "{e}");
}
