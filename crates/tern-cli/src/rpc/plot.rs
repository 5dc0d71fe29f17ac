//! `tern bench rpc`'s figures: per workload, the peers' time over Tern's (above 1: Tern faster)
//! for decode against prost and prost-reflect and encode against prost; and with `--apps`, per
//! service, the host CPU per call in each mode.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::plot::{COLORS, register_font};

/// (workload, decode/prost, decode/prost-reflect, encode/prost) medians.
pub type Row = (String, f64, f64, f64);

const METRICS: [&str; 3] = ["decode vs prost", "decode vs prost-reflect", "encode vs prost"];

/// Grouped bars: per row (a workload), one bar per series.
struct Bars<'a> {
    rows: &'a [(String, Vec<f64>)],
    series: &'a [&'a str],
    y_desc: &'a str,
    title: &'a str,
    /// A line at 1 (for ratios).
    line_at_one: bool,
}

fn figure<DB: DrawingBackend>(root: DrawingArea<DB, plotters::coord::Shift>, b: &Bars<'_>) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let (rows, title) = (b.rows, b.title);
    let root = root.titled(title, ("sans-serif", 18)).map_err(err)?;
    // Bar j: workload j / k, series j % k (the last slot is a gap).
    let k = b.series.len() + 1;
    let n = (rows.len() * k) as u32;
    let y_max = rows.iter().flat_map(|r| r.1.iter().copied()).fold(if b.line_at_one { 1.0f64 } else { 0.0 }, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..n).into_segmented(), 0.0..y_max * 1.15)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n as usize)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(j) if (*j as usize) % k == (k - 1) / 2 => {
                rows.get(*j as usize / k).map_or(String::new(), |r| r.0.clone())
            }
            _ => String::new(),
        })
        .y_desc(b.y_desc)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    for (m, name) in b.series.iter().enumerate() {
        let color = COLORS[m % COLORS.len()];
        chart
            .draw_series(rows.iter().enumerate().map(|(w, r)| {
                let v = r.1.get(m).copied().unwrap_or(0.0);
                let x = (w * k + m) as u32;
                let mut bar =
                    Rectangle::new([(SegmentValue::Exact(x), 0.0), (SegmentValue::Exact(x + 1), v)], color.filled());
                bar.set_margin(0, 0, 2, 2);
                bar
            }))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    if b.line_at_one {
        chart
            .draw_series(LineSeries::new(
                [(SegmentValue::Exact(0), 1.0), (SegmentValue::Exact(n), 1.0)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(if b.line_at_one { SeriesLabelPosition::UpperLeft } else { SeriesLabelPosition::UpperRight })
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

fn write(b: &Bars<'_>, dir: &Path, name: &str) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let png = dir.join(format!("{name}.png"));
    let svg = dir.join(format!("{name}.svg"));
    figure(BitMapBackend::new(&png, (1400, 520)).into_drawing_area(), b)?;
    figure(SVGBackend::new(&svg, (1400, 520)).into_drawing_area(), b)?;
    Ok(vec![png, svg])
}

/// Writes `rpc.png` and `rpc.svg` into `dir`.
pub fn rpc(rows: &[Row], title: &str, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let rows: Vec<(String, Vec<f64>)> = rows.iter().map(|r| (r.0.clone(), vec![r.1, r.2, r.3])).collect();
    let y_desc = "peer's time / Tern's time (above 1: Tern faster)";
    write(&Bars { rows: &rows, series: &METRICS, y_desc, title, line_at_one: true }, dir, "rpc")
}

/// Writes `rpc-apps.png` and `.svg` into `dir`: per service, host CPU per call in each mode.
pub fn apps(rows: &[(String, Vec<f64>)], modes: &[&str], title: &str, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let y_desc = "host CPU per call, us (measured here)";
    write(&Bars { rows, series: modes, y_desc, title, line_at_one: false }, dir, "rpc-apps")
}
