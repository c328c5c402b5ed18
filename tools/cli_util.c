/* tools/cli_util.c — small helpers shared by the `gemma` subcommands. */
#include "tools/cli_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool cli_parse_int(const char *s, long lo, long hi, int *out) {
    if (!s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

bool cli_parse_kv_type(const char *s, gm_kv_dtype *out) {
    if (!s) return false;
    if (!strcmp(s, "f32")) *out = GM_KV_DTYPE_F32;
    else if (!strcmp(s, "f16")) *out = GM_KV_DTYPE_F16;
    else return false;
    return true;
}

bool cli_parse_mib(const char *s, size_t *bytes) {
    int mib;
    if (!cli_parse_int(s, 1, 1 << 20, &mib)) return false;
    *bytes = (size_t)mib << 20;
    return true;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (buf && failed) {
        free(buf);
        buf = NULL;
        errno = EIO;
    } else if (!buf) {
        errno = ENOMEM;
    }
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}
