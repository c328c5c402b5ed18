/* backends/cpu/dense.h — the CPU backend's dense-row ops (runtime/backend.h: an encoder's layers over every patch
 * of an image at once): LayerNorm, bias adds, activations, clamps and per-channel scales on the pool; matmuls of
 * float matrices through the AVX-512 float GEMM (kernels/sgemm.h) when the backend was made with float_gemm;
 * attention of every row to every row, per head and chunk of queries, as two matmuls and a softmax (the GEMM's,
 * reading rows in place, or kernels/matmul.c's over gathered heads). Internal to backends/cpu. */
#ifndef GM_CPU_DENSE_H
#define GM_CPU_DENSE_H

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/threadpool.h"
#include "runtime/backend.h"

/* Pools larger than this take kernels/matmul.c instead of the GEMM (a packed panel per thread is tracked). */
enum { GM_DENSE_SG_MAX_THREADS = 256 };

typedef struct gm_cpu_dense {
    gm_isa isa;              /* the backend's level (the matrices of attention's gathered heads are bound for it) */
    bool sgemm;              /* the AVX-512 float GEMM serves float matrices and attention (float_gemm, AVX-512) */
    int chunk;               /* attention query rows per pass */
    int max_rows, head_dim;
    float *buf;              /* every array below */
    float *ones;             /* max_width ones: GELU is the GeGLU kernel times 1; the weightless RMSNorm */
    float *kh, *vt;          /* one head: keys max_rows x hd, values transposed hd x max_rows */
    float *qh, *scores, *oh; /* one chunk of one head: chunk x hd, chunk x max_rows, chunk x hd */
    float *panels;           /* GEMM: one packed panel of GM_SGEMM_MR weight rows per pool thread */
    size_t panel_floats;
    float *kpan, *vpan;      /* GEMM: one head's keys (scaled) and values as packed panels */
    float *rsum;             /* GEMM: 1 / softmax denominator of each query row of a chunk */
} gm_cpu_dense;

/* d->sgemm as the backend's options say (before gm_cpu_dense_reserve). */
void gm_cpu_dense_init(gm_cpu_dense *d, const gm_backend_options *opt, const gm_pool *pool);
gm_status gm_cpu_dense_reserve(gm_cpu_dense *d, const gm_pool *pool, const gm_dense_shape *s, gm_error *err);
void gm_cpu_dense_free(gm_cpu_dense *d);

/* y[j] = x W[j]^T, each matrix through the GEMM when it takes its type, else gm_matmul (same bits as
 * gm_matmul_multi). Only when d->sgemm. */
gm_status gm_cpu_dense_matmul(gm_cpu_dense *d, gm_pool *pool, gm_matmul_scratch *mm, const gm_matrix *const *W,
                              float *const *y, int count, const float *x, int n);
gm_status gm_cpu_dense_attention(gm_cpu_dense *d, const gm_cpu_kernels *kern, gm_pool *pool, gm_matmul_scratch *mm,
                                 const gm_dense_attn *a);

void gm_cpu_layernorm(gm_pool *pool, float *y, const float *x, const float *w, const float *b, int n, int dim,
                      float eps);
void gm_cpu_bias_add(gm_pool *pool, float *y, const float *x, const float *b, int n, int dim);
void gm_cpu_bias_act(gm_pool *pool, const gm_cpu_kernels *kern, const float *ones, float *y, const float *b,
                     const float *up, int n, int dim, gm_act act);
void gm_cpu_clamp(gm_pool *pool, float *y, const float *x, size_t n, float lo, float hi);
void gm_cpu_mul_rows(gm_pool *pool, float *y, const float *w, int n, int dim);

#endif
