/* grammar/markers.c — Gemma's chat-format markers as grammar characters.
 *
 * A marker (<|tool_call>, <|"|>, <escape>, ...) is one special token, and a grammar must be able to
 * require exactly that token: the same characters spelled with ordinary pieces mean something else
 * to the model. The matcher works on text, so each marker stands for one private-use code point
 * (U+F0000 + its index below, plane 15): GBNF's `<|tool_call>` is that one-character literal, and a
 * vocabulary built with markers (gm_gvocab_from_tokenizer_ex) gives the marker token that
 * character's UTF-8 as its bytes. A fixed table keeps grammars independent of any vocabulary: the
 * same GBNF text works with every tokenizer that has the marker. The list is text/tokenizer.c's
 * MARKER_PIECES, in its order; new markers go at the end (the code points are an interface). */
#include <string.h>

#include "grammar/internal.h"

static const char *const MARKERS[] = {
    "<start_of_turn>", "<end_of_turn>",
    "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>",
    "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", "<|\"|>",
    "<start_function_declaration>", "<end_function_declaration>", "<start_function_call>",
    "<end_function_call>", "<start_function_response>", "<end_function_response>", "<escape>",
};

_Static_assert(sizeof MARKERS / sizeof *MARKERS <= GR_MARKER_HI - GR_MARKER_LO + 1, "marker range too small");

size_t gr_n_markers(void) { return sizeof MARKERS / sizeof *MARKERS; }

const char *gr_marker_text(size_t i) { return i < gr_n_markers() ? MARKERS[i] : NULL; }

size_t gr_marker_at(const char *s, size_t n, uint32_t *cp) {
    size_t best = 0;
    for (size_t i = 0; i < gr_n_markers(); i++) {
        size_t l = strlen(MARKERS[i]);
        if (l > best && l <= n && memcmp(s, MARKERS[i], l) == 0) {
            best = l;
            *cp = GR_MARKER_LO + (uint32_t)i;
        }
    }
    return best;
}

uint32_t gm_gbnf_marker_cp(const char *text, size_t len) {
    uint32_t cp = 0;
    return text && gr_marker_at(text, len, &cp) == len && len ? cp : 0;
}

size_t gr_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3F)); out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)); out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
