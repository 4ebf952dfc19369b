/*
 * The keylock bank, in C with pthreads.
 *
 * W workers move random amounts between A accounts. A transfer locks the two account keys
 * together with lock_many (first with a keylock_pool, then again with a keylock_striped) while
 * holding the keylock_rwlock for reading; an auditor thread takes the rwlock for writing, sums
 * every balance and checks that the total never changed.
 *
 * The accounts live in a "store" that fences its writes, as a database would with
 * `UPDATE accounts SET balance = $b, fence = $f WHERE id = $id AND fence < $f`: every write
 * carries the fence of the writer's acquisition of that account, and the store refuses one that
 * is not newer than the last it applied. After the workers of each phase, a stale writer shows
 * why: it takes account 0 with a 50 ms lease and stalls past it; the next holder takes over and
 * writes; the stale writer's write is then refused by the store, and its release reports
 * KEYLOCK_LEASE_EXPIRED. (A lease alone would not have stopped it from writing.)
 *
 * Prints transfers per second for each per-key primitive, the audits passed, the stale writer's
 * outcome, and the final total against the initial one; exits non-zero on any mismatch or error.
 *
 * Usage: bank [workers] [accounts] [milliseconds per primitive]
 */
#define _POSIX_C_SOURCE 200809L

#include <keylock.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ACCOUNTS 4096
#define KEY_SIZE 16
#define INITIAL_BALANCE 1000

/* The per-key primitive of one phase, behind function pointers. */
typedef struct {
    const char *name;
    void *handle;
    keylock_result (*lock_many)(void *, const uint8_t *const *, const size_t *, size_t,
                                keylock_acquisition *, size_t *);
    keylock_result (*release_many)(void *, keylock_acquisition *, size_t);
    keylock_result (*lock_with)(void *, const uint8_t *, size_t, const keylock_lock_options *,
                                keylock_acquisition *);
    keylock_result (*release)(void *, keylock_acquisition *);
} keyed_lock;

static keylock_result pool_lock_many(void *h, const uint8_t *const *k, const size_t *l, size_t n,
                                     keylock_acquisition *a, size_t *count) {
    return keylock_pool_lock_many(h, k, l, n, a, count);
}
static keylock_result pool_release_many(void *h, keylock_acquisition *a, size_t n) {
    return keylock_pool_release_many(h, a, n);
}
static keylock_result pool_lock_with(void *h, const uint8_t *k, size_t l,
                                     const keylock_lock_options *o, keylock_acquisition *a) {
    return keylock_pool_lock_with(h, k, l, o, a);
}
static keylock_result pool_release(void *h, keylock_acquisition *a) {
    return keylock_pool_release(h, a);
}
static keylock_result striped_lock_many(void *h, const uint8_t *const *k, const size_t *l,
                                        size_t n, keylock_acquisition *a, size_t *count) {
    return keylock_striped_lock_many(h, k, l, n, a, count);
}
static keylock_result striped_release_many(void *h, keylock_acquisition *a, size_t n) {
    return keylock_striped_release_many(h, a, n);
}
static keylock_result striped_lock_with(void *h, const uint8_t *k, size_t l,
                                        const keylock_lock_options *o, keylock_acquisition *a) {
    return keylock_striped_lock_with(h, k, l, o, a);
}
static keylock_result striped_release(void *h, keylock_acquisition *a) {
    return keylock_striped_release(h, a);
}

/* One account in the store: its balance and the fence of the last write applied to it. */
typedef struct {
    int64_t balance;
    uint64_t fence;
} account;

/* The store's one write rule: a write must carry a fence newer than the last applied. */
static bool store_accepts(const account *a, uint64_t fence) { return fence > a->fence; }

static void store_write(account *a, int64_t balance, uint64_t fence) {
    a->balance = balance;
    a->fence = fence;
}

typedef struct {
    int accounts;
    account store[MAX_ACCOUNTS]; /* plain integers: the locks alone keep them consistent */
    char key[MAX_ACCOUNTS][KEY_SIZE];
    size_t key_len[MAX_ACCOUNTS];
    int64_t initial_total;
    keylock_rwlock *rw;
    keyed_lock keyed;
    atomic_bool stop;
    atomic_int errors;
    long audits_passed;
    long audits_failed;
    long refused_writes; /* by the store, in transfers: must stay 0 */
    long stale_writers_stopped;
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
        size_t lens[2] = {b->key_len[from], b->key_len[to]}, count = 0;
        keylock_acquisition reading, held[2];

        keylock_result r = keylock_rwlock_read_lock(b->rw, &reading);
        if (r != KEYLOCK_OK) {
            fail(b, "keylock_rwlock_read_lock", r);
            return NULL;
        }
        r = b->keyed.lock_many(b->keyed.handle, keys, lens, 2, held, &count);
        if (r != KEYLOCK_OK) {
            fail(b, "lock_many", r);
            keylock_rwlock_release(b->rw, &reading);
            return NULL;
        }
        {
            /* one record per distinct lock, in key order: two accounts of one stripe share it */
            account *src = &b->store[from], *dst = &b->store[to];
            uint64_t f_src = held[0].fence, f_dst = held[count - 1].fence;
            if (!store_accepts(src, f_src) || !store_accepts(dst, f_dst)) {
                b->refused_writes++; /* cannot happen while the locks exclude each other */
            } else if (src->balance >= amount) {
                store_write(src, src->balance - amount, f_src);
                store_write(dst, dst->balance + amount, f_dst);
            }
        }
        r = b->keyed.release_many(b->keyed.handle, held, count);
        if (r != KEYLOCK_OK) fail(b, "release_many", r);
        r = keylock_rwlock_release(b->rw, &reading);
        if (r != KEYLOCK_OK) {
            fail(b, "keylock_rwlock_release", r);
            return NULL;
        }
        w->transfers++;
    }
    return NULL;
}

/* The next holder of account 0, taking over once the stale writer's lease ends. */
static void *take_over(void *arg) {
    bank *b = arg;
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    keylock_acquisition next;
    o.timeout_ns = 5000000000u; /* far more than the 50 ms lease */
    keylock_result r = b->keyed.lock_with(b->keyed.handle, (const uint8_t *)b->key[0],
                                          b->key_len[0], &o, &next);
    if (r != KEYLOCK_OK) {
        fail(b, "the next holder's lock", r);
        return NULL;
    }
    if (store_accepts(&b->store[0], next.fence))
        store_write(&b->store[0], b->store[0].balance, next.fence); /* its (no-op) write */
    r = b->keyed.release(b->keyed.handle, &next);
    if (r != KEYLOCK_OK) fail(b, "the next holder's release", r);
    return NULL;
}

/* A holder that stalls past its lease (a GC pause, a swapped-out process) and then writes. */
static void stale_writer(bank *b) {
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    keylock_acquisition mine;
    pthread_t next_holder;
    o.lease_ns = 50 * 1000 * 1000; /* 50 ms */
    keylock_result r = b->keyed.lock_with(b->keyed.handle, (const uint8_t *)b->key[0],
                                          b->key_len[0], &o, &mine);
    if (r != KEYLOCK_OK) {
        fail(b, "the stale writer's lock", r);
        return;
    }
    int64_t seen = b->store[0].balance;
    pthread_create(&next_holder, NULL, take_over, b);
    pthread_join(next_holder, NULL); /* the stall: the lease runs out, the next holder writes */
    if (store_accepts(&b->store[0], mine.fence)) {
        fprintf(stderr, "bank: the store accepted a write from a holder whose lease had ended\n");
        store_write(&b->store[0], seen - 100, mine.fence);
        atomic_fetch_add(&b->errors, 1);
    } else {
        r = b->keyed.release(b->keyed.handle, &mine);
        if (r == KEYLOCK_LEASE_EXPIRED) b->stale_writers_stopped++;
        else fail(b, "the stale writer's release (expected KEYLOCK_LEASE_EXPIRED)", r);
    }
}

static int64_t total(const bank *b) {
    int64_t sum = 0;
    for (int i = 0; i < b->accounts; i++) sum += b->store[i].balance;
    return sum;
}

/* An audit that cannot get the write lock within this long reports a failure rather than hang
 * (a reader that never left would otherwise stop the demo forever). */
#define AUDIT_TIMEOUT_MS 5000

static void audit(bank *b) {
    keylock_acquisition writing;
    keylock_result r = keylock_rwlock_write_lock_timeout(b->rw, AUDIT_TIMEOUT_MS * 1000000u,
                                                         &writing);
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
    r = keylock_rwlock_release(b->rw, &writing);
    if (r != KEYLOCK_OK) fail(b, "keylock_rwlock_release (audit)", r);
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
    /* a new lock object is a new series of fences: the store starts its fences over */
    for (int i = 0; i < b->accounts; i++) b->store[i].fence = 0;
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
    stale_writer(b);
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
        b.store[i].balance = INITIAL_BALANCE;
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
        {"KeyPool", pool, pool_lock_many, pool_release_many, pool_lock_with, pool_release},
        {"StripedLock", striped, striped_lock_many, striped_release_many, striped_lock_with,
         striped_release},
    };
    for (int p = 0; p < 2; p++) {
        b.keyed = phases[p];
        double rate = run_phase(&b, workers, ms);
        printf("  %-12s %12.0f transfers/s\n", phases[p].name, rate);
    }

    int64_t final_total = total(&b);
    int errors = atomic_load(&b.errors);
    printf("  audits passed: %ld, failed: %ld\n", b.audits_passed, b.audits_failed);
    printf("  fenced writes refused in transfers: %ld (must be 0)\n", b.refused_writes);
    printf("  stale writers stopped by the fence (lease run out, write refused, release said "
           "LEASE_EXPIRED): %ld of 2\n",
           b.stale_writers_stopped);
    printf("  final total %lld, initial total %lld: %s\n", (long long)final_total,
           (long long)b.initial_total, final_total == b.initial_total ? "match" : "MISMATCH");

    keylock_pool_free(pool);
    keylock_striped_free(striped);
    keylock_rwlock_free(b.rw);
    if (errors || b.audits_failed || b.audits_passed == 0 || final_total != b.initial_total ||
        b.refused_writes != 0 || b.stale_writers_stopped != 2) {
        fprintf(stderr, "bank: FAILED\n");
        return 1;
    }
    return 0;
}
