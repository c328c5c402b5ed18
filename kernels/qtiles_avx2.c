/* kernels/qtiles_avx2.c — AVX2 matmul kernels for the quantized weight types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1,
 * Q4_K, Q5_K, Q6_K) over the scalar reference's activation blocks (Q8_0, Q8_1, Q8_K), with eight weight
 * rows in the eight int32 lanes of a vector.
 *
 * Why rows in lanes: vpmaddubsw + vpmaddwd leave 8 int32 partial sums. When the 8 lanes belong to one row,
 * each 32-code block costs a convert, a scale and an fmadd per (row, token) on top of the 2 integer ops,
 * and 8 partial lanes still need a horizontal sum. With lane r holding row r, one convert / scale /
 * fmadd serves 8 rows, and for codes below 32 the int16 products of 4 or 8 code groups add up before one
 * vpmaddwd: ~21 instructions per 8 rows x 32 codes x 1 token for Q5_0 where one row at a time took 48.
 *
 * The arithmetic, identical in every path of this file and in gm_avx2_vec_dot (so a (row, token) output
 * has the same bits in a decode pass, a prefill tile, alone or in any batch): per block b in order (32
 * codes; a 256-code super-block for K-quants) the exact int32 dot isum_b, then in f32 from 0
 *   32-code types:  acc = fma((float)isum_b, dw_b * da_b, acc)
 *                   Q4_1 / Q5_1 also acc = fma(m_b, s_b, acc)          (the offset m times d * sum(x))
 *   Q4_K / Q5_K:    acc = fma((float)isum_b, d * da, acc); acc = fma((float)msum_b, -(dmin * da), acc)
 *   Q6_K:           acc = fma((float)(isum_b - msum_b), d * da, acc)  (msum_b: the code offset 32 x bsums)
 * The integers are exact however they are summed, and the f32 steps are lane-wise, so they do not depend
 * on which lane or which instruction sequence carries them.
 *
 * Two routes to these numbers:
 *  - one token (decode): 8 rows read side by side from the file's blocks; each row's block gives 8 partial
 *    int32 lanes, and a transpose-add of the 8 rows' vectors puts row r's total in lane r;
 *  - more tokens: 8 rows decoded once into an "octet" (codes as bytes, vector g of a block holding codes
 *    4g .. 4g+3 of row r in lane r), then register tiles of 8 rows x T tokens in which a token contributes
 *    one broadcast of 4 activation bytes per group.
 * Where the model packed the rows at open (x8, kernels/pack.h), the codes are stored in octet order already:
 * one token takes them straight into the octet vectors (no transpose, no horizontal sums, one conversion
 * for 8 rows' scales), more tokens build the octets by the same expansion. */
#ifndef QT_VNNI
#define QT_VNNI 0
#endif
#if QT_VNNI /* kernels/qtiles_vnni.c: this file again with AVX-512 VNNI on 256-bit vectors, under its own names */
#define gm_avx2_qdot gm_vnni_qdot
#define gm_avx2_qtiles gm_vnni_qtiles
#define gm_avx2_qx8_tiles gm_vnni_qx8_tiles
#endif
#include "kernels/gemm.h"

#include <stddef.h>
#include <string.h>

#include "quant/blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && \
    (!QT_VNNI || (defined(__AVX512VL__) && defined(__AVX512VNNI__)))
#include "kernels/qtiles_avx2.h" /* the block decoders, octets and x8 layouts these kernels share with mtok_avx2.c */

/* loops over a tile's tokens, fully unrolled */
#if QT_VNNI
#define QT_UNROLL_T _Pragma("GCC unroll 8")
#else
#define QT_UNROLL_T _Pragma("GCC unroll 4")
#endif

enum {
    TQ = QT_VNNI ? 6 : 4, /* tokens per register tile (VNNI: 32 registers, no int16 sums) */
    OCT_BYTES = 49152,    /* octet buffer (stack): longer rows go in slices of blocks */
    SIDE_ENTRIES = 4096,  /* per-(token, block) activation terms of one call (stack, 8 bytes each) */
    K_TOKENS = 64,        /* K-quant tokens per octet pass: 64 Q8_K rows of 2048 codes stay in L2 */
};

/* lane r = the sum of the 8 lanes of p[r] */
INL __m256i hsum_rows(const __m256i p[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* ------------------------------------------------------------------ one token: 8 file rows side by side */

/* p[r]: the 8 partial int32 lanes of row r's block b (32-code types) against activation codes av
 * (offset codes: minus offset32 x the activation's pair sums c16, exact in int16) */
INL __m256i part32(int type, const char *blk, __m256i av, __m256i c16) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i q = codes32(type, blk);
    if (type == GM_TYPE_Q8_0) return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(av, q)), ones);
    __m256i m = _mm256_maddubs_epi16(q, av);
    if (offset32(type)) m = _mm256_sub_epi16(m, c16);
    return _mm256_madd_epi16(m, ones);
}

/* y lanes of 8 rows (pointers, repeats allowed) for one token; pf: the 8 rows after these (prefetch_span) */
INL __m256 direct32(int type, int64_t nb, const char *const row[8], const char *a, const char *pf, size_t ws) {
    const size_t wb = wblock_bytes(type), ab = ablock_bytes(type), per = span_per(ws, nb);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t o = (size_t)b * wb;
        prefetch_span(pf, per, b);
        const char *blk = a + b * ab;
        const __m256i av = _mm256_loadu_si256((const __m256i *)aqs(type, blk));
        const __m256i c16 = _mm256_maddubs_epi16(_mm256_set1_epi8((char)offset32(type)), av);
        __m256i p[8];
        const char *rb[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) rb[r] = row[r] + o, p[r] = part32(type, rb[r], av, c16);
        const __m256 da = _mm256_set1_ps(h2f(ld16(blk)));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum_rows(p)), _mm256_mul_ps(h2f_rows(rb, 0), da), acc);
        if (has_m(type)) acc = _mm256_fmadd_ps(h2f_rows(rb, 2), _mm256_set1_ps(h2f(ld16(blk + 2))), acc);
    }
    return acc;
}

/* int16 scales of chunk c's two 16-code groups (2c in the low 8 lanes, 2c + 1 in the high 8) from sc[16]
 * repeated in both halves (s_lo: sc[0..7], s_hi: sc[8..15]): one in-lane byte shuffle */
INL __m256i kscale_pair(__m256i s, int c) {
    const int g = 4 * (c % 4); /* byte offset of group 2c within its 128-bit half */
    return _mm256_shuffle_epi8(s, _mm256_set_m128i(_mm_set1_epi16((short)((g + 3) << 8 | (g + 2))),
                                                   _mm_set1_epi16((short)((g + 1) << 8 | g))));
}

INL __m256 directK(int type, int64_t nb, const char *const row[8], const char *a, const char *pf, size_t ws) {
    const size_t wb = wblock_bytes(type), per = span_per(ws, nb);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const size_t o = (size_t)i * wb;
        prefetch_span(pf, per, i);
        const gm_block_q8_K *yb = (const gm_block_q8_K *)a + i;
        const __m256i bs = _mm256_loadu_si256((const __m256i *)yb->bsums);
        __m256i is[8], ms[8];
        const char *rb[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            const char *blk = rb[r] = row[r] + o;
            __m256i sv, mv;
            kheads(type, blk, &sv, &mv);
            const __m256i s_lo = _mm256_permute2x128_si256(sv, sv, 0x00), s_hi = _mm256_permute2x128_si256(sv, sv, 0x11);
            __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++) {
                const __m256i u = kcodes(type, blk, c);
                const __m256i av = _mm256_loadu_si256((const __m256i *)(yb->qs + 32 * c));
                s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), kscale_pair(c < 4 ? s_lo : s_hi, c)));
            }
            is[r] = s;
            ms[r] = _mm256_madd_epi16(bs, mv);
        }
        const __m256 da = _mm256_set1_ps(yb->d);
        const __m256i isum = hsum_rows(is), msum = hsum_rows(ms);
        const __m256 dv = _mm256_mul_ps(h2f_rows(rb, kd_off(type)), da);
        if (type == GM_TYPE_Q6_K) {
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, msum)), dv, acc);
        } else {
            const __m256 nm = _mm256_xor_ps(_mm256_mul_ps(h2f_rows(rb, 2), da), _mm256_set1_ps(-0.0f));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dv, acc);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(msum), nm, acc);
        }
    }
    return acc;
}

/* ------------------------------------------------------------------ many tokens: octets and register tiles */

/* Rows row[0..7] (repeats allowed), blocks [b0, b0 + nbs), into octet ob (32-byte aligned); pf: the next
 * octet's 8 whole rows (prefetch_span; NULL: none). */
INL void octet32(int type, int64_t b0, int64_t nbs, const char *const row[8], char *ob, const char *pf, size_t ws) {
    const size_t wb = wblock_bytes(type), per = span_per(ws, nbs);
    for (int64_t b = 0; b < nbs; b++) {
        const size_t o = (size_t)(b0 + b) * wb;
        prefetch_span(pf, per, b);
        __m256i v[8];
        const char *rb[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) rb[r] = row[r] + o, v[r] = codes32(type, rb[r]);
        transpose8(v);
        char *dst = ob + b * OB32;
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) _mm256_store_si256((__m256i *)(dst + 32 * g), v[g]);
        _mm256_store_ps((float *)(dst + 256), h2f_rows(rb, 0));
        if (has_m(type)) _mm256_store_ps((float *)(dst + 288), h2f_rows(rb, 2));
    }
}

/* per (token, block) activation terms of a 32-code call: da, and the offset's -offset32 x sum(codes) or
 * Q8_1's s */
typedef struct {
    float da;
    union {
        int32_t corr;
        float sa;
    };
} side_t;

INL int32_t sum32(const int8_t *q) {
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)q)),
                                        _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

INL void side32(int type, int64_t nbs, const char *a, size_t as, int64_t nt, side_t *sd) {
    const size_t ab = ablock_bytes(type);
    for (int64_t t = 0; t < nt; t++)
        for (int64_t b = 0; b < nbs; b++) {
            const char *blk = a + t * as + b * ab;
            side_t *s = &sd[t * nbs + b];
            s->da = h2f(ld16(blk));
            if (has_m(type)) s->sa = h2f(ld16(blk + 2));
            else s->corr = -offset32(type) * sum32(aqs(type, blk));
        }
}

/* acc[t] += blocks [0, nbs) of octet ob . token t (a: its first block, tokens as apart; sd: its side terms,
 * nbs per token). Codes below 16 (Q4_0, Q4_1) add 8 groups' int16 pair sums before one vpmaddwd, codes
 * below 32 (Q5_0, Q5_1) 4 groups: 8 x 2 x 15 x 128 and 4 x 2 x 31 x 128 stay below 2^15. Q8_0 (signed
 * codes): |w| against the activation with w's signs, one vpmaddwd per group. */
INL void kern32(int type, int T, int64_t nbs, const char *ob, const char *a, size_t as, const side_t *sd,
                __m256 acc[TQ]) {
    const size_t ab = ablock_bytes(type), qo = has_m(type) ? offsetof(gm_block_q8_1, qs) : offsetof(gm_block_q8_0, qs);
    const __m256i ones = _mm256_set1_epi16(1);
    const int gs = type == GM_TYPE_Q8_0 ? 1 : five_bits(type) ? 4 : 8; /* groups per int16 sum */
    for (int64_t b = 0; b < nbs; b++) {
        const char *wb = ob + b * OB32;
        __m256i is[TQ], s[TQ];
QT_UNROLL_T
        for (int t = 0; t < T; t++) is[t] = _mm256_setzero_si256(), s[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i w = _mm256_load_si256((const __m256i *)(wb + 32 * g));
            const __m256i u = type == GM_TYPE_Q8_0 ? _mm256_sign_epi8(w, w) : w;
QT_UNROLL_T
            for (int t = 0; t < T; t++) {
                __m256i x = bcast32(a + t * as + b * ab + qo + 4 * g);
                if (type == GM_TYPE_Q8_0) x = _mm256_sign_epi8(x, w);
#if QT_VNNI
                is[t] = _mm256_dpbusd_epi32(is[t], u, x); /* the same int32 sums in one instruction */
                (void)s, (void)gs, (void)ones;
#else
                s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(u, x));
                if (g % gs == gs - 1) {
                    is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(s[t], ones));
                    s[t] = _mm256_setzero_si256();
                }
#endif
            }
        }
        const __m256 dw = _mm256_load_ps((const float *)(wb + 256));
QT_UNROLL_T
        for (int t = 0; t < T; t++) {
            const side_t *e = &sd[t * nbs + b];
            if (offset32(type)) is[t] = _mm256_add_epi32(is[t], _mm256_set1_epi32(e->corr));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_mul_ps(dw, _mm256_set1_ps(e->da)), acc[t]);
            if (has_m(type)) acc[t] = _mm256_fmadd_ps(_mm256_load_ps((const float *)(wb + 288)), _mm256_set1_ps(e->sa), acc[t]);
        }
    }
}

/* kernK's two steps both routes share: chunk c's offset sums (mins, Q6_K's 32) from the bsums, and a super-block's
 * f32 steps */
INL void kmins(int T, const char *wb, const char *a, size_t as, int64_t i, int c, __m256i ms[TQ]) {
    const __m256i mv = _mm256_load_si256((const __m256i *)(wb + 2560 + 32 * c));
QT_UNROLL_T
    for (int t = 0; t < T; t++) {
        const gm_block_q8_K *yb = (const gm_block_q8_K *)(a + t * as) + i;
        ms[t] = _mm256_add_epi32(ms[t], _mm256_madd_epi16(mv, bcast32(yb->bsums + 2 * c)));
    }
}

INL void kfinish(int type, int T, const char *wb, const char *a, size_t as, int64_t i, const __m256i is[TQ],
                 const __m256i ms[TQ], __m256 acc[TQ]) {
    const __m256 d = _mm256_load_ps((const float *)(wb + 2816)), dm = _mm256_load_ps((const float *)(wb + 2848));
QT_UNROLL_T
    for (int t = 0; t < T; t++) {
        const __m256 da = _mm256_set1_ps(((const gm_block_q8_K *)(a + t * as) + i)->d);
        const __m256 dv = _mm256_mul_ps(d, da);
        if (type == GM_TYPE_Q6_K) {
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(is[t], ms[t])), dv, acc[t]);
        } else {
            const __m256 nm = _mm256_xor_ps(_mm256_mul_ps(dm, da), _mm256_set1_ps(-0.0f));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), dv, acc[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms[t]), nm, acc[t]);
        }
    }
}

#if QT_VNNI
/* kernK with VNNI: one vpdpbusd per group and token adds its 4 products into int32 (no int16 step: the AVX2
 * route's vpmaddubsw, vpaddw and vpmaddwd become one instruction), each scale's 32 (Q4_K / Q5_K) or 16 (Q6_K)
 * codes then times the scale by vpmulld. The same integers, so the same bits as the AVX2 route below. */
INL __m256i kscale32(const char *p) { /* lane r = (s, s) as int16 -> s as int32 */
    return _mm256_srai_epi32(_mm256_slli_epi32(_mm256_load_si256((const __m256i *)p), 16), 16);
}

INL void kernK(int type, int T, int64_t nbs, const char *ob, const char *a, size_t as, __m256 acc[TQ]) {
    const int per = type == GM_TYPE_Q6_K ? 4 : 8; /* groups of 4 codes under one scale */
    for (int64_t i = 0; i < nbs; i++) {
        const char *wb = ob + i * OBK;
        __m256i is[TQ], ms[TQ], s[TQ];
QT_UNROLL_T
        for (int t = 0; t < T; t++) is[t] = ms[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
#pragma GCC unroll 2
            for (int g0 = 0; g0 < 8; g0 += per) {
QT_UNROLL_T
                for (int t = 0; t < T; t++) s[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int g = g0; g < g0 + per; g++) {
                    const __m256i w = _mm256_load_si256((const __m256i *)(wb + 256 * c + 32 * g));
QT_UNROLL_T
                    for (int t = 0; t < T; t++) {
                        const gm_block_q8_K *yb = (const gm_block_q8_K *)(a + t * as) + i;
                        s[t] = _mm256_dpbusd_epi32(s[t], w, bcast32(yb->qs + 32 * c + 4 * g));
                    }
                }
                const __m256i sc = kscale32(wb + 2048 + 32 * (2 * c + g0 / 4));
QT_UNROLL_T
                for (int t = 0; t < T; t++) is[t] = _mm256_add_epi32(is[t], _mm256_mullo_epi32(s[t], sc));
            }
            kmins(T, wb, a, as, i, c, ms);
        }
        kfinish(type, T, wb, a, as, i, is, ms, acc);
    }
}
#else
/* the same for K-quants: int16 sums of 8 groups (Q4_K, codes < 16), 4 (Q5_K, < 32) or 2 (Q6_K, < 64) before
 * one vpmaddwd with the groups' scales; the offsets (mins, Q6_K's 32) from bsums per chunk */
INL void kernK(int type, int T, int64_t nbs, const char *ob, const char *a, size_t as, __m256 acc[TQ]) {
    const int gs = type == GM_TYPE_Q4_K ? 8 : type == GM_TYPE_Q5_K ? 4 : 2;
    for (int64_t i = 0; i < nbs; i++) {
        const char *wb = ob + i * OBK;
        __m256i is[TQ], ms[TQ], s[TQ];
QT_UNROLL_T
        for (int t = 0; t < T; t++) is[t] = ms[t] = s[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m256i w = _mm256_load_si256((const __m256i *)(wb + 256 * c + 32 * g));
                const __m256i sc = _mm256_load_si256((const __m256i *)(wb + 2048 + 32 * (2 * c + g / 4)));
QT_UNROLL_T
                for (int t = 0; t < T; t++) {
                    const gm_block_q8_K *yb = (const gm_block_q8_K *)(a + t * as) + i;
                    s[t] = _mm256_add_epi16(s[t], _mm256_maddubs_epi16(w, bcast32(yb->qs + 32 * c + 4 * g)));
                    if (g % gs == gs - 1) {
                        is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(s[t], sc));
                        s[t] = _mm256_setzero_si256();
                    }
                }
            }
            kmins(T, wb, a, as, i, c, ms);
        }
        kfinish(type, T, wb, a, as, i, is, ms, acc);
    }
}
#endif

/* ------------------------------------------------------------------ x8 rows (kernels/pack.h GM_KTYPE_X8;
 * their decoders in qtiles_avx2.h) */

/* One token, one group: acc + blocks [0, nbs) of the group-blocks at p (gb bytes apart) . activation blocks
 * a (sd: their side terms) — kern32's operations for one token, with the octet vectors from registers. */
INL __m256 x8_direct(int type, int64_t nbs, const char *p, size_t gb, const char *a, const side_t *sd, __m256 acc,
                     const char *end) {
    const size_t ab = ablock_bytes(type);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nbs; b++, p += gb) {
        x8_prefetch(p, gb, end);
        const int8_t *q = aqs(type, a + b * ab);
        __m256i is = _mm256_setzero_si256();
        if (type == GM_TYPE_Q8_0) {
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(p + x8_qs_off(type) + 32 * g));
                const __m256i x = _mm256_sign_epi8(bcast32(q + 4 * g), w);
                is = _mm256_add_epi32(is, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), x), ones));
            }
        } else {
            __m256i s_lo = _mm256_setzero_si256(), s_hi = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m256i lo, hi;
                x8_nibbles(type, p, j, &lo, &hi);
                s_lo = _mm256_add_epi16(s_lo, _mm256_maddubs_epi16(lo, bcast32(q + 4 * j)));
                s_hi = _mm256_add_epi16(s_hi, _mm256_maddubs_epi16(hi, bcast32(q + 16 + 4 * j)));
            }
            /* int16 sums of 4 groups each for 5-bit codes, of all 8 for 4-bit ones (kern32's bounds) */
            is = five_bits(type) ? _mm256_add_epi32(_mm256_madd_epi16(s_lo, ones), _mm256_madd_epi16(s_hi, ones))
                                 : _mm256_madd_epi16(_mm256_add_epi16(s_lo, s_hi), ones);
            if (offset32(type)) is = _mm256_add_epi32(is, _mm256_set1_epi32(sd[b].corr));
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(dw, _mm256_set1_ps(sd[b].da)), acc);
        if (has_m(type)) acc = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16))), _mm256_set1_ps(sd[b].sa), acc);
    }
    return acc;
}

/* blocks [0, nbs) of the group-blocks at p (gb bytes apart) into octet ob, as octet32 leaves them */
INL void octet_x8(int type, int64_t nbs, const char *p, size_t gb, char *ob) {
    for (int64_t b = 0; b < nbs; b++, p += gb) {
        char *dst = ob + b * OB32;
        if (type == GM_TYPE_Q8_0) {
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++)
                _mm256_store_si256((__m256i *)(dst + 32 * g), _mm256_loadu_si256((const __m256i *)(p + x8_qs_off(type) + 32 * g)));
        } else {
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m256i lo, hi;
                x8_nibbles(type, p, j, &lo, &hi);
                _mm256_store_si256((__m256i *)(dst + 32 * j), lo);
                _mm256_store_si256((__m256i *)(dst + 32 * (j + 4)), hi);
            }
        }
        _mm256_store_ps((float *)(dst + 256), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
        if (has_m(type)) _mm256_store_ps((float *)(dst + 288), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16))));
    }
}

/* One token, one group: acc + super-blocks [0, nbs) of the group-superblocks at p (gb bytes apart) . Q8_K
 * blocks a — kernK's operations for one token. */
INL __m256 x8k_direct(int type, int64_t nbs, const char *p, size_t gb, const char *a, __m256 acc, const char *end) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int64_t i = 0; i < nbs; i++, p += gb) {
        x8_prefetch(p, gb, end);
        const gm_block_q8_K *yb = (const gm_block_q8_K *)a + i;
        __m256i is = _mm256_setzero_si256(), ms = _mm256_setzero_si256();
        const __m256 da = _mm256_set1_ps(yb->d), d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        if (type == GM_TYPE_Q4_K) {
            _Alignas(32) uint8_t sm[128];
            q4k_scales(p, sm);
#pragma GCC unroll 4
            for (int cp = 0; cp < 4; cp++) { /* chunks 2cp (low nibbles), 2cp + 1 (high) */
                __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
                for (int g = 0; g < 8; g++) {
                    const __m256i v = _mm256_loadu_si256((const __m256i *)(p + 128 + 32 * (8 * cp + g)));
                    s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_and_si256(v, m4), bcast32(yb->qs + 64 * cp + 4 * g)));
                    s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                                                   bcast32(yb->qs + 64 * cp + 32 + 4 * g)));
                }
                is = _mm256_add_epi32(is, _mm256_madd_epi16(s0, pairs8(sm + 16 * cp)));
                is = _mm256_add_epi32(is, _mm256_madd_epi16(s1, pairs8(sm + 16 * cp + 8)));
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(pairs8(sm + 64 + 16 * cp), bcast32(yb->bsums + 4 * cp)));
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(pairs8(sm + 64 + 16 * cp + 8), bcast32(yb->bsums + 4 * cp + 2)));
            }
            const __m256 nm = _mm256_xor_ps(_mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16))), da),
                                            _mm256_set1_ps(-0.0f));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_mul_ps(d, da), acc);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), nm, acc);
        } else {
            /* not unrolled: 16 ymm registers hold one step's 4 sums, codes and constants, no more */
#pragma GCC unroll 1
            for (int h = 0; h < 2; h++) {
#pragma GCC unroll 1
                for (int g0 = 0; g0 < 8; g0 += 2) { /* int16 sums of 2 groups (codes < 64) */
                    __m256i sk[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 2
                    for (int g = g0; g < g0 + 2; g++) {
                        __m256i v[4];
                        q6k_codes(p, h, g, v);
#pragma GCC unroll 4
                        for (int k = 0; k < 4; k++)
                            sk[k] = _mm256_add_epi16(sk[k], _mm256_maddubs_epi16(v[k], bcast32(yb->qs + 32 * (4 * h + k) + 4 * g)));
                    }
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        const __m256i pr = q6k_pairs(p, 4 * h + k);
                        is = _mm256_add_epi32(is, _mm256_madd_epi16(sk[k], g0 < 4 ? dup_lo16(pr) : dup_hi16(pr)));
                    }
                }
            }
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                ms = _mm256_add_epi32(ms, _mm256_madd_epi16(_mm256_slli_epi16(q6k_pairs(p, c), 5), bcast32(yb->bsums + 2 * c)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(is, ms)), _mm256_mul_ps(d, da), acc);
        }
    }
    return acc;
}

/* T tokens (a: the first, at block b0 of a slice; y: its outputs for the octet's nr rows). A slice after
 * the first continues the f32 sums it left in y: the same sequence of operations as one pass. */
INL void tile(int type, int T, int64_t b0, int64_t nbs, const char *ob, const char *a, size_t as, const side_t *sd,
              float *y, int64_t ldy, int nr) {
    __m256 acc[TQ];
QT_UNROLL_T
    for (int t = 0; t < T; t++) acc[t] = b0 ? load_rows(y + t * ldy, nr) : _mm256_setzero_ps();
    if (kquant(type)) kernK(type, T, nbs, ob, a, as, acc);
    else kern32(type, T, nbs, ob, a, as, sd, acc);
QT_UNROLL_T
    for (int t = 0; t < T; t++) store_rows(y + t * ldy, acc[t], nr);
}

/* One token on x8 rows: (32-code types) side terms per slice of blocks, then each group straight from the
 * packed bytes. */
INL void x8_decode(int type, int64_t nb, const char *w, size_t ws, int64_t rows, const char *a, float *y) {
    const size_t ab = ablock_bytes(type), gb = 8 * wblock_bytes(type);
    const char *end = w + (size_t)rows * ws;
    if (kquant(type)) {
        for (int64_t r0 = 0; r0 < rows; r0 += 8)
            store_rows(y + r0, x8k_direct(type, nb, w + (size_t)r0 * ws, gb, a, _mm256_setzero_ps(), end), rows - r0 < 8 ? (int)(rows - r0) : 8);
        return;
    }
    side_t sd[SIDE_ENTRIES];
    for (int64_t k0 = 0; k0 < nb; k0 += SIDE_ENTRIES) {
        const int64_t nbs = nb - k0 < SIDE_ENTRIES ? nb - k0 : SIDE_ENTRIES;
        side32(type, nbs, a + k0 * ab, 0, 1, sd);
        for (int64_t r0 = 0; r0 < rows; r0 += 8) {
            const int nr = rows - r0 < 8 ? (int)(rows - r0) : 8;
            const __m256 acc = k0 ? load_rows(y + r0, nr) : _mm256_setzero_ps();
            store_rows(y + r0, x8_direct(type, nbs, w + (size_t)r0 * ws + (size_t)k0 * gb, gb, a + k0 * ab, sd, acc, end), nr);
        }
    }
}

/* x8: w is packed (kernels/pack.h) from a group start, rows in groups of 8 (ws: the file's row bytes) */
INL void qtiles(int type, bool x8, int64_t n, const char *w, size_t ws, int64_t rows, const char *a, size_t as,
                int64_t n_tok, float *y, int64_t ldy) {
    const bool K = kquant(type);
    const int64_t nb = n / (K ? 256 : 32);
    const size_t ab = ablock_bytes(type);
    const char *row[8];
    if (n_tok == 1 && x8) {
        x8_decode(type, nb, w, ws, rows, a, y);
        return;
    }
    if (n_tok == 1) {
        for (int64_t r0 = 0; r0 < rows; r0 += 8) {
            const int nr = octet_rows(w, ws, r0, rows, row);
            const char *pf = next_rows(w, ws, r0, rows, true);
            store_rows(y + r0, K ? directK(type, nb, row, a, pf, ws) : direct32(type, nb, row, a, pf, ws), nr);
        }
        return;
    }
    _Alignas(32) char ob[OCT_BYTES];
    side_t sd[SIDE_ENTRIES];
    const size_t obb = K ? OBK : OB32;
    const int64_t kb = nb < (int64_t)(OCT_BYTES / obb) ? nb : (int64_t)(OCT_BYTES / obb); /* blocks per slice */
    const int64_t tc = K ? K_TOKENS : SIDE_ENTRIES / kb;                                  /* tokens per pass */
    for (int64_t k0 = 0; k0 < nb; k0 += kb) {
        const int64_t nbs = nb - k0 < kb ? nb - k0 : kb;
        for (int64_t t0 = 0; t0 < n_tok; t0 += tc) {
            const int64_t nt = n_tok - t0 < tc ? n_tok - t0 : tc;
            const char *at = a + t0 * as + k0 * ab;
            if (!K) side32(type, nbs, at, as, nt, sd);
            for (int64_t r0 = 0; r0 < rows; r0 += 8) {
                const int nr = octet_rows(w, ws, r0, rows, row);
                if (x8) {
                    const size_t gb = 8 * wblock_bytes(type);
                    if (K) octet_x8k(type, nbs, w + (size_t)r0 * ws + (size_t)k0 * gb, gb, ob);
                    else octet_x8(type, nbs, w + (size_t)r0 * ws + (size_t)k0 * gb, gb, ob);
                } else {
                    const char *pf = next_rows(w, ws, r0, rows, nbs == nb);
                    if (K) octetK(type, k0, nbs, row, ob, pf, ws);
                    else octet32(type, k0, nbs, row, ob, pf, ws);
                }
                float *yo = y + t0 * ldy + r0;
                int64_t t = 0;
                for (; t + TQ <= nt; t += TQ) tile(type, TQ, k0, nbs, ob, at + t * as, as, sd + t * nbs, yo + t * ldy, ldy, nr);
                switch (nt - t) {
#if QT_VNNI
                case 5: tile(type, 5, k0, nbs, ob, at + t * as, as, sd + t * nbs, yo + t * ldy, ldy, nr); break;
                case 4: tile(type, 4, k0, nbs, ob, at + t * as, as, sd + t * nbs, yo + t * ldy, ldy, nr); break;
#endif
                case 3: tile(type, 3, k0, nbs, ob, at + t * as, as, sd + t * nbs, yo + t * ldy, ldy, nr); break;
                case 2: tile(type, 2, k0, nbs, ob, at + t * as, as, sd + t * nbs, yo + t * ldy, ldy, nr); break;
                case 1: tile(type, 1, k0, nbs, ob, at + t * as, as, sd + t * nbs, yo + t * ldy, ldy, nr); break;
                default: break;
                }
            }
        }
    }
}

/* the single dot is the decode pass with its row in all 8 lanes (8 times the work, the same bits; tests and
 * the fallback path use it, the matmul never does) */
#define QTYPE(name, TYPE)                                                                                       \
    static void dot_##name(int64_t n, float *s, const void *w, const void *a) {                                \
        const char *row[8];                                                                                     \
        for (int r = 0; r < 8; r++) row[r] = w;                                                                 \
        const __m256 v = kquant(TYPE) ? directK(TYPE, n / 256, row, a, NULL, 0) : direct32(TYPE, n / 32, row, a, NULL, 0); \
        *s = _mm256_cvtss_f32(v);                                                                               \
    }                                                                                                           \
    static void tiles_##name(int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as,      \
                             int64_t n_tok, float *y, int64_t ldy) {                                            \
        qtiles(TYPE, false, n, w, ws, rows, a, as, n_tok, y, ldy);                                              \
    }
QTYPE(q8_0, GM_TYPE_Q8_0)
QTYPE(q4_0, GM_TYPE_Q4_0)
QTYPE(q5_0, GM_TYPE_Q5_0)
QTYPE(q4_1, GM_TYPE_Q4_1)
QTYPE(q5_1, GM_TYPE_Q5_1)
QTYPE(q4_K, GM_TYPE_Q4_K)
QTYPE(q5_K, GM_TYPE_Q5_K)
QTYPE(q6_K, GM_TYPE_Q6_K)

/* the 32-code types over x8 rows (kernels/pack.h) */
#define X8TYPE(name, TYPE)                                                                                      \
    static void x8tiles_##name(int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as,    \
                               int64_t n_tok, float *y, int64_t ldy) {                                          \
        qtiles(TYPE, true, n, w, ws, rows, a, as, n_tok, y, ldy);                                               \
    }
X8TYPE(q8_0, GM_TYPE_Q8_0)
X8TYPE(q4_0, GM_TYPE_Q4_0)
X8TYPE(q5_0, GM_TYPE_Q5_0)
X8TYPE(q4_1, GM_TYPE_Q4_1)
X8TYPE(q5_1, GM_TYPE_Q5_1)
X8TYPE(q4_K, GM_TYPE_Q4_K)
X8TYPE(q6_K, GM_TYPE_Q6_K)

/* one row per type (ggml's trait-table style) */
typedef struct {
    int type;
    gm_vec_dot_fn dot;
    gm_avx2_tiles_fn tiles, x8tiles;
} qtype_row;

static const qtype_row qtypes[] = {
    {GM_TYPE_Q8_0, dot_q8_0, tiles_q8_0, x8tiles_q8_0}, {GM_TYPE_Q4_0, dot_q4_0, tiles_q4_0, x8tiles_q4_0},
    {GM_TYPE_Q5_0, dot_q5_0, tiles_q5_0, x8tiles_q5_0}, {GM_TYPE_Q4_1, dot_q4_1, tiles_q4_1, x8tiles_q4_1},
    {GM_TYPE_Q5_1, dot_q5_1, tiles_q5_1, x8tiles_q5_1}, {GM_TYPE_Q4_K, dot_q4_K, tiles_q4_K, x8tiles_q4_K},
    {GM_TYPE_Q5_K, dot_q5_K, tiles_q5_K, NULL},         {GM_TYPE_Q6_K, dot_q6_K, tiles_q6_K, x8tiles_q6_K},
};

static const qtype_row *qtype_of(int type) {
    static const qtype_row none = {0};
    for (size_t i = 0; i < sizeof qtypes / sizeof qtypes[0]; i++)
        if (qtypes[i].type == type) return &qtypes[i];
    return &none;
}

gm_vec_dot_fn gm_avx2_qdot(int type) { return qtype_of(type)->dot; }
gm_avx2_tiles_fn gm_avx2_qtiles(int type) { return qtype_of(type)->tiles; }
gm_avx2_tiles_fn gm_avx2_qx8_tiles(int type) { return qtype_of(type)->x8tiles; }

#else

gm_vec_dot_fn gm_avx2_qdot(int type) { (void)type; return NULL; }
gm_avx2_tiles_fn gm_avx2_qtiles(int type) { (void)type; return NULL; }
gm_avx2_tiles_fn gm_avx2_qx8_tiles(int type) { (void)type; return NULL; }

#endif
