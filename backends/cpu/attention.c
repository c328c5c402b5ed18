/* backends/cpu/attention.c — attention over paged KV, chunked by blocks and merged in order (see attention.h). */
#include "backends/cpu/attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/ops.h"

typedef struct keys {
    int start, end;     /* keys [start, end) */
    int c0, nc;         /* blocks c0 .. c0 + nc - 1 */
} keys;

enum { GROUP_SCRATCH_MAX = 32 << 20 }; /* bytes */

gm_status gm_attn_scratch_init(gm_attn_scratch *s, int n_threads, int max_rows, int max_ctx, int max_group,
                               int max_heads, int max_hd, gm_error *err) {
    memset(s, 0, sizeof *s);
    s->max_rows = max_rows;
    s->n_threads = n_threads;
    s->max_chunks = max_ctx / GM_KV_BLOCK + 2; /* a window may start inside a block */
    s->max_group = max_group;
    s->max_hd = max_hd;
    /* per thread: the chunk partials and the scores of a group of rows; one row where there is no prefill,
     * and smaller groups where the extra rows' partials of all threads would pass GROUP_SCRATCH_MAX */
    s->row_parts = (size_t)s->max_chunks * (size_t)max_group * (size_t)(max_hd + 2);
    s->group_rows = max_rows > 1 ? GM_ATTN_ROW_GROUP : 1;
    while (s->group_rows > 1 &&
           (size_t)n_threads * (size_t)(s->group_rows - 1) * s->row_parts * sizeof(float) > GROUP_SCRATCH_MAX)
        s->group_rows /= 2;
    s->local_stride = ((size_t)s->group_rows * (s->row_parts + (size_t)max_group * GM_KV_BLOCK) + 15) & ~(size_t)15;
    /* split items: a few rows (SPLIT_ROWS) over every chunk of every head */
    s->split_cap = 4 * (size_t)s->max_chunks * (size_t)max_heads * (size_t)(max_hd + 2);
    s->local = malloc((size_t)n_threads * s->local_stride * sizeof(float));
    s->split = malloc(s->split_cap * sizeof(float));
    s->row_keys = malloc((size_t)max_rows * sizeof(keys));
    s->group_first = malloc(((size_t)max_rows + 1) * sizeof(int));
    if (!s->local || !s->split || !s->row_keys || !s->group_first) {
        gm_attn_scratch_free(s);
        return gm_fail(err, GM_ERR_NOMEM, "attention: cannot allocate scratch for %d positions", max_ctx);
    }
    return GM_OK;
}

void gm_attn_scratch_free(gm_attn_scratch *s) {
    free(s->local);
    free(s->split);
    free(s->row_keys);
    free(s->group_first);
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------- one row's keys */

static keys keys_of(const gm_attn_call *c, const gm_fwd_row *row) {
    const int pos = row->pos;
    keys k;
    if (c->bias && c->bias_is_mask) {
        k.start = 0, k.end = c->bias_n;
    } else if (c->n_keys > 0) { /* encoder: llama.cpp's symmetric window masks |pos - j| > window / 2 */
        const int h = c->lc->window / 2;
        k.start = c->lc->window > 0 && pos - h > 0 ? pos - h : 0;
        k.end = c->lc->window > 0 && pos + h + 1 < c->n_keys ? pos + h + 1 : c->n_keys;
    } else {
        const int w = c->lc->window;
        k.start = w > 0 && pos - w + 1 > 0 ? pos - w + 1 : 0;
        const bool ahead = row->attend_end > pos + 1 && (!row->attend_sliding_only || w > 0);
        k.end = ahead ? row->attend_end : pos + 1;
    }
    k.c0 = k.start / GM_KV_BLOCK;
    k.nc = (k.end - 1) / GM_KV_BLOCK - k.c0 + 1;
    return k;
}

/* Row r's part of block blk (its keys k meet the block): the keys as offsets into the block, its bias at
 * the first of them. */
static gm_attend_row row_in_block(const gm_attn_call *c, int r, keys k, int blk, const float *q, float *part) {
    const int k0 = blk * GM_KV_BLOCK > k.start ? blk * GM_KV_BLOCK : k.start;
    const int k1 = (blk + 1) * GM_KV_BLOCK < k.end ? (blk + 1) * GM_KV_BLOCK : k.end;
    return (gm_attend_row){.part = part,
                           .q = q,
                           .bias = c->bias ? c->bias + (size_t)c->rows[r].pos * (size_t)c->bias_n + k0 : NULL,
                           .lo = k0 - blk * GM_KV_BLOCK,
                           .hi = k1 - blk * GM_KV_BLOCK};
}

/* n rows of one sequence (cache kv) over block blk of KV head kvh: each row's partial of `group` heads */
static void attend_block(const gm_cpu_kernels *kern, const gm_attn_call *c, const gm_kv_table *kv, int blk, int kvh,
                         int group, const gm_attend_row *rows, int n, float *scores) {
    const gm_kv_layout *lay = c->lay;
    const size_t head = (size_t)kvh * (size_t)c->lc->head_dim * lay->elem;
    const char *kp = gm_kv_row_k(lay, kv, c->il, blk * GM_KV_BLOCK) + head;
    const char *vp = gm_kv_row_v(lay, kv, c->il, blk * GM_KV_BLOCK) + head;
    kern->attend_partial_rows(rows, n, group, kp, vp, (gm_kv_type)lay->dtype, (size_t)lay->kv_dim[c->il],
                              c->lc->head_dim, c->softcap, scores);
}

/* Merges nc chunk partials (stride apart; head g at g * (hd + 2): its chunk's softmax-weighted values, max
 * score m_c, sum z_c) of `group` heads into out (group x hd): out = sum_c a_c o_c with a_c = e^(m_c - m) z_c
 * / sum_c e^(m_c - m) z_c. One chunk gives a = 1 exactly: out is its partial. The one merge every path uses:
 * the same partials give the same bits. */
static void merge(const gm_cpu_kernels *kern, float *out, const float *parts, size_t stride, int nc, int group, int hd) {
    for (int g = 0; g < group; g++) {
        float *o = out + (size_t)g * hd;
        float mx = -INFINITY;
        for (int ch = 0; ch < nc; ch++) {
            const float m = parts[(size_t)ch * stride + (size_t)g * (hd + 2) + hd];
            mx = m > mx ? m : mx;
        }
        memset(o, 0, (size_t)hd * sizeof *o);
        if (mx == -INFINITY) continue; /* every key masked: zeros, as a softmax over nothing */
        double z = 0.0;
        for (int ch = 0; ch < nc; ch++) {
            const float *p = parts + (size_t)ch * stride + (size_t)g * (hd + 2);
            if (p[hd] != -INFINITY) z += (double)expf(p[hd] - mx) * p[hd + 1];
        }
        for (int ch = 0; ch < nc; ch++) {
            const float *p = parts + (size_t)ch * stride + (size_t)g * (hd + 2);
            if (p[hd] == -INFINITY) continue;
            kern->axpy(o, (float)((double)expf(p[hd] - mx) * p[hd + 1] / z), p, hd);
        }
    }
}

/* ---------------------------------------------------------------- work items */

typedef struct attn_job {
    const gm_cpu_kernels *kern;
    const gm_attn_call *c;
    gm_attn_scratch *s;
    int Hkv, G, parts, group;
    keys *k;          /* per row */
    size_t *split_off; /* split mode: first partial of each row */
} attn_job;

static const float *q_of(const attn_job *j, int row, int kvh, int part) {
    return j->c->q + (size_t)row * j->G * j->Hkv * j->c->lc->head_dim +
           ((size_t)kvh * j->G + (size_t)part * j->group) * j->c->lc->head_dim;
}

static float *att_of(const attn_job *j, int row, int kvh, int part) {
    return j->c->att + (size_t)row * j->G * j->Hkv * j->c->lc->head_dim +
           ((size_t)kvh * j->G + (size_t)part * j->group) * j->c->lc->head_dim;
}

/* item = (group of rows of one sequence, KV head, part of its query heads): block by block, the partials
 * of every row of the group that attends into the block (the block's keys and values read once for them:
 * gm_attend_partial_rows), then each row's merge. A row's partials are its one-row bits. */
static void group_task(void *ctx, int64_t begin, int64_t end, int thread) {
    const attn_job *j = ctx;
    const gm_attn_call *c = j->c;
    const int hd = c->lc->head_dim;
    const size_t stride = (size_t)j->group * (hd + 2);
    float *parts = j->s->local + (size_t)thread * j->s->local_stride;
    float *scores = parts + (size_t)j->s->group_rows * j->s->row_parts;
    for (int64_t t = begin; t < end; t++) {
        const int gi = (int)(t / (j->Hkv * j->parts)), kvh = (int)(t / j->parts % j->Hkv), part = (int)(t % j->parts);
        const int r0 = j->s->group_first[gi], r1 = j->s->group_first[gi + 1];
        int b0 = j->k[r0].c0, b1 = j->k[r0].c0 + j->k[r0].nc;
        for (int r = r0 + 1; r < r1; r++) {
            b0 = j->k[r].c0 < b0 ? j->k[r].c0 : b0;
            b1 = j->k[r].c0 + j->k[r].nc > b1 ? j->k[r].c0 + j->k[r].nc : b1;
        }
        for (int blk = b0; blk < b1; blk++) {
            gm_attend_row ar[GM_ATTN_ROW_GROUP];
            int n = 0;
            for (int r = r0; r < r1; r++) {
                const keys k = j->k[r];
                if (blk >= k.c0 && blk < k.c0 + k.nc)
                    ar[n++] = row_in_block(c, r, k, blk, q_of(j, r, kvh, part),
                                           parts + (size_t)(r - r0) * j->s->row_parts + (size_t)(blk - k.c0) * stride);
            }
            if (n > 0) attend_block(j->kern, c, c->rows[r0].kv, blk, kvh, j->group, ar, n, scores); /* 0: a gap between windows */
        }
        for (int r = r0; r < r1; r++)
            merge(j->kern, att_of(j, r, kvh, part), parts + (size_t)(r - r0) * j->s->row_parts, stride, j->k[r].nc, j->group, hd);
    }
}

/* split mode, phase 1: item = (row, KV head, part, chunk) over the flattened chunks of all rows */
static float *split_part(const attn_job *j, int row, int kvh, int part, int ch) {
    const size_t stride = (size_t)j->group * (j->c->lc->head_dim + 2);
    return j->s->split + j->split_off[row] + (((size_t)kvh * j->parts + (size_t)part) * (size_t)j->k[row].nc + (size_t)ch) * stride;
}

static void split_task(void *ctx, int64_t begin, int64_t end, int thread) {
    const attn_job *j = ctx;
    const int per = j->Hkv * j->parts;
    float *scores = j->s->local + (size_t)thread * j->s->local_stride;
    for (int64_t t = begin; t < end; t++) {
        /* items are numbered row by row: row r owns [first_r, first_r + nc_r * per) */
        int row = 0;
        int64_t u = t;
        while (u >= (int64_t)j->k[row].nc * per) u -= (int64_t)j->k[row].nc * per, row++;
        const int ch = (int)(u / per), kvh = (int)(u % per / j->parts), part = (int)(u % j->parts);
        const int blk = j->k[row].c0 + ch;
        const gm_attend_row ar =
            row_in_block(j->c, row, j->k[row], blk, q_of(j, row, kvh, part), split_part(j, row, kvh, part, ch));
        attend_block(j->kern, j->c, j->c->rows[row].kv, blk, kvh, j->group, &ar, 1, scores);
    }
}

static void merge_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const attn_job *j = ctx;
    const int hd = j->c->lc->head_dim;
    const size_t stride = (size_t)j->group * (hd + 2);
    for (int64_t t = begin; t < end; t++) {
        const int row = (int)(t / (j->Hkv * j->parts)), kvh = (int)(t / j->parts % j->Hkv), part = (int)(t % j->parts);
        merge(j->kern, att_of(j, row, kvh, part), split_part(j, row, kvh, part, 0), stride, j->k[row].nc, j->group, hd);
    }
}

enum { SPLIT_ROWS = 4 };

/* Cuts the rows into groups of consecutive rows of one sequence (s->group_first), at most s->group_rows
 * each, fewer where whole groups would leave threads idle (at least 4 items per thread); the number of
 * groups. The grouping changes which rows share the reads of a block, never a row's bits. */
static int row_groups(gm_attn_scratch *s, const gm_attn_call *c, int per_group, int nt) {
    int size = s->group_rows;
    while (size > 1 && (int64_t)(c->n + size - 1) / size * per_group < 4 * (int64_t)nt) size /= 2;
    int g = 0;
    for (int i = 0; i < c->n; i++)
        if (i == 0 || i - s->group_first[g - 1] == size || c->rows[i].kv != c->rows[s->group_first[g - 1]].kv)
            s->group_first[g++] = i;
    s->group_first[g] = c->n;
    return g;
}

void gm_attention(const gm_cpu_kernels *kern, gm_pool *pool, gm_attn_scratch *s, const gm_attn_call *c) {
    const int nt = pool ? gm_pool_size(pool) : 1;
    keys *kv = (keys *)s->row_keys; /* c->n <= max_rows: the forward pass runs chunks of its scratch size */
    const bool few = c->n <= SPLIT_ROWS;
    attn_job j = {.kern = kern, .c = c, .s = s, .Hkv = c->lc->n_kv_heads, .G = c->lc->n_heads / c->lc->n_kv_heads};
    /* a lone KV head over a few rows: split its query heads so every thread has work; each head's
     * arithmetic is the same whatever group it is computed in */
    j.parts = c->n * j.Hkv < 2 * nt && j.G % 2 == 0 && nt > 1 ? 2 : 1;
    j.group = j.G / j.parts;
    int64_t chunks = 0;
    for (int i = 0; i < c->n; i++) {
        kv[i] = keys_of(c, &c->rows[i]);
        chunks += kv[i].nc;
    }
    j.k = kv;
    const size_t per_chunk = (size_t)c->lc->n_heads * (size_t)(c->lc->head_dim + 2);
    size_t off[SPLIT_ROWS];
    const int64_t items = (int64_t)c->n * j.Hkv * j.parts;
    if (few && items < 2 * nt && (size_t)chunks * per_chunk <= s->split_cap && chunks > c->n) {
        size_t acc = 0;
        for (int i = 0; i < c->n; i++) off[i] = acc, acc += (size_t)kv[i].nc * per_chunk;
        j.split_off = off;
        gm_pool_parallel_for(pool, chunks * j.Hkv * j.parts, 1, split_task, &j);
        gm_pool_parallel_for(pool, items, 1, merge_task, &j);
    } else {
        const int64_t groups = row_groups(s, c, j.Hkv * j.parts, nt);
        gm_pool_parallel_for(pool, groups * j.Hkv * j.parts, 1, group_task, &j);
    }
}
