/* tests/test_matmul.c — gm_matmul against gm_matmul_ref (f32 weights dequantized, double sums) for
 * every supported weight type, odd row counts, 1 and 7 tokens, serial / 1-thread / 2-thread pools.
 * Outputs must be bit-identical across pool sizes (every output is one vec_dot whoever runs it).
 *
 * Tolerance vs the reference: gm_matmul quantizes the activations, gm_matmul_ref does not. With
 * xq the dequantized activations, |y - y_ref| <= sum_i |w_i| |x_i - xq_i|   (activation rounding)
 *                                          + 1e-5 sum_i |w_i x_i|           (f32 accumulation)
 *                                          + Q8_1 offset term (f16 block sums, see test_quant.c).
 *
 * SIMD kernels (every ISA level this CPU supports, bound with gm_mm_bind) are compared with the
 * scalar path on the same quantized activations: the integer block dots are exact, so the only
 * allowed difference is f32 rounding of scales and sums: |y - exact| <= 1e-5 sum |w xq| (+ the
 * Q8_1 term for Q4_1 / Q5_1), where exact is the double dot of the dequantized operands. The
 * activation quantizers must produce the reference's bytes exactly. */
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/pack.h"
#include "quant/blocks.h"
#include "support/test.h"

/* A pool of n threads, at most $GM_TEST_MAX_THREADS (support/test.h: the suite's 1-thread pass). */
static gm_pool *test_pool_new(int n) { return gm_pool_new(gm_test_threads(n)); }

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / 8388608.0)) - 1.0f;
}

static const int k_types[] = {GM_TYPE_F32, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_Q4_0, GM_TYPE_Q4_1,
                              GM_TYPE_Q5_0, GM_TYPE_Q5_1, GM_TYPE_Q8_0, GM_TYPE_Q8_1, GM_TYPE_Q4_K,
                              GM_TYPE_Q5_K, GM_TYPE_Q6_K, GM_TYPE_Q8_K};

/* Error bound for output (r, t), computed from the operands in double. */
static double bound(const gm_type_traits *wt, const float *wrow, const void *wq, const float *x, int64_t cols) {
    const gm_type_traits *at = gm_type_traits_of(wt->vec_dot_type);
    float *xq = malloc(cols * sizeof *xq);
    void *aq = malloc(gm_row_bytes(at->type, cols));
    at->quant_row(x, aq, cols);
    at->dequant_row(aq, xq, cols);
    double b = 0, mag = 0;
    for (int64_t i = 0; i < cols; i++) {
        b += fabs((double)wrow[i]) * fabs((double)x[i] - xq[i]);
        mag += fabs((double)wrow[i] * x[i]);
    }
    if (at->type == GM_TYPE_Q8_1)
        for (int64_t k = 0; k < cols / 32; k++) {
            uint16_t mh;
            memcpy(&mh, (const char *)wq + k * wt->block_bytes + 2, 2);
            b += fabs(gm_fp16_to_fp32(mh)) * fabs(gm_fp16_to_fp32(((gm_block_q8_1 *)aq)[k].s)) / 1024;
        }
    free(xq);
    free(aq);
    return b + 1e-5 * mag + 1e-6;
}

static void check_type(int type, int64_t rows, int64_t cols, int64_t n_tok, gm_pool *p1, gm_pool *p2) {
    const gm_type_traits *wt = gm_type_traits_of(type);
    const size_t rb = gm_row_bytes(type, cols);
    unsigned char *W = malloc(rows * rb);
    float *wf = malloc(rows * cols * sizeof *wf), *x = malloc(n_tok * cols * sizeof *x);
    float *y0 = malloc(n_tok * rows * 4), *y1 = malloc(n_tok * rows * 4), *y2 = malloc(n_tok * rows * 4);
    float *yr = malloc(n_tok * rows * 4);
    float *tmp = malloc(cols * sizeof *tmp);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) tmp[i] = frand() * (1 + (r % 5));
        wt->quant_row(tmp, W + r * rb, cols);
        wt->dequant_row(W + r * rb, wf + r * cols, cols);
    }
    for (int64_t i = 0; i < n_tok * cols; i++) x[i] = frand() * 4;
    gm_matrix M = {type, rows, cols, W, 0};
    gm_matmul_scratch s = {0};
    CHECK_EQ_INT(gm_matmul(&M, x, n_tok, y0, NULL, &s), GM_OK);
    CHECK_EQ_INT(gm_matmul(&M, x, n_tok, y1, p1, &s), GM_OK);
    CHECK_EQ_INT(gm_matmul(&M, x, n_tok, y2, p2, &s), GM_OK);
    CHECK_EQ_INT(gm_matmul_ref(&M, x, n_tok, yr), GM_OK);
    CHECK_MSG(memcmp(y0, y1, n_tok * rows * 4) == 0, "%s: serial vs 1-thread pool differ", wt->name);
    CHECK_MSG(memcmp(y0, y2, n_tok * rows * 4) == 0, "%s: serial vs 2-thread pool differ", wt->name);
    int bad = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < rows; r++) {
            double tol = bound(wt, wf + r * cols, W + r * rb, x + t * cols, cols);
            double d = fabs((double)y0[t * rows + r] - yr[t * rows + r]);
            if (!(d <= tol) && bad++ == 0)
                fprintf(stderr, "  %s rows %lld tok %lld: y[%lld,%lld] = %.7g, ref %.7g, tol %.3g\n", wt->name,
                        (long long)rows, (long long)n_tok, (long long)t, (long long)r, y0[t * rows + r],
                        yr[t * rows + r], tol);
        }
    CHECK_MSG(bad == 0, "%s rows=%lld cols=%lld n_tok=%lld: %d outputs out of bound", wt->name, (long long)rows,
              (long long)cols, (long long)n_tok, bad);
    /* embedding lookup: row r dequantized */
    CHECK_EQ_INT(gm_matrix_row(&M, rows - 1, tmp), GM_OK);
    CHECK(memcmp(tmp, wf + (rows - 1) * cols, cols * sizeof *tmp) == 0);
    CHECK_EQ_INT(gm_matrix_row(&M, rows, tmp), GM_ERR_ARG);
    CHECK_EQ_INT(gm_matrix_row(&M, -1, tmp), GM_ERR_ARG);
    gm_matmul_scratch_free(&s);
    free(W); free(wf); free(x); free(y0); free(y1); free(y2); free(yr); free(tmp);
}

TEST(matmul_every_type) {
    gm_pool *p1 = test_pool_new(1), *p2 = test_pool_new(2);
    CHECK(p1 && p2);
    for (size_t k = 0; k < sizeof k_types / sizeof k_types[0]; k++) {
        const gm_type_traits *wt = gm_type_traits_of(k_types[k]);
        const int64_t cols = wt->block_elems == 256 ? 512 : 640; /* 640 = Gemma 3 270M's d_model */
        check_type(k_types[k], 37, cols, 1, p1, p2);
        check_type(k_types[k], 37, cols, 7, p1, p2);
        check_type(k_types[k], 1, cols, 7, p1, p2);
        check_type(k_types[k], 131, wt->block_elems == 256 ? 256 : 96, 3, p1, p2);
    }
    gm_pool_free(p1);
    gm_pool_free(p2);
}

TEST(matmul_bad_args) {
    float x[64] = {0}, y[64];
    unsigned char w[64 * 40] = {0};
    gm_matmul_scratch s = {0};
    gm_matrix bad_type = {GM_TYPE_Q2_K, 1, 256, w, 0};
    CHECK_EQ_INT(gm_matmul(&bad_type, x, 1, y, NULL, &s), GM_ERR_UNSUPPORTED);
    gm_matrix bad_cols = {GM_TYPE_Q8_0, 1, 33, w, 0};
    CHECK_EQ_INT(gm_matmul(&bad_cols, x, 1, y, NULL, &s), GM_ERR_ARG);
    gm_matrix ok = {GM_TYPE_Q8_0, 1, 32, w, 0};
    CHECK_EQ_INT(gm_matmul(&ok, x, 0, y, NULL, &s), GM_OK);
    gm_matmul_scratch_free(&s);
    gm_matmul_scratch_free(NULL);
}

/* exact = sum w * xq in double, with the same bound as above minus the activation term */
static double q_bound(const gm_type_traits *wt, const float *wrow, const void *wq, const float *x, int64_t cols,
                      double *exact) {
    const gm_type_traits *at = gm_type_traits_of(wt->vec_dot_type);
    float *xq = malloc(cols * sizeof *xq);
    void *aq = malloc(gm_row_bytes(at->type, cols));
    at->quant_row(x, aq, cols);
    at->dequant_row(aq, xq, cols);
    double e = 0, mag = 0;
    for (int64_t i = 0; i < cols; i++) {
        e += (double)wrow[i] * xq[i];
        mag += fabs((double)wrow[i] * xq[i]);
    }
    double b = 1e-5 * mag + 1e-6;
    if (at->type == GM_TYPE_Q8_1)
        for (int64_t k = 0; k < cols / 32; k++) {
            uint16_t mh;
            memcpy(&mh, (const char *)wq + k * wt->block_bytes + 2, 2);
            b += fabs(gm_fp16_to_fp32(mh)) * fabs(gm_fp16_to_fp32(((gm_block_q8_1 *)aq)[k].s)) / 1024;
        }
    free(xq);
    free(aq);
    *exact = e;
    return b;
}

static void simd_case(int type, int64_t rows, int64_t cols, int64_t n_tok, gm_pool *pool) {
    const gm_type_traits *wt = gm_type_traits_of(type);
    const size_t rb = gm_row_bytes(type, cols);
    unsigned char *W = malloc(rows * rb);
    float *wf = malloc(rows * cols * sizeof *wf), *x = malloc(n_tok * cols * sizeof *x), *tmp = malloc(cols * 4);
    float *y = malloc(n_tok * rows * 4), *yb = malloc(n_tok * rows * 4);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) tmp[i] = frand() * (r % 3 ? 1.f : 30.f);
        if (r == 2) memset(tmp, 0, cols * 4); /* an all-zero row */
        wt->quant_row(tmp, W + r * rb, cols);
        wt->dequant_row(W + r * rb, wf + r * cols, cols);
    }
    for (int64_t i = 0; i < n_tok * cols; i++) x[i] = frand() * ((i / cols) % 2 ? 0.01f : 8.f);
    if (n_tok > 1) memset(x + cols, 0, cols * 4); /* an all-zero token */
    gm_mm_weight M = {.m = {type, rows, cols, W, 0}};
    gm_matmul_scratch s = {0};
    for (int isa = GM_ISA_SCALAR + 1; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) { /* x86 or NEON */
        gm_mm_bind(&M, (gm_isa)isa);
        CHECK_EQ_INT(gm_mm(&M, x, n_tok, y, pool, &s), GM_OK);
        int bad = 0;
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < rows; r++) {
                double exact;
                double tol = q_bound(wt, wf + r * cols, W + r * rb, x + t * cols, cols, &exact);
                if (!(fabs(y[t * rows + r] - exact) <= tol) && bad++ == 0)
                    fprintf(stderr, "  %s %s rows %lld cols %lld tok %lld: y[%lld,%lld] = %.8g, exact %.8g, tol %.3g\n",
                            gm_isa_name((gm_isa)isa), wt->name, (long long)rows, (long long)cols, (long long)n_tok,
                            (long long)t, (long long)r, y[t * rows + r], exact, tol);
            }
        CHECK_MSG(bad == 0, "%s %s n_tok %lld: %d outputs differ from the exact dot beyond f32 rounding",
                  gm_isa_name((gm_isa)isa), wt->name, (long long)n_tok, bad);
        /* batch invariance: the first tokens alone give the same bits as inside the larger batch */
        if (n_tok >= 8) {
            CHECK_EQ_INT(gm_mm(&M, x, 5, yb, pool, &s), GM_OK);
            CHECK_MSG(memcmp(yb, y, 5 * rows * 4) == 0, "%s %s: 5 tokens differ from the same tokens in a batch of %lld",
                      gm_isa_name((gm_isa)isa), wt->name, (long long)n_tok);
        }
    }
    gm_matmul_scratch_free(&s);
    free(W); free(wf); free(x); free(tmp); free(y); free(yb);
}

TEST(simd_matmul_vs_exact) {
    if (gm_isa_supported() == GM_ISA_SCALAR) {
        fprintf(stderr, "  (no AVX2 or NEON on this CPU: SIMD kernels not tested)\n");
        return;
    }
    gm_pool *p2 = test_pool_new(2);
    for (size_t k = 0; k < sizeof k_types / sizeof k_types[0]; k++) {
        const gm_type_traits *wt = gm_type_traits_of(k_types[k]);
        const bool kq = wt->block_elems == 256;
        simd_case(k_types[k], 13, kq ? 768 : 96, 1, p2);   /* odd rows, short rows (tail chunk) */
        simd_case(k_types[k], 13, kq ? 768 : 96, 3, NULL);
        simd_case(k_types[k], 21, kq ? 512 : 640, 9, p2);  /* tiled path: 4x4 tiles plus remainders */
        simd_case(k_types[k], 6, kq ? 256 : 32, 70, p2);   /* more tokens than one token block (64) */
    }
    gm_pool_free(p2);
}

/* The SIMD activation quantizers must write the scalar reference's bytes. */
TEST(simd_quant_act_exact) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2)) return;
    const int acts[] = {GM_TYPE_Q8_0, GM_TYPE_Q8_1, GM_TYPE_Q8_K};
    float x[1024];
    unsigned char a[2048], b[2048];
    for (int rep = 0; rep < 40; rep++) {
        for (int i = 0; i < 1024; i++) x[i] = frand() * (rep % 4 == 0 ? 1e-6f : rep % 4 == 1 ? 1e3f : 1.f);
        if (rep % 5 == 0) memset(x + 256, 0, 256 * 4);
        if (rep % 7 == 0) /* exact ties after scaling: x = (k + 0.5) * amax / 127 */
            for (int i = 0; i < 32; i++) x[i] = (i == 0 ? 127.f : (float)(i % 9) + 0.5f) / 127.f;
        for (size_t k = 0; k < 3; k++) {
            const gm_type_traits *at = gm_type_traits_of(acts[k]);
            gm_quant_row_fn q = gm_avx2_quant_act(acts[k]);
            CHECK(q != NULL);
            if (!q) continue;
            at->quant_row(x, a, 1024);
            q(x, b, 1024);
            CHECK_MSG(memcmp(a, b, gm_row_bytes(acts[k], 1024)) == 0, "%s quantizer differs (rep %d)", at->name, rep);
        }
        /* the AVX-512 tile path's own activation layout: codes and scales equal the reference's */
        if (gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX512)) {
            const int wtypes[] = {GM_TYPE_Q8_0, GM_TYPE_Q6_K};
            for (int k = 0; k < 2; k++) {
                const gm_type_traits *at = gm_type_traits_of(gm_type_traits_of(wtypes[k])->vec_dot_type);
                static _Alignas(64) unsigned char tok[8192];
                CHECK(gm_avx512_tok_bytes(wtypes[k], 1024) <= sizeof tok);
                gm_avx512_prep(wtypes[k], x, 1024, tok);
                at->quant_row(x, a, 1024);
                const float *sa = (const float *)(tok + 1024); /* a[1024] then one scale per 4 codes */
                int bad = 0;
                for (int i = 0; i < 1024; i++) {
                    const int be = (int)at->block_elems, blk = i / be;
                    const unsigned char *blkp = a + (size_t)blk * at->block_bytes;
                    int8_t q;
                    float d;
                    if (at->type == GM_TYPE_Q8_K) {
                        memcpy(&d, blkp, 4);
                        q = (int8_t)blkp[4 + i % be];
                    } else {
                        uint16_t h;
                        memcpy(&h, blkp, 2);
                        d = gm_fp16_to_fp32(h);
                        q = (int8_t)blkp[2 + i % be];
                    }
                    bad += (int8_t)tok[i] != q || sa[i / 4] != d;
                }
                CHECK_MSG(bad == 0, "avx512 prep for %s: %d codes/scales differ from %s (rep %d)",
                          gm_type_name(wtypes[k]), bad, at->name, rep);
            }
        }
    }
}

/* AVX2 dots directly against the scalar dots on identical operands (AVX-512 computes through the
 * fused / tile kernels: avx512_tok_dot_vs_scalar). */
TEST(simd_vec_dot_vs_scalar) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2)) return;
    for (size_t k = 0; k < sizeof k_types / sizeof k_types[0]; k++) {
        const gm_type_traits *wt = gm_type_traits_of(k_types[k]), *at = gm_type_traits_of(wt->vec_dot_type);
        gm_vec_dot_fn vds[1] = {gm_avx2_vec_dot(k_types[k])};
        for (int level = 0; level < 1; level++) {
            gm_vec_dot_fn vd = vds[level];
            if (!vd) continue; /* Q8_1 / Q8_K weights: scalar only */
            const int64_t n = wt->block_elems == 256 ? 1280 : (wt->block_elems == 1 ? 77 : 224);
            float w[1280], x[1280], wd[1280], xd[1280];
            unsigned char wq[8192], aq[8192];
            int bad = 0;
            for (int rep = 0; rep < 20; rep++) {
                for (int64_t i = 0; i < n; i++) {
                    w[i] = frand() * (rep + 1);
                    x[i] = frand() * 3;
                }
                wt->quant_row(w, wq, n);
                at->quant_row(x, aq, n);
                wt->dequant_row(wq, wd, n);
                at->dequant_row(aq, xd, n);
                float s0, s1;
                wt->vec_dot(n, &s0, wq, aq);
                vd(n, &s1, wq, aq);
                double mag = 0;
                for (int64_t i = 0; i < n; i++) mag += fabs((double)wd[i] * xd[i]);
                if (!(fabs((double)s0 - s1) <= 2e-5 * mag + 1e-6) && bad++ == 0)
                    fprintf(stderr, "  %s: scalar %.8g simd %.8g (mag %.3g)\n", wt->name, s0, s1, mag);
            }
            CHECK_MSG(bad == 0, "%s: %s vec_dot differs from scalar", wt->name, level ? "avx512" : "avx2");
        }
    }
}

/* AVX2 register tiles (gm_avx2_tiles: every tile shape, decode columns and the single rows / tokens at
 * the edges) give each (row, token) exactly the bits of the single-token AVX2 dot on the same
 * operands, and stay within f32 rounding of the scalar dot: every type, odd row and token counts,
 * rows and tokens at padded strides, float rows of odd length (scalar tail). */
TEST(avx2_tiles_vs_dot_and_scalar) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2)) return;
    const int types[] = {GM_TYPE_Q8_0, GM_TYPE_Q5_0, GM_TYPE_Q4_0, GM_TYPE_Q4_1, GM_TYPE_Q5_1, GM_TYPE_Q4_K,
                         GM_TYPE_Q5_K, GM_TYPE_Q6_K, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_F32};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const gm_type_traits *wt = gm_type_traits_of(types[k]), *at = gm_type_traits_of(wt->vec_dot_type);
        gm_avx2_tiles_fn tf = gm_avx2_tiles(types[k]);
        gm_vec_dot_fn vd = gm_avx2_vec_dot(types[k]);
        CHECK_MSG(tf && vd, "%s: no AVX2 tiles", wt->name);
        if (!tf || !vd) continue;
        /* the third shape: rows long enough that the quantized kernels take them in slices of blocks (their
         * octet buffer holds 49152 bytes: 153 32-code blocks, 17 K-quant super-blocks), and more tokens than
         * one pass of the per-token terms (4096 entries) or of K-quant tokens (64) */
        const int64_t ns[3] = {wt->block_elems == 256 ? 768 : wt->block_elems == 1 ? 77 : 352,
                               wt->block_elems == 256 ? 256 : wt->block_elems == 1 ? 16 : 32,
                               wt->block_elems == 256 ? 4608 : wt->block_elems == 1 ? 200 : 5120};
        for (int z = 0; z < 3; z++) {
            const int64_t n = ns[z], rows = 11, n_tok = z == 2 ? 70 : 13, ldy = 17;
            /* strides that are not the row size (kept 4-aligned: the block structs hold 2- and 4-byte fields) */
            const size_t ws = gm_row_bytes(types[k], n) + 12, as = gm_row_bytes(at->type, n) + 4;
            unsigned char *w = calloc(rows, ws), *a = calloc(n_tok, as);
            float *row = malloc(n * 4), *wd = malloc(rows * n * 4), *xd = malloc(n_tok * n * 4);
            float *y = malloc(n_tok * ldy * 4);
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t i = 0; i < n; i++) row[i] = frand() * (r % 4 ? 1.f : 25.f);
                if (r == 3) memset(row, 0, n * 4);
                wt->quant_row(row, w + r * ws, n);
                wt->dequant_row(w + r * ws, wd + r * n, n);
            }
            for (int64_t t = 0; t < n_tok; t++) {
                for (int64_t i = 0; i < n; i++) row[i] = frand() * (t % 3 ? 2.f : 0.03f);
                at->quant_row(row, a + t * as, n);
                at->dequant_row(a + t * as, xd + t * n, n);
            }
            int bad_bits = 0, bad_ref = 0;
            for (int64_t nt = 1; nt <= n_tok; nt += 3) /* decode columns, full tiles and edges */
                for (int64_t nr = 1; nr <= rows; nr += 5) {
                    for (int64_t i = 0; i < n_tok * ldy; i++) y[i] = NAN;
                    tf(n, w, ws, nr, a, as, nt, y, ldy);
                    for (int64_t t = 0; t < nt; t++)
                        for (int64_t r = 0; r < nr; r++) {
                            float s1, s0;
                            vd(n, &s1, w + r * ws, a + t * as);
                            wt->vec_dot(n, &s0, w + r * ws, a + t * as);
                            const float yt = y[t * ldy + r];
                            bad_bits += memcmp(&yt, &s1, 4) != 0;
                            double mag = 0;
                            for (int64_t i = 0; i < n; i++) mag += fabs((double)wd[r * n + i] * xd[t * n + i]);
                            if (!(fabs((double)s0 - yt) <= 2e-5 * mag + 1e-6) && bad_ref++ == 0)
                                fprintf(stderr, "  %s n %lld r %lld t %lld: scalar %.8g tile %.8g\n", wt->name,
                                        (long long)n, (long long)r, (long long)t, s0, yt);
                        }
                    for (int64_t t = nt; t < n_tok; t++) /* nothing outside the block written */
                        for (int64_t r = 0; r < ldy; r++) bad_bits += !isnan(y[t * ldy + r]);
                }
            CHECK_MSG(bad_bits == 0, "%s n %lld: %d tile outputs differ from the AVX2 dot's bits", wt->name, (long long)n,
                      bad_bits);
            CHECK_MSG(bad_ref == 0, "%s n %lld: %d tile outputs off the scalar dot", wt->name, (long long)n, bad_ref);
            free(w), free(a), free(row), free(wd), free(xd), free(y);
        }
    }
}

/* Decode dots against prepared tokens (two blocks per vector, odd block counts too) vs the scalar
 * dot on the same quantized operands. */
/* The AVX2 F16x8 / BF16x8 kernels (kernels/f16x8_avx2.c) give, for every (row, token), the bits of their
 * stated arithmetic emulated in scalar C (one sum from 0, fmaf over the columns in order), whatever the
 * tokens (decode, 6-token tiles and their edges, token blocks) or the row range (groups of 8, a range
 * ending inside a group); within n u sum |w x| of the float64 dot; nothing written outside the range.
 * Through gm_mm (a 2-thread pool, a packed copy bound as the CPU backend does) the same bits for 1 and 70
 * tokens. */
static float half_to_f32(int type, uint16_t h) { return type == GM_TYPE_F16 ? gm_fp16_to_fp32(h) : gm_bf16_to_fp32(h); }

static void x8_case(int type, int64_t n, gm_pool *p2) {
    gm_avx2_tiles_fn tf = gm_avx2_x8_tiles(type);
    const int64_t rows = 40, n_tok = 70, ldy = 43;
    const int64_t ranges[][2] = {{0, 40}, {8, 37}, {16, 17}, {32, 40}};
    const int nts[] = {1, 2, 5, 6, 7, 13, 64, 65, 70};
    uint16_t *w = malloc(rows * n * 2), *wp = malloc(rows * n * 2);
    float *x = malloc(n_tok * n * 4), *want = malloc(n_tok * rows * 4), *y = malloc(n_tok * ldy * 4);
    int bad_bits = 0, bad_ref = 0, bad_out = 0;
    for (int64_t i = 0; i < rows * n; i++) {
        const float v = frand() * (i / n % 5 ? 1.f : 30.f);
        w[i] = type == GM_TYPE_F16 ? gm_fp32_to_fp16(v) : gm_fp32_to_bf16(v);
    }
    for (int64_t i = 0; i < n_tok * n; i++) x[i] = frand() * (i / n % 3 ? 2.f : 0.01f);
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < rows; r++) {
            float acc = 0.0f;
            double exact = 0.0, m = 0.0;
            for (int64_t k = 0; k < n; k++) {
                const float wk = half_to_f32(type, w[r * n + k]);
                acc = fmaf(wk, x[t * n + k], acc);
                exact += (double)wk * x[t * n + k];
                m += fabs((double)wk * x[t * n + k]);
            }
            want[t * rows + r] = acc;
            bad_ref += !(fabs(exact - acc) <= (double)n * 0x1p-24 * m + 1e-30);
        }
    gm_pack_x8(w, wp, rows, n);
    for (size_t b = 0; b < sizeof nts / sizeof nts[0]; b++)
        for (size_t q = 0; q < sizeof ranges / sizeof ranges[0]; q++) {
            const int64_t nt = nts[b], r0 = ranges[q][0], r1 = ranges[q][1];
            for (int64_t i = 0; i < n_tok * ldy; i++) y[i] = NAN;
            tf(n, wp + r0 * n, (size_t)n * 2, r1 - r0, x, (size_t)n * 4, nt, y + r0, ldy);
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = 0; r < ldy; r++) {
                    const float v = y[t * ldy + r];
                    if (t < nt && r >= r0 && r < r1) bad_bits += memcmp(&v, &want[t * rows + r], 4) != 0;
                    else bad_out += !isnan(v);
                }
        }
    gm_mm_weight M = {{type, rows, n, w, 0}, type == GM_TYPE_F16 ? GM_KTYPE_F16X8 : GM_KTYPE_BF16X8, wp, NULL};
    gm_matmul_scratch s = {0};
    gm_mm_bind(&M, GM_ISA_AVX2);
    for (int k = 0; k < 2; k++) {
        const int64_t nt = k ? n_tok : 1;
        CHECK_EQ_INT(gm_mm(&M, x, nt, y, p2, &s), GM_OK);
        for (int64_t i = 0; i < nt * rows; i++) bad_bits += memcmp(&want[i], &y[i], 4) != 0;
    }
    gm_matmul_scratch_free(&s);
    const char *name = gm_type_name(type);
    CHECK_MSG(bad_bits == 0, "%s n %lld: %d outputs differ from the emulated arithmetic", name, (long long)n, bad_bits);
    CHECK_MSG(bad_ref == 0, "%s n %lld: %d emulated sums off the float64 dot", name, (long long)n, bad_ref);
    CHECK_MSG(bad_out == 0, "%s n %lld: %d outputs written outside the range", name, (long long)n, bad_out);
    free(w), free(wp), free(x), free(want), free(y);
}

TEST(avx2_x8_tiles_exact_and_invariant) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2) || !gm_avx2_x8_tiles(GM_TYPE_F16)) return;
    CHECK(gm_avx2_x8_tiles(GM_TYPE_BF16) && !gm_avx2_x8_tiles(GM_TYPE_F32) && !gm_avx2_x8_tiles(GM_TYPE_Q5_K));
    gm_pool *p2 = test_pool_new(2);
    const int types[2] = {GM_TYPE_F16, GM_TYPE_BF16};
    for (int k = 0; k < 2; k++) {
        x8_case(types[k], 77, p2);
        x8_case(types[k], 640, p2);
    }
    gm_pool_free(p2);
}

/* The AVX2 kernels over x8-packed 32-code quantized rows (kernels/pack.h) give the bits of the file-layout
 * AVX2 kernels (gm_avx2_qtiles, checked against the scalar dot above) for every (row, token): decode, tiles
 * and their token edges, block slices (prefill's octet slices, decode's side-term slices), row ranges from a
 * group start ending anywhere; nothing written outside the range. Packing is a bijection (unpack gives the
 * file's bytes back). Through gm_mm on a 2-thread pool, a packed copy bound as the CPU backend binds it, the
 * same bits as the file rows for 1 and 70 tokens, at AVX2 and AVX-512, before and after the copy is made. */
static void qx8_case(int type, int64_t n, int64_t rows, const int *nts, int n_nts, gm_pool *p2) {
    const gm_type_traits *wt = gm_type_traits_of(type), *at = gm_type_traits_of(wt->vec_dot_type);
    const size_t ws = gm_row_bytes(type, n), as = gm_row_bytes(at->type, n);
    const int64_t n_tok = 70, ldy = rows + 3;
    const int64_t ranges[][2] = {{0, rows}, {8, rows - 3}, {rows - 8, rows - 7}, {rows - 8, rows}};
    char *w = malloc(rows * ws), *wp = malloc(rows * ws), *back = malloc(rows * ws), *a = malloc(n_tok * as);
    float *row = malloc(n * 4), *want = malloc(n_tok * ldy * 4), *y = malloc(n_tok * ldy * 4);
    float *x = malloc(n_tok * n * 4), *yf = malloc(n_tok * rows * 4);
    int bad_bits = 0, bad_out = 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) row[i] = frand() * (r % 4 ? 1.f : 25.f);
        wt->quant_row(row, w + r * ws, n);
    }
    for (int64_t i = 0; i < n_tok * n; i++) x[i] = frand() * ((i / n) % 3 ? 2.f : 0.03f);
    for (int64_t t = 0; t < n_tok; t++) at->quant_row(x + t * n, a + t * as, n);
    gm_pack_qx8(type, w, wp, rows, n);
    gm_unpack_qx8(type, wp, back, rows, n);
    CHECK_MSG(memcmp(w, back, rows * ws) == 0, "%s n %lld: unpack(pack(w)) != w", wt->name, (long long)n);
    gm_avx2_tiles_fn file = gm_avx2_qtiles(type), packed = gm_avx2_qx8_tiles(type);
    for (int b = 0; b < n_nts; b++)
        for (size_t q = 0; q < sizeof ranges / sizeof ranges[0]; q++) {
            const int64_t nt = nts[b], r0 = ranges[q][0], r1 = ranges[q][1];
            file(n, w + r0 * ws, ws, r1 - r0, a, as, nt, want + r0, ldy);
            for (int64_t i = 0; i < n_tok * ldy; i++) y[i] = NAN;
            packed(n, wp + r0 * ws, ws, r1 - r0, a, as, nt, y + r0, ldy);
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t r = 0; r < ldy; r++) {
                    const float v = y[t * ldy + r];
                    if (t < nt && r >= r0 && r < r1) bad_bits += memcmp(&v, &want[t * ldy + r], 4) != 0;
                    else bad_out += !isnan(v);
                }
        }
    /* F: the file rows at AVX2; M: the copy; P: a copy still being made (backends/cpu/repack.c packs in the
     * background), both bound at AVX2 and, where the CPU has it, at AVX-512, which runs the same kernels */
    gm_mm_weight F = {{type, rows, n, w, 0}, 0, NULL, NULL}, M = {{type, rows, n, w, 0}, GM_KTYPE_X8(type), wp, NULL},
                 P = {{type, rows, n, w, 0}, GM_KTYPE_X8(type), NULL, NULL};
    gm_matmul_scratch s = {0};
    gm_mm_bind(&F, GM_ISA_AVX2);
    for (int isa = GM_ISA_AVX2; isa <= GM_ISA_AVX512; isa++) if (gm_isa_runs((gm_isa)isa)) {
        gm_mm_bind(&M, (gm_isa)isa);
        gm_mm_bind(&P, (gm_isa)isa);
        CHECK(gm_mm_kernel_of(&M)->packed && !gm_mm_kernel_of(&P)->packed);
        const int64_t mm_nts[] = {1, 19, 20, 23, 33, n_tok}; /* every remainder of 4- and 6-token tiles */
        for (int k = 0; k < 6 && n * rows <= 1 << 20; k++) {
            const int64_t nt = mm_nts[k];
            CHECK_EQ_INT(gm_mm(&F, x, nt, yf, p2, &s), GM_OK);
            CHECK_EQ_INT(gm_mm(&M, x, nt, y, p2, &s), GM_OK);
            for (int64_t i = 0; i < nt * rows; i++) bad_bits += memcmp(&yf[i], &y[i], 4) != 0;
            CHECK_EQ_INT(gm_mm(&P, x, nt, y, p2, &s), GM_OK);
            for (int64_t i = 0; i < nt * rows; i++) bad_bits += memcmp(&yf[i], &y[i], 4) != 0;
        }
    }
    gm_matmul_scratch_free(&s);
    CHECK_MSG(bad_bits == 0, "%s n %lld: %d packed outputs differ from the file rows' bits", wt->name, (long long)n, bad_bits);
    CHECK_MSG(bad_out == 0, "%s n %lld: %d outputs written outside the range", wt->name, (long long)n, bad_out);
    free(w), free(wp), free(back), free(a), free(row), free(want), free(y), free(x), free(yf);
}

TEST(avx2_qx8_tiles_same_bits_as_file_rows) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2) || !gm_avx2_qx8_tiles(GM_TYPE_Q5_0)) return;
    CHECK(!gm_avx2_qx8_tiles(GM_TYPE_Q5_K) && !gm_avx2_qx8_tiles(GM_TYPE_F16));
    CHECK(gm_avx2_x8_tiles(GM_TYPE_Q5_0) == gm_avx2_qx8_tiles(GM_TYPE_Q5_0));
    gm_pool *p2 = test_pool_new(2);
    const int types[] = {GM_TYPE_Q4_0, GM_TYPE_Q4_1, GM_TYPE_Q5_0, GM_TYPE_Q5_1, GM_TYPE_Q8_0, GM_TYPE_Q4_K, GM_TYPE_Q6_K};
    const int nts[] = {1, 2, 3, 4, 5, 9, 70}, few[] = {1, 2};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        CHECK(gm_avx2_qx8_tiles(types[k]) != NULL);
        if (types[k] == GM_TYPE_Q4_K || types[k] == GM_TYPE_Q6_K) {
            qx8_case(types[k], 256, 24, nts, 7, p2);
            qx8_case(types[k], 768, 40, nts, 7, p2);
            qx8_case(types[k], 2048, 16, nts, 7, p2);
            qx8_case(types[k], 256 * 20, 16, nts, 7, p2); /* prefill: octets in slices of super-blocks */
            continue;
        }
        qx8_case(types[k], 32, 24, nts, 7, p2);
        qx8_case(types[k], 96, 40, nts, 7, p2);
        qx8_case(types[k], 640, 40, nts, 7, p2);
        qx8_case(types[k], 32 * 160, 16, nts, 7, p2);     /* prefill: octets in slices of blocks */
        qx8_case(types[k], 32 * 4100, 16, few, 2, p2);     /* decode: side terms in slices of blocks */
    }
    gm_pool_free(p2);
}

/* The AVX2 few-token kernels (kernels/mtok_avx2.c) give each (row, token) the bits of the one-token AVX2 kernel
 * (gm_avx2_qtiles with one token, on the file's rows) for 1 to 16 tokens: file rows of odd counts split
 * anywhere, x8 copies split at group starts and ending anywhere; tokens put in any order; nothing written
 * outside the range. Through gm_mm on a 2-thread pool (matrices bound for AVX2 as the CPU backend binds them),
 * each token of a 2..16-token call has the bits of its one-token call. */
static void mtok_case(int type, int64_t n, int64_t rows, bool x8, gm_pool *p2) {
    enum { NT = GM_AVX2_MTOK_MAX };
    const gm_type_traits *wt = gm_type_traits_of(type), *at = gm_type_traits_of(wt->vec_dot_type);
    const size_t ws = gm_row_bytes(type, n), as = gm_row_bytes(at->type, n);
    const int64_t ldy = rows + 5;
    const int64_t ranges[2][4][2] = {{{0, rows}, {3, rows}, {5, 6}, {rows - 9, rows - 1}},
                                     {{0, rows}, {8, rows - 3}, {rows - 8, rows - 7}, {16, rows}}};
    char *w = malloc(rows * ws), *wp = malloc(rows * ws), *a = malloc(NT * as);
    char *toks = malloc(gm_avx2_mtok_bytes(at->type, n, NT));
    float *x = malloc(NT * n * 4), *want = malloc(NT * ldy * 4), *y = malloc(NT * ldy * 4), *row = malloc(n * 4);
    int bad_bits = 0, bad_out = 0, bad_mm = 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) row[i] = r == 2 ? 0.f : frand() * (r % 4 ? 1.f : 25.f);
        wt->quant_row(row, w + r * ws, n);
    }
    for (int64_t i = 0; i < NT * n; i++) x[i] = frand() * ((i / n) % 3 ? 2.f : 0.03f);
    gm_avx2_tiles_fn one = gm_avx2_qtiles(type);
    for (int64_t t = 0; t < NT; t++) {
        at->quant_row(x + t * n, a + t * as, n);
        one(n, w, ws, rows, a + t * as, as, 1, want + t * ldy, ldy);
    }
    if (x8) gm_pack_qx8(type, w, wp, rows, n);
    gm_avx2_mtok_fn fn = x8 ? gm_avx2_x8_mtok(type) : gm_avx2_mtok(type);
    const char *wm = x8 ? wp : w;
    for (int64_t T = 1; T <= NT; T++) {
        for (int64_t t = T - 1; t >= 0; t--) gm_avx2_mtok_put(at->type, n, a + t * as, t, T, toks);
        for (int q = 0; q < 4; q++) {
            const int64_t r0 = ranges[x8][q][0], r1 = ranges[x8][q][1];
            for (int64_t i = 0; i < NT * ldy; i++) y[i] = NAN;
            fn(n, wm + r0 * ws, ws, r1 - r0, toks, T, y + r0, ldy);
            for (int64_t t = 0; t < NT; t++)
                for (int64_t r = 0; r < ldy; r++) {
                    const float v = y[t * ldy + r];
                    if (t < T && r >= r0 && r < r1) bad_bits += memcmp(&v, &want[t * ldy + r], 4) != 0;
                    else bad_out += !isnan(v);
                }
        }
    }
    gm_mm_weight M = {{type, rows, n, w, 0}, x8 ? GM_KTYPE_X8(type) : 0, x8 ? wp : NULL, NULL};
    gm_matmul_scratch s = {0};
    gm_mm_bind(&M, GM_ISA_AVX2);
    CHECK(gm_mm_kernel_of(&M)->mtok2 == fn);
    for (int64_t T = 2; T <= NT; T++) {
        CHECK_EQ_INT(gm_mm(&M, x, T, y, p2, &s), GM_OK);
        for (int64_t t = 0; t < T; t++)
            for (int64_t r = 0; r < rows; r++) bad_mm += memcmp(&y[t * rows + r], &want[t * ldy + r], 4) != 0;
    }
    gm_matmul_scratch_free(&s);
    CHECK_MSG(bad_bits == 0, "%s n %lld %s: %d few-token outputs differ from the one-token kernel's bits", wt->name,
              (long long)n, x8 ? "x8" : "file rows", bad_bits);
    CHECK_MSG(bad_out == 0, "%s n %lld: %d outputs written outside the range", wt->name, (long long)n, bad_out);
    CHECK_MSG(bad_mm == 0, "%s n %lld %s: %d gm_mm outputs of 2-16 tokens differ from one token's", wt->name,
              (long long)n, x8 ? "x8" : "file rows", bad_mm);
    free(w), free(wp), free(a), free(toks), free(x), free(want), free(y), free(row);
}

TEST(avx2_mtok_same_bits_as_one_token) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2) || !gm_avx2_mtok(GM_TYPE_Q8_0)) return;
    gm_pool *p2 = test_pool_new(2);
    const int types[] = {GM_TYPE_Q8_0, GM_TYPE_Q5_0, GM_TYPE_Q4_0, GM_TYPE_Q4_1, GM_TYPE_Q5_1,
                         GM_TYPE_Q4_K, GM_TYPE_Q5_K, GM_TYPE_Q6_K};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const bool K = gm_type_traits_of(types[k])->block_elems == 256;
        CHECK(gm_avx2_mtok(types[k]) != NULL);
        CHECK((gm_avx2_x8_mtok(types[k]) != NULL) == (gm_avx2_qx8_tiles(types[k]) != NULL));
        mtok_case(types[k], K ? 256 : 32, 37, false, p2);
        mtok_case(types[k], K ? 768 : 352, 13, false, p2); /* odd block counts */
        mtok_case(types[k], K ? 2048 : 640, 21, false, p2);
        if (!gm_avx2_x8_mtok(types[k])) continue;
        mtok_case(types[k], K ? 256 : 32, 24, true, p2);
        mtok_case(types[k], K ? 768 : 352, 40, true, p2);
        mtok_case(types[k], K ? 2048 : 640, 32, true, p2);
    }
    CHECK(!gm_avx2_mtok(GM_TYPE_F16) && !gm_avx2_mtok(GM_TYPE_F32) && !gm_avx2_x8_mtok(GM_TYPE_Q5_K));
    gm_pool_free(p2);
}

/* gm_mm_multi at the AVX2 level (q / k / v of mixed types over x8 copies, one pool call on activations quantized
 * once, as layer_forward calls it): each token of a 2..16-token call has the bits of its own one-token gm_mm. */
TEST(avx2_mtok_multi_same_bits_as_one_token) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX2) || !gm_avx2_x8_mtok(GM_TYPE_Q5_0)) return;
    enum { NT = GM_AVX2_MTOK_MAX };
    const int64_t cols = 640, rows[3] = {64, 16, 24};
    const int types[3] = {GM_TYPE_Q5_0, GM_TYPE_Q5_0, GM_TYPE_Q8_0};
    gm_mm_weight W[3];
    char *data[3], *pk[3];
    float *one[3], *y[3], *x = malloc(NT * cols * 4), *row = malloc(cols * 4);
    for (int i = 0; i < 3; i++) {
        const size_t rb = gm_row_bytes(types[i], cols);
        data[i] = malloc(rb * rows[i]), pk[i] = malloc(rb * rows[i]);
        one[i] = malloc(NT * rows[i] * 4), y[i] = malloc(NT * rows[i] * 4);
        for (int64_t r = 0; r < rows[i]; r++) {
            for (int64_t c = 0; c < cols; c++) row[c] = frand() * (r % 3 ? 1.f : 9.f);
            gm_type_traits_of(types[i])->quant_row(row, data[i] + rb * r, cols);
        }
        gm_pack_qx8(types[i], data[i], pk[i], rows[i], cols);
        W[i] = (gm_mm_weight){{types[i], rows[i], cols, data[i], 0}, GM_KTYPE_X8(types[i]), pk[i], NULL};
        gm_mm_bind(&W[i], GM_ISA_AVX2);
    }
    for (int64_t i = 0; i < NT * cols; i++) x[i] = frand() * 2;
    gm_pool *p2 = test_pool_new(2);
    gm_matmul_scratch s = {0};
    for (int i = 0; i < 3; i++)
        for (int64_t t = 0; t < NT; t++) CHECK_EQ_INT(gm_mm(&W[i], x + t * cols, 1, one[i] + t * rows[i], p2, &s), GM_OK);
    int bad = 0;
    const gm_mm_weight *Wp[3] = {&W[0], &W[1], &W[2]};
    for (int64_t T = 2; T <= NT; T++) {
        CHECK_EQ_INT(gm_mm_multi(Wp, y, 3, x, T, p2, &s), GM_OK);
        for (int i = 0; i < 3; i++) bad += memcmp(y[i], one[i], (size_t)(T * rows[i]) * 4) != 0;
    }
    CHECK_MSG(bad == 0, "%d of 45 (calls, matrix) differ from the one-token calls' bits", bad);
    gm_matmul_scratch_free(&s);
    gm_pool_free(p2);
    for (int i = 0; i < 3; i++) free(data[i]), free(pk[i]), free(one[i]), free(y[i]);
    free(x), free(row);
}

TEST(avx512_tok_dot_vs_scalar) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX512)) return;
    const int types[] = {GM_TYPE_Q8_0, GM_TYPE_Q5_0, GM_TYPE_Q4_K, GM_TYPE_Q6_K, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_F32};
    const int64_t sizes[] = {1, 17, 32, 64, 79, 96, 224, 256, 640, 1024, 2048, 2080};
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        gm_vec_dot_fn td = gm_avx512_tok_dot(types[k]);
        if (!td) continue; /* Q5_0 needs VBMI */
        const gm_type_traits *wt = gm_type_traits_of(types[k]), *at = gm_type_traits_of(wt->vec_dot_type);
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            const int64_t n = sizes[z];
            if (n % wt->block_elems) continue; /* K-quants: whole 256-code blocks only */
            static float w[2080], x[2080], wd[2080], xd[2080];
            static unsigned char wq[16384], aq[16384];
            static _Alignas(64) unsigned char tok[16384];
            int bad = 0;
            for (int rep = 0; rep < 10; rep++) {
                for (int64_t i = 0; i < n; i++) {
                    w[i] = frand() * (rep + 1);
                    x[i] = frand() * 3;
                }
                wt->quant_row(w, wq, n);
                at->quant_row(x, aq, n);
                wt->dequant_row(wq, wd, n);
                at->dequant_row(aq, xd, n);
                CHECK(gm_avx512_tok_bytes(types[k], n) <= sizeof tok);
                gm_avx512_prep(types[k], x, n, tok);
                float s0, s1;
                wt->vec_dot(n, &s0, wq, aq);
                td(n, &s1, wq, tok);
                double mag = 0;
                for (int64_t i = 0; i < n; i++) mag += fabs((double)wd[i] * xd[i]);
                if (!(fabs((double)s0 - s1) <= 2e-5 * mag + 1e-6) && bad++ == 0)
                    fprintf(stderr, "  %s n %lld: scalar %.8g tok_dot %.8g (mag %.3g)\n", wt->name, (long long)n, s0, s1, mag);
            }
            CHECK_MSG(bad == 0, "%s n %lld: avx512 tok_dot differs from scalar", wt->name, (long long)n);
        }
    }
}

/* gm_mm_multi: one pool call over q/k/v-like matrices of mixed types gives exactly the bytes of
 * separate gm_mm calls, for 1 token (fused path) and 5 tokens (fallback), 1 and 2 threads. */
/* gm_mm_multi (one pool call for q/k/v or gate/up) gives each matrix the bytes of its own gm_mm, at
 * every ISA level: row counts that a row group straddles (37: separate calls on AVX2) and multiples of 8 (one
 * pool call), file rows and x8 copies (AVX2's packed kernels), 1 and 5 tokens, 1 and 2 threads. */
static void multi_case(const int64_t rows[3], bool packed) {
    const int64_t cols = 640;
    const int types[3] = {GM_TYPE_Q5_0, GM_TYPE_Q5_0, GM_TYPE_Q8_0};
    gm_mm_weight W[3];
    void *data[3], *pk[3];
    for (int i = 0; i < 3; i++) {
        const size_t rb = gm_row_bytes(types[i], cols);
        data[i] = malloc(rb * (size_t)rows[i]);
        pk[i] = malloc(rb * (size_t)rows[i]);
        float *row = malloc(sizeof(float) * cols);
        for (int64_t r = 0; r < rows[i]; r++) {
            for (int64_t c = 0; c < cols; c++) row[c] = frand();
            gm_type_traits_of(types[i])->quant_row(row, (char *)data[i] + rb * (size_t)r, cols);
        }
        free(row);
        W[i] = (gm_mm_weight){{types[i], rows[i], cols, data[i], 0}, 0, NULL, NULL};
        if (packed) {
            gm_pack_qx8(types[i], data[i], pk[i], rows[i], cols);
            W[i].packed_type = GM_KTYPE_X8(types[i]), W[i].packed = pk[i];
        }
    }
    float *x = malloc(sizeof(float) * cols * 5);
    for (int64_t i = 0; i < cols * 5; i++) x[i] = frand() * 2;
    for (int isa = GM_ISA_SCALAR; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) {
        for (int i = 0; i < 3; i++) gm_mm_bind(&W[i], (gm_isa)isa);
        for (int nt = 1; nt <= 2; nt++) {
            gm_pool *p = test_pool_new(nt);
            gm_matmul_scratch sc = {0};
            for (int64_t n_tok = 1; n_tok <= 5; n_tok += 4) {
                float *a[3], *b[3];
                for (int i = 0; i < 3; i++) {
                    a[i] = calloc((size_t)(rows[i] * n_tok), sizeof(float));
                    b[i] = calloc((size_t)(rows[i] * n_tok), sizeof(float));
                    CHECK(gm_mm(&W[i], x, n_tok, a[i], p, &sc) == GM_OK);
                }
                const gm_mm_weight *Wp[3] = {&W[0], &W[1], &W[2]};
                CHECK(gm_mm_multi(Wp, b, 3, x, n_tok, p, &sc) == GM_OK);
                for (int i = 0; i < 3; i++) {
                    CHECK_MSG(memcmp(a[i], b[i], sizeof(float) * (size_t)(rows[i] * n_tok)) == 0,
                              "matrix %d of %lld rows, %lld tokens, %d threads, isa %s%s", i, (long long)rows[i],
                              (long long)n_tok, nt, gm_isa_name((gm_isa)isa), packed ? ", x8" : "");
                    free(a[i]), free(b[i]);
                }
            }
            gm_matmul_scratch_free(&sc);
            gm_pool_free(p);
        }
    }
    for (int i = 0; i < 3; i++) free(data[i]), free(pk[i]);
    free(x);
}

TEST(matmul_multi_equals_separate) {
    const int64_t straddled[3] = {200, 37, 64}, grouped[3] = {200, 40, 64};
    multi_case(straddled, false);
    multi_case(grouped, false);
    multi_case(grouped, true);
}

/* Decode rows of a layer-sized matrix are split in one slice per thread, and a thread done early
 * takes batches from the back of the other's slice: every row must be written exactly once, with
 * the bytes of the serial run, however the race between the threads goes (repeated 20 times). */
TEST(decode_split_with_stealing_covers_every_row) {
    gm_pool *p2 = test_pool_new(2), *p3 = test_pool_new(3);
    CHECK(p2 && p3);
    const int64_t rows = 8192, cols = 64; /* the largest matrix that takes the stealing split */
    const gm_type_traits *wt = gm_type_traits_of(GM_TYPE_Q8_0);
    const size_t rb = gm_row_bytes(GM_TYPE_Q8_0, cols);
    unsigned char *W = malloc(rows * rb);
    float x[64], tmp[64], *y0 = malloc(rows * 4), *y1 = malloc(rows * 4);
    for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < cols; i++) tmp[i] = frand() * (1 + r % 7);
        wt->quant_row(tmp, W + r * rb, cols);
    }
    for (int i = 0; i < cols; i++) x[i] = frand();
    gm_matrix M = {GM_TYPE_Q8_0, rows, cols, W, 0};
    gm_matmul_scratch s = {0};
    CHECK_EQ_INT(gm_matmul(&M, x, 1, y0, NULL, &s), GM_OK);
    int bad = 0;
    for (int rep = 0; rep < 20; rep++) {
        for (int64_t r = 0; r < rows; r++) y1[r] = NAN;
        CHECK_EQ_INT(gm_matmul(&M, x, 1, y1, rep % 2 ? p3 : p2, &s), GM_OK);
        bad += memcmp(y0, y1, rows * 4) != 0;
    }
    CHECK_MSG(bad == 0, "%d of 20 threaded decode runs differ from the serial one", bad);
    gm_matmul_scratch_free(&s);
    gm_pool_free(p2);
    gm_pool_free(p3);
    free(W); free(y0); free(y1);
}

/* Batch invariance: a token's outputs are the same bits computed alone, in a batch of 2, 3, 5, 9, 17 or 70
 * (the fused decode kernels up to 16 tokens, the tiles beyond, on AVX-512) with different companions, on
 * 1 or 2 threads, and through gm_mm_multi: for every type and every ISA level. */
TEST(batch_invariance_every_type_and_isa) {
    gm_pool *p2 = test_pool_new(2);
    const int batches[] = {1, 2, 3, 5, 9, 17, 70};
    for (size_t k = 0; k < sizeof k_types / sizeof k_types[0]; k++) {
        const int type = k_types[k];
        const gm_type_traits *wt = gm_type_traits_of(type);
        /* 352: an odd number of 32-blocks; 357 for float rows: a tail after the 8-wide steps */
        const int64_t rows = 37, cols = wt->block_elems == 256 ? 768 : wt->block_elems == 1 ? 357 : 352;
        const size_t rb = gm_row_bytes(type, cols);
        unsigned char *W = malloc(rows * rb);
        float *tmp = malloc(cols * 4), *x = malloc(70 * cols * 4), *alone = malloc(rows * 4), *y = malloc(70 * rows * 4);
        float *y2 = malloc(70 * rows * 4);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < cols; i++) tmp[i] = frand() * (r % 5 ? 1.f : 20.f);
            wt->quant_row(tmp, W + r * rb, cols);
        }
        for (int64_t i = 0; i < 70 * cols; i++) x[i] = frand() * ((i / cols) % 3 ? 1.f : 7.f);
        gm_mm_weight M = {.m = {type, rows, cols, W, 0}};
        gm_matmul_scratch s = {0};
        for (int isa = GM_ISA_SCALAR; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) {
            gm_mm_bind(&M, (gm_isa)isa);
            int bad = 0;
            for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
                const int n = batches[b];
                /* token 0 of the batch is x row 69; the others differ per batch size */
                float *xb = malloc((size_t)n * cols * 4);
                memcpy(xb, x + 69 * cols, cols * 4);
                for (int t = 1; t < n; t++) memcpy(xb + t * cols, x + ((t * 7 + n) % 69) * cols, cols * 4);
                CHECK_EQ_INT(gm_mm(&M, xb, n, y, b % 2 ? p2 : NULL, &s), GM_OK);
                if (n == 1) memcpy(alone, y, rows * 4);
                bad += memcmp(alone, y, rows * 4) != 0;
                const gm_mm_weight *Ws[2] = {&M, &M};
                float *const ys[2] = {y2, y2 + (size_t)n * rows};
                if (n <= 35) {
                    CHECK_EQ_INT(gm_mm_multi(Ws, ys, 2, xb, n, p2, &s), GM_OK);
                    bad += memcmp(alone, y2, rows * 4) != 0 || memcmp(alone, y2 + (size_t)n * rows, rows * 4) != 0;
                }
                free(xb);
            }
            CHECK_MSG(bad == 0, "%s %s: %d batches give token 0 other bits than alone", gm_isa_name((gm_isa)isa),
                      wt->name, bad);
        }
        gm_matmul_scratch_free(&s);
        free(W), free(tmp), free(x), free(alone), free(y), free(y2);
    }
    gm_pool_free(p2);
}

/* ---- the one-token SIMD arithmetic, stated in portable C (the comments of kernels/qtiles_avx2.c and
 * kernels/vec_neon.c): per block the exact integer dot, then one f32 fma chain from 0 (quantized types); eight f32
 * lanes of fmas, AVX2's hsum8, an unfused tail (float types). The AVX2 dots and both NEON levels' must give these
 * bits exactly: the x86 run checks the statement against AVX2, the AArch64 run (qemu) NEON against it, so NEON
 * and AVX2 outputs are the same bits without running both on one machine. */
static int canon_q6(const gm_block_q6_K *b, int e) { /* the 6-bit code of element e, 0..63 */
    const int h = e >> 7, r = e & 127, k = r >> 5, l = r & 31;
    const uint8_t ql = b->ql[64 * h + l + (k & 1) * 32];
    return ((k & 2) ? ql >> 4 : ql & 0xF) | (((b->qh[32 * h + l] >> (2 * k)) & 3) << 4);
}

static float canon_dot(int type, int64_t n, const void *w, const void *a) {
    float acc = 0.f;
    if (type == GM_TYPE_F32 || type == GM_TYPE_F16 || type == GM_TYPE_BF16) {
        float lane[8] = {0};
        const float *x = a;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            float wv[8];
            for (int l = 0; l < 8; l++) {
                const uint16_t h = type == GM_TYPE_F32 ? 0 : ((const uint16_t *)w)[i + l];
                wv[l] = type == GM_TYPE_F32 ? ((const float *)w)[i + l] : type == GM_TYPE_F16 ? gm_fp16_to_fp32(h) : gm_bf16_to_fp32(h);
            }
            for (int l = 0; l < 8; l++) lane[l] = fmaf(wv[l], x[i + l], lane[l]);
        }
        float s4[4], s;
        for (int l = 0; l < 4; l++) s4[l] = lane[l] + lane[l + 4];
        s = (s4[0] + s4[2]) + (s4[1] + s4[3]);
        for (; i < n; i++) {
            const uint16_t h = type == GM_TYPE_F32 ? 0 : ((const uint16_t *)w)[i];
            const float wi = type == GM_TYPE_F32 ? ((const float *)w)[i] : type == GM_TYPE_F16 ? gm_fp16_to_fp32(h) : gm_bf16_to_fp32(h);
            const float p = wi * x[i];
            s += p;
        }
        return s;
    }
    if (type == GM_TYPE_Q4_K || type == GM_TYPE_Q6_K) {
        const gm_block_q8_K *y = a;
        for (int64_t i = 0; i < n / 256; i++) {
            const float da = y[i].d;
            int isum = 0, msum = 0;
            if (type == GM_TYPE_Q4_K) {
                const gm_block_q4_K *x = (const gm_block_q4_K *)w + i;
                for (int j = 0; j < 8; j++) {
                    int sc, mn, d = 0;
                    gm_k4_scale_min(j, x->scales, &sc, &mn);
                    for (int l = 0; l < 32; l++) d += ((x->qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF) * y[i].qs[32 * j + l];
                    isum += sc * d;
                    msum += mn * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
                }
                const float dv = gm_fp16_to_fp32(x->d) * da, dm = gm_fp16_to_fp32(x->dmin) * da;
                acc = fmaf((float)isum, dv, acc);
                acc = fmaf((float)msum, -dm, acc);
            } else {
                const gm_block_q6_K *x = (const gm_block_q6_K *)w + i;
                for (int g = 0; g < 16; g++) {
                    int d = 0;
                    for (int l = 0; l < 16; l++) d += (canon_q6(x, 16 * g + l) - 32) * y[i].qs[16 * g + l];
                    isum += x->scales[g] * d;
                }
                acc = fmaf((float)isum, gm_fp16_to_fp32(x->d) * da, acc);
            }
        }
        return acc;
    }
    const gm_block_q8_0 *y = a;
    for (int64_t i = 0; i < n / 32; i++) {
        int isum = 0;
        uint16_t dw;
        for (int j = 0; j < 32; j++) {
            int c;
            if (type == GM_TYPE_Q8_0) {
                c = ((const gm_block_q8_0 *)w)[i].qs[j];
            } else if (type == GM_TYPE_Q4_0) {
                const uint8_t q = ((const gm_block_q4_0 *)w)[i].qs[j % 16];
                c = (j < 16 ? q & 0xF : q >> 4) - 8;
            } else { /* Q5_0 */
                const gm_block_q5_0 *x = (const gm_block_q5_0 *)w + i;
                uint32_t qh;
                memcpy(&qh, x->qh, 4);
                c = ((j < 16 ? x->qs[j] & 0xF : x->qs[j - 16] >> 4) | (int)(((qh >> j) & 1) << 4)) - 16;
            }
            isum += c * y[i].qs[j];
        }
        memcpy(&dw, (const char *)w + i * gm_type_traits_of(type)->block_bytes, 2); /* d leads every block */
        acc = fmaf((float)isum, gm_fp16_to_fp32(dw) * gm_fp16_to_fp32(y[i].d), acc);
    }
    return acc;
}

TEST(simd_dot_canonical_order) {
    const int types[] = {GM_TYPE_F32, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_Q4_0, GM_TYPE_Q5_0, GM_TYPE_Q8_0, GM_TYPE_Q4_K,
                         GM_TYPE_Q6_K};
    struct { const char *name; gm_isa isa; gm_vec_dot_fn (*get)(int); } lv[] = {
        {"avx2", GM_ISA_AVX2, gm_avx2_vec_dot}, {"neon", GM_ISA_NEON, gm_neon_vec_dot},
        {"neondot", GM_ISA_NEON_DOT, gm_neon_dot_vec_dot}};
    int tested = 0;
    for (size_t li = 0; li < sizeof lv / sizeof lv[0]; li++) {
        if (!gm_isa_runs(lv[li].isa)) continue;
        for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
            const gm_type_traits *wt = gm_type_traits_of(types[k]), *at = gm_type_traits_of(wt->vec_dot_type);
            const gm_vec_dot_fn dot = lv[li].get(types[k]);
            CHECK_MSG(dot != NULL, "%s: no %s kernel", lv[li].name, wt->name);
            if (!dot) continue;
            const int64_t ns[] = {wt->block_elems == 256 ? 256 : 32, wt->block_elems == 256 ? 1536 : 640,
                                  wt->block_elems == 1 ? 643 : wt->block_elems == 256 ? 2048 : 2112};
            int bad = 0;
            for (size_t c = 0; c < 3; c++)
                for (int rep = 0; rep < 6; rep++) {
                    const int64_t n = ns[c];
                    float *xw = malloc(n * 4), *xa = malloc(n * 4);
                    void *wq = malloc(gm_row_bytes(types[k], n)), *aq = malloc(gm_row_bytes(at->type, n));
                    for (int64_t i = 0; i < n; i++) {
                        xw[i] = frand() * (rep % 3 == 0 ? 100.f : 1.f) * (i % 97 == 0 ? 20.f : 1.f);
                        xa[i] = frand() * (rep % 2 ? 1e-3f : 8.f);
                    }
                    if (rep == 5) memset(xw, 0, (size_t)(n < 256 ? n : 256) * 4); /* a zero block / super-block */
                    wt->quant_row(xw, wq, n);
                    at->quant_row(xa, aq, n);
                    float got, want = canon_dot(types[k], n, wq, aq);
                    dot(n, &got, wq, aq);
                    if (memcmp(&got, &want, 4) != 0 && bad++ == 0)
                        fprintf(stderr, "  %s %s n %lld rep %d: %.9g, the stated order gives %.9g\n", lv[li].name, wt->name,
                                (long long)n, rep, got, want);
                    free(xw); free(xa); free(wq); free(aq);
                }
            CHECK_MSG(bad == 0, "%s %s: %d dots differ from the stated order", lv[li].name, wt->name, bad);
            tested++;
        }
    }
    if (!tested) fprintf(stderr, "  (no AVX2 or NEON on this CPU: not tested)\n");
}

/* A request is lowered to what the CPU runs, never raised; a matrix runs the level it was bound for. */
TEST(isa_clamp) {
    const gm_isa top = gm_isa_supported();
    gm_isa p = GM_ISA_AUTO;
    CHECK(top >= GM_ISA_SCALAR && (int)top < GM_ISA_LEVELS);
    CHECK(gm_isa_resolve(GM_ISA_AUTO) == top);
    CHECK(gm_isa_resolve(GM_ISA_AVX512) == top);
    CHECK(gm_isa_resolve(GM_ISA_SCALAR) == GM_ISA_SCALAR);
    CHECK(!gm_isa_valid((gm_isa)GM_ISA_LEVELS) && !gm_isa_valid((gm_isa)-1) && gm_isa_valid(GM_ISA_AUTO));
    /* the other family's levels give the CPU's best; the CPU's own family lowers to it */
    CHECK(gm_isa_resolve(GM_ISA_NEON_DOT) == top); /* the top of either family: this CPU's best */
    CHECK(gm_isa_resolve(GM_ISA_NEON) == (gm_isa_at_least(top, GM_ISA_NEON) ? GM_ISA_NEON : top));
    CHECK(gm_isa_resolve(GM_ISA_AVX2) == (gm_isa_at_least(top, GM_ISA_AVX2) ? GM_ISA_AVX2 : top));
    CHECK(!gm_isa_at_least(GM_ISA_NEON_DOT, GM_ISA_AVX2) && !gm_isa_at_least(GM_ISA_AVX512, GM_ISA_NEON) &&
          gm_isa_at_least(GM_ISA_NEON_DOT, GM_ISA_NEON) && !gm_isa_at_least(GM_ISA_NEON, GM_ISA_NEON_DOT));
    CHECK(gm_isa_parse("neondot", &p) && p == GM_ISA_NEON_DOT && !strcmp(gm_isa_name(GM_ISA_NEON), "neon"));
    CHECK(gm_isa_parse("avx2", &p) && p == GM_ISA_AVX2);
    CHECK(!gm_isa_parse("sse", &p) && !gm_isa_parse(NULL, &p) && p == GM_ISA_AVX2);
    CHECK(!strcmp(gm_isa_name(GM_ISA_SCALAR), "scalar") && !strcmp(gm_isa_name((gm_isa)9), "?"));
    unsigned char w[34] = {0}; /* one Q8_0 row of 32 */
    gm_mm_weight M = {.m = {GM_TYPE_Q8_0, 1, 32, w, 0}};
    CHECK(gm_mm_kernel_of(&M)->isa == (int)top); /* unbound: the CPU's best */
    gm_mm_bind(&M, GM_ISA_SCALAR);
    CHECK(gm_mm_kernel_of(&M)->isa == GM_ISA_SCALAR);
    gm_mm_bind(&M, GM_ISA_AVX512);
    CHECK(gm_mm_kernel_of(&M)->isa == (int)top);
    const gm_mm_weight V = gm_mm_view(&M.m, GM_ISA_SCALAR); /* a view bound for one call */
    CHECK(gm_mm_kernel_of(&V)->isa == GM_ISA_SCALAR && V.m.data == w && !V.packed);
}

int main(void) {
    RUN(matmul_every_type);
    RUN(simd_matmul_vs_exact);
    RUN(simd_quant_act_exact);
    RUN(simd_vec_dot_vs_scalar);
    RUN(simd_dot_canonical_order);
    RUN(avx2_tiles_vs_dot_and_scalar);
    RUN(avx2_x8_tiles_exact_and_invariant);
    RUN(avx2_qx8_tiles_same_bits_as_file_rows);
    RUN(avx2_mtok_same_bits_as_one_token);
    RUN(avx2_mtok_multi_same_bits_as_one_token);
    RUN(avx512_tok_dot_vs_scalar);
    RUN(matmul_multi_equals_separate);
    RUN(decode_split_with_stealing_covers_every_row);
    RUN(batch_invariance_every_type_and_isa);
    RUN(isa_clamp);
    RUN(matmul_bad_args);
    return test_summary();
}
