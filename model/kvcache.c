/* model/kvcache.c — bucketed f32 KV cache (see kvcache.h). */
#include "model/kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"

enum { GM_KV_MIN_BUCKET = 64 };

static int bucket_for(int n, int max_pos) {
    int b = GM_KV_MIN_BUCKET;
    while (b < n && b < max_pos) b *= 2;
    return b < max_pos ? b : max_pos;
}

gm_status gm_kvcache_init(gm_kvcache *c, int n_layers, int kv_dim, int max_pos, int initial, gm_error *err) {
    memset(c, 0, sizeof *c);
    if (n_layers <= 0 || kv_dim <= 0 || max_pos <= 0)
        return gm_fail(err, GM_ERR_ARG, "kv cache: bad sizes (layers %d, kv_dim %d, positions %d)", n_layers,
                       kv_dim, max_pos);
    c->n_layers = n_layers;
    c->kv_dim = kv_dim;
    c->max_pos = max_pos;
    c->k = calloc((size_t)n_layers, sizeof *c->k);
    c->v = calloc((size_t)n_layers, sizeof *c->v);
    if (!c->k || !c->v) {
        gm_kvcache_free(c);
        return gm_fail(err, GM_ERR_NOMEM, "kv cache: out of memory");
    }
    gm_status st = gm_kvcache_reserve(c, initial > 0 ? initial : 1, err);
    if (st) gm_kvcache_free(c);
    return st;
}

gm_status gm_kvcache_reserve(gm_kvcache *c, int n_pos, gm_error *err) {
    if (n_pos > c->max_pos)
        return gm_fail(err, GM_ERR_CONTEXT, "kv cache: %d positions exceed the context size %d", n_pos, c->max_pos);
    if (n_pos <= c->cap) return GM_OK;
    const int cap = bucket_for(n_pos, c->max_pos);
    const size_t bytes = (size_t)cap * (size_t)c->kv_dim * sizeof(float);
    for (int l = 0; l < c->n_layers; l++) {
        float *k = realloc(c->k[l], bytes);
        if (!k) return gm_fail(err, GM_ERR_NOMEM, "kv cache: cannot grow to %d positions (%zu bytes a layer)", cap, bytes);
        c->k[l] = k;
        float *v = realloc(c->v[l], bytes);
        if (!v) return gm_fail(err, GM_ERR_NOMEM, "kv cache: cannot grow to %d positions (%zu bytes a layer)", cap, bytes);
        c->v[l] = v;
    }
    c->cap = cap;
    return GM_OK;
}

void gm_kvcache_free(gm_kvcache *c) {
    if (!c) return;
    for (int l = 0; c->k && l < c->n_layers; l++) free(c->k[l]);
    for (int l = 0; c->v && l < c->n_layers; l++) free(c->v[l]);
    free(c->k);
    free(c->v);
    memset(c, 0, sizeof *c);
}
