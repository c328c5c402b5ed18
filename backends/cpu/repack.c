/* backends/cpu/repack.c — the CPU backend's copies of the layer matrices, made for the kernels of its level
 * (repack.h; the layouts: kernels/pack.h). The file bytes stay mapped for the other levels, the other backends
 * and every other reader; the model's views keep pointing at them.
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
#include "backends/cpu/repack.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/pack.h"
#include "quant/quant.h"

enum { PER_LAYER = 7 }; /* q, k, v, o, gate, up, down */

/* a matrix to copy: packed (packed_type set), or moved whole into anonymous memory (dst) */
typedef struct {
    gm_mm_weight *w;
    char *dst;
} pack_item;

typedef struct gm_packer gm_packer;

struct gm_cpu_weights {
    const gm_model *m;
    gm_isa isa;
    int refs;          /* under m->share->mu */
    int n;             /* the model's matrix ids, 1 .. n */
    gm_mm_weight *w;   /* by id: the layer matrices'; w[id].m.data NULL for the others (they run as they are) */
    void *store;       /* every copy, in one anonymous map */
    size_t store_bytes;
    gm_packer *packer; /* makes the x8 copies after acquire; NULL when there are none */
};

static size_t matrix_bytes(const gm_matrix *w) { return gm_row_bytes(w->type, w->cols) * (size_t)w->rows; }

/* Drops w's file pages (those wholly inside it) from the resident set: while the packed copy's level is
 * active nothing reads them; another level, backend or reader reads them back from the file. Only for the source's
 * own file map (a caller's buffer would lose its bytes). */
static void release_file_pages(const gm_model *m, const gm_matrix *w) {
    const size_t bytes = matrix_bytes(w), pg = (size_t)sysconf(_SC_PAGESIZE);
    if (!gm_source_file_mapped(m->src, w->data, bytes)) return;
    const uintptr_t b = ((uintptr_t)w->data + pg - 1) / pg * pg, e = ((uintptr_t)w->data + bytes) / pg * pg;
    if (e > b) (void)madvise((void *)b, e - b, MADV_DONTNEED);
}

static bool is_x8(const gm_mm_weight *w) { return w->packed_type == GM_KTYPE_X8(w->m.type); }

static void pack_x8(const gm_matrix *w, char *dst) {
    if (w->type == GM_TYPE_F16 || w->type == GM_TYPE_BF16) gm_pack_x8(w->data, dst, w->rows, w->cols);
    else gm_pack_qx8(w->type, w->data, dst, w->rows, w->cols);
}

/* x8 copies made after acquire returns: those whose kernels on the file's rows give the same bits (the
 * quantized types; F16x8 / BF16x8 sum in another order than the F16 / BF16 kernels on the file's rows) */
static bool packs_later(const gm_mm_weight *w) { return is_x8(w) && gm_avx2_qx8_tiles(w->m.type) != NULL; }

/* One copy: a plain move, or a packed layout, published (set, then the kernels re-bound: release, so a reader
 * that sees the packed kernels sees the copy). The file's pages go where nothing reads them any more (the
 * Q5_0x16 kernels still read the file's rows); readers still on them fault them back in: the same bytes. */
static void pack_item_do(const gm_cpu_weights *s, const pack_item *it) {
    gm_mm_weight *w = it->w;
    if (!w->packed_type) {
        memcpy(it->dst, w->m.data, matrix_bytes(&w->m));
        release_file_pages(s->m, &w->m);
        w->m.data = it->dst; /* the same bytes (made before any kernel runs: acquire has not returned) */
        return;
    }
    if (is_x8(w)) {
        pack_x8(&w->m, it->dst);
    } else {
        const size_t rb = gm_row_bytes(w->m.type, w->m.cols);
        for (int64_t r = 0; r < w->m.rows; r++)
            gm_pack_q5_0x16_row((const char *)w->m.data + (size_t)r * rb, it->dst + (size_t)r * rb, w->m.cols);
    }
    w->packed = it->dst;
    gm_mm_bind(w, s->isa);
    if (is_x8(w)) release_file_pages(s->m, &w->m);
}

/* The quantized x8 copies are made after the set is acquired, by up to two threads, matrix by matrix in layer
 * order. Until its copy is published a matrix runs the AVX2 kernels on the file's rows (kernels/matmul.c), which
 * give the x8 kernels' bits: results never depend on how far the packer got. Why in the background: the copies
 * are fresh memory, and on the VMs we measured most of the cost is the kernel zeroing it (clear_page, 54% of a
 * 6.9 s open of a 4B-shaped Q4_K_M file on Zen 4); the first token need not wait for it. */
struct gm_packer { /* items claimed in order by up to two threads (the copies made at acquire use one too, joined) */
    const gm_cpu_weights *s;
    pack_item *items;
    int n;
    atomic_int next;  /* the next item to claim */
    atomic_bool stop; /* the set is freed: leave the remaining items */
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
        pack_item_do(p->s, &p->items[i]);
    }
    return NULL;
}

static void packer_start(gm_packer *p) {
    for (p->n_threads = 0; p->n_threads < 2 && p->n_threads < p->n; p->n_threads++)
        if (pthread_create(&p->th[p->n_threads], NULL, packer_main, p) != 0) break;
    if (p->n_threads == 0) packer_main(p); /* no thread: pack here */
}

static void packer_join(gm_packer *p) {
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->th[i], NULL);
    p->n_threads = 0;
}

void gm_cpu_weights_wait(gm_cpu_weights *s) {
    if (!s || !s->packer) return;
    pthread_mutex_lock(&s->packer->mu);
    packer_join(s->packer);
    pthread_mutex_unlock(&s->packer->mu);
}

static void packer_free(gm_cpu_weights *s) {
    if (!s->packer) return;
    atomic_store(&s->packer->stop, true);
    gm_cpu_weights_wait(s);
    pthread_mutex_destroy(&s->packer->mu);
    free(s->packer->items);
    free(s->packer);
    s->packer = NULL;
}

static size_t packed_span(const gm_matrix *w) { return (matrix_bytes(w) + 63) / 64 * 64; } /* 64-byte aligned after */

/* the layout w gets, 0 for none */
static int pack_layout(const gm_matrix *w, gm_repack repack, gm_isa isa) {
    if (!w->data || repack == GM_REPACK_OFF) return 0;
    if (w->type == GM_TYPE_Q5_0 && repack == GM_REPACK_Q5_0X16 && gm_isa_at_least(isa, GM_ISA_AVX512))
        return GM_KTYPE_Q5_0X16; /* asked for by name: before x8 */
    if (w->rows % 8 == 0 && gm_isa_at_least(isa, GM_ISA_AVX2) && gm_avx2_x8_tiles(w->type)) return GM_KTYPE_X8(w->type);
    return 0;
}

/* Anonymous memory for the copies, in 2 MiB pages where the kernel gives them (weights stream once per
 * token: TLB misses); its first `populate` bytes faulted in by one call rather than one fault per page while
 * copying (the rest: by the packer's writes, off the caller's path). */
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

/* The records of layer il's matrices (their views, the layout each gets) into s->w; the items to copy into now /
 * later, their bytes added up. */
typedef struct {
    pack_item *now, *later;
    int n_now, n_later;
    size_t bytes_now, total;
} pack_plan;

static gm_status plan_layer(gm_cpu_weights *s, int il, pack_plan *p, gm_error *err) {
    const gm_layer *L = &s->m->layers[il];
    const gm_matrix *v[PER_LAYER] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
    gm_mm_weight *w[PER_LAYER] = {0};
    bool x8 = false;
    for (int i = 0; i < PER_LAYER; i++) {
        if (!v[i]->data) continue; /* Gemma 4 may omit K/V */
        if (v[i]->id <= 0 || v[i]->id > s->n)
            return gm_fail(err, GM_ERR_STATE, "cpu backend: layer %d matrix %d has no id", il, i);
        w[i] = &s->w[v[i]->id];
        *w[i] = (gm_mm_weight){.m = *v[i], .packed_type = pack_layout(v[i], s->m->repack, s->isa)};
        x8 |= is_x8(w[i]);
    }
    for (int i = 0; i < PER_LAYER; i++) {
        if (!w[i]) continue;
        const bool plain = x8 && !w[i]->packed_type && gm_source_file_mapped(s->m->src, v[i]->data, matrix_bytes(v[i]));
        if (packs_later(w[i])) p->later[p->n_later++] = (pack_item){w[i], NULL};
        else if (w[i]->packed_type || plain)
            p->now[p->n_now++] = (pack_item){w[i], NULL}, p->bytes_now += packed_span(v[i]);
        else continue;
        p->total += packed_span(v[i]);
    }
    return GM_OK;
}

/* The copies: which ones, the store, the copies made now (first in the store); the x8 ones are left in s->packer
 * for packer_start (after the kernels are bound). */
static gm_status make_copies(gm_cpu_weights *s, gm_error *err) {
    const size_t cap = (size_t)s->m->cfg.n_layers * PER_LAYER + 1;
    pack_plan p = {.now = malloc(sizeof *p.now * cap), .later = malloc(sizeof *p.later * cap)};
    gm_status st = p.now && p.later ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
    for (int il = 0; !st && il < s->m->cfg.n_layers; il++) st = plan_layer(s, il, &p, err);
    if (!st && p.total > 0 && !(s->store = map_store(p.total, p.bytes_now)))
        st = gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory for %zu bytes of packed weights", p.total);
    if (st) {
        free(p.now), free(p.later);
        return st;
    }
    s->store_bytes = p.total;
    char *q = s->store;
    for (int i = 0; i < p.n_now; i++) p.now[i].dst = q, q += packed_span(&p.now[i].w->m);
    for (int i = 0; i < p.n_later; i++) p.later[i].dst = q, q += packed_span(&p.later[i].w->m);
    gm_packer sync = {.s = s, .items = p.now, .n = p.n_now}; /* the same two threads, joined before acquire returns */
    packer_start(&sync);
    packer_join(&sync);
    free(p.now);
    if (p.n_later == 0) {
        free(p.later);
        return GM_OK;
    }
    if (!(s->packer = calloc(1, sizeof *s->packer))) {
        free(p.later);
        return gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
    }
    *s->packer = (gm_packer){.s = s, .items = p.later, .n = p.n_later};
    pthread_mutex_init(&s->packer->mu, NULL);
    return GM_OK;
}

static void weights_free(gm_cpu_weights *s) {
    packer_free(s); /* before anything it writes goes */
    if (s->store) munmap(s->store, s->store_bytes);
    free(s->w);
    free(s);
}

static gm_status weights_new(const gm_model *m, gm_isa isa, gm_cpu_weights **out, gm_error *err) {
    gm_cpu_weights *s = calloc(1, sizeof *s);
    if (!s) return gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
    *s = (gm_cpu_weights){.m = m, .isa = isa, .refs = 1, .n = m->n_matrices};
    s->w = calloc((size_t)s->n + 1, sizeof *s->w);
    gm_status st = s->w ? make_copies(s, err) : gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
    if (st) {
        weights_free(s);
        return st;
    }
    for (int id = 1; id <= s->n; id++) /* kernel choice once per matrix, after the copies made now */
        if (s->w[id].m.data) gm_mm_bind(&s->w[id], isa);
    if (s->packer) packer_start(s->packer); /* after the binding: the packer binds its matrices again */
    *out = s;
    return GM_OK;
}

gm_status gm_cpu_weights_acquire(const gm_model *m, gm_isa isa, gm_cpu_weights **out, gm_error *err) {
    *out = NULL;
    isa = gm_isa_resolve(isa);
    gm_backend_share *sh = m->share;
    gm_status st = GM_OK;
    pthread_mutex_lock(&sh->mu);
    gm_cpu_weights *s = sh->cpu_weights;
    if (s && s->isa != isa)
        st = gm_fail(err, GM_ERR_ARG, "cpu backend: level %s asked, but the model's CPU weights are made for %s",
                     gm_isa_name(isa), gm_isa_name(s->isa));
    else if (s) s->refs++;
    else if (!(st = weights_new(m, isa, &s, err))) sh->cpu_weights = s;
    pthread_mutex_unlock(&sh->mu);
    if (!st) *out = s;
    return st;
}

void gm_cpu_weights_release(gm_cpu_weights *s) {
    if (!s) return;
    gm_backend_share *sh = s->m->share;
    pthread_mutex_lock(&sh->mu);
    const bool last = --s->refs == 0;
    if (last) sh->cpu_weights = NULL;
    pthread_mutex_unlock(&sh->mu);
    if (last) weights_free(s);
}

const gm_mm_weight *gm_cpu_weights_find(const gm_cpu_weights *s, const gm_matrix *W) {
    if (!s || W->id <= 0 || W->id > s->n) return NULL;
    const gm_mm_weight *w = &s->w[W->id];
    return w->m.data ? w : NULL;
}
