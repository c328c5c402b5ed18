/* core/error.c — building error values. */
#include "core/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

gm_status gm_fail(gm_error *err, gm_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

gm_status gm_fail_prefix_code(gm_error *err, gm_status code, const char *fmt, ...) {
    if (code == GM_OK) code = GM_ERR_INTERNAL;
    if (!err) return code;
    char old[sizeof err->msg];
    if (err->code == code) {
        memcpy(old, err->msg, sizeof old);
        old[sizeof old - 1] = 0;
    } else {
        snprintf(old, sizeof old, "%s", gm_status_name(code));
    }
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    /* Append the old message after the prefix, truncating at the buffer's end. */
    size_t used = n < 0 ? 0 : (size_t)n < sizeof err->msg ? (size_t)n : sizeof err->msg - 1;
    size_t room = sizeof err->msg - 1 - used;
    size_t len = strlen(old);
    if (len > room) len = room;
    memcpy(err->msg + used, old, len);
    err->msg[used + len] = 0;
    return code;
}

const char *gm_status_name(gm_status s) {
    switch (s) {
    case GM_OK: return "ok";
    case GM_ERR_IO: return "i/o error";
    case GM_ERR_FORMAT: return "malformed file";
    case GM_ERR_UNSUPPORTED: return "unsupported";
    case GM_ERR_ARG: return "invalid argument";
    case GM_ERR_NOMEM: return "out of memory";
    case GM_ERR_STATE: return "invalid state";
    case GM_ERR_CONTEXT: return "context limit exceeded";
    case GM_ERR_NOT_FOUND: return "not found";
    case GM_ERR_TYPE: return "wrong type";
    case GM_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
