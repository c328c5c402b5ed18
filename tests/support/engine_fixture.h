/* tests/support/engine_fixture.h — what the engine tests (test_engine, test_prefix_cache, test_spans) share: four
 * tiny synthetic models written at start (Gemma 1 / 2 / 3 with window 8, so windows and 64-position blocks are
 * crossed within a few hundred tokens, and a Gemma 3 with the Q4_K_M files' quantized types), engines and
 * sequences on them, random prompts, and the reference: a sequence alone in a fresh engine without a prefix index.
 * Header-only (static inline): each test binary gets its own copy of the fixture's state. */
#ifndef GM_TEST_ENGINE_FIXTURE_H
#define GM_TEST_ENGINE_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "support/test.h"
#include "support/tiny_model.h"

static const char *ARCHS[] = {"gemma", "gemma2", "gemma3"};
/* PATH[3]: gemma3 with the quantized types of the Q4_K_M files (Q5_0 layers, Q6_K ffn_down, Q8_0 embedding), whose
 * decode rows run the AVX2 few-token kernels (kernels/mtok_avx2.c) when opened at that level */
static char PATH[4][256];
static int V;

static inline gm_model *open_model(int a) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(PATH[a], NULL, &m, &err), &err);
    return m;
}

static inline gm_engine *new_engine(const gm_model *m, int threads, int n_batch, bool cache, size_t kv_mem, gm_kv_dtype kt) {
    gm_error err = {0};
    gm_engine *e = NULL;
    gm_engine_options o = {.n_threads = gm_test_threads(threads), .n_ctx = 1024, .n_batch = n_batch, .kv_mem = kv_mem,
                           .kv_type = kt, .no_prefix_cache = !cache};
    CHECK_OK(gm_engine_new(m, &o, &e, &err), &err);
    return e;
}

static inline gm_seq *new_seq(gm_engine *e) {
    gm_error err = {0};
    gm_seq *s = NULL;
    CHECK_OK(gm_seq_new(e, &s, &err), &err);
    return s;
}

static inline void tokens(int32_t *ids, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = TM_BYTE0 + (int32_t)((seed >> 33) % (uint64_t)(tm_vocab_size() - TM_BYTE0));
    }
    ids[0] = TM_BOS;
}

static inline int32_t argmax(const float *l, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return (int32_t)best;
}

/* The reference: ids evaluated alone in a fresh engine (no index, one pass), then `steps` greedy tokens one
 * at a time; logits after the prompt and after each token into ref ((steps + 1) x V), tokens into out. */
static inline void reference(const gm_model *m, int threads, gm_kv_dtype kt, const int32_t *ids, int n, int steps,
                      float *ref, int32_t *out) {
    gm_engine *e = new_engine(m, threads, 512, false, 0, kt);
    if (!e) return;
    gm_seq *s = new_seq(e);
    gm_error err = {0};
    CHECK_OK(gm_seq_append(s, ids, n, &err), &err);
    for (int t = 0; t <= steps; t++) {
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        const float *l = gm_seq_logits(s);
        if (!l) break;
        memcpy(ref + (size_t)t * V, l, (size_t)V * sizeof *l);
        if (t == steps) break;
        out[t] = argmax(l, V);
        CHECK_OK(gm_seq_append(s, &out[t], 1, &err), &err);
    }
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
}


/* Writes the four models (PATH[0..3]); false after printing why. */
static inline bool ef_setup(void) {
    for (int a = 0; a < 4; a++) {
        tm_options o;
        tm_options_default(&o, ARCHS[a < 3 ? a : 2]);
        o.n_layers = a == 2 ? 6 : 3; /* gemma3: layer 5 global, the rest sliding */
        o.sliding_window = 8;
        o.context_length = 1024;
        if (a == 1) o.attn_softcap = 5.0f, o.final_softcap = 10.0f;
        if (a == 3) o.weight_type = GM_TYPE_Q5_0, o.down_type = GM_TYPE_Q6_K, o.embd_type = GM_TYPE_Q8_0, o.d_ff = 256;
        snprintf(PATH[a], sizeof PATH[a], "/tmp/gm_test_engine_%d_%s%s.gguf", (int)getpid(), ARCHS[a < 3 ? a : 2],
                 a == 3 ? "_q" : "");
        char err[256];
        if (!tm_write_gguf(&o, PATH[a], err, sizeof err)) {
            fprintf(stderr, "cannot write %s: %s\n", PATH[a], err);
            return false;
        }
    }
    V = tm_vocab_size();
    return true;
}

static inline void ef_cleanup(void) {
    for (int a = 0; a < 4; a++) unlink(PATH[a]);
}

#endif
