/* formats/safetensors.h — safetensors reader: single files and sharded folders
 * (model.safetensors.index.json + its shards), memory-mapped, zero-copy.
 *
 * File layout: u64 N (little-endian), N bytes of JSON header
 *   {"name": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {...}}
 * then the data; offsets are relative to byte 8 + N. Shapes are in PyTorch order (last dim
 * contiguous), the reverse of ggml's ne[].
 *
 * Everything is validated at open: header length (< file size, <= 100 MB), JSON syntax, each
 * entry's fields, shape * dtype size == end - begin (no overflow), offsets inside the data,
 * no two tensors overlapping, no duplicate names. Every dtype of the format is parsed; only
 * F32, F16 and BF16 have a gm_type (st_tensor_type()), the others are refused where a tensor
 * is used, with a message naming the tensor and its dtype.
 */
#ifndef GM_FORMATS_SAFETENSORS_H
#define GM_FORMATS_SAFETENSORS_H

#include <stdbool.h>
#include <stdint.h>

#include "gemma.h"

enum { ST_MAX_DIMS = 8 };

typedef struct st_tensor {
    char *name;            /* NUL-terminated copy */
    char dtype[12];        /* as written in the file: "F32", "BF16", "I8", ... */
    int type;              /* gm_type for F32 / F16 / BF16, -1 for any other dtype */
    int n_dims;            /* 0 (scalar) .. ST_MAX_DIMS */
    int64_t shape[ST_MAX_DIMS]; /* PyTorch order, as in the file */
    uint64_t begin, end;   /* relative to the data section */
    const void *data;      /* into the map */
    uint64_t nbytes;
    int shard;             /* index of the file in its st_set (0 for a single file) */
} st_tensor;

typedef struct st_file {
    char *path;
    const uint8_t *map;    /* whole file */
    uint64_t size;
    uint64_t header_len;   /* N */
    uint64_t data_offset;  /* 8 + N */
    uint64_t n_tensors;
    st_tensor *tensors;    /* sorted by name */
    bool has_metadata;     /* "__metadata__" present */
} st_file;

/* Opens and validates one .safetensors file. */
gm_status st_open(const char *path, st_file **out, gm_error *err);
/* Same from a caller-owned buffer that must outlive the st_file (fuzzing, tests). */
gm_status st_open_memory(const void *buf, uint64_t size, const char *name, st_file **out, gm_error *err);
void st_close(st_file *f);
const st_tensor *st_find(const st_file *f, const char *name); /* NULL if absent */

/* Element size of a safetensors dtype name, 0 if unknown ("F32" -> 4, "F8_E4M3" -> 1, ...). */
int st_dtype_size(const char *dtype);
/* gm_type of a tensor, or GM_ERR_UNSUPPORTED naming the file, the tensor and its dtype. */
gm_status st_tensor_type(const st_tensor *t, const char *file, int *type, gm_error *err);

/* A model's tensors across one or many files. */
/* true when f's bytes are its own read-only map of a file (st_open), false for st_open_memory */
bool st_file_backed(const st_file *f);

typedef struct st_set {
    char *dir;             /* folder holding the files */
    int n_files;
    st_file **files;
    uint64_t n_tensors;
    const st_tensor **tensors; /* all tensors, sorted by name */
} st_set;

/* path: a folder (model.safetensors.index.json, else model.safetensors, else the only
 * *.safetensors file) or a single .safetensors file. With an index, every shard named in its
 * weight_map must exist and hold the tensors the index assigns to it; a tensor present in two
 * shards is an error. */
gm_status st_set_open(const char *path, st_set **out, gm_error *err);
void st_set_close(st_set *s);
const st_tensor *st_set_find(const st_set *s, const char *name);
/* Path of the file holding t. */
const char *st_set_file_of(const st_set *s, const st_tensor *t);

#endif
