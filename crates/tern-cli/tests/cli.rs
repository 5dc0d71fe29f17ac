//! The `tern` binary as a user runs it.

use std::process::Command;

fn tern(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(args).output().expect("tern runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn pingpong_json_has_the_promised_keys() {
    let (ok, out, err) = tern(&[
        "dispatch",
        "pingpong",
        "--requests",
        "2000",
        "--concurrency",
        "8",
        "--loss",
        "0.1",
        "--duplicate",
        "0.05",
        "--reorder",
        "0.05",
        "--max-retries",
        "20",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "requests",
        "completed",
        "failed",
        "duplicates_delivered",
        "retransmissions",
        "throughput_rps",
        "p50_us",
        "p99_us",
    ] {
        assert!(v.get(key).is_some(), "missing {key} in {out}");
    }
    assert_eq!(v["completed"], 2000);
    assert_eq!(v["duplicates_delivered"], 0);
    assert!(v["retransmissions"].as_u64().unwrap() > 0);
}

#[test]
fn bounded_profile_shares_its_request_table_among_server_threads() {
    let (ok, out, err) = tern(&[
        "dispatch",
        "pingpong",
        "--profile",
        "qingniao-u250",
        "--server-threads",
        "2",
        "--requests",
        "500",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["completed"], 500);
}

#[test]
fn bench_qnp_json_has_the_promised_keys() {
    let (ok, out, err) =
        tern(&["bench", "qnp", "--rounds", "2", "--phase-secs", "0.1", "--concurrency", "4", "--no-pin", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in ["qnp_rps", "raw_rps", "qnp_over_raw", "environment"] {
        assert!(v.get(key).is_some(), "missing {key} in {out}");
    }
    assert!(v["qnp_rps"].as_f64().unwrap() > 0.0 && v["raw_rps"].as_f64().unwrap() > 0.0);
}

#[test]
fn bad_options_name_the_bad_item() {
    let (ok, _, err) = tern(&["dispatch", "pingpong", "--loss", "1.5"]);
    assert!(!ok);
    assert!(err.contains("loss probability 1.5"), "{err}");
    let (ok, _, err) = tern(&["dispatch", "pingpong", "--profile", "no-such-profile"]);
    assert!(!ok);
    assert!(err.contains("unknown profile `no-such-profile`"), "{err}");
    let (ok, _, err) = tern(&[
        "dispatch",
        "pingpong",
        "--profile",
        "qingniao-u250",
        "--server-threads",
        "2",
        "--request-table-entries",
        "1024",
    ]);
    assert!(!ok);
    assert!(err.contains("qnp.request_table_entries asked for 1024, 0 available"), "{err}");
    let (ok, _, err) = tern(&["hw", "show", "nope"]);
    assert!(!ok && err.contains("nope"), "{err}");
}

#[test]
fn idl_check_and_compile() {
    let dir = std::env::temp_dir().join(format!("tern-cli-idl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let proto = dir.join("kv.proto");
    std::fs::write(&proto, "syntax = \"proto3\";\nimport \"tern/qingniao.proto\";\nmessage Get { string key = 1 [(tern.dispatch) = true]; uint64 v = 2; }\n").unwrap();
    let (ok, out, err) = tern(&["idl", "check", proto.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["messages"][0]["dispatch_fields"], serde_json::json!([1]));
    let (ok, _, err) = tern(&["idl", "compile", proto.to_str().unwrap(), "--out", dir.join("gen").to_str().unwrap()]);
    assert!(ok, "{err}");
    let code = std::fs::read_to_string(dir.join("gen/kv.rs")).unwrap();
    assert!(code.contains("pub struct Get"));
    let bad = dir.join("bad.proto");
    std::fs::write(&bad, "syntax = \"proto3\";\nmessage A { int32 x = 1; }\nmessage B { A inner = 1; }\n").unwrap();
    let (ok, _, err) = tern(&["idl", "check", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("message B") && err.contains("`inner`"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn hw_profiles_lists_builtins() {
    let (ok, out, _) = tern(&["hw", "profiles"]);
    assert!(ok && out.contains("cpu") && out.contains("qingniao-u250"));
    let (ok, out, _) = tern(&["hw", "show", "qingniao-u250"]);
    assert!(ok && out.contains("\"qnp.request_table_entries\" = 1024"), "{out}");
}

fn example(name: &str) -> String {
    format!("{}/../../examples/dispatch/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn dispatch_check_reports_use_and_fit() {
    let (ok, out, err) = tern(&["dispatch", "check", &example("kv.toml"), "--profile", "qingniao-u250"]);
    assert!(ok, "{err}");
    assert!(out.contains("6 RAM entries (of 512), 6 CAM entries (of 512), offloadable"), "{out}");

    // Software-only forms: fine for the cpu profile, an error against the U250.
    let (ok, out, err) = tern(&["dispatch", "check", &example("mixed.toml")]);
    assert!(ok, "{out}{err}");
    assert!(err.contains("warning: rule \"admins\": can never match"), "{err}");
    let (ok, out, _) = tern(&["dispatch", "check", &example("mixed.toml"), "--profile", "qingniao-u250"]);
    assert!(!ok);
    assert!(out.contains("error: rule \"jpegs\": a suffix needs a skip"), "{out}");
    assert!(out.contains("error: rule \"admins\": checks 10 bytes at once"), "{out}");
}

#[test]
fn dispatch_check_names_the_bad_rule() {
    let dir = std::env::temp_dir().join(format!("tern-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(example("kv.proto"), dir.join("kv.proto")).unwrap();
    let bad = "idl = \"kv.proto\"\n[server]\nworkers = 2\n[[app]]\nname = \"kv\"\nid = 1\nrequests = { Get = 1 }\n\
               [[rule]]\nname = \"oops\"\napp = \"kv\"\nrequest = \"Get\"\nqueue = 5\nmatch = { key = \"ab..\" }\n";
    std::fs::write(dir.join("bad.toml"), bad).unwrap();
    let (ok, _, err) = tern(&["dispatch", "check", dir.join("bad.toml").to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("rule \"oops\": queue 5 does not exist"), "{err}");
    assert!(err.contains("rule \"oops\": field `key`: the pattern ends with a skip"), "{err}");
    let (ok, out, _) = tern(&["dispatch", "check", dir.join("bad.toml").to_str().unwrap(), "--json"]);
    assert!(!ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["diagnostics"].as_array().unwrap().len(), 2);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn hw_report_projects_the_rule_set() {
    let (ok, out, err) = tern(&["hw", "report", &example("kv.toml"), "--profile", "qingniao-u250"]);
    assert!(ok, "{err}");
    // k = 2: 21 cycles, DMA-bound at 15.7 Mrps.
    let row = out.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|t| t.first() == Some(&"kv"));
    assert_eq!(row.as_deref().map(|t| &t[..3]), Some(&["kv", "2", "21"][..]), "{out}");
    assert!(out.contains("15.70  dma"), "{out}");
    let (ok, out, _) = tern(&["hw", "report", &example("kv.toml"), "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["apps"][0]["projection"]["cycles"], 21);
}
