/* core/siphash.h — SipHash-2-4 (Aumasson and Bernstein) over whole 64-bit words, keyed by 128 secret bits.
 * Used where a hash of a client's data names something shared (the prefix index's blocks, an image's
 * identity): under a secret random key the outputs are unpredictable, so collisions cannot be aimed at. */
#ifndef GM_CORE_SIPHASH_H
#define GM_CORE_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

typedef struct gm_sip {
    uint64_t v[4];
    uint64_t n; /* words taken */
} gm_sip;

#define GM_SIP_ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

static inline void gm_sip_round(uint64_t v[4]) {
    v[0] += v[1], v[1] = GM_SIP_ROTL(v[1], 13), v[1] ^= v[0], v[0] = GM_SIP_ROTL(v[0], 32);
    v[2] += v[3], v[3] = GM_SIP_ROTL(v[3], 16), v[3] ^= v[2];
    v[0] += v[3], v[3] = GM_SIP_ROTL(v[3], 21), v[3] ^= v[0];
    v[2] += v[1], v[1] = GM_SIP_ROTL(v[1], 17), v[1] ^= v[2], v[2] = GM_SIP_ROTL(v[2], 32);
}

static inline gm_sip gm_sip_begin(const uint64_t key[2]) {
    return (gm_sip){{key[0] ^ 0x736f6d6570736575ull, key[1] ^ 0x646f72616e646f6dull, key[0] ^ 0x6c7967656e657261ull,
                     key[1] ^ 0x7465646279746573ull}, 0};
}

static inline void gm_sip_word(gm_sip *s, uint64_t m) {
    s->v[3] ^= m;
    gm_sip_round(s->v), gm_sip_round(s->v);
    s->v[0] ^= m;
    s->n++;
}

/* The closing block holds the message length in bytes (its top byte), as SipHash's does. */
static inline uint64_t gm_sip_end(gm_sip *s) {
    gm_sip_word(s, (s->n * 8) << 56);
    s->v[2] ^= 0xff;
    for (int r = 0; r < 4; r++) gm_sip_round(s->v);
    return s->v[0] ^ s->v[1] ^ s->v[2] ^ s->v[3];
}

#endif
