/* backends/cpu/backend.c — the CPU backend: the forward pass of backends/cpu/forward.c on a thread pool, KV blocks
 * in their own anonymous mappings. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/error.h"
#include "runtime/backend.h"
#include "backends/cpu/forward.h"

typedef struct cpu_backend {
    gm_backend base;
    gm_pool *pool;
    gm_forward *fwd;
} cpu_backend;

/* Blocks are large (hundreds of KiB to MiB) and change hands between the pool's groups: a mapping each
 * keeps them page aligned and gives their memory back to the system when the pool frees one, where the
 * heap would keep it as fragments (a serving process's RSS then creeps up under a full budget). */
static void *kv_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void kv_free(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    if (p) munmap(p, bytes ? bytes : 1);
}

static void kv_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    memcpy(dst, src, bytes);
}

static gm_kv_storage cpu_kv_storage(gm_backend *be) { return (gm_kv_storage){be, kv_alloc, kv_free, kv_copy}; }

static gm_status cpu_forward(gm_backend *be, const gm_fwd_batch *b, gm_error *err) {
    return gm_forward_run(((cpu_backend *)be)->fwd, b, err);
}

static int cpu_threads(const gm_backend *be) { return gm_pool_size(((const cpu_backend *)be)->pool); }

static void cpu_free(gm_backend *be) {
    cpu_backend *c = (cpu_backend *)be;
    if (!c) return;
    gm_forward_free(c->fwd);
    gm_pool_free(c->pool);
    free(c);
}

static const gm_backend_ops cpu_ops = {"cpu", cpu_kv_storage, cpu_forward, cpu_threads, cpu_free};

gm_status gm_backend_cpu_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                             gm_backend **out, gm_error *err) {
    *out = NULL;
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
    c->base.ops = &cpu_ops;
    c->pool = gm_pool_new(opt->n_threads);
    if (!c->pool) {
        free(c);
        return gm_fail(err, GM_ERR_NOMEM, "cpu backend: cannot start %d threads", opt->n_threads);
    }
    gm_status st = gm_forward_new(m, lay, c->pool, opt->max_batch, opt->max_ctx, &c->fwd, err);
    if (st) {
        cpu_free(&c->base);
        return st;
    }
    *out = &c->base;
    return GM_OK;
}
