/* tests/test_pool_chunk.c — gm_pool_parallel_for_chunk: every item exactly once, each call one
 * whole chunk starting at a multiple of the chunk size, thread ids in range, for 1..3 threads and
 * many back-to-back calls (one thread or n <= chunk: one call on the caller). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kernels/threadpool.h"
#include "support/test.h"

typedef struct {
    atomic_int *hits;
    int64_t n, chunk;
    int n_threads;
    atomic_int bad;
} job;

static void task(void *ctx, int64_t b, int64_t e, int thread) {
    job *j = ctx;
    /* one thread (or n <= chunk): a single call over everything, on the caller */
    const bool serial = j->n_threads == 1 || j->n <= j->chunk;
    const int64_t want_end = serial ? j->n : b + j->chunk < j->n ? b + j->chunk : j->n;
    if (thread < 0 || thread >= j->n_threads || (serial ? b != 0 || thread != 0 : b % j->chunk != 0) || e != want_end)
        atomic_fetch_add(&j->bad, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&j->hits[i], 1);
}

static int run(gm_pool *p, int64_t n, int64_t chunk) {
    job j = {calloc((size_t)n + 1, sizeof(atomic_int)), n, chunk, gm_pool_size(p), 0};
    gm_pool_parallel_for_chunk(p, n, chunk, task, &j);
    int bad = atomic_load(&j.bad);
    for (int64_t i = 0; i < n; i++) bad += atomic_load(&j.hits[i]) != 1;
    free(j.hits);
    return bad;
}

TEST(each_item_once_in_whole_chunks) {
    const int64_t cases[][2] = {{1, 1}, {5, 16}, {16, 16}, {17, 16}, {1000, 7}, {262144, 1024}, {4099, 64}};
    for (int nt = 1; nt <= 3; nt++) {
        gm_pool *p = gm_pool_new(nt);
        CHECK(p != NULL);
        if (!p) continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int rep = 0; rep < 20; rep++)
                CHECK_MSG(run(p, cases[c][0], cases[c][1]) == 0, "%d threads, n %lld, chunk %lld", nt,
                          (long long)cases[c][0], (long long)cases[c][1]);
        gm_pool_free(p);
    }
}

int main(void) {
    RUN(each_item_once_in_whole_chunks);
    return test_summary();
}
