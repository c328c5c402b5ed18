/* tests/test_forward.c — the forward pass against an independent textbook reference.
 *
 * The reference below takes every weight straight from the tiny-model generator
 * (tm_weight_values: zero-centred norm weights, so it adds the +1 itself), follows the rules of
 * ../shared/docs/gemma-facts.md section A from the test's own tm_options (not from our gm_config), and
 * computes in double with full causal attention per position. Our forward (f32, KV cache, batched
 * chunks, thread pool) must match it on gemma / gemma2 / gemma3 tiny models, over sequences longer
 * than the sliding window. Tolerance: |ours - ref| <= 1e-4 * max(1, |ref|) on every logit (f32
 * accumulation over d = 64 .. ff = 128 with up to 6 layers; observed errors are ~2e-6). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/cpu/repack.h"
#include "gemma.h"
#include "gemma_generator.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/pack.h"
#include "model/model.h"
#include "support/test.h"
#include "support/tiny_model.h"

/* ---------------------------------------------------------------- reference */

static double *ref_w(const tm_options *o, const char *name, int64_t n) {
    float *f = malloc((size_t)n * sizeof *f);
    double *d = malloc((size_t)n * sizeof *d);
    if (!f || !d || !tm_weight_values(o, name, f, n)) {
        fprintf(stderr, "  reference: no values for %s\n", name);
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
    return d;
}

static void ref_norm(double *y, const double *x, const double *w, int n, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    const double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * (1.0 + w[i]);
}

/* y[rows] = W[rows x cols] x[cols] (PyTorch layout, GGUF ne = [cols, rows]). */
static void ref_mv(double *y, const double *W, const double *x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += W[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

static void ref_rope(double *x, int hd, int pos, double base, double scale) {
    for (int i = 0; i < hd / 2; i++) {
        const double th = pos / scale * pow(base, -2.0 * i / hd);
        const double a = x[i], b = x[i + hd / 2];
        x[i] = a * cos(th) - b * sin(th);
        x[i + hd / 2] = a * sin(th) + b * cos(th);
    }
}

static bool ref_sliding(const tm_options *o, int il) {
    if (!strcmp(o->arch, "gemma2")) return il % 2 == 0;
    if (!strcmp(o->arch, "gemma3")) return (il + 1) % 6 != 0;
    return false;
}

/* logits: n x V, every position, full recompute. */
static void ref_forward(const tm_options *o, const int32_t *ids, int n, double *logits) {
    const int d = o->d_model, H = o->n_heads, Hkv = o->n_kv_heads, hd = o->head_dim, ff = o->d_ff;
    const int V = tm_vocab_size(), L = o->n_layers;
    const bool g2 = !strcmp(o->arch, "gemma2"), g3 = !strcmp(o->arch, "gemma3"), post = g2 || g3;
    double *E = ref_w(o, "token_embd.weight", (int64_t)V * d);
    double *x = calloc((size_t)n * d, sizeof *x), *xn = malloc(sizeof(double) * d);
    double *q = malloc(sizeof(double) * (size_t)n * H * hd), *k = malloc(sizeof(double) * (size_t)n * Hkv * hd);
    double *v = malloc(sizeof(double) * (size_t)n * Hkv * hd), *att = malloc(sizeof(double) * H * hd);
    double *o_ = malloc(sizeof(double) * d), *g = malloc(sizeof(double) * ff), *u = malloc(sizeof(double) * ff);
    double *p = malloc(sizeof(double) * n), *tmp = malloc(sizeof(double) * (size_t)n * d);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < d; j++) x[(size_t)i * d + j] = E[(size_t)ids[i] * d + j] * sqrt((double)d);
    char nm[96];
#define LW(var, suffix, count) snprintf(nm, sizeof nm, "blk.%d." suffix ".weight", il); double *var = ref_w(o, nm, count)
    for (int il = 0; il < L; il++) {
        LW(an, "attn_norm", d); LW(wq, "attn_q", (int64_t)H * hd * d); LW(wk, "attn_k", (int64_t)Hkv * hd * d);
        LW(wv, "attn_v", (int64_t)Hkv * hd * d); LW(wo, "attn_output", (int64_t)d * H * hd);
        LW(fn, "ffn_norm", d); LW(wg, "ffn_gate", (int64_t)ff * d); LW(wu, "ffn_up", (int64_t)ff * d);
        LW(wd, "ffn_down", (int64_t)d * ff);
        double *pan = NULL, *pfn = NULL, *qn = NULL, *kn = NULL;
        if (post) { LW(a, "post_attention_norm", d); LW(b, "post_ffw_norm", d); pan = a; pfn = b; }
        if (g3) { LW(a, "attn_q_norm", hd); LW(b, "attn_k_norm", hd); qn = a; kn = b; }
        const bool sl = ref_sliding(o, il) && o->sliding_window > 0;
        const double base = g3 ? (sl ? 10000.0 : o->rope_base) : o->rope_base;
        const double scale = (g3 && !sl) ? o->rope_scale_global : 1.0;
        const double qs = 1.0 / sqrt((double)hd);
        for (int i = 0; i < n; i++) {
            ref_norm(xn, x + (size_t)i * d, an, d, o->norm_eps);
            double *qi = q + (size_t)i * H * hd, *ki = k + (size_t)i * Hkv * hd;
            ref_mv(qi, wq, xn, H * hd, d);
            ref_mv(ki, wk, xn, Hkv * hd, d);
            ref_mv(v + (size_t)i * Hkv * hd, wv, xn, Hkv * hd, d);
            for (int h = 0; h < H; h++) {
                if (qn) ref_norm(qi + h * hd, qi + h * hd, qn, hd, o->norm_eps);
                ref_rope(qi + h * hd, hd, i, base, scale);
                for (int t = 0; t < hd; t++) qi[h * hd + t] *= qs;
            }
            for (int h = 0; h < Hkv; h++) {
                if (kn) ref_norm(ki + h * hd, ki + h * hd, kn, hd, o->norm_eps);
                ref_rope(ki + h * hd, hd, i, base, scale);
            }
        }
        for (int i = 0; i < n; i++) {
            for (int h = 0; h < H; h++) {
                const int kvh = h / (H / Hkv);
                double mx = -INFINITY;
                for (int j = 0; j < n; j++) {
                    const bool ok = j <= i && (!sl || i - j < o->sliding_window);
                    if (!ok) { p[j] = -INFINITY; continue; }
                    double s = 0;
                    for (int t = 0; t < hd; t++) s += q[((size_t)i * H + h) * hd + t] * k[((size_t)j * Hkv + kvh) * hd + t];
                    if (g2 && o->attn_softcap > 0) s = o->attn_softcap * tanh(s / o->attn_softcap);
                    p[j] = s;
                    if (s > mx) mx = s;
                }
                double z = 0;
                for (int j = 0; j < n; j++) { p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx); z += p[j]; }
                for (int t = 0; t < hd; t++) {
                    double s = 0;
                    for (int j = 0; j < n; j++) s += p[j] / z * v[((size_t)j * Hkv + kvh) * hd + t];
                    att[h * hd + t] = s;
                }
            }
            ref_mv(o_, wo, att, d, H * hd);
            if (pan) ref_norm(o_, o_, pan, d, o->norm_eps);
            for (int t = 0; t < d; t++) tmp[(size_t)i * d + t] = x[(size_t)i * d + t] + o_[t];
        }
        for (int i = 0; i < n; i++) {
            double *xi = tmp + (size_t)i * d;
            ref_norm(xn, xi, fn, d, o->norm_eps);
            ref_mv(g, wg, xn, ff, d);
            ref_mv(u, wu, xn, ff, d);
            for (int t = 0; t < ff; t++)
                g[t] = 0.5 * g[t] * (1 + tanh(0.7978845608028654 * (g[t] + 0.044715 * g[t] * g[t] * g[t]))) * u[t];
            ref_mv(o_, wd, g, d, ff);
            if (pfn) ref_norm(o_, o_, pfn, d, o->norm_eps);
            for (int t = 0; t < d; t++) x[(size_t)i * d + t] = xi[t] + o_[t];
        }
        free(an); free(wq); free(wk); free(wv); free(wo); free(fn); free(wg); free(wu); free(wd);
        free(pan); free(pfn); free(qn); free(kn);
    }
#undef LW
    double *on = ref_w(o, "output_norm.weight", d);
    for (int i = 0; i < n; i++) {
        ref_norm(xn, x + (size_t)i * d, on, d, o->norm_eps);
        ref_mv(logits + (size_t)i * V, E, xn, V, d);
        if (o->final_softcap > 0)
            for (int t = 0; t < V; t++)
                logits[(size_t)i * V + t] = o->final_softcap * tanh(logits[(size_t)i * V + t] / o->final_softcap);
    }
    free(on); free(E); free(x); free(xn); free(q); free(k); free(v); free(att); free(o_); free(g); free(u);
    free(p); free(tmp);
}

/* ---------------------------------------------------------------- helpers */

static const char *tmp_path(const char *tag) {
    static char buf[256];
    snprintf(buf, sizeof buf, "/tmp/gm_test_forward_%d_%s.gguf", (int)getpid(), tag);
    return buf;
}

static void make_ids(int32_t *ids, int n, uint64_t seed) {
    ids[0] = TM_BOS;
    for (int i = 1; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = TM_BYTE0 + (int32_t)((seed >> 33) % (uint64_t)(tm_vocab_size() - TM_BYTE0));
    }
}

/* Our logits for every position (n x V), with a given prefill chunk size and thread count. */
static gm_model_options g_open; /* how our_logits and layer0_packed open the model (the repack and ISA tests set it) */

static bool our_logits(const char *path, const int32_t *ids, int n, int n_batch, int n_threads, float *out) {
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    bool ok = false;
    CHECK_OK(gm_model_open(path, &g_open, &m, &err), &err);
    if (!m) return false;
    gm_generator_options go = {.n_threads = gm_test_threads(n_threads), .n_ctx = 128, .n_batch = n_batch};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    if (g) {
        CHECK_OK(gm_generator_prefill(g, ids, n, &err), &err);
        gm_status st = gm_generator_score(g, out, &err);
        CHECK_OK(st, &err);
        ok = st == GM_OK;
    }
    gm_generator_free(g);
    gm_model_free(m);
    return ok;
}

static void compare_with_ref(const tm_options *o, const char *tag, int n) {
    const int V = tm_vocab_size();
    char err[256];
    const char *path = tmp_path(tag);
    CHECK_MSG(tm_write_gguf(o, path, err, sizeof err), "%s", err);
    int32_t *ids = malloc(sizeof(int32_t) * n);
    make_ids(ids, n, 42);
    double *ref = malloc(sizeof(double) * (size_t)n * V);
    float *ours = malloc(sizeof(float) * (size_t)n * V), *chunked = malloc(sizeof(float) * (size_t)n * V);
    ref_forward(o, ids, n, ref);
    if (our_logits(path, ids, n, 0, 2, ours) && our_logits(path, ids, n, 5, 1, chunked)) {
        double worst = 0, worst_chunk = 0;
        int bad = 0;
        for (size_t i = 0; i < (size_t)n * V; i++) {
            const double e = fabs(ours[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
            if (e > worst) worst = e;
            if (e > 1e-4) bad++;
            const double c = fabs(ours[i] - chunked[i]) / fmax(1.0, fabs(ours[i]));
            if (c > worst_chunk) worst_chunk = c;
        }
        fprintf(stderr, "  %s: %d positions, max rel err vs reference %.3g, chunked(5)/1 thread vs one batch %.3g\n",
                tag, n, worst, worst_chunk);
        CHECK_MSG(bad == 0, "%s: %d logits off by more than 1e-4 (worst %.3g)", tag, bad, worst);
        CHECK_MSG(worst_chunk <= 1e-4, "%s: chunked prefill differs by %.3g", tag, worst_chunk);
    }
    unlink(path);
    free(ids); free(ref); free(ours); free(chunked);
}

/* ---------------------------------------------------------------- tests */

TEST(gemma1_matches_reference) {
    tm_options o;
    tm_options_default(&o, "gemma");
    o.n_layers = 3;
    compare_with_ref(&o, "gemma", 20);
}

TEST(gemma2_matches_reference) {
    tm_options o;
    tm_options_default(&o, "gemma2");
    o.n_layers = 3;
    /* small caps so that both soft-caps actually bend the values */
    o.attn_softcap = 2.0f;
    o.final_softcap = 3.0f;
    compare_with_ref(&o, "gemma2", 24);
}

TEST(gemma3_matches_reference) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.n_layers = 6; /* layer 5 is global, 0..4 sliding */
    compare_with_ref(&o, "gemma3", 24);
}

TEST(gemma3_rope_scaling_matches_reference) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.n_layers = 6;
    o.rope_scale_global = 8.0f;
    o.sliding_window = 4;
    compare_with_ref(&o, "gemma3s", 20);
}

/* ---------------------------------------------------------------- ops */

/* F16 matrices opened for AVX2 get the F16x8 copy (model/model.c) and its kernels, whose sums run
 * column by column instead of in 8 lanes: the logits stay within 1e-4 (relative) of the scalar kernels'
 * on the file layout, and chunked prefill on 1 thread gives one batch's bits on 2. */
TEST(gemma3_f16_weights_packed_for_avx2) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2)) return;
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.n_layers = 6;
    o.weight_type = GM_TYPE_F16;
    const int n = 24, V = tm_vocab_size();
    char err[256];
    const char *path = tmp_path("f16");
    CHECK_MSG(tm_write_gguf(&o, path, err, sizeof err), "%s", err);
    int32_t ids[24];
    make_ids(ids, n, 7);
    float *avx2 = malloc(sizeof(float) * (size_t)n * V), *chunked = malloc(sizeof(float) * (size_t)n * V),
          *scalar = malloc(sizeof(float) * (size_t)n * V);
    g_open.isa = GM_ISA_SCALAR;
    const bool ok_s = our_logits(path, ids, n, 0, 2, scalar);
    g_open.isa = GM_ISA_AVX2;
    const bool ok_a = our_logits(path, ids, n, 0, 2, avx2) && our_logits(path, ids, n, 5, 1, chunked);
    g_open.isa = GM_ISA_AUTO;
    if (ok_s && ok_a) {
        double worst = 0;
        /* `if (e > worst)`, as compare_with_ref does, not worst = fmax(worst, e): the same result (a NaN
         * e leaves worst either way), and GCC 12's aarch64 vectorizer crashes on an fmax reduction
         * whose trip count it knows (ICE in vect_transform_reduction at -O2; docs/arm.md) */
        for (size_t i = 0; i < (size_t)n * V; i++) {
            const double e = fabs(avx2[i] - scalar[i]) / fmax(1.0, fabs(scalar[i]));
            if (e > worst) worst = e;
        }
        fprintf(stderr, "  f16 weights: avx2 (packed) vs scalar max rel diff %.3g\n", worst);
        CHECK_MSG(worst <= 1e-4, "f16 weights: avx2 vs scalar logits differ by %.3g", worst);
        CHECK_MSG(memcmp(avx2, chunked, sizeof(float) * (size_t)n * V) == 0, "f16 weights: chunked prefill changes bits");
    }
    unlink(path);
    free(avx2), free(chunked), free(scalar);
}

/* Q5_0 / Q8_0 / Q4_K / Q6_K layer matrices are packed as x8 by a CPU backend of the AVX2 level (backends/cpu/repack.c
 * pack_layout), a packed layer's other matrices moved into plain copies, the model's own views untouched, and the
 * packed kernels give the file kernels' bits: a tiny model's logits with the copies equal (memcmp) those with
 * GM_REPACK_OFF, whole prefill and chunked. */
static bool layer0_packed(const char *path, int type, int down_type) {
    gm_error err = {0};
    gm_model *m = NULL;
    if (gm_model_open(path, &g_open, &m, &err) != GM_OK) return false;
    gm_layer L0;
    memcpy(&L0, &m->layers[0], sizeof L0); /* every byte, to see that nothing writes the model */
    gm_cpu_weights *cw = NULL;
    CHECK_OK(gm_cpu_weights_acquire(m, m->isa, &cw, &err), &err);
    if (!cw) {
        gm_model_free(m);
        return false;
    }
    gm_cpu_weights_wait(cw); /* the x8 copies are made after acquire returns */
    const gm_mm_weight *w = gm_cpu_weights_find(cw, &m->layers[0].wq), *d = gm_cpu_weights_find(cw, &m->layers[0].down);
    const bool plain = d && d->m.data != m->layers[0].down.data; /* moved into a plain copy: the same bytes */
    const bool packed = w && d && w->packed && w->packed_type == GM_KTYPE_X8(type) && gm_mm_kernel_of(w)->packed &&
                        (down_type ? !d->packed && plain : d->packed != NULL && gm_mm_kernel_of(d)->packed);
    CHECK_MSG(memcmp(&L0, &m->layers[0], sizeof L0) == 0, "the CPU weights changed the model's layer");
    CHECK(!d || memcmp(d->m.data, m->layers[0].down.data, (size_t)d->m.rows * gm_row_bytes(d->m.type, d->m.cols)) == 0);
    gm_cpu_weights_release(cw);
    gm_model_free(m);
    return packed;
}

/* The CPU engines on one model share one set of weight copies: made by the first, taken by the others, freed with the
 * last (the model's gm_backend_share); a reference engine makes none. */
TEST(cpu_weights_shared_by_the_engines_of_a_model) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    char err_s[256];
    const char *path = tmp_path("share");
    CHECK_MSG(tm_write_gguf(&o, path, err_s, sizeof err_s), "%s", err_s);
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    if (!m) return;
    gm_engine *e[3] = {0};
    const gm_engine_options cpu = {.n_threads = 1, .n_ctx = 64}, ref = {.n_ctx = 64, .backend = GM_BACKEND_REFERENCE};
    CHECK_OK(gm_engine_new(m, &ref, &e[2], &err), &err);
    CHECK(m->share->cpu_weights == NULL);
    CHECK_OK(gm_engine_new(m, &cpu, &e[0], &err), &err);
    const void *first = m->share->cpu_weights;
    CHECK(first != NULL);
    CHECK_OK(gm_engine_new(m, &cpu, &e[1], &err), &err);
    CHECK(m->share->cpu_weights == first);
    gm_engine_wait_weights(e[1]);
    gm_engine_wait_weights(e[2]); /* nothing to wait for */
    gm_engine_free(e[0]);
    CHECK(m->share->cpu_weights == first);
    gm_engine_free(e[1]);
    CHECK(m->share->cpu_weights == NULL);
    gm_engine_free(e[2]);
    gm_model_free(m);
    unlink(path);
}

TEST(gemma3_quantized_weights_packed_for_avx2) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2)) return;
    /* the last: ffn_down in Q5_K (no x8 layout) beside Q5_0: a plain copy, so the layer reads no file page */
    const int types[] = {GM_TYPE_Q5_0, GM_TYPE_Q8_0, GM_TYPE_Q4_K, GM_TYPE_Q6_K, GM_TYPE_Q5_0};
    for (int k = 0; k < 5; k++) {
        tm_options o;
        tm_options_default(&o, "gemma3");
        o.n_layers = 3;
        o.weight_type = types[k];
        if (k == 4) o.down_type = GM_TYPE_Q5_K, o.d_ff = 512;
        if (types[k] == GM_TYPE_Q4_K || types[k] == GM_TYPE_Q6_K) /* every matrix's columns whole super-blocks */
            o.d_model = 256, o.d_ff = 512, o.head_dim = 64, o.query_pre_attn_scalar = 64.0f;
        const int n = 24, V = tm_vocab_size();
        char err[256];
        const char *path = tmp_path("qx8");
        CHECK_MSG(tm_write_gguf(&o, path, err, sizeof err), "%s", err);
        int32_t ids[24];
        make_ids(ids, n, 11);
        float *packed = malloc(sizeof(float) * (size_t)n * V), *chunked = malloc(sizeof(float) * (size_t)n * V),
              *file = malloc(sizeof(float) * (size_t)n * V);
        g_open.isa = GM_ISA_AVX2;
        CHECK_MSG(layer0_packed(path, types[k], o.down_type), "%s: layer matrices not packed at open", gm_type_name(types[k]));
        bool ok = our_logits(path, ids, n, 0, 2, packed) && our_logits(path, ids, n, 5, 1, chunked);
        g_open.repack = GM_REPACK_OFF;
        CHECK(!layer0_packed(path, types[k], o.down_type));
        ok = ok && our_logits(path, ids, n, 0, 2, file);
        g_open.repack = GM_REPACK_DEFAULT;
        g_open.isa = GM_ISA_AUTO;
        if (ok) {
            CHECK_MSG(memcmp(packed, file, sizeof(float) * (size_t)n * V) == 0, "%s: packed logits differ from the file's",
                      gm_type_name(types[k]));
            CHECK_MSG(memcmp(packed, chunked, sizeof(float) * (size_t)n * V) == 0, "%s: chunked prefill changes bits",
                      gm_type_name(types[k]));
        }
        unlink(path);
        free(packed), free(chunked), free(file);
    }
}

TEST(ops_basic) {
    float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 2}, y[4];
    gm_rmsnorm(y, x, w, 4, 0.0f);
    const double r = 1.0 / sqrt(30.0 / 4);
    CHECK_NEAR(y[0], 1 * r, 1e-6);
    CHECK_NEAR(y[3], 8 * r, 1e-6);
    float s[3] = {0, -INFINITY, 0};
    gm_softmax(s, 3);
    CHECK_NEAR(s[0], 0.5, 1e-7);
    CHECK_NEAR(s[1], 0.0, 0);
    float all[2] = {-INFINITY, -INFINITY};
    gm_softmax(all, 2);
    CHECK(all[0] == 0.0f && all[1] == 0.0f);
    CHECK_NEAR(gm_gelu_tanh(1.0f), 0.8411920, 1e-6);
    float c[1] = {100.0f};
    gm_softcap(c, 1, 30.0f);
    CHECK_NEAR(c[0], 30.0 * tanh(100.0 / 30.0), 1e-4);
    /* RoPE: position 0 is the identity; rotation keeps the norm of each pair */
    float inv[2], cs[2], sn[2], v[4] = {1, 2, 3, 4};
    gm_rope_inv_freq(inv, 4, 10000.0, 1.0);
    gm_rope_cos_sin(cs, sn, inv, 4, 0);
    gm_rope_neox(v, 1, 4, cs, sn);
    CHECK(v[0] == 1 && v[1] == 2 && v[2] == 3 && v[3] == 4);
    gm_rope_cos_sin(cs, sn, inv, 4, 7);
    gm_rope_neox(v, 1, 4, cs, sn);
    CHECK_NEAR(v[0] * v[0] + v[2] * v[2], 10.0, 1e-5);
    CHECK_NEAR(v[0], cos(7.0) * 1 - sin(7.0) * 3, 1e-5);
}

int main(void) {
    RUN(ops_basic);
    RUN(gemma1_matches_reference);
    RUN(gemma2_matches_reference);
    RUN(gemma3_matches_reference);
    RUN(gemma3_rope_scaling_matches_reference);
    RUN(gemma3_f16_weights_packed_for_avx2);
    RUN(gemma3_quantized_weights_packed_for_avx2);
    RUN(cpu_weights_shared_by_the_engines_of_a_model);
    return test_summary();
}
