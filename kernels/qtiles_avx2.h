/* kernels/qtiles_avx2.h — internal: the AVX2 decoding of quantized weight blocks that the matmul kernels of
 * kernels/qtiles_avx2.c (one token, prefill tiles) and kernels/mtok_avx2.c (a few tokens) share: block geometry,
 * the codes of 8 rows as octets (vector g of a block: codes 4g .. 4g + 3 of row r in int32 lane r) from file
 * rows or x8 copies (kernels/pack.h), K-quant scales. All static inline: include it only inside a block
 * compiled with AVX2, FMA and F16C. */
#ifndef GM_KERNELS_QTILES_AVX2_H
#define GM_KERNELS_QTILES_AVX2_H

#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/x86_common.h"
#include "quant/blocks.h"
#include "quant/quant.h"

#define INL static inline __attribute__((always_inline))

enum {
    OB32 = 320,           /* octet bytes per 32-code block: 8 code vectors, dw[8], mw[8] (f32) */
    OBK = 2880,           /* per K-quant super-block: 64 code vectors, 16 scale vectors, 8 min vectors, d, dmin */
    X8_AHEAD = 2048,      /* x8 one-token pass: bytes prefetched ahead of the block being read */
};

INL bool kquant(int type) { return type == GM_TYPE_Q4_K || type == GM_TYPE_Q5_K || type == GM_TYPE_Q6_K; }
INL bool has_m(int type) { return type == GM_TYPE_Q4_1 || type == GM_TYPE_Q5_1; }
/* the code offset: unsigned codes minus this are the signed values (Q8_0 codes are signed already) */
INL int offset32(int type) { return type == GM_TYPE_Q4_0 ? 8 : type == GM_TYPE_Q5_0 ? 16 : 0; }
INL bool five_bits(int type) { return type == GM_TYPE_Q5_0 || type == GM_TYPE_Q5_1; }

INL size_t wblock_bytes(int type) {
    switch (type) {
    case GM_TYPE_Q8_0: return sizeof(gm_block_q8_0);
    case GM_TYPE_Q4_0: return sizeof(gm_block_q4_0);
    case GM_TYPE_Q5_0: return sizeof(gm_block_q5_0);
    case GM_TYPE_Q4_1: return sizeof(gm_block_q4_1);
    case GM_TYPE_Q5_1: return sizeof(gm_block_q5_1);
    case GM_TYPE_Q4_K: return sizeof(gm_block_q4_K);
    case GM_TYPE_Q5_K: return sizeof(gm_block_q5_K);
    default: return sizeof(gm_block_q6_K);
    }
}
/* activation block: Q8_K for K-quants, Q8_1 where the weights carry m, Q8_0 otherwise */
INL size_t ablock_bytes(int type) {
    return kquant(type) ? sizeof(gm_block_q8_K) : has_m(type) ? sizeof(gm_block_q8_1) : sizeof(gm_block_q8_0);
}
INL const int8_t *aqs(int type, const char *ab) {
    return has_m(type) ? ((const gm_block_q8_1 *)ab)->qs : ((const gm_block_q8_0 *)ab)->qs;
}
INL uint16_t ld16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
INL __m256i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* 32 bits -> 32 bytes, 0xFF where the bit is set */
INL __m256i bits_to_bytes(uint32_t bits) {
    const __m256i v = _mm256_set1_epi32((int)bits);
    const __m256i sh = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                        3, 3, 3, 3, 3, 3);
    const __m256i bytes = _mm256_shuffle_epi8(v, sh);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

/* 5-bit codes: the nibbles plus 16 where the block's fifth bit is set */
INL __m256i codes5(const uint8_t *qh, const uint8_t *qs) {
    uint32_t h;
    memcpy(&h, qh, 4);
    return _mm256_or_si256(nibbles(qs), _mm256_and_si256(bits_to_bytes(h), _mm256_set1_epi8(16)));
}

/* the 32 codes of a 32-code block: unsigned (value = d (code - offset32), + m for Q4_1 / Q5_1); Q8_0's
 * signed bytes as they are */
INL __m256i codes32(int type, const char *blk) {
    switch (type) {
    case GM_TYPE_Q8_0: return _mm256_loadu_si256((const __m256i *)((const gm_block_q8_0 *)blk)->qs);
    case GM_TYPE_Q4_0: return nibbles(((const gm_block_q4_0 *)blk)->qs);
    case GM_TYPE_Q4_1: return nibbles(((const gm_block_q4_1 *)blk)->qs);
    case GM_TYPE_Q5_0: return codes5(((const gm_block_q5_0 *)blk)->qh, ((const gm_block_q5_0 *)blk)->qs);
    default: return codes5(((const gm_block_q5_1 *)blk)->qh, ((const gm_block_q5_1 *)blk)->qs);
    }
}

/* f16 fields of 8 rows' blocks (at byte `off` of the block) as 8 f32 lanes */
INL __m256 h2f_rows(const char *const p[8], size_t off) {
    return _mm256_cvtph_ps(_mm_setr_epi16((short)ld16(p[0] + off), (short)ld16(p[1] + off), (short)ld16(p[2] + off),
                                          (short)ld16(p[3] + off), (short)ld16(p[4] + off), (short)ld16(p[5] + off),
                                          (short)ld16(p[6] + off), (short)ld16(p[7] + off)));
}

/* v[r] (row r's 8 dwords) -> v[g] (dword g of every row, row r in lane r) */
INL void transpose8(__m256i v[8]) {
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
        t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) { /* rows 0-3, 4-7 */
        u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        v[g] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x20);
        v[g + 4] = _mm256_permute2x128_si256(u[g], u[4 + g], 0x31);
    }
}

/* 8 rows' f32 results for rows [0, nr) of y (the others are lanes of repeated rows) */
INL void store_rows(float *y, __m256 v, int nr) {
    if (nr == 8) {
        _mm256_storeu_ps(y, v);
        return;
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, v);
    memcpy(y, tmp, (size_t)nr * sizeof(float));
}
INL __m256 load_rows(const float *y, int nr) {
    if (nr == 8) return _mm256_loadu_ps(y);
    float tmp[8] = {0};
    memcpy(tmp, y, (size_t)nr * sizeof(float));
    return _mm256_loadu_ps(tmp);
}

/* The rows after a pass of 8 (one span of 8 row strides) prefetched spread over the pass's nb blocks: block
 * b issues the span's lines in [b * span / nb, (b + 1) * span / nb). The hardware prefetcher loses track of
 * 8 short row streams read side by side (docs/performance.md); per = span_per(ws, nb). */
INL size_t span_per(size_t ws, int64_t nb) { return nb ? (8 * ws + (size_t)nb - 1) / (size_t)nb : 0; }
INL void prefetch_span(const char *pf, size_t per, int64_t b) {
    if (pf)
        for (size_t k = (size_t)b * per & ~(size_t)63; k < (size_t)(b + 1) * per; k += 64) _mm_prefetch(pf + k, _MM_HINT_T0);
}

/* ------------------------------------------------------------------ K-quant blocks, one row at a time */

/* chunk c (codes 32c .. 32c + 31) of a K-quant block as unsigned codes (Q6_K: value + 32) */
INL __m256i kcodes(int type, const char *blk, int c) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (type == GM_TYPE_Q6_K) {
        const gm_block_q6_K *x = (const gm_block_q6_K *)blk;
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

/* byte offsets of a K-quant block's f16 d and dmin (Q6_K has no dmin) */
INL size_t kd_off(int type) { return type == GM_TYPE_Q6_K ? offsetof(gm_block_q6_K, d) : 0; }

/* a K-quant block's integer scales as vectors: sv the 16 int16 scales of its 16-code groups (Q4_K / Q5_K:
 * each 32-code scale twice), mv the offsets against bsums' int16 pairs (Q4_K / Q5_K: min j in both halves
 * of int32 lane j; Q6_K: 32 x the scales) */
INL void kheads(int type, const char *blk, __m256i *sv, __m256i *mv) {
    if (type == GM_TYPE_Q6_K) {
        *sv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)((const gm_block_q6_K *)blk)->scales));
        *mv = _mm256_slli_epi16(*sv, 5);
        return;
    }
    const uint8_t *scales = type == GM_TYPE_Q4_K ? ((const gm_block_q4_K *)blk)->scales : ((const gm_block_q5_K *)blk)->scales;
    /* the 12 bytes of 6-bit scales and mins (gm_k4_scale_min) unpacked four at a time */
    uint32_t a[3];
    memcpy(a, scales, 12);
    const uint64_t sc = (uint64_t)(a[0] & 0x3f3f3f3f) | (uint64_t)((a[2] & 0x0f0f0f0f) | ((a[0] >> 2) & 0x30303030)) << 32;
    const uint64_t mn = (uint64_t)(a[1] & 0x3f3f3f3f) | (uint64_t)(((a[2] >> 4) & 0x0f0f0f0f) | ((a[1] >> 2) & 0x30303030)) << 32;
    const __m256i m = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn));
    const __m256i v = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc));
    *mv = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));
    *sv = _mm256_or_si256(v, _mm256_slli_epi32(v, 16));
}

/* K-quant octet, per super-block: codes (8 chunks x 8 vectors), 16 int16 scale vectors (vector j: row r's
 * scale of 16-group j in both int16 halves of lane r), 8 offset vectors (chunk c: Q4_K / Q5_K the min of
 * chunk c in both halves; Q6_K 32 x the scales of groups 2c, 2c + 1), d and dmin as f32 */
INL void octetK(int type, int64_t b0, int64_t nbs, const char *const row[8], char *ob, const char *pf, size_t ws) {
    const size_t wb = wblock_bytes(type), per = span_per(ws, nbs);
    for (int64_t i = 0; i < nbs; i++) {
        const size_t o = (size_t)(b0 + i) * wb;
        char *dst = ob + i * OBK;
        const char *rb[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) rb[r] = row[r] + o;
        prefetch_span(pf, per, i);
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            __m256i v[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) v[r] = kcodes(type, rb[r], c);
            transpose8(v);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) _mm256_store_si256((__m256i *)(dst + 256 * c + 32 * g), v[g]);
        }
        /* the scales as vectors per row (kheads), each int16 paired with itself, then transposed to rows in lanes */
        __m256i lo[8], hi[8], mv[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m256i sv;
            kheads(type, rb[r], &sv, &mv[r]);
            lo[r] = _mm256_unpacklo_epi16(sv, sv); /* groups 0-3 | 8-11 */
            hi[r] = _mm256_unpackhi_epi16(sv, sv); /* groups 4-7 | 12-15 */
        }
        transpose8(lo), transpose8(hi), transpose8(mv);
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            _mm256_store_si256((__m256i *)(dst + 2048 + 32 * g), lo[g]);
            _mm256_store_si256((__m256i *)(dst + 2048 + 32 * (8 + g)), lo[4 + g]);
            _mm256_store_si256((__m256i *)(dst + 2048 + 32 * (4 + g)), hi[g]);
            _mm256_store_si256((__m256i *)(dst + 2048 + 32 * (12 + g)), hi[4 + g]);
        }
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) _mm256_store_si256((__m256i *)(dst + 2560 + 32 * c), mv[c]);
        const bool q6 = type == GM_TYPE_Q6_K;
        _mm256_store_ps((float *)(dst + 2816), h2f_rows(rb, kd_off(type)));
        _mm256_store_ps((float *)(dst + 2848), q6 ? _mm256_setzero_ps() : h2f_rows(rb, 2));
    }
}

/* ------------------------------------------------------------------ x8 rows (kernels/pack.h GM_KTYPE_X8)
 *
 * The 32-code types packed at open in groups of 8 rows, each group block by block with the 8 rows' codes
 * already in octet order: one token reads a group-block straight into the octet vectors (no transpose, no
 * horizontal sums, one conversion for the 8 scales), more tokens get the octets by the same expansion. */

/* bytes before the fifth bits and before the codes in an x8 group-block: d[8] (and m[8]) f16 */
INL size_t x8_qh_off(int type) { return has_m(type) ? 32 : 16; }
INL size_t x8_qs_off(int type) { return x8_qh_off(type) + (five_bits(type) ? 32 : 0); }

/* octet vectors j and j + 4 (codes 4j .. 4j + 3 and 16 + 4j ..) of nibble-type group-block p */
INL void x8_nibbles(int type, const char *p, int j, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(p + x8_qs_off(type) + 32 * j));
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five_bits(type)) { /* bit j of each fifth-bit byte to bit 4 for group j, bit j + 4 for group j + 4 */
        const __m256i h = _mm256_loadu_si256((const __m256i *)(p + x8_qh_off(type))), b4 = _mm256_set1_epi8(16);
        *lo = _mm256_or_si256(*lo, _mm256_and_si256(_mm256_slli_epi16(h, 4 - j), b4));
        *hi = _mm256_or_si256(*hi, _mm256_and_si256(_mm256_srli_epi16(h, j), b4));
    }
}

/* The lines of the group-block X8_AHEAD bytes after p, up to end (the call's rows): with one thread the
 * hardware prefetcher alone left the one-token pass below the bound (tg128 1 thread +4-5%; docs/performance.md) */
INL void x8_prefetch(const char *p, size_t gb, const char *end) {
    for (size_t o = 0; o < gb; o += 64)
        if ((size_t)(end - p) > X8_AHEAD + o) _mm_prefetch(p + X8_AHEAD + o, _MM_HINT_T0);
}

/* K-quant group-superblocks (kernels/pack.h). Each chunk's 8 rows' scales come as int16 pairs (both halves of
 * lane r = row r's scale) for vpmaddwd against the chunk's int16 sums, and likewise the offsets (Q4_K / Q5_K
 * mins, Q6_K's 32 x scales) against the chunk's two bsums. */

/* lane r = (byte r, byte r) as int16 pairs, from 8 bytes at p */
INL __m256i pairs8(const uint8_t *p) {
    int64_t v;
    memcpy(&v, p, 8);
    const __m256i idx = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1, 4, -1, 4, -1, 5, -1, 5, -1,
                                         6, -1, 6, -1, 7, -1, 7, -1);
    return _mm256_shuffle_epi8(_mm256_set1_epi64x(v), idx);
}

/* Q4_K: the 6-bit scales (sm[0, 64): byte 8c + r) and mins (sm[64, 128)) of a group-superblock as bytes */
INL void q4k_scales(const char *p, uint8_t sm[128]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)(p + 32)), l1 = _mm256_loadu_si256((const __m256i *)(p + 64));
    const __m256i h = _mm256_loadu_si256((const __m256i *)(p + 96));
    _mm256_storeu_si256((__m256i *)sm, _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m30)));
    _mm256_storeu_si256((__m256i *)(sm + 32), _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(h, m30)));
    _mm256_storeu_si256((__m256i *)(sm + 64),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m30)));
    _mm256_storeu_si256((__m256i *)(sm + 96),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m30)));
}

/* Q6_K: chunk c's scale pairs (lane r: row r's scales 2c, 2c + 1 as int16) */
INL __m256i q6k_pairs(const char *p, int c) { return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 16 + 16 * c))); }
/* lane r = (low int16, low int16) / (high, high) of lane r of v */
INL __m256i dup_lo16(__m256i v) {
    const __m128i i = _mm_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    return _mm256_shuffle_epi8(v, _mm256_set_m128i(i, i));
}
INL __m256i dup_hi16(__m256i v) {
    const __m128i i = _mm_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    return _mm256_shuffle_epi8(v, _mm256_set_m128i(i, i));
}

/* Q6_K codes of chunks 4h .. 4h + 3, group g (octet vectors) */
INL void q6k_codes(const char *p, int h, int g, __m256i v[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const char *step = p + 144 + 96 * (8 * h + g); /* ql vectors 0, 1 and the qh vector, in the order read */
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)step);
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(step + 32));
    const __m256i q = _mm256_loadu_si256((const __m256i *)(step + 64));
    v[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(q, 4), m30));
    v[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(q, 2), m30));
    v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(q, m30));
    v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(q, 2), m30));
}

/* super-blocks [0, nbs) of the group-superblocks at p (gb bytes apart) into octet ob, as octetK leaves them */
INL void octet_x8k(int type, int64_t nbs, const char *p, size_t gb, char *ob) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < nbs; i++, p += gb) {
        char *dst = ob + i * OBK;
        if (type == GM_TYPE_Q4_K) {
            _Alignas(32) uint8_t sm[128];
            q4k_scales(p, sm);
            for (int cp = 0; cp < 4; cp++)
                for (int g = 0; g < 8; g++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * (8 * cp + g)));
                    _mm256_store_si256((__m256i *)(dst + 256 * (2 * cp) + 32 * g), _mm256_and_si256(v, m4));
                    _mm256_store_si256((__m256i *)(dst + 256 * (2 * cp + 1) + 32 * g), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                }
            for (int c = 0; c < 8; c++) {
                const __m256i sc = pairs8(sm + 8 * c);
                _mm256_store_si256((__m256i *)(dst + 2048 + 32 * (2 * c)), sc);
                _mm256_store_si256((__m256i *)(dst + 2048 + 32 * (2 * c + 1)), sc);
                _mm256_store_si256((__m256i *)(dst + 2560 + 32 * c), pairs8(sm + 64 + 8 * c));
            }
            _mm256_store_ps((float *)(dst + 2848), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16))));
        } else {
            for (int h = 0; h < 2; h++)
                for (int g = 0; g < 8; g++) {
                    __m256i v[4];
                    q6k_codes(p, h, g, v);
                    for (int k = 0; k < 4; k++) _mm256_store_si256((__m256i *)(dst + 256 * (4 * h + k) + 32 * g), v[k]);
                }
            for (int c = 0; c < 8; c++) {
                const __m256i pr = q6k_pairs(p, c);
                _mm256_store_si256((__m256i *)(dst + 2048 + 32 * (2 * c)), dup_lo16(pr));
                _mm256_store_si256((__m256i *)(dst + 2048 + 32 * (2 * c + 1)), dup_hi16(pr));
                _mm256_store_si256((__m256i *)(dst + 2560 + 32 * c), _mm256_slli_epi16(pr, 5));
            }
            _mm256_store_ps((float *)(dst + 2848), _mm256_setzero_ps());
        }
        _mm256_store_ps((float *)(dst + 2816), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
    }
}

/* rows [r0, r0 + 8) of w, the last ones repeated where fewer remain */
INL int octet_rows(const char *w, size_t ws, int64_t r0, int64_t rows, const char *row[8]) {
    const int nr = rows - r0 < 8 ? (int)(rows - r0) : 8;
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) row[r] = w + (size_t)(r0 + (r < nr ? r : nr - 1)) * ws;
    return nr;
}

/* the 8 rows after the pass at r0 when they are all there and whole (a slice of blocks is not one span) */
INL const char *next_rows(const char *w, size_t ws, int64_t r0, int64_t rows, bool whole) {
    return whole && r0 + 16 <= rows ? w + (size_t)(r0 + 8) * ws : NULL;
}

#endif
