//! The placement pass on `clip-tofino`'s pipe (docs/clip.md, "Placement").

use tern_hw::Profile;
use tern_hw::switch::SwitchModel;
use tern_switch::place::{Item, MatchKind, PlaceError, RegisterSpec, TableSpec, place};

fn model() -> SwitchModel {
    SwitchModel::from_profile(&Profile::builtin("clip-tofino").unwrap()).unwrap()
}

fn exact(name: &str, key: &str, entries: u64, writes: &[&str]) -> Item {
    Item::Table(TableSpec {
        name: name.into(),
        keys: vec![(key.into(), 32, MatchKind::Exact)],
        entries,
        action_bits: 32,
        reads: vec![],
        writes: writes.iter().map(|s| s.to_string()).collect(),
        primitives: 2,
        registers: Vec::new(),
    })
}

fn register(name: &str, index: &str, writes: &[&str]) -> Item {
    Item::Register(RegisterSpec {
        name: name.into(),
        entries: 1024,
        bits: 32,
        reads: vec![index.into()],
        writes: writes.iter().map(|s| s.to_string()).collect(),
        owner: None,
    })
}

/// Independent items share stage 0; a chain of match dependencies takes a stage each (a
/// table keyed on what the one before writes comes after it); an action dependency (writing
/// what an earlier one reads) too.
#[test]
fn dependencies_set_the_stages() {
    let m = model();
    let p = place(
        &m,
        &[exact("a", "ipv4.dst", 1024, &[]), exact("b", "ipv4.src", 1024, &[]), register("r", "meta.h", &[])],
    )
    .unwrap();
    assert!(p.items.iter().all(|l| l.first == 0 && l.last == 0), "{p:?}");
    let p = place(
        &m,
        &[
            exact("route", "ipv4.dst", 1024, &["meta.nexthop"]),
            exact("nexthop", "meta.nexthop", 64, &["meta.port"]),
            exact("port", "meta.port", 32, &["eth.dst"]),
            // Writes what `route` reads: after it.
            exact("rewrite", "ipv4.src", 16, &["ipv4.dst"]),
        ],
    )
    .unwrap();
    let stages: Vec<(usize, usize)> = p.items.iter().map(|l| (l.first, l.last)).collect();
    assert_eq!(stages, [(0, 0), (1, 1), (2, 2), (1, 1)]);
    assert_eq!(p.depth(), 3);
}

/// A table larger than a stage's SRAM spans consecutive stages; a TCAM table of 10,000 IPv4
/// routes fits one stage (20 of 24 blocks), 15,000 span two; CLIP's two sketch ways, each a
/// register array, share a stage.
#[test]
fn big_tables_span_stages() {
    let m = model();
    // 100,000 entries of 32 + 32 + 4 bits: one a row, 100,000 rows: 98 blocks, 80 + 18.
    let p = place(&m, &[exact("big", "ipv4.dst", 100_000, &[])]).unwrap();
    assert_eq!((p.items[0].first, p.items[0].last, p.items[0].uses.sram_blocks), (0, 1, 98));
    assert_eq!((p.stages[0].sram_blocks, p.stages[1].sram_blocks), (80, 18));
    let lpm = |n: u64| {
        Item::Table(TableSpec {
            name: "lpm".into(),
            keys: vec![("ipv4.dst".into(), 32, MatchKind::Lpm)],
            entries: n,
            action_bits: 16,
            reads: vec![],
            writes: vec!["meta.nexthop".into()],
            primitives: 1,
            registers: Vec::new(),
        })
    };
    let p = place(&m, &[lpm(10_000)]).unwrap();
    assert_eq!((p.items[0].last, p.stages[0].tcam_blocks), (0, 20));
    let p = place(&m, &[lpm(15_000)]).unwrap();
    assert_eq!((p.items[0].first, p.items[0].last, p.total().tcam_blocks), (0, 1, 30));
    let p = place(&m, &[register("cm0", "meta.h0", &["meta.c0"]), register("cm1", "meta.h1", &["meta.c1"])]).unwrap();
    assert_eq!((p.items[0].first, p.items[1].first, p.total().sram_blocks, p.total().hash_bits), (0, 0, 2, 20));
}

/// What does not fit is named: a chain of 13 dependent tables in 12 stages; a table wanting
/// more SRAM than the pipe has; two items of one name.
#[test]
fn what_does_not_fit_is_named() {
    let m = model();
    let chain: Vec<Item> =
        (0..13).map(|i| exact(&format!("t{i}"), &format!("meta.f{i}"), 16, &[&format!("meta.f{}", i + 1)])).collect();
    let e = place(&m, &chain).unwrap_err();
    assert!(matches!(&e, PlaceError::DoesNotFit { name, from: 12, .. } if name == "t12"), "{e}");
    assert!(e.to_string().contains("table `t12` does not fit") && e.to_string().contains("from stage 12"), "{e}");
    let e = place(&m, &[exact("huge", "ipv4.dst", 2_000_000, &[])]).unwrap_err();
    assert!(e.to_string().contains("table `huge`") && e.to_string().contains("SRAM"), "{e}");
    let e = place(&m, &[exact("a", "x", 1, &[]), register("a", "y", &[])]).unwrap_err();
    assert_eq!(e, PlaceError::Duplicate("a".into()));
}

/// A register driven by a table's action goes in that table's stage, though its index reads a
/// field the same table's other action writes; without an owner it would go after it.
#[test]
fn an_owned_register_goes_with_its_table() {
    let m = model();
    let table = exact("nat", "ipv4.src", 1024, &["udp.src_port"]);
    let reg = |owner: Option<&str>| {
        Item::Register(RegisterSpec {
            name: "count".into(),
            entries: 1024,
            bits: 32,
            reads: vec!["udp.src_port".into()],
            writes: vec![],
            owner: owner.map(String::from),
        })
    };
    let p = place(&m, &[table.clone(), reg(Some("nat"))]).unwrap();
    assert_eq!((p.items[0].first, p.items[1].first), (0, 0));
    let p = place(&m, &[table, reg(None)]).unwrap();
    assert_eq!((p.items[0].first, p.items[1].first), (0, 1));
}
