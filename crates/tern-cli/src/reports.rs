//! What every benchmark writes: its JSON report, spreads over rounds, and its targets judged.

use std::path::PathBuf;

use serde_json::json;
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

/// A bench's targets: each figure of its summary, its bound, and whether the figure must be at
/// least the bound (else at most).
pub(crate) type Targets = [(&'static str, f64, bool)];

/// One target against a run's figure.
#[derive(Debug)]
pub(crate) struct Verdict {
    pub name: &'static str,
    /// The run's figure (None: the run did not measure it, as `tern bench chain --lengths 2`
    /// does not measure the throughput ratios, judged from 4 tasks).
    figure: Option<f64>,
    bound: f64,
    at_least: bool,
    met: bool,
}

/// Each of `targets` against the summary's figure of the same name; one the run did not
/// measure is not met.
pub(crate) fn verdicts(targets: &Targets, summary: &serde_json::Value) -> Vec<Verdict> {
    targets
        .iter()
        .map(|&(name, bound, at_least)| {
            let figure = summary.get(name).and_then(serde_json::Value::as_f64);
            let met = figure.is_some_and(|f| if at_least { f >= bound } else { f <= bound });
            Verdict { name, figure, bound, at_least, met }
        })
        .collect()
}

/// Judges `figures` (a summary; None: the report's own top level, where a bench keeps its
/// figures there) against `targets`: puts the bounds (`targets`) and the verdicts (`met`) into
/// `report` and returns the [`verdict_line`] to print, each figure's `whence` beside it.
pub(crate) fn judge(
    report: &mut serde_json::Value,
    targets: &Targets,
    figures: Option<&serde_json::Value>,
    whence: &[(&str, String)],
) -> String {
    let verdicts = verdicts(targets, figures.unwrap_or(report));
    report["targets"] = targets_json(targets);
    report["met"] = met_json(&verdicts);
    verdict_line(&verdicts, whence)
}

/// The JSON's `targets`: each bound by name.
fn targets_json(targets: &Targets) -> serde_json::Value {
    targets.iter().map(|&(name, bound, _)| (name.to_string(), json!(bound))).collect::<serde_json::Map<_, _>>().into()
}

/// The JSON's `met`: each verdict by name.
fn met_json(verdicts: &[Verdict]) -> serde_json::Value {
    verdicts.iter().map(|v| (v.name.to_string(), json!(v.met))).collect::<serde_json::Map<_, _>>().into()
}

/// `targets: NAME FIGURE >= BOUND met (WHERE); ...`, with a word on the cores where one not
/// met ran on cores far apart (a round trip over 200 ns).
pub(crate) fn verdict_line(verdicts: &[Verdict], whence: &[(&str, String)]) -> String {
    let mut far = false;
    let parts: Vec<String> = verdicts
        .iter()
        .map(|v| {
            let at = whence.iter().find(|(n, _)| *n == v.name).map(|(_, w)| w.as_str()).unwrap_or("");
            if !v.met && far_apart(at) {
                far = true;
            }
            format!(
                "{} {} {} {} {}{}",
                v.name,
                v.figure.map_or("not measured".to_string(), |f| format!("{f:.3}")),
                if v.at_least { ">=" } else { "<=" },
                v.bound,
                if v.met { "met" } else { "NOT MET" },
                if at.is_empty() { String::new() } else { format!(" ({at})") },
            )
        })
        .collect();
    let mut line = format!("targets: {}", parts.join("; "));
    if far {
        line += " | a target was missed on cores far apart (round trip over 200 ns): moving packets between \
                 cores costs more there; docs/chain.md, \"Where it stands\"";
    }
    line
}

/// Whether a `whence` text's round trips (`…round trip B/A ns`) say the cores were far apart.
fn far_apart(at: &str) -> bool {
    at.rsplit_once("round trip ")
        .and_then(|(_, r)| r.strip_suffix(" ns"))
        .map(|r| r.split('/').filter_map(|x| x.parse::<f64>().ok()).any(|x| x > 200.0))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::bench::TARGETS;

    #[test]
    fn verdicts_judge_each_target_in_its_direction_and_name_what_is_missing() {
        let s = json!({
            "latency_reduction_vs_panic": 0.41, "throughput_over_panic": 1.2, "throughput_over_rtc": null,
            "scheduler_ns_per_packet": 64.5, "aes_two_over_one": 1.6, "sharing_gain_per_region": 3.0,
        });
        let v = verdicts(&TARGETS, &s);
        let met: Vec<(&str, bool)> = v.iter().map(|v| (v.name, v.met)).collect();
        assert_eq!(
            met,
            [
                ("latency_reduction_vs_panic", true),
                ("throughput_over_panic", false),
                ("throughput_over_rtc", false),
                ("scheduler_ns_per_packet", false),
                ("aes_two_over_one", true),
                ("sharing_gain_per_region", true),
            ]
        );
        assert_eq!(v[2].figure, None);
        let line = verdict_line(&v, &[("throughput_over_panic", "4 tasks, cores' round trip 90/310 ns".into())]);
        assert!(
            line.contains("throughput_over_panic 1.200 >= 1.3 NOT MET (4 tasks, cores' round trip 90/310 ns)"),
            "{line}"
        );
        assert!(line.contains("throughput_over_rtc not measured >= 0.75 NOT MET"), "{line}");
        assert!(line.contains("scheduler_ns_per_packet 64.500 <= 64 NOT MET"), "{line}");
        assert!(line.contains("cores far apart"), "{line}");
        // Near cores: no word on the placement.
        let near = verdict_line(&v, &[("throughput_over_panic", "4 tasks, cores' round trip 90/80 ns".into())]);
        assert!(!near.contains("far apart"), "{near}");
    }

    #[test]
    fn far_apart_reads_the_round_trips() {
        assert!(far_apart("4 tasks, cores' round trip 90/310 ns"));
        assert!(far_apart("cores' round trip 250/70 ns"));
        assert!(!far_apart("cores' round trip 120/135 ns"));
        assert!(!far_apart(""));
        assert!(!far_apart("round trip x/y ns"));
    }
}
