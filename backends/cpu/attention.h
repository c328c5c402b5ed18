/* backends/cpu/attention.h — attention of rows over their sequences' paged keys and values.
 *
 * Every query's keys (its window, or all earlier positions) are cut at the KV block boundaries into
 * chunks; each chunk gives an unnormalised partial per head (max score, sum of exponentials, weighted
 * sum of values: kernels/ops.h gm_attend_partial) and the chunks are merged in order by log-sum-exp
 * rescaling. Prefill and decode run the same chunks and the same merge, so a row's output does not
 * depend on the batch; only the spread of work over threads changes: many rows run one (row, KV head)
 * item per task, a few rows over long contexts run one (row, KV head, chunk) item per task so both
 * threads have work, then merge. */
#ifndef GM_CPU_ATTENTION_H
#define GM_CPU_ATTENTION_H

#include "kernels/ops.h"
#include "kernels/threadpool.h"
#include "runtime/backend.h"
#include "runtime/kvcache.h"

enum { GM_ATTN_ROW_GROUP = 4 }; /* query rows of one sequence sharing each block's reads */

typedef struct gm_attn_scratch {
    int n_threads, max_chunks, max_group, max_hd;
    float *local;    /* per thread: max_chunks partials of max_group heads, then scores */
    size_t local_stride;
    float *split;    /* partials of split items */
    size_t split_cap;
    int *row_keys;   /* max_rows x 4: each row's key range and chunks */
    int max_rows;
    int group_rows;    /* rows per group of gm_attention's items (GM_ATTN_ROW_GROUP, or 1 without prefill) */
    size_t row_parts;  /* floats of one row's chunk partials in local */
    int *group_first;  /* max_rows + 1: first row of each group */
} gm_attn_scratch;

gm_status gm_attn_scratch_init(gm_attn_scratch *s, int n_threads, int max_rows, int max_ctx, int max_group,
                               int max_heads, int max_hd, gm_error *err);
void gm_attn_scratch_free(gm_attn_scratch *s);

/* One layer over n rows (runtime/backend.h, gm_attn_call) with the kernels of kern's level. */
void gm_attention(const gm_cpu_kernels *kern, gm_pool *pool, gm_attn_scratch *s, const gm_attn_call *c);

#endif
