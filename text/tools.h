/* text/tools.h — what chat.c, tools.c and grammar/tools.c share: a growable string, the tool formats' markers and the
 * writers of declarations, call arguments and results in each format. Not part of the API (gemma.h is). */
#ifndef GM_TEXT_TOOLS_H
#define GM_TEXT_TOOLS_H

#include <stdbool.h>
#include <stddef.h>

#include "gemma.h"
#include "gemma_chat.h"

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;
void sb_put(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);

/* A format's markers (NULL where the format has none). */
typedef struct tool_markers {
    const char *quote;                 /* string delimiter: <|"|> or <escape> */
    const char *decl_open, *decl_close;
    const char *call_open, *call_close;
    const char *resp_open, *resp_close;
} tool_markers;
const tool_markers *tool_markers_of(gm_tool_format f);
/* A character of a function name as the formats allow it: letters, digits, '_', '-', '.'. */
bool tool_name_char(char ch);

/* Where a writer sends text: plain text, or a marker (a special token when the caller wants ids). */
typedef struct tool_out {
    void (*text)(void *ctx, const char *s, size_t n);
    void (*marker)(void *ctx, const char *marker);
    void *ctx;
} tool_out;

/* The writers return false with a message in err on bad input (JSON that does not parse, a call's
 * arguments that are not an object). */
/* FunctionGemma / Gemma 4: `declaration:NAME{description:Q..Q,parameters:{...}}` (without the decl markers). */
bool tool_write_declaration(const tool_out *o, gm_tool_format f, const gm_tool *t, gm_error *err);
/* FunctionGemma / Gemma 4: `call:NAME{k:v,...}`; Gemma 3: `NAME(k=v, ...)`. */
bool tool_write_call(const tool_out *o, gm_tool_format f, const gm_tool_call *c, gm_error *err);
/* FunctionGemma / Gemma 4: `response:NAME{value:Q content Q}` (without the markers). */
void tool_write_response(const tool_out *o, gm_tool_format f, const char *name, const char *content);
/* Gemma 3: Google's instructions and the tools as a JSON list, ending "\n\n". */
bool tool_write_gemma3_preamble(const tool_out *o, const gm_tool *tools, size_t n, gm_error *err);

#endif
