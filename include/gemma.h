/* gemma.h — the one public header of libgemma, a Gemma text-generation engine in C11.
 *
 * Conventions
 *  - Every fallible call returns a gm_status and fills an optional gm_error* with a message
 *    that names the file / argument and the problem. Nothing in the library exits or prints.
 *  - Objects are opaque handles created by *_open / *_new and released by *_free (NULL-safe).
 *  - Token ids are int32_t. Text is UTF-8 with an explicit length where it may hold NULs.
 */
#ifndef GEMMA_H
#define GEMMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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

const char *gm_status_name(gm_status s);

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
    GM_TYPE_BF16 = 30,
} gm_type;

/* "Q4_K", "F32", ...; NULL for an id this build does not know. */
const char *gm_type_name(int type);

/* ------------------------------------------------------------------ model */

typedef struct gm_model gm_model;

/* The CPU copies of layer matrices made at open. Default: with AVX2 or AVX-512 the model's level (isa, below), an
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
bool gm_isa_parse(const char *name, gm_isa *out);
/* "auto", "scalar", "avx2", "avx512", "neon", "neondot"; "?" for a value outside the enum. */
const char *gm_isa_name(gm_isa isa);

typedef struct gm_model_options {
    bool keep_mtp;    /* keep MTP / nextn tensors of a GGUF visible (hidden by default) */
    gm_repack repack; /* the CPU copies made at open (above) */
    gm_isa isa;       /* the level the copies are made and the matrices' kernels bound for (above) */
} gm_model_options;

/* Architectural facts, all read from the file (GGUF metadata or config.json) or from the
 * rules of the model's family (model/families/registry.c). */
typedef struct gm_config {
    char arch[32];           /* "gemma", "gemma2", "gemma3", "gemma3n", "gemma4", "gemma-embedding" */
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
    int sliding_pattern;     /* layer i is global iff (i+1) % pattern == 0; 0 = all global, 2 = gemma2 */
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

gm_status gm_model_open(const char *path, const gm_model_options *opt, gm_model **out, gm_error *err);
/* Layer il's facts (NULL when il is out of range). */
const gm_layer_config *gm_model_layer(const gm_model *m, int il);
void gm_model_free(gm_model *m);
/* The CPU copies of layer matrices (gm_repack) are made after gm_model_open returns, by up to two threads:
 * until a matrix's copy is ready its kernels read the file's layout, more slowly, with the same results. This
 * returns once every copy is in place (benchmarks; a server before it takes traffic). */
void gm_model_wait_packed(gm_model *m);
const gm_config *gm_model_config(const gm_model *m);
/* The level m was opened for (gm_model_options.isa lowered to the CPU's; AUTO only for a NULL m). */
gm_isa gm_model_isa(const gm_model *m);
/* Prints a human (json=false) or machine (json=true) description: architecture, config,
 * tokenizer summary, tensor table, totals. */
gm_status gm_model_describe(const gm_model *m, bool json, void *FILE_stream, gm_error *err);

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
gm_status gm_tokenizer_open(const char *path, gm_tokenizer **out, gm_error *err);
void gm_tokenizer_free(gm_tokenizer *tok);

int32_t gm_tokenizer_n_vocab(const gm_tokenizer *tok);
int32_t gm_tokenizer_bos(const gm_tokenizer *tok);  /* -1 if none */
int32_t gm_tokenizer_eos(const gm_tokenizer *tok);  /* -1 if none */
int32_t gm_tokenizer_eot(const gm_tokenizer *tok);  /* <end_of_turn>; -1 if none */
int32_t gm_tokenizer_unk(const gm_tokenizer *tok);  /* -1 if none */
int32_t gm_tokenizer_pad(const gm_tokenizer *tok);  /* -1 if none */
bool gm_tokenizer_add_bos(const gm_tokenizer *tok); /* the file's add_bos_token */
/* k >= 1 such that any text of B bytes, tokenized with either parse_special and without BOS / EOS,
 * gives at least ceil(B / k) tokens: a prompt of B bytes cannot fit a context of fewer than B / k
 * tokens, known before tokenizing it. k is the longest vocabulary piece in bytes: no token covers
 * more text than its piece, because the only normalization (space -> U+2581, 3 bytes; a leading
 * dummy-prefix space) never shrinks text, special pieces cover their own text and byte / <unk>
 * fallbacks one byte. 0 means "no bound" (a normalizer that could shrink text would have to return
 * it; none does today) and is what a NULL tokenizer gives. */
size_t gm_tokenizer_max_token_bytes(const gm_tokenizer *tok);
/* GM_TOKEN_UNDEFINED for an id out of range. */
gm_token_type gm_token_get_type(const gm_tokenizer *tok, int32_t id);
bool gm_token_is_control(const gm_tokenizer *tok, int32_t id);
/* End of generation: <eos> or <end_of_turn>. */
bool gm_token_is_eog(const gm_tokenizer *tok, int32_t id);
/* The stop ids a generator should use (<eos>, <end_of_turn>); returns how many (<= 4). */
size_t gm_tokenizer_stop_ids(const gm_tokenizer *tok, int32_t out[4]);
/* The id whose vocabulary piece is exactly text[0..len) (e.g. "<start_of_turn>"); -1 if none. */
int32_t gm_token_id(const gm_tokenizer *tok, const char *text, size_t len);
/* The raw vocabulary piece (with U+2581 for spaces, "<0x41>" for bytes); NULL if out of range. */
const char *gm_token_text(const gm_tokenizer *tok, int32_t id, size_t *len);

/* Encodes text[0..len) (any bytes; invalid UTF-8 becomes byte tokens) into *ids (malloc'd, free()
 * it) and *n. add_bos: prepend BOS, unless the parsed text already starts with BOS (never two).
 * parse_special: control-token texts such as "<start_of_turn>" become their ids; otherwise they
 * are ordinary text (user-defined tokens, e.g. "\n" runs and HTML tags, are always atomic).
 * Markers -- the chat formats' turn / channel / tool-call tokens (Gemma 3, Gemma 4, FunctionGemma),
 * BOS, EOS, PAD, end of turn and every control token -- never come out of text encoded without
 * parse_special, whatever type the file gives them (even USER_DEFINED or NORMAL): they are spelled
 * with ordinary pieces. With parse_special their text is the marker, whatever the type. */
gm_status gm_tokenize(const gm_tokenizer *tok, const char *text, size_t len, bool add_bos,
                      bool parse_special, int32_t **ids, size_t *n, gm_error *err);

/* The bytes a token decodes to: U+2581 -> ' ', <0xXX> -> that byte, control / unknown tokens ->
 * nothing (their text when render_special). The view stays valid while tok lives.
 * An id out of range -> GM_ERR_ARG. */
gm_status gm_token_to_piece(const gm_tokenizer *tok, int32_t id, bool render_special,
                            const char **piece, size_t *len, gm_error *err);
/* Concatenated pieces of ids[0..n), NUL-terminated (*len excludes the NUL; the text may hold
 * NULs and invalid UTF-8 exactly as encoded). Any id out of range -> GM_ERR_ARG, nothing out. */
gm_status gm_detokenize(const gm_tokenizer *tok, const int32_t *ids, size_t n, bool render_special,
                        char **out, size_t *len, gm_error *err);

/* Streaming decoder: push ids one by one and get the bytes that now end on a complete UTF-8
 * character; an incomplete multi-byte sequence is held back until it completes (or until a byte
 * proves it invalid, then it goes out as is). The concatenation of every push and the final flush
 * equals gm_detokenize of the same ids. Returned views are valid until the next call. */
typedef struct gm_detok_stream gm_detok_stream;
gm_status gm_detok_stream_new(const gm_tokenizer *tok, bool render_special, gm_detok_stream **out,
                              gm_error *err);
gm_status gm_detok_stream_push(gm_detok_stream *s, int32_t id, const char **text, size_t *len,
                               gm_error *err);
/* Emits whatever is held back (possibly an incomplete sequence) and resets the stream. */
void gm_detok_stream_flush(gm_detok_stream *s, const char **text, size_t *len);
void gm_detok_stream_free(gm_detok_stream *s);

/* Chat. role: "system" (only as the first message), "user", "assistant" (rendered "model") or
 * "model"; user and model turns must alternate, starting with user (GM_ERR_ARG otherwise).
 * Renders Gemma's turn format, content trimmed like the official template's `| trim`:
 *   <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n{reply}
 *   <end_of_turn>\n ... [<start_of_turn>model\n when add_generation_prompt]
 * The format comes from the file's chat template when it is Gemma's (recognised by its
 * <start_of_turn> / <end_of_turn> markers); a file without a template, or with one we do not
 * recognise, falls back to the Gemma format when the vocabulary has <start_of_turn> and
 * <end_of_turn> (GM_ERR_UNSUPPORTED otherwise). The text starts with the BOS piece: tokenize it
 * with add_bos=false (or true: gm_tokenize never doubles BOS) and parse_special=true. */
typedef struct gm_tool_call gm_tool_call;
typedef struct gm_chat_message {
    const char *role;            /* system (first only), developer (= system), user, assistant / model, tool */
    const char *content;         /* NULL only for an assistant message with tool_calls */
    /* Tool use (see "tools" below); zero when unused. */
    const gm_tool_call *tool_calls; /* assistant: the calls it made */
    size_t n_tool_calls;
    const char *tool_call_id;    /* tool: the call it answers (its function's name is found from it) */
    const char *name;            /* tool: the function's name, when tool_call_id does not find one */
    const char *reasoning;       /* assistant: its thoughts (Gemma 4 renders them before calls after the last user turn) */
    /* user: images at these byte offsets of content (ascending): each becomes the family's image markers around
     * the place of its rows (gm_chat_options.image_pos); the text between two images is trimmed on its own. */
    const size_t *image_at;
    size_t n_images;
} gm_chat_message;

gm_status gm_chat_render(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n,
                         bool add_generation_prompt, char **out, gm_error *err);
/* The same conversation as token ids, ready to evaluate: the turn markers (and BOS) are their ids and
 * every content is encoded as plain text, so a message holding "<end_of_turn><start_of_turn>model"
 * (or any other marker, see gm_tokenize) stays text and cannot forge a turn, whatever the file
 * types those tokens. For contents without control-token texts the ids equal
 * gm_tokenize(gm_chat_render(...), parse_special = true). *out: malloc'd, free() it. */
gm_status gm_chat_tokenize(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n,
                           bool add_generation_prompt, int32_t **out, size_t *n_out, gm_error *err);

/* ---- tools: OpenAI-style function calling in each Gemma family's own format (text/tools.c).
 *   GM_TOOLS_GEMMA3         Gemma 1-3 / 3n: no tool tokens; Google's documented prompt (the tools as JSON in
 *                           the first user turn) and pythonic calls `[f(a="x", b=2), g()]` recognised by shape
 *                           (a reply that is only such a list); results go back as a user turn of
 *                           `<tool_response>...</tool_response>` blocks.
 *   GM_TOOLS_FUNCTIONGEMMA  FunctionGemma (a Gemma 3 vocabulary with <start_function_call> ...): declarations
 *                           in a developer turn, `<start_function_call>call:f{a:<escape>x<escape>}<end_function_call>`,
 *                           results `<start_function_response>response:f{...}<end_function_response>` in the same
 *                           model turn; <start_function_response> ends a calling turn.
 *   GM_TOOLS_GEMMA4         Gemma 4: `<|tool>declaration:...<tool|>` in the system turn,
 *                           `<|tool_call>call:f{a:<|"|>x<|"|>}<tool_call|>`, results
 *                           `<|tool_response>response:f{value:<|"|>...<|"|>}<tool_response|>`; <|tool_response>
 *                           ends a calling turn; thoughts `<|channel>thought\n...<channel|>`.
 * The format follows the vocabulary's markers (Gemma 4 > FunctionGemma > Gemma 3). */
typedef enum gm_tool_format {
    GM_TOOLS_NONE = 0, GM_TOOLS_GEMMA3, GM_TOOLS_FUNCTIONGEMMA, GM_TOOLS_GEMMA4,
} gm_tool_format;
gm_tool_format gm_tokenizer_tool_format(const gm_tokenizer *tok);
const char *gm_tool_format_name(gm_tool_format f); /* "gemma3-pythonic", "functiongemma", "gemma4", "none" */

typedef struct gm_tool {
    const char *name;        /* [a-zA-Z0-9_.-]{1,64} */
    const char *description; /* NULL: none */
    const char *parameters;  /* the arguments' JSON schema (an object schema) as text; NULL: no arguments */
} gm_tool;

struct gm_tool_call {
    const char *id;          /* the caller's id for it (NULL: none) */
    const char *name;
    const char *arguments;   /* a JSON object, as text (OpenAI's function.arguments) */
};

typedef struct gm_chat_options {
    bool add_generation_prompt;
    const gm_tool *tools;    /* declared in the prompt in the family's format */
    size_t n_tools;
    /* tokenize, out: for each image of the conversation in order, the index in the ids where its rows go
     * (between its begin and end markers: Gemma 3 "\n\n<start_of_image>" | "<end_of_image>\n\n" as
     * transformers expands them, Gemma 4 "<|image>" | "<image|>"); room for n_image_pos (GM_ERR_ARG if short). */
    size_t *image_pos;
    size_t n_image_pos;
} gm_chat_options;

/* gm_chat_render / gm_chat_tokenize with tools and tool messages. Without tools, tool calls or tool messages
 * the output is exactly gm_chat_render's / gm_chat_tokenize's. Roles then follow the conversation's shape:
 * user, assistant (with tool_calls: followed by one tool message per call, or by the end), tool ..., then
 * an assistant reply or the end; anything else is GM_ERR_ARG naming the message. Tool arguments must be
 * JSON objects and parameters JSON schemas (GM_ERR_ARG otherwise). */
gm_status gm_chat_render_ex(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n,
                            const gm_chat_options *o, char **out, gm_error *err);
gm_status gm_chat_tokenize_ex(const gm_tokenizer *tok, const gm_chat_message *msgs, size_t n,
                              const gm_chat_options *o, int32_t **out, size_t *n_out, gm_error *err);

/* Reads a model's reply token by token and splits it into content, thoughts and tool calls of the
 * tokenizer's format. Calls to functions not in tools, and anything malformed, come back as content
 * text (never lost, never an error). Call arguments come out as JSON objects (text). */
typedef struct gm_tool_parser gm_tool_parser;
gm_status gm_tool_parser_new(const gm_tokenizer *tok, const gm_tool *tools, size_t n_tools, gm_tool_parser **out,
                             gm_error *err);
void gm_tool_parser_free(gm_tool_parser *p);
/* One generated token. *text / *n: content that is now final (whole UTF-8 characters; a reply that may
 * still turn out to be a call list is held back). Returns true when the token ends a calling turn
 * (Gemma 4's <|tool_response>, FunctionGemma's <start_function_response>): generation should stop. */
bool gm_tool_parser_push(gm_tool_parser *p, int32_t id, const char **text, size_t *n);
/* The reply ended: whatever was held back, decided (calls or content). */
void gm_tool_parser_finish(gm_tool_parser *p, const char **text, size_t *n);
size_t gm_tool_parser_n_calls(const gm_tool_parser *p);
/* Call i: its name and arguments (a JSON object's text); views valid while p lives. */
void gm_tool_parser_call(const gm_tool_parser *p, size_t i, const char **name, const char **arguments);
/* The thoughts read so far (Gemma 4's thought channel), NUL-terminated. */
const char *gm_tool_parser_reasoning(const gm_tool_parser *p, size_t *len);

/* A grammar that admits only tool calls in the tokenizer's format: one call, or with parallel one or more;
 * only = NULL for any of tools, else that function. Each call's arguments follow its parameters schema
 * (a schema it cannot honour is GM_ERR_UNSUPPORTED naming the keyword). Match it with a vocabulary from
 * gm_gvocab_from_tokenizer_tools (markers as the grammar's delimiters). */
typedef struct gm_grammar gm_grammar;
gm_status gm_tool_grammar(const gm_tokenizer *tok, const gm_tool *tools, size_t n_tools, const char *only, bool parallel,
                          gm_grammar **out, gm_error *err);

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
bool gm_text_is_utf8(const char *s, size_t n);
/* "gemma" (from the template), "gemma-default" (no template), "gemma-fallback" (a template we did
 * not recognise) or "none" (no Gemma turn tokens: gm_chat_render fails). */
const char *gm_tokenizer_chat_format(const gm_tokenizer *tok);

/* @end tokenizer */

/* ------------------------------------------------------------------ generator (generate/) */
/* @section generator: owned by model/ and generate/ */

/* The model's tokenizer (owned by the model). */
const gm_tokenizer *gm_model_tokenizer(const gm_model *m);

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

gm_sampling gm_sampling_default(void);
gm_status gm_sampling_validate(const gm_sampling *s, gm_error *err);

/* ------------------------------------------------------------------ engine and sequences */

/* An engine owns what every sequence shares: the model (read-only; several engines may share one),
 * the backend (CPU today), one thread pool, the forward pass's scratch, and the KV block pool.
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
 * the engine runs its own pool inside each call. Different engines are independent. */
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
} gm_backend_kind;
/* "cpu" / "reference" to the kind; false for anything else. */
bool gm_backend_kind_parse(const char *name, gm_backend_kind *out);

typedef struct gm_engine_options {
    int n_threads;       /* <= 0: physical cores */
    int n_ctx;           /* positions per sequence; 0: the model's context_length capped at GM_DEFAULT_MAX_CTX */
    int n_batch;         /* rows per forward chunk (scratch size); 0: 512 */
    size_t kv_mem;       /* KV pool budget in bytes; 0: enough for one sequence of n_ctx positions */
    gm_kv_dtype kv_type; /* storage of keys and values */
    bool no_prefix_cache; /* do not index computed blocks for reuse across sequences */
    gm_backend_kind backend; /* GM_BACKEND_CPU (0) by default */
    /* The CPU backend's kernels. AUTO: the model's level (gm_model_isa). Another level, once lowered to the
     * CPU's, must be the model's: its weight copies and matrix kernels were made for that level at open
     * (GM_ERR_ARG otherwise; open the model with gm_model_options.isa). The reference backend has none. */
    gm_isa isa;
} gm_engine_options;

gm_status gm_engine_new(const gm_model *m, const gm_engine_options *opt, gm_engine **out, gm_error *err);
/* Frees the engine; its sequences must be freed first (GM_ERR_STATE otherwise: nothing is freed). */
gm_status gm_engine_free(gm_engine *e);
const gm_model *gm_engine_model(const gm_engine *e);
int gm_engine_n_ctx(const gm_engine *e);

/* KV pool figures: blocks in use by sequences, blocks held only by the prefix index (evictable), blocks
 * that still fit the budget, bytes per block of each kind, positions served from the index so far. */
typedef struct gm_kv_stats {
    int64_t blocks_live, blocks_cached, blocks_free;
    size_t bytes_used, bytes_budget;
    size_t bytes_per_token;  /* keys + values of every layer for one position (no sharing, no window) */
    int64_t reused_positions; /* positions adopted from the prefix index since the engine was made */
    int64_t evictions;
} gm_kv_stats;
void gm_engine_kv_stats(const gm_engine *e, gm_kv_stats *out);

gm_status gm_seq_new(gm_engine *e, gm_seq **out, gm_error *err);
void gm_seq_free(gm_seq *s);
/* A new sequence with s's history and KV (shared blocks, copied on write), sampler state and RNG. */
gm_status gm_seq_fork(const gm_seq *s, gm_seq **out, gm_error *err);
/* Keeps the first n positions of the history (and their KV): rollback without recomputing or
 * touching the RNG. n > length: GM_ERR_ARG. */
gm_status gm_seq_truncate(gm_seq *s, int n, gm_error *err);
/* Appends ids to the history (no compute). Past n_ctx: GM_ERR_CONTEXT. */
gm_status gm_seq_append(gm_seq *s, const int32_t *ids, int n, gm_error *err);
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
gm_status gm_seq_append_embeds(gm_seq *s, const gm_embed_span *span, gm_error *err);
const int32_t *gm_seq_tokens(const gm_seq *s, int *n);
int gm_seq_length(const gm_seq *s);
/* Positions whose keys and values are in the cache. */
int gm_seq_n_computed(const gm_seq *s);
/* Positions of this sequence taken from the prefix index instead of computed (since creation). */
int gm_seq_n_reused(const gm_seq *s);
/* The prefix-cache scope of s (multi-tenant privacy): s adopts only blocks that sequences of the same
 * scope entered in the prefix index, and enters its own under it, so one tenant's prompts never serve
 * (or time) another's. 0, the default, is the scope every sequence shares; forks inherit the scope. Set
 * it before s has computed anything: afterwards GM_ERR_STATE (setting the scope it has is always OK). */
gm_status gm_seq_set_prefix_scope(gm_seq *s, uint64_t scope, gm_error *err);
/* The logits after the last position, valid after an evaluation that reached the end of the history
 * (NULL otherwise); n_vocab floats owned by the sequence until its next change. */
const float *gm_seq_logits(const gm_seq *s);

/* Computes what the histories of seqs[0..n) lack, all of them in shared forward calls of at most
 * n_batch rows (prompt chunks and single decode tokens together), and leaves each sequence's last
 * logits in gm_seq_logits. Sequences with nothing pending keep their logits (a sequence whose whole
 * history is cached but has no logits recomputes its last position). Sequences must be distinct and
 * belong to e. */
gm_status gm_engine_eval(gm_engine *e, gm_seq *const *seqs, int n, gm_error *err);

/* One step of a continuous-batching scheduler: like gm_engine_eval (adoption from the prefix index
 * included) but a single forward call of at most max_rows rows (capped at n_batch): every sequence's
 * pending single decode token first, then prompt chunks in the order of seqs, so a long prompt is
 * computed over several steps without holding up the others. A sequence whose history is complete after
 * the call has its logits (gm_seq_logits); the others keep computing on later steps. *n_rows (may be
 * NULL): rows computed, 0 when nothing was pending. Results are those of gm_engine_eval, bit for bit. */
gm_status gm_engine_step(gm_engine *e, gm_seq *const *seqs, int n, int max_rows, int *n_rows, gm_error *err);

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
gm_status gm_engine_set_taps(gm_engine *e, const int *layers, int n, gm_error *err);
gm_status gm_engine_forward(gm_engine *e, const gm_row *rows, int n, float *logits, gm_error *err);

/* Samples one token from s's logits with s's sampler (seeded from opt->seed on first use or when the
 * seed changes; truncation keeps the stream) and appends it. */
gm_status gm_seq_sample(gm_seq *s, const gm_sampling *opt, int32_t *tok, gm_error *err);

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
 * k adapts per sequence: it doubles after a pass that accepted every guess and drops to one more
 * than the accepted count after a rejection (never above k_max). A gate stops proposing while the
 * running rate at which a step's first guess is accepted is below 1/2 (an extra verify row is far
 * from free on a CPU); lookup keeps scoring its guesses meanwhile so the gate reopens when the text
 * turns to copying, a draft model probes with one token every 8 steps. With nothing proposed the
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
} gm_spec_kind;

enum { GM_SPEC_MAX_K = 32 }; /* the largest k_max */

typedef struct gm_spec_options {
    gm_spec_kind kind;
    int k_max;         /* most tokens proposed per pass, [1, GM_SPEC_MAX_K]; 0: 8 */
    bool fixed_k;      /* always propose k_max (no adaptation, no gate): tests and experiments */
    int ngram_min;     /* lookup: shortest n-gram matched, [1, 16]; 0: 2 */
    int ngram_max;     /* lookup: longest n-gram matched, [ngram_min, 16]; 0: 4 */
    gm_engine *draft;  /* GM_SPEC_DRAFT: an engine over the draft model (kept by the caller, freed after
                          the gm_spec; several gm_spec may share it) */
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
gm_status gm_spec_new(gm_seq *s, const gm_spec_options *o, gm_spec **out, gm_error *err);
void gm_spec_free(gm_spec *sp);
/* One step: propose, verify in one forward pass, accept. Appends 1..k+1 tokens to the sequence (at
 * most max_new; max_new <= 0: no limit but the context, which a step may fill to its last position) and
 * returns them in *toks[0..*n) (valid until the next call). They are all in the history on return: token
 * i sits at position gm_seq_length - *n + i, so a caller taking them one at a time judges "context full"
 * by that position, not by gm_seq_length. The history may have any uncomputed suffix (a prompt): it is
 * evaluated first. */
gm_status gm_spec_step(gm_spec *sp, const gm_sampling *s, int max_new, const int32_t **toks, int *n, gm_error *err);
/* One step for each of sps[0..n) (distinct sequences of one engine), every verify row in one forward
 * call; s[i] and max_new[i] (NULL: no limit) are sequence i's. gm_spec_last gives each one's tokens. */
gm_status gm_spec_step_many(gm_spec *const *sps, int n, const gm_sampling *s, const int *max_new, gm_error *err);
const int32_t *gm_spec_last(const gm_spec *sp, int *n);
void gm_spec_get_stats(const gm_spec *sp, gm_spec_stats *out);
gm_seq *gm_spec_seq(const gm_spec *sp);

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
} gm_generator_options;


/* The generator keeps a token history and a KV cache. Invariant after a cached step: the cache holds
 * every token of the history but the last sampled one, which is the input of the next decode.
 * Pointers returned (logits, tokens, taps) stay valid until the next call on the generator.
 * One thread at a time per generator; several generators may share one model (read-only). */
gm_status gm_generator_new(const gm_model *m, const gm_generator_options *opt, gm_generator **out, gm_error *err);
void gm_generator_free(gm_generator *g);
void gm_generator_reset(gm_generator *g);          /* empty history and cache */
const gm_config *gm_generator_config(const gm_generator *g);
const gm_model *gm_generator_model(const gm_generator *g);
/* The engine and sequence underneath (owned by the generator). */
gm_engine *gm_generator_engine(const gm_generator *g);
gm_seq *gm_generator_seq(const gm_generator *g);
int gm_generator_n_ctx(const gm_generator *g);
const int32_t *gm_generator_tokens(const gm_generator *g, int *n);
/* Positions of the history whose keys/values are in the cache (what the next cached call skips). */
int gm_generator_n_cached(const gm_generator *g);
/* true for <eos> and <end_of_turn>. */
bool gm_generator_is_stop(const gm_generator *g, int32_t tok);

/* Replaces the history with ids (no compute). The cached prefix shared with the old history is kept,
 * so only the new suffix is computed by the next cached call (multi-turn chat, prompt reuse). */
gm_status gm_generator_prefill(gm_generator *g, const int32_t *ids, int n, gm_error *err);
/* Appends ids to the history (no compute). */
gm_status gm_generator_append(gm_generator *g, const int32_t *ids, int n, gm_error *err);
/* A prompt with caller embeddings (images): span goes before ids[at]. */
typedef struct gm_prompt_span {
    size_t at;
    gm_embed_span span;
} gm_prompt_span;
/* gm_generator_prefill with spans (at ascending, <= n): the kept prefix ends where the histories differ in a
 * token or a span (spans match by key and length; anonymous ones never match). */
gm_status gm_generator_prefill_spans(gm_generator *g, const int32_t *ids, int n, const gm_prompt_span *spans,
                                     int n_spans, gm_error *err);

/* Naive reference: recomputes the whole history from an empty cache, samples one token, appends it. */
gm_status gm_generator_step(gm_generator *g, const gm_sampling *s, int32_t *tok, gm_error *err);
/* n naive steps; stops after a stop token unless ignore_stop. *n_out = tokens written to out. */
gm_status gm_generator_generate(gm_generator *g, int n, const gm_sampling *s, int32_t *out, int *n_out,
                                gm_error *err);

/* Cached: computes whatever of the history the cache lacks (all of it after prefill: one batched
 * pass; one token later), samples, appends. */
gm_status gm_generator_step_cached(gm_generator *g, const gm_sampling *s, int32_t *tok, gm_error *err);
gm_status gm_generator_generate_cached(gm_generator *g, int n, const gm_sampling *s, int32_t *out, int *n_out,
                                       gm_error *err);
/* Streaming: on_token is called after each token (stop tokens included); returning false stops. */
typedef bool (*gm_token_fn)(int32_t tok, void *user);
gm_status gm_generator_generate_cached_with(gm_generator *g, int n, const gm_sampling *s, gm_token_fn on_token,
                                            void *user, int *n_out, gm_error *err);

/* Logits without sampling (n_vocab floats, owned by the generator). */
gm_status gm_generator_prefill_get_last_logits(gm_generator *g, const int32_t *ids, int n, const float **logits,
                                               gm_error *err);
/* Appends id and returns the logits after it. */
gm_status gm_generator_decode_get_logits(gm_generator *g, int32_t id, const float **logits, gm_error *err);
/* Logits of every position of the history (n x n_vocab into out, caller-sized), from an empty cache;
 * afterwards the cache holds the whole history. For scoring / perplexity. */
gm_status gm_generator_score(gm_generator *g, float *out, gm_error *err);
/* Log-probabilities of the history under the model: out[i] = log p(tok[i+1] | tok[0..i]) for
 * i < n-1 (n = history length >= 2), computed in one pass from an empty cache without n x n_vocab
 * floats (perplexity = exp(-mean(out))). Afterwards the cache holds the whole history. */
gm_status gm_generator_score_logprobs(gm_generator *g, float *out, gm_error *err);
/* Streams the logits of positions [first, end) of the history to fn (pos, n_vocab floats valid during
 * the call), in order, computed in one pass from an empty cache a few rows at a time (no n x n_vocab
 * buffer). fn returns false to stop receiving (the pass still completes). For perplexity and KL
 * comparisons. Afterwards the cache holds the whole history. */
typedef bool (*gm_logits_fn)(int pos, const float *logits, void *user);
gm_status gm_generator_score_with(gm_generator *g, int first, int end, gm_logits_fn fn, void *user, gm_error *err);

/* Multimodal prefill: replaces the history with ids and runs one pass whose layer-0 inputs are
 * embeds (n x d floats, used as given: the caller applies any embedding scale, e.g. E[tok] *
 * config.embed_scale for text positions). attn_bias: NULL or n x n floats added to the attention
 * score of query i on key j (after soft-capping); the causal and sliding-window masks still apply,
 * -INFINITY masks a pair. logits (may be NULL) receives the last position's logits. A following
 * step_cached samples from those logits. */
gm_status gm_generator_prefill_from_embeds(gm_generator *g, const int32_t *ids, int n, const float *embeds,
                                           const float *attn_bias, const float **logits, gm_error *err);
/* The same with a full additive mask (n x n, required) that REPLACES the causal and sliding-window
 * masks over the prompt: 0 allows query i to see key j, -INFINITY forbids it, whatever their order,
 * so image tokens can attend to each other both ways (Gemma 3 vision: causal for text, bidirectional
 * inside each image). The whole prompt must fit one batch (n <= n_batch option, default 512). */
gm_status gm_generator_prefill_from_embeds_masked(gm_generator *g, const int32_t *ids, int n, const float *embeds,
                                                  const float *mask, const float **logits, gm_error *err);

/* Speculative decoding (see "speculative decoding") in gm_generator_generate_cached and _with; o NULL
 * turns it off. Tokens a step appended past a stop token, a callback's stop or n are rolled back, so
 * the history afterwards is what was emitted. Hidden-state taps are not recorded while it is on. */
gm_status gm_generator_set_speculative(gm_generator *g, const gm_spec_options *o, gm_error *err);
/* The generator's speculative state (NULL when off): for gm_spec_get_stats. */
gm_spec *gm_generator_speculative(const gm_generator *g);

/* Hidden-state taps: each later cached step (decode or prefill pass) records the INPUT hidden state
 * of these layers at the last computed position. Ids outside [0, n_layers) are dropped, duplicates
 * merged, the list sorted. n = 0 turns taps off. */
gm_status gm_generator_set_aux_hidden_layers(gm_generator *g, const int *layer_ids, int n, gm_error *err);
/* The taps of the last cached step: *n_rows rows of d floats, in the sorted layer order given by
 * *layers (may be NULL). Taking clears them (*n_rows = 0 until the next step). */
void gm_generator_take_last_aux(gm_generator *g, const float **rows, const int **layers, int *n_rows);

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
} gm_embedder_options;

gm_status gm_embedder_new(const gm_model *m, const gm_embedder_options *opt, gm_embedder **out, gm_error *err);
void gm_embedder_free(gm_embedder *e);
int gm_embedder_dim(const gm_embedder *e);   /* floats per vector (gm_config.embedding_dim) */
int gm_embedder_n_ctx(const gm_embedder *e); /* the longest input accepted */
/* The pooled vector of ids[0..n) (n >= 1; used as given: no BOS / EOS added) into out
 * (gm_embedder_dim floats). n > n_ctx -> GM_ERR_CONTEXT; a bad id -> GM_ERR_ARG. */
gm_status gm_embed_tokens(gm_embedder *e, const int32_t *ids, int n, float *out, gm_error *err);
/* text[0..len) tokenized as the model's tokenizer config says (BOS when add_bos_token, <eos> after
 * when add_eos_token; control-token texts such as "<eos>" become their ids, as llama.cpp's embedding
 * paths tokenize), then gm_embed_tokens. EmbeddingGemma expects a
 * task prefix in the text ("task: search result | query: ...", "title: none | text: ..."): the
 * caller adds it. *n_tokens (may be NULL): the tokens embedded. */
gm_status gm_embed_text(gm_embedder *e, const char *text, size_t len, float *out, int *n_tokens, gm_error *err);
/* The token ids gm_embed_text would embed (malloc'd, free() them). */
gm_status gm_embed_tokenize(const gm_model *m, const char *text, size_t len, int32_t **ids, size_t *n, gm_error *err);
/* Scales v[0..n) to unit L2 norm (a zero vector stays zero). */
void gm_embedding_normalize(float *v, int n);

/* ------------------------------------------------------------------ images (vision/) */

/* Images in: decoding (PNG, JPEG, WebP) to 8-bit RGB and the preprocessing the vision encoders'
 * references apply before their first layer. Images come from untrusted uploads, so every decoder
 * checks the header's dimensions against limits before it allocates pixel memory, turns truncated
 * or corrupt data into an error (never a crash, never a leak) and prints nothing. */

/* width * height pixels, row-major, 3 bytes each (R, G, B), no padding between rows. pixels is
 * malloc'd by the function that fills the image; gm_image_free releases it. */
typedef struct gm_image {
    int width, height;
    uint8_t *pixels;
} gm_image;

/* What a decoder accepts. A field <= 0 takes its default (GM_IMAGE_MAX_SIDE, GM_IMAGE_MAX_PIXELS);
 * a NULL gm_image_limits* takes all defaults. Dimensions are those of the file's header, before
 * EXIF orientation (which only swaps them). */
typedef struct gm_image_limits {
    int max_width;
    int max_height;
    int64_t max_pixels;
} gm_image_limits;
#define GM_IMAGE_MAX_SIDE 8192
#define GM_IMAGE_MAX_PIXELS ((int64_t)40 * 1000 * 1000)

/* Decodes bytes[0..len) into *out (zeroed first; freed again on failure). The format comes from
 * the magic bytes, not a name or MIME type: PNG (libpng), JPEG (libjpeg-turbo), WebP (libwebp; an
 * animated WebP is GM_ERR_UNSUPPORTED). Anything else is GM_ERR_FORMAT naming what it looks like
 * (GIF, BMP, TIFF, HEIF/AVIF, ..., or the first bytes). Conversions, as the references do:
 *  - alpha is dropped, not composited (Pillow's convert("RGB") and llama.cpp's stbi_load(..., 3)
 *    both keep the colour channels as stored): a transparent pixel keeps its stored colour;
 *  - grayscale is replicated to R = G = B; palettes are expanded (their transparency dropped);
 *  - 16-bit samples keep their high byte (stb_image, and Pillow for RGB; Pillow clips 16-bit gray);
 *  - JPEG: the EXIF orientation tag (APP1) is applied, as transformers' load_image does with
 *    ImageOps.exif_transpose (llama.cpp ignores it); CMYK / YCCK JPEGs are converted as Pillow
 *    does (Adobe inverted CMYK);
 *  - a JPEG that ends early is an error (Pillow's "image file is truncated"), not a grey bottom.
 * Over a limit: GM_ERR_UNSUPPORTED, from the header alone. */
gm_status gm_image_decode(const void *bytes, size_t len, const gm_image_limits *lim, gm_image *out, gm_error *err);
/* Frees img->pixels and zeroes *img (NULL-safe). */
void gm_image_free(gm_image *img);
/* A 128-bit identity of the decoded image (its size and pixels, not its file's bytes: the same picture
 * sent as PNG or WebP is the same image) under a 128-bit key: SipHash-2-4 twice, under key and under key
 * with its words swapped. With a secret random key (the server's) nobody can aim a collision; it names
 * the image in the prefix cache (gm_embed_span.key) and in an encoder cache. */
void gm_image_digest(const gm_image *img, const uint64_t key[2], uint64_t out[2]);

/* src resized to width x height (each 1..65536) into *out (new pixels) with Pillow's BILINEAR:
 * separable, a triangle filter widened by the scale when downscaling (antialiasing), 22-bit
 * fixed-point weights, each pass rounded to 8 bits. Identical bytes to Pillow >= 13's
 * PIL.Image.resize((width, height), Image.BILINEAR) on an RGB image, which runs the vertical pass
 * first when the height shrinks by more than twice what the width does (older Pillow and
 * llama.cpp's resize_pillow always run the horizontal pass first: some bytes differ by one). */
gm_status gm_image_resize_bilinear(const gm_image *src, int width, int height, gm_image *out, gm_error *err);
/* The same with Pillow's BICUBIC (Keys' cubic with a = -0.5, support 2, widened by the scale when
 * downscaling; 8-bit clamping after each pass): identical bytes to Pillow >= 13's
 * PIL.Image.resize((width, height), Image.BICUBIC) on an RGB image, pass order as above. What Gemma 4's
 * llama.cpp preprocessing uses (transformers' Gemma4ImageProcessor uses torchvision's instead). */
gm_status gm_image_resize_bicubic(const gm_image *src, int width, int height, gm_image *out, gm_error *err);
/* llama.cpp's fixed-size preprocessing (img_tool::resize, PAD_CEIL): src scaled by
 * min(width / w, height / h) (float), each side ceil'd and capped, resized with
 * Pillow's bilinear filter with llama.cpp's pass order (horizontal first, always), centred (offsets
 * floored) on a black width x height canvas. An image already width x height is copied unchanged. */
gm_status gm_image_letterbox(const gm_image *src, int width, int height, gm_image *out, gm_error *err);
/* Planar CHW floats: out[c * h * w + y * w + x] = (pixel / 255.0f - mean[c]) / std[c], in float as
 * llama.cpp computes it. out holds 3 * width * height floats. std[c] == 0 is GM_ERR_ARG. */
gm_status gm_image_to_chw(const gm_image *img, const float mean[3], const float std[3], float *out, gm_error *err);

/* ------------------------------------------------------------------ vision encoder (vision/) */

/* The image encoders of Gemma 3 and Gemma 4, read from llama.cpp mmproj GGUFs (general.architecture "clip"):
 *  - Gemma 3 (clip.projector_type "gemma3"): SigLIP ViT + the Gemma 3 projector. One fixed input size,
 *    gm_vision_image_size squared, 256 rows.
 *  - Gemma 4 (clip.vision.projector_type "gemma4v"): a ViT with 2D RoPE, 3 x 3 pooling and a projection. The
 *    input size is chosen per image (llama.cpp's rule: aspect kept, sides multiples of 48, between
 *    image_min_tokens and image_max_tokens rows of 48 x 48 pixels each), so gm_vision_image_size is 0 and
 *    gm_vision_n_tokens the most rows one image can give.
 * An encoder turns one image, resized and normalised ((u8 / 255 - mean) / std per channel, planar CHW), into
 * rows of gm_vision_embd_dim floats: the rows that take the place of the image's soft tokens in the text
 * model's input (not scaled by sqrt(width): the text model's embedding scale is for token lookups only).
 * Weights F32, F16, BF16 or Q8_0 (the matrices; vectors are read as floats). The encoder owns a thread pool
 * and all its scratch, sized at open for the largest input: encoding allocates nothing after the first call.
 * One thread at a time per gm_vision. */
typedef struct gm_vision gm_vision;

typedef struct gm_vision_options {
    int n_threads; /* <= 0: physical cores */
    gm_isa isa;    /* the matmul kernels' level (GM_ISA_AUTO: the CPU's best) */
    /* Gemma 4: the size rule's bounds in rows per image (llama.cpp's --image-min-tokens / --image-max-tokens);
     * <= 0: 70 and 1120. The scratch is sized for image_max_tokens. Gemma 3 ignores them. */
    int image_min_tokens;
    int image_max_tokens;
    /* Gemma 4 files say nothing about the FFN's activation (no clip.use_gelu). false (default): GELU, tanh
     * form, what transformers trained the model with (gelu_pytorch_tanh); true: gelu_quick (x sigmoid(1.702 x)),
     * what llama.cpp runs on such files, for parity with it. A file with clip.use_gelu / use_silu gets that. */
    bool llama_cpp_act;
} gm_vision_options;

/* o may be NULL (defaults). path: an mmproj GGUF, or a Hugging Face folder of Gemma3ForConditionalGeneration /
 * Gemma4ForConditionalGeneration (config.json's vision_config, the towers' tensors in its safetensors, the
 * normalisation from preprocessor_config.json), read as the mmproj llama.cpp's converter makes of it (the same
 * embeddings; matrices stay mapped). A file that is not a Gemma 3 or Gemma 4 mmproj, a folder without a vision
 * tower, or one with a missing or misshapen key or tensor, is refused with GM_ERR_FORMAT / GM_ERR_UNSUPPORTED /
 * GM_ERR_NOT_FOUND naming it (a folder's errors name its config.json keys and HF tensor names). */
gm_status gm_vision_open(const char *path, const gm_vision_options *o, gm_vision **out, gm_error *err);
void gm_vision_free(gm_vision *v);
int gm_vision_image_size(const gm_vision *v); /* pixels per side of the input (896 for Gemma 3); 0 for Gemma 4 */
int gm_vision_n_tokens(const gm_vision *v);   /* rows per image (256 for Gemma 3); Gemma 4: the most (max tokens) */
int gm_vision_embd_dim(const gm_vision *v);   /* floats per row: the text model's width */
/* The per-channel normalisation the encoder expects (clip.vision.image_mean / image_std), RGB. */
void gm_vision_mean_std(const gm_vision *v, float mean[3], float std[3]);
/* chw: 3 x S x S floats (S = gm_vision_image_size), normalised; out: n_tokens x embd_dim floats. Gemma 3
 * only (Gemma 4 has no fixed size: GM_ERR_ARG; use gm_vision_encode_chw). */
gm_status gm_vision_encode(gm_vision *v, const float *chw, float *out, gm_error *err);

/* Family-neutral calls (what the CLI and the server use). The encoder's family: 3 (Gemma 3: SigLIP at a fixed
 * size, 256 rows in <start_of_image> ... <end_of_image>), 4 (Gemma 4: sizes chosen per image). */
int gm_vision_family(const gm_vision *v);
/* The input size the family's reference picks for a w x h image and the rows it makes: Gemma 3 image_size
 * squared; Gemma 4 llama.cpp's calc_size_preserved_ratio with sides multiples of a = 48 (patch 16 x pool 3):
 * each side rounded to a multiple of a (at least a); above image_max_tokens a^2 pixels both sides are scaled
 * by 1 / sqrt(w h / max) and floored to multiples of a (at least a), below image_min_tokens a^2 by
 * sqrt(min / (w h)) and ceiled; in float, as llama.cpp. Rows = W H / a^2. GM_ERR_ARG for w or h <= 0. */
gm_status gm_vision_input_size(const gm_vision *v, int w, int h, int *out_w, int *out_h, int *n_tokens, gm_error *err);
/* img as the family's reference prepares it for the first layer (Gemma 3: letterboxed to image_size
 * squared as llama.cpp does, then normalised; Gemma 4: letterboxed to gm_vision_input_size's size with
 * Pillow's bicubic filter as llama.cpp does (horizontal pass first, centred, black bars), then normalised):
 * *chw (malloc'd, 3 x *h x *w planar floats), the size chosen, and *n_tokens, the rows gm_vision_encode_chw
 * makes of it. */
gm_status gm_vision_preprocess(const gm_vision *v, const gm_image *img, float **chw, int *w, int *h, int *n_tokens,
                               gm_error *err);
/* Encodes a w x h input from gm_vision_preprocess into out (n_tokens x embd_dim floats). A size the
 * family cannot take is GM_ERR_ARG (Gemma 3: not image_size squared; Gemma 4: a side not a multiple of 48,
 * more than image_max_tokens rows, or more patches per side than the position table has). Gemma 4 takes any
 * such size, whatever image_min_tokens says (that bound is the size rule's, not the encoder's). */
gm_status gm_vision_encode_chw(gm_vision *v, const float *chw, int w, int h, float *out, gm_error *err);
/* gm_vision_preprocess then gm_vision_encode_chw: *out malloc'd (*n_tokens x embd_dim floats). */
gm_status gm_vision_encode_image(gm_vision *v, const gm_image *img, float **out, int *n_tokens, gm_error *err);
/* What an encoder is (gemma inspect). */
typedef struct gm_vision_info {
    int family;              /* gm_vision_family */
    const char *projector;   /* the file's projector type: "gemma3", "gemma4v" */
    int image_size;          /* pixels per side (Gemma 3); 0 when chosen per image */
    int patch_size, n_layers, n_embd, n_ff, n_head;
    int n_tokens;            /* rows per image (Gemma 3), or the most per image */
    int embd_dim;            /* the text model's width */
    const char *activation;  /* "gelu-tanh", "gelu-quick", "silu" */
    float mean[3], std[3];
} gm_vision_info;
void gm_vision_get_info(const gm_vision *v, gm_vision_info *out);

/* One image ready for a sequence (gm_embed_span): its rows, its identity and its decoded size. */
typedef struct gm_vision_rows {
    float *rows;      /* n_rows x embd_dim, malloc'd */
    int n_rows;
    uint64_t key[2];  /* gm_image_digest of the decoded pixels under the caller's secret */
    int width, height;
} gm_vision_rows;
/* An image file's bytes (PNG, JPEG, WebP; lim as gm_image_decode) decoded, named and encoded. */
gm_status gm_vision_encode_bytes(gm_vision *v, const void *bytes, size_t len, const gm_image_limits *lim,
                                 const uint64_t secret[2], gm_vision_rows *out, gm_error *err);
void gm_vision_rows_free(gm_vision_rows *r);
/* The token an image's rows carry in a history (gm_embed_span.placeholder): Gemma 4's <|image|>, Gemma 3's
 * <image_soft_token> when the vocabulary has it, else <pad> (0). */
int32_t gm_tokenizer_image_placeholder(const gm_tokenizer *tok);

/* @end generator */


/* @end images */

/* ------------------------------------------------------------------ added for the CLI (tools/)
 * What the `gemma` command needed from inside the library; declared here so that tools/ includes only the
 * public API (issue 38). One block, to be moved where it belongs when the header is split. */

/* Physical cores of this machine (online CPUs where that is unknown): the thread count an engine, embedder
 * or encoder takes when its n_threads is 0 (defined in kernels/threadpool.c). */
int gm_physical_cores(void);

/* Describes the model file or folder at path as gm_model_describe does (human text, or one JSON object when
 * json is true), without opening the model, so that it also works on files the engine cannot run: when the
 * config cannot be read it prints what it can (format, metadata, tensors) and returns the config's error.
 * keep_mtp: also list MTP / nextn tensors. An error opening the file is returned before anything is printed;
 * a write error on FILE_stream is GM_ERR_IO. */
gm_status gm_model_describe_path(const char *path, bool json, bool keep_mtp, void *FILE_stream, gm_error *err);

#ifdef __cplusplus
}
#endif

/* ------------------------------------------------------------------ structured output */

/* Structured output (grammar/): grammar-constrained decoding: GBNF grammars and JSON schemas compiled to a
 * matcher that says, token by token, what the model may emit next.
 *
 * Four objects, from the most shared to the most private:
 *
 *   gm_grammar      a compiled grammar (GBNF text, or a JSON schema translated to GBNF). Immutable:
 *                   any number of threads may use it.
 *   gm_gvocab       a model vocabulary as the matcher sees it: each token's bytes (a trie over them)
 *                   and its kind — ordinary text, never allowed (control tokens: a grammar is about
 *                   text), or end of generation (allowed exactly where the grammar can end).
 *                   Immutable; build one per tokenizer and share it.
 *   gm_grammar_ctx  a grammar bound to a vocabulary, with everything learnt lazily while matching:
 *                   the interned matcher states, their byte transitions (a lazy DFA), the per-position
 *                   token classes and cached masks. Mutable: one thread at a time (like a gm_engine);
 *                   every matcher of one request (n > 1, forks, drafts) shares one ctx, and requests
 *                   with the same grammar may share it too.
 *   gm_matcher      one sequence's position: the history of matcher states, one per accepted token.
 *                   A state is an integer naming an interned set of parse stacks (hash-consed, so
 *                   stacks are immutable and shared: the persistent representation), which makes
 *                   clone a copy of that array and rollback a truncation — what forks, n > 1 and
 *                   speculative decoding need.
 *
 * A sampler holds one gm_matcher per sequence: gm_matcher_fill_mask before sampling (or
 * gm_matcher_check_token on the sampled token first and the mask only when it is refused, as
 * llama.cpp does), then gm_matcher_accept_token. Speculative decoding checks drafted tokens with
 * accept_token one by one, and gm_matcher_rollback undoes the ones the target model refused.
 *
 * Matching is on bytes: a token may span several grammar elements and end inside a UTF-8
 * character (the partial character is part of the state); invalid UTF-8 is never accepted.
 * Nesting deeper than 512 calls is refused. See docs/structured.md for the algorithm and costs. */
typedef struct gm_grammar gm_grammar;
typedef struct gm_gvocab gm_gvocab;
typedef struct gm_grammar_ctx gm_grammar_ctx;
typedef struct gm_matcher gm_matcher;

/* ------------------------------------------------------------------ grammars */

/* Compiles GBNF text (llama.cpp's syntax; the start rule is `root`). Errors: GM_ERR_FORMAT with
 * "grammar LINE:COL: what" for bad syntax, undefined rules, left recursion, rules that can never
 * finish; GM_ERR_NOMEM for grammars over the size limits.
 *
 * Chat-format markers are written as themselves, llama.cpp's token syntax: `<|tool_call>`,
 * `<tool_call|>`, `<|"|>`, `<escape>`, `<start_function_call>`, ... (the list is gm_token_is_marker's:
 * <start_of_turn> <end_of_turn> <|turn> <turn|> <|channel> <channel|> <|think|> <|tool> <tool|>
 * <|tool_call> <tool_call|> <|tool_response> <tool_response|> <|"|> <start_function_declaration>
 * <end_function_declaration> <start_function_call> <end_function_call> <start_function_response>
 * <end_function_response> <escape>). Each is one private-use character, GM_GBNF_MARKER_FIRST + its
 * index in that list, which a vocabulary built with markers (gm_gvocab_from_tokenizer_ex) gives the
 * marker token and nothing else: the grammar then matches exactly that token, never the same
 * characters spelled with ordinary pieces. With any other vocabulary a marker matches nothing.
 * Other token elements (<[id]>, <piece>, !<...>) are GM_ERR_FORMAT naming them. */
gm_status gm_grammar_from_gbnf(const char *text, size_t len, gm_grammar **out, gm_error *err);

/* The private-use block reserved for markers (U+F0000..U+F00FF; the markers use its start). */
#define GM_GBNF_MARKER_FIRST 0xF0000u
#define GM_GBNF_MARKER_LAST 0xF00FFu
/* The code point standing for marker text[0..len) (e.g. "<|tool_call>"), or 0 if it is none. */
uint32_t gm_gbnf_marker_cp(const char *text, size_t len);

/* How a schema's values are written (gm_schema_options.dialect). In every dialect but JSON the schema
 * is a tool's `parameters`: its root must be an object schema, and the root rule is the call's
 * argument list WITHOUT the brackets around it, which the caller's grammar writes (Gemma 4:
 * `call:name{` ... `}`, Python: `name(` ... `)`). */
typedef enum gm_schema_dialect {
    /* JSON text. */
    GM_SCHEMA_JSON = 0,
    /* Gemma 4's tool-call arguments, as its chat template renders them: key:value,key2:value2 at
     * the root, objects {key:value} below, bare keys in the template's (sorted) order, strings
     * <|"|>raw text<|"|> (no escapes; any characters but markers), JSON numbers, true / false /
     * null, [a,b]; no whitespace anywhere. */
    GM_SCHEMA_GEMMA4 = 1,
    /* FunctionGemma's: the same with <escape> as the string delimiter. */
    GM_SCHEMA_FUNCTIONGEMMA = 2,
    /* Python call arguments (Gemma 3's [name(k=v, k2=v2)]): keyword arguments `k=v, k2=v2` at the
     * root (", " between them; names must be identifiers), JSON text with True / False / None below. */
    GM_SCHEMA_PYTHON = 3,
} gm_schema_dialect;

typedef struct gm_schema_options {
    /* Whitespace allowed between JSON tokens: 0 = none (compact), otherwise a newline and up to
     * this many spaces / tabs of indentation, or one space. Default (gm_schema_options_default) 20.
     * Bounded either way: a model cannot loop on blanks. Ignored by the Gemma dialects (none). */
    int max_indent;
    /* Default GM_SCHEMA_JSON. Keywords a dialect cannot write are GM_ERR_UNSUPPORTED naming them
     * (additionalProperties other than false in the Gemma dialects and at Python's root; a root
     * that is not an object schema). */
    gm_schema_dialect dialect;
    /* Prepended to every rule name, so the grammars of several schemas can be concatenated into one
     * GBNF text (the start rule becomes <prefix>root). Letters, digits, '-', '_'; at most 32. NULL
     * or "" (the default): today's names. */
    const char *rule_prefix;
    /* JSON dialect: string characters also exclude the marker block (GM_GBNF_MARKER_FIRST..LAST),
     * for a grammar used with a markers vocabulary. The other dialects always exclude it. Default
     * false (the text is then what it always was). */
    bool exclude_markers;
} gm_schema_options;
gm_schema_options gm_schema_options_default(void);

/* Translates a JSON schema (text) to GBNF; *gbnf is malloc'd (free() it). A keyword it cannot
 * honour is GM_ERR_UNSUPPORTED naming the keyword and where it is (a JSON pointer); bad JSON or a
 * schema of the wrong shape is GM_ERR_FORMAT. Annotations (title, description, examples, default,
 * $schema, $id, $comment, ...) are accepted and ignored. `{"type":"json_object"}` (OpenAI's JSON
 * mode as a schema) means any JSON object. opt may be NULL (defaults). */
gm_status gm_json_schema_to_gbnf(const char *json, size_t len, const gm_schema_options *opt, char **gbnf,
                                 gm_error *err);
/* The two steps above in one. */
gm_status gm_grammar_from_json_schema(const char *json, size_t len, const gm_schema_options *opt,
                                      gm_grammar **out, gm_error *err);
/* The GBNF text the grammar was compiled from (for schemas: the translation). */
const char *gm_grammar_source(const gm_grammar *g);
void gm_grammar_free(gm_grammar *g);

/* ------------------------------------------------------------------ vocabularies */

typedef enum gm_gtoken_kind {
    GM_GTOKEN_TEXT = 0,  /* its bytes are text the grammar matches */
    GM_GTOKEN_NEVER = 1, /* never allowed (control, unused, unknown, empty tokens) */
    GM_GTOKEN_END = 2,   /* ends generation: allowed where the grammar accepts the end */
} gm_gtoken_kind;

/* n tokens: pieces[i][0 .. lens[i]) and kinds[i] (NULL: all TEXT). Empty TEXT pieces are NEVER. */
gm_status gm_gvocab_new(int32_t n, const char *const *pieces, const size_t *lens, const uint8_t *kinds,
                        gm_gvocab **out, gm_error *err);
/* From a tokenizer: gm_token_to_piece bytes; control / unknown / unused tokens and chat markers are
 * NEVER; <eos> and <end_of_turn> are END. */
gm_status gm_gvocab_from_tokenizer(const gm_tokenizer *tok, gm_gvocab **out, gm_error *err);

typedef struct gm_gvocab_options {
    /* Each marker token the tokenizer has (the GBNF marker list above) is TEXT whose bytes are its
     * private-use character's UTF-8, so grammars can require it. Ordinary tokens that could spell a
     * marker character (containing one, or ending in a proper prefix of one: in practice the byte
     * token <0xF3>) become NEVER, so only the marker token can. */
    bool markers;
    /* More END tokens (e.g. Gemma 4's <|tool_response>, FunctionGemma's <start_function_response>,
     * where the model stops after a call); they win over markers. <eos> / <end_of_turn> stay END. */
    const int32_t *end_ids;
    size_t n_end_ids;
} gm_gvocab_options;
/* gm_gvocab_from_tokenizer with options (NULL: the same as it). An end id out of range is GM_ERR_ARG. */
gm_status gm_gvocab_from_tokenizer_ex(const gm_tokenizer *tok, const gm_gvocab_options *o, gm_gvocab **out,
                                      gm_error *err);
int32_t gm_gvocab_size(const gm_gvocab *v);
void gm_gvocab_free(gm_gvocab *v);

/* ------------------------------------------------------------------ contexts and matchers */

/* g and v must outlive the context; v may be NULL (then only the byte calls and accepts_end work). */
gm_status gm_grammar_ctx_new(const gm_grammar *g, const gm_gvocab *v, gm_grammar_ctx **out, gm_error *err);
void gm_grammar_ctx_free(gm_grammar_ctx *c);
/* Classifies the vocabulary at every grammar position now instead of on first use (a server can do
 * this while the prompt is processed). */
gm_status gm_grammar_ctx_precompute(gm_grammar_ctx *c, gm_error *err);

/* A matcher at the start of the grammar. Matchers must be freed before their context. */
gm_status gm_matcher_new(gm_grammar_ctx *c, gm_matcher **out, gm_error *err);
/* An independent copy (same position, same history). */
gm_status gm_matcher_clone(const gm_matcher *m, gm_matcher **out, gm_error *err);
void gm_matcher_free(gm_matcher *m);

/* Advances by one token if the grammar allows it (*ok = true) or leaves the state as it was
 * (*ok = false). An END token is allowed only where the grammar can end; after it nothing is. A
 * failing status (a limit reached, out of memory) leaves the state unchanged. */
gm_status gm_matcher_accept_token(gm_matcher *m, int32_t id, bool *ok, gm_error *err);
/* The same for raw bytes (one history step). */
gm_status gm_matcher_accept_bytes(gm_matcher *m, const char *s, size_t n, bool *ok, gm_error *err);
/* Whether accept_token would succeed, without changing the state. */
gm_status gm_matcher_check_token(gm_matcher *m, int32_t id, bool *ok, gm_error *err);
/* Undoes the last n accept calls (n <= gm_matcher_n_steps). */
gm_status gm_matcher_rollback(gm_matcher *m, size_t n, gm_error *err);
size_t gm_matcher_n_steps(const gm_matcher *m);
/* Tokens its vocabulary has (the mask's width). */
int32_t gm_matcher_vocab_size(const gm_matcher *m);
/* The grammar is complete here (an END token is allowed; more text may be too). */
bool gm_matcher_accepts_end(const gm_matcher *m);
/* Nothing but the end can follow (generation should stop), or an END token was accepted. */
bool gm_matcher_is_finished(gm_matcher *m);

/* Sets bit i of mask (mask[i / 32] >> (i % 32) & 1; (n_vocab + 31) / 32 words) for exactly the
 * tokens accept_token would take. */
gm_status gm_matcher_fill_mask(gm_matcher *m, uint32_t *mask, gm_error *err);

/* Counters for benchmarks and tests. */
typedef struct gm_grammar_stats {
    size_t n_states;      /* interned matcher states */
    size_t n_stack_nodes; /* interned stack nodes */
    size_t n_classified;  /* grammar positions whose token classes are computed */
    size_t n_masks_cached;
    size_t mem_bytes;     /* approximate memory held by the context */
} gm_grammar_stats;
void gm_grammar_ctx_stats(const gm_grammar_ctx *c, gm_grammar_stats *s);

/* Constrains s's sampling (gm_seq_sample) to m: every sampled token is one m accepts, and m advances by it.
 * m is borrowed (it must outlive its use here; NULL detaches) and follows only what gm_seq_sample appends:
 * a caller that forks, truncates or appends tokens itself moves the matcher too (gm_matcher_clone,
 * gm_matcher_rollback, gm_matcher_accept_token). Its vocabulary must be the model's tokenizer's. */
gm_status gm_seq_set_grammar(gm_seq *s, gm_matcher *m, gm_error *err);

#endif /* GEMMA_H */
