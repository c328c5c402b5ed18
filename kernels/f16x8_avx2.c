/* kernels/f16x8_avx2.c — AVX2 + FMA + F16C kernels for F16 and BF16 weights in the x8 layouts of
 * kernels/pack.h (eight rows interleaved: for each column k, the eight rows' 16-bit values side by side),
 * over f32 activations.
 *
 * Why a layout of its own: with file rows, a dot product keeps 8 partial sums per (row, token) and both
 * operands stream through the loads (the 3 x 4 tiles of kernels/vec_avx2.c: 7 loads per 12 fmadds, the
 * 8-lane sums folded at the end), well short of the FMA peak (docs/performance.md). Interleaved, one load
 * and one conversion give column k of eight rows, and a broadcast of one activation per token multiplies it
 * into eight rows' sums at once (a register tile of 2 x 8 rows x 6 tokens: 2 loads, 6 broadcasts and 12
 * fmadds per column), with no folding at the end.
 *
 * Arithmetic, the same in every path (decode, prefill, any tile shape, any split of rows or tokens): per
 * (row, token) one f32 sum from 0, s = fma(w[k], x[k], s) for k = 0 .. n - 1 in order. Tests: tests/
 * test_matmul.c (against the float64 reference, and bit for bit across token counts and row splits). */
#include "kernels/gemm.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

#include <stdbool.h>

#define INL static inline __attribute__((always_inline))

enum {
    GMAX = 4, TMAX = 6,  /* tile bounds: G groups of 8 rows x T tokens, G * T <= 12 sums in registers */
    TOK_BLOCK = 64,      /* tokens per pass over the rows: their activations stay in L2 */
};

/* column k of a group: 8 values as f32 */
INL __m256 col8(bool bf16, const uint16_t *p) {
    const __m128i h = _mm_loadu_si128((const __m128i *)p);
    return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
}

/* One tile: G consecutive groups (w: the first group's column 0; gs: values per group) x T tokens
 * (a: token 0's activations, as floats apart). The first rhi of the tile's 8 G rows are stored. */
INL void tile(bool bf16, int G, int T, int64_t n, const uint16_t *w, size_t gs, const float *a, size_t as, float *y,
              int64_t ldy, int rhi) {
    __m256 acc[GMAX][TMAX];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) acc[g][t] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        __m256 wv[GMAX];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) wv[g] = col8(bf16, w + g * gs + 8 * k);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            const __m256 x = _mm256_broadcast_ss(a + t * as + k);
#pragma GCC unroll 4
            for (int g = 0; g < G; g++) acc[g][t] = _mm256_fmadd_ps(wv[g], x, acc[g][t]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 6
        for (int t = 0; t < T; t++) {
            float *yt = y + t * ldy + 8 * g;
            if (rhi >= 8 * (g + 1)) {
                _mm256_storeu_ps(yt, acc[g][t]);
            } else { /* a range that ends inside this group: its rows only */
                float v[8];
                _mm256_storeu_ps(v, acc[g][t]);
                for (int l = 0; l < 8; l++)
                    if (8 * g + l < rhi) yt[l] = v[l];
            }
        }
}

/* G groups x T tokens, dispatched to the inlined shapes */
INL void tile_any(bool bf16, int G, int T, int64_t n, const uint16_t *w, size_t gs, const float *a, size_t as, float *y,
                     int64_t ldy, int rhi) {
#define T_CASES(G)                                                                                                   \
    switch (T) {                                                                                                     \
    case 1: tile(bf16, G, 1, n, w, gs, a, as, y, ldy, rhi); break;                                                   \
    case 2: tile(bf16, G, 2, n, w, gs, a, as, y, ldy, rhi); break;                                                   \
    case 3: tile(bf16, G, 3, n, w, gs, a, as, y, ldy, rhi); break;                                                   \
    case 4: tile(bf16, G, 4, n, w, gs, a, as, y, ldy, rhi); break;                                                   \
    case 5: tile(bf16, G, 5, n, w, gs, a, as, y, ldy, rhi); break;                                                   \
    default: tile(bf16, G, 6, n, w, gs, a, as, y, ldy, rhi); break;                                                  \
    }
    switch (G) {
    case 1: T_CASES(1) break;
    case 2: T_CASES(2) break;
    case 3: tile(bf16, 3, 1, n, w, gs, a, as, y, ldy, rhi); break; /* decode only: T == 1 */
    default: tile(bf16, 4, 1, n, w, gs, a, as, y, ldy, rhi); break;
    }
#undef T_CASES
}

/* rows [0, rows) of the packed matrix at w (a group start: callers split rows at multiples of
 * GM_AVX2_TILE_ROWS), every token. One token: four groups per tile (four independent sums per column hide
 * the fmadd latency while the weights stream from memory). More: pairs of groups x 6 tokens, tokens in
 * blocks of TOK_BLOCK so their activations stay in L2 while the pairs (in L1 / L2) go by. */
INL void tiles_x8(bool bf16, int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as,
                  int64_t n_tok, float *y, int64_t ldy) {
    const uint16_t *wp = w;
    const size_t gs = (size_t)(8 * n), af = as / sizeof(float);
    const float *x = a;
    const int64_t groups = (rows + 7) / 8;
    (void)ws;
    if (n_tok == 1) {
        for (int64_t g = 0; g < groups; g += GMAX) {
            const int G = groups - g < GMAX ? (int)(groups - g) : GMAX;
            const int64_t left = rows - 8 * g;
            tile_any(bf16, G, 1, n, wp + g * gs, gs, x, af, y + 8 * g, ldy, left < 8 * G ? (int)left : 8 * G);
        }
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOK_BLOCK) {
        const int64_t nt = n_tok - t0 < TOK_BLOCK ? n_tok - t0 : TOK_BLOCK;
        for (int64_t g = 0; g < groups; g += 2) {
            const int G = groups - g < 2 ? 1 : 2;
            const int64_t left = rows - 8 * g;
            const int rhi = left < 8 * G ? (int)left : 8 * G;
            for (int64_t t = 0; t < nt; t += TMAX) {
                const int T = nt - t < TMAX ? (int)(nt - t) : TMAX;
                const int64_t tt = t0 + t;
                tile_any(bf16, G, T, n, wp + g * gs, gs, x + tt * (int64_t)af, af, y + tt * ldy + 8 * g, ldy, rhi);
            }
        }
    }
}

static void tiles_f16x8(int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as, int64_t n_tok,
                        float *y, int64_t ldy) {
    tiles_x8(false, n, w, ws, rows, a, as, n_tok, y, ldy);
}
static void tiles_bf16x8(int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as, int64_t n_tok,
                         float *y, int64_t ldy) {
    tiles_x8(true, n, w, ws, rows, a, as, n_tok, y, ldy);
}

gm_avx2_tiles_fn gm_avx2_f16x8_tiles(int type) {
    return type == GM_TYPE_F16 ? tiles_f16x8 : type == GM_TYPE_BF16 ? tiles_bf16x8 : NULL;
}
#else
gm_avx2_tiles_fn gm_avx2_f16x8_tiles(int type) {
    (void)type;
    return NULL;
}
#endif
