// keylock.hpp: C++17 RAII wrappers over keylock.h. Header-only; link with -lkeylock.
//
//   keylock::KeyPool pool;
//   {
//       auto guard = pool.lock("account:42");   // unlocks when guard goes out of scope
//       ...
//   }
//   if (auto g = pool.try_lock_for("job:7", std::chrono::milliseconds(50))) { ... }
//   auto both = pool.lock_many({"account:1", "account:2"});   // deadlock-free for any order
//
//   keylock::RwLock rw;
//   { auto r = rw.read(); ... }          // or std::shared_lock<keylock::RwLock> r(rw);
//   { auto w = rw.write(); ... }         // or std::unique_lock<keylock::RwLock> w(rw);
//
// KeyPool, StripedLock and RwLock own their handle and are move-only; a moved-from object is
// empty and may only be destroyed or assigned to. A guard owns one acquisition: it releases it in
// its destructor, is move-only, and can be released early with unlock(). Failures throw
// keylock::error (a std::runtime_error carrying the keylock_result). Keys are bytes: a
// std::string_view is passed as its bytes, so a UTF-8 string names the same lock as the same text
// in the Python and Node packages.

#ifndef KEYLOCK_HPP
#define KEYLOCK_HPP

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
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

namespace detail {

inline void check(keylock_result r) {
    if (r != KEYLOCK_OK) throw error(r);
}

inline const std::uint8_t *bytes(std::string_view s) noexcept {
    return reinterpret_cast<const std::uint8_t *>(s.data());
}

/// Milliseconds for a _timeout call: rounded up (so a wait is never shorter than asked),
/// negative as 0, and saturated at UINT64_MAX (which waits without limit) instead of overflowing
/// for durations such as std::chrono::hours::max().
template <class Rep, class Period>
std::uint64_t to_ms(std::chrono::duration<Rep, Period> d) {
    using float_ms = std::chrono::duration<long double, std::milli>;
    const long double ms = std::chrono::duration_cast<float_ms>(d).count();
    if (!(ms > 0)) return 0;  // negative, zero (or NaN)
    if (ms >= 18446744073709551615.0L) return UINT64_MAX;
    return static_cast<std::uint64_t>(std::ceil(ms));
}

// The C functions of each keyed primitive, so that KeyPool and StripedLock share one template.
struct pool_api {
    using handle = keylock_pool;
    static void free(handle *h) noexcept { keylock_pool_free(h); }
    static keylock_result lock(handle *h, const std::uint8_t *k, std::size_t n) { return keylock_pool_lock(h, k, n); }
    static keylock_result try_lock(handle *h, const std::uint8_t *k, std::size_t n) { return keylock_pool_try_lock(h, k, n); }
    static keylock_result lock_timeout(handle *h, const std::uint8_t *k, std::size_t n, std::uint64_t ms) { return keylock_pool_lock_timeout(h, k, n, ms); }
    static keylock_result unlock(handle *h, const std::uint8_t *k, std::size_t n) { return keylock_pool_unlock(h, k, n); }
    static keylock_result is_locked(const handle *h, const std::uint8_t *k, std::size_t n, bool *out) { return keylock_pool_is_locked(h, k, n, out); }
    static keylock_result lock_many(handle *h, const std::uint8_t *const *k, const std::size_t *n, std::size_t c) { return keylock_pool_lock_many(h, k, n, c); }
    static keylock_result unlock_many(handle *h, const std::uint8_t *const *k, const std::size_t *n, std::size_t c) { return keylock_pool_unlock_many(h, k, n, c); }
};

struct striped_api {
    using handle = keylock_striped;
    static void free(handle *h) noexcept { keylock_striped_free(h); }
    static keylock_result lock(handle *h, const std::uint8_t *k, std::size_t n) { return keylock_striped_lock(h, k, n); }
    static keylock_result try_lock(handle *h, const std::uint8_t *k, std::size_t n) { return keylock_striped_try_lock(h, k, n); }
    static keylock_result lock_timeout(handle *h, const std::uint8_t *k, std::size_t n, std::uint64_t ms) { return keylock_striped_lock_timeout(h, k, n, ms); }
    static keylock_result unlock(handle *h, const std::uint8_t *k, std::size_t n) { return keylock_striped_unlock(h, k, n); }
    static keylock_result is_locked(const handle *h, const std::uint8_t *k, std::size_t n, bool *out) { return keylock_striped_is_locked(h, k, n, out); }
    static keylock_result lock_many(handle *h, const std::uint8_t *const *k, const std::size_t *n, std::size_t c) { return keylock_striped_lock_many(h, k, n, c); }
    static keylock_result unlock_many(handle *h, const std::uint8_t *const *k, const std::size_t *n, std::size_t c) { return keylock_striped_unlock_many(h, k, n, c); }
};

/// Holds one locked key (a copy of its bytes) and unlocks it on destruction.
template <class Api>
class key_guard {
public:
    key_guard(key_guard &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)), key_(std::move(other.key_)) {}
    key_guard &operator=(key_guard &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
            key_ = std::move(other.key_);
        }
        return *this;
    }
    key_guard(const key_guard &) = delete;
    key_guard &operator=(const key_guard &) = delete;
    ~key_guard() { reset(); }

    /// Whether this guard still holds its key.
    bool owns_lock() const noexcept { return handle_ != nullptr; }
    explicit operator bool() const noexcept { return owns_lock(); }
    /// The key this guard locked.
    std::string_view key() const noexcept { return key_; }

    /// Unlocks now; throws keylock::error(KEYLOCK_NOT_LOCKED) if this guard holds nothing.
    void unlock() {
        if (!handle_) throw error(KEYLOCK_NOT_LOCKED);
        check(Api::unlock(std::exchange(handle_, nullptr), bytes(key_), key_.size()));
    }

private:
    template <class> friend class keyed;
    key_guard(typename Api::handle *h, std::string_view key) : handle_(h), key_(key) {}
    void reset() noexcept {
        // A destructor cannot report an error; the library only fails here on misuse of the C
        // handle behind the guard's back (someone else unlocked the key).
        if (handle_) (void)Api::unlock(std::exchange(handle_, nullptr), bytes(key_), key_.size());
    }

    typename Api::handle *handle_;
    std::string key_;
};

/// Holds several keys locked together by lock_many and unlocks them all on destruction.
template <class Api>
class keys_guard {
public:
    keys_guard(keys_guard &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)), keys_(std::move(other.keys_)) {}
    keys_guard &operator=(keys_guard &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
            keys_ = std::move(other.keys_);
        }
        return *this;
    }
    keys_guard(const keys_guard &) = delete;
    keys_guard &operator=(const keys_guard &) = delete;
    ~keys_guard() { reset(); }

    bool owns_lock() const noexcept { return handle_ != nullptr; }
    explicit operator bool() const noexcept { return owns_lock(); }
    /// The keys this guard locked, in the order given.
    const std::vector<std::string> &keys() const noexcept { return keys_; }

    /// Unlocks every key now; throws keylock::error(KEYLOCK_NOT_LOCKED) if this guard holds
    /// nothing.
    void unlock() {
        if (!handle_) throw error(KEYLOCK_NOT_LOCKED);
        call(Api::unlock_many, std::exchange(handle_, nullptr), keys_);
    }

private:
    template <class> friend class keyed;
    keys_guard(typename Api::handle *h, std::vector<std::string> keys) : handle_(h), keys_(std::move(keys)) {}

    template <class F>
    static void call(F f, typename Api::handle *h, const std::vector<std::string> &keys) {
        std::vector<const std::uint8_t *> ptrs;
        std::vector<std::size_t> lens;
        ptrs.reserve(keys.size());
        lens.reserve(keys.size());
        for (const auto &k : keys) {
            ptrs.push_back(bytes(k));
            lens.push_back(k.size());
        }
        check(f(h, ptrs.data(), lens.data(), keys.size()));
    }
    void reset() noexcept {
        if (!handle_) return;
        try {
            call(Api::unlock_many, std::exchange(handle_, nullptr), keys_);
        } catch (...) {
            // Destructors do not throw (bad_alloc building the arrays, or misuse elsewhere).
        }
    }

    typename Api::handle *handle_;
    std::vector<std::string> keys_;
};

/// What KeyPool and StripedLock share: the owned handle and the keyed operations.
template <class Api>
class keyed {
public:
    /// Releases one key on destruction; see key_guard.
    using guard = key_guard<Api>;
    /// Releases a lock_many set on destruction; see keys_guard.
    using many_guard = keys_guard<Api>;
    using native_handle_type = typename Api::handle *;

    keyed(keyed &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    keyed &operator=(keyed &&other) noexcept {
        if (this != &other) Api::free(std::exchange(handle_, std::exchange(other.handle_, nullptr)));
        return *this;
    }
    keyed(const keyed &) = delete;
    keyed &operator=(const keyed &) = delete;
    ~keyed() { Api::free(handle_); }

    /// Locks `key`, waiting as long as it takes.
    [[nodiscard]] guard lock(std::string_view key) {
        check(Api::lock(handle_, bytes(key), key.size()));
        return guard(handle_, key);
    }

    /// Locks `key` if that needs no wait; std::nullopt if it is held.
    [[nodiscard]] std::optional<guard> try_lock(std::string_view key) {
        keylock_result r = Api::try_lock(handle_, bytes(key), key.size());
        if (r == KEYLOCK_WOULD_BLOCK) return std::nullopt;
        check(r);
        return guard(handle_, key);
    }

    /// Locks `key`, waiting at most `timeout` (rounded up to whole milliseconds); std::nullopt
    /// when it runs out.
    template <class Rep, class Period>
    [[nodiscard]] std::optional<guard> try_lock_for(std::string_view key, std::chrono::duration<Rep, Period> timeout) {
        keylock_result r = Api::lock_timeout(handle_, bytes(key), key.size(), to_ms(timeout));
        if (r == KEYLOCK_TIMEOUT) return std::nullopt;
        check(r);
        return guard(handle_, key);
    }

    /// Locks several keys together, deadlock-free whatever the order; throws
    /// keylock::error(KEYLOCK_INVALID_ARGUMENT) for an empty list.
    [[nodiscard]] many_guard lock_many(std::initializer_list<std::string_view> keys) {
        return lock_many(keys.begin(), keys.end());
    }

    /// lock_many over any range of things convertible to std::string_view.
    template <class It>
    [[nodiscard]] many_guard lock_many(It first, It last) {
        std::vector<std::string> owned;
        for (; first != last; ++first) owned.emplace_back(std::string_view(*first));
        many_guard::call(Api::lock_many, handle_, owned);
        return many_guard(handle_, std::move(owned));
    }

    /// Whether `key` is locked right now (a snapshot, for tests and diagnostics).
    bool is_locked(std::string_view key) const {
        bool out = false;
        check(Api::is_locked(handle_, bytes(key), key.size(), &out));
        return out;
    }

    /// The C handle, still owned by this object (NULL after a move).
    native_handle_type native_handle() const noexcept { return handle_; }

protected:
    explicit keyed(typename Api::handle *h) : handle_(h) {}

private:
    typename Api::handle *handle_;
};

}  // namespace detail

/// One lock per distinct key, made on demand and recycled when released (keylock_pool).
class KeyPool : public detail::keyed<detail::pool_api> {
public:
    /// Throws keylock::error(KEYLOCK_PANIC) if the library cannot create the pool.
    KeyPool() : keyed(make()) {}

private:
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
    explicit StripedLock(std::size_t stripes = 1024) : keyed(make(stripes)) {}

private:
    static keylock_striped *make(std::size_t stripes) {
        keylock_striped *s = keylock_striped_new(stripes);
        if (!s) throw error(KEYLOCK_INVALID_ARGUMENT);
        return s;
    }
};

/// A reader-writer lock whose readers scale across cores (keylock_rwlock). It also meets the
/// standard SharedTimedMutex requirements, so std::unique_lock, std::shared_lock and
/// std::lock_guard work with it.
class RwLock {
public:
    /// Holds a read lock and releases it on destruction.
    class read_guard;
    /// Holds the write lock and releases it on destruction.
    class write_guard;

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

    [[nodiscard]] read_guard read();
    [[nodiscard]] std::optional<read_guard> try_read();
    template <class Rep, class Period>
    [[nodiscard]] std::optional<read_guard> try_read_for(std::chrono::duration<Rep, Period> timeout);
    [[nodiscard]] write_guard write();
    [[nodiscard]] std::optional<write_guard> try_write();
    template <class Rep, class Period>
    [[nodiscard]] std::optional<write_guard> try_write_for(std::chrono::duration<Rep, Period> timeout);

    // SharedTimedMutex: for std::unique_lock / std::shared_lock. Errors other than "busy" throw.
    void lock() { detail::check(keylock_rwlock_write_lock(handle_)); }
    bool try_lock() { return busy(keylock_rwlock_try_write_lock(handle_), KEYLOCK_WOULD_BLOCK); }
    template <class Rep, class Period>
    bool try_lock_for(std::chrono::duration<Rep, Period> timeout) {
        return busy(keylock_rwlock_write_lock_timeout(handle_, detail::to_ms(timeout)), KEYLOCK_TIMEOUT);
    }
    template <class Clock, class Duration>
    bool try_lock_until(std::chrono::time_point<Clock, Duration> deadline) { return try_lock_for(deadline - Clock::now()); }
    void unlock() { detail::check(keylock_rwlock_write_unlock(handle_)); }
    void lock_shared() { detail::check(keylock_rwlock_read_lock(handle_)); }
    bool try_lock_shared() { return busy(keylock_rwlock_try_read_lock(handle_), KEYLOCK_WOULD_BLOCK); }
    template <class Rep, class Period>
    bool try_lock_shared_for(std::chrono::duration<Rep, Period> timeout) {
        return busy(keylock_rwlock_read_lock_timeout(handle_, detail::to_ms(timeout)), KEYLOCK_TIMEOUT);
    }
    template <class Clock, class Duration>
    bool try_lock_shared_until(std::chrono::time_point<Clock, Duration> deadline) {
        return try_lock_shared_for(deadline - Clock::now());
    }
    void unlock_shared() { detail::check(keylock_rwlock_read_unlock(handle_)); }

    /// The C handle, still owned by this object (NULL after a move).
    keylock_rwlock *native_handle() const noexcept { return handle_; }

private:
    // true on KEYLOCK_OK, false on the "busy" code, throws on anything else.
    static bool busy(keylock_result r, keylock_result busy_code) {
        if (r == busy_code) return false;
        detail::check(r);
        return true;
    }

    keylock_rwlock *handle_;
};

namespace detail {
/// read_guard and write_guard: one acquisition of an RwLock, released on destruction.
template <keylock_result (*Unlock)(keylock_rwlock *)>
class rw_guard {
public:
    rw_guard(rw_guard &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    rw_guard &operator=(rw_guard &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }
    rw_guard(const rw_guard &) = delete;
    rw_guard &operator=(const rw_guard &) = delete;
    ~rw_guard() { reset(); }

    bool owns_lock() const noexcept { return handle_ != nullptr; }
    explicit operator bool() const noexcept { return owns_lock(); }
    /// Releases now; throws keylock::error(KEYLOCK_NOT_LOCKED) if this guard holds nothing.
    void unlock() {
        if (!handle_) throw error(KEYLOCK_NOT_LOCKED);
        check(Unlock(std::exchange(handle_, nullptr)));
    }

protected:
    explicit rw_guard(keylock_rwlock *h) noexcept : handle_(h) {}

private:
    void reset() noexcept {
        if (handle_) (void)Unlock(std::exchange(handle_, nullptr));
    }
    keylock_rwlock *handle_;
};
}  // namespace detail

class RwLock::read_guard : public detail::rw_guard<keylock_rwlock_read_unlock> {
    friend class RwLock;
    using rw_guard::rw_guard;
};

class RwLock::write_guard : public detail::rw_guard<keylock_rwlock_write_unlock> {
    friend class RwLock;
    using rw_guard::rw_guard;
};

inline RwLock::read_guard RwLock::read() {
    lock_shared();
    return read_guard(handle_);
}
inline std::optional<RwLock::read_guard> RwLock::try_read() {
    if (!try_lock_shared()) return std::nullopt;
    return read_guard(handle_);
}
template <class Rep, class Period>
std::optional<RwLock::read_guard> RwLock::try_read_for(std::chrono::duration<Rep, Period> timeout) {
    if (!try_lock_shared_for(timeout)) return std::nullopt;
    return read_guard(handle_);
}
inline RwLock::write_guard RwLock::write() {
    lock();
    return write_guard(handle_);
}
inline std::optional<RwLock::write_guard> RwLock::try_write() {
    if (!try_lock()) return std::nullopt;
    return write_guard(handle_);
}
template <class Rep, class Period>
std::optional<RwLock::write_guard> RwLock::try_write_for(std::chrono::duration<Rep, Period> timeout) {
    if (!try_lock_for(timeout)) return std::nullopt;
    return write_guard(handle_);
}

}  // namespace keylock

#endif  // KEYLOCK_HPP
