/* grammar/matcher.c — the matching context (interned stacks and states, the lazy DFA) and the
 * per-sequence matcher.
 *
 * A matcher state is the set of parse stacks that fit the text so far, as in llama.cpp, but every
 * stack node is interned (hash-consed: (state, parent) -> one id) and so is every set of stacks.
 * A state is therefore one integer: equal positions are equal ids, a matcher is an array of ids
 * (clone = copy, rollback = truncate), and the successor of (state, byte) is computed once and
 * memoised (a DFA built lazily over the grammar's pushdown automaton). Calls are expanded eagerly
 * (closure) so that each stack's top is a state with a CHAR edge; a call whose continuation is the
 * end of a rule still pushes, but right recursion such as `r ::= x r | ""` reuses the interned
 * nodes, so a flat repetition does not grow memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "gemma_grammar.h"

static uint64_t mix(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static int32_t fail(gm_grammar_ctx *c, gm_status st, const char *msg) {
    if (!c->fail) {
        c->fail = st;
        snprintf(c->fail_msg, sizeof c->fail_msg, "%s", msg);
    }
    return GR_UNKNOWN;
}

gm_status gr_ctx_error(gm_grammar_ctx *c, gm_error *err) {
    gm_status st = c->fail ? c->fail : GM_ERR_INTERNAL;
    c->fail = GM_OK; /* the context stays usable: the failed transition was not memoised */
    return gm_fail(err, st, "grammar matcher: %s", c->fail_msg[0] ? c->fail_msg : "internal error");
}

/* ------------------------------------------------------------------ stack nodes */
static uint64_t node_key(int32_t state, int32_t parent) { return mix(((uint64_t)(uint32_t)state << 32) | (uint32_t)parent); }

static bool node_rehash(gm_grammar_ctx *c) {
    size_t cap = c->node_hash_cap ? c->node_hash_cap * 2 : 1024;
    uint32_t *h = calloc(cap, sizeof(uint32_t));
    if (!h) return false;
    for (size_t i = 1; i < c->n_nodes; i++) {
        size_t j = node_key(c->nodes[i].state, c->nodes[i].parent) & (cap - 1);
        while (h[j]) j = (j + 1) & (cap - 1);
        h[j] = (uint32_t)i + 1;
    }
    free(c->node_hash);
    c->node_hash = h;
    c->node_hash_cap = cap;
    return true;
}

/* The id of stack (state, parent); -1 past the depth limit, -2 on failure. */
static int32_t node_intern(gm_grammar_ctx *c, int32_t state, int32_t parent) {
    if (c->nodes[parent].depth >= GR_MAX_DEPTH) return -1;
    if (c->n_nodes * 2 >= c->node_hash_cap && !node_rehash(c)) return fail(c, GM_ERR_NOMEM, "out of memory"), -2;
    size_t j = node_key(state, parent) & (c->node_hash_cap - 1);
    for (; c->node_hash[j]; j = (j + 1) & (c->node_hash_cap - 1)) {
        const gr_snode *n = &c->nodes[c->node_hash[j] - 1];
        if (n->state == state && n->parent == parent) return (int32_t)c->node_hash[j] - 1;
    }
    if (!gr_grow((void **)&c->nodes, &c->cap_nodes, c->n_nodes + 1, sizeof(gr_snode), (size_t)GR_MAX_STATES * 16))
        return fail(c, GM_ERR_NOMEM, "too many parse stacks"), -2;
    c->nodes[c->n_nodes] = (gr_snode){state, parent, c->nodes[parent].depth + 1};
    c->node_hash[j] = (uint32_t)c->n_nodes + 1;
    return (int32_t)c->n_nodes++;
}

/* ------------------------------------------------------------------ closure */
static bool seen_insert(uint64_t *keys, uint32_t *stamps, size_t cap, uint32_t stamp, uint64_t key) {
    size_t j = mix(key) & (cap - 1);
    for (; stamps[j] == stamp; j = (j + 1) & (cap - 1))
        if (keys[j] == key) return false;
    stamps[j] = stamp;
    keys[j] = key;
    return true;
}

/* Doubles the visited table, keeping this closure's entries. */
static bool seen_grow(gm_grammar_ctx *c) {
    size_t cap = c->seen_cap ? c->seen_cap * 2 : 4096;
    uint64_t *k = malloc(cap * sizeof(uint64_t));
    uint32_t *t = calloc(cap, sizeof(uint32_t));
    if (!k || !t) {
        free(k);
        free(t);
        return false;
    }
    for (size_t j = 0; j < c->seen_cap; j++)
        if (c->seen_stamp[j] == c->stamp) seen_insert(k, t, cap, c->stamp, c->seen[j]);
    free(c->seen);
    free(c->seen_stamp);
    c->seen = k;
    c->seen_stamp = t;
    c->seen_cap = cap;
    return true;
}

/* Marks (state, parent) visited in this closure; false if it already was. */
static bool visit(gm_grammar_ctx *c, int32_t state, int32_t parent) {
    if ((c->n_seen + 1) * 2 > c->seen_cap && !seen_grow(c)) {
        fail(c, GM_ERR_NOMEM, "out of memory");
        return false;
    }
    uint64_t key = ((uint64_t)(uint32_t)state << 32) | (uint32_t)parent;
    if (!seen_insert(c->seen, c->seen_stamp, c->seen_cap, c->stamp, key)) return false;
    c->n_seen++;
    return true;
}

static bool work_push(gm_grammar_ctx *c, int32_t state, int32_t parent) {
    if (!gr_grow((void **)&c->work, &c->cap_work, c->n_work + 1, sizeof(int64_t), (size_t)1 << 28)) {
        fail(c, GM_ERR_NOMEM, "out of memory");
        return false;
    }
    c->work[c->n_work++] = ((int64_t)state << 32) | (uint32_t)parent;
    return true;
}

static void new_stamp(gm_grammar_ctx *c) {
    c->n_seen = 0;
    if (++c->stamp == 0) { /* wrapped: clear */
        if (c->seen_stamp) memset(c->seen_stamp, 0, c->seen_cap * sizeof(uint32_t));
        c->stamp = 1;
    }
}

/* Expands the work list: follows EPS edges, pushes calls, pops at rule ends; collects the
 * configurations into c->out and reports whether the empty stack was reached. */
static bool closure(gm_grammar_ctx *c, bool *at_bottom) {
    const gr_nfa *nfa = &c->g->nfa;
    c->n_out = 0;
    *at_bottom = false;
    while (c->n_work && !c->fail) {
        int64_t w = c->work[--c->n_work];
        int32_t s = (int32_t)(w >> 32), p = (int32_t)(uint32_t)w;
        if (!visit(c, s, p)) continue;
        if (nfa->has_char[s]) {
            int32_t id = node_intern(c, s, p);
            if (id == -2) break;
            if (id >= 0) {
                if (!gr_grow((void **)&c->out, &c->cap_out, c->n_out + 1, sizeof(uint32_t), GR_MAX_CONFIGS + 1)) {
                    fail(c, GM_ERR_NOMEM, "too many parse stacks alive at once (ambiguous grammar)");
                    break;
                }
                c->out[c->n_out++] = (uint32_t)id;
            }
        }
        if (nfa->accept_of[s] >= 0) {
            if (p == 0) *at_bottom = true;
            else if (!work_push(c, c->nodes[p].state, c->nodes[p].parent)) break;
        }
        for (uint32_t e = nfa->edge_off[s]; e < nfa->edge_off[s + 1]; e++) {
            const gr_edge *ed = &nfa->edges[e];
            if (ed->kind == GR_E_EPS) {
                if (!work_push(c, ed->to, p)) break;
            } else if (ed->kind == GR_E_CALL) {
                int32_t ret = node_intern(c, ed->to, p);
                if (ret == -2) break;
                if (ret >= 0 && !work_push(c, nfa->rule_start[ed->arg], ret)) break;
            }
        }
    }
    c->n_work = 0;
    return !c->fail;
}

/* ------------------------------------------------------------------ interned states */
static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t ds_key(const uint32_t *cfg, size_t n, uint32_t pv, uint8_t prem, uint8_t plen, uint8_t bottom) {
    uint64_t h = mix(((uint64_t)pv << 24) ^ ((uint64_t)prem << 16) ^ ((uint64_t)plen << 8) ^ bottom ^ (n << 40));
    for (size_t k = 0; k < n; k++) h = mix(h ^ cfg[k]);
    return h;
}

static uint64_t ds_key_of(const gm_grammar_ctx *c, const gr_dstate *d) {
    return ds_key(c->cfgs + d->cfg_off, d->n_cfg, d->pv, d->prem, d->plen, d->at_bottom);
}

static bool ds_rehash(gm_grammar_ctx *c) {
    size_t cap = c->ds_hash_cap ? c->ds_hash_cap * 2 : 1024;
    uint32_t *h = calloc(cap, sizeof(uint32_t));
    if (!h) return false;
    for (size_t i = 1; i < c->n_ds; i++) {
        size_t j = ds_key_of(c, &c->ds[i]) & (cap - 1);
        while (h[j]) j = (j + 1) & (cap - 1);
        h[j] = (uint32_t)i + 1;
    }
    free(c->ds_hash);
    c->ds_hash = h;
    c->ds_hash_cap = cap;
    return true;
}

/* The id of the state (cfg[0..n) sorted, partial character, bottom flag); GR_DEAD when empty. */
static int32_t ds_intern(gm_grammar_ctx *c, const uint32_t *cfg, size_t n, uint32_t pv, uint8_t prem, uint8_t plen,
                         uint8_t bottom) {
    if (!n && !bottom) return GR_DEAD;
    if (c->n_ds * 2 >= c->ds_hash_cap && !ds_rehash(c)) return fail(c, GM_ERR_NOMEM, "out of memory");
    uint64_t key = ds_key(cfg, n, pv, prem, plen, bottom);
    size_t j = key & (c->ds_hash_cap - 1);
    for (; c->ds_hash[j]; j = (j + 1) & (c->ds_hash_cap - 1)) {
        const gr_dstate *d = &c->ds[c->ds_hash[j] - 1];
        if (d->n_cfg == n && d->pv == pv && d->prem == prem && d->plen == plen && d->at_bottom == bottom &&
            memcmp(c->cfgs + d->cfg_off, cfg, n * sizeof(uint32_t)) == 0)
            return (int32_t)c->ds_hash[j] - 1;
    }
    if (c->n_ds >= GR_MAX_STATES) return fail(c, GM_ERR_NOMEM, "too many matcher states (grammar too ambiguous)");
    if (!gr_grow((void **)&c->ds, &c->cap_ds, c->n_ds + 1, sizeof(gr_dstate), GR_MAX_STATES) ||
        !gr_grow((void **)&c->cfgs, &c->cap_cfgs, c->n_cfgs + n, sizeof(uint32_t), (size_t)1 << 30))
        return fail(c, GM_ERR_NOMEM, "out of memory");
    if (n) memcpy(c->cfgs + c->n_cfgs, cfg, n * sizeof(uint32_t)); /* cfg may point into c->out, not c->cfgs */
    c->ds[c->n_ds] = (gr_dstate){.cfg_off = (uint32_t)c->n_cfgs, .n_cfg = (uint32_t)n, .pv = pv, .prem = prem,
                                 .plen = plen, .at_bottom = bottom};
    c->n_cfgs += n;
    c->ds_hash[j] = (uint32_t)c->n_ds + 1;
    return (int32_t)c->n_ds++;
}

/* Closes the work list into a state. */
static int32_t close_into_state(gm_grammar_ctx *c) {
    new_stamp(c);
    bool bottom;
    if (!closure(c, &bottom)) return GR_UNKNOWN;
    if (c->n_out > GR_MAX_CONFIGS) return fail(c, GM_ERR_NOMEM, "too many parse stacks alive at once (ambiguous grammar)");
    if (c->n_out > 1) qsort(c->out, c->n_out, sizeof(uint32_t), cmp_u32); /* out may be NULL when empty */
    return ds_intern(c, c->out, c->n_out, 0, 0, 0, bottom);
}

int32_t gr_frame_start(gm_grammar_ctx *c, int32_t s) {
    if (c->frame_start[s] != GR_UNKNOWN) return c->frame_start[s];
    c->n_work = 0;
    if (!work_push(c, s, 0)) return GR_UNKNOWN;
    int32_t x = close_into_state(c);
    if (x != GR_UNKNOWN) c->frame_start[s] = x;
    return x;
}

/* ------------------------------------------------------------------ transitions */
/* Whether some configuration of x has a CHAR edge meeting [lo, hi]. */
static bool may_take(gm_grammar_ctx *c, int32_t x, uint32_t lo, uint32_t hi) {
    const gr_nfa *nfa = &c->g->nfa;
    const gr_dstate *d = &c->ds[x];
    for (uint32_t k = 0; k < d->n_cfg; k++) {
        int32_t s = c->nodes[c->cfgs[d->cfg_off + k]].state;
        for (uint32_t e = nfa->edge_off[s]; e < nfa->edge_off[s + 1]; e++)
            if (nfa->edges[e].kind == GR_E_CHAR && gr_set_meets(nfa, nfa->edges[e].arg, lo, hi)) return true;
    }
    return false;
}

/* The state after code point cp from x. */
static int32_t take_cp(gm_grammar_ctx *c, int32_t x, uint32_t cp) {
    const gr_nfa *nfa = &c->g->nfa;
    c->n_work = 0;
    uint32_t off = c->ds[x].cfg_off, n = c->ds[x].n_cfg;
    for (uint32_t k = 0; k < n; k++) {
        const gr_snode nd = c->nodes[c->cfgs[off + k]];
        for (uint32_t e = nfa->edge_off[nd.state]; e < nfa->edge_off[nd.state + 1]; e++) {
            const gr_edge *ed = &nfa->edges[e];
            if (ed->kind == GR_E_CHAR && gr_set_has(nfa, ed->arg, cp) && !work_push(c, ed->to, nd.parent))
                return GR_UNKNOWN;
        }
    }
    return c->n_work ? close_into_state(c) : GR_DEAD;
}

/* UTF-8 decoding with the partial character in the state: the lead byte fixes the length, the
 * first continuation byte excludes overlong forms, surrogates and code points past U+10FFFF. */
static int32_t step_utf8(gm_grammar_ctx *c, int32_t x, uint8_t b) {
    gr_dstate d = c->ds[x];
    uint32_t v;
    uint8_t rem, len;
    if (!d.prem) {
        if (b < 0x80) return take_cp(c, x, b);
        if (b >= 0xC2 && b <= 0xDF) { len = 2; v = b & 0x1F; }
        else if (b >= 0xE0 && b <= 0xEF) { len = 3; v = b & 0x0F; }
        else if (b >= 0xF0 && b <= 0xF4) { len = 4; v = b & 0x07; }
        else return GR_DEAD;
        rem = (uint8_t)(len - 1);
    } else {
        if ((b & 0xC0) != 0x80) return GR_DEAD;
        if (d.prem == d.plen - 1) { /* first continuation byte */
            if ((d.plen == 3 && d.pv == 0 && b < 0xA0) || (d.plen == 3 && d.pv == 0xD && b > 0x9F) ||
                (d.plen == 4 && d.pv == 0 && b < 0x90) || (d.plen == 4 && d.pv == 4 && b > 0x8F))
                return GR_DEAD;
        }
        v = (d.pv << 6) | (b & 0x3F);
        rem = (uint8_t)(d.prem - 1);
        len = d.plen;
        if (!rem) return take_cp(c, x, v);
    }
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = v << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < min_of[len]) lo = min_of[len];
    if (hi > GR_MAX_CP) hi = GR_MAX_CP;
    if (lo > hi || !may_take(c, x, lo, hi)) return GR_DEAD;
    /* the same stacks, mid-character: copied out first, as interning may move c->cfgs */
    size_t n = c->ds[x].n_cfg;
    if (!gr_grow((void **)&c->out, &c->cap_out, n, sizeof(uint32_t), GR_MAX_CONFIGS + 1))
        return fail(c, GM_ERR_NOMEM, "out of memory");
    memcpy(c->out, c->cfgs + c->ds[x].cfg_off, n * sizeof(uint32_t));
    return ds_intern(c, c->out, n, v, rem, len, 0);
}

int32_t gr_step_slow(gm_grammar_ctx *c, int32_t x, uint8_t b) {
    if (x <= 0) return GR_DEAD;
    if (!c->ds[x].trans) {
        int32_t *t = malloc(256 * sizeof(int32_t));
        if (!t) return fail(c, GM_ERR_NOMEM, "out of memory");
        for (int k = 0; k < 256; k++) t[k] = GR_UNKNOWN;
        c->ds[x].trans = t;
    }
    int32_t y = step_utf8(c, x, b);
    if (y != GR_UNKNOWN) c->ds[x].trans[b] = y; /* c->ds may have moved: index again */
    return y;
}

/* ------------------------------------------------------------------ contexts */
gm_status gm_grammar_ctx_new(const gm_grammar *g, const gm_gvocab *v, gm_grammar_ctx **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_grammar_ctx_new: NULL out");
    *out = NULL;
    if (!g) return gm_fail(err, GM_ERR_ARG, "gm_grammar_ctx_new: NULL grammar");
    gm_grammar_ctx *c = calloc(1, sizeof *c);
    size_t ns = g->nfa.n_states;
    if (c) {
        c->g = g;
        c->v = v;
        c->frame_start = malloc((ns ? ns : 1) * sizeof(int32_t));
        c->cls = calloc(ns ? ns : 1, sizeof(gr_tclass *));
    }
    bool ok = c && c->frame_start && c->cls && gr_grow((void **)&c->nodes, &c->cap_nodes, 1, sizeof(gr_snode), 1u << 30) &&
              gr_grow((void **)&c->ds, &c->cap_ds, 1, sizeof(gr_dstate), GR_MAX_STATES);
    if (!ok) {
        gm_grammar_ctx_free(c);
        return gm_fail(err, GM_ERR_NOMEM, "grammar context: out of memory");
    }
    for (size_t s = 0; s < ns; s++) c->frame_start[s] = GR_UNKNOWN;
    c->nodes[0] = (gr_snode){-1, 0, 0}; /* the empty stack */
    c->n_nodes = 1;
    c->ds[0] = (gr_dstate){0}; /* GR_ENDED */
    c->n_ds = 1;
    c->init = gr_frame_start(c, g->nfa.rule_start[g->nfa.root]);
    if (c->init < 0) {
        gm_status st = c->init == GR_UNKNOWN ? gr_ctx_error(c, err) : gm_fail(err, GM_ERR_INTERNAL, "grammar matches nothing");
        gm_grammar_ctx_free(c);
        return st;
    }
    *out = c;
    return GM_OK;
}

void gm_grammar_ctx_free(gm_grammar_ctx *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_ds; i++) {
        free(c->ds[i].trans);
        free(c->ds[i].mask);
    }
    if (c->cls)
        for (size_t s = 0; s < c->g->nfa.n_states; s++) gr_tclass_free(c->cls[s]);
    free(c->cls);
    free(c->frame_start);
    free(c->nodes); free(c->node_hash); free(c->cfgs); free(c->ds); free(c->ds_hash);
    free(c->seen); free(c->seen_stamp); free(c->work); free(c->out);
    free(c);
}

void gm_grammar_ctx_stats(const gm_grammar_ctx *c, gm_grammar_stats *s) {
    memset(s, 0, sizeof *s);
    if (!c) return;
    s->n_states = c->n_ds;
    s->n_stack_nodes = c->n_nodes;
    s->n_classified = c->n_classified;
    s->n_masks_cached = c->n_masks;
    size_t mem = c->cap_nodes * sizeof(gr_snode) + c->node_hash_cap * 4 + c->cap_cfgs * 4 +
                 c->cap_ds * sizeof(gr_dstate) + c->ds_hash_cap * 4;
    size_t words = c->v ? ((size_t)gm_gvocab_size(c->v) + 31) / 32 : 0;
    for (size_t i = 0; i < c->n_ds; i++) mem += (c->ds[i].trans ? 1024 : 0) + (c->ds[i].mask ? words * 4 : 0);
    for (size_t k = 0; k < c->g->nfa.n_states; k++) {
        const gr_tclass *t = c->cls[k];
        if (t) mem += sizeof *t + (t->bits ? words * 4 : 0) + (t->n_list + t->n_unsure) * 4;
    }
    s->mem_bytes = mem;
}

/* ------------------------------------------------------------------ matchers */
struct gm_matcher {
    gm_grammar_ctx *c;
    int32_t *hist; /* hist[0] the start, hist[n - 1] the current state */
    size_t n, cap;
};

gm_status gm_matcher_new(gm_grammar_ctx *c, gm_matcher **out, gm_error *err) {
    if (!out) return gm_fail(err, GM_ERR_ARG, "gm_matcher_new: NULL out");
    *out = NULL;
    if (!c) return gm_fail(err, GM_ERR_ARG, "gm_matcher_new: NULL context");
    gm_matcher *m = calloc(1, sizeof *m);
    if (!m || !gr_grow((void **)&m->hist, &m->cap, 64, sizeof(int32_t), SIZE_MAX / 8)) {
        free(m);
        return gm_fail(err, GM_ERR_NOMEM, "gm_matcher_new: out of memory");
    }
    m->c = c;
    m->hist[m->n++] = c->init;
    *out = m;
    return GM_OK;
}

gm_status gm_matcher_clone(const gm_matcher *m, gm_matcher **out, gm_error *err) {
    if (!m || !out) return gm_fail(err, GM_ERR_ARG, "gm_matcher_clone: NULL argument");
    gm_matcher *k = calloc(1, sizeof *k);
    if (!k || !gr_grow((void **)&k->hist, &k->cap, m->n, sizeof(int32_t), SIZE_MAX / 8)) {
        free(k);
        return gm_fail(err, GM_ERR_NOMEM, "gm_matcher_clone: out of memory");
    }
    k->c = m->c;
    memcpy(k->hist, m->hist, m->n * sizeof(int32_t));
    k->n = m->n;
    *out = k;
    return GM_OK;
}

void gm_matcher_free(gm_matcher *m) {
    if (!m) return;
    free(m->hist);
    free(m);
}

static int32_t cur(const gm_matcher *m) { return m->hist[m->n - 1]; }

static gm_status push_state(gm_matcher *m, int32_t x, gm_error *err) {
    if (!gr_grow((void **)&m->hist, &m->cap, m->n + 1, sizeof(int32_t), SIZE_MAX / 8))
        return gm_fail(err, GM_ERR_NOMEM, "grammar matcher: out of memory");
    m->hist[m->n++] = x;
    return GM_OK;
}

static gm_status walk_bytes(gm_matcher *m, const uint8_t *s, size_t n, int32_t *y, gm_error *err) {
    int32_t x = cur(m);
    for (size_t k = 0; k < n && x > 0; k++) {
        x = gr_step(m->c, x, s[k]);
        if (x == GR_UNKNOWN) return gr_ctx_error(m->c, err);
    }
    *y = gr_live(m->c, x) ? x : GR_DEAD;
    return GM_OK;
}

/* The state after token id (GR_DEAD when refused; GR_ENDED for an allowed END). */
static gm_status token_next(gm_matcher *m, int32_t id, int32_t *y, gm_error *err) {
    uint8_t kind;
    *y = GR_DEAD;
    if (!m->c->v) return gm_fail(err, GM_ERR_STATE, "grammar matcher: no vocabulary bound to the context");
    if (!gr_vocab_kind(m->c->v, id, &kind)) return gm_fail(err, GM_ERR_ARG, "grammar matcher: token id %d out of range", id);
    if (kind == GM_GTOKEN_END) {
        if (gm_matcher_accepts_end(m)) *y = GR_ENDED;
        return GM_OK;
    }
    if (kind != GM_GTOKEN_TEXT) return GM_OK;
    int32_t x = gr_walk_token(m->c, cur(m), id);
    if (x == GR_UNKNOWN) return gr_ctx_error(m->c, err);
    *y = gr_live(m->c, x) ? x : GR_DEAD;
    return GM_OK;
}

gm_status gm_matcher_check_token(gm_matcher *m, int32_t id, bool *ok, gm_error *err) {
    if (!m || !ok) return gm_fail(err, GM_ERR_ARG, "gm_matcher_check_token: NULL argument");
    int32_t y = GR_DEAD;
    gm_status st = token_next(m, id, &y, err);
    *ok = !st && y >= 0;
    return st;
}

gm_status gm_matcher_accept_token(gm_matcher *m, int32_t id, bool *ok, gm_error *err) {
    if (!m || !ok) return gm_fail(err, GM_ERR_ARG, "gm_matcher_accept_token: NULL argument");
    int32_t y = GR_DEAD;
    gm_status st = token_next(m, id, &y, err);
    *ok = !st && y >= 0;
    return *ok ? push_state(m, y, err) : st;
}

gm_status gm_matcher_accept_bytes(gm_matcher *m, const char *s, size_t n, bool *ok, gm_error *err) {
    if (!m || !ok || (!s && n)) return gm_fail(err, GM_ERR_ARG, "gm_matcher_accept_bytes: NULL argument");
    int32_t y = GR_DEAD;
    gm_status st = walk_bytes(m, (const uint8_t *)s, n, &y, err);
    *ok = !st && y >= 0;
    return *ok ? push_state(m, y, err) : st;
}

gm_status gm_matcher_rollback(gm_matcher *m, size_t n, gm_error *err) {
    if (!m) return gm_fail(err, GM_ERR_ARG, "gm_matcher_rollback: NULL matcher");
    if (n >= m->n) return gm_fail(err, GM_ERR_ARG, "gm_matcher_rollback: %zu steps, only %zu taken", n, m->n - 1);
    m->n -= n;
    return GM_OK;
}

size_t gm_matcher_n_steps(const gm_matcher *m) { return m ? m->n - 1 : 0; }

bool gm_matcher_accepts_end(const gm_matcher *m) {
    int32_t x = cur(m);
    return x > 0 && m->c->ds[x].at_bottom;
}

bool gm_matcher_is_finished(gm_matcher *m) {
    int32_t x = cur(m);
    return x == GR_ENDED || (m->c->ds[x].at_bottom && m->c->ds[x].n_cfg == 0);
}

gm_status gm_matcher_fill_mask(gm_matcher *m, uint32_t *mask, gm_error *err) {
    if (!m || !mask) return gm_fail(err, GM_ERR_ARG, "gm_matcher_fill_mask: NULL argument");
    if (!m->c->v) return gm_fail(err, GM_ERR_STATE, "grammar matcher: no vocabulary bound to the context");
    return gr_fill_mask(m->c, cur(m), mask, err);
}

int32_t gm_matcher_vocab_size(const gm_matcher *m) { return m && m->c->v ? gm_gvocab_size(m->c->v) : 0; }
