/* grammar/grammar.h — the grammar engine's public API is in include/gemma.h ("structured output"); this
 * header is what the library's own files include. */
#ifndef GM_GRAMMAR_H
#define GM_GRAMMAR_H

#include "gemma.h"

#endif
