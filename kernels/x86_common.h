/* kernels/x86_common.h — small AVX2/F16C helpers shared by the x86 kernel files. Include it only inside
 * a block compiled with AVX2 + F16C enabled (each kernel file has its own ISA flags, so these are static
 * inline and compiled once per file). */
#ifndef GM_KERNELS_X86_COMMON_H
#define GM_KERNELS_X86_COMMON_H

#include <immintrin.h>
#include <stdint.h>

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* horizontal sum of 8 floats */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 bytes of nibbles -> 32 unsigned codes (low nibbles first) */
static inline __m256i nibbles(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

#endif
