/* vision/siglip.c — the Gemma 3 image encoder's forward pass (llama.cpp tools/mtmd/models/siglip.cpp and
 * clip.cpp build_vit; HF SiglipVisionModel + Gemma3MultiModalProjector):
 *
 *   patches (im2col, p = py * grid + px) -> patch matmul + bias + learned position row (no CLS token)
 *   n_layers x pre-LN block: h += out(MHA(LN1 h)), bidirectional, 1/sqrt(hd); h += down(act(up(LN2 h)))
 *   post LayerNorm -> scale x scale average pooling (row-major tokens) -> RMSNorm * (1 + w) -> x W_proj
 *
 * The blocks run on the backend's ops (runtime/backend.h): every linear over all patches at once, the norms, bias
 * adds and activations, and the attention of every patch to every patch. The CPU backend is made with float_gemm:
 * on AVX-512 its float matrices and attention go through the float GEMM (kernels/sgemm.h: panels of 32 weight
 * rows against register tiles of 12 patches: 4096 patches per matmul are a GEMM, not the text model's many dot
 * products); elsewhere through kernels/matmul.c. The patch extraction and the pooling are host code (the
 * backend's activations are host memory: vit_backend_new). All scratch is allocated at open, sized by the file's
 * shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/scratch.h"
#include "gemma_vision.h"
#include "kernels/ops.h"
#include "vision/mmproj.h"
#include "vision/vision_internal.h"

/* Query rows per attention pass: bounds the score matrix (chunk x n_patches floats; 2.25 MiB at 4096 patches:
 * 144 rows measured 5% faster than 512 at 1 thread on Zen 4, the scores staying in cache). */
enum { ATTN_CHUNK = 144 };

typedef struct vit_scratch {
    float *patches;          /* n_patches x 3 patch^2 */
    float *h, *a, *q, *k, *v, *o; /* n_patches x n_embd each: residual, normed input, projections, attention */
    float *f;                /* n_patches x n_ff */
    float *pooled;           /* n_tokens x n_embd */
} vit_scratch;

struct siglip {
    vit_weights w;
    gm_backend *be;
    vit_scratch s;
    float *buf; /* every scratch array above */
};

/* ---- scratch */

static gm_status alloc_scratch(siglip *v, gm_error *err) {
    const vit_config *c = &v->w.cfg;
    const size_t N = (size_t)c->n_patches, D = (size_t)c->n_embd;
    const gm_scratch_part parts[] = {
        {&v->s.patches, N * 3 * (size_t)c->patch_size * (size_t)c->patch_size},
        {&v->s.h, N * D}, {&v->s.a, N * D}, {&v->s.q, N * D}, {&v->s.k, N * D}, {&v->s.v, N * D}, {&v->s.o, N * D},
        {&v->s.f, N * (size_t)c->n_ff}, {&v->s.pooled, (size_t)c->n_tokens * D},
    };
    size_t bytes;
    v->buf = gm_scratch_carve(parts, sizeof parts / sizeof parts[0], &bytes);
    if (!v->buf) return gm_fail(err, GM_ERR_NOMEM, "vision encoder scratch: %zu MiB", bytes >> 20);
    return GM_OK;
}

/* ---- the forward pass */

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

static gm_status block(siglip *v, const vit_layer *l) {
    gm_backend *be = v->be;
    const gm_backend_ops *ops = be->ops;
    const vit_config *c = &v->w.cfg;
    const vit_scratch *s = &v->s;
    const int N = c->n_patches, D = c->n_embd;
    ops->layernorm(be, s->a, s->h, l->ln1_w, l->ln1_b, N, D, c->eps);
    const gm_matrix *qkv[3] = {&l->q, &l->k, &l->v};
    float *const out[3] = {s->q, s->k, s->v};
    gm_status st = ops->matmul(be, qkv, out, 3, s->a, N);
    if (st) return st;
    ops->bias_add(be, s->q, NULL, l->bq, N, D);
    ops->bias_add(be, s->k, NULL, l->bk, N, D);
    ops->bias_add(be, s->v, NULL, l->bv, N, D);
    const gm_dense_attn at = {.q = s->q, .k = s->k, .v = s->v, .o = s->o, .ld = D, .n = N, .n_head = c->n_head,
                              .head_dim = c->head_dim, .scale = 1.0f / sqrtf((float)c->head_dim)};
    if ((st = ops->attention_dense(be, &at)) || (st = gm_be_matmul(be, &l->o, s->o, N, s->a))) return st;
    ops->bias_add(be, s->h, s->a, l->bo, N, D);
    ops->layernorm(be, s->a, s->h, l->ln2_w, l->ln2_b, N, D, c->eps);
    if ((st = gm_be_matmul(be, &l->up, s->a, N, s->f))) return st;
    ops->bias_act(be, s->f, l->bup, NULL, N, c->n_ff, vit_act_op(c->act));
    if ((st = gm_be_matmul(be, &l->down, s->f, N, s->a))) return st;
    ops->bias_add(be, s->h, s->a, l->bdown, N, D);
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
    gm_backend *be = v->be;
    const gm_backend_ops *ops = be->ops;
    const vit_weights *w = &v->w;
    const vit_config *c = &w->cfg;
    const vit_scratch *s = &v->s;
    const int N = c->n_patches, D = c->n_embd;
    extract_patches(c, chw, s->patches);
    gm_status st = gm_be_matmul(be, &w->patch, s->patches, N, s->h);
    if (st) return st;
    ops->bias_add(be, s->h, NULL, w->patch_b, N, D);
    ops->add(be, s->h, w->pos, (size_t)N * D);
    for (int il = 0; il < c->n_layers && !st; il++) st = block(v, &w->layers[il]);
    if (st) return st;
    ops->layernorm(be, s->h, s->h, w->post_w, w->post_b, N, D, c->eps);
    pool_tokens(c, s->h, s->pooled);
    ops->rmsnorm(be, s->pooled, s->pooled, w->soft_norm, c->n_tokens, D, c->eps, NULL); /* the file stores 1 + w */
    return gm_be_matmul(be, &w->proj, s->pooled, c->n_tokens, out);
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
    const vit_config *c = &v->w.cfg;
    const int pix = 3 * c->patch_size * c->patch_size, wide = c->n_ff > c->n_embd ? c->n_ff : c->n_embd;
    const gm_dense_shape shape = {.max_rows = c->n_patches, .max_width = wide > pix ? wide : pix, .n_head = c->n_head,
                                  .head_dim = c->head_dim, .attn_rows = ATTN_CHUNK};
    /* the float GEMM where the level has it; Q8_0 and other quantized matrices still take kernels/matmul.c */
    st = vit_backend_new(o, true, &shape, &v->be, err);
    if (!st) st = alloc_scratch(v, err);
    if (st) {
        siglip_free(v);
        return gm_fail_prefix(err, "%s: ", path);
    }
    *out = v;
    return GM_OK;
}

void siglip_free(siglip *v) {
    if (!v) return;
    if (v->be) v->be->ops->free(v->be);
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
