/* tests/test_speculative.c — speculative decoding (gemma.h, "speculative decoding").
 *
 * Greedy: output with speculation (prompt lookup adaptive and fixed k, a draft model) must equal
 * output without it token for token (the reference: the same generator decoding one token at a time),
 * on tiny synthetic models of the three generations and on the default model, with copy-heavy prompts
 * so that proposals are actually accepted (asserted). Rollback: after steps with rejections the
 * sequence's cache gives the same logits as a fresh engine over the same history (memcmp). Sampling:
 * the first token's empirical distribution over 20000 seeded steps against the exact distribution
 * computed here from the target's logits (softmax of penalised, tempered, top-k-cut logits), by a
 * chi-square test at significance 1e-3 (Wilson-Hilferty critical value), for lookup proposals (a
 * point mass q on a token with a sizeable p) and for a sampled draft model (dense q; the draft is the
 * target's first two layers, so q overlaps p without being p). Checked when this was written: a
 * variant that resampled from p instead of the residual max(0, p - q) fails all three (chi-square
 * 1800-4700 against critical values 58-410), and one that accepted with probability p instead of
 * min(1, p/q) fails the draft case (1353 against 58). Bad input: vocabulary mismatch, k and n-gram
 * ranges, misuse.
 *
 * Grammars (gm_seq_set_grammar on the target): greedy output under a GBNF grammar (tiny models) and JSON
 * schemas (the default model) equals the output without speculation token for token, stop included, with
 * proposals accepted, rejected and cut by the grammar (asserted), and the matcher has taken exactly the
 * emitted tokens; sampled, the first token follows the target's distribution given the grammar (the same
 * chi-square test) for lookup proposing an allowed token, lookup proposing a refused one (cut), and a
 * draft model drafting under the grammar.
 *
 * Under ASan+UBSan (GM_SANITIZER_BUILD, CI's second suite, ~10x slower) every path runs with fewer repeats:
 * 2000 sampled steps per distribution (the same chi-square test at the same significance, with less power:
 * the statistics are the release suite's), lookup at k 1 and 8 on the tiny models, two default-model prompts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_grammar.h"
#include "gemma_generator.h"
#include "generate/speculative.h"
#include "support/test.h"
#include "support/tiny_model.h"

static const char *ARCHS[] = {"gemma", "gemma2", "gemma3"};
static char PATH[3][256], DRAFT_PATH[256];
static int V;
static bool SAN; /* GM_SANITIZER_BUILD: fewer repeats (the header) */

static gm_model *open_model(const char *path) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    return m;
}

static gm_engine *new_engine(const gm_model *m, int n_ctx) {
    gm_error err = {0};
    gm_engine *e = NULL;
    gm_engine_options o = {.n_threads = gm_test_threads(2), .n_ctx = n_ctx};
    CHECK_OK(gm_engine_new(m, &o, &e, &err), &err);
    return e;
}

/* n tokens after prompt: without speculation (so == NULL) or with it; the counters into *st. */
static int generate(const gm_model *m, const gm_spec_options *so, const int32_t *prompt, int np, int n,
                    const gm_sampling *s, int32_t *out, gm_spec_stats *st) {
    gm_error err = {0};
    gm_generator *g = NULL;
    gm_generator_options go = {.n_threads = gm_test_threads(2), .n_ctx = 1024, .ignore_stop = true};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    if (!g) return 0;
    if (so) CHECK_OK(gm_generator_set_speculative(g, so, &err), &err);
    CHECK_OK(gm_generator_prefill(g, prompt, np, &err), &err);
    int got = 0;
    CHECK_OK(gm_generator_generate_cached(g, n, s, out, &got, &err), &err);
    int len = 0;
    gm_generator_tokens(g, &len);
    CHECK_MSG(len == np + got, "history %d after %d + %d tokens: a rolled-back tail is left", len, np, got);
    if (st) gm_spec_get_stats(gm_generator_speculative(g), st);
    gm_generator_free(g);
    return got;
}

/* A copy-heavy prompt: random tokens, a segment of them repeated, then the segment's start again. */
static int copy_prompt(int32_t *ids, uint64_t seed, int seg) {
    int n = 0;
    ids[n++] = TM_BOS;
    for (int i = 0; i < 3 * seg; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[n++] = TM_BYTE0 + (int32_t)((seed >> 33) % (uint64_t)(V - TM_BYTE0));
    }
    for (int i = 0; i < seg + seg / 2; i++) ids[n++] = ids[1 + seg + i];
    return n;
}

/* ---------------------------------------------------------------- greedy exactness */

static void greedy_case(const gm_model *m, const gm_spec_options *so, const char *what, int n_prompts, int n,
                        int64_t *accepted) {
    const gm_sampling s = gm_sampling_default();
    int32_t ids[256], ref[256], got[256];
    for (int p = 0; p < n_prompts; p++) {
        const int np = copy_prompt(ids, 11 + (uint64_t)p, 6 + 4 * p);
        gm_spec_stats st = {0};
        const int nr = generate(m, NULL, ids, np, n, &s, ref, NULL);
        const int ng = generate(m, so, ids, np, n, &s, got, &st);
        CHECK_MSG(nr == n && ng == n && !memcmp(ref, got, (size_t)n * sizeof *ref),
                  "%s, prompt %d: greedy output with speculation differs from without", what, p);
        CHECK_MSG(st.tokens >= n && st.passes <= st.tokens, "%s: %lld tokens in %lld passes", what,
                  (long long)st.tokens, (long long)st.passes);
        *accepted += st.accepted;
    }
}

TEST(greedy_lookup_tiny) {
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(PATH[a]);
        if (!m) return;
        int64_t acc = 0;
        for (int k = 1; k <= 8; k *= SAN ? 8 : 2) {
            gm_spec_options adaptive = {.kind = GM_SPEC_LOOKUP, .k_max = k};
            gm_spec_options fixed = {.kind = GM_SPEC_LOOKUP, .k_max = k, .fixed_k = true, .ngram_min = 1};
            greedy_case(m, &adaptive, ARCHS[a], 6, 96, &acc);
            greedy_case(m, &fixed, ARCHS[a], 6, 96, &acc);
        }
        CHECK_MSG(acc > 100, "%s: only %lld proposals accepted: the prompts do not exercise acceptance", ARCHS[a],
                  (long long)acc);
        gm_model_free(m);
    }
}

/* Draft model: the same weights (every proposal accepted) and other weights (rejections), both exact. */
TEST(greedy_draft_tiny) {
    gm_model *m = open_model(PATH[2]), *same = open_model(PATH[2]), *other = open_model(DRAFT_PATH);
    if (!m || !same || !other) return;
    gm_engine *e_same = new_engine(same, 1024), *e_other = new_engine(other, 1024);
    if (!e_same || !e_other) return;
    int64_t acc = 0;
    gm_spec_options so = {.kind = GM_SPEC_DRAFT, .k_max = 5, .draft = e_same};
    gm_spec_stats st;
    const gm_sampling s = gm_sampling_default();
    int32_t ids[256], ref[96], got[96];
    const int np = copy_prompt(ids, 5, 10);
    generate(m, NULL, ids, np, 96, &s, ref, NULL);
    generate(m, &so, ids, np, 96, &s, got, &st);
    CHECK_MSG(!memcmp(ref, got, sizeof ref), "the model as its own draft: output differs");
    CHECK_MSG(st.drafted > 0 && st.accepted == st.drafted, "own draft: %lld of %lld accepted", (long long)st.accepted,
              (long long)st.drafted);
    CHECK_MSG(st.tokens > 3 * st.passes, "own draft at k 5: %lld tokens in %lld passes", (long long)st.tokens,
              (long long)st.passes);
    so.draft = e_other;
    greedy_case(m, &so, "other draft", 4, 96, &acc);
    so.fixed_k = true;
    greedy_case(m, &so, "other draft, fixed k", 4, 96, &acc);
    gm_engine_free(e_same);
    gm_engine_free(e_other);
    gm_model_free(m);
    gm_model_free(same);
    gm_model_free(other);
}

/* Proposals that keep failing shut the gate: a near-uniform sampled text (temperature 4) with 1-gram
 * lookup verifies proposals in few steps; the same with fixed k verifies in most (the control). */
TEST(gate_backs_off) {
    gm_model *m = open_model(PATH[2]);
    if (!m) return;
    gm_sampling s = gm_sampling_default();
    s.temperature = 4.0f;
    s.seed = 5;
    int32_t ids[256], out[300];
    const int np = copy_prompt(ids, 3, 20);
    gm_spec_options so = {.kind = GM_SPEC_LOOKUP, .ngram_min = 1, .k_max = 4};
    gm_spec_stats st = {0}, ctl = {0};
    generate(m, &so, ids, np, 300, &s, out, &st);
    so.fixed_k = true;
    generate(m, &so, ids, np, 300, &s, out, &ctl);
    const double rate = (double)st.verify_passes / (double)st.steps, rate_ctl = (double)ctl.verify_passes / (double)ctl.steps;
    fprintf(stderr, "  verify passes: %lld of %lld steps (gate), %lld of %lld (fixed k); accepted %lld of %lld\n",
            (long long)st.verify_passes, (long long)st.steps, (long long)ctl.verify_passes, (long long)ctl.steps,
            (long long)ctl.accepted, (long long)ctl.drafted);
    CHECK_MSG(rate_ctl > 0.3, "the control proposes in only %.2f of its steps: the test does not exercise the gate",
              rate_ctl);
    CHECK_MSG(rate < 0.15, "the gate let proposals through in %.2f of the steps", rate);
    gm_model_free(m);
}

/* ---------------------------------------------------------------- rollback */

/* Steps with rejections leave a sequence whose cache equals a fresh computation of its history; the
 * step's invariant: every position but the last computed; stopping early rolls the tail back. */
TEST(rollback) {
    gm_model *m = open_model(PATH[2]), *dm = open_model(DRAFT_PATH);
    if (!m || !dm) return;
    gm_engine *e = new_engine(m, 1024), *de = new_engine(dm, 1024), *fresh = new_engine(m, 1024);
    gm_error err = {0};
    gm_seq *s = NULL, *r = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    CHECK_OK(gm_seq_new(fresh, &r, &err), &err);
    gm_spec *sp = NULL;
    gm_spec_options so = {.kind = GM_SPEC_DRAFT, .k_max = 6, .fixed_k = true, .draft = de};
    CHECK_OK(gm_spec_new(s, &so, &sp, &err), &err);
    if (!sp || !r) return;
    int32_t ids[256];
    const int np = copy_prompt(ids, 9, 8);
    CHECK_OK(gm_seq_append(s, ids, np, &err), &err);
    gm_sampling smp = gm_sampling_default();
    smp.temperature = 1.5f; /* the tiny models are sharply peaked: a high temperature makes rejections */
    smp.seed = 42;
    int bad = 0, rejected = 0;
    for (int step = 0; step < 24; step++) {
        const int32_t *t;
        int n = 0;
        CHECK_OK(gm_spec_step(sp, &smp, 0, &t, &n, &err), &err);
        gm_spec_stats st;
        gm_spec_get_stats(sp, &st);
        rejected = (int)(st.drafted - st.accepted);
        CHECK_EQ_INT(gm_seq_n_computed(s), gm_seq_length(s) - 1);
        /* the fresh reference: the same history from nothing */
        int len;
        const int32_t *h = gm_seq_tokens(s, &len);
        CHECK_OK(gm_seq_truncate(r, 0, &err), &err);
        CHECK_OK(gm_seq_append(r, h, len, &err), &err);
        CHECK_OK(gm_engine_eval(fresh, &r, 1, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        bad += memcmp(gm_seq_logits(s), gm_seq_logits(r), (size_t)V * sizeof(float)) != 0;
    }
    CHECK_MSG(bad == 0, "%d of 24 steps: the rolled-back cache differs from a fresh computation", bad);
    CHECK_MSG(rejected > 10, "only %d rejected proposals: rollback barely exercised", rejected);
    /* a step limited to one new token proposes nothing */
    const int before = gm_seq_length(s);
    const int32_t *t;
    int n = 0;
    CHECK_OK(gm_spec_step(sp, &smp, 1, &t, &n, &err), &err);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(gm_seq_length(s), before + 1);
    gm_spec_free(sp);
    gm_seq_free(s);
    gm_seq_free(r);
    gm_engine_free(e);
    gm_engine_free(de);
    gm_engine_free(fresh);
    gm_model_free(m);
    gm_model_free(dm);
}

/* Several sequences in one verify call (gm_spec_step_many) give each one's single-sequence output; with a
 * draft model, the sequences share one draft engine and draft in shared calls. */
static void many_case(gm_model *m, gm_engine *de, const char *what) {
    enum { NS = 3, N = 64 };
    gm_engine *e = new_engine(m, 1024);
    gm_error err = {0};
    gm_seq *s[NS];
    gm_spec *sp[NS];
    gm_sampling smp[NS];
    int32_t ids[NS][256], ref[NS][N];
    int np[NS], got[NS] = {0};
    for (int i = 0; i < NS; i++) {
        np[i] = copy_prompt(ids[i], 30 + (uint64_t)i, 5 + 3 * i);
        smp[i] = gm_sampling_default();
        smp[i].repeat_penalty = i == 1 ? 1.3f : 1.0f; /* per-sequence settings */
        generate(m, NULL, ids[i], np[i], N, &smp[i], ref[i], NULL);
        gm_spec_options so = {.kind = de ? GM_SPEC_DRAFT : GM_SPEC_LOOKUP, .k_max = 4, .ngram_min = 1, .draft = de};
        CHECK_OK(gm_seq_new(e, &s[i], &err), &err);
        CHECK_OK(gm_seq_append(s[i], ids[i], np[i], &err), &err);
        CHECK_OK(gm_spec_new(s[i], &so, &sp[i], &err), &err);
    }
    int max_new[NS], bad = 0;
    for (int step = 0; step < N; step++) {
        for (int i = 0; i < NS; i++) max_new[i] = N - got[i] > 0 ? N - got[i] : 1;
        CHECK_OK(gm_spec_step_many(sp, NS, smp, max_new, &err), &err);
        for (int i = 0; i < NS; i++) {
            int n;
            const int32_t *t = gm_spec_last(sp[i], &n);
            for (int j = 0; j < n && got[i] < N; j++) bad += t[j] != ref[i][got[i]++];
        }
    }
    CHECK_MSG(bad == 0, "%s: %d tokens differ from each sequence decoded alone without speculation", what, bad);
    int64_t acc = 0;
    for (int i = 0; i < NS; i++) {
        gm_spec_stats st;
        gm_spec_get_stats(sp[i], &st);
        acc += st.accepted;
        CHECK_EQ_INT(got[i], N);
        gm_spec_free(sp[i]);
        gm_seq_free(s[i]);
    }
    CHECK_MSG(acc > 0, "%s: no proposal accepted", what);
    gm_engine_free(e);
}

TEST(many_sequences) {
    gm_model *m = open_model(PATH[2]), *dm = open_model(DRAFT_PATH);
    if (!m || !dm) return;
    many_case(m, NULL, "lookup");
    gm_engine *de = new_engine(dm, 1024);
    many_case(m, de, "draft model");
    gm_engine_free(de);
    gm_model_free(m);
    gm_model_free(dm);
}

/* ---------------------------------------------------------------- the end of the context */

enum { END_CTX = 160 };

/* A prompt of np tokens that repeats a 7-token segment: lookup has n-grams to propose from the start. */
static void periodic_prompt(int32_t *ids, int np, uint64_t seed) {
    ids[0] = TM_BOS;
    for (int i = 1; i < np; i++) {
        if (i <= 7) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            ids[i] = TM_BYTE0 + (int32_t)((seed >> 33) % (uint64_t)(V - TM_BYTE0));
        } else {
            ids[i] = ids[i - 7];
        }
    }
}

/* An engine of n_ctx positions with room in its KV budget for several sequences. */
static gm_engine *roomy_engine(const gm_model *m, int n_ctx) {
    gm_error err = {0};
    gm_engine *e = NULL;
    gm_engine_options o = {.n_threads = gm_test_threads(2), .n_ctx = n_ctx, .kv_mem = (size_t)64 << 20};
    CHECK_OK(gm_engine_new(m, &o, &e, &err), &err);
    return e;
}

/* Greedy decoding without speculation until the context is full: END_CTX - np tokens. */
static int plain_to_end(gm_engine *e, const int32_t *ids, int np, int32_t *out) {
    gm_error err = {0};
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    if (!s) return 0;
    CHECK_OK(gm_seq_append(s, ids, np, &err), &err);
    const gm_sampling smp = gm_sampling_default();
    int n = 0;
    while (gm_seq_length(s) < END_CTX) {
        gm_status st = gm_engine_eval(e, &s, 1, &err);
        if (!st) st = gm_seq_sample(s, &smp, &out[n], &err);
        CHECK_OK(st, &err);
        if (st) break;
        n++;
    }
    gm_seq_free(s);
    return n;
}

/* The same with speculation, as a server drives it: each step's max_new is what the request still may
 * take (limit 0: none), until the limit or the end of the context. Returns the tokens taken. */
static int spec_to_end(gm_engine *e, const gm_spec_options *so, const int32_t *ids, int np, int limit, int32_t *out,
                       gm_spec_stats *st) {
    gm_error err = {0};
    gm_seq *s = NULL;
    gm_spec *sp = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    if (s) CHECK_OK(gm_spec_new(s, so, &sp, &err), &err);
    if (!sp) {
        gm_seq_free(s);
        return 0;
    }
    CHECK_OK(gm_seq_append(s, ids, np, &err), &err);
    const gm_sampling smp = gm_sampling_default();
    int n = 0;
    while (gm_seq_length(s) < END_CTX && (limit == 0 || n < limit)) {
        const int32_t *t;
        int k = 0;
        const gm_status r = gm_spec_step(sp, &smp, limit ? limit - n : 0, &t, &k, &err);
        CHECK_MSG(r == GM_OK && k > 0, "step at length %d (limit %d, %d taken): status %d, %d tokens: %s",
                  gm_seq_length(s), limit, n, (int)r, k, err.msg);
        if (r || k == 0) break;
        for (int i = 0; i < k; i++) out[n++] = t[i];
        CHECK_EQ_INT(gm_seq_length(s), np + n);
    }
    gm_spec_get_stats(sp, st);
    gm_spec_free(sp);
    gm_seq_free(s);
    return n;
}

/* Prompts that end 1..24 positions before the end of a small context, with no limit, a limit that ends
 * exactly there and one past it: speculation (lookup, a draft model) gives plain greedy's tokens up to
 * the context's very last position. */
static void to_end_case(gm_engine *e, const gm_spec_options *so, const char *what, int64_t *accepted) {
    static const int LEFT[] = {1, 2, 3, 4, 5, 8, 9, 13, 17, 24};
    int32_t ids[END_CTX], ref[END_CTX], got[END_CTX];
    for (size_t p = 0; p < sizeof LEFT / sizeof LEFT[0]; p++) {
        const int np = END_CTX - LEFT[p];
        periodic_prompt(ids, np, 70 + p);
        const int nr = plain_to_end(e, ids, np, ref);
        CHECK_EQ_INT(nr, LEFT[p]);
        const int limits[3] = {0, LEFT[p], LEFT[p] + 3};
        for (int l = 0; l < 3; l++) {
            gm_spec_stats st = {0};
            const int ng = spec_to_end(e, so, ids, np, limits[l], got, &st);
            CHECK_MSG(ng == nr && !memcmp(ref, got, (size_t)nr * sizeof *ref),
                      "%s, %d positions left, limit %d: %d tokens with speculation, %d without%s", what, LEFT[p],
                      limits[l], ng, nr, ng == nr ? " (and they differ)" : "");
            *accepted += st.accepted;
        }
    }
}

/* Several sequences in one gm_spec_step_many, each ending at the context's end at a different step (a
 * finished one leaves the batch, as in a server), each with plain greedy's tokens. */
static void to_end_many(gm_engine *e, const gm_spec_options *so, const char *what) {
    enum { NS = 4 };
    static const int LEFT[NS] = {1, 6, 11, 23};
    gm_error err = {0};
    gm_seq *s[NS] = {0};
    gm_spec *sp[NS] = {0};
    int32_t ids[NS][END_CTX], ref[NS][END_CTX], got[NS][END_CTX];
    int nr[NS], ng[NS] = {0};
    for (int i = 0; i < NS; i++) {
        periodic_prompt(ids[i], END_CTX - LEFT[i], 90 + (uint64_t)i);
        nr[i] = plain_to_end(e, ids[i], END_CTX - LEFT[i], ref[i]);
        CHECK_OK(gm_seq_new(e, &s[i], &err), &err);
        if (s[i]) CHECK_OK(gm_seq_append(s[i], ids[i], END_CTX - LEFT[i], &err), &err);
        if (s[i]) CHECK_OK(gm_spec_new(s[i], so, &sp[i], &err), &err);
        if (!sp[i]) return;
    }
    gm_sampling smp[NS];
    for (int i = 0; i < NS; i++) smp[i] = gm_sampling_default();
    for (int round = 0; round < END_CTX; round++) {
        gm_spec *live[NS];
        int max_new[NS], idx[NS], n = 0;
        for (int i = 0; i < NS; i++)
            if (gm_seq_length(s[i]) < END_CTX) idx[n] = i, max_new[n] = LEFT[i] + 2 - ng[i], live[n++] = sp[i];
        if (!n) break;
        const gm_status st = gm_spec_step_many(live, n, smp, max_new, &err);
        CHECK_OK(st, &err);
        if (st) break;
        for (int j = 0; j < n; j++) {
            int k;
            const int32_t *t = gm_spec_last(live[j], &k);
            for (int x = 0; x < k && ng[idx[j]] < END_CTX; x++) got[idx[j]][ng[idx[j]]++] = t[x];
        }
    }
    for (int i = 0; i < NS; i++) {
        CHECK_MSG(ng[i] == nr[i] && !memcmp(ref[i], got[i], (size_t)nr[i] * sizeof(int32_t)),
                  "%s, batch of %d: sequence %d (%d positions left): %d tokens with speculation, %d without", what, NS,
                  i, LEFT[i], ng[i], nr[i]);
        gm_spec_free(sp[i]);
        gm_seq_free(s[i]);
    }
}

TEST(greedy_to_context_end) {
    gm_model *m = open_model(PATH[2]), *same = open_model(PATH[2]), *other = open_model(DRAFT_PATH);
    if (!m || !same || !other) return;
    gm_engine *e = roomy_engine(m, END_CTX);
    int64_t acc = 0;
    const gm_spec_options lookups[2] = {{.kind = GM_SPEC_LOOKUP, .k_max = 8, .fixed_k = true, .ngram_min = 1},
                                        {.kind = GM_SPEC_LOOKUP}};
    to_end_case(e, &lookups[0], "lookup, fixed k 8", &acc);
    to_end_case(e, &lookups[1], "lookup, adaptive", &acc);
    to_end_many(e, &lookups[0], "lookup, fixed k 8");
    CHECK_MSG(acc > 50, "lookup: only %lld proposals accepted near the end", (long long)acc);
    /* draft engines with the target's context, a longer one and a shorter one (shorter than the prompts) */
    const int dctx[3] = {END_CTX, 1024, 128};
    for (int d = 0; d < 3; d++) {
        gm_engine *de_same = roomy_engine(same, dctx[d]), *de_other = roomy_engine(other, dctx[d]);
        if (!de_same || !de_other) break;
        char what[96];
        acc = 0;
        const gm_spec_options own = {.kind = GM_SPEC_DRAFT, .k_max = 8, .fixed_k = true, .draft = de_same};
        snprintf(what, sizeof what, "own draft, draft context %d", dctx[d]);
        to_end_case(e, &own, what, &acc);
        CHECK_MSG(dctx[d] < END_CTX - 24 ? acc == 0 : acc > 50, "%s: %lld proposals accepted", what, (long long)acc);
        const gm_spec_options oth = {.kind = GM_SPEC_DRAFT, .k_max = 5, .draft = de_other};
        snprintf(what, sizeof what, "other draft, draft context %d", dctx[d]);
        to_end_case(e, &oth, what, &acc);
        to_end_many(e, &own, what);
        gm_engine_free(de_same);
        gm_engine_free(de_other);
    }
    gm_engine_free(e);
    gm_model_free(m);
    gm_model_free(same);
    gm_model_free(other);
}

/* ---------------------------------------------------------------- grammars */

/* A grammar (GBNF, or a JSON schema) bound to a model's vocabulary, with one matcher on it. */
typedef struct constraint {
    gm_gvocab *v;
    gm_grammar *g;
    gm_grammar_ctx *c;
    gm_matcher *m;
} constraint;

static bool constraint_open(const gm_model *model, const char *text, bool schema, constraint *k) {
    gm_error err = {0};
    memset(k, 0, sizeof *k);
    CHECK_OK(gm_gvocab_from_tokenizer(gm_model_tokenizer(model), NULL, &k->v, &err), &err);
    CHECK_OK(schema ? gm_grammar_from_json_schema(text, strlen(text), NULL, &k->g, &err)
                    : gm_grammar_from_gbnf(text, strlen(text), &k->g, &err), &err);
    if (k->v && k->g) CHECK_OK(gm_grammar_ctx_new(k->g, k->v, &k->c, &err), &err);
    if (k->c) CHECK_OK(gm_matcher_new(k->c, &k->m, &err), &err);
    return k->m != NULL;
}

static void constraint_close(constraint *k) {
    gm_matcher_free(k->m);
    gm_grammar_ctx_free(k->c);
    gm_grammar_free(k->g);
    gm_gvocab_free(k->v);
}

/* Lower-case words, commas and spaces, then a full stop (after which only the end is allowed). */
static const char *TINY_GRAMMAR = "root ::= [a-z ,]+ \".\"";

/* ---------------------------------------------------------------- sampling: the target's distribution */

/* The exact distribution the target samples from, computed here: a grammar's mask (NULL: none; what it
 * refuses is out before anything else), repeat penalty over the last `last_n` tokens (llama.cpp: logit / r
 * if > 0 else logit * r), temperature, top-k, softmax. */
static void exact_dist(const float *logits, const int32_t *hist, int nh, const gm_sampling *s, const uint32_t *mask,
                       double *p) {
    double *l = malloc((size_t)V * sizeof *l);
    char *seen = calloc((size_t)V, 1);
    for (int i = nh - s->repeat_last_n; i < nh; i++)
        if (i >= 0) seen[hist[i]] = 1;
    for (int v = 0; v < V; v++) {
        double x = logits[v];
        if (seen[v]) x = x > 0 ? x / s->repeat_penalty : x * s->repeat_penalty;
        l[v] = x / s->temperature;
        if (mask && !(mask[v / 32] >> (v % 32) & 1u)) l[v] = -INFINITY;
    }
    double kth = -INFINITY; /* the top_k-th largest */
    for (int r = 0; r < s->top_k; r++) {
        double best = -INFINITY;
        for (int v = 0; v < V; v++)
            if (l[v] > best && (r == 0 || l[v] < kth)) best = l[v];
        kth = best;
    }
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
    for (int v = 0; v < V; v++) z += p[v] = l[v] >= kth ? exp(l[v] - mx) : 0.0;
    for (int v = 0; v < V; v++) p[v] /= z;
    free(l);
    free(seen);
}


/* Sampled steps per distribution (the header). */
static int trials(void) { return SAN ? 2000 : 20000; }

/* The first token of trials() steps, each from the same prefilled sequence rolled back after it, seed t. */
static void first_token_counts(gm_spec *sp, gm_seq *s, gm_matcher *gm, gm_sampling smp, int *count,
                               gm_spec_stats *st) {
    gm_error err = {0};
    const int base = gm_seq_length(s);
    for (int t = 0; t < trials(); t++) {
        smp.seed = 1000 + (uint64_t)t;
        const int32_t *tok;
        int n = 0;
        if (gm_spec_step(sp, &smp, 0, &tok, &n, &err) != GM_OK || n < 1) {
            CHECK_MSG(0, "step %d: %s", t, err.msg);
            return;
        }
        count[tok[0]]++;
        CHECK_OK(gm_seq_truncate(s, base, &err), &err);
        if (gm) CHECK_OK(gm_matcher_rollback(gm, (size_t)n, &err), &err); /* the grammar took the step's tokens */
    }
    gm_spec_get_stats(sp, st);
}

/* Under a grammar (gbnf, NULL: none) the step's first token must follow the target's distribution given
 * the grammar; cut: lookup's proposal is one the grammar refuses, so every step cuts it and draws its
 * own token (no proposal verified). */
static void sampling_case(gm_model *m, gm_engine *de, const int32_t *ids, int np, const gm_sampling *smp,
                          const char *what, const char *gbnf, bool cut) {
    gm_engine *e = new_engine(m, 1024);
    gm_error err = {0};
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    CHECK_OK(gm_seq_append(s, ids, np, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    constraint k = {0};
    uint32_t *mask = NULL;
    if (gbnf && constraint_open(m, gbnf, false, &k)) {
        CHECK_OK(gm_seq_set_grammar(s, k.m, &err), &err);
        mask = calloc(((size_t)V + 31) / 32, sizeof *mask);
        CHECK_OK(gm_matcher_fill_mask(k.m, mask, &err), &err);
    }
    double *p = malloc((size_t)V * sizeof *p);
    exact_dist(gm_seq_logits(s), ids, np, smp, mask, p);
    gm_spec_options so = {.kind = de ? GM_SPEC_DRAFT : GM_SPEC_LOOKUP, .k_max = 3, .fixed_k = true, .draft = de};
    gm_spec *sp = NULL;
    CHECK_OK(gm_spec_new(s, &so, &sp, &err), &err);
    int *count = calloc((size_t)V, sizeof *count);
    gm_spec_stats st = {0};
    if (sp) first_token_counts(sp, s, k.m, *smp, count, &st);
    const int n = trials();
    CHECK_MSG(test_chi_square_ok(count, p, V, n, what), "%s: the first token's distribution is not the target's", what);
    if (cut)
        CHECK_MSG(st.drafted == 0 && st.refused >= n, "%s: %lld proposed, %lld refused by the grammar in %d steps",
                  what, (long long)st.drafted, (long long)st.refused, n);
    else
        CHECK_MSG(st.accepted > n / 10 && st.drafted - st.accepted > n / 10,
                  "%s: %lld of %lld proposals accepted in %d steps: the test needs many of both outcomes", what,
                  (long long)st.accepted, (long long)st.drafted, n);
    if (k.m) CHECK_MSG(gm_matcher_n_steps(k.m) == 0, "%s: the matcher kept %zu steps", what, gm_matcher_n_steps(k.m));
    free(count);
    free(p);
    free(mask);
    gm_spec_free(sp);
    gm_seq_free(s);
    gm_engine_free(e);
    constraint_close(&k);
}

/* The target's exact distribution after ids[0..n) (mask: a grammar's, or NULL). */
static void dist_after(gm_model *m, const int32_t *ids, int n, const gm_sampling *smp, const uint32_t *mask,
                       double *p) {
    gm_engine *e = new_engine(m, 1024);
    gm_error err = {0};
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    CHECK_OK(gm_seq_append(s, ids, n, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    if (gm_seq_logits(s)) exact_dist(gm_seq_logits(s), ids, n, smp, mask, p);
    gm_seq_free(s);
    gm_engine_free(e);
}

/* A lookup prompt [bos R1 K1 K2 d R2 K1 K2] (lookup proposes d) with d chosen among the target's
 * likeliest tokens (given the grammar's mask, when not NULL) so that p(d) is nearest 0.4: both acceptance
 * and the residual then matter. */
static int lookup_prompt(gm_model *m, const gm_sampling *smp, const uint32_t *mask, int32_t *ids) {
    int n = copy_prompt(ids, 77, 4); /* bos, 12 random, then 6 copied: fresh randomness to cut from */
    const int32_t k1 = ids[2], k2 = ids[3];
    int32_t pr[24];
    int np = 0;
    pr[np++] = TM_BOS;
    for (int i = 0; i < 8; i++) pr[np++] = ids[4 + i % 8];
    pr[np++] = k1, pr[np++] = k2;
    const int dpos = np++;
    for (int i = 0; i < 6; i++) pr[np++] = ids[n - 1 - i];
    pr[np++] = k1, pr[np++] = k2;
    double *p = malloc((size_t)V * sizeof *p);
    pr[dpos] = k2;
    dist_after(m, pr, np, smp, mask, p);
    int cand[10];
    for (int c = 0; c < 10; c++) { /* the ten likeliest under a placeholder d */
        cand[c] = 0;
        for (int v = 1; v < V; v++) {
            bool used = false;
            for (int j = 0; j < c; j++) used |= cand[j] == v;
            if (!used && p[v] > p[cand[c]]) cand[c] = v;
        }
    }
    int32_t best = cand[0];
    double best_gap = 2;
    for (int c = 0; c < 10; c++) {
        pr[dpos] = cand[c];
        dist_after(m, pr, np, smp, mask, p);
        if (fabs(p[cand[c]] - 0.4) < best_gap) best_gap = fabs(p[cand[c]] - 0.4), best = cand[c];
    }
    pr[dpos] = best;
    free(p);
    memcpy(ids, pr, (size_t)np * sizeof *ids);
    return np;
}

/* Lookup's q is a point mass on the token that followed the last n-gram. */
TEST(sampling_lookup_distribution) {
    gm_model *m = open_model(PATH[2]);
    if (!m) return;
    gm_sampling smp = gm_sampling_default();
    smp.temperature = 1.5f, smp.top_k = 40, smp.repeat_penalty = 1.2f, smp.repeat_last_n = 16;
    int32_t ids[64];
    int np = lookup_prompt(m, &smp, NULL, ids);
    sampling_case(m, NULL, ids, np, &smp, "lookup, T 1.5, top-k 40, repeat penalty 1.2", NULL, false);
    smp.temperature = 2.5f, smp.top_k = 0, smp.repeat_penalty = 1.0f;
    np = lookup_prompt(m, &smp, NULL, ids);
    sampling_case(m, NULL, ids, np, &smp, "lookup, T 2.5", NULL, false);
    gm_model_free(m);
}

/* A sampled draft model: q is the draft's whole distribution under the same settings. */
TEST(sampling_draft_distribution) {
    gm_model *m = open_model(PATH[2]), *dm = open_model(DRAFT_PATH);
    if (!m || !dm) return;
    gm_engine *de = new_engine(dm, 1024);
    gm_sampling smp = gm_sampling_default();
    smp.temperature = 1.5f, smp.top_k = 30;
    int32_t ids[64];
    const int np = copy_prompt(ids, 78, 4);
    sampling_case(m, de, ids, np, &smp, "draft model, T 1.5, top-k 30", NULL, false);
    gm_engine_free(de);
    gm_model_free(m);
    gm_model_free(dm);
}

/* Sampling under a grammar (TINY_GRAMMAR): the first token follows the target's distribution given the
 * grammar (masked before penalties, temperature and top-k, as gm_seq_sample draws). Lookup proposing an
 * allowed token (the rejection test against the masked p, the residual from it), lookup proposing a token
 * the grammar refuses (cut: each step draws its own token), a sampled draft model drafting under the
 * grammar (its q masked too). */
TEST(sampling_grammar_distribution) {
    gm_model *m = open_model(PATH[2]), *dm = open_model(DRAFT_PATH);
    if (!m || !dm) return;
    constraint k;
    uint32_t *mask = calloc(((size_t)V + 31) / 32, sizeof *mask);
    gm_error err = {0};
    if (constraint_open(m, TINY_GRAMMAR, false, &k)) CHECK_OK(gm_matcher_fill_mask(k.m, mask, &err), &err);
    gm_sampling smp = gm_sampling_default();
    smp.temperature = 1.5f, smp.top_k = 12;
    int32_t ids[64];
    int np = lookup_prompt(m, &smp, mask, ids);
    const int d = ids[np - 9]; /* [.. K1 K2 d R2(6) K1 K2]: the proposed token */
    CHECK_MSG(mask[d / 32] >> (d % 32) & 1u, "the proposed token %d is not one the grammar allows", d);
    sampling_case(m, NULL, ids, np, &smp, "grammar, lookup, T 1.5, top-k 12", TINY_GRAMMAR, false);
    int32_t refused = -1; /* a digit: never allowed */
    for (int v = 0; v < V && refused < 0; v++) {
        size_t len = 0;
        const char *t = gm_token_text(gm_model_tokenizer(m), v, &len);
        if (len == 6 && !memcmp(t, "<0x31>", 6)) refused = v;
    }
    CHECK(refused >= 0 && !(mask[refused / 32] >> (refused % 32) & 1u));
    if (refused >= 0) {
        ids[np - 9] = refused;
        sampling_case(m, NULL, ids, np, &smp, "grammar, lookup proposing a refused token", TINY_GRAMMAR, true);
    }
    gm_engine *de = new_engine(dm, 1024);
    np = copy_prompt(ids, 78, 4);
    sampling_case(m, de, ids, np, &smp, "grammar, draft model, T 1.5, top-k 12", TINY_GRAMMAR, false);
    gm_engine_free(de);
    constraint_close(&k);
    free(mask);
    gm_model_free(m);
    gm_model_free(dm);
}

/* ---------------------------------------------------------------- grammars: greedy */

/* Up to n tokens after prompt under the grammar, stopping at a stop token (the grammar's END), without
 * speculation (so == NULL) or with it. The matcher must have taken exactly the emitted tokens. */
static int generate_under(const gm_model *m, const gm_spec_options *so, const char *grammar, bool schema,
                          const int32_t *prompt, int np, int n, const gm_sampling *s, int32_t *out,
                          gm_spec_stats *st) {
    constraint k;
    if (!constraint_open(m, grammar, schema, &k)) {
        constraint_close(&k);
        return 0;
    }
    gm_error err = {0};
    gm_generator *g = NULL;
    gm_generator_options go = {.n_threads = gm_test_threads(2), .n_ctx = 1024};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    int got = 0;
    if (g) {
        if (so) CHECK_OK(gm_generator_set_speculative(g, so, &err), &err);
        CHECK_OK(gm_seq_set_grammar(gm_generator_seq(g), k.m, &err), &err);
        CHECK_OK(gm_generator_prefill(g, prompt, np, &err), &err);
        CHECK_OK(gm_generator_generate_cached(g, n, s, out, &got, &err), &err);
        int len = 0;
        gm_generator_tokens(g, &len);
        CHECK_MSG(len == np + got, "history %d after %d + %d tokens: a rolled-back tail is left", len, np, got);
        CHECK_MSG((int)gm_matcher_n_steps(k.m) == got, "the matcher took %zu steps for %d tokens",
                  gm_matcher_n_steps(k.m), got);
        if (st) gm_spec_get_stats(gm_generator_speculative(g), st);
        gm_generator_free(g);
    }
    constraint_close(&k);
    return got;
}

/* Greedy under a grammar: the same tokens (and the same stop) with speculation as without, for each
 * option in so[0..n_so); the counters summed into *sum. */
static void grammar_case(const gm_model *m, const gm_spec_options *so, int n_so, const char *grammar, bool schema,
                         const int32_t *ids, int np, int n, const char *what, gm_spec_stats *sum) {
    const gm_sampling s = gm_sampling_default();
    int32_t *ref = malloc((size_t)n * sizeof *ref), *got = malloc((size_t)n * sizeof *got);
    const int nr = generate_under(m, NULL, grammar, schema, ids, np, n, &s, ref, NULL);
    CHECK_MSG(nr > 0, "%s: nothing generated", what);
    for (int i = 0; i < n_so; i++) {
        gm_spec_stats st = {0};
        const int ng = generate_under(m, &so[i], grammar, schema, ids, np, n, &s, got, &st);
        CHECK_MSG(ng == nr && !memcmp(ref, got, (size_t)nr * sizeof *ref),
                  "%s, options %d: greedy output under the grammar with speculation (%d tokens) differs from "
                  "without (%d)", what, i, ng, nr);
        sum->drafted += st.drafted, sum->accepted += st.accepted, sum->refused += st.refused;
        sum->verify_passes += st.verify_passes;
    }
    free(ref);
    free(got);
}

/* The tiny models: random byte prompts (lookup proposes tokens the grammar refuses: cut) and a text
 * prompt (the grammar's output loops: proposals accepted); lookup at k 1..8, adaptive and fixed; on
 * gemma3 a draft model too, the model itself (every draft accepted) and another (rejections). */
TEST(grammar_greedy_tiny) {
    gm_spec_stats sum = {0};
    for (int a = 0; a < 3; a++) {
        gm_model *m = open_model(PATH[a]), *same = a == 2 ? open_model(PATH[a]) : NULL;
        gm_model *other = a == 2 ? open_model(DRAFT_PATH) : NULL;
        if (!m) return;
        gm_engine *e_same = same ? new_engine(same, 1024) : NULL, *e_other = other ? new_engine(other, 1024) : NULL;
        gm_spec_options so[10];
        int n_so = 0;
        for (int k = 1; k <= 8; k *= 2) {
            so[n_so++] = (gm_spec_options){.kind = GM_SPEC_LOOKUP, .k_max = k};
            so[n_so++] = (gm_spec_options){.kind = GM_SPEC_LOOKUP, .k_max = k, .fixed_k = true, .ngram_min = 1};
        }
        if (e_same) so[n_so++] = (gm_spec_options){.kind = GM_SPEC_DRAFT, .k_max = 5, .draft = e_same};
        if (e_other) so[n_so++] = (gm_spec_options){.kind = GM_SPEC_DRAFT, .k_max = 4, .fixed_k = true, .draft = e_other};
        int32_t ids[256];
        for (int p = 0; p < 3; p++) {
            const int np = copy_prompt(ids, 21 + (uint64_t)p, 6 + 4 * p);
            grammar_case(m, so, n_so, TINY_GRAMMAR, false, ids, np, 96, ARCHS[a], &sum);
        }
        static const char *TEXT = "the cat sat on the mat, the cat sat on the mat, the cat sat on the";
        int32_t *t = NULL;
        size_t nt = 0;
        gm_error err = {0};
        CHECK_OK(gm_tokenize(gm_model_tokenizer(m), TEXT, strlen(TEXT), true, false, &t, &nt, &err), &err);
        if (t) grammar_case(m, so, n_so, TINY_GRAMMAR, false, t, (int)nt, 96, ARCHS[a], &sum);
        free(t);
        gm_engine_free(e_same);
        gm_engine_free(e_other);
        gm_model_free(m);
        gm_model_free(same);
        gm_model_free(other);
    }
    fprintf(stderr, "  %lld proposed, %lld accepted, %lld refused by the grammar, %lld verify passes\n",
            (long long)sum.drafted, (long long)sum.accepted, (long long)sum.refused, (long long)sum.verify_passes);
    CHECK_MSG(sum.accepted > 100, "only %lld proposals accepted: acceptance under the grammar is not exercised",
              (long long)sum.accepted);
    CHECK_MSG(sum.drafted > sum.accepted, "no proposal rejected by the target: rejection is not exercised");
    CHECK_MSG(sum.refused > 20, "only %lld proposed tokens refused by the grammar: the cut is not exercised",
              (long long)sum.refused);
}

/* The default model under JSON schemas: lookup and the model as its own draft, greedy, byte-identical;
 * an array that loops (proposals accepted), and objects that close (the END token: drafted by the draft
 * model, the step's own token otherwise). */
TEST(grammar_greedy_default_model) {
    if (!test_have_default_model(__func__)) return;
    gm_model *m = open_model(GM_DEFAULT_MODEL), *dm = open_model(GM_DEFAULT_MODEL);
    if (!m || !dm) return;
    gm_engine *de = new_engine(dm, 1024);
    static const struct { const char *schema, *prompt; int n; } CASES[] = {
        {"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"}, "
         "\"city\": {\"type\": \"string\"}, \"hobbies\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}}, "
         "\"required\": [\"name\", \"age\", \"city\", \"hobbies\"]}",
         "Extract the person as JSON. Text: Alice Smith is 34 and lives in Paris; she likes chess, hiking and "
         "painting. JSON:", 64},
        {"{\"type\": \"object\", \"properties\": {\"colors\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, "
         "\"maxItems\": 8}}, \"required\": [\"colors\"]}",
         "Copy the list as JSON. List: red, green, blue, cyan, magenta, yellow, black, white. JSON:", 64},
        {"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"age\": {\"type\": \"integer\"}, "
         "\"city\": {\"type\": \"string\"}}, \"required\": [\"name\", \"age\", \"city\"]}",
         "Bob Jones, 51, Oslo. The same as JSON:", 48},
    };
    const gm_spec_options so[] = {{.kind = GM_SPEC_LOOKUP}, {.kind = GM_SPEC_LOOKUP, .k_max = 4, .fixed_k = true},
                                  {.kind = GM_SPEC_DRAFT, .k_max = 4, .draft = de}};
    gm_spec_stats sum = {0};
    /* under ASan+UBSan (~10x slower) the first two schemas: an object and a list to copy */
    const size_t n_cases = SAN ? 2 : sizeof CASES / sizeof CASES[0];
    for (size_t c = 0; c < n_cases; c++) {
        int32_t *ids = NULL;
        size_t np = 0;
        gm_error err = {0};
        CHECK_OK(gm_tokenize(gm_model_tokenizer(m), CASES[c].prompt, strlen(CASES[c].prompt), true, false, &ids, &np,
                             &err), &err);
        if (ids) grammar_case(m, so, de ? 3 : 2, CASES[c].schema, true, ids, (int)np, CASES[c].n, "schema", &sum);
        free(ids);
    }
    fprintf(stderr, "  %lld proposed, %lld accepted, %lld refused by the grammar\n", (long long)sum.drafted,
            (long long)sum.accepted, (long long)sum.refused);
    CHECK_MSG(sum.accepted > 20, "default model: only %lld proposals accepted under the schemas", (long long)sum.accepted);
    gm_engine_free(de);
    gm_model_free(m);
    gm_model_free(dm);
}

/* ---------------------------------------------------------------- bad input */

TEST(bad_input) {
    gm_model *m = open_model(PATH[2]);
    if (!m) return;
    gm_engine *e = new_engine(m, 64);
    gm_error err = {0};
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    gm_spec *sp = NULL;
    const struct { gm_spec_options o; const char *msg; } bad[] = {
        {{.kind = GM_SPEC_LOOKUP, .k_max = -1}, "k_max -1"},
        {{.kind = GM_SPEC_LOOKUP, .k_max = GM_SPEC_MAX_K + 1}, "k_max 33"},
        {{.kind = GM_SPEC_LOOKUP, .ngram_min = 3, .ngram_max = 2}, "n-gram lengths"},
        {{.kind = GM_SPEC_LOOKUP, .ngram_max = 17}, "n-gram lengths"},
        {{.kind = 0}, "unknown proposer"},
        {{.kind = GM_SPEC_DRAFT}, "needs a draft engine"},
        {{.kind = GM_SPEC_DRAFT, .draft = e}, "must not be the target's"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (gm_error){0};
        CHECK_EQ_INT(gm_spec_new(s, &bad[i].o, &sp, &err), GM_ERR_ARG);
        CHECK_MSG(strstr(err.msg, bad[i].msg) != NULL, "case %zu: message '%s' lacks '%s'", i, err.msg, bad[i].msg);
        CHECK(sp == NULL);
    }
    /* misuse of a step: an empty history, a full context */
    gm_spec_options ok = {.kind = GM_SPEC_LOOKUP};
    CHECK_OK(gm_spec_new(s, &ok, &sp, &err), &err);
    const gm_sampling smp = gm_sampling_default();
    CHECK_EQ_INT(gm_spec_step(sp, &smp, 0, NULL, NULL, &err), GM_ERR_STATE);
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = TM_BYTE0 + i % 5;
    CHECK_OK(gm_seq_append(s, ids, 64, &err), &err);
    CHECK_EQ_INT(gm_spec_step(sp, &smp, 0, NULL, NULL, &err), GM_ERR_CONTEXT);
    /* one token short of full: the step may add only the target's token, whatever lookup finds */
    CHECK_OK(gm_seq_truncate(s, 62, &err), &err);
    int n = 0;
    CHECK_OK(gm_spec_step(sp, &smp, 0, NULL, &n, &err), &err);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(gm_seq_length(s), 63);
    gm_spec_free(sp);
    gm_seq_free(s);
    gm_engine_free(e);
    /* vocabulary mismatch: the default model (262144 tokens) drafting for a tiny one (300) */
    if (test_have_default_model(__func__)) {
        gm_model *big = open_model(GM_DEFAULT_MODEL);
        gm_engine *te = new_engine(m, 64), *be = big ? new_engine(big, 64) : NULL;
        gm_seq *t = NULL;
        CHECK_OK(gm_seq_new(te, &t, &err), &err);
        gm_spec_options so = {.kind = GM_SPEC_DRAFT, .draft = be};
        err = (gm_error){0};
        CHECK_EQ_INT(gm_spec_new(t, &so, &sp, &err), GM_ERR_ARG);
        CHECK_MSG(strstr(err.msg, "vocabulary") != NULL, "message: %s", err.msg);
        gm_seq_free(t);
        gm_engine_free(te);
        gm_engine_free(be);
        gm_model_free(big);
    } else {
        fprintf(stderr, "  (default model missing: vocabulary mismatch not checked)\n");
    }
    gm_model_free(m);
}

TEST(lookup_proposals) {
    const int32_t h[] = {1, 2, 3, 4, 5, 9, 2, 3, 4, 7, 8, 1, 2, 3, 4};
    int32_t out[8];
    /* the longest n-gram wins: "1 2 3 4" occurred at the start, followed by 5 9 2 */
    CHECK_EQ_INT(gm_lookup_propose(h, 15, 2, 4, 3, out), 3);
    CHECK(out[0] == 5 && out[1] == 9 && out[2] == 2);
    /* up to 3-grams: "2 3 4" most recently at 6, followed by 7 8 1 ... (6 tokens until the end) */
    CHECK_EQ_INT(gm_lookup_propose(h, 15, 2, 3, 3, out), 3);
    CHECK(out[0] == 7 && out[1] == 8 && out[2] == 1);
    CHECK_EQ_INT(gm_lookup_propose(h, 15, 2, 3, 8, out), 6);
    const int32_t none[] = {1, 2, 3, 4, 5, 6};
    CHECK_EQ_INT(gm_lookup_propose(none, 6, 1, 4, 4, out), 0);
    CHECK_EQ_INT(gm_lookup_propose(h, 15, 2, 4, 0, out), 0);
}

/* The default model: copy-heavy and free-text prompts, lookup and the model as its own draft. */
TEST(greedy_default_model) {
    if (!test_have_default_model(__func__)) return;
    gm_model *m = open_model(GM_DEFAULT_MODEL), *dm = open_model(GM_DEFAULT_MODEL);
    if (!m || !dm) return;
    static const char *PROMPTS[] = {
        "Copy the list exactly.\nList: apples, pears, plums, cherries, grapes, lemons, limes.\nCopy: apples, pears,",
        "def area(w, h):\n    return w * h\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\ndef area(w, h):\n",
        "The history of the bicycle begins in the early nineteenth century, when",
    };
    enum { N = 32 };
    const gm_sampling s = gm_sampling_default();
    int64_t acc = 0;
    gm_engine *de = new_engine(dm, 1024);
    for (int p = 0; p < (SAN ? 2 : 3); p++) { /* under ASan the two copy-heavy prompts */
        int32_t *ids = NULL, ref[N], got[N];
        size_t np = 0;
        gm_error err = {0};
        CHECK_OK(gm_tokenize(gm_model_tokenizer(m), PROMPTS[p], strlen(PROMPTS[p]), true, false, &ids, &np, &err), &err);
        generate(m, NULL, ids, (int)np, N, &s, ref, NULL);
        gm_spec_options so = {.kind = GM_SPEC_LOOKUP};
        gm_spec_stats st = {0};
        generate(m, &so, ids, (int)np, N, &s, got, &st);
        CHECK_MSG(!memcmp(ref, got, sizeof ref), "default model, prompt %d: lookup changed the greedy output", p);
        acc += st.accepted;
        if (p == 0 && de) {
            gm_spec_options d = {.kind = GM_SPEC_DRAFT, .k_max = 4, .draft = de};
            generate(m, &d, ids, (int)np, N, &s, got, &st);
            CHECK_MSG(!memcmp(ref, got, sizeof ref), "default model as its own draft changed the greedy output");
            CHECK_MSG(st.accepted == st.drafted && st.drafted > 0, "own draft: %lld of %lld accepted",
                      (long long)st.accepted, (long long)st.drafted);
        }
        free(ids);
    }
    CHECK_MSG(acc > 10, "default model: only %lld lookup proposals accepted on copy-heavy prompts", (long long)acc);
    gm_engine_free(de);
    gm_model_free(m);
    gm_model_free(dm);
}

int main(int argc, char **argv) {
    SAN = getenv("GM_SANITIZER_BUILD") != NULL;
    for (int a = 0; a < 3; a++) {
        tm_options o;
        tm_options_default(&o, ARCHS[a]);
        o.n_layers = 3;
        o.sliding_window = 8;
        o.context_length = 1024;
        snprintf(PATH[a], sizeof PATH[a], "/tmp/gm_test_spec_%d_%s.gguf", (int)getpid(), ARCHS[a]);
        char err[256];
        if (!tm_write_gguf(&o, PATH[a], err, sizeof err)) {
            fprintf(stderr, "cannot write %s: %s\n", PATH[a], err);
            return 1;
        }
        if (a == 2) { /* the draft: the target's first two of three layers, so q overlaps p without being p */
            o.n_layers = 2;
            snprintf(DRAFT_PATH, sizeof DRAFT_PATH, "/tmp/gm_test_spec_%d_draft.gguf", (int)getpid());
            if (!tm_write_gguf(&o, DRAFT_PATH, err, sizeof err)) {
                fprintf(stderr, "cannot write %s: %s\n", DRAFT_PATH, err);
                return 1;
            }
        }
    }
    V = tm_vocab_size();
    const char *only = argc > 1 ? argv[1] : NULL;
#define MAYBE(t) \
    if (!only || !strcmp(only, #t)) RUN(t)
    MAYBE(lookup_proposals);
    MAYBE(greedy_lookup_tiny);
    MAYBE(greedy_draft_tiny);
    MAYBE(gate_backs_off);
    MAYBE(rollback);
    MAYBE(many_sequences);
    MAYBE(greedy_to_context_end);
    MAYBE(sampling_lookup_distribution);
    MAYBE(sampling_draft_distribution);
    MAYBE(sampling_grammar_distribution);
    MAYBE(bad_input);
    MAYBE(greedy_default_model);
    MAYBE(grammar_greedy_tiny);
    MAYBE(grammar_greedy_default_model);
    for (int a = 0; a < 3; a++) unlink(PATH[a]);
    unlink(DRAFT_PATH);
    return test_summary();
}
