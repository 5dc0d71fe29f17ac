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
