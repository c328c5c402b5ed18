/* tests/test_kvcache.c — the contract of the KV block pool (runtime/kvcache.h) against fake storage.
 *
 * The pool never touches memory itself: it asks its storage callbacks to allocate, free and copy blocks.
 * Here those callbacks count every call, check that each free and copy names a live allocation of the
 * right size, record the peak of live bytes, and can be told to fail one allocation. So the tests see
 * what a backend would see: refcounts on fork and free, copy on write exactly when a shared block is
 * written, the prefix index (same tokens and scope adopt, anything else does not), least-recently-used
 * eviction of blocks no sequence holds, the byte budget, window trimming, and no leak at the end.
 * No model: the layout is made by hand (one full-attention layer, one sliding layer of window W). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/kvcache.h"
#include "support/test.h"

/* ---------------------------------------------------------------- fake storage */

enum { MAX_LIVE = 4096 };

typedef struct fake {
    void *ptr[MAX_LIVE];
    size_t bytes[MAX_LIVE];
    int n_live;
    int n_alloc, n_free, n_copy;
    int fail_at;          /* the n_alloc value whose allocation fails (0: none) */
    int bad;              /* frees or copies of memory that is not a live allocation of that size */
    size_t live, peak;
} fake;

static int find_live(const fake *f, const void *p, size_t bytes) {
    for (int i = 0; i < f->n_live; i++)
        if (f->ptr[i] == p) return f->bytes[i] == bytes ? i : -1;
    return -1;
}

static void *fake_alloc(void *ctx, size_t bytes) {
    fake *f = ctx;
    if (f->n_alloc + 1 == f->fail_at || f->n_live == MAX_LIVE) {
        f->fail_at = 0;
        return NULL;
    }
    void *p = calloc(1, bytes);
    if (!p) return NULL;
    f->n_alloc++;
    f->ptr[f->n_live] = p;
    f->bytes[f->n_live++] = bytes;
    f->live += bytes;
    if (f->live > f->peak) f->peak = f->live;
    return p;
}

static void fake_free(void *ctx, void *p, size_t bytes) {
    fake *f = ctx;
    const int i = find_live(f, p, bytes);
    if (i < 0) {
        f->bad++;
        return;
    }
    f->ptr[i] = f->ptr[--f->n_live];
    f->bytes[i] = f->bytes[f->n_live];
    f->live -= bytes;
    f->n_free++;
    free(p);
}

static void fake_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    fake *f = ctx;
    if (dst == src || find_live(f, dst, bytes) < 0 || find_live(f, src, bytes) < 0) {
        f->bad++;
        return;
    }
    f->n_copy++;
    memcpy(dst, src, bytes);
}

/* ---------------------------------------------------------------- the layout and the pool */

/* Layer 0: full attention, kv_dim 2 (blocks of 2 x 64 x 2 x 4 = 1024 bytes). Layer 1: sliding, kv_dim 1
 * (512 bytes), window w (0: no sliding layer at all). Different sizes, so storage moves between groups. */
enum { FULL_BYTES = 1024, SL_BYTES = 512, B = GM_KV_BLOCK };

typedef struct rig {
    fake f;
    gm_kv_layout lay;
    int group[2], kv_dim[2], source[2];
    size_t k_off[2], v_off[2];
    gm_kvpool *p;
} rig;

static const uint64_t KEY[2] = {0x0123456789abcdefull, 0xfedcba9876543210ull};

/* The rig must not move once the pool holds a pointer to its fake: callers keep it in place. */
static void rig_open(rig *r, int window, size_t budget, bool indexed) {
    memset(r, 0, sizeof *r);
    r->lay = (gm_kv_layout){.n_layers = window ? 2 : 1, .dtype = GM_KV_DTYPE_F32, .elem = 4, .group = r->group,
                            .kv_dim = r->kv_dim, .k_off = r->k_off, .v_off = r->v_off, .source = r->source,
                            .window = window};
    r->group[0] = GM_KV_FULL, r->kv_dim[0] = 2, r->source[0] = 0;
    r->k_off[0] = 0, r->v_off[0] = FULL_BYTES / 2;
    r->lay.block_bytes[GM_KV_FULL] = FULL_BYTES;
    if (window) {
        r->group[1] = GM_KV_SLIDING, r->kv_dim[1] = 1, r->source[1] = 1;
        r->k_off[1] = 0, r->v_off[1] = SL_BYTES / 2;
        r->lay.block_bytes[GM_KV_SLIDING] = SL_BYTES;
    }
    const gm_kv_storage st = {&r->f, fake_alloc, fake_free, fake_copy};
    gm_error err = {0};
    CHECK_OK(gm_kvpool_new(&r->lay, st, budget, indexed, KEY, &r->p, &err), &err);
}

/* Frees the pool; every allocation must have been given back, each exactly once. */
static void rig_close(rig *r) {
    gm_kvpool_free(r->p);
    CHECK_EQ_INT(r->f.n_alloc, r->f.n_free);
    CHECK_EQ_INT(r->f.n_live, 0);
    CHECK_EQ_INT(r->f.live, 0);
    CHECK_EQ_INT(r->f.bad, 0);
}

static gm_kv_stats stats(const rig *r) {
    gm_kv_stats s;
    gm_kvpool_stats(r->p, &s);
    return s;
}

static int32_t id_at(const gm_kv_table *t, int g, int i) { return i < t->cap ? t->id[g][i] : -1; }

/* ---------------------------------------------------------------- a small engine: rows carry their prefix */

/* What a position's K row holds: a hash of the tokens up to it (kept running: sig(pos) from sig(pos - 1)).
 * A prefix-cache hit or a fork is right exactly when every row a sequence can read holds its own prefix's. */
static uint32_t sig_start(int layer) { return 2166136261u ^ (uint32_t)layer; }
static uint32_t sig_next(uint32_t h, int32_t id) { return (h ^ (uint32_t)id) * 16777619u; }

static uint32_t *row(const rig *r, const gm_kv_table *t, int layer, int pos) {
    return (uint32_t *)gm_kv_row_k(&r->lay, t, layer, pos);
}

/* Computes positions [from, to) of ids as the engine does: blocks made writable, rows written, new full
 * blocks entered into the index, the window trimmed. */
static gm_status compute(rig *r, gm_kv_table *t, const int32_t *ids, int from, int to) {
    gm_error err = {0};
    const gm_status st = gm_kv_table_prepare(r->p, t, from, to, &err);
    if (st) return st;
    for (int il = 0; il < r->lay.n_layers; il++) {
        uint32_t h = sig_start(il);
        for (int pos = 0; pos < to; pos++)
            if ((h = sig_next(h, ids[pos])), pos >= from) *row(r, t, il, pos) = h;
    }
    gm_kv_table_register(r->p, t, ids, NULL, to / B);
    gm_kv_table_trim_window(r->p, t, to);
    return GM_OK;
}

/* Every row a query at position n can read holds its prefix: all full-attention rows before n, and the
 * sliding rows of the window. */
static bool rows_ok(const rig *r, const gm_kv_table *t, const int32_t *ids, int n) {
    uint32_t h0 = sig_start(0), h1 = sig_start(1);
    for (int pos = 0; pos < n; pos++) {
        h0 = sig_next(h0, ids[pos]), h1 = sig_next(h1, ids[pos]);
        if (id_at(t, GM_KV_FULL, pos / B) < 0 || *row(r, t, 0, pos) != h0) return false;
        if (r->lay.n_layers == 2 && pos > n - r->lay.window &&
            (id_at(t, GM_KV_SLIDING, pos / B) < 0 || *row(r, t, 1, pos) != h1))
            return false;
    }
    return true;
}

static void make_ids(int32_t *ids, int n, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)(seed >> 20);
    }
}

/* ---------------------------------------------------------------- tests */

/* A fork shares every block (no allocation, no copy); freeing either side keeps the other's blocks;
 * storage is handed back only when the pool goes. */
TEST(fork_and_free_refcounts) {
    rig r;
    rig_open(&r, 64, 1 << 20, false);
    int32_t ids[3 * B];
    make_ids(ids, 3 * B, 1);
    gm_kv_table a, b;
    gm_kv_table_init(&a), gm_kv_table_init(&b);
    CHECK_EQ_INT(compute(&r, &a, ids, 0, 2 * B + 10), GM_OK);
    const int allocs = r.f.n_alloc;
    const gm_kv_stats s0 = stats(&r);
    gm_error err = {0};
    CHECK_OK(gm_kv_table_fork(r.p, &b, &a, &err), &err);
    CHECK_EQ_INT(r.f.n_alloc, allocs);
    CHECK_EQ_INT(r.f.n_copy, 0);
    CHECK_EQ_INT(stats(&r).blocks_live, s0.blocks_live);
    for (int g = 0; g < GM_KV_GROUPS; g++)
        for (int i = 0; i < 3; i++) {
            CHECK_EQ_INT(id_at(&b, g, i), id_at(&a, g, i));
            CHECK(b.ptr[g][i] == a.ptr[g][i]);
        }
    gm_kv_table_free(r.p, &a);
    CHECK_EQ_INT(stats(&r).blocks_live, s0.blocks_live); /* b holds them all */
    CHECK(rows_ok(&r, &b, ids, 2 * B + 10));
    gm_kv_table_free(r.p, &b);
    CHECK_EQ_INT(stats(&r).blocks_live, 0);
    CHECK_EQ_INT(r.f.n_free, 0); /* kept for reuse, not given back */
    /* a new sequence reuses that storage */
    gm_kv_table c;
    gm_kv_table_init(&c);
    CHECK_EQ_INT(compute(&r, &c, ids, 0, 2 * B + 10), GM_OK);
    CHECK_EQ_INT(r.f.n_alloc, allocs);
    gm_kv_table_free(r.p, &c);
    CHECK_EQ_INT(r.f.n_copy, 0);
    rig_close(&r);
}

/* Writing a block shared with a fork copies it, once, for the writer only; writing an unshared block or a
 * fresh one never copies; the other side keeps its rows. */
TEST(copy_on_write_exactly_when_shared) {
    rig r;
    rig_open(&r, 1000, 1 << 20, false);
    int32_t ids[4 * B], alt[4 * B];
    make_ids(ids, 4 * B, 2);
    memcpy(alt, ids, sizeof ids);
    alt[B + 5] ^= 1; /* the two histories part at position 69, inside block 1 */
    gm_kv_table a, b;
    gm_kv_table_init(&a), gm_kv_table_init(&b);
    CHECK_EQ_INT(compute(&r, &a, ids, 0, B + 40), GM_OK);
    gm_error err = {0};
    CHECK_OK(gm_kv_table_fork(r.p, &b, &a, &err), &err);
    /* b rewrites from 69: block 1 (shared, both groups) is copied; block 0 is untouched */
    CHECK_EQ_INT(compute(&r, &b, alt, B + 5, B + 50), GM_OK);
    CHECK_EQ_INT(r.f.n_copy, 2);
    CHECK(b.ptr[GM_KV_FULL][1] != a.ptr[GM_KV_FULL][1] && b.ptr[GM_KV_SLIDING][1] != a.ptr[GM_KV_SLIDING][1]);
    CHECK(b.ptr[GM_KV_FULL][0] == a.ptr[GM_KV_FULL][0]);
    CHECK(rows_ok(&r, &a, ids, B + 40));
    CHECK(rows_ok(&r, &b, alt, B + 50)); /* rows 64..68 came over with the copy */
    /* block 1 of each is now private: further writes copy nothing */
    CHECK_EQ_INT(compute(&r, &a, ids, B + 40, 2 * B + 3), GM_OK);
    CHECK_EQ_INT(compute(&r, &b, alt, B + 50, 3 * B), GM_OK);
    CHECK_EQ_INT(r.f.n_copy, 2);
    /* rewriting shared block 0 from either side copies it once; then the other side owns the original */
    CHECK_EQ_INT(compute(&r, &a, ids, 10, 20), GM_OK);
    CHECK_EQ_INT(r.f.n_copy, 4);
    CHECK_EQ_INT(compute(&r, &b, alt, 10, 20), GM_OK);
    CHECK_EQ_INT(r.f.n_copy, 4);
    CHECK(rows_ok(&r, &a, ids, 2 * B + 3));
    CHECK(rows_ok(&r, &b, alt, 3 * B));
    gm_kv_table_free(r.p, &a), gm_kv_table_free(r.p, &b);
    rig_close(&r);
}

/* Writing a block in the index copies it even when only its writer holds it: the index keeps the content for
 * later prompts. Only when no storage is left for the copy does the block leave the index and get written in
 * place, so nobody adopts content that changed. (A rollback into an entered block, then other tokens.) */
TEST(writing_an_indexed_block_copies_it) {
    for (int tight = 0; tight < 2; tight++) {
        rig r;
        rig_open(&r, 0, tight ? FULL_BYTES : 1 << 20, true);
        const int n = tight ? B : 2 * B;
        int32_t ids[2 * B], alt[2 * B];
        make_ids(ids, 2 * B, 3);
        memcpy(alt, ids, sizeof ids);
        alt[30] ^= 1;
        gm_kv_table a, b;
        gm_kv_table_init(&a), gm_kv_table_init(&b);
        CHECK_EQ_INT(compute(&r, &a, ids, 0, n), GM_OK);
        CHECK_EQ_INT(a.n_hashed, n / B);
        gm_kv_table_drop_from(r.p, &a, 1); /* back to position 30, as the engine's truncation does */
        a.n_hashed = 0;
        CHECK_EQ_INT(compute(&r, &a, alt, 30, 40), GM_OK);
        CHECK_EQ_INT(r.f.n_copy, tight ? 0 : 1);
        /* room: ids's blocks are still indexed, intact; none: block 0 of ids is no longer indexed */
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, ids, NULL, n), tight ? 0 : 2 * B);
        if (!tight) CHECK(rows_ok(&r, &b, ids, 2 * B));
        gm_kv_table_free(r.p, &b);
        gm_kv_table_init(&b);
        CHECK_EQ_INT(compute(&r, &a, alt, 40, B), GM_OK); /* now block 0 of alt is */
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, alt, NULL, B), B);
        CHECK(rows_ok(&r, &b, alt, B));
        CHECK_EQ_INT(r.f.n_copy, tight ? 0 : 1);
        gm_kv_table_free(r.p, &a), gm_kv_table_free(r.p, &b);
        rig_close(&r);
    }
}

/* A freed sequence's full blocks stay in the index; a new sequence with the same tokens and scope adopts
 * them (no allocation, same storage, right rows); other tokens, another earlier block, or another scope
 * adopt nothing past where they differ. */
TEST(prefix_index_adoption) {
    rig r;
    rig_open(&r, 0, 1 << 20, true);
    int32_t ids[4 * B];
    make_ids(ids, 4 * B, 4);
    gm_kv_table a;
    gm_kv_table_init(&a);
    a.scope = 7;
    CHECK_EQ_INT(compute(&r, &a, ids, 0, 3 * B + 20), GM_OK);
    void *orig[3] = {a.ptr[0][0], a.ptr[0][1], a.ptr[0][2]};
    const uint64_t a_hash0 = a.hash[0];
    gm_kv_table_free(r.p, &a);
    CHECK_EQ_INT(stats(&r).blocks_cached, 3); /* the three full blocks; the partial fourth is free */
    CHECK_EQ_INT(stats(&r).blocks_live, 0);
    const int allocs = r.f.n_alloc;

    gm_kv_table b;
    gm_kv_table_init(&b);
    b.scope = 7;
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, ids, NULL, 3 * B), 3 * B);
    CHECK_EQ_INT(b.n_hashed, 3);
    for (int i = 0; i < 3; i++) CHECK(b.ptr[0][i] == orig[i]);
    CHECK(rows_ok(&r, &b, ids, 3 * B));
    CHECK_EQ_INT(r.f.n_alloc, allocs);
    CHECK_EQ_INT(stats(&r).blocks_cached, 0);
    CHECK_EQ_INT(stats(&r).reused_positions, 3 * B);
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, ids, NULL, 3 * B), 0); /* nothing left past its history */
    gm_kv_table_free(r.p, &b);
    CHECK_EQ_INT(stats(&r).blocks_cached, 3);

    int32_t other[4 * B];
    const int cases[][3] = {
        /* {position changed, scope, positions adopted} */
        {2 * B + 9, 7, 2 * B + 9}, /* block 2 differs at its row 9: its first 9 rows are served */
        {B, 7, B},                 /* block 1 differs from its first row */
        {0, 7, 0},                 /* block 0 differs: blocks 1 and 2 match alone but their prefix does not */
        {-1, 8, 0},                /* same tokens, another scope */
        {-1, 7, 3 * B},            /* same again: still there */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        memcpy(other, ids, sizeof ids);
        if (cases[c][0] >= 0) other[cases[c][0]] += 1;
        gm_kv_table t;
        gm_kv_table_init(&t);
        t.scope = (uint64_t)cases[c][1];
        CHECK_MSG(gm_kv_table_adopt(r.p, &t, other, NULL, 3 * B) == cases[c][2], "case %zu", c);
        CHECK(rows_ok(&r, &t, other, cases[c][2]));
        gm_kv_table_free(r.p, &t);
    }
    /* the scope is compared, not only hashed in: a table of scope 8 that claims scope 7's chain (a hash
     * collision, forged here) still adopts nothing; under scope 7 the same claim adopts blocks 1 and 2 */
    for (uint64_t scope = 8; scope >= 7; scope--) {
        gm_kv_table t;
        gm_kv_table_init(&t);
        CHECK(gm_kv_table_reserve(&t, 4));
        t.scope = scope;
        t.hash[0] = a_hash0;
        t.n_hashed = 1;
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t, ids, NULL, 3 * B), scope == 7 ? 2 * B : 0);
        gm_kv_table_free(r.p, &t);
    }
    CHECK_EQ_INT(r.f.n_alloc, allocs);
    CHECK_EQ_INT(r.f.n_copy, 0);
    rig_close(&r);
}

/* The same content under two scopes is two entries; each scope adopts its own blocks. A second sequence
 * that computed the same blocks itself (no adoption) keeps them private: freed, they are free, not cached. */
TEST(scopes_and_duplicates) {
    rig r;
    rig_open(&r, 0, 1 << 20, true);
    int32_t ids[B];
    make_ids(ids, B, 5);
    gm_kv_table t[3];
    for (int i = 0; i < 3; i++) {
        gm_kv_table_init(&t[i]);
        t[i].scope = i == 1 ? 2 : 1;
        CHECK_EQ_INT(compute(&r, &t[i], ids, 0, B), GM_OK);
    }
    void *p1 = t[0].ptr[0][0], *p2 = t[1].ptr[0][0];
    for (int i = 0; i < 3; i++) gm_kv_table_free(r.p, &t[i]);
    CHECK_EQ_INT(stats(&r).blocks_cached, 2); /* t[2]'s block: a duplicate of t[0]'s, not entered */
    for (int i = 0; i < 2; i++) {
        gm_kv_table_init(&t[i]);
        t[i].scope = i == 1 ? 2 : 1;
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t[i], ids, NULL, B), B);
    }
    CHECK(t[0].ptr[0][0] == p1 && t[1].ptr[0][0] == p2);
    for (int i = 0; i < 2; i++) gm_kv_table_free(r.p, &t[i]);
    rig_close(&r);
}

/* Cached blocks go least recently used first (adoption refreshes them), only when neither free storage
 * nor budget is left, and a block a sequence holds is never evicted. */
TEST(eviction_is_lru_of_unheld_blocks) {
    rig r;
    rig_open(&r, 0, 4 * FULL_BYTES, true);
    int32_t A[2 * B], Bt[2 * B], C[2 * B];
    make_ids(A, 2 * B, 6), make_ids(Bt, 2 * B, 7), make_ids(C, 2 * B, 8);
    gm_kv_table t;
    gm_kv_table_init(&t);
    CHECK_EQ_INT(compute(&r, &t, A, 0, 2 * B), GM_OK);
    gm_kv_table_free(r.p, &t);
    CHECK_EQ_INT(compute(&r, &t, Bt, 0, 2 * B), GM_OK);
    gm_kv_table_free(r.p, &t);
    CHECK_EQ_INT(stats(&r).blocks_cached, 4);
    CHECK_EQ_INT(r.f.n_alloc, 4);
    /* A adopted and let go again: now more recent than B */
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t, A, NULL, 2 * B), 2 * B);
    gm_kv_table_free(r.p, &t);
    /* C needs two blocks: B's go, A's stay */
    CHECK_EQ_INT(compute(&r, &t, C, 0, 2 * B), GM_OK);
    CHECK_EQ_INT(stats(&r).evictions, 2);
    CHECK_EQ_INT(r.f.n_alloc, 4); /* evicted storage is reused, not reallocated */
    CHECK(r.f.peak <= 4 * FULL_BYTES);
    gm_kv_table_free(r.p, &t);
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t, Bt, NULL, 2 * B), 0);
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t, A, NULL, 2 * B), 2 * B);
    CHECK(rows_ok(&r, &t, A, 2 * B));
    /* t holds A (2 blocks); C is cached (2). Three more blocks: C's two go, then nothing is left */
    gm_kv_table u;
    gm_kv_table_init(&u);
    gm_error err = {0};
    CHECK_EQ_INT(gm_kv_table_prepare(r.p, &u, 0, 3 * B, &err), GM_ERR_NOMEM);
    CHECK(strstr(err.msg, "KV cache full") != NULL);
    CHECK_EQ_INT(stats(&r).evictions, 4);
    CHECK(rows_ok(&r, &t, A, 2 * B)); /* the held blocks survived */
    CHECK(r.f.peak <= 4 * FULL_BYTES);
    gm_kv_table_free(r.p, &u);
    gm_kv_table_free(r.p, &t);
    rig_close(&r);
}

/* The budget bounds the storage at every moment, storage of the other group is given back to make room,
 * a request beyond the budget fails with GM_ERR_NOMEM, and a failed storage allocation leaks nothing. */
TEST(budget_and_allocation_failures) {
    rig r;
    rig_open(&r, 64, 2 * FULL_BYTES, false);
    gm_error err = {0};
    CHECK_OK(gm_kvpool_reserve(r.p, (const int[GM_KV_GROUPS]){0, 4}, &err), &err); /* 4 x 512: all of it */
    CHECK_EQ_INT(r.f.n_alloc, 4);
    CHECK_EQ_INT(gm_kvpool_reserve(r.p, (const int[GM_KV_GROUPS]){1, 4}, &err), GM_ERR_NOMEM);
    int32_t ids[3 * B];
    make_ids(ids, 3 * B, 9);
    gm_kv_table t;
    gm_kv_table_init(&t);
    /* block 0: a full block needs two sliding blocks' storage back; the sliding block is a reserved one */
    CHECK_EQ_INT(compute(&r, &t, ids, 0, B), GM_OK);
    CHECK_EQ_INT(r.f.n_free, 2);
    CHECK_EQ_INT(r.f.n_alloc, 5);
    CHECK(r.f.peak <= 2 * FULL_BYTES);
    /* block 1 needs 1024 + 512 more: only 512 (one free sliding block) is there */
    CHECK_EQ_INT(compute(&r, &t, ids, B, 2 * B), GM_ERR_NOMEM);
    CHECK(r.f.peak <= 2 * FULL_BYTES);
    gm_kv_table_free(r.p, &t);
    CHECK_EQ_INT(stats(&r).blocks_live, 0);
    /* the storage fails once: the error is NOMEM, nothing is lost, the next try works */
    gm_kv_table_init(&t);
    r.f.fail_at = r.f.n_alloc + 1;
    CHECK_EQ_INT(gm_kv_table_prepare(r.p, &t, 0, 2 * B, &err), GM_ERR_NOMEM);
    gm_kv_table_drop_from(r.p, &t, 0);
    r.f.fail_at = r.f.n_alloc + 1;
    CHECK_EQ_INT(gm_kvpool_reserve(r.p, (const int[GM_KV_GROUPS]){2, 0}, &err), GM_ERR_NOMEM);
    CHECK_EQ_INT(compute(&r, &t, ids, 0, B), GM_OK);
    CHECK(rows_ok(&r, &t, ids, B));
    CHECK(r.f.peak <= 2 * FULL_BYTES);
    gm_kv_table_free(r.p, &t);
    rig_close(&r);
}

/* Sliding blocks wholly before the window (less one block of slack) go back to the pool; full blocks stay;
 * window_held says whether a rollback to a position still has its window. */
TEST(window_trimming) {
    rig r;
    rig_open(&r, 64, 1 << 20, false);
    int32_t ids[6 * B];
    make_ids(ids, 6 * B, 10);
    gm_kv_table t;
    gm_kv_table_init(&t);
    gm_error err = {0};
    CHECK_OK(gm_kv_table_prepare(r.p, &t, 0, 5 * B, &err), &err);
    CHECK_EQ_INT(stats(&r).blocks_live, 10);
    /* a query at 320 reads [257, 320): blocks 4 (and 5); block 3 is the slack; 0..2 go */
    gm_kv_table_trim_window(r.p, &t, 5 * B);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(id_at(&t, GM_KV_FULL, i) >= 0, 1);
        CHECK_EQ_INT(id_at(&t, GM_KV_SLIDING, i) >= 0, i >= 3);
    }
    CHECK_EQ_INT(stats(&r).blocks_live, 7);
    CHECK(gm_kv_table_window_held(r.p, &t, 5 * B));
    CHECK(gm_kv_table_window_held(r.p, &t, 4 * B - 1));  /* reads [192, 255): block 3 */
    CHECK(!gm_kv_table_window_held(r.p, &t, 4 * B - 2)); /* reads [191, 254): block 2 too, gone */
    /* the sliding blocks returned are reused before any new storage */
    const int allocs = r.f.n_alloc;
    gm_kv_table u;
    gm_kv_table_init(&u);
    CHECK_OK(gm_kv_table_prepare(r.p, &u, 0, 1, &err), &err);
    CHECK_EQ_INT(r.f.n_alloc, allocs + 1); /* its full block only */
    /* trimming again, or for an earlier position, drops nothing more */
    gm_kv_table_trim_window(r.p, &t, 5 * B);
    gm_kv_table_trim_window(r.p, &t, 100);
    CHECK_EQ_INT(stats(&r).blocks_live, 9);
    gm_kv_table_free(r.p, &t), gm_kv_table_free(r.p, &u);
    rig_close(&r);
}

/* Adoption with a sliding window: a continuation needs the sliding blocks covering the window before
 * the adopted end; those before it are not taken; a prefix whose window block was evicted is not adopted
 * (a longer one may be). */
TEST(adoption_needs_the_window) {
    rig r;
    rig_open(&r, 64, 5 * FULL_BYTES + 4 * SL_BYTES, true);
    int32_t ids[5 * B], other[B];
    make_ids(ids, 5 * B, 11), make_ids(other, B, 12);
    gm_kv_table a, b, c;
    gm_kv_table_init(&a), gm_kv_table_init(&b), gm_kv_table_init(&c);
    CHECK_EQ_INT(compute(&r, &a, ids, 0, 4 * B), GM_OK); /* sliding 0 and 1 trimmed, cached first */
    gm_kv_table_free(r.p, &a);
    CHECK_EQ_INT(stats(&r).blocks_cached, 8);
    /* another sequence's sliding block takes the least recently used: sliding block 0 */
    CHECK_EQ_INT(compute(&r, &c, other, 0, 1), GM_OK);
    CHECK_EQ_INT(stats(&r).evictions, 1);
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, ids, NULL, 4 * B), 4 * B);
    CHECK_EQ_INT(id_at(&b, GM_KV_SLIDING, 3) >= 0, 1);
    CHECK_EQ_INT(id_at(&b, GM_KV_SLIDING, 2), -1); /* wholly before the window of 256: not taken */
    CHECK(rows_ok(&r, &b, ids, 4 * B));
    CHECK(gm_kv_table_window_held(r.p, &b, 4 * B));
    gm_kv_table_free(r.p, &b);
    gm_kv_table_init(&b);
    /* position 64's window needs sliding block 0; so do the first rows of block 0 (as a partial match) */
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, ids, NULL, B), 0);
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, ids, NULL, 2 * B), 2 * B); /* position 128's needs block 1 only */
    CHECK(rows_ok(&r, &b, ids, 2 * B));
    gm_kv_table_free(r.p, &b), gm_kv_table_free(r.p, &c);
    rig_close(&r);
}

/* A sequence going away as the engine lets it go: its last block's computed rows enter the index as a tail. */
static void release(rig *r, gm_kv_table *t, const int32_t *ids, int n) {
    gm_kv_table_register_tail(r->p, t, ids, n);
    gm_kv_table_free(r->p, t);
}

/* A freed sequence's last, partly computed block serves a repeat of its history: the full blocks, then the
 * tail's rows up to where the new prompt stops or differs, sharing its storage (nothing allocated) until the
 * first write copies it (both groups) and leaves the entry intact for the next. A full block serves its first
 * rows the same way. */
TEST(tail_entries_serve_repeats) {
    rig r;
    rig_open(&r, 64, 1 << 20, true);
    int32_t ids[3 * B], other[3 * B];
    make_ids(ids, 3 * B, 20);
    gm_kv_table a, b, c;
    gm_kv_table_init(&a), gm_kv_table_init(&b), gm_kv_table_init(&c);
    CHECK_EQ_INT(compute(&r, &a, ids, 0, B + 40), GM_OK);
    void *tail[GM_KV_GROUPS] = {a.ptr[GM_KV_FULL][1], a.ptr[GM_KV_SLIDING][1]};
    release(&r, &a, ids, B + 40);
    CHECK_EQ_INT(stats(&r).blocks_cached, 4); /* block 0 and the tail, each of both groups */
    const int allocs = r.f.n_alloc;
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, ids, NULL, B + 39), B + 39); /* the repeat: all but its last token */
    CHECK(b.ptr[GM_KV_FULL][1] == tail[GM_KV_FULL] && b.ptr[GM_KV_SLIDING][1] == tail[GM_KV_SLIDING]);
    CHECK_EQ_INT(b.n_hashed, 1);
    CHECK(rows_ok(&r, &b, ids, B + 39));
    CHECK_EQ_INT(r.f.n_alloc, allocs);
    CHECK_EQ_INT(stats(&r).reused_positions, B + 39);
    CHECK_EQ_INT(compute(&r, &b, ids, B + 39, B + 60), GM_OK); /* the first write copies the tail */
    CHECK_EQ_INT(r.f.n_copy, 2);
    CHECK(rows_ok(&r, &b, ids, B + 60));
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &c, ids, NULL, 2 * B + 10), B + 40); /* an extension: the whole tail */
    CHECK(c.ptr[GM_KV_FULL][1] == tail[GM_KV_FULL] && rows_ok(&r, &c, ids, B + 40));
    gm_kv_table_free(r.p, &c), gm_kv_table_init(&c);
    memcpy(other, ids, sizeof ids);
    other[B + 20] += 1;
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &c, other, NULL, 2 * B), B + 20); /* differs inside the tail */
    CHECK(rows_ok(&r, &c, other, B + 20));
    gm_kv_table_free(r.p, &c), gm_kv_table_init(&c);
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &c, ids, NULL, B - 1), B - 1); /* 64 tokens: block 0 as a partial match */
    CHECK(rows_ok(&r, &c, ids, B - 1));
    gm_kv_table_free(r.p, &c), gm_kv_table_free(r.p, &b);
    rig_close(&r);
}

/* Tails are entered and found under their scope only, compared exactly: a table of scope 8 that claims scope
 * 7's chain (a forged hash) adopts nothing of scope 7's tail. */
TEST(tail_scopes) {
    rig r;
    rig_open(&r, 0, 1 << 20, true);
    int32_t ids[2 * B];
    make_ids(ids, 2 * B, 21);
    gm_kv_table a;
    gm_kv_table_init(&a);
    a.scope = 7;
    CHECK_EQ_INT(compute(&r, &a, ids, 0, 30), GM_OK);
    release(&r, &a, ids, 30);
    gm_kv_table_init(&a);
    a.scope = 7;
    CHECK_EQ_INT(compute(&r, &a, ids, 0, B + 30), GM_OK);
    const uint64_t h0 = a.hash[0];
    release(&r, &a, ids, B + 30);
    for (uint64_t scope = 8; scope >= 7; scope--) {
        gm_kv_table t;
        gm_kv_table_init(&t);
        t.scope = scope;
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t, ids, NULL, 29), scope == 7 ? 29 : 0);
        gm_kv_table_free(r.p, &t);
        gm_kv_table_init(&t);
        CHECK(gm_kv_table_reserve(&t, 2));
        t.scope = scope;
        t.hash[0] = h0;
        t.n_hashed = 1;
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t, ids, NULL, B + 29), scope == 7 ? 29 : 0);
        gm_kv_table_free(r.p, &t);
    }
    rig_close(&r);
}

/* A tail another entry already serves is not entered again; an entry that extends a cached tail (a longer
 * tail, or the full block) replaces it at once: its block goes back to the free list, not the LRU list. */
TEST(tail_dedup_and_shadowing) {
    rig r;
    rig_open(&r, 0, 1 << 20, true);
    int32_t ids[B];
    make_ids(ids, B, 22);
    gm_kv_table t;
    gm_kv_table_init(&t);
    CHECK_EQ_INT(compute(&r, &t, ids, 0, 40), GM_OK);
    release(&r, &t, ids, 40);
    CHECK_EQ_INT(stats(&r).blocks_cached, 1);
    const int ends[] = {40, 50, B}; /* the same tail again; a longer one; the whole block */
    for (int c = 0; c < 3; c++) {
        gm_kv_table_init(&t);
        const int from = gm_kv_table_adopt(r.p, &t, ids, NULL, ends[c] - 1);
        CHECK_EQ_INT(from, c == 0 ? 39 : ends[c - 1]);
        CHECK_EQ_INT(compute(&r, &t, ids, from, ends[c]), GM_OK);
        release(&r, &t, ids, ends[c]);
        CHECK_MSG(stats(&r).blocks_cached == 1, "case %d: %lld blocks cached", c, (long long)stats(&r).blocks_cached);
        CHECK_EQ_INT(stats(&r).evictions, 0);
    }
    gm_kv_table_init(&t);
    CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t, ids, NULL, B - 1), B - 1);
    CHECK(rows_ok(&r, &t, ids, B - 1));
    gm_kv_table_free(r.p, &t);
    rig_close(&r);
}

/* Tails held by no sequence are cached blocks like any other: evicted least recently used first when the
 * budget is short, and a later repeat then adopts nothing of the evicted one. */
TEST(tail_eviction) {
    rig r;
    rig_open(&r, 0, 3 * FULL_BYTES, true);
    int32_t ids[3][2 * B];
    for (int i = 0; i < 3; i++) make_ids(ids[i], 2 * B, 30 + (uint32_t)i);
    gm_kv_table t;
    for (int i = 0; i < 2; i++) {
        gm_kv_table_init(&t);
        CHECK_EQ_INT(compute(&r, &t, ids[i], 0, 40), GM_OK);
        release(&r, &t, ids[i], 40);
    }
    CHECK_EQ_INT(stats(&r).blocks_cached, 2);
    gm_kv_table_init(&t);
    CHECK_EQ_INT(compute(&r, &t, ids[2], 0, 2 * B), GM_OK); /* two blocks: one new, then the oldest tail goes */
    CHECK_EQ_INT(stats(&r).evictions, 1);
    CHECK(r.f.peak <= 3 * FULL_BYTES);
    gm_kv_table_free(r.p, &t);
    for (int i = 0; i < 2; i++) {
        gm_kv_table_init(&t);
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &t, ids[i], NULL, 39), i == 0 ? 0 : 39);
        if (i) CHECK(rows_ok(&r, &t, ids[i], 39));
        gm_kv_table_free(r.p, &t);
    }
    rig_close(&r);
}

/* Rolling back into an adopted tail, before or after its first write, and going another way leaves the
 * entry's rows as they were: a third sequence still adopts them, right. */
TEST(rollback_after_tail) {
    rig r;
    rig_open(&r, 64, 1 << 20, true);
    int32_t ids[2 * B], alt[2 * B];
    make_ids(ids, 2 * B, 23);
    memcpy(alt, ids, sizeof ids);
    alt[B + 10] += 1;
    gm_kv_table t;
    gm_kv_table_init(&t);
    CHECK_EQ_INT(compute(&r, &t, ids, 0, B + 40), GM_OK);
    release(&r, &t, ids, B + 40);
    for (int written = 0; written < 2; written++) {
        gm_kv_table b, c;
        gm_kv_table_init(&b), gm_kv_table_init(&c);
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &b, ids, NULL, B + 39), B + 39);
        if (written) CHECK_EQ_INT(compute(&r, &b, ids, B + 39, B + 50), GM_OK);
        gm_kv_table_drop_from(r.p, &b, 2); /* back to B + 10, as gm_seq_truncate does */
        b.n_hashed = 1;
        CHECK_EQ_INT(compute(&r, &b, alt, B + 10, B + 30), GM_OK);
        CHECK(rows_ok(&r, &b, alt, B + 30));
        CHECK_EQ_INT(gm_kv_table_adopt(r.p, &c, ids, NULL, B + 39), B + 39);
        CHECK(rows_ok(&r, &c, ids, B + 39));
        gm_kv_table_free(r.p, &b), gm_kv_table_free(r.p, &c);
    }
    rig_close(&r);
}

/* Random traffic over a few sequences whose histories share prefixes: compute, fork, roll back, free,
 * start anew adopting from the index. After every step each live sequence reads only its own prefix's
 * rows (no block shared wrongly, none evicted while held, every copy made), the budget holds, and at the
 * end every allocation is freed. */
TEST(random_traffic) {
    enum { NS = 4, LEN = 6 * B, STEPS = 3000 };
    for (int indexed = 0; indexed < 2; indexed++) {
        rig r;
        rig_open(&r, 70, 14 * (FULL_BYTES + SL_BYTES), indexed);
        int32_t ids[NS][LEN];
        int n[NS] = {0}; /* computed positions; -1: no sequence */
        gm_kv_table t[NS];
        for (int s = 0; s < NS; s++) gm_kv_table_init(&t[s]), n[s] = -1;
        uint32_t rng = 12345;
        int failures = 0, wrong = 0;
        for (int step = 0; step < STEPS; step++) {
            rng = rng * 1664525u + 1013904223u;
            const int s = (int)(rng >> 8) % NS, op = (int)(rng >> 16) % 8, o = (int)(rng >> 24) % NS;
            gm_error err = {0};
            if (n[s] < 0) { /* a new sequence: one of three prompts, adopting what the index has */
                make_ids(ids[s], LEN, 100 + (rng >> 4) % 3);
                for (int i = 2 * B + (int)(rng % 7); i < LEN; i++) ids[s][i] = (int32_t)((rng >> 3) + (uint32_t)i);
                n[s] = gm_kv_table_adopt(r.p, &t[s], ids[s], NULL, (int)((rng >> 12) % (5 * B)));
            } else if (op < 4 && n[s] < LEN) { /* compute some more */
                int to = n[s] + 1 + (int)((rng >> 4) % 90);
                if (to > LEN) to = LEN;
                if (compute(&r, &t[s], ids[s], n[s], to)) failures++; /* rows before n[s] are intact */
                else n[s] = to;
            } else if (op == 4 && o != s && n[o] < 0) { /* fork s into o */
                CHECK_OK(gm_kv_table_fork(r.p, &t[o], &t[s], &err), &err);
                memcpy(ids[o], ids[s], sizeof ids[s]);
                n[o] = n[s];
                if (n[o] < LEN) ids[o][n[o]] ^= 0x55; /* o goes another way from its next token */
            } else if (op == 5) { /* roll back */
                int keep = n[s] - (int)((rng >> 4) % 100);
                if (keep < 0) keep = 0;
                if (!gm_kv_table_window_held(r.p, &t[s], keep)) keep = 0;
                gm_kv_table_drop_from(r.p, &t[s], (keep + B - 1) / B);
                if (t[s].n_hashed > keep / B) t[s].n_hashed = keep / B;
                n[s] = keep;
            } else if (op >= 6) { /* done: its last block's rows enter the index as a tail */
                gm_kv_table_register_tail(r.p, &t[s], ids[s], n[s]);
                gm_kv_table_free(r.p, &t[s]);
                n[s] = -1;
            }
            for (int q = 0; q < NS; q++) wrong += n[q] >= 0 && !rows_ok(&r, &t[q], ids[q], n[q]);
        }
        CHECK_EQ_INT(wrong, 0);
        if (getenv("KV_TEST_VERBOSE"))
            fprintf(stderr, "  indexed %d: %d failed computes, %d allocs, %d copies, %lld reused, %lld evictions\n",
                    indexed, failures, r.f.n_alloc, r.f.n_copy, (long long)stats(&r).reused_positions,
                    (long long)stats(&r).evictions);
        CHECK(r.f.peak <= 14 * (FULL_BYTES + SL_BYTES));
        CHECK(failures < STEPS / 10); /* the budget is tight but not starving */
        const gm_kv_stats st = stats(&r);
        if (indexed) CHECK(st.reused_positions > 0 && st.evictions > 0);
        CHECK(r.f.n_copy > 0);
        for (int s = 0; s < NS; s++) gm_kv_table_free(r.p, &t[s]);
        rig_close(&r);
    }
}

int main(void) {
    RUN(fork_and_free_refcounts);
    RUN(copy_on_write_exactly_when_shared);
    RUN(writing_an_indexed_block_copies_it);
    RUN(prefix_index_adoption);
    RUN(scopes_and_duplicates);
    RUN(eviction_is_lru_of_unheld_blocks);
    RUN(budget_and_allocation_failures);
    RUN(window_trimming);
    RUN(adoption_needs_the_window);
    RUN(tail_entries_serve_repeats);
    RUN(tail_scopes);
    RUN(tail_dedup_and_shadowing);
    RUN(tail_eviction);
    RUN(rollback_after_tail);
    RUN(random_traffic);
    return test_summary();
}
