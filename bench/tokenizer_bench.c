/* bench/tokenizer_bench.c — times gm_tokenize on a text file (built and run by
 * bench/tokenizer-bench). Prints one JSON line: load time, token count, best encode time of
 * REPS runs, tokens/s, and the decode time of the same ids. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "gemma.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tokenizer_bench MODEL TEXT_FILE [REPS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    FILE *f = fopen(argv[2], "rb");
    if (!f) { perror(argv[2]); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "read failed\n"); return 1; }
    fclose(f);
    gm_error err = {0};
    gm_tokenizer *tok;
    double t0 = now();
    if (gm_tokenizer_open(argv[1], &tok, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    double load = now() - t0, best = 1e30, best_dec = 1e30;
    size_t count = 0;
    for (int r = 0; r < reps; r++) {
        int32_t *ids;
        t0 = now();
        if (gm_tokenize(tok, text, (size_t)n, true, true, &ids, &count, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        double dt = now() - t0;
        if (dt < best) best = dt;
        char *out;
        size_t len;
        t0 = now();
        if (gm_detokenize(tok, ids, count, false, &out, &len, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
        dt = now() - t0;
        if (dt < best_dec) best_dec = dt;
        free(out);
        free(ids);
    }
    printf("{\"bytes\": %ld, \"load_s\": %.4f, \"tokens\": %zu, \"encode_s\": %.4f, \"tok_per_s\": %.0f, "
           "\"decode_s\": %.4f}\n", n, load, count, best, (double)count / best, best_dec);
    gm_tokenizer_free(tok);
    free(text);
    return 0;
}
