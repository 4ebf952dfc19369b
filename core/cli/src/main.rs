//! `keylock`: who holds and who waits on the keys of a lock scope that processes share
//! (`shm:NAME`, `redis://...`, `postgres://...`), and force-unlock for a stuck key.
//!
//! It reads a scope through the core's [`keylock_core::inspect`] and
//! [`KeyedLock::list`](keylock_core::KeyedLock::list), as any program using keylock would see
//! it; a password in a scope string never appears in what it prints.

mod render;
mod watch;

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use keylock_core::{Error, KeySpace, KeyedLock, LockKey, keys, redact_scope_name};

const EXIT_CODES: &str = "\
Exit codes:
  0  done: the key is held or awaited (info), was freed (unlock), the region was removed (unlink)
  1  nothing there: the key is free (info, unlock), there is no such region (unlink)
  2  bad usage: an unknown command or option, a bad scope string or key
  3  the scope could not be reached: a missing region, an unreachable server, a timeout
  4  the scope is not what this keylock reads: a region of another layout, or a corrupt one;
     with --semaphore, a scope that has no keyed semaphore; for unlink, a region of the
     other kind
  5  permission denied
  6  unlock not confirmed
  7  any other error";

/// The command line.
#[derive(Parser)]
#[command(
    name = "keylock",
    version,
    about = "Who holds and who waits on the keys of a keylock scope (shm:NAME, redis://..., \
             postgres://...), and force-unlock.",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The scope's keyed semaphore instead of its locks: on Redis and PostgreSQL, the one
    /// opened under the prefix (with the permits its first open recorded); an shm: region is
    /// a semaphore or locks, and this checks it is the first.
    #[arg(long, short = 's', global = true)]
    semaphore: bool,
}

#[derive(Subcommand)]
enum Command {
    /// The keys held or awaited: mode, fence, holders, lease remaining and waiters.
    List {
        /// shm:NAME, redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=P] or
        /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?prefix=P].
        scope: String,
        /// One JSON array of keys instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One key in full.
    Info {
        scope: String,
        #[command(flatten)]
        key: KeyArg,
        /// One JSON object (null when the key is free) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Force-unlock a key: frees it whoever holds it; its next holder gets a higher fence,
    /// and the old holder's release is refused. Prints the fence it ended.
    Unlock {
        scope: String,
        #[command(flatten)]
        key: KeyArg,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
    /// A live view, refreshed like top: the longest waits first, then the longest held.
    /// Ctrl-C (or q) ends it.
    Watch {
        scope: String,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until Ctrl-C).
        #[arg(long)]
        iterations: Option<u64>,
    },
    /// Remove a shared-memory region (shm:NAME) of locks, or with --semaphore of a keyed
    /// semaphore; processes that have it open keep using it.
    Unlink { scope: String },
}

/// A key on the command line.
#[derive(Args)]
struct KeyArg {
    /// The key: its text (UTF-8); with --hex, its bytes in hex; with --int, an integer (8
    /// bytes, big-endian, as every keylock front end encodes integers).
    key: String,
    /// The key is hex bytes.
    #[arg(long, conflicts_with_all = ["int", "name"])]
    hex: bool,
    /// The key is an integer.
    #[arg(long, conflicts_with = "name")]
    int: bool,
    /// The key is a Web Locks name.
    #[arg(long)]
    name: bool,
}

impl KeyArg {
    /// The key's space and bytes, as the core compares them.
    fn bytes(&self) -> Result<(KeySpace, Vec<u8>), Failure> {
        let usage = |what: &str| Failure::new(2, format!("bad key {:?}: {what}", self.key));
        if self.hex {
            let digits = self.key.strip_prefix("0x").unwrap_or(&self.key);
            if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(usage("not hex"));
            }
            if !digits.len().is_multiple_of(2) {
                return Err(usage("hex needs an even number of digits"));
            }
            let bytes = digits
                .as_bytes()
                .chunks(2)
                .map(|pair| {
                    let digit = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
                    digit(pair[0]) << 4 | digit(pair[1])
                })
                .collect();
            return Ok((KeySpace::Keys, bytes));
        }
        if self.int {
            let n: i64 = self
                .key
                .parse()
                .map_err(|_| usage("not an integer from -2^63 to 2^63-1"))?;
            return Ok((KeySpace::Keys, keys::encode_i64(n).to_vec()));
        }
        let space = if self.name {
            KeySpace::Names
        } else {
            KeySpace::Keys
        };
        Ok((space, keys::encode_str(&self.key).to_vec()))
    }
}

/// A message and the exit code that goes with it.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn new(code: u8, message: String) -> Self {
        Self { code, message }
    }

    /// A core error about `scope`, with its exit code.
    fn of(scope: &str, e: &Error) -> Self {
        let code = match e {
            Error::InvalidArgument(_) => 2,
            Error::Unavailable(_) | Error::TimedOut => 3,
            Error::Incompatible(_) => 4,
            Error::PermissionDenied(_) => 5,
            _ => 7,
        };
        Self::new(code, format!("{}: {e}", redact_scope_name(scope)))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command, cli.semaphore) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("keylock: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// How the scope is opened: its locks ([`keylock_core::inspect`]) or its keyed semaphore
/// ([`keylock_core::inspect_semaphore`]).
type Opener = fn(&str) -> keylock_core::Result<Arc<dyn KeyedLock>>;

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`keylock list ... | head`) is not an error worth a message.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn run(command: Command, semaphore: bool) -> Result<u8, Failure> {
    let opener: Opener = if semaphore {
        keylock_core::inspect_semaphore
    } else {
        keylock_core::inspect
    };
    let open = |scope: &str| opener(scope).map_err(|e| Failure::of(scope, &e));
    match command {
        Command::List { scope, json } => {
            let lock = open(&scope)?;
            let mut keys = lock.list().map_err(|e| Failure::of(&scope, &e))?;
            keys.sort_by(|a, b| a.id.cmp(&b.id));
            if json {
                print(&format!("{}\n", render::json_list(&keys, lock.permits())));
            } else {
                print(&render::table(&keys, None, usize::MAX, lock.permits()));
            }
            Ok(0)
        }
        Command::Info { scope, key, json } => {
            let (space, bytes) = key.bytes()?;
            let lock = open(&scope)?;
            let report = render::one(&*lock, space, &bytes).map_err(|e| Failure::of(&scope, &e))?;
            if json {
                let value = report.as_ref().map_or(serde_json::Value::Null, |r| {
                    render::json_key(r, lock.permits())
                });
                print(&format!("{value}\n"));
            } else if let Some(r) = &report {
                print(&render::detail(r, lock.permits()));
            } else {
                print(&format!("{}: free\n", render::key_text(space, &bytes)));
            }
            Ok(if report.is_some() { 0 } else { 1 })
        }
        Command::Unlock { scope, key, yes } => {
            let (space, bytes) = key.bytes()?;
            let lock = open(&scope)?;
            let shown = render::key_text(space, &bytes);
            let lkey = LockKey {
                space,
                bytes: &bytes,
            };
            let Some(info) = lock.info(lkey).map_err(|e| Failure::of(&scope, &e))? else {
                print(&format!("{shown}: free, nothing to unlock\n"));
                return Ok(1);
            };
            if !yes
                && !confirm(&format!(
                    "force-unlock {shown} in {} (fence {}, {} holder(s))? [y/N] ",
                    redact_scope_name(&scope),
                    info.fence,
                    info.holders
                ))?
            {
                return Err(Failure::new(
                    6,
                    "not confirmed: nothing was unlocked".into(),
                ));
            }
            if lock
                .force_unlock(lkey)
                .map_err(|e| Failure::of(&scope, &e))?
            {
                match lock.permits() {
                    Some(permits) => print(&format!(
                        "{shown}: released {} holder(s) holding {} of {permits} units, newest fence {}\n",
                        info.holders, info.units, info.fence
                    )),
                    None => print(&format!("{shown}: unlocked, ended fence {}\n", info.fence)),
                }
                Ok(0)
            } else {
                print(&format!(
                    "{shown}: was freed meanwhile, nothing to unlock\n"
                ));
                Ok(1)
            }
        }
        Command::Watch {
            scope,
            interval,
            iterations,
        } => {
            if !(interval.is_finite() && interval >= 0.05) {
                return Err(Failure::new(
                    2,
                    "--interval is at least 0.05 seconds".into(),
                ));
            }
            let lock = open(&scope)?;
            watch::run(&*lock, &scope, interval, iterations)
        }
        Command::Unlink { scope } => {
            if !scope.starts_with("shm:") {
                return Err(Failure::new(
                    2,
                    format!(
                        "{}: only shm:NAME regions can be unlinked",
                        redact_scope_name(&scope)
                    ),
                ));
            }
            // A region of the other kind than the one asked for (locks, or a semaphore with
            // -s) is left alone; one that cannot be read (missing, or corrupt) is removed.
            if let Ok(lock) = keylock_core::inspect(&scope)
                && lock.permits().is_some() != semaphore
            {
                return Err(Failure::new(
                    4,
                    format!(
                        "{}: {}",
                        redact_scope_name(&scope),
                        if semaphore {
                            "the region holds locks, not a keyed semaphore (unlink it without \
                             --semaphore)"
                        } else {
                            "the region holds a keyed semaphore (unlink it with --semaphore)"
                        }
                    ),
                ));
            }
            if keylock_core::unlink(&scope).map_err(|e| Failure::of(&scope, &e))? {
                print(&format!("{scope}: removed\n"));
                Ok(0)
            } else {
                print(&format!("{scope}: no such region\n"));
                Ok(1)
            }
        }
    }
}

/// Asks `question` on the terminal; without one (a script), the answer is no: say --yes.
fn confirm(question: &str) -> Result<bool, Failure> {
    if !std::io::stdin().is_terminal() {
        return Err(Failure::new(
            6,
            "not confirmed (no terminal to ask on): give --yes to unlock without asking".into(),
        ));
    }
    eprint!("{question}");
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::new(7, format!("reading the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes"))
}
