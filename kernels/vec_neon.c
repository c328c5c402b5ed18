/* kernels/vec_neon.c — AArch64 NEON dot products of one weight row with one activation row (gm_vec_dot_fn) for
 * F32, F16, BF16, Q4_0, Q5_0, Q8_0, Q4_K and Q6_K, over the scalar reference's activation bytes (Q8_0, Q8_K: the
 * quantizers of quant/ are kept, so the activations are the reference's exactly). kernels/vec_neon_dot.c is this
 * file again with the dot-product extension (sdot), under its own names; CMakeLists.txt gives only that copy
 * -march=armv8.2-a+dotprod, and kernels/cpu.c's hwcaps decide at run time which one runs.
 *
 * The arithmetic is the AVX2 level's (kernels/qtiles_avx2.c, kernels/vec_avx2.c), so a (row, token) output has the
 * same bits on an ARM CPU at either NEON level as on an x86 CPU at the AVX2 level:
 *   32-code types:  per block b in order, the exact int32 dot isum_b, then in f32 from 0
 *                   acc = fma((float)isum_b, dw_b * da_b, acc)
 *   Q4_K:           acc = fma((float)isum_b, d * da, acc); acc = fma((float)msum_b, -(dmin * da), acc)
 *                   (msum_b: the mins against the activation's bsums)
 *   Q6_K:           acc = fma((float)isum_b, d * da, acc) with isum_b over the signed values (codes - 32)
 *   F32 / F16 / BF16: eight f32 lanes (two 4-lane vectors standing for AVX2's one 8-lane vector), one fma per
 *                   lane and 8-element step, then ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) (AVX2's
 *                   hsum8), then the tail element by element, unfused.
 * The integers are exact however they are summed (sdot's four-products-per-lane or the plain level's widening
 * multiply and pairwise add), so the two NEON levels give identical bits too. The per-block f32 steps are one
 * serial chain per row: that fixed order is what keeps a token's result independent of anything else in the
 * batch, at the price of a scalar fmadd per block (docs/performance.md, "ARM (NEON)"). tests/test_matmul.c holds
 * every kernel here to a portable C statement of this order, bit for bit. */
#ifndef VN_DOT
#define VN_DOT 0
#endif
#if VN_DOT /* kernels/vec_neon_dot.c */
#define gm_neon_vec_dot gm_neon_dot_vec_dot
#endif
#include "kernels/gemm.h"

#include <stddef.h>
#include <string.h>

#include "quant/blocks.h"

#if defined(__aarch64__) && defined(__ARM_NEON) && (!VN_DOT || defined(__ARM_FEATURE_DOTPROD))
#include <arm_neon.h>

#define INL static inline __attribute__((always_inline))

/* an f16 field as f32 (exact: every half is a float) */
INL float h2f(uint16_t h) {
    __fp16 v;
    memcpy(&v, &h, sizeof v);
    return (float)v;
}

/* acc + the 16 products a[i] b[i], in int32 lanes: exact for int8 operands whichever instructions add them */
INL int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if VN_DOT
    return vdotq_s32(acc, a, b); /* lane k += a[4k..4k+3] . b[4k..4k+3] */
#else
    /* int8 x int8 fits int16 (|p| <= 2^14); pairs add into the int32 lanes */
    const int16x8_t lo = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    const int16x8_t hi = vmull_high_s8(a, b);
    return vpadalq_s16(vpadalq_s16(acc, lo), hi);
#endif
}

/* ------------------------------------------------------------------ 32-code types against Q8_0 */

static void dot_q8_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q8_0 *x = w;
    const gm_block_q8_0 *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        int32x4_t p = dot16(vdupq_n_s32(0), vld1q_s8(x[i].qs), vld1q_s8(y[i].qs));
        p = dot16(p, vld1q_s8(x[i].qs + 16), vld1q_s8(y[i].qs + 16));
        acc = __builtin_fmaf((float)vaddvq_s32(p), h2f(x[i].d) * h2f(y[i].d), acc);
    }
    *s = acc;
}

/* Q4_0: codes 0..15 (low nibbles elements 0-15, high nibbles 16-31) minus 8 as signed bytes */
static void dot_q4_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q4_0 *x = w;
    const gm_block_q8_0 *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t o8 = vdupq_n_s8(8);
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        const uint8x16_t q = vld1q_u8(x[i].qs);
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), o8);
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), o8);
        int32x4_t p = dot16(vdupq_n_s32(0), lo, vld1q_s8(y[i].qs));
        p = dot16(p, hi, vld1q_s8(y[i].qs + 16));
        acc = __builtin_fmaf((float)vaddvq_s32(p), h2f(x[i].d) * h2f(y[i].d), acc);
    }
    *s = acc;
}

/* 16 bits -> 16 bytes, 16 where the bit is set (bit k of `bits` to byte k) */
INL uint8x16_t bits16(uint32_t bits) {
    static const uint8_t mask[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vcombine_u8(vdup_n_u8((uint8_t)bits), vdup_n_u8((uint8_t)(bits >> 8)));
    return vandq_u8(vtstq_u8(b, vld1q_u8(mask)), vdupq_n_u8(16));
}

/* Q5_0: the nibbles plus 16 where the fifth bit (qh bit j for element j) is set, minus 16 */
static void dot_q5_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q5_0 *x = w;
    const gm_block_q8_0 *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t o16 = vdupq_n_s8(16);
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        const uint8x16_t q = vld1q_u8(x[i].qs);
        const int8x16_t lo = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, m4), bits16(qh))), o16);
        const int8x16_t hi = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), bits16(qh >> 16))), o16);
        int32x4_t p = dot16(vdupq_n_s32(0), lo, vld1q_s8(y[i].qs));
        p = dot16(p, hi, vld1q_s8(y[i].qs + 16));
        acc = __builtin_fmaf((float)vaddvq_s32(p), h2f(x[i].d) * h2f(y[i].d), acc);
    }
    *s = acc;
}

/* ------------------------------------------------------------------ K-quants against Q8_K */

/* Q4_K: 8 sub-blocks of 32 codes, 6-bit scale and min each (gm_k4_scale_min, four at a time from the 12 bytes) */
static void dot_q4_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q4_K *x = w;
    const gm_block_q8_K *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK_K; i++) {
        uint32_t k[3], v[4];
        memcpy(k, x[i].scales, 12);
        v[0] = k[0] & 0x3f3f3f3f;                                      /* scales 0-3 */
        v[1] = (k[2] & 0x0f0f0f0f) | ((k[0] >> 2) & 0x30303030);       /* scales 4-7 */
        v[2] = k[1] & 0x3f3f3f3f;                                      /* mins 0-3 */
        v[3] = ((k[2] >> 4) & 0x0f0f0f0f) | ((k[1] >> 2) & 0x30303030); /* mins 4-7 */
        uint8_t sm[16];
        memcpy(sm, v, 16);
        /* the mins against the bsums: sub-block j covers bsums 2j, 2j + 1 (|pair| <= 2 x 16 x 128: int16) */
        const int16x8_t bs = vpaddq_s16(vld1q_s16(y[i].bsums), vld1q_s16(y[i].bsums + 8));
        const int16x8_t mn = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sm + 8)));
        const int32x4_t mp = vmlal_s16(vmull_s16(vget_low_s16(bs), vget_low_s16(mn)), vget_high_s16(bs), vget_high_s16(mn));
        int32x4_t is = vdupq_n_s32(0), is2 = vdupq_n_s32(0); /* low and high nibbles' chains */
        const uint8_t *q = x[i].qs;
        const int8_t *q8 = y[i].qs;
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++, q += 32, q8 += 64) {
            const uint8x16_t q0 = vld1q_u8(q), q1 = vld1q_u8(q + 16);
            int32x4_t lo = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(q0, m4)), vld1q_s8(q8));
            lo = dot16(lo, vreinterpretq_s8_u8(vandq_u8(q1, m4)), vld1q_s8(q8 + 16));
            int32x4_t hi = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vld1q_s8(q8 + 32));
            hi = dot16(hi, vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), vld1q_s8(q8 + 48));
            is = vmlaq_n_s32(is, lo, sm[2 * c]);
            is2 = vmlaq_n_s32(is2, hi, sm[2 * c + 1]);
        }
        const float da = y[i].d, d = h2f(x[i].d) * da, dm = h2f(x[i].dmin) * da;
        acc = __builtin_fmaf((float)vaddvq_s32(vaddq_s32(is, is2)), d, acc);
        acc = __builtin_fmaf((float)vaddvq_s32(mp), -dm, acc);
    }
    *s = acc;
}

/* Q6_K: 16 groups of 16 codes, one int8 scale each. Half h (128 codes) takes ql[64h ..], qh[32h ..]: quarter k
 * (codes 32k .. 32k + 31 of the half) the low (k = 0, 1) or high (2, 3) nibbles of ql[32 (k & 1) ..] and bits
 * 2k, 2k + 1 of qh as bits 4, 5; the value is the code minus 32 */
static void dot_q6_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q6_K *x = w;
    const gm_block_q8_K *y = a;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m30 = vdupq_n_u8(0x30);
    const int8x16_t o32 = vdupq_n_s8(32);
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK_K; i++) {
        int32x4_t is[4] = {vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0), vdupq_n_s32(0)}; /* by quarter: 4 chains */
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *q8 = y[i].qs + 128 * h, *sc = x[i].scales + 8 * h;
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++) { /* codes l in [16 half, 16 half + 16) of each quarter */
                const uint8x16_t l0 = vld1q_u8(ql + 16 * half), l1 = vld1q_u8(ql + 32 + 16 * half);
                const uint8x16_t b = vld1q_u8(qh + 16 * half);
                uint8x16_t c[4];
                c[0] = vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(b, 4), m30));
                c[1] = vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(b, 2), m30));
                c[2] = vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(b, m30));
                c[3] = vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(b, 2), m30));
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    const int8x16_t v = vsubq_s8(vreinterpretq_s8_u8(c[k]), o32);
                    const int32x4_t p = dot16(vdupq_n_s32(0), v, vld1q_s8(q8 + 32 * k + 16 * half));
                    is[k] = vmlaq_n_s32(is[k], p, sc[2 * k + half]);
                }
            }
        }
        const int32x4_t t = vaddq_s32(vaddq_s32(is[0], is[1]), vaddq_s32(is[2], is[3]));
        acc = __builtin_fmaf((float)vaddvq_s32(t), h2f(x[i].d) * y[i].d, acc);
    }
    *s = acc;
}

/* ------------------------------------------------------------------ float weights against f32 */

INL float32x4_t wf4(int type, const void *w, int64_t i) {
    if (type == GM_TYPE_F32) return vld1q_f32((const float *)w + i);
    const uint16x4_t h = vld1_u16((const uint16_t *)w + i);
    if (type == GM_TYPE_F16) return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); /* BF16: the high half of an f32 */
}

INL float wf1(int type, const void *w, int64_t i) {
    if (type == GM_TYPE_F32) return ((const float *)w)[i];
    if (type == GM_TYPE_F16) return h2f(((const uint16_t *)w)[i]);
    return gm_bf16_to_fp32(((const uint16_t *)w)[i]);
}

INL float dotF(int type, int64_t n, const void *w, const float *x) {
    float32x4_t a0 = vdupq_n_f32(0.f), a1 = vdupq_n_f32(0.f); /* AVX2's lanes 0-3 and 4-7 */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        a0 = vfmaq_f32(a0, wf4(type, w, i), vld1q_f32(x + i));
        a1 = vfmaq_f32(a1, wf4(type, w, i + 4), vld1q_f32(x + i + 4));
    }
    const float32x4_t s4 = vaddq_f32(a0, a1);                                /* l_k + l_{k+4} */
    const float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));     /* (s0 + s2, s1 + s3) */
    float s = vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
    for (; i < n; i++) s += wf1(type, w, i) * x[i];
    return s;
}

static void dot_f32(int64_t n, float *s, const void *w, const void *a) { *s = dotF(GM_TYPE_F32, n, w, a); }
static void dot_f16(int64_t n, float *s, const void *w, const void *a) { *s = dotF(GM_TYPE_F16, n, w, a); }
static void dot_bf16(int64_t n, float *s, const void *w, const void *a) { *s = dotF(GM_TYPE_BF16, n, w, a); }

gm_vec_dot_fn gm_neon_vec_dot(int type) {
    switch (type) {
    case GM_TYPE_F32: return dot_f32;
    case GM_TYPE_F16: return dot_f16;
    case GM_TYPE_BF16: return dot_bf16;
    case GM_TYPE_Q4_0: return dot_q4_0;
    case GM_TYPE_Q5_0: return dot_q5_0;
    case GM_TYPE_Q8_0: return dot_q8_0;
    case GM_TYPE_Q4_K: return dot_q4_K;
    case GM_TYPE_Q6_K: return dot_q6_K;
    default: return NULL;
    }
}

#else

gm_vec_dot_fn gm_neon_vec_dot(int type) {
    (void)type;
    return NULL;
}

#endif
