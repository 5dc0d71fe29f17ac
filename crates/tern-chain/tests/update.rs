//! Hitless per-tenant updates (docs/chain.md, "Updates") on the running data path: tenant A's
//! DAG is replaced 20 times while A and B stream through a chain they share, cut over three
//! regions on two cores. Every packet of A runs exactly one generation's tasks (each task
//! stamps its generation into the packet), and B loses nothing and sees its packets in order.
//! A's first task counts the packets it saw, a state each generation takes from the one before
//! and shares with it while the old generation's packets drain: the counts A's packets carry
//! run 0, 1, 2, ... across every update, none twice.
//! No timing is asserted: the stream runs until the updates are done, however long they take.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{area, udp};
use tern_chain::plan;
use tern_chain::runtime::{Arrival, Config, Egress, Ingress, Item, Mode, Runtime};
use tern_chain::task::{Cost, Cx, NetworkTask, Verdict};
use tern_chain::tenant::Tenant;
use tern_io::{Packet, Pool};

/// Where the stamps start in a frame: after Ethernet, IPv4, UDP and an 8-byte sequence number.
const STAMPS: usize = 14 + 20 + 8 + 8;
/// A stamp no task wrote.
const UNSTAMPED: u8 = 0xee;

/// Where the first task writes its count of the packets it saw (8 bytes).
const COUNT: usize = STAMPS + 3;

/// A test task: writes its generation at its own byte (by its name: `s1` the first), and
/// takes `spin` a packet; the first also writes how many packets it saw before (its state).
#[derive(Debug)]
struct Stamp {
    generation: u8,
    at: usize,
    spin: Duration,
    seen: Count,
}

/// The packets a task saw: its state, passed on to its next generation.
#[derive(Debug, Default)]
struct Count(u64);

impl NetworkTask for Stamp {
    // A drop needs a kind that names its reason (debug builds check): an engine's stage.
    fn kind(&self) -> &'static str {
        "stage"
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 0.0, luts: None, gbps: None, stateful: false, modifies: true }
    }
    fn process(&mut self, packet: &mut Packet, _: &mut Cx<'_>) -> Verdict {
        tern_chain::runtime::spin_for(self.spin);
        if self.at == 0
            && let Some(count) = packet.data_mut().get_mut(COUNT..COUNT + 8)
        {
            count.copy_from_slice(&self.seen.0.to_le_bytes());
            self.seen.0 += 1;
        }
        match packet.data_mut().get_mut(STAMPS + self.at) {
            Some(b) => {
                *b = self.generation;
                Verdict::Pass
            }
            None => Verdict::Drop("stage_dropped"),
        }
    }
    fn state(&mut self) -> Option<&mut dyn std::any::Any> {
        Some(&mut self.seen)
    }
    fn swap_state(&mut self, other: &mut dyn NetworkTask) -> bool {
        match other.state().and_then(|s| s.downcast_mut::<Count>()) {
            Some(o) => {
                std::mem::swap(&mut self.seen, o);
                true
            }
            None => false,
        }
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// A tenant of `dag` over tasks named `s1`..`s3` (each as large as half a region, so each
/// is a segment of its own), receiving for 10.0.`k`.0/24.
fn tenant(name: &str, k: u8, dag: &str) -> Tenant {
    let mut text = format!("tenant = \"{name}\"\ndag = \"{dag}\"\n[ingress]\ndst = \"10.0.{k}.0/24\"\n");
    for n in ["s1", "s2", "s3"] {
        if dag.contains(n) {
            text += &format!("[nt.{n}]\nkind = \"dummy\"\nluts = 60000\n");
        }
    }
    Tenant::parse(&text).unwrap()
}

/// Tenant A's DAG in generation `g`: every other one skips `s2`.
fn dag_a(g: u64) -> &'static str {
    if g % 2 == 1 { "s1 -> s3" } else { "s1 -> s2 -> s3" }
}

/// Tenant `t`'s task for DAG node `node` in `generation`. B's last task is slow, so A's
/// packets queue in the chain's regions: at each update many are in flight on the generation
/// before, while new ones enter on the new one.
fn stamp_of(tenants: &[Tenant], t: usize, node: usize, generation: u8) -> Box<dyn NetworkTask> {
    let name = &tenants[t].dag.nodes()[node];
    let at = usize::from(name.as_bytes()[1] - b'1');
    let spin = if t == 1 && at == 2 { Duration::from_micros(50) } else { Duration::ZERO };
    Box::new(Stamp { generation, at, spin, seen: Count::default() })
}

/// Streams packets of A and B (alternating, each with its own sequence numbers) as fast as the
/// scheduler takes them, until `stop`.
struct Stream {
    pool: Pool,
    seq: [u64; 2],
    stop: Arc<AtomicBool>,
    sent: Arc<[AtomicU64; 2]>,
}

impl Ingress for Stream {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        if self.stop.load(Ordering::Acquire) {
            return;
        }
        for i in 0..max {
            let t = (self.seq[0] + self.seq[1]) as usize % 2;
            let _ = i;
            let mut payload = self.seq[t].to_le_bytes().to_vec();
            payload.extend_from_slice(&[UNSTAMPED; 3]);
            payload.extend_from_slice(&[0; 8]);
            let k = t as u8 + 1;
            let packet = udp(&self.pool, [10, 1, 0, 1], [10, 0, k, 1], 5000, 6000, &payload);
            out.push(Arrival { packet, at: now, port: 0 });
            self.seq[t] += 1;
            self.sent[t].store(self.seq[t], Ordering::Release);
        }
    }
}

/// What left, checked as it leaves.
#[derive(Debug, Default)]
struct Seen {
    got: [u64; 2],
    /// B: the next sequence number expected; packets out of order or missing.
    b_next: u64,
    b_out_of_order: u64,
    /// A: packets whose stamps are not one generation's DAG (wrong positions, mixed values).
    a_mixed: u64,
    /// A: packets by generation.
    a_generations: std::collections::BTreeMap<u8, u64>,
    b_bad_stamps: u64,
    /// Each tenant's counts from its first task, as they left.
    counts: [Vec<u64>; 2],
}

struct Check {
    pool: Pool,
    seen: Arc<Mutex<Seen>>,
}

impl Egress for Check {
    fn send(&mut self, _: Instant, items: &mut Vec<Item>) {
        let mut s = self.seen.lock().unwrap();
        for item in items.drain(..) {
            let d = item.packet.data();
            let seq = u64::from_le_bytes(d[STAMPS - 8..STAMPS].try_into().unwrap());
            let stamps = &d[STAMPS..STAMPS + 3];
            let t = usize::from(item.desc.tenant);
            s.got[t] += 1;
            s.counts[t].push(u64::from_le_bytes(d[COUNT..COUNT + 8].try_into().unwrap()));
            if t == 1 {
                if seq != s.b_next {
                    s.b_out_of_order += 1;
                }
                s.b_next = seq + 1;
                if stamps != [0, 0, 0] {
                    s.b_bad_stamps += 1;
                }
            } else {
                let g = stamps[0];
                // Generation g skips s2 when odd (the generations here stay below 256).
                let want = if g % 2 == 1 { [g, UNSTAMPED, g] } else { [g, g, g] };
                if stamps != want || g != item.desc.generation {
                    s.a_mixed += 1;
                }
                *s.a_generations.entry(g).or_default() += 1;
            }
            self.pool.put(item.packet);
        }
    }
}

#[test]
fn a_tenant_updated_twenty_times_mid_stream_leaves_the_other_untouched() {
    let pool = Pool::new(4096, 256);
    let tenants = vec![tenant("a", 1, dag_a(0)), tenant("b", 2, "s1 -> s2 -> s3")];
    let p = plan::plan(&tenants, &area, 8, 100_000).unwrap();
    assert_eq!(p.chains.len(), 1, "A and B share one chain");
    assert_eq!(p.regions.len(), 3, "the chain is cut over three regions");
    let cfg = Config { mode: Mode::Snic, cores: 2, instances: 1, ..Config::default() };
    let mut factory = |t: usize, n: usize| Ok(stamp_of(&tenants, t, n, 0));
    let rt = Runtime::new(p, tenants.clone(), cfg, &mut factory).unwrap();
    let updater = rt.updater();
    let stopper = rt.stopper();
    let stop = Arc::new(AtomicBool::new(false));
    let sent: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let ingress: Vec<Box<dyn Ingress>> =
        vec![Box::new(Stream { pool: pool.clone(), seq: [0; 2], stop: stop.clone(), sent: sent.clone() })];
    let egress: Vec<Box<dyn Egress>> =
        (0..2).map(|_| Box::new(Check { pool: pool.clone(), seen: seen.clone() }) as Box<dyn Egress>).collect();
    let applied = std::thread::scope(|s| {
        let control = s.spawn(|| {
            // Traffic first, then 20 updates, each with its own DAG and tasks.
            while sent[1].load(Ordering::Acquire) < 1000 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut applied = Vec::new();
            for g in 1..=20u64 {
                let mut next = tenants.clone();
                next[0] = tenant("a", 1, dag_a(g));
                let p = plan::plan(&next, &area, 8, 100_000).unwrap();
                let mut f = |t: usize, n: usize| Ok(stamp_of(&next, t, n, g as u8));
                let u = updater.build(&p, 0, &mut f);
                let r = u.and_then(|u| updater.apply(u, Duration::from_secs(5)));
                applied.push(r);
                std::thread::sleep(Duration::from_millis(2));
            }
            // The last update completes; a last stretch on the final generation, then the
            // stream stops and drains.
            assert!(updater.settle(0, Duration::from_secs(5)), "the last update completes");
            let b_then = sent[1].load(Ordering::Acquire);
            while sent[1].load(Ordering::Acquire) < b_then + 1000 {
                std::thread::sleep(Duration::from_millis(1));
            }
            stop.store(true, Ordering::Release);
            let total = || sent[0].load(Ordering::Acquire) + sent[1].load(Ordering::Acquire);
            let deadline = Instant::now() + Duration::from_secs(60);
            while seen.lock().unwrap().got.iter().sum::<u64>() < total() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            stopper.stop();
            applied
        });
        rt.run(&pool, ingress, egress).unwrap();
        control.join().unwrap()
    });
    for (i, r) in applied.iter().enumerate() {
        let a = r.as_ref().unwrap_or_else(|e| panic!("update {}: {e}", i + 1));
        assert_eq!(a.generation, i as u64 + 1);
        assert_eq!(a.regions, 3, "each of the chain's regions takes A's new tasks");
    }
    assert_eq!(updater.generations(), vec![20, 0]);
    let s = seen.lock().unwrap();
    let sent = [sent[0].load(Ordering::Acquire), sent[1].load(Ordering::Acquire)];
    assert_eq!(s.got, sent, "every packet of both tenants left");
    assert_eq!(s.b_out_of_order, 0, "B's packets left in order, none missing");
    assert_eq!(s.b_bad_stamps, 0, "B's packets ran B's tasks only");
    assert_eq!(s.a_mixed, 0, "each A packet ran one generation's DAG: {:?}", s.a_generations);
    assert_eq!(s.a_generations.keys().next_back(), Some(&20), "A's last packets ran generation 20");
    assert!(s.a_generations.contains_key(&0), "A's first packets ran generation 0");
    assert_eq!(updater.in_flight(0, 20) + updater.in_flight(0, 19), 0, "nothing is left in flight");
    // A's first task's count went on across the 20 updates: every packet a count of its own.
    for (t, counts) in s.counts.iter().enumerate() {
        let mut sorted = counts.clone();
        sorted.sort_unstable();
        let want: Vec<u64> = (0..counts.len() as u64).collect();
        assert!(sorted == want, "tenant {t}: counts are not 0..{} each once", counts.len());
    }
}

#[test]
fn an_update_that_would_move_another_tenant_or_change_the_chains_is_refused() {
    let tenants = vec![tenant("a", 1, "s1 -> s2 -> s3"), tenant("b", 2, "s1 -> s2 -> s3")];
    let p = plan::plan(&tenants, &area, 8, 100_000).unwrap();
    let cfg = Config { mode: Mode::Snic, cores: 2, instances: 1, ..Config::default() };
    let mut factory = |t: usize, n: usize| Ok(stamp_of(&tenants, t, n, 0));
    let rt = Runtime::new(p.clone(), tenants.clone(), cfg, &mut factory).unwrap();
    let updater = rt.updater();
    // B's own placement changes in this plan: an update of A may not carry it.
    let mut moved = tenants.clone();
    moved[1] = tenant("b", 2, "s1 -> s3");
    let pm = plan::plan(&moved, &area, 8, 100_000).unwrap();
    let mut f = |t: usize, n: usize| Ok(stamp_of(&moved, t, n, 1));
    let e = updater.build(&pm, 0, &mut f).unwrap_err();
    assert!(e.contains("tenant 1"), "{e}");
    // A task neither tenant had before: other chains.
    let mut grown = tenants.clone();
    grown[0] = Tenant::parse(
        "tenant = \"a\"\ndag = \"s1 -> s2 -> s3 -> s4\"\n[ingress]\ndst = \"10.0.1.0/24\"\n[nt.s1]\nkind = \"dummy\"\n\
         [nt.s2]\nkind = \"dummy\"\n[nt.s3]\nkind = \"dummy\"\n[nt.s4]\nkind = \"dummy\"\n",
    )
    .unwrap();
    let pg = plan::plan(&grown, &area, 8, 100_000).unwrap();
    let mut f = |t: usize, n: usize| Ok(stamp_of(&tenants, t, n.min(2), 1));
    let e = updater.build(&pg, 0, &mut f).unwrap_err();
    assert!(e.contains("other chains"), "{e}");
    // A valid update, but the runtime is not running: nothing is applied.
    let mut f = |t: usize, n: usize| Ok(stamp_of(&tenants, t, n, 1));
    let u = updater.build(&p, 0, &mut f).unwrap();
    let e = updater.apply(u, Duration::from_millis(10)).unwrap_err();
    assert!(e.contains("not running"), "{e}");
    assert_eq!(updater.generations(), vec![0, 0]);
    // rtc has no scheduler to stamp generations.
    let rtc = Runtime::new(p.clone(), tenants.clone(), Config { mode: Mode::Rtc, ..cfg }, &mut factory).unwrap();
    let e = rtc.updater().build(&p, 0, &mut f).unwrap_err();
    assert!(e.contains("mode snic"), "{e}");
}

/// The scheduler, sans I/O: packets queued before a switch enter their chain on the new
/// generation with its skip mask (they have run no task), each counted under its
/// generation's parity; the skip mask of the generation before stays known for its packets
/// still in flight (a parallel tenant's join re-stamps it).
#[test]
fn the_scheduler_stamps_the_generation_a_packet_enters_its_chain_on() {
    use tern_chain::runtime::{Arrival, Classify, Scheduler};
    let tenants = vec![tenant("a", 1, "s1 -> s2 -> s3"), tenant("b", 2, "s1 -> s2 -> s3")];
    let p = plan::plan(&tenants, &area, 8, 100_000).unwrap();
    let cfg = Config::default();
    let route = vec![vec![vec![0, 1, 2]]];
    let mut s = Scheduler::new(&p, &tenants, &cfg, 1, vec![false], &route, 1);
    let mut classify = Classify::new(&tenants);
    let pool = Pool::new(64, 256);
    let at = Instant::now();
    let frame = |k: u8| udp(&pool, [10, 1, 0, 1], [10, 0, k, 1], 5000, 6000, &[0; 16]);
    for _ in 0..3 {
        s.admit(Arrival { packet: frame(1), at, port: 0 }, &mut classify).unwrap();
    }
    let first = s.decide().unwrap();
    assert_eq!((first.item.desc.generation, first.item.desc.skip), (0, 0));
    // Tenant A switches to generation 1, skipping position 1, with two packets still queued.
    s.set_generation(0, 1, 0b010);
    for _ in 0..2 {
        let d = s.decide().unwrap();
        assert_eq!((d.item.desc.generation, d.item.desc.skip), (1, 0b010));
        pool.put(d.item.packet);
    }
    assert_eq!(s.started[..2], [1, 2], "A: one on generation 0, two on 1");
    assert_eq!(s.skip_of(0, 0), 0, "generation 0's packets in flight keep their mask");
    assert_eq!(s.skip_of(0, 1), 0b010);
    assert_eq!(s.skip_of(1, 0), 0, "B is untouched");
    pool.put(first.item.packet);
}
