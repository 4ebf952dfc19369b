/*
 * The keylock bank, in C with pthreads.
 *
 * W workers move random amounts between A accounts. A transfer locks the two account keys
 * together with lock_many (first with a keylock_pool, then again with a keylock_striped) while
 * holding the keylock_rwlock for reading; an auditor thread takes the rwlock for writing, sums
 * every balance and checks that the total never changed. Prints transfers per second for each
 * per-key primitive, the audits passed, and the final total against the initial one; exits
 * non-zero on any mismatch or error.
 *
 * Usage: bank [workers] [accounts] [milliseconds per primitive]
 */
#define _POSIX_C_SOURCE 200809L

#include <keylock.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ACCOUNTS 4096
#define KEY_SIZE 16
#define INITIAL_BALANCE 1000

/* The per-key primitive of one phase, behind two function pointers. */
typedef struct {
    const char *name;
    void *handle;
    keylock_result (*lock_many)(void *, const uint8_t *const *, const size_t *, size_t);
    keylock_result (*unlock_many)(void *, const uint8_t *const *, const size_t *, size_t);
} keyed_lock;

static keylock_result pool_lock_many(void *h, const uint8_t *const *k, const size_t *l, size_t n) {
    return keylock_pool_lock_many(h, k, l, n);
}
static keylock_result pool_unlock_many(void *h, const uint8_t *const *k, const size_t *l, size_t n) {
    return keylock_pool_unlock_many(h, k, l, n);
}
static keylock_result striped_lock_many(void *h, const uint8_t *const *k, const size_t *l, size_t n) {
    return keylock_striped_lock_many(h, k, l, n);
}
static keylock_result striped_unlock_many(void *h, const uint8_t *const *k, const size_t *l,
                                          size_t n) {
    return keylock_striped_unlock_many(h, k, l, n);
}

typedef struct {
    int accounts;
    int64_t balance[MAX_ACCOUNTS]; /* plain integers: the locks alone keep them consistent */
    char key[MAX_ACCOUNTS][KEY_SIZE];
    size_t key_len[MAX_ACCOUNTS];
    int64_t initial_total;
    keylock_rwlock *rw;
    keyed_lock keyed;
    atomic_bool stop;
    atomic_int errors;
    long audits_passed;
    long audits_failed;
} bank;

typedef struct {
    bank *bank;
    uint64_t rng;
    long transfers;
} worker;

static uint64_t next_random(uint64_t *state) { /* xorshift64* */
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static void fail(bank *b, const char *what, keylock_result r) {
    fprintf(stderr, "bank: %s failed: %s\n", what, keylock_result_str(r));
    atomic_fetch_add(&b->errors, 1);
    atomic_store(&b->stop, true);
}

static void *work(void *arg) {
    worker *w = arg;
    bank *b = w->bank;
    while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
        int from = (int)(next_random(&w->rng) % (uint64_t)b->accounts);
        int to = (int)(next_random(&w->rng) % (uint64_t)(b->accounts - 1));
        if (to >= from) to++;
        int64_t amount = (int64_t)(next_random(&w->rng) % 100) + 1;
        const uint8_t *keys[2] = {(const uint8_t *)b->key[from], (const uint8_t *)b->key[to]};
        size_t lens[2] = {b->key_len[from], b->key_len[to]};

        keylock_result r = keylock_rwlock_read_lock(b->rw);
        if (r != KEYLOCK_OK) {
            fail(b, "keylock_rwlock_read_lock", r);
            return NULL;
        }
        r = b->keyed.lock_many(b->keyed.handle, keys, lens, 2);
        if (r != KEYLOCK_OK) {
            fail(b, "lock_many", r);
            keylock_rwlock_read_unlock(b->rw);
            return NULL;
        }
        if (b->balance[from] >= amount) {
            b->balance[from] -= amount;
            b->balance[to] += amount;
        }
        r = b->keyed.unlock_many(b->keyed.handle, keys, lens, 2);
        if (r != KEYLOCK_OK) fail(b, "unlock_many", r);
        r = keylock_rwlock_read_unlock(b->rw);
        if (r != KEYLOCK_OK) {
            fail(b, "keylock_rwlock_read_unlock", r);
            return NULL;
        }
        w->transfers++;
    }
    return NULL;
}

static int64_t total(const bank *b) {
    int64_t sum = 0;
    for (int i = 0; i < b->accounts; i++) sum += b->balance[i];
    return sum;
}

/* An audit that cannot get the write lock within this long reports a failure rather than hang
 * (a reader that never left would otherwise stop the demo forever). */
#define AUDIT_TIMEOUT_MS 5000

static void audit(bank *b) {
    keylock_result r = keylock_rwlock_write_lock_timeout(b->rw, AUDIT_TIMEOUT_MS);
    if (r != KEYLOCK_OK) {
        fail(b, "keylock_rwlock_write_lock_timeout (audit)", r);
        return;
    }
    int64_t sum = total(b);
    if (sum == b->initial_total) {
        b->audits_passed++;
    } else {
        b->audits_failed++;
        fprintf(stderr, "bank: audit found total %lld, expected %lld\n", (long long)sum,
                (long long)b->initial_total);
    }
    r = keylock_rwlock_write_unlock(b->rw);
    if (r != KEYLOCK_OK) fail(b, "keylock_rwlock_write_unlock", r);
}

static void *auditor(void *arg) {
    bank *b = arg;
    const struct timespec pause = {0, 2 * 1000 * 1000}; /* 2 ms between audits */
    while (!atomic_load(&b->stop)) {
        audit(b);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Runs the workers and the auditor for `ms` milliseconds; returns transfers per second. */
static double run_phase(bank *b, int workers, long ms) {
    worker *ws = calloc((size_t)workers, sizeof *ws);
    pthread_t *threads = calloc((size_t)workers, sizeof *threads);
    pthread_t audit_thread;
    if (!ws || !threads) {
        fprintf(stderr, "bank: out of memory\n");
        exit(1);
    }
    atomic_store(&b->stop, false);
    double start = now_seconds();
    for (int i = 0; i < workers; i++) {
        ws[i].bank = b;
        ws[i].rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        pthread_create(&threads[i], NULL, work, &ws[i]);
    }
    pthread_create(&audit_thread, NULL, auditor, b);
    struct timespec run = {ms / 1000, (ms % 1000) * 1000 * 1000};
    nanosleep(&run, NULL);
    atomic_store(&b->stop, true);
    long transfers = 0;
    for (int i = 0; i < workers; i++) {
        pthread_join(threads[i], NULL);
        transfers += ws[i].transfers;
    }
    pthread_join(audit_thread, NULL);
    double elapsed = now_seconds() - start;
    audit(b); /* one last audit with every worker stopped */
    free(ws);
    free(threads);
    return (double)transfers / elapsed;
}

int main(int argc, char **argv) {
    int workers = argc > 1 ? atoi(argv[1]) : 4;
    int accounts = argc > 2 ? atoi(argv[2]) : 64;
    long ms = argc > 3 ? atol(argv[3]) : 400;
    if (workers < 1 || accounts < 2 || accounts > MAX_ACCOUNTS || ms < 1) {
        fprintf(stderr, "usage: bank [workers >= 1] [2 <= accounts <= %d] [ms >= 1]\n",
                MAX_ACCOUNTS);
        return 2;
    }
    if (strcmp(keylock_version(), KEYLOCK_VERSION) != 0) {
        fprintf(stderr, "bank: header %s but library %s\n", KEYLOCK_VERSION, keylock_version());
        return 1;
    }

    static bank b; /* large: keep it off the stack */
    b.accounts = accounts;
    for (int i = 0; i < accounts; i++) {
        b.balance[i] = INITIAL_BALANCE;
        b.key_len[i] = (size_t)snprintf(b.key[i], KEY_SIZE, "account:%d", i);
    }
    b.initial_total = total(&b);
    b.rw = keylock_rwlock_new();
    keylock_pool *pool = keylock_pool_new();
    keylock_striped *striped = keylock_striped_new(1024);
    if (!b.rw || !pool || !striped) {
        fprintf(stderr, "bank: could not create the locks\n");
        return 1;
    }

    printf("keylock %s C bank: %d workers, %d accounts, %ld ms per primitive\n",
           keylock_version(), workers, accounts, ms);
    keyed_lock phases[2] = {
        {"KeyPool", pool, pool_lock_many, pool_unlock_many},
        {"StripedLock", striped, striped_lock_many, striped_unlock_many},
    };
    for (int p = 0; p < 2; p++) {
        b.keyed = phases[p];
        double rate = run_phase(&b, workers, ms);
        printf("  %-12s %12.0f transfers/s\n", phases[p].name, rate);
    }

    int64_t final_total = total(&b);
    int errors = atomic_load(&b.errors);
    printf("  audits passed: %ld, failed: %ld\n", b.audits_passed, b.audits_failed);
    printf("  final total %lld, initial total %lld: %s\n", (long long)final_total,
           (long long)b.initial_total, final_total == b.initial_total ? "match" : "MISMATCH");

    keylock_pool_free(pool);
    keylock_striped_free(striped);
    keylock_rwlock_free(b.rw);
    if (errors || b.audits_failed || b.audits_passed == 0 || final_total != b.initial_total) {
        fprintf(stderr, "bank: FAILED\n");
        return 1;
    }
    return 0;
}
