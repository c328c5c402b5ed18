/* tests/test_scheduler.c — the server's scheduler (server/scheduler.c) driving generation sessions
 * (server/session.c) over the engine, without HTTP: jobs are made and submitted as an endpoint would.
 *
 * On the tiny Gemma 3 test model (context 128, a chunk of 8 prompt tokens per step, so prompts are
 * spread over steps while others decode): several requests at once, more than --parallel (some wait in
 * the queue), each finishes and its greedy text equals that of the same request run alone; max_tokens is
 * honoured; a stop string ends a request with GEN_STOP_STRING and without the stop text, and one that
 * only starts to match is held back and then shown whole; n = 2 gives two equal greedy choices;
 * log-probabilities come one per token; speculative decoding (--lookup) gives the same text; a request
 * cancelled before it runs, one withdrawn from the queue and one cancelled while it generates all end.
 * A stream's reader takes a reply's thoughts (Gemma 4's thought channel, read by the tool parser) as
 * pieces of whole characters, before its text.
 * Every wait is bounded (a hang fails the test instead of stalling it); nothing is timed. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gemma.h"
#include "server/server.h"
#include "support/test.h"

static gm_model *M;
static const gm_tokenizer *TOK;
static srv_metrics *MET;

static const char *PROMPTS[] = {"The capital of France is", "the cat", "Hello", "abc def ghi", "once upon a time there",
                                "Paris"};
enum { N_PROMPTS = sizeof PROMPTS / sizeof *PROMPTS, MAX_NEW = 24 };

static srv_sched *new_sched(int parallel, bool lookup) {
    srv_options o = {.threads = 1, .n_ctx = 128, .parallel = parallel, .queue = 16, .chunk = 8, .max_prompt = 120,
                     .max_tokens = 120, .quiet = true, .lookup = lookup, .kv_type = GM_KV_DTYPE_F32};
    gm_error err = {0};
    srv_sched *s = NULL;
    CHECK_OK(sched_new(M, &o, NULL, MET, &s, &err), &err);
    return s;
}

/* A greedy request as an endpoint would make it; ignore_eos so that lengths do not depend on the model. */
static job *make_job(const char *prompt, int max_tokens, const char *stop, int n) {
    job *j = job_new();
    gm_error err = {0};
    size_t nid = 0;
    CHECK_OK(gm_tokenize(TOK, prompt, strlen(prompt), true, true, &j->rq.prompt, &nid, &err), &err);
    j->rq.n_prompt = (int)nid;
    j->rq.n = n;
    j->rq.max_tokens = max_tokens;
    j->rq.smp.temperature = 0;
    j->rq.ignore_eos = true;
    if (stop) j->rq.stop[j->rq.n_stop++] = strdup(stop);
    j->t_submit = srv_now();
    return j;
}

static void submit(srv_sched *s, job *j) { CHECK_EQ_INT(sched_submit(s, j), SUBMIT_OK); }

/* Waits (under j->mu) until cond(j) holds or 60 s pass; whether it holds. */
static bool wait_for(job *j, bool (*cond)(const job *)) {
    pthread_mutex_lock(&j->mu);
    for (int i = 0; i < 600 && !cond(j); i++) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts); /* job_new's condition variable waits on this clock */
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
    const bool ok = cond(j);
    pthread_mutex_unlock(&j->mu);
    return ok;
}

static bool is_done(const job *j) { return j->done; }

static void wait_done(job *j) { CHECK_MSG(wait_for(j, is_done), "a job did not end within 60 s"); }

/* Runs one request alone to its end; its choice 0's text (malloc'd) and finish. */
static char *run_alone(srv_sched *s, const char *prompt, int max_tokens, const char *stop, gen_finish *finish, int *n_gen) {
    job *j = make_job(prompt, max_tokens, stop, 1);
    submit(s, j);
    wait_done(j);
    CHECK_EQ_INT(j->err, JOB_OK);
    char *t = strdup(j->gen[0].text ? j->gen[0].text : "");
    if (finish) *finish = j->gen[0].finish;
    if (n_gen) *n_gen = j->gen[0].n_gen;
    job_release(j);
    return t;
}

/* ---------------------------------------------------------------- tests */

/* Feeds text's tokens to a session with one stop string; after every token nothing shown contains the
 * stop and what is held back is a proper start of it. */
static void feed(gen_session *g, const char *text, const char *stop) {
    int32_t *ids = NULL;
    size_t n = 0;
    gm_error err = {0};
    CHECK_OK(gm_tokenize(TOK, text, strlen(text), false, false, &ids, &n, &err), &err);
    for (size_t i = 0; i < n && !g->finish; i++) {
        gen_session_take(g, ids[i], NULL, (int)i + 2);
        CHECK(g->visible <= g->len);
        const size_t held = g->len - g->visible;
        CHECK(held < strlen(stop) && !strncmp(g->text + g->visible, stop, held));
        CHECK(!memmem(g->text, g->visible, stop, strlen(stop)));
    }
    free(ids);
}

/* The session alone: a stop string across token boundaries is cut with what follows; a tail that may
 * still become one is held back, and shown when the choice ends at its length. */
TEST(session_stops_and_hold_back) {
    gen_request rq;
    gen_request_init(&rq);
    rq.stop[rq.n_stop++] = strdup("o wor");
    gen_session g = {0};
    gm_error err = {0};
    CHECK_OK(gen_session_start(&g, &rq, TOK, gm_tokenizer_n_vocab(TOK), 128, &err), &err);
    feed(&g, "hello world and more", "o wor");
    CHECK_EQ_INT(g.finish, GEN_STOP_STRING);
    CHECK_MSG(g.text && !strcmp(g.text, "hell"), "got '%s'", g.text ? g.text : "(none)");
    gen_session_free(&g);

    rq.max_tokens = 5; /* "o wo" is 4 tokens of the tiny vocabulary, "o" one */
    g = (gen_session){0};
    CHECK_OK(gen_session_start(&g, &rq, TOK, gm_tokenizer_n_vocab(TOK), 128, &err), &err);
    feed(&g, "o wo", "o wor"); /* all of it may still become the stop string */
    CHECK_EQ_INT(g.n_gen, 4);
    CHECK_EQ_INT(g.visible, 0);
    feed(&g, "o", "o wor");
    CHECK_EQ_INT(g.finish, GEN_MAX_TOKENS);
    CHECK_EQ_INT(g.visible, g.len); /* the end shows what was held back */
    CHECK_MSG(g.text && !strcmp(g.text, "o woo"), "got '%s'", g.text ? g.text : "(none)");
    gen_session_free(&g);
    gen_request_clear(&rq);
}

/* Six requests on four slots (two queue), prompts computed in chunks beside the others' decoding: each
 * ends at its own max_tokens with the text it has alone. */
TEST(concurrent_equals_alone) {
    srv_sched *s = new_sched(4, false);
    char *alone[N_PROMPTS];
    for (int p = 0; p < N_PROMPTS; p++) {
        gen_finish f = GEN_RUNNING;
        int n_gen = 0;
        alone[p] = run_alone(s, PROMPTS[p], MAX_NEW - p, NULL, &f, &n_gen);
        CHECK_EQ_INT(f, GEN_MAX_TOKENS);
        CHECK_EQ_INT(n_gen, MAX_NEW - p);
    }
    job *j[N_PROMPTS];
    for (int p = 0; p < N_PROMPTS; p++) submit(s, j[p] = make_job(PROMPTS[p], MAX_NEW - p, NULL, 1));
    for (int p = 0; p < N_PROMPTS; p++) {
        wait_done(j[p]);
        CHECK_EQ_INT(j[p]->err, JOB_OK);
        CHECK(j[p]->started);
        CHECK_EQ_INT(j[p]->gen[0].finish, GEN_MAX_TOKENS);
        CHECK_EQ_INT(j[p]->gen[0].n_gen, MAX_NEW - p);
        CHECK_EQ_INT(j[p]->gen[0].visible, j[p]->gen[0].len);
        CHECK_MSG(j[p]->gen[0].text && !strcmp(j[p]->gen[0].text, alone[p]), "prompt %d: '%s' alone, '%s' in a batch", p,
                  alone[p], j[p]->gen[0].text ? j[p]->gen[0].text : "(none)");
        job_release(j[p]);
        free(alone[p]);
    }
    sched_free(s);
}

/* The text a stop string cuts is the text before its first match; a string that only starts to match
 * is shown whole when the request ends at its length. Both run beside other requests. */
TEST(stop_strings) {
    srv_sched *s = new_sched(3, false);
    gen_finish f;
    char *t = run_alone(s, PROMPTS[0], MAX_NEW, NULL, &f, NULL);
    const size_t len = strlen(t);
    CHECK(len >= 4);
    if (len < 4) {
        free(t);
        sched_free(s);
        return;
    }
    char stop[8] = {t[2], t[3], 0}, partial[8] = {t[0], t[1], '\x01', 0};
    const size_t cut = (size_t)(strstr(t, stop) - t);
    job *a = make_job(PROMPTS[0], MAX_NEW, stop, 1), *b = make_job(PROMPTS[0], MAX_NEW, partial, 1),
        *other = make_job(PROMPTS[1], MAX_NEW, NULL, 1);
    submit(s, other);
    submit(s, a);
    submit(s, b);
    wait_done(a);
    wait_done(b);
    wait_done(other);
    CHECK_EQ_INT(a->gen[0].finish, GEN_STOP_STRING);
    CHECK_EQ_INT(a->gen[0].len, cut);
    CHECK_MSG(a->gen[0].text && !strncmp(a->gen[0].text, t, cut) && !strstr(a->gen[0].text, stop),
              "stop '%s' in '%s': got '%s'", stop, t, a->gen[0].text ? a->gen[0].text : "(none)");
    CHECK(a->gen[0].n_gen < MAX_NEW);
    CHECK_EQ_INT(b->gen[0].finish, GEN_MAX_TOKENS);
    CHECK_MSG(b->gen[0].text && !strcmp(b->gen[0].text, t), "'%s' alone, '%s' with a partial stop", t,
              b->gen[0].text ? b->gen[0].text : "(none)");
    CHECK_EQ_INT(other->gen[0].finish, GEN_MAX_TOKENS);
    job_release(a);
    job_release(b);
    job_release(other);
    free(t);
    sched_free(s);
}

/* n = 2 from one prompt: both greedy choices are the request's text alone; log-probabilities come one
 * per token, the greedy token the best of its top list. */
TEST(choices_and_logprobs) {
    srv_sched *s = new_sched(4, false);
    char *t = run_alone(s, PROMPTS[2], 12, NULL, NULL, NULL);
    job *j = make_job(PROMPTS[2], 12, NULL, 2);
    j->rq.logprobs = true;
    j->rq.top_logprobs = 3;
    submit(s, j);
    wait_done(j);
    CHECK_EQ_INT(j->err, JOB_OK);
    for (int i = 0; i < 2; i++) {
        const gen_session *g = &j->gen[i];
        CHECK_MSG(g->text && !strcmp(g->text, t), "choice %d: '%s', alone '%s'", i, g->text ? g->text : "(none)", t);
        CHECK_EQ_INT(g->n_lp, g->n_gen);
        for (int k = 0; k < g->n_lp; k++) {
            CHECK(g->lp[k].lp <= 0);
            CHECK_EQ_INT(g->lp[k].n_top, 3);
            CHECK_EQ_INT(g->lp[k].top_id[0], g->lp[k].id);
            CHECK(g->lp[k].top_lp[0] >= g->lp[k].top_lp[1] && g->lp[k].top_lp[1] >= g->lp[k].top_lp[2]);
        }
        CHECK_EQ_INT(gen_session_lp_shown(g, g->len), g->n_lp); /* ended by its length: every entry shown */
    }
    job_release(j);
    free(t);
    sched_free(s);
}

/* Prompt lookup proposes and verifies several tokens a step; the text is the one of plain decoding. */
TEST(speculative_equals_plain) {
    srv_sched *plain = new_sched(4, false), *spec = new_sched(4, true);
    char *alone[3];
    job *j[3];
    for (int p = 0; p < 3; p++) alone[p] = run_alone(plain, PROMPTS[p], MAX_NEW, NULL, NULL, NULL);
    for (int p = 0; p < 3; p++) {
        j[p] = make_job(PROMPTS[p], MAX_NEW, NULL, 1);
        j[p]->rq.speculative = true;
        submit(spec, j[p]);
    }
    for (int p = 0; p < 3; p++) {
        wait_done(j[p]);
        CHECK_EQ_INT(j[p]->err, JOB_OK);
        CHECK_EQ_INT(j[p]->gen[0].n_gen, MAX_NEW);
        CHECK_MSG(j[p]->gen[0].text && !strcmp(j[p]->gen[0].text, alone[p]), "prompt %d: '%s' plain, '%s' speculative", p,
                  alone[p], j[p]->gen[0].text ? j[p]->gen[0].text : "(none)");
        job_release(j[p]);
        free(alone[p]);
    }
    sched_free(plain);
    sched_free(spec);
}

/* A client gone before its request ran: the scheduler ends it without generating. */
TEST(cancelled_before_running) {
    srv_sched *s = new_sched(2, false);
    job *j = make_job(PROMPTS[0], MAX_NEW, NULL, 1);
    j->cancelled = true; /* not shared yet: no lock needed */
    submit(s, j);
    wait_done(j);
    CHECK_EQ_INT(j->gen[0].n_gen, 0);
    job_release(j);
    gen_finish f = GEN_RUNNING;
    free(run_alone(s, PROMPTS[1], 4, NULL, &f, NULL)); /* its slot came back */
    CHECK_EQ_INT(f, GEN_MAX_TOKENS);
    sched_free(s);
}

static bool generating(const job *j) { return j->done || (j->started && j->gen[0].n_gen > 0); }

/* One slot. While the test holds a running request's lock the request cannot take a token or end, so a
 * second one stays queued: withdrawn, it ends at once without running. The first, cancelled while it
 * generates, ends before its length (at most the token of the step under way is taken after the
 * cancel), and the slot serves the next request. A request that ended before the test got hold of it
 * proves nothing: the test tries again, a few times. */
TEST(withdraw_and_cancel_running) {
    srv_sched *s = new_sched(1, false);
    bool tried = false;
    for (int attempt = 0; attempt < 8 && !tried; attempt++) {
        job *a = make_job(PROMPTS[0], 0, NULL, 1); /* up to the context */
        submit(s, a);
        CHECK(wait_for(a, generating));
        pthread_mutex_lock(&a->mu);
        const int limit = 128 - a->rq.n_prompt;
        if (!a->done && a->gen[0].n_gen <= limit - 2) {
            tried = true;
            job *b = make_job(PROMPTS[1], 8, NULL, 1);
            submit(s, b); /* a holds the only slot and cannot end: b waits in the queue */
            pthread_mutex_lock(&b->mu);
            b->cancelled = true;
            pthread_mutex_unlock(&b->mu);
            sched_withdraw(s, b);
            CHECK(b->done);
            CHECK(!b->started);
            CHECK_EQ_INT(b->gen[0].n_gen, 0);
            job_release(b);
            a->cancelled = true;
        }
        pthread_mutex_unlock(&a->mu);
        wait_done(a);
        if (tried) {
            CHECK_EQ_INT(a->gen[0].finish, GEN_RUNNING);
            CHECK(a->gen[0].n_gen < limit);
        }
        job_release(a);
    }
    CHECK_MSG(tried, "every request ended before the test could hold it");
    gen_finish f = GEN_RUNNING;
    free(run_alone(s, PROMPTS[2], 4, NULL, &f, NULL));
    CHECK_EQ_INT(f, GEN_MAX_TOKENS);
    sched_free(s);
}

/* Thoughts stream as pieces apart from the text (job_stream_take): taken token by token they are whole UTF-8
 * characters, come before the text, and add up to the parser's thoughts (a tiny Gemma 4 vocabulary). */
TEST(thoughts_stream_as_pieces) {
    gm_model *m4 = NULL;
    gm_error err = {0};
    CHECK_OK(gm_model_open(test_data_path("tools/gemma4-tools.gguf"), NULL, &m4, &err), &err);
    const gm_tokenizer *tok = gm_model_tokenizer(m4);
    job *j = job_new();
    j->rq.tools = calloc(1, sizeof *j->rq.tools);
    j->rq.tools[0] = (gm_tool){.name = strdup("f")};
    j->rq.n_tools = 1;
    j->rq.tool_mode = TOOLS_AUTO;
    CHECK_OK(gen_session_start(&j->gen[0], &j->rq, tok, gm_tokenizer_n_vocab(tok), 128, &err), &err);
    j->started = true;
    const char *reply = "<|channel>thought\nJe pense \xC3\xA0 l'\xC3\xA9t\xC3\xA9 \xE2\x82\xAC<channel|>Bonjour";
    int32_t *ids = NULL;
    size_t n = 0;
    CHECK_OK(gm_tokenize(tok, reply, strlen(reply), false, true, &ids, &n, &err), &err);
    job_reader rd = {0};
    char thoughts[256] = "";
    size_t text_len = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n) gen_session_take(&j->gen[0], ids[i], NULL, (int)i + 2);
        else j->gen[0].finish = GEN_END_OF_TURN, j->done = true;
        stream_view v;
        if (!job_stream_take(j, &rd, &v)) continue;
        for (int k = 0; k < v.n_pieces; k++) {
            const stream_piece *pc = &v.piece[k];
            if (pc->has_text) text_len += pc->text_n;
            if (!pc->reason_n) continue;
            CHECK_MSG(gm_text_is_utf8(v.text + pc->reason_off, pc->reason_n), "a piece of thoughts cut a character");
            CHECK_MSG(text_len == 0, "thoughts after the text");
            strncat(thoughts, v.text + pc->reason_off, pc->reason_n);
        }
        stream_view_free(&v);
    }
    size_t rl = 0;
    const char *r = gm_tool_parser_reasoning(j->gen[0].tp, &rl);
    CHECK_MSG(rl > 0 && !strcmp(thoughts, r), "streamed '%s', parsed '%s'", thoughts, r);
    CHECK_MSG(strstr(thoughts, "\xE2\x82\xAC") != NULL, "got '%s'", thoughts);
    CHECK_EQ_INT((int)text_len, (int)j->gen[0].len);
    free(ids);
    job_release(j);
    gm_model_free(m4);
}

int main(void) {
    gm_error err = {0};
    if (gm_model_open(test_data_path("tiny/gemma3.gguf"), NULL, &M, &err)) {
        fprintf(stderr, "cannot open the tiny model: %s\n", err.msg);
        return 1;
    }
    TOK = gm_model_tokenizer(M);
    MET = metrics_new();
    RUN(session_stops_and_hold_back);
    RUN(concurrent_equals_alone);
    RUN(stop_strings);
    RUN(choices_and_logprobs);
    RUN(speculative_equals_plain);
    RUN(cancelled_before_running);
    RUN(withdraw_and_cancel_running);
    RUN(thoughts_stream_as_pieces);
    metrics_free(MET);
    gm_model_free(M);
    return test_summary();
}
