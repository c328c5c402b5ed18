/* engine/sampler.h — turning logits into a token: penalties, temperature, top-k, top-p, min-p,
 * and a seeded draw (xoshiro256**, no rand()). Buffers are sized once for the vocabulary; nothing
 * is allocated per token once the penalty window has reached its size.
 *
 * Order: repetition / frequency / presence penalties on the raw logits (llama.cpp semantics), then
 * greedy argmax when temperature == 0; otherwise logits / temperature (as HF transformers), top-k,
 * top-p over the renormalised survivors, min-p relative to the best survivor, then the draw. */
#ifndef GM_ENGINE_SAMPLER_H
#define GM_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "gemma.h"
#include "kernels/ops.h"

typedef struct gm_cand {
    float logit;
    int32_t id;
} gm_cand;

typedef struct gm_sampler {
    int n_vocab;
    uint64_t rng[4];
    float *work;     /* n_vocab: logits after penalties */
    gm_cand *cand;   /* n_vocab */
    float *w;        /* n_vocab: the candidates' weights exp(logit - best) for the draw */
    int32_t *win;    /* penalty window (sorted copy) */
    int win_cap;
    gm_exp_sum_fn exp_sum; /* the weights' exp: an ISA level's (kernels/ops.h), chosen at init */
    const uint32_t *mask;  /* NULL, or the tokens allowed (bit i of word i / 32) for the next draw: a grammar's */
} gm_sampler;

/* exp_sum: the level's vector exp of the weights (gm_cpu_kernels.exp_sum; NULL: gm_exp_sum, the scalar
 * one). Draws depend on its bits: a sequence passes its engine's level's. */
gm_status gm_sampler_init(gm_sampler *s, int n_vocab, gm_exp_sum_fn exp_sum, gm_error *err);
void gm_sampler_free(gm_sampler *s);
void gm_sampler_seed(gm_sampler *s, uint64_t seed);
/* A uniform double in [0, 1) from the sampler's stream. */
double gm_sampler_uniform(gm_sampler *s);
/* hist: the token history (penalty window taken from its end). */
gm_status gm_sampler_sample(gm_sampler *s, const gm_sampling *opt, const float *logits, const int32_t *hist,
                            int n_hist, int32_t *out, gm_error *err);

/* The distribution gm_sampler_sample draws from, after penalties, temperature and the filters:
 * s->cand[0..*n) with .logit holding each candidate's probability (they sum to 1; best first). Greedy
 * (temperature 0) is one candidate with probability 1. Consumes no random numbers. For speculative
 * decoding's rejection scheme, which needs p(x) rather than a draw. */
gm_status gm_sampler_dist(gm_sampler *s, const gm_sampling *opt, const float *logits, const int32_t *hist, int n_hist,
                          int *n, gm_error *err);

/* Exposed for tests: moves the k largest (logit desc, id asc) of c[0..n) to c[0..k), sorted. */
void gm_cand_top_k(gm_cand *c, int n, int k);

#endif
