/* quant/blocks.h — internal: the byte layout of every quantized block (as in GGUF / ggml), the
 * per-family scalar functions that quant/types.c puts in the trait table, and small helpers shared
 * by the scalar reference and the SIMD kernels in kernels/. */
#ifndef GM_QUANT_BLOCKS_H
#define GM_QUANT_BLOCKS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

#define GM_QK 32    /* elements per block of the legacy formats */
#define GM_QK_K 256 /* elements per K-quant super-block */

/* f16 fields are stored as raw uint16_t bits; every block size is even, so a block array that
 * starts 2-byte aligned (GGUF data is 32-byte aligned) keeps every field aligned. */
typedef struct { uint16_t d; uint8_t qs[16]; } gm_block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[16]; } gm_block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } gm_block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } gm_block_q5_1;
typedef struct { uint16_t d; int8_t qs[32]; } gm_block_q8_0;
/* s = d * sum(qs): lets Q4_1/Q5_1 dots apply their offset m without touching qs again. */
typedef struct { uint16_t d, s; int8_t qs[32]; } gm_block_q8_1;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } gm_block_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } gm_block_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } gm_block_q6_K;
/* bsums[j] = sum of qs[16j .. 16j+15]: K-quant dots use it for the min / offset terms. */
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } gm_block_q8_K;

_Static_assert(sizeof(gm_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(gm_block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(gm_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(gm_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(gm_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(gm_block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(gm_block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(gm_block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(gm_block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(gm_block_q8_K) == 292, "q8_K layout");

/* Round to nearest, ties to even, for |v| < 2^22 (ggml's nearest_int: adding 1.5*2^23 puts the
 * integer in the low mantissa bits). Callers clamp the result; NaN gives some int, never UB. */
static inline int gm_nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* C's roundf (half away from zero), saturated to [-127, 127]; NaN -> 0. Float-to-int conversion
 * of an out-of-range value is undefined, so clamp first. */
static inline int gm_round_sat127(float v) {
    if (!(v == v)) return 0;
    if (v > 127.f) return 127;
    if (v < -127.f) return -127;
    return (int)roundf(v);
}

/* Truncation of v to [0, hi]; NaN -> 0 (ggml casts (int8_t)v then takes MIN(hi, .)). */
static inline int gm_trunc_clamp(float v, int hi) {
    if (!(v > 0.f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block. */
static inline void gm_k4_scale_min(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* ---- quant/fp.c */
void gm_dequant_f32(const void *src, float *dst, int64_t n);
void gm_quant_f32(const float *src, void *dst, int64_t n);
void gm_vec_dot_f32(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_f16(const void *src, float *dst, int64_t n);
void gm_quant_f16(const float *src, void *dst, int64_t n);
void gm_vec_dot_f16_f32(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_bf16(const void *src, float *dst, int64_t n);
void gm_quant_bf16(const float *src, void *dst, int64_t n);
void gm_vec_dot_bf16_f32(int64_t n, float *s, const void *w, const void *a);

/* ---- quant/q_legacy.c */
void gm_dequant_q4_0(const void *src, float *dst, int64_t n);
void gm_quant_q4_0(const float *src, void *dst, int64_t n);
void gm_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_q4_1(const void *src, float *dst, int64_t n);
void gm_quant_q4_1(const float *src, void *dst, int64_t n);
void gm_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_q5_0(const void *src, float *dst, int64_t n);
void gm_quant_q5_0(const float *src, void *dst, int64_t n);
void gm_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_q5_1(const void *src, float *dst, int64_t n);
void gm_quant_q5_1(const float *src, void *dst, int64_t n);
void gm_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_q8_0(const void *src, float *dst, int64_t n);
void gm_quant_q8_0(const float *src, void *dst, int64_t n);
void gm_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_q8_1(const void *src, float *dst, int64_t n);
void gm_quant_q8_1(const float *src, void *dst, int64_t n);
void gm_vec_dot_q8_1_q8_1(int64_t n, float *s, const void *w, const void *a);

/* ---- quant/q_k.c */
void gm_dequant_q4_K(const void *src, float *dst, int64_t n);
void gm_quant_q4_K(const float *src, void *dst, int64_t n);
void gm_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_q5_K(const void *src, float *dst, int64_t n);
void gm_quant_q5_K(const float *src, void *dst, int64_t n);
void gm_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_q6_K(const void *src, float *dst, int64_t n);
void gm_quant_q6_K(const float *src, void *dst, int64_t n);
void gm_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *w, const void *a);
void gm_dequant_q8_K(const void *src, float *dst, int64_t n);
void gm_quant_q8_K(const float *src, void *dst, int64_t n);
void gm_vec_dot_q8_K_q8_K(int64_t n, float *s, const void *w, const void *a);

#endif
