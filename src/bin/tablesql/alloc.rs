//! The binary's allocator: mimalloc, set to give freed memory back soon.
//!
//! With glibc's malloc the server spent 7-11% more user time on point
//! reads and 1,000-row ranges (BENCHMARKS.md, sessions 10 and 11). Left at
//! its defaults, though, mimalloc kept memory: its arenas are madvised for
//! transparent huge pages, and a freed page is purged a second later (v3's
//! `purge_delay` of 1,000 ms), so a spilling sort grew the server's RSS
//! 137-151 MB against glibc's 51-62, past what the memory-limit test allows
//! over `--memory-limit`. So the crate is built with `no_thp` and the purge
//! delay is cut to 10 ms here. Not to 0 (44-61 MB, session 11): a page
//! purged the moment it empties is faulted back in by the next statement,
//! and each purge is an madvise whose TLB shootdown interrupts the other
//! core. When a point read's only block on its page was freed at every
//! Execute, a third of pgbench runs fell to half the rate, with 14% of
//! the time in `smp_call_function_many_cond` and `native_write_msr`
//! (session 12). A page reused within 10 ms is not purged at all.
//! `MIMALLOC_PURGE_DELAY` in the environment still wins, for whoever tunes
//! it.
//!
//! The embedding library sets no allocator: that is its host's choice.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` in v3's `mi_option_e` (mimalloc.h), which
/// libmimalloc-sys 0.1.49 does not name. The crate is pinned in Cargo.lock;
/// the test below fails if the number stops naming that option.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Milliseconds a freed page waits before it is purged (see the module doc).
const PURGE_AFTER_MS: std::ffi::c_long = 10;

/// Purges freed pages soon unless the environment says otherwise. Called
/// first in `main`: the option is read at each purge, so later is safe too,
/// but pages freed before it wait out the old delay.
pub fn purge_soon() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: a setter of a process-wide integer that mimalloc reads
        // atomically; no pointer crosses.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_AFTER_MS) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_15_is_the_purge_delay_at_its_v3_default_and_purge_soon_sets_it_to_10_ms() {
        // SAFETY: a getter of a process-wide integer.
        let delay = || unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        let set = std::env::var("MIMALLOC_PURGE_DELAY").ok();
        // No other option of v3 defaults to 1,000 (options.c's table).
        let before = delay();
        match &set {
            Some(value) => assert_eq!(before.to_string(), *value),
            None => assert_eq!(before, 1000),
        }
        purge_soon();
        assert_eq!(delay(), if set.is_some() { before } else { 10 });
    }
}
