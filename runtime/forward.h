/* runtime/forward.h — the Gemma 1/2/3/3n/4 forward pass over rows of many sequences, on any backend.
 *
 * One call takes rows {position, token or embedding, the row's sequence KV table, wants logits}: every
 * matmul runs once over all rows; RoPE, the cache writes and attention are per row, over that row's own
 * sequence. Rows of one sequence are consecutive positions in order. Calls longer than the scratch are
 * run in chunks of max_batch rows. Scratch is allocated once (from the backend) in gm_forward_new.
 *
 * A row's results depend only on the row and its sequence's cache: every backend op is row-independent
 * (runtime/backend.h), so a row's logits are the same alone, in a batch or chunked. */
#ifndef GM_RUNTIME_FORWARD_H
#define GM_RUNTIME_FORWARD_H

#include "gemma.h"
#include "model/model.h"
#include "runtime/backend.h"
#include "runtime/kvcache.h"

typedef struct gm_forward gm_forward;

/* What a family adds to the Gemma block, at named points of the forward pass (model/family.h's row points at
 * its table; NULL entries are skipped). The state is the family's per-forward scratch; x / xn / gate / o the
 * chunk's n rows. */
typedef struct gm_forward_hooks {
    /* The hooks are host code around the ops: they read and write the activations (and their state) as host
     * memory, so they run only on a backend whose activations are (gm_backend_ops.host_memory); the forward pass
     * refuses the family on another. false: every step goes through the backend's ops. */
    bool host_memory;
    gm_status (*state_new)(const gm_model *m, int max_batch, gm_backend *be, void **state, gm_error *err);
    void (*state_free)(void *state);
    gm_status (*chunk_begin)(void *state, const gm_fwd_row *rows, const float *x, int n); /* x: the embeddings */
    gm_status (*layer_begin)(void *state, int il, float *x, int n);          /* before the attention norm */
    gm_status (*attn_input)(void *state, int il, const float *xn, int n);    /* the normed attention input */
    gm_status (*attn_residual)(void *state, int il, float *x, int n);        /* after x += attention */
    gm_status (*ffn_gate)(void *state, int il, float *gate, int n, int ff);  /* before GeGLU */
    gm_status (*ffn_output)(void *state, int il, const float *x, float *o, int n); /* the FFN output before its
                                                                                 post-norm; x: the residual */
    gm_status (*layer_end)(void *state, int il, float *x, int n);            /* after x += FFN */
    gm_status (*chunk_end)(void *state, float *x, int n);                    /* before the final norm */
} gm_forward_hooks;

/* be runs the ops (m, lay and be must outlive the forward); max_batch: rows per chunk; max_ctx: positions
 * per sequence. */
gm_status gm_forward_new(const gm_model *m, const gm_kv_layout *lay, gm_backend *be, int max_batch, int max_ctx,
                         gm_forward **out, gm_error *err);
void gm_forward_free(gm_forward *f);
gm_status gm_forward_run(gm_forward *f, const gm_fwd_batch *b, gm_error *err);

#endif
