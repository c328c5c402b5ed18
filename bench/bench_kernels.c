/* bench/bench_kernels.c — matvec bandwidth and prefill matmul throughput of gm_matmul per weight
 * type, ISA level (scalar / avx2 / avx512, clamped to the CPU) and thread count. Not a test.
 *
 * Build: cmake --build <dir> --target bench_kernels   (or by hand:
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -I. bench/bench_kernels.c <dir>/libgemma.a -lm -lpthread)
 * Run:   <dir>/bench_kernels [--quick] [TYPE ...]   (--quick: fewer shapes; TYPEs: only those, e.g. Q8_0)
 *
 * Matvec (1 token): GB/s = weight bytes / time. Small matrices are replicated into a ~192 MiB pool
 * and the bench cycles through the copies, so weights come from DRAM as in a real decode step
 * (all ~253 MB of Gemma 3 270M are read once per token).
 * Matmul (512 tokens): GFLOP/s = 2 * rows * cols * 512 / time.
 * The avx2+x8 columns: the weights packed as the model packs them at open for the AVX2 level
 * (kernels/pack.h, GM_KTYPE_X8); "-" for types without that layout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include "kernels/cpu.h"
#include "kernels/gemm.h"
#include "kernels/matmul.h"
#include "kernels/pack.h"
#include "quant/quant.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

/* n_copies matrices of rows x cols, filled by quantizing 16 random rows and tiling them */
static unsigned char *make_weights(int type, int64_t rows, int64_t cols, int64_t n_copies) {
    const gm_type_traits *t = gm_type_traits_of(type);
    const size_t rb = gm_row_bytes(type, cols);
    unsigned char *w = NULL;
    if (getenv("HUGE")) {
        size_t sz = (rb * rows * n_copies + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
        if (posix_memalign((void **)&w, 2u << 20, sz)) w = NULL;
        else madvise(w, sz, MADV_HUGEPAGE);
    } else w = malloc(rb * rows * n_copies);
    float *tmp = malloc(cols * sizeof *tmp);
    unsigned char *seed = malloc(rb * 16);
    if (!w || !tmp || !seed) {
        free(w); free(tmp); free(seed);
        return NULL;
    }
    unsigned s = 12345;
    for (int r = 0; r < 16; r++) {
        for (int64_t i = 0; i < cols; i++) tmp[i] = frand(&s) * 0.05f;
        t->quant_row(tmp, seed + r * rb, cols);
    }
    for (int64_t r = 0; r < rows * n_copies; r++) memcpy(w + r * rb, seed + (r % 16) * rb, rb);
    free(tmp);
    free(seed);
    return w;
}

typedef struct {
    int64_t rows, cols;
} shape;

/* the x8 copy of n_copies matrices of rows x cols (NULL: out of memory) */
static unsigned char *pack_copies(int type, const unsigned char *w, int64_t rows, int64_t cols, int64_t n_copies) {
    const size_t mbytes = gm_row_bytes(type, cols) * rows;
    unsigned char *p = malloc(mbytes * n_copies);
    for (int64_t c = 0; p && c < n_copies; c++) {
        if (type == GM_TYPE_F16 || type == GM_TYPE_BF16) gm_pack_x8(w + c * mbytes, p + c * mbytes, rows, cols);
        else gm_pack_qx8(type, w + c * mbytes, p + c * mbytes, rows, cols);
    }
    return p;
}

/* M over w (packed: its x8 copy p too), bound for level isa */
static gm_mm_weight matrix_of(int type, shape sh, unsigned char *w, unsigned char *p, gm_isa isa) {
    gm_mm_weight M = {.m = {type, sh.rows, sh.cols, w, 0}};
    if (p) M.packed_type = GM_KTYPE_X8(type), M.packed = p;
    gm_mm_bind(&M, isa);
    return M;
}

static void bench_matvec(int type, shape sh, gm_isa isa, bool x8, gm_pool *pool, double *gbs) {
    const size_t mbytes = gm_row_bytes(type, sh.cols) * sh.rows;
    int64_t copies = (int64_t)((192u << 20) / mbytes);
    if (copies < 1) copies = 1;
    unsigned char *w = make_weights(type, sh.rows, sh.cols, copies);
    unsigned char *p = x8 && w ? pack_copies(type, w, sh.rows, sh.cols, copies) : NULL;
    float *x = malloc(sh.cols * sizeof *x), *y = malloc(sh.rows * sizeof *y);
    if (!w || !x || !y || (x8 && !p)) {
        *gbs = -1;
        free(w); free(p); free(x); free(y);
        return;
    }
    unsigned s = 7;
    for (int64_t i = 0; i < sh.cols; i++) x[i] = frand(&s);
    gm_matmul_scratch sc = {0};
    /* enough calls for >= 2 passes over the pool and >= 0.3 s */
    double best = 1e30;
    int64_t calls = 0;
    double t_start = now();
    while (calls < 2 * copies || now() - t_start < 0.3) {
        gm_mm_weight M = matrix_of(type, sh, w + (calls % copies) * mbytes, p ? p + (calls % copies) * mbytes : NULL, isa);
        double t0 = now();
        gm_mm(&M, x, 1, y, pool, &sc);
        double dt = now() - t0;
        if (calls >= copies && dt < best) best = dt; /* first pass warms the page tables */
        if (copies == 1 && dt < best) best = dt;
        calls++;
        if (calls > 20000) break;
    }
    *gbs = mbytes / best / 1e9;
    gm_matmul_scratch_free(&sc);
    free(w); free(p); free(x); free(y);
}

static void bench_matmul(int type, shape sh, int64_t n_tok, gm_isa isa, bool x8, gm_pool *pool, double *gflops) {
    unsigned char *w = make_weights(type, sh.rows, sh.cols, 1);
    unsigned char *p = x8 && w ? pack_copies(type, w, sh.rows, sh.cols, 1) : NULL;
    float *x = malloc(n_tok * sh.cols * sizeof *x), *y = malloc(n_tok * sh.rows * sizeof *y);
    if (!w || !x || !y || (x8 && !p)) {
        *gflops = -1;
        free(w); free(p); free(x); free(y);
        return;
    }
    unsigned s = 9;
    for (int64_t i = 0; i < n_tok * sh.cols; i++) x[i] = frand(&s);
    gm_matmul_scratch sc = {0};
    gm_mm_weight M = matrix_of(type, sh, w, p, isa);
    double best = 1e30, t_start = now();
    for (int it = 0; it < 50 && (it < 2 || now() - t_start < 1.0); it++) {
        double t0 = now();
        gm_mm(&M, x, n_tok, y, pool, &sc);
        double dt = now() - t0;
        if (dt < best) best = dt;
    }
    *gflops = 2.0 * sh.rows * sh.cols * n_tok / best / 1e9;
    gm_matmul_scratch_free(&sc);
    free(w); free(p); free(x); free(y);
}

/* the level of column c (levels from scalar up to the CPU's, then AVX2 over x8 copies) */
static gm_isa column_isa(int c, bool *x8) {
    const int n_levels = (int)gm_isa_supported() - GM_ISA_SCALAR + 1;
    *x8 = c >= n_levels;
    return *x8 ? GM_ISA_AVX2 : (gm_isa)(GM_ISA_SCALAR + c);
}

static void header(int n_cols) {
    printf("%-5s %-13s", "type", "shape");
    for (int c = 0; c < n_cols; c++)
        for (int p = 0; p < 2; p++) {
            char name[32];
            bool x8;
            const gm_isa isa = column_isa(c, &x8);
            snprintf(name, sizeof name, "%s/%dt", x8 ? "avx2+x8" : gm_isa_name(isa), p + 1);
            printf(" %11s", name);
        }
    printf("\n");
}

static int n_only;
static char **only;

static bool wanted(const char *name) {
    if (n_only == 0) return true;
    for (int i = 0; i < n_only; i++)
        if (strcmp(only[i], name) == 0) return true;
    return false;
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    only = argv + 1 + quick;
    n_only = argc - 1 - quick;
    char feat[512];
    gm_cpu_describe(feat, sizeof feat);
    printf("cpu: %s\nsupported isa: %s\n", feat, gm_isa_name(gm_isa_supported()));
    const int types[] = {GM_TYPE_Q8_0, GM_TYPE_Q5_0, GM_TYPE_Q4_0, GM_TYPE_Q4_1, GM_TYPE_Q5_1, GM_TYPE_Q4_K,
                         GM_TYPE_Q5_K, GM_TYPE_Q6_K, GM_TYPE_F16, GM_TYPE_BF16, GM_TYPE_F32};
    const shape mv[] = {{640, 2048}, {2048, 640}, {262144, 640}};
    const shape mm[] = {{640, 2048}, {2048, 640}};
    gm_pool *pools[2] = {gm_pool_new(1), gm_pool_new(2)};
    const gm_isa top = gm_isa_supported();

    /* columns: each ISA level up to the CPU's, then AVX2 over x8 copies where the CPU has AVX2 */
    const int n_cols = (int)top - GM_ISA_SCALAR + 1 + (top >= GM_ISA_AVX2);

    printf("\nmatvec, 1 token: GB/s of weights (weights cycled through a 192 MiB pool)\n");
    header(n_cols);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        for (size_t s = 0; s < sizeof mv / sizeof mv[0]; s++) {
            const gm_type_traits *t = gm_type_traits_of(types[k]);
            if (mv[s].cols % t->block_elems || !wanted(t->name)) continue;
            if (mv[s].rows > 100000 && t->block_elems == 1) continue; /* 0.3-0.7 GB unquantized: skip */
            if (quick && mv[s].rows > 100000 && types[k] != GM_TYPE_Q8_0) continue;
            printf("%-5s %6lldx%-6lld", t->name, (long long)mv[s].rows, (long long)mv[s].cols);
            for (int c = 0; c < n_cols; c++) {
                bool x8;
                const gm_isa isa = column_isa(c, &x8);
                for (int p = 0; p < 2; p++) {
                    double gbs;
                    if (x8 && !gm_avx2_x8_tiles(types[k])) printf(" %11s", "-");
                    else bench_matvec(types[k], mv[s], isa, x8, pools[p], &gbs), printf(" %11.2f", gbs);
                }
            }
            printf("\n");
            fflush(stdout);
        }
    }

    printf("\nmatmul, 512 tokens: GFLOP/s (2*rows*cols*512 / time)\n");
    header(n_cols);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        for (size_t s = 0; s < sizeof mm / sizeof mm[0]; s++) {
            const gm_type_traits *t = gm_type_traits_of(types[k]);
            if (mm[s].cols % t->block_elems || !wanted(t->name)) continue;
            if (quick && s == 1) continue;
            printf("%-5s %6lldx%-6lld", t->name, (long long)mm[s].rows, (long long)mm[s].cols);
            for (int c = 0; c < n_cols; c++) {
                bool x8;
                const gm_isa isa = column_isa(c, &x8);
                for (int p = 0; p < 2; p++) {
                    double gf;
                    if (x8 && !gm_avx2_x8_tiles(types[k])) printf(" %11s", "-");
                    else bench_matmul(types[k], mm[s], 512, isa, x8, pools[p], &gf), printf(" %11.2f", gf);
                }
            }
            printf("\n");
            fflush(stdout);
        }
    }
    gm_pool_free(pools[0]);
    gm_pool_free(pools[1]);
    return 0;
}
