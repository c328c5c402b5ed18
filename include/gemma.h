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

typedef struct gm_model_options {
    bool keep_mtp; /* keep MTP / nextn tensors of a GGUF visible (hidden by default) */
} gm_model_options;

/* Architectural facts, all read from the file (GGUF metadata or config.json) or from the
 * documented per-generation rule table (model/arch.c). */
typedef struct gm_config {
    char arch[32];           /* "gemma", "gemma2", "gemma3" */
    int generation;          /* 1, 2, 3 */
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
    bool tied_embeddings;
    int bos_id, eos_id, eot_id, pad_id; /* eot = <end_of_turn>, -1 if absent */
} gm_config;

gm_status gm_model_open(const char *path, const gm_model_options *opt, gm_model **out, gm_error *err);
void gm_model_free(gm_model *m);
const gm_config *gm_model_config(const gm_model *m);
/* Prints a human (json=false) or machine (json=true) description: architecture, config,
 * tokenizer summary, tensor table, totals. */
gm_status gm_model_describe(const gm_model *m, bool json, void *FILE_stream, gm_error *err);

/* ------------------------------------------------------------------ tokenizer (text/) */
/* @section tokenizer: owned by text/ */
/* @end tokenizer */

/* ------------------------------------------------------------------ generator (generate/) */
/* @section generator: owned by model/ and generate/ */
/* @end generator */

#ifdef __cplusplus
}
#endif

#endif /* GEMMA_H */
