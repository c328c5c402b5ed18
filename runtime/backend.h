/* runtime/backend.h — the seam between the forward pass and the hardware that runs it.
 *
 * The forward pass (runtime/forward.c) is written once, as the math, over the operations of this table; a
 * backend implements them and owns its memory: the activation buffers it hands out (alloc), the KV blocks
 * (the pool in runtime/kvcache.c only does the bookkeeping: which block holds what, refcounts, the index)
 * and whatever copy of the weights its kernels want (weights are named by the model's gm_matrix, its id, and norm
 * vectors; a backend maps them to its own copies, made when it is created: the CPU backend's are
 * backends/cpu/repack.c, shared by the CPU backends of one model; the model's views never change). Activations
 * never cross to the host unless the forward pass asks (read: the logits of the rows that want them, hidden
 * states, taps), so nothing here forces a host copy per op.
 *
 * Two backends: the CPU one (backends/cpu/: a thread pool, ISA kernels, batch-invariant reductions) and the
 * reference one (backends/ref/: plain loops, double accumulation, one thread), which the tests run the
 * same models through. Every op is a pure function of its inputs and the row it computes: a row's result
 * does not depend on the other rows of the call (batch invariance is part of the contract).
 *
 * Rows: n rows of width w are n * w contiguous floats. */
#ifndef GM_RUNTIME_BACKEND_H
#define GM_RUNTIME_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemma.h"
#include "kernels/matmul.h"
#include "model/model.h"
#include "runtime/kvcache.h"

typedef struct gm_fwd_row {
    int pos;
    int32_t token;           /* used when embed is NULL */
    const float *embed;      /* NULL, or d inputs to layer 0 (no embedding scale applied), host memory */
    const gm_kv_table *kv;   /* the row's sequence: blocks for positions 0..pos exist, pos writable */
    bool logits;             /* compute this row's logits: into logits_out, or to on_logits when NULL */
    float *logits_out;
    float *hidden_out;       /* NULL, or d floats: the row's final-normed hidden state (embedding models) */
    float *taps;             /* NULL, or n_aux x d: the INPUT hidden state of each of the batch's aux_layers */
    /* > pos + 1: the row also attends to its sequence's positions (pos, attend_end), which this call computes
     * (the rows of an image see the whole image); its window's start stays that of a causal row. */
    int attend_end;
    bool attend_sliding_only; /* attend_end holds on sliding-window layers only */
} gm_fwd_row;

typedef struct gm_fwd_batch {
    int n;
    const gm_fwd_row *rows;
    /* NULL, or bias_n x bias_n additive bias for rows of ONE sequence at positions [0, bias_n): query
     * pos, key j, added after soft-capping; the causal/window mask stays unless bias_is_mask, which
     * replaces it (keys [0, bias_n) masked by the bias alone; needs every row in one chunk). */
    const float *bias;
    int bias_n;
    bool bias_is_mask;
    /* Bidirectional (encoder) attention: the rows are ONE sequence at positions [0, n), all in one chunk,
     * and each attends to every row (a sliding layer to rows with |i - j| <= window / 2). */
    bool bidirectional;
    /* called with the logits of each asking row without logits_out (in row order; valid during the call) */
    void (*on_logits)(void *user, int row, const float *logits);
    void *user;
    const int *aux_layers;   /* layers whose INPUT hidden state is recorded in the taps of rows that have them */
    int n_aux;
} gm_fwd_batch;

/* One layer's attention over n rows: att[i] (n_heads x head_dim) from q[i] (RoPE and query scale applied)
 * and the cached keys / values of layer il, which already hold this call's rows. Keys of a row: its
 * window (lc->window > 0: the last `window` positions up to its own) or every earlier position, and up to
 * its attend_end when that is past it; scores
 * soft-capped (softcap > 0) then biased (bias as in gm_fwd_batch); bias_is_mask: keys [0, bias_n) under
 * the bias alone; n_keys > 0: bidirectional over keys [0, n_keys), a sliding layer's window symmetric
 * (|pos - j| <= window / 2). Grouped-query: query head h reads KV head h / (n_heads / n_kv_heads). */
typedef struct gm_attn_call {
    const gm_kv_layout *lay;
    const gm_layer_config *lc;
    int il;
    const gm_fwd_row *rows;
    int n;
    const float *q;
    float *att;
    float softcap;
    const float *bias;
    int bias_n;
    bool bias_is_mask;
    int n_keys;
} gm_attn_call;

/* The keys [*lo, *hi) a row attends to in call c, as gm_attn_call states: the bias alone when it is the mask;
 * bidirectional: every key, or the symmetric window; else its window or every earlier position, up to its
 * attend_end when that is past it. */
static inline void gm_attn_key_range(const gm_attn_call *c, const gm_fwd_row *row, int *lo, int *hi) {
    const int pos = row->pos, w = c->lc->window;
    if (c->bias && c->bias_is_mask) {
        *lo = 0, *hi = c->bias_n;
    } else if (c->n_keys > 0) {
        *lo = w > 0 ? pos - w / 2 : 0, *hi = w > 0 ? pos + w / 2 + 1 : c->n_keys;
        if (*lo < 0) *lo = 0;
        if (*hi > c->n_keys) *hi = c->n_keys;
    } else {
        const bool ahead = row->attend_end > pos + 1 && (!row->attend_sliding_only || w > 0);
        *lo = w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0, *hi = ahead ? row->attend_end : pos + 1;
    }
}

/* ---- the dense-row ops: an encoder's layers (the vision encoders: every patch of an image at once, no cache) */

typedef enum gm_act {
    GM_ACT_GELU_TANH,  /* 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) */
    GM_ACT_GELU_QUICK, /* x sigmoid(1.702 x) */
    GM_ACT_SILU,       /* x sigmoid(x) */
} gm_act;

/* The bounds of an encoder's dense calls, given once (dense_reserve) so the backend sizes its scratch then and
 * the calls allocate nothing. */
typedef struct gm_dense_shape {
    int max_rows;   /* rows of any call (an image's patches, at the largest size) */
    int max_width;  /* floats per row of any call: the widest matmul input or output, norm or activation */
    int n_head, head_dim; /* attention_dense */
    int attn_rows;  /* query rows per attention pass: the scores take attn_rows x max_rows floats (<= 0: all) */
    int n_rope;     /* RoPE kinds [0, n_rope) prepared for max_rows rows (rope_prepare / rope), 0: none */
} gm_dense_shape;

/* Multi-head attention over n rows of one sequence, each attending to every row (an image's patches):
 * o[i] in head h = softmax_j(scale q[i] . k[j]) v[j], over that head's columns [h head_dim, (h + 1) head_dim)
 * of rows ld floats apart. Sums in the backend's order (the CPU's: f32). */
typedef struct gm_dense_attn {
    const float *q, *k, *v;
    float *o;
    int ld, n, n_head, head_dim;
    float scale;
} gm_dense_attn;

typedef struct gm_backend gm_backend;

typedef struct gm_backend_ops {
    const char *name;
    /* Activations are host memory: the family hooks of Gemma 3n and Gemma 4 (model/families/), written as
     * host code around the ops, need it; the forward pass refuses those families on a backend without. */
    bool host_memory;

    /* ---- the backend itself */
    gm_kv_storage (*kv_storage)(gm_backend *be); /* storage of KV blocks (called by the pool) */
    int (*n_threads)(const gm_backend *be);
    /* returns once the backend's weight copies are all in place (the CPU backend makes some in the background,
     * with the same results before and after); NULL: nothing to wait for */
    void (*wait_weights)(gm_backend *be);
    void (*free)(gm_backend *be);
    /* NULL: nothing to count (host backends) */
    void (*stats)(gm_backend *be, gm_backend_stats *out);

    /* ---- buffers: n floats, 64-byte aligned; NULL when out of memory */
    float *(*alloc)(gm_backend *be, size_t n);
    void (*release)(gm_backend *be, float *p);
    void (*read)(gm_backend *be, float *host, const float *src, size_t n);

    /* ---- operations over rows */
    /* x[i] = the token embedding of row i times the model's embedding scale, or its caller embedding */
    gm_status (*embed)(gm_backend *be, float *x, const gm_fwd_row *rows, int n);
    /* y[i] = RMSNorm(x[idx ? idx[i] : i]) * w over dim (w NULL: no weight); y may alias x when idx is NULL */
    void (*rmsnorm)(gm_backend *be, float *y, const float *x, const float *w, int n, int dim, float eps, const int *idx);
    /* y[j] = x W[j]^T for count (<= 4) matrices reading the same n input rows */
    gm_status (*matmul)(gm_backend *be, const gm_matrix *const *W, float *const *y, int count, const float *x, int n);
    /* the LM head: y_host = softcap(x W^T) (softcap 0: none), written to host memory */
    gm_status (*head)(gm_backend *be, const gm_matrix *W, const float *x, int n, float *y_host, float softcap);
    /* the rotation tables of RoPE kind `kind` (< GM_ROPE_KINDS) for the positions of this chunk's rows */
    void (*rope_prepare)(gm_backend *be, int kind, const float *inv_freq, int dims, const gm_fwd_row *rows, int n);
    /* NEOX RoPE of kind `kind` on the first dims of each of n_heads heads of hd floats, n rows */
    void (*rope)(gm_backend *be, float *x, int n, int n_heads, int hd, int dims, int kind);
    /* row i's K and V (width kv_dim) into its sequence's cache at its position, layer il */
    void (*kv_store)(gm_backend *be, const float *k, const float *v, const gm_fwd_row *rows, int n, int il, int kv_dim);
    void (*attention)(gm_backend *be, const gm_attn_call *c);
    /* gate = gelu_tanh(gate) * up over n rows of ff */
    void (*geglu)(gm_backend *be, float *gate, const float *up, int n, int ff);
    void (*add)(gm_backend *be, float *y, const float *x, size_t n); /* y += x */
    void (*scale)(gm_backend *be, float *x, size_t n, float s);
    void (*copy)(gm_backend *be, float *dst, const float *src, size_t n);

    /* ---- dense rows (an encoder's; with matmul, rmsnorm, rope_prepare, rope, add and scale above): every call
     * within the bounds given to dense_reserve, which comes first */
    gm_status (*dense_reserve)(gm_backend *be, const gm_dense_shape *s, gm_error *err);
    /* y[i] = LayerNorm(x[i]) * w + b over dim (mean and variance summed in double); y may alias x */
    void (*layernorm)(gm_backend *be, float *y, const float *x, const float *w, const float *b, int n, int dim, float eps);
    /* y[i] += b (x NULL), or y[i] += x[i] + b (a residual after a linear with a bias); b is one row of dim */
    void (*bias_add)(gm_backend *be, float *y, const float *x, const float *b, int n, int dim);
    /* y[i] = act(y[i] + b) (b NULL: act(y[i])), times up[i] unless up is NULL (a gated unit): n rows of dim */
    void (*bias_act)(gm_backend *be, float *y, const float *b, const float *up, int n, int dim, gm_act act);
    /* y = x clamped to [lo, hi] over n floats (NaN stays NaN); y may alias x */
    void (*clamp)(gm_backend *be, float *y, const float *x, size_t n, float lo, float hi);
    /* y[i] *= w over n rows: w is one row of dim (a per-channel scale) */
    void (*mul_rows)(gm_backend *be, float *y, const float *w, int n, int dim);
    gm_status (*attention_dense)(gm_backend *be, const gm_dense_attn *a);
} gm_backend_ops;

enum { GM_ROPE_KINDS = 8 }; /* distinct RoPE settings a model may have (Gemma 3: 2) */

struct gm_backend {
    const gm_backend_ops *ops;
};

typedef struct gm_backend_options {
    int n_threads;  /* <= 0: physical cores */
    int max_batch;  /* rows per forward chunk */
    int max_ctx;    /* positions per sequence */
    gm_isa isa;     /* the CPU kernels' level (resolved by the engine: the model's); the reference backend has none */
    gm_pool *pool;  /* NULL: the CPU backend starts its own of n_threads; else it runs on this one (borrowed) */
    /* Matmuls of float matrices (and attention_dense) through the AVX-512 float GEMM where the CPU has it: faster
     * over an image's thousands of rows, sums in another order than matmul's kernels (Gemma 3's encoder; the text
     * model never sets it). */
    bool float_gemm;
    int device;     /* a GPU backend's device: 0 the first GPU (else the first usable device), N > 0 the (N-1)th listed */
    bool gpu_only;  /* device 0: a GPU or nothing (GM_ERR_UNSUPPORTED), never a CPU implementation such as lavapipe */
    bool validate;  /* a GPU backend: the API's validation layer on, its errors fail the ops that follow */
} gm_backend_options;

/* The CPU backend: a thread pool, ISA kernels, blocks in host memory. m and lay must outlive it. m and lay NULL:
 * a backend for the dense ops alone (an encoder's): no embed, head, KV storage or attention. */
gm_status gm_backend_cpu_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                             gm_backend **out, gm_error *err);
/* The reference backend: plain loops over the scalar kernels, sums in double, one thread (m, lay: as the CPU's). */
gm_status gm_backend_ref_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                             gm_backend **out, gm_error *err);

/* One backend buffer carved into n parts of sizes[i] floats (*dst[i] points at each), every part a multiple of 16
 * floats so each starts 64-byte aligned as the buffer does: a large malloc sits 16 bytes past a page, which made
 * every other 32-byte activation load of the AVX2 kernels (and every 64-byte one of AVX-512) split two cache lines
 * (AVX2 F16 tiles: 45 vs 61 GFLOP/s). Returns the buffer (release it), NULL when out of memory. */
static inline float *gm_be_alloc_parts(gm_backend *be, const size_t *sizes, float **const *dst, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (sizes[i] + 15) & ~(size_t)15;
    float *buf = be->ops->alloc(be, total), *p = buf;
    for (int i = 0; buf && i < n; i++) {
        *dst[i] = p;
        p += (sizes[i] + 15) & ~(size_t)15;
    }
    return buf;
}

/* Convenience for host code around the ops (family hooks): one matrix. */
static inline gm_status gm_be_matmul(gm_backend *be, const gm_matrix *W, const float *x, int n, float *y) {
    const gm_matrix *Ws[1] = {W};
    float *const ys[1] = {y};
    return be->ops->matmul(be, Ws, ys, 1, x, n);
}

#endif
