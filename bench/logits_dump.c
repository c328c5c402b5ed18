/* bench/logits_dump.c — one 64-bit hash of every logit a model gives on a fixed workload, for checking that
 * a refactoring keeps the bits (build the previous commit and this one, run both on the same CPU, compare).
 *
 * usage: [GEMMA_ISA=scalar|avx2|avx512] logits_dump [-t THREADS] [-n TOKENS] MODEL...
 * Per model: the logits of every position of a fixed token sequence scored in one pass (gm_generator_score),
 * then three sequences of different lengths evaluated together in one engine (batched prompt chunks, then
 * four decode steps of all three at once: the multi-row paths), and for embedding models the pooled vector
 * of the same tokens. Prints "<hash> <ISA level used> <model>" per model. The bits differ between ISA levels,
 * so tests/cli_bits.sh compares against one committed fixture per level (tests/data/bits/<level>.txt;
 * scripts/update-bit-fixtures.sh writes them). $GEMMA_ISA caps the level as for the CLI
 * (gm_model_options.isa). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemma.h"
#include "gemma_generator.h"

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int32_t token_at(int i, int vocab) { return (int32_t)(((int64_t)i * 7919 + 3) % (vocab - 4)) + 2; }

static int dump(const char *path, int threads, int n, uint64_t *out, gm_isa *isa) {
    gm_error err = {0};
    gm_model *m = NULL;
    gm_model_options mo = {0};
    if (!gm_isa_parse(getenv("GEMMA_ISA"), &mo.isa)) mo.isa = GM_ISA_AUTO;
    if (gm_model_open(path, &mo, &m, &err)) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return 1;
    }
    *isa = gm_model_isa(m);
    const gm_config *c = gm_model_config(m);
    const int V = c->n_vocab;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = token_at(i, V);
    uint64_t h = 1469598103934665603ull;
    int rc = 1;
    if (c->is_embedding) {
        gm_embedder *e = NULL;
        const gm_embedder_options eo = {.n_threads = threads};
        float *v = NULL;
        if (!gm_embedder_new(m, &eo, &e, &err) && (v = malloc((size_t)gm_embedder_dim(e) * sizeof *v)) &&
            !gm_embed_tokens(e, ids, n, v, &err)) {
            h = fnv(h, v, (size_t)gm_embedder_dim(e) * sizeof *v);
            rc = 0;
        } else {
            fprintf(stderr, "%s: %s\n", path, err.msg);
        }
        free(v);
        gm_embedder_free(e);
        goto done;
    }
    {
        gm_generator *g = NULL;
        const gm_generator_options go = {.n_threads = threads, .n_batch = 32};
        float *lg = malloc((size_t)n * (size_t)V * sizeof *lg);
        if (gm_generator_new(m, &go, &g, &err) || gm_generator_prefill(g, ids, n, &err) ||
            gm_generator_score(g, lg, &err)) {
            fprintf(stderr, "%s: %s\n", path, err.msg);
            free(lg);
            gm_generator_free(g);
            goto done;
        }
        h = fnv(h, lg, (size_t)n * (size_t)V * sizeof *lg);
        free(lg);
        gm_generator_free(g);
    }
    {
        gm_engine *e = NULL;
        gm_seq *s[3] = {0};
        const gm_engine_options eo = {.n_threads = threads, .n_batch = 48, .kv_mem = 256u << 20, .no_prefix_cache = true};
        if (gm_engine_new(m, &eo, &e, &err)) {
            fprintf(stderr, "%s: %s\n", path, err.msg);
            goto done;
        }
        bool ok = true;
        for (int k = 0; k < 3 && ok; k++)
            ok = !gm_seq_new(e, &s[k], &err) && !gm_seq_append(s[k], ids + k, n - 7 * k, &err);
        for (int step = 0; ok && step < 5; step++) {
            ok = !gm_engine_eval(e, s, 3, &err);
            for (int k = 0; ok && k < 3; k++) {
                const float *l = gm_seq_logits(s[k]);
                h = fnv(h, l, (size_t)V * sizeof *l);
                int32_t best = 0;
                for (int i = 1; i < V; i++)
                    if (l[i] > l[best]) best = i;
                ok = !gm_seq_append(s[k], &best, 1, &err);
            }
        }
        if (!ok) fprintf(stderr, "%s: %s\n", path, err.msg);
        for (int k = 0; k < 3; k++) gm_seq_free(s[k]);
        gm_engine_free(e);
        rc = ok ? 0 : 1;
    }
done:
    free(ids);
    gm_model_free(m);
    *out = h;
    return rc;
}

int main(int argc, char **argv) {
    int threads = 2, n = 40, i = 1, rc = 0;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (!strcmp(argv[i], "-t")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-n")) n = atoi(argv[i + 1]);
    }
    if (i >= argc || n < 16) {
        fprintf(stderr, "usage: logits_dump [-t THREADS] [-n TOKENS >= 16] MODEL...\n");
        return 2;
    }
    for (; i < argc; i++) {
        uint64_t h = 0;
        gm_isa isa = GM_ISA_AUTO;
        int r = dump(argv[i], threads, n, &h, &isa);
        printf("%016" PRIx64 " %s %s%s\n", h, gm_isa_name(isa), argv[i], r ? " FAILED" : "");
        rc |= r;
    }
    return rc;
}
