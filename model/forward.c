/* model/forward.c — the Gemma forward pass (see forward.h).
 *
 * Per layer, for a chunk of n positions (all rows at once, so matmuls are batched):
 *   xn = RMSNorm(x, attn_norm); q, k, v = xn Wq, xn Wk, xn Wv
 *   Gemma 3: per-head RMSNorm of q and k over head_dim; RoPE (NEOX) on q and k; q *= query_scale
 *   k, v -> cache; attention per (position, head) over the cache (causal, sliding window per layer,
 *   Gemma 2 soft-cap before the mask, optional caller bias); o = att Wo
 *   Gemma 2/3: o = RMSNorm(o, post_attn_norm);  x += o
 *   xn = RMSNorm(x, ffn_norm); o = (gelu_tanh(xn Wgate) * (xn Wup)) Wdown
 *   Gemma 2/3: o = RMSNorm(o, post_ffn_norm);   x += o
 * then logits = RMSNorm(x, output_norm) E^T (tied), Gemma 2: final soft-cap. */
#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

struct gm_forward {
    const gm_model *m;
    gm_pool *pool;
    int max_batch, max_ctx, n_threads;
    gm_matmul_scratch mm;
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up; /* max_batch rows each */
    float *rope[2][2];  /* [local, global][cos, sin]: max_batch x hd/2 */
    float *scores;      /* n_threads x (heads per KV head) x max_ctx */
    float *part;        /* decode split-K partials: Hkv x chunks x G x (hd + 2) */
    float *buf;         /* backing store of all the above */
    float *lbuf;        /* LOGIT_ROWS x n_vocab, allocated on the first on_logits pass */
};

enum { LOGIT_ROWS = 16 };
/* Decode attention over many keys is split into chunks of this many keys, one task each (the split
 * is fixed, not per thread count, so results do not depend on the number of threads). */
enum { KV_CHUNK = 64 };

void gm_forward_free(gm_forward *f) {
    if (!f) return;
    gm_matmul_scratch_free(&f->mm);
    free(f->buf);
    free(f->lbuf);
    free(f);
}

gm_status gm_forward_new(const gm_model *m, gm_pool *pool, int max_batch, int max_ctx, gm_forward **out,
                         gm_error *err) {
    *out = NULL;
    if (!m || max_batch <= 0 || max_ctx <= 0)
        return gm_fail(err, GM_ERR_ARG, "forward: bad arguments (batch %d, context %d)", max_batch, max_ctx);
    const gm_config *c = &m->cfg;
    gm_forward *f = calloc(1, sizeof *f);
    if (!f) return gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
    f->m = m;
    f->pool = pool;
    f->max_batch = max_batch;
    f->max_ctx = max_ctx;
    f->n_threads = pool ? gm_pool_size(pool) : 1;
    const size_t B = (size_t)max_batch, d = (size_t)c->d_model, hd = (size_t)c->head_dim;
    const size_t qd = (size_t)c->n_heads * hd, kvd = (size_t)c->n_kv_heads * hd, ff = (size_t)c->d_ff;
    const size_t qo = qd > d ? qd : d;
    const size_t sizes[] = {B * d, B * d, B * qd, B * kvd, B * kvd, B * qd, B * qo, B * ff, B * ff,
                            B * hd / 2, B * hd / 2, B * hd / 2, B * hd / 2,
                            (size_t)f->n_threads * (size_t)(c->n_heads / c->n_kv_heads) * (size_t)max_ctx,
                            (size_t)c->n_kv_heads * (size_t)((max_ctx + KV_CHUNK - 1) / KV_CHUNK) *
                                (size_t)(c->n_heads / c->n_kv_heads) * (hd + 2)};
    float **dst[] = {&f->x, &f->xn, &f->q, &f->k, &f->v, &f->att, &f->o, &f->gate, &f->up,
                     &f->rope[0][0], &f->rope[0][1], &f->rope[1][0], &f->rope[1][1], &f->scores, &f->part};
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += (sizes[i] + 15) & ~(size_t)15;
    f->buf = malloc(total * sizeof(float));
    if (!f->buf) {
        free(f);
        return gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate %zu bytes of scratch", total * sizeof(float));
    }
    float *p = f->buf;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *dst[i] = p;
        p += (sizes[i] + 15) & ~(size_t)15;
    }
    *out = f;
    return GM_OK;
}

/* ---------------------------------------------------------------- attention over the cache */

typedef struct attn_job {
    const gm_forward *f;
    const gm_kvcache *cache;
    int layer, n, pos0;     /* chunk: n positions from pos0 */
    int bpos0, bn;          /* the whole batch (for the bias) */
    const float *bias;      /* bn x bn or NULL */
    bool bias_is_mask;      /* keys: the whole batch, masked by the bias alone */
    int parts;              /* query heads of a group split into this many items (1 or 2) */
} attn_job;

/* One item = one position x one KV head (x one part of its query heads): the query heads sharing
 * that KV head read each cached key and value once. A decode step splits each group in two parts
 * so a model with one KV head (Gemma 3 270M) still has work for two threads; every head's
 * arithmetic is the same whatever the group it is computed with, so results do not change. */
static void attn_task(void *ctx, int64_t begin, int64_t end, int thread) {
    const attn_job *j = ctx;
    const gm_forward *f = j->f;
    const gm_config *c = &f->m->cfg;
    const gm_layer *L = &f->m->layers[j->layer];
    const int Hkv = c->n_kv_heads, hd = c->head_dim, G = c->n_heads / c->n_kv_heads, group = G / j->parts;
    const size_t qd = (size_t)c->n_heads * hd;
    float *scores = f->scores + (size_t)thread * G * f->max_ctx;
    for (int64_t t = begin; t < end; t++) {
        const int i = (int)(t / (Hkv * j->parts)), kvh = (int)(t / j->parts % Hkv), part = (int)(t % j->parts);
        const int pos = j->pos0 + i;
        int kstart = (L->window > 0 && pos - L->window + 1 > 0) ? pos - L->window + 1 : 0;
        int kend = pos + 1;
        if (j->bias_is_mask) kstart = j->bpos0, kend = j->bpos0 + j->bn;
        const float *bias = NULL;
        if (j->bias) bias = j->bias + (size_t)(pos - j->bpos0) * j->bn;
        const size_t off = (size_t)i * qd + ((size_t)kvh * G + (size_t)part * group) * hd;
        gm_attend_group(f->att + off, f->q + off, group, gm_kv_k(j->cache, j->layer, kstart) + (size_t)kvh * hd,
                        gm_kv_v(j->cache, j->layer, kstart) + (size_t)kvh * hd, (size_t)j->cache->kv_dim,
                        kend - kstart, hd, c->attn_softcap, bias, j->bpos0 - kstart, scores);
    }
}

/* Decode (one query position): item = (KV head, chunk of KV_CHUNK keys). Each item leaves, per query
 * head of the group, its max score m, sum of exp(s - m) and the unnormalised sum of exp(s - m) v;
 * merge_split combines the chunks exactly (log-sum-exp rescaling). */
typedef struct split_job {
    const gm_forward *f;
    const gm_kvcache *cache;
    int layer, kstart, n_keys, n_chunks;
} split_job;

static void split_task(void *ctx, int64_t begin, int64_t end, int thread) {
    const split_job *j = ctx;
    const gm_forward *f = j->f;
    const gm_config *c = &f->m->cfg;
    const int hd = c->head_dim, G = c->n_heads / c->n_kv_heads;
    float *scores = f->scores + (size_t)thread * G * f->max_ctx;
    for (int64_t t = begin; t < end; t++) {
        const int kvh = (int)(t / j->n_chunks), ch = (int)(t % j->n_chunks);
        const int k0 = ch * KV_CHUNK, nk = j->n_keys - k0 < KV_CHUNK ? j->n_keys - k0 : KV_CHUNK;
        const float *k = gm_kv_k(j->cache, j->layer, j->kstart + k0) + (size_t)kvh * hd;
        const float *v = gm_kv_v(j->cache, j->layer, j->kstart + k0) + (size_t)kvh * hd;
        const size_t kvs = (size_t)j->cache->kv_dim;
        gm_attend_group_partial(f->part + (size_t)t * G * (hd + 2), f->q + (size_t)kvh * G * hd, G, k, v, kvs, nk, hd,
                                c->attn_softcap, scores);
    }
}

static void merge_split(const gm_forward *f, int n_chunks) {
    const gm_config *c = &f->m->cfg;
    const int hd = c->head_dim, G = c->n_heads / c->n_kv_heads;
    for (int h = 0; h < c->n_heads; h++) {
        const int kvh = h / G, g = h % G;
        float *out = f->att + (size_t)h * hd;
        float mx = -INFINITY;
        for (int ch = 0; ch < n_chunks; ch++) {
            const float m = f->part[((size_t)(kvh * n_chunks + ch) * G + g) * (hd + 2) + hd];
            mx = m > mx ? m : mx;
        }
        double z = 0.0;
        memset(out, 0, (size_t)hd * sizeof *out);
        for (int ch = 0; ch < n_chunks; ch++) {
            const float *o = f->part + ((size_t)(kvh * n_chunks + ch) * G + g) * (hd + 2);
            const float w = expf(o[hd] - mx);
            z += (double)w * o[hd + 1];
            gm_axpy_f32(out, w, o, hd);
        }
        gm_scale(out, hd, (float)(1.0 / z));
    }
}

/* ---------------------------------------------------------------- one layer over a chunk */

/* Row-wise work of a chunk, spread over the pool when the chunk has several rows (prefill); each
 * row is computed by the same code whatever the thread, so results do not depend on the split. */
typedef struct rows_job {
    float *y;
    const float *x, *w;
    int dim;
    float eps;
} rows_job;

static void norm_task(void *ctx, int64_t begin, int64_t end, int thread) {
    const rows_job *j = ctx;
    for (int64_t i = begin; i < end; i++) gm_rmsnorm_fast(j->y + i * j->dim, j->x + i * j->dim, j->w, j->dim, j->eps);
}

static void norm_rows_pool(gm_pool *pool, float *y, const float *x, const float *w, int n, int dim, float eps) {
    rows_job j = {y, x, w, dim, eps};
    if (n == 1) norm_task(&j, 0, 1, 0);
    else gm_pool_parallel_for(pool, n, 1, norm_task, &j);
}

static void norm_rows(float *y, const float *x, const float *w, int n, int dim, float eps) {
    for (int i = 0; i < n; i++) gm_rmsnorm_fast(y + (size_t)i * dim, x + (size_t)i * dim, w, dim, eps);
}

static void geglu_task(void *ctx, int64_t begin, int64_t end, int thread) {
    const rows_job *j = ctx;
    gm_geglu_fast(j->y + begin, j->x + begin, (int)(end - begin));
}

/* q/k norms, RoPE, query scale and the cache writes of positions [begin, end) of the chunk. */
typedef struct qk_job {
    const gm_forward *f;
    gm_kvcache *cache;
    int il, pos0;
} qk_job;

static void qk_task(void *ctx, int64_t begin, int64_t end, int thread) {
    const qk_job *j = ctx;
    const gm_forward *f = j->f;
    const gm_config *c = &f->m->cfg;
    const gm_layer *L = &f->m->layers[j->il];
    const int H = c->n_heads, Hkv = c->n_kv_heads, hd = c->head_dim;
    const size_t qd = (size_t)H * hd, kvd = (size_t)Hkv * hd;
    float *const *rope = f->rope[L->sliding ? 0 : 1];
    for (int64_t i = begin; i < end; i++) {
        float *q = f->q + (size_t)i * qd, *k = f->k + (size_t)i * kvd;
        if (L->q_norm) {
            for (int h = 0; h < H; h++) gm_rmsnorm_fast(q + (size_t)h * hd, q + (size_t)h * hd, L->q_norm, hd, c->norm_eps);
            for (int h = 0; h < Hkv; h++) gm_rmsnorm_fast(k + (size_t)h * hd, k + (size_t)h * hd, L->k_norm, hd, c->norm_eps);
        }
        const float *cs = rope[0] + (size_t)i * (hd / 2), *sn = rope[1] + (size_t)i * (hd / 2);
        gm_rope_neox(q, H, hd, cs, sn);
        gm_rope_neox(k, Hkv, hd, cs, sn);
        gm_scale(q, (int)qd, c->query_scale);
        memcpy(gm_kv_k(j->cache, j->il, j->pos0 + (int)i), k, kvd * sizeof(float));
        memcpy(gm_kv_v(j->cache, j->il, j->pos0 + (int)i), f->v + (size_t)i * kvd, kvd * sizeof(float));
    }
}

#define MM(W, x, n, y)                                                                   \
    do {                                                                                 \
        gm_status st_ = gm_matmul(W, x, n, y, f->pool, &f->mm);                          \
        if (st_) return st_;                                                             \
    } while (0)

static gm_status layer_forward(gm_forward *f, gm_kvcache *cache, int il, int n, int pos0, const gm_fwd_batch *b) {
    const gm_model *m = f->m;
    const gm_config *c = &m->cfg;
    const gm_layer *L = &m->layers[il];
    const int d = c->d_model, Hkv = c->n_kv_heads, ff = c->d_ff;

    norm_rows_pool(f->pool, f->xn, f->x, L->attn_norm, n, d, c->norm_eps);
    {
        const gm_matrix *W[3] = {&L->wq, &L->wk, &L->wv};
        float *const y[3] = {f->q, f->k, f->v};
        gm_status st = gm_matmul_multi(W, y, 3, f->xn, n, f->pool, &f->mm);
        if (st) return st;
    }
    qk_job qj = {f, cache, il, pos0};
    if (n == 1) qk_task(&qj, 0, 1, 0);
    else gm_pool_parallel_for(f->pool, n, 1, qk_task, &qj);
    attn_job job = {.f = f, .cache = cache, .layer = il, .n = n, .pos0 = pos0,
                    .bpos0 = b->pos0, .bn = b->n, .bias = b->bias,
                    .bias_is_mask = b->bias && b->bias_is_mask,
                    .parts = n == 1 && gm_pool_size(f->pool) > 1 && c->n_heads / Hkv % 2 == 0 ? 2 : 1};
    const int kstart1 = (L->window > 0 && pos0 - L->window + 1 > 0) ? pos0 - L->window + 1 : 0;
    if (n == 1 && !b->bias && pos0 + 1 - kstart1 > KV_CHUNK) {
        /* one query over many keys: split the keys so every thread has work */
        split_job sj = {f, cache, il, kstart1, pos0 + 1 - kstart1, (pos0 + 1 - kstart1 + KV_CHUNK - 1) / KV_CHUNK};
        gm_pool_parallel_for(f->pool, (int64_t)Hkv * sj.n_chunks, 1, split_task, &sj);
        merge_split(f, sj.n_chunks);
    } else {
        gm_pool_parallel_for(f->pool, (int64_t)n * Hkv * job.parts, 1, attn_task, &job);
    }
    MM(&L->wo, f->att, n, f->o);
    if (L->post_attn_norm) norm_rows_pool(f->pool, f->o, f->o, L->post_attn_norm, n, d, c->norm_eps);
    gm_add(f->x, f->o, n * d);

    norm_rows_pool(f->pool, f->xn, f->x, L->ffn_norm, n, d, c->norm_eps);
    {
        const gm_matrix *W[2] = {&L->gate, &L->up};
        float *const y[2] = {f->gate, f->up};
        gm_status st = gm_matmul_multi(W, y, 2, f->xn, n, f->pool, &f->mm);
        if (st) return st;
    }
    rows_job gj = {f->gate, f->up, NULL, 0, 0.0f};
    if (n == 1) gm_geglu_fast(f->gate, f->up, ff); /* ~1 us: cheaper than a pool round trip */
    else gm_pool_parallel_for(f->pool, (int64_t)n * ff, 1024, geglu_task, &gj);
    MM(&L->down, f->gate, n, f->o);
    if (L->post_ffn_norm) norm_rows_pool(f->pool, f->o, f->o, L->post_ffn_norm, n, d, c->norm_eps);
    gm_add(f->x, f->o, n * d);
    return GM_OK;
}

/* ---------------------------------------------------------------- a chunk of the batch */

static void rope_tables(gm_forward *f, int n, int pos0) {
    const gm_model *m = f->m;
    const int hd = m->cfg.head_dim;
    bool done[2] = {false, false};
    for (int il = 0; il < m->cfg.n_layers; il++) {
        const gm_layer *L = &m->layers[il];
        const int kind = L->sliding ? 0 : 1;
        if (done[kind]) continue;
        done[kind] = true;
        for (int i = 0; i < n; i++)
            gm_rope_cos_sin(f->rope[kind][0] + (size_t)i * (hd / 2), f->rope[kind][1] + (size_t)i * (hd / 2),
                            L->inv_freq, hd, pos0 + i);
    }
}

static gm_status chunk_forward(gm_forward *f, gm_kvcache *cache, const gm_fwd_batch *b, int off, int n) {
    const gm_model *m = f->m;
    const gm_config *c = &m->cfg;
    const int d = c->d_model, pos0 = b->pos0 + off;
    const bool last_chunk = off + n == b->n;
    if (b->embeds) {
        memcpy(f->x, b->embeds + (size_t)off * d, (size_t)n * d * sizeof(float));
    } else {
        for (int i = 0; i < n; i++) {
            float *row = f->x + (size_t)i * d;
            gm_status st = gm_matrix_row(&m->embd, b->ids[off + i], row);
            if (st) return st;
            gm_scale(row, d, c->embed_scale);
        }
    }
    rope_tables(f, n, pos0);
    for (int il = 0; il < c->n_layers; il++) {
        if (last_chunk)
            for (int a = 0; a < b->n_aux; a++)
                if (b->aux_layers[a] == il)
                    memcpy(b->aux_out + (size_t)a * d, f->x + (size_t)(n - 1) * d, (size_t)d * sizeof(float));
        gm_status st = layer_forward(f, cache, il, n, pos0, b);
        if (st) return st;
    }
    const int64_t V = c->n_vocab;
    if (b->on_logits) {
        norm_rows_pool(f->pool, f->xn, f->x, m->output_norm, n, d, c->norm_eps);
        /* rows before logits_from are not wanted: skip their 262144-wide LM head rows */
        const int first = b->logits_from - off > 0 ? b->logits_from - off : 0;
        for (int r0 = first; r0 < n; r0 += LOGIT_ROWS) {
            const int nr = n - r0 < LOGIT_ROWS ? n - r0 : LOGIT_ROWS;
            MM(&m->output, f->xn + (size_t)r0 * d, nr, f->lbuf);
            if (c->final_softcap > 0.0f) gm_softcap(f->lbuf, (int)(V * nr), c->final_softcap);
            for (int i = 0; i < nr; i++) b->on_logits(b->user, off + r0 + i, f->lbuf + (size_t)i * V);
        }
    }
    if (!b->logits) return GM_OK;
    if (b->all_logits) {
        norm_rows(f->xn, f->x, m->output_norm, n, d, c->norm_eps);
        float *out = b->logits + (size_t)off * V;
        MM(&m->output, f->xn, n, out);
        if (c->final_softcap > 0.0f) gm_softcap(out, (int)(V * n), c->final_softcap);
    } else if (last_chunk) {
        gm_rmsnorm_fast(f->xn, f->x + (size_t)(n - 1) * d, m->output_norm, d, c->norm_eps);
        MM(&m->output, f->xn, 1, b->logits);
        if (c->final_softcap > 0.0f) gm_softcap(b->logits, (int)V, c->final_softcap);
    }
    return GM_OK;
}

gm_status gm_forward_run(gm_forward *f, gm_kvcache *cache, const gm_fwd_batch *b, gm_error *err) {
    const gm_config *c = &f->m->cfg;
    if (b->n <= 0 || b->pos0 < 0) return gm_fail(err, GM_ERR_ARG, "forward: bad batch (n %d, pos0 %d)", b->n, b->pos0);
    if (!b->embeds && !b->ids) return gm_fail(err, GM_ERR_ARG, "forward: neither ids nor embeddings given");
    if ((int64_t)b->pos0 + b->n > f->max_ctx)
        return gm_fail(err, GM_ERR_CONTEXT, "forward: positions up to %lld exceed the context size %d",
                       (long long)b->pos0 + b->n, f->max_ctx);
    if (!b->embeds)
        for (int i = 0; i < b->n; i++)
            if (b->ids[i] < 0 || b->ids[i] >= c->n_vocab)
                return gm_fail(err, GM_ERR_ARG, "forward: token id %d at index %d is outside the vocabulary [0, %d)",
                               (int)b->ids[i], i, c->n_vocab);
    if (b->bias_is_mask && b->bias && (b->pos0 != 0 || b->n > f->max_batch))
        return gm_fail(err, GM_ERR_ARG,
                       "forward: a full attention mask needs the whole prompt in one batch from position 0 "
                       "(%d positions, batch size %d; raise n_batch)", b->n, f->max_batch);
    if (b->n_aux > 0 && (!b->aux_layers || !b->aux_out)) return gm_fail(err, GM_ERR_ARG, "forward: aux taps without buffers");
    if (b->on_logits && !f->lbuf) {
        f->lbuf = malloc((size_t)LOGIT_ROWS * (size_t)c->n_vocab * sizeof *f->lbuf);
        if (!f->lbuf) return gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate the scoring buffer");
    }
    gm_status st = gm_kvcache_reserve(cache, b->pos0 + b->n, err);
    if (st) return st;
    for (int off = 0; off < b->n; off += f->max_batch) {
        const int n = b->n - off < f->max_batch ? b->n - off : f->max_batch;
        st = chunk_forward(f, cache, b, off, n);
        if (st) return gm_fail(err, st, "forward: a kernel failed (%s) at positions %d..%d", gm_status_name(st),
                               b->pos0 + off, b->pos0 + off + n - 1);
    }
    return GM_OK;
}
