/* formats/gguf.c — GGUF v2/v3 reader.
 *
 * The whole file is mapped read-only and validated once, at open: every count and length is
 * checked against the bytes that remain before anything is allocated for it, so a header that
 * claims 2^60 tensors or a 2^63-byte string fails at once. Tables grow as entries are actually
 * parsed (never sized from a count in the file). After a successful open every view (strings,
 * arrays, tensor data) lies inside the mapping.
 */
#include "formats/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "formats/mmap.h"
#include "quant/quant.h"

enum {
    GGUF_MAX_DEPTH = 8,            /* nested arrays deeper than this are refused */
    GGUF_MAX_KEY = 65535,          /* the spec's limit on key length */
    GGUF_MAX_NAME = 4096,          /* tensor names (ggml uses 64; be lenient, but bounded) */
    GGUF_MAX_DIMS = 4,
    GGUF_DEFAULT_ALIGNMENT = 32,
};
#define GGUF_MAX_ALIGNMENT (1ull << 24)

/* The public struct plus what only this file needs. */
typedef struct gguf_impl {
    gguf_file pub;
    gm_mmap map;              /* owned mapping (gguf_open); empty for gguf_open_memory */
    struct name_ref *tensor_order; /* all tensors (hidden too) sorted by name */
    struct name_ref *kv_order;     /* metadata sorted by key */
    uint8_t *values;          /* gguf_assemble: its copies of string and array values */
} gguf_impl;

static gguf_impl *impl_of(const gguf_file *f) {
    return (gguf_impl *)((char *)f - offsetof(gguf_impl, pub));
}

bool gguf_file_backed(const gguf_file *f) { return f && impl_of(f)->map.data != NULL; }

/* ------------------------------------------------------------------ value types */

const char *gguf_vtype_name(int vt) {
    static const char *const names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    if (vt < 0 || vt > GGUF_VT_F64) return "invalid";
    return names[vt];
}

size_t gguf_vtype_size(int vt) {
    switch (vt) {
    case GGUF_VT_U8: case GGUF_VT_I8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_U16: case GGUF_VT_I16: return 2;
    case GGUF_VT_U32: case GGUF_VT_I32: case GGUF_VT_F32: return 4;
    case GGUF_VT_U64: case GGUF_VT_I64: case GGUF_VT_F64: return 8;
    default: return 0;
    }
}

static bool vtype_valid(uint32_t vt) { return vt <= GGUF_VT_F64; }

/* ------------------------------------------------------------------ cursor */

typedef struct cursor {
    const uint8_t *base; /* start of the file */
    const uint8_t *p, *end;
    const char *name;    /* file name for messages */
    gm_error *err;
} cursor;

static uint64_t cur_left(const cursor *c) { return (uint64_t)(c->end - c->p); }
static uint64_t cur_pos(const cursor *c) { return (uint64_t)(c->p - c->base); }

static gm_status truncated(cursor *c, const char *what, uint64_t need) {
    return gm_fail(c->err, GM_ERR_FORMAT,
                   "%s: truncated: %s needs %llu bytes at offset %llu but only %llu remain", c->name,
                   what, (unsigned long long)need, (unsigned long long)cur_pos(c),
                   (unsigned long long)cur_left(c));
}

static gm_status rd_bytes(cursor *c, void *dst, size_t n, const char *what) {
    if (cur_left(c) < n) return truncated(c, what, n);
    memcpy(dst, c->p, n);
    c->p += n;
    return GM_OK;
}

static gm_status rd_u32(cursor *c, uint32_t *v, const char *what) { return rd_bytes(c, v, 4, what); }
static gm_status rd_u64(cursor *c, uint64_t *v, const char *what) { return rd_bytes(c, v, 8, what); }

/* A length-prefixed string: the length is checked against the bytes left before use. */
static gm_status rd_str(cursor *c, gguf_str *s, const char *what) {
    uint64_t len = 0;
    gm_status st = rd_u64(c, &len, what);
    if (st) return st;
    if (len > cur_left(c))
        return gm_fail(c->err, GM_ERR_FORMAT,
                       "%s: %s at offset %llu claims %llu bytes but only %llu remain", c->name, what,
                       (unsigned long long)(cur_pos(c) - 8), (unsigned long long)len,
                       (unsigned long long)cur_left(c));
    s->ptr = (const char *)c->p;
    s->len = len;
    c->p += len;
    return GM_OK;
}

/* Minimum encoded size of one value of type vt: bounds element counts before parsing them. */
static uint64_t min_value_size(uint32_t vt) {
    if (vt == GGUF_VT_STRING) return 8;
    if (vt == GGUF_VT_ARRAY) return 12;
    return gguf_vtype_size((int)vt);
}

/* ------------------------------------------------------------------ values */

static void load_scalar(const uint8_t *p, gguf_vtype t, gguf_value *out) {
    out->type = t;
    switch (t) {
    case GGUF_VT_U8: out->v.u = p[0]; break;
    case GGUF_VT_BOOL: out->v.u = p[0] != 0; break;
    case GGUF_VT_I8: out->v.i = (int8_t)p[0]; break;
    case GGUF_VT_U16: { uint16_t x; memcpy(&x, p, 2); out->v.u = x; break; }
    case GGUF_VT_I16: { int16_t x; memcpy(&x, p, 2); out->v.i = x; break; }
    case GGUF_VT_U32: { uint32_t x; memcpy(&x, p, 4); out->v.u = x; break; }
    case GGUF_VT_I32: { int32_t x; memcpy(&x, p, 4); out->v.i = x; break; }
    case GGUF_VT_F32: { float x; memcpy(&x, p, 4); out->v.f = x; break; }
    case GGUF_VT_U64: { uint64_t x; memcpy(&x, p, 8); out->v.u = x; break; }
    case GGUF_VT_I64: { int64_t x; memcpy(&x, p, 8); out->v.i = x; break; }
    case GGUF_VT_F64: { double x; memcpy(&x, p, 8); out->v.f = x; break; }
    default: break;
    }
}

static gm_status parse_value(cursor *c, uint32_t vt, int depth, gguf_value *out);

/* Array header and body; nested arrays and strings are walked to validate and measure them. */
static gm_status parse_array(cursor *c, int depth, gguf_value *out) {
    uint32_t elem = 0;
    uint64_t n = 0;
    gm_status st = rd_u32(c, &elem, "array element type");
    if (st || (st = rd_u64(c, &n, "array length"))) return st;
    if (!vtype_valid(elem))
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: array at offset %llu has invalid element type %u",
                       c->name, (unsigned long long)(cur_pos(c) - 12), elem);
    if (elem == GGUF_VT_ARRAY && depth + 1 >= GGUF_MAX_DEPTH)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: arrays nested deeper than %d levels at offset %llu",
                       c->name, GGUF_MAX_DEPTH, (unsigned long long)cur_pos(c));
    uint64_t min = min_value_size(elem);
    if (n > cur_left(c) / min)
        return gm_fail(c->err, GM_ERR_FORMAT,
                       "%s: array at offset %llu claims %llu elements of type %s but only %llu bytes remain",
                       c->name, (unsigned long long)(cur_pos(c) - 12), (unsigned long long)n,
                       gguf_vtype_name((int)elem), (unsigned long long)cur_left(c));
    const uint8_t *start = c->p;
    if (elem != GGUF_VT_STRING && elem != GGUF_VT_ARRAY) {
        c->p += n * min;
    } else {
        for (uint64_t i = 0; i < n; i++) {
            gguf_value e;
            if ((st = parse_value(c, elem, depth + 1, &e))) return st;
        }
    }
    out->type = GGUF_VT_ARRAY;
    out->v.arr.elem = (gguf_vtype)elem;
    out->v.arr.n = n;
    out->v.arr.data = start;
    out->v.arr.nbytes = (uint64_t)(c->p - start);
    return GM_OK;
}

static gm_status parse_value(cursor *c, uint32_t vt, int depth, gguf_value *out) {
    memset(out, 0, sizeof *out);
    if (vt == GGUF_VT_STRING) {
        out->type = GGUF_VT_STRING;
        return rd_str(c, &out->v.str, "string value");
    }
    if (vt == GGUF_VT_ARRAY) return parse_array(c, depth, out);
    size_t sz = gguf_vtype_size((int)vt);
    if (sz == 0)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: invalid value type %u at offset %llu", c->name, vt,
                       (unsigned long long)cur_pos(c));
    if (cur_left(c) < sz) return truncated(c, "value", sz);
    load_scalar(c->p, (gguf_vtype)vt, out);
    c->p += sz;
    return GM_OK;
}

/* ------------------------------------------------------------------ array iteration */

void gguf_arr_iter_init(gguf_arr_iter *it, const gguf_value *arr) {
    memset(it, 0, sizeof *it);
    if (!arr || arr->type != GGUF_VT_ARRAY) return;
    it->elem = arr->v.arr.elem;
    it->n = arr->v.arr.n;
    it->p = arr->v.arr.data;
    it->end = arr->v.arr.data + arr->v.arr.nbytes;
}

bool gguf_arr_iter_next(gguf_arr_iter *it, gguf_value *out) {
    if (it->i >= it->n || !it->p) return false;
    /* Re-parse with the validating parser, bounded by the array's own bytes: cannot fail on a
     * file that opened, and stays safe on one that did not. */
    cursor c = {it->p, it->p, it->end, "", NULL};
    if (parse_value(&c, it->elem, 0, out) != GM_OK) {
        it->i = it->n;
        return false;
    }
    it->p = c.p;
    it->i++;
    return true;
}

/* ------------------------------------------------------------------ growing tables */

static gm_status grow(void **arr, uint64_t *cap, uint64_t need, size_t elem, const char *name,
                      gm_error *err) {
    if (need <= *cap) return GM_OK;
    uint64_t ncap = *cap ? *cap * 2 : 16;
    while (ncap < need) ncap *= 2;
    void *p = realloc(*arr, (size_t)(ncap * elem));
    if (!p) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory growing a table to %llu entries",
                           name, (unsigned long long)ncap);
    *arr = p;
    *cap = ncap;
    return GM_OK;
}

/* NUL-terminated copy of a name from the file; NULs inside would make two names look alike. */
static gm_status copy_name(cursor *c, const gguf_str *s, uint64_t max, const char *what, char **out) {
    if (s->len == 0)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: empty %s at offset %llu", c->name, what,
                       (unsigned long long)(cur_pos(c) - 8));
    if (s->len > max)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: %s at offset %llu is %llu bytes long (limit %llu)",
                       c->name, what, (unsigned long long)(cur_pos(c) - s->len - 8),
                       (unsigned long long)s->len, (unsigned long long)max);
    if (memchr(s->ptr, 0, (size_t)s->len))
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: %s at offset %llu contains a NUL byte", c->name,
                       what, (unsigned long long)(cur_pos(c) - s->len - 8));
    char *p = malloc((size_t)s->len + 1);
    if (!p) return gm_fail(c->err, GM_ERR_NOMEM, "%s: out of memory", c->name);
    memcpy(p, s->ptr, (size_t)s->len);
    p[s->len] = 0;
    *out = p;
    return GM_OK;
}

/* ------------------------------------------------------------------ sorted indices */

/* Name lookups go through an index sorted by name; building it also finds duplicates. */
typedef struct name_ref {
    const char *name;
    uint64_t i;
} name_ref;

static int cmp_name_ref(const void *a, const void *b) {
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

/* names_at(i) is the NUL-terminated name of entry i: a char* at byte offset `off` of element i. */
static gm_status sorted_index(const void *base, uint64_t n, size_t stride, size_t off, const char *what,
                              const char *name, name_ref **out, gm_error *err) {
    name_ref *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    if (!idx) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    for (uint64_t i = 0; i < n; i++) {
        idx[i].name = *(char *const *)((const char *)base + i * stride + off);
        idx[i].i = i;
    }
    qsort(idx, (size_t)n, sizeof *idx, cmp_name_ref);
    for (uint64_t i = 1; i < n; i++) {
        if (strcmp(idx[i - 1].name, idx[i].name) == 0) {
            gm_status st = gm_fail(err, GM_ERR_FORMAT, "%s: duplicate %s '%s'", name, what, idx[i].name);
            free(idx);
            return st;
        }
    }
    *out = idx;
    return GM_OK;
}

static int64_t bsearch_name(const name_ref *idx, uint64_t n, const char *key) {
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(idx[mid].name, key);
        if (c == 0) return (int64_t)idx[mid].i;
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

/* ------------------------------------------------------------------ header sections */

static gm_status parse_header(cursor *c, gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv) {
    uint8_t magic[4];
    gm_status st = rd_bytes(c, magic, 4, "magic");
    if (st) return st;
    if (memcmp(magic, "GGUF", 4) != 0)
        return gm_fail(c->err, GM_ERR_FORMAT,
                       "%s: not a GGUF file (magic %02x %02x %02x %02x, expected \"GGUF\")", c->name,
                       magic[0], magic[1], magic[2], magic[3]);
    if ((st = rd_u32(c, &f->version, "version"))) return st;
    if (f->version == 1)
        return gm_fail(c->err, GM_ERR_UNSUPPORTED,
                       "%s: GGUF version 1 is obsolete and not supported (versions 2 and 3 are); "
                       "re-convert the model with a current llama.cpp", c->name);
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xffff) == 0)
            return gm_fail(c->err, GM_ERR_UNSUPPORTED,
                           "%s: GGUF version field 0x%08x looks byte-swapped: big-endian GGUF files "
                           "are not supported", c->name, f->version);
        return gm_fail(c->err, GM_ERR_UNSUPPORTED, "%s: GGUF version %u is not supported (2 and 3 are)",
                       c->name, f->version);
    }
    if ((st = rd_u64(c, n_tensors, "tensor count"))) return st;
    if ((st = rd_u64(c, n_kv, "metadata count"))) return st;
    /* A key-value pair takes at least 13 bytes, a tensor info at least 32. */
    if (*n_kv > cur_left(c) / 13)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: header claims %llu metadata entries but the file has "
                       "only %llu bytes left", c->name, (unsigned long long)*n_kv,
                       (unsigned long long)cur_left(c));
    if (*n_tensors > cur_left(c) / 32)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: header claims %llu tensors but the file has only %llu "
                       "bytes left", c->name, (unsigned long long)*n_tensors,
                       (unsigned long long)cur_left(c));
    return GM_OK;
}

/* "file: problem" -> "file: metadata key 'k': problem". */
static gm_status with_key(cursor *c, const char *key, gm_status st) {
    if (!c->err) return st;
    size_t n = strlen(c->name);
    const char *rest = c->err->msg;
    if (!strncmp(rest, c->name, n) && !strncmp(rest + n, ": ", 2)) rest += n + 2;
    char tail[sizeof c->err->msg];
    snprintf(tail, sizeof tail, "%s", rest);
    return gm_fail(c->err, st, "%s: metadata key '%.200s': %s", c->name, key, tail);
}

static gm_status parse_kvs(cursor *c, gguf_file *f, uint64_t n_kv) {
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        gm_status st = grow((void **)&f->kv, &cap, i + 1, sizeof *f->kv, c->name, c->err);
        if (st) return st;
        gguf_kv *kv = &f->kv[i];
        memset(kv, 0, sizeof *kv);
        gguf_str key;
        uint32_t vt = 0;
        if ((st = rd_str(c, &key, "metadata key"))) return st;
        if ((st = copy_name(c, &key, GGUF_MAX_KEY, "metadata key", &kv->key))) return st;
        f->n_kv = i + 1; /* owns kv->key from here on */
        if ((st = rd_u32(c, &vt, "metadata value type"))) return st;
        if (!vtype_valid(vt))
            return gm_fail(c->err, GM_ERR_FORMAT, "%s: metadata key '%s' has invalid value type %u",
                           c->name, kv->key, vt);
        if ((st = parse_value(c, vt, 0, &kv->val))) return with_key(c, kv->key, st);
    }
    return GM_OK;
}

/* general.alignment: any integer type, a power of two. */
static gm_status read_alignment(gguf_file *f, gm_error *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv) return GM_OK;
    uint64_t a = 0;
    gm_status st = gguf_get_u64(f, "general.alignment", &a, err);
    if (st) return st;
    if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
        return gm_fail(err, GM_ERR_FORMAT, "%s: general.alignment = %llu is not a power of two in 1..%llu",
                       f->path, (unsigned long long)a, (unsigned long long)GGUF_MAX_ALIGNMENT);
    f->alignment = a;
    return GM_OK;
}

/* Bytes per element of the plain data types a file may hold beside its weights (I8..F64: an EAGLE-3 head's d2t
 * map is I64); 0 for the others. They have no type traits: nothing reads them as weights. */
static size_t data_elem_bytes(int type) {
    switch (type) {
    case GM_TYPE_I8: return 1;
    case GM_TYPE_I16: return 2;
    case GM_TYPE_I32: return 4;
    case GM_TYPE_I64: return 8;
    case GM_TYPE_F64: return 8;
    default: return 0;
    }
}

/* Shape checks and byte size: 1..4 dims, each > 0, no overflow, ne[0] a whole number of blocks. */
static gm_status tensor_shape(cursor *c, gguf_tensor *t, const uint64_t *dims) {
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    uint64_t total = 1;
    for (int d = 0; d < t->n_dims; d++) {
        if (dims[d] == 0)
            return gm_fail(c->err, GM_ERR_FORMAT, "%s: tensor '%s' has dimension %d equal to 0", c->name,
                           t->name, d);
        if (dims[d] > (uint64_t)INT64_MAX / total)
            return gm_fail(c->err, GM_ERR_FORMAT, "%s: tensor '%s' has an element count that overflows",
                           c->name, t->name);
        total *= dims[d];
        t->ne[d] = (int64_t)dims[d];
    }
    const size_t eb = data_elem_bytes(t->type);
    if (eb) {
        if (total > UINT64_MAX / eb)
            return gm_fail(c->err, GM_ERR_FORMAT, "%s: tensor '%s' byte size overflows", c->name, t->name);
        t->nbytes = total * eb;
        return GM_OK;
    }
    const gm_type_traits *tr = gm_type_traits_of(t->type);
    if (!tr) {
        const char *tn = gm_type_name(t->type);
        return gm_fail(c->err, GM_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s (id %d), which is not "
                       "supported", c->name, t->name, tn ? tn : "unknown", t->type);
    }
    if (t->ne[0] % tr->block_elems != 0)
        return gm_fail(c->err, GM_ERR_FORMAT,
                       "%s: tensor '%s' of type %s has a row of %lld elements, not a multiple of %lld",
                       c->name, t->name, tr->name, (long long)t->ne[0], (long long)tr->block_elems);
    uint64_t blocks = total / (uint64_t)tr->block_elems;
    if (blocks > UINT64_MAX / tr->block_bytes)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: tensor '%s' byte size overflows", c->name, t->name);
    t->nbytes = blocks * tr->block_bytes;
    return GM_OK;
}

static gm_status parse_tensor_info(cursor *c, gguf_tensor *t, bool keep_mtp) {
    gguf_str name;
    uint32_t n_dims = 0, type = 0;
    uint64_t dims[GGUF_MAX_DIMS] = {0};
    gm_status st = rd_str(c, &name, "tensor name");
    if (st || (st = copy_name(c, &name, GGUF_MAX_NAME, "tensor name", &t->name))) return st;
    if ((st = rd_u32(c, &n_dims, "tensor dimension count"))) return st;
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return gm_fail(c->err, GM_ERR_FORMAT, "%s: tensor '%s' has %u dimensions (must be 1..%d)",
                       c->name, t->name, n_dims, GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    for (uint32_t d = 0; d < n_dims; d++)
        if ((st = rd_u64(c, &dims[d], "tensor dimension"))) return st;
    if ((st = rd_u32(c, &type, "tensor type"))) return st;
    if ((st = rd_u64(c, &t->offset, "tensor offset"))) return st;
    t->type = type > 0x7fffffff ? -1 : (int)type;
    if (type > 0x7fffffff)
        return gm_fail(c->err, GM_ERR_UNSUPPORTED, "%s: tensor '%s' has unknown type id %u", c->name,
                       t->name, type);
    if ((st = tensor_shape(c, t, dims))) return st;
    t->hidden = !keep_mtp && (strstr(t->name, "mtp") || strstr(t->name, "nextn"));
    return GM_OK;
}

/* A drafter file (Gemma 4's MTP assistant): its nextn tensors are its own weights, not extras to hide. */
static bool is_drafter_file(const gguf_file *f) {
    const gguf_kv *kv = gguf_find(f, "general.architecture");
    static const char name[] = "gemma4-assistant";
    return kv && kv->val.type == GGUF_VT_STRING && kv->val.v.str.len == sizeof name - 1 &&
           !memcmp(kv->val.v.str.ptr, name, sizeof name - 1);
}

static gm_status parse_tensor_infos(cursor *c, gguf_file *f, uint64_t n, const gguf_open_options *opt) {
    const bool keep_mtp = (opt && opt->keep_mtp) || is_drafter_file(f);
    uint64_t cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        gm_status st = grow((void **)&f->tensors, &cap, i + 1, sizeof *f->tensors, c->name, c->err);
        if (st) return st;
        gguf_tensor *t = &f->tensors[i];
        memset(t, 0, sizeof *t);
        f->n_tensors = i + 1;
        if ((st = parse_tensor_info(c, t, keep_mtp))) return st;
    }
    return GM_OK;
}

typedef struct span {
    uint64_t begin, end, i;
} span;

static int cmp_span(const void *a, const void *b) {
    uint64_t x = ((const span *)a)->begin, y = ((const span *)b)->begin;
    return x < y ? -1 : x > y;
}

/* Alignment, bounds and overlap of the tensor data; sets the data pointers. */
static gm_status place_tensors(gguf_file *f, uint64_t info_end, gm_error *err) {
    uint64_t pad = (f->alignment - info_end % f->alignment) % f->alignment;
    f->data_offset = info_end + pad;
    if (f->n_tensors == 0) return GM_OK;
    if (f->data_offset > f->size)
        return gm_fail(err, GM_ERR_FORMAT, "%s: truncated: data section would start at %llu, past the end "
                       "of the file (%llu bytes)", f->path, (unsigned long long)f->data_offset,
                       (unsigned long long)f->size);
    uint64_t data_size = f->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset % f->alignment != 0)
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s' offset %llu is not a multiple of the "
                           "alignment %llu", f->path, t->name, (unsigned long long)t->offset,
                           (unsigned long long)f->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return gm_fail(err, GM_ERR_FORMAT, "%s: tensor '%s' data [%llu, +%llu) runs past the end of the "
                           "file (data section holds %llu bytes)", f->path, t->name,
                           (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                           (unsigned long long)data_size);
        t->data = f->map + f->data_offset + t->offset;
    }
    span *sp = malloc((size_t)f->n_tensors * sizeof *sp);
    if (!sp) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", f->path);
    for (uint64_t i = 0; i < f->n_tensors; i++)
        sp[i] = (span){f->tensors[i].offset, f->tensors[i].offset + f->tensors[i].nbytes, i};
    qsort(sp, (size_t)f->n_tensors, sizeof *sp, cmp_span);
    gm_status st = GM_OK;
    for (uint64_t i = 1; i < f->n_tensors && !st; i++) {
        const gguf_tensor *a = &f->tensors[sp[i - 1].i], *b = &f->tensors[sp[i].i];
        if (sp[i - 1].end > sp[i].begin)
            st = gm_fail(err, GM_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                         f->path, a->name, (unsigned long long)a->offset,
                         (unsigned long long)(a->offset + a->nbytes), b->name,
                         (unsigned long long)b->offset, (unsigned long long)(b->offset + b->nbytes));
    }
    free(sp);
    return st;
}

/* ------------------------------------------------------------------ open / close */

static gm_status parse_all(gguf_impl *g, const gguf_open_options *opt, gm_error *err) {
    gguf_file *f = &g->pub;
    cursor c = {f->map, f->map, f->map + f->size, f->path, err};
    uint64_t n_tensors = 0, n_kv = 0;
    gm_status st = parse_header(&c, f, &n_tensors, &n_kv);
    if (st || (st = parse_kvs(&c, f, n_kv))) return st;
    if ((st = sorted_index(f->kv, f->n_kv, sizeof *f->kv, offsetof(gguf_kv, key), "metadata key", f->path,
                           &g->kv_order, err)))
        return st;
    if ((st = read_alignment(f, err))) return st;
    if ((st = parse_tensor_infos(&c, f, n_tensors, opt))) return st;
    if ((st = sorted_index(f->tensors, f->n_tensors, sizeof *f->tensors, offsetof(gguf_tensor, name),
                           "tensor name", f->path, &g->tensor_order, err)))
        return st;
    return place_tensors(f, cur_pos(&c), err);
}

static gm_status open_common(gguf_impl *g, const char *name, const gguf_open_options *opt, gguf_file **out,
                             gm_error *err) {
    gguf_file *f = &g->pub;
    f->path = strdup(name);
    if (!f->path) {
        gguf_close(f);
        return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    }
    gm_status st = parse_all(g, opt, err);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return GM_OK;
}

gm_status gguf_open(const char *path, const gguf_open_options *opt, gguf_file **out, gm_error *err) {
    *out = NULL;
    if (!path) return gm_fail(err, GM_ERR_ARG, "gguf_open: path is NULL");
    gguf_impl *g = calloc(1, sizeof *g);
    if (!g) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", path);
    gm_status st = gm_mmap_open(path, &g->map, err);
    if (st) {
        free(g);
        return st;
    }
    g->pub.map = g->map.data;
    g->pub.size = g->map.size;
    return open_common(g, path, opt, out, err);
}

gm_status gguf_open_memory(const void *buf, uint64_t size, const char *name, const gguf_open_options *opt,
                           gguf_file **out, gm_error *err) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!buf && size) return gm_fail(err, GM_ERR_ARG, "%s: buffer is NULL", name);
    gguf_impl *g = calloc(1, sizeof *g);
    if (!g) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    g->pub.map = buf;
    g->pub.size = size;
    return open_common(g, name, opt, out, err);
}

/* ------------------------------------------------------------------ assembled in memory */

/* Bytes a value's copy takes: its string, or its array's elements (fixed-size elements only). */
static uint64_t value_bytes(const gguf_value *v) {
    if (v->type == GGUF_VT_STRING) return v->v.str.len;
    return v->type == GGUF_VT_ARRAY ? v->v.arr.nbytes : 0;
}

/* Copies the keys and the string / array values of kv into f (values packed in g->values). */
static gm_status assemble_kv(gguf_impl *g, const gguf_kv *kv, uint64_t n_kv, gm_error *err) {
    gguf_file *f = &g->pub;
    uint64_t total = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (kv[i].val.type == GGUF_VT_ARRAY && !gguf_vtype_size(kv[i].val.v.arr.elem))
            return gm_fail(err, GM_ERR_ARG, "%s: key '%s': only arrays of numbers can be assembled", f->path, kv[i].key);
        total += value_bytes(&kv[i].val);
    }
    f->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *f->kv);
    g->values = malloc((size_t)(total ? total : 1));
    if (!f->kv || !g->values) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", f->path);
    uint8_t *p = g->values;
    for (uint64_t i = 0; i < n_kv; i++, f->n_kv++) {
        gguf_kv *o = &f->kv[i];
        o->val = kv[i].val;
        if (!(o->key = strdup(kv[i].key))) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", f->path);
        const uint64_t n = value_bytes(&o->val);
        if (n) memcpy(p, o->val.type == GGUF_VT_STRING ? (const void *)o->val.v.str.ptr : o->val.v.arr.data, (size_t)n);
        if (o->val.type == GGUF_VT_STRING) o->val.v.str.ptr = (const char *)p;
        if (o->val.type == GGUF_VT_ARRAY) o->val.v.arr.data = p;
        p += n;
    }
    return sorted_index(f->kv, f->n_kv, sizeof *f->kv, offsetof(gguf_kv, key), "metadata key", f->path, &g->kv_order,
                        err);
}

/* Copies the tensor infos (names owned, data still the caller's), each checked as a parsed one would be. */
static gm_status assemble_tensors(gguf_impl *g, const gguf_tensor *t, uint64_t n, gm_error *err) {
    gguf_file *f = &g->pub;
    f->tensors = calloc((size_t)(n ? n : 1), sizeof *f->tensors);
    if (!f->tensors) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", f->path);
    for (uint64_t i = 0; i < n; i++, f->n_tensors++) {
        gguf_tensor *o = &f->tensors[i];
        *o = t[i];
        o->hidden = false;
        if (!(o->name = strdup(t[i].name))) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", f->path);
        const size_t row = gm_row_bytes(o->type, o->ne[0]);
        if (o->n_dims < 1 || o->n_dims > GGUF_MAX_DIMS || !row || o->ne[1] < 1 || o->ne[2] < 1 || o->ne[3] < 1 || !o->data)
            return gm_fail(err, GM_ERR_ARG, "%s: tensor '%s' cannot be assembled (type %d, %d dims)", f->path, o->name,
                           o->type, o->n_dims);
        o->nbytes = (uint64_t)row * (uint64_t)(o->ne[1] * o->ne[2] * o->ne[3]);
    }
    return sorted_index(f->tensors, f->n_tensors, sizeof *f->tensors, offsetof(gguf_tensor, name), "tensor name",
                        f->path, &g->tensor_order, err);
}

gm_status gguf_assemble(const char *name, const gguf_kv *kv, uint64_t n_kv, const gguf_tensor *tensors,
                        uint64_t n_tensors, gguf_file **out, gm_error *err) {
    *out = NULL;
    if (!name || (n_kv && !kv) || (n_tensors && !tensors)) return gm_fail(err, GM_ERR_ARG, "gguf_assemble: NULL argument");
    gguf_impl *g = calloc(1, sizeof *g);
    if (!g) return gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    gguf_file *f = &g->pub;
    f->version = 3;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    gm_status st = (f->path = strdup(name)) ? GM_OK : gm_fail(err, GM_ERR_NOMEM, "%s: out of memory", name);
    if (!st) st = assemble_kv(g, kv, n_kv, err);
    if (!st) st = assemble_tensors(g, tensors, n_tensors, err);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return GM_OK;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    gguf_impl *g = impl_of(f);
    for (uint64_t i = 0; i < f->n_kv; i++) free(f->kv[i].key);
    for (uint64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->kv);
    free(f->tensors);
    free(f->path);
    free(g->kv_order);
    free(g->tensor_order);
    free(g->values);
    gm_mmap_close(&g->map);
    free(g);
}

/* ------------------------------------------------------------------ lookup */

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    const gguf_impl *g = impl_of(f);
    if (!g->kv_order) { /* during open, before the index exists */
        for (uint64_t i = 0; i < f->n_kv; i++)
            if (!strcmp(f->kv[i].key, key)) return &f->kv[i];
        return NULL;
    }
    int64_t i = bsearch_name(g->kv_order, f->n_kv, key);
    return i < 0 ? NULL : &f->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name || !impl_of(f)->tensor_order) return NULL;
    int64_t i = bsearch_name(impl_of(f)->tensor_order, f->n_tensors, name);
    if (i < 0 || f->tensors[i].hidden) return NULL;
    return &f->tensors[i];
}

/* ------------------------------------------------------------------ typed getters */

static gm_status get_kv(const gguf_file *f, const char *key, const gguf_kv **kv, gm_error *err) {
    *kv = gguf_find(f, key);
    if (!*kv) return gm_fail(err, GM_ERR_NOT_FOUND, "%s: metadata key '%s' is missing", f ? f->path : "?",
                             key ? key : "(null)");
    return GM_OK;
}

static gm_status wrong_type(const gguf_file *f, const gguf_kv *kv, const char *expected, gm_error *err) {
    return gm_fail(err, GM_ERR_TYPE, "%s: metadata key '%s' should be %s but is %s", f->path, kv->key,
                   expected, gguf_vtype_name(kv->val.type));
}

static bool is_unsigned(gguf_vtype t) {
    return t == GGUF_VT_U8 || t == GGUF_VT_U16 || t == GGUF_VT_U32 || t == GGUF_VT_U64;
}
static bool is_signed(gguf_vtype t) {
    return t == GGUF_VT_I8 || t == GGUF_VT_I16 || t == GGUF_VT_I32 || t == GGUF_VT_I64;
}

/* Any integer value as a range-checked (lo..hi) signed/unsigned pair. */
static gm_status get_int_in(const gguf_file *f, const char *key, bool want_unsigned, uint64_t umax,
                            int64_t imin, int64_t imax, uint64_t *uout, int64_t *iout, const char *tname,
                            gm_error *err) {
    const gguf_kv *kv;
    gm_status st = get_kv(f, key, &kv, err);
    if (st) return st;
    gguf_vtype t = kv->val.type;
    if (is_unsigned(t)) {
        uint64_t u = kv->val.v.u;
        if (want_unsigned ? u > umax : u > (uint64_t)imax) goto range;
        if (want_unsigned) *uout = u;
        else *iout = (int64_t)u;
        return GM_OK;
    }
    if (is_signed(t)) {
        int64_t i = kv->val.v.i;
        if (want_unsigned ? (i < 0 || (uint64_t)i > umax) : (i < imin || i > imax)) goto range;
        if (want_unsigned) *uout = (uint64_t)i;
        else *iout = i;
        return GM_OK;
    }
    return wrong_type(f, kv, tname, err);
range:
    return gm_fail(err, GM_ERR_TYPE, "%s: metadata key '%s' value does not fit in %s", f->path, key, tname);
}

gm_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, gm_error *err) {
    uint64_t u = 0;
    gm_status st = get_int_in(f, key, true, UINT32_MAX, 0, 0, &u, NULL, "u32", err);
    if (!st) *out = (uint32_t)u;
    return st;
}

gm_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, gm_error *err) {
    return get_int_in(f, key, true, UINT64_MAX, 0, 0, out, NULL, "u64", err);
}

gm_status gguf_get_i32(const gguf_file *f, const char *key, int32_t *out, gm_error *err) {
    int64_t i = 0;
    gm_status st = get_int_in(f, key, false, 0, INT32_MIN, INT32_MAX, NULL, &i, "i32", err);
    if (!st) *out = (int32_t)i;
    return st;
}

gm_status gguf_get_f32(const gguf_file *f, const char *key, float *out, gm_error *err) {
    const gguf_kv *kv;
    gm_status st = get_kv(f, key, &kv, err);
    if (st) return st;
    gguf_vtype t = kv->val.type;
    if (t == GGUF_VT_F32 || t == GGUF_VT_F64) *out = (float)kv->val.v.f;
    else if (is_unsigned(t)) *out = (float)kv->val.v.u;
    else if (is_signed(t)) *out = (float)kv->val.v.i;
    else return wrong_type(f, kv, "a number", err);
    return GM_OK;
}

gm_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, gm_error *err) {
    const gguf_kv *kv;
    gm_status st = get_kv(f, key, &kv, err);
    if (st) return st;
    if (kv->val.type != GGUF_VT_BOOL) return wrong_type(f, kv, "bool", err);
    *out = kv->val.v.u != 0;
    return GM_OK;
}

gm_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, gm_error *err) {
    const gguf_kv *kv;
    gm_status st = get_kv(f, key, &kv, err);
    if (st) return st;
    if (kv->val.type != GGUF_VT_STRING) return wrong_type(f, kv, "string", err);
    *out = kv->val.v.str;
    return GM_OK;
}

gm_status gguf_get_arr(const gguf_file *f, const char *key, int elem, const gguf_value **out, gm_error *err) {
    const gguf_kv *kv;
    gm_status st = get_kv(f, key, &kv, err);
    if (st) return st;
    if (kv->val.type != GGUF_VT_ARRAY) return wrong_type(f, kv, "array", err);
    if (elem >= 0 && (int)kv->val.v.arr.elem != elem)
        return gm_fail(err, GM_ERR_TYPE, "%s: metadata key '%s' should be an array of %s but holds %s",
                       f->path, key, gguf_vtype_name(elem), gguf_vtype_name(kv->val.v.arr.elem));
    *out = &kv->val;
    return GM_OK;
}
