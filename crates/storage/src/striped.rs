//! Values that every thread updates, kept as one copy per thread slot.
//!
//! A count that every connection adds to lives on one cache line. With
//! connections on every core, each add takes that line from the core that
//! added last: about 1% of a prepared point query's server time for each
//! such count (`perf`: the samples sit on the `lock xadd`), and a point
//! query made several (the store's request count, the statement's kind,
//! its duration's bucket, the snapshot slots' neighbouring locks).
//!
//! So each thread updates the copy of its slot, on a cache line of its
//! own, and a reader combines the copies. Threads take slots in turn as
//! they first use one; past [`SLOTS`] threads, two share a slot, which
//! stays correct (the copies are atomics or locks) and only contends
//! again.

/// Copies kept: more than the cores the server runs a runtime on, so that
/// the blocking pool's threads mostly find slots of their own too.
pub const SLOTS: usize = 16;

/// This thread's slot, given out in turn as threads first ask.
pub fn slot() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SLOTS;
    }
    SLOT.with(|s| *s)
}

/// One copy of `T` per slot, each on cache lines of its own.
#[derive(Debug)]
pub struct Striped<T> {
    copies: Box<[Padded<T>]>,
}

/// 128 bytes: a line and the one the hardware prefetches with it.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

impl<T: Default> Default for Striped<T> {
    fn default() -> Self {
        Self {
            copies: (0..SLOTS).map(|_| Padded::default()).collect(),
        }
    }
}

impl<T> Striped<T> {
    /// The calling thread's copy.
    pub fn local(&self) -> &T {
        // `slot()` is below SLOTS, the copies' length.
        &self.copies[slot() % self.copies.len()].0
    }

    /// Every copy, for a reader to combine.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        self.copies.iter().map(|c| &c.0)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn adds_from_many_threads_sum_to_their_total_and_copies_share_no_line() {
        let counts: Striped<AtomicU64> = Striped::default();
        std::thread::scope(|s| {
            for _ in 0..(SLOTS + 4) {
                s.spawn(|| {
                    for _ in 0..1000 {
                        counts.local().fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        let total: u64 = counts.all().map(|c| c.load(Ordering::Relaxed)).sum();
        assert_eq!(total, (SLOTS as u64 + 4) * 1000);
        let at: Vec<usize> = counts.all().map(|c| c as *const _ as usize).collect();
        assert!(at.windows(2).all(|w| w[1] - w[0] >= 128), "{at:?}");
    }
}
