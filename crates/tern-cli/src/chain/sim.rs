//! `tern chain sim`: SuperNIC's policy code on a discrete-event clock with the profile's
//! timings, at the paper's scale: the autoscaler (`tern_chain::scale`) for Figure 15, and the
//! fair-share allocator (`tern_chain::fair::sim`) for Figures 16–17. Every line and file it
//! writes says it is a simulation.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use plotters::prelude::*;
use serde_json::{Value, json};
use tern_chain::fair::sim::{Figure16, Scheme, figure16, simulate as simulate_shares};
use tern_chain::scale::{Autoscaler, FIGURE15_TRACE, Sample, simulate};
use tern_hw::chain::ChainModel;

use crate::CmdResult;
use crate::plot::{COLORS, legend, register_font};

/// Which of the paper's figures to simulate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Figure {
    /// Figure 15: autoscaling with pre-launch.
    #[value(name = "15")]
    F15,
    /// Figures 16 and 17: dominant shares and aggregate throughput of two users under Static,
    /// DRF and sNIC.
    #[value(name = "16")]
    F16,
    /// Both.
    All,
}

/// Options of `tern chain sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Which figures: 15 (autoscaling), 16 (fair shares; Figure 17 is its aggregate), or all.
    #[arg(long, value_enum, default_value = "all")]
    pub figure: Figure,
    /// The hardware profile whose PR time, epoch, regions, memory and line rate the simulation
    /// uses.
    #[arg(long, default_value = "supernic-htg9200")]
    pub profile: String,
    /// Figure 15: instances of the chain launched when it is deployed.
    #[arg(long, default_value_t = 2)]
    pub prelaunched: usize,
    /// Figure 15: Gbit/s one instance (one region) carries (the paper's dummy chain: 10).
    #[arg(long, default_value_t = 10.0)]
    pub instance_gbps: f64,
    /// Figures 16–17: Gbit/s one dummy task carries in its region (an assumption: the paper
    /// gives none).
    #[arg(long, default_value_t = 25.0)]
    pub task_gbps: f64,
    /// Directory for the JSON and plots (chain-sim-fig15.*, chain-sim-fig16-17.*).
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Print the JSON on stdout (the tables go to stderr): the figure's report, or with
    /// `--figure all` an object of both (`figure_15`, `figures_16_17`).
    #[arg(long)]
    pub json: bool,
}

/// `tern chain sim`.
pub fn run(a: &SimArgs) -> CmdResult {
    for (name, v) in [("--instance-gbps", a.instance_gbps), ("--task-gbps", a.task_gbps)] {
        if !(v.is_finite() && v > 0.0) {
            return Err(format!("{name}: give a positive rate, not {v}").into());
        }
    }
    crate::check_count("prelaunched", a.prelaunched as u64, 1024)?;
    let profile = tern_hw::Profile::resolve(&a.profile).map_err(|e| e.to_string())?;
    let model = ChainModel::from_profile(&profile)?;
    let memory = profile
        .capacity(tern_hw::resource::CHAIN_BOARD_MEMORY_BYTES)
        .ok_or_else(|| format!("profile {} has no {}", profile.name, tern_hw::resource::CHAIN_BOARD_MEMORY_BYTES))?;
    let say = |s: String| if a.json { eprintln!("{s}") } else { println!("{s}") };
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let mut reports = Vec::new();
    if matches!(a.figure, Figure::F15 | Figure::All) {
        reports.push(("figure_15", figure15(a, &profile.name, &model, &say)?));
    }
    if matches!(a.figure, Figure::F16 | Figure::All) {
        let f = figure16(model.regions as f64, memory as f64 / (1u64 << 30) as f64, model.line_gbps, a.task_gbps);
        reports.push(("figures_16_17", figures16_17(a, &profile.name, &model, &f, &say)?));
    }
    if a.json {
        let v = match &reports[..] {
            [(_, one)] => one.clone(),
            _ => Value::Object(reports.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        };
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(ExitCode::SUCCESS)
}

/// Figure 15: prints the timeline, writes its JSON and plots, returns the JSON.
fn figure15(a: &SimArgs, profile: &str, model: &ChainModel, say: &dyn Fn(String)) -> Result<Value, String> {
    let (pr_ms, epoch_ms) = (model.pr_ns / 1e6, model.epoch_ns / 1e6);
    let mut scaler = Autoscaler::new(a.instance_gbps, model.regions as usize, model.pr_ns as u64, a.prelaunched);
    let timeline = simulate(&mut scaler, &FIGURE15_TRACE, epoch_ms, 1.0, 110.0);
    say(format!(
        "SIMULATION (not a measurement) of SuperNIC's Figure 15 on {profile}: one chain, {} Gbit/s an instance (a region), {} pre-launched, at most {} regions, PR {pr_ms} ms, epoch {epoch_ms} ms; load 1x = 10 Gbit/s, 2x at 20 ms, 3x at 30, 1.5x at 70, 3x at 90",
        a.instance_gbps, a.prelaunched, model.regions
    ));
    say("  ms   offered  carried  regions serving  in PR   (simulated)".to_string());
    let mut last: Option<(f64, f64, usize, usize)> = None;
    for s in &timeline {
        let key = (s.offered, s.carried, s.serving, s.in_pr);
        if last != Some(key) {
            say(format!("{:5.0} {:8.1} {:8.1} {:16} {:6}", s.ms, s.offered, s.carried, s.serving, s.in_pr));
            last = Some(key);
        }
    }
    let full = timeline.iter().find(|s| s.ms >= 30.0 && s.carried >= 30.0 - 1e-9).map(|s| s.ms);
    say(format!(
        "simulated: {} launch(es); 3x carried from {} ms (the rise at 30 ms; PR + one epoch = {} ms)",
        scaler.launches(),
        full.map_or("never".to_string(), |m| format!("{m:.0}")),
        pr_ms + epoch_ms
    ));
    let report = json!({
        "simulation": true,
        "figure": 15,
        "profile": profile,
        "pr_ms": pr_ms,
        "epoch_ms": epoch_ms,
        "instance_gbps": a.instance_gbps,
        "prelaunched": a.prelaunched,
        "launches": scaler.launches(),
        "full_at_ms": full,
        "timeline": timeline,
    });
    write(&a.out, "chain-sim-fig15", &report, plot(&timeline, &a.out)?, say)?;
    Ok(report)
}

/// Writes `report` as `dir/NAME.json` and says so, and the plots already written.
fn write(dir: &Path, name: &str, report: &Value, plots: Vec<PathBuf>, say: &dyn Fn(String)) -> Result<(), String> {
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(report).map_err(|e| e.to_string())? + "\n")
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    for w in std::iter::once(&path).chain(&plots) {
        say(format!("wrote {}", w.display()));
    }
    Ok(())
}

/// The mean of `f` over the samples in `[from, to)` seconds.
fn mean_over(
    t: &[tern_chain::fair::sim::Sample],
    from: f64,
    to: f64,
    f: impl Fn(&tern_chain::fair::sim::Sample) -> f64,
) -> f64 {
    let v: Vec<f64> = t.iter().filter(|s| s.s >= from && s.s < to).map(f).collect();
    if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// Figures 16–17: prints each scheme's shares and aggregate before and after user 1's load
/// rises, writes the JSON and plots, returns the JSON.
fn figures16_17(
    a: &SimArgs,
    profile: &str,
    model: &ChainModel,
    f: &Figure16,
    say: &dyn Fn(String),
) -> Result<Value, String> {
    let epoch_s = model.epoch_ns / 1e9;
    let cap = f.capacity();
    say(format!(
        "SIMULATION (not a measurement) of SuperNIC's Figures 16-17 on {profile}: {} regions, {:.0} GB of board memory, {} Gbit/s links; user 1 runs dummy tasks 1-4, user 2 tasks 3-4 (a subset); a task fills a region and carries {} Gbit/s (assumed) and holds {:?} GB (assumed); both ask 60 Gbit/s; user 2 offers 60, user 1 15 and 60 from 50 s; {} ms epochs over 100 s",
        cap[0],
        cap[1],
        cap[2],
        f.task_gbps,
        f.task_memory_gb,
        model.epoch_ns / 1e6
    ));
    say("  scheme   phase      user 1 Gbit/s  user 2 Gbit/s  aggregate  dominant shares  Jain   (simulated)"
        .to_string());
    let mut runs = Vec::new();
    let mut summary = serde_json::Map::new();
    for scheme in Scheme::ALL {
        let t = simulate_shares(scheme, &cap, &f.users, epoch_s, 0.5, 100.0);
        let mut phases = Vec::new();
        for (phase, from, to) in [("0-50 s", 0.0, 50.0), ("50-100 s", 50.0, 100.0 + 1e-9)] {
            let x: Vec<f64> = (0..2).map(|u| mean_over(&t, from, to, |s| s.carried[u])).collect();
            let d: Vec<f64> = (0..2).map(|u| mean_over(&t, from, to, |s| s.dominant[u])).collect();
            let agg = mean_over(&t, from, to, |s| s.aggregate());
            let jain = tern_chain::fair::jain(&d);
            say(format!(
                "  {:8} {:10} {:13.1} {:14.1} {:10.1}  {:.3} / {:.3}   {:.3}",
                scheme.name(),
                phase,
                x[0],
                x[1],
                agg,
                d[0],
                d[1],
                jain
            ));
            phases.push(json!({"phase": phase, "carried_gbps": x, "aggregate_gbps": agg, "dominant": d, "jain": jain}));
        }
        summary.insert(scheme.name().to_lowercase(), Value::Array(phases));
        runs.push((scheme, t));
    }
    let report = json!({
        "simulation": true,
        "figure": [16, 17],
        "profile": profile,
        "epoch_ms": model.epoch_ns / 1e6,
        "resources": f.resources,
        "task_gbps": f.task_gbps,
        "task_memory_gb": f.task_memory_gb,
        "users": f.users,
        "schemes": summary,
        "timelines": runs.iter().map(|(s, t)| json!({"scheme": s.name(), "timeline": t})).collect::<Vec<_>>(),
    });
    write(&a.out, "chain-sim-fig16-17", &report, plot_shares(&runs, &a.out)?, say)?;
    Ok(report)
}

type Runs = [(Scheme, Vec<tern_chain::fair::sim::Sample>)];

type Panel<'a, DB> =
    ChartContext<'a, DB, Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>>;

/// A panel of simulated time (0 to `end` s) against 0 to `y_max`, its mesh drawn.
fn panel<'a, DB: DrawingBackend>(
    area: &'a DrawingArea<DB, plotters::coord::Shift>,
    end: f64,
    y_max: f64,
    y_desc: &str,
) -> Result<Panel<'a, DB>, String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..end, 0.0..y_max)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time (s, simulated)")
        .y_desc(y_desc)
        .label_style(("sans-serif", 13))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)?;
    Ok(chart)
}

fn figure_shares<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, runs: &Runs) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let panels = crate::plot::titled_panels(
        &root,
        "SIMULATION: SuperNIC Figures 16-17, two users under Static, DRF and sNIC",
        18,
        (1, 2),
    )?;
    let end = runs.iter().filter_map(|(_, t)| t.last()).map(|s| s.s).fold(1.0, f64::max);
    // Figure 16: each user's dominant share (user 1 solid, user 2 dashed).
    let mut chart = panel(&panels[0], end, 1.0, "dominant share")?;
    for (i, (scheme, t)) in runs.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(t.iter().map(|s| (s.s, s.dominant[0])), c.stroke_width(2)))
            .map_err(err)?
            .label(format!("{} user 1", scheme.name()))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart
            .draw_series(DashedLineSeries::new(t.iter().map(|s| (s.s, s.dominant[1])), 6, 4, c.stroke_width(2)))
            .map_err(err)?
            .label(format!("{} user 2 (dashed)", scheme.name()))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 6, y)], c.stroke_width(2)));
    }
    legend(&mut chart)?;
    // Figure 17: the aggregate.
    let y_max = runs.iter().flat_map(|(_, t)| t.iter().map(|s| s.aggregate())).fold(0.0f64, f64::max);
    let mut chart = panel(&panels[1], end, (y_max * 1.2).max(1.0), "aggregate Gbit/s")?;
    for (i, (scheme, t)) in runs.iter().enumerate() {
        let pts: Vec<(f64, f64)> = t.iter().map(|s| (s.s, s.aggregate())).collect();
        crate::plot::line(&mut chart, &pts, COLORS[i % COLORS.len()], scheme.name(), false)?;
    }
    legend(&mut chart)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Writes chain-sim-fig16-17.png and .svg into `dir`.
fn plot_shares(runs: &Runs, dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let png = dir.join("chain-sim-fig16-17.png");
    let svg = dir.join("chain-sim-fig16-17.svg");
    figure_shares(BitMapBackend::new(&png, (1200, 440)).into_drawing_area(), runs)?;
    figure_shares(SVGBackend::new(&svg, (1200, 440)).into_drawing_area(), runs)?;
    Ok(vec![png, svg])
}

fn figure<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, t: &[Sample]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let panels =
        crate::plot::titled_panels(&root, "SIMULATION: SuperNIC Figure 15, autoscaling with pre-launch", 18, (1, 2))?;
    let end = t.last().map_or(1.0, |s| s.ms);
    type Get = fn(&Sample) -> f64;
    let defs: [(&str, Vec<(&str, Get)>); 2] = [
        ("Gbit/s", vec![("offered", |s| s.offered), ("carried", |s| s.carried)]),
        ("regions", vec![("serving", |s| s.serving as f64), ("in PR", |s| s.in_pr as f64)]),
    ];
    for (panel, (y_label, lines)) in panels.iter().zip(defs) {
        let y_max = t.iter().flat_map(|s| lines.iter().map(move |(_, g)| g(s))).fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..end, 0.0..(y_max * 1.2).max(1.0))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("time (ms, simulated)")
            .y_desc(y_label)
            .label_style(("sans-serif", 13))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(err)?;
        for (i, (name, g)) in lines.iter().enumerate() {
            let pts: Vec<(f64, f64)> = t.iter().map(|s| (s.ms, g(s))).collect();
            crate::plot::line(&mut chart, &pts, COLORS[i % COLORS.len()], *name, false)?;
        }
        legend(&mut chart)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Writes chain-sim-fig15.png and .svg into `dir`.
fn plot(t: &[Sample], dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let png = dir.join("chain-sim-fig15.png");
    let svg = dir.join("chain-sim-fig15.svg");
    figure(BitMapBackend::new(&png, (1200, 440)).into_drawing_area(), t)?;
    figure(SVGBackend::new(&svg, (1200, 440)).into_drawing_area(), t)?;
    Ok(vec![png, svg])
}
