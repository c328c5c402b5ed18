/* tests/test_real_model.c — parity with llama.cpp on the default model (Gemma 3 270M Q4_K_M).
 *
 * Fixture: tests/data/llama/gemma3-270m-q4km.txt (see its README): for 21 prompts (one of 1737
 * tokens, past the 512-token window), llama.cpp's prompt ids, its top-10 logits after the prompt and
 * after each of its 32 greedy tokens, and the greedy continuation. We feed llama.cpp's own greedy
 * tokens (teacher forcing, so positions line up even after a divergence) and compare at each of the
 * 33 x 21 positions.
 *
 * What agreement to expect. This model amplifies tiny numeric differences: rounding only our query
 * vectors to f16 (as llama.cpp's f16 KV-cache path does) moves top logits by up to ~0.5, and an
 * exact f32 computation (weights dequantized, no activation quantization) is as far from llama.cpp
 * (~0.1-0.35 on top logits) as we are. llama.cpp itself uses an f16 GELU table, an f16 KV cache, f16
 * queries and f16 attention probabilities. So bit-level parity is not the goal; the checks are:
 *   - top-1: where our argmax differs from llama.cpp's, llama.cpp must itself be nearly tied there:
 *     its logit for our token within TIE of its best (our token in its top-10);
 *   - per prompt, top-1 agreement at >= 27 of its 33 positions;
 *   - top-10 overlap >= 5 of 10 at every position (flat, low-confidence distributions reorder
 *     their tails), >= 9.0 on average;
 *   - |our logit - llama.cpp's| over its top-10 ids: mean <= 0.35, max <= 2.5;
 *   - greedy continuations: reported (which prompts differ, from which step), and every divergence
 *     is a near-tie by the top-1 rule above.
 * A wrong mask, RoPE base, norm or scale moves logits by whole units and fails these at once
 * (checked by breaking the sliding window: the long prompt then fails the top-1, per-prompt,
 * overlap and logit-difference bounds). A missing model file is a failure
 * with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"

enum { MAXP = 64, STEPS = 33, TOPK = 10, GREEDY = 32 };
#define TIE 1.5

typedef struct fixture_prompt {
    int32_t *ids;
    int n;
    int32_t top_id[STEPS][TOPK];
    float top_logit[STEPS][TOPK];
    int32_t greedy[GREEDY];
    int n_top;
} fixture_prompt;

static fixture_prompt P[MAXP];
static int n_prompts;

static bool load_fixture(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        char *p = line, *end;
        if (!strncmp(line, "prompt ", 7)) {
            long i = strtol(p + 7, &end, 10), n = strtol(end, &end, 10);
            if (i < 0 || i >= MAXP || n <= 0) continue;
            P[i].ids = malloc(sizeof(int32_t) * (size_t)n);
            P[i].n = (int)n;
            for (long k = 0; k < n; k++) P[i].ids[k] = (int32_t)strtol(end, &end, 10);
            if (i + 1 > n_prompts) n_prompts = (int)i + 1;
        } else if (!strncmp(line, "top ", 4)) {
            long i = strtol(p + 4, &end, 10), s = strtol(end, &end, 10), k = strtol(end, &end, 10);
            if (i < 0 || i >= MAXP || s < 0 || s >= STEPS || k != TOPK) continue;
            for (int j = 0; j < TOPK; j++) {
                P[i].top_id[s][j] = (int32_t)strtol(end, &end, 10);
                P[i].top_logit[s][j] = strtof(end, &end);
            }
            P[i].n_top++;
        } else if (!strncmp(line, "greedy ", 7)) {
            long i = strtol(p + 7, &end, 10), n = strtol(end, &end, 10);
            if (i < 0 || i >= MAXP || n != GREEDY) continue;
            for (int k = 0; k < GREEDY; k++) P[i].greedy[k] = (int32_t)strtol(end, &end, 10);
        }
    }
    free(line);
    fclose(f);
    return n_prompts > 0;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* How many of llama.cpp's top-10 ids are in our top-10. */
static int overlap10(const float *l, int V, const int32_t *ref) {
    int32_t top[TOPK];
    float val[TOPK];
    for (int j = 0; j < TOPK; j++) top[j] = -1, val[j] = -INFINITY;
    for (int i = 0; i < V; i++) {
        if (l[i] <= val[TOPK - 1]) continue;
        int j = TOPK - 1;
        while (j > 0 && val[j - 1] < l[i]) top[j] = top[j - 1], val[j] = val[j - 1], j--;
        top[j] = i, val[j] = l[i];
    }
    int n = 0;
    for (int a = 0; a < TOPK; a++)
        for (int b = 0; b < TOPK; b++) n += ref[a] == top[b];
    return n;
}

TEST(parity_with_llama_cpp) {
    const char *model = GM_DEFAULT_MODEL;
    FILE *mf = fopen(model, "rb");
    CHECK_MSG(mf != NULL, "the default model %s is missing: run `make model` (scripts/fetch-model.sh)", model);
    if (!mf) return;
    fclose(mf);
    CHECK_MSG(load_fixture(test_data_path("llama/gemma3-270m-q4km.txt")), "cannot read the llama.cpp fixture");
    if (n_prompts == 0) return;
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    CHECK_OK(gm_model_open(model, NULL, &m, &err), &err);
    if (!m) return;
    gm_generator_options go = {.n_threads = 0, .n_ctx = 2048};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    if (!g) { gm_model_free(m); return; }
    const int V = gm_model_config(m)->n_vocab;
    int top1_miss = 0, positions = 0, greedy_diff = 0, worst_overlap = TOPK, overlap_sum = 0, n_diffs = 0;
    double max_diff = 0, sum_diff = 0, worst_tie = 0;
    const clock_t t0 = clock();
    /* under the sanitizers (20-30x slower: on an AVX2 machine past the 900 s limit) every 7th prompt: that
     * run is for memory errors, the release run checks every prompt's numbers */
    const int stride = getenv("GM_SANITIZER_BUILD") ? 7 : 1;
    int n_run = 0;
    for (int i = 0; i < n_prompts; i += stride) {
        fixture_prompt *fp = &P[i];
        n_run++;
        CHECK_MSG(fp->ids && fp->n_top == STEPS, "prompt %d incomplete in the fixture", i);
        if (!fp->ids || fp->n_top != STEPS) continue;
        const float *l = NULL;
        gm_generator_reset(g);
        CHECK_OK(gm_generator_prefill_get_last_logits(g, fp->ids, fp->n, &l, &err), &err);
        int first_diff = -1, agree = 0;
        for (int s = 0; s < STEPS && l; s++) {
            positions++;
            const int ours = argmax(l, V);
            agree += ours == fp->top_id[s][0];
            if (ours != fp->top_id[s][0]) {
                top1_miss++;
                /* how far llama.cpp's logit for our token is below its best (10th logit if absent) */
                double gap = fp->top_logit[s][0] - fp->top_logit[s][TOPK - 1];
                for (int j = 0; j < TOPK; j++)
                    if (fp->top_id[s][j] == ours) gap = fp->top_logit[s][0] - fp->top_logit[s][j];
                if (gap > worst_tie) worst_tie = gap;
                fprintf(stderr, "  prompt %d (%d tokens) step %d: our top-1 %d, llama.cpp's %d; llama.cpp has ours %.3f below its best\n",
                        i, fp->n, s, ours, fp->top_id[s][0], gap);
                CHECK_MSG(gap <= TIE, "prompt %d step %d: top-1 differs where llama.cpp is not nearly tied (gap %.3f)", i, s, gap);
                if (s < GREEDY && first_diff < 0) first_diff = s;
            }
            const int ov = overlap10(l, V, fp->top_id[s]);
            overlap_sum += ov;
            if (ov < worst_overlap) worst_overlap = ov;
            CHECK_MSG(ov >= 5, "prompt %d step %d: top-10 overlap %d/10", i, s, ov);
            for (int j = 0; j < TOPK; j++) {
                const double d = fabs((double)l[fp->top_id[s][j]] - fp->top_logit[s][j]);
                if (d > max_diff) max_diff = d;
                sum_diff += d;
                n_diffs++;
            }
            if (s < GREEDY) {
                gm_status st = gm_generator_decode_get_logits(g, fp->greedy[s], &l, &err);
                CHECK_OK(st, &err);
                if (st) break;
            }
        }
        CHECK_MSG(agree >= 27, "prompt %d: top-1 agrees at only %d of %d positions", i, agree, STEPS);
        if (first_diff >= 0) {
            greedy_diff++;
            fprintf(stderr, "  prompt %d: our greedy continuation differs from llama.cpp's from step %d\n", i, first_diff);
        }
    }
    const double mean_overlap = positions ? (double)overlap_sum / positions : 0, mean_diff = n_diffs ? sum_diff / n_diffs : 0;
    fprintf(stderr,
            "  %d prompts, %d positions: top-1 agreement %d/%d (largest llama.cpp gap at a disagreement %.3f), top-10 overlap "
            "worst %d/10 mean %.2f, greedy continuations equal %d/%d, |logit diff| on llama.cpp's top-10 mean %.3f max %.3f "
            "(%.1f s CPU)\n",
            n_run, positions, positions - top1_miss, positions, worst_tie, worst_overlap, mean_overlap,
            n_run - greedy_diff, n_run, mean_diff, max_diff, (double)(clock() - t0) / CLOCKS_PER_SEC);
    CHECK_MSG(mean_overlap >= 9.0, "mean top-10 overlap %.2f", mean_overlap);
    CHECK_MSG(mean_diff <= 0.35, "mean logit difference %.3f", mean_diff);
    CHECK_MSG(max_diff <= 2.5, "max logit difference %.3f", max_diff);
    gm_generator_free(g);
    gm_model_free(m);
    for (int i = 0; i < n_prompts; i++) free(P[i].ids);
}

/* Perplexity parity on the 1737-token prompt (fixture tests/data/llama/gemma3-270m-q4km.logprobs.txt,
 * tests/gen/gen_llama_logprobs.py): llama.cpp's log p(id[i+1] | id[..i]) against ours from
 * gm_generator_score_logprobs. Perplexity must agree within 2% overall and within 3% on the positions
 * past the 512-token window (where a sliding-window error would show); measured: 15.525 vs 15.560. */
TEST(perplexity_matches_llama_cpp) {
    size_t len = 0;
    char *text = (char *)test_read_file(test_data_path("llama/gemma3-270m-q4km.logprobs.txt"), &len);
    CHECK_MSG(text != NULL, "cannot read the llama.cpp log-prob fixture");
    if (!text) return;
    char *ids_line = strstr(text, "\nids "), *lp_line = strstr(text, "\nlogprobs ");
    CHECK(ids_line && lp_line);
    if (!ids_line || !lp_line) { free(text); return; }
    char *end;
    const long n = strtol(ids_line + 5, &end, 10);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    for (long i = 0; i < n; i++) ids[i] = (int32_t)strtol(end, &end, 10);
    const long nl = strtol(lp_line + 10, &end, 10);
    CHECK_EQ_INT(nl, n - 1);
    float *ref = malloc(sizeof(float) * (size_t)(nl > 0 ? nl : 1)), *ours = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (long i = 0; i < nl; i++) ref[i] = strtof(end, &end);
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    CHECK_OK(gm_model_open(GM_DEFAULT_MODEL, NULL, &m, &err), &err);
    gm_generator_options go = {.n_ctx = 2048};
    if (m) CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    /* under the sanitizers the first 1024 tokens (still 511 past the window), as in the prompt parity test */
    const long nu = getenv("GM_SANITIZER_BUILD") && n > 1024 ? 1024 : n;
    if (g && nl == n - 1) {
        const long ns = nu - 1; /* positions scored */
        CHECK_OK(gm_generator_prefill(g, ids, (int)nu, &err), &err);
        CHECK_OK(gm_generator_score_logprobs(g, ours, &err), &err);
        double so = 0, sr = 0, so2 = 0, sr2 = 0, dsum = 0;
        for (long i = 0; i < ns; i++) {
            so += ours[i], sr += ref[i], dsum += fabs((double)ours[i] - ref[i]);
            if (i >= 512) so2 += ours[i], sr2 += ref[i];
        }
        const double po = exp(-so / ns), pr = exp(-sr / ns);
        const double po2 = exp(-so2 / (ns - 512)), pr2 = exp(-sr2 / (ns - 512));
        fprintf(stderr, "  %ld tokens: perplexity ours %.3f, llama.cpp %.3f; past position 512: %.3f vs %.3f; "
                        "mean |log-prob diff| %.4f\n", nu, po, pr, po2, pr2, dsum / ns);
        CHECK_MSG(fabs(po / pr - 1) <= 0.02, "perplexity %.3f vs llama.cpp %.3f", po, pr);
        CHECK_MSG(fabs(po2 / pr2 - 1) <= 0.03, "perplexity past the window %.3f vs llama.cpp %.3f", po2, pr2);
    }
    gm_generator_free(g);
    gm_model_free(m);
    free(ids);
    free(ref);
    free(ours);
    free(text);
}

/* The layer matrices' CPU copies are made after the first engine on the model is (backends/cpu/repack.c); until a
 * copy is in place its matrix runs kernels with the same bits. The logits of a prompt evaluated at once after the
 * generator is made (the copies of the default model take ~100 ms: some of its layers still on the file's rows)
 * equal those after gm_engine_wait_weights, bit for bit. An engine freed while its packer runs (stopped, joined)
 * leaves no leak. */
TEST(logits_same_while_weights_are_packed) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(GM_DEFAULT_MODEL, NULL, &m, &err), &err);
    if (!m) return;
    gm_generator *g = NULL;
    gm_generator_options go = {.n_threads = gm_test_threads(2), .n_ctx = 256};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    gm_generator_free(g); /* at once: the packer is stopped mid-way */
    g = NULL;
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    const int32_t ids[] = {2, 818, 5279, 529, 7001, 563, 9079, 236787, 108, 8291, 496, 3925};
    const int n = (int)(sizeof ids / sizeof ids[0]), V = gm_model_config(m)->n_vocab;
    float *early = malloc(sizeof *early * (size_t)V);
    const float *l = NULL;
    if (g && early) {
        CHECK_OK(gm_generator_prefill_get_last_logits(g, ids, n, &l, &err), &err);
        if (l) memcpy(early, l, sizeof *early * (size_t)V);
        gm_engine_wait_weights(gm_generator_engine(g));
        gm_generator_reset(g);
        CHECK_OK(gm_generator_prefill_get_last_logits(g, ids, n, &l, &err), &err);
        CHECK_MSG(l && memcmp(early, l, sizeof *early * (size_t)V) == 0, "logits before and after packing differ");
    }
    free(early);
    gm_generator_free(g);
    gm_model_free(m);
}

int main(void) {
    if (!test_have_default_model(NULL)) return TEST_SKIP;
    RUN(logits_same_while_weights_are_packed);
    RUN(perplexity_matches_llama_cpp);
    RUN(parity_with_llama_cpp);
    return test_summary();
}
