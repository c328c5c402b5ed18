/* runtime/forward.c — the Gemma forward pass over rows (see forward.h), as the math over the backend's ops.
 *
 * Per layer, for a chunk of n rows (all rows at once, so matmuls are batched):
 *   xn = RMSNorm(x, attn_norm); q, k, v = xn Wq, xn Wk, xn Wv
 *   Gemma 3: per-head RMSNorm of q and k over head_dim; RoPE (NEOX) on q and k; q *= query_scale
 *   k, v -> each row's sequence cache; attention per row over its sequence's cache (causal, the layer's
 *   window, Gemma 2 soft-cap before the mask, optional caller bias); o = att Wo
 *   Gemma 2/3: o = RMSNorm(o, post_attn_norm);  x += o
 *   xn = RMSNorm(x, ffn_norm); o = (gelu_tanh(xn Wgate) * (xn Wup)) Wdown
 *   Gemma 2/3: o = RMSNorm(o, post_ffn_norm);   x += o
 * then logits = RMSNorm(x, output_norm) E^T (tied) for the rows that ask, Gemma 2: final soft-cap, and
 * RMSNorm(x, output_norm) itself for the rows that ask for their hidden state (embedding models).
 * Bidirectional batches (EmbeddingGemma) are one whole sequence in one chunk: every row's keys and values
 * are in the cache before attention runs, so each row attends both ways.
 * Gemma 3n (model/families/gemma3n.h) keeps 4 streams per row around this block: x is the active
 * prediction, LAuReL joins the attention residual, layers < 10 sparsify the FFN gate, V is RMS-normed, and
 * the layer output corrects the streams. Gemma 4 (model/families/gemma4.h) adds mixture-of-experts FFNs,
 * per-layer inputs and layer output scales. Those hooks are host code around the ops. */
#include "runtime/forward.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/family.h"
#include "runtime/families/hooks.h"

enum { LOGIT_ROWS = 16 };

/* Layers with the same RoPE (rotated dims, base, scale) share one table per chunk. */
typedef struct rope_kind {
    const float *inv_freq;
    int dims;
    float base, scale;
} rope_kind;

struct gm_forward {
    const gm_model *m;
    const gm_kv_layout *lay;
    gm_backend *be;
    const gm_backend_ops *ops;
    int max_batch, max_ctx;
    gm_layer_max mx;
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up; /* max_batch rows each, backend memory */
    float *buf;           /* backing store of the above */
    rope_kind rope[GM_ROPE_KINDS];
    int n_rope, *rope_of; /* per layer: its kind */
    int *lrows;           /* rows of a chunk that want logits (or their hidden state) */
    float *lbuf;          /* LOGIT_ROWS x n_vocab host floats, allocated on the first pass with logits */
    const gm_forward_hooks *hk; /* the family's additions (never NULL: a table of NULLs for plain Gemma) */
    void *hs;                   /* their state */
};

static const gm_forward_hooks no_hooks;

/* A hook at a named point of the pass: skipped when the family has none there. */
#define HOOK(f, point, ...) ((f)->hk->point ? (f)->hk->point((f)->hs, __VA_ARGS__) : GM_OK)

void gm_forward_free(gm_forward *f) {
    if (!f) return;
    if (f->buf) f->ops->release(f->be, f->buf);
    free(f->rope_of);
    free(f->lrows);
    free(f->lbuf);
    if (f->hs) f->hk->state_free(f->hs);
    free(f);
}

/* distinct RoPE tables: Gemma 3 has two (local and global layers) */
static gm_status find_rope_kinds(gm_forward *f, gm_error *err) {
    const gm_model *m = f->m;
    f->rope_of = malloc((size_t)m->cfg.n_layers * sizeof *f->rope_of);
    if (!f->rope_of) return gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
    for (int il = 0; il < m->cfg.n_layers; il++) {
        const gm_layer_config *l = &m->layers[il].lc;
        int k = 0;
        for (; k < f->n_rope; k++) {
            const rope_kind *r = &f->rope[k];
            /* the frequencies too: Gemma 4's full layers divide theirs by rope_freqs */
            if (r->dims == l->rope_dims && r->base == l->rope_base && r->scale == l->rope_scale &&
                !memcmp(r->inv_freq, m->layers[il].inv_freq, (size_t)(l->rope_dims / 2) * sizeof *r->inv_freq))
                break;
        }
        if (k == f->n_rope) {
            if (k == GM_ROPE_KINDS)
                return gm_fail(err, GM_ERR_UNSUPPORTED, "forward: more than %d distinct RoPE settings", GM_ROPE_KINDS);
            f->rope[k] = (rope_kind){.inv_freq = m->layers[il].inv_freq, .dims = l->rope_dims, .base = l->rope_base,
                                     .scale = l->rope_scale};
            f->n_rope++;
        }
        f->rope_of[il] = k;
    }
    return GM_OK;
}

static gm_status alloc_rows(gm_forward *f, gm_error *err) {
    const size_t B = (size_t)f->max_batch, d = (size_t)f->m->cfg.d_model;
    const size_t qd = (size_t)f->mx.q_dim, kvd = (size_t)f->mx.kv_dim, ff = (size_t)f->mx.d_ff;
    const size_t qo = qd > d ? qd : d;
    const size_t sizes[] = {B * d, B * d, B * qd, B * kvd, B * kvd, B * qd, B * qo, B * ff, B * ff};
    float **dst[] = {&f->x, &f->xn, &f->q, &f->k, &f->v, &f->att, &f->o, &f->gate, &f->up};
    f->buf = gm_be_alloc_parts(f->be, sizes, dst, (int)(sizeof sizes / sizeof sizes[0]));
    return f->buf ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate the scratch rows");
}

gm_status gm_forward_new(const gm_model *m, const gm_kv_layout *lay, gm_backend *be, int max_batch, int max_ctx,
                         gm_forward **out, gm_error *err) {
    *out = NULL;
    if (!m || !be || max_batch <= 0 || max_ctx <= 0)
        return gm_fail(err, GM_ERR_ARG, "forward: bad arguments (batch %d, context %d)", max_batch, max_ctx);
    const gm_forward_hooks *hk = gm_forward_hooks_of(m->cfg.family);
    if (!hk) hk = &no_hooks;
    if (hk->host_memory && !be->ops->host_memory)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "forward: the %s backend cannot run %s (its hooks need host memory)",
                       be->ops->name, m->cfg.arch);
    gm_forward *f = calloc(1, sizeof *f);
    if (!f) return gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
    f->m = m, f->lay = lay, f->be = be, f->ops = be->ops, f->hk = hk;
    f->max_batch = max_batch, f->max_ctx = max_ctx;
    f->mx = gm_model_layer_max(m);
    f->lrows = malloc((size_t)max_batch * sizeof *f->lrows);
    gm_status st = f->lrows ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
    if (!st) st = find_rope_kinds(f, err);
    if (!st) st = alloc_rows(f, err);
    if (!st && hk->state_new) st = hk->state_new(m, max_batch, be, &f->hs, err);
    if (st) {
        gm_forward_free(f);
        return st;
    }
    *out = f;
    return GM_OK;
}

/* ---------------------------------------------------------------- one layer */

/* q/k norms, RoPE, query scale and the cache writes of the chunk's rows */
static void prepare_qkv(gm_forward *f, int il, const gm_fwd_row *rows, int n) {
    gm_backend *be = f->be;
    const gm_backend_ops *ops = f->ops;
    const gm_config *c = &f->m->cfg;
    const gm_layer *L = &f->m->layers[il];
    const gm_layer_config *lc = &L->lc;
    const int H = lc->n_heads, Hkv = lc->n_kv_heads, hd = lc->head_dim, kind = f->rope_of[il];
    if (L->q_norm) ops->rmsnorm(be, f->q, f->q, L->q_norm, n * H, hd, c->norm_eps, NULL);
    ops->rope(be, f->q, n, H, hd, lc->rope_dims, kind);
    ops->scale(be, f->q, (size_t)n * H * hd, c->query_scale);
    if (lc->kv_source != il) return; /* the layer reads another layer's keys and values */
    if (L->k_norm) ops->rmsnorm(be, f->k, f->k, L->k_norm, n * Hkv, hd, c->norm_eps, NULL);
    ops->rope(be, f->k, n, Hkv, hd, lc->rope_dims, kind);
    if (c->has_v_norm) ops->rmsnorm(be, f->v, f->v, NULL, n * Hkv, hd, c->norm_eps, NULL);
    ops->kv_store(be, f->k, f->v, rows, n, il, Hkv * hd);
}

static gm_status layer_forward(gm_forward *f, int il, const gm_fwd_row *rows, int n, const gm_fwd_batch *b) {
    gm_backend *be = f->be;
    const gm_backend_ops *ops = f->ops;
    const gm_config *c = &f->m->cfg;
    const gm_layer *L = &f->m->layers[il];
    const int d = c->d_model, ff = L->lc.d_ff;
    const size_t nd = (size_t)n * d;
    gm_status st;

    if ((st = HOOK(f, layer_begin, il, f->x, n))) return st; /* 3n: x = the active prediction */
    ops->rmsnorm(be, f->xn, f->x, L->attn_norm, n, d, c->norm_eps, NULL);
    if ((st = HOOK(f, attn_input, il, f->xn, n))) return st; /* 3n: LAuReL */
    {
        const bool own_kv = L->lc.kv_source == il;
        const gm_matrix *W[3] = {&L->wq, &L->wk, &L->wv};
        float *const y[3] = {f->q, f->k, f->v};
        if ((st = ops->matmul(be, W, y, !own_kv ? 1 : L->v_from_k ? 2 : 3, f->xn, n))) return st;
        /* Gemma 4 without attn_v: V is the raw K projection (normed without weight in prepare_qkv) */
        if (own_kv && L->v_from_k) ops->copy(be, f->v, f->k, (size_t)n * L->lc.n_kv_heads * L->lc.head_dim);
    }
    prepare_qkv(f, il, rows, n);
    const gm_attn_call ac = {.lay = f->lay, .lc = &L->lc, .il = il, .rows = rows, .n = n, .q = f->q, .att = f->att,
                             .softcap = c->attn_softcap, .bias = b->bias, .bias_n = b->bias_n,
                             .bias_is_mask = b->bias && b->bias_is_mask, .n_keys = b->bidirectional ? n : 0};
    ops->attention(be, &ac);
    const gm_matrix *Wo[1] = {&L->wo};
    if ((st = ops->matmul(be, Wo, &f->o, 1, f->att, n))) return st;
    if (L->post_attn_norm) ops->rmsnorm(be, f->o, f->o, L->post_attn_norm, n, d, c->norm_eps, NULL);
    ops->add(be, f->x, f->o, nd);
    if ((st = HOOK(f, attn_residual, il, f->x, n))) return st; /* 3n: x = (x + LAuReL) / sqrt 2 */

    ops->rmsnorm(be, f->xn, f->x, L->ffn_norm, n, d, c->norm_eps, NULL);
    {
        const gm_matrix *W[2] = {&L->gate, &L->up};
        float *const y[2] = {f->gate, f->up};
        if ((st = ops->matmul(be, W, y, 2, f->xn, n))) return st;
    }
    if ((st = HOOK(f, ffn_gate, il, f->gate, n, ff))) return st; /* 3n: activation sparsity */
    ops->geglu(be, f->gate, f->up, n, ff);
    const gm_matrix *Wd[1] = {&L->down};
    if ((st = ops->matmul(be, Wd, &f->o, 1, f->gate, n))) return st;
    if ((st = HOOK(f, ffn_output, il, f->x, f->o, n))) return st; /* 4: mixture-of-experts layers */
    if (L->post_ffn_norm) ops->rmsnorm(be, f->o, f->o, L->post_ffn_norm, n, d, c->norm_eps, NULL);
    ops->add(be, f->x, f->o, nd);
    if ((st = HOOK(f, layer_end, il, f->x, n))) return st; /* 3n: the new streams; 4: per-layer input, scale */
    return GM_OK;
}

/* ---------------------------------------------------------------- a chunk of rows */

/* The LM head over the rows of the chunk that ask, LOGIT_ROWS at a time: straight into the rows'
 * buffers when they are consecutive rows of one array, else through lbuf. */
static gm_status logits_rows(gm_forward *f, const gm_fwd_batch *b, const gm_fwd_row *rows, int n, int off) {
    const gm_model *m = f->m;
    const gm_config *c = &m->cfg;
    const int d = c->d_model;
    const int64_t V = c->n_vocab;
    int nl = 0;
    for (int i = 0; i < n; i++)
        if (rows[i].logits) f->lrows[nl++] = i;
    if (!nl) return GM_OK;
    f->ops->rmsnorm(f->be, f->xn, f->x, m->output_norm, nl, d, c->norm_eps, f->lrows);
    for (int r0 = 0; r0 < nl; r0 += LOGIT_ROWS) {
        const int nr = nl - r0 < LOGIT_ROWS ? nl - r0 : LOGIT_ROWS;
        bool direct = rows[f->lrows[r0]].logits_out != NULL;
        for (int i = 1; direct && i < nr; i++)
            direct = rows[f->lrows[r0 + i]].logits_out == rows[f->lrows[r0]].logits_out + (size_t)i * V;
        float *out = direct ? rows[f->lrows[r0]].logits_out : f->lbuf;
        gm_status st = f->ops->head(f->be, &m->output, f->xn + (size_t)r0 * d, nr, out, c->final_softcap);
        if (st) return st;
        for (int i = 0; !direct && i < nr; i++) {
            const gm_fwd_row *r = &rows[f->lrows[r0 + i]];
            if (r->logits_out) memcpy(r->logits_out, out + (size_t)i * V, (size_t)V * sizeof *out);
            else if (b->on_logits) b->on_logits(b->user, off + f->lrows[r0 + i], out + (size_t)i * V);
        }
    }
    return GM_OK;
}

/* The final-normed hidden state of the rows that ask (embedding models pool these). */
static void hidden_rows(gm_forward *f, const gm_fwd_row *rows, int n) {
    const gm_config *c = &f->m->cfg;
    const int d = c->d_model;
    int nh = 0;
    for (int i = 0; i < n; i++)
        if (rows[i].hidden_out) f->lrows[nh++] = i;
    if (!nh) return;
    f->ops->rmsnorm(f->be, f->xn, f->x, f->m->output_norm, nh, d, c->norm_eps, f->lrows);
    for (int i = 0; i < nh; i++) f->ops->read(f->be, rows[f->lrows[i]].hidden_out, f->xn + (size_t)i * d, (size_t)d);
}

static gm_status chunk_forward(gm_forward *f, const gm_fwd_batch *b, int off, int n) {
    const int d = f->m->cfg.d_model;
    const gm_fwd_row *rows = b->rows + off;
    gm_status st = f->ops->embed(f->be, f->x, rows, n);
    if (st) return st;
    if ((st = HOOK(f, chunk_begin, rows, f->x, n))) return st; /* 3n: the streams; 3n, 4: per-layer inputs */
    for (int k = 0; k < f->n_rope; k++) f->ops->rope_prepare(f->be, k, f->rope[k].inv_freq, f->rope[k].dims, rows, n);
    for (int il = 0; il < f->m->cfg.n_layers; il++) {
        for (int a = 0; a < b->n_aux; a++)
            if (b->aux_layers[a] == il)
                for (int i = 0; i < n; i++)
                    if (rows[i].taps)
                        f->ops->read(f->be, rows[i].taps + (size_t)a * d, f->x + (size_t)i * d, (size_t)d);
        if ((st = layer_forward(f, il, rows, n, b))) return st;
    }
    if ((st = HOOK(f, chunk_end, f->x, n))) return st; /* 3n: the streams merged */
    hidden_rows(f, rows, n);
    return logits_rows(f, b, rows, n, off);
}

static gm_status check_batch(const gm_forward *f, const gm_fwd_batch *b, gm_error *err) {
    const gm_config *c = &f->m->cfg;
    if (b->n <= 0 || !b->rows) return gm_fail(err, GM_ERR_ARG, "forward: empty batch");
    for (int i = 0; i < b->n; i++) {
        const gm_fwd_row *r = &b->rows[i];
        if (r->pos < 0 || r->pos >= f->max_ctx || !r->kv)
            return gm_fail(err, GM_ERR_CONTEXT, "forward: row %d: position %d outside the context size %d", i, r->pos,
                           f->max_ctx);
        if (!r->embed && (r->token < 0 || r->token >= c->n_vocab))
            return gm_fail(err, GM_ERR_ARG, "forward: row %d: token id %d is outside the vocabulary [0, %d)", i,
                           (int)r->token, c->n_vocab);
    }
    if (b->bias && b->bias_is_mask && b->n > f->max_batch)
        return gm_fail(err, GM_ERR_ARG,
                       "forward: a full attention mask needs the whole prompt in one batch (%d positions, batch size "
                       "%d; raise n_batch)", b->n, f->max_batch);
    if (b->bias)
        for (int i = 0; i < b->n; i++)
            if (b->rows[i].pos >= b->bias_n || b->rows[i].kv != b->rows[0].kv)
                return gm_fail(err, GM_ERR_ARG, "forward: a bias covers rows of one sequence inside its %d positions",
                               b->bias_n);
    if (b->bidirectional) {
        if (b->n > f->max_batch || b->bias)
            return gm_fail(err, GM_ERR_ARG, "forward: bidirectional attention needs the whole input in one batch "
                           "(%d positions, batch size %d) and no bias", b->n, f->max_batch);
        for (int i = 0; i < b->n; i++)
            if (b->rows[i].pos != i || b->rows[i].kv != b->rows[0].kv)
                return gm_fail(err, GM_ERR_ARG, "forward: bidirectional rows must be one sequence at positions 0..%d",
                               b->n - 1);
    }
    if (b->n_aux > 0 && !b->aux_layers) return gm_fail(err, GM_ERR_ARG, "forward: aux taps without layers");
    return GM_OK;
}

gm_status gm_forward_run(gm_forward *f, const gm_fwd_batch *b, gm_error *err) {
    gm_status st = check_batch(f, b, err);
    if (st) return st;
    if (!f->lbuf) { /* the first call that asks for logits of several rows at once */
        f->lbuf = malloc((size_t)LOGIT_ROWS * (size_t)f->m->cfg.n_vocab * sizeof *f->lbuf);
        if (!f->lbuf) return gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate the scoring buffer");
    }
    for (int off = 0; off < b->n; off += f->max_batch) {
        const int n = b->n - off < f->max_batch ? b->n - off : f->max_batch;
        st = chunk_forward(f, b, off, n);
        if (st) return gm_fail(err, st, "forward: a kernel failed (%s) at rows %d..%d", gm_status_name(st), off, off + n - 1);
    }
    return GM_OK;
}
