//! `tern bench dispatch`'s figures: requests/s and p99 per mode along each swept dimension.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use tern_dispatch::bench::{Dimension, PointResult};

use crate::plot::{Series, figure, register_font};

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
