/* runtime/eagle3.h — an EAGLE-3 head's two passes (model/families/eagle3.h has the math) over the backend's ops.
 *
 * encode: g = fc (norm_before_fc ? RMS(taps) : taps) for rows of three concatenated target states.
 * decode: one row per (token, g, position) of a head sequence: its keys and values go into the head's own cache at
 *   the position (the caller makes it writable), attention is causal over the head's cache [0, pos]; out (the
 *   next g) and, when asked, logits over the TARGET's vocabulary (a draft vocabulary is scattered through d2t, the
 *   rest -inf).
 * NORM RoPE (adjacent pairs, as llama.cpp's Llama graph) is computed as NEOX RoPE on q and k whose first
 * rope_dims components are reordered even-then-odd: both are reordered alike, so q.k is unchanged. The input rows
 * and the reordering are written as host memory (the backend must have host activations). */
#ifndef GM_RUNTIME_EAGLE3_H
#define GM_RUNTIME_EAGLE3_H

#include "gemma.h"
#include "model/model.h"
#include "runtime/backend.h"
#include "runtime/kvcache.h"

typedef struct gm_e3_fwd gm_e3_fwd;

typedef struct gm_e3_row {
    const gm_kv_table *kv; /* the head sequence's blocks: [0, pos] held, pos writable */
    int pos;
    int32_t token;         /* a target token id */
    const float *g;        /* d floats (host) */
    float *g_next;         /* NULL, or d floats (host): the layer's output */
    float *logits;         /* NULL, or the target's n_vocab floats (host) */
} gm_e3_row;

/* The head h for target t on backend be (h's weights, hlay: h's own cache layout). */
gm_status gm_e3_fwd_new(const gm_model *t, const gm_model *h, const gm_kv_layout *hlay, gm_backend *be, int max_rows,
                        int max_ctx, gm_e3_fwd **out, gm_error *err);
void gm_e3_fwd_free(gm_e3_fwd *f);
/* n rows of 3 x d_target floats (host) -> n rows of d (host) */
gm_status gm_e3_encode(gm_e3_fwd *f, const float *taps, int n, float *g, gm_error *err);
gm_status gm_e3_decode(gm_e3_fwd *f, const gm_e3_row *rows, int n, gm_error *err);

#endif
