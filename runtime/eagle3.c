/* runtime/eagle3.c — an EAGLE-3 head's encoder and decoder layer over the backend's ops (see eagle3.h). */
#include "runtime/eagle3.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/families/eagle3.h"
#include "model/family.h"

struct gm_e3_fwd {
    const gm_model *t, *h;
    const gm_e3_weights *w;
    const gm_kv_layout *hlay;
    gm_backend *be;
    const gm_backend_ops *ops;
    int max_rows, max_ctx, d, bb, qd, kvd;
    float *taps, *x, *e, *g, *in, *q, *k, *v, *att, *o, *xn, *gate, *up; /* backend (host) memory, max_rows rows */
    float *buf;
    float *tmp;       /* one head of scratch for the reordering */
    float *draft;     /* n_draft logits of one row (host) */
    gm_fwd_row *rows; /* positions for RoPE, the cache and attention */
};

void gm_e3_fwd_free(gm_e3_fwd *f) {
    if (!f) return;
    if (f->buf) f->ops->release(f->be, f->buf);
    free(f->tmp);
    free(f->draft);
    free(f->rows);
    free(f);
}

static gm_status alloc_rows(gm_e3_fwd *f, gm_error *err) {
    const size_t R = (size_t)f->max_rows, d = (size_t)f->d, bb = (size_t)f->bb, qd = (size_t)f->qd,
                 kvd = (size_t)f->kvd, ff = (size_t)f->h->cfg.d_ff;
    const size_t sizes[] = {R * 3 * bb, R * d, R * d, R * d, R * 2 * d, R * qd, R * kvd, R * kvd, R * qd, R * d, R * d,
                            R * ff, R * ff};
    float **dst[] = {&f->taps, &f->x, &f->e, &f->g, &f->in, &f->q, &f->k, &f->v, &f->att, &f->o, &f->xn, &f->gate, &f->up};
    if (!(f->buf = gm_be_alloc_parts(f->be, sizes, dst, (int)(sizeof sizes / sizeof sizes[0]))))
        return gm_fail(err, GM_ERR_NOMEM, "eagle3: cannot allocate the scratch rows");
    f->tmp = malloc((size_t)f->h->cfg.head_dim * sizeof *f->tmp);
    f->draft = malloc((size_t)f->w->n_draft * sizeof *f->draft);
    f->rows = calloc(R, sizeof *f->rows);
    return f->tmp && f->draft && f->rows ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "eagle3: out of memory");
}

gm_status gm_e3_fwd_new(const gm_model *t, const gm_model *h, const gm_kv_layout *hlay, gm_backend *be, int max_rows,
                        int max_ctx, gm_e3_fwd **out, gm_error *err) {
    *out = NULL;
    if (!t || !h || !hlay || !be || max_rows <= 0 || max_ctx <= 0) return gm_fail(err, GM_ERR_ARG, "eagle3: bad arguments");
    if (!h->cfg.family || !h->cfg.family->rules.own_weights || !h->family_weights)
        return gm_fail(err, GM_ERR_ARG, "eagle3: %s is not an EAGLE-3 head (arch %s)", gm_source_path(h->src), h->cfg.arch);
    const gm_e3_weights *w = h->family_weights;
    if (h->cfg.d_backbone != t->cfg.d_model || h->cfg.n_vocab != t->cfg.n_vocab)
        return gm_fail(err, GM_ERR_ARG, "eagle3: the head reads states of %d and drafts %d tokens; the target has %d "
                       "and %d", h->cfg.d_backbone, h->cfg.n_vocab, t->cfg.d_model, t->cfg.n_vocab);
    for (int i = 0; i < 3; i++)
        if (w->taps[i] > t->cfg.n_layers)
            return gm_fail(err, GM_ERR_ARG, "eagle3: the head taps layer %d of a %d-layer target", w->taps[i],
                           t->cfg.n_layers);
    if (!be->ops->host_memory)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "eagle3: the %s backend cannot run the head (its inputs are written as "
                       "host memory)", be->ops->name);
    gm_e3_fwd *f = calloc(1, sizeof *f);
    if (!f) return gm_fail(err, GM_ERR_NOMEM, "eagle3: out of memory");
    const gm_layer_config *lc = &h->layers[0].lc;
    f->t = t, f->h = h, f->w = w, f->hlay = hlay, f->be = be, f->ops = be->ops;
    f->max_rows = max_rows, f->max_ctx = max_ctx, f->d = h->cfg.d_model, f->bb = h->cfg.d_backbone;
    f->qd = lc->n_heads * lc->head_dim, f->kvd = lc->n_kv_heads * lc->head_dim;
    gm_status st = alloc_rows(f, err);
    if (st) {
        gm_e3_fwd_free(f);
        return st;
    }
    *out = f;
    return GM_OK;
}

gm_status gm_e3_encode(gm_e3_fwd *f, const float *taps, int n, float *g, gm_error *err) {
    if (!taps || !g || n <= 0) return gm_fail(err, GM_ERR_ARG, "eagle3: no rows to encode");
    const size_t w3 = 3 * (size_t)f->bb;
    for (int off = 0; off < n; off += f->max_rows) {
        const int k = n - off < f->max_rows ? n - off : f->max_rows;
        memcpy(f->taps, taps + (size_t)off * w3, (size_t)k * w3 * sizeof *taps);
        if (f->w->norm_before_fc)
            f->ops->rmsnorm(f->be, f->taps, f->taps, f->w->enc_norm, k, (int)w3, f->h->cfg.norm_eps, NULL);
        gm_status st = gm_be_matmul(f->be, &f->w->fc, f->taps, k, f->x);
        if (st) return gm_fail(err, st, "eagle3: the encoder failed (%s)", gm_status_name(st));
        f->ops->read(f->be, g + (size_t)off * f->d, f->x, (size_t)k * f->d);
    }
    return GM_OK;
}

/* The first dims components of each of n x heads heads of hd: even ones first, then odd (host memory). */
static void reorder(float *x, int n_heads_rows, int hd, int dims, float *tmp) {
    for (int r = 0; r < n_heads_rows; r++) {
        float *p = x + (size_t)r * hd;
        for (int i = 0; i < dims / 2; i++) tmp[i] = p[2 * i], tmp[dims / 2 + i] = p[2 * i + 1];
        memcpy(p, tmp, (size_t)dims * sizeof *p);
    }
}

/* in[i] = concat(RMS_attn(E[token]), RMS_attn2(g)) */
static gm_status inputs(gm_e3_fwd *f, const gm_e3_row *rows, int n) {
    const gm_model *em = f->w->own_embd ? f->h : f->t; /* E unscaled: the head's table, else the target's */
    const int d = f->d;
    for (int i = 0; i < n; i++) {
        gm_status st = gm_model_embedding_row(em, rows[i].token, f->e + (size_t)i * d);
        if (st) return st;
        memcpy(f->g + (size_t)i * d, rows[i].g, (size_t)d * sizeof(float));
    }
    const float eps = f->h->cfg.norm_eps;
    f->ops->rmsnorm(f->be, f->e, f->e, f->h->layers[0].attn_norm, n, d, eps, NULL);
    f->ops->rmsnorm(f->be, f->xn, f->g, f->w->attn_norm2, n, d, eps, NULL);
    for (int i = 0; i < n; i++) {
        memcpy(f->in + (size_t)i * 2 * d, f->e + (size_t)i * d, (size_t)d * sizeof(float));
        memcpy(f->in + (size_t)i * 2 * d + d, f->xn + (size_t)i * d, (size_t)d * sizeof(float));
    }
    return GM_OK;
}

/* logits over the target's vocabulary: the draft vocabulary's through d2t, -inf elsewhere */
static gm_status head_row(gm_e3_fwd *f, const float *y, float *logits) {
    const gm_e3_weights *w = f->w;
    if (!w->d2t) return f->ops->head(f->be, &f->h->output, y, 1, logits, 0.0f);
    gm_status st = f->ops->head(f->be, &f->h->output, y, 1, f->draft, 0.0f);
    if (st) return st;
    for (int i = 0; i < f->t->cfg.n_vocab; i++) logits[i] = -INFINITY;
    for (int i = 0; i < w->n_draft; i++) logits[w->d2t[i]] = f->draft[i];
    return GM_OK;
}

static gm_status decode_chunk(gm_e3_fwd *f, const gm_e3_row *rows, int n) {
    gm_backend *be = f->be;
    const gm_backend_ops *ops = f->ops;
    const gm_config *c = &f->h->cfg;
    const gm_layer *L = &f->h->layers[0];
    const gm_layer_config *lc = &L->lc;
    const int d = f->d, hd = lc->head_dim;
    gm_status st = inputs(f, rows, n);
    if (st) return st;
    for (int i = 0; i < n; i++) f->rows[i] = (gm_fwd_row){.pos = rows[i].pos, .kv = rows[i].kv};
    const gm_matrix *W[3] = {&L->wq, &L->wk, &L->wv};
    float *const y[3] = {f->q, f->k, f->v};
    if ((st = ops->matmul(be, W, y, 3, f->in, n))) return st;
    reorder(f->q, n * lc->n_heads, hd, lc->rope_dims, f->tmp);
    reorder(f->k, n * lc->n_kv_heads, hd, lc->rope_dims, f->tmp);
    ops->rope_prepare(be, 0, L->inv_freq, lc->rope_dims, f->rows, n);
    ops->rope(be, f->q, n, lc->n_heads, hd, lc->rope_dims, 0);
    ops->rope(be, f->k, n, lc->n_kv_heads, hd, lc->rope_dims, 0);
    ops->scale(be, f->q, (size_t)n * f->qd, 1.0f / sqrtf((float)hd));
    ops->kv_store(be, f->k, f->v, f->rows, n, 0, f->kvd);
    const gm_attn_call ac = {.lay = f->hlay, .lc = lc, .il = 0, .rows = f->rows, .n = n, .q = f->q, .att = f->att};
    ops->attention(be, &ac);
    if ((st = gm_be_matmul(be, &L->wo, f->att, n, f->o))) return st;
    /* the residual: g, or its norm (norm_before_residual) */
    ops->add(be, f->o, f->w->norm_before_residual ? f->xn : f->g, (size_t)n * d);
    ops->rmsnorm(be, f->x, f->o, L->ffn_norm, n, d, c->norm_eps, NULL);
    const gm_matrix *F[2] = {&L->gate, &L->up};
    float *const fy[2] = {f->gate, f->up};
    if ((st = ops->matmul(be, F, fy, 2, f->x, n))) return st;
    ops->bias_act(be, f->gate, NULL, f->up, n, lc->d_ff, GM_ACT_SILU);
    if ((st = gm_be_matmul(be, &L->down, f->gate, n, f->x))) return st;
    ops->add(be, f->o, f->x, (size_t)n * d); /* out: the next g */
    ops->rmsnorm(be, f->x, f->o, f->h->output_norm, n, d, c->norm_eps, NULL);
    for (int i = 0; i < n; i++) {
        if (rows[i].g_next) ops->read(be, rows[i].g_next, f->o + (size_t)i * d, (size_t)d);
        if (rows[i].logits && (st = head_row(f, f->x + (size_t)i * d, rows[i].logits))) return st;
    }
    return GM_OK;
}

gm_status gm_e3_decode(gm_e3_fwd *f, const gm_e3_row *rows, int n, gm_error *err) {
    if (!rows || n <= 0) return gm_fail(err, GM_ERR_ARG, "eagle3: no rows");
    for (int i = 0; i < n; i++) {
        const gm_e3_row *r = &rows[i];
        if (!r->kv || r->pos < 0 || r->pos >= f->max_ctx || !r->g)
            return gm_fail(err, GM_ERR_ARG, "eagle3: row %d: position %d outside [0, %d) or no g", i, r->pos, f->max_ctx);
        if (r->token < 0 || r->token >= f->t->cfg.n_vocab)
            return gm_fail(err, GM_ERR_ARG, "eagle3: row %d: token id %d is outside the vocabulary", i, (int)r->token);
    }
    for (int off = 0; off < n; off += f->max_rows) {
        const int k = n - off < f->max_rows ? n - off : f->max_rows;
        gm_status st = decode_chunk(f, rows + off, k);
        if (st) return gm_fail(err, st, "eagle3: a kernel failed (%s)", gm_status_name(st));
    }
    return GM_OK;
}
