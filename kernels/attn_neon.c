/* kernels/attn_neon.c — AArch64 NEON inner loops of attention (both NEON levels' tables in kernels/ops.c call
 * them; NEON is the AArch64 baseline, so no flag). kernels/attn_avx2.c's two passes with NEON registers: each key /
 * value row is loaded (and converted from F16) once for all heads, and for all the rows of a call while it is in
 * L1. Each head's score is gm_dot_f32_neon's operations (= gm_dot_f32_avx2's) in its order and each value update
 * gm_axpy_f32_neon's: the same bits as the per-head loops, whatever G, whatever the other rows, and the bits of
 * the AVX2 passes on x86.
 *
 * AVX2's two 8-lane accumulator chains over 16 floats are four independent 4-lane chains here: chain c takes
 * the 4 floats at 4c, 4c + 16, 4c + 32, ... A chain's fmas are in key-element order however the chains are
 * interleaved, so the scores are computed a chain at a time (4 keys x 4 heads = 16 accumulators, the 4 key
 * vectors and a query vector: 21 of the 32 vector registers) and then combined as AVX2 does: lanes 0-3 of
 * s0 + s1 are chain 0 + chain 2, lanes 4-7 chain 1 + chain 3, then AVX2's horizontal sum. */
#include "kernels/ops_isa.h"

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

bool gm_attend_neon_fits(int G, int hd) { return G >= 1 && G <= 4 && hd % 16 == 0; }

#define INL static inline __attribute__((always_inline))

INL float32x4_t kv4(const void *row, gm_kv_type kt, int i) {
    if (kt == GM_KV_F32) return vld1q_f32((const float *)row + i);
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)row + i))); /* exact */
}

/* gm_dot_f32_neon's reduction: ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) of lanes l0-3 in a, l4-7 in b */
INL float hsum8(float32x4_t a, float32x4_t b) {
    const float32x4_t h = vaddq_f32(a, b);
    const float32x2_t t = vadd_f32(vget_low_f32(h), vget_high_f32(h));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

/* chain c for R keys x G heads: each q vector loaded once for the R keys, each key vector once for the G heads */
INL void scores_chain(int R, int G, float32x4_t acc[4][4], const float *q, const char *const kr[4], gm_kv_type kt,
                      int hd, int c) {
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) acc[r][g] = vdupq_n_f32(0.f);
    for (int i = 4 * c; i < hd; i += 16) {
        float32x4_t kv[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) kv[r] = kv4(kr[r], kt, i);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const float32x4_t x = vld1q_f32(q + (size_t)g * hd + i);
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) acc[r][g] = vfmaq_f32(acc[r][g], x, kv[r]);
        }
    }
}

/* R keys' scores (keys at kr0, kr0 + rs, ...) into scores[g * n_keys + j + r] */
INL void scores_keys(int R, int G, float *scores, const float *q, const char *kr0, size_t rs, gm_kv_type kt,
                     int n_keys, int hd, int j) {
    const char *const kr[4] = {kr0, kr0 + (R > 1 ? rs : 0), kr0 + (R > 2 ? 2 * rs : 0), kr0 + (R > 3 ? 3 * rs : 0)};
    float32x4_t lo[4][4], acc[4][4];
    scores_chain(R, G, lo, q, kr, kt, hd, 0);
    scores_chain(R, G, acc, q, kr, kt, hd, 2);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) lo[r][g] = vaddq_f32(lo[r][g], acc[r][g]); /* s0 + s1, lanes 0-3 */
    float32x4_t hi[4][4];
    scores_chain(R, G, hi, q, kr, kt, hd, 1);
    scores_chain(R, G, acc, q, kr, kt, hd, 3);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
            scores[(size_t)g * n_keys + j + r] = hsum8(lo[r][g], vaddq_f32(hi[r][g], acc[r][g])); /* lanes 4-7 */
}

#define SCORES_R(G)                                                                                               \
    switch (R) {                                                                                                  \
    case 1: scores_keys(1, G, scores, q, kr0, rs, kt, n_keys, hd, j); break;                                      \
    case 2: scores_keys(2, G, scores, q, kr0, rs, kt, n_keys, hd, j); break;                                      \
    case 3: scores_keys(3, G, scores, q, kr0, rs, kt, n_keys, hd, j); break;                                      \
    default: scores_keys(4, G, scores, q, kr0, rs, kt, n_keys, hd, j); break;                                     \
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

/* part[g][c, c + 16) += sum_j p[g, j] v_j[c, c + 16): that slice of every head held in registers (16 for G = 4)
 * while the value rows stream by; per element the fmas of gm_axpy_f32_neon in key order. A zero weight adds
 * 0 * v, which leaves the sum's bits as they are for finite v (the sum starts at +0 and is never -0), as
 * skipping the key in the per-head loops does. */
INL void values_slice(int G, float *part, const float *scores, const char *v, gm_kv_type kt, size_t rs, int n_keys,
                      int hd, int c) {
    float32x4_t o[4][4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++) o[g][l] = vld1q_f32(part + (size_t)g * (hd + 2) + c + 4 * l);
    for (int j = 0; j < n_keys; j++, v += rs) {
        float32x4_t x[4];
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++) x[l] = kv4(v, kt, c + 4 * l);
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const float p = scores[(size_t)g * n_keys + j];
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) o[g][l] = vfmaq_n_f32(o[g][l], x[l], p);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int l = 0; l < 4; l++) vst1q_f32(part + (size_t)g * (hd + 2) + c + 4 * l, o[g][l]);
}

#define ATTN_ISA neon
#define ATTN_TILE 4
#include "kernels/attn_rows.h"

#else
/* Not an AArch64 build of this file: never selected by ops.c there. */
bool gm_attend_neon_fits(int G, int hd) { (void)G, (void)hd; return false; }
#define ATTN_ISA neon
#define ATTN_STUBS
#include "kernels/attn_rows.h"
#endif
