/* tests/test_threadpool.c — every item is processed exactly once, by a thread id in range, for
 * many back-to-back calls (the spinning path) and after the workers went to sleep (the condvar
 * path); NULL pool runs serially; grain is honoured; callers on several threads share a pool. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "kernels/threadpool.h"
#include "support/test.h"

typedef struct {
    atomic_int *hits;
    int n_threads;
    int64_t grain;
    atomic_int bad;
} job;

static void count_task(void *ctx, int64_t b, int64_t e, int thread) {
    job *j = ctx;
    if (thread < 0 || thread >= j->n_threads) atomic_fetch_add(&j->bad, 1);
    if (e <= b) atomic_fetch_add(&j->bad, 1);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&j->hits[i], 1);
}

static int run_once(gm_pool *p, int64_t n, int64_t grain) {
    atomic_int *hits = calloc((size_t)n + 1, sizeof *hits);
    job j = {hits, gm_pool_size(p), grain, 0};
    gm_pool_parallel_for(p, n, grain, count_task, &j);
    int bad = atomic_load(&j.bad);
    for (int64_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
    free(hits);
    return bad;
}

TEST(each_item_once) {
    for (int nt = 1; nt <= 4; nt++) {
        gm_pool *p = gm_pool_new(nt);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK_EQ_INT(gm_pool_size(p), nt);
        int bad = 0;
        const int64_t sizes[] = {1, 2, 3, 7, 64, 640, 1001, 262144};
        for (int rep = 0; rep < 200; rep++) bad += run_once(p, sizes[rep % 8], 1 + rep % 5);
        CHECK_EQ_INT(bad, 0);
        usleep(20000); /* let the workers fall asleep, then wake them */
        CHECK_EQ_INT(run_once(p, 1000, 1), 0);
        usleep(20000);
        CHECK_EQ_INT(run_once(p, 5, 1), 0);
        gm_pool_free(p);
    }
}

TEST(null_pool_serial) {
    CHECK_EQ_INT(gm_pool_size(NULL), 1);
    CHECK_EQ_INT(run_once(NULL, 333, 1), 0);
    gm_pool_parallel_for(NULL, 0, 1, count_task, NULL); /* n = 0: fn never called */
    gm_pool_free(NULL);
}

static void grain_task(void *ctx, int64_t b, int64_t e, int thread) {
    (void)thread;
    atomic_int *bad = ctx;
    if (b % 8 != 0 || ((e - b) % 8 != 0 && e != 1003)) atomic_fetch_add(bad, 1);
}

TEST(grain_respected) {
    gm_pool *p = gm_pool_new(2);
    atomic_int bad = 0;
    for (int rep = 0; rep < 50; rep++) gm_pool_parallel_for(p, 1003, 8, grain_task, &bad);
    CHECK_EQ_INT(atomic_load(&bad), 0);
    gm_pool_free(p);
    CHECK(gm_physical_cores() >= 1);
    gm_pool *d = gm_pool_new(0);
    CHECK(d != NULL && gm_pool_size(d) == gm_physical_cores());
    gm_pool_free(d);
}

/* Several threads share one pool (a server's engine and image encoder): every job still sees each of its
 * items once, by a thread id in range, whatever the interleaving; the sleeping path of a waiting caller too. */
typedef struct {
    gm_pool *p;
    int bad;
} sharer;

static void *share_main(void *arg) {
    sharer *sh = arg;
    const int64_t sizes[] = {3, 64, 1001, 20000};
    for (int rep = 0; rep < 400; rep++) {
        sh->bad += run_once(sh->p, sizes[rep % 4], 1 + rep % 3);
        if (rep % 100 == 99) usleep(3000); /* let the others' turns and the workers' sleep interleave */
    }
    return NULL;
}

TEST(shared_by_threads) {
    gm_threadpool *tp = NULL;
    gm_error err = {0};
    CHECK_OK(gm_threadpool_new(3, &tp, &err), &err);
    CHECK_EQ_INT(gm_threadpool_size(tp), 3);
    sharer sh[3] = {{tp, 0}, {tp, 0}, {tp, 0}};
    pthread_t th[3];
    for (int i = 0; i < 3; i++) CHECK(pthread_create(&th[i], NULL, share_main, &sh[i]) == 0);
    for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(sh[i].bad, 0);
    gm_threadpool_free(tp);
    CHECK(gm_threadpool_new(2000, &tp, &err) == GM_ERR_ARG && tp == NULL);
    CHECK_EQ_INT(gm_threadpool_size(NULL), 1);
}

int main(void) {
    RUN(each_item_once);
    RUN(shared_by_threads);
    RUN(null_pool_serial);
    RUN(grain_respected);
    return test_summary();
}
