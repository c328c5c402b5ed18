/* model/source.h — one view of a model's tensors and metadata, whether it comes from a GGUF file
 * or a Hugging Face folder (config.json + *.safetensors, sharded or not).
 *
 * Tensors are named and shaped the GGUF way whatever the source: "blk.3.attn_q.weight",
 * ne[0] the contiguous dimension. HF names are mapped (model.layers.3.self_attn.q_proj.weight ->
 * blk.3.attn_q.weight; the `language_model.` prefix of multimodal checkpoints is dropped) and
 * shapes reversed. Data stays in the mapped file. */
#ifndef GM_MODEL_SOURCE_H
#define GM_MODEL_SOURCE_H

#include <stdbool.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "gemma.h"

typedef struct gm_tensor {
    const char *name;  /* GGUF-style name */
    const char *orig_name; /* name in the file (same as name for GGUF) */
    int type;          /* gm_type */
    int n_dims;
    int64_t ne[4];     /* ne[0] contiguous; unused dims 1 */
    const void *data;
    uint64_t nbytes;
} gm_tensor;

typedef struct gm_source gm_source;

/* path: a .gguf file, a .safetensors file beside a config.json, or a folder holding config.json. */
gm_status gm_source_open(const char *path, bool keep_mtp, gm_source **out, gm_error *err);
void gm_source_close(gm_source *s);
/* A GGUF image in memory (fuzzing, tests); buf must outlive the source. name is used in messages. */
gm_status gm_source_open_gguf_memory(const void *buf, uint64_t size, const char *name, bool keep_mtp,
                                     gm_source **out, gm_error *err);

const char *gm_source_path(const gm_source *s);
bool gm_source_is_gguf(const gm_source *s);
const gguf_file *gm_source_gguf(const gm_source *s);   /* NULL for HF folders */
const char *gm_source_hf_dir(const gm_source *s);      /* NULL for GGUF */
/* true when [p, p + n) lies in the source's own read-only map of a file (GGUF or safetensors shard; not a
 * caller's buffer or memory the loader filled):
 * pages there may be dropped from memory and are read back from the file when touched again */
bool gm_source_file_mapped(const gm_source *s, const void *p, uint64_t n);
/* The parsed config.json (a cJSON*), NULL for GGUF. */
const void *gm_source_hf_config(const gm_source *s);

int64_t gm_source_n_tensors(const gm_source *s);       /* visible tensors */
const gm_tensor *gm_source_tensor_at(const gm_source *s, int64_t i);
const gm_tensor *gm_source_tensor(const gm_source *s, const char *name); /* NULL if absent */

/* model/describe.c: the description `gemma inspect` prints, to a FILE*: format, architecture,
 * config (cfg may be NULL when gm_config_load failed; cfg_error then says why), tokenizer summary
 * from metadata, tensor table (GGUF names, ggml shapes, bytes) and totals per type; as text, or
 * as one JSON object when json is true. gm_model_describe (gemma.h) calls it. */
gm_status gm_source_describe(const gm_source *s, const gm_config *cfg, const char *cfg_error, bool json,
                             void *FILE_stream, gm_error *err);

/* model/config.c: every architectural fact from the source's metadata or config.json plus the rules of
 * the file's family (model/family.h; out->family is its row). Unknown / unsupported architectures get
 * GM_ERR_UNSUPPORTED with a message naming what is missing. */
gm_status gm_config_load(const gm_source *s, gm_config *out, gm_error *err);

/* The one validator (model/config.c) of the numbers against core/limits.h: a whole config (gm_config_load
 * runs it), one layer's facts (the loader runs it on each layer), and a layer count before a reader sizes
 * anything by it. GM_ERR_FORMAT / GM_ERR_UNSUPPORTED with the path and what is wrong. */
gm_status gm_config_check(const char *path, const gm_config *c, gm_error *err);
gm_status gm_config_check_layer(const gm_layer_config *l, int il, const char *path, gm_error *err);
gm_status gm_config_check_layer_count(const char *path, int n_layers, gm_error *err);

/* The layer pattern of a GGUF, <arch>.attention.sliding_window_pattern, in the forms llama.cpp 0.3.36 reads
 * (llama_model_base::load_swa_pattern, for gemma2, gemma3, gemma3n and gemma-embedding alike): absent, def; a number
 * n, layer il slides iff (il + 1) % n != 0 (n = 0: every layer slides); or one entry per layer, bool / int32 /
 * uint32, nonzero = sliding. Into c->sliding_pattern (c's arch, n_layers and window already read): an array that
 * repeats becomes its period, so a file reads the same whichever way it was written; one that does not leaves 0,
 * and each layer's kind is then read from the file. Another element type or length is an error. */
gm_status gm_config_gguf_pattern(const gguf_file *f, gm_config *c, int def, gm_error *err);
/* Entry il of the per-layer flag array key (bool / int32 / uint32, nonzero = set: the layer pattern as Gemma 4
 * requires it), its type and length (n_layers) checked: GM_ERR_TYPE / GM_ERR_FORMAT naming the key. */
gm_status gm_config_gguf_layer_flag(const gguf_file *f, const char *key, int n_layers, int il, bool *out,
                                    gm_error *err);
/* Whether layer il slides: by c's pattern, or (pattern 0 with a window) by the file's per-layer array; f may be
 * NULL (an HF folder: its patterns repeat). */
bool gm_config_gguf_slides(const gguf_file *f, const gm_config *c, int il);

/* A config number checked where it is read, so that the message names its key: it must be finite and,
 * by rule, > 0 or >= 0. An infinite RoPE base, soft-cap or epsilon passes a sign test but turns every
 * logit into NaN (RoPE tables of 0 * inf, cap * tanh(x / cap) = inf * 0), so the sign alone is not
 * enough. The value is checked as the float the model uses: a double like 1e300 is infinite there. */
typedef enum { GM_NUM_FINITE, GM_NUM_NONNEG, GM_NUM_POSITIVE } gm_num_rule;
gm_status gm_config_number(const char *file, const char *key, float v, gm_num_rule rule, gm_error *err);

#endif
