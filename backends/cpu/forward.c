/* backends/cpu/forward.c — the Gemma forward pass over rows (see forward.h).
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
 * are in the cache before attention runs, so each row attends both ways (attention.c, keys_of).
 * Gemma 3n (model/families/gemma3n.h) keeps 4 streams per row around this block: x is the active prediction, LAuReL
 * joins the attention residual, layers < 10 sparsify the FFN gate, V is RMS-normed, and the layer output
 * corrects the streams. */
#include "backends/cpu/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "backends/cpu/attention.h"
#include "model/families/gemma3n.h"
#include "model/families/gemma4.h"

enum { LOGIT_ROWS = 16, MAX_ROPE_KINDS = 8 };

/* Layers with the same RoPE (rotated dims, base, scale) share one table of cos/sin per row. */
typedef struct rope_kind {
    const float *inv_freq;
    int dims;
    float base, scale;
    float *cs, *sn; /* max_batch x dims/2 */
} rope_kind;

struct gm_forward {
    const gm_model *m;
    const gm_kv_layout *lay;
    gm_pool *pool;
    int max_batch, max_ctx;
    gm_layer_max mx;
    gm_matmul_scratch mm;
    gm_attn_scratch attn;
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up; /* max_batch rows each */
    rope_kind rope[MAX_ROPE_KINDS];
    int n_rope, *rope_of; /* per layer: its kind */
    int *lrows;           /* rows of a chunk that want logits */
    float *buf;           /* backing store of the above */
    float *lbuf;          /* LOGIT_ROWS x n_vocab, allocated on the first on_logits pass */
    float *ones;          /* head_dim ones: the weightless V norm */
    gm_3n_state *g3n;     /* Gemma 3n's streams, NULL for other models */
    gm_4_state *g4;       /* Gemma 4's per-layer inputs, NULL for other models */
};

void gm_forward_free(gm_forward *f) {
    if (!f) return;
    gm_matmul_scratch_free(&f->mm);
    gm_attn_scratch_free(&f->attn);
    free(f->rope_of);
    free(f->lrows);
    free(f->buf);
    free(f->lbuf);
    free(f->ones);
    gm_3n_state_free(f->g3n);
    gm_4_state_free(f->g4);
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
            if (k == MAX_ROPE_KINDS)
                return gm_fail(err, GM_ERR_UNSUPPORTED, "forward: more than %d distinct RoPE settings", MAX_ROPE_KINDS);
            f->rope[k] = (rope_kind){.inv_freq = m->layers[il].inv_freq, .dims = l->rope_dims, .base = l->rope_base,
                                     .scale = l->rope_scale};
            f->n_rope++;
        }
        f->rope_of[il] = k;
    }
    return GM_OK;
}

gm_status gm_forward_new(const gm_model *m, const gm_kv_layout *lay, gm_pool *pool, int max_batch, int max_ctx,
                         gm_forward **out, gm_error *err) {
    *out = NULL;
    if (!m || max_batch <= 0 || max_ctx <= 0)
        return gm_fail(err, GM_ERR_ARG, "forward: bad arguments (batch %d, context %d)", max_batch, max_ctx);
    gm_forward *f = calloc(1, sizeof *f);
    if (!f) return gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
    f->m = m;
    f->lay = lay;
    f->pool = pool;
    f->max_batch = max_batch;
    f->max_ctx = max_ctx;
    f->mx = gm_model_layer_max(m);
    gm_status st = find_rope_kinds(f, err);
    if (st) {
        gm_forward_free(f);
        return st;
    }
    const size_t B = (size_t)max_batch, d = (size_t)m->cfg.d_model;
    const size_t qd = (size_t)f->mx.q_dim, kvd = (size_t)f->mx.kv_dim, ff = (size_t)f->mx.d_ff;
    const size_t qo = qd > d ? qd : d, rh = (size_t)f->mx.head_dim / 2;
    const size_t sizes[] = {B * d, B * d, B * qd, B * kvd, B * kvd, B * qd, B * qo, B * ff, B * ff};
    float **dst[] = {&f->x, &f->xn, &f->q, &f->k, &f->v, &f->att, &f->o, &f->gate, &f->up};
    const int n_fixed = (int)(sizeof sizes / sizeof sizes[0]);
    size_t total = 0;
    for (int i = 0; i < n_fixed; i++) total += (sizes[i] + 15) & ~(size_t)15;
    total += (size_t)f->n_rope * 2 * ((B * rh + 15) & ~(size_t)15);
    /* 64-byte aligned (every part is a multiple of 16 floats): a large malloc sits 16 bytes past a page, which
     * made every other 32-byte activation load of the AVX2 kernels (and every 64-byte one of AVX-512) split
     * two cache lines (AVX2 F16 tiles: 45 vs 61 GFLOP/s in the kernel bench) */
    void *buf = NULL;
    f->buf = posix_memalign(&buf, 64, total * sizeof(float)) == 0 ? buf : NULL;
    f->lrows = malloc(B * sizeof *f->lrows);
    if (!f->buf || !f->lrows) {
        gm_forward_free(f);
        return gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate %zu bytes of scratch", total * sizeof(float));
    }
    float *p = f->buf;
    for (int i = 0; i < n_fixed; i++) {
        *dst[i] = p;
        p += (sizes[i] + 15) & ~(size_t)15;
    }
    for (int k = 0; k < f->n_rope; k++) {
        f->rope[k].cs = p;
        p += (B * rh + 15) & ~(size_t)15;
        f->rope[k].sn = p;
        p += (B * rh + 15) & ~(size_t)15;
    }
    if (m->cfg.has_v_norm) {
        f->ones = malloc((size_t)f->mx.head_dim * sizeof *f->ones);
        if (!f->ones) {
            gm_forward_free(f);
            return gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
        }
        for (int i = 0; i < f->mx.head_dim; i++) f->ones[i] = 1.0f;
    }
    if (m->g3n && (st = gm_3n_state_new(m, max_batch, pool, &f->mm, &f->g3n, err))) {
        gm_forward_free(f);
        return st;
    }
    if (m->g4 && (st = gm_4_state_new(m, max_batch, pool, &f->mm, &f->g4, err))) {
        gm_forward_free(f);
        return st;
    }
    st = gm_attn_scratch_init(&f->attn, pool ? gm_pool_size(pool) : 1, max_batch, max_ctx, f->mx.group, f->mx.n_heads,
                              f->mx.head_dim, err);
    if (st) {
        gm_forward_free(f);
        return st;
    }
    *out = f;
    return GM_OK;
}

/* ---------------------------------------------------------------- row-wise work */

/* Row-wise work of a chunk, spread over the pool when the chunk has several rows; each row is computed
 * by the same code whatever the thread, so results do not depend on the split. */
typedef struct rows_job {
    float *y;
    const float *x, *w;
    int dim;
    float eps;
    const int *idx; /* NULL: rows in order; else row i is idx[i] */
} rows_job;

static void norm_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const rows_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        const int64_t r = j->idx ? j->idx[i] : i;
        gm_rmsnorm_fast(j->y + i * j->dim, j->x + r * j->dim, j->w, j->dim, j->eps);
    }
}

static void norm_rows(gm_pool *pool, float *y, const float *x, const float *w, int n, int dim, float eps,
                      const int *idx) {
    rows_job j = {y, x, w, dim, eps, idx};
    if (n == 1) norm_task(&j, 0, 1, 0);
    else gm_pool_parallel_for(pool, n, 1, norm_task, &j);
}

static void geglu_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const rows_job *j = ctx;
    gm_geglu_fast(j->y + begin, j->x + begin, (int)(end - begin));
}

/* NEOX RoPE on the first `dims` dims of each of n_heads heads of hd floats */
static void rope_heads(float *x, int n_heads, int hd, int dims, const float *cs, const float *sn) {
    if (dims == hd) {
        gm_rope_neox(x, n_heads, hd, cs, sn);
        return;
    }
    for (int h = 0; h < n_heads; h++) gm_rope_neox(x + (size_t)h * hd, 1, dims, cs, sn);
}

/* q/k norms, RoPE, query scale and the cache writes of rows [begin, end) */
typedef struct qk_job {
    const gm_forward *f;
    const gm_fwd_row *rows;
    int il;
} qk_job;

static void qk_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const qk_job *j = ctx;
    const gm_forward *f = j->f;
    const gm_config *c = &f->m->cfg;
    const gm_layer *L = &f->m->layers[j->il];
    const gm_layer_config *lc = &L->lc;
    const int H = lc->n_heads, Hkv = lc->n_kv_heads, hd = lc->head_dim;
    const size_t qd = (size_t)H * hd, kvd = (size_t)Hkv * hd;
    const rope_kind *rk = &f->rope[f->rope_of[j->il]];
    const bool own_kv = lc->kv_source == j->il;
    for (int64_t i = begin; i < end; i++) {
        float *q = f->q + (size_t)i * qd, *k = f->k + (size_t)i * kvd;
        const float *cs = rk->cs + (size_t)i * (rk->dims / 2), *sn = rk->sn + (size_t)i * (rk->dims / 2);
        if (L->q_norm)
            for (int h = 0; h < H; h++) gm_rmsnorm_fast(q + (size_t)h * hd, q + (size_t)h * hd, L->q_norm, hd, c->norm_eps);
        rope_heads(q, H, hd, lc->rope_dims, cs, sn);
        gm_scale(q, (int)qd, c->query_scale);
        if (!own_kv) continue;
        if (L->k_norm)
            for (int h = 0; h < Hkv; h++) gm_rmsnorm_fast(k + (size_t)h * hd, k + (size_t)h * hd, L->k_norm, hd, c->norm_eps);
        rope_heads(k, Hkv, hd, lc->rope_dims, cs, sn);
        float *v = f->v + (size_t)i * kvd;
        if (f->ones)
            for (int h = 0; h < Hkv; h++) gm_rmsnorm_fast(v + (size_t)h * hd, v + (size_t)h * hd, f->ones, hd, c->norm_eps);
        const gm_fwd_row *r = &j->rows[i];
        const gm_kv_type kt = (gm_kv_type)f->lay->dtype;
        gm_kv_store(gm_kv_row_k(f->lay, r->kv, j->il, r->pos), kt, k, (int)kvd);
        gm_kv_store(gm_kv_row_v(f->lay, r->kv, j->il, r->pos), kt, v, (int)kvd);
    }
}

#define MM(W, x, n, y)                                                                   \
    do {                                                                                 \
        gm_status st_ = gm_matmul(W, x, n, y, f->pool, &f->mm);                          \
        if (st_) return st_;                                                             \
    } while (0)

static gm_status layer_forward(gm_forward *f, int il, const gm_fwd_row *rows, int n, const gm_fwd_batch *b) {
    const gm_model *m = f->m;
    const gm_config *c = &m->cfg;
    const gm_layer *L = &m->layers[il];
    const int d = c->d_model, ff = L->lc.d_ff;
    gm_status st;

    if (f->g3n) gm_3n_predict(f->g3n, il, f->x, n); /* x = the active prediction */
    norm_rows(f->pool, f->xn, f->x, L->attn_norm, n, d, c->norm_eps, NULL);
    if (f->g3n && (st = gm_3n_laurel(f->g3n, il, f->xn, n))) return st;
    {
        const bool own_kv = L->lc.kv_source == il;
        const gm_matrix *W[3] = {&L->wq, &L->wk, &L->wv};
        float *const y[3] = {f->q, f->k, f->v};
        st = gm_matmul_multi(W, y, !own_kv ? 1 : L->v_from_k ? 2 : 3, f->xn, n, f->pool, &f->mm);
        if (st) return st;
        /* Gemma 4 without attn_v: V is the raw K projection (normed without weight in qk_task) */
        if (own_kv && L->v_from_k) memcpy(f->v, f->k, (size_t)n * L->lc.n_kv_heads * L->lc.head_dim * sizeof *f->v);
    }
    qk_job qj = {f, rows, il};
    if (n == 1) qk_task(&qj, 0, 1, 0);
    else gm_pool_parallel_for(f->pool, n, 1, qk_task, &qj);
    const gm_attn_call ac = {.lay = f->lay, .lc = &L->lc, .il = il, .rows = rows, .n = n, .q = f->q, .att = f->att,
                             .softcap = c->attn_softcap, .bias = b->bias, .bias_n = b->bias_n,
                             .bias_is_mask = b->bias && b->bias_is_mask, .n_keys = b->bidirectional ? n : 0};
    gm_attention(f->pool, &f->attn, &ac);
    MM(&L->wo, f->att, n, f->o);
    if (L->post_attn_norm) norm_rows(f->pool, f->o, f->o, L->post_attn_norm, n, d, c->norm_eps, NULL);
    gm_add(f->x, f->o, n * d);
    if (f->g3n) gm_3n_attn_residual(f->g3n, f->x, n); /* x = (x + LAuReL) / sqrt 2 */

    norm_rows(f->pool, f->xn, f->x, L->ffn_norm, n, d, c->norm_eps, NULL);
    {
        const gm_matrix *W[2] = {&L->gate, &L->up};
        float *const y[2] = {f->gate, f->up};
        st = gm_matmul_multi(W, y, 2, f->xn, n, f->pool, &f->mm);
        if (st) return st;
    }
    if (f->g3n) gm_3n_sparsify(f->g3n, il, f->gate, n, ff);
    rows_job gj = {f->gate, f->up, NULL, 0, 0.0f, NULL};
    if (n == 1) gm_geglu_fast(f->gate, f->up, ff); /* ~1 us: cheaper than a pool round trip */
    else gm_pool_parallel_for(f->pool, (int64_t)n * ff, 1024, geglu_task, &gj);
    MM(&L->down, f->gate, n, f->o);
    if (f->g4 && (st = gm_4_moe(f->g4, il, f->x, f->o, n))) return st; /* Gemma 4 MoE layers: o += experts */
    if (L->post_ffn_norm) norm_rows(f->pool, f->o, f->o, L->post_ffn_norm, n, d, c->norm_eps, NULL);
    gm_add(f->x, f->o, n * d);
    if (f->g3n && (st = gm_3n_correct(f->g3n, il, f->x, n))) return st; /* the new streams */
    if (f->g4 && (st = gm_4_layer_end(f->g4, il, f->x, n))) return st;  /* per-layer input, output scale */
    return GM_OK;
}

/* ---------------------------------------------------------------- a chunk of rows */

static void rope_tables(gm_forward *f, const gm_fwd_row *rows, int n) {
    for (int k = 0; k < f->n_rope; k++) {
        const rope_kind *r = &f->rope[k];
        const int h = r->dims / 2;
        for (int i = 0; i < n; i++)
            gm_rope_cos_sin(r->cs + (size_t)i * h, r->sn + (size_t)i * h, r->inv_freq, r->dims, rows[i].pos);
    }
}

static gm_status embed_rows(gm_forward *f, const gm_fwd_row *rows, int n) {
    const gm_model *m = f->m;
    const int d = m->cfg.d_model;
    for (int i = 0; i < n; i++) {
        float *row = f->x + (size_t)i * d;
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

/* The LM head over the rows of the chunk that ask, LOGIT_ROWS at a time: straight into the rows'
 * buffers when they are consecutive rows of one array, else through scratch. */
static gm_status logits_rows(gm_forward *f, const gm_fwd_batch *b, const gm_fwd_row *rows, int n, int off) {
    const gm_model *m = f->m;
    const gm_config *c = &m->cfg;
    const int d = c->d_model;
    const int64_t V = c->n_vocab;
    int nl = 0;
    for (int i = 0; i < n; i++)
        if (rows[i].logits) f->lrows[nl++] = i;
    if (!nl) return GM_OK;
    norm_rows(f->pool, f->xn, f->x, m->output_norm, nl, d, c->norm_eps, f->lrows);
    for (int r0 = 0; r0 < nl; r0 += LOGIT_ROWS) {
        const int nr = nl - r0 < LOGIT_ROWS ? nl - r0 : LOGIT_ROWS;
        bool direct = rows[f->lrows[r0]].logits_out != NULL;
        for (int i = 1; direct && i < nr; i++)
            direct = rows[f->lrows[r0 + i]].logits_out == rows[f->lrows[r0]].logits_out + (size_t)i * V;
        float *out = direct ? rows[f->lrows[r0]].logits_out : f->lbuf;
        MM(&m->output, f->xn + (size_t)r0 * d, nr, out);
        if (c->final_softcap > 0.0f) gm_softcap(out, (int)(V * nr), c->final_softcap);
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
    const gm_model *m = f->m;
    for (int i = 0; i < n; i++)
        if (rows[i].hidden_out)
            gm_rmsnorm_fast(rows[i].hidden_out, f->x + (size_t)i * m->cfg.d_model, m->output_norm, m->cfg.d_model,
                            m->cfg.norm_eps);
}

static gm_status chunk_forward(gm_forward *f, const gm_fwd_batch *b, int off, int n) {
    const gm_model *m = f->m;
    const int d = m->cfg.d_model;
    const gm_fwd_row *rows = b->rows + off;
    gm_status st = embed_rows(f, rows, n);
    if (st) return st;
    if (f->g3n && (st = gm_3n_begin(f->g3n, rows, f->x, n))) return st;
    if (f->g4 && (st = gm_4_begin(f->g4, rows, f->x, n))) return st;
    rope_tables(f, rows, n);
    const int tap = b->aux_row - off; /* the tapped row inside this chunk, if it is here */
    for (int il = 0; il < m->cfg.n_layers; il++) {
        if (tap >= 0 && tap < n)
            for (int a = 0; a < b->n_aux; a++)
                if (b->aux_layers[a] == il)
                    memcpy(b->aux_out + (size_t)a * d, f->x + (size_t)tap * d, (size_t)d * sizeof(float));
        if ((st = layer_forward(f, il, rows, n, b))) return st;
    }
    if (f->g3n && (st = gm_3n_end(f->g3n, f->x, n))) return st;
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
    if (b->n_aux > 0 && (!b->aux_layers || !b->aux_out)) return gm_fail(err, GM_ERR_ARG, "forward: aux taps without buffers");
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
