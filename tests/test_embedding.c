/* tests/test_embedding.c — EmbeddingGemma (arch gemma-embedding) against llama.cpp on tiny synthetic GGUFs.
 *
 * tests/gen/gen_embedding_fixtures.py wrote the models with the `gguf` Python package (d=32, 6 layers,
 * sliding window 8, layer 5 global; plain.gguf without and dense.gguf with dense_2 {32->48} / dense_3
 * {48->32}) and llama.cpp's outputs for sequences of 20, 70 and 3 tokens (F32 weights and K/V, pooling
 * MEAN, one ubatch): the pooled vectors and, for plain.gguf, every token's final-normed hidden state.
 * What separates the engines is rounding only (llama.cpp's GELU reads an f16 table). Tolerances: cosine
 * distance <= 1e-4 and max |diff| <= 2e-3 per component (components are ~0.1-1). A wrong mask (causal, or
 * a one-sided or off-by-one window) moves the vectors by far more: a window one wider gave cosine
 * distances of 0.005-0.03 and max |diff| 0.07-0.13; a causal pass is measured below. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_generator.h"
#include "engine/engine.h"
#include "support/gguf_writer.h"
#include "support/test.h"

#define MAX_SEQ 4
#define MAX_TOK 128
#define DIM 32
#define COS_TOL 1e-4
#define ABS_TOL 2e-3

typedef struct {
    int n_seq;
    int n_tok[MAX_SEQ];
    int32_t tok[MAX_SEQ][MAX_TOK];
    float pooled[MAX_SEQ][DIM];
    float *rows[MAX_SEQ]; /* n_tok x DIM, or NULL */
} fixture;

static void free_fixture(fixture *fx) {
    for (int i = 0; i < MAX_SEQ; i++) free(fx->rows[i]);
}

static int read_floats(char *p, float *out, int max) {
    int n = 0;
    for (char *end;; n++) {
        float v = strtof(p, &end);
        if (end == p || n == max) break;
        out[n] = v, p = end;
    }
    return n;
}

static bool load_fixture(const char *path, fixture *fx) {
    size_t len;
    char *text = (char *)test_read_file(path, &len);
    if (!text) return false;
    memset(fx, 0, sizeof *fx);
    bool ok = true;
    int s = -1;
    for (char *line = strtok(text, "\n"); line && ok; line = strtok(NULL, "\n")) {
        char *p = line;
        if (!strncmp(line, "seq ", 4)) {
            if (++s >= MAX_SEQ) break;
            fx->n_seq = s + 1;
            fx->n_tok[s] = (int)strtol(p + 4, &p, 10);
            ok = fx->n_tok[s] > 0 && fx->n_tok[s] <= MAX_TOK;
            for (int i = 0; ok && i < fx->n_tok[s]; i++) fx->tok[s][i] = (int32_t)strtol(p, &p, 10);
        } else if (!strncmp(line, "pooled ", 7) && s >= 0) {
            ok = read_floats(p + 7, fx->pooled[s], DIM) == DIM;
        } else if (!strncmp(line, "tok ", 4) && s >= 0) {
            const int i = (int)strtol(p + 4, &p, 10);
            if (!fx->rows[s]) fx->rows[s] = calloc((size_t)fx->n_tok[s] * DIM, sizeof(float));
            ok = i >= 0 && i < fx->n_tok[s] && read_floats(p, fx->rows[s] + (size_t)i * DIM, DIM) == DIM;
        }
    }
    free(text);
    return ok && fx->n_seq == 3;
}

static double cos_dist(const float *a, const float *b, int n) {
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return 1.0 - ab / sqrt(aa * bb);
}

static double max_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fabs((double)a[i] - b[i]) > m ? fabs((double)a[i] - b[i]) : m;
    return m;
}

static gm_model *open_model(const char *name) {
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(test_data_path(name), NULL, &m, &err), &err);
    return m;
}

/* Pooled vectors of the file at path against llama.cpp's, at 1 and 2 threads (same bits). */
static void pooled_parity_at(const char *path, const char *ref) {
    char gguf[4096];
    snprintf(gguf, sizeof gguf, "%s", path);
    fixture fx;
    CHECK(load_fixture(test_data_path(ref), &fx));
    gm_error open_err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(gguf, NULL, &m, &open_err), &open_err);
    if (!m || fx.n_seq != 3) return;
    const gm_config *c = gm_model_config(m);
    CHECK(c->is_embedding);
    CHECK_EQ_INT(c->embedding_dim, DIM);
    CHECK_EQ_INT(c->pooling, GM_POOLING_MEAN);
    gm_error err = {0};
    gm_embedder *e1 = NULL, *e2 = NULL;
    CHECK_OK(gm_embedder_new(m, &(gm_embedder_options){.n_threads = gm_test_threads(1)}, &e1, &err), &err);
    CHECK_OK(gm_embedder_new(m, &(gm_embedder_options){.n_threads = gm_test_threads(2), .n_ctx = 100}, &e2, &err), &err);
    for (int s = 0; e1 && e2 && s < fx.n_seq; s++) {
        float v[DIM], w[DIM];
        CHECK_OK(gm_embed_tokens(e1, fx.tok[s], fx.n_tok[s], v, &err), &err);
        CHECK_OK(gm_embed_tokens(e2, fx.tok[s], fx.n_tok[s], w, &err), &err);
        CHECK(!memcmp(v, w, sizeof v));
        const double cd = cos_dist(v, fx.pooled[s], DIM), md = max_diff(v, fx.pooled[s], DIM);
        const char *file = strrchr(gguf, '/') ? strrchr(gguf, '/') + 1 : gguf;
        fprintf(stderr, "  %s, %d tokens: cosine distance %.3g, max |diff| %.3g\n", file, fx.n_tok[s], cd, md);
        CHECK_MSG(cd <= COS_TOL, "cosine distance %g", cd);
        CHECK_MSG(md <= ABS_TOL, "max |diff| %g", md);
        /* normalisation is the caller's: unit length, same direction */
        gm_embedding_normalize(v, DIM);
        double n2 = 0;
        for (int i = 0; i < DIM; i++) n2 += (double)v[i] * v[i];
        CHECK_NEAR(n2, 1.0, 1e-6);
    }
    gm_embedder_free(e1);
    gm_embedder_free(e2);
    gm_model_free(m);
    free_fixture(&fx);
}

static void pooled_parity(const char *gguf, const char *ref) { pooled_parity_at(test_data_path(gguf), ref); }

TEST(plain_matches_llama_cpp) { pooled_parity("embedding/plain.gguf", "embedding/plain.emb.txt"); }
TEST(dense_matches_llama_cpp) { pooled_parity("embedding/dense.gguf", "embedding/dense.emb.txt"); }

/* Every token's final-normed hidden state (before pooling) against llama.cpp's pooling-NONE output; and the
 * same pass with causal attention must be far off (the check can fail). */
TEST(token_states_match_llama_cpp) {
    fixture fx;
    CHECK(load_fixture(test_data_path("embedding/plain.emb.txt"), &fx));
    gm_model *m = open_model("embedding/plain.gguf");
    if (!m || fx.n_seq != 3) return;
    gm_error err = {0};
    gm_engine *e = NULL;
    gm_seq *sq = NULL;
    CHECK_OK(gm_engine_create(m, &(gm_engine_options){.n_threads = gm_test_threads(2), .n_ctx = 128, .n_batch = 128,
                                                       .no_prefix_cache = true}, &e, &err), &err);
    if (e) CHECK_OK(gm_seq_new(e, &sq, &err), &err);
    float *h = malloc(sizeof(float) * MAX_TOK * DIM);
    for (int s = 0; sq && s < fx.n_seq; s++) {
        const int n = fx.n_tok[s];
        CHECK(fx.rows[s] != NULL);
        if (!fx.rows[s]) continue;
        for (int causal = 0; causal < 2; causal++) {
            CHECK_OK(gm_seq_truncate(sq, 0, &err), &err);
            CHECK_OK(gm_seq_append(sq, fx.tok[s], n, &err), &err);
            const gm_eval_extras x = {.no_adopt = true, .bidirectional = !causal, .hidden_out = h};
            CHECK_OK(gm_engine_eval_ex(e, sq, &x, &err), &err);
            const double md = max_diff(h, fx.rows[s], n * DIM);
            if (!causal) {
                fprintf(stderr, "  %d tokens: per-token hidden states max |diff| %.3g\n", n, md);
                CHECK_MSG(md <= ABS_TOL, "max |diff| %g", md);
            } else if (n > 1) {
                fprintf(stderr, "  %d tokens: causal attention instead: max |diff| %.3g\n", n, md);
                CHECK_MSG(md > 0.05, "a causal pass should not match (max |diff| %g)", md);
            }
        }
    }
    free(h);
    gm_seq_free(sq);
    gm_engine_free(e);
    gm_model_free(m);
    free_fixture(&fx);
}

/* Text: BOS as the tokenizer says, then the same vector as the ids. */
TEST(text_equals_tokens) {
    gm_model *m = open_model("embedding/plain.gguf");
    if (!m) return;
    gm_error err = {0};
    gm_embedder *e = NULL;
    CHECK_OK(gm_embedder_new(m, NULL, &e, &err), &err);
    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "task: search result | query: the cat";
    CHECK_OK(gm_embed_tokenize(m, text, strlen(text), &ids, &n, &err), &err);
    CHECK(n > 2 && ids && ids[0] == 2 && ids[n - 1] != 1); /* BOS, no EOS: add_eos_token is false here */
    float a[DIM], b[DIM];
    int nt = 0;
    if (e && ids) {
        CHECK_OK(gm_embed_text(e, text, strlen(text), a, &nt, &err), &err);
        CHECK_OK(gm_embed_tokens(e, ids, (int)n, b, &err), &err);
        CHECK_EQ_INT(nt, n);
        CHECK(!memcmp(a, b, sizeof a));
        CHECK_EQ_INT(gm_embedder_dim(e), DIM);
        CHECK_EQ_INT(gm_embedder_n_ctx(e), 128);
    }
    free(ids);
    gm_embedder_free(e);
    gm_model_free(m);
}

TEST(bad_inputs_are_errors) {
    gm_model *m = open_model("embedding/plain.gguf");
    if (!m) return;
    gm_error err = {0};
    gm_embedder *e = NULL;
    CHECK_OK(gm_embedder_new(m, &(gm_embedder_options){.n_ctx = 16}, &e, &err), &err);
    float v[DIM];
    int32_t ids[20] = {2, 7, 8, 9};
    if (e) {
        CHECK_EQ_INT(gm_embed_tokens(e, ids, 0, v, &err), GM_ERR_ARG);
        CHECK_EQ_INT(gm_embed_tokens(e, ids, 20, v, &err), GM_ERR_CONTEXT);
        CHECK(strstr(err.msg, "context") != NULL);
        ids[1] = 300;
        CHECK_EQ_INT(gm_embed_tokens(e, ids, 4, v, &err), GM_ERR_ARG);
        ids[1] = -1;
        CHECK_EQ_INT(gm_embed_tokens(e, ids, 4, v, &err), GM_ERR_ARG);
        ids[1] = 7; /* and the embedder still works afterwards */
        CHECK_OK(gm_embed_tokens(e, ids, 4, v, &err), &err);
    }
    gm_embedder *bad = NULL;
    CHECK_EQ_INT(gm_embedder_new(m, &(gm_embedder_options){.n_ctx = 129}, &bad, &err), GM_ERR_ARG);
    gm_embedder_free(e);
    gm_model_free(m);
}

/* An embedding model cannot generate; a generator cannot embed. */
TEST(refusals) {
    gm_model *m = open_model("embedding/plain.gguf");
    gm_error err = {0};
    gm_engine *e = NULL;
    gm_generator *g = NULL;
    if (m) {
        CHECK_EQ_INT(gm_engine_new(m, NULL, &e, &err), GM_ERR_UNSUPPORTED);
        CHECK(strstr(err.msg, "embedding model") != NULL);
        CHECK_EQ_INT(gm_generator_new(m, NULL, &g, &err), GM_ERR_UNSUPPORTED);
        CHECK(e == NULL && g == NULL);
    }
    gm_model_free(m);
    gm_model *t = open_model("tiny/gemma3.gguf");
    gm_embedder *em = NULL;
    if (t) {
        CHECK(!gm_model_config(t)->is_embedding);
        CHECK_EQ_INT(gm_embedder_new(t, NULL, &em, &err), GM_ERR_UNSUPPORTED);
        CHECK(strstr(err.msg, "not an embedding model") != NULL);
        CHECK(em == NULL);
    }
    gm_model_free(t);
}

TEST(bad_files_are_refused) {
    static const struct { const char *file, *needle; gm_status st; } cases[] = {
        {"embedding/bad_dense_nokeys.gguf", "dense_2_feat_in", GM_ERR_FORMAT},
        {"embedding/bad_dense_shape.gguf", "dense_2.weight has shape", GM_ERR_FORMAT},
        {"embedding/bad_dense_chain.gguf", "dense_3", GM_ERR_FORMAT},
    };
    gm_error ok_err = {0};
    gm_model *ok = NULL; /* the same small file, valid (the fuzz seed) */
    CHECK_OK(gm_model_open(test_data_path("embedding/tiny_dense.gguf"), NULL, &ok, &ok_err), &ok_err);
    CHECK(ok && gm_model_config(ok)->is_embedding && gm_model_config(ok)->embedding_dim == 8);
    gm_model_free(ok);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        gm_error err = {0};
        gm_model *m = NULL;
        const gm_status st = gm_model_open(test_data_path(cases[i].file), NULL, &m, &err);
        CHECK_MSG(st == cases[i].st && strstr(err.msg, cases[i].needle), "%s: status %d: %s", cases[i].file, st, err.msg);
        CHECK(m == NULL);
        gm_model_free(m);
    }
}

/* The layer pattern key in the forms llama.cpp 0.3.36 reads (load_swa_pattern), which our reader refused before
 * ("should be i32 but is array"): plain.gguf (6 layers, no key: layer 5 full) with its own pattern written as an
 * array or the number 6 gives llama.cpp's vectors; an array that does not repeat is read layer by layer. */
TEST(layer_pattern_forms) {
    char src[4096], path[600];
    snprintf(src, sizeof src, "%s", test_data_path("embedding/plain.gguf"));
    snprintf(path, sizeof path, "%s/gm_emb_pattern_%d.gguf", GM_BUILD_DIR, (int)getpid());
    static const struct { gguf_vtype elem; const char *flags; int n; } same[] = {
        {GGUF_VT_BOOL, "sssssf", 0}, {GGUF_VT_I32, "sssssf", 0}, {GGUF_VT_U32, NULL, 6}};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        CHECK(gw_copy_pattern(src, path, "gemma-embedding", same[i].elem, same[i].flags, same[i].n));
        test_check_layer_kinds(path, "sssssf", gguf_vtype_name(same[i].elem));
        pooled_parity_at(path, "embedding/plain.emb.txt");
    }
    CHECK(gw_copy_pattern(src, path, "gemma-embedding", GGUF_VT_BOOL, "sfssss", 0));
    test_check_layer_kinds(path, "sfssss", "a bool per layer, not repeating");
    fixture fx;
    CHECK(load_fixture(test_data_path("embedding/plain.emb.txt"), &fx));
    gm_error err = {0};
    gm_model *m = NULL;
    gm_embedder *e = NULL;
    CHECK_OK(gm_model_open(path, NULL, &m, &err), &err);
    if (m) CHECK_OK(gm_embedder_new(m, NULL, &e, &err), &err);
    for (int s = 0; e && s < fx.n_seq; s++) { /* layers 1 and 5 swapped kinds: windows apart past 5 tokens */
        float v[DIM];
        CHECK_OK(gm_embed_tokens(e, fx.tok[s], fx.n_tok[s], v, &err), &err);
        const double cd = cos_dist(v, fx.pooled[s], DIM);
        fprintf(stderr, "  not repeating, %d tokens: cosine distance %.3g from the file's own pattern\n", fx.n_tok[s], cd);
        CHECK_MSG(fx.n_tok[s] <= 5 ? cd <= COS_TOL : cd > 10 * COS_TOL, "%d tokens: cosine distance %g", fx.n_tok[s],
                  cd);
    }
    gm_embedder_free(e);
    gm_model_free(m);
    free_fixture(&fx);
    static const struct { gguf_vtype elem; const char *flags, *needle; } bad[] = {
        {GGUF_VT_F32, "sssssf", "is an array of f32"}, {GGUF_VT_BOOL, "sssss", "has 5 entries for 6 layers"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(gw_copy_pattern(src, path, "gemma-embedding", bad[i].elem, bad[i].flags, 0));
        m = NULL;
        const gm_status st = gm_model_open(path, NULL, &m, &err);
        CHECK_MSG(st != GM_OK && strstr(err.msg, bad[i].needle), "%s: status %d, \"%s\"", bad[i].needle, (int)st,
                  err.msg);
        gm_model_free(m);
    }
    unlink(path);
}

/* The sentence-transformers folder of dense.gguf (config.json + model.safetensors with norms as w, 1_Pooling,
 * 2_Dense / 3_Dense linear.weight, written by the generator from the GGUF's tensors) gives the GGUF's vectors:
 * the weights differ only by the +1 of the norms rounded through f32. */
TEST(hf_folder_equals_gguf) {
    fixture fx;
    CHECK(load_fixture(test_data_path("embedding/dense.emb.txt"), &fx));
    gm_model *g = open_model("embedding/dense.gguf"), *h = open_model("embedding/dense_hf");
    if (!g || !h) {
        gm_model_free(g);
        gm_model_free(h);
        return;
    }
    const gm_config *c = gm_model_config(h);
    CHECK(c->is_embedding && c->dense_2_in == 32 && c->dense_2_out == 48 && c->dense_3_in == 48 && c->dense_3_out == 32);
    CHECK_EQ_INT(c->embedding_dim, DIM);
    CHECK_EQ_INT(c->sliding_window, gm_model_config(g)->sliding_window);
    gm_error err = {0};
    gm_embedder *eg = NULL, *eh = NULL;
    CHECK_OK(gm_embedder_new(g, NULL, &eg, &err), &err);
    CHECK_OK(gm_embedder_new(h, NULL, &eh, &err), &err);
    for (int s = 0; eg && eh && s < fx.n_seq; s++) {
        float a[DIM], b[DIM];
        CHECK_OK(gm_embed_tokens(eg, fx.tok[s], fx.n_tok[s], a, &err), &err);
        CHECK_OK(gm_embed_tokens(eh, fx.tok[s], fx.n_tok[s], b, &err), &err);
        const double cd = cos_dist(a, b, DIM), md = max_diff(a, b, DIM);
        fprintf(stderr, "  HF folder vs GGUF, %d tokens: cosine distance %.3g, max |diff| %.3g\n", fx.n_tok[s], cd, md);
        CHECK_MSG(cd <= 1e-6 && md <= 1e-4, "cosine distance %g, max |diff| %g", cd, md);
        CHECK_MSG(cos_dist(b, fx.pooled[s], DIM) <= COS_TOL, "vs llama.cpp: %g", cos_dist(b, fx.pooled[s], DIM));
    }
    /* text through the folder's tokenizer.json: BOS added (tokenizer_config.json), same ids as the GGUF's */
    int32_t *ig = NULL, *ih = NULL;
    size_t ng = 0, nh = 0;
    CHECK_OK(gm_embed_tokenize(g, "the cat", 7, &ig, &ng, &err), &err);
    CHECK_OK(gm_embed_tokenize(h, "the cat", 7, &ih, &nh, &err), &err);
    CHECK(ng == nh && ng > 1 && ig && ih && !memcmp(ig, ih, ng * sizeof *ig));
    free(ig);
    free(ih);
    gm_embedder_free(eg);
    gm_embedder_free(eh);
    gm_model_free(g);
    gm_model_free(h);
    free_fixture(&fx);
}

/* add_eos_token in tokenizer_config.json: the text gets <eos> after it (EmbeddingGemma's own tokenizer adds
 * one). The folder is dense_hf with that one file changed (the others linked). */
TEST(add_eos_from_tokenizer_config) {
    char dir[] = "/tmp/gm_emb_eos_XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(false);
        return;
    }
    static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json", "modules.json"};
    char src[4096], dst[4096];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(src, sizeof src, "%s", test_data_path("embedding/dense_hf"));
        snprintf(src + strlen(src), sizeof src - strlen(src), "/%s", files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        CHECK(symlink(src, dst) == 0);
    }
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(dst, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("{\"bos_token\": \"<bos>\", \"eos_token\": \"<eos>\", \"add_bos_token\": true, \"add_eos_token\": true}", f);
        fclose(f);
    }
    gm_error err = {0};
    gm_model *m = NULL;
    CHECK_OK(gm_model_open(dir, NULL, &m, &err), &err);
    if (m) {
        CHECK(gm_model_config(m)->add_eos);
        int32_t *ids = NULL;
        size_t n = 0;
        CHECK_OK(gm_embed_tokenize(m, "the cat", 7, &ids, &n, &err), &err);
        CHECK(n > 2 && ids && ids[0] == 2 && ids[n - 1] == 1);
        free(ids);
        CHECK_OK(gm_embed_tokenize(m, "the cat<eos>", 12, &ids, &n, &err), &err); /* never two */
        CHECK(n > 2 && ids && ids[n - 1] == 1 && ids[n - 2] != 1);
        free(ids);
    }
    gm_model_free(m);
    for (size_t i = 0; i <= sizeof files / sizeof files[0]; i++) {
        snprintf(dst, sizeof dst, "%s/%s", dir, i < sizeof files / sizeof files[0] ? files[i] : "tokenizer_config.json");
        unlink(dst);
    }
    rmdir(dir);
}

int main(void) {
    RUN(plain_matches_llama_cpp);
    RUN(dense_matches_llama_cpp);
    RUN(token_states_match_llama_cpp);
    RUN(text_equals_tokens);
    RUN(bad_inputs_are_errors);
    RUN(refusals);
    RUN(bad_files_are_refused);
    RUN(layer_pattern_forms);
    RUN(hf_folder_equals_gguf);
    RUN(add_eos_from_tokenizer_config);
    return test_summary();
}
