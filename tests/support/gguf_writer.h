/* tests/support/gguf_writer.h — a test-side GGUF v3 writer (the library only reads GGUF).
 *
 * Build a file in memory, then write it:
 *
 *   gw_writer *w = gw_new();
 *   gw_add_str(w, "general.architecture", "gemma3");
 *   gw_add_u32(w, "gemma3.block_count", 2);
 *   const char *toks[] = {"<pad>", "<eos>"};
 *   gw_add_arr_str(w, "tokenizer.ggml.tokens", 2, toks);
 *   float scores[] = {0, 0};
 *   gw_add_arr(w, "tokenizer.ggml.scores", GGUF_VT_F32, 2, scores);
 *   int64_t ne[2] = {64, 300};                       // ggml order: ne[0] contiguous
 *   gw_add_tensor_f32(w, "token_embd.weight", GM_TYPE_Q8_0, 2, ne, values); // quantized here
 *   if (!gw_write_file(w, "/tmp/x.gguf")) fprintf(stderr, "%s\n", gw_error(w));
 *   gw_free(w);
 *
 * Metadata of every type: scalars, strings, arrays of fixed-size elements, arrays of strings,
 * and (through gw_add_raw plus the gw_buf encoders) nested arrays or any hand-made value.
 * Tensors: from f32 values quantized row by row with gm_type_traits_of(type)->quant_row, or
 * raw bytes. Keys and tensors are written in insertion order; the writer does not check for
 * duplicates (tests use that to build bad files). Each tensor's data starts at a multiple of
 * the alignment (default 32; gw_set_alignment also records general.alignment).
 * Functions return true on success; on failure gw_error() says why. Not for production use:
 * everything is kept in memory.
 */
#ifndef GM_TESTS_GGUF_WRITER_H
#define GM_TESTS_GGUF_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"

/* A growable byte buffer with little-endian encoders, for hand-made values (nested arrays). */
typedef struct gw_buf {
    uint8_t *p;
    size_t n, cap;
} gw_buf;
void gw_buf_bytes(gw_buf *b, const void *src, size_t n);
void gw_buf_u32(gw_buf *b, uint32_t v);
void gw_buf_u64(gw_buf *b, uint64_t v);
void gw_buf_str(gw_buf *b, const char *s); /* u64 length + bytes */
void gw_buf_free(gw_buf *b);

typedef struct gw_writer gw_writer;

gw_writer *gw_new(void);
void gw_free(gw_writer *w);
const char *gw_error(const gw_writer *w);

/* Header fields; defaults: version 3, alignment 32. gw_set_alignment also adds the
 * general.alignment key (u32). */
void gw_set_version(gw_writer *w, uint32_t version);
void gw_set_alignment(gw_writer *w, uint32_t alignment);

bool gw_add_u8(gw_writer *w, const char *key, uint8_t v);
bool gw_add_i8(gw_writer *w, const char *key, int8_t v);
bool gw_add_u16(gw_writer *w, const char *key, uint16_t v);
bool gw_add_i16(gw_writer *w, const char *key, int16_t v);
bool gw_add_u32(gw_writer *w, const char *key, uint32_t v);
bool gw_add_i32(gw_writer *w, const char *key, int32_t v);
bool gw_add_u64(gw_writer *w, const char *key, uint64_t v);
bool gw_add_i64(gw_writer *w, const char *key, int64_t v);
bool gw_add_f32(gw_writer *w, const char *key, float v);
bool gw_add_f64(gw_writer *w, const char *key, double v);
bool gw_add_bool(gw_writer *w, const char *key, bool v);
bool gw_add_str(gw_writer *w, const char *key, const char *v);
/* Array of n fixed-size elements (elem: any gguf_vtype but STRING / ARRAY; BOOL is 1 byte each),
 * data in the element's in-memory form (uint8_t for BOOL). */
bool gw_add_arr(gw_writer *w, const char *key, gguf_vtype elem, uint64_t n, const void *data);
bool gw_add_arr_str(gw_writer *w, const char *key, uint64_t n, const char *const *strs);
/* Any value: type id and the already-encoded value bytes (for ARRAY: elem type u32, count u64,
 * elements). */
bool gw_add_raw(gw_writer *w, const char *key, uint32_t vtype, const void *bytes, size_t n);

/* Tensor from f32 values (ne[0]*ne[1]*ne[2]*ne[3] of them, row-major with ne[0] contiguous),
 * converted to type: F32 copied, F16/BF16 rounded, others quantized with the reference quantizer.
 * ne[0] must be a multiple of the type's block size. */
bool gw_add_tensor_f32(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                       const float *values);
/* Tensor from already-encoded bytes (nbytes must match the shape and type). */
bool gw_add_tensor_raw(gw_writer *w, const char *name, int type, int n_dims, const int64_t *ne,
                       const void *data, size_t nbytes);

/* Serializes to a malloc'd buffer (caller frees) or to a file. */
bool gw_to_memory(gw_writer *w, uint8_t **out, size_t *len);
bool gw_write_file(gw_writer *w, const char *path);

/* One metadata value (as the reader holds it) encoded as GGUF bytes: scalars, strings, arrays of either. */
void gw_encode_value(gw_buf *b, const gguf_value *v);

/* Variants of a written or committed file: dst gets src's keys (general.alignment aside: the writer's own) and
 * tensors, less drop_key and drop_tensor (NULL: none), then the key add_key (NULL: none) of type add_type whose
 * encoded value is add_bytes (gw_add_raw), then what add appends (NULL: nothing). A replacement key is dropped,
 * then added. */
typedef struct gw_edit {
    const char *drop_key, *drop_tensor;
    void (*add)(gw_writer *w);
    const char *add_key;
    uint32_t add_type;
    const void *add_bytes;
    size_t add_len;
} gw_edit;
bool gw_copy_gguf(const char *src, const char *dst, const gw_edit *ed);

/* A per-layer array value (element type, count, entries) for gw_add_raw / gw_edit.add_key: entry il is 1 where
 * flags[il] is 's' (a sliding layer), else 0, as elem (BOOL, any integer, F32 or F64). */
void gw_buf_flags(gw_buf *b, gguf_vtype elem, const char *flags);
/* src copied to dst with <arch>.attention.sliding_window_pattern replaced: flags as an array of elem
 * (gw_buf_flags), or (flags NULL) the number n as a value of type elem (an integer type). */
bool gw_copy_pattern(const char *src, const char *dst, const char *arch, gguf_vtype elem, const char *flags, int64_t n);

#endif
