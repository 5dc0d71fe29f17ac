//! The compiled matcher against the naive evaluator, and the hardware tables against both.

use proptest::prelude::*;
use tern_dispatch::matcher::offload::{self, HwTables, Workload};
use tern_dispatch::matcher::reference::NaiveMatcher;
use tern_dispatch::matcher::{Decision, Machine};
use tern_dispatch::rules::pattern::PatOp;
use tern_dispatch::rules::{App, CondKind, Condition, DispatchConfig, Rule, RuleSet};
use tern_wire::tlv::Writer;

const IDL: &str = r#"
    syntax = "proto3";
    import "tern/qingniao.proto";
    message Req { string key = 1 [(tern.dispatch) = true]; bytes tag = 2 [(tern.dispatch) = true];
                  uint32 n = 3 [(tern.dispatch) = true]; bytes body = 4; }
    message Other { string key = 1 [(tern.dispatch) = true]; }
"#;

fn schema() -> tern_idl::Schema {
    tern_idl::parse_str("t.proto", IDL).unwrap()
}

/// Bytes over a small alphabet (with the delimiter) so that random rules match often.
fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'$']), 0..=max)
}

fn nonempty(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'$']), 1..=max)
}

/// Merges neighbouring skips and checks the way the parser does.
fn merge(ops: Vec<PatOp>) -> Vec<PatOp> {
    let mut out: Vec<PatOp> = Vec::new();
    for op in ops {
        match (out.last_mut(), op) {
            (Some(PatOp::Skip(a)), PatOp::Skip(b)) => *a += b,
            (Some(PatOp::Check(a)), PatOp::Check(b)) => a.extend(b),
            (_, op) => out.push(op),
        }
    }
    out
}

fn pattern() -> impl Strategy<Value = Vec<PatOp>> {
    let op = prop_oneof![(1u32..4).prop_map(PatOp::Skip), Just(PatOp::ToDelim), nonempty(3).prop_map(PatOp::Check),];
    (prop::collection::vec(op, 0..4), nonempty(3)).prop_map(|(mut ops, last)| {
        ops.push(PatOp::Check(last));
        merge(ops)
    })
}

fn cond_kind(software_only: bool) -> BoxedStrategy<CondKind> {
    let hw = prop_oneof![
        3 => pattern().prop_map(CondKind::Pattern),
        1 => bytes(4).prop_map(CondKind::Exact),
        1 => nonempty(3).prop_map(CondKind::Prefix),
    ];
    if software_only {
        prop_oneof![
            5 => hw,
            1 => nonempty(2).prop_map(CondKind::Suffix),
            1 => nonempty(2).prop_map(CondKind::Contains),
        ]
        .boxed()
    } else {
        hw.boxed()
    }
}

/// App 9 with request types 1 (`Req`) and 2 (`Other`).
fn app(default_queue: u16) -> App {
    let s = schema();
    App {
        name: "a".into(),
        id: 9,
        default_queue,
        requests: vec![(s.message("Req").unwrap().clone(), 1), (s.message("Other").unwrap().clone(), 2)],
    }
}

fn rule_set(software_only: bool) -> impl Strategy<Value = RuleSet> {
    let rule = (
        0u8..2,                                                   // request type 1 or 2
        prop::option::of(cond_kind(software_only)),               // key
        prop::option::of(cond_kind(software_only)),               // tag
        prop::option::of(prop::sample::select(vec![0u32, 1, 7])), // n, exact
        0u16..6,                                                  // queue
    );
    (prop::collection::vec(rule, 0..12), 0u16..3).prop_map(|(rules, default_queue)| {
        let app = app(default_queue);
        let rules = rules
            .into_iter()
            .enumerate()
            .map(|(index, (t, key, tag, n, queue))| {
                let mut conditions = Vec::new();
                if let Some(k) = key {
                    conditions.push(Condition { field: 1, field_name: "key".into(), kind: k });
                }
                if t == 0 {
                    if let Some(k) = tag {
                        conditions.push(Condition { field: 2, field_name: "tag".into(), kind: k });
                    }
                    if let Some(n) = n {
                        conditions.push(Condition {
                            field: 3,
                            field_name: "n".into(),
                            kind: CondKind::Exact(n.to_be_bytes().to_vec()),
                        });
                    }
                }
                Rule { index, name: format!("r{index}"), app_id: 9, req_type: t + 1, queue, conditions }
            })
            .collect();
        RuleSet { delimiter: b'$', apps: vec![app], rules, warnings: Vec::new(), queues: None }
    })
}

/// A request payload: fields in encoding order, some absent, and sometimes garbage at the end
/// or a cut-off record.
fn payload() -> impl Strategy<Value = (u8, Vec<u8>)> {
    (
        1u8..3,
        prop::option::of(bytes(10)),
        prop::option::of(bytes(6)),
        prop::option::of(prop::sample::select(vec![0u32, 1, 7, 9])),
        0usize..3,
        prop::collection::vec(any::<u8>(), 0..6),
    )
        .prop_map(|(t, key, tag, n, tail, junk)| {
            let mut buf = Vec::new();
            let mut w = Writer::new(&mut buf);
            if let Some(k) = &key {
                w.put_bytes(1, k);
            }
            if let Some(g) = &tag {
                w.put_bytes(2, g);
            }
            if let Some(n) = n {
                w.put_u32(3, n);
            }
            w.put_bytes(4, b"body");
            match tail {
                1 => buf.extend_from_slice(&junk),
                2 => {
                    let cut = buf.len().saturating_sub(junk.len());
                    buf.truncate(cut)
                }
                _ => {}
            }
            (t, buf)
        })
}

fn naive(set: &RuleSet, t: u8, p: &[u8]) -> Decision {
    let mut scratch = Vec::new();
    NaiveMatcher::new(set).decide(9, t, p, &mut scratch).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Any rule set, software-only forms included: the compiled machine decides as the naive
    /// loop does (same queue, same rule).
    #[test]
    fn machine_agrees_with_naive_loop(set in rule_set(true), reqs in prop::collection::vec(payload(), 1..16)) {
        let m = Machine::compile(&set, 9).unwrap();
        for (t, p) in &reqs {
            prop_assert_eq!(m.decide(*t, p), naive(&set, *t, p), "payload {:?}", p);
        }
    }

    /// Rule sets the report calls offloadable: the literal RAM/CAM tables, walked as the
    /// hardware walks them (a CAM miss goes to the default queue), decide the same queue.
    #[test]
    fn hardware_tables_agree_when_offloadable(set in rule_set(false), reqs in prop::collection::vec(payload(), 1..16)) {
        let profile = tern_hw::Profile::builtin("cpu").unwrap();
        let report = offload::report(&set, &profile, Workload::default()).unwrap();
        let tables = HwTables::build(&set, &profile);
        prop_assert_eq!(report.offloadable, tables.is_ok(), "{:?}", report.problems);
        if let Ok(tables) = tables {
            prop_assert_eq!(tables.cam.len() as u64, report.cam_entries);
            for (t, p) in &reqs {
                let (queue, _) = tables.simulate(9, *t, p).unwrap();
                prop_assert_eq!(queue, naive(&set, *t, p).queue, "payload {:?} report {:?} tables {:?}", p, report, tables);
            }
        }
    }
}

/// A single-packet request of `app_id` around `payload`, its `seg_cnt` covering the payload.
fn first_packet(app_id: u8, req_type: u8, req_id: u32, payload: &[u8]) -> Vec<u8> {
    use tern_wire::qnp::{Flags, HEADER_LEN, Packet, Repr};
    let repr = Repr {
        app_id,
        req_type,
        req_id,
        req_acked_id: req_id,
        req_len_in_bytes: payload.len() as u32,
        req_len_in_pkts: 1,
        pkt_seq_num_in_req: 0,
        flags: Flags::DATA,
        seg_cnt: tern_wire::qnp::seg_cnt_for(payload.len()),
    };
    let mut pkt = vec![0u8; HEADER_LEN];
    repr.emit(&mut Packet::new_unchecked(&mut pkt[..]));
    pkt.extend_from_slice(payload);
    pkt
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// The kernel steering program (run in the interpreter) puts every request the RSD decides
    /// on the socket of the RSD's queue; where the program had to leave rules out (`*`,
    /// `contains`), on that socket or the request id's. It always names one of the sockets.
    #[test]
    fn kernel_steering_agrees_with_the_rsd(
        set in rule_set(true),
        reqs in prop::collection::vec((payload(), any::<u32>()), 1..16),
    ) {
        use std::sync::Arc;
        use tern_dispatch::rsd::{Rsd, Verdict};
        use tern_dispatch::steer::Steering;
        const SOCKETS: u16 = 6;
        let steering = Steering::compile(&set, SOCKETS);
        prop_assert_eq!(steering.complete(), steering.left_out.is_empty());
        let mut rsd: Rsd = Rsd::new(256, SOCKETS);
        rsd.install(9, Some(Arc::new(Machine::compile(&set, 9).unwrap())));
        for ((t, p), req_id) in &reqs {
            let pkt = first_packet(9, *t, *req_id, p);
            let socket = steering.socket_of(&pkt);
            let by_id = req_id % u32::from(SOCKETS);
            prop_assert!(socket < u32::from(SOCKETS), "socket {}", socket);
            if let Verdict::Queue(q) = rsd.dispatch(1, &pkt) {
                if steering.complete() {
                    prop_assert_eq!(socket, u32::from(q), "payload {:?}\n{}", p, steering.program);
                } else {
                    prop_assert!(socket == u32::from(q) || socket == by_id, "socket {} queue {} {:?}", socket, q, steering.left_out);
                }
            }
        }
    }
}

/// Rule sets of many rules that check the same place first (prefixes, exact values and
/// patterns over a small alphabet, some repeated), where the steering program binary-searches.
fn run_heavy_rule_set() -> impl Strategy<Value = RuleSet> {
    let lead = prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'c', b'd']), 1..=5);
    let kind = prop_oneof![
        4 => lead.clone().prop_map(CondKind::Prefix),
        1 => lead.clone().prop_map(CondKind::Exact),
        1 => (lead.clone(), 0u32..2).prop_map(|(b, s)| CondKind::Pattern(merge(vec![PatOp::Skip(s), PatOp::Check(b)]))),
        1 => (lead, nonempty(2)).prop_map(|(a, b)| CondKind::Pattern(merge(vec![PatOp::Check(a), PatOp::Skip(1), PatOp::Check(b)]))),
    ];
    (prop::collection::vec((kind, prop::option::of(nonempty(2)), 0u16..6), 0..40), 0u16..3).prop_map(
        |(rules, default_queue)| {
            let app = app(default_queue);
            let rules = rules
                .into_iter()
                .enumerate()
                .map(|(index, (k, tag, queue))| {
                    let mut conditions = vec![Condition { field: 1, field_name: "key".into(), kind: k }];
                    if let Some(t) = tag {
                        conditions.push(Condition { field: 2, field_name: "tag".into(), kind: CondKind::Prefix(t) });
                    }
                    Rule { index, name: format!("r{index}"), app_id: 9, req_type: 1, queue, conditions }
                })
                .collect();
            RuleSet { delimiter: b'$', apps: vec![app], rules, warnings: Vec::new(), queues: None }
        },
    )
}

/// Requests of type 1 with every dispatch field, keys over the run-heavy rules' alphabet.
fn run_heavy_request() -> impl Strategy<Value = Vec<u8>> {
    let key = prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'c', b'd', b'$']), 0..8);
    (key, bytes(3), any::<u32>()).prop_map(|(k, tag, n)| {
        let mut buf = Vec::new();
        let mut w = Writer::new(&mut buf);
        w.put_bytes(1, &k);
        w.put_bytes(2, &tag);
        w.put_u32(3, n);
        buf
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Where the program binary-searches runs of rules, it still picks the RSD's queue.
    #[test]
    fn kernel_steering_agrees_on_runs_of_rules(
        set in run_heavy_rule_set(),
        reqs in prop::collection::vec(run_heavy_request(), 1..24),
    ) {
        use std::sync::Arc;
        use tern_dispatch::rsd::{Rsd, Verdict};
        use tern_dispatch::steer::Steering;
        let steering = Steering::compile(&set, 6);
        prop_assert!(steering.complete(), "{:?}", steering.left_out);
        let mut rsd: Rsd = Rsd::new(256, 6);
        rsd.install(9, Some(Arc::new(Machine::compile(&set, 9).unwrap())));
        for (i, p) in reqs.iter().enumerate() {
            let pkt = first_packet(9, 1, i as u32, p);
            let Verdict::Queue(q) = rsd.dispatch(1, &pkt) else { return Err(TestCaseError::fail("the RSD refused an honest request")) };
            prop_assert_eq!(steering.socket_of(&pkt), u32::from(q), "payload {:?}\n{}", p, steering.program);
        }
    }
}

/// The synthetic rule sets of `tern bench dispatch` compile whole, and every key of a rule is
/// steered to that rule's worker.
#[test]
fn bench_rules_steer_whole() {
    use tern_dispatch::steer::Steering;
    let spec = tern_dispatch::synth::Spec::default();
    let set = spec.rule_set(2);
    let steering = Steering::compile(&set, 2);
    assert!(steering.complete(), "{:?}", steering.left_out);
    for r in 0..spec.rules {
        let mut payload = Vec::new();
        Writer::new(&mut payload).put_bytes(1, &spec.key(r, 62, 7));
        // The synthetic rules live in app 1.
        let pkt = first_packet(1, 1, 12345, &payload);
        assert_eq!(steering.socket_of(&pkt), r % 2, "rule {r}");
    }
}

/// Long patterns on the `key` field (skips up to 11, checks up to 12 bytes, up to 8 parts), so
/// that one compressed run covers more than four 8-byte words.
fn long_pattern() -> impl Strategy<Value = Vec<PatOp>> {
    let op = prop_oneof![(1u32..12).prop_map(PatOp::Skip), Just(PatOp::ToDelim), nonempty(12).prop_map(PatOp::Check)];
    (prop::collection::vec(op, 2..10), nonempty(12)).prop_map(|(mut ops, last)| {
        ops.push(PatOp::Check(last));
        merge(ops)
    })
}

/// A key the pattern matches: `fill` in the skipped bytes (never the delimiter, so a delimiter
/// skip ends where this key puts one), then `tail`.
fn key_for(ops: &[PatOp], fill: u8, tail: &[u8]) -> Vec<u8> {
    let mut key = Vec::new();
    for op in ops {
        match op {
            PatOp::Skip(n) => key.extend(std::iter::repeat_n(fill, *n as usize)),
            PatOp::ToDelim => key.push(b'$'),
            PatOp::Check(b) => key.extend_from_slice(b),
        }
    }
    key.extend_from_slice(tail);
    key
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Long patterns, and requests built to match one of them (sometimes with one byte
    /// changed): the machine's word-at-a-time comparisons agree with the naive loop.
    #[test]
    fn machine_agrees_on_long_patterns(
        patterns in prop::collection::vec((long_pattern(), 0u16..6), 1..10),
        reqs in prop::collection::vec((any::<prop::sample::Index>(), prop::sample::select(vec![b'a', b'b']),
            bytes(40), prop::option::of((any::<prop::sample::Index>(), any::<u8>()))), 1..16),
    ) {
        let s = schema();
        let app = App { name: "a".into(), id: 9, default_queue: 0, requests: vec![(s.message("Req").unwrap().clone(), 1)] };
        let rules = patterns.iter().enumerate().map(|(index, (ops, queue))| Rule {
            index, name: format!("r{index}"), app_id: 9, req_type: 1, queue: *queue,
            conditions: vec![Condition { field: 1, field_name: "key".into(), kind: CondKind::Pattern(ops.clone()) }],
        }).collect();
        let set = RuleSet { delimiter: b'$', apps: vec![app], rules, warnings: Vec::new(), queues: None };
        let m = Machine::compile(&set, 9).unwrap();
        for (which, fill, tail, flip) in &reqs {
            let mut key = key_for(&which.get(&patterns).0, *fill, tail);
            if let Some((at, b)) = flip {
                let i = at.index(key.len());
                key[i] = *b;
            }
            let mut p = Vec::new();
            Writer::new(&mut p).put_bytes(1, &key);
            prop_assert_eq!(m.decide(1, &p), naive(&set, 1, &p), "key {:?}", key);
        }
    }
}

fn from_toml(text: &str) -> RuleSet {
    let cfg: DispatchConfig = toml::from_str(&format!(
        "idl = \"t.proto\"\n[[app]]\nname = \"a\"\nid = 9\nrequests = {{ Req = 1, Other = 2 }}\n{text}"
    ))
    .unwrap();
    RuleSet::from_config(&cfg, &schema()).unwrap()
}

fn req(key: &[u8], tag: &[u8]) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut w = Writer::new(&mut buf);
    w.put_bytes(1, key);
    w.put_bytes(2, tag);
    w.put_u32(3, 0);
    buf
}

#[test]
fn shared_prefixes_share_states_and_entries_are_counted() {
    // Two rules share their first check ("us"), then differ: 1 root + "us" + 2 second keys.
    let set = from_toml(
        r#"
        [[rule]]
        name = "x"
        app = "a"
        request = "Req"
        queue = 1
        match = { key = "us.r1" }
        [[rule]]
        name = "y"
        app = "a"
        request = "Req"
        queue = 2
        match = { key = "us.r2" }
        "#,
    );
    let u250 = tern_hw::Profile::builtin("qingniao-u250").unwrap();
    let r = offload::report(&set, &u250, Workload::default()).unwrap();
    assert!(r.offloadable, "{:?}", r.problems);
    assert_eq!((r.ram_entries, r.cam_entries), (4, 4));
    assert_eq!(r.apps[0].states, 3); // state 0, the root's, the one after "us"
    assert_eq!(r.apps[0].max_skip_and_checks, 2);
    let p = r.apps[0].projection.unwrap();
    assert_eq!(p.cycles, 9 + 6 * 2);
    let t = HwTables::build(&set, &cpu_profile()).unwrap();
    assert_eq!(t.ram[0].skip, 2); // the view starts with the 2 length bytes
    assert_eq!(t.simulate(9, 1, &req(b"usXr2", b"")), Some((2, 2)));
    assert_eq!(t.simulate(9, 1, &req(b"usXr3", b"")), Some((0, 2)));
}

#[test]
fn conflicts_name_rules_and_reasons() {
    let set = from_toml(
        r#"
        [[rule]]
        name = "long"
        app = "a"
        request = "Req"
        queue = 1
        match = { key = "abc" }
        [[rule]]
        name = "short"
        app = "a"
        request = "Req"
        queue = 2
        match = { key = "ab" }
        [[rule]]
        name = "suffix"
        app = "a"
        request = "Req"
        queue = 3
        match = { tag = { suffix = "z" } }
        [[rule]]
        name = "wide"
        app = "a"
        request = "Req"
        queue = 3
        match = { tag = "0123456789" }
        "#,
    );
    let u250 = tern_hw::Profile::builtin("qingniao-u250").unwrap();
    let r = offload::report(&set, &u250, Workload::default()).unwrap();
    assert!(!r.offloadable);
    let text: Vec<String> = r.problems.iter().map(|p| format!("{:?}: {}", p.rules, p.reason)).collect();
    let all = text.join("\n");
    assert!(all.contains("[\"long\", \"short\", \"suffix\", \"wide\"]: need different skip/check shapes"), "{all}");
    assert!(all.contains("[\"suffix\"]: a suffix needs a skip that depends on the field's length"), "{all}");
    assert!(all.contains("[\"wide\"]: checks 10 bytes at once; the CAM compares at most 8"), "{all}");
    // Software still runs it.
    let m = Machine::compile(&set, 9).unwrap();
    assert_eq!(m.decide(1, &req(b"abx", b"")).queue, 2);
    assert_eq!(m.decide(1, &req(b"abcx", b"")).queue, 1);
    assert_eq!(m.decide(1, &req(b"q", b"yz")).queue, 3);
}

#[test]
fn a_rule_ending_early_needs_the_default_queue() {
    let rules = |q: u16| {
        from_toml(&format!(
            r#"
            [[rule]]
            name = "deep"
            app = "a"
            request = "Req"
            queue = 1
            match = {{ key = "ab", tag = "x" }}
            [[rule]]
            name = "shallow"
            app = "a"
            request = "Req"
            queue = {q}
            match = {{ key = "ab" }}
            "#
        ))
    };
    let cpu = tern_hw::Profile::builtin("cpu").unwrap();
    let r = offload::report(&rules(2), &cpu, Workload::default()).unwrap();
    assert_eq!(r.problems.len(), 1, "{:?}", r.problems);
    assert!(r.problems[0].reason.contains("can only fall back to the default queue 0, not to queue 2"));
    // With the default queue the CAM miss is the right answer.
    let set = rules(0);
    assert!(offload::report(&set, &cpu, Workload::default()).unwrap().offloadable);
    let t = HwTables::build(&set, &cpu_profile()).unwrap();
    assert_eq!(t.simulate(9, 1, &req(b"ab", b"x")).unwrap().0, 1);
    assert_eq!(t.simulate(9, 1, &req(b"ab", b"y")).unwrap().0, 0);
}

#[test]
fn too_many_entries_for_the_u250() {
    // 130 rules × 4 distinct checks = 521 entries > 512.
    let mut text = String::new();
    for i in 0..130 {
        text.push_str(&format!(
            "[[rule]]\nname = \"r{i}\"\napp = \"a\"\nrequest = \"Req\"\nqueue = 1\nmatch = {{ key = \"{i:03}.a{i:03}.b{i:03}.c{i:03}\" }}\n"
        ));
    }
    let set = from_toml(&text);
    let u250 = tern_hw::Profile::builtin("qingniao-u250").unwrap();
    let r = offload::report(&set, &u250, Workload::default()).unwrap();
    assert_eq!(r.ram_entries, 1 + 130 * 4);
    assert!(!r.offloadable);
    assert!(
        r.problems.iter().any(|p| p.reason.contains("matcher.ram_entries asked for 521, 512 available")),
        "{:?}",
        r.problems
    );
}

fn cpu_profile() -> tern_hw::Profile {
    tern_hw::Profile::builtin("cpu").unwrap()
}

#[test]
fn a_catch_all_after_a_branch_keeps_its_queue() {
    let set = from_toml(
        r#"
        [[rule]]
        name = "r0"
        app = "a"
        request = "Other"
        queue = 0
        match = { key = "a.a" }
        [[rule]]
        name = "r1"
        app = "a"
        request = "Other"
        queue = 2
        [[rule]]
        name = "r2"
        app = "a"
        request = "Other"
        queue = 0
        match = { key = "$" }
        "#,
    );
    let r = offload::report(&set, &cpu_profile(), Workload::default()).unwrap();
    assert!(!r.offloadable, "{r:?}");
    let m = Machine::compile(&set, 9).unwrap();
    assert_eq!(m.decide(2, &req(b"$", b"")).queue, 2);
}

/// The worked example of docs/rules.md.
#[test]
fn docs_example_tables() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/dispatch/kv.toml");
    let loaded = tern_dispatch::rules::load(std::path::Path::new(dir)).unwrap();
    let u250 = tern_hw::Profile::builtin("qingniao-u250").unwrap();
    let t = HwTables::build(&loaded.rules, &u250).unwrap();
    let rows: Vec<String> = t
        .cam
        .iter()
        .zip(&t.ram)
        .map(|(c, r)| {
            format!(
                "{} {} {} {} {} -> {} {} {} {}",
                c.app_id,
                c.req_type,
                c.field,
                c.state,
                String::from_utf8_lossy(&c.bytes),
                r.field,
                r.skip,
                r.check,
                r.state
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            "1 1 0 0  -> 1 2 4 1",
            "1 1 1 1 item -> 1 255 2 2",
            "1 1 1 1 user -> 1 1 1 3",
            "1 1 1 2 eu -> 0 0 0 3",
            "1 1 1 3 0 -> 0 0 0 1",
            "1 1 1 3 5 -> 0 0 0 2",
        ]
    );
}
