/* tests/test_mtp.c — Gemma 4's MTP assistant (gm_mtp) against llama.cpp's draft-mtp on tiny synthetic GGUFs.
 *
 * tests/data/gemma4/gemma4-mtp.gguf (tests/gen/gen_gemma4_mtp_fixtures.py) is a 4-layer assistant of width 16
 * (3 sliding layers of head_dim 8 with 2 KV heads, window 6 — shorter than the target's 8, so the drafter's own
 * window is what counts —, one full layer of head_dim 16 with 1 KV head and the target's rope_freqs) for
 * gemma4-dense.gguf (width 32, 7 layers, its layers 5 and 6 reading layers 3 and 4's cache: so the assistant's
 * sliding layers read target layer 3's keys and its full layer layer 4's). gemma4-mtp.draft.txt holds what
 * llama.cpp 0.3.36 computes over libllama (tests/gen/mtp_llama_harness.cpp: F32 cache, CPU): for draft
 * positions p in {1, 5, 12, 20, 33}, the target's final-normed hidden state at p - 1, then 3 draft steps at p,
 * each with its token, logits and h_next.
 *
 * Here the target engine computes tokens [0, p) and hands its hidden state at p - 1 to the assistant; each step
 * feeds the fixture's token and our previous h_next. Tolerances: rounding only separates the engines (llama.cpp's
 * GELU reads an f16 table; op orders): |Δlogit| <= 2e-3 x the step's max |logit|, |Δh| <= 2e-3 x max |h|, the
 * same argmax everywhere. A real error (a norm, the scale of the embedding, the source layer, the window, RoPE,
 * the output scale) moves them by far more; `sensitivity` checks that zeroing h or changing the token does. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"

#define MAX_TOK 64
#define MAX_CASES 8
#define MAX_STEPS 4
#define V 300
#define BB 32
#define REL_TOL 2e-3

typedef struct {
    int pos, n_steps;
    float h0[BB];
    int32_t tok[MAX_STEPS];
    float logits[MAX_STEPS][V], h[MAX_STEPS][BB];
} draft_case;

typedef struct {
    int n_tok, n_cases;
    int32_t tok[MAX_TOK];
    draft_case c[MAX_CASES];
} fixture;

static bool load_fixture(const char *path, fixture *fx) {
    size_t len;
    char *text = (char *)test_read_file(path, &len);
    if (!text) return false;
    memset(fx, 0, sizeof *fx);
    bool ok = true;
    draft_case *c = NULL;
    int step = -1;
    for (char *line = strtok(text, "\n"); line && ok; line = strtok(NULL, "\n")) {
        char *p = line;
        if (!strncmp(line, "tokens ", 7)) {
            fx->n_tok = (int)strtol(p + 7, &p, 10);
            ok = fx->n_tok > 0 && fx->n_tok <= MAX_TOK;
            for (int i = 0; ok && i < fx->n_tok; i++) fx->tok[i] = (int32_t)strtol(p, &p, 10);
        } else if (!strncmp(line, "case ", 5)) {
            ok = fx->n_cases < MAX_CASES;
            if (!ok) break;
            c = &fx->c[fx->n_cases++];
            c->pos = (int)strtol(p + 5, &p, 10);
            c->n_steps = (int)strtol(p, &p, 10);
            ok = c->n_steps > 0 && c->n_steps <= MAX_STEPS;
            step = -1;
        } else if (c && !strncmp(line, "h0 ", 3)) {
            ok = test_parse_floats(p + 3, c->h0, BB) == BB;
        } else if (c && !strncmp(line, "step ", 5)) {
            step = (int)strtol(p + 5, &p, 10);
            ok = step >= 0 && step < c->n_steps;
            if (ok) c->tok[step] = (int32_t)strtol(p, &p, 10);
        } else if (c && step >= 0 && !strncmp(line, "logits ", 7)) {
            ok = test_parse_floats(p + 7, c->logits[step], V) == V;
        } else if (c && step >= 0 && !strncmp(line, "h ", 2)) {
            ok = test_parse_floats(p + 2, c->h[step], BB) == BB;
        }
    }
    free(text);
    return ok && fx->n_cases > 0 && fx->n_tok > 0;
}

typedef struct {
    gm_model *t, *a;
    gm_engine *e;
    gm_mtp *d;
} rig;

static bool rig_open(rig *r, gm_backend_kind kind) {
    gm_error err = {0};
    memset(r, 0, sizeof *r);
    const gm_engine_options eo = {.n_threads = 2, .n_ctx = 64, .kv_type = GM_KV_DTYPE_F32, .backend = kind,
                                  .kv_mem = 4 << 20};
    CHECK_OK(gm_model_open(test_data_path("gemma4/gemma4-dense.gguf"), NULL, &r->t, &err), &err);
    CHECK_OK(gm_model_open(test_data_path("gemma4/gemma4-mtp.gguf"), NULL, &r->a, &err), &err);
    if (!r->t || !r->a) return false;
    CHECK_OK(gm_engine_new(r->t, &eo, &r->e, &err), &err);
    if (!r->e) return false;
    CHECK_OK(gm_mtp_new(r->e, r->a, NULL, &r->d, &err), &err);
    return r->d != NULL;
}

static void rig_close(rig *r) {
    gm_mtp_free(r->d);
    gm_engine_free(r->e);
    gm_model_free(r->a);
    gm_model_free(r->t);
}

/* The target computes tokens [0, p); its hidden state at p - 1 into h. */
static gm_seq *prefill(rig *r, const fixture *fx, int p, float *h) {
    gm_error err = {0};
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(r->e, &s, &err), &err);
    if (!s) return NULL;
    gm_row rows[MAX_TOK];
    for (int i = 0; i < p; i++) rows[i] = (gm_row){.seq = s, .token = fx->tok[i], .pos = i, .hidden = i == p - 1 ? h : NULL};
    CHECK_OK(gm_engine_forward(r->e, rows, p, NULL, &err), &err);
    return s;
}

/* Every case of the fixture through the assistant: the target's h, then each step's logits, argmax and h_next. */
static void parity(gm_backend_kind kind, const char *name) {
    fixture *fx = malloc(sizeof *fx);
    rig r;
    if (!fx || !load_fixture(test_data_path("gemma4/gemma4-mtp.draft.txt"), fx)) {
        CHECK_MSG(false, "cannot read gemma4-mtp.draft.txt");
        free(fx);
        return;
    }
    if (!rig_open(&r, kind)) {
        rig_close(&r);
        free(fx);
        return;
    }
    float worst_l = 0.0f, worst_h = 0.0f, worst_h0 = 0.0f;
    int agree = 0, steps = 0;
    for (int ci = 0; ci < fx->n_cases; ci++) {
        const draft_case *c = &fx->c[ci];
        float h[BB], h_next[BB], logits[V];
        gm_seq *s = prefill(&r, fx, c->pos, h);
        if (!s) continue;
        const float e0 = test_rel_err(h, c->h0, BB);
        worst_h0 = e0 > worst_h0 ? e0 : worst_h0;
        for (int k = 0; k < c->n_steps; k++) {
            gm_error err = {0};
            const gm_mtp_row row = {.seq = s, .token = c->tok[k], .h = h, .logits = logits, .h_next = h_next};
            CHECK_OK(gm_mtp_draft(r.d, &row, 1, &err), &err);
            const float el = test_rel_err(logits, c->logits[k], V);
            const float eh = test_rel_err(h_next, c->h[k], BB);
            worst_l = el > worst_l ? el : worst_l;
            worst_h = eh > worst_h ? eh : worst_h;
            agree += test_argmax(logits, V) == test_argmax(c->logits[k], V);
            steps++;
            memcpy(h, h_next, sizeof h);
        }
        gm_seq_free(s);
    }
    fprintf(stderr, "  %s: %d cases, %d steps: target h rel err %.2g, logits rel err %.2g, h_next rel err %.2g, "
            "argmax %d/%d\n", name, fx->n_cases, steps, worst_h0, worst_l, worst_h, agree, steps);
    CHECK(steps == 15);
    CHECK_MSG(worst_h0 <= REL_TOL, "target hidden state: relative error %g", worst_h0);
    CHECK_MSG(worst_l <= REL_TOL, "draft logits: relative error %g", worst_l);
    CHECK_MSG(worst_h <= REL_TOL, "h_next: relative error %g", worst_h);
    CHECK_EQ_INT(agree, steps);
    rig_close(&r);
    free(fx);
}

/* The checks can fail: the same steps with h zeroed (the assistant ignoring the target's state) or with the
 * token's embedding taken at another token move the logits far past the tolerance. */
TEST(sensitivity) {
    fixture *fx = malloc(sizeof *fx);
    rig r;
    if (!fx || !load_fixture(test_data_path("gemma4/gemma4-mtp.draft.txt"), fx) || !rig_open(&r, GM_BACKEND_CPU)) {
        CHECK_MSG(false, "cannot set up");
        free(fx);
        return;
    }
    const draft_case *c = &fx->c[2];
    float h[BB], zero[BB] = {0}, h_next[BB], logits[V];
    gm_seq *s = prefill(&r, fx, c->pos, h);
    gm_error err = {0};
    gm_mtp_row row = {.seq = s, .token = c->tok[0], .h = zero, .logits = logits, .h_next = h_next};
    CHECK_OK(gm_mtp_draft(r.d, &row, 1, &err), &err);
    const float ez = test_rel_err(logits, c->logits[0], V);
    row.h = h, row.token = (c->tok[0] + 1) % V;
    CHECK_OK(gm_mtp_draft(r.d, &row, 1, &err), &err);
    const float et = test_rel_err(logits, c->logits[0], V);
    fprintf(stderr, "  h zeroed: rel err %.2g; another token: %.2g\n", ez, et);
    CHECK(ez > 50 * REL_TOL);
    CHECK(et > 50 * REL_TOL);
    gm_seq_free(s);
    rig_close(&r);
    free(fx);
}

/* n greedy tokens after the fixture's first np tokens, with the assistant drafting k (fixed) or adaptively, or
 * without speculation (k 0). */
static int greedy_run_with(const fixture *fx, const char *assistant, const gm_sampling *s, int np, int n, int k,
                           bool fixed, int32_t *out, gm_spec_stats *st) {
    gm_error err = {0};
    gm_model *t = NULL, *a = NULL;
    gm_generator *g = NULL;
    gm_mtp *d = NULL;
    int got = 0;
    char apath[512]; /* test_data_path's buffer is reused */
    snprintf(apath, sizeof apath, "%s", assistant);
    CHECK_OK(gm_model_open(test_data_path("gemma4/gemma4-dense.gguf"), NULL, &t, &err), &err);
    CHECK_OK(gm_model_open(apath, NULL, &a, &err), &err);
    const gm_generator_options go = {.n_threads = 2, .n_ctx = 128, .ignore_stop = true};
    if (t && a) CHECK_OK(gm_generator_new(t, &go, &g, &err), &err);
    if (g && k) {
        CHECK_OK(gm_mtp_new(gm_generator_engine(g), a, NULL, &d, &err), &err);
        const gm_spec_options so = {.kind = GM_SPEC_MTP, .k_max = k, .fixed_k = fixed, .mtp = d};
        if (d) CHECK_OK(gm_generator_set_speculative(g, &so, &err), &err);
    }
    if (g) CHECK_OK(gm_generator_prefill(g, fx->tok, np, &err), &err);
    if (g) CHECK_OK(gm_generator_generate_cached(g, n, s, out, &got, &err), &err);
    if (g && st) gm_spec_get_stats(gm_generator_speculative(g), st);
    gm_generator_free(g);
    gm_mtp_free(d);
    gm_model_free(a);
    gm_model_free(t);
    return got;
}

static int greedy_run(const fixture *fx, int np, int n, int k, bool fixed, int32_t *out, gm_spec_stats *st) {
    const gm_sampling s = gm_sampling_default();
    return greedy_run_with(fx, test_data_path("gemma4/gemma4-mtp.gguf"), &s, np, n, k, fixed, out, st);
}

/* Greedy output with the assistant drafting equals the output without: every draft checked by the target, the
 * rejected ones rolled back, the kept state of each step the one of the row before the next draft. */
TEST(greedy_exact) {
    fixture *fx = malloc(sizeof *fx);
    if (!fx || !load_fixture(test_data_path("gemma4/gemma4-mtp.draft.txt"), fx)) {
        CHECK_MSG(false, "cannot read the fixture");
        free(fx);
        return;
    }
    enum { N = 48 };
    int32_t ref[N], got[N];
    for (int np = 3; np <= 20; np += 17) {
        CHECK_EQ_INT(greedy_run(fx, np, N, 0, false, ref, NULL), N);
        const int ks[] = {1, 3, 8};
        for (int i = 0; i < 3; i++)
            for (int fixed = 0; fixed < 2; fixed++) {
                gm_spec_stats st = {0};
                CHECK_EQ_INT(greedy_run(fx, np, N, ks[i], fixed, got, &st), N);
                CHECK_MSG(!memcmp(ref, got, sizeof ref), "prompt %d, k %d%s: greedy output differs", np, ks[i],
                          fixed ? " fixed" : "");
                if (getenv("MTP_VERBOSE")) fprintf(stderr, "  np %d k %d%s: %lld drafted, %lld accepted\n", np, ks[i], fixed ? " fixed" : "", (long long)st.drafted, (long long)st.accepted);
                CHECK_MSG(st.tokens >= N && st.draft_evals > 0 && st.drafted > 0,
                          "prompt %d, k %d: %lld tokens, %lld drafted in %lld assistant calls", np, ks[i],
                          (long long)st.tokens, (long long)st.drafted, (long long)st.draft_evals);
                if (fixed) /* every step drafts but the first (no state yet) and the last k (max_new clamps them) */
                    CHECK_MSG(st.verify_passes >= st.steps - 1 - ks[i], "k %d: %lld of %lld steps drafted", ks[i],
                              (long long)st.verify_passes, (long long)st.steps);
            }
    }
    free(fx);
}

/* Drafts that are accepted: the assistant with its output norm zeroed (every logit 0: it always guesses token 0)
 * and the target pushed to token 0 by a logit bias. Every draft holds, so the steps keep k + 1 tokens, roll back
 * nothing and take the state of the last verify row; the output is the one without speculation. */
TEST(greedy_accepted) {
    fixture *fx = malloc(sizeof *fx);
    char path[] = "/tmp/gm_mtp_zeroXXXXXX", src[512];
    snprintf(src, sizeof src, "%s", test_data_path("gemma4/gemma4-mtp.gguf"));
    const bool made = fx && load_fixture(test_data_path("gemma4/gemma4-mtp.draft.txt"), fx) &&
                      test_zeroed_copy(src, "output_norm.weight", path);
    CHECK_MSG(made, "cannot write the zeroed assistant");
    if (made) {
        enum { N = 40 };
        int32_t ref[N], got[N];
        const gm_logit_bias bias = {.token = 0, .bias = 1000.0f};
        gm_sampling s = gm_sampling_default();
        s.logit_bias = &bias, s.n_logit_bias = 1;
        const int ks[] = {1, 4};
        CHECK_EQ_INT(greedy_run_with(fx, path, &s, 6, N, 0, false, ref, NULL), N);
        for (int i = 0; i < 2; i++) {
            gm_spec_stats st = {0};
            CHECK_EQ_INT(greedy_run_with(fx, path, &s, 6, N, ks[i], true, got, &st), N);
            CHECK_MSG(!memcmp(ref, got, sizeof ref), "k %d: greedy output differs", ks[i]);
            CHECK_MSG(st.drafted >= N / (ks[i] + 1) - 2 && st.accepted == st.drafted, "k %d: %lld of %lld drafts accepted", ks[i],
                      (long long)st.accepted, (long long)st.drafted);
        }
    }
    unlink(path);
    free(fx);
}

/* Sampling: the step's first token follows the target's distribution. The assistant's guess d (its argmax: a point
 * mass q) is accepted with probability p(d), else the token is drawn from p without d. A logit bias on d makes
 * p(d) 0.4 so that both branches are taken often. Each trial: a fork of a prompt whose last token is pending, a
 * greedy step (it keeps the hidden state), then the sampled step whose assistant drafts d. */
TEST(sampling_distribution) {
    fixture *fx = malloc(sizeof *fx);
    rig r;
    if (!fx || !load_fixture(test_data_path("gemma4/gemma4-mtp.draft.txt"), fx) || !rig_open(&r, GM_BACKEND_CPU)) {
        CHECK_MSG(false, "cannot set up");
        free(fx);
        return;
    }
    enum { NP = 8 };
    const float T = 1.5f;
    gm_error err = {0};
    /* what the trials will see: x the greedy token after the prompt, d the assistant's guess after x, l the
     * target's logits after x */
    float h[BB], hn[BB], dl[V], l[V];
    gm_seq *q = prefill(&r, fx, NP, h);
    gm_row last = {.seq = q, .token = fx->tok[NP - 1], .pos = NP - 1, .logits = true, .hidden = h};
    CHECK_OK(gm_seq_truncate(q, NP - 1, &err), &err);
    CHECK_OK(gm_engine_forward(r.e, &last, 1, l, &err), &err);
    const int32_t x = (int32_t)test_argmax(l, V);
    const gm_mtp_row dr = {.seq = q, .token = x, .h = h, .logits = dl, .h_next = hn};
    CHECK_OK(gm_mtp_draft(r.d, &dr, 1, &err), &err);
    const int32_t d = (int32_t)test_argmax(dl, V);
    gm_row next = {.seq = q, .token = x, .pos = NP, .logits = true};
    CHECK_OK(gm_engine_forward(r.e, &next, 1, l, &err), &err);
    gm_seq_free(q);
    double S = 0, mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = l[v] / T > mx ? l[v] / T : mx;
    for (int v = 0; v < V; v++) S += v == d ? 0 : exp(l[v] / T - mx);
    const float bias = (float)(T * (log(0.4 / 0.6 * S) + mx) - l[d]); /* p(d) = 0.4 */
    double p[V], z = 0;
    for (int v = 0; v < V; v++) z += p[v] = exp((l[v] + (v == d ? bias : 0)) / T - mx);
    for (int v = 0; v < V; v++) p[v] /= z;
    const gm_logit_bias lb = {.token = d, .bias = bias};
    gm_sampling smp = gm_sampling_default(), greedy = gm_sampling_default();
    smp.temperature = T, smp.logit_bias = &lb, smp.n_logit_bias = 1;
    gm_seq *base = NULL;
    CHECK_OK(gm_seq_new(r.e, &base, &err), &err);
    gm_row rows[NP];
    for (int i = 0; i < NP - 1; i++) rows[i] = (gm_row){.seq = base, .token = fx->tok[i], .pos = i};
    CHECK_OK(gm_engine_forward(r.e, rows, NP - 1, NULL, &err), &err);
    CHECK_OK(gm_seq_append(base, &fx->tok[NP - 1], 1, &err), &err);
    const int n = getenv("GM_SANITIZER_BUILD") ? 2000 : 20000;
    int *count = calloc(V, sizeof *count), taken = 0;
    int64_t drafted = 0, accepted = 0;
    for (int t = 0; t < n && count; t++) {
        gm_seq *s = NULL;
        gm_spec *sp = NULL;
        const gm_spec_options so = {.kind = GM_SPEC_MTP, .k_max = 1, .fixed_k = true, .mtp = r.d};
        const int32_t *toks;
        int nt = 0;
        if (gm_seq_fork(base, &s, &err) || gm_spec_new(s, &so, &sp, &err) ||
            gm_spec_step(sp, &greedy, 0, &toks, &nt, &err) || nt != 1 || toks[0] != x) {
            CHECK_MSG(false, "trial %d: set-up: %s (greedy token %d)", t, err.msg, nt ? (int)toks[0] : -1);
            gm_spec_free(sp);
            gm_seq_free(s);
            break;
        }
        smp.seed = 5000 + (uint64_t)t;
        if (gm_spec_step(sp, &smp, 0, &toks, &nt, &err) == GM_OK && nt >= 1) count[toks[0]]++, taken++;
        gm_spec_stats st;
        gm_spec_get_stats(sp, &st);
        drafted += st.drafted, accepted += st.accepted;
        gm_spec_free(sp);
        gm_seq_free(s);
    }
    CHECK_EQ_INT(taken, n);
    CHECK_MSG(drafted == n && accepted > n / 4 && accepted < n / 2, "%lld of %lld guesses (token %d) accepted",
              (long long)accepted, (long long)drafted, (int)d);
    CHECK_MSG(test_chi_square_ok(count, p, V, n, "assistant, T 1.5, p(guess) 0.4"),
              "the first token's distribution is not the target's");
    free(count);
    gm_seq_free(base);
    rig_close(&r);
    free(fx);
}

/* Rows of several sequences in one gm_mtp_draft call (one LM head pass) give the bits of each row alone. */
TEST(batched_rows) {
    fixture *fx = malloc(sizeof *fx);
    rig r;
    if (!fx || !load_fixture(test_data_path("gemma4/gemma4-mtp.draft.txt"), fx) || !rig_open(&r, GM_BACKEND_CPU)) {
        CHECK_MSG(false, "cannot set up");
        free(fx);
        return;
    }
    enum { N = 3 };
    static float h[N][BB], hn[N][BB], l1[N][V], ln[N][V], hn1[N][BB];
    gm_seq *s[N];
    gm_mtp_row rows[N];
    gm_error err = {0};
    for (int i = 0; i < N; i++) {
        s[i] = prefill(&r, fx, fx->c[i + 1].pos, h[i]);
        rows[i] = (gm_mtp_row){.seq = s[i], .token = fx->c[i + 1].tok[0], .h = h[i], .logits = l1[i], .h_next = hn1[i]};
        CHECK_OK(gm_mtp_draft(r.d, &rows[i], 1, &err), &err);
        rows[i].logits = ln[i], rows[i].h_next = hn[i];
    }
    CHECK_OK(gm_mtp_draft(r.d, rows, N, &err), &err);
    CHECK_MSG(!memcmp(l1, ln, sizeof l1) && !memcmp(hn1, hn, sizeof hn), "a batched row differs from the row alone");
    for (int i = 0; i < N; i++) gm_seq_free(s[i]);
    rig_close(&r);
    free(fx);
}

TEST(parity_cpu) { parity(GM_BACKEND_CPU, "cpu"); }
TEST(parity_reference) { parity(GM_BACKEND_REFERENCE, "reference"); }

int main(void) {
    RUN(parity_cpu);
    RUN(parity_reference);
    RUN(sensitivity);
    RUN(batched_rows);
    RUN(greedy_exact);
    RUN(greedy_accepted);
    RUN(sampling_distribution);
    return test_summary();
}
