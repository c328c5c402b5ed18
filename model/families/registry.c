/* model/families/registry.c — the table of families (model/family.h): one row per family, the only place that
 * names them all. Gemma 1, 2 and 3 differ only in rules (the flags below; docs/model-files.md has the table);
 * Gemma 3n and 4 add hooks (model/families/gemma3n.c, gemma4.c). A new family is a row here plus its hooks. */
#include "model/family.h"

#include <stdio.h>
#include <string.h>

#include "model/families/eagle3.h"
#include "model/families/gemma3n.h"
#include "model/families/gemma4.h"
#include "model/model.h"

/* ---- adapters from the hook signatures to the families' functions */

static gm_status g3n_layer(const gm_source *s, const gm_config *c, int il, gm_layer_config *out, gm_error *err) {
    out->kv_source = gm_3n_kv_source(s, c, il); /* K/V still stored: llama.cpp requires them */
    return GM_OK;
}

static void g3n_unload(gm_model *m) {
    gm_3n_free(m->family_weights);
    m->family_weights = NULL;
}

static void g4_unload(gm_model *m) {
    gm_4_free(m->family_weights);
    m->family_weights = NULL;
}

static void g4a_unload(gm_model *m) {
    gm_4a_free(m->family_weights);
    m->family_weights = NULL;
}

static void e3_unload(gm_model *m) {
    gm_e3_free(m->family_weights);
    m->family_weights = NULL;
}

/* ---- Hugging Face tensor names (model/family.h) */

/* The per-layer inputs (3n, and 4 with PLE): the token table, the model projection and its norm, and each layer's
 * gate, projection and norm. */
static const gm_hf_name k_hf_ple[] = {
    {GM_HF_GLOBAL, "model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
    {GM_HF_GLOBAL, "model.per_layer_model_projection.weight", "per_layer_model_proj.weight"},
    {GM_HF_GLOBAL, "model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
    {GM_HF_LAYER, "per_layer_input_gate.weight", "inp_gate.weight"},
    {GM_HF_LAYER, "per_layer_projection.weight", "proj.weight"},
    {GM_HF_LAYER, "post_per_layer_input_norm.weight", "post_norm.weight"},
    {GM_HF_END, NULL, NULL},
};

/* ---- the rows */

#define NAMES(...) (const char *const[]){__VA_ARGS__, NULL}
#define NONE (const char *const[]){NULL}

/* Gemma 3's rules, shared by its text-only and embedding variants */
#define GEMMA3_RULES                                                                                            \
    .post_norms = true, .qk_norm = true, .sliding_pattern = 6, .pattern_from_config = true,                     \
    .final_softcap = true, .final_softcap_default = 0.0f, .local_rope = true, .rope_scaling = true,             \
    .hf_query_pre_attn_scalar = true

static const gm_family k_families[] = {
    {.arch = "gemma", .generation = 1, .gguf_archs = NAMES("gemma"), .hf_types = NAMES("gemma"),
     .rules = {.hf_gemma1_names = true}},
    {.arch = "gemma2", .generation = 2, .gguf_archs = NAMES("gemma2"), .hf_types = NAMES("gemma2"),
     .rules = {.post_norms = true, .sliding_pattern = 2, .window_default = 4096, .attn_softcap = 50.0f,
               .final_softcap = true, .final_softcap_default = 30.0f, .n_layers_27b = 46,
               .hf_query_pre_attn_scalar = true}},
    {.arch = "gemma3", .generation = 3, .gguf_archs = NAMES("gemma3"), .hf_types = NAMES("gemma3", "gemma3_text"),
     .rules = {GEMMA3_RULES, .window_default = 0, .n_layers_27b = 62, .hf_bidirectional_embedding = true}},
    /* EmbeddingGemma: in GGUF its own arch, whose window is required (llama.cpp too); in HF a gemma3_text config
     * with use_bidirectional_attention */
    {.arch = "gemma-embedding", .generation = 3, .gguf_archs = NAMES("gemma-embedding"), .hf_types = NONE,
     .rules = {GEMMA3_RULES, .window_default = -1, .embedding = true}},
    /* Gemma 3 plus AltUp, LAuReL and per-layer inputs; its GGUF keys and constants are its own */
    {.arch = "gemma3n", .generation = 3, .gguf_archs = NAMES("gemma3n"), .hf_types = NAMES("gemma3n", "gemma3n_text"),
     .rules = {.post_norms = true, .qk_norm = true, .v_norm = true, .raw_norm_weights = true, .sliding_pattern = 6,
               .window_default = -1, .pattern_from_config = true, .final_softcap = true,
               .final_softcap_default = 30.0f, .local_rope = true, .hf_query_pre_attn_scalar = true,
               .query_scale_one = true},
     .hf_names = (const gm_hf_name *const[]){k_hf_ple, gm_3n_hf_names, NULL},
     .config_gguf_keys = gm_3n_config_gguf, .layer_config = g3n_layer, .load = gm_3n_load, .unload = g3n_unload},
    /* per-layer geometry, KV sharing, PLE, mixture of experts: readers of its own */
    {.arch = "gemma4", .generation = 4, .gguf_archs = NAMES("gemma4"), .hf_types = NAMES("gemma4", "gemma4_text"),
     .rules = {.post_norms = true, .qk_norm = true, .v_norm = true, .raw_norm_weights = true, .final_softcap = true,
               .query_scale_one = true, .per_layer_shapes = true, .kv_tensors_optional = true},
     .hf_names = (const gm_hf_name *const[]){k_hf_ple, gm_4_hf_names, NULL},
     .config_gguf = gm_4_config_gguf, .config_hf = gm_4_config_hf, .layer_config = gm_4_layer_config,
     .rope_factors = gm_4_rope_factors, .load = gm_4_load, .unload = g4_unload, .layer_extras = gm_4_layer_extras_of},
    /* Gemma 4's MTP drafter: Gemma 4's keys under its own prefix, query-only layers over a target's cache */
    {.arch = "gemma4-assistant", .generation = 4, .gguf_archs = NAMES("gemma4-assistant"), .hf_types = NONE,
     .rules = {.post_norms = true, .qk_norm = true, .v_norm = true, .raw_norm_weights = true, .final_softcap = true,
               .query_scale_one = true, .per_layer_shapes = true, .kv_tensors_optional = true, .q_only = true},
     .config_gguf = gm_4_config_gguf, .layer_config = gm_4_layer_config, .rope_factors = gm_4_rope_factors,
     .load = gm_4a_load, .unload = g4a_unload, .layer_extras = gm_4_layer_extras_of},
    /* an EAGLE-3 draft head: one Llama-style layer over the target's taps; its tensors are its own (eagle3.h) */
    {.arch = "eagle3", .generation = 0, .gguf_archs = NAMES("eagle3"), .hf_types = NONE,
     .rules = {.own_weights = true}, .config_gguf_keys = gm_e3_config_keys, .load = gm_e3_load, .unload = e3_unload},
};

#undef GEMMA3_RULES
#undef NONE
#undef NAMES

enum { N_FAMILIES = sizeof k_families / sizeof k_families[0] };

const gm_family *gm_family_at(int i) { return i >= 0 && i < N_FAMILIES ? &k_families[i] : NULL; }

static bool listed(const char *const *names, const char *name) {
    for (; *names; names++)
        if (!strcmp(*names, name)) return true;
    return false;
}

const gm_family *gm_family_by_gguf_arch(const char *name) {
    for (int i = 0; name && i < N_FAMILIES; i++)
        if (listed(k_families[i].gguf_archs, name)) return &k_families[i];
    return NULL;
}

const gm_family *gm_family_by_hf_type(const char *name) {
    for (int i = 0; name && i < N_FAMILIES; i++)
        if (listed(k_families[i].hf_types, name)) return &k_families[i];
    return NULL;
}

void gm_family_names(bool hf, char *buf, size_t n) {
    size_t len = 0;
    if (n) buf[0] = 0;
    for (int i = 0; i < N_FAMILIES && len < n; i++)
        for (const char *const *p = hf ? k_families[i].hf_types : k_families[i].gguf_archs; *p && len < n; p++) {
            const int w = snprintf(buf + len, n - len, "%s%s", len ? ", " : "", *p);
            len += w > 0 ? (size_t)w : 0;
        }
}
