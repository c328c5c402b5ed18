/* grammar/compile.c — from the syntax tree to the matcher's NFA.
 *
 * Checks first, so that a matcher never meets a path that cannot finish: every rule reachable from
 * root must be able to finish (a rule such as `a ::= "x" a` never does: it would let the model start
 * something it can never end) and no rule may be left-recursive (`a ::= a "x"`, also through
 * nullable prefixes): the matcher expands calls eagerly and left recursion would push forever.
 *
 * Then one Thompson NFA per rule over code points: CHAR edges (a range set), EPS edges and CALL
 * edges (rule, return state). Repetitions are expanded in place (x{2,4} = x x x? x?, nested so
 * that each optional copy needs the one before), loops get a fresh state. Small non-recursive rules
 * are inlined into their callers: the mask precomputation (mask.c) classifies tokens per innermost
 * rule frame, and a token that leaves that frame has to be checked against the whole stack, so
 * big frames (a whole JSON string with its characters and escapes in one rule) keep most tokens
 * decidable from the frame alone. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

typedef struct cx {
    gr_ast *a;
    gm_error *err;
    /* per rule */
    uint8_t *reach, *nullable, *productive, *recursive, *inl;
    uint32_t *size;
    /* NFA being built */
    struct { int32_t from; gr_edge e; } *edges;
    size_t n_edges, cap_edges;
    size_t n_states;
    bool too_big;
} cx;

static const gr_node *N(const cx *c, int32_t i) { return &c->a->nodes[i]; }

/* ------------------------------------------------------------------ rule graph */
typedef void (*ref_fn)(cx *c, int32_t from_rule, int32_t to_rule, void *u);

/* Calls fn for each rule referenced anywhere in node (start_only: only where nothing has been
 * consumed yet, given the nullable flags). Returns whether node is nullable. */
static bool walk_refs(cx *c, int32_t node, int32_t rule, bool start_only, ref_fn fn, void *u) {
    const gr_node *n = N(c, node);
    switch (n->kind) {
    case GR_EMPTY: return true;
    case GR_CLASS: return false;
    case GR_REF:
        fn(c, rule, n->a, u);
        return c->nullable[n->a];
    case GR_SEQ: {
        bool all = true;
        for (int32_t ch = n->first; ch >= 0; ch = N(c, ch)->next) {
            if (start_only && !all) break;
            if (!walk_refs(c, ch, rule, start_only, fn, u)) all = false;
        }
        return all;
    }
    case GR_ALT: {
        bool any = false;
        for (int32_t ch = n->first; ch >= 0; ch = N(c, ch)->next)
            if (walk_refs(c, ch, rule, start_only, fn, u)) any = true;
        return any;
    }
    default: /* GR_REP */
        return walk_refs(c, n->first, rule, start_only, fn, u) || n->a == 0;
    }
}

static void ignore_ref(cx *c, int32_t f, int32_t t, void *u) { (void)c; (void)f; (void)t; (void)u; }

/* Whether node can finish (derive some string), given the rules' productive flags. */
static bool node_productive(cx *c, int32_t node) {
    const gr_node *n = N(c, node);
    switch (n->kind) {
    case GR_EMPTY: case GR_CLASS: return true;
    case GR_REF: return c->productive[n->a];
    case GR_SEQ:
        for (int32_t ch = n->first; ch >= 0; ch = N(c, ch)->next)
            if (!node_productive(c, ch)) return false;
        return true;
    case GR_ALT:
        for (int32_t ch = n->first; ch >= 0; ch = N(c, ch)->next)
            if (node_productive(c, ch)) return true;
        return false;
    default: return n->a == 0 || node_productive(c, n->first);
    }
}

/* Adjacency lists of the reference graph (all references, or start-only ones). */
typedef struct graph {
    uint32_t *off;
    int32_t *to;
    size_t n, cap;
} graph;

static void add_edge(cx *c, int32_t f, int32_t t, void *u) {
    (void)c;
    graph *g = u;
    if (!gr_grow((void **)&g->to, &g->cap, g->n + 1, sizeof(int32_t), SIZE_MAX / 8)) { g->n = SIZE_MAX; return; }
    if (g->n != SIZE_MAX) g->to[g->n++] = t;
    (void)f;
}

static bool build_graph(cx *c, bool start_only, graph *g) {
    size_t nr = c->a->n_rules;
    memset(g, 0, sizeof *g);
    g->off = malloc((nr + 1) * sizeof(uint32_t));
    if (!g->off) return false;
    for (size_t r = 0; r < nr; r++) {
        g->off[r] = (uint32_t)g->n;
        walk_refs(c, c->a->rules[r].body, (int32_t)r, start_only, add_edge, g);
        if (g->n == SIZE_MAX) return false;
    }
    g->off[nr] = (uint32_t)g->n;
    return true;
}

static void graph_free(graph *g) { free(g->off); free(g->to); }

/* Iterative Tarjan: comp[r] = strongly connected component, numbered callees first; cyc[r] = r is
 * on a cycle. Returns false on OOM. */
static bool tarjan(const graph *g, size_t nr, int32_t *comp, uint8_t *cyc) {
    int32_t *idx = malloc(nr * sizeof(int32_t)), *low = malloc(nr * sizeof(int32_t));
    int32_t *stk = malloc(nr * sizeof(int32_t)), *cs = malloc(nr * sizeof(int32_t));
    uint32_t *it = malloc(nr * sizeof(uint32_t));
    uint8_t *on = calloc(nr, 1);
    bool ok = idx && low && stk && cs && it && on;
    int32_t counter = 0, ncomp = 0;
    size_t sp = 0, csp = 0;
    for (size_t r = 0; ok && r < nr; r++) idx[r] = -1;
    for (size_t s = 0; ok && s < nr; s++) {
        if (idx[s] >= 0) continue;
        cs[csp++] = (int32_t)s;
        idx[s] = low[s] = counter++;
        it[s] = g->off[s];
        stk[sp++] = (int32_t)s;
        on[s] = 1;
        while (csp) {
            int32_t v = cs[csp - 1];
            if (it[v] < g->off[v + 1]) {
                int32_t w = g->to[it[v]++];
                if (w == v) cyc[v] = 1;
                if (idx[w] < 0) {
                    idx[w] = low[w] = counter++;
                    it[w] = g->off[w];
                    stk[sp++] = w;
                    on[w] = 1;
                    cs[csp++] = w;
                } else if (on[w] && idx[w] < low[v]) {
                    low[v] = idx[w];
                }
                continue;
            }
            csp--;
            if (csp && low[v] < low[cs[csp - 1]]) low[cs[csp - 1]] = low[v];
            if (low[v] != idx[v]) continue;
            size_t first = sp;
            do { first--; } while (stk[first] != v);
            for (size_t k = first; k < sp; k++) {
                on[stk[k]] = 0;
                comp[stk[k]] = ncomp;
                if (sp - first > 1) cyc[stk[k]] = 1;
            }
            sp = first;
            ncomp++;
        }
    }
    free(idx); free(low); free(stk); free(cs); free(it); free(on);
    return ok;
}

/* ------------------------------------------------------------------ checks */
static void mark_reach(cx *c, const graph *g) {
    int32_t *stk = malloc(c->a->n_rules * sizeof(int32_t));
    if (!stk) return; /* reach stays all-zero: checked by the caller through reach[root] */
    size_t sp = 0;
    stk[sp++] = c->a->root;
    c->reach[c->a->root] = 1;
    while (sp) {
        int32_t v = stk[--sp];
        for (uint32_t k = g->off[v]; k < g->off[v + 1]; k++)
            if (!c->reach[g->to[k]]) { c->reach[g->to[k]] = 1; stk[sp++] = g->to[k]; }
    }
    free(stk);
}

/* Fixed points over rules in callee-first order (few passes in practice). */
static void fixpoints(cx *c, const int32_t *order) {
    size_t nr = c->a->n_rules;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t k = 0; k < nr; k++) {
            int32_t r = order[k];
            if (!c->nullable[r] && walk_refs(c, c->a->rules[r].body, r, true, ignore_ref, NULL)) {
                c->nullable[r] = 1;
                changed = true;
            }
        }
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t k = 0; k < nr; k++) {
            int32_t r = order[k];
            if (!c->productive[r] && node_productive(c, c->a->rules[r].body)) {
                c->productive[r] = 1;
                changed = true;
            }
        }
    }
}

static gm_status rule_error(cx *c, int32_t r, const char *what) {
    const gr_rule *ru = &c->a->rules[r];
    return gm_fail(c->err, GM_ERR_FORMAT, "grammar %d:%d: rule '%.100s' %s", ru->line, ru->col, ru->name, what);
}

/* Estimated NFA states of node with inlining (saturating). */
static uint32_t est_size(cx *c, int32_t node) {
    const gr_node *n = N(c, node);
    uint64_t s = 0;
    switch (n->kind) {
    case GR_EMPTY: return 0;
    case GR_CLASS: return 1;
    case GR_REF: return c->inl[n->a] ? c->size[n->a] : 1;
    case GR_SEQ: case GR_ALT:
        for (int32_t ch = n->first; ch >= 0; ch = N(c, ch)->next) s += est_size(c, ch);
        s += n->kind == GR_ALT;
        break;
    default: {
        uint64_t copies = n->b < 0 ? (uint64_t)n->a + 1 : (uint64_t)n->b;
        s = (uint64_t)est_size(c, n->first) * (copies ? copies : 1) + copies + 1;
    }
    }
    return s > (1u << 30) ? (1u << 30) : (uint32_t)s;
}

static gm_status analyse(cx *c) {
    size_t nr = c->a->n_rules;
    graph all, start;
    int32_t *comp = malloc(nr * sizeof(int32_t)), *order = malloc(nr * sizeof(int32_t));
    uint8_t *cyc_all = calloc(nr, 1), *cyc_start = calloc(nr, 1);
    gm_status st = GM_OK;
    bool ok = comp && order && cyc_all && cyc_start;
    bool g1 = ok && build_graph(c, false, &all);
    ok = g1 && tarjan(&all, nr, comp, cyc_all);
    if (ok) {
        /* callee-first order: by component number (Tarjan numbers callees first) */
        size_t k = 0;
        int32_t maxc = 0;
        for (size_t r = 0; r < nr; r++) if (comp[r] > maxc) maxc = comp[r];
        int32_t *cnt = calloc((size_t)maxc + 2, sizeof(int32_t));
        ok = cnt != NULL;
        for (size_t r = 0; ok && r < nr; r++) cnt[comp[r] + 1]++;
        for (int32_t q = 0; ok && q <= maxc; q++) cnt[q + 1] += cnt[q];
        for (size_t r = 0; ok && r < nr; r++) order[cnt[comp[r]]++] = (int32_t)r;
        free(cnt);
        (void)k;
    }
    if (ok) {
        memcpy(c->recursive, cyc_all, nr);
        mark_reach(c, &all);
        fixpoints(c, order);
        ok = c->reach[c->a->root];
    }
    bool g2 = false;
    if (ok) {
        g2 = build_graph(c, true, &start);
        ok = g2 && tarjan(&start, nr, comp, cyc_start);
    }
    for (size_t k = 0; ok && !st && k < nr; k++) {
        int32_t r = order[k];
        if (!c->reach[r]) continue;
        if (cyc_start[r]) st = rule_error(c, r, "is left-recursive (it can call itself before matching anything)");
        else if (!c->productive[r]) st = rule_error(c, r, "can never finish (every alternative recurses forever)");
    }
    for (size_t k = 0; ok && !st && k < nr; k++) { /* callee-first: sizes of callees are known */
        int32_t r = order[k];
        c->size[r] = c->recursive[r] ? 1 : est_size(c, c->a->rules[r].body);
        c->inl[r] = !c->recursive[r] && r != c->a->root && c->size[r] <= GR_INLINE_MAX;
    }
    if (!ok && !st) st = gm_fail(c->err, GM_ERR_NOMEM, "grammar: out of memory");
    if (g1) graph_free(&all);
    if (g2) graph_free(&start);
    free(comp); free(order); free(cyc_all); free(cyc_start);
    return st;
}

/* ------------------------------------------------------------------ NFA construction */
static int32_t new_state(cx *c) {
    if (c->n_states >= GR_MAX_NFA) { c->too_big = true; return -1; }
    return (int32_t)c->n_states++;
}

static void edge(cx *c, int32_t from, uint8_t kind, int32_t arg, int32_t to) {
    if (from < 0 || to < 0) return;
    if (!gr_grow((void **)&c->edges, &c->cap_edges, c->n_edges + 1, sizeof *c->edges, (size_t)GR_MAX_NFA * 4)) {
        c->too_big = true;
        return;
    }
    c->edges[c->n_edges].from = from;
    c->edges[c->n_edges++].e = (gr_edge){.kind = kind, .arg = arg, .to = to};
}

/* Builds node starting at state `from`; returns the state where it ends (-1 once too big). */
static int32_t build(cx *c, int32_t node, int32_t from) {
    if (from < 0 || c->too_big) return -1;
    const gr_node *n = N(c, node);
    int32_t t, s;
    switch (n->kind) {
    case GR_EMPTY: return from;
    case GR_CLASS:
        t = new_state(c);
        edge(c, from, GR_E_CHAR, n->a, t);
        return t;
    case GR_REF:
        if (c->inl[n->a]) return build(c, c->a->rules[n->a].body, from);
        t = new_state(c);
        edge(c, from, GR_E_CALL, n->a, t);
        return t;
    case GR_SEQ:
        s = from;
        for (int32_t ch = n->first; ch >= 0; ch = N(c, ch)->next) s = build(c, ch, s);
        return s;
    case GR_ALT:
        t = new_state(c);
        for (int32_t ch = n->first; ch >= 0; ch = N(c, ch)->next) edge(c, build(c, ch, from), GR_E_EPS, 0, t);
        return t;
    default:
        break;
    }
    s = from; /* GR_REP: the required copies, then a loop or the optional copies */
    for (int k = 0; k < n->a; k++) s = build(c, n->first, s);
    if (n->b < 0) {
        int32_t loop = new_state(c);
        edge(c, s, GR_E_EPS, 0, loop);
        edge(c, build(c, n->first, loop), GR_E_EPS, 0, loop);
        return loop;
    }
    t = new_state(c);
    for (int k = n->a; k < n->b; k++) {
        edge(c, s, GR_E_EPS, 0, t);
        s = build(c, n->first, s);
    }
    edge(c, s, GR_E_EPS, 0, t);
    return t;
}

/* Sorts the edge list into per-state arrays (counting sort by source state). */
static bool finish_nfa(cx *c, gr_nfa *o) {
    size_t ns = c->n_states;
    o->n_states = ns;
    o->edges = malloc((c->n_edges ? c->n_edges : 1) * sizeof(gr_edge));
    o->edge_off = calloc(ns + 1, sizeof(uint32_t));
    o->accept_of = malloc(ns * sizeof(int32_t));
    o->has_char = calloc(ns, 1);
    if (!o->edges || !o->edge_off || !o->accept_of || !o->has_char) return false;
    for (size_t e = 0; e < c->n_edges; e++) o->edge_off[c->edges[e].from + 1]++;
    for (size_t s = 0; s < ns; s++) o->edge_off[s + 1] += o->edge_off[s];
    uint32_t *fill = malloc((ns + 1) * sizeof(uint32_t));
    if (!fill) return false;
    memcpy(fill, o->edge_off, (ns + 1) * sizeof(uint32_t));
    for (size_t e = 0; e < c->n_edges; e++) {
        o->edges[fill[c->edges[e].from]++] = c->edges[e].e;
        if (c->edges[e].e.kind == GR_E_CHAR) o->has_char[c->edges[e].from] = 1;
    }
    free(fill);
    for (size_t s = 0; s < ns; s++) o->accept_of[s] = -1;
    for (size_t r = 0; r < o->n_rules; r++)
        if (o->rule_accept[r] >= 0) o->accept_of[o->rule_accept[r]] = (int32_t)r;
    return true;
}

static gm_status build_nfa(cx *c, gr_nfa *o) {
    size_t nr = c->a->n_rules;
    o->n_rules = nr;
    o->root = c->a->root;
    o->rule_start = malloc(nr * sizeof(int32_t));
    o->rule_accept = malloc(nr * sizeof(int32_t));
    if (!o->rule_start || !o->rule_accept) return gm_fail(c->err, GM_ERR_NOMEM, "grammar: out of memory");
    for (size_t r = 0; r < nr; r++) {
        o->rule_start[r] = o->rule_accept[r] = -1;
        if (!c->reach[r] || (c->inl[r] && (int32_t)r != c->a->root)) continue; /* only called rules */
        int32_t s = new_state(c);
        int32_t e = build(c, c->a->rules[r].body, s);
        int32_t acc = new_state(c);
        edge(c, e, GR_E_EPS, 0, acc);
        o->rule_start[r] = s;
        o->rule_accept[r] = acc;
        if (c->too_big) break;
    }
    if (c->too_big)
        return gm_fail(c->err, GM_ERR_NOMEM, "grammar: too large once repetitions are expanded (over %u states)", GR_MAX_NFA);
    if (!finish_nfa(c, o)) return gm_fail(c->err, GM_ERR_NOMEM, "grammar: out of memory");
    return GM_OK;
}

gm_status gr_compile(gr_ast *a, gr_nfa *o, gm_error *err) {
    memset(o, 0, sizeof *o);
    size_t nr = a->n_rules;
    cx c = {.a = a, .err = err};
    c.reach = calloc(nr, 1); c.nullable = calloc(nr, 1); c.productive = calloc(nr, 1);
    c.recursive = calloc(nr, 1); c.inl = calloc(nr, 1);
    c.size = calloc(nr, sizeof(uint32_t));
    gm_status st = GM_OK;
    if (!c.reach || !c.nullable || !c.productive || !c.recursive || !c.inl || !c.size)
        st = gm_fail(err, GM_ERR_NOMEM, "grammar: out of memory");
    if (!st) st = analyse(&c);
    if (!st) st = build_nfa(&c, o);
    if (!st) { /* the range sets move to the NFA */
        o->ranges = a->ranges; o->set_off = a->set_off; o->set_len = a->set_len; o->n_sets = a->n_sets;
        a->ranges = NULL; a->set_off = NULL; a->set_len = NULL; a->n_sets = 0;
    }
    free(c.reach); free(c.nullable); free(c.productive); free(c.recursive); free(c.inl); free(c.size);
    free(c.edges);
    if (st) gr_nfa_free(o);
    return st;
}

void gr_nfa_free(gr_nfa *n) {
    free(n->edges); free(n->edge_off); free(n->accept_of); free(n->has_char);
    free(n->rule_start); free(n->rule_accept);
    free(n->ranges); free(n->set_off); free(n->set_len);
    memset(n, 0, sizeof *n);
}

bool gr_set_has(const gr_nfa *n, int32_t set, uint32_t cp) {
    const uint32_t *r = n->ranges + 2 * (size_t)n->set_off[set];
    size_t lo = 0, hi = n->set_len[set];
    while (lo < hi) { /* first range whose end >= cp */
        size_t mid = (lo + hi) / 2;
        if (r[2 * mid + 1] < cp) lo = mid + 1; else hi = mid;
    }
    return lo < n->set_len[set] && r[2 * lo] <= cp;
}

bool gr_set_meets(const gr_nfa *n, int32_t set, uint32_t lo, uint32_t hi) {
    const uint32_t *r = n->ranges + 2 * (size_t)n->set_off[set];
    for (size_t k = 0; k < n->set_len[set]; k++)
        if (r[2 * k] <= hi && r[2 * k + 1] >= lo) return true;
    return false;
}
