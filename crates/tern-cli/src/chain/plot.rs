//! `tern bench chain`'s figure: throughput and p50 latency against chain length, per mode.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::plot::{COLORS, legend, register_font};

/// (tasks, pps by mode, p50 ns by mode): snic, panic, rtc.
pub type Row = (usize, [f64; 3], [f64; 3]);

/// A panel's value of a row and mode.
type Get = fn(&Row, usize) -> f64;

fn chain_figure<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, rows: &[Row]) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root
        .titled("SuperNIC data path (snic) vs PANIC vs run to completion: chains of dummy tasks", ("sans-serif", 18))
        .map_err(err)?;
    let panels = root.split_evenly((1, 2));
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
            let c = COLORS[m];
            let pts: Vec<(f64, f64)> = rows.iter().map(|r| (r.0 as f64, get(r, m))).collect();
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(err)?
                .label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(err)?;
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
