//! Switch programs (docs/clip.md, "Programs"): the SNAT example checked and placed, and each
//! kind of bad item refused by name.

use tern_hw::Profile;
use tern_hw::switch::SwitchModel;
use tern_switch::program::{Op, Operand, Program};

fn snat() -> String {
    std::fs::read_to_string(format!("{}/../../examples/switch/snat.toml", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// Appendix A's SNAT: parsed, its tables and actions as written, and placed on `clip-tofino`:
/// the five classifying steps first (each writes the `path` the next reads), the `nat` table after
/// them (2,048 entries of a 136-bit key and 48 bits of action data) with the register it
/// counts in beside it, `nat_in` and the requests after, and the rewrites (which write what
/// the tables match on) last.
#[test]
fn snat_parses_and_places() {
    let p = Program::parse(&snat()).unwrap();
    assert_eq!((p.name.as_str(), p.id, p.handler.as_deref()), ("snat", 1, Some("snat")));
    assert_eq!(p.tables[0].key.len(), 7);
    assert!(p.tables[0].mirrored);
    assert!(p.tables[1].mirrored, "replies' entries move into the switch too");
    let translate = p.actions.iter().find(|a| a.name == "translate").unwrap();
    assert_eq!(translate.params, [("addr".to_string(), 32), ("port".to_string(), 16)]);
    assert_eq!(translate.ops[0], Op::Set { dst: "ipv4.src".into(), src: Operand::Field("param.addr".into()) });
    let m = SwitchModel::from_profile(&Profile::builtin("clip-tofino").unwrap()).unwrap();
    let pl = p.placement(&m).unwrap();
    let at: Vec<(&str, usize)> = pl.items.iter().map(|l| (l.name.as_str(), l.first)).collect();
    assert_eq!(
        at,
        [
            ("pre.from_inside", 0),
            ("pre.from_outside", 1),
            ("pre.icmp", 2),
            ("pre.to_public", 3),
            ("pre.not_ip", 4),
            ("nat", 5),
            ("to_server", 5),
            ("pre.icmp_to_server", 6),
            ("nat_in", 7),
            ("pre.ask_owner", 8),
            ("post.rewrite_source", 9),
            ("post.rewrite_destination", 9),
        ]
    );
    // 136 + 48 + 4 bits: two rows an entry, 4,096 rows, 4 blocks; 17 bytes of key.
    assert_eq!((pl.items[5].uses.sram_blocks, pl.items[5].uses.crossbar_bytes), (4, 17));
}

/// Each bad item is refused, naming it.
#[test]
fn bad_programs_are_refused_by_name() {
    let base = snat();
    let cases: [(&str, &str, &str); 18] = [
        (
            "{ field = \"udp.dst_port\", match = \"exact\" },",
            "{ field = \"udp.dport\", match = \"exact\" },",
            "key field `udp.dport` is not a field",
        ),
        (
            "{ field = \"ipv4.src\", match = \"exact\" },",
            "{ field = \"ipv4.src\", match = \"range\" },",
            "match `range`",
        ),
        ("default = \"ask_server\"", "default = \"translate\"", "default action `translate` takes parameters"),
        ("actions = [\"translate\"]", "actions = [\"translat\"]", "action `translat` is not declared"),
        ("src = \"param.addr\"", "src = \"param.adr\"", "action `translate`: op 1: `param.adr` is not a field"),
        ("{ op = \"ecmp\" }", "{ op = \"jump\" }", "`jump` is not an operation"),
        ("register = \"to_server\"", "register = \"to_servers\"", "register `to_servers` is not declared"),
        ("index = \"udp.src_port\"", "index = 1024", "`index` = 1024: the register has 1024 entries"),
        (
            "post_processing = [\"rewrite_source",
            "post_processing = [\"ask_server",
            "post_processing: action `ask_server` sends to a server",
        ),
        (
            "\"nat if meta.path == 1\"",
            "\"natt if meta.path == 1\"",
            "pre_processing: `natt` is neither a table nor an action",
        ),
        ("meta.ingress_port == 1", "meta.ingress == 1", "`meta.ingress` is not a field"),
        ("meta.ingress_port == 1", "meta.ingress_port == 512", "512 is wider than `meta.ingress_port` (9 bits)"),
        ("meta.ingress_port == 1", "meta.ingress_port < 1", "a guard is `FIELD == VALUE`"),
        ("learn = \"translate\"", "learn = \"ask_server\"", "learn action `ask_server` is not one of its actions"),
        ("mirrored = true", "mirrored = false", "`learn` is for a mirrored table"),
        (
            "{ name = \"port\", bits = 16 }, { name = \"dir\", bits = 8 }]",
            "{ name = \"port\", bits = 24 }, { name = \"dir\", bits = 8 }]",
            "learn action `translate`'s parameter `port` (16 bits) is not a response field",
        ),
        ("handler = \"snat\"\n", "", "pre_processing sends to a server but the program names no `handler`"),
        (
            "request = [{ name = \"flow\", bits = 64 }",
            "request = [{ name = \"flow\", bits = 65 }",
            "request parameter `flow`: 65 bits",
        ),
    ];
    for (from, to, want) in cases {
        assert!(base.contains(from), "{from}");
        let e = Program::parse(&base.replacen(from, to, 1)).unwrap_err();
        assert!(e.contains(want), "{to}: {e}");
    }
    // A constant wider than its field; a parameter written; an unknown key in an op.
    let e = Program::parse(&base.replacen("src = \"param.port\"", "src = 70000", 1)).unwrap_err();
    assert!(e.contains("`src` = 70000: wider than 16 bits"), "{e}");
    let e = Program::parse(&base.replacen(
        "dst = \"ipv4.src\", src = \"param.addr\"",
        "dst = \"param.addr\", src = \"ipv4.src\"",
        1,
    ))
    .unwrap_err();
    assert!(e.contains("cannot be written"), "{e}");
    let e = Program::parse(&base.replacen("{ op = \"ecmp\" }", "{ op = \"ecmp\", port = 3 }", 1)).unwrap_err();
    assert!(e.contains("`ecmp` takes no `port`"), "{e}");
    // Not TOML of a program at all.
    assert!(Program::parse("name = 3").is_err());
    // A register array's cells are made at load: 2^24 at most (more would once end the
    // process on allocation).
    for (entries, ok) in [(1u64 << 24, true), ((1 << 24) + 1, false), (i64::MAX as u64, false)] {
        let r = Program::parse(&base.replacen("entries = 1024", &format!("entries = {entries}"), 1));
        assert_eq!(r.is_ok(), ok, "{entries}: {r:?}");
        if let Err(e) = r {
            assert!(e.contains("register `to_server`") && e.contains("entries 1 to 16777216"), "{e}");
        }
    }
}

/// Declared headers and parser states: a loop, a header no state reaches, a field of another
/// header as the select, a value too wide, a header of part of a byte, a taken name, and a
/// header extracted twice are refused by name; the good one parses.
#[test]
fn headers_and_parser_states_are_checked() {
    let base = r#"
name = "p"
program = 3
[[header]]
name = "a"
fields = [{ name = "x", bits = 8 }, { name = "y", bits = 8 }]
[[header]]
name = "b"
fields = [{ name = "z", bits = 16 }]
[[parser]]
after = "udp"
select = "udp.dst_port"
value = 9000
extract = "a"
[[parser]]
after = "a"
select = "a.x"
value = 1
extract = "b"
"#;
    let p = Program::parse(base).unwrap();
    assert_eq!(p.headers.len(), 2);
    assert_eq!(p.width("b.z"), Some(16));
    assert_eq!(p.parser[1].after, "a");
    let cases = [
        (
            "after = \"udp\"\nselect = \"udp.dst_port\"\nvalue = 9000",
            "after = \"b\"\nselect = \"b.z\"\nvalue = 9000",
            "form a loop",
        ),
        ("after = \"a\"", "after = \"c\"", "`after` = `c` is not a header"),
        ("select = \"a.x\"", "select = \"udp.dst_port\"", "is not a field of `a`"),
        ("value = 9000", "value = 70000", "wider than `udp.dst_port`"),
        ("{ name = \"z\", bits = 16 }", "{ name = \"z\", bits = 12 }", "header `b`: 12 bits"),
        ("name = \"b\"", "name = \"ipv4\"", "header `ipv4`: the name is taken"),
        ("extract = \"b\"", "extract = \"a\"", "another state extracts it"),
        ("extract = \"b\"", "extract = \"q\"", "`q` is not a declared header"),
    ];
    for (from, to, want) in cases {
        assert!(base.contains(from), "{from}");
        let e = Program::parse(&base.replacen(from, to, 1)).unwrap_err();
        assert!(e.contains(want), "{to}: {e}");
    }
}

/// A program file must be a regular file (a device would be read forever), named in the error.
#[test]
fn a_program_that_is_not_a_regular_file_is_refused() {
    let e = Program::load(std::path::Path::new("/dev/zero")).unwrap_err();
    assert!(e.contains("/dev/zero: not a regular file"), "{e}");
}
