/* runtime/families/ple.c — per-layer embeddings (see ple.h). */
#include "runtime/families/ple.h"

#include <math.h>

#include "kernels/ops.h"

/* ple[i] (P L floats per row) = (RMS_norm((proj x_i / sqrt d)[l]) + tok_table[tok_i][l] sqrt P) / sqrt 2 for
 * every layer l: x holds the n rows' scaled embeddings; rows given as embeddings use table row 0 (llama.cpp and
 * HF), as do ids past the table (HF's vocab_size_per_layer_input). scratch: n x P L floats. */
gm_status gm_ple_inputs(const gm_matrix *tok_table, const gm_matrix *proj, const float *norm, int P, int L,
                            float eps, const gm_fwd_row *rows, const float *x, int n, int d, float *ple, float *scratch,
                            gm_backend *be) {
    const size_t PL = (size_t)P * (size_t)L;
    gm_status st = gm_be_matmul(be, proj, x, n, scratch);
    if (st) return st;
    const float pscale = 1.0f / sqrtf((float)d), tscale = sqrtf((float)P), half = 1.0f / sqrtf(2.0f);
    for (int i = 0; i < n; i++) {
        float *pr = scratch + (size_t)i * PL, *out = ple + (size_t)i * PL;
        const int32_t tok = rows[i].embed || rows[i].token >= tok_table->rows ? 0 : rows[i].token;
        if ((st = gm_matrix_row(tok_table, tok, out))) return st;
        gm_scale(pr, (int)PL, pscale);
        for (int l = 0; l < L; l++) gm_rmsnorm(pr + (size_t)l * P, pr + (size_t)l * P, norm, P, eps);
        for (size_t k = 0; k < PL; k++) out[k] = (pr[k] + out[k] * tscale) * half;
    }
    return GM_OK;
}

/* t[i] = RMS_post_norm(proj (gelu(gate in_i) * ple_i[l])) for n rows of d; ple_stride: floats between rows'
 * per-layer inputs. scratch: n x P floats. t may alias in (in is read first). */
gm_status gm_ple_residual(const gm_matrix *gate, const gm_matrix *proj, const float *post_norm, float eps,
                              const float *in, const float *ple, size_t ple_stride, int n, int P, float *scratch,
                              float *t, gm_backend *be) {
    gm_status st = gm_be_matmul(be, gate, in, n, scratch);
    if (st) return st;
    for (int i = 0; i < n; i++) {
        float *g = scratch + (size_t)i * P;
        const float *pl = ple + (size_t)i * ple_stride;
        for (int k = 0; k < P; k++) g[k] = gm_gelu_tanh(g[k]) * pl[k];
    }
    if ((st = gm_be_matmul(be, proj, scratch, n, t))) return st;
    const int d = (int)proj->rows;
    for (int i = 0; i < n; i++) gm_rmsnorm(t + (size_t)i * d, t + (size_t)i * d, post_norm, d, eps);
    return GM_OK;
}

