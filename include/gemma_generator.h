/* gemma_generator.h — libgemma's convenience layer (generate/): one engine and one sequence behind
 * one handle (the generator), and the embedder. */
#ifndef GEMMA_GENERATOR_H
#define GEMMA_GENERATOR_H

#include "gemma.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ generator (one engine + one sequence) */

typedef struct gm_generator gm_generator;

typedef struct gm_generator_options {
    int n_threads;    /* <= 0: physical cores */
    int n_ctx;        /* 0: the model's context_length, capped at GM_DEFAULT_MAX_CTX */
    int n_batch;      /* prefill chunk (positions per batched pass); 0: 512 */
    bool ignore_stop; /* generate*: do not stop at <eos> / <end_of_turn> */
    bool kv_full;     /* reserve the KV budget's blocks up front instead of on demand */
    size_t kv_mem;    /* KV pool budget in bytes; 0: the engine's default */
    gm_kv_dtype kv_type;
    bool no_prefix_cache; /* do not index computed blocks (benchmarks that repeat one prompt) */
    gm_backend_kind backend; /* GM_BACKEND_CPU (0) by default */
    gm_isa isa;       /* as gm_engine_options.isa */
    gm_threadpool *pool; /* as gm_engine_options.pool */
    int device;        /* as gm_engine_options.device */
    bool gpu_validate; /* as gm_engine_options.gpu_validate */
} gm_generator_options;


/* The generator keeps a token history and a KV cache. Invariant after a cached step: the cache holds
 * every token of the history but the last sampled one, which is the input of the next decode.
 * Pointers returned (logits, tokens, taps) stay valid until the next call on the generator.
 * One thread at a time per generator; several generators may share one model (read-only). */
GEMMA_API gm_status gm_generator_new(const gm_model *m, const gm_generator_options *opt, gm_generator **out, gm_error *err);
GEMMA_API void gm_generator_free(gm_generator *g);
GEMMA_API void gm_generator_reset(gm_generator *g);          /* empty history and cache */
GEMMA_API const gm_config *gm_generator_config(const gm_generator *g);
/* The engine and sequence underneath (owned by the generator). */
GEMMA_API gm_engine *gm_generator_engine(const gm_generator *g);
GEMMA_API gm_seq *gm_generator_seq(const gm_generator *g);
GEMMA_API int gm_generator_n_ctx(const gm_generator *g);
GEMMA_API const int32_t *gm_generator_tokens(const gm_generator *g, int *n);
/* Positions of the history whose keys/values are in the cache (what the next cached call skips). */
GEMMA_API int gm_generator_n_cached(const gm_generator *g);
/* true for <eos> and <end_of_turn>. */
GEMMA_API bool gm_generator_is_stop(const gm_generator *g, int32_t tok);

/* Replaces the history with ids (no compute). The cached prefix shared with the old history is kept,
 * so only the new suffix is computed by the next cached call (multi-turn chat, prompt reuse). */
GEMMA_API gm_status gm_generator_prefill(gm_generator *g, const int32_t *ids, int n, gm_error *err);
/* Appends ids to the history (no compute). */
GEMMA_API gm_status gm_generator_append(gm_generator *g, const int32_t *ids, int n, gm_error *err);
/* A prompt with caller embeddings (images): span goes before ids[at]. */
typedef struct gm_prompt_span {
    size_t at;
    gm_embed_span span;
} gm_prompt_span;
/* gm_generator_prefill with spans (at ascending, <= n): the kept prefix ends where the histories differ in a
 * token or a span (spans match by key and length; anonymous ones never match). */
GEMMA_API gm_status gm_generator_prefill_spans(gm_generator *g, const int32_t *ids, int n, const gm_prompt_span *spans,
                                               int n_spans, gm_error *err);

/* Naive reference: recomputes the whole history from an empty cache, samples one token, appends it. */
GEMMA_API gm_status gm_generator_step(gm_generator *g, const gm_sampling *s, int32_t *tok, gm_error *err);
/* n naive steps; stops after a stop token unless ignore_stop. *n_out = tokens written to out. */
GEMMA_API gm_status gm_generator_generate(gm_generator *g, int n, const gm_sampling *s, int32_t *out, int *n_out,
                                          gm_error *err);

/* Cached: computes whatever of the history the cache lacks (all of it after prefill: one batched
 * pass; one token later), samples, appends. */
GEMMA_API gm_status gm_generator_step_cached(gm_generator *g, const gm_sampling *s, int32_t *tok, gm_error *err);
GEMMA_API gm_status gm_generator_generate_cached(gm_generator *g, int n, const gm_sampling *s, int32_t *out, int *n_out,
                                                 gm_error *err);
/* Streaming: on_token is called after each token (stop tokens included); returning false stops. */
typedef bool (*gm_token_fn)(int32_t tok, void *user);
GEMMA_API gm_status gm_generator_generate_cached_with(gm_generator *g, int n, const gm_sampling *s, gm_token_fn on_token,
                                                      void *user, int *n_out, gm_error *err);

/* Logits without sampling (n_vocab floats, owned by the generator). */
GEMMA_API gm_status gm_generator_prefill_get_last_logits(gm_generator *g, const int32_t *ids, int n, const float **logits,
                                                         gm_error *err);
/* Appends id and returns the logits after it. */
GEMMA_API gm_status gm_generator_decode_get_logits(gm_generator *g, int32_t id, const float **logits, gm_error *err);
/* Logits of every position of the history (n x n_vocab into out, caller-sized), from an empty cache;
 * afterwards the cache holds the whole history. For scoring / perplexity. */
GEMMA_API gm_status gm_generator_score(gm_generator *g, float *out, gm_error *err);
/* Log-probabilities of the history under the model: out[i] = log p(tok[i+1] | tok[0..i]) for
 * i < n-1 (n = history length >= 2), computed in one pass from an empty cache without n x n_vocab
 * floats (perplexity = exp(-mean(out))). Afterwards the cache holds the whole history. */
GEMMA_API gm_status gm_generator_score_logprobs(gm_generator *g, float *out, gm_error *err);
/* Streams the logits of positions [first, end) of the history to fn (pos, n_vocab floats valid during
 * the call), in order, computed in one pass from an empty cache a few rows at a time (no n x n_vocab
 * buffer). fn returns false to stop receiving (the pass still completes). For perplexity and KL
 * comparisons. Afterwards the cache holds the whole history. */
typedef bool (*gm_logits_fn)(int pos, const float *logits, void *user);
GEMMA_API gm_status gm_generator_score_with(gm_generator *g, int first, int end, gm_logits_fn fn, void *user, gm_error *err);

/* Multimodal prefill: replaces the history with ids and runs one pass whose layer-0 inputs are
 * embeds (n x d floats, used as given: the caller applies any embedding scale, e.g. E[tok] *
 * config.embed_scale for text positions). attn_bias: NULL or n x n floats added to the attention
 * score of query i on key j (after soft-capping); the causal and sliding-window masks still apply,
 * -INFINITY masks a pair. logits (may be NULL) receives the last position's logits. A following
 * step_cached samples from those logits. */
GEMMA_API gm_status gm_generator_prefill_from_embeds(gm_generator *g, const int32_t *ids, int n, const float *embeds,
                                                     const float *attn_bias, const float **logits, gm_error *err);
/* The same with a full additive mask (n x n, required) that REPLACES the causal and sliding-window
 * masks over the prompt: 0 allows query i to see key j, -INFINITY forbids it, whatever their order,
 * so image tokens can attend to each other both ways (Gemma 3 vision: causal for text, bidirectional
 * inside each image). The whole prompt must fit one batch (n <= n_batch option, default 512). */
GEMMA_API gm_status gm_generator_prefill_from_embeds_masked(gm_generator *g, const int32_t *ids, int n, const float *embeds,
                                                            const float *mask, const float **logits, gm_error *err);

/* Speculative decoding (see "speculative decoding") in gm_generator_generate_cached and _with; o NULL
 * turns it off. Tokens a step appended past a stop token, a callback's stop or n are rolled back, so
 * the history afterwards is what was emitted. Hidden-state taps are not recorded while it is on. */
GEMMA_API gm_status gm_generator_set_speculative(gm_generator *g, const gm_spec_options *o, gm_error *err);
/* The generator's speculative state (NULL when off): for gm_spec_get_stats. */
GEMMA_API gm_spec *gm_generator_speculative(const gm_generator *g);

/* Hidden-state taps: each later cached step (decode or prefill pass) records the INPUT hidden state
 * of these layers at the last computed position. Ids outside [0, n_layers) are dropped, duplicates
 * merged, the list sorted. n = 0 turns taps off. */
GEMMA_API gm_status gm_generator_set_aux_hidden_layers(gm_generator *g, const int *layer_ids, int n, gm_error *err);
/* The taps of the last cached step: *n_rows rows of d floats, in the sorted layer order given by
 * *layers (may be NULL). Taking clears them (*n_rows = 0 until the next step). */
GEMMA_API void gm_generator_take_last_aux(gm_generator *g, const float **rows, const int **layers, int *n_rows);

/* ------------------------------------------------------------------ embeddings (generate/embed.c) */

/* An embedder turns a token sequence (or a text) into one vector with an embedding model
 * (gm_config.is_embedding): all tokens in one forward pass with bidirectional attention (sliding
 * layers see |i - j| <= sliding_window / 2, global layers everything), the final RMSNorm, mean
 * pooling over the tokens, then the optional dense_2 / dense_3 projections. There is no L2
 * normalisation inside (gm_embedding_normalize does it). It owns a thread pool, scratch and keys /
 * values for n_ctx positions; one thread at a time per embedder, several may share one model.
 *
 * A model that is not an embedding model is refused (GM_ERR_UNSUPPORTED): a generative Gemma's
 * pooled hidden state is not a trained sentence embedding. Conversely gm_engine_new and
 * gm_generator_new refuse embedding models (no text generation on an encoder). */
typedef struct gm_embedder gm_embedder;

typedef struct gm_embedder_options {
    int n_threads; /* <= 0: physical cores */
    int n_ctx;     /* longest input in tokens; 0: the model's context_length capped at GM_DEFAULT_MAX_CTX */
    gm_backend_kind backend; /* GM_BACKEND_CPU (0) by default */
    gm_isa isa;    /* as gm_engine_options.isa */
    gm_threadpool *pool; /* as gm_engine_options.pool */
    int device;        /* as gm_engine_options.device */
    bool gpu_validate; /* as gm_engine_options.gpu_validate */
} gm_embedder_options;

GEMMA_API gm_status gm_embedder_new(const gm_model *m, const gm_embedder_options *opt, gm_embedder **out, gm_error *err);
GEMMA_API void gm_embedder_free(gm_embedder *e);
GEMMA_API int gm_embedder_dim(const gm_embedder *e);   /* floats per vector (gm_config.embedding_dim) */
GEMMA_API int gm_embedder_n_ctx(const gm_embedder *e); /* the longest input accepted */
/* The pooled vector of ids[0..n) (n >= 1; used as given: no BOS / EOS added) into out
 * (gm_embedder_dim floats). n > n_ctx -> GM_ERR_CONTEXT; a bad id -> GM_ERR_ARG. */
GEMMA_API gm_status gm_embed_tokens(gm_embedder *e, const int32_t *ids, int n, float *out, gm_error *err);
/* text[0..len) tokenized as the model's tokenizer config says (BOS when add_bos_token, <eos> after
 * when add_eos_token; control-token texts such as "<eos>" become their ids, as llama.cpp's embedding
 * paths tokenize), then gm_embed_tokens. EmbeddingGemma expects a
 * task prefix in the text ("task: search result | query: ...", "title: none | text: ..."): the
 * caller adds it. *n_tokens (may be NULL): the tokens embedded. */
GEMMA_API gm_status gm_embed_text(gm_embedder *e, const char *text, size_t len, float *out, int *n_tokens, gm_error *err);
/* The token ids gm_embed_text would embed (malloc'd, free() them). */
GEMMA_API gm_status gm_embed_tokenize(const gm_model *m, const char *text, size_t len, int32_t **ids, size_t *n, gm_error *err);
/* Scales v[0..n) to unit L2 norm (a zero vector stays zero). */
GEMMA_API void gm_embedding_normalize(float *v, int n);

#ifdef __cplusplus
}
#endif

#endif /* GEMMA_GENERATOR_H */
