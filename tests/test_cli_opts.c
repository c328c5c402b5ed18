/* tests/test_cli_opts.c — the `gemma` commands' option table and its parser (tools/cli_opts.c) without
 * running a command: no spelling means two things in one command; values land in their fields, defaults
 * stay where no option is given; the positional modes (tokenize's text, detokenize's ids, inspect's path);
 * a bad option is status 2. (tests/cli_args.sh checks the messages through the binary.) */
#include <string.h>

#include "support/test.h"
#include "tools/cli_opts.h"
#include "tools/commands.h"

/* cli_opts.c's help names the default model; the binary's main.c defines it. */
const char *gm_cli_default_model(void) { return "default.gguf"; }

#define ARGV(...) (char *[]){"cmd", __VA_ARGS__, NULL}
#define PARSE(cmd, a, ...) cli_parse(cmd, (int)(sizeof ARGV(__VA_ARGS__) / sizeof(char *)) - 1, ARGV(__VA_ARGS__), a)

TEST(no_clashes) { CHECK_EQ_INT(cli_opts_check(), 0); }

TEST(run_values) {
    cli_args a;
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "-p", "hi", "-t", "3", "--temp", "0.5", "--seed", "18446744073709551615",
                       "--image", "a.png", "--image", "b.png", "--kv-type", "f16", "--kv-mem", "2", "-v"), CLI_GO);
    CHECK(!strcmp(a.prompt, "hi") && !strcmp(a.model, "default.gguf"));
    CHECK_EQ_INT(a.threads, 3);
    CHECK_NEAR(a.s.temperature, 0.5, 0);
    CHECK(a.s.seed == UINT64_MAX);
    CHECK(a.images.n == 2 && !strcmp(a.images.v[1], "b.png"));
    CHECK(a.kv_type == GM_KV_DTYPE_F16 && a.kv_mem == (size_t)2 << 20 && a.verbose);
    CHECK_EQ_INT(a.n_predict, 64);          /* run's default */
    CHECK_EQ_INT(a.s.repeat_last_n, 64);    /* gm_sampling_default's */
    cli_args_free(&a);
    CHECK_EQ_INT(PARSE(CLI_CHAT, &a, "-s", "be brief"), CLI_GO);
    CHECK(!strcmp(a.system, "be brief") && a.n_predict == 512);
    cli_args_free(&a);
}

TEST(serve_values) {
    cli_args a;
    CHECK_EQ_INT(PARSE(CLI_SERVE, &a, "--port", "0", "-np", "2", "--api-key", "k1", "--api-key", "k2", "--quiet",
                       "--image-cache-mb", "0", "--prefix-cache-scope", "key"), CLI_GO);
    CHECK(a.srv.port == 0 && a.srv.parallel == 2 && a.srv.quiet && a.srv.image_cache_bytes == 0);
    CHECK(a.api_keys.n == 2 && !strcmp(a.api_keys.v[0], "k1") && !strcmp(a.prefix_scope, "key"));
    CHECK(a.n_ctx == 4096 && a.srv.queue == 64 && !strcmp(a.srv.host, "127.0.0.1") && a.srv.max_prompt == -1);
    cli_args_free(&a);
}

TEST(lists_and_choices) {
    cli_args a;
    CHECK_EQ_INT(PARSE(CLI_BENCH, &a, "-t", "1,2,4", "-s", "8", "-n", "5"), CLI_GO);
    CHECK(a.thread_list.n == 3 && a.thread_list.v[2] == 4 && a.seq_list.n == 1 && a.tg == 5 && a.pp == 512);
    CHECK_EQ_INT(PARSE(CLI_BENCH, &a, "-t", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"), 2);
    CHECK_EQ_INT(PARSE(CLI_EMBED, &a, "--task", "query", "--prefix", "x: "), CLI_GO);
    CHECK(!strcmp(a.prefix, "x: ")); /* the last given wins */
    cli_args_free(&a);
    CHECK_EQ_INT(PARSE(CLI_EMBED, &a, "--prefix", "x: ", "--task", "document", "-p", "a", "-p", ""), CLI_GO);
    CHECK(!strcmp(a.prefix, "title: none | text: ") && a.prompts.n == 2);
    cli_args_free(&a);
}

TEST(positionals) {
    cli_args a;
    CHECK_EQ_INT(PARSE(CLI_TOKENIZE, &a, "--no-bos", "hello", "--ids", "-"), CLI_GO);
    CHECK(a.no_bos && !a.pieces && a.n_pos == 3 && !strcmp(a.pos[1], "--ids"));
    cli_args_free(&a);
    CHECK_EQ_INT(PARSE(CLI_TOKENIZE, &a, "--pieces", "--", "--no-bos"), CLI_GO);
    CHECK(a.pieces && !a.no_bos && a.n_pos == 1);
    cli_args_free(&a);
    CHECK_EQ_INT(PARSE(CLI_DETOKENIZE, &a, "-5", "--special", "7,8"), CLI_GO);
    CHECK(a.special && a.n_pos == 2 && !strcmp(a.pos[0], "-5"));
    cli_args_free(&a);
    CHECK_EQ_INT(PARSE(CLI_INSPECT, &a, "--json", "m.gguf"), CLI_GO);
    CHECK(a.json && a.n_pos == 1 && a.model == NULL);
    cli_args_free(&a);
    CHECK_EQ_INT(PARSE(CLI_INSPECT, &a, "a.gguf", "b.gguf"), 2);
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "stray"), 2);
}

TEST(refusals) {
    cli_args a;
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "-t"), 2);             /* no value */
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "-t", "0"), 2);        /* out of range */
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "-n", "1e3"), 2);      /* not an integer */
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "--temp", "nan"), 2);
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "--seed", "-1"), 2);
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "--backend", "gpu"), 2);
    CHECK_EQ_INT(PARSE(CLI_RUN, &a, "--port", "80"), 2);    /* serve's, not run's */
    CHECK_EQ_INT(PARSE(CLI_SERVE, &a, "--replica-id", ""), 2);
    CHECK_EQ_INT(PARSE(CLI_SERVE, &a, "--alias", ""), 2);
    CHECK_EQ_INT(PARSE(CLI_PPL, &a, "--threads", "2", "-c", "7"), 2);
    CHECK_EQ_INT(PARSE(CLI_EMBED, &a, "--task", "nope"), 2);
}

int main(void) {
    RUN(no_clashes);
    RUN(run_values);
    RUN(serve_values);
    RUN(lists_and_choices);
    RUN(positionals);
    RUN(refusals);
    return test_summary();
}
