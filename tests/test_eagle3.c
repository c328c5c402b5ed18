/* tests/test_eagle3.c — EAGLE-3 heads against llama.cpp's draft-eagle3 on tiny synthetic GGUFs.
 *
 * tests/data/eagle3 (tests/gen/gen_eagle3_fixtures.py, tests/gen/eagle3_llama_harness.cpp; llama.cpp 0.3.36 over
 * libllama, F32 caches, CPU): two heads over the tiny Gemma 4 target gemma4-dense (llama.cpp exposes no layer taps
 * for Gemma 3, so there is no Gemma 3 fixture). eagle3-gemma4: width 32, taps [1, 3, 7] (7 = the target's layer
 * count: its final-normed state), the target's token embedding, the full vocabulary. eagle3-gemma4-d2t: width 24
 * with 4 query heads of 8 (a query width of 32), taps [2, 3, 4], norm_before_fc and norm_before_residual, its own
 * embedding, a 64-token draft vocabulary mapped by d2t. Each .draft.txt has the target's taps and the encoder's
 * output g0 for all 40 positions, then 7 cases of 3 draft steps: pairs (token k+1, g0_k) at k < P in the head's
 * cache, step 0 (token, g0_P) at P, step k (the previous step's argmax, its g) at P + k.
 *
 * Checked stage by stage, each against llama.cpp: the target's taps (this engine's tap rows and final state), the
 * encoder on llama.cpp's taps, each step's logits (draft vocabulary) and g on llama.cpp's g0 and our previous g.
 * Tolerance: rounding only separates the engines: 2e-3 of the row's largest |value|, the same argmax. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/eagle3.h"
#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"

#define NTOK 40
#define V 300
#define BB 32
#define MAXW 32
#define MAXCASES 8
#define STEPS 3
#define REL_TOL 2e-3

typedef struct {
    int n_tok, taps_ids[3], n_d2t, d2t[V], width, n_cases;
    int32_t tok[NTOK];
    float taps[NTOK][3 * BB], g0[NTOK][MAXW];
    struct {
        int pos, tok[STEPS], n_logits;
        float logits[STEPS][V], g[STEPS][MAXW];
    } c[MAXCASES];
} fixture;

static bool load(const char *rel, fixture *fx) {
    size_t len;
    char *text = (char *)test_read_file(test_data_path(rel), &len);
    if (!text) return false;
    memset(fx, 0, sizeof *fx);
    bool ok = true;
    int ci = -1, step = -1;
    for (char *line = strtok(text, "\n"); line && ok; line = strtok(NULL, "\n")) {
        char *p = line;
        if (!strncmp(line, "tokens ", 7)) {
            fx->n_tok = (int)strtol(p + 7, &p, 10);
            ok = fx->n_tok == NTOK;
            for (int i = 0; ok && i < NTOK; i++) fx->tok[i] = (int32_t)strtol(p, &p, 10);
        } else if (!strncmp(line, "layers ", 7)) {
            ok = strtol(p + 7, &p, 10) == 3;
            for (int i = 0; ok && i < 3; i++) fx->taps_ids[i] = (int)strtol(p, &p, 10);
        } else if (!strncmp(line, "d2t ", 4)) {
            fx->n_d2t = (int)strtol(p + 4, &p, 10);
            ok = fx->n_d2t > 0 && fx->n_d2t <= V;
            for (int i = 0; ok && i < fx->n_d2t; i++) fx->d2t[i] = (int)strtol(p, &p, 10);
        } else if (!strncmp(line, "taps ", 5)) {
            const int pos = (int)strtol(p + 5, &p, 10);
            ok = pos >= 0 && pos < NTOK && test_parse_floats(p, fx->taps[pos], 3 * BB) == 3 * BB;
        } else if (!strncmp(line, "g0 ", 3)) {
            const int pos = (int)strtol(p + 3, &p, 10);
            ok = pos >= 0 && pos < NTOK;
            if (ok) fx->width = test_parse_floats(p, fx->g0[pos], MAXW);
        } else if (!strncmp(line, "case ", 5)) {
            ok = ++ci < MAXCASES;
            if (ok) fx->c[ci].pos = (int)strtol(p + 5, &p, 10), fx->n_cases = ci + 1;
        } else if (ci >= 0 && !strncmp(line, "step ", 5)) {
            step = (int)strtol(p + 5, &p, 10);
            ok = step >= 0 && step < STEPS;
            if (ok) fx->c[ci].tok[step] = (int32_t)strtol(p, &p, 10);
        } else if (ci >= 0 && step >= 0 && !strncmp(line, "logits ", 7)) {
            fx->c[ci].n_logits = test_parse_floats(p + 7, fx->c[ci].logits[step], V);
        } else if (ci >= 0 && step >= 0 && !strncmp(line, "g ", 2)) {
            ok = test_parse_floats(p + 2, fx->c[ci].g[step], MAXW) == fx->width;
        }
    }
    free(text);
    return ok && fx->n_tok == NTOK && fx->n_cases > 0 && fx->width > 0;
}

static void check_head(const char *stem, gm_backend_kind kind) {
    char rel[128], name[96];
    snprintf(name, sizeof name, "%s (%s)", stem, kind == GM_BACKEND_REFERENCE ? "reference" : "cpu");
    fixture *fx = malloc(sizeof *fx);
    snprintf(rel, sizeof rel, "eagle3/%s.draft.txt", stem);
    if (!fx || !load(rel, fx)) {
        CHECK_MSG(false, "cannot read %s", rel);
        free(fx);
        return;
    }
    gm_error err = {0};
    gm_model *t = NULL, *h = NULL;
    gm_engine *e = NULL;
    gm_eagle3 *d = NULL;
    CHECK_OK(gm_model_open(test_data_path("gemma4/gemma4-dense.gguf"), NULL, &t, &err), &err);
    snprintf(rel, sizeof rel, "eagle3/%s.gguf", stem);
    CHECK_OK(gm_model_open(test_data_path(rel), NULL, &h, &err), &err);
    const gm_engine_options eo = {.n_threads = 2, .n_ctx = 64, .kv_type = GM_KV_DTYPE_F32, .backend = kind};
    if (t && h) CHECK_OK(gm_engine_new(t, &eo, &e, &err), &err);
    if (e) CHECK_OK(gm_eagle3_new(e, h, 0, &d, &err), &err);
    if (!d) goto done;
    const int W = fx->width, L = gm_model_config(t)->n_layers, *ids = gm_eagle3_taps(d);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(ids[i], fx->taps_ids[i]);

    /* the target's taps: the inputs of the layers < L, the final-normed state for L */
    int layers[3], n_layers = 0;
    for (int i = 0; i < 3; i++)
        if (ids[i] < L) layers[n_layers++] = ids[i];
    CHECK_OK(gm_engine_set_taps(e, layers, n_layers, &err), &err);
    float *tap = malloc(sizeof(float) * NTOK * 3 * BB), *mine = malloc(sizeof(float) * NTOK * 3 * BB);
    float *hid = malloc(sizeof(float) * NTOK * BB);
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    gm_row rows[NTOK];
    for (int p = 0; p < NTOK; p++)
        rows[p] = (gm_row){.seq = s, .token = fx->tok[p], .pos = p, .taps = tap + (size_t)p * 3 * BB,
                           .hidden = hid + (size_t)p * BB};
    CHECK_OK(gm_engine_forward(e, rows, NTOK, NULL, &err), &err);
    float worst = 0;
    for (int p = 0; p < NTOK; p++) {
        for (int i = 0, a = 0; i < 3; i++) {
            const float *src = ids[i] < L ? tap + (size_t)p * 3 * BB + (size_t)(a++) * BB : hid + (size_t)p * BB;
            memcpy(mine + (size_t)p * 3 * BB + (size_t)i * BB, src, BB * sizeof(float));
        }
        const float r = test_rel_err(mine + (size_t)p * 3 * BB, fx->taps[p], 3 * BB);
        worst = r > worst ? r : worst;
    }
    fprintf(stderr, "  %s: target taps rel err %.2g\n", name, worst);
    CHECK_MSG(worst <= REL_TOL, "%s: the target's taps differ from llama.cpp's by %g", stem, worst);

    /* the encoder on llama.cpp's taps */
    float g0[NTOK * MAXW]; /* rows of the head's width W */
    CHECK_OK(gm_eagle3_encode(d, &fx->taps[0][0], NTOK, g0, &err), &err);
    worst = 0;
    for (int p = 0; p < NTOK; p++) {
        const float r = test_rel_err(g0 + (size_t)p * W, fx->g0[p], W);
        worst = r > worst ? r : worst;
    }
    fprintf(stderr, "  %s: encoder rel err %.2g\n", name, worst);
    CHECK_MSG(worst <= REL_TOL, "%s: the encoder differs by %g", stem, worst);

    /* the decoder: each case's cache of pairs, then 3 chained steps */
    float wl = 0, wg = 0, logits[V], g[MAXW], gn[MAXW];
    int agree = 0, steps = 0;
    for (int ci = 0; ci < fx->n_cases; ci++) {
        const int P = fx->c[ci].pos;
        gm_e3_seq *hs = NULL;
        CHECK_OK(gm_e3_seq_new(d, &hs, &err), &err);
        if (!hs) break;
        for (int k = 0; k < P; k++) {
            const gm_eagle3_row r = {.seq = hs, .pos = k, .token = fx->tok[k + 1], .g = fx->g0[k]};
            CHECK_OK(gm_eagle3_decode(d, &r, 1, &err), &err);
        }
        memcpy(g, fx->g0[P], sizeof g);
        for (int k = 0; k < STEPS; k++) {
            const gm_eagle3_row r = {.seq = hs, .pos = P + k, .token = fx->c[ci].tok[k], .g = g, .g_next = gn,
                                     .logits = logits};
            CHECK_OK(gm_eagle3_decode(d, &r, 1, &err), &err);
            float draft[V];
            const int nd = fx->n_d2t ? fx->n_d2t : V;
            for (int i = 0; i < nd; i++) draft[i] = logits[fx->n_d2t ? fx->d2t[i] : i];
            const float el = test_rel_err(draft, fx->c[ci].logits[k], nd), eg = test_rel_err(gn, fx->c[ci].g[k], W);
            wl = el > wl ? el : wl, wg = eg > wg ? eg : wg;
            agree += test_argmax(draft, nd) == test_argmax(fx->c[ci].logits[k], nd);
            steps++;
            memcpy(g, gn, sizeof g);
        }
        gm_e3_seq_free(hs);
    }
    fprintf(stderr, "  %s: %d cases, %d steps: logits rel err %.2g, g rel err %.2g, argmax %d/%d\n", name,
            fx->n_cases, steps, wl, wg, agree, steps);
    CHECK(steps == fx->n_cases * STEPS && steps > 0);
    CHECK_MSG(wl <= REL_TOL && wg <= REL_TOL, "%s: logits %g, g %g", stem, wl, wg);
    CHECK_EQ_INT(agree, steps);
    gm_seq_free(s);
    free(tap);
    free(mine);
    free(hid);
done:
    gm_eagle3_free(d);
    gm_engine_free(e);
    gm_model_free(h);
    gm_model_free(t);
    free(fx);
}

/* n tokens after the first np of the target fixture, greedy or as s says, with the head at path drafting k (k 0:
 * no speculation). */
static int generate(const char *head, const gm_sampling *s, int np, int n, int k, bool fixed, int32_t *out,
                    gm_spec_stats *st) {
    gm_error err = {0};
    char hpath[512];
    snprintf(hpath, sizeof hpath, "%s", head); /* test_data_path's buffer is reused */
    fixture *fx = malloc(sizeof *fx);
    gm_model *t = NULL, *h = NULL;
    gm_generator *g = NULL;
    gm_eagle3 *d = NULL;
    int got = 0;
    if (!fx || !load("eagle3/eagle3-gemma4.draft.txt", fx)) goto done;
    CHECK_OK(gm_model_open(test_data_path("gemma4/gemma4-dense.gguf"), NULL, &t, &err), &err);
    CHECK_OK(gm_model_open(hpath, NULL, &h, &err), &err);
    const gm_generator_options go = {.n_threads = 2, .n_ctx = 128, .ignore_stop = true};
    if (t && h) CHECK_OK(gm_generator_new(t, &go, &g, &err), &err);
    if (g && k) {
        CHECK_OK(gm_eagle3_new(gm_generator_engine(g), h, 0, &d, &err), &err);
        const gm_spec_options so = {.kind = GM_SPEC_EAGLE3, .k_max = k, .fixed_k = fixed, .eagle3 = d};
        if (d) CHECK_OK(gm_generator_set_speculative(g, &so, &err), &err);
    }
    if (g) CHECK_OK(gm_generator_prefill(g, fx->tok, np, &err), &err);
    if (g) CHECK_OK(gm_generator_generate_cached(g, n, s, out, &got, &err), &err);
    if (g && st) gm_spec_get_stats(gm_generator_speculative(g), st);
done:
    gm_generator_free(g);
    gm_eagle3_free(d);
    gm_model_free(h);
    gm_model_free(t);
    free(fx);
    return got;
}

/* Greedy output with a head drafting equals the output without (both heads, k 1 / 3 / 8, fixed and adaptive). */
TEST(greedy_exact) {
    enum { N = 40 };
    const char *heads[] = {"eagle3/eagle3-gemma4.gguf", "eagle3/eagle3-gemma4-d2t.gguf"};
    const gm_sampling s = gm_sampling_default();
    for (int np = 3; np <= 20; np += 17) {
        int32_t ref[N], got[N];
        CHECK_EQ_INT(generate(test_data_path(heads[0]), &s, np, N, 0, false, ref, NULL), N);
        for (int hi = 0; hi < 2; hi++)
            for (int k = 1; k <= 8; k = k == 1 ? 3 : 8 + (k == 8) * 8)
                for (int fixed = 0; fixed < 2; fixed++) {
                    gm_spec_stats st = {0};
                    CHECK_EQ_INT(generate(test_data_path(heads[hi]), &s, np, N, k, fixed, got, &st), N);
                    CHECK_MSG(!memcmp(ref, got, sizeof ref), "%s, prompt %d, k %d%s: greedy output differs", heads[hi],
                              np, k, fixed ? " fixed" : "");
                    CHECK_MSG(st.drafted > 0 && st.draft_evals > 0, "%s k %d: %lld drafted", heads[hi], k,
                              (long long)st.drafted);
                    if (fixed) /* every step drafts but the last k (max_new clamps them) */
                        CHECK_MSG(st.verify_passes >= st.steps - k, "%s k %d: %lld of %lld steps drafted", heads[hi], k,
                                  (long long)st.verify_passes, (long long)st.steps);
                }
    }
}

/* Accepted drafts: the head with its output norm zeroed guesses token 0 always, the target is biased to it. */
TEST(greedy_accepted) {
    char path[] = "/tmp/gm_e3_zeroXXXXXX";
    char src[512];
    snprintf(src, sizeof src, "%s", test_data_path("eagle3/eagle3-gemma4.gguf"));
    CHECK(test_zeroed_copy(src, "output_norm.weight", path));
    enum { N = 40 };
    int32_t ref[N], got[N];
    const gm_logit_bias bias = {.token = 0, .bias = 1000.0f};
    gm_sampling s = gm_sampling_default();
    s.logit_bias = &bias, s.n_logit_bias = 1;
    CHECK_EQ_INT(generate(path, &s, 6, N, 0, false, ref, NULL), N);
    for (int k = 1; k <= 4; k += 3) {
        gm_spec_stats st = {0};
        CHECK_EQ_INT(generate(path, &s, 6, N, k, true, got, &st), N);
        CHECK_MSG(!memcmp(ref, got, sizeof ref), "k %d: greedy output differs", k);
        CHECK_MSG(st.drafted >= N / (k + 1) - 1 && st.accepted == st.drafted, "k %d: %lld of %lld accepted", k,
                  (long long)st.accepted, (long long)st.drafted);
    }
    unlink(path);
}

/* Sampling: the step's first token follows the target's distribution while the head drafts (its guess a point mass:
 * accepted with probability p(guess), else a draw from p without it). 20000 trials, each a fork of the prompt
 * (computed with taps by the step) and one sampled step. */
TEST(sampling_distribution) {
    fixture *fx = malloc(sizeof *fx);
    gm_error err = {0};
    gm_model *t = NULL, *h = NULL;
    gm_engine *e = NULL;
    gm_eagle3 *d = NULL;
    gm_seq *base = NULL;
    enum { NP = 8 };
    const float T = 1.2f;
    CHECK(fx && load("eagle3/eagle3-gemma4.draft.txt", fx));
    CHECK_OK(gm_model_open(test_data_path("gemma4/gemma4-dense.gguf"), NULL, &t, &err), &err);
    CHECK_OK(gm_model_open(test_data_path("eagle3/eagle3-gemma4.gguf"), NULL, &h, &err), &err);
    const gm_engine_options eo = {.n_threads = 2, .n_ctx = 64, .kv_type = GM_KV_DTYPE_F32, .kv_mem = 4 << 20};
    if (t && h) CHECK_OK(gm_engine_new(t, &eo, &e, &err), &err);
    if (e) CHECK_OK(gm_eagle3_new(e, h, 0, &d, &err), &err);
    if (d) CHECK_OK(gm_seq_new(e, &base, &err), &err);
    if (!base) goto done;
    /* the target's distribution after the prompt */
    gm_seq *q = NULL;
    CHECK_OK(gm_seq_fork(base, &q, &err), &err);
    CHECK_OK(gm_seq_append(q, fx->tok, NP, &err), &err);
    CHECK_OK(gm_engine_eval(e, &q, 1, &err), &err);
    double p[V], z = 0, mx = -INFINITY;
    const float *l = gm_seq_logits(q);
    for (int v = 0; v < V; v++) mx = l[v] / T > mx ? l[v] / T : mx;
    for (int v = 0; v < V; v++) z += p[v] = exp(l[v] / T - mx);
    for (int v = 0; v < V; v++) p[v] /= z;
    gm_seq_free(q);
    CHECK_OK(gm_seq_append(base, fx->tok, NP, &err), &err);
    gm_sampling smp = gm_sampling_default();
    smp.temperature = T;
    const int n = getenv("GM_SANITIZER_BUILD") ? 2000 : 20000;
    int *count = calloc(V, sizeof *count), taken = 0;
    int64_t drafted = 0, accepted = 0;
    for (int i = 0; i < n && count; i++) {
        gm_seq *s = NULL;
        gm_spec *sp = NULL;
        const gm_spec_options so = {.kind = GM_SPEC_EAGLE3, .k_max = 2, .fixed_k = true, .eagle3 = d};
        const int32_t *toks;
        int nt = 0;
        smp.seed = 9000 + (uint64_t)i;
        if (gm_seq_fork(base, &s, &err) || gm_spec_new(s, &so, &sp, &err) || gm_spec_step(sp, &smp, 0, &toks, &nt, &err) ||
            nt < 1) {
            CHECK_MSG(false, "trial %d: %s", i, err.msg);
            gm_spec_free(sp);
            gm_seq_free(s);
            break;
        }
        count[toks[0]]++, taken++;
        gm_spec_stats st;
        gm_spec_get_stats(sp, &st);
        drafted += st.drafted, accepted += st.accepted;
        gm_spec_free(sp);
        gm_seq_free(s);
    }
    CHECK_EQ_INT(taken, n);
    CHECK_MSG(drafted == 2ll * n, "%lld drafted in %d one-step trials of k 2", (long long)drafted, n);
    fprintf(stderr, "  EAGLE-3 sampling: %lld of %lld guesses accepted\n", (long long)accepted, (long long)drafted);
    CHECK_MSG(test_chi_square_ok(count, p, V, n, "EAGLE-3 head, T 1.2"), "the first token's distribution is not the target's");
    free(count);
done:
    gm_seq_free(base);
    gm_eagle3_free(d);
    gm_engine_free(e);
    gm_model_free(h);
    gm_model_free(t);
    free(fx);
}

TEST(eagle3_gemma4) {
    check_head("eagle3-gemma4", GM_BACKEND_CPU);
    check_head("eagle3-gemma4", GM_BACKEND_REFERENCE);
}
TEST(eagle3_gemma4_d2t) {
    check_head("eagle3-gemma4-d2t", GM_BACKEND_CPU);
    check_head("eagle3-gemma4-d2t", GM_BACKEND_REFERENCE);
}

int main(void) {
    RUN(eagle3_gemma4);
    RUN(eagle3_gemma4_d2t);
    RUN(greedy_exact);
    RUN(greedy_accepted);
    RUN(sampling_distribution);
    return test_summary();
}
