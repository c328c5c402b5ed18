/* vision/vit_attention.c — see vit_attention.h. */
#include "vision/vit_attention.h"

#include <math.h>
#include <string.h>

typedef struct softmax_job {
    const gm_cpu_kernels *kern;
    float *y;
    int n;
} softmax_job;

/* softmax of each score row (the scale is in q already) */
static void softmax_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const softmax_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n, mx = -INFINITY;
        for (int i = 0; i < j->n; i++) mx = y[i] > mx ? y[i] : mx;
        const float inv = (float)(1.0 / j->kern->exp_sum(y, j->n, mx));
        for (int i = 0; i < j->n; i++) y[i] *= inv;
    }
}

/* Head hh's keys as a matrix (n rows of hd) and its values transposed (hd rows of n). */
static void gather_head(const vit_attn *a, int hh) {
    const int N = a->n, D = a->ld, hd = a->head_dim;
    for (int p = 0; p < N; p++) {
        memcpy(a->kh + (size_t)p * hd, a->k + (size_t)p * D + hh * hd, hd * sizeof(float));
        for (int d = 0; d < hd; d++) a->vt[(size_t)d * N + p] = a->v[(size_t)p * D + hh * hd + d];
    }
}

/* One head over query rows [q0, q0 + n): o's columns of the head = softmax(scale q k^T) v. */
static gm_status attend_chunk(const vit_attn *a, int hh, int q0, int n) {
    const int N = a->n, D = a->ld, hd = a->head_dim;
    for (int r = 0; r < n; r++)
        for (int d = 0; d < hd; d++) a->qh[(size_t)r * hd + d] = a->q[(size_t)(q0 + r) * D + hh * hd + d] * a->scale;
    const gm_matrix Kv = {.type = GM_TYPE_F32, .rows = N, .cols = hd, .data = a->kh};
    const gm_matrix Vv = {.type = GM_TYPE_F32, .rows = hd, .cols = N, .data = a->vt};
    const gm_mm_weight K = gm_mm_view(&Kv, a->isa), Vt = gm_mm_view(&Vv, a->isa);
    gm_status st = gm_mm(&K, a->qh, n, a->scores, a->pool, a->mm);
    if (st) return st;
    softmax_job j = {a->kern, a->scores, N};
    /* a few thousand floats per chunk at least: below that the pool's wake-up costs more than the work */
    gm_pool_parallel_for(a->pool, n, N >= 4096 ? 1 : 4096 / N, softmax_task, &j);
    if ((st = gm_mm(&Vt, a->scores, n, a->oh, a->pool, a->mm))) return st;
    for (int r = 0; r < n; r++) memcpy(a->o + (size_t)(q0 + r) * D + hh * hd, a->oh + (size_t)r * hd, hd * sizeof(float));
    return GM_OK;
}

gm_status vit_attention(const vit_attn *a) {
    gm_status st = GM_OK;
    for (int hh = 0; hh < a->n_head && !st; hh++) {
        gather_head(a, hh);
        for (int q0 = 0; q0 < a->n && !st; q0 += a->chunk)
            st = attend_chunk(a, hh, q0, a->n - q0 < a->chunk ? a->n - q0 : a->chunk);
    }
    return st;
}
