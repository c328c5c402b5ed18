/* text/chat.c — Gemma's chat turn formats, rendered the way the official chat templates (Jinja) render
 * string contents.
 * Gemma 1-3 / 3n (the Gemma 3 template):
 *   {{ bos_token }}; a first "system" message becomes `content + "\n\n"` prefixed to the first
 *   turn's content; then for each message: '<start_of_turn>' + role ("assistant" -> "model") +
 *   '\n' + content|trim + '<end_of_turn>\n'; roles must alternate user / other starting with user;
 *   '<start_of_turn>model\n' when add_generation_prompt. The system text is not trimmed (the template
 *   does not trim it either).
 * Gemma 4 (llama.cpp's models/templates/google-gemma-4-31B-it.jinja, thinking off, no tools):
 *   {{ bos_token }}; a first "system" message is its own turn '<|turn>system\n' + content|trim +
 *   '<turn|>\n'; each message '<|turn>' + role + '\n' + content|trim + '<turn|>\n'; the generation
 *   prompt '<|turn>model\n<|channel>thought\n<channel|>' (an empty thought channel: no thinking).
 * The format is Gemma 4's when the vocabulary has its turn tokens and no Gemma 3 ones. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "text/tokenizer.h"

/* One turn format: its markers (special tokens) and where the system prompt goes. */
typedef struct chat_format {
    const char *start, *end;  /* opens a turn (followed by the role), closes it */
    bool system_turn;         /* Gemma 4: the system prompt is a turn; Gemma 3: prefixed to the first turn */
    const char *channel_open, *channel_close; /* Gemma 4: the empty thought channel after the prompt */
} chat_format;

static const chat_format GEMMA3 = {"<start_of_turn>", "<end_of_turn>", false, NULL, NULL};
static const chat_format GEMMA4 = {"<|turn>", "<turn|>", true, "<|channel>", "<channel|>"};

static int32_t marker(const gm_tokenizer *tok, const char *text) {
    return text ? gm_token_id(tok, text, strlen(text)) : -1;
}

static bool has_format(const gm_tokenizer *tok, const chat_format *f) {
    return marker(tok, f->start) >= 0 && marker(tok, f->end) >= 0 &&
           (!f->channel_open || (marker(tok, f->channel_open) >= 0 && marker(tok, f->channel_close) >= 0));
}

/* Gemma 3's turns when the vocabulary has them, else Gemma 4's, else none. */
static const chat_format *format_of(const gm_tokenizer *tok) {
    if (has_format(tok, &GEMMA3)) return &GEMMA3;
    if (has_format(tok, &GEMMA4)) return &GEMMA4;
    return NULL;
}

const char *gm_tokenizer_chat_format(const gm_tokenizer *tok) {
    const chat_format *f = tok ? format_of(tok) : NULL;
    if (!f) return "none";
    const char *t = gm_tokenizer_chat_template(tok);
    const bool g4 = f == &GEMMA4;
    if (!t[0]) return g4 ? "gemma4-default" : "gemma-default";
    if (strstr(t, f->start) && strstr(t, f->end)) return g4 ? "gemma4" : "gemma";
    /* documented rule: an unrecognised template falls back to the vocabulary's Gemma format */
    return g4 ? "gemma4-fallback" : "gemma-fallback";
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
    const chat_format *f = format_of(tok);
    if (!f)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "chat: the vocabulary has neither <start_of_turn> / <end_of_turn> "
                       "(Gemma 1-3) nor <|turn> / <turn|> (Gemma 4) tokens; no chat format known");
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
    if (system && f->system_turn) {
        size_t cb, ce;
        trim(system, &cb, &ce);
        puts_(&b, f->start);
        puts_(&b, "system\n");
        put(&b, system + cb, ce - cb);
        puts_(&b, f->end);
        puts_(&b, "\n");
    }
    for (size_t i = first; i < n; i++) {
        const char *role = msgs[i].role;
        bool user_turn = (i - first) % 2 == 0;
        if (!strcmp(role, "user") != user_turn) {
            free(b.p);
            return gm_fail(err, GM_ERR_ARG,
                           "chat: message %zu has role '%s'; roles must alternate user/assistant/user/... "
                           "(an optional system message first)", i, role);
        }
        puts_(&b, f->start);
        puts_(&b, !strcmp(role, "assistant") ? "model" : role);
        puts_(&b, "\n");
        if (i == first && system && !f->system_turn) {
            puts_(&b, system);
            puts_(&b, "\n\n");
        }
        size_t cb, ce;
        trim(msgs[i].content, &cb, &ce);
        put(&b, msgs[i].content + cb, ce - cb);
        puts_(&b, f->end);
        puts_(&b, "\n");
    }
    if (add_generation_prompt) {
        puts_(&b, f->start);
        puts_(&b, "model\n");
        if (f->channel_open) {
            puts_(&b, f->channel_open);
            puts_(&b, "thought\n");
            puts_(&b, f->channel_close);
        }
    }
    if (b.oom || !b.p) {
        free(b.p);
        return gm_fail(err, GM_ERR_NOMEM, "chat: out of memory");
    }
    *out = b.p;
    return GM_OK;
}

/* ---- the same turns as token ids, contents never parsed for control tokens.
 * The rendered text, tokenized with parse_special, splits at each marker and encodes the text between
 * two markers as one segment; here the markers are ids and each segment (role names, newlines and the
 * contents joined exactly as gm_chat_render joins them) is encoded with parse_special off. For contents
 * without marker texts the ids are those of gm_tokenize(gm_chat_render(...), parse_special=true);
 * a content holding "<end_of_turn>" (or Gemma 4's "<turn|>", or a tool-call marker) stays text and cannot
 * open or close a turn, whatever type the file gives those tokens (gm_tokenize never yields a marker
 * from plain text). */

typedef struct ibuf {
    int32_t *p;
    size_t n, cap;
    bool oom;
} ibuf;

static void put_id(ibuf *b, int32_t id) {
    if (b->oom) return;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        int32_t *np = realloc(b->p, cap * sizeof *np);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = cap;
    }
    b->p[b->n++] = id;
}

/* Encodes the pending segment (if any) as text and empties it. */
static gm_status flush_segment(const gm_tokenizer *tok, sbuf *seg, ibuf *ids, gm_error *err) {
    if (seg->oom) return gm_fail(err, GM_ERR_NOMEM, "chat: out of memory");
    if (seg->n == 0) return GM_OK;
    int32_t *t = NULL;
    size_t nt = 0;
    gm_status st = gm_tokenize(tok, seg->p, seg->n, false, false, &t, &nt, err);
    for (size_t i = 0; !st && i < nt; i++) put_id(ids, t[i]);
    free(t);
    seg->n = 0;
    return st;
}

static gm_status put_marker(const gm_tokenizer *tok, sbuf *seg, ibuf *ids, int32_t id, gm_error *err) {
    gm_status st = flush_segment(tok, seg, ids, err);
    if (!st) put_id(ids, id);
    return st;
}

gm_status gm_chat_tokenize(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n,
                           bool add_generation_prompt, int32_t **out, size_t *n_out, gm_error *err) {
    if (out) *out = NULL;
    if (n_out) *n_out = 0;
    if (!out || !n_out) return gm_fail(err, GM_ERR_ARG, "gm_chat_tokenize: NULL argument");
    /* the checks and errors of gm_chat_render: render once and drop the text */
    char *text = NULL;
    gm_status st = gm_chat_render(tok, msgs, n, add_generation_prompt, &text, err);
    free(text);
    if (st) return st;
    const chat_format *f = format_of(tok);
    const int32_t start = marker(tok, f->start), end = marker(tok, f->end);
    const int32_t bos = gm_tokenizer_bos(tok);
    const size_t first = !strcmp(msgs[0].role, "system") ? 1 : 0;
    sbuf seg = {0};
    ibuf ids = {0};
    if (bos >= 0) put_id(&ids, bos);
    if (first && f->system_turn && !(st = put_marker(tok, &seg, &ids, start, err))) {
        size_t cb, ce;
        trim(msgs[0].content, &cb, &ce);
        puts_(&seg, "system\n");
        put(&seg, msgs[0].content + cb, ce - cb);
        if (!(st = put_marker(tok, &seg, &ids, end, err))) puts_(&seg, "\n");
    }
    for (size_t i = first; i < n && !st; i++) {
        if ((st = put_marker(tok, &seg, &ids, start, err))) break;
        puts_(&seg, !strcmp(msgs[i].role, "assistant") ? "model" : msgs[i].role);
        puts_(&seg, "\n");
        if (i == first && first && !f->system_turn) {
            puts_(&seg, msgs[0].content);
            puts_(&seg, "\n\n");
        }
        size_t cb, ce;
        trim(msgs[i].content, &cb, &ce);
        put(&seg, msgs[i].content + cb, ce - cb);
        if ((st = put_marker(tok, &seg, &ids, end, err))) break;
        puts_(&seg, "\n");
    }
    if (!st && add_generation_prompt) {
        st = put_marker(tok, &seg, &ids, start, err);
        puts_(&seg, "model\n");
        if (!st && f->channel_open) {
            st = put_marker(tok, &seg, &ids, marker(tok, f->channel_open), err);
            puts_(&seg, "thought\n");
            if (!st) st = put_marker(tok, &seg, &ids, marker(tok, f->channel_close), err);
        }
    }
    if (!st) st = flush_segment(tok, &seg, &ids, err);
    free(seg.p);
    if (!st && ids.oom) st = gm_fail(err, GM_ERR_NOMEM, "chat: out of memory");
    if (st) {
        free(ids.p);
        return st;
    }
    *out = ids.p;
    *n_out = ids.n;
    return GM_OK;
}
