/* kernels/ops_avx512.c — AVX-512 versions of the small operators of kernels/ops.h (RMSNorm). Compiled with
 * -mavx512f for this file only; only the AVX-512 kernel table of kernels/ops.c holds them. */
#include "kernels/ops_isa.h"

#include <math.h>

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

/* sum of squares in double (8 lanes, two chains), then y = (x * r) * w in float as the scalar code */
void gm_rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps) {
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i)), b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        s0 = _mm512_fmadd_pd(a, a, s0);
        s1 = _mm512_fmadd_pd(b, b, s1);
    }
    double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    const __m512 vr = _mm512_set1_ps(r);
    i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vr), _mm512_loadu_ps(w + i)));
    for (; i < n; i++) y[i] = x[i] * r * w[i];
}
#else
void gm_rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps) { gm_rmsnorm(y, x, w, n, eps); }
#endif
