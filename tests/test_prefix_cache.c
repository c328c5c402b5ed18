/* tests/test_prefix_cache.c — the prefix index and the KV pool through the engine (engine/engine.c, runtime/kvcache.c):
 * a sequence whose prefix comes from the index gets BIT-identical logits to computing it, past the sliding
 * window; block hashes keyed per engine and per scope; the tails of freed sequences repeated, extended, diverged
 * and forked; eviction under a small budget and the out-of-memory error; the default model's 700-token shared
 * prefix when present. */
#include "support/engine_fixture.h"
#include "engine/engine.h" /* the block hashes a sequence keeps (struct gm_seq) */

TEST(prefix_reuse_past_window) {
    for (int a = 1; a < 3; a++) {
        gm_model *m = open_model(a);
        if (!m) continue;
        int32_t ids[300], other[300];
        tokens(ids, 300, 21);
        memcpy(other, ids, 260 * sizeof *other);
        tokens(other + 260, 40, 22);
        other[260] = TM_BYTE0 + 5;
        float *ref = malloc((size_t)V * sizeof *ref);
        int32_t unused[1];
        reference(m, 2, GM_KV_DTYPE_F32, other, 300, 0, ref, unused);
        for (int keep_first = 0; keep_first < 2; keep_first++) {
            gm_error err = {0};
            gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
            gm_seq *s1 = new_seq(e), *s2 = new_seq(e);
            CHECK_OK(gm_seq_append(s1, ids, 300, &err), &err);
            CHECK_OK(gm_engine_eval(e, &s1, 1, &err), &err);
            if (!keep_first) {
                gm_seq_free(s1);
                s1 = NULL;
            }
            CHECK_OK(gm_seq_append(s2, other, 300, &err), &err);
            CHECK_OK(gm_engine_eval(e, &s2, 1, &err), &err);
            /* 4 full blocks of the 260 shared; once the first sequence is gone, its last block's first 4 rows too */
            const int want = keep_first ? 256 : 260;
            CHECK_MSG(gm_seq_n_reused(s2) == want, "%s: %d positions reused, expected %d (first sequence %s)", ARCHS[a],
                      gm_seq_n_reused(s2), want, keep_first ? "alive" : "freed");
            CHECK_MSG(gm_seq_logits(s2) && memcmp(gm_seq_logits(s2), ref, (size_t)V * sizeof *ref) == 0,
                      "%s: logits after a reused prefix differ from recomputation (first sequence %s)", ARCHS[a],
                      keep_first ? "alive" : "freed");
            gm_kv_stats st;
            gm_engine_kv_stats(e, &st);
            CHECK(st.reused_positions == want);
            gm_seq_free(s1);
            gm_seq_free(s2);
            CHECK_EQ_INT(gm_engine_free(e), GM_OK);
        }
        free(ref);
        gm_model_free(m);
    }
}

/* The prefix index's block hash is keyed per engine (a client cannot precompute collisions): the same
 * prompt hashes differently in two engines, alike within one, and reuse within an engine still works. */
TEST(block_hash_keyed_per_engine) {
    gm_model *m = open_model(2);
    if (!m) return;
    int32_t ids[130];
    tokens(ids, 130, 31);
    gm_error err = {0};
    gm_engine *e[2] = {new_engine(m, 1, 512, true, 0, GM_KV_DTYPE_F32), new_engine(m, 1, 512, true, 0, GM_KV_DTYPE_F32)};
    gm_seq *s[3] = {new_seq(e[0]), new_seq(e[1]), new_seq(e[0])};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(gm_seq_append(s[i], ids, 130, &err), &err);
        CHECK_OK(gm_engine_eval(e[i == 1], &s[i], 1, &err), &err);
        CHECK_EQ_INT(s[i]->kv.n_hashed, 2);
    }
    CHECK_MSG(s[0]->kv.hash[0] != s[1]->kv.hash[0] && s[0]->kv.hash[1] != s[1]->kv.hash[1],
              "two engines hash the same blocks alike: the hash is not keyed per engine");
    CHECK(s[0]->kv.hash[0] == s[2]->kv.hash[0] && s[0]->kv.hash[1] == s[2]->kv.hash[1]);
    CHECK_EQ_INT(gm_seq_n_reused(s[1]), 0);
    CHECK_EQ_INT(gm_seq_n_reused(s[2]), 128);
    CHECK(memcmp(gm_seq_logits(s[0]), gm_seq_logits(s[2]), (size_t)V * sizeof(float)) == 0);
    CHECK(memcmp(gm_seq_logits(s[0]), gm_seq_logits(s[1]), (size_t)V * sizeof(float)) == 0);
    for (int i = 0; i < 3; i++) gm_seq_free(s[i]);
    for (int i = 0; i < 2; i++) CHECK_EQ_INT(gm_engine_free(e[i]), GM_OK);
    gm_model_free(m);
}

/* Prefix-cache scopes: a sequence adopts only blocks entered under its own scope; logits are the same
 * bits whether reused or computed; a fork keeps the scope; the scope is fixed once anything is computed. */
TEST(prefix_scopes) {
    gm_model *m = open_model(2);
    if (!m) return;
    int32_t ids[200];
    tokens(ids, 200, 41);
    gm_error err = {0};
    gm_engine *e = new_engine(m, 1, 512, true, 0, GM_KV_DTYPE_F32);
    const uint64_t scope[5] = {7, 9, 7, 0, 0}; /* tenant 7, tenant 9, tenant 7 again, shared, shared */
    const int want[5] = {0, 0, 192, 0, 192};
    gm_seq *s[5];
    for (int i = 0; i < 5; i++) {
        s[i] = new_seq(e);
        CHECK_OK(gm_seq_set_prefix_scope(s[i], scope[i], &err), &err);
        CHECK_OK(gm_seq_append(s[i], ids, 200, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s[i], 1, &err), &err);
        CHECK_MSG(gm_seq_n_reused(s[i]) == want[i], "sequence %d (scope %llu): %d positions reused, expected %d", i,
                  (unsigned long long)scope[i], gm_seq_n_reused(s[i]), want[i]);
        CHECK(memcmp(gm_seq_logits(s[i]), gm_seq_logits(s[0]), (size_t)V * sizeof(float)) == 0);
    }
    CHECK_EQ_INT(gm_seq_set_prefix_scope(s[0], 9, &err), GM_ERR_STATE);
    CHECK_OK(gm_seq_set_prefix_scope(s[0], 7, &err), &err); /* the scope it has */
    CHECK_EQ_INT(gm_seq_set_prefix_scope(NULL, 7, &err), GM_ERR_ARG);
    for (int i = 0; i < 5; i++) gm_seq_free(s[i]);
    /* a fork continues under its parent's scope: a prompt only tenant 9 has seen, recomputed by a fork of
     * tenant 9's sequence, comes from tenant 9's blocks */
    int32_t own[200];
    tokens(own, 200, 42);
    gm_seq *t9 = new_seq(e), *f = NULL;
    CHECK_OK(gm_seq_set_prefix_scope(t9, 9, &err), &err);
    CHECK_OK(gm_seq_append(t9, own, 200, &err), &err);
    CHECK_OK(gm_engine_eval(e, &t9, 1, &err), &err);
    CHECK_OK(gm_seq_fork(t9, &f, &err), &err);
    CHECK_OK(gm_seq_set_prefix_scope(f, 9, &err), &err); /* computed, but the scope it has */
    gm_seq_free(t9);
    CHECK_OK(gm_seq_truncate(f, 0, &err), &err);
    CHECK_OK(gm_seq_append(f, own, 200, &err), &err);
    CHECK_OK(gm_engine_eval(e, &f, 1, &err), &err);
    CHECK_EQ_INT(gm_seq_n_reused(f), 199); /* 3 blocks, then t9's last block's rows: all but the last token */
    gm_seq *g = new_seq(e); /* the shared scope: nothing of tenant 9's, only the BOS row its own prompts began with */
    CHECK_OK(gm_seq_append(g, own, 200, &err), &err);
    CHECK_OK(gm_engine_eval(e, &g, 1, &err), &err);
    CHECK_EQ_INT(gm_seq_n_reused(g), 1);
    CHECK(memcmp(gm_seq_logits(f), gm_seq_logits(g), (size_t)V * sizeof(float)) == 0);
    gm_seq_free(f);
    gm_seq_free(g);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    gm_model_free(m);
}

/* ---------------------------------------------------------------- repeats: tails of freed sequences */

/* Rows computed by one gm_engine_step of s with room for everything pending. */
static int step_rows(gm_engine *e, gm_seq *s) {
    gm_error err = {0};
    int rows = -1;
    CHECK_OK(gm_engine_step(e, &s, 1, 512, &rows, &err), &err);
    return rows;
}

/* Greedy decoding of `steps` tokens after s's prompt: each step's logits equal ref's (steps + 1) x V. */
static bool decode_matches(gm_engine *e, gm_seq *s, const float *ref, const int32_t *rtok, int steps) {
    gm_error err = {0};
    bool ok = gm_seq_logits(s) && !memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref);
    for (int t = 0; t < steps && ok; t++) {
        CHECK_OK(gm_seq_append(s, &rtok[t], 1, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        ok = gm_seq_logits(s) && !memcmp(gm_seq_logits(s), ref + (size_t)(t + 1) * V, (size_t)V * sizeof *ref);
    }
    return ok;
}

/* A prompt repeated after the sequence that computed it is gone computes only its last token, whatever its
 * length (inside the first block, at and around block boundaries, past the window), with the bits of a fresh
 * engine, then decodes them too (the adopted block copied at its first write). Another tenant computes all. */
TEST(repeat_computes_last_token) {
    const int lens[] = {1, 2, 5, 63, 64, 65, 127, 128, 150, 200};
    enum { RSTEPS = 4 };
    for (int a = 0; a < 3; a += 2) { /* gemma: every layer global; gemma3: window 8 */
        gm_model *m = open_model(a);
        if (!m) continue;
        float *ref = malloc((size_t)(RSTEPS + 1) * V * sizeof *ref);
        int32_t ids[200], rtok[RSTEPS];
        gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
        gm_error err = {0};
        for (size_t c = 0; c < sizeof lens / sizeof *lens; c++) {
            const int L = lens[c];
            tokens(ids, L, 700 + c);
            reference(m, 1, GM_KV_DTYPE_F32, ids, L, RSTEPS, ref, rtok);
            gm_seq *first = new_seq(e);
            CHECK_OK(gm_seq_append(first, ids, L, &err), &err);
            CHECK_OK(gm_engine_eval(e, &first, 1, &err), &err);
            CHECK(decode_matches(e, first, ref, rtok, c % 2 ? 2 : 0)); /* with or without decoded rows after it */
            gm_seq_free(first);
            gm_kv_stats st0, st1;
            gm_engine_kv_stats(e, &st0);
            gm_seq *again = new_seq(e), *other = new_seq(e);
            CHECK_OK(gm_seq_set_prefix_scope(other, 99 + c, &err), &err); /* a tenant new to this engine */
            CHECK_OK(gm_seq_append(again, ids, L, &err), &err);
            CHECK_OK(gm_seq_append(other, ids, L, &err), &err);
            CHECK_MSG(step_rows(e, again) == 1, "%s, %d tokens: the repeat computed more than its last token", ARCHS[a], L);
            CHECK_EQ_INT(gm_seq_n_reused(again), L - 1);
            gm_engine_kv_stats(e, &st1);
            CHECK_EQ_INT(st1.reused_positions - st0.reused_positions, L - 1);
            CHECK_MSG(decode_matches(e, again, ref, rtok, RSTEPS), "%s, %d tokens: the repeat's logits differ", ARCHS[a], L);
            CHECK_MSG(step_rows(e, other) == L && gm_seq_n_reused(other) == 0, "%s, %d tokens: another scope reused %d",
                      ARCHS[a], L, gm_seq_n_reused(other));
            CHECK(decode_matches(e, other, ref, rtok, 0));
            gm_seq_free(again);
            gm_seq_free(other);
        }
        CHECK_EQ_INT(gm_engine_free(e), GM_OK);
        free(ref);
        gm_model_free(m);
    }
}

/* A prompt that extends a freed one inside its last block adopts all of it; one that parts inside it adopts
 * the rows before the difference; forks of an adopted tail (n choices) and a rollback into it stay exact, and
 * a fork's history, repeated once it is gone, again computes only its last token. */
TEST(repeat_extend_diverge_fork) {
    gm_model *m = open_model(2);
    if (!m) return;
    enum { L = 150 };
    int32_t ids[L + 40], other[L + 40], unused[1];
    tokens(ids, L + 40, 801);
    float *ref = malloc((size_t)V * sizeof *ref);
    gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
    gm_error err = {0};
    gm_seq *s = new_seq(e);
    CHECK_OK(gm_seq_append(s, ids, L, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    gm_seq_free(s);
    /* {tokens, position changed (-1: none), positions reused} */
    const int cases[][3] = {{L + 30, -1, L}, {L + 10, 140, 140}, {L, 128, 128}};
    for (size_t c = 0; c < 3; c++) {
        memcpy(other, ids, sizeof ids);
        if (cases[c][1] >= 0) other[cases[c][1]] = TM_BYTE0 + 3 + (other[cases[c][1]] == TM_BYTE0 + 3);
        s = new_seq(e);
        CHECK_OK(gm_seq_append(s, other, cases[c][0], &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        CHECK_MSG(gm_seq_n_reused(s) == cases[c][2], "case %zu: reused %d, want %d", c, gm_seq_n_reused(s), cases[c][2]);
        reference(m, 1, GM_KV_DTYPE_F32, other, cases[c][0], 0, ref, unused);
        CHECK_MSG(!memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref), "case %zu: logits differ", c);
        gm_seq_free(s);
    }
    /* three choices forked from a repeat, each its own next token, in one batch; then one rolls back into the
     * adopted rows and goes another way */
    gm_seq *head = new_seq(e), *f[3];
    CHECK_OK(gm_seq_append(head, ids, L, &err), &err);
    CHECK_EQ_INT(step_rows(e, head), 1);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(gm_seq_fork(head, &f[i], &err), &err);
        const int32_t t = TM_BYTE0 + 10 + i;
        CHECK_OK(gm_seq_append(f[i], &t, 1, &err), &err);
    }
    CHECK_OK(gm_engine_eval(e, f, 3, &err), &err);
    for (int i = 0; i < 3; i++) {
        memcpy(other, ids, L * sizeof *ids);
        other[L] = TM_BYTE0 + 10 + i;
        reference(m, 1, GM_KV_DTYPE_F32, other, L + 1, 0, ref, unused);
        CHECK_MSG(!memcmp(gm_seq_logits(f[i]), ref, (size_t)V * sizeof *ref), "fork %d differs", i);
    }
    CHECK_OK(gm_seq_truncate(f[0], 135, &err), &err);
    CHECK_OK(gm_seq_append(f[0], ids + L, 20, &err), &err);
    CHECK_OK(gm_engine_eval(e, &f[0], 1, &err), &err);
    memcpy(other, ids, 135 * sizeof *ids);
    memcpy(other + 135, ids + L, 20 * sizeof *ids);
    reference(m, 1, GM_KV_DTYPE_F32, other, 155, 0, ref, unused);
    CHECK_MSG(!memcmp(gm_seq_logits(f[0]), ref, (size_t)V * sizeof *ref), "rollback into the adopted rows differs");
    gm_seq_free(head);
    for (int i = 0; i < 3; i++) gm_seq_free(f[i]);
    memcpy(other, ids, L * sizeof *ids);
    other[L] = TM_BYTE0 + 11;
    reference(m, 1, GM_KV_DTYPE_F32, other, L + 1, 0, ref, unused);
    s = new_seq(e);
    CHECK_OK(gm_seq_append(s, other, L + 1, &err), &err);
    CHECK_EQ_INT(step_rows(e, s), 1);
    CHECK_MSG(!memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref), "fork 1's history repeated differs");
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    gm_model_free(m);
}

/* A small budget: cached blocks are evicted least recently used first and results stay exact; live
 * sequences that do not fit get GM_ERR_NOMEM with a message, not a crash. */
TEST(eviction_and_out_of_memory) {
    gm_model *m = open_model(2);
    if (!m) return;
    gm_error err = {0};
    gm_engine *probe = new_engine(m, 1, 64, true, 0, GM_KV_DTYPE_F32);
    gm_kv_stats st;
    gm_engine_kv_stats(probe, &st);
    gm_engine_free(probe);
    const size_t per_block = st.bytes_per_token * 64; /* a block of every group */
    float *ref = malloc((size_t)V * sizeof *ref);
    int32_t unused[1];
    gm_engine *e = new_engine(m, 2, 64, true, 8 * per_block, GM_KV_DTYPE_F32);
    for (int r = 0; r < 6; r++) {
        int32_t ids[200];
        tokens(ids, 200, 300 + (uint64_t)r % 3); /* three distinct prompts, twice each */
        gm_seq *s = new_seq(e);
        CHECK_OK(gm_seq_append(s, ids, 200, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        reference(m, 2, GM_KV_DTYPE_F32, ids, 200, 0, ref, unused);
        CHECK_MSG(gm_seq_logits(s) && memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref) == 0,
                  "round %d under a tight budget differs", r);
        gm_seq_free(s);
    }
    gm_engine_kv_stats(e, &st);
    CHECK_MSG(st.evictions > 0, "no eviction with a budget of 8 blocks (%lld)", (long long)st.evictions);
    CHECK(st.bytes_used <= st.bytes_budget);
    gm_engine_free(e);
    /* live sequences alone exceed the budget */
    e = new_engine(m, 1, 64, true, 2 * per_block, GM_KV_DTYPE_F32);
    gm_seq *s = new_seq(e);
    int32_t ids[400];
    tokens(ids, 400, 1);
    CHECK_OK(gm_seq_append(s, ids, 400, &err), &err);
    CHECK_EQ_INT(gm_engine_eval(e, &s, 1, &err), GM_ERR_NOMEM);
    CHECK_MSG(strstr(err.msg, "KV cache full") != NULL, "message: %s", err.msg);
    CHECK(gm_seq_logits(s) == NULL);
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    gm_model_free(m);
}

/* Positions computed from caller embeddings are not in the index: a sequence of the same ids computes its
 * own, and gets the logits of the ids. */
TEST(default_model_repeat) {
    if (!test_have_default_model(__func__)) return;
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(GM_DEFAULT_MODEL, NULL, &m, &err), &err);
    if (!m) return;
    const int Vr = gm_model_config(m)->n_vocab;
    enum { N = 700 };
    int32_t ids[N];
    uint64_t seed = 5;
    ids[0] = gm_model_config(m)->bos_id;
    for (int i = 1; i < N; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 1000 + (int32_t)((seed >> 33) % 20000);
    }
    float *want = malloc((size_t)Vr * sizeof *want);
    gm_engine_options plain = {.n_threads = gm_test_threads(2), .n_ctx = 1024, .n_batch = 512, .no_prefix_cache = true};
    gm_engine_options cached = {.n_threads = gm_test_threads(2), .n_ctx = 1024, .n_batch = 512};
    gm_engine *e0 = NULL, *e = NULL;
    CHECK_OK(gm_engine_new(m, &plain, &e0, &err), &err);
    CHECK_OK(gm_engine_new(m, &cached, &e, &err), &err);
    const int lens[2] = {N, 640};
    for (int c = 0; c < 2 && e0 && e; c++) {
        gm_seq *r = new_seq(e0), *s = new_seq(e);
        CHECK_OK(gm_seq_append(r, ids, lens[c], &err), &err);
        CHECK_OK(gm_engine_eval(e0, &r, 1, &err), &err);
        memcpy(want, gm_seq_logits(r), (size_t)Vr * sizeof *want);
        CHECK_OK(gm_seq_append(s, ids, lens[c], &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        gm_seq_free(s);
        s = new_seq(e);
        CHECK_OK(gm_seq_append(s, ids, lens[c], &err), &err);
        int rows = 0;
        CHECK_OK(gm_engine_step(e, &s, 1, 512, &rows, &err), &err);
        CHECK_MSG(rows == 1 && gm_seq_n_reused(s) == lens[c] - 1, "%d tokens: %d rows computed, %d reused", lens[c], rows,
                  gm_seq_n_reused(s));
        CHECK_MSG(gm_seq_logits(s) && !memcmp(want, gm_seq_logits(s), (size_t)Vr * sizeof *want),
                  "%d tokens: the repeat's logits differ", lens[c]);
        gm_seq_free(s);
        gm_seq_free(r);
    }
    gm_engine_free(e0);
    gm_engine_free(e);
    free(want);
    gm_model_free(m);
}

int main(int argc, char **argv) {
    if (!ef_setup()) return 1;
    const char *only = argc > 1 ? argv[1] : NULL;
#define MAYBE(t) \
    if (!only || !strcmp(only, #t)) RUN(t)
    MAYBE(prefix_reuse_past_window);
    MAYBE(block_hash_keyed_per_engine);
    MAYBE(prefix_scopes);
    MAYBE(repeat_computes_last_token);
    MAYBE(repeat_extend_diverge_fork);
    MAYBE(eviction_and_out_of_memory);
    MAYBE(default_model_repeat);
    ef_cleanup();
    return test_summary();
}
