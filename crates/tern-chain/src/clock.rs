//! The data path's clock: [`now`] gives an [`Instant`] read on the CPU's time-stamp counter
//! (through `quanta`, the clock [`crate::task::Busy`] spins on) rather than the OS's.
//!
//! On this project's hosts `Instant::now` costs about 27 ns a reading and this about 13 (a
//! loop of 2,000,000 readings each). The worker cores read the clock once or more a batch (a
//! batch's start for its tasks, the scheduler's round, idle spells, the timed batches): under
//! `perf`, a chain of four dummy tasks in `snic` spent 5.2% of core 0 and 5.3% of core 1 in the
//! OS's clock, and 1.4% and 0.5% with this (its counter readings then count in
//! `quanta::Clock::raw`, with the dummies' own).
//!
//! Each thread keeps a base: an `Instant` read from the OS and the counter's reading with it
//! (the midpoint of two counter readings either side of the OS's, the narrowest pair of up to
//! [`BASE_TRIES`]: a pair that a preemption split would put every reading until the next rebase
//! off by the preemption). A reading is the base plus the counter's time since, and a base older
//! than [`REBASE_NS`] is read anew, so a reading is off the OS's clock by at most the counter's
//! calibration error over that time (16 ns or less just before a rebase in three runs of the
//! test here, which allows 2 µs). Across a rebase a reading may step back by that much; the runtime subtracts instants
//! only with saturating subtractions (`Instant - Instant` saturates), so a step back reads as no
//! time passed. Where the counter is not usable (no invariant TSC), `quanta` reads the OS's
//! monotonic clock itself.
use std::cell::Cell;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How old a thread's base may grow before it is read again from the OS, ns (about 1 ms).
pub const REBASE_NS: u64 = 1 << 20;

/// Pairs of counter readings around the OS's read for a base, at most: the first narrower than
/// [`BRACKET_NS`] is taken, else the narrowest.
pub const BASE_TRIES: usize = 4;

/// A pair of counter readings around the OS's narrower than this is taken as the base at once,
/// ns (a pair is some 30–60 ns apart here when nothing comes between).
pub const BRACKET_NS: u64 = 500;

/// The process's counter, calibrated once (under a millisecond); [`crate::task::Busy`] spins on
/// a copy.
pub(crate) fn counter() -> &'static quanta::Clock {
    static CLOCK: OnceLock<quanta::Clock> = OnceLock::new();
    CLOCK.get_or_init(quanta::Clock::new)
}

thread_local! {
    /// This thread's base: an OS reading and the counter's reading taken with it.
    static BASE: Cell<Option<(Instant, u64)>> = const { Cell::new(None) };
}

/// The time now, read on the time-stamp counter (see the module's documentation).
#[inline]
pub fn now() -> Instant {
    let c = counter();
    let raw = c.raw();
    BASE.with(|b| {
        if let Some((at, base)) = b.get() {
            let ns = c.delta_as_nanos(base, raw);
            if ns < REBASE_NS {
                return at + Duration::from_nanos(ns);
            }
        }
        let (at, base) = base_from(|| c.raw(), Instant::now, |a, z| c.delta_as_nanos(a, z));
        b.set(Some((at, base)));
        at
    })
}

/// A base: an OS reading (`os`) and the counter's (`raw`, its differences in ns by `ns`) at the
/// same moment, as the module's documentation says.
#[cold]
fn base_from(
    mut raw: impl FnMut() -> u64,
    mut os: impl FnMut() -> Instant,
    ns: impl Fn(u64, u64) -> u64,
) -> (Instant, u64) {
    let mut pair = || {
        let before = raw();
        let at = os();
        let after = raw();
        (ns(before, after), at, before.wrapping_add(after.saturating_sub(before) / 2))
    };
    let mut best = pair();
    for _ in 1..BASE_TRIES {
        if best.0 < BRACKET_NS {
            break;
        }
        let next = pair();
        if next.0 < best.0 {
            best = next;
        }
    }
    (best.1, best.2)
}

/// The time since `t` by [`now`] (zero if `t` is later: a reading across a rebase).
#[inline]
pub fn since(t: Instant) -> Duration {
    now().saturating_duration_since(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readings of both clocks back to back, the least gap of `tries` (a preemption between
    /// the two only widens a gap), ns.
    fn least_gap(tries: usize) -> u64 {
        (0..tries)
            .map(|_| {
                let a = now();
                let b = Instant::now();
                let c = now();
                // The OS reading lies between the two of ours, within the error.
                let lo = b.saturating_duration_since(c).as_nanos() as u64;
                let hi = a.saturating_duration_since(b).as_nanos() as u64;
                lo.max(hi)
            })
            .min()
            .unwrap_or(u64::MAX)
    }

    #[test]
    fn readings_stay_with_the_os_clock_across_rebases() {
        // At the start, and after sleeps long enough for the base to be read again.
        assert!(least_gap(100) < 2_000);
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(3));
            assert!(least_gap(100) < 2_000);
        }
        // And just before a rebase: the counter's error over most of REBASE_NS.
        let start = now();
        while now().saturating_duration_since(start) < Duration::from_nanos(REBASE_NS * 9 / 10) {}
        assert!(least_gap(20) < 2_000);
    }

    #[test]
    fn a_base_read_across_a_preemption_is_read_again() {
        // A made-up time line in ns: each reading of either clock takes 10, and the first OS
        // reading is followed by a 5 µs preemption (before the counter is read again).
        let origin = Instant::now();
        let t = Cell::new(0u64);
        let preempt = Cell::new(true);
        let raw = || {
            t.set(t.get() + 10);
            t.get()
        };
        let os = || {
            t.set(t.get() + 10);
            let at = origin + Duration::from_nanos(t.get());
            if preempt.replace(false) {
                t.set(t.get() + 5_000);
            }
            at
        };
        let (at, base) = base_from(raw, os, |a, z| z.saturating_sub(a));
        // The OS reading's time and the counter's base agree (here 0 ns), not 2.5 µs apart.
        let off = (at - origin).as_nanos() as i128 - i128::from(base);
        assert!(off.abs() < 100, "the base is {off} ns off the OS reading");
        // Without a preemption, the first pair is taken.
        let (t0, at_base) = (t.get(), base_from(raw, os, |a, z| z.saturating_sub(a)));
        assert_eq!(at_base.1, t0 + 20);
        assert_eq!(t.get(), t0 + 30);
    }

    #[test]
    fn readings_move_forward_with_time() {
        let a = now();
        std::thread::sleep(Duration::from_millis(2));
        let b = now();
        // At least the sleep, less the error.
        assert!(b.saturating_duration_since(a) >= Duration::from_micros(1_900));
        // Each thread has its own base.
        let other = std::thread::spawn(now).join().unwrap();
        assert!(other >= a);
    }
}
