/* tools/cli_opts.h — the options of every `gemma` subcommand, in one table (cli_opts.c): each option is
 * written once — its spellings, the kind of value it takes, its help line, the commands that accept it and
 * the field of cli_args it fills — and one parser reads argv for all commands and prints their --help from
 * the table. A command parses with cli_parse, then checks what only it knows (combinations of options, files)
 * and maps cli_args to the library's option structs. */
#ifndef GM_TOOLS_CLI_OPTS_H
#define GM_TOOLS_CLI_OPTS_H

#include <stdbool.h>
#include <stddef.h>

#include "gemma.h"
#include "server/server.h"

/* The commands, as bits: an option names those that accept it. */
typedef enum cli_cmd {
    CLI_RUN = 1 << 0,
    CLI_CHAT = 1 << 1,
    CLI_SERVE = 1 << 2,
    CLI_BENCH = 1 << 3,
    CLI_PPL = 1 << 4,
    CLI_EMBED = 1 << 5,
    CLI_TOKENIZE = 1 << 6,
    CLI_DETOKENIZE = 1 << 7,
    CLI_INSPECT = 1 << 8,
} cli_cmd;

enum { CLI_MAX_INTS = 16 };  /* bench's -t and -s lists */
enum { CLI_MAX_REPS = 100 }; /* bench's -r */

typedef struct cli_ints {
    int v[CLI_MAX_INTS];
    int n;
} cli_ints;

/* Values of a repeatable option, pointers into argv (the array is malloc'd: cli_args_free). */
typedef struct cli_strs {
    const char **v;
    int n;
} cli_strs;

/* What the options say, for any command: each command reads the fields its options fill (cli_opts.c
 * says which) and the defaults cli_parse set for it. */
typedef struct cli_args {
    /* shared by several commands */
    const char *model;        /* -m (inspect: NULL unless given) */
    const char *file;         /* -f: run's prompt, embed's inputs, perplexity's text */
    int threads;              /* -t (0: physical cores) */
    int n_ctx;                /* -c */
    size_t kv_mem;            /* --kv-mem, bytes (0: the library's default budget) */
    gm_kv_dtype kv_type;      /* --kv-type */
    gm_backend_kind backend;  /* --backend */
    int device;               /* --device (-1: not given); the options' device is device + 1 */
    bool gpu_validate;        /* --gpu-validate */
    bool devices;             /* inspect --devices */
    bool json;                /* run: constrain the output to a JSON object; bench, embed, inspect: JSON out */
    bool no_bos;              /* run, tokenize */
    /* run and chat (lookup, draft_model, draft_max, mmproj: serve too) */
    const char *prompt, *system, *draft_model, *mtp_path, *eagle3_path, *mmproj, *grammar_file, *schema_file;
    int n_predict, draft_max;
    gm_sampling s;
    bool naive, chat, truncate, ignore_eos, verbose, lookup;
    cli_strs images;          /* run --image */
    /* bench */
    int pp, tg, reps;
    cli_ints thread_list, seq_list;
    /* perplexity */
    const char *save_path, *base_path;
    int max_chunks, topk;
    /* embed */
    cli_strs prompts;         /* -p, repeatable */
    const char *prefix;       /* --prefix, or --task's prefix (the last given wins) */
    bool normalize;
    /* tokenize, detokenize, inspect */
    bool pieces, no_special, special, mtp;
    /* serve: most options go straight into the server's own options */
    srv_options srv;
    cli_strs api_keys, api_key_files;
    const char *prefix_scope; /* "global" or "key" */
    int max_body, image_max_pixels;
    /* the arguments that are not options: tokenize's text, detokenize's ids, inspect's path */
    char **pos;
    int n_pos;
} cli_args;

/* cli_parse's result when the command should go on. */
enum { CLI_GO = -1 };

/* Sets cmd's defaults in a, then reads the options in argv[1..argc). Returns CLI_GO, or the exit status
 * the command returns at once (with a freed): 0 after --help (printed on stdout), 2 after a bad option
 * (an unknown option, a missing or bad value: one line saying what was expected, then the usage line, on
 * stderr). */
int cli_parse(cli_cmd cmd, int argc, char **argv, cli_args *a);
void cli_args_free(cli_args *a);
/* The command's name, as in "gemma NAME". */
const char *cli_cmd_name(cli_cmd cmd);
/* Prints the command's usage line and a pointer to --help on stderr (after a command's own complaint). */
void cli_usage_hint(cli_cmd cmd);

/* For tests: 0 when no command has two options of the same spelling, else the number of clashes
 * (each printed on stderr). */
int cli_opts_check(void);

#endif
