//! A QNP client's retransmission timers, earliest first.
//!
//! A busy client holds thousands of timers — one per request sent within a retransmission
//! timeout, most of them for requests already answered (a timer is not removed when its request
//! completes; it is skipped when it fires) — and a binary heap pays O(log n) twice for each.
//! But a first transmission's timer is `now + rto`, and `rto` mostly stays put, so those timers
//! arrive in order: they go to a FIFO, popped in O(1). Anything that would break the FIFO's order
//! (an `rto` that fell, a retransmission's backoff) goes to a heap beside it. The earliest timer
//! is the smaller of the two fronts, so timers come out in exactly the order one heap would give
//! (the property test `timers_come_out_as_from_one_heap`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

/// A timer: its deadline, request id and attempt, ordered in that order.
pub(crate) type Timer = (Instant, u32, u32);

#[derive(Debug, Default)]
pub(crate) struct Timers {
    /// Timers pushed in ascending order.
    fifo: VecDeque<Timer>,
    /// The others.
    heap: BinaryHeap<Reverse<Timer>>,
}

impl Timers {
    /// Adds a timer likely to be later than every other (a first transmission's).
    pub(crate) fn push(&mut self, t: Timer) {
        if self.fifo.back().is_none_or(|back| *back <= t) {
            self.fifo.push_back(t);
        } else {
            self.heap.push(Reverse(t));
        }
    }

    /// Adds a timer that may fall anywhere (a retransmission's, whose backoff would push the
    /// FIFO's back out and send the next first transmissions to the heap).
    pub(crate) fn push_anywhere(&mut self, t: Timer) {
        self.heap.push(Reverse(t));
    }

    /// The earliest timer.
    pub(crate) fn peek(&self) -> Option<Timer> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => Some(*a.min(b)),
            (a, b) => a.copied().or(b.map(|r| r.0)),
        }
    }

    /// Takes the earliest timer.
    pub(crate) fn pop(&mut self) -> Option<Timer> {
        let fifo_first = match (self.fifo.front(), self.heap.peek()) {
            (Some(a), Some(Reverse(b))) => a <= b,
            (a, _) => a.is_some(),
        };
        if fifo_first { self.fifo.pop_front() } else { self.heap.pop().map(|r| r.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    #[derive(Debug, Clone)]
    enum Op {
        /// A first transmission: `rto` after the clock.
        Push { rto: u16 },
        /// A retransmission: `backoff` after the clock.
        PushAnywhere { backoff: u16 },
        /// The clock moves on, and every timer due fires.
        Advance { by: u16 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (50u16..60).prop_map(|rto| Op::Push { rto }),
            2 => (0u16..200).prop_map(|rto| Op::Push { rto }),
            2 => (0u16..1000).prop_map(|backoff| Op::PushAnywhere { backoff }),
            3 => (0u16..40).prop_map(|by| Op::Advance { by }),
        ]
    }

    proptest! {
        /// The FIFO and heap together give the timers in the order one binary heap gives them,
        /// peek and pop alike, for first transmissions mostly in order (an `rto` that moves a
        /// little), some out of order, retransmissions anywhere and equal deadlines.
        #[test]
        fn timers_come_out_as_from_one_heap(ops in proptest::collection::vec(op(), 1..300)) {
            let t0 = Instant::now();
            let ms = |n: u64| t0 + Duration::from_millis(n);
            let (mut timers, mut heap) = (Timers::default(), BinaryHeap::new());
            let (mut clock, mut id) = (0u64, 0u32);
            for op in ops {
                match op {
                    Op::Push { rto } => {
                        id += 1;
                        let t = (ms(clock + u64::from(rto)), id, 0);
                        timers.push(t);
                        heap.push(Reverse(t));
                    }
                    Op::PushAnywhere { backoff } => {
                        let t = (ms(clock + u64::from(backoff)), id / 2, 1 + id % 3);
                        timers.push_anywhere(t);
                        heap.push(Reverse(t));
                    }
                    Op::Advance { by } => {
                        clock += u64::from(by);
                        loop {
                            prop_assert_eq!(timers.peek(), heap.peek().map(|r| r.0));
                            match timers.peek() {
                                Some(t) if t.0 <= ms(clock) => {
                                    prop_assert_eq!(timers.pop(), heap.pop().map(|r| r.0));
                                }
                                _ => break,
                            }
                        }
                    }
                }
            }
            while let Some(Reverse(t)) = heap.pop() {
                prop_assert_eq!(timers.pop(), Some(t));
            }
            prop_assert_eq!(timers.pop(), None);
        }
    }
}
