//! `tern bench rpc`'s figure: per workload, the peers' time over Tern's (above 1: Tern faster)
//! for decode against prost and prost-reflect and encode against prost.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::plot::{COLORS, register_font};

/// (workload, decode/prost, decode/prost-reflect, encode/prost) medians.
pub type Row = (String, f64, f64, f64);

const METRICS: [&str; 3] = ["decode vs prost", "decode vs prost-reflect", "encode vs prost"];

fn figure<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    rows: &[Row],
    title: &str,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 18)).map_err(err)?;
    // Bar j: workload j / 4, metric j % 4 (the fourth slot is a gap).
    let n = (rows.len() * 4) as u32;
    let y_max = rows.iter().flat_map(|r| [r.1, r.2, r.3]).fold(1.0f64, f64::max);
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
            SegmentValue::CenterOf(j) if j % 4 == 1 => {
                rows.get((*j / 4) as usize).map_or(String::new(), |r| r.0.clone())
            }
            _ => String::new(),
        })
        .y_desc("peer's time / Tern's time (above 1: Tern faster)")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    for (m, name) in METRICS.iter().enumerate() {
        let color = COLORS[m % COLORS.len()];
        chart
            .draw_series(rows.iter().enumerate().map(|(w, r)| {
                let v = [r.1, r.2, r.3][m];
                let x = (w * 4 + m) as u32;
                let mut bar =
                    Rectangle::new([(SegmentValue::Exact(x), 0.0), (SegmentValue::Exact(x + 1), v)], color.filled());
                bar.set_margin(0, 0, 2, 2);
                bar
            }))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
    }
    chart
        .draw_series(LineSeries::new(
            [(SegmentValue::Exact(0), 1.0), (SegmentValue::Exact(n), 1.0)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Writes `rpc.png` and `rpc.svg` into `dir`.
pub fn rpc(rows: &[Row], title: &str, dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let png = dir.join("rpc.png");
    let svg = dir.join("rpc.svg");
    figure(BitMapBackend::new(&png, (1400, 520)).into_drawing_area(), rows, title)?;
    figure(SVGBackend::new(&svg, (1400, 520)).into_drawing_area(), rows, title)?;
    Ok(vec![png, svg])
}
