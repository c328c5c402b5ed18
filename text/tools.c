/* text/tools.c — OpenAI-style tools in Gemma's formats: which format a vocabulary speaks, the writers of
 * declarations, calls and results (chat.c renders them into turns), and the parser that reads a model's
 * reply back into content, thoughts and calls.
 *
 * The marker formats (FunctionGemma, Gemma 4) write values as their templates' format_argument does:
 * strings between the quote marker with raw content, numbers and booleans bare, objects `{key:value}`
 * with keys sorted case-insensitively (Jinja's dictsort) and bare in arguments and results, lists
 * `[a,b]`. Gemma 3 has no tool tokens: Google's prompt asks for a Python list of calls
 * `[f(a="x"), g()]`, and only a reply that is exactly such a list (optionally in a code fence) is read as
 * calls — anything else is the reply's text. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "gemma_chat.h"
#include "text/tokenizer.h"
#include "text/tools.h"

static const tool_markers FG_MARKERS = {"<escape>", "<start_function_declaration>", "<end_function_declaration>",
                                        "<start_function_call>", "<end_function_call>", "<start_function_response>",
                                        "<end_function_response>"};
static const tool_markers G4_MARKERS = {"<|\"|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>",
                                        "<|tool_response>", "<tool_response|>"};

const tool_markers *tool_markers_of(gm_tool_format f) {
    return f == GM_TOOLS_GEMMA4 ? &G4_MARKERS : f == GM_TOOLS_FUNCTIONGEMMA ? &FG_MARKERS : NULL;
}

static bool has(const gm_tokenizer *tok, const char *m) { return gm_token_id(tok, m, strlen(m)) >= 0; }

static bool has_markers(const gm_tokenizer *tok, const tool_markers *m) {
    return has(tok, m->quote) && has(tok, m->decl_open) && has(tok, m->decl_close) && has(tok, m->call_open) &&
           has(tok, m->call_close) && has(tok, m->resp_open) && has(tok, m->resp_close);
}

gm_tool_format gm_tokenizer_tool_format(const gm_tokenizer *tok) {
    if (!tok) return GM_TOOLS_NONE;
    const char *chat = gm_tokenizer_chat_format(tok);
    if (!strncmp(chat, "gemma4", 6)) return has_markers(tok, &G4_MARKERS) ? GM_TOOLS_GEMMA4 : GM_TOOLS_NONE;
    if (!strncmp(chat, "gemma", 5)) return has_markers(tok, &FG_MARKERS) ? GM_TOOLS_FUNCTIONGEMMA : GM_TOOLS_GEMMA3;
    return GM_TOOLS_NONE;
}

const char *gm_tool_format_name(gm_tool_format f) {
    switch (f) {
    case GM_TOOLS_GEMMA3: return "gemma3-pythonic";
    case GM_TOOLS_FUNCTIONGEMMA: return "functiongemma";
    case GM_TOOLS_GEMMA4: return "gemma4";
    default: return "none";
    }
}

/* ------------------------------------------------------------------ writers */

static void out_s(const tool_out *o, const char *s) { o->text(o->ctx, s, strlen(s)); }

/* A number as Python's str() writes it for the values JSON gives: whole numbers without a point, others in
 * the fewest digits that read back the same. */
static void out_number(const tool_out *o, double x) {
    char b[40];
    if (x == floor(x) && fabs(x) < 1e16) snprintf(b, sizeof b, "%.0f", x);
    else
        for (int p = 1; p <= 17; p++) {
            snprintf(b, sizeof b, "%.*g", p, x);
            if (strtod(b, NULL) == x) break;
        }
    out_s(o, b);
}

static int key_cmp(const void *a, const void *b) {
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    const int c = strcasecmp(x->string, y->string);
    return c ? c : strcmp(x->string, y->string);
}

/* An object's members sorted as dictsort sorts them (malloc'd; NULL with *n = 0 when empty). */
static const cJSON **sorted_members(const cJSON *obj, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(obj);
    if (!*n) return NULL;
    const cJSON **v = malloc(*n * sizeof *v);
    if (!v) return *n = 0, NULL;
    size_t k = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, obj) v[k++] = c;
    qsort(v, *n, sizeof *v, key_cmp);
    return v;
}

static void out_quoted(const tool_out *o, const char *q, const char *s) {
    o->marker(o->ctx, q);
    out_s(o, s);
    o->marker(o->ctx, q);
}

/* format_argument: escape_keys quotes object keys (declarations), bare otherwise (arguments, results). */
static void out_value(const tool_out *o, const char *q, const cJSON *v, bool escape_keys) {
    if (cJSON_IsString(v)) out_quoted(o, q, v->valuestring);
    else if (cJSON_IsBool(v)) out_s(o, cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNumber(v)) out_number(o, v->valuedouble);
    else if (cJSON_IsNull(v)) out_s(o, "None"); /* Jinja prints Python's None */
    else if (cJSON_IsArray(v)) {
        out_s(o, "[");
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (e != v->child) out_s(o, ",");
            out_value(o, q, e, escape_keys);
        }
        out_s(o, "]");
    } else if (cJSON_IsObject(v)) {
        size_t n;
        const cJSON **m = sorted_members(v, &n);
        out_s(o, "{");
        for (size_t i = 0; i < n; i++) {
            if (i) out_s(o, ",");
            if (escape_keys) out_quoted(o, q, m[i]->string);
            else out_s(o, m[i]->string);
            out_s(o, ":");
            out_value(o, q, m[i], escape_keys);
        }
        out_s(o, "}");
        free(m);
    }
}

/* A schema's type upper-cased (a list of types: its first that is not null). */
static void out_type(const tool_out *o, const char *q, const cJSON *t) {
    if (cJSON_IsArray(t)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, t) if (cJSON_IsString(e) && strcmp(e->valuestring, "null")) { t = e; break; }
    }
    char up[32] = "";
    if (cJSON_IsString(t))
        for (size_t i = 0; i < sizeof up - 1 && t->valuestring[i]; i++) up[i] = (char)toupper((unsigned char)t->valuestring[i]), up[i + 1] = 0;
    out_quoted(o, q, up);
}

static void out_required(const tool_out *o, const char *q, const cJSON *req) {
    out_s(o, "required:[");
    const cJSON *e;
    cJSON_ArrayForEach(e, req) {
        if (e != req->child) out_s(o, ",");
        out_quoted(o, q, cJSON_IsString(e) ? e->valuestring : "");
    }
    out_s(o, "]");
}

static bool type_is(const cJSON *sch, const char *t) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(sch, "type");
    if (cJSON_IsString(ty)) return !strcasecmp(ty->valuestring, t);
    const cJSON *e;
    if (cJSON_IsArray(ty)) cJSON_ArrayForEach(e, ty) if (cJSON_IsString(e) && !strcasecmp(e->valuestring, t)) return true;
    return false;
}

static void out_properties(const tool_out *o, const char *q, const cJSON *props);

/* `items:{...}` of an array property: its keys sorted, properties / required / type as the template writes them. */
static void out_items(const tool_out *o, const char *q, const cJSON *items) {
    size_t n;
    const cJSON **m = sorted_members(items, &n);
    out_s(o, "items:{");
    for (size_t i = 0, first = 1; i < n; i++) {
        const cJSON *v = m[i];
        if (cJSON_IsNull(v)) continue;
        if (!first) out_s(o, ",");
        first = 0;
        if (!strcmp(v->string, "properties")) {
            out_s(o, "properties:{");
            if (cJSON_IsObject(v)) out_properties(o, q, v);
            out_s(o, "}");
        } else if (!strcmp(v->string, "required") && cJSON_IsArray(v)) {
            out_required(o, q, v);
        } else if (!strcmp(v->string, "type")) {
            out_s(o, "type:");
            out_type(o, q, v);
        } else {
            out_s(o, v->string);
            out_s(o, ":");
            out_value(o, q, v, true);
        }
    }
    out_s(o, "}");
    free(m);
}

/* format_parameters: each property `name:{description:..,enum:..,items:..,nullable:true,properties:..,
 * required:..,type:..}` in key order. */
static void out_properties(const tool_out *o, const char *q, const cJSON *props) {
    size_t n;
    const cJSON **m = sorted_members(props, &n);
    for (size_t i = 0; i < n; i++) {
        const cJSON *v = m[i];
        if (i) out_s(o, ",");
        out_s(o, v->string);
        out_s(o, ":{");
        bool comma = false;
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(v, "description");
        if (cJSON_IsString(d) && d->valuestring[0]) {
            out_s(o, "description:");
            out_quoted(o, q, d->valuestring);
            comma = true;
        }
        const cJSON *en = cJSON_GetObjectItemCaseSensitive(v, "enum"), *it = cJSON_GetObjectItemCaseSensitive(v, "items");
        if (type_is(v, "string") && cJSON_IsArray(en) && en->child) {
            out_s(o, comma ? ",enum:" : "enum:");
            out_value(o, q, en, true);
            comma = true;
        } else if (type_is(v, "array") && cJSON_IsObject(it) && it->child) {
            if (comma) out_s(o, ",");
            out_items(o, q, it);
            comma = true;
        }
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "nullable")) || type_is(v, "null")) {
            out_s(o, comma ? ",nullable:true" : "nullable:true");
            comma = true;
        }
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(v, "properties"), *rq = cJSON_GetObjectItemCaseSensitive(v, "required");
        if (type_is(v, "object") && cJSON_IsObject(pp)) {
            out_s(o, comma ? ",properties:{" : "properties:{");
            out_properties(o, q, pp);
            out_s(o, "}");
            comma = true;
        }
        if (type_is(v, "object") && cJSON_IsArray(rq) && rq->child) {
            if (comma) out_s(o, ",");
            out_required(o, q, rq);
            comma = true;
        }
        out_s(o, comma ? ",type:" : "type:");
        out_type(o, q, cJSON_GetObjectItemCaseSensitive(v, "type"));
        out_s(o, "}");
    }
    free(m);
}

static cJSON *parse_object(const char *text, const char *what, const char *name, gm_error *err) {
    cJSON *v = cJSON_Parse(text);
    if (!cJSON_IsObject(v)) {
        cJSON_Delete(v);
        gm_fail(err, GM_ERR_ARG, "tool '%.64s': the %s are not a JSON object", name, what);
        return NULL;
    }
    return v;
}

bool tool_write_declaration(const tool_out *o, gm_tool_format f, const gm_tool *t, gm_error *err) {
    const char *q = tool_markers_of(f)->quote;
    cJSON *params = NULL;
    if (t->parameters && !(params = parse_object(t->parameters, "parameters", t->name, err))) return false;
    out_s(o, "declaration:");
    out_s(o, t->name);
    out_s(o, "{description:");
    out_quoted(o, q, t->description ? t->description : "");
    if (params && params->child) {
        out_s(o, ",parameters:{");
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(params, "properties");
        const cJSON *rq = cJSON_GetObjectItemCaseSensitive(params, "required");
        if (cJSON_IsObject(pp) && pp->child) {
            out_s(o, "properties:{");
            out_properties(o, q, pp);
            out_s(o, "},");
        }
        if (cJSON_IsArray(rq) && rq->child) {
            out_required(o, q, rq);
            out_s(o, ",");
        }
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(params, "type");
        out_s(o, "type:");
        if (ty) out_type(o, q, ty);
        else out_quoted(o, q, "OBJECT");
        out_s(o, "}");
    }
    out_s(o, "}");
    cJSON_Delete(params);
    return true;
}

bool tool_write_call(const tool_out *o, gm_tool_format f, const gm_tool_call *c, gm_error *err) {
    cJSON *args = parse_object(c->arguments, "call's arguments", c->name, err);
    if (!args) return false;
    if (f == GM_TOOLS_GEMMA3) { /* name(k=<JSON>, ...), in the arguments' order */
        out_s(o, c->name);
        out_s(o, "(");
        const cJSON *a;
        cJSON_ArrayForEach(a, args) {
            char *j = cJSON_PrintUnformatted(a);
            if (a != args->child) out_s(o, ", ");
            out_s(o, a->string);
            out_s(o, "=");
            out_s(o, j ? j : "null");
            free(j);
        }
        out_s(o, ")");
    } else {
        out_s(o, "call:");
        out_s(o, c->name);
        out_value(o, tool_markers_of(f)->quote, args, false);
    }
    cJSON_Delete(args);
    return true;
}

void tool_write_response(const tool_out *o, gm_tool_format f, const char *name, const char *content) {
    out_s(o, "response:");
    out_s(o, name);
    out_s(o, "{value:");
    out_quoted(o, tool_markers_of(f)->quote, content ? content : "");
    out_s(o, "}");
}

bool tool_write_gemma3_preamble(const tool_out *o, const gm_tool *tools, size_t n, gm_error *err) {
    cJSON *list = cJSON_CreateArray();
    for (size_t i = 0; list && i < n; i++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddItemToArray(list, t);
        cJSON_AddStringToObject(t, "name", tools[i].name);
        if (tools[i].description) cJSON_AddStringToObject(t, "description", tools[i].description);
        if (tools[i].parameters) {
            cJSON *p = parse_object(tools[i].parameters, "parameters", tools[i].name, err);
            if (!p) {
                cJSON_Delete(list);
                return false;
            }
            cJSON_AddItemToObject(t, "parameters", p);
        }
    }
    char *j = list ? cJSON_PrintUnformatted(list) : NULL;
    cJSON_Delete(list);
    if (!j) {
        gm_fail(err, GM_ERR_NOMEM, "chat: out of memory");
        return false;
    }
    /* Google's function-calling prompt for Gemma 3 (ai.google.dev/gemma/docs/capabilities/function-calling) */
    out_s(o, "You have access to functions. If you decide to invoke any of the function(s), you MUST put it in the "
             "format of\n[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]\n"
             "You SHOULD NOT include any other text in the response if you call a function\n");
    out_s(o, j);
    out_s(o, "\n\n");
    free(j);
    return true;
}

/* ------------------------------------------------------------------ reading replies */

typedef struct parsed_call {
    char *name, *arguments;
} parsed_call;

typedef enum { P_TEXT, P_CALL, P_THOUGHT, P_HOLD } pstate;

#define QUOTE_BYTE '\x01' /* the quote marker inside a call body being read (the body is otherwise text) */

struct gm_tool_parser {
    const gm_tokenizer *tok;
    gm_tool_format tf;
    char **names;
    size_t n_names;
    int32_t call_open, call_close, quote, stop, ch_open, ch_close;
    pstate st;
    gm_detok_stream *ds;
    sbuf out;       /* what the last push / finish returns */
    sbuf body;      /* a marker call being read, or Gemma 3's held reply */
    sbuf reasoning;
    parsed_call *calls;
    size_t n_calls, cap_calls;
};

static int32_t id_of(const gm_tokenizer *tok, const char *m) { return m ? gm_token_id(tok, m, strlen(m)) : -1; }

gm_status gm_tool_parser_new(const gm_tokenizer *tok, const gm_tool *tools, size_t n_tools, gm_tool_parser **out,
                             gm_error *err) {
    if (out) *out = NULL;
    if (!tok || !out || (!tools && n_tools)) return gm_fail(err, GM_ERR_ARG, "gm_tool_parser_new: NULL argument");
    gm_tool_parser *p = calloc(1, sizeof *p);
    if (!p || (n_tools && !(p->names = calloc(n_tools, sizeof *p->names)))) {
        free(p);
        return gm_fail(err, GM_ERR_NOMEM, "tool parser: out of memory");
    }
    p->tok = tok;
    p->tf = gm_tokenizer_tool_format(tok);
    for (size_t i = 0; i < n_tools; i++) {
        if (!tools[i].name || !(p->names[p->n_names++] = strdup(tools[i].name))) {
            gm_tool_parser_free(p);
            return gm_fail(err, tools[i].name ? GM_ERR_NOMEM : GM_ERR_ARG, "tool parser: tool %zu has no name", i);
        }
    }
    const tool_markers *mk = tool_markers_of(p->tf);
    p->call_open = id_of(tok, mk ? mk->call_open : NULL);
    p->call_close = id_of(tok, mk ? mk->call_close : NULL);
    p->quote = id_of(tok, mk ? mk->quote : NULL);
    p->stop = id_of(tok, mk ? mk->resp_open : NULL);
    p->ch_open = p->tf == GM_TOOLS_GEMMA4 ? id_of(tok, "<|channel>") : -1;
    p->ch_close = p->tf == GM_TOOLS_GEMMA4 ? id_of(tok, "<channel|>") : -1;
    p->st = p->tf == GM_TOOLS_GEMMA3 ? P_HOLD : P_TEXT;
    gm_status st = gm_detok_stream_new(tok, false, &p->ds, err);
    if (st) {
        gm_tool_parser_free(p);
        return st;
    }
    *out = p;
    return GM_OK;
}

void gm_tool_parser_free(gm_tool_parser *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_names; i++) free(p->names[i]);
    for (size_t i = 0; i < p->n_calls; i++) free(p->calls[i].name), free(p->calls[i].arguments);
    free(p->names);
    free(p->calls);
    free(p->out.p);
    free(p->body.p);
    free(p->reasoning.p);
    gm_detok_stream_free(p->ds);
    free(p);
}

size_t gm_tool_parser_n_calls(const gm_tool_parser *p) { return p ? p->n_calls : 0; }

void gm_tool_parser_call(const gm_tool_parser *p, size_t i, const char **name, const char **arguments) {
    const bool ok = p && i < p->n_calls;
    if (name) *name = ok ? p->calls[i].name : NULL;
    if (arguments) *arguments = ok ? p->calls[i].arguments : NULL;
}

const char *gm_tool_parser_reasoning(const gm_tool_parser *p, size_t *len) {
    if (len) *len = p ? p->reasoning.n : 0;
    return p && p->reasoning.p ? p->reasoning.p : "";
}

static bool known_name(const gm_tool_parser *p, const char *name) {
    for (size_t i = 0; i < p->n_names; i++)
        if (!strcmp(p->names[i], name)) return true;
    return false;
}

/* ---- a cursor over a reply's text */
typedef struct cur {
    const char *s, *end;
} cur;

static void ws(cur *c) {
    while (c->s < c->end && (*c->s == ' ' || *c->s == '\n' || *c->s == '\t' || *c->s == '\r')) c->s++;
}
static bool eat(cur *c, char ch) {
    ws(c);
    if (c->s < c->end && *c->s == ch) return c->s++, true;
    return false;
}
bool tool_name_char(char ch) { return isalnum((unsigned char)ch) || ch == '_' || ch == '-' || ch == '.'; }

/* A function name: [A-Za-z0-9_.-]{1,64}, NUL-terminated into out. */
static bool read_name(cur *c, char out[65]) {
    ws(c);
    size_t n = 0;
    while (c->s < c->end && tool_name_char(*c->s) && n < 64) out[n++] = *c->s++;
    out[n] = 0;
    return n > 0 && !(c->s < c->end && tool_name_char(*c->s));
}

/* A bare scalar up to a delimiter: a number, true / false / null (Python's spellings too), else a string. */
static cJSON *scalar(const char *s, size_t n) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t')) n--;
    char *t = malloc(n + 1);
    if (!t) return NULL;
    memcpy(t, s, n);
    t[n] = 0;
    cJSON *v;
    char *end = NULL;
    const double x = n ? strtod(t, &end) : 0;
    if (!strcmp(t, "true") || !strcmp(t, "True")) v = cJSON_CreateTrue();
    else if (!strcmp(t, "false") || !strcmp(t, "False")) v = cJSON_CreateFalse();
    else if (!strcmp(t, "null") || !strcmp(t, "None")) v = cJSON_CreateNull();
    else if (n && end && !*end && isfinite(x) && (isdigit((unsigned char)t[0]) || t[0] == '-')) v = cJSON_CreateNumber(x);
    else v = n ? cJSON_CreateString(t) : NULL;
    free(t);
    return v;
}

/* ---- the marker formats' values: quote-byte strings, {k:v}, [a,b], bare scalars */
static cJSON *dict_value(cur *c, int depth);

static cJSON *dict_string(cur *c) {
    const char *b = c->s;
    while (c->s < c->end && *c->s != QUOTE_BYTE) c->s++;
    if (c->s >= c->end) return NULL;
    char *t = malloc((size_t)(c->s - b) + 1);
    if (!t) return NULL;
    memcpy(t, b, (size_t)(c->s - b));
    t[c->s - b] = 0;
    c->s++;
    cJSON *v = gm_text_is_utf8(t, strlen(t)) ? cJSON_CreateString(t) : NULL;
    free(t);
    return v;
}

static cJSON *dict_object(cur *c, int depth) {
    cJSON *o = cJSON_CreateObject();
    if (eat(c, '}')) return o;
    do {
        ws(c);
        char *key = NULL;
        if (c->s < c->end && *c->s == QUOTE_BYTE) {
            c->s++;
            cJSON *k = dict_string(c);
            key = k ? strdup(k->valuestring) : NULL;
            cJSON_Delete(k);
        } else {
            const char *b = c->s;
            while (c->s < c->end && *c->s != ':' && !strchr(",{}[]", *c->s) && *c->s != QUOTE_BYTE) c->s++;
            size_t n = (size_t)(c->s - b);
            while (n && (b[n - 1] == ' ' || b[n - 1] == '\n')) n--;
            if (n && (key = malloc(n + 1))) memcpy(key, b, n), key[n] = 0;
        }
        cJSON *v = key && gm_text_is_utf8(key, strlen(key)) && eat(c, ':') ? dict_value(c, depth + 1) : NULL;
        if (!v || cJSON_GetObjectItemCaseSensitive(o, key)) {
            free(key);
            cJSON_Delete(v);
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToObject(o, key, v);
        free(key);
    } while (eat(c, ','));
    if (!eat(c, '}')) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

static cJSON *dict_value(cur *c, int depth) {
    if (depth > 64) return NULL;
    ws(c);
    if (c->s >= c->end) return NULL;
    if (*c->s == QUOTE_BYTE) return c->s++, dict_string(c);
    if (*c->s == '{') return c->s++, dict_object(c, depth);
    if (*c->s == '[') {
        c->s++;
        cJSON *a = cJSON_CreateArray();
        if (eat(c, ']')) return a;
        do {
            cJSON *v = dict_value(c, depth + 1);
            if (!v) return cJSON_Delete(a), NULL;
            cJSON_AddItemToArray(a, v);
        } while (eat(c, ','));
        if (!eat(c, ']')) return cJSON_Delete(a), NULL;
        return a;
    }
    const char *b = c->s;
    while (c->s < c->end && !strchr(",}]", *c->s) && *c->s != QUOTE_BYTE) c->s++;
    return scalar(b, (size_t)(c->s - b));
}

/* `call:NAME{...}` of a declared function into a call; false when it is anything else. */
static bool add_call(gm_tool_parser *p, const char *name, cJSON *args) {
    char *a = args ? cJSON_PrintUnformatted(args) : NULL;
    char *n = strdup(name);
    if (!a || !n || (p->n_calls == p->cap_calls &&
                     !(p->cap_calls = p->cap_calls ? p->cap_calls * 2 : 4,
                       p->calls = realloc(p->calls, p->cap_calls * sizeof *p->calls)))) {
        free(a), free(n);
        return false;
    }
    p->calls[p->n_calls++] = (parsed_call){n, a};
    return true;
}

static bool read_marker_call(gm_tool_parser *p) {
    cur c = {p->body.p ? p->body.p : "", (p->body.p ? p->body.p : "") + p->body.n};
    char name[65];
    ws(&c);
    if ((size_t)(c.end - c.s) < 5 || memcmp(c.s, "call:", 5)) return false;
    c.s += 5;
    if (!read_name(&c, name) || !known_name(p, name) || !eat(&c, '{')) return false;
    cJSON *args = dict_object(&c, 0);
    ws(&c);
    const bool ok = args && c.s == c.end && add_call(p, name, args);
    cJSON_Delete(args);
    return ok;
}

/* ---- Gemma 3: a Python list of calls */
static cJSON *py_value(cur *c, int depth);

static cJSON *py_string(cur *c) {
    const char q = *c->s++;
    sbuf b = {0};
    while (c->s < c->end && *c->s != q) {
        char ch = *c->s++;
        if (ch == '\\' && c->s < c->end) {
            ch = *c->s++;
            switch (ch) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'u': { /* \uXXXX, as UTF-8 (surrogates are refused) */
                unsigned v = 0;
                int k = 0;
                for (; k < 4 && c->s < c->end && isxdigit((unsigned char)*c->s); k++, c->s++)
                    v = v * 16 + (unsigned)(isdigit((unsigned char)*c->s) ? *c->s - '0' : (tolower((unsigned char)*c->s) - 'a' + 10));
                if (k < 4 || (v >= 0xD800 && v <= 0xDFFF)) { free(b.p); return NULL; }
                char u[4];
                sb_put(&b, u, gm_utf8_encode(v, u));
                continue;
            }
            default: break; /* \\ \" \' and anything else: the character itself */
            }
        }
        sb_put(&b, &ch, 1);
    }
    if (c->s >= c->end || b.oom) { free(b.p); return NULL; }
    c->s++;
    cJSON *v = gm_text_is_utf8(b.p ? b.p : "", b.n) ? cJSON_CreateString(b.p ? b.p : "") : NULL;
    free(b.p);
    return v;
}

static cJSON *py_seq(cur *c, char close, int depth) {
    cJSON *a = cJSON_CreateArray();
    if (eat(c, close)) return a;
    do {
        ws(c);
        if (c->s < c->end && *c->s == close) break; /* a trailing comma */
        cJSON *v = py_value(c, depth + 1);
        if (!v) return cJSON_Delete(a), NULL;
        cJSON_AddItemToArray(a, v);
    } while (eat(c, ','));
    if (!eat(c, close)) return cJSON_Delete(a), NULL;
    return a;
}

static cJSON *py_value(cur *c, int depth) {
    if (depth > 64) return NULL;
    ws(c);
    if (c->s >= c->end) return NULL;
    if (*c->s == '"' || *c->s == '\'') return py_string(c);
    if (*c->s == '[') return c->s++, py_seq(c, ']', depth);
    if (*c->s == '(') return c->s++, py_seq(c, ')', depth);
    if (*c->s == '{') {
        c->s++;
        cJSON *o = cJSON_CreateObject();
        if (eat(c, '}')) return o;
        do {
            ws(c);
            cJSON *k = c->s < c->end && (*c->s == '"' || *c->s == '\'') ? py_string(c) : NULL;
            cJSON *v = k && eat(c, ':') ? py_value(c, depth + 1) : NULL;
            if (!v || cJSON_GetObjectItemCaseSensitive(o, k->valuestring)) {
                cJSON_Delete(k), cJSON_Delete(v), cJSON_Delete(o);
                return NULL;
            }
            cJSON_AddItemToObject(o, k->valuestring, v);
            cJSON_Delete(k);
        } while (eat(c, ','));
        if (!eat(c, '}')) return cJSON_Delete(o), NULL;
        return o;
    }
    const char *b = c->s;
    while (c->s < c->end && (isalnum((unsigned char)*c->s) || strchr("+-._", *c->s))) c->s++;
    cJSON *v = scalar(b, (size_t)(c->s - b));
    if (v && cJSON_IsString(v)) return cJSON_Delete(v), NULL; /* a bare name: a variable, not a value */
    return v;
}

/* name(k=v, ...) */
static bool py_call(gm_tool_parser *p, cur *c) {
    char name[65];
    if (!read_name(c, name) || !known_name(p, name) || !eat(c, '(')) return false;
    cJSON *args = cJSON_CreateObject();
    bool ok = true;
    if (!eat(c, ')')) {
        do {
            ws(c);
            if (c->s < c->end && *c->s == ')') break;
            char key[65];
            cJSON *v = read_name(c, key) && eat(c, '=') ? py_value(c, 0) : NULL;
            if (!v || cJSON_GetObjectItemCaseSensitive(args, key)) {
                cJSON_Delete(v);
                ok = false;
                break;
            }
            cJSON_AddItemToObject(args, key, v);
        } while (eat(c, ','));
        ok = ok && eat(c, ')');
    }
    ok = ok && add_call(p, name, args);
    cJSON_Delete(args);
    return ok;
}

/* The whole reply is `[call, ...]`, bare or in a ``` fence (```tool_code, ```python): its calls. */
static bool read_call_list(gm_tool_parser *p) {
    cur c = {p->body.p ? p->body.p : "", (p->body.p ? p->body.p : "") + p->body.n};
    ws(&c);
    bool fence = (size_t)(c.end - c.s) >= 3 && !memcmp(c.s, "```", 3);
    if (fence) {
        while (c.s < c.end && *c.s != '\n') c.s++;
        while (c.end > c.s && (c.end[-1] == ' ' || c.end[-1] == '\n')) c.end--;
        if ((size_t)(c.end - c.s) < 3 || memcmp(c.end - 3, "```", 3)) return false;
        c.end -= 3;
    }
    const size_t before = p->n_calls;
    bool ok = eat(&c, '[');
    if (ok) {
        do ok = py_call(p, &c);
        while (ok && eat(&c, ','));
    }
    ok = ok && eat(&c, ']');
    ws(&c);
    ok = ok && c.s == c.end;
    while (!ok && p->n_calls > before) { /* all or nothing */
        p->n_calls--;
        free(p->calls[p->n_calls].name), free(p->calls[p->n_calls].arguments);
    }
    return ok;
}

/* Gemma 3: can the held reply still become a call list? Blank so far, a fence, or `[` and a name and `(`. */
static bool may_be_call_list(const gm_tool_parser *p) {
    cur c = {p->body.p ? p->body.p : "", (p->body.p ? p->body.p : "") + p->body.n};
    ws(&c);
    if (c.s == c.end || *c.s == '`') return true;
    if (*c.s++ != '[') return false;
    ws(&c);
    while (c.s < c.end && tool_name_char(*c.s)) c.s++;
    ws(&c);
    return c.s == c.end || *c.s == '(';
}

static void release_body(gm_tool_parser *p, const char *open) {
    if (open) sb_puts(&p->out, open);
    const char *q = p->tf != GM_TOOLS_GEMMA3 ? tool_markers_of(p->tf)->quote : "";
    for (size_t i = 0; i < p->body.n; i++) {
        if (p->body.p[i] == QUOTE_BYTE && p->tf != GM_TOOLS_GEMMA3) sb_puts(&p->out, q);
        else sb_put(&p->out, p->body.p + i, 1);
    }
    p->body.n = 0;
}

static void take_text(gm_tool_parser *p, int32_t id) {
    const char *t = NULL;
    size_t n = 0;
    if (gm_detok_stream_push(p->ds, id, &t, &n, NULL)) return;
    if (p->st == P_HOLD) {
        sb_put(&p->body, t, n);
        if (!may_be_call_list(p)) {
            release_body(p, NULL);
            p->st = P_TEXT;
        }
    } else {
        sb_put(&p->out, t, n);
    }
}

static void flush_text(gm_tool_parser *p) {
    const char *t = NULL;
    size_t n = 0;
    gm_detok_stream_flush(p->ds, &t, &n);
    sb_put(p->st == P_HOLD ? &p->body : &p->out, t, n);
}

/* A token outside calls and thoughts; true when it ends a calling turn. */
static bool take_outside(gm_tool_parser *p, int32_t id) {
    if (id >= 0 && id == p->call_open) {
        flush_text(p);
        p->body.n = 0;
        p->st = P_CALL;
    } else if (id >= 0 && id == p->ch_open) {
        flush_text(p);
        p->st = P_THOUGHT;
    } else if (id >= 0 && id == p->stop) {
        return true;
    } else {
        take_text(p, id);
    }
    return false;
}

static void take_piece(gm_tool_parser *p, int32_t id, sbuf *into) {
    const char *piece = NULL;
    size_t len = 0;
    if (!gm_token_to_piece(p->tok, id, false, &piece, &len, NULL)) sb_put(into, piece, len);
}

bool gm_tool_parser_push(gm_tool_parser *p, int32_t id, const char **text, size_t *n) {
    bool stop = false;
    p->out.n = 0;
    if (p->st == P_CALL) {
        const tool_markers *mk = tool_markers_of(p->tf);
        if (id == p->call_close) {
            if (!read_marker_call(p)) {
                release_body(p, mk->call_open);
                sb_puts(&p->out, mk->call_close);
            }
            p->body.n = 0;
            p->st = P_TEXT;
        } else if (id == p->quote) {
            sb_put(&p->body, (const char[]){QUOTE_BYTE}, 1);
        } else if (gm_token_is_marker(p->tok, id)) { /* a call cut short by another marker: it was text */
            release_body(p, mk->call_open);
            p->st = P_TEXT;
            stop = take_outside(p, id);
        } else {
            take_piece(p, id, &p->body);
        }
    } else if (p->st == P_THOUGHT) {
        if (id == p->ch_close) p->st = P_TEXT;
        else take_piece(p, id, &p->reasoning);
    } else {
        stop = take_outside(p, id);
    }
    if (p->out.oom) p->out.n = 0;
    *text = p->out.p ? p->out.p : "";
    *n = p->out.n;
    return stop;
}

void gm_tool_parser_finish(gm_tool_parser *p, const char **text, size_t *n) {
    p->out.n = 0;
    flush_text(p);
    if (p->st == P_HOLD && !read_call_list(p)) release_body(p, NULL);
    else if (p->st == P_CALL) release_body(p, tool_markers_of(p->tf)->call_open);
    p->body.n = 0;
    p->st = P_TEXT;
    if (p->out.oom) p->out.n = 0;
    *text = p->out.p ? p->out.p : "";
    *n = p->out.n;
}
