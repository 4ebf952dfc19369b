/*
 * The C test of keylock_semaphore: opening and its refusals, weights (a bad one is
 * KEYLOCK_INVALID_ARGUMENT), try-acquire when full, strict FIFO for a heavy request (a later
 * light request never passes it), a fence per acquisition, stale records after a force-release
 * or a lease, and pthread stress with weights 1..3 on a few keys, counting the units inside
 * (never more than the permits) and the acquisitions (exact). `make test` builds it like
 * test_keylock.c: against the installed header and library, as C99, under AddressSanitizer and
 * UBSan. Every wait is bounded (a timeout, or the alarm watchdog), so a hang fails; nothing
 * asserts on timing.
 *
 * Closing line: "test_semaphore: N passed, M failed"; the exit status is non-zero on any failure.
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

#define HARNESS_NAME "test_semaphore"
#include "harness.h"

typedef keylock_acquisition acq_t;

static keylock_lock_info info_of(const keylock_semaphore *s, const uint8_t *key, size_t len) {
    keylock_lock_info info;
    memset(&info, 0x5a, sizeof info);
    OK(keylock_semaphore_info(s, key, len, &info));
    return info;
}

static bool current(const keylock_semaphore *s, const acq_t *a) {
    bool out = true;
    OK(keylock_semaphore_is_current(s, a, &out));
    return out;
}

/* An empty record: what KEYLOCK_ACQUISITION_INIT gives and a failed acquire leaves. */
static bool is_empty(const acq_t *a) {
    return !keylock_acquisition_is_held(a) && a->fence == 0 && a->weight == 0;
}

/* A record full of stray bytes, so that a failed acquire is seen to empty it. */
static acq_t garbage(void) {
    acq_t a;
    memset(&a, 0xab, sizeof a);
    return a;
}

/* Waits (bounded) until `key` has at least `n` waiters queued. */
static bool wait_for_waiters(const keylock_semaphore *s, const uint8_t *key, size_t len,
                             size_t n) {
    for (int i = 0; i < 20000; i++) {
        if (info_of(s, key, len).waiters >= n) return true;
        sleep_ms(1);
    }
    return false;
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* keylock_semaphore_new / _open / _permits: what they make and what they refuse. */
static void test_open(void) {
    keylock_semaphore *s = NULL;
    keylock_open_options o;
    CHECK(keylock_semaphore_new(0) == NULL);
    CHECK(keylock_semaphore_new(KEYLOCK_MAX_PERMITS + 1) == NULL);
    CHECK(KEYLOCK_MAX_PERMITS == 32767);
    CHECK(keylock_semaphore_permits(NULL) == 0);
    s = keylock_semaphore_new(KEYLOCK_MAX_PERMITS);
    CHECK(s != NULL);
    CHECK(keylock_semaphore_permits(s) == KEYLOCK_MAX_PERMITS);
    keylock_semaphore_free(s);
    keylock_semaphore_free(NULL);

    OK(keylock_semaphore_open("local:", 2, NULL, &s));
    CHECK(s != NULL && keylock_semaphore_permits(s) == 2);
    keylock_semaphore_free(s);
    memset(&o, 0, sizeof o);
    OK(keylock_semaphore_open("", 5, &o, &s));
    CHECK(s != NULL && keylock_semaphore_permits(s) == 5);
    keylock_semaphore_free(s);

    /* Refusals leave *out NULL. */
    s = (keylock_semaphore *)&o;
    CHECK_RESULT(keylock_semaphore_open("local:", 0, NULL, &s), KEYLOCK_INVALID_ARGUMENT);
    CHECK(s == NULL);
    CHECK_RESULT(keylock_semaphore_open("local:", KEYLOCK_MAX_PERMITS + 1, NULL, &s),
                 KEYLOCK_INVALID_ARGUMENT);
    /* A shared-memory semaphore: its permits are the region's, and another open must agree. */
    {
        char name[64];
        keylock_semaphore *shm = NULL, *other = NULL;
        snprintf(name, sizeof name, "shm:keylock-c-sem-%ld", (long)getpid());
        OK(keylock_semaphore_open(name, 2, NULL, &shm));
        CHECK(shm != NULL && keylock_semaphore_permits(shm) == 2);
        CHECK_RESULT(keylock_semaphore_open(name, 3, NULL, &other), KEYLOCK_INCOMPATIBLE);
        CHECK(other == NULL);
        keylock_semaphore_free(shm);
        OK(keylock_unlink(name, NULL));
    }
    /* Redis has semaphores: an unreachable server is the error. (make tsan builds a library
     * without the server scopes, where the scheme is refused, and defines this.) */
#ifndef KEYLOCK_TEST_NO_SERVER_SCOPES
    CHECK_RESULT(keylock_semaphore_open("redis://127.0.0.1:1/0?connect_timeout=200ms", 2, NULL, &s),
                 KEYLOCK_UNAVAILABLE);
#else
    CHECK_RESULT(keylock_semaphore_open("redis://127.0.0.1:1/0?connect_timeout=200ms", 2, NULL, &s),
                 KEYLOCK_INVALID_ARGUMENT);
#endif
    CHECK_RESULT(keylock_semaphore_open("nope:", 2, NULL, &s), KEYLOCK_INVALID_ARGUMENT);
    o.fifo = true; /* a semaphore is always FIFO: the option is refused, not ignored */
    CHECK_RESULT(keylock_semaphore_open("local:", 2, &o, &s), KEYLOCK_INVALID_ARGUMENT);
    memset(&o, 0, sizeof o);
    o.reentrant = true;
    CHECK_RESULT(keylock_semaphore_open("local:", 2, &o, &s), KEYLOCK_INVALID_ARGUMENT);
    memset(&o, 0, sizeof o);
    o.stripes = 8;
    CHECK_RESULT(keylock_semaphore_open("local:", 2, &o, &s), KEYLOCK_INVALID_ARGUMENT);
    memset(&o, 0, sizeof o);
    o.capacity = 8;
    CHECK_RESULT(keylock_semaphore_open("local:", 2, &o, &s), KEYLOCK_INVALID_ARGUMENT);
    CHECK(s == NULL);
    CHECK_RESULT(keylock_semaphore_open(NULL, 2, NULL, &s), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_open("local:", 2, NULL, NULL), KEYLOCK_NULL_ARGUMENT);
}

/* A weight of 0 or over the permits, and other bad input: an error code, an empty record,
 * nothing held. */
static void test_bad_weight(void) {
    keylock_semaphore *s = keylock_semaphore_new(3);
    keylock_pool *pool = keylock_pool_new();
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    acq_t a = garbage(), b = KEYLOCK_ACQUISITION_INIT;
    CHECK(s != NULL && pool != NULL);
    if (!s || !pool) return;

    CHECK_RESULT(keylock_semaphore_acquire(s, K("k"), 0, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK(is_empty(&a));
    a = garbage();
    CHECK_RESULT(keylock_semaphore_acquire(s, K("k"), 4, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK(is_empty(&a));
    CHECK_RESULT(keylock_semaphore_acquire(s, K("k"), UINT32_MAX, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_try_acquire(s, K("k"), 0, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_try_acquire(s, K("k"), 4, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire_timeout(s, K("k"), 0, MS(1), &a),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire_with(s, K("k"), 0, &o, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire_with(s, K("k"), 4, NULL, &a),
                 KEYLOCK_INVALID_ARGUMENT);
    o.mode = 7; /* an unknown mode is refused even though a semaphore has none */
    a = garbage();
    CHECK_RESULT(keylock_semaphore_acquire_with(s, K("k"), 1, &o, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK(is_empty(&a));
    CHECK(!info_of(s, K("k")).held);

    /* A bad weight while the key is held, and full: refused at once, not queued. */
    OK(keylock_semaphore_acquire(s, K("k"), 3, &b));
    CHECK_RESULT(keylock_semaphore_acquire(s, K("k"), 4, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire(s, K("k"), 0, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK(info_of(s, K("k")).waiters == 0);
    OK(keylock_semaphore_release(s, &b));

    /* NULLs. */
    CHECK_RESULT(keylock_semaphore_acquire(NULL, K("k"), 1, &a), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire(s, K("k"), 1, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire(s, NULL, 1, 1, &a), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_release(s, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_info(s, K("k"), NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_stats(NULL, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_force_release(NULL, K("k"), NULL), KEYLOCK_NULL_ARGUMENT);

    /* Records of another object are refused, and stay held. */
    OK(keylock_pool_lock(pool, K("k"), &a));
    CHECK(a.weight == 1); /* a lock's acquisition holds one unit */
    CHECK_RESULT(keylock_semaphore_release(s, &a), KEYLOCK_INVALID_ARGUMENT);
    OK(keylock_pool_release(pool, &a));
    OK(keylock_semaphore_acquire(s, K("k"), 2, &b));
    CHECK_RESULT(keylock_pool_release(pool, &b), KEYLOCK_INVALID_ARGUMENT);
    OK(keylock_semaphore_release(s, &b));
    /* Empty and released records. */
    a = (acq_t)KEYLOCK_ACQUISITION_INIT;
    CHECK_RESULT(keylock_semaphore_release(s, &a), KEYLOCK_NOT_LOCKED);
    CHECK_RESULT(keylock_semaphore_release(s, &b), KEYLOCK_NOT_OWNER);
    a = garbage();
    CHECK_RESULT(keylock_semaphore_release(s, &a), KEYLOCK_INVALID_ARGUMENT);
    keylock_pool_free(pool);
    keylock_semaphore_free(s);
}

/* Units fit or they do not: try-acquire is KEYLOCK_WOULD_BLOCK when full, a timed acquire
 * KEYLOCK_TIMEOUT; info counts units and holders exactly; records carry their weights. */
static void test_try_when_full(void) {
    keylock_semaphore *s = keylock_semaphore_new(3);
    acq_t a, b, c = garbage();
    keylock_lock_info info;
    keylock_stats st;
    CHECK(s != NULL);
    if (!s) return;
    OK(keylock_semaphore_acquire(s, K("k"), 2, &a));
    CHECK(a.weight == 2 && keylock_acquisition_is_held(&a) && current(s, &a));
    CHECK(a.mode == KEYLOCK_SHARED && !a.owner_died);
    CHECK_RESULT(keylock_semaphore_try_acquire(s, K("k"), 2, &c), KEYLOCK_WOULD_BLOCK);
    CHECK(is_empty(&c));
    OK(keylock_semaphore_try_acquire(s, K("k"), 1, &b));
    CHECK(b.weight == 1);
    info = info_of(s, K("k"));
    CHECK(info.held && info.units == 3 && info.holders == 2 && info.waiters == 0);
    CHECK(info.lease_remaining_ns == KEYLOCK_NO_LEASE);
    CHECK(info.mode == KEYLOCK_SHARED && info.holds == 1 && info.owner == 0);
    CHECK(info.fence == b.fence); /* the newest acquisition's */
    CHECK_RESULT(keylock_semaphore_try_acquire(s, K("k"), 1, &c), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_semaphore_acquire_timeout(s, K("k"), 1, KEYLOCK_NO_WAIT, &c),
                 KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_semaphore_acquire_timeout(s, K("k"), 1, MS(5), &c), KEYLOCK_TIMEOUT);
    CHECK(is_empty(&c));
    CHECK(info_of(s, K("k")).waiters == 0); /* the timed-out request left the queue */
    /* Another key is independent. */
    OK(keylock_semaphore_try_acquire(s, K("other"), 3, &c));
    OK(keylock_semaphore_stats(s, &st));
    CHECK(st.held == 2 && st.shared_holds == 6 && st.waiting == 0);
    OK(keylock_semaphore_release(s, &c));

    OK(keylock_semaphore_release(s, &a));
    info = info_of(s, K("k"));
    CHECK(info.held && info.units == 1 && info.holders == 1);
    OK(keylock_semaphore_try_acquire(s, K("k"), 2, &a)); /* now they fit */
    OK(keylock_semaphore_release(s, &a));
    OK(keylock_semaphore_release(s, &b));
    info = info_of(s, K("k"));
    CHECK(!info.held && info.units == 0 && info.holders == 0 && info.fence == 0);
    OK(keylock_semaphore_stats(s, &st));
    CHECK(st.held == 0 && st.shared_holds == 0);
    keylock_semaphore_free(s);
}

/* Every acquisition has a fence of its own, rising per key, also across a force-release. */
static void test_fences(void) {
    keylock_semaphore *s = keylock_semaphore_new(4);
    acq_t held[4];
    uint64_t last = 0;
    bool was = false;
    CHECK(s != NULL);
    if (!s) return;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 4; i++) {
            OK(keylock_semaphore_acquire(s, K("f"), 1, &held[i]));
            CHECK(held[i].fence > last);
            last = held[i].fence;
        }
        CHECK(info_of(s, K("f")).fence == last); /* info reports the newest */
        for (int i = 0; i < 4; i++) OK(keylock_semaphore_release(s, &held[i]));
    }
    OK(keylock_semaphore_acquire(s, K("f"), 3, &held[0]));
    CHECK(held[0].fence > last);
    last = held[0].fence;
    OK(keylock_semaphore_force_release(s, K("f"), &was));
    CHECK(was);
    OK(keylock_semaphore_acquire(s, K("f"), 3, &held[1]));
    CHECK(held[1].fence > last);
    OK(keylock_semaphore_release(s, &held[1]));
    CHECK_RESULT(keylock_semaphore_release(s, &held[0]), KEYLOCK_NOT_OWNER);
    keylock_semaphore_free(s);
}

/* A record made stale by a force-release (or a lease) releases nothing: not its units, and
 * not the units of anyone who acquired since. */
static void test_stale_release(void) {
    keylock_semaphore *s = keylock_semaphore_new(3);
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    acq_t a, b, c, d;
    bool was = true;
    uint64_t ns = 0;
    keylock_lock_info info;
    CHECK(s != NULL);
    if (!s) return;
    OK(keylock_semaphore_acquire(s, K("s"), 1, &a));
    OK(keylock_semaphore_acquire(s, K("s"), 2, &b));
    OK(keylock_semaphore_force_release(s, K("s"), &was));
    CHECK(was);
    CHECK(!info_of(s, K("s")).held);
    CHECK(!current(s, &a) && !current(s, &b));
    CHECK(keylock_acquisition_is_held(&a)); /* the record still holds, until released */
    /* All three units are free for a new holder... */
    OK(keylock_semaphore_try_acquire(s, K("s"), 3, &c));
    /* ...whose units the stale records cannot give back. */
    CHECK_RESULT(keylock_semaphore_release(s, &a), KEYLOCK_NOT_OWNER);
    CHECK_RESULT(keylock_semaphore_release(s, &b), KEYLOCK_NOT_OWNER);
    CHECK(!keylock_acquisition_is_held(&a));
    info = info_of(s, K("s"));
    CHECK(info.held && info.units == 3 && info.holders == 1);
    CHECK(current(s, &c));
    CHECK_RESULT(keylock_semaphore_try_acquire(s, K("s"), 1, &d), KEYLOCK_WOULD_BLOCK);
    OK(keylock_semaphore_release(s, &c));
    CHECK_RESULT(keylock_semaphore_release(s, &c), KEYLOCK_NOT_OWNER);
    OK(keylock_semaphore_force_release(s, K("s"), &was));
    CHECK(!was);
    OK(keylock_semaphore_force_release(s, K("s"), NULL));

    /* A lease: the units come back by themselves; the holder's release is refused. */
    o.lease_ns = MS(1);
    o.owner = 99; /* ignored by a semaphore */
    OK(keylock_semaphore_acquire_with(s, K("s"), 2, &o, &a));
    CHECK(a.weight == 2);
    OK(keylock_acquisition_lease_remaining(&a, &ns));
    CHECK(ns <= MS(1));
    for (int i = 0; i < 20000 && current(s, &a); i++) sleep_ms(1);
    CHECK(!current(s, &a));
    OK(keylock_semaphore_try_acquire(s, K("s"), 3, &b));
    CHECK(b.fence > a.fence);
    CHECK_RESULT(keylock_semaphore_release(s, &a), KEYLOCK_LEASE_EXPIRED);
    CHECK(info_of(s, K("s")).units == 3);
    CHECK_RESULT(keylock_semaphore_extend(s, &b, MS(10)), KEYLOCK_INVALID_ARGUMENT); /* no lease */
    OK(keylock_semaphore_release(s, &b));
    /* extend keeps a leased holder's units */
    o.lease_ns = MS(60000);
    OK(keylock_semaphore_acquire_with(s, K("s"), 1, &o, &a));
    OK(keylock_semaphore_extend(s, &a, MS(120000)));
    OK(keylock_acquisition_lease_remaining(&a, &ns));
    CHECK(ns > MS(60000) && ns <= MS(120000));
    CHECK(info_of(s, K("s")).lease_remaining_ns <= MS(120000));
    OK(keylock_semaphore_release(s, &a));
    keylock_semaphore_free(s);
}

/* acquire_many: a weight of every key, all or nothing; release_many. */
static void test_many(void) {
    keylock_semaphore *s = keylock_semaphore_new(3);
    const uint8_t *keys[3] = {(const uint8_t *)"ma", (const uint8_t *)"mb", (const uint8_t *)"ma"};
    size_t lens[3] = {2, 2, 2}, count = 9;
    acq_t acqs[3], one = garbage(), blocker;
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    CHECK(s != NULL);
    if (!s) return;
    OK(keylock_semaphore_acquire_many(s, keys, lens, 3, 2, NULL, acqs, &count));
    CHECK(count == 2); /* "ma" listed twice is taken once */
    CHECK(acqs[0].weight == 2 && acqs[1].weight == 2 && is_empty(&acqs[2]));
    CHECK(info_of(s, K("ma")).units == 2 && info_of(s, K("mb")).units == 2);
    CHECK(info_of(s, K("ma")).fence == acqs[0].fence); /* records in the keys' order */
    CHECK(info_of(s, K("mb")).fence == acqs[1].fence);
    CHECK_RESULT(keylock_semaphore_try_acquire(s, K("ma"), 2, &one), KEYLOCK_WOULD_BLOCK);
    OK(keylock_semaphore_try_acquire(s, K("mb"), 1, &one));
    OK(keylock_semaphore_release(s, &one));
    OK(keylock_semaphore_release_many(s, acqs, count));
    CHECK(!info_of(s, K("ma")).held && !info_of(s, K("mb")).held);
    CHECK_RESULT(keylock_semaphore_release_many(s, acqs, count), KEYLOCK_NOT_OWNER);

    /* All or nothing: "mb" is full, so "ma" is not held after the timeout either. */
    OK(keylock_semaphore_acquire(s, K("mb"), 3, &blocker));
    o.timeout_ns = MS(5);
    count = 9;
    CHECK_RESULT(keylock_semaphore_acquire_many(s, keys, lens, 2, 1, &o, acqs, &count),
                 KEYLOCK_TIMEOUT);
    CHECK(count == 0 && is_empty(&acqs[0]) && is_empty(&acqs[1]));
    CHECK(!info_of(s, K("ma")).held);
    o.timeout_ns = KEYLOCK_NO_WAIT;
    CHECK_RESULT(keylock_semaphore_acquire_many(s, keys, lens, 2, 1, &o, acqs, &count),
                 KEYLOCK_WOULD_BLOCK);
    OK(keylock_semaphore_release(s, &blocker));

    /* Bad input. */
    CHECK_RESULT(keylock_semaphore_acquire_many(s, keys, lens, 2, 0, NULL, acqs, &count),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire_many(s, keys, lens, 2, 4, NULL, acqs, &count),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK(count == 0 && !info_of(s, K("ma")).held && !info_of(s, K("mb")).held);
    CHECK_RESULT(keylock_semaphore_acquire_many(s, keys, lens, 0, 1, NULL, acqs, &count),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire_many(s, keys, lens, 2, 1, NULL, acqs, NULL),
                 KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_acquire_many(NULL, keys, lens, 2, 1, NULL, acqs, &count),
                 KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_release_many(s, acqs, 0), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_semaphore_release_many(s, NULL, 1), KEYLOCK_NULL_ARGUMENT);
    keylock_semaphore_free(s);
}

/* ---- strict FIFO: a heavy request is not passed by later light ones -------------------------- */

typedef struct {
    keylock_semaphore *s;
    uint32_t weight;
    acq_t acq;
    keylock_result result;
    int done; /* atomic */
} waiter;

static void *waiter_thread(void *p) {
    waiter *w = p;
    w->result = keylock_semaphore_acquire_timeout(w->s, K("fifo"), w->weight, PATIENCE, &w->acq);
    __atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void test_heavy_fifo(void) {
    keylock_semaphore *s = keylock_semaphore_new(3);
    acq_t first, probe = garbage();
    waiter heavy, light;
    pthread_t th, tl;
    keylock_lock_info info;
    CHECK(s != NULL);
    if (!s) return;
    memset(&heavy, 0, sizeof heavy);
    memset(&light, 0, sizeof light);
    heavy.s = light.s = s;
    heavy.weight = 3;
    light.weight = 1;

    /* One unit held; a request for all three queues behind it. */
    OK(keylock_semaphore_acquire(s, K("fifo"), 1, &first));
    CHECK(pthread_create(&th, NULL, waiter_thread, &heavy) == 0);
    CHECK(wait_for_waiters(s, K("fifo"), 1));
    /* Two units are free, but a light request would pass the heavy one: it must wait. */
    CHECK_RESULT(keylock_semaphore_try_acquire(s, K("fifo"), 1, &probe), KEYLOCK_WOULD_BLOCK);
    CHECK(is_empty(&probe));
    CHECK_RESULT(keylock_semaphore_acquire_timeout(s, K("fifo"), 1, MS(20), &probe),
                 KEYLOCK_TIMEOUT);
    CHECK_RESULT(keylock_semaphore_acquire_timeout(s, K("fifo"), 2, MS(5), &probe),
                 KEYLOCK_TIMEOUT);
    /* A timed light request queued behind the heavy one. */
    CHECK(pthread_create(&tl, NULL, waiter_thread, &light) == 0);
    CHECK(wait_for_waiters(s, K("fifo"), 2));
    info = info_of(s, K("fifo"));
    CHECK(info.units == 1 && info.holders == 1 && info.waiters == 2);
    CHECK(!__atomic_load_n(&heavy.done, __ATOMIC_SEQ_CST));
    CHECK(!__atomic_load_n(&light.done, __ATOMIC_SEQ_CST));

    /* The release serves the head: the heavy request takes all three units. */
    OK(keylock_semaphore_release(s, &first));
    pthread_join(th, NULL);
    OK(heavy.result);
    CHECK(heavy.acq.weight == 3 && heavy.acq.fence > first.fence);
    info = info_of(s, K("fifo"));
    CHECK(info.units == 3 && info.holders == 1 && info.waiters == 1);
    CHECK(!__atomic_load_n(&light.done, __ATOMIC_SEQ_CST)); /* no unit is free for it */

    /* The heavy holder's release (from this thread: any thread may) serves the light one. */
    OK(keylock_semaphore_release(s, &heavy.acq));
    pthread_join(tl, NULL);
    OK(light.result);
    CHECK(light.acq.weight == 1 && light.acq.fence > heavy.acq.fence);
    OK(keylock_semaphore_release(s, &light.acq));
    CHECK(!info_of(s, K("fifo")).held);
    keylock_semaphore_free(s);
}

/* ---- stress: units inside never exceed the permits; exact counts ----------------------------- */

#define PERMITS 3
#define NKEYS 3
#define NTHREADS 6
#define ITERS 1500

static const char *const KEYS[NKEYS] = {"u0", "u1", "u2"};

typedef struct {
    keylock_semaphore *s;
    long units[NKEYS];     /* atomic: units held inside, as the holders count them */
    long peak[NKEYS];      /* atomic: the most seen at once */
    long acquired[NKEYS];  /* atomic: acquisitions, by weight sum */
    long full;             /* plain: changed only by holders of all PERMITS units of u0 */
    long full_expected;    /* atomic: how many times it was changed */
    uint64_t last_fence[NKEYS]; /* atomic: the highest fence seen per key */
    int fence_regressed;   /* atomic */
} stress;

typedef struct {
    stress *s;
    int thread;
    long weights;   /* this thread's weight sum, by itself */
} stress_arg;

static void *stress_thread(void *p) {
    stress_arg *arg = p;
    stress *st = arg->s;
    uint32_t rng = 0x9e3779b9u ^ (uint32_t)(arg->thread * 7919 + 1);
    for (int i = 0; i < ITERS; i++) {
        int k = (int)(next_random(&rng) % NKEYS);
        uint32_t w = 1 + next_random(&rng) % PERMITS;
        const uint8_t *key = (const uint8_t *)KEYS[k];
        acq_t a;
        keylock_result r;
        long inside;
        if (next_random(&rng) % 4 == 0)
            r = keylock_semaphore_try_acquire(st->s, key, 2, w, &a);
        else
            r = keylock_semaphore_acquire_timeout(st->s, key, 2, w, PATIENCE, &a);
        if (r == KEYLOCK_WOULD_BLOCK) continue;
        CHECK_RESULT(r, KEYLOCK_OK);
        if (r != KEYLOCK_OK) return NULL;
        CHECK(a.weight == w);
        inside = __atomic_add_fetch(&st->units[k], (long)w, __ATOMIC_SEQ_CST);
        if (inside > PERMITS) {
            fprintf(stderr, "  key %s: %ld units inside, permits %d\n", KEYS[k], inside, PERMITS);
            CHECK(inside <= PERMITS);
        }
        {
            long seen = __atomic_load_n(&st->peak[k], __ATOMIC_SEQ_CST);
            while (inside > seen &&
                   !__atomic_compare_exchange_n(&st->peak[k], &seen, inside, false,
                                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            }
        }
        {
            /* Fences are per acquisition and rise: a holder's fence is above the fence of
             * every acquisition released before it was granted. Record the highest. */
            uint64_t seen = __atomic_load_n(&st->last_fence[k], __ATOMIC_SEQ_CST);
            while (a.fence > seen &&
                   !__atomic_compare_exchange_n(&st->last_fence[k], &seen, a.fence, false,
                                                __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            }
        }
        if (k == 0 && w == PERMITS) {
            /* Sole holder of u0: a plain read-modify-write with a yield inside it. */
            long v = st->full;
            sched_yield();
            st->full = v + 1;
            __atomic_add_fetch(&st->full_expected, 1, __ATOMIC_SEQ_CST);
        } else if (i % 8 == 0) {
            sched_yield();
        }
        __atomic_add_fetch(&st->acquired[k], (long)w, __ATOMIC_SEQ_CST);
        arg->weights += (long)w;
        __atomic_sub_fetch(&st->units[k], (long)w, __ATOMIC_SEQ_CST);
        {
            keylock_result rr = keylock_semaphore_release(st->s, &a);
            CHECK_RESULT(rr, KEYLOCK_OK);
        }
    }
    return NULL;
}

static void test_stress(void) {
    stress *st = calloc(1, sizeof *st);
    stress_arg args[NTHREADS];
    pthread_t threads[NTHREADS];
    long total = 0, by_threads = 0;
    keylock_stats stats;
    CHECK(st != NULL);
    if (!st) return;
    st->s = keylock_semaphore_new(PERMITS);
    CHECK(st->s != NULL);
    if (!st->s) {
        free(st);
        return;
    }
    for (int t = 0; t < NTHREADS; t++) {
        args[t].s = st;
        args[t].thread = t;
        args[t].weights = 0;
        CHECK(pthread_create(&threads[t], NULL, stress_thread, &args[t]) == 0);
    }
    for (int t = 0; t < NTHREADS; t++) {
        pthread_join(threads[t], NULL);
        by_threads += args[t].weights;
    }
    for (int k = 0; k < NKEYS; k++) {
        keylock_lock_info info = info_of(st->s, (const uint8_t *)KEYS[k], 2);
        CHECK(st->units[k] == 0);
        CHECK(st->peak[k] >= 1 && st->peak[k] <= PERMITS);
        CHECK(!info.held && info.units == 0 && info.waiters == 0);
        total += st->acquired[k];
        /* The next acquisition's fence is above every one granted before. */
        {
            acq_t a;
            OK(keylock_semaphore_acquire(st->s, (const uint8_t *)KEYS[k], 2, 1, &a));
            CHECK(a.fence > st->last_fence[k]);
            OK(keylock_semaphore_release(st->s, &a));
        }
    }
    CHECK(total == by_threads);
    CHECK(st->full == st->full_expected);
    OK(keylock_semaphore_stats(st->s, &stats));
    CHECK(stats.held == 0 && stats.waiting == 0 && stats.shared_holds == 0);
    keylock_semaphore_free(st->s);
    free(st);
}

/* ---- runner ---------------------------------------------------------------------------------- */

static int passed, failed;

static void run(const char *name, void (*test)(void)) {
    __atomic_store_n(&checks_failed, 0, __ATOMIC_SEQ_CST);
    test();
    printf("%s %s\n", checks_failed ? "FAIL" : "ok  ", name);
    if (checks_failed) failed++;
    else passed++;
    fflush(stdout);
}

int main(void) {
    watchdog_arm(150);
    run("semaphore_open", test_open);
    run("semaphore_bad_weight", test_bad_weight);
    run("semaphore_try_when_full", test_try_when_full);
    run("semaphore_fences", test_fences);
    run("semaphore_stale_release", test_stale_release);
    run("semaphore_many", test_many);
    run("semaphore_heavy_fifo", test_heavy_fifo);
    run("semaphore_stress", test_stress);
    printf("test_semaphore: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
