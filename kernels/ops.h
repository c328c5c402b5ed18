/* kernels/ops.h — the small f32 operators of the Gemma forward pass: RMSNorm, RoPE (NEOX),
 * softmax, GeGLU, soft-capping and attention of one query over a range of cached keys.
 * Scalar and plain: simple loops over contiguous arrays that compilers vectorise. */
#ifndef GM_KERNELS_OPS_H
#define GM_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>

/* y = x * rsqrt(mean(x^2) + eps) * w over n elements (w already holds 1 + w for Gemma).
 * The sum of squares is accumulated in double, as ggml does. y may alias x. */
void gm_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* The same with AVX-512 (double sums in another order); gm_rmsnorm_fast picks it when active. */
void gm_rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps);
void gm_rmsnorm_fast(float *y, const float *x, const float *w, int n, float eps);

/* inv_freq[i] = freq_scale * base^(-2i/hd), i < hd/2 (computed in double). */
void gm_rope_inv_freq(float *inv_freq, int hd, double base, double freq_scale);
/* cos/sin tables of one position: theta_i = pos * inv_freq[i], i < hd/2. */
void gm_rope_cos_sin(float *cs, float *sn, const float *inv_freq, int hd, int pos);
/* Rotate-half (NEOX) RoPE on n_heads heads of hd contiguous floats each. */
void gm_rope_neox(float *x, int n_heads, int hd, const float *cs, const float *sn);

/* In-place softmax over n floats; a row that is all -inf becomes all zeros. */
void gm_softmax(float *x, int n);
/* x = cap * tanh(x / cap) (cap > 0). */
void gm_softcap(float *x, int n, float cap);
float gm_gelu_tanh(float x);
/* gate[i] = gelu_tanh(gate[i]) * up[i]. */
void gm_geglu(float *gate, const float *up, int n);
/* The same with gelu via 1 / (1 + exp(-2z)) and a vector exp (a few ulp from gm_geglu); the
 * forward pass uses it when gm_isa_active() >= GM_ISA_AVX2. Same result per element whatever n. */
void gm_geglu_avx2(float *gate, const float *up, int n);
/* gm_geglu_avx2 or gm_geglu by the active ISA. */
void gm_geglu_fast(float *gate, const float *up, int n);
void gm_scale(float *x, int n, float s);
void gm_add(float *y, const float *x, int n); /* y += x */

/* One query head attending over n_keys consecutive cached positions.
 *   q: hd floats (RoPE and query scale already applied)
 *   k, v: the first key/value of the range; consecutive positions are kv_stride floats apart
 *   softcap: 0 = none, else scores are capped (Gemma 2) before the bias / mask
 *   bias: NULL, or additive bias for keys j >= bias_from (bias[j - bias_from]); -inf masks
 *   scores: scratch of n_keys floats
 *   out: hd floats */
void gm_attend(float *out, const float *q, const float *k, const float *v, size_t kv_stride,
               int n_keys, int hd, float softcap, const float *bias, int bias_from, float *scores);

/* The same for G query heads that share one KV head (GQA): q and out hold G consecutive heads of hd
 * floats; each key / value row is read once for the whole group. scores: G x n_keys floats. */
void gm_attend_group(float *out, const float *q, int G, const float *k, const float *v, size_t kv_stride,
                     int n_keys, int hd, float softcap, const float *bias, int bias_from, float *scores);

/* One chunk of keys of a split decode attention, unnormalised: for each of the G heads,
 * part[g * (hd + 2) ...] = sum_j exp(s_j - m) v_j (hd floats), then m = max_j s_j, then
 * sum_j exp(s_j - m); s_j = q_g . k_j (softcapped when softcap > 0). The chunks of a query are merged
 * exactly by log-sum-exp rescaling (model/forward.c). scores: G x n_keys floats, n_keys >= 1. */
void gm_attend_group_partial(float *part, const float *q, int G, const float *k, const float *v, size_t kv_stride,
                             int n_keys, int hd, float softcap, float *scores);

/* TEMPORARY (replaced by the kv-attention kernels branch): partial attention over F32/F16 keys with a
 * per-key bias; see the contract in that branch. */
typedef enum gm_kv_type { GM_KV_F32 = 0, GM_KV_F16 = 1 } gm_kv_type;
size_t gm_kv_type_size(gm_kv_type t);
void gm_kv_store(void *dst, gm_kv_type t, const float *src, int n);
void gm_attend_partial(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                       size_t kv_stride, int n_keys, int hd, float softcap, const float *bias, float *scores);

/* Inner loops, scalar or AVX2 (kernels/attn_avx2.c) by gm_isa_active(). */
float gm_dot_f32(const float *a, const float *b, int n);
void gm_axpy_f32(float *y, float a, const float *x, int n); /* y += a x */
float gm_dot_f32_avx2(const float *a, const float *b, int n);
/* AVX-512 gm_attend_group (kernels/attn_avx512.c) for shapes where _fits says so; gm_attend_group
 * dispatches to it by itself. */
bool gm_attend_group_avx512_fits(int G, int hd);
void gm_attend_group_avx512(float *out, const float *q, int G, const float *k, const float *v, size_t kv_stride,
                            int n_keys, int hd, float softcap, const float *bias, int bias_from, float *scores);
void gm_attend_group_partial_avx512(float *part, const float *q, int G, const float *k, const float *v,
                                    size_t kv_stride, int n_keys, int hd, float softcap, float *scores);
void gm_axpy_f32_avx2(float *y, float a, const float *x, int n);

#endif
