/* grammar/regex.c — the common subset of JSON Schema `pattern` regexes (ECMA-262 syntax) to GBNF:
 * literals, escapes (\d \w \s and their negations, \n \t \r \f \v \xXX \uXXXX, escaped
 * punctuation), classes with ranges and negation, `.`, groups ( ) and (?: ), alternation,
 * quantifiers ? * + {m} {m,} {m,n} (lazy forms too: same language), ^ at the start and $ at the
 * end. Refused by name: backreferences, lookaround, named groups, \b, anchors elsewhere.
 *
 * The regex describes the decoded string; the grammar matches the JSON text, so every character a
 * class or literal may produce is emitted in its JSON form: plain when it needs no escape, `\"`,
 * `\\`, `\n` ... or `\u00XX` otherwise. A pattern without ^ (or $) matches anywhere in the string,
 * as JSON Schema says: any characters may come before (after).
 *
 * Other string syntaxes (schema dialects, grammar/schema.c) pick a gr_strmode: raw strings (Gemma 4,
 * FunctionGemma: delimited by marker tokens) emit every character as itself, and no_markers takes
 * the marker code points out of every class and `.` so a string can never contain (or end at) one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

#define RX_MAX_NEST 64
#define RX_MAX_RANGES 256

typedef struct rx {
    const char *s;
    size_t n, i;
    gr_buf *out;
    gm_error *err;
    int depth;
    gr_strmode mode;
} rx;

typedef struct cset {
    uint32_t r[2 * RX_MAX_RANGES];
    size_t n;
    bool neg;
} cset;

static gm_status rx_err(rx *p, const char *what) {
    return gm_fail(p->err, GM_ERR_UNSUPPORTED, "pattern '%.80s': %s (at offset %zu)", p->s, what, p->i);
}

static int rpeek(const rx *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

static bool add_range(cset *c, uint32_t lo, uint32_t hi) {
    if (c->n >= RX_MAX_RANGES) return false;
    c->r[2 * c->n] = lo;
    c->r[2 * c->n + 1] = hi;
    c->n++;
    return true;
}

static int cmp_r(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Sorted, merged, negation applied: plain positive ranges. */
static void normalise(cset *c) {
    qsort(c->r, c->n, 2 * sizeof(uint32_t), cmp_r);
    size_t m = 0;
    for (size_t k = 0; k < c->n; k++) {
        if (m && c->r[2 * k] <= c->r[2 * m - 1] + 1) {
            if (c->r[2 * k + 1] > c->r[2 * m - 1]) c->r[2 * m - 1] = c->r[2 * k + 1];
        } else {
            c->r[2 * m] = c->r[2 * k];
            c->r[2 * m + 1] = c->r[2 * k + 1];
            m++;
        }
    }
    c->n = m;
    if (!c->neg) return;
    cset o = {.n = 0};
    uint32_t lo = 0;
    for (size_t k = 0; k < m; k++) {
        if (c->r[2 * k] > lo) add_range(&o, lo, c->r[2 * k] - 1);
        lo = c->r[2 * k + 1] + 1;
    }
    if (lo <= GR_MAX_CP) add_range(&o, lo, GR_MAX_CP);
    *c = o;
}

static bool has(const cset *c, uint32_t cp) {
    for (size_t k = 0; k < c->n; k++) if (c->r[2 * k] <= cp && cp <= c->r[2 * k + 1]) return true;
    return false;
}

/* Raw strings: the set's characters as themselves, one class. */
static void emit_raw_set(gr_buf *b, const cset *c) {
    gr_buf_puts(b, "[");
    for (size_t k = 0; k < c->n; k++) {
        gr_buf_gbnf_char(b, c->r[2 * k], true);
        if (c->r[2 * k + 1] > c->r[2 * k]) { gr_buf_puts(b, "-"); gr_buf_gbnf_char(b, c->r[2 * k + 1], true); }
    }
    gr_buf_puts(b, "]");
}

/* c without the marker block (c normalised: sorted, disjoint). */
static void drop_markers(cset *c) {
    cset o = {.n = 0};
    for (size_t k = 0; k < c->n; k++) {
        uint32_t lo = c->r[2 * k], hi = c->r[2 * k + 1];
        if (hi < GR_MARKER_LO || lo > GR_MARKER_HI) { add_range(&o, lo, hi); continue; }
        if (lo < GR_MARKER_LO) add_range(&o, lo, GR_MARKER_LO - 1);
        if (hi > GR_MARKER_HI) add_range(&o, GR_MARKER_HI + 1, hi);
    }
    *c = o;
}

static void emit_set(gr_buf *b, const cset *c);

/* A normalised set in the mode's string syntax; a set left empty by the markers is refused. */
static gm_status emit(rx *p, cset *c) {
    if (p->mode.no_markers) drop_markers(c);
    if (!c->n) return rx_err(p, "a class or character that only matches marker characters (U+F0000..U+F00FF)");
    if (p->mode.raw) emit_raw_set(p->out, c);
    else emit_set(p->out, c);
    return GM_OK;
}

/* The JSON text of a set: the characters that need no escape as one class, then each escaped one. */
static void emit_set(gr_buf *b, const cset *c) {
    gr_buf_puts(b, "(");
    bool any = false;
    gr_buf cls = {0};
    for (size_t k = 0; k < c->n; k++) {
        uint32_t lo = c->r[2 * k], hi = c->r[2 * k + 1];
        if (lo < 0x20) lo = 0x20;
        for (uint32_t a = lo; a <= hi;) { /* split around '"' and '\\' */
            uint32_t e = hi;
            if (a <= '"' && '"' <= e) e = a == '"' ? '"' : '"' - 1;
            if (a <= '\\' && '\\' <= e) e = a == '\\' ? '\\' : '\\' - 1;
            if (a != '"' && a != '\\') {
                gr_buf_gbnf_char(&cls, a, true);
                if (e > a) { gr_buf_puts(&cls, "-"); gr_buf_gbnf_char(&cls, e, true); }
            }
            if (e >= hi) break;
            a = e + 1;
        }
    }
    if (cls.n) { gr_buf_printf(b, "[%s]", cls.p); any = true; }
    gr_buf_free(&cls);
    static const char *const short_esc[] = {['\b'] = "b", ['\f'] = "f", ['\n'] = "n", ['\r'] = "r", ['\t'] = "t"};
    for (uint32_t cp = 0; cp < 0x20; cp++) {
        if (!has(c, cp)) continue;
        if (any) gr_buf_puts(b, " | ");
        if (cp < sizeof short_esc / sizeof short_esc[0] && short_esc[cp]) gr_buf_printf(b, "\"\\\\%s\"", short_esc[cp]);
        else gr_buf_printf(b, "\"\\\\u00%02X\"", cp);
        any = true;
    }
    if (has(c, '"')) { gr_buf_puts(b, any ? " | \"\\\\\\\"\"" : "\"\\\\\\\"\""); any = true; }
    if (has(c, '\\')) { gr_buf_puts(b, any ? " | \"\\\\\\\\\"" : "\"\\\\\\\\\""); any = true; }
    if (!any) gr_buf_puts(b, "[^\\x00-\\U0010FFFF]"); /* cannot happen: empty sets are refused */
    gr_buf_puts(b, ")");
}

static int hexv(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static const uint32_t SPACE[] = {0x09, 0x0D, 0x20, 0x20, 0xA0, 0xA0, 0x1680, 0x1680, 0x2000, 0x200A,
                                 0x2028, 0x2029, 0x202F, 0x202F, 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
static const uint32_t DIGIT[] = {'0', '9'};
static const uint32_t WORD[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};

static bool add_ranges(cset *c, const uint32_t *r, size_t n) {
    for (size_t k = 0; k < n; k += 2) if (!add_range(c, r[k], r[k + 1])) return false;
    return true;
}

/* The shorthand \d \w \s (or negated) into c, which must be empty for the negated ones. */
static bool shorthand(int e, cset *c, bool in_class, bool *negated) {
    const uint32_t *r = NULL;
    size_t n = 0;
    switch (e | 0x20) {
    case 'd': r = DIGIT; n = 2; break;
    case 'w': r = WORD; n = 8; break;
    case 's': r = SPACE; n = sizeof SPACE / sizeof SPACE[0]; break;
    default: return false;
    }
    *negated = e >= 'A' && e <= 'Z';
    (void)in_class;
    return add_ranges(c, r, n);
}

/* One escaped character after '\\' (not a shorthand): its code point, or -1 when refused. */
static int64_t escape_char(rx *p, gm_status *st) {
    int e = rpeek(p);
    p->i++;
    switch (e) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'x': case 'u': {
        int k = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int j = 0; j < k; j++) {
            int h = hexv(rpeek(p));
            if (h < 0) { *st = rx_err(p, "bad \\x or \\u escape"); return -1; }
            v = v * 16 + (uint32_t)h;
            p->i++;
        }
        if (v >= 0xD800 && v <= 0xDFFF) { *st = rx_err(p, "surrogate escapes are not supported"); return -1; }
        return v;
    }
    default:
        if (e > 0 && e < 0x80 && !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')))
            return e; /* escaped punctuation */
        *st = rx_err(p, e == 'b' || e == 'B' ? "word boundaries (\\b) are not supported"
                        : e >= '1' && e <= '9' ? "backreferences are not supported" : "unsupported escape");
        return -1;
    }
}

/* One UTF-8 character of the pattern. */
static int64_t utf8(rx *p, gm_status *st) {
    const unsigned char *s = (const unsigned char *)p->s + p->i;
    size_t left = p->n - p->i;
    int len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > left) { *st = rx_err(p, "invalid UTF-8"); return -1; }
    uint32_t v = len == 1 ? s[0] : s[0] & (0x7Fu >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) { *st = rx_err(p, "invalid UTF-8"); return -1; }
        v = (v << 6) | (s[k] & 0x3F);
    }
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_of[len] || v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) { *st = rx_err(p, "invalid UTF-8"); return -1; }
    p->i += (size_t)len;
    return v;
}

static gm_status parse_class(rx *p, cset *c) {
    p->i++; /* [ */
    c->neg = rpeek(p) == '^';
    if (c->neg) p->i++;
    gm_status st = GM_OK;
    bool first = true;
    while (rpeek(p) != ']' || first) {
        first = false;
        if (rpeek(p) < 0) return rx_err(p, "unterminated class");
        int64_t lo;
        if (rpeek(p) == '\\') {
            p->i++;
            bool neg = false;
            cset sh = {.n = 0};
            if (shorthand(rpeek(p), &sh, true, &neg)) {
                if (neg) return rx_err(p, "negated shorthands (\\D \\W \\S) inside classes are not supported");
                p->i++;
                if (!add_ranges(c, sh.r, 2 * sh.n)) return rx_err(p, "class too large");
                continue;
            }
            if (rpeek(p) == 'b') { p->i++; lo = '\b'; }
            else if ((lo = escape_char(p, &st)) < 0) return st;
        } else if ((lo = utf8(p, &st)) < 0) {
            return st;
        }
        int64_t hi = lo;
        if (rpeek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            if (rpeek(p) == '\\') {
                p->i++;
                if ((hi = escape_char(p, &st)) < 0) return st;
            } else if ((hi = utf8(p, &st)) < 0) {
                return st;
            }
            if (hi < lo) return rx_err(p, "class range out of order");
        }
        if (!add_range(c, (uint32_t)lo, (uint32_t)hi)) return rx_err(p, "class too large");
    }
    p->i++;
    normalise(c);
    if (!c->n) return rx_err(p, "empty class");
    return GM_OK;
}

static gm_status parse_alt(rx *p);

/* An atom: emits its GBNF (parenthesised) into p->out. */
static gm_status parse_atom(rx *p) {
    int ch = rpeek(p);
    gm_status st = GM_OK;
    cset c = {.n = 0};
    if (ch == '(') {
        if (++p->depth > RX_MAX_NEST) return rx_err(p, "groups nested too deep");
        p->i++;
        if (rpeek(p) == '?') {
            if (p->i + 1 < p->n && p->s[p->i + 1] == ':') p->i += 2;
            else return rx_err(p, "lookaround and named groups are not supported");
        }
        gr_buf_puts(p->out, "(");
        if ((st = parse_alt(p))) return st;
        if (rpeek(p) != ')') return rx_err(p, "missing ')'");
        p->i++;
        p->depth--;
        gr_buf_puts(p->out, ")");
        return GM_OK;
    }
    if (ch == '[') {
        if ((st = parse_class(p, &c))) return st;
        return emit(p, &c);
    }
    if (ch == '.') {
        p->i++;
        c.neg = true;
        add_range(&c, '\n', '\n');
        add_range(&c, '\r', '\r');
        add_range(&c, 0x2028, 0x2029);
        normalise(&c);
        return emit(p, &c);
    }
    if (ch == '^' || ch == '$') return rx_err(p, "anchors are only supported at the start (^) and end ($)");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return rx_err(p, "quantifier without an atom");
    if (ch == '\\') {
        p->i++;
        bool neg = false;
        if (shorthand(rpeek(p), &c, false, &neg)) {
            p->i++;
            c.neg = neg;
        } else {
            int64_t v = escape_char(p, &st);
            if (v < 0) return st;
            add_range(&c, (uint32_t)v, (uint32_t)v);
        }
    } else {
        int64_t v = utf8(p, &st);
        if (v < 0) return st;
        add_range(&c, (uint32_t)v, (uint32_t)v);
    }
    normalise(&c);
    return emit(p, &c);
}

static gm_status parse_count(rx *p, int *v) {
    if (rpeek(p) < '0' || rpeek(p) > '9') return rx_err(p, "bad {m,n} quantifier");
    long x = 0;
    while (rpeek(p) >= '0' && rpeek(p) <= '9') {
        x = x * 10 + (rpeek(p) - '0');
        if (x > GR_MAX_REPEAT) return rx_err(p, "repetition count too large");
        p->i++;
    }
    *v = (int)x;
    return GM_OK;
}

static gm_status parse_quant(rx *p) {
    int ch = rpeek(p);
    gm_status st;
    if (ch == '*' || ch == '+' || ch == '?') {
        p->i++;
        char q[2] = {(char)ch, 0};
        gr_buf_puts(p->out, q);
    } else {
        int m, n;
        p->i++;
        if ((st = parse_count(p, &m))) return st;
        n = m;
        if (rpeek(p) == ',') {
            p->i++;
            n = -1;
            if (rpeek(p) != '}' && (st = parse_count(p, &n))) return st;
        }
        if (rpeek(p) != '}') return rx_err(p, "bad {m,n} quantifier");
        p->i++;
        if (n >= 0 && n < m) return rx_err(p, "{m,n} with n < m");
        if (n < 0) gr_buf_printf(p->out, "{%d,}", m);
        else gr_buf_printf(p->out, "{%d,%d}", m, n);
    }
    if (rpeek(p) == '?') p->i++; /* lazy: the same language */
    if (rpeek(p) == '*' || rpeek(p) == '+' || rpeek(p) == '{') return rx_err(p, "possessive or stacked quantifiers are not supported");
    return GM_OK;
}

static bool is_quant_start(const rx *p) {
    int ch = rpeek(p);
    if (ch == '*' || ch == '+' || ch == '?') return true;
    return ch == '{' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9';
}

static gm_status parse_seq(rx *p) {
    bool any = false;
    while (rpeek(p) >= 0 && rpeek(p) != '|' && rpeek(p) != ')') {
        if (rpeek(p) == '$' && p->i + 1 == p->n) break; /* the end anchor: handled by the caller */
        if (any) gr_buf_puts(p->out, " ");
        gm_status st = parse_atom(p);
        if (st) return st;
        if (is_quant_start(p) && (st = parse_quant(p))) return st;
        any = true;
    }
    if (!any) gr_buf_puts(p->out, "\"\"");
    return GM_OK;
}

static gm_status parse_alt(rx *p) {
    for (;;) {
        gm_status st = parse_seq(p);
        if (st) return st;
        if (rpeek(p) != '|') return GM_OK;
        p->i++;
        gr_buf_puts(p->out, " | ");
    }
}

#define JSON_CHAR "([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))"
#define JSON_CHAR_NM "([^\"\\\\\\x00-\\x1F\\U000F0000-\\U000F00FF] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}))"
#define RAW_CHAR "[^\\U000F0000-\\U000F00FF]"

/* Any character of the mode's strings (what an unanchored pattern allows around its match). */
static const char *any_char(gr_strmode m) {
    return m.raw ? RAW_CHAR : m.no_markers ? JSON_CHAR_NM : JSON_CHAR;
}

gm_status gr_regex_to_gbnf(const char *re, gr_strmode mode, gr_buf *out, gm_error *err) {
    rx p = {.s = re, .n = strlen(re), .out = out, .err = err, .mode = mode};
    bool start = p.n && re[0] == '^';
    if (start) p.i++;
    bool end = false;
    if (!start) gr_buf_printf(out, "%s* ", any_char(mode));
    gr_buf_puts(out, "(");
    gm_status st = parse_alt(&p);
    if (st) return st;
    if (rpeek(&p) == '$') { end = true; p.i++; }
    if (rpeek(&p) == ')') return rx_err(&p, "unbalanced ')'");
    if (p.i != p.n) return rx_err(&p, "unexpected character");
    gr_buf_puts(out, ")");
    if (!end) gr_buf_printf(out, " %s*", any_char(mode));
    return GM_OK;
}
