/* tools/cli_opts.c — the option table of every `gemma` subcommand, its parser and the --help it prints
 * (see cli_opts.h). */
#include "tools/cli_opts.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli_media.h"
#include "tools/cli_util.h"
#include "tools/commands.h"

/* perplexity's text when -f is not given */
#define CLI_PPL_TEXT "/usr/share/common-licenses/GPL-3"

/* ---------------------------------------------------------------- the table */

/* What an option's value is, and so how it is read and which type its field has (the AT_ macros below
 * check the field's type at compile time). */
typedef enum cli_kind {
    K_FLAG,    /* no value: the bool becomes true */
    K_UNFLAG,  /* no value: the bool becomes false */
    K_INT,     /* int in [lo, hi] */
    K_FLOAT,   /* a finite float */
    K_U64,     /* a non-negative uint64_t */
    K_STR,     /* const char *, lo .. hi bytes (hi 0: any length) */
    K_STRS,    /* cli_strs: repeatable, each lo bytes or more, at most hi values (hi 0: any number) */
    K_INTS,    /* cli_ints: a comma-separated list of ints in [lo, hi] */
    K_MIB,     /* size_t bytes from a count of MiB in [lo, hi] */
    K_KV_TYPE, /* gm_kv_dtype: f32, f16 */
    K_BACKEND, /* gm_backend_kind: gm_backend_kind_parse's names */
    K_CHOICE,  /* const char *: the text of the choice named (the choices list) */
} cli_kind;

/* K_CHOICE's values: a name on the command line and the text the field gets. */
typedef struct cli_choice {
    const char *name, *text;
} cli_choice;

typedef struct cli_opt {
    const char *flag, *alias; /* the spellings ("-t", "--threads"); either may be NULL */
    const char *arg;          /* the value's name in the help; NULL for K_FLAG / K_UNFLAG */
    cli_kind kind;
    size_t at;                /* offsetof(cli_args, field) */
    long lo, hi;
    unsigned cmds;            /* the cli_cmd bits that accept it */
    const char *help;         /* '\n' starts an indented line; {model}, {cores}, ... are filled in (expand) */
    const cli_choice *choices; /* K_CHOICE, ended by a NULL name */
} cli_opt;

/* The field's offset, refused at compile time unless the field has type T. */
#define AT(T, f) (offsetof(cli_args, f) + 0 * sizeof(_Generic(((cli_args *)0)->f, T: 1)))
#define FLAG(f) NULL, K_FLAG, AT(bool, f), 0, 0
#define UNFLAG(f) NULL, K_UNFLAG, AT(bool, f), 0, 0
#define INT(arg, f, lo, hi) arg, K_INT, AT(int, f), lo, hi
#define FLOAT(arg, f) arg, K_FLOAT, AT(float, f), 0, 0
#define U64(arg, f) arg, K_U64, AT(uint64_t, f), 0, 0
#define STR(arg, f, lo, hi) arg, K_STR, AT(const char *, f), lo, hi
#define STRS(arg, f, lo, hi) arg, K_STRS, AT(cli_strs, f), lo, hi
#define INTS(arg, f, lo, hi) arg, K_INTS, AT(cli_ints, f), lo, hi
#define MIB(arg, f, lo, hi) arg, K_MIB, AT(size_t, f), lo, hi
#define KV_TYPE(f) "f32|f16", K_KV_TYPE, AT(gm_kv_dtype, f), 0, 0
#define BACKEND(f) "cpu|vulkan|auto|reference", K_BACKEND, AT(gm_backend_kind, f), 0, 0
#define CHOICE(arg, f) arg, K_CHOICE, AT(const char *, f), 0, 0

enum {
    RUN = CLI_RUN, CHAT = CLI_CHAT, SERVE = CLI_SERVE, BENCH = CLI_BENCH, PPL = CLI_PPL, EMBED = CLI_EMBED,
    TOKENIZE = CLI_TOKENIZE, DETOKENIZE = CLI_DETOKENIZE, INSPECT = CLI_INSPECT,
    GEN = RUN | CHAT,                           /* the generating commands */
    SPEC = RUN | CHAT | SERVE,                  /* speculation and images */
    ALL = (CLI_INSPECT << 1) - 1,
};

enum { MIB_MAX = 1 << 20, MAX_TOPK = 1024 };

/* EmbeddingGemma's prompt names (its model card / config_sentence_transformers.json) */
static const cli_choice EMBED_TASKS[] = {
    {"query", "task: search result | query: "},
    {"document", "title: none | text: "},
    {"qa", "task: question answering | query: "},
    {"fact", "task: fact checking | query: "},
    {"classification", "task: classification | query: "},
    {"clustering", "task: clustering | query: "},
    {"similarity", "task: sentence similarity | query: "},
    {"code", "task: code retrieval | query: "},
    {NULL, NULL},
};
static const cli_choice PREFIX_SCOPES[] = {{"global", "global"}, {"key", "key"}, {NULL, NULL}};

/* Each option once. A spelling appears in several rows only where it means something else in another
 * command (bench's -p is a token count, run's a prompt): the rows' commands never overlap (cli_opts_check).
 * A command's --help lists its rows in this order. */
static const cli_opt OPTS[] = {
    /* the model, the inputs */
    {"-m", "--model", STR("PATH", model, 0, 0), ALL, "model (.gguf or HF folder; default {model})", NULL},
    {"-p", "--prompt", STR("TEXT", prompt, 0, 0), RUN, "the prompt (special tokens such as <start_of_turn> are parsed)", NULL},
    {"-f", "--file", STR("FILE", file, 0, 0), RUN, "read the prompt from FILE", NULL},
    {"-p", "--prompt", STRS("TEXT", prompts, 0, 0), EMBED,
     "an input (repeatable); without -p: each non-empty line of -f FILE, else of stdin", NULL},
    {"-f", "--file", STR("FILE", file, 0, 0), EMBED, "the inputs, one per non-empty line (when no -p is given)", NULL},
    {"-f", NULL, STR("TEXT", file, 0, 0), PPL, "UTF-8 text to score (default " CLI_PPL_TEXT ")", NULL},
    {"-s", "--system", STR("TEXT", system, 0, 0), CHAT, "system prompt (folded into the first user turn)", NULL},
    {"--chat", NULL, FLAG(chat), RUN, "wrap the prompt in the model's chat template (one user turn)", NULL},
    {"--no-bos", NULL, FLAG(no_bos), RUN | TOKENIZE, "do not prepend <bos>", NULL},
    {"--truncate", NULL, FLAG(truncate), RUN,
     "keep <bos> and the last tokens of a prompt longer than the context (default: refuse)", NULL},
    {"--image", NULL, STRS("PATH", images, 0, CLI_MAX_IMAGES), RUN,
     "an image for the prompt (PNG, JPEG, WebP; up to {max_images}; needs --mmproj; implies --chat):\n"
     "at each <__media__> in the prompt, in order, or all before the text", NULL},
    /* how much, with what */
    {"-n", "--n-predict", INT("N", n_predict, 0, INT_MAX), RUN, "tokens to generate (default 64)", NULL},
    {"-n", "--n-predict", INT("N", n_predict, 0, INT_MAX), CHAT, "at most N tokens per reply (default 512)", NULL},
    {"-t", "--threads", INT("N", threads, 1, 1024), GEN | SERVE | EMBED | PPL,
     "compute threads (default: the physical cores, {cores})", NULL},
    {"-c", "--ctx-size", INT("N", n_ctx, 0, INT_MAX), GEN, "context size (default: the model's, capped at {max_ctx})", NULL},
    {"-c", "--ctx", INT("N", n_ctx, 16, MIB_MAX), SERVE, "context per sequence, prompt + output (default 4096)", NULL},
    {"-c", "--ctx", INT("N", n_ctx, 1, MIB_MAX), EMBED,
     "longest input in tokens (default: the model's context, at most {max_ctx})", NULL},
    {"-c", NULL, INT("CTX", n_ctx, 8, MIB_MAX), PPL, "tokens per chunk (default 512); the second half of each chunk is scored", NULL},
    {"--kv-type", NULL, KV_TYPE(kv_type), GEN | SERVE | BENCH | PPL, "KV cache storage (default f32)", NULL},
    {"--kv-mem", NULL, MIB("MIB", kv_mem, 1, MIB_MAX), GEN | SERVE | BENCH,
     "KV cache budget (default: every sequence's whole context, every layer)", NULL},
    {"--backend", NULL, BACKEND(backend), GEN | PPL | BENCH | EMBED | SERVE,
     "what runs the model (default cpu; vulkan: a Vulkan device, see\n`gemma inspect --devices`; auto: a GPU when one can run it, else\n"
     "the CPU; reference: plain loops in double, one thread, very slow:\nfor checking numbers)",
     NULL},
    {"--device", NULL, INT("N", device, 0, 63), GEN | PPL | BENCH | EMBED | SERVE,
     "the Vulkan device (default: the first GPU, else the first device)", NULL},
    {"--gpu-validate", NULL, FLAG(gpu_validate), GEN | PPL | BENCH | EMBED | SERVE,
     "Vulkan: the Khronos validation layer on; its errors fail the run", NULL},
    {"--naive", NULL, FLAG(naive), RUN, "recompute the whole history for every token (reference path; slow)", NULL},
    {"--ignore-eos", NULL, FLAG(ignore_eos), GEN, "keep generating past <eos> / <end_of_turn>", NULL},
    /* sampling */
    {"--temp", NULL, FLOAT("T", s.temperature), GEN, "temperature (default 0: greedy)", NULL},
    {"--top-k", NULL, INT("K", s.top_k, INT_MIN, INT_MAX), GEN, "sample among the K likeliest tokens (default 0: off)", NULL},
    {"--top-p", NULL, FLOAT("P", s.top_p), GEN, "nucleus sampling (default 1: off)", NULL},
    {"--min-p", NULL, FLOAT("M", s.min_p), GEN, "drop tokens below M x the best one's probability (default 0: off)", NULL},
    {"--repeat-penalty", NULL, FLOAT("R", s.repeat_penalty), GEN, "penalty of recent tokens (default 1: off)", NULL},
    {"--repeat-last-n", NULL, INT("N", s.repeat_last_n, INT_MIN, INT_MAX), GEN,
     "window of the penalties (default 64; -1: the whole history)", NULL},
    {"--frequency-penalty", NULL, FLOAT("F", s.frequency_penalty), GEN, "logit -= F x count (default 0)", NULL},
    {"--presence-penalty", NULL, FLOAT("P", s.presence_penalty), GEN, "logit -= P if the token occurred (default 0)", NULL},
    {"--seed", NULL, U64("S", s.seed), GEN, "sampling seed (default 0)", NULL},
    /* structured output */
    {"--grammar-file", NULL, STR("F", grammar_file, 0, 0), RUN,
     "constrain the output to a GBNF grammar (llama.cpp's syntax; start rule root)", NULL},
    {"--json-schema", NULL, STR("F", schema_file, 0, 0), RUN, "constrain the output to JSON valid under the JSON schema in F",
     NULL},
    {"--json", NULL, FLAG(json), RUN, "constrain the output to a JSON object", NULL},
    /* speculation, images */
    {"--lookup", NULL, FLAG(lookup), SPEC,
     "speculative decoding by prompt lookup: an n-gram that ends the text and\n"
     "occurred earlier in it proposes what followed; the model checks the\n"
     "proposals in one pass (greedy output unchanged, sampling distribution kept;\n"
     "with a grammar too: the model's tokens are chosen under the grammar)", NULL},
    {"--draft-model", NULL, STR("PATH", draft_model, 0, 0), SPEC,
     "speculative decoding with a smaller model of the same vocabulary drafting", NULL},
    {"--mtp", NULL, STR("PATH", mtp_path, 0, 0), SPEC,
     "speculative decoding with Gemma 4's MTP assistant (a gemma4-assistant GGUF of\n"
     "the model): it drafts from the model's own cache and hidden state", NULL},
    {"--eagle3", NULL, STR("PATH", eagle3_path, 0, 0), SPEC,
     "speculative decoding with an EAGLE-3 head of the model (an eagle3 GGUF): it drafts\n"
     "from three of the model's hidden states (run and chat; serve: not yet)", NULL},
    {"--draft-max", NULL, INT("K", draft_max, 1, GM_SPEC_MAX_K), SPEC,
     "most tokens proposed per pass, 1..{spec_k} (default 8; k adapts below it)", NULL},
    {"--mmproj", NULL, STR("PATH", mmproj, 0, 0), SPEC,
     "the vision encoder for images (a llama.cpp mmproj GGUF of the model)", NULL},
    {"-v", "--verbose", FLAG(verbose), GEN, "verbose (with speculation: passes, acceptance rate, tokens per pass)", NULL},
    {"-v", "--verbose", FLAG(verbose), BENCH, "per test, what a GPU backend submitted: command buffers recorded and\n"
     "replayed, dispatches", NULL},
    /* serve */
    {"--alias", NULL, STR("NAME", srv.model_name, 1, 0), SERVE, "the model id reported and echoed (default: the file name)", NULL},
    {"--host", NULL, STR("ADDR", srv.host, 1, 0), SERVE,
     "address to listen on (default 127.0.0.1: this machine only;\n0.0.0.0 or :: opens it to the network — set --api-key then)",
     NULL},
    {"--port", NULL, INT("N", srv.port, 0, 65535), SERVE, "TCP port (default 8080; 0 = any free port, printed at start)", NULL},
    {"-np", "--parallel", INT("N", srv.parallel, 1, 64), SERVE,
     "sequences generating at once; a request with n = k takes k (default 4)", NULL},
    {"--queue", NULL, INT("N", srv.queue, 0, 4096), SERVE, "requests waiting for a free slot; beyond that 429 (default 64)", NULL},
    {"--chunk", NULL, INT("N", srv.chunk, 1, 4096), SERVE,
     "prompt tokens computed per step beside the decode rows: smaller keeps\n"
     "streams smooth while a long prompt arrives (default 256)", NULL},
    {"--no-prefix-cache", NULL, FLAG(srv.no_prefix_cache), SERVE, "recompute every prompt (no reuse across requests)", NULL},
    {"--api-key", NULL, STRS("KEY", api_keys, 1, 0), SERVE,
     "require 'Authorization: Bearer KEY' (also $GEMMA_API_KEY); repeat it\n"
     "for several tenants' keys; /health and the page stay open", NULL},
    {"--api-key-file", NULL, STRS("PATH", api_key_files, 0, 0), SERVE, "more keys, one per line", NULL},
    {"--prefix-cache-scope", NULL, CHOICE("global|key", prefix_scope), SERVE,
     "key: a request only reuses prompt blocks computed for the same API\n"
     "key (tenants cannot see each other's prompts through cached_tokens\nor timing); default global", PREFIX_SCOPES},
    {"--allowed-hosts", NULL, STR("LIST", srv.allowed_hosts, 1, 0), SERVE,
     "Host names accepted besides loopback ones (comma-separated; * for any).\n"
     "On loopback without a key only loopback names are served (403\n"
     "otherwise: a web page cannot reach it by rebinding its DNS name)", NULL},
    {"--max-conns", NULL, INT("N", srv.max_conns, 1, 1 << 16), SERVE,
     "open connections; requests beyond get 503 (default 512)", NULL},
    {"--max-conns-per-ip", NULL, INT("N", srv.max_conns_per_ip, 0, 1 << 16), SERVE,
     "connections from one address, 0 = no limit (default 128; behind a\n"
     "proxy every client has the proxy's address: raise it or use 0)", NULL},
    {"--request-timeout", NULL, INT("S", srv.request_timeout, 0, 3600), SERVE,
     "seconds to receive a whole request, headers and body (default 10)\n"
     "(a kept-alive connection has as long for its next request)", NULL},
    {"--idle-timeout", NULL, INT("S", srv.idle_timeout, 1, 3600), SERVE,
     "seconds a client may leave a response unread before it is dropped\n(default 60)", NULL},
    {"--cors", NULL, STR("ORIGIN", srv.cors, 1, 0), SERVE,
     "let pages from ORIGIN (or *) call the API from a browser (CORS);\ndefault: none, only the page served here", NULL},
    {"--max-body", NULL, INT("BYTES", max_body, 1024, 1 << 30), SERVE,
     "largest request body (default: what the longest prompt the context\nholds can take as JSON, at least 1 MiB; larger: 413)",
     NULL},
    {"--max-prompt", NULL, INT("N", srv.max_prompt, 1, MIB_MAX), SERVE,
     "most prompt tokens a request may have (default: the context - 1)", NULL},
    {"--max-tokens", NULL, INT("N", srv.max_tokens, 1, MIB_MAX), SERVE,
     "largest max_tokens a request may ask (default: the context)", NULL},
    {"--quiet", NULL, FLAG(srv.quiet), SERVE, "no request log (nor libmicrohttpd's) on stderr", NULL},
    {"--replica-id", NULL, STR("ID", srv.replica_id, 1, 99), SERVE,
     "this server's name behind a load balancer: in /health, /metrics\n"
     "(gemma_replica_info), the X-Gemma-Replica header and\nsystem_fingerprint (default: host name:port)", NULL},
    {"--drain-timeout", NULL, INT("S", srv.drain_timeout, 0, 86400), SERVE,
     "on SIGTERM, seconds running requests may take to finish while\n"
     "/health and new requests get 503 (default 30; 0: stop at once)", NULL},
    {"--media-path", NULL, STR("DIR", srv.media_path, 0, 0), SERVE, "also read file:// image URLs, only from files under DIR",
     NULL},
    {"--max-images", NULL, INT("N", srv.max_images, 1, 64), SERVE, "images per request (default 8)", NULL},
    {"--image-max-pixels", NULL, INT("N", image_max_pixels, 1, 1 << 30), SERVE,
     "largest decoded image, in pixels (default 40000000)", NULL},
    {"--image-cache-mb", NULL, MIB("N", srv.image_cache_bytes, 0, MIB_MAX), SERVE,
     "recent images' encoder rows kept for repeats (default 256)", NULL},
    {"--responses-store", NULL, INT("N", srv.responses_store, 0, 1 << 20), SERVE,
     "/v1/responses kept in memory for previous_response_id, per API key\n"
     "(default 256; the oldest go first; 0: none kept, previous_response_id\nis a 400)", NULL},
    {"--responses-store-mb", NULL, MIB("N", srv.responses_store_bytes, 0, MIB_MAX), SERVE,
     "their total size (default 64)", NULL},
    /* bench */
    {"-p", NULL, INT("N", pp, 0, MIB_MAX), BENCH, "prompt-processing test of N tokens (default 512; 0 = skip)", NULL},
    {"-n", NULL, INT("N", tg, 0, MIB_MAX), BENCH, "generation test of N tokens (default 128; 0 = skip)", NULL},
    {"-t", NULL, INTS("LIST", thread_list, 1, 1024), BENCH, "thread counts, comma-separated (default: the physical cores, {cores})",
     NULL},
    {"-s", NULL, INTS("LIST", seq_list, 1, 256), BENCH,
     "sequences decoding together in the generation test, comma-separated (default 1):\naggregate tokens/s of all of them",
     NULL},
    {"-r", NULL, INT("REPS", reps, 1, CLI_MAX_REPS), BENCH, "repetitions per test (default 3)", NULL},
    /* perplexity */
    {"--chunks", NULL, INT("N", max_chunks, 1, 1 << 30), PPL, "score at most N chunks", NULL},
    {"--save-logits", NULL, STR("FILE", save_path, 0, 0), PPL, "store each scored position's top-k log-probabilities", NULL},
    {"--kl-divergence-base", NULL, STR("FILE", base_path, 0, 0), PPL,
     "compare with a stored base: KL, top-token agreement, ppl ratio", NULL},
    {"--top-k", NULL, INT("K", topk, 1, MAX_TOPK), PPL, "how many log-probabilities --save-logits stores (default 64)", NULL},
    /* embed */
    {"--task", NULL, CHOICE("NAME", prefix), EMBED, "put EmbeddingGemma's task prefix before every input:", EMBED_TASKS},
    {"--prefix", NULL, STR("STR", prefix, 0, 0), EMBED, "put STR before every input instead", NULL},
    {"--normalize", NULL, FLAG(normalize), EMBED, "scale each vector to unit L2 norm (cosine similarity = dot product)", NULL},
    {"--json", NULL, FLAG(json), EMBED,
     "one JSON object: {\"model\", \"dim\", \"data\": [{\"index\", \"tokens\", \"embedding\"}]}", NULL},
    /* tokenize, detokenize, inspect */
    {"--ids", NULL, UNFLAG(pieces), TOKENIZE, "the ids on one line, space-separated (default)", NULL},
    {"--pieces", NULL, FLAG(pieces), TOKENIZE, "one token per line: id, tab, the piece (control bytes escaped)", NULL},
    {"--no-special", NULL, FLAG(no_special), TOKENIZE, "control-token spellings in the text are plain text", NULL},
    {"--special", NULL, FLAG(special), DETOKENIZE, "write control tokens' text too", NULL},
    {"--json", NULL, FLAG(json), BENCH | INSPECT, "machine-readable output", NULL},
    {"--devices", NULL, FLAG(devices), INSPECT, "list the Vulkan devices and their limits", NULL},
    {"--mtp", NULL, FLAG(mtp), INSPECT, "also list MTP / nextn tensors (hidden by default)", NULL},
};

/* ---------------------------------------------------------------- the commands */

/* Where a command takes arguments that are not options. */
typedef enum {
    POS_NONE, /* none: an argument that is not an option is refused */
    POS_REST, /* the first one (or the first after --) and everything after it */
    POS_ANY,  /* any number, between the options; "-5" is one (a number) */
    POS_ONE,  /* at most one, between the options */
} pos_mode;

typedef struct cli_command {
    cli_cmd cmd;
    const char *name;
    pos_mode pos;
    const char *synopsis;      /* after "usage: gemma " */
    const char *intro, *outro; /* before and after the options in --help (may be NULL) */
    void (*defaults)(cli_args *a);
} cli_command;

static void run_defaults(cli_args *a) { a->n_predict = 64; }
static void chat_defaults(cli_args *a) { a->n_predict = 512; }
static void bench_defaults(cli_args *a) { a->pp = 512, a->tg = 128, a->reps = 3; }
static void ppl_defaults(cli_args *a) { a->file = CLI_PPL_TEXT, a->n_ctx = 512, a->topk = 64; }
static void embed_defaults(cli_args *a) { a->prefix = ""; }
static void inspect_defaults(cli_args *a) { a->model = NULL; /* the argument, else gm_cli_default_model() */ }
static void no_defaults(cli_args *a) { (void)a; }

static void serve_defaults(cli_args *a) {
    a->n_ctx = 4096;
    a->prefix_scope = "global";
    a->srv = (srv_options){.host = "127.0.0.1", .port = 8080, .parallel = 4, .queue = 64, .chunk = 256,
                           .max_conns = 512, .max_conns_per_ip = 128, .request_timeout = 10, .idle_timeout = 60,
                           .max_images = 8, .drain_timeout = 30, .image_cache_bytes = (size_t)256 << 20,
                           .responses_store = 256, .responses_store_bytes = (size_t)64 << 20,
                           .max_prompt = -1, .max_tokens = -1};
}

static const cli_command COMMANDS[] = {
    {CLI_RUN, "run", POS_NONE, "run [options] -p PROMPT | -f FILE",
     "Generates a continuation of the prompt, streamed to stdout.", NULL, run_defaults},
    {CLI_CHAT, "chat", POS_NONE, "chat [options]",
     "Reads user turns from stdin, one per line; /reset clears the conversation, /exit quits;\n"
     "/image PATH attaches an image to the next turn (needs --mmproj).", NULL, chat_defaults},
    {CLI_SERVE, "serve", POS_NONE, "serve [-m MODEL] [--host ADDR] [--port N] [options]",
     "An OpenAI-compatible HTTP server with continuous batching and a prefix cache; a chat page at /.\n"
     "Endpoints: POST /v1/chat/completions, POST /v1/completions (stream or not), GET /v1/models,\n"
     "GET /health, GET /metrics (Prometheus), POST /tokenize, POST /detokenize, GET / (chat page).\n"
     "With an embedding model (EmbeddingGemma): POST /v1/embeddings instead of the completions.\n"
     "Ollama's API on the same port (--port 11434 for its clients): /api/chat, /api/generate, /api/tags,\n"
     "/api/show, /api/ps, /api/version, /api/embed; GET / answers \"Ollama is running\" to non-browsers.",
     "--kv-mem is shared by the live sequences and the prefix cache. With --mmproj, chat messages may\n"
     "hold image_url parts (data:image/...;base64 URIs; remote URLs are refused).\n"
     "A request may say \"speculative\": false (or true); requests with logprobs do not speculate.\n"
     "Request fields: messages | prompt, max_tokens, max_completion_tokens, temperature (default 1),\n"
     "top_p, top_k, min_p, presence_penalty, frequency_penalty, repeat_penalty, repeat_last_n, seed,\n"
     "stop (string or list), n (1..8), logprobs, top_logprobs, stream, stream_options.include_usage,\n"
     "ignore_eos (llama-server's: generate past the end of turn; for benchmarks).\n"
     "Chat message contents are text: control-token spellings in them cannot open or close a turn;\n"
     "/v1/completions prompts are raw (control-token texts are parsed, to write one's own template).\n"
     "GET /health: 200 {\"status\":\"ok\"} when ready; 503 with \"loading\" (the model opens while the\n"
     "port already answers), \"draining\" or \"stopping\".\n"
     "SIGTERM: drain (see --drain-timeout), then stop; SIGINT, or a second signal: stop now, ending\n"
     "open streams with an error event. Exit 0 either way.", serve_defaults},
    {CLI_BENCH, "bench", POS_NONE, "bench [options]",
     "Prompt-processing (pp) and generation (tg) speed, llama-bench style: mean and standard deviation\n"
     "of tokens/s; also the model's open time, the time to a first token and the peak RSS.", NULL, bench_defaults},
    {CLI_PPL, "perplexity", POS_NONE, "perplexity [options]",
     "Perplexity of a text as llama-perplexity computes it; KL divergence against a saved base\n"
     "(docs/perplexity.md).", NULL, ppl_defaults},
    {CLI_EMBED, "embed", POS_NONE, "embed [options] [-p TEXT]...",
     "One vector per input with an embedding model (EmbeddingGemma, GGUF arch gemma-embedding):\n"
     "mean of the final hidden states over the tokens, then the model's dense projections.",
     "Output without --json: one line per input, the floats separated by spaces. BOS (and EOS) are\n"
     "added as the model's tokenizer config says.", embed_defaults},
    {CLI_TOKENIZE, "tokenize", POS_REST, "tokenize [options] [TEXT...]",
     "Text (the arguments joined by spaces; stdin when there are none) -> token ids or pieces.", NULL, no_defaults},
    {CLI_DETOKENIZE, "detokenize", POS_ANY, "detokenize [options] [IDS...]",
     "Token ids (separated by spaces and/or commas; stdin when there are none) -> text, as it is.", NULL,
     no_defaults},
    {CLI_INSPECT, "inspect", POS_ONE, "inspect [options] [FILE_OR_FOLDER]",
     "  FILE_OR_FOLDER        a .gguf file, a Hugging Face folder (config.json + safetensors) or a\n"
     "                        .safetensors file beside a config.json (default: {model})", NULL, inspect_defaults},
};

static const cli_command *command(cli_cmd cmd) {
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (COMMANDS[i].cmd == cmd) return &COMMANDS[i];
    abort(); /* every cli_cmd has a row */
}

const char *cli_cmd_name(cli_cmd cmd) { return command(cmd)->name; }

/* ---------------------------------------------------------------- help */

/* The placeholder at *s ("{cores}"), printed and skipped (*s left on its '}'); false for any other text. */
static bool placeholder(FILE *out, const char **s) {
    static const char *const NAMES[] = {"{model}", "{cores}", "{max_ctx}", "{spec_k}", "{max_images}"};
    const int values[] = {0, gm_physical_cores(), GM_DEFAULT_MAX_CTX, GM_SPEC_MAX_K, CLI_MAX_IMAGES};
    for (int i = 0; i < 5; i++) {
        const size_t n = strlen(NAMES[i]);
        if (strncmp(*s, NAMES[i], n)) continue;
        if (i == 0) fputs(gm_cli_default_model(), out);
        else fprintf(out, "%d", values[i]);
        *s += n - 1;
        return true;
    }
    return false;
}

/* s with its placeholders filled in (the values that are not constants of the table), each '\n' starting
 * a line indented by indent spaces. */
static void expand(FILE *out, const char *s, int indent) {
    for (; *s; s++) {
        if (*s == '{' && placeholder(out, &s)) continue;
        if (*s == '\n') fprintf(out, "\n%*s", indent, "");
        else fputc(*s, out);
    }
}

/* "  -t, --threads N", padded to the help column (or on a line of its own when longer). */
static void print_opt(FILE *out, const cli_opt *o) {
    int n = fprintf(out, "  %s%s%s%s%s", o->flag ? o->flag : "", o->flag && o->alias ? ", " : "",
                    o->alias ? o->alias : "", o->arg ? " " : "", o->arg ? o->arg : "");
    if (n < 23) fprintf(out, "%*s", 24 - n, "");
    else fprintf(out, "\n%24s", "");
    expand(out, o->help, 24);
    fputc('\n', out);
    for (const cli_choice *c = o->choices; c && c->name && strcmp(c->name, c->text); c++)
        fprintf(out, "%26s%-14s \"%s\"\n", "", c->name, c->text);
}

static void print_help(FILE *out, const cli_command *c) {
    fprintf(out, "usage: gemma %s\n", c->synopsis);
    if (c->intro) {
        expand(out, c->intro, 0);
        fputc('\n', out);
    }
    fprintf(out, "options:\n");
    for (size_t i = 0; i < sizeof OPTS / sizeof OPTS[0]; i++)
        if (OPTS[i].cmds & c->cmd) print_opt(out, &OPTS[i]);
    fprintf(out, "  -h, --help            this help\n");
    if (c->outro) {
        expand(out, c->outro, 0);
        fputc('\n', out);
    }
}

void cli_usage_hint(cli_cmd cmd) {
    const cli_command *c = command(cmd);
    fprintf(stderr, "usage: gemma %s   (gemma %s --help lists the options)\n", c->synopsis, c->name);
}

/* ---------------------------------------------------------------- values */

/* A finite number. Overflow (1e39: strtof's HUGE_VALF), inf and nan are refused; an underflow
 * (1e-50: ERANGE with 0 or a subnormal) is accepted as that tiny value, which the range checks of
 * gm_sampling_validate then judge (a tiny temperature samples greedily). */
static bool read_float(const char *v, float *out) {
    char *end;
    float x = strtof(v, &end);
    if (end == v || *end || !isfinite(x)) return false;
    *out = x;
    return true;
}

static bool read_u64(const char *v, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-') return false;
    *out = x;
    return true;
}

/* "1,2,4": each in [lo, hi], at most CLI_MAX_INTS (empty items are skipped; none at all is refused). */
static bool read_ints(const char *v, long lo, long hi, cli_ints *out) {
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", v) >= (int)sizeof buf) return false;
    out->n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (out->n >= CLI_MAX_INTS || !cli_parse_int(tok, lo, hi, &out->v[out->n])) return false;
        out->n++;
    }
    return out->n > 0;
}

static bool push_str(cli_strs *l, const char *v, long min_len, long most) {
    if (strlen(v) < (size_t)min_len || (most && l->n >= most)) return false;
    const char **p = realloc(l->v, (size_t)(l->n + 1) * sizeof *p);
    if (!p) return false;
    l->v = p;
    l->v[l->n++] = v;
    return true;
}

static bool read_choice(const cli_choice *c, const char *v, const char **out) {
    for (; c->name; c++)
        if (!strcmp(v, c->name)) return *out = c->text, true;
    return false;
}

static bool set_value(const cli_opt *o, const char *v, cli_args *a) {
    void *f = (char *)a + o->at;
    const size_t len = strlen(v);
    switch (o->kind) {
    case K_INT: return cli_parse_int(v, o->lo, o->hi, f);
    case K_FLOAT: return read_float(v, f);
    case K_U64: return read_u64(v, f);
    case K_STR:
        if (len < (size_t)o->lo || (o->hi && len > (size_t)o->hi)) return false;
        return *(const char **)f = v, true;
    case K_STRS: return push_str(f, v, o->lo, o->hi);
    case K_INTS: return read_ints(v, o->lo, o->hi, f);
    case K_MIB: {
        int mib;
        if (!cli_parse_int(v, o->lo, o->hi, &mib)) return false;
        return *(size_t *)f = (size_t)mib << 20, true;
    }
    case K_KV_TYPE: return cli_parse_kv_type(v, f);
    case K_BACKEND: return gm_backend_kind_parse(v, f);
    case K_CHOICE: return read_choice(o->choices, v, f);
    default: return false; /* flags take no value */
    }
}

/* What a bad value should have been: "an integer in [1, 1024]". */
static void print_expected(FILE *out, const cli_opt *o) {
    switch (o->kind) {
    case K_INT: fprintf(out, "an integer in [%ld, %ld]", o->lo, o->hi); break;
    case K_FLOAT: fprintf(out, "a finite number"); break;
    case K_U64: fprintf(out, "a non-negative integer"); break;
    case K_STR: o->hi ? fprintf(out, "%ld to %ld bytes", o->lo, o->hi) : fprintf(out, "a non-empty value"); break;
    case K_STRS:
        fprintf(out, o->lo ? "a non-empty value" : "a value");
        if (o->hi) fprintf(out, ", at most %ld times", o->hi);
        break;
    case K_INTS: fprintf(out, "a comma-separated list of at most %d integers in [%ld, %ld]", CLI_MAX_INTS, o->lo, o->hi); break;
    case K_MIB: fprintf(out, "MiB in [%ld, %ld]", o->lo, o->hi); break;
    case K_KV_TYPE: fprintf(out, "f32 or f16"); break;
    case K_BACKEND: fprintf(out, "cpu or reference"); break;
    case K_CHOICE:
        fprintf(out, "one of");
        for (const cli_choice *c = o->choices; c->name; c++) fprintf(out, "%s %s", c == o->choices ? "" : ",", c->name);
        break;
    default: break;
    }
}

/* ---------------------------------------------------------------- the parser */

static const cli_opt *find_opt(cli_cmd cmd, const char *name) {
    for (size_t i = 0; i < sizeof OPTS / sizeof OPTS[0]; i++) {
        const cli_opt *o = &OPTS[i];
        if ((o->cmds & cmd) && ((o->flag && !strcmp(name, o->flag)) || (o->alias && !strcmp(name, o->alias)))) return o;
    }
    return NULL;
}

static bool is_option(const char *s, pos_mode pos) {
    return s[0] == '-' && s[1] && !(pos == POS_ANY && isdigit((unsigned char)s[1]));
}

static bool push_pos(cli_args *a, char *s) {
    char **p = realloc(a->pos, (size_t)(a->n_pos + 1) * sizeof *p);
    if (!p) return false;
    a->pos = p;
    a->pos[a->n_pos++] = s;
    return true;
}

/* A bad option: the message (fmt with the option's spelling), the usage line, status 2 (a freed). */
static int refuse(const cli_command *c, cli_args *a, const char *fmt, const char *opt) {
    fprintf(stderr, "gemma %s: ", c->name);
    fprintf(stderr, fmt, opt);
    fputc('\n', stderr);
    cli_usage_hint(c->cmd);
    cli_args_free(a);
    return 2;
}

/* A bad value: what it should have been. */
static int refuse_value(const cli_command *c, cli_args *a, const char *opt, const cli_opt *o, const char *v) {
    fprintf(stderr, "gemma %s: %s expects ", c->name, opt);
    print_expected(stderr, o);
    fprintf(stderr, ", got '%s'\n", v);
    cli_usage_hint(c->cmd);
    cli_args_free(a);
    return 2;
}

/* An argument that is not an option at argv[*i]: taken as the command's pos_mode says. */
static int take_positional(const cli_command *c, int argc, char **argv, int *i, cli_args *a) {
    if (c->pos == POS_NONE) return refuse(c, a, "unknown option '%s'", argv[*i]);
    if (c->pos == POS_ONE && a->n_pos == 1) return refuse(c, a, "unexpected argument '%s'", argv[*i]);
    const int last = c->pos == POS_REST ? argc - 1 : *i;
    for (; *i <= last; (*i)++)
        if (!push_pos(a, argv[*i])) return refuse(c, a, "out of memory at '%s'", argv[*i]);
    (*i)--;
    return CLI_GO;
}

/* The option at argv[*i] (and its value, *i moved past it). */
static int take_option(const cli_command *c, int argc, char **argv, int *i, cli_args *a) {
    const char *name = argv[*i];
    const cli_opt *o = find_opt(c->cmd, name);
    if (!o) return refuse(c, a, "unknown option '%s'", name);
    if (o->kind == K_FLAG || o->kind == K_UNFLAG) {
        *(bool *)((char *)a + o->at) = o->kind == K_FLAG;
        return CLI_GO;
    }
    if (*i + 1 >= argc) return refuse(c, a, "%s needs a value", name);
    const char *v = argv[++*i];
    return set_value(o, v, a) ? CLI_GO : refuse_value(c, a, name, o, v);
}

int cli_parse(cli_cmd cmd, int argc, char **argv, cli_args *a) {
    const cli_command *c = command(cmd);
    memset(a, 0, sizeof *a);
    a->model = gm_cli_default_model();
    a->s = gm_sampling_default();
    a->device = -1; /* the library's default (gm_engine_options.device 0) */
    c->defaults(a);
    int rc = CLI_GO;
    for (int i = 1; i < argc && rc == CLI_GO; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
            print_help(stdout, c);
            cli_args_free(a);
            return 0;
        }
        if (c->pos == POS_REST && !strcmp(s, "--")) {
            if (++i < argc) rc = take_positional(c, argc, argv, &i, a);
            break;
        }
        rc = is_option(s, c->pos) ? take_option(c, argc, argv, &i, a) : take_positional(c, argc, argv, &i, a);
    }
    return rc;
}

void cli_args_free(cli_args *a) {
    free(a->images.v);
    free(a->prompts.v);
    free(a->api_keys.v);
    free(a->api_key_files.v);
    free(a->pos);
    a->images = a->prompts = a->api_keys = a->api_key_files = (cli_strs){0};
    a->pos = NULL;
    a->n_pos = 0;
}

static bool same_name(const char *x, const char *y) { return x && y && !strcmp(x, y); }

int cli_opts_check(void) {
    const size_t n = sizeof OPTS / sizeof OPTS[0];
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            const cli_opt *x = &OPTS[i], *y = &OPTS[j];
            if (!(x->cmds & y->cmds)) continue;
            if (same_name(x->flag, y->flag) || same_name(x->flag, y->alias) || same_name(x->alias, y->flag) ||
                same_name(x->alias, y->alias)) {
                fprintf(stderr, "cli_opts: rows %zu and %zu share a spelling in one command\n", i, j);
                bad++;
            }
        }
    return bad;
}
