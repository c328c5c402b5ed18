/* runtime/mtp.c — Gemma 4's MTP assistant: its draft step over a target's cache (see mtp.h). */
#include "runtime/mtp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/families/gemma4.h"

/* The LM head runs over this many rows at once: its weights (the largest matrix) are read once for them. */
enum { HEAD_ROWS = 16 };

typedef struct mtp_layer {
    gm_layer_config lc; /* the attention's view: the drafter's heads, the target layer's KV heads, window - 1 */
    int target_layer;   /* whose cache it reads (the layout resolves the target's own sharing) */
    int rope_kind;
} mtp_layer;

struct gm_mtp_fwd {
    const gm_model *t, *d;
    const gm_kv_layout *tlay;
    const gm_4a_weights *w;
    gm_backend *be;
    const gm_backend_ops *ops;
    int max_rows, max_ctx, bb;
    mtp_layer *layers;
    const float *rope_freq[GM_ROPE_KINDS];
    int rope_dims[GM_ROPE_KINDS], n_rope;
    float *in, *x, *xn, *q, *att, *o, *gate, *up, *y; /* max_rows rows each, backend memory */
    float *buf;
    float *embd_row;        /* one target embedding row, host */
    float *lbuf;            /* HEAD_ROWS x n_vocab logits, host: rows of several sequences share one head pass */
    gm_fwd_row *rope_rows;  /* positions for RoPE (pos) */
    gm_fwd_row *attn_rows;  /* positions for attention (pos - 1: keys up to it) */
};

/* The target's last layer of the same kind as drafter layer il reads its cache (llama.cpp: n - 2 for sliding,
 * n - 1 for full, whose pattern ends so); its keys must have the drafter layer's shape. */
static gm_status map_layer(gm_mtp_fwd *f, int il, gm_error *err) {
    const gm_layer_config *dl = &f->d->layers[il].lc;
    int src = -1;
    for (int j = f->t->cfg.n_layers - 1; j >= 0 && src < 0; j--)
        if ((f->t->layers[j].lc.window > 0) == (dl->window > 0)) src = j;
    if (src < 0)
        return gm_fail(err, GM_ERR_ARG, "mtp: drafter layer %d is %s, and the target has no such layer", il,
                       dl->window ? "sliding" : "full");
    const gm_layer_config *tl = &f->t->layers[src].lc;
    if (tl->head_dim != dl->head_dim || dl->n_heads % tl->n_kv_heads)
        return gm_fail(err, GM_ERR_ARG, "mtp: drafter layer %d (%d heads of %d) cannot read target layer %d (%d KV "
                       "heads of %d)", il, dl->n_heads, dl->head_dim, src, tl->n_kv_heads, tl->head_dim);
    if (dl->window == 1 || (dl->window > 0 && dl->window > tl->window))
        return gm_fail(err, GM_ERR_ARG, "mtp: drafter layer %d has a window of %d; the target keeps %d positions of "
                       "its sliding layers (a window of 2 or more, at most the target's, is needed)", il, dl->window,
                       tl->window);
    mtp_layer *L = &f->layers[il];
    L->target_layer = src;
    L->lc = *dl;
    L->lc.n_kv_heads = tl->n_kv_heads;
    /* the row attends from pos - 1 (the draft position pos has no key): a window one shorter covers the same
     * keys, (pos - window, pos) */
    if (dl->window > 0) L->lc.window = dl->window - 1;
    return GM_OK;
}

static gm_status find_rope_kinds(gm_mtp_fwd *f, gm_error *err) {
    for (int il = 0; il < f->d->cfg.n_layers; il++) {
        const gm_layer *l = &f->d->layers[il];
        const int dims = l->lc.rope_dims;
        int k = 0;
        while (k < f->n_rope && !(f->rope_dims[k] == dims &&
                                  !memcmp(f->rope_freq[k], l->inv_freq, (size_t)(dims / 2) * sizeof(float))))
            k++;
        if (k == f->n_rope) {
            if (k == GM_ROPE_KINDS) return gm_fail(err, GM_ERR_UNSUPPORTED, "mtp: too many RoPE settings");
            f->rope_freq[k] = l->inv_freq, f->rope_dims[k] = dims, f->n_rope++;
        }
        f->layers[il].rope_kind = k;
    }
    return GM_OK;
}

static gm_status alloc_rows(gm_mtp_fwd *f, gm_error *err) {
    const gm_layer_max mx = gm_model_layer_max(f->d);
    const size_t R = (size_t)f->max_rows, d = (size_t)f->d->cfg.d_model, bb = (size_t)f->bb;
    const size_t qd = (size_t)mx.q_dim, ff = (size_t)mx.d_ff;
    const size_t sizes[] = {R * 2 * bb, R * d, R * d, R * qd, R * qd, R * (qd > d ? qd : d), R * ff, R * ff, R * bb};
    float **dst[] = {&f->in, &f->x, &f->xn, &f->q, &f->att, &f->o, &f->gate, &f->up, &f->y};
    if (!(f->buf = gm_be_alloc_parts(f->be, sizes, dst, (int)(sizeof sizes / sizeof sizes[0]))))
        return gm_fail(err, GM_ERR_NOMEM, "mtp: cannot allocate the scratch rows");
    f->embd_row = malloc(bb * sizeof *f->embd_row);
    f->lbuf = malloc((size_t)(R < HEAD_ROWS ? R : HEAD_ROWS) * (size_t)f->d->cfg.n_vocab * sizeof *f->lbuf);
    f->rope_rows = calloc(R, sizeof *f->rope_rows);
    f->attn_rows = calloc(R, sizeof *f->attn_rows);
    return f->embd_row && f->lbuf && f->rope_rows && f->attn_rows ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "mtp: out of memory");
}

void gm_mtp_fwd_free(gm_mtp_fwd *f) {
    if (!f) return;
    if (f->buf) f->ops->release(f->be, f->buf);
    free(f->layers);
    free(f->embd_row);
    free(f->lbuf);
    free(f->rope_rows);
    free(f->attn_rows);
    free(f);
}

gm_status gm_mtp_fwd_new(const gm_model *t, const gm_kv_layout *tlay, const gm_model *d, gm_backend *be, int max_rows,
                         int max_ctx, gm_mtp_fwd **out, gm_error *err) {
    *out = NULL;
    if (!t || !tlay || !d || !be || max_rows <= 0 || max_ctx <= 0)
        return gm_fail(err, GM_ERR_ARG, "mtp: bad arguments");
    if (!d->cfg.is_drafter || !d->family_weights)
        return gm_fail(err, GM_ERR_ARG, "mtp: %s is not a Gemma 4 assistant (arch %s)", gm_source_path(d->src), d->cfg.arch);
    if (d->cfg.d_backbone != t->cfg.d_model || d->cfg.n_vocab != t->cfg.n_vocab)
        return gm_fail(err, GM_ERR_ARG, "mtp: the assistant reads hidden states of %d and drafts %d tokens; the target "
                       "has %d and %d", d->cfg.d_backbone, d->cfg.n_vocab, t->cfg.d_model, t->cfg.n_vocab);
    if (!be->ops->host_memory)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "mtp: the %s backend cannot run the assistant (its input is written as "
                       "host memory)", be->ops->name);
    gm_mtp_fwd *f = calloc(1, sizeof *f);
    if (!f) return gm_fail(err, GM_ERR_NOMEM, "mtp: out of memory");
    f->t = t, f->d = d, f->tlay = tlay, f->w = d->family_weights, f->be = be, f->ops = be->ops;
    f->max_rows = max_rows, f->max_ctx = max_ctx, f->bb = d->cfg.d_backbone;
    f->layers = calloc((size_t)d->cfg.n_layers, sizeof *f->layers);
    gm_status st = f->layers ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "mtp: out of memory");
    for (int il = 0; !st && il < d->cfg.n_layers; il++) st = map_layer(f, il, err);
    if (!st) st = find_rope_kinds(f, err);
    if (!st) st = alloc_rows(f, err);
    if (st) {
        gm_mtp_fwd_free(f);
        return st;
    }
    *out = f;
    return GM_OK;
}

/* in[i] = concat(E_target[token] * sqrt(d_bb), h): llama.cpp scales by sqrtf of the backbone width */
static gm_status write_inputs(gm_mtp_fwd *f, const gm_mtp_fwd_row *rows, int n) {
    const float s = sqrtf((float)f->bb);
    for (int i = 0; i < n; i++) {
        float *in = f->in + (size_t)i * 2 * (size_t)f->bb;
        gm_status st = gm_model_embedding_row(f->t, rows[i].token, f->embd_row);
        if (st) return st;
        for (int j = 0; j < f->bb; j++) in[j] = f->embd_row[j] * s;
        memcpy(in + f->bb, rows[i].h, (size_t)f->bb * sizeof *in);
    }
    return GM_OK;
}

static gm_status layer(gm_mtp_fwd *f, int il, int n) {
    gm_backend *be = f->be;
    const gm_backend_ops *ops = f->ops;
    const gm_config *c = &f->d->cfg;
    const gm_layer *L = &f->d->layers[il];
    const mtp_layer *M = &f->layers[il];
    const int d = c->d_model, H = L->lc.n_heads, hd = L->lc.head_dim;
    gm_status st;
    ops->rmsnorm(be, f->xn, f->x, L->attn_norm, n, d, c->norm_eps, NULL);
    if ((st = gm_be_matmul(be, &L->wq, f->xn, n, f->q))) return st;
    ops->rmsnorm(be, f->q, f->q, L->q_norm, n * H, hd, c->norm_eps, NULL);
    ops->rope(be, f->q, n, H, hd, L->lc.rope_dims, M->rope_kind);
    const gm_attn_call ac = {.lay = f->tlay, .lc = &M->lc, .il = M->target_layer, .rows = f->attn_rows, .n = n,
                             .q = f->q, .att = f->att};
    ops->attention(be, &ac);
    if ((st = gm_be_matmul(be, &L->wo, f->att, n, f->o))) return st;
    ops->rmsnorm(be, f->o, f->o, L->post_attn_norm, n, d, c->norm_eps, NULL);
    ops->add(be, f->x, f->o, (size_t)n * d);
    ops->rmsnorm(be, f->xn, f->x, L->ffn_norm, n, d, c->norm_eps, NULL);
    const gm_matrix *W[2] = {&L->gate, &L->up};
    float *const y[2] = {f->gate, f->up};
    if ((st = ops->matmul(be, W, y, 2, f->xn, n))) return st;
    ops->geglu(be, f->gate, f->up, n, L->lc.d_ff);
    if ((st = gm_be_matmul(be, &L->down, f->gate, n, f->o))) return st;
    ops->rmsnorm(be, f->o, f->o, L->post_ffn_norm, n, d, c->norm_eps, NULL);
    ops->add(be, f->x, f->o, (size_t)n * d);
    ops->scale(be, f->x, (size_t)n * d, f->w->out_scale[il]);
    return GM_OK;
}

/* logits = E_assistant y for the rows, HEAD_ROWS per head pass (one row: straight into its buffer) */
static gm_status head_rows(gm_mtp_fwd *f, const gm_mtp_fwd_row *rows, int n) {
    const int d = f->d->cfg.d_model;
    const size_t V = (size_t)f->d->cfg.n_vocab;
    for (int r0 = 0; r0 < n; r0 += HEAD_ROWS) {
        const int nr = n - r0 < HEAD_ROWS ? n - r0 : HEAD_ROWS;
        float *out = nr == 1 ? rows[r0].logits : f->lbuf;
        gm_status st = f->ops->head(f->be, &f->d->output, f->xn + (size_t)r0 * d, nr, out, 0.0f);
        if (st) return st;
        for (int i = 0; nr > 1 && i < nr; i++) memcpy(rows[r0 + i].logits, f->lbuf + (size_t)i * V, V * sizeof(float));
    }
    return GM_OK;
}

static gm_status chunk(gm_mtp_fwd *f, const gm_mtp_fwd_row *rows, int n) {
    const gm_config *c = &f->d->cfg;
    const int d = c->d_model;
    gm_status st = write_inputs(f, rows, n);
    if (st) return st;
    for (int i = 0; i < n; i++) {
        f->rope_rows[i] = (gm_fwd_row){.pos = rows[i].pos, .kv = rows[i].kv};
        f->attn_rows[i] = (gm_fwd_row){.pos = rows[i].pos - 1, .kv = rows[i].kv};
    }
    if ((st = gm_be_matmul(f->be, &f->w->pre_proj, f->in, n, f->x))) return st;
    for (int k = 0; k < f->n_rope; k++) f->ops->rope_prepare(f->be, k, f->rope_freq[k], f->rope_dims[k], f->rope_rows, n);
    for (int il = 0; il < c->n_layers; il++)
        if ((st = layer(f, il, n))) return st;
    f->ops->rmsnorm(f->be, f->xn, f->x, f->d->output_norm, n, d, c->norm_eps, NULL);
    if ((st = gm_be_matmul(f->be, &f->w->post_proj, f->xn, n, f->y))) return st;
    for (int i = 0; i < n; i++) f->ops->read(f->be, rows[i].h_next, f->y + (size_t)i * f->bb, (size_t)f->bb);
    return head_rows(f, rows, n);
}

gm_status gm_mtp_fwd_run(gm_mtp_fwd *f, const gm_mtp_fwd_row *rows, int n, gm_error *err) {
    if (n <= 0 || !rows) return gm_fail(err, GM_ERR_ARG, "mtp: no rows");
    for (int i = 0; i < n; i++) {
        const gm_mtp_fwd_row *r = &rows[i];
        if (!r->kv || r->pos < 1 || r->pos >= f->max_ctx || !r->h || !r->logits || !r->h_next)
            return gm_fail(err, GM_ERR_ARG, "mtp: row %d: position %d outside [1, %d) or a missing buffer", i, r->pos,
                           f->max_ctx);
        if (r->token < 0 || r->token >= f->t->cfg.n_vocab)
            return gm_fail(err, GM_ERR_ARG, "mtp: row %d: token id %d is outside the vocabulary", i, (int)r->token);
    }
    for (int off = 0; off < n; off += f->max_rows) {
        const int k = n - off < f->max_rows ? n - off : f->max_rows;
        gm_status st = chunk(f, rows + off, k);
        if (st) return gm_fail(err, st, "mtp: a kernel failed (%s)", gm_status_name(st));
    }
    return GM_OK;
}
