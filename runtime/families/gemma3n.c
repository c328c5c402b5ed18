/* runtime/families/gemma3n.c — Gemma 3n: the forward steps the family adds at the forward pass's named points
 * (runtime/forward.h's hooks) over the weights model/families/gemma3n.c loaded (model/families/gemma3n.h has the math). */
#include "runtime/families/hooks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/families/gemma3n.h"
#include "runtime/families/ple.h"

#define NS GM_3N_STREAMS

/* The model's Gemma 3n weights (gm_model.family_weights, which gm_3n_load made). */
static const gm_3n_weights *weights(const gm_model *m) { return m->family_weights; }

/* ------------------------------------------------------------------ forward steps */

typedef struct gm_3n_state gm_3n_state;
static void gm_3n_state_free(gm_3n_state *s);

struct gm_3n_state {
    const gm_model *m;
    gm_backend *be; /* runs the matmuls and the attention residual's add and scale */
    int max_batch, d;
    float *s;    /* streams: stream k of row i at (k * max_batch + i) * d */
    float *p;    /* predictions, same layout */
    float *ple;  /* per row: 256 L per-layer inputs */
    float *lau;  /* per row: d (LAuReL output) */
    float *t;    /* per row: max(256 L, d) scratch */
    float *t2;   /* per row: d scratch */
    float *ones; /* d ones: weightless RMSNorm */
    float (*dot)(const float *a, const float *b, int n); /* the router's: the model's ISA level's */
};

static float *stream(float *base, const gm_3n_state *s, int k, int i) {
    return base + ((size_t)k * (size_t)s->max_batch + (size_t)i) * (size_t)s->d;
}

/* be runs the matmuls; its activations are host memory (x, xn, gate of the hooks). */
static gm_status gm_3n_state_new(const gm_model *m, int max_batch, gm_backend *be, gm_3n_state **out, gm_error *err) {
    *out = NULL;
    gm_3n_state *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
    const size_t B = (size_t)max_batch, d = (size_t)m->cfg.d_model, P = (size_t)GM_3N_PLE * (size_t)m->cfg.n_layers;
    s->m = m, s->be = be, s->max_batch = max_batch, s->d = (int)d;
    s->dot = gm_cpu_kernels_for(m->isa)->dot;
    s->s = malloc(NS * B * d * sizeof(float));
    s->p = malloc(NS * B * d * sizeof(float));
    s->ple = malloc(B * P * sizeof(float));
    s->lau = malloc(B * d * sizeof(float));
    s->t = malloc(B * (P > d ? P : d) * sizeof(float));
    s->t2 = malloc(B * d * sizeof(float));
    s->ones = malloc(d * sizeof(float));
    if (!s->s || !s->p || !s->ple || !s->lau || !s->t || !s->t2 || !s->ones) {
        gm_3n_state_free(s);
        return gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate the Gemma 3n streams for %d rows", max_batch);
    }
    for (size_t i = 0; i < d; i++) s->ones[i] = 1.0f;
    *out = s;
    return GM_OK;
}

static void gm_3n_state_free(gm_3n_state *s) {
    if (!s) return;
    free(s->s);
    free(s->p);
    free(s->ple);
    free(s->lau);
    free(s->t);
    free(s->t2);
    free(s->ones);
    free(s);
}

static float l2norm(const float *x, int n) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return (float)sqrt(ss);
}

/* y = y * target / |y| (llama.cpp: (y * |target|) / |y|, elementwise in f32) */
static void rescale_to(float *y, int n, float target) {
    const float have = l2norm(y, n);
    for (int i = 0; i < n; i++) y[i] = y[i] * target / have;
}

/* Before layer 0: x holds the scaled embeddings of n rows. Per-layer inputs and the 4 streams. */
static gm_status gm_3n_begin(gm_3n_state *s, const gm_fwd_row *rows, const float *x, int n) {
    const gm_3n_weights *w = weights(s->m);
    const gm_config *c = &s->m->cfg;
    const int d = s->d;
    gm_status st = gm_ple_inputs(&w->ple_tok, &w->ple_proj, w->ple_norm, GM_3N_PLE, c->n_layers, c->norm_eps, rows, x, n,
                              d, s->ple, s->t, s->be);
    if (st) return st;
    /* streams: 0 is the embedding, k = 1..3 its projections rescaled to its norm */
    for (int i = 0; i < n; i++) memcpy(stream(s->s, s, 0, i), x + (size_t)i * d, (size_t)d * sizeof(float));
    for (int k = 1; k < NS; k++) {
        float *sk = stream(s->s, s, k, 0);
        if ((st = gm_be_matmul(s->be, &w->altup_proj[k - 1], x, n, sk))) return st;
        for (int i = 0; i < n; i++) rescale_to(sk + (size_t)i * d, d, l2norm(x + (size_t)i * d, d));
    }
    return GM_OK;
}

/* r = tanh(router . RMS_router_norm(x) / d) */
static void router(const gm_3n_state *s, const gm_3n_layer *L, const float *x, float r[NS], float *tmp) {
    const int d = s->d;
    gm_rmsnorm(tmp, x, L->router_norm, d, s->m->cfg.norm_eps);
    gm_scale(tmp, d, 1.0f / (float)d);
    for (int j = 0; j < NS; j++) r[j] = tanhf(s->dot(L->router + (size_t)j * d, tmp, d));
}

/* Layer start: predictions from the streams; x = the active prediction p0. */
static void gm_3n_predict(gm_3n_state *s, int il, float *x, int n) {
    const gm_3n_layer *L = &weights(s->m)->layers[il];
    const int d = s->d;
    for (int i = 0; i < n; i++) {
        float r[NS], c[NS * NS];
        router(s, L, stream(s->s, s, 0, i), r, s->t2 + (size_t)i * d);
        for (int m = 0; m < NS * NS; m++) {
            c[m] = 0.0f;
            for (int k = 0; k < NS; k++) c[m] += L->predict[m * NS + k] * r[k];
        }
        /* p_j = s_j + sum_k c[4j + k] s_k, summed over k first as llama.cpp's matmul does */
        for (int j = 0; j < NS; j++) {
            float *p = stream(s->p, s, j, i);
            const float *sj = stream(s->s, s, j, i);
            for (int e = 0; e < d; e++) {
                float acc = 0.0f;
                for (int k = 0; k < NS; k++) acc += stream(s->s, s, k, i)[e] * c[NS * j + k];
                p[e] = acc + sj[e];
            }
        }
        memcpy(x + (size_t)i * d, stream(s->p, s, 0, i), (size_t)d * sizeof(float));
    }
}

/* LAuReL of the normed input xn (kept until gm_3n_attn_residual). */
static gm_status gm_3n_laurel(gm_3n_state *s, int il, const float *xn, int n) {
    const gm_3n_layer *L = &weights(s->m)->layers[il];
    const int d = s->d;
    gm_status st;
    if ((st = gm_be_matmul(s->be, &L->laurel_l, xn, n, s->t)) ||
        (st = gm_be_matmul(s->be, &L->laurel_r, s->t, n, s->lau)))
        return st;
    for (int i = 0; i < n; i++) {
        float *lau = s->lau + (size_t)i * d;
        gm_rmsnorm(lau, lau, L->laurel_post_norm, d, s->m->cfg.norm_eps);
        gm_add(lau, xn + (size_t)i * d, d);
    }
    return GM_OK;
}

/* x holds p0 + attention: x = (x + lau) / sqrt 2 (elementwise ops: the host loops' bits). */
static void gm_3n_attn_residual(gm_3n_state *s, float *x, int n) {
    const size_t nd = (size_t)n * (size_t)s->d;
    s->be->ops->add(s->be, x, s->lau, nd);
    s->be->ops->scale(s->be, x, nd, 1.0f / sqrtf(2.0f));
}

/* Activation sparsity of n rows of ff gate values (GGUF: layers < GM_3N_SPARSE_LAYERS; HF: by the config). */
static void gm_3n_sparsify(const gm_3n_state *s, int il, float *gate, int n, int ff) {
    const gm_3n_variant *v = &weights(s->m)->v;
    const float mul = v->sparsity[il]; /* the standard normal's quantile of the target sparsity (0.95) */
    if (mul == 0.0f) return;
    for (int i = 0; i < n; i++) {
        float *g = gate + (size_t)i * ff;
        double sum = 0.0;
        for (int k = 0; k < ff; k++) sum += g[k];
        const float mean = (float)(sum / ff);
        double ss = 0.0;
        for (int k = 0; k < ff; k++) ss += (double)(g[k] - mean) * (g[k] - mean);
        /* llama.cpp divides by n - 1, HF by n */
        const float sd = sqrtf((float)ss * (1.0f / (float)(v->std_n ? ff : ff - 1)));
        const float cut = mean + sd * mul;
        for (int k = 0; k < ff; k++) g[k] = g[k] - cut > 0.0f ? g[k] - cut : 0.0f;
    }
}

/* Layer end: y (x) corrects the predictions into the new streams, plus the per-layer input. */
static gm_status gm_3n_correct(gm_3n_state *s, int il, const float *y, int n) {
    const gm_3n_layer *L = &weights(s->m)->layers[il];
    const gm_config *c = &s->m->cfg;
    const int d = s->d, P = GM_3N_PLE;
    for (int i = 0; i < n; i++) {
        const float *yi = y + (size_t)i * d, *p0 = stream(s->p, s, 0, i);
        float r[NS], cc[NS];
        router(s, L, yi, r, s->t2 + (size_t)i * d);
        for (int j = 0; j < NS; j++) {
            cc[j] = 0.0f;
            for (int k = 0; k < NS; k++) cc[j] += L->correct[j * NS + k] * r[k];
            cc[j] += 1.0f;
        }
        for (int j = 0; j < NS; j++) {
            float *sj = stream(s->s, s, j, i);
            const float *pj = stream(s->p, s, j, i);
            for (int e = 0; e < d; e++) sj[e] = (yi[e] - p0[e]) * cc[j] + pj[e];
        }
        /* the per-layer input's gate reads the corrected active stream times correct_scale */
        float *g = s->t2 + (size_t)i * d;
        const float *s0 = stream(s->s, s, 0, i);
        if (weights(s->m)->v.correct_scale)
            for (int e = 0; e < d; e++) g[e] = s0[e] * L->correct_scale[e];
        else
            memcpy(g, s0, (size_t)d * sizeof *g);
    }
    /* the per-layer input joins streams 1..3 */
    const size_t PL = (size_t)P * (size_t)c->n_layers;
    gm_status st = gm_ple_residual(&L->inp_gate, &L->proj, L->post_norm, c->norm_eps, s->t2, s->ple + (size_t)il * P, PL,
                                n, P, s->t, s->t2, s->be);
    if (st) return st;
    for (int i = 0; i < n; i++)
        for (int j = 1; j < NS; j++) gm_add(stream(s->s, s, j, i), s->t2 + (size_t)i * d, d);
    return GM_OK;
}

/* After the last layer: x = the mean of stream 0 and the unembedded streams 1..3. */
static gm_status gm_3n_end(gm_3n_state *s, float *x, int n) {
    const gm_3n_weights *w = weights(s->m);
    const int d = s->d;
    /* streams 1..3 unembedded into p (free now), rescaled to stream 0's norm */
    for (int k = 1; k < NS; k++) {
        float *u = stream(s->p, s, k, 0);
        gm_status st = gm_be_matmul(s->be, &w->altup_unembd[k - 1], stream(s->s, s, k, 0), n, u);
        if (st) return st;
        for (int i = 0; i < n; i++) rescale_to(u + (size_t)i * d, d, l2norm(stream(s->s, s, 0, i), d));
    }
    for (int i = 0; i < n; i++) {
        float *h = x + (size_t)i * d;
        memcpy(h, stream(s->s, s, 0, i), (size_t)d * sizeof(float));
        for (int k = 1; k < NS; k++) gm_add(h, stream(s->p, s, k, i), d);
        gm_scale(h, d, 1.0f / (float)NS);
    }
    return GM_OK;
}

/* ------------------------------------------------------------------ the hooks of the forward pass */

static gm_status hk_new(const gm_model *m, int max_batch, gm_backend *be, void **state, gm_error *err) {
    gm_3n_state *s = NULL;
    gm_status st = gm_3n_state_new(m, max_batch, be, &s, err);
    *state = s;
    return st;
}
static void hk_free(void *s) { gm_3n_state_free(s); }
static gm_status hk_begin(void *s, const gm_fwd_row *rows, const float *x, int n) { return gm_3n_begin(s, rows, x, n); }
static gm_status hk_predict(void *s, int il, float *x, int n) {
    gm_3n_predict(s, il, x, n);
    return GM_OK;
}
static gm_status hk_laurel(void *s, int il, const float *xn, int n) { return gm_3n_laurel(s, il, xn, n); }
static gm_status hk_attn_residual(void *s, int il, float *x, int n) {
    (void)il;
    gm_3n_attn_residual(s, x, n);
    return GM_OK;
}
static gm_status hk_sparsify(void *s, int il, float *gate, int n, int ff) {
    gm_3n_sparsify(s, il, gate, n, ff);
    return GM_OK;
}
static gm_status hk_correct(void *s, int il, float *x, int n) { return gm_3n_correct(s, il, x, n); }
static gm_status hk_end(void *s, float *x, int n) { return gm_3n_end(s, x, n); }

/* A declared host fallback: the matmuls (per-layer inputs, AltUp projections, LAuReL) are ops, and so are the
 * attention residual's add and scale; the rest is host code over host memory: the router (the scalar RMSNorm,
 * the model level's dot, tanh), the stream predictions and corrections, the activation sparsity (a per-row mean
 * and deviation), the rescales to a norm and the per-layer input's GELU and norms. As ops they would be new ones
 * (AltUp's 4 x 4 mixing, a sparsity cut, a norm rescale) and their norms the backend's (whose sums run in the
 * ISA's order, not the scalar one's: other bits). */
const gm_forward_hooks gm_3n_forward_hooks = {
    .host_memory = true,
    .state_new = hk_new,
    .state_free = hk_free,
    .chunk_begin = hk_begin,
    .layer_begin = hk_predict,
    .attn_input = hk_laurel,
    .attn_residual = hk_attn_residual,
    .ffn_gate = hk_sparsify,
    .layer_end = hk_correct,
    .chunk_end = hk_end,
};
