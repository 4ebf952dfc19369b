/*
 * The C API test: every function and every result code, each bad input, the ownership rules
 * (a stale acquisition never releases the next holder, fences, leases, reentrancy, force-unlock),
 * the modes (shared holders overlap, exclusive ones overlap nothing), and pthread stress tests
 * with exact counts on all three primitives. `make test` builds it against the *installed*
 * header and library (make install into a temporary prefix, flags from pkg-config) with
 * -fsanitize=address,undefined, as C99, and under ThreadSanitizer (`make tsan-c`). A watchdog
 * (alarm) turns a deadlock into a failure.
 *
 * Closing line: "test_keylock: N passed, M failed"; the exit status is non-zero on any failure.
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

#define HARNESS_NAME "test_keylock"
#include "harness.h"

/* The ABI's sizes, checked at compile time too. */
typedef char acquisition_is_128_bytes[sizeof(keylock_acquisition) == 128 ? 1 : -1];

/* ---- the two keyed primitives behind one table, so each test runs on both ------------------ */

typedef keylock_acquisition acq_t;

typedef struct {
    const char *name;
    bool exact; /* distinct keys are distinct locks (the pool), not maybe one stripe */
    void *(*make)(void);
    keylock_result (*open)(const char *, const keylock_open_options *, void **);
    void (*destroy)(void *);
    keylock_result (*lock)(void *, const uint8_t *, size_t, acq_t *);
    keylock_result (*try_lock)(void *, const uint8_t *, size_t, acq_t *);
    keylock_result (*lock_timeout)(void *, const uint8_t *, size_t, uint64_t, acq_t *);
    keylock_result (*lock_shared)(void *, const uint8_t *, size_t, acq_t *);
    keylock_result (*try_lock_shared)(void *, const uint8_t *, size_t, acq_t *);
    keylock_result (*lock_shared_timeout)(void *, const uint8_t *, size_t, uint64_t, acq_t *);
    keylock_result (*lock_with)(void *, const uint8_t *, size_t, const keylock_lock_options *,
                                acq_t *);
    keylock_result (*lock_many)(void *, const uint8_t *const *, const size_t *, size_t, acq_t *,
                                size_t *);
    keylock_result (*lock_many_with)(void *, const uint8_t *const *, const size_t *,
                                     const keylock_mode *, size_t, const keylock_lock_options *,
                                     acq_t *, size_t *);
    keylock_result (*release)(void *, acq_t *);
    keylock_result (*release_many)(void *, acq_t *, size_t);
    keylock_result (*extend)(void *, acq_t *, uint64_t);
    keylock_result (*is_current)(const void *, const acq_t *, bool *);
    keylock_result (*force_unlock)(void *, const uint8_t *, size_t, bool *);
    keylock_result (*is_locked)(const void *, const uint8_t *, size_t, bool *);
    keylock_result (*info)(const void *, const uint8_t *, size_t, keylock_lock_info *);
} keyed_api;

#define KEYED_WRAPPERS(prefix, type, make_expr, is_exact)                                     \
    static void *prefix##_make(void) { return make_expr; }                                    \
    static keylock_result prefix##_open(const char *n, const keylock_open_options *o,         \
                                        void **out) {                                         \
        type *h = NULL;                                                                       \
        keylock_result r = keylock_##prefix##_open(n, o, &h);                                 \
        *out = h;                                                                             \
        return r;                                                                             \
    }                                                                                         \
    static void prefix##_destroy(void *h) { keylock_##prefix##_free((type *)h); }             \
    static keylock_result prefix##_lock(void *h, const uint8_t *k, size_t n, acq_t *a) {      \
        return keylock_##prefix##_lock((type *)h, k, n, a);                                   \
    }                                                                                         \
    static keylock_result prefix##_try_lock(void *h, const uint8_t *k, size_t n, acq_t *a) {  \
        return keylock_##prefix##_try_lock((type *)h, k, n, a);                               \
    }                                                                                         \
    static keylock_result prefix##_lock_timeout(void *h, const uint8_t *k, size_t n,          \
                                                uint64_t ns, acq_t *a) {                      \
        return keylock_##prefix##_lock_timeout((type *)h, k, n, ns, a);                       \
    }                                                                                         \
    static keylock_result prefix##_lock_shared(void *h, const uint8_t *k, size_t n,           \
                                               acq_t *a) {                                    \
        return keylock_##prefix##_lock_shared((type *)h, k, n, a);                            \
    }                                                                                         \
    static keylock_result prefix##_try_lock_shared(void *h, const uint8_t *k, size_t n,       \
                                                   acq_t *a) {                                \
        return keylock_##prefix##_try_lock_shared((type *)h, k, n, a);                        \
    }                                                                                         \
    static keylock_result prefix##_lock_shared_timeout(void *h, const uint8_t *k, size_t n,   \
                                                       uint64_t ns, acq_t *a) {               \
        return keylock_##prefix##_lock_shared_timeout((type *)h, k, n, ns, a);                \
    }                                                                                         \
    static keylock_result prefix##_lock_with(void *h, const uint8_t *k, size_t n,             \
                                             const keylock_lock_options *o, acq_t *a) {       \
        return keylock_##prefix##_lock_with((type *)h, k, n, o, a);                           \
    }                                                                                         \
    static keylock_result prefix##_lock_many(void *h, const uint8_t *const *k,                \
                                             const size_t *n, size_t c, acq_t *a,             \
                                             size_t *count) {                                 \
        return keylock_##prefix##_lock_many((type *)h, k, n, c, a, count);                    \
    }                                                                                         \
    static keylock_result prefix##_lock_many_with(                                            \
        void *h, const uint8_t *const *k, const size_t *n, const keylock_mode *m, size_t c,   \
        const keylock_lock_options *o, acq_t *a, size_t *count) {                             \
        return keylock_##prefix##_lock_many_with((type *)h, k, n, m, c, o, a, count);         \
    }                                                                                         \
    static keylock_result prefix##_release(void *h, acq_t *a) {                               \
        return keylock_##prefix##_release((type *)h, a);                                      \
    }                                                                                         \
    static keylock_result prefix##_release_many(void *h, acq_t *a, size_t n) {                \
        return keylock_##prefix##_release_many((type *)h, a, n);                              \
    }                                                                                         \
    static keylock_result prefix##_extend(void *h, acq_t *a, uint64_t ns) {                   \
        return keylock_##prefix##_extend((type *)h, a, ns);                                   \
    }                                                                                         \
    static keylock_result prefix##_is_current(const void *h, const acq_t *a, bool *out) {     \
        return keylock_##prefix##_is_current((const type *)h, a, out);                        \
    }                                                                                         \
    static keylock_result prefix##_force_unlock(void *h, const uint8_t *k, size_t n,          \
                                                bool *was) {                                  \
        return keylock_##prefix##_force_unlock((type *)h, k, n, was);                         \
    }                                                                                         \
    static keylock_result prefix##_is_locked(const void *h, const uint8_t *k, size_t n,       \
                                             bool *out) {                                     \
        return keylock_##prefix##_is_locked((const type *)h, k, n, out);                      \
    }                                                                                         \
    static keylock_result prefix##_info(const void *h, const uint8_t *k, size_t n,            \
                                        keylock_lock_info *out) {                             \
        return keylock_##prefix##_info((const type *)h, k, n, out);                           \
    }                                                                                         \
    static const keyed_api prefix##_api = {                                                   \
        #prefix,                     is_exact,                 prefix##_make,                 \
        prefix##_open,               prefix##_destroy,         prefix##_lock,                 \
        prefix##_try_lock,           prefix##_lock_timeout,    prefix##_lock_shared,          \
        prefix##_try_lock_shared,    prefix##_lock_shared_timeout, prefix##_lock_with,        \
        prefix##_lock_many,          prefix##_lock_many_with,  prefix##_release,              \
        prefix##_release_many,       prefix##_extend,          prefix##_is_current,           \
        prefix##_force_unlock,       prefix##_is_locked,       prefix##_info,                 \
    };

KEYED_WRAPPERS(pool, keylock_pool, keylock_pool_new(), true)
KEYED_WRAPPERS(striped, keylock_striped, keylock_striped_new(1024), false)

static const keyed_api *const KEYED[] = {&pool_api, &striped_api};

static bool locked(const keyed_api *api, const void *h, const uint8_t *key, size_t len) {
    bool out = false;
    OK(api->is_locked(h, key, len, &out));
    return out;
}

static bool current(const keyed_api *api, const void *h, const acq_t *a) {
    bool out = false;
    OK(api->is_current(h, a, &out));
    return out;
}

static keylock_lock_info info_of(const keyed_api *api, const void *h, const uint8_t *key,
                                 size_t len) {
    keylock_lock_info info;
    memset(&info, 0x5a, sizeof info);
    OK(api->info(h, key, len, &info));
    return info;
}

/* An empty record: what KEYLOCK_ACQUISITION_INIT gives and a failed acquire leaves. */
static bool is_empty(const acq_t *a) {
    return !keylock_acquisition_is_held(a) && a->fence == 0 && a->mode == 0 && !a->owner_died;
}

/* A record full of stray bytes, as an uninitialised struct might be. */
static acq_t garbage(void) {
    acq_t a;
    memset(&a, 0xab, sizeof a);
    return a;
}

/*
 * A key that shares no lock with `held` (already locked): any key for the pool; for the striped
 * lock, one whose stripe is_locked reports free, so the test does not depend on the hash seed.
 */
static void free_key(const keyed_api *api, const void *h, char out[32], size_t *len) {
    for (int i = 0; i < 100000; i++) {
        *len = (size_t)snprintf(out, 32, "other:%d", i);
        if (!locked(api, h, (const uint8_t *)out, *len)) return;
    }
    CHECK(!"no free stripe found");
}

/* ---- plain tests ------------------------------------------------------------------------ */

static void test_version(void) {
    char from_macros[64];
    CHECK(keylock_version() != NULL);
    CHECK(strcmp(keylock_version(), KEYLOCK_VERSION) == 0);
    snprintf(from_macros, sizeof from_macros, "%d.%d.%d", KEYLOCK_VERSION_MAJOR,
             KEYLOCK_VERSION_MINOR, KEYLOCK_VERSION_PATCH);
    CHECK(strcmp(from_macros, KEYLOCK_VERSION) == 0);
}

static void test_result_codes(void) {
    static const struct {
        keylock_result code;
        uint32_t number;
        const char *name;
    } codes[] = {
        {KEYLOCK_OK, 0, "KEYLOCK_OK"},
        {KEYLOCK_WOULD_BLOCK, 1, "KEYLOCK_WOULD_BLOCK"},
        {KEYLOCK_TIMEOUT, 2, "KEYLOCK_TIMEOUT"},
        {KEYLOCK_NOT_LOCKED, 3, "KEYLOCK_NOT_LOCKED"},
        {KEYLOCK_NULL_ARGUMENT, 4, "KEYLOCK_NULL_ARGUMENT"},
        {KEYLOCK_INVALID_ARGUMENT, 5, "KEYLOCK_INVALID_ARGUMENT"},
        {KEYLOCK_PANIC, 6, "KEYLOCK_PANIC"},
        {KEYLOCK_NOT_OWNER, 7, "KEYLOCK_NOT_OWNER"},
        {KEYLOCK_LEASE_EXPIRED, 8, "KEYLOCK_LEASE_EXPIRED"},
        {KEYLOCK_REENTRANCY_LIMIT, 9, "KEYLOCK_REENTRANCY_LIMIT"},
        {KEYLOCK_CAPACITY_EXCEEDED, 10, "KEYLOCK_CAPACITY_EXCEEDED"},
        {KEYLOCK_INCOMPATIBLE, 11, "KEYLOCK_INCOMPATIBLE"},
        {KEYLOCK_PERMISSION_DENIED, 12, "KEYLOCK_PERMISSION_DENIED"},
        {KEYLOCK_UNAVAILABLE, 13, "KEYLOCK_UNAVAILABLE"},
    };
    /* The numbers are ABI: they must never change. */
    CHECK(sizeof(keylock_result) == 4);
    CHECK(sizeof(keylock_mode) == 4);
    CHECK(KEYLOCK_EXCLUSIVE == 0 && KEYLOCK_SHARED == 1);
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = keylock_result_str(codes[i].code);
        CHECK(codes[i].code == codes[i].number);
        CHECK(s != NULL && strncmp(s, codes[i].name, strlen(codes[i].name)) == 0);
        CHECK(s != NULL && s[strlen(codes[i].name)] == ':');
    }
    /* 14 is the next free number: not known yet. */
    CHECK(strcmp(keylock_result_str(14), "unknown keylock_result") == 0);
    CHECK(strcmp(keylock_result_str(0x7fffffff), "unknown keylock_result") == 0);
    CHECK(strcmp(keylock_result_str(UINT32_MAX), "unknown keylock_result") == 0);
}

/* The key encoders' bad input (the cross-language fixture, test_keys.c, checks their output). */
static void test_key_encoders(void) {
    const uint16_t text[] = {0x6b, 0xe9, 0xd83d, 0xde00}; /* "ké😀" */
    const uint16_t lone[] = {0x61, 0xd800};
    uint8_t out[16], int_key[KEYLOCK_INT_KEY_LEN];
    size_t len = 99;
    OK(keylock_key_from_utf16(text, 4, NULL, 0, &len)); /* measure */
    CHECK(len == 7);
    OK(keylock_key_from_utf16(text, 4, out, sizeof out, &len));
    CHECK(len == 7 && memcmp(out, "k\xc3\xa9\xf0\x9f\x98\x80", 7) == 0);
    OK(keylock_key_from_utf16(NULL, 0, NULL, 0, &len));
    CHECK(len == 0);
    CHECK_RESULT(keylock_key_from_utf16(text, 4, out, 6, &len), KEYLOCK_INVALID_ARGUMENT);
    CHECK(len == 7); /* too small: the length needed */
    CHECK_RESULT(keylock_key_from_utf16(lone, 2, out, sizeof out, &len), KEYLOCK_INVALID_ARGUMENT);
    CHECK(len == 0); /* a lone surrogate */
    CHECK_RESULT(keylock_key_from_utf16(NULL, 1, out, sizeof out, &len), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_key_from_utf16(text, 4, NULL, 8, &len), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_key_from_utf16(text, 4, out, sizeof out, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_key_from_utf16(text, SIZE_MAX, out, sizeof out, &len),
                 KEYLOCK_INVALID_ARGUMENT);
    OK(keylock_key_from_i64(INT64_MIN, int_key));
    CHECK(int_key[0] == 0x80 && int_key[7] == 0);
    CHECK_RESULT(keylock_key_from_i64(1, NULL), KEYLOCK_NULL_ARGUMENT);
}

/* keylock_acquisition itself: the initialiser, the held test, the lease figure. */
static void test_acquisition_record(void) {
    acq_t empty = KEYLOCK_ACQUISITION_INIT, junk = garbage();
    uint64_t ns = 7;
    keylock_lock_options defaults = KEYLOCK_LOCK_OPTIONS_INIT;
    CHECK(sizeof(keylock_acquisition) == 128);
    CHECK(is_empty(&empty));
    CHECK(!keylock_acquisition_is_held(NULL));
    CHECK(!keylock_acquisition_is_held(&junk));
    CHECK(defaults.mode == KEYLOCK_EXCLUSIVE && defaults.lease_ns == 0 && defaults.owner == 0 &&
          defaults.timeout_ns == KEYLOCK_WAIT_FOREVER);
    CHECK(KEYLOCK_WAIT_FOREVER == UINT64_MAX && KEYLOCK_NO_WAIT == 0);
    CHECK(KEYLOCK_NO_LEASE == UINT64_MAX);
    CHECK_RESULT(keylock_acquisition_lease_remaining(&empty, &ns), KEYLOCK_NOT_LOCKED);
    CHECK(ns == 7);
    CHECK_RESULT(keylock_acquisition_lease_remaining(&junk, &ns), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_acquisition_lease_remaining(NULL, &ns), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_acquisition_lease_remaining(&empty, NULL), KEYLOCK_NULL_ARGUMENT);
}

/* keylock_pool_open / keylock_striped_open: names, options, and what they refuse. */
static void test_open(void) {
    keylock_pool *pool = (keylock_pool *)&pool; /* not NULL: a failure must reset it */
    keylock_striped *striped = NULL;
    keylock_open_options o;
    acq_t a = KEYLOCK_ACQUISITION_INIT;
    memset(&o, 0, sizeof o);

    OK(keylock_pool_open("local:", NULL, &pool));
    CHECK(pool != NULL);
    OK(keylock_pool_lock(pool, K("k"), &a));
    OK(keylock_pool_release(pool, &a));
    keylock_pool_free(pool);
    OK(keylock_pool_open("", &o, &pool));
    keylock_pool_free(pool);
    o.fifo = true;
    OK(keylock_pool_open("local:", &o, &pool));
    keylock_pool_free(pool);
    o.fifo = false;

    /* names: a scheme is required, local: takes no name, unknown schemes are refused */
    CHECK_RESULT(keylock_pool_open("bogus:x", NULL, &pool), KEYLOCK_INVALID_ARGUMENT);
    CHECK(pool == NULL);
    CHECK_RESULT(keylock_pool_open("no-scheme", NULL, &pool), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_pool_open("local:name", NULL, &pool), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_pool_open("local:\xff", NULL, &pool), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_pool_open(NULL, NULL, &pool), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_pool_open("local:", NULL, NULL), KEYLOCK_NULL_ARGUMENT);
    /* options that do not apply */
    o.stripes = 4;
    CHECK_RESULT(keylock_pool_open("local:", &o, &pool), KEYLOCK_INVALID_ARGUMENT);
    o.stripes = 0;
    o.capacity = 100;
    CHECK_RESULT(keylock_pool_open("local:", &o, &pool), KEYLOCK_INVALID_ARGUMENT);
    o.capacity = 0;
    o.permissions = 0600;
    CHECK_RESULT(keylock_pool_open("local:", &o, &pool), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_striped_open("local:", &o, &striped), KEYLOCK_INVALID_ARGUMENT);
    CHECK(pool == NULL && striped == NULL);
    o.permissions = 0;

    OK(keylock_striped_open("local:", NULL, &striped));
    OK(keylock_striped_lock(striped, K("k"), &a));
    OK(keylock_striped_release(striped, &a));
    keylock_striped_free(striped);
    o.stripes = 3;
    OK(keylock_striped_open("local:", &o, &striped));
    keylock_striped_free(striped);
    o.stripes = (size_t)KEYLOCK_MAX_STRIPES + 1;
    CHECK_RESULT(keylock_striped_open("local:", &o, &striped), KEYLOCK_INVALID_ARGUMENT);
    CHECK(striped == NULL);
    CHECK_RESULT(keylock_striped_open("bogus:", NULL, &striped), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_striped_open(NULL, NULL, &striped), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_striped_open("local:", NULL, NULL), KEYLOCK_NULL_ARGUMENT);

    CHECK(keylock_striped_new(0) == NULL);
    CHECK(keylock_striped_new((size_t)KEYLOCK_MAX_STRIPES + 1) == NULL);
    CHECK(KEYLOCK_DEFAULT_STRIPES == 1024);
    keylock_pool_free(NULL);
    keylock_striped_free(NULL);
    keylock_rwlock_free(NULL);
}

/* ---- keyed tests (each runs on the pool and the striped lock) ----------------------------- */

/* lock / try / timeout / release on one key, each result they give, and the record's states. */
static void test_keyed_basics(const keyed_api *api) {
    void *h = api->make(), *other = api->make();
    acq_t a, b, junk;
    uint64_t first, ns = 0;
    keylock_lock_info info;
    CHECK(h != NULL && other != NULL);
    if (!h || !other) return;

    CHECK(!locked(api, h, K("alpha")));
    info = info_of(api, h, K("alpha"));
    CHECK(!info.held && info.fence == 0 && info.holders == 0 && info.waiters == 0);
    OK(api->lock(h, K("alpha"), &a));
    CHECK(keylock_acquisition_is_held(&a));
    CHECK(a.mode == KEYLOCK_EXCLUSIVE && a.fence >= 1 && !a.owner_died);
    first = a.fence;
    CHECK(locked(api, h, K("alpha")));
    CHECK(current(api, h, &a));
    info = info_of(api, h, K("alpha"));
    CHECK(info.held && info.mode == KEYLOCK_EXCLUSIVE && info.fence == first);
    CHECK(info.holders == 1 && info.holds == 1 && info.owner == 0 && info.waiters == 0);
    CHECK(info.lease_remaining_ns == KEYLOCK_NO_LEASE);
    OK(keylock_acquisition_lease_remaining(&a, &ns));
    CHECK(ns == KEYLOCK_NO_LEASE);
    CHECK_RESULT(api->extend(h, &a, MS(10)), KEYLOCK_INVALID_ARGUMENT); /* no lease */

    /* held: every other acquire fails, and leaves its output empty */
    b = garbage();
    CHECK_RESULT(api->try_lock(h, K("alpha"), &b), KEYLOCK_WOULD_BLOCK);
    CHECK(is_empty(&b));
    CHECK_RESULT(api->lock_timeout(h, K("alpha"), KEYLOCK_NO_WAIT, &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(api->lock_timeout(h, K("alpha"), MS(20), &b), KEYLOCK_TIMEOUT);
    CHECK(is_empty(&b));
    CHECK_RESULT(api->try_lock_shared(h, K("alpha"), &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(api->lock_shared_timeout(h, K("alpha"), MS(5), &b), KEYLOCK_TIMEOUT);
    CHECK(is_empty(&b));
    CHECK_RESULT(api->release(h, &b), KEYLOCK_NOT_LOCKED); /* a failed acquire's output */

    /* a record belongs to its lock object: another one refuses it and changes nothing */
    CHECK_RESULT(api->release(other, &a), KEYLOCK_INVALID_ARGUMENT);
    CHECK(keylock_acquisition_is_held(&a) && locked(api, h, K("alpha")));
    {
        bool out = true;
        CHECK_RESULT(api->is_current(other, &a, &out), KEYLOCK_INVALID_ARGUMENT);
    }
    CHECK_RESULT(api->extend(other, &a, MS(1)), KEYLOCK_INVALID_ARGUMENT);

    /* release: once; the record is then released, and a second release touches nothing */
    OK(api->release(h, &a));
    CHECK(!keylock_acquisition_is_held(&a));
    CHECK(a.fence == first && a.mode == KEYLOCK_EXCLUSIVE); /* the public fields stay */
    CHECK(!locked(api, h, K("alpha")));
    CHECK(!current(api, h, &a));
    CHECK_RESULT(api->release(h, &a), KEYLOCK_NOT_OWNER);
    CHECK_RESULT(api->extend(h, &a, MS(1)), KEYLOCK_NOT_OWNER);
    CHECK_RESULT(keylock_acquisition_lease_remaining(&a, &ns), KEYLOCK_NOT_OWNER);
    OK(api->lock(h, K("alpha"), &b)); /* someone else now holds it */
    CHECK_RESULT(api->release(h, &a), KEYLOCK_NOT_OWNER);
    CHECK(locked(api, h, K("alpha")));
    CHECK(b.fence > first);
    OK(api->release(h, &b));

    /* empty and stray records */
    {
        acq_t empty = KEYLOCK_ACQUISITION_INIT;
        bool out = true;
        CHECK_RESULT(api->release(h, &empty), KEYLOCK_NOT_LOCKED);
        CHECK_RESULT(api->extend(h, &empty, MS(1)), KEYLOCK_NOT_LOCKED);
        OK(api->is_current(h, &empty, &out));
        CHECK(!out);
        junk = garbage();
        CHECK_RESULT(api->release(h, &junk), KEYLOCK_INVALID_ARGUMENT);
        CHECK_RESULT(api->extend(h, &junk, MS(1)), KEYLOCK_INVALID_ARGUMENT);
        CHECK_RESULT(api->is_current(h, &junk, &out), KEYLOCK_INVALID_ARGUMENT);
    }

    /* try and the timed forms succeed when free; the largest timeout does not overflow */
    OK(api->try_lock(h, K("alpha"), &a));
    OK(api->release(h, &a));
    OK(api->lock_timeout(h, K("alpha"), KEYLOCK_NO_WAIT, &a));
    OK(api->release(h, &a));
    OK(api->lock_timeout(h, K("alpha"), KEYLOCK_WAIT_FOREVER, &a));
    OK(api->release(h, &a));
    OK(api->lock_timeout(h, K("alpha"), UINT64_MAX - 1, &a));
    CHECK(a.fence > first);
    OK(api->release(h, &a));

    /* A held key does not block a key of another lock. */
    {
        char key[32];
        size_t len;
        OK(api->lock(h, K("alpha"), &a));
        free_key(api, h, key, &len);
        OK(api->try_lock(h, (const uint8_t *)key, len, &b));
        OK(api->release(h, &b));
        OK(api->release(h, &a));
    }

    /* NULL with length 0 is the empty key, the same key as any zero-length buffer. */
    OK(api->lock(h, NULL, 0, &a));
    CHECK(locked(api, h, (const uint8_t *)"", 0));
    CHECK_RESULT(api->try_lock(h, (const uint8_t *)"x", 0, &b), KEYLOCK_WOULD_BLOCK);
    OK(api->release(h, &a));

    /* Keys are bytes: embedded NULs count, and the caller's buffer is not kept. */
    {
        uint8_t buf[3] = {'a', 0, 'b'};
        const uint8_t same[3] = {'a', 0, 'b'};
        OK(api->lock(h, buf, 3, &a));
        memset(buf, 0xff, sizeof buf);
        CHECK(locked(api, h, same, 3));
        OK(api->release(h, &a));
        CHECK(!locked(api, h, same, 3));
    }
    api->destroy(other);
    api->destroy(h);
}

/* Shared holders overlap and read the current fence; exclusive requests wait for them all. */
static void test_keyed_shared(const keyed_api *api) {
    void *h = api->make();
    acq_t x, s1, s2, s3;
    uint64_t fence;
    keylock_lock_info info;
    if (!h) return;
    OK(api->lock(h, K("doc"), &x));
    fence = x.fence;
    OK(api->release(h, &x));

    OK(api->lock_shared(h, K("doc"), &s1));
    OK(api->try_lock_shared(h, K("doc"), &s2));
    CHECK(s1.mode == KEYLOCK_SHARED && s2.mode == KEYLOCK_SHARED);
    CHECK(s1.fence == fence && s2.fence == fence);
    info = info_of(api, h, K("doc"));
    CHECK(info.held && info.mode == KEYLOCK_SHARED && info.holders == 2 && info.fence == fence);
    CHECK(current(api, h, &s1) && current(api, h, &s2));
    CHECK_RESULT(api->try_lock(h, K("doc"), &x), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(api->lock_timeout(h, K("doc"), MS(5), &x), KEYLOCK_TIMEOUT);
    OK(api->lock_shared_timeout(h, K("doc"), MS(5), &s3));
    CHECK(info_of(api, h, K("doc")).holders == 3);
    OK(api->release(h, &s3));
    OK(api->release(h, &s1));
    CHECK(locked(api, h, K("doc")));
    CHECK_RESULT(api->release(h, &s1), KEYLOCK_NOT_OWNER);
    CHECK(info_of(api, h, K("doc")).holders == 1); /* a second release counted nobody out */
    OK(api->release(h, &s2));
    CHECK(!locked(api, h, K("doc")));

    OK(api->lock(h, K("doc"), &x));
    CHECK(x.fence > fence);
    CHECK_RESULT(api->try_lock_shared(h, K("doc"), &s1), KEYLOCK_WOULD_BLOCK);
    OK(api->release(h, &x));
    api->destroy(h);
}

/*
 * Keys of every length from 0 to 40 bytes, in both modes: the striped lock's fast path takes
 * keys of up to 16 bytes and sends longer ones down its guarded path, and a release finishes
 * with one compare-and-swap or in the guarded path (a shared hold, a longer key's record).
 * Each hold is exact: the key is held while its record is, free after, its fence grows with
 * each exclusive hold, and a second release of one record is refused.
 */
static void test_keyed_key_lengths(const keyed_api *api) {
    void *h = api->make();
    uint8_t key[40];
    if (!h) return;
    for (size_t i = 0; i < sizeof key; i++) key[i] = (uint8_t)('a' + i % 26);
    for (size_t len = 0; len <= sizeof key; len++) {
        acq_t x, y, s1, s2;
        OK(api->lock(h, key, len, &x));
        CHECK(x.mode == KEYLOCK_EXCLUSIVE && current(api, h, &x) && locked(api, h, key, len));
        CHECK_RESULT(api->try_lock(h, key, len, &y), KEYLOCK_WOULD_BLOCK);
        OK(api->release(h, &x));
        CHECK(!locked(api, h, key, len));
        CHECK_RESULT(api->release(h, &x), KEYLOCK_NOT_OWNER);

        OK(api->lock_shared(h, key, len, &s1));
        OK(api->lock_shared(h, key, len, &s2));
        CHECK(s1.mode == KEYLOCK_SHARED && s1.fence == x.fence && s2.fence == x.fence);
        CHECK(info_of(api, h, key, len).holders == 2);
        OK(api->release(h, &s2));
        CHECK(locked(api, h, key, len) && info_of(api, h, key, len).holders == 1);
        CHECK_RESULT(api->release(h, &s2), KEYLOCK_NOT_OWNER);
        OK(api->release(h, &s1));
        CHECK(!locked(api, h, key, len));

        OK(api->lock(h, key, len, &y));
        CHECK(y.fence > x.fence);
        OK(api->release(h, &y));
        CHECK(!locked(api, h, key, len));
    }
    api->destroy(h);
}

/* keylock_lock_options: every field, the timeout encoding, and bad values. */
static void test_keyed_options(const keyed_api *api) {
    void *h = api->make();
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    acq_t a, b;
    uint64_t ns = 0;
    if (!h) return;

    OK(api->lock_with(h, K("k"), NULL, &a)); /* NULL: the defaults */
    CHECK(a.mode == KEYLOCK_EXCLUSIVE);
    o.timeout_ns = KEYLOCK_NO_WAIT;
    CHECK_RESULT(api->lock_with(h, K("k"), &o, &b), KEYLOCK_WOULD_BLOCK);
    o.timeout_ns = MS(5);
    CHECK_RESULT(api->lock_with(h, K("k"), &o, &b), KEYLOCK_TIMEOUT);
    o.mode = KEYLOCK_SHARED;
    CHECK_RESULT(api->lock_with(h, K("k"), &o, &b), KEYLOCK_TIMEOUT);
    CHECK(is_empty(&b));
    OK(api->release(h, &a));

    /* an all-zero struct is a try (documented), in exclusive mode */
    memset(&o, 0, sizeof o);
    OK(api->lock_with(h, K("k"), &o, &a));
    CHECK_RESULT(api->lock_with(h, K("k"), &o, &b), KEYLOCK_WOULD_BLOCK);
    OK(api->release(h, &a));

    /* an owner in an object that is not reentrant changes nothing */
    o = (keylock_lock_options)KEYLOCK_LOCK_OPTIONS_INIT;
    o.owner = 7;
    OK(api->lock_with(h, K("k"), &o, &a));
    o.timeout_ns = KEYLOCK_NO_WAIT;
    CHECK_RESULT(api->lock_with(h, K("k"), &o, &b), KEYLOCK_WOULD_BLOCK);
    OK(api->release(h, &a));

    /* an unknown mode */
    o = (keylock_lock_options)KEYLOCK_LOCK_OPTIONS_INIT;
    o.mode = 2;
    b = garbage();
    CHECK_RESULT(api->lock_with(h, K("k"), &o, &b), KEYLOCK_INVALID_ARGUMENT);
    CHECK(is_empty(&b));
    CHECK(!locked(api, h, K("k")));

    /* a lease: reported, extended, released in time */
    o = (keylock_lock_options)KEYLOCK_LOCK_OPTIONS_INIT;
    o.lease_ns = MS(60000);
    OK(api->lock_with(h, K("k"), &o, &a));
    OK(keylock_acquisition_lease_remaining(&a, &ns));
    CHECK(ns > 0 && ns <= MS(60000));
    CHECK(info_of(api, h, K("k")).lease_remaining_ns <= MS(60000));
    OK(api->extend(h, &a, MS(120000)));
    OK(keylock_acquisition_lease_remaining(&a, &ns));
    CHECK(ns > MS(60000) && ns <= MS(120000));
    CHECK(info_of(api, h, K("k")).lease_remaining_ns > MS(60000));
    CHECK(current(api, h, &a));
    OK(api->release(h, &a));
    CHECK(!locked(api, h, K("k")));

    /* a shared lease */
    o.mode = KEYLOCK_SHARED;
    OK(api->lock_with(h, K("k"), &o, &a));
    OK(api->lock_with(h, K("k"), &o, &b));
    CHECK(info_of(api, h, K("k")).holders == 2);
    OK(api->extend(h, &b, MS(30000)));
    OK(api->release(h, &a));
    OK(api->release(h, &b));
    CHECK(!locked(api, h, K("k")));
    api->destroy(h);
}

/* A stale acquisition (force-unlocked) never releases the next holder. On main's by-key API the
 * same steps released the next holder (see the report in the C test's README section). */
static void test_keyed_stale_release(const keyed_api *api) {
    void *h = api->make();
    acq_t a1, a2, s1, s2, x;
    bool was = false;
    if (!h) return;

    OK(api->lock(h, K("row"), &a1));
    OK(api->force_unlock(h, K("row"), &was));
    CHECK(was);
    CHECK(!locked(api, h, K("row")));
    CHECK(!current(api, h, &a1));
    OK(api->lock(h, K("row"), &a2));
    CHECK(a2.fence > a1.fence);
    CHECK_RESULT(api->release(h, &a1), KEYLOCK_NOT_OWNER); /* stale: refused */
    CHECK(locked(api, h, K("row")));                      /* the next holder keeps it */
    CHECK(current(api, h, &a2));
    CHECK_RESULT(api->try_lock(h, K("row"), &x), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(api->release(h, &a1), KEYLOCK_NOT_OWNER); /* and again: still nothing */
    CHECK(locked(api, h, K("row")));
    OK(api->release(h, &a2));
    CHECK(!locked(api, h, K("row")));

    /* force-unlock of a free key; was_held may be NULL */
    OK(api->force_unlock(h, K("row"), &was));
    CHECK(!was);
    OK(api->force_unlock(h, K("row"), NULL));

    /* shared holders: force-unlocked together, neither releases the exclusive holder after */
    OK(api->lock_shared(h, K("row"), &s1));
    OK(api->lock_shared(h, K("row"), &s2));
    OK(api->force_unlock(h, K("row"), &was));
    CHECK(was);
    OK(api->lock(h, K("row"), &x));
    CHECK(x.fence > s1.fence);
    CHECK_RESULT(api->release(h, &s1), KEYLOCK_NOT_OWNER);
    CHECK_RESULT(api->release(h, &s2), KEYLOCK_NOT_OWNER);
    CHECK(locked(api, h, K("row")) && current(api, h, &x));
    CHECK(info_of(api, h, K("row")).mode == KEYLOCK_EXCLUSIVE);
    OK(api->release(h, &x));

    /* after the key's memory was recycled: the pool keeps few unused slots, so thousands of
     * other keys take over row's slot before it is locked again */
    OK(api->lock(h, K("row"), &a1));
    OK(api->force_unlock(h, K("row"), &was));
    for (int i = 0; i < 5000; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "churn:%d", i);
        OK(api->lock(h, (const uint8_t *)key, (size_t)len, &x));
        OK(api->release(h, &x));
    }
    OK(api->lock(h, K("row"), &a2));
    CHECK(a2.fence > a1.fence);
    CHECK_RESULT(api->release(h, &a1), KEYLOCK_NOT_OWNER);
    CHECK(locked(api, h, K("row")));
    OK(api->release(h, &a2));
    api->destroy(h);
}

/* Leases: a holder that never releases is replaced at its lease's end (a waiter's own wait takes
 * over; an idle expired key is simply free), and its release reports LEASE_EXPIRED. */
typedef struct {
    const keyed_api *api;
    void *h;
    acq_t acq;
    keylock_result result;
    uint64_t got_at;
} lease_waiter;

static void *lease_wait_thread(void *p) {
    lease_waiter *w = p;
    /* the bound: the lease plus two seconds, far more than a wake-up takes */
    w->result = w->api->lock_timeout(w->h, K("job"), MS(2100), &w->acq);
    w->got_at = now_ns();
    return NULL;
}

static void test_keyed_lease(const keyed_api *api) {
    void *h = api->make();
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    acq_t stale, next;
    lease_waiter w;
    pthread_t t;
    uint64_t ns = 1, start;
    if (!h) return;

    /* a waiter takes over when the lease ends, not before */
    o.lease_ns = MS(100);
    start = now_ns();
    OK(api->lock_with(h, K("job"), &o, &stale));
    memset(&w, 0, sizeof w);
    w.api = api;
    w.h = h;
    CHECK(pthread_create(&t, NULL, lease_wait_thread, &w) == 0);
    pthread_join(t, NULL);
    OK(w.result);
    CHECK(w.got_at - start >= MS(100));
    CHECK(w.acq.fence > stale.fence);
    CHECK(!current(api, h, &stale));
    OK(keylock_acquisition_lease_remaining(&stale, &ns));
    CHECK(ns == 0);
    CHECK_RESULT(api->extend(h, &stale, MS(100)), KEYLOCK_LEASE_EXPIRED);
    CHECK_RESULT(api->release(h, &stale), KEYLOCK_LEASE_EXPIRED);
    CHECK(locked(api, h, K("job")) && current(api, h, &w.acq)); /* the new holder keeps it */
    CHECK_RESULT(api->release(h, &stale), KEYLOCK_NOT_OWNER);    /* released: no second try */
    OK(api->release(h, &w.acq));

    /* an idle expired key is free at the next look */
    o.lease_ns = MS(20);
    OK(api->lock_with(h, K("job"), &o, &stale));
    sleep_ms(60);
    CHECK(!locked(api, h, K("job")));
    CHECK(!info_of(api, h, K("job")).held);
    OK(api->try_lock(h, K("job"), &next));
    CHECK(next.fence > stale.fence);
    CHECK_RESULT(api->release(h, &stale), KEYLOCK_LEASE_EXPIRED);
    CHECK(locked(api, h, K("job")));
    OK(api->release(h, &next));

    /* a shared lease ends too */
    o.mode = KEYLOCK_SHARED;
    OK(api->lock_with(h, K("job"), &o, &stale));
    sleep_ms(60);
    OK(api->try_lock(h, K("job"), &next));
    CHECK_RESULT(api->release(h, &stale), KEYLOCK_LEASE_EXPIRED);
    CHECK(current(api, h, &next));
    OK(api->release(h, &next));
    api->destroy(h);
}

/* Reentrancy: an owner's exclusive re-acquires raise a hold count, keep the fence, and stop at
 * the limit with REENTRANCY_LIMIT. */
static void test_keyed_reentrant(const keyed_api *api) {
    enum { LIMIT = 65536 };
    void *h = NULL;
    keylock_open_options oo;
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT, other = KEYLOCK_LOCK_OPTIONS_INIT;
    acq_t a1, a2, b, *all;
    keylock_lock_info info;
    memset(&oo, 0, sizeof oo);
    oo.reentrant = true;
    OK(api->open("local:", &oo, &h));
    if (!h) return;
    o.owner = 7;
    other.owner = 8;
    other.timeout_ns = KEYLOCK_NO_WAIT;

    OK(api->lock_with(h, K("r"), &o, &a1));
    OK(api->lock_with(h, K("r"), &o, &a2));
    CHECK(a1.fence == a2.fence);
    info = info_of(api, h, K("r"));
    CHECK(info.held && info.holds == 2 && info.owner == 7 && info.mode == KEYLOCK_EXCLUSIVE);
    CHECK_RESULT(api->lock_with(h, K("r"), &other, &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(api->try_lock(h, K("r"), &b), KEYLOCK_WOULD_BLOCK); /* no owner: not it */
    OK(api->release(h, &a2));
    CHECK(locked(api, h, K("r")) && info_of(api, h, K("r")).holds == 1);
    CHECK_RESULT(api->release(h, &a2), KEYLOCK_NOT_OWNER);
    CHECK(locked(api, h, K("r")));
    OK(api->release(h, &a1));
    CHECK(!locked(api, h, K("r")));

    /* the limit */
    all = calloc(LIMIT + 1, sizeof *all);
    CHECK(all != NULL);
    if (all) {
        int held = 0;
        for (; held < LIMIT; held++)
            if (api->lock_with(h, K("r"), &o, &all[held]) != KEYLOCK_OK) break;
        CHECK(held == LIMIT);
        CHECK(info_of(api, h, K("r")).holds == LIMIT);
        all[LIMIT] = garbage();
        CHECK_RESULT(api->lock_with(h, K("r"), &o, &all[LIMIT]), KEYLOCK_REENTRANCY_LIMIT);
        CHECK(is_empty(&all[LIMIT]));
        CHECK(all[0].fence == all[held - 1].fence);
        OK(api->release_many(h, all, (size_t)held));
        CHECK(!locked(api, h, K("r")));
        free(all);
    }
    api->destroy(h);
}

/* lock_many: modes per key, duplicates, all or nothing, and release_many. */
static void test_keyed_many(const keyed_api *api) {
    void *h = api->make();
    const uint8_t *keys[3] = {(const uint8_t *)"from", (const uint8_t *)"to",
                              (const uint8_t *)"from"};
    size_t lens[3] = {4, 2, 4}, count = 99, distinct;
    keylock_mode modes[3] = {KEYLOCK_SHARED, KEYLOCK_EXCLUSIVE, KEYLOCK_SHARED};
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    acq_t acqs[3], x;
    if (!h) return;

    /* the number of distinct locks: 2 in a pool; for stripes, 1 if the two share a stripe */
    OK(api->lock(h, K("from"), &x));
    distinct = locked(api, h, K("to")) ? 1 : 2;
    OK(api->release(h, &x));
    CHECK(!api->exact || distinct == 2);

    OK(api->lock_many(h, keys, lens, 3, acqs, &count));
    CHECK(count == distinct);
    for (size_t i = 0; i < count; i++) {
        CHECK(keylock_acquisition_is_held(&acqs[i]));
        CHECK(acqs[i].mode == KEYLOCK_EXCLUSIVE);
    }
    for (size_t i = count; i < 3; i++) CHECK(is_empty(&acqs[i]));
    CHECK(locked(api, h, K("from")) && locked(api, h, K("to")));
    CHECK_RESULT(api->try_lock_shared(h, K("to"), &x), KEYLOCK_WOULD_BLOCK);
    OK(api->release_many(h, acqs, count));
    CHECK(!locked(api, h, K("from")) && !locked(api, h, K("to")));
    CHECK_RESULT(api->release_many(h, acqs, count), KEYLOCK_NOT_OWNER);

    /* the records come in the order of the keys' first occurrence: record 1 is "to"'s */
    OK(api->lock_many(h, keys, lens, 3, acqs, &count));
    if (distinct == 2) {
        OK(api->release(h, &acqs[1]));
        CHECK(!locked(api, h, K("to")) && locked(api, h, K("from")));
        CHECK(info_of(api, h, K("from")).fence == acqs[0].fence);
        OK(api->release(h, &acqs[0]));
    } else {
        OK(api->release_many(h, acqs, count));
    }
    {
        const uint8_t *reversed[2] = {(const uint8_t *)"to", (const uint8_t *)"from"};
        size_t rlens[2] = {2, 4};
        OK(api->lock_many(h, reversed, rlens, 2, acqs, &count));
        if (distinct == 2) {
            OK(api->release(h, &acqs[0]));
            CHECK(!locked(api, h, K("to")) && locked(api, h, K("from")));
        }
        OK(api->release_many(h, acqs + (distinct == 2), count - (distinct == 2)));
    }
    CHECK(!locked(api, h, K("from")) && !locked(api, h, K("to")));

    /* a mode per key: "from" shared (listed twice, shared both times), "to" exclusive */
    OK(api->lock_many_with(h, keys, lens, modes, 3, NULL, acqs, &count));
    CHECK(count == distinct);
    if (distinct == 2) {
        OK(api->try_lock_shared(h, K("from"), &x)); /* shared: another reader gets in */
        OK(api->release(h, &x));
        CHECK_RESULT(api->try_lock_shared(h, K("to"), &x), KEYLOCK_WOULD_BLOCK);
    }
    OK(api->release_many(h, acqs, count));

    /* one key in both modes is held exclusively */
    modes[2] = KEYLOCK_EXCLUSIVE;
    OK(api->lock_many_with(h, keys, lens, modes, 3, NULL, acqs, &count));
    CHECK_RESULT(api->try_lock_shared(h, K("from"), &x), KEYLOCK_WOULD_BLOCK);
    OK(api->release_many(h, acqs, count));

    /* modes NULL: every key in options->mode */
    o.mode = KEYLOCK_SHARED;
    OK(api->lock_many_with(h, keys, lens, NULL, 3, &o, acqs, &count));
    for (size_t i = 0; i < count; i++) CHECK(acqs[i].mode == KEYLOCK_SHARED);
    OK(api->try_lock_shared(h, K("to"), &x));
    OK(api->release(h, &x));
    OK(api->release_many(h, acqs, count));

    /* all or nothing: with "to" held, a try takes neither key */
    OK(api->lock(h, K("to"), &x));
    o = (keylock_lock_options)KEYLOCK_LOCK_OPTIONS_INIT;
    o.timeout_ns = KEYLOCK_NO_WAIT;
    count = 99;
    acqs[0] = garbage();
    CHECK_RESULT(api->lock_many_with(h, keys, lens, NULL, 3, &o, acqs, &count),
                 KEYLOCK_WOULD_BLOCK);
    CHECK(count == 0);
    for (int i = 0; i < 3; i++) CHECK(is_empty(&acqs[i]));
    if (distinct == 2) CHECK(!locked(api, h, K("from")));
    o.timeout_ns = MS(10);
    CHECK_RESULT(api->lock_many_with(h, keys, lens, NULL, 3, &o, acqs, &count), KEYLOCK_TIMEOUT);
    CHECK(count == 0);
    if (distinct == 2) CHECK(!locked(api, h, K("from")));
    OK(api->release(h, &x));

    /* release_many goes on past a failure and reports the first */
    OK(api->lock_many(h, keys, lens, 2, acqs, &count));
    acqs[count] = (acq_t)KEYLOCK_ACQUISITION_INIT;
    OK(api->force_unlock(h, K("from"), NULL));
    /* "from" is stale, "to" current, the last record empty: the first failure is the stale
     * one (the empty record comes last), and "to" is released all the same */
    CHECK_RESULT(api->release_many(h, acqs, count + 1), KEYLOCK_NOT_OWNER);
    CHECK(!locked(api, h, K("from")) && !locked(api, h, K("to")));

    /* bad input */
    CHECK_RESULT(api->lock_many(h, keys, lens, 0, acqs, &count), KEYLOCK_INVALID_ARGUMENT);
    CHECK(count == 0);
    CHECK_RESULT(api->release_many(h, acqs, 0), KEYLOCK_INVALID_ARGUMENT);
    modes[1] = 9;
    CHECK_RESULT(api->lock_many_with(h, keys, lens, modes, 3, NULL, acqs, &count),
                 KEYLOCK_INVALID_ARGUMENT);
    o.mode = 5;
    CHECK_RESULT(api->lock_many_with(h, keys, lens, NULL, 3, &o, acqs, &count),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK(!locked(api, h, K("from")) && !locked(api, h, K("to")));
    api->destroy(h);
}

/* Every bad input, on every function that takes it. */
static void test_keyed_bad_input(const keyed_api *api) {
    void *h = api->make();
    bool out = true;
    const uint8_t *keys[2] = {(const uint8_t *)"a", (const uint8_t *)"b"};
    const uint8_t *null_key[2] = {(const uint8_t *)"a", NULL};
    size_t lens[2] = {1, 1}, count = 5;
    keylock_mode modes[2] = {KEYLOCK_EXCLUSIVE, KEYLOCK_SHARED};
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    keylock_lock_info info;
    acq_t a, acqs[2];
    if (!h) return;
    OK(api->lock(h, K("held"), &a));
    /* For the striped lock, "a" or "b" may share "held"'s stripe (the seed is random): then
     * it is locked already, and the check at the end can only hold for the other one. */
    bool a_before = locked(api, h, K("a")), b_before = locked(api, h, K("b"));

    /* NULL handle */
    CHECK_RESULT(api->lock(NULL, K("a"), acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->try_lock(NULL, K("a"), acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_timeout(NULL, K("a"), 5, acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_shared(NULL, K("a"), acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->try_lock_shared(NULL, K("a"), acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_shared_timeout(NULL, K("a"), 5, acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_with(NULL, K("a"), &o, acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK(is_empty(&acqs[0]));
    CHECK_RESULT(api->lock_many(NULL, keys, lens, 2, acqs, &count), KEYLOCK_NULL_ARGUMENT);
    CHECK(count == 0);
    CHECK_RESULT(api->lock_many_with(NULL, keys, lens, modes, 2, &o, acqs, &count),
                 KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->release(NULL, &a), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->release_many(NULL, &a, 1), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->extend(NULL, &a, 5), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->is_current(NULL, &a, &out), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->force_unlock(NULL, K("a"), &out), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->is_locked(NULL, K("a"), &out), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->info(NULL, K("a"), &info), KEYLOCK_NULL_ARGUMENT);

    /* NULL output pointers */
    CHECK_RESULT(api->lock(h, K("a"), NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->try_lock(h, K("a"), NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_timeout(h, K("a"), 5, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_shared(h, K("a"), NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->try_lock_shared(h, K("a"), NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_shared_timeout(h, K("a"), 5, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_with(h, K("a"), &o, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, keys, lens, 2, NULL, &count), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, keys, lens, 2, acqs, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->release(h, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->release_many(h, NULL, 1), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->extend(h, NULL, 5), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->is_current(h, NULL, &out), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->is_current(h, &a, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->is_locked(h, K("a"), NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->info(h, K("a"), NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK(a_before || !locked(api, h, K("a")));

    /* NULL key with len > 0 */
    CHECK_RESULT(api->lock(h, NULL, 1, acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->try_lock(h, NULL, 1, acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_timeout(h, NULL, 1, 5, acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_shared(h, NULL, 1, acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_with(h, NULL, 1, &o, acqs), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->force_unlock(h, NULL, 1, &out), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->is_locked(h, NULL, 1, &out), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->info(h, NULL, 1, &info), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, null_key, lens, 2, acqs, &count), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, NULL, lens, 2, acqs, &count), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, keys, NULL, 2, acqs, &count), KEYLOCK_NULL_ARGUMENT);

    /* lengths over PTRDIFF_MAX */
    CHECK_RESULT(api->lock(h, (const uint8_t *)"a", SIZE_MAX, acqs), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->try_lock(h, (const uint8_t *)"a", SIZE_MAX, acqs),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->force_unlock(h, (const uint8_t *)"a", SIZE_MAX, &out),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->is_locked(h, (const uint8_t *)"a", SIZE_MAX, &out),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->info(h, (const uint8_t *)"a", SIZE_MAX, &info), KEYLOCK_INVALID_ARGUMENT);
    lens[1] = SIZE_MAX;
    CHECK_RESULT(api->lock_many(h, keys, lens, 2, acqs, &count), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, keys, lens, SIZE_MAX, acqs, &count),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->release_many(h, acqs, SIZE_MAX), KEYLOCK_INVALID_ARGUMENT);

    /* nothing above took a lock, or released the one held */
    CHECK((a_before || !locked(api, h, K("a"))) && (b_before || !locked(api, h, K("b"))));
    CHECK(locked(api, h, K("held")) && current(api, h, &a));
    OK(api->release(h, &a));
    api->destroy(h);
}

/* A key locked by one thread and released by another, and a waiter woken by that release. */
typedef struct {
    const keyed_api *api;
    void *h;
    acq_t *acq;
    keylock_result result;
} cross_arg;

static void *cross_release(void *p) {
    cross_arg *c = p;
    c->result = c->api->release(c->h, c->acq);
    return NULL;
}

static void *cross_wait(void *p) {
    cross_arg *c = p;
    c->result = c->api->lock(c->h, K("x"), c->acq);
    return NULL;
}

static void test_keyed_cross_thread(const keyed_api *api) {
    void *h = api->make();
    acq_t a, b;
    cross_arg c;
    pthread_t t;
    if (!h) return;
    OK(api->lock(h, K("x"), &a));
    c.api = api;
    c.h = h;
    c.acq = &a;
    CHECK(pthread_create(&t, NULL, cross_release, &c) == 0);
    pthread_join(t, NULL);
    OK(c.result);
    CHECK(!locked(api, h, K("x")));

    OK(api->lock(h, K("x"), &a));
    c.acq = &b;
    c.result = KEYLOCK_PANIC;
    CHECK(pthread_create(&t, NULL, cross_wait, &c) == 0);
    sleep_ms(30); /* the waiter is queued (or about to be) */
    OK(api->release(h, &a));
    pthread_join(t, NULL);
    OK(c.result);
    CHECK(b.fence > a.fence);
    OK(api->release(h, &b));
    api->destroy(h);
}

/* FIFO per key, in a strict-FIFO object: a shared request behind a waiting exclusive one waits
 * (no writer starvation), and a waiting shared request is served before an exclusive one that
 * came after it (no reader starvation). Each step waits until info() shows the waiter queued. */
typedef struct {
    const keyed_api *api;
    void *h;
    keylock_mode mode;
    acq_t acq;
    keylock_result result;
    int done; /* atomic */
} queued;

static void *queued_thread(void *p) {
    queued *q = p;
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    o.mode = q->mode;
    o.timeout_ns = MS(10000);
    q->result = q->api->lock_with(q->h, K("q"), &o, &q->acq);
    __atomic_store_n(&q->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static bool wait_for_waiters(const keyed_api *api, void *h, size_t n) {
    for (int i = 0; i < 10000; i++) {
        if (info_of(api, h, K("q")).waiters >= n) return true;
        sleep_ms(1);
    }
    return false;
}

static void test_keyed_fifo(const keyed_api *api) {
    void *h = NULL;
    keylock_open_options oo;
    acq_t first, probe;
    queued w, r;
    pthread_t tw, tr;
    memset(&oo, 0, sizeof oo);
    oo.fifo = true;
    OK(api->open("local:", &oo, &h));
    if (!h) return;

    /* readers in; a writer queues; a new reader must not pass it */
    OK(api->lock_shared(h, K("q"), &first));
    memset(&w, 0, sizeof w);
    w.api = api;
    w.h = h;
    w.mode = KEYLOCK_EXCLUSIVE;
    CHECK(pthread_create(&tw, NULL, queued_thread, &w) == 0);
    CHECK(wait_for_waiters(api, h, 1));
    CHECK_RESULT(api->try_lock_shared(h, K("q"), &probe), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(api->lock_shared_timeout(h, K("q"), MS(5), &probe), KEYLOCK_TIMEOUT);
    OK(api->release(h, &first));
    pthread_join(tw, NULL);
    OK(w.result);
    CHECK(w.acq.fence > first.fence);

    /* the writer holds; a reader queues, then a writer: the reader is served first */
    memset(&r, 0, sizeof r);
    r.api = api;
    r.h = h;
    r.mode = KEYLOCK_SHARED;
    CHECK(pthread_create(&tr, NULL, queued_thread, &r) == 0);
    CHECK(wait_for_waiters(api, h, 1));
    {
        queued w2;
        memset(&w2, 0, sizeof w2);
        w2.api = api;
        w2.h = h;
        w2.mode = KEYLOCK_EXCLUSIVE;
        CHECK(pthread_create(&tw, NULL, queued_thread, &w2) == 0);
        CHECK(wait_for_waiters(api, h, 2));
        OK(api->release(h, &w.acq));
        pthread_join(tr, NULL);
        OK(r.result);
        CHECK(r.acq.mode == KEYLOCK_SHARED);
        CHECK(!__atomic_load_n(&w2.done, __ATOMIC_SEQ_CST)); /* still behind the reader */
        CHECK(info_of(api, h, K("q")).mode == KEYLOCK_SHARED);
        OK(api->release(h, &r.acq));
        pthread_join(tw, NULL);
        OK(w2.result);
        CHECK(w2.acq.fence > w.acq.fence);
        OK(api->release(h, &w2.acq));
    }
    CHECK(!locked(api, h, K("q")));
    api->destroy(h);
}

/* ---- concurrency: exact counts, holders inside at once, oversubscribed --------------------- */

enum { THREADS = 8, ITERS = 20000, NKEYS = 4 };

static const char *const STRESS_KEYS[NKEYS] = {"s0", "s1", "s2", "s3"};

/*
 * Who is inside a critical section, counted as it happens (GCC/Clang atomic builtins, which
 * ThreadSanitizer understands). An entry counts the exclusive holders inside at that moment and
 * the shared ones beside them; `overlaps` counts every entry that found someone the lock should
 * have kept out. Nothing interrupts a C critical section here, so every entry must complete.
 */
typedef struct {
    long exclusive; /* exclusive holders inside now */
    long shared;    /* shared holders inside now */
    long max_exclusive;
    long max_shared;
    long overlaps;
    long entered;
    long completed;
} occupancy;

static void atomic_max(long *at, long n) {
    long max = __atomic_load_n(at, __ATOMIC_SEQ_CST);
    while (n > max &&
           !__atomic_compare_exchange_n(at, &max, n, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
}

/* Counts an overlap, and reports the first one at once: a broken lock may hang later. */
static void occ_overlap(occupancy *o, const char *what) {
    if (__atomic_add_fetch(&o->overlaps, 1, __ATOMIC_SEQ_CST) == 1)
        fprintf(stderr, "  overlap: %s\n", what);
}

static long occ_enter(occupancy *o, bool shared) {
    long n;
    __atomic_add_fetch(&o->entered, 1, __ATOMIC_SEQ_CST);
    if (shared) {
        n = __atomic_add_fetch(&o->shared, 1, __ATOMIC_SEQ_CST);
        atomic_max(&o->max_shared, n);
        if (__atomic_load_n(&o->exclusive, __ATOMIC_SEQ_CST) != 0)
            occ_overlap(o, "a reader inside with a writer");
        return n;
    }
    n = __atomic_add_fetch(&o->exclusive, 1, __ATOMIC_SEQ_CST);
    atomic_max(&o->max_exclusive, n);
    if (n > 1) occ_overlap(o, "two exclusive holders inside at once");
    else if (__atomic_load_n(&o->shared, __ATOMIC_SEQ_CST) != 0)
        occ_overlap(o, "a writer inside with readers");
    return n;
}

static void occ_leave(occupancy *o, bool shared) {
    __atomic_sub_fetch(shared ? &o->shared : &o->exclusive, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&o->completed, 1, __ATOMIC_SEQ_CST);
}

/* One exclusive holder at a time and none beside shared ones, every entry completed, nobody
 * inside now. */
static void check_occupancy(const char *what, const occupancy *o) {
    if (o->overlaps != 0 || o->max_exclusive > 1)
        fprintf(stderr, "  %s: %ld entries found another holder inside; at most %ld at once\n",
                what, o->overlaps, o->max_exclusive);
    CHECK(o->overlaps == 0);
    CHECK(o->max_exclusive <= 1);
    CHECK(o->entered > 0);
    CHECK(o->completed == o->entered);
    CHECK(o->exclusive == 0 && o->shared == 0);
}

/* N shared holders are inside at once: each waits inside until all N are (or 10 s pass). */
typedef struct {
    const keyed_api *api;
    void *h;
    occupancy inside;
    int arrived; /* atomic */
    keylock_result error;
} overlap;

enum { OVERLAP = 6 };

static void *overlap_thread(void *p) {
    overlap *s = p;
    acq_t a;
    uint64_t deadline = now_ns() + MS(10000);
    keylock_result r = s->api->lock_shared(s->h, K("doc"), &a);
    if (r != KEYLOCK_OK) {
        s->error = r;
        return NULL;
    }
    occ_enter(&s->inside, true);
    __atomic_add_fetch(&s->arrived, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&s->arrived, __ATOMIC_SEQ_CST) < OVERLAP && now_ns() < deadline)
        sched_yield();
    occ_leave(&s->inside, true);
    r = s->api->release(s->h, &a);
    if (r != KEYLOCK_OK) s->error = r;
    return NULL;
}

static void test_keyed_shared_overlap(const keyed_api *api) {
    overlap s;
    pthread_t threads[OVERLAP];
    memset(&s, 0, sizeof s);
    s.api = api;
    s.h = api->make();
    if (!s.h) return;
    for (int t = 0; t < OVERLAP; t++)
        CHECK(pthread_create(&threads[t], NULL, overlap_thread, &s) == 0);
    for (int t = 0; t < OVERLAP; t++) pthread_join(threads[t], NULL);
    OK(s.error);
    CHECK(s.inside.max_shared == OVERLAP); /* all of them inside together */
    check_occupancy("shared overlap", &s.inside);
    CHECK(!locked(api, s.h, K("doc")));
    api->destroy(s.h);
}

/*
 * Mixed modes, oversubscribed (8 threads on however many cores), with tries and timeouts that
 * expire mid-wait and two-key lock_many: exclusive holders never overlap anything, every
 * exclusive success is counted exactly once on a plain counter the lock alone protects, and the
 * fences each key's exclusive holders see strictly increase.
 */
typedef struct {
    const keyed_api *api;
    void *h;
    long counter[NKEYS];     /* plain: the per-key lock alone protects each */
    uint64_t fence[NKEYS];   /* the last exclusive fence seen per key, likewise */
    long fence_regressions;  /* atomic */
    long exclusive_ok[THREADS][NKEYS];
    long failures[THREADS];  /* WOULD_BLOCK / TIMEOUT, expected */
    occupancy inside[NKEYS];
    keylock_result error;
} mixed;

typedef struct {
    mixed *s;
    int thread;
} mixed_arg;

/* Enters key k in `mode`; an exclusive single-key holder also checks its fence (`a`). */
static void mixed_enter(mixed *s, int k, keylock_mode mode, const acq_t *a, int thread) {
    bool shared = mode == KEYLOCK_SHARED;
    occ_enter(&s->inside[k], shared);
    if (shared) return;
    if (a) {
        if (a->fence <= s->fence[k]) __atomic_add_fetch(&s->fence_regressions, 1, __ATOMIC_SEQ_CST);
        s->fence[k] = a->fence;
    }
    s->counter[k]++;
    s->exclusive_ok[thread][k]++;
}

static void *mixed_thread(void *p) {
    mixed_arg *arg = p;
    mixed *s = arg->s;
    const keyed_api *api = s->api;
    uint32_t rng = 0x9e3779b9u * (uint32_t)(arg->thread + 1);
    for (int i = 0; i < ITERS; i++) {
        uint32_t x = next_random(&rng);
        int k = (int)(x % NKEYS);
        const uint8_t *key = (const uint8_t *)STRESS_KEYS[k];
        keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
        keylock_result r;
        acq_t a;
        o.mode = (x >> 8) % 3 == 0 ? KEYLOCK_EXCLUSIVE : KEYLOCK_SHARED;
        switch ((x >> 12) % 5) {
        case 0: /* blocking */
            r = api->lock_with(s->h, key, 2, &o, &a);
            break;
        case 1: /* try */
            o.timeout_ns = KEYLOCK_NO_WAIT;
            r = api->lock_with(s->h, key, 2, &o, &a);
            break;
        case 2: /* timeouts that expire mid-wait */
            o.timeout_ns = (x >> 16) % 200000 + 1;
            r = api->lock_with(s->h, key, 2, &o, &a);
            break;
        case 3: { /* two keys at once, a mode each, blocking or timed */
            int k2 = (k + 1 + (int)((x >> 16) % (NKEYS - 1))) % NKEYS;
            const uint8_t *keys[2] = {key, (const uint8_t *)STRESS_KEYS[k2]};
            size_t lens[2] = {2, 2}, count = 0;
            keylock_mode modes[2] = {o.mode, (x >> 20) & 1 ? KEYLOCK_SHARED : KEYLOCK_EXCLUSIVE};
            acq_t acqs[2];
            o.timeout_ns = (x >> 22) & 1 ? KEYLOCK_WAIT_FOREVER : 100000;
            r = api->lock_many_with(s->h, keys, lens, modes, 2, &o, acqs, &count);
            if (r == KEYLOCK_TIMEOUT) {
                s->failures[arg->thread]++;
                continue;
            }
            if (r != KEYLOCK_OK) {
                s->error = r;
                return NULL;
            }
            /* Each key is held (at least) in the mode asked for it (two keys of one stripe in
             * the stronger): enter each key as asked. */
            mixed_enter(s, k, modes[0], NULL, arg->thread);
            mixed_enter(s, k2, modes[1], NULL, arg->thread);
            if ((x >> 26) % 4 == 0) sched_yield(); /* stay inside a while: others pile up */
            occ_leave(&s->inside[k2], modes[1] == KEYLOCK_SHARED);
            occ_leave(&s->inside[k], modes[0] == KEYLOCK_SHARED);
            r = api->release_many(s->h, acqs, count);
            if (r != KEYLOCK_OK) s->error = r;
            continue;
        }
        default: /* the shorthand forms */
            r = o.mode == KEYLOCK_SHARED ? api->lock_shared(s->h, key, 2, &a)
                                         : api->lock(s->h, key, 2, &a);
            break;
        }
        if (r == KEYLOCK_WOULD_BLOCK || r == KEYLOCK_TIMEOUT) {
            s->failures[arg->thread]++;
            continue;
        }
        if (r != KEYLOCK_OK) {
            s->error = r;
            return NULL;
        }
        if (a.mode != o.mode) s->error = KEYLOCK_PANIC; /* the mode asked for */
        mixed_enter(s, k, a.mode, &a, arg->thread);
        if ((x >> 26) % 4 == 0) sched_yield();
        occ_leave(&s->inside[k], a.mode == KEYLOCK_SHARED);
        r = api->release(s->h, &a);
        if (r != KEYLOCK_OK) s->error = r;
    }
    return NULL;
}

static void test_keyed_mixed_stress(const keyed_api *api) {
    mixed *s = calloc(1, sizeof *s);
    mixed_arg args[THREADS];
    pthread_t threads[THREADS];
    if (!s) return;
    s->api = api;
    s->h = api->make();
    s->error = KEYLOCK_OK;
    if (!s->h) {
        free(s);
        return;
    }
    for (int t = 0; t < THREADS; t++) {
        args[t].s = s;
        args[t].thread = t;
        CHECK(pthread_create(&threads[t], NULL, mixed_thread, &args[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    OK(s->error);
    CHECK(s->fence_regressions == 0);
    for (int k = 0; k < NKEYS; k++) {
        long expected = 0;
        for (int t = 0; t < THREADS; t++) expected += s->exclusive_ok[t][k];
        CHECK(s->counter[k] == expected);
        check_occupancy(STRESS_KEYS[k], &s->inside[k]);
        CHECK(!locked(api, s->h, (const uint8_t *)STRESS_KEYS[k], 2));
    }
    api->destroy(s->h);
    free(s);
}

/*
 * Fences strictly increase across 8 threads contending on 8 keys, with the pool's slots
 * recycled in between: each thread, between its acquisitions, locks and releases a stream of
 * fresh keys, so that a hot key left idle is taken over by others and gets a new slot.
 */
enum { FENCE_KEYS = 8, FENCE_ITERS = 4000 };

typedef struct {
    const keyed_api *api;
    void *h;
    uint64_t last[FENCE_KEYS]; /* under each key's lock */
    long regressions;          /* atomic */
    long acquired[FENCE_KEYS]; /* under each key's lock */
    occupancy inside[FENCE_KEYS];
    keylock_result error;
} fences;

typedef struct {
    fences *s;
    int thread;
} fences_arg;

static void *fences_thread(void *p) {
    fences_arg *arg = p;
    fences *s = arg->s;
    for (int i = 0; i < FENCE_ITERS; i++) {
        int k = (arg->thread * 3 + i) % FENCE_KEYS;
        char key[16], churn[32];
        int len = snprintf(key, sizeof key, "hot:%d", k);
        acq_t a, c;
        keylock_result r = i % 2 ? s->api->lock(s->h, (const uint8_t *)key, (size_t)len, &a)
                                 : s->api->lock_timeout(s->h, (const uint8_t *)key, (size_t)len,
                                                        KEYLOCK_WAIT_FOREVER, &a);
        if (r != KEYLOCK_OK) {
            s->error = r;
            return NULL;
        }
        occ_enter(&s->inside[k], false);
        if (a.fence <= s->last[k]) __atomic_add_fetch(&s->regressions, 1, __ATOMIC_SEQ_CST);
        s->last[k] = a.fence;
        s->acquired[k]++;
        occ_leave(&s->inside[k], false);
        r = s->api->release(s->h, &a);
        if (r != KEYLOCK_OK) s->error = r;
        for (int j = 0; j < 8; j++) { /* recycle: fresh keys take over idle slots */
            int n = snprintf(churn, sizeof churn, "churn:%d:%d:%d", arg->thread, i, j);
            r = s->api->lock(s->h, (const uint8_t *)churn, (size_t)n, &c);
            if (r == KEYLOCK_OK) r = s->api->release(s->h, &c);
            if (r != KEYLOCK_OK) s->error = r;
        }
    }
    return NULL;
}

static void test_keyed_fences(const keyed_api *api) {
    fences *s = calloc(1, sizeof *s);
    fences_arg args[THREADS];
    pthread_t threads[THREADS];
    long total = 0;
    if (!s) return;
    s->api = api;
    s->h = api->make();
    if (!s->h) {
        free(s);
        return;
    }
    for (int t = 0; t < THREADS; t++) {
        args[t].s = s;
        args[t].thread = t;
        CHECK(pthread_create(&threads[t], NULL, fences_thread, &args[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    OK(s->error);
    CHECK(s->regressions == 0);
    for (int k = 0; k < FENCE_KEYS; k++) {
        total += s->acquired[k];
        check_occupancy("fences", &s->inside[k]);
    }
    CHECK(total == (long)THREADS * FENCE_ITERS);
    api->destroy(s->h);
    free(s);
}

/*
 * Stale releases under contention: workers hold keys (some with short leases) while a reaper
 * force-unlocks them. Each holder writes to a fenced "store" that accepts only a fence newer
 * than the last it took. A holder whose write was refused had been replaced, so its release must
 * be refused too (NOT_OWNER / LEASE_EXPIRED): a stale release that freed the next holder would
 * show up as an accepted release after a refused write, or as a key held at the end.
 */
typedef struct {
    const keyed_api *api;
    void *h;
    pthread_mutex_t store_mutex;
    uint64_t store_fence[NKEYS];
    long writes, refused_writes, ok_releases, stale_releases, bad; /* under store_mutex */
    int stop;                                                      /* atomic */
    keylock_result error;
} reaped;

static void *reaped_worker(void *p) {
    reaped *s = p;
    uint32_t rng = (uint32_t)(uintptr_t)&rng | 1u;
    for (int i = 0; i < ITERS / 4; i++) {
        uint32_t x = next_random(&rng);
        int k = (int)(x % NKEYS);
        keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
        acq_t a;
        bool refused;
        keylock_result r;
        o.lease_ns = (x >> 8) % 4 == 0 ? 50000 : 0; /* a quarter with a 50 us lease */
        o.timeout_ns = MS(10000);
        r = s->api->lock_with(s->h, (const uint8_t *)STRESS_KEYS[k], 2, &o, &a);
        if (r != KEYLOCK_OK) {
            s->error = r;
            return NULL;
        }
        if ((x >> 12) % 8 == 0) sched_yield(); /* give the reaper and leases a chance */
        pthread_mutex_lock(&s->store_mutex);
        refused = a.fence <= s->store_fence[k];
        if (refused) s->refused_writes++;
        else {
            s->store_fence[k] = a.fence;
            s->writes++;
        }
        pthread_mutex_unlock(&s->store_mutex);
        r = s->api->release(s->h, &a);
        pthread_mutex_lock(&s->store_mutex);
        if (r == KEYLOCK_OK) s->ok_releases++;
        else if (r == KEYLOCK_NOT_OWNER || r == KEYLOCK_LEASE_EXPIRED) s->stale_releases++;
        else s->error = r;
        if (refused && r == KEYLOCK_OK) s->bad++;
        pthread_mutex_unlock(&s->store_mutex);
    }
    return NULL;
}

static void *reaper(void *p) {
    reaped *s = p;
    int k = 0;
    while (!__atomic_load_n(&s->stop, __ATOMIC_SEQ_CST)) {
        bool was = false;
        keylock_result r = s->api->force_unlock(s->h, (const uint8_t *)STRESS_KEYS[k], 2, &was);
        if (r != KEYLOCK_OK) s->error = r;
        (void)was;
        k = (k + 1) % NKEYS;
        sched_yield();
    }
    return NULL;
}

static void test_keyed_reaped_stress(const keyed_api *api) {
    enum { WORKERS = THREADS - 1 };
    reaped s;
    pthread_t workers[WORKERS], reaper_thread;
    memset(&s, 0, sizeof s);
    s.api = api;
    s.h = api->make();
    s.error = KEYLOCK_OK;
    pthread_mutex_init(&s.store_mutex, NULL);
    if (!s.h) return;
    CHECK(pthread_create(&reaper_thread, NULL, reaper, &s) == 0);
    for (int t = 0; t < WORKERS; t++)
        CHECK(pthread_create(&workers[t], NULL, reaped_worker, &s) == 0);
    for (int t = 0; t < WORKERS; t++) pthread_join(workers[t], NULL);
    __atomic_store_n(&s.stop, 1, __ATOMIC_SEQ_CST);
    pthread_join(reaper_thread, NULL);
    OK(s.error);
    CHECK(s.bad == 0);
    CHECK(s.writes + s.refused_writes == (long)WORKERS * (ITERS / 4));
    CHECK(s.ok_releases + s.stale_releases == (long)WORKERS * (ITERS / 4));
    CHECK(s.refused_writes <= s.stale_releases);
    for (int k = 0; k < NKEYS; k++) CHECK(!locked(api, s.h, (const uint8_t *)STRESS_KEYS[k], 2));
    pthread_mutex_destroy(&s.store_mutex);
    api->destroy(s.h);
}

/* ---- the RwLock --------------------------------------------------------------------------- */

static void test_rwlock(void) {
    keylock_rwlock *rw = keylock_rwlock_new(), *other = keylock_rwlock_new();
    keylock_pool *pool = keylock_pool_new();
    acq_t r1, r2, r3, w, w2, b, junk = garbage(), empty = KEYLOCK_ACQUISITION_INIT;
    uint64_t ns = 0;
    CHECK(rw != NULL && other != NULL && pool != NULL);
    if (!rw || !other || !pool) return;

    /* NULL arguments */
    CHECK_RESULT(keylock_rwlock_read_lock(NULL, &b), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_try_read_lock(NULL, &b), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_read_lock_timeout(NULL, 5, &b), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_write_lock(NULL, &b), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_try_write_lock(NULL, &b), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(NULL, 5, &b), KEYLOCK_NULL_ARGUMENT);
    CHECK(is_empty(&b));
    CHECK_RESULT(keylock_rwlock_read_lock(rw, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_try_read_lock(rw, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_read_lock_timeout(rw, 5, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_write_lock(rw, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_try_write_lock(rw, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(rw, 5, NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_release(NULL, &empty), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_release(rw, NULL), KEYLOCK_NULL_ARGUMENT);

    /* readers share */
    OK(keylock_rwlock_read_lock(rw, &r1));
    OK(keylock_rwlock_try_read_lock(rw, &r2));
    OK(keylock_rwlock_read_lock_timeout(rw, KEYLOCK_NO_WAIT, &r3));
    CHECK(r1.mode == KEYLOCK_SHARED && r1.fence == 0 && keylock_acquisition_is_held(&r1));
    OK(keylock_acquisition_lease_remaining(&r1, &ns));
    CHECK(ns == KEYLOCK_NO_LEASE);
    CHECK_RESULT(keylock_rwlock_try_write_lock(rw, &b), KEYLOCK_WOULD_BLOCK);
    CHECK(is_empty(&b));
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(rw, KEYLOCK_NO_WAIT, &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(rw, MS(20), &b), KEYLOCK_TIMEOUT);
    CHECK(is_empty(&b));
    CHECK_RESULT(keylock_rwlock_release(rw, &b), KEYLOCK_NOT_LOCKED);
    /* records belong to their lock: another rwlock, or a pool, refuses them */
    CHECK_RESULT(keylock_rwlock_release(other, &r1), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(keylock_pool_release(pool, &r1), KEYLOCK_INVALID_ARGUMENT);
    CHECK(keylock_acquisition_is_held(&r1));
    OK(keylock_rwlock_release(rw, &r1));
    OK(keylock_rwlock_release(rw, &r2));
    CHECK_RESULT(keylock_rwlock_release(rw, &r2), KEYLOCK_NOT_OWNER);
    CHECK_RESULT(keylock_rwlock_try_write_lock(rw, &b), KEYLOCK_WOULD_BLOCK); /* r3 is in */
    OK(keylock_rwlock_release(rw, &r3));

    /* a writer excludes everyone, and fences rise with every writer */
    OK(keylock_rwlock_write_lock(rw, &w));
    CHECK(w.mode == KEYLOCK_EXCLUSIVE && w.fence >= 1);
    CHECK_RESULT(keylock_rwlock_try_read_lock(rw, &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_rwlock_read_lock_timeout(rw, KEYLOCK_NO_WAIT, &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_rwlock_read_lock_timeout(rw, MS(20), &b), KEYLOCK_TIMEOUT);
    CHECK_RESULT(keylock_rwlock_try_write_lock(rw, &b), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(rw, MS(20), &b), KEYLOCK_TIMEOUT);
    OK(keylock_rwlock_release(rw, &w));
    CHECK_RESULT(keylock_rwlock_release(rw, &w), KEYLOCK_NOT_OWNER);
    OK(keylock_rwlock_try_write_lock(rw, &w2));
    CHECK(w2.fence > w.fence);
    OK(keylock_rwlock_release(rw, &w2));
    OK(keylock_rwlock_write_lock_timeout(rw, KEYLOCK_WAIT_FOREVER, &w));
    CHECK(w.fence > w2.fence);
    CHECK_RESULT(keylock_rwlock_release(rw, &w2), KEYLOCK_NOT_OWNER); /* old: nothing */
    CHECK_RESULT(keylock_rwlock_try_read_lock(rw, &b), KEYLOCK_WOULD_BLOCK);
    OK(keylock_rwlock_release(rw, &w));
    OK(keylock_rwlock_read_lock_timeout(rw, UINT64_MAX - 1, &r1));
    OK(keylock_rwlock_release(rw, &r1));

    /* pool records are refused by an rwlock; empty and stray records too */
    {
        acq_t p;
        OK(keylock_pool_lock(pool, K("k"), &p));
        CHECK_RESULT(keylock_rwlock_release(rw, &p), KEYLOCK_INVALID_ARGUMENT);
        OK(keylock_pool_release(pool, &p));
    }
    CHECK_RESULT(keylock_rwlock_release(rw, &empty), KEYLOCK_NOT_LOCKED);
    CHECK_RESULT(keylock_rwlock_release(rw, &junk), KEYLOCK_INVALID_ARGUMENT);

    keylock_rwlock_free(other);
    keylock_rwlock_free(rw);
    keylock_pool_free(pool);
}

/* Readers overlap: N readers inside at once. */
typedef struct {
    keylock_rwlock *rw;
    occupancy inside;
    int arrived;
    keylock_result error;
} rw_overlap;

static void *rw_overlap_thread(void *p) {
    rw_overlap *s = p;
    acq_t a;
    uint64_t deadline = now_ns() + MS(10000);
    keylock_result r = keylock_rwlock_read_lock(s->rw, &a);
    if (r != KEYLOCK_OK) {
        s->error = r;
        return NULL;
    }
    occ_enter(&s->inside, true);
    __atomic_add_fetch(&s->arrived, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&s->arrived, __ATOMIC_SEQ_CST) < OVERLAP && now_ns() < deadline)
        sched_yield();
    occ_leave(&s->inside, true);
    r = keylock_rwlock_release(s->rw, &a);
    if (r != KEYLOCK_OK) s->error = r;
    return NULL;
}

static void test_rwlock_overlap(void) {
    rw_overlap s;
    pthread_t threads[OVERLAP];
    memset(&s, 0, sizeof s);
    s.rw = keylock_rwlock_new();
    if (!s.rw) return;
    for (int t = 0; t < OVERLAP; t++)
        CHECK(pthread_create(&threads[t], NULL, rw_overlap_thread, &s) == 0);
    for (int t = 0; t < OVERLAP; t++) pthread_join(threads[t], NULL);
    OK(s.error);
    CHECK(s.inside.max_shared == OVERLAP);
    check_occupancy("rwlock overlap", &s.inside);
    keylock_rwlock_free(s.rw);
}

typedef struct {
    keylock_rwlock *rw;
    long a, b;  /* written together under the write lock; readers check a == b */
    long reads; /* under a separate mutex: readers run together */
    long torn;
    uint64_t last_fence; /* under the write lock */
    long fence_regressions;
    pthread_mutex_t reads_mutex;
    occupancy inside; /* writers exclusive, readers shared */
    keylock_result error;
} rw_stress;

static void *rw_writer(void *p) {
    rw_stress *s = p;
    for (int i = 0; i < ITERS; i++) {
        acq_t w;
        keylock_result r = (i % 2) ? keylock_rwlock_write_lock(s->rw, &w)
                                   : keylock_rwlock_write_lock_timeout(s->rw, UINT64_MAX, &w);
        if (r != KEYLOCK_OK) {
            s->error = r;
            return NULL;
        }
        occ_enter(&s->inside, false);
        s->a++;
        sched_yield(); /* a reader let in now would see a != b */
        s->b++;
        if (w.fence <= s->last_fence) s->fence_regressions++;
        s->last_fence = w.fence;
        occ_leave(&s->inside, false);
        r = keylock_rwlock_release(s->rw, &w);
        if (r != KEYLOCK_OK) s->error = r;
    }
    return NULL;
}

static void *rw_reader(void *p) {
    rw_stress *s = p;
    for (int i = 0; i < ITERS; i++) {
        acq_t rd;
        keylock_result r;
        bool torn;
        long a;
        if (i % 3 == 0) {
            r = keylock_rwlock_read_lock(s->rw, &rd);
        } else if (i % 3 == 1) {
            while ((r = keylock_rwlock_try_read_lock(s->rw, &rd)) == KEYLOCK_WOULD_BLOCK)
                sched_yield();
        } else {
            /* A reader whose 1 us wait ran out gives way before it tries again, as the try
             * branch does: a retry loop that never yields keeps the writer, whose section
             * yields (above), off a small machine's cores (on 2 cores the test took a minute
             * that way, and over 180 s beside other work; a few seconds with the yield), while
             * its timeouts, over a hundred thousand a run, still race the writers' grants. */
            while ((r = keylock_rwlock_read_lock_timeout(s->rw, 1000, &rd)) == KEYLOCK_TIMEOUT)
                sched_yield();
        }
        if (r != KEYLOCK_OK) {
            s->error = r;
            return NULL;
        }
        occ_enter(&s->inside, true);
        a = s->a;
        sched_yield(); /* a writer let in now would change b */
        torn = a != s->b;
        occ_leave(&s->inside, true);
        r = keylock_rwlock_release(s->rw, &rd);
        if (r != KEYLOCK_OK) s->error = r;
        pthread_mutex_lock(&s->reads_mutex);
        s->reads++;
        s->torn += torn;
        pthread_mutex_unlock(&s->reads_mutex);
    }
    return NULL;
}

static void test_rwlock_stress(void) {
    enum { WRITERS = 3, READERS = THREADS - WRITERS };
    rw_stress s;
    pthread_t threads[THREADS];
    memset(&s, 0, sizeof s);
    s.rw = keylock_rwlock_new();
    s.error = KEYLOCK_OK;
    pthread_mutex_init(&s.reads_mutex, NULL);
    if (!s.rw) return;
    for (int t = 0; t < THREADS; t++)
        CHECK(pthread_create(&threads[t], NULL, t < WRITERS ? rw_writer : rw_reader, &s) == 0);
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    OK(s.error);
    CHECK(s.a == (long)WRITERS * ITERS);
    CHECK(s.b == (long)WRITERS * ITERS);
    CHECK(s.reads == (long)READERS * ITERS);
    CHECK(s.torn == 0);
    CHECK(s.fence_regressions == 0);
    CHECK(s.inside.completed == (long)THREADS * ITERS);
    check_occupancy("rwlock", &s.inside);
    pthread_mutex_destroy(&s.reads_mutex);
    keylock_rwlock_free(s.rw);
}

/* ---- runner -------------------------------------------------------------------------------- */

static int passed, failed;

static void run(const char *name, const char *variant, void (*plain)(void),
                void (*keyed)(const keyed_api *), const keyed_api *api) {
    checks_failed = 0;
    if (plain) plain();
    else keyed(api);
    printf("%s %s%s%s\n", checks_failed ? "FAIL" : "ok  ", name, variant ? " " : "",
           variant ? variant : "");
    if (checks_failed) failed++;
    else passed++;
    fflush(stdout);
}

int main(void) {
    static void (*const keyed_tests[])(const keyed_api *) = {
        test_keyed_basics,        test_keyed_shared,       test_keyed_options,
        test_keyed_stale_release, test_keyed_lease,        test_keyed_reentrant,
        test_keyed_many,          test_keyed_bad_input,    test_keyed_cross_thread,
        test_keyed_fifo,
        test_keyed_shared_overlap, test_keyed_mixed_stress, test_keyed_fences,
        test_keyed_reaped_stress, test_keyed_key_lengths,
    };
    static const char *const keyed_names[] = {
        "keyed_basics",        "keyed_shared",       "keyed_options",
        "keyed_stale_release", "keyed_lease",        "keyed_reentrant",
        "keyed_many",          "keyed_bad_input",    "keyed_cross_thread",
        "keyed_fifo",
        "keyed_shared_overlap", "keyed_mixed_stress", "keyed_fences",
        "keyed_reaped_stress", "keyed_key_lengths",
    };
    watchdog_arm(240);

    run("version", NULL, test_version, NULL, NULL);
    run("result_codes", NULL, test_result_codes, NULL, NULL);
    run("key_encoders", NULL, test_key_encoders, NULL, NULL);
    run("acquisition_record", NULL, test_acquisition_record, NULL, NULL);
    run("open", NULL, test_open, NULL, NULL);
    for (size_t t = 0; t < sizeof keyed_tests / sizeof keyed_tests[0]; t++)
        for (size_t i = 0; i < sizeof KEYED / sizeof KEYED[0]; i++)
            run(keyed_names[t], KEYED[i]->name, NULL, keyed_tests[t], KEYED[i]);
    run("rwlock", NULL, test_rwlock, NULL, NULL);
    run("rwlock_overlap", NULL, test_rwlock_overlap, NULL, NULL);
    run("rwlock_stress", NULL, test_rwlock_stress, NULL, NULL);

    printf("test_keylock: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
