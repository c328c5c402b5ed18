// Records llama.cpp's Gemma 4 MTP drafts on the tiny fixture pair tests/data/gemma4/gemma4-dense.gguf
// (target) + tests/data/gemma4/gemma4-mtp.gguf (drafter, tests/gen/gen_gemma4_mtp_fixtures.py) into
// tests/data/gemma4/gemma4-mtp.draft.txt, the reference for test_mtp. Not built by our CMake: it links
// the libllama of llama-cpp-python 0.3.36's vendored llama.cpp (LL below), built in B:
//
//   LL=/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp B=/tmp/lcp/buildvk/bin
//   g++ -std=c++17 -O1 -Wall -Wextra -I$LL/include -I$LL/ggml/include -I$LL/src tests/gen/mtp_llama_harness.cpp -L$B -lllama -lggml -lggml-base -Wl,-rpath,$B -o /tmp/mtp_llama_harness
//   GGML_VK_VISIBLE_DEVICES= /tmp/mtp_llama_harness tests/data/gemma4 > tests/data/gemma4/gemma4-mtp.draft.txt
//
// What it does, as llama.cpp's MTP driver (common/speculative.cpp, shared-memory mode) does:
//   - both contexts on the CPU, F32 K/V cache (no f16 rounding), flash attention OFF in both (the drafter
//     reads the target's cache and v_trans follows each context's flash-attn setting), swa_full;
//   - the target has nextn embeddings on, unmasked: h of every batch row (post-output-norm hidden);
//   - for each case pos0: clear the target cache, prefill tokens[0..pos0-1] (the `tokens` line of
//     gemma4-dense.logits.txt) in one batch, h0 = the target's h at row pos0-1; then draft `steps`
//     tokens at the SAME position pos0: step 0 feeds (tokens[pos0], h0), step k feeds (argmax of step
//     k-1's logits, h_next of step k-1). The drafter never writes the cache, so every step sees target
//     positions 0..pos0-1.
// Sanity checks and the drafter's KV source mapping go to stderr (the mapping from the kq nodes' K source
// names in the drafter graph, i.e. which target cache tensor each drafter layer reads).
#include "llama.h"
#include "llama-ext.h"
#include "ggml.h"
#include "llama_harness.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

static const int CASES[] = {1, 5, 12, 20, 33};
static const int STEPS = 3;

static void quiet_log(ggml_log_level level, const char * text, void *) {
    // keep warnings (the loader's "sharing with layer" lines) and errors
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

// cb_eval on the drafter: prints, once per layer, the name of the K tensor the kq product reads
static bool kv_probe(ggml_tensor * t, bool ask, void * ud) {
    auto * seen = (std::map<std::string, std::string> *) ud;
    if (ask && strncmp(t->name, "kq-", 3) == 0 && !seen->count(t->name)) {
        const ggml_tensor * k = t->src[0];
        while (k && k->view_src) {
            k = k->view_src;
        }
        (*seen)[t->name] = k ? k->name : "?";
        fprintf(stderr, "drafter %s reads K from %s\n", t->name, k ? k->name : "?");
    }
    return false; // no data needed
}

static int argmax(const float * v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) {
        if (v[i] > v[b]) {
            b = i;
        }
    }
    return b;
}

// target: clear the cache and prefill tokens[0..n-1]; returns h of row n-1
static std::vector<float> prefill(llama_context * ctx, const std::vector<llama_token> & ids, int n, int n_bb) {
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_batch_ext * b = llama_batch_ext_init(ctx);
    for (llama_pos p = 0; p < n; p++) {
        int32_t idx = llama_batch_ext_add_token(b, 0, ids[p]);
        llama_batch_ext_set_pos(b, idx, &p);
        llama_batch_ext_set_output_logits(b, idx, p == n - 1);
    }
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b) != 0) {
        fprintf(stderr, "target prefill of %d tokens failed\n", n);
        exit(1);
    }
    llama_batch_ext_free(b);
    const float * h = llama_get_embeddings_nextn_ith(ctx, n - 1);
    return std::vector<float>(h, h + n_bb);
}

struct step_out {
    std::vector<float> logits, h;
};

// drafter: one row (tok, h) at pos0
static step_out draft_step(llama_context * ctx, llama_token tok, llama_pos pos0, const std::vector<float> & h,
                           int n_vocab) {
    llama_batch_ext * b = llama_batch_ext_init(ctx);
    int32_t idx = llama_batch_ext_add_token(b, 0, tok);
    llama_batch_ext_set_pos(b, idx, &pos0);
    if (!llama_batch_ext_set_embd_token(b, idx, {h.data(), 1, h.size()})) {
        fprintf(stderr, "set_embd_token refused\n");
        exit(1);
    }
    llama_batch_ext_set_output_logits(b, idx, true);
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b) != 0) {
        fprintf(stderr, "drafter decode at pos %d failed\n", pos0);
        exit(1);
    }
    llama_batch_ext_free(b);
    const float * lg = llama_get_logits_ith(ctx, 0);
    const float * hn = llama_get_embeddings_nextn_ith(ctx, 0);
    step_out r;
    r.logits.assign(lg, lg + n_vocab);
    r.h.assign(hn, hn + h.size());
    return r;
}

// finite, not all equal
static void check_logits(const std::vector<float> & v, int pos0, int k) {
    bool all_eq = true;
    for (float x : v) {
        if (!std::isfinite(x)) {
            fprintf(stderr, "case %d step %d: non-finite logit\n", pos0, k);
            exit(1);
        }
        all_eq = all_eq && x == v[0];
    }
    if (all_eq) {
        fprintf(stderr, "case %d step %d: all logits equal\n", pos0, k);
        exit(1);
    }
}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s tests/data/gemma4 > gemma4-mtp.draft.txt\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * m_tgt = llama_model_load_from_file((dir + "/gemma4-dense.gguf").c_str(), mp);
    llama_model * m_dft = llama_model_load_from_file((dir + "/gemma4-mtp.gguf").c_str(), mp);
    if (!m_tgt || !m_dft) {
        fprintf(stderr, "model load failed\n");
        return 1;
    }
    const int n_bb = llama_model_n_embd_out(m_tgt);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m_dft));
    fprintf(stderr, "target n_embd_out %d, drafter n_embd %d n_embd_out %d n_layer_nextn %d vocab %d\n", n_bb,
            llama_model_n_embd(m_dft), llama_model_n_embd_out(m_dft), llama_model_n_layer_nextn(m_dft), n_vocab);

    llama_context * c_tgt = llama_init_from_model(m_tgt, ctx_params());
    if (!c_tgt) {
        return 1;
    }
    llama_set_embeddings_nextn(c_tgt, true, false);

    std::map<std::string, std::string> seen;
    llama_context_params cp2 = ctx_params();
    cp2.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cp2.ctx_other = c_tgt;
    cp2.n_ctx = llama_n_ctx(c_tgt);
    cp2.cb_eval = kv_probe;
    cp2.cb_eval_user_data = &seen;
    llama_context * c_dft = llama_init_from_model(m_dft, cp2);
    if (!c_dft) {
        return 1;
    }
    llama_set_embeddings_nextn(c_dft, true, true);

    const std::vector<llama_token> ids = read_tokens(dir + "/gemma4-dense.logits.txt");
    printf("# llama.cpp 0.3.36 Gemma 4 MTP drafter on gemma4-mtp.gguf over gemma4-dense.gguf "
           "(tests/gen/gen_gemma4_mtp_fixtures.py, tests/gen/mtp_llama_harness.cpp)\n");
    printf("tokens %zu", ids.size());
    for (llama_token t : ids) {
        printf(" %d", t);
    }
    printf("\n");

    std::vector<float> prev_logits;
    for (int pos0 : CASES) {
        std::vector<float> h = prefill(c_tgt, ids, pos0, n_bb);
        printf("case %d %d\n", pos0, STEPS);
        put(stdout, "h0", h.data(), n_bb);
        llama_token tok = ids[pos0];
        std::vector<float> h0 = h;
        for (int k = 0; k < STEPS; k++) {
            step_out r = draft_step(c_dft, tok, pos0, h, n_vocab);
            check_logits(r.logits, pos0, k);
            printf("step %d %d\n", k, tok);
            put(stdout, "logits", r.logits.data(), n_vocab);
            put(stdout, "h", r.h.data(), n_bb);
            if (k == 0) {
                fprintf(stderr, "case %2d: step 0 argmax %d (max logit %.4f), h0[0..3] %.7g %.7g %.7g %.7g\n", pos0,
                        argmax(r.logits.data(), n_vocab), r.logits[argmax(r.logits.data(), n_vocab)], h0[0], h0[1],
                        h0[2], h0[3]);
                if (!prev_logits.empty()) {
                    fprintf(stderr, "         max |step0 logits - previous case's| = %.4g\n",
                            max_abs_diff(r.logits, prev_logits));
                }
                prev_logits = r.logits;
            }
            tok = argmax(r.logits.data(), n_vocab);
            h = r.h;
        }
        // sensitivity to h (reported, not stored): step 0 again with h zeroed, and with h0 again
        step_out z = draft_step(c_dft, ids[pos0], pos0, std::vector<float>(n_bb, 0.0f), n_vocab);
        step_out again = draft_step(c_dft, ids[pos0], pos0, h0, n_vocab);
        fprintf(stderr, "         h zeroed: max |dlogits| = %.4g (argmax %d); repeat with h0: max |dlogits| = %.3g\n",
                max_abs_diff(z.logits, prev_logits), argmax(z.logits.data(), n_vocab),
                max_abs_diff(again.logits, prev_logits));
    }

    llama_free(c_dft);
    llama_free(c_tgt);
    llama_model_free(m_dft);
    llama_model_free(m_tgt);
    llama_backend_free();
    return 0;
}
