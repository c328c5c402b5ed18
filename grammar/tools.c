/* grammar/tools.c — the grammar of a reply that must be tool calls (gm_tool_grammar): the tool format's framing
 * (text/tools.h's markers) around each function's arguments, which grammar/schema.c writes from the parameters
 * schema in the format's dialect. It lives here, above text/, because it compiles GBNF: text/ writes and parses
 * the formats, grammar/ constrains them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "grammar/grammar.h"
#include "text/tokenizer.h"
#include "text/tools.h"

/* ------------------------------------------------------------------ grammars of calls */

/* The calls a reply may be when a call is required: the format's framing around each function's name and
 * its arguments in the format's dialect (grammar/schema.c writes them from the parameters schema, every
 * function's rules under its own prefix). Gemma 3: `[f(k=v, ...), ...]`; the marker formats:
 * `<|tool_call>call:f{k:v,...}<tool_call|>` once or, with parallel, up to 8 times. */
#define MAX_PARALLEL_CALLS 8

gm_status gm_tool_grammar(const gm_tokenizer *tok, const gm_tool *tools, size_t n_tools, const char *only, bool parallel,
                          gm_grammar **out, gm_error *err) {
    if (out) *out = NULL;
    if (!tok || !out || (!tools && n_tools)) return gm_fail(err, GM_ERR_ARG, "gm_tool_grammar: NULL argument");
    const gm_tool_format tf = gm_tokenizer_tool_format(tok);
    if (tf == GM_TOOLS_NONE) return gm_fail(err, GM_ERR_UNSUPPORTED, "tools: this vocabulary has no tool-call format");
    sbuf g = {0}, alt = {0};
    gm_status st = GM_OK;
    size_t used = 0;
    for (size_t i = 0; i < n_tools && !st; i++) {
        if (only && strcmp(tools[i].name, only)) continue;
        if (!tools[i].name || !tools[i].name[0])
            return free(g.p), free(alt.p), gm_fail(err, GM_ERR_ARG, "tools: tool %zu has no name", i);
        for (const char *c = tools[i].name; *c; c++)
            if (!tool_name_char(*c)) return free(g.p), free(alt.p), gm_fail(err, GM_ERR_ARG, "tools: '%.64s' is not a function name", tools[i].name);
        char prefix[24];
        snprintf(prefix, sizeof prefix, "f%zu-", i);
        gm_schema_options o = gm_schema_options_default();
        o.dialect = tf == GM_TOOLS_GEMMA4 ? GM_SCHEMA_GEMMA4 : tf == GM_TOOLS_FUNCTIONGEMMA ? GM_SCHEMA_FUNCTIONGEMMA : GM_SCHEMA_PYTHON;
        o.rule_prefix = prefix;
        const char *schema = tools[i].parameters ? tools[i].parameters : "{\"type\":\"object\",\"properties\":{}}";
        char *rules = NULL;
        if ((st = gm_json_schema_to_gbnf(schema, strlen(schema), &o, &rules, err))) {
            gm_fail_prefix(err, "tools: function '%.64s' parameters: ", tools[i].name);
            break;
        }
        sb_puts(&g, rules);
        free(rules);
        sb_puts(&alt, used++ ? " | " : "");
        char head[200];
        snprintf(head, sizeof head, tf == GM_TOOLS_GEMMA3 ? "\"%s(\" %sroot \")\"" : "\"%s{\" %sroot \"}\"", tools[i].name, prefix);
        sb_puts(&alt, head);
    }
    if (!st && !used) st = gm_fail(err, GM_ERR_ARG, "tools: no function named '%.64s'", only ? only : "");
    if (!st) {
        char more[64] = "";
        if (parallel)
            snprintf(more, sizeof more, tf == GM_TOOLS_GEMMA3 ? " (\", \" tool-call){0,%d}" : " tool-call{0,%d}",
                     MAX_PARALLEL_CALLS - 1);
        sb_puts(&g, "tool-call ::= ");
        if (tf == GM_TOOLS_GEMMA3) {
            sb_put(&g, alt.p, alt.n);
            sb_puts(&g, "\nroot ::= \"[\" tool-call");
            sb_puts(&g, more);
            sb_puts(&g, " \"]\"\n");
        } else {
            const tool_markers *mk = tool_markers_of(tf);
            sb_puts(&g, mk->call_open);
            sb_puts(&g, " \"call:\" (");
            sb_put(&g, alt.p, alt.n);
            sb_puts(&g, ") ");
            sb_puts(&g, mk->call_close);
            sb_puts(&g, "\nroot ::= tool-call");
            sb_puts(&g, more);
            sb_puts(&g, "\n");
        }
        if (g.oom) st = gm_fail(err, GM_ERR_NOMEM, "tools: out of memory");
    }
    if (!st) st = gm_grammar_from_gbnf(g.p, g.n, out, err);
    free(g.p);
    free(alt.p);
    return st;
}
