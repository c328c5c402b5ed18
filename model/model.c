/* model/model.c — open a model: source + config + tokenizer + per-layer weight views. What a family adds is
 * reached through its row (model/family.h: layer facts, RoPE factors, extra weights). */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdbool.h>

#include "core/error.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "kernels/pack.h"
#include "model/family.h"
#include "quant/quant.h"
#include "text/tokenizer.h"

bool gm_layer_is_sliding(const gm_source *s, const gm_config *c, int il) {
    return gm_config_gguf_slides(gm_source_gguf(s), c, il);
}

gm_layer_config gm_layer_config_uniform(const gm_source *s, const gm_config *c, int il) {
    const bool sliding = gm_layer_is_sliding(s, c, il);
    /* Gemma 3: local layers use the local base unscaled; global layers the global base with linear
     * scaling. Gemma 1/2 have one base (the config sets both). */
    return (gm_layer_config){.head_dim = c->head_dim, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
                             .d_ff = c->d_ff, .window = sliding ? c->sliding_window : 0,
                             .rope_base = sliding ? c->rope_base_local : c->rope_base_global,
                             .rope_scale = sliding ? 1.0f : c->rope_scale_global, .rope_dims = c->head_dim,
                             .kv_source = il};
}

gm_layer_max gm_model_layer_max(const gm_model *m) {
    gm_layer_max x = {0};
    for (int il = 0; il < m->cfg.n_layers; il++) {
        const gm_layer_config *l = &m->layers[il].lc;
#define MAXOF(f, v) x.f = (v) > x.f ? (v) : x.f
        MAXOF(head_dim, l->head_dim);
        MAXOF(n_heads, l->n_heads);
        MAXOF(n_kv_heads, l->n_kv_heads);
        MAXOF(d_ff, l->d_ff);
        MAXOF(q_dim, l->n_heads * l->head_dim);
        MAXOF(kv_dim, l->n_kv_heads * l->head_dim);
        MAXOF(group, l->n_heads / l->n_kv_heads);
#undef MAXOF
    }
    return x;
}

const gm_layer_config *gm_model_layer(const gm_model *m, int il) {
    return m && il >= 0 && il < m->cfg.n_layers ? &m->layers[il].lc : NULL;
}

static gm_status find(const gm_model *m, const char *name, bool required, const gm_tensor **out,
                      gm_error *err) {
    *out = gm_source_tensor(m->src, name);
    if (!*out && required)
        return gm_fail(err, GM_ERR_NOT_FOUND, "%s: tensor %s is missing", gm_source_path(m->src), name);
    return GM_OK;
}

/* A 2-D weight of shape ne = [cols, rows] as a matrix view, with its size checked. */
gm_status gm_model_load_matrix(gm_model *m, const char *name, int64_t cols, int64_t rows, gm_matrix *out,
                               gm_error *err) {
    const gm_tensor *t;
    gm_status st = find(m, name, true, &t, err);
    if (st) return st;
    const char *path = gm_source_path(m->src);
    if (t->n_dims > 2 || t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)cols, (long long)rows);
    const size_t rb = gm_row_bytes(t->type, cols);
    if (rb == 0 || !gm_type_traits_of(t->type))
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: tensor %s: type %s (%d) with rows of %lld is not supported",
                       path, name, gm_type_name(t->type) ? gm_type_name(t->type) : "?", t->type, (long long)cols);
    if (t->nbytes < (uint64_t)rb * (uint64_t)rows)
        return gm_fail(err, GM_ERR_FORMAT, "%s: tensor %s holds %llu bytes, needs %llu", path, name,
                       (unsigned long long)t->nbytes, (unsigned long long)rb * (unsigned long long)rows);
    *out = (gm_matrix){.type = t->type, .rows = rows, .cols = cols, .data = t->data};
    return GM_OK;
}

/* A 1-D norm weight of n elements converted to f32 into dst, with +1 added when the file stores the
 * raw (zero-centred) w. Absent optional norms leave *out NULL. */
gm_status gm_model_load_norm(gm_model *m, const char *name, int n, bool required, float *dst, const float **out,
                             gm_error *err) {
    const gm_tensor *t;
    *out = NULL;
    gm_status st = find(m, name, required, &t, err);
    if (st || !t) return st;
    const char *path = gm_source_path(m->src);
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return gm_fail(err, GM_ERR_FORMAT, "%s: norm %s has %lld x %lld elements, expected %d", path, name,
                       (long long)t->ne[0], (long long)t->ne[1], n);
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    const size_t rb = gm_row_bytes(t->type, n);
    if (!tr || !tr->dequant_row || rb == 0)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "%s: norm %s has unsupported type %d", path, name, t->type);
    if (t->nbytes < rb) return gm_fail(err, GM_ERR_FORMAT, "%s: norm %s is truncated", path, name);
    tr->dequant_row(t->data, dst, n);
    if (!m->cfg.norm_weights_plus_one)
        for (int i = 0; i < n; i++) dst[i] += 1.0f;
    for (int i = 0; i < n; i++)
        if (!isfinite(dst[i])) return gm_fail(err, GM_ERR_FORMAT, "%s: norm %s holds a non-finite value", path, name);
    *out = dst;
    return GM_OK;
}

/* Layer il's facts: the uniform rules, then what the family says per layer (3n's KV sharing, 4's geometry),
 * checked against the limits. */
static gm_status layer_facts(gm_model *m, int il, gm_error *err) {
    const gm_config *c = &m->cfg;
    gm_layer *L = &m->layers[il];
    L->lc = gm_layer_config_uniform(m->src, c, il);
    gm_status st = c->family->layer_config ? c->family->layer_config(m->src, c, il, &L->lc, err) : GM_OK;
    return st ? st : gm_config_check_layer(&L->lc, il, gm_source_path(m->src), err);
}

static gm_status load_layer(gm_model *m, int il, float **store, gm_error *err) {
    const gm_config *c = &m->cfg;
    gm_layer *L = &m->layers[il];
    const gm_layer_config *lc = &L->lc;
    gm_status st;
    const int64_t d = c->d_model, qd = (int64_t)lc->n_heads * lc->head_dim,
                  kvd = (int64_t)lc->n_kv_heads * lc->head_dim, ff = lc->d_ff;
    /* a family may let layers that read another layer's K/V omit attn_k / attn_v / attn_k_norm, and a layer
     * without attn_v take V from the K projection (Gemma 4) */
    const bool opt_kv = c->family->rules.kv_tensors_optional, own_kv = lc->kv_source == il;
    char name[96];
#define PRESENT(suffix) (snprintf(name, sizeof name, "blk.%d." suffix ".weight", il), gm_source_tensor(m->src, name) != NULL)
#define MAT(field, suffix, cols, rows)                                             \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", il);                   \
    if ((st = gm_model_load_matrix(m, name, cols, rows, &L->field, err))) return st;
#define NORM(field, suffix, n, req)                                                \
    snprintf(name, sizeof name, "blk.%d." suffix ".weight", il);                   \
    if ((st = gm_model_load_norm(m, name, n, req, *store, &L->field, err))) return st;      \
    if (L->field) *store += (n);
    MAT(wq, "attn_q", d, qd)
    if (!opt_kv || own_kv || PRESENT("attn_k")) { MAT(wk, "attn_k", d, kvd) }
    if (!opt_kv || PRESENT("attn_v")) { MAT(wv, "attn_v", d, kvd) }
    else L->v_from_k = own_kv;
    MAT(wo, "attn_output", qd, d)
    MAT(gate, "ffn_gate", d, ff)
    MAT(up, "ffn_up", d, ff)
    MAT(down, "ffn_down", ff, d)
    NORM(attn_norm, "attn_norm", (int)d, true)
    NORM(ffn_norm, "ffn_norm", (int)d, true)
    NORM(post_attn_norm, "post_attention_norm", (int)d, c->has_post_norms)
    NORM(post_ffn_norm, "post_ffw_norm", (int)d, c->has_post_norms)
    NORM(q_norm, "attn_q_norm", lc->head_dim, c->has_qk_norm)
    NORM(k_norm, "attn_k_norm", lc->head_dim, c->has_qk_norm && (!opt_kv || own_kv))
#undef MAT
#undef NORM
#undef PRESENT
    if (!c->has_post_norms) L->post_attn_norm = L->post_ffn_norm = NULL;
    if (!c->has_qk_norm) L->q_norm = L->k_norm = NULL;
    float *inv = *store;
    gm_rope_inv_freq(inv, lc->rope_dims, lc->rope_base, 1.0 / lc->rope_scale);
    if (!lc->window && c->family->rope_factors && (st = c->family->rope_factors(m, inv, lc->rope_dims / 2, err)))
        return st;
    L->inv_freq = inv;
    *store += lc->rope_dims / 2;
    return GM_OK;
}

static gm_status load_weights(gm_model *m, gm_error *err) {
    const gm_config *c = &m->cfg;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for weights");
    gm_status st;
    for (int il = 0; il < c->n_layers; il++)
        if ((st = layer_facts(m, il, err))) return st;
    /* per layer: 4 norms of d, q/k norms and RoPE frequencies of at most the largest head_dim each */
    const size_t hd = (size_t)gm_model_layer_max(m).head_dim;
    const size_t per_layer = 4 * (size_t)c->d_model + 2 * hd + hd / 2;
    m->f32_store = malloc(((size_t)c->n_layers * per_layer + (size_t)c->d_model) * sizeof(float));
    if (!m->f32_store) return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for weights");
    st = gm_model_load_matrix(m, "token_embd.weight", c->d_model, c->n_vocab, &m->embd, err);
    if (st) return st;
    m->output = m->embd;
    if (gm_source_tensor(m->src, "output.weight") && !c->tied_embeddings) {
        st = gm_model_load_matrix(m, "output.weight", c->d_model, c->n_vocab, &m->output, err);
        if (st) return st;
    }
    float *store = m->f32_store;
    st = gm_model_load_norm(m, "output_norm.weight", c->d_model, true, store, &m->output_norm, err);
    if (st) return st;
    store += c->d_model;
    if (c->dense_2_out && (st = gm_model_load_matrix(m, "dense_2.weight", c->dense_2_in, c->dense_2_out, &m->dense_2, err)))
        return st;
    if (c->dense_3_out && (st = gm_model_load_matrix(m, "dense_3.weight", c->dense_3_in, c->dense_3_out, &m->dense_3, err)))
        return st;
    for (int il = 0; il < c->n_layers; il++)
        if ((st = load_layer(m, il, &store, err))) return st;
    return c->family->load ? c->family->load(m, err) : GM_OK;
}

/* Packed copies of layer matrices for the kernels of the model's ISA level (gm_model_options.isa;
 * kernels/pack.h); the file bytes stay mapped for the other levels and for every other reader.
 *
 * x8 (the AVX2 and AVX-512 levels; F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K matrices of rows a multiple
 * of 8): the AVX2 kernels take eight rows per vector (kernels/f16x8_avx2.c, kernels/qtiles_avx2.c) straight from the
 * copy; at the AVX-512 level too, where they beat the AVX-512 kernels on the file's rows (kernels/matmul.c).
 * The copies take the place of the file's pages in memory: each matrix's pages are dropped once it is
 * packed, and nothing reads them while the copy's level runs. Because a 2 MiB file page is mapped whole again when any
 * byte of it is read, the layer's other matrices (K-quants, say) move into plain copies too, so that no
 * read of a layer touches the file and the resident size stays about the file's. The tied embedding /
 * output matrix is not packed: the token lookup reads its rows.
 *
 * Q5_0x16, opt-in (gm_model_options.repack = GM_REPACK_Q5_0X16; the CLI's GEMMA_REPACK=1): with AVX-512 active, each
 * layer's Q5_0 matrix (q, k, gate, up of the usual Q4_K_M files) gets this copy instead of x8, for the AVX-512 kernels;
 * measured before x8 served AVX-512: its one-token dot ~1.3x faster on data in cache. Measured on the
 * whole decode step (Gemma 3 270M Q4_K_M, Zen 4, paired runs): +3% at 2 threads, +0% at 1 (the step is
 * bound by memory, not by that kernel), for +44 MB resident, which breaks the budget of file + KV cache +
 * 64 MiB (file pages shared with other tensors stay mapped: 2 MiB folios map whole), and +16 ms at open.
 * Hence off by default. GM_REPACK_OFF (GEMMA_REPACK=0) turns both off. */

static size_t matrix_bytes(const gm_matrix *w) { return gm_row_bytes(w->type, w->cols) * (size_t)w->rows; }

/* Drops w's file pages (those wholly inside it) from the resident set: while the packed copy's level is
 * active nothing reads them; another level reads them back from the file. Only for the source's own file
 * map (a caller's buffer would lose its bytes). */
static void release_file_pages(const gm_model *m, const gm_matrix *w) {
    const size_t bytes = matrix_bytes(w), pg = (size_t)sysconf(_SC_PAGESIZE);
    if (!gm_source_file_mapped(m->src, w->data, bytes)) return;
    const uintptr_t b = ((uintptr_t)w->data + pg - 1) / pg * pg, e = ((uintptr_t)w->data + bytes) / pg * pg;
    if (e > b) (void)madvise((void *)b, e - b, MADV_DONTNEED);
}

/* a matrix to copy: packed (packed_type set), or moved whole into anonymous memory (dst) */
typedef struct {
    gm_matrix *w;
    char *dst;
} pack_item;

static bool is_x8(const gm_matrix *w) { return w->packed_type == GM_KTYPE_X8(w->type); }

static void pack_x8(const gm_matrix *w, char *dst) {
    if (w->type == GM_TYPE_F16 || w->type == GM_TYPE_BF16) gm_pack_x8(w->data, dst, w->rows, w->cols);
    else gm_pack_qx8(w->type, w->data, dst, w->rows, w->cols);
}

/* x8 copies the packer may make after open: those whose kernels on the file's rows give the same bits (the
 * quantized types; F16x8 / BF16x8 sum in another order than the F16 / BF16 kernels on the file's rows) */
static bool packs_later(const gm_matrix *w) { return is_x8(w) && gm_avx2_qx8_tiles(w->type) != NULL; }

/* One copy: a plain move, or a packed layout, published (set, then the kernels re-bound: release, so a reader
 * that sees the packed kernels sees the copy). The file's pages go where nothing reads them any more (the
 * Q5_0x16 kernels still read the file's rows); readers still on them fault them back in: the same bytes. */
static void pack_item_do(gm_model *m, const pack_item *it) {
    gm_matrix *w = it->w;
    if (!w->packed_type) {
        memcpy(it->dst, w->data, matrix_bytes(w));
        release_file_pages(m, w);
        w->data = it->dst; /* the same bytes for every reader */
        return;
    }
    if (is_x8(w)) {
        pack_x8(w, it->dst);
    } else {
        const size_t rb = gm_row_bytes(w->type, w->cols);
        for (int64_t r = 0; r < w->rows; r++)
            gm_pack_q5_0x16_row((const char *)w->data + (size_t)r * rb, it->dst + (size_t)r * rb, w->cols);
    }
    w->packed = it->dst;
    gm_matrix_bind(w, m->isa);
    if (is_x8(w)) release_file_pages(m, w);
}

/* The quantized x8 copies are made after gm_model_open returns, by up to two threads, matrix by matrix in layer order.
 * Until its copy is published a matrix runs the AVX2 kernels on the file's rows (kernels/matmul.c lookup), which
 * give the x8 kernels' bits: results never depend on how far the packer got. Why in the background: the copies
 * are fresh memory, and on the VMs we measured most of the cost is the kernel zeroing it (clear_page, 54% of a
 * 6.9 s open of a 4B-shaped Q4_K_M file on Zen 4); the first token need not wait for it. */
typedef struct gm_packer gm_packer;
struct gm_packer { /* items claimed in order by up to two threads (the copies made at open use one too, joined) */
    gm_model *m;
    pack_item *items;
    int n;
    atomic_int next;  /* the next item to claim */
    atomic_bool stop; /* gm_model_free: leave the remaining items */
    pthread_t th[2];
    int n_threads;
    pthread_mutex_t mu; /* one joiner */
};

static void *packer_main(void *arg) {
    gm_packer *p = arg;
    for (;;) {
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
        const int i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= p->n) break;
        pack_item_do(p->m, &p->items[i]);
    }
    return NULL;
}

static void packer_start(gm_packer *p) {
    for (p->n_threads = 0; p->n_threads < 2 && p->n_threads < p->n; p->n_threads++)
        if (pthread_create(&p->th[p->n_threads], NULL, packer_main, p) != 0) break;
    if (p->n_threads == 0) packer_main(p); /* no thread: pack here, as before the packer */
}

static void packer_join(gm_packer *p) {
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->th[i], NULL);
    p->n_threads = 0;
}

void gm_model_wait_packed(gm_model *m) {
    if (!m || !m->packer) return;
    pthread_mutex_lock(&m->packer->mu);
    packer_join(m->packer);
    pthread_mutex_unlock(&m->packer->mu);
}

static void packer_free(gm_model *m) {
    if (!m->packer) return;
    atomic_store(&m->packer->stop, true);
    gm_model_wait_packed(m);
    pthread_mutex_destroy(&m->packer->mu);
    free(m->packer->items);
    free(m->packer);
    m->packer = NULL;
}

static size_t packed_span(const gm_matrix *w) { return (matrix_bytes(w) + 63) / 64 * 64; } /* 64-byte aligned after */

/* the layout w gets at open, 0 for none */
static int pack_layout(const gm_matrix *w, gm_repack repack, gm_isa isa) {
    if (!w->data || repack == GM_REPACK_OFF) return 0;
    if (w->type == GM_TYPE_Q5_0 && repack == GM_REPACK_Q5_0X16 && gm_isa_at_least(isa, GM_ISA_AVX512))
        return GM_KTYPE_Q5_0X16; /* asked for by name: before x8 */
    if (w->rows % 8 == 0 && gm_isa_at_least(isa, GM_ISA_AVX2) && gm_avx2_x8_tiles(w->type)) return GM_KTYPE_X8(w->type);
    return 0;
}

/* Anonymous memory for the copies, in 2 MiB pages where the kernel gives them (weights stream once per
 * token: TLB misses); its first `populate` bytes faulted in by one call rather than one fault per page while
 * copying (the rest: by the packer's writes, off the open path). */
static void *map_store(size_t bytes, size_t populate) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
#ifdef MADV_POPULATE_WRITE
    if (populate) (void)madvise(p, populate, MADV_POPULATE_WRITE);
#else
    (void)populate;
#endif
    return p;
}

/* The layer matrices' copies: which ones (packed_type), the store, the copies made now; the x8 ones are left
 * in m->packer for packer_start (after the kernels are bound). Copies made now come first in the store. */
static gm_status pack_weights(gm_model *m, gm_repack repack, gm_error *err) {
    enum { PER_LAYER = 7 };
    const size_t cap = (size_t)m->cfg.n_layers * PER_LAYER + 1;
    pack_item *now = malloc(sizeof *now * cap), *later = malloc(sizeof *later * cap);
    if (!now || !later) {
        free(now), free(later);
        return gm_fail(err, GM_ERR_NOMEM, "model: out of memory");
    }
    int n_now = 0, n_later = 0;
    size_t bytes_now = 0, total = 0;
    for (int il = 0; il < m->cfg.n_layers; il++) {
        gm_layer *L = &m->layers[il];
        gm_matrix *w[PER_LAYER] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        bool x8 = false;
        for (int i = 0; i < PER_LAYER; i++) {
            w[i]->packed_type = pack_layout(w[i], repack, m->isa); /* the copy itself is set below, once the store is mapped */
            x8 |= is_x8(w[i]);
        }
        for (int i = 0; i < PER_LAYER; i++) {
            const bool plain = x8 && !w[i]->packed_type && w[i]->data &&
                               gm_source_file_mapped(m->src, w[i]->data, matrix_bytes(w[i]));
            if (packs_later(w[i])) later[n_later++] = (pack_item){w[i], NULL};
            else if (w[i]->packed_type || plain) now[n_now++] = (pack_item){w[i], NULL}, bytes_now += packed_span(w[i]);
            else continue;
            total += packed_span(w[i]);
        }
    }
    if (total > 0 && !(m->packed_store = map_store(total, bytes_now))) {
        free(now), free(later);
        return gm_fail(err, GM_ERR_NOMEM, "model: out of memory for %zu bytes of packed weights", total);
    }
    m->packed_bytes = total;
    char *p = m->packed_store;
    for (int i = 0; i < n_now; i++) now[i].dst = p, p += packed_span(now[i].w);
    for (int i = 0; i < n_later; i++) later[i].dst = p, p += packed_span(later[i].w);
    gm_packer sync = {.m = m, .items = now, .n = n_now}; /* the same two threads, joined before open returns */
    packer_start(&sync);
    packer_join(&sync);
    free(now);
    if (n_later == 0) {
        free(later);
        return GM_OK;
    }
    if (!(m->packer = calloc(1, sizeof *m->packer))) {
        free(later);
        return gm_fail(err, GM_ERR_NOMEM, "model: out of memory");
    }
    *m->packer = (gm_packer){.m = m, .items = later, .n = n_later};
    pthread_mutex_init(&m->packer->mu, NULL);
    return GM_OK;
}

/* Kernel choice, once per matrix (after packing: a packed copy changes it). */
static void bind_kernels(gm_model *m) {
    gm_matrix_bind(&m->embd, m->isa);
    gm_matrix_bind(&m->output, m->isa);
    for (int il = 0; il < m->cfg.n_layers; il++) {
        gm_layer *L = &m->layers[il];
        gm_matrix *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
            if (w[i]->data) gm_matrix_bind(w[i], m->isa); /* Gemma 4 may omit K/V */
    }
}

/* The vocabulary travels with the weights: GGUF metadata, or the HF folder's tokenizer files. */
static gm_status load_tokenizer(gm_model *m, gm_error *err) {
    gm_status st = gm_source_is_gguf(m->src) ? gm_tokenizer_from_gguf(gm_source_gguf(m->src), &m->tok, err)
                                             : gm_tokenizer_from_hf_dir(gm_source_hf_dir(m->src), &m->tok, err);
    if (st) return gm_fail_prefix(err, "%s: tokenizer: ", gm_source_path(m->src));
    /* Every id the tokenizer can produce must have an embedding row (and a logit): the id checks
     * downstream trust n_vocab, the row count. More rows than ids is the usual padding. */
    const int32_t n_tok = gm_tokenizer_n_vocab(m->tok);
    if (n_tok > m->cfg.n_vocab)
        return gm_fail(err, GM_ERR_FORMAT, "%s: the tokenizer has %d ids but token_embd.weight has only %d rows",
                       gm_source_path(m->src), (int)n_tok, m->cfg.n_vocab);
    return GM_OK;
}

void gm_model_free(gm_model *m) {
    if (!m) return;
    packer_free(m); /* before anything it reads goes */
    gm_tokenizer_free(m->tok);
    gm_source_close(m->src);
    free(m->layers);
    free(m->f32_store);
    if (m->cfg.family && m->cfg.family->unload) m->cfg.family->unload(m);
    if (m->packed_store) munmap(m->packed_store, m->packed_bytes);
    free(m);
}

const gm_tokenizer *gm_model_tokenizer(const gm_model *m) { return m ? m->tok : NULL; }

gm_status gm_model_open(const char *path, const gm_model_options *opt, gm_model **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_model_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return gm_fail(err, GM_ERR_ARG, "gm_model_open: empty model path");
    if (opt && !gm_isa_valid(opt->isa))
        return gm_fail(err, GM_ERR_ARG, "gm_model_open: unknown ISA level %d", (int)opt->isa);
    gm_model *m = calloc(1, sizeof *m);
    if (!m) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", path);
    m->isa = gm_isa_resolve(opt ? opt->isa : GM_ISA_AUTO); /* before the families' loaders bind their matrices */
    gm_status st = gm_source_open(path, opt ? opt->keep_mtp : false, &m->src, err);
    if (!st) st = gm_config_load(m->src, &m->cfg, err); /* checked there, against core/limits.h */
    if (!st) st = load_weights(m, err);
    if (!st) st = pack_weights(m, opt ? opt->repack : GM_REPACK_DEFAULT, err);
    if (!st) bind_kernels(m);
    if (!st) st = load_tokenizer(m, err);
    if (!st && m->packer) packer_start(m->packer); /* after the binding: the packer binds its matrices again */
    if (st) {
        gm_model_free(m);
        return st;
    }
    *out = m;
    return GM_OK;
}

const gm_config *gm_model_config(const gm_model *m) { return m ? &m->cfg : NULL; }

gm_isa gm_model_isa(const gm_model *m) { return m ? m->isa : GM_ISA_AUTO; }
