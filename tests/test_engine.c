/* tests/test_engine.c — the engine and its sequences (gemma.h, "engine and sequences").
 *
 * The property under test is exactness: a sequence's logits are BIT-identical (memcmp) whether it runs
 * alone or in a batch with others, in one pass or in chunks, one token at a time or k at once, on 1 or 2
 * threads, after a fork, after a truncation, and when its prefix comes from the prefix index instead of
 * being computed. The references are fresh engines without a prefix index, one sequence at a time.
 * Also: eviction under a small budget, the out-of-memory error, embeddings never matched by token ids,
 * F16 storage within a stated tolerance of F32, and misuse errors. Tiny synthetic models (window 8, so
 * windows and 64-position blocks are crossed within a few hundred tokens) and, when present, the
 * default model (window 512: a 700-token shared prefix). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "kernels/cpu.h"
#include "engine/engine.h" /* the block hashes a sequence keeps (struct gm_seq), its sampler */
#include "support/test.h"
#include "support/tiny_model.h"

static const char *ARCHS[] = {"gemma", "gemma2", "gemma3"};
/* PATH[3]: gemma3 with the quantized types of the Q4_K_M files (Q5_0 layers, Q6_K ffn_down, Q8_0 embedding), whose
 * decode rows run the AVX2 few-token kernels (kernels/mtok_avx2.c) when opened at that level */
static char PATH[4][256];
static int V;

static gm_model *open_model(int a) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(PATH[a], NULL, &m, &err), &err);
    return m;
}

static gm_engine *new_engine(const gm_model *m, int threads, int n_batch, bool cache, size_t kv_mem, gm_kv_dtype kt) {
    gm_error err = {0};
    gm_engine *e = NULL;
    gm_engine_options o = {.n_threads = gm_test_threads(threads), .n_ctx = 1024, .n_batch = n_batch, .kv_mem = kv_mem,
                           .kv_type = kt, .no_prefix_cache = !cache};
    CHECK_OK(gm_engine_new(m, &o, &e, &err), &err);
    return e;
}

static gm_seq *new_seq(gm_engine *e) {
    gm_error err = {0};
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    return s;
}

static void tokens(int32_t *ids, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = TM_BYTE0 + (int32_t)((seed >> 33) % (uint64_t)(tm_vocab_size() - TM_BYTE0));
    }
    ids[0] = TM_BOS;
}

static int32_t argmax(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return (int32_t)best;
}

/* The reference: ids evaluated alone in a fresh engine (no index, one pass), then `steps` greedy tokens one
 * at a time; logits after the prompt and after each token into ref ((steps + 1) x V), tokens into out. */
static void reference(const gm_model *m, int threads, gm_kv_dtype kt, const int32_t *ids, int n, int steps,
                      float *ref, int32_t *out) {
    gm_engine *e = new_engine(m, threads, 512, false, 0, kt);
    if (!e) return;
    gm_seq *s = new_seq(e);
    gm_error err = {0};
    CHECK_OK(gm_seq_append(s, ids, n, &err), &err);
    for (int t = 0; t <= steps; t++) {
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        const float *l = gm_seq_logits(s);
        if (!l) break;
        memcpy(ref + (size_t)t * V, l, (size_t)V * sizeof *l);
        if (t == steps) break;
        out[t] = argmax(l, V);
        CHECK_OK(gm_seq_append(s, &out[t], 1, &err), &err);
    }
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
}

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
TEST(prefix_reuse_past_window) {
    for (int a = 1; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        int32_t ids[300], other[300];
        tokens(ids, 300, 21);
        memcpy(other, ids, 260 * sizeof *other);
        tokens(other + 260, 40, 22);
        other[260] = TM_BYTE0 + 5;
        float *ref = malloc((size_t)V * sizeof *ref);
        int32_t unused[1];
        reference(m, 2, GM_KV_DTYPE_F32, other, 300, 0, ref, unused);
        for (int keep_first = 0; keep_first < 2; keep_first++) {
            gm_error err = {0};
            gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
            gm_seq *s1 = new_seq(e), *s2 = new_seq(e);
            CHECK_OK(gm_seq_append(s1, ids, 300, &err), &err);
            CHECK_OK(gm_engine_eval(e, &s1, 1, &err), &err);
            if (!keep_first) {
                gm_seq_free(s1);
                s1 = NULL;
            }
            CHECK_OK(gm_seq_append(s2, other, 300, &err), &err);
            CHECK_OK(gm_engine_eval(e, &s2, 1, &err), &err);
            /* 4 full blocks of the 260 shared; once the first sequence is gone, its last block's first 4 rows too */
            const int want = keep_first ? 256 : 260;
            CHECK_MSG(gm_seq_n_reused(s2) == want, "%s: %d positions reused, expected %d (first sequence %s)", ARCHS[a],
                      gm_seq_n_reused(s2), want, keep_first ? "alive" : "freed");
            CHECK_MSG(gm_seq_logits(s2) && memcmp(gm_seq_logits(s2), ref, (size_t)V * sizeof *ref) == 0,
                      "%s: logits after a reused prefix differ from recomputation (first sequence %s)", ARCHS[a],
                      keep_first ? "alive" : "freed");
            gm_kv_stats st;
            gm_engine_kv_stats(e, &st);
            CHECK(st.reused_positions == want);
            gm_seq_free(s1);
            gm_seq_free(s2);
            CHECK_EQ_INT(gm_engine_free(e), GM_OK);
        }
        free(ref);
        gm_model_free(m);
    }
}

/* The prefix index's block hash is keyed per engine (a client cannot precompute collisions): the same
 * prompt hashes differently in two engines, alike within one, and reuse within an engine still works. */
TEST(block_hash_keyed_per_engine) {
    gm_model *m = open_model(2);
    if (!m) return;
    int32_t ids[130];
    tokens(ids, 130, 31);
    gm_error err = {0};
    gm_engine *e[2] = {new_engine(m, 1, 512, true, 0, GM_KV_DTYPE_F32), new_engine(m, 1, 512, true, 0, GM_KV_DTYPE_F32)};
    gm_seq *s[3] = {new_seq(e[0]), new_seq(e[1]), new_seq(e[0])};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(gm_seq_append(s[i], ids, 130, &err), &err);
        CHECK_OK(gm_engine_eval(e[i == 1], &s[i], 1, &err), &err);
        CHECK_EQ_INT(s[i]->kv.n_hashed, 2);
    }
    CHECK_MSG(s[0]->kv.hash[0] != s[1]->kv.hash[0] && s[0]->kv.hash[1] != s[1]->kv.hash[1],
              "two engines hash the same blocks alike: the hash is not keyed per engine");
    CHECK(s[0]->kv.hash[0] == s[2]->kv.hash[0] && s[0]->kv.hash[1] == s[2]->kv.hash[1]);
    CHECK_EQ_INT(gm_seq_n_reused(s[1]), 0);
    CHECK_EQ_INT(gm_seq_n_reused(s[2]), 128);
    CHECK(memcmp(gm_seq_logits(s[0]), gm_seq_logits(s[2]), (size_t)V * sizeof(float)) == 0);
    CHECK(memcmp(gm_seq_logits(s[0]), gm_seq_logits(s[1]), (size_t)V * sizeof(float)) == 0);
    for (int i = 0; i < 3; i++) gm_seq_free(s[i]);
    for (int i = 0; i < 2; i++) CHECK_EQ_INT(gm_engine_free(e[i]), GM_OK);
    gm_model_free(m);
}

/* Prefix-cache scopes: a sequence adopts only blocks entered under its own scope; logits are the same
 * bits whether reused or computed; a fork keeps the scope; the scope is fixed once anything is computed. */
TEST(prefix_scopes) {
    gm_model *m = open_model(2);
    if (!m) return;
    int32_t ids[200];
    tokens(ids, 200, 41);
    gm_error err = {0};
    gm_engine *e = new_engine(m, 1, 512, true, 0, GM_KV_DTYPE_F32);
    const uint64_t scope[5] = {7, 9, 7, 0, 0}; /* tenant 7, tenant 9, tenant 7 again, shared, shared */
    const int want[5] = {0, 0, 192, 0, 192};
    gm_seq *s[5];
    for (int i = 0; i < 5; i++) {
        s[i] = new_seq(e);
        CHECK_OK(gm_seq_set_prefix_scope(s[i], scope[i], &err), &err);
        CHECK_OK(gm_seq_append(s[i], ids, 200, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s[i], 1, &err), &err);
        CHECK_MSG(gm_seq_n_reused(s[i]) == want[i], "sequence %d (scope %llu): %d positions reused, expected %d", i,
                  (unsigned long long)scope[i], gm_seq_n_reused(s[i]), want[i]);
        CHECK(memcmp(gm_seq_logits(s[i]), gm_seq_logits(s[0]), (size_t)V * sizeof(float)) == 0);
    }
    CHECK_EQ_INT(gm_seq_set_prefix_scope(s[0], 9, &err), GM_ERR_STATE);
    CHECK_OK(gm_seq_set_prefix_scope(s[0], 7, &err), &err); /* the scope it has */
    CHECK_EQ_INT(gm_seq_set_prefix_scope(NULL, 7, &err), GM_ERR_ARG);
    for (int i = 0; i < 5; i++) gm_seq_free(s[i]);
    /* a fork continues under its parent's scope: a prompt only tenant 9 has seen, recomputed by a fork of
     * tenant 9's sequence, comes from tenant 9's blocks */
    int32_t own[200];
    tokens(own, 200, 42);
    gm_seq *t9 = new_seq(e), *f = NULL;
    CHECK_OK(gm_seq_set_prefix_scope(t9, 9, &err), &err);
    CHECK_OK(gm_seq_append(t9, own, 200, &err), &err);
    CHECK_OK(gm_engine_eval(e, &t9, 1, &err), &err);
    CHECK_OK(gm_seq_fork(t9, &f, &err), &err);
    CHECK_OK(gm_seq_set_prefix_scope(f, 9, &err), &err); /* computed, but the scope it has */
    gm_seq_free(t9);
    CHECK_OK(gm_seq_truncate(f, 0, &err), &err);
    CHECK_OK(gm_seq_append(f, own, 200, &err), &err);
    CHECK_OK(gm_engine_eval(e, &f, 1, &err), &err);
    CHECK_EQ_INT(gm_seq_n_reused(f), 199); /* 3 blocks, then t9's last block's rows: all but the last token */
    gm_seq *g = new_seq(e); /* the shared scope: nothing of tenant 9's, only the BOS row its own prompts began with */
    CHECK_OK(gm_seq_append(g, own, 200, &err), &err);
    CHECK_OK(gm_engine_eval(e, &g, 1, &err), &err);
    CHECK_EQ_INT(gm_seq_n_reused(g), 1);
    CHECK(memcmp(gm_seq_logits(f), gm_seq_logits(g), (size_t)V * sizeof(float)) == 0);
    gm_seq_free(f);
    gm_seq_free(g);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    gm_model_free(m);
}

/* ---------------------------------------------------------------- repeats: tails of freed sequences */

/* Rows computed by one gm_engine_step of s with room for everything pending. */
static int step_rows(gm_engine *e, gm_seq *s) {
    gm_error err = {0};
    int rows = -1;
    CHECK_OK(gm_engine_step(e, &s, 1, 512, &rows, &err), &err);
    return rows;
}

/* Greedy decoding of `steps` tokens after s's prompt: each step's logits equal ref's (steps + 1) x V. */
static bool decode_matches(gm_engine *e, gm_seq *s, const float *ref, const int32_t *rtok, int steps) {
    gm_error err = {0};
    bool ok = gm_seq_logits(s) && !memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref);
    for (int t = 0; t < steps && ok; t++) {
        CHECK_OK(gm_seq_append(s, &rtok[t], 1, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        ok = gm_seq_logits(s) && !memcmp(gm_seq_logits(s), ref + (size_t)(t + 1) * V, (size_t)V * sizeof *ref);
    }
    return ok;
}

/* A prompt repeated after the sequence that computed it is gone computes only its last token, whatever its
 * length (inside the first block, at and around block boundaries, past the window), with the bits of a fresh
 * engine, then decodes them too (the adopted block copied at its first write). Another tenant computes all. */
TEST(repeat_computes_last_token) {
    const int lens[] = {1, 2, 5, 63, 64, 65, 127, 128, 150, 200};
    enum { RSTEPS = 4 };
    for (int a = 0; a < 3; a += 2) { /* gemma: every layer global; gemma3: window 8 */
        gm_model *m = open_model(a);
        if (!m) continue;
        float *ref = malloc((size_t)(RSTEPS + 1) * V * sizeof *ref);
        int32_t ids[200], rtok[RSTEPS];
        gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
        gm_error err = {0};
        for (size_t c = 0; c < sizeof lens / sizeof *lens; c++) {
            const int L = lens[c];
            tokens(ids, L, 700 + c);
            reference(m, 1, GM_KV_DTYPE_F32, ids, L, RSTEPS, ref, rtok);
            gm_seq *first = new_seq(e);
            CHECK_OK(gm_seq_append(first, ids, L, &err), &err);
            CHECK_OK(gm_engine_eval(e, &first, 1, &err), &err);
            CHECK(decode_matches(e, first, ref, rtok, c % 2 ? 2 : 0)); /* with or without decoded rows after it */
            gm_seq_free(first);
            gm_kv_stats st0, st1;
            gm_engine_kv_stats(e, &st0);
            gm_seq *again = new_seq(e), *other = new_seq(e);
            CHECK_OK(gm_seq_set_prefix_scope(other, 99 + c, &err), &err); /* a tenant new to this engine */
            CHECK_OK(gm_seq_append(again, ids, L, &err), &err);
            CHECK_OK(gm_seq_append(other, ids, L, &err), &err);
            CHECK_MSG(step_rows(e, again) == 1, "%s, %d tokens: the repeat computed more than its last token", ARCHS[a], L);
            CHECK_EQ_INT(gm_seq_n_reused(again), L - 1);
            gm_engine_kv_stats(e, &st1);
            CHECK_EQ_INT(st1.reused_positions - st0.reused_positions, L - 1);
            CHECK_MSG(decode_matches(e, again, ref, rtok, RSTEPS), "%s, %d tokens: the repeat's logits differ", ARCHS[a], L);
            CHECK_MSG(step_rows(e, other) == L && gm_seq_n_reused(other) == 0, "%s, %d tokens: another scope reused %d",
                      ARCHS[a], L, gm_seq_n_reused(other));
            CHECK(decode_matches(e, other, ref, rtok, 0));
            gm_seq_free(again);
            gm_seq_free(other);
        }
        CHECK_EQ_INT(gm_engine_free(e), GM_OK);
        free(ref);
        gm_model_free(m);
    }
}

/* A prompt that extends a freed one inside its last block adopts all of it; one that parts inside it adopts
 * the rows before the difference; forks of an adopted tail (n choices) and a rollback into it stay exact, and
 * a fork's history, repeated once it is gone, again computes only its last token. */
TEST(repeat_extend_diverge_fork) {
    gm_model *m = open_model(2);
    if (!m) return;
    enum { L = 150 };
    int32_t ids[L + 40], other[L + 40], unused[1];
    tokens(ids, L + 40, 801);
    float *ref = malloc((size_t)V * sizeof *ref);
    gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
    gm_error err = {0};
    gm_seq *s = new_seq(e);
    CHECK_OK(gm_seq_append(s, ids, L, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    gm_seq_free(s);
    /* {tokens, position changed (-1: none), positions reused} */
    const int cases[][3] = {{L + 30, -1, L}, {L + 10, 140, 140}, {L, 128, 128}};
    for (size_t c = 0; c < 3; c++) {
        memcpy(other, ids, sizeof ids);
        if (cases[c][1] >= 0) other[cases[c][1]] = TM_BYTE0 + 3 + (other[cases[c][1]] == TM_BYTE0 + 3);
        s = new_seq(e);
        CHECK_OK(gm_seq_append(s, other, cases[c][0], &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        CHECK_MSG(gm_seq_n_reused(s) == cases[c][2], "case %zu: reused %d, want %d", c, gm_seq_n_reused(s), cases[c][2]);
        reference(m, 1, GM_KV_DTYPE_F32, other, cases[c][0], 0, ref, unused);
        CHECK_MSG(!memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref), "case %zu: logits differ", c);
        gm_seq_free(s);
    }
    /* three choices forked from a repeat, each its own next token, in one batch; then one rolls back into the
     * adopted rows and goes another way */
    gm_seq *head = new_seq(e), *f[3];
    CHECK_OK(gm_seq_append(head, ids, L, &err), &err);
    CHECK_EQ_INT(step_rows(e, head), 1);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(gm_seq_fork(head, &f[i], &err), &err);
        const int32_t t = TM_BYTE0 + 10 + i;
        CHECK_OK(gm_seq_append(f[i], &t, 1, &err), &err);
    }
    CHECK_OK(gm_engine_eval(e, f, 3, &err), &err);
    for (int i = 0; i < 3; i++) {
        memcpy(other, ids, L * sizeof *ids);
        other[L] = TM_BYTE0 + 10 + i;
        reference(m, 1, GM_KV_DTYPE_F32, other, L + 1, 0, ref, unused);
        CHECK_MSG(!memcmp(gm_seq_logits(f[i]), ref, (size_t)V * sizeof *ref), "fork %d differs", i);
    }
    CHECK_OK(gm_seq_truncate(f[0], 135, &err), &err);
    CHECK_OK(gm_seq_append(f[0], ids + L, 20, &err), &err);
    CHECK_OK(gm_engine_eval(e, &f[0], 1, &err), &err);
    memcpy(other, ids, 135 * sizeof *ids);
    memcpy(other + 135, ids + L, 20 * sizeof *ids);
    reference(m, 1, GM_KV_DTYPE_F32, other, 155, 0, ref, unused);
    CHECK_MSG(!memcmp(gm_seq_logits(f[0]), ref, (size_t)V * sizeof *ref), "rollback into the adopted rows differs");
    gm_seq_free(head);
    for (int i = 0; i < 3; i++) gm_seq_free(f[i]);
    memcpy(other, ids, L * sizeof *ids);
    other[L] = TM_BYTE0 + 11;
    reference(m, 1, GM_KV_DTYPE_F32, other, L + 1, 0, ref, unused);
    s = new_seq(e);
    CHECK_OK(gm_seq_append(s, other, L + 1, &err), &err);
    CHECK_EQ_INT(step_rows(e, s), 1);
    CHECK_MSG(!memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref), "fork 1's history repeated differs");
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    gm_model_free(m);
}

/* A small budget: cached blocks are evicted least recently used first and results stay exact; live
 * sequences that do not fit get GM_ERR_NOMEM with a message, not a crash. */
TEST(eviction_and_out_of_memory) {
    gm_model *m = open_model(2);
    if (!m) return;
    gm_error err = {0};
    gm_engine *probe = new_engine(m, 1, 64, true, 0, GM_KV_DTYPE_F32);
    gm_kv_stats st;
    gm_engine_kv_stats(probe, &st);
    gm_engine_free(probe);
    const size_t per_block = st.bytes_per_token * 64; /* a block of every group */
    float *ref = malloc((size_t)V * sizeof *ref);
    int32_t unused[1];
    gm_engine *e = new_engine(m, 2, 64, true, 8 * per_block, GM_KV_DTYPE_F32);
    for (int r = 0; r < 6; r++) {
        int32_t ids[200];
        tokens(ids, 200, 300 + (uint64_t)r % 3); /* three distinct prompts, twice each */
        gm_seq *s = new_seq(e);
        CHECK_OK(gm_seq_append(s, ids, 200, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        reference(m, 2, GM_KV_DTYPE_F32, ids, 200, 0, ref, unused);
        CHECK_MSG(gm_seq_logits(s) && memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref) == 0,
                  "round %d under a tight budget differs", r);
        gm_seq_free(s);
    }
    gm_engine_kv_stats(e, &st);
    CHECK_MSG(st.evictions > 0, "no eviction with a budget of 8 blocks (%lld)", (long long)st.evictions);
    CHECK(st.bytes_used <= st.bytes_budget);
    gm_engine_free(e);
    /* live sequences alone exceed the budget */
    e = new_engine(m, 1, 64, true, 2 * per_block, GM_KV_DTYPE_F32);
    gm_seq *s = new_seq(e);
    int32_t ids[400];
    tokens(ids, 400, 1);
    CHECK_OK(gm_seq_append(s, ids, 400, &err), &err);
    CHECK_EQ_INT(gm_engine_eval(e, &s, 1, &err), GM_ERR_NOMEM);
    CHECK_MSG(strstr(err.msg, "KV cache full") != NULL, "message: %s", err.msg);
    CHECK(gm_seq_logits(s) == NULL);
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    gm_model_free(m);
}

/* Positions computed from caller embeddings are not in the index: a sequence of the same ids computes its
 * own, and gets the logits of the ids. */
TEST(embeddings_not_matched_by_ids) {
    gm_model *m = open_model(2);
    if (!m) return;
    const gm_config *c = gm_model_config(m);
    enum { N = 140 };
    int32_t ids[N];
    tokens(ids, N, 41);
    float *emb = malloc((size_t)N * c->d_model * sizeof *emb), *ref = malloc((size_t)V * sizeof *ref);
    for (int i = 0; i < N * c->d_model; i++) emb[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    gm_error err = {0};
    gm_generator *g = NULL;
    gm_generator_options o = {.n_threads = gm_test_threads(2), .n_ctx = 1024};
    CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    CHECK_OK(gm_generator_prefill_from_embeds(g, ids, N, emb, NULL, NULL, &err), &err);
    gm_engine *e = gm_generator_engine(g);
    gm_seq *s = new_seq(e);
    CHECK_OK(gm_seq_append(s, ids, N, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    CHECK_EQ_INT(gm_seq_n_reused(s), 0);
    int32_t unused[1];
    reference(m, 2, GM_KV_DTYPE_F32, ids, N, 0, ref, unused);
    CHECK_MSG(gm_seq_logits(s) && memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref) == 0,
              "ids after an embeddings prefill of the same ids differ from ids alone");
    gm_seq_free(s);
    gm_generator_free(g);
    free(emb);
    free(ref);
    gm_model_free(m);
}

/* The evaluation doors of gm_row (embed, hidden, taps) on the multi-sequence call: a sequence fed its own
 * layer-0 inputs (tapped from a normal run) as embeddings gives the same bits as the tokens, next to another
 * sequence that is unaffected by it; its blocks never enter the prefix index. */
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

/* ---------------------------------------------------------------- images: embedding spans */

enum { IT = 70, IR = 40, IU = 30, IN = IT + IR + IU }; /* text, image rows, text */

/* layer-0 inputs of ids (the embedding lookup times its scale), from layer 0's taps */
static void token_inputs(gm_engine *e, const int32_t *ids, int n, float *out) {
    const int d = gm_model_config(gm_engine_model(e))->d_model, layer0[1] = {0};
    gm_error err = {0};
    CHECK_OK(gm_engine_set_taps(e, layer0, 1, &err), &err);
    gm_seq *s = new_seq(e);
    gm_row *rows = calloc((size_t)n, sizeof *rows);
    for (int i = 0; i < n; i++) rows[i] = (gm_row){.seq = s, .token = ids[i], .pos = i, .taps = out + (size_t)i * d};
    CHECK_OK(gm_engine_forward(e, rows, n, NULL, &err), &err);
    CHECK_OK(gm_engine_set_taps(e, NULL, 0, &err), &err);
    free(rows);
    gm_seq_free(s);
}

static void image_rows(float *x, int n, int d, uint64_t seed) {
    for (int i = 0; i < n * d; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) % 2001) / 1000.0f - 1.0f;
    }
}

/* text, an image span (key, bidirectional), text */
static void append_image_prompt(gm_seq *s, const int32_t *ids, const float *img, uint64_t key, bool bidir) {
    gm_error err = {0};
    const gm_embed_span sp = {.embeds = img, .n = IR, .placeholder = 0, .key = {key, key ^ 77}, .bidirectional = bidir};
    CHECK_OK(gm_seq_append(s, ids, IT, &err), &err);
    CHECK_OK(gm_seq_append_embeds(s, &sp, &err), &err);
    CHECK_OK(gm_seq_append(s, ids + IT + IR, IU, &err), &err);
}

/* An image span's attention is the reference's (Gemma 3 in transformers: causal, and both ways inside the
 * image): the span through the engine against the whole prompt as embeddings under that explicit mask
 * (gm_generator_prefill_from_embeds_masked), on a model without sliding windows, within 1e-5 of the
 * largest logit; and a causal span gives other logits (the door is really open). */
TEST(image_span_attention) {
    gm_model *m = open_model(0);
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    int32_t ids[IN];
    tokens(ids, IN, 61);
    float *emb = malloc((size_t)IN * d * sizeof *emb), *mask = malloc((size_t)IN * IN * sizeof *mask);
    float *img = malloc((size_t)IR * d * sizeof *img);
    image_rows(img, IR, d, 5);
    gm_engine *e = new_engine(m, 2, 512, false, 0, GM_KV_DTYPE_F32);
    gm_error err = {0};
    token_inputs(e, ids, IN, emb);
    memcpy(emb + (size_t)IT * d, img, (size_t)IR * d * sizeof *img);
    for (int i = 0; i < IN; i++)
        for (int j = 0; j < IN; j++) {
            const bool same_image = i >= IT && i < IT + IR && j >= IT && j < IT + IR;
            mask[(size_t)i * IN + j] = j <= i || same_image ? 0.0f : -INFINITY;
        }
    gm_generator *g = NULL;
    gm_generator_options go = {.n_threads = gm_test_threads(2), .n_ctx = 1024};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    const float *want = NULL;
    for (int i = IT; i < IT + IR; i++) ids[i] = 0;
    CHECK_OK(gm_generator_prefill_from_embeds_masked(g, ids, IN, emb, mask, &want, &err), &err);
    gm_seq *s = new_seq(e), *causal = new_seq(e);
    append_image_prompt(s, ids, img, 1, true);
    append_image_prompt(causal, ids, img, 1, false);
    gm_seq *both[2] = {s, causal};
    CHECK_OK(gm_engine_eval(e, both, 2, &err), &err);
    double top = 0, diff = 0, diff_causal = 0;
    for (int v = 0; v < V; v++) {
        top = fmax(top, fabs(want[v]));
        diff = fmax(diff, fabs((double)gm_seq_logits(s)[v] - want[v]));
        diff_causal = fmax(diff_causal, fabs((double)gm_seq_logits(causal)[v] - want[v]));
    }
    CHECK_MSG(diff <= 1e-5 * top, "image span vs explicit mask: max diff %g (max |logit| %g)", diff, top);
    CHECK_MSG(diff_causal > 1e-3 * top, "a causal span matched the bidirectional mask (%g)", diff_causal);
    gm_seq_free(s);
    gm_seq_free(causal);
    gm_generator_free(g);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(emb), free(mask), free(img);
    gm_model_free(m);
}

/* The prefix index and images: the same image (key) after the same text is adopted, bit for bit what a
 * fresh engine computes; another key under the same placeholder ids, or an anonymous span, is not. An image
 * is never split across forward calls: one-row steps give the one-pass bits. */
TEST(image_span_prefix_cache) {
    gm_model *m = open_model(2); /* gemma3: window 8, the image crosses windows and a block boundary */
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    int32_t ids[IN];
    tokens(ids, IN, 62);
    float *img = malloc((size_t)IR * d * sizeof *img), *ref = malloc((size_t)V * sizeof *ref);
    image_rows(img, IR, d, 9);
    gm_error err = {0};
    gm_engine *fresh = new_engine(m, 2, 512, false, 0, GM_KV_DTYPE_F32);
    gm_seq *r = new_seq(fresh);
    append_image_prompt(r, ids, img, 1, true);
    CHECK_OK(gm_engine_eval(fresh, &r, 1, &err), &err);
    memcpy(ref, gm_seq_logits(r), (size_t)V * sizeof *ref);
    gm_seq_free(r);
    CHECK_EQ_INT(gm_engine_free(fresh), GM_OK);

    gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
    gm_seq *a = new_seq(e);
    append_image_prompt(a, ids, img, 1, true);
    int rows = 0, calls = 0;
    do { /* one row at a time: the image goes in one call of its own */
        CHECK_OK(gm_engine_step(e, &a, 1, 1, &rows, &err), &err);
        CHECK(rows == 1 || rows == IR || rows == 0);
        calls++;
    } while (rows > 0 && calls < 200);
    CHECK_EQ_INT(calls, IT + 1 + IU + 1);
    CHECK_MSG(gm_seq_logits(a) && !memcmp(gm_seq_logits(a), ref, (size_t)V * sizeof *ref), "stepped image != one pass");
    struct { uint64_t key; bool anonymous; int reused; } cases[] = {{1, false, 128}, {2, false, 64}, {0, true, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gm_seq *b = new_seq(e);
        append_image_prompt(b, ids, img, cases[c].key, true);
        if (cases[c].anonymous) b->spans[0].key[0] = b->spans[0].key[1] = 0;
        CHECK_OK(gm_engine_eval(e, &b, 1, &err), &err);
        CHECK_MSG(gm_seq_n_reused(b) == cases[c].reused, "case %zu: reused %d, want %d", c, gm_seq_n_reused(b),
                  cases[c].reused);
        CHECK_MSG(!memcmp(gm_seq_logits(b), ref, (size_t)V * sizeof *ref), "case %zu: logits differ", c);
        gm_seq_free(b);
    }
    /* a fork shares the image; truncating before the image and appending text drops it */
    gm_seq *f = NULL;
    CHECK_OK(gm_seq_fork(a, &f, &err), &err);
    CHECK_OK(gm_seq_truncate(f, IT, &err), &err);
    CHECK_EQ_INT(f->n_spans, 0);
    CHECK_OK(gm_seq_append(f, ids + IT, IR + IU, &err), &err);
    CHECK_OK(gm_engine_eval(e, &f, 1, &err), &err);
    CHECK_MSG(memcmp(gm_seq_logits(f), ref, (size_t)V * sizeof *ref) != 0, "text in place of the image gave its logits");
    /* misuse */
    const gm_embed_span big = {.embeds = img, .n = 600, .placeholder = 0, .bidirectional = true};
    CHECK(gm_seq_append_embeds(f, &big, &err) == GM_ERR_ARG && strstr(err.msg, "n_batch"));
    const gm_embed_span bad = {.embeds = img, .n = 2, .placeholder = -1};
    CHECK(gm_seq_append_embeds(f, &bad, &err) == GM_ERR_ARG);
    gm_row row = {.seq = a, .pos = IT, .token = 0};
    CHECK_OK(gm_seq_truncate(a, IT + 1, &err), &err);
    CHECK_OK(gm_seq_truncate(a, IT, &err), &err);
    const gm_embed_span one = {.embeds = img, .n = 1, .placeholder = 0, .key = {3, 3}};
    CHECK_OK(gm_seq_append_embeds(a, &one, &err), &err);
    CHECK_MSG(gm_engine_forward(e, &row, 1, NULL, &err) == GM_ERR_ARG && strstr(err.msg, "gm_seq_append_embeds"),
              "%s", err.msg);
    gm_seq_free(f);
    gm_seq_free(a);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(img), free(ref);
    gm_model_free(m);
}

/* Tails are text only. A text prompt freed, then the same ids with an image over 20 of them (the placeholder
 * ids equal to the text's there): the repeat adopts the text rows before the image and no further; freed, its
 * block holding image rows is not entered, and a second repeat adopts as much again, bit for bit. */
TEST(tail_stops_at_image) {
    gm_model *m = open_model(2);
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    enum { T0 = 100, R = 20, T1 = 5, N = T0 + R + T1 };
    int32_t ids[N];
    tokens(ids, N, 64);
    for (int i = T0; i < T0 + R; i++) ids[i] = 0; /* the placeholder */
    float *img = malloc((size_t)R * d * sizeof *img), *ref = malloc((size_t)V * sizeof *ref);
    image_rows(img, R, d, 13);
    const gm_embed_span sp = {.embeds = img, .n = R, .placeholder = 0, .key = {4, 5}, .bidirectional = true};
    gm_error err = {0};
    gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
    gm_seq *s = new_seq(e);
    CHECK_OK(gm_seq_append(s, ids, N, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    gm_seq_free(s);
    for (int rep = 0; rep < 2; rep++) {
        s = new_seq(e);
        CHECK_OK(gm_seq_append(s, ids, T0, &err), &err);
        CHECK_OK(gm_seq_append_embeds(s, &sp, &err), &err);
        CHECK_OK(gm_seq_append(s, ids + T0 + R, T1, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        CHECK_MSG(gm_seq_n_reused(s) == T0, "repeat %d: reused %d, want %d", rep, gm_seq_n_reused(s), T0);
        if (rep == 0) memcpy(ref, gm_seq_logits(s), (size_t)V * sizeof *ref);
        else CHECK(!memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref));
        gm_seq_free(s);
    }
    gm_engine *fresh = new_engine(m, 2, 512, false, 0, GM_KV_DTYPE_F32);
    s = new_seq(fresh);
    CHECK_OK(gm_seq_append(s, ids, T0, &err), &err);
    CHECK_OK(gm_seq_append_embeds(s, &sp, &err), &err);
    CHECK_OK(gm_seq_append(s, ids + T0 + R, T1, &err), &err);
    CHECK_OK(gm_engine_eval(fresh, &s, 1, &err), &err);
    CHECK_MSG(!memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref), "the image prompt after a text tail differs");
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(fresh), GM_OK);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(img), free(ref);
    gm_model_free(m);
}

/* The generator keeps the cached prefix across turns with images: the same image again computes only the
 * new text; a different image recomputes from the image on. */
TEST(image_span_generator_turns) {
    gm_model *m = open_model(0); /* no window: a rollback keeps what it can */
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    int32_t ids[IN + 20];
    tokens(ids, IN + 20, 63);
    float *img = malloc((size_t)IR * d * sizeof *img);
    image_rows(img, IR, d, 11);
    gm_error err = {0};
    gm_generator *g = NULL;
    gm_generator_options go = {.n_threads = gm_test_threads(2), .n_ctx = 1024};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    gm_prompt_span sp = {.at = IT, .span = {.embeds = img, .n = IR, .placeholder = 0, .key = {5, 6}, .bidirectional = true}};
    CHECK_OK(gm_generator_prefill_spans(g, ids, IT + IU, &sp, 1, &err), &err);
    gm_sampling greedy = gm_sampling_default();
    greedy.temperature = 0;
    int32_t t;
    CHECK_OK(gm_generator_step_cached(g, &greedy, &t, &err), &err);
    CHECK_EQ_INT(gm_generator_n_cached(g), IN);
    CHECK_OK(gm_generator_prefill_spans(g, ids, IT + IU + 20, &sp, 1, &err), &err);
    CHECK_EQ_INT(gm_generator_n_cached(g), IN); /* the image and the text around it kept */
    sp.span.key[0] = 7;
    CHECK_OK(gm_generator_prefill_spans(g, ids, IT + IU + 20, &sp, 1, &err), &err);
    CHECK_EQ_INT(gm_generator_n_cached(g), IT); /* another image: kept up to it */
    CHECK_OK(gm_generator_prefill(g, ids, IT + 5, &err), &err);
    CHECK_EQ_INT(gm_generator_n_cached(g), IT); /* text in place of the image: not kept from the span */
    gm_generator_free(g);
    free(img);
    gm_model_free(m);
}

/* F16 keys/values: within a tolerance of F32 (f16 rounding of k and v: relative 2^-11), and the KV memory
 * halves. */
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
TEST(default_model_repeat) {
    if (!test_have_default_model(__func__)) return;
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(GM_DEFAULT_MODEL, NULL, &m, &err), &err);
    if (!m) return;
    const int Vr = gm_model_config(m)->n_vocab;
    enum { N = 700 };
    int32_t ids[N];
    uint64_t seed = 5;
    ids[0] = gm_model_config(m)->bos_id;
    for (int i = 1; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 1000 + (int32_t)((seed >> 33) % 20000);
    }
    float *want = malloc((size_t)Vr * sizeof *want);
    gm_engine_options plain = {.n_threads = gm_test_threads(2), .n_ctx = 1024, .n_batch = 512, .no_prefix_cache = true};
    gm_engine_options cached = {.n_threads = gm_test_threads(2), .n_ctx = 1024, .n_batch = 512};
    gm_engine *e0 = NULL, *e = NULL;
    CHECK_OK(gm_engine_new(m, &plain, &e0, &err), &err);
    CHECK_OK(gm_engine_new(m, &cached, &e, &err), &err);
    const int lens[2] = {N, 640};
    for (int c = 0; c < 2 && e0 && e; c++) {
        gm_seq *r = new_seq(e0), *s = new_seq(e);
        CHECK_OK(gm_seq_append(r, ids, lens[c], &err), &err);
        CHECK_OK(gm_engine_eval(e0, &r, 1, &err), &err);
        memcpy(want, gm_seq_logits(r), (size_t)Vr * sizeof *want);
        CHECK_OK(gm_seq_append(s, ids, lens[c], &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        gm_seq_free(s);
        s = new_seq(e);
        CHECK_OK(gm_seq_append(s, ids, lens[c], &err), &err);
        int rows = 0;
        CHECK_OK(gm_engine_step(e, &s, 1, 512, &rows, &err), &err);
        CHECK_MSG(rows == 1 && gm_seq_n_reused(s) == lens[c] - 1, "%d tokens: %d rows computed, %d reused", lens[c], rows,
                  gm_seq_n_reused(s));
        CHECK_MSG(gm_seq_logits(s) && !memcmp(want, gm_seq_logits(s), (size_t)Vr * sizeof *want),
                  "%d tokens: the repeat's logits differ", lens[c]);
        gm_seq_free(s);
        gm_seq_free(r);
    }
    gm_engine_free(e0);
    gm_engine_free(e);
    free(want);
    gm_model_free(m);
}

TEST(default_model) { default_model_case(GM_ISA_AUTO); }

/* At the AVX2 level too (below AVX-512 CPUs: x8 copies, the few-token kernels for the batch of 5) */
TEST(default_model_avx2) {
    if (gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX512)) default_model_case(GM_ISA_AVX2);
}

int main(int argc, char **argv) {
    for (int a = 0; a < 4; a++) {
        tm_options o;
        tm_options_default(&o, ARCHS[a < 3 ? a : 2]);
        o.n_layers = a == 2 ? 6 : 3; /* gemma3: layer 5 global, the rest sliding */
        o.sliding_window = 8;
        o.context_length = 1024;
        if (a == 1) o.attn_softcap = 5.0f, o.final_softcap = 10.0f;
        if (a == 3) o.weight_type = GM_TYPE_Q5_0, o.down_type = GM_TYPE_Q6_K, o.embd_type = GM_TYPE_Q8_0, o.d_ff = 256;
        snprintf(PATH[a], sizeof PATH[a], "/tmp/gm_test_engine_%d_%s%s.gguf", (int)getpid(), ARCHS[a < 3 ? a : 2],
                 a == 3 ? "_q" : "");
        char err[256];
        if (!tm_write_gguf(&o, PATH[a], err, sizeof err)) {
            fprintf(stderr, "cannot write %s: %s\n", PATH[a], err);
            return 1;
        }
    }
    V = tm_vocab_size();
    const char *only = argc > 1 ? argv[1] : NULL;
#define MAYBE(t) \
    if (!only || !strcmp(only, #t)) RUN(t)
    MAYBE(batch_equals_alone);
    MAYBE(batch_equals_alone_avx2_quantized);
    MAYBE(step_equals_alone);
    MAYBE(verify_k_equals_decodes);
    MAYBE(fork_then_diverge);
    MAYBE(truncate_then_continue);
    MAYBE(prefix_reuse_past_window);
    MAYBE(block_hash_keyed_per_engine);
    MAYBE(row_doors);
    MAYBE(image_span_attention);
    MAYBE(image_span_prefix_cache);
    MAYBE(image_span_generator_turns);
    MAYBE(tail_stops_at_image);
    MAYBE(prefix_scopes);
    MAYBE(repeat_computes_last_token);
    MAYBE(repeat_extend_diverge_fork);
    MAYBE(eviction_and_out_of_memory);
    MAYBE(embeddings_not_matched_by_ids);
    MAYBE(f16_close_to_f32);
    MAYBE(isa_options);
    MAYBE(default_model);
    MAYBE(default_model_repeat);
    MAYBE(default_model_avx2);
    for (int a = 0; a < 4; a++) unlink(PATH[a]);
    return test_summary();
}
