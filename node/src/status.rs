//! Outcomes of native calls as small numbers; `lib/errors.js` turns them into `Error`s with a `code`.
//!
//! The numbers and names are keylock-core's [`Status`] table, the one every front end shares
//! (C returns the same numbers); `lib/errors.js` reads the table from the addon ([`statuses`]) rather
//! than copying it. Expected outcomes (a lock that is taken, a timeout, an unlock of a free key)
//! are returned, not thrown: creating and catching an exception costs far more than the lock
//! operation itself.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Duration;

use keylock_core::Status;

/// Done.
pub(crate) const OK: u32 = Status::Ok.code();

/// The lock is taken (a try).
pub(crate) const WOULD_BLOCK: u32 = Status::WouldBlock.code();

/// Added to a release's status when it woke a waiter of this same thread: `lib/waiting.js` then
/// serves it at once (`runReady`) instead of waiting for the event loop's next turn, as a
/// pure-JavaScript lock hands over before `release()` returns. Above every status number.
pub(crate) const LOCAL_WAKE: u32 = 0x100;

const _: () = assert!((Status::ALL.len() as u32) < LOCAL_WAKE);

/// What a release or check of a slot that holds nothing reports (a guard released already):
/// the acquisition is not current.
pub(crate) const NOT_HELD: u32 = Status::NotOwner.code();

/// The status of a core result (a failure's text is kept, see [`code`]).
#[inline]
pub(crate) fn of<T>(result: keylock_core::Result<T>) -> u32 {
    match &result {
        Ok(_) => OK,
        Err(e) => code(e),
    }
}

/// The status of a core error. A failure that says more than its status (why a Redis server
/// could not be reached, which permission was refused) has its text kept for `lib/errors.js`,
/// which puts it in the error it makes from the status ([`take_text`]).
#[inline]
pub(crate) fn code(e: &keylock_core::Error) -> u32 {
    code_and_text(e).0
}

/// The status of a core error, and the number its text is kept under (0: it has none).
pub(crate) fn code_and_text(e: &keylock_core::Error) -> (u32, u32) {
    use keylock_core::Error;
    let code = e.status().code();
    let has_text = matches!(
        e,
        Error::InvalidArgument(_)
            | Error::Incompatible(_)
            | Error::PermissionDenied(_)
            | Error::Unavailable(_)
    );
    if !has_text {
        return (code, 0);
    }
    let text = keylock_core::redact_scope_name(&e.to_string());
    let id = TEXTS.with(|t| t.borrow_mut().keep(code, text));
    (code, id)
}

/// The most failure texts a thread keeps; older ones nobody asked for are dropped.
const TEXTS_KEPT: usize = 64;

/// This thread's recent failure texts: (number, status, text), oldest first.
#[derive(Debug, Default)]
struct Texts {
    last: u32,
    kept: VecDeque<(u32, u32, String)>,
}

impl Texts {
    fn keep(&mut self, code: u32, text: String) -> u32 {
        self.last = self.last.wrapping_add(1).max(1);
        if self.kept.len() == TEXTS_KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back((self.last, code, text));
        self.last
    }
}

thread_local! {
    static TEXTS: RefCell<Texts> = RefCell::new(Texts::default());
}

/// Takes the failure text kept under `id` or, for `id` 0, the one this thread's latest failure
/// kept if its status is `code` (what a call that just returned minus `code` failed with).
pub(crate) fn take_text(code: u32, id: u32) -> Option<String> {
    TEXTS.with(|t| {
        let mut texts = t.borrow_mut();
        let id = if id == 0 { texts.last } else { id };
        let at = texts
            .kept
            .iter()
            .rposition(|&(i, c, _)| i == id && c == code)?;
        texts.kept.remove(at).map(|(_, _, text)| text)
    })
}

/// `code`, plus [`LOCAL_WAKE`] when the call that made it woke a waiter of this thread.
#[inline]
pub(crate) fn with_local_wake(code: u32) -> u32 {
    if crate::reactor::take_local_wake() {
        code | LOCAL_WAKE
    } else {
        code
    }
}

/// One status of the table: `{ code, name, description }` in JavaScript.
#[napi_derive::napi(object)]
#[derive(Debug, Clone)]
pub struct StatusInfo {
    /// The number native calls return (C's `keylock_result`).
    pub code: u32,
    /// The name errors carry as their `code`, e.g. `KEYLOCK_TIMEOUT`.
    pub name: String,
    /// One line of English.
    pub description: String,
}

/// The status table, in number order.
pub(crate) fn statuses() -> Vec<StatusInfo> {
    Status::ALL
        .iter()
        .map(|s| StatusInfo {
            code: s.code(),
            name: s.name().to_owned(),
            description: s.description().to_owned(),
        })
        .collect()
}

/// A JavaScript timeout in milliseconds (validated finite and non-negative by `lib/options.js`) as a
/// `Duration`; `None` (no timeout) for anything else.
pub(crate) fn timeout(ms: Option<f64>) -> Option<Duration> {
    ms.filter(|ms| ms.is_finite() && *ms >= 0.0)
        .map(|ms| Duration::from_secs_f64(ms / 1000.0))
}
