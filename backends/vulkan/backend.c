/* backends/vulkan/backend.c — the Vulkan backend: every op of runtime/backend.h as a compute shader
 * (backends/vulkan/shaders/) on one device, weights and the paged KV blocks in its memory.
 *
 * What lives where. The weights are uploaded once, at creation, in the file's layouts (the shaders dequantize
 * F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K rows as they read them); norm vectors in
 * one buffer. Activations are device buffers whose device addresses the forward pass holds as its float
 * pointers. KV blocks come from slabs of device memory, handed to the block pool (runtime/kvcache.c) as
 * addresses, so the pool's bookkeeping, refcounts and prefix index are the CPU's own; a copy on write is a
 * recorded buffer copy. Only the logits of the rows that ask (and hidden states, taps) come back to the host.
 *
 * Numbers. Weights are dequantized to f32 and multiplied by f32 activations (the CPU backend quantizes activations
 * to 8 bits for quantized weights; this is closer to the reference backend); every reduction runs in a fixed
 * order inside one workgroup and per row, so a row's logits do not depend on the batch, the chunking or the other
 * rows: alone == in a batch == chunked, bit for bit, as on the CPU.
 *
 * Not here (refused by name): Gemma 3n and Gemma 4, whose family hooks are host code around the ops
 * (gm_backend_ops.host_memory false: runtime/forward.c refuses them), and the encoders' dense ops (the vision
 * encoders run on the CPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/vulkan/device.h"
#include "backends/vulkan/vulkan.h"
#include "core/error.h"
#include "quant/quant.h"

/* a host object (a matrix's data, a norm vector) and its copy on the device */
typedef struct vk_weight {
    const void *host;
    uint64_t addr;
    uint32_t row_bytes; /* a matrix's rows as uploaded (upload_rows) */
} vk_weight;

/* KV blocks of one size: a free list over slabs */
typedef struct vk_kv_size {
    size_t bytes;
    uint64_t *free_list;
    int n_free, cap_free;
    uint64_t slab;      /* the slab being carved */
    size_t slab_used, slab_size;
} vk_kv_size;

typedef struct vk_backend {
    gm_backend base;
    gm_vk *vk;
    const gm_model *m;
    const gm_kv_layout *lay;
    int max_batch;
    vk_weight *w; /* sorted by host pointer */
    int n_w;
    uint64_t norms; /* every norm vector, one buffer */
    uint64_t rope[GM_ROPE_KINDS]; /* per kind: max_batch x dims/2 (cos, sin), host-visible */
    size_t rope_bytes[GM_ROPE_KINDS];
    uint64_t logits;   /* the head's output rows on the device */
    size_t logits_bytes;
    vk_kv_size kv[GM_KV_GROUPS];
} vk_backend;

static vk_backend *vkb(gm_backend *be) { return (vk_backend *)be; }
static uint64_t A(const void *p) { return (uint64_t)(uintptr_t)p; }

/* ---------------------------------------------------------------- weights */

static int cmp_weight(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t)((const vk_weight *)a)->host, y = (uintptr_t)((const vk_weight *)b)->host;
    return x < y ? -1 : x > y;
}

static const vk_weight *find_weight(const vk_backend *b, const void *host) {
    const vk_weight key = {.host = host};
    return bsearch(&key, b->w, (size_t)b->n_w, sizeof *b->w, cmp_weight);
}

static uint64_t weight_of(const vk_backend *b, const void *host) {
    const vk_weight *w = find_weight(b, host);
    return w ? w->addr : 0;
}

/* w into the table, which stays sorted by host pointer (b->w has room: upload_weights sized it) */
static void add_weight(vk_backend *b, vk_weight w) {
    int at = b->n_w;
    while (at > 0 && (uintptr_t)b->w[at - 1].host > (uintptr_t)w.host) at--;
    memmove(&b->w[at + 1], &b->w[at], (size_t)(b->n_w - at) * sizeof *b->w);
    b->w[at] = w;
    b->n_w++;
}

/* Bytes per block as uploaded: the file's, or (types whose fields are not 4-byte aligned in the file) a block
 * with every field aligned, so the shaders read words (shaders/common.glsl). */
static size_t upload_block_bytes(int type) {
    switch (type) {
    case GM_TYPE_Q8_0: return 36; /* qs[32] d pad */
    case GM_TYPE_Q4_0: return 20; /* qs[16] d pad */
    case GM_TYPE_Q5_0: return 24; /* qs[16] qh[4] d pad */
    case GM_TYPE_Q6_K: return 212; /* ql qh scales d pad */
    default: return gm_type_traits_of(type)->block_bytes;
    }
}

/* n blocks of type from the file's layout (src) into the uploaded one (dst) */
static void upload_rows(int type, uint8_t *dst, const uint8_t *src, size_t n) {
    const size_t fb = gm_type_traits_of(type)->block_bytes, ub = upload_block_bytes(type);
    for (size_t i = 0; i < n; i++, dst += ub, src += fb) {
        memset(dst, 0, ub);
        switch (type) {
        case GM_TYPE_Q8_0: memcpy(dst, src + 2, 32), memcpy(dst + 32, src, 2); break;
        case GM_TYPE_Q4_0: memcpy(dst, src + 2, 16), memcpy(dst + 16, src, 2); break;
        case GM_TYPE_Q5_0: memcpy(dst, src + 6, 16), memcpy(dst + 16, src + 2, 4), memcpy(dst + 20, src, 2); break;
        default: memcpy(dst, src, fb);
        }
    }
}

static bool type_supported(int t) {
    static const int ok[] = {GM_TYPE_F32, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_Q4_0, GM_TYPE_Q4_1, GM_TYPE_Q5_0,
                             GM_TYPE_Q5_1, GM_TYPE_Q8_0, GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (ok[i] == t) return true;
    return false;
}

static gm_status add_matrix(vk_backend *b, const gm_matrix *M, gm_error *err) {
    if (!M->data || M->rows <= 0) return GM_OK;
    if (weight_of(b, M->data)) return GM_OK; /* the tied head: the embedding's copy */
    const gm_type_traits *tt = gm_type_traits_of(M->type);
    if (!type_supported(M->type) || !tt)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: no shader reads weights of type %s", tt ? tt->name : "?");
    if (M->cols % 32)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: rows of %lld columns (a multiple of 32 is needed)", (long long)M->cols);
    const size_t blocks_row = (size_t)(M->cols / tt->block_elems), ub = upload_block_bytes(M->type);
    const size_t row_bytes = blocks_row * ub, bytes = (size_t)M->rows * row_bytes;
    const uint64_t a = gm_vk_buffer(b->vk, bytes, false);
    if (!a) return gm_fail(err, GM_ERR_NOMEM, "vulkan: out of device memory for a %zu-byte matrix", bytes);
    gm_status st = GM_OK;
    if (ub == tt->block_bytes) {
        st = gm_vk_upload(b->vk, a, M->data, bytes);
    } else { /* through a host copy in the upload layout, 4096 rows at a time */
        const size_t chunk = 4096;
        uint8_t *tmp = malloc(chunk * row_bytes);
        if (!tmp) return gm_fail(err, GM_ERR_NOMEM, "vulkan: out of memory");
        for (size_t r = 0; !st && r < (size_t)M->rows; r += chunk) {
            const size_t nr = (size_t)M->rows - r < chunk ? (size_t)M->rows - r : chunk;
            upload_rows(M->type, tmp, (const uint8_t *)M->data + r * blocks_row * tt->block_bytes, nr * blocks_row);
            st = gm_vk_upload(b->vk, a + r * row_bytes, tmp, nr * row_bytes);
        }
        free(tmp);
    }
    if (st) return gm_fail(err, st, "vulkan: cannot upload a matrix");
    add_weight(b, (vk_weight){M->data, a, (uint32_t)row_bytes});
    return GM_OK;
}

/* the norm vectors of the model, in one buffer */
static gm_status add_norms(vk_backend *b, gm_error *err) {
    const gm_model *m = b->m;
    const int d = m->cfg.d_model;
    const float **v = calloc((size_t)m->cfg.n_layers * 6 + 1, sizeof *v);
    int *len = calloc((size_t)m->cfg.n_layers * 6 + 1, sizeof *len);
    if (!v || !len) {
        free(v), free(len);
        return gm_fail(err, GM_ERR_NOMEM, "vulkan: out of memory");
    }
    int n = 0;
    size_t total = 0;
    for (int il = 0; il < m->cfg.n_layers; il++) {
        const gm_layer *L = &m->layers[il];
        const float *vs[6] = {L->attn_norm, L->post_attn_norm, L->ffn_norm, L->post_ffn_norm, L->q_norm, L->k_norm};
        const int ls[6] = {d, d, d, d, L->lc.head_dim, L->lc.head_dim};
        for (int k = 0; k < 6; k++)
            if (vs[k]) v[n] = vs[k], len[n++] = ls[k], total += (size_t)ls[k];
    }
    v[n] = m->output_norm, len[n++] = d, total += (size_t)d;
    float *host = malloc(total * sizeof *host);
    b->norms = host ? gm_vk_buffer(b->vk, total * sizeof *host, false) : 0;
    gm_status st = b->norms ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "vulkan: out of memory for the norm vectors");
    size_t off = 0;
    for (int k = 0; !st && k < n; k++) {
        memcpy(host + off, v[k], (size_t)len[k] * sizeof *host);
        if (!weight_of(b, v[k])) add_weight(b, (vk_weight){v[k], b->norms + off * sizeof *host, 0});
        off += (size_t)len[k];
    }
    if (!st && (st = gm_vk_upload(b->vk, b->norms, host, total * sizeof *host))) gm_fail(err, st, "vulkan: upload failed");
    free(host), free(v), free(len);
    return st;
}

static gm_status upload_weights(vk_backend *b, gm_error *err) {
    const gm_model *m = b->m;
    b->w = calloc((size_t)m->cfg.n_layers * 13 + 4, sizeof *b->w);
    if (!b->w) return gm_fail(err, GM_ERR_NOMEM, "vulkan: out of memory");
    gm_status st = add_matrix(b, &m->embd, err);
    if (!st) st = add_matrix(b, &m->output, err);
    for (int il = 0; !st && il < m->cfg.n_layers; il++) {
        const gm_layer *L = &m->layers[il];
        const gm_matrix *ms[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (int k = 0; !st && k < 7; k++) st = add_matrix(b, ms[k], err);
    }
    if (!st) st = add_norms(b, err);
    return st;
}

/* ---------------------------------------------------------------- KV storage: blocks carved from slabs */

static vk_kv_size *kv_size_of(vk_backend *b, size_t bytes) {
    for (int g = 0; g < GM_KV_GROUPS; g++)
        if (b->kv[g].bytes == bytes) return &b->kv[g];
    for (int g = 0; g < GM_KV_GROUPS; g++)
        if (!b->kv[g].bytes) {
            b->kv[g].bytes = bytes;
            return &b->kv[g];
        }
    return NULL;
}

static void *kv_alloc(void *ctx, size_t bytes) {
    vk_backend *b = ctx;
    vk_kv_size *s = kv_size_of(b, bytes);
    if (!s) return NULL;
    if (s->n_free) return (void *)(uintptr_t)s->free_list[--s->n_free];
    if (!s->slab || s->slab_used + bytes > s->slab_size) {
        /* 32 blocks per slab (at least 1 MiB): few buffers, little memory held ahead of the budget */
        size_t size = 32 * bytes;
        if (size < ((size_t)1 << 20)) size = (size_t)1 << 20;
        const uint64_t a = gm_vk_buffer(b->vk, size, false);
        if (!a) return NULL;
        s->slab = a, s->slab_used = 0, s->slab_size = size;
    }
    const uint64_t a = s->slab + s->slab_used;
    s->slab_used += (bytes + 255) & ~(size_t)255;
    return (void *)(uintptr_t)a;
}

static void kv_free(void *ctx, void *p, size_t bytes) {
    vk_backend *b = ctx;
    vk_kv_size *s = kv_size_of(b, bytes);
    if (!s || !p) return;
    if (s->n_free == s->cap_free) {
        const int cap = s->cap_free ? 2 * s->cap_free : 64;
        uint64_t *nl = realloc(s->free_list, (size_t)cap * sizeof *nl);
        if (!nl) return; /* the block is lost to this engine, not to the device: its slab is freed with the backend */
        s->free_list = nl, s->cap_free = cap;
    }
    s->free_list[s->n_free++] = A(p);
}

static void kv_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    gm_vk_copy(((vk_backend *)ctx)->vk, A(dst), A(src), bytes);
}

static gm_kv_storage vk_kv_storage(gm_backend *be) {
    return (gm_kv_storage){.ctx = be, .alloc = kv_alloc, .free = kv_free, .copy = kv_copy};
}

/* ---------------------------------------------------------------- buffers */

static float *vk_alloc(gm_backend *be, size_t n) {
    return (float *)(uintptr_t)gm_vk_buffer(vkb(be)->vk, (n ? n : 1) * sizeof(float), false);
}

static void vk_release(gm_backend *be, float *p) { gm_vk_buffer_free(vkb(be)->vk, A(p)); }

static void vk_read(gm_backend *be, float *host, const float *src, size_t n) {
    if (gm_vk_read(vkb(be)->vk, host, A(src), n * sizeof *host)) memset(host, 0, n * sizeof *host);
}

/* ---------------------------------------------------------------- ops */

/* 2D grid for `groups` workgroups (a dimension holds at most 65535) */
static void grid(uint64_t groups, uint32_t *gx, uint32_t *gy) {
    *gx = groups < 65535 ? (uint32_t)groups : 65535;
    *gy = (uint32_t)((groups + 65534) / 65535);
}

static void elementwise(gm_backend *be, uint32_t op, float *y, const float *x, size_t n, float s) {
    struct {
        uint64_t y, x, n;
        uint32_t op, gx;
        float s;
    } pc = {A(y), A(x), n, op, 0, s};
    uint32_t gy;
    grid((n + 255) / 256, &pc.gx, &gy);
    gm_vk_dispatch(vkb(be)->vk, GM_VK_ELEMENTWISE, &pc, sizeof pc, pc.gx, gy, 1);
}

static void vk_add(gm_backend *be, float *y, const float *x, size_t n) { elementwise(be, 0, y, x, n, 0.0f); }
static void vk_scale(gm_backend *be, float *x, size_t n, float s) { elementwise(be, 1, x, x, n, s); }
static void vk_geglu(gm_backend *be, float *gate, const float *up, int n, int ff) {
    elementwise(be, 2, gate, up, (size_t)n * (size_t)ff, 0.0f);
}
static void vk_copy_op(gm_backend *be, float *dst, const float *src, size_t n) {
    gm_vk_copy(vkb(be)->vk, A(dst), A(src), n * sizeof *dst);
}

static gm_status vk_embed(gm_backend *be, float *x, const gm_fwd_row *rows, int n) {
    vk_backend *b = vkb(be);
    const gm_model *m = b->m;
    const int d = m->cfg.d_model;
    int own = 0;
    for (int i = 0; i < n; i++) own += rows[i].embed != NULL;
    void *h;
    const uint64_t a = gm_vk_arena(b->vk, (size_t)n * 16 + (size_t)own * d * sizeof(float), &h);
    if (!a) return GM_ERR_NOMEM;
    uint64_t *meta = h;
    float *emb = (float *)(meta + 2 * (size_t)n);
    for (int i = 0, k = 0; i < n; i++) {
        meta[2 * i] = (uint64_t)rows[i].token;
        meta[2 * i + 1] = 0;
        if (rows[i].embed) {
            memcpy(emb + (size_t)k * d, rows[i].embed, (size_t)d * sizeof *emb);
            meta[2 * i + 1] = a + (uint64_t)((uint8_t *)(emb + (size_t)k * d) - (uint8_t *)h);
            k++;
        }
    }
    const vk_weight *E = find_weight(b, m->embd.data);
    struct {
        uint64_t x, w, meta;
        uint32_t n, d, type, row_bytes;
        float scale;
    } pc = {A(x), E->addr, a, (uint32_t)n, (uint32_t)d, (uint32_t)m->embd.type, E->row_bytes, m->cfg.embed_scale};
    gm_vk_dispatch(b->vk, GM_VK_EMBED, &pc, sizeof pc, (uint32_t)n, 1, 1);
    return GM_OK;
}

static void vk_rmsnorm(gm_backend *be, float *y, const float *x, const float *w, int n, int dim, float eps,
                       const int *idx) {
    vk_backend *b = vkb(be);
    uint64_t ia = 0;
    if (idx) {
        void *h;
        if (!(ia = gm_vk_arena(b->vk, (size_t)n * sizeof *idx, &h))) {
            gm_vk_fail(b->vk, GM_ERR_NOMEM);
            return;
        }
        memcpy(h, idx, (size_t)n * sizeof *idx);
    }
    struct {
        uint64_t y, x, w, idx;
        uint32_t n, dim;
        float eps;
    } pc = {A(y), A(x), w ? weight_of(b, w) : 0, ia, (uint32_t)n, (uint32_t)dim, eps};
    uint32_t gx, gy;
    grid((uint64_t)n, &gx, &gy);
    gm_vk_dispatch(b->vk, GM_VK_RMSNORM, &pc, sizeof pc, gx, gy, 1);
}

enum { MM_OUT = 2, MM_TILE = 8 }; /* OUT and TILE of shaders/matmul.comp */

/* y (n rows of ldy floats) = x W^T, soft-capped when softcap > 0 */
static gm_status matmul_one(vk_backend *b, const gm_matrix *W, uint64_t y, uint32_t ldy, const float *x, int n,
                            float softcap) {
    const vk_weight *wt = find_weight(b, W->data);
    if (!wt) return GM_ERR_UNSUPPORTED; /* a matrix the backend was not given at creation */
    const uint64_t w = wt->addr;
    struct {
        uint64_t w, x, y;
        uint32_t rows, cols, n, type, row_bytes, ldy, gx;
        float softcap;
    } pc = {w, A(x), y, (uint32_t)W->rows, (uint32_t)W->cols, (uint32_t)n, (uint32_t)W->type,
            wt->row_bytes, ldy, 0, softcap};
    uint32_t gy;
    /* matmul.comp: workgroups of 64 invocations of MM_OUT features each, MM_TILE input rows per workgroup */
    grid(((uint64_t)W->rows + 64 * MM_OUT - 1) / (64 * MM_OUT), &pc.gx, &gy);
    gm_vk_dispatch(b->vk, GM_VK_MATMUL, &pc, sizeof pc, pc.gx, gy, (uint32_t)((n + MM_TILE - 1) / MM_TILE));
    return GM_OK;
}

static gm_status vk_matmul(gm_backend *be, const gm_matrix *const *W, float *const *y, int count, const float *x, int n) {
    for (int j = 0; j < count; j++) {
        gm_status st = matmul_one(vkb(be), W[j], A(y[j]), (uint32_t)W[j]->rows, x, n, 0.0f);
        if (st) return st;
    }
    return GM_OK;
}

static gm_status vk_head(gm_backend *be, const gm_matrix *W, const float *x, int n, float *y_host, float softcap) {
    vk_backend *b = vkb(be);
    const size_t bytes = (size_t)n * (size_t)W->rows * sizeof(float);
    if (bytes > b->logits_bytes) {
        if (b->logits) gm_vk_buffer_free(b->vk, b->logits);
        b->logits = gm_vk_buffer(b->vk, bytes, false);
        b->logits_bytes = b->logits ? bytes : 0;
        if (!b->logits) return GM_ERR_NOMEM;
    }
    gm_status st = matmul_one(b, W, b->logits, (uint32_t)W->rows, x, n, softcap);
    return st ? st : gm_vk_read(b->vk, y_host, b->logits, bytes);
}

/* cos and sin of every row's angles, in double, into the kind's table (written by the host: after what is
 * recorded, which may read the table of the last chunk) */
static void vk_rope_prepare(gm_backend *be, int kind, const float *inv_freq, int dims, const gm_fwd_row *rows, int n) {
    vk_backend *b = vkb(be);
    const size_t bytes = (size_t)b->max_batch * (size_t)(dims / 2) * 2 * sizeof(float);
    if (gm_vk_pending(b->vk) && gm_vk_flush(b->vk)) return; /* failed: sticky, the next flush says so */
    if (bytes > b->rope_bytes[kind]) {
        if (b->rope[kind]) gm_vk_buffer_free(b->vk, b->rope[kind]);
        b->rope[kind] = gm_vk_buffer(b->vk, bytes, true);
        b->rope_bytes[kind] = b->rope[kind] ? bytes : 0;
        if (!b->rope[kind]) {
            gm_vk_fail(b->vk, GM_ERR_NOMEM);
            return;
        }
    }
    float *t = gm_vk_map(b->vk, b->rope[kind]);
    const int h = dims / 2;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < h; e++) {
            const double a = (double)rows[i].pos * inv_freq[e];
            t[((size_t)i * h + e) * 2] = (float)cos(a);
            t[((size_t)i * h + e) * 2 + 1] = (float)sin(a);
        }
}

static void vk_rope(gm_backend *be, float *x, int n, int n_heads, int hd, int dims, int kind) {
    vk_backend *b = vkb(be);
    struct {
        uint64_t x, tab;
        uint32_t n, n_heads, hd, dims;
    } pc = {A(x), b->rope[kind], (uint32_t)n, (uint32_t)n_heads, (uint32_t)hd, (uint32_t)dims};
    uint32_t gx, gy;
    grid((uint64_t)n * (uint64_t)n_heads, &gx, &gy);
    gm_vk_dispatch(b->vk, GM_VK_ROPE, &pc, sizeof pc, gx, gy, 1);
}

static void vk_kv_store(gm_backend *be, const float *k, const float *v, const gm_fwd_row *rows, int n, int il,
                        int kv_dim) {
    vk_backend *b = vkb(be);
    void *h;
    const uint64_t a = gm_vk_arena(b->vk, (size_t)n * 16, &h);
    if (!a) {
        gm_vk_fail(b->vk, GM_ERR_NOMEM);
        return;
    }
    uint64_t *dst = h;
    for (int i = 0; i < n; i++) {
        dst[2 * i] = A(gm_kv_row_k(b->lay, rows[i].kv, il, rows[i].pos));
        dst[2 * i + 1] = A(gm_kv_row_v(b->lay, rows[i].kv, il, rows[i].pos));
    }
    struct {
        uint64_t k, v, dst;
        uint32_t n, kv_dim, f16;
    } pc = {A(k), A(v), a, (uint32_t)n, (uint32_t)kv_dim, b->lay->dtype == GM_KV_DTYPE_F16};
    gm_vk_dispatch(b->vk, GM_VK_KV_STORE, &pc, sizeof pc, (uint32_t)n, 1, 1);
}

/* row i belongs to the run of rows of one sequence that row i - 1 is in (they share one block list) */
static bool run_continues(const gm_attn_call *c, int i) { return i > 0 && c->rows[i].kv == c->rows[i - 1].kv; }

/* Per row: its keys [lo, hi) and the addresses of its layer's K and V rows per block (rows of one sequence in a
 * run share one list), and its row of the bias. One arena allocation for all of it. */
static void vk_attention(gm_backend *be, const gm_attn_call *c) {
    vk_backend *b = vkb(be);
    const gm_kv_layout *lay = b->lay;
    const int n = c->n, src = lay->source[c->il], g = lay->group[src];
    size_t blocks = 0; /* block slots of every run's table */
    for (int i = 0; i < n; i++)
        if (!run_continues(c, i)) blocks += (size_t)c->rows[i].kv->cap;
    const size_t bias_bytes = c->bias ? (size_t)n * (size_t)c->bias_n * sizeof(float) : 0;
    void *h;
    const uint64_t a = gm_vk_arena(b->vk, (size_t)n * 32 + blocks * 16 + bias_bytes, &h);
    if (!a) {
        gm_vk_fail(b->vk, GM_ERR_NOMEM);
        return;
    }
    uint64_t *meta = h, *bl = meta + 4 * (size_t)n;
    float *bias = (float *)(bl + 2 * blocks);
    uint64_t kl = 0, vl = 0;
    for (int i = 0; i < n; i++) {
        const gm_kv_table *t = c->rows[i].kv;
        if (!run_continues(c, i)) { /* the run's lists: every block slot of its table */
            kl = a + (uint64_t)((uint8_t *)bl - (uint8_t *)h);
            vl = kl + (uint64_t)t->cap * 8;
            for (int k = 0; k < t->cap; k++) {
                const uint64_t base = A(t->ptr[g][k]);
                bl[k] = base ? base + lay->k_off[src] : 0;
                bl[t->cap + k] = base ? base + lay->v_off[src] : 0;
            }
            bl += 2 * (size_t)t->cap;
        }
        int lo, hi;
        gm_attn_key_range(c, &c->rows[i], &lo, &hi);
        meta[4 * i] = kl, meta[4 * i + 1] = vl;
        meta[4 * i + 2] = (uint64_t)(uint32_t)lo | (uint64_t)(uint32_t)hi << 32;
        meta[4 * i + 3] = 0;
        if (c->bias) {
            float *r = bias + (size_t)i * c->bias_n;
            memcpy(r, c->bias + (size_t)c->rows[i].pos * c->bias_n, (size_t)c->bias_n * sizeof *r);
            meta[4 * i + 3] = a + (uint64_t)((uint8_t *)r - (uint8_t *)h);
        }
    }
    const gm_layer_config *lc = c->lc;
    struct {
        uint64_t q, att, meta;
        uint32_t n, n_heads, group, hd, row_bytes, f16;
        float softcap;
    } pc = {A(c->q), A(c->att), a, (uint32_t)n, (uint32_t)lc->n_heads, (uint32_t)(lc->n_heads / lc->n_kv_heads),
            (uint32_t)lc->head_dim, (uint32_t)((size_t)lay->kv_dim[src] * lay->elem), lay->dtype == GM_KV_DTYPE_F16,
            c->softcap};
    gm_vk_dispatch(b->vk, GM_VK_ATTENTION, &pc, sizeof pc, (uint32_t)n, (uint32_t)lc->n_heads, 1);
}

static int vk_threads(const gm_backend *be) {
    (void)be;
    return 1;
}

static void vk_free(gm_backend *be) {
    vk_backend *b = vkb(be);
    if (!b) return;
    gm_vk_close(b->vk); /* every buffer with it */
    for (int g = 0; g < GM_KV_GROUPS; g++) free(b->kv[g].free_list);
    free(b->w);
    free(b);
}

static void vk_stats(gm_backend *be, gm_backend_stats *out) { *out = gm_vk_stats(vkb(be)->vk); }

static const gm_backend_ops vk_ops = {
    .name = "vulkan",
    .host_memory = false,
    .kv_storage = vk_kv_storage,
    .n_threads = vk_threads,
    .free = vk_free,
    .stats = vk_stats,
    .alloc = vk_alloc,
    .release = vk_release,
    .read = vk_read,
    .embed = vk_embed,
    .rmsnorm = vk_rmsnorm,
    .matmul = vk_matmul,
    .head = vk_head,
    .rope_prepare = vk_rope_prepare,
    .rope = vk_rope,
    .kv_store = vk_kv_store,
    .attention = vk_attention,
    .geglu = vk_geglu,
    .add = vk_add,
    .scale = vk_scale,
    .copy = vk_copy_op,
};

gm_status gm_backend_vulkan_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                                gm_backend **out, gm_error *err) {
    *out = NULL;
    if (!m || !lay) return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: the backend runs a model's text layers only");
    if (opt->max_batch > 65535)
        return gm_fail(err, GM_ERR_ARG, "vulkan: a batch of %d rows (at most 65535)", opt->max_batch);
    if (gm_model_layer_max(m).head_dim > 512)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "vulkan: head_dim %d (the attention shader holds up to 512)",
                       gm_model_layer_max(m).head_dim);
    vk_backend *b = calloc(1, sizeof *b);
    if (!b) return gm_fail(err, GM_ERR_NOMEM, "vulkan: out of memory");
    b->base.ops = &vk_ops;
    b->m = m, b->lay = lay, b->max_batch = opt->max_batch;
    const gm_vk_options vo = {.device = opt->device - 1, .gpu_only = opt->gpu_only, .validate = opt->validate};
    gm_status st = gm_vk_open(&vo, &b->vk, err);
    if (!st) st = upload_weights(b, err);
    if (st) {
        vk_free(&b->base);
        return st;
    }
    *out = &b->base;
    return GM_OK;
}

const char *gm_backend_vulkan_device(const gm_backend *be) { return gm_vk_device_name(((const vk_backend *)be)->vk); }

bool gm_backend_vulkan_built(void) { return true; }
