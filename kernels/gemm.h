/* kernels/gemm.h — internal: the SIMD matmul back-ends that kernels/matmul.c dispatches to.
 *
 * AVX-512 (kernels/gemm_avx512.c) works on an "unpacked" form of both operands so one inner loop
 * serves every quantized type:
 *   weight row:  u[npad] unsigned 8-bit codes, sw[npad/4] f32 scale per group of 4 codes (one int32
 *                lane of vpdpbusd), off[n256/16] f32 per-16-element offsets (Q4_1/Q5_1 m, K-quant
 *                mins), all zero padded;
 *   token:       a[npad] int8 codes, sa[npad/4] f32 scales, init[npad/4] int32 = -o * (sum of the
 *                4 codes of the lane) where o is the weight type's code offset (8 for Q4_0, 16 for
 *                Q5_0, 32 for Q6_K, 128 for Q8_0 whose codes are stored as w ^ 0x80), and
 *                t16[n256/16] f32 = scale * sum of 16 codes.
 *   y[r,t] = reduce_add( sum_chunks cvt(dpbusd(init_t, u_r, a_t)) * sw_r * sa_t  -  sum_g off_r[g] t16_t[g] )
 * Each (row, token) output goes through the same operations in the same order whatever the tile
 * shape, thread split or number of tokens: decode (1 token) and prefill give identical results. */
#ifndef GM_KERNELS_GEMM_H
#define GM_KERNELS_GEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- AVX-512 (F, BW, DQ, VL, VNNI). `type` is a gm_type or a packed kernel type of kernels/pack.h
 * (GM_KTYPE_Q5_0X16: weights in that layout; tokens prepared as for Q5_0 plus one f32 scale per
 * 32-code block after them, sab[pad64(n) / 32]). */
bool gm_avx512_supports(int type);
size_t gm_avx512_tok_bytes(int type, int64_t n);  /* prepared bytes per token (multiple of 64) */
size_t gm_avx512_rows_bytes(int type, int64_t n); /* per-thread scratch for unpacked rows */
/* Quantizes token x (n floats) for weights of `type` into tok (64-byte aligned). */
void gm_avx512_prep(int type, const float *x, int64_t n, void *tok);
/* y[t * rows + r] for r in [r0, r1), t in [0, n_tok); toks = n_tok prepared tokens. */
void gm_avx512_gemm(int type, const void *w, size_t w_stride, int64_t rows, int64_t n, const void *toks,
                    int64_t n_tok, float *y, int64_t r0, int64_t r1, void *rows_scratch);

/* ---- AVX2 (+FMA, F16C): per-type vec_dot and activation quantizers, bit-compatible layouts with
 * the scalar reference (same block formats). NULL where there is no AVX2 kernel. */
#include "quant/quant.h"
gm_vec_dot_fn gm_avx2_vec_dot(int type);
/* y[t * ldy + r] = row r . token t for rows x n_tok (rows ws bytes apart from w, activations of
 * vec_dot_type as bytes apart): every output bit-identical to gm_avx2_vec_dot's on the same operands,
 * whatever the rows, tokens or split. Callers split rows in groups of GM_AVX2_TILE_ROWS (the quantized
 * kernels' 8 rows per vector; another split gives the same bits, with partly filled vectors). */
enum { GM_AVX2_TILE_ROWS = 8 };
typedef void (*gm_avx2_tiles_fn)(int64_t n, const void *w, size_t ws, int64_t rows, const void *a, size_t as,
                                 int64_t n_tok, float *y, int64_t ldy);
gm_avx2_tiles_fn gm_avx2_tiles(int type);
/* the quantized types' kernels (kernels/qtiles_avx2.c), which the two above return */
gm_vec_dot_fn gm_avx2_qdot(int type);
gm_avx2_tiles_fn gm_avx2_qtiles(int type);
/* the quantized types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K over weights packed as x8 (kernels/pack.h), with
 * the bits of gm_avx2_qtiles on the file's rows: w the packed matrix at a group start (rows split at multiples
 * of GM_AVX2_TILE_ROWS), ws the file's row bytes; NULL for other types or without AVX2 in this build */
gm_avx2_tiles_fn gm_avx2_qx8_tiles(int type);
/* The two above built with AVX-512 VL + VNNI (kernels/qtiles_vnni.c): the same bits, for the AVX-512 level; NULL
 * for other types or without those flags in this build. */
gm_avx2_tiles_fn gm_vnni_qtiles(int type);
gm_avx2_tiles_fn gm_vnni_qx8_tiles(int type);
/* F16 / BF16 weights packed as F16x8 / BF16x8 (kernels/pack.h, kernels/f16x8_avx2.c): w is the packed
 * matrix at a group start (rows split at multiples of GM_AVX2_TILE_ROWS), ws the file's row bytes
 * (unused); NULL for other types or without AVX2 in this build. */
gm_avx2_tiles_fn gm_avx2_f16x8_tiles(int type);
/* The AVX2 tiles over the x8 layout of `type` (GM_KTYPE_X8, kernels/pack.h): one of the two above, or NULL
 * where the type has no x8 layout (kernels/matmul.c). */
gm_avx2_tiles_fn gm_avx2_x8_tiles(int type);
gm_quant_row_fn gm_avx2_quant_act(int act_type);
/* AVX2, a few tokens (2 .. GM_AVX2_MTOK_MAX: a decode step of several sequences; kernels/mtok_avx2.c): each
 * block of 8 weight rows decoded once for all the tokens. The tokens' activations (rows of the weight type's
 * vec_dot_type, quantized as for gm_avx2_qtiles) are first put block by block into toks
 * (gm_avx2_mtok_bytes, 4-byte aligned: gm_avx2_mtok_put for each token t < n_tok, any order or thread); then
 * y[t * ldy + r] for rows [0, rows) of w: file rows ws bytes apart (gm_avx2_mtok) or the x8 copy from a group
 * start, rows split at multiples of GM_AVX2_TILE_ROWS (gm_avx2_x8_mtok). Every output has the bits of
 * gm_avx2_qtiles on the same operands: a token's outputs do not depend on the other tokens, rows or split.
 * NULL (and 0 bytes) where there is no such kernel. */
enum { GM_AVX2_MTOK_MAX = 16 };
size_t gm_avx2_mtok_bytes(int act_type, int64_t n, int64_t n_tok);
void gm_avx2_mtok_put(int act_type, int64_t n, const void *a, int64_t t, int64_t n_tok, void *toks);
typedef void (*gm_avx2_mtok_fn)(int64_t n, const void *w, size_t ws, int64_t rows, const void *toks, int64_t n_tok,
                                float *y, int64_t ldy);
gm_avx2_mtok_fn gm_avx2_mtok(int type);
gm_avx2_mtok_fn gm_avx2_x8_mtok(int type);
/* AVX-512 decode matmul straight from the weights (kernels/vec_avx512.c): y[t * ldy + r] for rows
 * [r0, r1) and n_tok tokens, each (row, token) output bit-identical to gm_avx512_gemm's. The tokens come
 * prepared by gm_avx512_prep and interleaved by gm_avx512_group in groups of GM_FUSED_GROUP (the last
 * group may be smaller but takes group_bytes too). NULL where there is none (or no VBMI for Q5_0). */
enum { GM_FUSED_GROUP = 8 };
typedef void (*gm_fused_fn)(int64_t n, const void *w, size_t w_stride, int64_t r0, int64_t r1, const void *groups,
                            size_t group_bytes, int64_t n_tok, float *y, int64_t ldy);
gm_fused_fn gm_avx512_fused(int type);
/* Bytes of a group of T prepared tokens of n elements for `type`, and the interleave itself (toks: T
 * prepared tokens tb bytes apart; out 64-byte aligned). */
size_t gm_avx512_group_bytes(int type, int64_t n, int T);
void gm_avx512_group(int type, int64_t n, const void *toks, size_t tb, int T, void *out);
/* The same for one row and one token, with the signature of gm_vec_dot_fn (tests). */
gm_vec_dot_fn gm_avx512_tok_dot(int type);

/* ---- AArch64 NEON (kernels/vec_neon.c; kernels/vec_neon_dot.c: the same source with the dot-product extension).
 * One (row, token) dot over the scalar reference's activation bytes, with the AVX2 level's arithmetic (the same
 * bits); NULL for a type without a NEON kernel (the level keeps the scalar one) or in a build for another CPU. */
gm_vec_dot_fn gm_neon_vec_dot(int type);
gm_vec_dot_fn gm_neon_dot_vec_dot(int type);

/* Bytes of a prepared token of a quantized type before any per-block extras (a | sa | init | t16). */
static inline size_t gm_avx512_qtok_bytes(int64_t n) {
    const int64_t np = (n + 63) / 64 * 64, n256 = (n + 255) / 256 * 256;
    return ((size_t)(3 * np + n256 / 4) + 63) / 64 * 64;
}

#endif
