/* tests/test_gemma4.c — Gemma 4 against llama.cpp on tiny synthetic GGUFs, and broken variants of them.
 *
 * The models (tests/gen/gen_gemma4_fixtures.py, committed under tests/data/gemma4/) have 7 layers: sliding
 * layers of head_dim 8 with 2 KV heads, full layers of head_dim 16 with 1 KV head and proportional partial
 * RoPE (rope_freqs: 2 of 8 pairs rotate), a full layer without attn_v (V = raw K), layers 5 and 6 reading
 * the K/V of layers 3 (sliding) and 4 (full), per-layer FFN widths, two layer output scales; window 8 and a
 * 40-token sequence. gemma4-ple adds per-layer embeddings (P = 8) and leaves final_logit_softcapping out
 * (llama.cpp's default 30 applies). llama.cpp's logits (F32 weights, F32 KV cache) for every position and
 * its greedy continuation of the first 12 tokens are in <stem>.logits.txt.
 *
 * What separates the engines is rounding only (llama.cpp's GELU reads an f16 table; op orders). Tolerance:
 * max |ours - llama.cpp| <= 1e-3 x the position's max |logit|, the same argmax everywhere, the same greedy
 * tokens. A real error (a norm's +1, the KV source layer, V from K after its norm, a RoPE factor, the output
 * scale) moves logits by far more. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "gemma.h"
#include "gemma_generator.h"
#include "support/gguf_writer.h"
#include "support/tiny_gemma4.h"
#include "support/test.h"

#define MAX_TOK 64
#define REL_TOL 1e-3

typedef struct {
    int n_tok, n_prompt, n_gen, n_vocab;
    int32_t tok[MAX_TOK], gen[MAX_TOK];
    float *logits; /* n_tok x n_vocab */
} fixture;

static bool load_fixture(const char *path, fixture *fx) {
    size_t len;
    char *text = (char *)test_read_file(path, &len);
    if (!text) return false;
    memset(fx, 0, sizeof *fx);
    int pos_seen = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *p = line, *end;
        if (!strncmp(line, "tokens ", 7)) {
            fx->n_tok = (int)strtol(p + 7, &p, 10);
            if (fx->n_tok <= 0 || fx->n_tok > MAX_TOK) break;
            for (int i = 0; i < fx->n_tok; i++) fx->tok[i] = (int32_t)strtol(p, &p, 10);
        } else if (!strncmp(line, "gen ", 4)) {
            fx->n_prompt = (int)strtol(p + 4, &p, 10);
            fx->n_gen = (int)strtol(p, &p, 10);
            if (fx->n_gen <= 0 || fx->n_gen > MAX_TOK) break;
            for (int i = 0; i < fx->n_gen; i++) fx->gen[i] = (int32_t)strtol(p, &p, 10);
        } else if (!strncmp(line, "pos ", 4)) {
            int pos = (int)strtol(p + 4, &p, 10);
            float row[4096];
            int n = 0;
            for (;; n++) {
                float v = strtof(p, &end);
                if (end == p || n == 4096) break;
                row[n] = v, p = end;
            }
            if (!fx->logits) {
                fx->n_vocab = n;
                fx->logits = malloc(sizeof(float) * (size_t)n * (size_t)fx->n_tok);
            }
            if (pos != pos_seen || n != fx->n_vocab || pos >= fx->n_tok) break;
            memcpy(fx->logits + (size_t)pos * (size_t)n, row, sizeof(float) * (size_t)n);
            pos_seen++;
        }
    }
    free(text);
    return fx->logits && pos_seen == fx->n_tok && fx->n_gen > 0;
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static const char *stem;     /* the variant under test */
static char model_path[512];
static fixture fx;
static float *first_run;     /* this variant's first check_logits run */

static void check_logits(int n_threads, int n_batch) {
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    CHECK_OK(gm_model_open(model_path, NULL, &m, &err), &err);
    gm_generator_options o = {.n_threads = gm_test_threads(n_threads), .n_ctx = 64, .n_batch = n_batch};
    if (m) CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (!g) goto out;
    CHECK_EQ_INT(gm_generator_config(g)->n_vocab, fx.n_vocab);
    float *ours = malloc(sizeof(float) * (size_t)fx.n_tok * (size_t)fx.n_vocab);
    CHECK_OK(gm_generator_prefill(g, fx.tok, fx.n_tok, &err), &err);
    CHECK_OK(gm_generator_score(g, ours, &err), &err);
    double worst = 0, max_diff = 0, max_abs = 0;
    int argmax_ok = 0;
    for (int p = 0; p < fx.n_tok; p++) {
        const float *a = ours + (size_t)p * (size_t)fx.n_vocab, *b = fx.logits + (size_t)p * (size_t)fx.n_vocab;
        double diff = 0, big = 0;
        for (int v = 0; v < fx.n_vocab; v++) {
            diff = fmax(diff, fabs((double)a[v] - (double)b[v]));
            big = fmax(big, fabs((double)b[v]));
        }
        if (getenv("GM_T4_VERBOSE")) fprintf(stderr, "    pos %d diff %.3g max %.3g\n", p, diff, big);
        worst = fmax(worst, diff / big);
        max_diff = fmax(max_diff, diff);
        max_abs = fmax(max_abs, big);
        argmax_ok += argmax(a, fx.n_vocab) == argmax(b, fx.n_vocab);
    }
    fprintf(stderr,
            "  %s (%d threads, batch %d): max |ours - llama.cpp| = %.3g (max |logit| %.2f), worst relative to the "
            "position's max |logit| %.3g, argmax %d/%d\n",
            stem, n_threads, n_batch, max_diff, max_abs, worst, argmax_ok, fx.n_tok);
    CHECK_MSG(worst <= REL_TOL, "%s: relative diff %g > %g", stem, worst, REL_TOL);
    CHECK_EQ_INT(argmax_ok, fx.n_tok);
    /* a row's results do not depend on the batch or the threads */
    if (!first_run) first_run = ours, ours = NULL;
    else CHECK_MSG(!memcmp(first_run, ours, sizeof(float) * (size_t)fx.n_tok * (size_t)fx.n_vocab),
                   "%s: logits with %d threads, batch %d differ from the first run's", stem, n_threads, n_batch);
    free(ours);
out:
    gm_generator_free(g);
    gm_model_free(m);
}

TEST(logits_match_llama_cpp) { check_logits(1, 0); }
TEST(logits_match_llama_cpp_2_threads_batch_5) { check_logits(2, 5); }

TEST(greedy_matches_llama_cpp) {
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    CHECK_OK(gm_model_open(model_path, NULL, &m, &err), &err);
    gm_generator_options o = {.n_threads = gm_test_threads(2), .n_ctx = 64, .ignore_stop = true};
    if (m) CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (g) {
        int32_t out[MAX_TOK];
        int n_out = 0;
        gm_sampling s = gm_sampling_default();
        CHECK_OK(gm_generator_prefill(g, fx.tok, fx.n_prompt, &err), &err);
        CHECK_OK(gm_generator_generate_cached(g, fx.n_gen, &s, out, &n_out, &err), &err);
        CHECK_EQ_INT(n_out, fx.n_gen);
        int same = 0;
        while (same < n_out && out[same] == fx.gen[same]) same++;
        fprintf(stderr, "  %s greedy: %d/%d tokens as llama.cpp\n", stem, same, fx.n_gen);
        CHECK_EQ_INT(same, fx.n_gen);
    }
    gm_generator_free(g);
    gm_model_free(m);
}

TEST(perplexity_matches_llama_cpp) {
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    CHECK_OK(gm_model_open(model_path, NULL, &m, &err), &err);
    gm_generator_options o = {.n_threads = gm_test_threads(2), .n_ctx = 64, .n_batch = 16};
    if (m) CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (g) {
        float lp[MAX_TOK];
        CHECK_OK(gm_generator_prefill(g, fx.tok, fx.n_tok, &err), &err);
        CHECK_OK(gm_generator_score_logprobs(g, lp, &err), &err);
        double nll = 0, ref = 0, worst = 0;
        for (int p = 0; p + 1 < fx.n_tok; p++) {
            const float *l = fx.logits + (size_t)p * (size_t)fx.n_vocab;
            double mx = l[0], z = 0;
            for (int v = 1; v < fx.n_vocab; v++) mx = fmax(mx, l[v]);
            for (int v = 0; v < fx.n_vocab; v++) z += exp(l[v] - mx);
            const double r = l[fx.tok[p + 1]] - mx - log(z);
            worst = fmax(worst, fabs(r - lp[p]));
            nll -= lp[p], ref -= r;
        }
        const int n = fx.n_tok - 1;
        fprintf(stderr, "  %s perplexity %.4f, llama.cpp's logits give %.4f (worst log-prob diff %.3g)\n", stem,
                exp(nll / n), exp(ref / n), worst);
        CHECK_MSG(worst <= 1e-2, "log-prob diff %g", worst);
        CHECK_MSG(fabs(exp(nll / n) / exp(ref / n) - 1.0) <= 1e-3, "perplexity %g vs %g", exp(nll / n), exp(ref / n));
    }
    gm_generator_free(g);
    gm_model_free(m);
}

/* ---- the engine: the paged KV cache with layers of different K/V widths (8 x 2 sliding, 16 x 1 full) and
 * layers without storage of their own; sequences batched together equal each alone, and a prefix adopted
 * from the index (past the window) gives the logits of a recomputation */

enum { ESEQ = 3, ESTEPS = 6, ECTX = 128 };

static gm_engine *new_engine(const gm_model *m, int threads, bool cache) {
    gm_error err = {0};
    gm_engine *e = NULL;
    gm_engine_options o = {.n_threads = gm_test_threads(threads), .n_ctx = ECTX, .n_batch = 16, .kv_mem = 8u << 20, .no_prefix_cache = !cache};
    CHECK_OK(gm_engine_new(m, &o, &e, &err), &err);
    return e;
}

static void random_ids(int32_t *ids, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = 6 + (int32_t)((seed >> 33) % (uint64_t)(fx.n_vocab - 6));
    }
    ids[0] = 2;
}

/* ids alone in a fresh engine (no index), then ESTEPS greedy tokens; logits after each into ref */
static void engine_reference(const gm_model *m, const int32_t *ids, int n, float *ref, int32_t *toks) {
    gm_engine *e = new_engine(m, 1, false);
    gm_seq *s = NULL;
    gm_error err = {0};
    if (e) CHECK_OK(gm_seq_new(e, &s, &err), &err);
    if (s) CHECK_OK(gm_seq_append(s, ids, n, &err), &err);
    for (int t = 0; s && t <= ESTEPS; t++) {
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        const float *l = gm_seq_logits(s);
        if (!l) break;
        memcpy(ref + (size_t)t * fx.n_vocab, l, sizeof(float) * (size_t)fx.n_vocab);
        if (t == ESTEPS) break;
        toks[t] = argmax(l, fx.n_vocab);
        CHECK_OK(gm_seq_append(s, &toks[t], 1, &err), &err);
    }
    gm_seq_free(s);
    if (e) CHECK_EQ_INT(gm_engine_free(e), GM_OK);
}

TEST(engine_batch_equals_alone) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(model_path, NULL, &m, &err), &err);
    if (!m) return;
    static const int lens[ESEQ] = {5, 40, 100};
    const size_t V = (size_t)fx.n_vocab;
    int32_t ids[ESEQ][100], toks[ESEQ][ESTEPS];
    float *ref = malloc(sizeof(float) * ESEQ * (ESTEPS + 1) * V);
    for (int i = 0; i < ESEQ; i++) {
        random_ids(ids[i], lens[i], 40 + (uint64_t)i);
        engine_reference(m, ids[i], lens[i], ref + (size_t)i * (ESTEPS + 1) * V, toks[i]);
    }
    gm_engine *e = new_engine(m, 2, true);
    gm_seq *s[ESEQ] = {0};
    for (int i = 0; e && i < ESEQ; i++) {
        CHECK_OK(gm_seq_new(e, &s[i], &err), &err);
        if (s[i]) CHECK_OK(gm_seq_append(s[i], ids[i], lens[i], &err), &err);
    }
    int bad = 0;
    for (int t = 0; e && s[ESEQ - 1] && t <= ESTEPS; t++) {
        CHECK_OK(gm_engine_eval(e, s, ESEQ, &err), &err);
        for (int i = 0; i < ESEQ; i++) {
            const float *l = gm_seq_logits(s[i]);
            bad += !l || memcmp(l, ref + ((size_t)i * (ESTEPS + 1) + (size_t)t) * V, sizeof(float) * V) != 0;
            if (t < ESTEPS) CHECK_OK(gm_seq_append(s[i], &toks[i][t], 1, &err), &err);
        }
    }
    fprintf(stderr, "  %s engine: %d of %d logit rows differ between batched and alone\n", stem, bad, ESEQ * (ESTEPS + 1));
    CHECK_EQ_INT(bad, 0);
    for (int i = 0; i < ESEQ; i++) gm_seq_free(s[i]);
    if (e) CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    gm_model_free(m);
}

TEST(engine_prefix_reuse_past_window) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(model_path, NULL, &m, &err), &err);
    if (!m) return;
    const size_t V = (size_t)fx.n_vocab;
    int32_t ids[110], other[110], unused[ESTEPS];
    random_ids(ids, 110, 21);
    memcpy(other, ids, 80 * sizeof *other);
    random_ids(other + 80, 30, 22);
    other[80] = 7;
    float *ref = malloc(sizeof(float) * (ESTEPS + 1) * V);
    engine_reference(m, other, 110, ref, unused);
    gm_engine *e = new_engine(m, 2, true);
    gm_seq *s1 = NULL, *s2 = NULL;
    if (e) CHECK_OK(gm_seq_new(e, &s1, &err), &err);
    if (e) CHECK_OK(gm_seq_new(e, &s2, &err), &err);
    if (s1 && s2) {
        CHECK_OK(gm_seq_append(s1, ids, 110, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s1, 1, &err), &err);
        CHECK_OK(gm_seq_append(s2, other, 110, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s2, 1, &err), &err);
        fprintf(stderr, "  %s prefix reuse: %d positions adopted\n", stem, gm_seq_n_reused(s2));
        CHECK_EQ_INT(gm_seq_n_reused(s2), GM_KV_BLOCK);
        CHECK_MSG(gm_seq_logits(s2) && !memcmp(gm_seq_logits(s2), ref, sizeof(float) * V),
                  "logits after a reused prefix differ from recomputation");
    }
    gm_seq_free(s1);
    gm_seq_free(s2);
    if (e) CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(ref);
    gm_model_free(m);
}

/* ---- broken variants: the dense file copied with one key or tensor dropped or replaced, refused at open
 * with a message that names the problem */

typedef gw_edit edit; /* a key or tensor dropped; add: replacement keys / extra tensors */

static void refused(const edit *ed, const char *what, const char *needle) {
    char path[600];
    snprintf(path, sizeof path, "%s/gm_bad_gemma4_%d.gguf", getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    CHECK_MSG(gw_copy_gguf(model_path, path, ed), "%s: cannot write the variant", what);
    gm_error err = {0};
    gm_model *m = NULL;
    gm_status st = gm_model_open(path, NULL, &m, &err);
    CHECK_MSG(st != GM_OK && strstr(err.msg, needle), "%s: status %d, message \"%s\" (wanted \"%s\")", what, (int)st,
              err.msg, needle);
    gm_model_free(m);
    unlink(path);
}

static void kv6(gw_writer *w) {
    const uint32_t v[6] = {2, 1, 2, 2, 1, 2};
    gw_add_arr(w, "gemma4.attention.head_count_kv", GGUF_VT_U32, 6, v);
}
static void ff8(gw_writer *w) {
    const uint32_t v[8] = {48, 48, 64, 48, 48, 96, 96, 96};
    gw_add_arr(w, "gemma4.feed_forward_length", GGUF_VT_U32, 8, v);
}
static void shared7(gw_writer *w) { gw_add_u32(w, "gemma4.attention.shared_kv_layers", 7); }
static void shared6(gw_writer *w) { gw_add_u32(w, "gemma4.attention.shared_kv_layers", 6); }
static void shared3(gw_writer *w) { gw_add_u32(w, "gemma4.attention.shared_kv_layers", 3); }
static void pattern_short(gw_writer *w) {
    const uint8_t b[5] = {1, 0, 1, 1, 0};
    gw_add_arr(w, "gemma4.attention.sliding_window_pattern", GGUF_VT_BOOL, 5, b);
}
static void pattern_f32(gw_writer *w) {
    const float v[7] = {1, 0, 1, 1, 0, 1, 1};
    gw_add_arr(w, "gemma4.attention.sliding_window_pattern", GGUF_VT_F32, 7, v);
}
static void vlen_swa(gw_writer *w) { gw_add_u32(w, "gemma4.attention.value_length_swa", 16); }
static void experts(gw_writer *w) { gw_add_u32(w, "gemma4.expert_count", 4); }
static void router(gw_writer *w) {
    static float z[32 * 4];
    const int64_t ne[2] = {32, 4};
    gw_add_tensor_f32(w, "blk.2.ffn_gate_inp.weight", GM_TYPE_F32, 2, ne, z);
}
static void kv_heads_3(gw_writer *w) { /* consumer layer 6 (reads layer 4, 1 KV head) with 2 */
    const uint32_t v[7] = {2, 1, 2, 2, 1, 2, 2};
    gw_add_arr(w, "gemma4.attention.head_count_kv", GGUF_VT_U32, 7, v);
}

TEST(bad_variants_are_refused) {
    refused(&(edit){.drop_key = "gemma4.attention.sliding_window_pattern"}, "no layer pattern", "sliding_window_pattern");
    refused(&(edit){.drop_key = "gemma4.attention.sliding_window_pattern", .add = pattern_short}, "short layer pattern",
            "has 5 entries for 7 layers");
    refused(&(edit){.drop_key = "gemma4.attention.sliding_window_pattern", .add = pattern_f32},
            "layer pattern of floats", "is an array of f32");
    refused(&(edit){.drop_key = "gemma4.attention.head_count_kv", .add = kv6}, "short KV-head array",
            "head_count_kv has 6 entries for 7 layers");
    refused(&(edit){.drop_key = "gemma4.feed_forward_length", .add = ff8}, "long FFN array",
            "feed_forward_length has 8 entries for 7 layers");
    refused(&(edit){.drop_key = "gemma4.attention.key_length_swa"}, "no sliding head size", "key_length_swa");
    refused(&(edit){.drop_key = "gemma4.attention.value_length_swa", .add = vlen_swa}, "K/V lengths differ",
            "equal key and value lengths");
    refused(&(edit){.drop_key = "gemma4.attention.shared_kv_layers", .add = shared7}, "every layer shared",
            "with only 7 layers");
    refused(&(edit){.drop_key = "gemma4.attention.shared_kv_layers", .add = shared6}, "sharing from layer 1",
            "do not exist");
    refused(&(edit){.drop_key = "gemma4.attention.shared_kv_layers", .add = shared3}, "sharing from a sliding pair",
            "layer 3 must be full");
    refused(&(edit){.drop_key = "gemma4.attention.head_count_kv", .add = kv_heads_3}, "consumer shape differs",
            "layer 6 shares the K/V of layer 4");
    refused(&(edit){.drop_tensor = "rope_freqs.weight"}, "no rope_freqs", "rope_freqs.weight");
    refused(&(edit){.drop_tensor = "blk.0.attn_k.weight"}, "no K on a layer with its own cache", "blk.0.attn_k.weight");
    refused(&(edit){.drop_tensor = "blk.3.attn_k_norm.weight"}, "no K norm", "blk.3.attn_k_norm.weight");
    refused(&(edit){.add = experts}, "expert_count without expert_used_count", "expert_used_count");
    refused(&(edit){.add = router}, "an MoE router tensor", "blk.2.ffn_gate_inp.weight");
}

static void used5(gw_writer *w) { gw_add_u32(w, "gemma4.expert_used_count", 5); }
static void experts300(gw_writer *w) { gw_add_u32(w, "gemma4.expert_count", 300); }
static void down_3_experts(gw_writer *w) { /* layer 5's down experts: 3 where the router has 4 */
    static float z[16 * 32 * 3];
    const int64_t ne[3] = {16, 32, 3};
    gw_add_tensor_f32(w, "blk.5.ffn_down_exps.weight", GM_TYPE_F32, 3, ne, z);
}
static void gate_wide(gw_writer *w) { /* layer 5's gate experts: width 24 where the key says 16 */
    static float z[32 * 24 * 4];
    const int64_t ne[3] = {32, 24, 4};
    gw_add_tensor_f32(w, "blk.5.ffn_gate_exps.weight", GM_TYPE_F32, 3, ne, z);
}

/* Mixture-of-experts files whose expert keys and tensors disagree. */
TEST(bad_moe_variants_are_refused) {
    refused(&(edit){.drop_key = "gemma4.expert_used_count", .add = used5}, "top 5 of 4 experts",
            "expert_used_count = 5 with 4 experts");
    refused(&(edit){.drop_key = "gemma4.expert_count", .add = experts300}, "300 experts", "300 experts");
    refused(&(edit){.drop_key = "gemma4.expert_feed_forward_length"}, "no expert width", "expert_feed_forward_length");
    refused(&(edit){.drop_tensor = "blk.5.ffn_down_exps.weight", .add = down_3_experts}, "3 down experts of 4",
            "blk.5.ffn_down_exps.weight");
    refused(&(edit){.drop_tensor = "blk.5.ffn_gate_exps.weight", .add = gate_wide}, "gate experts too wide",
            "blk.5.ffn_gate_exps.weight");
    refused(&(edit){.drop_tensor = "blk.5.ffn_up_exps.weight"}, "no up experts", "blk.5.ffn_up_exps.weight");
    refused(&(edit){.drop_tensor = "blk.2.ffn_gate_inp.scale"}, "no router scale", "blk.2.ffn_gate_inp.scale");
    refused(&(edit){.drop_tensor = "blk.2.post_ffw_norm_2.weight"}, "no expert output norm",
            "blk.2.post_ffw_norm_2.weight");
}

/* The per-layer facts as the engine sees them. */
TEST(layer_facts) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(model_path, NULL, &m, &err), &err);
    if (!m) return;
    static const int hd[7] = {8, 16, 8, 8, 16, 8, 16}, kv[7] = {2, 1, 2, 2, 1, 2, 1}, ff[7] = {48, 48, 64, 48, 48, 96, 96},
                     src[7] = {0, 1, 2, 3, 4, 3, 4};
    for (int il = 0; il < 7; il++) {
        const gm_layer_config *l = gm_model_layer(m, il);
        CHECK_EQ_INT(l->head_dim, hd[il]);
        CHECK_EQ_INT(l->n_kv_heads, kv[il]);
        CHECK_EQ_INT(l->d_ff, ff[il]);
        CHECK_EQ_INT(l->kv_source, src[il]);
        CHECK_EQ_INT(l->window, hd[il] == 8 ? 8 : 0);
        CHECK_EQ_INT(l->rope_dims, hd[il]);
    }
    CHECK(gm_model_config(m)->final_softcap == 30.0f);
    gm_model_free(m);
}

/* ---- the HF folder form of the same weights (tests/support/tiny_gemma4.c) */

/* All n_tok positions' logits of the model at path (1 thread, one batch). */
static float *logits_of(const char *path) {
    gm_error err = {0};
    gm_model *m = NULL;
    gm_generator *g = NULL;
    float *out = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    gm_generator_options o = {.n_threads = gm_test_threads(1), .n_ctx = 64};
    if (m) CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    if (g) {
        out = malloc(sizeof(float) * (size_t)fx.n_tok * (size_t)fx.n_vocab);
        CHECK_OK(gm_generator_prefill(g, fx.tok, fx.n_tok, &err), &err);
        if (gm_generator_score(g, out, &err) != GM_OK) free(out), out = NULL;
    }
    gm_generator_free(g);
    gm_model_free(m);
    return out;
}

static char hf_dir[512];

static bool write_hf(float softcap, bool text_only) {
    const char *tmp = getenv("TMPDIR");
    snprintf(hf_dir, sizeof hf_dir, "%s/gm_t4_hf_%d_%s%s", tmp && *tmp ? tmp : "/tmp", (int)getpid(), stem,
             text_only ? "_text" : "");
    char werr[256];
    const t4_hf_options o = {.softcap = softcap, .text_only = text_only};
    const bool ok = t4_gguf_to_hf(model_path, &o, hf_dir, werr, sizeof werr);
    CHECK_MSG(ok, "%s", werr);
    return ok;
}

static void remove_hf(void) {
    static const char *const files[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                        "model.safetensors.index.json", "model-00001-of-00002.safetensors",
                                        "model-00002-of-00002.safetensors"};
    char p[700];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", hf_dir, files[i]);
        unlink(p);
    }
    rmdir(hf_dir);
}

/* The HF folder with the soft-cap the GGUF applies gives the GGUF's logits: the math is the same where the
 * fixture sits (KV sharing from layers 3 and 4 under both rules; HF's unrotated pairs have angle 0 where
 * llama.cpp divides by 1e30, which leaves cos 1 and sin < 1e-28 - nothing in f32). Tolerance: 0, bit for bit. */
static void hf_equals_gguf(float softcap, bool text_only) {
    float *a = logits_of(model_path);
    float *b = write_hf(softcap, text_only) ? logits_of(hf_dir) : NULL;
    if (a && b) {
        double diff = 0;
        for (size_t i = 0; i < (size_t)fx.n_tok * (size_t)fx.n_vocab; i++) diff = fmax(diff, fabs((double)a[i] - b[i]));
        fprintf(stderr, "  %s HF folder%s vs GGUF: max |diff| %.3g over %d positions\n", stem,
                text_only ? " (gemma4_text)" : "", diff, fx.n_tok);
        CHECK_MSG(diff == 0.0, "%s: HF folder logits differ from the GGUF's by %g", stem, diff);
    }
    free(a);
    free(b);
    remove_hf();
}

static float variant_softcap(void) { return strcmp(stem, "gemma4-moe") ? 30.0f : 0.0f; }

TEST(hf_folder_equals_gguf) { hf_equals_gguf(variant_softcap(), false); }
TEST(hf_text_only_folder_equals_gguf) { hf_equals_gguf(variant_softcap(), true); }

/* final_logit_softcapping null (HF's default): no cap, where llama.cpp's GGUF default is 30. The uncapped
 * logits, capped here in double, must give the GGUF's (tolerance: f32 rounding of tanh, 1e-5 x 30). */
TEST(hf_null_softcap_is_no_cap) {
    float *a = logits_of(model_path);
    float *b = write_hf(-1.0f, false) ? logits_of(hf_dir) : NULL;
    if (a && b) {
        double diff = 0, raw = 0;
        for (size_t i = 0; i < (size_t)fx.n_tok * (size_t)fx.n_vocab; i++) {
            diff = fmax(diff, fabs(30.0 * tanh(b[i] / 30.0) - a[i]));
            raw = fmax(raw, fabs((double)b[i] - a[i]));
        }
        fprintf(stderr, "  %s HF soft-cap null: uncapped differ by %.3g, capped here by %.3g\n", stem, raw, diff);
        CHECK_MSG(raw > 1e-2, "null soft-cap should leave the logits uncapped (diff %g)", raw);
        CHECK_MSG(diff <= 3e-4, "capped HF logits differ by %g", diff);
    }
    free(a);
    free(b);
    remove_hf();
}

/* The per-layer facts of the HF folder are the GGUF's (the HF KV-sharing rule picks layers 3 and 4 too). */
TEST(hf_layer_facts) {
    gm_error err = {0};
    gm_model *g = NULL, *h = NULL;
    CHECK_OK(gm_model_open(model_path, NULL, &g, &err), &err);
    if (write_hf(30.0f, false)) CHECK_OK(gm_model_open(hf_dir, NULL, &h, &err), &err);
    if (g && h) {
        for (int il = 0; il < 7; il++) {
            const gm_layer_config *a = gm_model_layer(g, il), *b = gm_model_layer(h, il);
            CHECK_EQ_INT(b->head_dim, a->head_dim);
            CHECK_EQ_INT(b->n_heads, a->n_heads);
            CHECK_EQ_INT(b->n_kv_heads, a->n_kv_heads);
            CHECK_EQ_INT(b->d_ff, a->d_ff);
            CHECK_EQ_INT(b->kv_source, a->kv_source);
            CHECK_EQ_INT(b->window, a->window);
            CHECK_EQ_INT(b->rope_dims, a->rope_dims);
            CHECK(b->rope_base == a->rope_base);
        }
    }
    gm_model_free(g);
    gm_model_free(h);
    remove_hf();
}

/* The layer pattern as an int32 or uint32 array (llama.cpp's get_arr takes them as it takes bool): the same layers,
 * the same logits bit for bit. */
TEST(pattern_as_int_arrays) {
    char flags[64] = "", path[400];
    gguf_file *f = NULL;
    gm_error err = {0};
    CHECK_OK(gguf_open(model_path, NULL, &f, &err), &err);
    const gguf_kv *kv = f ? gguf_find(f, "gemma4.attention.sliding_window_pattern") : NULL;
    for (uint64_t i = 0; kv && i < kv->val.v.arr.n && i + 1 < sizeof flags; i++)
        flags[i] = kv->val.v.arr.data[i] ? 's' : 'f';
    gguf_close(f);
    CHECK(flags[0] != 0);
    const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(path, sizeof path, "%s/gm_gemma4_pattern_%d.gguf", tmp, (int)getpid());
    char saved[sizeof model_path];
    memcpy(saved, model_path, sizeof saved);
    const gguf_vtype elems[] = {GGUF_VT_I32, GGUF_VT_U32};
    for (int i = 0; i < 2; i++) {
        CHECK(gw_copy_pattern(saved, path, "gemma4", elems[i], flags, 0));
        snprintf(model_path, sizeof model_path, "%s", path);
        check_logits(1, 0); /* against the bool file's first run: bit for bit */
    }
    memcpy(model_path, saved, sizeof saved);
    unlink(path);
}

static void run_variant(const char *name, bool full, bool moe) {
    stem = name;
    char rel[128];
    snprintf(rel, sizeof rel, "gemma4/%s.logits.txt", name);
    const bool have = load_fixture(test_data_path(rel), &fx);
    CHECK_MSG(have, "cannot parse tests/data/%s", rel);
    snprintf(rel, sizeof rel, "gemma4/%s.gguf", name);
    snprintf(model_path, sizeof model_path, "%s", test_data_path(rel));
    if (have) {
        RUN(logits_match_llama_cpp);
        RUN(logits_match_llama_cpp_2_threads_batch_5);
        RUN(greedy_matches_llama_cpp);
        RUN(perplexity_matches_llama_cpp);
        RUN(engine_batch_equals_alone);
        RUN(engine_prefix_reuse_past_window);
        if (full) {
            RUN(layer_facts);
            RUN(pattern_as_int_arrays);
            RUN(bad_variants_are_refused);
        }
        if (moe) RUN(bad_moe_variants_are_refused);
        RUN(hf_folder_equals_gguf);
        if (full) {
            RUN(hf_text_only_folder_equals_gguf);
            RUN(hf_null_softcap_is_no_cap);
            RUN(hf_layer_facts);
        }
    }
    free(first_run);
    first_run = NULL;
    free(fx.logits);
    memset(&fx, 0, sizeof fx);
}

int main(void) {
    run_variant("gemma4-dense", true, false);
    run_variant("gemma4-ple", false, false);
    run_variant("gemma4-moe", false, true);
    return test_summary();
}
