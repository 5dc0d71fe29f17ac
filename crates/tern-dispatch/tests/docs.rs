//! The docs are the contract: the drop-reason table of `docs/qnp.md` §8 is generated from the
//! code's list, the one `/metrics` labels its drops with. Regenerate it with
//! `TERN_BLESS=1 cargo test -p tern-dispatch --test docs`.

use tern_dispatch::server::drop_reasons;

const BEGIN: &str = "<!-- drop-reasons: generated from tern_dispatch::server::drop_reasons(); do not edit -->\n";
const END: &str = "<!-- drop-reasons: end -->";

fn table() -> String {
    let mut t = String::from(BEGIN);
    t.push_str("| `/metrics` reason | counted by | meaning |\n|---|---|---|\n");
    for d in drop_reasons() {
        t.push_str(&format!("| `{}` | {} | {} |\n", d.name, d.stage, d.meaning.replace('|', "\\|")));
    }
    t
}

#[test]
fn docs_list_every_drop_reason_metrics_uses() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/qnp.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let (Some(a), Some(b)) = (doc.find(BEGIN), doc.find(END)) else {
        panic!("docs/qnp.md has no generated drop-reason table (markers missing)");
    };
    let want = table();
    if std::env::var_os("TERN_BLESS").is_some() {
        std::fs::write(path, format!("{}{}{}", &doc[..a], want, &doc[b..])).unwrap();
        return;
    }
    assert_eq!(
        &doc[a..b],
        want,
        "docs/qnp.md §8 differs from the code's drop reasons; run TERN_BLESS=1 cargo test -p tern-dispatch --test docs"
    );
    // Names are unique and as /metrics writes them.
    let names: Vec<String> = drop_reasons().into_iter().map(|d| d.name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "duplicate reason names: {names:?}");
    assert!(names.iter().all(|n| n.bytes().all(|c| c.is_ascii_lowercase() || c == b'_')), "{names:?}");
}

/// docs/dispatch.md's worked example of the KV key and value format is what the code builds.
#[test]
fn docs_key_format_example_is_what_the_code_builds() {
    use tern_dispatch::kv::KvLayout;
    use tern_dispatch::synth::Spec;
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/dispatch.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let l = KvLayout { spec: Spec::default(), workers: 4, keys: 100_000 };
    // Partition 5, key index 7: rule 5·32/24 = 6, id 7·24 + 5 = 173.
    assert_eq!(l.rule_of(5), 6);
    let key = l.key(5, 7);
    let shown: String = key.iter().map(|b| format!("{b:02x}")).collect();
    assert!(doc.contains(&shown), "docs/dispatch.md should show the key of partition 5, index 7 as hex:\n{shown}");
    let value: String = l.value(5, 7).iter().map(|b| format!("{b:02x}")).collect();
    assert!(doc.contains(&value), "docs/dispatch.md should show its value as hex:\n{value}");
    let rules = l.to_toml("kv.proto");
    let r6 = rules.split("name = \"r6\"").nth(1).unwrap().lines().find(|l| l.starts_with("match")).unwrap();
    assert!(doc.contains(r6.trim()), "docs/dispatch.md should show rule r6 as gen-rules writes it: {r6}");
}
