/* tools/cmd_inspect.c — `gemma inspect [FILE_OR_FOLDER] [--json] [--mtp]`: architecture, config,
 * tokenizer summary, tensor table and totals of a GGUF file or a Hugging Face folder. Works on
 * the model source directly (gm_source_describe), so it also describes files the engine cannot
 * run: it then prints what it can, reports the config error and exits 1. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "model/source.h"
#include "gemma_vision.h"
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

/* ------------------------------------------------------------------ command */

static void usage(FILE *out) {
    fprintf(out, "usage: gemma inspect [FILE_OR_FOLDER] [--json] [--mtp]\n"
                 "  FILE_OR_FOLDER  a .gguf file, a Hugging Face folder (config.json + safetensors) or a\n"
                 "                  .safetensors file beside a config.json (default: %s)\n"
                 "  -m PATH         same as FILE_OR_FOLDER\n"
                 "  --json          machine-readable output\n"
                 "  --mtp           also list MTP / nextn tensors (hidden by default)\n",
            gm_cli_default_model());
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, mtp = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = true;
        else if (!strcmp(argv[i], "--mtp")) mtp = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") && i + 1 < argc && !path) path = argv[++i];
        else if (argv[i][0] != '-' && !path) path = argv[i];
        else {
            fprintf(stderr, "gemma inspect: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!path) path = gm_cli_default_model();
    if (is_mmproj(path)) return describe_vision(path, json);
    gm_error err = {0};
    gm_source *s = NULL;
    if (gm_source_open(path, mtp, &s, &err) != GM_OK) {
        fprintf(stderr, "gemma inspect: %s\n", err.msg);
        return 1;
    }
    gm_config c;
    gm_error cerr = {0};
    bool have_cfg = gm_config_load(s, &c, &cerr) == GM_OK;
    gm_status st = gm_source_describe(s, have_cfg ? &c : NULL, cerr.msg, json, stdout, &err);
    gm_source_close(s);
    if (st) {
        if (cli_stdout_flush()) fprintf(stderr, "gemma inspect: %s\n", err.msg); /* else main() reports it */
        return 1;
    }
    if (!have_cfg) {
        fprintf(stderr, "gemma inspect: %s\n", cerr.msg);
        return 1;
    }
    return 0;
}
