/* kernels/attn_avx2.c — AVX2/FMA inner loops of attention (compiled with -mavx2 -mfma for this file
 * only; the AVX2 and AVX-512 kernel tables of kernels/ops.c call them). The vector loops they match
 * bit for bit (gm_dot_f32_avx2, gm_axpy_f32_avx2) and the softmax's vector exp are in kernels/ops_avx2.c. */
#include "kernels/ops_isa.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* ---- attention of query rows' G heads over a chunk of keys (kernels/ops.c gm_attend_partial_rows):
 * each key / value row is loaded (and converted from F16) once for all heads, and for all the rows of
 * a call while it is in L1. Each head's score is gm_dot_f32_avx2's operations in its order (two
 * accumulators over 16 floats, the same horizontal sum) and each value update gm_axpy_f32_avx2's: the
 * same bits as the per-head loops, whatever G, whatever the other rows. */

bool gm_attend_avx2_fits(int G, int hd) { return G >= 1 && G <= 4 && hd % 16 == 0; }

static inline __m256 kv8(const void *row, gm_kv_type kt, int i) {
    if (kt == GM_KV_F32) return _mm256_loadu_ps((const float *)row + i);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
}

static inline float hsum_dot(__m256 s0) { /* gm_dot_f32_avx2's reduction */
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
}

#define INL static inline __attribute__((always_inline))

/* One of gm_dot_f32_avx2's two accumulator chains (half 0: the 8-float blocks at 0, 16, 32, ...; half 1:
 * those at 8, 24, ...) for R keys x G heads at once: each q vector loaded once for the R keys, each key
 * vector once for the G heads (12 chains in registers for 3 x 4) */
INL void scores_half(int R, int G, __m256 acc[3][4], const float *q, const char *const kr[3], gm_kv_type kt, int hd,
                     int half) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) acc[r][g] = _mm256_setzero_ps();
    for (int i = 8 * half; i < hd; i += 16) {
        __m256 kv[3];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) kv[r] = kv8(kr[r], kt, i);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const __m256 x = _mm256_loadu_ps(q + (size_t)g * hd + i);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][g] = _mm256_fmadd_ps(x, kv[r], acc[r][g]);
        }
    }
}

/* R keys' scores (keys at kr, kr + rs, ...) into scores[g * n_keys + j + r]: both chains, then
 * gm_dot_f32_avx2's sum of the two and its horizontal sum */
INL void scores_keys(int R, int G, float *scores, const float *q, const char *kr0, size_t rs, gm_kv_type kt,
                     int n_keys, int hd, int j) {
    const char *const kr[3] = {kr0, kr0 + (R > 1 ? rs : 0), kr0 + (R > 2 ? 2 * rs : 0)};
    __m256 s0[3][4], s1[3][4];
    scores_half(R, G, s0, q, kr, kt, hd, 0);
    scores_half(R, G, s1, q, kr, kt, hd, 1);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) scores[(size_t)g * n_keys + j + r] = hsum_dot(_mm256_add_ps(s0[r][g], s1[r][g]));
}

#define SCORES_R(G)                                                                                               \
    switch (R) {                                                                                                  \
    case 1: scores_keys(1, G, scores, q, kr0, rs, kt, n_keys, hd, j); break;                                      \
    case 2: scores_keys(2, G, scores, q, kr0, rs, kt, n_keys, hd, j); break;                                      \
    default: scores_keys(3, G, scores, q, kr0, rs, kt, n_keys, hd, j); break;                                     \
    }
static void scores_tile(int R, int G, float *scores, const float *q, const char *kr0, size_t rs, gm_kv_type kt,
                        int n_keys, int hd, int j) {
    switch (G) {
    case 1: SCORES_R(1) break;
    case 2: SCORES_R(2) break;
    case 3: SCORES_R(3) break;
    default: SCORES_R(4) break;
    }
}
#undef SCORES_R

/* part[g][c, c + 16) += sum_j p[g, j] v_j[c, c + 16): that slice of every head held in registers while the
 * value rows stream by; per element the fmadds of gm_axpy_f32_avx2 in key order. A zero weight adds 0 * v,
 * which leaves the sum's bits as they are for finite v (the sum starts at +0 and is never -0), as skipping
 * the key in the per-head loops does. */
INL void values_slice(int G, float *part, const float *scores, const char *v, gm_kv_type kt, size_t rs, int n_keys,
                      int hd, int c) {
    __m256 o[4][2];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        o[g][0] = _mm256_loadu_ps(part + (size_t)g * (hd + 2) + c);
        o[g][1] = _mm256_loadu_ps(part + (size_t)g * (hd + 2) + c + 8);
    }
    for (int j = 0; j < n_keys; j++, v += rs) {
        const __m256 v0 = kv8(v, kt, c), v1 = kv8(v, kt, c + 8);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const __m256 p = _mm256_broadcast_ss(scores + (size_t)g * n_keys + j);
            o[g][0] = _mm256_fmadd_ps(p, v0, o[g][0]);
            o[g][1] = _mm256_fmadd_ps(p, v1, o[g][1]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        _mm256_storeu_ps(part + (size_t)g * (hd + 2) + c, o[g][0]);
        _mm256_storeu_ps(part + (size_t)g * (hd + 2) + c + 8, o[g][1]);
    }
}

#define ATTN_ISA avx2
#define ATTN_TILE 3
#include "kernels/attn_rows.h"

#else
/* Not an x86-64 AVX2 build of this file: never selected by ops.c there. */
bool gm_attend_avx2_fits(int G, int hd) { (void)G, (void)hd; return false; }
#define ATTN_ISA avx2
#define ATTN_STUBS
#include "kernels/attn_rows.h"
#endif
