/* tools/cmd_tokenize.c — `gemma tokenize` and `gemma detokenize`.
 *
 *   gemma tokenize [-m MODEL] [--ids|--pieces] [--no-bos] [--no-special] [TEXT...]
 *     TEXT (several words are joined by single spaces), or stdin when absent.
 *     --ids (default): the ids on one line, space-separated.
 *     --pieces: one token per line: id, tab, the vocabulary piece (control bytes escaped).
 *   gemma detokenize [-m MODEL] [--special] IDS...
 *     ids separated by spaces and/or commas, or read from stdin when none are given; writes the
 *     decoded bytes as they are (no newline added). An id out of range is an error (exit 1). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gemma.h"
#include "tools/cli_opts.h"
#include "tools/commands.h"

static char *read_all(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n == cap) {
            char *nb = cap > ((size_t)1 << 30) ? NULL : realloc(buf, cap * 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) { free(buf); return NULL; }
    *len = n;
    return buf;
}

static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
}

static int open_tok(const char *model, gm_tokenizer **tok) {
    gm_error err = {0};
    if (gm_tokenizer_open(model, tok, &err) != GM_OK) {
        fprintf(stderr, "gemma: %s\n", err.msg);
        return 1;
    }
    return 0;
}

/* The arguments joined by single spaces, or stdin when there are none. */
static char *input_text(const cli_args *a, size_t *len) {
    if (!a->n_pos) return read_all(stdin, len);
    size_t n = 0;
    for (int i = 0; i < a->n_pos; i++) n += strlen(a->pos[i]) + 1;
    char *text = malloc(n);
    if (!text) return NULL;
    n = 0;
    for (int i = 0; i < a->n_pos; i++) {
        if (i) text[n++] = ' ';
        memcpy(text + n, a->pos[i], strlen(a->pos[i]));
        n += strlen(a->pos[i]);
    }
    *len = n;
    return text;
}

static void print_ids(const gm_tokenizer *tok, const int32_t *ids, size_t n, bool pieces) {
    if (!pieces) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        return;
    }
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = gm_token_text(tok, ids[i], &pl);
        printf("%d\t", ids[i]);
        print_escaped(p, pl);
        putchar('\n');
    }
}

static int tokenize(const cli_args *a, const char *text, size_t len) {
    gm_tokenizer *tok = NULL;
    if (open_tok(a->model, &tok)) return 1;
    int32_t *ids = NULL;
    size_t n = 0;
    gm_error err = {0};
    int rc = 0;
    if (gm_tokenize(tok, text, len, !a->no_bos, !a->no_special, &ids, &n, &err) != GM_OK) {
        fprintf(stderr, "gemma tokenize: %s\n", err.msg);
        rc = 1;
    } else {
        print_ids(tok, ids, n, a->pieces);
    }
    free(ids);
    gm_tokenizer_free(tok);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(CLI_TOKENIZE, argc, argv, &a);
    if (rc != CLI_GO) return rc;
    size_t len = 0;
    char *text = input_text(&a, &len);
    if (!text) {
        fprintf(stderr, "gemma tokenize: %s\n", a.n_pos ? "out of memory" : "cannot read stdin");
        rc = 1;
    } else {
        rc = tokenize(&a, text, len);
    }
    free(text);
    cli_args_free(&a);
    return rc;
}

/* Parses ids separated by spaces / commas / newlines into *ids; returns false on a bad item. */
static bool parse_ids(const char *s, int32_t **ids, size_t *n, size_t *cap) {
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) return true;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX ||
            (*end && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n' && *end != '\r')) {
            fprintf(stderr, "gemma detokenize: '%.*s' is not a token id\n", (int)strcspn(p, " ,\t\r\n"), p);
            return false;
        }
        if (*n == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            int32_t *ni = realloc(*ids, nc * sizeof *ni);
            if (!ni) { fprintf(stderr, "gemma detokenize: out of memory\n"); return false; }
            *ids = ni;
            *cap = nc;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
}

/* The ids of the arguments, or of stdin when there are none (false after a message). */
static bool input_ids(const cli_args *a, int32_t **ids, size_t *n) {
    size_t cap = 0;
    for (int i = 0; i < a->n_pos; i++)
        if (!parse_ids(a->pos[i], ids, n, &cap)) return false;
    if (a->n_pos) return true;
    size_t len;
    char *in = read_all(stdin, &len);
    if (!in) {
        fprintf(stderr, "gemma detokenize: cannot read stdin\n");
        return false;
    }
    char *z = realloc(in, len + 1);
    if (!z) {
        free(in);
        return false;
    }
    z[len] = 0;
    const bool nul = strlen(z) != len;
    if (nul) fprintf(stderr, "gemma detokenize: stdin holds a NUL byte\n");
    const bool ok = !nul && parse_ids(z, ids, n, &cap);
    free(z);
    return ok;
}

static int detokenize(const cli_args *a, const int32_t *ids, size_t n) {
    gm_tokenizer *tok = NULL;
    if (open_tok(a->model, &tok)) return 1;
    char *text = NULL;
    size_t len = 0;
    gm_error err = {0};
    int rc = 0;
    if (gm_detokenize(tok, ids, n, a->special, &text, &len, &err) != GM_OK) {
        fprintf(stderr, "gemma detokenize: %s\n", err.msg);
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
    }
    free(text);
    gm_tokenizer_free(tok);
    return rc;
}

int cmd_detokenize(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(CLI_DETOKENIZE, argc, argv, &a);
    if (rc != CLI_GO) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    rc = input_ids(&a, &ids, &n) ? detokenize(&a, ids, n) : 1;
    free(ids);
    cli_args_free(&a);
    return rc;
}
