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

static void tokenize_usage(FILE *out) {
    fprintf(out, "usage: gemma tokenize [-m MODEL] [--ids|--pieces] [--no-bos] [--no-special] [TEXT...]\n"
                 "  reads stdin when no TEXT is given. Default model: %s\n", gm_cli_default_model());
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = gm_cli_default_model();
    bool pieces = false, add_bos = true, special = true;
    int first_text = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) { tokenize_usage(stderr); return 2; }
            model = argv[i];
        } else if (!strcmp(a, "--ids")) pieces = false;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "--no-bos")) add_bos = false;
        else if (!strcmp(a, "--no-special")) special = false;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tokenize_usage(stdout); return 0; }
        else if (!strcmp(a, "--")) { first_text = i + 1; break; }
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "gemma tokenize: unknown option '%s'\n", a); tokenize_usage(stderr); return 2; }
        else { first_text = i; break; }
    }
    char *text = NULL;
    size_t len = 0;
    if (first_text < argc) {
        for (int i = first_text; i < argc; i++) len += strlen(argv[i]) + 1;
        text = malloc(len);
        if (!text) { fprintf(stderr, "gemma tokenize: out of memory\n"); return 1; }
        len = 0;
        for (int i = first_text; i < argc; i++) {
            if (i > first_text) text[len++] = ' ';
            memcpy(text + len, argv[i], strlen(argv[i]));
            len += strlen(argv[i]);
        }
    } else if (!(text = read_all(stdin, &len))) {
        fprintf(stderr, "gemma tokenize: cannot read stdin\n");
        return 1;
    }
    gm_tokenizer *tok = NULL;
    if (open_tok(model, &tok)) { free(text); return 1; }
    int32_t *ids = NULL;
    size_t n = 0;
    gm_error err = {0};
    int rc = 0;
    if (gm_tokenize(tok, text, len, add_bos, special, &ids, &n, &err) != GM_OK) {
        fprintf(stderr, "gemma tokenize: %s\n", err.msg);
        rc = 1;
    } else if (pieces) {
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = gm_token_text(tok, ids[i], &pl);
            printf("%d\t", ids[i]);
            print_escaped(p, pl);
            putchar('\n');
        }
    } else {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(ids);
    free(text);
    gm_tokenizer_free(tok);
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

int cmd_detokenize(int argc, char **argv) {
    const char *model = gm_cli_default_model();
    bool special = false;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    bool any_arg = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc) { fprintf(stderr, "usage: gemma detokenize [-m MODEL] [--special] IDS...\n"); free(ids); return 2; }
            model = argv[i];
        } else if (!strcmp(a, "--special")) special = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: gemma detokenize [-m MODEL] [--special] IDS...   (ids from stdin when none)\n");
            free(ids);
            return 0;
        } else {
            any_arg = true;
            if (!parse_ids(a, &ids, &n, &cap)) { free(ids); return 1; }
        }
    }
    if (!any_arg) {
        size_t len;
        char *in = read_all(stdin, &len);
        if (!in) { fprintf(stderr, "gemma detokenize: cannot read stdin\n"); return 1; }
        char *z = realloc(in, len + 1);
        if (!z) { free(in); return 1; }
        z[len] = 0;
        if (strlen(z) != len || !parse_ids(z, &ids, &n, &cap)) {
            if (strlen(z) != len) fprintf(stderr, "gemma detokenize: stdin holds a NUL byte\n");
            free(z);
            free(ids);
            return 1;
        }
        free(z);
    }
    gm_tokenizer *tok = NULL;
    if (open_tok(model, &tok)) { free(ids); return 1; }
    char *text = NULL;
    size_t len = 0;
    gm_error err = {0};
    int rc = 0;
    if (gm_detokenize(tok, ids, n, special, &text, &len, &err) != GM_OK) {
        fprintf(stderr, "gemma detokenize: %s\n", err.msg);
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
    }
    free(text);
    free(ids);
    gm_tokenizer_free(tok);
    return rc;
}
