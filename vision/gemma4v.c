/* vision/gemma4v.c — the Gemma 4 image encoder's forward pass (llama.cpp tools/mtmd/models/gemma4v.cpp with
 * clip.cpp build_vit; HF Gemma4VisionModel + Gemma4MultimodalEmbedder), at any size whose sides are multiples
 * of patch * pool:
 *
 *   x' = 2x - 1 -> patches (p = py * gw + px) -> patch matmul (no bias) + T_x[px] + T_y[py]
 *   n_layers x block, every norm an RMSNorm with raw weights:
 *     a = RMS_ln1(h); q, k, v = linears(a); q, k per-head RMS * w; v per-head RMS (no weight);
 *     2D NEOX RoPE (theta 100): dims [0, hd/2) rotate by px, [hd/2, hd) by py; attention scale 1, bidirectional
 *     h += RMS_post(o(attn)); h += RMS_ffnpost(down(act(gate m) * up m)), m = RMS_ln2(h); h *= out_scale
 *   pool x pool average (row-major tokens) -> x sqrt(n_embd) -> (x - std_bias) * std_scale -> RMS (no weight)
 *   -> projection
 * Each linear may clamp its input and output (Gemma4ClippableLinear). As siglip.c: every linear is one
 * gm_matmul over all patches on the pool (the FFN in slabs of FFN_ROWS patches, to bound its two n_ff wide
 * buffers), attention is two gm_matmuls per head and chunk of queries, and all scratch is allocated at open
 * for the largest image (max_tokens). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_vision.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/threadpool.h"
#include "vision/vision_internal.h"
#include "vision/vit_attention.h"

/* Query rows per attention chunk (bounds the score matrix: chunk x n_patches floats, 20 MiB at 10080 patches)
 * and patches per FFN slab (two slab x n_ff buffers: 35 MiB at n_ff 4304). */
enum { ATTN_CHUNK = 512, FFN_ROWS = 1024 };
/* The RoPE frequencies of half a head live on the stack: head dims up to twice this (Gemma 4 has 64 or 72). */
enum { MAX_HALF_HEAD = 512 };

typedef struct g4v_scratch {
    float *patches;                     /* max_patches x 3 patch^2 */
    float *h, *a, *q, *k, *v, *o;       /* max_patches x n_embd each */
    float *fg, *fu;                     /* FFN_ROWS x n_ff: gate, up */
    float *xc;                          /* a clamped input (only when the file has input clamps) */
    float *kh, *vt, *qh, *scores, *oh;  /* attention of one head, as siglip.c */
    float *pooled;                      /* max_tokens x n_embd */
    float *cs, *sn;                     /* RoPE: pos_rows x hd/4 each, by position */
    float *ones;                        /* n_embd ones: the weight of the weightless norms */
} g4v_scratch;

struct g4v {
    g4v_weights w;
    gm_pool *pool;
    const gm_cpu_kernels *kern;
    gm_isa isa;
    gm_matmul_scratch mm;
    g4v_scratch s;
    float *buf;
    int chunk, ffn_rows;
    int gw, gh, n; /* this image: patches per row, per column, in all */
};

/* ---- scratch */

static bool any_input_clamp(const g4v_weights *w) {
    bool any = w->proj.clamp_in;
    for (int il = 0; il < w->cfg.n_layers; il++) {
        const g4v_layer *l = &w->layers[il];
        any = any || l->q.clamp_in || l->k.clamp_in || l->v.clamp_in || l->o.clamp_in || l->gate.clamp_in ||
              l->up.clamp_in || l->down.clamp_in;
    }
    return any;
}

static void rope_tables(const g4v_config *c, float *cs, float *sn) {
    const int half = c->head_dim / 2, q = half / 2;
    float inv[MAX_HALF_HEAD];
    gm_rope_inv_freq(inv, half, G4V_ROPE_THETA, 1.0); /* i < hd/4: theta^(-2i / (hd/2)) */
    for (int p = 0; p < c->pos_rows; p++) gm_rope_cos_sin(cs + (size_t)p * q, sn + (size_t)p * q, inv, half, p);
}

static gm_status alloc_scratch(g4v *g, gm_error *err) {
    const g4v_config *c = &g->w.cfg;
    const size_t N = (size_t)c->max_patches, D = (size_t)c->n_embd, F = (size_t)c->n_ff, hd = (size_t)c->head_dim;
    const size_t C = (size_t)(g->chunk = c->max_patches < ATTN_CHUNK ? c->max_patches : ATTN_CHUNK);
    const size_t R = (size_t)(g->ffn_rows = c->max_patches < FFN_ROWS ? c->max_patches : FFN_ROWS);
    const size_t xc = any_input_clamp(&g->w) ? (N * D > R * F ? N * D : R * F) : 0;
    const size_t P2 = (size_t)c->patch_size * (size_t)c->patch_size, rope = (size_t)c->pos_rows * hd / 4;
    struct { float **p; size_t n; } parts[] = {
        {&g->s.patches, N * 3 * P2}, {&g->s.h, N * D}, {&g->s.a, N * D}, {&g->s.q, N * D}, {&g->s.k, N * D},
        {&g->s.v, N * D}, {&g->s.o, N * D}, {&g->s.fg, R * F}, {&g->s.fu, R * F}, {&g->s.xc, xc},
        {&g->s.kh, N * hd}, {&g->s.vt, N * hd}, {&g->s.qh, C * hd}, {&g->s.scores, C * N}, {&g->s.oh, C * hd},
        {&g->s.pooled, (size_t)c->max_tokens * D}, {&g->s.cs, rope}, {&g->s.sn, rope}, {&g->s.ones, D},
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) total += (parts[i].n + 15) / 16 * 16; /* 64-byte rows */
    g->buf = aligned_alloc(64, total * sizeof(float));
    if (!g->buf) return gm_fail(err, GM_ERR_NOMEM, "vision encoder scratch: %zu MiB", total * sizeof(float) >> 20);
    float *p = g->buf;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        *parts[i].p = parts[i].n ? p : NULL;
        p += (parts[i].n + 15) / 16 * 16;
    }
    for (size_t i = 0; i < D; i++) g->s.ones[i] = 1.0f;
    rope_tables(c, g->s.cs, g->s.sn);
    return GM_OK;
}

/* ---- row-wise ops on the pool */

typedef struct row_job {
    const g4v *g;
    float *y;
    const float *x, *w;
    int n;     /* floats per row */
    int n_w;   /* scale_task: 1 (one factor for all) or n */
    float lo, hi, eps;
} row_job;

/* y = RMSNorm(x) * w (w: ones for the weightless norms); y may be x */
static void rms_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) j->g->kern->rmsnorm(j->y + r * j->n, j->x + r * j->n, j->w, j->n, j->eps);
}

/* y += RMSNorm(x) * w: a residual after its post-norm (x is overwritten as scratch) */
static void residual_norm_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *x = (float *)j->x + r * j->n;
        j->g->kern->rmsnorm(x, x, j->w, j->n, j->eps);
        gm_add(j->y + r * j->n, x, j->n);
    }
}

/* y = clamp(x, lo, hi); y may be x */
static void clamp_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        for (int i = 0; i < j->n; i++) {
            const float v = j->x[r * j->n + i];
            j->y[r * j->n + i] = v < j->lo ? j->lo : v > j->hi ? j->hi : v;
        }
}

/* gate = act(gate) * up (x: up) */
static void glu_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    const vit_act act = j->g->w.cfg.act;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        const float *u = j->x + r * j->n;
        if (act == VIT_GELU_TANH) {
            j->g->kern->geglu(y, u, j->n);
        } else {
            const float k = act == VIT_GELU_QUICK ? 1.702f : 1.0f; /* x sigmoid(k x): gelu_quick, SiLU */
            for (int i = 0; i < j->n; i++) y[i] = y[i] / (1.0f + expf(-k * y[i])) * u[i];
        }
    }
}

/* 2D RoPE of one patch's heads (x: q or k): first half of each head by px, second by py */
static void rope_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    const g4v *g = j->g;
    const int hd = g->w.cfg.head_dim, nh = g->w.cfg.n_head, q = hd / 4;
    for (int64_t p = r0; p < r1; p++) {
        const int px = (int)(p % g->gw), py = (int)(p / g->gw);
        float *row = j->y + p * j->n;
        for (int h = 0; h < nh; h++) {
            gm_rope_neox(row + h * hd, 1, hd / 2, g->s.cs + (size_t)px * q, g->s.sn + (size_t)px * q);
            gm_rope_neox(row + h * hd + hd / 2, 1, hd / 2, g->s.cs + (size_t)py * q, g->s.sn + (size_t)py * q);
        }
    }
}

/* y *= w (n_w: 1, the same for every element, or n) */
static void scale_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    const row_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        float *y = j->y + r * j->n;
        for (int i = 0; i < j->n; i++) y[i] *= j->n_w == 1 ? j->w[0] : j->w[i];
    }
}

static void run_rows(const g4v *g, gm_task_fn fn, row_job j, int64_t n_rows) {
    j.g = g;
    /* a few thousand floats per chunk at least: below that the pool's wake-up costs more than the work */
    const int64_t grain = j.n >= 4096 ? 1 : 4096 / j.n;
    gm_pool_parallel_for(g->pool, n_rows, grain, fn, &j);
}

/* ---- linears */

static gm_status matmul(g4v *g, const gm_matrix *W, const float *x, int64_t n, float *y) {
    const gm_mm_weight w = gm_mm_view(W, g->isa);
    return gm_mm(&w, x, n, y, g->pool, &g->mm);
}

static void clamp_out(g4v *g, const g4v_linear *l, float *y, int64_t n) {
    if (l->clamp_out) run_rows(g, clamp_task, (row_job){.y = y, .x = y, .n = (int)l->w.rows, .lo = l->out_min, .hi = l->out_max}, n);
}

/* y = clamp(W clamp(x)) over n rows */
static gm_status linear(g4v *g, const g4v_linear *l, const float *x, int64_t n, float *y) {
    if (l->clamp_in) {
        run_rows(g, clamp_task, (row_job){.y = g->s.xc, .x = x, .n = (int)l->w.cols, .lo = l->in_min, .hi = l->in_max}, n);
        x = g->s.xc;
    }
    gm_status st = matmul(g, &l->w, x, n, y);
    if (!st) clamp_out(g, l, y, n);
    return st;
}

/* count linears of one input: one pool dispatch when none clamps its input (the usual file) */
static gm_status linears(g4v *g, const g4v_linear *const *l, float *const *y, int count, const float *x, int64_t n) {
    bool clamp_in = false;
    for (int i = 0; i < count; i++) clamp_in = clamp_in || l[i]->clamp_in;
    gm_status st = GM_OK;
    if (clamp_in) {
        for (int i = 0; i < count && !st; i++) st = linear(g, l[i], x, n, y[i]);
        return st;
    }
    gm_mm_weight w[GM_MM_MULTI_MAX];
    const gm_mm_weight *W[GM_MM_MULTI_MAX] = {NULL, NULL, NULL, NULL}; /* count <= 4 */
    for (int i = 0; i < count && i < GM_MM_MULTI_MAX; i++) w[i] = gm_mm_view(&l[i]->w, g->isa), W[i] = &w[i];
    if ((st = gm_mm_multi(W, y, count, x, n, g->pool, &g->mm))) return st;
    for (int i = 0; i < count; i++) clamp_out(g, l[i], y[i], n);
    return GM_OK;
}

/* ---- the forward pass */

/* im2col of 2x - 1 (the model's own [0, 1] -> [-1, 1]): patch p's values in (channel, y, x) order */
static void extract_patches(const g4v *g, const float *chw, float *out) {
    const int P = g->w.cfg.patch_size, W = g->gw * P, H = g->gh * P;
    for (int py = 0; py < g->gh; py++)
        for (int px = 0; px < g->gw; px++) {
            float *dst = out + ((size_t)py * g->gw + px) * 3 * P * P;
            for (int ch = 0; ch < 3; ch++)
                for (int ky = 0; ky < P; ky++) {
                    const float *src = chw + ((size_t)ch * H + (size_t)py * P + ky) * W + (size_t)px * P;
                    for (int kx = 0; kx < P; kx++) *dst++ = 2.0f * src[kx] - 1.0f;
                }
        }
}

/* h[p] += T_x[px] + T_y[py], in llama.cpp's order (x table first) */
static void add_positions(const g4v *g, float *h) {
    const int D = g->w.cfg.n_embd;
    const float *tx = g->w.pos, *ty = g->w.pos + (size_t)g->w.cfg.pos_rows * D;
    for (int p = 0; p < g->n; p++) {
        gm_add(h + (size_t)p * D, tx + (size_t)(p % g->gw) * D, D);
        gm_add(h + (size_t)p * D, ty + (size_t)(p / g->gw) * D, D);
    }
}

/* every patch attends to every patch; scale 1: the q / k norms set it */
static gm_status attention(g4v *g) {
    const g4v_scratch *s = &g->s;
    const g4v_config *c = &g->w.cfg;
    const vit_attn a = {.pool = g->pool, .mm = &g->mm, .isa = g->isa, .kern = g->kern, .q = s->q, .k = s->k,
                        .v = s->v, .o = s->o, .ld = c->n_embd, .kh = s->kh, .vt = s->vt, .qh = s->qh,
                        .scores = s->scores, .oh = s->oh, .n = g->n, .n_head = c->n_head, .head_dim = c->head_dim,
                        .chunk = g->chunk, .scale = 1.0f};
    return vit_attention(&a);
}

/* q, k, v of the normed input a: projections, per-head norms, RoPE */
static gm_status qkv(g4v *g, const g4v_layer *l) {
    const g4v_config *c = &g->w.cfg;
    const g4v_scratch *s = &g->s;
    const g4v_linear *lin[3] = {&l->q, &l->k, &l->v};
    float *const out[3] = {s->q, s->k, s->v};
    gm_status st = linears(g, lin, out, 3, s->a, g->n);
    if (st) return st;
    const int64_t heads = (int64_t)g->n * c->n_head;
    run_rows(g, rms_task, (row_job){.y = s->q, .x = s->q, .w = l->q_norm, .n = c->head_dim, .eps = c->eps}, heads);
    run_rows(g, rms_task, (row_job){.y = s->k, .x = s->k, .w = l->k_norm, .n = c->head_dim, .eps = c->eps}, heads);
    run_rows(g, rms_task, (row_job){.y = s->v, .x = s->v, .w = s->ones, .n = c->head_dim, .eps = c->eps}, heads);
    run_rows(g, rope_task, (row_job){.y = s->q, .n = c->n_embd}, g->n);
    run_rows(g, rope_task, (row_job){.y = s->k, .n = c->n_embd}, g->n);
    return GM_OK;
}

/* o = down(act(gate m) * up m) for m = a, slab by slab */
static gm_status ffn(g4v *g, const g4v_layer *l) {
    const g4v_config *c = &g->w.cfg;
    const g4v_scratch *s = &g->s;
    const g4v_linear *lin[2] = {&l->gate, &l->up};
    float *const out[2] = {s->fg, s->fu};
    gm_status st = GM_OK;
    for (int r0 = 0; r0 < g->n && !st; r0 += g->ffn_rows) {
        const int n = g->n - r0 < g->ffn_rows ? g->n - r0 : g->ffn_rows;
        if ((st = linears(g, lin, out, 2, s->a + (size_t)r0 * c->n_embd, n))) break;
        run_rows(g, glu_task, (row_job){.y = s->fg, .x = s->fu, .n = c->n_ff}, n);
        st = linear(g, &l->down, s->fg, n, s->o + (size_t)r0 * c->n_embd);
    }
    return st;
}

static gm_status block(g4v *g, const g4v_layer *l) {
    const g4v_config *c = &g->w.cfg;
    const g4v_scratch *s = &g->s;
    const int D = c->n_embd;
    run_rows(g, rms_task, (row_job){.y = s->a, .x = s->h, .w = l->ln1, .n = D, .eps = c->eps}, g->n);
    gm_status st = qkv(g, l);
    if (st || (st = attention(g)) || (st = linear(g, &l->o, s->o, g->n, s->a))) return st;
    run_rows(g, residual_norm_task, (row_job){.y = s->h, .x = s->a, .w = l->attn_post, .n = D, .eps = c->eps}, g->n);
    run_rows(g, rms_task, (row_job){.y = s->a, .x = s->h, .w = l->ln2, .n = D, .eps = c->eps}, g->n);
    if ((st = ffn(g, l))) return st;
    run_rows(g, residual_norm_task, (row_job){.y = s->h, .x = s->o, .w = l->ffn_post, .n = D, .eps = c->eps}, g->n);
    if (l->out_scale) run_rows(g, scale_task, (row_job){.y = s->h, .w = l->out_scale, .n = D, .n_w = l->out_scale_n}, g->n);
    return GM_OK;
}

/* pool x pool average of the gw x gh grid, tokens row-major (t = oy * (gw / pool) + ox), times sqrt(n_embd) */
static int pool_tokens(const g4v *g, const float *h, float *out) {
    const int k = g->w.cfg.pool, ow = g->gw / k, oh = g->gh / k, D = g->w.cfg.n_embd;
    const float inv = 1.0f / (float)(k * k), gain = sqrtf((float)D);
    for (int oy = 0; oy < oh; oy++)
        for (int ox = 0; ox < ow; ox++) {
            float *dst = out + ((size_t)oy * ow + ox) * D;
            memset(dst, 0, (size_t)D * sizeof(float));
            for (int dy = 0; dy < k; dy++)
                for (int dx = 0; dx < k; dx++) gm_add(dst, h + ((size_t)(oy * k + dy) * g->gw + ox * k + dx) * D, D);
            gm_scale(dst, D, inv);
            gm_scale(dst, D, gain);
        }
    return ow * oh;
}

static gm_status encode(g4v *g, const float *chw, float *out) {
    const g4v_weights *w = &g->w;
    const g4v_config *c = &w->cfg;
    const g4v_scratch *s = &g->s;
    extract_patches(g, chw, s->patches);
    gm_status st = matmul(g, &w->patch, s->patches, g->n, s->h);
    if (st) return st;
    add_positions(g, s->h);
    for (int il = 0; il < c->n_layers && !st; il++) st = block(g, &w->layers[il]);
    if (st) return st;
    const int T = pool_tokens(g, s->h, s->pooled), D = c->n_embd;
    for (int t = 0; w->std_bias && t < T; t++) {
        float *row = s->pooled + (size_t)t * D;
        for (int i = 0; i < D; i++) row[i] = (row[i] - w->std_bias[i]) * w->std_scale[i];
    }
    run_rows(g, rms_task, (row_job){.y = s->pooled, .x = s->pooled, .w = s->ones, .n = D, .eps = c->eps}, T);
    return linear(g, &w->proj, s->pooled, T, out);
}

/* ---- what vision.c calls */

gm_status g4v_open(const char *path, const gm_vision_options *o, g4v **out, gm_error *err) {
    *out = NULL;
    g4v *g = calloc(1, sizeof *g);
    if (!g) return gm_fail(err, GM_ERR_NOMEM, "gm_vision_open");
    gm_status st = g4v_load(path, o, &g->w, err);
    if (st) {
        free(g);
        return st;
    }
    if (g->w.cfg.head_dim / 2 > MAX_HALF_HEAD) st = gm_fail(err, GM_ERR_UNSUPPORTED, "%s: head dim %d", path, g->w.cfg.head_dim);
    g->isa = gm_isa_resolve(o->isa);
    g->kern = gm_cpu_kernels_for(g->isa);
    if (!st && !(g->pool = gm_pool_new(o->n_threads))) st = gm_fail(err, GM_ERR_NOMEM, "%s: thread pool", path);
    if (!st) st = alloc_scratch(g, err);
    if (st) {
        g4v_free(g);
        return st;
    }
    *out = g;
    return GM_OK;
}

void g4v_free(g4v *g) {
    if (!g) return;
    gm_pool_free(g->pool);
    gm_matmul_scratch_free(&g->mm);
    free(g->buf);
    g4v_weights_free(&g->w);
    free(g);
}

const g4v_config *g4v_get_config(const g4v *g) { return &g->w.cfg; }

gm_status g4v_encode(g4v *g, const float *chw, int w, int h, float *out, gm_error *err) {
    g->gw = w / g->w.cfg.patch_size;
    g->gh = h / g->w.cfg.patch_size;
    g->n = g->gw * g->gh;
    gm_status st = encode(g, chw, out);
    if (st) return gm_fail_prefix(err, "%s: encode: ", g->w.file->path);
    return GM_OK;
}
