/* fuzz/fuzz_vocab.h — a small Gemma-like vocabulary built in memory for the text harnesses
 * (fuzz_tokenizer, fuzz_chat), so they depend on no model file: control tokens (<pad> <eos>
 * <bos> <start_of_turn> <end_of_turn> <mask>), an unknown token (and the image markers), user-defined tokens that overlap
 * the control texts ("<b>", "<st", newline runs, "</s>" which the builder forces to CONTROL), all
 * 256 <0xXX> byte tokens, and scored normal pieces (ASCII, U+2581 words, multi-byte characters,
 * equal scores to exercise the leftmost tie rule) whose merge chains reach every multi-char piece.
 * No normal merge chain reaches a control text, so with parse_special=false text never becomes a
 * control token. Header-only: each harness is one translation unit. */
#ifndef GM_FUZZ_VOCAB_H
#define GM_FUZZ_VOCAB_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

#define FV_MAX 600

static const char *const FV_SPECIAL[][2] = {
    /* text, type: C control, U unknown, D user-defined */
    {"<pad>", "C"}, {"<eos>", "C"}, {"<bos>", "C"}, {"<unk>", "U"}, {"<start_of_turn>", "C"},
    {"<end_of_turn>", "C"}, {"<mask>", "C"}, {"\n\n", "D"}, {"\n\n\n", "D"}, {"<b>", "D"},
    {"</b>", "D"}, {"<st", "D"}, {"\t\t", "D"}, {"</s>", "D"}, {"<table>", "D"},
    {"<start_of_image>", "C"}, {"<end_of_image>", "C"},
};

static const char *const FV_WORDS[] = {
    "\xe2\x96\x81", "\xe2\x96\x81\xe2\x96\x81", "\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81",
    "th", "he", "the", "\xe2\x96\x81t", "\xe2\x96\x81th", "\xe2\x96\x81the", "in", "ng", "ing",
    "\xe2\x96\x81i", "\xe2\x96\x81in", "an", "nd", "and", "\xe2\x96\x81" "a", "\xe2\x96\x81" "an",
    "\xe2\x96\x81" "and", "er", "re", "on", "\xe2\x96\x81o", "\xe2\x96\x81on", "el", "ll", "lo",
    "hel", "llo", "hell", "hello", "\xe2\x96\x81h", "\xe2\x96\x81hello", "ab", "bc", "abc",
    "\xc3\xa9", "t\xc3\xa9", "\xe6\x97\xa5", "\xe6\x9c\xac", "\xe6\x97\xa5\xe6\x9c\xac",
    "\xe8\xaa\x9e", "\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80", "\n", "\r\n", "..",
    "...", "</", "ta", "tab", "le", "ble", "\xe2\x96\x81<", "()", "{}", "  ",
};

typedef struct fv_vocab {
    const char *pieces[FV_MAX];
    uint32_t lens[FV_MAX];
    float scores[FV_MAX];
    int32_t types[FV_MAX];
    char bytes[256][7];
    char ascii[128][2];
    int32_t n;
} fv_vocab;

static void fv_add(fv_vocab *v, const char *p, uint32_t len, float score, int32_t type) {
    v->pieces[v->n] = p;
    v->lens[v->n] = len;
    v->scores[v->n] = score;
    v->types[v->n] = type;
    v->n++;
}

/* with_turns=false drops <start_of_turn> / <end_of_turn> (a vocabulary with no chat format). */
static gm_tokenizer *fv_build(bool with_turns, const char *chat_template) {
    static fv_vocab v;
    memset(&v, 0, sizeof v);
    for (size_t i = 0; i < sizeof FV_SPECIAL / sizeof *FV_SPECIAL; i++) {
        const char *t = FV_SPECIAL[i][1];
        int32_t type = t[0] == 'C' ? GM_TOKEN_CONTROL : t[0] == 'U' ? GM_TOKEN_UNKNOWN : GM_TOKEN_USER_DEFINED;
        const char *p = FV_SPECIAL[i][0];
        if (!with_turns && strstr(p, "_of_turn>")) p = i == 4 ? "<unused0>" : "<unused1>";
        fv_add(&v, p, (uint32_t)strlen(p), 0.0f, type);
    }
    for (int b = 0; b < 256; b++) {
        snprintf(v.bytes[b], sizeof v.bytes[b], "<0x%02X>", b);
        fv_add(&v, v.bytes[b], 6, 0.0f, GM_TOKEN_BYTE);
    }
    for (int c = 32; c < 127; c++) {
        v.ascii[c][0] = (char)c;
        if (c == ' ') continue; /* spaces are U+2581 inside pieces */
        fv_add(&v, v.ascii[c], 1, -100.0f - (float)(c % 7), GM_TOKEN_NORMAL); /* repeated scores: ties */
    }
    for (size_t i = 0; i < sizeof FV_WORDS / sizeof *FV_WORDS; i++)
        fv_add(&v, FV_WORDS[i], (uint32_t)strlen(FV_WORDS[i]), -(float)(i % 11), GM_TOKEN_NORMAL);
    gm_vocab_spec spec = {.n = v.n, .pieces = v.pieces, .piece_lens = v.lens, .scores = v.scores,
                          .types = v.types, .bos_id = 2, .eos_id = 1, .unk_id = 3, .pad_id = 0,
                          .eot_id = -1, .add_bos = true, .add_space_prefix = false,
                          .chat_template = chat_template,
                          .chat_template_len = chat_template ? strlen(chat_template) : 0};
    gm_tokenizer *tok = NULL;
    gm_error err = {0};
    if (gm_tokenizer_build(&spec, "fuzz vocab", &tok, &err) != GM_OK) {
        fprintf(stderr, "fuzz vocab: %s\n", err.msg);
        abort();
    }
    return tok;
}

#endif
