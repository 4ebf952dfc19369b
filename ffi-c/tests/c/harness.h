/*
 * The C tests' harness (test_keylock.c, test_metrics.c, test_scope.c, test_semaphore.c): checks
 * that count a failure in the current test and carry on, a watchdog (alarm) that turns a
 * deadlock or hang into a failure, and small time, key and random helpers.
 *
 * A test defines _POSIX_C_SOURCE before its first include (nanosleep, clock_gettime), and
 * HARNESS_NAME, its program's name as the watchdog prints it, before including this:
 *
 *     #define HARNESS_NAME "test_keylock"
 *     #include "harness.h"
 *
 * Every function is static inline, so a test that uses only some of them still builds without
 * warnings under -Wall -Wextra -Werror. The runner (which runs each test, resets checks_failed,
 * prints its line and the closing count) stays in each test: their lines differ.
 */
#ifndef KEYLOCK_TEST_HARNESS_H
#define KEYLOCK_TEST_HARNESS_H

#ifndef HARNESS_NAME
#error "define HARNESS_NAME (the test program's name) before including harness.h"
#endif

#include <keylock.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* ---- checks ------------------------------------------------------------------------------ */

/* The failed checks in the current test. Atomic, so that checks in the tests' threads count. */
static int checks_failed;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);        \
            __atomic_add_fetch(&checks_failed, 1, __ATOMIC_SEQ_CST);                          \
        }                                                                                     \
    } while (0)

#define CHECK_RESULT(expr, expected)                                                          \
    do {                                                                                      \
        keylock_result got_ = (expr);                                                         \
        keylock_result want_ = (expected);                                                    \
        if (got_ != want_) {                                                                  \
            fprintf(stderr, "  %s:%d: %s\n    returned %s\n    expected %s\n", __FILE__,      \
                    __LINE__, #expr, keylock_result_str(got_), keylock_result_str(want_));    \
            __atomic_add_fetch(&checks_failed, 1, __ATOMIC_SEQ_CST);                          \
        }                                                                                     \
    } while (0)

#define OK(expr) CHECK_RESULT(expr, KEYLOCK_OK)

/* ---- the watchdog ------------------------------------------------------------------------ */

/* The SIGALRM handler: says which test hung (async-signal-safe: write, _exit), exit status 3. */
static inline void watchdog(int sig) {
    static const char msg[] = HARNESS_NAME ": watchdog fired: a deadlock or hang (FAILED)\n";
    (void)sig;
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) _exit(3);
    _exit(3);
}

/* Fails the whole program through watchdog if it is still running `seconds` from now. */
static inline void watchdog_arm(unsigned seconds) {
    signal(SIGALRM, watchdog);
    alarm(seconds);
}

/* ---- time, keys, random numbers ---------------------------------------------------------- */

static inline void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static inline uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#define MS(n) ((uint64_t)(n) * 1000000u) /* milliseconds in nanoseconds */
#define K(s) ((const uint8_t *)(s)), (sizeof(s) - 1) /* a string literal as key, len */

/* Every blocking acquire waits at most this long (a timed acquire): a hang fails instead. */
#define PATIENCE MS(20000)

/* A small deterministic random number generator per thread (xorshift). */
static inline uint32_t next_random(uint32_t *state) {
    uint32_t x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *state = x;
}

#endif /* KEYLOCK_TEST_HARNESS_H */
