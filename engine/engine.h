/* engine/engine.h — internal: the engine and sequence structures shared by engine/engine.c and the
 * generator layered on top of them (generate/generator.c). The public API is in gemma.h. */
#ifndef GM_ENGINE_ENGINE_H
#define GM_ENGINE_ENGINE_H

#include <limits.h>

#include "gemma.h"
#include "gemma_grammar.h"
#include "engine/sampler.h"
#include "runtime/backend.h"
#include "runtime/forward.h"
#include "runtime/kvcache.h"
#include "model/model.h"

enum { GM_ENGINE_MAX_TAPS = 64 };

struct gm_engine {
    const gm_model *m;
    const gm_config *c;
    int n_ctx, n_batch;
    bool prefix_cache;
    gm_kv_layout lay;
    gm_kvpool *pool;
    gm_backend *be;        /* runs the ops */
    gm_backend_kind kind;  /* be's kind (AUTO resolved) */
    gm_backend_options bo; /* what be was made with (a drafter's backend is made alike: gm_mtp_new) */
    gm_isa isa;            /* the CPU kernels' level: the model's (checked against the options) */
    gm_forward *fwd;       /* the forward pass over them */
    int n_seqs;            /* live sequences */
    gm_fwd_row *rows;      /* n_batch rows of scratch for eval */
    gm_seq **row_seq;      /* the sequence of each row */
    int tap_layers[GM_ENGINE_MAX_TAPS]; /* gm_engine_set_taps */
    int n_taps;
    char backend_name[300]; /* gm_engine_backend_name */
};

/* Positions [pos, pos + n) of a history whose inputs are caller embeddings (gm_seq_append_embeds). */
typedef struct gm_seq_span {
    int pos, n;
    float *embeds;     /* n x d_model, owned */
    uint64_t key[2];   /* {0, 0}: anonymous */
    bool bidirectional, sliding_only;
} gm_seq_span;

struct gm_seq {
    gm_engine *e;
    gm_seq_span *spans;    /* by position, disjoint */
    int n_spans, cap_spans;
    uint64_t *salt;        /* per block: the prefix index's salts, refreshed before each use (NULL: no keyed span) */
    int32_t *tok;          /* n_ctx slots */
    int n_tok;
    int n_kv;              /* positions whose keys/values are in the blocks */
    gm_kv_table kv;
    int taint;             /* first position computed from embeddings or under a bias (INT_MAX: none) */
    int n_reused;
    float *logits;         /* n_vocab, allocated on first use */
    bool logits_valid;     /* logits are those after tok[n_tok - 1] */
    gm_sampler smp;
    gm_matcher *grammar;   /* borrowed: gm_seq_set_grammar */
    uint32_t *mask;        /* (n_vocab + 31) / 32 words for the grammar's mask, allocated with it */
    uint64_t seed;
    bool seeded;
};

/* What the generator needs beyond gm_engine_eval, for one sequence. */
typedef struct gm_eval_extras {
    bool no_adopt;              /* compute everything pending, even what the prefix index holds */
    const float *embeds;        /* inputs of positions [0, n) (n x d) instead of token embeddings */
    const float *bias;          /* as gm_fwd_batch, over positions [0, bias_n) */
    int bias_n;
    bool bias_is_mask;
    bool all_logits;            /* every computed position's logits ... */
    int logits_from;            /* ... from this position on ... */
    float *logits_out;          /* ... into this (position - logits_from) x n_vocab array, or ... */
    void (*on_logits)(void *user, int pos, const float *logits); /* ... to this callback */
    void *user;
    const int *aux_layers;      /* taps of the last computed position */
    int n_aux;
    float *aux_out;
    bool *aux_taken;            /* set when the taps were written */
    bool bidirectional;         /* encoder attention over the whole history (one pass from position 0) */
    float *hidden_out;          /* every position's final-normed hidden state (n x d) instead of logits */
} gm_eval_extras;

/* engine/spans.c: a sequence's embedding spans. */
const gm_seq_span *gm_seq_span_at(const gm_seq *s, int pos);
/* Rows to compute from position `from`, at most `want` (`first`: nothing else is in the call yet): fewer
 * when a bidirectional span would be cut (its uncomputed rows go in one call), more (up to n_batch) when
 * `first` and such a span starts the chunk; 0: wait for a call of its own. */
int gm_seq_chunk_rows(const gm_seq *s, int from, int want, bool first);
/* The row for position pos of s: token, embedding and attention span (logits left to the caller). */
gm_fwd_row gm_seq_row(const gm_seq *s, int pos);
/* Salts of blocks [0, n_blocks) for the prefix index (NULL when no keyed span: all 0); only those from
 * kv.n_hashed on are fresh, the only ones gm_kv_table_register / _adopt read. */
const uint64_t *gm_seq_salts(gm_seq *s, int n_blocks);
/* The first block the index must not serve (an anonymous span's), or INT_MAX. */
int gm_seq_index_limit(const gm_seq *s);
/* The first position at or after `from` that holds embeddings (INT_MAX: none). */
int gm_seq_span_from(const gm_seq *s, int from);
/* True when pos lies in a span with a content key (its rows are indexed like tokens). */
bool gm_seq_pos_keyed(const gm_seq *s, int pos);
void gm_seq_spans_truncate(gm_seq *s, int n);
gm_status gm_seq_spans_copy(gm_seq *dst, const gm_seq *src, gm_error *err);
void gm_seq_spans_free(gm_seq *s);

gm_status gm_engine_eval_ex(gm_engine *e, gm_seq *s, const gm_eval_extras *x, gm_error *err);
/* gm_engine_new without its refusal of embedding models: the embedder (generate/embed.c) runs them. */
gm_status gm_engine_create(const gm_model *m, const gm_engine_options *opt, gm_engine **out, gm_error *err);
/* s's sampler, seeded from opt->seed on first use or when the seed changed (as gm_seq_sample does). */
gm_sampler *gm_seq_sampler(gm_seq *s, const gm_sampling *opt);
/* One token from logits with smp, constrained by the grammar m (NULL: none), which advances by it: what
 * gm_seq_sample picks (greedy: the best token when m accepts it, else the best of the mask; sampled: a draw
 * from the masked distribution). Speculative decoding picks the target's tokens with it, so a grammar's
 * output with speculation is the one without. mask: (n_vocab + 31) / 32 words of scratch. */
gm_status gm_pick_token(gm_sampler *smp, gm_matcher *m, uint32_t *mask, const gm_sampling *opt, const float *logits,
                        const int32_t *hist, int n_hist, int32_t *tok, gm_error *err);
/* m's mask of the next token into mask ((n_vocab + 31) / 32 words; tokens past m's vocabulary: 0). */
gm_status gm_grammar_mask(gm_matcher *m, uint32_t *mask, int n_vocab, gm_error *err);
/* Drops every block of s: the next evaluation computes (or adopts) from position 0. */
void gm_seq_forget(gm_seq *s);

/* A backend beside e's for a drafter's model m (its weights; lay: the cache layout its attention reads): of e's kind,
 * on e's threads (its pool when the caller gave one), max_rows rows per call. Host backends only (CPU, reference):
 * GM_ERR_UNSUPPORTED naming `who` otherwise. */
gm_status gm_engine_side_backend(const gm_engine *e, const gm_model *m, const gm_kv_layout *lay, int max_rows,
                                 const char *who, gm_backend **out, gm_error *err);
/* The assistant a gm_mtp drafts with, and the engine whose sequences it drafts for (engine/mtp.c). */
const gm_model *gm_mtp_assistant(const gm_mtp *d);
const gm_engine *gm_mtp_target(const gm_mtp *d);

#endif
