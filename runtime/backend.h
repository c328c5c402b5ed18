/* runtime/backend.h — the seam between the engine and the hardware that runs the model.
 *
 * A backend runs the forward pass over rows (gm_fwd_batch) and owns the storage of the KV blocks (the
 * pool in runtime/kvcache.c only does the bookkeeping: which block holds what, refcounts, the index).
 * Block pointers and activations stay on the backend's side: nothing here forces a host copy per op.
 * The CPU backend (backends/cpu/backend.c) is the only one today. */
#ifndef GM_RUNTIME_BACKEND_H
#define GM_RUNTIME_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "gemma.h"
#include "runtime/kvcache.h"

typedef struct gm_fwd_row {
    int pos;
    int32_t token;           /* used when embed is NULL */
    const float *embed;      /* NULL, or d inputs to layer 0 (no embedding scale applied) */
    const gm_kv_table *kv;   /* the row's sequence: blocks for positions 0..pos exist, pos writable */
    bool logits;             /* compute this row's logits: into logits_out, or to on_logits when NULL */
    float *logits_out;
    float *hidden_out;       /* NULL, or d floats: the row's final-normed hidden state (embedding models) */
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
    const int *aux_layers;   /* layers whose INPUT hidden state at row aux_row is recorded */
    int n_aux;
    int aux_row;             /* -1: none */
    float *aux_out;          /* n_aux x d */
} gm_fwd_batch;

typedef struct gm_backend gm_backend;

typedef struct gm_backend_ops {
    const char *name;
    /* storage for KV blocks (called by the pool) */
    gm_kv_storage (*kv_storage)(gm_backend *be);
    /* one forward call; the blocks of every row's positions are allocated and writable */
    gm_status (*forward)(gm_backend *be, const gm_fwd_batch *b, gm_error *err);
    int (*n_threads)(const gm_backend *be);
    void (*free)(gm_backend *be);
} gm_backend_ops;

struct gm_backend {
    const gm_backend_ops *ops;
};

typedef struct gm_backend_options {
    int n_threads;  /* <= 0: physical cores */
    int max_batch;  /* rows per forward chunk */
    int max_ctx;    /* positions per sequence */
} gm_backend_options;

/* The CPU backend: a thread pool, the forward pass's scratch, blocks in host memory. lay must outlive it. */
gm_status gm_backend_cpu_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                             gm_backend **out, gm_error *err);

#endif
