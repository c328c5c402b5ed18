/* kernels/mtok_avx2.c — AVX2 matmul kernels for a few tokens (2 .. GM_AVX2_MTOK_MAX: one decode step of
 * several sequences) over the quantized types, on x8 copies (kernels/pack.h) and on file rows.
 *
 * Why not the prefill tiles (qtiles_avx2.c): they read 8 rows' blocks in a burst into an octet buffer, then
 * compute over it with no memory access, once per 4 tokens; streaming a matrix from DRAM that left the loads
 * and the arithmetic in turns (Gemma 3 270M's LM head, Q8_0 262144 x 640, 8 tokens: 40 ms on one Zen 4
 * core where the same work in cache takes 27). Here each block of 8 rows is decoded once into registers (the
 * octet vectors of qtiles_avx2.h: vector g = codes 4g .. 4g + 3 of row r in int32 lane r) and every token of
 * the call passes over it before the next block is read, so that the loads of the weights spread over the
 * arithmetic; the tokens' f32 sums wait in a stack array (a load and a store per token and block beside
 * ~30 vector instructions), their activations in one block-major copy made once per call
 * (gm_avx2_mtok_put), small enough for L1 / L2. K-quant super-blocks (64 code vectors) are decoded once
 * into an L1 octet per 8 rows.
 *
 * Bits: per block the exact int32 dot, then the f32 steps of qtiles_avx2.c in the same order (see there):
 * every (row, token) output equals the one-token kernels' (gm_avx2_qtiles, gm_avx2_qx8_tiles), whatever the
 * other tokens, the rows or the split. */
#include "kernels/gemm.h"

#include <stddef.h>
#include <string.h>

#include "quant/blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "kernels/qtiles_avx2.h"

/* ------------------------------------------------------------------ prepared tokens
 *
 * A 32-code block of T tokens (Q8_0 / Q8_1 activations): their codes (32 each), then per
 * token da (f32), c16 (Q8_0: -16 x the sum of the codes, the Q5_0 offset's term; Q8_1: s as f32) and c8
 * (-8 x the sum: Q4_0's). A K-quant super-block of T tokens (Q8_K): their codes (256 each), bsums (16 int16
 * each), d (f32 each). */
static size_t tb32(int64_t T) { return (size_t)T * 44; }
static size_t tbK(int64_t T) { return (size_t)T * 292; }

size_t gm_avx2_mtok_bytes(int act_type, int64_t n, int64_t n_tok) {
    if (act_type == GM_TYPE_Q8_0 || act_type == GM_TYPE_Q8_1) return (size_t)(n / 32) * tb32(n_tok);
    return act_type == GM_TYPE_Q8_K ? (size_t)(n / 256) * tbK(n_tok) : 0;
}

static void put32(bool q81, int64_t nb, const char *a, int64_t t, int64_t T, char *toks) {
    const size_t ab = q81 ? sizeof(gm_block_q8_1) : sizeof(gm_block_q8_0);
    for (int64_t b = 0; b < nb; b++) {
        const char *blk = a + (size_t)b * ab;
        char *o = toks + (size_t)b * tb32(T);
        const int8_t *qs = q81 ? ((const gm_block_q8_1 *)blk)->qs : ((const gm_block_q8_0 *)blk)->qs;
        const float da = h2f(ld16(blk)), sa = h2f(ld16(blk + 2)); /* as side32 converts them */
        int32_t sum = 0, c16, c8;
        for (int i = 0; i < 32; i++) sum += qs[i];
        c16 = -16 * sum, c8 = -8 * sum;
        if (q81) memcpy(&c16, &sa, 4), c8 = 0;
        memcpy(o + 32 * t, qs, 32);
        memcpy(o + 32 * T + 4 * t, &da, 4);
        memcpy(o + 36 * T + 4 * t, &c16, 4);
        memcpy(o + 40 * T + 4 * t, &c8, 4);
    }
}

static void putK(int64_t nb, const char *a, int64_t t, int64_t T, char *toks) {
    for (int64_t i = 0; i < nb; i++) {
        const gm_block_q8_K *yb = (const gm_block_q8_K *)a + i;
        char *o = toks + (size_t)i * tbK(T);
        memcpy(o + 256 * t, yb->qs, 256);
        memcpy(o + 256 * T + 32 * t, yb->bsums, 32);
        memcpy(o + 288 * T + 4 * t, &yb->d, 4);
    }
}

void gm_avx2_mtok_put(int act_type, int64_t n, const void *a, int64_t t, int64_t n_tok, void *toks) {
    if (act_type == GM_TYPE_Q8_K) putK(n / 256, a, t, n_tok, toks);
    else put32(act_type == GM_TYPE_Q8_1, n / 32, a, t, n_tok, toks);
}

/* ------------------------------------------------------------------ 32-code types */

/* a block of 8 rows in registers: the octet vectors (Q8_0: |codes|, the signed codes at sg), the rows' scales
 * dw and (Q4_1 / Q5_1) offsets mw as f32 */
typedef struct {
    __m256i o[8];
    const char *sg;
    __m256 dw, mw;
} oct32;

/* x8 group-block p (kernels/pack.h) */
INL void x8_oct(int type, const char *p, oct32 *w) {
    if (type == GM_TYPE_Q8_0) {
        w->sg = p + x8_qs_off(type);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(w->sg + 32 * g));
            w->o[g] = _mm256_sign_epi8(v, v);
        }
    } else {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) x8_nibbles(type, p, j, &w->o[j], &w->o[j + 4]);
    }
    w->dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    w->mw = has_m(type) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16))) : _mm256_setzero_ps();
}

/* file blocks rb[0..7] (repeats allowed), transposed as octet32 does; Q8_0's signed codes go to sg (256 bytes) */
INL void file_oct(int type, const char *const rb[8], char *sg, oct32 *w) {
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) w->o[r] = codes32(type, rb[r]);
    transpose8(w->o);
    if (type == GM_TYPE_Q8_0) {
        w->sg = sg;
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            _mm256_store_si256((__m256i *)(sg + 32 * g), w->o[g]);
            w->o[g] = _mm256_sign_epi8(w->o[g], w->o[g]);
        }
    }
    w->dw = h2f_rows(rb, 0);
    w->mw = has_m(type) ? h2f_rows(rb, 2) : _mm256_setzero_ps();
}

/* acc + token t of prepared block tb (T tokens) . block w: x8_direct's int32 dot and f32 steps. (Blocks of
 * 2 tokens or 2 row groups, sharing loads, measured no faster: the loop is bound by its ~32 (Q5_0) to ~44
 * (Q8_0) vector instructions, ~3 a cycle, and such blocks save none.) */
INL __m256 tok32(int type, const oct32 *w, const char *tb, int64_t T, int64_t t, __m256 acc) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *q = (const int8_t *)tb + 32 * t;
    __m256i is = _mm256_setzero_si256();
    if (type == GM_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i x = _mm256_sign_epi8(bcast32(q + 4 * g), _mm256_loadu_si256((const __m256i *)(w->sg + 32 * g)));
            is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(w->o[g], x), ones));
        }
    } else {
        __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(w->o[j], bcast32(q + 4 * j)));
            hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(w->o[j + 4], bcast32(q + 16 + 4 * j)));
        }
        /* int16 sums of 4 groups each for 5-bit codes, of all 8 for 4-bit ones (kern32's bounds) */
        is = five_bits(type) ? _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones))
                             : _mm256_madd_epi16(_mm256_add_epi16(lo, hi), ones);
        int32_t corr;
        memcpy(&corr, tb + (offset32(type) == 8 ? 40 : 36) * T + 4 * t, 4);
        if (offset32(type)) is = _mm256_add_epi32(is, _mm256_set1_epi32(corr));
    }
    float da, sa;
    memcpy(&da, tb + 32 * T + 4 * t, 4);
    memcpy(&sa, tb + 36 * T + 4 * t, 4);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(w->dw, _mm256_set1_ps(da)), acc);
    if (has_m(type)) acc = _mm256_fmadd_ps(w->mw, _mm256_set1_ps(sa), acc);
    return acc;
}

/* every token of prepared block tb . block w */
INL void tokens32(int type, const oct32 *w, const char *tb, int64_t T, __m256 *acc) {
    for (int64_t t = 0; t < T; t++) acc[t] = tok32(type, w, tb, T, t, acc[t]);
}

/* the T tokens' sums into rows [0, nr) of y */
INL void flush(const __m256 *acc, int64_t T, float *y, int64_t ldy, int nr) {
    for (int64_t t = 0; t < T; t++) store_rows(y + t * ldy, acc[t], nr);
}

/* rows [0, rows) of the x8 copy at w (a group start) x T prepared tokens */
INL void x8_32(int type, int64_t nb, const char *w, size_t ws, int64_t rows, const char *tk, int64_t T, float *y,
               int64_t ldy) {
    const size_t gb = 8 * wblock_bytes(type), tb = tb32(T);
    const char *end = w + (size_t)rows * ws;
    __m256 acc[GM_AVX2_MTOK_MAX];
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
        for (int64_t t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
        const char *p = w + (size_t)r0 * ws;
        for (int64_t b = 0; b < nb; b++, p += gb) {
            x8_prefetch(p, gb, end);
            oct32 o;
            x8_oct(type, p, &o);
            tokens32(type, &o, tk + (size_t)b * tb, T, acc);
        }
        flush(acc, T, y + r0, ldy, rows - r0 < 8 ? (int)(rows - r0) : 8);
    }
}

/* rows [0, rows) of file rows at w (ws bytes apart) x T prepared tokens */
INL void file_32(int type, int64_t nb, const char *w, size_t ws, int64_t rows, const char *tk, int64_t T, float *y,
                 int64_t ldy) {
    const size_t wb = wblock_bytes(type), tb = tb32(T), per = span_per(ws, nb);
    _Alignas(32) char sg[256];
    __m256 acc[GM_AVX2_MTOK_MAX];
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
        const char *row[8], *rb[8];
        const int nr = octet_rows(w, ws, r0, rows, row);
        const char *pf = next_rows(w, ws, r0, rows, true);
        for (int64_t t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            prefetch_span(pf, per, b);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) rb[r] = row[r] + (size_t)b * wb;
            oct32 o;
            file_oct(type, rb, sg, &o);
            tokens32(type, &o, tk + (size_t)b * tb, T, acc);
        }
        flush(acc, T, y + r0, ldy, nr);
    }
}

/* ------------------------------------------------------------------ K-quants */

/* acc[t .. t + n) + tokens t .. t + n - 1 of prepared super-block tk (T tokens) . octet ob (qtiles_avx2.h's
 * OBK layout): kernK's int32 sums and f32 steps, each code vector loaded once for the n tokens */
INL void tokK(int type, int n, const char *ob, const char *tk, int64_t T, int64_t t, __m256 *acc) {
    const int gs = type == GM_TYPE_Q4_K ? 8 : type == GM_TYPE_Q5_K ? 4 : 2; /* groups per int16 sum */
    __m256i is[2], ms[2], s[2];
#pragma GCC unroll 2
    for (int k = 0; k < n; k++) is[k] = ms[k] = s[k] = _mm256_setzero_si256();
    const char *q = tk + 256 * t, *bs = tk + 256 * T + 32 * t;
#pragma GCC unroll 1
    for (int c = 0; c < 8; c++) {
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i w = _mm256_load_si256((const __m256i *)(ob + 256 * c + 32 * g));
#pragma GCC unroll 2
            for (int k = 0; k < n; k++) s[k] = _mm256_add_epi16(s[k], _mm256_maddubs_epi16(w, bcast32(q + 256 * k + 32 * c + 4 * g)));
            if (g % gs == gs - 1) {
                const __m256i sc = _mm256_load_si256((const __m256i *)(ob + 2048 + 32 * (2 * c + g / 4)));
#pragma GCC unroll 2
                for (int k = 0; k < n; k++) is[k] = _mm256_add_epi32(is[k], _mm256_madd_epi16(s[k], sc)), s[k] = _mm256_setzero_si256();
            }
        }
        const __m256i mv = _mm256_load_si256((const __m256i *)(ob + 2560 + 32 * c));
#pragma GCC unroll 2
        for (int k = 0; k < n; k++) ms[k] = _mm256_add_epi32(ms[k], _mm256_madd_epi16(mv, bcast32(bs + 32 * k + 4 * c)));
    }
    const __m256 d = _mm256_load_ps((const float *)(ob + 2816)), dm = _mm256_load_ps((const float *)(ob + 2848));
#pragma GCC unroll 2
    for (int k = 0; k < n; k++) {
        float dak;
        memcpy(&dak, tk + 288 * T + 4 * (t + k), 4);
        const __m256 da = _mm256_set1_ps(dak), dv = _mm256_mul_ps(d, da);
        if (type == GM_TYPE_Q6_K) {
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(is[k], ms[k])), dv, acc[k]);
        } else {
            const __m256 nm = _mm256_xor_ps(_mm256_mul_ps(dm, da), _mm256_set1_ps(-0.0f));
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[k]), dv, acc[k]);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms[k]), nm, acc[k]);
        }
    }
}

/* every token of prepared super-block tk . octet ob: Q5_K / Q6_K two at a time (a load of a code vector feeds two
 * multiplies: measured 15% faster at 8 tokens), Q4_K one at a time (its int16 sums span 8 code groups; two
 * tokens' ran 5% slower) */
INL void tokensK(int type, const char *ob, const char *tk, int64_t T, __m256 *acc) {
    int64_t t = 0;
    if (type != GM_TYPE_Q4_K)
        for (; t + 2 <= T; t += 2) tokK(type, 2, ob, tk, T, t, acc + t);
    for (; t < T; t++) tokK(type, 1, ob, tk, T, t, acc + t);
}

/* rows [0, rows) x T prepared tokens, K-quant super-blocks from the x8 copy at w (a group start) or file rows */
INL void rows_K(int type, bool x8, int64_t nb, const char *w, size_t ws, int64_t rows, const char *tk, int64_t T,
                float *y, int64_t ldy) {
    const size_t gb = 8 * wblock_bytes(type), tb = tbK(T), per = span_per(ws, nb);
    const char *end = w + (size_t)rows * ws;
    _Alignas(32) char ob[OBK];
    __m256 acc[GM_AVX2_MTOK_MAX];
    for (int64_t r0 = 0; r0 < rows; r0 += 8) {
        const char *row[8], *p = w + (size_t)r0 * ws;
        const int nr = octet_rows(w, ws, r0, rows, row);
        const char *pf = x8 ? NULL : next_rows(w, ws, r0, rows, true);
        for (int64_t t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; i++, p += gb) {
            if (x8) x8_prefetch(p, gb, end), octet_x8k(type, 1, p, gb, ob);
            else prefetch_span(pf, per, i), octetK(type, i, 1, row, ob, NULL, ws);
            tokensK(type, ob, tk + (size_t)i * tb, T, acc);
        }
        flush(acc, T, y + r0, ldy, nr);
    }
}

/* ------------------------------------------------------------------ entry points */

INL void mtok(int type, bool x8, int64_t n, const void *w, size_t ws, int64_t rows, const void *toks, int64_t n_tok,
              float *y, int64_t ldy) {
    if (kquant(type)) rows_K(type, x8, n / 256, w, ws, rows, toks, n_tok, y, ldy);
    else if (x8) x8_32(type, n / 32, w, ws, rows, toks, n_tok, y, ldy);
    else file_32(type, n / 32, w, ws, rows, toks, n_tok, y, ldy);
}

#define MTOK(name, TYPE, X8)                                                                                   \
    static void mtok_##name(int64_t n, const void *w, size_t ws, int64_t rows, const void *toks, int64_t n_tok, \
                            float *y, int64_t ldy) {                                                           \
        mtok(TYPE, X8, n, w, ws, rows, toks, n_tok, y, ldy);                                                   \
    }
MTOK(q8_0, GM_TYPE_Q8_0, false)
MTOK(q4_0, GM_TYPE_Q4_0, false)
MTOK(q5_0, GM_TYPE_Q5_0, false)
MTOK(q4_1, GM_TYPE_Q4_1, false)
MTOK(q5_1, GM_TYPE_Q5_1, false)
MTOK(q4_K, GM_TYPE_Q4_K, false)
MTOK(q5_K, GM_TYPE_Q5_K, false)
MTOK(q6_K, GM_TYPE_Q6_K, false)
MTOK(x8_q8_0, GM_TYPE_Q8_0, true)
MTOK(x8_q4_0, GM_TYPE_Q4_0, true)
MTOK(x8_q5_0, GM_TYPE_Q5_0, true)
MTOK(x8_q4_1, GM_TYPE_Q4_1, true)
MTOK(x8_q5_1, GM_TYPE_Q5_1, true)
MTOK(x8_q4_K, GM_TYPE_Q4_K, true)
MTOK(x8_q6_K, GM_TYPE_Q6_K, true)

/* one row per type: file rows, x8 copies (Q5_K has no x8 layout) */
typedef struct {
    int type;
    gm_avx2_mtok_fn file, x8;
} mtok_row;

static const mtok_row mtoks[] = {
    {GM_TYPE_Q8_0, mtok_q8_0, mtok_x8_q8_0}, {GM_TYPE_Q4_0, mtok_q4_0, mtok_x8_q4_0},
    {GM_TYPE_Q5_0, mtok_q5_0, mtok_x8_q5_0}, {GM_TYPE_Q4_1, mtok_q4_1, mtok_x8_q4_1},
    {GM_TYPE_Q5_1, mtok_q5_1, mtok_x8_q5_1}, {GM_TYPE_Q4_K, mtok_q4_K, mtok_x8_q4_K},
    {GM_TYPE_Q5_K, mtok_q5_K, NULL},         {GM_TYPE_Q6_K, mtok_q6_K, mtok_x8_q6_K},
};

static const mtok_row *mtok_of(int type) {
    static const mtok_row none = {0};
    for (size_t i = 0; i < sizeof mtoks / sizeof mtoks[0]; i++)
        if (mtoks[i].type == type) return &mtoks[i];
    return &none;
}

gm_avx2_mtok_fn gm_avx2_mtok(int type) { return mtok_of(type)->file; }
gm_avx2_mtok_fn gm_avx2_x8_mtok(int type) { return mtok_of(type)->x8; }

#else

size_t gm_avx2_mtok_bytes(int act_type, int64_t n, int64_t n_tok) {
    (void)act_type, (void)n, (void)n_tok;
    return 0;
}
void gm_avx2_mtok_put(int act_type, int64_t n, const void *a, int64_t t, int64_t n_tok, void *toks) {
    (void)act_type, (void)n, (void)a, (void)t, (void)n_tok, (void)toks;
}
gm_avx2_mtok_fn gm_avx2_mtok(int type) { (void)type; return NULL; }
gm_avx2_mtok_fn gm_avx2_x8_mtok(int type) { (void)type; return NULL; }

#endif
