//! docs/flow.md is the contract: its tables of drop reasons are the code's lists, name for name
//! (what `tern_flow_drops_packets_total{reason}` serves and `tern flow serve --json` sums).

use std::collections::BTreeSet;

use tern_flow::pipeline::DropReason;
use tern_flow::runtime::Snapshot;

/// The first column's names of docs/flow.md's table whose header starts with `header`.
fn table(header: &str) -> BTreeSet<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/flow.md")).unwrap();
    let start = doc.find(header).unwrap_or_else(|| panic!("no table `{header}` in docs/flow.md"));
    doc[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| row.split('|').nth(1).unwrap().trim().trim_matches('`').to_string())
        .collect()
}

#[test]
fn the_pipelines_drop_reasons_are_the_docs() {
    let code: BTreeSet<String> = DropReason::all().map(|r| r.as_str().to_string()).collect();
    assert_eq!(code.len(), DropReason::all().count(), "each reason its own name");
    assert_eq!(table("| drop reason | meaning |"), code);
}

#[test]
fn the_slow_paths_drop_reasons_are_the_docs() {
    let code: BTreeSet<String> =
        Snapshot::default().slow_drops().into_iter().map(|(r, _)| format!("slow_{r}")).collect();
    assert_eq!(code.len(), Snapshot::default().slow_drops().len(), "each reason its own name");
    assert_eq!(table("| slow drop reason | meaning |"), code);
}
