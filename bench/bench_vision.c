/* bench/bench_vision.c — image encode time of the Gemma 3 vision encoder at its real shapes (image 896,
 * patch 14, width 1152, ffn 4304, 16 heads, 27 blocks, 4x4 pooling -> 256 tokens of 2560) with random
 * weights: writes such an mmproj (F16 matrices and projection, as llama.cpp's converter does; F32 rest)
 * to a temporary file, opens it and times gm_vision_encode. Not a test: nothing is asserted.
 * g4: a Gemma-4-shaped encoder instead (patch 16, width 768, ffn 3072, 12 heads, 3x3 pooling, F16 matrices) on
 * a 672 x 672 input (1764 patches, 196 tokens), through gm_vision_encode_chw.
 *
 *   cmake --build build --target bench_vision && build/bench_vision [blocks=27] [threads=0] [reps=2] [f16|f32|g4] [OUT]
 *
 * OUT: the last encode's rows written there as floats (to compare builds bit for bit). Each encode prints its wall
 * time and this process's CPU time (steadier on a shared host, at 1 thread).
 * Fewer blocks measure the per-block cost faster (the encode is ~all blocks: patch embedding and projector
 * are < 1%). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gemma.h"
#include "gemma_vision.h"
#include "support/gguf_writer.h"

enum { S = 896, P = 14, D = 1152, FF = 4304, H = 16, PD = 2560, G = S / P };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* this process's CPU seconds (steadier than wall time on a shared host) */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* uniform in [-a, a]: small enough that 27 random blocks keep the activations finite */
static void fill(float *x, size_t n, float a, uint64_t *state) {
    for (size_t i = 0; i < n; i++) {
        *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
        x[i] = a * (2.0f * (float)(*state >> 40) / (float)(1 << 24) - 1.0f);
    }
}

static bool add(gw_writer *w, const char *name, int type, int64_t n0, int64_t n1, int64_t n2, int64_t n3, const float *v) {
    const int64_t ne[4] = {n0, n1, n2, n3};
    const int n_dims = n3 > 1 ? 4 : n1 > 1 ? 2 : 1;
    return gw_add_tensor_f32(w, name, type, n_dims, ne, v);
}

static bool write_keys(gw_writer *w, int blocks) {
    const float half[3] = {0.5f, 0.5f, 0.5f};
    return gw_add_str(w, "general.architecture", "clip") && gw_add_bool(w, "clip.has_vision_encoder", true) &&
           gw_add_str(w, "clip.projector_type", "gemma3") && gw_add_bool(w, "clip.use_gelu", true) &&
           gw_add_u32(w, "clip.vision.image_size", S) && gw_add_u32(w, "clip.vision.patch_size", P) &&
           gw_add_u32(w, "clip.vision.embedding_length", D) && gw_add_u32(w, "clip.vision.feed_forward_length", FF) &&
           gw_add_u32(w, "clip.vision.block_count", (uint32_t)blocks) &&
           gw_add_u32(w, "clip.vision.attention.head_count", H) &&
           gw_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f) &&
           gw_add_u32(w, "clip.vision.projection_dim", PD) &&
           gw_add_arr(w, "clip.vision.image_mean", GGUF_VT_F32, 3, half) &&
           gw_add_arr(w, "clip.vision.image_std", GGUF_VT_F32, 3, half);
}

/* One random buffer serves every tensor: timing does not need distinct weights. */
static bool write_file(const char *path, int blocks, int mtype) {
    const size_t big = (size_t)FF * D > (size_t)G * G * D ? (size_t)FF * D : (size_t)G * G * D;
    float *r = malloc(big * sizeof(float)), *ones = malloc(FF * sizeof(float)), *zeros = calloc(FF, sizeof(float));
    uint64_t st = 0x9E3779B97F4A7C15ull;
    gw_writer *w = gw_new();
    bool ok = r && ones && zeros && w && write_keys(w, blocks);
    if (ok) fill(r, big, 0.03f, &st);
    for (int i = 0; ok && i < FF; i++) ones[i] = 1.0f;
    ok = ok && add(w, "v.patch_embd.weight", GM_TYPE_F32, P, P, 3, D, r) && add(w, "v.patch_embd.bias", GM_TYPE_F32, D, 1, 1, 1, zeros) &&
         add(w, "v.position_embd.weight", GM_TYPE_F32, D, G * G, 1, 1, r);
    char name[64];
    static const char *const mats[] = {"attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down"};
    for (int l = 0; ok && l < blocks; l++) {
        for (int m = 0; ok && m < 6; m++) {
            const int64_t cols = m == 5 ? FF : D, rows = m == 4 ? FF : D;
            snprintf(name, sizeof name, "v.blk.%d.%s.weight", l, mats[m]);
            ok = add(w, name, mtype, cols, rows, 1, 1, r);
            snprintf(name, sizeof name, "v.blk.%d.%s.bias", l, mats[m]);
            ok = ok && add(w, name, GM_TYPE_F32, rows, 1, 1, 1, zeros);
        }
        static const char *const norms[] = {"ln1", "ln2"};
        for (int n = 0; ok && n < 2; n++) {
            snprintf(name, sizeof name, "v.blk.%d.%s.weight", l, norms[n]);
            ok = add(w, name, GM_TYPE_F32, D, 1, 1, 1, ones);
            snprintf(name, sizeof name, "v.blk.%d.%s.bias", l, norms[n]);
            ok = ok && add(w, name, GM_TYPE_F32, D, 1, 1, 1, zeros);
        }
    }
    ok = ok && add(w, "v.post_ln.weight", GM_TYPE_F32, D, 1, 1, 1, ones) && add(w, "v.post_ln.bias", GM_TYPE_F32, D, 1, 1, 1, zeros) &&
         add(w, "mm.soft_emb_norm.weight", GM_TYPE_F32, D, 1, 1, 1, ones) &&
         add(w, "mm.input_projection.weight", GM_TYPE_F16, PD, D, 1, 1, r) && gw_write_file(w, path);
    if (!ok) fprintf(stderr, "bench_vision: writing %s failed: %s\n", path, w ? gw_error(w) : "out of memory");
    gw_free(w);
    free(r), free(ones), free(zeros);
    return ok;
}

/* ---- g4: Gemma 4's encoder (vision/mmproj_gemma4.c's names), at 672 x 672 */
enum { P4 = 16, D4 = 768, FF4 = 3072, H4 = 12, ROWS4 = 80, S4 = 672 };

static bool add_nd(gw_writer *w, const char *name, int type, int n_dims, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                   const float *v) {
    const int64_t ne[4] = {n0, n1, n2, n3};
    return gw_add_tensor_f32(w, name, type, n_dims, ne, v);
}

static bool write_g4(const char *path, int blocks) {
    const size_t big = (size_t)FF4 * D4 > (size_t)PD * D4 ? (size_t)FF4 * D4 : (size_t)PD * D4;
    float *r = malloc(big * sizeof(float)), *ones = malloc(D4 * sizeof(float));
    uint64_t st = 0x9E3779B97F4A7C15ull;
    gw_writer *w = gw_new();
    const float half[3] = {0.5f, 0.5f, 0.5f};
    bool ok = r && ones && w && gw_add_str(w, "general.architecture", "clip") &&
              gw_add_bool(w, "clip.has_vision_encoder", true) && gw_add_str(w, "clip.vision.projector_type", "gemma4v") &&
              gw_add_u32(w, "clip.vision.image_size", 224) && gw_add_u32(w, "clip.vision.patch_size", P4) &&
              gw_add_u32(w, "clip.vision.embedding_length", D4) && gw_add_u32(w, "clip.vision.feed_forward_length", FF4) &&
              gw_add_u32(w, "clip.vision.block_count", (uint32_t)blocks) &&
              gw_add_u32(w, "clip.vision.attention.head_count", H4) &&
              gw_add_f32(w, "clip.vision.attention.layer_norm_epsilon", 1e-6f) &&
              gw_add_u32(w, "clip.vision.projection_dim", PD) &&
              gw_add_arr(w, "clip.vision.image_mean", GGUF_VT_F32, 3, half) &&
              gw_add_arr(w, "clip.vision.image_std", GGUF_VT_F32, 3, half);
    if (ok) fill(r, big, 0.03f, &st);
    for (int i = 0; ok && i < D4; i++) ones[i] = 1.0f;
    ok = ok && add_nd(w, "v.patch_embd.weight", GM_TYPE_F16, 4, P4, P4, 3, D4, r) &&
         add_nd(w, "v.position_embd.weight", GM_TYPE_F32, 3, D4, ROWS4, 2, 1, r);
    char name[64];
    static const char *const mats[] = {"attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up", "ffn_down"};
    static const char *const norms[] = {"ln1", "ln2", "attn_post_norm", "ffn_post_norm", "attn_q_norm", "attn_k_norm"};
    for (int l = 0; ok && l < blocks; l++) {
        for (int m = 0; ok && m < 7; m++) {
            snprintf(name, sizeof name, "v.blk.%d.%s.weight", l, mats[m]);
            ok = add_nd(w, name, GM_TYPE_F16, 2, m == 6 ? FF4 : D4, m == 4 || m == 5 ? FF4 : D4, 1, 1, r);
        }
        for (int n = 0; ok && n < 6; n++) {
            snprintf(name, sizeof name, "v.blk.%d.%s.weight", l, norms[n]);
            ok = add_nd(w, name, GM_TYPE_F32, 1, n < 4 ? D4 : D4 / H4, 1, 1, 1, ones);
        }
    }
    ok = ok && add_nd(w, "mm.input_projection.weight", GM_TYPE_F16, 2, D4, PD, 1, 1, r) && gw_write_file(w, path);
    if (!ok) fprintf(stderr, "bench_vision: writing %s failed: %s\n", path, w ? gw_error(w) : "out of memory");
    gw_free(w);
    free(r), free(ones);
    return ok;
}

int main(int argc, char **argv) {
    const int blocks = argc > 1 ? atoi(argv[1]) : 27, threads = argc > 2 ? atoi(argv[2]) : 0;
    const int reps = argc > 3 ? atoi(argv[3]) : 2;
    const int mtype = argc > 4 && !strcmp(argv[4], "f32") ? GM_TYPE_F32 : GM_TYPE_F16;
    const bool g4 = argc > 4 && !strcmp(argv[4], "g4");
    char path[] = "/tmp/bench_vision_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0 || blocks < 1 || reps < 1) return fprintf(stderr, "bench_vision: bad arguments or no temp file\n"), 2;
    close(fd);
    double t0 = now();
    if (!(g4 ? write_g4(path, blocks) : write_file(path, blocks, mtype))) return unlink(path), 1;
    fprintf(stderr, "wrote %s (%d blocks, %s matrices) in %.1f s\n", path, blocks, gm_type_name(mtype), now() - t0);
    gm_error err = {0};
    gm_vision *v = NULL;
    const gm_vision_options o = {.n_threads = threads};
    t0 = now();
    gm_status st = gm_vision_open(path, &o, &v, &err);
    unlink(path); /* the map keeps it alive */
    if (st) return fprintf(stderr, "bench_vision: %s\n", err.msg), 1;
    printf("open: %.2f s\n", now() - t0);
    const int side = g4 ? S4 : S, rows = g4 ? (S4 / 48) * (S4 / 48) : 256;
    float *img = malloc(sizeof(float) * 3 * side * side), *out = malloc(sizeof(float) * rows * PD);
    uint64_t s = 42;
    fill(img, (size_t)3 * side * side, 1.0f, &s);
    for (int r = 0; r < reps && img && out; r++) {
        t0 = now();
        const double c0 = cpu_now();
        st = g4 ? gm_vision_encode_chw(v, img, side, side, out, &err) : gm_vision_encode(v, img, out, &err);
        if (st) return fprintf(stderr, "bench_vision: %s\n", err.msg), 1;
        const double dt = now() - t0;
        printf("encode %d: %.2f s (%d blocks: %.3f s per block; 27 blocks ~ %.1f s), out[0] = %g\n", r, dt, blocks,
               dt / blocks, dt / blocks * 27, out[0]);
        printf("cpu %d: %.3f s\n", r, cpu_now() - c0);
    }
    FILE *f = argc > 5 && out ? fopen(argv[5], "wb") : NULL;
    if (f) fwrite(out, sizeof(float), (size_t)rows * PD, f), fclose(f);
    free(img), free(out);
    gm_vision_free(v);
    return 0;
}
