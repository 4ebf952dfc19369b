//! `keylock watch`: the scope's keys redrawn every interval on the terminal's alternate screen,
//! as `top` draws, the longest waits first and then the longest held. A hold is known by its
//! key and fence, and its HELD column is how long this view has seen that hold (the scopes
//! record when a wait began, not when a hold did). Ctrl-C or `q` ends it, and the terminal is
//! given back as it was.

use std::collections::HashMap;
use std::io::{IsTerminal, Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use keylock_core::{KeyedLock, LockId, redact_scope_name};

use crate::Failure;
use crate::render;

/// The terminal's rows and columns (24 x 80 when it cannot tell).
fn size() -> (usize, usize) {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct passed, which lives for the call.
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0;
    if ok && ws.ws_row > 0 && ws.ws_col > 0 {
        (ws.ws_row as usize, ws.ws_col as usize)
    } else {
        (24, 80)
    }
}

/// The terminal in the mode `watch` draws in: the alternate screen, no cursor and, when stdin
/// is a terminal, keys read one at a time without echo (for `q`). Dropping it puts all back.
struct Screen {
    saved: Option<libc::termios>,
}

impl Screen {
    fn enter() -> Self {
        let mut saved = None;
        if std::io::stdin().is_terminal() {
            // SAFETY: a zeroed termios is a valid value to pass for tcgetattr to fill in.
            let mut t: libc::termios = unsafe { std::mem::zeroed() };
            // SAFETY: tcgetattr and tcsetattr read and write the termios passed, which lives
            // for each call; fd 0 is a terminal (checked above).
            unsafe {
                if libc::tcgetattr(libc::STDIN_FILENO, &mut t) == 0 {
                    saved = Some(t);
                    let mut raw = t;
                    raw.c_lflag &= !(libc::ICANON | libc::ECHO);
                    raw.c_cc[libc::VMIN] = 0;
                    raw.c_cc[libc::VTIME] = 0;
                    libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw);
                }
            }
        }
        let mut out = std::io::stdout().lock();
        let _ = out
            .write_all(b"\x1b[?1049h\x1b[?25l")
            .and_then(|()| out.flush());
        Self { saved }
    }

    /// Whether `q` was typed since the last look.
    fn quit_typed(&self) -> bool {
        if self.saved.is_none() {
            return false;
        }
        let mut buf = [0u8; 64];
        match std::io::stdin().lock().read(&mut buf) {
            Ok(n) => buf[..n].iter().any(|&b| b == b'q' || b == b'Q'),
            Err(_) => false,
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let mut out = std::io::stdout().lock();
        let _ = out
            .write_all(b"\x1b[?25h\x1b[?1049l")
            .and_then(|()| out.flush());
        if let Some(t) = &self.saved {
            // SAFETY: puts back the termios read in `enter`, which lives for the call.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, t) };
        }
    }
}

pub(crate) fn run(
    lock: &dyn KeyedLock,
    scope: &str,
    interval: f64,
    iterations: Option<u64>,
) -> Result<u8, Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .map_err(|e| Failure::new(7, format!("cannot catch Ctrl-C: {e}")))?;
    let shown = redact_scope_name(scope);
    let every = Duration::from_secs_f64(interval);
    // When each hold (key and fence) was first seen.
    let mut first_seen: HashMap<(LockId, u64), Instant> = HashMap::new();
    let screen = Screen::enter();
    let mut drawn = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let frame = match lock.list() {
            Ok(mut keys) => {
                let current: Vec<(LockId, u64)> = keys
                    .iter()
                    .filter_map(|r| r.info.as_ref().map(|i| (r.id.clone(), i.fence)))
                    .collect();
                first_seen.retain(|k, _| current.contains(k));
                for k in current {
                    first_seen.entry(k).or_insert(now);
                }
                let held: HashMap<(LockId, u64), Duration> = first_seen
                    .iter()
                    .map(|(k, t)| (k.clone(), now - *t))
                    .collect();
                let held_of = |r: &keylock_core::KeyReport| {
                    r.info
                        .as_ref()
                        .and_then(|i| held.get(&(r.id.clone(), i.fence)).copied())
                        .unwrap_or_default()
                };
                keys.sort_by(|a, b| {
                    (b.longest_wait(), b.waiting(), held_of(b), &a.id).cmp(&(
                        a.longest_wait(),
                        a.waiting(),
                        held_of(a),
                        &b.id,
                    ))
                });
                let (rows, _) = size();
                let waiting: usize = keys.iter().map(|r| r.waiting()).sum();
                format!(
                    "keylock watch {shown}: {} key(s) held or awaited, {waiting} waiting; \
                     every {interval}s; q or Ctrl-C quits\n\n{}",
                    keys.len(),
                    render::table(
                        &keys,
                        Some(&held),
                        rows.saturating_sub(5).max(1),
                        lock.permits()
                    )
                )
            }
            Err(e) => format!(
                "keylock watch {shown}: {e}\n(retrying every {interval}s; q or Ctrl-C quits)\n"
            ),
        };
        let (_, cols) = size();
        let body: String = frame
            .lines()
            .map(|l| {
                let cut: String = l.chars().take(cols).collect();
                format!("{cut}\x1b[K\r\n")
            })
            .collect();
        {
            let mut out = std::io::stdout().lock();
            let _ = out
                .write_all(format!("\x1b[H{body}\x1b[J").as_bytes())
                .and_then(|()| out.flush());
        }
        drawn += 1;
        if iterations.is_some_and(|n| drawn >= n) {
            break;
        }
        let until = now + every;
        while Instant::now() < until && !stop.load(Ordering::SeqCst) {
            if screen.quit_typed() {
                stop.store(true, Ordering::SeqCst);
                break;
            }
            std::thread::sleep(Duration::from_millis(50).min(until - Instant::now().min(until)));
        }
    }
    drop(screen);
    Ok(0)
}
