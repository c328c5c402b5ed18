/* gemma.h — the core of libgemma's public API, a Gemma inference engine in C11: errors, models, the tokenizer,
 * sampling, the engine and its sequences, speculative decoding. The rest of the API sits in headers by concern,
 * each including this one (as llama.cpp keeps mtmd.h apart):
 *   gemma_chat.h       chat templates, tools in Gemma's formats, the reply parser
 *   gemma_grammar.h    structured output: GBNF, JSON schema, vocabularies, matchers, the tool-call grammar
 *   gemma_vision.h     images: decoding, preprocessing, the vision encoders
 *   gemma_generator.h  the convenience layer: one engine + one sequence (generator), embeddings
 *
 * Conventions
 *  - Every fallible call returns a gm_status and fills an optional gm_error* with a message
 *    that names the file / argument and the problem. Nothing in the library exits or prints.
 *  - Objects are opaque handles created by *_open / *_new and released by *_free (NULL-safe).
 *  - Options structs: NULL or a zeroed struct means the defaults, except gm_sampling and gm_schema_options
 *    (defaults that are not all zero): start those from gm_sampling_default() / gm_schema_options_default().
 *  - Token ids are int32_t. Text is UTF-8 with an explicit length where it may hold NULs.
 *  - Only what these headers declare (GEMMA_API) is exported from libgemma.so and libgemma.a.
 */
#ifndef GEMMA_H
#define GEMMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The API's version: the library's is gm_version(). MINOR grows with additions, MAJOR with breaks. */
#define GEMMA_VERSION_MAJOR 0
#define GEMMA_VERSION_MINOR 38
#define GEMMA_VERSION_PATCH 0
#define GEMMA_VERSION_STRING "0.38.0"

/* GEMMA_API marks what the library exports; everything else is built hidden (-fvisibility=hidden). */
#ifndef GEMMA_API
#if defined(_WIN32) && defined(GEMMA_SHARED)
#ifdef GEMMA_BUILD
#define GEMMA_API __declspec(dllexport)
#else
#define GEMMA_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define GEMMA_API __attribute__((visibility("default")))
#else
#define GEMMA_API
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH" of the library linked (compare with GEMMA_VERSION_STRING). */
GEMMA_API const char *gm_version(void);


/* ------------------------------------------------------------------ errors */

typedef enum gm_status {
    GM_OK = 0,
    GM_ERR_IO,          /* a file cannot be opened, read or mapped */
    GM_ERR_FORMAT,      /* a file is malformed (truncated, bad magic, lies about sizes, ...) */
    GM_ERR_UNSUPPORTED, /* well-formed, but something we cannot run (unknown type, architecture) */
    GM_ERR_ARG,         /* a caller passed an invalid argument */
    GM_ERR_NOMEM,       /* an allocation failed or would be absurdly large */
    GM_ERR_STATE,       /* a call out of order (step before prefill, ...) */
    GM_ERR_CONTEXT,     /* the context limit would be exceeded */
    GM_ERR_NOT_FOUND,   /* a metadata key or tensor is missing */
    GM_ERR_TYPE,        /* a metadata value has the wrong type */
    GM_ERR_INTERNAL,    /* a bug: please report */
} gm_status;

typedef struct gm_error {
    gm_status code;
    char msg[768];
} gm_error;

GEMMA_API const char *gm_status_name(gm_status s);

/* ------------------------------------------------------------------ tensor types */

/* ggml type ids, as stored in GGUF files. */
typedef enum gm_type {
    GM_TYPE_F32 = 0,
    GM_TYPE_F16 = 1,
    GM_TYPE_Q4_0 = 2,
    GM_TYPE_Q4_1 = 3,
    GM_TYPE_Q5_0 = 6,
    GM_TYPE_Q5_1 = 7,
    GM_TYPE_Q8_0 = 8,
    GM_TYPE_Q8_1 = 9,
    GM_TYPE_Q2_K = 10,
    GM_TYPE_Q3_K = 11,
    GM_TYPE_Q4_K = 12,
    GM_TYPE_Q5_K = 13,
    GM_TYPE_Q6_K = 14,
    GM_TYPE_Q8_K = 15,
    GM_TYPE_I8 = 24,  /* integer and double tensors: read as data (EAGLE-3's d2t map is I64), never as weights */
    GM_TYPE_I16 = 25,
    GM_TYPE_I32 = 26,
    GM_TYPE_I64 = 27,
    GM_TYPE_F64 = 28,
    GM_TYPE_BF16 = 30,
} gm_type;

/* "Q4_K", "F32", ...; NULL for an id this build does not know. */
GEMMA_API const char *gm_type_name(int type);

/* ------------------------------------------------------------------ model */

typedef struct gm_model gm_model;

/* The CPU copies of layer matrices, made by the first CPU engine on the model and shared by every engine on it
 * (gm_engine_wait_weights). Default: with AVX2 or AVX-512 the model's level (isa, below), an
 * 8-rows-interleaved copy of every F16 / BF16 / Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q6_K layer matrix
 * (decode +10-20%; the file's pages of those matrices are dropped: the same resident size). OFF: none (the file's layout).
 * Q5_0X16: at the AVX-512 level, Q5_0 matrices get the AVX-512 kernels' decode-friendly copy instead. The CLI reads $GEMMA_REPACK (0 / 1) into this. */
typedef enum gm_repack { GM_REPACK_DEFAULT = 0, GM_REPACK_OFF, GM_REPACK_Q5_0X16 } gm_repack;

/* The instruction set of the CPU kernels. AUTO: the best this CPU and OS support. Two families: x86-64 (AVX2 <
 * AVX512) and AArch64 (NEON = ASIMD, the AArch64 baseline < NEON_DOT = NEON + the dot-product extension, sdot). A
 * level above the CPU's in its family is lowered to it, and a level of the other family gives the CPU's best (a
 * setting written on one machine still runs on another, as $GEMMA_ISA always did); SCALAR runs everywhere; a value
 * outside the enum is refused (GM_ERR_ARG). Levels differ in f32 rounding order only: each gives its own bits, the
 * same on every run. The CLI reads $GEMMA_ISA (scalar / avx2 / avx512 / neon / neondot) into this. */
typedef enum gm_isa {
    GM_ISA_AUTO = 0,
    GM_ISA_SCALAR = 1,
    GM_ISA_AVX2 = 2,
    GM_ISA_AVX512 = 3,
    GM_ISA_NEON = 4,
    GM_ISA_NEON_DOT = 5
} gm_isa;
/* "scalar", "avx2", "avx512", "neon", "neondot" or "auto" into *out; false (out untouched) for any other name or
 * NULL. */
GEMMA_API bool gm_isa_parse(const char *name, gm_isa *out);
/* "auto", "scalar", "avx2", "avx512", "neon", "neondot"; "?" for a value outside the enum. */
GEMMA_API const char *gm_isa_name(gm_isa isa);

typedef struct gm_model_options {
    bool keep_mtp;    /* keep MTP / nextn tensors of a GGUF visible (hidden by default) */
    gm_repack repack; /* the CPU copies its CPU engines make (above) */
    gm_isa isa;       /* the level of its CPU engines: their copies and kernels (above) */
} gm_model_options;

/* Architectural facts, all read from the file (GGUF metadata or config.json) or from the
 * rules of the model's family (model/families/registry.c). */
typedef struct gm_config {
    char arch[32];           /* "gemma", "gemma2", "gemma3", "gemma3n", "gemma4", "gemma-embedding", "gemma4-assistant" */
    int generation;          /* 1, 2, 3 (3 for gemma3n and gemma-embedding too), 4 */
    const struct gm_family *family; /* the family's row (internal: model/family.h), set by the loader */
    int n_vocab;
    int d_model;             /* hidden size */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;            /* key_length == value_length */
    int d_ff;                /* feed-forward (intermediate) size */
    int context_length;      /* maximum positions */
    int sliding_window;      /* 0 = none */
    int sliding_pattern;     /* layer i is global iff (i+1) % pattern == 0 (2 = gemma2); 0: all global without a window,
                                else no repeating pattern: each layer its own (gm_model_layer: Gemma 4, and per-layer
                                GGUF arrays that do not repeat) */
    float norm_eps;
    float rope_base_global;
    float rope_base_local;
    float rope_scale_global; /* linear scaling factor (1 = none) on global layers */
    float query_scale;       /* multiplies q before q.k */
    float attn_softcap;      /* 0 = none */
    float final_softcap;     /* 0 = none */
    float embed_scale;       /* x = E[tok] * embed_scale */
    bool norm_weights_plus_one; /* true: file stores (1+w) already (llama.cpp GGUF); false: HF (we add 1) */
    bool has_qk_norm;
    bool has_post_norms;     /* post-attention and post-FFN norms */
    bool has_v_norm;         /* V is RMS-normed without weight (Gemma 3n) */
    bool tied_embeddings;
    int bos_id, eos_id, eot_id, pad_id; /* eot = <end_of_turn> (Gemma 4: <turn|>), -1 if absent */
    /* Embedding models (EmbeddingGemma: GGUF arch "gemma-embedding", HF Gemma3TextModel with
     * use_bidirectional_attention). Such a model is an encoder: every token attends to every other
     * one (sliding layers within |i - j| <= sliding_window / 2), the final-normed hidden states are
     * pooled into one vector, and text generation is refused (see "embeddings"). */
    bool is_embedding;
    int pooling;             /* GM_POOLING_MEAN (the only kind supported) when is_embedding */
    int dense_2_in, dense_2_out; /* optional projection after pooling: d_model -> dense_2_out; 0 = none */
    int dense_3_in, dense_3_out; /* optional projection after dense_2: dense_3_in -> d_model; 0 = none */
    int embedding_dim;       /* length of the pooled vector (d_model, or the last projection's output) */
    bool add_eos;            /* the tokenizer config appends <eos> to a text (embedding inputs) */
    /* A drafter (Gemma 4's MTP assistant, arch "gemma4-assistant"): its layers have queries only and read a target
     * model's cache; it cannot run alone (gm_engine_new refuses it: see "speculative decoding", gm_mtp_new).
     * d_backbone: the target's hidden size, the width of the hidden states it reads and predicts. 0 otherwise. */
    bool is_drafter;
    int d_backbone;
} gm_config;

enum { GM_POOLING_NONE = 0, GM_POOLING_MEAN = 1 }; /* llama.cpp's pooling_type values */

/* Per-layer facts. Gemma 1/2/3 fill every layer alike (the window and RoPE by the sliding pattern);
 * Gemma 3n/4 differ per layer (head sizes, KV heads, FFN width, partial RoPE, KV shared between
 * layers). The forward pass, the KV cache and the scratch sizes read these, never the global
 * fields above, which stay as the file's nominal values. */
typedef struct gm_layer_config {
    int head_dim;      /* query, key and value head size */
    int n_heads;       /* query heads */
    int n_kv_heads;    /* key/value heads (n_heads is a multiple) */
    int d_ff;          /* feed-forward width */
    int window;        /* sliding window in positions; 0 = full (global) attention */
    float rope_base;
    float rope_scale;  /* linear scaling: positions are divided by it (1 = none) */
    int rope_dims;     /* leading dims of a head that RoPE rotates (even, <= head_dim) */
    int kv_source;     /* the layer whose keys/values this layer attends over (itself unless shared) */
} gm_layer_config;

GEMMA_API gm_status gm_model_open(const char *path, const gm_model_options *opt, gm_model **out, gm_error *err);
/* Layer il's facts (NULL when il is out of range). */
GEMMA_API const gm_layer_config *gm_model_layer(const gm_model *m, int il);
GEMMA_API void gm_model_free(gm_model *m);
GEMMA_API const gm_config *gm_model_config(const gm_model *m);
/* The level m's CPU engines run (gm_model_options.isa lowered to the CPU's; AUTO only for a NULL m). */
GEMMA_API gm_isa gm_model_isa(const gm_model *m);
/* Describes the model file or folder at path (`gemma inspect`): architecture, config, tokenizer summary, tensor
 * table, totals, as human text or one JSON object when json is true. It does not open the model, so it also
 * describes files the engine cannot run: when the config cannot be read it prints what it can (format, metadata,
 * tensors) and returns the config's error. keep_mtp: also list MTP / nextn tensors. An error opening the file
 * is returned before anything is printed; a write error on FILE_stream (a FILE *) is GM_ERR_IO. */
GEMMA_API gm_status gm_model_describe(const char *path, bool json, bool keep_mtp, void *FILE_stream, gm_error *err);
/* Physical cores of this machine (online CPUs where that is unknown): the thread count an engine, embedder or
 * encoder takes when its n_threads is 0. */
GEMMA_API int gm_physical_cores(void);

/* ------------------------------------------------------------------ tokenizer (text/) */
/* @section tokenizer: owned by text/ */

/* Gemma's SentencePiece vocabulary with llama.cpp's SPM encoding (id for id) and the Gemma chat
 * turn format. Thread-safety: a gm_tokenizer is immutable after open; any number of threads may
 * encode / decode with it at once. Returned id arrays and strings are malloc'd: free() them. */
typedef struct gm_tokenizer gm_tokenizer;

/* GGUF tokenizer.ggml.token_type values. */
typedef enum gm_token_type {
    GM_TOKEN_UNDEFINED = 0,
    GM_TOKEN_NORMAL = 1,
    GM_TOKEN_UNKNOWN = 2,
    GM_TOKEN_CONTROL = 3,
    GM_TOKEN_USER_DEFINED = 4,
    GM_TOKEN_UNUSED = 5,
    GM_TOKEN_BYTE = 6,
} gm_token_type;

/* path: a .gguf file (only its tokenizer.* metadata is read) or a Hugging Face folder with
 * tokenizer.model and/or tokenizer.json. */
GEMMA_API gm_status gm_tokenizer_open(const char *path, gm_tokenizer **out, gm_error *err);
GEMMA_API void gm_tokenizer_free(gm_tokenizer *tok);

GEMMA_API int32_t gm_tokenizer_n_vocab(const gm_tokenizer *tok);
GEMMA_API int32_t gm_tokenizer_bos(const gm_tokenizer *tok);  /* -1 if none */
GEMMA_API int32_t gm_tokenizer_eos(const gm_tokenizer *tok);  /* -1 if none */
GEMMA_API int32_t gm_tokenizer_eot(const gm_tokenizer *tok);  /* <end_of_turn>; -1 if none */
GEMMA_API int32_t gm_tokenizer_unk(const gm_tokenizer *tok);  /* -1 if none */
GEMMA_API int32_t gm_tokenizer_pad(const gm_tokenizer *tok);  /* -1 if none */
GEMMA_API bool gm_tokenizer_add_bos(const gm_tokenizer *tok); /* the file's add_bos_token */
/* k >= 1 such that any text of B bytes, tokenized with either parse_special and without BOS / EOS,
 * gives at least ceil(B / k) tokens: a prompt of B bytes cannot fit a context of fewer than B / k
 * tokens, known before tokenizing it. k is the longest vocabulary piece in bytes: no token covers
 * more text than its piece, because the only normalization (space -> U+2581, 3 bytes; a leading
 * dummy-prefix space) never shrinks text, special pieces cover their own text and byte / <unk>
 * fallbacks one byte. 0 means "no bound" (a normalizer that could shrink text would have to return
 * it; none does today) and is what a NULL tokenizer gives. */
GEMMA_API size_t gm_tokenizer_max_token_bytes(const gm_tokenizer *tok);
/* GM_TOKEN_UNDEFINED for an id out of range. */
GEMMA_API gm_token_type gm_token_get_type(const gm_tokenizer *tok, int32_t id);
GEMMA_API bool gm_token_is_control(const gm_tokenizer *tok, int32_t id);
/* End of generation: <eos> or <end_of_turn>. */
GEMMA_API bool gm_token_is_eog(const gm_tokenizer *tok, int32_t id);
/* The stop ids a generator should use (<eos>, <end_of_turn>); returns how many (<= 4). */
GEMMA_API size_t gm_tokenizer_stop_ids(const gm_tokenizer *tok, int32_t out[4]);
/* The id whose vocabulary piece is exactly text[0..len) (e.g. "<start_of_turn>"); -1 if none. */
GEMMA_API int32_t gm_token_id(const gm_tokenizer *tok, const char *text, size_t len);
/* The raw vocabulary piece (with U+2581 for spaces, "<0x41>" for bytes); NULL if out of range. */
GEMMA_API const char *gm_token_text(const gm_tokenizer *tok, int32_t id, size_t *len);

/* Encodes text[0..len) (any bytes; invalid UTF-8 becomes byte tokens) into *ids (malloc'd, free()
 * it) and *n. add_bos: prepend BOS, unless the parsed text already starts with BOS (never two).
 * parse_special: control-token texts such as "<start_of_turn>" become their ids; otherwise they
 * are ordinary text (user-defined tokens, e.g. "\n" runs and HTML tags, are always atomic).
 * Markers -- the chat formats' turn / channel / tool-call tokens (Gemma 3, Gemma 4, FunctionGemma),
 * BOS, EOS, PAD, end of turn and every control token -- never come out of text encoded without
 * parse_special, whatever type the file gives them (even USER_DEFINED or NORMAL): they are spelled
 * with ordinary pieces. With parse_special their text is the marker, whatever the type. */
GEMMA_API gm_status gm_tokenize(const gm_tokenizer *tok, const char *text, size_t len, bool add_bos,
                                bool parse_special, int32_t **ids, size_t *n, gm_error *err);

/* The bytes a token decodes to: U+2581 -> ' ', <0xXX> -> that byte, control / unknown tokens ->
 * nothing (their text when render_special). The view stays valid while tok lives.
 * An id out of range -> GM_ERR_ARG. */
GEMMA_API gm_status gm_token_to_piece(const gm_tokenizer *tok, int32_t id, bool render_special,
                                      const char **piece, size_t *len, gm_error *err);
/* Concatenated pieces of ids[0..n), NUL-terminated (*len excludes the NUL; the text may hold
 * NULs and invalid UTF-8 exactly as encoded). Any id out of range -> GM_ERR_ARG, nothing out. */
GEMMA_API gm_status gm_detokenize(const gm_tokenizer *tok, const int32_t *ids, size_t n, bool render_special,
                                  char **out, size_t *len, gm_error *err);

/* Streaming decoder: push ids one by one and get the bytes that now end on a complete UTF-8
 * character; an incomplete multi-byte sequence is held back until it completes (or until a byte
 * proves it invalid, then it goes out as is). The concatenation of every push and the final flush
 * equals gm_detokenize of the same ids. Returned views are valid until the next call. */
typedef struct gm_detok_stream gm_detok_stream;
GEMMA_API gm_status gm_detok_stream_new(const gm_tokenizer *tok, bool render_special, gm_detok_stream **out,
                                        gm_error *err);
GEMMA_API gm_status gm_detok_stream_push(gm_detok_stream *s, int32_t id, const char **text, size_t *len,
                                         gm_error *err);
/* Emits whatever is held back (possibly an incomplete sequence) and resets the stream. */
GEMMA_API void gm_detok_stream_flush(gm_detok_stream *s, const char **text, size_t *len);
GEMMA_API void gm_detok_stream_free(gm_detok_stream *s);

/* ------------------------------------------------------------------ generator (generate/) */
/* @section generator: owned by model/ and generate/ */

/* The model's tokenizer (owned by the model). */
GEMMA_API const gm_tokenizer *gm_model_tokenizer(const gm_model *m);

/* Sampling. Start from gm_sampling_default() (greedy, every filter and penalty off). Invalid values
 * (temperature < 0, top_p outside (0,1], min_p outside [0,1], top_k < 0, repeat_penalty <= 0,
 * repeat_last_n < -1) -> GM_ERR_ARG with a message. */
/* One logit_bias entry: bias added to token's logit before everything else (-INFINITY bans the token). */
typedef struct gm_logit_bias {
    int32_t token;
    float bias;
} gm_logit_bias;

typedef struct gm_sampling {
    float temperature;       /* 0 = greedy (argmax) */
    int top_k;               /* 0 = off */
    float top_p;             /* nucleus; 1 = off */
    float min_p;             /* relative to the best token's probability; 0 = off */
    float repeat_penalty;    /* llama.cpp: logit / r if > 0 else logit * r; 1 = off */
    int repeat_last_n;       /* window of recent tokens for the penalties; 0 = none, -1 = whole history */
    float frequency_penalty; /* logit -= f * count */
    float presence_penalty;  /* logit -= p if count > 0 */
    uint64_t seed;           /* same seed + options + history -> same tokens */
    const gm_logit_bias *logit_bias; /* n_logit_bias entries (caller-owned), applied first, greedy included;
                                        a token outside the vocabulary is an error when sampling */
    int n_logit_bias;
} gm_sampling;

GEMMA_API gm_sampling gm_sampling_default(void);
GEMMA_API gm_status gm_sampling_validate(const gm_sampling *s, gm_error *err);

/* ------------------------------------------------------------------ thread pool */

/* The threads the compute runs on. An engine (and a generator or embedder), and a vision encoder, start a
 * pool of their own unless their options name one (the `pool` fields): a process that runs several (a
 * server with an image encoder beside its engine) creates one and passes it to each, so it runs one
 * thread per core, not one per core per user. Users on different threads may share it: their parallel
 * steps take turns, in arrival order. It must outlive everything it was passed to. */
typedef struct gm_threadpool gm_threadpool;
/* n_threads <= 0: the machine's physical cores; more than 1024: GM_ERR_ARG. */
GEMMA_API gm_status gm_threadpool_new(int n_threads, gm_threadpool **out, gm_error *err);
GEMMA_API void gm_threadpool_free(gm_threadpool *p);
GEMMA_API int gm_threadpool_size(const gm_threadpool *p); /* threads, the caller's included (NULL: 1) */

/* ------------------------------------------------------------------ engine and sequences */

/* An engine owns what every sequence shares: the model (read-only; several engines may share one),
 * the backend (CPU today), a thread pool (its own, or one it was given), the forward pass's scratch, and
 * the KV block pool.
 * A sequence owns a token history, its table of KV blocks, and its sampler state and RNG.
 *
 * KV cache. Keys and values live in blocks of GM_KV_BLOCK positions drawn from one pool with a byte
 * budget (kv_mem). Blocks are refcounted: a fork shares every block, and a block is copied before a
 * sequence writes into it while another sequence (or the prefix index) still holds it. Full blocks
 * computed from token ids are entered in a prefix index (a chain of hashes of their token ids), so a
 * sequence whose history starts with the same tokens adopts them instead of recomputing. Layers with
 * a sliding window keep their blocks apart from full-attention layers: a sequence holds only the
 * sliding blocks its window (plus one block for rollback) still needs; older ones go back to the pool,
 * where they stay reusable by the prefix index until evicted. Reuse is therefore exact for prefixes
 * of any length, past the window too. Blocks no sequence holds are evicted least recently used first
 * when the pool is full; when the live sequences alone need more than the budget, the call fails with
 * GM_ERR_NOMEM and a message (nothing is truncated). Positions computed from caller embeddings or
 * under an attention bias are never entered in the index.
 *
 * Results. A row's logits do not depend on the other rows of a forward call, on how a history is split
 * into calls, or on the number of threads: a sequence evaluated alone, in a batch with others, one
 * token at a time or in chunks gives the same bits.
 *
 * Threads. An engine and all its sequences are used from one thread at a time (a scheduler thread);
 * the engine runs its pool inside each call. Different engines are independent, also when they share a
 * pool (gm_engine_options.pool). */
typedef struct gm_engine gm_engine;
typedef struct gm_seq gm_seq;

enum { GM_KV_BLOCK = 64 }; /* positions per KV block (also the attention chunk) */
#define GM_DEFAULT_MAX_CTX 8192

typedef enum gm_kv_dtype {
    GM_KV_DTYPE_F32 = 0,
    GM_KV_DTYPE_F16 = 1,
} gm_kv_dtype;

/* Which backend runs the forward pass (runtime/backend.h). The reference backend is plain loops summing in
 * double on one thread: orders of magnitude slower, for checking the CPU backend's numbers. */
typedef enum gm_backend_kind {
    GM_BACKEND_CPU = 0,       /* thread pool, the best ISA kernels the CPU has */
    GM_BACKEND_REFERENCE = 1, /* plain scalar loops, double accumulation */
    GM_BACKEND_VULKAN = 2,    /* a Vulkan device (gm_gpu_devices): weights, activations and KV in its memory */
    GM_BACKEND_AUTO = 3,      /* Vulkan on a GPU when one is usable, else the CPU (gm_engine_backend_name says which) */
} gm_backend_kind;
/* "cpu" / "reference" / "vulkan" / "auto" to the kind; false for anything else. */
GEMMA_API bool gm_backend_kind_parse(const char *name, gm_backend_kind *out);

typedef struct gm_engine_options {
    int n_threads;       /* <= 0: physical cores */
    int n_ctx;           /* positions per sequence; 0: the model's context_length capped at GM_DEFAULT_MAX_CTX */
    int n_batch;         /* rows per forward chunk (scratch size); 0: 512 */
    size_t kv_mem;       /* KV pool budget in bytes; 0: enough for one sequence of n_ctx positions */
    gm_kv_dtype kv_type; /* storage of keys and values */
    bool no_prefix_cache; /* do not index computed blocks for reuse across sequences */
    gm_backend_kind backend; /* GM_BACKEND_CPU (0) by default */
    /* The CPU backend's kernels. AUTO: the model's level (gm_model_isa). Another level, once lowered to the
     * CPU's, must be the model's: the CPU engines on a model share one set of weight copies, made for that level
     * (GM_ERR_ARG otherwise; open the model with gm_model_options.isa). The reference backend has none. */
    gm_isa isa;
    /* NULL: the engine starts its own pool of n_threads; else it runs on this one (n_threads unused), which
     * must outlive it. */
    gm_threadpool *pool;
    /* Vulkan: 0 the first GPU (else the first usable device); N > 0 the (N-1)th device gm_gpu_devices lists */
    int device;
    bool gpu_validate; /* Vulkan: the Khronos validation layer on; its errors fail the calls that follow */
} gm_engine_options;

GEMMA_API gm_status gm_engine_new(const gm_model *m, const gm_engine_options *opt, gm_engine **out, gm_error *err);
/* Frees the engine; its sequences must be freed first (GM_ERR_STATE otherwise: nothing is freed). */
GEMMA_API gm_status gm_engine_free(gm_engine *e);
GEMMA_API const gm_model *gm_engine_model(const gm_engine *e);
/* What runs the engine: "cpu", "reference", or "vulkan: " and the device's name. */
GEMMA_API const char *gm_engine_backend_name(const gm_engine *e);
/* What a GPU backend did since the engine was made (zeros on the CPU): submissions, command buffers recorded and
 * replayed (a submission whose commands equal an earlier recorded one's, as each decode step of one shape does),
 * compute dispatches. */
typedef struct gm_backend_stats {
    int64_t submits, recordings, replays, dispatches;
} gm_backend_stats;
GEMMA_API void gm_engine_backend_stats(const gm_engine *e, gm_backend_stats *out);

/* A Vulkan device as gm_gpu_devices lists it. */
typedef struct gm_gpu_device {
    char name[256];
    char type[16];            /* "discrete", "integrated", "virtual", "cpu" (lavapipe), "other" */
    char api[16];             /* the Vulkan version it supports, "1.3.230" */
    uint64_t memory_bytes;    /* device-local heaps */
    uint64_t max_alloc_bytes; /* the largest single allocation */
    uint64_t max_storage_range; /* maxStorageBufferRange (the backend addresses buffers by device address instead) */
    uint32_t shared_memory;   /* bytes of workgroup memory */
    uint32_t subgroup;
    bool gpu;                 /* a GPU, not a CPU implementation */
    bool usable;              /* has every feature the backend needs (else `missing` names the first lacking) */
    char missing[64];
} gm_gpu_device;
/* The Vulkan devices (up to cap written, *n the number present). GM_ERR_UNSUPPORTED with a message naming what is
 * missing: a build without the backend, no loader, no driver. */
GEMMA_API gm_status gm_gpu_devices(gm_gpu_device *out, int cap, int *n, gm_error *err);
GEMMA_API int gm_engine_n_ctx(const gm_engine *e);
/* The CPU backend copies the model's layer matrices into its kernels' layouts (gm_repack) when the first engine on
 * the model is made; the quantized ones by up to two threads after gm_engine_new returns: until a matrix's copy is
 * ready its kernels read the file's layout, more slowly, with the same results. This returns once every copy is in
 * place (benchmarks; a server before it takes traffic). The engines on one model share the copies. */
GEMMA_API void gm_engine_wait_weights(gm_engine *e);

/* KV pool figures: blocks in use by sequences, blocks held only by the prefix index (evictable), blocks
 * that still fit the budget, bytes per block of each kind, positions served from the index so far. */
typedef struct gm_kv_stats {
    int64_t blocks_live, blocks_cached, blocks_free;
    size_t bytes_used, bytes_budget;
    size_t bytes_per_token;  /* keys + values of every layer for one position (no sharing, no window) */
    int64_t reused_positions; /* positions adopted from the prefix index since the engine was made */
    int64_t evictions;
} gm_kv_stats;
GEMMA_API void gm_engine_kv_stats(const gm_engine *e, gm_kv_stats *out);

GEMMA_API gm_status gm_seq_new(gm_engine *e, gm_seq **out, gm_error *err);
GEMMA_API void gm_seq_free(gm_seq *s);
/* A new sequence with s's history and KV (shared blocks, copied on write), sampler state and RNG. */
GEMMA_API gm_status gm_seq_fork(const gm_seq *s, gm_seq **out, gm_error *err);
/* Keeps the first n positions of the history (and their KV): rollback without recomputing or
 * touching the RNG. n > length: GM_ERR_ARG. */
GEMMA_API gm_status gm_seq_truncate(gm_seq *s, int n, gm_error *err);
/* Appends ids to the history (no compute). Past n_ctx: GM_ERR_CONTEXT. */
GEMMA_API gm_status gm_seq_append(gm_seq *s, const int32_t *ids, int n, gm_error *err);
/* Caller embeddings inside a history: an image's rows from a vision encoder, soft prompts. */
typedef struct gm_embed_span {
    const float *embeds;  /* n x d_model floats (copied): each position's input to layer 0, no embedding scale */
    int n;
    int32_t placeholder;  /* the token the positions carry in the history (gm_seq_tokens) */
    /* The content's identity, e.g. gm_image_digest of the image (for one encoder): positions under a key are
     * entered in and adopted from the prefix index like tokens, so the same image after the same prefix is
     * computed once; two keys never share a block. {0, 0}: anonymous: nothing from its first position on is
     * indexed or adopted (as gm_row.embed). */
    uint64_t key[2];
    /* Every position attends to all n (an image's rows, as Gemma 3 and 4 are trained); else causal. Such a
     * span's uncomputed rows are computed in one forward call: n <= the engine's n_batch (GM_ERR_ARG). */
    bool bidirectional;
    /* With bidirectional: only layers with a sliding window attend both ways, the others causally: llama.cpp's
     * Gemma 4 image decode (non_causal_type SWA_ONLY), for comparing with it; transformers uses every layer. */
    bool sliding_only;
} gm_embed_span;
/* Appends span->n positions (no compute); gm_engine_eval / gm_engine_step compute them. Truncating inside a
 * span keeps its first rows as computed with the whole span. Past n_ctx: GM_ERR_CONTEXT. */
GEMMA_API gm_status gm_seq_append_embeds(gm_seq *s, const gm_embed_span *span, gm_error *err);
GEMMA_API const int32_t *gm_seq_tokens(const gm_seq *s, int *n);
GEMMA_API int gm_seq_length(const gm_seq *s);
/* Positions whose keys and values are in the cache. */
GEMMA_API int gm_seq_n_computed(const gm_seq *s);
/* Positions of this sequence taken from the prefix index instead of computed (since creation). */
GEMMA_API int gm_seq_n_reused(const gm_seq *s);
/* The prefix-cache scope of s (multi-tenant privacy): s adopts only blocks that sequences of the same
 * scope entered in the prefix index, and enters its own under it, so one tenant's prompts never serve
 * (or time) another's. 0, the default, is the scope every sequence shares; forks inherit the scope. Set
 * it before s has computed anything: afterwards GM_ERR_STATE (setting the scope it has is always OK). */
GEMMA_API gm_status gm_seq_set_prefix_scope(gm_seq *s, uint64_t scope, gm_error *err);
/* The logits after the last position, valid after an evaluation that reached the end of the history
 * (NULL otherwise); n_vocab floats owned by the sequence until its next change. */
GEMMA_API const float *gm_seq_logits(const gm_seq *s);

/* Computes what the histories of seqs[0..n) lack, all of them in shared forward calls of at most
 * n_batch rows (prompt chunks and single decode tokens together), and leaves each sequence's last
 * logits in gm_seq_logits. Sequences with nothing pending keep their logits (a sequence whose whole
 * history is cached but has no logits recomputes its last position). Sequences must be distinct and
 * belong to e. */
GEMMA_API gm_status gm_engine_eval(gm_engine *e, gm_seq *const *seqs, int n, gm_error *err);

/* One step of a continuous-batching scheduler: like gm_engine_eval (adoption from the prefix index
 * included) but a single forward call of at most max_rows rows (capped at n_batch): every sequence's
 * pending single decode token first, then prompt chunks in the order of seqs, so a long prompt is
 * computed over several steps without holding up the others. A sequence whose history is complete after
 * the call has its logits (gm_seq_logits); the others keep computing on later steps. *n_rows (may be
 * NULL): rows computed, 0 when nothing was pending. Results are those of gm_engine_eval, bit for bit. */
GEMMA_API gm_status gm_engine_step(gm_engine *e, gm_seq *const *seqs, int n, int max_rows, int *n_rows, gm_error *err);

/* One forward call over explicit rows. Rows of one sequence must be its next positions in order
 * (pos == gm_seq_n_computed before the call, then +1 ...); a row at pos == length appends token to the
 * history, a row inside the history must carry the token already there. Rows with logits = true get
 * their logits in `logits`, one n_vocab row each, in row order (logits may be NULL when no row asks).
 * The evaluation doors, per row, for any mix of sequences:
 *   embed:  d_model floats fed to layer 0 instead of the token's embedding (no embedding scale applied): soft
 *           prompts, image embeddings. The token still names the position in the history (a placeholder).
 *           Keys and values from such a row are not a function of the tokens, so the sequence's blocks from
 *           that position on never enter the prefix index (nor adopt from it).
 *   hidden: d_model floats: the row's final-normed hidden state (what the LM head reads).
 *   taps:   n x d_model floats: the input hidden state of each layer set by gm_engine_set_taps, in that order
 *           (draft heads that read a model's middle layers). */
typedef struct gm_row {
    gm_seq *seq;
    int32_t token;
    int pos;
    bool logits;
    const float *embed;
    float *hidden;
    float *taps;
} gm_row;
/* The layers whose input hidden states rows with taps receive (n <= 64 of them, each in [0, n_layers); n 0:
 * none). Copied. */
GEMMA_API gm_status gm_engine_set_taps(gm_engine *e, const int *layers, int n, gm_error *err);
GEMMA_API gm_status gm_engine_forward(gm_engine *e, const gm_row *rows, int n, float *logits, gm_error *err);

/* Samples one token from s's logits with s's sampler (seeded from opt->seed on first use or when the
 * seed changes; truncation keeps the stream) and appends it. */
GEMMA_API gm_status gm_seq_sample(gm_seq *s, const gm_sampling *opt, int32_t *tok, gm_error *err);

/* ------------------------------------------------------------------ speculative decoding */

/* Speculative decoding: a proposer guesses the next k tokens of a sequence, the target model checks
 * them in ONE forward pass (the last accepted token + the k guesses, logits for each row), and the
 * sequence keeps the guesses the target agrees with plus one token of the target's own; the rest is
 * rolled back with gm_seq_truncate. A pass reads the weights once for up to k + 1 tokens.
 *
 * Exactness. Greedy (temperature 0): a guess is accepted iff it is the token the target would have
 * picked (argmax after penalties), so the output is byte-identical to decoding without speculation
 * (the engine's rows are batch-invariant). Sampling: the standard rejection scheme: a guess x drawn
 * from the proposer's q is accepted with probability min(1, p(x)/q(x)), where p is the target's
 * distribution after the sequence's sampling settings (penalties, temperature, top-k/p, min-p);
 * on rejection the token is drawn from the normalised residual max(0, p - q). The output then has
 * the target's distribution (not the same stream as without speculation: the RNG is used
 * differently). Prompt lookup's q is a point mass. The random numbers are the target sequence's
 * (seeded from gm_sampling.seed as gm_seq_sample does); a draft model draws from its own sequence's.
 *
 * Proposers.
 *  GM_SPEC_LOOKUP: the longest recent n-gram (ngram_max down to ngram_min tokens) that ends the
 *    history and occurred earlier in it (prompt and output) proposes the tokens that followed it.
 *  GM_SPEC_DRAFT: a second, smaller model with the same vocabulary (checked token by token) runs
 *    in the caller's engine `draft`, in a sequence of its own that follows the target's history;
 *    it drafts k tokens one at a time (greedy when the target is greedy, else sampled from q with
 *    the same settings, q kept for the rejection test).
 *  GM_SPEC_MTP: Gemma 4's assistant (gm_mtp) drafts from the target's own cache and its final-normed hidden
 *    state at the last computed position, which the verify pass records: no second cache, no prefill. Its
 *    guesses are its argmax (as llama.cpp's draft-mtp), a point mass q for the rejection test. The step
 *    right after a prompt (evaluated without its last token) is a plain decode that keeps that state.
 *  GM_SPEC_EAGLE3: an EAGLE-3 head (gm_eagle3) drafts from three of the target's states per position, which the
 *    prompt's evaluation and every verify pass record (gm_engine_set_taps: the head sets them on the engine),
 *    into a small cache of its own. Guesses: its argmax, a point mass q. A sequence whose history was computed
 *    without the taps (by another path) is not drafted for; the output is the same either way.
 * k adapts per sequence: it doubles after a pass that accepted every guess and drops to one more
 * than the accepted count after a rejection (never above k_max). A gate stops proposing while the
 * running rate at which a step's first guess is accepted is below 1/2 (an extra verify row is far
 * from free on a CPU); lookup keeps scoring its guesses meanwhile so the gate reopens when the text
 * turns to copying, a draft model or the assistant probes with one token every 8 steps. With nothing proposed the
 * step is a plain decode. fixed_k turns adaptation and the gate off.
 *
 * Grammars. Under a grammar (gm_seq_set_grammar on the target sequence) each position's token is chosen
 * from the target's logits with the grammar's mask, as gm_seq_sample chooses it, so greedy output is
 * byte-identical with and without speculation, and sampling keeps the target's distribution given the
 * grammar. Lookup proposals are cut before their first token the grammar refuses; a draft model drafts
 * under the grammar. The matcher advances over the tokens a step appends and nothing else; a caller that
 * truncates them rolls it back (gm_matcher_rollback), as the generator does after a stop.
 *
 * Batching. A gm_spec holds one sequence's proposer state. gm_spec_step_many runs one step for
 * several sequences of one engine with all their verify rows in a single gm_engine_forward call
 * (and the drafts of sequences sharing a draft engine in shared calls of that engine). */
typedef struct gm_spec gm_spec;

typedef enum gm_spec_kind {
    GM_SPEC_LOOKUP = 1,
    GM_SPEC_DRAFT = 2,
    GM_SPEC_MTP = 3,
    GM_SPEC_EAGLE3 = 4,
} gm_spec_kind;

typedef struct gm_mtp gm_mtp;       /* Gemma 4's MTP assistant: see "drafters" below */
typedef struct gm_eagle3 gm_eagle3; /* an EAGLE-3 head: see "drafters" below */

enum { GM_SPEC_MAX_K = 32 }; /* the largest k_max */

typedef struct gm_spec_options {
    gm_spec_kind kind;
    int k_max;         /* most tokens proposed per pass, [1, GM_SPEC_MAX_K]; 0: 8 */
    bool fixed_k;      /* always propose k_max (no adaptation, no gate): tests and experiments */
    int ngram_min;     /* lookup: shortest n-gram matched, [1, 16]; 0: 2 */
    int ngram_max;     /* lookup: longest n-gram matched, [ngram_min, 16]; 0: 4 */
    gm_engine *draft;  /* GM_SPEC_DRAFT: an engine over the draft model (kept by the caller, freed after
                          the gm_spec; several gm_spec may share it) */
    gm_mtp *mtp;       /* GM_SPEC_MTP: the assistant over the target's engine (kept by the caller, freed after the
                          gm_spec; several gm_spec may share it) */
    gm_eagle3 *eagle3; /* GM_SPEC_EAGLE3: the head over the target's engine (as mtp) */
} gm_spec_options;

/* Counters since gm_spec_new. Acceptance rate = accepted / drafted; tokens per pass = tokens / passes. */
typedef struct gm_spec_stats {
    int64_t steps;       /* gm_spec_step(_many) steps of this sequence */
    int64_t passes;      /* target forward passes made by those steps */
    int64_t verify_passes; /* passes that checked at least one proposed token */
    int64_t drafted;     /* tokens proposed */
    int64_t accepted;    /* proposed tokens accepted */
    int64_t tokens;      /* tokens appended (accepted + one of the target's per step) */
    int64_t draft_evals; /* draft-model forward calls */
    int64_t refused;     /* lookup tokens cut before verification because the grammar refused them (in
                            neither drafted nor accepted) */
} gm_spec_stats;

/* Speculation over the target sequence s (which must outlive it). Bad options (k_max outside
 * [1, GM_SPEC_MAX_K], n-gram lengths, a missing draft engine, a draft model whose vocabulary differs
 * from the target's) -> GM_ERR_ARG with a message. */
GEMMA_API gm_status gm_spec_new(gm_seq *s, const gm_spec_options *o, gm_spec **out, gm_error *err);
GEMMA_API void gm_spec_free(gm_spec *sp);
/* One step: propose, verify in one forward pass, accept. Appends 1..k+1 tokens to the sequence (at
 * most max_new; max_new <= 0: no limit but the context, which a step may fill to its last position) and
 * returns them in *toks[0..*n) (valid until the next call). They are all in the history on return: token
 * i sits at position gm_seq_length - *n + i, so a caller taking them one at a time judges "context full"
 * by that position, not by gm_seq_length. The history may have any uncomputed suffix (a prompt): it is
 * evaluated first. */
GEMMA_API gm_status gm_spec_step(gm_spec *sp, const gm_sampling *s, int max_new, const int32_t **toks, int *n, gm_error *err);
/* One step for each of sps[0..n) (distinct sequences of one engine), every verify row in one forward
 * call; s[i] and max_new[i] (NULL: no limit) are sequence i's. gm_spec_last gives each one's tokens. */
GEMMA_API gm_status gm_spec_step_many(gm_spec *const *sps, int n, const gm_sampling *s, const int *max_new, gm_error *err);
GEMMA_API const int32_t *gm_spec_last(const gm_spec *sp, int *n);
GEMMA_API void gm_spec_get_stats(const gm_spec *sp, gm_spec_stats *out);

/* ------------------------------------------------------------------ drafters: Gemma 4's MTP assistant */

/* A Gemma 4 assistant (a gemma4-assistant file: gm_config.is_drafter) drafts tokens for a target engine's
 * sequences from the target's own cache: it has no cache of its own and needs no prefill (GM_SPEC_MTP drafts
 * with it). A draft step for a
 * sequence whose cache holds positions [0, p) reads token t (the one at p: the last accepted, not yet computed)
 * and a hidden state h of the target's width (first the target's final-normed state at p - 1: gm_row.hidden; then
 * the previous step's h_next), and gives logits over the target's vocabulary and h_next. Every step of one draft
 * attends at position p over the same keys (as llama.cpp's draft-mtp). docs/speculative.md has the math. */
typedef struct gm_mtp_options {
    int max_rows; /* rows per gm_mtp_draft call before it works in chunks; 0: 64 */
} gm_mtp_options;

/* The assistant over target's sequences. It runs on a backend of the target's kind (CPU or reference: one with
 * host activations) on the target's thread pool when the target has one of the caller's. Bad pairs (another
 * vocabulary or width, head shapes the target's layers do not have, a window the target does not keep) ->
 * GM_ERR_ARG with a message. target and assistant must outlive it. */
GEMMA_API gm_status gm_mtp_new(gm_engine *target, const gm_model *assistant, const gm_mtp_options *o, gm_mtp **out,
                               gm_error *err);
GEMMA_API void gm_mtp_free(gm_mtp *d);

typedef struct gm_mtp_row {
    const gm_seq *seq;   /* a sequence of the target engine with at least one computed position */
    int32_t token;       /* the token at position gm_seq_n_computed(seq) */
    const float *h;      /* the target's width (gm_config.d_model) of floats */
    float *logits;       /* out: n_vocab floats */
    float *h_next;       /* out: the target's width of floats */
} gm_mtp_row;
/* One draft step for each row (rows of distinct or equal sequences, in one batched pass). */
GEMMA_API gm_status gm_mtp_draft(gm_mtp *d, const gm_mtp_row *rows, int n, gm_error *err);

/* An EAGLE-3 head (an eagle3 GGUF, as llama.cpp's converter writes SpecForge / vLLM / RedHat speculators) beside a
 * target engine: it reads three of the target's per-position states (eagle3.target_layers: layer inputs, or the
 * final-normed state for the layer count) and keeps a one-layer cache of its own per sequence. gm_eagle3_new sets
 * the engine's taps (gm_engine_set_taps) to the layers it reads. Runs beside a CPU or reference backend. Bad pairs
 * (another vocabulary or width, a layer the target lacks) -> GM_ERR_ARG. target and head must outlive it. */
GEMMA_API gm_status gm_eagle3_new(gm_engine *target, const gm_model *head, int max_rows, gm_eagle3 **out,
                                  gm_error *err);
GEMMA_API void gm_eagle3_free(gm_eagle3 *d);

#ifdef __cplusplus
}
#endif

#endif /* GEMMA_H */
