/*
 * The C ABI against a lock object opened by name: `test_scope NAME` runs what every scope must
 * do the same way through keylock_pool_open(NAME): acquisitions and their releases, stale records
 * (force-unlock, lease run out) that never release the next holder, fences, modes, lock_many,
 * and a short mixed stress that counts holders inside. `make test` runs it on "local:" and, with
 * the library built with the shm, redis and postgres features, on a fresh shm:NAME region, on a
 * redis-server of its own and on a PostgreSQL cluster of its own (`make test-c-scopes`).
 *
 * The server scopes (redis://, postgres:// and postgresql://) share one front in the core, so
 * they are checked the same way: a lost signal at a renewal, and only this process's counts in
 * stats. Every test runs unchanged on every scope.
 *
 * Every key is prefixed with a random tag, so that runs against a shared server never meet.
 * Closing line: "test_scope: N passed, M failed"; the exit status is non-zero on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <keylock.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HARNESS_NAME "test_scope"
#include "harness.h"

static const char *scope_name;
static char shown_name[256]; /* scope_name as printed: a URL's password replaced by "***" */

/* Fills shown_name: "scheme://user:PASSWORD@host..." becomes "scheme://user:***@host...", so a
 * test server's password never reaches the log. */
static void redact_name(void) {
    const char *rest = strstr(scope_name, "://");
    const char *at = rest ? strchr(rest + 3, '@') : NULL;
    const char *colon = rest ? strchr(rest + 3, ':') : NULL;
    if (at && colon && colon < at)
        snprintf(shown_name, sizeof shown_name, "%.*s***%s", (int)(colon + 1 - scope_name),
                 scope_name, at);
    else snprintf(shown_name, sizeof shown_name, "%s", scope_name);
}

/* Whether the scope is a server's (Redis or PostgreSQL): holds renewed every third of the URL's
 * lease, a loss seen at a renewal, and stats that count only this process. */
static bool server_scope(void) {
    return strncmp(scope_name, "redis://", 8) == 0 || strncmp(scope_name, "rediss://", 9) == 0 ||
           strncmp(scope_name, "postgres://", 11) == 0 ||
           strncmp(scope_name, "postgresql://", 13) == 0;
}

/* The shortest lease the scope accepts that keeps test_lost short: PostgreSQL's least is 1s. */
static const char *short_lease(void) {
    return strncmp(scope_name, "postgres", 8) == 0 ? "1s" : "600ms";
}
static char tag[32]; /* this run's key prefix */

/* A key of this run: the tag, then `name`. Returns its length. */
typedef struct {
    char bytes[96];
    size_t len;
} key_t_;

static key_t_ key(const char *name) {
    key_t_ k;
    int n = snprintf(k.bytes, sizeof k.bytes, "%s:%s", tag, name);
    k.len = n < 0 ? 0 : (size_t)n;
    return k;
}

#define KB(k) ((const uint8_t *)(k).bytes), (k).len

static keylock_pool *open_scope(void) {
    keylock_pool *pool = NULL;
    keylock_result r = keylock_pool_open(scope_name, NULL, &pool);
    if (r != KEYLOCK_OK) fprintf(stderr, "  keylock_pool_open(%s): %s\n", shown_name,
                                 keylock_result_str(r));
    return pool;
}

static bool locked(keylock_pool *pool, key_t_ k) {
    bool out = false;
    OK(keylock_pool_is_locked(pool, KB(k), &out));
    return out;
}

static bool current(keylock_pool *pool, const keylock_acquisition *a) {
    bool out = false;
    OK(keylock_pool_is_current(pool, a, &out));
    return out;
}

static void test_basics(keylock_pool *pool) {
    key_t_ k = key("basics");
    keylock_acquisition a, b;
    OK(keylock_pool_lock(pool, KB(k), &a));
    CHECK(a.mode == KEYLOCK_EXCLUSIVE && a.fence >= 1 && keylock_acquisition_is_held(&a));
    CHECK(locked(pool, k) && current(pool, &a));
    CHECK_RESULT(keylock_pool_try_lock(pool, KB(k), &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_pool_lock_timeout(pool, KB(k), MS(20), &b), KEYLOCK_TIMEOUT);
    CHECK(!keylock_acquisition_is_held(&b));
    {
        keylock_lock_info info;
        OK(keylock_pool_info(pool, KB(k), &info));
        CHECK(info.held && info.mode == KEYLOCK_EXCLUSIVE && info.fence == a.fence);
    }
    OK(keylock_pool_release(pool, &a));
    CHECK_RESULT(keylock_pool_release(pool, &a), KEYLOCK_NOT_OWNER);
    CHECK(!locked(pool, k));
    OK(keylock_pool_lock(pool, KB(k), &b));
    CHECK(b.fence > a.fence);
    OK(keylock_pool_release(pool, &b));
}

/*
 * Keys of every length up to 17 bytes: the host scope locks those of 16 bytes or fewer before
 * the panic guard, and the 17-byte one after it. Each is its own key: held, refused while held,
 * not confused with a key one byte different, and locked again with a higher fence. Then the
 * arguments that path must leave to the full one: a NULL key, record or handle.
 */
static void test_short_keys(keylock_pool *pool) {
    uint8_t k[17], other[17];
    keylock_acquisition a, b, c;
    for (size_t len = 0; len <= sizeof k; len++) {
        for (size_t i = 0; i < len; i++) k[i] = (uint8_t)(i % 3 == 1 ? 0 : 0xA0 + len + i);
        memcpy(other, k, len);
        OK(keylock_pool_lock(pool, k, len, &a));
        CHECK(a.mode == KEYLOCK_EXCLUSIVE && a.fence >= 1 && keylock_acquisition_is_held(&a));
        CHECK_RESULT(keylock_pool_try_lock(pool, k, len, &b), KEYLOCK_WOULD_BLOCK);
        if (len > 0) {
            other[len - 1] ^= 0x01;
            OK(keylock_pool_lock(pool, other, len, &b));
            OK(keylock_pool_release(pool, &b));
        }
        OK(keylock_pool_release(pool, &a));
        OK(keylock_pool_lock(pool, k, len, &c));
        CHECK(c.fence > a.fence);
        OK(keylock_pool_release(pool, &c));
        if (checks_failed) {
            fprintf(stderr, "  short_keys: at a key of %zu bytes\n", len);
            return;
        }
    }
    CHECK_RESULT(keylock_pool_lock(pool, NULL, 3, &a), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_pool_lock(pool, k, 3, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_pool_lock(NULL, k, 3, &a), KEYLOCK_NULL_ARGUMENT);
}

static void test_shared(keylock_pool *pool) {
    key_t_ k = key("shared");
    keylock_acquisition s1, s2, x;
    OK(keylock_pool_lock_shared(pool, KB(k), &s1));
    OK(keylock_pool_try_lock_shared(pool, KB(k), &s2));
    CHECK(s1.mode == KEYLOCK_SHARED && s2.mode == KEYLOCK_SHARED);
    CHECK_RESULT(keylock_pool_try_lock(pool, KB(k), &x), KEYLOCK_WOULD_BLOCK);
    OK(keylock_pool_release(pool, &s1));
    CHECK_RESULT(keylock_pool_try_lock(pool, KB(k), &x), KEYLOCK_WOULD_BLOCK);
    OK(keylock_pool_release(pool, &s2));
    OK(keylock_pool_try_lock(pool, KB(k), &x));
    OK(keylock_pool_release(pool, &x));
}

/* A stale record (force-unlocked) never releases the next holder. */
static void test_stale(keylock_pool *pool) {
    key_t_ k = key("stale");
    keylock_acquisition a1, a2, x;
    bool was = false;
    OK(keylock_pool_lock(pool, KB(k), &a1));
    OK(keylock_pool_force_unlock(pool, KB(k), &was));
    CHECK(was);
    CHECK(!current(pool, &a1));
    OK(keylock_pool_lock(pool, KB(k), &a2));
    CHECK(a2.fence > a1.fence);
    CHECK_RESULT(keylock_pool_release(pool, &a1), KEYLOCK_NOT_OWNER);
    CHECK(locked(pool, k) && current(pool, &a2));
    CHECK_RESULT(keylock_pool_try_lock(pool, KB(k), &x), KEYLOCK_WOULD_BLOCK);
    OK(keylock_pool_release(pool, &a2));
    CHECK(!locked(pool, k));
}

/* A holder that never releases is replaced at its lease's end; its release is refused. */
static void test_lease(keylock_pool *pool) {
    key_t_ k = key("lease");
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    keylock_acquisition stale, next;
    uint64_t start = now_ns();
    o.lease_ns = MS(200);
    OK(keylock_pool_lock_with(pool, KB(k), &o, &stale));
    OK(keylock_pool_lock_timeout(pool, KB(k), MS(5000), &next));
    CHECK(now_ns() - start >= MS(200));
    CHECK(next.fence > stale.fence);
    CHECK_RESULT(keylock_pool_release(pool, &stale), KEYLOCK_LEASE_EXPIRED);
    CHECK(locked(pool, k) && current(pool, &next));
    OK(keylock_pool_release(pool, &next));
}

static void test_many(keylock_pool *pool) {
    key_t_ a = key("many-a"), b = key("many-b");
    const uint8_t *keys[2] = {(const uint8_t *)a.bytes, (const uint8_t *)b.bytes};
    size_t lens[2] = {a.len, b.len}, count = 0;
    keylock_mode modes[2] = {KEYLOCK_SHARED, KEYLOCK_EXCLUSIVE};
    keylock_acquisition acqs[2], x;
    OK(keylock_pool_lock_many_with(pool, keys, lens, modes, 2, NULL, acqs, &count));
    CHECK(count == 2);
    CHECK(acqs[0].mode == KEYLOCK_SHARED && acqs[1].mode == KEYLOCK_EXCLUSIVE);
    OK(keylock_pool_try_lock_shared(pool, KB(a), &x)); /* shared: another reader gets in */
    OK(keylock_pool_release(pool, &x));
    CHECK_RESULT(keylock_pool_try_lock_shared(pool, KB(b), &x), KEYLOCK_WOULD_BLOCK);
    OK(keylock_pool_release_many(pool, acqs, count));
    CHECK(!locked(pool, a) && !locked(pool, b));
}

/* Mixed modes, 4 threads, tries and timeouts: exclusive holders never overlap anything. */
enum { THREADS = 4, ITERS = 300 };

typedef struct {
    keylock_pool *pool;
    long exclusive, shared, overlaps, entered, counter, exclusive_ok[THREADS];
    keylock_result error;
} mixed;

typedef struct {
    mixed *s;
    int thread;
} mixed_arg;

static void *mixed_thread(void *p) {
    mixed_arg *arg = p;
    mixed *s = arg->s;
    key_t_ k = key("mixed");
    uint32_t x = 0x9e3779b9u * (uint32_t)(arg->thread + 1);
    for (int i = 0; i < ITERS; i++) {
        keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
        keylock_acquisition a;
        keylock_result r;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        o.mode = x % 3 == 0 ? KEYLOCK_EXCLUSIVE : KEYLOCK_SHARED;
        o.timeout_ns = (x >> 8) % 2 ? MS(2000) : MS(1);
        r = keylock_pool_lock_with(s->pool, KB(k), &o, &a);
        if (r == KEYLOCK_TIMEOUT) continue;
        if (r != KEYLOCK_OK) {
            s->error = r;
            return NULL;
        }
        __atomic_add_fetch(&s->entered, 1, __ATOMIC_SEQ_CST);
        if (o.mode == KEYLOCK_SHARED) {
            __atomic_add_fetch(&s->shared, 1, __ATOMIC_SEQ_CST);
            if (__atomic_load_n(&s->exclusive, __ATOMIC_SEQ_CST))
                __atomic_add_fetch(&s->overlaps, 1, __ATOMIC_SEQ_CST);
            sched_yield();
            __atomic_sub_fetch(&s->shared, 1, __ATOMIC_SEQ_CST);
        } else {
            if (__atomic_add_fetch(&s->exclusive, 1, __ATOMIC_SEQ_CST) > 1 ||
                __atomic_load_n(&s->shared, __ATOMIC_SEQ_CST))
                __atomic_add_fetch(&s->overlaps, 1, __ATOMIC_SEQ_CST);
            s->counter++;
            s->exclusive_ok[arg->thread]++;
            sched_yield();
            __atomic_sub_fetch(&s->exclusive, 1, __ATOMIC_SEQ_CST);
        }
        r = keylock_pool_release(s->pool, &a);
        if (r != KEYLOCK_OK) s->error = r;
    }
    return NULL;
}

static void test_mixed(keylock_pool *pool) {
    mixed s;
    mixed_arg args[THREADS];
    pthread_t threads[THREADS];
    long expected = 0;
    memset(&s, 0, sizeof s);
    s.pool = pool;
    for (int t = 0; t < THREADS; t++) {
        args[t].s = &s;
        args[t].thread = t;
        CHECK(pthread_create(&threads[t], NULL, mixed_thread, &args[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    OK(s.error);
    CHECK(s.overlaps == 0);
    CHECK(s.entered > 0);
    for (int t = 0; t < THREADS; t++) expected += s.exclusive_ok[t];
    CHECK(s.counter == expected);
    CHECK(!locked(pool, key("mixed")));
}

static keylock_pool *open_named(const char *name) {
    keylock_pool *pool = NULL;
    OK(keylock_pool_open(name, NULL, &pool));
    return pool;
}

/*
 * keylock_pool_lost: a Redis or PostgreSQL holder whose key is force-unlocked through another
 * lock object learns of it at its next renewal (every third of the lease: 200 ms on Redis here,
 * 333 ms on PostgreSQL); a normal hold stays unlost past a lease and more. Other scopes never
 * report a loss (their holders learn of a force-unlock at release).
 */
static void test_lost(keylock_pool *pool) {
    bool server = server_scope();
    bool shm = strncmp(scope_name, "shm:", 4) == 0;
    char name[256];
    keylock_pool *holder = pool, *other = pool;
    key_t_ k = key("lost");
    keylock_acquisition a;
    bool lost = true, was = false;
    if (server) {
        snprintf(name, sizeof name, "%s?lease=%s&prefix=%s-lost", scope_name, short_lease(), tag);
        holder = open_named(name);
        other = open_named(name);
    } else if (shm) {
        other = open_scope();
    }
    if (!holder || !other) return;
    OK(keylock_pool_lock(holder, KB(k), &a));
    OK(keylock_pool_lost(holder, &a, &lost));
    CHECK(!lost);
    if (server) {
        sleep_ms(1800); /* three leases on Redis, nearly two on PostgreSQL: renewals keep it held */
        OK(keylock_pool_lost(holder, &a, &lost));
        CHECK(!lost && current(holder, &a));
    }
    OK(keylock_pool_force_unlock(other, KB(k), &was));
    CHECK(was);
    if (server) {
        /* Bounded by the watchdog as well: the loss must show at a renewal. */
        uint64_t until = now_ns() + MS(10000);
        do {
            OK(keylock_pool_lost(holder, &a, &lost));
            if (!lost) sleep_ms(10);
        } while (!lost && now_ns() < until);
        CHECK(lost);
    } else {
        sleep_ms(50);
        OK(keylock_pool_lost(holder, &a, &lost));
        CHECK(!lost);
    }
    CHECK(!current(holder, &a));
    CHECK_RESULT(keylock_pool_release(holder, &a), KEYLOCK_NOT_OWNER);
    /* A released record is not lost; NULLs are refused. */
    OK(keylock_pool_lost(holder, &a, &lost));
    CHECK(!lost);
    CHECK_RESULT(keylock_pool_lost(NULL, &a, &lost), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_pool_lost(holder, NULL, &lost), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_pool_lost(holder, &a, NULL), KEYLOCK_NULL_ARGUMENT);
    if (holder != pool) keylock_pool_free(holder);
    if (other != pool) keylock_pool_free(other);
}

/*
 * keylock_unlink: on a shm scope, a region of its own is removed (its file goes), and a new open
 * of the name makes a fresh region; other names are refused.
 */
static void test_unlink(keylock_pool *pool) {
    bool removed = true;
    (void)pool;
    CHECK_RESULT(keylock_unlink(NULL, &removed), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_unlink("local:", &removed), KEYLOCK_INVALID_ARGUMENT);
    if (strncmp(scope_name, "shm:", 4) != 0) {
        CHECK_RESULT(keylock_unlink(scope_name, &removed), KEYLOCK_INVALID_ARGUMENT);
        return;
    }
    {
        char name[256], file[300];
        keylock_pool *old, *fresh;
        keylock_acquisition held, again;
        key_t_ k = key("unlink");
        snprintf(name, sizeof name, "%s-unlink", scope_name);
        snprintf(file, sizeof file, "/dev/shm/keylock.%s", name + 4);
        old = open_named(name);
        if (!old) return;
        OK(keylock_pool_lock(old, KB(k), &held));
        CHECK(access(file, F_OK) == 0);
        OK(keylock_unlink(name, &removed));
        CHECK(removed && access(file, F_OK) != 0);
        OK(keylock_unlink(name, &removed));
        CHECK(!removed);
        OK(keylock_unlink(name, NULL));
        fresh = open_named(name);
        if (fresh) {
            CHECK(access(file, F_OK) == 0);
            CHECK(!locked(fresh, k)); /* a new region, not the old one */
            OK(keylock_pool_try_lock(fresh, KB(k), &again));
            OK(keylock_pool_release(fresh, &again));
            keylock_pool_free(fresh);
        }
        CHECK(locked(old, k));
        OK(keylock_pool_release(old, &held));
        keylock_pool_free(old);
        OK(keylock_unlink(name, &removed));
        CHECK(removed);
    }
}

/*
 * keylock_pool_stats: the same counts on every scope. On a scope of its own (a fresh pool, a
 * region or a Redis prefix of this test), one handle holds one key exclusively and another
 * shared twice while a thread of a second handle queues for the first key. Scope-wide figures
 * are exact where the scope can tell them and KEYLOCK_STATS_UNKNOWN on Redis and PostgreSQL,
 * which count only this process.
 */
typedef struct {
    keylock_pool *pool;
    key_t_ k;
    keylock_acquisition got;
    keylock_result result;
} stats_waiter;

static void *stats_wait(void *p) {
    stats_waiter *w = p;
    w->result = keylock_pool_lock(w->pool, KB(w->k), &w->got);
    return NULL;
}

static keylock_stats stats_of(keylock_pool *pool) {
    keylock_stats s;
    memset(&s, 0xab, sizeof s);
    OK(keylock_pool_stats(pool, &s));
    return s;
}

static void test_stats(keylock_pool *pool) {
    bool server = server_scope(); /* Redis or PostgreSQL */
    bool shm = strncmp(scope_name, "shm:", 4) == 0;
    const uint64_t unknown = KEYLOCK_STATS_UNKNOWN;
    char name[256];
    keylock_pool *a, *b;
    keylock_acquisition x, r1, r2;
    keylock_stats s;
    stats_waiter w;
    pthread_t t;
    uint64_t until;
    (void)pool;
    if (server) snprintf(name, sizeof name, "%s?prefix=%s-stats", scope_name, tag);
    else if (shm) snprintf(name, sizeof name, "%s-stats", scope_name);
    else snprintf(name, sizeof name, "%s", scope_name);
    a = open_named(name);
    b = (server || shm) ? open_named(name) : a; /* local: one pool, one "here" */
    if (!a || !b) return;
    CHECK_RESULT(keylock_pool_stats(NULL, &s), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_pool_stats(a, NULL), KEYLOCK_NULL_ARGUMENT);
    s = stats_of(a);
    CHECK(s.held_here == 0 && s.waiting_here == 0);
    CHECK(s.held == (server ? unknown : 0) && s.waiting == (server ? unknown : 0));
    w.pool = b;
    w.k = key("stats-x");
    w.result = KEYLOCK_PANIC;
    OK(keylock_pool_lock(a, KB(w.k), &x));
    {
        key_t_ r = key("stats-r");
        OK(keylock_pool_lock_shared(a, KB(r), &r1));
        OK(keylock_pool_lock_shared(a, KB(r), &r2));
    }
    CHECK(pthread_create(&t, NULL, stats_wait, &w) == 0);
    until = now_ns() + MS(20000);
    while (stats_of(b).waiting_here != 1 && now_ns() < until) sleep_ms(1);
    s = stats_of(a);
    CHECK(s.held_here == 2);
    if (server) {
        CHECK(s.held == unknown && s.waiting == unknown && s.shared_holds == unknown);
        CHECK(s.capacity == unknown && s.entries_in_use == unknown);
        CHECK(s.waiting_here == 0 && stats_of(b).waiting_here == 1 && stats_of(b).held_here == 0);
    } else {
        CHECK(s.held == 2 && s.waiting == 1 && s.shared_holds == 2 && s.entries_in_use == 2);
        /* A region has a fixed number of entries; an in-process pool grows as it needs, and
         * alone counts its memory. */
        CHECK(shm ? s.capacity != unknown && s.capacity >= 2 : s.capacity == unknown);
        CHECK(shm ? s.entries_allocated == unknown : s.entries_allocated >= 2);
        if (shm) CHECK(s.waiting_here == 0 && stats_of(b).waiting_here == 1);
        else CHECK(s.waiting_here == 1);
    }
    OK(keylock_pool_release(a, &x));
    CHECK(pthread_join(t, NULL) == 0);
    OK(w.result);
    OK(keylock_pool_release(a, &r1));
    OK(keylock_pool_release(a, &r2));
    s = stats_of(b);
    CHECK(s.held_here == 1 && s.waiting_here == 0);
    OK(keylock_pool_release(b, &w.got));
    s = stats_of(a);
    CHECK(s.held_here == 0 && s.waiting_here == 0);
    if (!server) CHECK(s.held == 0 && s.waiting == 0 && s.shared_holds == 0 && s.entries_in_use == 0);
    if (b != a) keylock_pool_free(b);
    keylock_pool_free(a);
    if (shm) OK(keylock_unlink(name, NULL));
}

/*
 * keylock_semaphore_open on this scope (a region or a prefix of its own, since a shm region is
 * either a pool or a semaphore): two opens of one name share its units.
 */
static void test_semaphore_open(keylock_pool *pool) {
    bool shm = strncmp(scope_name, "shm:", 4) == 0;
    char name[256];
    keylock_semaphore *a = NULL, *b = NULL;
    keylock_acquisition two, one;
    const uint8_t *k = (const uint8_t *)"sem-k";
    (void)pool;
    if (server_scope()) snprintf(name, sizeof name, "%s?prefix=%s-sem", scope_name, tag);
    else if (shm) snprintf(name, sizeof name, "%s-sem", scope_name);
    else snprintf(name, sizeof name, "%s", scope_name);
    OK(keylock_semaphore_open(name, 2, NULL, &a));
    OK(keylock_semaphore_open(name, 2, NULL, &b));
    CHECK(a != NULL && b != NULL && keylock_semaphore_permits(a) == 2);
    OK(keylock_semaphore_acquire(a, k, 5, 2, &two));
    if (strcmp(scope_name, "local:") != 0) {
        /* Two opens of a scope beyond this process are one semaphore. */
        CHECK_RESULT(keylock_semaphore_try_acquire(b, k, 5, 1, &one), KEYLOCK_WOULD_BLOCK);
    }
    OK(keylock_semaphore_release(a, &two));
    OK(keylock_semaphore_try_acquire(b, k, 5, 1, &one));
    OK(keylock_semaphore_release(b, &one));
    keylock_semaphore_free(a);
    keylock_semaphore_free(b);
    if (shm) OK(keylock_unlink(name, NULL));
}

int main(int argc, char **argv) {
    static void (*const tests[])(keylock_pool *) = {
        test_basics, test_short_keys, test_shared, test_stale, test_lease,         test_many,
        test_mixed,  test_lost,       test_unlink, test_stats, test_semaphore_open};
    static const char *const names[] = {"basics", "short_keys", "shared", "stale",
                                        "lease",  "many",       "mixed",  "lost",
                                        "unlink", "stats",      "semaphore_open"};
    int passed = 0, failed = 0;
    keylock_pool *pool;
    if (argc != 2) {
        fprintf(stderr, "usage: test_scope NAME (e.g. local: or redis://127.0.0.1:6379/0)\n");
        return 2;
    }
    scope_name = argv[1];
    redact_name();
    snprintf(tag, sizeof tag, "c-test-%ld-%ld", (long)getpid(), (long)(now_ns() % 1000000007u));
    watchdog_arm(120);
    pool = open_scope();
    if (!pool) {
        printf("test_scope: 0 passed, 1 failed (could not open %s)\n", shown_name);
        return 1;
    }
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        checks_failed = 0;
        tests[i](pool);
        printf("%s %s (%s)\n", checks_failed ? "FAIL" : "ok  ", names[i], shown_name);
        fflush(stdout);
        if (checks_failed) failed++;
        else passed++;
    }
    keylock_pool_free(pool);
    printf("test_scope: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
