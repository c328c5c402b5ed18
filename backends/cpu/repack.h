/* backends/cpu/repack.h — the CPU backend's weights: the model's layer matrices in the layouts its kernels read
 * fastest (kernels/pack.h), each bound to the kernels of the backend's level (kernels/matmul.h gm_mm_weight): the
 * CPU's weight "buffer type", in ggml's words. The model keeps views of the file only; the reference backend, or
 * any other, never sees these copies.
 *
 * One set per model and level, shared: the first CPU backend on a model makes it, the others take a reference
 * (gm_cpu_weights_acquire finds it in the model's gm_backend_share), the last release frees it. Engines,
 * generators and embedders on one model hold one copy of the weights between them, however many there are. */
#ifndef GM_BACKENDS_CPU_REPACK_H
#define GM_BACKENDS_CPU_REPACK_H

#include "gemma.h"
#include "kernels/matmul.h"
#include "model/model.h"

typedef struct gm_cpu_weights gm_cpu_weights;

/* m's weights for the kernels of level isa: the set m's other CPU backends hold (made for the same level:
 * GM_ERR_ARG otherwise), else a new one. A new set makes the copies that its kernels need in place of the file's
 * rows before it returns, and the quantized x8 copies after, by up to two threads (until a matrix's copy is in
 * place it runs kernels with the same bits, on the file's rows). */
gm_status gm_cpu_weights_acquire(const gm_model *m, gm_isa isa, gm_cpu_weights **out, gm_error *err);
/* Drops the reference; the last one stops the copying threads and frees the copies. NULL: nothing. */
void gm_cpu_weights_release(gm_cpu_weights *w);
/* W (a view of the model) as the set's kernels run it, or NULL where the set holds nothing for W: then W runs
 * as it is, in the file's layout. */
const gm_mm_weight *gm_cpu_weights_find(const gm_cpu_weights *w, const gm_matrix *W);
/* Returns once every copy is in place. */
void gm_cpu_weights_wait(gm_cpu_weights *w);

#endif
