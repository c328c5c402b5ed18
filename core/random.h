/* core/random.h — secret random words for keyed hashes (the prefix index's key): the kernel's
 * generator, never a seeded PRNG, so a client cannot predict them. */
#ifndef GM_CORE_RANDOM_H
#define GM_CORE_RANDOM_H

#include <stddef.h>
#include <stdint.h>

/* Fills out[0..n) from getrandom(2), else /dev/urandom, else (a last resort that is unpredictable to a
 * remote client but not secret from the local machine) clocks, the process id and addresses. Never fails. */
void gm_random_words(uint64_t *out, size_t n);

/* splitmix64: the next of a sequence of well-mixed words from the state *x (seeding, not secrets). */
static inline uint64_t gm_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif
