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

#endif
