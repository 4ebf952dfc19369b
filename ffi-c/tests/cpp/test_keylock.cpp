// Tests of the RAII header include/keylock.hpp, built against the installed headers and library
// with -fsanitize=address,undefined (and under ThreadSanitizer by `make tsan-c`): guards carry
// their acquisitions, a stale guard never releases the next holder, leases hand over, shared
// holders overlap, reentrancy follows the explicit owner.
// Closing line: "test_keylock_cpp: N passed, M failed".

#include <keylock.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <unistd.h>
#include <utility>
#include <vector>

using namespace std::chrono_literals;

namespace {

int checks_failed = 0;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            std::fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            checks_failed++;                                                           \
        }                                                                              \
    } while (0)

// CHECK that `expr` throws keylock::error with `code`.
#define CHECK_THROWS(expr, expected)                                                   \
    do {                                                                               \
        bool thrown_ = false;                                                          \
        try {                                                                          \
            (void)(expr);                                                              \
        } catch (const keylock::error &e_) {                                           \
            thrown_ = e_.code() == (expected);                                         \
            if (!thrown_) std::fprintf(stderr, "  %s:%d: threw %s\n", __FILE__, __LINE__, e_.what()); \
        }                                                                              \
        if (!thrown_) {                                                                \
            std::fprintf(stderr, "  %s:%d: %s did not throw %s\n", __FILE__, __LINE__, #expr, #expected); \
            checks_failed++;                                                           \
        }                                                                              \
    } while (0)

// Handles are move-only, guards are move-only.
static_assert(!std::is_copy_constructible_v<keylock::KeyPool>);
static_assert(std::is_nothrow_move_constructible_v<keylock::KeyPool>);
static_assert(std::is_nothrow_move_assignable_v<keylock::StripedLock>);
static_assert(!std::is_copy_constructible_v<keylock::RwLock>);
static_assert(!std::is_copy_constructible_v<keylock::KeyPool::guard>);
static_assert(!std::is_copy_assignable_v<keylock::KeyPool::guard>);
static_assert(std::is_nothrow_move_constructible_v<keylock::KeyPool::guard>);
static_assert(std::is_nothrow_move_assignable_v<keylock::StripedLock::guard>);
static_assert(!std::is_copy_constructible_v<keylock::KeyPool::many_guard>);
static_assert(!std::is_copy_constructible_v<keylock::RwLock::read_guard>);
static_assert(std::is_nothrow_move_constructible_v<keylock::RwLock::write_guard>);
static_assert(std::is_base_of_v<std::runtime_error, keylock::error>);
static_assert(!std::is_copy_constructible_v<keylock::Semaphore>);
static_assert(std::is_nothrow_move_constructible_v<keylock::Semaphore>);
static_assert(std::is_nothrow_move_assignable_v<keylock::Semaphore>);
static_assert(!std::is_copy_constructible_v<keylock::permit>);
static_assert(!std::is_copy_assignable_v<keylock::permit>);
static_assert(std::is_nothrow_move_constructible_v<keylock::permit>);
static_assert(std::is_nothrow_move_assignable_v<keylock::permit>);
static_assert(std::is_same_v<keylock::Semaphore::guard, keylock::permit>);
static_assert(!std::is_copy_constructible_v<keylock::Semaphore::many_guard>);

// A key named `base` (or `base-N`) whose lock is free now. For a striped lock that is a key
// whose stripe no held key shares: a test that holds some keys and then waits for another must
// take it this way, or it waits on itself whenever the handle's random hash seed puts the two
// on one stripe (with 256 stripes and four such places, about one run in fifty).
template <class Keyed>
std::string free_key(Keyed &keyed, const std::string &base) {
    for (int i = 0; i < 100000; i++) {
        std::string key = i == 0 ? base : base + "-" + std::to_string(i);
        if (!keyed.is_locked(key)) return key;
    }
    CHECK(!"no free stripe found");
    return base;
}

template <class Keyed>
void keyed_guards(Keyed &keyed) {
    {
        auto g = keyed.lock("a");
        CHECK(g.owns_lock());
        CHECK(g.key() == "a");
        CHECK(g.mode() == keylock::mode::exclusive);
        CHECK(g.fence() >= 1 && !g.owner_died());
        CHECK(g.is_current());
        CHECK(!g.lost()); // an in-process holder cannot lose its lock behind its back
        CHECK(!g.lease_remaining());
        CHECK(keyed.is_locked("a"));
        CHECK(!keyed.try_lock("a"));
        CHECK(!keyed.try_lock_shared("a"));
        CHECK(!keyed.try_lock_for("a", 10ms));
        CHECK(!keyed.try_lock_shared_for("a", 1us));
        CHECK(!keyed.try_lock_for("a", -5ms));  // a negative timeout tries once
        auto info = keyed.info("a");
        CHECK(info && info->fence == g.fence() && info->mode == keylock::mode::exclusive);
        CHECK(info && info->holders == 1 && info->holds == 1 && !info->lease_remaining);
    }
    CHECK(!keyed.info("a"));
    // The longest durations saturate instead of overflowing (UBSan would catch an overflow).
    CHECK(keyed.try_lock_for("a", std::chrono::hours::max()).has_value());
    CHECK(keyed.try_lock_for("a", std::chrono::nanoseconds::max()).has_value());
    CHECK(keyed.try_lock_for("a", std::chrono::duration<double>(1e300)).has_value());
    CHECK(!keyed.is_locked("a"));  // the destructor released it

    // The key is copied: the guard does not depend on the caller's buffer.
    {
        std::string key = "temporary";
        auto g = keyed.lock(key);
        key.assign("something else");
        CHECK(g.key() == "temporary");
        CHECK(keyed.is_locked("temporary"));
    }
    CHECK(!keyed.is_locked("temporary"));

    // try_lock / try_lock_for give engaged optionals when the key is free; unlock once.
    if (auto g = keyed.try_lock("b")) {
        CHECK(keyed.is_locked("b"));
        g->unlock();
        CHECK(!g->owns_lock());
        CHECK_THROWS(g->unlock(), KEYLOCK_NOT_LOCKED);
        CHECK_THROWS(keylock::unlink("local:"), KEYLOCK_INVALID_ARGUMENT);
        // the std::unique_lock interface: take the same key again through the same guard
        g->lock();
        CHECK(g->owns_lock() && keyed.is_locked("b"));
        CHECK_THROWS(g->lock(), KEYLOCK_WOULD_BLOCK);  // already held through this guard
        g->unlock();
        CHECK(g->try_lock());
        g->unlock();
        CHECK(g->try_lock_for(1ms));
        CHECK_THROWS(g->try_lock_until(std::chrono::steady_clock::now() + 1ms), KEYLOCK_WOULD_BLOCK);
        g->unlock();
        CHECK(g->try_lock_until(std::chrono::steady_clock::now() + 1ms));
    } else {
        CHECK(!"try_lock on a free key failed");
    }
    CHECK(!keyed.is_locked("b"));
    {
        auto g = keyed.try_lock_for("b", std::chrono::hours(1));
        CHECK(g.has_value());
        auto moved = std::move(*g);  // a moved-from guard releases nothing
        CHECK(!g->owns_lock());
        CHECK(moved.owns_lock());
        CHECK(keyed.is_locked("b"));
        g.reset();
        CHECK(keyed.is_locked("b"));
        typename Keyed::guard other;
        other.swap(moved);
        CHECK(other.owns_lock() && !moved.owns_lock());
        moved = std::move(other);
        CHECK(moved.owns_lock() && keyed.is_locked("b"));
    }
    CHECK(!keyed.is_locked("b"));

    // std::defer_lock and std::try_to_lock, as for std::unique_lock
    {
        typename Keyed::guard deferred(keyed, "d", std::defer_lock);
        CHECK(!deferred.owns_lock() && !keyed.is_locked("d"));
        deferred.lock();
        CHECK(keyed.is_locked("d"));
        typename Keyed::guard tried(keyed, "d", std::try_to_lock);
        CHECK(!tried.owns_lock());
        const std::string e = free_key(keyed, "e");
        typename Keyed::guard shared(keyed, e, keylock::options().shared());
        typename Keyed::guard shared2(keyed, e, std::try_to_lock, keylock::options().shared());
        CHECK(shared.mode() == keylock::mode::shared && shared2.owns_lock());
        CHECK(shared.fence() == shared2.fence());
    }
    CHECK(!keyed.is_locked("d") && !keyed.is_locked("e"));

    // release() hands the record out; the C API releases it later
    {
        auto g = keyed.lock("r");
        auto *h = g.native_handle();
        keylock_acquisition a = g.release();
        CHECK(!g.owns_lock() && g.native_handle() == nullptr);
        CHECK(keyed.is_locked("r"));
        CHECK(keylock_acquisition_is_held(&a));
        keylock_result r;
        if constexpr (std::is_same_v<Keyed, keylock::KeyPool>) r = keylock_pool_release(h, &a);
        else r = keylock_striped_release(h, &a);
        CHECK(r == KEYLOCK_OK);
    }
    CHECK(!keyed.is_locked("r"));

    // Embedded NUL bytes are part of the key.
    {
        auto g = keyed.lock(std::string_view("x\0y", 3));
        CHECK(keyed.is_locked(std::string_view("x\0y", 3)));
    }

    // A guard releases when an exception unwinds through its scope.
    std::string unwind1, unwind2;
    try {
        auto g = keyed.lock("unwind");
        unwind1 = free_key(keyed, "unwind-a");
        unwind2 = free_key(keyed, "unwind-b");
        auto many = keyed.lock_many({unwind1, unwind2});
        CHECK(keyed.is_locked("unwind"));
        throw std::runtime_error("boom");
    } catch (const std::runtime_error &) {
    }
    CHECK(!keyed.is_locked("unwind"));
    CHECK(!keyed.is_locked(unwind1));
    CHECK(!keyed.is_locked(unwind2));

    // lock_many: exclusive, or a mode per key; duplicates collapse
    {
        auto both = keyed.lock_many({"m1", "m2", "m1"});
        CHECK(both.size() >= 1 && both.size() <= 2);
        CHECK(both.fences().size() == both.size());
        CHECK(keyed.is_locked("m1") && keyed.is_locked("m2"));
        both.unlock();
        CHECK(!both.owns_lock());
        CHECK_THROWS(both.unlock(), KEYLOCK_NOT_LOCKED);
    }
    CHECK(!keyed.is_locked("m1") && !keyed.is_locked("m2"));
    {
        auto g = keyed.lock_many({{"v1", keylock::mode::shared}, {"v2", keylock::mode::exclusive}});
        CHECK(keyed.is_locked("v1") && keyed.is_locked("v2"));
        CHECK(!keyed.try_lock("v2"));
        const std::string v3 = free_key(keyed, "v3");
        auto held = keyed.lock(v3);
        CHECK_THROWS(keyed.lock_many({{v3, keylock::mode::shared}}, keylock::options().no_wait()),
                     KEYLOCK_WOULD_BLOCK);
        CHECK_THROWS(keyed.lock_many({{v3, keylock::mode::exclusive}}, keylock::options().timeout(2ms)),
                     KEYLOCK_TIMEOUT);
    }
    CHECK(!keyed.is_locked("v1") && !keyed.is_locked("v3"));

    // Errors from the library carry their code.
    CHECK_THROWS(keyed.lock_many(std::initializer_list<std::string_view>{}), KEYLOCK_INVALID_ARGUMENT);
    try {
        (void)keyed.lock_many(std::initializer_list<std::string_view>{});
    } catch (const keylock::error &e) {
        CHECK(std::strncmp(e.what(), "KEYLOCK_INVALID_ARGUMENT", 24) == 0);
    }
    CHECK_THROWS(keyed.lock("k", keylock::options().lease(0ms)), KEYLOCK_INVALID_ARGUMENT);
    CHECK_THROWS(keyed.lock("k", keylock::options().lease(-1s)), KEYLOCK_INVALID_ARGUMENT);
}

// Ownership: a stale guard (force-unlocked, or its lease ran out) never releases the next
// holder, whether it is unlocked or destroyed; fences rise; leases hand over.
template <class Keyed>
void keyed_ownership(Keyed &keyed) {
    {
        auto g1 = keyed.lock("row");
        CHECK(keyed.force_unlock("row"));
        CHECK(!g1.is_current());
        auto g2 = keyed.lock("row");
        CHECK(g2.fence() > g1.fence());
        CHECK_THROWS(g1.unlock(), KEYLOCK_NOT_OWNER);  // refused...
        CHECK(!g1.owns_lock());
        CHECK(keyed.is_locked("row") && g2.is_current());  // ...and the next holder keeps it
    }
    CHECK(!keyed.is_locked("row"));
    CHECK(!keyed.force_unlock("row"));
    {
        std::optional<typename Keyed::guard> next;
        {
            auto stale = keyed.lock("row");
            keyed.force_unlock("row");
            next = keyed.lock("row");
        }  // the stale guard's destructor runs here: it must release nothing
        CHECK(keyed.is_locked("row") && next->is_current());
        CHECK(!keyed.try_lock("row"));
    }
    CHECK(!keyed.is_locked("row"));

    // leases
    {
        auto start = std::chrono::steady_clock::now();
        auto leased = keyed.lock("job", keylock::options().lease(100ms));
        CHECK(leased.lease_remaining() && *leased.lease_remaining() <= 100ms);
        auto next = keyed.try_lock_for("job", 2100ms);  // the bound: lease plus two seconds
        CHECK(next.has_value());
        CHECK(std::chrono::steady_clock::now() - start >= 100ms);
        CHECK(next && next->fence() > leased.fence());
        CHECK(leased.lease_remaining() == std::chrono::nanoseconds(0));
        CHECK_THROWS(leased.extend(1s), KEYLOCK_LEASE_EXPIRED);
        CHECK_THROWS(leased.unlock(), KEYLOCK_LEASE_EXPIRED);
        CHECK(next && next->is_current());
    }
    {
        auto g = keyed.lock("job", keylock::options().lease(60s));
        g.extend(120s);
        CHECK(*g.lease_remaining() > 60s);
        auto info = keyed.info("job");
        CHECK(info && info->lease_remaining && *info->lease_remaining > 60s);
        auto plain = keyed.lock(free_key(keyed, "plain"));
        CHECK_THROWS(plain.extend(1s), KEYLOCK_INVALID_ARGUMENT);  // no lease to extend
    }

    // shared holders read the current fence; an exclusive one after them has a higher one
    {
        std::uint64_t f;
        { f = keyed.lock("doc").fence(); }
        auto r1 = keyed.lock_shared("doc");
        auto r2 = keyed.lock_shared("doc");
        CHECK(r1.fence() == f && r2.fence() == f && r1.mode() == keylock::mode::shared);
        CHECK(keyed.info("doc")->holders == 2);
        r1.unlock();
        r2.unlock();
        CHECK(keyed.lock("doc").fence() > f);
    }
}

void test_keypool() {
    keylock::KeyPool pool;
    keyed_guards(pool);
    keyed_ownership(pool);
}

void test_striped() {
    keylock::StripedLock striped(256);
    keyed_guards(striped);
    keyed_ownership(striped);
    keylock::StripedLock one(1);  // every key shares the one stripe
    auto g = one.lock("p");
    CHECK(!one.try_lock("q"));
    CHECK_THROWS(keylock::StripedLock(0), KEYLOCK_INVALID_ARGUMENT);
    CHECK_THROWS(keylock::StripedLock(static_cast<std::size_t>(KEYLOCK_MAX_STRIPES) + 1), KEYLOCK_INVALID_ARGUMENT);
    auto opened = keylock::StripedLock::open("local:", keylock::open_options().stripes(8));
    CHECK(opened.lock("k").owns_lock());
    CHECK_THROWS(keylock::StripedLock::open("bogus:"), KEYLOCK_INVALID_ARGUMENT);
}

// Reentrancy with an explicit owner, on a pool and a striped lock opened reentrant.
template <class Keyed>
void keyed_reentrant(Keyed keyed) {
    auto me = keylock::options().owner(7);
    {
        auto outer = keyed.lock("k", me);
        auto inner = keyed.lock("k", me);
        CHECK(outer.fence() == inner.fence());
        CHECK(keyed.info("k")->holds == 2 && keyed.info("k")->owner == 7);
        CHECK(!keyed.try_lock("k", keylock::options().owner(8).no_wait()));
        CHECK(!keyed.try_lock("k"));
        inner.unlock();
        CHECK(keyed.is_locked("k"));
    }
    CHECK(!keyed.is_locked("k"));
}

void test_open_and_reentrancy() {
    keyed_reentrant(keylock::KeyPool::open("local:", keylock::open_options().reentrant()));
    keyed_reentrant(keylock::StripedLock::open("local:", keylock::open_options().reentrant().stripes(64)));
    auto fifo = keylock::KeyPool::open("", keylock::open_options().fifo());
    CHECK(fifo.lock("k").owns_lock());
    CHECK_THROWS(keylock::KeyPool::open("nope"), KEYLOCK_INVALID_ARGUMENT);
    CHECK_THROWS(keylock::KeyPool::open("local:", keylock::open_options().stripes(4)), KEYLOCK_INVALID_ARGUMENT);
    CHECK_THROWS(keylock::KeyPool::open("local:", keylock::open_options().capacity(4)), KEYLOCK_INVALID_ARGUMENT);
    // a non-reentrant pool ignores the owner: a second acquire by the same owner waits
    keylock::KeyPool plain;
    auto g = plain.lock("k", keylock::options().owner(7));
    CHECK(!plain.try_lock("k", keylock::options().owner(7).no_wait()));
}

void test_moved_from_handles() {
    keylock::KeyPool a;
    keylock::KeyPool b(std::move(a));  // a is now empty
    CHECK(a.native_handle() == nullptr);
    CHECK(b.native_handle() != nullptr);
    CHECK_THROWS(a.lock("k"), KEYLOCK_NULL_ARGUMENT);  // using it is an error, not a crash
    keylock::KeyPool c;
    {
        auto g = b.lock("k");
        c = std::move(b);  // c's old pool is freed; g refers to the pool c owns now
        CHECK(c.is_locked("k"));
    }
    CHECK(!c.is_locked("k"));
    keylock::StripedLock s1(16), s2(16);
    s1 = std::move(s2);
    CHECK(s2.native_handle() == nullptr);
    keylock::RwLock r1;
    keylock::RwLock r2(std::move(r1));
    CHECK(r1.native_handle() == nullptr);
    CHECK_THROWS(r1.read(), KEYLOCK_NULL_ARGUMENT);
    r1 = std::move(r2);
    { auto w = r1.write(); }
    keylock::KeyPool::guard empty;
    CHECK(!empty.owns_lock() && !empty.is_current());
    CHECK_THROWS(empty.unlock(), KEYLOCK_NOT_LOCKED);
    CHECK_THROWS(empty.lock(), KEYLOCK_NULL_ARGUMENT);
    // a, b, s2, r2 are destroyed here, moved-from: that must be safe.
}

void test_rwlock() {
    keylock::RwLock rw;
    {
        auto r1 = rw.read();
        auto r2 = rw.read();
        CHECK(r1.fence() == 0);
        CHECK(!rw.try_write());
        CHECK(!rw.try_write_for(5ms));
        CHECK(rw.try_read().has_value());
    }
    std::uint64_t fence;
    {
        auto w = rw.write();
        fence = w.fence();
        CHECK(fence >= 1);
        CHECK(!rw.try_read());
        CHECK(!rw.try_read_for(5ms));
        CHECK(!rw.try_write());
        w.unlock();
        CHECK_THROWS(w.unlock(), KEYLOCK_NOT_LOCKED);
        auto again = rw.try_write();
        CHECK(again.has_value() && again->fence() > fence);
        fence = again ? again->fence() : fence;
    }
    try {
        auto w = rw.write();
        throw std::runtime_error("boom");
    } catch (const std::runtime_error &) {
    }
    CHECK(rw.try_write_for(1h).has_value());  // released by the unwind

    // the std::shared_lock / std::unique_lock interface of the guards
    {
        keylock::RwLock::write_guard w(rw, std::defer_lock);
        CHECK(!w.owns_lock());
        w.lock();
        CHECK(w.owns_lock() && w.fence() > fence);
        keylock::RwLock::read_guard r(rw, std::try_to_lock);
        CHECK(!r.owns_lock());
        CHECK(!r.try_lock_for(2ms));
        CHECK(!r.try_lock_until(std::chrono::steady_clock::now() + 2ms));
        w.unlock();
        CHECK(r.try_lock());
        keylock::RwLock::read_guard r2(rw);
        CHECK(r2.owns_lock());
        keylock::RwLock::read_guard r3;
        r3.swap(r2);
        CHECK(r3.owns_lock() && !r2.owns_lock());
        CHECK_THROWS(r2.lock(), KEYLOCK_NULL_ARGUMENT);
        keylock_acquisition handed = r3.release();
        CHECK(keylock_rwlock_release(rw.native_handle(), &handed) == KEYLOCK_OK);
    }
    CHECK(rw.try_write().has_value());
}

// N shared holders inside at once (pool and RwLock readers): each waits inside for the others.
void test_shared_overlap() {
    constexpr int n = 4;
    keylock::KeyPool pool;
    keylock::RwLock rw;
    std::atomic<int> in_pool{0}, in_rw{0}, max_pool{0}, max_rw{0};
    auto wait_for_all = [](std::atomic<int> &inside, std::atomic<int> &max) {
        int now = ++inside;
        int m = max.load();
        while (now > m && !max.compare_exchange_weak(m, now)) {}
        auto deadline = std::chrono::steady_clock::now() + 10s;
        while (inside.load() < n && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        int m2 = max.load(), seen = inside.load();
        while (seen > m2 && !max.compare_exchange_weak(m2, seen)) {}
    };
    std::vector<std::thread> ts;
    for (int t = 0; t < n; t++)
        ts.emplace_back([&] {
            {
                auto g = pool.lock_shared("doc");
                wait_for_all(in_pool, max_pool);
            }
            {
                auto r = rw.read();
                wait_for_all(in_rw, max_rw);
            }
        });
    for (auto &th : ts) th.join();
    CHECK(max_pool == n);
    CHECK(max_rw == n);
    CHECK(!pool.is_locked("doc"));
}

// Who is inside a critical section, counted as it happens: the holders inside at each entry
// (readers apart), and how each body ended. A body left by an exception is interrupted, not
// completed; the guard's destructor must still release the lock on the way out.
struct Occupancy {
    std::atomic<long> exclusive{0}, shared{0}, max_exclusive{0}, overlaps{0};
    std::atomic<long> entered{0}, completed{0}, interrupted{0};

    class Inside {
      public:
        Inside(Occupancy &o, bool shared) : o_(o), shared_(shared) {
            o.entered++;
            if (shared) {
                o.shared++;
                if (o.exclusive.load() != 0) o.overlap("a reader inside with a writer");
                return;
            }
            long n = ++o.exclusive;
            long max = o.max_exclusive.load();
            while (n > max && !o.max_exclusive.compare_exchange_weak(max, n)) {}
            if (n > 1) o.overlap("two exclusive holders inside at once");
            else if (o.shared.load() != 0) o.overlap("a writer inside with readers");
        }
        Inside(const Inside &) = delete;
        Inside &operator=(const Inside &) = delete;
        ~Inside() {
            (shared_ ? o_.shared : o_.exclusive)--;
            (done_ ? o_.completed : o_.interrupted)++;
        }
        void complete() { done_ = true; }

      private:
        Occupancy &o_;
        bool shared_;
        bool done_ = false;
    };

    // Counts an overlap, and reports the first one at once: a broken lock may hang later.
    void overlap(const char *what) {
        if (++overlaps == 1) std::fprintf(stderr, "  overlap: %s\n", what);
    }

    // One holder at a time, every entry completed or interrupted, nobody inside now.
    void check(const char *what) const {
        if (overlaps != 0 || max_exclusive > 1)
            std::fprintf(stderr, "  %s: %ld entries found another holder inside; at most %ld at once\n",
                         what, overlaps.load(), max_exclusive.load());
        CHECK(overlaps == 0);
        CHECK(max_exclusive <= 1);
        CHECK(entered > 0);
        CHECK(completed + interrupted == entered);
        CHECK(exclusive == 0 && shared == 0);
    }
};

struct Injected : std::runtime_error {
    Injected() : std::runtime_error("thrown inside a critical section") {}
};

// Exact counts with std::thread on every primitive, with an exception thrown inside some
// critical sections between the read and the write: the guards must release on unwinding, and
// only the bodies that completed may have counted.
void test_threads() {
    constexpr int threads = 8, iters = 2000;
    keylock::KeyPool pool;
    keylock::StripedLock striped(64);
    keylock::RwLock rw;
    long pool_count[2] = {0, 0}, striped_count = 0, rw_count = 0;
    Occupancy in_pool[2], in_striped, in_rw;
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
            for (int i = 0; i < iters; i++) {
                try {
                    auto g = pool.lock(t % 2 ? "odd" : "even");
                    Occupancy::Inside inside(in_pool[t % 2], false);
                    long v = pool_count[t % 2];
                    std::this_thread::yield();
                    if (i % 7 == 3) throw Injected();
                    pool_count[t % 2] = v + 1;
                    inside.complete();
                } catch (const Injected &) {
                }
                {
                    auto r = pool.lock_shared(t % 2 ? "odd" : "even");  // shared beside none
                    Occupancy::Inside inside(in_pool[t % 2], true);
                    inside.complete();
                }
                {
                    auto g = striped.lock_many({"x", "y"});
                    Occupancy::Inside inside(in_striped, false);
                    long v = striped_count;
                    std::this_thread::yield();
                    striped_count = v + 1;
                    inside.complete();
                }
                {
                    auto w = rw.write();
                    Occupancy::Inside inside(in_rw, false);
                    long v = rw_count;
                    std::this_thread::yield();
                    rw_count = v + 1;
                    inside.complete();
                }
                {
                    auto r = rw.read();
                    Occupancy::Inside inside(in_rw, true);
                    std::this_thread::yield();
                    inside.complete();
                }
            }
        });
    }
    for (auto &th : ts) th.join();
    for (auto &o : in_pool) o.check("pool");
    in_striped.check("striped");
    in_rw.check("rwlock");
    // each pool key: threads/2 * iters exclusive entries (some interrupted) and as many shared
    const long per_key = long{threads / 2} * iters;
    CHECK(pool_count[0] == in_pool[0].completed - per_key);
    CHECK(pool_count[1] == in_pool[1].completed - per_key);
    CHECK(in_pool[0].interrupted + in_pool[1].interrupted > 0);
    CHECK(in_pool[0].entered == 2 * per_key);
    CHECK(in_pool[1].entered == 2 * per_key);
    CHECK(striped_count == long{threads} * iters);
    CHECK(rw_count == long{threads} * iters);
    CHECK(!pool.is_locked("odd") && !pool.is_locked("even"));
}

int passed = 0, failed = 0;

void run(const char *name, void (*test)()) {
    checks_failed = 0;
    try {
        test();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "  uncaught: %s\n", e.what());
        checks_failed++;
    }
    std::printf("%s %s\n", checks_failed ? "FAIL" : "ok  ", name);
    (checks_failed ? failed : passed)++;
}

// stats(): exact counts where the object can tell them, std::nullopt where it cannot.
void test_stats() {
    keylock::KeyPool pool;
    auto x = pool.lock("x");
    auto r1 = pool.lock_shared("r");
    auto r2 = pool.lock_shared("r");
    keylock::stats s = pool.stats();
    CHECK(s.held == 2u && s.held_here == 2u && s.shared_holds == 2u);
    CHECK(s.waiting == 0u && s.waiting_here == 0u && s.entries_in_use == 2u);
    CHECK(!s.capacity && s.entries_allocated.has_value());  // a pool grows as it needs
    x.unlock();
    r1.unlock();
    r2.unlock();
    s = pool.stats();
    CHECK(s.held == 0u && s.shared_holds == 0u && s.entries_in_use == 0u);
    keylock::StripedLock striped(8);
    auto g = striped.lock("k");
    s = striped.stats();
    CHECK(s.capacity == 8u && s.held == 1u && s.held_here == 1u && !s.entries_allocated);
}

// metrics(): std::nullopt without them; with them, exact counts of what the guards did (a grant
// at once, a failed try, a timed acquire that timed out while another thread held the key, a
// waiter granted on release, a force-unlock and the stale guard's refused release), and the
// histograms through keylock::histogram.
void test_metrics() {
    CHECK(!keylock::KeyPool().metrics());
    CHECK(!keylock::StripedLock(8).metrics());
    CHECK(!keylock::Semaphore(2).metrics());
    CHECK(!keylock::KeyPool::open("local:").metrics());
    auto pool = keylock::KeyPool::open("local:", keylock::open_options().metrics());
    {
        auto m = pool.metrics();
        CHECK(m && m->acquired == 0 && m->wait.count() == 0 && !m->wait.quantile(0.5));
    }
    auto held = pool.lock("a");
    CHECK(!pool.try_lock("a"));
    std::thread([&] { CHECK(!pool.try_lock_for("a", 20ms)); }).join();
    std::atomic<bool> granted{false};
    std::thread waiter([&] {
        if (auto g = pool.try_lock_for("a", 20s)) granted = true;
    });
    for (int i = 0; i < 20000 && pool.info("a")->waiters == 0; i++) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(30ms);
    held.unlock();
    waiter.join();
    CHECK(granted);
    auto f = pool.lock("f");
    CHECK(pool.force_unlock("f"));
    CHECK_THROWS(f.unlock(), KEYLOCK_NOT_OWNER);

    auto m = pool.metrics();
    CHECK(m.has_value());
    if (!m) return;
    CHECK(m->acquired == 3 && m->contended == 2 && m->timed_out == 1 && m->would_block == 1);
    CHECK(m->cancelled == 0 && m->lease_expired == 0 && m->owner_died == 0);
    CHECK(m->lost == 1 && m->force_unlocked == 1);
    CHECK(m->wait.count() == 3 && m->wait.bucket(0) == 2 && m->wait.bucket(KEYLOCK_HISTOGRAM_BUCKETS) == 0);
    CHECK(m->wait.max() >= 30ms && m->wait.sum() >= m->wait.max());
    CHECK(m->wait.quantile(0.5) == std::chrono::nanoseconds(0));
    CHECK(m->wait.quantile(1.0) == m->wait.max());
    CHECK(m->hold.count() == 2 && m->hold.max() >= 30ms);
    CHECK(keylock::histogram::upper_bound(10) == std::chrono::nanoseconds(1023));
    CHECK(keylock::histogram::upper_bound(KEYLOCK_HISTOGRAM_BUCKETS - 1) == std::chrono::nanoseconds::max());

    auto sem = keylock::Semaphore::open("local:", 2, keylock::open_options().metrics());
    {
        auto p = sem.acquire("s", 2);
        CHECK(!sem.try_acquire("s", 1));
    }
    auto sm = sem.metrics();
    CHECK(sm && sm->acquired == 1 && sm->would_block == 1 && sm->hold.count() == 1);
    auto striped = keylock::StripedLock::open("local:", keylock::open_options().stripes(8).metrics());
    { auto g = striped.lock("k"); }
    auto stm = striped.metrics();
    CHECK(stm && stm->acquired == 1 && stm->hold.count() == 1);
}

// keylock::Semaphore and its permit guard: weights, units given back by the destructor (and
// exactly once), try/timed acquires, a stale permit after force_release, leases, moves.
void test_semaphore() {
    keylock::Semaphore sem(3);
    CHECK(sem.permits() == 3);
    CHECK_THROWS(keylock::Semaphore(0), KEYLOCK_INVALID_ARGUMENT);
    {
        // A shared-memory semaphore: its permits are the region's, and another open must agree.
        const std::string name = "shm:keylock-cpp-sem-" + std::to_string(::getpid());
        {
            auto shm = keylock::Semaphore::open(name, 2);
            CHECK(shm.permits() == 2);
            auto p = shm.acquire("k", 2);
            CHECK(p.weight() == 2 && !shm.try_acquire("k", 1));
            CHECK_THROWS(keylock::Semaphore::open(name, 3), KEYLOCK_INCOMPATIBLE);
        }
        CHECK(keylock::unlink(name));
    }
    CHECK_THROWS(keylock::Semaphore::open("local:", 2, keylock::open_options().fifo()), KEYLOCK_INVALID_ARGUMENT);
    CHECK_THROWS(sem.acquire("k", 0), KEYLOCK_INVALID_ARGUMENT);
    CHECK_THROWS(sem.acquire("k", 4), KEYLOCK_INVALID_ARGUMENT);
    CHECK_THROWS(sem.try_acquire("k", 0), KEYLOCK_INVALID_ARGUMENT);
    {
        auto a = sem.acquire("k", 2);
        CHECK(a.owns_lock() && a && a.weight() == 2 && a.is_current());
        CHECK(!a.lease_remaining());
        CHECK(!sem.try_acquire("k", 2));
        auto b = sem.try_acquire("k");
        CHECK(b && b->weight() == 1 && b->fence() > a.fence());
        CHECK(!sem.try_acquire_for("k", 1, 5ms));
        CHECK_THROWS(sem.acquire("k", 1, keylock::options().no_wait()), KEYLOCK_WOULD_BLOCK);
        auto info = sem.info("k");
        CHECK(info && info->units == 3 && info->holders == 2 && info->waiters == 0);
        auto st = sem.stats();
        CHECK(st.held == 1u && st.shared_holds == 3u);
        // moves carry the units: the moved-from permit gives back nothing
        keylock::permit moved(std::move(a));
        CHECK(!a.owns_lock() && moved.owns_lock() && moved.weight() == 2);
        keylock::permit other;
        other = std::move(moved);
        CHECK(!moved && other && sem.info("k")->units == 3);
        other.unlock();
        CHECK(!other.owns_lock() && sem.info("k")->units == 1);
        CHECK_THROWS(other.unlock(), KEYLOCK_NOT_LOCKED);
    }  // b gives its unit back here
    CHECK(!sem.info("k"));
    {
        std::optional<keylock::permit> next;
        {
            auto stale = sem.acquire("k", 3);
            CHECK(sem.force_release("k"));
            CHECK(!stale.is_current());
            next = sem.acquire("k", 3);
            CHECK(next->fence() > stale.fence());
        }  // the stale permit's destructor gives back nothing
        CHECK(next->is_current() && sem.info("k")->units == 3);
        CHECK(!sem.try_acquire("k"));
    }
    CHECK(!sem.info("k") && !sem.force_release("k"));
    {
        auto leased = sem.acquire("job", 2, keylock::options().lease(60s));
        leased.extend(120s);
        CHECK(*leased.lease_remaining() > 60s);
        auto info = sem.info("job");
        CHECK(info && info->lease_remaining && *info->lease_remaining > 60s);
        keylock_acquisition raw = leased.release();  // handed out: the guard gives back nothing
        CHECK(!leased.owns_lock() && !leased.native_handle());
        CHECK(sem.info("job")->units == 2);
        CHECK(keylock_semaphore_release(sem.native_handle(), &raw) == KEYLOCK_OK);
    }
    {
        auto both = sem.acquire_many({"m1", "m2", "m1"}, 2);
        CHECK(both.owns_lock() && both.size() == 2 && !both.lost());
        CHECK(sem.info("m1")->units == 2 && sem.info("m2")->units == 2);
        CHECK(both.fences()[0] == sem.info("m1")->fence);
        CHECK(!sem.try_acquire("m2", 2));
        CHECK_THROWS(sem.acquire_many({"m2", "m3"}, 2, keylock::options().no_wait()), KEYLOCK_WOULD_BLOCK);
        CHECK(!sem.info("m3"));  // all or nothing
        CHECK_THROWS(sem.acquire_many({"m3"}, 0), KEYLOCK_INVALID_ARGUMENT);
        CHECK_THROWS(sem.acquire_many({}, 1), KEYLOCK_INVALID_ARGUMENT);
    }  // both give their units back here
    CHECK(!sem.info("m1") && !sem.info("m2"));
    keylock::Semaphore moved_sem(std::move(sem));
    CHECK(sem.permits() == 0 && moved_sem.permits() == 3);
}

// Threads on one Semaphore: the units inside never exceed the permits, and every acquisition is
// counted.
void test_semaphore_threads() {
    keylock::Semaphore sem(4);
    std::atomic<int> inside{0}, peak{0}, over{0};
    std::atomic<long> taken{0};
    const int threads = 4, iters = 500;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; t++) {
        pool.emplace_back([&, t] {
            for (int i = 0; i < iters; i++) {
                const std::uint32_t w = 1 + static_cast<std::uint32_t>((i + t) % 3);
                auto p = sem.try_acquire_for("hot", w, 20s);
                if (!p) {
                    over++;  // a 20 s wait ran out: counts as a failure below
                    continue;
                }
                const int now = inside.fetch_add(static_cast<int>(w)) + static_cast<int>(w);
                if (now > 4) over++;
                int seen = peak.load();
                while (now > seen && !peak.compare_exchange_weak(seen, now)) {
                }
                if (i % 16 == 0) std::this_thread::yield();
                inside.fetch_sub(static_cast<int>(w));
                taken += w;
            }
        });
    }
    for (auto &th : pool) th.join();
    CHECK(over == 0);
    CHECK(peak >= 1 && peak <= 4);
    long want = 0;
    for (int t = 0; t < threads; t++)
        for (int i = 0; i < iters; i++) want += 1 + (i + t) % 3;
    CHECK(taken == want);
    CHECK(!sem.info("hot"));
}

void watchdog(int) {
    static const char msg[] = "test_keylock_cpp: watchdog fired: a deadlock or hang (FAILED)\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

}  // namespace

int main() {
    std::signal(SIGALRM, watchdog);
    alarm(120);
    run("keypool_guards_and_ownership", test_keypool);
    run("striped_guards_and_ownership", test_striped);
    run("open_and_reentrancy", test_open_and_reentrancy);
    run("moved_from_handles", test_moved_from_handles);
    run("rwlock_guards", test_rwlock);
    run("shared_overlap", test_shared_overlap);
    run("threads_exact_counts_and_exceptions", test_threads);
    run("stats", test_stats);
    run("semaphore_permits", test_semaphore);
    run("semaphore_threads", test_semaphore_threads);
    run("metrics", test_metrics);
    std::printf("test_keylock_cpp: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
