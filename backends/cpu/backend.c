/* backends/cpu/backend.c — the CPU backend: the ops of runtime/backend.h on a thread pool with the ISA
 * kernels of kernels/, activations and KV blocks in host memory.
 *
 * The weights it runs are its own (backends/cpu/repack.c): the layer matrices' copies in the layouts of its kernels,
 * shared with the other CPU backends on the same model; the model's views of the file never change.
 *
 * Row-wise ops spread rows over the pool when a chunk has several rows; each row is computed by the same
 * code whatever the thread, so results do not depend on the split (batch invariance). Small ops run on the
 * calling thread (INLINE_FLOATS): a pool round trip costs more than they do. */
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/attention.h"
#include "backends/cpu/dense.h"
#include "backends/cpu/repack.h"
#include "backends/host.h"
#include "core/error.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/threadpool.h"

typedef struct rope_table {
    float *cs, *sn; /* max_batch x dims/2 */
    int dims;
} rope_table;

typedef struct cpu_backend {
    gm_backend base;
    const gm_model *m;
    const gm_kv_layout *lay;
    gm_pool *pool;
    bool own_pool; /* started here (else the caller's, shared) */
    gm_isa isa;                 /* the level the engine chose (the model's) */
    const gm_cpu_kernels *kern; /* the small ops' kernels, of that level */
    gm_cpu_weights *weights;    /* the layer matrices as its kernels read them, shared (repack.h); NULL without a model */
    gm_matmul_scratch mm;
    gm_attn_scratch attn;
    int max_batch;
    rope_table rope[GM_ROPE_KINDS];
    float *ones; /* max(d_model, head_dim) ones: the weightless norm (no model: the dense scratch's) */
    gm_cpu_dense dense; /* the dense-row ops' state and scratch (dense.c) */
} cpu_backend;

static cpu_backend *cpu(gm_backend *be) { return (cpu_backend *)be; }

/* Row-wise ops over at most this many floats run on the calling thread: a pool round trip (~5-10 us on two
 * threads) costs more than the op itself (8 decode rows of q/k norms and RoPE are a few microseconds).
 * Elementwise adds and scales stay on it up to POOL_FLOATS (they are cheaper per float): an encoder's residual
 * over an image's thousands of rows goes to the pool. */
enum { INLINE_FLOATS = 16384, POOL_FLOATS = 1 << 18 };

/* ---------------------------------------------------------------- row-wise ops */

typedef struct rows_job {
    const gm_cpu_kernels *kern;
    float *y;
    const float *x, *w;
    int dim;
    float eps;
    const int *idx; /* NULL: rows in order; else row i is idx[i] */
} rows_job;

static void norm_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const rows_job *j = ctx;
    for (int64_t i = begin; i < end; i++) {
        const int64_t r = j->idx ? j->idx[i] : i;
        j->kern->rmsnorm(j->y + i * j->dim, j->x + r * j->dim, j->w, j->dim, j->eps);
    }
}

static void cpu_rmsnorm(gm_backend *be, float *y, const float *x, const float *w, int n, int dim, float eps,
                        const int *idx) {
    rows_job j = {cpu(be)->kern, y, x, w ? w : cpu(be)->ones, dim, eps, idx};
    if ((size_t)n * dim <= INLINE_FLOATS) norm_task(&j, 0, n, 0);
    else gm_pool_parallel_for(cpu(be)->pool, n, 1, norm_task, &j);
}

static void geglu_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const rows_job *j = ctx;
    j->kern->geglu(j->y + begin, j->x + begin, (int)(end - begin));
}

static void cpu_geglu(gm_backend *be, float *gate, const float *up, int n, int ff) {
    rows_job j = {cpu(be)->kern, gate, up, NULL, 0, 0.0f, NULL};
    if ((size_t)n * ff <= INLINE_FLOATS) j.kern->geglu(gate, up, n * ff); /* same bits per element whatever n */
    else gm_pool_parallel_for(cpu(be)->pool, (int64_t)n * ff, 1024, geglu_task, &j);
}

typedef struct elem_job {
    float *y;
    const float *x;
    float s;
} elem_job;

static void add_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const elem_job *j = ctx;
    gm_add(j->y + begin, j->x + begin, (int)(end - begin));
}

static void scale_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const elem_job *j = ctx;
    gm_scale(j->y + begin, (int)(end - begin), j->s);
}

/* y += x (elementwise: the same bits whatever the split) */
static void cpu_add(gm_backend *be, float *y, const float *x, size_t n) {
    elem_job j = {y, x, 0.0f};
    if (n <= POOL_FLOATS) add_task(&j, 0, (int64_t)n, 0);
    else gm_pool_parallel_for(cpu(be)->pool, (int64_t)n, 4096, add_task, &j);
}

static void cpu_scale(gm_backend *be, float *x, size_t n, float s) {
    elem_job j = {x, NULL, s};
    if (n <= POOL_FLOATS) scale_task(&j, 0, (int64_t)n, 0);
    else gm_pool_parallel_for(cpu(be)->pool, (int64_t)n, 4096, scale_task, &j);
}

static void cpu_rope_prepare(gm_backend *be, int kind, const float *inv_freq, int dims, const gm_fwd_row *rows, int n) {
    rope_table *r = &cpu(be)->rope[kind];
    const int h = dims / 2;
    r->dims = dims;
    for (int i = 0; i < n; i++) gm_rope_cos_sin(r->cs + (size_t)i * h, r->sn + (size_t)i * h, inv_freq, dims, rows[i].pos);
}

typedef struct rope_job {
    float *x;
    const rope_table *r;
    int n_heads, hd, dims;
} rope_job;

/* NEOX RoPE on the first `dims` dims of each head of rows [begin, end) */
static void rope_task(void *ctx, int64_t begin, int64_t end, int thread) {
    (void)thread;
    const rope_job *j = ctx;
    const int h = j->dims / 2;
    for (int64_t i = begin; i < end; i++) {
        float *x = j->x + (size_t)i * j->n_heads * j->hd;
        const float *cs = j->r->cs + (size_t)i * h, *sn = j->r->sn + (size_t)i * h;
        if (j->dims == j->hd) {
            gm_rope_neox(x, j->n_heads, j->hd, cs, sn);
            continue;
        }
        for (int hh = 0; hh < j->n_heads; hh++) gm_rope_neox(x + (size_t)hh * j->hd, 1, j->dims, cs, sn);
    }
}

static void cpu_rope(gm_backend *be, float *x, int n, int n_heads, int hd, int dims, int kind) {
    rope_job j = {x, &cpu(be)->rope[kind], n_heads, hd, dims};
    if ((size_t)n * n_heads * hd <= INLINE_FLOATS) rope_task(&j, 0, n, 0);
    else gm_pool_parallel_for(cpu(be)->pool, n, 1, rope_task, &j);
}

static void cpu_kv_store(gm_backend *be, const float *k, const float *v, const gm_fwd_row *rows, int n, int il,
                         int kv_dim) {
    gm_host_kv_store(cpu(be)->lay, cpu(be)->kern->kv_store, k, v, rows, n, il, kv_dim);
}

static void cpu_attention(gm_backend *be, const gm_attn_call *c) {
    gm_attention(cpu(be)->kern, cpu(be)->pool, &cpu(be)->attn, c);
}

/* W as this backend's kernels run it: its copy in the weight set, or (a matrix the set holds nothing for: the
 * embedding / LM head, a family's extra matrices) the file's rows bound for this call at the backend's level */
static const gm_mm_weight *weight_of(const cpu_backend *c, const gm_matrix *W, gm_mm_weight *tmp) {
    const gm_mm_weight *w = gm_cpu_weights_find(c->weights, W);
    if (w) return w;
    *tmp = gm_mm_view(W, c->isa);
    return tmp;
}

static gm_status cpu_matmul(gm_backend *be, const gm_matrix *const *W, float *const *y, int count, const float *x,
                            int n) {
    cpu_backend *c = cpu(be);
    if (c->dense.sgemm) return gm_cpu_dense_matmul(&c->dense, c->pool, &c->mm, W, y, count, x, n); /* float_gemm */
    if (count < 1 || count > GM_MM_MULTI_MAX) return GM_ERR_ARG;
    gm_mm_weight tmp[GM_MM_MULTI_MAX];
    const gm_mm_weight *w[GM_MM_MULTI_MAX];
    for (int i = 0; i < count; i++) w[i] = weight_of(c, W[i], &tmp[i]);
    if (count == 1) return gm_mm(w[0], x, n, y[0], c->pool, &c->mm);
    return gm_mm_multi(w, y, count, x, n, c->pool, &c->mm);
}

static gm_status cpu_head(gm_backend *be, const gm_matrix *W, const float *x, int n, float *y, float softcap) {
    cpu_backend *c = cpu(be);
    gm_mm_weight tmp;
    gm_status st = gm_mm(weight_of(c, W, &tmp), x, n, y, c->pool, &c->mm);
    if (!st && softcap > 0.0f) gm_softcap(y, (int)(W->rows * n), softcap);
    return st;
}

static gm_status cpu_embed(gm_backend *be, float *x, const gm_fwd_row *rows, int n) {
    return gm_host_embed(cpu(be)->m, x, rows, n);
}

/* ---------------------------------------------------------------- dense rows (dense.c) */

/* The dense scratch; without a model, also the weightless norm's ones and the RoPE tables the encoder asks for. */
static gm_status cpu_dense_reserve(gm_backend *be, const gm_dense_shape *s, gm_error *err) {
    cpu_backend *c = cpu(be);
    gm_status st = gm_cpu_dense_reserve(&c->dense, c->pool, s, err);
    if (st || c->m) return st;
    c->ones = c->dense.ones;
    const size_t rows = (size_t)(s->max_rows > 0 ? s->max_rows : 1), rh = (size_t)s->head_dim / 2;
    for (int k = 0; k < s->n_rope && k < GM_ROPE_KINDS; k++) {
        free(c->rope[k].cs);
        if (!(c->rope[k].cs = malloc(2 * (rows * rh + 1) * sizeof(float))))
            return gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
        c->rope[k].sn = c->rope[k].cs + rows * rh + 1;
    }
    return GM_OK;
}

static void cpu_layernorm(gm_backend *be, float *y, const float *x, const float *w, const float *b, int n, int dim,
                          float eps) {
    gm_cpu_layernorm(cpu(be)->pool, y, x, w, b, n, dim, eps);
}

static void cpu_bias_add(gm_backend *be, float *y, const float *x, const float *b, int n, int dim) {
    gm_cpu_bias_add(cpu(be)->pool, y, x, b, n, dim);
}

static void cpu_bias_act(gm_backend *be, float *y, const float *b, const float *up, int n, int dim, gm_act act) {
    gm_cpu_bias_act(cpu(be)->pool, cpu(be)->kern, cpu(be)->dense.ones, y, b, up, n, dim, act);
}

static void cpu_clamp(gm_backend *be, float *y, const float *x, size_t n, float lo, float hi) {
    gm_cpu_clamp(cpu(be)->pool, y, x, n, lo, hi);
}

static void cpu_mul_rows(gm_backend *be, float *y, const float *w, int n, int dim) {
    gm_cpu_mul_rows(cpu(be)->pool, y, w, n, dim);
}

static gm_status cpu_attention_dense(gm_backend *be, const gm_dense_attn *a) {
    cpu_backend *c = cpu(be);
    return gm_cpu_dense_attention(&c->dense, c->kern, c->pool, &c->mm, a);
}

/* ---------------------------------------------------------------- the backend */

static int cpu_threads(const gm_backend *be) { return gm_pool_size(((const cpu_backend *)be)->pool); }

static void cpu_wait_weights(gm_backend *be) { gm_cpu_weights_wait(cpu(be)->weights); }

static void cpu_free(gm_backend *be) {
    cpu_backend *c = cpu(be);
    if (!c) return;
    gm_matmul_scratch_free(&c->mm);
    gm_attn_scratch_free(&c->attn);
    for (int k = 0; k < GM_ROPE_KINDS; k++) free(c->rope[k].cs);
    if (c->m) free(c->ones); /* else the dense scratch's */
    gm_cpu_dense_free(&c->dense);
    if (c->own_pool) gm_pool_free(c->pool);
    gm_cpu_weights_release(c->weights);
    free(c);
}

static const gm_backend_ops cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .kv_storage = gm_host_kv_storage,
    .n_threads = cpu_threads,
    .wait_weights = cpu_wait_weights,
    .free = cpu_free,
    .alloc = gm_host_alloc,
    .release = gm_host_release,
    .read = gm_host_read,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .head = cpu_head,
    .rope_prepare = cpu_rope_prepare,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .geglu = cpu_geglu,
    .add = cpu_add,
    .scale = cpu_scale,
    .copy = gm_host_copy,
    .dense_reserve = cpu_dense_reserve,
    .layernorm = cpu_layernorm,
    .bias_add = cpu_bias_add,
    .bias_act = cpu_bias_act,
    .clamp = cpu_clamp,
    .mul_rows = cpu_mul_rows,
    .attention_dense = cpu_attention_dense,
};

static gm_status cpu_scratch(cpu_backend *c, const gm_backend_options *opt, gm_error *err) {
    const gm_layer_max mx = gm_model_layer_max(c->m);
    const size_t B = (size_t)opt->max_batch, rh = (size_t)mx.head_dim / 2;
    const int d = c->m->cfg.d_model, w = d > mx.head_dim ? d : mx.head_dim;
    c->ones = malloc((size_t)w * sizeof *c->ones);
    if (!c->ones) return gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
    for (int i = 0; i < w; i++) c->ones[i] = 1.0f;
    for (int k = 0; k < GM_ROPE_KINDS; k++) {
        c->rope[k].cs = malloc(2 * (B * rh + 1) * sizeof(float));
        if (!c->rope[k].cs) return gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
        c->rope[k].sn = c->rope[k].cs + B * rh + 1;
    }
    return gm_attn_scratch_init(&c->attn, gm_pool_size(c->pool), opt->max_batch, opt->max_ctx, mx.group, mx.n_heads,
                                mx.head_dim, err);
}

gm_status gm_backend_cpu_new(const gm_model *m, const gm_kv_layout *lay, const gm_backend_options *opt,
                             gm_backend **out, gm_error *err) {
    *out = NULL;
    cpu_backend *c = calloc(1, sizeof *c);
    if (!c) return gm_fail(err, GM_ERR_NOMEM, "cpu backend: out of memory");
    c->base.ops = &cpu_ops;
    c->m = m, c->lay = lay, c->max_batch = opt->max_batch;
    c->isa = gm_isa_resolve(opt->isa);
    c->kern = gm_cpu_kernels_for(c->isa); /* once: no op asks for the level again */
    c->own_pool = !opt->pool;
    c->pool = opt->pool ? opt->pool : gm_pool_new(opt->n_threads);
    if (!c->pool) {
        free(c);
        return gm_fail(err, GM_ERR_NOMEM, "cpu backend: cannot start %d threads", opt->n_threads);
    }
    gm_cpu_dense_init(&c->dense, opt, c->pool);
    gm_status st = m ? cpu_scratch(c, opt, err) : GM_OK; /* no model: an encoder's backend, sized by dense_reserve */
    if (!st && m) st = gm_cpu_weights_acquire(m, c->isa, &c->weights, err);
    if (st) {
        cpu_free(&c->base);
        return st;
    }
    *out = &c->base;
    return GM_OK;
}
