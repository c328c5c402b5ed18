/* tools/cli_util.c — small helpers shared by the `gemma` subcommands. */
#include "tools/cli_util.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    errno = 0;
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
    int failed = ferror(f), read_errno = errno; /* fread's reason: EISDIR for a folder */
    fclose(f);
    if (buf && failed) {
        free(buf);
        buf = NULL;
        errno = read_errno ? read_errno : EIO;
    } else if (!buf) {
        errno = ENOMEM;
    }
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}

/* ---------------------------------------------------------------- stdout */

static int stdout_errno; /* the first write error seen on stdout (0: none yet, -1: reason unknown) */

/* SIGPIPE is ignored: a write to a pipe whose reader has gone (`gemma run ... | head -1`) then
 * fails with EPIPE instead of killing the process, so every command goes through the same path as
 * for any other write error: the generation stops at the next token, resources are released, and
 * the exit status is 1. For EPIPE that happens quietly (the reader closing early is the reader's
 * choice, as with the default SIGPIPE death: no error spew after `| head`); other errors (ENOSPC
 * for /dev/full, EBADF for a closed stdout) print one line. Ignoring the signal ourselves also
 * makes the behaviour the same whether or not the parent process left SIGPIPE ignored.
 *
 * A closed fd 0, 1 or 2 (`gemma run ... >&-`) is filled with /dev/null opened read-only (0, 1) or
 * write-only (2): otherwise the next open() — the model file, a --save-logits file — would get
 * fd 1 and the output would be written into it. Read-only, fd 1 still refuses writes (EBADF), so
 * a closed stdout is reported as an error rather than silently discarded. */
void cli_stdout_setup(void) {
    signal(SIGPIPE, SIG_IGN);
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            int r = open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY);
            if (r >= 0 && r != fd) close(r); /* cannot happen: open takes the lowest free fd */
        }
}

/* The reason for a write error whose errno was lost (a printf that flushed in the middle of a
 * command, errno overwritten since): a closed (or read-only placeholder) fd 1, a pipe without a
 * reader, or else -1 (unknown: /dev/full, a full disk). */
static int stdout_lost_errno(void) {
    int fl = fcntl(1, F_GETFL);
    if (fl == -1 || (fl & O_ACCMODE) == O_RDONLY) return EBADF;
    struct pollfd p = {.fd = 1, .events = POLLOUT};
    if (poll(&p, 1, 0) == 1 && (p.revents & POLLERR)) return EPIPE;
    return -1; /* unknown */
}

/* rc: what fflush returned, with errno cleared before it. */
static bool stdout_check(int rc) {
    if ((rc != 0 || ferror(stdout)) && !stdout_errno) stdout_errno = rc != 0 && errno ? errno : stdout_lost_errno();
    return !stdout_errno;
}

bool cli_stdout_flush(void) {
    if (stdout_errno) return false;
    errno = 0;
    return stdout_check(fflush(stdout));
}

int cli_stdout_finish(const char *cmd, int status) {
    if (!stdout_errno) {
        errno = 0;
        stdout_check(fflush(stdout));
    }
    if (!stdout_errno) {
        errno = 0;
        if (fclose(stdout) != 0) stdout_errno = errno ? errno : stdout_lost_errno();
    }
    if (!stdout_errno) return status;
    if (stdout_errno == -1) fprintf(stderr, "gemma %s: cannot write the output\n", cmd);
    else if (stdout_errno != EPIPE) fprintf(stderr, "gemma %s: cannot write the output: %s\n", cmd, strerror(stdout_errno));
    return status ? status : 1;
}
