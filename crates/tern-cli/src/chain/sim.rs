//! `tern chain sim`: the autoscaler (`tern_chain::scale`, the policy code itself) on a
//! discrete-event clock with the profile's timings, for SuperNIC's Figure 15 at the paper's
//! scale. Every line and file it writes says it is a simulation.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use plotters::prelude::*;
use serde_json::json;
use tern_chain::scale::{Autoscaler, FIGURE15_TRACE, Sample, simulate};

use crate::CmdResult;
use crate::plot::{COLORS, legend, register_font};

/// Options of `tern chain sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// The hardware profile whose PR time, epoch and regions the simulation uses.
    #[arg(long, default_value = "supernic-htg9200")]
    pub profile: String,
    /// Instances of the chain launched when it is deployed.
    #[arg(long, default_value_t = 2)]
    pub prelaunched: usize,
    /// Gbit/s one instance (one region) carries (the paper's dummy chain: 10).
    #[arg(long, default_value_t = 10.0)]
    pub instance_gbps: f64,
    /// Directory for chain-sim-fig15.json and its plots.
    #[arg(long, default_value = "reports")]
    pub out: PathBuf,
    /// Print the JSON on stdout (the table goes to stderr).
    #[arg(long)]
    pub json: bool,
}

/// `tern chain sim`.
pub fn run(a: &SimArgs) -> CmdResult {
    if !(a.instance_gbps.is_finite() && a.instance_gbps > 0.0) {
        return Err("--instance-gbps: give a positive rate".into());
    }
    crate::check_count("prelaunched", a.prelaunched as u64, 1024)?;
    let profile = tern_hw::Profile::resolve(&a.profile).map_err(|e| e.to_string())?;
    let model = tern_hw::chain::ChainModel::from_profile(&profile)?;
    let (pr_ms, epoch_ms) = (model.pr_ns / 1e6, model.epoch_ns / 1e6);
    let mut scaler = Autoscaler::new(a.instance_gbps, model.regions as usize, model.pr_ns as u64, a.prelaunched);
    let timeline = simulate(&mut scaler, &FIGURE15_TRACE, epoch_ms, 1.0, 110.0);
    let say = |s: String| if a.json { eprintln!("{s}") } else { println!("{s}") };
    say(format!(
        "SIMULATION (not a measurement) of SuperNIC's Figure 15 on {}: one chain, {} Gbit/s an instance (a region), {} pre-launched, at most {} regions, PR {pr_ms} ms, epoch {epoch_ms} ms; load 1x = 10 Gbit/s, 2x at 20 ms, 3x at 30, 1.5x at 70, 3x at 90",
        profile.name, a.instance_gbps, a.prelaunched, model.regions
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
        "profile": profile.name,
        "pr_ms": pr_ms,
        "epoch_ms": epoch_ms,
        "instance_gbps": a.instance_gbps,
        "prelaunched": a.prelaunched,
        "launches": scaler.launches(),
        "full_at_ms": full,
        "timeline": timeline,
    });
    std::fs::create_dir_all(&a.out).map_err(|e| format!("cannot create {}: {e}", a.out.display()))?;
    let path = a.out.join("chain-sim-fig15.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
    let mut written = vec![path];
    written.extend(plot(&timeline, &a.out)?);
    for w in &written {
        say(format!("wrote {}", w.display()));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    }
    Ok(ExitCode::SUCCESS)
}

fn figure<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, t: &[Sample]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root =
        root.titled("SIMULATION: SuperNIC Figure 15, autoscaling with pre-launch", ("sans-serif", 18)).map_err(err)?;
    let panels = root.split_evenly((1, 2));
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
            let c = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(t.iter().map(|s| (s.ms, g(s))), c.stroke_width(2)))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
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
