//! The region file: naming, creating (atomically, fully initialized), opening and validating,
//! mapping; checked access to its records; and the table mutex.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::sync::Arc;

use super::layout::*;
use super::sys::{Locked, MutexFault};
use crate::error::{Error, Result};

/// How long a process waits for a region's table mutex before it reports the region
/// unavailable, plus 200 ns per record of the region (entries, waiter and holder records,
/// process slots).
///
/// The table mutex is held for a handful of record updates, or, to reclaim a dead process or
/// repair the table after a death inside it, one pass over the records. A holder that keeps
/// it longer is stopped (`SIGSTOP`, a debugger) or hung, or is no holder at all: a lock word
/// that corruption or a stray write left nonzero, or an owner whose death the kernel never
/// reports. Waiting for it without a bound would freeze every process of the host that uses
/// or opens the region; with the bound each gets [`Error::Unavailable`] naming the holder.
pub const TABLE_MUTEX_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Where region files live.
pub(crate) const DIR: &str = "/dev/shm";

/// The file of region `name`: `/dev/shm/keylock.NAME`.
pub(crate) fn path_of(name: &str) -> Result<String> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if !ok {
        return Err(Error::InvalidArgument(
            "a shm region name is 1 to 200 characters of A-Z a-z 0-9 . _ - and does not start with '.'",
        ));
    }
    Ok(format!("{DIR}/keylock.{name}"))
}

fn io_error(what: &str, path: &str, e: &io::Error) -> Error {
    let text: Arc<str> = format!("{what} {path}: {e}").into();
    match e.kind() {
        io::ErrorKind::PermissionDenied => Error::PermissionDenied(text),
        _ => Error::Unavailable(text),
    }
}

/// What an open asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want {
    pub(crate) kind: u32,
    /// Stripes (striped) or entries (pool); `None`: the region's.
    pub(crate) capacity: Option<u32>,
    /// Entries for a new region.
    pub(crate) create_capacity: u32,
    pub(crate) reentrant: bool,
    pub(crate) fifo: bool,
    pub(crate) mode: u32,
    pub(crate) max_holds: u32,
    /// A semaphore region's units per key; 0: a lock region. Must match the region's.
    pub(crate) permits: u32,
}

/// A mapped, validated region.
#[derive(Debug)]
pub(crate) struct Region {
    base: *mut u8,
    pub(crate) header: Header,
    pub(crate) name: String,
}

// SAFETY: the mapping is shared memory accessed only through atomics and process-shared
// mutexes, which any thread may use; `base` is never written after construction.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: `base` is the start of a mapping of `total_len` bytes made in `map`, and no
        // reference into it outlives `self` (every accessor borrows `self`).
        unsafe { libc::munmap(self.base.cast(), self.header.total_len as usize) };
    }
}

fn map(file: &File, len: usize, path: &str) -> Result<*mut u8> {
    // SAFETY: mapping a file we opened read-write, shared, at an address of the kernel's
    // choosing; the result is checked for MAP_FAILED.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io_error("mmap", path, &io::Error::last_os_error()));
    }
    Ok(p.cast())
}

impl Region {
    /// Opens region `name`, creating it as `want` says if it does not exist.
    pub(crate) fn open(name: &str, want: &Want) -> Result<Region> {
        let path = path_of(name)?;
        for _ in 0..100 {
            match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
            {
                Ok(file) => return Self::attach(name, &path, &file, Some(want)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("open", &path, &e)),
            }
            if let Some(region) = Self::create(name, &path, want)? {
                return Ok(region);
            }
            // Somebody else created it first: open theirs.
        }
        Err(Error::Unavailable(
            format!("{path} keeps appearing and disappearing").into(),
        ))
    }

    /// Opens region `name` as its creator made it (any kind, capacity, policy or permits),
    /// never creating it: for looking at it from outside ([`crate::inspect`]). A
    /// missing region is `Unavailable`.
    pub(crate) fn open_existing(name: &str) -> Result<Region> {
        let path = path_of(name)?;
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(file) => Self::attach(name, &path, &file, None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Error::Unavailable(
                format!("no region shm:{name} ({path} does not exist)").into(),
            )),
            Err(e) => Err(io_error("open", &path, &e)),
        }
    }

    /// Makes a new region under a temporary name, initializes it, and links it to `path`;
    /// `None` when another process linked one first.
    fn create(name: &str, path: &str, want: &Want) -> Result<Option<Region>> {
        let capacity = want.capacity.unwrap_or(want.create_capacity);
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(Error::InvalidArgument(
                "capacity must be between 1 and 2^24",
            ));
        }
        let id = xxhash_rust::xxh3::xxh3_64(
            format!(
                "{}{:?}{path}",
                std::process::id(),
                std::time::SystemTime::now()
            )
            .as_bytes(),
        );
        let tmp = format!("{DIR}/.keylock.{name}.{}.{id:x}", std::process::id());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(want.mode & 0o777)
            .open(&tmp)
            .map_err(|e| io_error("create", &tmp, &e))?;
        let result = (|| {
            // The umask must not narrow what the caller asked for.
            file.set_permissions(std::fs::Permissions::from_mode(want.mode & 0o777))
                .map_err(|e| io_error("chmod", &tmp, &e))?;
            let flags = if want.reentrant { FLAG_REENTRANT } else { 0 }
                | if want.fifo { FLAG_FIFO } else { 0 };
            let header = Header::new(want.kind, capacity, flags, want.max_holds, id, want.permits);
            file.set_len(header.total_len)
                .map_err(|e| io_error("size", &tmp, &e))?;
            let base = map(&file, header.total_len as usize, &tmp)?;
            let region = Region {
                base,
                header,
                name: name.to_owned(),
            };
            region.init()?;
            // SAFETY: the header slot is the first bytes of the mapping, aligned, and nobody
            // else can see this file yet.
            unsafe { std::ptr::write_volatile(base.cast::<Header>(), header) };
            let (from, to) = (CString::new(tmp.clone()), CString::new(path));
            let (Ok(from), Ok(to)) = (from, to) else {
                return Err(Error::InvalidArgument("region name"));
            };
            // SAFETY: two valid NUL-terminated paths. link() fails with EEXIST if `path`
            // exists, which makes creation atomic: the name only ever shows a full region.
            let rc = unsafe { libc::link(from.as_ptr(), to.as_ptr()) };
            if rc != 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::AlreadyExists {
                    return Ok(None);
                }
                return Err(io_error("link", path, &e));
            }
            Ok(Some(region))
        })();
        let _ = std::fs::remove_file(&tmp);
        result
    }

    /// Maps and validates an existing region, against `want` if given (else as it is).
    fn attach(name: &str, path: &str, file: &File, want: Option<&Want>) -> Result<Region> {
        let len = file
            .metadata()
            .map_err(|e| io_error("stat", path, &e))?
            .len();
        let incompatible = |what: String| Error::Incompatible(format!("{path}: {what}").into());
        if len < HEADER_LEN as u64 || len > (1 << 40) {
            return Err(incompatible(format!(
                "{len} bytes is not the size of a keylock region"
            )));
        }
        let base = map(file, len as usize, path)?;
        // SAFETY: the mapping is at least HEADER_LEN bytes and page-aligned; Header is plain
        // integers, so any bytes are a valid value; it is read once, by value.
        let header = unsafe { std::ptr::read_volatile(base.cast::<Header>()) };
        // Until validated, the copy says only how long the mapping is (for Drop).
        let mut region = Region {
            base,
            header: Header {
                total_len: len,
                ..header
            },
            name: name.to_owned(),
        };
        if let Some(problem) = header.problem(len) {
            return Err(incompatible(problem));
        }
        region.header = header;
        let Some(want) = want else {
            return Ok(region);
        };
        let kind_name = |k| {
            if k == KIND_POOL {
                "key pool"
            } else {
                "striped lock"
            }
        };
        if header.kind != want.kind {
            return Err(incompatible(format!(
                "the region is a {}, not a {}",
                kind_name(header.kind),
                kind_name(want.kind)
            )));
        }
        if header.permits != want.permits {
            let what = |permits: u32| {
                if permits == 0 {
                    "a lock, not a semaphore".to_owned()
                } else {
                    format!("a semaphore of {permits} permits per key")
                }
            };
            return Err(incompatible(format!(
                "the region is {} (asked for {})",
                what(header.permits),
                what(want.permits)
            )));
        }
        if let Some(c) = want.capacity
            && c != header.capacity
        {
            let what = if header.kind == KIND_POOL {
                "capacity"
            } else {
                "stripes"
            };
            return Err(incompatible(format!(
                "{what} {} (asked for {c})",
                header.capacity
            )));
        }
        let reentrant = header.flags & FLAG_REENTRANT != 0;
        if reentrant != want.reentrant {
            return Err(incompatible(format!(
                "the region is {}reentrant",
                if reentrant { "" } else { "not " }
            )));
        }
        let fifo = header.flags & FLAG_FIFO != 0;
        if fifo != want.fifo {
            return Err(incompatible(format!(
                "the region hands off {} (asked for {})",
                if fifo {
                    "in strict FIFO order"
                } else {
                    "with eventual fairness"
                },
                if want.fifo {
                    "strict FIFO"
                } else {
                    "eventual fairness"
                }
            )));
        }
        if header.max_holds != want.max_holds {
            return Err(incompatible(format!(
                "hold-count limit {} (asked for {})",
                header.max_holds, want.max_holds
            )));
        }
        Ok(region)
    }

    /// Initializes a fresh (zeroed) region: mutexes and free lists.
    fn init(&self) -> Result<()> {
        let h = &self.header;
        let rt = self.runtime();
        let unavailable = |e: io::Error| Error::Unavailable(format!("{}: {e}", self.name).into());
        // SAFETY: the region is not linked under its name yet, so nobody else uses it.
        unsafe { rt.mutex.init() }.map_err(unavailable)?;
        for p in 0..h.procs {
            // SAFETY: as above.
            unsafe { self.proc(p)?.alive.init() }.map_err(unavailable)?;
        }
        let ordering = std::sync::atomic::Ordering::Relaxed;
        for e in 0..h.capacity {
            let entry = self.entry(e)?;
            if h.kind == KIND_POOL {
                entry
                    .next
                    .store(if e + 1 < h.capacity { e + 2 } else { 0 }, ordering);
            } else {
                entry.bind.store(BIND_BOUND, ordering);
            }
            entry.holds.store(0, ordering);
        }
        if h.kind == KIND_POOL {
            rt.free_entries.store(1, ordering);
        }
        for n in 0..h.nodes {
            let next = if n + 1 < h.nodes { n + 2 } else { 0 };
            self.node(n)?.next.store(next, ordering);
        }
        rt.free_nodes.store(1, ordering);
        Ok(())
    }

    /// The mutable header.
    pub(crate) fn runtime(&self) -> &Runtime {
        // SAFETY: RUNTIME_OFFSET + size_of::<Runtime>() <= HEADER_LEN <= the mapping's length
        // (checked at construction); the offset is 64-aligned in a page-aligned mapping; every
        // field is an atomic or a process-shared mutex, valid for any bytes the region holds
        // (the mutex was initialized at creation); the reference borrows `self`, which keeps
        // the mapping alive.
        unsafe { &*self.base.add(RUNTIME_OFFSET).cast::<Runtime>() }
    }

    /// The record at `index` of an array of `count` records of `T` at `offset`, or an error for
    /// an index out of range (a corrupt region).
    #[inline]
    fn record<T>(&self, offset: u64, count: u32, index: u32, what: &str) -> Result<&T> {
        self.record_if(offset, count, index)
            .ok_or_else(|| self.corrupt(what))
    }

    /// [`record`](Self::record) without the error: `None` out of range. For the fast paths,
    /// which leave an index out of range to the full path (it reports it), and which would
    /// otherwise carry the error's making and dropping inline.
    #[inline]
    fn record_if<T>(&self, offset: u64, count: u32, index: u32) -> Option<&T> {
        if index >= count {
            return None;
        }
        let at = offset as usize + index as usize * size_of::<T>();
        debug_assert!(at + size_of::<T>() <= self.header.total_len as usize);
        // SAFETY: the header was validated against this build's layout, so the array of
        // `count` records of `T` at `offset` lies within the mapping and is 64-byte aligned;
        // `index < count`. Every record type is made of atomics (and process-shared mutexes),
        // valid for any bytes; the reference borrows `self`, which keeps the mapping alive.
        Some(unsafe { &*self.base.add(at).cast::<T>() })
    }

    #[inline]
    pub(crate) fn entry(&self, index: u32) -> Result<&Entry> {
        self.record(
            self.header.off_entries,
            self.header.capacity,
            index,
            "entry index",
        )
    }

    /// The entry at `index`, or `None` out of range (the fast paths' [`entry`](Self::entry)).
    #[inline]
    pub(crate) fn entry_if(&self, index: u32) -> Option<&Entry> {
        self.record_if(self.header.off_entries, self.header.capacity, index)
    }

    #[inline]
    pub(crate) fn node(&self, index: u32) -> Result<&Node> {
        self.record(
            self.header.off_nodes,
            self.header.nodes,
            index,
            "node index",
        )
    }

    #[inline]
    pub(crate) fn proc(&self, index: u32) -> Result<&Proc> {
        self.record(
            self.header.off_procs,
            self.header.procs,
            index,
            "process index",
        )
    }

    #[inline]
    pub(crate) fn bucket(&self, index: u32) -> Result<&std::sync::atomic::AtomicU32> {
        self.record(
            self.header.off_buckets,
            self.header.buckets,
            index,
            "bucket index",
        )
    }

    /// The bucket at `index`, or `None` out of range (the fast paths' [`bucket`](Self::bucket)).
    #[inline]
    pub(crate) fn bucket_if(&self, index: u32) -> Option<&std::sync::atomic::AtomicU32> {
        self.record_if(self.header.off_buckets, self.header.buckets, index)
    }

    /// The error for a record found out of range.
    #[cold]
    pub(crate) fn corrupt(&self, what: &str) -> Error {
        Error::Incompatible(format!("corrupt region {}: {what} out of range", self.name).into())
    }

    #[inline]
    pub(crate) fn is_pool(&self) -> bool {
        self.header.kind == KIND_POOL
    }

    #[inline]
    pub(crate) fn reentrant(&self) -> bool {
        self.header.flags & FLAG_REENTRANT != 0
    }

    /// Strict FIFO hand-off (else eventual fairness).
    #[inline]
    pub(crate) fn fifo(&self) -> bool {
        self.header.flags & FLAG_FIFO != 0
    }

    /// The bound on waiting for the table mutex: [`TABLE_MUTEX_WAIT`] plus 200 ns for each
    /// record (entry, node, process slot), the time of the longest legitimate hold (a pass
    /// over every record) on a slow machine. 5 s for a region of the default capacity.
    pub(crate) fn table_wait(&self) -> std::time::Duration {
        let h = &self.header;
        let records = u64::from(h.capacity) + u64::from(h.nodes) + u64::from(h.procs);
        TABLE_MUTEX_WAIT + std::time::Duration::from_nanos(records.saturating_mul(200))
    }

    /// The error for `what`, a mutex of this region, that could not be used.
    #[cold]
    pub(crate) fn mutex_error(&self, what: &str, fault: &MutexFault) -> Error {
        let text: Arc<str> = format!("region {}: {what}: {fault}", self.name).into();
        match fault {
            MutexFault::Kind { .. } => Error::Incompatible(text),
            MutexFault::TimedOut { .. } | MutexFault::Os(_) => Error::Unavailable(text),
        }
    }

    /// The table mutex's guard. `repair` runs when the previous holder died inside. Waits at
    /// most [`Region::table_wait`].
    pub(crate) fn lock_table(&self) -> Result<TableGuard<'_>> {
        let rt = self.runtime();
        match rt.mutex.lock_within(self.table_wait()) {
            Ok(how) => Ok(TableGuard {
                region: self,
                died: how == Locked::OwnerDied,
            }),
            Err(fault) => Err(self.mutex_error("the table mutex", &fault)),
        }
    }
}

/// The table mutex, held. `died`: the previous holder died inside, so the caller must repair
/// the table (and then call [`TableGuard::repaired`]) before using it.
#[derive(Debug)]
pub(crate) struct TableGuard<'r> {
    pub(crate) region: &'r Region,
    pub(crate) died: bool,
}

impl TableGuard<'_> {
    /// Marks the mutex consistent after a repair.
    pub(crate) fn repaired(&mut self) {
        self.region.runtime().mutex.consistent();
        self.died = false;
    }
}

impl Drop for TableGuard<'_> {
    fn drop(&mut self) {
        let rt = self.region.runtime();
        rt.holder.store(0, std::sync::atomic::Ordering::Relaxed);
        // An unrepaired mutex is unlocked without `consistent`: it becomes unrecoverable, and
        // every later lock reports the region unavailable instead of using a broken table.
        rt.mutex.unlock();
    }
}

/// Removes region `name`; whether it existed. Processes that have it open keep using it.
pub(crate) fn unlink(name: &str) -> Result<bool> {
    let path = path_of(name)?;
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_error("unlink", &path, &e)),
    }
}

/// Regions for unit tests, made in-process.
#[cfg(test)]
pub(crate) mod scratch {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::{Region, Want};
    use crate::shm::layout::{FLAG_FIFO, FLAG_REENTRANT};

    /// A unique region name for this test process.
    pub(crate) fn name(what: &str) -> String {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        format!("unit-{what}-{}-{n}", std::process::id())
    }

    /// What an open of a region of `kind`, `capacity` and `flags` asks for.
    pub(crate) fn want(kind: u32, capacity: u32, flags: u32) -> Want {
        Want {
            kind,
            capacity: Some(capacity),
            create_capacity: capacity,
            reentrant: flags & FLAG_REENTRANT != 0,
            fifo: flags & FLAG_FIFO != 0,
            mode: 0o600,
            max_holds: 65_536,
            permits: 0,
        }
    }

    /// A new semaphore region (a pool in strict FIFO order) of `capacity` entries and
    /// `permits` units per key, its name removed at once (as [`region`]).
    pub(crate) fn semaphore(capacity: u32, permits: u32) -> Region {
        let name = name("semaphore");
        let want = Want {
            permits,
            ..want(crate::shm::layout::KIND_POOL, capacity, FLAG_FIFO)
        };
        let region = Region::open(&name, &want).expect("create a region");
        assert!(
            super::unlink(&name).expect("unlink"),
            "the region had a name"
        );
        region
    }

    /// Removes region name `.0` when dropped, so a failing test leaves no file behind.
    pub(crate) struct UnlinkOnDrop(pub(crate) String);

    impl Drop for UnlinkOnDrop {
        fn drop(&mut self) {
            let _ = super::unlink(&self.0);
        }
    }

    /// A new region whose name is removed at once: the mapping stays until the `Region` is
    /// dropped, and nothing is left in `/dev/shm` even when the test fails.
    pub(crate) fn region(kind: u32, capacity: u32, flags: u32) -> Region {
        let name = name("region");
        let region = Region::open(&name, &want(kind, capacity, flags)).expect("create a region");
        assert!(
            super::unlink(&name).expect("unlink"),
            "the region had a name"
        );
        region
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::atomic::Ordering;

    use super::*;

    /// Opens `name` as `want` says, then removes the name.
    fn open_once(name: &str, want: &Want) -> Result<Region> {
        let result = Region::open(name, want);
        let _ = unlink(name);
        result
    }

    /// Writes `bytes` as region `name`'s file.
    fn plant(name: &str, bytes: &[u8]) {
        let mut file = std::fs::File::create(path_of(name).unwrap()).unwrap();
        file.write_all(bytes).unwrap();
    }

    fn incompatible(result: Result<Region>) -> String {
        match result {
            Err(Error::Incompatible(text)) => text.to_string(),
            other => panic!("expected Incompatible, got {other:?}"),
        }
    }

    #[test]
    fn names_are_checked() {
        assert_eq!(path_of("a-b_c.9").unwrap(), "/dev/shm/keylock.a-b_c.9");
        assert!(path_of(&"n".repeat(200)).is_ok());
        for bad in ["", ".hidden", "a/b", "a b", "é", &"n".repeat(201)] {
            assert!(
                matches!(path_of(bad), Err(Error::InvalidArgument(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn a_capacity_out_of_range_is_refused_before_anything_is_made() {
        for capacity in [0, MAX_CAPACITY + 1] {
            let name = scratch::name("capacity");
            let result = open_once(&name, &scratch::want(KIND_POOL, capacity, 0));
            assert!(
                matches!(result, Err(Error::InvalidArgument(_))),
                "capacity {capacity}: {result:?}"
            );
            assert!(!unlink(&name).unwrap(), "a file was left behind");
        }
    }

    #[test]
    fn a_new_region_has_every_record_on_its_free_list() {
        for kind in [KIND_POOL, KIND_STRIPED] {
            let r = scratch::region(kind, 5, 0);
            let h = r.header;
            let rt = r.runtime();
            let list = |mut at: u32, next: &dyn Fn(u32) -> u32| {
                let mut seen = Vec::new();
                while let Some(i) = at.checked_sub(1) {
                    assert!(seen.len() < 1 << 16, "a cycle");
                    seen.push(i);
                    at = next(i);
                }
                seen
            };
            let nodes = list(rt.free_nodes.load(Ordering::Relaxed), &|i| {
                r.node(i).unwrap().next.load(Ordering::Relaxed)
            });
            assert_eq!(nodes, (0..h.nodes).collect::<Vec<_>>());
            let entries = list(rt.free_entries.load(Ordering::Relaxed), &|i| {
                r.entry(i).unwrap().next.load(Ordering::Relaxed)
            });
            if kind == KIND_POOL {
                assert_eq!(entries, (0..5).collect::<Vec<_>>());
            } else {
                // Stripes are bound for good and never on a free list.
                assert!(entries.is_empty());
                for i in 0..5 {
                    assert_eq!(r.entry(i).unwrap().bind.load(Ordering::Relaxed), BIND_BOUND);
                }
            }
        }
    }

    #[test]
    fn records_out_of_range_are_errors_not_reads() {
        let r = scratch::region(KIND_POOL, 3, 0);
        let h = r.header;
        assert!(r.entry(h.capacity - 1).is_ok() && r.node(h.nodes - 1).is_ok());
        assert!(r.proc(h.procs - 1).is_ok() && r.bucket(h.buckets - 1).is_ok());
        assert!(matches!(r.entry(h.capacity), Err(Error::Incompatible(_))));
        assert!(matches!(r.node(h.nodes), Err(Error::Incompatible(_))));
        assert!(matches!(r.proc(h.procs), Err(Error::Incompatible(_))));
        assert!(matches!(r.bucket(h.buckets), Err(Error::Incompatible(_))));
        assert!(matches!(r.entry(u32::MAX), Err(Error::Incompatible(_))));
    }

    #[test]
    fn a_file_of_the_wrong_size_or_header_is_refused() {
        let want = scratch::want(KIND_POOL, 4, 0);
        let name = scratch::name("short");
        plant(&name, &[0; 100]);
        assert!(incompatible(open_once(&name, &want)).contains("not the size"));

        let header = Header::new(KIND_POOL, 4, 0, want.max_holds, 1, 0);
        // SAFETY: `Header` is plain integers without padding before its last field, so it
        // can be read as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((&header as *const Header).cast::<u8>(), size_of::<Header>())
        };
        let mut file = vec![0; header.total_len as usize];
        file[..bytes.len()].copy_from_slice(bytes);
        let name = scratch::name("long");
        file.extend_from_slice(&[0; 4096]);
        plant(&name, &file);
        assert!(incompatible(open_once(&name, &want)).contains("its header says"));

        let name = scratch::name("magic");
        file[0] ^= 0xff;
        plant(&name, &file[..header.total_len as usize]);
        assert!(incompatible(open_once(&name, &want)).contains("bad magic"));
    }

    #[test]
    fn an_open_that_asks_for_another_region_is_refused() {
        let name = scratch::name("mismatch");
        let _cleanup = scratch::UnlinkOnDrop(name.clone());
        let made = Region::open(&name, &scratch::want(KIND_POOL, 8, FLAG_FIFO)).unwrap();
        let cases = [
            (
                scratch::want(KIND_STRIPED, 8, FLAG_FIFO),
                "not a striped lock",
            ),
            (
                scratch::want(KIND_POOL, 16, FLAG_FIFO),
                "capacity 8 (asked for 16)",
            ),
            (
                scratch::want(KIND_POOL, 8, FLAG_FIFO | FLAG_REENTRANT),
                "not reentrant",
            ),
            (scratch::want(KIND_POOL, 8, 0), "strict FIFO order"),
            (
                Want {
                    max_holds: 3,
                    ..scratch::want(KIND_POOL, 8, FLAG_FIFO)
                },
                "hold-count limit",
            ),
            (
                Want {
                    permits: 4,
                    ..scratch::want(KIND_POOL, 8, FLAG_FIFO)
                },
                "a lock, not a semaphore (asked for a semaphore of 4 permits per key)",
            ),
        ];
        for (want, expected) in cases {
            let text = incompatible(Region::open(&name, &want));
            assert!(text.contains(expected), "{text:?} lacks {expected:?}");
        }
        let again = Region::open(
            &name,
            &Want {
                capacity: None,
                ..scratch::want(KIND_POOL, 1, FLAG_FIFO)
            },
        );
        assert_eq!(
            again.unwrap().header,
            made.header,
            "the same region, opened again"
        );
    }
}
