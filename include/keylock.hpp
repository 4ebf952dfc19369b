// keylock.hpp: C++17 RAII wrappers over keylock.h. Header-only; link with -lkeylock.
//
//   keylock::KeyPool pool;
//   {
//       auto guard = pool.lock("account:42");            // released when guard goes out of scope
//       store.write(row, guard.fence());                 // the store rejects older fences
//   }
//   {
//       auto reading = pool.lock_shared("doc:7");        // many shared holders at once
//   }
//   if (auto g = pool.try_lock_for("job:7", std::chrono::milliseconds(50))) { ... }
//   auto both = pool.lock_many({"account:1", "account:2"});   // deadlock-free for any order
//   auto leased = pool.lock("job:9", keylock::options().lease(std::chrono::seconds(30)));
//   pool.force_unlock("job:9");                          // for a holder that never comes back
//
//   auto reentrant = keylock::KeyPool::open("local:", keylock::open_options().reentrant());
//   auto outer = reentrant.lock("k", keylock::options().owner(7));
//   auto inner = reentrant.lock("k", keylock::options().owner(7));   // same owner: nested
//
//   auto counted = keylock::KeyPool::open("local:", keylock::open_options().metrics());
//   if (auto m = counted.metrics()) report(m->contended, m->wait.quantile(0.99));
//
//   keylock::RwLock rw;
//   { auto r = rw.read(); ... }
//   { auto w = rw.write(); ... }
//
//   keylock::Semaphore sem(4);                           // at most 4 units per key
//   {
//       auto p = sem.acquire("tenant:7", 2);             // 2 units, given back on scope exit
//       call_backend(p.fence());                         // every permit has its own fence
//   }
//   if (auto p = sem.try_acquire_for("tenant:7", 1, std::chrono::milliseconds(50))) { ... }
//
// KeyPool, StripedLock, Semaphore and RwLock own their handle and are move-only; a moved-from object is
// empty and may only be destroyed or assigned to. A guard carries one acquisition record
// (keylock_acquisition): it releases exactly that acquisition in its destructor, so a guard
// whose key was force-unlocked, or whose lease ran out, releases nothing that another holder
// took since. Guards are move-only and follow std::unique_lock / std::shared_lock: owns_lock(),
// explicit operator bool, unlock(), lock() / try_lock() / try_lock_for() to take the same key in
// the same mode again, release() to hand the record out, swap(), and the std::defer_lock /
// std::try_to_lock constructors. Failures throw keylock::error (a std::runtime_error carrying
// the keylock_result). Keys are bytes: a std::string_view is passed as its bytes, so a UTF-8
// string names the same lock as the same text in the Python and Node packages. A Semaphore's
// permit is the same kind of guard for a weight of units: it gives back exactly its own units.

#ifndef KEYLOCK_HPP
#define KEYLOCK_HPP

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "keylock.h"

namespace keylock {

/// What every failing call throws: the keylock_result, and keylock_result_str's text.
class error : public std::runtime_error {
public:
    explicit error(keylock_result code) : std::runtime_error(keylock_result_str(code)), code_(code) {}
    /// The KEYLOCK_* code.
    keylock_result code() const noexcept { return code_; }

private:
    keylock_result code_;
};

/// How an acquisition holds its key.
enum class mode : keylock_mode { exclusive = KEYLOCK_EXCLUSIVE, shared = KEYLOCK_SHARED };

namespace detail {

inline void check(keylock_result r) {
    if (r != KEYLOCK_OK) throw error(r);
}

inline const std::uint8_t *bytes(std::string_view s) noexcept {
    return reinterpret_cast<const std::uint8_t *>(s.data());
}

/// Nanoseconds for a timeout: rounded up (so a wait is never shorter than asked), negative or
/// zero as 0 (do not wait), and saturated at UINT64_MAX (wait forever) instead of overflowing
/// for durations such as std::chrono::hours::max().
template <class Rep, class Period>
std::uint64_t to_ns(std::chrono::duration<Rep, Period> d) {
    using float_ns = std::chrono::duration<long double, std::nano>;
    const long double ns = std::chrono::duration_cast<float_ns>(d).count();
    if (!(ns > 0)) return 0;  // negative, zero (or NaN)
    if (ns >= 18446744073709551615.0L) return UINT64_MAX;
    return static_cast<std::uint64_t>(std::ceil(ns));
}

/// Nanoseconds for a lease: at least 1 (a positive lease is required), saturated like to_ns.
template <class Rep, class Period>
std::uint64_t lease_ns(std::chrono::duration<Rep, Period> d) {
    if (!(d > std::chrono::duration<Rep, Period>::zero())) throw error(KEYLOCK_INVALID_ARGUMENT);
    const std::uint64_t ns = to_ns(d);
    return ns == 0 ? 1 : ns;
}

}  // namespace detail

/// What an acquire asks for beyond the key, built by chaining:
/// `keylock::options().shared().lease(30s).owner(7).timeout(50ms)`.
class options {
public:
    options() noexcept : raw_(KEYLOCK_LOCK_OPTIONS_INIT) {}
    /// Shared (many holders) or exclusive (one).
    options &with_mode(keylock::mode m) noexcept {
        raw_.mode = static_cast<keylock_mode>(m);
        return *this;
    }
    options &shared() noexcept { return with_mode(mode::shared); }
    options &exclusive() noexcept { return with_mode(mode::exclusive); }
    /// A lease: the acquisition ends by itself after `d` (which must be positive).
    template <class Rep, class Period>
    options &lease(std::chrono::duration<Rep, Period> d) {
        raw_.lease_ns = detail::lease_ns(d);
        return *this;
    }
    /// The owner, for a reentrant lock object (0: none).
    options &owner(std::uint64_t id) noexcept {
        raw_.owner = id;
        return *this;
    }
    /// Wait at most `d` (zero or negative: do not wait).
    template <class Rep, class Period>
    options &timeout(std::chrono::duration<Rep, Period> d) {
        raw_.timeout_ns = detail::to_ns(d);
        return *this;
    }
    /// Do not wait.
    options &no_wait() noexcept {
        raw_.timeout_ns = KEYLOCK_NO_WAIT;
        return *this;
    }
    /// Wait as long as it takes (the default).
    options &wait_forever() noexcept {
        raw_.timeout_ns = KEYLOCK_WAIT_FOREVER;
        return *this;
    }
    keylock::mode get_mode() const noexcept { return static_cast<keylock::mode>(raw_.mode); }
    const keylock_lock_options &raw() const noexcept { return raw_; }

private:
    keylock_lock_options raw_;
};

/// How KeyPool::open and StripedLock::open make a lock object.
class open_options {
public:
    open_options() noexcept : raw_{} {}
    /// Owners' exclusive re-acquires raise a hold count (options::owner).
    open_options &reentrant(bool on = true) noexcept {
        raw_.reentrant = on;
        return *this;
    }
    /// Strict FIFO hand-off per key.
    open_options &fifo(bool on = true) noexcept {
        raw_.fifo = on;
        return *this;
    }
    /// StripedLock::open: the number of stripes (0: KEYLOCK_DEFAULT_STRIPES).
    open_options &stripes(std::size_t n) noexcept {
        raw_.stripes = n;
        return *this;
    }
    /// Shared-memory scopes: the most keys held or awaited at once.
    open_options &capacity(std::size_t n) noexcept {
        raw_.capacity = n;
        return *this;
    }
    /// Shared-memory scopes: the permission bits of a file they create.
    open_options &permissions(std::uint32_t bits) noexcept {
        raw_.permissions = bits;
        return *this;
    }
    /// Metrics: the object counts what it does, read by metrics() (see keylock::metrics).
    open_options &metrics(bool on = true) noexcept {
        raw_.metrics = on;
        return *this;
    }
    const keylock_open_options &raw() const noexcept { return raw_; }

private:
    keylock_open_options raw_;
};

/// Who holds a key and how (a snapshot): KeyPool::info / StripedLock::info / Semaphore::info.
struct lock_info {
    std::uint64_t fence;
    keylock::mode mode;
    std::uint32_t holders;
    std::uint32_t holds;
    std::uint64_t owner;  // 0: none
    std::optional<std::chrono::nanoseconds> lease_remaining;
    std::size_t waiters;
    /// Units held: a semaphore's (the sum of its holders' weights); a lock's, its holders.
    std::uint32_t units;
};

/// The counts of a pool, striped lock or semaphore, the same fields at every scope (a snapshot):
/// KeyPool::stats / StripedLock::stats / Semaphore::stats. std::nullopt for a figure the scope cannot tell (a
/// Redis scope counts only this process: its `*_here` figures). See keylock_stats.
struct stats {
    std::optional<std::uint64_t> held;
    std::optional<std::uint64_t> waiting;
    std::optional<std::uint64_t> shared_holds;
    std::uint64_t held_here;
    std::uint64_t waiting_here;
    std::optional<std::uint64_t> capacity;
    std::optional<std::uint64_t> entries_in_use;
    std::optional<std::uint64_t> entries_allocated;
    std::optional<std::uint64_t> peak_in_use;
    std::optional<std::uint64_t> contended;
};

namespace detail {

/// Nanoseconds from the C ABI as a duration, saturated at std::chrono::nanoseconds::max().
inline std::chrono::nanoseconds ns(std::uint64_t n) noexcept {
    const auto max = static_cast<std::uint64_t>(std::chrono::nanoseconds::max().count());
    return std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(n < max ? n : max));
}

}  // namespace detail

/// Durations in power-of-two buckets of nanoseconds (keylock_histogram): metrics::wait and
/// metrics::hold. Bucket 0 counts 0 ns, bucket i durations up to upper_bound(i).
class histogram {
public:
    explicit histogram(const keylock_histogram &raw) noexcept : raw_(raw) {}
    /// How many durations were recorded.
    std::uint64_t count() const noexcept { return raw_.count; }
    /// The sum of every recorded duration.
    std::chrono::nanoseconds sum() const noexcept { return detail::ns(raw_.sum_ns); }
    /// The longest recorded duration (0 when none was).
    std::chrono::nanoseconds max() const noexcept { return detail::ns(raw_.max_ns); }
    /// The `q` quantile (0 to 1), as the upper bound of the bucket that holds it capped at
    /// max() (keylock_histogram_quantile); std::nullopt when nothing was recorded.
    std::optional<std::chrono::nanoseconds> quantile(double q) const noexcept {
        if (raw_.count == 0) return std::nullopt;
        return detail::ns(keylock_histogram_quantile(&raw_, q));
    }
    /// The count of bucket `i` (0 for a number past the last, KEYLOCK_HISTOGRAM_BUCKETS - 1).
    std::uint64_t bucket(std::size_t i) const noexcept { return i < KEYLOCK_HISTOGRAM_BUCKETS ? raw_.buckets[i] : 0; }
    /// The longest duration bucket `i` counts (keylock_histogram_upper_bound_ns; saturated).
    static std::chrono::nanoseconds upper_bound(std::size_t i) noexcept {
        return detail::ns(keylock_histogram_upper_bound_ns(i));
    }
    const keylock_histogram &raw() const noexcept { return raw_; }

private:
    keylock_histogram raw_;
};

/// The counts of a lock object opened with open_options::metrics(), totals since it was opened
/// (a snapshot): KeyPool::metrics / StripedLock::metrics / Semaphore::metrics. See
/// keylock_metrics for what each counts.
struct metrics {
    std::uint64_t acquired;
    std::uint64_t contended;
    std::uint64_t timed_out;
    std::uint64_t would_block;
    std::uint64_t cancelled;  // always 0 from C and C++: they have no cancellable acquire
    std::uint64_t lease_expired;
    std::uint64_t owner_died;
    std::uint64_t lost;
    std::uint64_t force_unlocked;
    keylock::histogram wait;
    keylock::histogram hold;
};

namespace detail {

/// The metrics `get` stores (a `_metrics` call), or std::nullopt when the object was opened
/// without metrics (KEYLOCK_INVALID_ARGUMENT); any other failure throws.
template <class Get>
std::optional<keylock::metrics> read_metrics(Get get) {
    keylock_metrics raw{};
    const keylock_result r = get(&raw);
    if (r == KEYLOCK_INVALID_ARGUMENT) return std::nullopt;
    check(r);
    return keylock::metrics{raw.acquired,      raw.contended,  raw.timed_out,
                            raw.would_block,   raw.cancelled,  raw.lease_expired,
                            raw.owner_died,    raw.lost,       raw.force_unlocked,
                            keylock::histogram(raw.wait), keylock::histogram(raw.hold)};
}

/// A keylock_stats field as an optional.
inline std::optional<std::uint64_t> known(std::uint64_t n) {
    if (n == KEYLOCK_STATS_UNKNOWN) return std::nullopt;
    return n;
}

/// A keylock_lock_info as a lock_info, or nullopt for a free key.
inline std::optional<lock_info> to_info(const keylock_lock_info &raw) {
    if (!raw.held) return std::nullopt;
    lock_info out{raw.fence, static_cast<keylock::mode>(raw.mode), raw.holders, raw.holds, raw.owner,
                  std::nullopt, raw.waiters, raw.units};
    if (raw.lease_remaining_ns != KEYLOCK_NO_LEASE)
        out.lease_remaining = std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(raw.lease_remaining_ns));
    return out;
}

/// A keylock_stats as a keylock::stats.
inline keylock::stats to_stats(const keylock_stats &raw) {
    return keylock::stats{known(raw.held),           known(raw.waiting),           known(raw.shared_holds),
                          raw.held_here,             raw.waiting_here,             known(raw.capacity),
                          known(raw.entries_in_use), known(raw.entries_allocated), known(raw.peak_in_use),
                          known(raw.contended)};
}

/// The lease left in a record, or nullopt for none.
inline std::optional<std::chrono::nanoseconds> lease_left(const keylock_acquisition &a) {
    std::uint64_t ns = 0;
    check(keylock_acquisition_lease_remaining(&a, &ns));
    if (ns == KEYLOCK_NO_LEASE) return std::nullopt;
    return detail::ns(ns);
}

// The C functions of each keyed primitive, so that KeyPool and StripedLock share one template.
struct pool_api {
    using handle = keylock_pool;
    static void free(handle *h) noexcept { keylock_pool_free(h); }
    static keylock_result open(const char *n, const keylock_open_options *o, handle **out) { return keylock_pool_open(n, o, out); }
    static keylock_result lock_with(handle *h, const std::uint8_t *k, std::size_t n, const keylock_lock_options *o, keylock_acquisition *a) { return keylock_pool_lock_with(h, k, n, o, a); }
    static keylock_result lock_many_with(handle *h, const std::uint8_t *const *k, const std::size_t *n, const keylock_mode *m, std::size_t c, const keylock_lock_options *o, keylock_acquisition *a, std::size_t *count) { return keylock_pool_lock_many_with(h, k, n, m, c, o, a, count); }
    static keylock_result release(handle *h, keylock_acquisition *a) { return keylock_pool_release(h, a); }
    static keylock_result release_many(handle *h, keylock_acquisition *a, std::size_t n) { return keylock_pool_release_many(h, a, n); }
    static keylock_result extend(handle *h, keylock_acquisition *a, std::uint64_t ns) { return keylock_pool_extend(h, a, ns); }
    static keylock_result is_current(const handle *h, const keylock_acquisition *a, bool *out) { return keylock_pool_is_current(h, a, out); }
    static keylock_result lost(const handle *h, const keylock_acquisition *a, bool *out) { return keylock_pool_lost(h, a, out); }
    static keylock_result force_unlock(handle *h, const std::uint8_t *k, std::size_t n, bool *was) { return keylock_pool_force_unlock(h, k, n, was); }
    static keylock_result is_locked(const handle *h, const std::uint8_t *k, std::size_t n, bool *out) { return keylock_pool_is_locked(h, k, n, out); }
    static keylock_result info(const handle *h, const std::uint8_t *k, std::size_t n, keylock_lock_info *out) { return keylock_pool_info(h, k, n, out); }
    static keylock_result stats(const handle *h, keylock_stats *out) { return keylock_pool_stats(h, out); }
    static keylock_result metrics(const handle *h, keylock_metrics *out) { return keylock_pool_metrics(h, out); }
};

struct striped_api {
    using handle = keylock_striped;
    static void free(handle *h) noexcept { keylock_striped_free(h); }
    static keylock_result open(const char *n, const keylock_open_options *o, handle **out) { return keylock_striped_open(n, o, out); }
    static keylock_result lock_with(handle *h, const std::uint8_t *k, std::size_t n, const keylock_lock_options *o, keylock_acquisition *a) { return keylock_striped_lock_with(h, k, n, o, a); }
    static keylock_result lock_many_with(handle *h, const std::uint8_t *const *k, const std::size_t *n, const keylock_mode *m, std::size_t c, const keylock_lock_options *o, keylock_acquisition *a, std::size_t *count) { return keylock_striped_lock_many_with(h, k, n, m, c, o, a, count); }
    static keylock_result release(handle *h, keylock_acquisition *a) { return keylock_striped_release(h, a); }
    static keylock_result release_many(handle *h, keylock_acquisition *a, std::size_t n) { return keylock_striped_release_many(h, a, n); }
    static keylock_result extend(handle *h, keylock_acquisition *a, std::uint64_t ns) { return keylock_striped_extend(h, a, ns); }
    static keylock_result is_current(const handle *h, const keylock_acquisition *a, bool *out) { return keylock_striped_is_current(h, a, out); }
    static keylock_result lost(const handle *h, const keylock_acquisition *a, bool *out) { return keylock_striped_lost(h, a, out); }
    static keylock_result force_unlock(handle *h, const std::uint8_t *k, std::size_t n, bool *was) { return keylock_striped_force_unlock(h, k, n, was); }
    static keylock_result is_locked(const handle *h, const std::uint8_t *k, std::size_t n, bool *out) { return keylock_striped_is_locked(h, k, n, out); }
    static keylock_result info(const handle *h, const std::uint8_t *k, std::size_t n, keylock_lock_info *out) { return keylock_striped_info(h, k, n, out); }
    static keylock_result stats(const handle *h, keylock_stats *out) { return keylock_striped_stats(h, out); }
    static keylock_result metrics(const handle *h, keylock_metrics *out) { return keylock_striped_metrics(h, out); }
};

template <class> class keyed;

// A semaphore's acquire_many records, for basic_many_guard.
struct semaphore_api {
    using handle = keylock_semaphore;
    static keylock_result release_many(handle *h, keylock_acquisition *a, std::size_t n) { return keylock_semaphore_release_many(h, a, n); }
    static keylock_result lost(const handle *h, const keylock_acquisition *a, bool *out) { return keylock_semaphore_lost(h, a, out); }
};

/// Moves a record out of `from`, leaving it empty (a byte copy stands in for the original,
/// which is never passed to keylock again).
inline keylock_acquisition take(keylock_acquisition &from) noexcept {
    keylock_acquisition out = from;
    from = keylock_acquisition{};
    return out;
}

}  // namespace detail

class Semaphore;

/// One held key: carries its acquisition record (and a copy of the key, to lock it again), and
/// releases exactly that acquisition on destruction. The std::unique_lock / std::shared_lock
/// interface, for one key of a KeyPool or StripedLock, in the mode it was made with.
template <class Api>
class basic_guard {
public:
    using handle_type = typename Api::handle;

    /// A guard that holds nothing and names no key.
    basic_guard() noexcept : handle_(nullptr), acq_{}, key_(), opts_() {}
    /// Locks `key` of `lock` (as `opts` says: mode, lease, owner, wait); throws keylock::error.
    basic_guard(detail::keyed<Api> &lock, std::string_view key, const options &opts = options());
    /// Names `key` without locking it: call lock() / try_lock() later.
    basic_guard(detail::keyed<Api> &lock, std::string_view key, std::defer_lock_t,
                const options &opts = options());
    /// Tries `key` once; owns_lock() says whether it was taken.
    basic_guard(detail::keyed<Api> &lock, std::string_view key, std::try_to_lock_t,
                const options &opts = options());

    basic_guard(basic_guard &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), acq_(detail::take(other.acq_)),
          key_(std::move(other.key_)), opts_(other.opts_) {}
    basic_guard &operator=(basic_guard &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
            acq_ = detail::take(other.acq_);
            key_ = std::move(other.key_);
            opts_ = other.opts_;
        }
        return *this;
    }
    basic_guard(const basic_guard &) = delete;
    basic_guard &operator=(const basic_guard &) = delete;
    ~basic_guard() { reset(); }

    /// Whether this guard holds an acquisition (not released through it yet). A force-unlocked
    /// or expired one still counts until unlock(): ask is_current().
    bool owns_lock() const noexcept { return keylock_acquisition_is_held(&acq_); }
    explicit operator bool() const noexcept { return owns_lock(); }
    /// The key this guard names.
    std::string_view key() const noexcept { return key_; }

    /// The fencing token of the acquisition held (or last held).
    std::uint64_t fence() const noexcept { return acq_.fence; }
    keylock::mode mode() const noexcept { return static_cast<keylock::mode>(acq_.mode); }
    bool owner_died() const noexcept { return acq_.owner_died; }
    /// Whether the acquisition is still the key's current one.
    bool is_current() const {
        bool out = false;
        if (handle_) detail::check(Api::is_current(handle_, &acq_, &out));
        return out;
    }
    /// Whether the lock was lost behind the holder's back (a Redis lease that could not be
    /// renewed in time, or a force-unlock the renewal found); always false for in-process and
    /// shared-memory scopes, and once unlocked. Asks no server.
    bool lost() const {
        bool out = false;
        if (handle_) detail::check(Api::lost(handle_, &acq_, &out));
        return out;
    }
    /// The lease left (zero once run out), or nullopt without a lease; throws
    /// keylock::error(KEYLOCK_NOT_LOCKED) when nothing is held.
    std::optional<std::chrono::nanoseconds> lease_remaining() const { return detail::lease_left(acq_); }
    /// Moves the end of the lease to `d` from now; throws keylock::error (KEYLOCK_LEASE_EXPIRED,
    /// KEYLOCK_NOT_OWNER, KEYLOCK_INVALID_ARGUMENT without a lease, KEYLOCK_NOT_LOCKED).
    template <class Rep, class Period>
    void extend(std::chrono::duration<Rep, Period> d) {
        if (!handle_) throw error(KEYLOCK_NOT_LOCKED);
        detail::check(Api::extend(handle_, &acq_, detail::to_ns(d)));
    }

    /// Releases the acquisition now; throws keylock::error: KEYLOCK_NOT_OWNER (force-unlocked),
    /// KEYLOCK_LEASE_EXPIRED (its lease ran out), KEYLOCK_NOT_LOCKED (nothing held). In every
    /// case the guard holds nothing afterwards.
    void unlock() {
        if (!handle_ || !owns_lock()) throw error(KEYLOCK_NOT_LOCKED);
        detail::check(Api::release(handle_, &acq_));
    }
    /// Takes the key again, in the guard's mode and options; throws keylock::error.
    void lock() {
        prepare();
        detail::check(Api::lock_with(handle_, detail::bytes(key_), key_.size(), &opts_.raw(), &acq_));
    }
    /// Tries the key again without waiting; whether it was taken.
    bool try_lock() { return attempt(options(opts_).no_wait()); }
    /// Waits at most `d` for the key again; whether it was taken.
    template <class Rep, class Period>
    bool try_lock_for(std::chrono::duration<Rep, Period> d) { return attempt(options(opts_).timeout(d)); }
    template <class Clock, class Duration>
    bool try_lock_until(std::chrono::time_point<Clock, Duration> t) { return try_lock_for(t - Clock::now()); }

    /// Hands the record out without releasing it (release it with the C API on native_handle()),
    /// as std::unique_lock::release() does; the guard then names no lock.
    [[nodiscard]] keylock_acquisition release() noexcept {
        handle_ = nullptr;
        return detail::take(acq_);
    }
    void swap(basic_guard &other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(acq_, other.acq_);  // a move each way: neither copy is used twice
        std::swap(key_, other.key_);
        std::swap(opts_, other.opts_);
    }
    /// The C handle of the lock object (NULL for a default-constructed or released guard).
    handle_type *native_handle() const noexcept { return handle_; }
    /// The record itself, for the C API (do not copy it).
    const keylock_acquisition &acquisition() const noexcept { return acq_; }

private:
    template <class> friend class detail::keyed;
    basic_guard(handle_type *h, std::string_view key, const options &opts) noexcept(false)
        : handle_(h), acq_{}, key_(key), opts_(opts) {}

    void prepare() {
        if (!handle_) throw error(KEYLOCK_NULL_ARGUMENT);
        if (owns_lock()) throw error(KEYLOCK_WOULD_BLOCK);  // std: resource_deadlock_would_occur
    }
    bool attempt(const options &o) {
        prepare();
        keylock_result r = Api::lock_with(handle_, detail::bytes(key_), key_.size(), &o.raw(), &acq_);
        if (r == KEYLOCK_WOULD_BLOCK || r == KEYLOCK_TIMEOUT) return false;
        detail::check(r);
        return true;
    }
    void reset() noexcept {
        // A destructor cannot report an error; a stale acquisition (force-unlocked, lease run
        // out) is simply not released: it releases nothing that another holder took since.
        if (handle_ && owns_lock()) (void)Api::release(handle_, &acq_);
    }

    handle_type *handle_;
    keylock_acquisition acq_;
    std::string key_;
    options opts_;
};

/// Several keys locked together by lock_many (or a Semaphore's units of several keys, by
/// acquire_many): one record per distinct lock, in the order of the keys' first occurrence, all
/// released on destruction.
template <class Api>
class basic_many_guard {
public:
    using handle_type = typename Api::handle;
    basic_many_guard(basic_many_guard &&other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), acqs_(std::move(other.acqs_)) {}
    basic_many_guard &operator=(basic_many_guard &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
            acqs_ = std::move(other.acqs_);
        }
        return *this;
    }
    basic_many_guard(const basic_many_guard &) = delete;
    basic_many_guard &operator=(const basic_many_guard &) = delete;
    ~basic_many_guard() { reset(); }

    bool owns_lock() const noexcept { return handle_ != nullptr && !acqs_.empty(); }
    explicit operator bool() const noexcept { return owns_lock(); }
    /// The number of distinct locks held (keys listed twice, or sharing a stripe, count once).
    std::size_t size() const noexcept { return acqs_.size(); }
    /// The fences of the acquisitions, in the order of the keys' first occurrence (keys that
    /// share a lock, such as two keys of one stripe, share the first one's).
    std::vector<std::uint64_t> fences() const {
        std::vector<std::uint64_t> out;
        for (const auto &a : acqs_) out.push_back(a.fence);
        return out;
    }
    /// Whether any of the locks held was lost behind the holder's back (see basic_guard::lost).
    bool lost() const {
        bool out = false;
        for (const auto &a : acqs_) {
            if (handle_) detail::check(Api::lost(handle_, &a, &out));
            if (out) break;
        }
        return out;
    }
    /// Releases every acquisition now; throws keylock::error with the first failure (every one
    /// is released or refused all the same), KEYLOCK_NOT_LOCKED when nothing is held.
    void unlock() {
        if (!owns_lock()) throw error(KEYLOCK_NOT_LOCKED);
        keylock_result r = Api::release_many(std::exchange(handle_, nullptr), acqs_.data(), acqs_.size());
        acqs_.clear();
        detail::check(r);
    }

private:
    template <class> friend class detail::keyed;
    friend class Semaphore;
    basic_many_guard(handle_type *h, std::vector<keylock_acquisition> acqs) noexcept
        : handle_(h), acqs_(std::move(acqs)) {}
    void reset() noexcept {
        if (owns_lock()) (void)Api::release_many(std::exchange(handle_, nullptr), acqs_.data(), acqs_.size());
        acqs_.clear();
    }

    handle_type *handle_;
    std::vector<keylock_acquisition> acqs_;
};

namespace detail {

/// What KeyPool and StripedLock share: the owned handle and the keyed operations.
template <class Api>
class keyed {
public:
    /// Releases one key's acquisition on destruction; see basic_guard.
    using guard = basic_guard<Api>;
    /// Releases a lock_many set on destruction; see basic_many_guard.
    using many_guard = basic_many_guard<Api>;
    using native_handle_type = typename Api::handle *;

    keyed(keyed &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    keyed &operator=(keyed &&other) noexcept {
        if (this != &other) Api::free(std::exchange(handle_, std::exchange(other.handle_, nullptr)));
        return *this;
    }
    keyed(const keyed &) = delete;
    keyed &operator=(const keyed &) = delete;
    ~keyed() { Api::free(handle_); }

    /// Locks `key` exclusively, waiting as long as it takes.
    [[nodiscard]] guard lock(std::string_view key) { return lock(key, options()); }
    /// Locks `key` as `opts` says; throws keylock::error (KEYLOCK_WOULD_BLOCK / KEYLOCK_TIMEOUT
    /// when a wait limit runs out, KEYLOCK_REENTRANCY_LIMIT, ...).
    [[nodiscard]] guard lock(std::string_view key, const options &opts) {
        guard g(handle_, key, opts);
        check(Api::lock_with(handle_, bytes(key), key.size(), &opts.raw(), &g.acq_));
        return g;
    }
    /// Locks `key` in shared mode, waiting as long as it takes.
    [[nodiscard]] guard lock_shared(std::string_view key) { return lock(key, options().shared()); }

    /// Locks `key` if that needs no wait; std::nullopt if it is held.
    [[nodiscard]] std::optional<guard> try_lock(std::string_view key) { return attempt(key, options().no_wait()); }
    [[nodiscard]] std::optional<guard> try_lock_shared(std::string_view key) { return attempt(key, options().shared().no_wait()); }
    /// Locks `key` as `opts` says; std::nullopt when its wait limit runs out.
    [[nodiscard]] std::optional<guard> try_lock(std::string_view key, const options &opts) { return attempt(key, opts); }

    /// Locks `key`, waiting at most `timeout` (rounded up to whole nanoseconds); std::nullopt
    /// when it runs out.
    template <class Rep, class Period>
    [[nodiscard]] std::optional<guard> try_lock_for(std::string_view key, std::chrono::duration<Rep, Period> timeout) {
        return attempt(key, options().timeout(timeout));
    }
    template <class Rep, class Period>
    [[nodiscard]] std::optional<guard> try_lock_shared_for(std::string_view key, std::chrono::duration<Rep, Period> timeout) {
        return attempt(key, options().shared().timeout(timeout));
    }

    /// Locks several keys exclusively together, deadlock-free whatever the order; throws
    /// keylock::error(KEYLOCK_INVALID_ARGUMENT) for an empty list.
    [[nodiscard]] many_guard lock_many(std::initializer_list<std::string_view> keys) {
        std::vector<std::pair<std::string_view, keylock::mode>> list;
        for (auto k : keys) list.emplace_back(k, mode::exclusive);
        return lock_many(list.begin(), list.end(), options());
    }
    /// Locks several keys together, each in its own mode, with `opts`' lease, owner and wait
    /// (KEYLOCK_WOULD_BLOCK / KEYLOCK_TIMEOUT thrown when it runs out: all or nothing).
    [[nodiscard]] many_guard lock_many(std::initializer_list<std::pair<std::string_view, keylock::mode>> keys,
                                       const options &opts = options()) {
        return lock_many(keys.begin(), keys.end(), opts);
    }
    /// lock_many over any range of (key, mode) pairs.
    template <class It>
    [[nodiscard]] many_guard lock_many(It first, It last, const options &opts) {
        std::vector<const std::uint8_t *> ptrs;
        std::vector<std::size_t> lens;
        std::vector<keylock_mode> modes;
        for (; first != last; ++first) {
            std::string_view k = first->first;
            ptrs.push_back(bytes(k));
            lens.push_back(k.size());
            modes.push_back(static_cast<keylock_mode>(first->second));
        }
        std::vector<keylock_acquisition> acqs(ptrs.size());
        std::size_t count = 0;
        check(Api::lock_many_with(handle_, ptrs.data(), lens.data(), modes.data(), ptrs.size(), &opts.raw(),
                                  acqs.data(), &count));
        acqs.resize(count);  // moves records within the vector: each original is dropped unused
        return many_guard(handle_, std::move(acqs));
    }

    /// Frees `key` whoever holds it, advancing its fence; whether it was held. The holders'
    /// guards then release nothing.
    bool force_unlock(std::string_view key) {
        bool was = false;
        check(Api::force_unlock(handle_, bytes(key), key.size(), &was));
        return was;
    }
    /// Whether `key` is locked right now (a snapshot, for tests and diagnostics).
    bool is_locked(std::string_view key) const {
        bool out = false;
        check(Api::is_locked(handle_, bytes(key), key.size(), &out));
        return out;
    }
    /// Who holds `key` and how; std::nullopt when it is free (a snapshot).
    std::optional<lock_info> info(std::string_view key) const {
        keylock_lock_info raw{};
        check(Api::info(handle_, bytes(key), key.size(), &raw));
        return to_info(raw);
    }

    /// The counts of the lock object (a snapshot; see keylock::stats).
    keylock::stats stats() const {
        keylock_stats raw{};
        check(Api::stats(handle_, &raw));
        return to_stats(raw);
    }
    /// The metrics of an object opened with open_options::metrics() (a snapshot; see
    /// keylock::metrics); std::nullopt for one opened without.
    std::optional<keylock::metrics> metrics() const {
        return read_metrics([this](keylock_metrics *out) { return Api::metrics(handle_, out); });
    }

    /// The C handle, still owned by this object (NULL after a move).
    native_handle_type native_handle() const noexcept { return handle_; }

protected:
    explicit keyed(typename Api::handle *h) : handle_(h) {}
    static typename Api::handle *open_handle(std::string_view name, const open_options &opts) {
        typename Api::handle *h = nullptr;
        const std::string owned(name);  // NUL-terminated
        check(Api::open(owned.c_str(), &opts.raw(), &h));
        return h;
    }

private:
    std::optional<guard> attempt(std::string_view key, const options &opts) {
        guard g(handle_, key, opts);
        keylock_result r = Api::lock_with(handle_, bytes(key), key.size(), &opts.raw(), &g.acq_);
        if (r == KEYLOCK_WOULD_BLOCK || r == KEYLOCK_TIMEOUT) return std::nullopt;
        check(r);
        return std::optional<guard>(std::move(g));
    }

    typename Api::handle *handle_;
};

}  // namespace detail

/// Removes the shared-memory region that `name` ("shm:NAME") names; whether it existed. Throws
/// keylock::error (KEYLOCK_INVALID_ARGUMENT for any other name).
inline bool unlink(const std::string &name) {
    bool removed = false;
    detail::check(keylock_unlink(name.c_str(), &removed));
    return removed;
}

template <class Api>
basic_guard<Api>::basic_guard(detail::keyed<Api> &lock, std::string_view key, const options &opts)
    : basic_guard(lock.native_handle(), key, opts) {
    this->lock();
}

template <class Api>
basic_guard<Api>::basic_guard(detail::keyed<Api> &lock, std::string_view key, std::defer_lock_t, const options &opts)
    : basic_guard(lock.native_handle(), key, opts) {}

template <class Api>
basic_guard<Api>::basic_guard(detail::keyed<Api> &lock, std::string_view key, std::try_to_lock_t, const options &opts)
    : basic_guard(lock.native_handle(), key, opts) {
    (void)try_lock();
}

/// One lock per distinct key, made on demand and recycled when released (keylock_pool).
class KeyPool : public detail::keyed<detail::pool_api> {
public:
    /// Throws keylock::error(KEYLOCK_PANIC) if the library cannot create the pool.
    KeyPool() : keyed(make()) {}
    /// The pool `name` names (keylock_pool_open): "local:" for a new one in this process, with
    /// `opts` (reentrant, fifo). Throws keylock::error.
    static KeyPool open(std::string_view name, const open_options &opts = open_options()) {
        return KeyPool(open_handle(name, opts));
    }

private:
    explicit KeyPool(keylock_pool *h) : keyed(h) {}
    static keylock_pool *make() {
        keylock_pool *p = keylock_pool_new();
        if (!p) throw error(KEYLOCK_PANIC);
        return p;
    }
};

/// A fixed array of locks, each key hashed to one (keylock_striped). Keys that share a stripe
/// block each other, so hold several keys with lock_many, never with nested lock() calls.
class StripedLock : public detail::keyed<detail::striped_api> {
public:
    /// `stripes` is rounded up to a power of two; throws
    /// keylock::error(KEYLOCK_INVALID_ARGUMENT) when it is 0 or over KEYLOCK_MAX_STRIPES.
    explicit StripedLock(std::size_t stripes = KEYLOCK_DEFAULT_STRIPES) : keyed(make(stripes)) {}
    /// The striped lock `name` names (keylock_striped_open), with `opts`. Throws keylock::error.
    static StripedLock open(std::string_view name, const open_options &opts = open_options()) {
        return StripedLock(open_handle(name, opts), 0);
    }

private:
    StripedLock(keylock_striped *h, int) : keyed(h) {}
    static keylock_striped *make(std::size_t stripes) {
        keylock_striped *s = keylock_striped_new(stripes);
        if (!s) throw error(KEYLOCK_INVALID_ARGUMENT);
        return s;
    }
};

class Semaphore;

/// Units of one key of a Semaphore, given back on destruction: carries its acquisition record,
/// so it gives back exactly its own units (a permit whose key was force-released, or whose lease
/// ran out, gives back nothing that others took since). Move-only. Made by Semaphore::acquire /
/// try_acquire / try_acquire_for; a default-constructed or moved-from permit holds nothing.
class permit {
public:
    permit() noexcept : handle_(nullptr), acq_{} {}
    permit(permit &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)), acq_(detail::take(other.acq_)) {}
    permit &operator=(permit &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
            acq_ = detail::take(other.acq_);
        }
        return *this;
    }
    permit(const permit &) = delete;
    permit &operator=(const permit &) = delete;
    ~permit() { reset(); }

    /// Whether this permit holds units (not given back through it yet). A force-released or
    /// expired one still counts until unlock(): ask is_current().
    bool owns_lock() const noexcept { return keylock_acquisition_is_held(&acq_); }
    explicit operator bool() const noexcept { return owns_lock(); }
    /// The units held (or last held); 0 for a permit that never held any.
    std::uint32_t weight() const noexcept { return acq_.weight; }
    /// The fencing token of this acquisition: higher than every earlier acquisition's of the key.
    std::uint64_t fence() const noexcept { return acq_.fence; }
    /// Whether the units are still held: not given back, force-released or expired.
    bool is_current() const {
        bool out = false;
        if (handle_) detail::check(keylock_semaphore_is_current(handle_, &acq_, &out));
        return out;
    }
    /// The lease left (zero once run out), or nullopt without a lease; throws
    /// keylock::error(KEYLOCK_NOT_LOCKED) when nothing is held.
    std::optional<std::chrono::nanoseconds> lease_remaining() const { return detail::lease_left(acq_); }
    /// Moves the end of the lease to `d` from now; throws keylock::error (KEYLOCK_LEASE_EXPIRED,
    /// KEYLOCK_NOT_OWNER, KEYLOCK_INVALID_ARGUMENT without a lease, KEYLOCK_NOT_LOCKED).
    template <class Rep, class Period>
    void extend(std::chrono::duration<Rep, Period> d) {
        if (!handle_) throw error(KEYLOCK_NOT_LOCKED);
        detail::check(keylock_semaphore_extend(handle_, &acq_, detail::to_ns(d)));
    }
    /// Gives the units back now; throws keylock::error: KEYLOCK_NOT_OWNER (force-released),
    /// KEYLOCK_LEASE_EXPIRED (its lease ran out), KEYLOCK_NOT_LOCKED (nothing held). In every
    /// case the permit holds nothing afterwards.
    void unlock() {
        if (!handle_ || !owns_lock()) throw error(KEYLOCK_NOT_LOCKED);
        detail::check(keylock_semaphore_release(handle_, &acq_));
    }
    /// Hands the record out without giving the units back (release it with
    /// keylock_semaphore_release on native_handle()); the permit then names no semaphore.
    [[nodiscard]] keylock_acquisition release() noexcept {
        handle_ = nullptr;
        return detail::take(acq_);
    }
    void swap(permit &other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(acq_, other.acq_);  // a move each way: neither copy is used twice
    }
    /// The C handle of the semaphore (NULL for a default-constructed or released permit).
    keylock_semaphore *native_handle() const noexcept { return handle_; }
    /// The record itself, for the C API (do not copy it).
    const keylock_acquisition &acquisition() const noexcept { return acq_; }

private:
    friend class Semaphore;
    explicit permit(keylock_semaphore *h) noexcept : handle_(h), acq_{} {}
    void reset() noexcept {
        // A destructor cannot report an error; a stale permit simply gives back nothing.
        if (handle_ && owns_lock()) (void)keylock_semaphore_release(handle_, &acq_);
    }

    keylock_semaphore *handle_;
    keylock_acquisition acq_;
};

/// At most `permits` units held per key (keylock_semaphore): each acquire takes a weight of
/// units (1 to permits) of one key, strict FIFO per key, and returns a permit that gives them
/// back. Failures throw keylock::error (KEYLOCK_INVALID_ARGUMENT for a bad weight).
class Semaphore {
public:
    /// Gives one acquisition's units back on destruction; see permit.
    using guard = permit;
    /// Gives an acquire_many set's units back on destruction; see basic_many_guard.
    using many_guard = basic_many_guard<detail::semaphore_api>;

    /// A semaphore in this process with `permits` units per key; throws
    /// keylock::error(KEYLOCK_INVALID_ARGUMENT) when it is 0 or over KEYLOCK_MAX_PERMITS.
    explicit Semaphore(std::uint32_t permits) : handle_(keylock_semaphore_new(permits)) {
        if (!handle_) throw error(KEYLOCK_INVALID_ARGUMENT);
    }
    /// The semaphore `name` names (keylock_semaphore_open: "local:", "shm:NAME", "redis://..." or
    /// "postgres://...", every open of a shared one with the same permits). Throws keylock::error.
    static Semaphore open(std::string_view name, std::uint32_t permits, const open_options &opts = open_options()) {
        keylock_semaphore *h = nullptr;
        const std::string owned(name);  // NUL-terminated
        detail::check(keylock_semaphore_open(owned.c_str(), permits, &opts.raw(), &h));
        return Semaphore(h, 0);
    }
    Semaphore(Semaphore &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Semaphore &operator=(Semaphore &&other) noexcept {
        if (this != &other) keylock_semaphore_free(std::exchange(handle_, std::exchange(other.handle_, nullptr)));
        return *this;
    }
    Semaphore(const Semaphore &) = delete;
    Semaphore &operator=(const Semaphore &) = delete;
    ~Semaphore() { keylock_semaphore_free(handle_); }

    /// The units per key (0 after a move).
    std::uint32_t permits() const noexcept { return keylock_semaphore_permits(handle_); }

    /// Takes `weight` units of `key`, waiting as long as it takes.
    [[nodiscard]] permit acquire(std::string_view key, std::uint32_t weight = 1) {
        return acquire(key, weight, options());
    }
    /// Takes `weight` units of `key` as `opts` says (its lease and wait; mode and owner do not
    /// apply); throws keylock::error (KEYLOCK_WOULD_BLOCK / KEYLOCK_TIMEOUT when a wait limit
    /// runs out, KEYLOCK_INVALID_ARGUMENT for a bad weight).
    [[nodiscard]] permit acquire(std::string_view key, std::uint32_t weight, const options &opts) {
        permit p(handle_);
        detail::check(keylock_semaphore_acquire_with(handle_, detail::bytes(key), key.size(), weight, &opts.raw(), &p.acq_));
        return p;
    }
    /// Takes `weight` units of `key` if that needs no wait; std::nullopt otherwise.
    [[nodiscard]] std::optional<permit> try_acquire(std::string_view key, std::uint32_t weight = 1) {
        return try_acquire(key, weight, options().no_wait());
    }
    /// Takes `weight` units of `key`, waiting at most `timeout`; std::nullopt when it runs out.
    template <class Rep, class Period>
    [[nodiscard]] std::optional<permit> try_acquire_for(std::string_view key, std::uint32_t weight,
                                                        std::chrono::duration<Rep, Period> timeout) {
        return try_acquire(key, weight, options().timeout(timeout));
    }
    /// Takes `weight` units of `key` as `opts` says; std::nullopt when its wait limit runs out.
    [[nodiscard]] std::optional<permit> try_acquire(std::string_view key, std::uint32_t weight, const options &opts) {
        permit p(handle_);
        keylock_result r = keylock_semaphore_acquire_with(handle_, detail::bytes(key), key.size(), weight, &opts.raw(), &p.acq_);
        if (r == KEYLOCK_WOULD_BLOCK || r == KEYLOCK_TIMEOUT) return std::nullopt;
        detail::check(r);
        return std::optional<permit>(std::move(p));
    }

    /// Takes `weight` units of every one of `keys` together, all or nothing, deadlock-free
    /// whatever the order (a key listed twice is taken once), with `opts`' lease and wait
    /// (KEYLOCK_WOULD_BLOCK / KEYLOCK_TIMEOUT thrown when it runs out); throws
    /// keylock::error(KEYLOCK_INVALID_ARGUMENT) for an empty list or a bad weight.
    [[nodiscard]] many_guard acquire_many(std::initializer_list<std::string_view> keys, std::uint32_t weight = 1,
                                          const options &opts = options()) {
        std::vector<const std::uint8_t *> ptrs;
        std::vector<std::size_t> lens;
        for (auto k : keys) {
            ptrs.push_back(detail::bytes(k));
            lens.push_back(k.size());
        }
        std::vector<keylock_acquisition> acqs(ptrs.size());
        std::size_t count = 0;
        detail::check(keylock_semaphore_acquire_many(handle_, ptrs.data(), lens.data(), ptrs.size(), weight,
                                                     &opts.raw(), acqs.data(), &count));
        acqs.resize(count);  // moves records within the vector: each original is dropped unused
        return many_guard(handle_, std::move(acqs));
    }

    /// Ends every hold of `key`, advancing its fence; whether any units were held. The holders'
    /// permits then give back nothing.
    bool force_release(std::string_view key) {
        bool was = false;
        detail::check(keylock_semaphore_force_release(handle_, detail::bytes(key), key.size(), &was));
        return was;
    }
    /// Who holds units of `key` (lock_info::units, holders, waiters, fence); std::nullopt when
    /// none are held (a snapshot).
    std::optional<lock_info> info(std::string_view key) const {
        keylock_lock_info raw{};
        detail::check(keylock_semaphore_info(handle_, detail::bytes(key), key.size(), &raw));
        return detail::to_info(raw);
    }
    /// The counts of the semaphore (a snapshot; shared_holds counts units).
    keylock::stats stats() const {
        keylock_stats raw{};
        detail::check(keylock_semaphore_stats(handle_, &raw));
        return detail::to_stats(raw);
    }
    /// The metrics of a semaphore opened with open_options::metrics() (a snapshot; see
    /// keylock::metrics); std::nullopt for one opened without.
    std::optional<keylock::metrics> metrics() const {
        return detail::read_metrics([this](keylock_metrics *out) { return keylock_semaphore_metrics(handle_, out); });
    }

    /// The C handle, still owned by this object (NULL after a move).
    keylock_semaphore *native_handle() const noexcept { return handle_; }

private:
    // The int keeps a literal 0 (Semaphore(0), refused permits) from meaning a null handle.
    Semaphore(keylock_semaphore *h, int) noexcept : handle_(h) {}
    keylock_semaphore *handle_;
};

class RwLock;

namespace detail {
/// read_guard and write_guard: one acquisition of an RwLock, released on destruction; the
/// std::shared_lock (reads) and std::unique_lock (writes) interface.
template <keylock_mode Mode>
class rw_guard {
public:
    rw_guard() noexcept : handle_(nullptr), acq_{} {}
    /// Takes the lock; throws keylock::error.
    explicit rw_guard(RwLock &rw);
    /// Names the lock without taking it.
    rw_guard(RwLock &rw, std::defer_lock_t) noexcept;
    /// Tries once; owns_lock() says whether it was taken.
    rw_guard(RwLock &rw, std::try_to_lock_t);

    rw_guard(rw_guard &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)), acq_(take(other.acq_)) {}
    rw_guard &operator=(rw_guard &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
            acq_ = take(other.acq_);
        }
        return *this;
    }
    rw_guard(const rw_guard &) = delete;
    rw_guard &operator=(const rw_guard &) = delete;
    ~rw_guard() { reset(); }

    bool owns_lock() const noexcept { return keylock_acquisition_is_held(&acq_); }
    explicit operator bool() const noexcept { return owns_lock(); }
    /// A write acquisition's fence (0 for reads).
    std::uint64_t fence() const noexcept { return acq_.fence; }
    /// Releases now; throws keylock::error(KEYLOCK_NOT_LOCKED) if this guard holds nothing.
    void unlock() {
        if (!handle_ || !owns_lock()) throw error(KEYLOCK_NOT_LOCKED);
        check(keylock_rwlock_release(handle_, &acq_));
    }
    void lock() { check(take_lock(KEYLOCK_WAIT_FOREVER)); }
    bool try_lock() { return busy(take_lock(KEYLOCK_NO_WAIT)); }
    template <class Rep, class Period>
    bool try_lock_for(std::chrono::duration<Rep, Period> d) { return busy(take_lock(to_ns(d))); }
    template <class Clock, class Duration>
    bool try_lock_until(std::chrono::time_point<Clock, Duration> t) { return try_lock_for(t - Clock::now()); }
    /// Hands the record out without releasing it.
    [[nodiscard]] keylock_acquisition release() noexcept {
        handle_ = nullptr;
        return take(acq_);
    }
    void swap(rw_guard &other) noexcept {
        std::swap(handle_, other.handle_);
        std::swap(acq_, other.acq_);
    }

private:
    friend class keylock::RwLock;
    bool attempt(std::uint64_t timeout_ns) { return busy(take_lock(timeout_ns)); }
    keylock_result take_lock(std::uint64_t timeout_ns) {
        if (!handle_) throw error(KEYLOCK_NULL_ARGUMENT);
        if (owns_lock()) throw error(KEYLOCK_WOULD_BLOCK);
        return Mode == KEYLOCK_SHARED ? keylock_rwlock_read_lock_timeout(handle_, timeout_ns, &acq_)
                                      : keylock_rwlock_write_lock_timeout(handle_, timeout_ns, &acq_);
    }
    static bool busy(keylock_result r) {
        if (r == KEYLOCK_WOULD_BLOCK || r == KEYLOCK_TIMEOUT) return false;
        check(r);
        return true;
    }
    void reset() noexcept {
        if (handle_ && owns_lock()) (void)keylock_rwlock_release(handle_, &acq_);
    }
    keylock_rwlock *handle_;
    keylock_acquisition acq_;
};
}  // namespace detail

/// A reader-writer lock whose readers scale across cores (keylock_rwlock). Its guards carry
/// their acquisitions: `auto r = rw.read();`, `RwLock::write_guard w(rw, std::defer_lock);`.
class RwLock {
public:
    /// Holds a read lock and releases it on destruction (the std::shared_lock interface).
    using read_guard = detail::rw_guard<KEYLOCK_SHARED>;
    /// Holds the write lock and releases it on destruction (the std::unique_lock interface).
    using write_guard = detail::rw_guard<KEYLOCK_EXCLUSIVE>;

    /// Throws keylock::error(KEYLOCK_PANIC) if the library cannot create the lock.
    RwLock() : handle_(keylock_rwlock_new()) {
        if (!handle_) throw error(KEYLOCK_PANIC);
    }
    RwLock(RwLock &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    RwLock &operator=(RwLock &&other) noexcept {
        if (this != &other) keylock_rwlock_free(std::exchange(handle_, std::exchange(other.handle_, nullptr)));
        return *this;
    }
    RwLock(const RwLock &) = delete;
    RwLock &operator=(const RwLock &) = delete;
    ~RwLock() { keylock_rwlock_free(handle_); }

    [[nodiscard]] read_guard read() { return read_guard(*this); }
    [[nodiscard]] std::optional<read_guard> try_read() { return attempt<read_guard>(KEYLOCK_NO_WAIT); }
    template <class Rep, class Period>
    [[nodiscard]] std::optional<read_guard> try_read_for(std::chrono::duration<Rep, Period> timeout) {
        return attempt<read_guard>(detail::to_ns(timeout));
    }
    [[nodiscard]] write_guard write() { return write_guard(*this); }
    [[nodiscard]] std::optional<write_guard> try_write() { return attempt<write_guard>(KEYLOCK_NO_WAIT); }
    template <class Rep, class Period>
    [[nodiscard]] std::optional<write_guard> try_write_for(std::chrono::duration<Rep, Period> timeout) {
        return attempt<write_guard>(detail::to_ns(timeout));
    }

    /// The C handle, still owned by this object (NULL after a move).
    keylock_rwlock *native_handle() const noexcept { return handle_; }

private:
    template <class Guard>
    std::optional<Guard> attempt(std::uint64_t timeout_ns) {
        Guard g(*this, std::defer_lock);
        if (!g.attempt(timeout_ns)) return std::nullopt;
        return std::optional<Guard>(std::move(g));
    }

    keylock_rwlock *handle_;
};

namespace detail {
template <keylock_mode Mode>
rw_guard<Mode>::rw_guard(RwLock &rw) : handle_(rw.native_handle()), acq_{} {
    lock();
}
template <keylock_mode Mode>
rw_guard<Mode>::rw_guard(RwLock &rw, std::defer_lock_t) noexcept : handle_(rw.native_handle()), acq_{} {}
template <keylock_mode Mode>
rw_guard<Mode>::rw_guard(RwLock &rw, std::try_to_lock_t) : handle_(rw.native_handle()), acq_{} {
    (void)try_lock();
}
}  // namespace detail

}  // namespace keylock

#endif  // KEYLOCK_HPP
