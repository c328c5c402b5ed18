/* text/chat.c — Gemma's chat turn format, rendered the way the official Gemma 3 chat template
 * (Jinja) renders string contents:
 *   {{ bos_token }}; a first "system" message becomes `content + "\n\n"` prefixed to the first
 *   turn's content; then for each message: '<start_of_turn>' + role ("assistant" -> "model") +
 *   '\n' + content|trim + '<end_of_turn>\n'; roles must alternate user / other starting with user;
 *   '<start_of_turn>model\n' when add_generation_prompt.
 * Note: the system text itself is not trimmed (the template does not trim it either). */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer.h"

#define START "<start_of_turn>"
#define END "<end_of_turn>"

static bool has_turn_tokens(const gm_tokenizer *tok) {
    return gm_token_id(tok, START, strlen(START)) >= 0 && gm_token_id(tok, END, strlen(END)) >= 0;
}

const char *gm_tokenizer_chat_format(const gm_tokenizer *tok) {
    if (!tok || !has_turn_tokens(tok)) return "none";
    const char *t = gm_tokenizer_chat_template(tok);
    if (!t[0]) return "gemma-default";
    if (strstr(t, START) && strstr(t, END)) return "gemma";
    return "gemma-fallback"; /* documented rule: an unrecognised template falls back to Gemma's */
}

/* Python's str.isspace() set, which Jinja's `trim` (str.strip()) uses. */
static bool py_space(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static void trim(const char *s, size_t *begin, size_t *end) {
    const uint8_t *u = (const uint8_t *)s;
    size_t b = 0, e = strlen(s);
    while (b < e) {
        int32_t cp;
        size_t l = gm_utf8_decode(u + b, e - b, &cp);
        if (!py_space(cp)) break;
        b += l;
    }
    while (e > b) {
        size_t k = e - 1;
        while (k > b && e - k < 4 && (u[k] & 0xC0) == 0x80) k--;
        int32_t cp;
        size_t l = gm_utf8_decode(u + k, e - k, &cp);
        if (k + l != e || !py_space(cp)) break;
        e = k;
    }
    *begin = b;
    *end = e;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *np = realloc(b->p, cap);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

gm_status gm_chat_render(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n,
                         bool add_generation_prompt, char **out, gm_error *err) {
    if (out) *out = NULL;
    if (!tok || !out || (!msgs && n)) return gm_fail(err, GM_ERR_ARG, "gm_chat_render: NULL argument");
    if (!has_turn_tokens(tok))
        return gm_fail(err, GM_ERR_UNSUPPORTED,
                       "chat: the vocabulary has no <start_of_turn> / <end_of_turn> tokens; no chat format known");
    if (n == 0) return gm_fail(err, GM_ERR_ARG, "chat: no messages");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content) return gm_fail(err, GM_ERR_ARG, "chat: message %zu has a NULL role or content", i);
    size_t first = 0;
    const char *system = NULL;
    if (!strcmp(msgs[0].role, "system")) {
        system = msgs[0].content;
        first = 1;
    }
    sbuf b = {0};
    size_t bos_len = 0;
    const char *bos = gm_token_text(tok, gm_tokenizer_bos(tok), &bos_len);
    put(&b, bos ? bos : "", bos ? bos_len : 0);
    for (size_t i = first; i < n; i++) {
        const char *role = msgs[i].role;
        bool user_turn = (i - first) % 2 == 0;
        if (!strcmp(role, "user") != user_turn) {
            free(b.p);
            return gm_fail(err, GM_ERR_ARG,
                           "chat: message %zu has role '%s'; roles must alternate user/assistant/user/... "
                           "(an optional system message first)", i, role);
        }
        puts_(&b, START);
        puts_(&b, !strcmp(role, "assistant") ? "model" : role);
        puts_(&b, "\n");
        if (i == first && system) {
            puts_(&b, system);
            puts_(&b, "\n\n");
        }
        size_t cb, ce;
        trim(msgs[i].content, &cb, &ce);
        put(&b, msgs[i].content + cb, ce - cb);
        puts_(&b, END "\n");
    }
    if (add_generation_prompt) puts_(&b, START "model\n");
    if (b.oom || !b.p) {
        free(b.p);
        return gm_fail(err, GM_ERR_NOMEM, "chat: out of memory");
    }
    *out = b.p;
    return GM_OK;
}
