//! Progress on a terminal for long runs (benchmarks, `dispatch load`, the demo's parts): an
//! indicatif bar on stderr, shown only when stderr is a terminal and the command is not printing
//! JSON, so logs and pipelines stay quiet.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// Whether progress should be drawn: stderr is a terminal and the output is not JSON.
pub fn wanted(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

/// A bar of `total` steps labelled `what`, hidden unless [`wanted`].
pub fn bar(total: u64, what: &str, json: bool) -> ProgressBar {
    if !wanted(json) {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(total);
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} (~{eta} left) {msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    pb.set_style(style);
    pb.set_prefix(what.to_string());
    pb
}

/// Runs `f`, showing a bar that fills over `expected` (the run's planned length) unless hidden.
pub fn timed<T>(what: &str, expected: Duration, json: bool, f: impl FnOnce() -> T) -> T {
    if !wanted(json) {
        return f();
    }
    let ms = expected.as_millis().max(1) as u64;
    let pb = ProgressBar::new(ms);
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {elapsed_precise} of ~{msg}")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    pb.set_style(style);
    pb.set_prefix(what.to_string());
    pb.set_message(format!("{:.0} s", expected.as_secs_f64()));
    let done = Arc::new(AtomicBool::new(false));
    let ticker = {
        let (pb, done) = (pb.clone(), done.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) {
                pb.set_position((start.elapsed().as_millis() as u64).min(ms));
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let out = f();
    done.store(true, Ordering::Relaxed);
    let _ = ticker.join();
    pb.finish_and_clear();
    out
}

/// When a server's one-line progress report is due (`--stats-interval SECONDS`; 0: never): every
/// interval from the first look, which starts the schedule (a server looks from its serving
/// loop, so what it does before, such as loading a store, does not count). A report that comes
/// late (the process was stopped a while) moves the next one an interval on from then, rather
/// than letting the missed ones come in a burst.
#[derive(Debug, Clone, Copy)]
pub struct Ticker {
    every: Option<Duration>,
    next: Option<Instant>,
    /// The last report (or the start): when, and the count it reported (for the rate since).
    pub last: (Instant, u64),
}

impl Ticker {
    /// Every `secs` seconds (0: never); an error names the flag's value outside 0 to 86,400.
    pub fn new(secs: f64) -> Result<Ticker, String> {
        if !(0.0..=86_400.0).contains(&secs) {
            return Err(format!("--stats-interval {secs}: must be in [0, 86400] seconds"));
        }
        Ok(Ticker { every: (secs > 0.0).then(|| Duration::from_secs_f64(secs)), next: None, last: (Instant::now(), 0) })
    }

    /// Whether a report is due at `now` (then the next is scheduled); the first look starts the
    /// schedule.
    pub fn due(&mut self, now: Instant) -> bool {
        let Some(every) = self.every else { return false };
        let Some(next) = self.next else {
            self.next = Some(now + every);
            self.last = (now, 0);
            return false;
        };
        if now < next {
            return false;
        }
        self.next = Some(if next + every <= now { now + every } else { next + every });
        true
    }

    /// The rate a second of `count` since the last report, and notes this report (at `now`).
    pub fn rate(&mut self, count: u64, now: Instant) -> (f64, f64) {
        let secs = now.saturating_duration_since(self.last.0).as_secs_f64();
        let rate = count.saturating_sub(self.last.1) as f64 / secs.max(1e-9);
        self.last = (now, count);
        (rate, secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticker_is_due_each_interval_and_a_late_one_does_not_burst() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut t = Ticker::new(1.0).unwrap();
        assert!(!t.due(t0) && !t.due(t0 + s / 2), "the first look starts the schedule");
        assert!(t.due(t0 + s) && !t.due(t0 + s));
        assert!(t.due(t0 + 2 * s));
        // Stopped for 10 s: one report, then the next an interval on.
        assert!(t.due(t0 + 12 * s) && !t.due(t0 + 12 * s + s / 2));
        assert!(t.due(t0 + 13 * s));
        assert_eq!(t.rate(50, t0 + 10 * s), (5.0, 10.0));
        assert_eq!(t.rate(80, t0 + 13 * s), (10.0, 3.0));
        let mut never = Ticker::new(0.0).unwrap();
        assert!(!never.due(t0 + 1000 * s));
        for bad in [-1.0, 86_401.0, f64::NAN] {
            assert!(Ticker::new(bad).unwrap_err().contains("--stats-interval"), "{bad}");
        }
    }
}
