/* tests/support/gguf_writer.c — see gguf_writer.h. */
#include "support/gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

/* ------------------------------------------------------------------ byte buffer */

static void buf_reserve(gw_buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    uint8_t *p = realloc(b->p, cap);
    if (!p) abort(); /* test-side code: running out of memory is fatal */
    b->p = p;
    b->cap = cap;
}

void gw_buf_bytes(gw_buf *b, const void *src, size_t n) {
    if (n == 0) return;
    buf_reserve(b, n);
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
void gw_buf_u32(gw_buf *b, uint32_t v) { gw_buf_bytes(b, &v, 4); }
void gw_buf_u64(gw_buf *b, uint64_t v) { gw_buf_bytes(b, &v, 8); }
void gw_buf_str(gw_buf *b, const char *s) {
    size_t n = strlen(s);
    gw_buf_u64(b, n);
    gw_buf_bytes(b, s, n);
}
void gw_buf_free(gw_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------------ writer */

typedef struct gw_tensor {
    char *name;
    int type, n_dims;
    int64_t ne[4];
    uint8_t *data;
    size_t nbytes;
} gw_tensor;

struct gw_writer {
    uint32_t version, alignment;
    uint64_t n_kv;
    gw_buf kv; /* encoded key-value pairs */
    gw_tensor *tensors;
    size_t n_tensors, cap_tensors;
    char err[256];
};

gw_writer *gw_new(void) {
    gw_writer *w = calloc(1, sizeof *w);
    if (!w) abort();
    w->version = 3;
    w->alignment = 32;
    return w;
}

void gw_free(gw_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    gw_buf_free(&w->kv);
    free(w);
}

const char *gw_error(const gw_writer *w) { return w->err; }
void gw_set_version(gw_writer *w, uint32_t version) { w->version = version; }
void gw_set_alignment(gw_writer *w, uint32_t alignment) {
    w->alignment = alignment;
    gw_add_u32(w, "general.alignment", alignment);
}

bool gw_add_raw(gw_writer *w, const char *key, uint32_t vtype, const void *bytes, size_t n) {
    gw_buf_str(&w->kv, key);
    gw_buf_u32(&w->kv, vtype);
    gw_buf_bytes(&w->kv, bytes, n);
    w->n_kv++;
    return true;
}

#define GW_SCALAR(fn, ctype, vt) \
    bool fn(gw_writer *w, const char *key, ctype v) { return gw_add_raw(w, key, vt, &v, sizeof v); }
GW_SCALAR(gw_add_u8, uint8_t, GGUF_VT_U8)
GW_SCALAR(gw_add_i8, int8_t, GGUF_VT_I8)
GW_SCALAR(gw_add_u16, uint16_t, GGUF_VT_U16)
GW_SCALAR(gw_add_i16, int16_t, GGUF_VT_I16)
GW_SCALAR(gw_add_u32, uint32_t, GGUF_VT_U32)
GW_SCALAR(gw_add_i32, int32_t, GGUF_VT_I32)
GW_SCALAR(gw_add_u64, uint64_t, GGUF_VT_U64)
GW_SCALAR(gw_add_i64, int64_t, GGUF_VT_I64)
GW_SCALAR(gw_add_f32, float, GGUF_VT_F32)
GW_SCALAR(gw_add_f64, double, GGUF_VT_F64)

bool gw_add_bool(gw_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return gw_add_raw(w, key, GGUF_VT_BOOL, &b, 1);
}

bool gw_add_str(gw_writer *w, const char *key, const char *v) {
    gw_buf b = {0};
    gw_buf_str(&b, v);
    bool ok = gw_add_raw(w, key, GGUF_VT_STRING, b.p, b.n);
    gw_buf_free(&b);
    return ok;
}

bool gw_add_arr(gw_writer *w, const char *key, gguf_vtype elem, uint64_t n, const void *data) {
    size_t sz = gguf_vtype_size(elem);
    if (sz == 0) {
        snprintf(w->err, sizeof w->err, "gw_add_arr(%s): element type %d is not fixed-size", key, (int)elem);
        return false;
    }
    gw_buf b = {0};
    gw_buf_u32(&b, elem);
    gw_buf_u64(&b, n);
    gw_buf_bytes(&b, data, (size_t)n * sz);
    bool ok = gw_add_raw(w, key, GGUF_VT_ARRAY, b.p, b.n);
    gw_buf_free(&b);
    return ok;
}

bool gw_add_arr_str(gw_writer *w, const char *key, uint64_t n, const char *const *strs) {
    gw_buf b = {0};
    gw_buf_u32(&b, GGUF_VT_STRING);
    gw_buf_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) gw_buf_str(&b, strs[i]);
    bool ok = gw_add_raw(w, key, GGUF_VT_ARRAY, b.p, b.n);
    gw_buf_free(&b);
    return ok;
}

/* ------------------------------------------------------------------ tensors */

static int64_t n_elems(int n_dims, const int64_t *ne) {
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++) n *= ne[d];
    return n;
}

static gw_tensor *push_tensor(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne) {
    if (n_dims < 1 || n_dims > 4) {
        snprintf(w->err, sizeof w->err, "tensor %s: n_dims %d out of 1..4", name, n_dims);
        return NULL;
    }
    if (w->n_tensors == w->cap_tensors) {
        w->cap_tensors = w->cap_tensors ? 2 * w->cap_tensors : 16;
        w->tensors = realloc(w->tensors, w->cap_tensors * sizeof *w->tensors);
        if (!w->tensors) abort();
    }
    gw_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < 4; d++) t->ne[d] = d < n_dims ? ne[d] : 1;
    return t;
}

bool gw_add_tensor_raw(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                       const void *data, size_t nbytes) {
    gw_tensor *t = push_tensor(w, name, type, n_dims, ne);
    if (!t) return false;
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->data) abort();
    memcpy(t->data, data, nbytes);
    t->nbytes = nbytes;
    w->n_tensors++;
    return true;
}

bool gw_add_tensor_f32(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                       const float *values) {
    const gm_type_traits *tr = gm_type_traits_of(type);
    if (!tr || !tr->quant_row) {
        snprintf(w->err, sizeof w->err, "tensor %s: type %d cannot be quantized here", name, type);
        return false;
    }
    if (n_dims < 1 || n_dims > 4 || ne[0] % tr->block_elems != 0) {
        snprintf(w->err, sizeof w->err, "tensor %s: row of %lld is not a multiple of %s's block %lld", name,
                 (long long)ne[0], tr->name, (long long)tr->block_elems);
        return false;
    }
    size_t row_bytes = gm_row_bytes(type, ne[0]);
    int64_t rows = n_elems(n_dims, ne) / ne[0];
    gw_tensor *t = push_tensor(w, name, type, n_dims, ne);
    if (!t) return false;
    t->nbytes = row_bytes * (size_t)rows;
    t->data = malloc(t->nbytes);
    if (!t->data) abort();
    for (int64_t r = 0; r < rows; r++) tr->quant_row(values + r * ne[0], t->data + r * row_bytes, ne[0]);
    w->n_tensors++;
    return true;
}

/* ------------------------------------------------------------------ output */

static void pad_to(gw_buf *b, uint32_t alignment) {
    static const uint8_t zeros[64];
    while (b->n % alignment) {
        size_t k = alignment - b->n % alignment;
        gw_buf_bytes(b, zeros, k < sizeof zeros ? k : sizeof zeros);
    }
}

bool gw_to_memory(gw_writer *w, uint8_t **out, size_t *len) {
    if (w->alignment == 0) {
        snprintf(w->err, sizeof w->err, "alignment 0");
        return false;
    }
    gw_buf b = {0};
    gw_buf_bytes(&b, "GGUF", 4);
    gw_buf_u32(&b, w->version);
    gw_buf_u64(&b, w->n_tensors);
    gw_buf_u64(&b, w->n_kv);
    gw_buf_bytes(&b, w->kv.p, w->kv.n);
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const gw_tensor *t = &w->tensors[i];
        gw_buf_str(&b, t->name);
        gw_buf_u32(&b, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) gw_buf_u64(&b, (uint64_t)t->ne[d]);
        gw_buf_u32(&b, (uint32_t)t->type);
        gw_buf_u64(&b, offset);
        offset += (t->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    pad_to(&b, w->alignment);
    for (size_t i = 0; i < w->n_tensors; i++) {
        gw_buf_bytes(&b, w->tensors[i].data, w->tensors[i].nbytes);
        if (i + 1 < w->n_tensors) pad_to(&b, w->alignment);
    }
    *out = b.p;
    *len = b.n;
    return true;
}

bool gw_write_file(gw_writer *w, const char *path) {
    uint8_t *p;
    size_t n;
    if (!gw_to_memory(w, &p, &n)) return false;
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) snprintf(w->err, sizeof w->err, "cannot write %s", path);
    free(p);
    return ok;
}

/* ---- copies of a file, edited */

void gw_encode_value(gw_buf *b, const gguf_value *v) {
    const size_t sz = gguf_vtype_size(v->type);
    if (v->type == GGUF_VT_STRING) {
        gw_buf_u64(b, v->v.str.len);
        gw_buf_bytes(b, v->v.str.ptr, v->v.str.len);
    } else if (v->type == GGUF_VT_ARRAY) {
        gw_buf_u32(b, v->v.arr.elem);
        gw_buf_u64(b, v->v.arr.n);
        if (v->v.arr.elem != GGUF_VT_STRING && v->v.arr.elem != GGUF_VT_ARRAY) {
            gw_buf_bytes(b, v->v.arr.data, v->v.arr.nbytes);
            return;
        }
        gguf_arr_iter it;
        gguf_value e;
        gguf_arr_iter_init(&it, v);
        while (gguf_arr_iter_next(&it, &e)) gw_encode_value(b, &e);
    } else if (v->type == GGUF_VT_F32) {
        const float f = (float)v->v.f;
        gw_buf_bytes(b, &f, 4);
    } else if (v->type == GGUF_VT_F64) {
        gw_buf_bytes(b, &v->v.f, 8);
    } else { /* integers and bool, little-endian */
        const uint64_t u = v->type == GGUF_VT_I8 || v->type == GGUF_VT_I16 || v->type == GGUF_VT_I32 ||
                                   v->type == GGUF_VT_I64
                               ? (uint64_t)v->v.i
                               : v->v.u;
        for (size_t i = 0; i < sz; i++) {
            const uint8_t byte = (uint8_t)(u >> (8 * i));
            gw_buf_bytes(b, &byte, 1);
        }
    }
}

bool gw_copy_gguf(const char *src, const char *dst, const gw_edit *ed) {
    gguf_file *f = NULL;
    gm_error err = {0};
    if (gguf_open(src, NULL, &f, &err)) {
        fprintf(stderr, "gw_copy_gguf: %s\n", err.msg);
        return false;
    }
    gw_writer *w = gw_new();
    bool ok = true;
    for (uint64_t i = 0; ok && i < f->n_kv; i++) {
        if (ed->drop_key && !strcmp(f->kv[i].key, ed->drop_key)) continue;
        if (!strcmp(f->kv[i].key, "general.alignment")) continue;
        gw_buf b = {0};
        gw_encode_value(&b, &f->kv[i].val);
        ok = gw_add_raw(w, f->kv[i].key, f->kv[i].val.type, b.p, b.n);
        gw_buf_free(&b);
    }
    for (uint64_t i = 0; ok && i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (ed->drop_tensor && !strcmp(t->name, ed->drop_tensor)) continue;
        ok = gw_add_tensor_raw(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
    }
    if (ok && ed->add_key) ok = gw_add_raw(w, ed->add_key, ed->add_type, ed->add_bytes, ed->add_len);
    if (ok && ed->add) ed->add(w);
    ok = ok && gw_write_file(w, dst);
    if (!ok) fprintf(stderr, "gw_copy_gguf: %s\n", gw_error(w));
    gw_free(w);
    gguf_close(f);
    return ok;
}

void gw_buf_flags(gw_buf *b, gguf_vtype elem, const char *flags) {
    gw_buf_u32(b, (uint32_t)elem);
    gw_buf_u64(b, strlen(flags));
    for (const char *c = flags; *c; c++) {
        const bool on = *c == 's';
        const float f = on ? 1.0f : 0.0f;
        const double d = on ? 1.0 : 0.0;
        const uint8_t le[8] = {on}; /* integers and bool, little-endian */
        if (elem == GGUF_VT_F32) gw_buf_bytes(b, &f, 4);
        else if (elem == GGUF_VT_F64) gw_buf_bytes(b, &d, 8);
        else gw_buf_bytes(b, le, gguf_vtype_size(elem));
    }
}

bool gw_copy_pattern(const char *src, const char *dst, const char *arch, gguf_vtype elem, const char *flags,
                     int64_t n) {
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    gw_buf b = {0};
    if (flags) gw_buf_flags(&b, elem, flags);
    for (size_t i = 0; !flags && i < gguf_vtype_size(elem); i++) { /* little-endian */
        const uint8_t byte = (uint8_t)((uint64_t)n >> (8 * i));
        gw_buf_bytes(&b, &byte, 1);
    }
    const gw_edit ed = {.drop_key = key, .add_key = key, .add_type = flags ? GGUF_VT_ARRAY : (uint32_t)elem,
                        .add_bytes = b.p, .add_len = b.n};
    const bool ok = gw_copy_gguf(src, dst, &ed);
    gw_buf_free(&b);
    return ok;
}
