/* tools/cli_util.h — small helpers shared by the `gemma` subcommands. */
#ifndef GM_TOOLS_CLI_UTIL_H
#define GM_TOOLS_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* Monotonic clock in seconds. */
double cli_now_s(void);
/* A whole decimal integer in [lo, hi]; false (out untouched) for anything else. */
bool cli_parse_int(const char *s, long lo, long hi, int *out);
/* A whole file, NUL-terminated (*len excludes the NUL); NULL with errno set on failure. */
char *cli_read_file(const char *path, size_t *len);

#endif
