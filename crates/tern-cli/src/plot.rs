//! Benchmark plots (PNG and SVG) with plotters and a bundled font (DejaVu Sans Mono, see
//! `assets/DejaVu-LICENSE.txt`), so they render the same on any machine.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::prelude::*;
use tern_dispatch::bench::{Dimension, PointResult};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
const COLORS: [RGBColor; 4] =
    [RGBColor(200, 30, 30), RGBColor(30, 90, 200), RGBColor(30, 150, 60), RGBColor(150, 90, 10)];

fn register_font() -> Result<(), String> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "the bundled font did not load".to_string());
    });
    result
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

/// The series legend every figure draws: white, framed, 13-point labels.
fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())
}

/// One figure: requests/s (left) and p99 latency (right) against `x_label`, one line per series.
fn figure<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    rps: &Series,
    p99: &Series,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(err)?;
    let panels = root.split_evenly((1, 2));
    for (panel, (series, y_label)) in panels.iter().zip([(rps, "requests/s"), (p99, "p99 latency (µs)")]) {
        let xs = series.iter().flat_map(|(_, v)| v.iter().map(|p| p.0));
        let (x_min, x_max) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
        let y_max = series.iter().flat_map(|(_, v)| v.iter().map(|p| p.1)).fold(0.0f64, f64::max);
        let (x_min, x_max) = if x_min <= x_max { (x_min.max(0.5), x_max.max(x_min * 2.0)) } else { (1.0, 2.0) };
        let mut chart = ChartBuilder::on(panel)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x_min..x_max * 1.05).log_scale(), 0.0..(y_max * 1.15).max(1.0))
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 13))
            .light_line_style(TRANSPARENT)
            .x_labels(10)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| if *v >= 1e4 { format!("{:.0}k", v / 1e3) } else { format!("{v:.0}") })
            .draw()
            .map_err(err)?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let c = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(err)?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(err)?;
        }
        legend(&mut chart)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Writes one PNG and one SVG per swept dimension; returns the paths.
pub fn dispatch(results: &[PointResult], dir: &Path) -> Result<Vec<PathBuf>, String> {
    register_font()?;
    let default = results.iter().find(|p| p.dimension == Dimension::Default);
    let mut written = Vec::new();
    for (dim, label, value) in [
        (Dimension::Checks, "skip-and-checks per rule", (|p: &PointResult| p.spec.checks) as fn(&PointResult) -> u32),
        (Dimension::Rules, "rules", |p: &PointResult| p.spec.rules),
        (Dimension::Bytes, "matched bytes per check", |p: &PointResult| p.spec.bytes),
    ] {
        let mut pts: Vec<&PointResult> = results.iter().filter(|p| p.dimension == dim).collect();
        pts.extend(default);
        if pts.len() < 2 {
            continue;
        }
        pts.sort_by_key(|p| value(p));
        let modes: Vec<_> = pts[0].modes.iter().map(|(m, _)| *m).collect();
        let mut rps: Series = Vec::new();
        let mut p99: Series = Vec::new();
        for m in modes {
            let get = |f: fn(&tern_dispatch::bench::ModeResult) -> f64| {
                pts.iter().filter_map(|p| p.mode(m).map(|r| (f64::from(value(p)), f(r)))).collect::<Vec<_>>()
            };
            rps.push((m.as_str().to_string(), get(|r| r.median_rps())));
            p99.push((m.as_str().to_string(), get(|r| r.median_p99_us())));
        }
        let title = format!("KV GET dispatch vs {label} (others at 4 checks / 32 rules / 5 bytes)");
        let png = dir.join(format!("dispatch-{}.png", dim.as_str()));
        let svg = dir.join(format!("dispatch-{}.svg", dim.as_str()));
        figure(BitMapBackend::new(&png, (1200, 480)).into_drawing_area(), &title, label, &rps, &p99)?;
        figure(SVGBackend::new(&svg, (1200, 480)).into_drawing_area(), &title, label, &rps, &p99)?;
        written.push(png);
        written.push(svg);
    }
    Ok(written)
}

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
    root.fill(&WHITE).map_err(err)?;
    let ratios: Vec<String> = sizes.iter().map(|s| format!("{} B: {:.2}x", s.0, s.1)).collect();
    let title = format!("AccelSDP switch: cached fast path vs slow path only ({})", ratios.join(", "));
    let root = root.titled(&title, ("sans-serif", 18)).map_err(err)?;
    let panels = root.split_evenly((1, 2));
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
