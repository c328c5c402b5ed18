/* engine/spans.c — caller embeddings inside a sequence's history (gm_seq_append_embeds): images through
 * a vision encoder, soft prompts.
 *
 * A span is n positions whose layer-0 inputs are the caller's rows; their tokens are placeholders. A
 * bidirectional span's rows attend to each other both ways (an image's rows, as Gemma 3 and 4 are trained),
 * so the rows not yet computed go in one forward call. A span with a content key is part of the prefix
 * index's content like a token: the blocks it touches carry a salt derived from the key and the rows'
 * offsets (gm_kv_chain_hash), so the same image behind the same prefix is computed once and two images
 * never share a block. An anonymous span cannot be named: the index stops before it. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "engine/engine.h"

const gm_seq_span *gm_seq_span_at(const gm_seq *s, int pos) {
    for (int i = 0; i < s->n_spans; i++) {
        const gm_seq_span *sp = &s->spans[i];
        if (pos < sp->pos) return NULL;
        if (pos < sp->pos + sp->n) return sp;
    }
    return NULL;
}

int gm_seq_span_from(const gm_seq *s, int from) {
    for (int i = 0; i < s->n_spans; i++) /* by position */
        if (s->spans[i].pos + s->spans[i].n > from) return s->spans[i].pos > from ? s->spans[i].pos : from;
    return INT_MAX;
}

bool gm_seq_pos_keyed(const gm_seq *s, int pos) {
    const gm_seq_span *sp = gm_seq_span_at(s, pos);
    return sp && (sp->key[0] | sp->key[1]);
}

int gm_seq_chunk_rows(const gm_seq *s, int from, int want, bool first) {
    const int pending = s->n_tok - from;
    int take = pending < want ? pending : want;
    if (take <= 0) return 0;
    for (int i = 0; i < s->n_spans; i++) {
        const gm_seq_span *sp = &s->spans[i];
        const int end = sp->pos + sp->n;
        if (!sp->bidirectional || end <= from || sp->pos >= from + take || end <= from + take) continue;
        /* the chunk would end inside this span */
        if (sp->pos > from) return sp->pos - from;            /* stop before it */
        if (!first || end - from > s->e->n_batch) return 0;   /* its own call (too big: refused at append) */
        return end - from;
    }
    return take;
}

gm_fwd_row gm_seq_row(const gm_seq *s, int pos) {
    gm_fwd_row r = {.pos = pos, .token = s->tok[pos]};
    const gm_seq_span *sp = gm_seq_span_at(s, pos);
    if (sp) {
        r.embed = sp->embeds + (size_t)(pos - sp->pos) * (size_t)s->e->c->d_model;
        if (sp->bidirectional) r.attend_end = sp->pos + sp->n, r.attend_sliding_only = sp->sliding_only;
    }
    return r;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Block b's salt: each keyed span it meets, by its key, its first row here, where that row sits in the
 * block and how many rows it has here. Never 0 when a keyed span is met (0 is text). */
static uint64_t block_salt(const gm_seq *s, int b) {
    const int p0 = b * GM_KV_BLOCK, p1 = p0 + GM_KV_BLOCK;
    uint64_t h = 0;
    bool any = false;
    for (int i = 0; i < s->n_spans; i++) {
        const gm_seq_span *sp = &s->spans[i];
        if (!(sp->key[0] | sp->key[1]) || sp->pos >= p1 || sp->pos + sp->n <= p0) continue;
        const int a = sp->pos > p0 ? sp->pos : p0, z = sp->pos + sp->n < p1 ? sp->pos + sp->n : p1;
        h = mix64(h ^ sp->key[0]);
        h = mix64(h ^ sp->key[1]);
        h = mix64(h ^ ((uint64_t)(uint32_t)(a - sp->pos) << 32 | (uint64_t)(uint32_t)(a - p0) << 8 | (uint64_t)(z - a)));
        h = mix64(h ^ (uint64_t)(sp->bidirectional + 2 * sp->sliding_only)); /* the attention made the rows' KV */
        any = true;
    }
    return any && h == 0 ? 1 : h;
}

const uint64_t *gm_seq_salts(gm_seq *s, int n_blocks) {
    bool keyed = false;
    for (int i = 0; i < s->n_spans && !keyed; i++) keyed = (s->spans[i].key[0] | s->spans[i].key[1]) != 0;
    if (!keyed || !s->salt) return NULL; /* s->salt is allocated with the first keyed span */
    /* the index reads the salts of blocks past those already hashed only */
    for (int b = s->kv.n_hashed; b < n_blocks; b++) s->salt[b] = block_salt(s, b);
    return s->salt;
}

int gm_seq_index_limit(const gm_seq *s) {
    for (int i = 0; i < s->n_spans; i++)
        if (!(s->spans[i].key[0] | s->spans[i].key[1])) return s->spans[i].pos / GM_KV_BLOCK;
    return INT_MAX;
}

void gm_seq_spans_truncate(gm_seq *s, int n) {
    while (s->n_spans > 0 && s->spans[s->n_spans - 1].pos >= n) free(s->spans[--s->n_spans].embeds);
    if (s->n_spans > 0) {
        gm_seq_span *sp = &s->spans[s->n_spans - 1];
        if (sp->pos + sp->n > n) sp->n = n - sp->pos; /* its kept rows stay as computed with the whole span */
    }
}

void gm_seq_spans_free(gm_seq *s) {
    gm_seq_spans_truncate(s, 0);
    free(s->spans);
    free(s->salt);
    s->spans = NULL, s->salt = NULL;
    s->cap_spans = 0;
}

static gm_status push_span(gm_seq *s, const gm_seq_span *sp, const float *embeds, gm_error *err) {
    const size_t bytes = (size_t)sp->n * (size_t)s->e->c->d_model * sizeof(float);
    if (s->n_spans == s->cap_spans) {
        const int cap = s->cap_spans ? 2 * s->cap_spans : 4;
        gm_seq_span *v = realloc(s->spans, (size_t)cap * sizeof *v);
        if (!v) return gm_fail(err, GM_ERR_NOMEM, "sequence: out of memory for embeddings");
        s->spans = v, s->cap_spans = cap;
    }
    if ((sp->key[0] | sp->key[1]) && !s->salt &&
        !(s->salt = calloc((size_t)s->e->n_ctx / GM_KV_BLOCK + 1, sizeof *s->salt)))
        return gm_fail(err, GM_ERR_NOMEM, "sequence: out of memory for embeddings");
    float *copy = malloc(bytes ? bytes : 1);
    if (!copy) return gm_fail(err, GM_ERR_NOMEM, "sequence: out of memory for %d embedding rows", sp->n);
    memcpy(copy, embeds, bytes);
    s->spans[s->n_spans] = *sp;
    s->spans[s->n_spans++].embeds = copy;
    return GM_OK;
}

gm_status gm_seq_spans_copy(gm_seq *dst, const gm_seq *src, gm_error *err) {
    for (int i = 0; i < src->n_spans; i++) {
        gm_status st = push_span(dst, &src->spans[i], src->spans[i].embeds, err);
        if (st) return st;
    }
    return GM_OK;
}

gm_status gm_seq_append_embeds(gm_seq *s, const gm_embed_span *span, gm_error *err) {
    if (!s || !span) return gm_fail(err, GM_ERR_ARG, "gm_seq_append_embeds: NULL %s", s ? "span" : "sequence");
    const gm_engine *e = s->e;
    if (span->n < 1 || !span->embeds)
        return gm_fail(err, GM_ERR_ARG, "gm_seq_append_embeds: %d rows at %p", span->n, (const void *)span->embeds);
    if (span->placeholder < 0 || span->placeholder >= e->c->n_vocab)
        return gm_fail(err, GM_ERR_ARG, "gm_seq_append_embeds: placeholder token %d is outside the vocabulary [0, %d)",
                       (int)span->placeholder, e->c->n_vocab);
    if (span->bidirectional && span->n > e->n_batch)
        return gm_fail(err, GM_ERR_ARG, "gm_seq_append_embeds: %d bidirectional rows must fit one forward call, which "
                       "takes %d (raise the engine's n_batch)", span->n, e->n_batch);
    if (span->n > e->n_ctx - s->n_tok)
        return gm_fail(err, GM_ERR_CONTEXT, "gm_seq_append_embeds: %d + %d positions exceed the context size %d",
                       s->n_tok, span->n, e->n_ctx);
    const gm_seq_span sp = {.pos = s->n_tok, .n = span->n, .key = {span->key[0], span->key[1]},
                            .bidirectional = span->bidirectional, .sliding_only = span->bidirectional && span->sliding_only};
    gm_status st = push_span(s, &sp, span->embeds, err);
    if (st) return st;
    for (int i = 0; i < span->n; i++) s->tok[s->n_tok + i] = span->placeholder;
    s->n_tok += span->n;
    s->logits_valid = false;
    return GM_OK;
}
