/* model/forward.h — the Gemma 1/2/3 forward pass on the CPU over a KV cache.
 *
 * One call processes n consecutive positions pos0 .. pos0+n-1 (a prefill batch, or n = 1 for a
 * decode step): it writes their keys/values into the cache and returns the logits of the last
 * position (or of every position). Batches larger than the scratch are split into chunks.
 * Scratch is allocated once in gm_forward_new; nothing is allocated per call. */
#ifndef GM_MODEL_FORWARD_H
#define GM_MODEL_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "gemma.h"
#include "kernels/threadpool.h"
#include "model/kvcache.h"
#include "model/model.h"

typedef struct gm_forward gm_forward;

typedef struct gm_fwd_batch {
    int n;                    /* positions in this call, >= 1 */
    int pos0;                 /* position of the first one; the cache must hold 0 .. pos0-1 */
    const int32_t *ids;       /* n token ids (used when embeds is NULL) */
    const float *embeds;      /* NULL, or n x d inputs to layer 0 (no embedding scale applied) */
    const float *bias;        /* NULL, or n x n additive bias: query i, key j (both in this batch),
                               * added to the score after soft-capping; the causal/window mask stays */
    bool bias_is_mask;        /* the bias replaces the causal and window masks inside the batch (keys
                               * after the query allowed where finite: bidirectional spans). Needs
                               * pos0 == 0 and the whole batch in one chunk (n <= max_batch). */
    float *logits;            /* NULL, or n_vocab floats (last position), or n x n_vocab (all_logits) */
    bool all_logits;
    /* NULL, or called with the logits of every position i in [0, n) in order (computed a few rows
     * at a time into scratch: for scoring long sequences without n x n_vocab floats). */
    void (*on_logits)(void *user, int i, const float *logits);
    void *user;
    int logits_from;          /* on_logits only for positions >= this (the LM head skips the rest) */
    const int *aux_layers;    /* layers whose INPUT hidden state (last position) is recorded */
    int n_aux;
    float *aux_out;           /* n_aux x d */
} gm_fwd_batch;

/* max_batch: positions per chunk (scratch size); max_ctx: the largest position + 1 ever used. */
gm_status gm_forward_new(const gm_model *m, gm_pool *pool, int max_batch, int max_ctx, gm_forward **out,
                         gm_error *err);
void gm_forward_free(gm_forward *f);
gm_status gm_forward_run(gm_forward *f, gm_kvcache *cache, const gm_fwd_batch *b, gm_error *err);

#endif
