/* kernels/vec_avx512.c — decode matmuls (a few tokens) over the standard block layouts, straight from
 * the weights: each 64-code chunk of a weight row is decoded into registers once (codes, lane scales)
 * and multiplied into every token of the call, up to FUSED_T at a time.
 *
 * Batch invariance: every (row, token) output goes through exactly the operations of the 4x4 tiles of
 * kernels/gemm_avx512.c, in the same order — per chunk acc = fma(cvt(vpdpbusd(init, u, a)), sw * sa,
 * acc) with one accumulator, then the offset groups (acc -= off * t16), then one 16-lane reduction — so
 * a token gives the same bits alone, with 7 others here, or among 500 in a prefill tile. The codes and
 * scales decoded here equal the tiles' unpacked rows (zero codes and scales past the last block).
 * Float weights likewise follow the float tiles (one fma chain of 16 lanes per token). */
#include "kernels/gemm.h"
#include "kernels/pack.h"

#include <string.h>

#include "kernels/cpu.h"
#include "quant/blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__)
#include <immintrin.h>

#include "kernels/x86_common.h"

/* ---- tokens: prepared by gm_avx512_prep (kernels/gemm.h: codes a, per-lane scales sa, per-lane integer
 * offsets init, 16-code sums t16), then interleaved by groups of up to FUSED_T tokens so that a chunk's
 * operands of every token of the group sit at fixed offsets from one pointer (eight tokens' separate
 * pointers would not fit the registers):
 *   quantized: per 64-code chunk c: a[T] ^ 0x80 (64 B each: the codes as unsigned bytes) | sa[T] (16
 *              floats), then per 256-code group g: t16[T] (16 floats);
 *   float:     per 16-float chunk: x[T] (16 floats). */

enum { FUSED_T = 8 };

static bool is_float_type(int type) { return type == GM_TYPE_F32 || type == GM_TYPE_F16 || type == GM_TYPE_BF16; }

size_t gm_avx512_group_bytes(int type, int64_t n, int T) {
    const int64_t np = (n + 63) / 64 * 64, n256 = (n + 255) / 256 * 256;
    if (is_float_type(type)) return (size_t)np * 4 * (size_t)T;
    return (size_t)(np / 64) * 128 * (size_t)T + (size_t)(n256 / 256) * 64 * (size_t)T;
}

void gm_avx512_group(int type, int64_t n, const void *toks, size_t tb, int T, void *out) {
    const int64_t np = (n + 63) / 64 * 64, n256 = (n + 255) / 256 * 256;
    char *o = out;
    const char *t = toks;
    if (is_float_type(type)) {
        for (int64_t c = 0; c < np / 16; c++)
            for (int k = 0; k < T; k++, o += 64) memcpy(o, t + (size_t)k * tb + 64 * c, 64);
        return;
    }
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t c = 0; c < np / 64; c++) {
        for (int k = 0; k < T; k++, o += 64) /* a and sa each advance 64 bytes per chunk */
            _mm512_store_si512(o, _mm512_xor_si512(_mm512_loadu_si512(t + (size_t)k * tb + 64 * c), flip));
        for (int k = 0; k < T; k++, o += 64) memcpy(o, t + (size_t)k * tb + np + 64 * c, 64);
    }
    for (int64_t g = 0; g < n256 / 256; g++)
        for (int k = 0; k < T; k++, o += 64) memcpy(o, t + (size_t)k * tb + 3 * np + 64 * g, 64);
}

typedef struct tok_ptrs { /* one token in the plain prepared layout (the packed Q5_0 dot) */
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

/* One 64-code chunk c of a weight row into every token's accumulators: the tiles' arithmetic. The tiles
 * take the weight codes unsigned (w + o) and the token's integer offsets init = -o x (lane sums of a) as
 * vpdpbusd's accumulator; here the token is the unsigned operand (a + 128) and the offset belongs to the
 * row: comp = -128 x (lane sums of w). Both give the same exact int32 lane sums of a x w, so the same
 * floats follow, while the tokens need one operand fewer from memory per chunk (the loads, not the
 * arithmetic, bound eight tokens). w: signed codes (zero where the tiles pad). */
static inline __attribute__((always_inline)) __m512i row_comp(__m512i w) {
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), w);
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 7));
}

#define GM_UNROLL _Pragma("GCC unroll 8")
static inline __attribute__((always_inline)) void chunk_into(const int NR, const int T, __m512 (*acc)[FUSED_T],
                                                             const __m512i *w, const __m512 *sw, const char *grp,
                                                             int64_t c) {
    const char *p = grp + (size_t)c * 128 * (size_t)T;
    __m512i comp[2];
    GM_UNROLL
    for (int r = 0; r < NR; r++) comp[r] = row_comp(w[r]);
    GM_UNROLL
    for (int k = 0; k < T; k++) {
        const __m512i a = _mm512_load_si512(p + 64 * k);
        const __m512 sa = _mm512_load_ps((const float *)(p + 64 * (T + k)));
        GM_UNROLL
        for (int r = 0; r < NR; r++)
            acc[r][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(comp[r], a, w[r])), _mm512_mul_ps(sw[r], sa),
                                        acc[r][k]);
    }
}

/* The offsets of 256-code group g (16 floats: one per 16 codes), subtracted after every chunk, as the tiles. */
static inline __attribute__((always_inline)) void offsets_into(const int NR, const int T, __m512 (*acc)[FUSED_T],
                                                               const __m512 *off, const char *grp, int64_t nch,
                                                               int64_t g) {
    const float *p = (const float *)(grp + (size_t)nch * 128 * (size_t)T + (size_t)g * 64 * (size_t)T);
    GM_UNROLL
    for (int k = 0; k < T; k++) {
        const __m512 t16 = _mm512_load_ps(p + 16 * k);
        GM_UNROLL
        for (int r = 0; r < NR; r++) acc[r][k] = _mm512_fnmadd_ps(off[r], t16, acc[r][k]);
    }
}

static inline __attribute__((always_inline)) void store_acc(const int NR, const int T, __m512 (*acc)[FUSED_T], float *y,
                                                            int64_t ldy) {
    GM_UNROLL
    for (int r = 0; r < NR; r++)
        GM_UNROLL
        for (int k = 0; k < T; k++) y[(int64_t)k * ldy + r] = _mm512_reduce_add_ps(acc[r][k]);
}

#define ACC_ZERO(NR, T)                                                                                            \
    __m512 acc[2][FUSED_T];                                                                                        \
    GM_UNROLL                                                                                                      \
    for (int r = 0; r < (NR); r++)                                                                                 \
        GM_UNROLL                                                                                                  \
        for (int k = 0; k < (T); k++) acc[r][k] = _mm512_setzero_ps()

/* The 32-code block formats (Q8_0, Q5_0): a chunk is a pair of blocks, a lone last block fills the low
 * half. decode gives the pair's signed codes (zero where there is no second block) and lane scales. */
typedef void (*pair_decode_fn)(const unsigned char *row, int64_t b, bool pair, __m512i *u, __m512 *sw);

static inline __attribute__((always_inline)) void rows_of_pairs(const int NR, const int T, int64_t n, const void *w,
                                                                size_t ws, const char *t, float *y, int64_t ldy,
                                                                pair_decode_fn decode) {
    const int64_t nb = n / 32;
    ACC_ZERO(NR, T);
    for (int64_t b = 0; b < nb; b += 2) {
        __m512i u[2];
        __m512 sw[2];
        GM_UNROLL
        for (int r = 0; r < NR; r++) decode((const unsigned char *)w + (size_t)r * ws, b, b + 1 < nb, &u[r], &sw[r]);
        chunk_into(NR, T, acc, u, sw, t, b / 2);
    }
    store_acc(NR, T, acc, y, ldy);
}

/* Q8_0: the signed codes as they are */
static inline __attribute__((always_inline)) void pair_q8_0(const unsigned char *row, int64_t b, bool pair, __m512i *u,
                                                            __m512 *sw) {
    const gm_block_q8_0 *x = (const gm_block_q8_0 *)row;
    __m512i q = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[b].qs));
    if (pair) q = _mm512_inserti64x4(q, _mm256_loadu_si256((const __m256i *)x[b + 1].qs), 1);
    *u = _mm512_maskz_mov_epi32(pair ? (__mmask16)0xFFFF : (__mmask16)0x00FF, q);
    *sw = two_scales(x[b].d, pair ? x[b + 1].d : 0);
}

/* Q5_0: one masked load covers two 22-byte blocks; vpermb spreads the 16 nibble bytes of each block over
 * its 32 lanes (low nibbles first, the element order), the qh words become one 64-bit mask that sets bit 4;
 * signed codes -16..15. Needs VBMI. */
__attribute__((target("avx512vbmi"))) static inline __attribute__((always_inline)) void
pair_q5_0(const unsigned char *row, int64_t b, bool pair, __m512i *u, __m512 *sw) {
    /* lane i < 32: byte 6 + i % 16 of block 0; lane i >= 32: byte 28 + i % 16 (block 1 at +22) */
    const __m512i idx = _mm512_set_epi8(43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28,
                                        43, 42, 41, 40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28,
                                        21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6,
                                        21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6);
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    const gm_block_q5_0 *x = (const gm_block_q5_0 *)row;
    /* no second block: the masked load leaves its lanes zero, as the tiles' padding */
    const __m512i v = _mm512_maskz_loadu_epi8(pair ? (1ull << 44) - 1 : (1ull << 22) - 1, row + 22 * b);
    const __m512i t0 = _mm512_permutexvar_epi8(idx, v);
    const __m512i c = _mm512_and_si512(_mm512_mask_blend_epi8(0xFFFF0000FFFF0000ull, t0, _mm512_srli_epi16(t0, 4)), m4);
    uint32_t qh0, qh1 = 0;
    memcpy(&qh0, x[b].qh, 4);
    if (pair) memcpy(&qh1, x[b + 1].qh, 4);
    const __m512i uc = _mm512_mask_add_epi8(c, (__mmask64)((uint64_t)qh0 | (uint64_t)qh1 << 32), c, b4);
    *u = _mm512_maskz_sub_epi8(pair ? ~0ull : 0xFFFFFFFFull, uc, b4);
    *sw = two_scales(x[b].d, pair ? x[b + 1].d : 0);
}

static inline __attribute__((always_inline)) void row_q8_0(const int NR, const int T, int64_t n, const void *w,
                                                           size_t ws, const char *t, float *y, int64_t ldy) {
    rows_of_pairs(NR, T, n, w, ws, t, y, ldy, pair_q8_0);
}

__attribute__((target("avx512vbmi"))) static inline __attribute__((always_inline)) void
row_q5_0(const int NR, const int T, int64_t n, const void *w, size_t ws, const char *t, float *y, int64_t ldy) {
    rows_of_pairs(NR, T, n, w, ws, t, y, ldy, pair_q5_0);
}

/* Q4_K: chunk c of a block = sub-blocks 2c (low nibbles) and 2c+1 (high); lane scales d * sc_j, then the
 * offsets dmin * mn_j (two 16-code groups each) over the whole row */
static inline __attribute__((always_inline)) void row_q4_K(const int NR, const int T, int64_t n, const void *w,
                                                           size_t ws, const char *t, float *y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    ACC_ZERO(NR, T);
    for (int64_t i = 0; i < n / 256; i++) {
        __m512i sm[2];
        __m512 d[2];
        GM_UNROLL
        for (int r = 0; r < NR; r++) {
            const gm_block_q4_K *x = (const gm_block_q4_K *)((const char *)w + (size_t)r * ws);
            sm[r] = k4_sc_mn(x[i].scales);
            d[r] = _mm512_set1_ps(h2f(x[i].d));
        }
        for (int c = 0; c < 4; c++) {
            __m512i u[2];
            __m512 sw[2];
            GM_UNROLL
            for (int r = 0; r < NR; r++) {
                const gm_block_q4_K *x = (const gm_block_q4_K *)((const char *)w + (size_t)r * ws);
                u[r] = _mm512_and_si512(both_halves(_mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c)), 4), m4);
                sw[r] = _mm512_mul_ps(d[r], _mm512_cvtepi32_ps(spread(sm[r], 2 * c, 8)));
            }
            chunk_into(NR, T, acc, u, sw, t, 4 * i + c);
        }
    }
    const __m512i pairs = _mm512_set_epi32(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    for (int64_t i = 0; i < n / 256; i++) {
        __m512 off[2];
        GM_UNROLL
        for (int r = 0; r < NR; r++) {
            const gm_block_q4_K *x = (const gm_block_q4_K *)((const char *)w + (size_t)r * ws);
            const __m512 mn = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(pairs, k4_sc_mn(x[i].scales)));
            off[r] = _mm512_mul_ps(_mm512_set1_ps(h2f(x[i].dmin)), mn);
        }
        offsets_into(NR, T, acc, off, t, (n + 63) / 64, i);
    }
    store_acc(NR, T, acc, y, ldy);
}

/* Q6_K: per half of a block, 64 ql bytes give the low nibbles of two 64-code chunks and 32 qh bytes
 * their 2 high bits; signed codes -32..31; the signed 8-bit scales cover 16 codes (4 lanes) each */
static inline __attribute__((always_inline)) void row_q6_K(const int NR, const int T, int64_t n, const void *w,
                                                           size_t ws, const char *t, float *y, int64_t ldy) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    ACC_ZERO(NR, T);
    for (int64_t i = 0; i < n / 256; i++) {
        for (int c = 0; c < 4; c++) {
            const int h = c / 2;
            __m512i u[2];
            __m512 sw[2];
            GM_UNROLL
            for (int r = 0; r < NR; r++) {
                const gm_block_q6_K *x = (const gm_block_q6_K *)((const char *)w + (size_t)r * ws);
                const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
                const __m512i qh = both_halves(_mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h)), 2);
                const __m512i uc =
                    c % 2 == 0 ? _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), m30))
                               : _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), _mm512_and_si512(qh, m30));
                u[r] = _mm512_sub_epi8(uc, _mm512_set1_epi8(32));
                const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)x[i].scales));
                sw[r] = _mm512_mul_ps(_mm512_set1_ps(h2f(x[i].d)), _mm512_cvtepi32_ps(spread(sc, 4 * c, 4)));
            }
            chunk_into(NR, T, acc, u, sw, t, 4 * i + c);
        }
    }
    store_acc(NR, T, acc, y, ldy);
}

/* Float weights: 16 weights as f32 (zero past n, as the float tiles' padded rows), one fma chain per
 * token over the prepared f32 tokens (padded to 64 with zeros) */
static inline __attribute__((always_inline)) __m512 load16(int type, const void *w, int64_t i, int64_t n) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : n > i ? (__mmask16)((1u << (n - i)) - 1) : 0;
    if (type == GM_TYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
    if (type == GM_TYPE_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void row_float(const int type, const int NR, const int T, int64_t n,
                                                            const void *w, size_t ws, const char *grp, float *y,
                                                            int64_t ldy) {
    ACC_ZERO(NR, T);
    const int64_t nv = (n + 63) / 64 * 4;
    for (int64_t c = 0; c < nv; c++) {
        __m512 wv[2];
        GM_UNROLL
        for (int r = 0; r < NR; r++) wv[r] = load16(type, (const char *)w + (size_t)r * ws, 16 * c, n);
        const float *x = (const float *)(grp + (size_t)c * 64 * (size_t)T);
        GM_UNROLL
        for (int k = 0; k < T; k++) {
            const __m512 xv = _mm512_load_ps(x + 16 * k);
            GM_UNROLL
            for (int r = 0; r < NR; r++) acc[r][k] = _mm512_fmadd_ps(wv[r], xv, acc[r][k]);
        }
    }
    store_acc(NR, T, acc, y, ldy);
}

/* rows [r0, r1) x tokens [0, n_tok): groups of FUSED_T interleaved tokens
 * (gm_avx512_group), gb bytes apart, each group's T a compile-time constant */
#define ROWS_T(row_fn, NR)                                                                                      \
    switch (T) {                                                                                                \
    case 1: row_fn(NR, 1, n, wr, ws, g, yr, ldy); break;                                                        \
    case 2: row_fn(NR, 2, n, wr, ws, g, yr, ldy); break;                                                        \
    case 3: row_fn(NR, 3, n, wr, ws, g, yr, ldy); break;                                                        \
    case 4: row_fn(NR, 4, n, wr, ws, g, yr, ldy); break;                                                        \
    case 5: row_fn(NR, 5, n, wr, ws, g, yr, ldy); break;                                                        \
    case 6: row_fn(NR, 6, n, wr, ws, g, yr, ldy); break;                                                        \
    case 7: row_fn(NR, 7, n, wr, ws, g, yr, ldy); break;                                                        \
    default: row_fn(NR, 8, n, wr, ws, g, yr, ldy); break;                                                       \
    }

#define FUSED(name, row_fn, attrs)                                                                              \
    attrs static void name(int64_t n, const void *w, size_t ws, int64_t r0, int64_t r1, const void *groups,     \
                           size_t gb, int64_t n_tok, float *y, int64_t ldy) {                                  \
        for (int64_t t0 = 0; t0 < n_tok; t0 += FUSED_T) {                                                       \
            const int T = n_tok - t0 < FUSED_T ? (int)(n_tok - t0) : FUSED_T;                                   \
            const char *g = (const char *)groups + (size_t)(t0 / FUSED_T) * gb;                                 \
            for (int64_t r = r0; r < r1; r++) {                                                                 \
                const void *wr = (const char *)w + (size_t)r * ws;                                              \
                float *yr = y + t0 * ldy + r;                                                                   \
                ROWS_T(row_fn, 1)                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }

#define ROW_FLOAT(name, type)                                                                                   \
    static inline __attribute__((always_inline)) void name(const int NR, const int T, int64_t n, const void *w, \
                                                           size_t ws, const char *g, float *y, int64_t ldy) {   \
        row_float(type, NR, T, n, w, ws, g, y, ldy);                                                            \
    }
ROW_FLOAT(row_f32, GM_TYPE_F32)
ROW_FLOAT(row_f16, GM_TYPE_F16)
ROW_FLOAT(row_bf16, GM_TYPE_BF16)

FUSED(fused_q8_0, row_q8_0, )
FUSED(fused_q5_0, row_q5_0, __attribute__((target("avx512vbmi"))))
FUSED(fused_q4_K, row_q4_K, )
FUSED(fused_q6_K, row_q6_K, )
FUSED(fused_f32, row_f32, )
FUSED(fused_f16, row_f16, )
FUSED(fused_bf16, row_bf16, )

/* Q5_0x16 weights (kernels/pack.h): per pair one broadcast load, one variable shift and one and give
 * the 64 low-4-bit codes, one 64-bit load the fifth-bit mask; the 16 scales of a group are converted
 * once and multiplied by the token's block scales (sab), then each pair picks its two. Same
 * integer and float operations, in the same order, as the Q5_0 chunks below and the tiles (whose
 * products sw * sa round the same: the product of the same two floats). */
static void tok_dot_q5_0x16(int64_t n, float *s, const void *w, const void *tok) {
    const tok_ptrs t = tok_of(tok, n);
    const float *sab = (const float *)((const char *)tok + gm_avx512_qtok_bytes(n));
    const uint8_t *p = w;
    const int64_t nb = n / 32, npair = nb / 2;
    const __m512i pick0 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0), two = _mm512_set1_epi32(2);
    __m512 acc = _mm512_setzero_ps();
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
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pd), sc, acc);
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
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pd), sc, acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}


gm_fused_fn gm_avx512_fused(int type) {
    switch (type) {
    case GM_TYPE_Q8_0: return fused_q8_0;
    case GM_TYPE_Q5_0: return gm_cpu_features_get()->avx512vbmi ? fused_q5_0 : NULL;
    case GM_TYPE_Q4_K: return fused_q4_K;
    case GM_TYPE_Q6_K: return fused_q6_K;
    case GM_TYPE_F32: return fused_f32;
    case GM_TYPE_F16: return fused_f16;
    case GM_TYPE_BF16: return fused_bf16;
    default: return NULL;
    }
}

/* One row, one token, with the signature of gm_vec_dot_fn (tests compare these with the scalar dots): the
 * token interleaved as a group of one, then the fused kernel. For rows up to 4096 codes. */
#define TOK_DOT(name, fused, type, attrs)                                                                       \
    attrs static void name(int64_t n, float *s, const void *w, const void *tok) {                               \
        static _Thread_local _Alignas(64) char grp[4096 / 64 * 192 + 4096 / 256 * 64 + 64 * 64];               \
        if (gm_avx512_group_bytes(type, n, 1) > sizeof grp) return;                                             \
        gm_avx512_group(type, n, tok, 0, 1, grp);                                                               \
        fused(n, w, 0, 0, 1, grp, 0, 1, s, 1);                                                                  \
    }
TOK_DOT(tok_dot_q8_0, fused_q8_0, GM_TYPE_Q8_0, )
TOK_DOT(tok_dot_q5_0, fused_q5_0, GM_TYPE_Q5_0, __attribute__((target("avx512vbmi"))))
TOK_DOT(tok_dot_q4_K, fused_q4_K, GM_TYPE_Q4_K, )
TOK_DOT(tok_dot_q6_K, fused_q6_K, GM_TYPE_Q6_K, )
TOK_DOT(tok_dot_f32, fused_f32, GM_TYPE_F32, )
TOK_DOT(tok_dot_f16, fused_f16, GM_TYPE_F16, )
TOK_DOT(tok_dot_bf16, fused_bf16, GM_TYPE_BF16, )

gm_vec_dot_fn gm_avx512_tok_dot(int type) {
    switch (type) {
    case GM_TYPE_Q8_0: return tok_dot_q8_0;
    case GM_TYPE_Q5_0: return gm_cpu_features_get()->avx512vbmi ? tok_dot_q5_0 : NULL;
    case GM_KTYPE_Q5_0X16: return tok_dot_q5_0x16;
    case GM_TYPE_Q4_K: return tok_dot_q4_K;
    case GM_TYPE_Q6_K: return tok_dot_q6_K;
    case GM_TYPE_F32: return tok_dot_f32;
    case GM_TYPE_F16: return tok_dot_f16;
    case GM_TYPE_BF16: return tok_dot_bf16;
    default: return NULL;
    }
}

#else

gm_fused_fn gm_avx512_fused(int type) { (void)type; return NULL; }
size_t gm_avx512_group_bytes(int type, int64_t n, int T) { (void)type; (void)n; (void)T; return 0; }
void gm_avx512_group(int type, int64_t n, const void *toks, size_t tb, int T, void *out) {
    (void)type; (void)n; (void)toks; (void)tb; (void)T; (void)out;
}
gm_vec_dot_fn gm_avx512_tok_dot(int type) { (void)type; return NULL; }

#endif
