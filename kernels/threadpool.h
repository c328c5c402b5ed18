/* kernels/threadpool.h — a persistent pool of worker threads. parallel_for splits [0, n) into
 * chunks of at least `grain` items and runs fn on them; the calling thread works too, and the
 * call returns when every chunk is done. Workers spin briefly then sleep between calls, so a
 * decode step pays little synchronisation per op. The pool is the public gm_threadpool (gemma.h):
 * one pool may serve several engines and encoders, on several threads (their jobs take turns). */
#ifndef GM_KERNELS_THREADPOOL_H
#define GM_KERNELS_THREADPOOL_H

#include <stdint.h>

#include "gemma.h"

typedef struct gm_threadpool gm_pool; /* gemma.h's gm_threadpool */

/* fn processes items [begin, end); thread is in [0, gm_pool_size). */
typedef void (*gm_task_fn)(void *ctx, int64_t begin, int64_t end, int thread);

/* n_threads <= 0: the number of physical cores. Returns NULL on failure. */
gm_pool *gm_pool_new(int n_threads);
void gm_pool_free(gm_pool *p);
int gm_pool_size(const gm_pool *p);
/* p may be NULL: then fn runs on the calling thread over [0, n). Callers on several threads may share
 * a pool: their jobs run one at a time, in arrival order (a job that runs on the caller alone, n <= grain,
 * does not wait). fn must not call gm_pool_parallel_for on the same pool (not reentrant). `thread` is
 * 0 for the caller, whichever thread it is: per-thread scratch belongs to the caller's object. */
void gm_pool_parallel_for(gm_pool *p, int64_t n, int64_t grain, gm_task_fn fn, void *ctx);

/* The same with chunks of exactly `chunk` items (the last may be shorter), claimed dynamically:
 * for long uniform jobs (the LM head) where ~4 chunks per thread would leave one thread alone on
 * the last big chunk. */
void gm_pool_parallel_for_chunk(gm_pool *p, int64_t n, int64_t chunk, gm_task_fn fn, void *ctx);

/* gm_physical_cores (the physical cores of this machine) is public: gemma.h. */

#endif
