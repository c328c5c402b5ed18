/* backends/cpu/dense.c — see dense.h. The code of the vision encoders' own loops before they ran on the backend
 * (vision/siglip.c, vision/gemma4v.c, vision/vit_attention.c), moved here unchanged in its arithmetic: the same
 * kernels in the same order, so the embeddings kept their bits. */
#include "backends/cpu/dense.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/scratch.h"
#include "kernels/cpu.h"
#include "kernels/sgemm.h"

/* SG_TOKENS: patches per GEMM work item (a multiple of the kernel's 12-token tile). */
enum { SG_TOKENS = 96 };

/* ---------------------------------------------------------------- scratch */

void gm_cpu_dense_init(gm_cpu_dense *d, const gm_backend_options *opt, const gm_pool *pool) {
    memset(d, 0, sizeof *d);
    d->isa = opt->isa;
    d->sgemm = opt->float_gemm && gm_isa_at_least(opt->isa, GM_ISA_AVX512) && gm_sgemm_avx512_supports(GM_TYPE_F32) &&
               gm_pool_size(pool) <= GM_DENSE_SG_MAX_THREADS;
}

gm_status gm_cpu_dense_reserve(gm_cpu_dense *d, const gm_pool *pool, const gm_dense_shape *s, gm_error *err) {
    free(d->buf);
    d->buf = NULL;
    const size_t N = (size_t)s->max_rows, hd = (size_t)s->head_dim;
    const size_t C = (size_t)(d->chunk = s->attn_rows > 0 && s->attn_rows < s->max_rows ? s->attn_rows : s->max_rows);
    const size_t W = (size_t)(s->max_width > s->head_dim ? s->max_width : s->head_dim);
    const bool sg = d->sgemm, mm = !sg;
    d->max_rows = s->max_rows, d->head_dim = s->head_dim;
    /* a GEMM panel spans the longest inner dimension: a row's width, or the keys of P V */
    d->panel_floats = (GM_SGEMM_MR * (W > N ? W : N) + 15) / 16 * 16;
    const gm_scratch_part parts[] = {
        {&d->ones, W},
        {&d->kh, mm ? N * hd : 0}, {&d->vt, mm ? N * hd : 0}, {&d->qh, mm ? C * hd : 0}, {&d->oh, mm ? C * hd : 0},
        {&d->scores, C * N},
        {&d->panels, sg ? (size_t)gm_pool_size(pool) * d->panel_floats : 0},
        {&d->kpan, sg ? (N + GM_SGEMM_MR - 1) / GM_SGEMM_MR * GM_SGEMM_MR * hd : 0},
        {&d->vpan, sg ? (hd + GM_SGEMM_MR - 1) / GM_SGEMM_MR * GM_SGEMM_MR * N : 0},
        {&d->rsum, sg ? C : 0},
    };
    size_t bytes;
    d->buf = gm_scratch_carve(parts, sizeof parts / sizeof parts[0], &bytes);
    if (!d->buf) return gm_fail(err, GM_ERR_NOMEM, "cpu backend: encoder scratch: %zu MiB", bytes >> 20);
    for (size_t i = 0; i < W; i++) d->ones[i] = 1.0f;
    return GM_OK;
}

void gm_cpu_dense_free(gm_cpu_dense *d) {
    free(d->buf);
    d->buf = NULL;
}

/* ---------------------------------------------------------------- row-wise ops on the pool */

typedef struct row_job {
    float *y;
    const float *x, *w, *b, *up; /* op-specific, see each task */
    const gm_cpu_kernels *kern;
    int n;                       /* floats per row */
    float eps, scale, lo, hi;
    int64_t ld;                  /* rowscale_task: floats between rows */
    gm_act act;
} row_job;

static void run_rows(gm_pool *pool, gm_task_fn fn, row_job *j, int64_t n_rows) {
    /* a few thousand floats per chunk at least: below that the pool's wake-up costs more than the work */
    const int64_t grain = j->n >= 4096 ? 1 : 4096 / j->n;
    gm_pool_parallel_for(pool, n_rows, grain, fn, j);
}

/* LayerNorm with weight and bias, sums in double: y = (x - mean) / sqrt(var + eps) * w + b */
static void layernorm_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = j->x + r * j->n;
        float *y = j->y + r * j->n;
        double sum = 0, sq = 0;
        for (int i = 0; i < j->n; i++) sum += x[i];
        const double mean = sum / j->n;
        for (int i = 0; i < j->n; i++) sq += (x[i] - mean) * (x[i] - mean);
        const float rstd = (float)(1.0 / sqrt(sq / j->n + j->eps)), m = (float)mean;
        for (int i = 0; i < j->n; i++) y[i] = (x[i] - m) * rstd * j->w[i] + j->b[i];
    }
}

void gm_cpu_layernorm(gm_pool *pool, float *y, const float *x, const float *w, const float *b, int n, int dim,
                      float eps) {
    row_job j = {.y = y, .x = x, .w = w, .b = b, .n = dim, .eps = eps};
    run_rows(pool, layernorm_task, &j, n);
}

/* y += b, or (a residual) y += x + b */
static void bias_add_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        if (!j->x) {
            for (int i = 0; i < j->n; i++) y[i] += j->b[i];
            continue;
        }
        const float *x = j->x + r * j->n;
        for (int i = 0; i < j->n; i++) y[i] += x[i] + j->b[i];
    }
}

void gm_cpu_bias_add(gm_pool *pool, float *y, const float *x, const float *b, int n, int dim) {
    row_job j = {.y = y, .x = x, .b = b, .n = dim};
    run_rows(pool, bias_add_task, &j, n);
}

/* y = act(y + b) (* up) */
static void bias_act_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        const float *u = j->up ? j->up + r * j->n : NULL;
        if (j->b)
            for (int i = 0; i < j->n; i++) y[i] += j->b[i];
        if (j->act == GM_ACT_GELU_TANH) {
            j->kern->geglu(y, u ? u : j->w, j->n); /* w: ones */
            continue;
        }
        const float k = j->act == GM_ACT_GELU_QUICK ? 1.702f : 1.0f; /* x sigmoid(k x): gelu_quick, SiLU */
        if (u)
            for (int i = 0; i < j->n; i++) y[i] = y[i] / (1.0f + expf(-k * y[i])) * u[i];
        else
            for (int i = 0; i < j->n; i++) y[i] = y[i] / (1.0f + expf(-k * y[i]));
    }
}

void gm_cpu_bias_act(gm_pool *pool, const gm_cpu_kernels *kern, const float *ones, float *y, const float *b,
                     const float *up, int n, int dim, gm_act act) {
    row_job j = {.y = y, .b = b, .up = up, .w = ones, .kern = kern, .n = dim, .act = act};
    run_rows(pool, bias_act_task, &j, n);
}

/* y = clamp(x, lo, hi) over floats [r0, r1) */
static void clamp_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    for (int64_t i = r0; i < r1; i++) {
        const float v = j->x[i];
        j->y[i] = v < j->lo ? j->lo : v > j->hi ? j->hi : v;
    }
}

void gm_cpu_clamp(gm_pool *pool, float *y, const float *x, size_t n, float lo, float hi) {
    row_job j = {.y = y, .x = x, .lo = lo, .hi = hi};
    gm_pool_parallel_for(pool, (int64_t)n, 4096, clamp_task, &j);
}

/* y *= w per row */
static void mul_rows_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        for (int i = 0; i < j->n; i++) y[i] *= j->w[i];
    }
}

void gm_cpu_mul_rows(gm_pool *pool, float *y, const float *w, int n, int dim) {
    row_job j = {.y = y, .w = w, .n = dim};
    run_rows(pool, mul_rows_task, &j, n);
}

/* ---------------------------------------------------------------- the float GEMM (kernels/sgemm.h) on the pool */

/* The weight side: `rows` rows of k values, row r at data + r * stride bytes; or, transposed, value (r, c) at
 * the float data[c * stride + r] (attention's values as stored); or, when packed is set, already packed:
 * panel p at packed + p * k * GM_SGEMM_MR. */
typedef struct sg_weights {
    int type;
    const void *data;
    int64_t rows, k, stride;
    bool trans;
    const float *packed;
} sg_weights;

typedef struct sg_job {
    sg_weights w;
    const float *x;
    float *y;
    int64_t ldx, ldy, n_tok, n_tb; /* n_tb: work items (SG_TOKENS patches each) per panel */
    float *panels;
    size_t panel_floats;
    int64_t packed[GM_DENSE_SG_MAX_THREADS]; /* the panel each thread holds (-1: none) */
} sg_job;

/* item i = panel i / n_tb, patches (i % n_tb) * SG_TOKENS...: a thread packs a panel once for the items it
 * claims in a row (the claims are contiguous) */
static void sg_task(void *ctx, int64_t i0, int64_t i1, int thread) {
    sg_job *j = ctx;
    float *panel = j->panels + (size_t)thread * j->panel_floats;
    for (int64_t i = i0; i < i1; i++) {
        const int64_t p = i / j->n_tb, t0 = i % j->n_tb * SG_TOKENS, r0 = p * GM_SGEMM_MR;
        const int nr = j->w.rows - r0 < GM_SGEMM_MR ? (int)(j->w.rows - r0) : GM_SGEMM_MR;
        if (j->w.packed) {
            panel = (float *)j->w.packed + p * j->w.k * GM_SGEMM_MR;
        } else if (j->packed[thread] != p) {
            if (j->w.trans) gm_sgemm_avx512_pack_t(j->w.data, j->w.stride, r0, nr, j->w.k, panel);
            else gm_sgemm_avx512_pack(j->w.type, j->w.data, (size_t)j->w.stride, r0, nr, j->w.k, panel);
            j->packed[thread] = p;
        }
        const int64_t nt = j->n_tok - t0 < SG_TOKENS ? j->n_tok - t0 : SG_TOKENS;
        gm_sgemm_avx512_panel(panel, nr, j->w.k, j->x + t0 * j->ldx, j->ldx, nt, j->y + t0 * j->ldy + r0, j->ldy);
    }
}

/* panels [p0, p1) of w into w.packed (the per-thread panel buffers are not used) */
static void sg_pack_task(void *ctx, int64_t p0, int64_t p1, int thread) {
    (void)thread;
    const sg_weights *w = ctx;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t r0 = p * GM_SGEMM_MR;
        const int nr = w->rows - r0 < GM_SGEMM_MR ? (int)(w->rows - r0) : GM_SGEMM_MR;
        float *panel = (float *)w->packed + p * w->k * GM_SGEMM_MR;
        if (w->trans) gm_sgemm_avx512_pack_t(w->data, w->stride, r0, nr, w->k, panel);
        else gm_sgemm_avx512_pack(w->type, w->data, (size_t)w->stride, r0, nr, w->k, panel);
    }
}

/* y[t * ldy + r] = W[r] . x[t * ldx ..] for n_tok patches */
static void sgemm(const gm_cpu_dense *d, gm_pool *pool, sg_weights w, const float *x, int64_t ldx, int64_t n_tok,
                  float *y, int64_t ldy) {
    sg_job j = {.w = w, .x = x, .y = y, .ldx = ldx, .ldy = ldy, .n_tok = n_tok, .n_tb = (n_tok + SG_TOKENS - 1) / SG_TOKENS,
                .panels = d->panels, .panel_floats = d->panel_floats};
    for (int t = 0; t < GM_DENSE_SG_MAX_THREADS; t++) j.packed[t] = -1;
    const int64_t items = (w.rows + GM_SGEMM_MR - 1) / GM_SGEMM_MR * j.n_tb;
    /* many panels: a claim is whole panels, each packed once; few (attention's values): finer claims */
    const int64_t panels = items / j.n_tb, nth = gm_pool_size(pool);
    const int64_t chunk = w.packed || panels < 8 * nth ? items / (4 * nth) : j.n_tb;
    gm_pool_parallel_for_chunk(pool, items, chunk > 1 ? chunk : 1, sg_task, &j);
}

gm_status gm_cpu_dense_matmul(gm_cpu_dense *d, gm_pool *pool, gm_matmul_scratch *mm, const gm_matrix *const *W,
                              float *const *y, int count, const float *x, int n) {
    for (int i = 0; i < count; i++) {
        const gm_matrix *M = W[i];
        if (!gm_sgemm_avx512_supports(M->type)) {
            const gm_mm_weight w = gm_mm_view(M, d->isa);
            gm_status st = gm_mm(&w, x, n, y[i], pool, mm);
            if (st) return st;
            continue;
        }
        const sg_weights w = {M->type, M->data, M->rows, M->cols, (int64_t)gm_row_bytes(M->type, M->cols), false, NULL};
        sgemm(d, pool, w, x, M->cols, n, y[i], M->rows);
    }
    return GM_OK;
}

/* ---------------------------------------------------------------- attention: the GEMM's */

/* softmax numerators of each score row (the scale is in the packed keys), 1 / their sum into j->w[r] */
static void softmax_sg_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    float *inv = (float *)j->w;
    for (int64_t r = r0; r < r1; r++) inv[r] = 1.0f / gm_sgemm_avx512_softmax_num(j->y + r * j->n, j->n);
}

/* row r's n floats (at j->y + r * j->ld) times j->x[r] */
static void rowscale_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) gm_scale(j->y + r * j->ld, j->n, j->x[r]);
}

/* the scale into the packed keys: the scores come out scaled */
static void scale_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    gm_scale(j->y + r0 * j->n, (int)((r1 - r0) * j->n), j->scale);
}

/* One head: its keys and values packed once (read in place from rows of ld), then per chunk of queries (read
 * in place) scores, softmax and P V written in place into o. */
static void attend_head_sg(gm_cpu_dense *d, gm_pool *pool, const gm_dense_attn *a, int hh) {
    const int64_t N = a->n, D = a->ld, hd = a->head_dim;
    const sg_weights K = {GM_TYPE_F32, a->k + hh * hd, N, hd, D * (int64_t)sizeof(float), false, d->kpan};
    const sg_weights V = {GM_TYPE_F32, a->v + hh * hd, hd, N, D, true, d->vpan};
    const int64_t kp = (N + GM_SGEMM_MR - 1) / GM_SGEMM_MR, vp = (hd + GM_SGEMM_MR - 1) / GM_SGEMM_MR;
    gm_pool_parallel_for(pool, kp, 1, sg_pack_task, (void *)&K);
    gm_pool_parallel_for(pool, vp, 1, sg_pack_task, (void *)&V);
    row_job sj = {.y = d->kpan, .n = (int)hd * GM_SGEMM_MR, .scale = a->scale};
    run_rows(pool, scale_task, &sj, kp);
    for (int64_t q0 = 0; q0 < N; q0 += d->chunk) {
        const int64_t n = N - q0 < d->chunk ? N - q0 : d->chunk;
        sgemm(d, pool, K, a->q + q0 * D + hh * hd, D, n, d->scores, N);
        row_job mj = {.y = d->scores, .w = d->rsum, .n = (int)N};
        run_rows(pool, softmax_sg_task, &mj, n);
        sgemm(d, pool, V, d->scores, N, n, a->o + q0 * D + hh * hd, D);
        row_job rj = {.y = a->o + q0 * D + hh * hd, .x = d->rsum, .n = (int)hd, .ld = D};
        run_rows(pool, rowscale_task, &rj, n);
    }
}

/* ---------------------------------------------------------------- attention: kernels/matmul.c's */

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
static void gather_head(const gm_cpu_dense *d, const gm_dense_attn *a, int hh) {
    const int N = a->n, D = a->ld, hd = a->head_dim;
    for (int p = 0; p < N; p++) {
        memcpy(d->kh + (size_t)p * hd, a->k + (size_t)p * D + hh * hd, hd * sizeof(float));
        for (int e = 0; e < hd; e++) d->vt[(size_t)e * N + p] = a->v[(size_t)p * D + hh * hd + e];
    }
}

/* One head over query rows [q0, q0 + n): o's columns of the head = softmax(scale q k^T) v. */
static gm_status attend_chunk(const gm_cpu_dense *d, const gm_cpu_kernels *kern, gm_pool *pool,
                              gm_matmul_scratch *mm, const gm_dense_attn *a, int hh, int q0, int n) {
    const int N = a->n, D = a->ld, hd = a->head_dim;
    for (int r = 0; r < n; r++)
        for (int e = 0; e < hd; e++) d->qh[(size_t)r * hd + e] = a->q[(size_t)(q0 + r) * D + hh * hd + e] * a->scale;
    gm_matrix K = {.type = GM_TYPE_F32, .rows = N, .cols = hd, .data = d->kh};
    gm_matrix Vt = {.type = GM_TYPE_F32, .rows = hd, .cols = N, .data = d->vt};
    const gm_mm_weight Kw = gm_mm_view(&K, d->isa), Vw = gm_mm_view(&Vt, d->isa);
    gm_status st = gm_mm(&Kw, d->qh, n, d->scores, pool, mm);
    if (st) return st;
    softmax_job j = {kern, d->scores, N};
    /* a few thousand floats per chunk at least: below that the pool's wake-up costs more than the work */
    gm_pool_parallel_for(pool, n, N >= 4096 ? 1 : 4096 / N, softmax_task, &j);
    if ((st = gm_mm(&Vw, d->scores, n, d->oh, pool, mm))) return st;
    for (int r = 0; r < n; r++) memcpy(a->o + (size_t)(q0 + r) * D + hh * hd, d->oh + (size_t)r * hd, hd * sizeof(float));
    return GM_OK;
}

gm_status gm_cpu_dense_attention(gm_cpu_dense *d, const gm_cpu_kernels *kern, gm_pool *pool, gm_matmul_scratch *mm,
                                 const gm_dense_attn *a) {
    if (!d->buf || a->n > d->max_rows || a->head_dim != d->head_dim) return GM_ERR_ARG; /* outside the reserve */
    if (d->sgemm) {
        for (int hh = 0; hh < a->n_head; hh++) attend_head_sg(d, pool, a, hh);
        return GM_OK;
    }
    gm_status st = GM_OK;
    for (int hh = 0; hh < a->n_head && !st; hh++) {
        gather_head(d, a, hh);
        for (int q0 = 0; q0 < a->n && !st; q0 += d->chunk)
            st = attend_chunk(d, kern, pool, mm, a, hh, q0, a->n - q0 < d->chunk ? a->n - q0 : d->chunk);
    }
    return st;
}
