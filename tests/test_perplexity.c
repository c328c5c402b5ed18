/* tests/test_perplexity.c — `gemma perplexity` on synthetic models whose answer is known independently.
 *
 *  - A model with all-zero token embeddings has every logit 0 (the LM head is the tied embedding), a
 *    uniform next-token distribution: perplexity = vocabulary size exactly, standard error 0.
 *  - On an ordinary random tiny model, the CLI's chunked perplexity equals exp(-mean log p) computed here
 *    with gm_generator_score_logprobs over the same chunks (llama-perplexity's chunking, docs/perplexity.md).
 *  - --save-logits then --kl-divergence-base of the same run: KL 0, top-token agreement 100%, ratio 1.
 *  - Bad input: a text shorter than one chunk, a missing file, a base from another context -> exit != 0.
 * The CLI runs as a child process (GM_BUILD_DIR/gemma). */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"
#include "support/tiny_model.h"

#define CTX 32

static char g_text[256], g_model[256], g_uniform[256], g_save[256], g_short[256];

/* Runs `gemma perplexity ARGS`, captures stdout+stderr into out; returns the exit status. */
static int run_cli(const char *args, char *out, size_t cap) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/gemma perplexity %s 2>&1", GM_BUILD_DIR, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool final_estimate(const char *out, double *ppl, double *se) {
    const char *s = strstr(out, "Final estimate: PPL = ");
    return s && sscanf(s, "Final estimate: PPL = %lf +/- %lf", ppl, se) == 2;
}

static void write_text(const char *path, int repeats) {
    FILE *f = fopen(path, "w");
    for (int i = 0; i < repeats && f; i++)
        fprintf(f, "the cat and the dog sat on a mat in the sun, %d times; then the end of the tale. ", i);
    if (f) fclose(f);
}

TEST(uniform_model_has_perplexity_vocab_size) {
    char out[8192], args[1024];
    snprintf(args, sizeof args, "-m %s -f %s -c %d -t 1", g_uniform, g_text, CTX);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 0);
    double ppl = 0, se = -1;
    CHECK_MSG(final_estimate(out, &ppl, &se), "no final estimate in: %s", out);
    CHECK_NEAR(ppl, (double)tm_vocab_size(), 1e-3 * tm_vocab_size());
    CHECK_NEAR(se, 0.0, 1e-3);
}

/* exp(-mean log p) over the scored positions of each chunk, via the library. */
static double library_perplexity(const char *model, int *n_chunks_out) {
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    size_t len = 0, n_tok = 0;
    char *text = (char *)test_read_file(g_text, &len);
    int32_t *toks = NULL;
    double nll = 0;
    long n = 0;
    CHECK_OK(gm_model_open(model, NULL, &m, &err), &err);
    gm_generator_options o = {.n_threads = gm_test_threads(1), .n_ctx = CTX};
    if (m) CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (g) CHECK_OK(gm_tokenize(gm_model_tokenizer(m), text, len, true, false, &toks, &n_tok, &err), &err);
    int n_chunks = toks ? (int)(n_tok / CTX) : 0;
    float lp[CTX];
    for (int c = 0; c < n_chunks; c++) {
        int32_t chunk[CTX];
        memcpy(chunk, toks + (size_t)c * CTX, sizeof chunk);
        chunk[0] = gm_model_config(m)->bos_id;
        CHECK_OK(gm_generator_prefill(g, chunk, CTX, &err), &err);
        CHECK_OK(gm_generator_score_logprobs(g, lp, &err), &err);
        for (int j = CTX / 2; j < CTX - 1; j++) nll -= lp[j], n++; /* lp[j] = log p(chunk[j+1]) */
    }
    *n_chunks_out = n_chunks;
    free(toks);
    free(text);
    gm_generator_free(g);
    gm_model_free(m);
    return n ? exp(nll / (double)n) : 0;
}

TEST(cli_perplexity_equals_library_logprobs) {
    int n_chunks = 0;
    double want = library_perplexity(g_model, &n_chunks);
    CHECK(n_chunks >= 2);
    char out[8192], args[1024];
    snprintf(args, sizeof args, "-m %s -f %s -c %d -t 2 --save-logits %s --top-k 16", g_model, g_text, CTX, g_save);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 0);
    double ppl = 0, se = 0;
    CHECK_MSG(final_estimate(out, &ppl, &se), "no final estimate in: %s", out);
    fprintf(stderr, "  tiny gemma3: CLI ppl %.5f, library %.5f over %d chunks\n", ppl, want, n_chunks);
    CHECK_NEAR(ppl / want, 1.0, 1e-4);
    CHECK(se > 0);
    /* the same run against its own saved logits */
    snprintf(args, sizeof args, "-m %s -f %s -c %d -t 1 --kl-divergence-base %s", g_model, g_text, CTX, g_save);
    CHECK_EQ_INT(run_cli(args, out, sizeof out), 0);
    double kl = -1, agree = 0, ratio = 0;
    const char *s = strstr(out, "KL divergence vs base: mean ");
    CHECK_MSG(s && sscanf(s, "KL divergence vs base: mean %lf", &kl) == 1, "no KL in: %s", out);
    s = strstr(out, "top token agreement: ");
    CHECK(s && sscanf(s, "top token agreement: %lf", &agree) == 1);
    s = strstr(out, "ratio ");
    CHECK(s && sscanf(s, "ratio %lf", &ratio) == 1);
    CHECK_NEAR(kl, 0.0, 1e-5);
    CHECK_NEAR(agree, 100.0, 1e-9);
    CHECK_NEAR(ratio, 1.0, 1e-5);
}

TEST(bad_input_is_refused) {
    char out[8192], args[1024];
    snprintf(args, sizeof args, "-m %s -f %s -c %d", g_model, g_short, CTX);
    CHECK(run_cli(args, out, sizeof out) != 0);
    CHECK_MSG(strstr(out, "fewer than one chunk") != NULL, "%s", out);
    snprintf(args, sizeof args, "-m %s -f /nonexistent/text -c %d", g_model, CTX);
    CHECK(run_cli(args, out, sizeof out) != 0);
    CHECK(strstr(out, "/nonexistent/text") != NULL);
    snprintf(args, sizeof args, "-m %s -f %s -c %d --kl-divergence-base %s", g_model, g_text, 2 * CTX, g_save);
    CHECK(run_cli(args, out, sizeof out) != 0);
    CHECK_MSG(strstr(out, "does not match") != NULL, "%s", out);
    snprintf(args, sizeof args, "-m %s -f %s -c 0", g_model, g_text);
    CHECK(run_cli(args, out, sizeof out) != 0);
}

int main(void) {
    int pid = (int)getpid();
    snprintf(g_text, sizeof g_text, "%s/ppl_%d_text.txt", GM_BUILD_DIR, pid);
    snprintf(g_short, sizeof g_short, "%s/ppl_%d_short.txt", GM_BUILD_DIR, pid);
    snprintf(g_model, sizeof g_model, "%s/ppl_%d_model.gguf", GM_BUILD_DIR, pid);
    snprintf(g_uniform, sizeof g_uniform, "%s/ppl_%d_uniform.gguf", GM_BUILD_DIR, pid);
    snprintf(g_save, sizeof g_save, "%s/ppl_%d_logits.gmlg", GM_BUILD_DIR, pid);
    write_text(g_text, 12);
    write_text(g_short, 0);
    tm_options o;
    char err[512];
    tm_options_default(&o, "gemma3");
    bool ok = tm_write_gguf(&o, g_model, err, sizeof err);
    o.zero_embeddings = true;
    ok = ok && tm_write_gguf(&o, g_uniform, err, sizeof err);
    CHECK_MSG(ok, "writing the tiny models: %s", err);
    if (ok) {
        RUN(uniform_model_has_perplexity_vocab_size);
        RUN(cli_perplexity_equals_library_logprobs);
        RUN(bad_input_is_refused);
    }
    remove(g_text), remove(g_short), remove(g_model), remove(g_uniform), remove(g_save);
    return test_summary();
}
