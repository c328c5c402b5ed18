/* server/scheduler.c — continuous batching: the one thread that owns the engine.
 *
 * Each step: admit queued jobs while their choices fit in --parallel; drop jobs whose client went away;
 * one gm_engine_step over every active sequence — a decode row for each generating choice, then up to
 * --chunk tokens of pending prompts (oldest first), so a long prompt never freezes the other streams;
 * then sample every sequence that has logits. A prompt is computed once: when it is done, the first
 * sequence is forked into the request's n choices (shared KV blocks). The engine's prefix index makes
 * a repeated prefix (a chat's earlier turns, a system prompt) cost nothing, past the sliding window too.
 * Batch invariance of the engine makes every result independent of what else runs in the step. Every
 * token goes to its choice's gen_session (session.c: text, stop strings, limits, log-probabilities); the
 * scheduler knows nothing of the protocol the request came in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"
#include "gemma_grammar.h"
#include "gemma_vision.h"

/* A grammar context learns its states, token classes and masks lazily: the first request under a schema pays
 * 1-15 ms for each new grammar position, later ones ~0.01 ms. Contexts are kept by their grammar's source text
 * (GBNF, the translation for schemas) so repeated schemas start warm; the scheduler thread alone uses them. */
enum { GRAMMAR_CACHE = 8 };
typedef struct grammar_slot {
    gm_grammar *g;       /* owned (taken from the first request that brought it) */
    gm_grammar_ctx *c;
    bool markers;        /* matched with the markers vocabulary (a tool-call grammar) */
    int users;           /* active jobs matching under it: not evictable while > 0 */
    uint64_t last_used;
} grammar_slot;

struct srv_sched {
    gm_engine *e;
    const gm_tokenizer *tok;
    srv_options o;
    srv_metrics *met;
    int n_vocab;
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu; /* guards the queue and stopping */
    pthread_cond_t cv;
    job *q_head, *q_tail;
    int n_queued;
    bool stopping;
    bool hold;             /* a request was sent back for lack of KV memory: admit nothing until one ends */
    int64_t preemptions;
    /* scheduler thread only */
    job **active;
    int n_active;
    int slots_used;        /* choices of the active jobs (written under mu: sched_submit reads it) */
    gm_seq **seqs;
    job **seq_job;         /* whose sequence each of seqs is */
    float *logits_copy;
    gm_gvocab *gv;         /* the vocabulary as grammars see it, built on the first constrained request */
    gm_gvocab *gv_markers; /* ... with the chat-format markers as text and a calling turn's end as END (tool calls) */
    grammar_slot gcache[GRAMMAR_CACHE]; /* warm grammar contexts by source text */
    uint64_t gclock;
    /* speculative decoding (--lookup / --draft-model) */
    gm_spec_options spec;
    gm_model *draft_model;
    gm_engine *draft;
    gm_model *assistant;   /* --mtp: the assistant, and its drafter over the engine */
    gm_mtp *mtp;
    gm_spec **spec_sps;
    gm_sampling *spec_smp;
    int *spec_max;
    job **spec_job;        /* whose choice each speculating sequence is */
    int *spec_choice;
};

const char *sched_backend(const srv_sched *s) { return gm_engine_backend_name(s->e); }

int sched_n_ctx(const srv_sched *s) { return gm_engine_n_ctx(s->e); }

/* ---------------------------------------------------------------- the queue */

submit_result sched_submit(srv_sched *s, job *j) {
    pthread_mutex_lock(&s->mu);
    /* --queue counts requests that must wait: one that fits the free slots now is always taken */
    const bool fits_now = !s->q_head && !s->hold && s->slots_used + j->rq.n <= s->o.parallel;
    const submit_result r = s->stopping ? SUBMIT_STOPPING : fits_now || s->n_queued < s->o.queue ? SUBMIT_OK : SUBMIT_FULL;
    if (r == SUBMIT_OK) {
        pthread_mutex_lock(&j->mu);
        j->refs++;
        pthread_mutex_unlock(&j->mu);
        j->next = NULL;
        if (s->q_tail) s->q_tail->next = j;
        else s->q_head = j;
        s->q_tail = j;
        s->n_queued++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

void sched_withdraw(srv_sched *s, job *j) {
    if (!s) return;
    bool found = false;
    pthread_mutex_lock(&s->mu);
    for (job **p = &s->q_head, *prev = NULL; *p; prev = *p, p = &(*p)->next)
        if (*p == j) {
            *p = j->next;
            if (s->q_tail == j) s->q_tail = prev;
            s->n_queued--;
            found = true;
            break;
        }
    if (found) pthread_cond_signal(&s->cv); /* the scheduler publishes the new queue length (this thread
                                              * must not touch the engine) */
    pthread_mutex_unlock(&s->mu);
    if (!found) return; /* admitted already: the next sweep retires it */
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_release(j); /* the queue's reference */
}

/* The oldest queued job if its choices fit in the free slots, which it then takes (first come, first
 * served: a big request is not overtaken by small ones). */
static job *pop_fitting(srv_sched *s) {
    job *j = s->q_head;
    if (!j || s->hold || s->slots_used + j->rq.n > s->o.parallel) return NULL;
    s->slots_used += j->rq.n;
    s->q_head = j->next;
    if (!s->q_head) s->q_tail = NULL;
    s->n_queued--;
    j->next = NULL;
    return j;
}

/* ---------------------------------------------------------------- finishing */

static void free_choices(srv_sched *s, job *j) {
    for (int i = 0; i < j->rq.n; i++) {
        if (j->spec[i]) {
            gm_spec_stats st;
            gm_spec_get_stats(j->spec[i], &st);
            metrics_speculative(s->met, &st);
            j->draft_n += st.drafted, j->draft_n_accepted += st.accepted;
            gm_spec_free(j->spec[i]);
            j->spec[i] = NULL;
        }
        gm_seq_free(j->seq[i]);
        j->seq[i] = NULL;
        gm_matcher_free(j->gm[i]); /* after the sequence that borrowed it */
        j->gm[i] = NULL;
        gen_session_close(&j->gen[i]);
    }
    if (j->gslot) j->gslot->users--;
    else gm_grammar_ctx_free(j->gctx); /* a private context (every slot was busy), or none */
    j->gslot = NULL;
    j->gctx = NULL;
}

/* The cached context of the request's grammar, or a new one in an empty slot or the least recently used one
 * no active job holds. */
static grammar_slot *grammar_slot_for(srv_sched *s, const char *src, bool markers) {
    grammar_slot *empty = NULL, *lru = NULL;
    for (int k = 0; k < GRAMMAR_CACHE; k++) {
        grammar_slot *g = &s->gcache[k];
        if (g->g && g->markers == markers && !strcmp(gm_grammar_source(g->g), src)) return g;
        if (!g->g) empty = empty ? empty : g;
        else if (!g->users && (!lru || g->last_used < lru->last_used)) lru = g;
    }
    return empty ? empty : lru;
}

static gm_status grammar_context(srv_sched *s, job *j, const gm_gvocab *gv, gm_error *err) {
    const char *src = gm_grammar_source(j->rq.grammar);
    const bool markers = j->rq.grammar_markers;
    grammar_slot *g = grammar_slot_for(s, src, markers);
    if (!g) return gm_grammar_ctx_new(j->rq.grammar, gv, &j->gctx, err); /* all slots busy: a private one */
    if (!g->g || g->markers != markers || strcmp(gm_grammar_source(g->g), src)) { /* a miss: evict, adopt this one */
        gm_grammar_ctx_free(g->c);
        gm_grammar_free(g->g);
        *g = (grammar_slot){0};
        gm_status st = gm_grammar_ctx_new(j->rq.grammar, gv, &g->c, err);
        if (st) return st;
        g->markers = markers;
        g->g = j->rq.grammar;
        j->rq.grammar = NULL; /* the slot owns it now */
    }
    g->users++;
    g->last_used = ++s->gclock;
    j->gslot = g;
    j->gctx = g->c;
    return GM_OK;
}

/* The request's grammar on every choice: one context (its lazily learnt states and masks shared), one
 * matcher per choice, attached to the choice's sequence so each sampled token is one the grammar allows. */
/* The vocabulary of tool-call grammars: markers as text, a calling turn's end token (Gemma 4's
 * <|tool_response>, FunctionGemma's <start_function_response>) as END. */
static gm_status markers_vocab(srv_sched *s, gm_error *err) {
    static const char *const ends[] = {"<|tool_response>", "<start_function_response>"};
    int32_t ids[2];
    size_t n = 0;
    for (int k = 0; k < 2; k++) {
        const int32_t id = gm_token_id(s->tok, ends[k], strlen(ends[k]));
        if (id >= 0) ids[n++] = id;
    }
    const gm_gvocab_options o = {.markers = true, .end_ids = ids, .n_end_ids = n};
    return gm_gvocab_from_tokenizer(s->tok, &o, &s->gv_markers, err);
}

static gm_status start_grammar(srv_sched *s, job *j, gm_error *err) {
    if (!j->rq.grammar) return GM_OK;
    const bool markers = j->rq.grammar_markers;
    gm_status st = markers ? (s->gv_markers ? GM_OK : markers_vocab(s, err))
                           : (s->gv ? GM_OK : gm_gvocab_from_tokenizer(s->tok, NULL, &s->gv, err));
    if (!st) st = grammar_context(s, j, markers ? s->gv_markers : s->gv, err);
    for (int i = 0; i < j->rq.n && !st; i++)
        if (!(st = gm_matcher_new(j->gctx, &j->gm[i], err))) st = gm_seq_set_grammar(j->seq[i], j->gm[i], err);
    return st;
}

static void publish_state(srv_sched *s);

/* Ends an active job (finished, failed or abandoned): its sequences go back to the engine (their
 * blocks stay in the prefix index), the connection thread is woken, the scheduler's reference dropped.
 * The metrics are published before the client is woken, so a client that reads /metrics right after
 * its response never sees its own request still active. */
static void retire(srv_sched *s, int k) {
    job *j = s->active[k];
    pthread_mutex_lock(&j->mu);
    free_choices(s, j);
    const int gen = job_generated(j);
    const bool failed = j->err != 0;
    pthread_mutex_unlock(&j->mu);
    if (!failed) metrics_tokens(s->met, j->rq.n_prompt, j->cached, gen, !s->o.no_prefix_cache);
    memmove(s->active + k, s->active + k + 1, (size_t)(s->n_active - k - 1) * sizeof *s->active);
    s->n_active--;
    pthread_mutex_lock(&s->mu);
    s->slots_used -= j->rq.n;
    s->hold = false;
    pthread_mutex_unlock(&s->mu);
    publish_state(s);
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    job_release(j);
}

static void fail_job(job *j, job_error e, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (!j->err) job_fail(j, e, "%s", msg);
    pthread_mutex_unlock(&j->mu);
}

/* ---------------------------------------------------------------- admission */

/* Choice i of a group: the group's first is its head (it computes the prompt, the others are its forks). */
static int group_head(const job *j, int g) { return g * (j->rq.n / gen_request_groups(&j->rq)); }

/* The prompt into seq: its ids, each image's rows as a span (named by the image, both ways inside it). Images
 * come with one-prompt requests only (chat), so p is the whole prompt. */
static gm_status append_prompt(gm_seq *seq, const gen_request *rq, const int32_t *p, int np, gm_error *err) {
    int from = 0;
    gm_status st = GM_OK;
    for (int i = 0; i < rq->n_images && !st; i++) {
        const gm_vision_rows *r = &rq->images[i];
        const gm_embed_span sp = {.embeds = r->rows, .n = r->n_rows, .placeholder = rq->image_placeholder,
                                  .key = {r->key[0], r->key[1]}, .bidirectional = true};
        st = gm_seq_append(seq, p + from, rq->image_pos[i] - from, err);
        if (!st) st = gm_seq_append_embeds(seq, &sp, err);
        from = rq->image_pos[i] + r->n_rows;
    }
    return st ? st : gm_seq_append(seq, p + from, np - from, err);
}

static void admit(srv_sched *s, job *j) {
    gm_error err = {0};
    s->active[s->n_active++] = j; /* its slots were counted when it left the queue */
    gm_status st = GM_OK;
    for (int g = 0; g < gen_request_groups(&j->rq) && !st; g++) {
        gm_seq *seq = NULL;
        const int32_t *p;
        int np;
        gen_request_group(&j->rq, g, &p, &np);
        st = gm_seq_new(s->e, &seq, &err);
        if (!st && j->rq.prefix_scope) st = gm_seq_set_prefix_scope(seq, j->rq.prefix_scope, &err); /* forks inherit it */
        if (!st) st = append_prompt(seq, &j->rq, p, np, &err);
        pthread_mutex_lock(&j->mu);
        j->seq[group_head(j, g)] = seq;
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_lock(&j->mu);
    if (st) job_fail(j, st == GM_ERR_CONTEXT ? JOB_ERR_REQUEST : JOB_ERR_INTERNAL, "%s", err.msg);
    pthread_mutex_unlock(&j->mu);
}

/* Every group's prompt is computed (its head has logits). */
static bool prompts_done(const job *j) {
    for (int g = 0; g < gen_request_groups(&j->rq); g++)
        if (!gm_seq_logits(j->seq[group_head(j, g)])) return false;
    return true;
}

/* ---------------------------------------------------------------- one token */

static bool is_generating(const job *j, int i) { return j->seq[i] && !j->gen[i].finish; }

/* A new token of choice i (under j->mu) into its session. logits: what it was drawn from, when the
 * request wants log-probabilities; length: the choice's history up to and including this token (a
 * speculative step appends several before they are taken). */
static void take_token(srv_sched *s, job *j, int i, int32_t tok, const float *logits, double now, int length) {
    if (j->gen[i].n_gen > 0) metrics_itl(s->met, now - j->t_last[i]);
    j->t_last[i] = now;
    gen_session_take(&j->gen[i], tok, logits, length);
}

static gm_sampling choice_sampling(const job *j, int i) {
    gm_sampling smp = j->rq.smp;
    smp.seed = j->rq.smp.seed + (uint64_t)i; /* n choices of one seed: reproducible, and different */
    return smp;
}

/* Samples choice i's next token and turns it into text; false on an engine error (j failed). */
static bool sample_choice(srv_sched *s, job *j, int i, double now) {
    gm_error err = {0};
    /* sampling may change the logits in place: the log-probabilities are of the raw ones */
    const float *l = gm_seq_logits(j->seq[i]);
    const bool want_lp = j->rq.logprobs && l;
    if (want_lp) memcpy(s->logits_copy, l, (size_t)s->n_vocab * sizeof *l);
    const gm_sampling smp = choice_sampling(j, i);
    int32_t tok;
    gm_status st = gm_seq_sample(j->seq[i], &smp, &tok, &err);
    pthread_mutex_lock(&j->mu);
    if (st) job_fail(j, JOB_ERR_INTERNAL, "sampling failed: %s", err.msg);
    else take_token(s, j, i, tok, want_lp ? s->logits_copy : NULL, now, gm_seq_length(j->seq[i]));
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return !st;
}

/* The prompts are computed: fork each into its group's choices and start each one's session. */
static bool start_choices(srv_sched *s, job *j, double now) {
    gm_error err = {0};
    gm_status st = GM_OK;
    pthread_mutex_lock(&j->mu);
    j->cached = 0;
    for (int g = 0; g < gen_request_groups(&j->rq); g++) {
        const int32_t *p;
        int np;
        gen_request_group(&j->rq, g, &p, &np);
        const int head = group_head(j, g), reused = gm_seq_n_reused(j->seq[head]);
        j->cached += reused < np ? reused : np;
        for (int i = head + 1; i < group_head(j, g + 1) && !st; i++) st = gm_seq_fork(j->seq[head], &j->seq[i], &err);
    }
    const int n_ctx = gm_engine_n_ctx(s->e);
    for (int i = 0; i < j->rq.n && !st; i++) st = gen_session_start(&j->gen[i], &j->rq, s->tok, s->n_vocab, n_ctx, &err);
    if (!st) st = start_grammar(s, j, &err);
    for (int i = 0; i < j->rq.n && !st && j->rq.speculative; i++) st = gm_spec_new(j->seq[i], &s->spec, &j->spec[i], &err);
    if (st) job_fail(j, JOB_ERR_INTERNAL, "%s", err.msg);
    j->started = true;
    j->t_started = now;
    pthread_mutex_unlock(&j->mu);
    if (!st) metrics_ttft(s->met, now - j->t_submit);
    return !st;
}

/* ---------------------------------------------------------------- the loop */

static bool job_over(job *j) {
    bool over = j->err != 0;
    if (!over && j->started) {
        over = true;
        for (int i = 0; i < j->rq.n; i++) over = over && j->gen[i].finish;
    }
    return over;
}

/* Gathers the sequences with work for this step; returns how many, *n_decode of them decoding. */
static int gather(srv_sched *s, int *n_decode) {
    int n = 0;
    *n_decode = 0;
    for (int k = 0; k < s->n_active; k++) {
        job *j = s->active[k];
        if (j->err) continue;
        if (!j->started) { /* the group heads still in their prompts */
            for (int g = 0; g < gen_request_groups(&j->rq); g++) {
                gm_seq *head = j->seq[group_head(j, g)];
                if (!gm_seq_logits(head)) s->seq_job[n] = j, s->seqs[n++] = head;
            }
            continue;
        }
        for (int i = 0; i < j->rq.n; i++)
            if (is_generating(j, i) && !j->spec[i]) s->seq_job[n] = j, s->seqs[n++] = j->seq[i], (*n_decode)++;
    }
    return n;
}

/* The speculating choices: one gm_spec_step_many (proposals, then every verify row in one forward
 * call), then each accepted token through the same text path as a sampled one. A failed batch must not
 * fail every request in it: the sequences it still gave tokens keep them; after a full KV cache the
 * request holding the longest sequence fails (503) and gives its blocks back, and the rest go again;
 * after any other error each sequence runs alone, so only the requests whose own step fails fail. */
static int gather_speculating(srv_sched *s) {
    int n = 0;
    for (int k = 0; k < s->n_active; k++) {
        job *j = s->active[k];
        if (!j->started || j->err) continue;
        for (int i = 0; i < j->rq.n; i++)
            if (is_generating(j, i) && j->spec[i]) {
                s->spec_sps[n] = j->spec[i];
                s->spec_smp[n] = choice_sampling(j, i);
                s->spec_max[n] = j->rq.max_tokens > 0 ? j->rq.max_tokens - j->gen[i].n_gen : 0;
                s->spec_job[n] = j;
                s->spec_choice[n] = i;
                n++;
            }
    }
    return n;
}

/* Entry t's step succeeded: its tokens through the text path. */
static void take_spec_tokens(srv_sched *s, int t, double now) {
    job *j = s->spec_job[t];
    const int i = s->spec_choice[t];
    pthread_mutex_lock(&j->mu);
    if (!j->err) {
        int nt = 0;
        const int32_t *toks = gm_spec_last(j->spec[i], &nt);
        const int base = gm_seq_length(j->seq[i]) - nt; /* the step's tokens are all in the history */
        int taken = 0;
        /* no log-probabilities: a request that wants them does not speculate */
        while (taken < nt && !j->gen[i].finish) take_token(s, j, i, toks[taken], NULL, now, base + taken + 1), taken++;
        /* a choice that ended inside the step keeps only what its client was sent */
        if (taken < nt) {
            gm_seq_truncate(j->seq[i], base + taken, NULL);
            if (j->gm[i]) gm_matcher_rollback(j->gm[i], (size_t)(nt - taken), NULL); /* it took them too */
        }
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Fails entry t's request; its sequences go back to the engine now (the sweep retires the job). */
static void fail_spec_job(srv_sched *s, job *j, gm_status st, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (!j->err) job_fail(j, st == GM_ERR_NOMEM ? JOB_ERR_UNAVAILABLE : JOB_ERR_INTERNAL, "%s", msg);
    free_choices(s, j);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Drops the entries for which drop(t) holds, keeping the order of the rest; returns how many are left. */
static int spec_compact(srv_sched *s, int n, bool (*drop)(srv_sched *, int, const void *), const void *arg) {
    int m = 0;
    for (int t = 0; t < n; t++) {
        if (drop(s, t, arg)) continue;
        s->spec_sps[m] = s->spec_sps[t], s->spec_smp[m] = s->spec_smp[t], s->spec_max[m] = s->spec_max[t];
        s->spec_job[m] = s->spec_job[t], s->spec_choice[m] = s->spec_choice[t];
        m++;
    }
    return m;
}

static bool got_tokens(srv_sched *s, int t, const void *arg) {
    int nt = 0;
    gm_spec_last(s->spec_sps[t], &nt);
    if (nt > 0) take_spec_tokens(s, t, *(const double *)arg);
    return nt > 0;
}

static bool of_job(srv_sched *s, int t, const void *arg) { return s->spec_job[t] == arg; }

static void speculative_step(srv_sched *s) {
    int n = gather_speculating(s);
    const double now = srv_now();
    while (n > 0) {
        gm_error err = {0};
        const gm_status st = gm_spec_step_many(s->spec_sps, n, s->spec_smp, s->spec_max, &err);
        if (!st) {
            for (int t = 0; t < n; t++) take_spec_tokens(s, t, now);
            return;
        }
        n = spec_compact(s, n, got_tokens, &now);
        if (n == 0) return;
        if (st != GM_ERR_NOMEM) {
            for (int t = 0; t < n; t++) {
                if (s->spec_job[t]->err) continue; /* failed with another of its choices: freed */
                gm_error e1 = {0};
                const gm_status s1 = n == 1 ? st : gm_spec_step(s->spec_sps[t], &s->spec_smp[t], s->spec_max[t], NULL, NULL, &e1);
                if (s1) fail_spec_job(s, s->spec_job[t], s1, n == 1 ? err.msg : e1.msg);
                else take_spec_tokens(s, t, now);
            }
            return;
        }
        int worst = 0;
        for (int t = 1; t < n; t++)
            if (gm_seq_length(s->spec_job[t]->seq[s->spec_choice[t]]) >
                gm_seq_length(s->spec_job[worst]->seq[s->spec_choice[worst]]))
                worst = t;
        job *w = s->spec_job[worst];
        fail_spec_job(s, w, st, err.msg);
        n = spec_compact(s, n, of_job, w);
    }
}

/* A request still in its prompt goes back to the head of the queue: its sequence is freed (the blocks
 * it computed stay in the prefix index, so it resumes from them when admitted again), and nothing new
 * is admitted until a running request ends. */
static void requeue(srv_sched *s, int k) {
    job *j = s->active[k];
    pthread_mutex_lock(&j->mu);
    free_choices(s, j);
    pthread_mutex_unlock(&j->mu);
    memmove(s->active + k, s->active + k + 1, (size_t)(s->n_active - k - 1) * sizeof *s->active);
    s->n_active--;
    pthread_mutex_lock(&s->mu);
    s->slots_used -= j->rq.n;
    j->next = s->q_head;
    s->q_head = j;
    if (!s->q_tail) s->q_tail = j;
    s->n_queued++;
    s->hold = true;
    pthread_mutex_unlock(&s->mu);
    s->preemptions++;
}

/* After an engine error in a step; only requests with a sequence in the failed batch are touched. A
 * full KV cache (the live sequences need more than --kv-mem) sends the newest request still in its
 * prompt back to the queue while others run; with none, the newest request in the batch fails (503) so
 * the rest can finish; a request alone in the batch fails. Any other error is found by stepping each
 * sequence alone: only the requests whose sequence fails alone fail. */
static void on_step_error(srv_sched *s, gm_status st, const gm_error *err, int n) {
    const job_error e = st == GM_ERR_NOMEM ? JOB_ERR_UNAVAILABLE : JOB_ERR_INTERNAL;
    if (st == GM_ERR_NOMEM && n > 1) {
        for (int k = s->n_active - 1; k >= 0; k--)
            if (!s->active[k]->started && !s->active[k]->err) {
                requeue(s, k);
                return;
            }
        for (int k = s->n_active - 1; k >= 0; k--)
            for (int t = 0; t < n; t++)
                if (s->seq_job[t] == s->active[k]) {
                    fail_job(s->active[k], e, err->msg);
                    return;
                }
        return;
    }
    if (n == 1) {
        fail_job(s->seq_job[0], e, err->msg);
        return;
    }
    for (int t = 0; t < n; t++) {
        job *j = s->seq_job[t];
        gm_seq *seq = s->seqs[t];
        gm_error e1 = {0};
        if (j->err) continue;
        const gm_status s1 = gm_engine_step(s->e, &seq, 1, 1 + s->o.chunk, NULL, &e1);
        if (s1) fail_job(j, s1 == GM_ERR_NOMEM ? JOB_ERR_UNAVAILABLE : JOB_ERR_INTERNAL, e1.msg);
    }
}

static void step(srv_sched *s) {
    speculative_step(s);
    int n_decode;
    const int n = gather(s, &n_decode);
    if (n == 0) return;
    gm_error err = {0};
    gm_status st = gm_engine_step(s->e, s->seqs, n, n_decode + s->o.chunk, NULL, &err);
    if (st) {
        on_step_error(s, st, &err, n);
        if (st == GM_ERR_NOMEM || n == 1) return;
    }
    const double now = srv_now();
    for (int k = 0; k < s->n_active; k++) {
        job *j = s->active[k];
        if (j->err) continue;
        if (!j->started) {
            if (!prompts_done(j) || !start_choices(s, j, now)) continue;
        }
        for (int i = 0; i < j->rq.n; i++) /* speculating choices take their tokens in speculative_step */
            if (is_generating(j, i) && !j->spec[i] && gm_seq_logits(j->seq[i]) && !sample_choice(s, j, i, now))
                break;
    }
}

/* Retires what is over: finished, failed, or abandoned by its client. */
static void sweep(srv_sched *s) {
    for (int k = s->n_active - 1; k >= 0; k--) {
        job *j = s->active[k];
        pthread_mutex_lock(&j->mu);
        const bool over = job_over(j) || j->cancelled;
        pthread_mutex_unlock(&j->mu);
        if (over) retire(s, k);
    }
}

static void publish_state(srv_sched *s) {
    gm_kv_stats kv;
    gm_engine_kv_stats(s->e, &kv);
    pthread_mutex_lock(&s->mu);
    const int queued = s->n_queued;
    pthread_mutex_unlock(&s->mu);
    metrics_state(s->met, queued, s->slots_used, s->preemptions, &kv);
}

/* Shutdown: every active and queued job fails (streams end with an error event and [DONE]). */
static void drain(srv_sched *s) {
    for (int k = s->n_active - 1; k >= 0; k--) {
        fail_job(s->active[k], JOB_ERR_UNAVAILABLE, "the server is shutting down");
        retire(s, k);
    }
    pthread_mutex_lock(&s->mu);
    job *j = s->q_head;
    s->q_head = s->q_tail = NULL;
    s->n_queued = 0;
    pthread_mutex_unlock(&s->mu);
    while (j) {
        job *next = j->next;
        pthread_mutex_lock(&j->mu);
        job_fail(j, JOB_ERR_UNAVAILABLE, "the server is shutting down");
        j->done = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        job_release(j);
        j = next;
    }
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        const int queued_before = s->n_queued;
        while (!s->stopping && s->n_active == 0 && !s->q_head && s->n_queued == queued_before)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        job *admitted[SRV_MAX_N * 64];
        int n_adm = 0;
        for (job *j; n_adm < (int)(sizeof admitted / sizeof *admitted) && (j = pop_fitting(s));) admitted[n_adm++] = j;
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < n_adm; i++) admit(s, admitted[i]);
        sweep(s);
        step(s);
        sweep(s);
        publish_state(s);
    }
    drain(s);
    publish_state(s);
    return NULL;
}

/* ---------------------------------------------------------------- life cycle */

/* Every layer's keys and values for one position. */
static size_t kv_bytes_per_token(const gm_model *m, gm_kv_dtype t) {
    const gm_config *c = gm_model_config(m);
    size_t b = 0;
    for (int il = 0; il < c->n_layers; il++) {
        const gm_layer_config *l = gm_model_layer(m, il);
        b += 2 * (size_t)l->n_kv_heads * l->head_dim * (t == GM_KV_DTYPE_F16 ? 2 : 4);
    }
    return b;
}

/* --lookup needs nothing more; --draft-model opens the draft model and gives it an engine of its own,
 * shared by every speculating sequence (they draft together); --mtp opens the assistant over the engine (its
 * sequences draft together too). */
static gm_status open_drafter(srv_sched *s, const srv_options *o, const gm_engine_options *target, gm_error *err) {
    s->spec = (gm_spec_options){.kind = o->lookup ? GM_SPEC_LOOKUP : o->mtp_path ? GM_SPEC_MTP : GM_SPEC_DRAFT,
                                .k_max = o->draft_max};
    if (o->mtp_path) { /* no engine of its own: it reads the target's cache */
        gm_status st = gm_model_open(o->mtp_path, &o->model_opts, &s->assistant, err);
        if (!st) st = gm_mtp_new(s->e, s->assistant, NULL, &s->mtp, err);
        s->spec.mtp = s->mtp;
        return st;
    }
    if (!o->draft_model_path) return GM_OK;
    gm_status st = gm_model_open(o->draft_model_path, &o->model_opts, &s->draft_model, err);
    if (st) return st;
    gm_engine_options eo = *target;
    eo.kv_mem = (size_t)o->parallel * (size_t)o->n_ctx * kv_bytes_per_token(s->draft_model, o->kv_type);
    if ((st = gm_engine_new(s->draft_model, &eo, &s->draft, err))) return st;
    s->spec.draft = s->draft;
    return GM_OK;
}

gm_status sched_new(gm_model *m, const srv_options *o, gm_threadpool *pool, srv_metrics *metrics, srv_sched **out,
                    gm_error *err) {
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return GM_ERR_NOMEM;
    s->o = *o;
    s->met = metrics;
    s->tok = gm_model_tokenizer(m);
    s->n_vocab = gm_model_config(m)->n_vocab;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    gm_engine_options eo = {.n_threads = o->threads, .n_ctx = o->n_ctx, .kv_type = o->kv_type,
                            .no_prefix_cache = o->no_prefix_cache, .pool = pool, .backend = o->backend,
                            .device = o->device, .gpu_validate = o->gpu_validate};
    eo.n_batch = o->parallel + o->chunk > 512 ? o->parallel + o->chunk : 512;
    if (eo.n_batch < o->min_batch) eo.n_batch = o->min_batch;
    /* default budget: every parallel sequence at full context with every position of every layer; the
     * sliding layers need far less, which leaves the rest to the prefix cache */
    eo.kv_mem = o->kv_mem ? o->kv_mem : (size_t)o->parallel * (size_t)o->n_ctx * kv_bytes_per_token(m, o->kv_type);
    gm_status st = gm_engine_new(m, &eo, &s->e, err);
    if (!st) st = open_drafter(s, o, &eo, err);
    s->active = calloc((size_t)o->parallel, sizeof *s->active);
    s->seqs = calloc((size_t)o->parallel, sizeof *s->seqs);
    s->seq_job = calloc((size_t)o->parallel, sizeof *s->seq_job);
    s->spec_sps = calloc((size_t)o->parallel, sizeof *s->spec_sps);
    s->spec_smp = calloc((size_t)o->parallel, sizeof *s->spec_smp);
    s->spec_max = calloc((size_t)o->parallel, sizeof *s->spec_max);
    s->spec_job = calloc((size_t)o->parallel, sizeof *s->spec_job);
    s->spec_choice = calloc((size_t)o->parallel, sizeof *s->spec_choice);
    s->logits_copy = malloc((size_t)s->n_vocab * sizeof *s->logits_copy);
    if (!st && (!s->active || !s->seqs || !s->seq_job || !s->logits_copy || !s->spec_sps || !s->spec_smp || !s->spec_max ||
                !s->spec_job || !s->spec_choice))
        st = err ? (snprintf(err->msg, sizeof err->msg, "out of memory"), err->code = GM_ERR_NOMEM) : GM_ERR_NOMEM;
    if (!st && pthread_create(&s->th, NULL, sched_main, s)) {
        if (err) snprintf(err->msg, sizeof err->msg, "cannot start the scheduler thread");
        st = GM_ERR_INTERNAL;
    }
    s->th_started = !st;
    if (st) {
        sched_free(s);
        return st;
    }
    *out = s;
    return GM_OK;
}

void sched_stop(srv_sched *s) {
    if (!s || !s->th_started) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    s->th_started = false;
}

void sched_free(srv_sched *s) {
    if (!s) return;
    sched_stop(s);
    gm_mtp_free(s->mtp); /* before the engine it drafts for */
    gm_model_free(s->assistant);
    if (s->e) gm_engine_free(s->e);
    if (s->draft) gm_engine_free(s->draft);
    gm_model_free(s->draft_model);
    free(s->spec_sps);
    free(s->spec_smp);
    free(s->spec_max);
    free(s->spec_job);
    free(s->spec_choice);
    free(s->active);
    free(s->seqs);
    free(s->seq_job);
    free(s->logits_copy);
    for (int k = 0; k < GRAMMAR_CACHE; k++) {
        gm_grammar_ctx_free(s->gcache[k].c);
        gm_grammar_free(s->gcache[k].g);
    }
    gm_gvocab_free(s->gv);
    gm_gvocab_free(s->gv_markers);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
