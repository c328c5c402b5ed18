/* grammar/grammar.h — grammar-constrained decoding: GBNF grammars and JSON schemas compiled to a
 * matcher that says, token by token, what the model may emit next.
 *
 * Four objects, from the most shared to the most private:
 *
 *   gm_grammar      a compiled grammar (GBNF text, or a JSON schema translated to GBNF). Immutable:
 *                   any number of threads may use it.
 *   gm_gvocab       a model vocabulary as the matcher sees it: each token's bytes (a trie over them)
 *                   and its kind — ordinary text, never allowed (control tokens: a grammar is about
 *                   text), or end of generation (allowed exactly where the grammar can end).
 *                   Immutable; build one per tokenizer and share it.
 *   gm_grammar_ctx  a grammar bound to a vocabulary, with everything learnt lazily while matching:
 *                   the interned matcher states, their byte transitions (a lazy DFA), the per-position
 *                   token classes and cached masks. Mutable: one thread at a time (like a gm_engine);
 *                   every matcher of one request (n > 1, forks, drafts) shares one ctx, and requests
 *                   with the same grammar may share it too.
 *   gm_matcher      one sequence's position: the history of matcher states, one per accepted token.
 *                   A state is an integer naming an interned set of parse stacks (hash-consed, so
 *                   stacks are immutable and shared: the persistent representation), which makes
 *                   clone a copy of that array and rollback a truncation — what forks, n > 1 and
 *                   speculative decoding need.
 *
 * A sampler holds one gm_matcher per sequence: gm_matcher_fill_mask before sampling (or
 * gm_matcher_check_token on the sampled token first and the mask only when it is refused, as
 * llama.cpp does), then gm_matcher_accept_token. Speculative decoding checks drafted tokens with
 * accept_token one by one, and gm_matcher_rollback undoes the ones the target model refused.
 *
 * Matching is on bytes: a token may span several grammar elements and end inside a UTF-8
 * character (the partial character is part of the state); invalid UTF-8 is never accepted.
 * Nesting deeper than 512 calls is refused. See docs/structured.md for the algorithm and costs. */
#ifndef GM_GRAMMAR_H
#define GM_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemma.h"

typedef struct gm_grammar gm_grammar;
typedef struct gm_gvocab gm_gvocab;
typedef struct gm_grammar_ctx gm_grammar_ctx;
typedef struct gm_matcher gm_matcher;

/* ------------------------------------------------------------------ grammars */

/* Compiles GBNF text (llama.cpp's syntax; the start rule is `root`). Errors: GM_ERR_FORMAT with
 * "grammar LINE:COL: what" for bad syntax, undefined rules, left recursion, rules that can never
 * finish; GM_ERR_NOMEM for grammars over the size limits. */
gm_status gm_grammar_from_gbnf(const char *text, size_t len, gm_grammar **out, gm_error *err);

typedef struct gm_schema_options {
    /* Whitespace allowed between JSON tokens: 0 = none (compact), otherwise a newline and up to
     * this many spaces / tabs of indentation, or one space. Default (gm_schema_options_default) 20.
     * Bounded either way: a model cannot loop on blanks. */
    int max_indent;
} gm_schema_options;
gm_schema_options gm_schema_options_default(void);

/* Translates a JSON schema (text) to GBNF; *gbnf is malloc'd (free() it). A keyword it cannot
 * honour is GM_ERR_UNSUPPORTED naming the keyword and where it is (a JSON pointer); bad JSON or a
 * schema of the wrong shape is GM_ERR_FORMAT. Annotations (title, description, examples, default,
 * $schema, $id, $comment, ...) are accepted and ignored. `{"type":"json_object"}` (OpenAI's JSON
 * mode as a schema) means any JSON object. opt may be NULL (defaults). */
gm_status gm_json_schema_to_gbnf(const char *json, size_t len, const gm_schema_options *opt, char **gbnf,
                                 gm_error *err);
/* The two steps above in one. */
gm_status gm_grammar_from_json_schema(const char *json, size_t len, const gm_schema_options *opt,
                                      gm_grammar **out, gm_error *err);
/* The GBNF text the grammar was compiled from (for schemas: the translation). */
const char *gm_grammar_source(const gm_grammar *g);
void gm_grammar_free(gm_grammar *g);

/* ------------------------------------------------------------------ vocabularies */

typedef enum gm_gtoken_kind {
    GM_GTOKEN_TEXT = 0,  /* its bytes are text the grammar matches */
    GM_GTOKEN_NEVER = 1, /* never allowed (control, unused, unknown, empty tokens) */
    GM_GTOKEN_END = 2,   /* ends generation: allowed where the grammar accepts the end */
} gm_gtoken_kind;

/* n tokens: pieces[i][0 .. lens[i]) and kinds[i] (NULL: all TEXT). Empty TEXT pieces are NEVER. */
gm_status gm_gvocab_new(int32_t n, const char *const *pieces, const size_t *lens, const uint8_t *kinds,
                        gm_gvocab **out, gm_error *err);
/* From a tokenizer: gm_token_to_piece bytes; control / unknown / unused tokens and chat markers are
 * NEVER; <eos> and <end_of_turn> are END. */
gm_status gm_gvocab_from_tokenizer(const gm_tokenizer *tok, gm_gvocab **out, gm_error *err);
int32_t gm_gvocab_size(const gm_gvocab *v);
void gm_gvocab_free(gm_gvocab *v);

/* ------------------------------------------------------------------ contexts and matchers */

/* g and v must outlive the context; v may be NULL (then only the byte calls and accepts_end work). */
gm_status gm_grammar_ctx_new(const gm_grammar *g, const gm_gvocab *v, gm_grammar_ctx **out, gm_error *err);
void gm_grammar_ctx_free(gm_grammar_ctx *c);
/* Classifies the vocabulary at every grammar position now instead of on first use (a server can do
 * this while the prompt is processed). */
gm_status gm_grammar_ctx_precompute(gm_grammar_ctx *c, gm_error *err);

/* A matcher at the start of the grammar. Matchers must be freed before their context. */
gm_status gm_matcher_new(gm_grammar_ctx *c, gm_matcher **out, gm_error *err);
/* An independent copy (same position, same history). */
gm_status gm_matcher_clone(const gm_matcher *m, gm_matcher **out, gm_error *err);
void gm_matcher_free(gm_matcher *m);

/* Advances by one token if the grammar allows it (*ok = true) or leaves the state as it was
 * (*ok = false). An END token is allowed only where the grammar can end; after it nothing is. A
 * failing status (a limit reached, out of memory) leaves the state unchanged. */
gm_status gm_matcher_accept_token(gm_matcher *m, int32_t id, bool *ok, gm_error *err);
/* The same for raw bytes (one history step). */
gm_status gm_matcher_accept_bytes(gm_matcher *m, const char *s, size_t n, bool *ok, gm_error *err);
/* Whether accept_token would succeed, without changing the state. */
gm_status gm_matcher_check_token(gm_matcher *m, int32_t id, bool *ok, gm_error *err);
/* Undoes the last n accept calls (n <= gm_matcher_n_steps). */
gm_status gm_matcher_rollback(gm_matcher *m, size_t n, gm_error *err);
size_t gm_matcher_n_steps(const gm_matcher *m);
/* The grammar is complete here (an END token is allowed; more text may be too). */
bool gm_matcher_accepts_end(const gm_matcher *m);
/* Nothing but the end can follow (generation should stop), or an END token was accepted. */
bool gm_matcher_is_finished(gm_matcher *m);

/* Sets bit i of mask (mask[i / 32] >> (i % 32) & 1; (n_vocab + 31) / 32 words) for exactly the
 * tokens accept_token would take. */
gm_status gm_matcher_fill_mask(gm_matcher *m, uint32_t *mask, gm_error *err);

/* Counters for benchmarks and tests. */
typedef struct gm_grammar_stats {
    size_t n_states;      /* interned matcher states */
    size_t n_stack_nodes; /* interned stack nodes */
    size_t n_classified;  /* grammar positions whose token classes are computed */
    size_t n_masks_cached;
    size_t mem_bytes;     /* approximate memory held by the context */
} gm_grammar_stats;
void gm_grammar_ctx_stats(const gm_grammar_ctx *c, gm_grammar_stats *s);

#endif
