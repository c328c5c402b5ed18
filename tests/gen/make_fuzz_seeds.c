/* tests/gen/make_fuzz_seeds.c — writes the fuzzers' seed corpora (committed under fuzz/corpus/):
 * small valid GGUF files (tiny Gemma 2 / 3 models, every metadata type) and safetensors files.
 * Build and run from the repository root after a normal build in BUILD:
 *   cc -std=c11 -D_GNU_SOURCE -Iinclude -I. -Itests tests/gen/make_fuzz_seeds.c \
 *      BUILD/libgemma_testsupport.a BUILD/libgemma.a -lcjson -lm -lpthread -o /tmp/seeds && /tmp/seeds
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support/gguf_writer.h"
#include "support/tiny_model.h"

static void small(tm_options *o, const char *arch) {
    tm_options_default(o, arch);
    o->n_layers = 1;
    o->d_model = 32;
    o->n_heads = 2;
    o->n_kv_heads = 1;
    o->head_dim = 16;
    o->d_ff = 64;
    o->weight_type = 8; /* Q8_0 */
    o->embd_type = 8;
}

static void copy(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    int c;
    while (a && b && (c = fgetc(a)) != EOF) fputc(c, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

int main(void) {
    char err[256];
    mkdir("fuzz/corpus", 0755);
    mkdir("fuzz/corpus/fuzz_gguf", 0755);
    mkdir("fuzz/corpus/fuzz_safetensors", 0755);
    tm_options o;
    small(&o, "gemma3");
    o.add_mtp = true;
    if (!tm_write_gguf(&o, "fuzz/corpus/fuzz_gguf/tiny_gemma3.gguf", err, sizeof err)) return puts(err), 1;
    small(&o, "gemma2");
    o.weight_type = 1; /* F16 */
    mkdir("fuzz/corpus/fuzz_model_config", 0755);
    if (!tm_write_gguf(&o, "fuzz/corpus/fuzz_model_config/tiny_gemma2.gguf", err, sizeof err)) return puts(err), 1;

    small(&o, "gemma");
    if (!tm_write_gguf(&o, "fuzz/corpus/fuzz_model_config/tiny_gemma.gguf", err, sizeof err)) return puts(err), 1;
    copy("fuzz/corpus/fuzz_gguf/tiny_gemma3.gguf", "fuzz/corpus/fuzz_model_config/tiny_gemma3.gguf");

    gw_writer *w = gw_new();
    gw_set_version(w, 2);
    gw_set_alignment(w, 64);
    gw_add_u8(w, "a.u8", 1);
    gw_add_i8(w, "a.i8", -1);
    gw_add_u16(w, "a.u16", 2);
    gw_add_i16(w, "a.i16", -2);
    gw_add_i32(w, "a.i32", -3);
    gw_add_u64(w, "a.u64", 4);
    gw_add_i64(w, "a.i64", -4);
    gw_add_f32(w, "a.f32", 0.5f);
    gw_add_f64(w, "a.f64", 0.25);
    gw_add_bool(w, "a.bool", true);
    gw_add_str(w, "a.str", "text");
    const char *strs[2] = {"x", "yz"};
    gw_add_arr_str(w, "a.strs", 2, strs);
    gw_buf b = {0};
    gw_buf_u32(&b, 9);
    gw_buf_u64(&b, 1);
    gw_buf_u32(&b, 8);
    gw_buf_u64(&b, 1);
    gw_buf_str(&b, "nested");
    gw_add_raw(w, "a.nested", 9, b.p, b.n);
    gw_buf_free(&b);
    float v[256];
    for (int i = 0; i < 256; i++) v[i] = (float)(i % 17) - 8.0f;
    int64_t ne[1] = {256};
    const int types[] = {0, 1, 30, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", types[i]);
        if (!gw_add_tensor_f32(w, name, types[i], 1, ne, v)) return puts(gw_error(w)), 1;
    }
    if (!gw_write_file(w, "fuzz/corpus/fuzz_gguf/all_types_v2.gguf")) return puts(gw_error(w)), 1;
    gw_free(w);

    small(&o, "gemma3");
    o.d_model = 16;
    o.n_heads = 1;
    o.d_ff = 16;
    o.head_dim = 8;
    tm_hf_options h = {30, 1, true}; /* BF16, one file, multimodal names */
    if (!tm_write_hf(&o, &h, "/tmp/h1_seed_hf", err, sizeof err)) return puts(err), 1;
    copy("/tmp/h1_seed_hf/model.safetensors", "fuzz/corpus/fuzz_safetensors/tiny_bf16.safetensors");
    static const char hdr[] = "{\"__metadata__\":{\"format\":\"pt\"},"
                              "\"a\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
                              "\"b\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[16,20]},"
                              "\"c\":{\"dtype\":\"F16\",\"shape\":[],\"data_offsets\":[20,22]}}";
    FILE *f = fopen("fuzz/corpus/fuzz_safetensors/small.safetensors", "wb");
    uint64_t n = sizeof hdr - 1;
    fwrite(&n, 8, 1, f);
    fwrite(hdr, 1, n, f);
    for (int i = 0; i < 22; i++) fputc(i, f);
    fclose(f);
    return 0;
}
