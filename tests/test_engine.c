/* tests/test_engine.c — the engine and its sequences (engine/engine.c; gemma.h, "engine and sequences").
 *
 * The property under test is exactness: a sequence's logits are BIT-identical (memcmp) whether it runs
 * alone or in a batch with others, in one pass or in chunks, one token at a time or k at once, on 1 or 2
 * threads, after a fork or a truncation. The references are fresh engines without a prefix index, one
 * sequence at a time. Also: the row doors, F16 storage within a stated tolerance of F32, the ISA options,
 * and the default model (window 512) when present. The prefix index through the engine: test_prefix_cache.c;
 * caller embeddings in a history: test_spans.c. */
#include "support/engine_fixture.h"
#include "engine/engine.h" /* struct gm_seq: its sampler */
#include "kernels/cpu.h"
#include "kernels/ops.h"

/* ---------------------------------------------------------------- batch invariance */

enum { NS = 8, STEPS = 12 };
static const int LENS[NS] = {1, 5, 63, 64, 65, 130, 200, 17};
static const int START[NS] = {0, 0, 1, 2, 2, 3, 5, 6}; /* the step at which each sequence arrives */

/* Eight sequences arriving at different steps, evaluated together (prompt chunks of n_batch 64 mixed with
 * other sequences' decode rows), equal each sequence alone, on the other thread count. */
static void batch_case(const gm_model *m, const char *name, int threads, gm_kv_dtype kt) {
    float *ref = malloc((size_t)NS * (STEPS + 1) * V * sizeof *ref);
    int32_t *ids = malloc((size_t)NS * 256 * sizeof *ids), rtok[NS][STEPS];
    for (int i = 0; i < NS; i++) {
        tokens(ids + i * 256, LENS[i], 100 + (uint64_t)i);
        reference(m, 3 - threads, kt, ids + i * 256, LENS[i], STEPS, ref + (size_t)i * (STEPS + 1) * V, rtok[i]);
    }
    gm_engine *e = new_engine(m, threads, 64, true, 0, kt);
    gm_seq *s[NS] = {0};
    int done[NS] = {0}, bad = 0;
    gm_error err = {0};
    for (int t = 0; e && t < STEPS + 8; t++) {
        gm_seq *act[NS];
        int na = 0;
        for (int i = 0; i < NS; i++) {
            if (t == START[i]) {
                s[i] = new_seq(e);
                CHECK_OK(gm_seq_append(s[i], ids + i * 256, LENS[i], &err), &err);
            } else if (s[i] && done[i] < STEPS) {
                const float *l = gm_seq_logits(s[i]);
                int32_t tk = argmax(l, V);
                CHECK_OK(gm_seq_append(s[i], &tk, 1, &err), &err);
                done[i]++;
            } else {
                continue;
            }
            act[na++] = s[i];
        }
        if (!na) continue;
        CHECK_OK(gm_engine_eval(e, act, na, &err), &err);
        for (int i = 0; i < NS; i++)
            if (s[i] && (t == START[i] || (done[i] <= STEPS && t > START[i]))) {
                const float *l = gm_seq_logits(s[i]);
                if (!l || memcmp(l, ref + ((size_t)i * (STEPS + 1) + done[i]) * V, (size_t)V * sizeof *l) != 0) {
                    if (bad++ < 3)
                        fprintf(stderr, "  %s: sequence %d (prompt %d) differs from alone after %d tokens\n", name, i,
                                LENS[i], done[i]);
                }
            }
    }
    CHECK_MSG(bad == 0, "%s (%d threads, %s KV): %d logit rows differ between batch and alone", name, threads,
              kt == GM_KV_DTYPE_F16 ? "F16" : "F32", bad);
    for (int i = 0; i < NS; i++) gm_seq_free(s[i]);
    if (e) CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    free(ids);
}

TEST(batch_equals_alone) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        batch_case(m, ARCHS[a], 2, GM_KV_DTYPE_F32);
        batch_case(m, ARCHS[a], 1, GM_KV_DTYPE_F16);
        gm_model_free(m);
    }
}

/* The same at the AVX2 level with quantized weights: decode steps of 2..8 rows (here mixed with prompt chunks)
 * run the few-token kernels, a sequence alone the one-token ones. */
TEST(batch_equals_alone_avx2_quantized) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2)) return;
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(PATH[3], &(gm_model_options){.isa = GM_ISA_AVX2}, &m, &err), &err);
    if (!m) return;
    CHECK(gm_model_isa(m) == GM_ISA_AVX2);
    batch_case(m, "gemma3 Q5_0 / Q6_K / Q8_0, avx2", 2, GM_KV_DTYPE_F32);
    batch_case(m, "gemma3 Q5_0 / Q6_K / Q8_0, avx2", 1, GM_KV_DTYPE_F16);
    gm_model_free(m);
}

/* A continuous-batching scheduler's loop: gm_engine_step with a small row budget (decode rows + 16 prompt
 * tokens), so prompts are computed over many steps beside other sequences' decodes; every sequence's
 * logits equal the sequence alone, and no step exceeds its budget. */
TEST(step_equals_alone) {
    enum { N = 4 };
    static const int lens[N] = {1, 70, 130, 200};
    gm_model *m = open_model(2);
    if (!m) return;
    float *ref = malloc((size_t)N * (STEPS + 1) * V * sizeof *ref);
    int32_t *ids = malloc((size_t)N * 256 * sizeof *ids), rtok[N][STEPS];
    for (int i = 0; i < N; i++) {
        tokens(ids + i * 256, lens[i], 300 + (uint64_t)i);
        reference(m, 1, GM_KV_DTYPE_F32, ids + i * 256, lens[i], STEPS, ref + (size_t)i * (STEPS + 1) * V, rtok[i]);
    }
    gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
    gm_seq *s[N];
    int done[N] = {0}, bad = 0, steps = 0;
    gm_error err = {0};
    for (int i = 0; i < N; i++) {
        s[i] = new_seq(e);
        CHECK_OK(gm_seq_append(s[i], ids + i * 256, lens[i], &err), &err);
    }
    for (bool busy = true; busy && steps < 200; steps++) {
        gm_seq *act[N];
        int na = 0, decoding = 0;
        for (int i = 0; i < N; i++)
            if (done[i] <= STEPS) {
                act[na++] = s[i];
                decoding += gm_seq_length(s[i]) - gm_seq_n_computed(s[i]) == 1;
            }
        int rows = -1;
        CHECK_OK(gm_engine_step(e, act, na, decoding + 16, &rows, &err), &err);
        CHECK(rows > 0 && rows <= decoding + 16);
        busy = false;
        for (int i = 0; i < N; i++) {
            const float *l = done[i] <= STEPS ? gm_seq_logits(s[i]) : NULL;
            if (l) {
                if (memcmp(l, ref + ((size_t)i * (STEPS + 1) + done[i]) * V, (size_t)V * sizeof *l) != 0 && bad++ < 3)
                    fprintf(stderr, "  sequence %d (prompt %d) differs from alone after %d tokens\n", i, lens[i], done[i]);
                if (done[i] < STEPS) CHECK_OK(gm_seq_append(s[i], &rtok[i][done[i]], 1, &err), &err);
                done[i]++;
            }
            busy = busy || done[i] <= STEPS;
        }
    }
    CHECK_MSG(bad == 0, "%d logit rows differ between stepped and alone", bad);
    CHECK(steps > 200 / 16); /* the 200-token prompt took many steps */
    int rows = -1;
    CHECK_OK(gm_engine_step(e, s, N, 8, &rows, &err), &err);
    CHECK_EQ_INT(rows, 0); /* nothing pending */
    CHECK_EQ_INT(gm_engine_step(e, s, N, 0, &rows, &err), GM_ERR_ARG);
    for (int i = 0; i < N; i++) gm_seq_free(s[i]);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    gm_model_free(m);
    free(ref);
    free(ids);
}

/* k tokens verified in one forward call equal k single-token decodes; a rollback then continues exactly. */
TEST(verify_k_equals_decodes) {
    gm_model *m = open_model(2);
    if (!m) return;
    enum { K = 6 };
    int32_t ids[80 + K];
    tokens(ids, 80 + K, 5);
    float *ref = malloc((size_t)(K + 1) * V * sizeof *ref), *got = malloc((size_t)K * V * sizeof *got);
    int32_t unused[K];
    gm_error err = {0};
    /* reference: decode the K tokens of ids one at a time */
    gm_engine *e = new_engine(m, 2, 512, false, 0, GM_KV_DTYPE_F32);
    gm_seq *s = new_seq(e);
    CHECK_OK(gm_seq_append(s, ids, 80, &err), &err);
    for (int k = 0; k < K; k++) {
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        CHECK_OK(gm_seq_append(s, &ids[80 + k], 1, &err), &err);
    }
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    gm_seq_free(s);
    /* the logits after each of the K tokens, alone */
    for (int k = 0; k < K; k++) {
        reference(m, 2, GM_KV_DTYPE_F32, ids, 81 + k, 0, ref + (size_t)k * V, unused);
    }
    /* one verify pass of K rows */
    s = new_seq(e);
    CHECK_OK(gm_seq_append(s, ids, 80, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    gm_row rows[K];
    for (int k = 0; k < K; k++) rows[k] = (gm_row){.seq = s, .token = ids[80 + k], .pos = 80 + k, .logits = true};
    CHECK_OK(gm_engine_forward(e, rows, K, got, &err), &err);
    for (int k = 0; k < K; k++)
        CHECK_MSG(memcmp(got + (size_t)k * V, ref + (size_t)k * V, (size_t)V * sizeof *got) == 0,
                  "verify row %d differs from a single decode", k);
    CHECK_EQ_INT(gm_seq_length(s), 80 + K);
    /* reject the last 3 and take another token: equals a fresh run */
    CHECK_OK(gm_seq_truncate(s, 80 + 3, &err), &err);
    CHECK_EQ_INT(gm_seq_n_computed(s), 83);
    int32_t alt[84];
    memcpy(alt, ids, 83 * sizeof *alt);
    alt[83] = TM_BYTE0 + 7;
    CHECK_OK(gm_seq_append(s, &alt[83], 1, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    reference(m, 2, GM_KV_DTYPE_F32, alt, 84, 0, ref, unused);
    CHECK_MSG(gm_seq_logits(s) && memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref) == 0,
              "rollback then continue differs from a fresh run");
    /* misuse: a row that skips a position, a token that contradicts the history */
    rows[0] = (gm_row){.seq = s, .token = 1, .pos = gm_seq_length(s) + 1};
    CHECK_EQ_INT(gm_engine_forward(e, rows, 1, NULL, &err), GM_ERR_ARG);
    rows[0] = (gm_row){.seq = s, .token = (ids[3] + 1) % V, .pos = 3};
    CHECK_EQ_INT(gm_engine_forward(e, rows, 1, NULL, &err), GM_ERR_ARG);
    CHECK_EQ_INT(gm_engine_free(e), GM_ERR_STATE); /* a live sequence */
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    free(got);
    gm_model_free(m);
}

/* A fork shares the parent's blocks (the last one partial): both diverge and both stay exact. */
TEST(fork_then_diverge) {
    gm_model *m = open_model(1);
    if (!m) return;
    int32_t ids[72];
    tokens(ids, 72, 9);
    gm_error err = {0};
    gm_engine *e = new_engine(m, 2, 64, true, 0, GM_KV_DTYPE_F32);
    gm_seq *p = new_seq(e), *f = NULL;
    CHECK_OK(gm_seq_append(p, ids, 70, &err), &err);
    CHECK_OK(gm_engine_eval(e, &p, 1, &err), &err);
    CHECK_OK(gm_seq_fork(p, &f, &err), &err);
    CHECK_EQ_INT(gm_seq_n_computed(f), 70);
    int32_t a[72], b[72];
    memcpy(a, ids, 70 * sizeof *a);
    memcpy(b, ids, 70 * sizeof *b);
    a[70] = TM_BYTE0 + 1, a[71] = TM_BYTE0 + 2;
    b[70] = TM_BYTE0 + 3, b[71] = TM_BYTE0 + 4;
    CHECK_OK(gm_seq_append(p, a + 70, 2, &err), &err);
    CHECK_OK(gm_seq_append(f, b + 70, 2, &err), &err);
    gm_seq *both[2] = {p, f};
    CHECK_OK(gm_engine_eval(e, both, 2, &err), &err);
    float *ref = malloc((size_t)V * sizeof *ref);
    int32_t unused[1];
    reference(m, 2, GM_KV_DTYPE_F32, a, 72, 0, ref, unused);
    CHECK_MSG(memcmp(gm_seq_logits(p), ref, (size_t)V * sizeof *ref) == 0, "parent after the fork differs");
    reference(m, 2, GM_KV_DTYPE_F32, b, 72, 0, ref, unused);
    CHECK_MSG(memcmp(gm_seq_logits(f), ref, (size_t)V * sizeof *ref) == 0, "fork differs");
    gm_seq_free(p);
    gm_seq_free(f);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    gm_model_free(m);
}

/* Truncation then new tokens equals a fresh run: near (blocks kept) and far back (the window before the
 * new end was released: recomputed, or adopted from the index). */
TEST(truncate_then_continue) {
    gm_model *m = open_model(2);
    if (!m) return;
    int32_t ids[200];
    tokens(ids, 200, 11);
    float *ref = malloc((size_t)V * sizeof *ref);
    int32_t unused[1];
    const int cut[] = {140, 100, 5, 64};
    for (int cache = 0; cache < 2; cache++)
        for (size_t c = 0; c < sizeof cut / sizeof cut[0]; c++) {
            gm_error err = {0};
            gm_engine *e = new_engine(m, 2, 512, cache, 0, GM_KV_DTYPE_F32);
            gm_seq *s = new_seq(e);
            CHECK_OK(gm_seq_append(s, ids, 150, &err), &err);
            CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
            CHECK_OK(gm_seq_truncate(s, cut[c], &err), &err);
            int32_t more[20];
            tokens(more, 20, 77 + c);
            more[0] = TM_BYTE0 + 9;
            CHECK_OK(gm_seq_append(s, more, 20, &err), &err);
            CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
            int32_t full[200];
            memcpy(full, ids, (size_t)cut[c] * sizeof *full);
            memcpy(full + cut[c], more, 20 * sizeof *full);
            reference(m, 1, GM_KV_DTYPE_F32, full, cut[c] + 20, 0, ref, unused);
            CHECK_MSG(gm_seq_logits(s) && memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref) == 0,
                      "truncate to %d then 20 tokens differs (prefix index %s)", cut[c], cache ? "on" : "off");
            CHECK_EQ_INT(gm_seq_truncate(s, 1000, &err), GM_ERR_ARG);
            gm_seq_free(s);
            gm_engine_free(e);
        }
    free(ref);
    gm_model_free(m);
}

/* A second sequence whose tokens start like a first one's adopts its blocks — past the window — and gets
 * the logits of a full recomputation; a sequence alive or freed alike. */
TEST(row_doors) {
    gm_model *m = open_model(2);
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    enum { N = 70 };
    int32_t ids[N], other[N];
    tokens(ids, N, 51);
    tokens(other, N, 52);
    gm_engine *e = new_engine(m, 2, 64, true, 0, GM_KV_DTYPE_F32);
    gm_error err = {0};
    if (!e) goto out;
    gm_seq *a = new_seq(e), *b = new_seq(e), *c = new_seq(e);
    gm_row *rows = calloc(2 * N, sizeof *rows);
    float *taps = malloc((size_t)N * 2 * d * sizeof *taps), *hid = malloc((size_t)2 * N * d * sizeof *hid);
    float *emb = malloc((size_t)N * d * sizeof *emb), *la = malloc((size_t)V * sizeof *la);
    float *lbc = malloc((size_t)2 * V * sizeof *lbc), *lc = malloc((size_t)(STEPS + 1) * V * sizeof *lc);
    int32_t unused[STEPS];
    rows[0] = (gm_row){.seq = a, .token = ids[0], .pos = 0, .taps = taps};
    CHECK(gm_engine_forward(e, rows, 1, NULL, &err) == GM_ERR_ARG && strstr(err.msg, "gm_engine_set_taps"));
    const int bad[1] = {6}, layers[2] = {0, 3};
    CHECK(gm_engine_set_taps(e, bad, 1, &err) == GM_ERR_ARG);
    CHECK_OK(gm_engine_set_taps(e, layers, 2, &err), &err);
    /* a: the tokens, every row's taps and hidden state */
    for (int i = 0; i < N; i++)
        rows[i] = (gm_row){.seq = a, .token = ids[i], .pos = i, .logits = i == N - 1, .hidden = hid + (size_t)i * d,
                           .taps = taps + (size_t)i * 2 * d};
    CHECK_OK(gm_engine_forward(e, rows, N, la, &err), &err);
    for (int i = 0; i < N; i++) memcpy(emb + (size_t)i * d, taps + (size_t)i * 2 * d, (size_t)d * sizeof *emb);
    /* b: layer 0's inputs as embeddings, interleaved with c's tokens in one call */
    for (int i = 0; i < N; i++) {
        rows[2 * i] = (gm_row){.seq = b, .token = ids[i], .pos = i, .logits = i == N - 1, .embed = emb + (size_t)i * d,
                               .hidden = hid + (size_t)(N + i) * d};
        rows[2 * i + 1] = (gm_row){.seq = c, .token = other[i], .pos = i, .logits = i == N - 1};
    }
    CHECK_OK(gm_engine_forward(e, rows, 2 * N, lbc, &err), &err);
    CHECK_MSG(!memcmp(la, lbc, (size_t)V * sizeof *la), "embedding rows: logits differ from the tokens'");
    CHECK_MSG(!memcmp(hid, hid + (size_t)N * d, (size_t)N * d * sizeof *hid), "embedding rows: hidden states differ");
    reference(m, 2, GM_KV_DTYPE_F32, other, N, 0, lc, unused);
    CHECK_MSG(!memcmp(lbc + V, lc, (size_t)V * sizeof *lc), "a token sequence next to embedding rows changed");
    CHECK_EQ_INT(a->kv.n_hashed, N / GM_KV_BLOCK);
    CHECK_EQ_INT(b->kv.n_hashed, 0); /* keys of embedding rows are not a function of the ids */
    /* and the embeddings are what is read: other inputs under the same ids, other logits */
    gm_seq *x = new_seq(e);
    for (int i = 0; i < N * d; i++) emb[i] *= 0.5f;
    for (int i = 0; i < N; i++)
        rows[i] = (gm_row){.seq = x, .token = ids[i], .pos = i, .logits = i == N - 1, .embed = emb + (size_t)i * d};
    CHECK_OK(gm_engine_forward(e, rows, N, lbc, &err), &err);
    CHECK_MSG(memcmp(la, lbc, (size_t)V * sizeof *la) != 0, "halved embeddings gave the tokens' logits");
    gm_seq_free(x);
    gm_seq_free(a);
    gm_seq_free(b);
    gm_seq_free(c);
    free(rows), free(taps), free(hid), free(emb), free(la), free(lbc), free(lc);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
out:
    gm_model_free(m);
}

TEST(f16_close_to_f32) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        int32_t ids[150], unused[1];
        tokens(ids, 150, 51);
        float *r32 = malloc((size_t)V * sizeof *r32), *r16 = malloc((size_t)V * sizeof *r16);
        reference(m, 2, GM_KV_DTYPE_F32, ids, 150, 0, r32, unused);
        reference(m, 2, GM_KV_DTYPE_F16, ids, 150, 0, r16, unused);
        double d = 0, mx = 0;
        for (int i = 0; i < V; i++) d = fmax(d, fabs((double)r32[i] - r16[i])), mx = fmax(mx, fabs((double)r32[i]));
        CHECK_MSG(d <= 1e-2 * fmax(1.0, mx), "%s: F16 KV moved the logits by %.3g (max |logit| %.3g)", ARCHS[a], d, mx);
        CHECK_MSG(d > 0, "%s: F16 KV gave F32's exact logits: is it really stored in F16?", ARCHS[a]);
        gm_engine *e32 = new_engine(m, 1, 64, true, 0, GM_KV_DTYPE_F32), *e16 = new_engine(m, 1, 64, true, 0, GM_KV_DTYPE_F16);
        gm_kv_stats s32, s16;
        gm_engine_kv_stats(e32, &s32);
        gm_engine_kv_stats(e16, &s16);
        CHECK_EQ_INT(s16.bytes_per_token * 2, s32.bytes_per_token);
        gm_engine_free(e32);
        gm_engine_free(e16);
        free(r32);
        free(r16);
        gm_model_free(m);
    }
}

/* The ISA level is an option: the model's (made at open) is the engine's unless it asks for another, which
 * is refused; unknown levels are refused; the sequences' samplers get the level's exp. */
TEST(isa_options) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_EQ_INT(gm_model_open(PATH[0], &(gm_model_options){.isa = (gm_isa)7}, &m, &err), GM_ERR_ARG);
    CHECK(m == NULL && strstr(err.msg, "ISA") != NULL);
    m = open_model(0);
    if (m) CHECK(gm_model_isa(m) == gm_isa_supported());
    gm_model_free(m);
    CHECK_OK(gm_model_open(PATH[0], &(gm_model_options){.isa = GM_ISA_SCALAR}, &m, &err), &err);
    if (!m) return;
    CHECK(gm_model_isa(m) == GM_ISA_SCALAR);
    gm_engine *e = NULL;
    CHECK_EQ_INT(gm_engine_new(m, &(gm_engine_options){.isa = (gm_isa)-1}, &e, &err), GM_ERR_ARG);
    if (gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2)) {
        CHECK_EQ_INT(gm_engine_new(m, &(gm_engine_options){.isa = GM_ISA_AVX2}, &e, &err), GM_ERR_ARG);
        CHECK_MSG(strstr(err.msg, "avx2") && strstr(err.msg, "scalar"), "message: %s", err.msg);
        gm_generator *g = NULL;
        CHECK_EQ_INT(gm_generator_new(m, &(gm_generator_options){.isa = GM_ISA_AVX512}, &g, &err),
                     GM_ERR_ARG);
        CHECK(g == NULL);
    }
    const gm_isa ok[2] = {GM_ISA_AUTO, GM_ISA_SCALAR};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(gm_engine_new(m, &(gm_engine_options){.n_ctx = 64, .isa = ok[i]}, &e, &err), &err);
        if (!e) continue;
        gm_seq *s = new_seq(e);
        if (s) CHECK(s->smp.exp_sum == gm_exp_sum);
        gm_seq_free(s);
        gm_engine_free(e);
    }
    gm_model_free(m);
}

/* ---------------------------------------------------------------- the default model */

/* A 700-token prompt: one pass equals chunks of 64; a second sequence sharing the 700 tokens reuses 640
 * positions (10 blocks, past the 512-token window) and gets the same logits; two sequences decoding in one
 * batch equal each alone. */
static void default_model_case(gm_isa isa) {
    if (!test_have_default_model(__func__)) return;
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(GM_DEFAULT_MODEL, &(gm_model_options){.isa = isa}, &m, &err), &err);
    if (!m) return;
    const int Vr = gm_model_config(m)->n_vocab;
    enum { N = 700 };
    int32_t ids[N + 10];
    uint64_t seed = 3;
    ids[0] = gm_model_config(m)->bos_id;
    for (int i = 1; i < N + 10; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 1000 + (int32_t)((seed >> 33) % 20000);
    }
    float *one = malloc((size_t)Vr * sizeof *one);
    gm_engine_options o1 = {.n_threads = gm_test_threads(2), .n_ctx = 1024, .n_batch = 512, .no_prefix_cache = true};
    gm_engine_options o2 = {.n_threads = gm_test_threads(1), .n_ctx = 1024, .n_batch = 64, .kv_mem = (size_t)256 << 20};
    gm_engine *e1 = NULL, *e2 = NULL;
    CHECK_OK(gm_engine_new(m, &o1, &e1, &err), &err);
    CHECK_OK(gm_engine_new(m, &o2, &e2, &err), &err);
    if (!e1 || !e2) return;
    gm_seq *a = new_seq(e1), *b = new_seq(e2), *c = new_seq(e2);
    CHECK_OK(gm_seq_append(a, ids, N, &err), &err);
    CHECK_OK(gm_engine_eval(e1, &a, 1, &err), &err);
    memcpy(one, gm_seq_logits(a), (size_t)Vr * sizeof *one);
    CHECK_OK(gm_seq_append(b, ids, N, &err), &err);
    CHECK_OK(gm_engine_eval(e2, &b, 1, &err), &err);
    CHECK_MSG(memcmp(one, gm_seq_logits(b), (size_t)Vr * sizeof *one) == 0,
              "700 tokens in one pass (2 threads) differ from chunks of 64 (1 thread)");
    CHECK_OK(gm_seq_append(c, ids, N, &err), &err);
    CHECK_OK(gm_engine_eval(e2, &c, 1, &err), &err);
    CHECK_MSG(gm_seq_n_reused(c) >= 640, "reused %d positions of a 700-token shared prefix", gm_seq_n_reused(c));
    CHECK_MSG(memcmp(one, gm_seq_logits(c), (size_t)Vr * sizeof *one) == 0, "logits after the reused prefix differ");
    /* decode: a alone; b with c and three forks of c in one batch (5 rows: the prefill kernels), other
     * next tokens for the others */
    gm_seq *batch[5] = {b, c};
    for (int i = 2; i < 5; i++) CHECK_OK(gm_seq_fork(c, &batch[i], &err), &err);
    int bad = 0;
    for (int t = 0; t < 6; t++) {
        int32_t tb = ids[N + t];
        CHECK_OK(gm_seq_append(a, &tb, 1, &err), &err);
        CHECK_OK(gm_seq_append(b, &tb, 1, &err), &err);
        for (int i = 1; i < 5; i++) {
            int32_t tc = ids[N + 9 - t] + i;
            CHECK_OK(gm_seq_append(batch[i], &tc, 1, &err), &err);
        }
        CHECK_OK(gm_engine_eval(e1, &a, 1, &err), &err);
        CHECK_OK(gm_engine_eval(e2, batch, 5, &err), &err);
        bad += memcmp(gm_seq_logits(a), gm_seq_logits(b), (size_t)Vr * sizeof *one) != 0;
    }
    CHECK_MSG(bad == 0, "%s: %d of 6 decode steps differ between alone (2 threads) and a batch of 5 (1 thread)",
              gm_isa_name(gm_model_isa(m)), bad);
    gm_seq_free(a);
    for (int i = 0; i < 5; i++) gm_seq_free(batch[i]);
    gm_engine_free(e1);
    gm_engine_free(e2);
    free(one);
    gm_model_free(m);
}

/* The default model (sliding window 512): a 700-token prompt repeated after its sequence is gone computes one
 * token, 699 adopted (past the window), with the bits of an engine without a prefix index; so does a prompt of
 * exactly 640 tokens (10 full blocks: 9 adopted whole, 63 rows of the tenth). */
TEST(default_model) { default_model_case(GM_ISA_AUTO); }

/* At the AVX2 level too (below AVX-512 CPUs: x8 copies, the few-token kernels for the batch of 5) */
TEST(default_model_avx2) {
    if (gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX512)) default_model_case(GM_ISA_AVX2);
}

int main(int argc, char **argv) {
    if (!ef_setup()) return 1;
    const char *only = argc > 1 ? argv[1] : NULL;
#define MAYBE(t) \
    if (!only || !strcmp(only, #t)) RUN(t)
    MAYBE(batch_equals_alone);
    MAYBE(batch_equals_alone_avx2_quantized);
    MAYBE(step_equals_alone);
    MAYBE(verify_k_equals_decodes);
    MAYBE(fork_then_diverge);
    MAYBE(truncate_then_continue);
    MAYBE(row_doors);
    MAYBE(f16_close_to_f32);
    MAYBE(isa_options);
    MAYBE(default_model);
    MAYBE(default_model_avx2);
    ef_cleanup();
    return test_summary();
}
