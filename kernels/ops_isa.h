/* kernels/ops_isa.h — the ISA versions of kernels/ops.h's operators, for kernels/ops.c to pick from by
 * level into its kernel table (gm_cpu_kernels) and for the tests that hold them to the scalar ones. Internal
 * to kernels/: the CPU backend calls them through the table. Each file is compiled with its ISA's flags only; on a
 * build without them its functions fall back to scalar loops (or report that nothing fits) and are never
 * selected. */
#ifndef GM_KERNELS_OPS_ISA_H
#define GM_KERNELS_OPS_ISA_H

#include "kernels/ops.h"

/* ---- kernels/ops_avx2.c (AVX2 + FMA + F16C) */

/* gm_rmsnorm with the double sums in another order (four 4-lane accumulators). */
void gm_rmsnorm_avx2(float *y, const float *x, const float *w, int n, float eps);
/* gm_geglu with gelu via 1 / (1 + exp(-2z)) and a vector exp (a few ulp from gm_geglu); the forward pass
 * uses it from the AVX2 level up. Same result per element whatever n. */
void gm_geglu_avx2(float *gate, const float *up, int n);
/* s[j] = exp(s[j] - mx) (0 for masked keys and below e^-87; all 0 when mx is -inf) by a vector exp, and
 * the sum of the s[j] in double: the softmax of the AVX2 attention path, and gm_exp_sum's. */
double gm_exp_sum_avx2(float *s, int n, float mx);
/* The per-head inner loops of attention (two accumulators over 16 floats; fmadds in order), and the
 * F16 KV store (round to nearest even, as gm_fp32_to_fp16 for finite values). */
float gm_dot_f32_avx2(const float *a, const float *b, int n);
void gm_axpy_f32_avx2(float *y, float a, const float *x, int n);
void gm_kv_store_f16_avx2(uint16_t *dst, const float *src, int n);

/* ---- kernels/ops_avx512.c (AVX-512F) */

/* gm_rmsnorm with the double sums in another order (two 8-lane chains). */
void gm_rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps);

/* ---- kernels/attn_avx2.c (AVX2 + FMA + F16C) */

/* gm_attend_partial's two passes with AVX2 for G <= 4 heads and hd a multiple of 16 (_fits): each key /
 * value row read once for all heads, results bit-identical to the per-head gm_dot_f32_avx2 /
 * gm_axpy_f32_avx2 loops. scores: G x n_keys; part: G x (hd + 2), values added to it. */
bool gm_attend_avx2_fits(int G, int hd);
void gm_attend_scores_avx2(float *scores, const float *q, int G, const void *k, gm_kv_type kt, size_t kv_stride,
                           int n_keys, int hd);
void gm_attend_values_avx2(float *part, const float *scores, int G, const void *v, gm_kv_type kt, size_t kv_stride,
                           int n_keys, int hd);
/* The same passes for n rows of gm_attend_partial_rows: row i's scores at scores + i * row_stride (head g
 * at g * (hi - lo)), its values added to its part; each row's results bit-identical to the one-row calls. */
void gm_attend_scores_rows_avx2(float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G,
                                const void *k, gm_kv_type kt, size_t kv_stride, int hd);
void gm_attend_values_rows_avx2(const float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G,
                                const void *v, gm_kv_type kt, size_t kv_stride, int hd);

/* ---- kernels/attn_avx512.c (AVX-512F) */

/* gm_attend_partial for shapes where _fits says so. */
bool gm_attend_partial_avx512_fits(int G, int hd);
void gm_attend_partial_avx512(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                              size_t kv_stride, int n_keys, int hd, float softcap, const float *bias, float *scores);

/* ---- kernels/ops_neon.c (AArch64 NEON; both NEON levels: no integer dot products to use sdot for)
 * kernels/ops_avx2.c's arithmetic operation for operation (AVX2's 8 lanes as two float32x4): the bits of the
 * AVX2 versions above, so their promises against the scalar operators hold as stated there. */
void gm_rmsnorm_neon(float *y, const float *x, const float *w, int n, float eps);
void gm_geglu_neon(float *gate, const float *up, int n);
double gm_exp_sum_neon(float *s, int n, float mx);
float gm_dot_f32_neon(const float *a, const float *b, int n);
void gm_axpy_f32_neon(float *y, float a, const float *x, int n);
void gm_kv_store_f16_neon(uint16_t *dst, const float *src, int n);

/* ---- kernels/attn_neon.c (AArch64 NEON): the AVX2 passes' contract with NEON registers, for the same shapes;
 * results bit-identical to the per-head gm_dot_f32_neon / gm_axpy_f32_neon loops (and to the AVX2 passes). */
bool gm_attend_neon_fits(int G, int hd);
void gm_attend_scores_neon(float *scores, const float *q, int G, const void *k, gm_kv_type kt, size_t kv_stride,
                           int n_keys, int hd);
void gm_attend_values_neon(float *part, const float *scores, int G, const void *v, gm_kv_type kt, size_t kv_stride,
                           int n_keys, int hd);
void gm_attend_scores_rows_neon(float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G,
                                const void *k, gm_kv_type kt, size_t kv_stride, int hd);
void gm_attend_values_rows_neon(const float *scores, size_t row_stride, const gm_attend_row *rows, int n, int G,
                                const void *v, gm_kv_type kt, size_t kv_stride, int hd);

#endif
