/* bench/membw.c — read bandwidth of this machine, 1..N threads, for the "bytes per token against
 * bandwidth" arithmetic of docs/performance.md. Not a test.
 *
 * Build: cmake --build <dir> --target membw
 * Run:   <dir>/membw [MiB=512] [max_threads=2]
 *
 * Each thread sums its own contiguous share of one buffer (XOR of 64-bit words, which the compiler
 * vectorises), as a decode step streams its share of the weight rows. Best of 7 passes. The buffer
 * asks for 2 MiB pages (MADV_HUGEPAGE), as the model mapping does. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
    double t0, t1;
    pthread_barrier_t *bar;
} job;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *reader(void *arg) {
    job *j = arg;
    pthread_barrier_wait(j->bar);
    j->t0 = now();
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i + 4 <= j->n; i += 4) {
        a ^= j->p[i];
        b ^= j->p[i + 1];
        c ^= j->p[i + 2];
        d ^= j->p[i + 3];
    }
    j->sum = a ^ b ^ c ^ d;
    j->t1 = now();
    return NULL;
}

int main(int argc, char **argv) {
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 512;
    int max_t = argc > 2 ? atoi(argv[2]) : 2;
    if (mib < 1 || max_t < 1 || max_t > 64) {
        fprintf(stderr, "usage: membw [MiB>=1] [threads 1..64]\n");
        return 2;
    }
    size_t words = (mib << 20) / 8;
    /* 2 MiB pages, as the model's weights get (formats/mmap.c): 4 KiB pages add TLB misses */
    uint64_t *buf = aligned_alloc(2u << 20, (words * 8 + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1));
    if (buf) madvise(buf, words * 8, MADV_HUGEPAGE);
    if (!buf) {
        fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < words; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    printf("| threads | read GB/s (%zu MiB, best of 7) |\n|---:|---:|\n", mib);
    for (int t = 1; t <= max_t; t++) {
        double best = 1e30;
        uint64_t chk = 0;
        for (int pass = 0; pass < 7; pass++) {
            pthread_barrier_t bar;
            pthread_barrier_init(&bar, NULL, (unsigned)t);
            job jobs[64];
            pthread_t th[64];
            for (int k = 0; k < t; k++) {
                size_t lo = words * k / t, hi = words * (k + 1) / t;
                jobs[k] = (job){buf + lo, hi - lo, 0, 0, 0, &bar};
                pthread_create(&th[k], NULL, reader, &jobs[k]);
            }
            double t0 = 1e30, t1 = 0; /* first start to last end, timed by the readers themselves */
            for (int k = 0; k < t; k++) {
                pthread_join(th[k], NULL);
                chk ^= jobs[k].sum;
                t0 = jobs[k].t0 < t0 ? jobs[k].t0 : t0;
                t1 = jobs[k].t1 > t1 ? jobs[k].t1 : t1;
            }
            const double dt = t1 - t0;
            pthread_barrier_destroy(&bar);
            if (dt < best) best = dt;
        }
        printf("| %d | %.1f |\n", t, words * 8 / best / 1e9);
        if (chk == 42) printf("(checksum %llu)\n", (unsigned long long)chk); /* keeps the sums live */
    }
    free(buf);
    return 0;
}
