//! What every benchmark writes: its JSON report, and spreads over rounds.

use std::path::PathBuf;

use tern_chain::bench::median;

/// Puts `summary`'s keys at the top level of `report` and writes it as `name` under `out`.
pub(crate) fn write_report(
    out: &std::path::Path,
    name: &str,
    report: &mut serde_json::Value,
    summary: &serde_json::Value,
) -> Result<PathBuf, Box<dyn std::error::Error>> {
    if let (Some(r), Some(s)) = (report.as_object_mut(), summary.as_object()) {
        for (k, v) in s {
            r.insert(k.clone(), v.clone());
        }
    }
    std::fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let path = out.join(name);
    std::fs::write(&path, serde_json::to_string_pretty(report)? + "\n")?;
    Ok(path)
}

/// Median, min and max of per-round values.
pub(crate) fn spread(r: &[f64]) -> (f64, f64, f64) {
    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (median(r), lo, hi)
}
