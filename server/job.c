/* server/job.c — a request's shared state: made by its connection thread, filled by the scheduler,
 * freed when both have let go (refs); and what a streaming reader takes out of it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/random.h"
#include "gemma_chat.h"
#include "server/server.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

uint64_t srv_fresh_u64(void) {
    uint64_t x; /* the OS's random source (core/random.c): no counter shared between threads */
    gm_random_words(&x, 1);
    return x;
}

job *job_new(void) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca; /* waits time out on the monotonic clock: a clock step must not stall them */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->refs = 1;
    gen_request_init(&j->rq);
    return j;
}

static void job_free(job *j) {
    /* the scheduler frees sequences before it lets go */
    for (int i = 0; i < SRV_MAX_N; i++) gen_session_free(&j->gen[i]);
    gen_request_clear(&j->rq);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void job_release(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    const int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0) job_free(j);
}

void job_fail(job *j, job_error e, const char *fmt, ...) {
    j->err = e;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err_msg, sizeof j->err_msg, fmt, ap);
    va_end(ap);
}

int job_generated(const job *j) {
    int gen = 0;
    for (int i = 0; i < j->rq.n; i++) gen += j->gen[i].n_gen;
    return gen;
}

void srv_error_set(srv_error *e, int status, const char *type, const char *code, const char *fmt, ...) {
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type);
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
}

bool srv_buf_put(srv_buf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = (b->len + n) * 2 + 256;
        char *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return true;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    *b = (srv_buf){0};
}

/* ---------------------------------------------------------------- a streaming reader's view */

/* Copies n bytes of text into the view; false on out of memory. */
static bool view_text(stream_view *v, const char *t, size_t n, size_t *off) {
    char *p = realloc(v->text, v->text_len + n + 1);
    if (!p) return v->oom = true, false;
    v->text = p;
    memcpy(v->text + v->text_len, t, n);
    *off = v->text_len;
    v->text_len += n;
    return true;
}

static bool view_lp(stream_view *v, const gen_session *g, int from, int to, stream_piece *pc) {
    pc->lp_off = v->n_lp;
    pc->lp_n = to - from;
    pc->lp_first_offset = from ? g->lp[from - 1].text_end : 0;
    if (to <= from) return true;
    gen_logprob *p = realloc(v->lp, (size_t)(v->n_lp + to - from) * sizeof *p);
    if (!p) return v->oom = true, false;
    v->lp = p;
    memcpy(v->lp + v->n_lp, g->lp + from, (size_t)(to - from) * sizeof *p);
    v->n_lp += to - from;
    return true;
}

/* Bytes of s[0..n) that end on a whole UTF-8 character (a thought's last character may still be arriving). */
static size_t whole_chars(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned char b = (unsigned char)s[n - back];
        if ((b & 0xC0) == 0x80) continue; /* a continuation byte: its lead is further back */
        const size_t need = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

/* New thoughts (read by the tool parser: Gemma 4's thought channel), whole characters until the end. */
static void take_reasoning(const gen_session *g, int i, reader_mark *m, stream_view *v) {
    size_t rl = 0;
    const char *r = g->tp ? gm_tool_parser_reasoning(g->tp, &rl) : NULL;
    if (r && !g->finish) rl = whole_chars(r, rl);
    if (!r || rl <= m->reason_sent) return;
    stream_piece *pc = &v->piece[v->n_pieces++];
    *pc = (stream_piece){.choice = i, .call = -1, .reason_n = rl - m->reason_sent};
    if (view_text(v, r + m->reason_sent, rl - m->reason_sent, &pc->reason_off)) m->reason_sent = rl;
}

/* The pieces choice i has to send now, in the order its text became visible. */
static void take_choice(const job *j, int i, job_reader *rd, stream_view *v) {
    const gen_session *g = &j->gen[i];
    reader_mark *m = &rd->ch[i];
    if (!m->opened) {
        v->piece[v->n_pieces++] = (stream_piece){.choice = i, .open = true, .call = -1};
        m->opened = true;
    }
    take_reasoning(g, i, m, v); /* thoughts come before the text and calls of a turn */
    if (g->visible > m->sent) {
        stream_piece *pc = &v->piece[v->n_pieces++];
        *pc = (stream_piece){.choice = i, .has_text = true, .text_n = g->visible - m->sent, .call = -1};
        view_text(v, g->text + m->sent, g->visible - m->sent, &pc->text_off);
        const int k = gen_session_lp_shown(g, g->visible);
        if (j->rq.logprobs && k > m->lp_sent && view_lp(v, g, m->lp_sent, k, pc)) m->lp_sent = k;
        m->sent = g->visible;
    }
    /* the calls read since, each once complete (a call is sent whole: it was checked before it is shown);
     * a few per take, the rest the next time (the view has room for every choice's other pieces: open,
     * thoughts, text, finish) */
    const int calls = gen_session_n_calls(g);
    while (m->calls_sent < calls && v->n_pieces < (int)(sizeof v->piece / sizeof *v->piece) - 4 * SRV_MAX_N) {
        const char *name = NULL, *args = NULL;
        gm_tool_parser_call(g->tp, (size_t)m->calls_sent, &name, &args);
        const char *id = g->call_id[m->calls_sent];
        stream_piece *pc = &v->piece[v->n_pieces++];
        *pc = (stream_piece){.choice = i, .call = m->calls_sent++};
        size_t off = 0;
        if (view_text(v, id, strlen(id) + 1, &pc->call_off)) view_text(v, name, strlen(name) + 1, &off);
        if (!v->oom) view_text(v, args, strlen(args) + 1, &off);
    }
    if (g->finish && !m->finished && m->sent == g->len && m->calls_sent == calls) {
        stream_piece *pc = &v->piece[v->n_pieces++];
        *pc = (stream_piece){.choice = i, .finish = g->finish, .stop = g->stop_matched, .call = -1, .n_calls = calls};
        const int k = gen_session_lp_shown(g, g->len);
        if (j->rq.logprobs && k > m->lp_sent && view_lp(v, g, m->lp_sent, k, pc)) m->lp_sent = k;
        m->finished = true;
    }
}

bool job_stream_take(job *j, job_reader *rd, stream_view *v) {
    memset(v, 0, sizeof *v);
    if (rd->closed) return false;
    if (j->err) { /* after a 200 has started: the error, then the end */
        v->err = j->err;
        memcpy(v->err_msg, j->err_msg, sizeof v->err_msg);
        rd->closed = true;
        return true;
    }
    if (!j->started) return false;
    bool all = true;
    for (int i = 0; i < j->rq.n; i++) {
        take_choice(j, i, rd, v);
        all = all && rd->ch[i].finished;
    }
    v->n_prompt = j->rq.n_prompt; /* known once started: a stream may announce them at its start */
    v->cached = j->cached;
    if (all && j->done) {
        v->end = true;
        v->gen = job_generated(j);
        v->draft_n = j->draft_n, v->draft_n_accepted = j->draft_n_accepted;
        v->t_submit = j->t_submit;
        v->t_started = j->t_started;
        rd->closed = true;
    }
    if (v->oom) { /* what was taken cannot be sent: the stream ends with the error */
        v->err = JOB_ERR_INTERNAL;
        snprintf(v->err_msg, sizeof v->err_msg, "out of memory while streaming");
        rd->closed = true;
    }
    return v->n_pieces > 0 || v->end || v->err;
}

void stream_view_free(stream_view *v) {
    free(v->text);
    free(v->lp);
    v->text = NULL;
    v->lp = NULL;
}

/* ---------------------------------------------------------------- turns (the embedder, the vision encoder) */

void turns_init(srv_turns *t) {
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    t->next = t->serving = 0;
}

void turns_destroy(srv_turns *t) {
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
}

void turns_take(srv_turns *t) {
    pthread_mutex_lock(&t->mu);
    const unsigned long me = t->next++;
    while (t->serving != me) pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void turns_give(srv_turns *t) {
    pthread_mutex_lock(&t->mu);
    t->serving++;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}
