/* formats/gguf.h — GGUF v2/v3 reader: header, typed metadata, tensor infos, zero-copy mmap.
 *
 * Everything is validated at open time (counts, lengths, offsets, shapes, overlap, alignment),
 * so later accessors never read outside the mapping. Strings inside the file are NOT
 * NUL-terminated: they are (pointer, length) views into the map; keys and tensor names are
 * copied once into NUL-terminated strings for convenience.
 */
#ifndef GM_FORMATS_GGUF_H
#define GM_FORMATS_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemma.h"

typedef enum gguf_vtype {
    GGUF_VT_U8 = 0,
    GGUF_VT_I8 = 1,
    GGUF_VT_U16 = 2,
    GGUF_VT_I16 = 3,
    GGUF_VT_U32 = 4,
    GGUF_VT_I32 = 5,
    GGUF_VT_F32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_U64 = 10,
    GGUF_VT_I64 = 11,
    GGUF_VT_F64 = 12,
} gguf_vtype;

const char *gguf_vtype_name(int vt);

typedef struct gguf_str {
    const char *ptr; /* into the map, not NUL-terminated */
    uint64_t len;
} gguf_str;

/* One metadata value. Arrays keep a pointer to their first element in the map; elements of
 * fixed size (numbers, bool) can be read directly; strings and nested arrays via gguf_arr_iter. */
typedef struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u;   /* U8 U16 U32 U64 and BOOL (0/1) */
        int64_t i;    /* I8 I16 I32 I64 */
        double f;     /* F32 F64 */
        gguf_str str; /* STRING */
        struct {
            gguf_vtype elem;
            uint64_t n;
            const uint8_t *data; /* first element in the map */
            uint64_t nbytes;     /* bytes of all elements */
        } arr;                   /* ARRAY */
    } v;
} gguf_value;

typedef struct gguf_kv {
    char *key; /* NUL-terminated copy */
    gguf_value val;
} gguf_kv;

typedef struct gguf_tensor {
    char *name;         /* NUL-terminated copy */
    int n_dims;         /* 1..4 */
    int64_t ne[4];      /* ne[0] is the contiguous dimension; unused dims are 1 */
    int type;           /* gm_type id */
    uint64_t offset;    /* relative to the data section */
    uint64_t nbytes;
    const void *data;   /* into the map */
    bool hidden;        /* MTP / nextn tensor hidden unless requested */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    const uint8_t *map; /* whole file, read-only */
    uint64_t size;
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;       /* all tensors, hidden included */
    gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;     /* file offset of the data section */
} gguf_file;

typedef struct gguf_open_options {
    bool keep_mtp; /* false: tensors whose name has "mtp" or "nextn" are marked hidden */
} gguf_open_options;

/* Opens and validates path; on error returns the status and a message naming the file. */
gm_status gguf_open(const char *path, const gguf_open_options *opt, gguf_file **out, gm_error *err);
/* Same, from a caller-owned buffer (fuzzing, tests); buf must outlive the gguf_file. */
gm_status gguf_open_memory(const void *buf, uint64_t size, const char *name, const gguf_open_options *opt,
                           gguf_file **out, gm_error *err);
/* A gguf_file assembled in memory rather than parsed: a model stored another way (a Hugging Face folder) seen
 * through the names and layout a GGUF would have, so one loader serves both. Keys, names and the string /
 * array values (arrays of numbers only) are copied; tensor data stays the caller's (in its map, or its own
 * buffers) and must outlive the file. Each tensor's nbytes is computed from its type and ne; names and keys
 * must be unique. gguf_file_backed is false; gguf_close frees it. */
gm_status gguf_assemble(const char *name, const gguf_kv *kv, uint64_t n_kv, const gguf_tensor *tensors,
                        uint64_t n_tensors, gguf_file **out, gm_error *err);
void gguf_close(gguf_file *f);

/* Lookup: NULL when absent. gguf_find_tensor skips hidden tensors. */
/* true when f's bytes are its own read-only map of a file (gguf_open), false for gguf_open_memory */
bool gguf_file_backed(const gguf_file *f);
const gguf_kv *gguf_find(const gguf_file *f, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters. Missing key -> GM_ERR_NOT_FOUND, wrong type -> GM_ERR_TYPE, both with a message
 * naming the file, the key, the expected and the actual type. Integer getters accept any integer
 * type whose value fits; float getters accept F32/F64 (and integers). */
gm_status gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, gm_error *err);
gm_status gguf_get_i32(const gguf_file *f, const char *key, int32_t *out, gm_error *err);
gm_status gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out, gm_error *err);
gm_status gguf_get_f32(const gguf_file *f, const char *key, float *out, gm_error *err);
gm_status gguf_get_bool(const gguf_file *f, const char *key, bool *out, gm_error *err);
gm_status gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, gm_error *err);
/* An array whose element type must be elem (or any element type if elem < 0). */
gm_status gguf_get_arr(const gguf_file *f, const char *key, int elem, const gguf_value **out, gm_error *err);

/* Iterating arrays of any element type (strings and nested arrays are variable-sized).
 *   gguf_arr_iter it; gguf_arr_iter_init(&it, val);
 *   gguf_value e; while (gguf_arr_iter_next(&it, &e)) { ... }
 * Bounds were validated at open, so next() never fails on a file that opened. */
typedef struct gguf_arr_iter {
    gguf_vtype elem;
    uint64_t i, n;
    const uint8_t *p, *end;
} gguf_arr_iter;
void gguf_arr_iter_init(gguf_arr_iter *it, const gguf_value *arr);
bool gguf_arr_iter_next(gguf_arr_iter *it, gguf_value *out);

/* Size in bytes of one fixed-size element type (0 for STRING / ARRAY). */
size_t gguf_vtype_size(int vt);

#endif
