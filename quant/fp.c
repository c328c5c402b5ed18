/* quant/fp.c — the unquantized types: F32, F16, BF16 (scalar reference). Their vec_dot takes f32
 * activations (see the note in quant/types.c) and accumulates in f32, lane by lane like the SIMD
 * kernels would, but in plain element order. */
#include "quant/blocks.h"

void gm_dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void gm_quant_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void gm_vec_dot_f32(int64_t n, float *s, const void *w, const void *a) {
    const float *x = w, *y = a;
    double acc = 0.0; /* the scalar reference: double keeps it an honest reference for SIMD tests */
    for (int64_t i = 0; i < n; i++) acc += (double)x[i] * (double)y[i];
    *s = (float)acc;
}

void gm_dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = gm_fp16_to_fp32(h[i]);
}

void gm_quant_f16(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = gm_fp32_to_fp16(src[i]);
}

void gm_vec_dot_f16_f32(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += (double)gm_fp16_to_fp32(x[i]) * (double)y[i];
    *s = (float)acc;
}

void gm_dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = gm_bf16_to_fp32(h[i]);
}

void gm_quant_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++) h[i] = gm_fp32_to_bf16(src[i]);
}

void gm_vec_dot_bf16_f32(int64_t n, float *s, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += (double)gm_bf16_to_fp32(x[i]) * (double)y[i];
    *s = (float)acc;
}
