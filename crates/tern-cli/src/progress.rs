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
