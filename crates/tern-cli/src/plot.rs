//! Benchmark plots (PNG and SVG) with plotters and a bundled font (DejaVu Sans Mono, see
//! `assets/DejaVu-LICENSE.txt`), so they render the same on any machine.

use std::sync::Once;

use plotters::prelude::*;

const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");
pub(crate) const COLORS: [RGBColor; 5] = [
    RGBColor(200, 30, 30),
    RGBColor(30, 90, 200),
    RGBColor(30, 150, 60),
    RGBColor(150, 90, 10),
    RGBColor(120, 40, 160),
];

pub(crate) fn register_font() -> Result<(), String> {
    static ONCE: Once = Once::new();
    let mut result = Ok(());
    ONCE.call_once(|| {
        result = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
            .map_err(|_| "the bundled font did not load".to_string());
    });
    result
}

pub(crate) type Series = Vec<(String, Vec<(f64, f64)>)>;

/// The series legend every figure draws: white, framed, 13-point labels.
pub(crate) fn legend<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    legend_at(chart, SeriesLabelPosition::MiddleRight)
}

/// [`legend`] at `at`.
pub(crate) fn legend_at<'a, DB: DrawingBackend + 'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(at)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())
}

/// A figure's frame: `root` filled white, `title` on top in `size`-point type, and the rest
/// split into `grid` (rows, columns) panels, left to right, top to bottom.
pub(crate) fn titled_panels<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    size: u32,
    grid: (usize, usize),
) -> Result<Vec<DrawingArea<DB, plotters::coord::Shift>>, String>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let area = root.titled(title, ("sans-serif", size)).map_err(|e| e.to_string())?;
    Ok(area.split_evenly(grid))
}

/// Draws one series: a 2-pixel line in `c` named `name` in the legend (its swatch a short
/// line of the same colour) and, with `marks`, a dot at each point.
pub(crate) fn line<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    pts: &[(f64, f64)],
    c: RGBColor,
    name: impl Into<String>,
    marks: bool,
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    CT: plotters::coord::CoordTranslate<From = (f64, f64)>,
{
    chart
        .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
        .map_err(|e| e.to_string())?
        .label(name)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    if marks {
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One figure: requests/s (left) and p99 latency (right) against `x_label`, one line per series.
pub(crate) fn figure<DB: DrawingBackend>(
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
    let panels = crate::plot::titled_panels(&root, title, 20, (1, 2))?;
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
            line(&mut chart, pts, COLORS[i % COLORS.len()], name.clone(), true)?;
        }
        legend(&mut chart)?;
    }
    root.present().map_err(err)?;
    Ok(())
}
