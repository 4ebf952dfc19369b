//! Handing work to Python from threads that must never wait for the GIL.
//!
//! Lost signals and asyncio wake-ups can fire on a thread Python knows nothing about: a remote
//! scope's runtime thread, or the core's lease timer. If such a thread attached to the
//! interpreter there, it could wait for the GIL while the GIL's holder waits for that very thread
//! (a blocking call into the scope, such as `is_locked` on a Redis pool, waits for the runtime):
//! a deadlock. So a thread that is not a Python thread never attaches. It queues the work, and
//! one thread of this module, started on first use (and again in a forked child, which inherits
//! the queue but not the thread), attaches and runs the jobs in order. Nothing ever waits for
//! that thread. A Python thread (one the interpreter has a thread state for) runs the work at
//! once: attaching there is free when it holds the GIL, and nobody waits for it when it does not.
//!
//! At exit the thread must be done with Python before the interpreter finalizes: a thread that
//! is not Python's and takes the GIL back after that is ended by the interpreter in a way that
//! aborts the process (`pthread_exit`, which cannot unwind through Rust). So an `atexit` hook
//! ([`stop`]) runs while the interpreter is still whole: it stops the thread from attaching
//! again, and waits (GIL released) for a job that is running to end. Jobs that come later are
//! dropped unrun; no event loop runs any more to await what they would resolve.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pyo3::ffi;
use pyo3::prelude::*;

/// One piece of work for Python.
type Job = Box<dyn FnOnce(Python<'_>) + Send>;

/// The thread that runs jobs, and the process it was started in.
struct Runner {
    pid: u32,
    jobs: Sender<Job>,
}

static RUNNER: Mutex<Option<Runner>> = Mutex::new(None);

/// What the runner thread is doing, for [`stop`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a job, or dropping one.
    Idle,
    /// Attached to the interpreter (or waiting to be), running a job.
    Running,
    /// Stopped at exit: no job attaches any more.
    Stopped,
}

static PHASE: Mutex<Phase> = Mutex::new(Phase::Idle);
static IDLE: Condvar = Condvar::new();

/// The longest [`stop`] waits for a running job (one that hangs must not hang the exit).
const STOP_WAIT: Duration = Duration::from_secs(5);

fn phase() -> MutexGuard<'static, Phase> {
    PHASE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `job` attached to the interpreter: at once on a Python thread, else on this module's
/// thread (see the module docs). A job is dropped unrun once the interpreter is shutting down.
pub(crate) fn run_in_python(job: impl FnOnce(Python<'_>) + Send + 'static) {
    if is_python_thread() {
        Python::try_attach(job);
    } else {
        post(Box::new(job));
    }
}

/// Whether the interpreter has a thread state for the calling thread (a thread started by
/// Python, or one that is attached now).
fn is_python_thread() -> bool {
    // SAFETY: reads the calling thread's own thread-state slot; callable from any thread,
    // attached or not, once the interpreter is initialized (it is: this module is loaded).
    !unsafe { ffi::PyGILState_GetThisThreadState() }.is_null()
}

/// Queues `job` for the runner thread, starting it if this process has none.
fn post(job: Job) {
    let mut runner = RUNNER.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if runner.as_ref().is_none_or(|r| r.pid != pid) {
        let (jobs, queue) = channel::<Job>();
        let started = std::thread::Builder::new()
            .name("keylock-py-handoff".into())
            .spawn(move || {
                for job in queue {
                    run_job(job);
                }
            });
        if started.is_err() {
            // No thread to be had (the process is out of them): run it here rather than lose
            // a wake-up, which would leave an asyncio waiter waiting forever.
            drop(runner);
            Python::try_attach(job);
            return;
        }
        // A runner inherited over fork was caught mid-job at most; this process has none.
        let mut p = phase();
        if *p == Phase::Running {
            *p = Phase::Idle;
        }
        drop(p);
        *runner = Some(Runner { pid, jobs });
    }
    if let Some(r) = runner.as_ref() {
        // A send fails only if the runner is gone (the interpreter shut down under it).
        let _ = r.jobs.send(job);
    }
}

/// Runs one job on the runner thread, unless the interpreter is stopping.
fn run_job(job: Job) {
    {
        let mut p = phase();
        if *p == Phase::Stopped {
            return; // dropped unrun (its Python references are released later, or never)
        }
        *p = Phase::Running;
    }
    Python::try_attach(job);
    let mut p = phase();
    if *p == Phase::Running {
        *p = Phase::Idle;
    }
    drop(p);
    IDLE.notify_all();
}

/// The `atexit` hook (see the module docs): stops the runner thread from attaching again, and
/// waits, with the GIL released, for a job it is running to end.
#[pyfunction]
pub(crate) fn stop(py: Python<'_>) {
    py.detach(|| {
        let end = Instant::now() + STOP_WAIT;
        let mut p = phase();
        while *p == Phase::Running {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            p = IDLE
                .wait_timeout(p, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *p = Phase::Stopped;
    });
}

/// Registers [`stop`] with `atexit`.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let hook = wrap_pyfunction!(stop, m)?;
    m.py().import("atexit")?.call_method1("register", (hook,))?;
    Ok(())
}
