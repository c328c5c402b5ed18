/* bench/bench_pool.c — per-call latency of gm_pool_parallel_for with trivial tasks (2 items, so
 * both threads take one): what one synchronisation point of a decode step costs. Not a test.
 * Build: cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -I. bench/bench_pool.c <dir>/libgemma.a -lm -lpthread */
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include "kernels/threadpool.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static atomic_int hits;
static void task(void *ctx, int64_t b, int64_t e, int thread) {
    (void)ctx, (void)thread;
    atomic_fetch_add_explicit(&hits, (int)(e - b), memory_order_relaxed);
}

int main(void) {
    for (int nt = 1; nt <= 2; nt++) {
        gm_pool *p = gm_pool_new(nt);
        const int calls = 200000;
        for (int i = 0; i < 1000; i++) gm_pool_parallel_for(p, 2, 1, task, NULL);
        double best = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            const double t0 = now();
            for (int i = 0; i < calls; i++) gm_pool_parallel_for(p, 2, 1, task, NULL);
            const double dt = (now() - t0) / calls;
            best = dt < best ? dt : best;
        }
        printf("threads %d: %.3f us per parallel_for (best of 5 x %d calls)\n", nt, best * 1e6, calls);
        gm_pool_free(p);
    }
    return 0;
}
