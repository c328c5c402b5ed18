/* tools/cmd_inspect.c — `gemma inspect [FILE_OR_FOLDER] [--json] [--mtp]`: architecture, config,
 * tokenizer summary, tensor table and totals of a GGUF file or a Hugging Face folder. The library
 * describes the file without opening the model (gm_model_describe), so it also describes files
 * the engine cannot run: it then prints what it can, reports the config error and exits 1. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "gemma_vision.h"
#include "tools/cli_opts.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

/* ------------------------------------------------------------------ vision encoders (mmproj) */

/* A file gm_vision_open takes: what the encoder is, instead of a text model's config. */
static int describe_vision(const char *path, bool json) {
    gm_error err = {0};
    gm_vision *v = NULL;
    const gm_vision_options o = {.n_threads = 1};
    if (gm_vision_open(path, &o, &v, &err) != GM_OK) {
        fprintf(stderr, "gemma inspect: %s\n", err.msg);
        return 1;
    }
    gm_vision_info i;
    gm_vision_get_info(v, &i);
    gm_vision_free(v);
    if (json) {
        printf("{\"file\": \"%s\", \"kind\": \"vision-encoder\", \"family\": %d, \"projector\": \"%s\", "
               "\"image_size\": %d, \"patch_size\": %d, \"n_layers\": %d, \"n_embd\": %d, \"n_ff\": %d, "
               "\"n_head\": %d, \"n_tokens\": %d, \"embd_dim\": %d, \"activation\": \"%s\"}\n",
               path, i.family, i.projector, i.image_size, i.patch_size, i.n_layers, i.n_embd, i.n_ff, i.n_head,
               i.n_tokens, i.embd_dim, i.activation);
    } else {
        printf("file: %s\nkind: vision encoder (mmproj) for Gemma %d, projector %s\n", path, i.family, i.projector);
        if (i.image_size) printf("  input                  %d x %d pixels, patches of %d\n", i.image_size, i.image_size, i.patch_size);
        else printf("  input                  sized per image, patches of %d\n", i.patch_size);
        printf("  blocks                 %d (width %d, ffn %d, %d heads, %s)\n", i.n_layers, i.n_embd, i.n_ff,
               i.n_head, i.activation);
        printf("  rows per image         %d%s of %d values (the text model's width)\n", i.n_tokens,
               i.image_size ? "" : " at most", i.embd_dim);
        printf("  normalisation          mean %.4g %.4g %.4g, std %.4g %.4g %.4g\n", i.mean[0], i.mean[1], i.mean[2],
               i.std[0], i.std[1], i.std[2]);
    }
    return 0;
}

/* general.architecture "clip": llama.cpp's mmproj files. */
static bool is_mmproj(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    char head[4096];
    const size_t n = fread(head, 1, sizeof head, f);
    fclose(f);
    static const char key[] = "general.architecture";
    if (n < 4 || memcmp(head, "GGUF", 4)) return false;
    for (size_t i = 0; i + sizeof key + 16 <= n; i++)
        if (!memcmp(head + i, key, sizeof key - 1)) return !memcmp(head + i + sizeof key - 1 + 4 + 8, "clip", 4);
    return false;
}

/* `inspect --devices`: the Vulkan devices, their limits and whether the backend can use them */
static int describe_devices(bool json) {
    gm_gpu_device d[16];
    int n = 0;
    gm_error err = {0};
    if (gm_gpu_devices(d, 16, &n, &err)) {
        fprintf(stderr, "gemma inspect: %s\n", err.msg);
        return 1;
    }
    if (json) printf("{\"devices\":[");
    for (int i = 0; i < n && i < 16; i++) {
        if (json) {
            printf("%s{\"index\":%d,\"name\":\"%s\",\"type\":\"%s\",\"vulkan\":\"%s\",\"memory_bytes\":%llu,"
                   "\"max_alloc_bytes\":%llu,\"max_storage_buffer_range\":%llu,\"shared_memory\":%u,\"subgroup\":%u,"
                   "\"usable\":%s,\"missing\":\"%s\"}", i ? "," : "", i, d[i].name, d[i].type, d[i].api,
                   (unsigned long long)d[i].memory_bytes, (unsigned long long)d[i].max_alloc_bytes,
                   (unsigned long long)d[i].max_storage_range, d[i].shared_memory, d[i].subgroup,
                   d[i].usable ? "true" : "false", d[i].missing);
            continue;
        }
        printf("device %d: %s\n", i, d[i].name);
        printf("  type                   %s%s\n", d[i].type, d[i].gpu ? "" : " (not a GPU: `--backend auto` skips it)");
        printf("  Vulkan                 %s\n", d[i].api);
        printf("  device memory          %.1f GiB (largest allocation %.1f GiB)\n", d[i].memory_bytes / 1073741824.0,
               d[i].max_alloc_bytes / 1073741824.0);
        printf("  storage buffer range   %.0f MiB\n", d[i].max_storage_range / 1048576.0);
        printf("  shared memory          %u KiB, subgroup %u\n", d[i].shared_memory / 1024, d[i].subgroup);
        printf("  usable                 %s%s\n", d[i].usable ? "yes" : "no: lacks ", d[i].missing);
    }
    if (json) printf("]}\n");
    else if (!n) printf("no Vulkan device\n");
    return 0;
}

/* ------------------------------------------------------------------ command */

int cmd_inspect(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(CLI_INSPECT, argc, argv, &a);
    if (rc != CLI_GO) return rc;
    if (a.n_pos && a.model) { /* -m and FILE_OR_FOLDER say the same thing: one of them */
        fprintf(stderr, "gemma inspect: unexpected argument '%s'\n", a.pos[0]);
        cli_usage_hint(CLI_INSPECT);
        cli_args_free(&a);
        return 2;
    }
    const char *path = a.n_pos ? a.pos[0] : a.model ? a.model : gm_cli_default_model();
    gm_error err = {0};
    if (a.devices) rc = describe_devices(a.json);
    else if (is_mmproj(path)) rc = describe_vision(path, a.json);
    else if (gm_model_describe(path, a.json, a.mtp, stdout, &err) == GM_OK) rc = 0;
    else { /* a write error is main()'s to report */
        if (cli_stdout_flush()) fprintf(stderr, "gemma inspect: %s\n", err.msg);
        rc = 1;
    }
    cli_args_free(&a);
    return rc;
}
