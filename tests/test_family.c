/* tests/test_family.c — the registry of families (model/family.h, model/families/registry.c): every row is
 * found by each of its names and by no other row's, unknown names are refused with a message that lists the
 * known ones, the Gemma 1/2/3 rule table says what docs/model-files.md says, and a loaded config points at
 * the row of its file's architecture. */
#include <string.h>
#include <unistd.h>

#include "gemma.h"
#include "model/family.h"
#include "model/source.h"
#include "support/gguf_writer.h"
#include "support/test.h"

static int n_rows(void) {
    int n = 0;
    while (gm_family_at(n)) n++;
    return n;
}

/* Each row is found by each of its names, and a name selects only its own row. */
TEST(every_name_finds_its_row) {
    CHECK(n_rows() >= 6);
    for (int i = 0; gm_family_at(i); i++) {
        const gm_family *f = gm_family_at(i);
        /* a draft head of its own shape (EAGLE-3) belongs to no Gemma generation */
        CHECK_MSG((f->generation >= 1 && f->generation <= 4) || (f->generation == 0 && f->rules.own_weights),
                  "%s: generation %d", f->arch, f->generation);
        CHECK_MSG(gm_family_by_gguf_arch(f->arch) == f, "%s is not found by its own arch", f->arch);
        for (const char *const *p = f->gguf_archs; *p; p++)
            CHECK_MSG(gm_family_by_gguf_arch(*p) == f, "GGUF arch %s does not find row %s", *p, f->arch);
        for (const char *const *p = f->hf_types; *p; p++)
            CHECK_MSG(gm_family_by_hf_type(*p) == f, "HF model_type %s does not find row %s", *p, f->arch);
    }
    const struct { const char *name; const char *gguf, *hf; } names[] = {
        {"gemma", "gemma", "gemma"},          {"gemma2", "gemma2", "gemma2"},   {"gemma3", "gemma3", "gemma3"},
        {"gemma3_text", NULL, "gemma3"},      {"gemma-embedding", "gemma-embedding", NULL},
        {"gemma3n", "gemma3n", "gemma3n"},    {"gemma3n_text", NULL, "gemma3n"},
        {"gemma4", "gemma4", "gemma4"},       {"gemma4_text", NULL, "gemma4"},
        {"gemma4-assistant", "gemma4-assistant", NULL}, {"eagle3", "eagle3", NULL},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const gm_family *g = gm_family_by_gguf_arch(names[i].name), *h = gm_family_by_hf_type(names[i].name);
        CHECK_MSG(names[i].gguf ? g && !strcmp(g->arch, names[i].gguf) : !g, "GGUF %s", names[i].name);
        CHECK_MSG(names[i].hf ? h && !strcmp(h->arch, names[i].hf) : !h, "HF %s", names[i].name);
    }
}

TEST(unknown_names) {
    const char *unknown[] = {"llama", "", "gemma5", "Gemma3", "gemma3 ", "gemma3n_vision"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        CHECK_MSG(!gm_family_by_gguf_arch(unknown[i]), "GGUF '%s' found a row", unknown[i]);
        CHECK_MSG(!gm_family_by_hf_type(unknown[i]), "HF '%s' found a row", unknown[i]);
    }
    CHECK(!gm_family_by_gguf_arch(NULL) && !gm_family_by_hf_type(NULL));
    CHECK(!gm_family_at(-1) && !gm_family_at(n_rows()));
}

/* The list for messages holds every name; a short buffer is cut, terminated. */
TEST(names_list) {
    char buf[512], small[8];
    gm_family_names(false, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, "gemma, gemma2, gemma3, gemma-embedding, gemma3n, gemma4, gemma4-assistant, eagle3"), "%s",
              buf);
    gm_family_names(true, buf, sizeof buf);
    CHECK_MSG(strstr(buf, "gemma3_text") && strstr(buf, "gemma3n_text") && strstr(buf, "gemma4_text") &&
                  !strstr(buf, "gemma-embedding"), "%s", buf);
    gm_family_names(true, small, sizeof small);
    CHECK(strlen(small) < sizeof small);
}

/* The rule table of docs/model-files.md for Gemma 1/2/3; 3n and 4 have the hooks their extras need. */
TEST(rules) {
    const gm_family_rules *g1 = &gm_family_by_gguf_arch("gemma")->rules, *g2 = &gm_family_by_gguf_arch("gemma2")->rules,
                          *g3 = &gm_family_by_gguf_arch("gemma3")->rules;
    CHECK(!g1->post_norms && !g1->qk_norm && g1->sliding_pattern == 0 && g1->attn_softcap == 0 && !g1->final_softcap);
    CHECK(g1->hf_gemma1_names && !g2->hf_gemma1_names && !g3->hf_gemma1_names);
    CHECK(g2->post_norms && !g2->qk_norm && g2->sliding_pattern == 2 && g2->window_default == 4096);
    CHECK(g2->attn_softcap == 50.0f && g2->final_softcap && g2->final_softcap_default == 30.0f && g2->n_layers_27b == 46);
    CHECK(g3->post_norms && g3->qk_norm && g3->sliding_pattern == 6 && g3->attn_softcap == 0);
    CHECK(g3->final_softcap && g3->final_softcap_default == 0.0f && g3->local_rope && g3->rope_scaling);
    CHECK(g3->n_layers_27b == 62 && g3->hf_bidirectional_embedding);
    const gm_family *emb = gm_family_by_gguf_arch("gemma-embedding");
    CHECK(emb->rules.embedding && emb->generation == 3 && emb->rules.n_layers_27b == 0);
    for (int i = 0; gm_family_at(i); i++) {
        const gm_family *f = gm_family_at(i);
        CHECK_MSG(!f->load == !f->unload, "%s: load and unload go together", f->arch);
        CHECK_MSG(!f->rules.per_layer_shapes || f->layer_config, "%s: per-layer shapes need layer_config", f->arch);
        CHECK_MSG(!(f->config_gguf && f->config_gguf_keys), "%s: one GGUF reader", f->arch);
    }
    CHECK(gm_family_by_gguf_arch("gemma3n")->config_gguf_keys && gm_family_by_gguf_arch("gemma3n")->load);
    CHECK(gm_family_by_gguf_arch("gemma4")->config_gguf && gm_family_by_gguf_arch("gemma4")->config_hf);
    CHECK(gm_family_by_gguf_arch("gemma4-assistant")->rules.q_only && gm_family_by_gguf_arch("eagle3")->rules.own_weights);
}

static void expect_refused(const char *path, const char *name, const char *listed) {
    gm_source *s = NULL;
    gm_config c;
    gm_error err = {0};
    CHECK_OK(gm_source_open(path, false, &s, &err), &err);
    if (!s) return;
    CHECK_EQ_INT(gm_config_load(s, &c, &err), GM_ERR_UNSUPPORTED);
    char want[96];
    snprintf(want, sizeof want, "architecture %s is not supported yet", name);
    CHECK_MSG(strstr(err.msg, want) && strstr(err.msg, listed), "%s", err.msg);
    gm_source_close(s);
}

/* An unknown architecture is refused when the config is read, naming it and the known ones; gemma3_text is an
 * HF name only. */
TEST(unknown_arch_refused) {
    char path[512];
    snprintf(path, sizeof path, "%s/family_%d.gguf", GM_BUILD_DIR, (int)getpid());
    const char *archs[] = {"llama", "gemma3_text"};
    for (int i = 0; i < 2; i++) {
        gw_writer *w = gw_new();
        gw_add_str(w, "general.architecture", archs[i]);
        float v[8] = {0};
        int64_t ne[2] = {8, 1};
        gw_add_tensor_f32(w, "token_embd.weight", GM_TYPE_F32, 2, ne, v);
        CHECK(gw_write_file(w, path));
        gw_free(w);
        expect_refused(path, archs[i], "gemma3n, gemma4, gemma4-assistant, eagle3 are");
    }
    remove(path);
    expect_refused(test_data_path("bad/hf_unsupported_arch"), "llama", "gemma4_text are");
}

/* A loaded config carries the row of its file's architecture. */
TEST(config_points_at_row) {
    const char *files[] = {"tiny/gemma.gguf", "tiny/gemma2.gguf", "tiny/gemma3.gguf", "gemma4/gemma4-moe.gguf",
                           "embedding/dense.gguf", "embedding/dense_hf"};
    const char *archs[] = {"gemma", "gemma2", "gemma3", "gemma4", "gemma-embedding", "gemma-embedding"};
    for (int i = 0; i < 6; i++) {
        gm_source *s = NULL;
        gm_config c;
        gm_error err = {0};
        CHECK_OK(gm_source_open(test_data_path(files[i]), false, &s, &err), &err);
        if (!s) continue;
        CHECK_OK(gm_config_load(s, &c, &err), &err);
        const gm_family *f = gm_family_by_gguf_arch(archs[i]);
        CHECK_MSG(c.family == f && !strcmp(c.arch, archs[i]) && c.generation == f->generation, "%s: %s", files[i],
                  c.arch);
        gm_source_close(s);
    }
}

int main(void) {
    RUN(every_name_finds_its_row);
    RUN(unknown_names);
    RUN(names_list);
    RUN(rules);
    RUN(unknown_arch_refused);
    RUN(config_points_at_row);
    return test_summary();
}
