/* core/scratch.c — many float arrays in one aligned allocation (see scratch.h). */
#include "core/scratch.h"

#include <stdlib.h>

static size_t lines(size_t n) { return (n + 15) / 16 * 16; } /* floats, rounded up to 64-byte lines */

float *gm_scratch_carve(const gm_scratch_part *parts, size_t k, size_t *bytes) {
    size_t total = 0;
    for (size_t i = 0; i < k; i++) total += lines(parts[i].n);
    if (bytes) *bytes = total * sizeof(float);
    float *buf = aligned_alloc(64, (total ? total : 16) * sizeof(float));
    if (!buf) return NULL;
    float *p = buf;
    for (size_t i = 0; i < k; i++) {
        *parts[i].p = parts[i].n ? p : NULL;
        p += lines(parts[i].n);
    }
    return buf;
}
