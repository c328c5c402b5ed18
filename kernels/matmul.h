/* kernels/matmul.h — y = x W^T for a weight matrix of any supported type, read in place from the
 * (memory-mapped) file. W has `rows` output rows of `cols` elements (GGUF ne[1] x ne[0]).
 * Activations are quantized on the fly to the weight type's vec_dot_type (as llama.cpp does),
 * then each output is a dot product; work is split by output rows across the pool.
 *
 * Kernels come from a table indexed by weight type and ISA level (gemma.h gm_isa, an option of the model),
 * bound into the weight's record at model open: scalar reference (quant/), AVX2 dot products (up to
 * GM_AVX2_MTOK_MAX tokens: each block of 8 rows decoded once for all of them; more: register tiles),
 * AVX-512 VNNI: up to GM_FUSED_MAX_TOKENS tokens straight from the weights (decode, small batches), more
 * through 4x4 register tiles (prefill). Within one ISA every path computes a (row,
 * token) output with the same operations in the same order: a token's outputs do not depend on the
 * other tokens of the call (batch invariance, tests/test_matmul.c). Across ISAs they differ in f32
 * rounding order only. */
#ifndef GM_KERNELS_MATMUL_H
#define GM_KERNELS_MATMUL_H

#include <stdatomic.h>
#include <stdint.h>

#include "gemma.h"
#include "kernels/gemm.h"
#include "kernels/threadpool.h"

/* Up to this many tokens, the AVX-512 path decodes each weight chunk once for all of them. */
#define GM_FUSED_MAX_TOKENS 16

/* The kernels of one weight type at one ISA level. */
typedef struct gm_mm_kernel {
    int isa;                /* the level it was resolved for */
    int type;               /* the weight type */
    bool packed;            /* the tiles read the matrix's packed copy (AVX-512 Q5_0x16: the fused kernels the file's;
                               AVX2 F16x8 / BF16x8) */
    gm_fused_fn fused;      /* AVX-512: a few tokens straight from the weights; NULL: none */
    bool tiles;             /* AVX-512: 4x4 register tiles (gm_avx512_gemm) */
    gm_vec_dot_fn vec_dot;  /* scalar / AVX2: one (row, token) dot over quantized activations; NULL: unsupported */
    gm_avx2_tiles_fn tiles2; /* AVX2 and up, where AVX-512 has neither: vec_dot's results in register tiles */
    gm_avx2_mtok_fn mtok2;   /* the AVX2 level, 2 .. GM_AVX2_MTOK_MAX tokens: tiles2's bits, each weight block
                                decoded once for all of them; NULL: tiles2 */
    gm_quant_row_fn quant;  /* the activation quantizer of that level */
    int act_type;           /* the activations' type (the weight type's vec_dot_type) */
} gm_mm_kernel;

typedef struct gm_matrix {
    int type;          /* gm_type */
    int64_t rows;      /* output features (GGUF ne[1]) */
    int64_t cols;      /* input features  (GGUF ne[0]), contiguous */
    const void *data;  /* rows * gm_row_bytes(type, cols) bytes */
    /* Optional: the same weights rearranged for one ISA level's kernels (kernels/pack.h: Q5_0x16 for
     * AVX-512, F16x8 / BF16x8 for AVX2), used instead of data by that level's kernels; NULL when
     * there is none. Same bytes per row as data. */
    int packed_type;   /* GM_KTYPE_* */
    const void *packed;
    /* The kernels, bound (gm_matrix_bind) by the CPU backend for its level, and bound again when its background
     * packer (backends/cpu/repack.c) has set `packed`: atomic, read once per call; both bindings give the same
     * bits. NULL (a view nobody bound, as the model's are): the CPU's best level's, looked up on each call. */
    _Atomic(const gm_mm_kernel *) kern;
    int id;            /* the model's number for it (1 ..: model/model.c), by which a backend finds its own copy;
                          0: a view the model does not number (a caller's, a slice) */
} gm_matrix;

/* Binds W's kernels for level isa (gm_isa_resolve'd), after its packed copy, if any, is set. Every
 * gm_matmul of W then runs them: to run another level, bind again (not while W is in use). */
void gm_matrix_bind(gm_matrix *W, gm_isa isa);
/* W's bound kernels (unbound: the CPU's best level's). */
const gm_mm_kernel *gm_matrix_kernel(const gm_matrix *W);

/* x: n_tok rows of cols floats; y: n_tok rows of rows floats. scratch is grown as needed
 * (pass the same gm_matmul_scratch across calls: no allocation per token in steady state). */
typedef struct gm_matmul_scratch {
    void *buf;
    size_t cap;
} gm_matmul_scratch;

/* Returns GM_ERR_UNSUPPORTED for a type without kernels, GM_ERR_ARG for cols that are not a
 * multiple of the block size, GM_ERR_NOMEM if the scratch cannot grow (y untouched then).
 * Each output is computed by the same code whatever the pool size: results do not depend on
 * the number of threads. */
gm_status gm_matmul(const gm_matrix *W, const float *x, int64_t n_tok, float *y, gm_pool *pool,
                    gm_matmul_scratch *scratch);
/* y[i] = x W[i]^T for count (<= 4) matrices with the same cols reading the same input (q/k/v,
 * gate/up). For one token on AVX-512 the input is quantized once per weight type and all rows go
 * to the pool in one call (one synchronisation instead of count); otherwise it is count gm_matmul
 * calls. Results equal those of separate gm_matmul calls bit for bit. */
gm_status gm_matmul_multi(const gm_matrix *const *W, float *const *y, int count, const float *x, int64_t n_tok,
                          gm_pool *pool, gm_matmul_scratch *scratch);
/* Reference: dequantize each row to f32 and accumulate in double. For tests. */
gm_status gm_matmul_ref(const gm_matrix *W, const float *x, int64_t n_tok, float *y);
void gm_matmul_scratch_free(gm_matmul_scratch *s);

/* Row r of W dequantized to f32 (embedding lookup). GM_ERR_ARG if r is out of range. */
gm_status gm_matrix_row(const gm_matrix *W, int64_t r, float *out);

#endif
