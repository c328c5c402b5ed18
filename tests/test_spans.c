/* tests/test_spans.c — caller embeddings inside a history (engine/spans.c; gm_seq_append_embeds,
 * gm_generator_prefill_spans): embeddings never matched by token ids in the prefix index, an image's rows
 * attending both ways, images in the prefix cache by key, the tail of a history stopping at an image, and
 * generator turns around images. */
#include "support/engine_fixture.h"
#include "engine/engine.h" /* struct gm_seq: its block hashes */

TEST(embeddings_not_matched_by_ids) {
    gm_model *m = open_model(2);
    if (!m) return;
    const gm_config *c = gm_model_config(m);
    enum { N = 140 };
    int32_t ids[N];
    tokens(ids, N, 41);
    float *emb = malloc((size_t)N * c->d_model * sizeof *emb), *ref = malloc((size_t)V * sizeof *ref);
    for (int i = 0; i < N * c->d_model; i++) emb[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    gm_error err = {0};
    gm_generator *g = NULL;
    gm_generator_options o = {.n_threads = gm_test_threads(2), .n_ctx = 1024};
    CHECK_OK(gm_generator_new(m, &o, &g, &err), &err);
    CHECK_OK(gm_generator_prefill_from_embeds(g, ids, N, emb, NULL, NULL, &err), &err);
    gm_engine *e = gm_generator_engine(g);
    gm_seq *s = new_seq(e);
    CHECK_OK(gm_seq_append(s, ids, N, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    CHECK_EQ_INT(gm_seq_n_reused(s), 0);
    int32_t unused[1];
    reference(m, 2, GM_KV_DTYPE_F32, ids, N, 0, ref, unused);
    CHECK_MSG(gm_seq_logits(s) && memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref) == 0,
              "ids after an embeddings prefill of the same ids differ from ids alone");
    gm_seq_free(s);
    gm_generator_free(g);
    free(emb);
    free(ref);
    gm_model_free(m);
}

/* The evaluation doors of gm_row (embed, hidden, taps) on the multi-sequence call: a sequence fed its own
 * layer-0 inputs (tapped from a normal run) as embeddings gives the same bits as the tokens, next to another
 * sequence that is unaffected by it; its blocks never enter the prefix index. */
/* ---------------------------------------------------------------- images: embedding spans */

enum { IT = 70, IR = 40, IU = 30, IN = IT + IR + IU }; /* text, image rows, text */

/* layer-0 inputs of ids (the embedding lookup times its scale), from layer 0's taps */
static void token_inputs(gm_engine *e, const int32_t *ids, int n, float *out) {
    const int d = gm_model_config(gm_engine_model(e))->d_model, layer0[1] = {0};
    gm_error err = {0};
    CHECK_OK(gm_engine_set_taps(e, layer0, 1, &err), &err);
    gm_seq *s = new_seq(e);
    gm_row *rows = calloc((size_t)n, sizeof *rows);
    for (int i = 0; i < n; i++) rows[i] = (gm_row){.seq = s, .token = ids[i], .pos = i, .taps = out + (size_t)i * d};
    CHECK_OK(gm_engine_forward(e, rows, n, NULL, &err), &err);
    CHECK_OK(gm_engine_set_taps(e, NULL, 0, &err), &err);
    free(rows);
    gm_seq_free(s);
}

static void image_rows(float *x, int n, int d, uint64_t seed) {
    for (int i = 0; i < n * d; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((seed >> 40) % 2001) / 1000.0f - 1.0f;
    }
}

/* text, an image span (key, bidirectional), text */
static void append_image_prompt(gm_seq *s, const int32_t *ids, const float *img, uint64_t key, bool bidir) {
    gm_error err = {0};
    const gm_embed_span sp = {.embeds = img, .n = IR, .placeholder = 0, .key = {key, key ^ 77}, .bidirectional = bidir};
    CHECK_OK(gm_seq_append(s, ids, IT, &err), &err);
    CHECK_OK(gm_seq_append_embeds(s, &sp, &err), &err);
    CHECK_OK(gm_seq_append(s, ids + IT + IR, IU, &err), &err);
}

/* An image span's attention is the reference's (Gemma 3 in transformers: causal, and both ways inside the
 * image): the span through the engine against the whole prompt as embeddings under that explicit mask
 * (gm_generator_prefill_from_embeds_masked), on a model without sliding windows, within 1e-5 of the
 * largest logit; and a causal span gives other logits (the door is really open). */
TEST(image_span_attention) {
    gm_model *m = open_model(0);
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    int32_t ids[IN];
    tokens(ids, IN, 61);
    float *emb = malloc((size_t)IN * d * sizeof *emb), *mask = malloc((size_t)IN * IN * sizeof *mask);
    float *img = malloc((size_t)IR * d * sizeof *img);
    image_rows(img, IR, d, 5);
    gm_engine *e = new_engine(m, 2, 512, false, 0, GM_KV_DTYPE_F32);
    gm_error err = {0};
    token_inputs(e, ids, IN, emb);
    memcpy(emb + (size_t)IT * d, img, (size_t)IR * d * sizeof *img);
    for (int i = 0; i < IN; i++)
        for (int j = 0; j < IN; j++) {
            const bool same_image = i >= IT && i < IT + IR && j >= IT && j < IT + IR;
            mask[(size_t)i * IN + j] = j <= i || same_image ? 0.0f : -INFINITY;
        }
    gm_generator *g = NULL;
    gm_generator_options go = {.n_threads = gm_test_threads(2), .n_ctx = 1024};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    const float *want = NULL;
    for (int i = IT; i < IT + IR; i++) ids[i] = 0;
    CHECK_OK(gm_generator_prefill_from_embeds_masked(g, ids, IN, emb, mask, &want, &err), &err);
    gm_seq *s = new_seq(e), *causal = new_seq(e);
    append_image_prompt(s, ids, img, 1, true);
    append_image_prompt(causal, ids, img, 1, false);
    gm_seq *both[2] = {s, causal};
    CHECK_OK(gm_engine_eval(e, both, 2, &err), &err);
    double top = 0, diff = 0, diff_causal = 0;
    for (int v = 0; v < V; v++) {
        top = fmax(top, fabs(want[v]));
        diff = fmax(diff, fabs((double)gm_seq_logits(s)[v] - want[v]));
        diff_causal = fmax(diff_causal, fabs((double)gm_seq_logits(causal)[v] - want[v]));
    }
    CHECK_MSG(diff <= 1e-5 * top, "image span vs explicit mask: max diff %g (max |logit| %g)", diff, top);
    CHECK_MSG(diff_causal > 1e-3 * top, "a causal span matched the bidirectional mask (%g)", diff_causal);
    gm_seq_free(s);
    gm_seq_free(causal);
    gm_generator_free(g);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(emb), free(mask), free(img);
    gm_model_free(m);
}

/* The prefix index and images: the same image (key) after the same text is adopted, bit for bit what a
 * fresh engine computes; another key under the same placeholder ids, or an anonymous span, is not. An image
 * is never split across forward calls: one-row steps give the one-pass bits. */
TEST(image_span_prefix_cache) {
    gm_model *m = open_model(2); /* gemma3: window 8, the image crosses windows and a block boundary */
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    int32_t ids[IN];
    tokens(ids, IN, 62);
    float *img = malloc((size_t)IR * d * sizeof *img), *ref = malloc((size_t)V * sizeof *ref);
    image_rows(img, IR, d, 9);
    gm_error err = {0};
    gm_engine *fresh = new_engine(m, 2, 512, false, 0, GM_KV_DTYPE_F32);
    gm_seq *r = new_seq(fresh);
    append_image_prompt(r, ids, img, 1, true);
    CHECK_OK(gm_engine_eval(fresh, &r, 1, &err), &err);
    memcpy(ref, gm_seq_logits(r), (size_t)V * sizeof *ref);
    gm_seq_free(r);
    CHECK_EQ_INT(gm_engine_free(fresh), GM_OK);

    gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
    gm_seq *a = new_seq(e);
    append_image_prompt(a, ids, img, 1, true);
    int rows = 0, calls = 0;
    do { /* one row at a time: the image goes in one call of its own */
        CHECK_OK(gm_engine_step(e, &a, 1, 1, &rows, &err), &err);
        CHECK(rows == 1 || rows == IR || rows == 0);
        calls++;
    } while (rows > 0 && calls < 200);
    CHECK_EQ_INT(calls, IT + 1 + IU + 1);
    CHECK_MSG(gm_seq_logits(a) && !memcmp(gm_seq_logits(a), ref, (size_t)V * sizeof *ref), "stepped image != one pass");
    struct { uint64_t key; bool anonymous; int reused; } cases[] = {{1, false, 128}, {2, false, 64}, {0, true, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gm_seq *b = new_seq(e);
        append_image_prompt(b, ids, img, cases[c].key, true);
        if (cases[c].anonymous) b->spans[0].key[0] = b->spans[0].key[1] = 0;
        CHECK_OK(gm_engine_eval(e, &b, 1, &err), &err);
        CHECK_MSG(gm_seq_n_reused(b) == cases[c].reused, "case %zu: reused %d, want %d", c, gm_seq_n_reused(b),
                  cases[c].reused);
        CHECK_MSG(!memcmp(gm_seq_logits(b), ref, (size_t)V * sizeof *ref), "case %zu: logits differ", c);
        gm_seq_free(b);
    }
    /* a fork shares the image; truncating before the image and appending text drops it */
    gm_seq *f = NULL;
    CHECK_OK(gm_seq_fork(a, &f, &err), &err);
    CHECK_OK(gm_seq_truncate(f, IT, &err), &err);
    CHECK_EQ_INT(f->n_spans, 0);
    CHECK_OK(gm_seq_append(f, ids + IT, IR + IU, &err), &err);
    CHECK_OK(gm_engine_eval(e, &f, 1, &err), &err);
    CHECK_MSG(memcmp(gm_seq_logits(f), ref, (size_t)V * sizeof *ref) != 0, "text in place of the image gave its logits");
    /* misuse */
    const gm_embed_span big = {.embeds = img, .n = 600, .placeholder = 0, .bidirectional = true};
    CHECK(gm_seq_append_embeds(f, &big, &err) == GM_ERR_ARG && strstr(err.msg, "n_batch"));
    const gm_embed_span bad = {.embeds = img, .n = 2, .placeholder = -1};
    CHECK(gm_seq_append_embeds(f, &bad, &err) == GM_ERR_ARG);
    gm_row row = {.seq = a, .pos = IT, .token = 0};
    CHECK_OK(gm_seq_truncate(a, IT + 1, &err), &err);
    CHECK_OK(gm_seq_truncate(a, IT, &err), &err);
    const gm_embed_span one = {.embeds = img, .n = 1, .placeholder = 0, .key = {3, 3}};
    CHECK_OK(gm_seq_append_embeds(a, &one, &err), &err);
    CHECK_MSG(gm_engine_forward(e, &row, 1, NULL, &err) == GM_ERR_ARG && strstr(err.msg, "gm_seq_append_embeds"),
              "%s", err.msg);
    gm_seq_free(f);
    gm_seq_free(a);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(img), free(ref);
    gm_model_free(m);
}

/* Tails are text only. A text prompt freed, then the same ids with an image over 20 of them (the placeholder
 * ids equal to the text's there): the repeat adopts the text rows before the image and no further; freed, its
 * block holding image rows is not entered, and a second repeat adopts as much again, bit for bit. */
TEST(tail_stops_at_image) {
    gm_model *m = open_model(2);
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    enum { T0 = 100, R = 20, T1 = 5, N = T0 + R + T1 };
    int32_t ids[N];
    tokens(ids, N, 64);
    for (int i = T0; i < T0 + R; i++) ids[i] = 0; /* the placeholder */
    float *img = malloc((size_t)R * d * sizeof *img), *ref = malloc((size_t)V * sizeof *ref);
    image_rows(img, R, d, 13);
    const gm_embed_span sp = {.embeds = img, .n = R, .placeholder = 0, .key = {4, 5}, .bidirectional = true};
    gm_error err = {0};
    gm_engine *e = new_engine(m, 2, 512, true, 0, GM_KV_DTYPE_F32);
    gm_seq *s = new_seq(e);
    CHECK_OK(gm_seq_append(s, ids, N, &err), &err);
    CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
    gm_seq_free(s);
    for (int rep = 0; rep < 2; rep++) {
        s = new_seq(e);
        CHECK_OK(gm_seq_append(s, ids, T0, &err), &err);
        CHECK_OK(gm_seq_append_embeds(s, &sp, &err), &err);
        CHECK_OK(gm_seq_append(s, ids + T0 + R, T1, &err), &err);
        CHECK_OK(gm_engine_eval(e, &s, 1, &err), &err);
        CHECK_MSG(gm_seq_n_reused(s) == T0, "repeat %d: reused %d, want %d", rep, gm_seq_n_reused(s), T0);
        if (rep == 0) memcpy(ref, gm_seq_logits(s), (size_t)V * sizeof *ref);
        else CHECK(!memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref));
        gm_seq_free(s);
    }
    gm_engine *fresh = new_engine(m, 2, 512, false, 0, GM_KV_DTYPE_F32);
    s = new_seq(fresh);
    CHECK_OK(gm_seq_append(s, ids, T0, &err), &err);
    CHECK_OK(gm_seq_append_embeds(s, &sp, &err), &err);
    CHECK_OK(gm_seq_append(s, ids + T0 + R, T1, &err), &err);
    CHECK_OK(gm_engine_eval(fresh, &s, 1, &err), &err);
    CHECK_MSG(!memcmp(gm_seq_logits(s), ref, (size_t)V * sizeof *ref), "the image prompt after a text tail differs");
    gm_seq_free(s);
    CHECK_EQ_INT(gm_engine_free(fresh), GM_OK);
    CHECK_EQ_INT(gm_engine_free(e), GM_OK);
    free(img), free(ref);
    gm_model_free(m);
}

/* The generator keeps the cached prefix across turns with images: the same image again computes only the
 * new text; a different image recomputes from the image on. */
TEST(image_span_generator_turns) {
    gm_model *m = open_model(0); /* no window: a rollback keeps what it can */
    if (!m) return;
    const int d = gm_model_config(m)->d_model;
    int32_t ids[IN + 20];
    tokens(ids, IN + 20, 63);
    float *img = malloc((size_t)IR * d * sizeof *img);
    image_rows(img, IR, d, 11);
    gm_error err = {0};
    gm_generator *g = NULL;
    gm_generator_options go = {.n_threads = gm_test_threads(2), .n_ctx = 1024};
    CHECK_OK(gm_generator_new(m, &go, &g, &err), &err);
    gm_prompt_span sp = {.at = IT, .span = {.embeds = img, .n = IR, .placeholder = 0, .key = {5, 6}, .bidirectional = true}};
    CHECK_OK(gm_generator_prefill_spans(g, ids, IT + IU, &sp, 1, &err), &err);
    gm_sampling greedy = gm_sampling_default();
    greedy.temperature = 0;
    int32_t t;
    CHECK_OK(gm_generator_step_cached(g, &greedy, &t, &err), &err);
    CHECK_EQ_INT(gm_generator_n_cached(g), IN);
    CHECK_OK(gm_generator_prefill_spans(g, ids, IT + IU + 20, &sp, 1, &err), &err);
    CHECK_EQ_INT(gm_generator_n_cached(g), IN); /* the image and the text around it kept */
    sp.span.key[0] = 7;
    CHECK_OK(gm_generator_prefill_spans(g, ids, IT + IU + 20, &sp, 1, &err), &err);
    CHECK_EQ_INT(gm_generator_n_cached(g), IT); /* another image: kept up to it */
    CHECK_OK(gm_generator_prefill(g, ids, IT + 5, &err), &err);
    CHECK_EQ_INT(gm_generator_n_cached(g), IT); /* text in place of the image: not kept from the span */
    gm_generator_free(g);
    free(img);
    gm_model_free(m);
}

/* F16 keys/values: within a tolerance of F32 (f16 rounding of k and v: relative 2^-11), and the KV memory
 * halves. */

int main(int argc, char **argv) {
    if (!ef_setup()) return 1;
    const char *only = argc > 1 ? argv[1] : NULL;
#define MAYBE(t) \
    if (!only || !strcmp(only, #t)) RUN(t)
    MAYBE(image_span_attention);
    MAYBE(image_span_prefix_cache);
    MAYBE(image_span_generator_turns);
    MAYBE(tail_stops_at_image);
    MAYBE(embeddings_not_matched_by_ids);
    ef_cleanup();
    return test_summary();
}
