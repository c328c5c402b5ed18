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
 * The format is Gemma 4's when the vocabulary has its turn tokens and no Gemma 3 ones.
 * Tools (gm_chat_render): the declarations, the calls of assistant messages and the tool results in
 * the vocabulary's tool format (text/tools.c writes them): Gemma 3's prompt and pythonic calls, with the
 * results as a user turn of <tool_response> blocks; FunctionGemma's and Gemma 4's marker formats, where
 * calls, results and the reply share one model turn, left open while results are awaited. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_chat.h"
#include "gemma_vision.h"
#include "text/tokenizer.h"
#include "text/tools.h"

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


void sb_put(sbuf *b, const char *s, size_t n) {
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

void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* ---- the emitter: one renderer for both outputs.
 * gm_chat_render wants text (markers spelled out); gm_chat_tokenize wants ids where every marker is its
 * id and every run of text between two markers (role names, newlines, contents, joined exactly as the
 * text) is encoded with parse_special off. For contents without marker texts the ids are those of
 * gm_tokenize(text, parse_special=true); a content holding "<end_of_turn>" (or Gemma 4's "<turn|>", or a
 * tool-call marker) stays text and cannot open or close a turn, whatever type the file gives those
 * tokens (gm_tokenize never yields a marker from plain text). */

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

typedef struct emit {
    const gm_tokenizer *tok;
    bool ids;
    sbuf text;   /* text: everything; ids: the pending run of text */
    ibuf idv;
    gm_status st;
    gm_error *err;
    const gm_chat_options *o;
    size_t n_images;  /* images written so far (their slots in o->image_pos) */
} emit;

static void em_text(void *ctx, const char *s, size_t n) { sb_put(&((emit *)ctx)->text, s, n); }
static void em_str(emit *e, const char *s) { sb_puts(&e->text, s); }

/* Encodes the pending run (if any) as text and empties it. */
static void em_flush(emit *e) {
    if (e->st || !e->ids) return;
    if (e->text.oom) { e->st = gm_fail(e->err, GM_ERR_NOMEM, "chat: out of memory"); return; }
    if (e->text.n == 0) return;
    int32_t *t = NULL;
    size_t nt = 0;
    e->st = gm_tokenize(e->tok, e->text.p, e->text.n, false, false, &t, &nt, e->err);
    for (size_t i = 0; !e->st && i < nt; i++) put_id(&e->idv, t[i]);
    free(t);
    e->text.n = 0;
}

static void em_id(emit *e, int32_t id, const char *text) {
    if (e->st) return;
    if (!e->ids) { em_str(e, text); return; }
    em_flush(e);
    put_id(&e->idv, id);
}

static void em_marker(void *ctx, const char *m) {
    emit *e = ctx;
    const int32_t id = marker(e->tok, m);
    if (id < 0 && !e->st) e->st = gm_fail(e->err, GM_ERR_UNSUPPORTED, "chat: the vocabulary has no %s token", m);
    em_id(e, id, m);
}

static void em_content(emit *e, const char *s) {
    size_t cb, ce;
    trim(s, &cb, &ce);
    sb_put(&e->text, s + cb, ce - cb);
}

static tool_out em_out(emit *e) { return (tool_out){em_text, em_marker, e}; }

/* An image where the vision encoder's rows go, as transformers' processors expand the templates' image
 * item: Gemma 3 "\n\n<start_of_image>" rows "<end_of_image>\n\n", Gemma 4 "<|image>" rows "<image|>". The
 * rows' index in the ids is recorded in o->image_pos. */
static void em_image(emit *e) {
    const bool g4 = marker(e->tok, "<|image>") >= 0 && marker(e->tok, "<image|>") >= 0;
    const char *boi = g4 ? "<|image>" : "<start_of_image>", *eoi = g4 ? "<image|>" : "<end_of_image>";
    if (e->n_images >= e->o->n_image_pos && e->ids) {
        if (!e->st) e->st = gm_fail(e->err, GM_ERR_ARG, "chat: more images than image_pos has room for (%zu)",
                                    e->o->n_image_pos);
        return;
    }
    if (!g4) em_str(e, "\n\n");
    em_marker(e, boi);
    if (e->ids && !e->st) e->o->image_pos[e->n_images] = e->idv.n;
    e->n_images++;
    em_marker(e, eoi);
    if (!g4) em_str(e, "\n\n");
}

/* A message's content with its images: each run of text between two images trimmed, as the templates trim
 * each text item of a list content. */
static void em_message_content(emit *e, const gm_chat_message *m) {
    if (!m->n_images) {
        em_content(e, m->content);
        return;
    }
    const size_t len = strlen(m->content);
    size_t from = 0;
    for (size_t k = 0; k <= m->n_images && !e->st; k++) {
        const size_t to = k < m->n_images ? m->image_at[k] : len;
        size_t cb, ce;
        char *part = strndup(m->content + from, to - from);
        if (!part) {
            e->st = gm_fail(e->err, GM_ERR_NOMEM, "chat: out of memory");
            return;
        }
        trim(part, &cb, &ce);
        sb_put(&e->text, part + cb, ce - cb);
        free(part);
        if (k < m->n_images) em_image(e);
        from = to;
    }
}

/* ---- conversations */

static bool is_system(const char *role) { return !strcmp(role, "system") || !strcmp(role, "developer"); }
static bool is_tool(const gm_chat_message *m) { return !strcmp(m->role, "tool"); }
static bool is_model(const gm_chat_message *m) { return !strcmp(m->role, "assistant") || !strcmp(m->role, "model"); }
static bool has_calls(const gm_chat_message *m) { return m->n_tool_calls > 0; }

/* Roles: an optional system message first, then user and model turns alternating from a user turn. A model
 * message with tool calls is followed by tool messages (its results) or the end; tool messages by more of
 * them, a model message (the reply to the results) or the end. */
static gm_status check_roles(const gm_chat_message *msgs, size_t n, size_t first, gm_error *err) {
    enum { WANT_USER, WANT_MODEL, AFTER_CALLS, AFTER_RESULTS } at = WANT_USER;
    for (size_t i = first; i < n; i++) {
        const gm_chat_message *m = &msgs[i];
        const bool user = !strcmp(m->role, "user"), tool = is_tool(m);
        if (m->n_tool_calls && (!m->tool_calls || !is_model(m)))
            return gm_fail(err, GM_ERR_ARG, "chat: message %zu: only assistant messages carry tool calls", i);
        for (size_t k = 0; k < m->n_tool_calls; k++)
            if (!m->tool_calls[k].name || !m->tool_calls[k].arguments)
                return gm_fail(err, GM_ERR_ARG, "chat: message %zu: tool call %zu has no name or arguments", i, k);
        if (!m->content && !(is_model(m) && m->n_tool_calls))
            return gm_fail(err, GM_ERR_ARG, "chat: message %zu has a NULL content", i);
        if (is_system(m->role))
            return gm_fail(err, GM_ERR_ARG, "chat: message %zu: a system message may only come first", i);
        bool ok;
        switch (at) {
        case WANT_USER: ok = user; break;
        case WANT_MODEL: ok = !user && !tool; break;
        case AFTER_CALLS: ok = tool; break;
        default: ok = tool || is_model(m); break;
        }
        if (!ok) {
            if (tool)
                return gm_fail(err, GM_ERR_ARG, "chat: message %zu is a tool result without an assistant message with "
                               "tool calls before it", i);
            if (at == AFTER_CALLS || at == AFTER_RESULTS)
                return gm_fail(err, GM_ERR_ARG, "chat: message %zu has role '%s'; after tool calls come their results "
                               "(role tool), then the assistant's reply", i, m->role);
            return gm_fail(err, GM_ERR_ARG, "chat: message %zu has role '%s'; roles must alternate user/assistant/user/... "
                           "(an optional system message first)", i, m->role);
        }
        at = user ? WANT_MODEL : tool ? AFTER_RESULTS : has_calls(m) ? AFTER_CALLS : WANT_USER;
    }
    return GM_OK;
}

/* The function name of a tool result: the call with its id in the model message before, else its own name. */
static const char *result_name(const gm_chat_message *msgs, size_t call_msg, const gm_chat_message *r) {
    const gm_chat_message *c = &msgs[call_msg];
    for (size_t k = 0; r->tool_call_id && k < c->n_tool_calls; k++)
        if (c->tool_calls[k].id && !strcmp(c->tool_calls[k].id, r->tool_call_id)) return c->tool_calls[k].name;
    return r->name ? r->name : "unknown";
}

static bool write_calls(emit *e, gm_tool_format tf, const gm_chat_message *m) {
    const tool_markers *mk = tool_markers_of(tf);
    const tool_out o = em_out(e);
    for (size_t k = 0; k < m->n_tool_calls && !e->st; k++) {
        if (tf == GM_TOOLS_GEMMA3) em_str(e, k ? ", " : "[");
        else em_marker(e, mk->call_open);
        if (!tool_write_call(&o, tf, &m->tool_calls[k], e->err)) return e->st = GM_ERR_ARG, false;
        if (tf != GM_TOOLS_GEMMA3) em_marker(e, mk->call_close);
    }
    if (tf == GM_TOOLS_GEMMA3) em_str(e, "]");
    return !e->st;
}

/* The marker formats' declarations of every tool. */
static void write_declarations(emit *e, gm_tool_format tf, const gm_chat_options *o) {
    const tool_markers *mk = tool_markers_of(tf);
    const tool_out out = em_out(e);
    for (size_t k = 0; k < o->n_tools && !e->st; k++) {
        em_marker(e, mk->decl_open);
        if (!tool_write_declaration(&out, tf, &o->tools[k], e->err)) e->st = GM_ERR_ARG;
        em_marker(e, mk->decl_close);
    }
}

/* What follows a turn's opening for a message other than a tool result: its calls, the results of the
 * tool messages after it (marker formats: in the same turn), its content, and the turn's end — unless the
 * turn stays open for the model to go on: its calls wait for their results, or the results came without a
 * reply yet. Returns whether it stays open. */
static bool model_turn(emit *e, const chat_format *f, gm_tool_format tf, const gm_chat_message *msgs, size_t i,
                       size_t n) {
    const gm_chat_message *m = &msgs[i];
    const tool_markers *mk = tool_markers_of(tf);
    const tool_out out = em_out(e);
    bool results = false;
    if (has_calls(m)) write_calls(e, tf, m);
    for (size_t k = i + 1; mk && has_calls(m) && k < n && is_tool(&msgs[k]); k++, results = true) {
        em_marker(e, mk->resp_open);
        tool_write_response(&out, tf, result_name(msgs, i, &msgs[k]), msgs[k].content);
        em_marker(e, mk->resp_close);
    }
    if (m->content) em_message_content(e, m);
    if (mk && has_calls(m) && !results) {
        em_marker(e, mk->resp_open);
        return true;
    }
    if (results && (!m->content || !m->content[0])) return true;
    em_id(e, marker(e->tok, f->end), f->end);
    em_str(e, "\n");
    return false;
}

/* Gemma 1-3 (and FunctionGemma, pythonic calls for Gemma 3): the system prompt (and Gemma 3's tool
 * instructions) prefixed to the first turn; FunctionGemma with tools: a developer turn of declarations. */
static void render_gemma3(emit *e, const chat_format *f, gm_tool_format tf, const gm_chat_message *msgs, size_t n,
                          const gm_chat_options *o) {
    const size_t first = n && is_system(msgs[0].role) ? 1 : 0;
    const char *system = first ? msgs[0].content : NULL;
    const int32_t start = marker(e->tok, f->start), end = marker(e->tok, f->end);
    const tool_out out = em_out(e);
    if (tf == GM_TOOLS_FUNCTIONGEMMA && o->n_tools) {
        static const char *const intro = "You are a model that can do function calling with the following functions";
        em_id(e, start, f->start);
        em_str(e, "developer\n");
        if (system) em_content(e, system);
        if (!system || !strstr(system, intro)) em_str(e, intro);
        system = NULL;
        write_declarations(e, tf, o);
        em_id(e, end, f->end);
        em_str(e, "\n");
    }
    const bool dict = tf == GM_TOOLS_FUNCTIONGEMMA;
    bool open = false; /* a model turn left open for the model to go on (after calls or their results) */
    for (size_t i = first; i < n && !e->st; i++) {
        const gm_chat_message *m = &msgs[i];
        if (is_tool(m) && dict) continue; /* written after the calls they answer */
        if (is_tool(m) && i > first && is_tool(&msgs[i - 1])) continue; /* the same user turn */
        const bool cont = open && is_model(m);
        open = false;
        if (!cont) {
            em_id(e, start, f->start);
            em_str(e, is_tool(m) ? "user" : !strcmp(m->role, "assistant") ? "model" : m->role);
            em_str(e, "\n");
        }
        if (i == first && system) {
            em_str(e, system);
            em_str(e, "\n\n");
        }
        if (i == first && tf == GM_TOOLS_GEMMA3 && o->n_tools && !tool_write_gemma3_preamble(&out, o->tools, o->n_tools, e->err))
            e->st = GM_ERR_ARG;
        if (is_tool(m)) { /* Gemma 3: every result of the group in one user turn */
            for (size_t k = i; k < n && is_tool(&msgs[k]) && !e->st; k++) {
                em_str(e, k > i ? "\n<tool_response>\n" : "<tool_response>\n");
                em_content(e, msgs[k].content);
                em_str(e, "</tool_response>");
            }
            em_id(e, end, f->end);
            em_str(e, "\n");
        } else {
            open = model_turn(e, f, tf, msgs, i, n);
        }
    }
    if (o->add_generation_prompt && !open) {
        em_id(e, start, f->start);
        em_str(e, "model\n");
    }
}

/* Gemma 4 (llama.cpp's google-gemma-4-31B-it.jinja, thinking off): the system prompt and the tool
 * declarations are a system turn; calls, their results and the reply share one model turn; thoughts are
 * written only for calls after the last user message. */
static void render_gemma4(emit *e, const chat_format *f, gm_tool_format tf, const gm_chat_message *msgs, size_t n,
                          const gm_chat_options *o) {
    const size_t first = n && is_system(msgs[0].role) ? 1 : 0;
    const int32_t start = marker(e->tok, f->start), end = marker(e->tok, f->end);
    const tool_markers *mk = tool_markers_of(tf);
    if (first || (o->n_tools && mk)) {
        em_id(e, start, f->start);
        em_str(e, "system\n");
        if (first) em_content(e, msgs[0].content);
        if (mk) write_declarations(e, tf, o);
        em_id(e, end, f->end);
        em_str(e, "\n");
    }
    size_t last_user = 0;
    for (size_t i = first; i < n; i++)
        if (!strcmp(msgs[i].role, "user")) last_user = i;
    bool open = false, prev_model = false;
    for (size_t i = first; i < n && !e->st; i++) {
        const gm_chat_message *m = &msgs[i];
        if (is_tool(m)) continue; /* written after the calls they answer */
        if (!(open || (prev_model && is_model(m)))) {
            em_id(e, start, f->start);
            em_str(e, !strcmp(m->role, "assistant") ? "model" : m->role);
            em_str(e, "\n");
        }
        open = false;
        prev_model = is_model(m);
        if (m->reasoning && i > last_user && has_calls(m)) {
            em_marker(e, f->channel_open);
            em_str(e, "thought\n");
            em_str(e, m->reasoning);
            em_str(e, "\n");
            em_marker(e, f->channel_close);
        }
        open = model_turn(e, f, tf, msgs, i, n);
    }
    if (o->add_generation_prompt && !open) {
        em_id(e, start, f->start);
        em_str(e, "model\n");
        em_marker(e, f->channel_open);
        em_str(e, "thought\n");
        em_marker(e, f->channel_close);
    }
}

static gm_status chat_emit(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n, const gm_chat_options *o,
                           bool ids, emit *e, gm_error *err) {
    static const gm_chat_options defaults;
    if (!o) o = &defaults;
    *e = (emit){.tok = tok, .ids = ids, .err = err, .o = o};
    if (!tok || (!msgs && n) || (!o->tools && o->n_tools)) return gm_fail(err, GM_ERR_ARG, "gm_chat_render: NULL argument");
    const chat_format *f = format_of(tok);
    if (!f)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "chat: the vocabulary has neither <start_of_turn> / <end_of_turn> "
                       "(Gemma 1-3) nor <|turn> / <turn|> (Gemma 4) tokens; no chat format known");
    if (n == 0) return gm_fail(err, GM_ERR_ARG, "chat: no messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role) return gm_fail(err, GM_ERR_ARG, "chat: message %zu has a NULL role or content", i);
        if (msgs[i].n_images && (strcmp(msgs[i].role, "user") || !msgs[i].content || !msgs[i].image_at))
            return gm_fail(err, GM_ERR_ARG, "chat: message %zu (%s) has images: only user messages carry them", i,
                           msgs[i].role);
        for (size_t k = 0; k < msgs[i].n_images; k++)
            if (msgs[i].image_at[k] > strlen(msgs[i].content) || (k && msgs[i].image_at[k] < msgs[i].image_at[k - 1]))
                return gm_fail(err, GM_ERR_ARG, "chat: message %zu: image %zu's offset %zu is out of order or past the "
                               "content", i, k, msgs[i].image_at[k]);
    }
    if (!msgs[0].content) return gm_fail(err, GM_ERR_ARG, "chat: message 0 has a NULL role or content");
    for (size_t k = 0; k < o->n_tools; k++)
        if (!o->tools[k].name || !o->tools[k].name[0]) return gm_fail(err, GM_ERR_ARG, "chat: tool %zu has no name", k);
    gm_status st = check_roles(msgs, n, is_system(msgs[0].role) ? 1 : 0, err);
    if (st) return st;
    const gm_tool_format tf = gm_tokenizer_tool_format(tok);
    bool tool_use = o->n_tools > 0;
    for (size_t i = 0; i < n; i++) tool_use = tool_use || msgs[i].n_tool_calls || is_tool(&msgs[i]);
    if (tool_use && tf == GM_TOOLS_NONE)
        return gm_fail(err, GM_ERR_UNSUPPORTED, "chat: this vocabulary has no tool-call format (Gemma 4 turns without "
                       "its tool tokens)");
    const int32_t bos = gm_tokenizer_bos(tok);
    size_t bos_len = 0;
    const char *bos_text = gm_token_text(tok, bos, &bos_len);
    if (ids) {
        if (bos >= 0) put_id(&e->idv, bos);
    } else {
        sb_put(&e->text, bos_text ? bos_text : "", bos_text ? bos_len : 0);
    }
    if (f == &GEMMA4) render_gemma4(e, f, tf, msgs, n, o);
    else render_gemma3(e, f, tf, msgs, n, o);
    em_flush(e);
    if (!e->st && (e->text.oom || e->idv.oom)) e->st = gm_fail(err, GM_ERR_NOMEM, "chat: out of memory");
    if (!e->st && !ids && !e->text.p) sb_put(&e->text, "", 0);
    if (!e->st && !ids && !e->text.p) e->st = gm_fail(err, GM_ERR_NOMEM, "chat: out of memory");
    return e->st;
}

gm_status gm_chat_render(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n, const gm_chat_options *o,
                            char **out, gm_error *err) {
    if (out) *out = NULL;
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_chat_render: NULL argument");
    emit e;
    gm_status st = chat_emit(tok, msgs, n, o, false, &e, err);
    free(e.idv.p);
    if (st) {
        free(e.text.p);
        return st;
    }
    *out = e.text.p;
    return GM_OK;
}

gm_status gm_chat_tokenize(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n, const gm_chat_options *o,
                              int32_t **out, size_t *n_out, gm_error *err) {
    if (out) *out = NULL;
    if (n_out) *n_out = 0;
    if (!out || !n_out) return gm_fail(err, GM_ERR_ARG, "gm_chat_tokenize: NULL argument");
    emit e;
    gm_status st = chat_emit(tok, msgs, n, o, true, &e, err);
    free(e.text.p);
    if (st) {
        free(e.idv.p);
        return st;
    }
    *out = e.idv.p;
    *n_out = e.idv.n;
    return GM_OK;
}

int32_t gm_tokenizer_image_placeholder(const gm_tokenizer *tok) {
    if (!tok) return 0;
    int32_t id = marker(tok, "<|image|>");
    if (id < 0) id = marker(tok, "<image_soft_token>");
    return id >= 0 ? id : 0;
}
