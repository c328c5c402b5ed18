/* backends/cpu/forward.h — the Gemma 1/2/3/3n/4 forward pass on the CPU over rows of many sequences.
 *
 * One call takes rows {position, token or embedding, the row's sequence KV table, wants logits}: every
 * matmul runs once over all rows; RoPE, the cache writes and attention are per row, over that row's own
 * sequence. Rows of one sequence are consecutive positions in order. Calls longer than the scratch are
 * run in chunks of max_batch rows. Scratch is allocated once in gm_forward_new; nothing per call.
 *
 * A row's results depend only on the row and its sequence's cache: the matmuls quantize activations
 * per row and reduce in a fixed order, and attention splits every row's keys the same way (chunks
 * that are the row's window cut by the KV blocks, merged in order), whatever the batch. */
#ifndef GM_CPU_FORWARD_H
#define GM_CPU_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "gemma.h"
#include "kernels/threadpool.h"
#include "runtime/backend.h"
#include "runtime/kvcache.h"
#include "model/model.h"

typedef struct gm_forward gm_forward;

/* max_batch: rows per chunk (scratch size); max_ctx: positions per sequence. */
gm_status gm_forward_new(const gm_model *m, const gm_kv_layout *lay, gm_pool *pool, int max_batch, int max_ctx,
                         gm_forward **out, gm_error *err);
void gm_forward_free(gm_forward *f);
gm_status gm_forward_run(gm_forward *f, const gm_fwd_batch *b, gm_error *err);

#endif
