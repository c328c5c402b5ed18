/* kernels/matmul.c — y = x W^T over weights of any supported type, read in place. Activations are
 * quantized once per call to the weight type's vec_dot_type, then output rows are split across
 * the pool; every (row, token) output is one vec_dot, so the result does not depend on how rows
 * were split. */
#include "kernels/matmul.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "quant/quant.h"

#define GM_TILE_MIN_TOKENS 4

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
} mm_job;

static gm_status scratch_reserve(gm_matmul_scratch *s, size_t bytes);

/* W as the AVX-512 kernels see it: its packed copy when it has one (tmp holds the view) */
static const gm_matrix *avx512_view(const gm_matrix *W, gm_matrix *tmp) {
    if (!W->packed) return W;
    *tmp = (gm_matrix){W->packed_type, W->rows, W->cols, W->packed, 0, NULL};
    return tmp;
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

static void mm_quant_task(void *ctx, int64_t t0, int64_t t1, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    for (int64_t t = t0; t < t1; t++)
        j->quant(j->x + t * j->W->cols, (char *)j->act + (size_t)t * j->a_stride, j->W->cols);
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
    for (int t = 0; t < nt; t++)
        atomic_init(&j.s[t].w, (uint64_t)(n * t / nt) << 32 | (uint64_t)(n * (t + 1) / nt));
    gm_pool_parallel_for_chunk(pool, nt, 1, steal_task, &j);
}

/* decode with prepared tokens: one tok_dot per (row, token) */
static void tok_rows_task(void *ctx, int64_t r0, int64_t r1, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    const char *w = (const char *)j->W->data;
    for (int64_t r = r0; r < r1; r++) {
        const void *wr = w + (size_t)r * j->w_stride;
        for (int64_t t = 0; t < j->n_tok; t++)
            j->vec_dot(j->W->cols, &j->y[t * j->W->rows + r], wr, j->act + (size_t)t * j->tok_bytes);
    }
}

static gm_status matmul_tok_dot(mm_job *j, gm_vec_dot_fn dot, gm_pool *pool, gm_matmul_scratch *scratch) {
    j->tok_bytes = gm_avx512_tok_bytes(j->W->type, j->W->cols);
    if ((uint64_t)j->n_tok > (SIZE_MAX / 2) / j->tok_bytes) return GM_ERR_NOMEM;
    gm_status st = scratch_reserve(scratch, (size_t)j->n_tok * j->tok_bytes);
    if (st != GM_OK) return st;
    j->act = scratch->buf;
    j->vec_dot = dot;
    for (int64_t t = 0; t < j->n_tok; t++) /* a few tokens only: not worth a pool round trip */
        gm_avx512_prep(j->W->type, j->x + t * j->W->cols, j->W->cols, (char *)j->act + (size_t)t * j->tok_bytes);
    decode_rows(pool, j->W->rows, tok_rows_task, j);
    return GM_OK;
}

/* ---- several matrices over one input (q/k/v, gate/up): one pool call for all their rows */

enum { MM_MULTI_MAX = 4 };

typedef struct {
    int count;
    int64_t cols, row0[MM_MULTI_MAX + 1]; /* row0[i]: first global row of matrix i */
    gm_matrix W[MM_MULTI_MAX];            /* as the kernels see them (packed copies where present) */
    size_t stride[MM_MULTI_MAX];
    float *y[MM_MULTI_MAX];
    gm_vec_dot_fn dot[MM_MULTI_MAX];
    const char *tok[MM_MULTI_MAX];
} multi_job;

static void multi_rows_task(void *ctx, int64_t g0, int64_t g1, int thread) {
    (void)thread;
    const multi_job *j = ctx;
    for (int i = 0; i < j->count; i++) {
        const int64_t b = g0 > j->row0[i] ? g0 : j->row0[i], e = g1 < j->row0[i + 1] ? g1 : j->row0[i + 1];
        for (int64_t r = b - j->row0[i]; r < e - j->row0[i]; r++)
            j->dot[i](j->cols, &j->y[i][r], (const char *)j->W[i].data + (size_t)r * j->stride[i], j->tok[i]);
    }
}

gm_status gm_matmul_multi(const gm_matrix *const *W, float *const *y, int count, const float *x, int64_t n_tok,
                          gm_pool *pool, gm_matmul_scratch *scratch) {
    bool fused = count >= 1 && count <= MM_MULTI_MAX && n_tok == 1 && gm_isa_active() >= GM_ISA_AVX512;
    multi_job j = {.count = count, .cols = count > 0 ? W[0]->cols : 0};
    for (int i = 0; fused && i < count; i++) {
        gm_matrix tmp;
        j.W[i] = *avx512_view(W[i], &tmp);
        j.stride[i] = gm_row_bytes(W[i]->type, W[i]->cols);
        fused = W[i]->cols == W[0]->cols && W[i]->rows > 0 && gm_avx512_tok_dot(j.W[i].type) && j.stride[i] != 0;
    }
    if (!fused) {
        for (int i = 0; i < count; i++) {
            gm_status st = gm_matmul(W[i], x, n_tok, y[i], pool, scratch);
            if (st != GM_OK) return st;
        }
        return GM_OK;
    }
    size_t total = 0, off[MM_MULTI_MAX];
    for (int i = 0; i < count; i++) {
        off[i] = total;
        total += gm_avx512_tok_bytes(j.W[i].type, W[0]->cols);
    }
    gm_status st = scratch_reserve(scratch, total);
    if (st != GM_OK) return st;
    for (int i = 0; i < count; i++) {
        /* same kernels and token bytes as gm_matmul: identical results to separate calls */
        j.y[i] = y[i];
        j.dot[i] = gm_avx512_tok_dot(j.W[i].type);
        j.tok[i] = (const char *)scratch->buf + off[i];
        gm_avx512_prep(j.W[i].type, x, W[0]->cols, (char *)scratch->buf + off[i]);
        j.row0[i + 1] = j.row0[i] + W[i]->rows;
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

gm_status gm_matmul(const gm_matrix *W, const float *x, int64_t n_tok, float *y, gm_pool *pool,
                    gm_matmul_scratch *scratch) {
    const gm_type_traits *wt = gm_type_traits_of(W->type);
    if (!wt || !wt->vec_dot) return GM_ERR_UNSUPPORTED;
    const gm_type_traits *at = gm_type_traits_of(wt->vec_dot_type);
    if (!at || !at->quant_row) return GM_ERR_UNSUPPORTED;
    const size_t w_stride = gm_row_bytes(W->type, W->cols);
    const size_t a_stride = gm_row_bytes(at->type, W->cols);
    if (w_stride == 0 || a_stride == 0 || n_tok < 0) return GM_ERR_ARG;
    if (n_tok == 0 || W->rows == 0) return GM_OK;
    const gm_isa isa = gm_isa_active();
    mm_job j = {W, wt, w_stride, (const char *)x, a_stride, n_tok, y, x, at, wt->vec_dot, at->quant_row, 0, 0, NULL};
    if (isa >= GM_ISA_AVX512) {
        gm_matrix tmp;
        const gm_matrix *K = avx512_view(W, &tmp); /* the packed copy, where there is one */
        j.W = K;
        /* Tiles pay off once a row is reused by several tokens; a single decode token is memory
         * bound and runs fastest as plain dot products over the weight blocks. */
        if (n_tok >= GM_TILE_MIN_TOKENS && gm_avx512_supports(K->type)) return matmul_avx512(&j, pool, scratch);
        if (gm_avx512_tok_dot(K->type)) return matmul_tok_dot(&j, gm_avx512_tok_dot(K->type), pool, scratch);
        j.W = W;
    }
    if (isa >= GM_ISA_AVX2) {
        gm_vec_dot_fn vd = gm_avx2_vec_dot(W->type);
        gm_quant_row_fn q = gm_avx2_quant_act(at->type);
        if (isa >= GM_ISA_AVX512 && gm_avx512_vec_dot(W->type)) vd = gm_avx512_vec_dot(W->type);
        if (vd) j.vec_dot = vd;
        if (q) j.quant = q; /* produces the reference's bytes exactly */
    }
    if (at->type != GM_TYPE_F32) {
        if ((uint64_t)n_tok > SIZE_MAX / a_stride) return GM_ERR_NOMEM;
        gm_status st = scratch_reserve(scratch, (size_t)n_tok * a_stride);
        if (st != GM_OK) return st;
        j.act = scratch->buf;
        gm_pool_parallel_for(pool, n_tok, 1, mm_quant_task, &j);
    }
    gm_pool_parallel_for(pool, W->rows, 4, mm_rows_task, &j);
    return GM_OK;
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
