//! `tern bench chain --fairness` (docs/chain.md, "Benchmark: fairness"): §5.3's two users on
//! real traffic, with and without fair shares, in alternating rounds; then a tenant offering
//! five times its share beside one offering its share.

use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use tern_chain::bench::{self, Allocation, FairPhase, ScaleRun, UpdatePhase, median};
use tern_chain::fair::{TenantLoad, jain, time_share};
use tern_chain::plan;
use tern_chain::runtime::{Config, Mode};
use tern_chain::scale::{Autoscaler, FIGURE15_TRACE, simulate};
use tern_chain::tenant::{self, Tenant};

use super::bench::{ChainBenchArgs, spread, write_report};
use crate::CmdResult;
use crate::env::Environment;

/// Each dummy task's time in the fairness runs, ns: long enough that the tasks, not the
/// harness, fill the cores.
pub(crate) const TASK_NS: u64 = 400;

/// §5.3's users: user 1 a chain of 4 dummy tasks, user 2 the first 2 of them (shared, so user
/// 2 rides user 1's chain), the same requested bandwidth.
pub(crate) fn users() -> Result<Vec<Tenant>, String> {
    users_with(TASK_NS)
}

/// §5.3's users, user 1's tasks taking `ns1` each (user 2's `TASK_NS`).
pub(crate) fn users_with(ns1: u64) -> Result<Vec<Tenant>, String> {
    let mk = |name: &str, k: u8, tasks: usize, ns: u64| {
        let names: Vec<String> = (1..=tasks).map(|i| format!("d{i}")).collect();
        let mut s = format!(
            "tenant = \"{name}\"\ndag = \"{}\"\nbandwidth_gbps = 1\n[ingress]\ndst = \"10.0.{k}.0/24\"\n",
            names.join(" -> ")
        );
        for n in &names {
            s += &format!("[nt.{n}]\nkind = \"dummy\"\nns_per_packet = {ns}\n");
        }
        Tenant::parse(&s).map_err(|e| format!("{name}: {e}"))
    };
    Ok(vec![mk("user1", 1, 4, ns1)?, mk("user2", 2, 2, TASK_NS)?])
}

/// The DRF shares (dominant share, packets a second) of tenants offering without bound, from
/// each one's measured time a packet on each core.
fn drf_shares(ns: &[Vec<f64>], cores: usize, size: f64) -> Vec<(f64, f64)> {
    let loads: Vec<TenantLoad> = ns
        .iter()
        .map(|n| TenantLoad { offered_gbps: f64::INFINITY, mean_bytes: size, weight: 1.0, ns_per_packet: n.clone() })
        .collect();
    time_share(&vec![1.0; cores], &loads).iter().map(|s| (s.dominant, s.allowed_gbps * 1e9 / 8.0 / size)).collect()
}

/// What the cores carry, packets a second, for tenants offering `offered` packets a second
/// (None: without bound), shared fairly (DRF over the cores' time) from their measured costs.
fn capacity(ns: &[Vec<f64>], cores: usize, size: f64, offered: &[Option<f64>]) -> f64 {
    let loads: Vec<TenantLoad> = ns
        .iter()
        .zip(offered)
        .map(|(n, o)| TenantLoad {
            offered_gbps: o.map_or(f64::INFINITY, |pps| pps * size * 8.0 / 1e9),
            mean_bytes: size,
            weight: 1.0,
            ns_per_packet: n.clone(),
        })
        .collect();
    time_share(&vec![1.0; cores], &loads).iter().map(|s| s.allowed_gbps * 1e9 / 8.0 / size).sum()
}

/// One allocation scheme in one case, over the rounds.
struct AllocRow {
    case: &'static str,
    allocation: &'static str,
    phases: Vec<FairPhase>,
    capacity_pps: f64,
    aggregate_over_capacity: f64,
}

impl AllocRow {
    fn new(case: &'static str, allocation: &'static str, phases: Vec<FairPhase>, capacity_pps: f64) -> AllocRow {
        let agg = median(&phases.iter().map(|p| p.delivered_pps.iter().sum::<f64>()).collect::<Vec<_>>());
        AllocRow { case, allocation, phases, capacity_pps, aggregate_over_capacity: agg / capacity_pps.max(1.0) }
    }

    fn med(&self, f: &dyn Fn(&FairPhase) -> f64) -> f64 {
        median(&self.phases.iter().map(f).collect::<Vec<_>>())
    }

    fn line(&self) -> String {
        format!(
            "case {} {:>8}: user1 {:.3} Mpps (dominant {:.3}), user2 {:.3} Mpps ({:.3}); Jain {:.4}; aggregate {:.3} Mpps, {:.2} of what the cores carry for this mix ({:.3} Mpps)",
            self.case,
            self.allocation,
            self.med(&|p| p.delivered_pps[0]) / 1e6,
            self.med(&|p| p.dominant[0]),
            self.med(&|p| p.delivered_pps[1]) / 1e6,
            self.med(&|p| p.dominant[1]),
            self.med(&|p| jain(&p.dominant)),
            self.med(&|p| p.delivered_pps.iter().sum()) / 1e6,
            self.aggregate_over_capacity,
            self.capacity_pps / 1e6,
        )
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "case": self.case, "allocation": self.allocation, "capacity_pps": self.capacity_pps,
            "aggregate_over_capacity": self.aggregate_over_capacity, "phases": self.phases,
        })
    }
}

/// `tern bench chain --fairness`.
pub fn run(a: &ChainBenchArgs) -> CmdResult {
    let rounds = a.rounds.unwrap_or(if a.quick { 3 } else { 5 });
    crate::check_count("rounds", rounds as u64, 1000)?;
    crate::check_count("cores", a.cores as u64, 256)?;
    let secs = a.phase_secs.unwrap_or(if a.quick { 0.4 } else { 1.0 });
    if !(secs > 0.0 && secs <= 60.0) {
        return Err("--phase-secs must be in (0, 60]".into());
    }
    let phase = Duration::from_secs_f64(secs);
    let warmup = Duration::from_secs_f64((secs / 2.0).min(0.3));
    let env = Environment::current();
    let say = |s: String| if a.json { eprintln!("{s}") } else { println!("{s}") };
    say(format!("environment: {}", env.describe()));
    let profile = tern_hw::Profile::builtin("supernic-htg9200")?;
    let model = tern_hw::chain::ChainModel::from_profile(&profile)?;
    let epoch = Duration::from_secs_f64(model.epoch_ns / 1e9);
    let ts = users()?;
    let p = plan::plan(&ts, &|t| tenant::area(t, &profile), model.regions, model.region_luts)?;
    let cfg = Config { mode: Mode::Snic, cores: a.cores, pin: true, ..Config::default() };
    let size = 64usize;
    let frames = |k: u8| bench::frames([10, 0, k, 0], a.flows.max(1), size);
    say(format!(
        "{} cores, snic; user1: 4 dummy tasks of {TASK_NS} ns, user2: the first 2 (riding user1's chain); {size}-byte frames; fair shares every {} ms; {rounds} rounds of {secs} s, without and with fair shares in turn",
        a.cores,
        epoch.as_secs_f64() * 1e3
    ));
    // Where the host put the vCPUs (it moves them): a cache line's round trip between the
    // cores before and after the run.
    let rtt_before = bench::core_round_trip_ns(super::bench::RTT_BOUNCES);
    say(format!("cores: a cache line's round trip between cores 0 and 1: {rtt_before:.0} ns"));
    let dummy_ns = super::bench::dummy_check(TASK_NS);
    say(format!(
        "dummy task: configured {TASK_NS} ns, spends {dummy_ns:.1} ns a packet (mean of {} in a row)",
        super::bench::DUMMY_CHECKS
    ));
    let bar = crate::progress::bar((rounds * 6) as u64, "bench chain --fairness", a.json);

    // 1. Both users offer without bound.
    let (mut off, mut on): (Vec<FairPhase>, Vec<FairPhase>) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        let order = if r % 2 == 0 { [false, true] } else { [true, false] };
        for fair in order {
            let streams = vec![(frames(1), None), (frames(2), None)];
            let alloc = if fair { Allocation::Epoch } else { Allocation::None };
            let ph = bench::measure_fair(&ts, &p, cfg, streams, &alloc, epoch, warmup, phase)?;
            if fair { on.push(ph) } else { off.push(ph) }
        }
        bar.inc(1);
    }
    let jain_of = |v: &[FairPhase]| median(&v.iter().map(|p| jain(&p.dominant)).collect::<Vec<_>>());
    let med = |v: &[FairPhase], f: &dyn Fn(&FairPhase) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    // Each round's error against the DRF shares from that round's own measured costs.
    let share_errors: Vec<f64> = on
        .iter()
        .map(|p| {
            drf_shares(&p.ns_per_packet, a.cores, size as f64)
                .iter()
                .zip(&p.dominant)
                .map(|((want, _), got)| (got - want).abs() / want.max(1e-9))
                .fold(0.0, f64::max)
        })
        .collect();
    let max_share_error = median(&share_errors);
    let drf = on.last().map(|p| drf_shares(&p.ns_per_packet, a.cores, size as f64)).unwrap_or_default();
    let row = |name: &str, v: &[FairPhase]| {
        format!(
            "{name}: user1 {:.3} Mpps (dominant share {:.3}), user2 {:.3} Mpps ({:.3}); Jain {:.4}; aggregate {:.3} Mpps; dropped by limiters {:.0}/s",
            med(v, &|p| p.delivered_pps[0]) / 1e6,
            med(v, &|p| p.dominant[0]),
            med(v, &|p| p.delivered_pps[1]) / 1e6,
            med(v, &|p| p.dominant[1]),
            jain_of(v),
            med(v, &|p| p.delivered_pps.iter().sum::<f64>()) / 1e6,
            med(v, &|p| p.rate_limited as f64 / secs),
        )
    };
    bar.suspend(|| {
        say(row("without fair shares (virtual time alone)", &off));
        say(row("with fair shares", &on));
        if let [(d1, r1), (d2, r2)] = drf[..] {
            say(format!(
                "DRF shares from the measured costs: user1 {:.3} Mpps (dominant {d1:.3}), user2 {:.3} Mpps ({d2:.3}); largest error of a delivered dominant share {:.1}% (median over rounds)",
                r1 / 1e6,
                r2 / 1e6,
                100.0 * max_share_error
            ));
        }
    });

    // 1b. The paper's baselines beside (§5.3): Static (each user its own chain and an equal
    // half of each core) and DRF-only (its own chain, limits at the DRF shares set once): both
    // users without bound (A), and user 1 offering 40% of its DRF share with user 2 without
    // bound (B), where fair shares on what each offers give user 2 what user 1 leaves.
    let mut alloc_rows: Vec<AllocRow> = Vec::new();
    if let (Some(last), [(_, r1), (_, _)]) = (on.last(), &drf[..]) {
        let r1 = *r1;
        let sep = plan::plan_with(
            &ts,
            &|t| tenant::area(t, &profile),
            model.regions,
            model.region_luts,
            plan::Options { share: false, concatenate: true },
        )?;
        let gbps = |pps: f64| pps * size as f64 * 8.0 / 1e9;
        let drf_limits: Vec<Option<f64>> =
            drf_shares(&last.ns_per_packet, a.cores, size as f64).iter().map(|(_, r)| Some(gbps(*r))).collect();
        let static_limits: Vec<Option<f64>> = last
            .ns_per_packet
            .iter()
            .map(|ns| {
                let r = ns.iter().filter(|&&n| n > 0.0).map(|n| 0.5e9 / n).fold(f64::INFINITY, f64::min);
                r.is_finite().then(|| gbps(r))
            })
            .collect();
        let capacity_b = capacity(&last.ns_per_packet, a.cores, size as f64, &[Some(0.4 * r1), None]);
        let capacity_a = capacity(&last.ns_per_packet, a.cores, size as f64, &[None, None]);
        for (case, user1, cap) in [("A", None, capacity_a), ("B", Some(0.4 * r1), capacity_b)] {
            for (name, plan_of, alloc) in [
                ("static", &sep, Allocation::Fixed(static_limits.clone())),
                ("DRF-only", &sep, Allocation::Fixed(drf_limits.clone())),
                ("sNIC", &p, Allocation::Epoch),
            ] {
                let mut phases = Vec::new();
                for _ in 0..rounds {
                    let streams = vec![(frames(1), user1), (frames(2), None)];
                    phases.push(bench::measure_fair(&ts, plan_of, cfg, streams, &alloc, epoch, warmup, phase)?);
                }
                alloc_rows.push(AllocRow::new(case, name, phases, cap));
            }
        }
        bar.inc(rounds as u64);
        bar.suspend(|| {
            for r in &alloc_rows {
                say(r.line());
            }
        });
    }
    let aggregate_over_capacity = alloc_rows
        .iter()
        .filter(|r| r.allocation == "sNIC")
        .map(|r| r.aggregate_over_capacity)
        .fold(f64::INFINITY, f64::min);

    // 2. User1 offers five times its DRF share, user2 its share.
    let mut kept_off = Vec::new();
    let mut kept_on = Vec::new();
    let (mut agg_off, mut agg_on): (Vec<FairPhase>, Vec<FairPhase>) = (Vec::new(), Vec::new());
    if let [(_, r1), (_, r2)] = drf[..] {
        for r in 0..rounds {
            let order = if r % 2 == 0 { [false, true] } else { [true, false] };
            for fair in order {
                let streams = vec![(frames(1), Some(5.0 * r1)), (frames(2), Some(r2))];
                let alloc = if fair { Allocation::Epoch } else { Allocation::None };
                let ph = bench::measure_fair(&ts, &p, cfg, streams, &alloc, epoch, warmup, phase)?;
                // Against the rate it was to offer: a generator (as a port) that the ingress cannot
                // keep up with falls behind, and what it never got to offer is lost too.
                let kept = ph.delivered_pps[1] / r2.max(1.0);
                if fair {
                    kept_on.push(kept);
                    agg_on.push(ph);
                } else {
                    kept_off.push(kept);
                    agg_off.push(ph);
                }
            }
            bar.inc(1);
        }
    }
    // 3. User1's DAG replaced 20 times while both offer half their share; user2's loss and
    // p99 latency against rounds whose control thread builds the same tasks at the same times
    // without swapping them in (the same work beside the data path; only the swaps differ).
    let updates = 20;
    let update_rounds = (2 * rounds).saturating_sub(1).max(5);
    let mut upd_on: Vec<UpdatePhase> = Vec::new();
    let mut upd_off: Vec<UpdatePhase> = Vec::new();
    if let [(_, r1), (_, r2)] = drf[..] {
        // Generation g: new instances of user1's four tasks, 1 ns longer when g is odd.
        let variants = [TASK_NS, TASK_NS + 1]
            .iter()
            .map(|&ns| {
                let ts = users_with(ns)?;
                let p = plan::plan(&ts, &|t| tenant::area(t, &profile), model.regions, model.region_luts)?;
                Ok((ts, p))
            })
            .collect::<Result<Vec<_>, String>>()?;
        // Twice the rounds less one, at least 5: a p99 over a short phase is moved by one stall
        // of the host's (a few ms, now and then, with or without updates), and a median of 5
        // stands two of them.
        for r in 0..update_rounds {
            let order = if r % 2 == 0 { [false, true] } else { [true, false] };
            for with in order {
                let streams = vec![(frames(1), Some(0.5 * r1)), (frames(2), Some(0.5 * r2))];
                let ph = bench::measure_updates(&variants, cfg, streams, 1, 0, updates, with, warmup, phase)?;
                if with { upd_on.push(ph) } else { upd_off.push(ph) }
            }
            if r < rounds {
                bar.inc(1);
            }
        }
    }
    // 5. YCSB through go-back-N and the KV cache against go-back-N alone, the server behind a
    // link a tenth as fast.
    let (ycsb_rows, ycsb_link) = ycsb_runs(rounds, a.cores, phase, warmup, &profile, &model)?;
    bar.inc(rounds as u64);
    // 4. Autoscaling on Figure 15's trace at CPU rates: a stateless chain of one dummy task,
    // three instances built (two in service), its task capped at SCALE_PPS (its region paced).
    let scale_runs = scaling_runs(rounds, a.cores, &profile, &model)?;
    bar.inc(rounds as u64);
    bar.finish_and_clear();
    let update_lost: u64 = upd_on.iter().map(|p| p.victim_lost).sum();
    let lost_without: u64 = upd_off.iter().map(|p| p.victim_lost).sum();
    // The ratio of the medians over rounds (one phase stalled by the host, with or without
    // updates, moves a median less than a ratio of one pair); each round's pair as the spread.
    let p99_ratios: Vec<f64> =
        upd_on.iter().zip(&upd_off).map(|(a, b)| a.victim_p99_ns / b.victim_p99_ns.max(1.0)).collect();
    let off_p99 = median(&upd_off.iter().map(|p| p.victim_p99_ns).collect::<Vec<_>>());
    let on_p99 = median(&upd_on.iter().map(|p| p.victim_p99_ns).collect::<Vec<_>>());
    let pairs = spread(&p99_ratios);
    let p99r = (on_p99 / off_p99.max(1.0), pairs.1, pairs.2);
    let apply: Vec<f64> = upd_on.iter().flat_map(|p| p.apply_ms.iter().copied()).collect();
    let rtt_after = bench::core_round_trip_ns(super::bench::RTT_BOUNCES);
    let (k_on, k_off) = (spread(&kept_on), spread(&kept_off));
    say(format!(
        "user1 offering 5x its share: user2 (offering its share) kept {:.1}% [{:.1}-{:.1}%] of its rate with fair shares, {:.1}% [{:.1}-{:.1}%] without",
        100.0 * k_on.0,
        100.0 * k_on.1,
        100.0 * k_on.2,
        100.0 * k_off.0,
        100.0 * k_off.1,
        100.0 * k_off.2
    ));
    if !upd_on.is_empty() {
        say(format!(
            "user1's tasks replaced {updates} times a round (new instances, their time alternating), both offering half their share: user2 lost {update_lost} of {} packets ({lost_without} in rounds building them without swapping them in); its p99 {:.1} µs with updates, {:.1} µs without (medians over rounds): {:.2}x [rounds' pairs {:.2}-{:.2}]; apply took {:.3} ms (median; max {:.3})",
            upd_on.iter().map(|p| p.victim_offered).sum::<u64>(),
            on_p99 / 1e3,
            off_p99 / 1e3,
            p99r.0,
            p99r.1,
            p99r.2,
            median(&apply),
            apply.iter().copied().fold(0.0, f64::max),
        ));
    }
    say(format!(
        "YCSB, 10,000 keys of 1 KB (Zipf 0.99), 32 go-back-N clients of one request at a time, a KV cache of 1,000 keys; the server's link capped at {:.1} MB/s, a tenth of what go-back-N alone carried to an unlimited server:",
        ycsb_link / 1e6
    ));
    for r in &ycsb_rows {
        say(r.line());
    }
    let ycsb_ratio = |w: char| ycsb_rows.iter().find(|r| r.workload.name == w).map_or(f64::NAN, |r| r.ratio.0);
    let scale_sum = summarize_scaling(&scale_runs, &model);
    say(scale_sum.line.clone());
    say(format!("cores after the run: round trip {rtt_after:.0} ns"));
    let summary = json!({
        "jain_index": jain_of(&on),
        "max_share_error": max_share_error,
        "victim_rate_kept": k_on.0,
        "ycsb_b_over_gbn": ycsb_ratio('B'),
        "ycsb_c_over_gbn": ycsb_ratio('C'),
        "update_lost_packets": update_lost,
        "update_p99_ratio": p99r.0,
        "aggregate_over_capacity": aggregate_over_capacity,
        "autoscale_launches": scale_sum.launches,
        "autoscale_ms_to_3x": scale_sum.ms_to_3x,
    });
    say(format!("summary: {summary}"));
    let mut report = json!({
        "bench": "chain --fairness",
        "environment": env,
        "core_round_trip_ns": {"before": rtt_before, "after": rtt_after},
        "options": {"rounds": rounds, "phase_secs": secs, "cores": a.cores, "task_ns": TASK_NS, "task_ns_spent": dummy_ns, "frame_bytes": size, "epoch_ms": epoch.as_secs_f64() * 1e3},
        "two_users": {"without": off, "with": on, "jain_without": jain_of(&off), "drf_shares": drf.iter().map(|(d, r)| json!({"dominant": d, "pps": r})).collect::<Vec<_>>(), "share_errors": share_errors},
        "aggressor": {"victim_kept_with": kept_on, "victim_kept_without": kept_off, "with": agg_on, "without": agg_off},
        "allocations": alloc_rows.iter().map(AllocRow::json).collect::<Vec<_>>(),
        "ycsb": {"setup": YCSB_SETUP, "server_link_bytes_per_s": ycsb_link, "cache_keys": YCSB_SETUP.keys / 10, "workloads": ycsb_rows.iter().map(YcsbRow::json).collect::<Vec<_>>()},
        "autoscaling": {"instance_pps": SCALE_PPS, "trace_pps": scale_trace(), "runs": scale_runs, "simulated": scale_sum.simulated},
        "updates": {"per_round": updates, "with": upd_on, "without": upd_off, "p99_ratios": p99_ratios, "victim_lost_without": lost_without},
        "not_built": [],
    });
    say(crate::reports::judge(&mut report, &TARGETS, Some(&summary), &[]));
    let path = write_report(&a.out, "chain-fairness.json", &mut report, &summary)?;
    say(format!("wrote {}", path.display()));
    let med = |v: &[tern_chain::ycsb::YcsbPhase]| median(&v.iter().map(|p| p.ops_per_s / 1e3).collect::<Vec<_>>());
    let figure = super::plot::FairnessFigure {
        allocations: alloc_rows.iter().map(|r| (r.case, r.allocation, r.aggregate_over_capacity)).collect(),
        scaling: scale_runs.first().map(|r| r.bins.clone()).unwrap_or_default(),
        instance_pps: SCALE_PPS,
        ycsb: ycsb_rows.iter().map(|r| (r.workload.name, med(&r.with), med(&r.without))).collect(),
    };
    for p in super::plot::fairness(&figure, &a.out)? {
        say(format!("wrote {}", p.display()));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// What `tern bench chain --fairness` is judged by (SuperNIC §5.3–5.4, as Tern sets its
/// targets).
const TARGETS: [(&str, f64, bool); 5] = [
    ("jain_index", 0.99, true),
    ("max_share_error", 0.05, false),
    ("victim_rate_kept", 0.95, true),
    ("update_lost_packets", 0.0, false),
    ("update_p99_ratio", 1.5, false),
];

/// What one instance (a region) of the autoscaling case carries, packets a second: its dummy
/// task's cap ([`SCALE_FRAME`]-byte frames).
pub(crate) const SCALE_PPS: f64 = 100_000.0;

/// The autoscaling case's frame size, bytes.
const SCALE_FRAME: usize = 64;

/// Figure 15's trace (1×, 2× from 20 ms, 3× from 30, 1.5× from 70, 3× from 90) in packets a
/// second, at 0.9 of each multiple of an instance: a measured load a few percent high does not
/// cross an instance's bound (2.0× measured as 2.02 would take a third instance).
pub(crate) fn scale_trace() -> Vec<(f64, f64)> {
    FIGURE15_TRACE.iter().map(|&(ms, gbps)| (ms, gbps / 10.0 * 0.9 * SCALE_PPS)).collect()
}

/// Runs the autoscaling case `rounds` times.
pub(crate) fn scaling_runs(
    rounds: usize,
    cores: usize,
    profile: &tern_hw::Profile,
    model: &tern_hw::chain::ChainModel,
) -> Result<Vec<ScaleRun>, String> {
    // A dummy task capped at SCALE_PPS of the case's frames: its region is paced to it.
    let gbps = SCALE_PPS * SCALE_FRAME as f64 * 8.0 / 1e9;
    let t = Tenant::parse(&format!(
        "tenant = \"scaled\"\ndag = \"d\"\n[ingress]\ndst = \"10.0.3.0/24\"\n[nt.d]\nkind = \"dummy\"\ngbps = {gbps}\n"
    ))
    .map_err(|e| e.to_string())?;
    let ts = vec![t];
    let p = plan::plan(&ts, &|t| tenant::area(t, profile), model.regions, model.region_luts)?;
    let cfg = Config { mode: Mode::Snic, cores, instances: 3, pin: true, ..Config::default() };
    let pr = Duration::from_nanos(model.pr_ns as u64);
    let epoch = Duration::from_secs_f64(model.epoch_ns / 1e9);
    (0..rounds)
        .map(|_| {
            let frames = bench::frames([10, 0, 3, 0], 64, SCALE_FRAME);
            bench::measure_scaling(&ts, &p, cfg, frames, &scale_trace(), 2, pr, epoch, 2.0, 110.0)
        })
        .collect()
}

/// The autoscaling case summed up.
struct ScaleSummary {
    line: String,
    launches: f64,
    ms_to_3x: f64,
    simulated: Vec<tern_chain::scale::Sample>,
}

fn summarize_scaling(runs: &[ScaleRun], model: &tern_hw::chain::ChainModel) -> ScaleSummary {
    let trace = scale_trace();
    let mut a = Autoscaler::new(SCALE_PPS, 3, model.pr_ns as u64, 2);
    let simulated = simulate(&mut a, &trace, model.epoch_ns / 1e6, 1.0, 110.0);
    let sim_launch = simulated.iter().find(|s| s.launched > 0).map_or(f64::NAN, |s| s.ms);
    // When each run first carried 95% of the 3x load after its rise at 30 ms (a 2 ms bin).
    let peak = trace[2].1;
    let to_3x: Vec<f64> = runs
        .iter()
        .map(|r| r.bins.iter().find(|b| b.0 > 30.0 && b.2 >= 0.95 * peak).map_or(f64::NAN, |b| b.0 - 30.0))
        .collect();
    let launches: Vec<f64> = runs.iter().map(|r| r.launches as f64).collect();
    let at: Vec<f64> =
        runs.iter().filter_map(|r| r.epochs.iter().find(|e| e.3 > 0).map(|e| (e.0 / 20.0).round() * 20.0)).collect();
    let second: Vec<f64> =
        runs.iter().map(|r| r.epochs.iter().filter(|e| e.0 > 80.0).map(|e| e.3 as f64).sum()).collect();
    let (t, l) = (super::bench::spread(&to_3x), super::bench::spread(&launches));
    let line = format!(
        "autoscaling, Figure 15's trace at 0.9 of each multiple of {:.0} kpps an instance (PR {:.0} ms, {:.0} ms epochs, 2 of 3 instances in service): {:.0} launch(es) [{:.0}-{:.0}] at the {} ms epoch, {:.0} at the second peak; 95% of the 3x load carried {:.0} ms after its rise [{:.0}-{:.0}] (PR + an epoch: {:.0} ms); SIMULATION of the same trace: {} launch at {sim_launch:.0} ms",
        SCALE_PPS / 1e3,
        model.pr_ns / 1e6,
        model.epoch_ns / 1e6,
        l.0,
        l.1,
        l.2,
        if at.is_empty() { "-".to_string() } else { format!("{:.0}", median(&at)) },
        median(&second),
        t.0,
        t.1,
        t.2,
        (model.pr_ns + model.epoch_ns) / 1e6,
        a.launches(),
    );
    ScaleSummary { line, launches: l.0, ms_to_3x: t.0, simulated }
}

/// YCSB's shape: 10,000 keys of 1 KB, Zipf 0.99, 32 client connections with one request
/// outstanding each (YCSB's synchronous client threads; more requests in flight at once send
/// more GETs of a popular key past the cache while its value is on the way, or just after a SET
/// took it out); the server's link is set at the run's start (a tenth of what it carries
/// unlimited).
const YCSB_SETUP: tern_chain::ycsb::Setup = tern_chain::ycsb::Setup {
    keys: 10_000,
    value_bytes: 1024,
    theta: 0.99,
    clients: 32,
    window: 1,
    server_link_bytes: f64::INFINITY,
};

/// One workload, with the cache and without, over the rounds.
struct YcsbRow {
    workload: tern_chain::ycsb::Workload,
    with: Vec<tern_chain::ycsb::YcsbPhase>,
    without: Vec<tern_chain::ycsb::YcsbPhase>,
    ratio: (f64, f64, f64),
}

impl YcsbRow {
    fn line(&self) -> String {
        let med = |v: &[tern_chain::ycsb::YcsbPhase], f: &dyn Fn(&tern_chain::ycsb::YcsbPhase) -> f64| {
            median(&v.iter().map(f).collect::<Vec<_>>())
        };
        format!(
            "YCSB {} ({:.0}% reads): gbn + KV cache {:.1} kops/s ({:.1} kops/s reached the server), gbn alone {:.1} kops/s: {:.2}x [{:.2}-{:.2}]",
            self.workload.name,
            100.0 * self.workload.reads,
            med(&self.with, &|p| p.ops_per_s) / 1e3,
            med(&self.with, &|p| p.server_ops_per_s) / 1e3,
            med(&self.without, &|p| p.ops_per_s) / 1e3,
            self.ratio.0,
            self.ratio.1,
            self.ratio.2,
        )
    }

    fn json(&self) -> serde_json::Value {
        json!({"workload": self.workload, "with_cache": self.with, "gbn_alone": self.without, "ratio": self.ratio.0, "ratio_min": self.ratio.1, "ratio_max": self.ratio.2})
    }
}

/// Runs YCSB A, B and C `rounds` times each, with the cache and without in turn, the server's
/// link capped at a tenth of what go-back-N alone carries to an unlimited server (workload C,
/// measured first); returns the rows and that cap (bytes a second).
fn ycsb_runs(
    rounds: usize,
    cores: usize,
    phase: Duration,
    warmup: Duration,
    profile: &tern_hw::Profile,
    model: &tern_hw::chain::ChainModel,
) -> Result<(Vec<YcsbRow>, f64), String> {
    use tern_chain::ycsb;
    let mut setup = YCSB_SETUP;
    let plan_of = |t: &Tenant| -> Result<(Vec<Tenant>, plan::Plan), String> {
        let ts = vec![t.clone()];
        let p = plan::plan(&ts, &|t| tenant::area(t, profile), model.regions, model.region_luts)?;
        Ok((ts, p))
    };
    let (cached, cached_plan) = plan_of(&ycsb::tenant(Some(setup.keys / 10), setup.value_bytes)?)?;
    let (plain, plain_plan) = plan_of(&ycsb::tenant(None, setup.value_bytes)?)?;
    let cfg = Config { mode: Mode::Snic, cores, pin: true, ..Config::default() };
    let unlimited = ycsb::run(&plain, &plain_plan, cfg, setup, ycsb::WORKLOADS[2], warmup, phase)?;
    setup.server_link_bytes = unlimited.server_link_bytes_per_s / 10.0;
    let mut rows = Vec::new();
    for w in ycsb::WORKLOADS {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            let order = if r % 2 == 0 { [true, false] } else { [false, true] };
            for cache in order {
                let (ts, p) = if cache { (&cached, &cached_plan) } else { (&plain, &plain_plan) };
                let ph = ycsb::run(ts, p, cfg, setup, w, warmup, phase)?;
                if cache { with.push(ph) } else { without.push(ph) }
            }
        }
        let ratios: Vec<f64> = with.iter().zip(&without).map(|(a, b)| a.ops_per_s / b.ops_per_s.max(1.0)).collect();
        let m = |v: &[ycsb::YcsbPhase]| median(&v.iter().map(|p| p.ops_per_s).collect::<Vec<_>>());
        let pairs = super::bench::spread(&ratios);
        let ratio = (m(&with) / m(&without).max(1.0), pairs.1, pairs.2);
        rows.push(YcsbRow { workload: w, with, without, ratio });
    }
    Ok((rows, setup.server_link_bytes))
}
