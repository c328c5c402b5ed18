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

/* A call failed with `code` (and filled err, if non-NULL, with its message): prefixes that message
 * with more context ("file.gguf: " + msg) and returns code. The status comes from the caller, not
 * from err, so it survives err == NULL (a library caller that wants no message). If err->code is
 * not `code` (the callee returned a raw status without filling err), the message after the prefix
 * is the status's name rather than whatever err held, and err->code is set to `code`. Handed GM_OK
 * by mistake, it returns GM_ERR_INTERNAL: a failure path never reports success. */
gm_status gm_fail_prefix_code(gm_error *err, gm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The common form, `if (st) return gm_fail_prefix(err, "%s: ", path);`: the status is the
 * caller's local `gm_status st` (every caller names its status so; a caller without one does not
 * compile). Use gm_fail_prefix_code where the failing status lives under another name. */
#define gm_fail_prefix(err, ...) gm_fail_prefix_code((err), (st), __VA_ARGS__)

#endif
