/* tests/test_pack.c — the Q5_0x16 packed layout (kernels/pack.h): packing round-trips to the file
 * bytes, and with AVX-512 active a packed matrix gives bit-identical outputs to the same matrix in
 * file layout — one token (decode dots), several tokens (prefill tiles), the fused q/k/v-style
 * multi call, 1 and 2 threads — and the scalar ISA level ignores the packed copy. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/matmul.h"
#include "kernels/pack.h"
#include "quant/quant.h"
#include "support/test.h"

static unsigned rng = 12345;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) * (1.0 / 16777216.0)) * 2.f - 1.f;
}

/* rows x cols Q5_0 matrix of random values, and its packed copy */
static void make(int64_t rows, int64_t cols, unsigned char **file, unsigned char **packed) {
    const gm_type_traits *t = gm_type_traits_of(GM_TYPE_Q5_0);
    const size_t rb = gm_row_bytes(GM_TYPE_Q5_0, cols);
    *file = malloc(rows * rb);
    *packed = malloc(rows * rb);
    float *tmp = malloc(cols * sizeof *tmp);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++) tmp[i] = frand() * (1 + (r % 3));
        t->quant_row(tmp, *file + r * rb, cols);
        gm_pack_q5_0x16_row(*file + r * rb, *packed + r * rb, cols);
    }
    free(tmp);
}

TEST(pack_round_trip) {
    const int64_t blocks[] = {1, 2, 3, 15, 16, 17, 20, 31, 33, 64, 65};
    for (size_t k = 0; k < sizeof blocks / sizeof *blocks; k++) {
        const int64_t cols = 32 * blocks[k], rb = gm_row_bytes(GM_TYPE_Q5_0, cols);
        unsigned char *file, *packed, *back = malloc(3 * rb);
        make(3, cols, &file, &packed);
        for (int r = 0; r < 3; r++) gm_unpack_q5_0x16_row(packed + r * rb, back + r * rb, cols);
        CHECK_MSG(memcmp(back, file, 3 * rb) == 0, "%lld blocks: unpack(pack(row)) differs", (long long)blocks[k]);
        CHECK_MSG(blocks[k] < 2 || memcmp(packed, file, rb) != 0, "%lld blocks: packing changed nothing",
                  (long long)blocks[k]);
        free(file); free(packed); free(back);
    }
}

/* y of the packed matrix == y of the file-layout matrix, bit for bit */
static void same_outputs(int64_t rows, int64_t cols, int64_t n_tok, gm_pool *pool) {
    unsigned char *file, *packed;
    make(rows, cols, &file, &packed);
    float *x = malloc(n_tok * cols * sizeof *x), *y0 = malloc(n_tok * rows * 4), *y1 = malloc(n_tok * rows * 4);
    for (int64_t i = 0; i < n_tok * cols; i++) x[i] = frand() * 3;
    gm_mm_weight F = {{GM_TYPE_Q5_0, rows, cols, file, 0}, 0, NULL, NULL};
    gm_mm_weight P = {{GM_TYPE_Q5_0, rows, cols, file, 0}, GM_KTYPE_Q5_0X16, packed, NULL};
    gm_matmul_scratch s = {0};
    CHECK_EQ_INT(gm_mm(&F, x, n_tok, y0, pool, &s), GM_OK);
    memset(y1, 0xff, n_tok * rows * 4);
    CHECK_EQ_INT(gm_mm(&P, x, n_tok, y1, pool, &s), GM_OK);
    CHECK_MSG(memcmp(y0, y1, n_tok * rows * 4) == 0, "rows %lld cols %lld tokens %lld: packed differs",
              (long long)rows, (long long)cols, (long long)n_tok);
    if (n_tok == 1) { /* fused multi call: packed and file-layout matrices mixed */
        float *y2 = malloc(rows * 4), *y3 = malloc(rows * 4);
        const gm_mm_weight *W[3] = {&P, &F, &P};
        float *const y[3] = {y1, y2, y3};
        CHECK_EQ_INT(gm_mm_multi(W, y, 3, x, 1, pool, &s), GM_OK);
        CHECK(memcmp(y0, y1, rows * 4) == 0 && memcmp(y0, y2, rows * 4) == 0 && memcmp(y0, y3, rows * 4) == 0);
        free(y2); free(y3);
    }
    gm_matmul_scratch_free(&s);
    free(file); free(packed); free(x); free(y0); free(y1);
}

TEST(packed_equals_file_layout) {
    if (!gm_isa_at_least(gm_isa_supported(), GM_ISA_AVX512)) {
        fprintf(stderr, "  (no AVX-512 here: the packed copy is never used; round trip only)\n");
        return;
    }
    gm_pool *p2 = gm_pool_new(2);
    CHECK(p2 != NULL);
    const int64_t cols[] = {32, 64, 96, 544, 640, 2048, 32 * 33};
    const int64_t toks[] = {1, 2, 4, 7};
    for (size_t c = 0; c < sizeof cols / sizeof *cols; c++)
        for (size_t t = 0; t < sizeof toks / sizeof *toks; t++) {
            same_outputs(37, cols[c], toks[t], NULL);
            same_outputs(37, cols[c], toks[t], p2);
        }
    gm_pool_free(p2);
}

/* below AVX-512 the packed copy is not read: outputs are the file layout's (the scalar reference) */
TEST(scalar_ignores_packed) {
    unsigned char *file, *packed;
    const int64_t rows = 5, cols = 640;
    make(rows, cols, &file, &packed);
    float x[640], y0[5], y1[5];
    for (int i = 0; i < 640; i++) x[i] = frand();
    gm_mm_weight F = {{GM_TYPE_Q5_0, rows, cols, file, 0}, 0, NULL, NULL};
    gm_mm_weight P = {{GM_TYPE_Q5_0, rows, cols, file, 0}, GM_KTYPE_Q5_0X16, packed, NULL};
    gm_matmul_scratch s = {0};
    gm_mm_bind(&F, GM_ISA_SCALAR);
    gm_mm_bind(&P, GM_ISA_SCALAR);
    CHECK_EQ_INT(gm_mm(&F, x, 1, y0, NULL, &s), GM_OK);
    CHECK_EQ_INT(gm_mm(&P, x, 1, y1, NULL, &s), GM_OK);
    CHECK(memcmp(y0, y1, sizeof y0) == 0);
    gm_matmul_scratch_free(&s);
    free(file); free(packed);
}

int main(void) {
    RUN(pack_round_trip);
    RUN(packed_equals_file_layout);
    RUN(scalar_ignores_packed);
    return test_summary();
}
