/* tools/cmd_embed.c — `gemma embed`: one vector per input text with an embedding model (EmbeddingGemma).
 *
 *   gemma embed -m MODEL [-p TEXT]... [-f FILE] [--task NAME | --prefix STR] [--normalize] [--json]
 *     Inputs: each -p TEXT; else each non-empty line of FILE (-f) or of stdin.
 *     Output: one line per input, the vector's floats separated by spaces; --json: one JSON object
 *     {"model", "dim", "data": [{"index", "tokens", "embedding"}]}.
 * EmbeddingGemma was trained with task prefixes; --task adds the model card's ("query", "document", ...),
 * --prefix any text, before every input. --normalize scales each vector to unit length (the model does
 * not). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "tools/cli_opts.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

typedef struct inputs {
    char **text;
    int n, cap;
} inputs;

static bool push(inputs *in, const char *s, size_t len) {
    if (in->n == in->cap) {
        int cap = in->cap ? in->cap * 2 : 16;
        char **t = realloc(in->text, (size_t)cap * sizeof *t);
        if (!t) return false;
        in->text = t, in->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return false;
    memcpy(c, s, len);
    c[len] = 0;
    in->text[in->n++] = c;
    return true;
}

/* each non-empty line (a trailing \r dropped) */
static bool push_lines(inputs *in, const char *buf, size_t len) {
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && buf[j] != '\n') j++;
        size_t e = j > i && buf[j - 1] == '\r' ? j - 1 : j;
        if (e > i && !push(in, buf + i, e - i)) return false;
        i = j + 1;
    }
    return true;
}

static char *read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (size_t r; buf && (r = fread(buf + n, 1, cap - n, stdin)) > 0;) {
        n += r;
        if (n == cap) {
            char *b = cap > ((size_t)1 << 30) ? NULL : realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    if (buf && ferror(stdin)) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static void print_json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') printf("\\%c", *p);
        else if (*p < 0x20) printf("\\u%04x", *p);
        else putchar(*p);
    }
    putchar('"');
}

/* One vector; returns false once stdout fails. */
static bool print_vector(const float *v, int dim, int index, int n_tok, bool json) {
    if (json) printf("%s\n    {\"index\": %d, \"tokens\": %d, \"embedding\": [", index ? "," : "", index, n_tok);
    for (int i = 0; i < dim; i++) printf(json ? (i ? ", %.9g" : "%.9g") : (i ? " %.9g" : "%.9g"), (double)v[i]);
    fputs(json ? "]}" : "\n", stdout);
    return cli_stdout_flush();
}

/* One line on stderr; returns rc. */
static int complain(int rc, const char *msg) {
    fprintf(stderr, "gemma embed: %s\n", msg);
    return rc;
}

/* The inputs: each -p TEXT, else each non-empty line of -f FILE or of stdin. Returns 0 or the exit status. */
static int gather_inputs(const cli_args *a, inputs *in) {
    for (int i = 0; i < a->prompts.n; i++)
        if (!push(in, a->prompts.v[i], strlen(a->prompts.v[i]))) return complain(1, "out of memory");
    if (in->n) return 0;
    size_t len = 0;
    char *buf = a->file ? cli_read_file(a->file, &len) : read_stdin(&len);
    if (!buf) {
        fprintf(stderr, "gemma embed: cannot read %s\n", a->file ? a->file : "stdin");
        return 1;
    }
    const bool ok = push_lines(in, buf, len);
    free(buf);
    if (!ok) return complain(1, "out of memory");
    if (in->n == 0) return complain(2, "no input (give -p TEXT, -f FILE or lines on stdin)");
    return 0;
}

/* Input k with the prefix before it, into v; false after a message. */
static bool embed_one(gm_embedder *e, const cli_args *a, const char *input, int k, float *v, int *n_tok) {
    const size_t pl = strlen(a->prefix), tl = strlen(input);
    char *text = malloc(pl + tl + 1);
    if (!text) return complain(0, "out of memory");
    memcpy(text, a->prefix, pl);
    memcpy(text + pl, input, tl + 1);
    gm_error err = {0};
    const gm_status st = gm_embed_text(e, text, pl + tl, v, n_tok, &err);
    free(text);
    if (st) fprintf(stderr, "gemma embed: input %d: %s\n", k + 1, err.msg);
    return st == GM_OK;
}

/* Every input's vector on stdout. Returns the exit status. */
static int embed_all(gm_embedder *e, const cli_args *a, const inputs *in) {
    const int dim = gm_embedder_dim(e);
    float *v = malloc((size_t)dim * sizeof *v);
    if (!v) return complain(1, "out of memory");
    if (a->json) {
        fputs("{\"model\": ", stdout);
        print_json_string(a->model);
        printf(", \"dim\": %d, \"data\": [", dim);
    }
    int rc = 0;
    for (int k = 0; k < in->n && rc == 0; k++) {
        int n_tok = 0;
        if (!embed_one(e, a, in->text[k], k, v, &n_tok)) rc = 1;
        else if (a->normalize) gm_embedding_normalize(v, dim);
        if (rc == 0 && !print_vector(v, dim, k, n_tok, a->json)) rc = 1; /* cli_stdout_finish says why */
    }
    if (rc == 0 && a->json) fputs("\n]}\n", stdout);
    free(v);
    return rc;
}

static int embed_inputs(const cli_args *a, const inputs *in) {
    gm_error err = {0};
    gm_model *m = NULL;
    gm_embedder *e = NULL;
    const gm_model_options mo = gm_cli_model_options();
    const gm_embedder_options eo = {.n_threads = a->threads, .n_ctx = a->n_ctx, .backend = a->backend,
                                    .device = a->device + 1, .gpu_validate = a->gpu_validate};
    int rc = 1;
    if (gm_model_open(a->model, &mo, &m, &err) || gm_embedder_new(m, &eo, &e, &err))
        fprintf(stderr, "gemma embed: %s\n", err.msg);
    else
        rc = embed_all(e, a, in);
    gm_embedder_free(e);
    gm_model_free(m);
    return rc;
}

int cmd_embed(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(CLI_EMBED, argc, argv, &a);
    if (rc != CLI_GO) return rc;
    inputs in = {0};
    rc = gather_inputs(&a, &in);
    if (rc == 0) rc = embed_inputs(&a, &in);
    for (int k = 0; k < in.n; k++) free(in.text[k]);
    free(in.text);
    cli_args_free(&a);
    return rc;
}
