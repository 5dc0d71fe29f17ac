//! Ingress limiters (docs/chain.md, "Fairness"): the scheduler holds a limited tenant to its
//! rate and leaves the others alone, counting what each offered; a running runtime takes limits
//! through its `Limiter`.

mod common;

/// The tests take turns: one that measures time wants both cores (a thread preempted in a
/// timed batch counts the preemption as its tasks' time), and every test here keeps a core busy.
static CORES: std::sync::Mutex<()> = std::sync::Mutex::new(());

use std::time::{Duration, Instant};

use common::{area, run_with};
use tern_chain::plan;
use tern_chain::runtime::{Arrival, Classify, Config, Mode, Scheduler};
use tern_chain::tenant::Tenant;
use tern_io::{Packet, Pool};

fn tenants() -> Vec<Tenant> {
    (0..2)
        .map(|k| {
            let s = format!(
                "tenant = \"t{k}\"\ndag = \"d1 -> d2\"\n[ingress]\ndst = \"10.0.{k}.0/24\"\n[nt.d1]\nkind = \"dummy\"\n[nt.d2]\nkind = \"dummy\"\n"
            );
            Tenant::parse(&s).unwrap()
        })
        .collect()
}

/// A frame of `size` bytes to tenant `k`.
fn frame(pool: &Pool, k: u8, size: usize) -> Packet {
    common::udp(pool, [10, 9, 0, 1], [10, 0, k, 7], 1000, 80, &vec![0; size - 42])
}

/// Two tenants offer 2 Gbit/s each of 1500-byte frames for a simulated half second; tenant 0 is
/// limited to 1 Gbit/s. Tenant 0 gets 1 Gbit/s within 2% and the rest of its frames are
/// dropped as `rate_limited`; tenant 1 loses nothing; both offered all they sent.
#[test]
fn scheduler_holds_a_limited_tenant_to_its_rate() {
    // Not timed itself, but it keeps a core busy: the timed tests wait for it.
    let _cores = CORES.lock().unwrap_or_else(|e| e.into_inner());
    let ts = tenants();
    let p = plan::plan(&ts, &area, 8, 100_000).unwrap();
    let cfg = Config::default();
    let route = vec![vec![vec![0]]];
    let mut s = Scheduler::new(&p, &ts, &cfg, 1, vec![false], &route, 1);
    let mut classify = Classify::new(&ts);
    let pool = Pool::new(1024, 2048);
    s.set_limit(0, Some(1.0));
    assert_eq!(s.limit(0), Some(1.0));
    assert_eq!(s.limit(1), None);
    let size = 1500;
    let per_tenant_pps = 2e9 / 8.0 / size as f64;
    let secs = 0.5;
    let n = (per_tenant_pps * secs) as u64;
    let t0 = Instant::now();
    let (mut admitted, mut limited) = ([0u64; 2], [0u64; 2]);
    for i in 0..n {
        let at = t0 + Duration::from_nanos((i as f64 * 1e9 / per_tenant_pps) as u64);
        for k in 0..2u8 {
            match s.admit(Arrival { packet: frame(&pool, k, size), at, port: 0 }, &mut classify) {
                Ok(t) => admitted[t] += 1,
                Err((t, pk, reason)) => {
                    assert_eq!(reason, "rate_limited", "tenant {t}");
                    limited[t] += 1;
                    pool.put(pk);
                }
            }
        }
        // The chain takes them as they come (credits back at once).
        while let Some(d) = s.decide() {
            // Each keeps its own arrival time (the scheduler converts one a batch, not one an
            // arrival).
            assert_eq!(d.item.desc.arrived(), at, "arrival time");
            if let Some((_, c)) = d.to {
                s.credit(c, 1);
            }
            pool.put(d.item.packet);
        }
    }
    let got_gbps = admitted[0] as f64 * size as f64 * 8.0 / secs / 1e9;
    assert!((got_gbps - 1.0).abs() < 0.02, "limited tenant got {got_gbps} Gbit/s");
    assert_eq!(admitted[1], n);
    assert_eq!(limited[1], 0);
    assert_eq!(admitted[0] + limited[0], n);
    assert_eq!(s.offered(0), (n, n * size as u64));
    assert_eq!(s.offered(1), (n, n * size as u64));
    // Lifted: everything passes again.
    s.set_limit(0, None);
    let late = t0 + Duration::from_secs(1);
    assert!(s.admit(Arrival { packet: frame(&pool, 0, size), at: late, port: 0 }, &mut classify).is_ok());
}

/// A limit set through a running runtime's `Limiter` holds its tenant back (a limit of 0 lets
/// one burst through: 9000 bytes, six 1500-byte frames) and leaves the other tenant whole, in
/// `snic` and `panic`; bad limits and tenants are refused by name.
#[test]
fn limiter_reaches_a_running_runtime() {
    let _cores = CORES.lock().unwrap_or_else(|e| e.into_inner());
    for mode in [Mode::Snic, Mode::Panic] {
        let ts = tenants();
        let pool = Pool::new(4096, 2048);
        let cfg = Config { mode, cores: 2, ..Config::default() };
        let n = 400u64;
        let size = 1500;
        let packets: Vec<Packet> = (0..n).flat_map(|_| [frame(&pool, 0, size), frame(&pool, 1, size)]).collect();
        // Tenant 1's packets and tenant 0's burst: the run stops when they are out.
        let expect = n as usize + 9000 / size;
        let (out, stats, limiter) = run_with(&ts, cfg, &pool, packets, expect, |rt| {
            let limiter = rt.limiter();
            assert!(limiter.set(2, Some(1.0)).unwrap_err().contains("no tenant 2"));
            assert!(limiter.set(0, Some(f64::NAN)).unwrap_err().contains("not a rate"));
            assert!(limiter.set(0, Some(-1.0)).is_err());
            limiter.set(0, Some(0.0)).unwrap();
            assert_eq!(limiter.limits(), [Some(0.0), None]);
            limiter
        });
        let per = |t: u16| out.iter().filter(|(d, _)| d.tenant == t).count() as u64;
        assert_eq!((per(0), per(1)), ((9000 / size) as u64, n), "{mode:?}");
        assert_eq!(stats.tenants[0].drops.get("rate_limited").copied(), Some(n - (9000 / size) as u64), "{mode:?}");
        assert_eq!(stats.tenants[1].drops.get("rate_limited"), None, "{mode:?}");
        assert_eq!(limiter.offered(), [(n, n * size as u64), (n, n * size as u64)], "{mode:?}");
    }
}

/// What fair sharing reads of a run: each tenant's time on each core from its wrappers and the
/// cores' busy time. Two dummy tasks of 2 µs each take at least 4 µs of some core a packet
/// (spread over the chain's instances); the other tenant, of 0-ns tasks, far less but not
/// nothing (its packets are taken, moved and sent); in `snic`, what the tenants' costs account
/// for on a core is its busy time, within a fifth (each instance's share of a chain's packets is
/// counted, not each tenant's; `panic`'s scheduler, handling a packet after every task, is
/// estimated more roughly); `rtc` gives nothing (no limiter).
///
/// The times are wall-clock: a core thread preempted by another process (these machines are
/// shared) counts the preemption as the batch's time, so a run can miss a check for no fault of
/// the monitor's. Each mode gets three runs and one must pass every check; a failing run is
/// printed, and the test fails with all three runs' reasons.
#[test]
fn monitor_gives_each_tenant_its_time_on_each_core() {
    let _cores = CORES.lock().unwrap_or_else(|e| e.into_inner());
    for mode in [Mode::Snic, Mode::Panic, Mode::Rtc] {
        let mut missed = Vec::new();
        while let Err(why) = monitor_run(mode) {
            eprintln!("run {}: {why}", missed.len() + 1);
            missed.push(why);
            assert!(missed.len() < 3, "{mode:?}: every run missed: {missed:#?}");
        }
    }
}

/// One run of `monitor_gives_each_tenant_its_time_on_each_core`: the first check it misses.
fn monitor_run(mode: Mode) -> Result<(), String> {
    let check = |ok: bool, why: String| if ok { Ok(()) } else { Err(why) };
    let ts: Vec<Tenant> = (0..2)
        .map(|k| {
            let ns = if k == 0 { 2000 } else { 0 };
            Tenant::parse(&format!(
                "tenant = \"t{k}\"\ndag = \"a{k} -> b{k}\"\n[ingress]\ndst = \"10.0.{k}.0/24\"\n[nt.a{k}]\nkind = \"dummy\"\nns_per_packet = {ns}\n[nt.b{k}]\nkind = \"dummy\"\nns_per_packet = {ns}\n"
            ))
            .unwrap()
        })
        .collect();
    let pool = Pool::new(4096, 2048);
    let cfg = Config { mode, cores: 2, ..Config::default() };
    let n = 2000u64;
    let packets: Vec<Packet> = (0..n).flat_map(|_| [frame(&pool, 0, 200), frame(&pool, 1, 200)]).collect();
    let (_, _, monitor) = run_with(&ts, cfg, &pool, packets, 2 * n as usize, |rt| rt.monitor());
    let ns = monitor.ns_per_packet(&monitor.live());
    if mode == Mode::Rtc {
        // Not timing: no retry would change this.
        assert!(ns.is_empty(), "{ns:?}");
        return Ok(());
    }
    // The shape is not timing either.
    assert_eq!(ns.len(), 2, "{mode:?}");
    assert!(ns.iter().all(|v| v.len() == 2), "{mode:?}: {ns:?}");
    let total = |t: usize| ns[t].iter().sum::<f64>();
    check(total(0) >= 4000.0, format!("{mode:?}: tenant 0 under 4 µs: {ns:?}"))?;
    check(total(1) < total(0), format!("{mode:?}: tenant 1 not under tenant 0: {ns:?}"))?;
    check(total(1) > 0.0, format!("{mode:?}: tenant 1 nothing: {ns:?}"))?;
    let live = monitor.live();
    for (c, load) in live.cores.iter().enumerate().filter(|_| mode == Mode::Snic) {
        let accounted: f64 = live.stats.tenants.iter().zip(&ns).map(|(t, v)| t.packets_in as f64 * v[c]).sum();
        let busy = load.busy_ns as f64;
        check(
            accounted > 0.8 * busy && accounted < 1.25 * busy,
            format!(
                "{mode:?} core {c}: {accounted} of {busy} ns; {:?} {ns:?} {:?}",
                live.cores,
                live.stats
                    .wrappers
                    .iter()
                    .map(|w| (w.region, w.chain, w.instance, w.packets, w.ns))
                    .collect::<Vec<_>>()
            ),
        )?;
    }
    Ok(())
}
