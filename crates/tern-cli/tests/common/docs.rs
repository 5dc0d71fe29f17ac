//! The docs as a contract, for the CLI's tests: the metric families a server serves, the
//! names and tables a doc gives, and a JSON output checked key by key against a doc's table.

/// The metric families a Prometheus text `body` serves: a counter by its sample's `_total`
/// name, any other kind by its own. Every endpoint's own HTTP family (`tern_http_`, documented
/// once, in docs/dispatch.md, and checked by `tern`'s metrics tests) is left out: the engine's
/// docs list the engine's.
pub fn families_served(body: &str) -> std::collections::BTreeSet<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter(|l| !l.starts_with("tern_http_"))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| if kind == "counter" { format!("{name}_total") } else { name.to_string() })
        .collect()
}

/// Every word of `docs/DOC.md` that starts with `prefix` (a metric's name, where the doc
/// mentions one outside its table too).
pub fn doc_words(doc: &str, prefix: &str) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(format!("{}/../../docs/{doc}.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(prefix) && w.len() > prefix.len())
        .map(str::to_string)
        .collect()
}

/// The first column of `docs/DOC.md`'s table whose header starts with `header`: each row's
/// name in backticks (what follows it, as ` (gauge)`, left out).
pub fn doc_table_column(doc: &str, header: &str) -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(format!("{}/../../docs/{doc}.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let start = text.find(header).unwrap_or_else(|| panic!("no table `{header}` in docs/{doc}.md"));
    text[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|row| row.split('`').nth(1).map(str::to_string))
        .collect()
}

/// A table of `docs/DOC.md` (the one whose header is `header`: `| KEY | holds | what |`) is the
/// contract for the JSON `v`: the rows' keys without a dot are `v`'s keys, and each row's
/// "holds" are the keys of the object at its path (`a.b`; `a[]` is each of a list's entries,
/// `a{}` each value of an object keyed by name, and a list at a path is read entry by entry),
/// unless the path is one of `may_be_null` and it is null. Keys a cell names after "where they
/// apply" may be missing; those before may not.
pub fn json_is_as_documented(v: &serde_json::Value, doc: &str, header: &str, may_be_null: &[&str]) {
    use std::collections::BTreeSet;
    let file = format!("docs/{doc}.md");
    let text = std::fs::read_to_string(format!("{}/../../{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let start = text.find(header).unwrap_or_else(|| panic!("no table `{header}` in {file}"));
    let keys = |o: &serde_json::Value| -> BTreeSet<String> {
        o.as_object().unwrap_or_else(|| panic!("{header}: not an object: {o}")).keys().cloned().collect()
    };
    let quoted = |cell: &str| -> BTreeSet<String> { cell.split('`').skip(1).step_by(2).map(str::to_string).collect() };
    let mut top = BTreeSet::new();
    for row in text[start..].lines().skip(2).take_while(|l| l.starts_with('|')) {
        let cols: Vec<&str> = row.split('|').collect();
        let path = cols[1].trim().trim_matches('`');
        let (required, optional) = cols[2].split_once("where they apply").unwrap_or((cols[2], ""));
        let (required, optional) = (quoted(required), quoted(optional));
        // Every value at the path: a list met on the way stands for each of its entries.
        let mut at = vec![v];
        for part in path.split('.') {
            if let Some(name) = part.strip_suffix("[]") {
                at = at.into_iter().flat_map(|x| x[name].as_array().into_iter().flatten()).collect();
            } else if let Some(name) = part.strip_suffix("{}") {
                at = at.into_iter().flat_map(|x| x[name].as_object().into_iter().flat_map(|o| o.values())).collect();
            } else {
                at = at.into_iter().map(|x| &x[part]).collect();
            }
        }
        if !path.contains('.') {
            top.insert(path.trim_end_matches("{}").trim_end_matches("[]").to_string());
        }
        if required.is_empty() && optional.is_empty() {
            continue;
        }
        for x in at {
            if x.is_null() && may_be_null.contains(&path) {
                continue;
            }
            for x in x.as_array().map_or(vec![x], |l| l.iter().collect()) {
                assert!(x.is_object(), "{header}: `{path}` in the JSON is not an object: {x}");
                let got = keys(x);
                let missing: Vec<_> = required.difference(&got).collect();
                let unnamed: Vec<_> = got.iter().filter(|k| !required.contains(*k) && !optional.contains(*k)).collect();
                assert!(
                    missing.is_empty() && unnamed.is_empty(),
                    "{header}: `{path}` in the JSON lacks {missing:?} that {file} gives, and has {unnamed:?} it does not name: {x}"
                );
            }
        }
    }
    assert_eq!(keys(v), top, "{header}: the JSON's keys, and those {file} gives");
}
