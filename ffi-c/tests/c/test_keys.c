/*
 * The key fixture every front end checks (core/tests/keys.json, the path is argv[1]): C gives
 * every entry the bytes the fixture lists, or the same rejection as Python and Node.
 *
 * text entries go through keylock_key_from_utf16 (measured, then encoded into a buffer of the
 * exact size and into one of 3 bytes per code unit); int entries through keylock_key_from_i64
 * (an integer outside int64_t cannot reach C's API: strtoll reports it out of range, which is
 * the fixture's integer_out_of_range); bytes entries are their own key, checked by locking
 * them. A JSON parser for the fixture's subset of JSON (objects, arrays, strings without
 * escapes other than \" and \\, integers) is below.
 *
 * Closing line: "test_keys: N passed, M failed"; the exit status is non-zero on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <keylock.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a JSON subset ------------------------------------------------------------------------ */

typedef enum { J_NULL, J_NUM, J_STR, J_ARR, J_OBJ } jkind;

typedef struct json {
    jkind kind;
    long long num;
    char *str;           /* J_STR: NUL-terminated */
    struct json **items; /* J_ARR: values; J_OBJ: values, with keys[] beside them */
    char **keys;
    size_t n;
} json;

static const char *src;
static int parse_failed;

static void skip_ws(void) {
    while (*src == ' ' || *src == '\n' || *src == '\r' || *src == '\t') src++;
}

static json *new_json(jkind kind) {
    json *j = calloc(1, sizeof *j);
    if (!j) abort();
    j->kind = kind;
    return j;
}

static char *parse_string(void) {
    size_t cap = 16, len = 0;
    char *s = malloc(cap);
    if (!s || *src != '"') abort();
    src++;
    while (*src && *src != '"') {
        char c = *src++;
        if (c == '\\') {
            c = *src++;
            if (c != '"' && c != '\\') parse_failed = 1; /* not in the fixture's subset */
        }
        if (len + 2 > cap && !(s = realloc(s, cap *= 2))) abort();
        s[len++] = c;
    }
    if (*src != '"') parse_failed = 1;
    else src++;
    s[len] = '\0';
    return s;
}

static json *parse_value(void);

static void push(json *j, json *item, char *key) {
    j->items = realloc(j->items, (j->n + 1) * sizeof *j->items);
    j->keys = realloc(j->keys, (j->n + 1) * sizeof *j->keys);
    if (!j->items || !j->keys) abort();
    j->items[j->n] = item;
    j->keys[j->n] = key;
    j->n++;
}

static json *parse_value(void) {
    json *j;
    skip_ws();
    if (*src == '"') {
        j = new_json(J_STR);
        j->str = parse_string();
    } else if (*src == '[' || *src == '{') {
        int obj = *src++ == '{';
        j = new_json(obj ? J_OBJ : J_ARR);
        skip_ws();
        while (*src && *src != (obj ? '}' : ']') && !parse_failed) {
            char *key = NULL;
            if (obj) {
                key = parse_string();
                skip_ws();
                if (*src++ != ':') parse_failed = 1;
            }
            push(j, parse_value(), key);
            skip_ws();
            if (*src == ',') src++;
            skip_ws();
        }
        if (*src) src++;
    } else if (*src == '-' || (*src >= '0' && *src <= '9')) {
        char *end;
        j = new_json(J_NUM);
        j->num = strtoll(src, &end, 10);
        src = end;
    } else {
        parse_failed = 1;
        j = new_json(J_NULL);
    }
    return j;
}

static void free_json(json *j) {
    if (!j) return;
    for (size_t i = 0; i < j->n; i++) {
        free_json(j->items[i]);
        free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
    free(j->str);
    free(j);
}

/* The member `key` of object `j`, or NULL. */
static const json *get(const json *j, const char *key) {
    for (size_t i = 0; j && j->kind == J_OBJ && i < j->n; i++)
        if (strcmp(j->keys[i], key) == 0) return j->items[i];
    return NULL;
}

/* ---- the checks ---------------------------------------------------------------------------- */

static int passed, failed;

static uint8_t *hex_bytes(const char *hex, size_t repeat, size_t *len) {
    size_t one = strlen(hex) / 2;
    uint8_t *out = malloc(one * repeat + 1);
    if (!out) abort();
    for (size_t r = 0; r < repeat; r++)
        for (size_t i = 0; i < one; i++) {
            unsigned byte;
            sscanf(hex + 2 * i, "%2x", &byte);
            out[r * one + i] = (uint8_t)byte;
        }
    *len = one * repeat;
    return out;
}

/* Compares an outcome with the entry's: `got` bytes (or `got_error`, a fixture error name). */
static void report(const char *name, const json *entry, const uint8_t *got, size_t got_len,
                   const char *got_error) {
    const json *hex = get(entry, "hex"), *error = get(entry, "error"), *repeat = get(entry, "repeat");
    int ok;
    if (error) {
        ok = got_error && strcmp(got_error, error->str) == 0;
    } else {
        size_t len;
        uint8_t *want = hex_bytes(hex->str, repeat ? (size_t)repeat->num : 1, &len);
        ok = !got_error && got_len == len && memcmp(got, want, len) == 0;
        free(want);
    }
    if (ok) {
        passed++;
    } else {
        failed++;
        fprintf(stderr, "FAIL %s: got %s (%zu bytes), expected %s\n", name,
                got_error ? got_error : "bytes", got_len, error ? error->str : "other bytes");
    }
}

static void check_text(const char *name, const json *entry) {
    const json *text = get(entry, "text"), *repeat = get(entry, "repeat"), *tail = get(entry, "tail");
    size_t reps = repeat ? (size_t)repeat->num : 1, tails = tail ? tail->n : 0;
    size_t n = text->n * reps + tails, len = 0, measured = 0;
    uint16_t *units = malloc((n + 1) * sizeof *units);
    uint8_t *exact, *roomy;
    keylock_result r;
    if (!units) abort();
    for (size_t k = 0; k < reps; k++)
        for (size_t i = 0; i < text->n; i++) units[k * text->n + i] = (uint16_t)text->items[i]->num;
    for (size_t i = 0; i < tails; i++) units[text->n * reps + i] = (uint16_t)tail->items[i]->num;
    r = keylock_key_from_utf16(units, n, NULL, 0, &measured);
    if (r != KEYLOCK_OK) {
        /* A rejected text is rejected by every form of the call alike. */
        roomy = malloc(3 * n + 1);
        if (!roomy) abort();
        r = r == KEYLOCK_INVALID_ARGUMENT && measured == 0 &&
                    keylock_key_from_utf16(units, n, roomy, 3 * n, &len) == KEYLOCK_INVALID_ARGUMENT &&
                    len == 0
                ? KEYLOCK_INVALID_ARGUMENT
                : KEYLOCK_PANIC;
        report(name, entry, NULL, 0, r == KEYLOCK_INVALID_ARGUMENT ? "lone_surrogate" : "another result");
        free(roomy);
        free(units);
        return;
    }
    exact = malloc(measured + 1);
    roomy = malloc(3 * n + 1);
    if (!exact || !roomy) abort();
    r = keylock_key_from_utf16(units, n, exact, measured, &len);
    if (r == KEYLOCK_OK && len == measured &&
        keylock_key_from_utf16(units, n, roomy, 3 * n, &len) == KEYLOCK_OK && len == measured &&
        memcmp(exact, roomy, len) == 0) {
        report(name, entry, exact, len, NULL);
    } else {
        report(name, entry, NULL, 0, keylock_result_str(r));
    }
    free(exact);
    free(roomy);
    free(units);
}

static void check_int(const char *name, const json *entry) {
    const char *text = get(entry, "int")->str;
    char *end;
    long long v;
    uint8_t key[KEYLOCK_INT_KEY_LEN];
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno == ERANGE) {
        report(name, entry, NULL, 0, "integer_out_of_range");
        return;
    }
    if (*end != '\0' || keylock_key_from_i64((int64_t)v, key) != KEYLOCK_OK) {
        report(name, entry, NULL, 0, "a bad integer");
        return;
    }
    report(name, entry, key, sizeof key, NULL);
}

static void check_bytes(const char *name, const json *entry) {
    const json *repeat = get(entry, "repeat");
    size_t len;
    uint8_t *key = hex_bytes(get(entry, "bytes")->str, repeat ? (size_t)repeat->num : 1, &len);
    keylock_pool *pool = keylock_pool_new();
    keylock_acquisition acq = KEYLOCK_ACQUISITION_INIT;
    bool locked = false;
    /* Bytes are their own key: the pool takes exactly them. */
    if (pool && keylock_pool_lock(pool, key, len, &acq) == KEYLOCK_OK &&
        keylock_pool_is_locked(pool, key, len, &locked) == KEYLOCK_OK && locked &&
        keylock_pool_release(pool, &acq) == KEYLOCK_OK) {
        report(name, entry, key, len, NULL);
    } else {
        report(name, entry, NULL, 0, "a failed lock");
    }
    keylock_pool_free(pool);
    free(key);
}

int main(int argc, char **argv) {
    FILE *f;
    long size;
    char *text;
    json *doc;
    const json *keys;
    if (argc != 2 || !(f = fopen(argv[1], "rb"))) {
        fprintf(stderr, "usage: test_keys core/tests/keys.json\n");
        return 2;
    }
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) return 2;
    text[size] = '\0';
    fclose(f);
    src = text;
    doc = parse_value();
    keys = get(doc, "keys");
    if (parse_failed || !keys || keys->kind != J_ARR || keys->n == 0) {
        fprintf(stderr, "test_keys: %s is not the fixture\n", argv[1]);
        return 2;
    }
    for (size_t i = 0; i < keys->n; i++) {
        const json *e = keys->items[i];
        const char *name = get(e, "name")->str;
        if (get(e, "text")) check_text(name, e);
        else if (get(e, "int")) check_int(name, e);
        else check_bytes(name, e);
    }
    free_json(doc);
    free(text);
    printf("test_keys: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
