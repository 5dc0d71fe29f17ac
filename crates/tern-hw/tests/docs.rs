//! docs/profiles.md is the contract for profile files: its tables of keys are `tern_hw::keys`,
//! key for key and meaning for meaning, and every built-in profile's keys are among them.

use tern_hw::{BUILTIN, Profile, keys};

/// The rows of docs/profiles.md's table whose header starts with `header`: (key, meaning).
fn table(header: &str) -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/profiles.md")).unwrap();
    let start = doc.find(header).unwrap_or_else(|| panic!("no table `{header}` in docs/profiles.md"));
    doc[start..]
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cols: Vec<&str> = row.split('|').map(str::trim).collect();
            (cols[1].trim_matches('`').to_string(), cols[2].to_string())
        })
        .collect()
}

#[test]
fn the_docs_tables_are_the_keys() {
    for (header, list) in [
        ("| capacity key |", keys::CAPACITY),
        ("| cycles key |", keys::CYCLES),
        ("| rates key |", keys::RATES),
        ("| latency_ns key |", keys::LATENCY_NS),
        ("| network task |", keys::NETWORK_TASKS),
    ] {
        let code: Vec<(String, String)> = list.iter().map(|(k, m)| (k.to_string(), m.to_string())).collect();
        assert_eq!(table(header), code, "{header}");
    }
}

#[test]
fn every_builtin_profile_is_written_in_the_documented_keys() {
    for name in BUILTIN {
        let p = Profile::builtin(name).unwrap();
        for (t, ks) in p.table_keys() {
            for k in ks {
                assert!(keys::known(t, k), "{name}: [{t}] {k}");
            }
        }
    }
}

/// A profile file that is a device (read without end) is refused by name, unread.
#[test]
fn a_device_as_a_profile_file_is_refused() {
    let e = Profile::load(std::path::Path::new("/dev/zero")).unwrap_err().to_string();
    assert!(e.contains("/dev/zero") && e.contains("not a regular file"), "{e}");
}
