/* kernels/ops_avx2.c — AVX2/FMA versions of the small operators of kernels/ops.h: the f32 dot product and
 * axpy (the per-head loops attention's fused kernels match bit for bit), the F16 KV store, RMSNorm, the
 * vector exp with its sum (attention's softmax and the sampler's) and GeGLU. Compiled with -mavx2 -mfma
 * -mf16c for this file only; only the AVX2 and AVX-512 kernel tables of kernels/ops.c hold them. */
#include "kernels/ops_isa.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

float gm_dot_f32_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* f32 -> f16 round to nearest even, as gm_fp32_to_fp16 for finite values */
void gm_kv_store_f16_avx2(uint16_t *dst, const float *src, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = (uint16_t)_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

void gm_axpy_f32_avx2(float *y, float a, const float *x, int n) {
    const __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}
/* RMSNorm: the sum of squares in double (as gm_rmsnorm), four 4-lane accumulators over 16 floats */
void gm_rmsnorm_avx2(float *y, const float *x, const float *w, int n, float eps) {
    __m256d s[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++) {
            const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k));
            s[k] = _mm256_fmadd_pd(a, a, s[k]);
        }
    const __m256d t = _mm256_add_pd(_mm256_add_pd(s[0], s[1]), _mm256_add_pd(s[2], s[3]));
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    for (; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    const __m256 vr = _mm256_set1_ps(r);
    i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vr), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = x[i] * r * w[i];
}

/* exp(x) for x in [-87, 88]: x = n ln2 + r (ln2 split in two for an exact n ln2), e^r by a degree-6
 * polynomial (|r| <= ln2/2, error about 1 ulp), scaled by 2^n through the exponent bits. */
static inline __m256 exp_avx2(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* Softmax numerators (attention's chunks, the sampler's vocabulary): s[j] = exp(s[j] - mx) by exp_avx2,
 * exactly 0 below -87 (masked keys are -inf), and their sum in double (two 4-lane accumulators, then the
 * tail lanes in order). Each element depends on itself and mx only; the sum on the chunk, which prefill
 * and decode cut alike. */
double gm_exp_sum_avx2(float *s, int n, float mx) {
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0;
    }
    const __m256 m = _mm256_set1_ps(mx), lo = _mm256_set1_ps(-87.0f);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int j = 0;
    for (; j < n; j += 8) {
        float tmp[8];
        const int k = n - j < 8 ? n - j : 8;
        __m256 x;
        if (k == 8) {
            x = _mm256_loadu_ps(s + j);
        } else { /* the tail through the same vector code, padded with -inf (-> 0) */
            for (int i = 0; i < 8; i++) tmp[i] = i < k ? s[j + i] : -INFINITY;
            x = _mm256_loadu_ps(tmp);
        }
        x = _mm256_sub_ps(x, m);
        const __m256 e = _mm256_and_ps(exp_avx2(x), _mm256_cmp_ps(x, lo, _CMP_GE_OQ));
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        if (k == 8) {
            _mm256_storeu_ps(s + j, e);
        } else {
            _mm256_storeu_ps(tmp, e);
            memcpy(s + j, tmp, (size_t)k * sizeof *s);
        }
    }
    const __m256d t = _mm256_add_pd(s0, s1);
    const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

/* gelu_tanh(g) * u with 0.5 (1 + tanh(z)) = 1 / (1 + exp(-2z)): no cancellation for negative z. */
static inline __m256 geglu8(__m256 g, __m256 u) {
    const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    const __m256 z = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f),
                                   _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
    const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp_avx2(z));
    return _mm256_mul_ps(_mm256_div_ps(g, den), u);
}

void gm_geglu_avx2(float *gate, const float *up, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(gate + i, geglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
    if (i < n) { /* the tail through the same vector code: every element gets the same arithmetic */
        float g[8] = {0}, u[8] = {0};
        memcpy(g, gate + i, (size_t)(n - i) * sizeof *g);
        memcpy(u, up + i, (size_t)(n - i) * sizeof *u);
        _mm256_storeu_ps(g, geglu8(_mm256_loadu_ps(g), _mm256_loadu_ps(u)));
        memcpy(gate + i, g, (size_t)(n - i) * sizeof *g);
    }
}
#else
/* Not an x86-64 AVX2 build of this file: the scalar loops (never selected by ops.c there). */
float gm_dot_f32_avx2(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void gm_kv_store_f16_avx2(uint16_t *dst, const float *src, int n) {
    for (int i = 0; i < n; i++) dst[i] = gm_fp32_to_fp16(src[i]);
}

void gm_axpy_f32_avx2(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

void gm_geglu_avx2(float *gate, const float *up, int n) { gm_geglu(gate, up, n); }

double gm_exp_sum_avx2(float *s, int n, float mx) {
    double sum = 0.0;
    for (int j = 0; j < n; j++) sum += s[j] = mx == -INFINITY ? 0.0f : expf(s[j] - mx);
    return sum;
}
void gm_rmsnorm_avx2(float *y, const float *x, const float *w, int n, float eps) { gm_rmsnorm(y, x, w, n, eps); }
#endif
