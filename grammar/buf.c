/* grammar/buf.c — the growable text buffer the schema translator writes GBNF into, and the array
 * growth helper every structure of the folder uses (one place that checks sizes for overflow). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/internal.h"

bool gr_grow(void **p, size_t *cap, size_t need, size_t sz, size_t max) {
    if (need <= *cap) return true;
    if (need > max || need > SIZE_MAX / 2 / sz) return false;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    if (c > max) c = max;
    void *q = realloc(*p, c * sz);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

void gr_buf_put(gr_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (!gr_grow((void **)&b->p, &b->cap, b->n + n + 1, 1, (size_t)1 << 30)) {
        b->oom = true;
        return;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void gr_buf_puts(gr_buf *b, const char *s) { gr_buf_put(b, s, strlen(s)); }

/* Any length: the translator formats whole rule bodies (an integer range, a long enum) through here. */
void gr_buf_printf(gr_buf *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0 || !gr_grow((void **)&b->p, &b->cap, b->n + (size_t)k + 1, 1, (size_t)1 << 30)) {
        b->oom = true;
    } else {
        vsnprintf(b->p + b->n, (size_t)k + 1, fmt, again);
        b->n += (size_t)k;
    }
    va_end(again);
}

/* Printable ASCII goes as itself except the characters that mean something in a literal or a
 * class; everything else as \xXX, \uXXXX or \UXXXXXXXX so the text stays ASCII and unambiguous. */
void gr_buf_gbnf_char(gr_buf *b, uint32_t cp, bool in_class) {
    bool special = cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'));
    if (cp >= 0x20 && cp < 0x7F && !special) {
        char c = (char)cp;
        gr_buf_put(b, &c, 1);
    } else if (special && cp != '-' && cp != '^') {
        char e[2] = {'\\', (char)cp};
        gr_buf_put(b, e, 2);
    } else if (cp < 0x100) {
        gr_buf_printf(b, "\\x%02X", cp);
    } else if (cp < 0x10000) {
        gr_buf_printf(b, "\\u%04X", cp);
    } else {
        gr_buf_printf(b, "\\U%08X", cp);
    }
}

void gr_buf_free(gr_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
