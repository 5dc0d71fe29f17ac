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
