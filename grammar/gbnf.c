/* grammar/gbnf.c — the GBNF parser: llama.cpp's grammar syntax (grammars/README.md) into a syntax
 * tree (grammar/internal.h). Rules `name ::= alternatives`; a rule ends at a newline except after
 * `::=`, after `|` and inside parentheses (llama.cpp's rule, so its grammar files parse alike).
 * Elements: "literals", [classes] with ranges and ^negation, rule names, (groups), `.` (any code
 * point); postfix * + ? {m} {m,} {m,n}; escapes \x \u \U \t \r \n \\ \" \[ \]; # comments.
 * Token elements: a chat-format marker written as itself (<|tool_call>, <|"|>, <escape>: the table
 * in markers.c) is the one private-use character that stands for that marker token (markers.c
 * says why); other tokens (<[id]>, <tok>, !<tok>) are refused by name: they would tie a grammar to
 * one vocabulary's ids or pieces.
 * Every error is a GM_ERR_FORMAT naming line:column. Recursion is bounded by GR_MAX_NEST, sizes by
 * GR_MAX_* (internal.h): a hostile grammar gets an error, not a blown stack or memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

typedef struct ps {
    const char *s;
    size_t n, i;
    int line;
    size_t line_start;
    gr_ast *a;
    gm_error *err;
    int depth;
    int32_t *stack; /* children of the sequences / alternations being built (nested groups stack) */
    size_t n_stack, cap_stack;
    int32_t *hash; /* rule-name table: open addressing, rule id + 1, 0 = empty */
    size_t hash_cap;
} ps;

static gm_status perr(ps *p, const char *fmt, const char *arg) {
    char msg[240];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    return gm_fail(p->err, GM_ERR_FORMAT, "grammar %d:%zu: %s", p->line, p->i - p->line_start + 1, msg);
}

static gm_status nomem(ps *p) {
    return gm_fail(p->err, GM_ERR_NOMEM, "grammar %d:%zu: grammar too large", p->line, p->i - p->line_start + 1);
}

static int peek(const ps *p, size_t k) { return p->i + k < p->n ? (unsigned char)p->s[p->i + k] : -1; }

static bool is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when newline_ok (they end a rule otherwise). */
static void skip_space(ps *p, bool newline_ok) {
    while (p->i < p->n) {
        int c = peek(p, 0);
        if (c == ' ' || c == '\t') {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && peek(p, 0) != '\n' && peek(p, 0) != '\r') p->i++;
        } else if (newline_ok && (c == '\n' || c == '\r')) {
            if (c == '\n') {
                p->line++;
                p->line_start = p->i + 1;
            }
            p->i++;
        } else {
            break;
        }
    }
}

/* ------------------------------------------------------------------ nodes and sets */
static int32_t new_node(ps *p, gr_kind kind, int32_t a, int32_t b) {
    gr_ast *t = p->a;
    if (!gr_grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes + 1, sizeof(gr_node), GR_MAX_AST)) return -1;
    t->nodes[t->n_nodes] = (gr_node){.kind = (uint8_t)kind, .first = -1, .next = -1, .a = a, .b = b};
    return (int32_t)t->n_nodes++;
}

static bool push(ps *p, int32_t v) {
    if (!gr_grow((void **)&p->stack, &p->cap_stack, p->n_stack + 1, sizeof(int32_t), GR_MAX_AST)) return false;
    p->stack[p->n_stack++] = v;
    return true;
}

/* Pops the children pushed since base into one node of kind (or the lone child itself). */
static int32_t collect(ps *p, size_t base, gr_kind kind) {
    size_t k = p->n_stack - base;
    if (k == 1) return p->stack[--p->n_stack];
    int32_t node = new_node(p, k == 0 ? GR_EMPTY : kind, 0, 0);
    if (node < 0) return -1;
    for (size_t j = p->n_stack; j-- > base;) {
        p->a->nodes[p->stack[j]].next = p->a->nodes[node].first;
        p->a->nodes[node].first = p->stack[j];
    }
    p->n_stack = base;
    return node;
}

static int cmp_pair(const void *x, const void *y) {
    const uint32_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0;
}

/* Adds the ranges in r[0 .. 2k) as a new set: sorted, merged, complemented when negated. */
static int32_t add_set(gr_ast *t, uint32_t *r, size_t k, bool negate) {
    if (k > 1) qsort(r, k, 2 * sizeof(uint32_t), cmp_pair); /* r is NULL for [] and [^] */
    size_t m = 0;
    for (size_t j = 0; j < k; j++) {
        if (m && r[2 * j] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * j + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * j + 1];
        } else {
            r[2 * m] = r[2 * j];
            r[2 * m + 1] = r[2 * j + 1];
            m++;
        }
    }
    size_t need = t->n_ranges + 2 * (m + 1);
    if (!gr_grow((void **)&t->ranges, &t->cap_ranges, need, sizeof(uint32_t), (size_t)GR_MAX_AST * 4)) return -1;
    if (!gr_grow((void **)&t->set_off, &t->cap_sets, t->n_sets + 1, sizeof(uint32_t), GR_MAX_AST)) return -1;
    size_t cap = t->cap_sets;
    uint32_t *lens = realloc(t->set_len, cap * sizeof(uint32_t));
    if (!lens) return -1;
    t->set_len = lens;
    uint32_t *out = t->ranges + t->n_ranges;
    size_t o = 0;
    if (!negate) {
        if (m) memcpy(out, r, 2 * m * sizeof(uint32_t));
        o = m;
    } else {
        uint32_t lo = 0;
        for (size_t j = 0; j < m; j++) {
            if (r[2 * j] > lo) { out[2 * o] = lo; out[2 * o + 1] = r[2 * j] - 1; o++; }
            lo = r[2 * j + 1] + 1;
        }
        if (lo <= GR_MAX_CP) { out[2 * o] = lo; out[2 * o + 1] = GR_MAX_CP; o++; }
    }
    if (o == 0) return -2;
    t->set_off[t->n_sets] = (uint32_t)(t->n_ranges / 2);
    t->set_len[t->n_sets] = (uint32_t)o;
    t->n_ranges += 2 * o;
    return (int32_t)t->n_sets++;
}

static int32_t char_node(ps *p, uint32_t lo, uint32_t hi) {
    uint32_t r[2] = {lo, hi};
    int32_t set = add_set(p->a, r, 1, false);
    return set < 0 ? -1 : new_node(p, GR_CLASS, set, 0);
}

/* At '<' or '!': a marker becomes its character; anything else is an error quoting the token. */
static gm_status parse_token(ps *p, int32_t *out) {
    uint32_t cp = 0;
    size_t len = peek(p, 0) == '<' ? gr_marker_at(p->s + p->i, p->n - p->i, &cp) : 0;
    if (len) {
        p->i += len;
        return (*out = char_node(p, cp, cp)) < 0 ? nomem(p) : GM_OK;
    }
    size_t k = 0;
    while (k < 60 && peek(p, k) >= 0 && peek(p, k) != '\n' && peek(p, k) != '\r' && peek(p, k) != '>') k++;
    char tok[64];
    snprintf(tok, sizeof tok, "%.*s%s", (int)k, p->s + p->i, peek(p, k) == '>' ? ">" : "");
    return perr(p, "token references (%s) are not supported: only the chat markers such as <|tool_call> are", tok);
}

/* ------------------------------------------------------------------ rule names */
static uint64_t name_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t j = 0; j < n; j++) h = (h ^ (unsigned char)s[j]) * 1099511628211ull;
    return h;
}

static bool rehash(ps *p) {
    size_t cap = p->hash_cap ? p->hash_cap * 2 : 64;
    int32_t *h = calloc(cap, sizeof(int32_t));
    if (!h) return false;
    for (size_t r = 0; r < p->a->n_rules; r++) {
        const char *nm = p->a->rules[r].name;
        size_t j = name_hash(nm, strlen(nm)) & (cap - 1);
        while (h[j]) j = (j + 1) & (cap - 1);
        h[j] = (int32_t)r + 1;
    }
    free(p->hash);
    p->hash = h;
    p->hash_cap = cap;
    return true;
}

/* The rule named s[0..n), created (undefined, remembering this position) when new; -1 on OOM. */
static int32_t rule_id(ps *p, const char *s, size_t n, size_t at) {
    gr_ast *t = p->a;
    if (t->n_rules * 2 >= p->hash_cap && !rehash(p)) return -1;
    size_t j = name_hash(s, n) & (p->hash_cap - 1);
    for (; p->hash[j]; j = (j + 1) & (p->hash_cap - 1)) {
        const char *nm = t->rules[p->hash[j] - 1].name;
        if (strlen(nm) == n && memcmp(nm, s, n) == 0) return p->hash[j] - 1;
    }
    if (!gr_grow((void **)&t->rules, &t->cap_rules, t->n_rules + 1, sizeof(gr_rule), GR_MAX_RULES)) return -1;
    char *nm = malloc(n + 1);
    if (!nm) return -1;
    memcpy(nm, s, n);
    nm[n] = 0;
    t->rules[t->n_rules] = (gr_rule){.name = nm, .body = -1, .line = p->line, .col = (int)(at - p->line_start + 1)};
    p->hash[j] = (int32_t)t->n_rules + 1;
    return (int32_t)t->n_rules++;
}

/* ------------------------------------------------------------------ characters */
static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One UTF-8 code point of the grammar text. */
static gm_status utf8_char(ps *p, uint32_t *cp) {
    int c = peek(p, 0);
    int len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (!len) return perr(p, "invalid UTF-8", NULL);
    uint32_t v = len == 1 ? (uint32_t)c : (uint32_t)c & (0x7Fu >> len);
    for (int k = 1; k < len; k++) {
        int d = peek(p, (size_t)k);
        if (d < 0 || (d & 0xC0) != 0x80) return perr(p, "invalid UTF-8", NULL);
        v = (v << 6) | ((uint32_t)d & 0x3F);
    }
    if (v < min_of[len] || v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return perr(p, "invalid UTF-8", NULL);
    p->i += (size_t)len;
    *cp = v;
    return GM_OK;
}

/* A character of a literal or class: an escape or one UTF-8 code point. */
static gm_status parse_char(ps *p, uint32_t *cp) {
    if (peek(p, 0) != '\\') return utf8_char(p, cp);
    int e = peek(p, 1);
    int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = hexval(peek(p, 2 + (size_t)k));
            if (h < 0) return perr(p, "expecting %s hex digits after the escape", digits == 2 ? "2" : digits == 4 ? "4" : "8");
            v = v * 16 + (uint32_t)h;
        }
        if (v > GR_MAX_CP) return perr(p, "code point beyond U+10FFFF", NULL);
        p->i += 2 + (size_t)digits;
        *cp = v;
        return GM_OK;
    }
    static const char from[] = "trn\\\"[]", to[] = "\t\r\n\\\"[]";
    const char *f = e > 0 ? strchr(from, e) : NULL;
    if (!f || !*f) return perr(p, "unknown escape", NULL);
    *cp = (unsigned char)to[f - from];
    p->i += 2;
    return GM_OK;
}

static gm_status parse_literal(ps *p, int32_t *out) {
    size_t base = p->n_stack;
    p->i++; /* the opening quote */
    while (peek(p, 0) != '"') {
        if (peek(p, 0) < 0 || peek(p, 0) == '\n' || peek(p, 0) == '\r') return perr(p, "unterminated string literal", NULL);
        uint32_t cp;
        gm_status st = parse_char(p, &cp);
        if (st) return st;
        int32_t nd = char_node(p, cp, cp);
        if (nd < 0 || !push(p, nd)) return nomem(p);
    }
    p->i++;
    *out = collect(p, base, GR_SEQ);
    return *out < 0 ? nomem(p) : GM_OK;
}

static gm_status parse_class(ps *p, int32_t *out) {
    p->i++; /* [ */
    bool negate = peek(p, 0) == '^';
    if (negate) p->i++;
    uint32_t *r = NULL;
    size_t k = 0, cap = 0;
    gm_status st = GM_OK;
    while (!st && peek(p, 0) != ']') {
        uint32_t lo, hi;
        if (peek(p, 0) < 0 || peek(p, 0) == '\n') { st = perr(p, "unterminated character class", NULL); break; }
        if ((st = parse_char(p, &lo))) break;
        hi = lo;
        if (peek(p, 0) == '-' && peek(p, 1) != ']' && peek(p, 1) >= 0) {
            p->i++;
            if ((st = parse_char(p, &hi))) break;
            if (hi < lo) { st = perr(p, "character range out of order", NULL); break; }
        }
        if (!gr_grow((void **)&r, &cap, 2 * k + 2, sizeof(uint32_t), (size_t)GR_MAX_AST * 2)) { st = nomem(p); break; }
        r[2 * k] = lo;
        r[2 * k + 1] = hi;
        k++;
    }
    if (!st) {
        int32_t set = add_set(p->a, r, k, negate);
        if (set == -2) st = perr(p, "empty character class (it can never match)", NULL);
        else if (set < 0) st = nomem(p);
        else if ((*out = new_node(p, GR_CLASS, set, 0)) < 0) st = nomem(p);
        p->i++; /* ] */
    }
    free(r);
    return st;
}

/* ------------------------------------------------------------------ structure */
static gm_status parse_alternates(ps *p, bool nested, int32_t *out);

static gm_status parse_int(ps *p, int *v) {
    if (peek(p, 0) < '0' || peek(p, 0) > '9') return perr(p, "expecting an integer", NULL);
    long x = 0;
    while (peek(p, 0) >= '0' && peek(p, 0) <= '9') {
        x = x * 10 + (peek(p, 0) - '0');
        if (x > GR_MAX_REPEAT) return perr(p, "repetition count too large (the limit is 4096)", NULL);
        p->i++;
    }
    *v = (int)x;
    return GM_OK;
}

/* {m} {m,} {m,n}: p at '{'. */
static gm_status parse_braces(ps *p, int *mn, int *mx) {
    p->i++;
    skip_space(p, true);
    gm_status st = parse_int(p, mn);
    if (st) return st;
    skip_space(p, true);
    *mx = *mn;
    if (peek(p, 0) == ',') {
        p->i++;
        skip_space(p, true);
        *mx = -1;
        if (peek(p, 0) != '}' && (st = parse_int(p, mx))) return st;
        skip_space(p, true);
        if (*mx >= 0 && *mx < *mn) return perr(p, "repetition {m,n} with n < m", NULL);
    }
    if (peek(p, 0) != '}') return perr(p, "expecting '}'", NULL);
    p->i++;
    return GM_OK;
}

static gm_status parse_postfix(ps *p, int32_t *node) {
    int c = peek(p, 0), mn, mx;
    if (c == '*') { mn = 0; mx = -1; p->i++; }
    else if (c == '+') { mn = 1; mx = -1; p->i++; }
    else if (c == '?') { mn = 0; mx = 1; p->i++; }
    else {
        gm_status st = parse_braces(p, &mn, &mx);
        if (st) return st;
    }
    int32_t r = new_node(p, GR_REP, mn, mx);
    if (r < 0) return nomem(p);
    p->a->nodes[r].first = *node;
    *node = r;
    return GM_OK;
}

static gm_status parse_element(ps *p, int32_t *out) {
    int c = peek(p, 0);
    if (c == '"') return parse_literal(p, out);
    if (c == '[') return parse_class(p, out);
    if (c == '.') {
        p->i++;
        return (*out = char_node(p, 0, GR_MAX_CP)) < 0 ? nomem(p) : GM_OK;
    }
    if (c == '<' || c == '!') return parse_token(p, out);
    if (c == '(') {
        if (++p->depth > GR_MAX_NEST) return perr(p, "groups nested too deep (the limit is 128)", NULL);
        p->i++;
        skip_space(p, true);
        gm_status st = parse_alternates(p, true, out);
        if (st) return st;
        if (peek(p, 0) != ')') return perr(p, "expecting ')'", NULL);
        p->i++;
        p->depth--;
        return GM_OK;
    }
    if (is_word(c)) {
        size_t s = p->i;
        while (is_word(peek(p, 0))) p->i++;
        int32_t r = rule_id(p, p->s + s, p->i - s, s);
        if (r < 0) return nomem(p);
        return (*out = new_node(p, GR_REF, r, 0)) < 0 ? nomem(p) : GM_OK;
    }
    return perr(p, "unexpected character", NULL);
}

static bool ends_sequence(int c, bool nested) {
    return c < 0 || c == '|' || c == ')' || (!nested && (c == '\n' || c == '\r'));
}

static gm_status parse_sequence(ps *p, bool nested, int32_t *out) {
    size_t base = p->n_stack;
    int n_post = 0;
    while (!ends_sequence(peek(p, 0), nested)) {
        int c = peek(p, 0);
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (p->n_stack == base) return perr(p, "'%s' without an element before it", (char[]){(char)c, 0});
            if (++n_post > 16) return perr(p, "too many repetition operators on one element", NULL);
            gm_status st = parse_postfix(p, &p->stack[p->n_stack - 1]);
            if (st) return st;
        } else {
            int32_t e;
            gm_status st = parse_element(p, &e);
            if (st) return st;
            n_post = 0;
            if (!push(p, e)) return nomem(p);
        }
        skip_space(p, nested);
    }
    *out = collect(p, base, GR_SEQ);
    return *out < 0 ? nomem(p) : GM_OK;
}

static gm_status parse_alternates(ps *p, bool nested, int32_t *out) {
    size_t base = p->n_stack;
    for (;;) {
        int32_t seq = -1;
        gm_status st = parse_sequence(p, nested, &seq);
        if (st) return st;
        if (!push(p, seq)) return nomem(p);
        if (peek(p, 0) != '|') break;
        p->i++;
        skip_space(p, true);
    }
    *out = collect(p, base, GR_ALT);
    return *out < 0 ? nomem(p) : GM_OK;
}

static gm_status parse_rule(ps *p) {
    size_t s = p->i;
    int line = p->line, col = (int)(p->i - p->line_start + 1);
    if (!is_word(peek(p, 0))) return perr(p, "expecting a rule name", NULL);
    while (is_word(peek(p, 0))) p->i++;
    int32_t r = rule_id(p, p->s + s, p->i - s, s);
    if (r < 0) return nomem(p);
    gr_rule *rule = &p->a->rules[r];
    if (rule->body >= 0) {
        char what[180];
        snprintf(what, sizeof what, "rule '%.100s' defined twice (first at line %d)", rule->name, rule->line);
        return perr(p, "%s", what);
    }
    skip_space(p, false);
    if (p->i + 3 > p->n || memcmp(p->s + p->i, "::=", 3) != 0) return perr(p, "expecting '::='", NULL);
    p->i += 3;
    skip_space(p, true);
    int32_t body;
    gm_status st = parse_alternates(p, false, &body);
    if (st) return st;
    rule = &p->a->rules[r];
    rule->body = body;
    rule->line = line;
    rule->col = col;
    int c = peek(p, 0);
    if (c >= 0 && c != '\n' && c != '\r') return perr(p, c == ')' ? "unbalanced ')'" : "expecting a newline or the end", NULL);
    return GM_OK;
}

gm_status gr_parse_gbnf(const char *text, size_t len, gr_ast *a, gm_error *err) {
    memset(a, 0, sizeof *a);
    a->root = -1;
    if (!text) return gm_fail(err, GM_ERR_ARG, "grammar: NULL text");
    if (len > GR_MAX_TEXT) return gm_fail(err, GM_ERR_NOMEM, "grammar: %zu bytes (the limit is %u)", len, GR_MAX_TEXT);
    ps p = {.s = text, .n = len, .line = 1, .a = a, .err = err};
    gm_status st = GM_OK;
    skip_space(&p, true);
    while (!st && p.i < p.n) {
        st = parse_rule(&p);
        skip_space(&p, true);
    }
    for (size_t r = 0; !st && r < a->n_rules; r++) {
        if (a->rules[r].body < 0)
            st = gm_fail(err, GM_ERR_FORMAT, "grammar %d:%d: undefined rule '%.100s'", a->rules[r].line,
                         a->rules[r].col, a->rules[r].name);
        else if (strcmp(a->rules[r].name, "root") == 0)
            a->root = (int32_t)r;
    }
    if (!st && a->root < 0) st = gm_fail(err, GM_ERR_FORMAT, "grammar: no 'root' rule");
    free(p.stack);
    free(p.hash);
    if (st) gr_ast_free(a);
    return st;
}

void gr_ast_free(gr_ast *a) {
    for (size_t r = 0; r < a->n_rules; r++) free(a->rules[r].name);
    free(a->rules);
    free(a->nodes);
    free(a->ranges);
    free(a->set_off);
    free(a->set_len);
    memset(a, 0, sizeof *a);
    a->root = -1;
}
