// Records llama.cpp's EAGLE-3 encoder outputs and drafts on the tiny target tests/data/gemma4/gemma4-dense.gguf
// with a tiny EAGLE-3 head (tests/gen/gen_eagle3_fixtures.py) into tests/data/eagle3/<stem>.draft.txt, the
// reference for the EAGLE-3 parity test. Not built by our CMake: it links the libllama of llama-cpp-python
// 0.3.36's vendored llama.cpp (LL below), built in B:
//
//   LL=/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp B=/tmp/lcp/buildvk/bin
//   g++ -std=c++17 -O1 -Wall -Wextra -I$LL/include -I$LL/ggml/include -I$LL/src tests/gen/eagle3_llama_harness.cpp -L$B -lllama -lggml -lggml-base -Wl,-rpath,$B -o /tmp/eagle3_llama_harness
//   for s in eagle3-gemma4 eagle3-gemma4-d2t; do
//     GGML_VK_VISIBLE_DEVICES= /tmp/eagle3_llama_harness tests/data/gemma4 tests/data/eagle3/$s.gguf > tests/data/eagle3/$s.draft.txt
//   done
//
// What it does, as llama.cpp's draft-eagle3 driver (common/speculative.cpp) does:
//   - both contexts on the CPU, F32 K/V cache, flash attention OFF in both; the drafter context gets
//     ctx_other = the target (it reads the target's token_embd when it has none of its own);
//   - target taps: for each id of eagle3.target_layers, id < n_layer -> llama_set_embeddings_layer_inp (the
//     INPUT of target layer id), id == n_layer -> llama_set_embeddings_nextn(unmasked) (gemma4: the
//     final-normed hidden state); drafter: llama_set_embeddings_nextn(masked), its pre-norm output;
//   - prefill the target with the N tokens of gemma4-dense.logits.txt in one batch; features row p =
//     concat(tap0[p], tap1[p], tap2[p]) (3 * 32 floats); the ENCODE pass gives g[p] (n_embd floats) for
//     every p (the driver's placeholder positions: the drafter's seq_pos_max+1 onward);
//   - the drafter's own KV cache: one DECODE batch of the pairs (token[k+1], g[k]) at position k,
//     k = 0..N-2, no outputs (process(): pair at memory position P = (token P+1, g_P), RoPE at P; the last
//     row, N-1, is the deferred boundary and is not written);
//   - case P (0 <= P <= N-2; run in descending P, as repeated draft() calls would truncate): seq_rm of the
//     drafter's positions >= P (draft() does this at pending_pos); step 0 feeds (token[P+1], g[P]) at P
//     (token[P+1] stands for the target's sample id_last, g[P] for pending_g); step k >= 1 feeds
//     (argmax of step k-1, the pre-norm output of step k-1) at P+k. The argmax is over the full target
//     vocab (the driver's top-k 10 candidates[0]); each step's row stays in the drafter's cache.
// Output (cases printed in ascending P): `tokens n ids`, `layers` (target ids), `d2t n ids` when the head
// has a draft vocab, `taps p <3*32>` and `g0 p <n_embd>` for p = 0..N-1, then per case `case P steps` and per
// step `step k <token fed>`, `logits <floats>` (the n_draft_vocab draft logits in draft-id order when the
// head has d2t: llama.cpp's output is then a 300-wide vector with -inf except at d2t[i]; otherwise the 300
// target-vocab logits), `g <n_embd>` (the step's pre-norm output = the next step's g).
// Sanity checks go to stderr: finite, cases differ, g0 and logits recomputed by hand from the GGUF's fc /
// enc.output_norm / output_norm / output / d2t (checks the tap order, norm_before_fc, the pre-norm g and the
// d2t scatter), zeroed taps move the logits, a repeat reproduces them.
#include "llama.h"
#include "llama-ext.h"
#include "ggml.h"
#include "gguf.h"
#include "llama_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

static const int CASES[] = {0, 1, 5, 12, 20, 33, 38};
static const int STEPS = 3;

static void quiet_log(ggml_log_level level, const char * text, void *) {
    if (level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR) {
        fputs(text, stderr);
    }
}

static void die(const char * msg) {
    fprintf(stderr, "%s\n", msg);
    exit(1);
}

// the head's weights as stored, for the hand-computed checks
struct head_file {
    gguf_context * g = nullptr;
    ggml_context * c = nullptr;
    float eps = 0;
    bool norm_before_fc = false;

    const ggml_tensor * get(const char * name) const { return ggml_get_tensor(c, name); }
};

static head_file open_head(const std::string & path) {
    head_file h;
    gguf_init_params ip = {false, &h.c};
    h.g = gguf_init_from_file(path.c_str(), ip);
    if (!h.g) {
        die("gguf_init_from_file failed");
    }
    h.eps = gguf_get_val_f32(h.g, gguf_find_key(h.g, "eagle3.attention.layer_norm_rms_epsilon"));
    const int64_t k = gguf_find_key(h.g, "eagle3.norm_before_fc");
    h.norm_before_fc = k >= 0 && gguf_get_val_bool(h.g, k);
    return h;
}

static std::vector<float> rms_norm(const std::vector<float> & x, const float * w, float eps) {
    double ss = 0;
    for (float v : x) {
        ss += (double) v * v;
    }
    const double r = 1.0 / sqrt(ss / x.size() + eps);
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i++) {
        y[i] = (float) (x[i] * r * w[i]);
    }
    return y;
}

// y = W x for a ggml F32 matrix {in, out}
static std::vector<float> matvec(const ggml_tensor * w, const std::vector<float> & x) {
    const int64_t n_in = w->ne[0], n_out = w->ne[1];
    if ((int64_t) x.size() != n_in || w->type != GGML_TYPE_F32) {
        die("matvec: shape or type mismatch");
    }
    std::vector<float> y(n_out);
    for (int64_t o = 0; o < n_out; o++) {
        const float * row = (const float *) w->data + o * n_in;
        double s = 0;
        for (int64_t i = 0; i < n_in; i++) {
            s += (double) row[i] * x[i];
        }
        y[o] = (float) s;
    }
    return y;
}

static int argmax(const std::vector<float> & v) {
    return (int) (std::max_element(v.begin(), v.end()) - v.begin());
}

static double max_abs(const std::vector<float> & a) {
    double m = 0;
    for (float v : a) {
        m = fmax(m, fabs(v));
    }
    return m;
}

// target: prefill all tokens in one batch; returns the features rows [N][3*d]
static std::vector<std::vector<float>> prefill_taps(llama_context * ctx, const std::vector<llama_token> & ids,
                                                    const int32_t * layers, int n_layer, int d) {
    llama_batch_ext * b = llama_batch_ext_init(ctx);
    const int n = (int) ids.size();
    for (llama_pos p = 0; p < n; p++) {
        int32_t idx = llama_batch_ext_add_token(b, 0, ids[p]);
        llama_batch_ext_set_pos(b, idx, &p);
        llama_batch_ext_set_output_logits(b, idx, p == n - 1);
    }
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b) != 0) {
        die("target prefill failed");
    }
    llama_batch_ext_free(b);
    std::vector<std::vector<float>> feat(n, std::vector<float>(3 * d));
    for (int k = 0; k < 3; k++) {
        const float * t = layers[k] < n_layer ? llama_get_embeddings_layer_inp(ctx, layers[k])
                                              : llama_get_embeddings_nextn(ctx);
        if (!t) {
            die("tap not extracted");
        }
        for (int p = 0; p < n; p++) {
            memcpy(feat[p].data() + k * d, t + (size_t) p * d, d * sizeof(float));
        }
    }
    return feat;
}

// drafter ENCODE over feature rows, positions from the drafter's seq_pos_max+1 as the driver does
static std::vector<std::vector<float>> encode(llama_context * ctx, const std::vector<std::vector<float>> & feat,
                                              int n_embd) {
    llama_batch_ext * b = llama_batch_ext_init(ctx);
    llama_pos pos = llama_memory_seq_pos_max(llama_get_memory(ctx), 0) + 1;
    for (const auto & f : feat) {
        int32_t idx = llama_batch_ext_add_embd(b, 0, {f.data(), 1, f.size()});
        if (idx < 0) {
            die("add_embd refused");
        }
        llama_batch_ext_set_pos(b, idx, &pos);
        llama_batch_ext_set_output_logits(b, idx, true);
        pos++;
    }
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_ENCODE, b) != 0) {
        die("drafter encode failed");
    }
    llama_batch_ext_free(b);
    const float * g = llama_get_embeddings_nextn(ctx);
    std::vector<std::vector<float>> out(feat.size());
    for (size_t p = 0; p < feat.size(); p++) {
        out[p].assign(g + p * n_embd, g + (p + 1) * n_embd);
    }
    return out;
}

// drafter DECODE of pairs (tok[i], g[i]) at pos0 + i; output only on the last row when `out`
static void decode_pairs(llama_context * ctx, const std::vector<llama_token> & toks,
                         const std::vector<const float *> & gs, llama_pos pos0, int n_embd, bool out) {
    llama_batch_ext * b = llama_batch_ext_init(ctx);
    for (size_t i = 0; i < toks.size(); i++) {
        llama_pos p = pos0 + (llama_pos) i;
        int32_t idx = llama_batch_ext_add_token(b, 0, toks[i]);
        llama_batch_ext_set_pos(b, idx, &p);
        if (!llama_batch_ext_set_embd_token(b, idx, {gs[i], 1, (size_t) n_embd})) {
            die("set_embd_token refused");
        }
        llama_batch_ext_set_output_logits(b, idx, out && i + 1 == toks.size());
    }
    if (llama_process(ctx, LLAMA_PROCESS_TYPE_DECODE, b) != 0) {
        die("drafter decode failed");
    }
    llama_batch_ext_free(b);
}

// the `pos p v...` rows of the target's logits file (llama.cpp's logits at every position)
static std::vector<std::vector<float>> read_target_logits(const std::string & path) {
    std::ifstream f(path);
    std::string line;
    std::vector<std::vector<float>> rows;
    while (std::getline(f, line)) {
        if (line.rfind("pos ", 0) == 0) {
            std::istringstream ss(line.substr(4));
            int p;
            ss >> p;
            std::vector<float> v;
            float x;
            while (ss >> x) {
                v.push_back(x);
            }
            rows.resize(std::max<size_t>(rows.size(), p + 1));
            rows[p] = v;
        }
    }
    return rows;
}

// the tap id == n_layer is the target's final-normed hidden: softcap(E . h) must give the recorded logits
static void check_final_tap(const llama_model * m_tgt, const std::vector<std::vector<float>> & feat, int k, int d,
                            const std::string & logits_path) {
    const auto want = read_target_logits(logits_path);
    const uint32_t n_vocab = (uint32_t) llama_vocab_n_tokens(llama_model_get_vocab(m_tgt));
    std::vector<float> emb((size_t) n_vocab * d);
    if (llama_model_get_tok_embd(m_tgt, emb.data()) != emb.size()) { // it returns the element count
        die("target token_embd size");
    }
    char buf[64];
    const float cap = llama_model_meta_val_str(m_tgt, "gemma4.final_logit_softcapping", buf, sizeof buf) > 0
                          ? (float) atof(buf) : 0.0f;
    double m = 0;
    for (size_t p = 0; p < feat.size() && p < want.size(); p++) {
        const float * h = feat[p].data() + k * d;
        for (uint32_t t = 0; t < n_vocab; t++) {
            double s = 0;
            for (int i = 0; i < d; i++) {
                s += (double) emb[(size_t) t * d + i] * h[i];
            }
            if (cap > 0) {
                s = cap * tanh(s / cap);
            }
            m = fmax(m, fabs(s - want[p][t]));
        }
    }
    fprintf(stderr, "tap %d (final hidden): max |softcap(E.h) - target logits file| %.3g over %zu positions\n", k, m,
            want.size());
    if (m > 1e-3) {
        die("the final-hidden tap does not give the target's logits");
    }
}

struct step_out {
    llama_token fed;
    std::vector<float> logits; // full target vocab, as llama.cpp gives it
    std::vector<float> g;      // pre-norm output
};

static step_out draft_step(llama_context * ctx, llama_token tok, const float * g, llama_pos pos, int n_embd,
                           int n_vocab) {
    decode_pairs(ctx, {tok}, {g}, pos, n_embd, true);
    step_out r;
    r.fed = tok;
    const float * lg = llama_get_logits_ith(ctx, 0);
    const float * pn = llama_get_embeddings_nextn_ith(ctx, 0);
    r.logits.assign(lg, lg + n_vocab);
    r.g.assign(pn, pn + n_embd);
    return r;
}

// hand check: logits = output . RMSNorm(g, output_norm), scattered through d2t; -inf elsewhere
static double check_head(const head_file & h, const step_out & s, const std::vector<int64_t> & d2t) {
    const ggml_tensor * on = h.get("output_norm.weight");
    const std::vector<float> y = matvec(h.get("output.weight"), rms_norm(s.g, (const float *) on->data, h.eps));
    std::vector<float> want(s.logits.size(), -INFINITY);
    for (size_t i = 0; i < y.size(); i++) {
        want[d2t.empty() ? i : d2t[i]] = y[i];
    }
    double m = 0;
    for (size_t i = 0; i < want.size(); i++) {
        if (std::isinf(want[i]) != std::isinf(s.logits[i]) || (std::isinf(want[i]) && s.logits[i] > 0)) {
            fprintf(stderr, "logit %zu: llama %g, by hand %g\n", i, s.logits[i], want[i]);
            die("d2t scatter mismatch");
        }
        if (!std::isinf(want[i])) {
            m = fmax(m, fabs((double) want[i] - s.logits[i]));
        }
    }
    return m;
}

static std::vector<float> visible_logits(const step_out & s, const std::vector<int64_t> & d2t) {
    if (d2t.empty()) {
        return s.logits;
    }
    std::vector<float> v(d2t.size());
    for (size_t i = 0; i < d2t.size(); i++) {
        v[i] = s.logits[d2t[i]];
    }
    return v;
}

int main(int argc, char ** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s tests/data/gemma4 tests/data/eagle3/<stem>.gguf > <stem>.draft.txt\n", argv[0]);
        return 2;
    }
    const std::string tdir = argv[1], head_path = argv[2];
    llama_log_set(quiet_log, nullptr);
    llama_backend_init();

    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * m_tgt = llama_model_load_from_file((tdir + "/gemma4-dense.gguf").c_str(), mp);
    llama_model * m_dft = llama_model_load_from_file(head_path.c_str(), mp);
    if (!m_tgt || !m_dft) {
        die("model load failed");
    }
    const head_file hf = open_head(head_path);
    const int d_tgt = llama_model_n_embd(m_tgt), n_layer = llama_model_n_layer(m_tgt);
    const int n_embd = llama_model_n_embd(m_dft);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m_dft));
    if (llama_model_target_layer_ids_n(m_dft) != 3) {
        die("not an eagle3 head");
    }
    const int32_t * layers = llama_model_target_layer_ids(m_dft);
    std::vector<int64_t> d2t;
    if (const ggml_tensor * t = hf.get("d2t")) {
        d2t.assign((const int64_t *) t->data, (const int64_t *) t->data + t->ne[0]);
    }
    fprintf(stderr, "target d %d n_layer %d; head n_embd %d, layers [%d %d %d], norm_before_fc %d, %s\n", d_tgt,
            n_layer, n_embd, layers[0], layers[1], layers[2], hf.norm_before_fc,
            d2t.empty() ? "full vocab" : "d2t draft vocab");

    llama_context * c_tgt = llama_init_from_model(m_tgt, ctx_params());
    if (!c_tgt) {
        return 1;
    }
    for (int k = 0; k < 3; k++) {
        if (layers[k] < n_layer) {
            llama_set_embeddings_layer_inp(c_tgt, layers[k], true);
        } else if (layers[k] == n_layer) {
            llama_set_embeddings_nextn(c_tgt, true, false);
        } else {
            die("target layer id > n_layer");
        }
    }
    llama_context_params cp2 = ctx_params();
    cp2.ctx_other = c_tgt;
    cp2.n_ctx = llama_n_ctx(c_tgt);
    llama_context * c_dft = llama_init_from_model(m_dft, cp2);
    if (!c_dft) {
        return 1;
    }
    llama_set_embeddings_nextn(c_dft, true, true);

    const std::vector<llama_token> ids = read_tokens(tdir + "/gemma4-dense.logits.txt");
    const int N = (int) ids.size();
    const auto feat = prefill_taps(c_tgt, ids, layers, n_layer, d_tgt);
    for (int k = 0; k < 3; k++) {
        if (layers[k] == n_layer) {
            check_final_tap(m_tgt, feat, k, d_tgt, tdir + "/gemma4-dense.logits.txt");
        }
    }
    const auto g0 = encode(c_dft, feat, n_embd);

    // encoder by hand: g = fc . (norm_before_fc ? RMSNorm(f, enc.output_norm) : f)
    double enc_err = 0, g_scale = 0;
    for (int p = 0; p < N; p++) {
        std::vector<float> x = feat[p];
        if (hf.norm_before_fc) {
            x = rms_norm(x, (const float *) hf.get("enc.output_norm.weight")->data, hf.eps);
        }
        enc_err = fmax(enc_err, max_abs_diff(matvec(hf.get("fc.weight"), x), g0[p]));
        g_scale = fmax(g_scale, max_abs(g0[p]));
    }
    fprintf(stderr, "encoder: max |g0| %.4g, max |g0 - fc.f by hand| %.3g over %d rows\n", g_scale, enc_err, N);
    if (enc_err > 1e-4 * fmax(1.0, g_scale)) {
        die("encoder does not match fc . features");
    }

    // process(): pairs (token[k+1], g[k]) at k for k = 0..N-2
    {
        std::vector<llama_token> t(ids.begin() + 1, ids.end());
        std::vector<const float *> g;
        for (int k = 0; k < N - 1; k++) {
            g.push_back(g0[k].data());
        }
        decode_pairs(c_dft, t, g, 0, n_embd, false);
    }

    llama_memory_t mem = llama_get_memory(c_dft);
    std::map<int, std::vector<step_out>> cases;
    const int n_cases = (int) (sizeof(CASES) / sizeof(CASES[0]));
    for (int ci = n_cases - 1; ci >= 0; ci--) {
        const int P = CASES[ci];
        std::vector<step_out> & st = cases[P];
        llama_memory_seq_rm(mem, 0, P, -1);
        llama_token tok = ids[P + 1];
        const float * g = g0[P].data();
        for (int k = 0; k < STEPS; k++) {
            st.push_back(draft_step(c_dft, tok, g, P + k, n_embd, n_vocab));
            const step_out & s = st.back();
            for (float v : visible_logits(s, d2t)) {
                if (!std::isfinite(v)) {
                    die("non-finite draft logit");
                }
            }
            const double e = check_head(hf, s, d2t);
            if (e > 1e-4 * fmax(1.0, max_abs(visible_logits(s, d2t)))) {
                fprintf(stderr, "case %d step %d: logits vs output . norm(g) by hand: %g\n", P, k, e);
                die("head check failed");
            }
            tok = argmax(s.logits);
            g = st.back().g.data();
        }
        // sensitivity: step 0 with the taps of P zeroed (g = encoder(0)), then step 0 again as recorded
        llama_memory_seq_rm(mem, 0, P, -1);
        const auto gz = encode(c_dft, {std::vector<float>(3 * d_tgt, 0.0f)}, n_embd);
        llama_memory_seq_rm(mem, 0, P, -1);
        const step_out z = draft_step(c_dft, ids[P + 1], gz[0].data(), P, n_embd, n_vocab);
        llama_memory_seq_rm(mem, 0, P, -1);
        const step_out again = draft_step(c_dft, ids[P + 1], g0[P].data(), P, n_embd, n_vocab);
        const auto v0 = visible_logits(st[0], d2t);
        fprintf(stderr,
                "case %2d: step argmax %d %d %d, g0[%d][0..3] %.7g %.7g %.7g %.7g; taps zeroed: max |dlogits| %.4g "
                "(argmax %d); repeat: %.3g\n",
                P, argmax(st[0].logits), argmax(st[1].logits), argmax(st[2].logits), P, g0[P][0], g0[P][1],
                g0[P][2], g0[P][3], max_abs_diff(visible_logits(z, d2t), v0), argmax(z.logits),
                max_abs_diff(visible_logits(again, d2t), v0));
        if (max_abs_diff(visible_logits(z, d2t), v0) < 1e-3) {
            die("zeroed taps do not move the logits");
        }
        if (max_abs_diff(visible_logits(again, d2t), v0) > 1e-5) {
            die("a repeat does not reproduce step 0");
        }
    }
    for (int ci = 1; ci < n_cases; ci++) {
        const double dd = max_abs_diff(visible_logits(cases[CASES[ci]][0], d2t),
                                       visible_logits(cases[CASES[ci - 1]][0], d2t));
        fprintf(stderr, "max |step0 logits case %d - case %d| = %.4g\n", CASES[ci], CASES[ci - 1], dd);
        if (dd < 1e-3) {
            die("cases do not differ");
        }
    }

    printf("# llama.cpp 0.3.36 EAGLE-3 (draft-eagle3) on %s over gemma4-dense.gguf "
           "(tests/gen/gen_eagle3_fixtures.py, tests/gen/eagle3_llama_harness.cpp); logits: %s\n",
           head_path.substr(head_path.find_last_of('/') + 1).c_str(),
           d2t.empty() ? "the full target vocab" : "the draft vocab, draft-id order (target id = d2t[i])");
    printf("tokens %d", N);
    for (llama_token t : ids) {
        printf(" %d", t);
    }
    printf("\nlayers 3 %d %d %d\n", layers[0], layers[1], layers[2]);
    if (!d2t.empty()) {
        printf("d2t %zu", d2t.size());
        for (int64_t t : d2t) {
            printf(" %lld", (long long) t);
        }
        printf("\n");
    }
    char tag[32];
    for (int p = 0; p < N; p++) {
        snprintf(tag, sizeof tag, "taps %d", p);
        put(stdout, tag, feat[p].data(), 3 * d_tgt);
    }
    for (int p = 0; p < N; p++) {
        snprintf(tag, sizeof tag, "g0 %d", p);
        put(stdout, tag, g0[p].data(), n_embd);
    }
    for (int P : CASES) {
        printf("case %d %d\n", P, STEPS);
        for (int k = 0; k < STEPS; k++) {
            const step_out & s = cases[P][k];
            printf("step %d %d\n", k, s.fed);
            const auto v = visible_logits(s, d2t);
            put(stdout, "logits", v.data(), (int) v.size());
            put(stdout, "g", s.g.data(), n_embd);
        }
    }

    gguf_free(hf.g);
    ggml_free(hf.c);
    llama_free(c_dft);
    llama_free(c_tgt);
    llama_model_free(m_dft);
    llama_model_free(m_tgt);
    llama_backend_free();
    return 0;
}
