/* runtime/kvcache.c — paged KV blocks, refcounts, LRU eviction and the prefix index (see kvcache.h).
 *
 * A block record is in one of four states:
 *   held     ref > 0 (one or more sequence tables point at it)
 *   cached   ref == 0, entered in the index: on the LRU list, evictable
 *   free     ref == 0, not in the index, storage kept for reuse (per-group free list)
 *   dead     no storage (record reusable)
 * A held block that is also in the index must not be written: a writer copies it, so the index keeps the
 * content for later prompts; only when it is the sole holder and no storage is left for a copy does it take
 * the block out of the index and write in place.
 *
 * Index entries. A full entry is a block of GM_KV_BLOCK rows, found by its chain hash. A tail entry is the
 * first n < GM_KV_BLOCK rows of a sequence's last block, entered when the sequence goes
 * (gm_kv_table_register_tail); it has no chain hash of its own (nothing continues it). Every entry is also on
 * the list of the entries under its parent hash, where an adoption looks, after its run of full blocks, for
 * the entry whose rows continue the prompt the furthest: a tail, or a full block whose first rows match. */
#include "runtime/kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/siphash.h"
#include "model/model.h"

enum { NONE = -1 };

typedef struct blk {
    int group;
    int ref;
    int entry;       /* index entry, NONE */
    int prev, next;  /* LRU links while cached */
    void *data;      /* NULL when dead */
} blk;

typedef struct entry {
    uint64_t hash, parent; /* hash: the chain hash of a full entry (0 for a tail) */
    uint64_t scope;  /* compared exactly: scopes stay apart even if their hashes met */
    int32_t ids[GM_KV_BLOCK];
    int n;           /* rows of content: GM_KV_BLOCK (a full entry) or fewer (a tail; ids past n are 0) */
    uint64_t salt;   /* 0 for text (gm_kv_chain_hash); always 0 for a tail */
    int blk[GM_KV_GROUPS];
    int sib_prev, sib_next; /* the list of entries under the same parent hash */
    bool used;
} entry;

/* Open addressing with linear probing, from a 64-bit key of an entry to the entry: its chain hash (full
 * entries, found by content) or its parent hash (the head of the list of entries under that parent). */
typedef struct emap {
    int *slot;       /* entry id or NONE */
    size_t cap;      /* power of two, > 2 x entries */
    bool by_parent;
} emap;

typedef struct idlist {
    int *v;
    int n, cap;
} idlist;

struct gm_kvpool {
    gm_kv_layout lay;
    gm_kv_storage st;
    size_t budget, used;
    bool indexed;
    blk *b;
    int nb, capb;
    idlist dead, free[GM_KV_GROUPS];
    int lru_head, lru_tail, n_cached;
    entry *e;
    int ne, cape;
    idlist free_ent;
    emap map;        /* full entries by chain hash */
    emap kids;       /* entry lists by parent hash */
    int64_t reused, evictions;
    uint64_t key[2];  /* the block hash's secret key (gm_kv_chain_hash) */
};

/* ---------------------------------------------------------------- layout */

gm_status gm_kv_layout_init(gm_kv_layout *lay, const gm_model *m, gm_kv_dtype dtype, gm_error *err) {
    memset(lay, 0, sizeof *lay);
    if (dtype != GM_KV_DTYPE_F32 && dtype != GM_KV_DTYPE_F16)
        return gm_fail(err, GM_ERR_ARG, "kv cache: unknown storage type %d", (int)dtype);
    const int L = m->cfg.n_layers;
    lay->n_layers = L;
    lay->dtype = dtype;
    lay->elem = dtype == GM_KV_DTYPE_F16 ? 2 : 4;
    lay->group = calloc((size_t)L, sizeof *lay->group);
    lay->kv_dim = calloc((size_t)L, sizeof *lay->kv_dim);
    lay->source = calloc((size_t)L, sizeof *lay->source);
    lay->k_off = calloc((size_t)L, sizeof *lay->k_off);
    lay->v_off = calloc((size_t)L, sizeof *lay->v_off);
    if (!lay->group || !lay->kv_dim || !lay->source || !lay->k_off || !lay->v_off) {
        gm_kv_layout_free(lay);
        return gm_fail(err, GM_ERR_NOMEM, "kv cache: out of memory");
    }
    for (int il = 0; il < L; il++) {
        const gm_layer_config *l = &m->layers[il].lc;
        const int src = l->kv_source;
        const gm_layer_config *s = &m->layers[src].lc;
        lay->source[il] = src;
        lay->kv_dim[il] = s->n_kv_heads * s->head_dim;
        if (src != il) {
            /* a layer reading another's KV must see the same head shapes and the same window */
            if (s->kv_source != src || s->head_dim != l->head_dim || s->n_kv_heads != l->n_kv_heads ||
                s->window != l->window) {
                gm_kv_layout_free(lay);
                return gm_fail(err, GM_ERR_UNSUPPORTED,
                               "kv cache: layer %d shares the KV of layer %d, whose shape or window differs", il, src);
            }
            lay->group[il] = NONE;
            continue;
        }
        const int g = l->window > 0 ? GM_KV_SLIDING : GM_KV_FULL;
        const size_t rows = (size_t)GM_KV_BLOCK * (size_t)lay->kv_dim[il] * lay->elem;
        lay->group[il] = g;
        lay->k_off[il] = lay->block_bytes[g];
        lay->v_off[il] = lay->block_bytes[g] + rows;
        lay->block_bytes[g] += 2 * rows;
        if (g == GM_KV_SLIDING && l->window > lay->window) lay->window = l->window;
    }
    return GM_OK;
}

void gm_kv_layout_free(gm_kv_layout *lay) {
    free(lay->group);
    free(lay->kv_dim);
    free(lay->source);
    free(lay->k_off);
    free(lay->v_off);
    memset(lay, 0, sizeof *lay);
}

size_t gm_kv_layout_bytes_per_token(const gm_kv_layout *lay) {
    return (lay->block_bytes[0] + lay->block_bytes[1]) / GM_KV_BLOCK;
}

static gm_status layout_copy(gm_kv_layout *dst, const gm_kv_layout *src) {
    *dst = *src;
    const size_t L = (size_t)src->n_layers;
    dst->group = malloc(L * sizeof *dst->group);
    dst->kv_dim = malloc(L * sizeof *dst->kv_dim);
    dst->source = malloc(L * sizeof *dst->source);
    dst->k_off = malloc(L * sizeof *dst->k_off);
    dst->v_off = malloc(L * sizeof *dst->v_off);
    if (!dst->group || !dst->kv_dim || !dst->source || !dst->k_off || !dst->v_off) {
        gm_kv_layout_free(dst);
        return GM_ERR_NOMEM;
    }
    memcpy(dst->group, src->group, L * sizeof *dst->group);
    memcpy(dst->kv_dim, src->kv_dim, L * sizeof *dst->kv_dim);
    memcpy(dst->source, src->source, L * sizeof *dst->source);
    memcpy(dst->k_off, src->k_off, L * sizeof *dst->k_off);
    memcpy(dst->v_off, src->v_off, L * sizeof *dst->v_off);
    return GM_OK;
}

/* ---------------------------------------------------------------- small containers */

static bool grow_list(idlist *l, int cap) {
    if (cap <= l->cap) return true;
    int *p = realloc(l->v, (size_t)cap * sizeof *p);
    if (!p) return false;
    l->v = p;
    l->cap = cap;
    return true;
}

static bool push(idlist *l, int v) {
    if (l->n == l->cap && !grow_list(l, l->cap ? 2 * l->cap : 64)) return false;
    l->v[l->n++] = v;
    return true;
}

static void lru_unlink(gm_kvpool *p, int id) {
    blk *b = &p->b[id];
    if (b->prev != NONE) p->b[b->prev].next = b->next;
    else p->lru_head = b->next;
    if (b->next != NONE) p->b[b->next].prev = b->prev;
    else p->lru_tail = b->prev;
    b->prev = b->next = NONE;
    p->n_cached--;
}

static void lru_push(gm_kvpool *p, int id) { /* most recently used at the tail */
    blk *b = &p->b[id];
    b->prev = p->lru_tail;
    b->next = NONE;
    if (p->lru_tail != NONE) p->b[p->lru_tail].next = id;
    else p->lru_head = id;
    p->lru_tail = id;
    p->n_cached++;
}

/* ---------------------------------------------------------------- the index (hash -> entry) */

static uint64_t ekey(const gm_kvpool *p, const emap *m, int e) { return m->by_parent ? p->e[e].parent : p->e[e].hash; }
static size_t slot_of(const emap *m, uint64_t h) { return (size_t)(h ^ (h >> 29)) & (m->cap - 1); }

static void emap_put(const gm_kvpool *p, emap *m, int e) {
    size_t s = slot_of(m, ekey(p, m, e));
    while (m->slot[s] != NONE) s = (s + 1) & (m->cap - 1);
    m->slot[s] = e;
}

static bool emap_grow(gm_kvpool *p, emap *m) {
    const size_t cap = m->cap ? 2 * m->cap : 256;
    int *slot = malloc(cap * sizeof *slot);
    if (!slot) return false;
    for (size_t i = 0; i < cap; i++) slot[i] = NONE;
    const emap old = *m;
    m->slot = slot;
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slot[i] != NONE) emap_put(p, m, old.slot[i]);
    free(old.slot);
    return true;
}

static size_t emap_slot(const gm_kvpool *p, const emap *m, int e) {
    size_t s = slot_of(m, ekey(p, m, e));
    while (m->slot[s] != e) s = (s + 1) & (m->cap - 1);
    return s;
}

/* backward-shift deletion keeps linear probing correct without tombstones */
static void emap_remove(const gm_kvpool *p, emap *m, int e) {
    const size_t mask = m->cap - 1;
    size_t hole = emap_slot(p, m, e);
    for (size_t j = (hole + 1) & mask; m->slot[j] != NONE; j = (j + 1) & mask) {
        const size_t home = slot_of(m, ekey(p, m, m->slot[j]));
        /* move j into the hole unless its home lies cyclically in (hole, j] */
        const bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!stays) {
            m->slot[hole] = m->slot[j];
            hole = j;
        }
    }
    m->slot[hole] = NONE;
}

static int map_find(const gm_kvpool *p, uint64_t scope, uint64_t h, uint64_t parent, const int32_t *ids, uint64_t salt) {
    const emap *m = &p->map;
    if (!m->cap) return NONE;
    for (size_t s = slot_of(m, h);; s = (s + 1) & (m->cap - 1)) {
        const int e = m->slot[s];
        if (e == NONE) return NONE;
        const entry *x = &p->e[e];
        if (x->hash == h && x->parent == parent && x->scope == scope && x->salt == salt &&
            memcmp(x->ids, ids, sizeof x->ids) == 0)
            return e;
    }
}

/* The first entry under parent (any scope: the caller compares), or NONE. */
static int kids_head(const gm_kvpool *p, uint64_t parent) {
    const emap *m = &p->kids;
    if (!m->cap) return NONE;
    for (size_t s = slot_of(m, parent);; s = (s + 1) & (m->cap - 1)) {
        const int e = m->slot[s];
        if (e == NONE || p->e[e].parent == parent) return e;
    }
}

static void kids_link(gm_kvpool *p, int e) {
    entry *x = &p->e[e];
    const int head = kids_head(p, x->parent);
    x->sib_prev = x->sib_next = NONE;
    if (head == NONE) {
        emap_put(p, &p->kids, e);
        return;
    }
    /* after the head: the map's slot keeps pointing at it */
    x->sib_prev = head;
    x->sib_next = p->e[head].sib_next;
    if (x->sib_next != NONE) p->e[x->sib_next].sib_prev = e;
    p->e[head].sib_next = e;
}

static void kids_unlink(gm_kvpool *p, int e) {
    const entry *x = &p->e[e];
    if (x->sib_next != NONE) p->e[x->sib_next].sib_prev = x->sib_prev;
    if (x->sib_prev != NONE) {
        p->e[x->sib_prev].sib_next = x->sib_next;
    } else if (x->sib_next != NONE) { /* the head goes: its successor (same parent, same home) takes its slot */
        p->kids.slot[emap_slot(p, &p->kids, e)] = x->sib_next;
    } else {
        emap_remove(p, &p->kids, e);
    }
}

/* A new entry of n rows (a full one when n is GM_KV_BLOCK) with no block yet; NONE when out of memory. */
static int entry_new(gm_kvpool *p, uint64_t scope, uint64_t h, uint64_t parent, const int32_t *ids, int n, uint64_t salt) {
    const size_t live = (size_t)(p->ne - p->free_ent.n + 1);
    if ((live * 2 > p->map.cap && !emap_grow(p, &p->map)) || (live * 2 > p->kids.cap && !emap_grow(p, &p->kids)))
        return NONE;
    int e;
    if (p->free_ent.n) {
        e = p->free_ent.v[--p->free_ent.n];
    } else {
        if (p->ne == p->cape) {
            const int cap = p->cape ? 2 * p->cape : 64;
            entry *x = realloc(p->e, (size_t)cap * sizeof *x);
            if (!x) return NONE;
            p->e = x;
            p->cape = cap;
        }
        e = p->ne++;
    }
    entry *x = &p->e[e];
    *x = (entry){.hash = h, .parent = parent, .scope = scope, .n = n, .salt = salt, .used = true};
    memcpy(x->ids, ids, (size_t)n * sizeof *ids);
    for (int g = 0; g < GM_KV_GROUPS; g++) x->blk[g] = NONE;
    if (n == GM_KV_BLOCK) emap_put(p, &p->map, e);
    kids_link(p, e);
    return e;
}

static void entry_free(gm_kvpool *p, int e) {
    if (p->e[e].n == GM_KV_BLOCK) emap_remove(p, &p->map, e);
    kids_unlink(p, e);
    p->e[e].used = false;
    push(&p->free_ent, e); /* cannot fail: free_ent never exceeds the entries allocated */
}

/* Takes block id out of its entry; the entry goes when it has no block left. */
static void detach(gm_kvpool *p, int id) {
    blk *b = &p->b[id];
    if (b->entry == NONE) return;
    entry *x = &p->e[b->entry];
    x->blk[b->group] = NONE;
    bool empty = true;
    for (int g = 0; g < GM_KV_GROUPS; g++) empty = empty && x->blk[g] == NONE;
    if (empty) entry_free(p, b->entry);
    b->entry = NONE;
}

/* ---------------------------------------------------------------- blocks */

static void to_free(gm_kvpool *p, int id) {
    if (!push(&p->free[p->b[id].group], id)) { /* no room to remember it: give the storage back */
        p->st.free(p->st.ctx, p->b[id].data, p->lay.block_bytes[p->b[id].group]);
        p->used -= p->lay.block_bytes[p->b[id].group];
        p->b[id].data = NULL;
        push(&p->dead, id);
    }
}

static void unref(gm_kvpool *p, int id) {
    blk *b = &p->b[id];
    if (--b->ref > 0) return;
    if (b->entry != NONE) lru_push(p, id);
    else to_free(p, id);
}

static void ref(gm_kvpool *p, int id) {
    blk *b = &p->b[id];
    if (b->ref++ == 0 && b->entry != NONE) lru_unlink(p, id);
}

static void evict_lru(gm_kvpool *p) {
    const int id = p->lru_head;
    lru_unlink(p, id);
    detach(p, id);
    to_free(p, id);
    p->evictions++;
}

static int new_record(gm_kvpool *p) {
    if (p->dead.n) return p->dead.v[--p->dead.n];
    if (p->nb == p->capb) {
        const int cap = p->capb ? 2 * p->capb : 64;
        blk *b = realloc(p->b, (size_t)cap * sizeof *b);
        if (!b) return NONE;
        p->b = b;
        p->capb = cap;
    }
    p->b[p->nb] = (blk){.entry = NONE, .prev = NONE, .next = NONE};
    return p->nb++;
}

/* A block of group g with ref 1: a free one, new storage within the budget, or storage won back from
 * the other group's free blocks and then from the least recently used cached blocks. */
static int block_alloc(gm_kvpool *p, int g) {
    const size_t bytes = p->lay.block_bytes[g];
    for (;;) {
        if (p->free[g].n) {
            const int id = p->free[g].v[--p->free[g].n];
            p->b[id].ref = 1;
            return id;
        }
        if (p->used + bytes <= p->budget) {
            const int id = new_record(p);
            if (id == NONE) return NONE;
            void *d = p->st.alloc(p->st.ctx, bytes);
            if (!d) {
                push(&p->dead, id);
                return NONE;
            }
            p->used += bytes;
            p->b[id] = (blk){.group = g, .ref = 1, .entry = NONE, .prev = NONE, .next = NONE, .data = d};
            return id;
        }
        const int o = 1 - g;
        if (p->free[o].n) {
            const int id = p->free[o].v[--p->free[o].n];
            p->st.free(p->st.ctx, p->b[id].data, p->lay.block_bytes[o]);
            p->used -= p->lay.block_bytes[o];
            p->b[id].data = NULL;
            push(&p->dead, id);
            continue;
        }
        if (p->lru_head == NONE) return NONE;
        evict_lru(p);
    }
}

static gm_status no_room(const gm_kvpool *p, gm_error *err);

/* ---------------------------------------------------------------- pool */

gm_status gm_kvpool_new(const gm_kv_layout *lay, gm_kv_storage st, size_t budget, bool indexed, const uint64_t key[2],
                        gm_kvpool **out, gm_error *err) {
    *out = NULL;
    gm_kvpool *p = calloc(1, sizeof *p);
    if (!p || layout_copy(&p->lay, lay) != GM_OK) {
        free(p);
        return gm_fail(err, GM_ERR_NOMEM, "kv cache: out of memory");
    }
    p->st = st;
    p->budget = budget;
    p->indexed = indexed;
    memcpy(p->key, key, sizeof p->key);
    p->lru_head = p->lru_tail = NONE;
    /* bookkeeping for as many blocks as the budget holds, sized now: no allocation in the steady state
     * of a decode loop */
    size_t small = 0;
    for (int g = 0; g < GM_KV_GROUPS; g++)
        if (lay->block_bytes[g] && (!small || lay->block_bytes[g] < small)) small = lay->block_bytes[g];
    const size_t most = small ? budget / small + 16 : 16;
    const int n = most < (size_t)1 << 24 ? (int)most : 1 << 24;
    bool ok = grow_list(&p->dead, n) && grow_list(&p->free[0], n) && grow_list(&p->free[1], n) &&
              grow_list(&p->free_ent, n) && (p->b = malloc((size_t)n * sizeof *p->b)) != NULL;
    if (ok) p->capb = n;
    if (ok && indexed) {
        ok = (p->e = malloc((size_t)n * sizeof *p->e)) != NULL;
        if (ok) p->cape = n;
        p->kids.by_parent = true;
        while (ok && p->map.cap < 2 * (size_t)n) ok = emap_grow(p, &p->map);
        while (ok && p->kids.cap < 2 * (size_t)n) ok = emap_grow(p, &p->kids);
    }
    if (!ok) {
        gm_kvpool_free(p);
        return gm_fail(err, GM_ERR_NOMEM, "kv cache: out of memory for the bookkeeping of %d blocks", n);
    }
    *out = p;
    return GM_OK;
}

void gm_kvpool_free(gm_kvpool *p) {
    if (!p) return;
    for (int i = 0; i < p->nb; i++)
        if (p->b[i].data) p->st.free(p->st.ctx, p->b[i].data, p->lay.block_bytes[p->b[i].group]);
    free(p->b);
    free(p->dead.v);
    for (int g = 0; g < GM_KV_GROUPS; g++) free(p->free[g].v);
    free(p->e);
    free(p->free_ent.v);
    free(p->map.slot);
    free(p->kids.slot);
    gm_kv_layout_free(&p->lay);
    free(p);
}

gm_status gm_kvpool_reserve(gm_kvpool *p, const int n[GM_KV_GROUPS], gm_error *err) {
    for (int g = 0; g < GM_KV_GROUPS; g++) {
        const size_t bytes = p->lay.block_bytes[g];
        while (bytes && p->free[g].n < n[g]) {
            if (p->used + bytes > p->budget) return no_room(p, err);
            const int id = new_record(p);
            void *d = id == NONE ? NULL : p->st.alloc(p->st.ctx, bytes);
            if (!d) {
                if (id != NONE) push(&p->dead, id);
                return gm_fail(err, GM_ERR_NOMEM, "kv cache: out of memory reserving blocks");
            }
            p->used += bytes;
            p->b[id] = (blk){.group = g, .ref = 0, .entry = NONE, .prev = NONE, .next = NONE, .data = d};
            to_free(p, id);
        }
    }
    return GM_OK;
}


void gm_kvpool_stats(const gm_kvpool *p, gm_kv_stats *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < p->nb; i++)
        if (p->b[i].data && p->b[i].ref > 0) out->blocks_live++;
    out->blocks_cached = p->n_cached;
    size_t big = p->lay.block_bytes[0] > p->lay.block_bytes[1] ? p->lay.block_bytes[0] : p->lay.block_bytes[1];
    out->blocks_free = p->free[0].n + p->free[1].n + (big && p->budget > p->used ? (int64_t)((p->budget - p->used) / big) : 0);
    out->bytes_used = p->used;
    out->bytes_budget = p->budget;
    out->bytes_per_token = gm_kv_layout_bytes_per_token(&p->lay);
    out->reused_positions = p->reused;
    out->evictions = p->evictions;
}

/* ---------------------------------------------------------------- tables */

void gm_kv_table_init(gm_kv_table *t) { memset(t, 0, sizeof *t); }

bool gm_kv_table_reserve(gm_kv_table *t, int n) {
    if (n <= t->cap) return true;
    int cap = t->cap ? t->cap : 16;
    while (cap < n) cap *= 2;
    for (int g = 0; g < GM_KV_GROUPS; g++) {
        int32_t *id = realloc(t->id[g], (size_t)cap * sizeof *id);
        if (!id) return false;
        t->id[g] = id;
        void **ptr = realloc(t->ptr[g], (size_t)cap * sizeof *ptr);
        if (!ptr) return false;
        t->ptr[g] = ptr;
        for (int i = t->cap; i < cap; i++) t->id[g][i] = NONE, t->ptr[g][i] = NULL;
    }
    uint64_t *h = realloc(t->hash, (size_t)cap * sizeof *h);
    if (!h) return false;
    t->hash = h;
    t->cap = cap;
    return true;
}

static void put(gm_kvpool *p, gm_kv_table *t, int g, int i, int id) {
    t->id[g][i] = id;
    t->ptr[g][i] = id == NONE ? NULL : p->b[id].data;
}

static void drop(gm_kvpool *p, gm_kv_table *t, int g, int i) {
    if (t->id[g][i] == NONE) return;
    unref(p, t->id[g][i]);
    put(p, t, g, i, NONE);
}

void gm_kv_table_drop_from(gm_kvpool *p, gm_kv_table *t, int from_block) {
    for (int g = 0; g < GM_KV_GROUPS; g++)
        for (int i = from_block; i < t->cap; i++) drop(p, t, g, i);
    if (t->n_hashed > from_block) t->n_hashed = from_block;
}

void gm_kv_table_free(gm_kvpool *p, gm_kv_table *t) {
    if (p) gm_kv_table_drop_from(p, t, 0);
    for (int g = 0; g < GM_KV_GROUPS; g++) {
        free(t->id[g]);
        free(t->ptr[g]);
    }
    free(t->hash);
    memset(t, 0, sizeof *t);
}

gm_status gm_kv_table_fork(gm_kvpool *p, gm_kv_table *dst, const gm_kv_table *src, gm_error *err) {
    if (!gm_kv_table_reserve(dst, src->cap)) return gm_fail(err, GM_ERR_NOMEM, "kv cache: out of memory for a block table");
    for (int g = 0; g < GM_KV_GROUPS; g++)
        for (int i = 0; i < src->cap; i++)
            if (src->id[g][i] != NONE) {
                ref(p, src->id[g][i]);
                put(p, dst, g, i, src->id[g][i]);
            }
    if (src->n_hashed) memcpy(dst->hash, src->hash, (size_t)src->n_hashed * sizeof *dst->hash);
    dst->n_hashed = src->n_hashed;
    dst->scope = src->scope;
    return GM_OK;
}

/* First sliding block a query at pos reads (its window starts at pos - window + 1). */
static int window_first_block(const gm_kvpool *p, int pos) {
    const int first = pos - p->lay.window + 1;
    return first > 0 ? first / GM_KV_BLOCK : 0;
}

void gm_kv_table_trim_window(gm_kvpool *p, gm_kv_table *t, int next) {
    if (!p->lay.block_bytes[GM_KV_SLIDING]) return;
    /* one block of slack: a rollback of up to GM_KV_BLOCK positions keeps its window */
    const int keep = window_first_block(p, next) - 1;
    for (int i = 0; i < keep && i < t->cap; i++) drop(p, t, GM_KV_SLIDING, i);
}

bool gm_kv_table_window_held(const gm_kvpool *p, const gm_kv_table *t, int pos) {
    if (!p->lay.block_bytes[GM_KV_SLIDING] || pos == 0) return true;
    const int last = (pos - 1) / GM_KV_BLOCK;
    for (int i = window_first_block(p, pos); i <= last; i++)
        if (i >= t->cap || t->id[GM_KV_SLIDING][i] == NONE) return false;
    return true;
}

static gm_status no_room(const gm_kvpool *p, gm_error *err) {
    gm_kv_stats s;
    gm_kvpool_stats(p, &s);
    return gm_fail(err, GM_ERR_NOMEM,
                   "KV cache full: the live sequences hold %lld blocks (%.1f MiB) of a %.1f MiB budget and nothing is "
                   "left to evict; raise --kv-mem or run fewer or shorter sequences",
                   (long long)s.blocks_live, (double)s.bytes_used / 1048576.0, (double)s.bytes_budget / 1048576.0);
}

gm_status gm_kv_table_prepare(gm_kvpool *p, gm_kv_table *t, int p0, int p1, gm_error *err) {
    if (p1 <= p0) return GM_OK;
    const int b0 = p0 / GM_KV_BLOCK, b1 = (p1 - 1) / GM_KV_BLOCK;
    if (!gm_kv_table_reserve(t, b1 + 1)) return gm_fail(err, GM_ERR_NOMEM, "kv cache: out of memory for a block table");
    for (int g = 0; g < GM_KV_GROUPS; g++) {
        if (!p->lay.block_bytes[g]) continue;
        for (int i = b0; i <= b1; i++) {
            const int id = t->id[g][i];
            if (id != NONE && p->b[id].ref == 1 && p->b[id].entry == NONE) continue; /* ours alone */
            const int nid = block_alloc(p, g);
            if (nid == NONE && id != NONE && p->b[id].ref == 1) {
                detach(p, id); /* no room to keep the indexed content: it leaves the index, we write in place */
                continue;
            }
            if (nid == NONE) return no_room(p, err);
            if (id != NONE) { /* shared with a sequence or the index: copy on write */
                p->st.copy(p->st.ctx, p->b[nid].data, p->b[id].data, p->lay.block_bytes[g]);
                unref(p, id);
            }
            put(p, t, g, i, nid);
        }
    }
    return GM_OK;
}

/* ---------------------------------------------------------------- prefix index */

/* SipHash-2-4 (Aumasson and Bernstein) over whole 64-bit words. Why a keyed PRF: the ids are the client's,
 * and with a public hash a client could craft prompts whose blocks collide, in the chain (the index checks
 * a block's own ids but trusts the parent hash for the blocks before it, so a collision there would serve
 * another prompt's keys and values) or in the open-addressing map (long probe runs). Under a secret random
 * key, SipHash's outputs are unpredictable to anyone who never sees them (nothing exposes them), so a
 * collision takes about 2^32 blocks held at once even by luck, and cannot be aimed at. Cost: 70 rounds
 * per 64 tokens, nothing beside a forward pass. */
uint64_t gm_kv_chain_hash(const uint64_t key[2], uint64_t prev, const int32_t *ids, uint64_t salt) {
    gm_sip s = gm_sip_begin(key);
    gm_sip_word(&s, prev);
    for (int i = 0; i < GM_KV_BLOCK; i += 2)
        gm_sip_word(&s, (uint64_t)(uint32_t)ids[i] | (uint64_t)(uint32_t)ids[i + 1] << 32);
    if (salt) gm_sip_word(&s, salt); /* text blocks hash as before */
    return gm_sip_end(&s);
}

/* A one-word message: never equal to a block's 33 words (the closing length word differs). */
uint64_t gm_kv_chain_root(const uint64_t key[2], uint64_t scope) {
    gm_sip s = gm_sip_begin(key);
    gm_sip_word(&s, scope);
    return gm_sip_end(&s);
}

/* The parent hash of block i of t. */
static uint64_t parent_of(const gm_kvpool *p, const gm_kv_table *t, int i) {
    return i ? t->hash[i - 1] : gm_kv_chain_root(p->key, t->scope);
}

#define SALT(salt, i) ((salt) ? (salt)[i] : 0)

void gm_kv_table_hash(const gm_kvpool *p, gm_kv_table *t, const int32_t *ids, const uint64_t *salt, int n_blocks) {
    if (!gm_kv_table_reserve(t, n_blocks)) return;
    for (int i = t->n_hashed; i < n_blocks; i++)
        t->hash[i] = gm_kv_chain_hash(p->key, parent_of(p, t, i), ids + (size_t)i * GM_KV_BLOCK, SALT(salt, i));
    if (n_blocks > t->n_hashed) t->n_hashed = n_blocks;
}

/* Every group with storage has a block in x. */
static bool complete(const gm_kvpool *p, const entry *x) {
    for (int g = 0; g < GM_KV_GROUPS; g++)
        if (p->lay.block_bytes[g] && x->blk[g] == NONE) return false;
    return true;
}

/* The entry under parent (in scope) whose rows continue ids[0, n) the furthest, among text entries (salt 0:
 * a salted block's first rows may be an image's) holding a block of every group; *m the rows it shares.
 * NONE when none shares a row. The list holds the full blocks and tails that ever followed this parent. */
static int best_continuation(const gm_kvpool *p, uint64_t scope, uint64_t parent, const int32_t *ids, int n, int *m) {
    int best = NONE;
    *m = 0;
    for (int e = kids_head(p, parent); e != NONE; e = p->e[e].sib_next) {
        const entry *x = &p->e[e];
        if (x->scope != scope || x->parent != parent || x->salt || !complete(p, x)) continue;
        const int lim = x->n < n ? x->n : n;
        int k = 0;
        while (k < lim && x->ids[k] == ids[k]) k++;
        if (k > *m) *m = k, best = e;
    }
    return best;
}

/* y, a tail no sequence holds, whose rows x (a complete entry under the same parent) begins with: x serves
 * every prompt y serves, so y's blocks go back to the pool now instead of crowding the LRU list. */
static bool shadowed(const gm_kvpool *p, const entry *y, const entry *x) {
    if (y == x || y->n == GM_KV_BLOCK || y->n > x->n || y->scope != x->scope || x->salt || !complete(p, x) ||
        memcmp(y->ids, x->ids, (size_t)y->n * sizeof *y->ids) != 0)
        return false;
    for (int g = 0; g < GM_KV_GROUPS; g++)
        if (y->blk[g] != NONE && p->b[y->blk[g]].ref > 0) return false;
    return true;
}

static void drop_shadowed(gm_kvpool *p, int e) {
    for (int y = kids_head(p, p->e[e].parent); y != NONE;) {
        const int next = p->e[y].sib_next;
        if (shadowed(p, &p->e[y], &p->e[e]))
            for (int g = 0; g < GM_KV_GROUPS; g++) {
                const int id = p->e[y].blk[g];
                if (id == NONE) continue;
                lru_unlink(p, id);
                detach(p, id); /* the last one frees the entry y */
                to_free(p, id);
            }
        y = next;
    }
}

/* Enters t's blocks i (of every group, those not in the index already) into entry e. */
static void attach(gm_kvpool *p, gm_kv_table *t, int i, int e) {
    for (int g = 0; g < GM_KV_GROUPS; g++) {
        const int id = t->id[g][i];
        if (id == NONE || p->e[e].blk[g] != NONE || p->b[id].entry != NONE) continue;
        p->e[e].blk[g] = id;
        p->b[id].entry = e;
    }
}

void gm_kv_table_register(gm_kvpool *p, gm_kv_table *t, const int32_t *ids, const uint64_t *salt, int n_blocks) {
    const int first = t->n_hashed;
    gm_kv_table_hash(p, t, ids, salt, n_blocks);
    if (!p->indexed) return;
    for (int i = first; i < t->n_hashed; i++) {
        const uint64_t parent = parent_of(p, t, i);
        const int32_t *bid = ids + (size_t)i * GM_KV_BLOCK;
        int e = map_find(p, t->scope, t->hash[i], parent, bid, SALT(salt, i));
        if (e == NONE) e = entry_new(p, t->scope, t->hash[i], parent, bid, GM_KV_BLOCK, SALT(salt, i));
        if (e == NONE) return; /* no memory: just not indexed */
        attach(p, t, i, e);
        if (p->e[e].blk[0] == NONE && p->e[e].blk[1] == NONE) entry_free(p, e); /* nothing of ours entered */
        else drop_shadowed(p, e);
    }
}

void gm_kv_table_register_tail(gm_kvpool *p, gm_kv_table *t, const int32_t *ids, int n) {
    const int i = n / GM_KV_BLOCK, k = n % GM_KV_BLOCK;
    if (!p->indexed || k == 0 || t->n_hashed != i || i >= t->cap) return;
    for (int g = 0; g < GM_KV_GROUPS; g++) /* a block already entered (adopted, never written) is served */
        if (p->lay.block_bytes[g] && (t->id[g][i] == NONE || p->b[t->id[g][i]].entry != NONE)) return;
    const uint64_t parent = parent_of(p, t, i);
    const int32_t *bid = ids + (size_t)i * GM_KV_BLOCK;
    int m;
    if (best_continuation(p, t->scope, parent, bid, k, &m) != NONE && m == k) return; /* another serves it */
    const int e = entry_new(p, t->scope, 0, parent, bid, k, 0);
    if (e == NONE) return;
    attach(p, t, i, e);
    drop_shadowed(p, e);
}

/* The longest run of full blocks [first, j) of ids, j <= max_blocks, whose content is indexed and whose
 * window before j is held or indexed, adopted; returns j (first when none). */
static int adopt_full(gm_kvpool *p, gm_kv_table *t, const int32_t *ids, const uint64_t *salt, int max_blocks) {
    const int first = t->n_hashed;
    const bool has_full = p->lay.block_bytes[GM_KV_FULL] != 0, has_sl = p->lay.block_bytes[GM_KV_SLIDING] != 0;
    if (max_blocks <= first) return first;
    int *cand = malloc((size_t)(max_blocks - first) * sizeof *cand);
    if (!cand) return first;
    uint64_t prev = parent_of(p, t, first);
    int top = first;
    for (; top < max_blocks; top++) { /* the run of blocks whose content is indexed */
        const int32_t *bid = ids + (size_t)top * GM_KV_BLOCK;
        const uint64_t h = gm_kv_chain_hash(p->key, prev, bid, SALT(salt, top));
        const int e = map_find(p, t->scope, h, prev, bid, SALT(salt, top));
        if (e == NONE || (has_full && p->e[e].blk[GM_KV_FULL] == NONE)) break;
        cand[top - first] = e;
        t->hash[top] = h;
        prev = h;
    }
    int j = top;
    for (; has_sl && j > first; j--) { /* the longest prefix whose window before it is held or indexed */
        bool ok = true;
        for (int i = window_first_block(p, j * GM_KV_BLOCK); ok && i < j; i++)
            ok = i < first ? t->id[GM_KV_SLIDING][i] != NONE : p->e[cand[i - first]].blk[GM_KV_SLIDING] != NONE;
        if (ok) break;
    }
    const int lo = has_sl ? window_first_block(p, j * GM_KV_BLOCK) : 0;
    for (int i = first; i < j; i++) {
        const entry *x = &p->e[cand[i - first]];
        for (int g = 0; g < GM_KV_GROUPS; g++) {
            if (!p->lay.block_bytes[g] || (g == GM_KV_SLIDING && i < lo)) continue;
            drop(p, t, g, i);
            ref(p, x->blk[g]);
            put(p, t, g, i, x->blk[g]);
        }
    }
    free(cand);
    t->n_hashed = j;
    return j;
}

/* Block j's first rows (at most `rows`, fewer than a block) from the entry under block j - 1 that continues
 * ids[64 j ...] the furthest, when the window before them is held; returns the rows adopted. The block stays
 * the entry's: the first write copies it (gm_kv_table_prepare). */
static int adopt_tail(gm_kvpool *p, gm_kv_table *t, const int32_t *ids, int j, int rows) {
    if (rows <= 0) return 0;
    if (rows > GM_KV_BLOCK - 1) rows = GM_KV_BLOCK - 1; /* 64 matching rows would have been a full block */
    int m;
    const int e = best_continuation(p, t->scope, parent_of(p, t, j), ids + (size_t)j * GM_KV_BLOCK, rows, &m);
    if (e == NONE) return 0;
    if (p->lay.block_bytes[GM_KV_SLIDING]) /* the window of the next query, at 64 j + m */
        for (int i = window_first_block(p, j * GM_KV_BLOCK + m); i < j; i++)
            if (t->id[GM_KV_SLIDING][i] == NONE) return 0;
    for (int g = 0; g < GM_KV_GROUPS; g++) {
        if (!p->lay.block_bytes[g]) continue;
        drop(p, t, g, j);
        ref(p, p->e[e].blk[g]);
        put(p, t, g, j, p->e[e].blk[g]);
    }
    return m;
}

int gm_kv_table_adopt(gm_kvpool *p, gm_kv_table *t, const int32_t *ids, const uint64_t *salt, int n) {
    const int first = t->n_hashed;
    if (!p->indexed || n <= first * GM_KV_BLOCK || !gm_kv_table_reserve(t, n / GM_KV_BLOCK + 1)) return 0;
    const int j = adopt_full(p, t, ids, salt, n / GM_KV_BLOCK);
    const int got = (j - first) * GM_KV_BLOCK + adopt_tail(p, t, ids, j, n - j * GM_KV_BLOCK);
    p->reused += got;
    return got;
}
