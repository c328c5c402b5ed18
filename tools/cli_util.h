/* tools/cli_util.h — small helpers shared by the `gemma` subcommands. */
#ifndef GM_TOOLS_CLI_UTIL_H
#define GM_TOOLS_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "gemma.h"

/* Monotonic clock in seconds. */
double cli_now_s(void);
/* A whole decimal integer in [lo, hi]; false (out untouched) for anything else. */
bool cli_parse_int(const char *s, long lo, long hi, int *out);
/* "f32" or "f16" (the KV cache storage). */
bool cli_parse_kv_type(const char *s, gm_kv_dtype *out);
/* A KV budget in MiB, 1 .. 1048576, into bytes. */
bool cli_parse_mib(const char *s, size_t *bytes);
/* A whole file, NUL-terminated (*len excludes the NUL); NULL with errno set on failure. */
char *cli_read_file(const char *path, size_t *len);

/* ---- stdout: every command's output goes to stdout through stdio, and a write error (a full disk,
 * a closed stdout, a reader that went away) must not end in exit 0. main() calls cli_stdout_setup()
 * first and returns cli_stdout_finish(cmd, status) last; the commands that stream (run, chat,
 * perplexity) call cli_stdout_flush() after each piece and stop early when it fails. The message is
 * printed once, by cli_stdout_finish. */

/* Ignores SIGPIPE and keeps fds 0-2 from being reused (see cli_util.c). */
void cli_stdout_setup(void);
/* Flushes stdout; false once any write to it has failed. */
bool cli_stdout_flush(void);
/* Flushes and closes stdout. On a write error: one line on stderr ("gemma CMD: cannot write the
 * output: REASON"; nothing for a reader that went away, EPIPE) and 1 when status was 0; status
 * otherwise. */
int cli_stdout_finish(const char *cmd, int status);

#endif
