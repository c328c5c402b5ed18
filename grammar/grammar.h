/* grammar/grammar.h — the grammar engine's public API is in include/gemma_grammar.h; this
 * header is what the library's own files include. */
#ifndef GM_GRAMMAR_H
#define GM_GRAMMAR_H

#include "gemma.h"
#include "gemma_grammar.h"

#endif
