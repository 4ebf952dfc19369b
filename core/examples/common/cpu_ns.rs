//! The thread's CPU time, for the examples that time loops for the benchmark scripts.

#[repr(C)]
struct Ts {
    s: i64,
    ns: i64,
}
unsafe extern "C" {
    fn clock_gettime(c: i32, t: *mut Ts) -> i32;
}

/// The calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), in nanoseconds.
pub(crate) fn cpu_ns() -> f64 {
    let mut t = Ts { s: 0, ns: 0 };
    // SAFETY: a valid pointer to a timespec-shaped struct; clock 3 is the thread's CPU time.
    unsafe { clock_gettime(3, &mut t) };
    t.s as f64 * 1e9 + t.ns as f64
}
