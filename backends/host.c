/* backends/host.c — ops shared by the backends that keep activations in host memory (see host.h). */
#include "backends/host.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/ops.h"

float *gm_host_alloc(gm_backend *be, size_t n) {
    (void)be;
    void *p = NULL;
    return posix_memalign(&p, 64, (n ? n : 1) * sizeof(float)) == 0 ? p : NULL;
}

void gm_host_release(gm_backend *be, float *p) {
    (void)be;
    free(p);
}

void gm_host_read(gm_backend *be, float *host, const float *src, size_t n) {
    (void)be;
    memcpy(host, src, n * sizeof *host);
}

void gm_host_copy(gm_backend *be, float *dst, const float *src, size_t n) {
    (void)be;
    memcpy(dst, src, n * sizeof *dst);
}

void gm_host_add(gm_backend *be, float *y, const float *x, size_t n) {
    (void)be;
    gm_add(y, x, (int)n);
}

void gm_host_scale(gm_backend *be, float *x, size_t n, float s) {
    (void)be;
    gm_scale(x, (int)n, s);
}

gm_status gm_host_embed(const gm_model *m, float *x, const gm_fwd_row *rows, int n) {
    const int d = m->cfg.d_model;
    for (int i = 0; i < n; i++) {
        float *row = x + (size_t)i * d;
        if (rows[i].embed) {
            memcpy(row, rows[i].embed, (size_t)d * sizeof *row);
            continue;
        }
        gm_status st = gm_matrix_row(&m->embd, rows[i].token, row);
        if (st) return st;
        gm_scale(row, d, m->cfg.embed_scale);
    }
    return GM_OK;
}

void gm_host_kv_store(const gm_kv_layout *lay, gm_kv_store_fn store, const float *k, const float *v,
                      const gm_fwd_row *rows, int n, int il, int kv_dim) {
    const gm_kv_type kt = (gm_kv_type)lay->dtype;
    for (int i = 0; i < n; i++) {
        const gm_fwd_row *r = &rows[i];
        store(gm_kv_row_k(lay, r->kv, il, r->pos), kt, k + (size_t)i * kv_dim, kv_dim);
        store(gm_kv_row_v(lay, r->kv, il, r->pos), kt, v + (size_t)i * kv_dim, kv_dim);
    }
}

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

gm_kv_storage gm_host_kv_storage(gm_backend *be) { return (gm_kv_storage){be, kv_alloc, kv_free, kv_copy}; }
