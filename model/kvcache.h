/* model/kvcache.h — the key/value cache: per layer, one row of Hkv*hd f32 per position, for K and V.
 * Every position is kept for every layer (sliding layers are masked by window at attention time),
 * so any prefix of the cache stays valid and can be reused. Capacity grows in power-of-two
 * buckets up to max_pos; growth copies the rows, so it never changes results. */
#ifndef GM_MODEL_KVCACHE_H
#define GM_MODEL_KVCACHE_H

#include <stddef.h>

#include "gemma.h"

typedef struct gm_kvcache {
    int n_layers;
    int kv_dim;    /* Hkv * hd floats per position */
    int cap;       /* positions allocated per layer */
    int max_pos;   /* hard limit (the context size) */
    float **k, **v; /* [n_layers][cap * kv_dim] */
} gm_kvcache;

/* initial: positions to allocate up front (rounded up to a bucket, clamped to max_pos). */
gm_status gm_kvcache_init(gm_kvcache *c, int n_layers, int kv_dim, int max_pos, int initial, gm_error *err);
/* Makes room for n_pos positions (n_pos <= max_pos), growing to the next power of two. */
gm_status gm_kvcache_reserve(gm_kvcache *c, int n_pos, gm_error *err);
void gm_kvcache_free(gm_kvcache *c);

static inline float *gm_kv_k(const gm_kvcache *c, int layer, int pos) {
    return c->k[layer] + (size_t)pos * c->kv_dim;
}
static inline float *gm_kv_v(const gm_kvcache *c, int layer, int pos) {
    return c->v[layer] + (size_t)pos * c->kv_dim;
}

#endif
