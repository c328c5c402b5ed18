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
 * Each linear may clamp its input and output (Gemma4ClippableLinear). As siglip.c, the blocks run on the
 * backend's ops: every linear over all patches at once (the FFN in slabs of FFN_ROWS patches, to bound its two
 * n_ff wide buffers), the 2D RoPE as two RoPE kinds (x and y positions) on the halves of each head, the
 * attention of every patch to every patch; the patch extraction, position tables and pooling are host code. All
 * scratch is allocated at open for the largest image (max_tokens). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/scratch.h"
#include "gemma_vision.h"
#include "kernels/ops.h"
#include "vision/vision_internal.h"

/* Query rows per attention pass (bounds the score matrix: chunk x n_patches floats, 20 MiB at 10080 patches)
 * and patches per FFN slab (two slab x n_ff buffers: 35 MiB at n_ff 4304). */
enum { ATTN_CHUNK = 512, FFN_ROWS = 1024 };
/* The RoPE frequencies of half a head live in the encoder: head dims up to twice this (Gemma 4 has 64 or 72). */
enum { MAX_HALF_HEAD = 512 };
/* The RoPE kinds of the 2D rotation: the first half of each head turns by the patch's column, the second by its
 * row. */
enum { ROPE_X, ROPE_Y };

typedef struct g4v_scratch {
    float *patches;                     /* max_patches x 3 patch^2 */
    float *h, *a, *q, *k, *v, *o;       /* max_patches x n_embd each */
    float *fg, *fu;                     /* FFN_ROWS x n_ff: gate, up */
    float *xc;                          /* a clamped input (only when the file has input clamps) */
    float *pooled;                      /* max_tokens x n_embd */
} g4v_scratch;

struct g4v {
    g4v_weights w;
    gm_backend *be;
    g4v_scratch s;
    float *buf;
    gm_fwd_row *at[2];                  /* max_patches each: the patches' columns (ROPE_X) and rows (ROPE_Y) */
    float inv_freq[MAX_HALF_HEAD / 2];  /* RoPE: theta^(-2i / (hd/2)), i < hd/4 */
    int ffn_rows;
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

static gm_status alloc_scratch(g4v *g, gm_error *err) {
    const g4v_config *c = &g->w.cfg;
    const size_t N = (size_t)c->max_patches, D = (size_t)c->n_embd, F = (size_t)c->n_ff;
    const size_t R = (size_t)(g->ffn_rows = c->max_patches < FFN_ROWS ? c->max_patches : FFN_ROWS);
    const size_t xc = any_input_clamp(&g->w) ? (N * D > R * F ? N * D : R * F) : 0;
    const size_t P2 = (size_t)c->patch_size * (size_t)c->patch_size;
    const gm_scratch_part parts[] = {
        {&g->s.patches, N * 3 * P2}, {&g->s.h, N * D}, {&g->s.a, N * D}, {&g->s.q, N * D}, {&g->s.k, N * D},
        {&g->s.v, N * D}, {&g->s.o, N * D}, {&g->s.fg, R * F}, {&g->s.fu, R * F}, {&g->s.xc, xc},
        {&g->s.pooled, (size_t)c->max_tokens * D},
    };
    size_t bytes;
    g->buf = gm_scratch_carve(parts, sizeof parts / sizeof parts[0], &bytes);
    g->at[ROPE_X] = calloc(N, sizeof *g->at[ROPE_X]);
    g->at[ROPE_Y] = calloc(N, sizeof *g->at[ROPE_Y]);
    if (!g->buf || !g->at[ROPE_X] || !g->at[ROPE_Y])
        return gm_fail(err, GM_ERR_NOMEM, "vision encoder scratch: %zu MiB", bytes >> 20);
    gm_rope_inv_freq(g->inv_freq, c->head_dim / 2, G4V_ROPE_THETA, 1.0); /* i < hd/4: theta^(-2i / (hd/2)) */
    return GM_OK;
}

/* ---- linears */

/* y = clamp(W clamp(x)) over n rows */
static gm_status linear(g4v *g, const g4v_linear *l, const float *x, int n, float *y) {
    gm_backend *be = g->be;
    if (l->clamp_in) {
        be->ops->clamp(be, g->s.xc, x, (size_t)n * l->w.cols, l->in_min, l->in_max);
        x = g->s.xc;
    }
    gm_status st = gm_be_matmul(be, &l->w, x, n, y);
    if (!st && l->clamp_out) be->ops->clamp(be, y, y, (size_t)n * l->w.rows, l->out_min, l->out_max);
    return st;
}

/* count linears of one input: one backend call when none clamps its input (the usual file) */
static gm_status linears(g4v *g, const g4v_linear *const *l, float *const *y, int count, const float *x, int n) {
    gm_backend *be = g->be;
    bool clamp_in = false;
    for (int i = 0; i < count; i++) clamp_in = clamp_in || l[i]->clamp_in;
    gm_status st = GM_OK;
    if (clamp_in) {
        for (int i = 0; i < count && !st; i++) st = linear(g, l[i], x, n, y[i]);
        return st;
    }
    const gm_matrix *W[4] = {NULL, NULL, NULL, NULL}; /* count <= 4 */
    for (int i = 0; i < count && i < 4; i++) W[i] = &l[i]->w;
    if ((st = be->ops->matmul(be, W, y, count, x, n))) return st;
    for (int i = 0; i < count; i++)
        if (l[i]->clamp_out) be->ops->clamp(be, y[i], y[i], (size_t)n * l[i]->w.rows, l[i]->out_min, l[i]->out_max);
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

/* The rotation tables of this image's patches: kind ROPE_X at each patch's column, ROPE_Y at its row. */
static void rope_prepare(g4v *g) {
    for (int p = 0; p < g->n; p++) g->at[ROPE_X][p].pos = p % g->gw, g->at[ROPE_Y][p].pos = p / g->gw;
    const int half = g->w.cfg.head_dim / 2;
    g->be->ops->rope_prepare(g->be, ROPE_X, g->inv_freq, half, g->at[ROPE_X], g->n);
    g->be->ops->rope_prepare(g->be, ROPE_Y, g->inv_freq, half, g->at[ROPE_Y], g->n);
}

/* 2D RoPE of every patch's heads (x: q or k): each head's first half by its column, its second by its row */
static void rope_2d(g4v *g, float *x) {
    const int hd = g->w.cfg.head_dim, nh = g->w.cfg.n_head;
    g->be->ops->rope(g->be, x, g->n, nh, hd, hd / 2, ROPE_X);
    g->be->ops->rope(g->be, x + hd / 2, g->n, nh, hd, hd / 2, ROPE_Y);
}

/* q, k, v of the normed input a: projections, per-head norms, RoPE */
static gm_status qkv(g4v *g, const g4v_layer *l) {
    gm_backend *be = g->be;
    const g4v_config *c = &g->w.cfg;
    const g4v_scratch *s = &g->s;
    const g4v_linear *lin[3] = {&l->q, &l->k, &l->v};
    float *const out[3] = {s->q, s->k, s->v};
    gm_status st = linears(g, lin, out, 3, s->a, g->n);
    if (st) return st;
    const int heads = g->n * c->n_head;
    be->ops->rmsnorm(be, s->q, s->q, l->q_norm, heads, c->head_dim, c->eps, NULL);
    be->ops->rmsnorm(be, s->k, s->k, l->k_norm, heads, c->head_dim, c->eps, NULL);
    be->ops->rmsnorm(be, s->v, s->v, NULL, heads, c->head_dim, c->eps, NULL);
    rope_2d(g, s->q);
    rope_2d(g, s->k);
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
        g->be->ops->bias_act(g->be, s->fg, NULL, s->fu, n, c->n_ff, vit_act_op(c->act));
        st = linear(g, &l->down, s->fg, n, s->o + (size_t)r0 * c->n_embd);
    }
    return st;
}

static gm_status block(g4v *g, const g4v_layer *l) {
    gm_backend *be = g->be;
    const gm_backend_ops *ops = be->ops;
    const g4v_config *c = &g->w.cfg;
    const g4v_scratch *s = &g->s;
    const int D = c->n_embd, N = g->n;
    const size_t ND = (size_t)N * D;
    ops->rmsnorm(be, s->a, s->h, l->ln1, N, D, c->eps, NULL);
    gm_status st = qkv(g, l);
    /* every patch attends to every patch; scale 1: the q / k norms set it */
    const gm_dense_attn at = {.q = s->q, .k = s->k, .v = s->v, .o = s->o, .ld = D, .n = N, .n_head = c->n_head,
                              .head_dim = c->head_dim, .scale = 1.0f};
    if (st || (st = ops->attention_dense(be, &at)) || (st = linear(g, &l->o, s->o, N, s->a))) return st;
    ops->rmsnorm(be, s->a, s->a, l->attn_post, N, D, c->eps, NULL); /* the residual after its post-norm */
    ops->add(be, s->h, s->a, ND);
    ops->rmsnorm(be, s->a, s->h, l->ln2, N, D, c->eps, NULL);
    if ((st = ffn(g, l))) return st;
    ops->rmsnorm(be, s->o, s->o, l->ffn_post, N, D, c->eps, NULL);
    ops->add(be, s->h, s->o, ND);
    if (l->out_scale && l->out_scale_n == 1) ops->scale(be, s->h, ND, l->out_scale[0]);
    else if (l->out_scale) ops->mul_rows(be, s->h, l->out_scale, N, D);
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
    gm_status st = gm_be_matmul(g->be, &w->patch, s->patches, g->n, s->h);
    if (st) return st;
    add_positions(g, s->h);
    rope_prepare(g);
    for (int il = 0; il < c->n_layers && !st; il++) st = block(g, &w->layers[il]);
    if (st) return st;
    const int T = pool_tokens(g, s->h, s->pooled), D = c->n_embd;
    for (int t = 0; w->std_bias && t < T; t++) {
        float *row = s->pooled + (size_t)t * D;
        for (int i = 0; i < D; i++) row[i] = (row[i] - w->std_bias[i]) * w->std_scale[i];
    }
    g->be->ops->rmsnorm(g->be, s->pooled, s->pooled, NULL, T, D, c->eps, NULL);
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
    const g4v_config *c = &g->w.cfg;
    if (c->head_dim / 2 > MAX_HALF_HEAD) st = gm_fail(err, GM_ERR_UNSUPPORTED, "%s: head dim %d", path, c->head_dim);
    const int pix = 3 * c->patch_size * c->patch_size, wide = c->n_ff > c->n_embd ? c->n_ff : c->n_embd;
    const gm_dense_shape shape = {.max_rows = c->max_patches, .max_width = wide > pix ? wide : pix,
                                  .n_head = c->n_head, .head_dim = c->head_dim, .attn_rows = ATTN_CHUNK, .n_rope = 2};
    if (!st && (st = vit_backend_new(o, false, &shape, &g->be, err))) st = gm_fail_prefix(err, "%s: ", path);
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
    if (g->be) g->be->ops->free(g->be);
    free(g->buf);
    free(g->at[ROPE_X]);
    free(g->at[ROPE_Y]);
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
