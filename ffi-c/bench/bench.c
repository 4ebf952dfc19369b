/*
 * C side of the keylock C benchmark (driven by ffi-c/bench/run.py, `make bench-c`).
 *
 * Uncontended lock+release, one thread, over the same 1024 keys of 16 bytes that
 * ffi-c/benches/rust_calls.rs uses:
 *   c_pool            keylock_pool_lock + keylock_pool_release (the acquisition on the stack)
 *   c_striped         keylock_striped_lock + keylock_striped_release (1024 stripes)
 *   c_pthread_array   what a C programmer writes instead: hash the key bytes (a word-at-a-time
 *                     multiply-fold hash, as fast as a decent hash gets) into an array of 1024
 *                     pthread mutexes padded to a cache line, lock + unlock (the key is hashed
 *                     once, then its mutex is unlocked directly, as a C user would)
 *
 * and the host scope, one key of 16 bytes locked and released over and over by one process (as
 * the Rust host-scope suite, core/benches/shm.rs, does it):
 *   c_shm_pool        keylock_pool_open("shm:NAME") + keylock_pool_lock / _release
 *   c_shm_striped     keylock_striped_open("shm:NAME-s", 64 stripes) + _lock / _release
 *   c_robust_mutex    what processes share instead: a process-shared robust pthread mutex in
 *                     a shared mapping of a /dev/shm file (EOWNERDEAD taken as the lock)
 *   c_flock           flock(LOCK_EX) + flock(LOCK_UN) on a /dev/shm file (a sixteenth of the
 *                     iterations: each pair is two system calls)
 *
 * The process starts one thread (which returns at once) before it measures anything. A lock
 * serves a program with threads, and glibc's pthread mutex knows whether the process has ever
 * had a second thread: until it has, a private mutex is taken with a plain load and store
 * instead of an atomic compare-and-swap (glibc's __libc_single_threaded), and the pair costs a
 * third of what it costs in any program that needs it (about 3.4 against 13.5 ns on the host
 * this was found on). keylock's lock words are always atomic.
 *
 * Usage: bench_c ITERS ROUNDS. Prints two lines per case: "name ns_per_op" (wall time) and
 * "name:cpu ns_per_op" (the thread's CPU time, which leaves out the time the thread waited for a
 * core on a busy machine), each the median of ROUNDS rounds of ITERS lock+release pairs. `bench_c --only NAME ITERS` runs one case ITERS times
 * and prints nothing (for instruction counts under callgrind; NAME "none" runs no case).
 */
#define _DEFAULT_SOURCE /* flock, MAP_SHARED files */
#define _POSIX_C_SOURCE 200809L

#include <keylock.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define NKEYS 1024
#define KEY_LEN 16
#define STRIPES 1024

static uint8_t keys[NKEYS][KEY_LEN];

/* ---- the pthread alternative ------------------------------------------------------------- */

typedef struct {
    _Alignas(64) pthread_mutex_t mutex;
} padded_mutex;

static padded_mutex mutexes[STRIPES];

static uint64_t fold_mul(uint64_t a, uint64_t b) {
    __extension__ typedef unsigned __int128 u128;
    u128 p = (u128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

/* A multiply-fold hash over 8-byte words (the same construction as ahash's fallback and
 * wyhash), with a per-process seed. */
static uint64_t hash_bytes(const uint8_t *p, size_t len, uint64_t seed) {
    uint64_t h = seed ^ (len * 0x9E3779B97F4A7C15ULL);
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = fold_mul(h ^ w, 0xA0761D6478BD642FULL);
        p += 8;
        len -= 8;
    }
    if (len > 0) {
        uint64_t w = 0;
        memcpy(&w, p, len);
        h = fold_mul(h ^ w, 0xE7037ED1A0B428DBULL);
    }
    return fold_mul(h, 0x8EBC6AF09C88C6E3ULL);
}

/* ---- timing ------------------------------------------------------------------------------ */

static double clock_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

/* One round's cost per op: wall time and this thread's CPU time. */
typedef struct {
    double wall, cpu;
} timing;

typedef struct {
    double wall, cpu;
} stamp;

static stamp start_clock(void) {
    stamp s = {now_ns(), clock_ns(CLOCK_THREAD_CPUTIME_ID)};
    return s;
}

static timing per_op(stamp s, long iters) {
    timing t = {(now_ns() - s.wall) / (double)iters,
                (clock_ns(CLOCK_THREAD_CPUTIME_ID) - s.cpu) / (double)iters};
    return t;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static volatile uint64_t sink; /* keeps the seed live so the hash cannot be folded away */

#define FAIL_IF(cond, what)                                                                   \
    do {                                                                                      \
        if (cond) {                                                                           \
            fprintf(stderr, "bench_c: %s failed\n", what);                                    \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static timing run_pool(keylock_pool *pool, long iters) {
    stamp start = start_clock();
    for (long i = 0; i < iters; i++) {
        const uint8_t *k = keys[i & (NKEYS - 1)];
        keylock_acquisition acq;
        FAIL_IF(keylock_pool_lock(pool, k, KEY_LEN, &acq) != KEYLOCK_OK, "keylock_pool_lock");
        FAIL_IF(keylock_pool_release(pool, &acq) != KEYLOCK_OK, "keylock_pool_release");
    }
    return per_op(start, iters);
}

static timing run_striped(keylock_striped *striped, long iters) {
    stamp start = start_clock();
    for (long i = 0; i < iters; i++) {
        const uint8_t *k = keys[i & (NKEYS - 1)];
        keylock_acquisition acq;
        FAIL_IF(keylock_striped_lock(striped, k, KEY_LEN, &acq) != KEYLOCK_OK,
                "keylock_striped_lock");
        FAIL_IF(keylock_striped_release(striped, &acq) != KEYLOCK_OK, "keylock_striped_release");
    }
    return per_op(start, iters);
}

static timing run_pthread(long iters, uint64_t seed) {
    stamp start = start_clock();
    for (long i = 0; i < iters; i++) {
        const uint8_t *k = keys[i & (NKEYS - 1)];
        pthread_mutex_t *m = &mutexes[hash_bytes(k, KEY_LEN, seed) & (STRIPES - 1)].mutex;
        FAIL_IF(pthread_mutex_lock(m) != 0, "pthread_mutex_lock");
        FAIL_IF(pthread_mutex_unlock(m) != 0, "pthread_mutex_unlock");
    }
    return per_op(start, iters);
}

/* ---- the host scope ---------------------------------------------------------------------- */

/* What the host-scope cases use: keylock's regions, and the robust mutex and the file that
 * processes on one host share instead. */
typedef struct {
    keylock_pool *pool;
    keylock_striped *striped;
    pthread_mutex_t *robust;
    int file;
    char region[64], mutex_path[64], file_path[64];
} host;

/* The one key of the host-scope cases. */
#define HOST_KEY keys[1]

static timing run_shm_pool(host *h, long iters) {
    stamp start = start_clock();
    for (long i = 0; i < iters; i++) {
        keylock_acquisition acq;
        FAIL_IF(keylock_pool_lock(h->pool, HOST_KEY, KEY_LEN, &acq) != KEYLOCK_OK,
                "keylock_pool_lock (shm)");
        FAIL_IF(keylock_pool_release(h->pool, &acq) != KEYLOCK_OK, "keylock_pool_release (shm)");
    }
    return per_op(start, iters);
}

static timing run_shm_striped(host *h, long iters) {
    stamp start = start_clock();
    for (long i = 0; i < iters; i++) {
        keylock_acquisition acq;
        FAIL_IF(keylock_striped_lock(h->striped, HOST_KEY, KEY_LEN, &acq) != KEYLOCK_OK,
                "keylock_striped_lock (shm)");
        FAIL_IF(keylock_striped_release(h->striped, &acq) != KEYLOCK_OK,
                "keylock_striped_release (shm)");
    }
    return per_op(start, iters);
}

static timing run_robust(host *h, long iters) {
    stamp start = start_clock();
    for (long i = 0; i < iters; i++) {
        int rc = pthread_mutex_lock(h->robust);
        if (rc == EOWNERDEAD) rc = pthread_mutex_consistent(h->robust);
        FAIL_IF(rc != 0, "pthread_mutex_lock (robust)");
        FAIL_IF(pthread_mutex_unlock(h->robust) != 0, "pthread_mutex_unlock (robust)");
    }
    return per_op(start, iters);
}

/* flock's iterations are a sixteenth of the others'; the cost is per pair all the same. */
#define FLOCK_DIVISOR 16

static timing run_flock(host *h, long iters) {
    long n = iters / FLOCK_DIVISOR + 1;
    stamp start = start_clock();
    for (long i = 0; i < n; i++) {
        FAIL_IF(flock(h->file, LOCK_EX) != 0, "flock(LOCK_EX)");
        FAIL_IF(flock(h->file, LOCK_UN) != 0, "flock(LOCK_UN)");
    }
    return per_op(start, n);
}

static void host_open(host *h) {
    int pid = (int)getpid();
    snprintf(h->region, sizeof h->region, "shm:keylock-bench-c-%d", pid);
    char striped[80];
    snprintf(striped, sizeof striped, "%s-s", h->region);
    FAIL_IF(keylock_pool_open(h->region, NULL, &h->pool) != KEYLOCK_OK, "keylock_pool_open");
    keylock_open_options o = {0};
    o.stripes = 64;
    FAIL_IF(keylock_striped_open(striped, &o, &h->striped) != KEYLOCK_OK, "keylock_striped_open");

    snprintf(h->mutex_path, sizeof h->mutex_path, "/dev/shm/keylock-bench-c-mutex.%d", pid);
    int fd = open(h->mutex_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    FAIL_IF(fd < 0 || ftruncate(fd, 4096) != 0, "the robust mutex's file");
    void *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    FAIL_IF(map == MAP_FAILED, "mmap");
    close(fd);
    h->robust = map;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    FAIL_IF(pthread_mutex_init(h->robust, &attr) != 0, "pthread_mutex_init (robust)");
    pthread_mutexattr_destroy(&attr);

    snprintf(h->file_path, sizeof h->file_path, "/dev/shm/keylock-bench-c-flock.%d", pid);
    h->file = open(h->file_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    FAIL_IF(h->file < 0, "the flock file");
}

static void host_close(host *h) {
    char striped[80];
    snprintf(striped, sizeof striped, "%s-s", h->region);
    keylock_pool_free(h->pool);
    keylock_striped_free(h->striped);
    keylock_unlink(h->region, NULL);
    keylock_unlink(striped, NULL);
    pthread_mutex_destroy(h->robust);
    munmap(h->robust, 4096);
    unlink(h->mutex_path);
    close(h->file);
    unlink(h->file_path);
}

static void *returns(void *arg) { return arg; }

/* Makes the process one that has had a second thread, as every program that needs a lock is. */
static void start_a_thread(void) {
    pthread_t t;
    FAIL_IF(pthread_create(&t, NULL, returns, NULL) != 0, "pthread_create");
    FAIL_IF(pthread_join(t, NULL) != 0, "pthread_join");
}

int main(int argc, char **argv) {
    const char *only = NULL;
    if (argc > 2 && strcmp(argv[1], "--only") == 0) {
        only = argv[2];
        argv += 2;
        argc -= 2;
    }
    long iters = argc > 1 ? atol(argv[1]) : 2000000;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    enum { CASES = 7 };
    static const char *const names[CASES] = {"c_pool",          "c_striped",     "c_pthread_array",
                                             "c_shm_pool",      "c_shm_striped", "c_robust_mutex",
                                             "c_flock"};
    double wall[CASES][64], cpu[CASES][64];
    uint64_t seed = (uint64_t)now_ns();
    keylock_pool *pool = keylock_pool_new();
    keylock_striped *striped = keylock_striped_new(STRIPES);
    if (iters < 1 || rounds < 1 || rounds > 64 || !pool || !striped) {
        fprintf(stderr, "usage: bench_c [--only NAME] [iters >= 1] [1 <= rounds <= 64]\n");
        return 2;
    }
    sink = seed;
    for (int i = 0; i < NKEYS; i++) {
        char text[KEY_LEN + 1];
        snprintf(text, sizeof text, "account:%08d", i);
        memcpy(keys[i], text, KEY_LEN);
    }
    for (int i = 0; i < STRIPES; i++) pthread_mutex_init(&mutexes[i].mutex, NULL);
    start_a_thread();
    host h;
    host_open(&h);

    if (only) {
        /* one case, for callgrind: the caller subtracts a run with fewer iterations */
        if (strcmp(only, "c_pool") == 0) run_pool(pool, iters);
        else if (strcmp(only, "c_striped") == 0) run_striped(striped, iters);
        else if (strcmp(only, "c_pthread_array") == 0) run_pthread(iters, seed);
        else if (strcmp(only, "c_shm_pool") == 0) run_shm_pool(&h, iters);
        else if (strcmp(only, "c_shm_striped") == 0) run_shm_striped(&h, iters);
        else if (strcmp(only, "c_robust_mutex") == 0) run_robust(&h, iters);
        else if (strcmp(only, "c_flock") == 0) run_flock(&h, iters);
        else if (strcmp(only, "none") != 0) {
            fprintf(stderr, "bench_c: unknown case %s\n", only);
            host_close(&h);
            return 2;
        }
    } else {
        /* warm up every path (page faults, the pool's entries, branch predictors) */
        run_pool(pool, iters / 4 + 1);
        run_striped(striped, iters / 4 + 1);
        run_pthread(iters / 4 + 1, seed);
        run_shm_pool(&h, iters / 4 + 1);
        run_shm_striped(&h, iters / 4 + 1);
        run_robust(&h, iters / 4 + 1);
        run_flock(&h, iters / 4 + 1);
        /* rounds interleave the cases, so a slow moment of the machine hits all of them */
        for (int r = 0; r < rounds; r++) {
            timing t[CASES];
            t[0] = run_pool(pool, iters);
            t[1] = run_striped(striped, iters);
            t[2] = run_pthread(iters, seed);
            t[3] = run_shm_pool(&h, iters);
            t[4] = run_shm_striped(&h, iters);
            t[5] = run_robust(&h, iters);
            t[6] = run_flock(&h, iters);
            for (int c = 0; c < CASES; c++) {
                wall[c][r] = t[c].wall;
                cpu[c][r] = t[c].cpu;
            }
        }
        for (int c = 0; c < CASES; c++) {
            qsort(wall[c], (size_t)rounds, sizeof(double), cmp_double);
            qsort(cpu[c], (size_t)rounds, sizeof(double), cmp_double);
            printf("%s %.3f\n", names[c], wall[c][rounds / 2]);
            printf("%s:cpu %.3f\n", names[c], cpu[c][rounds / 2]);
        }
    }

    host_close(&h);
    keylock_pool_free(pool);
    keylock_striped_free(striped);
    return 0;
}
