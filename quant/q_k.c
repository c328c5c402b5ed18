/* quant/q_k.c — the K-quant super-block formats Q4_K, Q5_K, Q6_K and the Q8_K activation format:
 * scalar dequantization, reference quantizers that follow ggml's quantize_row_*_ref search (the
 * same float arithmetic in the same order, so the bytes match llama.cpp's up to the rare case where
 * its build contracts a*b+c into an FMA), and integer dot products against Q8_K. */
#include <math.h>

#include "quant/blocks.h"

static inline float h2f(uint16_t h) { return gm_fp16_to_fp32(h); }
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

/* ------------------------------------------------------------------ scale searches */

/* Fit x[i] ~ scale * L[i] - min with L in [0, nmax], minimising the weighted squared error:
 * start from the min/max grid, then try nstep+1 slightly stretched grids, each refined by a
 * closed-form least-squares (scale, min). Returns scale; *the_min receives min (>= 0). */
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        int l = imax(0, imin(nmax, gm_nearest_int(iscale * (x[i] - min))));
        L[i] = (uint8_t)l;
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = imax(0, imin(nmax, gm_nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (!(D > 0)) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) {
            this_min = 0;
            this_scale = sum_xl / sum_l2;
        }
        float cur_error = 0;
        for (int i = 0; i < n; ++i) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            cur_error += w[i] * (diff * diff);
        }
        if (cur_error < best_error) {
            memcpy(L, Laux, (size_t)n);
            best_error = cur_error;
            scale = this_scale;
            min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

/* Symmetric fit x[i] ~ scale * (L[i] - nmax), L in [0, 2 nmax - 1], weights x^2: try 19 grids
 * around the one that maps the signed extreme to -nmax, keep the best least-squares scale. */
static float fit_scale_sym(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = imax(-nmax, imin(nmax - 1, gm_nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = imax(-nmax, imin(nmax - 1, gm_nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, gm_nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* ------------------------------------------------------------------ Q4_K / Q5_K shared parts */

/* Sub-block scales and mins of one super-block, quantized to 6 bits against the block maxima and
 * packed into the 12-byte layout; d / dmin receive the f16 super-block factors. nmax is 15 (Q4_K)
 * or 31 (Q5_K); the search parameters differ per format as in ggml. */
static void k4_fit_block(const float *x, int nmax, float rmin, float rdelta, int nstep, uint8_t *L,
                         uint8_t *scales12, uint16_t *d, uint16_t *dmin) {
    float sc[8], mn[8], w[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        const float *xj = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) w[l] = av_x + fabsf(xj[l]);
        sc[j] = fit_scale_min(32, nmax, xj, w, L + 32 * j, &mn[j], Laux, rmin, rdelta, nstep);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mn[j] > max_min) max_min = mn[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales12, 0, 12);
    for (int j = 0; j < 8; ++j) {
        int ls = imin(63, (uint8_t)gm_nearest_int(inv_scale * sc[j]));
        int lm = imin(63, (uint8_t)gm_nearest_int(inv_min * mn[j]));
        if (j < 4) {
            scales12[j] = (uint8_t)ls;
            scales12[j + 4] = (uint8_t)lm;
        } else {
            scales12[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales12[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales12[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d = gm_fp32_to_fp16(max_scale / 63.f);
    *dmin = gm_fp32_to_fp16(max_min / 63.f);
    /* re-quantize against the scales as stored, so rounding of the 6-bit scales is absorbed */
    for (int j = 0; j < 8; ++j) {
        int s, m;
        gm_k4_scale_min(j, scales12, &s, &m);
        const float dj = h2f(*d) * s;
        if (!dj) continue;
        const float dm = h2f(*dmin) * m;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)imax(0, imin(nmax, gm_nearest_int((x[32 * j + ii] + dm) / dj)));
    }
}

/* ------------------------------------------------------------------ Q4_K */

void gm_dequant_q4_K(const void *src, float *dst, int64_t n) {
    const gm_block_q4_K *b = src;
    for (int64_t i = 0; i < n / GM_QK_K; i++) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        const uint8_t *q = b[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            int s0, m0, s1, m1;
            gm_k4_scale_min(2 * c, b[i].scales, &s0, &m0);
            gm_k4_scale_min(2 * c + 1, b[i].scales, &s1, &m1);
            const float d0 = d * s0, mm0 = dmin * m0, d1 = d * s1, mm1 = dmin * m1;
            for (int l = 0; l < 32; l++) *dst++ = d0 * (q[l] & 0xF) - mm0;
            for (int l = 0; l < 32; l++) *dst++ = d1 * (q[l] >> 4) - mm1;
        }
    }
}

void gm_quant_q4_K(const float *src, void *dst, int64_t n) {
    gm_block_q4_K *b = dst;
    uint8_t L[GM_QK_K];
    for (int64_t i = 0; i < n / GM_QK_K; i++, src += GM_QK_K) {
        k4_fit_block(src, 15, -1.f, 0.1f, 20, L, b[i].scales, &b[i].d, &b[i].dmin);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

/* sum over sub-blocks of mn_j * (sum of the activations of sub-block j), from Q8_K's bsums */
static int k4_mins_dot(const uint8_t *scales12, const int16_t *bsums) {
    int acc = 0;
    for (int j = 0; j < 8; j++) {
        int s, m;
        gm_k4_scale_min(j, scales12, &s, &m);
        acc += m * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    return acc;
}

void gm_vec_dot_q4_K_q8_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q4_K *x = w;
    const gm_block_q8_K *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const int8_t *q8 = y[i].qs;
        int sumi = 0;
        for (int c = 0; c < 4; c++, q += 32, q8 += 64) {
            int s0, m0, s1, m1, lo = 0, hi = 0;
            gm_k4_scale_min(2 * c, x[i].scales, &s0, &m0);
            gm_k4_scale_min(2 * c + 1, x[i].scales, &s1, &m1);
            for (int l = 0; l < 32; l++) {
                lo += (q[l] & 0xF) * q8[l];
                hi += (q[l] >> 4) * q8[l + 32];
            }
            sumi += s0 * lo + s1 * hi;
        }
        const float d = h2f(x[i].d) * y[i].d, dmin = h2f(x[i].dmin) * y[i].d;
        acc += d * (float)sumi - dmin * (float)k4_mins_dot(x[i].scales, y[i].bsums);
    }
    *s = acc;
}

/* ------------------------------------------------------------------ Q5_K */

void gm_dequant_q5_K(const void *src, float *dst, int64_t n) {
    const gm_block_q5_K *b = src;
    for (int64_t i = 0; i < n / GM_QK_K; i++) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        const uint8_t *q = b[i].qs, *qh = b[i].qh;
        for (int c = 0; c < 4; c++, q += 32) {
            int s0, m0, s1, m1;
            gm_k4_scale_min(2 * c, b[i].scales, &s0, &m0);
            gm_k4_scale_min(2 * c + 1, b[i].scales, &s1, &m1);
            const float d0 = d * s0, mm0 = dmin * m0, d1 = d * s1, mm1 = dmin * m1;
            const uint8_t u0 = (uint8_t)(1u << (2 * c)), u1 = (uint8_t)(2u << (2 * c));
            for (int l = 0; l < 32; l++) *dst++ = d0 * ((q[l] & 0xF) + (qh[l] & u0 ? 16 : 0)) - mm0;
            for (int l = 0; l < 32; l++) *dst++ = d1 * ((q[l] >> 4) + (qh[l] & u1 ? 16 : 0)) - mm1;
        }
    }
}

void gm_quant_q5_K(const float *src, void *dst, int64_t n) {
    gm_block_q5_K *b = dst;
    uint8_t L[GM_QK_K];
    for (int64_t i = 0; i < n / GM_QK_K; i++, src += GM_QK_K) {
        k4_fit_block(src, 31, -0.5f, 0.1f, 15, L, b[i].scales, &b[i].d, &b[i].dmin);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int l0 = L[64 * c + l], l1 = L[64 * c + 32 + l];
                b[i].qh[l] |= (uint8_t)(((l0 >> 4) << (2 * c)) | ((l1 >> 4) << (2 * c + 1)));
                b[i].qs[32 * c + l] = (uint8_t)((l0 & 0xF) | ((l1 & 0xF) << 4));
            }
        }
    }
}

void gm_vec_dot_q5_K_q8_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q5_K *x = w;
    const gm_block_q8_K *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK_K; i++) {
        const uint8_t *q = x[i].qs, *qh = x[i].qh;
        const int8_t *q8 = y[i].qs;
        int sumi = 0;
        for (int c = 0; c < 4; c++, q += 32, q8 += 64) {
            int s0, m0, s1, m1, lo = 0, hi = 0;
            gm_k4_scale_min(2 * c, x[i].scales, &s0, &m0);
            gm_k4_scale_min(2 * c + 1, x[i].scales, &s1, &m1);
            for (int l = 0; l < 32; l++) {
                lo += ((q[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) * q8[l];
                hi += ((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) * q8[l + 32];
            }
            sumi += s0 * lo + s1 * hi;
        }
        const float d = h2f(x[i].d) * y[i].d, dmin = h2f(x[i].dmin) * y[i].d;
        acc += d * (float)sumi - dmin * (float)k4_mins_dot(x[i].scales, y[i].bsums);
    }
    *s = acc;
}

/* ------------------------------------------------------------------ Q6_K */

/* 6-bit value e (0..255) of a Q6_K super-block, offset by +32 (0..63). Half h = e / 128 uses
 * ql[64h..], qh[32h..]; within the half, quarter k = (e % 128) / 32 picks the nibble and bit pair. */
static inline int q6_get(const gm_block_q6_K *b, int e) {
    const int h = e >> 7, r = e & 127, k = r >> 5, l = r & 31;
    const uint8_t ql = b->ql[64 * h + l + (k & 1) * 32];
    const int lo = (k & 2) ? (ql >> 4) : (ql & 0xF);
    const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return lo | (hi << 4);
}

void gm_dequant_q6_K(const void *src, float *dst, int64_t n) {
    const gm_block_q6_K *b = src;
    for (int64_t i = 0; i < n / GM_QK_K; i++, dst += GM_QK_K) {
        const float d = h2f(b[i].d);
        for (int e = 0; e < GM_QK_K; e++) dst[e] = d * b[i].scales[e / 16] * (q6_get(&b[i], e) - 32);
    }
}

void gm_quant_q6_K(const float *src, void *dst, int64_t n) {
    gm_block_q6_K *b = dst;
    int8_t L[GM_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / GM_QK_K; i++, src += GM_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ++ib) {
            scales[ib] = fit_scale_sym(16, 32, src + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        if (max_abs_scale < 1e-15f) continue; /* all (near) zero: d = 0 */
        const float iscale = -128.f / max_scale;
        b[i].d = gm_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ++ib) b[i].scales[ib] = (int8_t)imin(127, gm_nearest_int(iscale * scales[ib]));
        for (int j = 0; j < 16; ++j) {
            const float d = h2f(b[i].d) * b[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(imax(-32, imin(31, gm_nearest_int(src[16 * j + ii] / d))) + 32);
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; ++l) {
                b[i].ql[64 * h + l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
                b[i].ql[64 * h + l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
                b[i].qh[32 * h + l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                                ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

void gm_vec_dot_q6_K_q8_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q6_K *x = w;
    const gm_block_q8_K *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK_K; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++) {
            int sub = 0;
            for (int l = 0; l < 16; l++) sub += (q6_get(&x[i], 16 * j + l) - 32) * y[i].qs[16 * j + l];
            sumi += x[i].scales[j] * sub;
        }
        acc += (h2f(x[i].d) * y[i].d) * (float)sumi;
    }
    *s = acc;
}

/* ------------------------------------------------------------------ Q8_K (activations) */

void gm_dequant_q8_K(const void *src, float *dst, int64_t n) {
    const gm_block_q8_K *b = src;
    for (int64_t i = 0; i < n / GM_QK_K; i++, dst += GM_QK_K)
        for (int j = 0; j < GM_QK_K; j++) dst[j] = b[i].d * b[i].qs[j];
}

/* q = round_half_even(-127 / max * x) where max is the signed extreme; d = 1 / iscale is kept
 * in f32. (ggml leaves bsums unwritten for an all-zero block; we zero them.) */
void gm_quant_q8_K(const float *src, void *dst, int64_t n) {
    gm_block_q8_K *b = dst;
    for (int64_t i = 0; i < n / GM_QK_K; i++, src += GM_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < GM_QK_K; ++j) {
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        if (!(amax > 0) || !(amax < INFINITY)) {
            memset(&b[i], 0, sizeof b[i]);
            if (amax > 0) b[i].d = NAN; /* inf input: make the result visibly wrong, not zero */
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < GM_QK_K; ++j) b[i].qs[j] = (int8_t)imin(127, gm_nearest_int(iscale * src[j]));
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += b[i].qs[16 * j + l];
            b[i].bsums[j] = (int16_t)sum;
        }
        b[i].d = 1 / iscale;
    }
}

void gm_vec_dot_q8_K_q8_K(int64_t n, float *s, const void *w, const void *a) {
    const gm_block_q8_K *x = w;
    const gm_block_q8_K *y = a;
    float acc = 0.f;
    for (int64_t i = 0; i < n / GM_QK_K; i++) {
        int sumi = 0;
        for (int j = 0; j < GM_QK_K; j++) sumi += x[i].qs[j] * y[i].qs[j];
        acc += (x[i].d * y[i].d) * (float)sumi;
    }
    *s = acc;
}
