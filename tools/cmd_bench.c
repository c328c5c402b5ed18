/* tools/cmd_bench.c — `gemma bench`: llama-bench's measurements for gemma.c.
 *
 *   pp<N>: prompt processing — one batched pass over N tokens from an empty cache.
 *   tg<N>: text generation — N single-token passes from an empty cache (the first is the
 *          prompt's only token), as llama-bench's tg does; with -s S, S sequences decode together
 *          (one forward call of S rows per step, each sequence from its own first token): aggregate
 *          tokens/s of all S, as llama-batched-bench reports it.
 * Each test is repeated (-r) per thread count (-t 1,2); mean and standard deviation of tokens/s.
 * Also: model open time, time to the first generated token of a short prompt, peak RSS. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "tools/cli_opts.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

typedef struct {
    const char *test;
    int n, threads, seqs;
    double mean, sd;
} bench_row;

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* Linux: KiB */
}

/* MiB of file mappings this process holds in 2 MiB pages (FilePmdMapped of /proc/self/smaps_rollup;
 * the model is the only large file mapping), or -1 where the kernel does not say. Decode streams
 * every weight once per token: with 4 KiB pages it runs ~25% slower (docs/performance.md). */
static double file_huge_mib(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    double kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "FilePmdMapped: %lf kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib < 0 ? -1 : kib / 1024.0;
}

/* Ordinary (non-control) token ids drawn from a fixed seed, so every run scores the same input. */
static void bench_tokens(const gm_model *m, int32_t *ids, int n) {
    const gm_tokenizer *tok = gm_model_tokenizer(m);
    int32_t n_vocab = gm_model_config(m)->n_vocab;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        int32_t id;
        do {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            id = (int32_t)(x % (uint64_t)n_vocab);
        } while (tok && gm_token_get_type(tok, id) != GM_TOKEN_NORMAL);
        ids[i] = id;
    }
    if (n > 0) ids[0] = gm_model_config(m)->bos_id;
}

static gm_status run_pp(gm_generator *g, const int32_t *ids, int n, double *secs, gm_error *err) {
    const float *logits;
    gm_generator_reset(g);
    double t0 = cli_now_s();
    gm_status st = gm_generator_prefill_get_last_logits(g, ids, n, &logits, err);
    *secs = cli_now_s() - t0;
    return st;
}

/* S sequences, each from its own first token, decoding n tokens together: one forward call of S rows
 * per step (the tokens are fixed, not sampled: this measures the forward pass). */
static gm_status run_tg(gm_engine *e, const int32_t *ids, int n, int S, float *logits, double *secs,
                        gm_error *err) {
    gm_seq *s[256] = {0};
    gm_row rows[256];
    gm_status st = GM_OK;
    for (int i = 0; i < S && st == GM_OK; i++) st = gm_seq_new(e, &s[i], err);
    const double t0 = cli_now_s();
    for (int k = 0; k < n && st == GM_OK; k++) { /* every row's logits, as a decode step needs them */
        for (int i = 0; i < S; i++) rows[i] = (gm_row){.seq = s[i], .token = ids[(k + 17 * i) % n], .pos = k, .logits = true};
        st = gm_engine_forward(e, rows, S, logits, err);
    }
    *secs = cli_now_s() - t0;
    for (int i = 0; i < S; i++) gm_seq_free(s[i]);
    return st;
}

typedef struct bench_job {
    gm_generator *g; /* pp */
    gm_engine *e;    /* tg */
    int seqs;
    float *logits;   /* seqs x n_vocab */
} bench_job;

static gm_status job_pass(const bench_job *j, const int32_t *ids, int n, double *secs, gm_error *err) {
    return j->g ? run_pp(j->g, ids, n, secs, err) : run_tg(j->e, ids, n, j->seqs, j->logits, secs, err);
}

static char bench_backend[300] = "cpu"; /* what ran: gm_engine_backend_name */

static gm_status gm_fail_oom(gm_error *err) {
    snprintf(err->msg, sizeof err->msg, "out of memory");
    return err->code = GM_ERR_NOMEM;
}

/* KV bytes of one sequence of n positions, every layer (what an engine's default budget holds). */
static size_t kv_need(const gm_model *m, int n, gm_kv_dtype kt) {
    gm_engine *e = NULL;
    const gm_engine_options o = {.n_threads = 1, .n_ctx = n, .kv_type = kt};
    if (gm_engine_new(m, &o, &e, NULL) != GM_OK) return 0;
    gm_kv_stats s;
    gm_engine_kv_stats(e, &s);
    gm_engine_free(e);
    return s.bytes_budget;
}

/* One warm-up pass (page faults, caches), then reps timed passes; tokens/s counts every sequence's. */
static gm_status measure(const bench_job *j, const int32_t *ids, int n, int reps, bench_row *row, gm_error *err) {
    double secs, tps[CLI_MAX_REPS], sum = 0, sq = 0;
    gm_status st = job_pass(j, ids, n, &secs, err);
    for (int r = 0; r < reps && st == GM_OK; r++) {
        st = job_pass(j, ids, n, &secs, err);
        tps[r] = (double)n * (j->g ? 1 : j->seqs) / secs;
        sum += tps[r];
    }
    if (st != GM_OK) return st;
    row->mean = sum / reps;
    for (int r = 0; r < reps; r++) sq += (tps[r] - row->mean) * (tps[r] - row->mean);
    row->sd = reps > 1 ? sqrt(sq / (reps - 1)) : 0.0;
    return GM_OK;
}

/* Start to first generated token: open the model, make a generator (its engine makes the CPU weight copies), prefill a
 * short prompt, sample one token; then the time until the background copies are in place (gm_engine_wait_weights). */
static gm_status first_token_ms(const cli_args *a, double *open_ms, double *ttft_ms, double *packed_ms,
                                gm_error *err) {
    double t0 = cli_now_s();
    gm_model *m = NULL;
    gm_generator *g = NULL;
    const gm_model_options mo = gm_cli_model_options();
    gm_status st = gm_model_open(a->model, &mo, &m, err);
    *open_ms = 1e3 * (cli_now_s() - t0);
    gm_generator_options o = {.n_threads = a->thread_list.v[a->thread_list.n - 1], .n_ctx = 64, .backend = a->backend,
                              .device = a->device + 1, .gpu_validate = a->gpu_validate};
    if (st == GM_OK) st = gm_generator_new(m, &o, &g, err);
    int32_t ids[8];
    if (st == GM_OK) {
        bench_tokens(m, ids, 8);
        st = gm_generator_prefill(g, ids, 8, err);
    }
    int32_t tok;
    gm_sampling s = gm_sampling_default();
    if (st == GM_OK) st = gm_generator_step_cached(g, &s, &tok, err);
    if (g) snprintf(bench_backend, sizeof bench_backend, "%s", gm_engine_backend_name(gm_generator_engine(g)));
    *ttft_ms = 1e3 * (cli_now_s() - t0);
    if (g) gm_engine_wait_weights(gm_generator_engine(g));
    *packed_ms = 1e3 * (cli_now_s() - t0);
    gm_generator_free(g);
    gm_model_free(m);
    return st;
}

static void print_rows(const cli_args *a, const gm_model *m, const bench_row *rows, int n_rows, double open_ms,
                       double ttft_ms, double packed_ms) {
    const gm_config *c = gm_model_config(m);
    const double huge = file_huge_mib();
    if (a->json) {
        printf("{\"model\": \"%s\", \"arch\": \"%s\", \"backend\": \"%s\", \"isa\": \"%s\", \"open_ms\": %.2f, \"first_token_ms\": %.2f, "
               "\"packed_ms\": %.2f, \"peak_rss_mib\": %.1f, \"huge_page_mib\": %.1f, \"results\": [",
               a->model, c->arch, bench_backend, gm_isa_name(gm_model_isa(m)), open_ms, ttft_ms, packed_ms, peak_rss_mib(), huge);
        for (int i = 0; i < n_rows; i++)
            printf("%s{\"test\": \"%s%d\", \"threads\": %d, \"sequences\": %d, \"kv_type\": \"%s\", "
                   "\"tokens_per_s\": %.3f, \"stddev\": %.3f}",
                   i ? ", " : "", rows[i].test, rows[i].n, rows[i].threads, rows[i].seqs,
                   a->kv_type == GM_KV_DTYPE_F16 ? "f16" : "f32", rows[i].mean, rows[i].sd);
        printf("]}\n");
        return;
    }
    printf("| model | threads | sequences | test | t/s (all sequences) |\n|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < n_rows; i++)
        printf("| %s %d layers | %d | %d | %s%d | %.2f ± %.2f |\n", c->arch, c->n_layers, rows[i].threads,
               rows[i].seqs, rows[i].test, rows[i].n, rows[i].mean, rows[i].sd);
    printf("\nKV cache: %s; backend: %s; kernels: %s (GEMMA_ISA=scalar|avx2|avx512|neon|neondot lowers it)\n",
           a->kv_type == GM_KV_DTYPE_F16 ? "f16" : "f32", bench_backend, gm_isa_name(gm_model_isa(m)));
    printf("\nmodel open %.1f ms; start to first token (8-token prompt) %.1f ms; weight copies ready at %.1f ms; "
           "peak RSS %.1f MiB\n", open_ms, ttft_ms, packed_ms, peak_rss_mib());
    if (huge >= 0)
        printf("model file mapped in 2 MiB pages: %.0f MiB%s\n", huge,
               huge < 64 ? " (the page cache holds it in small pages: decode is slower; see docs/performance.md)" : "");
}

/* -v: what the backend submitted over a test's passes (the warm-up included) */
static void print_backend_stats(const char *test, int n, const gm_engine *e) {
    gm_backend_stats s;
    gm_engine_backend_stats(e, &s);
    fprintf(stderr, "%s%d on %s: %lld submissions, %lld command buffers recorded, %lld replayed, %lld dispatches\n", test,
            n, gm_engine_backend_name(e), (long long)s.submits, (long long)s.recordings, (long long)s.replays,
            (long long)s.dispatches);
}

/* pp: no prefix index, so that every repetition computes the whole prompt. */
static gm_status bench_pp(const gm_model *m, const cli_args *a, const int32_t *ids, int threads, bench_row *row,
                          gm_error *err) {
    gm_generator *g = NULL;
    const gm_generator_options o = {.n_threads = threads, .n_ctx = a->pp + 1, .kv_full = true, .kv_mem = a->kv_mem,
                                    .kv_type = a->kv_type, .no_prefix_cache = true, .backend = a->backend,
                                    .device = a->device + 1, .gpu_validate = a->gpu_validate};
    gm_status st = gm_generator_new(m, &o, &g, err);
    *row = (bench_row){"pp", a->pp, threads, 1, 0, 0};
    const bench_job j = {.g = g};
    if (st == GM_OK) st = measure(&j, ids, a->pp, a->reps, row, err);
    if (st == GM_OK && a->verbose) print_backend_stats("pp", a->pp, gm_generator_engine(g));
    gm_generator_free(g);
    return st;
}

/* tg with S sequences; the default KV budget: every sequence's blocks of every layer. */
static gm_status bench_tg(const gm_model *m, const cli_args *a, const int32_t *ids, int threads, int S, bench_row *row,
                          gm_error *err) {
    gm_engine *e = NULL;
    const gm_engine_options o = {.n_threads = threads, .n_ctx = a->tg + 1, .kv_type = a->kv_type,
                                 .no_prefix_cache = true, .n_batch = S > 512 ? S : 512,
                                 .kv_mem = a->kv_mem ? a->kv_mem : kv_need(m, a->tg + 1, a->kv_type) * (size_t)S,
                                 .backend = a->backend, .device = a->device + 1, .gpu_validate = a->gpu_validate};
    gm_status st = gm_engine_new(m, &o, &e, err);
    *row = (bench_row){"tg", a->tg, threads, S, 0, 0};
    const bench_job j = {.e = e, .seqs = S, .logits = malloc((size_t)S * (size_t)gm_model_config(m)->n_vocab * sizeof(float))};
    if (st == GM_OK && !j.logits) st = gm_fail_oom(err);
    if (st == GM_OK) st = measure(&j, ids, a->tg, a->reps, row, err);
    if (st == GM_OK && a->verbose) print_backend_stats("tg", a->tg, e);
    free(j.logits);
    if (e) gm_engine_free(e);
    return st;
}

/* Every test at every thread count, into rows. */
static gm_status bench_all(const gm_model *m, const cli_args *a, bench_row *rows, int *n_rows, gm_error *err) {
    const int n_ids = a->pp > a->tg ? a->pp : a->tg;
    int32_t *ids = malloc(sizeof *ids * (size_t)(n_ids > 0 ? n_ids : 1));
    if (!ids) return gm_fail_oom(err);
    bench_tokens(m, ids, n_ids);
    gm_status st = GM_OK;
    for (int t = 0; t < a->thread_list.n && st == GM_OK; t++) {
        const int threads = a->thread_list.v[t];
        if (a->pp > 0 && (st = bench_pp(m, a, ids, threads, &rows[*n_rows], err)) == GM_OK) ++*n_rows;
        for (int k = 0; k < a->seq_list.n && a->tg > 0 && st == GM_OK; k++)
            if ((st = bench_tg(m, a, ids, threads, a->seq_list.v[k], &rows[*n_rows], err)) == GM_OK) ++*n_rows;
    }
    free(ids);
    return st;
}

static int bench(cli_args *a) {
    if (a->thread_list.n == 0) a->thread_list.v[a->thread_list.n++] = gm_physical_cores();
    if (a->seq_list.n == 0) a->seq_list.v[a->seq_list.n++] = 1;
    gm_error err = {0};
    double open_ms = 0, ttft_ms = 0, packed_ms = 0;
    gm_model *m = NULL;
    const gm_model_options mo = gm_cli_model_options();
    bench_row rows[CLI_MAX_INTS * (1 + CLI_MAX_INTS)];
    int n_rows = 0;
    gm_engine *holder = NULL;
    gm_status st = first_token_ms(a, &open_ms, &ttft_ms, &packed_ms, &err);
    if (st == GM_OK) st = gm_model_open(a->model, &mo, &m, &err);
    /* One engine holds the CPU weight copies for the whole run: each measured engine shares them (the engines on a
     * model share one set) instead of making its own; waited for: the speed of the copies, not of the minutes before
     * they are ready. */
    if (st == GM_OK && a->backend == GM_BACKEND_CPU)
        st = gm_engine_new(m, &(gm_engine_options){.n_threads = 1, .n_ctx = 1}, &holder, &err);
    if (st == GM_OK) {
        if (holder) gm_engine_wait_weights(holder);
        st = bench_all(m, a, rows, &n_rows, &err);
    }
    if (st == GM_OK) print_rows(a, m, rows, n_rows, open_ms, ttft_ms, packed_ms);
    else fprintf(stderr, "gemma bench: %s\n", err.msg);
    gm_engine_free(holder);
    gm_model_free(m);
    return st == GM_OK ? 0 : 1;
}

int cmd_bench(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(CLI_BENCH, argc, argv, &a);
    if (rc != CLI_GO) return rc;
    rc = bench(&a);
    cli_args_free(&a);
    return rc;
}
