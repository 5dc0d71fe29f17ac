//! `tern bench chain`'s figure: throughput and p50 latency against chain length, per mode.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::plot::{COLORS, legend, line, register_font};

/// (tasks, pps by mode, p50 ns by mode): snic, panic, rtc.
pub type Row = (usize, [f64; 3], [f64; 3]);

/// A panel's value of a row and mode.
type Get = fn(&Row, usize) -> f64;

fn chain_figure<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, rows: &[Row]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let panels = crate::plot::titled_panels(
        &root,
        "SuperNIC data path (snic) vs PANIC vs run to completion: chains of dummy tasks",
        18,
        (1, 2),
    )?;
    let x_min = rows.iter().map(|r| r.0).min().unwrap_or(1) as f64;
    let x_max = rows.iter().map(|r| r.0).max().unwrap_or(2) as f64;
    let panel_defs: [(&str, Get); 2] =
        [("Mpps (saturated)", |r, m| r.1[m] / 1e6), ("p50 latency (µs) at 20% load", |r, m| r.2[m] / 1e3)];
    for (panel, (y_label, get)) in panels.iter().zip(panel_defs) {
        let y_max = rows.iter().flat_map(|r| (0..3).map(move |m| get(r, m))).fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d((x_min - 0.3)..(x_max + 0.3), 0.0..(y_max * 1.15).max(0.1))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("tasks in the chain")
            .y_desc(y_label)
            .label_style(("sans-serif", 13))
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err)?;
        for (m, name) in ["snic", "panic", "rtc"].iter().enumerate() {
            let pts: Vec<(f64, f64)> = rows.iter().map(|r| (r.0 as f64, get(r, m))).collect();
            line(&mut chart, &pts, COLORS[m], *name, true)?;
        }
        legend(&mut chart)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Writes chain.png and chain.svg into `dir`.
pub fn chain(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let png = dir.join("chain.png");
    let svg = dir.join("chain.svg");
    chain_figure(BitMapBackend::new(&png, (1200, 480)).into_drawing_area(), rows)?;
    chain_figure(SVGBackend::new(&svg, (1200, 480)).into_drawing_area(), rows)?;
    Ok(vec![png, svg])
}

/// `tern bench chain --fairness`'s figure's data.
pub struct FairnessFigure {
    /// (case, scheme, aggregate over what the cores carry for the mix).
    pub allocations: Vec<(&'static str, &'static str, f64)>,
    /// One autoscaling run: (ms, offered pps, delivered pps, instances in service).
    pub scaling: Vec<(f64, f64, f64, usize)>,
    /// What one instance carries, pps.
    pub instance_pps: f64,
    /// (workload, kops/s with the cache, without).
    pub ycsb: Vec<(char, f64, f64)>,
}

/// Bars of `values` (label, value) in groups of `per_group`, coloured by position in the group.
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    groups: &[(String, Vec<(String, f64)>)],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let per = groups.iter().map(|g| g.1.len()).max().unwrap_or(1).max(1);
    let y_max = groups.iter().flat_map(|g| g.1.iter().map(|v| v.1)).fold(0.0f64, f64::max);
    let n = groups.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n, 0.0..(y_max * 1.2).max(0.1))
        .map_err(err)?;
    let names: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
    chart
        .configure_mesh()
        .y_desc(y_label)
        .label_style(("sans-serif", 13))
        .light_line_style(TRANSPARENT)
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|v| {
            let i = (*v - 0.5).round();
            if (*v - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(err)?;
    let w = 0.8 / per as f64;
    for k in 0..per {
        let c = COLORS[k % COLORS.len()];
        let label = groups.iter().find_map(|g| g.1.get(k).map(|v| v.0.clone())).unwrap_or_default();
        chart
            .draw_series(groups.iter().enumerate().filter_map(|(g, (_, vals))| {
                let v = vals.get(k)?.1;
                let x0 = g as f64 + 0.1 + k as f64 * w;
                Some(Rectangle::new([(x0, 0.0), (x0 + w * 0.9, v)], c.filled()))
            }))
            .map_err(err)?
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
    }
    legend(&mut chart)
}

fn fairness_figure<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    f: &FairnessFigure,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let panels = crate::plot::titled_panels(&root, "SuperNIC §5.3–5.4 on real traffic (2 cores)", 18, (1, 3))?;
    // Allocations: aggregate over capacity, by case and scheme.
    let mut cases: Vec<(String, Vec<(String, f64)>)> = Vec::new();
    for (case, scheme, v) in &f.allocations {
        let name = if *case == "A" { "both unbounded".to_string() } else { "user 1 at 40%".to_string() };
        match cases.iter_mut().find(|c| c.0 == name) {
            Some(c) => c.1.push((scheme.to_string(), *v)),
            None => cases.push((name, vec![(scheme.to_string(), *v)])),
        }
    }
    bars(&panels[0], "aggregate / what the cores carry", "fraction", &cases)?;
    // Autoscaling on Figure 15's trace.
    let x_max = f.scaling.iter().map(|b| b.0).fold(1.0f64, f64::max);
    let y_max = f.scaling.iter().map(|b| b.1.max(b.2)).fold(1.0f64, f64::max) / 1e3;
    let mut chart = ChartBuilder::on(&panels[1])
        .caption("autoscaling, Figure 15's trace", ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max * 1.2)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("ms")
        .y_desc("kpps")
        .label_style(("sans-serif", 13))
        .light_line_style(TRANSPARENT)
        .draw()
        .map_err(err)?;
    let lines: [(&str, Vec<(f64, f64)>); 3] = [
        ("offered", f.scaling.iter().map(|b| (b.0, b.1 / 1e3)).collect()),
        ("delivered", f.scaling.iter().map(|b| (b.0, b.2 / 1e3)).collect()),
        ("in service x capacity", f.scaling.iter().map(|b| (b.0, b.3 as f64 * f.instance_pps / 1e3)).collect()),
    ];
    for (i, (name, pts)) in lines.into_iter().enumerate() {
        line(&mut chart, &pts, COLORS[i], name, false)?;
    }
    legend(&mut chart)?;
    // YCSB.
    let groups: Vec<(String, Vec<(String, f64)>)> = f
        .ycsb
        .iter()
        .map(|(w, with, without)| {
            (format!("YCSB {w}"), vec![("gbn + KV cache".to_string(), *with), ("gbn alone".to_string(), *without)])
        })
        .collect();
    bars(&panels[2], "YCSB, server link a tenth", "kops/s", &groups)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Writes chain-fairness.png and .svg into `dir`.
pub fn fairness(f: &FairnessFigure, dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let png = dir.join("chain-fairness.png");
    let svg = dir.join("chain-fairness.svg");
    fairness_figure(BitMapBackend::new(&png, (1500, 480)).into_drawing_area(), f)?;
    fairness_figure(SVGBackend::new(&svg, (1500, 480)).into_drawing_area(), f)?;
    Ok(vec![png, svg])
}
