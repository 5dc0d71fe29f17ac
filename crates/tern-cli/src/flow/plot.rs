//! `tern bench flow`'s figure: fast path against slow path per frame size, and populates/s.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::plot::{COLORS, register_font};

/// A bar filling segment `x` up to `v`, `margin` pixels in from each side.
fn bar(x: u32, v: f64, color: RGBColor, margin: u32) -> Rectangle<(SegmentValue<u32>, f64)> {
    let mut r = Rectangle::new([(SegmentValue::Exact(x), 0.0), (SegmentValue::Exact(x + 1), v)], color.filled());
    r.set_margin(0, 0, margin, margin);
    r
}

fn flow_figure<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    sizes: &[(usize, f64, f64, f64)],
    populate: f64,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let ratios: Vec<String> = sizes.iter().map(|s| format!("{} B: {:.2}x", s.0, s.1)).collect();
    let title = format!("AccelSDP switch: cached fast path vs slow path only ({})", ratios.join(", "));
    let panels = crate::plot::titled_panels(&root, &title, 18, (1, 2))?;
    // One bar per (frame size, path): fast at 2i, slow at 2i + 1.
    let bars: Vec<(u32, f64, String)> = sizes
        .iter()
        .flat_map(|s| [(s.2, format!("{} B fast", s.0)), (s.3, format!("{} B slow", s.0))])
        .enumerate()
        .map(|(j, (v, l))| (j as u32, v / 1e6, l))
        .collect();
    let y_max = bars.iter().map(|b| b.1).fold(0.0f64, f64::max);
    let mut chart = ChartBuilder::on(&panels[0])
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..bars.len() as u32).into_segmented(), 0.0..(y_max * 1.2).max(0.1))
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len().max(1))
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(j) => bars.get(*j as usize).map_or(String::new(), |b| b.2.clone()),
            _ => String::new(),
        })
        .y_desc("Mpps (one core)")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    chart
        .draw_series(bars.iter().map(|b| bar(b.0, b.1, if b.0 % 2 == 0 { COLORS[1] } else { COLORS[0] }, 12)))
        .map_err(err)?;
    let mut chart = ChartBuilder::on(&panels[1])
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((0..2u32).into_segmented(), 0.0..(populate / 1e6).max(0.78) * 1.2)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2)
        .x_label_formatter(&|x| match x {
            SegmentValue::CenterOf(0) => "Tern (OFU API)".into(),
            SegmentValue::CenterOf(1) => "N3000 (Table 5)".into(),
            _ => String::new(),
        })
        .y_desc("LPM+EM rule populates / s (M)")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(err)?;
    chart.draw_series([bar(0, populate / 1e6, COLORS[1], 40), bar(1, 0.78, COLORS[3], 40)]).map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// `tern bench flow`'s figure: (frame bytes, ratio, fast pps, slow pps) per size and the
/// populate rate; PNG and SVG.
pub fn flow(sizes: &[(usize, f64, f64, f64)], populate: f64, dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let png = dir.join("flow.png");
    let svg = dir.join("flow.svg");
    flow_figure(BitMapBackend::new(&png, (1200, 480)).into_drawing_area(), sizes, populate)?;
    flow_figure(SVGBackend::new(&svg, (1200, 480)).into_drawing_area(), sizes, populate)?;
    Ok(vec![png, svg])
}
