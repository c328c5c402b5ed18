/* engine/eagle3.c — an EAGLE-3 head beside a target engine (engine/eagle3.h): its backend, its own KV pool and
 * head sequences; the math is runtime/eagle3.c's. */
#include "engine/eagle3.h"

#include <stdlib.h>

#include "core/error.h"
#include "core/random.h"
#include "engine/engine.h"
#include "model/family.h"
#include "model/families/eagle3.h"
#include "runtime/eagle3.h"

struct gm_eagle3 {
    gm_engine *e;
    const gm_model *h;
    gm_kv_layout lay;   /* the head's one layer */
    bool lay_made;
    gm_backend *be;
    gm_kvpool *pool;
    gm_e3_fwd *fwd;
    gm_e3_row *rows;
    int max_rows;
};

struct gm_e3_seq {
    gm_eagle3 *d;
    gm_kv_table kv;
    int n;              /* positions held */
};

void gm_eagle3_free(gm_eagle3 *d) {
    if (!d) return;
    gm_e3_fwd_free(d->fwd);
    gm_kvpool_free(d->pool);
    if (d->be) d->be->ops->free(d->be);
    if (d->lay_made) gm_kv_layout_free(&d->lay);
    free(d->rows);
    free(d);
}

gm_status gm_eagle3_new(gm_engine *e, const gm_model *h, int max_rows, gm_eagle3 **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "eagle3: out is NULL");
    *out = NULL;
    if (!e || !h || max_rows < 0) return gm_fail(err, GM_ERR_ARG, "eagle3: no target engine or head");
    if (!h->cfg.family || !h->cfg.family->rules.own_weights)
        return gm_fail(err, GM_ERR_ARG, "eagle3: %s is not an EAGLE-3 head (arch %s)", gm_source_path(h->src), h->cfg.arch);
    gm_eagle3 *d = calloc(1, sizeof *d);
    if (!d) return gm_fail(err, GM_ERR_NOMEM, "eagle3: out of memory");
    d->e = e, d->h = h;
    d->max_rows = max_rows ? max_rows : 64;
    d->rows = malloc((size_t)d->max_rows * sizeof *d->rows);
    gm_status st = d->rows ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "eagle3: out of memory");
    if (!st) st = gm_kv_layout_init(&d->lay, h, GM_KV_DTYPE_F32, err);
    d->lay_made = !st;
    if (!st) st = gm_engine_side_backend(e, h, &d->lay, d->max_rows, "eagle3: the head", &d->be, err);
    if (!st) {
        /* one context of the head per target sequence the target's pool can hold at full length */
        const size_t blocks = (size_t)(e->n_ctx + GM_KV_BLOCK - 1) / GM_KV_BLOCK + 1;
        uint64_t key[2];
        gm_random_words(key, 2);
        st = gm_kvpool_new(&d->lay, d->be->ops->kv_storage(d->be), 64 * blocks * d->lay.block_bytes[GM_KV_FULL], false,
                           key, &d->pool, err);
    }
    if (!st) st = gm_e3_fwd_new(e->m, h, &d->lay, d->be, d->max_rows, e->n_ctx, &d->fwd, err);
    if (!st) { /* the taps it reads below the final state */
        const int *taps = ((const gm_e3_weights *)h->family_weights)->taps;
        int layers[3], n = 0;
        for (int i = 0; i < 3; i++)
            if (taps[i] < e->c->n_layers) layers[n++] = taps[i];
        st = gm_engine_set_taps(e, layers, n, err);
    }
    if (st) {
        gm_eagle3_free(d);
        return st;
    }
    *out = d;
    return GM_OK;
}

const gm_model *gm_eagle3_head(const gm_eagle3 *d) { return d ? d->h : NULL; }
const gm_engine *gm_eagle3_target(const gm_eagle3 *d) { return d ? d->e : NULL; }

const int *gm_eagle3_taps(const gm_eagle3 *d) {
    return d ? ((const gm_e3_weights *)d->h->family_weights)->taps : NULL;
}

gm_status gm_eagle3_encode(gm_eagle3 *d, const float *taps, int n, float *g, gm_error *err) {
    return gm_e3_encode(d->fwd, taps, n, g, err);
}

gm_status gm_e3_seq_new(gm_eagle3 *d, gm_e3_seq **out, gm_error *err) {
    gm_e3_seq *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GM_ERR_NOMEM, "eagle3: out of memory");
    s->d = d;
    gm_kv_table_init(&s->kv);
    *out = s;
    return GM_OK;
}

void gm_e3_seq_free(gm_e3_seq *s) {
    if (!s) return;
    gm_kv_table_free(s->d->pool, &s->kv);
    free(s);
}

int gm_e3_seq_length(const gm_e3_seq *s) { return s ? s->n : 0; }

void gm_e3_seq_truncate(gm_e3_seq *s, int n) {
    if (!s || n < 0 || n >= s->n) return;
    gm_kv_table_drop_from(s->d->pool, &s->kv, (n + GM_KV_BLOCK - 1) / GM_KV_BLOCK);
    s->n = n;
}

gm_status gm_eagle3_decode(gm_eagle3 *d, const gm_eagle3_row *rows, int n, gm_error *err) {
    if (!d || !rows || n <= 0) return gm_fail(err, GM_ERR_ARG, "eagle3: no rows");
    for (int off = 0; off < n; off += d->max_rows) {
        const int k = n - off < d->max_rows ? n - off : d->max_rows;
        for (int i = 0; i < k; i++) {
            const gm_eagle3_row *r = &rows[off + i];
            gm_e3_seq *s = r->seq;
            if (!s || s->d != d || r->pos != s->n)
                return gm_fail(err, GM_ERR_ARG, "eagle3: row %d: position %d, its sequence holds %d", off + i, r->pos,
                               s && s->d == d ? s->n : -1);
            if (r->pos >= d->e->n_ctx)
                return gm_fail(err, GM_ERR_CONTEXT, "eagle3: row %d: position %d past the context", off + i, r->pos);
            gm_status st = gm_kv_table_prepare(d->pool, &s->kv, r->pos, r->pos + 1, err);
            if (st) return st;
            s->n++;
            d->rows[i] = (gm_e3_row){.kv = &s->kv, .pos = r->pos, .token = r->token, .g = r->g, .g_next = r->g_next,
                                     .logits = r->logits};
        }
        gm_status st = gm_e3_decode(d->fwd, d->rows, k, err);
        if (st) return st;
    }
    return GM_OK;
}
