// tests/gen/llama_harness.h — what the drafter harnesses over libllama share (mtp_llama_harness.cpp,
// eagle3_llama_harness.cpp; header-only: each is one g++ line): the fixture's token list, the contexts' settings
// (CPU, F32 K/V, flash attention off, swa_full), a row of floats as text, the largest difference of two rows.
#pragma once

#include "llama.h"
#include "ggml.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

static std::vector<llama_token> read_tokens(const std::string & path) {
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
        if (line.rfind("tokens ", 0) == 0) {
            std::istringstream ss(line.substr(7));
            int n;
            ss >> n;
            std::vector<llama_token> ids(n);
            for (auto & id : ids) {
                ss >> id;
            }
            return ids;
        }
    }
    fprintf(stderr, "no tokens line in %s\n", path.c_str());
    exit(1);
}

static llama_context_params ctx_params() {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 64;
    cp.n_ubatch = 64;
    cp.n_seq_max = 1;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.swa_full = true;
    cp.offload_kqv = false;
    return cp;
}

static void put(FILE * f, const char * tag, const float * v, int n) {
    fprintf(f, "%s", tag);
    for (int i = 0; i < n; i++) {
        fprintf(f, " %.7g", v[i]);
    }
    fprintf(f, "\n");
}

static double max_abs_diff(const std::vector<float> & a, const std::vector<float> & b) {
    double m = 0;
    for (size_t i = 0; i < a.size(); i++) {
        m = fmax(m, fabs((double) a[i] - b[i]));
    }
    return m;
}
