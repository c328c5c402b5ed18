/* tests/test_config.c — gm_source (GGUF and HF folders, name mapping) and gm_config_load (rules per
 * generation), on tiny synthetic models and the real default model. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/source.h"
#include "quant/quant.h"
#include "support/gguf_writer.h"
#include "support/test.h"
#include "support/tiny_gemma4.h"
#include "support/tiny_model.h"

static char *tmp_path(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/h1_cfg_%d_%s", GM_BUILD_DIR, (int)getpid(), name);
    return p;
}

static void rm_folder(const char *dir) {
    const char *files[] = {"config.json", "tokenizer_config.json", "tokenizer.json", "model.safetensors", "model.safetensors.index.json",
                           "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    char p[4096];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        remove(p);
    }
    rmdir(dir);
}

/* Writes j to path and frees it. */
static void write_json(const char *path, cJSON *j) {
    char *out = cJSON_Print(j);
    FILE *f = fopen(path, "wb");
    if (f && out) fputs(out, f);
    if (f) fclose(f);
    free(out);
    cJSON_Delete(j);
}

static bool load(const char *path, gm_source **s, gm_config *c, gm_error *err) {
    *s = NULL;
    if (gm_source_open(path, false, s, err) != GM_OK) return false;
    if (gm_config_load(*s, c, err) != GM_OK) {
        gm_source_close(*s);
        *s = NULL;
        return false;
    }
    return true;
}

/* Rules that depend only on the generation, with the tiny model's dimensions. */
static void check_rules(const gm_config *c, const tm_options *o, int gen) {
    CHECK_EQ_INT(c->generation, gen);
    CHECK(!strcmp(c->arch, o->arch));
    CHECK_EQ_INT(c->n_vocab, tm_vocab_size());
    CHECK_EQ_INT(c->d_model, o->d_model);
    CHECK_EQ_INT(c->n_layers, o->n_layers);
    CHECK_EQ_INT(c->n_heads, o->n_heads);
    CHECK_EQ_INT(c->n_kv_heads, o->n_kv_heads);
    CHECK_EQ_INT(c->head_dim, o->head_dim);
    CHECK_EQ_INT(c->d_ff, o->d_ff);
    CHECK_EQ_INT(c->context_length, o->context_length);
    CHECK_NEAR(c->norm_eps, 1e-6, 1e-12);
    CHECK_NEAR(c->embed_scale, 8.0, 1e-6); /* sqrt(64) */
    CHECK_NEAR(c->query_scale, 0.25, 1e-7); /* 1/sqrt(16) */
    CHECK_EQ_INT(c->bos_id, TM_BOS);
    CHECK_EQ_INT(c->eos_id, TM_EOS);
    CHECK_EQ_INT(c->pad_id, TM_PAD);
    CHECK_EQ_INT(c->eot_id, TM_EOT);
    CHECK(c->tied_embeddings == !o->untied);
    CHECK(c->has_post_norms == (gen >= 2));
    CHECK(c->has_qk_norm == (gen == 3));
    if (gen == 1) {
        CHECK(c->sliding_window == 0 && c->sliding_pattern == 0);
        CHECK(c->attn_softcap == 0 && c->final_softcap == 0);
        CHECK_NEAR(c->rope_base_global, 10000, 0);
    } else if (gen == 2) {
        CHECK(c->sliding_window == o->sliding_window && c->sliding_pattern == 2);
        CHECK(c->attn_softcap == 50 && c->final_softcap == 30);
        CHECK_NEAR(c->rope_base_local, 10000, 0);
    } else {
        CHECK(c->sliding_window == o->sliding_window && c->sliding_pattern == 6);
        CHECK(c->attn_softcap == 0 && c->final_softcap == o->final_softcap);
        CHECK_NEAR(c->rope_base_global, 1e6, 0);
        CHECK_NEAR(c->rope_base_local, 10000, 0);
        CHECK_NEAR(c->rope_scale_global, o->rope_scale_global, 0);
    }
}

/* The GGUF and HF forms of a model expose the same tensor names, shapes and values. */
static void compare_sources(const gm_source *g, const gm_source *h, const tm_options *o) {
    CHECK_EQ_INT(gm_source_n_tensors(h), gm_source_n_tensors(g));
    int bad_shape = 0, bad_value = 0;
    for (int64_t i = 0; i < gm_source_n_tensors(g); i++) {
        const gm_tensor *a = gm_source_tensor_at(g, i), *b = gm_source_tensor(h, a->name);
        if (!b) {
            CHECK_MSG(b != NULL, "HF source lacks %s", a->name);
            continue;
        }
        bad_shape += memcmp(a->ne, b->ne, sizeof a->ne) != 0;
        int64_t n = b->ne[0] * b->ne[1] * b->ne[2] * b->ne[3];
        float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
        CHECK(tm_weight_values(o, a->name, want, n));
        const gm_type_traits *tr = gm_type_traits_of(b->type);
        tr->dequant_row(b->data, got, n);
        for (int64_t k = 0; k < n; k++) bad_value += got[k] != want[k];
        free(want);
        free(got);
    }
    CHECK_EQ_INT(bad_shape, 0);
    CHECK_EQ_INT(bad_value, 0);
}

TEST(gguf_and_hf_agree) {
    const char *archs[3] = {"gemma", "gemma2", "gemma3"};
    for (int gi = 0; gi < 3; gi++) {
        tm_options o;
        tm_options_default(&o, archs[gi]);
        if (gi == 2) o.untied = true;
        char e[256];
        char *gpath = tmp_path("m.gguf");
        CHECK(tm_write_gguf(&o, gpath, e, sizeof e));
        gm_error err = {0};
        gm_source *g = NULL, *h = NULL;
        gm_config cg, ch;
        CHECK_MSG(load(gpath, &g, &cg, &err), "%s: %s", archs[gi], err.msg);
        if (g) {
            check_rules(&cg, &o, gi + 1);
            CHECK(cg.norm_weights_plus_one);
            CHECK(gm_source_is_gguf(g) && gm_source_gguf(g) && !gm_source_hf_dir(g));
            const gm_tensor *n = gm_source_tensor(g, "blk.0.attn_norm.weight");
            float w[64];
            CHECK(tm_weight_values(&o, "blk.0.attn_norm.weight", w, 64));
            CHECK(n && n->type == GM_TYPE_F32 && ((const float *)n->data)[3] == 1.0f + w[3]);
        }
        for (int variant = 0; variant < 3; variant++) {
            if (variant == 2 && gi != 2) continue;
            tm_hf_options ho = {variant == 1 ? GM_TYPE_BF16 : GM_TYPE_F32, variant == 1 ? 2 : 1, variant == 2};
            char *dir = tmp_path("hf");
            CHECK(tm_write_hf(&o, &ho, dir, e, sizeof e));
            CHECK_MSG(load(dir, &h, &ch, &err), "%s variant %d: %s", archs[gi], variant, err.msg);
            if (h) {
                check_rules(&ch, &o, gi + 1);
                CHECK(!ch.norm_weights_plus_one);
                CHECK(!gm_source_is_gguf(h) && gm_source_hf_config(h) && gm_source_hf_dir(h));
                if (g) compare_sources(g, h, &o);
                gm_source_close(h);
            }
            /* a .safetensors file inside the folder opens the whole model */
            char file[600];
            snprintf(file, sizeof file, "%s/%s", dir, variant == 1 ? "model-00001-of-00002.safetensors" : "model.safetensors");
            CHECK_MSG(load(file, &h, &ch, &err), "%s: %s", file, err.msg);
            gm_source_close(h);
            rm_folder(dir);
        }
        gm_source_close(g);
        remove(gpath);
    }
}

/* Gemma 1's HF post_attention_layernorm is the pre-FFN norm (GGUF ffn_norm). */
TEST(gemma1_norm_naming) {
    tm_options o;
    tm_options_default(&o, "gemma");
    char e[256], *dir = tmp_path("g1");
    tm_hf_options ho = {GM_TYPE_F32, 1, false};
    CHECK(tm_write_hf(&o, &ho, dir, e, sizeof e));
    gm_source *s = NULL;
    gm_error err;
    CHECK_OK(gm_source_open(dir, false, &s, &err), &err);
    if (s) {
        const gm_tensor *t = gm_source_tensor(s, "blk.1.ffn_norm.weight");
        CHECK(t && !strcmp(t->orig_name, "model.layers.1.post_attention_layernorm.weight"));
        CHECK(gm_source_tensor(s, "blk.1.post_attention_norm.weight") == NULL);
        gm_source_close(s);
    }
    rm_folder(dir);
}

TEST(gemma3_options) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.rope_scale_global = 8.0f;
    o.final_softcap = 25.0f;
    o.query_pre_attn_scalar = 64.0f; /* HF only: scale 1/8 */
    char e[256], *path = tmp_path("g3.gguf"), *dir = tmp_path("g3hf");
    CHECK(tm_write_gguf(&o, path, e, sizeof e));
    tm_hf_options ho = {GM_TYPE_F32, 1, true};
    CHECK(tm_write_hf(&o, &ho, dir, e, sizeof e));
    gm_source *s;
    gm_config c;
    gm_error err;
    CHECK_MSG(load(path, &s, &c, &err), "%s", err.msg);
    if (s) {
        CHECK_NEAR(c.rope_scale_global, 8.0, 0);
        CHECK_NEAR(c.final_softcap, 25.0, 0);
        CHECK_NEAR(c.query_scale, 0.25, 0); /* GGUF: 1/sqrt(key_length) */
        gm_source_close(s);
    }
    CHECK_MSG(load(dir, &s, &c, &err), "%s", err.msg);
    if (s) {
        CHECK_NEAR(c.rope_scale_global, 8.0, 0);
        CHECK_NEAR(c.final_softcap, 25.0, 0);
        CHECK_NEAR(c.query_scale, 0.125, 0); /* HF: query_pre_attn_scalar^-0.5 */
        CHECK(gm_source_tensor(s, "token_embd.weight") != NULL);
        for (int64_t i = 0; i < gm_source_n_tensors(s); i++) /* the vision tower is skipped */
            CHECK(strstr(gm_source_tensor_at(s, i)->orig_name, "vision") == NULL);
        gm_source_close(s);
    }
    remove(path);
    rm_folder(dir);
}

/* llama.cpp's 27B rule: gemma3 with 62 layers scales queries by 1/sqrt(d_model / n_heads). */
TEST(gemma3_27b_query_scale) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.n_layers = 62;
    o.head_dim = 32; /* d/H = 16 differs from head_dim */
    o.d_ff = 32;
    char e[256], *path = tmp_path("g27.gguf");
    CHECK(tm_write_gguf(&o, path, e, sizeof e));
    gm_source *s;
    gm_config c;
    gm_error err;
    CHECK_MSG(load(path, &s, &c, &err), "%s", err.msg);
    if (s) {
        CHECK_NEAR(c.query_scale, 0.25, 0);
        gm_source_close(s);
    }
    o.n_layers = 61;
    CHECK(tm_write_gguf(&o, path, e, sizeof e));
    CHECK_MSG(load(path, &s, &c, &err), "%s", err.msg);
    if (s) {
        CHECK_NEAR(c.query_scale, 1.0 / sqrt(32.0), 1e-7);
        gm_source_close(s);
    }
    remove(path);
}

static void write_meta_only(const char *path, const char *arch, bool with_layer0) {
    gw_writer *w = gw_new();
    gw_add_str(w, "general.architecture", arch);
    char k[128];
    const char *keys[] = {"embedding_length", "block_count", "feed_forward_length", "attention.head_count"};
    uint32_t vals[] = {64, 2, 128, 4};
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof k, "%s.%s", arch, keys[i]);
        gw_add_u32(w, k, vals[i]);
    }
    float *v = calloc(64 * 300, sizeof *v);
    int64_t ne[2] = {64, 300};
    gw_add_tensor_f32(w, "token_embd.weight", GM_TYPE_F32, 2, ne, v);
    gw_add_tensor_f32(w, "output_norm.weight", GM_TYPE_F32, 1, ne, v);
    if (with_layer0) {
        int64_t bad[2] = {32, 64};
        gw_add_tensor_f32(w, "blk.0.attn_q.weight", GM_TYPE_F32, 2, bad, v);
    }
    gw_write_file(w, path);
    gw_free(w);
    free(v);
}

TEST(errors) {
    char *path = tmp_path("bad.gguf");
    gm_source *s = NULL;
    gm_config c;
    gm_error err;
    const char *unsupported[] = {"gemma5", "llama"};
    for (int i = 0; i < 2; i++) {
        write_meta_only(path, unsupported[i], false);
        CHECK_OK(gm_source_open(path, false, &s, &err), &err);
        if (!s) continue;
        CHECK_EQ_INT(gm_config_load(s, &c, &err), GM_ERR_UNSUPPORTED);
        char want[128];
        snprintf(want, sizeof want, "architecture %s is not supported yet", unsupported[i]);
        CHECK_MSG(strstr(err.msg, want) != NULL, "%s", err.msg);
        gm_source_close(s);
    }
    write_meta_only(path, "gemma3n", false); /* supported, but its required window key is missing */
    CHECK_OK(gm_source_open(path, false, &s, &err), &err);
    if (s) {
        CHECK_EQ_INT(gm_config_load(s, &c, &err), GM_ERR_NOT_FOUND);
        CHECK_MSG(strstr(err.msg, "gemma3n.attention.sliding_window"), "%s", err.msg);
        gm_source_close(s);
    }
    write_meta_only(path, "gemma3", false);
    CHECK_OK(gm_source_open(path, false, &s, &err), &err);
    if (s) {
        CHECK_EQ_INT(gm_config_load(s, &c, &err), GM_ERR_NOT_FOUND);
        CHECK_MSG(strstr(err.msg, "blk.0.attn_norm.weight") && strstr(err.msg, "missing"), "%s", err.msg);
        gm_source_close(s);
    }
    write_meta_only(path, "gemma3", true); /* blk.0.attn_q has the wrong shape */
    CHECK_OK(gm_source_open(path, false, &s, &err), &err);
    if (s) {
        CHECK_EQ_INT(gm_config_load(s, &c, &err), GM_ERR_FORMAT);
        CHECK_MSG(strstr(err.msg, "blk.0.attn_q.weight") && strstr(err.msg, "shape"), "%s", err.msg);
        gm_source_close(s);
    }
    remove(path);
    CHECK(gm_source_open("/nonexistent/model.gguf", false, &s, &err) != GM_OK);
    CHECK(strstr(err.msg, "/nonexistent/model.gguf") != NULL);
    CHECK_EQ_INT(gm_source_open(GM_BUILD_DIR, false, &s, &err), GM_ERR_NOT_FOUND); /* folder, no config.json */
    CHECK(strstr(err.msg, "config.json") != NULL);
}

TEST(default_model) {
    gm_source *s = NULL;
    gm_config c;
    gm_error err;
    if (!test_have_default_model(__func__)) return;
    CHECK_OK(gm_source_open(GM_DEFAULT_MODEL, false, &s, &err), &err);
    if (!s) return;
    CHECK_OK(gm_config_load(s, &c, &err), &err);
    CHECK(!strcmp(c.arch, "gemma3") && c.generation == 3);
    CHECK_EQ_INT(c.n_layers, 18);
    CHECK_EQ_INT(c.d_model, 640);
    CHECK_EQ_INT(c.n_heads, 4);
    CHECK_EQ_INT(c.n_kv_heads, 1);
    CHECK_EQ_INT(c.head_dim, 256);
    CHECK_EQ_INT(c.d_ff, 2048);
    CHECK_EQ_INT(c.n_vocab, 262144);
    CHECK_EQ_INT(c.context_length, 32768);
    CHECK_EQ_INT(c.sliding_window, 512);
    CHECK_EQ_INT(c.sliding_pattern, 6);
    CHECK_NEAR(c.rope_base_global, 1e6, 0);
    CHECK_NEAR(c.rope_base_local, 1e4, 0);
    CHECK_NEAR(c.rope_scale_global, 1, 0);
    CHECK_NEAR(c.query_scale, 1.0 / 16.0, 0);
    CHECK_NEAR(c.embed_scale, sqrt(640.0), 1e-5);
    CHECK(c.attn_softcap == 0 && c.final_softcap == 0);
    CHECK(c.tied_embeddings && c.has_qk_norm && c.has_post_norms && c.norm_weights_plus_one);
    CHECK(c.bos_id == 2 && c.eos_id == 1 && c.pad_id == 0 && c.eot_id == 106);
    CHECK_EQ_INT(gm_source_n_tensors(s), 236);
    gm_source_close(s);
}

/* Rewrites dir/config.json: drops sliding_window_pattern, sets layer_types from a string of
 * 's' (sliding) and 'f' (full) characters. */
static void set_layer_types(const char *dir, const char *types) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unsigned char *text = test_read_file(path, NULL);
    cJSON *c = cJSON_Parse((const char *)text);
    free(text);
    cJSON_DeleteItemFromObject(c, "sliding_window_pattern");
    cJSON_DeleteItemFromObject(c, "layer_types");
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    for (const char *p = types; *p; p++)
        cJSON_AddItemToArray(lt, cJSON_CreateString(*p == 'f' ? "full_attention" : "sliding_attention"));
    write_json(path, c);
}

/* transformers v5 style: rope_parameters per layer kind replaces rope_theta / rope_scaling. */
TEST(hf_rope_parameters) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    char e[256], *dir = tmp_path("rp"), path[600];
    tm_hf_options ho = {GM_TYPE_BF16, 1, false};
    CHECK(tm_write_hf(&o, &ho, dir, e, sizeof e));
    snprintf(path, sizeof path, "%s/config.json", dir);
    const char *variants[3] = {
        ("{\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0, \"rope_theta\": 500000.0},"
         " \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 20000.0}}"),
        "{\"rope_type\": \"default\", \"rope_theta\": 123.0}",
        "{\"full_attention\": {\"rope_type\": \"yarn\", \"factor\": 8.0, \"rope_theta\": 1.0}}",
    };
    for (int v = 0; v < 3; v++) {
        unsigned char *text = test_read_file(path, NULL);
        cJSON *c = cJSON_Parse((const char *)text);
        free(text);
        cJSON_DeleteItemFromObject(c, "rope_scaling");
        cJSON_DeleteItemFromObject(c, "rope_theta");
        cJSON_DeleteItemFromObject(c, "rope_local_base_freq");
        cJSON_DeleteItemFromObject(c, "rope_parameters");
        cJSON_AddItemToObject(c, "rope_parameters", cJSON_Parse(variants[v]));
        write_json(path, c);
        gm_source *s;
        gm_config cfg;
        gm_error err;
        bool ok = load(dir, &s, &cfg, &err);
        if (v == 2) {
            CHECK(!ok && err.code == GM_ERR_UNSUPPORTED && strstr(err.msg, "rope_parameters"));
            continue;
        }
        CHECK_MSG(ok, "%s", err.msg);
        if (!ok) continue;
        CHECK_NEAR(cfg.rope_base_global, v == 0 ? 500000.0 : 123.0, 0);
        CHECK_NEAR(cfg.rope_scale_global, v == 0 ? 8.0 : 1.0, 0);
        CHECK_NEAR(cfg.rope_base_local, v == 0 ? 20000.0 : 10000.0, 0);
        gm_source_close(s);
    }
    rm_folder(dir);
}

TEST(hf_layer_types) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.n_layers = 8;
    char e[256], *dir = tmp_path("lt");
    tm_hf_options ho = {GM_TYPE_BF16, 1, false};
    CHECK(tm_write_hf(&o, &ho, dir, e, sizeof e));
    gm_source *s;
    gm_config c;
    gm_error err;
    set_layer_types(dir, "sssfsssf"); /* pattern 4, derived */
    CHECK_MSG(load(dir, &s, &c, &err), "%s", err.msg);
    if (s) {
        CHECK_EQ_INT(c.sliding_pattern, 4);
        gm_source_close(s);
    }
    set_layer_types(dir, "ssssssss"); /* no global layer */
    CHECK_MSG(load(dir, &s, &c, &err), "%s", err.msg);
    if (s) {
        for (int i = 0; i < 8; i++) CHECK((i + 1) % c.sliding_pattern != 0);
        gm_source_close(s);
    }
    set_layer_types(dir, "sfssfsss"); /* not a repeating pattern */
    CHECK(!load(dir, &s, &c, &err));
    CHECK_MSG(err.code == GM_ERR_UNSUPPORTED && strstr(err.msg, "layer_types"), "%s", err.msg);
    rm_folder(dir);
}

/* ---- a GGUF's layer pattern key in the forms llama.cpp 0.3.36 reads (load_swa_pattern, for gemma2, gemma3, gemma3n
 * and gemma-embedding alike): a number, or one bool / int32 / uint32 per layer, repeating or not */

/* The runs of alike layers `gemma inspect --json` shows, as kinds ("s,f,ss,f,sss" for sfssfsss). */
static void describe_runs(const char *path, char *out, size_t n) {
    gm_source *s;
    gm_config c;
    gm_error err;
    out[0] = 0;
    if (!load(path, &s, &c, &err)) return;
    FILE *f = tmpfile();
    CHECK_OK(gm_source_describe(s, &c, NULL, true, f, &err), &err);
    const long len = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)len + 1);
    CHECK(fread(text, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    cJSON *j = cJSON_Parse(text);
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(j, "layers");
    for (const cJSON *r = layers ? layers->child : NULL; r; r = r->next) {
        const int first = cJSON_GetObjectItemCaseSensitive(r, "first")->valueint;
        const int last = cJSON_GetObjectItemCaseSensitive(r, "last")->valueint;
        const bool sl = !strcmp(cJSON_GetObjectItemCaseSensitive(r, "kind")->valuestring, "sliding");
        for (int il = first; il <= last && strlen(out) + 2 < n; il++) strcat(out, sl ? "s" : "f");
        if (r->next && strlen(out) + 2 < n) strcat(out, ",");
    }
    cJSON_Delete(j);
    free(text);
    gm_source_close(s);
}

TEST(gguf_layer_pattern_forms) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.n_layers = 8;
    char e[256], *src = tmp_path("pat.gguf"), *dst = tmp_path("pat_v.gguf");
    CHECK(tm_write_gguf(&o, src, e, sizeof e));
    test_check_layer_kinds(src, "sssssfss", "no key: Gemma 3's 6");
    static const struct {
        gguf_vtype elem;
        const char *flags; /* NULL: the number n */
        int n;
        const char *kinds;
        int pattern; /* gm_config.sliding_pattern: the period, or 0 (per layer) */
    } ok[] = {
        {GGUF_VT_U32, NULL, 4, "sssfsssf", 4},
        {GGUF_VT_U32, NULL, 0, "ssssssss", 9}, /* 0: every layer slides */
        {GGUF_VT_U32, NULL, 1, "ffffffff", 1},
        {GGUF_VT_BOOL, "sssfsssf", 0, "sssfsssf", 4}, /* a repeating array is its period */
        {GGUF_VT_I32, "sssfsssf", 0, "sssfsssf", 4},
        {GGUF_VT_BOOL, "sfssfsss", 0, "sfssfsss", 0}, /* one that does not repeat: per layer */
        {GGUF_VT_I32, "fsssssss", 0, "fsssssss", 0},
        {GGUF_VT_U32, "ssssssff", 0, "ssssssff", 0},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s %s", gguf_vtype_name(ok[i].elem), ok[i].flags ? ok[i].flags : "number");
        CHECK(gw_copy_pattern(src, dst, "gemma3", ok[i].elem, ok[i].flags, ok[i].n));
        gm_source *s;
        gm_config c;
        gm_error err;
        CHECK_MSG(load(dst, &s, &c, &err), "%s: %s", what, err.msg);
        if (s) {
            CHECK_MSG(c.sliding_pattern == ok[i].pattern, "%s: pattern %d", what, c.sliding_pattern);
            gm_source_close(s);
        }
        test_check_layer_kinds(dst, ok[i].kinds, what);
    }
    char runs[64];
    CHECK(gw_copy_pattern(src, dst, "gemma3", GGUF_VT_BOOL, "sfssfsss", 0));
    describe_runs(dst, runs, sizeof runs);
    CHECK_MSG(!strcmp(runs, "s,f,ss,f,sss"), "inspect shows %s", runs);
    static const struct {
        gguf_vtype elem;
        const char *flags;
        int n;
        const char *needle;
    } bad[] = {
        {GGUF_VT_F32, "sssfsssf", 0, "is an array of f32"}, /* llama.cpp: "has wrong array element type" */
        {GGUF_VT_U8, "sssfsssf", 0, "is an array of u8"},
        {GGUF_VT_BOOL, "sssf", 0, "has 4 entries for 8 layers"},
        {GGUF_VT_I32, "sssfsssfs", 0, "has 9 entries for 8 layers"},
        {GGUF_VT_I32, NULL, -2, "is negative"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(gw_copy_pattern(src, dst, "gemma3", bad[i].elem, bad[i].flags, bad[i].n));
        gm_source *s;
        gm_config c;
        gm_error err = {0};
        const bool refused = !load(dst, &s, &c, &err);
        CHECK_MSG(refused && strstr(err.msg, bad[i].needle) && strstr(err.msg, "sliding_window_pattern"), "%s: \"%s\"",
                  bad[i].needle, err.msg);
    }
    /* Gemma 2 reads the key too (its default 2) */
    tm_options_default(&o, "gemma2");
    o.n_layers = 6;
    CHECK(tm_write_gguf(&o, src, e, sizeof e));
    test_check_layer_kinds(src, "sfsfsf", "gemma2, no key");
    CHECK(gw_copy_pattern(src, dst, "gemma2", GGUF_VT_U32, NULL, 3));
    test_check_layer_kinds(dst, "ssfssf", "gemma2, 3");
    CHECK(gw_copy_pattern(src, dst, "gemma2", GGUF_VT_BOOL, "ffssss", 0));
    test_check_layer_kinds(dst, "ffssss", "gemma2, per layer");
    remove(src);
    remove(dst);
}

/* gm_source_describe: valid JSON with the config, tokenizer summary, every tensor and totals;
 * the text form names every tensor. */
TEST(describe) {
    tm_options o;
    tm_options_default(&o, "gemma2");
    o.weight_type = GM_TYPE_Q8_0;
    char e[256], *path = tmp_path("d.gguf");
    CHECK(tm_write_gguf(&o, path, e, sizeof e));
    gm_source *s;
    gm_config c;
    gm_error err;
    CHECK_MSG(load(path, &s, &c, &err), "%s", err.msg);
    if (!s) return;
    FILE *f = tmpfile();
    CHECK_OK(gm_source_describe(s, &c, NULL, true, f, &err), &err);
    long n = ftell(f);
    rewind(f);
    char *text = calloc(1, (size_t)n + 1);
    CHECK(fread(text, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    cJSON *j = cJSON_Parse(text);
    CHECK_MSG(j != NULL, "not JSON: %.200s", text);
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(j, "config");
    CHECK_EQ_INT(cJSON_GetObjectItemCaseSensitive(cfg, "n_layers")->valueint, 2);
    CHECK_NEAR(cJSON_GetObjectItemCaseSensitive(cfg, "attn_softcap")->valuedouble, 50, 0);
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(j, "tokenizer");
    CHECK_EQ_INT(cJSON_GetObjectItemCaseSensitive(tok, "vocab_size")->valueint, tm_vocab_size());
    CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tok, "has_chat_template")));
    CHECK_EQ_INT(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "tensors")), tm_tensor_count(&o));
    const cJSON *by = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "totals"), "by_type");
    CHECK_EQ_INT(cJSON_GetObjectItemCaseSensitive(by, "Q8_0")->valueint, 2 * 7);
    CHECK_EQ_INT(cJSON_GetObjectItemCaseSensitive(by, "F32")->valueint, tm_tensor_count(&o) - 14);
    cJSON_Delete(j);
    free(text);
    f = tmpfile();
    CHECK_OK(gm_source_describe(s, NULL, "no config", false, f, &err), &err);
    n = ftell(f);
    rewind(f);
    text = calloc(1, (size_t)n + 1);
    CHECK(fread(text, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    for (int64_t i = 0; i < gm_source_n_tensors(s); i++) CHECK(strstr(text, gm_source_tensor_at(s, i)->name) != NULL);
    CHECK(strstr(text, "config:") == NULL);
    free(text);
    gm_source_close(s);
    remove(path);
}

/* The writer's quantized tensors read back close to the source values: relative RMS error
 * within each type's bound (measured: Q8_0 0.0038, Q5 0.031, Q4 0.066, Q6_K 0.013, Q5_K 0.028,
 * Q4_K 0.055, with ~1.5x margin); F16 and BF16 exact (the values are bf16-rounded). */
TEST(quantized_weights_round_trip) {
    static const struct { int type; double tol; bool k; } types[] = {
        {GM_TYPE_F16, 0, false},      {GM_TYPE_BF16, 0, false},      {GM_TYPE_Q8_0, 0.006, false},
        {GM_TYPE_Q5_0, 0.045, false}, {GM_TYPE_Q5_1, 0.045, false}, {GM_TYPE_Q4_0, 0.09, false},
        {GM_TYPE_Q4_1, 0.09, false},  {GM_TYPE_Q6_K, 0.02, true},   {GM_TYPE_Q5_K, 0.04, true},
        {GM_TYPE_Q4_K, 0.08, true},
    };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        tm_options o;
        tm_options_default(&o, "gemma3");
        o.n_layers = 1;
        if (types[ti].k) { /* K-quant rows are multiples of 256 */
            o.d_model = 256;
            o.n_heads = 4;
            o.head_dim = 64;
            o.d_ff = 256;
        }
        o.weight_type = o.embd_type = types[ti].type;
        char e[256], *path = tmp_path("q.gguf");
        CHECK_MSG(tm_write_gguf(&o, path, e, sizeof e), "%s", e);
        gm_source *s;
        gm_config c;
        gm_error err;
        if (!load(path, &s, &c, &err)) {
            CHECK_MSG(false, "type %d: %s", types[ti].type, err.msg);
            continue;
        }
        const char *names[2] = {"blk.0.ffn_down.weight", "token_embd.weight"};
        for (int k = 0; k < 2; k++) {
            const gm_tensor *t = gm_source_tensor(s, names[k]);
            CHECK(t && t->type == types[ti].type);
            if (!t) continue;
            int64_t n = t->ne[0] * t->ne[1];
            float *want = malloc((size_t)n * sizeof *want), *got = malloc((size_t)n * sizeof *got);
            CHECK(tm_weight_values(&o, names[k], want, n));
            gm_type_traits_of(t->type)->dequant_row(t->data, got, n);
            double se = 0, sv = 0;
            for (int64_t i = 0; i < n; i++) {
                se += (double)(got[i] - want[i]) * (got[i] - want[i]);
                sv += (double)want[i] * want[i];
            }
            if (getenv("H1_PRINT")) fprintf(stderr, "  %s %s %.4g\n", gm_type_name(t->type), names[k], sqrt(se / sv));
            CHECK_MSG(sqrt(se / sv) <= types[ti].tol, "%s %s: relative RMS error %.4g > %.4g",
                      gm_type_name(t->type), names[k], sqrt(se / sv), types[ti].tol);
            free(want);
            free(got);
        }
        gm_source_close(s);
        remove(path);
    }
}

/* gm_source_file_mapped (backends/cpu/repack.c drops a packed matrix's file pages only where it says so): true for
 * tensors of a GGUF file and of a safetensors folder, false for the same GGUF image in a caller's buffer
 * (its bytes would be lost) and for ranges past a mapping's end. */
TEST(file_mapped_only_for_own_maps) {
    tm_options o;
    tm_options_default(&o, "gemma3");
    o.n_layers = 1;
    char e[256], *path = tmp_path("fm.gguf"), *dir = tmp_path("fm_hf");
    CHECK_MSG(tm_write_gguf(&o, path, e, sizeof e), "%s", e);
    tm_hf_options h = {GM_TYPE_BF16, 2, false};
    CHECK_MSG(tm_write_hf(&o, &h, dir, e, sizeof e), "%s", e);
    gm_source *s = NULL, *hf = NULL, *mem = NULL;
    gm_error err;
    CHECK_OK(gm_source_open(path, false, &s, &err), &err);
    CHECK_OK(gm_source_open(dir, false, &hf, &err), &err);
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long size = 0;
    if (f && fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)size)))
        CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size);
    if (f) fclose(f);
    if (buf) CHECK_OK(gm_source_open_gguf_memory(buf, (uint64_t)size, "mem", false, &mem, &err), &err);
    const char *name = "blk.0.ffn_down.weight";
    const gm_tensor *t = s ? gm_source_tensor(s, name) : NULL, *th = hf ? gm_source_tensor(hf, name) : NULL,
                    *tm = mem ? gm_source_tensor(mem, name) : NULL;
    CHECK(t && th && tm);
    if (t && th && tm) {
        CHECK(gm_source_file_mapped(s, t->data, t->nbytes));
        CHECK(gm_source_file_mapped(hf, th->data, th->nbytes));
        CHECK(!gm_source_file_mapped(mem, tm->data, tm->nbytes));
        CHECK(!gm_source_file_mapped(s, t->data, (uint64_t)size + 1));
        CHECK(!gm_source_file_mapped(s, tm->data, tm->nbytes));
    }
    gm_source_close(s), gm_source_close(hf), gm_source_close(mem);
    free(buf);
    remove(path);
    rm_folder(dir);
}

/* Loading must fail with GM_ERR_FORMAT and a message that names key. */
static void check_refused(const char *path, const char *key, const char *what) {
    gm_source *s;
    gm_config c;
    gm_error err = {0};
    const bool ok = load(path, &s, &c, &err);
    CHECK_MSG(!ok && err.code == GM_ERR_FORMAT && strstr(err.msg, key), "%s: %s accepted or wrong message: \"%s\"", what,
              key, ok ? "(loaded)" : err.msg);
    if (ok) gm_source_close(s);
}

/* GGUF: a RoPE base, soft-cap, epsilon or scaling factor that is infinite, NaN or out of sign range made
 * NaN logits; each is refused by its key. */
TEST(gguf_bad_numbers) {
    const struct { const char *arch, *key; float v; int field; } cases[] = {
        {"gemma2", "gemma2.rope.freq_base", INFINITY, 0},  {"gemma2", "gemma2.rope.freq_base", NAN, 0},
        {"gemma2", "gemma2.rope.freq_base", -1.0f, 0},     {"gemma2", "gemma2.rope.freq_base", 0.0f, 0},
        {"gemma2", "gemma2.attn_logit_softcapping", INFINITY, 1}, {"gemma2", "gemma2.attn_logit_softcapping", NAN, 1},
        {"gemma2", "gemma2.attn_logit_softcapping", -5.0f, 1}, {"gemma2", "gemma2.final_logit_softcapping", INFINITY, 2},
        {"gemma2", "gemma2.final_logit_softcapping", -30.0f, 2}, {"gemma3", "gemma3.final_logit_softcapping", NAN, 2},
        {"gemma3", "gemma3.attention.layer_norm_rms_epsilon", INFINITY, 3},
        {"gemma3", "gemma3.attention.layer_norm_rms_epsilon", NAN, 3},
        {"gemma3", "gemma3.rope.scaling.factor", INFINITY, 4}, {"gemma3", "gemma3.rope.scaling.factor", NAN, 4},
        {"gemma3", "gemma3.rope.freq_base", INFINITY, 0},
    };
    char e[256], *path = tmp_path("badnum.gguf");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tm_options o;
        tm_options_default(&o, cases[i].arch);
        float *f[5] = {&o.rope_base, &o.attn_softcap, &o.final_softcap, &o.norm_eps, &o.rope_scale_global};
        *f[cases[i].field] = cases[i].v;
        CHECK(tm_write_gguf(&o, path, e, sizeof e));
        char what[64];
        snprintf(what, sizeof what, "%g", (double)cases[i].v);
        check_refused(path, cases[i].key, what);
    }
    gm_model *m = NULL;
    gm_error err = {0};
    CHECK(gm_model_open(path, NULL, &m, &err) == GM_ERR_FORMAT && strstr(err.msg, "gemma3.rope.freq_base"));
    gm_model_free(m);
    remove(path);
}

/* Rewrites dir/config.json: key of the object at `in` (NULL: the text config, the root here) set to raw JSON
 * text ("1e999" is infinite once parsed: JSON has no other spelling of it). */
static void set_raw(const char *dir, const char *in, const char *key, const char *raw) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unsigned char *text = test_read_file(path, NULL);
    cJSON *root = cJSON_Parse((const char *)text);
    free(text);
    cJSON *o = in ? cJSON_GetObjectItemCaseSensitive(root, in) : root;
    cJSON_DeleteItemFromObject(o, key);
    cJSON_AddItemToObject(o, key, cJSON_CreateRaw(raw));
    write_json(path, root);
}

/* config.json: the same values, each refused by its key; a valid folder loads again after each. */
TEST(hf_bad_numbers) {
    const struct { const char *key, *raw, *named; } cases[] = {
        {"rope_theta", "1e999", "rope_theta"},
        {"rope_theta", "-10000", "rope_theta"},
        {"rope_local_base_freq", "1e999", "rope_local_base_freq"},
        {"rope_local_base_freq", "0", "rope_local_base_freq"},
        {"rms_norm_eps", "1e999", "rms_norm_eps"},
        {"rms_norm_eps", "1e-60", "rms_norm_eps"}, /* 0 as a float */
        {"final_logit_softcapping", "1e999", "final_logit_softcapping"},
        {"final_logit_softcapping", "-30", "final_logit_softcapping"},
        {"attn_logit_softcapping", "1e40", "attn_logit_softcapping"}, /* finite double, infinite float */
        {"query_pre_attn_scalar", "1e999", "query_pre_attn_scalar"},
        {"query_pre_attn_scalar", "0", "query_pre_attn_scalar"},
        {"rope_scaling", "{\"rope_type\": \"linear\", \"factor\": 1e999}", "rope_scaling.factor"},
        {"rope_parameters", "{\"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1e999}}",
         "rope_parameters.sliding_attention.rope_theta"},
        {"rope_parameters", "{\"full_attention\": {\"rope_type\": \"linear\", \"factor\": -2, \"rope_theta\": 1e6}}",
         "rope_parameters.full_attention.factor"},
    };
    tm_options o;
    tm_options_default(&o, "gemma3");
    tm_hf_options ho = {GM_TYPE_F32, 1, false};
    char e[256], *dir = tmp_path("badnum_hf");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK(tm_write_hf(&o, &ho, dir, e, sizeof e));
        set_raw(dir, NULL, cases[i].key, cases[i].raw);
        check_refused(dir, cases[i].named, cases[i].raw);
    }
    rm_folder(dir);
    /* Gemma 4's own reader: rope_parameters per layer kind under text_config */
    CHECK(t4_gguf_to_hf(test_data_path("gemma4/gemma4-dense.gguf"), &(t4_hf_options){.softcap = 30.0f}, dir, e,
                        sizeof e));
    set_raw(dir, "text_config", "final_logit_softcapping", "1e999");
    check_refused(dir, "final_logit_softcapping", "gemma4");
    set_raw(dir, "text_config", "final_logit_softcapping", "30");
    set_raw(dir, "text_config", "rope_parameters",
            "{\"full_attention\": {\"rope_type\": \"proportional\", \"rope_theta\": 1e6, \"partial_rotary_factor\": 0.25},"
            " \"sliding_attention\": {\"rope_type\": \"default\", \"rope_theta\": 1e999}}");
    check_refused(dir, "rope_parameters.sliding_attention.rope_theta", "gemma4");
    rm_folder(dir);
}

/* A tokenizer with more ids than token_embd has rows is refused at open (its last ids would have no
 * embedding row); padded embeddings (more rows than ids) open, GGUF and HF alike. */
TEST(tokenizer_fits_embedding) {
    char e[256], *path = tmp_path("rows.gguf"), *dir = tmp_path("rows_hf");
    const int V = tm_vocab_size();
    const int rows[3] = {V - 10, V + 16, V};
    tm_hf_options ho = {GM_TYPE_F32, 1, false};
    for (int i = 0; i < 3; i++) {
        tm_options o;
        tm_options_default(&o, "gemma3");
        o.embd_rows = rows[i];
        CHECK(tm_write_gguf(&o, path, e, sizeof e));
        CHECK(tm_write_hf(&o, &ho, dir, e, sizeof e));
        const char *where[2] = {path, dir};
        for (int k = 0; k < 2; k++) {
            gm_model *m = NULL;
            gm_error err = {0};
            const gm_status st = gm_model_open(where[k], NULL, &m, &err);
            if (rows[i] < V) {
                char want[96];
                snprintf(want, sizeof want, "the tokenizer has %d ids but token_embd.weight has only %d rows", V, rows[i]);
                CHECK_MSG(st == GM_ERR_FORMAT && strstr(err.msg, want), "%s: status %d, \"%s\"", where[k], (int)st, err.msg);
            } else {
                CHECK_OK(st, &err);
                if (m) CHECK_EQ_INT(gm_model_config(m)->n_vocab, rows[i]);
            }
            gm_model_free(m);
        }
    }
    remove(path);
    rm_folder(dir);
}

int main(void) {
    RUN(gguf_and_hf_agree);
    RUN(gemma1_norm_naming);
    RUN(gemma3_options);
    RUN(gemma3_27b_query_scale);
    RUN(hf_layer_types);
    RUN(gguf_layer_pattern_forms);
    RUN(hf_rope_parameters);
    RUN(describe);
    RUN(quantized_weights_round_trip);
    RUN(errors);
    RUN(gguf_bad_numbers);
    RUN(hf_bad_numbers);
    RUN(tokenizer_fits_embedding);
    RUN(file_mapped_only_for_own_maps);
    RUN(default_model);
    return test_summary();
}
