/* tests/test_tokenizer.c — the tokenizer against llama.cpp's ids (tests/data/tokenizer, made by
 * tests/gen/gen_tokenizer_fixture.py), round trips, streaming decode, bad input, and the
 * Hugging Face folder loaders against the same vocabulary from GGUF. */
#include <stdint.h>
#include <string.h>

#include "formats/gguf.h"
#include "support/gguf_writer.h"
#include "support/test.h"
#include "text/tokenizer.h"

/* ------------------------------------------------------------------ fixture records */

typedef struct rec {
    uint32_t flags; /* 1 add_bos, 2 parse_special */
    const char *text;
    uint32_t len;
    const int32_t *ids;
    uint32_t n;
} rec;

typedef struct recs {
    unsigned char *buf;
    rec *r;
    uint32_t n;
} recs;

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static bool load_recs(const char *rel, recs *out) {
    size_t len = 0;
    memset(out, 0, sizeof *out);
    out->buf = test_read_file(test_data_path(rel), &len);
    if (!out->buf || len < 10 || memcmp(out->buf, "GMTK1\n", 6)) return false;
    uint32_t n = rd32(out->buf + 6);
    out->r = calloc(n ? n : 1, sizeof *out->r);
    size_t at = 10;
    for (uint32_t i = 0; i < n; i++) {
        if (at + 8 > len) return false;
        rec *r = &out->r[i];
        r->flags = rd32(out->buf + at);
        r->len = rd32(out->buf + at + 4);
        at += 8;
        if (r->len > len - at) return false;
        r->text = (const char *)out->buf + at;
        at += r->len;
        if (at + 4 > len) return false;
        r->n = rd32(out->buf + at);
        at += 4;
        if ((size_t)r->n * 4 > len - at) return false;
        /* ids are 4-byte aligned only by luck; copy them */
        int32_t *ids = malloc((size_t)r->n * 4 + 4);
        for (uint32_t k = 0; k < r->n; k++) ids[k] = (int32_t)rd32(out->buf + at + 4 * k);
        r->ids = ids;
        at += (size_t)r->n * 4;
    }
    out->n = n;
    return at == len;
}

static void free_recs(recs *r) {
    for (uint32_t i = 0; r->r && i < r->n; i++) free((void *)r->r[i].ids);
    free(r->r);
    free(r->buf);
}

static gm_tokenizer *open_default(void) {
    gm_tokenizer *t = NULL;
    gm_error err = {0};
    if (!test_have_default_model("the real-vocabulary tests")) return NULL;
    CHECK_OK(gm_tokenizer_open(GM_DEFAULT_MODEL, &t, &err), &err);
    return t;
}

static gm_tokenizer *g_tok; /* the default model's tokenizer */

/* Compares our ids for every record with llama.cpp's. The one documented difference: llama.cpp
 * adds a second BOS when the text already starts with "<bos>"; we never double it. */
static int compare_records(const gm_tokenizer *tok, const recs *rs, const char *what) {
    int bad = 0;
    for (uint32_t i = 0; i < rs->n; i++) {
        const rec *r = &rs->r[i];
        int32_t *ids = NULL;
        size_t n = 0;
        gm_error err = {0};
        gm_status st = gm_tokenize(tok, r->text, r->len, r->flags & 1, r->flags & 2, &ids, &n, &err);
        const int32_t *ref = r->ids;
        size_t nref = r->n;
        int32_t bos = gm_tokenizer_bos(tok);
        if ((r->flags & 1) && nref >= 2 && ref[0] == bos && ref[1] == bos) { ref++; nref--; }
        bool same = st == GM_OK && n == nref && (n == 0 || memcmp(ids, ref, n * 4) == 0);
        if (!same && bad++ < 5) {
            fprintf(stderr, "  %s case %u (flags %u, %u bytes '%.40s'): status %d, %zu ids vs %zu\n", what, i,
                    r->flags, r->len, r->text, st, n, nref);
            for (size_t k = 0; k < n && k < nref; k++)
                if (ids[k] != ref[k]) { fprintf(stderr, "    first difference at %zu: %d vs %d\n", k, ids[k], ref[k]); break; }
        }
        free(ids);
    }
    return bad;
}

TEST(corpus_matches_llama_cpp) {
    recs rs;
    CHECK(load_recs("tokenizer/corpus.bin", &rs));
    CHECK(rs.n >= 800);
    int bad = compare_records(g_tok, &rs, "corpus");
    CHECK_MSG(bad == 0, "%d of %u cases differ from llama.cpp", bad, rs.n);
    free_recs(&rs);
}

static bool contains(const char *s, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return true;
    return false;
}

/* decode(encode(x)) == x for valid UTF-8 (U+2581 excepted: SentencePiece turns it into a space),
 * and the streaming decoder gives the same bytes as the whole decode. */
TEST(round_trip_and_streaming) {
    recs rs;
    CHECK(load_recs("tokenizer/corpus.bin", &rs));
    int checked = 0, bad_rt = 0, bad_stream = 0;
    for (uint32_t i = 0; i < rs.n; i++) {
        const rec *r = &rs.r[i];
        if (r->flags != 3) continue; /* each text once */
        bool valid = gm_utf8_valid((const uint8_t *)r->text, r->len);
        for (int sp = 0; sp < 2; sp++) {
            int32_t *ids;
            size_t n;
            gm_error err = {0};
            CHECK_OK(gm_tokenize(g_tok, r->text, r->len, false, sp, &ids, &n, &err), &err);
            char *text;
            size_t len;
            CHECK_OK(gm_detokenize(g_tok, ids, n, sp, &text, &len, &err), &err);
            if (valid && !contains(r->text, r->len, "\xe2\x96\x81")) {
                checked++;
                if (len != r->len || memcmp(text, r->text, len)) bad_rt++;
            }
            gm_detok_stream *s;
            CHECK_OK(gm_detok_stream_new(g_tok, sp, &s, &err), &err);
            char *acc = malloc(len + 16);
            size_t at = 0;
            bool ok = true;
            for (size_t k = 0; k < n && ok; k++) {
                const char *piece;
                size_t pl;
                ok = gm_detok_stream_push(s, ids[k], &piece, &pl, &err) == GM_OK && at + pl <= len;
                /* what is emitted always ends on a character boundary for valid input */
                if (ok && valid && pl) ok = gm_utf8_complete_prefix((const uint8_t *)piece, pl) == pl;
                if (ok) { memcpy(acc + at, piece, pl); at += pl; }
            }
            const char *tail;
            size_t tl;
            gm_detok_stream_flush(s, &tail, &tl);
            if (ok && at + tl <= len) { memcpy(acc + at, tail, tl); at += tl; }
            if (!ok || at != len || memcmp(acc, text, len)) bad_stream++;
            free(acc);
            gm_detok_stream_free(s);
            free(text);
            free(ids);
        }
    }
    CHECK(checked > 300);
    CHECK_MSG(bad_rt == 0, "%d of %d round trips differ", bad_rt, checked);
    CHECK_MSG(bad_stream == 0, "%d streaming decodes differ from the whole decode", bad_stream);
    free_recs(&rs);
}

TEST(stream_holds_back_partial_characters) {
    /* "é" split over two byte tokens: nothing until the second byte arrives */
    int32_t b1 = gm_token_id(g_tok, "<0xC3>", 6), b2 = gm_token_id(g_tok, "<0xA9>", 6);
    CHECK(b1 >= 0 && b2 >= 0);
    gm_detok_stream *s;
    gm_error err = {0};
    CHECK_OK(gm_detok_stream_new(g_tok, false, &s, &err), &err);
    const char *p;
    size_t n;
    CHECK_OK(gm_detok_stream_push(s, b1, &p, &n, &err), &err);
    CHECK_EQ_INT(n, 0);
    CHECK_OK(gm_detok_stream_push(s, b2, &p, &n, &err), &err);
    CHECK(n == 2 && !memcmp(p, "\xc3\xa9", 2));
    /* an incomplete sequence followed by ASCII goes out as is */
    CHECK_OK(gm_detok_stream_push(s, b1, &p, &n, &err), &err);
    CHECK_EQ_INT(n, 0);
    int32_t a = gm_token_id(g_tok, "a", 1);
    CHECK_OK(gm_detok_stream_push(s, a, &p, &n, &err), &err);
    CHECK(n == 2 && !memcmp(p, "\xc3" "a", 2));
    /* flush emits a dangling lead byte */
    CHECK_OK(gm_detok_stream_push(s, b1, &p, &n, &err), &err);
    gm_detok_stream_flush(s, &p, &n);
    CHECK(n == 1 && (uint8_t)p[0] == 0xC3);
    CHECK_EQ_INT(gm_detok_stream_push(s, 1 << 30, &p, &n, &err), GM_ERR_ARG);
    gm_detok_stream_free(s);
}

TEST(vocab_queries) {
    CHECK_EQ_INT(gm_tokenizer_n_vocab(g_tok), 262144);
    CHECK_EQ_INT(gm_tokenizer_bos(g_tok), 2);
    CHECK_EQ_INT(gm_tokenizer_eos(g_tok), 1);
    CHECK_EQ_INT(gm_tokenizer_pad(g_tok), 0);
    CHECK_EQ_INT(gm_tokenizer_unk(g_tok), 3);
    CHECK_EQ_INT(gm_tokenizer_eot(g_tok), 106);
    CHECK(gm_tokenizer_add_bos(g_tok));
    CHECK_EQ_INT(gm_token_id(g_tok, "<start_of_turn>", 15), 105);
    CHECK_EQ_INT(gm_token_id(g_tok, "<end_of_turn>", 13), 106);
    CHECK_EQ_INT(gm_token_id(g_tok, "no such piece at all", 20), -1);
    CHECK(gm_token_is_control(g_tok, 105));
    CHECK(!gm_token_is_control(g_tok, 107)); /* "\n" is user-defined */
    CHECK_EQ_INT(gm_token_get_type(g_tok, 107), GM_TOKEN_USER_DEFINED);
    CHECK_EQ_INT(gm_token_get_type(g_tok, 238), GM_TOKEN_BYTE);
    CHECK_EQ_INT(gm_token_get_type(g_tok, -1), GM_TOKEN_UNDEFINED);
    CHECK_EQ_INT(gm_token_get_type(g_tok, 262144), GM_TOKEN_UNDEFINED);
    CHECK(gm_token_is_eog(g_tok, 1) && gm_token_is_eog(g_tok, 106) && !gm_token_is_eog(g_tok, 2));
    int32_t stop[4];
    CHECK_EQ_INT(gm_tokenizer_stop_ids(g_tok, stop), 2);
    CHECK(stop[0] == 1 && stop[1] == 106);
    size_t len;
    const char *t = gm_token_text(g_tok, 105, &len);
    CHECK(t && len == 15 && !memcmp(t, "<start_of_turn>", 15));
    CHECK(gm_token_text(g_tok, 262144, &len) == NULL);
}

TEST(decode_rules) {
    gm_error err = {0};
    const char *p;
    size_t n;
    CHECK_OK(gm_token_to_piece(g_tok, 105, false, &p, &n, &err), &err);
    CHECK_EQ_INT(n, 0); /* control: nothing */
    CHECK_OK(gm_token_to_piece(g_tok, 105, true, &p, &n, &err), &err);
    CHECK(n == 15 && !memcmp(p, "<start_of_turn>", 15));
    CHECK_OK(gm_token_to_piece(g_tok, 238 + 0x41, false, &p, &n, &err), &err);
    CHECK(n == 1 && p[0] == 'A'); /* <0x41> */
    int32_t id = gm_token_id(g_tok, "\xe2\x96\x81the", 6);
    CHECK(id >= 0);
    CHECK_OK(gm_token_to_piece(g_tok, id, false, &p, &n, &err), &err);
    CHECK(n == 4 && !memcmp(p, " the", 4));
    CHECK_EQ_INT(gm_token_to_piece(g_tok, -5, false, &p, &n, &err), GM_ERR_ARG);
    CHECK(strstr(err.msg, "out of range") != NULL);
    int32_t ids[3] = {2, 9259, 262144};
    char *text = (char *)1;
    CHECK_EQ_INT(gm_detokenize(g_tok, ids, 3, false, &text, &n, &err), GM_ERR_ARG);
    CHECK(text == NULL);
    CHECK(strstr(err.msg, "ids[2]") != NULL);
}

TEST(bad_and_edge_input) {
    gm_error err = {0};
    int32_t *ids;
    size_t n;
    /* invalid UTF-8 -> byte tokens */
    CHECK_OK(gm_tokenize(g_tok, "\xff\xfe", 2, false, true, &ids, &n, &err), &err);
    CHECK(n == 2 && ids[0] == 238 + 0xFF && ids[1] == 238 + 0xFE);
    free(ids);
    /* empty text: just BOS, or nothing (with a freeable pointer) */
    CHECK_OK(gm_tokenize(g_tok, "", 0, true, true, &ids, &n, &err), &err);
    CHECK(n == 1 && ids[0] == 2);
    free(ids);
    CHECK_OK(gm_tokenize(g_tok, NULL, 0, false, true, &ids, &n, &err), &err);
    CHECK(n == 0 && ids != NULL);
    free(ids);
    /* never two BOS */
    CHECK_OK(gm_tokenize(g_tok, "<bos>hi", 7, true, true, &ids, &n, &err), &err);
    CHECK(n >= 2 && ids[0] == 2 && ids[1] != 2);
    free(ids);
    CHECK_EQ_INT(gm_tokenize(g_tok, NULL, 5, true, true, &ids, &n, &err), GM_ERR_ARG);
    CHECK_EQ_INT(gm_tokenize(NULL, "x", 1, true, true, &ids, &n, &err), GM_ERR_ARG);
    /* a long run of spaces and newlines: bounded work, same ids as the pieces it is made of */
    size_t big = 1 << 20;
    char *sp = malloc(big);
    memset(sp, ' ', big);
    CHECK_OK(gm_tokenize(g_tok, sp, big, false, false, &ids, &n, &err), &err);
    CHECK_EQ_INT(n, (big + 30) / 31); /* 31 spaces is the longest user-defined run */
    free(ids);
    free(sp);
}

/* ------------------------------------------------------------------ synthetic vocabularies */

static gm_status build(const char **pieces, const int32_t *types, int32_t n, int32_t unk, gm_tokenizer **t,
                       gm_error *err) {
    uint32_t lens[64];
    float scores[64];
    for (int32_t i = 0; i < n; i++) {
        lens[i] = (uint32_t)strlen(pieces[i]);
        scores[i] = -(float)i;
    }
    gm_vocab_spec s = {.n = n, .pieces = pieces, .piece_lens = lens, .scores = scores, .types = types,
                       .bos_id = 0, .eos_id = 1, .unk_id = unk, .pad_id = -1, .eot_id = -1, .add_bos = true};
    return gm_tokenizer_build(&s, "synthetic", t, err);
}

/* Documented: a vocabulary without <0xXX> pieces maps an unknown byte to the one-byte piece when
 * there is one, else to <unk>, else fails with GM_ERR_UNSUPPORTED naming the byte. */
TEST(vocab_without_byte_tokens) {
    const char *pieces[] = {"<s>", "</s>", "<unk>", "a", "b", "ab", "\xe2\x96\x81", ("\xe2\x96\x81" "ab"), "c"};
    const int32_t types[] = {3, 3, 2, 1, 1, 1, 1, 1, 1};
    gm_tokenizer *t;
    gm_error err = {0};
    CHECK_OK(build(pieces, types, 9, 2, &t, &err), &err);
    int32_t *ids;
    size_t n;
    CHECK_OK(gm_tokenize(t, "ab abz", 6, false, false, &ids, &n, &err), &err);
    /* "ab" "▁ab" then 'z' has no piece and no byte token -> <unk> */
    CHECK(n == 3 && ids[0] == 5 && ids[1] == 7 && ids[2] == 2);
    free(ids);
    CHECK_OK(gm_tokenize(t, "c", 1, false, false, &ids, &n, &err), &err);
    CHECK(n == 1 && ids[0] == 8);
    free(ids);
    gm_tokenizer_free(t);
    CHECK_OK(build(pieces, types, 9, -1, &t, &err), &err);
    CHECK_EQ_INT(gm_tokenize(t, "xyz", 3, false, false, &ids, &n, &err), GM_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "0x78") != NULL);
    gm_tokenizer_free(t);
    /* duplicates and bad sizes are format errors */
    const char *dup[] = {"<s>", "</s>", "a", "a"};
    const int32_t dt[] = {3, 3, 1, 1};
    CHECK_EQ_INT(build(dup, dt, 4, -1, &t, &err), GM_ERR_FORMAT);
    CHECK(strstr(err.msg, "duplicate") != NULL);
    CHECK_EQ_INT(build(dup, dt, 0, -1, &t, &err), GM_ERR_FORMAT);
}

/* Special pieces are cut longest first over the whole text, like llama.cpp (not leftmost-longest). */
TEST(special_partition_order) {
    const char *pieces[] = {"<s>", "</s>", "<0x61>", "<0x62>", "<0x63>", "<0x64>", "ab", "bcd"};
    const int32_t types[] = {3, 3, 6, 6, 6, 6, 4, 4};
    gm_tokenizer *t;
    gm_error err = {0};
    CHECK_OK(build(pieces, types, 8, -1, &t, &err), &err);
    int32_t *ids;
    size_t n;
    CHECK_OK(gm_tokenize(t, "abcd", 4, false, false, &ids, &n, &err), &err);
    CHECK(n == 2 && ids[0] == 2 && ids[1] == 7); /* 'a' as a byte, then "bcd" */
    free(ids);
    gm_tokenizer_free(t);
}

/* Issue 23: text without parse_special never yields a marker id, whatever the file types it. The
 * SPM merges can build a NORMAL-typed marker ("<|\"|>", Gemma 4's string delimiter, from "<|\"|" and
 * ">"), and a one-character CONTROL piece is found by the final lookup; both now stay ordinary
 * pieces / bytes. An added word that is no marker ("ab", USER_DEFINED) still matches in plain text. */
TEST(plain_text_never_yields_markers) {
    const char *pieces[] = {"<bos>", "<eos>", "<|", "<|\"", "<|\"|", "<|\"|>", "<", "|", "\"", ">",
                            "@", "<0x40>", "ab", "a", "b"};
    const int32_t types[] = {3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, 6, 4, 1, 1};
    gm_tokenizer *t;
    gm_error err = {0};
    CHECK_OK(build(pieces, types, 15, -1, &t, &err), &err);
    int32_t *ids;
    size_t n;
    CHECK_OK(gm_tokenize(t, "<|\"|>", 5, false, false, &ids, &n, &err), &err);
    CHECK_MSG(n == 2 && ids[0] == 4 && ids[1] == 9, "%zu ids, first %d", n, n ? ids[0] : -1);
    free(ids);
    CHECK_OK(gm_tokenize(t, "<|\"|>", 5, false, true, &ids, &n, &err), &err);
    CHECK(n == 1 && ids[0] == 5);
    free(ids);
    CHECK_OK(gm_tokenize(t, "@", 1, false, false, &ids, &n, &err), &err);
    CHECK_MSG(n == 1 && ids[0] == 11, "%zu ids, first %d", n, n ? ids[0] : -1);
    free(ids);
    CHECK_OK(gm_tokenize(t, "@", 1, false, true, &ids, &n, &err), &err);
    CHECK(n == 1 && ids[0] == 10);
    free(ids);
    CHECK_OK(gm_tokenize(t, "bab", 3, false, false, &ids, &n, &err), &err);
    CHECK(n == 2 && ids[0] == 14 && ids[1] == 12);
    free(ids);
    gm_tokenizer_free(t);
}

/* ------------------------------------------------------------------ max_token_bytes */

/* Counts texts for which a tokenizer gives fewer than ceil(B / k) tokens (either parse_special). */
typedef struct bound_check {
    const gm_tokenizer *t;
    size_t k;
    int texts, bad;
    size_t tightest_gap; /* min over texts of n - ceil(B / k) */
} bound_check;

static void check_bound(bound_check *c, const char *s, size_t B) {
    for (int ps = 0; ps < 2; ps++) {
        int32_t *ids = NULL;
        size_t n = 0;
        gm_error err = {0};
        if (gm_tokenize(c->t, s, B, false, ps, &ids, &n, &err) != GM_OK) {
            if (c->bad++ < 3) fprintf(stderr, "  tokenize failed: %s\n", err.msg);
            continue;
        }
        free(ids);
        size_t need = (B + c->k - 1) / c->k;
        c->texts++;
        if (n < need) {
            if (c->bad++ < 3) fprintf(stderr, "  %zu bytes '%.30s' -> %zu tokens < %zu (k %zu)\n", B, s, n, need, c->k);
        } else if (n - need < c->tightest_gap) {
            c->tightest_gap = n - need;
        }
    }
}

static uint32_t lcg(uint32_t *x) {
    *x = *x * 1664525u + 1013904223u;
    return *x >> 8;
}

/* text = `count` copies of s[0..n) */
static void check_repeated(bound_check *c, const char *s, size_t n, size_t count) {
    char *buf = malloc(n * count + 1);
    for (size_t i = 0; i < count; i++) memcpy(buf + i * n, s, n);
    check_bound(c, buf, n * count);
    free(buf);
}

/* Runs of spaces / newlines / tabs, every piece of the longest lengths repeated, every special and
 * user-defined piece repeated, random bytes and random concatenations of pieces. */
static void check_adversarial(bound_check *c) {
    const char *runs[] = {" ", "\n", "\t", "\r\n", " \n", "\xe2\x96\x81", "\xc2\xa0"};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++)
        for (size_t count = 1; count <= 700; count += count < 40 ? 1 : 37)
            check_repeated(c, runs[r], strlen(runs[r]), count);
    int32_t nv = gm_tokenizer_n_vocab(c->t);
    for (int32_t id = 0; id < nv; id++) {
        size_t l = 0;
        const char *p = gm_token_text(c->t, id, &l);
        gm_token_type ty = gm_token_get_type(c->t, id);
        if (l + 4 >= c->k || ty == GM_TOKEN_CONTROL || ty == GM_TOKEN_USER_DEFINED || ty == GM_TOKEN_UNKNOWN) {
            check_repeated(c, p, l, 1);
            check_repeated(c, p, l, 37);
        }
    }
    uint32_t x = 12345;
    char buf[4096];
    for (int i = 0; i < 300; i++) {
        size_t B = lcg(&x) % sizeof buf;
        for (size_t j = 0; j < B; j++) buf[j] = i % 2 ? (char)lcg(&x) : " \n<>ab|_"[lcg(&x) % 8];
        check_bound(c, buf, B);
        size_t at = 0; /* pieces glued together: each could be one token */
        while (at < 2048) {
            size_t l = 0;
            const char *p = gm_token_text(c->t, (int32_t)(lcg(&x) % (uint32_t)nv), &l);
            memcpy(buf + at, p, l);
            at += l;
        }
        check_bound(c, buf, at);
    }
}

static void check_max_token_bytes(const gm_tokenizer *t, const recs *corpus, const char *what) {
    bound_check c = {.t = t, .k = gm_tokenizer_max_token_bytes(t), .tightest_gap = (size_t)-1};
    size_t longest = 0;
    for (int32_t id = 0; id < gm_tokenizer_n_vocab(t); id++) {
        size_t l = 0;
        gm_token_text(t, id, &l);
        if (l > longest) longest = l;
    }
    CHECK_MSG(c.k >= 1 && c.k >= longest, "%s: k %zu, longest piece %zu", what, c.k, longest);
    if (c.k == 0) return;
    for (uint32_t i = 0; corpus && i < corpus->n; i++) check_bound(&c, corpus->r[i].text, corpus->r[i].len);
    check_adversarial(&c);
    CHECK_MSG(c.bad == 0, "%s: %d of %d texts under ceil(B / %zu) tokens", what, c.bad, c.texts, c.k);
    /* the bound is not vacuous: the longest piece repeated meets it exactly */
    CHECK_MSG(c.tightest_gap == 0, "%s: the closest text is %zu tokens over", what, c.tightest_gap);
}

/* gm_tokenizer_max_token_bytes: every text of B bytes gives at least ceil(B / k) tokens, for the
 * default model and the test vocabularies, on the corpus and adversarial texts. */
TEST(max_token_bytes_bounds_token_counts) {
    recs rs;
    bool have = load_recs("tokenizer/corpus.bin", &rs);
    CHECK(have);
    if (g_tok) check_max_token_bytes(g_tok, have ? &rs : NULL, "default model");
    const char *files[] = {"tokenizer/tiny/tiny.gguf", "tokenizer/tiny/hf_spm", "tokenizer/tiny/hf_json",
                           "gemma4/gemma4-dense.gguf", "tiny/gemma3.gguf"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        gm_tokenizer *t = NULL;
        gm_error err = {0};
        char path[4096];
        snprintf(path, sizeof path, "%s", test_data_path(files[f]));
        CHECK_OK(gm_tokenizer_open(path, &t, &err), &err);
        if (t) check_max_token_bytes(t, have ? &rs : NULL, files[f]);
        gm_tokenizer_free(t);
    }
    /* no byte pieces: unknown bytes fall back to <unk>, one per byte */
    const char *pieces[] = {"<s>", "</s>", "<unk>", "a", "b", "ab", "\xe2\x96\x81", ("\xe2\x96\x81" "ab"), "c"};
    const int32_t types[] = {3, 3, 2, 1, 1, 1, 1, 1, 1};
    gm_tokenizer *t = NULL;
    gm_error err = {0};
    CHECK_OK(build(pieces, types, 9, 2, &t, &err), &err);
    if (t) {
        CHECK_EQ_INT(gm_tokenizer_max_token_bytes(t), 5);
        check_max_token_bytes(t, NULL, "no byte pieces");
    }
    gm_tokenizer_free(t);
    CHECK_EQ_INT(gm_tokenizer_max_token_bytes(NULL), 0);
    if (have) free_recs(&rs);
}

/* ------------------------------------------------------------------ HF folders vs GGUF */

static bool same_vocab(const gm_tokenizer *a, const gm_tokenizer *b) {
    if (gm_tokenizer_n_vocab(a) != gm_tokenizer_n_vocab(b)) return false;
    if (gm_tokenizer_bos(a) != gm_tokenizer_bos(b) || gm_tokenizer_eos(a) != gm_tokenizer_eos(b) ||
        gm_tokenizer_unk(a) != gm_tokenizer_unk(b) || gm_tokenizer_pad(a) != gm_tokenizer_pad(b) ||
        gm_tokenizer_eot(a) != gm_tokenizer_eot(b) || gm_tokenizer_add_bos(a) != gm_tokenizer_add_bos(b))
        return false;
    if (strcmp(gm_tokenizer_chat_template(a), gm_tokenizer_chat_template(b))) return false;
    for (int32_t i = 0; i < gm_tokenizer_n_vocab(a); i++) {
        size_t la, lb;
        const char *pa = gm_token_text(a, i, &la), *pb = gm_token_text(b, i, &lb);
        if (la != lb || memcmp(pa, pb, la) || gm_token_get_type(a, i) != gm_token_get_type(b, i)) {
            fprintf(stderr, "  piece %d differs: '%.*s' (type %d) vs '%.*s' (type %d)\n", i, (int)la, pa,
                    gm_token_get_type(a, i), (int)lb, pb, gm_token_get_type(b, i));
            return false;
        }
    }
    return true;
}

TEST(hf_folders_match_gguf) {
    gm_tokenizer *g = NULL, *spm = NULL, *js = NULL;
    gm_error err = {0};
    char path[4096];
    snprintf(path, sizeof path, "%s", test_data_path("tokenizer/tiny/tiny.gguf"));
    CHECK_OK(gm_tokenizer_open(path, &g, &err), &err);
    snprintf(path, sizeof path, "%s", test_data_path("tokenizer/tiny/hf_spm"));
    CHECK_OK(gm_tokenizer_open(path, &spm, &err), &err);
    snprintf(path, sizeof path, "%s", test_data_path("tokenizer/tiny/hf_json"));
    CHECK_OK(gm_tokenizer_open(path, &js, &err), &err);
    if (!g || !spm || !js) goto done;
    CHECK_EQ_INT(gm_tokenizer_n_vocab(g), 1466);
    CHECK(same_vocab(g, spm));
    CHECK(same_vocab(g, js));
    recs rs;
    CHECK(load_recs("tokenizer/tiny/tiny_ids.bin", &rs));
    CHECK_EQ_INT(compare_records(g, &rs, "tiny gguf"), 0);
    CHECK_EQ_INT(compare_records(spm, &rs, "tiny tokenizer.model"), 0);
    CHECK_EQ_INT(compare_records(js, &rs, "tiny tokenizer.json"), 0);
    free_recs(&rs);
done:
    gm_tokenizer_free(g);
    gm_tokenizer_free(spm);
    gm_tokenizer_free(js);
}

TEST(corrupt_tokenizer_model) {
    size_t len = 0;
    unsigned char *buf = test_read_file(test_data_path("tokenizer/tiny/hf_spm/tokenizer.model"), &len);
    CHECK(buf != NULL && len > 1000);
    if (!buf) return;
    gm_error err = {0};
    gm_tokenizer *t = NULL;
    CHECK_OK(gm_tokenizer_from_spm_model(buf, len, "tiny.model", &t, &err), &err);
    gm_tokenizer_free(t);
    int ok = 0, failed = 0;
    for (size_t cut = 0; cut < len; cut += 7) { /* every truncation: an error or a smaller vocab */
        t = NULL;
        gm_status st = gm_tokenizer_from_spm_model(buf, cut, "cut.model", &t, &err);
        if (st == GM_OK) ok++; else failed++;
        CHECK(st == GM_OK || st == GM_ERR_FORMAT);
        gm_tokenizer_free(t);
    }
    CHECK(failed > 0);
    /* random byte flips: a clean error or a vocabulary that tokenizes without crashing */
    unsigned char *mut = malloc(len);
    uint32_t lcg = 12345;
    int bad_status = 0;
    for (int it = 0; it < 400; it++) {
        memcpy(mut, buf, len);
        for (int k = 0; k < 4; k++) {
            lcg = lcg * 1664525u + 1013904223u;
            mut[(lcg >> 8) % len] ^= (unsigned char)(1u << (lcg & 7));
        }
        t = NULL;
        gm_status st = gm_tokenizer_from_spm_model(mut, len, "mutated.model", &t, &err);
        if (st != GM_OK && st != GM_ERR_FORMAT) bad_status++;
        if (t) {
            int32_t *ids = NULL;
            size_t n = 0;
            st = gm_tokenize(t, "Hello \xff world <bos>\n", 19, true, true, &ids, &n, &err);
            if (st != GM_OK && st != GM_ERR_UNSUPPORTED) bad_status++;
            free(ids);
        }
        gm_tokenizer_free(t);
    }
    CHECK_EQ_INT(bad_status, 0);
    free(mut);
    /* a length field that lies */
    unsigned char bad[] = {0x0A, 0x7F, 0x0A, 0x01, 'a'};
    CHECK_EQ_INT(gm_tokenizer_from_spm_model(bad, sizeof bad, "lie.model", &t, &err), GM_ERR_FORMAT);
    CHECK(strstr(err.msg, "overruns") != NULL);
    unsigned char group[] = {0x0B};
    CHECK_EQ_INT(gm_tokenizer_from_spm_model(group, 1, "group.model", &t, &err), GM_ERR_FORMAT);
    free(buf);
    (void)ok;
}

TEST(gguf_errors) {
    gw_writer *w = gw_new();
    gw_add_str(w, "general.architecture", "gemma3");
    gw_add_str(w, "tokenizer.ggml.model", "gpt2");
    const char *toks[] = {"a", "b"};
    gw_add_arr_str(w, "tokenizer.ggml.tokens", 2, toks);
    char path[256];
    snprintf(path, sizeof path, "%s/tok_gpt2.gguf", GM_BUILD_DIR);
    CHECK(gw_write_file(w, path));
    gw_free(w);
    gm_tokenizer *t = NULL;
    gm_error err = {0};
    CHECK_EQ_INT(gm_tokenizer_open(path, &t, &err), GM_ERR_UNSUPPORTED);
    CHECK(strstr(err.msg, "gpt2") != NULL);
    w = gw_new();
    gw_add_str(w, "tokenizer.ggml.model", "llama");
    snprintf(path, sizeof path, "%s/tok_notokens.gguf", GM_BUILD_DIR);
    CHECK(gw_write_file(w, path));
    gw_free(w);
    CHECK_EQ_INT(gm_tokenizer_open(path, &t, &err), GM_ERR_NOT_FOUND);
    w = gw_new();
    gw_add_str(w, "tokenizer.ggml.model", "llama");
    gw_add_arr_str(w, "tokenizer.ggml.tokens", 2, toks);
    float sc[1] = {0};
    gw_add_arr(w, "tokenizer.ggml.scores", GGUF_VT_F32, 1, sc); /* fewer scores than tokens */
    snprintf(path, sizeof path, "%s/tok_short.gguf", GM_BUILD_DIR);
    CHECK(gw_write_file(w, path));
    gw_free(w);
    CHECK_EQ_INT(gm_tokenizer_open(path, &t, &err), GM_ERR_FORMAT);
    CHECK_EQ_INT(gm_tokenizer_open("/nonexistent/x.gguf", &t, &err), GM_ERR_IO);
    snprintf(path, sizeof path, "%s", test_data_path("tokenizer"));
    CHECK_EQ_INT(gm_tokenizer_open(path, &t, &err), GM_ERR_NOT_FOUND); /* a folder without a tokenizer */
}

int main(void) {
    g_tok = open_default();
    if (g_tok) {
        RUN(corpus_matches_llama_cpp);
        RUN(round_trip_and_streaming);
        RUN(stream_holds_back_partial_characters);
        RUN(vocab_queries);
        RUN(decode_rules);
        RUN(bad_and_edge_input);
    }
    RUN(vocab_without_byte_tokens);
    RUN(special_partition_order);
    RUN(plain_text_never_yields_markers);
    RUN(max_token_bytes_bounds_token_counts);
    RUN(hf_folders_match_gguf);
    RUN(corrupt_tokenizer_model);
    RUN(gguf_errors);
    gm_tokenizer_free(g_tok);
    return test_summary();
}
