/* core/error.h — errors are values: a status code plus a message naming the
 * file and the problem. Every fallible internal function takes a gm_error*
 * (which may be NULL) and returns a gm_status. */
#ifndef GM_CORE_ERROR_H
#define GM_CORE_ERROR_H

#include "gemma.h"

/* Fills err (if non-NULL) with code and a printf-style message; returns code
 * so callers can write `return gm_fail(err, GM_ERR_FORMAT, "...")`. */
gm_status gm_fail(gm_error *err, gm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes an existing message with more context ("file.gguf: " + msg). */
gm_status gm_fail_prefix(gm_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
