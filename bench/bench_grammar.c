/* bench/bench_grammar.c — the cost of a token mask on a real vocabulary.
 *
 * usage: bench_grammar TOKENIZER GRAMMAR DOC... [-r ROUNDS] [--precompute]
 *   TOKENIZER  a .gguf (its tokenizer) or a Hugging Face folder
 *   GRAMMAR    a .gbnf file, or a .json file holding a JSON schema
 *   DOC        texts the grammar accepts (e.g. instances of the schema)
 * Each document is tokenized and replayed through a matcher as a model would produce it: before
 * every token the mask is computed (timed), the token must be in it, then it is accepted; at the
 * end the END token must be allowed. Round 1 starts from a fresh context (token classes computed
 * on first use: the cold cost), later rounds reuse it but drop the cached whole masks (the cost of
 * assembling masks from the classes), and the last round keeps them (the cached cost). Prints
 * p50 / p99 / max per round and the build times. Not a test: a measuring tool. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "gemma_grammar.h"
#include "grammar/grammar.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long k = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)k + 1);
    if (s && fread(s, 1, (size_t)k, f) != (size_t)k) { free(s); s = NULL; }
    if (s) { s[k] = 0; *n = (size_t)k; }
    fclose(f);
    return s;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, size_t n) {
    if (!n) return;
    qsort(t, n, sizeof(double), cmp_d);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += t[i];
    printf("%-28s %5zu masks  mean %8.4f ms  p50 %8.4f  p90 %8.4f  p99 %8.4f  max %8.4f\n", what, n, sum / n,
           t[n / 2], t[n * 9 / 10], t[n * 99 / 100 < n ? n * 99 / 100 : n - 1], t[n - 1]);
}

int main(int argc, char **argv) {
    int rounds = 3;
    bool pre = false;
    const char *files[64];
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--precompute")) pre = true;
        else if (nf < 64) files[nf++] = argv[i];
    }
    if (nf < 3 || rounds < 1) {
        fprintf(stderr, "usage: bench_grammar TOKENIZER GRAMMAR DOC... [-r ROUNDS] [--precompute]\n");
        return 2;
    }
    gm_error err = {0};
    gm_tokenizer *tok = NULL;
    if (gm_tokenizer_open(files[0], &tok, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double t0 = now_ms();
    gm_gvocab *v = NULL;
    if (gm_gvocab_from_tokenizer(tok, NULL, &v, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double t1 = now_ms();
    size_t glen;
    char *gtext = slurp(files[1], &glen);
    if (!gtext) { fprintf(stderr, "%s: cannot read\n", files[1]); return 1; }
    gm_grammar *g = NULL;
    size_t fl = strlen(files[1]);
    bool schema = fl > 5 && !strcmp(files[1] + fl - 5, ".json");
    gm_status st = schema ? gm_grammar_from_json_schema(gtext, glen, NULL, &g, &err)
                          : gm_grammar_from_gbnf(gtext, glen, &g, &err);
    if (st) { fprintf(stderr, "%s: %s\n", files[1], err.msg); return 1; }
    double t2 = now_ms();
    printf("vocabulary %d tokens: %.1f ms; grammar %s: %.2f ms\n", gm_gvocab_size(v), t1 - t0, files[1], t2 - t1);
    gm_grammar_ctx *c = NULL;
    if (gm_grammar_ctx_new(g, v, &c, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    if (pre) {
        double p0 = now_ms();
        if (gm_grammar_ctx_precompute(c, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        printf("precompute: %.1f ms\n", now_ms() - p0);
    }
    size_t words = ((size_t)gm_gvocab_size(v) + 31) / 32;
    uint32_t *mask = malloc(words * 4);
    size_t cap = 1 << 16, nt = 0;
    double *times = malloc(cap * sizeof(double));
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        nt = 0;
        if (r > 0 && r < rounds - 1) { /* drop the whole-mask cache: measure assembly from the classes */
            gm_grammar_ctx *fresh = NULL;
            gm_grammar_ctx_free(c);
            gm_grammar_ctx_new(g, v, &fresh, &err);
            c = fresh;
            gm_grammar_ctx_precompute(c, &err);
        }
        for (int d = 2; d < nf; d++) {
            size_t dl;
            char *doc = slurp(files[d], &dl);
            if (!doc) { fprintf(stderr, "%s: cannot read\n", files[d]); return 1; }
            while (dl && (doc[dl - 1] == '\n')) dl--; /* files end with a newline the grammar may not allow */
            int32_t *ids = NULL;
            size_t n = 0;
            gm_tokenize(tok, doc, dl, false, false, &ids, &n, &err);
            gm_matcher *m = NULL;
            gm_matcher_new(c, &m, &err);
            for (size_t i = 0; i <= n; i++) {
                double a = now_ms();
                if (gm_matcher_fill_mask(m, mask, &err)) { fprintf(stderr, "mask: %s\n", err.msg); return 1; }
                double b = now_ms();
                if (nt < cap) times[nt++] = b - a;
                int32_t id = i < n ? ids[i] : gm_tokenizer_eos(tok);
                if (getenv("BENCH_GRAMMAR_SLOW") && b - a > atof(getenv("BENCH_GRAMMAR_SLOW"))) {
                    const char *pc;
                    size_t pl;
                    gm_token_to_piece(tok, i ? ids[i - 1] : 0, false, &pc, &pl, &err);
                    fprintf(stderr, "  round %d token %zu after '%.*s': %.3f ms\n", r + 1, i, (int)pl, pc, b - a);
                }
                bool in = mask[id / 32] >> (id % 32) & 1, ok = false;
                gm_matcher_accept_token(m, id, &ok, &err);
                if (!in || !ok) {
                    fprintf(stderr, "%s: token %zu (%d) %s\n", files[d], i, id, !in ? "not in the mask" : "refused");
                    bad = 1;
                    break;
                }
            }
            gm_matcher_free(m);
            free(ids);
            free(doc);
        }
        report(r == 0 ? (pre ? "round 1 (precomputed)" : "round 1 (cold)") : r == rounds - 1 ? "last round (cached masks)" : "round (classes, no cache)", times, nt);
    }
    gm_grammar_stats s;
    gm_grammar_ctx_stats(c, &s);
    printf("context: %zu states, %zu stack nodes, %zu positions classified, %zu masks cached, %.1f MB\n", s.n_states,
           s.n_stack_nodes, s.n_classified, s.n_masks_cached, s.mem_bytes / 1e6);
    free(mask); free(times); free(gtext);
    gm_grammar_ctx_free(c);
    gm_grammar_free(g);
    gm_gvocab_free(v);
    gm_tokenizer_free(tok);
    return bad;
}
