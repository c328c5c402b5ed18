/* engine/sampler.c — see sampler.h. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/random.h"
#include "kernels/ops.h"

gm_sampling gm_sampling_default(void) {
    return (gm_sampling){.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f,
                         .repeat_penalty = 1.0f, .repeat_last_n = 64, .frequency_penalty = 0.0f,
                         .presence_penalty = 0.0f, .seed = 0};
}

gm_status gm_sampling_validate(const gm_sampling *s, gm_error *err) {
    if (!s) return gm_fail(err, GM_ERR_ARG, "sampling: options are NULL");
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return gm_fail(err, GM_ERR_ARG, "sampling: temperature %g must be a finite number >= 0", (double)s->temperature);
    if (s->top_k < 0) return gm_fail(err, GM_ERR_ARG, "sampling: top_k %d must be >= 0 (0 = off)", s->top_k);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return gm_fail(err, GM_ERR_ARG, "sampling: top_p %g must be in (0, 1] (1 = off)", (double)s->top_p);
    if (!(s->min_p >= 0.0f && s->min_p <= 1.0f))
        return gm_fail(err, GM_ERR_ARG, "sampling: min_p %g must be in [0, 1]", (double)s->min_p);
    if (!(s->repeat_penalty > 0.0f) || !isfinite(s->repeat_penalty))
        return gm_fail(err, GM_ERR_ARG, "sampling: repeat_penalty %g must be > 0 (1 = off)", (double)s->repeat_penalty);
    if (s->repeat_last_n < -1)
        return gm_fail(err, GM_ERR_ARG, "sampling: repeat_last_n %d must be >= -1 (-1 = whole history)", s->repeat_last_n);
    if (!isfinite(s->frequency_penalty) || !isfinite(s->presence_penalty))
        return gm_fail(err, GM_ERR_ARG, "sampling: frequency/presence penalties must be finite");
    if (s->n_logit_bias < 0 || (s->n_logit_bias > 0 && !s->logit_bias))
        return gm_fail(err, GM_ERR_ARG, "sampling: %d logit_bias entries without a list", s->n_logit_bias);
    for (int i = 0; i < s->n_logit_bias; i++) {
        const gm_logit_bias *b = &s->logit_bias[i];
        if (b->token < 0) return gm_fail(err, GM_ERR_ARG, "sampling: logit_bias token id %d < 0", (int)b->token);
        if (!isfinite(b->bias) && b->bias != -INFINITY)
            return gm_fail(err, GM_ERR_ARG, "sampling: logit_bias of token %d must be finite or -inf", (int)b->token);
    }
    return GM_OK;
}

/* ---------------------------------------------------------------- PRNG: splitmix64 + xoshiro256** */


static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(gm_sampler *s) {
    uint64_t *r = s->rng;
    const uint64_t out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return out;
}

void gm_sampler_seed(gm_sampler *s, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) s->rng[i] = gm_splitmix64(&x);
}

double gm_sampler_uniform(gm_sampler *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

gm_status gm_sampler_init(gm_sampler *s, int n_vocab, gm_exp_sum_fn exp_sum, gm_error *err) {
    memset(s, 0, sizeof *s);
    if (n_vocab <= 0) return gm_fail(err, GM_ERR_ARG, "sampler: vocabulary size %d", n_vocab);
    s->n_vocab = n_vocab;
    s->exp_sum = exp_sum ? exp_sum : gm_exp_sum;
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->w = malloc((size_t)n_vocab * sizeof *s->w);
    if (!s->work || !s->cand || !s->w) {
        gm_sampler_free(s);
        return gm_fail(err, GM_ERR_NOMEM, "sampler: out of memory for %d candidates", n_vocab);
    }
    gm_sampler_seed(s, 0);
    return GM_OK;
}

void gm_sampler_free(gm_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->cand);
    free(s->w);
    free(s->win);
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------- penalties */

/* In-place heapsort of ids (ascending). glibc's qsort may malloc a merge buffer; this never does. */
static void sort_i32(int32_t *a, int n) {
    for (int start = n / 2 - 1, end = n;; ) {
        int root;
        if (start >= 0) root = start--;
        else {
            if (--end <= 0) return;
            int32_t t = a[0];
            a[0] = a[end];
            a[end] = t;
            root = 0;
        }
        for (int child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && a[child + 1] > a[child]) child++;
            if (a[root] >= a[child]) break;
            int32_t t = a[root];
            a[root] = a[child];
            a[child] = t;
        }
    }
}

/* a grammar's mask: what it does not allow can never be drawn (before every other adjustment, so top-k,
 * top-p and min-p work on the allowed tokens: the draw is from the model's distribution given the grammar) */
static void apply_mask(gm_sampler *s) {
    for (int i = 0; i < s->n_vocab; i++)
        if (!(s->mask[i >> 5] >> (i & 31) & 1u)) s->work[i] = -INFINITY;
}

/* logit_bias: added to the copy of the logits before the penalties (llama.cpp's order) */
static gm_status apply_bias(gm_sampler *s, const gm_sampling *o, gm_error *err) {
    for (int i = 0; i < o->n_logit_bias; i++) {
        const gm_logit_bias *b = &o->logit_bias[i];
        if (b->token >= s->n_vocab)
            return gm_fail(err, GM_ERR_ARG, "sampling: logit_bias token id %d is outside the vocabulary [0, %d)",
                           (int)b->token, s->n_vocab);
        s->work[b->token] += b->bias;
    }
    return GM_OK;
}

static gm_status apply_penalties(gm_sampler *s, const gm_sampling *o, const int32_t *hist, int n_hist,
                                 gm_error *err) {
    const bool rep = o->repeat_penalty != 1.0f;
    if (!rep && o->frequency_penalty == 0.0f && o->presence_penalty == 0.0f) return GM_OK;
    int n = o->repeat_last_n < 0 ? n_hist : o->repeat_last_n;
    if (n > n_hist) n = n_hist;
    if (n <= 0) return GM_OK;
    if (n > s->win_cap) {
        int32_t *w = realloc(s->win, (size_t)n * sizeof *w);
        if (!w) return gm_fail(err, GM_ERR_NOMEM, "sampler: out of memory for a penalty window of %d", n);
        s->win = w;
        s->win_cap = n;
    }
    memcpy(s->win, hist + (n_hist - n), (size_t)n * sizeof *s->win);
    sort_i32(s->win, n);
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && s->win[j] == s->win[i]) j++;
        const int32_t id = s->win[i];
        const int count = j - i;
        i = j;
        if (id < 0 || id >= s->n_vocab) continue;
        float *l = &s->work[id];
        if (rep) *l = *l > 0.0f ? *l / o->repeat_penalty : *l * o->repeat_penalty;
        *l -= (float)count * o->frequency_penalty + o->presence_penalty;
    }
    return GM_OK;
}

/* ---------------------------------------------------------------- candidate selection */

/* Order: larger logit first; ties by smaller id, so results never depend on the input order. */
static int before(const gm_cand *a, const gm_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void swap_c(gm_cand *a, gm_cand *b) {
    gm_cand t = *a;
    *a = *b;
    *b = t;
}

/* In-place heapsort into `before` order (a total order, so the result is unique); no allocation. */
static void sort_cands(gm_cand *c, int n) {
    for (int start = n / 2 - 1, end = n;; ) {
        int root;
        if (start >= 0) root = start--;
        else {
            if (--end <= 0) return;
            swap_c(&c[0], &c[end]);
            root = 0;
        }
        /* a max-heap of the "last" element: the root is the one that sorts last */
        for (int child; (child = 2 * root + 1) < end; root = child) {
            if (child + 1 < end && before(&c[child], &c[child + 1])) child++;
            if (!before(&c[root], &c[child])) break;
            swap_c(&c[root], &c[child]);
        }
    }
}

/* Quickselect (median of three): afterwards c[0..k) holds the k first in `before` order. */
static void select_k(gm_cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (before(&c[mid], &c[lo])) swap_c(&c[mid], &c[lo]);
        if (before(&c[hi], &c[lo])) swap_c(&c[hi], &c[lo]);
        if (before(&c[hi], &c[mid])) swap_c(&c[hi], &c[mid]);
        const gm_cand pivot = c[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (before(&c[i], &pivot)) i++;
            while (before(&pivot, &c[j])) j--;
            if (i <= j) swap_c(&c[i++], &c[j--]);
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
}

void gm_cand_top_k(gm_cand *c, int n, int k) {
    if (k <= 0) return;
    if (k < n) select_k(c, n, k);
    else k = n;
    sort_cands(c, k);
}

/* The first index of the largest value (NaNs never win, as in a plain `x[i] > x[best]` scan). The
 * maximum comes from 8 independent chains (the compiler vectorises them), then one scan finds its
 * first position: ~4x faster than the one-chain scan over 262144 logits. */
static int32_t argmax(const float *x, int n) {
    float m[8] = {x[0], x[0], x[0], x[0], x[0], x[0], x[0], x[0]};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) m[k] = x[i + k] > m[k] ? x[i + k] : m[k];
    for (; i < n; i++) m[0] = x[i] > m[0] ? x[i] : m[0];
    float mx = m[0];
    for (int k = 1; k < 8; k++) mx = m[k] > mx ? m[k] : mx;
    for (int j = 0; j < n; j++)
        if (x[j] == mx) return j;
    return 0; /* x[0] is NaN and nothing beats it: what the plain scan returns */
}

/* ---- candidate selection over the whole vocabulary in linear passes.
 * Candidates are bucketed by their distance below the best scaled logit, in bins of 1/16 over 64
 * logit units (the last bin takes everything further down: e^-64 of the best's weight each).
 * top-k: counts per bin give the bin where the k-th candidate sits; only candidates down to that
 * bin are gathered and selected. top-p: per-bin masses give the bin where the mass reaches
 * top_p; only candidates down to it are gathered, sorted and summed exactly. A 262144-token
 * vocabulary then costs a few cheap passes instead of a quickselect or 262144 exp() calls. */
enum { BIN_PER_UNIT = 16, N_BINS = 64 * BIN_PER_UNIT };

static inline int bin_of(float d) { /* d = best - logit >= 0; NaN (an infinite best) -> bin 0 */
    const float b = d * (float)BIN_PER_UNIT;
    if (b != b) return 0;
    return b < (float)(N_BINS - 1) ? (int)b : N_BINS - 1;
}

/* Moves the best candidate (in `before` order) to c[0]; the others keep a deterministic order. */
static void best_first(gm_cand *c, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (before(&c[i], &c[b])) b = i;
    swap_c(&c[0], &c[b]);
}

/* The helpers below read the scaled logits l (logit / temperature; -inf for a logit that was -inf
 * or NaN, which is never a candidate) and mx, the largest of them. */

/* c[0..) = the candidates whose bin is <= last, in id order; returns their count */
static int gather(gm_cand *c, const float *l, int V, float mx, int last) {
    int n = 0;
    for (int i = 0; i < V; i++)
        if (l[i] != -INFINITY && (last >= N_BINS - 1 || bin_of(mx - l[i]) <= last)) c[n++] = (gm_cand){l[i], i};
    return n;
}

/* The bin holding the k-th best candidate (counting ties and the whole bin). */
static int top_k_bin(const float *l, int V, float mx, int k) {
    int count[N_BINS] = {0};
    for (int i = 0; i < V; i++)
        if (l[i] != -INFINITY) count[bin_of(mx - l[i])]++;
    int cum = 0;
    for (int b = 0; b < N_BINS; b++)
        if ((cum += count[b]) >= k) return b;
    return N_BINS - 1;
}

/* Total weight sum exp(l - mx) of the finite candidates, and per-bin weights: e^-(d) =
 * e^-(b/16) e^-r with r < 1/16 by a degree-4 polynomial (relative error < 1e-8); the last bin
 * (64 units and more below the best) counts as 0. Returns the bin where the weight from the top
 * reaches top_p of the total. */
static int top_p_bin(const float *l, int V, float mx, float top_p, double *z_out) {
    static const double w = 1.0 / BIN_PER_UNIT;
    double mass[N_BINS] = {0};
    for (int i = 0; i < V; i++) {
        const float d = mx - l[i];
        const int b = bin_of(d);
        if (b == N_BINS - 1) continue; /* far below the best, or -inf */
        const double r = (double)d - b * w;
        mass[b] += 1.0 + r * (-1.0 + r * (0.5 + r * (-1.0 / 6 + r * (1.0 / 24))));
    }
    double z = 0.0;
    for (int b = 0; b < N_BINS - 1; b++) z += (mass[b] *= exp(-b * w));
    *z_out = z;
    const double target = (double)top_p * z;
    double cum = 0.0;
    for (int b = 0; b < N_BINS - 1; b++)
        if ((cum += mass[b]) >= target) return b;
    return N_BINS - 1;
}

/* Keeps the smallest sorted prefix whose probability mass reaches top_p of the n candidates,
 * growing the sorted prefix geometrically so a flat distribution never forces a full sort up
 * front. c[0] must be the best. With z_all > 0, c holds only the best candidates of a larger set
 * whose total weight is z_all: the mass is measured against that. */
static int top_p_prefix(gm_cand *c, int n, float top_p, double z_all) {
    const float mx = c[0].logit;
    double z = z_all;
    if (z <= 0.0)
        for (int i = 0; i < n; i++) z += exp((double)c[i].logit - mx);
    const double target = (double)top_p * z;
    int sorted = 0;
    for (int m = 64;; m *= 4) {
        if (m > n) m = n;
        if (m > sorted) gm_cand_top_k(c, n, m);
        sorted = m;
        double cum = 0.0;
        for (int i = 0; i < m; i++) {
            cum += exp((double)c[i].logit - mx);
            if (cum >= target) return i + 1;
        }
        if (m == n) return n;
    }
}

/* The candidates a draw picks from: either *forced >= 0 (greedy, or the tiny-temperature limit) or
 * s->cand[0..*n) with scaled logits, the best first, and *mx the best scaled logit. Shared by the draw
 * (gm_sampler_sample) and the distribution (gm_sampler_dist) so both see the same set. */
static gm_status candidates(gm_sampler *s, const gm_sampling *o, const float *logits, const int32_t *hist,
                            int n_hist, int *n_out, float *mx_out, int32_t *forced, gm_error *err) {
    gm_status st = gm_sampling_validate(o, err);
    if (st) return st;
    int32_t *out = forced;
    *out = -1;
    const int V = s->n_vocab;
    const bool penalties = o->repeat_penalty != 1.0f || o->frequency_penalty != 0.0f || o->presence_penalty != 0.0f;
    if (o->temperature == 0.0f && !penalties && o->n_logit_bias == 0 && !s->mask) { /* plain greedy: no copy */
        *out = argmax(logits, V);
        return GM_OK;
    }
    memcpy(s->work, logits, (size_t)V * sizeof *s->work);
    if (s->mask) apply_mask(s);
    if ((st = apply_bias(s, o, err)) || (st = apply_penalties(s, o, hist, n_hist, err))) return st;
    if (o->temperature == 0.0f) {
        *out = argmax(s->work, V);
        if (s->work[*out] == -INFINITY)
            return gm_fail(err, GM_ERR_ARG, "sampling: every token is banned (-inf)%s",
                           s->mask ? " or outside the grammar" : "");
        return GM_OK;
    }
    /* A temperature so small that 1/T or some logit/T overflows float (T ~ 1e-38 and logits of a few
     * units; T subnormal) is the T -> 0 limit: greedy, the same token as temperature 0. Scaling on
     * would turn those logits into +-inf and the softmax into NaN. The argmax of the unscaled logits
     * is tracked while scaling (ties: the lower id, as argmax) so the fallback costs no extra pass. */
    const float inv_t = 1.0f / o->temperature;
    if (!isfinite(inv_t)) {
        *out = argmax(s->work, V);
        return GM_OK;
    }
    float *l = s->work, mx = -INFINITY; /* l: scaled in place once; mx: the best */
    float best_raw = -INFINITY;
    int n_fin = 0, best_id = 0;
    bool overflow = false;
    for (int i = 0; i < V; i++) {
        if (isnan(l[i]) || l[i] == -INFINITY) {
            l[i] = -INFINITY;
            continue;
        }
        n_fin++;
        if (l[i] > best_raw) best_raw = l[i], best_id = i;
        l[i] *= inv_t;
        overflow |= isinf(l[i]);
        if (l[i] > mx) mx = l[i];
    }
    if (n_fin == 0) return gm_fail(err, GM_ERR_ARG, "sampling: every logit is -inf or NaN");
    if (overflow) {
        *out = best_id;
        return GM_OK;
    }
    gm_cand *c = s->cand;
    int n;
    if (o->top_k > 0 && o->top_k < n_fin) {
        n = gather(c, l, V, mx, top_k_bin(l, V, mx, o->top_k));
        gm_cand_top_k(c, n, o->top_k);
        n = o->top_k;
        if (o->top_p < 1.0f) n = top_p_prefix(c, n, o->top_p, 0.0);
    } else if (o->top_p < 1.0f) {
        /* gather down to the bin where the mass reaches top_p (one bin more as a margin for the
         * binned sum), then find the exact prefix among them; the whole set if that falls short */
        double z_all = 0.0;
        const int b = top_p_bin(l, V, mx, o->top_p, &z_all);
        n = gather(c, l, V, mx, b + 1 < N_BINS - 1 ? b + 1 : N_BINS - 1);
        best_first(c, n);
        n = top_p_prefix(c, n, o->top_p, z_all);
    } else {
        /* min-p alone keeps logits >= best + log(min_p): gather no further than that bin */
        const int last = o->min_p > 0.0f ? bin_of(-logf(o->min_p)) : N_BINS - 1;
        n = gather(c, l, V, mx, last);
        best_first(c, n); /* the reference for min-p and the draw */
    }
    if (o->min_p > 0.0f) {
        const float floor_l = mx + logf(o->min_p);
        int m = 0;
        for (int i = 0; i < n; i++)
            if (c[i].logit >= floor_l) c[m++] = c[i];
        n = m; /* c[0] (the best) always survives */
    }
    *n_out = n;
    *mx_out = mx;
    return GM_OK;
}

/* s->w[i] = exp(cand[i].logit - mx) for the n candidates, once, by the vector exp (a draw used to call
 * exp() twice per candidate: with temperature alone that is every token of the vocabulary, a third of
 * a decode step on the 270M); returns their sum. */
static double weights(gm_sampler *s, int n, float mx) {
    for (int i = 0; i < n; i++) s->w[i] = s->cand[i].logit;
    return s->exp_sum(s->w, n, mx);
}

gm_status gm_sampler_sample(gm_sampler *s, const gm_sampling *o, const float *logits, const int32_t *hist,
                            int n_hist, int32_t *out, gm_error *err) {
    int n;
    float mx;
    gm_status st = candidates(s, o, logits, hist, n_hist, &n, &mx, out, err);
    if (st || *out >= 0) return st;
    const gm_cand *c = s->cand;
    const double z = weights(s, n, mx);
    const double u = gm_sampler_uniform(s) * z;
    double cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += s->w[i];
        if (u < cum) {
            *out = c[i].id;
            return GM_OK;
        }
    }
    *out = c[n - 1].id;
    return GM_OK;
}

gm_status gm_sampler_dist(gm_sampler *s, const gm_sampling *o, const float *logits, const int32_t *hist, int n_hist,
                          int *n, gm_error *err) {
    float mx;
    int32_t forced;
    gm_status st = candidates(s, o, logits, hist, n_hist, n, &mx, &forced, err);
    if (st) return st;
    if (forced >= 0) {
        s->cand[0] = (gm_cand){1.0f, forced};
        *n = 1;
        return GM_OK;
    }
    const double z = weights(s, *n, mx);
    for (int i = 0; i < *n; i++) s->cand[i].logit = (float)(s->w[i] / z);
    return GM_OK;
}
