/*
 * The C child of the cross-language process tests (.ci/xlang/run.py drives it; child.py and
 * child.js speak the same protocol). It opens the scope named by KEYLOCK_XLANG_SCOPE through
 * keylock_pool_open, prints "ready c PID", then runs one command per line of stdin and answers
 * on stdout. The protocol and the store are described in .ci/xlang/README.md.
 *
 * Only this file's `count` and `units` may use threads (THREADS > 1): several threads of one
 * process on one lock object, which is the core's Rust code running on as many threads.
 */
#define _POSIX_C_SOURCE 200809L

#include <keylock.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_KEYS 64
#define MAX_THREADS 16
#define MAX_HELD 256

static keylock_pool *pool;
static keylock_semaphore *sem; /* opened by the first `units` */
static const char *dir;     /* KEYLOCK_XLANG_DIR: logs, and the counter files of the file store */
static int redis_port;      /* KEYLOCK_XLANG_STORE=redis:PORT, else 0: the file store */
static int broken;          /* KEYLOCK_XLANG_BREAK=1: skip the lock (self-check only) */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *fmt, ...) {
    va_list ap;
    pthread_mutex_lock(&out_mu);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
}

/* An invariant broke: say so and stop; the driver fails the test on the line. */
static void fail(const char *fmt, ...) {
    va_list ap;
    char msg[512];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    say("fail c %d: %s", (int)getpid(), msg);
    _exit(3);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void pause_us(long us) {
    if (us <= 0) return;
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
}

/* ---- the store: a record "COUNT FENCE" per key, in a file or in Redis ---------------------- */

typedef struct {
    int fds[MAX_KEYS]; /* file store: one open file per key index, -1 until used */
    int sock;          /* Redis store: this thread's connection, -1 until used */
} store;

static void store_init(store *s) {
    for (int i = 0; i < MAX_KEYS; i++) s->fds[i] = -1;
    s->sock = -1;
}

static void store_close(store *s) {
    for (int i = 0; i < MAX_KEYS; i++)
        if (s->fds[i] >= 0) close(s->fds[i]);
    if (s->sock >= 0) close(s->sock);
}

static void send_all(int sock, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(sock, buf, len);
        if (n <= 0) fail("redis write: %s", strerror(errno));
        buf += n;
        len -= (size_t)n;
    }
}

/* Reads one RESP reply line (through CRLF) into `line`, then a bulk body if the line says so.
 * Returns the body length (-1 for a nil bulk or a status reply, whose text is in `line`). */
static long resp_read(int sock, char *line, size_t cap, char *body, size_t body_cap) {
    size_t n = 0;
    char c;
    while (n + 1 < cap) {
        if (read(sock, &c, 1) != 1) fail("redis read: %s", strerror(errno));
        line[n++] = c;
        if (n >= 2 && line[n - 2] == '\r' && line[n - 1] == '\n') break;
    }
    line[n] = 0;
    if (line[0] == '-') fail("redis error: %s", line);
    if (line[0] != '$') return -1;
    long len = strtol(line + 1, NULL, 10);
    if (len < 0) return -1;
    if ((size_t)len + 2 > body_cap) fail("redis reply too long");
    size_t got = 0;
    while (got < (size_t)len + 2) {
        ssize_t r = read(sock, body + got, (size_t)len + 2 - got);
        if (r <= 0) fail("redis read: %s", strerror(errno));
        got += (size_t)r;
    }
    body[len] = 0;
    return len;
}

static int redis_connect(void) {
    int sock = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)redis_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (sock < 0 || connect(sock, (struct sockaddr *)&a, sizeof a) != 0)
        fail("redis connect: %s", strerror(errno));
    return sock;
}

static void record_read(store *s, int k, uint64_t *count, uint64_t *fence) {
    char buf[128];
    *count = 0;
    *fence = 0;
    if (redis_port) {
        char cmd[128], line[64], rkey[32];
        if (s->sock < 0) s->sock = redis_connect();
        snprintf(rkey, sizeof rkey, "xlang:ctr:k%d", k);
        int n = snprintf(cmd, sizeof cmd, "*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n",
                         (int)strlen(rkey), rkey);
        send_all(s->sock, cmd, (size_t)n);
        if (resp_read(s->sock, line, sizeof line, buf, sizeof buf) < 0) return;
    } else {
        if (s->fds[k] < 0) {
            char path[512];
            snprintf(path, sizeof path, "%s/ctr.k%d", dir, k);
            s->fds[k] = open(path, O_RDWR | O_CREAT, 0600);
            if (s->fds[k] < 0) fail("open %s: %s", path, strerror(errno));
        }
        ssize_t n = pread(s->fds[k], buf, sizeof buf - 1, 0);
        if (n < 0) fail("pread: %s", strerror(errno));
        buf[n] = 0;
        if (n == 0) return;
    }
    if (sscanf(buf, "%lu %lu", (unsigned long *)count, (unsigned long *)fence) != 2)
        fail("record of k%d unreadable: '%s'", k, buf);
}

static void record_write(store *s, int k, uint64_t count, uint64_t fence) {
    char rec[64];
    int len = snprintf(rec, sizeof rec, "%020lu %020lu\n", (unsigned long)count,
                       (unsigned long)fence);
    if (redis_port) {
        char cmd[160], line[64], body[16], rkey[32];
        snprintf(rkey, sizeof rkey, "xlang:ctr:k%d", k);
        int n = snprintf(cmd, sizeof cmd, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n",
                         (int)strlen(rkey), rkey, len, rec);
        send_all(s->sock, cmd, (size_t)n);
        resp_read(s->sock, line, sizeof line, body, sizeof body);
        if (strncmp(line, "+OK", 3) != 0) fail("redis SET: %s", line);
    } else if (pwrite(s->fds[k], rec, (size_t)len, 0) != len) {
        fail("pwrite: %s", strerror(errno));
    }
}

/* ---- acquisitions ---------------------------------------------------------------------------- */

static void key_of(int k, char *buf, size_t cap, size_t *len) {
    *len = (size_t)snprintf(buf, cap, "k%d", k);
}

static keylock_result take(const char *key, size_t len, keylock_mode mode, uint64_t timeout_ms,
                           uint64_t lease_ms, keylock_acquisition *acq) {
    keylock_lock_options o = KEYLOCK_LOCK_OPTIONS_INIT;
    o.mode = mode;
    o.lease_ns = lease_ms * 1000000u;
    o.timeout_ns = timeout_ms * 1000000u;
    *acq = (keylock_acquisition)KEYLOCK_ACQUISITION_INIT;
    return keylock_pool_lock_with(pool, (const uint8_t *)key, len, &o, acq);
}

static void give_back(keylock_acquisition *acq) {
    keylock_result r = keylock_pool_release(pool, acq);
    if (r != KEYLOCK_OK) fail("release: %s", keylock_result_str(r));
}

/* ---- count ----------------------------------------------------------------------------------- */

typedef struct {
    int exclusive, iters, keys, offset;
    long hold_us;
    char *log;
    size_t log_len, log_cap;
} counter;

/* Room for one more log line. */
static void log_reserve(counter *c) {
    if (c->log_cap - c->log_len < 96) {
        c->log_cap = c->log_cap * 2 + 4096;
        c->log = realloc(c->log, c->log_cap);
        if (!c->log) fail("out of memory");
    }
}

static void log_line(counter *c, char kind, int k, uint64_t t0, uint64_t t1, uint64_t fence) {
    log_reserve(c);
    c->log_len += (size_t)snprintf(c->log + c->log_len, c->log_cap - c->log_len,
                                   "%c k%d %lu %lu %lu\n", kind, k, (unsigned long)t0,
                                   (unsigned long)t1, (unsigned long)fence);
}

/* Iteration i of a counter with `offset` works on key (i + offset) % keys, and writes (an
 * exclusive read-modify-write of the record) in exclusive mode, or in shared mode when
 * ((i + offset) / keys) % 3 == 0; otherwise it reads under a shared hold. run.py computes the
 * expected counts from the same rule. */
static void *count_run(void *arg) {
    counter *c = arg;
    store s;
    store_init(&s);
    for (int i = 0; i < c->iters; i++) {
        int k = (i + c->offset) % c->keys;
        int write = c->exclusive || ((i + c->offset) / c->keys) % 3 == 0;
        char key[16];
        size_t len;
        key_of(k, key, sizeof key, &len);
        keylock_acquisition acq;
        uint64_t fence = 0, count, last;
        if (!broken) {
            keylock_result r = take(key, len, write ? KEYLOCK_EXCLUSIVE : KEYLOCK_SHARED, 30000,
                                    0, &acq);
            if (r != KEYLOCK_OK) fail("acquire k%d: %s", k, keylock_result_str(r));
            if (acq.owner_died) fail("owner_died without a death (k%d)", k);
            fence = acq.fence;
        }
        uint64_t t0 = now_ns();
        record_read(&s, k, &count, &last);
        if (broken) fence = write ? last + 1 : last;
        if (write && fence <= last) fail("fence of k%d did not rise: %lu after %lu", k,
                                         (unsigned long)fence, (unsigned long)last);
        if (!write && fence < last) fail("shared fence of k%d below the record: %lu < %lu", k,
                                         (unsigned long)fence, (unsigned long)last);
        pause_us(c->hold_us);
        if (write) record_write(&s, k, count + 1, fence);
        uint64_t t1 = now_ns();
        if (!broken) give_back(&acq);
        log_line(c, write ? 'x' : 's', k, t0, t1, fence);
    }
    store_close(&s);
    return NULL;
}

static void cmd_count(const char *mode, int iters, int keys, int id, long hold_us, int threads) {
    if (keys < 1 || keys > MAX_KEYS || threads < 1 || threads > MAX_THREADS)
        fail("bad count arguments");
    counter cs[MAX_THREADS];
    pthread_t ts[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        cs[t] = (counter){strcmp(mode, "exclusive") == 0, iters, keys, id + t, hold_us, NULL, 0, 0};
        if (pthread_create(&ts[t], NULL, count_run, &cs[t]) != 0) fail("pthread_create");
    }
    char path[512];
    snprintf(path, sizeof path, "%s/log.%d", dir, id);
    FILE *f = fopen(path, "w");
    if (!f) fail("open %s: %s", path, strerror(errno));
    for (int t = 0; t < threads; t++) {
        pthread_join(ts[t], NULL);
        if (cs[t].log_len) fwrite(cs[t].log, 1, cs[t].log_len, f);
        free(cs[t].log);
    }
    fclose(f);
    say("counted %d", iters * threads);
}

/* ---- units ----------------------------------------------------------------------------------- */

/* Iteration i of a counter with `offset` takes 1 + (i + offset) % 3 units of key
 * (i + offset) % keys from the semaphore, holds them hold_us, and logs "u KEY T0 T1 FENCE WEIGHT".
 * The fences of one thread's acquisitions of a key must rise (granted one after the other). */
static void *units_run(void *arg) {
    counter *c = arg;
    uint64_t last[MAX_KEYS] = {0};
    for (int i = 0; i < c->iters; i++) {
        int k = (i + c->offset) % c->keys;
        uint32_t weight = 1 + (uint32_t)((i + c->offset) % 3);
        char key[16];
        size_t len;
        key_of(k, key, sizeof key, &len);
        keylock_acquisition acq = KEYLOCK_ACQUISITION_INIT;
        uint64_t fence;
        if (broken) {
            /* distinct, so that only the units can tell */
            fence = 1000000000000000u + (uint64_t)c->offset * 1000000u + (uint64_t)i;
        } else {
            keylock_result r = keylock_semaphore_acquire_timeout(
                sem, (const uint8_t *)key, len, weight, (uint64_t)30000 * 1000000u, &acq);
            if (r != KEYLOCK_OK) fail("units: %u of k%d: %s", weight, k, keylock_result_str(r));
            if (acq.weight != weight) fail("units: asked %u of k%d, got %u", weight, k,
                                           (unsigned)acq.weight);
            fence = acq.fence;
        }
        uint64_t t0 = now_ns();
        if (fence <= last[k]) fail("semaphore fence of k%d did not rise: %lu after %lu", k,
                                   (unsigned long)fence, (unsigned long)last[k]);
        last[k] = fence;
        pause_us(c->hold_us);
        uint64_t t1 = now_ns();
        if (!broken) {
            keylock_result r = keylock_semaphore_release(sem, &acq);
            if (r != KEYLOCK_OK) fail("units: release of k%d: %s", k, keylock_result_str(r));
        }
        log_reserve(c);
        c->log_len += (size_t)snprintf(c->log + c->log_len, c->log_cap - c->log_len,
                                       "u k%d %lu %lu %lu %u\n", k, (unsigned long)t0,
                                       (unsigned long)t1, (unsigned long)fence, weight);
    }
    return NULL;
}

/* units ITERS KEYS ID HOLD_US PERMITS [THREADS]: the semaphore at the scope (opened once, with
 * PERMITS), thread t counting with offset ID + t; answers "counted N". */
static void cmd_units(int iters, int keys, int id, long hold_us, uint32_t permits, int threads) {
    if (keys < 1 || keys > MAX_KEYS || threads < 1 || threads > MAX_THREADS)
        fail("bad units arguments");
    if (!sem) {
        keylock_result r = keylock_semaphore_open(getenv("KEYLOCK_XLANG_SCOPE"), permits, NULL,
                                                  &sem);
        if (r != KEYLOCK_OK) fail("semaphore open: %s", keylock_result_str(r));
    }
    counter cs[MAX_THREADS];
    pthread_t ts[MAX_THREADS];
    for (int t = 0; t < threads; t++) {
        cs[t] = (counter){0, iters, keys, id + t, hold_us, NULL, 0, 0};
        if (pthread_create(&ts[t], NULL, units_run, &cs[t]) != 0) fail("pthread_create");
    }
    char path[512];
    snprintf(path, sizeof path, "%s/log.%d", dir, id);
    FILE *f = fopen(path, "w");
    if (!f) fail("open %s: %s", path, strerror(errno));
    for (int t = 0; t < threads; t++) {
        pthread_join(ts[t], NULL);
        if (cs[t].log_len) fwrite(cs[t].log, 1, cs[t].log_len, f);
        free(cs[t].log);
    }
    fclose(f);
    say("counted %d", iters * threads);
}

/* ---- hold, acquire, holdmany, release ------------------------------------------------------ */

static keylock_acquisition held[MAX_HELD];
static int n_held;
static store main_store;

static int key_index(const char *key) {
    if (key[0] != 'k') fail("store keys are k0..k%d, not %s", MAX_KEYS - 1, key);
    int k = atoi(key + 1);
    if (k < 0 || k >= MAX_KEYS) fail("bad key %s", key);
    return k;
}

/* hold KEY LEASE_MS: take KEY, mark its record with the fence (which must rise), and keep it. */
static void cmd_hold(const char *key, uint64_t lease_ms) {
    int k = key_index(key);
    keylock_acquisition *acq = &held[n_held];
    keylock_result r = take(key, strlen(key), KEYLOCK_EXCLUSIVE, 30000, lease_ms, acq);
    if (r != KEYLOCK_OK) fail("hold %s: %s", key, keylock_result_str(r));
    uint64_t count, last;
    record_read(&main_store, k, &count, &last);
    if (acq->fence <= last) fail("fence of %s did not rise: %lu after %lu", key,
                                 (unsigned long)acq->fence, (unsigned long)last);
    record_write(&main_store, k, count, acq->fence);
    n_held++;
    say("held %lu %d", (unsigned long)acq->fence, acq->owner_died ? 1 : 0);
}

/* acquire KEY TIMEOUT_MS LEASE_MS: take KEY, note the time, add one to its record (the fence
 * must rise), release; answer "got FENCE DIED T_NS". */
static void cmd_acquire(const char *key, uint64_t timeout_ms, uint64_t lease_ms) {
    int k = key_index(key);
    keylock_acquisition acq;
    keylock_result r = take(key, strlen(key), KEYLOCK_EXCLUSIVE, timeout_ms, lease_ms, &acq);
    uint64_t t = now_ns();
    if (r != KEYLOCK_OK) {
        say("error %s", keylock_result_str(r));
        return;
    }
    uint64_t count, last;
    record_read(&main_store, k, &count, &last);
    if (acq.fence <= last) fail("fence of %s did not rise: %lu after %lu", key,
                                (unsigned long)acq.fence, (unsigned long)last);
    record_write(&main_store, k, count + 1, acq.fence);
    give_back(&acq);
    say("got %lu %d %lu", (unsigned long)acq.fence, acq.owner_died ? 1 : 0, (unsigned long)t);
}

/* holdmany PREFIX N: take PREFIX0 .. PREFIX(N-1) without waiting, and keep them. */
static void cmd_holdmany(const char *prefix, int n) {
    for (int i = 0; i < n; i++) {
        char key[64];
        if (n_held >= MAX_HELD) fail("too many holds");
        int len = snprintf(key, sizeof key, "%s%d", prefix, i);
        keylock_result r = take(key, (size_t)len, KEYLOCK_EXCLUSIVE, 0, 0, &held[n_held]);
        if (r != KEYLOCK_OK) {
            say("error %s %d", keylock_result_str(r), i);
            return;
        }
        n_held++;
    }
    say("heldmany %d", n);
}

/* release: releases what hold and holdmany kept; answers "released", followed by the status
 * name of each release that was refused (a stale acquisition: force-unlocked, lease ended). */
static void cmd_release(void) {
    char refused[512] = "";
    while (n_held > 0) {
        keylock_result r = keylock_pool_release(pool, &held[--n_held]);
        if (r != KEYLOCK_OK) {
            const char *name = keylock_result_str(r);
            size_t len = strcspn(name, ":"), at = strlen(refused);
            if (at + len + 2 < sizeof refused)
                snprintf(refused + at, sizeof refused - at, " %.*s", (int)len, name);
        }
    }
    say("released%s", refused);
}

int main(void) {
    const char *scope = getenv("KEYLOCK_XLANG_SCOPE");
    const char *store_spec = getenv("KEYLOCK_XLANG_STORE");
    const char *cap = getenv("KEYLOCK_XLANG_CAPACITY");
    const char *brk = getenv("KEYLOCK_XLANG_BREAK");
    dir = getenv("KEYLOCK_XLANG_DIR");
    if (!scope || !dir || !store_spec) fail("KEYLOCK_XLANG_SCOPE, _DIR and _STORE must be set");
    if (strncmp(store_spec, "redis:", 6) == 0) redis_port = atoi(store_spec + 6);
    broken = brk && strcmp(brk, "1") == 0;
    keylock_open_options o = {0};
    if (cap && strncmp(scope, "shm:", 4) == 0) o.capacity = (size_t)strtoul(cap, NULL, 10);
    /* A semaphore scope (KEYLOCK_XLANG_SEMAPHORE=1) is not a pool's: only `units` opens it. */
    const char *sem_only = getenv("KEYLOCK_XLANG_SEMAPHORE");
    if (!sem_only || strcmp(sem_only, "1") != 0) {
        keylock_result r = keylock_pool_open(scope, &o, &pool);
        if (r != KEYLOCK_OK) fail("open %s: %s", scope, keylock_result_str(r));
    }
    store_init(&main_store);
    say("ready c %d", (int)getpid());
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "", a[128] = "";
        long b = 0, c = 0, d = 0, e = 0, f = 0;
        sscanf(line, "%31s %127s %ld %ld %ld %ld %ld", cmd, a, &b, &c, &d, &e, &f);
        if (strcmp(cmd, "count") == 0) cmd_count(a, (int)b, (int)c, (int)d, e, f ? (int)f : 1);
        else if (strcmp(cmd, "units") == 0)
            cmd_units(atoi(a), (int)b, (int)c, d, (uint32_t)e, f ? (int)f : 1);
        else if (strcmp(cmd, "hold") == 0) cmd_hold(a, (uint64_t)b);
        else if (strcmp(cmd, "acquire") == 0) cmd_acquire(a, (uint64_t)b, (uint64_t)c);
        else if (strcmp(cmd, "holdmany") == 0) cmd_holdmany(a, (int)b);
        else if (strcmp(cmd, "release") == 0) cmd_release();
        else if (strcmp(cmd, "quit") == 0) break;
        else fail("unknown command: %s", line);
    }
    store_close(&main_store);
    keylock_semaphore_free(sem);
    keylock_pool_free(pool);
    return 0;
}
