/* kernels/pack.h — internal: weight layouts rearranged at load time for the SIMD decode kernels.
 *
 * Q5_0 as stored in GGUF interleaves per 32-code block a f16 scale, 4 bytes of fifth bits and 16
 * bytes of nibbles (low nibbles = codes 0..15, high = 16..31). Turning one block pair into 64 codes
 * then costs a byte permute, a shift, a blend and a mask, and each pair's two scales need their own
 * convert and permute: the one-token dot ran at ~14 GB/s per core, instruction bound (docs/
 * performance.md). The "Q5_0x16" layout holds the same bits, in the same number of bytes, per row:
 *
 *   for each group of up to 8 block pairs (16 blocks; gp pairs in the group):
 *     d[2 gp]    f16   the blocks' scales, in order          -> one load + one convert per group
 *     qh[2 gp]   u32   the blocks' fifth bits, in order      -> one 64-bit mask per pair
 *     qs[gp][32] u8    pair (b0, b1): byte j = (code j of b0) & 15 | ((code j of b1) & 15) << 4
 *                                                            -> broadcast, one shift, one and
 *   if the row has an odd block count: its last block, unchanged (22 bytes).
 *
 * Packed bytes per row = blocks x 22, as in the file. The kernels give bit-identical results to
 * the file-layout kernels (tests/test_pack.c). */
#ifndef GM_KERNELS_PACK_H
#define GM_KERNELS_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "quant/quant.h"

/* Kernel type ids of packed layouts: the AVX-512 entry points of kernels/gemm.h take them where
 * they take a gm_type. The low byte is the file type the layout holds. */
#define GM_KTYPE_Q5_0X16 (0x100 | GM_TYPE_Q5_0)
#define GM_KTYPE_X8(type) (0x200 | (type)) /* rows in groups of 8 (below), for the AVX2 kernels */
#define GM_KTYPE_F16X8 GM_KTYPE_X8(GM_TYPE_F16)
#define GM_KTYPE_BF16X8 GM_KTYPE_X8(GM_TYPE_BF16)

/* Byte offsets, within a packed row, of the group that starts at block pair p0 (a multiple of 8) of
 * a row with npair pairs; an odd row's last block sits at byte 44 * npair. */
typedef struct {
    int64_t gp;       /* pairs in the group (8, or fewer in the last) */
    size_t d, qh, qs; /* its scales, fifth bits and packed nibbles */
} gm_q5_0x16_group;

static inline gm_q5_0x16_group gm_q5_0x16_group_at(int64_t npair, int64_t p0) {
    const int64_t gp = npair - p0 < 8 ? npair - p0 : 8;
    const size_t base = (size_t)(44 * p0);
    return (gm_q5_0x16_group){gp, base, base + (size_t)(4 * gp), base + (size_t)(12 * gp)};
}

/* Rearranges one Q5_0 row of `cols` (a multiple of 32) elements; src and dst must not overlap. */
void gm_pack_q5_0x16_row(const void *src, void *dst, int64_t cols);
/* The inverse: back to the GGUF block layout (tests, and any reader that wants file bytes). */
void gm_unpack_q5_0x16_row(const void *src, void *dst, int64_t cols);

/* F16x8 / BF16x8 (the AVX2 kernels of kernels/f16x8_avx2.c): rows in groups of 8, each group its 8 rows'
 * 16-bit values column by column (column k: rows 8g .. 8g + 7 side by side), 16 bytes per column; the same
 * bytes as the file's 8 rows. Packs rows (a multiple of 8) of `cols` 16-bit values; src and dst must not
 * overlap. */
void gm_pack_x8(const void *src, void *dst, int64_t rows, int64_t cols);

/* Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K and Q6_K as x8 (the AVX2 kernels of kernels/qtiles_avx2.c): rows in
 * groups of 8, each group block by block (block b of the group's 8 rows in 8 x the block's bytes, as in the
 * file), the fields in the order the one-token kernel reads them. 32-code blocks:
 *
 *   d[8]      f16  the 8 rows' scales                       -> one load + one conversion for 8 rows
 *   m[8]      f16  Q4_1 / Q5_1: the 8 rows' offsets
 *   qh[32]    u8   Q5_0 / Q5_1: byte 4r + k, bit g = the fifth bit of code 4g + k of row r
 *   qs        u8   nibble types: 4 vectors of 32 bytes, vector j: bytes 4r .. 4r + 3 = the file's qs bytes
 *                  4j .. 4j + 3 of row r (low nibbles codes 4j .. 4j + 3, high nibbles codes 16 + 4j ..);
 *                  Q8_0: 8 vectors, vector g: bytes 4r .. 4r + 3 = codes 4g .. 4g + 3 of row r
 *
 * so that one load, a mask (and a shift) and the fifth bits' shift and mask give the codes of 4 columns of
 * all 8 rows, row r in int32 lane r, ready for vpmaddubsw against 4 broadcast activation bytes. 256-code
 * super-blocks (chunk c = codes 32c .. 32c + 31):
 *
 *   Q4_K   d[8], dmin[8] f16; 64 bytes, byte 8c + r = low 4 bits of row r's chunk-c scale | of its min << 4;
 *          32 bytes, byte 8c + r (c < 4) = the high 2 bits of: scale c (bits 0-1), min c (2-3), scale c + 4
 *          (4-5), min c + 4 (6-7); then vectors (p, g), p < 4, g < 8: lane r = the file's qs bytes 32p + 4g ..
 *          + 3 of row r (low nibbles chunk 2p, high chunk 2p + 1)
 *   Q6_K   d[8] f16; 8 x 16 bytes, chunk c: byte 2r + e = row r's scale 2c + e (int8); then per step (h, g),
 *          h < 2, g < 8, 96 bytes: ql vectors k = 0, 1 (lane r: ql bytes 64h + 32k + 4g .. + 3 of row r; low
 *          nibbles chunk 4h + k, high chunk 4h + k + 2) and the qh vector (qh bytes 32h + 4g .. + 3: bits 2k,
 *          2k + 1 the high bits of chunk 4h + k)
 *
 * Packs rows (a multiple of 8) of `cols` (a multiple of the block); src and dst must not overlap.
 * gm_unpack_qx8 is the inverse (tests). */
void gm_pack_qx8(int type, const void *src, void *dst, int64_t rows, int64_t cols);
void gm_unpack_qx8(int type, const void *src, void *dst, int64_t rows, int64_t cols);

#endif
