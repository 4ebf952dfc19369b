//! The Lua scripts (their sources in `lua.rs`) and the Redis key names they work on.
//!
//! Every state change is one script, so each is atomic on the server and costs one round trip:
//!
//! | script | what it does |
//! |---|---|
//! | `acquire` | ends what has run out, then takes every key asked for or none; mints each exclusive fence with `HINCRBY` in the same step; on failure queues the caller on the key that blocks it |
//! | `release` | compare-and-delete on the holder's token; wakes the head waiter; drops the key's names if it is now idle |
//! | `renew` | moves the lease's end if the hold is still the caller's (also `extend`) |
//! | `check` | whether a hold is current (read only) |
//! | `force` | frees a key whoever holds it, advancing its fence (and drops an idle key's names, as `leave` and `info` do too) |
//! | `leave` | a waiter gives up its place |
//! | `info` | a snapshot of a key |
//! | `permits` | records a semaphore scope's permits, or says those already recorded |
//!
//! Every script takes one more ARGV, last: an id fresh for each request, which it returns with
//! its result (`{id, result}`), so that each reply is matched to its request.
//!
//! [`lua::PRELUDE`](super::lua::PRELUDE) (prepended to each) documents the data model: per lock key a hash (fence,
//! exclusive token and deadline), a sorted set of shared holders, and the waiter queue, all
//! dropped when the key is idle; per waiter a list it blocks on; per scope the fence floor that
//! a key's fences start from when its hash is made again. All names start with `{PREFIX}`, one
//! hash tag, so that a multi-key acquire touches one hash slot (and would run unchanged on Redis
//! Cluster).

use redis::Script;

use super::lua;

use crate::acquisition::Mode;
use crate::scope::KeySpace;

/// The scripts, hashed once per scope (EVALSHA, loaded again by the client on `NOSCRIPT`,
/// e.g. after a server restart).
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
    pub(crate) check: Script,
    pub(crate) force: Script,
    pub(crate) leave: Script,
    pub(crate) info: Script,
    pub(crate) permits: Script,
}

/// A script: the prelude, then `body` as a function whose result is returned after the
/// request's own id (the last ARGV), as `{id, result}`. The client checks the id, so that a
/// reply is never taken for the answer to another request (a connection one reply behind).
fn script(body: &str) -> Script {
    Script::new(&format!(
        "{}local function run()\n{body}\nend\nreturn {{ARGV[#ARGV], run()}}\n",
        lua::PRELUDE
    ))
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            acquire: script(lua::ACQUIRE),
            release: script(lua::RELEASE),
            renew: script(lua::RENEW),
            check: script(lua::CHECK),
            force: script(lua::FORCE),
            leave: script(lua::LEAVE),
            info: script(lua::INFO),
            permits: script(lua::PERMITS),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 8] {
        [
            &self.acquire,
            &self.release,
            &self.renew,
            &self.check,
            &self.force,
            &self.leave,
            &self.info,
            &self.permits,
        ]
    }
}

/// Redis key names for a scope's prefix.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// `{PREFIX}:`: the hash tag and separator every name starts with.
    base: Vec<u8>,
    /// The space letter of plain keys: `k` for a lock scope, `u` for a semaphore scope (whose
    /// keys never meet a lock's).
    keys: u8,
}

impl Names {
    pub(crate) fn new(prefix: &str, semaphore: bool) -> Self {
        Self {
            base: format!("{{{prefix}}}:").into_bytes(),
            keys: if semaphore { b'u' } else { b'k' },
        }
    }

    /// Where a semaphore scope records its permits.
    pub(crate) fn permits(&self) -> Vec<u8> {
        let mut name = self.base.clone();
        name.extend_from_slice(b"permits");
        name
    }

    /// The four names of one lock key (`l`, `s`, `q`, `e`: see `lua::PRELUDE`), as
    /// `{PREFIX}:` + space (`k` keys, `n` Web Locks names) + kind + `:` + the key's bytes. The
    /// key's bytes come last and everything before them is fixed, so distinct keys never share
    /// a name.
    pub(crate) fn lock(&self, space: KeySpace, key: &[u8]) -> [Vec<u8>; 4] {
        let s = match space {
            KeySpace::Keys => self.keys,
            KeySpace::Names => b'n',
        };
        [b'l', b's', b'q', b'e'].map(|kind| {
            let mut name = Vec::with_capacity(self.base.len() + 3 + key.len());
            name.extend_from_slice(&self.base);
            name.extend_from_slice(&[s, kind, b':']);
            name.extend_from_slice(key);
            name
        })
    }

    /// The scope's fence floor (`f` in `lua::PRELUDE`): the highest fence of any key whose
    /// names were dropped. `{PREFIX}:fence` meets no other name: after `{PREFIX}:`, a lock
    /// key's names have `:` as their third byte, a waiter's list starts with `w:`, and the
    /// permits are `permits`.
    pub(crate) fn floor(&self) -> Vec<u8> {
        let mut name = self.base.clone();
        name.extend_from_slice(b"fence");
        name
    }

    /// A `SCAN ... MATCH` pattern for every name of the scope's prefix (its glob characters
    /// escaped).
    pub(crate) fn scan_pattern(&self) -> Vec<u8> {
        let mut pattern = Vec::with_capacity(self.base.len() + 1);
        for &b in &self.base {
            if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                pattern.push(b'\\');
            }
            pattern.push(b);
        }
        pattern.push(b'*');
        pattern
    }

    /// The lock key a name of [`Names::lock`] belongs to, for the names that show it held or
    /// awaited (`l`, `s`, `q`); `None` for any other name.
    pub(crate) fn key_of(&self, name: &[u8]) -> Option<(KeySpace, Vec<u8>)> {
        let rest = name.strip_prefix(self.base.as_slice())?;
        let (&[s, kind, b':'], key) = rest.split_first_chunk::<3>()? else {
            return None;
        };
        let space = if s == self.keys {
            KeySpace::Keys
        } else if s == b'n' {
            KeySpace::Names
        } else {
            return None;
        };
        matches!(kind, b'l' | b's' | b'q').then(|| (space, key.to_vec()))
    }

    /// The prefix of every waiter's wake-up list (the waiter id follows).
    pub(crate) fn notify(&self) -> Vec<u8> {
        let mut name = self.base.clone();
        name.extend_from_slice(b"w:");
        name
    }

    /// A waiter's wake-up list.
    pub(crate) fn notify_list(&self, waiter: &str) -> Vec<u8> {
        let mut name = self.notify();
        name.extend_from_slice(waiter.as_bytes());
        name
    }
}

/// A mode as the scripts spell it.
pub(crate) fn mode_char(mode: Mode) -> &'static str {
    match mode {
        Mode::Exclusive => "x",
        Mode::Shared => "s",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_share_one_hash_tag() {
        let n = Names::new("app", false);
        let a = n.lock(KeySpace::Keys, b"x");
        let b = n.lock(KeySpace::Names, b"x");
        let c = n.lock(KeySpace::Keys, b"x:l");
        assert_eq!(a[0], b"{app}:kl:x");
        assert_eq!(b[0], b"{app}:nl:x");
        let mut all: Vec<&Vec<u8>> = a.iter().chain(&b).chain(&c).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 12);
        assert!(all.iter().all(|name| name.starts_with(b"{app}:")));
        assert_eq!(n.notify_list("w1"), b"{app}:w:w1");
        assert_eq!(
            Names::new("app", true).lock(KeySpace::Keys, b"x")[0],
            b"{app}:ul:x"
        );
    }
}
