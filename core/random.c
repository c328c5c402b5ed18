/* core/random.c — see random.h. */
#include "core/random.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/random.h>
#endif

/* getrandom without blocking (an early-boot pool that is not ready falls through to urandom). */
static bool from_getrandom(void *buf, size_t len) {
#ifdef __linux__
    char *p = buf;
    while (len > 0) {
        const ssize_t got = getrandom(p, len, GRND_NONBLOCK);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        len -= (size_t)got;
    }
    return true;
#else
    (void)buf, (void)len;
    return false;
#endif
}

static bool from_urandom(void *buf, size_t len) {
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f) return false;
    const bool ok = fread(buf, 1, len, f) == len;
    fclose(f);
    return ok;
}


/* Whatever varies between processes and calls: both clocks, the pid, a stack and a caller address (ASLR). */
static void from_clocks(uint64_t *out, size_t n) {
    struct timespec rt = {0}, mono = {0};
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    uint64_t x = (uint64_t)rt.tv_sec * 1000000007ull ^ (uint64_t)rt.tv_nsec ^ (uint64_t)mono.tv_nsec << 21 ^
                 (uint64_t)mono.tv_sec << 40 ^ (uint64_t)getpid() << 17 ^ (uint64_t)(uintptr_t)&rt ^
                 (uint64_t)(uintptr_t)out << 7;
    for (size_t i = 0; i < n; i++) out[i] = gm_splitmix64(&x);
}

void gm_random_words(uint64_t *out, size_t n) {
    if (from_getrandom(out, n * sizeof *out) || from_urandom(out, n * sizeof *out)) return;
    from_clocks(out, n);
}
