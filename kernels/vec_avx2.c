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

/* 32 bits -> 32 bytes, 0xFF where the bit is set */
static inline __m256i bits_to_bytes(uint32_t bits) {
    const __m256i v = _mm256_set1_epi32((int)bits);
    const __m256i sh = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                        3, 3, 3, 3, 3, 3);
    const __m256i bytes = _mm256_shuffle_epi8(v, sh);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

/* ------------------------------------------------------------------ R x T tiles
 *
 * Every dot product of this file is one body, instantiated for R weight rows x T tokens (the
 * single-token dot is R = T = 1): the weight blocks are decoded once per tile and each activation
 * block loaded once per tile, and each (row, token) output goes through exactly the f32 operations
 * of the 1 x 1 instance, in the same order. The integer parts are exact, so only the f32 steps have
 * to match: per 32-code block (per 256-code super-block for K-quants) one fmadd of the 8 int32 lanes
 * into an 8-lane accumulator, then hsum8. Tile shapes, the row split and the other tokens of a call
 * therefore never change a result (batch invariance, tests/test_matmul.c). */

#define INL static inline __attribute__((always_inline))
/* tile shapes (rows x tokens) per family, as large as fits the 16 ymm registers without spilling
 * the accumulators (measured: docs/performance.md) */
#ifndef T32_R
#define T32_R 4
#define T32_T 2
#define TK_R 3
#define TK_T 4
#define TF_R 3
#define TF_T 4
#endif
#ifndef TT_MAX
#define TT_MAX 4
#endif
enum { TR = 4, TT = TT_MAX }; /* array bounds: the largest shape */
_Static_assert(T32_R <= TR && T32_T <= TT && TK_R <= TR && TK_T <= TT && TF_R <= TR && TF_T <= TT, "tile bounds");

/* ---- 32-code blocks: Q8_0, Q4_0, Q5_0 (signed codes, sign trick), Q4_1, Q5_1 (unsigned codes + m) */

INL bool signed32(int type) { return type == GM_TYPE_Q8_0 || type == GM_TYPE_Q4_0 || type == GM_TYPE_Q5_0; }

INL size_t wblock_bytes(int type) {
    switch (type) {
    case GM_TYPE_Q8_0: return sizeof(gm_block_q8_0);
    case GM_TYPE_Q4_0: return sizeof(gm_block_q4_0);
    case GM_TYPE_Q5_0: return sizeof(gm_block_q5_0);
    case GM_TYPE_Q4_1: return sizeof(gm_block_q4_1);
    default: return sizeof(gm_block_q5_1);
    }
}

/* block b of a weight row: 32 codes (signed: value / d; Q4_1 / Q5_1: unsigned, value = d code + m) */
INL __m256i codes32(int type, const void *blk, float *d, float *m) {
    switch (type) {
    case GM_TYPE_Q8_0: {
        const gm_block_q8_0 *x = blk;
        *d = h2f(x->d);
        return _mm256_loadu_si256((const __m256i *)x->qs);
    }
    case GM_TYPE_Q4_0: {
        const gm_block_q4_0 *x = blk;
        *d = h2f(x->d);
        return _mm256_sub_epi8(nibbles(x->qs), _mm256_set1_epi8(8));
    }
    case GM_TYPE_Q5_0: {
        const gm_block_q5_0 *x = blk;
        uint32_t qh;
        memcpy(&qh, x->qh, 4);
        *d = h2f(x->d);
        /* code - 16 = nibble - 16 + 16 * bit = nibble | (bit ? 0 : 0xF0) as int8 */
        return _mm256_or_si256(nibbles(x->qs), _mm256_andnot_si256(bits_to_bytes(qh), _mm256_set1_epi8((char)0xF0)));
    }
    case GM_TYPE_Q4_1: {
        const gm_block_q4_1 *x = blk;
        *d = h2f(x->d), *m = h2f(x->m);
        return nibbles(x->qs);
    }
    default: {
        const gm_block_q5_1 *x = blk;
        uint32_t qh;
        memcpy(&qh, x->qh, 4);
        *d = h2f(x->d), *m = h2f(x->m);
        return _mm256_or_si256(nibbles(x->qs), _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(16)));
    }
    }
}

/* an f16 (the scale d, first field of every 32-code block and of Q8_0 / Q8_1) in all 8 lanes: a
 * broadcast load and one conversion (h2f then a broadcast takes three) */
INL __m256 h2f8(const void *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16((short)h));
}

/* Rows decoded once for many tiles (prefill): per row, for its nb blocks, the maddubs operands u[nb][32]
 * (|code| for signed types, the code otherwise), the signed codes q[nb][32], d[nb] and m[nb] as f32 */
INL size_t pre32_bytes(int64_t n) { return ((size_t)(n / 32) * 72 + 31) / 32 * 32; } /* 32-byte aligned rows */

INL void pre32_row(int type, int64_t n, const char *row, char *pr) {
    const int64_t nb = n / 32;
    for (int64_t i = 0; i < nb; i++) {
        float d, m = 0;
        const __m256i q = codes32(type, row + i * (int64_t)wblock_bytes(type), &d, &m);
        _mm256_store_si256((__m256i *)(pr + 32 * i), signed32(type) ? _mm256_sign_epi8(q, q) : q);
        _mm256_store_si256((__m256i *)(pr + 32 * (nb + i)), q);
        memcpy(pr + 64 * nb + 4 * i, &d, 4);
        memcpy(pr + 68 * nb + 4 * i, &m, 4);
    }
}

/* y[t * ldy + r] = row r . token t; activations Q8_0 (signed types) or Q8_1. P: w holds rows decoded by
 * pre32_row (ws apart) instead of the file's blocks; the same operands, so the same bits. */
INL void tile32(int type, int P, int R, int T, int64_t n, const char *w, size_t ws, const char *a, size_t as,
                float *y, int64_t ldy) {
    const size_t wb = wblock_bytes(type), ab = signed32(type) ? sizeof(gm_block_q8_0) : sizeof(gm_block_q8_1);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[TR][TT];
    float off[TR][TT];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps(), off[r][t] = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        __m256i q[TR], u[TR];
        float dw[TR], mw[TR];
        __m256 dwv[TR];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            if (P) {
                const char *pr = w + r * ws;
                const int64_t nb = n / 32;
                u[r] = _mm256_load_si256((const __m256i *)(pr + 32 * i));
                q[r] = _mm256_load_si256((const __m256i *)(pr + 32 * (nb + i)));
                memcpy(&dw[r], pr + 64 * nb + 4 * i, 4);
                memcpy(&mw[r], pr + 68 * nb + 4 * i, 4);
                dwv[r] = _mm256_set1_ps(dw[r]);
                continue;
            }
            q[r] = codes32(type, w + r * ws + i * wb, &dw[r], &mw[r]);
            dwv[r] = h2f8(w + r * ws + i * wb);
            u[r] = signed32(type) ? _mm256_sign_epi8(q[r], q[r]) : q[r]; /* maddubs' unsigned operand */
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const gm_block_q8_1 *y1 = (const gm_block_q8_1 *)(a + t * as + i * ab);
            const gm_block_q8_0 *y0 = (const gm_block_q8_0 *)(a + t * as + i * ab);
            const __m256i av = _mm256_loadu_si256((const __m256i *)(signed32(type) ? y0->qs : y1->qs));
            const float da = h2f(signed32(type) ? y0->d : y1->d);
            const __m256 dav = h2f8(a + t * as + i * ab);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m256i p16 = _mm256_maddubs_epi16(u[r], signed32(type) ? _mm256_sign_epi8(av, q[r]) : av);
                const __m256i p = _mm256_madd_epi16(p16, ones);
                /* the f32 product dw da: scalar for one pair, else as a vector (the same bits) */
                const __m256 scale = R * T == 1 ? _mm256_set1_ps(dw[r] * da) : _mm256_mul_ps(dwv[r], dav);
                acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[r][t]);
                if (!signed32(type)) off[r][t] += mw[r] * h2f(y1->s);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) y[t * ldy + r] = signed32(type) ? hsum8(acc[r][t]) : hsum8(acc[r][t]) + off[r][t];
}

/* ---- K-quants: 256-code super-blocks of 8 chunks of 32 codes (unsigned), int16 scale per 16 codes.
 * Per super-block, in int32 lanes (exact): isum = sum_c madd(maddubs(codes_c, a_c), scale_c), then
 *   Q4_K / Q5_K: acc = fmadd(cvt(isum), d da, acc); acc = fmadd(cvt(madd(bsums, min pairs)), -(dmin da), acc)
 *   Q6_K (codes 0..63 = value + 32): acc = fmadd(cvt(isum - madd(bsums, 32 scale pairs)), d da, acc). */

typedef struct {
    __m256i mn;         /* Q4_K / Q5_K: min j in both int16 halves of int32 lane j; Q6_K: 32 * scales as int16 */
    __m256i s_lo, s_hi; /* the 16 int16 scales of 16-code groups: 0..7, 8..15 in both 128-bit halves */
    float d, dmin;
} kblock;

INL void kblock_head(int type, const void *blk, kblock *k) {
    __m256i s16;
    if (type == GM_TYPE_Q6_K) {
        const gm_block_q6_K *x = blk;
        k->d = h2f(x->d), k->dmin = 0;
        s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
        k->mn = _mm256_slli_epi16(s16, 5);
    } else {
        const uint8_t *scales = type == GM_TYPE_Q4_K ? ((const gm_block_q4_K *)blk)->scales : ((const gm_block_q5_K *)blk)->scales;
        const uint16_t d = type == GM_TYPE_Q4_K ? ((const gm_block_q4_K *)blk)->d : ((const gm_block_q5_K *)blk)->d;
        const uint16_t dm = type == GM_TYPE_Q4_K ? ((const gm_block_q4_K *)blk)->dmin : ((const gm_block_q5_K *)blk)->dmin;
        /* the 12 bytes of 6-bit scales and mins (gm_k4_scale_min) unpacked four at a time */
        uint32_t a[3];
        memcpy(a, scales, 12);
        const uint64_t sc = (uint64_t)(a[0] & 0x3f3f3f3f) | (uint64_t)((a[2] & 0x0f0f0f0f) | ((a[0] >> 2) & 0x30303030)) << 32;
        const uint64_t mn = (uint64_t)(a[1] & 0x3f3f3f3f) | (uint64_t)(((a[2] >> 4) & 0x0f0f0f0f) | ((a[1] >> 2) & 0x30303030)) << 32;
        const __m256i m = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn));
        const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc));
        k->mn = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));
        s16 = _mm256_or_si256(v, _mm256_slli_epi32(v, 16)); /* one scale per 32 codes: both 16-groups */
        k->d = h2f(d), k->dmin = h2f(dm);
    }
    k->s_lo = _mm256_permute2x128_si256(s16, s16, 0x00);
    k->s_hi = _mm256_permute2x128_si256(s16, s16, 0x11);
}

/* chunk c (elements 32c .. 32c + 31) of a K-quant block: unsigned codes, and its int16 scale vector
 * (groups 2c in the low eight int16 lanes, 2c + 1 in the high eight: one in-lane byte shuffle) */
INL __m256i kchunk(int type, const void *blk, const kblock *k, int c, __m256i *scv) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const int g = 4 * (c % 4); /* byte offset of group 2c within its 128-bit half */
    *scv = _mm256_shuffle_epi8(c < 4 ? k->s_lo : k->s_hi,
                               _mm256_set_m128i(_mm_set1_epi16((short)((g + 3) << 8 | (g + 2))),
                                                _mm_set1_epi16((short)((g + 1) << 8 | g))));
    if (type == GM_TYPE_Q6_K) {
        const gm_block_q6_K *x = blk;
        const int h = c / 4, kk = c % 4; /* ql: 64 bytes per half; low nibbles for kk 0, 1, high for 2, 3 */
        const __m256i ql = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32 * (kk & 1)));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        const __m256i lo = kk < 2 ? _mm256_and_si256(ql, m4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
        /* bits 2kk, 2kk + 1 of each qh byte to bits 4, 5 */
        const __m256i sh = kk == 0 ? _mm256_slli_epi16(qh, 4) : kk == 1 ? _mm256_slli_epi16(qh, 2) : kk == 2 ? qh : _mm256_srli_epi16(qh, 2);
        return _mm256_or_si256(lo, _mm256_and_si256(sh, _mm256_set1_epi8(0x30)));
    }
    const uint8_t *qs = type == GM_TYPE_Q4_K ? ((const gm_block_q4_K *)blk)->qs : ((const gm_block_q5_K *)blk)->qs;
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * (c / 2)));
    __m256i v = c % 2 ? _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) : _mm256_and_si256(q, m4);
    if (type == GM_TYPE_Q5_K) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)((const gm_block_q5_K *)blk)->qh);
        const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(qh, c), _mm256_set1_epi8(1));
        v = _mm256_or_si256(v, _mm256_slli_epi16(bit, 4));
    }
    return v;
}

INL size_t kblock_bytes(int type) {
    return type == GM_TYPE_Q4_K ? sizeof(gm_block_q4_K) : type == GM_TYPE_Q5_K ? sizeof(gm_block_q5_K) : sizeof(gm_block_q6_K);
}

/* K-quant rows decoded once for many tiles (prefill): per super-block the 8 chunks' codes (256 bytes), their
 * scale vectors (256), mn (32), d and dmin as f32 (padded to 32): PREK bytes */
enum { PREK = 576 };

INL void preK_row(int type, int64_t n, const char *row, char *pr) {
    for (int64_t i = 0; i < n / 256; i++) {
        const char *blk = row + i * (int64_t)kblock_bytes(type);
        char *pb = pr + i * PREK;
        kblock k;
        kblock_head(type, blk, &k);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            __m256i scv;
            _mm256_store_si256((__m256i *)(pb + 32 * c), kchunk(type, blk, &k, c, &scv));
            _mm256_store_si256((__m256i *)(pb + 256 + 32 * c), scv);
        }
        _mm256_store_si256((__m256i *)(pb + 512), k.mn);
        memcpy(pb + 544, &k.d, 4);
        memcpy(pb + 548, &k.dmin, 4);
    }
}

/* P: w holds rows decoded by preK_row (ws apart); the same operands, so the same bits */
INL void tileK(int type, int P, int R, int T, int64_t n, const char *w, size_t ws, const char *a, size_t as,
               float *y, int64_t ldy) {
    const size_t wb = P ? PREK : kblock_bytes(type);
    __m256 acc[TR][TT];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        kblock k[TR];
        __m256i isum[TR][TT];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const char *pb = w + r * ws + i * wb;
            if (P) {
                k[r].mn = _mm256_load_si256((const __m256i *)(pb + 512));
                memcpy(&k[r].d, pb + 544, 4);
                memcpy(&k[r].dmin, pb + 548, 4);
            } else {
                kblock_head(type, pb, &k[r]);
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) isum[r][t] = _mm256_setzero_si256();
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            __m256i u[TR], scv[TR];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const char *pb = w + r * ws + i * wb;
                if (P) {
                    u[r] = _mm256_load_si256((const __m256i *)(pb + 32 * c));
                    scv[r] = _mm256_load_si256((const __m256i *)(pb + 256 + 32 * c));
                } else {
                    u[r] = kchunk(type, pb, &k[r], c, &scv[r]);
                }
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const gm_block_q8_K *yb = (const gm_block_q8_K *)(a + t * as) + i;
                const __m256i av = _mm256_loadu_si256((const __m256i *)(yb->qs + 32 * c));
#pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    isum[r][t] = _mm256_add_epi32(isum[r][t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], av), scv[r]));
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const gm_block_q8_K *yb = (const gm_block_q8_K *)(a + t * as) + i;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)yb->bsums);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                const __m256i mt = _mm256_madd_epi16(bs, k[r].mn);
                if (type == GM_TYPE_Q6_K) {
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r][t], mt)),
                                                _mm256_set1_ps(k[r].d * yb->d), acc[r][t]);
                } else {
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_set1_ps(k[r].d * yb->d), acc[r][t]);
                    acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mt), _mm256_set1_ps(-(k[r].dmin * yb->d)), acc[r][t]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) y[t * ldy + r] = hsum8(acc[r][t]);
}

/* ---- float weights (F32, F16, BF16) over f32 activations: one accumulator per (row, token) over
 * 8-element steps, a scalar tail. One accumulator lets a 3 x 4 tile keep its 12 sums in registers;
 * decode runs DECF_R rows per pass so the FMA latency chains of several rows overlap. */

static inline __m256 bf16x8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

INL __m256 wf8(int type, const char *row, int64_t i) {
    if (type == GM_TYPE_F32) return _mm256_loadu_ps((const float *)row + i);
    if (type == GM_TYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    return bf16x8((const uint16_t *)row + i);
}

INL float wf1(int type, const char *row, int64_t i) {
    if (type == GM_TYPE_F32) return ((const float *)row)[i];
    if (type == GM_TYPE_F16) return gm_fp16_to_fp32(((const uint16_t *)row)[i]);
    return gm_bf16_to_fp32(((const uint16_t *)row)[i]);
}

/* pf: for decode, the R rows after these, prefetched at the rate these are read (NULL: none) */
INL void tileF(int type, int R, int T, int64_t n, const char *w, size_t ws, const char *a, size_t as, float *y,
               int64_t ldy, const char *pf) {
    const int eb = type == GM_TYPE_F32 ? 4 : 2;
    __m256 acc[TR][TT];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        if (pf)
            for (int k = 0; k < 8 * eb * R; k += 64) _mm_prefetch(pf + i * eb * R + k, _MM_HINT_T0);
        __m256 wv[TR];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = wf8(type, w + r * ws, i);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m256 x = _mm256_loadu_ps((const float *)(a + t * as) + i);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], x, acc[r][t]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const float *x = (const float *)(a + t * as);
            float s = hsum8(acc[r][t]);
            for (int64_t j = i; j < n; j++) s += wf1(type, w + r * ws, j) * x[j];
            y[t * ldy + r] = s;
        }
}

/* ---- instances: full tiles, a row group for one token (decode), one row for a token block, 1 x 1 */

INL void tile_any(int type, int P, int R, int T, int64_t n, const char *w, size_t ws, const char *a, size_t as,
                  float *y, int64_t ldy) {
    switch (type) {
    case GM_TYPE_Q4_K: case GM_TYPE_Q5_K: case GM_TYPE_Q6_K: tileK(type, P, R, T, n, w, ws, a, as, y, ldy); break;
    case GM_TYPE_F32: case GM_TYPE_F16: case GM_TYPE_BF16: tileF(type, R, T, n, w, ws, a, as, y, ldy, NULL); break;
    default: tile32(type, P, R, T, n, w, ws, a, as, y, ldy); break;
    }
}

/* rows x tokens of any size: tr x tt tiles, tr x 1 for the last tokens, single rows at the end */
INL void tile_rows(int type, int P, int tr, int tt, int64_t n, const char *w, size_t ws, int64_t rows, const char *a,
                   size_t as, int64_t n_tok, float *y, int64_t ldy) {
    int64_t r = 0;
    for (; r + tr <= rows; r += tr) {
        if (!P) /* the file's rows: tr short streams side by side, prefetched two groups ahead (as decode) */
            for (size_t k = 0; k < (size_t)tr * ws; k += 64) _mm_prefetch(w + (r + 2 * tr) * ws + k, _MM_HINT_T0);
        int64_t t = 0;
        for (; t + tt <= n_tok; t += tt) tile_any(type, P, tr, tt, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy);
        for (; t < n_tok; t++) tile_any(type, P, tr, 1, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy);
    }
    for (; r < rows; r++) {
        int64_t t = 0;
        for (; t + tt <= n_tok; t += tt) tile_any(type, P, 1, tt, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy);
        for (; t < n_tok; t++) tile_any(type, P, 1, 1, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy);
    }
}

/* Fewer tokens than a tile (decode): DEC_R x 1 from the file's blocks (DECF_R for float rows), several
 * rows so their FMA chains overlap; the rows two passes ahead are prefetched, since the hardware
 * prefetcher loses track of several short row streams read side by side (docs/performance.md). Many
 * tokens: the rows decoded once into an L1 buffer (PRE_BYTES) for all the tokens, then tiles over that
 * (the decode, 12 ops per Q5_0 block and row, was a third of the tile's work when repeated per 4 tokens). */
#ifndef DEC_R
#define DEC_R 2
#endif
#define DECF_R 4
enum { PRE_BYTES = 24576 };

/* rows by R (a constant) for each of n_tok < a tile's tokens; returns the rows done (the rest < R). Float
 * rows prefetch the next R rows spread over the pass (a burst of 4 F16 rows, 80 lines, lost 30% of the
 * decode speed); quantized rows prefetch the rows two passes ahead in one burst (docs/performance.md) */
INL int64_t decode_pass(int type, int R, int64_t n, const char *w, size_t ws, int64_t rows, const char *a, size_t as,
                        int64_t n_tok, float *y, int64_t ldy) {
    const bool fl = type == GM_TYPE_F32 || type == GM_TYPE_F16 || type == GM_TYPE_BF16;
    int64_t r = 0;
    for (; r + R <= rows; r += R) {
        if (!fl)
            for (size_t k = 0; k < (size_t)R * ws; k += 64) _mm_prefetch(w + (r + 2 * R) * ws + k, _MM_HINT_T0);
        for (int64_t t = 0; t < n_tok; t++) {
            if (fl) tileF(type, R, 1, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy, w + (r + R) * ws);
            else tile_any(type, 0, R, 1, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy);
        }
    }
    return r;
}

/* one row of the file into the L1 buffer's form: decoded codes and scales (quantized types, for tiles with
 * P = 1) or f32 values (F16 / BF16: exact, then read as F32 rows) */
INL void pre_row(int type, int64_t n, const char *row, char *dst) {
    if (type == GM_TYPE_Q4_K || type == GM_TYPE_Q5_K || type == GM_TYPE_Q6_K) {
        preK_row(type, n, row, dst);
    } else if (type == GM_TYPE_F16 || type == GM_TYPE_BF16) {
        float *f = (float *)dst;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(f + i, wf8(type, row, i));
        for (; i < n; i++) f[i] = wf1(type, row, i);
    } else {
        pre32_row(type, n, row, dst);
    }
}

INL void tiles(int type, int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as, int64_t n_tok,
               float *y, int64_t ldy) {
    const bool kq = type == GM_TYPE_Q4_K || type == GM_TYPE_Q5_K || type == GM_TYPE_Q6_K;
    const bool fl = type == GM_TYPE_F32 || type == GM_TYPE_F16 || type == GM_TYPE_BF16;
    const int tr = kq ? TK_R : fl ? TF_R : T32_R, tt = kq ? TK_T : fl ? TF_T : T32_T;
    const char *wc = w, *ac = a;
    if (n_tok < tt) {
        const int64_t r = fl ? decode_pass(type, DECF_R, n, wc, ws, rows, ac, as, n_tok, y, ldy)
                             : decode_pass(type, DEC_R, n, wc, ws, rows, ac, as, n_tok, y, ldy);
        tile_rows(type, 0, tr, tt, n, wc + r * ws, ws, rows - r, ac, as, n_tok, y + r, ldy);
        return;
    }
    const size_t prs = kq ? (size_t)(n / 256) * PREK : fl ? (size_t)n * sizeof(float) : pre32_bytes(n);
    int64_t per = prs ? (int64_t)(PRE_BYTES / prs) : 0;
    per -= per % tr;
    if (type == GM_TYPE_F32 || (!fl && n_tok < 2 * tt) || per < tr) {
        tile_rows(type, 0, tr, tt, n, wc, ws, rows, ac, as, n_tok, y, ldy);
        return;
    }
    /* F16 / BF16 rows are converted even for a few tokens: the conversion is one instruction per 8 values */
    _Alignas(32) char buf[PRE_BYTES];
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        const int64_t nr = rows - r0 < per ? rows - r0 : per;
        for (int64_t r = 0; r < nr; r++) pre_row(type, n, wc + (r0 + r) * ws, buf + r * prs);
        tile_rows(fl ? GM_TYPE_F32 : type, 1, tr, tt, n, buf, prs, nr, ac, as, n_tok, y + r0, ldy);
    }
}

#define AVX2_TYPE(name, TYPE)                                                                                   \
    static void dot_##name(int64_t n, float *s, const void *w, const void *a) {                                \
        tile_any(TYPE, 0, 1, 1, n, w, 0, a, 0, s, 1);                                                              \
    }                                                                                                           \
    static void tiles_##name(int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as,      \
                             int64_t n_tok, float *y, int64_t ldy) {                                            \
        tiles(TYPE, n, w, ws, rows, a, as, n_tok, y, ldy);                                                      \
    }
AVX2_TYPE(q8_0, GM_TYPE_Q8_0)
AVX2_TYPE(q4_0, GM_TYPE_Q4_0)
AVX2_TYPE(q5_0, GM_TYPE_Q5_0)
AVX2_TYPE(q4_1, GM_TYPE_Q4_1)
AVX2_TYPE(q5_1, GM_TYPE_Q5_1)
AVX2_TYPE(q4_K, GM_TYPE_Q4_K)
AVX2_TYPE(q5_K, GM_TYPE_Q5_K)
AVX2_TYPE(q6_K, GM_TYPE_Q6_K)
AVX2_TYPE(f32, GM_TYPE_F32)
AVX2_TYPE(f16, GM_TYPE_F16)
AVX2_TYPE(bf16, GM_TYPE_BF16)

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

gm_avx2_tiles_fn gm_avx2_tiles(int type) {
    switch (type) {
    case GM_TYPE_F32: return tiles_f32;
    case GM_TYPE_F16: return tiles_f16;
    case GM_TYPE_BF16: return tiles_bf16;
    case GM_TYPE_Q4_0: return tiles_q4_0;
    case GM_TYPE_Q4_1: return tiles_q4_1;
    case GM_TYPE_Q5_0: return tiles_q5_0;
    case GM_TYPE_Q5_1: return tiles_q5_1;
    case GM_TYPE_Q8_0: return tiles_q8_0;
    case GM_TYPE_Q4_K: return tiles_q4_K;
    case GM_TYPE_Q5_K: return tiles_q5_K;
    case GM_TYPE_Q6_K: return tiles_q6_K;
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
gm_avx2_tiles_fn gm_avx2_tiles(int type) { (void)type; return NULL; }
gm_quant_row_fn gm_avx2_quant_act(int act_type) { (void)act_type; return NULL; }

#endif
