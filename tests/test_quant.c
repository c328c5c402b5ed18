/* tests/test_quant.c — the trait table against independent references:
 *  - dequant_row of reference bytes equals the reference dequantization bit for bit, every type
 *    (fixtures from gguf-py and ggml's C reference, tests/gen/gen_quant_fixtures.py);
 *  - quant_row equals the reference quantizer's bytes (gguf-py for F16/BF16/Q4_0..Q8_0, ggml's
 *    quantize_row_*_ref for Q8_1 and the K-quants);
 *  - scalar vec_dot equals a double-precision dot of the dequantized operands within a stated bound;
 *  - half / bfloat16 conversions: exhaustive round trip and the edge cases (inf, nan, subnormals,
 *    overflow, ties to even). */
#include <stdint.h>
#include <string.h>

#include "quant/blocks.h"
#include "support/test.h"

typedef struct {
    uint32_t type, rows_q, rows_r, cols, qsrc, row_bytes;
    const float *in;       /* rows_q x cols */
    const uint8_t *quant;  /* (rows_q + rows_r) x row_bytes */
    const float *deq;      /* (rows_q + rows_r) x cols */
    unsigned char *buf;
} fixture;

static const char *k_names[] = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                "Q8_0", "Q8_1", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
#define N_TYPES (int)(sizeof k_names / sizeof k_names[0])

static int load_fixture(const char *name, fixture *f) {
    char rel[64];
    snprintf(rel, sizeof rel, "quant/%s.bin", name);
    size_t len = 0;
    f->buf = test_read_file(test_data_path(rel), &len);
    if (!f->buf || len < 32 || memcmp(f->buf, "GMQF", 4) != 0) return 0;
    uint32_t h[8];
    memcpy(h, f->buf + 4, sizeof h - 4);
    f->type = h[1];
    f->rows_q = h[2];
    f->rows_r = h[3];
    f->cols = h[4];
    f->qsrc = h[5];
    f->row_bytes = h[6];
    size_t rows = (size_t)f->rows_q + f->rows_r;
    size_t need = 32 + (size_t)f->rows_q * f->cols * 4 + rows * f->row_bytes + rows * f->cols * 4;
    if (len != need) return 0;
    f->in = (const float *)(f->buf + 32);
    f->quant = f->buf + 32 + (size_t)f->rows_q * f->cols * 4;
    f->deq = (const float *)(f->quant + rows * f->row_bytes);
    return 1;
}

/* Every type: trait fields agree with the fixture and with ggml's sizes. */
TEST(traits_table) {
    for (int k = 0; k < N_TYPES; k++) {
        fixture f;
        if (!load_fixture(k_names[k], &f)) {
            CHECK_MSG(0, "fixture %s missing or malformed", k_names[k]);
            free(f.buf);
            continue;
        }
        const gm_type_traits *t = gm_type_traits_of((int)f.type);
        CHECK_MSG(t != NULL, "%s: no traits", k_names[k]);
        if (t) {
            CHECK_MSG(strcmp(t->name, k_names[k]) == 0, "%s vs %s", t->name, k_names[k]);
            CHECK_MSG(strcmp(gm_type_name((int)f.type), k_names[k]) == 0, "%s", k_names[k]);
            CHECK_EQ_INT(gm_row_bytes((int)f.type, f.cols), f.row_bytes);
            CHECK(t->dequant_row && t->quant_row && t->vec_dot);
            CHECK(gm_type_traits_of(t->vec_dot_type) != NULL);
        }
        free(f.buf);
    }
    CHECK(gm_type_traits_of(4) == NULL);  /* removed Q4_2 */
    CHECK(gm_type_traits_of(-1) == NULL);
    CHECK(gm_type_name(999) == NULL);
    CHECK(strcmp(gm_type_name(GM_TYPE_Q2_K), "Q2_K") == 0);
    CHECK_EQ_INT(gm_row_bytes(GM_TYPE_Q4_K, 640), 0);      /* not a multiple of 256 */
    CHECK_EQ_INT(gm_row_bytes(GM_TYPE_Q5_0, 640), 20 * 22);
    CHECK_EQ_INT(gm_row_bytes(GM_TYPE_Q8_0, -32), 0);
    CHECK_EQ_INT(gm_row_bytes(GM_TYPE_F32, INT64_MAX), 0); /* bytes would overflow size_t */
    CHECK_EQ_INT(gm_row_bytes(999, 32), 0);
}

/* dequant_row(reference bytes) == reference floats, bit for bit. */
TEST(dequant_bit_exact) {
    for (int k = 0; k < N_TYPES; k++) {
        fixture f;
        if (!load_fixture(k_names[k], &f)) { free(f.buf); continue; }
        const gm_type_traits *t = gm_type_traits_of((int)f.type);
        float *out = malloc(f.cols * sizeof *out);
        int bad = 0;
        for (uint32_t r = 0; r < f.rows_q + f.rows_r; r++) {
            t->dequant_row(f.quant + (size_t)r * f.row_bytes, out, f.cols);
            if (memcmp(out, f.deq + (size_t)r * f.cols, f.cols * sizeof *out) != 0) bad++;
        }
        CHECK_MSG(bad == 0, "%s: %d of %u rows differ from the reference dequantization", k_names[k], bad,
                  f.rows_q + f.rows_r);
        free(out);
        free(f.buf);
    }
}

/* quant_row(input) == reference bytes. Every type is expected bit-exact: our arithmetic follows
 * ggml's reference in the same order. (If ggml were built with FMA contraction of its K-quant
 * scale search, a rare block could differ; the fixtures here show none do.) */
TEST(quant_matches_reference) {
    for (int k = 0; k < N_TYPES; k++) {
        fixture f;
        if (!load_fixture(k_names[k], &f)) { free(f.buf); continue; }
        const gm_type_traits *t = gm_type_traits_of((int)f.type);
        uint8_t *out = malloc(f.row_bytes);
        int bad = 0;
        for (uint32_t r = 0; r < f.rows_q; r++) {
            t->quant_row(f.in + (size_t)r * f.cols, out, f.cols);
            if (memcmp(out, f.quant + (size_t)r * f.row_bytes, f.row_bytes) != 0) {
                if (bad++ == 0) {
                    size_t i = 0;
                    while (out[i] == f.quant[(size_t)r * f.row_bytes + i]) i++;
                    fprintf(stderr, "  %s row %u: first differing byte %zu (ours %02x, ref %02x)\n", k_names[k], r,
                            i, out[i], f.quant[(size_t)r * f.row_bytes + i]);
                }
            }
        }
        CHECK_MSG(bad == 0, "%s: %d of %u rows differ from %s", k_names[k], bad, f.rows_q,
                  f.qsrc == 1 ? "gguf-py" : "ggml quantize_row_*_ref");
        free(out);
        free(f.buf);
    }
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

/* vec_dot(w, a) vs sum(deq(w) * deq(a)) in double. The integer part of every block dot is exact;
 * what remains is f32 rounding of the per-block products and their sum (bound: 1e-5 of the sum of
 * |w_i a_i|, ~ n * 2^-24 with margin) and, for Q8_1 activations, the f16 rounding of the stored
 * block sum s = d * sum(q) that Q4_1 / Q5_1 multiply by their offset m (bound: |m| * |s| * 2^-10). */
TEST(vec_dot_vs_double) {
    for (int k = 0; k < N_TYPES; k++) {
        fixture f;
        if (!load_fixture(k_names[k], &f)) { free(f.buf); continue; }
        const gm_type_traits *t = gm_type_traits_of((int)f.type);
        const gm_type_traits *at = gm_type_traits_of(t->vec_dot_type);
        const int64_t n = f.cols;
        float *x = malloc(n * sizeof *x), *wd = malloc(n * sizeof *wd), *ad = malloc(n * sizeof *ad);
        uint8_t *aq = malloc(gm_row_bytes(at->type, n));
        int bad = 0;
        for (uint32_t r = 0; r < f.rows_q + f.rows_r; r++) {
            for (int64_t i = 0; i < n; i++) x[i] = frand() * (r % 3 == 0 ? 100.f : 1.f);
            at->quant_row(x, aq, n);
            at->dequant_row(aq, ad, n);
            const uint8_t *w = f.quant + (size_t)r * f.row_bytes;
            t->dequant_row(w, wd, n);
            double ref = 0, mag = 0, extra = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)wd[i] * ad[i];
                mag += fabs((double)wd[i] * ad[i]);
            }
            if (at->type == GM_TYPE_Q8_1) {
                const gm_block_q8_1 *ab = (const gm_block_q8_1 *)aq;
                for (int64_t b = 0; b < n / 32; b++) {
                    uint16_t mh;
                    memcpy(&mh, w + b * t->block_bytes + 2, 2); /* m follows d in Q4_1 and Q5_1 */
                    extra += fabs(gm_fp16_to_fp32(mh)) * fabs(gm_fp16_to_fp32(ab[b].s)) * (1.0 / 1024);
                }
            }
            float s = 0;
            t->vec_dot(n, &s, w, aq);
            double tol = 1e-5 * mag + extra + 1e-30;
            if (!(fabs(s - ref) <= tol)) {
                if (bad++ == 0)
                    fprintf(stderr, "  %s row %u: vec_dot %.9g, double %.9g, tol %.3g\n", k_names[k], r, s, ref, tol);
            }
        }
        CHECK_MSG(bad == 0, "%s: %d rows out of tolerance", k_names[k], bad);
        free(x); free(wd); free(ad); free(aq); free(f.buf);
    }
}

/* Q8_K's block sums are what the K-quant dots use for their min terms: they must be exact. */
TEST(q8_k_bsums) {
    float x[512];
    for (int i = 0; i < 512; i++) x[i] = frand() * 3.f;
    gm_block_q8_K b[2];
    gm_quant_q8_K(x, b, 512);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b[i].qs[16 * j + l];
            CHECK_EQ_INT(b[i].bsums[j], s);
        }
    float z[256] = {0};
    gm_quant_q8_K(z, b, 256);
    CHECK(b[0].d == 0.f && b[0].bsums[3] == 0 && b[0].qs[100] == 0);
}

static float bits_f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Independent decoding of a half: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024. */
static double half_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

TEST(fp16_conversions) {
    int bad_dec = 0, bad_rt = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        int e = (h >> 10) & 31;
        float f = gm_fp16_to_fp32((uint16_t)h);
        if (e == 31) {
            if ((h & 1023) == 0 ? !isinf(f) : !isnan(f)) bad_dec++;
            continue;
        }
        if ((double)f != half_value((uint16_t)h) || (signbit(f) != 0) != ((h & 0x8000) != 0)) bad_dec++;
        if (gm_fp32_to_fp16(f) != h) bad_rt++;
    }
    CHECK_EQ_INT(bad_dec, 0);
    CHECK_EQ_INT(bad_rt, 0);
    CHECK_EQ_INT(gm_fp32_to_fp16(65504.f), 0x7BFF);
    CHECK_EQ_INT(gm_fp32_to_fp16(65519.99f), 0x7BFF);   /* below the midpoint to 65536 */
    CHECK_EQ_INT(gm_fp32_to_fp16(65520.f), 0x7C00);     /* the midpoint rounds (to even) up: inf */
    CHECK_EQ_INT(gm_fp32_to_fp16(1e10f), 0x7C00);
    CHECK_EQ_INT(gm_fp32_to_fp16(-INFINITY), 0xFC00);
    CHECK_EQ_INT(gm_fp32_to_fp16(INFINITY), 0x7C00);
    uint16_t hn = gm_fp32_to_fp16(NAN);
    CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);
    CHECK(isnan(gm_fp16_to_fp32(hn)));
    CHECK_EQ_INT(gm_fp32_to_fp16(-0.0f), 0x8000);
    CHECK_EQ_INT(gm_fp32_to_fp16(1.0f + 0x1p-11f), 0x3C00);        /* tie -> even (down) */
    CHECK_EQ_INT(gm_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3C02);    /* tie -> even (up) */
    CHECK_EQ_INT(gm_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3C01);
    CHECK_EQ_INT(gm_fp32_to_fp16(0x1p-24f), 0x0001);               /* smallest subnormal */
    CHECK_EQ_INT(gm_fp32_to_fp16(0x1p-25f), 0x0000);               /* tie -> even (zero) */
    CHECK_EQ_INT(gm_fp32_to_fp16(0x1p-25f * 1.0001f), 0x0001);
    CHECK_EQ_INT(gm_fp32_to_fp16(3 * 0x1p-25f), 0x0002);           /* 1.5 ulp -> 2 */
    CHECK_EQ_INT(gm_fp32_to_fp16(0x1p-14f), 0x0400);               /* smallest normal */
    CHECK_EQ_INT(gm_fp32_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);    /* subnormal rounds up into normal */
    CHECK_EQ_INT(gm_fp32_to_fp16(1e-10f), 0x0000);
    CHECK_EQ_INT(gm_fp32_to_fp16(-1e-10f), 0x8000);
}

TEST(bf16_conversions) {
    CHECK_EQ_INT(gm_fp32_to_bf16(1.0f), 0x3F80);
    CHECK_EQ_INT(gm_fp32_to_bf16(bits_f(0x3F808000u)), 0x3F80); /* tie -> even (down) */
    CHECK_EQ_INT(gm_fp32_to_bf16(bits_f(0x3F818000u)), 0x3F82); /* tie -> even (up) */
    CHECK_EQ_INT(gm_fp32_to_bf16(bits_f(0x3F808001u)), 0x3F81);
    CHECK_EQ_INT(gm_fp32_to_bf16(INFINITY), 0x7F80);
    CHECK_EQ_INT(gm_fp32_to_bf16(-INFINITY), 0xFF80);
    CHECK_EQ_INT(gm_fp32_to_bf16(3.4028235e38f), 0x7F80);      /* FLT_MAX rounds to inf */
    CHECK_EQ_INT(gm_fp32_to_bf16(bits_f(0x00018000u)), 0x0002); /* subnormal tie -> even */
    uint16_t bn = gm_fp32_to_bf16(bits_f(0x7F800001u));        /* signalling nan with low bits only */
    CHECK((bn & 0x7F80) == 0x7F80 && (bn & 0x7F) != 0);        /* stays a nan, not inf */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gm_bf16_to_fp32((uint16_t)h);
        if (f_bits(f) != h << 16) bad++;
        if (!isnan(f) && gm_fp32_to_bf16(f) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

/* Out-of-range inputs must not trigger undefined float->int conversions (UBSan checks this). */
TEST(quant_nonfinite_inputs) {
    const int types[] = {GM_TYPE_Q4_0, GM_TYPE_Q4_1, GM_TYPE_Q5_0, GM_TYPE_Q5_1, GM_TYPE_Q8_0, GM_TYPE_Q8_1,
                         GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K, GM_TYPE_Q8_K, GM_TYPE_F16, GM_TYPE_BF16};
    float x[256];
    for (int i = 0; i < 256; i++) x[i] = (i % 7 == 0) ? NAN : (i % 11 == 0) ? INFINITY : frand() * 1e30f;
    unsigned char q[1024];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const gm_type_traits *t = gm_type_traits_of(types[k]);
        t->quant_row(x, q, 256);
        CHECK(1);
    }
}

int main(void) {
    RUN(traits_table);
    RUN(dequant_bit_exact);
    RUN(quant_matches_reference);
    RUN(vec_dot_vs_double);
    RUN(q8_k_bsums);
    RUN(fp16_conversions);
    RUN(bf16_conversions);
    RUN(quant_nonfinite_inputs);
    return test_summary();
}
