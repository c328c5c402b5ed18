/* vision/vit_attention.h — the vision encoders' multi-head attention over every patch (bidirectional), on the
 * text model's matmul kernels: per head, its keys gathered and its values transposed once, then per chunk of
 * queries softmax(scale q k^T) v as two gm_matmul calls. Gemma 3 (siglip.c, when its AVX-512 path is off) and
 * Gemma 4 (gemma4v.c) differ only in the scale. Internal to vision/. */
#ifndef GM_VISION_VIT_ATTENTION_H
#define GM_VISION_VIT_ATTENTION_H

#include "gemma.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/matmul.h"
#include "kernels/threadpool.h"

typedef struct vit_attn {
    gm_pool *pool;
    gm_matmul_scratch *mm;
    gm_isa isa;
    const gm_cpu_kernels *kern;
    const float *q, *k, *v; /* n rows of ld floats, head h in columns [h * head_dim, (h + 1) * head_dim) */
    float *o;               /* the same shape: each head's output in its columns */
    int ld;
    float *kh, *vt;         /* scratch: n x head_dim each */
    float *qh, *scores, *oh; /* scratch: chunk x head_dim, chunk x n, chunk x head_dim */
    int n, n_head, head_dim, chunk;
    float scale;            /* multiplies q (1 / sqrt(head_dim) for Gemma 3; 1 for Gemma 4, whose norms set it) */
} vit_attn;

gm_status vit_attention(const vit_attn *a);

#endif
