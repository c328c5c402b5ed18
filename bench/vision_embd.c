/* bench/vision_embd.c — our side of bench/vision-compare: encodes one raw RGB image with the Gemma 3 encoder
 * (gm_vision_preprocess, gm_vision_encode_chw: the library's own path) and writes the embeddings; times each
 * encode (wall and process CPU seconds). Not a test: nothing is asserted.
 *
 *   cmake --build build --target vision_embd
 *   build/vision_embd MM.gguf IMG.rgb W H [-t THREADS] [--isa scalar|avx2|avx512] [--reps R] [--out EMB.f32]
 *                     [--min-tokens N] [--max-tokens N]  (Gemma 4's size rule's bounds)
 *                     [--text TEXT.gguf --layout LAYOUT.txt --logits LOGITS.f32 [--causal]]
 *
 * --text / --layout / --logits: the sequence mtmd_ref --layout wrote (text chunks' ids, the image's place)
 * evaluated in our engine with the image's rows as a bidirectional span (--causal: a causal one, to see that the
 * comparison can tell); the last position's logits written.
 *
 * IMG.rgb is W*H*3 bytes, RGB, rows top to bottom (the same file mtmd_ref reads). EMB.f32 is n_tokens x
 * embd_dim little-endian floats from the last encode. Prints "encode R: S s" per encode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemma.h"
#include "gemma_vision.h"

typedef struct args {
    const char *mmproj, *rgb, *out, *text, *layout, *logits;
    int w, h, threads, reps;
    int min_tokens, max_tokens; /* --min-tokens / --max-tokens: Gemma 4's size rule's bounds (0: its defaults) */
    gm_isa isa;
    bool causal; /* --causal: the image causal (a sensitivity check of the logits comparison) */
    bool sliding_only; /* --sliding-only: both ways on sliding layers only (llama.cpp's Gemma 4 decode) */
    bool llama_act;    /* --llama-act: Gemma 4's gelu_quick as llama.cpp runs the converter's files */
} args;

/* wall (CLOCK_MONOTONIC) or this process's CPU time (CLOCK_PROCESS_CPUTIME_ID: steadier on a shared host) */
static double now(clockid_t clk) {
    struct timespec t;
    clock_gettime(clk, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static bool parse(int argc, char **argv, args *a) {
    if (argc < 5) return false;
    *a = (args){.mmproj = argv[1], .rgb = argv[2], .w = atoi(argv[3]), .h = atoi(argv[4]), .threads = 1, .reps = 1};
    for (int i = 5; i < argc; i += 2) {
        if (!strcmp(argv[i], "--causal") || !strcmp(argv[i], "--sliding-only") || !strcmp(argv[i], "--llama-act")) {
            *(argv[i][2] == 'c' ? &a->causal : argv[i][2] == 's' ? &a->sliding_only : &a->llama_act) = true;
            i--;
            continue;
        }
        if (i + 1 >= argc) return false;
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "-t")) a->threads = atoi(v);
        else if (!strcmp(k, "--reps")) a->reps = atoi(v);
        else if (!strcmp(k, "--min-tokens")) a->min_tokens = atoi(v);
        else if (!strcmp(k, "--max-tokens")) a->max_tokens = atoi(v);
        else if (!strcmp(k, "--out")) a->out = v;
        else if (!strcmp(k, "--text")) a->text = v;
        else if (!strcmp(k, "--layout")) a->layout = v;
        else if (!strcmp(k, "--logits")) a->logits = v;
        else if (!strcmp(k, "--isa")) {
            if (!gm_isa_parse(v, &a->isa)) return false;
        } else return false;
    }
    return a->w > 0 && a->h > 0 && a->reps > 0;
}

/* the raw file as a gm_image (exactly w * h * 3 bytes) */
static bool read_rgb(const args *a, gm_image *img) {
    const size_t n = (size_t)a->w * (size_t)a->h * 3;
    *img = (gm_image){.width = a->w, .height = a->h, .pixels = malloc(n)};
    FILE *f = fopen(a->rgb, "rb");
    const bool ok = f && img->pixels && fread(img->pixels, 1, n, f) == n && fgetc(f) == EOF;
    if (f) fclose(f);
    return ok;
}

static bool write_floats(const char *path, const float *x, size_t n) {
    FILE *f = fopen(path, "wb");
    const bool ok = f && fwrite(x, sizeof *x, n, f) == n;
    return f && !fclose(f) && ok;
}

/* The layout's chunks into s: "T ids..." lines appended, "I n" lines as the image's n rows. */
static int append_layout(gm_seq *s, const char *path, const float *emb, int n_tok, bool causal, bool sliding_only,
                         gm_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) return fprintf(stderr, "vision_embd: cannot read %s\n", path), 1;
    char line[1 << 16];
    int rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        if (line[0] == 'I') {
            const gm_embed_span sp = {.embeds = emb, .n = atoi(line + 2), .placeholder = 0, .key = {1, 1},
                                      .bidirectional = !causal,
                                      .sliding_only = sliding_only};
            if (sp.n != n_tok) rc = fprintf(stderr, "vision_embd: the layout's image has %d rows, ours %d\n", sp.n, n_tok) > 0;
            else if (gm_seq_append_embeds(s, &sp, err)) rc = fprintf(stderr, "vision_embd: %s\n", err->msg) > 0;
            continue;
        }
        char *p = line + 1, *end;
        for (long id; (id = strtol(p, &end, 10)), end != p && !rc; p = end) {
            const int32_t t = (int32_t)id;
            if (gm_seq_append(s, &t, 1, err)) rc = fprintf(stderr, "vision_embd: %s\n", err->msg) > 0;
        }
    }
    fclose(f);
    return rc;
}

/* The text model over the layout's sequence; the last position's logits to a->logits. */
static int eval_logits(const args *a, const float *emb, int n_tok, gm_error *err) {
    gm_model *m = NULL;
    gm_engine *e = NULL;
    gm_seq *s = NULL;
    const gm_engine_options eo = {.n_threads = a->threads, .isa = a->isa}; /* the model's context (capped) */
    int rc = gm_model_open(a->text, NULL, &m, err) || gm_engine_new(m, &eo, &e, err) || gm_seq_new(e, &s, err);
    if (rc) fprintf(stderr, "vision_embd: %s\n", err->msg);
    if (!rc) rc = append_layout(s, a->layout, emb, n_tok, a->causal, a->sliding_only, err);
    if (!rc && gm_engine_eval(e, &s, 1, err)) rc = fprintf(stderr, "vision_embd: %s\n", err->msg) > 0;
    if (!rc && !write_floats(a->logits, gm_seq_logits(s), (size_t)gm_model_config(m)->n_vocab))
        rc = fprintf(stderr, "vision_embd: cannot write %s\n", a->logits) > 0;
    if (!rc) printf("positions %d, vocab %d\n", gm_seq_length(s), gm_model_config(m)->n_vocab);
    gm_seq_free(s);
    gm_engine_free(e);
    gm_model_free(m);
    return rc;
}

static int encode(gm_vision *v, const args *a, const gm_image *img, gm_error *err) {
    float *chw = NULL;
    int w, h, n_tok;
    if (gm_vision_preprocess(v, img, &chw, &w, &h, &n_tok, err)) return fprintf(stderr, "vision_embd: %s\n", err->msg), 1;
    const size_t n = (size_t)n_tok * (size_t)gm_vision_embd_dim(v);
    float *emb = malloc(n * sizeof *emb);
    int rc = emb ? 0 : 1;
    for (int r = 0; r < a->reps && !rc; r++) {
        const double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        if (gm_vision_encode_chw(v, chw, w, h, emb, err)) rc = fprintf(stderr, "vision_embd: %s\n", err->msg) > 0;
        else printf("encode %d: %.3f s (cpu %.3f s)\n", r, now(CLOCK_MONOTONIC) - t0, now(CLOCK_PROCESS_CPUTIME_ID) - c0);
        fflush(stdout);
    }
    if (!rc) printf("tokens %d x %d\n", n_tok, gm_vision_embd_dim(v));
    if (!rc && a->out && !write_floats(a->out, emb, n)) rc = fprintf(stderr, "vision_embd: cannot write %s\n", a->out) > 0;
    if (!rc && a->text && a->layout && a->logits) rc = eval_logits(a, emb, n_tok, err);
    free(emb);
    free(chw);
    return rc;
}

int main(int argc, char **argv) {
    args a;
    if (!parse(argc, argv, &a)) {
        fprintf(stderr, "usage: vision_embd MM.gguf IMG.rgb W H [-t THREADS] [--isa scalar|avx2|avx512] [--reps R] "
                        "[--out EMB.f32] [--text TEXT.gguf --layout LAYOUT.txt --logits LOGITS.f32]\n");
        return 2;
    }
    gm_image img;
    if (!read_rgb(&a, &img)) return fprintf(stderr, "vision_embd: %s is not %d x %d x 3 bytes\n", a.rgb, a.w, a.h), 1;
    gm_error err = {0};
    gm_vision *v = NULL;
    const gm_vision_options o = {.n_threads = a.threads, .isa = a.isa, .llama_cpp_act = a.llama_act,
                                 .image_min_tokens = a.min_tokens, .image_max_tokens = a.max_tokens};
    int rc = gm_vision_open(a.mmproj, &o, &v, &err) ? fprintf(stderr, "vision_embd: %s\n", err.msg) > 0 : 0;
    if (!rc) rc = encode(v, &a, &img, &err);
    gm_vision_free(v);
    gm_image_free(&img);
    return rc;
}
