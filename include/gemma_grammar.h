/* gemma_grammar.h — libgemma: structured output (grammar/): GBNF and JSON schema, vocabularies,
 * matchers and token masks, the grammar of a tool-call reply, constrained sampling of a sequence. */
#ifndef GEMMA_GRAMMAR_H
#define GEMMA_GRAMMAR_H

#include "gemma.h"
#include "gemma_chat.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ structured output */

/* Structured output (grammar/): grammar-constrained decoding: GBNF grammars and JSON schemas compiled to a
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
typedef struct gm_grammar gm_grammar;
typedef struct gm_gvocab gm_gvocab;
typedef struct gm_grammar_ctx gm_grammar_ctx;
typedef struct gm_matcher gm_matcher;

/* ------------------------------------------------------------------ grammars */

/* Compiles GBNF text (llama.cpp's syntax; the start rule is `root`). Errors: GM_ERR_FORMAT with
 * "grammar LINE:COL: what" for bad syntax, undefined rules, left recursion, rules that can never
 * finish; GM_ERR_NOMEM for grammars over the size limits.
 *
 * Chat-format markers are written as themselves, llama.cpp's token syntax: `<|tool_call>`,
 * `<tool_call|>`, `<|"|>`, `<escape>`, `<start_function_call>`, ... (the list is gm_token_is_marker's:
 * <start_of_turn> <end_of_turn> <|turn> <turn|> <|channel> <channel|> <|think|> <|tool> <tool|>
 * <|tool_call> <tool_call|> <|tool_response> <tool_response|> <|"|> <start_function_declaration>
 * <end_function_declaration> <start_function_call> <end_function_call> <start_function_response>
 * <end_function_response> <escape>). Each is one private-use character, GM_GBNF_MARKER_FIRST + its
 * index in that list, which a vocabulary built with markers (gm_gvocab_from_tokenizer with markers) gives the
 * marker token and nothing else: the grammar then matches exactly that token, never the same
 * characters spelled with ordinary pieces. With any other vocabulary a marker matches nothing.
 * Other token elements (<[id]>, <piece>, !<...>) are GM_ERR_FORMAT naming them. */
GEMMA_API gm_status gm_grammar_from_gbnf(const char *text, size_t len, gm_grammar **out, gm_error *err);

/* The private-use block reserved for markers (U+F0000..U+F00FF; the markers use its start). */
#define GM_GBNF_MARKER_FIRST 0xF0000u
#define GM_GBNF_MARKER_LAST 0xF00FFu
/* The code point standing for marker text[0..len) (e.g. "<|tool_call>"), or 0 if it is none. */
GEMMA_API uint32_t gm_gbnf_marker_cp(const char *text, size_t len);

/* How a schema's values are written (gm_schema_options.dialect). In every dialect but JSON the schema
 * is a tool's `parameters`: its root must be an object schema, and the root rule is the call's
 * argument list WITHOUT the brackets around it, which the caller's grammar writes (Gemma 4:
 * `call:name{` ... `}`, Python: `name(` ... `)`). */
typedef enum gm_schema_dialect {
    /* JSON text. */
    GM_SCHEMA_JSON = 0,
    /* Gemma 4's tool-call arguments, as its chat template renders them: key:value,key2:value2 at
     * the root, objects {key:value} below, bare keys in the template's (sorted) order, strings
     * <|"|>raw text<|"|> (no escapes; any characters but markers), JSON numbers, true / false /
     * null, [a,b]; no whitespace anywhere. */
    GM_SCHEMA_GEMMA4 = 1,
    /* FunctionGemma's: the same with <escape> as the string delimiter. */
    GM_SCHEMA_FUNCTIONGEMMA = 2,
    /* Python call arguments (Gemma 3's [name(k=v, k2=v2)]): keyword arguments `k=v, k2=v2` at the
     * root (", " between them; names must be identifiers), JSON text with True / False / None below. */
    GM_SCHEMA_PYTHON = 3,
} gm_schema_dialect;

typedef struct gm_schema_options {
    /* Whitespace allowed between JSON tokens: 0 = none (compact), otherwise a newline and up to
     * this many spaces / tabs of indentation, or one space. Default (gm_schema_options_default) 20.
     * Bounded either way: a model cannot loop on blanks. Ignored by the Gemma dialects (none). */
    int max_indent;
    /* Default GM_SCHEMA_JSON. Keywords a dialect cannot write are GM_ERR_UNSUPPORTED naming them
     * (additionalProperties other than false in the Gemma dialects and at Python's root; a root
     * that is not an object schema). */
    gm_schema_dialect dialect;
    /* Prepended to every rule name, so the grammars of several schemas can be concatenated into one
     * GBNF text (the start rule becomes <prefix>root). Letters, digits, '-', '_'; at most 32. NULL
     * or "" (the default): today's names. */
    const char *rule_prefix;
    /* JSON dialect: string characters also exclude the marker block (GM_GBNF_MARKER_FIRST..LAST),
     * for a grammar used with a markers vocabulary. The other dialects always exclude it. Default
     * false (the text is then what it always was). */
    bool exclude_markers;
} gm_schema_options;
GEMMA_API gm_schema_options gm_schema_options_default(void);

/* Translates a JSON schema (text) to GBNF; *gbnf is malloc'd (free() it). A keyword it cannot
 * honour is GM_ERR_UNSUPPORTED naming the keyword and where it is (a JSON pointer); bad JSON or a
 * schema of the wrong shape is GM_ERR_FORMAT. Annotations (title, description, examples, default,
 * $schema, $id, $comment, ...) are accepted and ignored. `{"type":"json_object"}` (OpenAI's JSON
 * mode as a schema) means any JSON object. opt may be NULL (defaults). */
GEMMA_API gm_status gm_json_schema_to_gbnf(const char *json, size_t len, const gm_schema_options *opt, char **gbnf,
                                           gm_error *err);
/* The two steps above in one. */
GEMMA_API gm_status gm_grammar_from_json_schema(const char *json, size_t len, const gm_schema_options *opt,
                                                gm_grammar **out, gm_error *err);
/* The GBNF text the grammar was compiled from (for schemas: the translation). */
GEMMA_API const char *gm_grammar_source(const gm_grammar *g);
GEMMA_API void gm_grammar_free(gm_grammar *g);

/* ------------------------------------------------------------------ vocabularies */

typedef enum gm_gtoken_kind {
    GM_GTOKEN_TEXT = 0,  /* its bytes are text the grammar matches */
    GM_GTOKEN_NEVER = 1, /* never allowed (control, unused, unknown, empty tokens) */
    GM_GTOKEN_END = 2,   /* ends generation: allowed where the grammar accepts the end */
} gm_gtoken_kind;

/* n tokens: pieces[i][0 .. lens[i]) and kinds[i] (NULL: all TEXT). Empty TEXT pieces are NEVER. */
GEMMA_API gm_status gm_gvocab_new(int32_t n, const char *const *pieces, const size_t *lens, const uint8_t *kinds,
                                  gm_gvocab **out, gm_error *err);
typedef struct gm_gvocab_options {
    /* Each marker token the tokenizer has (the GBNF marker list above) is TEXT whose bytes are its
     * private-use character's UTF-8, so grammars can require it. Ordinary tokens that could spell a
     * marker character (containing one, or ending in a proper prefix of one: in practice the byte
     * token <0xF3>) become NEVER, so only the marker token can. */
    bool markers;
    /* More END tokens (e.g. Gemma 4's <|tool_response>, FunctionGemma's <start_function_response>,
     * where the model stops after a call); they win over markers. <eos> / <end_of_turn> stay END. */
    const int32_t *end_ids;
    size_t n_end_ids;
} gm_gvocab_options;
/* From a tokenizer: gm_token_to_piece bytes; control / unknown / unused tokens and chat markers are
 * NEVER; <eos> and <end_of_turn> are END; o (NULL: none) adds markers and END tokens. An end id out of range is
 * GM_ERR_ARG. */
GEMMA_API gm_status gm_gvocab_from_tokenizer(const gm_tokenizer *tok, const gm_gvocab_options *o, gm_gvocab **out,
                                             gm_error *err);
GEMMA_API int32_t gm_gvocab_size(const gm_gvocab *v);
GEMMA_API void gm_gvocab_free(gm_gvocab *v);

/* ------------------------------------------------------------------ contexts and matchers */

/* g and v must outlive the context; v may be NULL (then only the byte calls and accepts_end work). */
GEMMA_API gm_status gm_grammar_ctx_new(const gm_grammar *g, const gm_gvocab *v, gm_grammar_ctx **out, gm_error *err);
GEMMA_API void gm_grammar_ctx_free(gm_grammar_ctx *c);
/* Classifies the vocabulary at every grammar position now instead of on first use (a server can do
 * this while the prompt is processed). */
GEMMA_API gm_status gm_grammar_ctx_precompute(gm_grammar_ctx *c, gm_error *err);

/* A matcher at the start of the grammar. Matchers must be freed before their context. */
GEMMA_API gm_status gm_matcher_new(gm_grammar_ctx *c, gm_matcher **out, gm_error *err);
/* An independent copy (same position, same history). */
GEMMA_API gm_status gm_matcher_clone(const gm_matcher *m, gm_matcher **out, gm_error *err);
GEMMA_API void gm_matcher_free(gm_matcher *m);

/* Advances by one token if the grammar allows it (*ok = true) or leaves the state as it was
 * (*ok = false). An END token is allowed only where the grammar can end; after it nothing is. A
 * failing status (a limit reached, out of memory) leaves the state unchanged. */
GEMMA_API gm_status gm_matcher_accept_token(gm_matcher *m, int32_t id, bool *ok, gm_error *err);
/* The same for raw bytes (one history step). */
GEMMA_API gm_status gm_matcher_accept_bytes(gm_matcher *m, const char *s, size_t n, bool *ok, gm_error *err);
/* Whether accept_token would succeed, without changing the state. */
GEMMA_API gm_status gm_matcher_check_token(gm_matcher *m, int32_t id, bool *ok, gm_error *err);
/* Undoes the last n accept calls (n <= gm_matcher_n_steps). */
GEMMA_API gm_status gm_matcher_rollback(gm_matcher *m, size_t n, gm_error *err);
GEMMA_API size_t gm_matcher_n_steps(const gm_matcher *m);
/* Tokens its vocabulary has (the mask's width). */
GEMMA_API int32_t gm_matcher_vocab_size(const gm_matcher *m);
/* The grammar is complete here (an END token is allowed; more text may be too). */
GEMMA_API bool gm_matcher_accepts_end(const gm_matcher *m);
/* Nothing but the end can follow (generation should stop), or an END token was accepted. */
GEMMA_API bool gm_matcher_is_finished(gm_matcher *m);

/* Sets bit i of mask (mask[i / 32] >> (i % 32) & 1; (n_vocab + 31) / 32 words) for exactly the
 * tokens accept_token would take. */
GEMMA_API gm_status gm_matcher_fill_mask(gm_matcher *m, uint32_t *mask, gm_error *err);

/* Counters for benchmarks and tests. */
typedef struct gm_grammar_stats {
    size_t n_states;      /* interned matcher states */
    size_t n_stack_nodes; /* interned stack nodes */
    size_t n_classified;  /* grammar positions whose token classes are computed */
    size_t n_masks_cached;
    size_t mem_bytes;     /* approximate memory held by the context */
} gm_grammar_stats;
GEMMA_API void gm_grammar_ctx_stats(const gm_grammar_ctx *c, gm_grammar_stats *s);

/* Constrains s's sampling (gm_seq_sample) to m: every sampled token is one m accepts, and m advances by it.
 * m is borrowed (it must outlive its use here; NULL detaches) and follows only what gm_seq_sample appends:
 * a caller that forks, truncates or appends tokens itself moves the matcher too (gm_matcher_clone,
 * gm_matcher_rollback, gm_matcher_accept_token). Its vocabulary must be the model's tokenizer's. */
GEMMA_API gm_status gm_seq_set_grammar(gm_seq *s, gm_matcher *m, gm_error *err);

/* A grammar that admits only tool calls in the tokenizer's format: one call, or with parallel one or more;
 * only = NULL for any of tools, else that function. Each call's arguments follow its parameters schema
 * (a schema it cannot honour is GM_ERR_UNSUPPORTED naming the keyword). Match it with a vocabulary from
 * gm_gvocab_from_tokenizer_tools (markers as the grammar's delimiters). */
GEMMA_API gm_status gm_tool_grammar(const gm_tokenizer *tok, const gm_tool *tools, size_t n_tools, const char *only, bool parallel,
                                              gm_grammar **out, gm_error *err);

#ifdef __cplusplus
}
#endif

#endif /* GEMMA_GRAMMAR_H */
