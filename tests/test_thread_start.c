/* tests/test_thread_start.c — a thread starts, a two-thread pool runs a job and frees, within a
 * deadline. Regression test for the "two-thread hang" under qemu-aarch64: the emulator was given a
 * sysroot whose dynamic loader came from another glibc build than the libc.so.6 it then loaded, and
 * pthread_create spun forever walking the loader's stack-cache list (docs/arm.md). Natively this
 * cannot hang; under the old emulator line it failed here after the deadline instead of stalling the
 * suite until ctest's timeout, with a message that says where to look. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "kernels/threadpool.h"
#include "support/test.h"

#define DEADLINE_S 60 /* seconds; the whole test takes well under one, also under qemu */
#define STR_(x) #x
#define STR(x) STR_(x)

static void on_deadline(int sig) {
    (void)sig;
    static const char msg[] = "FAIL thread start: no progress in " STR(DEADLINE_S) " s (under qemu-user: do the dynamic "
                              "loader and libc.so.6 come from the same glibc build? see docs/arm.md)\n";
    if (write(2, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(1);
}

static void *mark(void *arg) {
    atomic_store((atomic_int *)arg, 1);
    return NULL;
}

static void add_items(void *ctx, int64_t b, int64_t e, int thread) {
    (void)thread;
    atomic_fetch_add((atomic_llong *)ctx, e - b);
}

TEST(raw_thread_starts) {
    atomic_int ran = 0;
    pthread_t t;
    CHECK_EQ_INT(pthread_create(&t, NULL, mark, &ran), 0);
    CHECK_EQ_INT(pthread_join(t, NULL), 0);
    CHECK_EQ_INT(atomic_load(&ran), 1);
}

TEST(two_thread_pool_runs_and_frees) {
    gm_pool *p = gm_pool_new(2);
    CHECK(p != NULL);
    if (!p) return;
    atomic_llong items = 0;
    for (int rep = 0; rep < 100; rep++) gm_pool_parallel_for(p, 1000, 1, add_items, &items);
    CHECK_EQ_INT(atomic_load(&items), 100 * 1000);
    gm_pool_free(p);
}

int main(void) {
    signal(SIGALRM, on_deadline);
    alarm(DEADLINE_S);
    RUN(raw_thread_starts);
    RUN(two_thread_pool_runs_and_frees);
    alarm(0);
    return test_summary();
}
