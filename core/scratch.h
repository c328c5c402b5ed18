/* core/scratch.h — many float arrays in one aligned allocation: the scratch of the vision encoders and of the CPU
 * backend's dense-row ops, each array on its own 64-byte lines (no false sharing between them, aligned vector loads). */
#ifndef GM_CORE_SCRATCH_H
#define GM_CORE_SCRATCH_H

#include <stddef.h>

typedef struct gm_scratch_part {
    float **p; /* where the array's address goes: NULL when n is 0 */
    size_t n;  /* floats */
} gm_scratch_part;

/* One 64-byte-aligned block holding parts[0..k); the block to free(), or NULL when out of memory (the parts are then
 * left as they were). *bytes (may be NULL): the block's size, also when the allocation failed. */
float *gm_scratch_carve(const gm_scratch_part *parts, size_t k, size_t *bytes);

#endif
