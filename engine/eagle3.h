/* engine/eagle3.h — internal: the parts of an EAGLE-3 head (gemma.h, "drafters") that speculation and the tests use. It has a cache of its
 * own (a pool of one layer's blocks, a table per head sequence), runs on a backend of the target's kind over the
 * head's weights, and takes the target's states as taps (gm_engine_set_taps; the tap id equal to the target's
 * layer count is its final-normed state, gm_row.hidden). The math: runtime/eagle3.c. */
#ifndef GM_ENGINE_EAGLE3_H
#define GM_ENGINE_EAGLE3_H

#include "gemma.h"

typedef struct gm_e3_seq gm_e3_seq;

/* gm_eagle3_new / gm_eagle3_free: gemma.h (max_rows: rows per call before chunks, 0: 64). */
const gm_model *gm_eagle3_head(const gm_eagle3 *d);
const gm_engine *gm_eagle3_target(const gm_eagle3 *d);
/* The three target layer ids the head reads (== the target's layer count: its final-normed state). */
const int *gm_eagle3_taps(const gm_eagle3 *d);
/* n rows of the three taps concatenated (3 x target width) -> n rows of the head's width: g. */
gm_status gm_eagle3_encode(gm_eagle3 *d, const float *taps, int n, float *g, gm_error *err);

/* The head's cache for one target sequence. Free them before the head. */
gm_status gm_e3_seq_new(gm_eagle3 *d, gm_e3_seq **out, gm_error *err);
void gm_e3_seq_free(gm_e3_seq *s);
int gm_e3_seq_length(const gm_e3_seq *s);
/* Positions >= n are dropped (n <= the length). */
void gm_e3_seq_truncate(gm_e3_seq *s, int n);

/* One decoder row: (token, g) at pos, which must be the sequence's length (the row appends it); rows of one
 * sequence come in position order. g_next (the head's width) and logits (the target's vocabulary) may be NULL. */
typedef struct gm_eagle3_row {
    gm_e3_seq *seq;
    int pos;
    int32_t token;
    const float *g;
    float *g_next;
    float *logits;
} gm_eagle3_row;
gm_status gm_eagle3_decode(gm_eagle3 *d, const gm_eagle3_row *rows, int n, gm_error *err);

#endif
