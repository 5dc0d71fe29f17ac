//! docs/chain.md is the contract: the drop reasons it lists, for each task kind and for the data
//! path, are exactly those the code counts under.

use std::collections::BTreeSet;

use tern_chain::runtime::reason;
use tern_chain::task::drop_reasons;
use tern_chain::tenant::KINDS;

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
        let (_, last) = line.trim_end().trim_end_matches('|').rsplit_once('|').expect("columns");
        rows.push((kind, names(last)));
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
