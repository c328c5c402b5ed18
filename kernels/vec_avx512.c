/* kernels/vec_avx512.c — decode (one token) dot products over the standard block layouts using
 * AVX-512 VL/BW mask registers and VNNI on 256-bit vectors: the high bits of Q5_0 come straight
 * from the qh word as a byte mask, and vpdpbusd replaces maddubs + madd. Same contract as the
 * AVX2 kernels (kernels/vec_avx2.c), tested against the scalar reference. */
#include "kernels/gemm.h"
#include "kernels/pack.h"

#include <string.h>

#include "kernels/cpu.h"
#include "quant/blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__)
#include <immintrin.h>

#include "kernels/x86_common.h"

/* 4-byte group sums of w * a for signed w, |w| <= 127 */
static inline __m256i dot_s8(__m256i w, __m256i a) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q8_0 *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= n / 32; i += 2) { /* two independent chains hide the FMA latency */
        const __m256i p0 = dot_s8(_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 =
            dot_s8(_mm256_loadu_si256((const __m256i *)x[i + 1].qs), _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), acc1);
    }
    for (; i < n / 32; i++) {
        const __m256i p = dot_s8(_mm256_loadu_si256((const __m256i *)x[i].qs), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
    }
    *s = hsum8(_mm256_add_ps(acc0, acc1));
}

static inline __m256i q5_0_codes(const gm_block_q5_0 *b) { /* signed codes - 16 .. 15 */
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    const __m256i v = nibbles(b->qs);
    return _mm256_mask_sub_epi8(v, (__mmask32)~qh, v, _mm256_set1_epi8(16));
}

static void dot_q5_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q5_0 *x = w;
    const gm_block_q8_0 *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= n / 32; i += 2) {
        const __m256i p0 = dot_s8(q5_0_codes(&x[i]), _mm256_loadu_si256((const __m256i *)y[i].qs));
        const __m256i p1 = dot_s8(q5_0_codes(&x[i + 1]), _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(h2f(x[i + 1].d) * h2f(y[i + 1].d)), acc1);
    }
    for (; i < n / 32; i++) {
        const __m256i p = dot_s8(q5_0_codes(&x[i]), _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d)), acc0);
    }
    *s = hsum8(_mm256_add_ps(acc0, acc1));
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

/* Q4_K: unsigned nibbles times signed activations is vpdpbusd's native form; the 6-bit scales
 * multiply the 8 lanes of each sub-block in 32-bit integers (exact: |lane| < 2^14 * 63). */
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
            const __m256i plo = _mm256_dpbusd_epi32(_mm256_setzero_si256(), lo,
                                                    _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c)));
            const __m256i phi = _mm256_dpbusd_epi32(_mm256_setzero_si256(), hi,
                                                    _mm256_loadu_si256((const __m256i *)(y[i].qs + 64 * c + 32)));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(plo, _mm256_set1_epi32(sc[2 * c])));
            isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(phi, _mm256_set1_epi32(sc[2 * c + 1])));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(h2f(x[i].d) * y[i].d), acc);
        mins += h2f(x[i].dmin) * y[i].d * (float)msum;
    }
    *s = hsum8(acc) - mins;
}


/* ---- dots against a token prepared by gm_avx512_prep (kernels/gemm.h layout: codes a, per-lane
 * scales sa, per-lane integer offsets init). Two weight blocks fill one 512-bit vector; the weight
 * code offset is folded into vpdpbusd's accumulator input (init), so each 64 codes cost one dpbusd,
 * one convert and one FMA. */

typedef struct {
    const int8_t *a;
    const float *sa;
    const int32_t *init;
} tok_ptrs;

static inline tok_ptrs tok_of(const void *tok, int64_t n) {
    const int64_t np = (n + 63) / 64 * 64;
    const char *p = tok;
    return (tok_ptrs){(const int8_t *)p, (const float *)(p + np), (const int32_t *)(p + 2 * np)};
}

/* f16 scales of blocks 0 and 1 -> 8 lanes each */
static inline __m512 two_scales(uint16_t d0, uint16_t d1) {
    const __m512 d = _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)d0 | (uint32_t)d1 << 16))));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), d);
}

/* Q8_0 weights: codes w ^ 0x80 are unsigned; init holds -128 * (lane sum of a). */
static void tok_dot_q8_0(int64_t n, float *s, const void *w, const void *tok) {
    const gm_block_q8_0 *x = w;
    const tok_ptrs t = tok_of(tok, n);
    const int64_t nb = n / 32;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        __m512i q = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[b].qs));
        q = _mm512_inserti64x4(q, _mm256_loadu_si256((const __m256i *)x[b + 1].qs), 1);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_loadu_si512(t.init + 8 * b), _mm512_xor_si512(q, flip),
                                              _mm512_loadu_si512(t.a + 32 * b));
        const __m512 sc = _mm512_mul_ps(two_scales(x[b].d, x[b + 1].d), _mm512_loadu_ps(t.sa + 8 * b));
        if (b & 2) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc1);
        else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc0);
    }
    if (b < nb) { /* odd block count: the last block alone in the low half */
        const __m512i q = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[b].qs));
        const __m512i p = _mm512_maskz_dpbusd_epi32(0x00FF, _mm512_loadu_si512(t.init + 8 * b), _mm512_xor_si512(q, flip),
                                                    _mm512_loadu_si512(t.a + 32 * b));
        const __m512 sc = _mm512_mul_ps(two_scales(x[b].d, 0), _mm512_loadu_ps(t.sa + 8 * b));
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc0);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* Q5_0 weights: one masked load covers two 22-byte blocks; vpermb spreads the 16 nibble bytes of
 * each block over its 32 lanes (low nibbles first, as the element order), the qh words become one
 * 64-bit mask that sets bit 4. Codes are unsigned 0..31; init holds -16 * (lane sum of a). */
__attribute__((target("avx512vbmi"))) static void tok_dot_q5_0(int64_t n, float *s, const void *w, const void *tok) {
    const gm_block_q5_0 *x = w;
    const tok_ptrs t = tok_of(tok, n);
    const int64_t nb = n / 32;
    const unsigned char *base = w;
    /* lane i < 32: byte 6 + i % 16 of block 0; lane i >= 32: byte 28 + i % 16 (block 1 at +22) */
    const __m512i idx = _mm512_set_epi8(43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28,
                                        43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28,
                                        21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                        21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6);
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    const __mmask64 hi_lanes = 0xFFFF0000FFFF0000ull;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += 2) {
        const bool pair = b + 1 < nb;
        const __m512i v = _mm512_maskz_loadu_epi8(pair ? (1ull << 44) - 1 : (1ull << 22) - 1, base + 22 * b);
        const __m512i t0 = _mm512_permutexvar_epi8(idx, v);
        const __m512i c = _mm512_and_si512(_mm512_mask_blend_epi8(hi_lanes, t0, _mm512_srli_epi16(t0, 4)), m4);
        uint32_t qh0, qh1 = 0;
        memcpy(&qh0, x[b].qh, 4);
        if (pair) memcpy(&qh1, x[b + 1].qh, 4);
        const __m512i u = _mm512_mask_add_epi8(c, (__mmask64)((uint64_t)qh0 | (uint64_t)qh1 << 32), c, b4);
        __m512i p = _mm512_dpbusd_epi32(_mm512_loadu_si512(t.init + 8 * b), u, _mm512_loadu_si512(t.a + 32 * b));
        if (!pair) p = _mm512_maskz_mov_epi32(0x00FF, p);
        const __m512 sc = _mm512_mul_ps(two_scales(x[b].d, pair ? x[b + 1].d : 0), _mm512_loadu_ps(t.sa + 8 * b));
        if (b & 2) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc1);
        else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), sc, acc0);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* Q5_0x16 weights (kernels/pack.h): per pair one broadcast load, one variable shift and one and give
 * the 64 low-4-bit codes, one 64-bit load the fifth-bit mask; the 16 scales of a group are converted
 * once and multiplied by the token's block scales (sab), then each pair picks its two. Same
 * integer and float operations, in the same order, as tok_dot_q5_0: bit-identical results. */
static void tok_dot_q5_0x16(int64_t n, float *s, const void *w, const void *tok) {
    const tok_ptrs t = tok_of(tok, n);
    const float *sab = (const float *)((const char *)tok + gm_avx512_qtok_bytes(n));
    const uint8_t *p = w;
    const int64_t nb = n / 32, npair = nb / 2;
    const __m512i pick0 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), two = _mm512_set1_epi32(2);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (int64_t p0 = 0; p0 < npair; p0 += 8) {
        const gm_q5_0x16_group G = gm_q5_0x16_group_at(npair, p0);
        const __mmask16 m = (__mmask16)((1u << (2 * G.gp)) - 1);
        const __m512 d = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p + G.d));
        const __m512 ds = _mm512_mul_ps(d, _mm512_maskz_loadu_ps(m, sab + 2 * p0));
        __m512i pick = pick0;
        for (int64_t k = 0; k < G.gp; k++) {
            const int64_t b = 2 * (p0 + k);
            const __m512i u = q5_0x16_pair_codes(p + G.qs + 32 * k, p + G.qh + 8 * k);
            const __m512i pd = _mm512_dpbusd_epi32(_mm512_loadu_si512(t.init + 8 * b), u, _mm512_loadu_si512(t.a + 32 * b));
            const __m512 sc = _mm512_permutexvar_ps(pick, ds);
            pick = _mm512_add_epi32(pick, two);
            if (b & 2) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pd), sc, acc1);
            else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pd), sc, acc0);
        }
    }
    if (nb & 1) { /* the last block, in file layout, alone in the low half (as tok_dot_q5_0) */
        const int64_t b = nb - 1;
        const gm_block_q5_0 *x = (const gm_block_q5_0 *)(p + 44 * npair);
        uint32_t qh;
        memcpy(&qh, x->qh, 4);
        const __m256i v = nibbles(x->qs);
        const __m512i u = _mm512_castsi256_si512(_mm256_mask_add_epi8(v, qh, v, _mm256_set1_epi8(16)));
        const __m512i pd = _mm512_maskz_mov_epi32(
            0x00FF, _mm512_dpbusd_epi32(_mm512_loadu_si512(t.init + 8 * b), u, _mm512_loadu_si512(t.a + 32 * b)));
        const __m512 sc = _mm512_mul_ps(two_scales(x->d, 0), _mm512_loadu_ps(t.sa + 8 * b));
        if (b & 2) acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pd), sc, acc1);
        else acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pd), sc, acc0);
    }
    *s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* ---- K-quants against a Q8_K-prepared token: sa is one value per 256 codes, so the per-sub-block
 * integer scales multiply vpdpbusd's lanes exactly in int32 and one FMA per 256 codes remains. */

/* 32 code bytes -> 64 lanes: the bytes in both halves, the high half shifted right by `hs` bits
 * (16-bit shifts; the caller masks each byte) */
static inline __m512i both_halves(__m256i q, int hs) {
    const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
    return _mm512_srlv_epi16(z, _mm512_set_epi64(hs * 0x0001000100010001ll, hs * 0x0001000100010001ll,
                                                 hs * 0x0001000100010001ll, hs * 0x0001000100010001ll, 0, 0, 0, 0));
}

/* int32 lane i of v broadcast by groups: lanes [0, 16) take v[base + i / per] */
static inline __m512i spread(__m512i v, int base, int per) {
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(base), _mm512_srli_epi32(lane, per == 8 ? 3 : 2));
    return _mm512_permutexvar_epi32(idx, v);
}

/* Q4_K: 6-bit scales sc_j (8 lanes each) and mins mn_j of the 8 sub-blocks, unpacked from the 12
 * scale bytes with 32-bit word operations (same values as gm_k4_scale_min). */
static inline __m512i k4_sc_mn(const uint8_t *s12) { /* int32 lanes: sc0..sc7, mn0..mn7 */
    uint32_t w0, w1, w2;
    memcpy(&w0, s12, 4);
    memcpy(&w1, s12 + 4, 4);
    memcpy(&w2, s12 + 8, 4);
    const uint32_t sc_lo = w0 & 0x3f3f3f3fu, mn_lo = w1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
    const uint32_t mn_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
    return _mm512_cvtepu8_epi32(_mm_set_epi32((int)mn_hi, (int)mn_lo, (int)sc_hi, (int)sc_lo));
}

static void tok_dot_q4_K(int64_t n, float *s, const void *w, const void *tok) {
    const gm_block_q4_K *x = w;
    const tok_ptrs t = tok_of(tok, n);
    const float *t16 = (const float *)((const char *)tok + 3 * ((n + 63) / 64 * 64));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc = _mm512_setzero_ps(), macc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const __m512i sm = k4_sc_mn(x[i].scales);
        __m512i isum = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            const __m512i u = _mm512_and_si512(both_halves(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c)), 4), m4);
            const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_loadu_si512(t.a + 256 * i + 64 * c));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p, spread(sm, 2 * c, 8)));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(h2f(x[i].d) * t.sa[64 * i]), acc);
        /* mins: dmin * mn_j times the 16-code sums (t16 already carries the token scale) */
        const __m512 mg = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(
            _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8), sm));
        macc = _mm512_fmadd_ps(_mm512_mul_ps(mg, _mm512_set1_ps(h2f(x[i].dmin))), _mm512_loadu_ps(t16 + 16 * i), macc);
    }
    *s = _mm512_reduce_add_ps(acc) - _mm512_reduce_add_ps(macc);
}

/* Q6_K: per half of a block, 64 ql bytes give the low nibbles of two 64-code chunks and 32 qh bytes
 * their 2 high bits; codes are unsigned 0..63, init holds -32 * (lane sum of a); the signed 8-bit
 * scales cover 16 codes (4 lanes) each. */
static void tok_dot_q6_K(int64_t n, float *s, const void *w, const void *tok) {
    const gm_block_q6_K *x = w;
    const tok_ptrs t = tok_of(tok, n);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m512i isum = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m512i qh = both_halves(_mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h)), 2);
            const __m512i u0 = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30));
            const __m512i u1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh, m30));
            const int64_t c0 = 4 * i + 2 * h;
            const __m512i p0 = _mm512_dpbusd_epi32(_mm512_loadu_si512(t.init + 16 * c0), u0, _mm512_loadu_si512(t.a + 64 * c0));
            const __m512i p1 =
                _mm512_dpbusd_epi32(_mm512_loadu_si512(t.init + 16 * c0 + 16), u1, _mm512_loadu_si512(t.a + 64 * c0 + 64));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p0, spread(sc, 8 * h, 4)));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p1, spread(sc, 8 * h + 4, 4)));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(h2f(x[i].d) * t.sa[64 * i]), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* Float weights (F16, BF16, F32) take the AVX2 dots, whose f32 activations are what gm_avx512_prep
 * leaves for float types: 256-bit conversions run faster than 512-bit ones on Zen 4 (F16 tg128 one
 * thread 39 vs 36 tok/s), and decode still gets the one-slice-per-thread split and the fused q/k/v
 * and gate/up calls of the token-dot path. */
gm_vec_dot_fn gm_avx512_tok_dot(int type) {
    switch (type) {
    case GM_TYPE_Q8_0: return tok_dot_q8_0;
    case GM_TYPE_Q5_0: return gm_cpu_features_get()->avx512vbmi ? tok_dot_q5_0 : NULL;
    case GM_KTYPE_Q5_0X16: return tok_dot_q5_0x16;
    case GM_TYPE_Q4_K: return tok_dot_q4_K;
    case GM_TYPE_Q6_K: return tok_dot_q6_K;
    case GM_TYPE_F16:
    case GM_TYPE_BF16:
    case GM_TYPE_F32: return gm_avx2_vec_dot(type);
    default: return NULL;
    }
}

gm_vec_dot_fn gm_avx512_vec_dot(int type) {
    switch (type) {
    case GM_TYPE_Q8_0: return dot_q8_0;
    case GM_TYPE_Q5_0: return dot_q5_0;
    case GM_TYPE_Q4_0: return dot_q4_0;
    case GM_TYPE_Q4_K: return dot_q4_K;
    default: return NULL;
    }
}

#else

gm_vec_dot_fn gm_avx512_vec_dot(int type) { (void)type; return NULL; }
gm_vec_dot_fn gm_avx512_tok_dot(int type) { (void)type; return NULL; }

#endif
