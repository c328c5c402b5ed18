/* formats/mmap.h — read-only whole-file memory maps, shared by the GGUF and safetensors readers. */
#ifndef GM_FORMATS_MMAP_H
#define GM_FORMATS_MMAP_H

#include <stdint.h>

#include "gemma.h"

typedef struct gm_mmap {
    const uint8_t *data; /* NULL for an empty mapping */
    uint64_t size;
} gm_mmap;

/* Maps a regular, non-empty file read-only. Errors name the path: missing file (GM_ERR_IO),
 * a directory or special file, an empty file (GM_ERR_FORMAT). */
gm_status gm_mmap_open(const char *path, gm_mmap *out, gm_error *err);
void gm_mmap_close(gm_mmap *m);

#endif
