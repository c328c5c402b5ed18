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
#include "tools/cli_util.h"
#include "tools/commands.h"

/* EmbeddingGemma's prompt names (its model card / config_sentence_transformers.json) */
static const struct { const char *name, *prefix; } TASKS[] = {
    {"query", "task: search result | query: "},
    {"document", "title: none | text: "},
    {"qa", "task: question answering | query: "},
    {"fact", "task: fact checking | query: "},
    {"classification", "task: classification | query: "},
    {"clustering", "task: clustering | query: "},
    {"similarity", "task: sentence similarity | query: "},
    {"code", "task: code retrieval | query: "},
};

static void usage(FILE *out) {
    fprintf(out,
            "usage: gemma embed [-m MODEL] [-p TEXT]... [-f FILE] [--task NAME | --prefix STR] [--normalize] [--json]\n"
            "                   [-t THREADS] [-c CONTEXT]\n"
            "  One vector per input with an embedding model (EmbeddingGemma, GGUF arch gemma-embedding):\n"
            "  mean of the final hidden states over the tokens, then the model's dense projections.\n"
            "  -p TEXT        an input (repeatable); without -p: each non-empty line of -f FILE, else of stdin\n"
            "  --task NAME    put EmbeddingGemma's task prefix before every input:\n");
    for (size_t i = 0; i < sizeof TASKS / sizeof TASKS[0]; i++)
        fprintf(out, "                   %-14s \"%s\"\n", TASKS[i].name, TASKS[i].prefix);
    fprintf(out,
            "  --prefix STR   put STR before every input instead\n"
            "  --normalize    scale each vector to unit L2 norm (cosine similarity = dot product)\n"
            "  --json         one JSON object: {\"model\", \"dim\", \"data\": [{\"index\", \"tokens\", \"embedding\"}]}\n"
            "  -t N           threads (default: physical cores)\n"
            "  -c N           longest input in tokens (default: the model's context, at most %d)\n"
            "  Output without --json: one line per input, the floats separated by spaces. BOS (and EOS) are\n"
            "  added as the model's tokenizer config says. Default model: %s\n",
            GM_DEFAULT_MAX_CTX, gm_cli_default_model());
}

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

int cmd_embed(int argc, char **argv) {
    const char *model = gm_cli_default_model(), *file = NULL, *prefix = "";
    bool normalize = false, json = false;
    int threads = 0, n_ctx = 0, rc = 0;
    inputs in = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const bool has_val = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) model = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_val) {
            if (!push(&in, argv[i + 1], strlen(argv[i + 1]))) { fprintf(stderr, "gemma embed: out of memory\n"); rc = 1; goto done; }
            i++;
        } else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_val) file = argv[++i];
        else if (!strcmp(a, "--prefix") && has_val) prefix = argv[++i];
        else if (!strcmp(a, "--task") && has_val) {
            const char *name = argv[++i];
            prefix = NULL;
            for (size_t k = 0; k < sizeof TASKS / sizeof TASKS[0]; k++)
                if (!strcmp(name, TASKS[k].name)) prefix = TASKS[k].prefix;
            if (!prefix) { fprintf(stderr, "gemma embed: unknown task '%s' (see --help)\n", name); rc = 2; goto done; }
        } else if (!strcmp(a, "--normalize")) normalize = true;
        else if (!strcmp(a, "--json")) json = true;
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has_val) {
            if (!cli_parse_int(argv[++i], 1, 1024, &threads)) { fprintf(stderr, "gemma embed: bad -t '%s'\n", argv[i]); rc = 2; goto done; }
        } else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx")) && has_val) {
            if (!cli_parse_int(argv[++i], 1, 1 << 20, &n_ctx)) { fprintf(stderr, "gemma embed: bad -c '%s'\n", argv[i]); rc = 2; goto done; }
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); goto done; }
        else { fprintf(stderr, "gemma embed: unknown option or missing value '%s'\n", a); usage(stderr); rc = 2; goto done; }
    }
    if (in.n == 0) { /* inputs from the file or stdin, one per line */
        size_t len = 0;
        char *buf = file ? cli_read_file(file, &len) : read_stdin(&len);
        if (!buf) { fprintf(stderr, "gemma embed: cannot read %s\n", file ? file : "stdin"); rc = 1; goto done; }
        const bool ok = push_lines(&in, buf, len);
        free(buf);
        if (!ok) { fprintf(stderr, "gemma embed: out of memory\n"); rc = 1; goto done; }
        if (in.n == 0) { fprintf(stderr, "gemma embed: no input (give -p TEXT, -f FILE or lines on stdin)\n"); rc = 2; goto done; }
    }

    gm_error err = {0};
    gm_model *m = NULL;
    gm_embedder *e = NULL;
    float *v = NULL;
    char *text = NULL;
    const gm_model_options mo = gm_cli_model_options();
    if (gm_model_open(model, &mo, &m, &err) || gm_embedder_new(m, &(gm_embedder_options){.n_threads = threads, .n_ctx = n_ctx}, &e, &err)) {
        fprintf(stderr, "gemma embed: %s\n", err.msg);
        rc = 1;
        goto out;
    }
    const int dim = gm_embedder_dim(e);
    const size_t plen = strlen(prefix);
    v = malloc((size_t)dim * sizeof *v);
    if (!v) { fprintf(stderr, "gemma embed: out of memory\n"); rc = 1; goto out; }
    if (json) {
        fputs("{\"model\": ", stdout);
        print_json_string(model);
        printf(", \"dim\": %d, \"data\": [", dim);
    }
    for (int k = 0; k < in.n; k++) {
        const size_t tl = strlen(in.text[k]);
        free(text);
        if (!(text = malloc(plen + tl + 1))) { fprintf(stderr, "gemma embed: out of memory\n"); rc = 1; goto out; }
        memcpy(text, prefix, plen);
        memcpy(text + plen, in.text[k], tl + 1);
        int n_tok = 0;
        if (gm_embed_text(e, text, plen + tl, v, &n_tok, &err)) {
            fprintf(stderr, "gemma embed: input %d: %s\n", k + 1, err.msg);
            rc = 1;
            goto out;
        }
        if (normalize) gm_embedding_normalize(v, dim);
        if (!print_vector(v, dim, k, n_tok, json)) { rc = 1; goto out; } /* cli_stdout_finish says why */
    }
    if (json) fputs("\n]}\n", stdout);
out:
    free(text);
    free(v);
    gm_embedder_free(e);
    gm_model_free(m);
done:
    for (int k = 0; k < in.n; k++) free(in.text[k]);
    free(in.text);
    return rc;
}
