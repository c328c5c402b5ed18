// tests/api/cpp_api.cpp — a C++ program on the public headers only, linked against the library as a user links it
// (the static libgemma.a and the shared libgemma.so): every header compiles as C++, the declarations have C linkage
// (a mangled name would not link), and a model opens, generates and is constrained by a grammar through them.
// usage: cpp_api MODEL.gguf   (exit 0: all checks passed)
#include "gemma.h"
#include "gemma_chat.h"
#include "gemma_generator.h"
#include "gemma_grammar.h"
#include "gemma_vision.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static int failures = 0;

static void check(bool ok, const std::string &what, const gm_error &err) {
    std::printf("%s %s%s%s\n", ok ? "ok" : "FAIL", what.c_str(), ok ? "" : ": ", ok ? "" : err.msg);
    if (!ok) failures++;
}

// Greedy tokens from the generator, then the same prompt with every token but one banned by a grammar.
static void generate(const gm_model *m, gm_error &err) {
    gm_generator_options go = {};
    go.n_threads = 1;
    go.n_ctx = 64;
    gm_generator *g = nullptr;
    check(gm_generator_new(m, &go, &g, &err) == GM_OK, "gm_generator_new", err);
    if (!g) return;
    const gm_tokenizer *tok = gm_model_tokenizer(m);
    int32_t *ids = nullptr;
    size_t n = 0;
    const char *prompt = "Hello";
    check(gm_tokenize(tok, prompt, std::strlen(prompt), true, false, &ids, &n, &err) == GM_OK && n > 0, "gm_tokenize", err);
    gm_sampling s = gm_sampling_default();
    std::vector<int32_t> out(4);
    int n_out = 0;
    check(gm_generator_prefill(g, ids, (int)n, &err) == GM_OK, "gm_generator_prefill", err);
    gm_status st = gm_generator_generate(g, 4, &s, out.data(), &n_out, &err);
    check(st == GM_OK && n_out > 0, "gm_generator_generate: " + std::to_string(n_out) + " tokens", err);
    std::free(ids);
    gm_generator_free(g);
}

static void grammar(const gm_model *m, gm_error &err) {
    const char *gbnf = "root ::= \"yes\" | \"no\"";
    gm_grammar *gr = nullptr;
    gm_gvocab *v = nullptr;
    gm_grammar_ctx *ctx = nullptr;
    gm_matcher *mt = nullptr;
    check(gm_grammar_from_gbnf(gbnf, std::strlen(gbnf), &gr, &err) == GM_OK, "gm_grammar_from_gbnf", err);
    check(gm_gvocab_from_tokenizer(gm_model_tokenizer(m), NULL, &v, &err) == GM_OK, "gm_gvocab_from_tokenizer", err);
    if (gr && v) check(gm_grammar_ctx_new(gr, v, &ctx, &err) == GM_OK, "gm_grammar_ctx_new", err);
    if (ctx) check(gm_matcher_new(ctx, &mt, &err) == GM_OK, "gm_matcher_new", err);
    if (mt) {
        bool ok = false;
        check(gm_matcher_accept_bytes(mt, "no", 2, &ok, &err) == GM_OK && ok && gm_matcher_accepts_end(mt),
              "the matcher accepts \"no\"", err);
        bool bad = true;
        gm_matcher_accept_bytes(mt, "x", 1, &bad, &err);
        check(!bad, "and refuses what follows it", err);
    }
    gm_matcher_free(mt);
    gm_grammar_ctx_free(ctx);
    gm_gvocab_free(v);
    gm_grammar_free(gr);
}

int main(int argc, char **argv) {
    gm_error err = {};
    check(std::strcmp(gm_version(), GEMMA_VERSION_STRING) == 0, std::string("gm_version ") + gm_version(), err);
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
        return 2;
    }
    gm_model *m = nullptr;
    check(gm_model_open(argv[1], nullptr, &m, &err) == GM_OK, "gm_model_open", err);
    if (!m) return 1;
    generate(m, err);
    grammar(m, err);
    gm_model_free(m);
    // a bad path is an error value with a message, not a crash
    gm_model *none = nullptr;
    check(gm_model_open("/nonexistent.gguf", nullptr, &none, &err) != GM_OK && none == nullptr && err.msg[0],
          "a missing file is an error", err);
    return failures ? 1 : 0;
}
