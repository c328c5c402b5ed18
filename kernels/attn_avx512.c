/* kernels/attn_avx512.c — AVX-512 attention of a group of G query heads sharing one KV head
 * (compiled with -mavx512f for this file only; kernels/ops.c calls it when gm_isa_active() >=
 * GM_ISA_AVX512 and the shape fits: hd a multiple of 64, G <= 4).
 *
 * Scores: each key row is loaded once and multiplied into G accumulators (one per query head).
 * Values: the output is register blocked — a 64-float slice of each of the G heads stays in
 * registers while every value row streams by — instead of an axpy per (key, head) that reloads
 * and stores the output each time. Same math as gm_attend_group, different summation order. */
#include "kernels/ops.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

bool gm_attend_group_avx512_fits(int G, int hd) { return G >= 1 && G <= 4 && hd % 64 == 0 && hd > 0; }

/* scores[g * n_keys + j] = q_g . k_j */
static void scores_block(float *scores, const float *q, int G, const float *k, size_t kv_stride, int n_keys,
                         int hd) {
    for (int j = 0; j < n_keys; j++) {
        const float *kj = k + (size_t)j * kv_stride;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int i = 0; i < hd; i += 16) {
            const __m512 kv = _mm512_loadu_ps(kj + i);
            for (int g = 0; g < G; g++) acc[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + (size_t)g * hd + i), kv, acc[g]);
        }
        for (int g = 0; g < G; g++) scores[(size_t)g * n_keys + j] = _mm512_reduce_add_ps(acc[g]);
    }
}

/* out[g] = sum_j p[g, j] v_j over a 64-float slice at a time */
static void values_block(float *out, const float *p, int G, const float *v, size_t kv_stride, int n_keys, int hd) {
    for (int c = 0; c < hd; c += 64) {
        __m512 acc[4][4];
        for (int g = 0; g < 4; g++)
            for (int u = 0; u < 4; u++) acc[g][u] = _mm512_setzero_ps();
        for (int j = 0; j < n_keys; j++) {
            const float *vj = v + (size_t)j * kv_stride + c;
            const __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16), v2 = _mm512_loadu_ps(vj + 32),
                         v3 = _mm512_loadu_ps(vj + 48);
            for (int g = 0; g < G; g++) {
                const __m512 pg = _mm512_set1_ps(p[(size_t)g * n_keys + j]);
                acc[g][0] = _mm512_fmadd_ps(pg, v0, acc[g][0]);
                acc[g][1] = _mm512_fmadd_ps(pg, v1, acc[g][1]);
                acc[g][2] = _mm512_fmadd_ps(pg, v2, acc[g][2]);
                acc[g][3] = _mm512_fmadd_ps(pg, v3, acc[g][3]);
            }
        }
        for (int g = 0; g < G; g++)
            for (int u = 0; u < 4; u++) _mm512_storeu_ps(out + (size_t)g * hd + c + 16 * u, acc[g][u]);
    }
}

void gm_attend_group_avx512(float *out, const float *q, int G, const float *k, const float *v, size_t kv_stride,
                            int n_keys, int hd, float softcap, const float *bias, int bias_from, float *scores) {
    scores_block(scores, q, G, k, kv_stride, n_keys, hd);
    for (int g = 0; g < G; g++) {
        float *s = scores + (size_t)g * n_keys;
        if (softcap > 0.0f) gm_softcap(s, n_keys, softcap);
        if (bias)
            for (int j = bias_from < 0 ? 0 : bias_from; j < n_keys; j++) s[j] += bias[j - bias_from];
        gm_softmax(s, n_keys);
    }
    values_block(out, scores, G, v, kv_stride, n_keys, hd);
}
#else
bool gm_attend_group_avx512_fits(int G, int hd) { (void)G; (void)hd; return false; }

void gm_attend_group_avx512(float *out, const float *q, int G, const float *k, const float *v, size_t kv_stride,
                            int n_keys, int hd, float softcap, const float *bias, int bias_from, float *scores) {
    (void)out; (void)q; (void)G; (void)k; (void)v; (void)kv_stride; (void)n_keys; (void)hd; (void)softcap;
    (void)bias; (void)bias_from; (void)scores;
}
#endif
