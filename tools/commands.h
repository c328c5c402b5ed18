/* tools/commands.h — one function per `gemma` subcommand (tools/cmd_*.c). Each takes the
 * arguments after the subcommand name and returns the process exit status. */
#ifndef GM_TOOLS_COMMANDS_H
#define GM_TOOLS_COMMANDS_H

#include "gemma.h"

/* The model used when -m is not given: $GEMMA_MODEL, else the build's default. */
const char *gm_cli_default_model(void);
/* The model options the environment asks for ($GEMMA_REPACK). */
gm_model_options gm_cli_model_options(void);

int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_embed(int argc, char **argv);

#endif
