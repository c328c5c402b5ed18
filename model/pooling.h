/* model/pooling.h — what an embedding model does after its last layer: pool the final-normed hidden
 * states of a sequence into one vector, then apply the optional dense projections
 * (sentence-transformers' Pooling and Dense modules; llama.cpp's build_pooling and build_dense_out). */
#ifndef GM_MODEL_POOLING_H
#define GM_MODEL_POOLING_H

#include "gemma.h"
#include "model/model.h"

/* out[j] = mean over the n rows (d floats each) of hidden[i][j]; sums in double. */
void gm_pool_mean(const float *hidden, int n, int d, float *out);

/* The pooled vector x (d_model floats) through dense_2 then dense_3 where the model has them, into out
 * (config.embedding_dim floats). row: scratch of the widest input (dense rows are dequantized one at a
 * time), tmp: scratch of dense_2's output. */
gm_status gm_pool_project(const gm_model *m, const float *x, float *out, float *row, float *tmp, gm_error *err);

#endif
