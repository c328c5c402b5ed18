/* core/random.h — secret random words for keyed hashes (the prefix index's key): the kernel's
 * generator, never a seeded PRNG, so a client cannot predict them. */
#ifndef GM_CORE_RANDOM_H
#define GM_CORE_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* Fills out[0..n) from getrandom(2), else /dev/urandom, else (a last resort that is unpredictable to a
 * remote client but not secret from the local machine) clocks, the process id and addresses. Never fails. */
void gm_random_words(uint64_t *out, size_t n);

#endif
