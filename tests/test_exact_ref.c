/* tests/test_exact_ref.c — the default model against an exact reference: Gemma 3's forward pass in
 * float64 numpy on the weights as the `gguf` package dequantizes them (tests/gen/gen_exact_ref.py), i.e.
 * what Hugging Face's math gives on this quantized model with no activation quantization.
 *
 * Our engine, like llama.cpp, quantizes activations to Q8_0 / Q8_K before each matmul. Gemma 3's residual
 * stream reaches ~1e5 and the result moves by up to ~1 logit from the exact value (measured on these 10
 * prompts: llama.cpp's default build deviates by up to 1.09 on the exact top-10, ours by up to 1.15 with the
 * AVX-512 kernels, 0.93 with the scalar ones).
 * Checks: the exact top-1 is our top-1 wherever the exact top-1 leads by more than 1 logit (a clear
 * choice); max |ours - exact| on the exact top-10 <= 1.5; KL(exact || ours) over the exact top-64 plus a
 * rest bucket <= 0.05 nats per prompt. */
#include <stdlib.h>
#include <string.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"

#define NP 10
#define K 64
#define MAXTOK 4096

typedef struct {
    int n;
    int32_t ids[MAXTOK];
} prompt;

static int load_prompts(prompt *p) {
    size_t len;
    char *text = (char *)test_read_file(test_data_path("llama/gemma3-270m-q4km.txt"), &len);
    if (!text) return 0;
    int got = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *s = line;
        if (strncmp(s, "prompt ", 7)) continue;
        int i = (int)strtol(s + 7, &s, 10), n = (int)strtol(s, &s, 10);
        if (i < 0 || i >= NP || n <= 0 || n > MAXTOK) continue;
        p[i].n = n;
        for (int k = 0; k < n; k++) p[i].ids[k] = (int32_t)strtol(s, &s, 10);
        got++;
    }
    free(text);
    return got;
}

typedef struct {
    double lse;
    int32_t ids[K];
    double logit[K];
} exact_row;

static int load_exact(exact_row *e) {
    size_t len;
    char *text = (char *)test_read_file(test_data_path("exact/gemma3-270m-q4km.txt"), &len);
    if (!text) return 0;
    int got = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *s = line;
        if (strncmp(s, "exact ", 6)) continue;
        int i = (int)strtol(s + 6, &s, 10);
        double lse = strtod(s, &s);
        int k = (int)strtol(s, &s, 10);
        if (i < 0 || i >= NP || k != K) continue;
        e[i].lse = lse;
        for (int j = 0; j < K; j++) {
            e[i].ids[j] = (int32_t)strtol(s, &s, 10);
            e[i].logit[j] = strtod(s, &s);
        }
        got++;
    }
    free(text);
    return got;
}

TEST(default_model_vs_exact_reference) {
    static prompt p[NP];
    static exact_row e[NP];
    CHECK_EQ_INT(load_prompts(p), NP);
    CHECK_EQ_INT(load_exact(e), NP);
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    CHECK_OK(gm_model_open(GM_DEFAULT_MODEL, NULL, &m, &err), &err);
    gm_generator_options o = {.n_threads = gm_test_threads(2), .n_ctx = 256};
    if (m) CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (!g) goto out;
    const int V = gm_generator_config(g)->n_vocab;
    double worst_diff = 0, worst_kl = 0;
    for (int i = 0; i < NP; i++) {
        const float *l;
        CHECK_OK(gm_generator_prefill_get_last_logits(g, p[i].ids, p[i].n, &l, &err), &err);
        if (!l) continue;
        int best = 0;
        double mx = l[0], z = 0;
        for (int v = 1; v < V; v++)
            if (l[v] > l[best]) best = v, mx = l[v];
        for (int v = 0; v < V; v++) z += exp((double)l[v] - mx);
        double lse = mx + log(z), diff = 0, kl = 0, pe_sum = 0, po_sum = 0;
        for (int j = 0; j < K; j++) {
            double lo = l[e[i].ids[j]], le = e[i].logit[j];
            if (j < 10) diff = fmax(diff, fabs(lo - le));
            double lpe = le - e[i].lse, lpo = lo - lse;
            kl += exp(lpe) * (lpe - lpo);
            pe_sum += exp(lpe), po_sum += exp(lpo);
        }
        double re = fmax(1 - pe_sum, 0), ro = fmax(1 - po_sum, 1e-30);
        if (re > 0) kl += re * (log(re) - log(ro));
        double lead = e[i].logit[0] - e[i].logit[1];
        fprintf(stderr, "  prompt %d: top-1 ours %d exact %d (exact lead %.2f), max|diff| top-10 %.3f, KL %.5f\n", i,
                best, e[i].ids[0], lead, diff, kl);
        if (lead > 1.0) CHECK_MSG(best == e[i].ids[0], "prompt %d: top-1 %d, exact %d", i, best, e[i].ids[0]);
        CHECK_MSG(diff <= 1.5, "prompt %d: max |ours - exact| %.3f", i, diff);
        CHECK_MSG(kl <= 0.05, "prompt %d: KL %.5f", i, kl);
        worst_diff = fmax(worst_diff, diff), worst_kl = fmax(worst_kl, kl);
    }
    fprintf(stderr, "  worst: max|diff| %.3f, KL %.5f\n", worst_diff, worst_kl);
out:
    gm_generator_free(g);
    gm_model_free(m);
}

int main(void) {
    if (!test_have_default_model(NULL)) return TEST_SKIP;
    RUN(default_model_vs_exact_reference);
    return test_summary();
}
