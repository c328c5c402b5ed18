/* tools/cmd_inspect.c — `gemma inspect [FILE_OR_FOLDER] [--json] [--mtp]`: architecture, config,
 * tokenizer summary, tensor table and totals of a GGUF file or a Hugging Face folder. Works on
 * the model source directly (gm_source_describe), so it also describes files the engine cannot
 * run: it then prints what it can, reports the config error and exits 1. */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "model/source.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

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
