/* kernels/x86_common.h — small AVX2/F16C helpers shared by the x86 kernel files. Include it only inside
 * a block compiled with AVX2 + F16C enabled (each kernel file has its own ISA flags, so these are static
 * inline and compiled once per file). */
#ifndef GM_KERNELS_X86_COMMON_H
#define GM_KERNELS_X86_COMMON_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* horizontal sum of 8 floats */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of nibbles -> 32 unsigned codes (low nibbles first): the bytes in both halves (a broadcast
 * load), the upper half shifted down 4, masked — three instructions where split halves take five */
static inline __m256i nibbles(const uint8_t *qs) {
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

#if defined(__AVX512BW__)
/* Q5_0x16 (kernels/pack.h): the 64 codes (0..31) of one block pair from its 32 packed nibble bytes
 * and its 8 fifth-bit bytes: the bytes in both halves, the upper half shifted down 4, masked, and
 * 16 added where the fifth bit is set. */
static inline __m512i q5_0x16_pair_codes(const uint8_t *qs, const uint8_t *qh) {
    const __m512i sh = _mm512_set_epi64(0x0004000400040004ll, 0x0004000400040004ll, 0x0004000400040004ll,
                                        0x0004000400040004ll, 0, 0, 0, 0);
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qs));
    const __m512i c = _mm512_and_si512(_mm512_srlv_epi16(q, sh), _mm512_set1_epi8(0x0F));
    uint64_t h;
    memcpy(&h, qh, 8);
    return _mm512_mask_add_epi8(c, (__mmask64)h, c, _mm512_set1_epi8(0x10));
}
#endif

#endif
