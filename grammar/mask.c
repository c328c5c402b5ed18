/* grammar/mask.c — vocabularies and token masks.
 *
 * The vocabulary's TEXT tokens are sorted by their bytes into a trie laid out in preorder: node i
 * has a byte, a depth, the index just past its subtree and the tokens that end there. A walk from a
 * matcher state visits nodes in order, keeps one state per depth, and skips a whole subtree as soon
 * as the matcher refuses its prefix (gr_step memoises each transition, so the walk is mostly array
 * loads).
 *
 * Walking the whole trie for every mask costs milliseconds (a string position accepts almost every
 * token), so masks are assembled from per-position classes, as XGrammar does: for each NFA state s
 * that tops a stack, one walk from s over an EMPTY stack sorts every token into
 *   - allowed whatever lies below s's rule frame (the walk stays inside the frame),
 *   - unsure: the walk can leave the frame (the rule ends) partway through the token, so the rest
 *     depends on the callers, and
 *   - refused whatever lies below.
 * A state's mask is then the union, over its stacks, of the allowed class of the top, plus the
 * unsure tokens that pass a walk from the full state (the byte walk again, through memoised
 * transitions). Classes are computed on first use and kept; whole masks are cached per state. A
 * state in the middle of a UTF-8 character falls back to the full trie walk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"
#include "gemma_grammar.h"
#include "text/tokenizer.h"

#define GR_MAX_PIECE 4096     /* longer pieces are never allowed (none exist in real vocabularies) */
#define GR_MASK_CACHE 1024    /* cached masks per context before the cache is emptied */

struct gm_gvocab {
    int32_t n;
    uint8_t *kind;
    char *bytes;
    uint32_t *off, *len;
    int32_t *end_ids;
    size_t n_end;
    /* the trie, preorder */
    size_t n_nodes;
    uint8_t *nbyte;
    uint16_t *ndepth;
    uint32_t *nend;    /* index past the subtree */
    uint32_t *ntok;    /* tokens of node i: tok[ntok[i] .. ntok[i + 1]) */
    int32_t *tok;
    int max_depth;
};

/* ------------------------------------------------------------------ vocabulary */
/* Merge sort with the vocabulary as explicit context (no global state): ids[0..n), tmp scratch. */
static void sort_ids(const gm_gvocab *v, int32_t *ids, int32_t *tmp, size_t n) {
    if (n < 2) return;
    size_t h = n / 2;
    sort_ids(v, ids, tmp, h);
    sort_ids(v, ids + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        uint32_t lx = v->len[ids[i]], ly = v->len[ids[j]];
        int c = memcmp(v->bytes + v->off[ids[i]], v->bytes + v->off[ids[j]], lx < ly ? lx : ly);
        bool take_left = c < 0 || (c == 0 && (lx < ly || (lx == ly && ids[i] < ids[j])));
        tmp[k++] = take_left ? ids[i++] : ids[j++];
    }
    while (i < h) tmp[k++] = ids[i++];
    while (j < n) tmp[k++] = ids[j++];
    memcpy(ids, tmp, n * sizeof(int32_t));
}

static bool build_trie(gm_gvocab *v) {
    size_t n = 0, total = 0;
    for (int32_t i = 0; i < v->n; i++) if (v->kind[i] == GM_GTOKEN_TEXT) { n++; total += v->len[i]; }
    int32_t *ids = malloc((n ? n : 1) * sizeof(int32_t)), *tmp = malloc((n ? n : 1) * sizeof(int32_t));
    v->tok = malloc((n ? n : 1) * sizeof(int32_t));
    size_t cap = total + 1;
    v->nbyte = malloc(cap); v->ndepth = malloc(cap * sizeof(uint16_t));
    v->nend = malloc(cap * sizeof(uint32_t)); v->ntok = malloc((cap + 1) * sizeof(uint32_t));
    uint32_t path[GR_MAX_PIECE + 1];
    if (!ids || !tmp || !v->tok || !v->nbyte || !v->ndepth || !v->nend || !v->ntok) { free(ids); free(tmp); return false; }
    n = 0;
    for (int32_t i = 0; i < v->n; i++) if (v->kind[i] == GM_GTOKEN_TEXT) ids[n++] = i;
    sort_ids(v, ids, tmp, n);
    size_t nn = 0, depth = 0, nt = 0;
    const uint8_t *prev = NULL;
    size_t plen = 0;
    for (size_t k = 0; k < n; k++) {
        const uint8_t *p = (const uint8_t *)v->bytes + v->off[ids[k]];
        size_t len = v->len[ids[k]], l = 0;
        while (prev && l < len && l < plen && p[l] == prev[l]) l++;
        while (depth > l) v->nend[path[--depth]] = (uint32_t)nn; /* close nodes deeper than the common prefix */
        for (; depth < len; depth++) {
            v->nbyte[nn] = p[depth];
            v->ndepth[nn] = (uint16_t)(depth + 1);
            v->ntok[nn] = (uint32_t)nt;
            path[depth] = (uint32_t)nn++;
        }
        v->tok[nt++] = ids[k];
        prev = p;
        plen = len;
        if ((int)len > v->max_depth) v->max_depth = (int)len;
    }
    while (depth) v->nend[path[--depth]] = (uint32_t)nn;
    v->ntok[nn] = (uint32_t)nt;
    v->n_nodes = nn;
    free(ids);
    free(tmp);
    return true;
}

gm_status gm_gvocab_new(int32_t n, const char *const *pieces, const size_t *lens, const uint8_t *kinds,
                        gm_gvocab **out, gm_error *err) {
    if (!out || n < 0 || (n && (!pieces || !lens))) return gm_fail(err, GM_ERR_ARG, "gm_gvocab_new: bad argument");
    *out = NULL;
    gm_gvocab *v = calloc(1, sizeof *v);
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) total += lens[i] <= GR_MAX_PIECE ? lens[i] : 0;
    if (v) {
        v->n = n;
        v->kind = malloc(n ? (size_t)n : 1);
        v->bytes = malloc(total + 1);
        v->off = malloc((n ? (size_t)n : 1) * sizeof(uint32_t));
        v->len = calloc(n ? (size_t)n : 1, sizeof(uint32_t));
        v->end_ids = malloc((n ? (size_t)n : 1) * sizeof(int32_t));
    }
    if (!v || !v->kind || !v->bytes || !v->off || !v->len || !v->end_ids || total > UINT32_MAX) {
        gm_gvocab_free(v);
        return gm_fail(err, GM_ERR_NOMEM, "gm_gvocab_new: out of memory");
    }
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t k = kinds ? kinds[i] : GM_GTOKEN_TEXT;
        if (k > GM_GTOKEN_END) k = GM_GTOKEN_NEVER;
        if (k == GM_GTOKEN_TEXT && (lens[i] == 0 || lens[i] > GR_MAX_PIECE || !pieces[i])) k = GM_GTOKEN_NEVER;
        v->kind[i] = k;
        v->off[i] = (uint32_t)at;
        if (k == GM_GTOKEN_TEXT) {
            memcpy(v->bytes + at, pieces[i], lens[i]);
            v->len[i] = (uint32_t)lens[i];
            at += lens[i];
        }
        if (k == GM_GTOKEN_END) v->end_ids[v->n_end++] = i;
    }
    if (!build_trie(v)) {
        gm_gvocab_free(v);
        return gm_fail(err, GM_ERR_NOMEM, "gm_gvocab_new: out of memory");
    }
    *out = v;
    return GM_OK;
}

/* Whether bytes p[0..n) could spell part of a marker character with what follows: they contain
 * one (F3 B0 80..83 xx) or end in a proper prefix of one (F3, F3 B0, F3 B0 80..83). */
static bool spells_marker(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p[i] != 0xF3) continue;
        if (i + 1 == n) return true;
        if (p[i + 1] != 0xB0) continue;
        if (i + 2 == n || (p[i + 2] >= 0x80 && p[i + 2] <= 0x83)) return true;
    }
    return false;
}

/* Markers as TEXT (their private-use characters, in chars: 4 bytes each), ordinary tokens that
 * could spell one NEVER; then the extra END ids. */
static gm_status apply_options(const gm_tokenizer *tok, const gm_gvocab_options *o, const char **pieces,
                               size_t *lens, uint8_t *kinds, char (*chars)[4], gm_error *err) {
    int32_t n = gm_tokenizer_n_vocab(tok);
    for (size_t k = 0; k < o->n_end_ids; k++)
        if (!o->end_ids || o->end_ids[k] < 0 || o->end_ids[k] >= n)
            return gm_fail(err, GM_ERR_ARG, "gm_gvocab_from_tokenizer: end id %d out of range",
                           o->end_ids ? (int)o->end_ids[k] : -1);
    if (o->markers) {
        for (int32_t i = 0; i < n; i++)
            if (kinds[i] == GM_GTOKEN_TEXT && spells_marker((const uint8_t *)pieces[i], lens[i])) kinds[i] = GM_GTOKEN_NEVER;
        for (size_t m = 0; gr_marker_text(m); m++) {
            const char *t = gr_marker_text(m);
            int32_t id = gm_token_id(tok, t, strlen(t));
            if (id < 0 || kinds[id] == GM_GTOKEN_END) continue;
            kinds[id] = GM_GTOKEN_TEXT;
            pieces[id] = chars[m];
            lens[id] = gm_utf8_encode(GR_MARKER_LO + (uint32_t)m, chars[m]);
        }
    }
    for (size_t k = 0; k < o->n_end_ids; k++) kinds[o->end_ids[k]] = GM_GTOKEN_END;
    return GM_OK;
}

gm_status gm_gvocab_from_tokenizer(const gm_tokenizer *tok, const gm_gvocab_options *o, gm_gvocab **out,
                                      gm_error *err) {
    if (!tok || !out) return gm_fail(err, GM_ERR_ARG, "gm_gvocab_from_tokenizer: NULL argument");
    int32_t n = gm_tokenizer_n_vocab(tok);
    const char **pieces = malloc((size_t)n * sizeof(char *));
    size_t *lens = malloc((size_t)n * sizeof(size_t));
    uint8_t *kinds = malloc((size_t)n);
    if (!pieces || !lens || !kinds) {
        free(pieces); free(lens); free(kinds);
        return gm_fail(err, GM_ERR_NOMEM, "gm_gvocab_from_tokenizer: out of memory");
    }
    gm_status st = GM_OK;
    for (int32_t i = 0; i < n && !st; i++) {
        st = gm_token_to_piece(tok, i, false, &pieces[i], &lens[i], err);
        gm_token_type ty = gm_token_get_type(tok, i);
        bool never = ty == GM_TOKEN_CONTROL || ty == GM_TOKEN_UNKNOWN || ty == GM_TOKEN_UNUSED ||
                     ty == GM_TOKEN_UNDEFINED || gm_token_is_marker(tok, i);
        kinds[i] = gm_token_is_eog(tok, i) ? GM_GTOKEN_END : never ? GM_GTOKEN_NEVER : GM_GTOKEN_TEXT;
    }
    char chars[GR_MARKER_HI - GR_MARKER_LO + 1][4];
    if (!st && o) st = apply_options(tok, o, pieces, lens, kinds, chars, err);
    if (!st) st = gm_gvocab_new(n, pieces, lens, kinds, out, err);
    free(pieces); free(lens); free(kinds);
    return st;
}

int32_t gm_gvocab_size(const gm_gvocab *v) { return v ? v->n : 0; }

void gm_gvocab_free(gm_gvocab *v) {
    if (!v) return;
    free(v->kind); free(v->bytes); free(v->off); free(v->len); free(v->end_ids);
    free(v->nbyte); free(v->ndepth); free(v->nend); free(v->ntok); free(v->tok);
    free(v);
}

bool gr_vocab_kind(const gm_gvocab *v, int32_t id, uint8_t *kind) {
    if (id < 0 || id >= v->n) return false;
    *kind = v->kind[id];
    return true;
}

int32_t gr_walk_token(gm_grammar_ctx *c, int32_t x, int32_t id) {
    const gm_gvocab *v = c->v;
    const uint8_t *p = (const uint8_t *)v->bytes + v->off[id];
    for (uint32_t k = 0, n = v->len[id]; k < n && x > 0; k++) x = gr_step(c, x, p[k]);
    return x;
}

/* ------------------------------------------------------------------ token classes */
static inline void set_bit(uint32_t *m, int32_t i) { m[i >> 5] |= 1u << (i & 31); }

void gr_tclass_free(gr_tclass *t) {
    if (!t) return;
    free(t->bits); free(t->list); free(t->unsure);
    free(t);
}

typedef struct walk {
    int32_t st[GR_MAX_PIECE + 1];
    uint8_t popped[GR_MAX_PIECE + 1]; /* the frame could end somewhere in the first d bytes (d >= 1) */
} walk;

/* One walk of the trie from state `start` over an empty stack, sorting tokens into allowed (bits)
 * and unsure (the roots of their subtrees appended to *unsure). */
static bool classify_walk(gm_grammar_ctx *c, int32_t start, uint32_t *bits, uint32_t **unsure, size_t *n_unsure,
                          size_t *n_allowed, walk *w) {
    const gm_gvocab *v = c->v;
    size_t cap = 0;
    w->st[0] = start;
    w->popped[0] = 0;
    for (size_t i = 0; i < v->n_nodes;) {
        int d = v->ndepth[i];
        int32_t y = gr_step(c, w->st[d - 1], v->nbyte[i]);
        if (y == GR_UNKNOWN) return false;
        const int32_t *t = v->tok + v->ntok[i];
        if (!gr_live(c, y)) {
            if (w->popped[d - 1]) { /* the rest depends on the callers: the whole subtree is unsure */
                if (!gr_grow((void **)unsure, &cap, *n_unsure + 1, sizeof(uint32_t), (size_t)1 << 28)) return false;
                (*unsure)[(*n_unsure)++] = (uint32_t)i;
            }
            i = v->nend[i];
            continue;
        }
        w->st[d] = y;
        w->popped[d] = w->popped[d - 1] || c->ds[y].at_bottom;
        for (uint32_t k = v->ntok[i]; k < v->ntok[i + 1]; k++, t++) { set_bit(bits, *t); (*n_allowed)++; }
        i++;
    }
    return true;
}

gm_status gr_classify(gm_grammar_ctx *c, int32_t s, gm_error *err) {
    if (c->cls[s]) return GM_OK;
    size_t words = ((size_t)c->v->n + 31) / 32, n_allowed = 0;
    gr_tclass *t = calloc(1, sizeof *t);
    walk *w = malloc(sizeof *w);
    uint32_t *bits = calloc(words ? words : 1, sizeof(uint32_t));
    int32_t start = gr_frame_start(c, s);
    gm_status st = GM_OK;
    if (!t || !w || !bits) st = gm_fail(err, GM_ERR_NOMEM, "grammar masks: out of memory");
    else if (start == GR_UNKNOWN || !classify_walk(c, start, bits, &t->unsure, &t->n_unsure, &n_allowed, w))
        st = c->fail ? gr_ctx_error(c, err) : gm_fail(err, GM_ERR_NOMEM, "grammar masks: out of memory");
    if (!st && n_allowed * 32 < (size_t)c->v->n) { /* few: a list is smaller than the bitmask */
        t->list = malloc((n_allowed ? n_allowed : 1) * sizeof(int32_t));
        if (!t->list) st = gm_fail(err, GM_ERR_NOMEM, "grammar masks: out of memory");
        for (size_t k = 0; !st && k < words; k++)
            for (uint32_t b = bits[k]; b; b &= b - 1) t->list[t->n_list++] = (int32_t)(k * 32 + (size_t)__builtin_ctz(b));
        free(bits);
        bits = NULL;
    }
    free(w);
    if (st) {
        free(bits);
        gr_tclass_free(t);
        return st;
    }
    t->bits = bits;
    c->cls[s] = t;
    c->n_classified++;
    return GM_OK;
}

gm_status gm_grammar_ctx_precompute(gm_grammar_ctx *c, gm_error *err) {
    if (!c || !c->v) return gm_fail(err, GM_ERR_ARG, "gm_grammar_ctx_precompute: no context or vocabulary");
    for (size_t s = 0; s < c->g->nfa.n_states; s++) {
        if (!c->g->nfa.has_char[s]) continue;
        gm_status st = gr_classify(c, (int32_t)s, err);
        if (st) return st;
    }
    return GM_OK;
}

/* ------------------------------------------------------------------ masks */
/* Walks trie nodes [from, to) (whole subtrees) whose parent state is w->st[depth(from) - 1], setting
 * the bits of every token whose bytes lead to a live state. */
static bool walk_nodes(gm_grammar_ctx *c, size_t from, size_t to, uint32_t *mask, walk *w) {
    const gm_gvocab *v = c->v;
    for (size_t i = from; i < to;) {
        int d = v->ndepth[i];
        int32_t y = gr_step(c, w->st[d - 1], v->nbyte[i]);
        if (y == GR_UNKNOWN) return false;
        if (!gr_live(c, y)) {
            i = v->nend[i];
            continue;
        }
        w->st[d] = y;
        for (uint32_t k = v->ntok[i]; k < v->ntok[i + 1]; k++) set_bit(mask, v->tok[k]);
        i++;
    }
    return true;
}

static bool full_walk(gm_grammar_ctx *c, int32_t x, uint32_t *mask, walk *w) {
    w->st[0] = x;
    return walk_nodes(c, 0, c->v->n_nodes, mask, w);
}

/* The unsure subtrees of a class, from the whole state x: the prefix above each root is walked
 * from x (shared with the previous root when they are siblings), then the subtree, pruned. */
static bool walk_unsure(gm_grammar_ctx *c, int32_t x, const gr_tclass *t, uint32_t *mask, walk *w) {
    const gm_gvocab *v = c->v;
    w->st[0] = x;
    size_t prev = SIZE_MAX;
    for (size_t j = 0; j < t->n_unsure; j++) {
        uint32_t i = t->unsure[j];
        int d = v->ndepth[i];
        const uint8_t *p = (const uint8_t *)v->bytes + v->off[v->tok[v->ntok[i]]]; /* a token of the subtree */
        bool sibling = prev != SIZE_MAX && v->ndepth[prev] == d &&
                       memcmp(p, v->bytes + v->off[v->tok[v->ntok[prev]]], (size_t)d - 1) == 0;
        if (!sibling) {
            int32_t y = x;
            for (int k = 0; k < d - 1; k++) { /* a dead prefix leaves GR_DEAD for the siblings too */
                y = y > 0 ? gr_step(c, y, p[k]) : GR_DEAD;
                if (y == GR_UNKNOWN) return false;
                w->st[k + 1] = y;
            }
        }
        prev = i;
        if (gr_live(c, w->st[d - 1]) && !walk_nodes(c, i, v->nend[i], mask, w)) return false;
    }
    return true;
}

static gm_status from_classes(gm_grammar_ctx *c, int32_t x, uint32_t *mask, gm_error *err) {
    size_t words = ((size_t)c->v->n + 31) / 32;
    uint32_t n_cfg = c->ds[x].n_cfg;
    for (uint32_t k = 0; k < n_cfg; k++) {
        int32_t s = c->nodes[c->cfgs[c->ds[x].cfg_off + k]].state;
        gm_status st = gr_classify(c, s, err);
        if (st) return st;
        const gr_tclass *t = c->cls[s];
        if (t->bits) for (size_t j = 0; j < words; j++) mask[j] |= t->bits[j];
        for (size_t j = 0; j < t->n_list; j++) set_bit(mask, t->list[j]);
    }
    walk *w = NULL;
    for (uint32_t k = 0; k < n_cfg; k++) {
        const gr_tclass *t = c->cls[c->nodes[c->cfgs[c->ds[x].cfg_off + k]].state];
        if (!t->n_unsure) continue;
        if (!w && !(w = malloc(sizeof *w))) return gm_fail(err, GM_ERR_NOMEM, "grammar masks: out of memory");
        if (!walk_unsure(c, x, t, mask, w)) {
            free(w);
            return gr_ctx_error(c, err);
        }
    }
    free(w);
    return GM_OK;
}

static void cache_mask(gm_grammar_ctx *c, int32_t x, const uint32_t *mask, size_t words) {
    if (c->n_masks >= GR_MASK_CACHE) { /* simple bound: start over */
        for (size_t i = 0; i < c->n_ds; i++) { free(c->ds[i].mask); c->ds[i].mask = NULL; }
        c->n_masks = 0;
    }
    uint32_t *m = malloc(words * sizeof(uint32_t));
    if (!m) return; /* a cache miss later, not an error */
    memcpy(m, mask, words * sizeof(uint32_t));
    c->ds[x].mask = m;
    c->n_masks++;
}

gm_status gr_fill_mask(gm_grammar_ctx *c, int32_t x, uint32_t *mask, gm_error *err) {
    const gm_gvocab *v = c->v;
    size_t words = ((size_t)v->n + 31) / 32;
    if (x > 0 && c->ds[x].mask) {
        memcpy(mask, c->ds[x].mask, words * sizeof(uint32_t));
        return GM_OK;
    }
    memset(mask, 0, words * sizeof(uint32_t));
    if (x <= 0) return GM_OK;
    gm_status st = GM_OK;
    if (c->ds[x].prem) { /* mid-character: the classes assume a clean start */
        walk *w = malloc(sizeof *w);
        if (!w) return gm_fail(err, GM_ERR_NOMEM, "grammar masks: out of memory");
        if (!full_walk(c, x, mask, w)) st = gr_ctx_error(c, err);
        free(w);
    } else {
        st = from_classes(c, x, mask, err);
    }
    if (st) return st;
    if (c->ds[x].at_bottom)
        for (size_t k = 0; k < v->n_end; k++) set_bit(mask, v->end_ids[k]);
    cache_mask(c, x, mask, words);
    return GM_OK;
}

