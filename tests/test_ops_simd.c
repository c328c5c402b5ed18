/* tests/test_ops_simd.c — the SIMD f32 operators against their scalar references on random data
 * and odd sizes: GeGLU (vector exp) and grouped attention (AVX-512 register blocks). Skips the
 * parts the CPU cannot run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "support/test.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

/* reference in double, as g / (1 + exp(-2z)): 1 + tanh(z) would cancel for negative z */
static double gelu_z(double g) { return 0.7978845608028654 * (g + 0.044715 * g * g * g); }
static double geglu_ref(double g, double u) { return g / (1.0 + exp(-2.0 * gelu_z(g))) * u; }

TEST(geglu_matches_reference) {
    if (gm_isa_supported() < GM_ISA_AVX2) return;
    unsigned s = 7;
    const int sizes[] = {1, 7, 8, 9, 31, 2048, 2053};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int n = sizes[k];
        float *g = malloc((size_t)n * sizeof *g), *u = malloc((size_t)n * sizeof *u);
        float *g2 = malloc((size_t)n * sizeof *g2);
        for (int i = 0; i < n; i++) {
            const float scale = i % 5 == 0 ? 12.0f : 3.0f; /* reach the saturated tails too */
            g[i] = frand(&s) * scale;
            u[i] = frand(&s) * 2.0f;
        }
        g[0] = n > 1 ? -100.0f : g[0]; /* exp argument clamped: gelu -> -0 */
        memcpy(g2, g, (size_t)n * sizeof *g);
        gm_geglu_avx2(g2, u, n);
        int bad = 0;
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const double r = geglu_ref(g[i], u[i]);
            /* z is computed in float: its rounding (a few ulp of |2z|) is amplified by exp in the tail */
            const double err = fabs(g2[i] - r), tol = (1e-6 + 5e-7 * fabs(2.0 * gelu_z(g[i]))) * fabs(r) + 1e-35; /* exp clamped at 88: tails end near 1e-37, not 0 */
            if (err > tol && getenv("GM_DEBUG")) fprintf(stderr, "g %.9g u %.9g ref %.9g got %.9g\n", g[i], u[i], r, g2[i]);
            if (err > tol) bad++;
            if (fabs(r) > 0 && err / fabs(r) > worst) worst = err / fabs(r);
        }
        CHECK_MSG(bad == 0, "n %d: %d elements off (worst relative error %g)", n, bad, worst);
        free(g), free(u), free(g2);
    }
}

TEST(geglu_per_element_independent_of_n) {
    if (gm_isa_supported() < GM_ISA_AVX2) return;
    unsigned s = 11;
    float g[37], u[37], a[37], b[37];
    for (int i = 0; i < 37; i++) g[i] = frand(&s) * 4, u[i] = frand(&s);
    memcpy(a, g, sizeof g);
    gm_geglu_avx2(a, u, 37);
    for (int off = 0; off < 37; off += 5) { /* pieces of 5: tails everywhere */
        memcpy(b + off, g + off, sizeof(float) * (size_t)(off + 5 <= 37 ? 5 : 37 - off));
        gm_geglu_avx2(b + off, u + off, off + 5 <= 37 ? 5 : 37 - off);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
}

/* double reference of grouped attention with an optional bias */
static void attend_ref(double *out, const float *q, int G, const float *k, const float *v, size_t ks, int nk, int hd,
                       const float *bias, int bias_from) {
    double *sc = malloc((size_t)nk * sizeof *sc);
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[g * hd + i] * k[j * ks + i];
            if (bias && j >= bias_from) d += bias[j - bias_from];
            sc[j] = d;
            mx = d > mx ? d : mx;
        }
        double z = 0;
        for (int j = 0; j < nk; j++) z += sc[j] = isinf(sc[j]) ? 0 : exp(sc[j] - mx);
        for (int i = 0; i < hd; i++) {
            double o = 0;
            for (int j = 0; j < nk; j++) o += sc[j] * v[j * ks + i];
            out[g * hd + i] = o / z;
        }
    }
    free(sc);
}

TEST(attend_group_avx512_matches_reference) {
    if (gm_isa_supported() < GM_ISA_AVX512) return;
    unsigned s = 3;
    const int shapes[][3] = {{4, 256, 1}, {4, 256, 67}, {1, 64, 5}, {3, 128, 130}, {2, 64, 513}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int G = shapes[c][0], hd = shapes[c][1], nk = shapes[c][2];
        const size_t ks = (size_t)hd + 16; /* rows of a wider cache */
        CHECK(gm_attend_group_avx512_fits(G, hd));
        float *q = malloc(sizeof(float) * G * hd), *k = malloc(sizeof(float) * ks * nk),
              *v = malloc(sizeof(float) * ks * nk), *out = malloc(sizeof(float) * G * hd),
              *sc = malloc(sizeof(float) * G * nk), *bias = malloc(sizeof(float) * nk);
        double *ref = malloc(sizeof(double) * G * hd);
        for (int i = 0; i < G * hd; i++) q[i] = frand(&s) * 0.2f;
        for (size_t i = 0; i < ks * nk; i++) k[i] = frand(&s), v[i] = frand(&s);
        for (int j = 0; j < nk; j++) bias[j] = j % 3 == 1 ? -INFINITY : frand(&s);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *b = with_bias ? bias : NULL;
            gm_attend_group_avx512(out, q, G, k, v, ks, nk, hd, 0.0f, b, 0, sc);
            attend_ref(ref, q, G, k, v, ks, nk, hd, b, 0);
            double worst = 0;
            for (int i = 0; i < G * hd; i++) worst = fmax(worst, fabs(out[i] - ref[i]));
            CHECK_MSG(worst < 2e-5, "G %d hd %d keys %d bias %d: max error %g", G, hd, nk, with_bias, worst);
        }
        free(q), free(k), free(v), free(out), free(sc), free(bias), free(ref);
    }
    CHECK(!gm_attend_group_avx512_fits(5, 256));
    CHECK(!gm_attend_group_avx512_fits(4, 80));
}

/* A head's output does not depend on the group it is computed with: the decode step splits a group
 * of 4 query heads into two calls of 2 (model/forward.c) and must get the same bits. */
static void group_split_same(void (*fn)(float *, const float *, int, const float *, const float *, size_t, int, int,
                                        float, const float *, int, float *),
                             const char *name) {
    unsigned s = 5;
    const int hd = 256, nk = 77;
    float *q = malloc(sizeof(float) * 4 * hd), *k = malloc(sizeof(float) * hd * nk), *v = malloc(sizeof(float) * hd * nk);
    float *o4 = malloc(sizeof(float) * 4 * hd), *o2 = malloc(sizeof(float) * 4 * hd), *sc = malloc(sizeof(float) * 4 * nk);
    for (int i = 0; i < 4 * hd; i++) q[i] = frand(&s) * 0.3f;
    for (int i = 0; i < hd * nk; i++) k[i] = frand(&s), v[i] = frand(&s);
    fn(o4, q, 4, k, v, hd, nk, hd, 0.0f, NULL, 0, sc);
    fn(o2, q, 2, k, v, hd, nk, hd, 0.0f, NULL, 0, sc);
    fn(o2 + 2 * hd, q + 2 * hd, 2, k, v, hd, nk, hd, 0.0f, NULL, 0, sc);
    CHECK_MSG(memcmp(o4, o2, sizeof(float) * 4 * hd) == 0, "%s: heads computed 4 at a time and 2 at a time differ", name);
    free(q), free(k), free(v), free(o4), free(o2), free(sc);
}

TEST(attend_group_split_is_exact) {
    group_split_same(gm_attend_group, "gm_attend_group");
    if (gm_isa_supported() >= GM_ISA_AVX512) group_split_same(gm_attend_group_avx512, "gm_attend_group_avx512");
    const gm_isa top = gm_isa_active();
    gm_isa_set(GM_ISA_SCALAR);
    group_split_same(gm_attend_group, "gm_attend_group (scalar)");
    gm_isa_set(top);
}

/* The unnormalised chunk attention of split decode: o / sum equals the normalised attention, m is
 * the largest score, and the AVX-512 and scalar versions agree. */
TEST(attend_group_partial_matches_full) {
    unsigned s = 11;
    const int shapes[][3] = {{4, 256, 1}, {4, 256, 17}, {2, 256, 64}, {1, 64, 33}, {3, 128, 50}};
    const gm_isa top = gm_isa_active();
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int G = shapes[c][0], hd = shapes[c][1], nk = shapes[c][2];
        float *q = malloc(sizeof(float) * G * hd), *k = malloc(sizeof(float) * hd * nk), *v = malloc(sizeof(float) * hd * nk);
        float *full = malloc(sizeof(float) * G * hd), *part = malloc(sizeof(float) * G * (hd + 2)),
              *ref = malloc(sizeof(float) * G * (hd + 2)), *sc = malloc(sizeof(float) * G * nk);
        for (int i = 0; i < G * hd; i++) q[i] = frand(&s) * 0.3f;
        for (int i = 0; i < hd * nk; i++) k[i] = frand(&s), v[i] = frand(&s);
        for (int cap = 0; cap < 2; cap++) {
            const float softcap = cap ? 2.0f : 0.0f;
            gm_isa_set(GM_ISA_SCALAR);
            gm_attend_group_partial(ref, q, G, k, v, hd, nk, hd, softcap, sc);
            gm_isa_set(top);
            gm_attend_group_partial(part, q, G, k, v, hd, nk, hd, softcap, sc);
            gm_attend_group(full, q, G, k, v, hd, nk, hd, softcap, NULL, 0, sc);
            double worst = 0, worst_ref = 0;
            for (int g = 0; g < G; g++) {
                const float *o = part + (size_t)g * (hd + 2), *r = ref + (size_t)g * (hd + 2);
                CHECK_MSG(fabsf(o[hd] - r[hd]) <= 1e-5f * (1 + fabsf(r[hd])), "G %d hd %d keys %d: max %g vs %g", G, hd,
                          nk, o[hd], r[hd]);
                CHECK(fabs(o[hd + 1] - r[hd + 1]) <= 1e-5 * r[hd + 1]);
                for (int i = 0; i < hd; i++) {
                    worst = fmax(worst, fabs(o[i] / o[hd + 1] - full[(size_t)g * hd + i]));
                    worst_ref = fmax(worst_ref, fabs(o[i] - r[i]) / r[hd + 1]);
                }
            }
            CHECK_MSG(worst < 2e-5 && worst_ref < 2e-5, "G %d hd %d keys %d cap %d: o/sum vs full %g, vs scalar %g", G,
                      hd, nk, cap, worst, worst_ref);
        }
        free(q), free(k), free(v), free(full), free(part), free(ref), free(sc);
    }
}

TEST(rmsnorm_avx512_matches_scalar) {
    if (gm_isa_supported() < GM_ISA_AVX512) return;
    unsigned s = 5;
    const int sizes[] = {1, 15, 16, 17, 256, 640, 1001};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        const int n = sizes[k];
        float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n),
              *b = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) x[i] = frand(&s) * 30, w[i] = 1 + frand(&s);
        gm_rmsnorm(a, x, w, n, 1e-6f);
        gm_rmsnorm_avx512(b, x, w, n, 1e-6f);
        double worst = 0;
        for (int i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / (fabs(a[i]) + 1e-30));
        CHECK_MSG(worst <= 1.2e-7, "n %d: relative difference %g", n, worst); /* r may differ by 1 ulp */
        gm_rmsnorm_avx512(x, x, w, n, 1e-6f); /* in place */
        CHECK(memcmp(x, b, sizeof(float) * n) == 0);
        free(x), free(w), free(a), free(b);
    }
}

int main(void) {
    RUN(rmsnorm_avx512_matches_scalar);
    RUN(geglu_matches_reference);
    RUN(geglu_per_element_independent_of_n);
    RUN(attend_group_avx512_matches_reference);
    RUN(attend_group_split_is_exact);
    RUN(attend_group_partial_matches_full);
    return test_summary();
}
