/* vision/siglip.c — the Gemma 3 image encoder's forward pass (llama.cpp tools/mtmd/models/siglip.cpp and
 * clip.cpp build_vit; HF SiglipVisionModel + Gemma3MultiModalProjector):
 *
 *   patches (im2col, p = py * grid + px) -> patch matmul + bias + learned position row (no CLS token)
 *   n_layers x pre-LN block: h += out(MHA(LN1 h)), bidirectional, 1/sqrt(hd); h += down(act(up(LN2 h)))
 *   post LayerNorm -> scale x scale average pooling (row-major tokens) -> RMSNorm * (1 + w) -> x W_proj
 *
 * Every linear runs over all patches at once, threaded by the pool: on AVX-512 with float weights through
 * kernels/sgemm.h (panels of 32 weight rows against register tiles of 12 patches: 4096 patches per matmul are
 * a GEMM, not the text model's many dot products); otherwise on gm_matmul (the text model's kernels). Attention
 * is two more matmuls per head and chunk of queries: Q K^T over the head's keys, then P V over its values (the
 * sgemm path reads both in place, the gm_matmul path gathers them into f32 matrices). The row-wise ops run on
 * the pool. All scratch is allocated at open, sized by the file's shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/sgemm.h"
#include "kernels/threadpool.h"
#include "vision/mmproj.h"
#include "vision/vision_internal.h"
#include "vision/vit_attention.h"

/* Query rows per attention chunk: bounds the score matrix (chunk x n_patches floats; 2.25 MiB at 4096 patches: 144 rows measured 5% faster than 512 at 1 thread on Zen 4, the scores staying in cache).
 * SG_TOKENS: patches per sgemm work item (a multiple of the kernel's 12-token tile); SG_MAX_THREADS: pools
 * larger than this take gm_matmul. */
enum { ATTN_CHUNK = 144, SG_TOKENS = 96, SG_MAX_THREADS = 256 };

typedef struct vit_scratch {
    float *patches;          /* n_patches x 3 patch^2 */
    float *h, *a, *q, *k, *v, *o; /* n_patches x n_embd each: residual, normed input, projections, attention */
    float *f;                /* n_patches x n_ff */
    float *kh, *vt;          /* one head: keys n_patches x hd, values transposed hd x n_patches */
    float *qh, *scores, *oh; /* one chunk of one head: chunk x hd, chunk x n_patches, chunk x hd */
    float *pooled;           /* n_tokens x n_embd */
    float *ones;             /* n_ff ones: the vector GeGLU kernel times 1 is the vector GELU */
    float *panels;           /* sgemm: one packed panel of GM_SGEMM_MR weight rows per pool thread */
    size_t panel_floats;
    float *kpan, *vpan;      /* sgemm: one head's keys (scaled by 1/sqrt(hd)) and values as packed panels */
    float *rsum;             /* sgemm: 1 / softmax denominator of each query row of a chunk */
} vit_scratch;

struct siglip {
    vit_weights w;
    gm_pool *pool;
    const gm_cpu_kernels *kern;
    gm_isa isa; /* resolved: the level of every matmul and row kernel */
    gm_matmul_scratch mm;
    vit_scratch s;
    float *buf; /* every scratch array above */
    int chunk;  /* attention query rows per chunk */
    bool sgemm; /* the AVX-512 float GEMM serves float weights and attention */
};

/* ---- scratch */

static gm_status alloc_scratch(siglip *v, gm_error *err) {
    const vit_config *c = &v->w.cfg;
    const size_t N = (size_t)c->n_patches, D = (size_t)c->n_embd, hd = (size_t)c->head_dim;
    const size_t C = (size_t)(v->chunk = c->n_patches < ATTN_CHUNK ? c->n_patches : ATTN_CHUNK);
    /* a panel spans the longest inner dimension: width, ffn, patches (P V) or the patch's pixels */
    size_t kmax = D > (size_t)c->n_ff ? D : (size_t)c->n_ff;
    kmax = kmax > N ? kmax : N;
    kmax = kmax > 3 * (size_t)c->patch_size * (size_t)c->patch_size ? kmax : 3 * (size_t)c->patch_size * (size_t)c->patch_size;
    v->s.panel_floats = (GM_SGEMM_MR * kmax + 15) / 16 * 16;
    struct { float **p; size_t n; } parts[] = {
        {&v->s.patches, N * 3 * (size_t)c->patch_size * (size_t)c->patch_size},
        {&v->s.h, N * D}, {&v->s.a, N * D}, {&v->s.q, N * D}, {&v->s.k, N * D}, {&v->s.v, N * D}, {&v->s.o, N * D},
        {&v->s.f, N * (size_t)c->n_ff}, {&v->s.kh, N * hd}, {&v->s.vt, N * hd},
        {&v->s.qh, C * hd}, {&v->s.scores, C * N}, {&v->s.oh, C * hd},
        {&v->s.pooled, (size_t)c->n_tokens * D}, {&v->s.ones, (size_t)c->n_ff},
        {&v->s.panels, v->sgemm ? (size_t)gm_pool_size(v->pool) * v->s.panel_floats : 0},
        {&v->s.rsum, C},
        {&v->s.kpan, v->sgemm ? (N + GM_SGEMM_MR - 1) / GM_SGEMM_MR * GM_SGEMM_MR * hd : 0},
        {&v->s.vpan, v->sgemm ? (hd + GM_SGEMM_MR - 1) / GM_SGEMM_MR * GM_SGEMM_MR * N : 0},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) total += (parts[i].n + 15) / 16 * 16; /* 64-byte rows */
    v->buf = aligned_alloc(64, total * sizeof(float));
    if (!v->buf) return gm_fail(err, GM_ERR_NOMEM, "vision encoder scratch: %zu MiB", total * sizeof(float) >> 20);
    float *p = v->buf;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        *parts[i].p = p;
        p += (parts[i].n + 15) / 16 * 16;
    }
    for (int i = 0; i < c->n_ff; i++) v->s.ones[i] = 1.0f;
    return GM_OK;
}

/* ---- row-wise ops on the pool */

typedef struct row_job {
    const siglip *v;
    float *y;
    const float *x, *w, *b, *add; /* op-specific, see each task */
    int n;                        /* floats per row */
    float eps, scale;
    int64_t ld;                   /* rowscale_task: floats between rows */
} row_job;

/* LayerNorm with weight and bias, sums in double: y = (x - mean) / sqrt(var + eps) * w + b */
static void layernorm_task(void *ctx, int64_t r0, int64_t r1, int thread) {
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

/* y += b (+ add[r] when add: the position embedding) */
static void bias_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        for (int i = 0; i < j->n; i++) y[i] += j->b[i];
        if (j->add) gm_add(y, j->add + r * j->n, j->n);
    }
}

/* residual: y += x + b */
static void residual_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        const float *x = j->x + r * j->n;
        for (int i = 0; i < j->n; i++) y[i] += x[i] + j->b[i];
    }
}

/* y = act(y + b) */
static void act_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    const vit_act act = j->v->w.cfg.act;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        for (int i = 0; i < j->n; i++) y[i] += j->b[i];
        if (act == VIT_GELU_TANH) {
            j->v->kern->geglu(y, j->v->s.ones, j->n);
        } else {
            const float k = act == VIT_GELU_QUICK ? 1.702f : 1.0f; /* x sigmoid(k x): gelu_quick, SiLU */
            for (int i = 0; i < j->n; i++) y[i] = y[i] / (1.0f + expf(-k * y[i]));
        }
    }
}

static void run_rows(const siglip *v, gm_task_fn fn, row_job j, int64_t n_rows) {
    j.v = v;
    /* a few thousand floats per chunk at least: below that the pool's wake-up costs more than the work */
    const int64_t grain = j.n >= 4096 ? 1 : 4096 / j.n;
    gm_pool_parallel_for(v->pool, n_rows, grain, fn, &j);
}

/* ---- the forward pass */

/* ---- the float GEMM (kernels/sgemm.h) on the pool */

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
    int64_t packed[SG_MAX_THREADS]; /* the panel each thread holds (-1: none) */
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
static void sgemm(siglip *v, sg_weights w, const float *x, int64_t ldx, int64_t n_tok, float *y, int64_t ldy) {
    sg_job j = {.w = w, .x = x, .y = y, .ldx = ldx, .ldy = ldy, .n_tok = n_tok, .n_tb = (n_tok + SG_TOKENS - 1) / SG_TOKENS,
                .panels = v->s.panels, .panel_floats = v->s.panel_floats};
    for (int t = 0; t < SG_MAX_THREADS; t++) j.packed[t] = -1;
    const int64_t items = (w.rows + GM_SGEMM_MR - 1) / GM_SGEMM_MR * j.n_tb;
    /* many panels: a claim is whole panels, each packed once; few (attention's values): finer claims */
    const int64_t panels = items / j.n_tb, nth = gm_pool_size(v->pool);
    const int64_t chunk = w.packed || panels < 8 * nth ? items / (4 * nth) : j.n_tb;
    gm_pool_parallel_for_chunk(v->pool, items, chunk > 1 ? chunk : 1, sg_task, &j);
}

static gm_status matmul(siglip *v, const gm_matrix *W, const float *x, int64_t n, float *y) {
    if (v->sgemm && gm_sgemm_avx512_supports(W->type)) {
        const sg_weights w = {W->type, W->data, W->rows, W->cols, (int64_t)gm_row_bytes(W->type, W->cols), false, NULL};
        sgemm(v, w, x, W->cols, n, y, W->rows);
        return GM_OK;
    }
    const gm_mm_weight w = gm_mm_view(W, v->isa);
    return gm_mm(&w, x, n, y, v->pool, &v->mm);
}

/* im2col: patch p's values in the patch matrix's column order (channel, y, x) */
static void extract_patches(const vit_config *c, const float *chw, float *out) {
    const int S = c->image_size, P = c->patch_size, G = c->grid;
    for (int py = 0; py < G; py++)
        for (int px = 0; px < G; px++) {
            float *dst = out + ((size_t)py * G + px) * 3 * P * P;
            for (int ch = 0; ch < 3; ch++)
                for (int ky = 0; ky < P; ky++, dst += P)
                    memcpy(dst, chw + ((size_t)ch * S + (size_t)py * P + ky) * S + (size_t)px * P, P * sizeof(float));
        }
}

/* softmax numerators of each score row (the 1/sqrt(hd) is in the packed keys), 1 / their sum into j->w[r] */
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

/* 1/sqrt(hd) into the packed keys: the scores come out scaled */
static void scale_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const row_job *j = ctx;
    gm_scale(j->y + r0 * j->n, (int)((r1 - r0) * j->n), j->scale);
}

/* The sgemm path of attention: the head's keys and values packed once (read in place from rows of n_embd),
 * then per chunk of queries (read in place) scores, softmax and P V written in place into o. */
static void attend_head_sg(siglip *v, int hh) {
    const vit_config *c = &v->w.cfg;
    const vit_scratch *s = &v->s;
    const int64_t N = c->n_patches, D = c->n_embd, hd = c->head_dim;
    const sg_weights K = {GM_TYPE_F32, s->k + hh * hd, N, hd, D * (int64_t)sizeof(float), false, s->kpan};
    const sg_weights V = {GM_TYPE_F32, s->v + hh * hd, hd, N, D, true, s->vpan};
    const int64_t kp = (N + GM_SGEMM_MR - 1) / GM_SGEMM_MR, vp = (hd + GM_SGEMM_MR - 1) / GM_SGEMM_MR;
    gm_pool_parallel_for(v->pool, kp, 1, sg_pack_task, (void *)&K);
    gm_pool_parallel_for(v->pool, vp, 1, sg_pack_task, (void *)&V);
    run_rows(v, scale_task, (row_job){.y = s->kpan, .n = (int)hd * GM_SGEMM_MR, .scale = 1.0f / sqrtf((float)hd)}, kp);
    for (int64_t q0 = 0; q0 < N; q0 += v->chunk) {
        const int64_t n = N - q0 < v->chunk ? N - q0 : v->chunk;
        sgemm(v, K, s->q + q0 * D + hh * hd, D, n, s->scores, N);
        run_rows(v, softmax_sg_task, (row_job){.y = s->scores, .w = s->rsum, .n = (int)N}, n);
        sgemm(v, V, s->scores, N, n, s->o + q0 * D + hh * hd, D);
        run_rows(v, rowscale_task, (row_job){.y = s->o + q0 * D + hh * hd, .x = s->rsum, .n = (int)hd, .ld = D}, n);
    }
}

static gm_status attention(siglip *v) {
    const vit_config *c = &v->w.cfg;
    if (v->sgemm) {
        for (int hh = 0; hh < c->n_head; hh++) attend_head_sg(v, hh);
        return GM_OK;
    }
    const vit_scratch *s = &v->s;
    const vit_attn a = {.pool = v->pool, .mm = &v->mm, .isa = v->isa, .kern = v->kern, .q = s->q, .k = s->k,
                        .v = s->v, .o = s->o, .ld = c->n_embd, .kh = s->kh, .vt = s->vt, .qh = s->qh,
                        .scores = s->scores, .oh = s->oh, .n = c->n_patches, .n_head = c->n_head,
                        .head_dim = c->head_dim, .chunk = v->chunk, .scale = 1.0f / sqrtf((float)c->head_dim)};
    return vit_attention(&a);
}

static gm_status block(siglip *v, const vit_layer *l) {
    const vit_config *c = &v->w.cfg;
    const vit_scratch *s = &v->s;
    const int64_t N = c->n_patches;
    const int D = c->n_embd;
    run_rows(v, layernorm_task, (row_job){.y = s->a, .x = s->h, .w = l->ln1_w, .b = l->ln1_b, .n = D, .eps = c->eps}, N);
    gm_status st = GM_OK;
    if (v->sgemm) {
        if ((st = matmul(v, &l->q, s->a, N, s->q)) || (st = matmul(v, &l->k, s->a, N, s->k)) ||
            (st = matmul(v, &l->v, s->a, N, s->v)))
            return st;
    } else {
        const gm_mm_weight w[3] = {gm_mm_view(&l->q, v->isa), gm_mm_view(&l->k, v->isa), gm_mm_view(&l->v, v->isa)};
        const gm_mm_weight *qkv[3] = {&w[0], &w[1], &w[2]};
        float *const out[3] = {s->q, s->k, s->v};
        if ((st = gm_mm_multi(qkv, out, 3, s->a, N, v->pool, &v->mm))) return st;
    }
    run_rows(v, bias_task, (row_job){.y = s->q, .b = l->bq, .n = D}, N);
    run_rows(v, bias_task, (row_job){.y = s->k, .b = l->bk, .n = D}, N);
    run_rows(v, bias_task, (row_job){.y = s->v, .b = l->bv, .n = D}, N);
    if ((st = attention(v)) || (st = matmul(v, &l->o, s->o, N, s->a))) return st;
    run_rows(v, residual_task, (row_job){.y = s->h, .x = s->a, .b = l->bo, .n = D}, N);
    run_rows(v, layernorm_task, (row_job){.y = s->a, .x = s->h, .w = l->ln2_w, .b = l->ln2_b, .n = D, .eps = c->eps}, N);
    if ((st = matmul(v, &l->up, s->a, N, s->f))) return st;
    run_rows(v, act_task, (row_job){.y = s->f, .b = l->bup, .n = c->n_ff}, N);
    if ((st = matmul(v, &l->down, s->f, N, s->a))) return st;
    run_rows(v, residual_task, (row_job){.y = s->h, .x = s->a, .b = l->bdown, .n = D}, N);
    return GM_OK;
}

/* scale x scale average pooling of the patch grid (rows of D), tokens row-major: t = oy * (grid / scale) + ox */
static void pool_tokens(const vit_config *c, const float *h, float *out) {
    const int G = c->grid, k = c->scale, O = G / k, D = c->n_embd;
    const float inv = 1.0f / (float)(k * k);
    for (int oy = 0; oy < O; oy++)
        for (int ox = 0; ox < O; ox++) {
            float *dst = out + ((size_t)oy * O + ox) * D;
            memset(dst, 0, (size_t)D * sizeof(float));
            for (int dy = 0; dy < k; dy++)
                for (int dx = 0; dx < k; dx++) gm_add(dst, h + ((size_t)(oy * k + dy) * G + ox * k + dx) * D, D);
            gm_scale(dst, D, inv);
        }
}

static gm_status encode(siglip *v, const float *chw, float *out) {
    const vit_weights *w = &v->w;
    const vit_config *c = &w->cfg;
    const vit_scratch *s = &v->s;
    const int64_t N = c->n_patches;
    extract_patches(c, chw, s->patches);
    gm_status st = matmul(v, &w->patch, s->patches, N, s->h);
    if (st) return st;
    run_rows(v, bias_task, (row_job){.y = s->h, .b = w->patch_b, .add = w->pos, .n = c->n_embd}, N);
    for (int il = 0; il < c->n_layers && !st; il++) st = block(v, &w->layers[il]);
    if (st) return st;
    run_rows(v, layernorm_task, (row_job){.y = s->h, .x = s->h, .w = w->post_w, .b = w->post_b, .n = c->n_embd, .eps = c->eps}, N);
    pool_tokens(c, s->h, s->pooled);
    for (int t = 0; t < c->n_tokens; t++) {
        float *row = s->pooled + (size_t)t * c->n_embd;
        v->kern->rmsnorm(row, row, w->soft_norm, c->n_embd, c->eps); /* the file stores 1 + w */
    }
    return matmul(v, &w->proj, s->pooled, c->n_tokens, out);
}

/* ---- what vision.c calls */

gm_status siglip_open(const char *path, const gm_vision_options *o, siglip **out, gm_error *err) {
    *out = NULL;
    siglip *v = calloc(1, sizeof *v);
    if (!v) return gm_fail(err, GM_ERR_NOMEM, "gm_vision_open");
    gm_status st = vit_load(path, &v->w, err);
    if (st) {
        free(v);
        return st;
    }
    v->isa = gm_isa_resolve(o->isa);
    v->kern = gm_cpu_kernels_for(v->isa);
    v->pool = gm_pool_new(o->n_threads);
    if (!v->pool) st = gm_fail(err, GM_ERR_NOMEM, "%s: thread pool", path);
    /* the float GEMM where the level has it; Q8_0 and other quantized matrices still take gm_matmul */
    v->sgemm = v->pool && gm_isa_at_least(v->isa, GM_ISA_AVX512) && gm_sgemm_avx512_supports(GM_TYPE_F32) &&
               gm_pool_size(v->pool) <= SG_MAX_THREADS;
    if (!st) st = alloc_scratch(v, err);
    if (st) {
        siglip_free(v);
        return st;
    }
    *out = v;
    return GM_OK;
}

void siglip_free(siglip *v) {
    if (!v) return;
    gm_pool_free(v->pool);
    gm_matmul_scratch_free(&v->mm);
    free(v->buf);
    vit_weights_free(&v->w);
    free(v);
}

const vit_config *siglip_config(const siglip *v) { return &v->w.cfg; }

gm_status siglip_encode(siglip *v, const float *chw, float *out, gm_error *err) {
    gm_status st = encode(v, chw, out);
    if (st) return gm_fail_prefix(err, "%s: encode: ", v->w.file->path);
    return GM_OK;
}
