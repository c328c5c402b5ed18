/* kernels/sgemm_avx512.c — kernels/sgemm.h on AVX-512F: a register tile of 32 output rows (two vectors of
 * the packed panel) by up to 12 tokens, one broadcast activation per token and column: 24 FMAs per 2 loads
 * and 12 broadcasts, no horizontal sums (the dot-product tiles of gemm_avx512.c reduce 16 lanes per output).
 * Compiled with -mavx512f -mavx2 -mfma -mf16c for this file only. */
#include "kernels/sgemm.h"

#include <math.h>
#include <string.h>

#include "gemma.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>

#include "kernels/exp_avx512.h"

/* the token and vector loops are compile-time constants: fully unrolled, the accumulators stay in registers */
#define GM_UNROLL _Pragma("GCC unroll 16")

enum { MR = GM_SGEMM_MR, NT = 12 };

bool gm_sgemm_avx512_supports(int type) { return type == GM_TYPE_F32 || type == GM_TYPE_F16 || type == GM_TYPE_BF16; }

/* 16 values of row w (type) from column c as f32 */
static inline __m512 load16(int type, const void *w, int64_t c) {
    if (type == GM_TYPE_F32) return _mm512_loadu_ps((const float *)w + c);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + c));
    if (type == GM_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline float load1(int type, const void *w, int64_t c) {
    if (type == GM_TYPE_F32) return ((const float *)w)[c];
    const uint16_t h = ((const uint16_t *)w)[c];
    if (type == GM_TYPE_F16) return _cvtsh_ss(h);
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void gm_sgemm_avx512_pack(int type, const void *w, size_t w_stride, int64_t r0, int nr, int64_t k, float *panel) {
    for (int j = 0; j < MR; j++) {
        if (j >= nr) {
            for (int64_t c = 0; c < k; c++) panel[c * MR + j] = 0.0f;
            continue;
        }
        const void *row = (const char *)w + (size_t)(r0 + j) * w_stride;
        int64_t c = 0;
        for (; c + 16 <= k; c += 16) {
            float tmp[16];
            _mm512_storeu_ps(tmp, load16(type, row, c));
            for (int i = 0; i < 16; i++) panel[(c + i) * MR + j] = tmp[i];
        }
        for (; c < k; c++) panel[c * MR + j] = load1(type, row, c);
    }
}

void gm_sgemm_avx512_pack_t(const float *wt, int64_t ldw, int64_t r0, int nr, int64_t k, float *panel) {
    for (int64_t c = 0; c < k; c++) {
        memcpy(panel + c * MR, wt + c * ldw + r0, (size_t)nr * sizeof(float));
        memset(panel + c * MR + nr, 0, (size_t)(MR - nr) * sizeof(float));
    }
}

/* V vectors of 16 rows (1 or 2) by T tokens */
static inline __attribute__((always_inline)) void tile(const int V, const int T, const float *panel, int64_t k,
                                                       const float *x, int64_t ldx, float *y, int64_t ldy,
                                                       __mmask16 m0, __mmask16 m1) {
    __m512 acc[NT][2];
    GM_UNROLL
    for (int t = 0; t < T; t++)
        GM_UNROLL
        for (int v = 0; v < V; v++) acc[t][v] = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c++) {
        const __m512 w0 = _mm512_load_ps(panel + c * MR), w1 = V > 1 ? _mm512_load_ps(panel + c * MR + 16) : w0;
        GM_UNROLL
        for (int t = 0; t < T; t++) {
            const __m512 xb = _mm512_set1_ps(x[t * ldx + c]);
            acc[t][0] = _mm512_fmadd_ps(w0, xb, acc[t][0]);
            if (V > 1) acc[t][1] = _mm512_fmadd_ps(w1, xb, acc[t][1]);
        }
    }
    GM_UNROLL
    for (int t = 0; t < T; t++) {
        _mm512_mask_storeu_ps(y + t * ldy, m0, acc[t][0]);
        if (V > 1) _mm512_mask_storeu_ps(y + t * ldy + 16, m1, acc[t][1]);
    }
}

#define TILE_CASE(V, T) \
    case T: tile(V, T, panel, k, x, ldx, y, ldy, m0, m1); break;
#define TILE_SWITCH(V)                                                                                          \
    switch (T) {                                                                                                \
        TILE_CASE(V, 1) TILE_CASE(V, 2) TILE_CASE(V, 3) TILE_CASE(V, 4) TILE_CASE(V, 5) TILE_CASE(V, 6)        \
        TILE_CASE(V, 7) TILE_CASE(V, 8) TILE_CASE(V, 9) TILE_CASE(V, 10) TILE_CASE(V, 11) TILE_CASE(V, 12)     \
    default: break;                                                                                             \
    }

static void tile_any(int nr, int T, const float *panel, int64_t k, const float *x, int64_t ldx, float *y, int64_t ldy) {
    const __mmask16 m0 = nr >= 16 ? 0xFFFF : (__mmask16)((1u << nr) - 1);
    const __mmask16 m1 = nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (__mmask16)((1u << (nr - 16)) - 1);
    if (nr > 16) {
        TILE_SWITCH(2)
    } else {
        TILE_SWITCH(1)
    }
}

void gm_sgemm_avx512_panel(const float *panel, int nr, int64_t k, const float *x, int64_t ldx, int64_t n_tok, float *y,
                           int64_t ldy) {
    for (int64_t t = 0; t < n_tok; t += NT) {
        const int T = n_tok - t < NT ? (int)(n_tok - t) : NT;
        tile_any(nr, T, panel, k, x + t * ldx, ldx, y + t * ldy, ldy);
    }
}


float gm_sgemm_avx512_softmax_num(float *y, int64_t n) {
    const int64_t nv = n / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (n - nv)) - 1);
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < nv; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(y + i));
    mv = _mm512_mask_max_ps(mv, tail, mv, _mm512_maskz_loadu_ps(tail, y + nv));
    const float mx = _mm512_reduce_max_ps(mv);
    const __m512 m = _mm512_set1_ps(mx), lo = _mm512_set1_ps(-87.0f);
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 k = i < nv ? 0xFFFF : tail;
        const __m512 x = _mm512_sub_ps(_mm512_maskz_loadu_ps(k, y + i), m);
        const __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ) & k, gm_exp512_nonpos(x));
        sum = _mm512_add_ps(sum, e);
        _mm512_mask_storeu_ps(y + i, k, e);
    }
    return _mm512_reduce_add_ps(sum);
}

#else /* built without AVX-512: never selected */

bool gm_sgemm_avx512_supports(int type) { (void)type; return false; }
float gm_sgemm_avx512_softmax_num(float *y, int64_t n) {
    (void)y, (void)n;
    return 0.0f;
}
void gm_sgemm_avx512_pack(int type, const void *w, size_t w_stride, int64_t r0, int nr, int64_t k, float *panel) {
    (void)type; (void)w; (void)w_stride; (void)r0; (void)nr; (void)k; (void)panel;
}
void gm_sgemm_avx512_pack_t(const float *wt, int64_t ldw, int64_t r0, int nr, int64_t k, float *panel) {
    (void)wt; (void)ldw; (void)r0; (void)nr; (void)k; (void)panel;
}
void gm_sgemm_avx512_panel(const float *panel, int nr, int64_t k, const float *x, int64_t ldx, int64_t n_tok, float *y,
                           int64_t ldy) {
    (void)panel; (void)nr; (void)k; (void)x; (void)ldx; (void)n_tok; (void)y; (void)ldy;
}

#endif
