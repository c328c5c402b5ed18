/* tests/test_ops_simd.c — the SIMD f32 operators against their scalar references on random data
 * and odd sizes: RMSNorm, GeGLU and the exp sum (vector exp), the F16 KV store, grouped attention (AVX2 / NEON
 * passes, AVX-512 register blocks); and the AVX2 and NEON versions against one portable C statement of their
 * arithmetic, bit for bit (so x86 at AVX2 and AArch64 at either NEON level give the same bits). Every level the
 * CPU runs (gm_isa_runs); under qemu-aarch64 the NEON ones. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/ops_isa.h"
#include "quant/quant.h"
#include "support/test.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

/* The AVX2 / NEON versions by name, for the tests that call a level's functions directly (its table,
 * gm_cpu_kernels, holds the rest). One entry per level; NEON_DOT has NEON's (kernels/ops.c). */
typedef struct simd_level {
    const char *name;
    gm_isa isa;
    float (*dot)(const float *a, const float *b, int n);
    void (*axpy)(float *y, float a, const float *x, int n);
    bool (*fits)(int G, int hd);
    void (*scores)(float *scores, const float *q, int G, const void *k, gm_kv_type kt, size_t kv_stride, int n_keys,
                   int hd);
    void (*values)(float *part, const float *scores, int G, const void *v, gm_kv_type kt, size_t kv_stride, int n_keys,
                   int hd);
} simd_level;

static const simd_level SIMD[] = {
    {"avx2", GM_ISA_AVX2, gm_dot_f32_avx2, gm_axpy_f32_avx2, gm_attend_avx2_fits, gm_attend_scores_avx2,
     gm_attend_values_avx2},
    {"neon", GM_ISA_NEON, gm_dot_f32_neon, gm_axpy_f32_neon, gm_attend_neon_fits, gm_attend_scores_neon,
     gm_attend_values_neon},
    {"neondot", GM_ISA_NEON_DOT, gm_dot_f32_neon, gm_axpy_f32_neon, gm_attend_neon_fits, gm_attend_scores_neon,
     gm_attend_values_neon},
};
enum { N_SIMD = sizeof SIMD / sizeof SIMD[0] };

/* reference in double, as g / (1 + exp(-2z)): 1 + tanh(z) would cancel for negative z */
static double gelu_z(double g) { return 0.7978845608028654 * (g + 0.044715 * g * g * g); }
static double geglu_ref(double g, double u) { return g / (1.0 + exp(-2.0 * gelu_z(g))) * u; }

/* Every vector level's GeGLU (the AVX2 one at AVX2 and AVX-512, NEON's at both NEON levels: one arithmetic,
 * simd_ops_canonical_order) against gelu_tanh in double, within a few ulp of the vector exp and of z. */
TEST(geglu_matches_reference) {
    for (int isa = GM_ISA_SCALAR + 1; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) {
        void (*geglu)(float *, const float *, int) = gm_cpu_kernels_for((gm_isa)isa)->geglu;
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
            geglu(g2, u, n);
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
            CHECK_MSG(bad == 0, "%s n %d: %d elements off (worst relative error %g)", gm_isa_name((gm_isa)isa), n, bad,
                      worst);
            free(g), free(u), free(g2);
        }
    }
}

/* A row's GeGLU and exp sum elements do not depend on where the row is cut (tails through the vector code) */
TEST(geglu_per_element_independent_of_n) {
    for (int isa = GM_ISA_SCALAR + 1; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) {
        const gm_cpu_kernels *K = gm_cpu_kernels_for((gm_isa)isa);
        unsigned s = 11;
        float g[37], u[37], a[37], b[37];
        for (int i = 0; i < 37; i++) g[i] = frand(&s) * 4, u[i] = frand(&s);
        memcpy(a, g, sizeof g);
        K->geglu(a, u, 37);
        for (int off = 0; off < 37; off += 5) { /* pieces of 5: tails everywhere */
            memcpy(b + off, g + off, sizeof(float) * (size_t)(off + 5 <= 37 ? 5 : 37 - off));
            K->geglu(b + off, u + off, off + 5 <= 37 ? 5 : 37 - off);
        }
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s: geglu", gm_isa_name((gm_isa)isa));
        memcpy(a, g, sizeof g), memcpy(b, g, sizeof g);
        K->exp_sum(a, 37, 3.5f);
        for (int off = 0; off < 37; off += 5) K->exp_sum(b + off, off + 5 <= 37 ? 5 : 37 - off, 3.5f);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s: exp_sum", gm_isa_name((gm_isa)isa));
    }
}

/* Every level's exp sum against gm_exp_sum (expf): each exponential within 2.4e-7 relative (2^-22), the double
 * sum then within the same bound; exactly 0 for masked keys (-inf) and below e^-87, all 0 for mx = -inf. x - mx
 * is the same float in both; the vector exp (the AVX2 polynomial) was measured over every 8th float of [-87, 0]
 * within 1.24 ulp of exp and 1.19e-7 relative of glibc's expf: the bound is twice that. */
TEST(exp_sum_matches_scalar) {
    unsigned s = 13;
    const int sizes[] = {1, 5, 8, 13, 64, 1000, 4099};
    for (int isa = GM_ISA_SCALAR + 1; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) {
        const gm_exp_sum_fn es = gm_cpu_kernels_for((gm_isa)isa)->exp_sum;
        for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
            const int n = sizes[c];
            float *x = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
            float mx = -INFINITY;
            for (int i = 0; i < n; i++) {
                x[i] = i % 11 == 4 ? -INFINITY : frand(&s) * (i % 3 ? 20.0f : 60.0f); /* reaches below -87 */
                mx = x[i] > mx ? x[i] : mx;
            }
            memcpy(a, x, sizeof(float) * n), memcpy(b, x, sizeof(float) * n);
            const double sa = gm_exp_sum(a, n, mx), sb = es(b, n, mx);
            int bad = 0;
            for (int i = 0; i < n; i++) {
                const bool zero = x[i] == -INFINITY || x[i] - mx < -87.0f;
                if (zero ? b[i] != 0.0f : fabsf(a[i] - b[i]) > 2.4e-7f * a[i]) bad++;
            }
            CHECK_MSG(bad == 0, "%s n %d: %d exponentials off", gm_isa_name((gm_isa)isa), n, bad);
            CHECK_MSG(fabs(sa - sb) <= 2.4e-7 * sa, "%s n %d: sum %.17g vs %.17g", gm_isa_name((gm_isa)isa), n, sb, sa);
            for (int i = 0; i < n; i++) b[i] = 1.0f;
            CHECK_MSG(es(b, n, -INFINITY) == 0.0 && b[n - 1] == 0.0f && b[0] == 0.0f, "%s: mx -inf",
                      gm_isa_name((gm_isa)isa));
            free(x), free(a), free(b);
        }
    }
}

/* ---- the AVX2 level's arithmetic stated in portable C (fmaf: one rounding; the build does not contract a * b
 * + c), which the AVX2 versions on x86 and the NEON ones on AArch64 must give bit for bit: the lanes of AVX2's
 * 8-lane vectors (NEON: two float32x4) as arrays, the same fmas, the same summation trees. */

static float canon_dot(const float *a, const float *b, int n) {
    float l[16] = {0}; /* the two 8-lane chains */
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) l[k] = fmaf(a[i + k], b[i + k], l[k]);
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) l[k] = fmaf(a[i + k], b[i + k], l[k]);
    float h[8];
    for (int k = 0; k < 8; k++) h[k] = l[k] + l[k + 8];
    float s = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

static void canon_axpy(float *y, float a, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) y[i + k] = fmaf(a, x[i + k], y[i + k]);
    for (; i < n; i++) y[i] += a * x[i];
}

static void canon_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double l[16] = {0}; /* four 4-lane chains */
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int k = 0; k < 16; k++) l[k] = fma((double)x[i + k], (double)x[i + k], l[k]);
    double t[4];
    for (int k = 0; k < 4; k++) t[k] = (l[k] + l[k + 4]) + (l[k + 8] + l[k + 12]);
    double ss = (t[0] + t[2]) + (t[1] + t[3]);
    for (; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float r = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

static float canon_exp(float x) {
    x = fmaxf(fminf(x, 88.0f), -87.0f);
    const float n = rintf(x * 1.44269504088896341f); /* to nearest even in the default rounding mode */
    float r = fmaf(-n, 0.693359375f, x);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    p = fmaf(p, r * r, r + 1.0f);
    const uint32_t bits = (uint32_t)((int)n + 127) << 23; /* n in [-126, 127] */
    float e;
    memcpy(&e, &bits, 4);
    return p * e;
}

static double canon_exp_sum(float *s, int n, float mx) {
    if (mx == -INFINITY) {
        memset(s, 0, (size_t)n * sizeof *s);
        return 0.0;
    }
    double l[8] = {0};
    for (int j = 0; j < n; j++) {
        const float x = s[j] - mx;
        s[j] = x >= -87.0f ? canon_exp(x) : 0.0f;
        l[j % 8] += s[j]; /* the tail's padding adds +0: no change */
    }
    double t[4];
    for (int k = 0; k < 4; k++) t[k] = l[k] + l[k + 4];
    return (t[0] + t[2]) + (t[1] + t[3]);
}

static void canon_geglu(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        const float g = gate[i], g3 = (g * g) * g;
        const float z = (-2.0f * 0.7978845608028654f) * fmaf(0.044715f, g3, g);
        gate[i] = (g / (1.0f + canon_exp(z))) * up[i];
    }
}

TEST(simd_ops_canonical_order) {
    unsigned s = 17;
    const int sizes[] = {1, 7, 8, 15, 16, 17, 24, 40, 256, 640, 1001, 2053};
    int tested = 0;
    for (int li = 0; li < N_SIMD; li++) {
        if (!gm_isa_runs(SIMD[li].isa)) continue;
        const gm_cpu_kernels *K = gm_cpu_kernels_for(SIMD[li].isa);
        /* the AVX-512 level keeps its own RMSNorm: AVX2's is the one stated here */
        void (*norm)(float *, const float *, const float *, int, float) =
            SIMD[li].isa == GM_ISA_AVX2 ? gm_rmsnorm_avx2 : K->rmsnorm;
        for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
            const int n = sizes[c];
            float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n),
                  *b = malloc(sizeof(float) * n);
            for (int i = 0; i < n; i++) x[i] = frand(&s) * (i % 13 ? 3.0f : 40.0f), w[i] = frand(&s);
            const float d0 = SIMD[li].dot(x, w, n), d1 = canon_dot(x, w, n);
            CHECK_MSG(memcmp(&d0, &d1, 4) == 0, "%s dot n %d: %.9g, the stated order %.9g", SIMD[li].name, n, d0, d1);
            memcpy(a, w, sizeof(float) * n), memcpy(b, w, sizeof(float) * n);
            SIMD[li].axpy(a, 0.37f, x, n), canon_axpy(b, 0.37f, x, n);
            CHECK_MSG(memcmp(a, b, sizeof(float) * n) == 0, "%s axpy n %d", SIMD[li].name, n);
            norm(a, x, w, n, 1e-6f), canon_rmsnorm(b, x, w, n, 1e-6f);
            CHECK_MSG(memcmp(a, b, sizeof(float) * n) == 0, "%s rmsnorm n %d", SIMD[li].name, n);
            memcpy(a, x, sizeof(float) * n), memcpy(b, x, sizeof(float) * n);
            K->geglu(a, w, n), canon_geglu(b, w, n);
            CHECK_MSG(memcmp(a, b, sizeof(float) * n) == 0, "%s geglu n %d", SIMD[li].name, n);
            float mx = -INFINITY;
            for (int i = 0; i < n; i++) a[i] = b[i] = i % 9 == 2 ? -INFINITY : x[i] * 4.0f, mx = a[i] > mx ? a[i] : mx;
            const double e0 = K->exp_sum(a, n, mx), e1 = canon_exp_sum(b, n, mx);
            CHECK_MSG(memcmp(&e0, &e1, 8) == 0 && memcmp(a, b, sizeof(float) * n) == 0,
                      "%s exp_sum n %d: %.17g vs %.17g", SIMD[li].name, n, e0, e1);
            free(x), free(w), free(a), free(b);
        }
        tested++;
    }
    if (!tested) fprintf(stderr, "  (no AVX2 or NEON on this CPU: not tested)\n");
}

/* Partial attention (kernels/ops.h gm_attend_partial) against a double-precision reference computed from
 * the same stored keys/values (F16-rounded for F16): o equals the softmax-weighted values within
 * 2e-5, m equals the largest score; every ISA level, F32 and F16 keys, bias with masked keys, soft-cap. */
static unsigned short to_h(float x) { return gm_fp32_to_fp16(x); }

static void partial_ref(double *out, double *m, const float *q, int G, const float *k, const float *v, size_t ks,
                        int nk, int hd, float softcap, const float *bias) {
    double *sc = malloc((size_t)nk * sizeof *sc);
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY;
        for (int j = 0; j < nk; j++) {
            double d = 0;
            for (int i = 0; i < hd; i++) d += (double)q[g * hd + i] * k[j * ks + i];
            if (softcap > 0) d = softcap * tanh(d / softcap);
            if (bias) d += bias[j];
            sc[j] = d;
            mx = d > mx ? d : mx;
        }
        m[g] = mx;
        double z = 0;
        for (int j = 0; j < nk; j++) z += sc[j] = isinf(sc[j]) || isinf(mx) ? 0 : exp(sc[j] - mx);
        for (int i = 0; i < hd; i++) {
            double o = 0;
            for (int j = 0; j < nk; j++) o += sc[j] * v[j * ks + i];
            out[g * hd + i] = z > 0 ? o / z : 0;
        }
    }
    free(sc);
}

static void partial_case(int G, int hd, int nk, gm_kv_type kt, bool with_bias, float softcap, bool all_masked,
                         unsigned *s) {
    const size_t ks = (size_t)hd + 16; /* rows of a wider cache */
    float *q = malloc(sizeof(float) * G * hd), *k = malloc(sizeof(float) * ks * nk), *v = malloc(sizeof(float) * ks * nk),
          *part = malloc(sizeof(float) * G * (hd + 2)), *sc = malloc(sizeof(float) * G * nk),
          *bias = malloc(sizeof(float) * nk);
    unsigned short *kh = malloc(2 * ks * nk), *vh = malloc(2 * ks * nk);
    double *ref = malloc(sizeof(double) * G * hd), m[8];
    for (int i = 0; i < G * hd; i++) q[i] = frand(s) * 0.2f;
    for (size_t i = 0; i < ks * nk; i++) {
        k[i] = frand(s), v[i] = frand(s);
        kh[i] = to_h(k[i]), vh[i] = to_h(v[i]);
        if (kt == GM_KV_F16) k[i] = gm_fp16_to_fp32(kh[i]), v[i] = gm_fp16_to_fp32(vh[i]);
    }
    for (int j = 0; j < nk; j++) bias[j] = all_masked || j % 3 == 1 ? -INFINITY : frand(s);
    const float *b = with_bias || all_masked ? bias : NULL;
    partial_ref(ref, m, q, G, k, v, ks, nk, hd, softcap, b);
    const void *kp = kt == GM_KV_F16 ? (const void *)kh : k, *vp = kt == GM_KV_F16 ? (const void *)vh : v;
    for (int isa = GM_ISA_SCALAR; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) {
        gm_cpu_kernels_for((gm_isa)isa)->attend_partial(part, q, G, kp, vp, kt, ks, nk, hd, softcap, b, sc);
        double worst = 0;
        for (int g = 0; g < G; g++) {
            const float *o = part + (size_t)g * (hd + 2);
            if (all_masked) {
                CHECK_MSG(o[hd] == -INFINITY && o[hd + 1] == 0.0f, "%s: fully masked chunk gives m %g sum %g",
                          gm_isa_name((gm_isa)isa), o[hd], o[hd + 1]);
                for (int i = 0; i < hd; i++) worst = fmax(worst, fabs(o[i]));
                continue;
            }
            CHECK_MSG(fabs(o[hd] - m[g]) <= 1e-5 * (1 + fabs(m[g])), "%s: m %g vs %g", gm_isa_name((gm_isa)isa), o[hd],
                      m[g]);
            for (int i = 0; i < hd; i++) worst = fmax(worst, fabs(o[i] - ref[(size_t)g * hd + i]));
        }
        CHECK_MSG(worst < 2e-5, "%s G %d hd %d keys %d %s bias %d cap %g masked %d: max error %g",
                  gm_isa_name((gm_isa)isa), G, hd, nk, kt == GM_KV_F16 ? "f16" : "f32", with_bias, softcap, all_masked,
                  worst);
    }
    free(q), free(k), free(v), free(part), free(sc), free(bias), free(kh), free(vh), free(ref);
}

TEST(attend_partial_matches_reference) {
    unsigned s = 3;
    const int shapes[][3] = {{4, 256, 1}, {4, 256, 64}, {1, 64, 7}, {3, 128, 33}, {2, 64, 64}, {8, 64, 17}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
        for (int kt = 0; kt < 2; kt++)
            for (int bias = 0; bias < 2; bias++) {
                partial_case(shapes[c][0], shapes[c][1], shapes[c][2], (gm_kv_type)kt, bias, 0.0f, false, &s);
                partial_case(shapes[c][0], shapes[c][1], shapes[c][2], (gm_kv_type)kt, bias, 2.0f, false, &s);
            }
    partial_case(4, 256, 9, GM_KV_F32, true, 0.0f, true, &s);
    partial_case(2, 64, 9, GM_KV_F16, true, 0.0f, true, &s);
    CHECK(!gm_attend_partial_avx512_fits(5, 256));
    CHECK(!gm_attend_partial_avx512_fits(4, 80));
}

/* A head's output does not depend on the group it is computed with (the forward pass splits a group of 4
 * query heads in two items when rows are few) or on the ISA's dispatch: bit for bit, every level. */
TEST(attend_partial_group_split_is_exact) {
    unsigned s = 5;
    const int hd = 256, nk = 61;
    float *q = malloc(sizeof(float) * 4 * hd), *k = malloc(sizeof(float) * hd * nk), *v = malloc(sizeof(float) * hd * nk);
    float *o4 = malloc(sizeof(float) * 4 * (hd + 2)), *o2 = malloc(sizeof(float) * 4 * (hd + 2)),
          *o1 = malloc(sizeof(float) * 4 * (hd + 2)), *sc = malloc(sizeof(float) * 4 * nk), *bias = malloc(sizeof(float) * nk);
    unsigned short *kh = malloc(2 * hd * nk), *vh = malloc(2 * hd * nk);
    for (int i = 0; i < 4 * hd; i++) q[i] = frand(&s) * 0.3f;
    for (int i = 0; i < hd * nk; i++) k[i] = frand(&s), v[i] = frand(&s), kh[i] = to_h(k[i]), vh[i] = to_h(v[i]);
    for (int j = 0; j < nk; j++) bias[j] = j % 5 == 2 ? -INFINITY : frand(&s);
    for (int isa = GM_ISA_SCALAR; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa))
        for (int kt = 0; kt < 2; kt++) {
            const gm_attend_partial_fn attend = gm_cpu_kernels_for((gm_isa)isa)->attend_partial;
            const void *kp = kt ? (const void *)kh : k, *vp = kt ? (const void *)vh : v;
            const size_t P = (size_t)hd + 2;
            attend(o4, q, 4, kp, vp, (gm_kv_type)kt, hd, nk, hd, 0.0f, bias, sc);
            attend(o2, q, 2, kp, vp, (gm_kv_type)kt, hd, nk, hd, 0.0f, bias, sc);
            attend(o2 + 2 * P, q + 2 * hd, 2, kp, vp, (gm_kv_type)kt, hd, nk, hd, 0.0f, bias, sc);
            for (int g = 0; g < 4; g++)
                attend(o1 + g * P, q + g * hd, 1, kp, vp, (gm_kv_type)kt, hd, nk, hd, 0.0f, bias, sc);
            CHECK_MSG(memcmp(o4, o2, sizeof(float) * 4 * P) == 0 && memcmp(o4, o1, sizeof(float) * 4 * P) == 0,
                      "%s %s: heads computed 4, 2 or 1 at a time differ", gm_isa_name((gm_isa)isa), kt ? "f16" : "f32");
        }
    free(q), free(k), free(v), free(o4), free(o2), free(o1), free(sc), free(bias), free(kh), free(vh);
}

/* The AVX2 and NEON attention passes (each key / value row read once for all heads) give the bits of the
 * per-head loops over their level's dot / axpy (held to the stated order by simd_ops_canonical_order): G = 1..4,
 * F32 and F16 rows, zero weights (skipped keys) after the first key tiles. */
TEST(attend_simd_passes_equal_per_head_loops) {
    for (int li = 0; li < N_SIMD; li++) if (gm_isa_runs(SIMD[li].isa)) {
        const simd_level *L = &SIMD[li];
        unsigned s = 23;
        enum { HD = 256, NK = 37, STRIDE = 272 };
        static float q[4 * HD], kf[NK * STRIDE], vf[NK * STRIDE], sc[4 * NK], sc2[4 * NK], part[4 * (HD + 2)],
            part2[4 * (HD + 2)], row[HD];
        static uint16_t kh[NK * STRIDE], vh[NK * STRIDE];
        for (int i = 0; i < 4 * HD; i++) q[i] = frand(&s);
        for (int i = 0; i < NK * STRIDE; i++) {
            kf[i] = frand(&s) * 3, vf[i] = frand(&s);
            kh[i] = gm_fp32_to_fp16(kf[i]), vh[i] = gm_fp32_to_fp16(vf[i]);
        }
        CHECK(L->fits(4, HD) && !L->fits(5, HD) && !L->fits(4, 72));
        for (int kt = 0; kt < 2; kt++)
            for (int G = 1; G <= 4; G++) {
                const void *k = kt ? (const void *)kh : (const void *)kf, *v = kt ? (const void *)vh : (const void *)vf;
                L->scores(sc, q, G, k, (gm_kv_type)kt, STRIDE, NK, HD);
                for (int j = 0; j < NK; j++) {
                    for (int i = 0; i < HD; i++) row[i] = kt ? gm_fp16_to_fp32(kh[j * STRIDE + i]) : kf[j * STRIDE + i];
                    for (int g = 0; g < G; g++) sc2[g * NK + j] = L->dot(q + g * HD, row, HD);
                }
                CHECK_MSG(memcmp(sc, sc2, sizeof(float) * (size_t)(G * NK)) == 0, "%s scores, G %d, %s", L->name, G,
                          kt ? "f16" : "f32");
                for (int g = 0; g < G; g++)
                    for (int j = 0; j < NK; j++) sc[g * NK + j] = j >= 20 && (j + g) % 5 == 0 ? 0.0f : frand(&s);
                memset(part, 0, sizeof part), memset(part2, 0, sizeof part2);
                L->values(part, sc, G, v, (gm_kv_type)kt, STRIDE, NK, HD);
                for (int j = 0; j < NK; j++) {
                    for (int i = 0; i < HD; i++) row[i] = kt ? gm_fp16_to_fp32(vh[j * STRIDE + i]) : vf[j * STRIDE + i];
                    for (int g = 0; g < G; g++)
                        if (sc[g * NK + j] != 0.0f) L->axpy(part2 + g * (HD + 2), sc[g * NK + j], row, HD);
                }
                CHECK_MSG(memcmp(part, part2, sizeof part) == 0, "%s values, G %d, %s", L->name, G, kt ? "f16" : "f32");
            }
    }
}

/* Several query rows over one chunk (kernels/ops.h gm_attend_partial_rows, what backends/cpu/attention.c runs for
 * a group of prefill rows) give each row the bits of its own gm_attend_partial call: rows with different
 * key ranges (window starts, causal ends, tiles of 3 keys cut anywhere), G 1..4, F32 and F16, bias with
 * masked keys, soft-cap, every ISA level. */
TEST(attend_partial_rows_equal_one_row_calls) {
    unsigned s = 31;
    enum { HD = 256, NK = 64, STRIDE = 272, NR = 4 };
    static float q[NR * 4 * HD], kf[NK * STRIDE], vf[NK * STRIDE], bias[NR * NK], sc[NR * 4 * NK];
    static float got[NR * 4 * (HD + 2)], want[NR * 4 * (HD + 2)];
    static uint16_t kh[NK * STRIDE], vh[NK * STRIDE];
    for (int i = 0; i < NR * 4 * HD; i++) q[i] = frand(&s) * 0.3f;
    for (int i = 0; i < NK * STRIDE; i++) {
        kf[i] = frand(&s), vf[i] = frand(&s);
        kh[i] = gm_fp32_to_fp16(kf[i]), vh[i] = gm_fp32_to_fp16(vf[i]);
    }
    for (int i = 0; i < NR * NK; i++) bias[i] = i % 7 == 3 ? -INFINITY : frand(&s);
    const int ranges[][NR][2] = {{{0, 61}, {0, 62}, {0, 63}, {0, 64}},   /* causal ends */
                                 {{5, 64}, {6, 64}, {7, 64}, {8, 64}},   /* window starts */
                                 {{0, 1}, {0, 2}, {1, 3}, {2, 40}},      /* short rows */
                                 {{10, 11}, {30, 64}, {0, 64}, {33, 35}}};
    for (int isa = GM_ISA_SCALAR; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa))
        for (int kt = 0; kt < 2; kt++)
            for (int G = 1; G <= 4; G++)
                for (size_t c = 0; c < sizeof ranges / sizeof ranges[0]; c++)
                    for (int with_bias = 0; with_bias < 2; with_bias++) {
                        const gm_cpu_kernels *K = gm_cpu_kernels_for((gm_isa)isa);
                        const void *k = kt ? (const void *)kh : kf, *v = kt ? (const void *)vh : vf;
                        const size_t es = kt ? 2 : 4, P = (size_t)G * (HD + 2);
                        const float cap = c % 2 ? 5.0f : 0.0f;
                        gm_attend_row rows[NR];
                        for (int i = 0; i < NR; i++) {
                            const int lo = ranges[c][i][0], hi = ranges[c][i][1];
                            const float *b = with_bias ? bias + i * NK + lo : NULL;
                            rows[i] = (gm_attend_row){.part = got + i * P, .q = q + i * 4 * HD, .bias = b, .lo = lo, .hi = hi};
                            K->attend_partial(want + i * P, q + i * 4 * HD, G, (const char *)k + lo * STRIDE * es,
                                              (const char *)v + lo * STRIDE * es, (gm_kv_type)kt, STRIDE, hi - lo, HD, cap, b,
                                              sc);
                        }
                        K->attend_partial_rows(rows, NR, G, k, v, (gm_kv_type)kt, STRIDE, HD, cap, sc);
                        CHECK_MSG(memcmp(got, want, sizeof(float) * NR * P) == 0, "%s %s G %d ranges %zu bias %d",
                                  gm_isa_name((gm_isa)isa), kt ? "f16" : "f32", G, c, with_bias);
                    }
}

/* Every level's KV store: F16 equals the scalar converter. */
TEST(kv_store_f16_exact) {
    unsigned s = 9;
    float x[301];
    unsigned short a[301], b[301];
    for (int i = 0; i < 301; i++) x[i] = frand(&s) * (i % 7 ? 3.0f : 6e4f) + (i % 11 ? 0.0f : 1e-6f);
    for (int i = 0; i < 301; i++) a[i] = gm_fp32_to_fp16(x[i]);
    for (int isa = GM_ISA_SCALAR; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) {
        gm_cpu_kernels_for((gm_isa)isa)->kv_store(b, GM_KV_F16, x, 301);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s: F16 store differs from gm_fp32_to_fp16", gm_isa_name((gm_isa)isa));
    }
}

TEST(rmsnorm_simd_matches_scalar) {
    unsigned s = 5;
    const int sizes[] = {1, 15, 16, 17, 256, 640, 1001};
    for (int isa = GM_ISA_SCALAR + 1; isa < GM_ISA_LEVELS; isa++) if (gm_isa_runs((gm_isa)isa)) {
        void (*norm)(float *, const float *, const float *, int, float) = gm_cpu_kernels_for((gm_isa)isa)->rmsnorm;
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            const int n = sizes[k];
            float *x = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * n), *a = malloc(sizeof(float) * n),
                  *b = malloc(sizeof(float) * n);
            for (int i = 0; i < n; i++) x[i] = frand(&s) * 30, w[i] = 1 + frand(&s);
            gm_rmsnorm(a, x, w, n, 1e-6f);
            norm(b, x, w, n, 1e-6f);
            double worst = 0;
            for (int i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]) / (fabs(a[i]) + 1e-30));
            /* r may differ by 1 ulp (double sums in another order) */
            CHECK_MSG(worst <= 1.2e-7, "%s n %d: relative difference %g", gm_isa_name((gm_isa)isa), n, worst);
            norm(x, x, w, n, 1e-6f); /* in place */
            CHECK(memcmp(x, b, sizeof(float) * n) == 0);
            free(x), free(w), free(a), free(b);
        }
    }
}

/* Each level's table holds its own kernels (the level below's where it has none), and a level above the
 * CPU's gives the CPU's. */
TEST(kernel_tables) {
    const gm_isa top = gm_isa_supported();
    const gm_cpu_kernels *sc = gm_cpu_kernels_for(GM_ISA_SCALAR);
    CHECK(sc->isa == GM_ISA_SCALAR && sc->rmsnorm == gm_rmsnorm && sc->geglu == gm_geglu && sc->exp_sum == gm_exp_sum &&
          sc->dot == gm_dot_f32 && sc->axpy == gm_axpy_f32 && sc->kv_store == gm_kv_store &&
          sc->attend_partial == gm_attend_partial && sc->attend_partial_rows == gm_attend_partial_rows);
    CHECK(gm_cpu_kernels_for(GM_ISA_AUTO)->isa == top && gm_cpu_kernels_for(GM_ISA_AVX512)->isa == top);
    if (gm_isa_at_least(top, GM_ISA_AVX2)) {
        const gm_cpu_kernels *a = gm_cpu_kernels_for(GM_ISA_AVX2);
        CHECK(a->isa == GM_ISA_AVX2 && a->rmsnorm == gm_rmsnorm_avx2 && a->geglu == gm_geglu_avx2 &&
              a->exp_sum == gm_exp_sum_avx2 && a->dot == gm_dot_f32_avx2 && a->axpy == gm_axpy_f32_avx2);
    }
    if (gm_isa_at_least(top, GM_ISA_AVX512)) {
        const gm_cpu_kernels *z = gm_cpu_kernels_for(GM_ISA_AVX512);
        CHECK(z->rmsnorm == gm_rmsnorm_avx512 && z->geglu == gm_geglu_avx2 && z->dot == gm_dot_f32_avx2);
    }
    for (gm_isa l = GM_ISA_NEON; l <= GM_ISA_NEON_DOT; l++) /* both NEON levels: the NEON operators */
        if (gm_isa_at_least(top, l)) {
            const gm_cpu_kernels *a = gm_cpu_kernels_for(l);
            CHECK(a->isa == l && a->rmsnorm == gm_rmsnorm_neon && a->geglu == gm_geglu_neon &&
                  a->exp_sum == gm_exp_sum_neon && a->dot == gm_dot_f32_neon && a->axpy == gm_axpy_f32_neon);
        }
}

int main(void) {
    RUN(kernel_tables);
    RUN(rmsnorm_simd_matches_scalar);
    RUN(geglu_matches_reference);
    RUN(geglu_per_element_independent_of_n);
    RUN(exp_sum_matches_scalar);
    RUN(simd_ops_canonical_order);
    RUN(attend_partial_matches_reference);
    RUN(attend_partial_group_split_is_exact);
    RUN(attend_simd_passes_equal_per_head_loops);
    RUN(attend_partial_rows_equal_one_row_calls);
    RUN(kv_store_f16_exact);
    return test_summary();
}
