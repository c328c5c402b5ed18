/* kernels/attn_avx512.c — AVX-512 partial attention of a group of G query heads sharing one KV head over
 * one chunk of keys stored as F32 or F16 (compiled with -mavx512f for this file only; kernels/ops.c calls
 * it from the AVX-512 kernel table when the shape fits: hd a multiple of 64, G <= 4).
 *
 * Scores: each key row is loaded (and converted) once and multiplied into G accumulators (one per query
 * head). Values: the output is register blocked — a 64-float slice of each of the G heads stays in
 * registers while every value row streams by. Heads g >= G compute on a copy of head G-1 and are never
 * stored, so one branch-free kernel serves every G, and each head's arithmetic is the same whatever G. */
#include "kernels/ops_isa.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#include "kernels/exp_avx512.h"

bool gm_attend_partial_avx512_fits(int G, int hd) { return G >= 1 && G <= 4 && hd % 64 == 0 && hd > 0; }

/* 16 stored elements from element i of row p as f32 */
static inline __attribute__((always_inline)) __m512 kv16(const void *p, size_t i, int kt) {
    if (kt == GM_KV_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
    return _mm512_loadu_ps((const float *)p + i);
}

static inline __attribute__((always_inline)) const void *row_at(const void *base, size_t j, size_t stride, int kt) {
    return (const char *)base + j * stride * (kt == GM_KV_F16 ? 2 : 4);
}

/* scores[g * n_keys + j] = q_g . k_j, two keys at a time (8 independent FMA chains) */
static inline __attribute__((always_inline)) void scores_block(float *scores, const float *q, int G, const void *k,
                                                               int kt, size_t kv_stride, int n_keys, int hd) {
    const float *q0 = q, *q1 = q + (size_t)(G > 1 ? 1 : 0) * hd, *q2 = q + (size_t)(G > 2 ? 2 : G - 1) * hd,
                *q3 = q + (size_t)(G > 3 ? 3 : G - 1) * hd;
    int j = 0;
    for (; j + 2 <= n_keys; j += 2) {
        const void *ka = row_at(k, (size_t)j, kv_stride, kt), *kb = row_at(k, (size_t)j + 1, kv_stride, kt);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        for (int i = 0; i < hd; i += 16) {
            const __m512 x0 = _mm512_loadu_ps(q0 + i), x1 = _mm512_loadu_ps(q1 + i), x2 = _mm512_loadu_ps(q2 + i),
                         x3 = _mm512_loadu_ps(q3 + i);
            const __m512 ya = kv16(ka, (size_t)i, kt), yb = kv16(kb, (size_t)i, kt);
            a0 = _mm512_fmadd_ps(x0, ya, a0), a1 = _mm512_fmadd_ps(x1, ya, a1);
            a2 = _mm512_fmadd_ps(x2, ya, a2), a3 = _mm512_fmadd_ps(x3, ya, a3);
            b0 = _mm512_fmadd_ps(x0, yb, b0), b1 = _mm512_fmadd_ps(x1, yb, b1);
            b2 = _mm512_fmadd_ps(x2, yb, b2), b3 = _mm512_fmadd_ps(x3, yb, b3);
        }
        const float sa[4] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1), _mm512_reduce_add_ps(a2),
                             _mm512_reduce_add_ps(a3)};
        const float sb[4] = {_mm512_reduce_add_ps(b0), _mm512_reduce_add_ps(b1), _mm512_reduce_add_ps(b2),
                             _mm512_reduce_add_ps(b3)};
        for (int g = 0; g < G; g++) scores[(size_t)g * n_keys + j] = sa[g], scores[(size_t)g * n_keys + j + 1] = sb[g];
    }
    for (; j < n_keys; j++) { /* the last odd key: same per-key arithmetic as the pairs */
        const void *ka = row_at(k, (size_t)j, kv_stride, kt);
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int i = 0; i < hd; i += 16) {
            const __m512 ya = kv16(ka, (size_t)i, kt);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + i), ya, a0), a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q1 + i), ya, a1);
            a2 = _mm512_fmadd_ps(_mm512_loadu_ps(q2 + i), ya, a2), a3 = _mm512_fmadd_ps(_mm512_loadu_ps(q3 + i), ya, a3);
        }
        const float sa[4] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1), _mm512_reduce_add_ps(a2),
                             _mm512_reduce_add_ps(a3)};
        for (int g = 0; g < G; g++) scores[(size_t)g * n_keys + j] = sa[g];
    }
}

/* out[g] = sum_j p[g, j] v_j over a 64-float slice at a time: 16 accumulators stay in registers */
static inline __attribute__((always_inline)) void values_block(float *out, size_t ostride, const float *p, int G,
                                                               const void *v, int kt, size_t kv_stride, int n_keys,
                                                               int hd) {
    const float *p0 = p, *p1 = p + (size_t)(G > 1 ? 1 : 0) * n_keys, *p2 = p + (size_t)(G > 2 ? 2 : G - 1) * n_keys,
                *p3 = p + (size_t)(G > 3 ? 3 : G - 1) * n_keys;
    for (int c = 0; c < hd; c += 64) {
        __m512 o[4][4];
        for (int g = 0; g < 4; g++) o[g][0] = o[g][1] = o[g][2] = o[g][3] = _mm512_setzero_ps();
        for (int j = 0; j < n_keys; j++) {
            const void *vj = row_at(v, (size_t)j, kv_stride, kt);
            const __m512 v0 = kv16(vj, (size_t)c, kt), v1 = kv16(vj, (size_t)c + 16, kt),
                         v2 = kv16(vj, (size_t)c + 32, kt), v3 = kv16(vj, (size_t)c + 48, kt);
            const __m512 w[4] = {_mm512_set1_ps(p0[j]), _mm512_set1_ps(p1[j]), _mm512_set1_ps(p2[j]),
                                 _mm512_set1_ps(p3[j])};
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                o[g][0] = _mm512_fmadd_ps(w[g], v0, o[g][0]);
                o[g][1] = _mm512_fmadd_ps(w[g], v1, o[g][1]);
                o[g][2] = _mm512_fmadd_ps(w[g], v2, o[g][2]);
                o[g][3] = _mm512_fmadd_ps(w[g], v3, o[g][3]);
            }
        }
        for (int g = 0; g < G; g++)
            for (int u = 0; u < 4; u++) _mm512_storeu_ps(out + (size_t)g * ostride + c + 16 * u, o[g][u]);
    }
}


/* s = exp(s - max) / sum in place (tail lanes masked: every element gets the same arithmetic); returns
 * the sum. mx is finite. */
static float softmax_scores(float *s, int n, float mx) {
    const __m512 vm = _mm512_set1_ps(mx);
    __m512 sum = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 kk = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        const __m512 e = gm_exp512_nonpos(_mm512_sub_ps(_mm512_maskz_loadu_ps(kk, s + i), vm));
        _mm512_mask_storeu_ps(s + i, kk, e);
        sum = _mm512_add_ps(sum, _mm512_maskz_mov_ps(kk, e));
    }
    const float total = _mm512_reduce_add_ps(sum);
    const __m512 inv = _mm512_set1_ps((float)(1.0 / (double)total));
    for (int i = 0; i < n; i += 16) {
        const __mmask16 kk = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(s + i, kk, _mm512_mul_ps(_mm512_maskz_loadu_ps(kk, s + i), inv));
    }
    return total;
}

static float max_of(const float *s, int n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(s + i));
    float mx = _mm512_reduce_max_ps(m);
    for (; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    return mx;
}

static inline __attribute__((always_inline)) void partial(float *part, const float *q, int G, const void *k,
                                                          const void *v, int kt, size_t kv_stride, int n_keys, int hd,
                                                          float softcap, const float *bias, float *scores) {
    scores_block(scores, q, G, k, kt, kv_stride, n_keys, hd);
    bool any = false;
    for (int g = 0; g < G; g++) {
        float *s = scores + (size_t)g * n_keys, *o = part + (size_t)g * (hd + 2);
        if (softcap > 0.0f) gm_softcap(s, n_keys, softcap);
        if (bias)
            for (int j = 0; j < n_keys; j++) s[j] += bias[j];
        const float mx = max_of(s, n_keys);
        o[hd] = mx;
        if (mx == -INFINITY) { /* every key masked: zero weights */
            memset(s, 0, (size_t)n_keys * sizeof *s);
            o[hd + 1] = 0.0f;
            continue;
        }
        o[hd + 1] = softmax_scores(s, n_keys, mx);
        any = true;
    }
    if (any) values_block(part, (size_t)hd + 2, scores, G, v, kt, kv_stride, n_keys, hd);
    else
        for (int g = 0; g < G; g++) memset(part + (size_t)g * (hd + 2), 0, (size_t)hd * sizeof *part);
}

void gm_attend_partial_avx512(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                              size_t kv_stride, int n_keys, int hd, float softcap, const float *bias, float *scores) {
    if (kt == GM_KV_F16) partial(part, q, G, k, v, GM_KV_F16, kv_stride, n_keys, hd, softcap, bias, scores);
    else partial(part, q, G, k, v, GM_KV_F32, kv_stride, n_keys, hd, softcap, bias, scores);
}

#else
bool gm_attend_partial_avx512_fits(int G, int hd) { (void)G; (void)hd; return false; }

void gm_attend_partial_avx512(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                              size_t kv_stride, int n_keys, int hd, float softcap, const float *bias, float *scores) {
    (void)part; (void)q; (void)G; (void)k; (void)v; (void)kt; (void)kv_stride; (void)n_keys; (void)hd;
    (void)softcap; (void)bias; (void)scores;
}
#endif
