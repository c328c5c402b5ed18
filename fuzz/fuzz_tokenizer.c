/* fuzz/fuzz_tokenizer.c — libFuzzer harness for encoding and decoding (text/tokenizer.c) over a
 * small Gemma-like vocabulary built in memory (fuzz/fuzz_vocab.h). For each input, as text:
 *  - gm_tokenize with every add_bos / parse_special combination succeeds, every id is in range;
 *    add_bos only prepends BOS (never a second one); without parse_special no control / unknown
 *    id appears (control texts are plain text then);
 *  - for valid UTF-8 without U+2581 (which SentencePiece turns into a space by design):
 *    decode(encode(x)) == x without parse_special, and with parse_special when x holds no control
 *    text; decoding with render_special gives x back in every case;
 *  - the streaming decoder's pushes plus its flush equal gm_detokenize of the same ids.
 * And as ids (the bytes reinterpreted as int32): gm_detokenize / stream pushes give GM_ERR_ARG
 * exactly when an id is out of range, and the decoded length is the sum of the pieces' lengths.
 * Any violated property abort()s so libFuzzer reports it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz_vocab.h"

static gm_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_tok = fv_build(true, NULL);
    return 0;
}

static void fail(const char *what, size_t size) {
    fprintf(stderr, "fuzz_tokenizer: property violated: %s (input of %zu bytes)\n", what, size);
    abort();
}

static bool contains(const uint8_t *s, size_t n, const char *needle, size_t nl) {
    if (nl == 0 || nl > n) return false;
    for (size_t i = 0; i + nl <= n; i++)
        if (s[i] == (uint8_t)needle[0] && memcmp(s + i, needle, nl) == 0) return true;
    return false;
}

/* Does the text contain the piece of some control / unknown token (what parse_special cuts)? */
static bool has_control_text(const uint8_t *s, size_t n) {
    for (int32_t id = 0; id < gm_tokenizer_n_vocab(g_tok); id++) {
        gm_token_type ty = gm_token_get_type(g_tok, id);
        if (ty != GM_TOKEN_CONTROL && ty != GM_TOKEN_UNKNOWN) continue;
        size_t l;
        const char *p = gm_token_text(g_tok, id, &l);
        if (contains(s, n, p, l)) return true;
    }
    return false;
}

/* Stream-decodes ids one by one; the concatenation must equal whole = gm_detokenize(ids). */
static void check_stream(const int32_t *ids, size_t n, bool render, const char *whole, size_t whole_len,
                         size_t size) {
    gm_detok_stream *s = NULL;
    gm_error err = {0};
    if (gm_detok_stream_new(g_tok, render, &s, &err)) fail("stream_new", size);
    char *acc = malloc(whole_len + 1);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        const char *t;
        size_t l;
        if (gm_detok_stream_push(s, ids[i], &t, &l, &err)) fail("stream push of a valid id", size);
        if (at + l > whole_len || memcmp(whole + at, t, l)) fail("stream push differs from detokenize", size);
        memcpy(acc + at, t, l);
        at += l;
    }
    const char *t;
    size_t l;
    gm_detok_stream_flush(s, &t, &l);
    if (at + l != whole_len || memcmp(whole + at, t, l)) fail("stream flush differs from detokenize", size);
    free(acc);
    gm_detok_stream_free(s);
}

static char *decode(const int32_t *ids, size_t n, bool render, size_t *len, size_t size) {
    char *out = NULL;
    gm_error err = {0};
    if (gm_detokenize(g_tok, ids, n, render, &out, len, &err) != GM_OK) fail("detokenize of encoded ids", size);
    if (out[*len] != 0) fail("detokenize output not NUL-terminated", size);
    check_stream(ids, n, render, out, *len, size);
    return out;
}

static void check_text(const uint8_t *data, size_t size) {
    const char *text = (const char *)data;
    int32_t bos = gm_tokenizer_bos(g_tok), nv = gm_tokenizer_n_vocab(g_tok);
    bool clean = gm_utf8_valid(data, size) && !contains(data, size, "\xe2\x96\x81", 3);
    bool ctrl = has_control_text(data, size);
    for (int ps = 0; ps < 2; ps++) {
        int32_t *plain = NULL, *with_bos = NULL;
        size_t np = 0, nb = 0;
        gm_error err = {0};
        if (gm_tokenize(g_tok, text, size, false, ps, &plain, &np, &err)) fail("tokenize failed", size);
        if (gm_tokenize(g_tok, text, size, true, ps, &with_bos, &nb, &err)) fail("tokenize+bos failed", size);
        for (size_t i = 0; i < np; i++) {
            if (plain[i] < 0 || plain[i] >= nv) fail("id out of range", size);
            gm_token_type ty = gm_token_get_type(g_tok, plain[i]);
            if (!ps && (ty == GM_TOKEN_CONTROL || ty == GM_TOKEN_UNKNOWN)) fail("control id without parse_special", size);
        }
        /* add_bos: the same ids with BOS in front, unless they already start with BOS */
        bool had = np > 0 && plain[0] == bos;
        if (nb != np + !had || with_bos[0] != bos || memcmp(with_bos + !had, plain, np * sizeof *plain))
            fail("add_bos is not 'prepend BOS unless already there'", size);
        size_t l;
        char *out = decode(plain, np, false, &l, size);
        if (clean && (!ps || !ctrl) && (l != size || memcmp(out, data, size))) fail("decode(encode(x)) != x", size);
        free(out);
        out = decode(with_bos, nb, true, &l, size);
        if (clean && ps && (l != size + 5 * !had || memcmp(out + 5 * !had, data, size)))
            fail("decode(encode(x, parse_special), render_special) != <bos>x", size);
        free(out);
        free(plain);
        free(with_bos);
    }
}

/* The bytes as ids: out-of-range ids must be GM_ERR_ARG, never a crash or a partial output. */
static void check_ids(const uint8_t *data, size_t size) {
    size_t n = size / 4;
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (n) memcpy(ids, data, n * sizeof *ids);
    int32_t nv = gm_tokenizer_n_vocab(g_tok);
    bool ok = true;
    size_t expect = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = NULL;
        size_t l = 0;
        gm_error err = {0};
        gm_status st = gm_token_to_piece(g_tok, ids[i], (data[0] & 1), &p, &l, &err);
        bool in = ids[i] >= 0 && ids[i] < nv;
        if ((st == GM_OK) != in || (!in && st != GM_ERR_ARG)) fail("token_to_piece range check", size);
        ok &= in;
        expect += l;
    }
    char *out = (char *)1;
    size_t len = 7;
    gm_error err = {0};
    gm_status st = gm_detokenize(g_tok, ids, n, size && (data[0] & 1), &out, &len, &err);
    if (ok ? (st != GM_OK || len != expect) : (st != GM_ERR_ARG || out || len || !err.msg[0]))
        fail("detokenize of raw ids: status / output", size);
    free(out);
    gm_detok_stream *s = NULL;
    if (gm_detok_stream_new(g_tok, false, &s, &err)) fail("stream_new", size);
    for (size_t i = 0; i < n; i++) {
        const char *t;
        size_t l;
        bool in = ids[i] >= 0 && ids[i] < nv;
        st = gm_detok_stream_push(s, ids[i], &t, &l, &err);
        if (in ? st != GM_OK : (st != GM_ERR_ARG || l != 0)) fail("stream push range check", size);
    }
    const char *t;
    size_t l;
    gm_detok_stream_flush(s, &t, &l);
    gm_detok_stream_free(s);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_text(data, size);
    check_ids(data, size);
    return 0;
}
