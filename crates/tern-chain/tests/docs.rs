//! docs/chain.md is the contract: the drop reasons it lists, for each task kind and for the data
//! path, are exactly those the code counts under; the parameters it gives each kind, and the
//! keys of `[ingress]`, exactly those a tenant file may hold.

use std::collections::BTreeSet;

use tern_chain::runtime::reason;
use tern_chain::task::drop_reasons;
use tern_chain::tenant::{BACKEND_KEYS, INGRESS_KEYS, KINDS, RULE_KEYS, parameters};

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/chain.md")).unwrap()
}

/// The names in backticks in `text` that are plain counter names (lower case and `_`).
fn names(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit()))
        .map(str::to_string)
        .collect()
}

/// The table of kinds under "## Network tasks": each row's kind and its last column's names.
fn kind_rows(doc: &str) -> Vec<(String, BTreeSet<String>)> {
    let section = doc.split("\n## Network tasks").nth(1).expect("a section \"Network tasks\"");
    let section = section.split("\n## ").next().unwrap();
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in section.lines() {
        if line.starts_with("| kind | what it does | drop reasons |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let kind = line.split('`').nth(1).expect("a kind in backticks").to_string();
        rows.push((kind, names(&cells(line).pop().expect("columns"))));
    }
    rows
}

#[test]
fn the_docs_list_each_kinds_drop_reasons() {
    let doc = doc();
    let rows = kind_rows(&doc);
    let documented: BTreeSet<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(documented, KINDS.iter().copied().collect(), "docs/chain.md's table of kinds");
    for (kind, listed) in &rows {
        let code: BTreeSet<String> = drop_reasons(kind).iter().map(|r| r.to_string()).collect();
        assert_eq!(listed, &code, "docs/chain.md, kind `{kind}`: the drop reasons listed, and the code's");
    }
}

#[test]
fn the_docs_list_the_data_paths_drop_reasons() {
    let doc = doc();
    let start = doc.find("Drop reasons are the tasks' (above)").expect("the data path's drop reasons in docs/chain.md");
    let paragraph = doc[start..].split("\n\n").next().unwrap();
    let code: BTreeSet<String> = reason::ALL.iter().map(|r| r.to_string()).collect();
    assert_eq!(names(paragraph), code, "docs/chain.md's data-path drop reasons, and `runtime::reason::ALL`");
    // None of them is also a task's: a counter's name says who dropped.
    for kind in KINDS {
        for r in drop_reasons(kind) {
            assert!(!reason::ALL.contains(r), "`{r}` is both {kind}'s and the data path's");
        }
    }
}

/// The names the kinds' drop enums give are what `drop_reasons` lists, in counter order.
#[test]
fn drop_reasons_follow_the_task_enums() {
    use tern_chain::{aes::AesDrop, fw::FwDrop, nat::NatDrop};
    let of = |names: Vec<&'static str>| names;
    assert_eq!(drop_reasons("firewall"), of(FwDrop::ALL.iter().map(|d| d.name()).collect()));
    assert_eq!(drop_reasons("nat"), of(NatDrop::ALL.iter().map(|d| d.name()).collect()));
    assert_eq!(drop_reasons("aes"), of(AesDrop::ALL.iter().map(|d| d.name()).collect()));
    assert!(drop_reasons("dummy").is_empty() && drop_reasons("no such kind").is_empty());
}

/// A table's rows under `heading` (a line starting with `header`): each row's first backticked
/// word and its last column.
fn table(doc: &str, header: &str) -> Vec<(String, String)> {
    let start = doc.find(header).unwrap_or_else(|| panic!("docs/chain.md has no table `{header}`"));
    doc[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let first = l.split('`').nth(1).expect("a backticked first column").to_string();
            (first, cells(l).pop().expect("columns"))
        })
        .collect()
}

/// A table row's cells (a `\\|` inside one is a `|` of its text).
fn cells(row: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = row.trim().trim_start_matches('|').chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => out.last_mut().unwrap().push(chars.next().unwrap()),
            '|' => out.push(String::new()),
            c => out.last_mut().unwrap().push(c),
        }
    }
    out.pop(); // after the closing `|`
    out
}

/// The parameter names in a kind's row: each backticked word that starts a clause, followed by
/// ` (` or `:` (its default or its form); values in backticks are followed by neither.
fn parameter_names(cell: &str) -> BTreeSet<String> {
    let parts: Vec<&str> = cell.split('`').collect();
    (1..parts.len())
        .step_by(2)
        .filter(|&i| {
            let after = parts.get(i + 1).copied().unwrap_or("");
            after.starts_with(" (") || after.starts_with(':')
        })
        .map(|i| parts[i].to_string())
        .filter(|n| n.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .collect()
}

/// The keys of the first `{ key = ..., key, ... }` in a cell.
fn braced_keys(cell: &str) -> BTreeSet<String> {
    let inner = cell.split_once("`{").and_then(|(_, r)| r.split_once("}`")).expect("a `{ ... }` in the cell").0;
    inner.split(',').filter_map(|k| k.split_whitespace().next()).map(str::to_string).collect()
}

#[test]
fn the_docs_give_each_kind_its_parameters() {
    let doc = doc();
    let rows = table(&doc, "| kind | parameters |");
    let documented: BTreeSet<&str> = rows.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(documented, KINDS.iter().copied().collect(), "docs/chain.md's table of parameters");
    for (kind, cell) in &rows {
        let code: BTreeSet<String> = parameters(kind).iter().map(|p| p.to_string()).collect();
        assert_eq!(parameter_names(cell), code, "docs/chain.md, kind `{kind}`: its parameters, and the code's");
    }
    // A firewall rule's keys, and a backend's.
    let cell = |kind: &str| rows.iter().find(|(k, _)| k == kind).map(|(_, c)| c.as_str()).unwrap();
    let set = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<BTreeSet<String>>();
    assert_eq!(braced_keys(cell("firewall")), set(&RULE_KEYS), "docs/chain.md: a firewall rule's keys");
    assert_eq!(braced_keys(cell("lb")), set(&BACKEND_KEYS), "docs/chain.md: a backend's keys");
    // The `[ingress]` row's keys (its values are quoted, so not plain names).
    let row = doc.lines().find(|l| l.starts_with("| `[ingress]` |")).expect("an `[ingress]` row");
    let listed = names(&cells(row)[1]);
    assert_eq!(listed, INGRESS_KEYS.iter().map(|k| k.to_string()).collect(), "docs/chain.md's `[ingress]` keys");
}

/// The go-back-N section's header table is the code's: each field's offset and size, the
/// header's length, the version, and the kinds' numbers and names; and the counters the `gbn`
/// task reports are each named there.
#[test]
fn the_docs_give_the_transports_header_and_counters() {
    use tern_chain::gbn;
    let doc = doc();
    let section = doc.split("\n## Go-back-N transport").nth(1).expect("a section \"Go-back-N transport\"");
    let section = section.split("\n## ").next().unwrap();
    let start = section.find("| offset | size | field | value |").expect("the header's table");
    let rows: Vec<Vec<String>> = section[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| cells(l).into_iter().map(|c| c.trim().to_string()).collect())
        .collect();
    let fields: Vec<(usize, usize, &str)> =
        rows.iter().map(|r| (r[0].parse().unwrap(), r[1].parse().unwrap(), r[2].as_str())).collect();
    assert_eq!(fields, [(0, 1, "version"), (1, 1, "kind"), (2, 2, "length"), (4, 4, "connection"), (8, 4, "sequence")]);
    assert_eq!(fields.iter().map(|f| f.1).sum::<usize>(), gbn::HEADER_LEN);
    assert_eq!(rows[0][3], gbn::VERSION.to_string());
    assert_eq!(
        rows[1][3],
        format!(
            "{} data, {} acknowledgement, {} open, {} reset, {} cookie",
            gbn::DATA,
            gbn::ACK,
            gbn::OPEN,
            gbn::RESET,
            gbn::COOKIE
        )
    );
    // Each kind's bytes as the table lays them out.
    let mut b = Vec::new();
    gbn::Header { kind: gbn::OPEN, len: 0, conn: 0x0a0b_0c0d, seq: 7 }.write(&[], &mut b);
    assert_eq!(b, [gbn::VERSION, gbn::OPEN, 0, 0, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 0, 7]);
    let t = tern_chain::tenant::Tenant::parse("tenant = \"t\"\ndag = \"x\"\n[nt.x]\nkind = \"gbn\"\n").unwrap();
    let task = tern_chain::task::build(&t.tasks[0], &mut tern_chain::task::Keys::default()).unwrap();
    let named = names(section);
    for (counter, _) in task.counters() {
        assert!(named.contains(counter), "the gbn task's counter `{counter}` is not named in the go-back-N section");
    }
}
