/* quant/quant.h — the per-type trait table: one row per tensor type (block size, bytes per block,
 * dequantize a row, quantize a row, and the dot product of a weight row with an activation row
 * quantized to the type's vec_dot_type). Adding a type touches one row in quant/types.c.
 *
 * These are the scalar reference implementations. SIMD kernels live in kernels/ and are tested
 * against these.
 */
#ifndef GM_QUANT_QUANT_H
#define GM_QUANT_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "gemma.h"

typedef void (*gm_dequant_row_fn)(const void *src, float *dst, int64_t n);
typedef void (*gm_quant_row_fn)(const float *src, void *dst, int64_t n);
/* s = sum_i w[i] * a[i] over n elements; w has the row's type, a the type's vec_dot_type. */
typedef void (*gm_vec_dot_fn)(int64_t n, float *s, const void *w, const void *a);

typedef struct gm_type_traits {
    int type;                 /* gm_type id */
    const char *name;         /* "Q4_K" */
    int64_t block_elems;      /* elements per block (1 for F32/F16/BF16) */
    size_t block_bytes;       /* bytes per block */
    gm_dequant_row_fn dequant_row;
    gm_quant_row_fn quant_row;   /* reference quantizer (round-to-nearest, as ggml's *_ref) */
    int vec_dot_type;            /* activation type for vec_dot: Q8_0, Q8_1, Q8_K, F32, ... */
    gm_vec_dot_fn vec_dot;       /* scalar reference */
} gm_type_traits;

/* NULL for a type id this build does not support. */
const gm_type_traits *gm_type_traits_of(int type);

/* Bytes of a row of n elements of type; 0 if n is not a multiple of the block size or the type
 * is unknown. */
size_t gm_row_bytes(int type, int64_t n);

/* IEEE half and bfloat16 conversions (round-to-nearest-even on the way down). */
float gm_fp16_to_fp32(uint16_t h);
uint16_t gm_fp32_to_fp16(float f);
float gm_bf16_to_fp32(uint16_t h);
uint16_t gm_fp32_to_bf16(float f);

#endif
