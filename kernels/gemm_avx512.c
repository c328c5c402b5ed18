/* kernels/gemm_avx512.c — AVX-512 VNNI matmul for every quantized type (layout in kernels/gemm.h).
 * Built with -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512vnni -mfma -mf16c (CMakeLists.txt);
 * only called when kernels/cpu.c says the CPU and OS support them.
 *
 * Work per weight row: unpack once per token block into L1-resident buffers (codes, lane scales,
 * offsets); then 4 rows x 4 tokens register tiles: per 64 codes and (row, token) pair one vpdpbusd,
 * one convert, one multiply and one FMA. Activations are quantized exactly like the scalar
 * reference (Q8_0 blocks of 32 for the legacy types, Q8_K blocks of 256 for the K-quants). */
#include "kernels/gemm.h"
#include "kernels/pack.h"

#include <string.h>

#include "quant/blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__AVX512DQ__) && defined(__F16C__)
#include <immintrin.h>

#include "kernels/x86_common.h"

#define TOK_BLOCK 64

/* The tile loops must be fully unrolled so the 4x4 accumulators live in registers. */
#define GM_PRAGMA(x) _Pragma(#x)
#define GM_UNROLL GM_PRAGMA(GCC unroll 4) /* tokens whose prepared activations stay in L2 while rows stream by */

typedef struct {
    int o;      /* code offset folded into the integer accumulator (0: none) */
    int shift;  /* log2(o) */
    bool off;   /* has per-16 float offsets (m / mins) */
    bool k_act; /* activations quantized per 256 (Q8_K) instead of per 32 (Q8_0) */
} type_info;

static bool info_of(int type, type_info *ti) {
    switch (type) {
    case GM_TYPE_Q4_0: *ti = (type_info){8, 3, false, false}; return true;
    case GM_TYPE_Q5_0:
    case GM_KTYPE_Q5_0X16: *ti = (type_info){16, 4, false, false}; return true;
    case GM_TYPE_Q8_0: *ti = (type_info){128, 7, false, false}; return true;
    case GM_TYPE_Q8_1: *ti = (type_info){128, 7, false, false}; return true;
    case GM_TYPE_Q4_1: *ti = (type_info){0, 0, true, false}; return true;
    case GM_TYPE_Q5_1: *ti = (type_info){0, 0, true, false}; return true;
    case GM_TYPE_Q4_K: *ti = (type_info){0, 0, true, true}; return true;
    case GM_TYPE_Q5_K: *ti = (type_info){0, 0, true, true}; return true;
    case GM_TYPE_Q6_K: *ti = (type_info){32, 5, false, true}; return true;
    case GM_TYPE_Q8_K: *ti = (type_info){128, 7, false, true}; return true;
    default: return false;
    }
}

static inline int64_t pad64(int64_t n) { return (n + 63) / 64 * 64; }
static inline int64_t pad256(int64_t n) { return (n + 255) / 256 * 256; }
static inline size_t up64(size_t b) { return (b + 63) / 64 * 64; }

/* F32 / F16 / BF16 weights take a plain f32 path: rows converted to f32, tokens as given. */
static bool is_float(int type) { return type == GM_TYPE_F32 || type == GM_TYPE_F16 || type == GM_TYPE_BF16; }

bool gm_avx512_supports(int type) {
    type_info ti;
    return is_float(type) || info_of(type, &ti);
}

/* token: a[npad] | sa[npad/4] f32 | init[npad/4] i32 | t16[n256/16] f32;  float types: x[npad] f32 */
size_t gm_avx512_tok_bytes(int type, int64_t n) {
    if (is_float(type)) return up64((size_t)(4 * pad64(n)));
    if (type == GM_KTYPE_Q5_0X16) return gm_avx512_qtok_bytes(n) + up64((size_t)pad64(n) / 32 * sizeof(float));
    return gm_avx512_qtok_bytes(n);
}

/* row: u[npad] | sw[npad/4] f32 | off[n256/16] f32;  float types: w[npad] f32; four rows per thread */
static size_t row_bytes(int type, int64_t n) {
    if (is_float(type)) return up64((size_t)(4 * pad64(n)));
    return up64((size_t)(2 * pad64(n) + pad256(n) / 4));
}
size_t gm_avx512_rows_bytes(int type, int64_t n) { return 4 * row_bytes(type, n); }

typedef struct {
    int8_t *a;
    float *sa;
    int32_t *init;
    float *t16;
} tok_view;

static tok_view tok_at(const void *base, int64_t n) {
    char *p = (char *)base;
    const int64_t np = pad64(n);
    return (tok_view){(int8_t *)p, (float *)(p + np), (int32_t *)(p + 2 * np), (float *)(p + 3 * np)};
}

typedef struct {
    uint8_t *u;
    float *sw;
    float *off;
} row_view;

static row_view row_at(void *base, int64_t n) {
    char *p = (char *)base;
    const int64_t np = pad64(n);
    return (row_view){(uint8_t *)p, (float *)(p + np), (float *)(p + 2 * np)};
}

/* ------------------------------------------------------------------ activations */

/* roundf semantics (ties away from zero), as the scalar reference quantizer */
static inline __m512 round_away(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_abs_ps(_mm512_sub_ps(v, t));
    const __mmask16 m = _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)), _mm512_set1_ps(1.0f));
    return _mm512_mask_add_ps(t, m, t, one);
}

/* Q8_0 blocks: d = amax / 127 (stored as f16), q = roundf(x / d) */
static void prep_q8_0(const float *x, int64_t n, tok_view tv) {
    for (int64_t b = 0; b < n / 32; b++) {
        const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        const __m512i q0 = _mm512_cvttps_epi32(round_away(_mm512_mul_ps(x0, vid)));
        const __m512i q1 = _mm512_cvttps_epi32(round_away(_mm512_mul_ps(x1, vid)));
        _mm_storeu_si128((__m128i *)(tv.a + 32 * b), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(tv.a + 32 * b + 16), _mm512_cvtsepi32_epi8(q1));
        _mm256_storeu_ps(tv.sa + 8 * b, _mm256_set1_ps(h2f(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT))));
    }
}

/* Q8_K blocks: iscale = -127 / (signed extreme), q = round-half-even(iscale x), d = 1 / iscale */
static void prep_q8_K(const float *x, int64_t n, tok_view tv) {
    for (int64_t b = 0; b < n / 256; b++) {
        const float *xb = x + 256 * b;
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < 256; j += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + j)));
        const float amax = _mm512_reduce_max_ps(m);
        if (!(amax > 0)) {
            memset(tv.a + 256 * b, 0, 256);
            memset(tv.sa + 64 * b, 0, 64 * sizeof(float));
            continue;
        }
        float max = 0;
        for (int j = 0; j < 256; j++)
            if (fabsf(xb[j]) == amax) {
                max = xb[j];
                break;
            }
        const float iscale = -127.f / max;
        const __m512 vis = _mm512_set1_ps(iscale);
        for (int j = 0; j < 256; j += 16) {
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + j), vis));
            q = _mm512_min_epi32(q, _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(tv.a + 256 * b + j), _mm512_cvtsepi32_epi8(q));
        }
        const __m512 d = _mm512_set1_ps(1 / iscale);
        for (int j = 0; j < 64; j += 16) _mm512_storeu_ps(tv.sa + 64 * b + j, d);
    }
}

void gm_avx512_prep(int type, const float *x, int64_t n, void *tok) {
    type_info ti;
    if (is_float(type)) {
        memcpy(tok, x, (size_t)n * sizeof(float));
        memset((float *)tok + n, 0, (size_t)(pad64(n) - n) * sizeof(float));
        return;
    }
    if (!info_of(type, &ti)) return;
    const int64_t np = pad64(n), n256 = pad256(n);
    tok_view tv = tok_at(tok, n);
    memset(tv.a + n, 0, (size_t)(np - n));
    memset(tv.sa + n / 4, 0, (size_t)(np - n));
    if (ti.k_act) prep_q8_K(x, n, tv);
    else prep_q8_0(x, n, tv);
    /* lane sums of 4 codes: the integer offset term and the 16-element sums */
    const __m512i ones = _mm512_set1_epi8(1);
    for (int64_t c = 0; c < np / 64; c++) {
        const __m512i s4 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(tv.a + 64 * c));
        const __m512i init = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s4, ti.shift));
        _mm512_store_si512(tv.init + 16 * c, ti.o ? init : _mm512_setzero_si512());
        int32_t l[16];
        _mm512_storeu_si512(l, s4);
        for (int g = 0; g < 4; g++)
            tv.t16[4 * c + g] = tv.sa[16 * c + 4 * g] * (float)(l[4 * g] + l[4 * g + 1] + l[4 * g + 2] + l[4 * g + 3]);
    }
    for (int64_t g = np / 16; g < n256 / 16; g++) tv.t16[g] = 0.f;
    if (type == GM_KTYPE_Q5_0X16) { /* sab: one scale per 32-code block (the 8 lanes of sa agree) */
        float *sab = (float *)((char *)tok + gm_avx512_qtok_bytes(n));
        for (int64_t b = 0; b < np / 32; b++) sab[b] = tv.sa[8 * b];
    }
}

/* ------------------------------------------------------------------ weight rows */

static inline void put_sw8(float *sw, float v) { _mm256_storeu_ps(sw, _mm256_set1_ps(v)); }

static void unpack_q4_0(const void *w, int64_t n, row_view rv) {
    const gm_block_q4_0 *b = w;
    for (int64_t i = 0; i < n / 32; i++) {
        _mm256_storeu_si256((__m256i *)(rv.u + 32 * i), nibbles(b[i].qs));
        put_sw8(rv.sw + 8 * i, h2f(b[i].d));
    }
}

static void unpack_q5_0(const void *w, int64_t n, row_view rv) {
    const gm_block_q5_0 *b = w;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        const __m256i v = nibbles(b[i].qs);
        _mm256_storeu_si256((__m256i *)(rv.u + 32 * i), _mm256_mask_add_epi8(v, qh, v, _mm256_set1_epi8(16)));
        put_sw8(rv.sw + 8 * i, h2f(b[i].d));
    }
}

/* Q5_0x16 (kernels/pack.h): per block pair, the 32 packed bytes give both blocks' low 4 bits */
static void unpack_q5_0x16(const void *w, int64_t n, row_view rv) {
    const uint8_t *p = w;
    const int64_t nb = n / 32, npair = nb / 2;
    for (int64_t p0 = 0; p0 < npair; p0 += 8) {
        const gm_q5_0x16_group G = gm_q5_0x16_group_at(npair, p0);
        const uint16_t *d = (const uint16_t *)(p + G.d);
        for (int64_t k = 0; k < G.gp; k++) {
            _mm512_storeu_si512(rv.u + 64 * (p0 + k), q5_0x16_pair_codes(p + G.qs + 32 * k, p + G.qh + 8 * k));
            put_sw8(rv.sw + 16 * (p0 + k), h2f(d[2 * k]));
            put_sw8(rv.sw + 16 * (p0 + k) + 8, h2f(d[2 * k + 1]));
        }
    }
    if (nb & 1) unpack_q5_0(p + 44 * npair, 32, (row_view){rv.u + 32 * (nb - 1), rv.sw + 8 * (nb - 1), rv.off});
}

static void unpack_q4_1(const void *w, int64_t n, row_view rv) {
    const gm_block_q4_1 *b = w;
    for (int64_t i = 0; i < n / 32; i++) {
        _mm256_storeu_si256((__m256i *)(rv.u + 32 * i), nibbles(b[i].qs));
        put_sw8(rv.sw + 8 * i, h2f(b[i].d));
        rv.off[2 * i] = rv.off[2 * i + 1] = -h2f(b[i].m);
    }
}

static void unpack_q5_1(const void *w, int64_t n, row_view rv) {
    const gm_block_q5_1 *b = w;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, b[i].qh, 4);
        const __m256i v = nibbles(b[i].qs);
        _mm256_storeu_si256((__m256i *)(rv.u + 32 * i), _mm256_mask_add_epi8(v, qh, v, _mm256_set1_epi8(16)));
        put_sw8(rv.sw + 8 * i, h2f(b[i].d));
        rv.off[2 * i] = rv.off[2 * i + 1] = -h2f(b[i].m);
    }
}

static void unpack_q8_0(const void *w, int64_t n, row_view rv) {
    const gm_block_q8_0 *b = w;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)b[i].qs);
        _mm256_storeu_si256((__m256i *)(rv.u + 32 * i), _mm256_xor_si256(q, flip));
        put_sw8(rv.sw + 8 * i, h2f(b[i].d));
    }
}

static void unpack_q8_1(const void *w, int64_t n, row_view rv) {
    const gm_block_q8_1 *b = w;
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)b[i].qs);
        _mm256_storeu_si256((__m256i *)(rv.u + 32 * i), _mm256_xor_si256(q, flip));
        put_sw8(rv.sw + 8 * i, h2f(b[i].d));
    }
}

static void unpack_q8_K(const void *w, int64_t n, row_view rv) {
    const gm_block_q8_K *b = w;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t i = 0; i < n / 256; i++) {
        for (int c = 0; c < 4; c++) {
            const __m512i q = _mm512_loadu_si512(b[i].qs + 64 * c);
            _mm512_storeu_si512(rv.u + 256 * i + 64 * c, _mm512_xor_si512(q, flip));
            _mm512_storeu_ps(rv.sw + 64 * i + 16 * c, _mm512_set1_ps(b[i].d));
        }
    }
}

/* Q4_K / Q5_K: sub-block j (32 codes) has scale d*sc_j (8 lanes) and offset dmin*mn_j (2 groups) */
static void k4_scales(const uint8_t *scales12, float d, float dmin, float *sw256, float *off16) {
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        gm_k4_scale_min(j, scales12, &sc, &mn);
        put_sw8(sw256 + 8 * j, d * (float)sc);
        off16[2 * j] = off16[2 * j + 1] = dmin * (float)mn;
    }
}

static void unpack_q4_K(const void *w, int64_t n, row_view rv) {
    const gm_block_q4_K *b = w;
    const __m256i mask = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t *u = rv.u + 256 * i;
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));
            _mm256_storeu_si256((__m256i *)(u + 64 * c), _mm256_and_si256(q, mask));
            _mm256_storeu_si256((__m256i *)(u + 64 * c + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), mask));
        }
        k4_scales(b[i].scales, h2f(b[i].d), h2f(b[i].dmin), rv.sw + 64 * i, rv.off + 16 * i);
    }
}

static void unpack_q5_K(const void *w, int64_t n, row_view rv) {
    const gm_block_q5_K *b = w;
    const __m256i mask = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t *u = rv.u + 256 * i;
        const __m256i qh = _mm256_loadu_si256((const __m256i *)b[i].qh);
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * c));
            /* 16-bit shifts: bit 0 of each byte after the mask comes from that byte only */
            const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), one);
            const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c + 1)), one);
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, mask), _mm256_slli_epi16(h0, 4));
            const __m256i hi =
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), mask), _mm256_slli_epi16(h1, 4));
            _mm256_storeu_si256((__m256i *)(u + 64 * c), lo);
            _mm256_storeu_si256((__m256i *)(u + 64 * c + 32), hi);
        }
        k4_scales(b[i].scales, h2f(b[i].d), h2f(b[i].dmin), rv.sw + 64 * i, rv.off + 16 * i);
    }
}

static void unpack_q6_K(const void *w, int64_t n, row_view rv) {
    const gm_block_q6_K *b = w;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    for (int64_t i = 0; i < n / 256; i++) {
        uint8_t *u = rv.u + 256 * i;
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(b[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(b[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(b[i].qh + 32 * h));
            uint8_t *uh = u + 128 * h;
            /* element quarters of this half: codes = 4 low bits | 2 high bits << 4 */
            _mm256_storeu_si256((__m256i *)(uh + 0), _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                                                     _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)));
            _mm256_storeu_si256((__m256i *)(uh + 32), _mm256_or_si256(_mm256_and_si256(ql1, m4),
                                                                      _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)));
            _mm256_storeu_si256((__m256i *)(uh + 64),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30)));
            _mm256_storeu_si256((__m256i *)(uh + 96), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                                                                      _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)));
        }
        const float d = h2f(b[i].d);
        for (int j = 0; j < 16; j++) _mm_storeu_ps(rv.sw + 64 * i + 4 * j, _mm_set1_ps(d * (float)b[i].scales[j]));
    }
}

typedef void (*unpack_fn)(const void *w, int64_t n, row_view rv);

static unpack_fn unpack_of(int type) {
    switch (type) {
    case GM_TYPE_Q4_0: return unpack_q4_0;
    case GM_TYPE_Q5_0: return unpack_q5_0;
    case GM_KTYPE_Q5_0X16: return unpack_q5_0x16;
    case GM_TYPE_Q4_1: return unpack_q4_1;
    case GM_TYPE_Q5_1: return unpack_q5_1;
    case GM_TYPE_Q8_0: return unpack_q8_0;
    case GM_TYPE_Q8_1: return unpack_q8_1;
    case GM_TYPE_Q4_K: return unpack_q4_K;
    case GM_TYPE_Q5_K: return unpack_q5_K;
    case GM_TYPE_Q6_K: return unpack_q6_K;
    case GM_TYPE_Q8_K: return unpack_q8_K;
    default: return NULL;
    }
}

static void unpack_row(unpack_fn fn, const void *w, int64_t n, row_view rv) {
    const int64_t np = pad64(n), n256 = pad256(n);
    memset(rv.u + n, 0, (size_t)(np - n));
    memset(rv.sw + n / 4, 0, (size_t)(np - n));
    memset(rv.off, 0, (size_t)(n256 / 16) * sizeof(float)); /* types without offsets keep zeros */
    fn(w, n, rv);
}

/* ------------------------------------------------------------------ the tile */

typedef struct {
    int64_t nch;  /* 64-code chunks */
    int64_t ngrp; /* 16-float offset groups (256 codes each) */
    bool off;
} tile_dims;

static inline __attribute__((always_inline)) void tile(const int NR, const int NT, tile_dims td, const row_view *rv,
                                                       const tok_view *tv, float *y, int64_t ldy) {
    __m512 acc[4][4];
    GM_UNROLL
    for (int r = 0; r < NR; r++)
        GM_UNROLL
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < td.nch; c++) {
        __m512i u[4];
        __m512 sw[4];
        GM_UNROLL
        for (int r = 0; r < NR; r++) {
            u[r] = _mm512_load_si512(rv[r].u + 64 * c);
            sw[r] = _mm512_load_ps(rv[r].sw + 16 * c);
        }
        GM_UNROLL
        for (int t = 0; t < NT; t++) {
            const __m512i a = _mm512_load_si512(tv[t].a + 64 * c);
            const __m512i init = _mm512_load_si512(tv[t].init + 16 * c);
            const __m512 sa = _mm512_load_ps(tv[t].sa + 16 * c);
            GM_UNROLL
            for (int r = 0; r < NR; r++) {
                const __m512i is = _mm512_dpbusd_epi32(init, u[r], a);
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(sw[r], sa), acc[r][t]);
            }
        }
    }
    if (td.off)
        for (int64_t g = 0; g < td.ngrp; g++)
            GM_UNROLL
            for (int r = 0; r < NR; r++) {
                const __m512 o = _mm512_load_ps(rv[r].off + 16 * g);
                GM_UNROLL
                for (int t = 0; t < NT; t++) acc[r][t] = _mm512_fnmadd_ps(o, _mm512_load_ps(tv[t].t16 + 16 * g), acc[r][t]);
            }
    GM_UNROLL
    for (int r = 0; r < NR; r++)
        GM_UNROLL
        for (int t = 0; t < NT; t++) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

#define TILE_CASE(R, T) \
    case (R)*8 + (T): tile(R, T, td, rv, tv, y, ldy); break;

static void tile_any(int nr, int nt, tile_dims td, const row_view *rv, const tok_view *tv, float *y, int64_t ldy) {
    switch (nr * 8 + nt) {
        TILE_CASE(4, 4) TILE_CASE(4, 3) TILE_CASE(4, 2) TILE_CASE(4, 1)
        TILE_CASE(3, 4) TILE_CASE(3, 3) TILE_CASE(3, 2) TILE_CASE(3, 1)
        TILE_CASE(2, 4) TILE_CASE(2, 3) TILE_CASE(2, 2) TILE_CASE(2, 1)
        TILE_CASE(1, 4) TILE_CASE(1, 3) TILE_CASE(1, 2) TILE_CASE(1, 1)
    default: break;
    }
}

/* ------------------------------------------------------------------ float weights */

static void unpack_float(int type, const void *w, int64_t n, float *out) {
    int64_t i = 0;
    if (type == GM_TYPE_F32) {
        memcpy(out, w, (size_t)n * sizeof(float));
        i = n;
    } else if (type == GM_TYPE_F16) {
        const uint16_t *h = w;
        for (; i + 16 <= n; i += 16) _mm512_store_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
        for (; i < n; i++) out[i] = h2f(h[i]);
    } else {
        const uint16_t *h = w;
        for (; i + 16 <= n; i += 16) {
            const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + i)));
            _mm512_store_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
        }
        for (; i < n; i++) out[i] = gm_bf16_to_fp32(h[i]);
    }
    memset(out + n, 0, (size_t)(pad64(n) - n) * sizeof(float));
}

static inline __attribute__((always_inline)) void tile_f(const int NR, const int NT, int64_t nv, const float *const *wr,
                                                         const float *const *xt, float *y, int64_t ldy) {
    __m512 acc[4][4];
    GM_UNROLL
    for (int r = 0; r < NR; r++)
        GM_UNROLL
        for (int t = 0; t < NT; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t c = 0; c < nv; c++) {
        __m512 wv[4];
        GM_UNROLL
        for (int r = 0; r < NR; r++) wv[r] = _mm512_load_ps(wr[r] + 16 * c);
        GM_UNROLL
        for (int t = 0; t < NT; t++) {
            const __m512 xv = _mm512_load_ps(xt[t] + 16 * c);
            GM_UNROLL
            for (int r = 0; r < NR; r++) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
    GM_UNROLL
    for (int r = 0; r < NR; r++)
        GM_UNROLL
        for (int t = 0; t < NT; t++) y[t * ldy + r] = _mm512_reduce_add_ps(acc[r][t]);
}

#define TILE_F_CASE(R, T) \
    case (R)*8 + (T): tile_f(R, T, nv, wr, xt, y, ldy); break;

static void tile_f_any(int nr, int nt, int64_t nv, const float *const *wr, const float *const *xt, float *y,
                       int64_t ldy) {
    switch (nr * 8 + nt) {
        TILE_F_CASE(4, 4) TILE_F_CASE(4, 3) TILE_F_CASE(4, 2) TILE_F_CASE(4, 1)
        TILE_F_CASE(3, 4) TILE_F_CASE(3, 3) TILE_F_CASE(3, 2) TILE_F_CASE(3, 1)
        TILE_F_CASE(2, 4) TILE_F_CASE(2, 3) TILE_F_CASE(2, 2) TILE_F_CASE(2, 1)
        TILE_F_CASE(1, 4) TILE_F_CASE(1, 3) TILE_F_CASE(1, 2) TILE_F_CASE(1, 1)
    default: break;
    }
}

static void gemm_float(int type, const void *w, size_t w_stride, int64_t rows, int64_t n, const void *toks,
                       int64_t n_tok, float *y, int64_t r0, int64_t r1, void *rows_scratch) {
    const size_t tb = gm_avx512_tok_bytes(type, n), rb = row_bytes(type, n);
    const int64_t nv = pad64(n) / 16;
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOK_BLOCK) {
        const int64_t t1 = t0 + TOK_BLOCK < n_tok ? t0 + TOK_BLOCK : n_tok;
        for (int64_t r = r0; r < r1; r += 4) {
            const int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
            const float *wr[4];
            for (int k = 0; k < nr; k++) {
                float *buf = (float *)((char *)rows_scratch + (size_t)k * rb);
                unpack_float(type, (const char *)w + (size_t)(r + k) * w_stride, n, buf);
                wr[k] = buf;
            }
            for (int64_t t = t0; t < t1; t += 4) {
                const int nt = t1 - t < 4 ? (int)(t1 - t) : 4;
                const float *xt[4];
                for (int k = 0; k < nt; k++) xt[k] = (const float *)((const char *)toks + (size_t)(t + k) * tb);
                tile_f_any(nr, nt, nv, wr, xt, y + t * rows + r, rows);
            }
        }
    }
}

void gm_avx512_gemm(int type, const void *w, size_t w_stride, int64_t rows, int64_t n, const void *toks,
                    int64_t n_tok, float *y, int64_t r0, int64_t r1, void *rows_scratch) {
    if (is_float(type)) {
        gemm_float(type, w, w_stride, rows, n, toks, n_tok, y, r0, r1, rows_scratch);
        return;
    }
    type_info ti;
    unpack_fn fn = unpack_of(type);
    if (!info_of(type, &ti) || !fn) return;
    const size_t tb = gm_avx512_tok_bytes(type, n), rb = row_bytes(type, n);
    const tile_dims td = {pad64(n) / 64, pad256(n) / 256, ti.off};
    for (int64_t t0 = 0; t0 < n_tok; t0 += TOK_BLOCK) {
        const int64_t t1 = t0 + TOK_BLOCK < n_tok ? t0 + TOK_BLOCK : n_tok;
        for (int64_t r = r0; r < r1; r += 4) {
            const int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
            row_view rv[4];
            for (int k = 0; k < nr; k++) {
                rv[k] = row_at((char *)rows_scratch + (size_t)k * rb, n);
                unpack_row(fn, (const char *)w + (size_t)(r + k) * w_stride, n, rv[k]);
            }
            for (int64_t t = t0; t < t1; t += 4) {
                const int nt = t1 - t < 4 ? (int)(t1 - t) : 4;
                tok_view tv[4];
                for (int k = 0; k < nt; k++) tv[k] = tok_at((const char *)toks + (size_t)(t + k) * tb, n);
                tile_any(nr, nt, td, rv, tv, y + t * rows + r, rows);
            }
        }
    }
}

#else /* built without the AVX-512 flags: never selected */

bool gm_avx512_supports(int type) { (void)type; return false; }
size_t gm_avx512_tok_bytes(int type, int64_t n) { (void)type; (void)n; return 0; }
size_t gm_avx512_rows_bytes(int type, int64_t n) { (void)type; (void)n; return 0; }
void gm_avx512_prep(int type, const float *x, int64_t n, void *tok) { (void)type; (void)x; (void)n; (void)tok; }
void gm_avx512_gemm(int type, const void *w, size_t w_stride, int64_t rows, int64_t n, const void *toks,
                    int64_t n_tok, float *y, int64_t r0, int64_t r1, void *rows_scratch) {
    (void)type; (void)w; (void)w_stride; (void)rows; (void)n; (void)toks; (void)n_tok; (void)y; (void)r0;
    (void)r1; (void)rows_scratch;
}

#endif
