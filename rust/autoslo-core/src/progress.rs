//! Progress of long runs (emulations, simulations): the callback type, and when it is due, so a
//! run reports often enough for a progress bar and answers Ctrl-C promptly however slow each of
//! its steps is (an overloaded fleet can take seconds per thousand arrivals).

use std::time::{Duration, Instant};

/// A progress callback: `(done, total)`; returning `false` stops the run with
/// [`AutoSloError::Interrupted`](crate::error::AutoSloError::Interrupted).
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize) -> bool;

/// When a progress call is due: every [`Ticker::EVERY`] items, and between those once
/// [`Ticker::INTERVAL`] has passed since the last call (the clock read every 64 items only, so
/// a fast run pays nothing measurable for it).
#[derive(Debug, Clone, Copy)]
pub struct Ticker {
    last: Instant,
}

impl Ticker {
    pub const EVERY: usize = 4096;
    pub const INTERVAL: Duration = Duration::from_millis(100);
    const CHECK: usize = 64;

    pub fn new() -> Self {
        Self { last: Instant::now() }
    }

    /// Whether item `i` (counted from 0) is due a progress call.
    pub fn due(&mut self, i: usize) -> bool {
        let due = i.is_multiple_of(Self::EVERY) || (i.is_multiple_of(Self::CHECK) && self.last.elapsed() >= Self::INTERVAL);
        if due {
            self.last = Instant::now();
        }
        due
    }
}

impl Default for Ticker {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_due_by_count_and_by_time() {
        let mut t = Ticker::new();
        assert!(t.due(0) && t.due(4096) && !t.due(4097));
        assert!(!t.due(64), "the interval has not passed");
        t.last -= Ticker::INTERVAL;
        assert!(!t.due(65), "the clock is read every 64 items");
        assert!(t.due(128));
        assert!(!t.due(192), "just called");
    }
}
