//! The process's fork generation: it changes in a child after `fork()`. A lock object whose state
//! lives partly outside this process (a shared-memory region's handle, a server scope's
//! connections and threads) must not act as its parent's in the child: it compares the
//! generation it was opened in with the current one.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many times this process has forked a child that is running now (counted in the child).
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

#[cfg(unix)]
extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Registers the fork handler (once per process) and returns the fork generation.
pub(crate) fn watch_forks() -> u64 {
    #[cfg(unix)]
    {
        static REGISTER: std::sync::Once = std::sync::Once::new();
        REGISTER.call_once(|| {
            // SAFETY: the handler only increments an atomic, which is async-signal-safe and so
            // allowed in a child after fork.
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        });
    }
    fork_generation()
}

/// The fork generation of this process (counted once [`watch_forks`] ran).
#[inline]
pub(crate) fn fork_generation() -> u64 {
    FORK_GENERATION.load(Ordering::Relaxed)
}
