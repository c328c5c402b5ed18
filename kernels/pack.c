/* kernels/pack.c — the Q5_0x16 row layout of kernels/pack.h, in portable C (load time only). */
#include "kernels/pack.h"

#include <string.h>

#include "quant/blocks.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The 32 packed bytes of block pair (q0, q1): codes j < 16 are the low nibbles of qs[j], codes
 * j >= 16 the high ones; b0 goes to the low nibble of byte j, b1 to the high one. */
static inline void pack_pair(const uint8_t *q0, const uint8_t *q1, uint8_t *d) {
#if defined(__SSE2__)
    const __m128i a = _mm_loadu_si128((const __m128i *)q0), b = _mm_loadu_si128((const __m128i *)q1);
    const __m128i m4 = _mm_set1_epi8(0x0F), h4 = _mm_set1_epi8((char)0xF0);
    _mm_storeu_si128((__m128i *)d, _mm_or_si128(_mm_and_si128(a, m4), _mm_and_si128(_mm_slli_epi16(b, 4), h4)));
    _mm_storeu_si128((__m128i *)(d + 16), _mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 4), m4), _mm_and_si128(b, h4)));
#else
    for (int j = 0; j < 16; j++) {
        d[j] = (uint8_t)((q0[j] & 15) | (q1[j] & 15) << 4);
        d[j + 16] = (uint8_t)((q0[j] >> 4) | (q1[j] & 0xF0));
    }
#endif
}

void gm_pack_q5_0x16_row(const void *src, void *dst, int64_t cols) {
    const gm_block_q5_0 *b = src;
    uint8_t *o = dst;
    const int64_t nb = cols / 32, npair = nb / 2;
    for (int64_t p0 = 0; p0 < npair; p0 += 8) {
        const gm_q5_0x16_group G = gm_q5_0x16_group_at(npair, p0);
        const gm_block_q5_0 *g = b + 2 * p0;
        for (int64_t i = 0; i < 2 * G.gp; i++) {
            memcpy(o + G.d + 2 * i, &g[i].d, 2);
            memcpy(o + G.qh + 4 * i, g[i].qh, 4);
        }
        for (int64_t k = 0; k < G.gp; k++) pack_pair(g[2 * k].qs, g[2 * k + 1].qs, o + G.qs + 32 * k);
    }
    if (nb & 1) memcpy(o + 44 * npair, &b[nb - 1], sizeof(gm_block_q5_0));
}

/* The inverse of gm_pack_q5_0x16_row, field by field (tests check the round trip). */
void gm_unpack_q5_0x16_row(const void *src, void *dst, int64_t cols) {
    const uint8_t *in = src;
    gm_block_q5_0 *b = dst;
    const int64_t nb = cols / 32, npair = nb / 2;
    for (int64_t p0 = 0; p0 < npair; p0 += 8) {
        const gm_q5_0x16_group G = gm_q5_0x16_group_at(npair, p0);
        gm_block_q5_0 *g = b + 2 * p0;
        for (int64_t i = 0; i < 2 * G.gp; i++) {
            memcpy(&g[i].d, in + G.d + 2 * i, 2);
            memcpy(g[i].qh, in + G.qh + 4 * i, 4);
        }
        for (int64_t k = 0; k < G.gp; k++) {
            const uint8_t *q = in + G.qs + 32 * k; /* b0 in the low nibbles, b1 in the high */
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 16; j++)
                    g[2 * k + h].qs[j] = (uint8_t)(((q[j] >> (4 * h)) & 15) | ((q[j + 16] >> (4 * h)) & 15) << 4);
        }
    }
    if (nb & 1) memcpy(&b[nb - 1], in + 44 * npair, sizeof(gm_block_q5_0));
}

/* one group: 8 rows (cols apart) -> cols x 8 halves; by 8 x 8 transposes where SSE2 has them */
static void pack_x8_group(const uint16_t *s, uint16_t *d, int64_t cols) {
    int64_t k = 0;
#if defined(__SSE2__)
    for (; k + 8 <= cols; k += 8) {
        __m128i a[8], t[8], u[8];
        for (int l = 0; l < 8; l++) a[l] = _mm_loadu_si128((const __m128i *)(s + l * cols + k));
        for (int l = 0; l < 8; l += 2) t[l] = _mm_unpacklo_epi16(a[l], a[l + 1]), t[l + 1] = _mm_unpackhi_epi16(a[l], a[l + 1]);
        for (int h = 0; h < 8; h += 4) {
            u[h] = _mm_unpacklo_epi32(t[h], t[h + 2]), u[h + 1] = _mm_unpackhi_epi32(t[h], t[h + 2]);
            u[h + 2] = _mm_unpacklo_epi32(t[h + 1], t[h + 3]), u[h + 3] = _mm_unpackhi_epi32(t[h + 1], t[h + 3]);
        }
        for (int c = 0; c < 4; c++) { /* u[c]: columns 2c, 2c + 1 of rows 0-3; u[c + 4]: of rows 4-7 */
            _mm_storeu_si128((__m128i *)(d + 8 * (k + 2 * c)), _mm_unpacklo_epi64(u[c], u[c + 4]));
            _mm_storeu_si128((__m128i *)(d + 8 * (k + 2 * c + 1)), _mm_unpackhi_epi64(u[c], u[c + 4]));
        }
    }
#endif
    for (; k < cols; k++)
        for (int l = 0; l < 8; l++) d[8 * k + l] = s[l * cols + k];
}

void gm_pack_x8(const void *src, void *dst, int64_t rows, int64_t cols) {
    const uint16_t *s = src;
    uint16_t *d = dst;
    for (int64_t g = 0; g < rows / 8; g++) pack_x8_group(s + g * 8 * cols, d + g * 8 * cols, cols);
}
