/* kernels/sgemm.h — a float GEMM for large batches (the image encoder: thousands of patches per matmul):
 * y = x W^T with W in F32 / F16 / BF16, f32 activations and f32 sums. The weights go through a packed panel of
 * GM_SGEMM_MR rows (f32, column-major within the panel: panel[c * MR + j] = W[r0 + j][c]) and each output is
 * one f32 fused multiply-add chain over the columns in order, so a token's outputs depend on neither the other
 * tokens nor the split. Not used by the text model, whose matmuls keep kernels/matmul.c's bits. */
#ifndef GM_KERNELS_SGEMM_H
#define GM_KERNELS_SGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { GM_SGEMM_MR = 32 };

/* Built with AVX-512F and type is F32, F16 or BF16. */
bool gm_sgemm_avx512_supports(int type);
/* Rows [r0, r0 + nr) (nr <= GM_SGEMM_MR) of W (k columns, rows w_stride bytes apart) into panel (k * MR floats,
 * 64-byte aligned); rows nr.. are zero. */
void gm_sgemm_avx512_pack(int type, const void *w, size_t w_stride, int64_t r0, int nr, int64_t k, float *panel);
/* The same from W given transposed: W[r0 + j][c] = wt[c * ldw + r0 + j] (f32), e.g. attention's values as
 * stored, one row per key. */
void gm_sgemm_avx512_pack_t(const float *wt, int64_t ldw, int64_t r0, int nr, int64_t k, float *panel);
/* y[t * ldy + j] = sum over c of panel[c * MR + j] * x[t * ldx + c] for j < nr, t < n_tok. */
void gm_sgemm_avx512_panel(const float *panel, int nr, int64_t k, const float *x, int64_t ldx, int64_t n_tok, float *y,
                           int64_t ldy);

/* Softmax numerators of y[0..n) in place: y = exp(y - max) (degree-6 polynomial, about 1 ulp, exactly 0 below
 * -87), returning their sum (f32 lanes). The caller divides by it after P V: hd values per row instead of n. */
float gm_sgemm_avx512_softmax_num(float *y, int64_t n);

#endif
