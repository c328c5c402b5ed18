/* backends/ref/backend.c — the reference backend: every op of runtime/backend.h as the plainest loop that
 * computes it, sums in double, one thread, no packed weights, no chunking of attention.
 *
 * It exists to check the CPU backend (tests/test_backend_ref.c compares the two on every family) and to
 * prove the seam: the forward pass of runtime/forward.c runs unchanged on it. Its numbers differ from the
 * CPU backend's by rounding only: the CPU quantizes activations to 8 bits for quantized weights (as
 * llama.cpp does) and sums in f32 in a fixed blocked order; here weights are dequantized to f32 and every
 * dot product, norm and softmax sums in double. Family glue shared with the CPU backend (the host code of
 * the Gemma 3n / Gemma 4 hooks, the embedding lookup, F16 rounding of the cache) is the same code. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backends/host.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "quant/quant.h"

typedef struct ref_rope_kind {
    const float *inv_freq;
    int dims;
} ref_rope_kind;

typedef struct ref_backend {
    gm_backend base;
    const gm_model *m;
    const gm_kv_layout *lay;
    int max_batch;   /* rows of a call (a text chunk, or an encoder's image) */
    ref_rope_kind rope[GM_ROPE_KINDS];
    int *pos[GM_ROPE_KINDS]; /* max_batch each: the positions of the call's rows by kind (rope_prepare) */
    int max_keys, max_hd;
    double *scores;  /* max_keys: one query head's scores */
    double *acc;     /* max_hd: one query head's weighted values */
    float *kv_row;   /* max_hd: one cached key or value as f32 */
} ref_backend;

static ref_backend *ref(gm_backend *be) { return (ref_backend *)be; }

/* room for the positions of `rows` rows of every RoPE kind; false when out of memory */
static bool ref_rows(ref_backend *r, int rows) {
    for (int k = 0; k < GM_ROPE_KINDS; k++) {
        int *p = realloc(r->pos[k], (size_t)(rows > 0 ? rows : 1) * sizeof *p);
        if (!p) return false;
        r->pos[k] = p;
    }
    r->max_batch = rows;
    return true;
}

/* room for one query head's scores over `keys` keys and its values of hd floats */
static bool ref_keys(ref_backend *r, int keys, int hd) {
    double *s = realloc(r->scores, (size_t)(keys > 0 ? keys : 1) * sizeof *s);
    if (s) r->scores = s;
    double *a = realloc(r->acc, (size_t)(hd > 0 ? hd : 1) * sizeof *a);
    if (a) r->acc = a;
    float *v = realloc(r->kv_row, (size_t)(hd > 0 ? hd : 1) * sizeof *v);
    if (v) r->kv_row = v;
    if (!s || !a || !v) return false;
    r->max_keys = keys, r->max_hd = hd;
    return true;
}

static void ref_rmsnorm(gm_backend *be, float *y, const float *x, const float *w, int n, int dim, float eps,
                        const int *idx) {
    (void)be;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)(idx ? idx[i] : i) * dim;
        float *yi = y + (size_t)i * dim;
        double ss = 0.0;
        for (int e = 0; e < dim; e++) ss += (double)xi[e] * xi[e];
        const double s = 1.0 / sqrt(ss / dim + (double)eps);
        for (int e = 0; e < dim; e++) yi[e] = (float)((double)xi[e] * s * (w ? (double)w[e] : 1.0));
    }
}

static gm_status ref_matmul(gm_backend *be, const gm_matrix *const *W, float *const *y, int count, const float *x,
                            int n) {
    (void)be;
    for (int j = 0; j < count; j++) {
        gm_status st = gm_matmul_ref(W[j], x, n, y[j]);
        if (st) return st;
    }
    return GM_OK;
}

static gm_status ref_head(gm_backend *be, const gm_matrix *W, const float *x, int n, float *y, float softcap) {
    gm_status st = ref_matmul(be, &W, &y, 1, x, n);
    if (st || softcap <= 0.0f) return st;
    for (size_t i = 0; i < (size_t)W->rows * (size_t)n; i++) y[i] = (float)(softcap * tanh((double)y[i] / softcap));
    return GM_OK;
}

static void ref_rope_prepare(gm_backend *be, int kind, const float *inv_freq, int dims, const gm_fwd_row *rows, int n) {
    ref_backend *r = ref(be);
    r->rope[kind] = (ref_rope_kind){inv_freq, dims};
    for (int i = 0; i < n; i++) r->pos[kind][i] = rows[i].pos;
}

/* NEOX: pairs (e, e + dims/2) of each head rotated by pos * inv_freq[e], the angle in double */
static void ref_rope(gm_backend *be, float *x, int n, int n_heads, int hd, int dims, int kind) {
    const ref_backend *r = ref(be);
    const float *inv_freq = r->rope[kind].inv_freq;
    const int h = dims / 2;
    for (int i = 0; i < n; i++)
        for (int hh = 0; hh < n_heads; hh++) {
            float *v = x + ((size_t)i * n_heads + hh) * hd;
            for (int e = 0; e < h; e++) {
                const double a = (double)r->pos[kind][i] * inv_freq[e], c = cos(a), s = sin(a);
                const double x0 = v[e], x1 = v[e + h];
                v[e] = (float)(x0 * c - x1 * s);
                v[e + h] = (float)(x0 * s + x1 * c);
            }
        }
}

static void ref_kv_store(gm_backend *be, const float *k, const float *v, const gm_fwd_row *rows, int n, int il,
                         int kv_dim) {
    gm_host_kv_store(ref(be)->lay, gm_kv_store, k, v, rows, n, il, kv_dim);
}

/* hd elements of a cached row as f32 */
static const float *cached(ref_backend *r, const char *p, int hd) {
    if (r->lay->dtype == GM_KV_DTYPE_F32) return (const float *)p;
    for (int e = 0; e < hd; e++) r->kv_row[e] = gm_fp16_to_fp32(((const uint16_t *)p)[e]);
    return r->kv_row;
}

/* softmax(scores) . values of one query head over keys [lo, hi), in double */
static void ref_attention(gm_backend *be, const gm_attn_call *c) {
    ref_backend *r = ref(be);
    const gm_layer_config *lc = c->lc;
    const int H = lc->n_heads, hd = lc->head_dim, G = H / lc->n_kv_heads;
    for (int i = 0; i < c->n; i++) {
        const gm_fwd_row *row = &c->rows[i];
        int lo, hi;
        gm_attn_key_range(c, row, &lo, &hi);
        for (int h = 0; h < H; h++) {
            const float *q = c->q + ((size_t)i * H + h) * hd;
            const size_t off = (size_t)(h / G) * hd * r->lay->elem;
            double mx = -INFINITY;
            for (int j = lo; j < hi; j++) {
                const float *k = cached(r, gm_kv_row_k(r->lay, row->kv, c->il, j) + off, hd);
                double s = 0.0;
                for (int e = 0; e < hd; e++) s += (double)q[e] * k[e];
                if (c->softcap > 0.0f) s = c->softcap * tanh(s / c->softcap);
                if (c->bias) s += c->bias[(size_t)row->pos * c->bias_n + j];
                r->scores[j - lo] = s;
                if (s > mx) mx = s;
            }
            float *out = c->att + ((size_t)i * H + h) * hd;
            memset(r->acc, 0, (size_t)hd * sizeof *r->acc);
            double z = 0.0;
            for (int j = lo; mx > -INFINITY && j < hi; j++) {
                const double p = exp(r->scores[j - lo] - mx);
                if (p == 0.0) continue;
                const float *v = cached(r, gm_kv_row_v(r->lay, row->kv, c->il, j) + off, hd);
                for (int e = 0; e < hd; e++) r->acc[e] += p * v[e];
                z += p;
            }
            for (int e = 0; e < hd; e++) out[e] = z > 0.0 ? (float)(r->acc[e] / z) : 0.0f; /* all masked: zeros */
        }
    }
}

static void ref_geglu(gm_backend *be, float *gate, const float *up, int n, int ff) {
    (void)be;
    const double k = sqrt(2.0 / M_PI);
    for (size_t i = 0; i < (size_t)n * (size_t)ff; i++) {
        const double g = gate[i];
        gate[i] = (float)(0.5 * g * (1.0 + tanh(k * (g + 0.044715 * g * g * g))) * up[i]);
    }
}

/* ---------------------------------------------------------------- dense rows (an encoder's) */

static gm_status ref_dense_reserve(gm_backend *be, const gm_dense_shape *s, gm_error *err) {
    ref_backend *r = ref(be);
    if (!ref_rows(r, s->max_rows > r->max_batch ? s->max_rows : r->max_batch) || !ref_keys(r, s->max_rows, s->head_dim))
        return gm_fail(err, GM_ERR_NOMEM, "reference backend: out of memory");
    return GM_OK;
}

static void ref_layernorm(gm_backend *be, float *y, const float *x, const float *w, const float *b, int n, int dim,
                          float eps) {
    (void)be;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *yi = y + (size_t)i * dim;
        double sum = 0.0, sq = 0.0;
        for (int e = 0; e < dim; e++) sum += xi[e];
        const double mean = sum / dim;
        for (int e = 0; e < dim; e++) sq += ((double)xi[e] - mean) * ((double)xi[e] - mean);
        const double rstd = 1.0 / sqrt(sq / dim + (double)eps);
        for (int e = 0; e < dim; e++) yi[e] = (float)(((double)xi[e] - mean) * rstd * w[e] + b[e]);
    }
}

static void ref_bias_add(gm_backend *be, float *y, const float *x, const float *b, int n, int dim) {
    (void)be;
    for (size_t i = 0; i < (size_t)n * (size_t)dim; i++)
        y[i] = (float)((double)y[i] + (x ? (double)x[i] : 0.0) + b[i % (size_t)dim]);
}

/* act(g) in double */
static double ref_act(double g, gm_act act) {
    if (act == GM_ACT_GELU_TANH) return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g)));
    return g / (1.0 + exp(-(act == GM_ACT_GELU_QUICK ? 1.702 : 1.0) * g));
}

static void ref_bias_act(gm_backend *be, float *y, const float *b, const float *up, int n, int dim, gm_act act) {
    (void)be;
    for (size_t i = 0; i < (size_t)n * (size_t)dim; i++) {
        const double g = ref_act((double)y[i] + (b ? b[i % (size_t)dim] : 0.0), act);
        y[i] = (float)(up ? g * up[i] : g);
    }
}

static void ref_clamp(gm_backend *be, float *y, const float *x, size_t n, float lo, float hi) {
    (void)be;
    for (size_t i = 0; i < n; i++) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}

static void ref_mul_rows(gm_backend *be, float *y, const float *w, int n, int dim) {
    (void)be;
    for (size_t i = 0; i < (size_t)n * (size_t)dim; i++) y[i] *= w[i % (size_t)dim];
}

/* softmax over every row's scores . values, one query head at a time, in double */
static gm_status ref_attention_dense(gm_backend *be, const gm_dense_attn *a) {
    ref_backend *r = ref(be);
    if (a->n > r->max_keys || a->head_dim > r->max_hd) return GM_ERR_ARG; /* outside the reserve */
    const int hd = a->head_dim;
    for (int i = 0; i < a->n; i++)
        for (int h = 0; h < a->n_head; h++) {
            const float *q = a->q + (size_t)i * a->ld + (size_t)h * hd;
            double mx = -INFINITY;
            for (int j = 0; j < a->n; j++) {
                const float *k = a->k + (size_t)j * a->ld + (size_t)h * hd;
                double s = 0.0;
                for (int e = 0; e < hd; e++) s += (double)q[e] * k[e];
                r->scores[j] = s * a->scale;
                if (r->scores[j] > mx) mx = r->scores[j];
            }
            memset(r->acc, 0, (size_t)hd * sizeof *r->acc);
            double z = 0.0;
            for (int j = 0; j < a->n; j++) {
                const double p = exp(r->scores[j] - mx);
                const float *v = a->v + (size_t)j * a->ld + (size_t)h * hd;
                for (int e = 0; e < hd; e++) r->acc[e] += p * v[e];
                z += p;
            }
            float *o = a->o + (size_t)i * a->ld + (size_t)h * hd;
            for (int e = 0; e < hd; e++) o[e] = (float)(r->acc[e] / z);
        }
    return GM_OK;
}

static gm_status ref_embed(gm_backend *be, float *x, const gm_fwd_row *rows, int n) {
    return gm_host_embed(ref(be)->m, x, rows, n);
}

static int ref_threads(const gm_backend *be) {
    (void)be;
    return 1;
}

static void ref_free(gm_backend *be) {
    ref_backend *r = ref(be);
    if (!r) return;
    for (int k = 0; k < GM_ROPE_KINDS; k++) free(r->pos[k]);
    free(r->scores);
    free(r->acc);
    free(r->kv_row);
    free(r);
}

static const gm_backend_ops ref_ops = {
    .name = "reference",
    .host_memory = true,
    .kv_storage = gm_host_kv_storage,
    .n_threads = ref_threads,
    .free = ref_free,
    .alloc = gm_host_alloc,
    .release = gm_host_release,
    .read = gm_host_read,
    .embed = ref_embed,
    .rmsnorm = ref_rmsnorm,
    .matmul = ref_matmul,
    .head = ref_head,
    .rope_prepare = ref_rope_prepare,
    .rope = ref_rope,
    .kv_store = ref_kv_store,
    .attention = ref_attention,
    .geglu = ref_geglu,
    .add = gm_host_add,
    .scale = gm_host_scale,
    .copy = gm_host_copy,
    .dense_reserve = ref_dense_reserve,
    .layernorm = ref_layernorm,
    .bias_add = ref_bias_add,
    .bias_act = ref_bias_act,
    .clamp = ref_clamp,
    .mul_rows = ref_mul_rows,
    .attention_dense = ref_attention_dense,
};

gm_status gm_backend_ref_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                             gm_backend **out, gm_error *err) {
    *out = NULL;
    ref_backend *r = calloc(1, sizeof *r);
    if (!r) return gm_fail(err, GM_ERR_NOMEM, "reference backend: out of memory");
    r->base.ops = &ref_ops;
    r->m = m, r->lay = lay;
    const int hd = m ? gm_model_layer_max(m).head_dim : 0; /* no model: an encoder's, sized by dense_reserve */
    if (!ref_rows(r, opt->max_batch) || !ref_keys(r, opt->max_ctx, hd)) {
        ref_free(&r->base);
        return gm_fail(err, GM_ERR_NOMEM, "reference backend: out of memory");
    }
    *out = &r->base;
    return GM_OK;
}
