/* runtime/mtp.h — the draft step of Gemma 4's MTP assistant (a gemma4-assistant model: model/families/gemma4.h)
 * over a target's cache, as the math over the backend's ops. docs/speculative.md has the sources.
 *
 * One row drafts one token for one target sequence whose cache holds positions [0, pos):
 *   e = E_target[token] * sqrt(d_bb);  x = W_pre concat(e, h)                  (d_bb: the target's width)
 *   per layer: q = RoPE_pos(qnorm(Wq RMS_attn(x)));  a = attention of q over the target's keys and values of
 *     the target's last layer of the same kind (sliding: keys (pos - window, pos), full: [0, pos)), scale 1;
 *     x += RMS_post_attn(Wo a);  x += RMS_post_ffw(FFN(RMS_ffn(x)));  x *= layer_output_scale
 *   y = RMS_out(x);  logits = E_drafter y (no soft-cap);  h_next = W_post y
 * The assistant writes nothing into the cache: every step of a draft attends over the same keys at the same
 * position pos (llama.cpp's convention), with the previous step's token and h_next. The first h is the target's
 * final-normed hidden state at pos - 1 (gm_row.hidden), its token the one at pos.
 *
 * Rows are independent (each op is, runtime/backend.h): a row's results are the same alone or batched. The input
 * concat is written as host memory (as Gemma 4's hooks are), so the backend must have host activations. */
#ifndef GM_RUNTIME_MTP_H
#define GM_RUNTIME_MTP_H

#include "gemma.h"
#include "model/model.h"
#include "runtime/backend.h"
#include "runtime/kvcache.h"

typedef struct gm_mtp_fwd gm_mtp_fwd;

typedef struct gm_mtp_fwd_row {
    const gm_kv_table *kv; /* the target sequence's blocks: positions [0, pos) computed */
    int pos;               /* >= 1 */
    int32_t token;         /* a target token id */
    const float *h;        /* d_backbone floats */
    float *logits;         /* n_vocab floats (host) */
    float *h_next;         /* d_backbone floats (host) */
} gm_mtp_fwd_row;

/* The draft step of assistant d over target t's cache (layout tlay), on backend be (d's weights, tlay as its
 * layout, host activations). Checks that d fits t: the same vocabulary size, backbone width = t's width, each
 * layer's head size and KV heads those of the target layer it reads, a window of at least 2 that t's cache
 * still holds (<= t's). max_rows: rows per call; max_ctx: t's positions per sequence. */
gm_status gm_mtp_fwd_new(const gm_model *t, const gm_kv_layout *tlay, const gm_model *d, gm_backend *be, int max_rows,
                         int max_ctx, gm_mtp_fwd **out, gm_error *err);
void gm_mtp_fwd_free(gm_mtp_fwd *f);
gm_status gm_mtp_fwd_run(gm_mtp_fwd *f, const gm_mtp_fwd_row *rows, int n, gm_error *err);

#endif
