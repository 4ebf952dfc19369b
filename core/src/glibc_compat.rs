//! What Rust's standard library calls in glibc that glibc 2.17 lacks, for the release packages,
//! which are linked against glibc 2.17's symbols so that they load on any x86-64 Linux with
//! glibc 2.17 or later (`make dist`, which builds with `--cfg keylock_glibc_compat`).
//!
//! The standard library calls `gettid` (glibc 2.30) by name. Linked against 2.17, a program
//! fails to link, and a shared library links with `gettid` undefined, so that loading it with
//! every symbol bound at once (as Python loads extensions) fails on a glibc before 2.30. This
//! definition, of the same meaning as glibc's (the calling thread's id, from the system call),
//! is bound instead. Other builds use glibc's own.

/// The calling thread's id: glibc's `gettid`, by the system call.
#[cfg(all(keylock_glibc_compat, target_os = "linux", feature = "shm"))]
#[unsafe(no_mangle)]
// pub: the symbol is for the linker, which binds the standard library's call to it.
#[allow(unreachable_pub)]
pub extern "C" fn gettid() -> libc::pid_t {
    // SAFETY: SYS_gettid takes no arguments, cannot fail, and returns the caller's thread id,
    // which fits a pid_t.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}
