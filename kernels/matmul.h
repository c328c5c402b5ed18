/* kernels/matmul.h — y = x W^T for a weight matrix of any supported type, read in place from the
 * (memory-mapped) file. W has `rows` output rows of `cols` elements (GGUF ne[1] x ne[0]).
 * Activations are quantized on the fly to the weight type's vec_dot_type (as llama.cpp does),
 * then each output is a dot product; work is split by output rows across the pool.
 *
 * Kernels are chosen per call from the ISA level of kernels/cpu.h (GEMMA_ISA=scalar|avx2|avx512
 * lowers it): scalar reference (quant/), AVX2 dot products, AVX-512 VNNI dot products for one token
 * and 4x4 register-tiled VNNI kernels from 4 tokens on (prefill). All paths quantize activations
 * to the same bytes; they differ only in f32 rounding order (see tests/test_matmul.c). */
#ifndef GM_KERNELS_MATMUL_H
#define GM_KERNELS_MATMUL_H

#include <stdint.h>

#include "gemma.h"
#include "kernels/threadpool.h"

typedef struct gm_matrix {
    int type;          /* gm_type */
    int64_t rows;      /* output features (GGUF ne[1]) */
    int64_t cols;      /* input features  (GGUF ne[0]), contiguous */
    const void *data;  /* rows * gm_row_bytes(type, cols) bytes */
    /* Optional: the same weights rearranged for the AVX-512 kernels (kernels/pack.h), used instead
     * of data while that ISA is active; NULL when there is none. Same bytes per row as data. */
    int packed_type;   /* GM_KTYPE_* */
    const void *packed;
} gm_matrix;

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
