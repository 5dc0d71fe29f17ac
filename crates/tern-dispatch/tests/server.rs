//! The dispatch server end to end over loopback UDP: every mode answers every GET correctly;
//! with L7 rules, requests land only on the worker their rule names, also under loss; and
//! reconfiguring one application leaves another untouched (QingNiao Figure 24).

use std::time::Duration;

use tern_dispatch::kv::{KvLayout, KvStore, PARTITIONS};
use tern_dispatch::loadgen::{self, LoadOptions};
use tern_dispatch::server::{Mode, Placement, Server, ServerOptions};
use tern_dispatch::synth::Spec;
use tern_io::fault::FaultConfig;

fn layout() -> KvLayout {
    KvLayout { spec: Spec::default(), workers: 3, keys: 4800 }
}

fn store(l: &KvLayout) -> KvStore {
    let s = KvStore::temporary(None).unwrap();
    s.load(l).unwrap();
    s
}

/// Every mode, with Tern's RSD both on dedicated threads and in the workers.
fn configs(modes: &[Mode]) -> Vec<ServerOptions> {
    let mut out = Vec::new();
    for &mode in modes {
        let placements: &[Placement] =
            if mode == Mode::Rsd { &[Placement::Dedicated, Placement::Workers] } else { &[Placement::Dedicated] };
        for &placement in placements {
            out.push(ServerOptions { mode, placement, workers: 3, dispatchers: 2, ..ServerOptions::default() });
        }
    }
    out
}

fn name(o: &ServerOptions) -> String {
    if o.mode == Mode::Rsd { format!("rsd ({})", o.placement) } else { o.mode.to_string() }
}

#[test]
fn every_mode_answers_every_get() {
    let l = layout();
    let st = store(&l);
    for opts in configs(&Mode::ALL) {
        let mode = name(&opts);
        let server = Server::start(&opts, l.rule_set(), st.clone()).unwrap();
        let mut load = LoadOptions::new(server.addr(), l);
        load.requests = Some(3000);
        load.duration = Duration::from_secs(30);
        load.threads = 2;
        let r = loadgen::run(&load).unwrap();
        eprintln!("{mode}: {:.0} rps p50 {:.0} us p99 {:.0} us", r.rps, r.p50_us, r.p99_us);
        assert_eq!((r.completed, r.failed, r.not_found, r.wrong_value), (3000, 0, 0, 0), "{mode}");
        let handled: u64 = server.worker_requests().iter().sum();
        assert_eq!(handled, 3000, "{mode}: handler runs");
        server.stop().unwrap();
    }
}

/// The worker each partition's GETs must reach, summed from what the client sent.
fn expected_per_worker(l: &KvLayout, per_partition: &[u64]) -> Vec<u64> {
    let mut w = vec![0; usize::from(l.workers)];
    for p in 0..PARTITIONS {
        w[usize::from(l.queue_of(p))] += per_partition[p as usize];
    }
    w
}

#[test]
fn requests_land_only_on_their_rules_worker_under_loss() {
    let l = layout();
    let st = store(&l);
    for opts in configs(&[Mode::Rsd, Mode::SwRing, Mode::SwUds]) {
        let mode = name(&opts);
        let server = Server::start(&opts, l.rule_set(), st.clone()).unwrap();
        let mut load = LoadOptions::new(server.addr(), l);
        load.requests = Some(2000);
        load.duration = Duration::from_secs(60);
        load.faults = FaultConfig { loss: 0.1, duplicate: 0.05, reorder: 0.05, seed: 7, ..FaultConfig::default() };
        let r = loadgen::run(&load).unwrap();
        assert_eq!((r.completed, r.failed, r.wrong_value), (2000, 0, 0), "{mode}");
        assert!(r.retransmissions > 0, "{mode}: the loss should have forced retransmissions");
        // Each request ran its handler once, on the worker its rule names.
        assert_eq!(server.worker_requests(), expected_per_worker(&l, &r.per_partition), "{mode}");
        server.stop().unwrap();
    }
}

/// Two applications with the same rules; app 2 is `kv2`.
fn two_apps(l: &KvLayout) -> tern_dispatch::rules::RuleSet {
    let mut set = l.rule_set();
    let mut kv2 = set.apps[0].clone();
    kv2.id = 2;
    kv2.name = "kv2".into();
    set.apps.push(kv2);
    let n = set.rules.len();
    let copies: Vec<_> = set
        .rules
        .iter()
        .map(|r| tern_dispatch::rules::Rule {
            index: r.index + n,
            app_id: 2,
            name: format!("kv2-{}", r.name),
            ..r.clone()
        })
        .collect();
    set.rules.extend(copies);
    set
}

/// QingNiao Figure 24: reconfiguring one application (here 40 times while both run) changes
/// where its requests go, and the other application sees no loss and no stall.
#[test]
fn reconfiguring_one_app_leaves_the_other_untouched() {
    for opts in configs(&[Mode::Rsd]) {
        eprintln!("{}", name(&opts));
        reconfigure_under_load(&opts);
    }
}

fn reconfigure_under_load(opts: &ServerOptions) {
    let l = layout();
    let st = store(&l);
    let set = two_apps(&l);
    let server = Server::start(opts, set.clone(), st).unwrap();
    let addr = server.addr();
    let steady = std::thread::spawn(move || {
        let mut load = LoadOptions::new(addr, l);
        load.app_id = 2;
        load.duration = Duration::from_secs(2);
        loadgen::run(&load).unwrap()
    });
    // App 1's rules, rotated by one worker on every other generation.
    let mut rotated = set.clone();
    for r in rotated.rules.iter_mut().filter(|r| r.app_id == 1) {
        r.queue = (r.queue + 1) % 3;
    }
    let mut generations = Vec::new();
    let start = std::time::Instant::now();
    let mut i = 0;
    while start.elapsed() < Duration::from_millis(1500) {
        let new = if i % 2 == 0 { &rotated } else { &set };
        generations.push(server.reconfigure(1, new).unwrap());
        i += 1;
        std::thread::sleep(Duration::from_millis(30));
    }
    let r2 = steady.join().unwrap();
    assert!(generations.len() >= 10 && generations.windows(2).all(|w| w[1] == w[0] + 1), "{generations:?}");
    assert_eq!((r2.failed, r2.not_found, r2.wrong_value), (0, 0, 0));
    assert!(r2.completed > 1000, "app 2 completed only {}", r2.completed);
    assert!(r2.max_us < 500_000.0, "app 2 stalled: max latency {} µs", r2.max_us);
    let d = tern_dispatch::server::total(&server.dispatcher_stats());
    assert_eq!(d.rsd.drops.iter().sum::<u64>() + d.handoff_full, 0, "{d:?}");
    // Leave app 1 on the rotated rules (even count of swaps → make it odd), then check where
    // its requests land.
    if generations.len() % 2 == 0 {
        server.reconfigure(1, &rotated).unwrap();
    }
    let before = server.worker_requests();
    let mut load = LoadOptions::new(addr, l);
    load.requests = Some(600);
    load.duration = Duration::from_secs(30);
    let r1 = loadgen::run(&load).unwrap();
    assert_eq!((r1.completed, r1.failed), (600, 0));
    let after = server.worker_requests();
    let got: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let mut want = vec![0; 3];
    for p in 0..PARTITIONS {
        want[(usize::from(l.queue_of(p)) + 1) % 3] += r1.per_partition[p as usize];
    }
    assert_eq!(got, want, "app 1 requests must follow the rotated rules");
    server.stop().unwrap();
}

/// Exactly once across reloads: under 10% loss (so requests are retransmitted) the rules of the
/// only application rotate between workers every few milliseconds, so retransmissions often
/// reach another worker than their original. Every request still runs its handler once: the
/// workers share one exactly-once memory (docs/qnp.md §7).
#[test]
fn a_reload_never_runs_a_handler_twice() {
    let l = layout();
    let st = store(&l);
    for opts in configs(&[Mode::Rsd, Mode::SwRing]) {
        let mode = name(&opts);
        let set = l.rule_set();
        let server = Server::start(&opts, set.clone(), st.clone()).unwrap();
        let addr = server.addr();
        let mut rotated = set.clone();
        for r in &mut rotated.rules {
            r.queue = (r.queue + 1) % 3;
        }
        let load = std::thread::spawn(move || {
            let mut load = LoadOptions::new(addr, l);
            load.requests = Some(3000);
            load.duration = Duration::from_secs(60);
            load.faults = FaultConfig { loss: 0.1, duplicate: 0.05, reorder: 0.05, seed: 11, ..FaultConfig::default() };
            loadgen::run(&load).unwrap()
        });
        let mut swaps = 0;
        while !load.is_finished() {
            server.reconfigure(1, if swaps % 2 == 0 { &rotated } else { &set }).unwrap();
            swaps += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        let r = load.join().unwrap();
        assert_eq!((r.completed, r.failed, r.wrong_value), (3000, 0, 0), "{mode}");
        assert!(r.retransmissions > 100 && swaps > 10, "{mode}: {} retransmissions, {swaps} swaps", r.retransmissions);
        let handled: u64 = server.worker_requests().iter().sum();
        assert_eq!(handled, 3000, "{mode}: handler runs over {swaps} reloads");
        server.stop().unwrap();
    }
}

/// Every datagram the server reads and does not serve is counted by a named reason, in every
/// mode: garbage, a response, an unknown application, an undeclared type, a first packet without
/// its key, and a datagram longer than a receive buffer.
#[test]
fn every_unserved_datagram_is_counted() {
    use tern_wire::qnp::{Flags, HEADER_LEN, Packet, Repr};
    let l = layout();
    let st = store(&l);
    let header = |app: u8, req_type: u8, flags: Flags, seg_cnt: u8, payload: &[u8]| {
        let repr = Repr {
            app_id: app,
            req_type,
            req_id: 77,
            req_acked_id: 77,
            req_len_in_bytes: payload.len() as u32,
            req_len_in_pkts: 1,
            pkt_seq_num_in_req: 0,
            flags,
            seg_cnt,
        };
        let mut pkt = vec![0u8; HEADER_LEN];
        repr.emit(&mut Packet::new_unchecked(&mut pkt[..]));
        pkt.extend_from_slice(payload);
        pkt
    };
    let mut key = Vec::new();
    tern_wire::tlv::Writer::new(&mut key).put_bytes(1, &l.spec.key(3, 62, 1));
    let mut other = Vec::new();
    tern_wire::tlv::Writer::new(&mut other).put_u32(9, 1);
    let junk: Vec<Vec<u8>> = vec![
        b"short".to_vec(),
        header(1, 1, Flags::RESPONSE, 3, &key),
        header(9, 1, Flags::DATA, 3, &key),
        header(1, 2, Flags::DATA, 3, &key),
        header(1, 1, Flags::DATA, 2, &other),
        header(1, 1, Flags::DATA, 1, &key),
        vec![0x55; 4000],
    ];
    for opts in configs(&Mode::ALL) {
        let mode = name(&opts);
        let server = Server::start(&opts, l.rule_set(), st.clone()).unwrap();
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for j in &junk {
            sock.send_to(j, server.addr()).unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let counted = loop {
            let counts = server.shared().drop_counts();
            let total: u64 = counts.iter().map(|(_, v)| v).sum();
            if total >= junk.len() as u64 || std::time::Instant::now() > deadline {
                break counts;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let nonzero: Vec<_> = counted.iter().filter(|(_, v)| *v > 0).collect();
        let total: u64 = counted.iter().map(|(_, v)| v).sum();
        assert_eq!(total, junk.len() as u64, "{mode}: {nonzero:?}");
        assert!(nonzero.iter().any(|(n, v)| n == "oversize" && *v == 1), "{mode}: {nonzero:?}");
        assert_eq!(server.worker_requests().iter().sum::<u64>(), 0, "{mode}");
        server.stop().unwrap();
    }
}

/// The in-process transport: every mode answers every GET right over a MemNet, with the same
/// steering as the socket group (by request id, or by flow for `rss`), on the rule's worker.
#[test]
fn every_mode_answers_every_get_over_the_mem_transport() {
    use tern_dispatch::server::Transport;
    let l = layout();
    let st = store(&l);
    for opts in configs(&Mode::ALL) {
        let opts = ServerOptions { transport: Transport::Mem, ..opts };
        let mode = name(&opts);
        let server = Server::start(&opts, l.rule_set(), st.clone()).unwrap();
        let mut load = LoadOptions::new(server.addr(), l);
        load.net = server.mem_net().cloned();
        load.requests = Some(3000);
        load.duration = Duration::from_secs(30);
        load.threads = 2;
        let r = loadgen::run(&load).unwrap();
        assert_eq!((r.completed, r.failed, r.not_found, r.wrong_value), (3000, 0, 0, 0), "{mode}");
        let handled = server.worker_requests();
        assert_eq!(handled.iter().sum::<u64>(), 3000, "{mode}: handler runs");
        if opts.mode != Mode::Rss {
            assert_eq!(handled, expected_per_worker(&l, &r.per_partition), "{mode}: the rules' workers");
            // Dispatchers publish their counters every 20 ms: a short run may end before.
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            let d = loop {
                let d = tern_dispatch::server::total(&server.dispatcher_stats());
                if d.dispatch_ns > 0 || std::time::Instant::now() > deadline {
                    break d;
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            assert!(d.dispatch_ns > 0, "{mode}: dispatch time measured");
        }
        server.stop().unwrap();
    }
}

/// With the RSDs in the workers, the rules compiled into the socket group's program (the
/// kernel's, over UDP; the mem network's, in memory) put every request on its worker's socket:
/// nothing is handed off, also after a reload re-attaches the program. Sharded by request id
/// instead, about (W-1)/W of the requests are handed off.
#[test]
fn kernel_steering_leaves_nothing_to_hand_off() {
    use tern_dispatch::server::{Transport, total};
    let l = layout();
    let st = store(&l);
    for transport in [Transport::Udp, Transport::Mem] {
        for kernel_steering in [true, false] {
            let opts = ServerOptions {
                placement: Placement::Workers,
                workers: 3,
                transport,
                kernel_steering,
                ..ServerOptions::default()
            };
            let what = format!("{transport:?}, kernel steering {kernel_steering}");
            let set = l.rule_set();
            let server = Server::start(&opts, set.clone(), st.clone()).unwrap();
            assert_eq!(server.steering().map(|s| s.complete()), kernel_steering.then_some(true), "{what}");
            let run = |server: &Server, seed: u64| {
                let mut load = LoadOptions::new(server.addr(), l);
                load.net = server.mem_net().cloned();
                load.requests = Some(2000);
                load.duration = Duration::from_secs(30);
                load.seed = seed;
                let r = loadgen::run(&load).unwrap();
                assert_eq!((r.completed, r.failed, r.wrong_value), (2000, 0, 0), "{what}");
                r
            };
            let first = run(&server, 1);
            assert_eq!(server.worker_requests(), expected_per_worker(&l, &first.per_partition), "{what}");
            // Copies the client sent before it finished (spurious retransmissions on a loaded
            // machine) may still be in the sockets: let the workers take them under the rules
            // they were steered by, or one read after the reload below counts as handed off.
            std::thread::sleep(Duration::from_millis(500));
            // New rules: every rule's worker moves by one.
            let mut rotated = set.clone();
            for r in &mut rotated.rules {
                r.queue = (r.queue + 1) % 3;
            }
            server.reconfigure(1, &rotated).unwrap();
            let before = server.worker_requests();
            let second = run(&server, 2);
            let mut want = vec![0u64; 3];
            for (w, n) in expected_per_worker(&l, &second.per_partition).into_iter().enumerate() {
                want[(w + 1) % 3] += n;
            }
            let after: Vec<u64> = server.worker_requests().iter().zip(&before).map(|(a, b)| a - b).collect();
            assert_eq!(after, want, "{what}: after the reload");
            let shared = server.shared().clone();
            server.stop().unwrap();
            let handed_off =
                total(&shared.dispatchers.iter().map(|d| d.lock().unwrap().clone()).collect::<Vec<_>>()).handed_off;
            if kernel_steering {
                assert_eq!(handed_off, 0, "{what}");
            } else {
                assert!(handed_off > 4000 / 2, "{what}: {handed_off} of 4000 handed off");
            }
        }
    }
}
