/* generate/speculative.h — internal: the proposers behind gm_spec (public API: gemma.h, "speculative
 * decoding"), exposed for tests. */
#ifndef GM_GENERATE_SPECULATIVE_H
#define GM_GENERATE_SPECULATIVE_H

#include <stdint.h>

#include "gemma.h"

/* Prompt lookup: for g = ngram_max down to ngram_min, the last g tokens of h[0..n) are searched for
 * in h, most recent occurrence first (ending before n); the first hit proposes the up to k tokens
 * that followed it. Returns how many were written to out (0: no match). */
int gm_lookup_propose(const int32_t *h, int n, int ngram_min, int ngram_max, int k, int32_t *out);

/* GM_ERR_ARG with a message when the two models' vocabularies differ (size, or a token's text). */
gm_status gm_spec_check_vocab(const gm_model *target, const gm_model *draft, gm_error *err);

#endif
