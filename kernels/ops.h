/* kernels/ops.h — the small f32 operators of the Gemma forward pass: RMSNorm, RoPE (NEOX),
 * softmax, GeGLU, soft-capping and attention of one query over a range of cached keys.
 * Each is plain scalar C in kernels/ops.c, the reference. Those with AVX2 / AVX-512 / NEON versions (RMSNorm,
 * GeGLU, the exp sum, dot / axpy, the KV store and attention) are also reached through a table of one ISA
 * level's kernels (gm_cpu_kernels), resolved once by whoever runs them (the CPU backend when it is made,
 * a sequence's sampler): no call reads a global level. The ISA versions themselves are
 * kernels/ops_isa.h's, internal to kernels/ and the tests. */
#ifndef GM_KERNELS_OPS_H
#define GM_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemma.h"

/* y = x * rsqrt(mean(x^2) + eps) * w over n elements (w already holds 1 + w for Gemma).
 * The sum of squares is accumulated in double, as ggml does. y may alias x. */
void gm_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* inv_freq[i] = freq_scale * base^(-2i/hd), i < hd/2 (computed in double). */
void gm_rope_inv_freq(float *inv_freq, int hd, double base, double freq_scale);
/* cos/sin tables of one position: theta_i = pos * inv_freq[i], i < hd/2. */
void gm_rope_cos_sin(float *cs, float *sn, const float *inv_freq, int hd, int pos);
/* Rotate-half (NEOX) RoPE on n_heads heads of hd contiguous floats each. */
void gm_rope_neox(float *x, int n_heads, int hd, const float *cs, const float *sn);

/* x[i] = exp(x[i] - mx) in place (exactly 0 below e^-87 and for -inf) and their sum in double, by expf
 * (gm_cpu_kernels.exp_sum: the vector exp of the AVX2 attention path from AVX2 up, the same one at the NEON
 * levels). The sampler's softmax over the vocabulary (262144 exps per sampled token) uses it. */
double gm_exp_sum(float *x, int n, float mx);
typedef double (*gm_exp_sum_fn)(float *x, int n, float mx);

/* In-place softmax over n floats; a row that is all -inf becomes all zeros. */
void gm_softmax(float *x, int n);
/* x = cap * tanh(x / cap) (cap > 0). */
void gm_softcap(float *x, int n, float cap);
float gm_gelu_tanh(float x);
/* gate[i] = gelu_tanh(gate[i]) * up[i]. */
void gm_geglu(float *gate, const float *up, int n);
void gm_scale(float *x, int n, float s);
void gm_add(float *y, const float *x, int n); /* y += x */

/* ---- attention over one chunk of cached keys (backends/cpu/attention.c merges the chunks) */

typedef enum gm_kv_type { GM_KV_F32 = 0, GM_KV_F16 = 1 } gm_kv_type;
/* Bytes of one stored element. */
size_t gm_kv_type_size(gm_kv_type t);
/* Stores n floats of src into dst as type t (F16: round to nearest even, as F16C). */
void gm_kv_store(void *dst, gm_kv_type t, const float *src, int n);
typedef void (*gm_kv_store_fn)(void *dst, gm_kv_type t, const float *src, int n);

/* One chunk of keys for G query heads sharing one KV head: for head g, the chunk's softmax-weighted
 * values and what merging chunks needs,
 *   part[g*(hd+2) + 0..hd) = sum_j p_j v_j with p_j = exp(s_j - m) / z, part[g*(hd+2)+hd] = m = max_j s_j,
 *   part[g*(hd+2)+hd+1] = z = sum_j exp(s_j - m),
 * where s_j = softcap(q_g . k_j) + bias[j] (bias NULL: 0; softcap 0: none; -INFINITY masks key j). Every
 * key masked: m = -INFINITY, sum 0, zeros. q: G heads of hd floats (RoPE and query scale applied);
 * k, v: the chunk's first key / value, elements of type kt, consecutive keys kv_stride elements apart;
 * scores: G x n_keys floats of scratch; n_keys >= 1. A head's result depends only on its own inputs:
 * the same bits whatever G, whatever the group or thread it is computed in. Chunks of one query are
 * merged by log-sum-exp rescaling (a single chunk is the attention itself). gm_cpu_kernels.attend_partial;
 * this is the scalar level's. */
void gm_attend_partial(float *part, const float *q, int G, const void *k, const void *v, gm_kv_type kt,
                       size_t kv_stride, int n_keys, int hd, float softcap, const float *bias, float *scores);

/* One query row of gm_attend_partial_rows (and gm_cpu_kernels.attend_partial_rows): its q (G heads), output
 * partial (G x (hd + 2)), bias for key lo (NULL: none) and its keys [lo, hi) of the chunk. */
typedef struct gm_attend_row {
    float *part;
    const float *q, *bias;
    int lo, hi;
} gm_attend_row;

/* n query rows over one chunk (k, v: the chunk's key / value 0): row i gets exactly gm_attend_partial's
 * result over its keys [lo, hi), bit for bit; where the kernels allow (AVX2, NEON) each key and value row is
 * read once for all the rows, so rows of one sequence share the chunk's memory traffic. scores: n x G x
 * (the largest hi - lo) floats of scratch. */
void gm_attend_partial_rows(const gm_attend_row *rows, int n, int G, const void *k, const void *v, gm_kv_type kt,
                            size_t kv_stride, int hd, float softcap, float *scores); /* the scalar level's */
typedef void (*gm_attend_rows_fn)(const gm_attend_row *rows, int n, int G, const void *k, const void *v,
                                  gm_kv_type kt, size_t kv_stride, int hd, float softcap, float *scores);
typedef void (*gm_attend_partial_fn)(float *part, const float *q, int G, const void *k, const void *v,
                                     gm_kv_type kt, size_t kv_stride, int n_keys, int hd, float softcap,
                                     const float *bias, float *scores);

/* Attention's per-head inner loops (scalar: eight partial sums, see kernels/ops.c). */
float gm_dot_f32(const float *a, const float *b, int n);
void gm_axpy_f32(float *y, float a, const float *x, int n); /* y += a x */

/* The kernels of one ISA level. Where a level has no version of its own it has the level below's (AVX-512:
 * the AVX2 GeGLU, exp, dot / axpy, KV store; NEON_DOT: NEON's, all of them); attention picks among its level's paths by the shape (G, hd),
 * never by a global. */
typedef struct gm_cpu_kernels {
    gm_isa isa;
    void (*rmsnorm)(float *y, const float *x, const float *w, int n, float eps); /* the double sums in the
                                                                                    level's order */
    void (*geglu)(float *gate, const float *up, int n); /* AVX2 up, NEON: gelu via 1 / (1 + exp(-2z)), a few ulp
                                                           off */
    gm_exp_sum_fn exp_sum;
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n);
    gm_kv_store_fn kv_store;
    gm_attend_partial_fn attend_partial;
    gm_attend_rows_fn attend_partial_rows;
} gm_cpu_kernels;

/* The table of level isa (gm_isa_resolve'd: AUTO and levels above the CPU's give the CPU's best); static,
 * never freed. */
const gm_cpu_kernels *gm_cpu_kernels_for(gm_isa isa);

#endif
