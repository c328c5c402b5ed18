/* tests/test_eagle3.c — EAGLE-3 heads against llama.cpp's draft-eagle3 on tiny synthetic GGUFs.
 *
 * tests/data/eagle3 (tests/gen/gen_eagle3_fixtures.py, tests/gen/eagle3_llama_harness.cpp; llama.cpp 0.3.36 over
 * libllama, F32 caches, CPU): two heads over the tiny Gemma 4 target gemma4-dense (llama.cpp exposes no layer taps
 * for Gemma 3, so there is no Gemma 3 fixture). eagle3-gemma4: width 32, taps [1, 3, 7] (7 = the target's layer
 * count: its final-normed state), the target's token embedding, the full vocabulary. eagle3-gemma4-d2t: width 24
 * with 4 query heads of 8 (a query width of 32), taps [2, 3, 4], norm_before_fc and norm_before_residual, its own
 * embedding, a 64-token draft vocabulary mapped by d2t. Each .draft.txt has the target's taps and the encoder's
 * output g0 for all 40 positions, then 7 cases of 3 draft steps: pairs (token k+1, g0_k) at k < P in the head's
 * cache, step 0 (token, g0_P) at P, step k (the previous step's argmax, its g) at P + k.
 *
 * Checked stage by stage, each against llama.cpp: the target's taps (this engine's tap rows and final state), the
 * encoder on llama.cpp's taps, each step's logits (draft vocabulary) and g on llama.cpp's g0 and our previous g.
 * Tolerance: rounding only separates the engines: 2e-3 of the row's largest |value|, the same argmax. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eagle3.h"
#include "gemma.h"
#include "support/test.h"

#define NTOK 40
#define V 300
#define BB 32
#define MAXW 32
#define MAXCASES 8
#define STEPS 3
#define REL_TOL 2e-3

typedef struct {
    int n_tok, taps_ids[3], n_d2t, d2t[V], width, n_cases;
    int32_t tok[NTOK];
    float taps[NTOK][3 * BB], g0[NTOK][MAXW];
    struct {
        int pos, tok[STEPS], n_logits;
        float logits[STEPS][V], g[STEPS][MAXW];
    } c[MAXCASES];
} fixture;

static int floats(char *p, float *out, int max) {
    int n = 0;
    for (char *end; n < max; n++, p = end) {
        out[n] = strtof(p, &end);
        if (end == p) break;
    }
    return n;
}

static bool load(const char *rel, fixture *fx) {
    size_t len;
    char *text = (char *)test_read_file(test_data_path(rel), &len);
    if (!text) return false;
    memset(fx, 0, sizeof *fx);
    bool ok = true;
    int ci = -1, step = -1;
    for (char *line = strtok(text, "\n"); line && ok; line = strtok(NULL, "\n")) {
        char *p = line;
        if (!strncmp(line, "tokens ", 7)) {
            fx->n_tok = (int)strtol(p + 7, &p, 10);
            ok = fx->n_tok == NTOK;
            for (int i = 0; ok && i < NTOK; i++) fx->tok[i] = (int32_t)strtol(p, &p, 10);
        } else if (!strncmp(line, "layers ", 7)) {
            ok = strtol(p + 7, &p, 10) == 3;
            for (int i = 0; ok && i < 3; i++) fx->taps_ids[i] = (int)strtol(p, &p, 10);
        } else if (!strncmp(line, "d2t ", 4)) {
            fx->n_d2t = (int)strtol(p + 4, &p, 10);
            ok = fx->n_d2t > 0 && fx->n_d2t <= V;
            for (int i = 0; ok && i < fx->n_d2t; i++) fx->d2t[i] = (int)strtol(p, &p, 10);
        } else if (!strncmp(line, "taps ", 5)) {
            const int pos = (int)strtol(p + 5, &p, 10);
            ok = pos >= 0 && pos < NTOK && floats(p, fx->taps[pos], 3 * BB) == 3 * BB;
        } else if (!strncmp(line, "g0 ", 3)) {
            const int pos = (int)strtol(p + 3, &p, 10);
            ok = pos >= 0 && pos < NTOK;
            if (ok) fx->width = floats(p, fx->g0[pos], MAXW);
        } else if (!strncmp(line, "case ", 5)) {
            ok = ++ci < MAXCASES;
            if (ok) fx->c[ci].pos = (int)strtol(p + 5, &p, 10), fx->n_cases = ci + 1;
        } else if (ci >= 0 && !strncmp(line, "step ", 5)) {
            step = (int)strtol(p + 5, &p, 10);
            ok = step >= 0 && step < STEPS;
            if (ok) fx->c[ci].tok[step] = (int32_t)strtol(p, &p, 10);
        } else if (ci >= 0 && step >= 0 && !strncmp(line, "logits ", 7)) {
            fx->c[ci].n_logits = floats(p + 7, fx->c[ci].logits[step], V);
        } else if (ci >= 0 && step >= 0 && !strncmp(line, "g ", 2)) {
            ok = floats(p + 2, fx->c[ci].g[step], MAXW) == fx->width;
        }
    }
    free(text);
    return ok && fx->n_tok == NTOK && fx->n_cases > 0 && fx->width > 0;
}

static float rel_err(const float *a, const float *b, int n) {
    float m = 0, e = 0;
    for (int i = 0; i < n; i++) {
        m = fabsf(b[i]) > m ? fabsf(b[i]) : m;
        e = fabsf(a[i] - b[i]) > e ? fabsf(a[i] - b[i]) : e;
    }
    return m > 0 ? e / m : e;
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static void check_head(const char *stem, gm_backend_kind kind) {
    char rel[128], name[96];
    snprintf(name, sizeof name, "%s (%s)", stem, kind == GM_BACKEND_REFERENCE ? "reference" : "cpu");
    fixture *fx = malloc(sizeof *fx);
    snprintf(rel, sizeof rel, "eagle3/%s.draft.txt", stem);
    if (!fx || !load(rel, fx)) {
        CHECK_MSG(false, "cannot read %s", rel);
        free(fx);
        return;
    }
    gm_error err = {0};
    gm_model *t = NULL, *h = NULL;
    gm_engine *e = NULL;
    gm_eagle3 *d = NULL;
    CHECK_OK(gm_model_open(test_data_path("gemma4/gemma4-dense.gguf"), NULL, &t, &err), &err);
    snprintf(rel, sizeof rel, "eagle3/%s.gguf", stem);
    CHECK_OK(gm_model_open(test_data_path(rel), NULL, &h, &err), &err);
    const gm_engine_options eo = {.n_threads = 2, .n_ctx = 64, .kv_type = GM_KV_DTYPE_F32, .backend = kind};
    if (t && h) CHECK_OK(gm_engine_new(t, &eo, &e, &err), &err);
    if (e) CHECK_OK(gm_eagle3_new(e, h, 0, &d, &err), &err);
    if (!d) goto done;
    const int W = fx->width, L = gm_model_config(t)->n_layers, *ids = gm_eagle3_taps(d);
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(ids[i], fx->taps_ids[i]);

    /* the target's taps: the inputs of the layers < L, the final-normed state for L */
    int layers[3], n_layers = 0;
    for (int i = 0; i < 3; i++)
        if (ids[i] < L) layers[n_layers++] = ids[i];
    CHECK_OK(gm_engine_set_taps(e, layers, n_layers, &err), &err);
    float *tap = malloc(sizeof(float) * NTOK * 3 * BB), *mine = malloc(sizeof(float) * NTOK * 3 * BB);
    float *hid = malloc(sizeof(float) * NTOK * BB);
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    gm_row rows[NTOK];
    for (int p = 0; p < NTOK; p++)
        rows[p] = (gm_row){.seq = s, .token = fx->tok[p], .pos = p, .taps = tap + (size_t)p * 3 * BB,
                           .hidden = hid + (size_t)p * BB};
    CHECK_OK(gm_engine_forward(e, rows, NTOK, NULL, &err), &err);
    float worst = 0;
    for (int p = 0; p < NTOK; p++) {
        for (int i = 0, a = 0; i < 3; i++) {
            const float *src = ids[i] < L ? tap + (size_t)p * 3 * BB + (size_t)(a++) * BB : hid + (size_t)p * BB;
            memcpy(mine + (size_t)p * 3 * BB + (size_t)i * BB, src, BB * sizeof(float));
        }
        const float r = rel_err(mine + (size_t)p * 3 * BB, fx->taps[p], 3 * BB);
        worst = r > worst ? r : worst;
    }
    fprintf(stderr, "  %s: target taps rel err %.2g\n", name, worst);
    CHECK_MSG(worst <= REL_TOL, "%s: the target's taps differ from llama.cpp's by %g", stem, worst);

    /* the encoder on llama.cpp's taps */
    float g0[NTOK * MAXW]; /* rows of the head's width W */
    CHECK_OK(gm_eagle3_encode(d, &fx->taps[0][0], NTOK, g0, &err), &err);
    worst = 0;
    for (int p = 0; p < NTOK; p++) {
        const float r = rel_err(g0 + (size_t)p * W, fx->g0[p], W);
        worst = r > worst ? r : worst;
    }
    fprintf(stderr, "  %s: encoder rel err %.2g\n", name, worst);
    CHECK_MSG(worst <= REL_TOL, "%s: the encoder differs by %g", stem, worst);

    /* the decoder: each case's cache of pairs, then 3 chained steps */
    float wl = 0, wg = 0, logits[V], g[MAXW], gn[MAXW];
    int agree = 0, steps = 0;
    for (int ci = 0; ci < fx->n_cases; ci++) {
        const int P = fx->c[ci].pos;
        gm_e3_seq *hs = NULL;
        CHECK_OK(gm_e3_seq_new(d, &hs, &err), &err);
        if (!hs) break;
        for (int k = 0; k < P; k++) {
            const gm_eagle3_row r = {.seq = hs, .pos = k, .token = fx->tok[k + 1], .g = fx->g0[k]};
            CHECK_OK(gm_eagle3_decode(d, &r, 1, &err), &err);
        }
        memcpy(g, fx->g0[P], sizeof g);
        for (int k = 0; k < STEPS; k++) {
            const gm_eagle3_row r = {.seq = hs, .pos = P + k, .token = fx->c[ci].tok[k], .g = g, .g_next = gn,
                                     .logits = logits};
            CHECK_OK(gm_eagle3_decode(d, &r, 1, &err), &err);
            float draft[V];
            const int nd = fx->n_d2t ? fx->n_d2t : V;
            for (int i = 0; i < nd; i++) draft[i] = logits[fx->n_d2t ? fx->d2t[i] : i];
            const float el = rel_err(draft, fx->c[ci].logits[k], nd), eg = rel_err(gn, fx->c[ci].g[k], W);
            wl = el > wl ? el : wl, wg = eg > wg ? eg : wg;
            agree += argmax(draft, nd) == argmax(fx->c[ci].logits[k], nd);
            steps++;
            memcpy(g, gn, sizeof g);
        }
        gm_e3_seq_free(hs);
    }
    fprintf(stderr, "  %s: %d cases, %d steps: logits rel err %.2g, g rel err %.2g, argmax %d/%d\n", name,
            fx->n_cases, steps, wl, wg, agree, steps);
    CHECK(steps == fx->n_cases * STEPS && steps > 0);
    CHECK_MSG(wl <= REL_TOL && wg <= REL_TOL, "%s: logits %g, g %g", stem, wl, wg);
    CHECK_EQ_INT(agree, steps);
    gm_seq_free(s);
    free(tap);
    free(mine);
    free(hid);
done:
    gm_eagle3_free(d);
    gm_engine_free(e);
    gm_model_free(h);
    gm_model_free(t);
    free(fx);
}

TEST(eagle3_gemma4) {
    check_head("eagle3-gemma4", GM_BACKEND_CPU);
    check_head("eagle3-gemma4", GM_BACKEND_REFERENCE);
}
TEST(eagle3_gemma4_d2t) {
    check_head("eagle3-gemma4-d2t", GM_BACKEND_CPU);
    check_head("eagle3-gemma4-d2t", GM_BACKEND_REFERENCE);
}

int main(void) {
    RUN(eagle3_gemma4);
    RUN(eagle3_gemma4_d2t);
    return test_summary();
}
