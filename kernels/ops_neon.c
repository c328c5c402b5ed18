/* kernels/ops_neon.c — AArch64 NEON versions of the small operators of kernels/ops.h: the f32 dot product and axpy
 * (attention's per-head loops, which kernels/attn_neon.c's passes match bit for bit), the F16 KV store, RMSNorm,
 * the vector exp with its sum (attention's softmax and the sampler's) and GeGLU. Both NEON levels' tables in
 * kernels/ops.c hold them: none of them has integer dot products for sdot to speed up. NEON is the AArch64
 * baseline, so the file needs no flag.
 *
 * Each is kernels/ops_avx2.c's arithmetic operation for operation, AVX2's 8-lane vector standing as two float32x4
 * (lanes 0-3, 4-7; a 4-lane double vector as two float64x2): the same fmas and separate roundings, the same
 * summation trees, the same exp polynomial. So every result has the bits of the AVX2 level on x86, and what the
 * AVX2 versions promise against the scalar references (tests/test_ops_simd.c) holds here as written there.
 * tests/test_ops_simd.c simd_ops_canonical_order holds both levels' versions to one portable C statement of that
 * arithmetic, bit for bit. */
#include "kernels/ops_isa.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>

/* AVX2's hsum of 8 lanes (l0..3 in a, l4..7 in b): ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) */
static inline float hsum8(float32x4_t a, float32x4_t b) {
    const float32x4_t h = vaddq_f32(a, b);
    const float32x2_t t = vadd_f32(vget_low_f32(h), vget_high_f32(h));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

/* gm_dot_f32_avx2: two 8-lane chains over 16 floats (here four 4-lane ones), a last 8 into the first, their sum,
 * hsum8, then the tail element by element (unfused: the build does not contract a * b + c) */
float gm_dot_f32_neon(const float *a, const float *b, int n) {
    float32x4_t s0 = vdupq_n_f32(0.f), s0h = vdupq_n_f32(0.f), s1 = vdupq_n_f32(0.f), s1h = vdupq_n_f32(0.f);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s0h = vfmaq_f32(s0h, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        s1h = vfmaq_f32(s1h, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s0h = vfmaq_f32(s0h, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    float s = hsum8(vaddq_f32(s0, s1), vaddq_f32(s0h, s1h));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y += a x: one fma per element as _mm256_fmadd_ps, the tail unfused as AVX2's */
void gm_axpy_f32_neon(float *y, float a, const float *x, int n) {
    const float32x4_t va = vdupq_n_f32(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        vst1q_f32(y + i, vfmaq_f32(vld1q_f32(y + i), va, vld1q_f32(x + i)));
        vst1q_f32(y + i + 4, vfmaq_f32(vld1q_f32(y + i + 4), va, vld1q_f32(x + i + 4)));
    }
    for (; i < n; i++) y[i] += a * x[i];
}

/* f32 -> f16 by FCVTN, which rounds by FPCR (round to nearest even unless a program changes it, as F16C's
 * _MM_FROUND_TO_NEAREST_INT): gm_fp32_to_fp16's result for finite values */
void gm_kv_store_f16_neon(uint16_t *dst, const float *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const float16x8_t h = vcombine_f16(vcvt_f16_f32(vld1q_f32(src + i)), vcvt_f16_f32(vld1q_f32(src + i + 4)));
        vst1q_u16(dst + i, vreinterpretq_u16_f16(h));
    }
    for (; i < n; i++) {
        const __fp16 h = (__fp16)src[i]; /* the same conversion, one lane */
        memcpy(dst + i, &h, sizeof h);
    }
}

/* gm_rmsnorm_avx2: the sum of squares in double, four 4-lane accumulators over 16 floats (here eight 2-lane ones,
 * d[k][0] lanes 0-1 and d[k][1] lanes 2-3 of AVX2's s[k]), reduced as AVX2 does: (s0 + s1) + (s2 + s3), then
 * its lanes (t0 + t2) + (t1 + t3); the tail in order; y = (x r) w in float. A square of a float is exact in
 * double, so fused or not the fma rounds only the sum. */
void gm_rmsnorm_neon(float *y, const float *x, const float *w, int n, float eps) {
    float64x2_t d[4][2];
    for (int k = 0; k < 4; k++) d[k][0] = d[k][1] = vdupq_n_f64(0.0);
    int i = 0;
    for (; i + 16 <= n; i += 16)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const float32x4_t v = vld1q_f32(x + i + 4 * k);
            const float64x2_t lo = vcvt_f64_f32(vget_low_f32(v)), hi = vcvt_high_f64_f32(v);
            d[k][0] = vfmaq_f64(d[k][0], lo, lo);
            d[k][1] = vfmaq_f64(d[k][1], hi, hi);
        }
    const float64x2_t t0 = vaddq_f64(vaddq_f64(d[0][0], d[1][0]), vaddq_f64(d[2][0], d[3][0])); /* t lanes 0-1 */
    const float64x2_t t1 = vaddq_f64(vaddq_f64(d[0][1], d[1][1]), vaddq_f64(d[2][1], d[3][1])); /* t lanes 2-3 */
    const float64x2_t h = vaddq_f64(t0, t1);
    double ss = vgetq_lane_f64(h, 0) + vgetq_lane_f64(h, 1);
    for (; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    const float32x4_t vr = vdupq_n_f32(r);
    i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vmulq_f32(vmulq_f32(vld1q_f32(x + i), vr), vld1q_f32(w + i)));
    for (; i < n; i++) y[i] = x[i] * r * w[i];
}

/* exp_avx2: x clamped to [-87, 88], n = x log2(e) rounded to nearest even, r = x - n ln2 in two fmas (ln2 split
 * for an exact n ln2), e^r by the same degree-6 polynomial in the same fmas, times 2^n through the exponent bits.
 * vminnm / vmaxnm take the number where x is NaN, as _mm256_min_ps / max_ps with the constant second. */
static inline float32x4_t exp_neon(float32x4_t x) {
    x = vmaxnmq_f32(vminnmq_f32(x, vdupq_n_f32(88.0f)), vdupq_n_f32(-87.0f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504088896341f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
    p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
    p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
    p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
    p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* 8 exponentials of src - mx into dst, kept where src - mx >= -87, and their sum into AVX2's two 4-lane double
 * accumulators (a[0], a[1]: lanes 0-3 of each 8; a[2], a[3]: lanes 4-7) */
static inline __attribute__((always_inline)) void exp8(float *dst, const float *src, float32x4_t m, float64x2_t a[4]) {
    const float32x4_t lo = vdupq_n_f32(-87.0f);
    const float32x4_t x0 = vsubq_f32(vld1q_f32(src), m), x1 = vsubq_f32(vld1q_f32(src + 4), m);
    const float32x4_t e0 = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(exp_neon(x0)), vcgeq_f32(x0, lo)));
    const float32x4_t e1 = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(exp_neon(x1)), vcgeq_f32(x1, lo)));
    a[0] = vaddq_f64(a[0], vcvt_f64_f32(vget_low_f32(e0)));
    a[1] = vaddq_f64(a[1], vcvt_high_f64_f32(e0));
    a[2] = vaddq_f64(a[2], vcvt_f64_f32(vget_low_f32(e1)));
    a[3] = vaddq_f64(a[3], vcvt_high_f64_f32(e1));
    vst1q_f32(dst, e0);
    vst1q_f32(dst + 4, e1);
}

/* gm_exp_sum_avx2: 8 at a time, the tail padded with -inf (which gives 0) through the same code, and the sum in
 * double reduced as AVX2 does: (acc0 + acc1), then (t0 + t2) + (t1 + t3). The tail is outside the loop so that
 * no call (memcpy) inside it makes the compiler reload the exp constants every 8 elements. */
double gm_exp_sum_neon(float *s, int n, float mx) {
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0;
    }
    const float32x4_t m = vdupq_n_f32(mx);
    float64x2_t a[4] = {vdupq_n_f64(0.0), vdupq_n_f64(0.0), vdupq_n_f64(0.0), vdupq_n_f64(0.0)};
    int j = 0;
    for (; j + 8 <= n; j += 8) exp8(s + j, s + j, m, a);
    if (j < n) {
        float tmp[8];
        for (int i = 0; i < 8; i++) tmp[i] = j + i < n ? s[j + i] : -INFINITY;
        exp8(tmp, tmp, m, a);
        memcpy(s + j, tmp, (size_t)(n - j) * sizeof *s);
    }
    const float64x2_t h = vaddq_f64(vaddq_f64(a[0], a[2]), vaddq_f64(a[1], a[3])); /* (t0 + t2, t1 + t3) */
    return vgetq_lane_f64(h, 0) + vgetq_lane_f64(h, 1);
}

/* geglu8 of AVX2 on 4 lanes: gelu_tanh(g) u as g / (1 + exp(-2z)) u (no cancellation for negative z); every
 * operation is per lane, so 4 lanes at a time give AVX2's bits */
static inline float32x4_t geglu4(float32x4_t g, float32x4_t u) {
    const float32x4_t g3 = vmulq_f32(vmulq_f32(g, g), g);
    const float32x4_t z = vmulq_f32(vdupq_n_f32(-2.0f * 0.7978845608028654f), vfmaq_f32(g, vdupq_n_f32(0.044715f), g3));
    const float32x4_t den = vaddq_f32(vdupq_n_f32(1.0f), exp_neon(z));
    return vmulq_f32(vdivq_f32(g, den), u);
}

void gm_geglu_neon(float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(gate + i, geglu4(vld1q_f32(gate + i), vld1q_f32(up + i)));
    if (i < n) { /* the tail through the same vector code: every element gets the same arithmetic */
        float g[4] = {0}, u[4] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof *g);
        memcpy(u, up + i, (size_t)(n - i) * sizeof *u);
        vst1q_f32(g, geglu4(vld1q_f32(g), vld1q_f32(u)));
        memcpy(gate + i, g, (size_t)(n - i) * sizeof *g);
    }
}

#else
/* Not an AArch64 build of this file: the scalar operators (never selected by ops.c there). */
float gm_dot_f32_neon(const float *a, const float *b, int n) { return gm_dot_f32(a, b, n); }
void gm_axpy_f32_neon(float *y, float a, const float *x, int n) { gm_axpy_f32(y, a, x, n); }
void gm_kv_store_f16_neon(uint16_t *dst, const float *src, int n) { gm_kv_store(dst, GM_KV_F16, src, n); }
void gm_rmsnorm_neon(float *y, const float *x, const float *w, int n, float eps) { gm_rmsnorm(y, x, w, n, eps); }
double gm_exp_sum_neon(float *s, int n, float mx) { return gm_exp_sum(s, n, mx); }
void gm_geglu_neon(float *gate, const float *up, int n) { gm_geglu(gate, up, n); }
#endif
