//! Plans (docs/chain.md, "Plans") and the data path running them in each mode: Figure 4's
//! sharing, splitting and concatenating, refusals, and a property test against a naive DAG
//! interpreter.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tern_chain::plan::{self, Plan};
use tern_chain::runtime::{Collect, Collected, Config, Egress, Ingress, Mode, Runtime, VecIngress};
use tern_chain::task::{Cost, Cx, NetworkTask, Verdict};
use tern_chain::tenant::{TaskSpec, Tenant};
use tern_io::{Packet, Pool};

fn example(name: &str) -> Tenant {
    let path = format!("{}/../../examples/chain/{name}", env!("CARGO_MANIFEST_DIR"));
    Tenant::load(std::path::Path::new(&path)).unwrap()
}

fn dummy_area(t: &TaskSpec) -> Result<u64, String> {
    match t {
        TaskSpec::Dummy { luts, .. } => Ok(*luts),
        _ => Ok(10_000),
    }
}

#[test]
fn figure_4_dag_b_rides_dag_a_chain_skipping() {
    let tenants = vec![example("figure4-b.toml"), example("figure4-a.toml")];
    let p = plan::plan(&tenants, &dummy_area, 8, 100_000).unwrap();
    assert_eq!(p.chains.len(), 1);
    let names: Vec<&str> = p.chains[0].slots.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["nt1", "nt2", "nt3", "nt4"]);
    // Tenant b (listed first) skips nt1 and nt3: positions 0 and 2.
    assert_eq!(p.tenants[0].skip, 0b0101);
    assert_eq!(p.tenants[1].skip, 0);
    assert_eq!(p.regions.len(), 1, "one region: b needs none of its own");
    let text = p.describe(&tenants).join("\n");
    assert!(text.contains("tenant b: skips nt1, nt3"), "{text}");
    assert!(text.contains("chain 0: nt1 -> nt2 -> nt3 -> nt4"), "{text}");
}

fn tenant(name: &str, dag: &str, nodes: &[&str], luts: u64) -> Tenant {
    let mut s = format!("tenant = \"{name}\"\ndag = \"{dag}\"\n");
    for n in nodes {
        s += &format!("[nt.{n}]\nkind = \"dummy\"\nluts = {luts}\n");
    }
    Tenant::parse(&s).unwrap()
}

#[test]
fn partial_sharing_extends_a_chain() {
    // x shares `b` with the first tenant's chain and brings `z` of its own.
    let a = tenant("t1", "a -> b -> c", &["a", "b", "c"], 1000);
    let x = tenant("t2", "b -> z", &["b", "z"], 1000);
    let p = plan::plan(&[a, x], &dummy_area, 8, 100_000).unwrap();
    assert_eq!(p.chains.len(), 1);
    let names: Vec<&str> = p.chains[0].slots.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "z"]);
    assert_eq!(p.tenants[0].skip, 0b1000);
    assert_eq!(p.tenants[1].skip, 0b0101);
    assert_eq!(p.tenants[0].positions, [0, 1, 2]);
    assert_eq!(p.tenants[1].positions, [1, 3]);
}

#[test]
fn an_order_the_edges_forbid_is_not_shared() {
    // c -> a is against the chain's a before c: a new chain.
    let a = tenant("t1", "a -> b -> c", &["a", "b", "c"], 1000);
    let y = tenant("t2", "c -> a", &["c", "a"], 1000);
    let p = plan::plan(&[a, y], &dummy_area, 8, 100_000).unwrap();
    assert_eq!(p.chains.len(), 2);
}

#[test]
fn long_chains_split_and_small_ones_concatenate() {
    let long = tenant("long", "a -> b -> c -> d -> e", &["a", "b", "c", "d", "e"], 30_000);
    let small1 = tenant("s1", "p", &["p"], 10_000);
    let small2 = tenant("s2", "q", &["q"], 10_000);
    let p = plan::plan(&[long, small1, small2], &dummy_area, 8, 100_000).unwrap();
    assert_eq!(p.chains[0].segments, [0..3, 3..5]);
    // First fit: the first region (90 K) takes one small chain (10 K), the second (60 K) the
    // other: two regions for four chains' worth of segments.
    assert_eq!(p.regions.len(), 2, "{:?}", p.regions);
    assert_eq!(p.regions[0].segments, [(0, 0), (1, 0)]);
    assert_eq!(p.regions[0].luts, 100_000);
    assert_eq!(p.regions[1].segments, [(0, 1), (2, 0)]);
    assert_eq!(p.regions[1].luts, 70_000);
}

#[test]
fn refusals_name_what_does_not_fit() {
    let big = tenant("big", "a", &["a"], 200_000);
    let e = plan::plan(&[big], &dummy_area, 8, 100_000).unwrap_err();
    assert!(e.contains("task `a` (dummy) needs 200000 LUTs, more than a region's 100000"), "{e}");
    let many: Vec<Tenant> =
        (0..3).map(|i| tenant(&format!("t{i}"), &format!("x{i}"), &[&format!("x{i}")], 60_000)).collect();
    let e = plan::plan(&many, &dummy_area, 2, 100_000).unwrap_err();
    assert_eq!(e, "regions: asked 3, available 2 (of 100000 LUTs each)");
}

/// A test task: payload byte `SLOTS + node` becomes a mix of itself, the node and its DAG
/// predecessors' bytes; the last byte counts tasks run. Equal bytes in the end mean every
/// task ran once, after its predecessors.
#[derive(Debug)]
struct SlotTask {
    node: usize,
    preds: Vec<usize>,
}

const SLOTS: usize = 42 + 8;

impl NetworkTask for SlotTask {
    fn kind(&self) -> &'static str {
        "dummy"
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 0.0, luts: Some(1000), gbps: None, stateful: self.node.is_multiple_of(2), modifies: true }
    }
    fn process(&mut self, p: &mut Packet, _: &mut Cx<'_>) -> Verdict {
        let d = p.data_mut();
        let mut h = u32::from(d[SLOTS + self.node]).wrapping_mul(31).wrapping_add(self.node as u32 + 1);
        for &q in &self.preds {
            h = h.wrapping_mul(0x9e37_79b1).rotate_left(7) ^ u32::from(d[SLOTS + q]);
        }
        d[SLOTS + self.node] = (h ^ h >> 16 ^ h >> 24) as u8 | 1;
        let last = d.len() - 1;
        d[last] = d[last].wrapping_add(1);
        Verdict::Pass
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

fn slot_factory(tenants: &[Tenant]) -> impl FnMut(usize, usize) -> Result<Box<dyn NetworkTask>, String> + '_ {
    move |t, n| {
        let preds = tenants[t].dag.edges().into_iter().filter(|e| e.1 == n).map(|e| e.0).collect();
        Ok(Box::new(SlotTask { node: n, preds }) as Box<dyn NetworkTask>)
    }
}

fn frame(pool: &Pool, tenant: usize, id: u32) -> Packet {
    let mut payload = vec![0u8; 64];
    payload[..4].copy_from_slice(&id.to_be_bytes());
    let mut f = Vec::new();
    tern_wire::frame::build_udp4(
        &mut f,
        [2; 6],
        [4; 6],
        [10, 9, 0, 1],
        [10, 0, tenant as u8, 7],
        1000 + id as u16,
        80,
        64,
        &payload,
    );
    let mut p = pool.packet();
    p.extend_from_slice(&f).unwrap();
    p
}

fn with_ingress(mut t: Tenant, k: usize) -> Tenant {
    t.ingress.pattern.dst = Some(format!("10.0.{k}.0/24").parse().unwrap());
    t
}

/// Runs packets through a runtime; returns what left (descriptor, bytes) by packet id.
fn run(plan: Plan, tenants: &[Tenant], mode: Mode, cores: usize, packets: &[(usize, u32)]) -> Vec<(u16, Vec<u8>)> {
    let pool = Pool::new(4096, 2048);
    let cfg = Config { mode, cores, credits: 2, batch: 4, ..Config::default() };
    let rt = Runtime::new(plan, tenants.to_vec(), cfg, &mut slot_factory(tenants)).unwrap();
    let stopper = rt.stopper();
    let got: Collected = Arc::new(Mutex::new(Vec::new()));
    let ingress: Vec<Box<dyn Ingress>> = if mode == Mode::Rtc {
        // Flows sharded by packet id.
        (0..cores)
            .map(|c| {
                let mine =
                    packets.iter().filter(|(_, id)| *id as usize % cores == c).map(|&(t, id)| frame(&pool, t, id));
                Box::new(VecIngress::new(mine.collect::<Vec<_>>())) as Box<dyn Ingress>
            })
            .collect()
    } else {
        vec![Box::new(VecIngress::new(packets.iter().map(|&(t, id)| frame(&pool, t, id)).collect::<Vec<_>>()))]
    };
    let egress: Vec<Box<dyn Egress>> =
        (0..cores).map(|_| Box::new(Collect::new(&pool, &got, packets.len(), &stopper)) as Box<dyn Egress>).collect();
    // A backstop: a bug that loses packets fails the count below instead of hanging.
    let s2 = stopper.clone();
    let guard = std::thread::spawn(move || {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(5));
        }
        s2.stop();
    });
    drop(guard);
    let stats = rt.run(&pool, ingress, egress).unwrap();
    let mut out = got.lock().unwrap().clone();
    assert_eq!(out.len(), packets.len(), "every packet leaves once ({mode:?}): {stats:?}");
    out.sort_by_key(|(_, b)| u32::from_be_bytes([b[42], b[43], b[44], b[45]]));
    out.into_iter().map(|(d, b)| (d.tenant, b)).collect()
}

/// The naive interpreter: each packet through its tenant's DAG in topological order, with
/// fresh tasks of its own.
fn interpret(tenants: &[Tenant], packets: &[(usize, u32)]) -> Vec<Vec<u8>> {
    let pool = Pool::new(16, 2048);
    let mut f = slot_factory(tenants);
    let mut tasks: Vec<Vec<Box<dyn NetworkTask>>> =
        tenants.iter().enumerate().map(|(t, ten)| (0..ten.tasks.len()).map(|n| f(t, n).unwrap()).collect()).collect();
    let mut out = Vec::new();
    for &(t, id) in packets {
        let mut p = frame(&pool, t, id);
        let mut emitted = Vec::new();
        let mut cx = Cx { now: Instant::now(), pool: &pool, emitted: &mut emitted, paced: false, port: 0 };
        for &n in &tenants[t].order {
            assert_eq!(tasks[t][n].process(&mut p, &mut cx), Verdict::Pass);
        }
        out.push(p.data().to_vec());
    }
    out
}

#[test]
fn figure_4_runs_in_every_mode() {
    let tenants = vec![with_ingress(example("figure4-a.toml"), 0), with_ingress(example("figure4-b.toml"), 1)];
    let packets: Vec<(usize, u32)> = (0..200).map(|i| ((i % 3 == 0) as usize, i)).collect();
    let want = interpret(&tenants, &packets);
    for mode in [Mode::Snic, Mode::Panic, Mode::Rtc] {
        for cores in [1, 2] {
            let p = plan::plan(&tenants, &dummy_area, 8, 100_000).unwrap();
            let got = run(p, &tenants, mode, cores, &packets);
            for (i, (t, bytes)) in got.iter().enumerate() {
                assert_eq!(usize::from(*t), packets[i].0);
                assert_eq!(bytes, &want[i], "{mode:?} on {cores} cores, packet {i}");
                let ran = bytes[bytes.len() - 1];
                assert_eq!(usize::from(ran), tenants[packets[i].0].tasks.len());
            }
        }
    }
}

/// Random DAGs over shared names: (nodes, edges) with edges going forward in a random order.
fn dag_strategy() -> impl Strategy<Value = (Vec<usize>, Vec<(usize, usize)>)> {
    (proptest::sample::subsequence((0..8).collect::<Vec<usize>>(), 1..=6), any::<u64>()).prop_flat_map(
        |(nodes, seed)| {
            let n = nodes.len();
            let mut order = nodes.clone();
            // A seeded shuffle: the DAG's topological order.
            let mut x = seed | 1;
            for i in (1..n).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let pairs: Vec<(usize, usize)> = (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j))).collect();
            let m = pairs.len();
            proptest::sample::subsequence(pairs, 0..=m)
                .prop_map(move |es| (order.clone(), es.iter().map(|&(i, j)| (order[i], order[j])).collect()))
        },
    )
}

fn tenant_of(k: usize, nodes: &[usize], edges: &[(usize, usize)], luts: u64) -> Tenant {
    let mut stmts: Vec<String> = edges.iter().map(|(a, b)| format!("n{a} -> n{b}")).collect();
    stmts.extend(nodes.iter().map(|a| format!("n{a}")));
    let names: Vec<String> = nodes.iter().map(|a| format!("n{a}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    with_ingress(tenant(&format!("t{k}"), &stmts.join("; "), &refs, luts), k)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Every packet runs exactly its DAG's tasks, each after its predecessors, and leaves with
    /// the bytes the naive interpreter gives, whatever the sharing, splitting and mode.
    #[test]
    fn plans_agree_with_the_naive_interpreter(
        dags in proptest::collection::vec(dag_strategy(), 1..=3),
        region_kluts in 1u64..=8,
        mode in prop_oneof![Just(Mode::Snic), Just(Mode::Panic), Just(Mode::Rtc)],
        cores in 1usize..=2,
        picks in proptest::collection::vec(any::<u8>(), 1..60),
    ) {
        let tenants: Vec<Tenant> = dags.iter().enumerate().map(|(k, (n, e))| tenant_of(k, n, e, 1000)).collect();
        let p = plan::plan(&tenants, &dummy_area, 1000, region_kluts * 1000).unwrap();
        // Each tenant's positions are distinct, in its chain, and not skipped.
        for (t, pl) in p.tenants.iter().enumerate() {
            let len = p.chains[pl.chain].slots.len();
            for (n, &pos) in pl.positions.iter().enumerate() {
                prop_assert!(pos < len && pl.skip >> pos & 1 == 0);
                prop_assert_eq!(&p.chains[pl.chain].slots[pos].name, &tenants[t].dag.nodes()[n]);
            }
            prop_assert_eq!(pl.skip.count_ones() as usize + pl.positions.len(), len);
            for (a, b) in tenants[t].dag.edges() {
                prop_assert!(pl.positions[a] < pl.positions[b]);
            }
        }
        let packets: Vec<(usize, u32)> = picks.iter().enumerate().map(|(i, &x)| (usize::from(x) % tenants.len(), i as u32)).collect();
        let want = interpret(&tenants, &packets);
        let got = run(p, &tenants, mode, cores, &packets);
        for (i, (t, bytes)) in got.iter().enumerate() {
            prop_assert_eq!(usize::from(*t), packets[i].0);
            prop_assert_eq!(bytes, &want[i]);
        }
    }
}

/// Panic's buffer between tasks stays within the regions' credits behind a slow second task
/// (an early version queued every packet the fast first task passed).
#[test]
fn panic_buffer_is_bounded_behind_a_slow_task() {
    let text = "tenant = \"slow\"\ndag = \"fast -> slow\"\n[nt.fast]\nkind = \"dummy\"\n[nt.slow]\nkind = \"dummy\"\nns_per_packet = 20000\n";
    let tenants = vec![Tenant::parse(text).unwrap()];
    let p = plan::plan(&tenants, &dummy_area, 8, 100_000).unwrap();
    let pool = Pool::new(4096, 2048);
    let cfg = Config { mode: Mode::Panic, cores: 2, instances: 1, ..Config::default() };
    let mut keys = tern_chain::task::Keys::default();
    let mut factory = |t: usize, n: usize| tern_chain::task::build(&tenants[t].tasks[n], &mut keys);
    let rt = Runtime::new(p, tenants.clone(), cfg, &mut factory).unwrap();
    let stopper = rt.stopper();
    let got: Collected = Arc::new(Mutex::new(Vec::new()));
    let n = 1500;
    let ingress: Vec<Box<dyn Ingress>> =
        vec![Box::new(VecIngress::new((0..n).map(|i| frame(&pool, 0, i)).collect::<Vec<_>>()))];
    let egress: Vec<Box<dyn Egress>> =
        (0..2).map(|_| Box::new(Collect::new(&pool, &got, n as usize, &stopper)) as Box<dyn Egress>).collect();
    let stats = rt.run(&pool, ingress, egress).unwrap();
    assert_eq!(got.lock().unwrap().len(), n as usize);
    // Two regions of 8 credits: no new packet enters while 16 wait, and the 16 in the regions
    // can come back on top (without the bound, 1392 waited here).
    assert!(stats.buffer_peak <= 32, "peak {}", stats.buffer_peak);
    assert!(stats.buffer_peak > 0);
}

/// A NAT's replies can reach the instance that translated their flow, in every mode on two
/// cores: each instance hands out its own slice of the external ports (both slices used), and
/// the classifier steers a reply by its port to that slice's instance (flow hashing alone
/// would send about half elsewhere, to find no mapping). The round trip through a running
/// server is `tern chain serve`'s CLI test.
#[test]
fn nat_replies_find_their_instance_in_every_mode() {
    let text = "tenant = \"lan\"\ndag = \"nat\"\n[nt.nat]\nkind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20999\"\n";
    let tenants = vec![Tenant::parse(text).unwrap()];
    for mode in [Mode::Snic, Mode::Panic, Mode::Rtc] {
        let p = plan::plan(&tenants, &dummy_area, 8, 100_000).unwrap();
        let pool = Pool::new(4096, 2048);
        let cfg = Config { mode, cores: 2, ..Config::default() };
        let mut keys = tern_chain::task::Keys::default();
        let mut factory = |t: usize, n: usize| tern_chain::task::build(&tenants[t].tasks[n], &mut keys);
        let rt = Runtime::new(p, tenants.clone(), cfg, &mut factory).unwrap();
        let mut classify = rt.classify();
        let stopper = rt.stopper();
        let got: Collected = Arc::new(Mutex::new(Vec::new()));
        let flows = 200u16;
        let out_frame = |i: u16| {
            let mut f = Vec::new();
            tern_wire::frame::build_udp4(
                &mut f,
                [2; 6],
                [4; 6],
                [10, 0, (i >> 8) as u8, i as u8],
                [8, 8, 8, 8],
                4000 + i,
                53,
                64,
                b"q",
            );
            f
        };
        let shard = |f: &[u8], classify: &mut tern_chain::runtime::Classify| classify.tenant(f).unwrap().1 as usize % 2;
        let mut per_core: Vec<Vec<Packet>> = vec![Vec::new(), Vec::new()];
        for i in 0..flows {
            let f = out_frame(i);
            let c = if mode == Mode::Rtc { shard(&f, &mut classify) } else { 0 };
            let mut pk = pool.packet();
            pk.extend_from_slice(&f).unwrap();
            per_core[c].push(pk);
        }
        let ingress: Vec<Box<dyn Ingress>> =
            per_core.into_iter().map(|v| Box::new(VecIngress::new(v)) as Box<dyn Ingress>).collect();
        let egress: Vec<Box<dyn Egress>> =
            (0..2).map(|_| Box::new(Collect::new(&pool, &got, flows as usize, &stopper)) as Box<dyn Egress>).collect();
        let first = rt
            .run(&pool, if mode == Mode::Rtc { ingress } else { ingress.into_iter().take(1).collect() }, egress)
            .unwrap();
        assert_eq!(first.tenants[0].packets_out, u64::from(flows), "{mode:?}: {first:?}");
        // The translated ports, by flow, are spread over both instances' slices.
        let outs = got.lock().unwrap().clone();
        let ports: std::collections::HashSet<u16> =
            outs.iter().map(|(_, b)| u16::from_be_bytes([b[34], b[35]])).collect();
        assert_eq!(ports.len(), flows as usize);
        assert!(
            ports.iter().any(|&p| p < 20500) && ports.iter().any(|&p| p >= 20500),
            "{mode:?}: one instance took every flow"
        );
        // Steering: each reply's instance is the one whose slice holds its port.
        for &p in &ports {
            let mut r = Vec::new();
            tern_wire::frame::build_udp4(&mut r, [4; 6], [2; 6], [8, 8, 8, 8], [192, 0, 2, 1], 53, p, 64, b"a");
            let (_, k) = classify.tenant(&r).unwrap();
            assert_eq!(k as usize, usize::from(p >= 20500), "{mode:?}: port {p}");
        }
    }
}

/// A task that writes its generation into the packet (byte SLOTS), to tell old instances from
/// relaunched ones.
#[derive(Debug)]
struct Stamp(u8);

impl NetworkTask for Stamp {
    fn kind(&self) -> &'static str {
        "dummy"
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 0.0, luts: Some(1000), gbps: None, stateful: false, modifies: true }
    }
    fn process(&mut self, p: &mut Packet, _: &mut Cx<'_>) -> Verdict {
        p.data_mut()[SLOTS] = self.0;
        Verdict::Pass
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Records each packet's tenant, stamp and when it left; stops the runtime at `expect`.
struct Times(Arc<Mutex<Vec<(u16, u8, Instant)>>>, Pool, usize, tern_chain::runtime::Stopper);

impl Egress for Times {
    fn send(&mut self, _: Instant, items: &mut Vec<tern_chain::runtime::Item>) {
        let now = Instant::now();
        let mut v = self.0.lock().unwrap();
        for i in items.drain(..) {
            v.push((i.desc.tenant, i.packet.data()[SLOTS], now));
            self.1.put(i.packet);
        }
        if v.len() >= self.2 {
            self.3.stop();
        }
    }
}

/// Launching new instances into a running region: they go in at a batch boundary, the region
/// stays out of service for the PR time while its packets wait (none lost), and the other
/// region on the same core goes on meanwhile.
#[test]
fn a_launch_swaps_instances_in_and_darkens_only_its_region() {
    let a = tenant("x", "s", &["s"], 1000);
    let mut b = tenant("y", "t", &["t"], 1000);
    b.ingress.pattern.dst = Some("10.0.1.0/24".parse().unwrap());
    let mut a = a;
    a.ingress.pattern.dst = Some("10.0.0.0/24".parse().unwrap());
    let tenants = vec![a, b];
    let p =
        plan::plan_with(&tenants, &dummy_area, 8, 100_000, plan::Options { share: true, concatenate: false }).unwrap();
    assert_eq!(p.regions.len(), 2);
    let xr = p.tenants[0].chain;
    let ri = p.regions.iter().position(|r| r.segments.contains(&(xr, 0))).unwrap();
    let pool = Pool::new(8192, 2048);
    let cfg = Config { mode: Mode::Snic, cores: 1, instances: 1, ..Config::default() };
    let mut gen1 = |_: usize, _: usize| Ok(Box::new(Stamp(1)) as Box<dyn NetworkTask>);
    let rt = Runtime::new(p.clone(), tenants.clone(), cfg, &mut gen1).unwrap();
    let (launcher, stopper) = (rt.launcher(), rt.stopper());
    let n = 4000usize;
    let frames: Vec<Vec<u8>> = (0..n as u32)
        .map(|i| {
            let mut f = Vec::new();
            let t = (i % 2) as u8;
            tern_wire::frame::build_udp4(&mut f, [2; 6], [4; 6], [10, 9, 0, 1], [10, 0, t, 7], 1000, 80, 64, &[0; 64]);
            f
        })
        .collect();
    // 10,000 packets a second: 0.4 s of traffic, n packets in all.
    struct Limited(tern_chain::bench::Gen, usize);
    impl Ingress for Limited {
        fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<tern_chain::runtime::Arrival>) {
            let before = out.len();
            self.0.recv(now, max.min(self.1), out);
            self.1 -= out.len() - before;
        }
    }
    let traffic = Limited(tern_chain::bench::Gen::new(&pool, frames, Some(10_000.0)), n);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let egress: Vec<Box<dyn Egress>> = vec![Box::new(Times(seen.clone(), pool.clone(), n, stopper.clone()))];
    let pr = Duration::from_millis(100);
    let asked = Arc::new(Mutex::new(None));
    let asked2 = asked.clone();
    let ts = tenants.clone();
    let plan2 = p.clone();
    let launching = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(120));
        let mut gen2 = |_: usize, _: usize| Ok(Box::new(Stamp(2)) as Box<dyn NetworkTask>);
        let segs = tern_chain::runtime::build_region(&plan2, ri, (0, 1), ts.len(), &mut gen2).unwrap();
        *asked2.lock().unwrap() = Some(Instant::now());
        launcher.launch(launcher.region(ri, 0).unwrap(), tern_chain::runtime::Launch { segments: segs, pr }).unwrap();
        launcher
    });
    // The egress stops the runtime at n packets.
    let _ = rt.run(&pool, vec![Box::new(traffic)], egress).unwrap();
    let launcher = launching.join().unwrap();
    let t0 = asked.lock().unwrap().unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), n, "no packet lost");
    assert_eq!(launcher.launches()[launcher.region(ri, 0).unwrap()], 1);
    // Tenant x's packets: old instances before, new ones after, none in between while dark.
    let x: Vec<&(u16, u8, Instant)> = seen.iter().filter(|s| s.0 == 0).collect();
    let first_new = x.iter().position(|s| s.1 == 2).expect("the new instances ran");
    assert!(x[..first_new].iter().all(|s| s.1 == 1) && x[first_new..].iter().all(|s| s.1 == 2));
    let (last_old, first) = (x[first_new - 1].2, x[first_new].2);
    assert!(
        first.duration_since(last_old) >= pr - Duration::from_millis(5),
        "dark {:?}",
        first.duration_since(last_old)
    );
    assert!(first.duration_since(t0) >= pr - Duration::from_millis(5));
    // Tenant y's region, on the same core, went on while x's was dark.
    let y_meanwhile = seen.iter().filter(|s| s.0 == 1 && s.2 > last_old && s.2 < first).count();
    assert!(y_meanwhile > 100, "{y_meanwhile}");
}

fn parallel_tenant(name: &str, dag: &str, nodes: &[(&str, &str)], dst: &str) -> Tenant {
    let mut s = format!("tenant = \"{name}\"\nparallel = true\ndag = \"{dag}\"\n[ingress]\ndst = \"{dst}\"\n");
    for (n, extra) in nodes {
        s += &format!("[nt.{n}]\nkind = \"dummy\"\n{extra}\n");
    }
    Tenant::parse(&s).unwrap()
}

#[test]
fn a_parallel_tenant_gets_its_branches_in_their_own_segments() {
    // Figure 4's DAG-a as S2: NT1 -> NT2 beside NT3, then NT4.
    let a = parallel_tenant(
        "a",
        "nt1 -> nt2 -> nt4; nt3 -> nt4",
        &[("nt1", ""), ("nt2", ""), ("nt3", ""), ("nt4", "")],
        "10.0.0.0/24",
    );
    let b = tenant("b", "nt2 -> nt4", &["nt2", "nt4"], 1000);
    let p = plan::plan(&[a.clone(), b], &dummy_area, 8, 100_000).unwrap();
    assert_eq!(p.chains.len(), 2, "a parallel tenant's chain is its own");
    let c = &p.chains[p.tenants[0].chain];
    assert!(c.exclusive);
    let names: Vec<&str> = c.slots.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["nt1", "nt2", "nt3", "nt4"]);
    assert_eq!(c.segments, [0..2, 2..3, 3..4]);
    let f = p.tenants[0].fork.as_ref().unwrap();
    assert_eq!(f.branches, [0..1, 1..2]);
    assert_eq!(f.skips, [0b1100, 0b1011]);
    let text = p.describe(&[a]).join("\n");
    assert!(text.contains("side by side (a copy each, joined after): nt1 -> nt2 | nt3"), "{text}");
    // Refusals: no fork; a later branch that changes bytes.
    let e = Tenant::parse(
        "tenant = \"x\"\nparallel = true\ndag = \"a -> b\"\n[nt.a]\nkind = \"dummy\"\n[nt.b]\nkind = \"dummy\"\n",
    )
    .unwrap_err();
    assert!(e.contains("the DAG has no fork"), "{e}");
    let e = Tenant::parse(
        "tenant = \"x\"\nparallel = true\ndag = \"a -> {b, n}\"\n[nt.a]\nkind = \"dummy\"\n[nt.b]\nkind = \"dummy\"\n[nt.n]\nkind = \"nat\"\nexternal = \"192.0.2.1\"\n",
    )
    .unwrap_err();
    assert!(e.contains("branch 2 has `n` (nat), which changes packets"), "{e}");
    let e = Tenant::parse("tenant = \"x\"\nparallel = true\ndag = \"{a, b} -> c; a -> d\"\n[nt.a]\nkind = \"dummy\"\n[nt.b]\nkind = \"dummy\"\n[nt.c]\nkind = \"dummy\"\n[nt.d]\nkind = \"dummy\"\n").unwrap_err();
    assert!(e.contains("does not end at the join") || e.contains("ends elsewhere"), "{e}");
}

/// Counts its packets; drops those whose id (the payload's first byte) is a multiple of
/// `drop_every` (0: none); the first branch's task also marks the packet.
#[derive(Debug)]
struct Branch {
    seen: Arc<std::sync::atomic::AtomicU64>,
    drop_every: u8,
    mark: Option<u8>,
}

impl NetworkTask for Branch {
    // A drop needs a kind that names its reason (debug builds check): an engine's stage.
    fn kind(&self) -> &'static str {
        "stage"
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 0.0, luts: Some(1000), gbps: None, stateful: false, modifies: self.mark.is_some() }
    }
    fn process(&mut self, p: &mut Packet, _: &mut Cx<'_>) -> Verdict {
        self.seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = p.data()[42];
        if self.drop_every > 0 && id.is_multiple_of(self.drop_every) {
            return Verdict::Drop("stage_dropped");
        }
        if let Some(m) = self.mark {
            let last = p.len() - 1;
            p.data_mut()[last] = m;
        }
        Verdict::Pass
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// A parallel tenant in `snic` on two cores: each packet is copied into both branches, which
/// run in their own regions; the first branch's bytes go on to the join's task; a drop in the
/// second branch drops the packet, by its reason; each task ran once per packet.
#[test]
fn branches_run_side_by_side_and_join() {
    let t = parallel_tenant("p", "{a, b} -> z", &[("a", ""), ("b", ""), ("z", "")], "10.0.0.0/24");
    let tenants = vec![t];
    let p = plan::plan(&tenants, &dummy_area, 8, 100_000).unwrap();
    let counts: Vec<Arc<std::sync::atomic::AtomicU64>> =
        (0..3).map(|_| Arc::new(std::sync::atomic::AtomicU64::new(0))).collect();
    let c2 = counts.clone();
    let mut factory = move |_: usize, n: usize| {
        // Nodes in order written: a (0), b (1), z (2).
        let (drop_every, mark) = match n {
            0 => (0, Some(0xaa)),
            1 => (5, None),
            _ => (0, None),
        };
        Ok(Box::new(Branch { seen: c2[n].clone(), drop_every, mark }) as Box<dyn NetworkTask>)
    };
    let pool = Pool::new(4096, 2048);
    let cfg = Config { mode: Mode::Snic, cores: 2, instances: 1, ..Config::default() };
    let rt = Runtime::new(p, tenants.clone(), cfg, &mut factory).unwrap();
    let stopper = rt.stopper();
    let got: Collected = Arc::new(Mutex::new(Vec::new()));
    let n = 200u32;
    // Packet i has id i (the payload's first byte); ids divisible by 5 die in branch b.
    let kept = (0..n).filter(|i| (i % 256) % 5 != 0).count();
    let ingress: Vec<Box<dyn Ingress>> =
        vec![Box::new(VecIngress::new((0..n).map(|i| frame(&pool, 0, i << 24)).collect::<Vec<_>>()))];
    let egress: Vec<Box<dyn Egress>> =
        (0..2).map(|_| Box::new(Collect::new(&pool, &got, kept, &stopper)) as Box<dyn Egress>).collect();
    let stats = rt.run(&pool, ingress, egress).unwrap();
    let out = got.lock().unwrap();
    assert_eq!(out.len(), kept, "{stats:?}");
    assert!(out.iter().all(|(_, b)| b[b.len() - 1] == 0xaa), "the first branch's bytes");
    assert_eq!(stats.tenants[0].drops.get("stage_dropped").copied(), Some((n as usize - kept) as u64));
    let c: Vec<u64> = counts.iter().map(|c| c.load(std::sync::atomic::Ordering::Relaxed)).collect();
    assert_eq!(c, [u64::from(n), u64::from(n), kept as u64], "each task once per packet (z only after the join)");
    // The branches ran in regions of their own.
    let region_of = |name: &str| stats.wrappers.iter().find(|w| w.name == name).and_then(|w| w.region);
    assert_ne!(region_of("a"), region_of("b"));
}

/// A branch slower than the join's patience: every packet is given up on (`sync_timeout`), its
/// credit comes back, and the late copies are counted, not taken for new packets.
#[test]
fn a_join_gives_up_on_a_slow_branch() {
    let t = parallel_tenant("p", "{a, slow}", &[("a", ""), ("slow", "ns_per_packet = 30000000")], "10.0.0.0/24");
    let tenants = vec![t];
    let p = plan::plan(&tenants, &dummy_area, 8, 100_000).unwrap();
    let mut keys = tern_chain::task::Keys::default();
    let mut factory = |t: usize, n: usize| tern_chain::task::build(&tenants[t].tasks[n], &mut keys);
    let pool = Pool::new(256, 2048);
    let cfg = Config { mode: Mode::Snic, cores: 2, instances: 1, ..Config::default() };
    let rt = Runtime::new(p, tenants.clone(), cfg, &mut factory).unwrap();
    let stopper = rt.stopper();
    let got: Collected = Arc::new(Mutex::new(Vec::new()));
    let ingress: Vec<Box<dyn Ingress>> =
        vec![Box::new(VecIngress::new((0..3).map(|i| frame(&pool, 0, i)).collect::<Vec<_>>()))];
    let egress: Vec<Box<dyn Egress>> =
        (0..2).map(|_| Box::new(Collect::new(&pool, &got, 1, &stopper)) as Box<dyn Egress>).collect();
    let s2 = stopper.clone();
    let monitor = rt.monitor();
    let watch = std::thread::spawn(move || {
        // Three copies of 30 ms each in the slow branch: give it all 150 ms, then stop.
        std::thread::sleep(Duration::from_millis(150));
        s2.stop();
        monitor
    });
    let stats = rt.run(&pool, ingress, egress).unwrap();
    let _ = watch.join();
    assert!(got.lock().unwrap().is_empty());
    assert_eq!(stats.tenants[0].drops.get("sync_timeout").copied(), Some(3), "{stats:?}");
    assert!(stats.tenants[0].drops.get("sync_late").copied().unwrap_or(0) >= 1, "{stats:?}");
}

/// A random fork and join: (prefix length, branch lengths, suffix length).
fn fork_strategy() -> impl Strategy<Value = (usize, Vec<usize>, usize)> {
    (0usize..=2, proptest::collection::vec(1usize..=2, 2..=3), 0usize..=2)
}

/// The tenant of a fork shape: nodes n0.. in order prefix, branches, suffix.
fn fork_tenant(prefix: usize, branches: &[usize], suffix: usize) -> (Tenant, Vec<usize>) {
    let mut next = 0;
    let mut take = |n: usize| {
        let v: Vec<usize> = (next..next + n).collect();
        next += n;
        v
    };
    let p = take(prefix);
    let bs: Vec<Vec<usize>> = branches.iter().map(|&n| take(n)).collect();
    let s = take(suffix);
    let mut stmts = Vec::new();
    let chain = |v: &[usize]| v.iter().map(|i| format!("n{i}")).collect::<Vec<_>>().join(" -> ");
    for b in &bs {
        let mut path: Vec<usize> = p.clone();
        path.extend(b);
        path.extend(&s);
        stmts.push(chain(&path));
    }
    let mut text = format!("tenant = \"f\"\nparallel = true\ndag = \"{}\"\n", stmts.join("; "));
    for i in 0..next {
        text += &format!("[nt.n{i}]\nkind = \"dummy\"\n");
    }
    // Nodes of the later branches (which must not change bytes), as DAG indices (nodes are
    // numbered as they first appear in the text, not by their names).
    let t = Tenant::parse(&text).unwrap();
    let later: Vec<usize> = bs.iter().skip(1).flatten().map(|i| t.dag.index(&format!("n{i}")).unwrap()).collect();
    (t, later)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Parallel tenants of any fork and join shape, in `snic` on two cores: every packet leaves
    /// once with the bytes the naive interpreter gives (prefix, then the branches' tasks, then
    /// the suffix, in topological order), and every task of the later branches ran once a
    /// packet.
    #[test]
    fn forks_agree_with_the_naive_interpreter((prefix, branches, suffix) in fork_strategy(), n in 1u32..40) {
        let (t, later) = fork_tenant(prefix, &branches, suffix);
        let tenants = vec![t];
        let p = plan::plan(&tenants, &dummy_area, 64, 100_000).unwrap();
        prop_assert!(p.tenants[0].fork.is_some());
        let counts: Vec<Arc<std::sync::atomic::AtomicU64>> =
            (0..tenants[0].tasks.len()).map(|_| Arc::new(std::sync::atomic::AtomicU64::new(0))).collect();
        let make = |counts: Vec<Arc<std::sync::atomic::AtomicU64>>, later: Vec<usize>, tenants: Vec<Tenant>| {
            move |t: usize, node: usize| {
                if later.contains(&node) {
                    Ok(Box::new(Branch { seen: counts[node].clone(), drop_every: 0, mark: None }) as Box<dyn NetworkTask>)
                } else {
                    let preds = tenants[t].dag.edges().into_iter().filter(|e| e.1 == node).map(|e| e.0).collect();
                    Ok(Box::new(SlotTask { node, preds }) as Box<dyn NetworkTask>)
                }
            }
        };
        let mut factory = make(counts.clone(), later.clone(), tenants.clone());
        let pool = Pool::new(4096, 2048);
        let cfg = Config { mode: Mode::Snic, cores: 2, instances: 1, credits: 2, ..Config::default() };
        let rt = Runtime::new(p, tenants.clone(), cfg, &mut factory).unwrap();
        let stopper = rt.stopper();
        let got: Collected = Arc::new(Mutex::new(Vec::new()));
        let ingress: Vec<Box<dyn Ingress>> = vec![Box::new(VecIngress::new((0..n).map(|i| frame(&pool, 0, i)).collect::<Vec<_>>()))];
        let egress: Vec<Box<dyn Egress>> =
            (0..2).map(|_| Box::new(Collect::new(&pool, &got, n as usize, &stopper)) as Box<dyn Egress>).collect();
        let s2 = stopper.clone();
        let guard = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            s2.stop();
        });
        drop(guard);
        rt.run(&pool, ingress, egress).unwrap();
        let mut out = got.lock().unwrap().clone();
        prop_assert_eq!(out.len(), n as usize);
        out.sort_by_key(|(_, b)| u32::from_be_bytes([b[42], b[43], b[44], b[45]]));
        // The interpreter, with tasks of its own.
        let icounts: Vec<Arc<std::sync::atomic::AtomicU64>> =
            (0..tenants[0].tasks.len()).map(|_| Arc::new(std::sync::atomic::AtomicU64::new(0))).collect();
        let f2 = make(icounts, later.clone(), tenants.clone());
        let mut tasks: Vec<Box<dyn NetworkTask>> = (0..tenants[0].tasks.len()).map(|i| f2(0, i).unwrap()).collect();
        for (i, (_, bytes)) in out.iter().enumerate() {
            let mut pk = frame(&pool, 0, i as u32);
            let mut emitted = Vec::new();
            let mut cx = Cx { now: Instant::now(), pool: &pool, emitted: &mut emitted, paced: false, port: 0 };
            for &node in &tenants[0].order {
                prop_assert_eq!(tasks[node].process(&mut pk, &mut cx), Verdict::Pass);
            }
            prop_assert_eq!(bytes.as_slice(), pk.data());
        }
        for &node in &later {
            prop_assert_eq!(counts[node].load(std::sync::atomic::Ordering::Relaxed), u64::from(n));
        }
    }
}
