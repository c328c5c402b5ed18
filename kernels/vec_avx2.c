/* kernels/vec_avx2.c — AVX2 + FMA + F16C dot products over the standard block layouts (drop-in
 * replacements for the scalar vec_dot of quant/) and activation quantizers that produce exactly
 * the scalar reference's bytes. Built with -mavx2 -mfma -mf16c (CMakeLists.txt); selected only
 * when kernels/cpu.c reports AVX2, FMA and F16C with OS support. */
#include "kernels/gemm.h"

#include <string.h>

#include "quant/blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "kernels/x86_common.h"

/* sum over 4-byte groups of w * a, both signed (|w| <= 127 so maddubs cannot saturate) */
static inline __m256i dot_s8(__m256i w, __m256i a) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set */
static inline __m256i bits_to_bytes(uint32_t bits) {
    const __m256i v = _mm256_set1_epi32((int)bits);
    const __m256i sh = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                        3, 3, 3, 3, 3, 3);
    const __m256i bytes = _mm256_shuffle_epi8(v, sh);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q8_0 *x = w, *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256i p = dot_s8(_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
    }
    *s = hsum8(acc);
}

static void dot_q4_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q4_0 *x = w;
    const gm_block_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256i q = _mm256_sub_epi8(nibbles(x[i].qs), _mm256_set1_epi8(8));
        const __m256i p = dot_s8(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
    }
    *s = hsum8(acc);
}

static void dot_q5_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q5_0 *x = w;
    const gm_block_q8_0 *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        /* code - 16 = nibble - 16 + 16 * bit = nibble | (bit ? 0 : 0xF0) as int8 */
        const __m256i hi = _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8((char)0xF0));
        const __m256i q = _mm256_or_si256(nibbles(x[i].qs), hi);
        const __m256i p = dot_s8(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
    }
    *s = hsum8(acc);
}

/* Q4_1 / Q5_1: codes unsigned (<= 31), maddubs(code, a) is exact; offset m times Q8_1's s */
static void dot_q4_1(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q4_1 *x = w;
    const gm_block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float off = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256i p16 = _mm256_maddubs_epi16(nibbles(x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
        off += h2f(x[i].m) * h2f(y[i].s);
    }
    *s = hsum8(acc) + off;
}

static void dot_q5_1(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q5_1 *x = w;
    const gm_block_q8_1 *y = a;
    __m256 acc = _mm256_setzero_ps();
    float off = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        const __m256i q = _mm256_or_si256(nibbles(x[i].qs), _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
        const __m256i p16 = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc);
        off += h2f(x[i].m) * h2f(y[i].s);
    }
    *s = hsum8(acc) + off;
}

/* Q4_K: per 64 codes, two sub-blocks with 6-bit scales; mins through Q8_K's bsums */
static void dot_q4_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q4_K *x = w;
    const gm_block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int sc[8], mn[8], msum = 0;
        for (int j = 0; j < 8; j++) {
            gm_k4_scale_min(j, x[i].scales, &sc[j], &mn[j]);
            msum += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c + 32)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, _mm256_set1_epi16((short)sc[2 * c])));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, _mm256_set1_epi16((short)sc[2 * c + 1])));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(x[i].d) * y[i].d), acc);
        mins += h2f(x[i].dmin) * y[i].d * (float)msum;
    }
    *s = hsum8(acc) - mins;
}

static void dot_q5_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q5_K *x = w;
    const gm_block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int sc[8], mn[8], msum = 0;
        for (int j = 0; j < 8; j++) {
            gm_k4_scale_min(j, x[i].scales, &sc[j], &mn[j]);
            msum += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
            const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h0, 4));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), _mm256_slli_epi16(h1, 4));
            const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c)));
            const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c + 32)));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(plo, _mm256_set1_epi16((short)sc[2 * c])));
            isum = _mm256_add_epi32(isum, _mm256_madd_epi16(phi, _mm256_set1_epi16((short)sc[2 * c + 1])));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(x[i].d) * y[i].d), acc);
        mins += h2f(x[i].dmin) * y[i].d * (float)msum;
    }
    *s = hsum8(acc) - mins;
}

/* Q6_K: codes 0..63 (maddubs exact: 63 * 127 * 2 < 32767), minus 32 * bsums, 16-code scales */
static void dot_q6_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q6_K *x = w;
    const gm_block_q8_K *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        int off = 0;
        for (int j = 0; j < 16; j++) off += x[i].scales[j] * y[i].bsums[j];
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
            q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                   _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            for (int k = 0; k < 4; k++) {
                const int e = 128 * h + 32 * k; /* first element of these 32 codes */
                const __m256i p16 =
                    _mm256_maddubs_epi16(q[k], _mm256_loadu_si256((const __m256i *)(y[i].qs + e)));
                /* 16-bit lanes 0..7 belong to scale e/16, lanes 8..15 to e/16 + 1 */
                const __m256i scv = _mm256_setr_m128i(_mm_set1_epi16(x[i].scales[e / 16]),
                                                      _mm_set1_epi16(x[i].scales[e / 16 + 1]));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, scv));
            }
        }
        isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(32 * off, 0, 0, 0, 0, 0, 0, 0));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(x[i].d) * y[i].d), acc);
    }
    *s = hsum8(acc);
}

static void dot_f32(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float r = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) r += x[i] * y[i];
    *s = r;
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8)));
        acc0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y + i + 8), acc1);
    }
    float r = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) r += gm_fp16_to_fp32(x[i]) * y[i];
    *s = r;
}

static inline __m256 bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

static void dot_bf16(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(bf16x8(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(bf16x8(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float r = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) r += gm_bf16_to_fp32(x[i]) * y[i];
    *s = r;
}

gm_vec_dot_fn gm_avx2_vec_dot(int type) {
    switch (type) {
    case GM_TYPE_F32: return dot_f32;
    case GM_TYPE_F16: return dot_f16;
    case GM_TYPE_BF16: return dot_bf16;
    case GM_TYPE_Q4_0: return dot_q4_0;
    case GM_TYPE_Q4_1: return dot_q4_1;
    case GM_TYPE_Q5_0: return dot_q5_0;
    case GM_TYPE_Q5_1: return dot_q5_1;
    case GM_TYPE_Q8_0: return dot_q8_0;
    case GM_TYPE_Q4_K: return dot_q4_K;
    case GM_TYPE_Q5_K: return dot_q5_K;
    case GM_TYPE_Q6_K: return dot_q6_K;
    default: return NULL;
    }
}

/* ------------------------------------------------------------------ activation quantizers */

/* 4 x 8 int32 (each within int8 range) -> 32 int8 in order */
static inline __m256i pack32(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline __m256 round_away(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
    const __m256 f = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 m = _mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(m, _mm256_or_ps(sign, _mm256_set1_ps(1.0f))));
}

static inline float hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* one Q8_0 / Q8_1 block: returns the unrounded d, as the scalar quant_block_q8 */
static float q8_block(const float *x, int8_t *qs) {
    const __m256 abs = _mm256_set1_ps(-0.0f);
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(m, _mm256_andnot_ps(abs, v[k]));
    }
    const float d = hmax8(m) / 127;
    const __m256 id = _mm256_set1_ps(d ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[k], id)));
    _mm256_storeu_si256((__m256i *)qs, pack32(q[0], q[1], q[2], q[3]));
    return d;
}

static void quant_q8_0(const float *src, void *dst, int64_t n) {
    gm_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) b[i].d = _cvtss_sh(q8_block(src + 32 * i, b[i].qs), _MM_FROUND_TO_NEAREST_INT);
}

static void quant_q8_1(const float *src, void *dst, int64_t n) {
    gm_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / 32; i++) {
        const float d = q8_block(src + 32 * i, b[i].qs);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += b[i].qs[j];
        b[i].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        b[i].s = _cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}

static void quant_q8_K(const float *src, void *dst, int64_t n) {
    gm_block_q8_K *b = dst;
    const __m256 abs = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / 256; i++) {
        const float *x = src + 256 * i;
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < 256; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(abs, _mm256_loadu_ps(x + j)));
        const float amax = hmax8(m);
        if (!(amax > 0) || !(amax < INFINITY)) { /* the scalar reference's special cases */
            gm_quant_q8_K(x, &b[i], 256);
            continue;
        }
        float max = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(x[j]) == amax) {
                max = x[j];
                break;
            }
        const float iscale = -127.f / max;
        const __m256 vis = _mm256_set1_ps(iscale), lim = _mm256_set1_ps(127.f);
        for (int j = 0; j < 256; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vis), lim));
            _mm256_storeu_si256((__m256i *)(b[i].qs + j), pack32(q[0], q[1], q[2], q[3]));
        }
        for (int j = 0; j < 16; j++) {
            const __m128i q = _mm_loadu_si128((const __m128i *)(b[i].qs + 16 * j));
            const __m256i w = _mm256_madd_epi16(_mm256_cvtepi8_epi16(q), _mm256_set1_epi16(1));
            __m128i s = _mm_add_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            s = _mm_hadd_epi32(s, s);
            s = _mm_hadd_epi32(s, s);
            b[i].bsums[j] = (int16_t)_mm_cvtsi128_si32(s);
        }
        b[i].d = 1 / iscale;
    }
}

gm_quant_row_fn gm_avx2_quant_act(int act_type) {
    switch (act_type) {
    case GM_TYPE_Q8_0: return quant_q8_0;
    case GM_TYPE_Q8_1: return quant_q8_1;
    case GM_TYPE_Q8_K: return quant_q8_K;
    default: return NULL;
    }
}

#else

gm_vec_dot_fn gm_avx2_vec_dot(int type) { (void)type; return NULL; }
gm_quant_row_fn gm_avx2_quant_act(int act_type) { (void)act_type; return NULL; }

#endif
