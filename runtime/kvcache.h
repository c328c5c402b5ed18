/* runtime/kvcache.h — the paged KV cache: fixed-size blocks of GM_KV_BLOCK positions from one pool
 * with a byte budget, refcounted, per-sequence block tables, and a prefix index from token content to
 * blocks so sequences that start alike share them.
 *
 * Layer groups. Full-attention layers and sliding-window layers keep their keys/values in blocks of
 * different groups (a block of a group holds, for each of its layers, GM_KV_BLOCK rows of K then
 * GM_KV_BLOCK rows of V). A sequence holds every full-attention block of its history but only the
 * sliding blocks its window still needs (plus one block of slack for rollback); the rest go back to
 * the pool. A layer that reads another layer's KV (KV sharing) has no storage of its own.
 *
 * Prefix index. Block i of a history is keyed by a chain hash of the token ids of blocks 0..i (keyed with a
 * per-pool secret, so clients cannot aim collisions) rooted in the table's scope, and its entry verifies the
 * block's ids, the parent hash and the scope (tenants never share blocks, whatever the hashes). An entry
 * remembers the block of each group computed for that content; a sequence may adopt the first j blocks
 * when every full-attention block 0..j-1 is in the index and the sliding blocks covering the window before
 * position 64 j are too: reuse past the window is exact.
 * Tails. A sequence's last, partly computed block enters the index too when the sequence goes (its first n
 * rows, under the parent hash of the blocks before it). After its run of full blocks, a sequence adopts the
 * first m rows of block j from the entry under block j - 1 — a tail, or a full block — whose ids share the
 * longest prefix with its own, and copies the block at its first write: a repeated prompt computes only
 * what it must.
 * Blocks held by no sequence but present in the index are evictable, least recently used first.
 *
 * Storage is the backend's (kv_alloc / kv_free / kv_copy): the pool only hands out pointers. */
#ifndef GM_RUNTIME_KVCACHE_H
#define GM_RUNTIME_KVCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemma.h"

enum { GM_KV_GROUPS = 2, GM_KV_FULL = 0, GM_KV_SLIDING = 1 };

/* Where each layer's keys and values live. */
typedef struct gm_kv_layout {
    int n_layers;
    gm_kv_dtype dtype;
    size_t elem;                   /* bytes per stored element */
    int *group;                    /* per layer: GM_KV_FULL / GM_KV_SLIDING, -1 when it reads another's */
    int *kv_dim;                   /* per layer: n_kv_heads * head_dim of its KV source */
    size_t *k_off, *v_off;         /* per layer: byte offsets of its K and V rows inside a block (of its source) */
    int *source;                   /* per layer: the layer whose storage it reads */
    size_t block_bytes[GM_KV_GROUPS]; /* 0 for a group without layers */
    int window;                    /* the largest window of the sliding group (0 if none) */
} gm_kv_layout;

/* Storage callbacks (the backend's). */
typedef struct gm_kv_storage {
    void *ctx;
    void *(*alloc)(void *ctx, size_t bytes);
    void (*free)(void *ctx, void *p, size_t bytes);
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
} gm_kv_storage;

typedef struct gm_kvpool gm_kvpool;

/* A sequence's blocks: for each group, block index -> block id (-1: not held) and data pointer. */
typedef struct gm_kv_table {
    int cap;                        /* block slots allocated per group */
    int32_t *id[GM_KV_GROUPS];
    void **ptr[GM_KV_GROUPS];
    uint64_t *hash;                 /* chain hash of full blocks 0..i (valid for i < n_hashed) */
    int n_hashed;
    uint64_t scope;                 /* prefix-index scope: blocks are entered and adopted under it only */
} gm_kv_table;

gm_status gm_kv_layout_init(gm_kv_layout *lay, const gm_model *m, gm_kv_dtype dtype, gm_error *err);
void gm_kv_layout_free(gm_kv_layout *lay);
/* Bytes of keys and values of one position over every layer with storage (no window, no sharing). */
size_t gm_kv_layout_bytes_per_token(const gm_kv_layout *lay);

/* The pool takes a copy of the layout. indexed: keep a prefix index. key: the secret of the index's block hash
 * (gm_kv_chain_hash); random per engine (core/random.h). */
gm_status gm_kvpool_new(const gm_kv_layout *lay, gm_kv_storage st, size_t budget, bool indexed, const uint64_t key[2],
                        gm_kvpool **out, gm_error *err);
void gm_kvpool_free(gm_kvpool *p);
/* Allocates storage for n blocks of each group up front (kept free for later use), within the budget. */
gm_status gm_kvpool_reserve(gm_kvpool *p, const int n[GM_KV_GROUPS], gm_error *err);
void gm_kvpool_stats(const gm_kvpool *p, gm_kv_stats *out);

void gm_kv_table_init(gm_kv_table *t);
/* Room for n blocks per group (false: out of memory). */
bool gm_kv_table_reserve(gm_kv_table *t, int n);
/* Drops every block (refcounts) and frees the table's arrays. */
void gm_kv_table_free(gm_kvpool *p, gm_kv_table *t);
/* dst = src sharing every block (refcount + 1) and its scope. dst must be empty. */
gm_status gm_kv_table_fork(gm_kvpool *p, gm_kv_table *dst, const gm_kv_table *src, gm_error *err);
/* Drops blocks [from, end) of every group (their positions are no longer needed). */
void gm_kv_table_drop_from(gm_kvpool *p, gm_kv_table *t, int from_block);
/* Drops sliding blocks entirely before the window of a query at position next (keeping one block of
 * slack for rollback). */
void gm_kv_table_trim_window(gm_kvpool *p, gm_kv_table *t, int next);
/* True when the sliding blocks a query at position pos needs are all held. */
bool gm_kv_table_window_held(const gm_kvpool *p, const gm_kv_table *t, int pos);
/* Makes positions [p0, p1) writable: blocks allocated where missing, copied where shared with another
 * sequence or the index (an indexed block only this table holds is taken out of the index instead, only when
 * no storage is left for the copy). GM_ERR_NOMEM with a message when the budget cannot hold them. */
gm_status gm_kv_table_prepare(gm_kvpool *p, gm_kv_table *t, int p0, int p1, gm_error *err);

/* Chain hash of block i's token ids and salt given the hash of block i-1 (for i = 0: gm_kv_chain_root of the
 * table's scope), keyed (SipHash-2-4).
 *
 * Salts. A block's content is its ids plus one 64-bit salt: 0 for text; for a block holding rows of a
 * caller's embeddings named by a content key (an image), a word derived from those keys and the rows'
 * offsets, so two images behind the same placeholder ids never share blocks. Entries verify the salt as
 * they verify the ids. salt arrays below are per block (NULL: every salt 0). */
uint64_t gm_kv_chain_hash(const uint64_t key[2], uint64_t prev, const int32_t *ids, uint64_t salt);
uint64_t gm_kv_chain_root(const uint64_t key[2], uint64_t scope);
/* Enters full blocks [t->n_hashed, n_blocks) of tokens ids into the index (their hashes are computed
 * and kept in t). Blocks already in the index under another block id stay private. */
void gm_kv_table_register(gm_kvpool *p, gm_kv_table *t, const int32_t *ids, const uint64_t *salt, int n_blocks);
/* Computes the chain hashes of full blocks [t->n_hashed, n_blocks) without entering them. */
void gm_kv_table_hash(const gm_kvpool *p, gm_kv_table *t, const int32_t *ids, const uint64_t *salt, int n_blocks);
/* Enters the computed rows [64 i, n) of t's last block (i = n / GM_KV_BLOCK, n not a multiple of it) as a tail
 * entry, when blocks 0..i-1 are hashed (t->n_hashed == i) and the index holds no entry serving those rows
 * already; the caller calls it before letting go of t. The rows must be text: the caller never enters a block
 * holding embedding rows or rows computed under a bias (a tail has no salt). */
void gm_kv_table_register_tail(gm_kvpool *p, gm_kv_table *t, const int32_t *ids, int n);
/* Adopts from the index what it holds of positions [64 first, n) of ids (first = t->n_hashed, which must equal
 * the sequence's computed positions / GM_KV_BLOCK): the longest run of full blocks [first, j) whose content
 * matches and whose continuation's storage is present, then the first m < GM_KV_BLOCK rows of block j from
 * the entry that continues ids the furthest (a tail or a full block, text only: the rows [64 j, n) must be
 * text). salt: per block, for blocks [first, n / GM_KV_BLOCK). Returns the positions adopted (t->n_hashed
 * becomes j). To have the last position's logits, pass n below the history's length. */
int gm_kv_table_adopt(gm_kvpool *p, gm_kv_table *t, const int32_t *ids, const uint64_t *salt, int n);

/* Base pointer of layer il's K (or V) rows in the block holding position pos, and the row inside it. */
static inline char *gm_kv_row_k(const gm_kv_layout *lay, const gm_kv_table *t, int il, int pos) {
    const int src = lay->source[il];
    return (char *)t->ptr[lay->group[src]][pos / GM_KV_BLOCK] + lay->k_off[src] +
           (size_t)(pos % GM_KV_BLOCK) * (size_t)lay->kv_dim[src] * lay->elem;
}
static inline char *gm_kv_row_v(const gm_kv_layout *lay, const gm_kv_table *t, int il, int pos) {
    const int src = lay->source[il];
    return (char *)t->ptr[lay->group[src]][pos / GM_KV_BLOCK] + lay->v_off[src] +
           (size_t)(pos % GM_KV_BLOCK) * (size_t)lay->kv_dim[src] * lay->elem;
}

#endif
