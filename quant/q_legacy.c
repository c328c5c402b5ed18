/* quant/q_legacy.c — the 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1: scalar
 * dequantization, the reference quantizers (the same arithmetic as ggml's quantize_row_*_ref, so
 * our bytes equal llama.cpp's), and integer dot products against Q8_0 / Q8_1 activations. */
#include <float.h>
#include <math.h>

#include "quant/blocks.h"

static inline float h2f(uint16_t h) { return gm_fp16_to_fp32(h); }

/* Largest |x| in a block and the signed value that has it (first one on ties). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void minmax(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ------------------------------------------------------------------ Q4_0: (q - 8) * d */

void gm_dequant_q4_0(const void *src, float *dst, int64_t n) {
    const gm_block_q4_0 *b = src;
    for (int64_t i = 0; i < n / GM_QK; i++, dst += GM_QK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = ((b[i].qs[j] & 0x0F) - 8) * d;
            dst[j + 16] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void gm_quant_q4_0(const float *src, void *dst, int64_t n) {
    gm_block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / GM_QK; i++, src += GM_QK) {
        /* the scale maps the extreme value to -8, using the full asymmetric range */
        const float d = signed_absmax(src, GM_QK) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = gm_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int q0 = gm_trunc_clamp(src[j] * id + 8.5f, 15);
            int q1 = gm_trunc_clamp(src[j + 16] * id + 8.5f, 15);
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void gm_vec_dot_q4_0_q8_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q4_0 *x = w;
    const gm_block_q8_0 *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += ((x[i].qs[j] & 0x0F) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        acc += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
    }
    *s = acc;
}

/* ------------------------------------------------------------------ Q4_1: q * d + m */

void gm_dequant_q4_1(const void *src, float *dst, int64_t n) {
    const gm_block_q4_1 *b = src;
    for (int64_t i = 0; i < n / GM_QK; i++, dst += GM_QK) {
        const float d = h2f(b[i].d), m = h2f(b[i].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = (b[i].qs[j] & 0x0F) * d + m;
            dst[j + 16] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}

void gm_quant_q4_1(const float *src, void *dst, int64_t n) {
    gm_block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / GM_QK; i++, src += GM_QK) {
        float mn, mx;
        minmax(src, GM_QK, &mn, &mx);
        const float d = (mx - mn) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = gm_fp32_to_fp16(d);
        b[i].m = gm_fp32_to_fp16(mn);
        for (int j = 0; j < 16; j++) {
            int q0 = gm_trunc_clamp((src[j] - mn) * id + 0.5f, 15);
            int q1 = gm_trunc_clamp((src[j + 16] - mn) * id + 0.5f, 15);
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void gm_vec_dot_q4_1_q8_1(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q4_1 *x = w;
    const gm_block_q8_1 *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (x[i].qs[j] & 0x0F) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        acc += (float)sumi * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
    }
    *s = acc;
}

/* ------------------------------------------------------------------ Q5_0: (q5 - 16) * d */

void gm_dequant_q5_0(const void *src, float *dst, int64_t n) {
    const gm_block_q5_0 *b = src;
    for (int64_t i = 0; i < n / GM_QK; i++, dst += GM_QK) {
        const float d = h2f(b[i].d);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = (q0 - 16) * d;
            dst[j + 16] = (q1 - 16) * d;
        }
    }
}

void gm_quant_q5_0(const float *src, void *dst, int64_t n) {
    gm_block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / GM_QK; i++, src += GM_QK) {
        const float d = signed_absmax(src, GM_QK) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = gm_fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = gm_trunc_clamp(src[j] * id + 16.5f, 31);
            int q1 = gm_trunc_clamp(src[j + 16] * id + 16.5f, 31);
            b[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((uint32_t)(q0 >> 4) & 1u) << j;
            qh |= ((uint32_t)(q1 >> 4) & 1u) << (j + 16);
        }
        memcpy(b[i].qh, &qh, sizeof qh);
    }
}

void gm_vec_dot_q5_0_q8_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q5_0 *x = w;
    const gm_block_q8_0 *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        const uint32_t qh = load_u32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = ((x[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4)) - 16;
            int q1 = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) - 16;
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        acc += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
    }
    *s = acc;
}

/* ------------------------------------------------------------------ Q5_1: q5 * d + m */

void gm_dequant_q5_1(const void *src, float *dst, int64_t n) {
    const gm_block_q5_1 *b = src;
    for (int64_t i = 0; i < n / GM_QK; i++, dst += GM_QK) {
        const float d = h2f(b[i].d), m = h2f(b[i].m);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int q0 = (b[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = q0 * d + m;
            dst[j + 16] = q1 * d + m;
        }
    }
}

void gm_quant_q5_1(const float *src, void *dst, int64_t n) {
    gm_block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / GM_QK; i++, src += GM_QK) {
        float mn, mx;
        minmax(src, GM_QK, &mn, &mx);
        const float d = (mx - mn) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        b[i].d = gm_fp32_to_fp16(d);
        b[i].m = gm_fp32_to_fp16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = gm_trunc_clamp((src[j] - mn) * id + 0.5f, 31);
            int q1 = gm_trunc_clamp((src[j + 16] - mn) * id + 0.5f, 31);
            b[i].qs[j] = (uint8_t)((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= ((uint32_t)(q0 >> 4) & 1u) << j;
            qh |= ((uint32_t)(q1 >> 4) & 1u) << (j + 16);
        }
        memcpy(b[i].qh, &qh, sizeof qh);
    }
}

void gm_vec_dot_q5_1_q8_1(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q5_1 *x = w;
    const gm_block_q8_1 *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        const uint32_t qh = load_u32(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (x[i].qs[j] & 0x0F) | (int)(((qh >> j) & 1u) << 4);
            int q1 = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            sumi += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        acc += (float)sumi * (h2f(x[i].d) * h2f(y[i].d)) + h2f(x[i].m) * h2f(y[i].s);
    }
    *s = acc;
}

/* ------------------------------------------------------------------ Q8_0 / Q8_1: q * d */

void gm_dequant_q8_0(const void *src, float *dst, int64_t n) {
    const gm_block_q8_0 *b = src;
    for (int64_t i = 0; i < n / GM_QK; i++, dst += GM_QK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < GM_QK; j++) dst[j] = b[i].qs[j] * d;
    }
}

/* Shared by Q8_0 and Q8_1: d = amax / 127, q = roundf(x / d) (half away from zero). Returns
 * the unrounded d; the block stores it as f16. */
static float quant_block_q8(const float *x, int8_t *qs) {
    float amax = 0.f;
    for (int j = 0; j < GM_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    for (int j = 0; j < GM_QK; j++) qs[j] = (int8_t)gm_round_sat127(x[j] * id);
    return d;
}

void gm_quant_q8_0(const float *src, void *dst, int64_t n) {
    gm_block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / GM_QK; i++, src += GM_QK) b[i].d = gm_fp32_to_fp16(quant_block_q8(src, b[i].qs));
}

void gm_vec_dot_q8_0_q8_0(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q8_0 *x = w;
    const gm_block_q8_0 *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < GM_QK; j++) sumi += x[i].qs[j] * y[i].qs[j];
        acc += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
    }
    *s = acc;
}

void gm_dequant_q8_1(const void *src, float *dst, int64_t n) {
    const gm_block_q8_1 *b = src;
    for (int64_t i = 0; i < n / GM_QK; i++, dst += GM_QK) {
        const float d = h2f(b[i].d);
        for (int j = 0; j < GM_QK; j++) dst[j] = b[i].qs[j] * d;
    }
}

void gm_quant_q8_1(const float *src, void *dst, int64_t n) {
    gm_block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / GM_QK; i++, src += GM_QK) {
        const float d = quant_block_q8(src, b[i].qs);
        int sum = 0;
        for (int j = 0; j < GM_QK; j++) sum += b[i].qs[j];
        b[i].d = gm_fp32_to_fp16(d);
        b[i].s = gm_fp32_to_fp16((float)sum * d);
    }
}

void gm_vec_dot_q8_1_q8_1(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q8_1 *x = w;
    const gm_block_q8_1 *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK; i++) {
        int sumi = 0;
        for (int j = 0; j < GM_QK; j++) sumi += x[i].qs[j] * y[i].qs[j];
        acc += (float)sumi * (h2f(x[i].d) * h2f(y[i].d));
    }
    *s = acc;
}
