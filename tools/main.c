/* tools/main.c — the `gemma` command: dispatch to a subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli_util.h"
#include "tools/commands.h"

#ifndef GM_DEFAULT_MODEL
#define GM_DEFAULT_MODEL "models/gemma-3-270m-q4_k_m.gguf"
#endif

const char *gm_cli_default_model(void) {
    const char *env = getenv("GEMMA_MODEL");
    return (env && *env) ? env : GM_DEFAULT_MODEL;
}

/* $GEMMA_REPACK: 0 = no CPU copies of the layer matrices at open, 1 = the Q5_0x16 copies for AVX-512 too,
 * unset = the default (gemma.h, gm_repack). $GEMMA_ISA: scalar / avx2 / avx512 / neon / neondot caps the CPU kernels (never
 * above what the CPU runs; unset or another value: the best it runs). The engines, generators and embedders
 * the commands make leave their isa at AUTO: the model's level. */
gm_model_options gm_cli_model_options(void) {
    const char *env = getenv("GEMMA_REPACK");
    gm_model_options mo = {0};
    if (env && !strcmp(env, "0")) mo.repack = GM_REPACK_OFF;
    else if (env && !strcmp(env, "1")) mo.repack = GM_REPACK_Q5_0X16;
    if (!gm_isa_parse(getenv("GEMMA_ISA"), &mo.isa)) mo.isa = GM_ISA_AUTO;
    return mo;
}

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} command;

/* Subcommands not built yet are left out of the table rather than stubbed. */
static const command COMMANDS[] = {
    {"inspect", cmd_inspect, "describe a model file or folder (architecture, config, tensors)"},
    {"run", cmd_run, "generate a continuation of a prompt, streamed to stdout"},
    {"chat", cmd_chat, "interactive multi-turn chat over stdin (KV cache reused across turns)"},
    {"tokenize", cmd_tokenize, "text (argument or stdin) -> token ids or pieces"},
    {"detokenize", cmd_detokenize, "token ids (arguments or stdin) -> text"},
    {"bench", cmd_bench, "prompt-processing and generation speed (llama-bench style)"},
    {"perplexity", cmd_perplexity, "perplexity of a text; KL divergence against a saved base"},
    {"embed", cmd_embed, "one vector per input text with an embedding model (EmbeddingGemma)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server: continuous batching, prefix cache, streaming, chat page"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: gemma <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(out, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    fprintf(out, "\n`gemma <command> --help` for a command's options. Default model: %s\n",
            gm_cli_default_model());
}

int main(int argc, char **argv) {
    cli_stdout_setup();
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return cli_stdout_finish("help", 0);
    }
    /* every command's output is checked here, once: see cli_stdout_finish */
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name))
            return cli_stdout_finish(COMMANDS[i].name, COMMANDS[i].fn(argc - 1, argv + 1));
    fprintf(stderr, "gemma: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
