/* grammar/grammar.c — compiling GBNF text into a gm_grammar (parse, check, build the NFA). */
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "gemma_grammar.h"

gm_status gm_grammar_from_gbnf(const char *text, size_t len, gm_grammar **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_grammar_from_gbnf: NULL out");
    *out = NULL;
    gr_ast a;
    gm_status st = gr_parse_gbnf(text, len, &a, err);
    if (st) return st;
    gm_grammar *g = calloc(1, sizeof *g);
    if (!g || !(g->source = malloc(len + 1))) {
        free(g);
        gr_ast_free(&a);
        return gm_fail(err, GM_ERR_NOMEM, "grammar: out of memory");
    }
    memcpy(g->source, text, len);
    g->source[len] = 0;
    st = gr_compile(&a, &g->nfa, err);
    gr_ast_free(&a);
    if (st) {
        gm_grammar_free(g);
        return st;
    }
    *out = g;
    return GM_OK;
}

const char *gm_grammar_source(const gm_grammar *g) { return g ? g->source : NULL; }

void gm_grammar_free(gm_grammar *g) {
    if (!g) return;
    gr_nfa_free(&g->nfa);
    free(g->source);
    free(g);
}
