/* kernels/matmul.h — y = x W^T for a weight matrix of any supported type, read in place from the
 * (memory-mapped) file. W has `rows` output rows of `cols` elements (GGUF ne[1] x ne[0]).
 * Activations are quantized on the fly to the weight type's vec_dot_type (as llama.cpp does),
 * then each output is a dot product; work is split by output rows across the pool.
 *
 * Kernels come from a table indexed by ISA level, weight layout and type (gemma.h gm_isa), bound into a
 * gm_mm_weight (the CPU backend binds its weights once, backends/cpu/repack.c): scalar reference (quant/), AVX2
 * dot products (up to GM_AVX2_MTOK_MAX tokens: each block of 8 rows decoded once for all of them; more: register
 * tiles), AVX-512 VNNI: up to GM_FUSED_MAX_TOKENS tokens straight from the weights (decode, small batches), more
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

/* A weight matrix as the model holds it: a view of the file's rows, which no backend changes. The kernels that run
 * it, and any copy in another layout, are a backend's (gm_mm_weight below, for the CPU's). */
typedef struct gm_matrix {
    int type;          /* gm_type */
    int64_t rows;      /* output features (GGUF ne[1]) */
    int64_t cols;      /* input features  (GGUF ne[0]), contiguous */
    const void *data;  /* rows * gm_row_bytes(type, cols) bytes */
    int id;            /* the model's number for it (1 ..: model/model.c), by which a backend finds its own copy;
                          0: a view the model does not number (a caller's, a slice) */
} gm_matrix;

/* A matrix as the CPU kernels of one ISA level run it: the CPU backend keeps one per layer matrix
 * (backends/cpu/repack.c); gm_mm_view makes one for a call (a vision encoder's matrix, one the backend has no copy
 * of). */
typedef struct gm_mm_weight {
    gm_matrix m;       /* the rows the file-layout kernels read: the file's, or a plain copy of them */
    /* Optional: the same weights rearranged for one ISA level's kernels (kernels/pack.h: Q5_0x16 for
     * AVX-512, x8 for AVX2), used instead of m.data by that level's kernels. packed_type set and packed NULL:
     * the copy is being made (kernels with its bits on the file's rows). Same bytes per row as m.data. */
    int packed_type;   /* GM_KTYPE_* */
    const void *packed;
    /* The kernels (gm_mm_bind), bound again when the copy arrives (backends/cpu/repack.c's packer): atomic, read
     * once per call; both bindings give the same bits. NULL (never bound): the CPU's best level's, looked up on
     * each call. */
    _Atomic(const gm_mm_kernel *) kern;
} gm_mm_weight;

/* Binds W's kernels for level isa (gm_isa_resolve'd), after its packed copy, if any, is set. Every
 * gm_mm of W then runs them: to run another level, bind again (not while W is in use). */
void gm_mm_bind(gm_mm_weight *W, gm_isa isa);
/* M in the file's layout, bound for level isa. */
gm_mm_weight gm_mm_view(const gm_matrix *M, gm_isa isa);
/* W's bound kernels (unbound: the CPU's best level's). */
const gm_mm_kernel *gm_mm_kernel_of(const gm_mm_weight *W);

/* x: n_tok rows of cols floats; y: n_tok rows of rows floats. scratch is grown as needed
 * (pass the same gm_matmul_scratch across calls: no allocation per token in steady state). */
typedef struct gm_matmul_scratch {
    void *buf;
    size_t cap;
} gm_matmul_scratch;

enum { GM_MM_MULTI_MAX = 4 }; /* matrices of one gm_mm_multi call */

/* Returns GM_ERR_UNSUPPORTED for a type without kernels, GM_ERR_ARG for cols that are not a
 * multiple of the block size, GM_ERR_NOMEM if the scratch cannot grow (y untouched then).
 * Each output is computed by the same code whatever the pool size: results do not depend on
 * the number of threads. */
gm_status gm_mm(const gm_mm_weight *W, const float *x, int64_t n_tok, float *y, gm_pool *pool,
                gm_matmul_scratch *scratch);
/* y[i] = x W[i]^T for count (<= GM_MM_MULTI_MAX) matrices with the same cols reading the same input (q/k/v,
 * gate/up). For a few tokens the input is quantized once per weight type and all rows go to the pool in one
 * call (one synchronisation instead of count); otherwise it is count gm_mm calls. Results equal those of
 * separate gm_mm calls bit for bit. */
gm_status gm_mm_multi(const gm_mm_weight *const *W, float *const *y, int count, const float *x, int64_t n_tok,
                      gm_pool *pool, gm_matmul_scratch *scratch);
/* gm_mm of a view: the file's layout, the CPU's best level. */
gm_status gm_matmul(const gm_matrix *W, const float *x, int64_t n_tok, float *y, gm_pool *pool,
                    gm_matmul_scratch *scratch);
/* Reference: dequantize each row to f32 and accumulate in double. For tests. */
gm_status gm_matmul_ref(const gm_matrix *W, const float *x, int64_t n_tok, float *y);
void gm_matmul_scratch_free(gm_matmul_scratch *s);

/* Row r of W dequantized to f32 (embedding lookup). GM_ERR_ARG if r is out of range. */
gm_status gm_matrix_row(const gm_matrix *W, int64_t r, float *out);

#endif
