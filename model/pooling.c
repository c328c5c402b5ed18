/* model/pooling.c — mean pooling and the dense projections of embedding models (see pooling.h).
 * One vector per input: the projections are matrix-vector products done row by row in double, which
 * costs microseconds next to the forward pass and needs no thread pool or packed kernels. */
#include "model/pooling.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "kernels/matmul.h"

void gm_pool_mean(const float *hidden, int n, int d, float *out) {
    for (int j = 0; j < d; j++) {
        double s = 0.0;
        for (int i = 0; i < n; i++) s += hidden[(size_t)i * d + j];
        out[j] = (float)(s / n);
    }
}

/* y = W x: W has rows outputs of cols inputs */
static gm_status dense(const gm_matrix *W, const float *x, float *y, float *row) {
    for (int64_t r = 0; r < W->rows; r++) {
        gm_status st = gm_matrix_row(W, r, row);
        if (st) return st;
        double s = 0.0;
        for (int64_t c = 0; c < W->cols; c++) s += (double)row[c] * x[c];
        y[r] = (float)s;
    }
    return GM_OK;
}

gm_status gm_pool_project(const gm_model *m, const float *x, float *out, float *row, float *tmp, gm_error *err) {
    const gm_config *c = &m->cfg;
    const float *cur = x;
    gm_status st = GM_OK;
    if (m->dense_2.rows > 0) {
        float *dst = m->dense_3.rows > 0 ? tmp : out;
        if ((st = dense(&m->dense_2, cur, dst, row))) return gm_fail(err, st, "embedding: dense_2 failed (%s)", gm_status_name(st));
        cur = dst;
    }
    if (m->dense_3.rows > 0) {
        if ((st = dense(&m->dense_3, cur, out, row))) return gm_fail(err, st, "embedding: dense_3 failed (%s)", gm_status_name(st));
        cur = out;
    }
    if (cur != out) memcpy(out, cur, (size_t)c->embedding_dim * sizeof *out);
    return GM_OK;
}
