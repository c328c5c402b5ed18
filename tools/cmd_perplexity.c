/* tools/cmd_perplexity.c — `gemma perplexity`: perplexity over a text as llama-perplexity computes it,
 * and the KL divergence of our token distributions against a saved base (ours or llama.cpp's, written
 * by bench/llama-kl-base.py). Chunking and the logits file format: docs/perplexity.md. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "tools/cli_opts.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

#define LOGITS_MAGIC "GMLG"
#define MAX_TOPK 1024

/* The base file being compared against (docs/perplexity.md). */
typedef struct {
    FILE *f;
    uint32_t n_vocab, k, ctx, n_chunks, n_pos, n_tokens;
} logits_base;

/* Running statistics over scored positions. */
typedef struct {
    double nll, nll2;     /* sum of -log p(target) and its square */
    double base_nll;      /* the base's sum of -log p(target) */
    long n;
    double *kl;           /* per position KL(base || ours), n_kl entries */
    long n_kl, cap_kl;
    long top_agree;       /* positions where our argmax is the base's argmax */
    double tail_mass;     /* sum over positions of the base's mass outside its top k */
} ppl_stats;

/* Everything the per-position callback needs. */
typedef struct {
    const int32_t *chunk;  /* the chunk's tokens (first replaced by BOS) */
    int n_vocab;
    ppl_stats *st;
    logits_base *base;
    FILE *save;
    int topk;
    double *logp;          /* n_vocab scratch */
    int32_t *top_ids;      /* topk scratch */
    gm_error *err;
    bool failed;
} score_ctx;

static char *read_text(const char *path, size_t *len) {
    char *buf = cli_read_file(path, len);
    if (!buf) fprintf(stderr, "gemma perplexity: cannot read %s: %s\n", path, strerror(errno));
    return buf;
}

static bool read_u32s(FILE *f, uint32_t *v, size_t n) { return fread(v, sizeof *v, n, f) == n; }

/* Opens a base file and checks it describes the same tokenization and chunking. */
static bool base_open(logits_base *b, const char *path, const cli_args *a, const int32_t *toks, size_t n_toks,
                      int n_vocab) {
    char magic[4];
    uint32_t hdr[7];
    b->f = fopen(path, "rb");
    if (!b->f) {
        fprintf(stderr, "gemma perplexity: cannot open %s: %s\n", path, strerror(errno));
        return false;
    }
    if (fread(magic, 1, 4, b->f) != 4 || memcmp(magic, LOGITS_MAGIC, 4) || !read_u32s(b->f, hdr, 7) || hdr[0] != 1) {
        fprintf(stderr, "gemma perplexity: %s is not a version-1 logits file (docs/perplexity.md)\n", path);
        return false;
    }
    b->n_vocab = hdr[1], b->k = hdr[2], b->ctx = hdr[3], b->n_chunks = hdr[4], b->n_pos = hdr[5], b->n_tokens = hdr[6];
    if (b->n_vocab != (uint32_t)n_vocab || b->ctx != (uint32_t)a->n_ctx || b->k == 0 || b->k > MAX_TOPK ||
        b->n_tokens != n_toks) {
        fprintf(stderr,
                "gemma perplexity: %s does not match this run (vocab %u vs %d, ctx %u vs %d, tokens %u vs %zu, k %u)\n",
                path, b->n_vocab, n_vocab, b->ctx, a->n_ctx, b->n_tokens, n_toks, b->k);
        return false;
    }
    for (size_t i = 0; i < n_toks; i++) {
        int32_t t;
        if (fread(&t, sizeof t, 1, b->f) != 1 || t != toks[i]) {
            fprintf(stderr, "gemma perplexity: %s: tokenization differs at token %zu\n", path, i);
            return false;
        }
    }
    return true;
}

/* log-softmax in double; returns the argmax. */
static int log_softmax(const float *logits, int n, double *out) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    double mx = logits[best], sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    for (int i = 0; i < n; i++) out[i] = (double)logits[i] - lse;
    return best;
}

/* The k largest of logp, most probable first (k is small: insertion into a sorted list). */
static void top_k(const double *logp, int n, int k, int32_t *ids) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == k && logp[i] <= logp[ids[k - 1]]) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && logp[ids[j - 1]] < logp[i]) {
            ids[j] = ids[j - 1];
            j--;
        }
        ids[j] = i;
    }
}

static bool save_position(score_ctx *c, int32_t target) {
    float lt = (float)c->logp[target];
    top_k(c->logp, c->n_vocab, c->topk, c->top_ids);
    bool ok = fwrite(&target, 4, 1, c->save) == 1 && fwrite(&lt, 4, 1, c->save) == 1 &&
              fwrite(c->top_ids, 4, (size_t)c->topk, c->save) == (size_t)c->topk;
    for (int i = 0; i < c->topk && ok; i++) {
        float v = (float)c->logp[c->top_ids[i]];
        ok = fwrite(&v, 4, 1, c->save) == 1;
    }
    return ok;
}

/* KL(base || ours) over the base's top k plus one "rest" bucket (a lower bound of the full KL). */
static bool compare_position(score_ctx *c, int32_t target, int our_best) {
    logits_base *b = c->base;
    int32_t bt, ids[MAX_TOPK];
    float blt, blp[MAX_TOPK];
    if (fread(&bt, 4, 1, b->f) != 1 || fread(&blt, 4, 1, b->f) != 1 || fread(ids, 4, b->k, b->f) != b->k ||
        fread(blp, 4, b->k, b->f) != b->k || bt != target)
        return false;
    double kl = 0, pb_sum = 0, pq_sum = 0;
    for (uint32_t i = 0; i < b->k; i++) {
        if (ids[i] < 0 || ids[i] >= c->n_vocab) return false;
        double pb = exp((double)blp[i]);
        kl += pb * ((double)blp[i] - c->logp[ids[i]]);
        pb_sum += pb;
        pq_sum += exp(c->logp[ids[i]]);
    }
    double pb_rest = fmax(1.0 - pb_sum, 0.0), pq_rest = fmax(1.0 - pq_sum, 1e-30);
    if (pb_rest > 0) kl += pb_rest * (log(pb_rest) - log(pq_rest));
    ppl_stats *s = c->st;
    if (s->n_kl == s->cap_kl) {
        long cap = s->cap_kl ? 2 * s->cap_kl : 4096;
        double *nk = realloc(s->kl, sizeof *nk * (size_t)cap);
        if (!nk) return false;
        s->kl = nk, s->cap_kl = cap;
    }
    s->kl[s->n_kl++] = kl;
    s->top_agree += our_best == ids[0];
    s->base_nll -= blt;
    s->tail_mass += pb_rest;
    return true;
}

/* Called by the generator for each scored position: logits at pos predict chunk[pos + 1]. */
static bool on_logits(int pos, const float *logits, void *user) {
    score_ctx *c = user;
    int32_t target = c->chunk[pos + 1];
    int best = log_softmax(logits, c->n_vocab, c->logp);
    double nll = -c->logp[target];
    c->st->nll += nll, c->st->nll2 += nll * nll, c->st->n++;
    if (c->save && !save_position(c, target)) {
        c->failed = true;
        fprintf(stderr, "gemma perplexity: writing the logits file failed\n");
        return false;
    }
    if (c->base && !compare_position(c, target, best)) {
        c->failed = true;
        fprintf(stderr, "gemma perplexity: the base file is truncated or scores different targets\n");
        return false;
    }
    return true;
}

static double ppl_error(const ppl_stats *s) {
    double mean = s->nll / (double)s->n, var = s->nll2 / (double)s->n - mean * mean;
    return exp(mean) * sqrt(fmax(var, 0.0) / (double)(s->n > 1 ? s->n - 1 : 1));
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static void report_kl(ppl_stats *s) {
    if (s->n_kl == 0) return;
    double sum = 0;
    for (long i = 0; i < s->n_kl; i++) sum += s->kl[i];
    qsort(s->kl, (size_t)s->n_kl, sizeof *s->kl, cmp_double);
    double p99 = s->kl[(long)floor(0.99 * (double)(s->n_kl - 1))];
    double ours = exp(s->nll / (double)s->n), base = exp(s->base_nll / (double)s->n_kl);
    printf("KL divergence vs base: mean %.6f nats, p99 %.6f, max %.6f (over %ld positions)\n", sum / (double)s->n_kl,
           p99, s->kl[s->n_kl - 1], s->n_kl);
    printf("top token agreement: %.2f%%\n", 100.0 * (double)s->top_agree / (double)s->n_kl);
    printf("perplexity: ours %.4f, base %.4f, ratio %.5f\n", ours, base, ours / base);
    printf("base mass outside its stored top-k: mean %.5f\n", s->tail_mass / (double)s->n_kl);
}

static bool write_header(FILE *f, const cli_args *a, int n_vocab, int n_chunks, const int32_t *toks, size_t n) {
    uint32_t hdr[7] = {1, (uint32_t)n_vocab, (uint32_t)a->topk, (uint32_t)a->n_ctx, (uint32_t)n_chunks,
                       (uint32_t)(n_chunks * (a->n_ctx - 1 - a->n_ctx / 2)), (uint32_t)n};
    return fwrite(LOGITS_MAGIC, 1, 4, f) == 4 && fwrite(hdr, 4, 7, f) == 7 && fwrite(toks, 4, n, f) == n;
}

static int score_chunks(gm_generator *g, const cli_args *a, const int32_t *toks, int n_chunks, score_ctx *c) {
    int32_t *chunk = malloc(sizeof *chunk * (size_t)a->n_ctx);
    if (!chunk) return 1;
    c->chunk = chunk;
    bool tty = isatty(2);
    double t0 = cli_now_s();
    int rc = 0;
    for (int ci = 0; ci < n_chunks && rc == 0; ci++) {
        memcpy(chunk, toks + (size_t)ci * (size_t)a->n_ctx, sizeof *chunk * (size_t)a->n_ctx);
        chunk[0] = gm_generator_config(g)->bos_id;
        gm_generator_reset(g);
        if (gm_generator_prefill(g, chunk, a->n_ctx, c->err) != GM_OK ||
            gm_generator_score_with(g, a->n_ctx / 2, a->n_ctx - 1, on_logits, c, c->err) != GM_OK) {
            fprintf(stderr, "gemma perplexity: %s\n", c->failed ? "stopped" : c->err->msg);
            rc = 1;
            break;
        }
        double ppl = exp(c->st->nll / (double)c->st->n), el = cli_now_s() - t0;
        double tps = (double)(ci + 1) * a->n_ctx / el;
        if (tty)
            fprintf(stderr, "\r[%d/%d] ppl %.4f  %.1f tok/s  eta %.0fs   ", ci + 1, n_chunks, ppl, tps,
                    (double)(n_chunks - ci - 1) * a->n_ctx / tps);
        printf("[%d]%.4f%s", ci + 1, ppl, ci + 1 == n_chunks ? "\n" : ",");
        if (!cli_stdout_flush()) { /* stdout is gone: stop scoring; main() reports it */
            rc = 1;
            break;
        }
    }
    if (tty) fputc('\n', stderr);
    if (rc == 0)
        printf("Final estimate: PPL = %.4f +/- %.5f  (%d chunks of %d, %ld positions, %.1f tok/s)\n",
               exp(c->st->nll / (double)c->st->n), ppl_error(c->st), n_chunks, a->n_ctx, c->st->n,
               (double)n_chunks * a->n_ctx / (cli_now_s() - t0));
    free(chunk);
    return rc;
}

/* The statistics over n_chunks chunks of toks, with the base file and the logits file if asked; the report.
 * Returns the exit status. */
static int score_text(gm_generator *g, const cli_args *a, const int32_t *toks, size_t n_toks, int n_chunks) {
    const int n_vocab = gm_generator_config(g)->n_vocab;
    gm_error err = {0};
    ppl_stats st = {0};
    logits_base base = {0};
    score_ctx c = {.n_vocab = n_vocab, .st = &st, .topk = a->topk, .err = &err};
    c.logp = malloc(sizeof *c.logp * (size_t)n_vocab);
    c.top_ids = malloc(sizeof *c.top_ids * (size_t)a->topk);
    int rc = 1;
    if (!c.logp || !c.top_ids) {
        fprintf(stderr, "gemma perplexity: out of memory\n");
    } else if (a->base_path && !base_open(&base, a->base_path, a, toks, n_toks, n_vocab)) {
        /* message printed */
    } else if (a->save_path && (!(c.save = fopen(a->save_path, "wb")) ||
                                !write_header(c.save, a, n_vocab, n_chunks, toks, n_toks))) {
        fprintf(stderr, "gemma perplexity: cannot write %s\n", a->save_path);
    } else {
        c.base = a->base_path ? &base : NULL;
        rc = score_chunks(g, a, toks, n_chunks, &c);
        if (rc == 0) report_kl(&st);
    }
    if (c.save && fclose(c.save) != 0 && rc == 0) {
        fprintf(stderr, "gemma perplexity: writing %s failed\n", a->save_path);
        rc = 1;
    }
    if (base.f) fclose(base.f);
    free(c.logp);
    free(c.top_ids);
    free(st.kl);
    return rc;
}

/* The model, its tokens of the text and a generator of one chunk's context; false after a message. */
static bool open_scoring(const cli_args *a, const char *text, size_t len, gm_model **m, gm_generator **g,
                         int32_t **toks, size_t *n_toks) {
    gm_error err = {0};
    const gm_generator_options o = {.n_threads = a->threads ? a->threads : gm_physical_cores(), .n_ctx = a->n_ctx,
                                    .kv_full = true, .kv_type = a->kv_type, .backend = a->backend,
                                    .device = a->device + 1, .gpu_validate = a->gpu_validate};
    const gm_model_options mo = gm_cli_model_options();
    if (gm_model_open(a->model, &mo, m, &err) != GM_OK || !gm_model_tokenizer(*m) ||
        gm_tokenize(gm_model_tokenizer(*m), text, len, true, false, toks, n_toks, &err) != GM_OK ||
        gm_generator_new(*m, &o, g, &err) != GM_OK) {
        fprintf(stderr, "gemma perplexity: %s\n", *m && !gm_model_tokenizer(*m) ? "the model has no tokenizer" : err.msg);
        return false;
    }
    return true;
}

static int perplexity(const cli_args *a, const char *text, size_t len) {
    gm_model *m = NULL;
    gm_generator *g = NULL;
    int32_t *toks = NULL;
    size_t n_toks = 0;
    int rc = 1;
    if (open_scoring(a, text, len, &m, &g, &toks, &n_toks)) {
        int n_chunks = (int)(n_toks / (size_t)a->n_ctx);
        if (a->max_chunks > 0 && n_chunks > a->max_chunks) n_chunks = a->max_chunks;
        if (n_chunks == 0) {
            fprintf(stderr, "gemma perplexity: %s has %zu tokens, fewer than one chunk of %d\n", a->file, n_toks,
                    a->n_ctx);
        } else {
            fprintf(stderr, "%s: %zu tokens, %d chunks of %d, %d threads\n", a->file, n_toks, n_chunks, a->n_ctx,
                    a->threads ? a->threads : gm_physical_cores());
            rc = score_text(g, a, toks, n_toks, n_chunks);
        }
    }
    free(toks);
    gm_generator_free(g);
    gm_model_free(m);
    return rc;
}

int cmd_perplexity(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(CLI_PPL, argc, argv, &a);
    if (rc != CLI_GO) return rc;
    size_t len;
    char *text = read_text(a.file, &len);
    rc = text ? perplexity(&a, text, len) : 1;
    free(text);
    cli_args_free(&a);
    return rc;
}
