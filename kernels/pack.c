/* kernels/pack.c — the Q5_0x16 row layout of kernels/pack.h, in portable C (load time only). */
#include "kernels/pack.h"

#include <string.h>

#include "quant/blocks.h"

void gm_pack_q5_0x16_row(const void *src, void *dst, int64_t cols) {
    const gm_block_q5_0 *b = src;
    uint8_t *o = dst;
    const int64_t nb = cols / 32, npair = nb / 2;
    for (int64_t p0 = 0; p0 < npair; p0 += 8) {
        const int64_t gp = npair - p0 < 8 ? npair - p0 : 8;
        const gm_block_q5_0 *g = b + 2 * p0;
        for (int64_t i = 0; i < 2 * gp; i++) memcpy(o + 2 * i, &g[i].d, 2);
        o += 4 * gp;
        for (int64_t i = 0; i < 2 * gp; i++) memcpy(o + 4 * i, g[i].qh, 4);
        o += 8 * gp;
        for (int64_t k = 0; k < gp; k++) { /* codes j < 16 are low nibbles of qs[j], codes j >= 16 high ones */
            const uint8_t *q0 = g[2 * k].qs, *q1 = g[2 * k + 1].qs;
            uint8_t *d = o + 32 * k;
            for (int j = 0; j < 16; j++) {
                d[j] = (uint8_t)((q0[j] & 15) | (q1[j] & 15) << 4);
                d[j + 16] = (uint8_t)((q0[j] >> 4) | (q1[j] & 0xF0));
            }
        }
        o += 32 * gp;
    }
    if (nb & 1) memcpy(o, &b[nb - 1], sizeof(gm_block_q5_0));
}

void gm_unpack_q5_0x16_row(const void *src, void *dst, int64_t cols) {
    const uint8_t *in = src;
    gm_block_q5_0 *b = dst;
    const int64_t nb = cols / 32, npair = nb / 2;
    for (int64_t p0 = 0; p0 < npair; p0 += 8) {
        const int64_t gp = npair - p0 < 8 ? npair - p0 : 8;
        gm_block_q5_0 *g = b + 2 * p0;
        for (int64_t i = 0; i < 2 * gp; i++) memcpy(&g[i].d, in + 2 * i, 2);
        in += 4 * gp;
        for (int64_t i = 0; i < 2 * gp; i++) memcpy(g[i].qh, in + 4 * i, 4);
        in += 8 * gp;
        for (int64_t k = 0; k < gp; k++)
            for (int h = 0; h < 2; h++)
                for (int j = 0; j < 16; j++) {
                    const uint8_t lo = in[32 * k + j], hi = in[32 * k + j + 16];
                    const int s = 4 * h; /* b0 in the low nibbles, b1 in the high */
                    g[2 * k + h].qs[j] = (uint8_t)(((lo >> s) & 15) | ((hi >> s) & 15) << 4);
                }
        in += 32 * gp;
    }
    if (nb & 1) memcpy(&b[nb - 1], in, sizeof(gm_block_q5_0));
}
