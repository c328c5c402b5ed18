/* kernels/matmul.c — y = x W^T over weights of any supported type, read in place. Activations are
 * quantized once per call and per token, then output rows are split across the pool. The kernels of a
 * weight come from its record (gm_mm_kernel: a table indexed by ISA, layout and type, bound into its
 * gm_mm_weight); every path of one ISA computes a (row, token) output with the same operations in the same order,
 * so the result depends neither on the row split nor on the other tokens of the call. */
#include "kernels/matmul.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/pack.h"
#include "quant/quant.h"

typedef struct {
    const gm_matrix *W;
    const gm_type_traits *wt;
    size_t w_stride;
    const char *act; /* n_tok activation rows in vec_dot_type */
    size_t a_stride;
    int64_t n_tok;
    float *y;
    const float *x; /* for the quantize task */
    const gm_type_traits *at;
    gm_vec_dot_fn vec_dot;    /* the ISA's kernel for W's type */
    gm_quant_row_fn quant;    /* the ISA's quantizer for the activation type */
    /* AVX-512 path */
    size_t tok_bytes, rows_bytes;
    char *rows_scratch; /* rows_bytes per pool thread */
    gm_avx2_tiles_fn tiles2;
    /* AVX2, a few tokens: the kernel and the tokens put for it (NULL: tiles2 over act) */
    gm_avx2_mtok_fn mtok2;
    char *toks;
} mm_job;

static gm_status scratch_reserve(gm_matmul_scratch *s, size_t bytes);

/* ---- the kernel table: [ISA][layout][type], filled once */

enum {
    TYPE_SLOTS = 32,
    FILE_ROWS = 0,  /* the file's layout */
    X8,             /* an x8 copy (kernels/pack.h) */
    X8_PENDING,     /* an x8 copy being made (backends/cpu/repack.c): the file's rows, the x8 kernels' bits */
    Q5_0X16,        /* the Q5_0x16 copy (type Q5_0 only) */
    N_LAYOUTS,
    N_ISA = GM_ISA_LEVELS /* row GM_ISA_AUTO unused */
};

static gm_mm_kernel table[N_ISA][N_LAYOUTS][TYPE_SLOTS];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

gm_avx2_tiles_fn gm_avx2_x8_tiles(int type) {
    return gm_avx2_f16x8_tiles(type) ? gm_avx2_f16x8_tiles(type) : gm_avx2_qx8_tiles(type);
}

static gm_mm_kernel resolve(gm_isa isa, int type, bool packed) {
    gm_mm_kernel k = {.isa = (int)isa, .type = type};
    const gm_type_traits *wt = gm_type_traits_of(type);
    const gm_type_traits *at = wt ? gm_type_traits_of(wt->vec_dot_type) : NULL;
    if (!wt || !wt->vec_dot || !at || !at->quant_row) return k; /* no kernels: GM_ERR_UNSUPPORTED */
    k.act_type = at->type;
    k.vec_dot = wt->vec_dot;
    k.quant = at->quant_row;
    if (gm_isa_at_least(isa, GM_ISA_NEON)) { /* one (row, token) at a time, the reference's activation bytes */
        gm_vec_dot_fn nd = isa == GM_ISA_NEON_DOT ? gm_neon_dot_vec_dot(type) : gm_neon_vec_dot(type);
        if (nd) k.vec_dot = nd;
    }
    if (gm_isa_at_least(isa, GM_ISA_AVX2)) {
        if (gm_avx2_vec_dot(type)) k.vec_dot = gm_avx2_vec_dot(type);
        if (gm_avx2_quant_act(at->type)) k.quant = gm_avx2_quant_act(at->type); /* the reference's bytes exactly */
        k.tiles2 = gm_avx2_tiles(type);
    }
    if (gm_isa_at_least(isa, GM_ISA_AVX512)) {
        k.fused = gm_avx512_fused(type); /* reads the file layout */
        k.packed = packed;               /* the tiles read the packed copy */
        k.tiles = gm_avx512_supports(packed ? GM_KTYPE_Q5_0X16 : type);
    }
    return k;
}

static void table_init(void) {
    for (int isa = GM_ISA_SCALAR; isa < N_ISA; isa++) {
        gm_mm_kernel(*t)[TYPE_SLOTS] = table[isa];
        for (int ty = 0; ty < TYPE_SLOTS; ty++) {
            t[FILE_ROWS][ty] = resolve((gm_isa)isa, ty, false);
            /* the x8 copies serve the AVX2 level (and AVX-512, below); the others read the file's rows */
            t[X8][ty] = t[X8_PENDING][ty] = t[Q5_0X16][ty] = t[FILE_ROWS][ty];
            /* a few tokens: the AVX2 level's own kernels, where tiles2 is the quantized types' (the same bits) */
            const gm_avx2_tiles_fn t2 = t[FILE_ROWS][ty].tiles2;
            const bool q = isa == GM_ISA_AVX2 && t2 && t2 == gm_avx2_qtiles(ty);
            t[FILE_ROWS][ty].mtok2 = q ? gm_avx2_mtok(ty) : NULL;
            if (isa == GM_ISA_AVX2 && gm_avx2_x8_tiles(ty) && t[FILE_ROWS][ty].tiles2) {
                t[X8][ty].tiles2 = gm_avx2_x8_tiles(ty);
                t[X8][ty].packed = true;
                t[X8][ty].mtok2 = q ? gm_avx2_x8_mtok(ty) : NULL;
            }
        }
        /* the packed Q5_0 copy serves the AVX-512 kernels only; lower levels read the file's Q5_0 */
        t[Q5_0X16][GM_TYPE_Q5_0] = resolve((gm_isa)isa, GM_TYPE_Q5_0, gm_isa_at_least((gm_isa)isa, GM_ISA_AVX512));
    }
    /* At the AVX-512 level an x8 copy runs the AVX2 kernels: rows in lanes (one convert and one fmadd per 8 rows
     * and 32 codes) beat the AVX-512 tiles' codes in lanes (a convert, a multiply and an fmadd per row, token and
     * 64 codes) on Zen 4 (docs/performance.md). The record keeps isa = AVX2: those matrices give the AVX2 level's
     * bits. A pending quantized copy runs the file-row kernels with those bits at both levels. */
    gm_mm_kernel(*a2)[TYPE_SLOTS] = table[GM_ISA_AVX2], (*a5)[TYPE_SLOTS] = table[GM_ISA_AVX512];
    for (int ty = 0; ty < TYPE_SLOTS; ty++) {
        if (gm_avx2_qx8_tiles(ty)) a2[X8_PENDING][ty] = a5[X8_PENDING][ty] = a2[FILE_ROWS][ty];
        if (a2[X8][ty].packed) a5[X8][ty] = a2[X8][ty];
        /* the prefill tiles with VNNI, where this build has them (this row serves AVX-512 CPUs only): the same bits */
        if (gm_vnni_qx8_tiles(ty) && a5[X8][ty].packed) a5[X8][ty].tiles2 = gm_vnni_qx8_tiles(ty);
        if (gm_vnni_qtiles(ty) && gm_avx2_qx8_tiles(ty) && a5[X8_PENDING][ty].tiles2 == gm_avx2_qtiles(ty))
            a5[X8_PENDING][ty].tiles2 = gm_vnni_qtiles(ty);
    }
}

/* the layout W's kernels read: its copy's once the copy is there */
static int layout_of(const gm_mm_weight *W) {
    if (W->packed_type == GM_KTYPE_X8(W->m.type)) return W->packed ? X8 : X8_PENDING;
    if (W->packed_type == GM_KTYPE_Q5_0X16 && W->packed) return Q5_0X16;
    return FILE_ROWS;
}

static const gm_mm_kernel *lookup(const gm_mm_weight *W, gm_isa isa) {
    pthread_once(&table_once, table_init);
    if (W->m.type < 0 || W->m.type >= TYPE_SLOTS) {
        static const gm_mm_kernel none = {0};
        return &none;
    }
    return &table[isa][layout_of(W)][W->m.type];
}

void gm_mm_bind(gm_mm_weight *W, gm_isa isa) {
    atomic_store_explicit(&W->kern, lookup(W, gm_isa_resolve(isa)), memory_order_release);
}

gm_mm_weight gm_mm_view(const gm_matrix *M, gm_isa isa) {
    gm_mm_weight w = {.m = *M};
    gm_mm_bind(&w, isa);
    return w;
}

const gm_mm_kernel *gm_mm_kernel_of(const gm_mm_weight *W) {
    const gm_mm_kernel *k = atomic_load_explicit(&W->kern, memory_order_acquire);
    return k ? k : lookup(W, gm_isa_supported());
}

/* W as the tiles see it: its packed copy where the kernel reads one (k, loaded before: its packed flag is set
 * only once W->packed is) */
static gm_matrix tile_view(const gm_mm_weight *W, const gm_mm_kernel *k) {
    gm_matrix v = {.type = W->m.type, .rows = W->m.rows, .cols = W->m.cols, .data = W->m.data};
    if (k->packed) v.data = W->packed, v.type = W->packed_type;
    return v;
}

/* rows [r0, r1) x every token; the weight row stays hot in L1 while the tokens stream by */
static void mm_rows_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    const char *w = (const char *)j->W->data;
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = w + (size_t)r * j->w_stride;
        for (int64_t t = 0; t < j->n_tok; t++)
            j->vec_dot(j->W->cols, &j->y[t * j->W->rows + r], wr, j->act + (size_t)t * j->a_stride);
    }
}

/* AVX2: rows [r0, r1) x every token (the kernels block rows and tokens for the caches themselves) */
static void avx2_tiles(const mm_job *j, int64_t r0, int64_t r1) {
    const char *w = (const char *)j->W->data + (size_t)r0 * j->w_stride;
    if (j->toks) j->mtok2(j->W->cols, w, j->w_stride, r1 - r0, j->toks, j->n_tok, j->y + r0, j->W->rows);
    else j->tiles2(j->W->cols, w, j->w_stride, r1 - r0, j->act, j->a_stride, j->n_tok, j->y + r0, j->W->rows);
}
static void avx2_tiles_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    avx2_tiles(ctx, r0, r1);
}

/* the same over groups of GM_AVX2_TILE_ROWS rows (prefill) */
static void avx2_groups_task(void *ctx, int64_t g0, int64_t g1, int thread) {
    const mm_job *j = ctx;
    const int64_t r1 = g1 * GM_AVX2_TILE_ROWS < j->W->rows ? g1 * GM_AVX2_TILE_ROWS : j->W->rows;
    avx2_tiles_task(ctx, g0 * GM_AVX2_TILE_ROWS, r1, thread);
}

static void mm_quant_task(void *ctx, int64_t t0, int64_t t1, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    for (int64_t t = t0; t < t1; t++) {
        char *a = (char *)j->act + (size_t)t * j->a_stride;
        j->quant(j->x + t * j->W->cols, a, j->W->cols);
        if (j->toks) gm_avx2_mtok_put(j->at->type, j->W->cols, a, t, j->n_tok, j->toks);
    }
}

/* AVX2: bytes of n_tok quantized tokens (64-byte multiple), then, for the few-token kernels, the bytes they put */
static size_t act_bytes(size_t a_stride, int64_t n_tok) { return ((size_t)n_tok * a_stride + 63) / 64 * 64; }
static size_t mtok_bytes(const gm_mm_kernel *k, int64_t cols, int64_t n_tok) {
    return k->mtok2 && n_tok >= 2 && n_tok <= GM_AVX2_MTOK_MAX ? gm_avx2_mtok_bytes(k->act_type, cols, n_tok) : 0;
}

/* AVX-512: tokens are prepared into the unpacked layout of kernels/gemm.h */
static void avx512_prep_task(void *ctx, int64_t t0, int64_t t1, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    for (int64_t t = t0; t < t1; t++)
        gm_avx512_prep(j->W->type, j->x + t * j->W->cols, j->W->cols, (char *)j->act + (size_t)t * j->tok_bytes);
}

/* Decode row chunks where decode_rows (below) does not split by owned slices: at most 1024 rows
 * for the LM head (0.7 MB of Q8_0: the thread finishing last waits ~50 us, not a 22 MB chunk);
 * for layer matrices with more than STEAL_MAX_OWNERS threads, one contiguous slice per thread
 * (one long stream each instead of restarting the prefetch streams on every claim). */
static int64_t decode_chunk(const gm_pool *pool, int64_t rows) {
    const int64_t per = (rows <= 8192 ? 1 : 8) * (int64_t)gm_pool_size(pool);
    int64_t c = (rows + per - 1) / per;
    c = c < 16 ? 16 : c > 1024 ? 1024 : c;
    return (c + 15) / 16 * 16;
}

/* Decode split of a layer matrix: thread t owns slice t of the rows and walks it front to back in
 * batches (one long stream, as with a plain split); a thread done with its own slice takes batches
 * from the back of the others'. A plain split left one thread idle ~10 us of a ~67 us q/k/v or
 * gate/up call on average (the two cores do not stream equally fast). Each slice's (next, end) sits
 * in one 64-bit word on its own cache line: the owner's claims do not contend until a thief comes.
 * Every row is computed by the same code whichever thread takes it: results do not change. */
enum { STEAL_BATCH = 16, STEAL_MAX_OWNERS = 8 };

typedef struct {
    _Alignas(64) atomic_uint_least64_t w; /* next << 32 | end */
} owned_slice;

typedef struct {
    owned_slice s[STEAL_MAX_OWNERS];
    int n;
    gm_task_fn rows; /* (ctx, r0, r1, thread) over a batch */
    void *ctx;
} steal_job;

static bool claim_front(owned_slice *o, int64_t *b, int64_t *e) {
    uint64_t w = atomic_load_explicit(&o->w, memory_order_relaxed);
    for (;;) {
        const uint32_t next = (uint32_t)(w >> 32), end = (uint32_t)w;
        if (next >= end) return false;
        const uint32_t nn = end - next > STEAL_BATCH ? next + STEAL_BATCH : end;
        if (atomic_compare_exchange_weak_explicit(&o->w, &w, (uint64_t)nn << 32 | end, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *b = next, *e = nn;
            return true;
        }
    }
}

static bool claim_back(owned_slice *o, int64_t *b, int64_t *e) {
    uint64_t w = atomic_load_explicit(&o->w, memory_order_relaxed);
    for (;;) {
        const uint32_t next = (uint32_t)(w >> 32), end = (uint32_t)w;
        if (next >= end) return false;
        const uint32_t ne = end - next > STEAL_BATCH ? end - STEAL_BATCH : next;
        if (atomic_compare_exchange_weak_explicit(&o->w, &w, (uint64_t)next << 32 | ne, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *b = ne, *e = end;
            return true;
        }
    }
}

/* pool item = one owner's slice (so a late worker's slice is taken by whoever is free) */
static void steal_task(void *ctx, int64_t i0, int64_t i1, int thread) {
    steal_job *j = ctx;
    int64_t b, e;
    for (int64_t i = i0; i < i1; i++) {
        while (claim_front(&j->s[i], &b, &e)) j->rows(j->ctx, b, e, thread);
        for (int k = 1; k < j->n; k++)
            while (claim_back(&j->s[(i + k) % j->n], &b, &e)) j->rows(j->ctx, b, e, thread);
    }
}

/* rows [0, n) through fn: stealing slices for layer-sized matrices, claimed chunks otherwise */
static void decode_rows(gm_pool *pool, int64_t n, gm_task_fn fn, void *ctx) {
    const int nt = gm_pool_size(pool);
    if (nt < 2 || nt > STEAL_MAX_OWNERS || n > 8192) {
        gm_pool_parallel_for_chunk(pool, n, decode_chunk(pool, n), fn, ctx);
        return;
    }
    steal_job j = {.n = nt, .rows = fn, .ctx = ctx};
    /* slices and batches start at multiples of GM_AVX2_TILE_ROWS (the AVX2 kernels' row groups) */
    int64_t cut[STEAL_MAX_OWNERS + 1];
    for (int t = 0; t <= nt; t++) cut[t] = t == nt ? n : n * t / nt / GM_AVX2_TILE_ROWS * GM_AVX2_TILE_ROWS;
    for (int t = 0; t < nt; t++) atomic_init(&j.s[t].w, (uint64_t)cut[t] << 32 | (uint64_t)cut[t + 1]);
    gm_pool_parallel_for_chunk(pool, nt, 1, steal_task, &j);
}

/* AVX-512, a few tokens: every weight row decoded once into registers for all of them */
typedef struct {
    gm_fused_fn fn;
    const gm_matrix *W;
    size_t w_stride, group_bytes;
    const void *groups;
    int64_t n_tok;
    float *y;
} fused_job;

static void fused_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const fused_job *j = ctx;
    j->fn(j->W->cols, j->W->data, j->w_stride, r0, r1, j->groups, j->group_bytes, j->n_tok, j->y, j->W->rows);
}

/* Bytes of n_tok tokens prepared for the fused kernels: the groups, then one token of scratch. */
static size_t fused_bytes(int type, int64_t cols, int64_t n_tok, size_t *group_bytes) {
    *group_bytes = (gm_avx512_group_bytes(type, cols, GM_FUSED_GROUP) + 63) / 64 * 64;
    return (size_t)((n_tok + GM_FUSED_GROUP - 1) / GM_FUSED_GROUP) * *group_bytes +
           (size_t)GM_FUSED_GROUP * gm_avx512_tok_bytes(type, cols);
}

/* x's n_tok tokens quantized (gm_avx512_prep) and interleaved by groups into out (a few tokens: not worth
 * a pool round trip) */
static void prep_groups(int type, const float *x, int64_t cols, int64_t n_tok, char *out, size_t group_bytes) {
    const size_t tb = gm_avx512_tok_bytes(type, cols);
    const int64_t n_groups = (n_tok + GM_FUSED_GROUP - 1) / GM_FUSED_GROUP;
    char *tmp = out + (size_t)n_groups * group_bytes;
    for (int64_t g = 0; g < n_groups; g++) {
        const int T = n_tok - g * GM_FUSED_GROUP < GM_FUSED_GROUP ? (int)(n_tok - g * GM_FUSED_GROUP) : GM_FUSED_GROUP;
        for (int k = 0; k < T; k++) gm_avx512_prep(type, x + (g * GM_FUSED_GROUP + k) * cols, cols, tmp + (size_t)k * tb);
        gm_avx512_group(type, cols, tmp, tb, T, out + (size_t)g * group_bytes);
    }
}

static gm_status matmul_fused(const gm_matrix *K, gm_fused_fn fn, const float *x, int64_t n_tok, float *y,
                              gm_pool *pool, gm_matmul_scratch *scratch) {
    size_t gb;
    gm_status st = scratch_reserve(scratch, fused_bytes(K->type, K->cols, n_tok, &gb));
    if (st != GM_OK) return st;
    prep_groups(K->type, x, K->cols, n_tok, scratch->buf, gb);
    fused_job j = {fn, K, gm_row_bytes(K->type & 0xFF, K->cols), gb, scratch->buf, n_tok, y};
    decode_rows(pool, K->rows, fused_task, &j);
    return GM_OK;
}

/* ---- several matrices over one input (q/k/v, gate/up): one pool call for all their rows */

typedef struct {
    int count;
    int64_t cols, n_tok, row0[GM_MM_MULTI_MAX + 1]; /* row0[i]: first global row of matrix i */
    gm_matrix W[GM_MM_MULTI_MAX];                   /* as the kernels see them (packed copies where present) */
    size_t stride[GM_MM_MULTI_MAX], group_bytes[GM_MM_MULTI_MAX];
    float *y[GM_MM_MULTI_MAX];
    gm_fused_fn fn[GM_MM_MULTI_MAX];
    const char *tok[GM_MM_MULTI_MAX];
} multi_job;

/* rows [g0, g1) of the concatenated matrices within matrix i (row0[i] .. row0[i + 1]) as its own rows [*b, *e) */
static bool rows_of(const int64_t *row0, int i, int64_t g0, int64_t g1, int64_t *b, int64_t *e) {
    *b = (g0 > row0[i] ? g0 : row0[i]) - row0[i];
    *e = (g1 < row0[i + 1] ? g1 : row0[i + 1]) - row0[i];
    return *b < *e;
}

static void multi_rows_task(void *ctx, int64_t g0, int64_t g1, int thread) {
    (void)thread;
    const multi_job *j = ctx;
    int64_t b, e;
    for (int i = 0; i < j->count; i++) {
        if (rows_of(j->row0, i, g0, g1, &b, &e))
            j->fn[i](j->cols, j->W[i].data, j->stride[i], b, e, j->tok[i], j->group_bytes[i], j->n_tok, j->y[i], j->W[i].rows);
    }
}

/* AVX2, a few tokens: the matrices' row groups in one pool call over activations quantized once */
typedef struct {
    int count;
    int64_t row0[GM_MM_MULTI_MAX + 1];
    mm_job j[GM_MM_MULTI_MAX];
} multi2_job;

static void multi2_rows_task(void *ctx, int64_t g0, int64_t g1, int thread) {
    (void)thread;
    const multi2_job *m = ctx;
    int64_t b, e;
    for (int i = 0; i < m->count; i++)
        if (rows_of(m->row0, i, g0, g1, &b, &e)) avx2_tiles(&m->j[i], b, e);
}

/* One pool call for count matrices with the same columns and activation type, every row count a multiple of
 * the AVX2 row groups (a group never straddles two matrices); false where that does not hold. The same
 * kernels and activation bytes as separate gm_mm calls: the same results. */
static bool matmul_multi_avx2(const gm_mm_weight *const *W, float *const *y, int count, const float *x, int64_t n_tok,
                              gm_pool *pool, gm_matmul_scratch *scratch, gm_status *st) {
    multi2_job m = {.count = count};
    const gm_mm_kernel *k[GM_MM_MULTI_MAX], *k0 = gm_mm_kernel_of(W[0]);
    for (int i = 0; i < count; i++) {
        k[i] = gm_mm_kernel_of(W[i]);
        if (k[i]->isa != GM_ISA_AVX2 || !k[i]->tiles2 || k[i]->act_type != k0->act_type || k[i]->quant != k0->quant ||
            W[i]->m.cols != W[0]->m.cols || W[i]->m.rows % GM_AVX2_TILE_ROWS || W[i]->m.rows == 0)
            return false;
        m.row0[i + 1] = m.row0[i] + W[i]->m.rows;
    }
    const gm_type_traits *at = gm_type_traits_of(k0->act_type);
    const size_t a_stride = gm_row_bytes(at->type, W[0]->m.cols);
    if (a_stride == 0) return false;
    const char *act = (const char *)x;
    char *toks = NULL;
    gm_matrix V[GM_MM_MULTI_MAX];
    if (at->type != GM_TYPE_F32) {
        size_t tb = 0; /* the few-token kernels' tokens: one copy for every matrix that has them (same bytes) */
        for (int i = 0; i < count && !tb; i++) tb = mtok_bytes(k[i], W[0]->m.cols, n_tok);
        if ((*st = scratch_reserve(scratch, act_bytes(a_stride, n_tok) + tb)) != GM_OK) return true;
        toks = tb ? (char *)scratch->buf + act_bytes(a_stride, n_tok) : NULL;
        for (int64_t t = 0; t < n_tok; t++) {
            char *a = (char *)scratch->buf + (size_t)t * a_stride;
            k0->quant(x + t * W[0]->m.cols, a, W[0]->m.cols);
            if (toks) gm_avx2_mtok_put(at->type, W[0]->m.cols, a, t, n_tok, toks);
        }
        act = scratch->buf;
    }
    for (int i = 0; i < count; i++) {
        V[i] = tile_view(W[i], k[i]);
        m.j[i] = (mm_job){.W = &V[i], .w_stride = gm_row_bytes(W[i]->m.type, W[i]->m.cols), .act = act,
                          .a_stride = a_stride, .n_tok = n_tok, .y = y[i], .tiles2 = k[i]->tiles2, .mtok2 = k[i]->mtok2,
                          .toks = mtok_bytes(k[i], W[0]->m.cols, n_tok) ? toks : NULL};
    }
    decode_rows(pool, m.row0[count], multi2_rows_task, &m);
    *st = GM_OK;
    return true;
}

gm_status gm_mm_multi(const gm_mm_weight *const *W, float *const *y, int count, const float *x, int64_t n_tok,
                      gm_pool *pool, gm_matmul_scratch *scratch) {
    gm_status st2;
    if (count >= 2 && count <= GM_MM_MULTI_MAX && n_tok >= 1 && n_tok <= GM_FUSED_MAX_TOKENS &&
        matmul_multi_avx2(W, y, count, x, n_tok, pool, scratch, &st2))
        return st2;
    bool fused = count >= 1 && count <= GM_MM_MULTI_MAX && n_tok >= 1 && n_tok <= GM_FUSED_MAX_TOKENS;
    multi_job j = {.count = count, .cols = count > 0 ? W[0]->m.cols : 0, .n_tok = n_tok};
    for (int i = 0; fused && i < count; i++) {
        const gm_mm_kernel *k = gm_mm_kernel_of(W[i]);
        j.W[i] = W[i]->m;
        j.fn[i] = k->fused;
        j.stride[i] = gm_row_bytes(W[i]->m.type, W[i]->m.cols);
        fused = k->fused && W[i]->m.cols == W[0]->m.cols && W[i]->m.rows > 0 && j.stride[i] != 0;
    }
    if (!fused) {
        for (int i = 0; i < count; i++) {
            gm_status st = gm_mm(W[i], x, n_tok, y[i], pool, scratch);
            if (st != GM_OK) return st;
        }
        return GM_OK;
    }
    size_t total = 0, off[GM_MM_MULTI_MAX];
    for (int i = 0; i < count; i++) {
        off[i] = total;
        total += (fused_bytes(j.W[i].type, W[0]->m.cols, n_tok, &j.group_bytes[i]) + 63) / 64 * 64;
    }
    gm_status st = scratch_reserve(scratch, total);
    if (st != GM_OK) return st;
    for (int i = 0; i < count; i++) {
        /* same kernels and token bytes as gm_mm: identical results to separate calls */
        j.y[i] = y[i];
        j.tok[i] = (const char *)scratch->buf + off[i];
        prep_groups(j.W[i].type, x, W[0]->m.cols, n_tok, (char *)scratch->buf + off[i], j.group_bytes[i]);
        j.row0[i + 1] = j.row0[i] + W[i]->m.rows;
    }
    decode_rows(pool, j.row0[count], multi_rows_task, &j);
    return GM_OK;
}

/* items are groups of 4 rows, the tile height */
static void avx512_rows_task(void *ctx, int64_t q0, int64_t q1, int thread) {
    const mm_job *j = ctx;
    const int64_t r1 = q1 * 4 < j->W->rows ? q1 * 4 : j->W->rows;
    gm_avx512_gemm(j->W->type, j->W->data, j->w_stride, j->W->rows, j->W->cols, j->act, j->n_tok, j->y, q0 * 4, r1,
                   j->rows_scratch + (size_t)thread * j->rows_bytes);
}

static gm_status matmul_avx512(mm_job *j, gm_pool *pool, gm_matmul_scratch *scratch) {
    const int nth = gm_pool_size(pool);
    j->tok_bytes = gm_avx512_tok_bytes(j->W->type, j->W->cols);
    j->rows_bytes = gm_avx512_rows_bytes(j->W->type, j->W->cols);
    if ((uint64_t)j->n_tok > (SIZE_MAX / 2) / j->tok_bytes) return GM_ERR_NOMEM;
    const size_t act = (size_t)j->n_tok * j->tok_bytes;
    gm_status st = scratch_reserve(scratch, act + (size_t)nth * j->rows_bytes);
    if (st != GM_OK) return st;
    j->act = scratch->buf;
    j->rows_scratch = (char *)scratch->buf + act;
    gm_pool_parallel_for(pool, j->n_tok, 1, avx512_prep_task, j);
    gm_pool_parallel_for(pool, (j->W->rows + 3) / 4, 1, avx512_rows_task, j);
    return GM_OK;
}

static gm_status scratch_reserve(gm_matmul_scratch *s, size_t bytes) {
    if (s->cap >= bytes) return GM_OK;
    void *p = NULL;
    size_t cap = bytes < 4096 ? 4096 : bytes;
    cap = (cap + 63) / 64 * 64;
    if (posix_memalign(&p, 64, cap) != 0) return GM_ERR_NOMEM;
    free(s->buf);
    s->buf = p;
    s->cap = cap;
    return GM_OK;
}

gm_status gm_mm(const gm_mm_weight *W, const float *x, int64_t n_tok, float *y, gm_pool *pool,
                gm_matmul_scratch *scratch) {
    const gm_mm_kernel *k = gm_mm_kernel_of(W);
    if (!k->vec_dot) return GM_ERR_UNSUPPORTED;
    const gm_type_traits *wt = gm_type_traits_of(W->m.type), *at = gm_type_traits_of(k->act_type);
    const size_t w_stride = gm_row_bytes(W->m.type, W->m.cols);
    const size_t a_stride = gm_row_bytes(at->type, W->m.cols);
    if (w_stride == 0 || a_stride == 0 || n_tok < 0) return GM_ERR_ARG;
    if (n_tok == 0 || W->m.rows == 0) return GM_OK;
    if (k->fused && n_tok <= GM_FUSED_MAX_TOKENS) /* a few tokens: weights decoded once for all of them */
        return matmul_fused(&W->m, k->fused, x, n_tok, y, pool, scratch);
    if (k->tiles) { /* the same (row, token) arithmetic as the fused kernels, in 4x4 register tiles */
        const gm_matrix K = tile_view(W, k);
        mm_job j = {.W = &K, .wt = wt, .w_stride = w_stride, .n_tok = n_tok, .y = y, .x = x};
        return matmul_avx512(&j, pool, scratch);
    }
    const gm_matrix V = tile_view(W, k); /* AVX2: the x8 copy where there is one */
    mm_job j = {.W = &V, .wt = wt, .w_stride = w_stride, .act = (const char *)x, .a_stride = a_stride, .n_tok = n_tok,
                .y = y, .x = x, .at = at, .vec_dot = k->vec_dot, .quant = k->quant, .tiles2 = k->tiles2};
    if (at->type != GM_TYPE_F32) {
        if ((uint64_t)n_tok > (SIZE_MAX - 64) / a_stride) return GM_ERR_NOMEM;
        const size_t tb = mtok_bytes(k, W->m.cols, n_tok);
        gm_status st = scratch_reserve(scratch, act_bytes(a_stride, n_tok) + tb);
        if (st != GM_OK) return st;
        j.act = scratch->buf;
        if (tb) j.mtok2 = k->mtok2, j.toks = (char *)scratch->buf + act_bytes(a_stride, n_tok);
        if (n_tok == 1) mm_quant_task(&j, 0, 1, 0); /* not worth a pool round trip */
        else gm_pool_parallel_for(pool, n_tok, 1, mm_quant_task, &j);
    }
    if (k->tiles2 && n_tok <= GM_FUSED_MAX_TOKENS) /* decode: the stealing split of the fused kernels */
        decode_rows(pool, W->m.rows, avx2_tiles_task, &j);
    else if (k->tiles2)
        gm_pool_parallel_for(pool, (W->m.rows + GM_AVX2_TILE_ROWS - 1) / GM_AVX2_TILE_ROWS, 1, avx2_groups_task, &j);
    else
        gm_pool_parallel_for(pool, W->m.rows, 4, mm_rows_task, &j);
    return GM_OK;
}

gm_status gm_matmul(const gm_matrix *W, const float *x, int64_t n_tok, float *y, gm_pool *pool,
                    gm_matmul_scratch *scratch) {
    const gm_mm_weight w = {.m = *W}; /* unbound: the CPU's best level */
    return gm_mm(&w, x, n_tok, y, pool, scratch);
}

gm_status gm_matmul_ref(const gm_matrix *W, const float *x, int64_t n_tok, float *y) {
    const gm_type_traits *wt = gm_type_traits_of(W->type);
    if (!wt) return GM_ERR_UNSUPPORTED;
    const size_t w_stride = gm_row_bytes(W->type, W->cols);
    if (w_stride == 0) return GM_ERR_ARG;
    float *row = malloc((size_t)W->cols * sizeof *row + 1);
    if (!row) return GM_ERR_NOMEM;
    for (int64_t r = 0; r < W->rows; r++) {
        wt->dequant_row((const char *)W->data + (size_t)r * w_stride, row, W->cols);
        for (int64_t t = 0; t < n_tok; t++) {
            const float *xt = x + t * W->cols;
            double acc = 0.0;
            for (int64_t i = 0; i < W->cols; i++) acc += (double)row[i] * (double)xt[i];
            y[t * W->rows + r] = (float)acc;
        }
    }
    free(row);
    return GM_OK;
}

void gm_matmul_scratch_free(gm_matmul_scratch *s) {
    if (!s) return;
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

gm_status gm_matrix_row(const gm_matrix *W, int64_t r, float *out) {
    const gm_type_traits *wt = gm_type_traits_of(W->type);
    if (!wt) return GM_ERR_UNSUPPORTED;
    const size_t w_stride = gm_row_bytes(W->type, W->cols);
    if (w_stride == 0 || r < 0 || r >= W->rows) return GM_ERR_ARG;
    wt->dequant_row((const char *)W->data + (size_t)r * w_stride, out, W->cols);
    return GM_OK;
}
