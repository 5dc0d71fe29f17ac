//! Process signals, as a server and a command-line tool should treat them.
//!
//! - SIGINT and SIGTERM ask a long-running command to stop: [`stop_flag`] turns them into a flag
//!   the command's loop polls, so it can finish in-flight work, print its summary and remove its
//!   temporary files; a second signal while stopping ends the process at once.
//! - SIGPIPE keeps its default action (end the process quietly), which Rust's runtime replaces
//!   by "ignore", turning `tern ... | head` into a panic on the next write ([`pipe_default`]).

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use signal_hook::consts::{SIGINT, SIGPIPE, SIGTERM};

/// Restores SIGPIPE's default action: a write to a closed pipe ends the process quietly, as it
/// does for `cat` or `grep`.
pub fn pipe_default() -> io::Result<()> {
    signal_hook::flag::register_conditional_default(SIGPIPE, Arc::new(AtomicBool::new(true)))?;
    Ok(())
}

/// A flag set by SIGINT or SIGTERM. A second signal after the first ends the process
/// (exit status 1) without waiting for the command to stop.
pub fn stop_flag() -> io::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 1, stop.clone())?;
        signal_hook::flag::register(sig, stop.clone())?;
    }
    Ok(stop)
}

/// Whether the flag is set.
pub fn stopping(flag: &AtomicBool) -> bool {
    flag.load(Ordering::Relaxed)
}

/// Why a server that has stopped stopped, as its summary says it (`stopped (WHY) after ...`,
/// `stopped_by` in its JSON): `signal` if the flag is set, else `otherwise` (its `--duration`,
/// or its input's end).
pub fn why_stopped(flag: &AtomicBool, otherwise: &'static str) -> &'static str {
    if stopping(flag) { "signal" } else { otherwise }
}

/// The most a server's `--duration` may ask: a year, in seconds.
pub const MAX_DURATION_SECS: f64 = 31_536_000.0;

/// Parses a server's `--duration`: seconds, more than 0 and at most [`MAX_DURATION_SECS`] (a
/// value past that, infinite or not a number is refused here, where it would otherwise stop the
/// server at once or end it with a panic).
pub fn duration_secs(s: &str) -> Result<f64, String> {
    positive_at_most(s, MAX_DURATION_SECS, "seconds", "a year")
}

/// Parses a number more than 0 and at most `most` (`unit`, `most` said as `in_words`): the
/// value parser of a time option, which refuses infinity and NaN.
pub fn positive_at_most(s: &str, most: f64, unit: &str, in_words: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= most => Ok(v),
        _ => Err(format!("give a number of {unit} more than 0 and at most {most} ({in_words})")),
    }
}

/// Sleeps until `until` unless `stop` is set first: it looks at the flag at least every 100 ms,
/// so that a long wait does not hold a stopping server back. Returns whether it slept to the end.
pub fn sleep_unless(stop: &AtomicBool, until: std::time::Instant) -> bool {
    loop {
        let now = std::time::Instant::now();
        if now >= until {
            return true;
        }
        if stopping(stop) {
            return false;
        }
        std::thread::sleep((until - now).min(std::time::Duration::from_millis(100)));
    }
}

/// When a server given `--duration` `secs` (checked by [`duration_secs`]) from `start` stops.
pub fn deadline(start: std::time::Instant, secs: Option<f64>) -> Option<std::time::Instant> {
    secs.map(|d| start + std::time::Duration::from_secs_f64(d.clamp(0.0, MAX_DURATION_SECS)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_is_a_year_at_most_and_more_than_nothing() {
        for ok in ["0.5", "1", "31536000", " 2 "] {
            assert!(duration_secs(ok).is_ok(), "{ok}");
        }
        for bad in ["0", "-1", "inf", "NaN", "1e30", "31536000.5", "", "ten"] {
            let e = duration_secs(bad).unwrap_err();
            assert!(e.contains("more than 0") && e.contains("31536000"), "{bad}: {e}");
        }
        // The deadline of the longest one is an instant (no overflow, no panic).
        let now = std::time::Instant::now();
        assert_eq!(deadline(now, Some(1.0)), Some(now + std::time::Duration::from_secs(1)));
        assert!(deadline(now, Some(MAX_DURATION_SECS)).is_some() && deadline(now, None).is_none());
    }
}
