//! The `tern` binary as a user runs it.

use std::process::Command;

mod common;
use common::docs::{doc_table_column, doc_words, families_served, json_is_as_documented};

fn tern(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(args).output().expect("tern runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

/// `tern ARGS` started in the background, its stdout and stderr piped.
fn spawn_tern(args: &[&str]) -> std::process::Child {
    spawn_tern_env(args, &[])
}

/// [`spawn_tern`] with `env` set (name, value).
fn spawn_tern_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tern starts")
}

/// A free local TCP address (for `--metrics`).
fn free_tcp() -> String {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string()
}

/// The body of `GET http://ADDR/PATH`.
fn http_text(addr: &str, path: &str) -> String {
    ureq::get(&format!("http://{addr}{path}")).call().unwrap().into_body().read_to_string().unwrap()
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
    json_is_as_documented(&v, "qnp", "| pingpong key | holds | what |", &[]);
    assert_eq!(v["drops"].as_object().unwrap().len(), tern_qnp::DropReason::ALL.len(), "every reason: {v}");
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
    json_is_as_documented(&v, "qnp", "| bench key | holds | what |", &[]);
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
    // Sizes past what a request or a store can hold are refused before anything is allocated
    // for them (both once ended the process with a panic).
    let (ok, _, err) = tern(&["dispatch", "pingpong", "--payload", "18446744073709551615"]);
    assert!(!ok && err.contains("--payload 18446744073709551615: a request carries at most"), "{err}");
    let kv = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/dispatch/kv.toml");
    let (ok, _, err) = tern(&["dispatch", "serve", kv, "--keys", "18446744073709551615"]);
    assert!(!ok && err.contains("keys (18446744073709551615) must be at least 24 and at most"), "{err}");
    let (ok, _, err) = tern(&["rpc", "load", "x.toml", "--timeout", "1e30"]);
    assert!(!ok && err.contains("'--timeout <TIMEOUT>'"), "{err}");
}

/// `tern ARGS` with `stdin` given, killed (and the test failed) if it runs past 30 s; whether
/// it succeeded, and its stdout and stderr together (each short: a pipe is not drained while
/// it runs).
fn tern_bounded(args: &[&str], stdin: std::process::Stdio) -> (bool, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(args)
        .stdin(stdin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tern starts");
    let (status, out, err) = wait_bounded(child, args);
    (status.success(), out + &err)
}

/// Waits for `child` (`tern ARGS`), killed (and the test failed) if it runs past 30 s: its
/// status, stdout and stderr (each short: a pipe is not drained while it runs).
fn wait_bounded(mut child: std::process::Child, args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("tern {args:?} still ran after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut out).expect("stdout");
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("stderr");
    (status, out, err)
}

#[test]
fn a_device_given_as_a_file_is_refused_by_name_unread() {
    // Each command that reads a configuration, a rule file or an input file, given /dev/zero
    // (which reading would fill memory without end: once the case for several of them).
    let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/rpc/image.proto");
    let cases: &[&[&str]] = &[
        &["dispatch", "check", "/dev/zero"],
        &["dispatch", "serve", "/dev/zero"],
        &["flow", "check", "/dev/zero"],
        &["flow", "serve", "/dev/zero"],
        &["hw", "report", "/dev/zero"],
        &["hw", "show", "/dev/zero"],
        &["rpc", "check", "/dev/zero"],
        &["rpc", "serve", "/dev/zero"],
        &["rpc", "load", "/dev/zero"],
        &["rpc", "decode", "--proto", proto, "--message", "image.User", "/dev/zero"],
        &["rpc", "encode", "--proto", proto, "--message", "image.User", "/dev/zero"],
        &["chain", "check", "/dev/zero"],
        &["switch", "check", "/dev/zero"],
        &["switch", "serve", "/dev/zero"],
    ];
    for args in cases {
        let (ok, err) = tern_bounded(args, std::process::Stdio::null());
        assert!(!ok, "tern {args:?} succeeded");
        assert!(err.contains("/dev/zero") && err.contains("not a "), "tern {args:?}: {err}");
    }
    // Stdin without end (`rpc decode` and `encode` read it when no file is given): refused
    // past its bound.
    for (cmd, bound) in [("decode", 64u64 << 20), ("encode", 256 << 20)] {
        let zero = std::fs::File::open("/dev/zero").expect("/dev/zero");
        let (ok, err) =
            tern_bounded(&["rpc", cmd, "--proto", proto, "--message", "image.User"], std::process::Stdio::from(zero));
        assert!(!ok, "rpc {cmd} from /dev/zero succeeded");
        assert!(err.contains(&format!("stdin holds more than the {bound} bytes")), "rpc {cmd}: {err}");
        if cmd == "decode" {
            // docs/rpc.md quotes this refusal word for word.
            let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rpc.md")).unwrap();
            let said = err.lines().find(|l| l.contains("stdin holds")).unwrap().trim_start_matches("error: ");
            assert!(doc.replace('\n', " ").contains(said), "docs/rpc.md does not quote `{said}`");
        }
    }
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
    json_is_as_documented(&v, "qnp", "| idl key | holds | what |", &[]);
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
    // docs/rules.md's table of the JSON, with problems and a warning.
    let (ok, out, _) = tern(&["dispatch", "check", &example("mixed.toml"), "--profile", "qingniao-u250", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!ok && v["ok"] == false && !v["diagnostics"].as_array().unwrap().is_empty(), "{v}");
    assert!(!v["matcher"]["problems"].as_array().unwrap().is_empty(), "{v}");
    json_is_as_documented(&v, "rules", "| check key | holds | what |", &[]);
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

#[test]
fn bench_dispatch_json_has_ratios_per_point_and_at_the_default_point() {
    for transport in ["udp", "mem"] {
        let dir = std::env::temp_dir().join(format!("tern-bench-dispatch-{}-{transport}", std::process::id()));
        let out = dir.to_str().unwrap();
        let (ok, stdout, err) = tern(&[
            "bench",
            "dispatch",
            "--default-only",
            "--default-rounds",
            "2",
            "--phase-secs",
            "0.2",
            "--keys",
            "2400",
            "--transport",
            transport,
            "--json",
            "--out",
            out,
        ]);
        assert!(ok, "{err}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let d = &v["default_point"];
        assert_eq!(d["transport"], transport);
        json_is_as_documented(&v, "dispatch", "| bench key | holds | what |", &[]);
        for k in ["rsd_over_rss", "rsd_over_sw_ring", "rsd_over_sw_uds"] {
            assert!(d[k].as_f64().is_some_and(|x| x > 0.0), "default_point.{k}: {d}");
            assert!(v["points"][0][k].as_f64().is_some(), "points[0].{k}");
            let s = &d["spread"][k];
            assert!(s["min"].as_f64().unwrap() <= s["median"].as_f64().unwrap(), "{s}");
            assert!(s["median"].as_f64().unwrap() <= s["max"].as_f64().unwrap(), "{s}");
        }
        for m in ["rsd", "rss", "sw-ring", "sw-uds"] {
            let r = &d["modes"][m];
            assert!(r["rps"].as_f64().unwrap() > 0.0 && r["p99_us"].as_f64().unwrap() > 0.0, "{m}: {r}");
            assert_eq!(r["errors"], 0, "{m}");
            assert!(r["serve_ns_per_request"].as_f64().unwrap() > 0.0, "{m}: {r}");
            let dispatch = r["dispatch_ns_per_request"].as_f64().unwrap();
            assert!(if m == "rss" { dispatch == 0.0 } else { dispatch > 0.0 }, "{m}: {r}");
            assert!(d["projection_paper_12_cores"][m].as_f64().unwrap() > 0.0, "{m}");
        }
        assert_eq!((d["checks"].as_u64(), d["rules"].as_u64(), d["bytes"].as_u64()), (Some(4), Some(32), Some(5)));
        assert!(dir.join("dispatch.json").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn dispatch_serve_answers_the_load_generator_and_rejects_bad_files() {
    let dir = std::env::temp_dir().join(format!("tern-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(example("kv.proto"), dir.join("kv.proto")).unwrap();
    let (ok, rules, err) = tern(&["dispatch", "gen-rules", "--workers", "2", "--keys", "4800"]);
    assert!(ok, "{err}");
    let file = dir.join("rules.toml");
    std::fs::write(&file, &rules).unwrap();
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap().to_string();
    drop(socket);
    let metrics = free_tcp();
    let file_arg = file.to_str().unwrap();
    let server = spawn_tern(&[
        "dispatch",
        "serve",
        file_arg,
        "--listen",
        &addr,
        "--duration",
        "6",
        "--json",
        "--metrics",
        &metrics,
    ]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // A host name works as well as an address.
    let by_name = addr.replace("127.0.0.1", "localhost");
    let (ok, out, err) =
        tern(&["dispatch", "load", &by_name, "--workers", "2", "--keys", "4800", "--duration", "1", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["completed"].as_u64().unwrap() > 100, "{v}");
    assert_eq!((v["failed"].as_u64(), v["not_found"].as_u64(), v["wrong_value"].as_u64()), (Some(0), Some(0), Some(0)));
    json_is_as_documented(&v, "dispatch", "| load key | holds | what |", &[]);
    // docs/dispatch.md is the contract for the families served (its table names each, and no
    // other), and for the summary's keys.
    let body = http_text(&metrics, "/metrics");
    assert_eq!(families_served(&body), doc_words("dispatch", "tern_dispatch_"), "docs/dispatch.md's metrics");
    let out = server.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json_is_as_documented(&v, "dispatch", "| serve key | holds | what |", &[]);
    assert_eq!(v["drops"]["reconfiguring"], 0, "every reason, from 0 (no reload here): {v}");
    assert_eq!(v["stopped_by"], "duration");
    // A rule naming a queue beyond the workers is refused before anything starts.
    std::fs::write(&file, rules.replacen("queue = 0", "queue = 9", 1)).unwrap();
    let (ok, _, err) = tern(&["dispatch", "serve", file.to_str().unwrap(), "--listen", &addr, "--duration", "1"]);
    assert!(!ok);
    assert!(err.contains("queue 9"), "{err}");
    // A store this build lacks is refused with how to get it; an unknown one is named.
    std::fs::write(&file, &rules).unwrap();
    let (ok, _, err) = tern(&["dispatch", "serve", file.to_str().unwrap(), "--store", "leveldb", "--duration", "1"]);
    assert!(!ok && err.contains("leveldb"), "{err}");
    if !cfg!(feature = "rocksdb") {
        let (ok, _, err) =
            tern(&["dispatch", "serve", file.to_str().unwrap(), "--store", "rocksdb", "--duration", "1"]);
        assert!(!ok && err.contains("--features rocksdb"), "{err}");
    }
    // Limits come from the profile: cpu bounds nothing; qingniao-u250 splits its 1024-entry
    // request table among the workers and refuses more, naming the resource; --keys overrides
    // the file's keys.
    let (ok, out, err) =
        tern(&["dispatch", "serve", file.to_str().unwrap(), "--listen", &addr, "--duration", "0.2", "--keys", "240"]);
    assert!(ok, "{err}");
    assert!(out.contains("loaded 240 keys"), "{out}");
    assert!(out.contains("up to 255 packets a request, 65536 request-table entries per worker"), "{out}");
    let u250 = ["dispatch", "serve", file.to_str().unwrap(), "--listen", &addr, "--profile", "qingniao-u250"];
    let (ok, out, err) = tern(&[&u250[..], &["--duration", "0.2", "--keys", "240"]].concat());
    assert!(ok, "{err}");
    assert!(out.contains("up to 4 packets a request, 512 request-table entries per worker"), "{out}");
    let (ok, _, err) = tern(&[&u250[..], &["--duration", "0.2", "--request-table-entries", "1000"]].concat());
    assert!(!ok && err.contains("qnp.request_table_entries asked for 1000"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn flow_example(name: &str) -> String {
    format!("{}/../../examples/flow/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// examples/flow/replay.toml written into `dir` as `replay.toml`: its capture, ACL and routes
/// read from the examples, its pcap outputs `dir/left.pcap` and `dir/right.pcap`.
fn flow_replay_in(dir: &std::path::Path) -> std::path::PathBuf {
    let cfg = std::fs::read_to_string(flow_example("replay.toml"))
        .unwrap()
        .replace("pcap_in = \"traffic.pcap\"", &format!("pcap_in = \"{}\"", flow_example("traffic.pcap")))
        .replace("/tmp/tern-flow-", &format!("{}/", dir.display()))
        .replace("\"acl.rules\"", &format!("\"{}\"", flow_example("acl.rules")))
        .replace("\"routes.txt\"", &format!("\"{}\"", flow_example("routes.txt")));
    let file = dir.join("replay.toml");
    std::fs::write(&file, cfg).unwrap();
    file
}

#[test]
fn flow_check_trace_and_report() {
    let (ok, out, err) = tern(&["flow", "check", &flow_example("replay.toml"), "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true);
    assert!(v["acl_rules"].as_u64().unwrap() >= 100 && v["routes4"].as_u64().unwrap() >= 10_000);
    json_is_as_documented(&v, "flow", "| check key | holds | what |", &[]);
    // A config that does not fit: the error names the OFU and the profile; exit 1.
    let dir = std::env::temp_dir().join(format!("tern-cli-flow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "profile = \"accelsdp-n3000\"\n[[port]]\nname = \"a\"\npcap_out = \"/dev/null\"\n[[ofu]]\nid = 3\nkind = \"em\"\nentries = 4096\n",
    )
    .unwrap();
    let (ok, _, err) = tern(&["flow", "check", bad.to_str().unwrap()]);
    assert!(!ok && err.contains("ofu 3") && err.contains("accelsdp-n3000"), "{err}");
    let (ok, out, _) = tern(&["flow", "check", bad.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert!(!ok && keys == ["errors", "file", "ok"] && v["ok"] == false, "as docs/flow.md gives it: {v}");
    // Trace: a miss through the slow path, then the cached rule.
    let (ok, out, err) =
        tern(&["flow", "trace", &flow_example("replay.toml"), "udp,nw_src=10.1.0.1,nw_dst=10.2.0.7,tp_dst=53"]);
    assert!(ok, "{err}");
    assert!(out.contains("route 10.2.0.0/16 via next hop \"right\""), "{out}");
    assert!(out.contains("installed 1 exact"), "{out}");
    assert!(out.contains("pass 2:") && out.contains("hit entry 0"), "{out}");
    assert!(out.contains("ttl 63"), "{out}");
    let (ok, _, err) = tern(&["flow", "trace", &flow_example("replay.toml"), "udp,nw_dst=banana"]);
    assert!(!ok && err.contains("banana"), "{err}");
    // The hardware report projects onto the N3000 and states Table 5's rates.
    let (ok, out, err) = tern(&["hw", "report", &flow_example("replay.toml")]);
    assert!(ok, "{err}");
    assert!(out.contains("148.8 Mpps") && out.contains("populate 0.78 M"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bench's verdicts: each of `targets` (name, whether at least its bound, else at most) has
/// its bound in the JSON's `targets`, a verdict in `met` that agrees with the figure, and the
/// same on the printed `targets:` line (in `err`, the table's stream with `--json`).
fn assert_verdicts(v: &serde_json::Value, err: &str, targets: &[(&str, bool)]) {
    let line = err.lines().find(|l| l.starts_with("targets: ")).expect("a targets line");
    for &(key, at_least) in targets {
        let bound = v["targets"][key].as_f64().unwrap_or_else(|| panic!("{key}: no bound"));
        let met = v["met"][key].as_bool().unwrap_or_else(|| panic!("{key}: no verdict"));
        let figure = v[key].as_f64();
        assert_eq!(met, figure.is_some_and(|f| if at_least { f >= bound } else { f <= bound }), "{key}");
        let shown = figure.map_or("not measured".to_string(), |f| format!("{f:.3}"));
        let verdict = format!(
            "{key} {shown} {} {bound} {}",
            if at_least { ">=" } else { "<=" },
            if met { "met" } else { "NOT MET" }
        );
        assert!(line.contains(&verdict), "{verdict} not in {line}");
    }
}

/// Every server says in its help what it stops at without `--duration`, and refuses a duration
/// that is no number of seconds it can wait (infinite, not a number, past a year, 0 or less)
/// naming the option, before it starts: such values once ended some servers with a panic and
/// stopped others at once. As the README says.
#[test]
fn every_server_takes_a_duration_it_can_keep() {
    let ex = |p: &str| format!("{}/../../examples/{p}", env!("CARGO_MANIFEST_DIR"));
    let port = "udp:127.0.0.1:0=127.0.0.1:9";
    let (flow, snat, serve, chain, rpc) = (
        ex("flow/replay.toml"),
        ex("switch/snat.toml"),
        ex("switch/serve.toml"),
        ex("chain/figure10-d.toml"),
        ex("rpc/image.toml"),
    );
    let servers: [Vec<&str>; 6] = [
        vec!["dispatch", "serve", "rules.toml"],
        vec!["flow", "serve", &flow],
        vec!["rpc", "serve", &rpc],
        vec!["chain", "serve", &chain, "--port", port, "--port", port],
        vec!["switch", "serve", &serve],
        vec!["switch", "server", &snat, "--port", port],
    ];
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md")).unwrap();
    let readme = readme.split_whitespace().collect::<Vec<_>>().join(" ");
    for args in &servers {
        let name = args[..2].join(" ");
        assert!(readme.contains(&format!("`{name}`")), "the README's list of servers lacks {name}");
        let (ok, out, _) = tern(&[args[0], args[1], "--help"]);
        assert!(ok, "{name}");
        let help = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            help.contains("--duration <DURATION> Stop after this many seconds (more than 0, at most a year) [default: run until SIGINT or SIGTERM, which stop it cleanly"),
            "{name}: {out}"
        );
        for bad in ["inf", "NaN", "1e30", "0", "-1"] {
            let mut a = args.clone();
            let flag = format!("--duration={bad}");
            a.push(&flag);
            let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(&a).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name} {flag}: {err}");
            assert!(
                err.contains("'--duration <DURATION>'") && err.contains("at most 31536000"),
                "{name} {flag}: {err}"
            );
        }
    }
    // The chain's fairness epoch, likewise.
    let (ok, _, err) = tern(&["chain", "serve", &chain, "--port", port, "--port", port, "--epoch-ms", "inf"]);
    assert!(!ok && err.contains("'--epoch-ms <EPOCH_MS>'") && err.contains("at most 3600000"), "{err}");
}

/// An HTTP server on a free local address that answers every request with 200 and `body`.
fn fake_http(body: &'static str) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    addr
}

/// The clients of a running server (`chain dump`, `switch dump-tables`, `switch scale`) pointed
/// at an HTTP server that is not one say so, naming what its answer lacks, rather than print
/// `null`s and question marks.
#[test]
fn clients_name_an_answer_that_is_not_their_servers() {
    let addr = fake_http("{\"version\": 1}");
    for (args, server, lacks) in [
        (vec!["chain", "dump", "--server", &addr], "tern chain serve --metrics", "mode"),
        (vec!["switch", "dump-tables", "--server", &addr], "tern switch serve --metrics", "table"),
        (vec!["switch", "scale", "--server", &addr, "--add", "1"], "tern switch serve --metrics", "members"),
    ] {
        let (ok, out, err) = tern(&args);
        assert!(!ok && out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(&format!("not an answer of `{server}` (no `{lacks}`)")), "{args:?}: {err}");
    }
    for json in [false, true] {
        let args = if json {
            vec!["flow", "dump-flows", "--server", &addr, "--json"]
        } else {
            vec!["flow", "dump-flows", "--server", &addr]
        };
        let (ok, out, err) = tern(&args);
        assert!(
            !ok && out.is_empty() && err.contains("not an answer of `tern flow serve --metrics`"),
            "{args:?}: {err}"
        );
    }
}

/// `tern flow serve`'s text summary names each drop reason that dropped a frame, and its
/// slow-path drops add up to what its pipeline line says the slow path dropped.
#[test]
fn flow_serve_summary_names_its_drops() {
    let dir = std::env::temp_dir().join(format!("tern-flow-summary-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = flow_replay_in(&dir);
    let (ok, out, err) = tern(&["flow", "serve", file.to_str().unwrap(), "--duration", "1"]);
    std::fs::remove_dir_all(&dir).ok();
    assert!(ok, "{err}");
    let count = |line: &str, label: &str| -> Vec<(String, u64)> {
        let l =
            out.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("no `{label}` in {out}"));
        l.trim_start()[label.len()..]
            .split(", ")
            .map(|d| {
                let (r, n) = d.rsplit_once(' ').unwrap_or_else(|| panic!("{line}: {d}"));
                (r.to_string(), n.parse().unwrap_or_else(|_| panic!("{line}: {d}")))
            })
            .collect()
    };
    // The capture holds frames the tables drop, denied by the ACL and with TTL 1.
    let pipeline = count("pipeline", "pipeline drops: ");
    let slow = count("slow path", "slow-path drops: ");
    assert!(pipeline.iter().any(|(r, n)| r == "action_drop" && *n > 0), "{out}");
    assert!(slow.iter().any(|(r, _)| r == "acl_deny") && slow.iter().any(|(r, _)| r == "ttl_expired"), "{out}");
    assert!(pipeline.iter().chain(&slow).all(|(_, n)| *n > 0), "only reasons that dropped: {out}");
    let line = out.lines().find(|l| l.contains("slow path: ")).unwrap();
    let dropped: u64 = line.split(", ").find_map(|p| p.strip_suffix(" dropped")).unwrap().parse().unwrap();
    assert_eq!(slow.iter().map(|(_, n)| n).sum::<u64>(), dropped, "{out}");
}

/// A capture cut inside a record (its writer killed) is replayed up to the cut, and the summary
/// says where it ended and why, as text and as JSON (once it ended in silence).
#[test]
fn flow_serve_says_where_a_capture_ended_early() {
    let dir = std::env::temp_dir().join(format!("tern-flow-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = flow_replay_in(&dir);
    let whole = std::fs::read(flow_example("traffic.pcap")).unwrap();
    let cut = dir.join("cut.pcap");
    std::fs::write(&cut, &whole[..whole.len() / 2]).unwrap();
    let cfg = std::fs::read_to_string(&file).unwrap().replace(&flow_example("traffic.pcap"), cut.to_str().unwrap());
    std::fs::write(&file, cfg).unwrap();
    let (ok, out, err) = tern(&["flow", "serve", file.to_str().unwrap(), "--until-done", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    json_is_as_documented(&v, "flow", "| serve key | holds | what |", &[]);
    let rx = v["ports"]["left"]["rx_packets"].as_u64().unwrap();
    assert!(rx > 100 && rx < 600, "the frames before the cut, of 600: {v}");
    let e = v["captures"]["left"]["error"].as_str().unwrap_or_else(|| panic!("no error: {v}"));
    assert!(e.starts_with(&format!("{}: record {}: ", cut.display(), rx + 1)), "{e}");
    assert_eq!(v["captures"]["left"]["skipped"], 0, "{v}");
    let (ok, out, err) = tern(&["flow", "serve", file.to_str().unwrap(), "--until-done"]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("port left: the capture ended early, at a record it could not read: {e}")), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern flow serve --stats-interval`: a progress line on stderr at each interval (the flag
/// once did nothing), the --json summary on stdout.
#[test]
fn flow_serve_reports_progress() {
    let dir = std::env::temp_dir().join(format!("tern-flow-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = flow_replay_in(&dir);
    let metrics = free_tcp();
    let file_arg = file.to_str().unwrap();
    let child = spawn_tern(&[
        "flow",
        "serve",
        file_arg,
        "--duration",
        "2.2",
        "--stats-interval",
        "0.5",
        "--json",
        "--metrics",
        &metrics,
    ]);
    // While it runs (the capture is replayed at once; the run goes on to 2.2 s): docs/flow.md
    // is the contract for the metric families served, the drop reasons and `/flows`' rows.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let get = |path: &str| http_text(&metrics, path);
    let body = get("/metrics");
    let doc = std::fs::read_to_string(format!("{}/../../docs/flow.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let named = doc_table_column("flow", "| family | labels | counts |");
    assert_eq!(families_served(&body), named, "the metrics served, and docs/flow.md's table");
    assert_eq!(doc_words("flow", "tern_flow_"), named, "docs/flow.md names only the families of its table");
    let reasons: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("tern_flow_drops_packets_total{reason=\""))
        .filter_map(|l| l.split('"').nth(1))
        .collect();
    assert_eq!(reasons.len(), 20 + 9, "every reason, from 0: {body}");
    for r in &reasons {
        assert!(doc.contains(&format!("| `{r}` |")), "drop reason {r}: not in docs/flow.md's tables");
    }
    let flows: serde_json::Value = serde_json::from_str(&get("/flows")).unwrap();
    assert!(flows.as_array().is_some_and(|f| !f.is_empty()), "{flows}");
    for row in flows.as_array().unwrap() {
        json_is_as_documented(row, "flow", "| flows key | holds | what |", &[]);
    }
    let out = child.wait_with_output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with('[') && l.contains(" frames in, ")).collect();
    assert!(lines.len() >= 2, "{err}");
    assert!(lines.last().unwrap().contains("600 frames in"), "the capture's 600 frames: {err}");
    // Every frame in went out or was dropped (by a port, the pipeline or the slow path).
    let count = |after: &str| -> u64 {
        let l = lines.last().unwrap();
        l.split(after).next().and_then(|s| s.rsplit(' ').next()).and_then(|n| n.parse().ok()).unwrap()
    };
    assert_eq!(count(" out, ") + count(" dropped; "), 600, "{}", lines.last().unwrap());
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["elapsed_s"].as_f64().is_some(), "{v}");
    json_is_as_documented(&v, "flow", "| serve key | holds | what |", &[]);
    let slow: u64 = v["slow_drops"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
    assert!(slow > 0 && v["slow_dropped"].as_u64() == Some(slow), "every slow-path drop has its reason: {v}");
    let (ok, _, err) = tern(&["flow", "serve", file.to_str().unwrap(), "--stats-interval=-1"]);
    assert!(!ok && err.contains("--stats-interval -1"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_flow_json_has_the_promised_keys() {
    let dir = std::env::temp_dir().join(format!("tern-cli-bench-flow-{}", std::process::id()));
    let (ok, out, err) = tern(&[
        "bench",
        "flow",
        "--json",
        "--rounds",
        "1",
        "--phase-secs",
        "0.05",
        "--routes",
        "500",
        "--flows",
        "64",
        "--config-rules",
        "500",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for k in ["fast_over_slow_64b", "fast_over_slow_1024b", "populate_per_s", "projected_n3000_over_fast_64b"] {
        assert!(v[k].as_f64().is_some_and(|x| x > 0.0), "{k}: {}", v[k]);
    }
    assert_verdicts(&v, &err, &[("fast_over_slow_64b", true), ("populate_per_s", true)]);
    json_is_as_documented(&v, "flow", "| bench key | holds | what |", &[]);
    // The projection is the N3000's line rate at 64 B (148.8 Mpps) over the measured fast path.
    let s64 = &v["sizes"][0];
    assert_eq!(s64["frame_bytes"], 64);
    let hw = s64["projected_n3000_pps"].as_f64().unwrap();
    assert!((hw / 1e6 - 148.8).abs() < 0.1, "{hw}");
    let fast = s64["fast"]["median_pps"].as_f64().unwrap();
    assert!((s64["projected_n3000_over_fast"].as_f64().unwrap() - hw / fast).abs() < 1e-6 * hw / fast);
    assert!(dir.join("flow.json").exists() && dir.join("flow.png").exists() && dir.join("flow.svg").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server stops cleanly on SIGINT and SIGTERM: summary printed, temporary store removed,
/// exit 0. A second server on a held address fails, naming it.
#[test]
fn dispatch_serve_stops_cleanly_on_signals_and_refuses_a_held_address() {
    let dir = std::env::temp_dir().join(format!("tern-signals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(example("kv.proto"), dir.join("kv.proto")).unwrap();
    let (ok, rules, err) = tern(&["dispatch", "gen-rules", "--workers", "2", "--keys", "480"]);
    assert!(ok, "{err}");
    let file = dir.join("rules.toml");
    std::fs::write(&file, &rules).unwrap();
    for (signal, json) in [("-INT", false), ("-TERM", true)] {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap().to_string();
        drop(socket);
        let mut args = vec!["dispatch", "serve", file.to_str().unwrap(), "--listen", &addr];
        if json {
            args.push("--json");
        }
        let server = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(&args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let (ok, _, err) = tern(&["dispatch", "serve", file.to_str().unwrap(), "--listen", &addr, "--duration", "1"]);
        assert!(!ok && err.contains(&format!("cannot listen on {addr}")), "{err}");
        let (ok, out, err) = tern(&["dispatch", "load", &addr, "--workers", "2", "--keys", "480", "--duration", "0.5"]);
        assert!(ok, "{out}{err}");
        let pid = server.id().to_string();
        assert!(Command::new("kill").args([signal, &pid]).status().unwrap().success());
        let out = server.wait_with_output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{signal}: {:?}\n{stdout}\n{stderr}", out.status);
        let human = if json { &stderr } else { &stdout };
        let store = human.split("loaded 480 keys into ").nth(1).and_then(|s| s.split(' ').next()).unwrap();
        assert!(!std::path::Path::new(store).exists(), "{signal}: {store} left behind");
        if json {
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(v["stopped_by"], "signal");
            assert!(v["requests_handled"].as_u64().unwrap() > 0, "{v}");
        } else {
            assert!(stdout.contains("stopped (signal)"), "{stdout}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Output piped into `head` ends without a panic, whatever the command writes next.
#[test]
fn piping_into_head_never_panics() {
    use std::io::{BufRead, BufReader};
    for args in [
        &["dispatch", "gen-rules", "--workers", "4", "--key-rules", "512"][..],
        &["hw", "show", "qingniao-u250"],
        &["hw", "profiles"],
        &["dispatch", "check", &example("kv.toml")],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        // The pipe is closed here, as `head -1` closes it.
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{args:?}: {stderr}");
    }
}

/// One bad item, one error naming it; zero or absurd counts refused; no build-script noise.
#[test]
fn errors_name_the_one_bad_item() {
    let dir = std::env::temp_dir().join(format!("tern-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A profile path that does not exist is a missing file, not an unknown name.
    let (ok, _, err) = tern(&["hw", "show", "/nonexistent/my-profile.toml"]);
    assert!(!ok && err.contains("/nonexistent/my-profile.toml") && err.contains("No such file"), "{err}");
    // Zero or absurd counts.
    for args in [
        &["dispatch", "pingpong", "--requests", "0"][..],
        &["bench", "qnp", "--rounds", "0"],
        &["bench", "dispatch", "--quick", "--rounds", "0"],
        &["bench", "dispatch", "--quick", "--default-rounds", "100000"],
        &["bench", "flow", "--quick", "--rounds", "0"],
        &["bench", "flow", "--quick", "--routes", "18446744073709551615"],
        &["dispatch", "load", "127.0.0.1:9", "--concurrency", "0"],
    ] {
        let (ok, _, err) = tern(args);
        let flag = args.iter().find(|a| a.starts_with("--") && *a != &"--quick").unwrap();
        assert!(!ok && err.contains(&format!("{flag} ")) && err.contains("must be in 1..="), "{args:?}: {err}");
    }
    // Counts that may be 0, past their bound (u64::MAX once ran `bench flow` forever and
    // `bench switch` past any phase).
    for (args, want) in [
        (
            &["bench", "flow", "--quick", "--acl", "18446744073709551615"][..],
            "--acl 18446744073709551615: must be in 0..=100000",
        ),
        (
            &["bench", "switch", "--quick", "--server-ns", "18446744073709551615"],
            "--server-ns 18446744073709551615: must be in 0..=1000000",
        ),
    ] {
        let (ok, _, err) = tern(args);
        assert!(!ok && err.contains(want), "{args:?}: {err}");
    }
    // `bench switch`'s options of the SNAT run are refused without --snat (they were ignored).
    for opt in [
        &["--sizes", "64"][..],
        &["--snat-flows", "8"],
        &["--servers", "2"],
        &["--latency-rate", "1000"],
        &["--latency-packets", "10"],
        &["--afpacket"],
        &["--sleep"],
    ] {
        let args: Vec<&str> = ["bench", "switch", "--quick"].iter().chain(opt).copied().collect();
        let (ok, _, err) = tern(&args);
        assert!(!ok && err.contains("--snat") && err.contains(opt[0]), "{args:?}: {err}");
    }
    // A bad next hop is one error that counts the routes using it; a missing capture is named.
    let flow = std::fs::read_to_string(flow_example("replay.toml")).unwrap();
    let base = std::path::Path::new(&flow_example("replay.toml")).parent().unwrap().to_path_buf();
    let bad = flow
        .replace("eth_dst = \"02:00:00:00:00:02\"", "eth_dst = \"02:00:00:00:00:zz\"")
        .replace("pcap_in = \"traffic.pcap\"", "pcap_in = \"missing.pcap\"")
        .replace("\nfile = \"", &format!("\nfile = \"{}/", base.display()));
    let file = dir.join("bad-flow.toml");
    std::fs::write(&file, bad).unwrap();
    let (ok, _, err) = tern(&["flow", "check", file.to_str().unwrap()]);
    assert!(!ok, "{err}");
    assert!(err.contains("pcap_in") && err.contains("missing.pcap: no such file"), "{err}");
    assert!(err.contains("next_hop \"right\": eth_dst") && err.contains("routes use it"), "{err}");
    assert!(err.contains("2 error(s)"), "{err}");
    // A rule set the Matcher cannot hold is not projected.
    let kv = std::fs::read_to_string(example("kv.toml")).unwrap();
    let suffix = kv.replacen("match = { key = \"user.0\" }", "match = { key = { suffix = \"x\" } }", 1);
    std::fs::copy(example("kv.proto"), dir.join("kv.proto")).unwrap();
    let file = dir.join("suffix.toml");
    std::fs::write(&file, suffix).unwrap();
    let (ok, out, _) = tern(&["hw", "report", file.to_str().unwrap(), "--profile", "qingniao-u250"]);
    assert!(!ok && out.contains("no projection") && !out.contains("Mrequests/s"), "{out}");
    // `tern idl compile` prints what it wrote and nothing meant for cargo.
    let (ok, out, err) = tern(&["idl", "compile", &example("kv.proto"), "--out", dir.join("gen").to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(!out.contains("cargo:") && out.contains("wrote"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rpc_check_lists_the_table_and_what_does_not_fit() {
    let shared = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared");
    // The paper's workload fits the U280's table: exit 0, every class listed.
    let (ok, out, err) = tern(&["rpc", "check", &format!("{shared}/hyperprotobench/bench0/benchmark.proto")]);
    assert!(ok, "{err}");
    assert!(
        out.contains("class 0 hyperprotobench.M1 (proto2") && out.contains("fits rpcnic-u280's schema table"),
        "{out}"
    );
    // bench2 nests deeper than the deserializer's 8-entry stack: exit 1, naming the classes.
    let bench2 = format!("{shared}/hyperprotobench/bench2/benchmark.proto");
    let (ok, out, _) = tern(&["rpc", "check", &bench2]);
    assert!(!ok);
    assert!(out.contains("does not fit: class hyperprotobench.M281.M292.M293.M295.M297: nested 10 deep"), "{out}");
    // The cpu profile bounds nothing; --json has the table.
    let (ok, out, err) = tern(&["rpc", "check", &bench2, "--profile", "cpu", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["class_count"].as_u64(), v["fits"].as_bool()), (Some(310), Some(true)));
    json_is_as_documented(&v, "rpc", "| check key | holds | what |", &[]);
    // docs/rpc.md's table of the JSON, on a file with what only some fields have: a oneof, a
    // default, a group, a map, a recursive class, a field in device memory.
    let dir = std::env::temp_dir().join(format!("tern-rpc-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let odd = dir.join("odd.proto");
    std::fs::write(
        &odd,
        "syntax = \"proto2\";\nimport \"tern/rpcnic.proto\";\nmessage Node {\n  optional int32 size = 1 [default = 7];\n  \
         oneof pick { string name = 2; uint64 id = 3; }\n  optional group G = 4 { optional bytes blob = 5 [(tern.acc) = true]; }\n  \
         map<string, Node> children = 6;\n}\n",
    )
    .unwrap();
    let (ok, out, err) = tern(&["rpc", "check", odd.to_str().unwrap(), "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    json_is_as_documented(&v, "rpc", "| check key | holds | what |", &[]);
    let fields = &v["classes"][0]["fields"];
    assert_eq!((fields[0]["default"].as_str(), fields[1]["oneof"].as_str()), (Some("7"), Some("pick")), "{v}");
    assert_eq!(fields[3]["type"].as_str(), Some("group Node.G"), "{v}");
    assert!(v["classes"][0]["depth"].is_null() && v["warnings"].as_array().is_some_and(|w| !w.is_empty()), "{v}");
    // An Acc label on an int32 is one error naming file, message and field.
    let bad = dir.join("u.proto");
    std::fs::write(
        &bad,
        "syntax = \"proto3\";\nimport \"tern/rpcnic.proto\";\nmessage User { int32 age = 3 [(tern.acc) = true]; }\n",
    )
    .unwrap();
    let (ok, _, err) = tern(&["rpc", "check", bad.to_str().unwrap()]);
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "error: u.proto: message User: field age: (tern.acc) applies to string, bytes, repeated and message fields, not to a singular int32"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rpc_decode_and_encode_round_trip_and_name_bad_input() {
    use std::io::Write as _;
    use std::process::Stdio;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/hyperprotobench/bench1");
    let proto = format!("{dir}/benchmark.proto");
    let bin = format!("{dir}/M13.bin");
    let (ok, json, err) = tern(&["rpc", "decode", "--proto", &proto, "--message", "M13", &bin]);
    assert!(ok, "{err}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["rpc", "encode", "--proto", &proto, "--message", "hyperprotobench.M13"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(json.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout == std::fs::read(&bin).unwrap(), "JSON decoded from M13 encodes back to its bytes");
    // Bad input: the error names the path and offset; an unknown message names itself.
    let bad = std::env::temp_dir().join(format!("tern-rpc-bad-{}.bin", std::process::id()));
    std::fs::write(&bad, [0x0a, 0x05, 0x01]).unwrap();
    let (ok, _, err) = tern(&["rpc", "decode", "--proto", &proto, "--message", "M13", bad.to_str().unwrap()]);
    std::fs::remove_file(&bad).unwrap();
    assert!(!ok);
    assert!(err.contains("M13") && err.contains("at byte 1"), "{err}");
    let (ok, _, err) = tern(&["rpc", "decode", "--proto", &proto, "--message", "Nope", &bin]);
    assert!(!ok && err.contains("no message `Nope`"), "{err}");
}

#[test]
fn bench_rpc_json_has_the_promised_keys() {
    let out_dir = std::env::temp_dir().join(format!("tern-bench-rpc-{}", std::process::id()));
    let (ok, out, err) =
        tern(&["bench", "rpc", "--rounds", "1", "--phase-ms", "2", "--json", "--out", out_dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    json_is_as_documented(
        &v,
        "rpc",
        "| bench key | holds | what |",
        &["workloads[].decode_copy_over_cpp_arena", "workloads[].encode_over_cpp"],
    );
    for key in
        ["decode_copy_over_prost", "encode_over_prost", "decode_over_prost_reflect", "preser_host_over_cpu_encode"]
    {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {}", v[key]);
    }
    // Every implementation copies with glibc's vector loop (the benchmark runs itself again
    // with the rep movsb threshold raised).
    if cfg!(all(target_os = "linux", target_arch = "x86_64", target_env = "gnu")) {
        let t = v["config"]["glibc_tunables"].as_str().unwrap_or_default();
        assert!(t.contains("x86_rep_movsb_threshold"), "{}", v["config"]);
    }
    let ws = v["workloads"].as_array().unwrap();
    assert_eq!(ws.len(), 7);
    for w in ws {
        assert!(w["host_writes_one_shot"].as_u64().unwrap() <= w["host_writes_field_by_field"].as_u64().unwrap());
        assert!(w["decode_copy_over_prost"]["median"].as_f64().unwrap() > 0.0);
        assert!(w["decode_field_by_field_over_one_shot"]["median"].as_f64().unwrap() > 0.0);
        assert!(w["memcpy_floor_over_decode_copy"]["median"].as_f64().unwrap() > 0.0);
        let per = w["host_writes_one_shot"].as_f64().unwrap() / w["messages"].as_f64().unwrap();
        assert_eq!(w["host_writes_per_message_one_shot"].as_f64(), Some(per));
    }
    assert!(out_dir.join("rpc.json").exists() && out_dir.join("rpc.png").exists() && out_dir.join("rpc.svg").exists());
    std::fs::remove_dir_all(&out_dir).unwrap();
    let (ok, _, err) = tern(&["bench", "rpc", "--rounds", "0"]);
    assert!(!ok && err.contains("--rounds"), "{err}");
}

/// `tern rpc conformance` speaks the conformance runner's protocol: length-prefixed requests on
/// stdin, length-prefixed responses on stdout. The failure-set request gets an empty set; a
/// binary case its payload re-encoded by Tern (here Python protobuf's canonical bytes); a bad
/// payload a parse error; JSON output and undeclared types are skipped.
#[test]
fn rpc_conformance_answers_the_runners_protocol() {
    use std::io::{Read as _, Write as _};
    use std::process::Stdio;
    let interop = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tern-rpc/tests/interop");
    let request = |payload: Option<&[u8]>, format: u8, ty: &str| {
        let mut r = Vec::new();
        if let Some(p) = payload {
            r.push(0x0a);
            tern_rpc::wire::put_varint(&mut r, p.len() as u64);
            r.extend_from_slice(p);
        }
        r.extend_from_slice(&[0x18, format, 0x22, ty.len() as u8]);
        r.extend_from_slice(ty.as_bytes());
        r
    };
    let input = std::fs::read(interop.join("all3_full.input.bin")).unwrap();
    let canonical = std::fs::read(interop.join("all3_full.bin")).unwrap();
    let requests = [
        request(None, 1, "conformance.FailureSet"),
        request(Some(&input), 1, "interop.All3"),
        request(Some(&[0x08]), 1, "interop.All3"),
        request(Some(&input), 2, "interop.All3"),
        request(Some(&input), 1, "interop.Nope"),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["rpc", "conformance", "--proto"])
        .arg(interop.join("all3.proto"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut stdin = child.stdin.take().unwrap();
        for r in &requests {
            stdin.write_all(&(r.len() as u32).to_le_bytes()).unwrap();
            stdin.write_all(r).unwrap();
        }
    }
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    assert!(child.wait().unwrap().success());
    let mut responses = Vec::new();
    let mut at = 0;
    while at < out.len() {
        let len = u32::from_le_bytes(out[at..at + 4].try_into().unwrap()) as usize;
        responses.push(out[at + 4..at + 4 + len].to_vec());
        at += 4 + len;
    }
    assert_eq!(responses.len(), requests.len());
    assert_eq!(responses[0], [0x1a, 0x00], "an empty failure set as protobuf_payload");
    let mut want = vec![0x1a];
    tern_rpc::wire::put_varint(&mut want, canonical.len() as u64);
    want.extend_from_slice(&canonical);
    assert_eq!(responses[1], want, "the payload re-encoded: Python protobuf's canonical bytes");
    assert_eq!(responses[2][0], 0x0a, "parse_error");
    assert!(String::from_utf8_lossy(&responses[2]).contains("All3"), "the error names the message");
    assert_eq!(responses[3][0], 0x2a, "skipped: JSON output");
    assert_eq!(responses[4][0], 0x2a, "skipped: an undeclared type");
}

/// `tern hw report` of an RPC service config: what fits the U280 and each sample message's
/// projection; a config asking for more lanes than the card has does not fit (exit 1).
#[test]
fn hw_report_projects_an_rpc_service() {
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/rpc/image.toml");
    let (ok, out, err) = tern(&["hw", "report", cfg]);
    assert!(ok, "{err}");
    assert!(out.contains("compute units: 4 of 4") && out.contains("deserialize:") && out.contains("fits."), "{out}");
    let (ok, out, err) = tern(&["hw", "report", cfg, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["fits"].as_bool(), v["profile"].as_str()), (Some(true), Some("rpcnic-u280")));
    let m = v["messages"].as_array().unwrap();
    assert_eq!(m.len(), 2);
    for x in m {
        assert!(x["deserialize_one_shot"]["ns"].as_f64().unwrap() > 0.0, "{x}");
        assert!(x["serialize"]["ns"].as_f64().unwrap() > 0.0, "{x}");
    }
    // Eight lanes on a four-lane card: the problem is named, exit 1.
    let dir = std::env::temp_dir().join(format!("tern-hw-rpc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let proto = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/rpc/image.proto");
    std::fs::copy(proto, dir.join("image.proto")).unwrap();
    let text = std::fs::read_to_string(cfg).unwrap().replace("lanes = 4", "lanes = 8");
    std::fs::write(dir.join("wide.toml"), text).unwrap();
    let (ok, out, _) = tern(&["hw", "report", dir.join("wide.toml").to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("deserializer lanes: 8 asked, 4 available"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern rpc serve` answers `tern rpc load`'s calls, refuses a body that does not decode
/// (naming the field and byte offset) and a method it does not have, counts each by status,
/// and stops on SIGTERM with a summary, exit 0; a held address is an error naming it.
#[test]
fn rpc_serve_answers_load_and_bad_calls_and_stops_on_a_signal() {
    use std::time::Duration;
    use tern_endpoint::{Header, RpcClient, Status};
    use tern_io::udp::{UdpConfig, UdpPort};
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/rpc/image.toml");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    drop(socket);
    let a = addr.to_string();
    let metrics = free_tcp();
    let server =
        spawn_tern(&["rpc", "serve", cfg, "--listen", &a, "--json", "--stats-interval", "0.5", "--metrics", &metrics]);
    std::thread::sleep(Duration::from_millis(1500));
    let (ok, _, err) = tern(&["rpc", "serve", cfg, "--listen", &a, "--duration", "1"]);
    assert!(!ok && err.contains(&format!("cannot listen on {a}")), "{err}");
    let (ok, out, err) = tern(&["rpc", "load", cfg, "--server", &a, "--requests", "200", "--json"]);
    assert!(ok, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((v["answered"].as_u64(), v["statuses"]["ok"].as_u64()), (Some(200), Some(200)), "{v}");
    assert_eq!(v["statuses"]["unknown_method"].as_u64(), Some(0), "every status, from the start: {v}");
    json_is_as_documented(&v, "rpc", "| load key | holds | what |", &[]);
    // A body that is not a User, and a method the service does not have.
    let pool = tern_io::Pool::new(256, 2048);
    let port = UdpPort::bind("127.0.0.1:0".parse().unwrap(), &pool, &UdpConfig::default()).unwrap();
    let mut client = RpcClient::new(port, &pool, tern_qnp::QnpConfig::default(), addr);
    client.call(Header { method: 1, class_id: 0, request_id: 1, flags: 0 }, &[0x0a, 0x05, b'x']).unwrap();
    client.call(Header { method: 9, class_id: 0, request_id: 2, flags: 0 }, &[]).unwrap();
    client.flush().unwrap();
    let mut answers = Vec::new();
    let t0 = std::time::Instant::now();
    while answers.len() < 2 && t0.elapsed() < Duration::from_secs(10) {
        client.recv(&mut answers, Duration::from_millis(50)).unwrap();
    }
    let mut answers: Vec<_> = answers.into_iter().map(Result::unwrap).collect();
    answers.sort_by_key(|x| x.request_id);
    assert_eq!(answers[0].status, Status::BadRequest);
    assert!(answers[0].error.contains("User") && answers[0].error.contains("at byte 1"), "{}", answers[0].error);
    assert_eq!(answers[1].status, Status::UnknownMethod);
    // Its metrics while it runs: docs/rpc.md is the contract, naming every family served (a
    // counter by its sample's `_total` name) and each label value (the statuses, the parts'
    // counts; QNP's reasons in docs/qnp.md §8), and each family it names is served.
    let get = |path: &str| http_text(&metrics, path);
    let body = get("/metrics");
    assert!(body.contains("tern_rpc_calls_total{status=\"ok\"} 200"), "{body}");
    assert!(body.contains("tern_rpc_calls_total{status=\"bad_request\"} 1"), "{body}");
    assert!(body.contains("tern_rpc_images_on_unit_total 200"), "{body}");
    assert!(body.contains("tern_rpc_parts_total{what=\"stray_next\"} 0"), "{body}");
    let docs = docs_and_readme();
    let doc = |name: &str| &docs.iter().find(|(f, _)| f.ends_with(name)).unwrap_or_else(|| panic!("{name}")).1;
    let (rpc, qnp) = (doc("docs/rpc.md"), doc("docs/qnp.md"));
    let named = doc_table_column("rpc", "| family | labels | counts |");
    assert_eq!(families_served(&body), named, "the metrics served, and docs/rpc.md's table");
    assert_eq!(doc_words("rpc", "tern_rpc_"), named, "docs/rpc.md names only the families of its table");
    let mut labels = 0;
    for l in body.lines().filter(|l| l.starts_with("tern_rpc_")) {
        if let Some((value, _)) = l.split_once("=\"").and_then(|(_, v)| v.split_once('"')) {
            // docs/qnp.md names an endpoint's reasons as the dispatcher's workers count them.
            let named = if l.starts_with("tern_rpc_qnp_drops") {
                qnp.contains(&format!("`qnp_{value}`"))
            } else {
                rpc.contains(&format!("`{value}`"))
            };
            assert!(named, "{l}: the label's value is not named in the docs");
            labels += 1;
        }
    }
    assert_eq!(labels, Status::ALL.len() + tern_qnp::DropReason::ALL.len() + tern_endpoint::PartStats::NAMES.len());
    assert_eq!(get("/ready"), "ready\n");
    assert_eq!(get("/config"), std::fs::read_to_string(cfg).unwrap());
    // A progress report after the last call (--stats-interval 0.5).
    std::thread::sleep(Duration::from_millis(800));
    let pid = server.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let out = server.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["calls"]["ok"].as_u64(), Some(200), "{v}");
    assert_eq!((v["calls"]["bad_request"].as_u64(), v["calls"]["unknown_method"].as_u64()), (Some(1), Some(1)));
    assert_eq!(v["on_unit"].as_u64(), Some(200));
    json_is_as_documented(&v, "rpc", "| serve key | holds | what |", &[]);
    let mut reasons: Vec<&str> = v["qnp_drops"].as_object().unwrap().keys().map(String::as_str).collect();
    reasons.sort_unstable();
    let mut all: Vec<&str> = tern_qnp::DropReason::ALL.iter().map(|r| r.as_str()).collect();
    all.sort_unstable();
    assert_eq!(reasons, all, "qnp_drops: every QNP drop reason a key");
    let progress: Vec<&str> = stderr.lines().filter(|l| l.starts_with('[') && l.contains(" calls answered ")).collect();
    assert!(progress.last().is_some_and(|l| l.contains("] 202 calls answered (200 ok), ")), "{stderr}");
}

/// A server whose thread dies stops with exit 1, naming it, rather than serve on without it
/// (docs/clip.md, docs/rpc.md, docs/dispatch.md, docs/chain.md): `tern switch serve` when its
/// file watcher panics, `tern switch server` when its thread asking the buddy for the hand-back
/// does, `tern rpc serve` when a handler panics on a call it was handed (every
/// lane leaves; no hang at the stop), `tern dispatch serve` when a worker panics on a request,
/// `tern chain serve` when its watcher of signals and tenant files panics, and `tern flow
/// serve` when its data path does. A debug build's
/// failpoint (`TERN_FAILPOINT`) makes the thread panic; each server would otherwise run for a
/// minute.
#[test]
fn every_server_stops_when_a_thread_dies() {
    use std::time::Duration;
    // Each server runs with the failpoint `point` set; its exit code and stderr once it stops,
    // within 30 s of its minute.
    let tern_failing = |point: &str, args: &[&str]| spawn_tern_env(args, &[(tern_io::FAILPOINT_VAR, point)]);
    let stopped = |child: std::process::Child, args: &[&str]| {
        let (status, _, err) = wait_bounded(child, args);
        (status.code(), err)
    };
    let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
    let dir = std::env::temp_dir().join(format!("tern-thread-dies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("serve.toml");
    std::fs::write(&config, format!("program = \"{snat}\"\nports = [\"udp:127.0.0.1:0=127.0.0.1:9\"]\nservers = []\n"))
        .unwrap();
    let args = ["switch", "serve", config.to_str().unwrap(), "--duration", "60"];
    let (code, err) = stopped(tern_failing("switch-watch", &args), &args);
    assert_eq!(code, Some(1), "{err}");
    let want = "tern-switch-watch ended early (it panicked: failpoint switch-watch); the switch stopped";
    assert!(err.contains(want), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    // A switch server's thread that asks its buddy for the hand-back (it panics at the first
    // ask, before it reaches the buddy).
    let args = ["switch", "server", snat, "--port", "udp:127.0.0.1:0=127.0.0.1:9", "--buddy", "127.0.0.1:9"];
    let args = [&args[..], &["--duration", "60"]].concat();
    let (code, err) = stopped(tern_failing("switch-handback", &args), &args);
    assert_eq!(code, Some(1), "{err}");
    let want = "tern-switch-handback ended early (it panicked: failpoint switch-handback); the server stopped";
    assert!(err.contains(want), "{err}");

    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/rpc/image.toml");
    let addr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let a = addr.to_string();
    let args = ["rpc", "serve", cfg, "--listen", &a, "--duration", "60"];
    let rpc = tern_failing("rpc-handler", &args);
    std::thread::sleep(Duration::from_millis(1500));
    // Calls that reach a handler (`tern rpc load`'s are good ones); none is answered.
    let (ok, out, _) = tern(&["rpc", "load", cfg, "--server", &a, "--requests", "5", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!ok || v["answered"].as_u64() == Some(0), "{out}");
    let (code, err) = stopped(rpc, &args);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("a handler panicked: failpoint rpc-handler"), "{err}");

    let (ok, rules, err) = tern(&["dispatch", "gen-rules", "--workers", "2", "--keys", "480"]);
    assert!(ok, "{err}");
    let dir = std::env::temp_dir().join(format!("tern-thread-dies-dispatch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(example("kv.proto"), dir.join("kv.proto")).unwrap();
    let file = dir.join("rules.toml");
    std::fs::write(&file, &rules).unwrap();
    let addr = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let args = ["dispatch", "serve", file.to_str().unwrap(), "--listen", &addr, "--duration", "60"];
    let dispatch = tern_failing("dispatch-worker", &args);
    std::thread::sleep(Duration::from_millis(1500));
    let _ = tern(&["dispatch", "load", &addr, "--workers", "2", "--keys", "480", "--duration", "0.5"]);
    let (code, err) = stopped(dispatch, &args);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("ended early (it panicked: failpoint dispatch-worker); the server stopped"), "{err}");
    assert!(err.contains("tern-worker-"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = std::env::temp_dir().join(format!("tern-thread-dies-chain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tenant = dir.join("t.toml");
    std::fs::write(&tenant, "tenant = \"t\"\ndag = \"d\"\n[ingress]\nproto = \"udp\"\n[nt.d]\nkind = \"dummy\"\n")
        .unwrap();
    let port =
        || format!("udp:{}=127.0.0.1:9", std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap());
    let (p1, p2) = (port(), port());
    let args = ["chain", "serve", tenant.to_str().unwrap(), "--port", &p1, "--port", &p2, "--duration", "60"];
    let (code, err) = stopped(tern_failing("chain-watch", &args), &args);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("the watcher of signals and tenant files panicked; the server stopped"), "{err}");

    let file = flow_replay_in(&dir);
    let args = ["flow", "serve", file.to_str().unwrap(), "--duration", "60"];
    let (code, err) = stopped(tern_failing("flow-data-path", &args), &args);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("the data-path thread panicked (failpoint flow-data-path); the server stopped"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern rpc serve` runs the social network services in each mode and `tern rpc load` calls
/// every one of them (the configuration's samples, one per method); `--mtu` out of range is an
/// error naming it.
#[test]
fn rpc_serve_runs_the_social_services_in_every_mode() {
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/rpc/social.toml");
    std::thread::scope(|s| {
        for mode in ["cpu-only", "protoacc-pcie", "rpcnic"] {
            s.spawn(move || {
                let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                let a = socket.local_addr().unwrap().to_string();
                drop(socket);
                let server = Command::new(env!("CARGO_BIN_EXE_tern"))
                    .args(["rpc", "serve", cfg, "--listen", &a, "--mode", mode, "--duration", "4", "--json"])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                std::thread::sleep(std::time::Duration::from_millis(1000));
                let (ok, out, err) = tern(&["rpc", "load", cfg, "--server", &a, "--requests", "250", "--json"]);
                assert!(ok, "{mode}: {out}{err}");
                let v: serde_json::Value = serde_json::from_str(&out).unwrap();
                assert_eq!(v["statuses"]["ok"].as_u64(), Some(250), "{mode}: {v}");
                let out = server.wait_with_output().unwrap();
                assert!(out.status.success(), "{mode}: {}", String::from_utf8_lossy(&out.stderr));
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!((v["mode"].as_str(), v["calls"]["ok"].as_u64()), (Some(mode), Some(250)), "{v}");
                assert!(v["host_cpu_us_per_call"].as_f64().unwrap() > 0.0, "{v}");
                assert_eq!(v["device_cpu_us_per_call"].as_f64().unwrap() > 0.0, mode != "cpu-only", "{v}");
            });
        }
    });
    let (ok, _, err) = tern(&["rpc", "serve", cfg, "--listen", "127.0.0.1:0", "--mtu", "100", "--duration", "1"]);
    assert!(!ok && err.contains("--mtu 100: must be 576 to 65535"), "{err}");
}

/// `tern bench rpc --apps --json`: every service in every mode, measured and projected, and
/// `cpu_only_over_rpcnic_host_cpu` at top level; the JSON and plots written.
#[test]
fn bench_rpc_apps_measures_every_service_in_every_mode() {
    let out_dir = std::env::temp_dir().join(format!("tern-apps-{}", std::process::id()));
    let (ok, out, err) = tern(&[
        "bench",
        "rpc",
        "--apps",
        "--rounds",
        "1",
        "--phase-ms",
        "60",
        "--json",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    json_is_as_documented(&v, "rpc", "| apps key | holds | what |", &[]);
    assert!(v["cpu_only_over_rpcnic_host_cpu"].as_f64().unwrap() > 0.0, "{v}");
    let services: Vec<&str> =
        v["services"].as_array().unwrap().iter().map(|s| s["service"].as_str().unwrap()).collect();
    assert_eq!(
        services,
        [
            "image",
            "UniqueId.ComposeUniqueId",
            "User.Login",
            "UrlShorten.ComposeUrls",
            "SocialGraph.GetFollowers",
            "ComposePost.ComposePost"
        ]
    );
    for s in v["services"].as_array().unwrap() {
        for mode in ["cpu-only", "protoacc-pcie", "rpcnic"] {
            let m = &s["modes"][mode];
            assert!(m["calls_per_s"]["median"].as_f64().unwrap() > 0.0, "{mode}: {m}");
            assert!(m["u280_projected"]["per_host_core_calls_per_s"].as_f64().unwrap() > 0.0, "{mode}: {m}");
        }
    }
    for f in ["rpc-apps.json", "rpc-apps.png", "rpc-apps.svg"] {
        assert!(out_dir.join(f).exists(), "{f}");
    }
    std::fs::remove_dir_all(&out_dir).unwrap();
}

/// `tern hw report --json` on each engine's example is as its doc's `| report key |` table gives
/// it (QingNiao's in docs/rules.md), every key of every entry.
#[test]
fn hw_report_json_is_as_each_doc_gives_it() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let cases: [(&str, &[&str]); 6] = [
        ("rules", &["dispatch/kv.toml", "--profile", "qingniao-u250"]),
        ("flow", &["flow/replay.toml"]),
        ("rpc", &["rpc/image.toml"]),
        ("rpc", &["rpc/social.toml"]),
        ("chain", &["chain/figure10-a.toml", "--with", "chain/figure10-d.toml"]),
        ("clip", &["switch/serve.toml"]),
    ];
    for (doc, args) in cases {
        let args: Vec<String> =
            args.iter().map(|a| if a.ends_with(".toml") { format!("{root}/{a}") } else { a.to_string() }).collect();
        let mut cmd = vec!["hw", "report", "--json"];
        cmd.extend(args.iter().map(String::as_str));
        let (ok, out, err) = tern(&cmd);
        assert!(ok, "{cmd:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{cmd:?}: {e}: {out}"));
        json_is_as_documented(&v, doc, "| report key | holds | what |", &[]);
    }
    // A tenant asking more than the board's line: said, in the JSON too, and exit 1.
    let dir = std::env::temp_dir().join(format!("tern-hw-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let web = std::fs::read_to_string(format!("{root}/chain/web.toml")).unwrap();
    let greedy = dir.join("greedy.toml");
    let asks = web.lines().map(|l| if l.starts_with("bandwidth_gbps") { "bandwidth_gbps = 500.0" } else { l });
    std::fs::write(&greedy, asks.collect::<Vec<_>>().join("\n")).unwrap();
    let (ok, out, _) = tern(&["hw", "report", greedy.to_str().unwrap()]);
    assert!(!ok && out.contains("does not fit: line rate (Gbit/s) 500 asked, 100 available"), "{out}");
    let (ok, out, _) = tern(&["hw", "report", greedy.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!ok && v["fits"] == false && v["tenants"][0]["uses"][0]["fits"] == false, "{v}");
    json_is_as_documented(&v, "chain", "| report key | holds | what |", &[]);
    // A rule set the Matcher cannot hold (a check of 12 bytes; the U250 checks 8): its problems,
    // and exit 1.
    std::fs::copy(format!("{root}/dispatch/kv.proto"), dir.join("kv.proto")).unwrap();
    let rules = std::fs::read_to_string(format!("{root}/dispatch/kv.toml")).unwrap();
    let bad = dir.join("wide.toml");
    let wide = rules.replacen("\"user.0\"", "\"user.0123456789ab\"", 1);
    assert_ne!(wide, rules, "the example's rule users-0");
    std::fs::write(&bad, wide).unwrap();
    let (ok, out, _) = tern(&["hw", "report", "--json", bad.to_str().unwrap(), "--profile", "qingniao-u250"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!ok && v["offloadable"] == false && v["problems"].as_array().is_some_and(|p| !p.is_empty()), "{v}");
    json_is_as_documented(&v, "rules", "| report key | holds | what |", &[]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern chain check`: the example tenant fits; a tenant with a cycle is refused naming the
/// file and printing the cycle; one asking more than the line does not fit; exit 1 for both.
#[test]
fn chain_check_reads_tenants_and_names_what_is_wrong() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/chain/web.toml");
    let (ok, out, err) = tern(&["chain", "check", example, "--json"]);
    assert!(ok, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tenants"][0]["dag"]["order"], serde_json::json!(["fw", "nat", "aes", "lb"]));
    assert_eq!(v["tenants"][0]["uses"][1]["asked"].as_f64(), Some(6400.0));
    // docs/chain.md's table of the JSON; a parallel tenant's fork (null above).
    json_is_as_documented(&v, "chain", "| check key | holds | what |", &["plan.plan.tenants[].fork"]);
    let parallel = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/chain/figure4-a-parallel.toml");
    let (ok, out, err) = tern(&["chain", "check", parallel, "--json"]);
    assert!(ok, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    json_is_as_documented(&v, "chain", "| check key | holds | what |", &[]);
    let dir = std::env::temp_dir().join(format!("tern-chain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(example).unwrap();
    let cyclic = dir.join("cyclic.toml");
    std::fs::write(&cyclic, text.replace("dag = \"fw -> nat -> {aes, lb}\"", "dag = \"fw -> nat -> {aes, lb} -> fw\""))
        .unwrap();
    let greedy = dir.join("greedy.toml");
    std::fs::write(&greedy, text.replace("bandwidth_gbps = 10.0", "bandwidth_gbps = 400.0")).unwrap();
    // As documented: a file that cannot be used has only `file`, `ok` and `error`; a plan that
    // does not fit, `ok` and `error`.
    let (ok, out, _) = tern(&["chain", "check", cyclic.to_str().unwrap(), "--json"]);
    assert!(!ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let keys = |o: &serde_json::Value| o.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&v["tenants"][0]), ["error", "file", "ok"], "{v}");
    // Nine tenants, each a task as large as most of a region, none shared: 8 regions hold 8.
    let crowd: Vec<String> = (0..9)
        .map(|i| {
            let f = dir.join(format!("big{i}.toml"));
            let t = format!(
                "tenant = \"big{i}\"\ndag = \"big{i}\"\n[ingress]\ndst = \"10.{i}.0.0/16\"\n[nt.big{i}]\nkind = \"dummy\"\nluts = 90000\n"
            );
            std::fs::write(&f, t).unwrap();
            f.to_str().unwrap().to_string()
        })
        .collect();
    let mut args = vec!["chain", "check", "--json"];
    args.extend(crowd.iter().map(String::as_str));
    let (ok, out, _) = tern(&args);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!ok && v["plan"]["ok"] == false, "{v}");
    assert_eq!(keys(&v["plan"]), ["error", "ok"], "{v}");
    let (ok, out, _) = tern(&["chain", "check", cyclic.to_str().unwrap(), greedy.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("cyclic.toml: dag: a cycle: fw -> nat -> aes -> fw"), "{out}");
    assert!(out.contains("line rate (Gbit/s): 400 asked, 100 available: does not fit"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern chain sim` simulates Figure 15 with the autoscaler (labelled a simulation, one launch,
/// 3x carried from 50 ms) and Figures 16–17 with the allocator (sNIC's aggregate above DRF's
/// and Static's while user 1 offers less than its share; equal dominant shares after its
/// rise), its JSON and plots written.
#[test]
fn chain_sim_figures_15_to_17() {
    let out_dir = std::env::temp_dir().join(format!("tern-chain-sim-{}", std::process::id()));
    let (ok, out, err) = tern(&["chain", "sim", "--json", "--out", out_dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(err.contains("SIMULATION (not a measurement) of SuperNIC's Figure 15"), "{err}");
    assert!(err.contains("SIMULATION (not a measurement) of SuperNIC's Figures 16-17"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    json_is_as_documented(&v, "chain", "| sim key | holds | what |", &[]);
    let f15 = &v["figure_15"];
    assert_eq!(f15["simulation"], true);
    assert_eq!(f15["launches"], 1);
    assert_eq!(f15["full_at_ms"], 50.0);
    let f16 = &v["figures_16_17"];
    assert_eq!(f16["simulation"], true);
    let agg = |scheme: &str, phase: usize| f16["schemes"][scheme][phase]["aggregate_gbps"].as_f64().unwrap();
    assert!(agg("snic", 0) > agg("drf", 0) && agg("drf", 0) > agg("static", 0), "{f16}");
    assert!(f16["schemes"]["snic"][1]["jain"].as_f64().unwrap() > 0.999, "{f16}");
    for f in ["chain-sim-fig15.json", "chain-sim-fig15.png", "chain-sim-fig16-17.json", "chain-sim-fig16-17.svg"] {
        assert!(out_dir.join(f).exists(), "{f}");
    }
    // One figure: its report alone.
    let (ok, out, err) = tern(&["chain", "sim", "--figure", "15", "--json", "--out", out_dir.to_str().unwrap()]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["figure"], 15);
    for bad in [["--instance-gbps", "0"], ["--task-gbps", "NaN"]] {
        let (ok, _, err) = tern(&["chain", "sim", bad[0], bad[1], "--out", out_dir.to_str().unwrap()]);
        assert!(!ok && err.contains(bad[0]), "{err}");
    }
    std::fs::remove_dir_all(&out_dir).unwrap();
}

/// `tern bench chain --fairness --json` prints its three promised keys at top level and both
/// users' DRF shares (tiny phases: the report is checked, not the figures), and writes its file.
#[test]
fn bench_chain_fairness_json_has_the_promised_keys() {
    let out_dir = std::env::temp_dir().join(format!("tern-bench-chain-fair-{}", std::process::id()));
    let (ok, out, err) = tern(&[
        "bench",
        "chain",
        "--fairness",
        "--rounds",
        "1",
        "--phase-secs",
        "0.1",
        "--json",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in ["jain_index", "max_share_error", "victim_rate_kept"] {
        assert!(v[key].as_f64().is_some(), "{key}: {}", v[key]);
    }
    json_is_as_documented(&v, "chain", "| fairness key | holds | what |", &[]);
    assert_verdicts(
        &v,
        &err,
        &[
            ("jain_index", true),
            ("max_share_error", false),
            ("victim_rate_kept", true),
            ("update_lost_packets", false),
            ("update_p99_ratio", false),
        ],
    );
    assert_eq!(v["two_users"]["with"].as_array().unwrap().len(), 1);
    assert_eq!(v["two_users"]["drf_shares"].as_array().unwrap().len(), 2);
    assert!(out_dir.join("chain-fairness.json").exists());
    std::fs::remove_dir_all(&out_dir).unwrap();
}

/// Servers behave like servers: `flow serve`, `chain serve`, `switch serve` and `switch server`
/// each stop on SIGINT and on SIGTERM with their summary and exit 0 (dispatch's and rpc's have
/// tests of their own); flow serve's pcap outputs are whole records when a signal stops it.
#[test]
fn every_server_stops_cleanly_on_sigint_and_sigterm() {
    use std::time::Duration;
    let dir = std::env::temp_dir().join(format!("tern-signals-all-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let udp = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    // flow serve replaying the capture, its outputs in `dir`.
    let flow = flow_replay_in(&dir);
    let tenant = dir.join("lan.toml");
    std::fs::write(&tenant, "tenant = \"lan\"\ndag = \"nat\"\n[ingress]\nproto = \"udp\"\n[nt.nat]\nkind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20100\"\n").unwrap();
    let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
    for signal in ["-INT", "-TERM"] {
        let (a, b, c) = (udp(), udp(), udp());
        let switch_cfg = dir.join("switch.toml");
        std::fs::write(
            &switch_cfg,
            format!("program = \"{snat}\"\nports = [\"udp:{a}=127.0.0.1:9\", \"udp:{b}=127.0.0.1:9\", \"udp:{c}=127.0.0.1:9\"]\nservers = [3]\n"),
        )
        .unwrap();
        let (chain1, chain2, server) = (
            format!("udp:{}=127.0.0.1:9", udp()),
            format!("udp:{}=127.0.0.1:9", udp()),
            format!("udp:{}=127.0.0.1:9", udp()),
        );
        let runs: [(&str, Vec<&str>, &str); 4] = [
            ("flow serve", vec!["flow", "serve", flow.to_str().unwrap()], "stopped (signal) after "),
            (
                "chain serve",
                vec!["chain", "serve", tenant.to_str().unwrap(), "--port", &chain1, "--port", &chain2],
                "stopped (signal) after ",
            ),
            (
                "switch serve",
                vec!["switch", "serve", switch_cfg.to_str().unwrap()],
                "switch serve stopped (signal) after ",
            ),
            (
                "switch server",
                vec!["switch", "server", snat, "--port", &server],
                "switch server 0 stopped (signal) after ",
            ),
        ];
        let children: Vec<_> = runs.iter().map(|(_, args, _)| spawn_tern(args)).collect();
        std::thread::sleep(Duration::from_millis(1500));
        for child in &children {
            assert!(Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
        }
        for ((what, _, summary), child) in runs.iter().zip(children) {
            let out = child.wait_with_output().unwrap();
            let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{what} on SIG{signal}: {:?}\n{stdout}\n{stderr}", out.status);
            assert!(stdout.contains(summary), "{what} on SIG{signal}: no summary ({summary}):\n{stdout}\n{stderr}");
        }
        // The capture's outputs: a pcap header, then whole records (big-endian lengths).
        for port in ["left", "right"] {
            let b = std::fs::read(dir.join(format!("{port}.pcap"))).unwrap();
            let mut at = 24;
            while at + 16 <= b.len() {
                at += 16 + u32::from_be_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
            }
            assert!(
                at == b.len() && b.len() > 24,
                "{port}.pcap after SIG{signal}: {} bytes, records end at {at}",
                b.len()
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern bench chain --json` prints the six promised keys at top level (tiny phases: what is
/// checked is the report, not the figures), writes its files, and refuses zero rounds.
#[test]
fn bench_chain_json_has_the_promised_keys() {
    let out_dir = std::env::temp_dir().join(format!("tern-bench-chain-{}", std::process::id()));
    let (ok, out, err) = tern(&[
        "bench",
        "chain",
        "--rounds",
        "1",
        "--phase-secs",
        "0.02",
        "--lengths",
        "3,4",
        "--json",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in [
        "latency_reduction_vs_panic",
        "throughput_over_panic",
        "throughput_over_rtc",
        "scheduler_ns_per_packet",
        "aes_two_over_one",
        "sharing_gain_per_region",
    ] {
        assert!(v[key].as_f64().is_some(), "{key}: {}", v[key]);
    }
    assert_verdicts(
        &v,
        &err,
        &[
            ("latency_reduction_vs_panic", true),
            ("throughput_over_panic", true),
            ("throughput_over_rtc", true),
            ("scheduler_ns_per_packet", false),
            ("aes_two_over_one", true),
            ("sharing_gain_per_region", true),
        ],
    );
    assert_eq!(v["targets"]["throughput_over_rtc"], 0.75);
    assert_eq!(v["lengths"].as_array().unwrap().len(), 2);
    json_is_as_documented(&v, "chain", "| bench key | holds | what |", &[]);
    assert_eq!(v["sharing"]["a_and_c_need_no_region"], true);
    assert!(out_dir.join("chain.json").exists() && out_dir.join("chain.png").exists());
    std::fs::remove_dir_all(&out_dir).unwrap();
    assert_eq!(v["options"]["credits"], 8, "the paper's credits unless asked");
    let (ok, _, err) = tern(&["bench", "chain", "--rounds", "0"]);
    assert!(!ok && err.contains("--rounds"), "{err}");
    let (ok, _, err) = tern(&["bench", "chain", "--credits", "0"]);
    assert!(!ok && err.contains("--credits"), "{err}");
    let (ok, _, err) = tern(&["bench", "chain", "--fairness", "--credits", "16"]);
    assert!(!ok && err.contains("--credits"), "{err}");
    assert_eq!(v["options"]["queue"], 4096, "the scheduler's default queue unless asked");
    let (ok, _, err) = tern(&["bench", "chain", "--queue", "0"]);
    assert!(!ok && err.contains("--queue 0"), "{err}");
    let (ok, _, err) = tern(&["bench", "chain", "--fairness", "--queue", "512"]);
    assert!(!ok && err.contains("--queue"), "{err}");
    let port = "udp:127.0.0.1:0=127.0.0.1:9";
    let (ok, _, err) =
        tern(&["chain", "serve", "examples/chain/web.toml", "--port", port, "--port", port, "--queue", "0"]);
    assert!(!ok && err.contains("--queue 0"), "{err}");
}

/// `tern chain serve` between two UDP ports carrying frames: a frame from the inside goes
/// through the firewall and the NAT and leaves on the other port with its source translated
/// (checksums right); the answer comes back translated to the inside host; a malformed frame
/// and one no tenant takes are counted by name; a taken port is an error naming it.
#[test]
fn chain_serve_translates_between_udp_ports() {
    for mode in ["snic", "panic", "rtc"] {
        chain_serve_round_trip(mode);
    }
}

/// `tern chain serve` of one tenant, `lan` (a firewall allowing UDP, then a NAT to 192.0.2.1),
/// between two UDP ports whose far ends are `inside` and `outside`, started with `args`.
struct LanServe {
    dir: std::path::PathBuf,
    tenant: std::path::PathBuf,
    inside: std::net::UdpSocket,
    outside: std::net::UdpSocket,
    p1: std::net::SocketAddr,
    p2: std::net::SocketAddr,
    child: std::process::Child,
}

impl LanServe {
    fn start(tag: &str, args: &[&str]) -> LanServe {
        LanServe::start_with(
            tag,
            "tenant = \"lan\"\ndag = \"fw -> nat\"\n[ingress]\nproto = \"udp\"\n[nt.fw]\nkind = \"firewall\"\nrules = [{ action = \"allow\", proto = \"udp\" }]\n[nt.nat]\nkind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20100\"\n",
            args,
        )
    }

    /// As [`LanServe::start`], the tenant file `lan.toml` holding `text`.
    fn start_with(tag: &str, text: &str, args: &[&str]) -> LanServe {
        use std::net::UdpSocket;
        use std::time::Duration;
        let dir = std::env::temp_dir().join(format!("tern-chain-serve-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tenant = dir.join("lan.toml");
        std::fs::write(&tenant, text).unwrap();
        let inside = UdpSocket::bind("127.0.0.1:0").unwrap();
        let outside = UdpSocket::bind("127.0.0.1:0").unwrap();
        for s in [&inside, &outside] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let free = || UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let (p1, p2) = (free(), free());
        let port1 = format!("udp:{p1}={}", inside.local_addr().unwrap());
        let port2 = format!("udp:{p2}={}", outside.local_addr().unwrap());
        let child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["chain", "serve", tenant.to_str().unwrap(), "--port", &port1, "--port", &port2])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(700));
        LanServe { dir, tenant, inside, outside, p1, p2, child }
    }

    /// A DNS query from 10.0.0.5:4000 to 8.8.8.8:53 as a frame.
    fn query() -> Vec<u8> {
        let mut f = Vec::new();
        tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 5], [8, 8, 8, 8], 4000, 53, 64, b"query");
        f
    }

    /// Sends the query in on the inside port; the frame that leaves on the outside one.
    fn send_query(&self) -> Vec<u8> {
        self.inside.send_to(&Self::query(), self.p1).unwrap();
        let mut buf = [0u8; 2048];
        let (n, _) = self.outside.recv_from(&mut buf).expect("the translated frame leaves on the other port");
        buf[..n].to_vec()
    }
}

/// A `udp:BIND=PEER` port takes frames only from PEER: a datagram from anyone else who reaches
/// BIND is dropped (counted with the port's drops), never put through a chain; the peer's
/// frame is.
#[test]
fn chain_serve_takes_frames_only_from_a_udp_ports_peer() {
    use std::time::Duration;
    let s = LanServe::start("stranger", &["--duration", "2", "--json", "--stats-interval", "0"]);
    let stranger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    stranger.send_to(&LanServe::query(), s.p1).unwrap();
    s.outside.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let mut buf = [0u8; 2048];
    assert!(s.outside.recv_from(&mut buf).is_err(), "a stranger's frame went through");
    s.outside.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.send_query();
    let dir = s.dir.clone();
    let out = s.child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((v["ports"][0]["rx_packets"].as_u64(), v["ports"][0]["dropped"].as_u64()), (Some(2), Some(1)), "{v}");
    assert_eq!(v["tenants"][0]["packets_in"], 1, "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A server restarted with the same AES key never seals under a nonce it used before: the
/// instance numbers are reserved in the nonce ledger (docs/chain.md, "AES-GCM"). Each run's
/// sealed payload opens under the key; the second run's instance numbers follow the first's
/// block. With the ledger deleted the numbers start again, but not the nonces. A ledger path
/// holding another file is refused, naming it, the file left as it was.
#[test]
fn chain_serve_never_repeats_a_nonce_across_restarts() {
    use tern_chain::aes::{AesTask, KeySpace};
    let key = [0x5a_u8; 32];
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!(
        "tenant = \"sealed\"\ndag = \"aes\"\n[ingress]\nproto = \"udp\"\n[nt.aes]\nkind = \"aes\"\nkey = \"{hex}\"\n"
    );
    let dir = std::env::temp_dir().join(format!("tern-chain-serve-nonces-{}", std::process::id()));
    let ledger = dir.join("state/aes-nonces");
    let ledger_arg = ledger.to_str().unwrap().to_string();
    let mut nonces = Vec::new();
    for run in 0..2 {
        let s = LanServe::start_with("nonces", &text, &["--duration", "2", "--nonce-ledger", &ledger_arg]);
        let mut out = s.send_query();
        nonces.push(out[14 + 20 + 8..][..12].to_vec());
        AesTask::new(&KeySpace::new(key)).unwrap().open(&mut out).expect("the sealed payload opens under the key");
        assert_eq!(out, LanServe::query(), "run {run}");
        let out = s.child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains(&format!("reserved in the nonce ledger {ledger_arg}")), "{stdout}");
    }
    let instance = |n: &[u8]| u32::from_be_bytes(n[..4].try_into().unwrap());
    assert!(instance(&nonces[0]) < 64 && (64..128).contains(&instance(&nonces[1])), "{nonces:02x?}");
    let held = std::fs::read_to_string(&ledger).unwrap();
    assert!(held.starts_with("# tern aes-gcm nonce ledger v1\n") && held.ends_with(" 128\n"), "{held}");
    // The ledger lost: the numbers start again at 0, the nonce does not repeat (the count
    // starts at random).
    std::fs::remove_file(&ledger).unwrap();
    let s = LanServe::start_with("nonces", &text, &["--duration", "2", "--nonce-ledger", &ledger_arg]);
    let out = s.send_query();
    let again = out[14 + 20 + 8..][..12].to_vec();
    assert!(s.child.wait_with_output().unwrap().status.success());
    assert!(instance(&again) < 64 && again != nonces[0], "{again:02x?} after {nonces:02x?}");
    // The tenant file given as the ledger: refused by name, left as it was.
    let tenant = dir.join("lan.toml");
    let s = LanServe::start_with("nonces", &text, &["--duration", "2", "--nonce-ledger", tenant.to_str().unwrap()]);
    let out = s.child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(&format!("nonce ledger {}: not a nonce ledger", tenant.display())), "{stderr}");
    assert!(stderr.contains("sealed: nt.aes"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&tenant).unwrap(), text);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// On `cpu` (no SuperNIC board: no `chain.*` values) `tern chain serve --autoscale` plans on
/// unbounded regions, launches without PR and bounds instances by cores; a frame crosses a
/// firewall and a NAT whose areas the profile does not give.
#[test]
fn chain_serve_runs_on_the_cpu_profile() {
    let s = LanServe::start("cpu", &["--profile", "cpu", "--autoscale", "--duration", "2"]);
    let out = s.send_query();
    let h = etherparse::PacketHeaders::from_ethernet_slice(&out).unwrap();
    let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    assert_eq!(ip.source, [192, 0, 2, 1]);
    let (dir, tenant) = (s.dir.clone(), s.tenant.clone());
    let out = s.child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("no board on cpu") && stdout.contains("after 0 ms of PR"), "{stdout}");
    assert!(stdout.contains("of unbounded LUTs"), "{stdout}");
    // `check` on cpu: nothing limited, the same plan.
    let (ok, out, err) = tern(&["chain", "check", tenant.to_str().unwrap(), "--profile", "cpu"]);
    assert!(ok, "{err}");
    assert!(out.contains("plan on cpu (no board: regions unbounded)"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn chain_serve_round_trip(mode: &str) {
    use std::time::Duration;
    let metrics = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let mut args = vec!["--duration", "3", "--json", "--mode", mode, "--metrics", &metrics, "--stats-interval", "1"];
    if mode != "rtc" {
        args.push("--autoscale");
    }
    let serve = LanServe::start(mode, &args);
    let f = LanServe::query();
    let got = serve.send_query();
    let LanServe { dir, tenant, inside, outside, p1, p2, child } = serve;
    let mut buf = [0u8; 2048];
    let h = etherparse::PacketHeaders::from_ethernet_slice(&got).unwrap();
    let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    assert_eq!(ip.source, [192, 0, 2, 1]);
    assert_eq!(ip.header_checksum, ip.calc_header_checksum());
    let Some(etherparse::TransportHeader::Udp(u)) = &h.transport else { panic!("not UDP") };
    assert_eq!(u.checksum, u.calc_checksum_ipv4(ip, h.payload.slice()).unwrap());
    let ext_port = u.source_port;
    assert!((20000..=20100).contains(&ext_port));
    // The answer, to the external address, comes back to the inside host.
    let mut r = Vec::new();
    tern_wire::frame::build_udp4(&mut r, [4; 6], [2; 6], [8, 8, 8, 8], [192, 0, 2, 1], 53, ext_port, 64, b"answer");
    outside.send_to(&r, p2).unwrap();
    let (n, _) = inside.recv_from(&mut buf).expect("the answer comes back");
    let h = etherparse::PacketHeaders::from_ethernet_slice(&buf[..n]).unwrap();
    let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    assert_eq!(ip.destination, [10, 0, 0, 5]);
    assert_eq!(h.payload.slice(), b"answer");
    // Not a frame; and TCP, which no tenant takes.
    inside.send_to(&[0u8; 10], p1).unwrap();
    let mut t = Vec::new();
    tern_wire::frame::build_tcp4(&mut t, [2; 6], [4; 6], [10, 0, 0, 5], [8, 8, 8, 8], 4000, 80, 64, b"");
    inside.send_to(&t, p1).unwrap();
    // Its counters while it runs (published every 10 ms): Prometheus and `chain dump`.
    std::thread::sleep(Duration::from_millis(300));
    let body = ureq::get(&format!("http://{metrics}/metrics")).call().unwrap().into_body().read_to_string().unwrap();
    assert!(body.contains("tern_chain_tx_packets_total{tenant=\"lan\"} 2"), "{body}");
    assert!(body.contains("tern_chain_malformed_packets_total 1"), "{body}");
    assert!(body.contains("tern_chain_port_rx_dropped_packets_total 0"), "{body}");
    assert!(body.contains("tern_chain_port_tx_dropped_packets_total 0"), "{body}");
    assert!(body.contains("tern_chain_rss_dropped_packets_total 0"), "{body}");
    assert!(body.contains("tern_chain_scheduler_refills_total "), "{body}");
    if mode != "rtc" {
        // Fair shares, every 20 ms: what the tenant offered (the query and the answer), its share.
        let offered = (f.len() + r.len()) as u64;
        assert!(body.contains(&format!("tern_chain_offered_bytes_total{{tenant=\"lan\"}} {offered}")), "{body}");
        assert!(body.contains("tern_chain_allowed_gbps{tenant=\"lan\"}"), "{body}");
        assert!(body.contains("tern_chain_dominant_share{tenant=\"lan\"}"), "{body}");
        // A stateful chain (the NAT) keeps all its instances: two, one a core.
        assert!(body.contains("tern_chain_instances_in_service{tenant=\"lan\"} 2"), "{body}");
        // Its space share (it asks for no bandwidth: the one instance a deployed chain keeps).
        assert!(body.contains("tern_chain_space_share_instances{tenant=\"lan\"} 1"), "{body}");
        // docs/chain.md is the contract: it names every family served (a counter by its
        // sample's `_total` name), and each it names is served (with --autoscale, all are).
        assert_eq!(
            families_served(&body),
            doc_words("chain", "tern_chain_"),
            "the metrics served, and docs/chain.md's"
        );
        // Every reason the tenant's packets can be dropped for, from the start: its firewall's
        // and NAT's, and the data path's; not the join's (its DAG is not parallel).
        for r in ["denied", "not_ip", "ports_exhausted", "no_mapping", "rate_limited", "queue_full", "no_region"] {
            assert!(
                body.contains(&format!("tern_chain_drops_packets_total{{tenant=\"lan\",reason=\"{r}\"}} 0")),
                "{r}: {body}"
            );
        }
        assert!(!body.contains("reason=\"sync_timeout\""), "{body}");
    }
    let runtime = ureq::get(&format!("http://{metrics}/runtime")).call().unwrap().into_body().read_to_string().unwrap();
    let runtime: serde_json::Value = serde_json::from_str(&runtime).unwrap();
    json_is_as_documented(&runtime, "chain", "| runtime key | holds | what |", &[]);
    let (ok, out, err) = tern(&["chain", "dump", "--server", &metrics]);
    assert!(ok, "{err}");
    assert!(out.contains(&format!("mode {mode}")) && out.contains("ns/packet"), "{out}");
    let queued = if mode == "rtc" { "" } else { "; queued 0" };
    assert!(out.contains(&format!("tenant lan: 2 in, 2 out, 0 back; drops: none{queued}\n")), "{out}");
    assert!(out.lines().any(|l| l.contains(" nat ") && l.contains("nat")), "{out}");
    // Each task instance's own counters: the firewall (before the NAT) remembered the query's
    // flow and the answer's (to the external address, a flow of its own there); the NAT made
    // one mapping; in the instance the flow went to.
    assert!(out.contains("task counters:\n"), "{out}");
    assert!(out.lines().any(|l| l.contains("fw (firewall), tenant lan: ") && l.contains(" flows 2,")), "{out}");
    assert!(out.lines().any(|l| l.contains("nat (nat), tenant lan: ") && l.contains(" mappings 1,")), "{out}");
    if mode == "snic" {
        // A live update: the firewall now denies UDP. The tenant's new task instances are
        // swapped into its chain's regions (generation 1); the next datagram is dropped there.
        std::fs::write(
            &tenant,
            "tenant = \"lan\"\ndag = \"fw -> nat\"\n[ingress]\nproto = \"udp\"\n[nt.fw]\nkind = \"firewall\"\nrules = [{ action = \"deny\", proto = \"udp\" }]\n[nt.nat]\nkind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20100\"\n",
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        inside.send_to(&f, p1).unwrap();
        outside.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        assert!(outside.recv_from(&mut buf).is_err(), "the relaunched firewall let it through");
        let body =
            ureq::get(&format!("http://{metrics}/metrics")).call().unwrap().into_body().read_to_string().unwrap();
        assert!(body.contains("tern_chain_launches_total{region=\"0\"} 1"), "{body}");
        assert!(body.contains("tern_chain_generation{tenant=\"lan\"} 1"), "{body}");
        // Both instances' regions took the new tasks.
        assert!(body.contains("tern_chain_tenant_launches_total{tenant=\"lan\"} 2"), "{body}");
        assert!(body.contains("tern_chain_updates_rejected_total 0"), "{body}");
    }
    if mode == "rtc" {
        let (ok, _, err) = tern(&[
            "chain",
            "serve",
            tenant.to_str().unwrap(),
            "--port",
            &format!("udp:127.0.0.1:0={}", inside.local_addr().unwrap()),
            "--port",
            &format!("udp:127.0.0.1:0={}", outside.local_addr().unwrap()),
            "--mode",
            "rtc",
            "--autoscale",
        ]);
        assert!(!ok && err.contains("--autoscale"), "{err}");
    }
    // While it runs, its port is taken: a second server names it.
    let (ok, _, err) = tern(&[
        "chain",
        "serve",
        tenant.to_str().unwrap(),
        "--port",
        &format!("udp:{p1}={}", inside.local_addr().unwrap()),
        "--port",
        &format!("udp:127.0.0.1:0={}", outside.local_addr().unwrap()),
        "--duration",
        "0.1",
    ]);
    assert!(!ok && err.contains(&format!("cannot bind {p1}")), "{err}");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // The progress reports, on stderr, with --json's summary on stdout.
    assert!(stderr.lines().any(|l| l.starts_with("[     1 s] ") && l.contains(" packets in, ")), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let null_fair: &[&str] = if mode == "rtc" { &["tenants[].fair"] } else { &[] };
    json_is_as_documented(&v, "chain", "| key | holds | what |", null_fair);
    assert_eq!(v["tenants"][0]["packets_out"], 2, "{mode}: {v}");
    assert_eq!(v["tenants"][0]["fair"].is_null(), mode == "rtc", "{mode}: {v}");
    if mode == "snic" {
        assert_eq!(v["tenants"][0]["drops"]["denied"], 1, "{v}");
    }
    assert_eq!(v["malformed"], 1, "{v}");
    assert_eq!(v["unknown_tenant"], 1, "{v}");
    assert_eq!(v["rss_dropped"], 0, "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern chain trace`: a DAG-A packet rides DAG-D's chain, skipping NAT, the load balancer and
/// the two dummies, through the firewall and AES (its payload sealed: 28 bytes more); a packet
/// the web tenant's firewall denies stops there.
#[test]
fn chain_trace_shows_skips_and_the_stop() {
    let ex = |f: &str| format!("{}/../../examples/chain/{f}", env!("CARGO_MANIFEST_DIR"));
    let (ok, out, err) = tern(&[
        "chain",
        "trace",
        &ex("figure10-d.toml"),
        &ex("figure10-a.toml"),
        "--packet",
        "udp,nw_src=10.9.0.1,nw_dst=10.1.0.7,tp_dst=53,len=20",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["tenant"], "a");
    let steps: Vec<String> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| format!("{} {}", s["name"].as_str().unwrap(), s["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(steps, ["nat skip", "fw pass", "lb skip", "nt4 skip", "nt5 skip", "aes pass"]);
    assert_eq!(v["fate"], "out");
    let output = v["output"].as_str().unwrap();
    assert_eq!(output.len(), 2 * (14 + 20 + 8 + 20 + 28), "hex, two digits a byte");
    json_is_as_documented(&v, "chain", "| trace key | holds | what |", &[]);
    // Its bytes after go back in as a packet: DAG-A's firewall and AES again, sealed twice.
    let (ok, out, err) =
        tern(&["chain", "trace", &ex("figure10-d.toml"), &ex("figure10-a.toml"), "--packet", output, "--json"]);
    assert!(ok, "{err}");
    let again: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!((&again["tenant"], &again["fate"]), (&v["tenant"], &v["fate"]), "{again}");
    assert_eq!(again["output"].as_str().unwrap().len(), output.len() + 2 * 28);
    let (ok, out, _) =
        tern(&["chain", "trace", &ex("web.toml"), "--packet", "tcp,nw_src=10.0.0.66,nw_dst=10.1.0.7,tp_dst=80"]);
    assert!(ok);
    assert!(out.contains("fw") && out.contains("drop: denied") && out.contains("fate: drop: denied"), "{out}");
    let (ok, out, _) = tern(&["chain", "trace", &ex("figure10-a.toml"), "--packet", "udp,nw_dst=192.0.2.9"]);
    assert!(ok && out.contains("no chain: drop: unknown_tenant"), "{out}");
}

/// `tern hw report` on tenant files: DAG-A beside DAG-D (15 Gbit/s) rides D's chain in one
/// region and is held to the 15 Gbit/s AES has left (§5.2); a chain of dummies is the board's
/// latency plus its tasks' time, and PANIC's a decision more per task after the first.
#[test]
fn hw_report_projects_tenants() {
    let ex = |f: &str| format!("{}/../../examples/chain/{f}", env!("CARGO_MANIFEST_DIR"));
    let (ok, out, err) = tern(&["hw", "report", &ex("figure10-a.toml"), "--with", &ex("figure10-d.toml"), "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["regions"]["used"], 1);
    let a = &v["tenants"][0];
    assert_eq!(a["tenant"], "a");
    let at1500 = a["rates"].as_array().unwrap().iter().find(|r| r["frame_bytes"] == 1500).unwrap();
    assert_eq!(at1500["gbps"], 15.0);
    assert_eq!(at1500["bound"], "task kind aes");
    let (ok, out, _) = tern(&["hw", "report", &ex("figure4-a.toml"), "--frame-bytes", "1500", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // 1300 ns of board and four dummy tasks of 100 ns; PANIC: three decisions of 64 ns more.
    assert_eq!(v["tenants"][0]["latency_ns"]["snic"], 1700.0);
    assert_eq!(v["tenants"][0]["latency_ns"]["panic"], 1700.0 + 3.0 * 64.0);
    let (ok, _, err) = tern(&["hw", "report", &ex("web.toml"), "--with", "/nonexistent/t.toml"]);
    assert!(!ok && err.contains("/nonexistent/t.toml"), "{err}");
}

/// A `tern flow` switch as a network task (the `stage` kind through `tern_io::BatchStage`):
/// routed frames go on with the TTL decremented and the next hop's MACs; unroutable ones are
/// dropped by name; a missing engine config is an error naming the task.
#[test]
fn chain_runs_a_flow_switch_as_a_task() {
    let dir = std::env::temp_dir().join(format!("tern-chain-stage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let router = format!("{}/../../examples/flow/router.toml", env!("CARGO_MANIFEST_DIR"));
    let t = dir.join("sw.toml");
    let text = format!(
        "tenant = \"sw\"\ndag = \"fw -> router\"\n[nt.fw]\nkind = \"firewall\"\ndefault = \"allow\"\n[nt.router]\nkind = \"stage\"\nengine = \"flow\"\nconfig = \"{router}\"\n"
    );
    std::fs::write(&t, &text).unwrap();
    let (ok, out, err) = tern(&[
        "chain",
        "trace",
        t.to_str().unwrap(),
        "--packet",
        "udp,nw_src=10.1.0.1,nw_dst=10.2.0.7,tp_dst=53",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["fate"], "out");
    let hex = v["output"].as_str().unwrap();
    let o: Vec<u8> = (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect();
    assert_eq!(&o[..6], &[2, 0, 0, 0, 0, 2], "the next hop's MAC");
    assert_eq!(o[22], 63, "the TTL decremented");
    let (ok, out, _) =
        tern(&["chain", "trace", t.to_str().unwrap(), "--packet", "udp,nw_src=10.1.0.1,nw_dst=10.9.0.7,tp_dst=53"]);
    assert!(ok && out.contains("fate: drop: stage_dropped"), "{out}");
    std::fs::write(&t, text.replace(&router, "/nonexistent/flow.toml")).unwrap();
    let (ok, _, err) = tern(&["chain", "trace", t.to_str().unwrap(), "--packet", "udp,nw_dst=10.2.0.7"]);
    assert!(!ok && err.contains("nt.router") && err.contains("/nonexistent/flow.toml"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern bench switch --json` prints the four promised keys at top level (tiny phases: what is
/// checked is the report, not the figures, but for the scaling experiment, which is
/// deterministic: CLIP moves no flow, hash-mod moves some), writes its files, and refuses
/// zero rounds and a bad α.
#[test]
fn bench_switch_json_has_the_promised_keys() {
    let out_dir = std::env::temp_dir().join(format!("tern-bench-switch-{}", std::process::id()));
    let (ok, out, err) = tern(&[
        "bench",
        "switch",
        "--rounds",
        "1",
        "--phase-secs",
        "0.02",
        "--alphas",
        "0.9,1.2",
        "--warmup-intervals",
        "1",
        "--interval-packets",
        "20000",
        "--scaling-flows",
        "50",
        "--server-ns",
        "500",
        "--json",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for key in ["offload_over_all_server_a09", "offload_over_all_server_a12"] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {}", v[key]);
    }
    assert_eq!(v["flows_moved"], 0);
    assert!(v["flows_moved_hash_mod"].as_u64().unwrap() > 0);
    assert_verdicts(
        &v,
        &err,
        &[("offload_over_all_server_a09", true), ("offload_over_all_server_a12", true), ("flows_moved", false)],
    );
    assert_eq!(v["offload"].as_array().unwrap().len(), 2);
    assert_eq!(v["options"]["server_ns"], 500);
    json_is_as_documented(&v, "clip", "| bench key | holds | what |", &[]);
    for f in ["switch.json", "switch-offload.png", "switch-scaling.svg"] {
        assert!(out_dir.join(f).exists(), "{f}");
    }
    std::fs::remove_dir_all(&out_dir).unwrap();
    let (ok, _, err) = tern(&["bench", "switch", "--rounds", "0"]);
    assert!(!ok && err.contains("--rounds"), "{err}");
    let (ok, _, err) = tern(&["bench", "switch", "--alphas", "0"]);
    assert!(!ok && err.contains("--alphas"), "{err}");
}

/// `tern switch check`: the SNAT example loads and fits (its placement in JSON); a broken
/// program exits 1 naming the file and the item; so does one too big for the pipe.
#[test]
fn switch_check_places_or_names_the_problem() {
    let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
    let (ok, out, err) = tern(&["switch", "check", snat, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], true);
    json_is_as_documented(&v, "clip", "| check key | holds | what |", &[]);
    let items = v["programs"][0]["placement"]["items"].as_array().unwrap();
    let nat = items.iter().find(|i| i["name"] == "nat").unwrap();
    assert_eq!(nat["first"], 5, "after the five classifying steps");
    let dir = std::env::temp_dir().join(format!("tern-switch-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let text = std::fs::read_to_string(snat).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, text.replace("src = \"param.addr\"", "src = \"param.adr\"")).unwrap();
    let (ok, out, _) = tern(&["switch", "check", bad.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("bad.toml") && out.contains("`param.adr` is not a field"), "{out}");
    let big = dir.join("big.toml");
    std::fs::write(&big, text.replace("size = 2048", "size = 2000000")).unwrap();
    let (ok, out, _) = tern(&["switch", "check", big.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("does not fit clip-tofino"), "{out}");
    // The JSON of a program that does not load, beside one that does not fit.
    let (ok, out, _) = tern(&["switch", "check", bad.to_str().unwrap(), big.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(!ok && v["ok"] == false && v["programs"][1]["error"].is_string(), "{v}");
    json_is_as_documented(&v, "clip", "| check key | holds | what |", &["programs[].placement", "programs[].percent"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern switch trace`: an inside UDP frame misses `nat`, flies to a server with a request
/// header, and leaves by port 2 translated to the server's address; from port 2 it is routed
/// untouched; a frame carrying CLIP's EtherType from a host port is dropped by name.
#[test]
fn switch_trace_follows_a_frame_through_a_server() {
    let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
    let pkt = "udp,nw_src=10.0.0.5,nw_dst=198.51.100.1,tp_src=4000,tp_dst=53";
    let (ok, out, err) = tern(&["switch", "trace", snat, "--packet", pkt, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["out_port"], 2);
    json_is_as_documented(&v, "clip", "| trace key | holds | what |", &[]);
    let steps: Vec<&str> = v["steps"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert!(steps.iter().any(|s| s.starts_with("flight: to server")), "{steps:?}");
    assert!(steps.last().unwrap().contains("ipv4 192.0.2."), "{steps:?}");
    let (ok, out, _) = tern(&["switch", "trace", snat, "--packet", pkt, "--port", "2"]);
    assert!(ok);
    assert!(out.contains("ipv4 10.0.0.5 -> 198.51.100.1") && !out.contains("flight"), "{out}");
    let clip_frame = "0200000000fe020000000001 88b5 0101000008000000000100000000000100";
    let (ok, out, _) = tern(&["switch", "trace", snat, "--packet", clip_frame]);
    assert!(ok);
    assert!(out.contains("dropped: spoofed_header"), "{out}");
    let (ok, _, err) = tern(&["switch", "trace", snat, "--packet", pkt, "--port", "3"]);
    assert!(!ok && err.contains("--port 3"), "{err}");
}

/// The two hosts of the `tern switch serve` tests: UDP sockets whose datagrams carry frames to
/// the switch's inside port and from its outside port.
struct SwitchHosts {
    inside: std::net::UdpSocket,
    outside: std::net::UdpSocket,
}

impl SwitchHosts {
    fn new() -> SwitchHosts {
        let inside = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let outside = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for s in [&inside, &outside] {
            s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        }
        SwitchHosts { inside, outside }
    }

    /// A free UDP address, and a free TCP one.
    fn udp_addr() -> std::net::SocketAddr {
        std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
    }
    fn tcp_addr() -> std::net::SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
    }

    /// Sends a UDP frame from 10.0.`net`.`flow`:4000 for each flow in on `port`; each
    /// translation read on the outside (source address and port), in order.
    fn exchange(&self, port: std::net::SocketAddr, net: u8, flows: std::ops::Range<u8>) -> Vec<([u8; 4], u16)> {
        let mut buf = [0u8; 2048];
        flows
            .map(|f| {
                let mut fr = Vec::new();
                tern_wire::frame::build_udp4(
                    &mut fr,
                    [2; 6],
                    [4; 6],
                    [10, 0, net, f],
                    [8, 8, 8, 8],
                    4000,
                    53,
                    64,
                    b"q",
                );
                self.inside.send_to(&fr, port).unwrap();
                let (n, _) = self.outside.recv_from(&mut buf).expect("a translated frame");
                let h = etherparse::PacketHeaders::from_ethernet_slice(&buf[..n]).unwrap();
                let Some(etherparse::NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
                let Some(etherparse::TransportHeader::Udp(u)) = &h.transport else { panic!("not UDP") };
                (ip.source, u.source_port)
            })
            .collect()
    }
}

/// A switch of four UDP ports for two servers, in `dir`: port 1 to the inside host, 2 to the
/// outside host, 3 and 4 to servers 0 and 1 (`s0`, `s1`), with their control addresses (`c0`,
/// `c1`) and the switch's metrics address (`m`).
struct SwitchRig {
    snat: &'static str,
    p1: std::net::SocketAddr,
    s0: std::net::SocketAddr,
    s1: std::net::SocketAddr,
    p3: std::net::SocketAddr,
    p4: std::net::SocketAddr,
    c0: std::net::SocketAddr,
    c1: std::net::SocketAddr,
    m: std::net::SocketAddr,
    /// The configuration file and its text.
    config: std::path::PathBuf,
    text: String,
}

impl SwitchRig {
    /// Writes the configuration: the SNAT program, the ports, `extra` lines after the servers'
    /// control addresses, group `members`, a default route out of port 2.
    fn new(dir: &std::path::Path, hosts: &SwitchHosts, extra: &str, members: &str) -> SwitchRig {
        let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
        let (free, tcp) = (SwitchHosts::udp_addr, SwitchHosts::tcp_addr);
        let (p1, p2, p3, p4, s0, s1) = (free(), free(), free(), free(), free(), free());
        let (c0, c1, m) = (tcp(), tcp(), tcp());
        let text = format!(
            "program = \"{snat}\"\nports = [\"udp:{p1}={}\", \"udp:{p2}={}\", \"udp:{p3}={s0}\", \"udp:{p4}={s1}\"]\nservers = [3, 4]\ncontrol = [\"{c0}\", \"{c1}\"]\n{extra}[group]\nmembers = [{members}]\n[[route]]\nprefix = \"0.0.0.0/0\"\nport = 2\nmac = \"02:00:00:00:00:99\"\n",
            hosts.inside.local_addr().unwrap(),
            hosts.outside.local_addr().unwrap()
        );
        let config = dir.join("serve.toml");
        std::fs::write(&config, &text).unwrap();
        SwitchRig { snat, p1, s0, s1, p3, p4, c0, c1, m, config, text }
    }

    /// `tern switch server` `i` on its port and control address, `rest` its other options.
    fn server(&self, i: usize, rest: &str) -> std::process::Child {
        let (bind, peer, ctl) = if i == 0 { (self.s0, self.p3, self.c0) } else { (self.s1, self.p4, self.c1) };
        let args = format!("switch server {} --index {i} --port udp:{bind}={peer} --control {ctl} {rest}", self.snat);
        spawn_tern(&args.split(' ').collect::<Vec<_>>())
    }

    /// `tern switch serve` on the configuration with its metrics, `rest` its other options.
    fn serve(&self, rest: &str) -> std::process::Child {
        let args = format!("switch serve {} --metrics {} {rest}", self.config.display(), self.m);
        spawn_tern(&args.split(' ').collect::<Vec<_>>())
    }
}

/// `tern switch serve` with two `tern switch server` processes, frames carried in UDP
/// datagrams: inside flows leave translated by server 0 (the only member); `tern switch scale
/// --add 1` grows the group — old flows keep their server's address, new ones reach server 1
/// too; a CLIP frame from a host port is a named drop; the metrics, `dump-tables` and a reload
/// (generation 2) say so; both stop on their own with summaries.
#[test]
fn switch_serve_with_two_servers_scales_without_moving_flows() {
    use std::time::Duration;
    let dir = std::env::temp_dir().join(format!("tern-switch-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hosts = SwitchHosts::new();
    let inside = &hosts.inside;
    let rig = SwitchRig::new(&dir, &hosts, "", "0");
    let SwitchRig { p1, c0, m, ref config, ref text, .. } = rig;
    let servers = [rig.server(0, "--duration 9 --json"), rig.server(1, "--duration 9 --json")];
    let serve = rig.serve("--duration 8 --json");
    std::thread::sleep(Duration::from_millis(1200));
    let exchange = |flows| hosts.exchange(p1, 1, flows);
    let first = exchange(0..20);
    assert!(first.iter().all(|t| t.0 == [192, 0, 2, 1]), "{first:?}");
    let (ok, out, err) = tern(&["switch", "scale", "--server", &m.to_string(), "--add", "1"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("group version 1"), "{out}");
    assert_eq!(exchange(0..20), first, "no old flow moved");
    let new = exchange(100..160);
    assert!(new.iter().any(|t| t.0 == [192, 0, 2, 2]), "new flows reach the new server: {new:?}");
    // A CLIP frame from a host port: dropped by name.
    let mut spoof = Vec::new();
    tern_wire::frame::build_udp4(&mut spoof, [2; 6], [4; 6], [10, 0, 1, 1], [8, 8, 8, 8], 4000, 53, 64, b"q");
    spoof[12..14].copy_from_slice(&[0x88, 0xb5]);
    inside.send_to(&spoof, p1).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(3))).build().into();
    let metrics = agent.get(&format!("http://{m}/metrics")).call().unwrap().into_body().read_to_string().unwrap();
    assert!(metrics.contains("tern_switch_drops_total{reason=\"spoofed_header\"} 1"), "{metrics}");
    assert!(metrics.contains("tern_switch_group_version 1"), "{metrics}");
    assert!(metrics.contains("tern_switch_packets_total{path=\"response\"}"), "{metrics}");
    // docs/clip.md is the contract: its tables name every family the switch and a server
    // serve, and each they name is served; every label value of a reason, path or handler
    // counter is named there.
    let server_metrics =
        agent.get(&format!("http://{c0}/metrics")).call().unwrap().into_body().read_to_string().unwrap();
    let tables = [doc_table_column("clip", "| switch family |"), doc_table_column("clip", "| server family |")];
    let both: std::collections::BTreeSet<String> = tables.iter().flatten().cloned().collect();
    assert_eq!(doc_words("clip", "tern_switch_"), both, "docs/clip.md names only the families of its tables");
    for (body, header) in [(&metrics, "| switch family |"), (&server_metrics, "| server family |")] {
        assert_eq!(families_served(body), doc_table_column("clip", header), "{header} of docs/clip.md, and /metrics");
        let doc = std::fs::read_to_string(format!("{}/../../docs/clip.md", env!("CARGO_MANIFEST_DIR"))).unwrap();
        // (The endpoint's own `tern_http_` family has its reasons in docs/dispatch.md.)
        for l in body.lines().filter(|l| !l.starts_with('#') && !l.starts_with("tern_http_")) {
            for key in ["reason", "path", "counter"] {
                if let Some(value) = l.split(&format!("{key}=\"")).nth(1).and_then(|v| v.split('"').next()) {
                    assert!(doc.contains(&format!("`{value}`")), "{l}: its {key} is not named in docs/clip.md");
                }
            }
        }
    }
    // Port 1 received the hosts' frames (and the spoofed one: counted as a frame, dropped by
    // the switch, not the port); nothing was dropped by a port.
    let port = |name: &str, port: u16, dir: &str| -> u64 {
        let key = format!("{name}{{port=\"{port}\",dir=\"{dir}\"}} ");
        metrics.lines().find_map(|l| l.strip_prefix(key.as_str())).and_then(|v| v.parse().ok()).unwrap_or(u64::MAX)
    };
    assert!((81..u64::MAX).contains(&port("tern_switch_port_packets_total", 1, "rx")), "{metrics}");
    assert!(port("tern_switch_port_packets_total", 3, "tx") > 0, "{metrics}");
    assert_eq!(port("tern_switch_port_dropped_total", 1, "rx"), 0, "{metrics}");
    let (ok, out, err) = tern(&["switch", "dump-tables", "--server", &m.to_string(), "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["table"], "nat");
    json_is_as_documented(&v, "clip", "| tables key | holds | what |", &[]);
    let mirrored: u64 = v["mirrors"].as_array().unwrap().iter().map(|s| s["entries"].as_u64().unwrap()).sum();
    assert_eq!(mirrored, 80, "each flow's entry on its server");
    // A reload (another route) makes generation 2; a broken one is refused and changes nothing.
    std::fs::write(
        config,
        text.replace(
            "[group]",
            "[[route]]\nprefix = \"203.0.113.0/24\"\nport = 1\nmac = \"02:00:00:00:00:98\"\n[group]",
        ),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    let metrics = agent.get(&format!("http://{m}/metrics")).call().unwrap().into_body().read_to_string().unwrap();
    assert!(metrics.contains("tern_switch_generation 2"), "{metrics}");
    let out = serve.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["drops"]["spoofed_header"], 1);
    assert_eq!(v["drops"]["no_route"], 0, "every reason, from 0: {v}");
    assert!(v["responses"].as_u64().unwrap() >= 60, "{v}");
    assert_eq!(v["generation"], 2);
    json_is_as_documented(&v, "clip", "| serve key | holds | what |", &[]);
    for s in servers {
        let out = s.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        json_is_as_documented(&v, "clip", "| server key | holds | what |", &[]);
        assert!(v["handler"]["created"].as_u64().unwrap() > 0, "{v}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Failover between processes: two servers, each the other's buddy (`--buddy`: its new entries
/// reach the buddy before their responses leave); server 0 is killed; within the heartbeat
/// bound the switch fails it over to server 1, and every flow — server 0's included — leaves
/// with the translation it had.
#[test]
fn switch_fails_a_dead_server_over_to_its_buddy_with_its_entries() {
    use std::time::Duration;
    let dir = std::env::temp_dir().join(format!("tern-switch-failover-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hosts = SwitchHosts::new();
    let rig = SwitchRig::new(&dir, &hosts, "buddies = [1, 0]\nheartbeat_ms = 300\n", "0, 1");
    let SwitchRig { p1, c0, c1, m, .. } = rig;
    let mut server0 = rig.server(0, &format!("--buddy {c1} --duration 8"));
    let server1 = rig.server(1, &format!("--buddy {c0} --duration 8 --json"));
    let serve = rig.serve("--duration 7 --json");
    std::thread::sleep(Duration::from_millis(1200));
    let exchange = |flows| hosts.exchange(p1, 2, flows);
    let before = exchange(0..30);
    let of0 = before.iter().filter(|t| t.0 == [192, 0, 2, 1]).count();
    assert!(of0 > 0 && of0 < 30, "both servers serve: {before:?}");
    server0.kill().unwrap();
    let _ = server0.wait();
    std::thread::sleep(Duration::from_millis(900));
    assert_eq!(exchange(0..30), before, "every flow keeps its translation at the buddy");
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(3))).build().into();
    let metrics = agent.get(&format!("http://{m}/metrics")).call().unwrap().into_body().read_to_string().unwrap();
    assert!(metrics.contains("tern_switch_failovers_total 1"), "{metrics}");
    let out = serve.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = server1.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["replicas_adopted"], of0, "{v}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern hw report` on a switch configuration: CLIP's three modules with their use and the
/// paper's Table II beside, the program's placement, and the two paths' projected rates (the
/// remote path bounded by the servers, from the handler's rate measured here).
#[test]
fn hw_report_projects_a_switch_configuration() {
    let cfg = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/serve.toml");
    let (ok, out, err) = tern(&["hw", "report", cfg, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mods = v["modules"].as_array().unwrap();
    assert_eq!(mods.len(), 3);
    assert_eq!(mods[2]["module"], "forwarding");
    assert_eq!(mods[2]["uses"]["tcam_blocks"], 1);
    assert_eq!(mods[0]["table_ii_percent"]["sram"], 3.75);
    assert_eq!(v["program"]["name"], "snat");
    assert!(v["remote_path"]["handler_pps_per_core_measured"].as_f64().unwrap() > 0.0);
    let remote = v["remote_path"]["pps"].as_f64().unwrap();
    assert!(remote > 0.0 && remote < v["switch_path"]["pps"].as_f64().unwrap());
    let (ok, out, _) = tern(&["hw", "report", cfg]);
    assert!(ok);
    assert!(out.contains("selecting") && out.contains("[3.75]") && out.contains("remote path"), "{out}");
}

/// A taken port is an error naming it: `tern switch serve` on a bound UDP address, and `tern
/// switch server` on a taken control address; a configuration naming an unknown key is refused
/// naming the file.
#[test]
fn switch_serve_and_server_name_a_taken_port() {
    let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
    let taken = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let dir = std::env::temp_dir().join(format!("tern-switch-taken-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("serve.toml");
    std::fs::write(&config, format!("program = \"{snat}\"\nports = [\"udp:{addr}=127.0.0.1:9\"]\nservers = []\n"))
        .unwrap();
    let (ok, _, err) = tern(&["switch", "serve", config.to_str().unwrap(), "--duration", "1"]);
    assert!(!ok && err.contains(&addr.to_string()), "{err}");
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ctl = tcp.local_addr().unwrap().to_string();
    let free = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let port = format!("udp:{free}=127.0.0.1:9");
    let (ok, _, err) = tern(&["switch", "server", snat, "--port", &port, "--control", &ctl, "--duration", "1"]);
    assert!(!ok && err.contains(&ctl), "{err}");
    std::fs::write(&config, format!("program = \"{snat}\"\nports = []\nservers = []\nbogus = 1\n")).unwrap();
    let (ok, _, err) = tern(&["switch", "serve", config.to_str().unwrap()]);
    assert!(!ok && err.contains("serve.toml") && err.contains("bogus"), "{err}");
    // A heartbeat bound outside 10 ms to a minute is refused by name (it was raised to 10
    // silently, and a huge one hung the stop).
    for hb in [5u64, 60_001, 1_000_000_000] {
        std::fs::write(
            &config,
            format!(
                "program = \"{snat}\"\nports = [\"udp:127.0.0.1:0=127.0.0.1:9\"]\nservers = []\nheartbeat_ms = {hb}\n"
            ),
        )
        .unwrap();
        let (ok, _, err) = tern(&["switch", "serve", config.to_str().unwrap(), "--duration", "1"]);
        assert!(!ok && err.contains(&format!("heartbeat_ms = {hb}: give 10 to 60000")), "{err}");
    }
    // A port's fault options: a probability out of range and an unknown option, each named.
    for (opt, want) in [("loss=2", "loss"), ("drop=0.1", "no option `drop`"), ("loss", "not KEY=VALUE")] {
        let port = format!("udp:{free}=127.0.0.1:9,{opt}");
        let (ok, _, err) = tern(&["switch", "server", snat, "--port", &port, "--duration", "1"]);
        assert!(!ok && err.contains(want) && err.contains(&port), "{opt}: {err}");
    }
    // A good one runs (and says nothing of faults it had no packet to inject).
    let port = format!("udp:{free}=127.0.0.1:9,loss=0.1,seed=3,dir=rx");
    let (ok, _, err) =
        tern(&["switch", "server", snat, "--port", &port, "--duration", "1.2", "--stats-interval", "0.5"]);
    assert!(ok, "{err}");
    // Its progress lines (--stats-interval) on stderr.
    let lines = err.lines().filter(|l| l.starts_with('[') && l.contains("] 0 requests, 0 responses")).count();
    assert!(lines >= 2, "{err}");
    // The switch on a free port: its progress lines (--stats-interval) on stderr.
    let free = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    std::fs::write(&config, format!("program = \"{snat}\"\nports = [\"udp:{free}=127.0.0.1:9\"]\nservers = []\n"))
        .unwrap();
    let (ok, _, err) =
        tern(&["switch", "serve", config.to_str().unwrap(), "--duration", "1.2", "--stats-interval", "0.5", "--json"]);
    assert!(ok, "{err}");
    let lines = err.lines().filter(|l| l.starts_with('[') && l.contains(" frames in, 0 out; ")).count();
    assert!(lines >= 2, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tern bench switch --snat` without root runs the in-process part and says what it skipped:
/// the network figures are present and null, with the reason. (As root the test drops to
/// `nobody` with `setpriv`, or is skipped without it.)
#[test]
fn bench_snat_without_root_says_what_it_skipped() {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false);
    let dir = std::env::temp_dir().join(format!("tern-bench-snat-noroot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = if root {
        if Command::new("setpriv").arg("--version").output().is_err() {
            eprintln!("skipped: root, and no setpriv to drop to nobody");
            return;
        }
        // `nobody` writes the report into a directory it may write to.
        let _ = Command::new("chmod").arg("777").arg(&dir).status();
        let mut c = Command::new("setpriv");
        c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups", env!("CARGO_BIN_EXE_tern")]);
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_tern"))
    };
    let out = cmd
        .args(["bench", "switch", "--snat", "--quick", "--rounds", "1", "--alphas", "0.9", "--phase-secs", "0.05"])
        .args(["--flows", "500", "--capacity", "64", "--interval-packets", "5000", "--warmup-intervals", "1"])
        .args(["--scaling-flows", "20", "--server-ns", "100", "--json", "--out"])
        .arg(&dir)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("skipped the network part of --snat"), "{stderr}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r["snat_over_netfilter_pps"].is_null() && r.get("snat_over_netfilter_pps").is_some(), "{r}");
    assert!(r["offload_latency_ratio"].is_null() && r.get("offload_latency_ratio").is_some());
    assert!(r["skipped"].as_str().unwrap().contains("needs root"));
    assert!(r["offload_over_all_server_a09"].as_f64().unwrap() > 0.0);
}

/// A server that comes back takes back from its buddy (`GET /handback`) what the buddy holds
/// of its own: the buddy, given a replica of server 0's SNAT connection (public pair
/// 192.0.2.1:5000), hands it back; server 0 started with `--buddy` takes it before any
/// traffic and holds it (its summary: one hand-back at least, one entry held back, none
/// refused), asking again while it does.
#[test]
fn a_switch_server_that_comes_back_takes_back_from_its_buddy() {
    use std::time::{Duration, Instant};
    let snat = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/switch/snat.toml");
    let free = || std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let ctl = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let b_port = format!("udp:{}=127.0.0.1:9", free());
    let mut b = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["switch", "server", snat, "--index", "1", "--port", &b_port, "--control", &ctl.to_string()])
        .args(["--duration", "8", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(3))).build().into();
    let t0 = Instant::now();
    while agent.get(&format!("http://{ctl}/ready")).call().is_err() {
        assert!(t0.elapsed() < Duration::from_secs(5), "server 1 never became ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Server 0's UDP connection 10.0.0.1:5000 -> 198.51.100.7:53 as 192.0.2.1:5000 (a replica
    // record: docs/clip.md), posted as server 0 would (a 2-byte length, then the record).
    let mut record = vec![17];
    record.extend_from_slice(&[10, 0, 0, 1]);
    record.extend_from_slice(&5000u16.to_be_bytes());
    record.extend_from_slice(&[198, 51, 100, 7]);
    record.extend_from_slice(&53u16.to_be_bytes());
    record.extend_from_slice(&[192, 0, 2, 1]);
    record.extend_from_slice(&5000u16.to_be_bytes());
    record.extend_from_slice(&[0xff, 0]);
    let mut body = (record.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(&record);
    let r = agent.post(&format!("http://{ctl}/replicas")).send(&body[..]).unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let hex: String = record.iter().map(|x| format!("{x:02x}")).collect();
    let t0 = Instant::now();
    loop {
        let got = agent.get(&format!("http://{ctl}/handback")).call().unwrap().into_body().read_to_string().unwrap();
        let v: serde_json::Value = serde_json::from_str(&got).unwrap();
        if v["records"].as_array().unwrap().iter().any(|r| r == &serde_json::json!(hex)) {
            assert_eq!(v["server"], 1);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(3), "never handed back: {got}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let a_port = format!("udp:{}=127.0.0.1:9", free());
    let (ok, out, err) = tern(&[
        "switch",
        "server",
        snat,
        "--index",
        "0",
        "--port",
        &a_port,
        "--buddy",
        &ctl.to_string(),
        "--duration",
        "1.5",
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["handbacks"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!((v["held_back"].as_u64(), v["handback_refused"].as_u64()), (Some(1), Some(0)), "{v}");
    assert_eq!(v["entries"], 1, "{v}");
    let _ = b.kill();
    let _ = b.wait();
}

/// The docs (`docs/*.md`) and the README, each with its path.
fn docs_and_readme() -> Vec<(std::path::PathBuf, String)> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(format!("{root}/docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    files.push(format!("{root}/README.md").into());
    files.into_iter().map(|f| (f.clone(), std::fs::read_to_string(&f).unwrap())).collect()
}

/// The subcommands a help lists under "Commands:" (not `help`).
fn commands_in(help: &str) -> Vec<String> {
    let Some((_, rest)) = help.split_once("Commands:") else { return Vec::new() };
    let list = rest.split("Options:").next().unwrap_or("");
    list.lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("    "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// `tern ARGS --help`.
fn help_of(args: &[&str]) -> String {
    let mut a = args.to_vec();
    a.push("--help");
    let (ok, out, err) = tern(&a);
    assert!(ok, "tern {args:?} --help: {err}");
    out
}

/// A command group whose summary in `tern --help` names some of its commands (`chain check`)
/// names all of them: a group's summary once named two of its six commands, written before the
/// others were.
#[test]
fn a_groups_summary_names_all_its_commands_or_none() {
    let top = help_of(&[]);
    let mut named_groups = 0;
    for group in commands_in(&top) {
        let summary = top.lines().find(|l| l.split_whitespace().next() == Some(group.as_str())).unwrap_or("");
        let subs = commands_in(&help_of(&[&group]));
        let named: Vec<&String> = subs.iter().filter(|c| summary.contains(&format!("`{group} {c}"))).collect();
        if named.is_empty() {
            continue;
        }
        named_groups += 1;
        let unnamed: Vec<&String> = subs.iter().filter(|c| !named.contains(c)).collect();
        assert!(unnamed.is_empty(), "`tern --help` on {group} names {named:?} but not {unnamed:?}");
    }
    assert!(named_groups >= 3, "rpc, chain and switch name their commands");
}

/// The README's Layout names every doc, every examples folder and every crate (it once missed
/// a doc and two folders written after it).
#[test]
fn the_readme_layout_names_every_doc_example_folder_and_crate() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let layout = readme.split("## Layout").nth(1).and_then(|s| s.split("```").nth(1)).expect("a Layout block");
    let entries = |dir: &str, want_dir: bool| -> Vec<String> {
        std::fs::read_dir(format!("{root}/{dir}"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir() == want_dir)
            .map(|p| format!("{dir}/{}", p.file_name().unwrap().to_string_lossy()))
            .collect()
    };
    let mut missing = Vec::new();
    for doc in entries("docs", false).into_iter().filter(|d| d.ends_with(".md")) {
        if !layout.lines().any(|l| l.starts_with(&doc)) {
            missing.push(doc);
        }
    }
    for dir in entries("examples", true).into_iter().chain(entries("crates", true)) {
        if !layout.lines().any(|l| l.starts_with(&dir) && l[dir.len()..].starts_with([' ', '/'])) {
            missing.push(dir);
        }
    }
    assert!(missing.is_empty(), "README's Layout lacks {missing:?}");
}

/// The option a word names (`--stats-interval`, `[--json]`, `(--quick`), without its dashes;
/// not `--help` or `--version`.
fn option_named(word: &str) -> Option<String> {
    let flag = word.trim_start_matches(['[', '(']).strip_prefix("--")?;
    let flag: String = flag.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    (!flag.is_empty() && flag != "help" && flag != "version").then_some(flag)
}

/// The docs and the README are the contract for the command line too: every option they give a
/// `tern` command in backticks (`tern chain serve ... [--stats-interval S]`) is one its `--help`
/// lists. (A server's option once was documented, parsed and did nothing; this keeps the names
/// honest, and the tests of each command keep the behaviour.)
#[test]
fn every_option_the_docs_give_a_command_is_in_its_help() {
    use std::collections::{BTreeMap, BTreeSet};
    let mut helps: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut help = |cmd: &[&str]| -> Option<String> {
        helps
            .entry(cmd.join(" "))
            .or_insert_with(|| {
                let mut args = cmd.to_vec();
                args.push("--help");
                let (ok, out, _) = tern(&args);
                ok.then_some(out)
            })
            .clone()
    };
    let (mut checked, mut missing) = (0, BTreeSet::new());
    for (f, text) in docs_and_readme() {
        // Code spans, a line break inside one read as a space.
        for span in text.split('`').skip(1).step_by(2) {
            let span = span.split_whitespace().collect::<Vec<_>>().join(" ");
            let Some(rest) = span.strip_prefix("tern ") else { continue };
            let words: Vec<&str> = rest.split(' ').collect();
            // The longest run of leading words that is a command.
            let Some((n, h)) = (1..=words.len().min(3))
                .rev()
                .filter(|&n| words[..n].iter().all(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-')))
                .find_map(|n| help(&words[..n]).map(|h| (n, h)))
            else {
                continue;
            };
            for flag in words[n..].iter().filter_map(|w| option_named(w)) {
                checked += 1;
                if !h.contains(&format!("--{flag}")) {
                    missing.insert(format!("{}: `tern {}` has no --{flag}", f.display(), words[..n].join(" ")));
                }
            }
        }
    }
    assert!(checked > 100, "only {checked} options found in the docs");
    assert!(missing.is_empty(), "{missing:#?}");
}

/// And the other way: every option of every `tern` command (found from `tern --help` and each
/// group's) is explained in its engine's doc (SuperNIC's commands: docs/chain.md), else in some
/// doc or the README.
#[test]
fn the_docs_explain_every_option_of_every_command() {
    let docs = docs_and_readme();
    let all: String = docs.iter().map(|(_, t)| t.as_str()).collect();
    let chain = &docs.iter().find(|(f, _)| f.ends_with("docs/chain.md")).expect("docs/chain.md").1;
    let (commands, help) = (commands_in, help_of);
    let (mut checked, mut missing) = (0, Vec::new());
    for group in commands(&help(&[])) {
        let gh = help(&[&group]);
        let mut cmds: Vec<Vec<String>> = commands(&gh).into_iter().map(|c| vec![group.clone(), c]).collect();
        if cmds.is_empty() {
            cmds.push(vec![group.clone()]);
        }
        for cmd in cmds {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let doc = if args.contains(&"chain") { chain } else { &all };
            for flag in help(&args).split_whitespace().filter_map(option_named) {
                checked += 1;
                let m = format!("tern {} --{flag}", args.join(" "));
                if !doc.contains(&format!("--{flag}")) && !missing.contains(&m) {
                    missing.push(m);
                }
            }
        }
    }
    assert!(checked > 200, "only {checked} options found");
    assert!(missing.is_empty(), "no doc explains {missing:#?}");
}

/// Exactly once across a restart of `tern chain serve` (docs/chain.md, "Go-back-N transport"):
/// a go-back-N sender's connection opened by one run (through a cookie: its quiet time), and
/// its first two payloads delivered but their acknowledgements not taken when the server
/// stops. At the next run, the open from before arrives again (delayed in the network) and is
/// answered with a cookie of that run's, making nothing (it fails without the quiet time); the
/// payloads, sent again, are answered with resets — not delivered a second time — and the
/// sender's connection ends as forgotten, the payloads given back as sent; a new connection,
/// opened through a cookie, carries the next.
#[test]
fn chain_serve_resets_a_go_back_n_connection_it_forgot_across_a_restart() {
    use std::time::{Duration, Instant};
    use tern_chain::gbn::{Config, Ended, Sender};
    let text = "tenant = \"transport\"\ndag = \"gbn\"\n[ingress]\nproto = \"udp\"\n[nt.gbn]\nkind = \"gbn\"\n";
    let frame = |payload: &[u8]| {
        let mut f = Vec::new();
        tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 5], [10, 0, 0, 9], 4000, 9000, 64, payload);
        f
    };
    let udp_payload = |f: &[u8]| {
        let h = etherparse::PacketHeaders::from_ethernet_slice(f).unwrap();
        h.payload.slice().to_vec()
    };
    // Sends what the sender has through the server, takes the answers back (unless `deaf`);
    // the payloads delivered on the outside port within `wait`.
    let sent = std::cell::RefCell::new(Vec::new());
    let exchange = |s: &LanServe, tx: &mut Sender, deaf: bool, wait: Duration| {
        let mut out = Vec::new();
        tx.poll(Instant::now(), &mut out);
        sent.borrow_mut().extend(out.iter().cloned());
        for p in &out {
            s.inside.send_to(&frame(p), s.p1).unwrap();
        }
        let mut buf = [0u8; 2048];
        s.inside.set_read_timeout(Some(wait)).unwrap();
        while let Ok((n, _)) = s.inside.recv_from(&mut buf) {
            if !deaf {
                tx.on_packet(&udp_payload(&buf[..n]), Instant::now());
            }
        }
        s.outside.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let mut delivered = Vec::new();
        while let Ok((n, _)) = s.outside.recv_from(&mut buf) {
            delivered.push(udp_payload(&buf[..n]));
        }
        delivered
    };
    let wait = Duration::from_millis(200);
    let cfg = Config { rto: Duration::from_millis(100), ..Config::default() };
    let s = LanServe::start_with("gbn-restart", text, &["--duration", "3", "--stats-interval", "0"]);
    let mut tx = Sender::new(1, cfg);
    tx.push(b"first".to_vec()).unwrap();
    tx.push(b"second".to_vec()).unwrap();
    assert!(exchange(&s, &mut tx, false, wait).is_empty(), "the open, answered with a cookie");
    assert!(!tx.is_open() && tx.stats().cookies == 1, "{:?}", tx.stats());
    assert!(exchange(&s, &mut tx, false, wait).is_empty(), "the open with the cookie");
    assert!(tx.is_open());
    let both = [b"first".to_vec(), b"second".to_vec()];
    assert_eq!(exchange(&s, &mut tx, true, wait), both, "delivered, the acknowledgements not taken");
    let out = s.child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let open = sent.borrow().iter().rfind(|p| p[1] == tern_chain::gbn::OPEN).unwrap().clone();

    // The next run: the open with the first run's cookie, delayed, makes nothing.
    let s = LanServe::start_with("gbn-restart", text, &["--duration", "3", "--stats-interval", "0"]);
    s.inside.send_to(&frame(&open), s.p1).unwrap();
    s.inside.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = s.inside.recv_from(&mut buf).unwrap();
    assert_eq!(udp_payload(&buf[..n])[1], tern_chain::gbn::COOKIE, "the late open: a cookie, no connection");
    std::thread::sleep(cfg.rto);
    assert!(exchange(&s, &mut tx, false, wait).is_empty(), "not delivered again");
    assert_eq!(tx.ended(), Some(Ended::Forgotten), "{:?}", tx.stats());
    let back = tx.take_unacknowledged().unwrap();
    assert_eq!((back.sent, back.unsent), (both.to_vec(), vec![]));
    let mut again = Sender::new(2, cfg);
    again.push(b"third".to_vec()).unwrap();
    assert!(exchange(&s, &mut again, false, wait).is_empty(), "the open, answered with a cookie");
    assert!(!again.is_open() && again.stats().cookies == 1, "{:?}", again.stats());
    assert!(exchange(&s, &mut again, false, wait).is_empty(), "the open with the cookie");
    assert!(again.is_open());
    assert_eq!(exchange(&s, &mut again, false, wait), [b"third".to_vec()]);
    let dir = s.dir.clone();
    let out = s.child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}
