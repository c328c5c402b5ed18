/* kernels/ops.c — scalar f32 operators, and the tables of each ISA level's versions (see ops.h). */
#include "kernels/ops.h"
#include "kernels/ops_isa.h"
#include "core/limits.h"

#include "kernels/cpu.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

void gm_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

void gm_rope_inv_freq(float *inv_freq, int hd, double base, double freq_scale) {
    for (int i = 0; i < hd / 2; i++) inv_freq[i] = (float)(freq_scale * pow(base, -2.0 * i / hd));
}

void gm_rope_cos_sin(float *cs, float *sn, const float *inv_freq, int hd, int pos) {
    for (int i = 0; i < hd / 2; i++) {
        const double th = (double)pos * (double)inv_freq[i];
        cs[i] = (float)cos(th);
        sn[i] = (float)sin(th);
    }
}

void gm_rope_neox(float *x, int n_heads, int hd, const float *cs, const float *sn) {
    const int half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *a = x + (size_t)h * hd, *b = a + half;
        for (int i = 0; i < half; i++) {
            const float x0 = a[i], x1 = b[i];
            a[i] = x0 * cs[i] - x1 * sn[i];
            b[i] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

void gm_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (mx == -INFINITY) { /* every key masked: attend to nothing rather than produce NaN */
        memset(x, 0, (size_t)n * sizeof *x);
        return;
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

double gm_exp_sum(float *x, int n, float mx) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += x[i] = mx == -INFINITY || x[i] - mx < -87.0f ? 0.0f : expf(x[i] - mx);
    return sum;
}

void gm_softcap(float *x, int n, float cap) {
    const float inv = 1.0f / cap;
    for (int i = 0; i < n; i++) x[i] = cap * tanhf(x[i] * inv);
}

float gm_gelu_tanh(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

void gm_geglu(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) gate[i] = gm_gelu_tanh(gate[i]) * up[i];
}

void gm_scale(float *x, int n, float s) {
    for (int i = 0; i < n; i++) x[i] *= s;
}

void gm_add(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += x[i];
}

/* Eight independent partial sums: the compiler can keep them in vector registers (a single float
 * accumulator is a serial dependency it may not reorder without -ffast-math). */
float gm_dot_f32(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

void gm_axpy_f32(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* ---- attention chunks */

size_t gm_kv_type_size(gm_kv_type t) { return t == GM_KV_F16 ? 2 : 4; }

void gm_kv_store(void *dst, gm_kv_type t, const float *src, int n) {
    if (t == GM_KV_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *h = dst;
    for (int i = 0; i < n; i++) h[i] = gm_fp32_to_fp16(src[i]);
}

static void kv_store_avx2(void *dst, gm_kv_type t, const float *src, int n) {
    if (t == GM_KV_F32) memcpy(dst, src, (size_t)n * sizeof(float));
    else gm_kv_store_f16_avx2(dst, src, n);
}

static void kv_store_neon(void *dst, gm_kv_type t, const float *src, int n) {
    if (t == GM_KV_F32) memcpy(dst, src, (size_t)n * sizeof(float));
    else gm_kv_store_f16_neon(dst, src, n);
}

/* Row j of a chunk as f32: in place for F32, converted into buf for F16. */
static const float *kv_row(const void *base, gm_kv_type t, size_t j, size_t stride, int hd, float *buf) {
    if (t == GM_KV_F32) return (const float *)base + j * stride;
    const uint16_t *h = (const uint16_t *)base + j * stride;
    for (int i = 0; i < hd; i++) buf[i] = gm_fp16_to_fp32(h[i]);
    return buf;
}

/* softcap, bias, the max and the exponentials of G heads' scores (G x n_keys), normalised in place; the
 * head's m and z into part and its values zeroed for the values pass. The exponentials by exp_sum (a level's
 * vector exp: the fused passes), or by expf where it is NULL (the per-head loops). */
static void softmax_heads(float *scores, int G, int n_keys, float softcap, const float *bias, float *part, int hd,
                          gm_exp_sum_fn exp_sum) {
    for (int g = 0; g < G; g++) {
        float *s = scores + (size_t)g * n_keys, *o = part + (size_t)g * (hd + 2);
        if (softcap > 0.0f) gm_softcap(s, n_keys, softcap);
        if (bias)
            for (int j = 0; j < n_keys; j++) s[j] += bias[j];
        float mx = -INFINITY;
        for (int j = 0; j < n_keys; j++) mx = s[j] > mx ? s[j] : mx;
        double sum = 0.0;
        if (exp_sum) sum = exp_sum(s, n_keys, mx);
        else
            for (int j = 0; j < n_keys; j++) sum += s[j] = mx == -INFINITY ? 0.0f : expf(s[j] - mx);
        const float inv = sum > 0.0 ? (float)(1.0 / sum) : 0.0f;
        for (int j = 0; j < n_keys; j++) s[j] *= inv;
        o[hd] = mx;
        o[hd + 1] = (float)sum;
        memset(o, 0, (size_t)hd * sizeof *o);
    }
}

typedef float (*dot_fn)(const float *a, const float *b, int n);
typedef void (*axpy_fn)(float *y, float a, const float *x, int n);

/* One chunk head by head with a level's dot / axpy: the scores, the softmax by expf, the values. */
static void attend_loop(dot_fn dot, axpy_fn axpy, float *part, const float *q, int G, const void *k, const void *v,
                        gm_kv_type kt, size_t kv_stride, int n_keys, int hd, float softcap, const float *bias,
                        float *scores) {
    float buf[GM_MAX_HEAD_DIM]; /* one converted F16 row (core/limits.h) */
    for (int j = 0; j < n_keys; j++) {
        const float *kj = kv_row(k, kt, (size_t)j, kv_stride, hd, buf);
        for (int g = 0; g < G; g++) scores[(size_t)g * n_keys + j] = dot(q + (size_t)g * hd, kj, hd);
    }
    softmax_heads(scores, G, n_keys, softcap, bias, part, hd, NULL);
    for (int j = 0; j < n_keys; j++) {
        const float *vj = kv_row(v, kt, (size_t)j, kv_stride, hd, buf);
        for (int g = 0; g < G; g++) {
            const float p = scores[(size_t)g * n_keys + j];
            if (p != 0.0f) axpy(part + (size_t)g * (hd + 2), p, vj, hd);
        }
    }
}

/* Each row on its own, by a level's one-chunk attention. */
static void rows_each(gm_attend_partial_fn one, const gm_attend_row *rows, int n, int G, const void *k, const void *v,
                      gm_kv_type kt, size_t kv_stride, int hd, float softcap, float *scores) {
    const size_t rs = kv_stride * gm_kv_type_size(kt);
    for (int i = 0; i < n; i++)
        one(rows[i].part, rows[i].q, G, (const char *)k + (size_t)rows[i].lo * rs, (const char *)v + (size_t)rows[i].lo * rs,
            kt, kv_stride, rows[i].hi - rows[i].lo, hd, softcap, rows[i].bias, scores);
}

/* A level's fused passes (kernels/attn_avx2.c, kernels/attn_neon.c: each key / value row read once for all the
 * heads and rows, each head's bits those of its per-head loop) and the vector exp its softmax takes. */
typedef struct fused_passes {
    void (*scores)(float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G, const void *k,
                   gm_kv_type kt, size_t kv_stride, int hd);
    void (*values)(const float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G, const void *v,
                   gm_kv_type kt, size_t kv_stride, int hd);
    gm_exp_sum_fn exp_sum;
} fused_passes;

static const fused_passes FUSED_AVX2 = {gm_attend_scores_rows_avx2, gm_attend_values_rows_avx2, gm_exp_sum_avx2};
static const fused_passes FUSED_NEON = {gm_attend_scores_rows_neon, gm_attend_values_rows_neon, gm_exp_sum_neon};

/* For shapes the level's _fits accepts: every row's scores with each key row read once, the softmaxes, the
 * values with each value row read once */
static void rows_fused(const fused_passes *f, const gm_attend_row *rows, int n, int G, const void *k, const void *v,
                       gm_kv_type kt, size_t kv_stride, int hd, float softcap, float *scores) {
    int cap = 0;
    for (int i = 0; i < n; i++) cap = rows[i].hi - rows[i].lo > cap ? rows[i].hi - rows[i].lo : cap;
    const size_t stride = (size_t)G * (size_t)cap;
    f->scores(scores, stride, rows, n, G, k, kt, kv_stride, hd);
    for (int i = 0; i < n; i++)
        softmax_heads(scores + (size_t)i * stride, G, rows[i].hi - rows[i].lo, softcap, rows[i].bias, rows[i].part, hd,
                      f->exp_sum);
    f->values(scores, stride, rows, n, G, v, kt, kv_stride, hd);
}

/* ---- each level's attention: the scalar one, AVX2 and NEON (fused where the shape fits, else the loop with the
 * level's dot / axpy), AVX-512 (its kernel where the shape fits, else AVX2's) */

void gm_attend_partial(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                       size_t kv_stride, int n_keys, int hd, float softcap, const float *bias, float *scores) {
    attend_loop(gm_dot_f32, gm_axpy_f32, part, q, G, k, v, kt, kv_stride, n_keys, hd, softcap, bias, scores);
}

void gm_attend_partial_rows(const gm_attend_row *rows, int n, int G, const void *k, const void *v, gm_kv_type kt,
                            size_t kv_stride, int hd, float softcap, float *scores) {
    rows_each(gm_attend_partial, rows, n, G, k, v, kt, kv_stride, hd, softcap, scores);
}

static void attend_partial_avx2(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                                size_t kv_stride, int n_keys, int hd, float softcap, const float *bias, float *scores) {
    if (gm_attend_avx2_fits(G, hd)) { /* the same bits, each row read once */
        const gm_attend_row r = {.part = part, .q = q, .bias = bias, .lo = 0, .hi = n_keys};
        rows_fused(&FUSED_AVX2, &r, 1, G, k, v, kt, kv_stride, hd, softcap, scores);
        return;
    }
    attend_loop(gm_dot_f32_avx2, gm_axpy_f32_avx2, part, q, G, k, v, kt, kv_stride, n_keys, hd, softcap, bias, scores);
}

static void attend_rows_avx2(const gm_attend_row *rows, int n, int G, const void *k, const void *v, gm_kv_type kt,
                             size_t kv_stride, int hd, float softcap, float *scores) {
    if (gm_attend_avx2_fits(G, hd)) rows_fused(&FUSED_AVX2, rows, n, G, k, v, kt, kv_stride, hd, softcap, scores);
    else rows_each(attend_partial_avx2, rows, n, G, k, v, kt, kv_stride, hd, softcap, scores);
}

static void attend_partial_avx512(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                                  size_t kv_stride, int n_keys, int hd, float softcap, const float *bias,
                                  float *scores) {
    if (gm_attend_partial_avx512_fits(G, hd))
        gm_attend_partial_avx512(part, q, G, k, v, kt, kv_stride, n_keys, hd, softcap, bias, scores);
    else attend_partial_avx2(part, q, G, k, v, kt, kv_stride, n_keys, hd, softcap, bias, scores);
}

static void attend_rows_avx512(const gm_attend_row *rows, int n, int G, const void *k, const void *v, gm_kv_type kt,
                               size_t kv_stride, int hd, float softcap, float *scores) {
    if (gm_attend_partial_avx512_fits(G, hd))
        rows_each(gm_attend_partial_avx512, rows, n, G, k, v, kt, kv_stride, hd, softcap, scores);
    else attend_rows_avx2(rows, n, G, k, v, kt, kv_stride, hd, softcap, scores);
}

static void attend_partial_neon(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                                size_t kv_stride, int n_keys, int hd, float softcap, const float *bias, float *scores) {
    if (gm_attend_neon_fits(G, hd)) { /* the same bits, each row read once */
        const gm_attend_row r = {.part = part, .q = q, .bias = bias, .lo = 0, .hi = n_keys};
        rows_fused(&FUSED_NEON, &r, 1, G, k, v, kt, kv_stride, hd, softcap, scores);
        return;
    }
    attend_loop(gm_dot_f32_neon, gm_axpy_f32_neon, part, q, G, k, v, kt, kv_stride, n_keys, hd, softcap, bias, scores);
}

static void attend_rows_neon(const gm_attend_row *rows, int n, int G, const void *k, const void *v, gm_kv_type kt,
                             size_t kv_stride, int hd, float softcap, float *scores) {
    if (gm_attend_neon_fits(G, hd)) rows_fused(&FUSED_NEON, rows, n, G, k, v, kt, kv_stride, hd, softcap, scores);
    else rows_each(attend_partial_neon, rows, n, G, k, v, kt, kv_stride, hd, softcap, scores);
}

/* ---- the tables */

static const gm_cpu_kernels KERNELS[] = {
    [GM_ISA_SCALAR] = {GM_ISA_SCALAR, gm_rmsnorm, gm_geglu, gm_exp_sum, gm_dot_f32, gm_axpy_f32, gm_kv_store,
                       gm_attend_partial, gm_attend_partial_rows},
    /* AArch64: kernels/ops_neon.c and attn_neon.c at both levels (sdot has nothing to do in float operators) */
    [GM_ISA_NEON] = {GM_ISA_NEON, gm_rmsnorm_neon, gm_geglu_neon, gm_exp_sum_neon, gm_dot_f32_neon, gm_axpy_f32_neon,
                     kv_store_neon, attend_partial_neon, attend_rows_neon},
    [GM_ISA_NEON_DOT] = {GM_ISA_NEON_DOT, gm_rmsnorm_neon, gm_geglu_neon, gm_exp_sum_neon, gm_dot_f32_neon,
                         gm_axpy_f32_neon, kv_store_neon, attend_partial_neon, attend_rows_neon},
    [GM_ISA_AVX2] = {GM_ISA_AVX2, gm_rmsnorm_avx2, gm_geglu_avx2, gm_exp_sum_avx2, gm_dot_f32_avx2, gm_axpy_f32_avx2,
                     kv_store_avx2, attend_partial_avx2, attend_rows_avx2},
    [GM_ISA_AVX512] = {GM_ISA_AVX512, gm_rmsnorm_avx512, gm_geglu_avx2, gm_exp_sum_avx2, gm_dot_f32_avx2,
                       gm_axpy_f32_avx2, kv_store_avx2, attend_partial_avx512, attend_rows_avx512},
};

const gm_cpu_kernels *gm_cpu_kernels_for(gm_isa isa) { return &KERNELS[gm_isa_resolve(isa)]; }
