/* runtime/families/gemma4.c — Gemma 4: the forward steps the family adds at the forward pass's named points
 * (runtime/forward.h's hooks) over the weights model/families/gemma4.c loaded (model/families/gemma4.h has the math). */
#include "runtime/families/hooks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/families/gemma4.h"
#include "runtime/families/ple.h"

/* The model's Gemma 4 weights (gm_model.family_weights, which gm_4_load made). */
static const gm_4_weights *weights(const gm_model *m) { return m->family_weights; }

/* ------------------------------------------------------------------ forward steps */

typedef struct gm_4_state gm_4_state;
static void gm_4_state_free(gm_4_state *s);

struct gm_4_state {
    const gm_model *m;
    gm_backend *be; /* runs the matmuls, GeGLU and the layer end's add and scale */
    float *ple;     /* per row: P L per-layer inputs */
    float *t;       /* per row: max(P L, d) */
    float *scratch; /* per row: P */
    /* MoE scratch (NULL without experts): per row d (router input, expert input z, gathered z, expert out),
     * E (router logits), K (chosen experts and weights), K x d (each chosen expert's output), max F x2 */
    float *rin, *z, *zin, *eo, *logits, *wt, *kout, *eg, *eu;
    int *sel, *rows, *slot; /* rows, slot: the rows routed to one expert and which of their K slots */
};

/* be runs the matmuls and GeGLU; its activations are host memory (x, a, o of the hooks). */
static gm_status gm_4_state_new(const gm_model *m, int max_batch, gm_backend *be, gm_4_state **out, gm_error *err) {
    *out = NULL;
    gm_4_state *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GM_ERR_NOMEM, "forward: out of memory");
    s->m = m, s->be = be;
    const size_t B = (size_t)max_batch, d = (size_t)m->cfg.d_model, P = (size_t)weights(m)->P,
                 PL = P * (size_t)m->cfg.n_layers;
    const size_t E = (size_t)weights(m)->n_expert, K = (size_t)weights(m)->n_expert_used;
    size_t F = 0;
    for (int il = 0; il < m->cfg.n_layers; il++) {
        const gm_4_layer *l = &weights(m)->layers[il];
        if (l->moe && (size_t)l->n_ff_exp > F) F = (size_t)l->n_ff_exp;
    }
    if (F > 0) {
        float **fl[] = {&s->rin, &s->z, &s->zin, &s->eo, &s->logits, &s->wt, &s->kout, &s->eg, &s->eu};
        const size_t fn[] = {B * d, B * d, B * d, B * d, B * E, B * K, B * K * d, B * F, B * F};
        bool ok = true;
        for (size_t i = 0; i < sizeof fn / sizeof fn[0]; i++) ok &= (*fl[i] = malloc(fn[i] * sizeof(float))) != NULL;
        s->sel = malloc(B * K * sizeof(int));
        s->rows = malloc(B * sizeof(int));
        s->slot = malloc(B * sizeof(int));
        if (!ok || !s->sel || !s->rows || !s->slot) {
            gm_4_state_free(s);
            return gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate Gemma 4's expert scratch for %d rows", max_batch);
        }
    }
    if (P > 0) {
        s->ple = malloc(B * PL * sizeof(float));
        s->t = malloc(B * (PL > d ? PL : d) * sizeof(float));
        s->scratch = malloc(B * P * sizeof(float));
        if (!s->ple || !s->t || !s->scratch) {
            gm_4_state_free(s);
            return gm_fail(err, GM_ERR_NOMEM, "forward: cannot allocate Gemma 4's per-layer inputs for %d rows", max_batch);
        }
    }
    *out = s;
    return GM_OK;
}

static void gm_4_state_free(gm_4_state *s) {
    if (!s) return;
    free(s->ple);
    free(s->t);
    free(s->scratch);
    float *fl[] = {s->rin, s->z, s->zin, s->eo, s->logits, s->wt, s->kout, s->eg, s->eu};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) free(fl[i]);
    free(s->sel);
    free(s->rows);
    free(s->slot);
    free(s);
}

/* Before layer 0 (x: the n rows' scaled embeddings): the per-layer inputs. */
static gm_status gm_4_begin(gm_4_state *s, const gm_fwd_row *rows, const float *x, int n) {
    const gm_4_weights *w = weights(s->m);
    const gm_config *c = &s->m->cfg;
    if (w->P == 0) return GM_OK;
    return gm_ple_inputs(&w->ple_tok, &w->ple_proj, w->ple_norm, w->P, c->n_layers, c->norm_eps, rows, x, n, c->d_model,
                         s->ple, s->t, s->be);
}

/* After the FFN residual of layer il: the per-layer input, then the layer output scale. */
static gm_status gm_4_layer_end(gm_4_state *s, int il, float *x, int n) {
    const gm_4_weights *w = weights(s->m);
    const gm_4_layer *l = &w->layers[il];
    const gm_config *c = &s->m->cfg;
    const int d = c->d_model, P = w->P;
    if (P > 0) {
        gm_status st = gm_ple_residual(&l->inp_gate, &l->proj, l->post_norm, c->norm_eps, x, s->ple + (size_t)il * P,
                                       (size_t)P * c->n_layers, n, P, s->scratch, s->t, s->be);
        if (st) return st;
        s->be->ops->add(s->be, x, s->t, (size_t)n * d);
    }
    if (l->out_scale != 1.0f) s->be->ops->scale(s->be, x, (size_t)n * d, l->out_scale); /* elementwise: same bits */
    return GM_OK;
}

/* The router of one row: softmax over the E logits, the K largest (lowest index first on ties), their
 * probabilities renormalised (the sum clamped as llama.cpp: at least 2^-14). */
static void route(const float *logits, int E, int K, int *sel, float *wt) {
    float mx = logits[0], p[GM_4_MAX_EXPERTS];
    for (int e = 1; e < E; e++) mx = logits[e] > mx ? logits[e] : mx;
    float z = 0.0f;
    for (int e = 0; e < E; e++) z += p[e] = expf(logits[e] - mx);
    for (int e = 0; e < E; e++) p[e] /= z;
    float sum = 0.0f;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int j = 0; j < k; j++) taken |= sel[j] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        sel[k] = best, wt[k] = p[best], sum += p[best];
    }
    if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
    for (int k = 0; k < K; k++) wt[k] /= sum;
}

/* MoE layers, after the dense FFN's down projection: o (n x d, the dense output) becomes
 * RMS_post_ffw_norm_1(o) + RMS_post_ffw_norm_2(experts(a)); a: the n rows' attention residuals. A no-op on
 * other layers. */
static gm_status gm_4_moe(gm_4_state *s, int il, const float *a, float *o, int n) {
    const gm_4_weights *w = weights(s->m);
    const gm_4_layer *l = &w->layers[il];
    if (!l->moe) return GM_OK;
    const gm_config *c = &s->m->cfg;
    const int d = c->d_model, E = w->n_expert, K = w->n_expert_used, F = l->n_ff_exp;
    const float eps = c->norm_eps, inv_sqrt_d = 1.0f / sqrtf((float)d);
    gm_status st;
    for (int i = 0; i < n; i++) {
        const float *ai = a + (size_t)i * d;
        float *oi = o + (size_t)i * d;
        gm_rmsnorm(oi, oi, l->post_norm1, d, eps);                       /* the dense part */
        gm_rmsnorm(s->rin + (size_t)i * d, ai, l->router_scale, d, eps);  /* router input */
        gm_scale(s->rin + (size_t)i * d, d, inv_sqrt_d);
        gm_rmsnorm(s->z + (size_t)i * d, ai, l->pre_norm2, d, eps);       /* expert input */
    }
    if ((st = gm_be_matmul(s->be, &l->router, s->rin, n, s->logits))) return st;
    for (int i = 0; i < n; i++) route(s->logits + (size_t)i * E, E, K, s->sel + (size_t)i * K, s->wt + (size_t)i * K);
    /* each expert once over the rows routed to it; its outputs land in the rows' slots */
    for (int e = 0; e < E; e++) {
        int cnt = 0;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < K; k++)
                if (s->sel[(size_t)i * K + k] == e) {
                    memcpy(s->zin + (size_t)cnt * d, s->z + (size_t)i * d, (size_t)d * sizeof(float));
                    s->rows[cnt] = i, s->slot[cnt] = k, cnt++;
                }
        if (!cnt) continue;
        const gm_matrix *W[2] = {&l->gate_e[e], &l->up_e[e]};
        float *const y[2] = {s->eg, s->eu};
        if ((st = s->be->ops->matmul(s->be, W, y, 2, s->zin, cnt))) return st;
        s->be->ops->geglu(s->be, s->eg, s->eu, cnt, F);
        if ((st = gm_be_matmul(s->be, &l->down_e[e], s->eg, cnt, s->eo))) return st;
        const float sc = l->expert_scale ? l->expert_scale[e] : 1.0f;
        for (int j = 0; j < cnt; j++) {
            const size_t at = (size_t)s->rows[j] * K + (size_t)s->slot[j];
            const float wk = s->wt[at];
            float *dst = s->kout + at * d;
            const float *src = s->eo + (size_t)j * d;
            for (int q = 0; q < d; q++) dst[q] = src[q] * sc * wk;
        }
    }
    /* the slots summed in routing order (llama.cpp's order), normed, joined to the dense part */
    for (int i = 0; i < n; i++) {
        float *sum = s->eo; /* free again */
        memcpy(sum, s->kout + (size_t)i * K * d, (size_t)d * sizeof(float));
        for (int k = 1; k < K; k++) gm_add(sum, s->kout + ((size_t)i * K + k) * d, d);
        gm_rmsnorm(sum, sum, l->post_norm2, d, eps);
        gm_add(o + (size_t)i * d, sum, d);
    }
    return GM_OK;
}

/* ------------------------------------------------------------------ the hooks of the forward pass */

static gm_status hk_new(const gm_model *m, int max_batch, gm_backend *be, void **state, gm_error *err) {
    gm_4_state *s = NULL;
    gm_status st = gm_4_state_new(m, max_batch, be, &s, err);
    *state = s;
    return st;
}
static void hk_free(void *s) { gm_4_state_free(s); }
static gm_status hk_begin(void *s, const gm_fwd_row *rows, const float *x, int n) { return gm_4_begin(s, rows, x, n); }
static gm_status hk_moe(void *s, int il, const float *x, float *o, int n) { return gm_4_moe(s, il, x, o, n); }
static gm_status hk_layer_end(void *s, int il, float *x, int n) { return gm_4_layer_end(s, il, x, n); }

/* A declared host fallback: the matmuls (per-layer inputs, router, experts), the experts' GeGLU and the layer's
 * per-layer-input add and output scale are ops; the rest is host code over host memory: the per-layer input's
 * GELU and norms, the MoE norms (the scalar RMSNorm: the backend's would sum in the ISA's order, other bits), the
 * routing (softmax, top-k) and the gather / scatter of each expert's rows. As ops: a top-k router and a
 * gather / scatter by row lists, and the norms through the backend's. */
const gm_forward_hooks gm_4_forward_hooks = {
    .host_memory = true,
    .state_new = hk_new,
    .state_free = hk_free,
    .chunk_begin = hk_begin,
    .ffn_output = hk_moe,
    .layer_end = hk_layer_end,
};
