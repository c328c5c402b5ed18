/* backends/host.h — the ops every backend whose activations are host memory implements the same way
 * (the CPU and reference backends): buffers, reads, the embedding lookup, the cache writes and the exact
 * elementwise ops. */
#ifndef GM_BACKENDS_HOST_H
#define GM_BACKENDS_HOST_H

#include "kernels/ops.h"
#include "runtime/backend.h"

float *gm_host_alloc(gm_backend *be, size_t n);
void gm_host_release(gm_backend *be, float *p);
void gm_host_read(gm_backend *be, float *host, const float *src, size_t n);
void gm_host_copy(gm_backend *be, float *dst, const float *src, size_t n);
void gm_host_add(gm_backend *be, float *y, const float *x, size_t n);
void gm_host_scale(gm_backend *be, float *x, size_t n, float s);
/* x[i] = row i's token embedding (m->embd) times m->cfg.embed_scale, or its caller embedding */
gm_status gm_host_embed(const gm_model *m, float *x, const gm_fwd_row *rows, int n);
/* row i's K and V into its block at its position by store (kernels/ops.h gm_kv_store or a level's
 * gm_cpu_kernels.kv_store: F16 rounds to nearest even) */
void gm_host_kv_store(const gm_kv_layout *lay, gm_kv_store_fn store, const float *k, const float *v,
                      const gm_fwd_row *rows, int n, int il, int kv_dim);
/* KV blocks in anonymous mappings */
gm_kv_storage gm_host_kv_storage(gm_backend *be);

#endif
