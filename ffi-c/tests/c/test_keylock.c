/*
 * The C API test: every function, every result code, each bad input, and a pthread stress test
 * with exact counts and one holder at a time on all three primitives. `make test` builds it against the *installed*
 * header and library (make install into a temporary prefix, flags from pkg-config) with
 * -fsanitize=address,undefined, as C99. A watchdog (alarm) turns a deadlock into a failure.
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

/* ---- a tiny harness ---------------------------------------------------------------------- */

static int checks_failed; /* in the current test */

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);        \
            checks_failed++;                                                                  \
        }                                                                                     \
    } while (0)

#define CHECK_RESULT(expr, expected)                                                          \
    do {                                                                                      \
        keylock_result got_ = (expr);                                                         \
        keylock_result want_ = (expected);                                                    \
        if (got_ != want_) {                                                                  \
            fprintf(stderr, "  %s:%d: %s\n    returned %s\n    expected %s\n", __FILE__,      \
                    __LINE__, #expr, keylock_result_str(got_), keylock_result_str(want_));    \
            checks_failed++;                                                                  \
        }                                                                                     \
    } while (0)

#define OK(expr) CHECK_RESULT(expr, KEYLOCK_OK)

static void watchdog(int sig) {
    static const char msg[] = "test_keylock: watchdog fired: a deadlock or hang (FAILED)\n";
    (void)sig;
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

#define K(s) ((const uint8_t *)(s)), (sizeof(s) - 1) /* a string literal as key, len */

/* ---- the two keyed primitives behind one table, so each test runs on both ------------------ */

typedef struct {
    const char *name;
    void *(*make)(void);
    void (*destroy)(void *);
    keylock_result (*lock)(void *, const uint8_t *, size_t);
    keylock_result (*try_lock)(void *, const uint8_t *, size_t);
    keylock_result (*lock_timeout)(void *, const uint8_t *, size_t, uint64_t);
    keylock_result (*unlock)(void *, const uint8_t *, size_t);
    keylock_result (*is_locked)(const void *, const uint8_t *, size_t, bool *);
    keylock_result (*lock_many)(void *, const uint8_t *const *, const size_t *, size_t);
    keylock_result (*unlock_many)(void *, const uint8_t *const *, const size_t *, size_t);
} keyed_api;

#define KEYED_WRAPPERS(prefix, type, make_expr)                                               \
    static void *prefix##_make(void) { return make_expr; }                                    \
    static void prefix##_destroy(void *h) { keylock_##prefix##_free((type *)h); }             \
    static keylock_result prefix##_lock(void *h, const uint8_t *k, size_t n) {                \
        return keylock_##prefix##_lock((type *)h, k, n);                                      \
    }                                                                                         \
    static keylock_result prefix##_try_lock(void *h, const uint8_t *k, size_t n) {            \
        return keylock_##prefix##_try_lock((type *)h, k, n);                                  \
    }                                                                                         \
    static keylock_result prefix##_lock_timeout(void *h, const uint8_t *k, size_t n,          \
                                                uint64_t ms) {                                \
        return keylock_##prefix##_lock_timeout((type *)h, k, n, ms);                          \
    }                                                                                         \
    static keylock_result prefix##_unlock(void *h, const uint8_t *k, size_t n) {              \
        return keylock_##prefix##_unlock((type *)h, k, n);                                    \
    }                                                                                         \
    static keylock_result prefix##_is_locked(const void *h, const uint8_t *k, size_t n,       \
                                             bool *out) {                                     \
        return keylock_##prefix##_is_locked((const type *)h, k, n, out);                      \
    }                                                                                         \
    static keylock_result prefix##_lock_many(void *h, const uint8_t *const *k,                \
                                             const size_t *n, size_t c) {                     \
        return keylock_##prefix##_lock_many((type *)h, k, n, c);                              \
    }                                                                                         \
    static keylock_result prefix##_unlock_many(void *h, const uint8_t *const *k,              \
                                               const size_t *n, size_t c) {                   \
        return keylock_##prefix##_unlock_many((type *)h, k, n, c);                            \
    }                                                                                         \
    static const keyed_api prefix##_api = {                                                   \
        #prefix,             prefix##_make,      prefix##_destroy,     prefix##_lock,         \
        prefix##_try_lock,   prefix##_lock_timeout, prefix##_unlock,   prefix##_is_locked,    \
        prefix##_lock_many,  prefix##_unlock_many,                                            \
    };

KEYED_WRAPPERS(pool, keylock_pool, keylock_pool_new())
KEYED_WRAPPERS(striped, keylock_striped, keylock_striped_new(1024))

static const keyed_api *const KEYED[] = {&pool_api, &striped_api};

static bool locked(const keyed_api *api, const void *h, const uint8_t *key, size_t len) {
    bool out = false;
    OK(api->is_locked(h, key, len, &out));
    return out;
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

/* ---- tests ----------------------------------------------------------------------------- */

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
    };
    /* The numbers are ABI: they must never change. */
    CHECK(sizeof(keylock_result) == 4);
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = keylock_result_str(codes[i].code);
        CHECK(codes[i].code == codes[i].number);
        CHECK(s != NULL && strncmp(s, codes[i].name, strlen(codes[i].name)) == 0);
        CHECK(s != NULL && s[strlen(codes[i].name)] == ':');
    }
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

/* lock / try_lock / lock_timeout / unlock / is_locked on one key, and each result they give. */
static void test_keyed_basics(const keyed_api *api) {
    void *h = api->make();
    CHECK(h != NULL);
    if (!h) return;
    CHECK(!locked(api, h, K("alpha")));
    OK(api->lock(h, K("alpha")));
    CHECK(locked(api, h, K("alpha")));
    CHECK_RESULT(api->try_lock(h, K("alpha")), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(api->lock_timeout(h, K("alpha"), 0), KEYLOCK_TIMEOUT);
    CHECK_RESULT(api->lock_timeout(h, K("alpha"), 20), KEYLOCK_TIMEOUT);
    OK(api->unlock(h, K("alpha")));
    CHECK(!locked(api, h, K("alpha")));
    CHECK_RESULT(api->unlock(h, K("alpha")), KEYLOCK_NOT_LOCKED);

    OK(api->try_lock(h, K("alpha")));
    CHECK_RESULT(api->try_lock(h, K("alpha")), KEYLOCK_WOULD_BLOCK);
    OK(api->unlock(h, K("alpha")));
    OK(api->lock_timeout(h, K("alpha"), 0));
    OK(api->unlock(h, K("alpha")));
    /* The largest timeout neither overflows nor fails on a free key. */
    OK(api->lock_timeout(h, K("alpha"), UINT64_MAX));
    CHECK_RESULT(api->lock_timeout(h, K("alpha"), 1), KEYLOCK_TIMEOUT);
    OK(api->unlock(h, K("alpha")));

    /* A held key does not block a key of another lock. */
    {
        char other[32];
        size_t other_len;
        OK(api->lock(h, K("alpha")));
        free_key(api, h, other, &other_len);
        OK(api->try_lock(h, (const uint8_t *)other, other_len));
        OK(api->unlock(h, (const uint8_t *)other, other_len));
        OK(api->unlock(h, K("alpha")));
    }

    /* NULL with length 0 is the empty key, the same key as any zero-length buffer. */
    OK(api->lock(h, NULL, 0));
    CHECK(locked(api, h, (const uint8_t *)"", 0));
    CHECK_RESULT(api->try_lock(h, (const uint8_t *)"x", 0), KEYLOCK_WOULD_BLOCK);
    OK(api->unlock(h, (const uint8_t *)"", 0));
    CHECK_RESULT(api->unlock(h, NULL, 0), KEYLOCK_NOT_LOCKED);

    /* Keys are bytes: embedded NULs count, and the caller's buffer is not kept. */
    {
        uint8_t buf[3] = {'a', 0, 'b'};
        OK(api->lock(h, buf, 3));
        memset(buf, 0xff, sizeof buf);
        {
            const uint8_t same[3] = {'a', 0, 'b'};
            CHECK(locked(api, h, same, 3));
            OK(api->unlock(h, same, 3));
        }
    }
    api->destroy(h);
}

/* Every bad input named in the issue, on every function that takes it. */
static void test_keyed_bad_input(const keyed_api *api) {
    void *h = api->make();
    bool out = true;
    const uint8_t *keys[2] = {(const uint8_t *)"a", (const uint8_t *)"b"};
    const uint8_t *null_key[2] = {(const uint8_t *)"a", NULL};
    size_t lens[2] = {1, 1};
    if (!h) return;

    /* NULL handle */
    CHECK_RESULT(api->lock(NULL, K("a")), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->try_lock(NULL, K("a")), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_timeout(NULL, K("a"), 5), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->unlock(NULL, K("a")), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->is_locked(NULL, K("a"), &out), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(NULL, keys, lens, 2), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->unlock_many(NULL, keys, lens, 2), KEYLOCK_NULL_ARGUMENT);

    /* NULL key with len > 0 */
    CHECK_RESULT(api->lock(h, NULL, 1), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->try_lock(h, NULL, 1), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_timeout(h, NULL, 1, 5), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->unlock(h, NULL, 1), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->is_locked(h, NULL, 1, &out), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, null_key, lens, 2), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->unlock_many(h, null_key, lens, 2), KEYLOCK_NULL_ARGUMENT);

    /* a length no object can have (over PTRDIFF_MAX): never read */
    CHECK_RESULT(api->lock(h, (const uint8_t *)"a", SIZE_MAX), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->try_lock(h, (const uint8_t *)"a", SIZE_MAX), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->lock_timeout(h, (const uint8_t *)"a", SIZE_MAX, 5),
                 KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->unlock(h, (const uint8_t *)"a", SIZE_MAX), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->is_locked(h, (const uint8_t *)"a", SIZE_MAX, &out),
                 KEYLOCK_INVALID_ARGUMENT);

    /* NULL out */
    CHECK_RESULT(api->is_locked(h, K("a"), NULL), KEYLOCK_NULL_ARGUMENT);

    /* _many: n == 0, NULL arrays */
    CHECK_RESULT(api->lock_many(h, keys, lens, 0), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->unlock_many(h, keys, lens, 0), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, NULL, lens, 2), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->unlock_many(h, NULL, lens, 2), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, keys, NULL, 2), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->unlock_many(h, keys, NULL, 2), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(api->lock_many(h, NULL, NULL, 0), KEYLOCK_INVALID_ARGUMENT);
    CHECK_RESULT(api->unlock_many(h, NULL, NULL, 0), KEYLOCK_INVALID_ARGUMENT);

    /* unlock of keys not locked */
    CHECK_RESULT(api->unlock(h, K("a")), KEYLOCK_NOT_LOCKED);
    CHECK_RESULT(api->unlock_many(h, keys, lens, 2), KEYLOCK_NOT_LOCKED);

    /* none of the failed calls above locked anything */
    CHECK(!locked(api, h, K("a")));
    CHECK(!locked(api, h, K("b")));
    CHECK(!locked(api, h, NULL, 0));
    api->destroy(h);
}

static void test_keyed_many(const keyed_api *api) {
    void *h = api->make();
    const uint8_t *keys[3] = {(const uint8_t *)"k1", (const uint8_t *)"k2", (const uint8_t *)"k3"};
    size_t lens[3] = {2, 2, 2};
    const uint8_t *twice[3] = {(const uint8_t *)"k1", (const uint8_t *)"k1", NULL};
    size_t twice_lens[3] = {2, 2, 0};
    if (!h) return;

    OK(api->lock_many(h, keys, lens, 3));
    for (int i = 0; i < 3; i++) {
        CHECK(locked(api, h, keys[i], lens[i]));
        CHECK_RESULT(api->try_lock(h, keys[i], lens[i]), KEYLOCK_WOULD_BLOCK);
    }
    OK(api->unlock_many(h, keys, lens, 3));
    for (int i = 0; i < 3; i++) CHECK(!locked(api, h, keys[i], lens[i]));
    CHECK_RESULT(api->unlock_many(h, keys, lens, 3), KEYLOCK_NOT_LOCKED);

    /* A key listed twice is locked once (and the empty key, given as NULL, 0, is a key). */
    OK(api->lock_many(h, twice, twice_lens, 3));
    CHECK(locked(api, h, K("k1")));
    CHECK(locked(api, h, NULL, 0));
    OK(api->unlock_many(h, twice, twice_lens, 3));
    CHECK(!locked(api, h, K("k1")));
    CHECK(!locked(api, h, NULL, 0));

    /* unlock_many checks every key first: when one is not locked, nothing is unlocked. */
    {
        char other[32];
        size_t other_len;
        const uint8_t *pair[2];
        size_t pair_lens[2];
        OK(api->lock(h, K("k1")));
        free_key(api, h, other, &other_len);
        pair[0] = (const uint8_t *)"k1";
        pair_lens[0] = 2;
        pair[1] = (const uint8_t *)other;
        pair_lens[1] = other_len;
        CHECK_RESULT(api->unlock_many(h, pair, pair_lens, 2), KEYLOCK_NOT_LOCKED);
        CHECK(locked(api, h, K("k1")));
        OK(api->unlock(h, K("k1")));
    }
    api->destroy(h);
}

typedef struct {
    const keyed_api *api;
    void *handle;
    keylock_result result;
} unlocker_arg;

static void *unlock_later(void *p) {
    unlocker_arg *a = p;
    sleep_ms(30);
    a->result = a->api->unlock(a->handle, K("shared"));
    return NULL;
}

/* A lock taken on one thread is released on another, and a waiter (here with the largest
 * timeout) gets it then. */
static void test_keyed_cross_thread(const keyed_api *api) {
    void *h = api->make();
    pthread_t t;
    unlocker_arg a;
    if (!h) return;
    a.api = api;
    a.handle = h;
    a.result = KEYLOCK_PANIC;
    OK(api->lock(h, K("shared")));
    CHECK(pthread_create(&t, NULL, unlock_later, &a) == 0);
    OK(api->lock_timeout(h, K("shared"), UINT64_MAX)); /* waits for the other thread */
    pthread_join(t, NULL);
    OK(a.result);
    OK(api->unlock(h, K("shared")));
    api->destroy(h);
}

static void test_lifecycle(void) {
    keylock_striped *one;
    keylock_pool_free(NULL);
    keylock_striped_free(NULL);
    keylock_rwlock_free(NULL);
    CHECK(keylock_striped_new(0) == NULL);
    CHECK(keylock_striped_new((size_t)KEYLOCK_MAX_STRIPES + 1) == NULL);
    CHECK(keylock_striped_new(SIZE_MAX) == NULL);
    /* One stripe: every key shares it. */
    one = keylock_striped_new(1);
    CHECK(one != NULL);
    if (one) {
        OK(keylock_striped_lock(one, K("x")));
        CHECK_RESULT(keylock_striped_try_lock(one, K("y")), KEYLOCK_WOULD_BLOCK);
        OK(keylock_striped_unlock(one, K("y"))); /* the same stripe */
        CHECK_RESULT(keylock_striped_unlock(one, K("x")), KEYLOCK_NOT_LOCKED);
        keylock_striped_free(one);
    }
    /* A handle freed with keys still locked. */
    {
        keylock_pool *p = keylock_pool_new();
        keylock_striped *s = keylock_striped_new(4096);
        CHECK(p != NULL && s != NULL);
        if (p) OK(keylock_pool_lock(p, K("left")));
        if (s) OK(keylock_striped_lock(s, K("left")));
        keylock_pool_free(p);
        keylock_striped_free(s);
    }
}

static void test_rwlock(void) {
    keylock_rwlock *rw = keylock_rwlock_new();
    CHECK(rw != NULL);
    if (!rw) return;

    /* NULL handle, every function */
    CHECK_RESULT(keylock_rwlock_read_lock(NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_try_read_lock(NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_read_lock_timeout(NULL, 5), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_read_unlock(NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_write_lock(NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_try_write_lock(NULL), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(NULL, 5), KEYLOCK_NULL_ARGUMENT);
    CHECK_RESULT(keylock_rwlock_write_unlock(NULL), KEYLOCK_NULL_ARGUMENT);

    /* unlocks of what is not held */
    CHECK_RESULT(keylock_rwlock_read_unlock(rw), KEYLOCK_NOT_LOCKED);
    CHECK_RESULT(keylock_rwlock_write_unlock(rw), KEYLOCK_NOT_LOCKED);

    /* readers share */
    OK(keylock_rwlock_read_lock(rw));
    OK(keylock_rwlock_try_read_lock(rw));
    OK(keylock_rwlock_read_lock_timeout(rw, 0));
    CHECK_RESULT(keylock_rwlock_try_write_lock(rw), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(rw, 0), KEYLOCK_TIMEOUT);
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(rw, 20), KEYLOCK_TIMEOUT);
    CHECK_RESULT(keylock_rwlock_write_unlock(rw), KEYLOCK_NOT_LOCKED);
    OK(keylock_rwlock_read_unlock(rw));
    OK(keylock_rwlock_read_unlock(rw));
    OK(keylock_rwlock_read_unlock(rw));
    CHECK_RESULT(keylock_rwlock_read_unlock(rw), KEYLOCK_NOT_LOCKED);

    /* a writer excludes everyone */
    OK(keylock_rwlock_write_lock(rw));
    CHECK_RESULT(keylock_rwlock_try_read_lock(rw), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_rwlock_read_lock_timeout(rw, 0), KEYLOCK_TIMEOUT);
    CHECK_RESULT(keylock_rwlock_read_lock_timeout(rw, 20), KEYLOCK_TIMEOUT);
    CHECK_RESULT(keylock_rwlock_try_write_lock(rw), KEYLOCK_WOULD_BLOCK);
    CHECK_RESULT(keylock_rwlock_write_lock_timeout(rw, 20), KEYLOCK_TIMEOUT);
    CHECK_RESULT(keylock_rwlock_read_unlock(rw), KEYLOCK_NOT_LOCKED);
    OK(keylock_rwlock_write_unlock(rw));
    CHECK_RESULT(keylock_rwlock_write_unlock(rw), KEYLOCK_NOT_LOCKED);

    /* try and timeout forms succeed when free; the largest timeout does not overflow */
    OK(keylock_rwlock_try_write_lock(rw));
    OK(keylock_rwlock_write_unlock(rw));
    OK(keylock_rwlock_write_lock_timeout(rw, UINT64_MAX));
    OK(keylock_rwlock_write_unlock(rw));
    OK(keylock_rwlock_read_lock_timeout(rw, UINT64_MAX));
    OK(keylock_rwlock_read_unlock(rw));
    keylock_rwlock_free(rw);
}

/* ---- stress: exact counts under contention, oversubscribed -------------------------------- */

enum { THREADS = 8, ITERS = 20000, NKEYS = 4 };

static const char *const STRESS_KEYS[NKEYS] = {"s0", "s1", "s2", "s3"};

/*
 * Who is inside a critical section, counted as it happens (GCC/Clang atomic builtins, which
 * ThreadSanitizer understands). An entry counts the exclusive holders inside at that moment and
 * the readers beside them; `overlaps` counts every entry that found someone the lock should have
 * kept out. Nothing interrupts a C critical section here, so every entry must also complete.
 */
typedef struct {
    long exclusive; /* exclusive holders inside now */
    long shared;    /* shared holders (readers) inside now */
    long max_exclusive;
    long overlaps;
    long entered;
    long completed;
} occupancy;

/* Counts an overlap, and reports the first one at once: a broken lock may hang later. */
static void occ_overlap(occupancy *o, const char *what) {
    if (__atomic_add_fetch(&o->overlaps, 1, __ATOMIC_SEQ_CST) == 1)
        fprintf(stderr, "  overlap: %s\n", what);
}

static void occ_enter(occupancy *o, bool shared) {
    __atomic_add_fetch(&o->entered, 1, __ATOMIC_SEQ_CST);
    if (shared) {
        __atomic_add_fetch(&o->shared, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&o->exclusive, __ATOMIC_SEQ_CST) != 0)
            occ_overlap(o, "a reader inside with a writer");
        return;
    }
    long n = __atomic_add_fetch(&o->exclusive, 1, __ATOMIC_SEQ_CST);
    long max = __atomic_load_n(&o->max_exclusive, __ATOMIC_SEQ_CST);
    while (n > max && !__atomic_compare_exchange_n(&o->max_exclusive, &max, n, false,
                                                   __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    if (n > 1) occ_overlap(o, "two exclusive holders inside at once");
    else if (__atomic_load_n(&o->shared, __ATOMIC_SEQ_CST) != 0)
        occ_overlap(o, "a writer inside with readers");
}

static void occ_leave(occupancy *o, bool shared) {
    __atomic_sub_fetch(shared ? &o->shared : &o->exclusive, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&o->completed, 1, __ATOMIC_SEQ_CST);
}

/* One holder at a time (readers aside), every entry completed, nobody inside now. */
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

typedef struct {
    const keyed_api *api;
    void *handle;
    long counter[NKEYS]; /* plain: the per-key lock alone protects each */
    occupancy inside[NKEYS];
    keylock_result error;
} keyed_stress;

typedef struct {
    keyed_stress *shared;
    int thread;
} keyed_stress_arg;

static void *keyed_stress_thread(void *p) {
    keyed_stress_arg *arg = p;
    keyed_stress *s = arg->shared;
    const keyed_api *api = s->api;
    for (int i = 0; i < ITERS; i++) {
        int k = (arg->thread + i) % NKEYS;
        const uint8_t *key = (const uint8_t *)STRESS_KEYS[k];
        keylock_result r;
        switch (i % 4) {
        case 0: /* blocking */
            r = api->lock(s->handle, key, 2);
            break;
        case 1: /* try until it works */
            while ((r = api->try_lock(s->handle, key, 2)) == KEYLOCK_WOULD_BLOCK) sched_yield();
            break;
        case 2: /* timeouts that expire in the middle, then retried */
            while ((r = api->lock_timeout(s->handle, key, 2, i % 3)) == KEYLOCK_TIMEOUT) {}
            break;
        default: { /* two keys at once: counts for both */
            int k2 = (k + 1) % NKEYS;
            const uint8_t *keys[2] = {(const uint8_t *)STRESS_KEYS[k2], key};
            size_t lens[2] = {2, 2};
            r = api->lock_many(s->handle, keys, lens, 2);
            if (r != KEYLOCK_OK) break;
            occ_enter(&s->inside[k], false);
            occ_enter(&s->inside[k2], false);
            s->counter[k]++;
            s->counter[k2]++;
            occ_leave(&s->inside[k2], false);
            occ_leave(&s->inside[k], false);
            r = api->unlock_many(s->handle, keys, lens, 2);
            if (r != KEYLOCK_OK) s->error = r;
            continue;
        }
        }
        if (r != KEYLOCK_OK) {
            s->error = r;
            return NULL;
        }
        occ_enter(&s->inside[k], false);
        s->counter[k]++;
        occ_leave(&s->inside[k], false);
        r = api->unlock(s->handle, key, 2);
        if (r != KEYLOCK_OK) s->error = r;
    }
    return NULL;
}

static void test_keyed_stress(const keyed_api *api) {
    keyed_stress s;
    keyed_stress_arg args[THREADS];
    pthread_t threads[THREADS];
    long expected[NKEYS] = {0};
    memset(&s, 0, sizeof s);
    s.api = api;
    s.handle = api->make();
    s.error = KEYLOCK_OK;
    if (!s.handle) return;
    for (int t = 0; t < THREADS; t++) {
        for (int i = 0; i < ITERS; i++) {
            int k = (t + i) % NKEYS;
            expected[k]++;
            if (i % 4 == 3) expected[(k + 1) % NKEYS]++;
        }
        args[t].shared = &s;
        args[t].thread = t;
        CHECK(pthread_create(&threads[t], NULL, keyed_stress_thread, &args[t]) == 0);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(threads[t], NULL);
    OK(s.error);
    for (int k = 0; k < NKEYS; k++) {
        if (s.counter[k] != expected[k])
            fprintf(stderr, "  %s key %d: counted %ld, expected %ld\n", api->name, k,
                    s.counter[k], expected[k]);
        CHECK(s.counter[k] == expected[k]);
        CHECK(s.inside[k].completed == expected[k]);
        check_occupancy(STRESS_KEYS[k], &s.inside[k]);
        CHECK(!locked(api, s.handle, (const uint8_t *)STRESS_KEYS[k], 2));
    }
    api->destroy(s.handle);
}

typedef struct {
    keylock_rwlock *rw;
    long a, b;       /* written together under the write lock; readers check a == b */
    long reads;      /* under a separate mutex: readers run together */
    long torn;
    pthread_mutex_t reads_mutex;
    occupancy inside; /* writers exclusive, readers shared */
    keylock_result error;
} rw_stress;

static void *rw_writer(void *p) {
    rw_stress *s = p;
    for (int i = 0; i < ITERS; i++) {
        keylock_result r = (i % 2) ? keylock_rwlock_write_lock(s->rw)
                                   : keylock_rwlock_write_lock_timeout(s->rw, UINT64_MAX);
        if (r != KEYLOCK_OK) {
            s->error = r;
            return NULL;
        }
        occ_enter(&s->inside, false);
        s->a++;
        sched_yield(); /* a reader let in now would see a != b */
        s->b++;
        occ_leave(&s->inside, false);
        r = keylock_rwlock_write_unlock(s->rw);
        if (r != KEYLOCK_OK) s->error = r;
    }
    return NULL;
}

static void *rw_reader(void *p) {
    rw_stress *s = p;
    for (int i = 0; i < ITERS; i++) {
        keylock_result r;
        bool torn;
        long a;
        if (i % 3 == 0) {
            r = keylock_rwlock_read_lock(s->rw);
        } else if (i % 3 == 1) {
            while ((r = keylock_rwlock_try_read_lock(s->rw)) == KEYLOCK_WOULD_BLOCK) sched_yield();
        } else {
            while ((r = keylock_rwlock_read_lock_timeout(s->rw, 1)) == KEYLOCK_TIMEOUT) {}
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
        r = keylock_rwlock_read_unlock(s->rw);
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
    CHECK(s.inside.completed == (long)THREADS * ITERS);
    check_occupancy("rwlock", &s.inside);
    CHECK_RESULT(keylock_rwlock_read_unlock(s.rw), KEYLOCK_NOT_LOCKED);
    CHECK_RESULT(keylock_rwlock_write_unlock(s.rw), KEYLOCK_NOT_LOCKED);
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
        test_keyed_basics, test_keyed_bad_input, test_keyed_many,
        test_keyed_cross_thread, test_keyed_stress,
    };
    static const char *const keyed_names[] = {
        "keyed_basics", "keyed_bad_input", "keyed_many", "keyed_cross_thread", "keyed_stress",
    };
    signal(SIGALRM, watchdog);
    alarm(120);

    run("version", NULL, test_version, NULL, NULL);
    run("result_codes", NULL, test_result_codes, NULL, NULL);
    run("key_encoders", NULL, test_key_encoders, NULL, NULL);
    run("lifecycle", NULL, test_lifecycle, NULL, NULL);
    for (size_t t = 0; t < sizeof keyed_tests / sizeof keyed_tests[0]; t++)
        for (size_t i = 0; i < sizeof KEYED / sizeof KEYED[0]; i++)
            run(keyed_names[t], KEYED[i]->name, NULL, keyed_tests[t], KEYED[i]);
    run("rwlock", NULL, test_rwlock, NULL, NULL);
    run("rwlock_stress", NULL, test_rwlock_stress, NULL, NULL);

    printf("test_keylock: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
