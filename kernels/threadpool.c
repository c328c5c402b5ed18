/* kernels/threadpool.c — a persistent pool. Workers wait for a new job generation: they spin (with
 * a pause hint) for a while, so back-to-back ops of a decode step cost no sleep/wake, then block on
 * a condition variable so an idle process does not burn the cores.
 *
 * Work is handed out in chunks by compare-and-swap on one word holding (generation, next chunk),
 * so a worker can only claim chunks of the job that is current. The caller claims chunks too and
 * then waits only for chunks that were claimed and are still running — never for a worker that
 * has not woken up yet (on a loaded machine that could cost a whole scheduler time slice). */
#include "kernels/threadpool.h"

#include "core/error.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The spin-wait hint. On AArch64 `isb`, not `yield`: YIELD is a hint that cores without SMT (nearly
 * all ARM cores) drop as a NOP, so the loop would hammer the shared line and run through
 * GM_SPIN_ITERS far sooner than on x86; ISB holds the front end until the pipeline drains, a short
 * real delay like x86's pause (Rust's core::hint::spin_loop made the same choice, rust-lang/rust
 * #84725). Neither hint orders memory for us: the atomics carry the ordering. */
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GM_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define GM_CPU_RELAX() __asm__ volatile("isb" ::: "memory")
#else
#define GM_CPU_RELAX() ((void)0)
#endif

/* ~ a few hundred microseconds of spinning before a worker sleeps (pause is 40-140 cycles). */
#define GM_SPIN_ITERS 20000
/* a caller waiting for another caller's job spins less: that job may be a long one (an image encoder's GEMM) */
#define GM_TURN_SPINS 1000
#define GEN_SHIFT 40
#define IDX_MASK ((1ull << GEN_SHIFT) - 1)

struct gm_threadpool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;       /* bumped once per job; workers wait for it to change */
    atomic_bool stop;
    atomic_int n_sleeping; /* workers blocked on cv: the caller signals only if > 0 */
    /* the current job; stable while it has unclaimed chunks (see claim()) */
    _Atomic(gm_task_fn) fn;
    _Atomic(void *) ctx;
    atomic_llong n, chunk, n_chunks;
    atomic_ullong state;   /* (generation << GEN_SHIFT) | next chunk index */
    atomic_llong done;     /* chunks finished */
    /* Callers take turns (a shared pool: an engine's scheduler thread and a vision encoder's caller): a ticket
     * each, jobs run in ticket order; a caller whose turn is not up spins briefly, then sleeps on turn_cv. */
    atomic_ullong next_ticket, serving;
    atomic_int n_queued;   /* callers asleep on turn_cv */
    pthread_cond_t turn_cv;
};

typedef struct { gm_pool *p; int id; } worker_arg;

/* Claim one chunk of job `g`; false once the job has none left (or is no longer current). */
static bool claim(gm_pool *p, unsigned long long g, long long *idx) {
    unsigned long long s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((s >> GEN_SHIFT) != g) return false;
        long long i = (long long)(s & IDX_MASK);
        if (i >= atomic_load_explicit(&p->n_chunks, memory_order_relaxed)) return false;
        if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel, memory_order_acquire)) {
            *idx = i;
            return true;
        }
    }
}

static void run_chunks(gm_pool *p, unsigned long long g, int thread) {
    /* Read before claiming: if the claim succeeds the job still had unclaimed chunks, so the
     * caller had not returned and these fields belonged to job g. */
    gm_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
    const long long n = atomic_load_explicit(&p->n, memory_order_relaxed);
    const long long chunk = atomic_load_explicit(&p->chunk, memory_order_relaxed);
    long long i;
    while (claim(p, g, &i)) {
        const long long b = i * chunk, e = b + chunk < n ? b + chunk : n;
        fn(ctx, b, e, thread);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

/* Wait until gen differs from seen (or stop); returns the new generation. */
static unsigned wait_for_job(gm_pool *p, unsigned seen) {
    for (int i = 0; i < GM_SPIN_ITERS; i++) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_acquire)) return g;
        GM_CPU_RELAX();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_sleeping, 1);
    unsigned g;
    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->cv, &p->mu);
    atomic_fetch_sub(&p->n_sleeping, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    gm_pool *p = wa.p;
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
        run_chunks(p, seen & ((1u << (64 - GEN_SHIFT)) - 1), wa.id);
    }
}

int gm_physical_cores(void) {
    /* distinct (physical id, core id) pairs in /proc/cpuinfo; fall back to online CPUs */
    FILE *f = fopen("/proc/cpuinfo", "r");
    int pairs[1024][2], n_pairs = 0, phys = 0;
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        int v;
        if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
        if (sscanf(line, "core id : %d", &v) == 1) {
            bool dup = false;
            for (int i = 0; i < n_pairs; i++) dup |= pairs[i][0] == phys && pairs[i][1] == v;
            if (!dup && n_pairs < 1024) {
                pairs[n_pairs][0] = phys;
                pairs[n_pairs][1] = v;
                n_pairs++;
            }
        }
    }
    if (f) fclose(f);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (online < 1) online = 1;
    if (n_pairs < 1 || n_pairs > online) return (int)online;
    return n_pairs;
}

gm_pool *gm_pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = gm_physical_cores();
    if (n_threads > 512) n_threads = 512;
    gm_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->turn_cv, NULL);
    atomic_init(&p->next_ticket, 0);
    atomic_init(&p->serving, 0);
    atomic_init(&p->n_queued, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->ctx, NULL);
    atomic_init(&p->n, 0);
    atomic_init(&p->chunk, 1);
    atomic_init(&p->n_chunks, 0);
    atomic_init(&p->state, 0);
    atomic_init(&p->done, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        if (!p->threads) {
            p->n_threads = 1;
            gm_pool_free(p);
            return NULL;
        }
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) *wa = (worker_arg){p, i};
        if (!wa || pthread_create(&p->threads[i - 1], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n_threads = i; /* gm_pool_free joins the i-1 started workers */
            gm_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void gm_pool_free(gm_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads && p->threads; i++) pthread_join(p->threads[i - 1], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->turn_cv);
    free(p);
}

int gm_pool_size(const gm_pool *p) { return p ? p->n_threads : 1; }

/* Waits for this caller's turn: the jobs of callers sharing the pool run one at a time, in arrival order
 * (fair: a decode step is not starved by an encoder that calls again the moment its job ends). */
static void take_turn(gm_pool *p) {
    const unsigned long long t = atomic_fetch_add(&p->next_ticket, 1);
    for (int i = 0; i < GM_TURN_SPINS; i++) {
        if (atomic_load_explicit(&p->serving, memory_order_acquire) == t) return;
        GM_CPU_RELAX();
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->n_queued, 1); /* seq_cst: pairs with end_turn's serving increment then n_queued check */
    while (atomic_load(&p->serving) != t) pthread_cond_wait(&p->turn_cv, &p->mu);
    atomic_fetch_sub(&p->n_queued, 1);
    pthread_mutex_unlock(&p->mu);
}

static void end_turn(gm_pool *p) {
    atomic_fetch_add(&p->serving, 1);
    if (atomic_load(&p->n_queued) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->turn_cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* One job, the pool's only one while it runs. */
static void run_turn(gm_pool *p, int64_t n, int64_t chunk, gm_task_fn fn, void *ctx) {
    const long long n_chunks = (n + chunk - 1) / chunk;
    const unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    const unsigned long long g24 = g & ((1u << (64 - GEN_SHIFT)) - 1);
    /* Close the previous job before touching the job fields: a worker descheduled inside claim()
     * of the previous generation could otherwise read the new (larger) n_chunks against the old
     * state word and claim a chunk with stale fields, corrupting results and the done count (seen
     * as wrong logits under ctest -j2 on a loaded machine). The new generation with an index past
     * any chunk count makes every claim fail until the fields are complete; a stale CAS fails
     * because the state word changed. */
    atomic_store(&p->state, (g24 << GEN_SHIFT) | IDX_MASK);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n, n, memory_order_relaxed);
    atomic_store_explicit(&p->chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&p->n_chunks, n_chunks, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    /* open the chunks of the new generation, then announce it (only the caller writes gen);
     * seq_cst: pairs with the worker's n_sleeping increment then gen check (store-load order) */
    atomic_store(&p->state, g24 << GEN_SHIFT);
    atomic_store(&p->gen, g);
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    run_chunks(p, g24, 0);
    /* wait for chunks other threads claimed and are still running */
    for (long spins = 0; atomic_load_explicit(&p->done, memory_order_acquire) < n_chunks; spins++) {
        if (spins < GM_SPIN_ITERS) GM_CPU_RELAX();
        else sched_yield();
    }
}

/* Runs fn over [0, n) in chunks of `chunk` items (the last may be shorter), in this caller's turn. */
static void run_job(gm_pool *p, int64_t n, int64_t chunk, gm_task_fn fn, void *ctx) {
    take_turn(p);
    run_turn(p, n, chunk, fn, ctx);
    end_turn(p);
}

void gm_pool_parallel_for(gm_pool *p, int64_t n, int64_t grain, gm_task_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (!p || p->n_threads == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* a few chunks per thread balance uneven progress; never below the caller's grain */
    int64_t chunk = (n + 4 * p->n_threads - 1) / (4 * p->n_threads);
    if (chunk < grain) chunk = grain;
    chunk = (chunk + grain - 1) / grain * grain;
    run_job(p, n, chunk, fn, ctx);
}

void gm_pool_parallel_for_chunk(gm_pool *p, int64_t n, int64_t chunk, gm_task_fn fn, void *ctx) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    if (!p || p->n_threads == 1 || n <= chunk) {
        fn(ctx, 0, n, 0);
        return;
    }
    run_job(p, n, chunk, fn, ctx);
}

/* ---------------------------------------------------------------- the public handle (gemma.h) */

gm_status gm_threadpool_new(int n_threads, gm_threadpool **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_threadpool_new: out is NULL");
    *out = NULL;
    if (n_threads > 1024) return gm_fail(err, GM_ERR_ARG, "thread pool: %d threads is more than 1024", n_threads);
    if (!(*out = gm_pool_new(n_threads))) return gm_fail(err, GM_ERR_NOMEM, "thread pool: cannot start %d threads", n_threads);
    return GM_OK;
}

void gm_threadpool_free(gm_threadpool *p) { gm_pool_free(p); }

int gm_threadpool_size(const gm_threadpool *p) { return gm_pool_size(p); }
