/* tests/test_generator.c — the generator API on tiny synthetic gemma / gemma2 / gemma3 models:
 * cached == naive, decode == prefill, caller embeddings and attention bias, KV bucket growth,
 * determinism across runs and thread counts, hidden-state taps, GGUF vs HF folder, prompt reuse,
 * and clean errors for misuse. Tolerances: logits compared between two paths of our own f32
 * forward must agree within 1e-4 (the paths differ only in batching / cache layout). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"
#include "support/tiny_model.h"

static const char *ARCHS[] = {"gemma", "gemma2", "gemma3"};
static char PATH[3][256];
static tm_options OPT[3];

static void opts_for(tm_options *o, const char *arch) {
    tm_options_default(o, arch);
    o->n_layers = !strcmp(arch, "gemma3") ? 6 : 3; /* gemma3: layer 5 global, the rest sliding */
    o->sliding_window = 8;
    if (!strcmp(arch, "gemma2")) o->attn_softcap = 5.0f, o->final_softcap = 10.0f;
}

static gm_model *open_model(int a) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(PATH[a], NULL, &m, &err), &err);
    return m;
}

static gm_generator *new_gen(gm_model *m, int threads, int n_ctx, bool kv_full, bool ignore_stop) {
    gm_error err = {0};
    gm_generator *g = NULL;
    gm_generator_options o = {.n_threads = gm_test_threads(threads), .n_ctx = n_ctx, .kv_full = kv_full, .ignore_stop = ignore_stop};
    CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    return g;
}

static void prompt(int32_t *ids, int n, uint64_t seed) {
    ids[0] = TM_BOS;
    for (int i = 1; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = TM_BYTE0 + (int32_t)((seed >> 33) % (uint64_t)(tm_vocab_size() - TM_BYTE0));
    }
}

static double max_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

/* ---------------------------------------------------------------- tests */

TEST(cached_equals_naive_greedy) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        gm_generator *gc = new_gen(m, 2, 128, false, true), *gn = new_gen(m, 2, 128, false, true);
        int32_t ids[5], tc[40], tn[40];
        prompt(ids, 5, 7 + a);
        gm_error err = {0};
        gm_sampling s = gm_sampling_default(); /* greedy; penalties keep the tiny model from repeating itself */
        s.presence_penalty = 100.0f; /* the tiny models otherwise repeat their last token */
        s.repeat_last_n = 16;
        int nc = 0, nn = 0;
        CHECK_OK(gm_generator_prefill(gc, ids, 5, &err), &err);
        CHECK_OK(gm_generator_prefill(gn, ids, 5, &err), &err);
        CHECK_OK(gm_generator_generate_cached(gc, 40, &s, tc, &nc, &err), &err);
        CHECK_OK(gm_generator_generate(gn, 40, &s, tn, &nn, &err), &err);
        CHECK_EQ_INT(nc, 40);
        CHECK_EQ_INT(nn, 40);
        int first = -1, distinct = 0;
        for (int i = 0; i < 40; i++) {
            if (tc[i] != tn[i] && first < 0) first = i;
            bool seen = false;
            for (int j = 0; j < i; j++) seen |= tc[j] == tc[i];
            distinct += !seen;
        }
        CHECK_MSG(first < 0, "%s: cached and naive differ from step %d", ARCHS[a], first);
        CHECK_MSG(distinct >= 10, "%s: only %d distinct tokens: the comparison is too weak", ARCHS[a], distinct);
        fprintf(stderr, "  %s: 40 greedy tokens equal (cached vs naive), %d distinct, history %d past window 8\n",
                ARCHS[a], distinct, 45);
        int n;
        gm_generator_tokens(gc, &n);
        CHECK_EQ_INT(n, 45);
        gm_generator_free(gc);
        gm_generator_free(gn);
        gm_model_free(m);
    }
}

/* Decode steps (from position 70 on, global layers attend over > 64 keys: the split-key decode
 * path) against a fresh batched prefill of the same tokens (one task per position: no split). */
TEST(decode_equals_prefill) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        const int V = gm_model_config(m)->n_vocab;
        gm_generator *g1 = new_gen(m, 2, 128, false, true), *g2 = new_gen(m, 1, 128, false, true);
        int32_t ids[90];
        prompt(ids, 90, 100 + a);
        gm_error err = {0};
        const float *l1 = NULL, *l2 = NULL;
        CHECK_OK(gm_generator_prefill_get_last_logits(g1, ids, 6, &l1, &err), &err);
        double worst = 0;
        for (int k = 6; k < 90 && l1; k++) {
            if (k >= 24 && k < 70) { /* the middle: decode only, compared at the ends */
                CHECK_OK(gm_generator_decode_get_logits(g1, ids[k], &l1, &err), &err);
                continue;
            }
            CHECK_OK(gm_generator_decode_get_logits(g1, ids[k], &l1, &err), &err);
            gm_generator_reset(g2);
            CHECK_OK(gm_generator_prefill_get_last_logits(g2, ids, k + 1, &l2, &err), &err);
            if (l1 && l2) worst = fmax(worst, max_diff(l1, l2, V));
        }
        CHECK_MSG(worst <= 1e-4, "%s: decode vs prefill logits differ by %.3g", ARCHS[a], worst);
        gm_generator_free(g1);
        gm_generator_free(g2);
        gm_model_free(m);
    }
}

/* Token embeddings E[tok] * embed_scale, from the generator's own weight values (tm_weight_values). */
static float *token_embeds(const tm_options *o, const gm_config *c, const int32_t *ids, int n) {
    const int V = tm_vocab_size(), d = c->d_model;
    float *E = malloc(sizeof(float) * (size_t)V * d), *x = malloc(sizeof(float) * (size_t)n * d);
    CHECK(tm_weight_values(o, "token_embd.weight", E, (int64_t)V * d));
    for (int i = 0; i < n; i++)
        for (int j = 0; j < d; j++) x[(size_t)i * d + j] = E[(size_t)ids[i] * d + j] * c->embed_scale;
    free(E);
    return x;
}

TEST(embeds_and_bias) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        const gm_config *c = gm_model_config(m);
        const int V = c->n_vocab, n = 12;
        gm_generator *g1 = new_gen(m, 2, 64, false, true), *g2 = new_gen(m, 2, 64, false, true);
        int32_t ids[12];
        prompt(ids, n, 300 + a);
        float *x = token_embeds(&OPT[a], c, ids, n);
        gm_error err = {0};
        const float *lt = NULL, *le = NULL;
        CHECK_OK(gm_generator_prefill_get_last_logits(g1, ids, n, &lt, &err), &err);
        CHECK_OK(gm_generator_prefill_from_embeds(g2, ids, n, x, NULL, &le, &err), &err);
        if (lt && le) CHECK_MSG(max_diff(lt, le, V) <= 1e-4, "%s: embeds vs tokens %.3g", ARCHS[a], max_diff(lt, le, V));
        /* continuing after either gives the same tokens */
        int32_t t1[8], t2[8];
        gm_sampling s = gm_sampling_default();
        CHECK_OK(gm_generator_generate_cached(g1, 8, &s, t1, NULL, &err), &err);
        CHECK_OK(gm_generator_generate_cached(g2, 8, &s, t2, NULL, &err), &err);
        CHECK(memcmp(t1, t2, sizeof t1) == 0);
        /* a zero bias changes nothing; a -inf on one pair changes the result */
        float *bias = calloc((size_t)n * n, sizeof *bias);
        float *ref = malloc(sizeof(float) * V);
        CHECK_OK(gm_generator_prefill_from_embeds(g2, ids, n, x, NULL, &le, &err), &err);
        if (le) memcpy(ref, le, sizeof(float) * V);
        CHECK_OK(gm_generator_prefill_from_embeds(g2, ids, n, x, bias, &le, &err), &err);
        if (le) CHECK_MSG(max_diff(ref, le, V) <= 1e-6, "%s: zero bias changed logits by %.3g", ARCHS[a], max_diff(ref, le, V));
        bias[(size_t)(n - 1) * n + (n - 2)] = -INFINITY; /* last query may not see the previous key */
        CHECK_OK(gm_generator_prefill_from_embeds(g2, ids, n, x, bias, &le, &err), &err);
        if (le) CHECK_MSG(max_diff(ref, le, V) > 1e-3, "%s: a -inf bias did not change the logits", ARCHS[a]);
        /* a constant added to one query's whole row (over keys it may see) cancels in the softmax */
        memset(bias, 0, sizeof(float) * (size_t)n * n);
        for (int j = 0; j < n; j++) bias[(size_t)(n - 1) * n + j] = 3.0f;
        CHECK_OK(gm_generator_prefill_from_embeds(g2, ids, n, x, bias, &le, &err), &err);
        if (le) CHECK_MSG(max_diff(ref, le, V) <= 1e-4, "%s: a row-constant bias changed logits by %.3g", ARCHS[a],
                          max_diff(ref, le, V));
        /* a full mask that spells out the causal mask (n = 8 fits the window of 8) equals no mask;
         * a bidirectional one (all zeros) changes the result */
        const int nm = 8;
        float *mask = calloc((size_t)nm * nm, sizeof *mask), *causal = malloc(sizeof(float) * V);
        CHECK_OK(gm_generator_prefill_from_embeds(g2, ids, nm, x, NULL, &le, &err), &err);
        if (le) memcpy(causal, le, sizeof(float) * V);
        for (int i = 0; i < nm; i++)
            for (int j = i + 1; j < nm; j++) mask[i * nm + j] = -INFINITY;
        CHECK_OK(gm_generator_prefill_from_embeds_masked(g2, ids, nm, x, mask, &le, &err), &err);
        if (le) CHECK_MSG(max_diff(causal, le, V) <= 1e-5, "%s: causal full mask differs by %.3g", ARCHS[a],
                          max_diff(causal, le, V));
        memset(mask, 0, sizeof(float) * nm * nm);
        CHECK_OK(gm_generator_prefill_from_embeds_masked(g2, ids, nm, x, mask, &le, &err), &err);
        if (le) CHECK_MSG(max_diff(causal, le, V) > 1e-3, "%s: a bidirectional mask changed nothing", ARCHS[a]);
        CHECK_EQ_INT(gm_generator_prefill_from_embeds_masked(g2, ids, nm, x, NULL, &le, &err), GM_ERR_ARG);
        mask[5] = NAN;
        CHECK_EQ_INT(gm_generator_prefill_from_embeds_masked(g2, ids, nm, x, mask, &le, &err), GM_ERR_ARG);
        CHECK(strstr(err.msg, "NaN") != NULL);
        mask[5] = INFINITY;
        CHECK_EQ_INT(gm_generator_prefill_from_embeds(g2, ids, nm, x, mask, &le, &err), GM_ERR_ARG);
        free(mask);
        free(causal);
        /* size / value checks */
        CHECK_EQ_INT(gm_generator_prefill_from_embeds(g2, ids, 0, x, NULL, &le, &err), GM_ERR_ARG);
        CHECK_EQ_INT(gm_generator_prefill_from_embeds(g2, ids, n, NULL, NULL, &le, &err), GM_ERR_ARG);
        x[3] = NAN;
        CHECK_EQ_INT(gm_generator_prefill_from_embeds(g2, ids, n, x, NULL, &le, &err), GM_ERR_ARG);
        CHECK_EQ_INT(gm_generator_prefill_from_embeds(g2, ids, 65, x, NULL, &le, &err), GM_ERR_CONTEXT);
        free(bias);
        free(ref);
        free(x);
        gm_generator_free(g1);
        gm_generator_free(g2);
        gm_model_free(m);
    }
}

TEST(bucket_growth_keeps_tokens) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        gm_generator *gb = new_gen(m, 2, 256, false, true), *gf = new_gen(m, 2, 256, true, true);
        int32_t ids[10], tb[150], tf[150];
        prompt(ids, 10, 500 + a);
        gm_error err = {0};
        gm_sampling s = gm_sampling_default();
        s.presence_penalty = 100.0f; /* the tiny models otherwise repeat their last token */
        s.repeat_last_n = 16;
        CHECK_OK(gm_generator_prefill(gb, ids, 10, &err), &err);
        CHECK_OK(gm_generator_prefill(gf, ids, 10, &err), &err);
        CHECK_OK(gm_generator_generate_cached(gb, 150, &s, tb, NULL, &err), &err); /* grows 64 -> 128 -> 256 */
        CHECK_OK(gm_generator_generate_cached(gf, 150, &s, tf, NULL, &err), &err);
        CHECK_MSG(memcmp(tb, tf, sizeof tb) == 0, "%s: bucketed and full caches give different tokens", ARCHS[a]);
        gm_generator_free(gb);
        gm_generator_free(gf);
        gm_model_free(m);
    }
}

TEST(seeded_sampling_is_deterministic) {
    gm_model *m = open_model(2);
    if (!m) return;
    int32_t ids[6], t[3][40];
    prompt(ids, 6, 900);
    gm_sampling s = gm_sampling_default();
    s.temperature = 1.0f;
    s.top_k = 50;
    s.top_p = 0.95f;
    s.repeat_penalty = 1.1f;
    const int threads[3] = {1, 2, 2};
    const uint64_t seeds[3] = {42, 42, 43};
    for (int r = 0; r < 3; r++) {
        gm_generator *g = new_gen(m, threads[r], 64, false, true);
        gm_error err = {0};
        s.seed = seeds[r];
        CHECK_OK(gm_generator_prefill(g, ids, 6, &err), &err);
        CHECK_OK(gm_generator_generate_cached(g, 40, &s, t[r], NULL, &err), &err);
        /* reset + prefill reseeds: the same run again */
        int32_t again[40];
        CHECK_OK(gm_generator_prefill(g, ids, 6, &err), &err);
        CHECK_OK(gm_generator_generate_cached(g, 40, &s, again, NULL, &err), &err);
        CHECK(memcmp(again, t[r], sizeof again) == 0);
        gm_generator_free(g);
    }
    CHECK_MSG(memcmp(t[0], t[1], sizeof t[0]) == 0, "seed 42: 1 thread and 2 threads differ");
    CHECK_MSG(memcmp(t[1], t[2], sizeof t[0]) != 0, "seeds 42 and 43 gave the same 40 tokens");
    gm_model_free(m);
}

TEST(hidden_state_taps) {
    gm_model *m = open_model(2);
    if (!m) return;
    const gm_config *c = gm_model_config(m);
    gm_generator *g = new_gen(m, 2, 64, false, true);
    gm_error err = {0};
    const int want[] = {5, 0, 99, -1, 0, 2};
    CHECK_OK(gm_generator_set_aux_hidden_layers(g, want, 6, &err), &err);
    int32_t ids[6], tok;
    prompt(ids, 6, 77);
    gm_sampling s = gm_sampling_default();
    CHECK_OK(gm_generator_prefill(g, ids, 6, &err), &err);
    CHECK_OK(gm_generator_step_cached(g, &s, &tok, &err), &err);
    const float *rows;
    const int *layers;
    int n = -1;
    gm_generator_take_last_aux(g, &rows, &layers, &n);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK(layers[0] == 0 && layers[1] == 2 && layers[2] == 5);
        /* layer 0's input is the embedding of the last computed token (ids[5]) times embed_scale */
        float *x = token_embeds(&OPT[2], c, &ids[5], 1);
        CHECK_MSG(max_diff(rows, x, c->d_model) <= 1e-5, "tap of layer 0 is not the scaled embedding");
        free(x);
    }
    gm_generator_take_last_aux(g, &rows, &layers, &n);
    CHECK_EQ_INT(n, 0); /* taken */
    CHECK_OK(gm_generator_step_cached(g, &s, &tok, &err), &err); /* a decode step records again */
    gm_generator_take_last_aux(g, &rows, &layers, &n);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        int nt;
        const int32_t *hist = gm_generator_tokens(g, &nt);
        float *x = token_embeds(&OPT[2], c, &hist[nt - 2], 1); /* the decoded input token */
        CHECK(max_diff(rows, x, c->d_model) <= 1e-5);
        free(x);
    }
    CHECK_OK(gm_generator_set_aux_hidden_layers(g, NULL, 0, &err), &err);
    CHECK_OK(gm_generator_step_cached(g, &s, &tok, &err), &err);
    gm_generator_take_last_aux(g, &rows, &layers, &n);
    CHECK_EQ_INT(n, 0);
    gm_generator_free(g);
    gm_model_free(m);
}

TEST(gguf_and_hf_folder_agree) {
    for (int a = 0; a < 3; a++) {
        for (int dtype = 0; dtype < 2; dtype++) {
            char dir[256], err_s[256];
            snprintf(dir, sizeof dir, "/tmp/gm_test_generator_%d_hf_%s_%d", (int)getpid(), ARCHS[a], dtype);
            tm_hf_options h = {dtype ? GM_TYPE_BF16 : GM_TYPE_F32, dtype ? 2 : 1, false};
            CHECK_MSG(tm_write_hf(&OPT[a], &h, dir, err_s, sizeof err_s), "%s", err_s);
            gm_error err = {0};
            gm_model *mh = NULL, *mg = open_model(a);
            CHECK_OK(gm_model_open(dir, NULL, &mh, &err), &err);
            if (mh && mg) {
                const int V = gm_model_config(mg)->n_vocab;
                CHECK(gm_model_config(mh)->norm_weights_plus_one == false);
                CHECK(gm_model_config(mg)->norm_weights_plus_one == true);
                gm_generator *gh = new_gen(mh, 2, 64, false, true), *gg = new_gen(mg, 2, 64, false, true);
                int32_t ids[20];
                prompt(ids, 20, 1000 + a);
                const float *lh = NULL, *lg = NULL;
                CHECK_OK(gm_generator_prefill_get_last_logits(gh, ids, 20, &lh, &err), &err);
                CHECK_OK(gm_generator_prefill_get_last_logits(gg, ids, 20, &lg, &err), &err);
                /* GGUF holds 1 + w rounded to f32, HF w: the +1 is added in f32 either way */
                if (lh && lg)
                    CHECK_MSG(max_diff(lh, lg, V) <= 1e-4, "%s %s: HF vs GGUF logits differ by %.3g", ARCHS[a],
                              dtype ? "BF16" : "F32", max_diff(lh, lg, V));
                gm_generator_free(gh);
                gm_generator_free(gg);
            }
            gm_model_free(mh);
            gm_model_free(mg);
            char cmd[320];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            CHECK(system(cmd) == 0);
        }
    }
}

/* score_logprobs (streamed, a few rows of logits at a time) == log-softmax of score()'s full logits. */
TEST(score_logprobs_matches_full_logits) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        const int V = gm_model_config(m)->n_vocab, n = 40; /* > 16 rows per pass, past the window */
        gm_generator_options o = {.n_threads = gm_test_threads(2), .n_ctx = 64, .n_batch = 24}; /* two chunks */
        gm_generator *g = NULL;
        gm_error err = {0};
        CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
        int32_t ids[40];
        prompt(ids, n, 2024 + a);
        float *all = malloc(sizeof(float) * (size_t)n * V), lp[39];
        CHECK_OK(gm_generator_prefill(g, ids, n, &err), &err);
        CHECK_OK(gm_generator_score(g, all, &err), &err);
        CHECK_OK(gm_generator_score_logprobs(g, lp, &err), &err);
        double worst = 0;
        for (int i = 0; i + 1 < n; i++) {
            const float *l = all + (size_t)i * V;
            double mx = l[0], z = 0;
            for (int v = 1; v < V; v++) mx = fmax(mx, l[v]);
            for (int v = 0; v < V; v++) z += exp(l[v] - mx);
            worst = fmax(worst, fabs(lp[i] - (l[ids[i + 1]] - mx - log(z))));
            CHECK(lp[i] <= 0.0f);
        }
        CHECK_MSG(worst <= 1e-4, "%s: log-probs differ by %.3g", ARCHS[a], worst);
        /* afterwards the cache holds the history: a cached step samples from the last logits */
        int32_t t1, t2;
        gm_sampling s = gm_sampling_default();
        CHECK_EQ_INT(gm_generator_n_cached(g), n);
        CHECK_OK(gm_generator_step_cached(g, &s, &t1, &err), &err);
        int best = 0;
        for (int v = 1; v < V; v++)
            if (all[(size_t)(n - 1) * V + v] > all[(size_t)(n - 1) * V + best]) best = v;
        t2 = best;
        CHECK_EQ_INT(t1, t2);
        gm_generator_reset(g);
        CHECK_OK(gm_generator_prefill(g, ids, 1, &err), &err);
        CHECK_EQ_INT(gm_generator_score_logprobs(g, lp, &err), GM_ERR_STATE);
        free(all);
        gm_generator_free(g);
        gm_model_free(m);
    }
}

TEST(prompt_reuse_matches_fresh) {
    gm_model *m = open_model(2);
    if (!m) return;
    gm_generator *g = new_gen(m, 2, 64, false, true), *fresh = new_gen(m, 2, 64, false, true);
    int32_t ids[30], t1, t2, t3;
    prompt(ids, 30, 4242);
    gm_error err = {0};
    gm_sampling s = gm_sampling_default();
    CHECK_OK(gm_generator_prefill(g, ids, 12, &err), &err);
    CHECK_OK(gm_generator_step_cached(g, &s, &t1, &err), &err);
    /* a longer prompt sharing the first 12 tokens: only the rest is computed */
    CHECK_OK(gm_generator_prefill(g, ids, 30, &err), &err);
    CHECK_OK(gm_generator_step_cached(g, &s, &t2, &err), &err);
    CHECK_OK(gm_generator_prefill(fresh, ids, 30, &err), &err);
    CHECK_OK(gm_generator_step_cached(fresh, &s, &t3, &err), &err);
    CHECK_EQ_INT(t2, t3);
    /* a shorter prompt (a prefix of the cached history) */
    CHECK_OK(gm_generator_prefill(g, ids, 12, &err), &err);
    CHECK_OK(gm_generator_step_cached(g, &s, &t2, &err), &err);
    CHECK_EQ_INT(t1, t2);
    gm_generator_free(g);
    gm_generator_free(fresh);
    gm_model_free(m);
}

TEST(misuse_gives_clean_errors) {
    gm_model *m = open_model(0);
    if (!m) return;
    gm_error err = {0};
    gm_generator *g = NULL;
    gm_generator_options bad = {.n_ctx = 1 << 30};
    CHECK_EQ_INT(gm_generator_new(m, &bad, &g, &err), GM_ERR_ARG);
    CHECK(g == NULL);
    g = new_gen(m, 1, 16, false, true);
    if (!g) { gm_model_free(m); return; }
    gm_sampling s = gm_sampling_default();
    int32_t tok, ids[20];
    const float *l;
    prompt(ids, 20, 5);
    CHECK_EQ_INT(gm_generator_step(g, &s, &tok, &err), GM_ERR_STATE);
    CHECK_EQ_INT(gm_generator_step_cached(g, &s, &tok, &err), GM_ERR_STATE);
    CHECK(strstr(err.msg, "prefill") != NULL);
    CHECK_EQ_INT(gm_generator_decode_get_logits(g, 5, &l, &err), GM_ERR_STATE);
    CHECK_EQ_INT(gm_generator_prefill(g, ids, 17, &err), GM_ERR_CONTEXT);
    CHECK(strstr(err.msg, "17") != NULL);
    int32_t badid = 100000;
    CHECK_EQ_INT(gm_generator_prefill(g, &badid, 1, &err), GM_ERR_ARG);
    CHECK_EQ_INT(gm_generator_prefill(g, ids, -1, &err), GM_ERR_ARG);
    CHECK_EQ_INT(gm_generator_prefill_get_last_logits(g, ids, 0, &l, &err), GM_ERR_ARG);
    CHECK_OK(gm_generator_prefill(g, ids, 10, &err), &err);
    gm_sampling bs = s;
    bs.top_p = 2.0f;
    CHECK_EQ_INT(gm_generator_step_cached(g, &bs, &tok, &err), GM_ERR_ARG);
    CHECK_EQ_INT(gm_generator_decode_get_logits(g, -3, &l, &err), GM_ERR_ARG);
    /* fill the context: 6 more tokens fit, the 7th is refused */
    int32_t out[10];
    int n = 0;
    CHECK_EQ_INT(gm_generator_generate_cached(g, 10, &s, out, &n, &err), GM_ERR_CONTEXT);
    CHECK_EQ_INT(n, 6);
    CHECK(strstr(err.msg, "context") != NULL);
    CHECK_EQ_INT(gm_generator_set_aux_hidden_layers(g, NULL, 2, &err), GM_ERR_ARG);
    CHECK(gm_generator_is_stop(g, TM_EOS));
    CHECK(gm_generator_is_stop(g, TM_EOT));
    CHECK(!gm_generator_is_stop(g, TM_BOS));
    gm_generator_free(g);
    gm_generator_free(NULL);
    gm_model_free(m);
}

/* Steady-state decoding allocates nothing. The test binary interposes glibc's allocator entry
 * points and counts the calls (every thread) during 30 cached steps with sampling and penalties,
 * once the cache is fully reserved and the sampler's window has its size. Not under sanitizers
 * (they own the allocator). */
#if defined(__SANITIZE_ADDRESS__)
#define GM_NO_INTERPOSE 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GM_NO_INTERPOSE 1
#endif
#endif
#if defined(__GLIBC__) && !defined(GM_NO_INTERPOSE)
#include <stdatomic.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static atomic_long n_allocs;
static atomic_bool counting;
static void count(void) {
    if (atomic_load(&counting)) atomic_fetch_add(&n_allocs, 1);
}
void *malloc(size_t n) { count(); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { count(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { count(); return __libc_realloc(p, n); }
void *aligned_alloc(size_t al, size_t n) { count(); return __libc_memalign(al, n); }
void *memalign(size_t al, size_t n) { count(); return __libc_memalign(al, n); }
int posix_memalign(void **p, size_t al, size_t n) {
    count();
    *p = __libc_memalign(al, n);
    return *p ? 0 : 12 /* ENOMEM */;
}
#define GM_COUNT_ALLOCS 1
#endif

TEST(no_allocation_per_token) {
#ifdef GM_COUNT_ALLOCS
    gm_model *m = open_model(2);
    if (!m) return;
    gm_generator *g = new_gen(m, 2, 128, true, true);
    int32_t ids[8], tok;
    prompt(ids, 8, 31337);
    gm_error err = {0};
    gm_sampling s = gm_sampling_default();
    s.temperature = 0.9f;
    s.top_k = 40;
    s.top_p = 0.9f;
    s.repeat_penalty = 1.1f;
    s.repeat_last_n = 16;
    CHECK_OK(gm_generator_prefill(g, ids, 8, &err), &err);
    for (int i = 0; i < 20; i++) CHECK_OK(gm_generator_step_cached(g, &s, &tok, &err), &err);
    atomic_store(&n_allocs, 0);
    atomic_store(&counting, true);
    for (int i = 0; i < 30; i++) CHECK_OK(gm_generator_step_cached(g, &s, &tok, &err), &err);
    s.top_k = 0; /* top-p alone over the whole vocabulary */
    for (int i = 0; i < 10; i++) CHECK_OK(gm_generator_step_cached(g, &s, &tok, &err), &err);
    atomic_store(&counting, false);
    CHECK_MSG(atomic_load(&n_allocs) == 0, "%ld allocations during 40 decode steps", (long)atomic_load(&n_allocs));
    gm_generator_free(g);
    gm_model_free(m);
#endif
}

/* A copy of the gemma3 tiny GGUF with one byte-level patch: returns false if `name` is absent. */
static bool patched_copy(const char *dst, const char *name, const char *new_name, int64_t new_ne1) {
    size_t len = 0;
    unsigned char *buf = test_read_file(PATH[2], &len);
    if (!buf) return false;
    const size_t nl = strlen(name);
    unsigned char *hit = NULL;
    for (size_t i = 8; i + nl + 12 + 16 <= len && !hit; i++)
        if (!memcmp(buf + i, name, nl) && !memcmp(buf + i - 8, &(uint64_t){nl}, 8)) hit = buf + i;
    if (hit && new_name) memcpy(hit, new_name, nl);
    if (hit && new_ne1 > 0) memcpy(hit + nl + 4 + 8, &new_ne1, 8); /* name, u32 n_dims, ne[0], ne[1] */
    FILE *f = hit ? fopen(dst, "wb") : NULL;
    bool ok = f && fwrite(buf, 1, len, f) == len;
    if (f) fclose(f);
    free(buf);
    return ok;
}

TEST(model_open_refuses_bad_weights) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/gm_test_generator_%d_bad.gguf", (int)getpid());
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK(patched_copy(path, "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight", 0));
    CHECK_EQ_INT(gm_model_open(path, NULL, &m, &err), GM_ERR_NOT_FOUND);
    CHECK_MSG(strstr(err.msg, "blk.1.ffn_up.weight") != NULL, "message: %s", err.msg);
    CHECK(m == NULL);
    CHECK(patched_copy(path, "blk.0.attn_q.weight", NULL, 32)); /* 64 output rows -> 32 */
    CHECK_EQ_INT(gm_model_open(path, NULL, &m, &err), GM_ERR_FORMAT);
    CHECK_MSG(strstr(err.msg, "blk.0.attn_q.weight") && strstr(err.msg, "shape"), "message: %s", err.msg);
    CHECK(m == NULL);
    unlink(path);
}

/* Decode logits do not depend on the thread count, bit for bit (the 2-thread decode splits work
 * differently: rows of every matrix, query-head halves in attention). */
TEST(decode_logits_independent_of_threads) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        gm_generator *g1 = new_gen(m, 1, 64, false, true), *g2 = new_gen(m, 2, 64, false, true);
        const int V = gm_generator_config(g1)->n_vocab;
        int32_t ids[5];
        prompt(ids, 5, 31 + a);
        gm_error err = {0};
        const float *l1 = NULL, *l2 = NULL;
        CHECK_OK(gm_generator_prefill_get_last_logits(g1, ids, 5, &l1, &err), &err);
        CHECK_OK(gm_generator_prefill_get_last_logits(g2, ids, 5, &l2, &err), &err);
        int same = l1 && l2 && memcmp(l1, l2, sizeof(float) * V) == 0;
        for (int step = 0; step < 20 && l1 && l2; step++) {
            const int32_t next = (int32_t)((step * 7919 + 11) % V);
            CHECK_OK(gm_generator_decode_get_logits(g1, next, &l1, &err), &err);
            CHECK_OK(gm_generator_decode_get_logits(g2, next, &l2, &err), &err);
            same &= l1 && l2 && memcmp(l1, l2, sizeof(float) * V) == 0;
        }
        CHECK_MSG(same, "%s: 1-thread and 2-thread logits differ", ARCHS[a]);
        gm_generator_free(g1);
        gm_generator_free(g2);
        gm_model_free(m);
    }
}

int main(void) {
    for (int a = 0; a < 3; a++) {
        char err[256];
        opts_for(&OPT[a], ARCHS[a]);
        snprintf(PATH[a], sizeof PATH[a], "/tmp/gm_test_generator_%d_%s.gguf", (int)getpid(), ARCHS[a]);
        if (!tm_write_gguf(&OPT[a], PATH[a], err, sizeof err)) {
            fprintf(stderr, "cannot write %s: %s\n", PATH[a], err);
            return 1;
        }
    }
    RUN(cached_equals_naive_greedy);
    RUN(decode_equals_prefill);
    RUN(embeds_and_bias);
    RUN(bucket_growth_keeps_tokens);
    RUN(seeded_sampling_is_deterministic);
    RUN(decode_logits_independent_of_threads);
    RUN(hidden_state_taps);
    RUN(gguf_and_hf_folder_agree);
    RUN(score_logprobs_matches_full_logits);
    RUN(prompt_reuse_matches_fresh);
    RUN(misuse_gives_clean_errors);
    RUN(no_allocation_per_token);
    RUN(model_open_refuses_bad_weights);
    for (int a = 0; a < 3; a++) unlink(PATH[a]);
    return test_summary();
}
