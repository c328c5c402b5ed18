/* kernels/pack.c — the packed layouts of kernels/pack.h (Q5_0x16, F16x8 / BF16x8, the quantized x8), in
 * portable C with SSE2 where it helps (load time only). */
#include "kernels/pack.h"

#include <stdbool.h>
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

/* ---- x8 layouts of the quantized types */

/* n bytes between the packed copy and the file: file -> x8 when packing, x8 -> file when unpacking (one
 * function per layout serves both directions, so they cannot drift apart) */
static inline void move(bool pack, void *x8, void *file, size_t n) { pack ? memcpy(x8, file, n) : memcpy(file, x8, n); }

/* where a file block keeps its fields (offsets within the block; 0 where a type has none but d) */
typedef struct {
    size_t bytes, m, qh, qs; /* d is at 0 in every one of these types */
    int nq;                  /* code bytes per block: 16 (nibbles) or 32 (Q8_0) */
} qx8_fields;

static bool qx8_fields_of(int type, qx8_fields *f) {
    switch (type) {
    case GM_TYPE_Q4_0: *f = (qx8_fields){sizeof(gm_block_q4_0), 0, 0, offsetof(gm_block_q4_0, qs), 16}; return true;
    case GM_TYPE_Q4_1: *f = (qx8_fields){sizeof(gm_block_q4_1), 2, 0, offsetof(gm_block_q4_1, qs), 16}; return true;
    case GM_TYPE_Q5_0:
        *f = (qx8_fields){sizeof(gm_block_q5_0), 0, offsetof(gm_block_q5_0, qh), offsetof(gm_block_q5_0, qs), 16};
        return true;
    case GM_TYPE_Q5_1:
        *f = (qx8_fields){sizeof(gm_block_q5_1), 2, offsetof(gm_block_q5_1, qh), offsetof(gm_block_q5_1, qs), 16};
        return true;
    case GM_TYPE_Q8_0: *f = (qx8_fields){sizeof(gm_block_q8_0), 0, 0, offsetof(gm_block_q8_0, qs), 32}; return true;
    default: return false;
    }
}

/* bits k of v (k < 4) to bits 8k (the four bytes' bit 0), and back */
static inline uint32_t spread4(uint32_t v) { return (v & 1u) | (v & 2u) << 7 | (v & 4u) << 14 | (v & 8u) << 21; }
static inline uint32_t gather4(uint32_t h) { return (h & 1u) | (h >> 7 & 2u) | (h >> 14 & 4u) | (h >> 21 & 8u); }

/* one group-block (8 rows' block b, 8 x f.bytes) <-> the 8 file blocks; pack = false unpacks */
static void qx8_block(const qx8_fields *f, char *const blk[8], char *o, bool pack) {
    size_t at = 0;
    for (int r = 0; r < 8; r++) move(pack, o + 2 * r, blk[r], 2);
    at += 16;
    if (f->m) {
        for (int r = 0; r < 8; r++) move(pack, o + at + 2 * r, blk[r] + f->m, 2);
        at += 16;
    }
    if (f->qh) { /* row r's 4 bytes as one little-endian word: bit 8k + g = fifth bit of code 4g + k */
        for (int r = 0; r < 8; r++) {
            uint32_t qh = 0, h = 0;
            if (pack) {
                memcpy(&qh, blk[r] + f->qh, 4);
                for (int g = 0; g < 8; g++) h |= spread4((qh >> (4 * g)) & 15u) << g;
                memcpy(o + at + 4 * r, &h, 4);
            } else {
                memcpy(&h, o + at + 4 * r, 4);
                for (int g = 0; g < 8; g++) qh |= gather4(h >> g) << (4 * g);
                memcpy(blk[r] + f->qh, &qh, 4);
            }
        }
        at += 32;
    }
    for (int j = 0; j < f->nq / 4; j++) /* vector j, lane r: code bytes 4j .. 4j + 3 of row r */
        for (int r = 0; r < 8; r++) move(pack, o + at + 32 * j + 4 * r, blk[r] + f->qs + 4 * j, 4);
}

/* Q4_K group-superblock (8 x 144 bytes): d[8], dmin[8], the 6-bit scales and mins split into low nibbles (byte
 * 32 + 8c + r: scale | min << 4 of chunk c of row r) and high bits (byte 96 + 8c + r for c < 4: bits 0-1 scale
 * of chunk c, 2-3 its min, 4-5 scale of chunk c + 4, 6-7 its min), then the codes (kernels/pack.h). */
static void q4k_x8_block(char *const blk[8], char *o, bool pack) {
    uint8_t *L = (uint8_t *)o + 32, *H = (uint8_t *)o + 96;
    for (int r = 0; r < 8; r++) {
        gm_block_q4_K *b = (gm_block_q4_K *)blk[r];
        move(pack, o + 2 * r, &b->d, 2), move(pack, o + 16 + 2 * r, &b->dmin, 2);
        for (int cp = 0; cp < 4; cp++)
            for (int g = 0; g < 8; g++) move(pack, o + 128 + 32 * (8 * cp + g) + 4 * r, b->qs + 32 * cp + 4 * g, 4);
        if (pack) {
            int sc[8], mn[8];
            for (int c = 0; c < 8; c++) gm_k4_scale_min(c, b->scales, &sc[c], &mn[c]);
            for (int c = 0; c < 8; c++) L[8 * c + r] = (uint8_t)((sc[c] & 15) | (mn[c] & 15) << 4);
            for (int c = 0; c < 4; c++)
                H[8 * c + r] = (uint8_t)(sc[c] >> 4 | (mn[c] >> 4) << 2 | (sc[c + 4] >> 4) << 4 | (mn[c + 4] >> 4) << 6);
        } else {
            int sc[8], mn[8];
            for (int c = 0; c < 8; c++) {
                const int h = H[8 * (c % 4) + r] >> (c < 4 ? 0 : 4);
                sc[c] = (L[8 * c + r] & 15) | (h & 3) << 4;
                mn[c] = (L[8 * c + r] >> 4) | (h >> 2 & 3) << 4;
            }
            for (int j = 0; j < 4; j++) { /* the inverse of gm_k4_scale_min */
                b->scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
                b->scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
                b->scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
            }
        }
    }
}

/* Q6_K group-superblock (8 x 210 bytes): d[8], scales (byte 16 + 16c + 2r + e: scale 2c + e of row r), then per
 * step (h, g) at 144 + 96 (8h + g) the ql vectors k = 0, 1 and the qh vector (kernels/pack.h). */
static void q6k_x8_block(char *const blk[8], char *o, bool pack) {
    const size_t d = offsetof(gm_block_q6_K, d), sc = offsetof(gm_block_q6_K, scales);
    const size_t ql = offsetof(gm_block_q6_K, ql), qh = offsetof(gm_block_q6_K, qh);
    for (int r = 0; r < 8; r++) {
        char *b = blk[r];
        move(pack, o + 2 * r, b + d, 2);
        for (int c = 0; c < 8; c++) move(pack, o + 16 + 16 * c + 2 * r, b + sc + 2 * c, 2);
        for (int h = 0; h < 2; h++)
            for (int g = 0; g < 8; g++) {
                char *step = o + 144 + 96 * (8 * h + g) + 4 * r;
                for (int k = 0; k < 2; k++) move(pack, step + 32 * k, b + ql + 64 * h + 32 * k + 4 * g, 4);
                move(pack, step + 64, b + qh + 32 * h + 4 * g, 4);
            }
    }
}

/* file: read only when packing (the one cast of gm_pack_qx8's const source) */
static void qx8_rows(int type, void *file, void *x8, int64_t rows, int64_t cols, bool pack) {
    qx8_fields f = {0};
    const bool k4 = type == GM_TYPE_Q4_K, k6 = type == GM_TYPE_Q6_K;
    if (!k4 && !k6 && !qx8_fields_of(type, &f)) return;
    const size_t bytes = k4 ? sizeof(gm_block_q4_K) : k6 ? sizeof(gm_block_q6_K) : f.bytes;
    const int64_t nb = cols / (k4 || k6 ? 256 : 32);
    const size_t rb = bytes * (size_t)nb;
    for (int64_t g = 0; g < rows / 8; g++)
        for (int64_t b = 0; b < nb; b++) {
            char *blk[8];
            for (int r = 0; r < 8; r++) blk[r] = (char *)file + (size_t)(8 * g + r) * rb + (size_t)b * bytes;
            char *o = (char *)x8 + (size_t)g * 8 * rb + (size_t)b * 8 * bytes;
            if (k4) q4k_x8_block(blk, o, pack);
            else if (k6) q6k_x8_block(blk, o, pack);
            else qx8_block(&f, blk, o, pack);
        }
}

void gm_pack_qx8(int type, const void *src, void *dst, int64_t rows, int64_t cols) {
    qx8_rows(type, (void *)src, dst, rows, cols, true);
}

void gm_unpack_qx8(int type, const void *src, void *dst, int64_t rows, int64_t cols) {
    qx8_rows(type, dst, (void *)src, rows, cols, false);
}
