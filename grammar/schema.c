/* grammar/schema.c — JSON Schema to GBNF.
 *
 * Every subschema becomes a rule; $ref targets get one rule each, named before they are generated,
 * so recursive schemas are recursive rules. Whitespace between JSON tokens is the rule `ws`: none,
 * one space, or a newline and up to max_indent spaces / tabs — bounded, so a model cannot loop on
 * blanks, and nothing may follow the root value (an END token comes right after it).
 *
 * Soundness first: every text the grammar allows is an instance of the schema. Where JSON Schema
 * would allow more than we generate, we generate a subset: properties appear in the schema's order,
 * additionalProperties absent means no extra properties (llama.cpp's choice: what a model should
 * produce), extra property names have no escapes (so they cannot spell a declared name), a schema
 * without `type` is restricted to the types its keywords talk about. Keywords we cannot honour are
 * errors naming the keyword and its place (a JSON pointer), never ignored: not, if/then/else,
 * patternProperties, propertyNames, min/maxProperties, multipleOf, contains, uniqueItems: true,
 * unevaluated*, dependent*, remote $refs, allOf of non-objects, bounds on non-integer numbers (other
 * than minimum 0), unknown formats, pattern combined with lengths or format. oneOf is generated as
 * anyOf: exact for the disjoint branches real schemas use (tagged unions); overlapping branches
 * would let an instance match two.
 *
 * Dialects (gm_schema_options.dialect) write the same values in a tool-call syntax: Gemma 4's
 * `{key:<|"|>text<|"|>}` (FunctionGemma: <escape> as the quote), bare keys, raw strings, no
 * whitespace, keys in the template's order (sorted); or Python's JSON values with True / False /
 * None. The root object schema is the call's argument list, without the brackets the caller writes
 * around it (`call:name{` `}`, `name(` `)`): `k:v,k2:v2`, or keyword arguments `k=v, k2=v2`. The structure is the JSON generator's: what changes is
 * the quote, the string characters, the key-value syntax, booleans and null — and keywords a
 * dialect cannot write are refused by name. rule_prefix is applied to the finished text (every rule
 * name outside literals, classes, tokens and counts), so no emitter has to remember it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/internal.h"
#include "gemma_grammar.h"
#include "text/tokenizer.h"

#define SX_MAX_DEPTH 64
#define SX_MAX_TEXT (16u << 20)
#define SX_INT_DIGITS 16 /* unbounded integers and fractions: at most this many digits */

typedef struct sx_ref {
    char *ptr, *rule;
} sx_ref;

typedef struct sx {
    cJSON *doc;
    gr_buf rules;
    gm_error *err;
    gm_status st;
    gm_schema_dialect dialect;
    gr_strmode smode;  /* string characters: raw or JSON-escaped, markers excluded or not */
    bool root_args;    /* not JSON: the root object (depth 1) is the call's argument list, no braces */
    int depth, max_indent, counter;
    char path[512];
    sx_ref *refs;
    size_t n_refs, cap_refs;
    uint32_t have; /* shared rules already emitted (bits of SH_*) */
} sx;

enum { SH_WS = 1, SH_CHAR = 2, SH_STRING = 4, SH_NUMBER = 8, SH_INTEGER = 16, SH_VALUE = 32, SH_BOOL = 64,
       SH_NULL = 128, SH_DATE = 256, SH_TIME = 512, SH_UUID = 1024, SH_EMAIL = 2048, SH_KEYCHAR = 4096 };

static gm_status sx_fail(sx *s, gm_status code, const char *fmt, const char *a) {
    if (s->st) return s->st;
    char what[300];
    snprintf(what, sizeof what, fmt, a ? a : "");
    s->st = gm_fail(s->err, code, "json schema at '%s': %s", s->path[0] ? s->path : "/", what);
    return s->st;
}

static gm_status unsupported(sx *s, const char *kw) {
    return sx_fail(s, GM_ERR_UNSUPPORTED, "keyword '%s' is not supported", kw);
}

/* ------------------------------------------------------------------ dialects */
static const char *dialect_name(const sx *s) {
    static const char *const names[] = {"json", "gemma4", "functiongemma", "python"};
    return names[s->dialect];
}

/* The string delimiter as a GBNF element. */
static const char *quote(const sx *s) {
    return s->dialect == GM_SCHEMA_GEMMA4 ? "<|\"|>" : s->dialect == GM_SCHEMA_FUNCTIONGEMMA ? "<escape>" : "\"\\\"\"";
}

static gm_status dialect_refuses(sx *s, const char *what) {
    char msg[160];
    snprintf(msg, sizeof msg, "%s is not supported in the %s dialect", what, dialect_name(s));
    return sx_fail(s, GM_ERR_UNSUPPORTED, "%s", msg);
}

static void shared(sx *s, uint32_t bit);

/* The rules behind `value` (any value) in Gemma 4's syntax: bare identifier keys, no whitespace. */
static void raw_value_rules(sx *s) {
    shared(s, SH_STRING); shared(s, SH_NUMBER); shared(s, SH_BOOL); shared(s, SH_NULL);
    gr_buf_puts(&s->rules, "value ::= object | array | string | number | boolean | null\n"
                           "object ::= \"{\" (bare-key \":\" value (\",\" bare-key \":\" value)*)? \"}\"\n"
                           "array ::= \"[\" (value (\",\" value)*)? \"]\"\n"
                           "bare-key ::= [a-zA-Z_] [a-zA-Z0-9_]*\n");
}

/* String characters: JSON's, JSON's without the marker block (and without \/, which Python reads
 * as two characters), or raw (anything but a marker). */
static void char_rule(sx *s) {
    gr_buf *b = &s->rules;
    if (s->smode.raw) gr_buf_puts(b, "char ::= [^\\U000F0000-\\U000F00FF]\n");
    else if (!s->smode.no_markers) gr_buf_puts(b, "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n");
    else gr_buf_printf(b, "char ::= [^\"\\\\\\x00-\\x1F\\U000F0000-\\U000F00FF] | \"\\\\\" ([\"\\\\%sbfnrt] | \"u\" [0-9a-fA-F]{4})\n",
                       s->dialect == GM_SCHEMA_PYTHON ? "" : "/");
}

/* ------------------------------------------------------------------ shared rules */
static void shared(sx *s, uint32_t bit) {
    if (s->have & bit) return;
    s->have |= bit;
    gr_buf *b = &s->rules;
    switch (bit) {
    case SH_WS:
        if (s->max_indent > 0) gr_buf_printf(b, "ws ::= (\" \" | \"\\n\" [ \\t]{0,%d})?\n", s->max_indent);
        else gr_buf_puts(b, "ws ::= \"\"\n");
        break;
    case SH_CHAR: char_rule(s); break;
    case SH_KEYCHAR: /* property names of extra properties: no escapes (see the top) */
        gr_buf_puts(b, s->smode.no_markers ? "keychar ::= [^\"\\\\\\x00-\\x1F\\U000F0000-\\U000F00FF]\n"
                                           : "keychar ::= [^\"\\\\\\x00-\\x1F]\n");
        break;
    case SH_STRING:
        shared(s, SH_CHAR);
        gr_buf_printf(b, "string ::= %s char* %s\n", quote(s), quote(s));
        break;
    case SH_INTEGER:
        gr_buf_printf(b, "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,%d})\n", SX_INT_DIGITS - 1);
        break;
    case SH_NUMBER:
        gr_buf_printf(b, "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,%d}) (\".\" [0-9]{1,%d})? ([eE] [-+]? [0-9]{1,3})?\n",
                      SX_INT_DIGITS - 1, SX_INT_DIGITS);
        break;
    case SH_BOOL:
        gr_buf_puts(b, s->dialect == GM_SCHEMA_PYTHON ? "boolean ::= \"True\" | \"False\"\n" : "boolean ::= \"true\" | \"false\"\n");
        break;
    case SH_NULL: gr_buf_puts(b, s->dialect == GM_SCHEMA_PYTHON ? "null ::= \"None\"\n" : "null ::= \"null\"\n"); break;
    case SH_VALUE:
        if (s->smode.raw) { raw_value_rules(s); break; }
        shared(s, SH_WS); shared(s, SH_STRING); shared(s, SH_NUMBER); shared(s, SH_BOOL); shared(s, SH_NULL);
        gr_buf_puts(b, "value ::= object | array | string | number | boolean | null\n"
                       "object ::= \"{\" ws (string ws \":\" ws value (ws \",\" ws string ws \":\" ws value)* ws)? \"}\"\n"
                       "array ::= \"[\" ws (value (ws \",\" ws value)* ws)? \"]\"\n");
        break;
    case SH_DATE:
        gr_buf_puts(b, "date ::= [0-9]{4} \"-\" (\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01])\n");
        break;
    case SH_TIME:
        gr_buf_puts(b, "time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
                       "(\"Z\" | \"z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n");
        break;
    case SH_UUID:
        gr_buf_puts(b, "uuid ::= [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}\n");
        break;
    case SH_EMAIL:
        gr_buf_puts(b, "email ::= [a-zA-Z0-9_+-] [a-zA-Z0-9._+-]{0,63} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,62} (\".\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,62}){1,8}\n");
        break;
    default: break;
    }
}

/* A fresh rule name from a hint (sanitised to GBNF's name characters). */
static void new_name(sx *s, const char *hint, char out[64]) {
    char h[40];
    size_t k = 0;
    for (const char *p = hint; *p && k < sizeof h - 1; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        h[k++] = ok ? c : '-';
    }
    h[k] = 0;
    snprintf(out, 64, "%s-%d", k ? h : "s", s->counter++);
}

/* Starts rule `name ::= `; the caller appends the body and a newline. */
static void begin_rule(sx *s, const char *name) { gr_buf_printf(&s->rules, "%s ::= ", name); }

/* The JSON text of v as a GBNF literal. */
static bool valid_utf8(const unsigned char *p) {
    while (*p) {
        int len = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 0;
        if (!len) return false;
        uint32_t v = len == 1 ? *p : *p & (0x7Fu >> len);
        for (int k = 1; k < len; k++) {
            if ((p[k] & 0xC0) != 0x80) return false;
            v = (v << 6) | (p[k] & 0x3F);
        }
        static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (v < min_of[len] || v > GR_MAX_CP || (v >= 0xD800 && v <= 0xDFFF)) return false;
        p += len;
    }
    return true;
}

/* Whether UTF-8 text p holds a marker code point (bytes F3 B0 80..83 xx). */
static bool has_marker_char(const char *p) {
    for (; *p; p++)
        if ((unsigned char)p[0] == 0xF3 && (unsigned char)p[1] == 0xB0 && (unsigned char)p[2] >= 0x80 &&
            (unsigned char)p[2] <= 0x83)
            return true;
    return false;
}

/* Case-insensitive ASCII order, then bytes: Jinja's dictsort, which the Gemma templates use. */
static int key_cmp(const char *a, const char *b) {
    for (size_t i = 0;; i++) {
        int x = a[i] >= 'A' && a[i] <= 'Z' ? a[i] + 32 : (unsigned char)a[i];
        int y = b[i] >= 'A' && b[i] <= 'Z' ? b[i] + 32 : (unsigned char)b[i];
        if (x != y) return x - y;
        if (!a[i]) return strcmp(a, b);
    }
}

static int cmp_members(const void *x, const void *y) {
    return key_cmp((*(const cJSON *const *)x)->string, (*(const cJSON *const *)y)->string);
}

static void value_text(sx *s, gr_buf *t, const cJSON *v);

/* A string in the dialect's syntax (checked: valid UTF-8; no marker character outside JSON). */
static void string_text(sx *s, gr_buf *t, const char *str) {
    if (!valid_utf8((const unsigned char *)str)) { sx_fail(s, GM_ERR_FORMAT, "invalid UTF-8 in a string%s", NULL); return; }
    if (has_marker_char(str)) { dialect_refuses(s, "a string holding a marker character (U+F0000..U+F00FF)"); return; }
    if (!s->smode.raw) {
        char *j = cJSON_PrintUnformatted(&(cJSON){.type = cJSON_String, .valuestring = (char *)(uintptr_t)str});
        if (!j) { t->oom = true; return; }
        gr_buf_puts(t, j);
        cJSON_free(j);
        return;
    }
    char q[4];
    const char *qm = s->dialect == GM_SCHEMA_GEMMA4 ? "<|\"|>" : "<escape>";
    size_t ql = gm_utf8_encode(gm_gbnf_marker_cp(qm, strlen(qm)), q);
    gr_buf_put(t, q, ql);
    gr_buf_puts(t, str);
    gr_buf_put(t, q, ql);
}

/* An object in the dialect's syntax: Gemma's bare sorted keys, or JSON's quoted ones in order. */
static void object_text(sx *s, gr_buf *t, const cJSON *v) {
    size_t n = (size_t)cJSON_GetArraySize(v), k = 0;
    const cJSON **m = malloc((n ? n : 1) * sizeof *m);
    if (!m) { t->oom = true; return; }
    const cJSON *it;
    cJSON_ArrayForEach(it, v) m[k++] = it;
    if (s->smode.raw) qsort(m, n, sizeof *m, cmp_members);
    gr_buf_puts(t, "{");
    for (k = 0; k < n && !s->st; k++) {
        if (k) gr_buf_puts(t, ",");
        if (!s->smode.raw) {
            string_text(s, t, m[k]->string);
        } else if (!valid_utf8((const unsigned char *)m[k]->string) || has_marker_char(m[k]->string)) {
            dialect_refuses(s, "a key that is not UTF-8 or holds a marker character");
        } else {
            gr_buf_puts(t, m[k]->string);
        }
        gr_buf_puts(t, ":");
        value_text(s, t, m[k]);
    }
    gr_buf_puts(t, "}");
    free(m);
}

/* The text a dialect other than JSON writes for value v (compact, like JSON's enum literals). */
static void value_text(sx *s, gr_buf *t, const cJSON *v) {
    bool py = s->dialect == GM_SCHEMA_PYTHON;
    if (cJSON_IsString(v)) { string_text(s, t, v->valuestring); return; }
    if (cJSON_IsTrue(v)) { gr_buf_puts(t, py ? "True" : "true"); return; }
    if (cJSON_IsFalse(v)) { gr_buf_puts(t, py ? "False" : "false"); return; }
    if (cJSON_IsNull(v)) { gr_buf_puts(t, py ? "None" : "null"); return; }
    if (cJSON_IsObject(v)) { object_text(s, t, v); return; }
    if (cJSON_IsArray(v)) {
        const cJSON *it;
        int k = 0;
        gr_buf_puts(t, "[");
        cJSON_ArrayForEach(it, v) { if (k++) gr_buf_puts(t, ","); value_text(s, t, it); }
        gr_buf_puts(t, "]");
        return;
    }
    char *j = cJSON_PrintUnformatted(v); /* a number */
    if (!j) { t->oom = true; return; }
    gr_buf_puts(t, j);
    cJSON_free(j);
}

/* UTF-8 text as one GBNF literal: quotes, backslashes and controls escaped, marker characters as
 * \U escapes (readable), everything else as is. */
static void gbnf_literal(gr_buf *b, const char *text) {
    gr_buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (p[0] == 0xF3 && p[1] == 0xB0 && p[2] >= 0x80 && p[2] <= 0x83 && p[3]) {
            gr_buf_gbnf_char(b, (uint32_t)(0xF0000 | (p[2] & 0x3F) << 6 | (p[3] & 0x3F)), false);
            p += 3;
        } else if (*p == '"' || *p == '\\') {
            char e[2] = {'\\', (char)*p};
            gr_buf_put(b, e, 2);
        } else if (*p < 0x20 || *p == 0x7F) {
            gr_buf_printf(b, "\\x%02X", *p);
        } else {
            gr_buf_put(b, (const char *)p, 1);
        }
    }
    gr_buf_puts(b, "\"");
}

/* cJSON passes invalid UTF-8 in strings through: refused here, before it reaches a literal. */
static void literal(sx *s, gr_buf *b, const cJSON *v) {
    if (s->dialect != GM_SCHEMA_JSON) {
        gr_buf t = {0};
        value_text(s, &t, v);
        if (!s->st) gbnf_literal(b, t.p ? t.p : "");
        if (t.oom) b->oom = true;
        gr_buf_free(&t);
        return;
    }
    char *t = cJSON_PrintUnformatted(v);
    if (!t) { b->oom = true; return; }
    if (!valid_utf8((const unsigned char *)t)) {
        cJSON_free(t);
        sx_fail(s, GM_ERR_FORMAT, "invalid UTF-8 in a string%s", NULL);
        return;
    }
    gr_buf_puts(b, "\"");
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        if (*p == '"' || *p == '\\') { char e[2] = {'\\', (char)*p}; gr_buf_put(b, e, 2); }
        else if (*p < 0x20 || *p == 0x7F) gr_buf_printf(b, "\\x%02X", *p);
        else gr_buf_put(b, (const char *)p, 1);
    }
    gr_buf_puts(b, "\"");
    cJSON_free(t);
}

/* ------------------------------------------------------------------ paths */
static size_t path_push(sx *s, const char *seg) {
    size_t n = strlen(s->path);
    snprintf(s->path + n, sizeof s->path - n, "/%s", seg);
    return n;
}
static void path_pop(sx *s, size_t n) { s->path[n] = 0; }

static gm_status gen(sx *s, const cJSON *sch, const char *hint, char name[64]);

/* Generates sub under path segment seg. */
static gm_status gen_at(sx *s, const cJSON *sub, const char *seg, const char *hint, char name[64]) {
    size_t n = path_push(s, seg);
    gm_status st = gen(s, sub, hint, name);
    if (!st) path_pop(s, n);
    return st;
}

/* ------------------------------------------------------------------ $ref */
static const cJSON *resolve(sx *s, const char *ref) {
    if (ref[0] != '#') return NULL;
    const cJSON *cur = s->doc;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char seg[256];
        size_t k = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && p[1] == '0') { c = '~'; p++; }
            else if (c == '~' && p[1] == '1') { c = '/'; p++; }
            if (k < sizeof seg - 1) seg[k++] = c;
        }
        seg[k] = 0;
        if (cJSON_IsArray(cur)) {
            char *end;
            long idx = strtol(seg, &end, 10);
            cur = *end || !k ? NULL : cJSON_GetArrayItem(cur, (int)idx);
        } else {
            cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, seg) : NULL;
        }
        if (!cur) return NULL;
    }
    return *p ? NULL : cur;
}

static gm_status gen_ref(sx *s, const char *ref, char name[64]) {
    for (size_t k = 0; k < s->n_refs; k++)
        if (!strcmp(s->refs[k].ptr, ref)) { snprintf(name, 64, "%s", s->refs[k].rule); return GM_OK; }
    const cJSON *t = resolve(s, ref);
    if (!t) return sx_fail(s, GM_ERR_UNSUPPORTED, "$ref '%.200s' is not a local reference that resolves (#/...)", ref);
    char rule[64];
    const char *slash = strrchr(ref, '/');
    new_name(s, slash ? slash + 1 : "ref", rule);
    if (!gr_grow((void **)&s->refs, &s->cap_refs, s->n_refs + 1, sizeof(sx_ref), 1u << 16))
        return sx_fail(s, GM_ERR_NOMEM, "too many $refs%s", NULL);
    s->refs[s->n_refs].ptr = strdup(ref);
    s->refs[s->n_refs].rule = strdup(rule);
    if (!s->refs[s->n_refs].ptr || !s->refs[s->n_refs].rule) return sx_fail(s, GM_ERR_NOMEM, "out of memory%s", NULL);
    s->n_refs++;
    char body[64];
    char saved[sizeof s->path];
    memcpy(saved, s->path, sizeof saved);
    snprintf(s->path, sizeof s->path, "%s", ref + 1);
    gm_status st = gen(s, t, rule, body);
    if (st) return st;
    memcpy(s->path, saved, sizeof saved);
    begin_rule(s, rule);
    gr_buf_printf(&s->rules, "%s\n", body);
    snprintf(name, 64, "%s", rule);
    return GM_OK;
}

/* ------------------------------------------------------------------ keywords */
static bool is_annotation(const char *k) {
    static const char *const ann[] = {"title", "description", "examples", "default", "$schema", "$id", "$comment",
                                      "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL};
    for (int i = 0; ann[i]; i++) if (!strcmp(k, ann[i])) return true;
    return false;
}

enum { T_OBJECT = 1, T_ARRAY = 2, T_STRING = 4, T_INTEGER = 8, T_NUMBER = 16, T_BOOLEAN = 32, T_NULL = 64, T_ALL = 127 };

static int type_bit(const char *t) {
    static const char *const names[] = {"object", "array", "string", "integer", "number", "boolean", "null"};
    for (int i = 0; i < 7; i++) if (!strcmp(t, names[i])) return 1 << i;
    return 0;
}

/* Which type each keyword belongs to (0: any type). */
static int keyword_type(const char *k) {
    static const struct { const char *k; int t; } kw[] = {
        {"properties", T_OBJECT}, {"required", T_OBJECT}, {"additionalProperties", T_OBJECT},
        {"items", T_ARRAY}, {"prefixItems", T_ARRAY}, {"minItems", T_ARRAY}, {"maxItems", T_ARRAY},
        {"uniqueItems", T_ARRAY}, {"additionalItems", T_ARRAY},
        {"minLength", T_STRING}, {"maxLength", T_STRING}, {"pattern", T_STRING}, {"format", T_STRING},
        {"minimum", T_INTEGER | T_NUMBER}, {"maximum", T_INTEGER | T_NUMBER},
        {"exclusiveMinimum", T_INTEGER | T_NUMBER}, {"exclusiveMaximum", T_INTEGER | T_NUMBER},
        {"type", 0}, {"enum", 0}, {"const", 0}, {"anyOf", 0}, {"oneOf", 0}, {"allOf", 0}, {"$ref", 0}, {NULL, 0}};
    for (int i = 0; kw[i].k; i++) if (!strcmp(k, kw[i].k)) return kw[i].t;
    return -1;
}

/* ------------------------------------------------------------------ strings */
static bool get_count(sx *s, const cJSON *sch, const char *k, long *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(sch, k);
    if (!x) return false;
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble != floor(x->valuedouble)) {
        sx_fail(s, GM_ERR_FORMAT, "'%s' must be a non-negative integer", k);
        return false;
    }
    if (x->valuedouble > GR_MAX_REPEAT) {
        sx_fail(s, GM_ERR_UNSUPPORTED, "'%s' over 4096 is not supported", k);
        return false;
    }
    *v = (long)x->valuedouble;
    return true;
}

static void string_body(sx *s, const cJSON *sch, gr_buf *b) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(sch, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(sch, "format");
    long mn = 0, mx = -1;
    bool has_mn = get_count(s, sch, "minLength", &mn), has_mx = get_count(s, sch, "maxLength", &mx);
    if (s->st) return;
    if ((pat || fmt) && (has_mn || has_mx)) { sx_fail(s, GM_ERR_UNSUPPORTED, "%s together with minLength / maxLength is not supported", pat ? "pattern" : "format"); return; }
    if (pat && fmt) { sx_fail(s, GM_ERR_UNSUPPORTED, "pattern together with format is not supported%s", NULL); return; }
    if (has_mx && mx < mn) { sx_fail(s, GM_ERR_FORMAT, "maxLength < minLength%s", NULL); return; }
    if (pat) {
        if (!cJSON_IsString(pat)) { sx_fail(s, GM_ERR_FORMAT, "'pattern' must be a string%s", NULL); return; }
        gr_buf_printf(b, "%s ", quote(s));
        gm_status st = gr_regex_to_gbnf(pat->valuestring, s->smode, b, s->err);
        if (st) { s->st = st; return; }
        gr_buf_printf(b, " %s", quote(s));
        return;
    }
    if (fmt) {
        static const struct { const char *f, *rule; uint32_t bit; } fm[] = {
            {"date", "date", SH_DATE}, {"time", "time", SH_TIME}, {"date-time", "date \"T\" time", SH_DATE | SH_TIME},
            {"uuid", "uuid", SH_UUID}, {"email", "email", SH_EMAIL}, {NULL, NULL, 0}};
        for (int i = 0; cJSON_IsString(fmt) && fm[i].f; i++) {
            if (strcmp(fmt->valuestring, fm[i].f)) continue;
            if (fm[i].bit & SH_DATE) shared(s, SH_DATE);
            if (fm[i].bit & SH_TIME) shared(s, SH_TIME);
            shared(s, fm[i].bit & ~(uint32_t)(SH_DATE | SH_TIME) ? fm[i].bit : 0);
            gr_buf_printf(b, "%s %s %s", quote(s), fm[i].rule, quote(s));
            return;
        }
        sx_fail(s, GM_ERR_UNSUPPORTED, "format '%.100s' is not supported (date, time, date-time, uuid, email are)",
                cJSON_IsString(fmt) ? fmt->valuestring : "?");
        return;
    }
    shared(s, SH_CHAR);
    if (!has_mn && !has_mx) { shared(s, SH_STRING); gr_buf_puts(b, "string"); return; }
    if (mx < 0) gr_buf_printf(b, "%s char{%ld,} %s", quote(s), mn, quote(s));
    else gr_buf_printf(b, "%s char{%ld,%ld} %s", quote(s), mn, mx, quote(s));
}

/* ------------------------------------------------------------------ integers in a range */
/* Digit strings of exactly len digits (no leading zero unless len == 1) in [lo, hi] (same length). */
static void digits_between(gr_buf *b, const char *lo, const char *hi, size_t len, bool first) {
    if (len == 0) { gr_buf_puts(b, "\"\""); return; }
    if (!strncmp(lo, hi, len)) { gr_buf_printf(b, "\"%.*s\"", (int)len, lo); return; }
    /* every digit string of the length (without it the two recursions below double the text per digit:
     * 1.1 MB for [1, 1e15 - 1]) */
    if (strspn(lo, "0") >= len && strspn(hi, "9") >= len) { gr_buf_printf(b, "[0-9]{%zu}", len); return; }
    size_t k = 0;
    while (lo[k] == hi[k]) k++;
    gr_buf_puts(b, "(");
    if (k) gr_buf_printf(b, "\"%.*s\" ", (int)k, lo);
    size_t rest = len - k - 1;
    char any9[32], any0[32];
    memset(any9, '9', rest); any9[rest] = 0;
    memset(any0, '0', rest); any0[rest] = 0;
    gr_buf_puts(b, "(");
    /* lo's digit then >= lo's rest */
    gr_buf_printf(b, "\"%c\" ", lo[k]);
    digits_between(b, lo + k + 1, any9, rest, false);
    if (hi[k] - lo[k] > 1) gr_buf_printf(b, " | [%c-%c] [0-9]{%zu}", lo[k] + 1, hi[k] - 1, rest);
    gr_buf_printf(b, " | \"%c\" ", hi[k]);
    digits_between(b, any0, hi + k + 1, rest, false);
    gr_buf_puts(b, "))");
    (void)first;
}

/* Non-negative integers in [lo, hi] (hi < 0: unbounded), no leading zeros. */
static void nonneg_range(gr_buf *b, long long lo, long long hi) {
    char a[32], z[32];
    int la = snprintf(a, sizeof a, "%lld", lo);
    int lz = hi >= 0 ? snprintf(z, sizeof z, "%lld", hi) : SX_INT_DIGITS;
    gr_buf_puts(b, "(");
    bool alt = false;
    for (int len = la; len <= lz; len++) {
        char lo_s[32], hi_s[32];
        if (len == la) memcpy(lo_s, a, (size_t)la + 1);
        else { lo_s[0] = '1'; memset(lo_s + 1, '0', (size_t)len - 1); lo_s[len] = 0; if (len == 1) lo_s[0] = '0'; }
        if (hi >= 0 && len == lz) memcpy(hi_s, z, (size_t)lz + 1);
        else { memset(hi_s, '9', (size_t)len); hi_s[len] = 0; }
        if (strcmp(lo_s, hi_s) > 0) continue;
        if (alt) gr_buf_puts(b, " | ");
        if (len == la || (hi >= 0 && len == lz)) digits_between(b, lo_s, hi_s, (size_t)len, true);
        else gr_buf_printf(b, "[1-9] [0-9]{%d}", len - 1);
        alt = true;
    }
    if (!alt) gr_buf_puts(b, "[^\\x00-\\U0010FFFF]"); /* unreachable: the caller checks lo <= hi */
    gr_buf_puts(b, ")");
}

static bool get_bound(sx *s, const cJSON *sch, const char *k, double *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(sch, k);
    if (!x || cJSON_IsBool(x)) return false;
    if (!cJSON_IsNumber(x)) { sx_fail(s, GM_ERR_FORMAT, "'%s' must be a number", k); return false; }
    *v = x->valuedouble;
    return true;
}

/* Clamped into +-2e15 before the conversion (a double past long long's range is undefined
 * behaviour; fuzz_json_schema found minimum: 9.2e137): bounds past 1e15 are refused below. */
static long long clamp_ll(double x) { return (long long)fmax(fmin(x, 2e15), -2e15); }

/* The bounds of an integer schema, draft 4 (boolean exclusive*) and 6+ (numeric) alike. */
static bool int_bounds(sx *s, const cJSON *sch, long long *lo, long long *hi, bool *has_lo, bool *has_hi) {
    double v;
    const double big = 1e15;
    *has_lo = *has_hi = false;
    if (get_bound(s, sch, "minimum", &v)) {
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(sch, "exclusiveMinimum");
        double c = ceil(v);
        if (cJSON_IsTrue(ex) && c == v) c += 1;
        *lo = clamp_ll(c); *has_lo = true;
    }
    if (get_bound(s, sch, "exclusiveMinimum", &v)) {
        long long c = clamp_ll(floor(v) + 1);
        if (!*has_lo || c > *lo) *lo = c;
        *has_lo = true;
    }
    if (get_bound(s, sch, "maximum", &v)) {
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(sch, "exclusiveMaximum");
        double f = floor(v);
        if (cJSON_IsTrue(ex) && f == v) f -= 1;
        *hi = clamp_ll(f); *has_hi = true;
    }
    if (get_bound(s, sch, "exclusiveMaximum", &v)) {
        long long f = clamp_ll(ceil(v) - 1);
        if (!*has_hi || f < *hi) *hi = f;
        *has_hi = true;
    }
    if (s->st) return false;
    if ((*has_lo && fabs((double)*lo) >= big) || (*has_hi && fabs((double)*hi) >= big)) {
        sx_fail(s, GM_ERR_UNSUPPORTED, "integer bounds beyond 1e15 are not supported%s", NULL);
        return false;
    }
    if (*has_lo && *has_hi && *lo > *hi) { sx_fail(s, GM_ERR_FORMAT, "no integer satisfies the bounds%s", NULL); return false; }
    return true;
}

static void integer_body(sx *s, const cJSON *sch, gr_buf *b) {
    long long lo = 0, hi = 0;
    bool has_lo, has_hi;
    if (!int_bounds(s, sch, &lo, &hi, &has_lo, &has_hi)) return;
    if (!has_lo && !has_hi) { shared(s, SH_INTEGER); gr_buf_puts(b, "integer"); return; }
    bool alt = false;
    gr_buf_puts(b, "(");
    if (!has_lo || lo < 0) { /* negatives: "-" then magnitudes in [max(1, -hi), -lo] */
        long long mlo = has_hi && hi < 0 ? -hi : 1, mhi = has_lo ? -lo : -1;
        gr_buf_puts(b, "\"-\" ");
        nonneg_range(b, mlo, mhi);
        alt = true;
    }
    if (!has_hi || hi >= 0) {
        if (alt) gr_buf_puts(b, " | ");
        nonneg_range(b, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1);
    }
    gr_buf_puts(b, ")");
}

static void number_body(sx *s, const cJSON *sch, gr_buf *b) {
    double v;
    bool bounded = false;
    const char *kws[] = {"maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (int i = 0; i < 3; i++)
        if (get_bound(s, sch, kws[i], &v) || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sch, kws[i]))) {
            sx_fail(s, GM_ERR_UNSUPPORTED, "'%s' on a non-integer number is not supported (integers only)", kws[i]);
            return;
        }
    if (get_bound(s, sch, "minimum", &v)) {
        if (v != 0) { sx_fail(s, GM_ERR_UNSUPPORTED, "'minimum' other than 0 on a non-integer number is not supported%s", NULL); return; }
        bounded = true;
    }
    if (s->st) return;
    shared(s, SH_NUMBER);
    if (!bounded) { gr_buf_puts(b, "number"); return; }
    gr_buf_printf(b, "(\"0\" | [1-9] [0-9]{0,%d}) (\".\" [0-9]{1,%d})? ([eE] [-+]? [0-9]{1,3})?",
                  SX_INT_DIGITS - 1, SX_INT_DIGITS);
}

/* ------------------------------------------------------------------ objects */
typedef struct prop {
    const char *name;
    const cJSON *schema;
    bool required;
    const char *kv; /* its key-value rule */
} prop;

static int cmp_props(const void *x, const void *y) {
    return key_cmp(((const prop *)x)->name, ((const prop *)y)->name);
}

/* Python keyword arguments need identifiers that are not keywords. */
static bool python_identifier(const char *n) {
    static const char *const kw[] = {"False", "None", "True", "and", "as", "assert", "async", "await", "break",
        "class", "continue", "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if",
        "import", "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
        "with", "yield", NULL};
    if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || *n == '_')) return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
    for (int i = 0; kw[i]; i++) if (!strcmp(n, kw[i])) return false;
    return true;
}

/* The key of a key-value rule: JSON's quoted key and `ws ":" ws`, Python's `name=` (keyword
 * arguments) or Gemma's bare `name:`. */
static void key_text(sx *s, gr_buf *line, const char *name, bool kwargs) {
    if (!kwargs && !s->smode.raw) {
        cJSON key = {.type = cJSON_String, .valuestring = (char *)(uintptr_t)name};
        literal(s, line, &key);
        gr_buf_puts(line, " ws \":\" ws");
        return;
    }
    if (kwargs && !python_identifier(name)) {
        sx_fail(s, GM_ERR_UNSUPPORTED, "property '%.100s' is not a Python identifier (keyword arguments need one)", name);
        return;
    }
    if (!valid_utf8((const unsigned char *)name) || has_marker_char(name)) {
        dialect_refuses(s, "a property name that is not UTF-8 or holds a marker character");
        return;
    }
    gr_buf t = {0};
    gr_buf_puts(&t, name);
    gr_buf_puts(&t, kwargs ? "=" : ":");
    gbnf_literal(line, t.p ? t.p : "");
    if (t.oom) line->oom = true;
    gr_buf_free(&t);
}

/* An extra property name: a string of keychars that is none of the declared names. The rule
 * follows a trie of the names: at each prefix, either end (if the prefix is no name), or a
 * character that leaves the trie then anything, or the next character of some name. */
static void key_not_in(sx *s, const prop *ps, size_t n, const char *prefix, size_t plen, char name[64]) {
    new_name(s, "key", name);
    char kids[64][64];
    unsigned char seen[256] = {0};
    size_t nk = 0;
    bool is_name = false;
    gr_buf body = {0};
    gr_buf_puts(&body, "(");
    bool alt = false;
    gr_buf cls = {0};
    for (size_t i = 0; i < n; i++) {
        if (strlen(ps[i].name) < plen || strncmp(ps[i].name, prefix, plen)) continue;
        unsigned char c = (unsigned char)ps[i].name[plen];
        if (!c) { is_name = true; continue; }
        if (seen[c]) continue;
        seen[c] = 1;
        if (nk < 64) {
            char pre[512];
            size_t l = plen < sizeof pre - 2 ? plen : sizeof pre - 2;
            memcpy(pre, prefix, l);
            pre[l] = (char)c;
            pre[l + 1] = 0;
            key_not_in(s, ps, n, ps[i].name, plen + 1, kids[nk]);
            gr_buf_printf(&body, "%s\"", alt ? " | " : "");
            gr_buf_gbnf_char(&body, c, false);
            gr_buf_printf(&body, "\" %s", kids[nk]);
            alt = true;
            nk++;
        }
    }
    if (!is_name) { gr_buf_printf(&body, "%s\"\\\"\"", alt ? " | " : ""); alt = true; }
    /* a byte that starts no name's next character: then any keychars (bytes of multi-byte
     * characters are compared per byte: a differing lead byte differs for good) */
    gr_buf_puts(&cls, "[^\"\\\\\\x00-\\x1F");
    if (s->smode.no_markers) gr_buf_puts(&cls, "\\U000F0000-\\U000F00FF");
    for (int c = 0x20; c < 0x80; c++) if (seen[c]) gr_buf_gbnf_char(&cls, (uint32_t)c, true);
    gr_buf_puts(&cls, "]");
    shared(s, SH_KEYCHAR);
    bool multibyte = false;
    for (int c = 0x80; c < 0x100; c++) multibyte |= seen[c];
    if (multibyte) { /* keep it simple and sound: extra names may not share a non-ASCII prefix */
        gr_buf_free(&cls);
        gr_buf_puts(&cls, "[^\"\\\\\\x00-\\x1F\\x80-\\U0010FFFF");
        for (int c = 0x20; c < 0x80; c++) if (seen[c]) gr_buf_gbnf_char(&cls, (uint32_t)c, true);
        gr_buf_puts(&cls, "]");
    }
    gr_buf_printf(&body, "%s%s keychar* \"\\\"\")", alt ? " | " : "", cls.p ? cls.p : "");
    begin_rule(s, name);
    gr_buf_printf(&s->rules, "%s\n", body.p ? body.p : "\"\"");
    if (body.oom || cls.oom) s->rules.oom = true;
    gr_buf_free(&body);
    gr_buf_free(&cls);
    (void)prefix;
}

/* members(i, first): the members from property i on, `first` when none was written yet. */
static void members(sx *s, const char *obj, const prop *ps, size_t n, const char *const *kv, const char *extra_kv,
                    const char *sep_text, char (*names)[2][64]) {
    for (size_t i = n + 1; i-- > 0;) {
        for (int first = 0; first < 2; first++) {
            char *nm = names[i][first];
            snprintf(nm, 64, "%.40s-m%zu%s", obj, i % 1000000u, first ? "f" : "");
            begin_rule(s, nm);
            gr_buf *b = &s->rules;
            const char *sep = first ? "" : sep_text;
            if (i == n) {
                if (!extra_kv) gr_buf_puts(b, "\"\"");
                else if (first) gr_buf_printf(b, "(%s (%s%s)*)?", extra_kv, sep_text, extra_kv);
                else gr_buf_printf(b, "(%s%s)*", sep_text, extra_kv);
            } else if (ps[i].required) {
                gr_buf_printf(b, "%s%s %s", sep, kv[i], names[i + 1][0]);
            } else {
                gr_buf_printf(b, "%s%s %s | %s", sep, kv[i], names[i + 1][0], names[i + 1][first]);
            }
            gr_buf_puts(b, "\n");
        }
    }
}

static bool in_required(const cJSON *req, const char *name) {
    const cJSON *r;
    cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && !strcmp(r->valuestring, name)) return true;
    return false;
}

static void object_body(sx *s, const cJSON *sch, const char *hint, gr_buf *b) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(sch, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sch, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(sch, "additionalProperties");
    if (props && !cJSON_IsObject(props)) { sx_fail(s, GM_ERR_FORMAT, "'properties' must be an object%s", NULL); return; }
    if (req && !cJSON_IsArray(req)) { sx_fail(s, GM_ERR_FORMAT, "'required' must be an array%s", NULL); return; }
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl)) { sx_fail(s, GM_ERR_FORMAT, "'additionalProperties' must be a boolean or a schema%s", NULL); return; }
    bool extra_ok = addl && !cJSON_IsFalse(addl);
    bool args = s->root_args && s->depth == 1; /* the call's arguments: the caller writes the brackets */
    bool kwargs = args && s->dialect == GM_SCHEMA_PYTHON;
    if (args) s->root_args = false;
    if (extra_ok && (kwargs || s->smode.raw)) {
        dialect_refuses(s, kwargs ? "keyword 'additionalProperties' (other than false) at the root" : "keyword 'additionalProperties' (other than false)");
        return;
    }
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) { sx_fail(s, GM_ERR_FORMAT, "'required' must hold strings%s", NULL); return; }
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring)) {
            sx_fail(s, GM_ERR_UNSUPPORTED, "required property '%.100s' is not in 'properties'", r->valuestring);
            return;
        }
    }
    size_t n = (size_t)cJSON_GetArraySize(props), k = 0;
    prop *ps = calloc(n + 1, sizeof(prop));
    char (*kv)[64] = calloc(n + 1, sizeof *kv);
    const char **kvp = calloc(n + 1, sizeof(char *));
    char (*names)[2][64] = calloc(n + 2, sizeof *names);
    if (!ps || !kv || !kvp || !names) { sx_fail(s, GM_ERR_NOMEM, "out of memory%s", NULL); goto out; }
    const cJSON *p;
    size_t pn = path_push(s, "properties");
    cJSON_ArrayForEach(p, props) {
        bool required = in_required(req, p->string);
        if (cJSON_IsFalse(p)) { /* a property that must not appear */
            if (required) { sx_fail(s, GM_ERR_FORMAT, "required property '%.100s' has schema false", p->string); goto out; }
            continue;
        }
        char val[64];
        if (gen_at(s, p, p->string, p->string, val)) goto out;
        new_name(s, p->string, kv[k]);
        ps[k] = (prop){p->string, p, required, kv[k]};
        gr_buf line = {0};
        key_text(s, &line, p->string, kwargs);
        if (s->st) { gr_buf_free(&line); goto out; }
        gr_buf_printf(&s->rules, "%s ::= %s %s\n", kv[k], line.p ? line.p : "\"\"", val);
        if (line.oom) s->rules.oom = true;
        gr_buf_free(&line);
        k++;
    }
    path_pop(s, pn);
    if (s->smode.raw) qsort(ps, k, sizeof *ps, cmp_props); /* the Gemma templates write keys sorted */
    for (size_t i = 0; i < k; i++) kvp[i] = ps[i].kv;
    char extra_kv[64] = {0};
    if (extra_ok) {
        char val[64], key[64];
        if (cJSON_IsTrue(addl)) { shared(s, SH_VALUE); snprintf(val, sizeof val, "value"); }
        else if (gen_at(s, addl, "additionalProperties", "extra", val)) goto out;
        key_not_in(s, ps, k, "", 0, key);
        new_name(s, "extra-kv", extra_kv);
        gr_buf_printf(&s->rules, "%s ::= \"\\\"\" %s ws \":\" ws %s\n", extra_kv, key, val);
    }
    char obj[64];
    new_name(s, hint, obj);
    members(s, obj, ps, k, kvp, extra_ok ? extra_kv : NULL, kwargs ? "\", \" " : args ? "\",\" " : "ws \",\" ws ", names);
    if (args) {
        gr_buf_puts(b, names[0][1]);
    } else {
        shared(s, SH_WS);
        gr_buf_printf(b, "\"{\" ws %s ws \"}\"", names[0][1]);
    }
out:
    free(ps); free(kv); free(kvp); free(names);
}

/* ------------------------------------------------------------------ arrays */
static void array_body(sx *s, const cJSON *sch, gr_buf *b) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(sch, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(sch, "prefixItems");
    const cJSON *addl_items = cJSON_GetObjectItemCaseSensitive(sch, "additionalItems");
    const char *prefix_kw = "prefixItems", *items_kw = "items";
    if (cJSON_IsArray(items)) { /* draft 4-7 tuples: items is the prefix, additionalItems the rest */
        if (prefix) { sx_fail(s, GM_ERR_FORMAT, "'items' as an array together with 'prefixItems'%s", NULL); return; }
        prefix = items; prefix_kw = "items";
        items = addl_items; items_kw = "additionalItems";
    } else if (addl_items) {
        return (void)unsupported(s, "additionalItems");
    }
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(sch, "uniqueItems");
    if (uniq && !cJSON_IsFalse(uniq)) return (void)unsupported(s, "uniqueItems");
    if (prefix && !cJSON_IsArray(prefix)) { sx_fail(s, GM_ERR_FORMAT, "'prefixItems' must be an array%s", NULL); return; }
    long mn = 0, mx = -1;
    get_count(s, sch, "minItems", &mn);
    get_count(s, sch, "maxItems", &mx);
    if (s->st) return;
    if (mx >= 0 && mx < mn) { sx_fail(s, GM_ERR_FORMAT, "maxItems < minItems%s", NULL); return; }
    long np = cJSON_GetArraySize(prefix);
    if (mx >= 0 && np > mx) np = mx;
    bool no_more = cJSON_IsFalse(items);
    if (no_more && mn > np) { sx_fail(s, GM_ERR_FORMAT, "minItems needs more items than 'items: false' allows%s", NULL); return; }
    char item[64] = {0};
    if (!no_more) {
        if (!items || cJSON_IsTrue(items)) { shared(s, SH_VALUE); snprintf(item, sizeof item, "value"); }
        else if (gen_at(s, items, items_kw, "item", item)) return;
    }
    char (*pre)[64] = calloc((size_t)np + 1, sizeof *pre);
    if (!pre) { sx_fail(s, GM_ERR_NOMEM, "out of memory%s", NULL); return; }
    size_t pn = path_push(s, prefix_kw);
    for (long i = 0; i < np; i++) {
        char seg[24];
        snprintf(seg, sizeof seg, "%ld", i);
        if (gen_at(s, cJSON_GetArrayItem(prefix, (int)i), seg, "tuple", pre[i])) { free(pre); return; }
    }
    path_pop(s, pn);
    /* the tail after the prefix: item{rmin, rmax}, separated by commas */
    long rmin = mn > np ? mn - np : 0, rmax = no_more ? 0 : mx < 0 ? -1 : mx - np;
    gr_buf tail = {0};
    if (rmax != 0) {
        if (np == 0) {
            if (rmax < 0) gr_buf_printf(&tail, "%s%s (ws \",\" ws %s){%ld,}%s", rmin ? "" : "(", item, item, rmin ? rmin - 1 : 0, rmin ? "" : ")?");
            else gr_buf_printf(&tail, "%s%s (ws \",\" ws %s){%ld,%ld}%s", rmin ? "" : "(", item, item, rmin ? rmin - 1 : 0, rmax - 1, rmin ? "" : ")?");
        } else if (rmax < 0) {
            gr_buf_printf(&tail, "(ws \",\" ws %s){%ld,}", item, rmin);
        } else {
            gr_buf_printf(&tail, "(ws \",\" ws %s){%ld,%ld}", item, rmin, rmax);
        }
    }
    /* the prefix, element i optional (with all after it) once i >= minItems */
    gr_buf body = {0};
    for (long i = 0; i < np; i++) {
        bool opt = i >= mn;
        gr_buf_printf(&body, "%s%s%s ", opt ? "(" : "", i ? "ws \",\" ws " : "", pre[i]);
    }
    gr_buf_puts(&body, tail.p ? tail.p : "\"\"");
    for (long i = np; i-- > 0;) if (i >= mn) gr_buf_puts(&body, ")?");
    shared(s, SH_WS);
    gr_buf_printf(b, "\"[\" ws %s ws \"]\"", body.p);
    if (body.oom || tail.oom) b->oom = true;
    gr_buf_free(&body);
    gr_buf_free(&tail);
    free(pre);
}

/* ------------------------------------------------------------------ combinators */
/* allOf: object schemas merged (properties, required, additionalProperties); one schema as is. */
static cJSON *merge_all_of(sx *s, const cJSON *sch) {
    cJSON *m = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    if (!m || !props || !req) { cJSON_Delete(m); cJSON_Delete(props); cJSON_Delete(req); return NULL; }
    cJSON_AddItemToObject(m, "type", cJSON_CreateString("object"));
    cJSON_AddItemToObject(m, "properties", props);
    cJSON_AddItemToObject(m, "required", req);
    const cJSON *parts[64];
    size_t np = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(sch, "allOf")) if (np < 62) parts[np++] = it;
    const cJSON *own_ref = cJSON_GetObjectItemCaseSensitive(sch, "$ref");
    cJSON ref_part = {.type = cJSON_Object}; /* {"$ref": ...} alone: followed below like allOf items */
    if (own_ref) { ref_part.child = cJSON_Duplicate(own_ref, true); parts[np++] = &ref_part; }
    parts[np++] = sch; /* the siblings take part too ($ref and allOf themselves skipped) */
    bool addl_false = false;
    const cJSON *closed[64]; /* the properties of each part with additionalProperties false (NULL: none) */
    size_t nc = 0;
    for (size_t i = 0; i < np && !s->st; i++) {
        const cJSON *p = parts[i];
        for (int hops = 0; p != sch && cJSON_IsObject(p) && cJSON_GetObjectItemCaseSensitive(p, "$ref") && hops < 32; hops++) {
            const cJSON *ref = cJSON_GetObjectItemCaseSensitive(p, "$ref");
            p = cJSON_IsString(ref) ? resolve(s, ref->valuestring) : NULL;
        }
        if (!cJSON_IsObject(p) || (p != sch && cJSON_GetObjectItemCaseSensitive(p, "$ref"))) {
            unsupported(s, "allOf (of anything but object schemas)");
            break;
        }
        const cJSON *kw;
        cJSON_ArrayForEach(kw, p) {
            const char *k = kw->string;
            if (is_annotation(k) || !strcmp(k, "allOf") || !strcmp(k, "$ref")) continue;
            if (!strcmp(k, "type") && cJSON_IsString(kw) && !strcmp(kw->valuestring, "object")) continue;
            if (!strcmp(k, "properties") && cJSON_IsObject(kw)) {
                const cJSON *q;
                cJSON_ArrayForEach(q, kw) {
                    if (cJSON_GetObjectItemCaseSensitive(props, q->string)) { unsupported(s, "allOf (with a property defined twice)"); break; }
                    cJSON_AddItemToObject(props, q->string, cJSON_Duplicate(q, true));
                }
            } else if (!strcmp(k, "required") && cJSON_IsArray(kw)) {
                const cJSON *q;
                cJSON_ArrayForEach(q, kw) cJSON_AddItemToArray(req, cJSON_Duplicate(q, true));
            } else if (!strcmp(k, "additionalProperties") && cJSON_IsFalse(kw)) {
                addl_false = true;
                const cJSON *pp = cJSON_GetObjectItemCaseSensitive(p, "properties");
                closed[nc++] = cJSON_IsObject(pp) ? pp : NULL;
            } else {
                sx_fail(s, GM_ERR_UNSUPPORTED, "allOf with '%.60s' is not supported (only object schemas are merged)", k);
                break;
            }
        }
    }
    /* A part with additionalProperties false allows only its own properties in the whole object (JSON
     * Schema applies every part to the same instance): another part's property outside it must be absent. */
    for (cJSON *q = props->child, *next; q && !s->st; q = next) {
        next = q->next;
        for (size_t c = 0; c < nc; c++) {
            if (closed[c] && cJSON_GetObjectItemCaseSensitive(closed[c], q->string)) continue;
            const cJSON *r;
            cJSON_ArrayForEach(r, req) if (cJSON_IsString(r) && !strcmp(r->valuestring, q->string)) break;
            if (r)
                sx_fail(s, GM_ERR_FORMAT, "allOf: no object satisfies the parts ('%.60s' is required, and a part with "
                        "additionalProperties false does not declare it)", q->string);
            else
                cJSON_Delete(cJSON_DetachItemViaPointer(props, q));
            break;
        }
    }
    cJSON_Delete(ref_part.child);
    if (addl_false) cJSON_AddItemToObject(m, "additionalProperties", cJSON_CreateFalse());
    if (s->st) { cJSON_Delete(m); return NULL; }
    return m;
}

/* anyOf / oneOf / enum / type lists: alternatives. */
static void alternatives(sx *s, const cJSON *list, const char *kw, gr_buf *b) {
    if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)) { sx_fail(s, GM_ERR_FORMAT, "'%s' must be a non-empty array", kw); return; }
    size_t pn = path_push(s, kw);
    const cJSON *it;
    int i = 0;
    gr_buf_puts(b, "(");
    cJSON_ArrayForEach(it, list) {
        char seg[24], nm[64];
        snprintf(seg, sizeof seg, "%d", i);
        if (gen_at(s, it, seg, kw, nm)) return;
        gr_buf_printf(b, "%s%s", i++ ? " | " : "", nm);
    }
    gr_buf_puts(b, ")");
    path_pop(s, pn);
}

/* ------------------------------------------------------------------ one schema */
/* The types a schema allows: `type`, or the types its keywords talk about, or all. */
static int schema_types(sx *s, const cJSON *sch) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sch, "type");
    int types = 0;
    if (cJSON_IsString(t)) {
        types = type_bit(t->valuestring);
        if (!types) sx_fail(s, GM_ERR_UNSUPPORTED, "type '%.60s' is not supported", t->valuestring);
        return types;
    }
    if (cJSON_IsArray(t)) {
        const cJSON *x;
        cJSON_ArrayForEach(x, t) {
            int bit = cJSON_IsString(x) ? type_bit(x->valuestring) : 0;
            if (!bit) { sx_fail(s, GM_ERR_FORMAT, "'type' holds something that is not a type name%s", NULL); return 0; }
            types |= bit;
        }
        return types;
    }
    if (t) { sx_fail(s, GM_ERR_FORMAT, "'type' must be a string or an array%s", NULL); return 0; }
    const cJSON *kw;
    cJSON_ArrayForEach(kw, sch) {
        int kt = keyword_type(kw->string);
        if (kt > 0) types |= kt;
    }
    return types ? types : T_ALL;
}

static void typed_body(sx *s, const cJSON *sch, int types, const char *hint, gr_buf *b) {
    static const char *const names[] = {"object", "array", "string", "integer", "number", "boolean", "null"};
    if ((types & T_NUMBER) && (types & T_INTEGER)) types &= ~T_INTEGER; /* numbers include integers */
    int n = 0;
    for (int i = 0; i < 7; i++) n += types >> i & 1;
    if (n > 1) gr_buf_puts(b, "(");
    bool alt = false;
    for (int i = 0; i < 7 && !s->st; i++) {
        if (!(types >> i & 1)) continue;
        if (alt) gr_buf_puts(b, " | ");
        alt = true;
        switch (1 << i) {
        case T_OBJECT: object_body(s, sch, hint, b); break;
        case T_ARRAY: array_body(s, sch, b); break;
        case T_STRING: string_body(s, sch, b); break;
        case T_INTEGER: integer_body(s, sch, b); break;
        case T_NUMBER: number_body(s, sch, b); break;
        default: shared(s, 1 << i == T_BOOLEAN ? SH_BOOL : SH_NULL); gr_buf_puts(b, names[i]); break;
        }
    }
    if (n > 1) gr_buf_puts(b, ")");
}

static bool only_annotations_besides(const cJSON *sch, const char *kw) {
    const cJSON *k;
    cJSON_ArrayForEach(k, sch) if (strcmp(k->string, kw) && !is_annotation(k->string)) return false;
    return true;
}

static void schema_body(sx *s, const cJSON *sch, const char *hint, gr_buf *b) {
    if (cJSON_IsTrue(sch)) { shared(s, SH_VALUE); gr_buf_puts(b, "value"); return; }
    if (cJSON_IsFalse(sch)) { sx_fail(s, GM_ERR_FORMAT, "schema false matches nothing%s", NULL); return; }
    if (!cJSON_IsObject(sch)) { sx_fail(s, GM_ERR_FORMAT, "a schema must be an object or a boolean%s", NULL); return; }
    const cJSON *kw;
    cJSON_ArrayForEach(kw, sch) /* every keyword known, or refused by name */
        if (!is_annotation(kw->string) && keyword_type(kw->string) < 0) return (void)unsupported(s, kw->string);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(sch, "$ref");
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(sch, "allOf");
    if (ref && !cJSON_IsString(ref)) { sx_fail(s, GM_ERR_FORMAT, "'$ref' must be a string%s", NULL); return; }
    if (ref && only_annotations_besides(sch, "$ref")) {
        char nm[64];
        if (!gen_ref(s, ref->valuestring, nm)) gr_buf_puts(b, nm);
        return;
    }
    if (all || ref) { /* merged: $ref with siblings is allOf [ref, siblings] */
        if (all && cJSON_GetArraySize(all) == 1 && !ref && only_annotations_besides(sch, "allOf")) {
            char nm[64];
            if (!gen_at(s, cJSON_GetArrayItem(all, 0), "allOf/0", hint, nm)) gr_buf_puts(b, nm);
            return;
        }
        cJSON *m = merge_all_of(s, sch);
        if (m) object_body(s, m, hint, b);
        cJSON_Delete(m);
        return;
    }
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(sch, "const");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sch, "enum");
    if (cst || en) { /* the values themselves (compact); other keywords must agree: checked by the tests */
        if (en && (!cJSON_IsArray(en) || !cJSON_GetArraySize(en))) { sx_fail(s, GM_ERR_FORMAT, "'enum' must be a non-empty array%s", NULL); return; }
        gr_buf_puts(b, "(");
        if (cst) literal(s, b, cst);
        const cJSON *v;
        int i = 0;
        if (!cst) cJSON_ArrayForEach(v, en) { if (i++) gr_buf_puts(b, " | "); literal(s, b, v); }
        gr_buf_puts(b, ")");
        return;
    }
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(sch, "anyOf");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(sch, "oneOf");
    if (any || one) {
        if ((any && one) || !only_annotations_besides(sch, any ? "anyOf" : "oneOf"))
            return (void)unsupported(s, any ? "anyOf (with sibling keywords)" : "oneOf (with sibling keywords)");
        alternatives(s, any ? any : one, any ? "anyOf" : "oneOf", b);
        return;
    }
    int types = schema_types(s, sch);
    if (!s->st) typed_body(s, sch, types, hint, b);
}

static gm_status gen(sx *s, const cJSON *sch, const char *hint, char name[64]) {
    if (s->st) return s->st;
    if (++s->depth > SX_MAX_DEPTH) return sx_fail(s, GM_ERR_UNSUPPORTED, "schema nested deeper than %s levels", "64");
    if (s->rules.n > SX_MAX_TEXT) return sx_fail(s, GM_ERR_NOMEM, "schema too large (the grammar exceeds 16 MB)%s", NULL);
    gr_buf body = {0};
    schema_body(s, sch, hint, &body);
    s->depth--;
    if (!s->st && body.oom) sx_fail(s, GM_ERR_NOMEM, "out of memory%s", NULL);
    if (!s->st) {
        new_name(s, hint, name);
        gr_buf_printf(&s->rules, "%s ::= %s\n", name, body.p ? body.p : "\"\"");
    }
    gr_buf_free(&body);
    return s->st;
}

/* ------------------------------------------------------------------ entry points */
gm_schema_options gm_schema_options_default(void) {
    return (gm_schema_options){.max_indent = 20, .dialect = GM_SCHEMA_JSON, .rule_prefix = ""};
}

/* The root of a call's arguments (every dialect but JSON): the schema they come from ($ref chains
 * followed), which must be an object schema; NULL (s->st set) otherwise. */
static const cJSON *args_root(sx *s, const cJSON *sch) {
    for (int hops = 0; hops < 32 && cJSON_IsObject(sch); hops++) {
        const cJSON *ref = cJSON_GetObjectItemCaseSensitive(sch, "$ref");
        if (!cJSON_IsString(ref) || !only_annotations_besides(sch, "$ref")) break;
        if (!(sch = resolve(s, ref->valuestring))) { sx_fail(s, GM_ERR_UNSUPPORTED, "$ref '%.200s' does not resolve", ref->valuestring); return NULL; }
    }
    static const char *const alt[] = {"enum", "const", "anyOf", "oneOf", "type"};
    for (int i = 0; i < 5 && cJSON_IsObject(sch); i++) {
        const cJSON *kw = cJSON_GetObjectItemCaseSensitive(sch, alt[i]);
        bool ok = !kw || (i == 4 && cJSON_IsString(kw) && !strcmp(kw->valuestring, "object"));
        if (!ok) { dialect_refuses(s, i == 4 ? "a root that is not of type object" : alt[i]); return NULL; }
    }
    bool merged = cJSON_GetObjectItemCaseSensitive(sch, "allOf") || cJSON_GetObjectItemCaseSensitive(sch, "$ref");
    if (!cJSON_IsObject(sch) || (!merged && schema_types(s, sch) != T_OBJECT)) {
        if (!s->st) dialect_refuses(s, "a root that is not an object schema (the call's arguments)");
        return NULL;
    }
    s->root_args = true;
    return sch;
}

/* The root rule: in the tool-call dialects the arguments of an object schema, without brackets. */
static void gen_root(sx *s, const cJSON *doc) {
    char root[64];
    if (s->dialect != GM_SCHEMA_JSON && !(doc = args_root(s, doc))) return;
    if (!gen(s, doc, "root", root)) gr_buf_printf(&s->rules, "root ::= %s\n", root);
    if (!s->st && s->root_args) dialect_refuses(s, "a root that is not an object schema (the call's arguments)");
}

static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* The end of the GBNF element that starts at t[i] and is not a rule name: a literal, a class, a
 * marker token or a count ({m,n}); i itself when it starts none of those. */
static size_t skip_non_name(const char *t, size_t i) {
    char open = t[i], close = open == '"' ? '"' : open == '[' ? ']' : open == '<' ? '>' : open == '{' ? '}' : 0;
    if (!close) return i;
    size_t j = i + 1;
    for (; t[j] && t[j] != close; j++)
        if (t[j] == '\\' && t[j + 1] && close != '>') j++; /* an escape; a marker has none (<|"|>) */
    return t[j] ? j + 1 : j;
}

/* Every rule name in the generated text (words outside literals, classes, markers and counts),
 * definitions and references alike, with prefix in front. */
static void prefix_rules(const char *t, const char *prefix, gr_buf *out) {
    for (size_t i = 0; t[i];) {
        size_t j = skip_non_name(t, i);
        if (j > i) { gr_buf_put(out, t + i, j - i); i = j; continue; }
        if (is_word_char(t[i]) && (i == 0 || !is_word_char(t[i - 1]))) gr_buf_puts(out, prefix);
        gr_buf_put(out, t + i, 1);
        i++;
    }
}

static gm_status check_options(const gm_schema_options *o, gm_error *err) {
    if (o->max_indent < 0 || o->max_indent > 64) return gm_fail(err, GM_ERR_ARG, "json schema: max_indent %d not in [0, 64]", o->max_indent);
    if ((unsigned)o->dialect > GM_SCHEMA_PYTHON) return gm_fail(err, GM_ERR_ARG, "json schema: unknown dialect %d", (int)o->dialect);
    const char *p = o->rule_prefix ? o->rule_prefix : "";
    if (strlen(p) > 32) return gm_fail(err, GM_ERR_ARG, "json schema: rule_prefix longer than 32 characters");
    for (; *p; p++)
        if (!is_word_char(*p)) return gm_fail(err, GM_ERR_ARG, "json schema: rule_prefix may hold only a-z A-Z 0-9 - _");
    return GM_OK;
}

static bool is_json_object_mode(const cJSON *doc) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(doc, "type");
    return cJSON_IsString(t) && !strcmp(t->valuestring, "json_object") && only_annotations_besides(doc, "type");
}

gm_status gm_json_schema_to_gbnf(const char *json, size_t len, const gm_schema_options *opt, char **gbnf,
                                 gm_error *err) {
    if (!json || !gbnf) return gm_fail(err, GM_ERR_ARG, "gm_json_schema_to_gbnf: NULL argument");
    *gbnf = NULL;
    gm_schema_options o = opt ? *opt : gm_schema_options_default();
    gm_status st = check_options(&o, err);
    if (st) return st;
    cJSON *doc = cJSON_ParseWithLength(json, len);
    if (!doc) return gm_fail(err, GM_ERR_FORMAT, "json schema: not valid JSON");
    bool raw = o.dialect == GM_SCHEMA_GEMMA4 || o.dialect == GM_SCHEMA_FUNCTIONGEMMA;
    sx s = {.doc = doc, .err = err, .dialect = o.dialect, .max_indent = raw ? 0 : o.max_indent, /* Gemma: no blanks */
            .smode = {.raw = raw, .no_markers = o.dialect != GM_SCHEMA_JSON || o.exclude_markers}};
    if (is_json_object_mode(doc) && o.dialect == GM_SCHEMA_JSON) {
        shared(&s, SH_VALUE);
        gr_buf_puts(&s.rules, "root ::= object\n");
    } else {
        gen_root(&s, doc);
    }
    st = s.st;
    if (!st && s.rules.oom) st = gm_fail(err, GM_ERR_NOMEM, "json schema: out of memory");
    for (size_t k = 0; k < s.n_refs; k++) { free(s.refs[k].ptr); free(s.refs[k].rule); }
    free(s.refs);
    cJSON_Delete(doc);
    if (st) { gr_buf_free(&s.rules); return st; }
    if (!o.rule_prefix || !o.rule_prefix[0]) { *gbnf = s.rules.p; return GM_OK; }
    gr_buf out = {0};
    prefix_rules(s.rules.p, o.rule_prefix, &out);
    gr_buf_free(&s.rules);
    if (out.oom) { gr_buf_free(&out); return gm_fail(err, GM_ERR_NOMEM, "json schema: out of memory"); }
    *gbnf = out.p;
    return GM_OK;
}

gm_status gm_grammar_from_json_schema(const char *json, size_t len, const gm_schema_options *opt,
                                      gm_grammar **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_grammar_from_json_schema: NULL out");
    *out = NULL;
    char *text = NULL;
    gm_status st = gm_json_schema_to_gbnf(json, len, opt, &text, err);
    if (st) return st;
    const char *prefix = opt && opt->rule_prefix ? opt->rule_prefix : "";
    if (prefix[0]) { /* the prefixed root is meant for a larger grammar: alone, root calls it */
        gr_buf b = {.p = text, .n = strlen(text), .cap = strlen(text) + 1};
        gr_buf_printf(&b, "root ::= %.40sroot\n", prefix);
        if (b.oom) { gr_buf_free(&b); return gm_fail(err, GM_ERR_NOMEM, "json schema: out of memory"); }
        text = b.p;
    }
    st = gm_grammar_from_gbnf(text, strlen(text), out, err);
    if (st) st = gm_fail_prefix(err, "json schema: the generated grammar: ");
    free(text);
    return st;
}
