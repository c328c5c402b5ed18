/* generate/speculative.c — speculative decoding (gemma.h, "speculative decoding"): proposers (prompt
 * lookup, a draft model), one verify pass of the target over the proposals, acceptance (greedy
 * equality or the rejection scheme), rollback with gm_seq_truncate.
 *
 * A step, per sequence: `base` is the history length before it. Afterwards the history is base
 * + a accepted proposals + the target's token, and the cache holds every position but that last
 * token (the generator's invariant), so the next step's pass starts with it. Logits row i of a
 * step is the target's distribution for history position base + i: row 0 is the sequence's own
 * logits when its last token was already computed (have_base), else the pass's first row.
 *
 * Under a grammar (the target sequence's matcher, gm_seq_set_grammar) each position's token is chosen
 * from the target's row with the grammar's mask, by gm_pick_token, the function gm_seq_sample uses, so
 * greedy output is the one without speculation; the matcher advances over the kept tokens only.
 * Proposals are screened first: lookup's are cut at the first token the grammar refuses (no verify row
 * is spent past it), a draft model drafts under the grammar (its q is then the masked distribution). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "gemma_grammar.h"
#include "engine/eagle3.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "generate/speculative.h"

/* The draft sequence's RNG is seeded apart from the target's: the same stream for the draw of a
 * guess and for its acceptance test would correlate them and bias the output. */
#define DRAFT_SEED_MIX 0xD1B54A32D192ED03ull

/* The gate. On a CPU an extra verify row is far from free (the 270M model on 2 cores: a pass of 2 rows
 * costs ~1.45 of 1 row; the LM head alone is 168M multiply-adds a row), so a proposal pays only when
 * its first token is accepted often enough. A sequence keeps a running estimate of that rate (each
 * step weighs 1/GATE_WEIGHT) and proposes only while it is at least GATE_OPEN. Lookup proposals cost
 * nothing to make, so while the gate is shut they are still made and scored against the token the
 * target then picks (shadowing): the gate reopens as soon as the text turns to copying. A draft model
 * is shut out for real, except for a one-token probe every GATE_PROBE steps. */
#define GATE_OPEN 0.5
#define GATE_WEIGHT 8.0
#define GATE_PROBE 8

struct gm_spec {
    gm_seq *s;             /* the target sequence */
    gm_spec_options o;
    gm_seq *ds;            /* the draft model's sequence (GM_SPEC_DRAFT) */
    int V;
    int k_cur;             /* proposals wanted next step (adapted) */
    double rate;           /* running rate at which the first proposed token is accepted (the gate) */
    int shut_steps;        /* steps since the gate shut or since the last probe */
    int32_t shadow;        /* the lookup proposal's first token while the gate is shut; -1: none */
    int32_t draft[GM_SPEC_MAX_K];
    int n_draft;
    int k_want;            /* draft model, assistant: drafts to make this step */
    float *hid;            /* assistant: (k_max + 1) x d, the verify rows' hidden states */
    float *h, *h_next;     /* assistant: the hidden state its next draft step reads, and the one it writes */
    int h_pos;             /* assistant: the position whose hidden state h is after a step (-1: none) */
    float *mtp_logits;     /* assistant, EAGLE-3 head: V, one draft step's logits */
    int n_rows;            /* rows of this step's verify pass */
    /* EAGLE-3: the head's cache holds a pair (token p + 1, g_p) for every position p < e3_pos; the pending one,
     * (the token after e3_pos, e3_pg), is written when that token is known; g comes from the target's taps */
    gm_e3_seq *e3s;
    int e3_pos;            /* -1: none yet */
    bool e3_broken;        /* the history was computed without taps: no more drafts for this sequence */
    int e3_rows;           /* rows the tap buffers hold */
    float *e3_taps, *e3_hid, *e3_in, *e3_g; /* e3_rows x (aux x d_t), x d_t, x 3 d_t, x d_head */
    float *e3_pg, *e3_gcur, *e3_gnext;      /* d_head each */
    bool q_dense;          /* q[j * V ..] is the draft's distribution for draft[j]; else point masses */
    float *q;              /* k_max x V, allocated when a sampled draft first needs it */
    float *logits;         /* (k_max + 1) x V */
    gm_row rows[GM_SPEC_MAX_K + 1];
    int base;
    bool have_base;
    int32_t out[GM_SPEC_MAX_K + 1];
    int n_out;
    int g_steps;           /* grammar steps taken this step and not kept yet: undone if the step fails */
    gm_spec_stats st;
};

/* ---------------------------------------------------------------- proposers */

int gm_lookup_propose(const int32_t *h, int n, int ngram_min, int ngram_max, int k, int32_t *out) {
    if (!h || k <= 0 || ngram_min < 1) return 0;
    for (int g = ngram_max < n - 1 ? ngram_max : n - 1; g >= ngram_min; g--) {
        const int32_t *key = h + n - g;
        /* an occurrence at j..j+g-1 must be followed by at least one token before the key ends h */
        for (int j = n - g - 1; j >= 0; j--) {
            if (h[j] != key[0] || memcmp(h + j, key, (size_t)g * sizeof *h)) continue;
            const int avail = n - (j + g), m = avail < k ? avail : k;
            memcpy(out, h + j + g, (size_t)m * sizeof *out);
            return m;
        }
    }
    return 0;
}

gm_status gm_spec_check_vocab(const gm_model *target, const gm_model *draft, gm_error *err) {
    const int nt = gm_model_config(target)->n_vocab, nd = gm_model_config(draft)->n_vocab;
    if (nt != nd)
        return gm_fail(err, GM_ERR_ARG,
                       "speculative: the draft model's vocabulary has %d tokens, the target's %d: a draft model must "
                       "share the target's vocabulary", nd, nt);
    const gm_tokenizer *a = gm_model_tokenizer(target), *b = gm_model_tokenizer(draft);
    if (!a || !b) return GM_OK; /* no texts to compare: the sizes agree */
    for (int i = 0; i < nt; i++) {
        size_t la = 0, lb = 0;
        const char *ta = gm_token_text(a, i, &la), *tb = gm_token_text(b, i, &lb);
        if (la == lb && (la == 0 || !memcmp(ta, tb, la))) continue;
        return gm_fail(err, GM_ERR_ARG,
                       "speculative: token %d is '%.*s' in the draft model's vocabulary but '%.*s' in the target's: a "
                       "draft model must share the target's vocabulary", i, (int)(lb < 40 ? lb : 40), tb ? tb : "",
                       (int)(la < 40 ? la : 40), ta ? ta : "");
    }
    return GM_OK;
}

/* ---------------------------------------------------------------- the grammar */

/* An END token was taken: nothing can follow, so neither a draft nor the step goes past it. */
static bool ended(gm_matcher *m) { return gm_matcher_is_finished(m) && !gm_matcher_accepts_end(m); }

/* Undoes the grammar steps this step took and did not keep (drafting, or a step that failed). */
static gm_status rewind_grammar(gm_spec *sp, gm_error *err) {
    const int n = sp->g_steps;
    sp->g_steps = 0;
    return n ? gm_matcher_rollback(sp->s->grammar, (size_t)n, err) : GM_OK;
}

/* Lookup under a grammar: the proposal stops before its first token the grammar refuses. The target could
 * never pick that token, so rows past it would be verified in vain. Exact in both modes: lookup's q is a
 * point mass on a token whose p is 0, so the rejection scheme would draw from max(0, p - q) = p, which is
 * what the step's own token is drawn from where the proposal ends. The matcher is left as it was. */
static gm_status screen_lookup(gm_spec *sp, gm_error *err) {
    gm_matcher *m = sp->s->grammar;
    if (!m || !sp->n_draft) return GM_OK;
    int j = 0;
    gm_status st = GM_OK;
    for (bool ok = true; j < sp->n_draft && ok && !st; j += ok)
        st = gm_matcher_accept_token(m, sp->draft[j], &ok, err);
    const gm_status rb = j ? gm_matcher_rollback(m, (size_t)j, err) : GM_OK;
    sp->st.refused += sp->n_draft - j;
    sp->n_draft = j;
    return st ? st : rb;
}

/* Draws a token from the weights max(0, p(x) - q(x)) over the candidates c[0..n) (.logit = p), where q
 * is the row qrow or, without one, a point mass at `point` (-1: none, a plain draw from p). A residual
 * that rounding left empty falls back to p. */
static double resid(const gm_cand *c, const float *qrow, int32_t point) {
    const double q = qrow ? (double)qrow[c->id] : (double)(c->id == point);
    const double r = (double)c->logit - q;
    return r > 0 ? r : 0;
}

static int32_t draw(gm_sampler *sm, const gm_cand *c, int n, const float *qrow, int32_t point) {
    double z = 0.0;
    for (int i = 0; i < n; i++) z += resid(&c[i], qrow, point);
    if (!(z > 0.0)) {
        qrow = NULL, point = -1, z = 0.0;
        for (int i = 0; i < n; i++) z += c[i].logit;
    }
    const double u = gm_sampler_uniform(sm) * z;
    double cum = 0.0;
    int32_t last = c[0].id;
    for (int i = 0; i < n; i++) {
        const double w = resid(&c[i], qrow, point);
        if (w <= 0) continue;
        last = c[i].id;
        if (u < (cum += w)) return c[i].id;
    }
    return last;
}

/* The draft sequence follows the target's history (rolled back to the common prefix); k_want drafts are
 * then made by draft_rounds. */
static gm_status draft_begin(gm_spec *sp, const gm_sampling *o, int k, gm_error *err) {
    gm_seq *q = sp->s, *d = sp->ds;
    if (k > d->e->n_ctx - q->n_tok) k = d->e->n_ctx - q->n_tok;
    if (k <= 0 || (q->grammar && ended(q->grammar))) return GM_OK;
    int common = 0;
    while (common < q->n_tok && common < d->n_tok && q->tok[common] == d->tok[common]) common++;
    gm_status st = gm_seq_truncate(d, common, err);
    if (!st) st = gm_seq_append(d, q->tok + common, q->n_tok - common, err);
    sp->q_dense = o->temperature > 0.0f;
    if (!st && sp->q_dense && !sp->q && !(sp->q = malloc((size_t)sp->o.k_max * sp->V * sizeof *sp->q)))
        st = gm_fail(err, GM_ERR_NOMEM, "speculative: out of memory for the draft distributions");
    if (!st) sp->k_want = k;
    return st;
}

/* The next draft token from the draft sequence's logits: greedy, or drawn from q (kept) with the draft's
 * own RNG. Under a grammar the draft is constrained as the target will be (the target's matcher advances
 * over the drafts and is rewound before the verify pass): a refused draft would only end the proposal,
 * and q is the masked distribution actually drawn from, so the rejection test stays exact. */
static gm_status draft_pick(gm_spec *sp, const gm_sampling *o, gm_error *err) {
    gm_seq *d = sp->ds;
    gm_matcher *m = sp->s->grammar;
    gm_sampling dopt = *o;
    dopt.seed ^= DRAFT_SEED_MIX;
    gm_sampler *sm = gm_seq_sampler(d, &dopt);
    int32_t t;
    gm_status st;
    if (!sp->q_dense) {
        st = gm_pick_token(sm, m, sp->s->mask, &dopt, d->logits, d->tok, d->n_tok, &t, err);
    } else {
        int nc;
        st = m ? gm_grammar_mask(m, sp->s->mask, sp->V, err) : GM_OK;
        sm->mask = m ? sp->s->mask : NULL;
        if (!st) st = gm_sampler_dist(sm, &dopt, d->logits, d->tok, d->n_tok, &nc, err);
        sm->mask = NULL;
        if (st) return st;
        float *qrow = sp->q + (size_t)sp->n_draft * sp->V;
        memset(qrow, 0, (size_t)sp->V * sizeof *qrow);
        for (int i = 0; i < nc; i++) qrow[sm->cand[i].id] = sm->cand[i].logit;
        t = draw(sm, sm->cand, nc, NULL, -1);
        bool ok = true;
        if (m && !(st = gm_matcher_accept_token(m, t, &ok, err)) && !ok)
            st = gm_fail(err, GM_ERR_STATE, "the grammar refused draft token %d its mask allowed", (int)t);
    }
    if (st) return st;
    sp->g_steps += m != NULL;
    if ((st = gm_seq_append(d, &t, 1, err))) return st;
    sp->draft[sp->n_draft++] = t;
    if (m && ended(m)) sp->k_want = sp->n_draft; /* an END drafted: nothing can follow it */
    return GM_OK;
}

/* Draft-model proposals of every sequence, one token per round: the draft sequences that share a draft
 * engine are evaluated together in one gm_engine_eval call per round. */
static gm_status draft_rounds(gm_spec *const *sps, int n, const gm_sampling *s, gm_error *err) {
    gm_seq *one[16], **list = n <= 16 ? one : malloc((size_t)n * sizeof *list);
    int *idx = malloc((size_t)n * sizeof *idx);
    gm_status st = list && idx ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "speculative: out of memory");
    while (!st) {
        gm_engine *de = NULL; /* one engine per call: the first that still has drafting to do */
        int m = 0;
        for (int i = 0; i < n; i++) {
            gm_spec *sp = sps[i];
            if (!sp->ds || sp->n_draft >= sp->k_want || (de && sp->ds->e != de)) continue;
            de = sp->ds->e;
            idx[m] = i;
            list[m++] = sp->ds;
        }
        if (!m) break;
        st = gm_engine_eval(de, list, m, err);
        for (int j = 0; j < m && !st; j++) {
            sps[idx[j]]->st.draft_evals++;
            st = draft_pick(sps[idx[j]], &s[idx[j]], err);
        }
    }
    if (list != one) free(list);
    free(idx);
    return st ? gm_fail_prefix(err, "speculative: draft model: ") : GM_OK;
}

/* The assistant can draft when the step's pass starts at the last token (uncomputed) and the state of the position
 * before it was kept by the last step. */
static gm_status mtp_begin(gm_spec *sp, int k) {
    const gm_seq *q = sp->s;
    if (sp->h_pos < 0 || sp->h_pos != q->n_kv - 1 || q->n_kv != q->n_tok - 1 || (q->grammar && ended(q->grammar)))
        return GM_OK;
    sp->k_want = k;
    return GM_OK;
}

/* The assistant's next guess from its logits: the argmax (llama.cpp's draft-mtp), among the tokens the grammar
 * allows under one (the target's matcher takes it and is rewound before the verify pass). */
static gm_status mtp_pick(gm_spec *sp, gm_error *err) {
    gm_matcher *m = sp->s->grammar;
    const float *L = sp->mtp_logits;
    gm_status st = m ? gm_grammar_mask(m, sp->s->mask, sp->V, err) : GM_OK;
    if (st) return st;
    int32_t best = -1;
    for (int i = 0; i < sp->V; i++)
        if ((!m || (sp->s->mask[i / 32] >> (i % 32) & 1u)) && (best < 0 || L[i] > L[best])) best = i;
    if (best < 0) { /* the grammar allows nothing more */
        sp->k_want = sp->n_draft;
        return GM_OK;
    }
    bool ok = true;
    if (m && !(st = gm_matcher_accept_token(m, best, &ok, err)) && !ok)
        st = gm_fail(err, GM_ERR_STATE, "the grammar refused draft token %d its mask allowed", (int)best);
    if (st) return st;
    sp->g_steps += m != NULL;
    sp->draft[sp->n_draft++] = best;
    float *t = sp->h; /* the assistant's state (the EAGLE-3 head swaps its own) */
    sp->h = sp->h_next, sp->h_next = t;
    if (m && ended(m)) sp->k_want = sp->n_draft;
    return GM_OK;
}

/* The assistant's guesses for every sequence, one token per round: the sequences sharing an assistant draft in one
 * gm_mtp_draft call per round, each step reading the previous one's token and state. */
static gm_status mtp_rounds(gm_spec *const *sps, int n, gm_error *err) {
    gm_mtp_row one[16], *rows = n <= 16 ? one : malloc((size_t)n * sizeof *rows);
    int *idx = malloc((size_t)n * sizeof *idx);
    gm_status st = rows && idx ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "speculative: out of memory");
    while (!st) {
        gm_mtp *d = NULL;
        int m = 0;
        for (int i = 0; i < n; i++) {
            gm_spec *sp = sps[i];
            if (sp->o.kind != GM_SPEC_MTP || sp->n_draft >= sp->k_want || (d && sp->o.mtp != d)) continue;
            d = sp->o.mtp;
            const gm_seq *q = sp->s;
            idx[m] = i;
            rows[m++] = (gm_mtp_row){.seq = q, .token = sp->n_draft ? sp->draft[sp->n_draft - 1] : q->tok[q->n_tok - 1],
                                     .h = sp->h, .logits = sp->mtp_logits, .h_next = sp->h_next};
        }
        if (!m) break;
        st = gm_mtp_draft(d, rows, m, err);
        for (int j = 0; j < m && !st; j++) {
            sps[idx[j]]->st.draft_evals++;
            st = mtp_pick(sps[idx[j]], err);
        }
    }
    if (rows != one) free(rows);
    free(idx);
    return st ? gm_fail_prefix(err, "speculative: assistant: ") : GM_OK;
}

/* ---- EAGLE-3 */

static int e3_dt(const gm_spec *sp) { return sp->s->e->c->d_model; }
static int e3_dh(const gm_spec *sp) { return gm_model_config(gm_eagle3_head(sp->o.eagle3))->d_model; }
static int e3_aux(const gm_spec *sp) { return sp->s->e->n_taps; }

/* Row i of a pass asks the engine for what the head reads: the tapped layers' inputs and the final state. */
static void e3_ask(gm_spec *sp, gm_row *row, int i) {
    row->taps = sp->e3_taps + (size_t)i * (size_t)e3_aux(sp) * (size_t)e3_dt(sp);
    row->hidden = sp->e3_hid + (size_t)i * (size_t)e3_dt(sp);
}

/* Rows 0..n-1 of the tap buffers -> g (the head's encoder over the three states in the head's order). */
static gm_status e3_encode(gm_spec *sp, int n, gm_error *err) {
    const int dt = e3_dt(sp), L = sp->s->e->c->n_layers, aux = e3_aux(sp), *ids = gm_eagle3_taps(sp->o.eagle3);
    for (int i = 0; i < n; i++)
        for (int t = 0, a = 0; t < 3; t++) {
            const float *src = ids[t] < L ? sp->e3_taps + ((size_t)i * aux + (size_t)a++) * dt : sp->e3_hid + (size_t)i * dt;
            memcpy(sp->e3_in + ((size_t)i * 3 + (size_t)t) * dt, src, (size_t)dt * sizeof(float));
        }
    return gm_eagle3_encode(sp->o.eagle3, sp->e3_in, n, sp->e3_g, err);
}

/* The target computed positions first .. first + n - 1 with taps in rows 0..n-1; the last of them gave the
 * position after it (rows past n were rejected). Brings the head's pairs up to first + n - 1, which becomes the
 * pending position: the pending pair of before (its token is now known) first, then one per row but the last. A
 * head that cannot follow (a gap: positions computed without taps) stops drafting for the sequence. */
static gm_status e3_absorb(gm_spec *sp, int first, int n, gm_error *err) {
    const gm_seq *q = sp->s;
    gm_e3_seq *hs = sp->e3s;
    if (sp->e3_broken || n <= 0) return GM_OK;
    const int have = gm_e3_seq_length(hs);
    if (sp->e3_pos >= 0 && have > sp->e3_pos + 1) gm_e3_seq_truncate(hs, sp->e3_pos + 1); /* drafts past the pair */
    gm_status st = GM_OK;
    if (sp->e3_pos >= 0 && gm_e3_seq_length(hs) == sp->e3_pos) { /* the pending pair: its token is in the history */
        const gm_eagle3_row r = {.seq = hs, .pos = sp->e3_pos, .token = q->tok[sp->e3_pos + 1], .g = sp->e3_pg};
        st = gm_eagle3_decode(sp->o.eagle3, &r, 1, err);
    }
    if (st) return st;
    if (gm_e3_seq_length(hs) != first) { /* positions the head never saw */
        sp->e3_broken = true, sp->e3_pos = -1;
        return GM_OK;
    }
    if ((st = e3_encode(sp, n, err))) return st;
    const int dh = e3_dh(sp);
    gm_eagle3_row rows[GM_SPEC_MAX_K + 1];
    for (int i0 = 0; i0 < n - 1 && !st; i0 += GM_SPEC_MAX_K + 1) {
        const int m = n - 1 - i0 < GM_SPEC_MAX_K + 1 ? n - 1 - i0 : GM_SPEC_MAX_K + 1;
        for (int i = 0; i < m; i++)
            rows[i] = (gm_eagle3_row){.seq = hs, .pos = first + i0 + i, .token = q->tok[first + i0 + i + 1],
                                      .g = sp->e3_g + (size_t)(i0 + i) * dh};
        st = gm_eagle3_decode(sp->o.eagle3, rows, m, err);
    }
    if (st) return st;
    sp->e3_pos = first + n - 1;
    memcpy(sp->e3_pg, sp->e3_g + (size_t)(n - 1) * dh, (size_t)dh * sizeof *sp->e3_pg);
    return GM_OK;
}

/* A prompt: positions [n_kv, n_tok - 1) computed with taps, in chunks of the buffers' rows (the last token is
 * left to the step's pass, as the assistant's are). The prefix index is not used: the head needs every state. */
static gm_status e3_prompt(gm_spec *sp, gm_error *err) {
    gm_seq *q = sp->s;
    gm_row rows[64];
    gm_status st = GM_OK;
    const int chunk = sp->e3_rows < 64 ? sp->e3_rows : 64;
    while (!st && q->n_kv < q->n_tok - 1) {
        const int first = q->n_kv, n = q->n_tok - 1 - first < chunk ? q->n_tok - 1 - first : chunk;
        for (int i = 0; i < n; i++) {
            rows[i] = (gm_row){.seq = q, .token = q->tok[first + i], .pos = first + i};
            e3_ask(sp, &rows[i], i);
        }
        st = gm_engine_forward(q->e, rows, n, NULL, err);
        if (!st) st = e3_absorb(sp, first, n, err);
    }
    return st;
}

/* The head drafts when the last token is the only one uncomputed and its pair is pending. */
static gm_status e3_begin(gm_spec *sp, int k) {
    const gm_seq *q = sp->s;
    if (sp->e3_broken || sp->e3_pos < 0 || sp->e3_pos != q->n_kv - 1 || q->n_kv != q->n_tok - 1 ||
        (q->grammar && ended(q->grammar)))
        return GM_OK;
    gm_e3_seq_truncate(sp->e3s, sp->e3_pos); /* drafts of the last step past the pairs */
    if (gm_e3_seq_length(sp->e3s) != sp->e3_pos) return GM_OK;
    sp->k_want = k;
    return GM_OK;
}

/* The head's guesses, one token per round for every sequence (batched per head): round j writes (the last token or
 * guess j - 1, the pending g or the previous output) at the pending position + j. */
static gm_status e3_rounds(gm_spec *const *sps, int n, gm_error *err) {
    gm_eagle3_row one[16], *rows = n <= 16 ? one : malloc((size_t)n * sizeof *rows);
    int *idx = malloc((size_t)n * sizeof *idx);
    gm_status st = rows && idx ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "speculative: out of memory");
    while (!st) {
        gm_eagle3 *d = NULL;
        int m = 0;
        for (int i = 0; i < n; i++) {
            gm_spec *sp = sps[i];
            if (sp->o.kind != GM_SPEC_EAGLE3 || sp->n_draft >= sp->k_want || (d && sp->o.eagle3 != d)) continue;
            d = sp->o.eagle3;
            const int j = sp->n_draft;
            idx[m] = i;
            rows[m++] = (gm_eagle3_row){.seq = sp->e3s, .pos = sp->e3_pos + j,
                                        .token = j ? sp->draft[j - 1] : sp->s->tok[sp->s->n_tok - 1],
                                        .g = j ? sp->e3_gcur : sp->e3_pg, .g_next = sp->e3_gnext,
                                        .logits = sp->mtp_logits};
        }
        if (!m) break;
        st = gm_eagle3_decode(d, rows, m, err);
        for (int j = 0; j < m && !st; j++) {
            gm_spec *sp = sps[idx[j]];
            sp->st.draft_evals++;
            float *t = sp->e3_gcur;
            sp->e3_gcur = sp->e3_gnext, sp->e3_gnext = t;
            st = mtp_pick(sp, err);
        }
    }
    if (rows != one) free(rows);
    free(idx);
    return st ? gm_fail_prefix(err, "speculative: EAGLE-3 head: ") : GM_OK;
}

static bool gate_open(const gm_spec *sp) { return sp->o.fixed_k || sp->rate >= GATE_OPEN; }

/* At most k_cur proposals, fewer near the context's end or max_new (the target's token is one more);
 * none while the gate is shut (but a shadow lookup, or a draft model's probe). */
static gm_status propose(gm_spec *sp, const gm_sampling *o, int max_new, gm_error *err) {
    gm_seq *q = sp->s;
    const bool open = gate_open(sp), probe = !open && sp->o.kind != GM_SPEC_LOOKUP && ++sp->shut_steps >= GATE_PROBE;
    int k = open ? sp->k_cur : 1;
    sp->shadow = -1;
    if (k > q->e->n_ctx - q->n_tok - 1) k = q->e->n_ctx - q->n_tok - 1;
    if (max_new > 0 && k > max_new - 1) k = max_new - 1;
    sp->n_draft = sp->k_want = 0;
    sp->q_dense = false;
    if (k <= 0) return GM_OK;
    if (sp->o.kind == GM_SPEC_LOOKUP) {
        sp->n_draft = gm_lookup_propose(q->tok, q->n_tok, sp->o.ngram_min, sp->o.ngram_max, k, sp->draft);
        if (!open && sp->n_draft) sp->shadow = sp->draft[0], sp->n_draft = 0;
        return screen_lookup(sp, err);
    }
    if (!open && !probe) return GM_OK;
    sp->shut_steps = 0;
    return sp->o.kind == GM_SPEC_MTP ? mtp_begin(sp, k) : sp->o.kind == GM_SPEC_EAGLE3 ? e3_begin(sp, k)
                                                                                      : draft_begin(sp, o, k, err);
}

/* ---------------------------------------------------------------- new / free */

static gm_status check_options(const gm_seq *s, gm_spec_options *o, gm_error *err) {
    if (o->kind < GM_SPEC_LOOKUP || o->kind > GM_SPEC_EAGLE3)
        return gm_fail(err, GM_ERR_ARG, "speculative: unknown proposer kind %d (GM_SPEC_LOOKUP, GM_SPEC_DRAFT, "
                       "GM_SPEC_MTP or GM_SPEC_EAGLE3)", (int)o->kind);
    if (o->k_max == 0) o->k_max = 8;
    if (o->k_max < 1 || o->k_max > GM_SPEC_MAX_K)
        return gm_fail(err, GM_ERR_ARG, "speculative: k_max %d must be in [1, %d] (0 = 8)", o->k_max, GM_SPEC_MAX_K);
    if (o->ngram_min == 0) o->ngram_min = 2;
    if (o->ngram_max == 0) o->ngram_max = o->ngram_min > 4 ? o->ngram_min : 4;
    if (o->ngram_min < 1 || o->ngram_min > 16 || o->ngram_max < o->ngram_min || o->ngram_max > 16)
        return gm_fail(err, GM_ERR_ARG, "speculative: n-gram lengths [%d, %d] must satisfy 1 <= min <= max <= 16",
                       o->ngram_min, o->ngram_max);
    if (o->kind == GM_SPEC_LOOKUP) return GM_OK;
    if (o->kind == GM_SPEC_MTP) {
        if (!o->mtp) return gm_fail(err, GM_ERR_ARG, "speculative: GM_SPEC_MTP needs an assistant (gm_mtp_new)");
        if (gm_mtp_target(o->mtp) != s->e)
            return gm_fail(err, GM_ERR_ARG, "speculative: the assistant drafts for another engine's sequences");
        return gm_spec_check_vocab(s->e->m, gm_mtp_assistant(o->mtp), err);
    }
    if (o->kind == GM_SPEC_EAGLE3) {
        if (!o->eagle3) return gm_fail(err, GM_ERR_ARG, "speculative: GM_SPEC_EAGLE3 needs a head (gm_eagle3_new)");
        if (gm_eagle3_target(o->eagle3) != s->e)
            return gm_fail(err, GM_ERR_ARG, "speculative: the EAGLE-3 head drafts for another engine's sequences");
        return gm_spec_check_vocab(s->e->m, gm_eagle3_head(o->eagle3), err);
    }
    if (!o->draft) return gm_fail(err, GM_ERR_ARG, "speculative: GM_SPEC_DRAFT needs a draft engine");
    if (o->draft == s->e)
        return gm_fail(err, GM_ERR_ARG, "speculative: the draft engine must not be the target's (open a second engine)");
    return gm_spec_check_vocab(s->e->m, o->draft->m, err);
}

gm_status gm_spec_new(gm_seq *s, const gm_spec_options *opt, gm_spec **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "speculative: out is NULL");
    *out = NULL;
    if (!s || !opt) return gm_fail(err, GM_ERR_ARG, "speculative: sequence or options are NULL");
    gm_spec_options o = *opt;
    gm_status st = check_options(s, &o, err);
    if (st) return st;
    gm_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return gm_fail(err, GM_ERR_NOMEM, "speculative: out of memory");
    sp->s = s;
    sp->o = o;
    sp->V = s->e->c->n_vocab;
    sp->k_cur = o.fixed_k || o.k_max < 4 ? o.k_max : 4;
    sp->rate = 1.0; /* open at first: a copying prompt pays from the first step */
    sp->logits = malloc((size_t)(o.k_max + 1) * sp->V * sizeof *sp->logits);
    if (!sp->logits) st = gm_fail(err, GM_ERR_NOMEM, "speculative: out of memory for %d rows of logits", o.k_max + 1);
    if (!st && o.kind == GM_SPEC_DRAFT) st = gm_seq_new(o.draft, &sp->ds, err);
    sp->h_pos = -1, sp->e3_pos = -1;
    if (!st && o.kind == GM_SPEC_EAGLE3) {
        const size_t dt = (size_t)s->e->c->d_model, dh = (size_t)gm_model_config(gm_eagle3_head(o.eagle3))->d_model;
        const size_t R = (size_t)(o.k_max + 1 > 64 ? o.k_max + 1 : 64), aux = (size_t)s->e->n_taps;
        sp->e3_rows = (int)R;
        sp->e3_taps = malloc(R * (aux ? aux : 1) * dt * sizeof(float));
        sp->e3_hid = malloc(R * dt * sizeof(float));
        sp->e3_in = malloc(R * 3 * dt * sizeof(float));
        sp->e3_g = malloc(R * dh * sizeof(float));
        sp->e3_pg = malloc(dh * sizeof(float));
        sp->e3_gcur = malloc(dh * sizeof(float));
        sp->e3_gnext = malloc(dh * sizeof(float));
        sp->mtp_logits = malloc((size_t)sp->V * sizeof *sp->mtp_logits);
        if (!sp->e3_taps || !sp->e3_hid || !sp->e3_in || !sp->e3_g || !sp->e3_pg || !sp->e3_gcur || !sp->e3_gnext ||
            !sp->mtp_logits)
            st = gm_fail(err, GM_ERR_NOMEM, "speculative: out of memory for the EAGLE-3 head's states");
        if (!st) st = gm_e3_seq_new(o.eagle3, &sp->e3s, err);
    }
    if (!st && o.kind == GM_SPEC_MTP) {
        const size_t d = (size_t)s->e->c->d_model;
        sp->hid = malloc((size_t)(o.k_max + 1) * d * sizeof *sp->hid);
        sp->h = malloc(d * sizeof *sp->h);
        sp->h_next = malloc(d * sizeof *sp->h_next);
        sp->mtp_logits = malloc((size_t)sp->V * sizeof *sp->mtp_logits);
        if (!sp->hid || !sp->h || !sp->h_next || !sp->mtp_logits)
            st = gm_fail(err, GM_ERR_NOMEM, "speculative: out of memory for the assistant's states");
    }
    if (st) {
        gm_spec_free(sp);
        return st;
    }
    *out = sp;
    return GM_OK;
}

void gm_spec_free(gm_spec *sp) {
    if (!sp) return;
    gm_seq_free(sp->ds);
    free(sp->hid);
    free(sp->h);
    free(sp->h_next);
    free(sp->mtp_logits);
    gm_e3_seq_free(sp->e3s);
    free(sp->e3_taps);
    free(sp->e3_hid);
    free(sp->e3_in);
    free(sp->e3_g);
    free(sp->e3_pg);
    free(sp->e3_gcur);
    free(sp->e3_gnext);
    free(sp->q);
    free(sp->logits);
    free(sp);
}

const int32_t *gm_spec_last(const gm_spec *sp, int *n) {
    if (n) *n = sp ? sp->n_out : 0;
    return sp ? sp->out : NULL;
}

void gm_spec_get_stats(const gm_spec *sp, gm_spec_stats *out) {
    if (!out) return;
    if (sp) *out = sp->st;
    else memset(out, 0, sizeof *out);
}

/* ---------------------------------------------------------------- a step */

static gm_status check_step(gm_spec *const *sps, int n, const gm_sampling *s, gm_error *err) {
    if (n <= 0 || !sps || !s) return gm_fail(err, GM_ERR_ARG, "speculative step: %d sequences, arrays %p %p", n,
                                             (const void *)sps, (const void *)s);
    for (int i = 0; i < n; i++) {
        if (!sps[i]) return gm_fail(err, GM_ERR_ARG, "speculative step: sequence %d is NULL", i);
        const gm_seq *q = sps[i]->s;
        if (q->e != sps[0]->s->e) return gm_fail(err, GM_ERR_ARG, "speculative step: sequence %d is of another engine", i);
        for (int j = 0; j < i; j++)
            if (sps[j]->s == q) return gm_fail(err, GM_ERR_ARG, "speculative step: sequence %d is given twice", i);
        gm_status st = gm_sampling_validate(&s[i], err);
        if (st) return st;
        if (q->n_tok == 0) return gm_fail(err, GM_ERR_STATE, "speculative step: sequence %d: the history is empty", i);
        if (q->n_tok >= q->e->n_ctx)
            return gm_fail(err, GM_ERR_CONTEXT, "speculative step: sequence %d: the context is full (%d tokens)", i,
                           q->e->n_ctx);
    }
    return GM_OK;
}

/* A history with more than its last token uncomputed (a prompt), or fully computed without logits,
 * is evaluated first: all such sequences in shared forward calls, with the prefix index. The assistant's
 * sequences leave a prompt's last token to the step's pass, which keeps its hidden state: the step after
 * drafts. */
static gm_status prepare(gm_spec *const *sps, int n, gm_error *err) {
    gm_seq *one[16], **list = n <= 16 ? one : malloc((size_t)n * sizeof *list);
    int32_t held[16], *last = n <= 16 ? held : malloc((size_t)n * sizeof *last);
    if (!list || !last) {
        if (list != one) free(list);
        if (last != held) free(last);
        return gm_fail(err, GM_ERR_NOMEM, "speculative step: out of memory");
    }
    int m = 0;
    gm_status st = GM_OK;
    for (int i = 0; i < n && !st; i++) {
        gm_seq *q = sps[i]->s;
        last[i] = -1;
        if (sps[i]->o.kind == GM_SPEC_EAGLE3 && q->n_tok - q->n_kv > 1) {
            st = e3_prompt(sps[i], err); /* leaves the last token to the step's pass */
        } else if (sps[i]->o.kind == GM_SPEC_MTP && q->n_tok - q->n_kv > 1) {
            last[i] = q->tok[q->n_tok - 1];
            st = gm_seq_truncate(q, q->n_tok - 1, err);
            if (!st && q->n_tok - q->n_kv > 0) list[m++] = q;
        } else if (q->n_tok - q->n_kv > 1 || (q->n_kv == q->n_tok && !q->logits_valid)) {
            list[m++] = q;
        }
    }
    if (!st && m) st = gm_engine_eval(sps[0]->s->e, list, m, err);
    for (int i = 0; i < n; i++) /* the held tokens go back, also after a failure */
        if (last[i] >= 0) {
            gm_status a = gm_seq_append(sps[i]->s, &last[i], 1, err);
            st = st ? st : a;
        }
    if (list != one) free(list);
    if (last != held) free(last);
    for (int i = 0; i < n && !st; i++) {
        sps[i]->base = sps[i]->s->n_tok;
        sps[i]->have_base = sps[i]->s->n_kv == sps[i]->s->n_tok;
    }
    return st;
}

/* This sequence's verify rows: its last token unless computed, then the proposals; returns how many. */
static int spec_rows(gm_spec *sp, gm_row *rows) {
    gm_seq *q = sp->s;
    int r = 0;
    if (sp->have_base) memcpy(sp->logits, q->logits, (size_t)sp->V * sizeof *sp->logits);
    else rows[r++] = (gm_row){.seq = q, .token = q->tok[q->n_tok - 1], .pos = q->n_tok - 1, .logits = true};
    for (int j = 0; j < sp->n_draft; j++) rows[r++] = (gm_row){.seq = q, .token = sp->draft[j], .pos = q->n_tok + j, .logits = true};
    if (sp->o.kind == GM_SPEC_MTP) /* the assistant's next draft reads one of these */
        for (int i = 0; i < r; i++) rows[i].hidden = sp->hid + (size_t)i * (size_t)q->e->c->d_model;
    if (sp->o.kind == GM_SPEC_EAGLE3)
        for (int i = 0; i < r; i++) e3_ask(sp, &rows[i], i);
    sp->n_rows = r;
    sp->st.passes += r > 0;
    sp->st.verify_passes += sp->n_draft > 0;
    return r;
}

/* One gm_engine_forward over every sequence's rows; the logits land in each one's sp->logits. */
static gm_status verify(gm_spec *const *sps, int n, gm_error *err) {
    const size_t V = (size_t)sps[0]->V;
    if (n == 1) {
        gm_spec *sp = sps[0];
        const int r = spec_rows(sp, sp->rows);
        return r ? gm_engine_forward(sp->s->e, sp->rows, r, sp->logits + (sp->have_base ? V : 0), err) : GM_OK;
    }
    int total = 0;
    for (int i = 0; i < n; i++) total += sps[i]->n_draft + 1;
    gm_row *rows = malloc((size_t)total * sizeof *rows);
    float *buf = malloc((size_t)total * V * sizeof *buf);
    int *count = malloc((size_t)n * sizeof *count), r = 0;
    gm_status st = rows && buf && count ? GM_OK
                                        : gm_fail(err, GM_ERR_NOMEM, "speculative step: out of memory for %d rows", total);
    for (int i = 0; i < n && !st; i++) r += count[i] = spec_rows(sps[i], rows + r);
    if (!st && r) st = gm_engine_forward(sps[0]->s->e, rows, r, buf, err);
    for (int i = 0, off = 0; i < n && !st; off += count[i++])
        memcpy(sps[i]->logits + (sps[i]->have_base ? V : 0), buf + (size_t)off * V, (size_t)count[i] * V * sizeof *buf);
    free(rows);
    free(buf);
    free(count);
    return st;
}

/* The grammar takes token id (one it allowed: p(id) > 0 under its mask). */
static gm_status grammar_take(gm_spec *sp, int32_t id, gm_error *err) {
    gm_matcher *m = sp->s->grammar;
    bool ok = true;
    gm_status st = m ? gm_matcher_accept_token(m, id, &ok, err) : GM_OK;
    if (!st && !ok) st = gm_fail(err, GM_ERR_STATE, "the grammar refused token %d its mask allowed", (int)id);
    sp->g_steps += m && !st;
    return st;
}

/* Walks the proposals against the target's rows; *t gets the target's own token, returns the
 * number accepted (or -1 with *st set). Under a grammar the matcher follows: it has taken the returned
 * tokens (the accepted proposals and *t) on return; an accepted END ends the walk as the step's token. */
static int judge(gm_spec *sp, const gm_sampling *o, int32_t *t, gm_status *st, gm_error *err) {
    gm_seq *q = sp->s;
    gm_matcher *m = q->grammar;
    gm_sampler *sm = gm_seq_sampler(q, o);
    for (int i = 0;; i++) {
        const float *L = sp->logits + (size_t)i * sp->V;
        const int nh = sp->base + i; /* the history before position base + i: accepted proposals included */
        if (o->temperature == 0.0f || i == sp->n_draft) {
            /* greedy: the token decoding without speculation would pick; past the proposals: an ordinary
             * draw (one pass over the vocabulary). Both as gm_seq_sample makes them, grammar included. */
            if ((*st = gm_pick_token(sm, m, q->mask, o, L, q->tok, nh, t, err))) return -1;
            sp->g_steps += m != NULL;
            if (i < sp->n_draft && *t == sp->draft[i] && !(m && ended(m))) continue;
            return i;
        }
        int nc;
        *st = m ? gm_grammar_mask(m, q->mask, sp->V, err) : GM_OK; /* p is the distribution given the grammar */
        sm->mask = m ? q->mask : NULL;
        if (!*st) *st = gm_sampler_dist(sm, o, L, q->tok, nh, &nc, err);
        sm->mask = NULL;
        if (*st) return -1;
        const int32_t d = sp->draft[i];
        const float *qrow = sp->q_dense ? sp->q + (size_t)i * sp->V : NULL;
        double pd = 0.0;
        for (int c = 0; c < nc; c++)
            if (sm->cand[c].id == d) pd = sm->cand[c].logit;
        const double qd = qrow ? (double)qrow[d] : 1.0;
        if (gm_sampler_uniform(sm) * qd < pd) { /* accepted with probability min(1, p/q) */
            if ((*st = grammar_take(sp, d, err))) return -1;
            if (!m || !ended(m)) continue;
            *t = d;
            return i;
        }
        *t = draw(sm, sm->cand, nc, qrow, qrow ? -1 : d);
        if ((*st = grammar_take(sp, *t, err))) return -1;
        return i;
    }
}

static gm_status accept(gm_spec *sp, const gm_sampling *o, gm_error *err) {
    int32_t t;
    gm_status st = GM_OK;
    const int a = judge(sp, o, &t, &st, err);
    if (a < 0) return st;
    if ((st = gm_seq_truncate(sp->s, sp->base + a, err)) || (st = gm_seq_append(sp->s, &t, 1, err))) return st;
    sp->g_steps = 0; /* the matcher has taken exactly the step's tokens: kept */
    if (sp->o.kind == GM_SPEC_EAGLE3) { /* the kept rows: up to the one that gave t */
        const int first = sp->have_base ? sp->base : sp->base - 1, n = sp->base + a - first;
        if (n > 0 && n <= sp->n_rows && (st = e3_absorb(sp, first, n, err))) return st;
        if (n <= 0) sp->e3_broken = true, sp->e3_pos = -1; /* t came from logits computed without taps */
    }
    if (sp->o.kind == GM_SPEC_MTP) { /* the state of the row that gave t, the position before it */
        const int first = sp->have_base ? sp->base : sp->base - 1, i = sp->base + a - 1 - first;
        const size_t d = (size_t)sp->s->e->c->d_model;
        sp->h_pos = i >= 0 && i < sp->n_rows ? sp->base + a - 1 : -1;
        if (sp->h_pos >= 0) memcpy(sp->h, sp->hid + (size_t)i * d, d * sizeof *sp->h);
    }
    memcpy(sp->out, sp->draft, (size_t)a * sizeof *sp->out);
    sp->out[a] = t;
    sp->n_out = a + 1;
    sp->st.steps++;
    sp->st.drafted += sp->n_draft;
    sp->st.accepted += a;
    sp->st.tokens += a + 1;
    if (sp->n_draft > 0 || sp->shadow >= 0) {
        const double hit = sp->n_draft > 0 ? a > 0 : sp->shadow == t;
        sp->rate += (hit - sp->rate) / GATE_WEIGHT;
    }
    if (!sp->o.fixed_k && sp->n_draft > 0) { /* grow while guesses hold, fall back to what held */
        if (a == sp->n_draft) sp->k_cur = 2 * sp->k_cur < sp->o.k_max ? 2 * sp->k_cur : sp->o.k_max;
        else sp->k_cur = a + 1;
    }
    return GM_OK;
}

gm_status gm_spec_step_many(gm_spec *const *sps, int n, const gm_sampling *s, const int *max_new, gm_error *err) {
    for (int i = 0; sps && i < n; i++) /* a refused step gives no tokens either: gm_spec_last says 0 */
        if (sps[i]) sps[i]->n_out = 0;
    gm_status st = check_step(sps, n, s, err);
    if (st) return st;
    if ((st = prepare(sps, n, err))) return st;
    for (int i = 0; i < n && !st; i++) st = propose(sps[i], &s[i], max_new ? max_new[i] : 0, err);
    if (!st) st = draft_rounds(sps, n, s, err);
    if (!st) st = mtp_rounds(sps, n, err);
    if (!st) st = e3_rounds(sps, n, err);
    for (int i = 0; i < n && !st; i++) st = rewind_grammar(sps[i], err); /* drafting's steps: judge retakes them */
    if (!st) st = verify(sps, n, err);
    for (int i = 0; i < n && !st; i++) st = accept(sps[i], &s[i], err);
    if (st) /* no half step: proposals a failed pass appended go, and so do the grammar steps not kept */
        for (int i = 0; i < n; i++) {
            if (sps[i]->n_out) continue;
            if (sps[i]->s->n_tok > sps[i]->base) gm_seq_truncate(sps[i]->s, sps[i]->base, NULL);
            rewind_grammar(sps[i], NULL);
        }
    return st;
}

gm_status gm_spec_step(gm_spec *sp, const gm_sampling *s, int max_new, const int32_t **toks, int *n, gm_error *err) {
    if (toks) *toks = NULL;
    if (n) *n = 0;
    gm_status st = gm_spec_step_many(&sp, 1, s, &max_new, err);
    if (st) return st;
    if (toks) *toks = sp->out;
    if (n) *n = sp->n_out;
    return GM_OK;
}
