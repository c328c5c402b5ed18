/* grammar/markers.c — Gemma's chat-format markers as grammar characters.
 *
 * A marker (<|tool_call>, <|"|>, <escape>, ...) is one special token, and a grammar must be able to
 * require exactly that token: the same characters spelled with ordinary pieces mean something else
 * to the model. The matcher works on text, so each marker stands for one private-use code point
 * (U+F0000 + its index below, plane 15): GBNF's `<|tool_call>` is that one-character literal, and a
 * vocabulary built with markers (gm_gvocab_from_tokenizer) gives the marker token that
 * character's UTF-8 as its bytes. A fixed table keeps grammars independent of any vocabulary: the
 * same GBNF text works with every tokenizer that has the marker. The list is text/tokenizer.c's
 * MARKER_PIECES (gm_marker_pieces), in its order; new markers go at the end (the code points are an interface). */
#include <string.h>

#include "grammar/internal.h"
#include "gemma_grammar.h"
#include "text/tokenizer.h"

/* text/tokenizer.c's MARKER_PIECES: one list of markers for the tokenizer and the grammars */
static const char *const *markers(void) {
    const char *const *m;
    gm_marker_pieces(&m);
    return m;
}

size_t gr_n_markers(void) {
    const char *const *m;
    return gm_marker_pieces(&m);
}

const char *gr_marker_text(size_t i) { return i < gr_n_markers() ? markers()[i] : NULL; }

size_t gr_marker_at(const char *s, size_t n, uint32_t *cp) {
    size_t best = 0;
    for (size_t i = 0; i < gr_n_markers(); i++) {
        const char *m = markers()[i];
        size_t l = strlen(m);
        if (l > best && l <= n && memcmp(s, m, l) == 0) {
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
