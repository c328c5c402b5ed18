// bench/vision-ref/mtmd_ref.cpp — the reference side of bench/vision-compare: llama.cpp's libmtmd encodes one
// image and we write its embeddings (and optionally times the encode). Our code, linking a user's llama.cpp
// build; compiled by bench/vision-ref/build.sh, not part of the CMake build or CI.
//
//   mtmd_ref -m TEXT.gguf --mmproj MM.gguf --rgb IMG.rgb W H [-t THREADS] [--fa 0|1|-1] [--reps R]
//            [--out EMB.f32] [--prompt TEXT --logits LOGITS.f32 [--layout LAYOUT.txt]] [-v]
//
// IMG.rgb is W*H*3 bytes, RGB, rows top to bottom. It should already be at the encoder's size (image_size
// squared for Gemma 3): llama.cpp then copies it instead of resizing (a resize is never bit-exact across
// programs). EMB.f32 is n_tokens x n_embd little-endian floats (mtmd_get_output_embd after the last encode).
// --fa: flash attention (0 off, the default here: its F16 K/V would add rounding to the comparison;
// -1 AUTO, llama.cpp's own default, which enables it on CPU).
// --prompt/--logits: the chunks "<__media__>" + prompt go through mtmd_helper_eval_chunks into a llama
// context; the last position's logits are written (n_vocab floats); --layout writes the chunks' token ids and
// image sizes (write_layout) so bench/vision_embd can evaluate the same sequence in our engine.
// Prints one line per encode: "encode R: S s (cpu C s)" (wall, process CPU). -v keeps llama.cpp's own log (otherwise warnings only).
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"

namespace {

struct args {
    std::string model, mmproj, rgb, out, prompt, logits, layout;
    int w = 0, h = 0, threads = 1, fa = 0, reps = 1;
    bool verbose = false;
};

bool parse(int argc, char **argv, args &a) {
    for (int i = 1; i < argc; i++) {
        const std::string k = argv[i];
        auto next = [&](void) -> const char * { return i + 1 < argc ? argv[++i] : nullptr; };
        const char *v = nullptr;
        if (k == "-v") {
            a.verbose = true;
            continue;
        }
        if (k == "--rgb") {
            if (i + 3 >= argc) return false;
            a.rgb = argv[++i];
            a.w = atoi(argv[++i]);
            a.h = atoi(argv[++i]);
            continue;
        }
        if (!(v = next())) return false;
        if (k == "-m") a.model = v;
        else if (k == "--mmproj") a.mmproj = v;
        else if (k == "-t") a.threads = atoi(v);
        else if (k == "--fa") a.fa = atoi(v);
        else if (k == "--reps") a.reps = atoi(v);
        else if (k == "--out") a.out = v;
        else if (k == "--prompt") a.prompt = v;
        else if (k == "--logits") a.logits = v;
        else if (k == "--layout") a.layout = v;
        else return false;
    }
    return !a.model.empty() && !a.mmproj.empty() && !a.rgb.empty() && a.w > 0 && a.h > 0 && a.reps > 0;
}

// prints the message, returns 1 (an exit status)
int fail(const char *msg, const char *what = "") {
    fprintf(stderr, "mtmd_ref: %s%s\n", msg, what);
    return 1;
}

bool read_rgb(const args &a, std::vector<unsigned char> &px) {
    px.resize((size_t)a.w * a.h * 3);
    FILE *f = fopen(a.rgb.c_str(), "rb");
    const bool ok = f && fread(px.data(), 1, px.size(), f) == px.size() && fgetc(f) == EOF;
    if (f) fclose(f);
    return ok;
}

bool write_floats(const std::string &path, const float *x, size_t n) {
    FILE *f = fopen(path.c_str(), "wb");
    const bool ok = f && fwrite(x, sizeof(float), n, f) == n;
    return f && fclose(f) == 0 && ok;
}

// the image chunk among the tokenized chunks (there is exactly one image)
const mtmd_input_chunk *image_chunk(const mtmd_input_chunks *chunks) {
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_IMAGE) return c;
    }
    return nullptr;
}

int encode_and_dump(mtmd_context *ctx, const mtmd_input_chunk *img, const llama_model *model, const args &a) {
    for (int r = 0; r < a.reps; r++) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::clock_t c0 = std::clock(); // process CPU time: steadier on a shared host
        if (mtmd_encode_chunk(ctx, img) != 0) return fail("mtmd_encode_chunk failed");
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        printf("encode %d: %.3f s (cpu %.3f s)\n", r, s, (double)(std::clock() - c0) / CLOCKS_PER_SEC);
        fflush(stdout);
    }
    const size_t n_tok = mtmd_input_chunk_get_n_tokens(img), n_embd = (size_t)llama_model_n_embd_inp(model);
    printf("tokens %zu x %zu\n", n_tok, n_embd);
    if (!a.out.empty() && !write_floats(a.out, mtmd_get_output_embd(ctx), n_tok * n_embd))
        return fprintf(stderr, "mtmd_ref: cannot write %s\n", a.out.c_str()), 1;
    return 0;
}

// What the chunks are, for our side to rebuild the same sequence: per chunk a line "T id id ..." (text) or
// "I n" (an image of n positions).
int write_layout(const mtmd_input_chunks *chunks, const std::string &path) {
    FILE *f = fopen(path.c_str(), "w");
    if (!f) return fail("cannot write ", path.c_str());
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token *t = mtmd_input_chunk_get_tokens_text(c, &n);
            fputc('T', f);
            for (size_t k = 0; k < n; k++) fprintf(f, " %d", (int)t[k]);
            fputc('\n', f);
        } else {
            fprintf(f, "I %zu\n", mtmd_input_chunk_get_n_tokens(c));
        }
    }
    return fclose(f) ? fail("cannot write ", path.c_str()) : 0;
}

// the chunks of "<__media__>" + prompt through a llama context; the last position's logits to a.logits
int eval_logits(mtmd_context *ctx, llama_model *model, const mtmd_input_chunks *chunks, const args &a) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = cp.n_ubatch = 512;
    cp.n_threads = cp.n_threads_batch = a.threads;
    cp.flash_attn_type = (llama_flash_attn_type)a.fa;
    llama_context *lctx = llama_init_from_model(model, cp);
    if (!lctx) return fprintf(stderr, "mtmd_ref: llama_init_from_model failed\n"), 1;
    llama_pos n_past = 0;
    int rc = mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, (int32_t)cp.n_batch, true, &n_past);
    if (rc) fprintf(stderr, "mtmd_ref: mtmd_helper_eval_chunks: %d\n", rc);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    if (!rc && !write_floats(a.logits, llama_get_logits_ith(lctx, -1), (size_t)n_vocab))
        rc = fail("cannot write ", a.logits.c_str());
    if (!rc) printf("positions %d, vocab %d\n", (int)n_past, n_vocab);
    if (!rc && !a.layout.empty()) rc = write_layout(chunks, a.layout);
    llama_free(lctx);
    return rc;
}

int run(const args &a, llama_model *model) {
    mtmd_context_params mp = mtmd_context_params_default();
    mp.use_gpu = false;
    mp.n_threads = a.threads;
    mp.flash_attn_type = (llama_flash_attn_type)a.fa;
    mp.print_timings = false;
    mtmd_context *ctx = mtmd_init_from_file(a.mmproj.c_str(), model, mp);
    if (!ctx) return fprintf(stderr, "mtmd_ref: mtmd_init_from_file failed\n"), 1;
    std::vector<unsigned char> px;
    int rc = 0;
    mtmd_bitmap *bmp = nullptr;
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    const std::string text = std::string(mtmd_default_marker()) + a.prompt;
    const mtmd_input_text in = {text.c_str(), text.size(), true, true};
    if (!read_rgb(a, px)) rc = fail("not W x H x 3 bytes: ", a.rgb.c_str());
    if (!rc) bmp = mtmd_bitmap_init((uint32_t)a.w, (uint32_t)a.h, px.data());
    const mtmd_bitmap *bmps[1] = {bmp};
    if (!rc && mtmd_tokenize(ctx, chunks, &in, bmps, 1) != 0) rc = fail("mtmd_tokenize failed");
    const mtmd_input_chunk *img = rc ? nullptr : image_chunk(chunks);
    if (!rc && !img) rc = fail("no image chunk");
    if (!rc) rc = encode_and_dump(ctx, img, model, a);
    if (!rc && !a.logits.empty()) rc = eval_logits(ctx, model, chunks, a);
    mtmd_input_chunks_free(chunks);
    mtmd_bitmap_free(bmp);
    mtmd_free(ctx);
    return rc;
}

void quiet_log(ggml_log_level level, const char *text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN) fputs(text, stderr);
}

}  // namespace

int main(int argc, char **argv) {
    args a;
    if (!parse(argc, argv, a)) {
        fprintf(stderr, "usage: mtmd_ref -m TEXT.gguf --mmproj MM.gguf --rgb IMG.rgb W H [-t N] [--fa 0|1|-1] "
                        "[--reps R] [--out EMB.f32] [--prompt TEXT --logits LOGITS.f32 [--layout F]] [-v]\n");
        return 2;
    }
    if (!a.verbose) {
        llama_log_set(quiet_log, nullptr);
        mtmd_helper_log_set(quiet_log, nullptr);
    }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(a.model.c_str(), mp);
    if (!model) return fprintf(stderr, "mtmd_ref: cannot load %s\n", a.model.c_str()), 1;
    const int rc = run(a, model);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
