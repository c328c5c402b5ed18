/* kernels/vec_avx2.c — AVX2 + FMA + F16C kernels for float weights (F32, F16, BF16) over f32 activations,
 * the activation quantizers (exactly the scalar reference's bytes), and the per-type tables of the AVX2
 * level (the quantized weight types' kernels are in kernels/qtiles_avx2.c). Built with -mavx2 -mfma -mf16c
 * (CMakeLists.txt); selected only when kernels/cpu.c reports AVX2, FMA and F16C with OS support. */
#include "kernels/gemm.h"

#include <string.h>

#include "quant/blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include "kernels/x86_common.h"

/* ------------------------------------------------------------------ float weights: R x T tiles
 *
 * One body instantiated for R weight rows x T tokens (the single-token dot is R = T = 1): each (row, token)
 * output goes through exactly the f32 operations of the 1 x 1 instance in the same order (one accumulator
 * per (row, token) over 8-element steps, hsum8, a scalar tail), so tile shapes, the row split and the other
 * tokens of a call never change a result (batch invariance, tests/test_matmul.c). One accumulator lets a
 * 3 x 4 tile keep its 12 sums in registers; decode runs DECF_R rows per pass so the FMA latency chains of
 * several rows overlap. */

#define INL static inline __attribute__((always_inline))
#ifndef TF_R
#define TF_R 3
#define TF_T 4
#endif
enum { TR = 4, TT = 4 }; /* array bounds */
_Static_assert(TF_R <= TR && TF_T <= TT, "tile bounds");

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

/* rows x tokens of any size: TF_R x TF_T tiles, TF_R x 1 for the last tokens, single rows at the end */
INL void tile_rows(int type, int64_t n, const char *w, size_t ws, int64_t rows, const char *a, size_t as,
                   int64_t n_tok, float *y, int64_t ldy) {
    int64_t r = 0;
    for (; r + TF_R <= rows; r += TF_R) {
        int64_t t = 0;
        for (; t + TF_T <= n_tok; t += TF_T) tileF(type, TF_R, TF_T, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy, NULL);
        for (; t < n_tok; t++) tileF(type, TF_R, 1, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy, NULL);
    }
    for (; r < rows; r++) {
        int64_t t = 0;
        for (; t + TF_T <= n_tok; t += TF_T) tileF(type, 1, TF_T, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy, NULL);
        for (; t < n_tok; t++) tileF(type, 1, 1, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy, NULL);
    }
}

/* Fewer tokens than a tile (decode): DECF_R rows per pass so their FMA chains overlap, the next DECF_R rows
 * prefetched spread over the pass (a burst of 4 F16 rows, 80 lines, at the start of each pass lost 30% of
 * the decode speed: docs/performance.md). Many tokens: F16 / BF16 rows converted once to f32 into an L1
 * buffer (PRE_BYTES) for all the tokens, then tiles over that; by blocks of ROW_BLOCK rows x TOK_BLOCK
 * tokens so the block's weights stay in L1 while the tokens stream from L2. */
enum { DECF_R = 4, PRE_BYTES = 24576, ROW_BLOCK = 24, TOK_BLOCK = 32 };

INL void tiles_block(int type, int64_t n, const char *w, size_t ws, int64_t rows, const char *a, size_t as,
                     int64_t n_tok, float *y, int64_t ldy) {
    if (n_tok < TF_T) {
        int64_t r = 0;
        for (; r + DECF_R <= rows; r += DECF_R)
            for (int64_t t = 0; t < n_tok; t++)
                tileF(type, DECF_R, 1, n, w + r * ws, ws, a + t * as, as, y + t * ldy + r, ldy, w + (r + DECF_R) * ws);
        tile_rows(type, n, w + r * ws, ws, rows - r, a, as, n_tok, y + r, ldy);
        return;
    }
    const size_t prs = (size_t)n * sizeof(float);
    const int64_t per = (int64_t)(PRE_BYTES / prs) / TF_R * TF_R;
    if (type == GM_TYPE_F32 || per < TF_R) {
        tile_rows(type, n, w, ws, rows, a, as, n_tok, y, ldy);
        return;
    }
    _Alignas(32) float buf[PRE_BYTES / sizeof(float)];
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        const int64_t nr = rows - r0 < per ? rows - r0 : per;
        for (int64_t r = 0; r < nr; r++) {
            const char *row = w + (r0 + r) * ws;
            float *f = buf + r * n;
            int64_t i = 0;
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(f + i, wf8(type, row, i));
            for (; i < n; i++) f[i] = wf1(type, row, i);
        }
        tile_rows(GM_TYPE_F32, n, (const char *)buf, prs, nr, a, as, n_tok, y + r0, ldy);
    }
}

INL void tiles(int type, int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as, int64_t n_tok,
               float *y, int64_t ldy) {
    const char *wc = w, *ac = a;
    for (int64_t rb = 0; rb < rows; rb += ROW_BLOCK) {
        const int64_t nr = rows - rb < ROW_BLOCK ? rows - rb : ROW_BLOCK;
        for (int64_t t = 0; t < n_tok; t += TOK_BLOCK) {
            const int64_t nt = n_tok - t < TOK_BLOCK ? n_tok - t : TOK_BLOCK;
            tiles_block(type, n, wc + rb * ws, ws, nr, ac + t * as, as, nt, y + t * ldy + rb, ldy);
        }
    }
}

#define AVX2_TYPE(name, TYPE)                                                                                   \
    static void dot_##name(int64_t n, float *s, const void *w, const void *a) {                                \
        tileF(TYPE, 1, 1, n, w, 0, a, 0, s, 1, NULL);                                                            \
    }                                                                                                           \
    static void tiles_##name(int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as,      \
                             int64_t n_tok, float *y, int64_t ldy) {                                            \
        tiles(TYPE, n, w, ws, rows, a, as, n_tok, y, ldy);                                                      \
    }
AVX2_TYPE(f32, GM_TYPE_F32)
AVX2_TYPE(f16, GM_TYPE_F16)
AVX2_TYPE(bf16, GM_TYPE_BF16)

gm_vec_dot_fn gm_avx2_vec_dot(int type) {
    switch (type) {
    case GM_TYPE_F32: return dot_f32;
    case GM_TYPE_F16: return dot_f16;
    case GM_TYPE_BF16: return dot_bf16;
    default: return gm_avx2_qdot(type);
    }
}

gm_avx2_tiles_fn gm_avx2_tiles(int type) {
    switch (type) {
    case GM_TYPE_F32: return tiles_f32;
    case GM_TYPE_F16: return tiles_f16;
    case GM_TYPE_BF16: return tiles_bf16;
    default: return gm_avx2_qtiles(type);
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
