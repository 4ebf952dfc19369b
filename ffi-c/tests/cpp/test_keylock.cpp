// Tests of the RAII header include/keylock.hpp, built against the installed headers and library
// with -fsanitize=address,undefined. Closing line: "test_keylock_cpp: N passed, M failed".

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
static_assert(std::is_nothrow_move_constructible_v<keylock::KeyPool::guard>);
static_assert(!std::is_copy_constructible_v<keylock::RwLock::read_guard>);
static_assert(std::is_base_of_v<std::runtime_error, keylock::error>);

template <class Keyed>
void keyed_guards(Keyed &keyed) {
    {
        auto g = keyed.lock("a");
        CHECK(g.owns_lock());
        CHECK(g.key() == "a");
        CHECK(keyed.is_locked("a"));
        CHECK(!keyed.try_lock("a"));
        CHECK(!keyed.try_lock_for("a", 10ms));
        CHECK(!keyed.try_lock_for("a", 1us));  // rounds up to 1 ms, still times out
        CHECK(!keyed.try_lock_for("a", -5ms));  // a negative timeout tries once
    }
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

    // try_lock / try_lock_for give engaged optionals when the key is free.
    if (auto g = keyed.try_lock("b")) {
        CHECK(keyed.is_locked("b"));
        g->unlock();
        CHECK(!g->owns_lock());
        CHECK_THROWS(g->unlock(), KEYLOCK_NOT_LOCKED);
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
    }
    CHECK(!keyed.is_locked("b"));

    // Embedded NUL bytes are part of the key.
    {
        auto g = keyed.lock(std::string_view("x\0y", 3));
        CHECK(keyed.is_locked(std::string_view("x\0y", 3)));
    }

    // A guard releases when an exception unwinds through its scope.
    try {
        auto g = keyed.lock("unwind");
        auto many = keyed.lock_many({"unwind-1", "unwind-2"});
        CHECK(keyed.is_locked("unwind"));
        throw std::runtime_error("boom");
    } catch (const std::runtime_error &) {
    }
    CHECK(!keyed.is_locked("unwind"));
    CHECK(!keyed.is_locked("unwind-1"));
    CHECK(!keyed.is_locked("unwind-2"));

    // lock_many, over an initializer list and over a container.
    {
        auto both = keyed.lock_many({"m1", "m2", "m1"});
        CHECK(both.keys().size() == 3);
        CHECK(keyed.is_locked("m1") && keyed.is_locked("m2"));
    }
    CHECK(!keyed.is_locked("m1") && !keyed.is_locked("m2"));
    {
        std::vector<std::string> keys = {"v1", "v2"};
        auto g = keyed.lock_many(keys.begin(), keys.end());
        CHECK(keyed.is_locked("v1"));
        g.unlock();
        CHECK(!keyed.is_locked("v1"));
        CHECK_THROWS(g.unlock(), KEYLOCK_NOT_LOCKED);
    }

    // Errors from the library carry their code.
    CHECK_THROWS(keyed.lock_many({}), KEYLOCK_INVALID_ARGUMENT);
    try {
        (void)keyed.lock_many({});
    } catch (const keylock::error &e) {
        CHECK(std::strncmp(e.what(), "KEYLOCK_INVALID_ARGUMENT", 24) == 0);
    }
}

void test_keypool() {
    keylock::KeyPool pool;
    keyed_guards(pool);
}

void test_striped() {
    keylock::StripedLock striped(256);
    keyed_guards(striped);
    keylock::StripedLock one(1);  // every key shares the one stripe
    auto g = one.lock("p");
    CHECK(!one.try_lock("q"));
    CHECK_THROWS(keylock::StripedLock(0), KEYLOCK_INVALID_ARGUMENT);
    CHECK_THROWS(keylock::StripedLock(static_cast<std::size_t>(KEYLOCK_MAX_STRIPES) + 1), KEYLOCK_INVALID_ARGUMENT);
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
    // a, b, s2, r2 are destroyed here, moved-from: that must be safe.
}

void test_rwlock() {
    keylock::RwLock rw;
    {
        auto r1 = rw.read();
        auto r2 = rw.read();
        CHECK(!rw.try_write());
        CHECK(!rw.try_write_for(5ms));
        CHECK(rw.try_read().has_value());
    }
    {
        auto w = rw.write();
        CHECK(!rw.try_read());
        CHECK(!rw.try_read_for(5ms));
        CHECK(!rw.try_write());
        w.unlock();
        CHECK_THROWS(w.unlock(), KEYLOCK_NOT_LOCKED);
        CHECK(rw.try_write().has_value());
    }
    try {
        auto w = rw.write();
        throw std::runtime_error("boom");
    } catch (const std::runtime_error &) {
    }
    CHECK(rw.try_write_for(1h).has_value());  // released by the unwind

    // The standard lock types work with it.
    {
        std::unique_lock<keylock::RwLock> w(rw);
        CHECK(!rw.try_lock_shared());
    }
    {
        std::shared_lock<keylock::RwLock> r(rw);
        std::shared_lock<keylock::RwLock> r2(rw, 10ms);
        CHECK(r2.owns_lock());
        std::unique_lock<keylock::RwLock> w(rw, std::try_to_lock);
        CHECK(!w.owns_lock());
        CHECK(!rw.try_lock_until(std::chrono::steady_clock::now() + 5ms));
    }
    { std::lock_guard<keylock::RwLock> w(rw); }
    CHECK_THROWS(rw.unlock(), KEYLOCK_NOT_LOCKED);
    CHECK_THROWS(rw.unlock_shared(), KEYLOCK_NOT_LOCKED);
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
    CHECK(pool_count[0] == in_pool[0].completed);
    CHECK(pool_count[1] == in_pool[1].completed);
    CHECK(in_pool[0].interrupted + in_pool[1].interrupted > 0);
    CHECK(in_pool[0].entered == long{threads / 2} * iters);
    CHECK(in_pool[1].entered == long{threads / 2} * iters);
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

void watchdog(int) {
    static const char msg[] = "test_keylock_cpp: watchdog fired: a deadlock or hang (FAILED)\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

}  // namespace

int main() {
    std::signal(SIGALRM, watchdog);
    alarm(120);
    run("keypool_guards", test_keypool);
    run("striped_guards", test_striped);
    run("moved_from_handles", test_moved_from_handles);
    run("rwlock_guards", test_rwlock);
    run("threads_exact_counts_and_exceptions", test_threads);
    std::printf("test_keylock_cpp: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
