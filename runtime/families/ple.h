/* runtime/families/ple.h — per-layer embeddings (PLE), shared by Gemma 3n (P = 256) and Gemma 4 (P from the file):
 *
 *   ple[l] = (RMS_norm((proj x0 / sqrt d)[l]) + tok_table[tok][l] sqrt P) / sqrt 2     (once per row)
 *   t      = RMS_post_norm(out_proj (gelu_tanh(gate y) * ple[l]))                      (per layer)
 *
 * x0 is the row's scaled embedding; rows given as embeddings take table row 0 (llama.cpp and HF). Where t
 * joins the hidden state is the model's business (3n: streams 1..3 after the correction; 4: the layer output). */
#ifndef GM_RUNTIME_FAMILIES_PLE_H
#define GM_RUNTIME_FAMILIES_PLE_H

#include <stddef.h>

#include "gemma.h"
#include "kernels/matmul.h"
#include "kernels/threadpool.h"
#include "runtime/backend.h"

/* ple: n x P L outputs; scratch: n x P L floats. */
gm_status gm_ple_inputs(const gm_matrix *tok_table, const gm_matrix *proj, const float *norm, int P, int L, float eps,
                        const gm_fwd_row *rows, const float *x, int n, int d, float *ple, float *scratch, gm_backend *be);
/* t: n x d; ple_stride: floats between rows' per-layer inputs; scratch: n x P. t may alias in. */
gm_status gm_ple_residual(const gm_matrix *gate, const gm_matrix *proj, const float *post_norm, float eps,
                          const float *in, const float *ple, size_t ple_stride, int n, int P, float *scratch, float *t,
                          gm_backend *be);

#endif
