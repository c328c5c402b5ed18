/* grammar/internal.h — what the grammar folder's files share: the rule syntax tree the GBNF parser
 * builds, the per-rule NFA the compiler makes of it, a growable byte buffer, and the limits that
 * keep a hostile grammar from exhausting the stack or memory. Not part of the API (grammar.h is). */
#ifndef GM_GRAMMAR_INTERNAL_H
#define GM_GRAMMAR_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "gemma_grammar.h"
#include "grammar/grammar.h"

/* ------------------------------------------------------------------ limits */
#define GR_MAX_TEXT (4u << 20)       /* bytes of grammar text */
#define GR_MAX_NEST 128              /* parenthesis depth while parsing */
#define GR_MAX_AST (1u << 20)        /* syntax-tree nodes */
#define GR_MAX_RULES 65536
#define GR_MAX_REPEAT 4096           /* m, n of x{m,n} */
#define GR_MAX_NFA (1u << 21)        /* NFA states after repetition expansion and inlining */
#define GR_INLINE_MAX 2048           /* a non-recursive rule this small (NFA states) is inlined */
#define GR_MAX_DEPTH 512             /* call-stack depth of a match: deeper paths are dropped */
#define GR_MAX_CONFIGS 8192          /* stacks alive at once in one matcher state */
#define GR_MAX_STATES (1u << 20)     /* interned matcher states per context */
#define GR_MAX_CP 0x10FFFFu

/* ------------------------------------------------------------------ byte buffer */
typedef struct gr_buf {
    char *p;
    size_t n, cap;
    bool oom; /* an append failed: the text is incomplete (checked once at the end) */
} gr_buf;
void gr_buf_put(gr_buf *b, const char *s, size_t n);
void gr_buf_puts(gr_buf *b, const char *s);
void gr_buf_printf(gr_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends code point cp as a GBNF literal character (escaped when not plain printable ASCII). */
void gr_buf_gbnf_char(gr_buf *b, uint32_t cp, bool in_class);
void gr_buf_free(gr_buf *b);
/* Grows *p (elements of size sz) to hold at least need; false when out of memory or over max. */
bool gr_grow(void **p, size_t *cap, size_t need, size_t sz, size_t max);

/* ------------------------------------------------------------------ syntax tree */
typedef enum gr_kind {
    GR_EMPTY,  /* matches "" */
    GR_CLASS,  /* one code point in a set of ranges (negation resolved at parse time) */
    GR_REF,    /* a rule */
    GR_SEQ,    /* children in order */
    GR_ALT,    /* one of the children */
    GR_REP,    /* child repeated min..max times (max < 0: unbounded) */
} gr_kind;

typedef struct gr_node {
    uint8_t kind;
    int32_t first, next; /* children: first child, next sibling (-1 = none) */
    int32_t a, b;        /* CLASS: range set; REF: rule; REP: min, max */
} gr_node;

typedef struct gr_rule {
    char *name;
    int32_t body;   /* node, -1 while only referenced */
    int line, col;  /* definition (or first reference while undefined) */
} gr_rule;

/* The parsed grammar: nodes, range sets ([lo, hi] pairs, sorted, merged) and rules. */
typedef struct gr_ast {
    gr_node *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *ranges; /* pairs */
    size_t n_ranges, cap_ranges;
    uint32_t *set_off, *set_len; /* set i = ranges pairs [off, off + len) */
    size_t n_sets, cap_sets;
    gr_rule *rules;
    size_t n_rules, cap_rules;
    int32_t root;
} gr_ast;

void gr_ast_free(gr_ast *a);
/* Parses GBNF text into a; errors name line:column. */
gm_status gr_parse_gbnf(const char *text, size_t len, gr_ast *a, gm_error *err);

/* ------------------------------------------------------------------ NFA */
enum { GR_E_CHAR, GR_E_EPS, GR_E_CALL };
typedef struct gr_edge {
    uint8_t kind;
    int32_t arg; /* CHAR: range set; CALL: rule */
    int32_t to;  /* target; CALL: the state to return to */
} gr_edge;

/* Each rule is a Thompson NFA over code points from rule_start[r] to rule_accept[r]; states are
 * numbered globally. Edges of state s: edges[edge_off[s] .. edge_off[s + 1]). */
typedef struct gr_nfa {
    gr_edge *edges;
    uint32_t *edge_off;
    int32_t *accept_of; /* state -> rule whose accept state it is, or -1 */
    uint8_t *has_char;  /* state has a CHAR edge */
    size_t n_states;
    int32_t *rule_start, *rule_accept;
    size_t n_rules;
    int32_t root;
    uint32_t *ranges, *set_off, *set_len; /* the AST's range sets, moved here */
    size_t n_sets;
} gr_nfa;

/* Checks the AST (undefined rules, missing root, left recursion, rules that never finish) and
 * builds the NFA, inlining small non-recursive rules. */
gm_status gr_compile(gr_ast *a, gr_nfa *out, gm_error *err);
void gr_nfa_free(gr_nfa *n);
bool gr_set_has(const gr_nfa *n, int32_t set, uint32_t cp);
/* Whether set contains a code point in [lo, hi]. */
bool gr_set_meets(const gr_nfa *n, int32_t set, uint32_t lo, uint32_t hi);

struct gm_grammar {
    gr_nfa nfa;
    char *source; /* the GBNF text it was compiled from (schemas: the generated text) */
};

/* ------------------------------------------------------------------ markers (markers.c) */
/* Chat-format markers are the private-use code points GR_MARKER_LO + index (GM_GBNF_MARKER_FIRST);
 * the whole block up to GR_MARKER_HI is reserved for them, so classes that must never produce a
 * marker exclude all of it. */
#define GR_MARKER_LO GM_GBNF_MARKER_FIRST
#define GR_MARKER_HI GM_GBNF_MARKER_LAST
size_t gr_n_markers(void);
const char *gr_marker_text(size_t i); /* NULL past the end */
/* The length of the longest marker that s[0..n) starts with (0: none) and its code point. */
size_t gr_marker_at(const char *s, size_t n, uint32_t *cp);

/* ------------------------------------------------------------------ JSON schema / regex */
/* How a string's characters are written: JSON-escaped (JSON, Python) or raw (Gemma 4 and
 * FunctionGemma, whose strings sit between marker tokens), and whether marker characters are
 * excluded. */
typedef struct gr_strmode {
    bool raw;
    bool no_markers;
} gr_strmode;
/* Appends a GBNF expression matching the regex's language (the string's content as the mode writes
 * it, without delimiters: the caller wraps it). Refuses what it cannot honour, naming the construct. */
gm_status gr_regex_to_gbnf(const char *re, gr_strmode mode, gr_buf *out, gm_error *err);


/* ------------------------------------------------------------------ matching context */
/* A stack node: "at (or return to) NFA state `state`, then continue with stack `parent`". Node 0
 * is the empty stack. Nodes are interned (hash-consed): equal stacks are equal ids. */
typedef struct gr_snode {
    int32_t state, parent;
    int32_t depth;
} gr_snode;

#define GR_DEAD (-1)
#define GR_UNKNOWN (-2)
#define GR_ENDED 0 /* the state after an END token: nothing more */

/* An interned matcher state: a sorted set of configurations (stack nodes whose top state has a
 * CHAR edge), a partial UTF-8 character, and whether the bottom of the stack was reached (the
 * grammar — or, in a frame-local walk, the frame — can end here). */
typedef struct gr_dstate {
    uint32_t cfg_off, n_cfg;
    uint32_t pv;           /* partial character: value of the bytes so far */
    uint8_t prem, plen;    /* continuation bytes still expected, total length (0 = none) */
    uint8_t at_bottom;
    int32_t *trans;        /* 256 successors by byte (GR_UNKNOWN until computed), lazily allocated */
    uint32_t *mask;        /* cached token mask, or NULL */
} gr_dstate;

/* Tokens of the vocabulary sorted into a class for one NFA state (mask.c). */
typedef struct gr_tclass {
    uint32_t *bits;   /* allowed whatever the stack below (a bitmask), or NULL when listed */
    int32_t *list;    /* ... or as a list of ids when few */
    size_t n_list;
    uint32_t *unsure; /* trie nodes whose subtrees leave the frame: walked from the whole state */
    size_t n_unsure;
} gr_tclass;

struct gm_grammar_ctx {
    const gm_grammar *g;
    const gm_gvocab *v;
    gr_snode *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *node_hash; /* open addressing: node id + 1 */
    size_t node_hash_cap;
    uint32_t *cfgs;      /* configuration pool */
    size_t n_cfgs, cap_cfgs;
    gr_dstate *ds;
    size_t n_ds, cap_ds;
    uint32_t *ds_hash;
    size_t ds_hash_cap;
    int32_t init;        /* the start state */
    int32_t *frame_start; /* NFA state -> state of a walk from it over an empty stack (GR_UNKNOWN) */
    gr_tclass **cls;      /* NFA state -> its token classes, lazily */
    size_t n_classified, n_masks;
    /* closure scratch */
    uint64_t *seen;       /* visited (state, parent) pairs, stamped */
    uint32_t *seen_stamp;
    size_t seen_cap;
    uint32_t stamp;
    size_t n_seen;
    int64_t *work;
    size_t n_work, cap_work;
    uint32_t *out;
    size_t n_out, cap_out;
    gm_status fail;       /* a limit was hit inside a transition: the message is in fail_msg */
    char fail_msg[200];
};

/* The successor of state x on byte b: GR_DEAD, a state id, or GR_UNKNOWN only on failure (c->fail). */
int32_t gr_step_slow(gm_grammar_ctx *c, int32_t x, uint8_t b);
static inline int32_t gr_step(gm_grammar_ctx *c, int32_t x, uint8_t b) {
    const int32_t *t = c->ds[x].trans;
    int32_t y = t ? t[b] : GR_UNKNOWN;
    return y != GR_UNKNOWN ? y : gr_step_slow(c, x, b);
}
static inline bool gr_live(const gm_grammar_ctx *c, int32_t x) {
    return x > 0 && (c->ds[x].n_cfg || c->ds[x].at_bottom);
}
/* The state of a walk that starts at NFA state s over an empty stack (mask.c's frame-local walks). */
int32_t gr_frame_start(gm_grammar_ctx *c, int32_t s);
gm_status gr_ctx_error(gm_grammar_ctx *c, gm_error *err);

/* mask.c */
gm_status gr_fill_mask(gm_grammar_ctx *c, int32_t x, uint32_t *mask, gm_error *err);
gm_status gr_classify(gm_grammar_ctx *c, int32_t nfa_state, gm_error *err);
void gr_tclass_free(gr_tclass *t);
/* Walks token id's bytes from x; the resulting state (GR_DEAD when refused). */
int32_t gr_walk_token(gm_grammar_ctx *c, int32_t x, int32_t id);
bool gr_vocab_kind(const gm_gvocab *v, int32_t id, uint8_t *kind);

#endif
