/*
 * The C test of metrics (keylock_open_options.metrics, keylock_pool_metrics,
 * keylock_striped_metrics, keylock_semaphore_metrics, keylock_histogram_quantile,
 * keylock_histogram_upper_bound_ns): exact counts under a known workload on a pool, with threads
 * (a grant at once, a failed try, a timed acquire that times out while the key is held, a waiter
 * granted later, a lease that ends before its release, a force-unlock and the holder's refused
 * release, a multi-key acquire), the histograms' counts and their longest waits and holds
 * against known delays, exact totals under pthread contention on a pool and a striped lock, a
 * semaphore's counts, a shared-memory pool's (per handle, with a holder gone: owner_died), and
 * objects without metrics (KEYLOCK_INVALID_ARGUMENT, nothing written). The C ABI has no
 * cancellable acquire, so `cancelled` stays 0 throughout.
 *
 * `make test` builds it like test_keylock.c: against the installed header and library, as C99,
 * under AddressSanitizer and UBSan. Every wait is bounded (a timeout, or the alarm watchdog), so
 * a hang fails. Timing enters only as lower bounds: a wait or hold is at least the delay the test
 * made it last.
 *
 * Closing line: "test_metrics: N passed, M failed"; the exit status is non-zero on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <keylock.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HARNESS_NAME "test_metrics"
#include "harness.h"

/* The ABI: `metrics` took the padding after `fifo`, so the options struct kept its size. */
#if UINTPTR_MAX == UINT64_MAX
typedef char open_options_is_24_bytes[sizeof(keylock_open_options) == 24 ? 1 : -1];
typedef char metrics_follows_fifo[offsetof(keylock_open_options, metrics) == 22 ? 1 : -1];
#endif
typedef char histogram_has_64_buckets[KEYLOCK_HISTOGRAM_BUCKETS == 64 ? 1 : -1];

/* A count, printed with what it should have been when it is not. */
#define CHECK_COUNT(got, want)                                                                \
    do {                                                                                      \
        uint64_t g_ = (got), w_ = (want);                                                     \
        if (g_ != w_) {                                                                       \
            fprintf(stderr, "  %s:%d: %s is %llu, expected %llu\n", __FILE__, __LINE__, #got, \
                    (unsigned long long)g_, (unsigned long long)w_);                          \
            __atomic_add_fetch(&checks_failed, 1, __ATOMIC_SEQ_CST);                          \
        }                                                                                     \
    } while (0)

typedef keylock_acquisition acq_t;

static const keylock_open_options WITH_METRICS = {0, 0, 0, false, false, true};

static keylock_metrics metrics_of_pool(const keylock_pool *pool) {
    keylock_metrics m;
    memset(&m, 0, sizeof m);
    OK(keylock_pool_metrics(pool, &m));
    return m;
}

static uint64_t bucket_sum(const keylock_histogram *h) {
    uint64_t n = 0;
    for (size_t i = 0; i < KEYLOCK_HISTOGRAM_BUCKETS; i++) n += h->buckets[i];
    return n;
}

/* What every snapshot must satisfy: each histogram's count is its buckets' sum, its longest
 * duration lies in its highest bucket that counts any, and its sum is at least its longest. */
static void check_histogram(const keylock_histogram *h) {
    CHECK_COUNT(h->count, bucket_sum(h));
    CHECK(h->sum_ns >= h->max_ns);
    if (h->count == 0) {
        CHECK(h->max_ns == 0 && h->sum_ns == 0);
        CHECK(keylock_histogram_quantile(h, 0.5) == 0);
        return;
    }
    size_t top = 0;
    for (size_t i = 0; i < KEYLOCK_HISTOGRAM_BUCKETS; i++)
        if (h->buckets[i]) top = i;
    CHECK(h->max_ns <= keylock_histogram_upper_bound_ns(top));
    CHECK(top == 0 || h->max_ns > keylock_histogram_upper_bound_ns(top - 1));
    CHECK(keylock_histogram_quantile(h, 1.0) == h->max_ns);
}

/* Waits (bounded) until `key` of `pool` has `waiters` waiters queued. */
static void await_waiters(const keylock_pool *pool, const uint8_t *key, size_t len,
                          size_t waiters) {
    uint64_t deadline = now_ns() + PATIENCE;
    keylock_lock_info info;
    for (;;) {
        OK(keylock_pool_info(pool, key, len, &info));
        if (info.waiters >= waiters) return;
        if (now_ns() > deadline) {
            CHECK(!"the waiter never queued");
            return;
        }
        sleep_ms(1);
    }
}

/* ---- without metrics ---------------------------------------------------------------------------- */

/* An object made without metrics says so (KEYLOCK_INVALID_ARGUMENT) and writes nothing, however
 * it was made and whatever it did; bad arguments are KEYLOCK_NULL_ARGUMENT. */
static void test_off(void) {
    keylock_metrics m, untouched;
    memset(&untouched, 0x5a, sizeof untouched);
    keylock_open_options zero = {0};
    keylock_pool *pool = keylock_pool_new(), *opened = NULL, *zeroed = NULL;
    keylock_striped *striped = keylock_striped_new(16);
    keylock_semaphore *sem = keylock_semaphore_new(2);
    CHECK(pool && striped && sem);
    OK(keylock_pool_open("local:", NULL, &opened));
    OK(keylock_pool_open("local:", &zero, &zeroed));

    acq_t a = KEYLOCK_ACQUISITION_INIT;
    OK(keylock_pool_lock(pool, K("k"), &a));
    OK(keylock_pool_release(pool, &a));
    OK(keylock_striped_lock(striped, K("k"), &a));
    OK(keylock_striped_release(striped, &a));

    const keylock_pool *pools[] = {pool, opened, zeroed};
    for (size_t i = 0; i < 3; i++) {
        memcpy(&m, &untouched, sizeof m);
        CHECK_RESULT(keylock_pool_metrics(pools[i], &m), KEYLOCK_INVALID_ARGUMENT);
        CHECK(memcmp(&m, &untouched, sizeof m) == 0);
    }
    memcpy(&m, &untouched, sizeof m);
    CHECK_RESULT(keylock_striped_metrics(striped, &m), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_metrics(sem, &m), KEYLOCK_INVALID_ARGUMENT);
    CHECK(memcmp(&m, &untouched, sizeof m) == 0);

    CHECK_RESULT(keylock_pool_metrics(NULL, &m), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_striped_metrics(NULL, &m), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_metrics(NULL, &m), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_pool_metrics(pool, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_striped_metrics(striped, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_metrics(sem, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK(memcmp(&m, &untouched, sizeof m) == 0);

    keylock_pool_free(pool);
    keylock_pool_free(opened);
    keylock_pool_free(zeroed);
    keylock_striped_free(striped);
    keylock_semaphore_free(sem);
}

/* ---- histogram helpers ------------------------------------------------------------------------- */

static void test_histogram_helpers(void) {
    CHECK(keylock_histogram_upper_bound_ns(0) == 0);
    CHECK(keylock_histogram_upper_bound_ns(1) == 1);
    CHECK(keylock_histogram_upper_bound_ns(2) == 3);
    CHECK(keylock_histogram_upper_bound_ns(10) == 1023);
    CHECK(keylock_histogram_upper_bound_ns(62) == (UINT64_C(1) << 62) - 1);
    CHECK(keylock_histogram_upper_bound_ns(KEYLOCK_HISTOGRAM_BUCKETS - 1) == UINT64_MAX);
    CHECK(keylock_histogram_upper_bound_ns(KEYLOCK_HISTOGRAM_BUCKETS) == UINT64_MAX);
    CHECK(keylock_histogram_upper_bound_ns(SIZE_MAX) == UINT64_MAX);

    keylock_histogram h;
    memset(&h, 0, sizeof h);
    CHECK(keylock_histogram_quantile(&h, 0.5) == 0);
    CHECK(keylock_histogram_quantile(NULL, 0.5) == 0);
    /* 6 at 0 ns, 3 in bucket 10 (512..1023 ns), 1 in bucket 20 whose longest was 700 000 ns. */
    h.buckets[0] = 6;
    h.buckets[10] = 3;
    h.buckets[20] = 1;
    h.count = 10;
    h.sum_ns = 2000 + 700000;
    h.max_ns = 700000;
    check_histogram(&h);
    CHECK(keylock_histogram_quantile(&h, 0.0) == 0);
    CHECK(keylock_histogram_quantile(&h, 0.6) == 0);
    CHECK(keylock_histogram_quantile(&h, 0.61) == 1023);
    CHECK(keylock_histogram_quantile(&h, 0.9) == 1023);
    CHECK(keylock_histogram_quantile(&h, 0.95) == 700000); /* bucket 20's bound, capped at max */
    CHECK(keylock_histogram_quantile(&h, 1.0) == 700000);
    CHECK(keylock_histogram_quantile(&h, 7.0) == 700000);  /* clamped to 1 */
    CHECK(keylock_histogram_quantile(&h, -1.0) == 0);      /* clamped to 0 */
}

/* ---- the known workload on a pool -------------------------------------------------------------- */

#define WAIT_DELAY_MS 60 /* how long the granted waiter waits, at least */
#define HOLD_DELAY_MS 40 /* how long it holds, at least */

typedef struct {
    keylock_pool *pool;
    keylock_result got;
    uint64_t took_ns;
} timed_arg;

/* Step 3's thread: a timed acquire of "a", which the main thread holds: it times out. */
static void *timed_out_acquire(void *p) {
    timed_arg *arg = p;
    acq_t a = KEYLOCK_ACQUISITION_INIT;
    uint64_t start = now_ns();
    arg->got = keylock_pool_lock_timeout(arg->pool, K("a"), MS(30), &a);
    arg->took_ns = now_ns() - start;
    return NULL;
}

/* Step 4's thread: waits for "a" (bounded), holds it HOLD_DELAY_MS, releases it. */
static void *waiter(void *p) {
    timed_arg *arg = p;
    acq_t a = KEYLOCK_ACQUISITION_INIT;
    arg->got = keylock_pool_lock_timeout(arg->pool, K("a"), PATIENCE, &a);
    if (arg->got != KEYLOCK_OK) return NULL;
    sleep_ms(HOLD_DELAY_MS);
    arg->got = keylock_pool_release(arg->pool, &a);
    return NULL;
}

static void test_pool_workload(void) {
    keylock_pool *pool = NULL;
    OK(keylock_pool_open("local:", &WITH_METRICS, &pool));
    if (!pool) return;
    keylock_metrics m = metrics_of_pool(pool);
    CHECK_COUNT(m.acquired + m.contended + m.timed_out + m.would_block + m.cancelled +
                    m.lease_expired + m.owner_died + m.lost + m.force_unlocked,
                0);
    CHECK_COUNT(m.wait.count + m.hold.count, 0);
    check_histogram(&m.wait);
    check_histogram(&m.hold);

    /* 1. Granted at once. */
    acq_t a = KEYLOCK_ACQUISITION_INIT, b = KEYLOCK_ACQUISITION_INIT;
    OK(keylock_pool_lock(pool, K("a"), &a));
    /* 2. A failed try. */
    CHECK_RESULT(keylock_pool_try_lock(pool, K("a"), &b), KEYLOCK_WOULD_BLOCK);
    m = metrics_of_pool(pool);
    CHECK_COUNT(m.acquired, 1);
    CHECK_COUNT(m.would_block, 1);
    CHECK_COUNT(m.contended, 0);
    CHECK_COUNT(m.wait.count, 1);
    CHECK_COUNT(m.wait.buckets[0], 1);
    CHECK_COUNT(m.hold.count, 0);

    /* 3. A timed acquire on another thread, which times out while "a" is held. */
    pthread_t t;
    timed_arg timed = {pool, KEYLOCK_OK, 0};
    CHECK(pthread_create(&t, NULL, timed_out_acquire, &timed) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_RESULT(timed.got, KEYLOCK_TIMEOUT);
    CHECK(timed.took_ns >= MS(30));
    m = metrics_of_pool(pool);
    CHECK_COUNT(m.contended, 1);
    CHECK_COUNT(m.timed_out, 1);
    CHECK_COUNT(m.acquired, 1);
    CHECK_COUNT(m.wait.count, 1); /* a call that was not granted has no wait recorded */

    /* 4. A waiter, granted when "a" is released WAIT_DELAY_MS after it queued. */
    timed_arg waiting = {pool, KEYLOCK_PANIC, 0};
    CHECK(pthread_create(&t, NULL, waiter, &waiting) == 0);
    await_waiters(pool, K("a"), 1);
    sleep_ms(WAIT_DELAY_MS);
    OK(keylock_pool_release(pool, &a));
    CHECK(pthread_join(t, NULL) == 0);
    OK(waiting.got);
    m = metrics_of_pool(pool);
    CHECK_COUNT(m.contended, 2);
    CHECK_COUNT(m.acquired, 2);
    CHECK_COUNT(m.wait.count, 2);
    CHECK_COUNT(m.wait.buckets[0], 1);
    CHECK(m.wait.max_ns >= MS(WAIT_DELAY_MS));
    CHECK_COUNT(m.hold.count, 2);
    CHECK(m.hold.max_ns >= MS(HOLD_DELAY_MS));

    /* 5. A lease that ends before its release: the release is refused. */
    keylock_lock_options leased = KEYLOCK_LOCK_OPTIONS_INIT;
    leased.lease_ns = MS(10);
    OK(keylock_pool_lock_with(pool, K("l"), &leased, &a));
    sleep_ms(50);
    CHECK_RESULT(keylock_pool_release(pool, &a), KEYLOCK_LEASE_EXPIRED);

    /* 6. A force-unlock, then the holder's release refused; a second release of the same record
     * is the record's own refusal and counts nothing. */
    OK(keylock_pool_lock(pool, K("f"), &a));
    bool was_held = false;
    OK(keylock_pool_force_unlock(pool, K("f"), &was_held));
    CHECK(was_held);
    OK(keylock_pool_force_unlock(pool, K("f"), &was_held)); /* free already: not counted */
    CHECK(!was_held);
    CHECK_RESULT(keylock_pool_release(pool, &a), KEYLOCK_NOT_OWNER);
    CHECK_RESULT(keylock_pool_release(pool, &a), KEYLOCK_NOT_OWNER);

    /* 7. Three keys in one call: three acquisitions, one wait. */
    const uint8_t *keys[] = {(const uint8_t *)"m1", (const uint8_t *)"m2", (const uint8_t *)"m3"};
    size_t lens[] = {2, 2, 2}, count = 0;
    acq_t many[3];
    OK(keylock_pool_lock_many(pool, keys, lens, 3, many, &count));
    CHECK_COUNT(count, 3);
    OK(keylock_pool_release_many(pool, many, count));

    m = metrics_of_pool(pool);
    CHECK_COUNT(m.acquired, 1 + 1 + 1 + 1 + 3); /* steps 1, 4, 5, 6, 7 */
    CHECK_COUNT(m.contended, 2);                /* steps 3, 4 */
    CHECK_COUNT(m.timed_out, 1);
    CHECK_COUNT(m.would_block, 1);
    CHECK_COUNT(m.cancelled, 0);
    CHECK_COUNT(m.lease_expired, 1);
    CHECK_COUNT(m.owner_died, 0);
    CHECK_COUNT(m.lost, 1);
    CHECK_COUNT(m.force_unlocked, 1);
    CHECK_COUNT(m.wait.count, 5);      /* one per granted call: steps 1, 4, 5, 6, 7 */
    CHECK_COUNT(m.wait.buckets[0], 4); /* all but the waiter's were granted at once */
    CHECK(m.wait.max_ns >= MS(WAIT_DELAY_MS));
    CHECK(m.wait.sum_ns >= MS(WAIT_DELAY_MS));
    CHECK_COUNT(m.hold.count, 5); /* steps 1, 4 and the three of step 7; 5 and 6 were refused */
    CHECK(m.hold.max_ns >= MS(HOLD_DELAY_MS));
    check_histogram(&m.wait);
    check_histogram(&m.hold);
    /* Four of five waits were 0 ns: the median is 0, the top is the waiter's wait. */
    CHECK(keylock_histogram_quantile(&m.wait, 0.5) == 0);
    CHECK(keylock_histogram_quantile(&m.wait, 0.8) == 0);
    CHECK(keylock_histogram_quantile(&m.wait, 0.81) == m.wait.max_ns);
    CHECK(keylock_histogram_quantile(&m.wait, 1.0) == m.wait.max_ns);

    /* Reads count nothing. */
    keylock_stats stats;
    bool locked = true;
    OK(keylock_pool_stats(pool, &stats));
    OK(keylock_pool_is_locked(pool, K("a"), &locked));
    CHECK(!locked);
    keylock_metrics again = metrics_of_pool(pool);
    CHECK(memcmp(&again, &m, sizeof m) == 0);

    keylock_pool_free(pool);
}

/* ---- exact totals under contention ------------------------------------------------------------- */

#define THREADS 4
#define ITERS 400

typedef struct {
    keylock_pool *pool;
    keylock_striped *striped;
    long inside;    /* threads between acquire and release: never above 1 */
    long overlaps;  /* times a thread found another inside */
    long failures;  /* acquires or releases that did not return KEYLOCK_OK */
} hot_state;

static void *hot_worker(void *p) {
    hot_state *s = p;
    for (int i = 0; i < ITERS; i++) {
        acq_t a = KEYLOCK_ACQUISITION_INIT;
        keylock_result r = s->pool ? keylock_pool_lock_timeout(s->pool, K("hot"), PATIENCE, &a)
                                   : keylock_striped_lock_timeout(s->striped, K("hot"), PATIENCE, &a);
        if (r != KEYLOCK_OK) {
            __atomic_add_fetch(&s->failures, 1, __ATOMIC_SEQ_CST);
            continue;
        }
        if (__atomic_add_fetch(&s->inside, 1, __ATOMIC_SEQ_CST) != 1)
            __atomic_add_fetch(&s->overlaps, 1, __ATOMIC_SEQ_CST);
        if (i % 16 == 0) sched_yield();
        __atomic_sub_fetch(&s->inside, 1, __ATOMIC_SEQ_CST);
        r = s->pool ? keylock_pool_release(s->pool, &a) : keylock_striped_release(s->striped, &a);
        if (r != KEYLOCK_OK) __atomic_add_fetch(&s->failures, 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

static void check_hot_totals(const keylock_metrics *m) {
    const uint64_t calls = (uint64_t)THREADS * ITERS;
    CHECK_COUNT(m->acquired, calls);
    CHECK_COUNT(m->wait.count, calls);
    CHECK_COUNT(m->hold.count, calls);
    CHECK(m->contended <= calls);
    /* A call granted at once waited 0 ns; one that had to wait, longer. */
    CHECK_COUNT(m->wait.buckets[0], calls - m->contended);
    CHECK_COUNT(m->timed_out + m->would_block + m->cancelled + m->lease_expired + m->owner_died +
                    m->lost + m->force_unlocked,
                0);
    check_histogram(&m->wait);
    check_histogram(&m->hold);
}

static void run_hot(hot_state *s) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, hot_worker, s) == 0);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(s->failures == 0);
    CHECK(s->overlaps == 0);
}

static void test_contended_pool(void) {
    hot_state s = {NULL, NULL, 0, 0, 0};
    OK(keylock_pool_open("local:", &WITH_METRICS, &s.pool));
    if (!s.pool) return;
    run_hot(&s);
    keylock_metrics m = metrics_of_pool(s.pool);
    check_hot_totals(&m);
    keylock_pool_free(s.pool);
}

static void test_contended_striped(void) {
    hot_state s = {NULL, NULL, 0, 0, 0};
    keylock_open_options o = WITH_METRICS;
    o.stripes = 8;
    OK(keylock_striped_open("local:", &o, &s.striped));
    if (!s.striped) return;
    run_hot(&s);
    keylock_metrics m;
    OK(keylock_striped_metrics(s.striped, &m));
    check_hot_totals(&m);
    keylock_striped_free(s.striped);
}

/* ---- a striped lock's keys share stripes: a multi-key acquire counts what it returns ------------- */

static void test_striped_many(void) {
    keylock_striped *striped = NULL;
    keylock_open_options o = WITH_METRICS;
    o.stripes = 2; /* three keys on two stripes: at least two share one */
    OK(keylock_striped_open("local:", &o, &striped));
    if (!striped) return;
    const uint8_t *keys[] = {(const uint8_t *)"p", (const uint8_t *)"q", (const uint8_t *)"r"};
    size_t lens[] = {1, 1, 1}, count = 0;
    acq_t many[3];
    OK(keylock_striped_lock_many(striped, keys, lens, 3, many, &count));
    CHECK(count >= 1 && count <= 2);
    acq_t a = KEYLOCK_ACQUISITION_INIT;
    CHECK_RESULT(keylock_striped_try_lock(striped, K("p"), &a), KEYLOCK_WOULD_BLOCK);
    OK(keylock_striped_release_many(striped, many, count));
    keylock_metrics m;
    OK(keylock_striped_metrics(striped, &m));
    CHECK_COUNT(m.acquired, count);
    CHECK_COUNT(m.would_block, 1);
    CHECK_COUNT(m.wait.count, 1);
    CHECK_COUNT(m.hold.count, count);
    check_histogram(&m.wait);
    check_histogram(&m.hold);
    keylock_striped_free(striped);
}

/* ---- a semaphore --------------------------------------------------------------------------------- */

static void test_semaphore(void) {
    keylock_semaphore *sem = NULL;
    OK(keylock_semaphore_open("local:", 2, &WITH_METRICS, &sem));
    if (!sem) return;
    acq_t a = KEYLOCK_ACQUISITION_INIT, b = KEYLOCK_ACQUISITION_INIT;
    OK(keylock_semaphore_acquire(sem, K("s"), 2, &a));
    CHECK_RESULT(keylock_semaphore_try_acquire(sem, K("s"), 1, &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_semaphore_acquire_timeout(sem, K("s"), 1, MS(20), &b), KEYLOCK_TIMEOUT);
    bool was_held = false;
    OK(keylock_semaphore_force_release(sem, K("s"), &was_held));
    CHECK(was_held);
    CHECK_RESULT(keylock_semaphore_release(sem, &a), KEYLOCK_NOT_OWNER);
    keylock_lock_options leased = KEYLOCK_LOCK_OPTIONS_INIT;
    leased.lease_ns = MS(10);
    OK(keylock_semaphore_acquire_with(sem, K("s"), 1, &leased, &a));
    sleep_ms(50);
    CHECK_RESULT(keylock_semaphore_release(sem, &a), KEYLOCK_LEASE_EXPIRED);
    OK(keylock_semaphore_acquire(sem, K("s"), 1, &a));
    OK(keylock_semaphore_release(sem, &a));

    keylock_metrics m;
    OK(keylock_semaphore_metrics(sem, &m));
    CHECK_COUNT(m.acquired, 3);
    CHECK_COUNT(m.contended, 1);
    CHECK_COUNT(m.timed_out, 1);
    CHECK_COUNT(m.would_block, 1);
    CHECK_COUNT(m.cancelled, 0);
    CHECK_COUNT(m.lease_expired, 1);
    CHECK_COUNT(m.owner_died, 0);
    CHECK_COUNT(m.lost, 1);
    CHECK_COUNT(m.force_unlocked, 1);
    CHECK_COUNT(m.wait.count, 3);
    CHECK_COUNT(m.wait.buckets[0], 3);
    CHECK_COUNT(m.hold.count, 1);
    check_histogram(&m.wait);
    check_histogram(&m.hold);
    keylock_semaphore_free(sem);
}

/* ---- a pool in shared memory: each handle counts its own calls, and a holder that died ------------ */

static void test_shm(void) {
    char name[64];
    snprintf(name, sizeof name, "shm:keylock-metrics-test-%ld", (long)getpid());
    keylock_pool *counted = NULL, *plain = NULL;
    keylock_result r = keylock_pool_open(name, &WITH_METRICS, &counted);
    if (r == KEYLOCK_INVALID_ARGUMENT) {
        printf("  (skipped: this library has no shm scope)\n");
        return;
    }
    OK(r);
    OK(keylock_pool_open(name, NULL, &plain));
    if (!counted || !plain) {
        keylock_pool_free(counted);
        keylock_pool_free(plain);
        return;
    }
    acq_t a = KEYLOCK_ACQUISITION_INIT, b = KEYLOCK_ACQUISITION_INIT;
    OK(keylock_pool_lock(plain, K("k"), &a)); /* another handle's hold: not counted here */
    CHECK_RESULT(keylock_pool_try_lock(counted, K("k"), &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_pool_lock_timeout(counted, K("k"), MS(20), &b), KEYLOCK_TIMEOUT);
    OK(keylock_pool_release(plain, &a));
    OK(keylock_pool_lock(counted, K("k"), &b));
    OK(keylock_pool_release(counted, &b));
    /* A holder that went away holding a key (its handle closed): the next grant says so. */
    keylock_pool *dying = NULL;
    OK(keylock_pool_open(name, NULL, &dying));
    if (dying) {
        acq_t d = KEYLOCK_ACQUISITION_INIT;
        OK(keylock_pool_lock(dying, K("d"), &d));
        keylock_pool_free(dying); /* with "d" held; the record is never used again */
        OK(keylock_pool_try_lock(counted, K("d"), &b));
        CHECK(b.owner_died);
        OK(keylock_pool_release(counted, &b));
    }
    keylock_metrics m = metrics_of_pool(counted);
    CHECK_COUNT(m.acquired, 2);
    CHECK_COUNT(m.owner_died, 1);
    CHECK_COUNT(m.would_block, 1);
    CHECK_COUNT(m.timed_out, 1);
    CHECK_COUNT(m.contended, 1);
    CHECK_COUNT(m.wait.count, 2);
    CHECK_COUNT(m.hold.count, 2);
    CHECK_COUNT(m.lost + m.lease_expired + m.force_unlocked + m.cancelled, 0);
    CHECK_RESULT(keylock_pool_metrics(plain, &m), KEYLOCK_INVALID_ARGUMENT);
    keylock_pool_free(counted);
    keylock_pool_free(plain);
    bool removed = false;
    OK(keylock_unlink(name, &removed));
    CHECK(removed);
}

/* ---- runner ------------------------------------------------------------------------------------ */

static int passed, failed;

static void run(const char *name, void (*test)(void)) {
    checks_failed = 0;
    test();
    printf("%s %s\n", checks_failed ? "FAIL" : "ok  ", name);
    if (checks_failed) failed++;
    else passed++;
    fflush(stdout);
}

int main(void) {
    watchdog_arm(120);
    run("metrics_off", test_off);
    run("histogram_helpers", test_histogram_helpers);
    run("pool_workload_exact_counts", test_pool_workload);
    run("contended_pool_exact_totals", test_contended_pool);
    run("contended_striped_exact_totals", test_contended_striped);
    run("striped_many", test_striped_many);
    run("semaphore", test_semaphore);
    run("shm_pool_per_handle", test_shm);
    printf("test_metrics: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
