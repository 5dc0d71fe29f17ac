//! `tern bench switch`'s figures: throughput over all-server by Zipf α per scheme (Figure 6),
//! and packets per server per slot through the group changes under CLIP and hash-mod
//! (Figure 7).

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use tern_switch::bench::Scaling;

use crate::plot::{COLORS, legend, line, register_font};

/// (α, ratio over all-server by scheme, pps by scheme): all_server, random, sketch, ideal.
pub type Row = (f64, [f64; 4], [f64; 4]);

const SCHEMES: [&str; 4] = ["all-server", "random (w/ R)", "sketch (w/ S)", "ideal (exact top N)"];

fn offload_figure<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, rows: &[Row]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let panels =
        crate::plot::titled_panels(&root, "CLIP heavy-hitter offload: SNAT, 64 B frames, 10^4 flows", 18, (1, 2))?;
    let x_min = rows.iter().map(|r| r.0).fold(f64::INFINITY, f64::min);
    let x_max = rows.iter().map(|r| r.0).fold(f64::NEG_INFINITY, f64::max);
    let (x_min, x_max) = if x_min < x_max { (x_min - 0.05, x_max + 0.05) } else { (x_min - 0.5, x_min + 0.5) };
    type Get = fn(&Row, usize) -> f64;
    let defs: [(&str, Get); 2] = [("kpps out of the switch", |r, s| r.2[s] / 1e3), ("over all-server", |r, s| r.1[s])];
    for (panel, (y_label, get)) in panels.iter().zip(defs) {
        let y_max = rows.iter().flat_map(|r| (0..4).map(move |s| get(r, s))).fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(x_min..x_max, 0.0..(y_max * 1.15).max(0.1))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("Zipf α")
            .y_desc(y_label)
            .label_style(("sans-serif", 13))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(err)?;
        for (s, name) in SCHEMES.iter().enumerate() {
            let pts: Vec<(f64, f64)> = rows.iter().map(|r| (r.0, get(r, s))).collect();
            line(&mut chart, &pts, COLORS[s], *name, true)?;
        }
        legend(&mut chart)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

fn scaling_figure<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, sc: &Scaling) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let title = format!(
        "Group {{0}} -> {{0,1}} -> {{0,1,2}} -> {{1,2}} at slots 10, 20, 30: flows moved CLIP {}, hash-mod {}",
        sc.flows_moved, sc.flows_moved_hash_mod
    );
    let panels = crate::plot::titled_panels(&root, &title, 16, (1, 2))?;
    let y_max = sc.slots.iter().flat_map(|s| s.clip.iter().chain(&s.hash_mod)).copied().max().unwrap_or(1) as f64;
    let n = sc.slots.len() as f64;
    for (panel, (name, hm)) in
        panels.iter().zip([("CLIP (cur + Bloom filters + pins)", false), ("hash-mod ECMP (BMv2)", true)])
    {
        let mut chart = ChartBuilder::on(panel)
            .caption(name, ("sans-serif", 14))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n, 0.0..y_max * 1.15)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("time slot")
            .y_desc("packets a slot")
            .label_style(("sans-serif", 13))
            .light_line_style(TRANSPARENT)
            .draw()
            .map_err(err)?;
        for (s, &c) in COLORS.iter().enumerate().take(3) {
            let pts: Vec<(f64, f64)> =
                sc.slots.iter().map(|x| (x.slot as f64, (if hm { &x.hash_mod } else { &x.clip })[s] as f64)).collect();
            line(&mut chart, &pts, c, format!("server {s}"), false)?;
        }
        legend(&mut chart)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Writes switch-offload.png and .svg under `dir`.
pub fn offload(rows: &[Row], dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let png = dir.join("switch-offload.png");
    let svg = dir.join("switch-offload.svg");
    offload_figure(BitMapBackend::new(&png, (1200, 500)).into_drawing_area(), rows)?;
    offload_figure(SVGBackend::new(&svg, (1200, 500)).into_drawing_area(), rows)?;
    Ok(vec![png, svg])
}

/// Writes switch-scaling.png and .svg under `dir`.
pub fn scaling(sc: &Scaling, dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let png = dir.join("switch-scaling.png");
    let svg = dir.join("switch-scaling.svg");
    scaling_figure(BitMapBackend::new(&png, (1200, 500)).into_drawing_area(), sc)?;
    scaling_figure(SVGBackend::new(&svg, (1200, 500)).into_drawing_area(), sc)?;
    Ok(vec![png, svg])
}

/// One frame size of `tern bench switch --snat`: (system, pps, p50 µs, p99 µs) a system.
#[derive(Debug, Clone)]
pub struct SnatRow {
    pub frame_bytes: usize,
    pub series: Vec<(String, f64, f64, f64)>,
}

fn snat_figure<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    rows: &[SnatRow],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let panels = crate::plot::titled_panels(
        &root,
        "CLIP SNAT on veth (Figure 5): switch only, via servers, and Linux netfilter",
        18,
        (1, 2),
    )?;
    let mut names: Vec<String> = Vec::new();
    for r in rows {
        for s in &r.series {
            if !names.contains(&s.0) {
                names.push(s.0.clone());
            }
        }
    }
    let x_max = rows.iter().map(|r| r.frame_bytes as f64).fold(64.0, f64::max);
    type Get = fn(&(String, f64, f64, f64)) -> f64;
    let defs: [(&str, Get, Option<Get>); 2] = [
        ("kpps delivered (flood)", |s| s.1 / 1e3, None),
        ("one-way latency µs (p50 solid, p99 dashed)", |s| s.2, Some(|s| s.3)),
    ];
    for (panel, (y_label, get, get2)) in panels.iter().zip(defs) {
        let y_max = rows
            .iter()
            .flat_map(|r| r.series.iter().map(move |s| get(s).max(get2.map_or(0.0, |g| g(s)))))
            .fold(0.0f64, f64::max);
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max * 1.05, 0.0..(y_max * 1.45).max(1.0))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("frame bytes")
            .y_desc(y_label)
            .label_style(("sans-serif", 13))
            .light_line_style(TRANSPARENT)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(err)?;
        for (i, name) in names.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            let pts = |g: Get| -> Vec<(f64, f64)> {
                rows.iter()
                    .filter_map(|r| r.series.iter().find(|s| &s.0 == name).map(|s| (r.frame_bytes as f64, g(s))))
                    .collect()
            };
            line(&mut chart, &pts(get), c, name.clone(), true)?;
            if let Some(g) = get2 {
                let tail = pts(g);
                chart.draw_series(DashedLineSeries::new(tail.iter().copied(), 6, 4, c.stroke_width(1))).map_err(err)?;
            }
        }
        crate::plot::legend_at(&mut chart, SeriesLabelPosition::UpperRight)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Writes switch-snat.png and .svg under `dir`.
pub fn snat(rows: &[SnatRow], dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let png = dir.join("switch-snat.png");
    let svg = dir.join("switch-snat.svg");
    snat_figure(BitMapBackend::new(&png, (1300, 520)).into_drawing_area(), rows)?;
    snat_figure(SVGBackend::new(&svg, (1300, 520)).into_drawing_area(), rows)?;
    Ok(vec![png, svg])
}
